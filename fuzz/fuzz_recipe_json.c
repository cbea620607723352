/* fuzz/fuzz_recipe_json.c — a JSON recipe (`--recipe FILE.json`, hf_ptq's `--recipe`) through
 * lwq_recipe_parse, then what the engine does with it (lwq_fuzz_recipe_check: module resolution,
 * KV checks, the canonical JSON round trip). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz/fuzz_util.h"
#include "layout/recipe/recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lwq_fuzz_quiet();
    char *json = lwq_fuzz_cstr(d, n);
    lwq_recipe r;
    lwq_error e = {0};
    int rc = lwq_recipe_parse("recipe.json", json, &r, &e);
    lwq_fuzz_check_error(rc, &e, "lwq_recipe_parse");
    if (rc == 0) {
        lwq_fuzz_recipe_check(&r);
        lwq_recipe_free(&r);
    }
    free(json);
    return 0;
}
