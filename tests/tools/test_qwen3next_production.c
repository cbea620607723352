/* End to end on a synthetic 4-layer qwen3_next (3 Gated DeltaNet layers, 1 gated-attention layer,
 * MoE + shared expert everywhere, MTP weights) with the qwen3next_production preset:
 *   - every tensor in the recipe's scope is quantized as stated (routed experts NVFP4 with the
 *     MSE + FP8 scale sweep search, self_attn q/k/v/o and linear_attn in_proj_qkvz / in_proj_ba /
 *     conv1d / out_proj FP8 with per-tensor max scales, as Model Optimizer leaves FP8 weights under
 *     the scale sweep), checked by dtype and shape for all and
 *     byte for byte against the reference quantizers for one expert and one conv1d;
 *   - everything else is the source BF16, carries no scale, and its module is excluded (routers,
 *     shared experts, shared_expert_gate, lm_head, mtp*); no k/v scales (KV cache fp8_cast);
 *   - `lwq verify` passes; layerwise and --whole-model outputs are byte-identical (`lwq diff`);
 *   - the shipped recipes/qwen3next_production.json is the preset. */
#include <criterion/criterion.h>

#include "kernels/quant.h"
#include "layout/arch.h"
#include "layout/checkpoint.h"
#include "layout/recipe.h"
#include "layout/safetensors.h"
#include "tests/helpers/run.h"

TestSuite(qwen3next_production, .init = lwqt_setup, .fini = lwqt_teardown);

static void make_and_quantize_opt(const char *out, int whole, const char *extra)
{
    if (access(lwqt_path("m/config.json"), F_OK) != 0) {
        const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_next", "--hidden", "64",
                            "--layers", "4", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                            "--experts", "4", "--top-k", "2", "--moe-intermediate", "32",
                            "--shared-intermediate", "48", "--linear-value-heads", "4",
                            "--linear-value-dim", "8", "--vocab", "300", "--mtp", "--quiet", NULL};
        cr_assert_eq(lwqt_run(mk), 0, "mkmodel failed");
    }
    const char *q[] = {"quantize", lwqt_path("m"), "-o", out, "--qformat", "qwen3next_production",
                       "--calib-size", "8", "--calib-seq", "32", whole ? "--whole-model" : extra,
                       whole ? extra : NULL, NULL};
    int rc = lwqt_run(q);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "quantize failed: %s", err);
    free(err);
}

static void make_and_quantize(const char *out, int whole) { make_and_quantize_opt(out, whole, NULL); }

/* What the production recipe says for a linear of the plan. */
static lwq_qformat expected(const lwq_arch_linear *l)
{
    switch (l->role) {
    case LWQ_ROLE_EXPERT_GATE:
    case LWQ_ROLE_EXPERT_UP:
    case LWQ_ROLE_EXPERT_DOWN: return LWQ_QFMT_NVFP4;
    case LWQ_ROLE_Q:
    case LWQ_ROLE_K:
    case LWQ_ROLE_V:
    case LWQ_ROLE_O:
    case LWQ_ROLE_LIN_QKVZ:
    case LWQ_ROLE_LIN_BA:
    case LWQ_ROLE_LIN_CONV:
    case LWQ_ROLE_LIN_OUT: return LWQ_QFMT_FP8;
    default: return LWQ_QFMT_NONE;
    }
}

static const lwq_st_entry *entry(const lwq_st_file *f, const char *module, const char *suffix)
{
    char n[256];
    snprintf(n, sizeof n, "%s%s", module, suffix);
    int k = lwq_st_find(f, n);
    return k < 0 ? NULL : &f->entries[k];
}

static int is_scalar_f32(const lwq_st_entry *t) { return t && t->dtype == LWQ_F32 && t->ndim == 0; }

static int in_list(const cJSON *a, const char *s)
{
    for (const cJSON *x = a->child; x; x = x->next)
        if (cJSON_IsString(x) && !strcmp(x->valuestring, s))
            return 1;
    return 0;
}

/* The quantized_layers entry of a linear: its own, or that of the module above it ("...mlp.experts"). */
static const cJSON *listed(const cJSON *ql, const char *name)
{
    char n[256];
    snprintf(n, sizeof n, "%s", name);
    for (char *dot;; *dot = 0) {
        const cJSON *x = cJSON_GetObjectItem(ql, n);
        if (x || !(dot = strrchr(n, '.')))
            return x;
    }
}

static void *read_entry(const lwq_st_file *f, const lwq_st_entry *t)
{
    lwq_error e = {0};
    void *b = malloc(t->end - t->begin + 1);
    cr_assert_eq(lwq_st_read(f, f->data_start + t->begin, b, t->end - t->begin, &e), 0, "%s", e.msg);
    return b;
}

static void *read_src(const lwq_ckpt *c, const char *name)
{
    lwq_error e = {0};
    const lwq_ckpt_tensor *t = lwq_ckpt_find(c, name);
    cr_assert_not_null(t, "source lacks %s", name);
    void *b = malloc(t->nbytes);
    cr_assert_eq(lwq_ckpt_read_tensor(c, t, b, &e), 0, "%s", e.msg);
    return b;
}

Test(qwen3next_production, every_tensor_in_scope_is_quantized_as_stated_and_the_rest_is_bf16)
{
    make_and_quantize(lwqt_path("q"), 0);
    const char *v[] = {"verify", lwqt_path("q"), NULL};
    cr_assert_eq(lwqt_run(v), 0, "lwq verify failed");

    lwq_error e = {0};
    lwq_ckpt src;
    cr_assert_eq(lwq_ckpt_open(lwqt_path("m"), &src, &e), 0, "%s", e.msg);
    char *hq = lwqt_slurp(lwqt_path("q/hf_quant_config.json"));
    cJSON *root = cJSON_Parse(hq);
    free(hq);
    const cJSON *qz = cJSON_GetObjectItem(root, "quantization");
    const cJSON *ex = cJSON_GetObjectItem(qz, "exclude_modules");
    const cJSON *ql = cJSON_GetObjectItem(qz, "quantized_layers");
    cr_assert_str_eq(cJSON_GetObjectItem(qz, "kv_cache_quant_algo")->valuestring, "FP8");
    cr_assert_str_eq(cJSON_GetObjectItem(qz, "quant_algo")->valuestring, "MIXED_PRECISION");
    /* MIXED_PRECISION as Model Optimizer writes it: only the MTP block excluded (an unlisted module
     * is unquantized), each layer's fused experts one entry */
    cr_assert(in_list(ex, "mtp*") && !in_list(ex, "lm_head") && cJSON_GetArraySize(ex) == 1,
              "only mtp* is excluded");
    cr_assert_not_null(cJSON_GetObjectItem(ql, "model.layers.0.mlp.experts"), "layer 0's experts are one entry");

    int n_nvfp4 = 0, n_fp8 = 0, n_none = 0, n_linear_layers = 0;
    for (int L = 0; L < 4; L++) {
        lwq_arch_layer p;
        cr_assert_eq(lwq_arch_layer_plan(&src.cfg, L, &p, &e), 0, "%s", e.msg);
        n_linear_layers += p.is_linear_attn;
        char path[64];
        snprintf(path, sizeof path, "q/model-layer-%05d.safetensors", L);
        lwq_st_file f;
        cr_assert_eq(lwq_st_open(lwqt_path(path), &f, &e), 0, "%s", e.msg);
        for (int i = 0; i < f.n; i++)
            cr_assert(!strstr(f.entries[i].name, "k_scale") && !strstr(f.entries[i].name, "v_scale"),
                      "%s: fp8_cast writes no KV scales", f.entries[i].name);
        for (int i = 0; i < p.nlinears; i++) {
            const lwq_arch_linear *l = &p.linears[i];
            const lwq_arch_tensor *pw = NULL;
            for (int k = 0; k < p.ntensors; k++)
                if (p.tensors[k].linear == i && p.tensors[k].kind == LWQ_TK_WEIGHT)
                    pw = &p.tensors[k];
            const lwq_st_entry *w = entry(&f, l->name, ".weight");
            cr_assert(pw && w, "%s.weight missing", l->name);
            const cJSON *qa = cJSON_GetObjectItem(listed(ql, l->name), "quant_algo");
            switch (expected(l)) {
            case LWQ_QFMT_NVFP4:
                n_nvfp4++;
                cr_assert(w->dtype == LWQ_U8 && w->ndim == 2 && w->shape[0] == l->out_features &&
                          w->shape[1] == l->in_features / 2, "%s: NVFP4 packed weight", l->name);
                const lwq_st_entry *ws = entry(&f, l->name, ".weight_scale");
                cr_assert(ws && ws->dtype == LWQ_F8_E4M3 && ws->shape[1] == l->in_features / 16,
                          "%s: block scales", l->name);
                cr_assert(is_scalar_f32(entry(&f, l->name, ".weight_scale_2")) &&
                          is_scalar_f32(entry(&f, l->name, ".input_scale")), "%s", l->name);
                cr_assert(cJSON_IsString(qa) && !strcmp(qa->valuestring, "NVFP4"), "%s", l->name);
                break;
            case LWQ_QFMT_FP8:
                n_fp8++;
                cr_assert(w->dtype == LWQ_F8_E4M3 && w->ndim == pw->ndim, "%s: FP8 weight", l->name);
                for (int d = 0; d < pw->ndim; d++)
                    cr_assert_eq(w->shape[d], pw->shape[d], "%s: FP8 weight keeps the source shape",
                                 l->name);
                cr_assert(is_scalar_f32(entry(&f, l->name, ".weight_scale")) &&
                          is_scalar_f32(entry(&f, l->name, ".input_scale")) &&
                          !entry(&f, l->name, ".weight_scale_2"), "%s: FP8 scales", l->name);
                cr_assert(cJSON_IsString(qa) && !strcmp(qa->valuestring, "FP8"), "%s", l->name);
                break;
            default:
                n_none++;
                cr_assert(w->dtype == LWQ_BF16, "%s stays BF16", l->name);
                cr_assert(!entry(&f, l->name, ".weight_scale") && !entry(&f, l->name, ".input_scale"),
                          "%s carries no scale", l->name);
                cr_assert(!qa, "%s is not in quantized_layers", l->name);
            }
        }
        for (int k = 0; k < p.ntensors; k++) /* norms, A_log, dt_bias: unchanged BF16 */
            if (p.tensors[k].linear < 0 && !p.tensors[k].optional) {
                const lwq_st_entry *t = entry(&f, p.tensors[k].name, "");
                cr_assert(t && t->dtype == LWQ_BF16, "%s passes through as BF16", p.tensors[k].name);
            }
        lwq_st_free(&f);
        lwq_arch_layer_free(&p);
    }
    cr_assert_eq(n_linear_layers, 3);
    /* 4 layers x 4 experts x 3; 3 x 4 linear-attention + 1 x 4 attention; per layer router,
     * 3 shared-expert linears and shared_expert_gate */
    cr_assert_eq(n_nvfp4, 48);
    cr_assert_eq(n_fp8, 16);
    cr_assert_eq(n_none, 20);
    cr_assert_eq(cJSON_GetArraySize(ql), 4 + 16, "one entry per layer's experts, one per FP8 linear");

    /* the tail: embeddings, norm, lm_head and the MTP block unchanged */
    lwq_st_file tf;
    cr_assert_eq(lwq_st_open(lwqt_path("q/model-tail.safetensors"), &tf, &e), 0, "%s", e.msg);
    int mtp = 0;
    for (int i = 0; i < src.tail.n; i++) {
        const lwq_ckpt_tensor *s = &src.tensors[src.tail.idx[i]];
        const lwq_st_entry *t = entry(&tf, s->name, "");
        cr_assert(t && t->dtype == LWQ_BF16 && t->end - t->begin == s->nbytes, "%s kept as BF16",
                  s->name);
        void *a = read_entry(&tf, t), *b = read_src(&src, s->name);
        cr_assert(!memcmp(a, b, s->nbytes), "%s bytes unchanged", s->name);
        free(a);
        free(b);
        mtp += !strncmp(s->name, "mtp.", 4);
    }
    cr_assert_gt(mtp, 20, "the MTP block is in the tail");
    lwq_st_free(&tf);

    /* byte-exact: expert down_proj (alone in its group) = sweep search + static NVFP4;
     * conv1d = per-tensor FP8 with the max amax (Model Optimizer's sweep refines static NVFP4 only) */
    lwq_st_file f0;
    cr_assert_eq(lwq_st_open(lwqt_path("q/model-layer-00000.safetensors"), &f0, &e), 0, "%s", e.msg);
    {
        const char *m = "model.layers.0.mlp.experts.1.down_proj";
        char name[128];
        snprintf(name, sizeof name, "%s.weight", m);
        const lwq_ckpt_tensor *t = lwq_ckpt_find(&src, name);
        int64_t R = t->shape[0], C = t->shape[1];
        void *w = read_src(&src, name);
        float amax, ws2, *bamax = malloc((size_t)(R * C / 16) * sizeof(float));
        uint8_t *packed = malloc((size_t)(R * C / 2)), *scale = malloc((size_t)(R * C / 16));
        cr_assert_geq(lwq_quant_amax(w, t->dtype, R * C, m, &amax, &e), 0);
        cr_assert_geq(lwq_quant_nvfp4_sweep(w, t->dtype, R, C, amax, NULL, m, bamax, NULL, &e), 0);
        cr_assert_geq(lwq_quant_nvfp4_static(w, t->dtype, R, C, bamax, amax, m, packed, scale, &ws2, &e),
                      0);
        void *ow = read_entry(&f0, entry(&f0, m, ".weight"));
        void *os = read_entry(&f0, entry(&f0, m, ".weight_scale"));
        float *o2 = read_entry(&f0, entry(&f0, m, ".weight_scale_2"));
        cr_assert(!memcmp(ow, packed, (size_t)(R * C / 2)), "%s: packed weight", m);
        cr_assert(!memcmp(os, scale, (size_t)(R * C / 16)), "%s: swept block scales", m);
        cr_assert_eq(*o2, ws2);
        free(w), free(bamax), free(packed), free(scale), free(ow), free(os), free(o2);
    }
    {
        const char *m = "model.layers.0.linear_attn.conv1d";
        const lwq_ckpt_tensor *t = lwq_ckpt_find(&src, "model.layers.0.linear_attn.conv1d.weight");
        cr_assert_eq(t->ndim, 3);
        int64_t R = t->shape[0], K = t->shape[2];
        void *w = read_src(&src, t->name);
        float amax, ws;
        uint8_t *q = malloc((size_t)(R * K));
        cr_assert_geq(lwq_quant_amax(w, t->dtype, R * K, m, &amax, &e), 0);
        cr_assert_geq(lwq_quant_fp8(w, t->dtype, R, K, amax, m, q, &ws, &e), 0);
        void *ow = read_entry(&f0, entry(&f0, m, ".weight"));
        float *os = read_entry(&f0, entry(&f0, m, ".weight_scale"));
        cr_assert(!memcmp(ow, q, (size_t)(R * K)), "%s: FP8 weight bytes", m);
        cr_assert_eq(*os, ws);
        free(w), free(q), free(ow), free(os);
    }
    lwq_st_free(&f0);
    cJSON_Delete(root);
    lwq_ckpt_free(&src);
}

Test(qwen3next_production, layerwise_and_whole_model_outputs_are_byte_identical)
{
    make_and_quantize(lwqt_path("a"), 0);
    make_and_quantize(lwqt_path("b"), 1);
    const char *d[] = {"diff", lwqt_path("a"), lwqt_path("b"), NULL};
    int rc = lwqt_run(d);
    char *out = lwqt_out();
    cr_assert_eq(rc, 0, "lwq diff: %s", out);
    cr_assert(strstr(out, "identical"), "%s", out);
    free(out);
}

/* --qdq-next feeds each layer the dequantized weights of the previous ones, conv1d's 3-D FP8
 * weight included; both run orders must still agree. */
Test(qwen3next_production, qdq_next_layerwise_and_whole_model_agree)
{
    make_and_quantize_opt(lwqt_path("a"), 0, "--qdq-next");
    make_and_quantize_opt(lwqt_path("b"), 1, "--qdq-next");
    make_and_quantize(lwqt_path("c"), 0);
    const char *d[] = {"diff", lwqt_path("a"), lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(d), 0, "--qdq-next: layerwise == whole model");
    const char *d2[] = {"diff", lwqt_path("a"), lwqt_path("c"), NULL};
    cr_assert_eq(lwqt_run(d2), 1, "--qdq-next changes the later layers' input scales");
}

Test(qwen3next_production, shipped_recipe_file_is_the_preset)
{
    char path[1024];
    const char *me = __FILE__; /* <repo>/tests/tools/this.c */
    const char *cut = strstr(me, "tests/tools/");
    cr_assert_not_null(cut);
    snprintf(path, sizeof path, "%.*srecipes/qwen3next_production.json", (int)(cut - me), me);
    lwq_recipe a, b;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_load(path, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_preset("qwen3next_production", &b, &e), 0, "%s", e.msg);
    char *ja = lwq_recipe_to_json(&a), *jb = lwq_recipe_to_json(&b);
    cr_assert_str_eq(ja, jb);
    cr_assert_eq(a.kv, LWQ_KV_FP8_CAST);
    free(ja);
    free(jb);
    lwq_recipe_free(&a);
    lwq_recipe_free(&b);
}

Test(qwen3next_production, conv1d_in_nvfp4_is_refused_naming_the_module)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_next", "--hidden", "64",
                        "--layers", "4", "--heads", "4", "--head-dim", "16", "--experts", "4",
                        "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    lwqt_write_str("r.json", "{\"rules\":[{\"match\":\"*.linear_attn.*\",\"format\":\"nvfp4\"}]}");
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--recipe",
                       lwqt_path("r.json"), "--calib-size", "4", "--calib-seq", "16", NULL};
    cr_assert_neq(lwqt_run(q), 0);
    char *err = lwqt_err();
    cr_assert(strstr(err, "model.layers.0.linear_attn.conv1d is a depthwise conv1d; only "
                          "per-tensor FP8 is supported for it, not nvfp4"), "%s", err);
    free(err);
}

Test(qwen3next_production, the_nvfp4_preset_leaves_conv1d_unquantized)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4", &r, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.linear_attn.conv1d").format, LWQ_QFMT_NONE);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.linear_attn.out_proj").format,
                 LWQ_QFMT_NVFP4);
    lwq_recipe_free(&r);
}
