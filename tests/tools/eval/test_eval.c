/* `lwq eval`: exact zero for a recipe that quantizes nothing, a written checkpoint equal to its in-memory candidate, refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/run.h"

TestSuite(eval, .init = lwqt_setup, .fini = lwqt_teardown);

static const char *mk(const char *name, const char *extra)
{
    char args[512];
    snprintf(args, sizeof args, "%s", extra ? extra : "");
    const char *argv[24] = {"mkmodel", lwqt_path(name), "--arch", "llama", "--hidden", "64", "--layers", "2",
                            "--heads", "4", "--kv-heads", "2", "--vocab", "512", "--seed", "3"};
    int n = 16;
    char *save = NULL;
    for (char *t = strtok_r(args, " ", &save); t && n < 23; t = strtok_r(NULL, " ", &save))
        argv[n++] = t;
    argv[n] = NULL;
    cr_assert_eq(lwqt_run(argv), 0, "mkmodel failed: %s", lwqt_slurp(lwqt_path("err.txt")));
    return lwqt_path(name);
}

static cJSON *load_json(const char *name) { return lwqt_json(lwqt_path(name)); }

static double num(const cJSON *o, const char *k) { return lwqt_num(o, k); }

static const cJSON *cand(const cJSON *root, int i)
{
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "candidates"), i);
    cr_assert_not_null(c, "no candidate %d", i);
    return c;
}

#define SMALL "--calib-size", "6", "--calib-seq", "24", "--data-size", "5", "--data-seq", "20", "--quiet"

Test(eval, recipe_quantizing_nothing_gives_zero_kl_and_equal_perplexity)
{
    const char *m = mk("m", NULL);
    lwqt_write_str("none.json", "{\"kv_cache\": \"none\", \"rules\": [{\"match\": \"*\", \"format\": \"none\"}]}");
    const char *args[] = {"eval", m, "--recipe", lwqt_path("none.json"), SMALL, "--json", lwqt_path("r.json"), NULL};
    cr_assert_eq(lwqt_run(args), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *j = load_json("r.json");
    const cJSON *c = cand(j, 0);
    cr_assert_gt(num(j, "tokens"), 50);
    cr_assert(num(c, "kl") == 0.0, "kl %.17g", num(c, "kl"));
    cr_assert(num(c, "ppl") == num(j, "ppl_src"), "ppl %.17g vs %.17g", num(c, "ppl"), num(j, "ppl_src"));
    cr_assert(num(c, "top1_agree") == 1.0);
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "layers"))
    {
        cr_assert(num(l, "rel_mse") == 0.0 && num(l, "max_abs") == 0.0);
    }
    cr_assert(num(c, "bits_per_weight") == 16.0, "BF16 linears: %g bits", num(c, "bits_per_weight"));
    cJSON_Delete(j);
}

Test(eval, quantized_dir_gives_the_numbers_of_its_in_memory_candidate)
{
    const char *m = mk("m", NULL);
    /* NVFP4 with FP8 down_proj (MIXED_PRECISION) and a calibrated FP8 KV cache */
    lwqt_write_str("mix.json", "{\"kv_cache\": \"fp8\", \"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}, "
                               "{\"match\": \"*.down_proj\", \"format\": \"fp8\"}]}");
    const char *q[] = {"quantize", m, "-o", lwqt_path("q"), "--recipe", lwqt_path("mix.json"), "--calib-size", "6",
                       "--calib-seq", "24", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *a[] = {"eval", m, "--recipe", lwqt_path("mix.json"), SMALL, "--json", lwqt_path("a.json"), NULL};
    cr_assert_eq(lwqt_run(a), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *b[] = {"eval", m, lwqt_path("q"), "--data-size", "5", "--data-seq", "20", "--quiet", "--json",
                       lwqt_path("b.json"), NULL};
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *ja = load_json("a.json"), *jb = load_json("b.json");
    const cJSON *ca = cand(ja, 0), *cb = cand(jb, 0);
    cr_assert(num(ca, "kl") > 0, "the candidate quantizes something");
    static const char *const keys[] = {"kl", "top1_agree", "ppl", "nll", "bits_per_weight", "output_bytes",
                                       "quantized_linears"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        cr_assert(num(ca, keys[k]) == num(cb, keys[k]), "%s: in memory %.17g, written %.17g", keys[k],
                  num(ca, keys[k]), num(cb, keys[k]));
    cr_assert(num(ja, "ppl_src") == num(jb, "ppl_src"));
    for (int L = 0; L < 2; L++) {
        const cJSON *la = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ca, "layers"), L);
        const cJSON *lb = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cb, "layers"), L);
        cr_assert(num(la, "rel_mse") == num(lb, "rel_mse") && num(la, "max_abs") == num(lb, "max_abs"), "layer %d", L);
    }
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

static void expect_refusal(const char *const *args, const char *needle1, const char *needle2)
{
    cr_assert_eq(lwqt_run(args), 2, "expected a refusal");
    char *err = lwqt_slurp(lwqt_path("err.txt"));
    cr_assert(strstr(err, needle1) && (!needle2 || strstr(err, needle2)), "message lacks \"%s\"/\"%s\": %s", needle1,
              needle2 ? needle2 : "", err);
    free(err);
}

Test(eval, refuses_a_checkpoint_whose_tensors_do_not_match_the_source)
{
    const char *m = mk("m", NULL);
    const char *q[] = {"quantize", m, "-o", lwqt_path("q"), "--qformat", "nvfp4", "--calib-size", "4",
                       "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *other = mk("other", "--intermediate 128");
    const char *a[] = {"eval", other, lwqt_path("q"), "--data-size", "2", "--data-seq", "8", "--quiet", NULL};
    expect_refusal(a, "model.layers.0.mlp.", "source");
}

Test(eval, refuses_an_unknown_quant_algo)
{
    const char *m = mk("m", NULL);
    const char *q[] = {"quantize", m, "-o", lwqt_path("q"), "--qformat", "nvfp4", "--calib-size", "4",
                       "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    lwqt_write_str("q/hf_quant_config.json", "{\"producer\": {\"name\": \"modelopt\"}, \"quantization\": "
                                             "{\"quant_algo\": \"W4A8_AWQ\", \"kv_cache_quant_algo\": null}}");
    const char *a[] = {"eval", m, lwqt_path("q"), "--data-size", "2", "--data-seq", "8", "--quiet", NULL};
    expect_refusal(a, "W4A8_AWQ", "not emulated");
}

Test(eval, refuses_a_checkpoint_that_is_not_quantized)
{
    const char *m = mk("m", NULL);
    const char *a[] = {"eval", m, m, "--data-size", "2", "--data-seq", "8", "--quiet", NULL};
    expect_refusal(a, "not a quantized checkpoint", NULL);
}

Test(eval, moe_layers_report_the_worst_experts)
{
    const char *argv_mk[] = {"mkmodel", lwqt_path("moe"), "--arch", "qwen3_moe", "--hidden", "64", "--layers", "2",
                             "--heads", "4", "--kv-heads", "2", "--experts", "8", "--top-k", "2", "--vocab", "512",
                             NULL};
    cr_assert_eq(lwqt_run(argv_mk), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    lwqt_write_str("none.json", "{\"kv_cache\": \"none\", \"rules\": []}");
    const char *a[] = {"eval", lwqt_path("moe"), "--qformat", "nvfp4_experts_only", SMALL, "--json", lwqt_path("r.json"),
                       NULL};
    /* two runs: the experts quantized, and nothing quantized */
    const char *b[] = {"eval", lwqt_path("moe"), "--recipe", lwqt_path("none.json"), SMALL, "--json",
                       lwqt_path("z.json"), NULL};
    cr_assert_eq(lwqt_run(a), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    for (int run = 0; run < 2; run++) {
        cJSON *j = load_json(run ? "z.json" : "r.json");
        const cJSON *l;
        cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(cand(j, 0), "layers"))
        {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(l, "worst_experts"), *x;
            cr_assert(cJSON_IsArray(w) && cJSON_GetArraySize(w) == 5, "five worst experts per MoE layer");
            double prev = INFINITY;
            cJSON_ArrayForEach(x, w)
            {
                double r = num(x, "rel_err");
                cr_assert(num(x, "tokens") > 0 && num(x, "expert") >= 0 && num(x, "expert") < 8);
                cr_assert(r <= prev, "sorted, largest first");
                cr_assert(run ? r == 0.0 : (r > 1e-4 && r < 1), "run %d: rel_err %g", run, r);
                prev = r;
            }
        }
        cJSON_Delete(j);
    }
}

Test(eval, results_do_not_depend_on_the_thread_count)
{
    const char *m = mk("m", NULL);
    const char *a[] = {"eval", m, "--qformat", "nvfp4,fp8", SMALL, "--threads", "1", "--json", lwqt_path("a.json"),
                       NULL};
    const char *b[] = {"eval", m, "--qformat", "nvfp4,fp8", SMALL, "--threads", "3", "--json", lwqt_path("b.json"),
                       NULL};
    cr_assert_eq(lwqt_run(a), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *ja = load_json("a.json"), *jb = load_json("b.json");
    /* timings differ; every measured number must not */
    const char *drop[] = {"wall_s", "calib_forward_s", "src_forward_s", "quantize_s", "cand_forward_s",
                          "peak_rss_bytes"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) {
        cJSON_DeleteItemFromObject(ja, drop[i]);
        cJSON_DeleteItemFromObject(jb, drop[i]);
    }
    char *sa = cJSON_PrintUnformatted(ja), *sb = cJSON_PrintUnformatted(jb);
    cr_assert_str_eq(sa, sb);
    free(sa);
    free(sb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

/* the hf_quant_config.json of NVIDIA's published Llama-3.1-70B-Instruct-FP8 (FP8, FP8 KV cache) */
static const char published_fp8[] =
    "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.23.0\"}, \"quantization\": {\"quant_algo\": \"FP8\", "
    "\"kv_cache_quant_algo\": \"FP8\", \"exclude_modules\": [\"lm_head\"]}}";

Test(eval, reads_a_model_optimizer_config_and_its_kv_cache_scales)
{
    const char *m = mk("m", NULL);
    lwqt_write_str("fp8.json", "{\"kv_cache\": \"fp8\", \"rules\": [{\"match\": \"*\", \"format\": \"fp8\"}]}");
    const char *q[] = {"quantize", m, "-o", lwqt_path("q"), "--recipe", lwqt_path("fp8.json"), "--calib-size", "6",
                       "--calib-seq", "24", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *a[] = {"eval", m, lwqt_path("q"), "--data-size", "5", "--data-seq", "20", "--quiet", "--json",
                       lwqt_path("a.json"), NULL};
    cr_assert_eq(lwqt_run(a), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    lwqt_write_str("q/hf_quant_config.json", published_fp8);
    const char *b[] = {"eval", m, lwqt_path("q"), "--data-size", "5", "--data-seq", "20", "--quiet", "--json",
                       lwqt_path("b.json"), NULL};
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *ja = load_json("a.json"), *jb = load_json("b.json");
    cr_assert(num(cand(ja, 0), "kl") > 0 && num(cand(ja, 0), "kl") == num(cand(jb, 0), "kl"));
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

Test(eval, the_fp8_kv_cache_is_emulated)
{
    const char *m = mk("m", NULL);
    lwqt_write_str("none.json", "{\"kv_cache\": \"none\", \"rules\": []}");
    lwqt_write_str("cast.json", "{\"kv_cache\": \"fp8_cast\", \"rules\": []}");
    lwqt_write_str("cal.json", "{\"kv_cache\": \"fp8\", \"rules\": []}");
    const char *a[] = {"eval", m, "--recipe", lwqt_path("none.json"), "--recipe", lwqt_path("cast.json"), "--recipe",
                       lwqt_path("cal.json"), SMALL, "--json", lwqt_path("r.json"), NULL};
    cr_assert_eq(lwqt_run(a), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *j = load_json("r.json");
    double k0 = num(cand(j, 0), "kl"), k1 = num(cand(j, 1), "kl"), k2 = num(cand(j, 2), "kl");
    cr_assert(k0 == 0.0, "no quantization at all: %g", k0);
    /* the weights quantize nothing, so the whole KL comes from k/v going through E4M3 */
    cr_assert(k1 > 0 && k2 > 0 && k1 != k2, "cast %g, calibrated %g", k1, k2);
    cJSON_Delete(j);
}

Test(eval, fp8_block_source_with_mla_needs_the_kv_cache_left_out)
{
    const char *mkds[] = {"mkmodel", lwqt_path("ds"), "--arch", "deepseek_v3", "--source-format", "fp8", "--hidden",
                          "256", "--layers", "2", "--vocab", "512", NULL};
    cr_assert_eq(lwqt_run(mkds), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *q[] = {"quantize", lwqt_path("ds"), "-o", lwqt_path("q"), "--qformat", "nvfp4", "--calib-size", "4",
                       "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *a[] = {"eval", lwqt_path("ds"), lwqt_path("q"), "--data-size", "3", "--data-seq", "16", "--quiet", NULL};
    expect_refusal(a, "multi-head latent attention", "--kv-cache none");
    const char *b[] = {"eval", lwqt_path("ds"), lwqt_path("q"), "--kv-cache", "none", "--data-size", "3", "--data-seq",
                       "16", "--quiet", "--json", lwqt_path("r.json"), NULL};
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *j = load_json("r.json");
    cr_assert(num(cand(j, 0), "kl") > 0 && num(cand(j, 0), "quantized_linears") > 0);
    cJSON_Delete(j);
}

/* Rewrite dir/shard without tensor `name`, and drop it from the index. */
static void drop_tensor(const char *dir, const char *shard, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, shard);
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(p, &f, &e), 0, "%s", e.msg);
    lwq_st_out_tensor *t = calloc((size_t)f.n, sizeof *t);
    void **data = calloc((size_t)f.n, sizeof *data);
    int n = 0, dropped = 0;
    for (int k = 0; k < f.n; k++) { /* by_name: the writer wants names sorted */
        const lwq_st_entry *en = &f.entries[f.by_name[k]];
        if (!strcmp(en->name, name)) {
            dropped = 1;
            continue;
        }
        data[n] = malloc(en->end - en->begin + 1);
        cr_assert_eq(lwq_st_read(&f, en->begin, data[n], en->end - en->begin, &e), 0, "%s", e.msg);
        t[n].name = en->name;
        t[n].dtype = en->dtype;
        t[n].ndim = en->ndim;
        memcpy(t[n].shape, en->shape, sizeof t[n].shape);
        t[n].data = data[n];
        n++;
    }
    cr_assert(dropped, "%s has no %s", p, name);
    cr_assert_eq(lwq_st_write_file(p, t, n, f.meta, f.nmeta, &e), 0, "%s", e.msg);
    for (int k = 0; k < n; k++)
        free(data[k]);
    free(data);
    free(t);
    lwq_st_free(&f);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    char *s = lwqt_slurp(p);
    cJSON *j = cJSON_Parse(s);
    free(s);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItemCaseSensitive(j, "weight_map"), name);
    char *out = cJSON_Print(j);
    FILE *fp = fopen(p, "w");
    cr_assert_not_null(fp);
    fputs(out, fp);
    fclose(fp);
    free(out);
    cJSON_Delete(j);
}

Test(eval, refuses_weight_only_quantization)
{
    const char *m = mk("m", NULL);
    const char *q[] = {"quantize", m, "-o", lwqt_path("q"), "--qformat", "nvfp4", "--calib-size", "4",
                       "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    drop_tensor(lwqt_path("q"), "model-layer-00001.safetensors", "model.layers.1.mlp.down_proj.input_scale");
    const char *a[] = {"eval", m, lwqt_path("q"), "--data-size", "2", "--data-seq", "8", "--quiet", NULL};
    expect_refusal(a, "model.layers.1.mlp.down_proj.input_scale is missing", "weight-only");
}

/* W4A16_NVFP4 (issue 33): the dequantized weights, no activation quantization; an output
 * declared so that still carries an input_scale is refused */
Test(eval, weight_only_nvfp4_is_evaluated_as_its_weights)
{
    const char *m = mk("m", NULL);
    const char *q[] = {"quantize", m, "-o", lwqt_path("q"), "--qformat", "w4a16_nvfp4", "--calib-size", "4",
                       "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *a[] = {"eval", m, lwqt_path("q"), "--data-size", "2", "--data-seq", "8", "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
}

Test(eval, plan_covers_every_stream)
{
    const char *m = mk("m", NULL);
    const char *a[] = {"plan", "--eval", m, "--qformat", "nvfp4,fp8", SMALL, NULL};
    cr_assert_eq(lwqt_run(a), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    char *out = lwqt_slurp(lwqt_path("out.txt"));
    cr_assert(strstr(out, "plan: host peak") && strstr(out, "(4 streams)") && strstr(out, "2 candidate(s)"), "%s", out);
    free(out);
}

/* Candidates with different calibration needs (local_hessian: 16x16 Hessian blocks, mse: none)
 * evaluated in one pass give what each gives alone.  GPTQ calibrates each layer on the quantized
 * previous layers: refused in memory, evaluated from its written checkpoint. */
Test(eval, candidates_in_one_pass_match_single_runs_and_gptq_goes_through_its_checkpoint)
{
    char m[512]; /* lwqt_path's buffers rotate: keep a copy */
    snprintf(m, sizeof m, "%s", mk("m", NULL));
    lwqt_write_str("lh.json", "{\"algorithm\": {\"method\": \"local_hessian\"}, \"kv_cache\": \"none\", "
                              "\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}]}");
    lwqt_write_str("ms.json", "{\"algorithm\": {\"method\": \"mse\"}, \"kv_cache\": \"none\", "
                              "\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}]}");
    lwqt_write_str("gq.json", "{\"algorithm\": {\"method\": \"gptq\"}, \"kv_cache\": \"none\", "
                              "\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}]}");
    const char *both[] = {"eval", m, "--recipe", lwqt_path("ms.json"), "--recipe", lwqt_path("lh.json"), SMALL,
                          "--json", lwqt_path("both.json"), NULL};
    const char *lh[] = {"eval", m, "--recipe", lwqt_path("lh.json"), SMALL, "--json", lwqt_path("lh1.json"), NULL};
    const char *q[] = {"quantize", m, "-o", lwqt_path("q"), "--recipe", lwqt_path("gq.json"), "--calib-size", "6",
                       "--calib-seq", "24", "--quiet", NULL};
    const char *qd[] = {"eval", m, lwqt_path("q"), "--data-size", "5", "--data-seq", "20", "--quiet", "--json",
                        lwqt_path("qd.json"), NULL};
    const char *const *runs[] = {both, lh, q, qd};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(lwqt_run(runs[i]), 0, "run %d: %s", i, lwqt_slurp(lwqt_path("err.txt")));
    cJSON *jb = load_json("both.json"), *jl = load_json("lh1.json"), *jq = load_json("qd.json");
    cr_assert(num(cand(jb, 1), "kl") == num(cand(jl, 0), "kl"), "local_hessian: %.17g vs %.17g",
              num(cand(jb, 1), "kl"), num(cand(jl, 0), "kl"));
    cr_assert(num(cand(jb, 0), "kl") != num(cand(jb, 1), "kl"), "the two algorithms differ");
    cr_assert(num(cand(jq, 0), "kl") > 0, "the GPTQ checkpoint evaluates");
    cJSON_Delete(jb);
    cJSON_Delete(jl);
    cJSON_Delete(jq);
    const char *g[] = {"eval", m, "--recipe", lwqt_path("gq.json"), SMALL, NULL};
    expect_refusal(g, "gptq", "lwq eval SRC QUANT_DIR");
}
