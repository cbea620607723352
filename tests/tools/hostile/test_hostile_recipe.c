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

/* <repo>/tests/data/modelopt_recipes */
static const char *recipe_root(void) { return lwqt_source_path("tests/data/modelopt_recipes"); }

static void make_model(void)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel");
}

/* r.yaml: FP8 everywhere but lm_head; `extra_algo` goes into quantize.algorithm, `extra_entry`
 * after the FP8 unit. */
static void write_yaml(const char *extra_algo, const char *extra_entry)
{
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    cr_assert_not_null(fp);
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  w: configs/ptq/units/w8a8_fp8_fp8\n"
                "  fp8: configs/numerics/fp8\n"
                "metadata: {recipe_type: ptq}\nquantize:\n  algorithm:\n    method: max\n%s  quant_cfg:\n"
                "    - $import: off\n    - $import: w\n%s    - {quantizer_name: '*lm_head*', enable: false}\n",
            extra_algo, extra_entry);
    fclose(fp);
}

/* F12: a recipe's checkpoint_dir put manifest.json and lock into any directory it named. */
Test(hostile_recipe, a_recipe_does_not_choose_where_lwq_writes)
{
    make_model();
    cr_assert_eq(mkdir(lwqt_path("elsewhere"), 0755), 0);
    lwqt_write_str("elsewhere/notes.txt", "not lwq's\n");
    char algo[1200];
    snprintf(algo, sizeof algo, "    layerwise:\n      enable: true\n      checkpoint_dir: %s\n", lwqt_path("elsewhere"));
    write_yaml(algo, "");
    char want[1500];
    snprintf(want, sizeof want, "r.yaml:11: quantize.algorithm.layerwise.checkpoint_dir is \"%s\"; a recipe does not "
             "choose where lwq writes: give --resume-dir %s to use that directory", lwqt_path("elsewhere"),
             lwqt_path("elsewhere"));
    const char *a[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.yaml"), "--recipe-root",
                       recipe_root(), "--calib-size", "4", "--calib-seq", "16", "--quiet", NULL};
    refused(a, want);
    /* nothing was written: not there, not beside the output, no output */
    cr_assert_eq(lwqt_sh("test \"$(ls -A %s)\" = notes.txt", lwqt_path("elsewhere")), 0, "files appeared in elsewhere/");
    struct stat st;
    cr_assert_neq(stat(lwqt_path("o"), &st), 0, "the refused run made its output directory");
    cr_assert_neq(stat(lwqt_path("o.layerwise_resume"), &st), 0, "the refused run made a resume directory");
}

/* F13: constant_amax 1e-50 became 0 as a float, and quantize blamed the calibration data. */
Test(hostile_recipe, a_constant_amax_that_vanishes_as_a_float_is_refused)
{
    make_model();
    write_yaml("", "    - {quantizer_name: '*mlp*input_quantizer', cfg: {$import: fp8, constant_amax: 1.0e-50}}\n");
    const char *a[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.yaml"), "--recipe-root",
                       recipe_root(), "--calib-size", "4", "--calib-seq", "16", "--quiet", NULL};
    refused(a, "r.yaml:12: quant_cfg entry '*mlp*input_quantizer': cfg.constant_amax 1.0e-50: expected a number in "
               "[3.16e-35, 3e+38] (the input scale it gives, amax / 2688, must be a normal float)");
}

Test(hostile_recipe, a_json_input_amax_that_vanishes_as_a_float_is_refused)
{
    char want[700];
    snprintf(want, sizeof want, "%s: rules[1].input_amax is out of range: a fixed input amax must be a number in "
             "[3.16e-35, 3e+38] (its input scale, amax / 2688, must be a normal float)", lwqt_path("r.json"));
    print_recipe_refused("{\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"},{\"match\":\"*\",\"quantizer\":\"input\","
                         "\"format\":\"fp8\",\"input_amax\":1e-50}]}",
                         want);
}
