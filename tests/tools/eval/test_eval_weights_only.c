/* `lwq eval --weights-only`: a candidate is its dequantized weights alone (no activation or KV-cache quantization). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/run.h"

TestSuite(eval_weights_only, .init = lwqt_setup, .fini = lwqt_teardown);

#define SMALL_DATA "--data-size", "5", "--data-seq", "20", "--quiet"

static cJSON *load_json(const char *name) { return lwqt_json(lwqt_path(name)); }

static double num(const cJSON *o, const char *k) { return lwqt_num(o, k); }

static const cJSON *cand0(const cJSON *root)
{
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "candidates"), 0);
    cr_assert_not_null(c, "no candidate");
    return c;
}

/* Tensor `name` of the checkpoint `dir` (through its index): entry and bytes (owned). */
static void *read_tensor(const char *dir, const char *name, lwq_st_entry *out)
{
    char p[700];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    char *s = lwqt_slurp(p);
    cJSON *j = cJSON_Parse(s);
    free(s);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "weight_map"), name);
    if (!cJSON_IsString(f)) {
        cJSON_Delete(j);
        return NULL;
    }
    snprintf(p, sizeof p, "%s/%s", dir, f->valuestring);
    cJSON_Delete(j);
    lwq_st_file st;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(p, &st, &e), 0, "%s", e.msg);
    int k = lwq_st_find(&st, name);
    cr_assert(k >= 0, "%s has no %s", p, name);
    *out = st.entries[k];
    out->name = NULL;
    void *buf = malloc(out->end - out->begin + 1);
    cr_assert_eq(lwq_st_read(&st, st.data_start + out->begin, buf, out->end - out->begin, &e), 0, "%s", e.msg);
    lwq_st_free(&st);
    return buf;
}

/* dst: a copy of the F32 source src whose every linear quantized in q holds its weight dequantized
 * from q's bytes.  f32 holds each dequantized value exactly, so dst is the model that q encodes. */
static int write_dequantized_source(const char *src, const char *q, const char *dst)
{
    lwqt_copy_dir(src, dst);
    char p[700];
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(p, &f, &e), 0, "%s", e.msg);
    lwq_st_out_tensor *t = calloc((size_t)f.n, sizeof *t);
    void **data = calloc((size_t)f.n, sizeof *data);
    int replaced = 0;
    for (int k = 0; k < f.n; k++) { /* by_name: the writer wants names sorted */
        const lwq_st_entry *en = &f.entries[f.by_name[k]];
        cr_assert_eq(en->dtype, LWQ_F32, "the source must be F32: %s", en->name);
        t[k].name = en->name;
        t[k].dtype = en->dtype;
        t[k].ndim = en->ndim;
        memcpy(t[k].shape, en->shape, sizeof t[k].shape);
        data[k] = malloc(en->end - en->begin + 1);
        cr_assert_eq(lwq_st_read(&f, f.data_start + en->begin, data[k], en->end - en->begin, &e), 0, "%s", e.msg);
        t[k].data = data[k];
        size_t n = strlen(en->name);
        if (n < 7 || strcmp(en->name + n - 7, ".weight"))
            continue;
        char sname[600];
        snprintf(sname, sizeof sname, "%.*s.weight_scale", (int)(n - 7), en->name);
        lwq_st_entry we, se, s2e;
        void *w = read_tensor(q, en->name, &we), *sc = read_tensor(q, sname, &se);
        if (w && sc && (we.dtype == LWQ_U8 || we.dtype == LWQ_F8_E4M3)) {
            int64_t rows = en->shape[0], cols = en->shape[1], numel = lwq_st_numel(en);
            if (we.dtype == LWQ_U8) {
                snprintf(sname, sizeof sname, "%.*s.weight_scale_2", (int)(n - 7), en->name);
                float *s2 = read_tensor(q, sname, &s2e);
                cr_assert_not_null(s2, "%s", sname);
                cr_assert_eq(lwq_quant_nvfp4_dequant(w, sc, *s2, rows, cols, LWQ_F32, data[k], &e), 0, "%s", e.msg);
                free(s2);
            } else {
                cr_assert_eq(lwq_quant_fp8_dequant(w, *(const float *)sc, numel, LWQ_F32, data[k], &e), 0, "%s",
                             e.msg); /* 2-D linears and the 3-D conv1d alike */
            }
            replaced++;
        }
        free(w);
        free(sc);
    }
    cr_assert_eq(lwq_st_write_file(p, t, f.n, f.meta, f.nmeta, &e), 0, "%s", e.msg);
    for (int k = 0; k < f.n; k++)
        free(data[k]);
    free(data);
    free(t);
    lwq_st_free(&f);
    return replaced;
}

/* NVFP4 linears, an FP8 down_proj (MIXED_PRECISION) and a calibrated FP8 KV cache: evaluated
 * weights-only against the model the checkpoint encodes, the candidate stream is that model's
 * stream bit for bit; with the serving engine's quantization emulated it is not. */
Test(eval_weights_only, candidate_equals_its_dequantized_model_exactly)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads",
                        "4", "--kv-heads", "2", "--vocab", "512", "--dtype", "f32", "--seed", "5", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    lwqt_write_str("mix.json", "{\"kv_cache\": \"fp8\", \"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}, "
                               "{\"match\": \"*.down_proj\", \"format\": \"fp8\"}]}");
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--recipe", lwqt_path("mix.json"),
                       "--calib-size", "6", "--calib-seq", "24", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cr_assert_eq(write_dequantized_source(lwqt_path("m"), lwqt_path("q"), lwqt_path("deq")), 14,
                 "2 layers x 7 linears dequantized");

    const char *a[] = {"eval", lwqt_path("deq"), lwqt_path("q"), "--weights-only", SMALL_DATA, "--json",
                       lwqt_path("w.json"), NULL};
    cr_assert_eq(lwqt_run(a), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    char *out = lwqt_out();
    cr_assert(strstr(out, "weights only: dequantized weights; activations and KV cache unquantized"), "%s", out);
    free(out);
    cJSON *j = load_json("w.json");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "weights_only")));
    const cJSON *c = cand0(j);
    cr_assert_eq(num(c, "quantized_linears"), 14);
    cr_assert(num(c, "kl") == 0.0, "kl %.17g", num(c, "kl"));
    cr_assert(num(c, "ppl") == num(j, "ppl_src"), "ppl %.17g vs %.17g", num(c, "ppl"), num(j, "ppl_src"));
    cr_assert(num(c, "top1_agree") == 1.0);
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "layers"))
    {
        cr_assert(num(l, "rel_mse") == 0.0 && num(l, "max_abs") == 0.0, "layer %g: %g", num(l, "layer"),
                  num(l, "rel_mse"));
    }
    cJSON_Delete(j);

    const char *b[] = {"eval", lwqt_path("deq"), lwqt_path("q"), SMALL_DATA, "--json", lwqt_path("e.json"), NULL};
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    j = load_json("e.json");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "weights_only")));
    cr_assert(num(cand0(j), "kl") > 0, "activation and KV-cache quantization cost something");
    cJSON_Delete(j);
}

/* Qwen3-Next in FP8 with the depthwise conv1d quantized too ([channels, 1, kernel], per-tensor
 * FP8: a recipe's choice, as NVIDIA's production recipe makes it; the fp8 preset keeps it
 * unquantized, as Model Optimizer 0.47's does): the Gated DeltaNet linears and the conv1d are
 * dequantized.  The conv1d is no GEMM, so the emulated eval refuses it (naming --weights-only);
 * weights-only gives the dequantized model exactly. */
Test(eval_weights_only, dequantizes_the_fp8_conv1d_of_qwen3_next)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_next", "--hidden", "64", "--layers", "2",
                        "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--experts", "4", "--top-k", "2",
                        "--moe-intermediate", "32", "--shared-intermediate", "48", "--linear-value-heads", "4",
                        "--linear-value-dim", "16", "--vocab", "300", "--dtype", "f32", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    lwqt_write_str("fp8_conv.json", "{\"rules\": [{\"match\": \"*\", \"format\": \"fp8\"}, "
                                    "{\"match\": \"*.mlp.gate\", \"enable\": false}, "
                                    "{\"match\": \"*.shared_expert_gate\", \"enable\": false}]}");
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--recipe", lwqt_path("fp8_conv.json"),
                       "--calib-size", "4", "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    lwq_st_entry ce;
    void *cw = read_tensor(lwqt_path("q"), "model.layers.0.linear_attn.conv1d.weight", &ce);
    cr_assert(cw && ce.dtype == LWQ_F8_E4M3 && ce.ndim == 3 && ce.shape[1] == 1, "the conv1d is stored as FP8 [C, 1, K]");
    free(cw);
    int n = write_dequantized_source(lwqt_path("m"), lwqt_path("q"), lwqt_path("deq"));
    cr_assert_gt(n, 10);
    const char *a[] = {"eval", lwqt_path("deq"), lwqt_path("q"), SMALL_DATA, NULL};
    cr_assert_eq(lwqt_run(a), 2, "emulated: refused");
    char *err = lwqt_err();
    cr_assert(strstr(err, "linear_attn.conv1d") && strstr(err, "--weights-only"), "%s", err);
    free(err);
    const char *b[] = {"eval", lwqt_path("deq"), lwqt_path("q"), "--weights-only", SMALL_DATA, "--json",
                       lwqt_path("w.json"), NULL};
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *j = load_json("w.json");
    const cJSON *c = cand0(j);
    cr_assert_eq(num(c, "quantized_linears"), n);
    cr_assert(num(c, "kl") == 0.0 && num(c, "ppl") == num(j, "ppl_src"), "kl %.17g", num(c, "kl"));
    cJSON_Delete(j);
}

/* The FP8 KV cache of multi-head latent attention is not emulated; weights-only needs no KV
 * cache, so the checkpoint that declares one is evaluated as is. */
Test(eval_weights_only, accepts_the_kv_cache_of_latent_attention)
{
    const char *mkds[] = {"mkmodel", lwqt_path("ds"), "--arch", "deepseek_v3", "--hidden", "256", "--layers", "2",
                          "--vocab", "512", NULL};
    cr_assert_eq(lwqt_run(mkds), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *q[] = {"quantize", lwqt_path("ds"), "-o", lwqt_path("q"), "--qformat", "nvfp4", "--kv-cache", "fp8",
                       "--calib-size", "4", "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    const char *a[] = {"eval", lwqt_path("ds"), lwqt_path("q"), "--data-size", "3", "--data-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 2, "emulated: refused (multi-head latent attention)");
    const char *b[] = {"eval", lwqt_path("ds"), lwqt_path("q"), "--weights-only", "--data-size", "3", "--data-seq",
                       "16", "--quiet", "--json", lwqt_path("r.json"), NULL};
    cr_assert_eq(lwqt_run(b), 0, "%s", lwqt_slurp(lwqt_path("err.txt")));
    cJSON *j = load_json("r.json");
    cr_assert(num(cand0(j), "kl") > 0 && num(cand0(j), "quantized_linears") > 0);
    cJSON_Delete(j);
}
