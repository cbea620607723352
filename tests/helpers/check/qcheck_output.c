/* tests/helpers/check/qcheck_output.c — qc_check_output (see qcheck.h): one output directory against
 * its source, FORMATS.md and the recomputed statistics. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "kernels/quant.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/format/quant_formats.h"
#include "tests/helpers/check/qcheck.h"

typedef struct qmod {
    char name[128];
    qc_fmt fmt;
    const lwq_ckpt_tensor *src;
    void *w;               /* source weight bytes (quantized modules) */
    float wamax;           /* max |w| */
    float in_amax;         /* after the cold-expert fill, before group unification */
    int64_t rows;
    char group[160], ekey[160];
    int expert;
} qmod;

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static int layer_of(const char *name)
{
    int L, n = 0;
    if (sscanf(name, "model.layers.%d.%n", &L, &n) == 1 && n > 0)
        return L;
    return -1;
}

static void group_key(const char *m, char *key, size_t cap)
{
    static const char *const suf[] = {".q_proj", ".k_proj", ".v_proj", ".gate_proj", ".up_proj", ".w1", ".w3"};
    key[0] = 0;
    for (int i = 0; i < 7; i++)
        if (ends_with(m, suf[i]))
            snprintf(key, cap, "%.*s|%s", (int)(strlen(m) - strlen(suf[i])), m, i < 3 ? "qkv" : "gate_up");
}

/* Routed experts share one input amax per layer and input (Model Optimizer's fused-experts
 * quantizers): gate and up (w1, w3) read the expert input, down (w2) its own. */
static int expert_key(const char *m, char *key, size_t cap)
{
    const char *p = strstr(m, ".experts.");
    int E, n = 0;
    if (!p || sscanf(p, ".experts.%d.%n", &E, &n) != 1 || n == 0)
        return -1;
    int down = !strcmp(p + n, "down_proj") || !strcmp(p + n, "w2");
    snprintf(key, cap, "%.*s|%s", (int)(p - m), m, down ? "down" : "gate_up");
    return E;
}

static void shard_of(const char *name, int nlayers, char *out, size_t cap)
{
    int L = layer_of(name);
    if (L >= 0 && L < nlayers)
        snprintf(out, cap, "model-layer-%05d.safetensors", L);
    else
        snprintf(out, cap, "model-tail.safetensors");
}

static void assert_in_shard(const qc_out *o, const char *name, const char *shard)
{
    int f = -1;
    cr_assert_not_null(qc_out_find(o, name, &f), "%s: missing from the output", name);
    cr_assert_str_eq(o->fname[f], shard, "%s lives in %s, expected %s", name, o->fname[f], shard);
}

/* ---- weights ----------------------------------------------------------------------------------- */

static void check_nvfp4(const qc_out *o, const qmod *m, float group_wamax, float group_in, const char *shard)
{
    int64_t R = m->src->shape[0], C = m->src->shape[1];
    char n[192];
    int64_t sp[2] = {R, C / 2}, ss[2] = {R, C / 16};
    snprintf(n, sizeof n, "%s.weight", m->name);
    uint8_t *packed = qc_out_read(o, n, LWQ_U8, 2, sp);
    assert_in_shard(o, n, shard);
    snprintf(n, sizeof n, "%s.weight_scale", m->name);
    uint8_t *scale = qc_out_read(o, n, LWQ_F8_E4M3, 2, ss);
    assert_in_shard(o, n, shard);
    snprintf(n, sizeof n, "%s.weight_scale_2", m->name);
    float ws2 = qc_out_scalar(o, n);
    assert_in_shard(o, n, shard);
    float want = (group_wamax > 0 ? group_wamax : 1.0f) / (6.0f * 448.0f);
    cr_assert(ws2 == want, "%s = %.9g, expected group weight amax %.9g / (6*448) = %.9g", n, ws2, group_wamax, want);
    snprintf(n, sizeof n, "%s.input_scale", m->name);
    float is = qc_out_scalar(o, n);
    assert_in_shard(o, n, shard);
    want = group_in / (6.0f * 448.0f);
    cr_assert(isfinite(is) && is > 0 && is == want, "%s = %.9g, expected input amax %.9g / (6*448) = %.9g", n, is,
              group_in, want);
    for (int64_t i = 0; i < R * C / 16; i++)
        cr_assert(scale[i] >= 0x01 && scale[i] <= 0x7E, "%s.weight_scale[%lld] = 0x%02x: not a positive finite E4M3",
                  m->name, (long long)i, scale[i]);
    float *dq = malloc((size_t)(R * C) * sizeof *dq);
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_dequant(packed, scale, ws2, R, C, LWQ_F32, dq, &e), 0, "%s", e.msg);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            float w = lwq_load_f(m->w, m->src->dtype, (size_t)(r * C + c));
            float s = lwq_e4m3_to_f32(scale[r * (C / 16) + c / 16]) * ws2, x = fabsf(w) / s;
            float step = x <= 2 ? 0.5f : x <= 4 ? 1.0f : 2.0f, err = fabsf(dq[r * C + c] - w);
            cr_assert(err <= step * s * (1 + 1e-5f), "%s[%lld, %lld]: source %.9g dequantizes to %.9g; more than "
                      "one E2M1 step (%.3g x block scale %.9g) away", m->name, (long long)r, (long long)c, w,
                      dq[r * C + c], step, s);
        }
    free(dq);
    free(packed);
    free(scale);
}

/* Spacing of E4M3 values around |x|. */
static float e4m3_step(float x)
{
    return x < 0x1p-6f ? 0x1p-9f : ldexpf(1.0f, ilogbf(x) - 3);
}

static void check_fp8(const qc_out *o, const qmod *m, float wamax, const char *shard)
{
    int64_t R = m->src->shape[0], C = m->src->shape[1];
    char n[192];
    int64_t sh[2] = {R, C};
    snprintf(n, sizeof n, "%s.weight", m->name);
    uint8_t *q = qc_out_read(o, n, LWQ_F8_E4M3, 2, sh);
    assert_in_shard(o, n, shard);
    snprintf(n, sizeof n, "%s.weight_scale", m->name);
    float ws = qc_out_scalar(o, n);
    assert_in_shard(o, n, shard);
    float want = (wamax > 0 ? wamax : 1.0f) / 448.0f;
    cr_assert(ws == want, "%s = %.9g, expected weight amax %.9g / 448 = %.9g", n, ws, wamax, want);
    snprintf(n, sizeof n, "%s.input_scale", m->name);
    float is = qc_out_scalar(o, n);
    assert_in_shard(o, n, shard);
    want = m->in_amax / 448.0f;
    cr_assert(isfinite(is) && is > 0 && is == want, "%s = %.9g, expected input amax %.9g / 448 = %.9g", n, is,
              m->in_amax, want);
    for (int64_t i = 0; i < R * C; i++)
        cr_assert((q[i] & 0x7F) != 0x7F, "%s.weight[%lld] is an E4M3 NaN", m->name, (long long)i);
    float *dq = malloc((size_t)(R * C) * sizeof *dq);
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_fp8_dequant(q, ws, R * C, LWQ_F32, dq, &e), 0, "%s", e.msg);
    for (int64_t i = 0; i < R * C; i++) {
        float w = lwq_load_f(m->w, m->src->dtype, (size_t)i), err = fabsf(dq[i] - w);
        cr_assert(err <= e4m3_step(fabsf(w) / ws) * ws * (1 + 1e-5f),
                  "%s[%lld]: source %.9g dequantizes to %.9g; more than one E4M3 step away", m->name, (long long)i, w,
                  dq[i]);
    }
    free(dq);
    free(q);
}

/* ---- configs ----------------------------------------------------------------------------------- */

static cJSON *read_json(const char *dir, const char *name)
{
    char p[1024], *s;
    size_t len;
    lwq_error e = {0};
    snprintf(p, sizeof p, "%s/%s", dir, name);
    cr_assert_eq(lwq_file_read_all(p, 16u << 20, &s, &len, &e), 0, "%s", e.msg);
    cJSON *j = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(j, "%s is not valid JSON", p);
    return j;
}

/* An exclusion entry is a module name or a prefix glob ending in '*'. */
static int excluded(const cJSON *list, const char *module)
{
    for (const cJSON *x = list->child; x; x = x->next) {
        const char *s = x->valuestring;
        size_t n = strlen(s);
        if (!strcmp(s, module) || (n && s[n - 1] == '*' && !strncmp(s, module, n - 1)))
            return 1;
    }
    return 0;
}

/* One format: lm_head and every unquantized module excluded, no quantized one.  MIXED_PRECISION
 * (mixed): no exclusion of its own (Model Optimizer lists only MTP blocks there; an unlisted module
 * is unquantized), so only: nothing quantized excluded. */
static void check_excludes(const char *what, const cJSON *list, const qmod *m, int nm, int mixed)
{
    cr_assert(cJSON_IsArray(list), "%s is not an array", what);
    for (const cJSON *x = list->child; x; x = x->next)
        cr_assert(cJSON_IsString(x), "%s holds a non-string", what);
    cr_assert(mixed || excluded(list, "lm_head"), "%s does not exclude lm_head", what);
    for (int i = 0; i < nm; i++) {
        if (m[i].fmt == QC_NONE)
            cr_assert(mixed || excluded(list, m[i].name), "%s does not exclude %s, which stays unquantized", what,
                      m[i].name);
        else
            cr_assert(!excluded(list, m[i].name), "%s excludes %s, which is quantized", what, m[i].name);
    }
    if (mixed)
        cr_assert(!excluded(list, "lm_head") && !excluded(list, "model.embed_tokens"),
                  "%s: a MIXED_PRECISION config lists only MTP blocks", what);
}

/* A module's quantized_layers entry: its own or its nearest listed ancestor's (the fused experts
 * module "model.layers.1.mlp.experts" for "model.layers.1.mlp.experts.3.up_proj"). */
static const cJSON *listed_entry(const cJSON *ql, const char *module)
{
    char n[256];
    snprintf(n, sizeof n, "%s", module);
    for (char *dot;; *dot = 0) {
        const cJSON *x = cJSON_GetObjectItem(ql, n);
        if (x)
            return x;
        if (!(dot = strrchr(n, '.')))
            return NULL;
    }
}

static void check_group_fields(const char *what, const cJSON *g, int bits)
{
    cr_assert(cJSON_IsObject(g), "%s missing", what);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g, "dynamic")), "%s.dynamic must be false", what);
    cr_assert_eq(cJSON_GetObjectItem(g, "num_bits")->valueint, bits, "%s.num_bits", what);
    cr_assert_str_eq(cJSON_GetObjectItem(g, "type")->valuestring, "float", "%s.type", what);
    if (bits == 4)
        cr_assert_eq(cJSON_GetObjectItem(g, "group_size")->valueint, 16, "%s.group_size", what);
}

static void check_configs(const char *model_dir, const char *out_dir, const qmod *m, int nm, qc_kv kv)
{
    int nv = 0, f8 = 0;
    for (int i = 0; i < nm; i++) {
        nv += m[i].fmt == QC_NVFP4;
        f8 += m[i].fmt == QC_FP8;
    }
    const char *algo = nv && f8 ? "MIXED_PRECISION" : nv ? "NVFP4" : "FP8";
    cJSON *hf = read_json(out_dir, "hf_quant_config.json");
    cJSON *prod = cJSON_GetObjectItem(hf, "producer"), *q = cJSON_GetObjectItem(hf, "quantization");
    cr_assert_str_eq(cJSON_GetObjectItem(prod, "name")->valuestring, "modelopt");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(prod, "version")), "producer.version missing");
    cr_assert(cJSON_IsObject(q), "hf_quant_config.json: no quantization object");
    cr_assert_str_eq(cJSON_GetObjectItem(q, "quant_algo")->valuestring, algo);
    cJSON *kva = cJSON_GetObjectItem(q, "kv_cache_quant_algo");
    cr_assert_not_null(kva, "kv_cache_quant_algo must exist (null allowed)");
    if (kv == QC_KV_NONE)
        cr_assert(cJSON_IsNull(kva), "kv_cache_quant_algo must be null without a KV-cache format");
    else
        cr_assert(cJSON_IsString(kva) && !strcmp(kva->valuestring, "FP8"), "kv_cache_quant_algo must be \"FP8\"");
    if (nv && !f8)
        cr_assert_eq(cJSON_GetObjectItem(q, "group_size")->valueint, 16);
    int mixed = nv && f8;
    check_excludes("hf_quant_config.json exclude_modules", cJSON_GetObjectItem(q, "exclude_modules"), m, nm, mixed);
    /* Model Optimizer lists the token embedding (a disabled quantized module there) */
    cr_assert(mixed || excluded(cJSON_GetObjectItem(q, "exclude_modules"), "model.embed_tokens"),
              "hf_quant_config.json exclude_modules does not list model.embed_tokens");
    if (nv && f8) {
        cJSON *ql = cJSON_GetObjectItem(q, "quantized_layers");
        cr_assert(cJSON_IsObject(ql), "MIXED_PRECISION needs quantized_layers");
        cr_assert_leq(cJSON_GetArraySize(ql), nv + f8, "quantized_layers lists %d modules, %d are quantized",
                      cJSON_GetArraySize(ql), nv + f8);
        for (int i = 0; i < nm; i++) {
            const cJSON *x = listed_entry(ql, m[i].name);
            if (m[i].fmt == QC_NONE) {
                cr_assert_null(x, "quantized_layers lists %s (or a module above it), which is unquantized", m[i].name);
                continue;
            }
            cr_assert_not_null(x, "quantized_layers lacks %s", m[i].name);
            cr_assert_str_eq(cJSON_GetObjectItem(x, "quant_algo")->valuestring, m[i].fmt == QC_NVFP4 ? "NVFP4" : "FP8");
            if (m[i].fmt == QC_NVFP4)
                cr_assert_eq(cJSON_GetObjectItem(x, "group_size")->valueint, 16, "%s group_size", m[i].name);
        }
    }
    cJSON_Delete(hf);

    cJSON *src = read_json(model_dir, "config.json"), *cfg = read_json(out_dir, "config.json");
    for (cJSON *x = src->child; x; x = x->next)
        if (strcmp(x->string, "quantization_config"))
            cr_assert(cJSON_Compare(x, cJSON_GetObjectItem(cfg, x->string), 1), "config.json: %s changed", x->string);
    cJSON *qc = cJSON_GetObjectItem(cfg, "quantization_config");
    cr_assert(cJSON_IsObject(qc), "config.json: no quantization_config");
    cr_assert_str_eq(cJSON_GetObjectItem(qc, "quant_method")->valuestring, "modelopt");
    cr_assert_str_eq(cJSON_GetObjectItem(qc, "quant_algo")->valuestring, algo);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(qc, "producer"), "name")->valuestring, "modelopt");
    check_excludes("config.json quantization_config.ignore", cJSON_GetObjectItem(qc, "ignore"), m, nm, mixed);
    cr_assert(mixed || excluded(cJSON_GetObjectItem(qc, "ignore"), "model.embed_tokens"),
              "config.json quantization_config.ignore does not list model.embed_tokens");
    cJSON *kvs = cJSON_GetObjectItem(qc, "kv_cache_scheme");
    if (kv == QC_KV_NONE) {
        cr_assert(!kvs || cJSON_IsNull(kvs), "kv_cache_scheme present without a KV-cache format");
    } else {
        cr_assert(cJSON_IsObject(kvs), "kv_cache_scheme must be an object");
        check_group_fields("kv_cache_scheme", kvs, 8);
    }
    cJSON *groups = cJSON_GetObjectItem(qc, "config_groups");
    cr_assert(cJSON_IsObject(groups) && groups->child, "config_groups missing or empty");
    int targets = 0;
    for (cJSON *g = groups->child; g; g = g->next) {
        int bits = cJSON_GetObjectItem(cJSON_GetObjectItem(g, "weights"), "num_bits")->valueint;
        cr_assert(bits == 4 || bits == 8, "%s: weights.num_bits %d", g->string, bits);
        check_group_fields("config_groups weights", cJSON_GetObjectItem(g, "weights"), bits);
        check_group_fields("config_groups input_activations", cJSON_GetObjectItem(g, "input_activations"), bits);
        cJSON *t = cJSON_GetObjectItem(g, "targets");
        cr_assert(cJSON_IsArray(t), "%s: targets missing", g->string);
        if (!(nv && f8)) {
            cr_assert(cJSON_GetArraySize(t) == 1 && !strcmp(t->child->valuestring, "Linear"), "%s: targets", g->string);
            cr_assert_eq(bits, nv ? 4 : 8, "%s: num_bits %d for %s", g->string, bits, algo);
            continue;
        }
        for (cJSON *x = t->child; x; x = x->next) { /* a module, or the fused experts module above some */
            size_t n = strlen(x->valuestring);
            int hit = 0;
            for (int k = 0; k < nm; k++) {
                if (strncmp(m[k].name, x->valuestring, n) || (m[k].name[n] && m[k].name[n] != '.'))
                    continue;
                cr_assert_eq(m[k].fmt, bits == 4 ? QC_NVFP4 : QC_FP8, "%s lists %s (as %s) in the wrong format",
                             g->string, m[k].name, x->valuestring);
                hit++;
            }
            cr_assert_gt(hit, 0, "%s targets unknown module %s", g->string, x->valuestring);
            targets += hit;
        }
    }
    if (nv && f8)
        cr_assert_eq(targets, nv + f8, "config_groups target %d modules, %d are quantized", targets, nv + f8);
    cJSON_Delete(src);
    cJSON_Delete(cfg);
}

static void check_side_files(const char *model_dir, const char *out_dir)
{
    static const char *const names[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 3; i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", model_dir, names[i]);
        snprintf(b, sizeof b, "%s/%s", out_dir, names[i]);
        if (access(a, F_OK) == 0)
            cr_assert(qc_same_file(a, b), "%s was not copied unchanged", names[i]);
    }
}

/* ---- the whole directory ------------------------------------------------------------------------ */

void qc_check_output(const char *model_dir, const char *out_dir, const char *preset, qc_kv kv, const qc_ref *ref)
{
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(model_dir, &ck, &e), 0, "%s", e.msg);
    int NL = ck.cfg.num_hidden_layers, nm = 0, expected = 0;
    qmod *m = calloc((size_t)(ck.ntensors > 0 ? ck.ntensors : 1), sizeof *m);
    qc_out o;
    qc_out_open(&o, out_dir);
    char shard[64];
    for (int i = 0; i < ck.ntensors; i++) {
        const lwq_ckpt_tensor *t = &ck.tensors[i];
        int L = layer_of(t->name);
        qc_fmt f = QC_NONE;
        if (L >= 0 && L < NL && t->ndim == 2 && ends_with(t->name, ".weight")) {
            qmod *x = &m[nm++];
            snprintf(x->name, sizeof x->name, "%.*s", (int)(strlen(t->name) - 7), t->name);
            x->fmt = f = qc_preset_format(preset, x->name);
            x->src = t;
        }
        if (f != QC_NONE)
            continue;
        /* unquantized: the same tensor, byte for byte, in its shard */
        shard_of(t->name, NL, shard, sizeof shard);
        void *a = malloc(t->nbytes ? t->nbytes : 1), *b = qc_out_read(&o, t->name, t->dtype, t->ndim, t->shape);
        cr_assert_eq(lwq_ckpt_read_tensor(&ck, t, a, &e), 0, "%s", e.msg);
        cr_assert(memcmp(a, b, t->nbytes) == 0, "%s: bytes differ from the source", t->name);
        assert_in_shard(&o, t->name, shard);
        free(a);
        free(b);
        expected++;
    }
    for (int i = 0; i < nm; i++) {
        qmod *x = &m[i];
        x->in_amax = qc_ref_amax(ref, x->name, &x->rows);
        group_key(x->name, x->group, sizeof x->group);
        x->expert = expert_key(x->name, x->ekey, sizeof x->ekey);
        if (x->fmt == QC_NONE)
            continue;
        x->w = malloc(x->src->nbytes);
        cr_assert_eq(lwq_ckpt_read_tensor(&ck, x->src, x->w, &e), 0, "%s", e.msg);
        for (int64_t k = 0; k < x->src->shape[0] * x->src->shape[1]; k++)
            x->wamax = fmaxf(x->wamax, fabsf(lwq_load_f(x->w, x->src->dtype, (size_t)k)));
    }
    /* routed experts: the max over every calibrated expert of the layer reading the same input
     * (Model Optimizer 0.47's shared fused-experts input quantizer), cold ones included */
    float *fill = calloc((size_t)(nm > 0 ? nm : 1), sizeof *fill);
    for (int i = 0; i < nm; i++) {
        if (m[i].fmt == QC_NONE || (m[i].expert < 0 && m[i].rows > 0 && m[i].in_amax > 0))
            continue;
        cr_assert_geq(m[i].expert, 0, "%s: no calibration token reached it, and it is not a routed expert", m[i].name);
        for (int j = 0; j < nm; j++)
            if (m[j].expert >= 0 && m[j].rows > 0 && !strcmp(m[j].ekey, m[i].ekey))
                fill[i] = fmaxf(fill[i], m[j].in_amax);
        cr_assert(fill[i] > 0, "%s: cold, and no sibling expert was calibrated", m[i].name);
    }
    for (int i = 0; i < nm; i++)
        if (fill[i] > 0)
            m[i].in_amax = fill[i];
    free(fill);
    for (int i = 0; i < nm; i++) {
        qmod *x = &m[i];
        if (x->fmt == QC_NONE)
            continue;
        shard_of(x->name, NL, shard, sizeof shard);
        if (x->fmt == QC_FP8) {
            /* an expert's gate/up: one weight amax (Model Optimizer's gate_up_proj slice) */
            float gw = x->wamax;
            for (int j = 0; x->expert >= 0 && x->group[0] && j < nm; j++)
                if (m[j].fmt == QC_FP8 && !strcmp(m[j].group, x->group))
                    gw = fmaxf(gw, m[j].wamax);
            check_fp8(&o, x, gw, shard);
            expected += 3;
            continue;
        }
        float gw = x->wamax, gi = x->in_amax;
        for (int j = 0; x->group[0] && j < nm; j++)
            if (m[j].fmt == QC_NVFP4 && !strcmp(m[j].group, x->group)) {
                gw = fmaxf(gw, m[j].wamax);
                gi = fmaxf(gi, m[j].in_amax);
            }
        check_nvfp4(&o, x, gw, gi, shard);
        expected += 4;
    }
    for (int L = 0; L < NL; L++) {
        char kn[160], vn[160], wn[160];
        snprintf(wn, sizeof wn, "model.layers.%d.self_attn.k_proj.weight", L);
        snprintf(kn, sizeof kn, "model.layers.%d.self_attn.k_proj.k_scale", L);
        snprintf(vn, sizeof vn, "model.layers.%d.self_attn.v_proj.v_scale", L);
        if (kv != QC_KV_FP8 || !lwq_ckpt_find(&ck, wn)) {
            cr_assert_null(qc_out_find(&o, kn, NULL), "%s written without a calibrated FP8 KV cache", kn);
            cr_assert_null(qc_out_find(&o, vn, NULL), "%s written without a calibrated FP8 KV cache", vn);
            continue;
        }
        shard_of(kn, NL, shard, sizeof shard);
        float ks = qc_out_scalar(&o, kn), vs = qc_out_scalar(&o, vn);
        assert_in_shard(&o, kn, shard);
        assert_in_shard(&o, vn, shard);
        cr_assert(ks > 0 && ks == ref->k_amax[L] / 448.0f, "%s = %.9g, expected amax(k) %.9g / 448", kn, ks,
                  ref->k_amax[L]);
        cr_assert(vs > 0 && vs == ref->v_amax[L] / 448.0f, "%s = %.9g, expected amax(v) %.9g / 448", vn, vs,
                  ref->v_amax[L]);
        expected += 2;
    }
    int held = 0;
    for (int f = 0; f < o.nfiles; f++)
        held += o.files[f].n;
    cr_assert_eq(held, expected, "the output holds %d tensors, FORMATS.md asks for %d", held, expected);
    check_configs(model_dir, out_dir, m, nm, kv);
    check_side_files(model_dir, out_dir);
    for (int i = 0; i < nm; i++)
        free(m[i].w);
    free(m);
    qc_out_free(&o);
    lwq_ckpt_free(&ck);
}
