/* Hostile recipes through `lwq quantize` (issue 28): repeated JSON keys, amaxes that vanish as a float, a recipe that picks where lwq writes. */
#include <criterion/criterion.h>
#include <sys/stat.h>

#include "tests/helpers/run.h"

TestSuite(hostile_recipe, .init = lwqt_setup, .fini = lwqt_teardown);

/* `lwq args...` exits 2 and its stderr holds `needle`. */
static void refused(const char *const *args, const char *needle)
{
    int rc = lwqt_run(args);
    char *err = lwqt_err();
    cr_assert_eq(rc, 2, "exit %d, expected 2; stderr: %s", rc, err);
    cr_assert(strstr(err, needle), "stderr lacks \"%s\": %s", needle, err);
    free(err);
}

static void print_recipe_refused(const char *json, const char *needle)
{
    lwqt_write_str("r.json", json);
    const char *a[] = {"quantize", "--print-recipe", "--recipe", lwqt_path("r.json"), NULL};
    refused(a, needle);
}

/* F1: the second "rules" list used to keep the first one's count (heap overflow) ... */
Test(hostile_recipe, rules_twice_second_empty_is_refused)
{
    char want[600];
    snprintf(want, sizeof want, "%s: key \"rules\" appears twice (each key may be given once)", lwqt_path("r.json"));
    print_recipe_refused("{\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"}],\"rules\":[]}", want);
}

/* ... or leaked the first list. */
Test(hostile_recipe, rules_twice_both_non_empty_is_refused)
{
    char want[600];
    snprintf(want, sizeof want, "%s: key \"rules\" appears twice", lwqt_path("r.json"));
    print_recipe_refused("{\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"}],\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"}]}",
                         want);
}

Test(hostile_recipe, a_key_twice_in_a_rule_or_the_algorithm_is_refused)
{
    char want[600];
    snprintf(want, sizeof want, "%s: rules[1]: key \"format\" appears twice", lwqt_path("r.json"));
    print_recipe_refused("{\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"},{\"match\":\"*.mlp.*\",\"format\":\"fp8\","
                         "\"format\":\"nvfp4\"}]}",
                         want);
    snprintf(want, sizeof want, "%s: algorithm: key \"method\" appears twice", lwqt_path("r.json"));
    print_recipe_refused("{\"algorithm\":{\"method\":\"mse\",\"method\":\"max\"},\"rules\":[]}", want);
}
