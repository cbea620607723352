/* fuzz/fuzz_recipe_yaml.c — a Model Optimizer YAML recipe with its imports (`--recipe FILE.yaml
 * --recipe-root DIR`) through lwq_recipe_yaml_load, then what the engine does with the recipe
 * (lwq_fuzz_recipe_check).
 *
 * Input: an archive (fuzz/fuzz_util.h) whose main file is recipe.yaml and whose other files are
 * the units it imports, by their paths under the recipe root ("configs/ptq/units/kv_fp8.yaml"). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "fuzz/fuzz_util.h"
#include "layout/recipe/recipe_yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lwq_fuzz_quiet();
    lwq_fuzz_file f[LWQ_FUZZ_MAX_FILES];
    int nf = lwq_fuzz_split(d, n, "recipe.yaml", f, LWQ_FUZZ_MAX_FILES);
    if (nf == 0 || !lwq_fuzz_get(f, nf, "recipe.yaml"))
        return 0;
    const char *root = lwq_fuzz_scratch("yaml");
    if (lwq_fuzz_write(root, f, nf) != 0)
        return 0;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/recipe.yaml", root);
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    int rc = lwq_recipe_yaml_load(path, root, &r, &run, &e);
    lwq_fuzz_check_error(rc, &e, "lwq_recipe_yaml_load");
    if (rc == 0) {
        lwq_fuzz_recipe_check(&r);
        lwq_recipe_free(&r);
    }
    return 0;
}
