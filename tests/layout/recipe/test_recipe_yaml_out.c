/* Model Optimizer YAML written from per-module choices (layout/recipe/recipe_yaml_out.h) reads back as the same choices; a mix one algorithm per recipe cannot express is refused naming the module. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "layout/recipe/recipe_yaml.h"
#include "layout/recipe/recipe_yaml_out.h"
#include "tests/helpers/craft.h"

TestSuite(recipe_yaml_out, .init = lwqt_setup, .fini = lwqt_teardown);

static lwq_quant_choice ch(lwq_qformat f, lwq_calib_algo a, int sweep)
{
    lwq_quant_choice c = {.format = f, .algo = a, .fp8_scale_sweep = sweep, .weight_format = f, .input_format = f};
    return c;
}

/* render, write, load back with lwq's YAML reader, and compare module by module */
static void roundtrip(lwq_calib_algo method, int sweep, lwq_kv_mode kv, const lwq_yaml_module *m, int n,
                      const char *const *probe, int nprobe)
{
    char why[512] = "";
    char *y = lwq_recipe_yaml_render("test mix", method, sweep, kv, m, n, why, sizeof why);
    cr_assert_not_null(y, "%s", why);
    lwqt_write_str("mix.yaml", y);
    free(y);
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_yaml_load(lwqt_path("mix.yaml"), NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.kv, kv);
    for (int i = 0; i < nprobe; i++) {
        const lwq_quant_choice *w = &m[i].c;
        lwq_quant_choice c = lwq_recipe_resolve(&r, probe[i]);
        cr_assert_eq(c.format, w->format, "%s: %s, wanted %s", probe[i], lwq_qformat_name(c.format),
                     lwq_qformat_name(w->format));
        if (w->format == LWQ_QFMT_NONE)
            continue;
        int cfp8 = c.algo != LWQ_ALGO_MAX, wfp8 = w->algo != LWQ_ALGO_MAX;
        if (w->format == LWQ_QFMT_FP8)
            cr_assert_eq(cfp8, wfp8, "%s: FP8 %s, wanted %s", probe[i], lwq_algo_name(c.algo), lwq_algo_name(w->algo));
        else
            cr_assert(c.algo == w->algo && (c.algo != LWQ_ALGO_MSE || c.fp8_scale_sweep == w->fp8_scale_sweep),
                      "%s: NVFP4 %s, wanted %s", probe[i], lwq_algo_name(c.algo), lwq_algo_name(w->algo));
        cr_assert_eq(c.has_input_amax, w->has_input_amax, "%s", probe[i]);
        if (w->has_input_amax)
            cr_assert_float_eq(c.input_amax, w->input_amax, 1e-6f * w->input_amax);
    }
    lwq_recipe_free(&r);
}

Test(recipe_yaml_out, max_mix_with_a_fixed_input_amax_reads_back)
{
    lwq_yaml_module m[5] = {
        {"model.layers.0.self_attn.q_proj", ch(LWQ_QFMT_FP8, LWQ_ALGO_MAX, 0)},
        {"model.layers.0.mlp.down_proj", ch(LWQ_QFMT_NVFP4, LWQ_ALGO_MAX, 0)},
        {"model.layers.1.mlp.experts.*", ch(LWQ_QFMT_NVFP4, LWQ_ALGO_MAX, 0)},
        {"model.layers.1.self_attn.o_proj", ch(LWQ_QFMT_NONE, LWQ_ALGO_MAX, 0)},
        {"model.layers.1.self_attn.k_proj", ch(LWQ_QFMT_FP8, LWQ_ALGO_MAX, 0)},
    };
    m[4].c.has_input_amax = 1;
    m[4].c.input_amax = 12.5f;
    const char *probe[5] = {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj",
                            "model.layers.1.mlp.experts.7.up_proj", "model.layers.1.self_attn.o_proj",
                            "model.layers.1.self_attn.k_proj"};
    roundtrip(LWQ_ALGO_MAX, 0, LWQ_KV_FP8_CAST, m, 5, probe, 5);
    roundtrip(LWQ_ALGO_MAX, 0, LWQ_KV_NONE, m, 4, probe, 4);
}

Test(recipe_yaml_out, weight_only_nvfp4_and_an_nvfp4_cast_cache_read_back)
{
    lwq_yaml_module m[2] = {
        {"model.layers.0.mlp.down_proj", ch(LWQ_QFMT_NVFP4, LWQ_ALGO_MAX, 0)},
        {"model.layers.0.self_attn.q_proj", ch(LWQ_QFMT_FP8, LWQ_ALGO_MAX, 0)},
    };
    m[0].c.weight_only = 1;
    const char *probe[2] = {"model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"};
    roundtrip(LWQ_ALGO_MAX, 0, LWQ_KV_NVFP4_CAST, m, 2, probe, 2);
    char why[256] = "";
    char *y = lwq_recipe_yaml_render("w", LWQ_ALGO_MAX, 0, LWQ_KV_NONE, m, 1, why, sizeof why);
    cr_assert_not_null(y, "%s", why);
    lwqt_write_str("w.yaml", y);
    free(y);
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_yaml_load(lwqt_path("w.yaml"), NULL, &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = lwq_recipe_resolve(&r, "model.layers.0.mlp.down_proj");
    cr_assert(c.weight_only && c.format == LWQ_QFMT_NVFP4, "W4A16 reads back as %s", lwq_choice_format_name(&c));
    lwq_recipe_free(&r);
}

Test(recipe_yaml_out, mse_static_and_dynamic_blocks_tell_the_algorithms_apart)
{
    /* under mse + sweep: NVFP4 static blocks = mse + sweep, dynamic = max; FP8 = max */
    lwq_yaml_module m[3] = {
        {"a.q_proj", ch(LWQ_QFMT_NVFP4, LWQ_ALGO_MSE, 1)},
        {"a.o_proj", ch(LWQ_QFMT_NVFP4, LWQ_ALGO_MAX, 0)},
        {"a.down_proj", ch(LWQ_QFMT_FP8, LWQ_ALGO_MAX, 0)},
    };
    const char *probe[3] = {"a.q_proj", "a.o_proj", "a.down_proj"};
    roundtrip(LWQ_ALGO_MSE, 1, LWQ_KV_FP8, m, 3, probe, 3);
    /* a max recipe whose mix needs mse: the writer picks the method that expresses it */
    roundtrip(LWQ_ALGO_MAX, 0, LWQ_KV_FP8, m, 3, probe, 3);
}

Test(recipe_yaml_out, a_mix_no_single_algorithm_expresses_is_refused)
{
    /* FP8 max needs max / local_hessian / mse + sweep; NVFP4 mse without the sweep needs plain mse */
    lwq_yaml_module m[2] = {
        {"a.k_proj", ch(LWQ_QFMT_FP8, LWQ_ALGO_MAX, 0)},
        {"a.up_proj", ch(LWQ_QFMT_NVFP4, LWQ_ALGO_MSE, 0)},
    };
    char why[512] = "";
    char *y = lwq_recipe_yaml_render("x", LWQ_ALGO_MSE, 0, LWQ_KV_NONE, m, 2, why, sizeof why);
    cr_assert_null(y);
    cr_assert(strstr(why, "a.k_proj") || strstr(why, "a.up_proj"), "%s", why);
}

/* A layer's experts glob is written so that it names Model Optimizer's fused-experts quantizers
 * too (transformers 5 holds the experts as one module: "...experts.gate_up_proj_weight_quantizer",
 * "...experts.down_proj_input_quantizer"); "...experts.*.weight_quantizer" left them unquantized
 * there.  lwq reads it back as every expert's projections. */
Test(recipe_yaml_out, an_experts_glob_names_the_fused_experts_quantizers)
{
    lwq_yaml_module m[1] = {{"model.layers.1.mlp.experts.*", ch(LWQ_QFMT_NVFP4, LWQ_ALGO_MAX, 0)}};
    char why[256] = "";
    char *y = lwq_recipe_yaml_render("e", LWQ_ALGO_MAX, 0, LWQ_KV_NONE, m, 1, why, sizeof why);
    cr_assert_not_null(y, "%s", why);
    const char *wq = "model.layers.1.mlp.experts.gate_up_proj_weight_quantizer";
    const char *iq = "model.layers.1.mlp.experts.down_proj_input_quantizer";
    int hits = 0;
    for (const char *l = strstr(y, "quantizer_name: '"); l; l = strstr(l + 1, "quantizer_name: '")) {
        char pat[256];
        const char *a = l + strlen("quantizer_name: '"), *b = strchr(a, '\'');
        cr_assert_not_null(b);
        snprintf(pat, sizeof pat, "%.*s", (int)(b - a), a);
        if (strcmp(pat, "*")) /* the leading disable-all */
            hits += lwq_glob_match(pat, wq) + lwq_glob_match(pat, iq);
    }
    cr_assert_eq(hits, 2, "the experts' weight and input patterns must name the fused quantizers:\n%s", y);
    free(y);
    const char *probe[1] = {"model.layers.1.mlp.experts.7.up_proj"};
    roundtrip(LWQ_ALGO_MAX, 0, LWQ_KV_NONE, m, 1, probe, 1);
}
