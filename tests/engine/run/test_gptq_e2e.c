/* `lwq quantize --algo gptq` end to end on synthetic models: whole-model = layerwise, thread and
 * batch invariance, every linear's output error at most max's, cold experts, plan, bad options. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "engine/run/engine.h"

#define CAL "--calib-size", "6", "--calib-seq", "24", "--quiet"

static void mk(const char *name, const char *arch, const char *extra)
{
    const char *a[] = {"mkmodel", lwqt_path(name), "--arch", arch, "--hidden", "64", "--layers", "2", "--heads", "4",
                       "--kv-heads", "2", "--vocab", "512", "--quiet", extra, extra ? "4" : NULL, NULL};
    cr_assert_eq(lwqt_run(a), 0, "mkmodel %s failed", arch);
}

static void quant(const char *model, const char *out, const char *const *extra)
{
    char m[600], o[600];
    snprintf(m, sizeof m, "%s", lwqt_path(model));
    snprintf(o, sizeof o, "%s", lwqt_path(out));
    const char *a[40] = {"quantize", m, "-o", o, "--algo", "gptq", CAL};
    int n = 11;
    for (int i = 0; extra && extra[i]; i++)
        a[n++] = extra[i];
    a[n] = NULL;
    int rc = lwqt_run(a);
    if (rc != 0)
        cr_assert_fail("quantize %s -> %s exited %d: %s", model, out, rc, lwqt_err());
}

static int same_tree(const char *a, const char *b)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "diff -r %s %s >/dev/null 2>&1", lwqt_path(a), lwqt_path(b));
    return system(cmd) == 0;
}

/* Tensors equal (metadata aside: the fingerprint in it names the batch size). */
static int same_tensors(const char *a, const char *b)
{
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s", lwqt_path(a));
    snprintf(pb, sizeof pb, "%s", lwqt_path(b));
    const char *d[] = {"diff", pa, pb, "--no-metadata", NULL};
    return lwqt_run(d) == 0;
}

/* The "gptq" objects of every layer of out/calibration_report.json. */
static void check_report(const char *out, int want_linears_per_layer)
{
    char p[700];
    snprintf(p, sizeof p, "%s/calibration_report.json", lwqt_path(out));
    char *s = lwqt_slurp(p);
    cJSON *r = cJSON_Parse(s);
    cr_assert_not_null(r);
    cJSON *layers = cJSON_GetObjectItem(r, "layers"), *l;
    cr_assert_eq(cJSON_GetArraySize(layers), 2);
    cJSON_ArrayForEach(l, layers)
    {
        cJSON *g = cJSON_GetObjectItem(l, "gptq");
        cr_assert_not_null(g, "%s: a layer without its GPTQ summary", out);
        if (want_linears_per_layer)
            cr_assert_eq(cJSON_GetObjectItem(g, "linears")->valueint, want_linears_per_layer);
        cr_assert_eq(cJSON_GetObjectItem(g, "linears_worse_than_max")->valueint, 0, "%s: %s", out, s);
        cr_assert_leq(cJSON_GetObjectItem(g, "worst_ratio_to_max")->valuedouble, 1.0);
        cr_assert_lt(cJSON_GetObjectItem(g, "mean_rel_output_error")->valuedouble,
                     cJSON_GetObjectItem(g, "mean_rel_output_error_max")->valuedouble);
    }
    cJSON_Delete(r);
    free(s);
}

TestSuite(gptq_e2e, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 240);

Test(gptq_e2e, whole_model_equals_layerwise)
{
    mk("moe", "qwen3_moe", "--experts");
    const char *ao[] = {"--gptq-act-order", NULL};
    const char *wm[] = {"--gptq-act-order", "--whole-model", NULL};
    quant("moe", "lw", ao);
    quant("moe", "wm", wm);
    cr_assert(same_tree("lw", "wm"), "--whole-model output differs from the layerwise run");
}

Test(gptq_e2e, same_bytes_for_any_thread_count_and_batch_size)
{
    mk("m", "llama", NULL);
    const char *t1[] = {"--threads", "1", NULL}, *t2[] = {"--threads", "2", NULL};
    const char *b3[] = {"--batch-size", "3", NULL};
    quant("m", "t1", t1);
    quant("m", "t2", t2);
    quant("m", "b3", b3);
    cr_assert(same_tree("t1", "t2"), "GPTQ output depends on the thread count");
    cr_assert(same_tensors("t1", "b3"), "GPTQ output depends on the batch size: %s", lwqt_out());
}

/* nvfp4 and fp8 on a dense and a MoE model: no linear worse than max, lower on average. */
Test(gptq_e2e, every_linear_at_most_max_calibration_error)
{
    mk("m", "llama", NULL);
    mk("moe", "qwen3_moe", "--experts");
    const char *fp8[] = {"--qformat", "fp8", NULL};
    quant("m", "n", NULL);
    quant("m", "f", fp8);
    quant("moe", "mn", NULL);
    quant("moe", "mf", fp8);
    check_report("n", 7);
    check_report("f", 7);
    check_report("mn", 0);
    check_report("mf", 0);
}

Test(gptq_e2e, cold_experts_take_the_max_path)
{
    const char *a[] = {"mkmodel", lwqt_path("moe"), "--arch", "qwen3_moe", "--hidden", "64", "--layers", "2",
                       "--experts", "32", "--top-k", "2", "--vocab", "512", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 0);
    char m[600], o[600];
    snprintf(m, sizeof m, "%s", lwqt_path("moe"));
    snprintf(o, sizeof o, "%s", lwqt_path("o"));
    /* 4 tokens reach at most 8 of the 32 experts */
    const char *q[] = {"quantize", m, "-o", o, "--algo", "gptq", "--calib-size", "1", "--calib-seq", "4", "--quiet",
                       NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_err());
    char p[700];
    snprintf(p, sizeof p, "%s/calibration_report.json", o);
    char *s = lwqt_slurp(p);
    cJSON *r = cJSON_Parse(s), *l;
    cr_assert_not_null(r);
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(r, "layers"))
    {
        cJSON *g = cJSON_GetObjectItem(l, "gptq");
        int cold = cJSON_GetObjectItem(l, "cold_experts")->valueint;
        cr_assert_geq(cold, 24, "%s", s);
        /* each cold expert's 3 linears on the max path; the calibrated ones on GPTQ */
        cr_assert_eq(cJSON_GetObjectItem(g, "cold_on_max_path")->valueint, 3 * cold, "%s", s);
        cr_assert_eq(cJSON_GetObjectItem(g, "linears")->valueint, 4 + 3 * (32 - cold), "%s", s);
    }
    cJSON_Delete(r);
    free(s);
}

Test(gptq_e2e, gptq_options_without_gptq_are_refused)
{
    mk("m", "llama", NULL);
    char m[600], o[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(o, sizeof o, "%s", lwqt_path("o"));
    const char *q[] = {"quantize", m, "-o", o, "--gptq-damp", "0.1", CAL, NULL};
    cr_assert_eq(lwqt_run(q), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "--gptq-damp") && strstr(err, "--algo gptq"), "%s", err);
    free(err);
    const char *q2[] = {"quantize", m, "-o", o, "--algo", "gptq", "--gptq-damp", "0", CAL, NULL};
    cr_assert_eq(lwqt_run(q2), 2);
    err = lwqt_err();
    cr_assert(strstr(err, "(0, 10]"), "%s", err);
    free(err);
}

/* The plan counts one in x in double Hessian per distinct input of a layer. */
Test(gptq_e2e, plan_predicts_hessian_memory)
{
    mk("m", "llama", NULL);
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4", &r, &e), 0);
    r.algo = LWQ_ALGO_GPTQ;
    int32_t ids[4] = {1, 2, 3, 4}, *pid = ids;
    int64_t len = 4;
    lwq_calib_set cs = {.n = 1, .ids = &pid, .len = &len};
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    lwq_quantize_opts o = {.model_dir = m, .recipe = &r, .calib = &cs, .batch_size = 1, .device = LWQ_DEVICE_CPU};
    lwq_mem_plan p;
    cr_assert_eq(lwq_quantize_plan(&o, &p, &e), 0, "%s", e.msg);
    char cfgp[700];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", m);
    char *cfg = lwqt_slurp(cfgp);
    cJSON *c = cJSON_Parse(cfg);
    uint64_t h = (uint64_t)cJSON_GetObjectItem(c, "hidden_size")->valueint;
    uint64_t im = (uint64_t)cJSON_GetObjectItem(c, "intermediate_size")->valueint;
    /* q/k/v share one (hidden), o_proj one (heads x head_dim = hidden), gate/up one, down one;
     * each an in x in double partial and the in (in + 1) / 2 fixed-point sums (16 bytes) */
    uint64_t one = 3 * (h * h * 8 + h * (h + 1) / 2 * 16) + im * im * 8 + im * (im + 1) / 2 * 16;
    cr_assert_eq(p.gptq_hessian_bytes, one);
    cr_assert_geq(p.stats_bytes, p.gptq_hessian_bytes);
    o.whole_model = 1; /* every layer's sums resident together */
    cr_assert_eq(lwq_quantize_plan(&o, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p.gptq_hessian_bytes, 2 * one);
    /* on the GPU: the factor of the widest input (2 in^2 doubles) at least, in GPTQ's own term */
    o.whole_model = 0;
    o.device = LWQ_DEVICE_CUDA;
    cr_assert_eq(lwq_quantize_plan(&o, &p, &e), 0, "%s", e.msg);
    uint64_t wide = h > im ? h : im;
    cr_assert_geq(p.gpu_gptq_bytes, 2 * wide * wide * 8);
    cJSON_Delete(c);
    free(cfg);
    lwq_recipe_free(&r);
}

/* Large linears are measured on a row sample (LWQ_GPTQ_REPORT_WORK lowers the budget): the report
 * says so, and the shards do not change. */
Test(gptq_e2e, error_report_samples_rows_of_large_linears)
{
    mk("m", "llama", NULL);
    quant("m", "full", NULL);
    setenv("LWQ_GPTQ_REPORT_WORK", "100000", 1);
    quant("m", "samp", NULL);
    unsetenv("LWQ_GPTQ_REPORT_WORK");
    cr_assert(same_tensors("full", "samp"), "the error report changed the output");
    char p[700];
    snprintf(p, sizeof p, "%s/calibration_report.json", lwqt_path("samp"));
    char *s = lwqt_slurp(p);
    cr_assert(strstr(s, "\"linears_measured_on_a_row_sample\":\t7"), "%s", s);
    free(s);
    snprintf(p, sizeof p, "%s/calibration_report.json", lwqt_path("full"));
    s = lwqt_slurp(p);
    cr_assert_null(strstr(s, "row_sample"), "%s", s);
    free(s);
}

/* lwq eval's in-memory candidates calibrate on the source stream: a GPTQ recipe there is refused
 * with the way to evaluate GPTQ (quantize, then eval the output). */
Test(gptq_e2e, eval_refuses_in_memory_gptq_candidates)
{
    mk("m", "llama", NULL);
    lwqt_write_str("g.json", "{\"algorithm\": {\"method\": \"gptq\"}, \"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}]}");
    char m[600], r[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(r, sizeof r, "%s", lwqt_path("g.json"));
    const char *a[] = {"eval", m, "--recipe", r, "--calib-size", "2", "--calib-seq", "16", "--data-size", "2",
                       "--data-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "gptq") && strstr(err, "lwq eval SRC QUANT_DIR"), "%s", err);
    free(err);
}

