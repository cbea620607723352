/* GPTQ on a real trained model (llama2.c stories260K): `lwq eval` KL and perplexity of GPTQ against max and mse + sweep. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "tests/helpers/model/llama2c.h"

TestSuite(gptq_stories, .init = lwqt_setup, .fini = lwqt_teardown);

enum { NSEQ = 16, LEN = 64 };

/* Token sequences sampled from the model itself (it has no tokenizer), as input_ids lines. */
static void write_samples(const llama2c_model *m, const char *name, uint64_t seed)
{
    FILE *fp = fopen(lwqt_path(name), "w");
    cr_assert_not_null(fp);
    int32_t tok[LEN];
    for (int s = 0; s < NSEQ; s++) {
        cr_assert_eq(llama2c_sample(m, seed + (uint64_t)s * 7919, 1, LEN, tok), 0);
        fprintf(fp, "{\"input_ids\": [");
        for (int t = 0; t < LEN; t++)
            fprintf(fp, "%s%d", t ? ", " : "", tok[t]);
        fprintf(fp, "]}\n");
    }
    fclose(fp);
}

static const cJSON *get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    cr_assert_not_null(v, "no \"%s\" in the eval JSON", k);
    return v;
}

typedef struct res {
    double kl, ppl, top1, ppl_src;
} res;

/* quantize with recipe `name`.json, then lwq eval SRC OUT on the held-out samples */
static res run(const char *name)
{
    char recipe[600], out[600], json[600], cal[600], data[600], src[600];
    snprintf(recipe, sizeof recipe, "%s.json", lwqt_path(name));
    snprintf(out, sizeof out, "%s.q", lwqt_path(name));
    snprintf(json, sizeof json, "%s.eval.json", lwqt_path(name));
    snprintf(cal, sizeof cal, "%s", lwqt_path("calib.jsonl"));
    snprintf(data, sizeof data, "%s", lwqt_path("data.jsonl"));
    snprintf(src, sizeof src, "%s", lwqt_path("stories"));
    const char *q[] = {"quantize", src, "-o", out, "--recipe", recipe, "--calib", cal, "--calib-size", "16",
                       "--calib-seq", "64", "--quiet", NULL};
    int rc = lwqt_run(q);
    if (rc)
        cr_assert_fail("quantize %s exited %d: %s", name, rc, lwqt_err());
    const char *ev[] = {"eval", src, out, "--data", data, "--data-size", "16", "--data-seq", "64", "--quiet",
                        "--json", json, NULL};
    if ((rc = lwqt_run(ev)))
        cr_assert_fail("eval %s exited %d: %s", name, rc, lwqt_err());
    char *s = lwqt_slurp(json);
    cJSON *j = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(j);
    const cJSON *c = cJSON_GetArrayItem(get(j, "candidates"), 0);
    cr_assert_not_null(c);
    res r = {get(c, "kl")->valuedouble, get(c, "ppl")->valuedouble, get(c, "top1_agree")->valuedouble,
             get(j, "ppl_src")->valuedouble};
    cJSON_Delete(j);
    fprintf(stderr, "stories260K %-24s KL %.6f  top-1 %.4f  perplexity %.4f (source %.4f)\n", name, r.kl, r.top1,
            r.ppl, r.ppl_src);
    return r;
}

Test(gptq_stories, gptq_kl_below_max_and_mse_sweep, .timeout = 600)
{
    char buf[512], why[512];
    const char *bin = llama2c_fixture_path(buf, sizeof buf, why, sizeof why);
    if (!bin)
        cr_skip("%s", why);
    lwq_error e = {0};
    llama2c_model m;
    cr_assert_eq(llama2c_load(bin, &m, &e), 0, "%s", e.msg);
    cr_assert_eq(mkdir(lwqt_path("stories"), 0755), 0);
    cr_assert_eq(llama2c_to_hf(&m, lwqt_path("stories"), &e), 0, "%s", e.msg);
    write_samples(&m, "data.jsonl", 1000);
    write_samples(&m, "calib.jsonl", 2000);
    llama2c_free(&m);
    /* hidden_dim 172 is not a multiple of 16: down_proj is FP8 in the NVFP4 recipes */
#define MIX "\"kv_cache\": \"none\", \"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}, " \
            "{\"match\": \"*.down_proj\", \"format\": \"fp8\"}]}"
#define FP8 "\"kv_cache\": \"none\", \"rules\": [{\"match\": \"*\", \"format\": \"fp8\"}]}"
    lwqt_write_str("nvfp4_max.json", "{\"algorithm\": {\"method\": \"max\"}, " MIX);
    lwqt_write_str("nvfp4_mse_sweep.json", "{\"algorithm\": {\"method\": \"mse\", \"fp8_scale_sweep\": true}, " MIX);
    lwqt_write_str("nvfp4_gptq.json", "{\"algorithm\": {\"method\": \"gptq\"}, " MIX);
    lwqt_write_str("nvfp4_gptq_act_order.json", "{\"algorithm\": {\"method\": \"gptq\", \"gptq_act_order\": true}, " MIX);
    lwqt_write_str("fp8_max.json", "{\"algorithm\": {\"method\": \"max\"}, " FP8);
    lwqt_write_str("fp8_gptq.json", "{\"algorithm\": {\"method\": \"gptq\"}, " FP8);
    res mx = run("nvfp4_max"), ms = run("nvfp4_mse_sweep"), g = run("nvfp4_gptq"), ga = run("nvfp4_gptq_act_order");
    res f = run("fp8_max"), fg = run("fp8_gptq");
    /* measured (perf/RESULTS.md): NVFP4 KL max 2.49, mse + sweep 2.35, GPTQ 2.34, GPTQ act order
     * 2.24; FP8 max 0.50, GPTQ 0.42.  Plain GPTQ and mse + sweep are too close to order in a test. */
    cr_assert_lt(g.kl, mx.kl, "NVFP4: GPTQ KL %g not below max %g", g.kl, mx.kl);
    cr_assert_lt(ga.kl, ms.kl, "NVFP4: GPTQ act-order KL %g not below mse + sweep %g", ga.kl, ms.kl);
    cr_assert_lt(ga.ppl, mx.ppl, "NVFP4: GPTQ act-order perplexity %g not below max %g", ga.ppl, mx.ppl);
    cr_assert_lt(fg.kl, f.kl, "FP8: GPTQ KL %g not below max %g", fg.kl, f.kl);
}
