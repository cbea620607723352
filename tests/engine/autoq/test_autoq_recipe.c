/* lwq quantize --recipe on a Model Optimizer auto_quantize recipe: the same search, and bytes, as its --auto-quantize-* options; what lwq lacks is refused by name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/run.h"

TestSuite(autoq_recipe, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

/* Model Optimizer 0.47's huggingface/qwen3_6_moe/auto_quantize/w4a16_nvfp4_fp8_at_6p0bits-active_moe
 * (comments left out), with score_size as `size` */
static void write_recipe(const char *rel, const char *size, const char *extra)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "# modelopt-schema: modelopt.recipe.config.ModelOptAutoQuantizeRecipe\n"
             "imports:\n"
             "  base_disabled_layers: configs/auto_quantize/units/base_disabled_layers\n"
             "  base_cost_excluded_layers: configs/auto_quantize/units/base_cost_excluded_layers\n"
             "  fp8: configs/ptq/presets/model/fp8\n"
             "  w4a16_nvfp4: configs/ptq/presets/model/w4a16_nvfp4\n"
             "metadata:\n"
             "  recipe_type: auto_quantize\n"
             "  description: >-\n"
             "    Qwen3.6 MoE: FP8 + NVFP4-weight-only per-layer search at 6.0 effective bits.\n"
             "auto_quantize:\n"
             "  constraints:\n"
             "    effective_bits: 6.0\n"
             "    cost_model: active_moe\n"
             "    cost:\n"
             "      active_moe_expert_ratio: 0.03125\n"
             "  candidate_formats:\n"
             "    - $import: fp8\n"
             "    - $import: w4a16_nvfp4\n"
             "  auto_quantize_method: gradient\n"
             "  score_size: %s\n"
             "  disabled_layers:\n"
             "    - $import: base_disabled_layers\n"
             "    - \"*shared_expert_gate*\"\n"
             "  cost_excluded_layers:\n"
             "    - $import: base_cost_excluded_layers\n%s",
             size, extra);
    lwqt_write_str(rel, buf);
}

static void make_moe(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch qwen3_moe --experts 4 --top-k 2 --hidden 128 --layers 3 --heads 4 "
                         "--kv-heads 2 --vocab 512 --quiet", lwqt_bin(), lwqt_path("m")), 0);
}

static int run(const char *out, const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s " QARGS " %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path(out), extra,
                   lwqt_path("stderr.txt"));
}

/* the recipe is --qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4,none with
 * the active_moe cost model at 0.03125 and its score size: the same output, byte for byte */
Test(autoq_recipe, the_recipe_runs_as_its_options)
{
    make_moe();
    write_recipe("aq.yaml", "1", "");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_eq(run("a", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(run("b", "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4,none "
                          "--auto-quantize-cost-model active_moe --auto-quantize-active-moe-ratio 0.03125 "
                          "--auto-quantize-score-size 1"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("a"), lwqt_path("b")), 0);
    cr_assert_eq(lwqt_sh("test -s %s", lwqt_path("a/auto_quantize.json")), 0, "no search ran");
}

/* module_search_spaces (the module_spaces recipe) is refused by name, and nothing is written */
Test(autoq_recipe, module_search_spaces_is_refused_by_name)
{
    make_moe();
    write_recipe("aq.yaml", "1", "  module_search_spaces:\n    - module_name_patterns: ['*mlp.experts*']\n"
                                 "      candidate_formats: [{$import: w4a16_nvfp4}]\n");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_eq(run("a", extra), 2);
    const char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "module_search_spaces is not implemented"), "%s", err);
    cr_assert_neq(lwqt_sh("test -e %s", lwqt_path("a")), 0, "an output was written");
}

/* lwq plan does not run the search: the recipe is refused there rather than planned as its base */
Test(autoq_recipe, plan_refuses_it)
{
    make_moe();
    write_recipe("aq.yaml", "1", "");
    cr_assert_neq(lwqt_sh("%s plan %s --recipe %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path("aq.yaml"),
                          lwqt_path("stderr.txt")), 0);
    const char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "lwq plan does not run the auto-quantize search"), "%s", err);
}
