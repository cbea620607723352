/* End to end on synthetic DeepSeek-V3-shaped models (lwq mkmodel --arch deepseek_v3): an FP8
 * 128x128-block source (with partial edge blocks: kv_a_proj_with_mqa has 96 rows, kv_b_proj 64
 * columns) and an MXFP4-expert source quantize to NVFP4 and pass `lwq verify`; the FP8 model and
 * its exact BF16 dequantization (computed here by a straightforward loop, written as a plain BF16
 * checkpoint) quantize to byte-identical files; hf_quant_config.json has the structure of
 * NVIDIA's published DeepSeek-V3.1-NVFP4 one. */
#include <criterion/criterion.h>
#include <math.h>
#include <regex.h>

#include "layout/checkpoint/checkpoint.h"
#include "layout/recipe/recipe.h"
#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/run.h"
#include "tests/helpers/fixtures.h"

TestSuite(deepseek_e2e, .init = lwqt_setup, .fini = lwqt_teardown);

static void mk_arch(const char *dir, const char *arch, const char *fmt)
{
    const char *a[] = {"mkmodel", dir, "--arch", arch, "--source-format", fmt,
                       "--layers", "3", "--experts", "8", "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "mkmodel %s: %s", fmt, err);
    free(err);
}

static void mk(const char *dir, const char *fmt) { mk_arch(dir, "deepseek_v3", fmt); }

static void quantize(const char *src, const char *out)
{
    const char *a[] = {"quantize", src, "-o", out, "--calib-size", "8", "--calib-seq", "32",
                       "--threads", "2", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "quantize %s: %s", src, err);
    free(err);
}

static void verify(const char *out)
{
    const char *a[] = {"verify", out, NULL};
    int rc = lwqt_run(a);
    char *o = lwqt_out(), *err = lwqt_err();
    cr_assert_eq(rc, 0, "verify %s: %s %s", out, o, err);
    free(o);
    free(err);
}

/* "model.layers.17.self_attn.q_a_proj" -> "model.layers.N.self_attn.q_a_proj" */
static void normalize(const char *in, char *out, size_t cap)
{
    const char *p = strstr(in, "layers.");
    if (!p) {
        snprintf(out, cap, "%s", in);
        return;
    }
    const char *q = p + 7;
    while (*q >= '0' && *q <= '9')
        q++;
    snprintf(out, cap, "%.*slayers.N%s", (int)(p - in), in, q);
}

static int in_set(const cJSON *arr, const char *s)
{
    const cJSON *it;
    char a[256], b[256];
    normalize(s, b, sizeof b);
    cJSON_ArrayForEach(it, arr)
    {
        normalize(it->valuestring, a, sizeof a);
        if (!strcmp(a, b))
            return 1;
    }
    return 0;
}

static void same_structure_as_published(const char *out, const char *published)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", published);
    char *pt = lwqt_slurp(p), *ot = lwqt_slurp(lwqt_path(out));
    cJSON *pub = cJSON_Parse(pt), *ours = cJSON_Parse(ot);
    cr_assert(pub && ours);
    const cJSON *pq = cJSON_GetObjectItem(pub, "quantization"), *oq = cJSON_GetObjectItem(ours, "quantization");
    cr_assert_not_null(cJSON_GetObjectItem(ours, "producer"));
    cr_assert_not_null(oq);
    for (const cJSON *k = pq->child; k; k = k->next) { /* every published key, same type */
        const cJSON *v = cJSON_GetObjectItem(oq, k->string);
        cr_assert_not_null(v, "quantization.%s missing", k->string);
        cr_assert_eq(v->type, k->type, "quantization.%s has another JSON type", k->string);
        if (cJSON_IsString(k) || cJSON_IsNumber(k))
            cr_assert(cJSON_Compare(k, v, 1), "quantization.%s differs", k->string);
    }
    const cJSON *pe = cJSON_GetObjectItem(pq, "exclude_modules");
    const cJSON *oe = cJSON_GetObjectItem(oq, "exclude_modules");
    const cJSON *it;
    /* every kind of module the published one excludes is excluded here (its MTP layer 61 aside:
     * the synthetic model has none) ... */
    cJSON_ArrayForEach(it, pe)
    {
        if (strcmp(it->valuestring, "model.layers.61*"))
            cr_assert(in_set(oe, it->valuestring), "published excludes %s, lwq does not",
                      it->valuestring);
    }
    /* ... and nothing else but the routers, which lwq lists explicitly (spec/FORMATS.md 7), and
     * the token embedding, which Model Optimizer 0.47 lists (the published file is from 0.22) */
    cJSON_ArrayForEach(it, oe)
    {
        char n[256];
        normalize(it->valuestring, n, sizeof n);
        cr_assert(in_set(pe, it->valuestring) || !strcmp(n, "model.layers.N.mlp.gate") ||
                      !strcmp(n, "model.embed_tokens"),
                  "lwq excludes %s, the published checkpoint quantizes it", it->valuestring);
    }
    cJSON_Delete(pub);
    cJSON_Delete(ours);
    free(pt);
    free(ot);
}

Test(deepseek_e2e, fp8_source_quantizes_verifies_and_matches_published_structure)
{
    const char *published = lwqt_fixture("published-nvfp4/nvidia--DeepSeek-V3.1-NVFP4/hf_quant_config.json");
    mk(lwqt_path("m"), "fp8");
    quantize(lwqt_path("m"), lwqt_path("q"));
    verify(lwqt_path("q"));
    same_structure_as_published("q/hf_quant_config.json", published);
    /* the MLA projections come out as BF16 (dequantized), no FP8 source tensor is left */
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(lwqt_path("q/model-layer-00001.safetensors"), &f, &e), 0, "%s", e.msg);
    int kv_a = lwq_st_find(&f, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
    cr_assert_geq(kv_a, 0);
    cr_assert_eq(f.entries[kv_a].dtype, LWQ_BF16);
    cr_assert_geq(lwq_st_find(&f, "model.layers.1.self_attn.o_proj.weight_scale_2"), 0,
                  "o_proj is NVFP4 as in the published checkpoint");
    for (int i = 0; i < f.n; i++)
        cr_assert_null(strstr(f.entries[i].name, "_scale_inv"), "%s left over", f.entries[i].name);
    lwq_st_free(&f);
}

Test(deepseek_e2e, deepseek_v2_fp8_source_quantizes_and_verifies)
{
    mk_arch(lwqt_path("m"), "deepseek_v2", "fp8");
    char *cfg = lwqt_slurp(lwqt_path("m/config.json"));
    cr_assert(strstr(cfg, "\"group_limited_greedy\"") && strstr(cfg, "\"softmax\""), "%s", cfg);
    free(cfg);
    quantize(lwqt_path("m"), lwqt_path("q"));
    verify(lwqt_path("q"));
}

Test(deepseek_e2e, mxfp4_expert_source_quantizes_and_verifies)
{
    mk(lwqt_path("m"), "mxfp4");
    quantize(lwqt_path("m"), lwqt_path("q"));
    verify(lwqt_path("q"));
}

static uint16_t bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float e4m3(uint8_t b)
{
    int ex = (b >> 3) & 15, m = b & 7;
    float v = ex == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, ex - 7);
    return (b & 0x80) ? -v : v;
}

/* Write dst as the plain BF16 checkpoint whose values are src's FP8 blocks dequantized. */
static void write_dequantized(const char *src, const char *dst)
{
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(src, &ck, &e), 0, "%s", e.msg);
    lwq_st_out_tensor *ot = calloc((size_t)ck.ntensors, sizeof *ot);
    void **bufs = calloc((size_t)ck.ntensors, sizeof *bufs);
    int n = 0, nfp8 = 0;
    for (int i = 0; i < ck.ntensors; i++) {
        const lwq_ckpt_tensor *t = &ck.tensors[i];
        size_t len = strlen(t->name);
        if (len > 10 && !strcmp(t->name + len - 10, "_scale_inv"))
            continue;
        void *raw = malloc(t->nbytes);
        cr_assert_eq(lwq_ckpt_read_tensor(&ck, t, raw, &e), 0, "%s", e.msg);
        ot[n] = (lwq_st_out_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
        memcpy(ot[n].shape, t->shape, sizeof t->shape);
        if (t->dtype == LWQ_F8_E4M3) {
            char sn[512];
            snprintf(sn, sizeof sn, "%s_scale_inv", t->name);
            const lwq_ckpt_tensor *s = lwq_ckpt_find(&ck, sn);
            cr_assert_not_null(s);
            float *sv = malloc(s->nbytes);
            cr_assert_eq(lwq_ckpt_read_tensor(&ck, s, sv, &e), 0);
            int64_t R = t->shape[0], C = t->shape[1], SC = s->shape[1];
            uint16_t *o = malloc((size_t)(R * C) * 2);
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++)
                    o[r * C + c] = bf16_rne(e4m3(((uint8_t *)raw)[r * C + c]) *
                                            sv[(r / 128) * SC + c / 128]);
            free(sv);
            free(raw);
            raw = o;
            ot[n].dtype = LWQ_BF16;
            nfp8++;
        }
        ot[n].data = raw;
        bufs[n++] = raw;
    }
    cr_assert_gt(nfp8, 10);
    cr_assert(mkdir(dst, 0755) == 0);
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    lwq_st_kv meta[] = {{"format", "pt"}};
    cr_assert_eq(lwq_st_write_file(p, ot, n, meta, 1, &e), 0, "%s", e.msg);
    for (int i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(ot);
    /* same config without the FP8 quantization_config; the side files as they are */
    cJSON *cfg = cJSON_Duplicate(ck.cfg.raw, 1);
    cJSON_DeleteItemFromObject(cfg, "quantization_config");
    char *txt = cJSON_Print(cfg);
    snprintf(p, sizeof p, "%s/config.json", dst);
    FILE *fp = fopen(p, "w");
    fputs(txt, fp);
    fclose(fp);
    free(txt);
    cJSON_Delete(cfg);
    const char *side[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (int i = 0; i < 3; i++) {
        char a[1024];
        snprintf(a, sizeof a, "%s/%s", src, side[i]);
        snprintf(p, sizeof p, "%s/%s", dst, side[i]);
        char *s = lwqt_slurp(a);
        fp = fopen(p, "w");
        fputs(s, fp);
        fclose(fp);
        free(s);
    }
    lwq_ckpt_free(&ck);
}

/* Whole file into memory with the run fingerprint (a hash of the source files' identity, which
 * differ by design) masked: every other byte must match. */
static char *load_masked(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "%s", path);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc(*n + 1);
    cr_assert_eq(fread(b, 1, *n, fp), *n);
    fclose(fp);
    b[*n] = 0;
    const char key[] = "\"lwq_fingerprint\":\"";
    for (size_t i = 0; i + sizeof key - 1 + 16 <= *n; i++)
        if (!memcmp(b + i, key, sizeof key - 1))
            memset(b + i + sizeof key - 1, 'x', 16);
    return b;
}

static void same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = load_masked(a, &na), *y = load_masked(b, &nb);
    cr_assert_eq(na, nb, "%s has %zu bytes, %s %zu", a, na, b, nb);
    for (size_t i = 0; i < na; i++)
        cr_assert_eq(x[i], y[i], "%s and %s differ at byte %zu", a, b, i);
    free(x);
    free(y);
}

Test(deepseek_e2e, fp8_source_and_its_bf16_dequantization_quantize_identically)
{
    mk(lwqt_path("m8"), "fp8");
    write_dequantized(lwqt_path("m8"), lwqt_path("mb"));
    quantize(lwqt_path("m8"), lwqt_path("q8"));
    quantize(lwqt_path("mb"), lwqt_path("qb"));
    const char *files[] = {"model-layer-00000.safetensors", "model-layer-00001.safetensors",
                           "model-layer-00002.safetensors", "model-tail.safetensors",
                           "model.safetensors.index.json", "hf_quant_config.json",
                           "config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/q8/%s", lwqt_dir, files[i]);
        snprintf(b, sizeof b, "%s/qb/%s", lwqt_dir, files[i]);
        same_file(a, b);
    }
}

/* dst = src plus one DeepSeek MTP block as layer `L` (= num_hidden_layers): the last decoder
 * layer's tensors (FP8 with their scale_inv) renamed, plus the MTP-only tensors, and
 * num_nextn_predict_layers 1 in config.json. */
static void add_mtp_layer(const char *src, const char *dst, int L)
{
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(src, &ck, &e), 0, "%s", e.msg);
    int cap = 2 * ck.ntensors + 8, n = 0;
    lwq_st_out_tensor *ot = calloc((size_t)cap, sizeof *ot);
    char **names = calloc((size_t)cap, sizeof *names);
    void **bufs = calloc((size_t)cap, sizeof *bufs);
    char last[64];
    snprintf(last, sizeof last, "model.layers.%d.", L - 1);
    for (int i = 0; i < ck.ntensors; i++) {
        const lwq_ckpt_tensor *t = &ck.tensors[i];
        for (int copy = 0; copy < 1 + !strncmp(t->name, last, strlen(last)); copy++) {
            void *raw = malloc(t->nbytes);
            cr_assert_eq(lwq_ckpt_read_tensor(&ck, t, raw, &e), 0);
            names[n] = malloc(512);
            if (copy)
                snprintf(names[n], 512, "model.layers.%d.%s", L, t->name + strlen(last));
            else
                snprintf(names[n], 512, "%s", t->name);
            ot[n] = (lwq_st_out_tensor){.name = names[n], .dtype = t->dtype, .ndim = t->ndim,
                                        .data = raw};
            memcpy(ot[n].shape, t->shape, sizeof t->shape);
            bufs[n++] = raw;
        }
    }
    const int64_t h = ck.cfg.hidden_size;
    const char *extra[] = {"enorm.weight", "hnorm.weight", "shared_head.norm.weight",
                           "eh_proj.weight"};
    for (int k = 0; k < 4; k++) {
        int64_t cols = k == 3 ? 2 * h : 0, cnt = k == 3 ? h * 2 * h : h;
        uint16_t *v = malloc((size_t)cnt * 2);
        for (int64_t j = 0; j < cnt; j++)
            v[j] = 0x3c00 + (uint16_t)(j % 7); /* ~0.0078.., BF16 */
        names[n] = malloc(512);
        snprintf(names[n], 512, "model.layers.%d.%s", L, extra[k]);
        ot[n] = (lwq_st_out_tensor){.name = names[n], .dtype = LWQ_BF16, .ndim = k == 3 ? 2 : 1,
                                    .data = v};
        ot[n].shape[0] = h;
        ot[n].shape[1] = cols;
        bufs[n++] = v;
    }
    cr_assert(mkdir(dst, 0755) == 0);
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    cr_assert_eq(lwq_st_write_file(p, ot, n, NULL, 0, &e), 0, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        free(bufs[i]);
        free(names[i]);
    }
    free(bufs);
    free(names);
    free(ot);
    cJSON *cfg = cJSON_Duplicate(ck.cfg.raw, 1);
    cJSON_ReplaceItemInObject(cfg, "num_nextn_predict_layers", cJSON_CreateNumber(1));
    char *txt = cJSON_Print(cfg);
    snprintf(p, sizeof p, "%s/config.json", dst);
    FILE *fp = fopen(p, "w");
    fputs(txt, fp);
    fclose(fp);
    free(txt);
    cJSON_Delete(cfg);
    const char *side[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (int i = 0; i < 3; i++) {
        char a[1024];
        snprintf(a, sizeof a, "%s/%s", src, side[i]);
        snprintf(p, sizeof p, "%s/%s", dst, side[i]);
        char *s = lwqt_slurp(a);
        fp = fopen(p, "w");
        fputs(s, fp);
        fclose(fp);
        free(s);
    }
    lwq_ckpt_free(&ck);
}

Test(deepseek_e2e, fp8_mtp_layer_goes_to_the_tail_dequantized_and_excluded)
{
    mk(lwqt_path("m"), "fp8");
    add_mtp_layer(lwqt_path("m"), lwqt_path("mtp"), 3);
    quantize(lwqt_path("mtp"), lwqt_path("q"));
    verify(lwqt_path("q"));
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(lwqt_path("q/model-tail.safetensors"), &f, &e), 0, "%s", e.msg);
    int qa = lwq_st_find(&f, "model.layers.3.self_attn.q_a_proj.weight");
    int ex = lwq_st_find(&f, "model.layers.3.mlp.experts.5.up_proj.weight");
    cr_assert(qa >= 0 && ex >= 0 && lwq_st_find(&f, "model.layers.3.eh_proj.weight") >= 0);
    cr_assert_eq(f.entries[qa].dtype, LWQ_BF16, "MTP weights pass through dequantized");
    cr_assert_eq(f.entries[ex].dtype, LWQ_BF16);
    for (int i = 0; i < f.n; i++)
        cr_assert(!strstr(f.entries[i].name, "_scale_inv") && !strstr(f.entries[i].name,
                                                                        "weight_scale"),
                  "%s in the tail", f.entries[i].name);
    lwq_st_free(&f);
    char *hq = lwqt_slurp(lwqt_path("q/hf_quant_config.json"));
    cr_assert(strstr(hq, "\"model.layers.3*\""), "MTP layer excluded as published: %s", hq);
    free(hq);
}

/* Kimi-K2.6-NVFP4 lists globs under its "language_model." prefix ("...layers.0*",
 * "...mlp.shared_experts*", "...self_attn*"); lwq lists explicit names.  Same structure: each
 * module lwq excludes is covered by a published glob (routers and the embedding aside, listed by
 * lwq's convention), and each module lwq quantizes (the routed experts) by none. */
Test(deepseek_e2e, experts_only_matches_published_kimi_k26_structure)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", lwqt_fixture("published-nvfp4/nvidia--Kimi-K2.6-NVFP4/hf_quant_config.json"));
    mk(lwqt_path("m"), "bf16");
    const char *a[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--calib-size", "4",
                       "--calib-seq", "16", "--qformat", "nvfp4_experts_only", NULL};
    cr_assert_eq(lwqt_run(a), 0);
    char *pt = lwqt_slurp(p), *ot = lwqt_slurp(lwqt_path("q/hf_quant_config.json"));
    cJSON *pub = cJSON_Parse(pt), *ours = cJSON_Parse(ot);
    const cJSON *pe = cJSON_GetObjectItem(cJSON_GetObjectItem(pub, "quantization"),
                                          "exclude_modules");
    const cJSON *oe = cJSON_GetObjectItem(cJSON_GetObjectItem(ours, "quantization"),
                                          "exclude_modules");
    cr_assert(pe && oe);
    const cJSON *it, *g;
    int excluded = 0;
    cJSON_ArrayForEach(it, oe)
    {
        char n[300], norm[300];
        snprintf(n, sizeof n, "language_model.%s", it->valuestring);
        normalize(it->valuestring, norm, sizeof norm);
        /* routers and the embedding: listed by lwq's (and Model Optimizer 0.47's) convention */
        int covered = !strcmp(norm, "model.layers.N.mlp.gate") || !strcmp(norm, "model.embed_tokens");
        cJSON_ArrayForEach(g, pe) covered |= lwq_glob_match(g->valuestring, n);
        cr_assert(covered, "lwq excludes %s, no published glob does", it->valuestring);
        excluded++;
    }
    cr_assert_gt(excluded, 10);
    const char *quantized[] = {"model.layers.1.mlp.experts.0.gate_proj",
                               "model.layers.2.mlp.experts.7.down_proj"};
    for (int i = 0; i < 2; i++) {
        char n[300];
        snprintf(n, sizeof n, "language_model.%s", quantized[i]);
        cJSON_ArrayForEach(g, pe) cr_assert(!lwq_glob_match(g->valuestring, n), "%s", n);
        cJSON_ArrayForEach(it, oe) cr_assert(strcmp(it->valuestring, quantized[i]));
    }
    cJSON_Delete(pub);
    cJSON_Delete(ours);
    free(pt);
    free(ot);
}

Test(deepseek_e2e, mkmodel_mxfp4_needs_widths_multiple_of_32)
{
    const char *a[] = {"mkmodel", lwqt_path("m"), "--arch", "deepseek_v3", "--source-format",
                       "mxfp4", "--moe-intermediate", "48", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "--source-format mxfp4: model.layers.1.mlp.experts.0.down_proj.weight "
                          "has 48 input features, not a multiple of 32"), "%s", err);
    free(err);
}

/* An FP8 KV cache on MLA (issue 23): Model Optimizer 0.47 observes the decompressed per-head k
 * ([k_nope | k_rope]) and v in transformers' attention and writes self_attn.k_proj.k_scale and
 * v_proj.v_scale for every layer; lwq wrote none before.  (Their values against Model
 * Optimizer's: tests/tools/families/test_peer_goldens.c, case deepseek_v3-f32/fp8-kv_fp8.) */
Test(deepseek_e2e, fp8_kv_cache_writes_mla_k_and_v_scales)
{
    mk(lwqt_path("m"), "bf16");
    const char *a[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--calib-size", "4", "--calib-seq", "16",
                       "--qformat", "fp8", "--kv-cache", "fp8", NULL};
    cr_assert_eq(lwqt_run(a), 0);
    verify(lwqt_path("q"));
    for (int L = 0; L < 3; L++) {
        char p[64], n[128];
        snprintf(p, sizeof p, "q/model-layer-%05d.safetensors", L);
        lwq_st_file f;
        lwq_error e = {0};
        cr_assert_eq(lwq_st_open(lwqt_path(p), &f, &e), 0, "%s", e.msg);
        const char *kinds[] = {"k_proj.k_scale", "v_proj.v_scale"};
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s", L, kinds[k]);
            int i = lwq_st_find(&f, n);
            cr_assert_geq(i, 0, "%s missing", n);
            float v = 0;
            cr_assert(f.entries[i].dtype == LWQ_F32 && lwq_st_numel(&f.entries[i]) == 1, "%s is not an F32 scalar", n);
            cr_assert_eq(lwq_st_read(&f, f.data_start + f.entries[i].begin, &v, 4, &e), 0, "%s", e.msg);
            cr_assert(isfinite(v) && v > 0, "%s = %g", n, v);
        }
        lwq_st_free(&f);
    }
}
