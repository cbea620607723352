/* engine/eval/eval_qdir.c — quantized checkpoints for `lwq eval`: the config's quantization, the check
 * of every tensor against the source, layer reads, and the dequantized view of a quantized layer
 * (engine/eval/eval_internal.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file.h"
#include "engine/eval/eval_internal.h"
#include "kernels/quant.h"
#include "layout/export.h"
#include "layout/quant_formats.h"
#include "layout/srcfmt.h"

/* ---- the declared quantization --------------------------------------------------------------- */

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int known_algo(const char *a)
{
    return !strcmp(a, "NVFP4") || !strcmp(a, "FP8") || !strcmp(a, "W4A16_NVFP4") || !strcmp(a, "MIXED_PRECISION");
}

/* The quantization block: hf_quant_config.json's "quantization", else config.json's
 * quantization_config (quant_method "modelopt"). */
static int read_declared(lwq_qdir *q, const char *dir, cJSON **mixed_layers, cJSON **owner, lwq_error *e)
{
    char p[PATH_MAX], *txt = NULL;
    size_t len;
    *mixed_layers = NULL;
    *owner = NULL;
    int rc = lwq_pathf(e, p, sizeof p, "%s/hf_quant_config.json", dir);
    if (rc)
        return rc;
    const cJSON *qb = NULL;
    cJSON *root = NULL;
    struct stat st;
    /* present in any form (too big, a directory, a FIFO) means it is read or refused: passing
     * over it would evaluate the checkpoint as whatever config.json says instead */
    if (stat(p, &st) == 0 || errno != ENOENT) {
        if ((rc = lwq_file_read_all(p, 16u << 20, &txt, &len, e)) != 0)
            return rc;
        root = cJSON_ParseWithLength(txt, len);
        free(txt);
        if (!root)
            return lwq_errf(e, LWQ_EFORMAT, "%s: not valid JSON", p);
        qb = cJSON_GetObjectItemCaseSensitive(root, "quantization");
        if (!cJSON_IsObject(qb)) {
            cJSON_Delete(root);
            return lwq_errf(e, LWQ_EFORMAT, "%s: no \"quantization\" object", p);
        }
    } else {
        const cJSON *qc = cJSON_GetObjectItemCaseSensitive(q->ck.cfg.raw, "quantization_config");
        if (!cJSON_IsObject(qc))
            return lwq_errf(e, LWQ_EFORMAT, "%s has neither hf_quant_config.json nor a quantization_config in "
                            "config.json: not a quantized checkpoint", dir);
        /* Model Optimizer writes quant_method "modelopt"; some of its exports name only the producer */
        const char *m = jstr(qc, "quant_method");
        const char *prod = jstr(cJSON_GetObjectItemCaseSensitive(qc, "producer"), "name");
        if (m ? strcmp(m, "modelopt") != 0 : !(prod && !strcmp(prod, "modelopt")))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s/config.json: quantization_config.quant_method is \"%s\"; only "
                            "Model Optimizer (\"modelopt\") checkpoints are emulated", dir, m ? m : "(none)");
        root = cJSON_Duplicate(qc, 1);
        qb = root;
        snprintf(p, sizeof p, "%s/config.json quantization_config", dir);
    }
    const char *algo = jstr(qb, "quant_algo");
    rc = 0;
    if (!algo)
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: no quant_algo", p);
    else if (!known_algo(algo))
        rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_algo \"%s\" is not emulated (NVFP4, FP8, W4A16_NVFP4, MIXED_PRECISION are)", p,
                      algo);
    if (rc == 0) {
        snprintf(q->quant_algo, sizeof q->quant_algo, "%s", algo);
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(qb, "group_size");
        if (!strcmp(algo, "NVFP4") && gs && !cJSON_IsNull(gs) && !(cJSON_IsNumber(gs) && gs->valuedouble == 16))
            rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: NVFP4 group_size must be 16", p);
    }
    if (rc == 0) {
        const cJSON *kv = cJSON_GetObjectItemCaseSensitive(qb, "kv_cache_quant_algo");
        const cJSON *ks = cJSON_GetObjectItemCaseSensitive(qb, "kv_cache_scheme");
        if (cJSON_IsString(kv)) {
            if (strcmp(kv->valuestring, "FP8"))
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: kv_cache_quant_algo \"%s\" is not emulated (FP8 or null)", p,
                              kv->valuestring);
            q->kv_fp8 = 1;
        } else if (kv && !cJSON_IsNull(kv)) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: kv_cache_quant_algo must be a string or null", p);
        } else if (cJSON_IsString(ks)) { /* older exports: "kv_cache_scheme": "FP8" */
            if (strcmp(ks->valuestring, "FP8"))
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: kv_cache_scheme \"%s\" is not emulated (FP8)", p, ks->valuestring);
            q->kv_fp8 = 1;
        } else if (cJSON_IsObject(ks)) {
            const cJSON *nb = cJSON_GetObjectItemCaseSensitive(ks, "num_bits");
            const char *ty = jstr(ks, "type");
            if (!cJSON_IsNumber(nb) || nb->valuedouble != 8 || !ty || strcmp(ty, "float"))
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: kv_cache_scheme other than 8-bit float is not emulated", p);
            q->kv_fp8 = 1;
        }
    }
    if (rc == 0 && !strcmp(algo, "MIXED_PRECISION")) {
        cJSON *ml = cJSON_GetObjectItemCaseSensitive(qb, "quantized_layers");
        if (!cJSON_IsObject(ml))
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: MIXED_PRECISION without a quantized_layers object", p);
        for (const cJSON *it = ml ? ml->child : NULL; rc == 0 && it; it = it->next) {
            const char *a = jstr(it, "quant_algo");
            if (!a || (strcmp(a, "NVFP4") && strcmp(a, "FP8") && strcmp(a, "W4A16_NVFP4")))
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quantized_layers.%s: quant_algo \"%s\" is not emulated (NVFP4, "
                              "FP8, W4A16_NVFP4 are)", p, it->string, a ? a : "(none)");
        }
        *mixed_layers = ml;
    }
    if (rc)
        cJSON_Delete(root);
    else
        *owner = root;
    return rc;
}

/* ---- tensors against the source ---------------------------------------------------------------- */

static void shape_str(const int64_t *s, int nd, char *buf, size_t cap)
{
    size_t k = 0;
    k += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

/* A quantized linear `module` (source weight ws): its packed weight and scales are what the
 * declared algorithm says, with the shapes the source implies. */
static int check_quantized(const lwq_qdir *q, const cJSON *mixed, const char *module, const lwq_ckpt_tensor *ws,
                           const lwq_ckpt_tensor *wq, int src_layer, lwq_error *e)
{
    const lwq_ckpt *c = &q->ck;
    const lwq_ckpt_tensor *sc = lwq_ckpt_find_in(c, module, ".weight_scale"), *s2 = lwq_ckpt_find_in(c, module, ".weight_scale_2"),
                          *is = lwq_ckpt_find_in(c, module, ".input_scale");
    const char *dir = c->dir;
    if (src_layer < 0)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s.weight is quantized; a quantized %s outside the decoder layers is "
                        "not emulated (the head runs in the source dtype)", dir, module, module);
    /* a depthwise conv1d [channels, 1, kernel] (qwen3_next) is quantized to FP8 per tensor, as
     * Model Optimizer does */
    int conv = ws->ndim == 3 && ws->shape[1] == 1;
    if (ws->ndim != 2 && !conv)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s.weight is quantized with %d dimensions; only 2-D linears and "
                        "[channels, 1, kernel] conv1d weights are read", dir, module, ws->ndim);
    int64_t out = ws->shape[0], in = ws->shape[ws->ndim - 1];
    const char *fmt = wq->dtype == LWQ_U8 ? "NVFP4" : wq->dtype == LWQ_F8_E4M3 ? "FP8" : NULL;
    if (conv && fmt && strcmp(fmt, "FP8"))
        return lwq_errf(e, LWQ_EFORMAT, "%s: %s.weight is a conv1d stored as %s; a conv1d is quantized to FP8 only", dir,
                        module, fmt);
    if (!fmt)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s.weight has a weight_scale but dtype %s: neither NVFP4 (U8) nor FP8 "
                        "(F8_E4M3)", dir, module, lwq_dtype_name(wq->dtype));
    const char *declared = q->quant_algo;
    if (mixed) {
        const cJSON *ent = lwq_export_listed(mixed, module); /* its own entry or its experts module's */
        declared = jstr(ent, "quant_algo");
        if (!declared)
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s is quantized (%s) but not listed in quantized_layers", dir, module,
                            fmt);
    }
    /* W4A16_NVFP4: NVFP4 weights, no input quantization (evaluated as the dequantized weights) */
    int wo = !strcmp(declared, "W4A16_NVFP4") && !strcmp(fmt, "NVFP4");
    if (strcmp(declared, fmt) && !wo)
        return lwq_errf(e, LWQ_EFORMAT, "%s: %s.weight is stored as %s but the config declares %s", dir, module, fmt,
                        declared);
    if (wo && is)
        return lwq_errf(e, LWQ_EFORMAT, "%s: %s is declared W4A16_NVFP4 (weight-only) but has an input_scale", dir,
                        module);
    if (!wo && (!is || !lwq_ckpt_is_f32_scalar(is)))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s.input_scale is %s; weight-only or dynamic activation "
                        "quantization is not emulated (a static F32 scalar input_scale is needed)", dir, module,
                        is ? "not an F32 scalar" : "missing");
    char got[96], want[96];
    if (!strcmp(fmt, "NVFP4")) {
        if (in % 16)
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s is NVFP4 but has %lld in-features (not a multiple of 16)", dir,
                            module, (long long)in);
        int64_t wp[2] = {out, in / 2}, sp[2] = {out, in / 16};
        if (wq->ndim != 2 || wq->shape[0] != wp[0] || wq->shape[1] != wp[1]) {
            shape_str(wq->shape, wq->ndim, got, sizeof got);
            shape_str(wp, 2, want, sizeof want);
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s.weight has shape %s, NVFP4 of the source's [%lld, %lld] is %s", dir,
                            module, got, (long long)out, (long long)in, want);
        }
        if (!sc || sc->dtype != LWQ_F8_E4M3 || sc->ndim != 2 || sc->shape[0] != sp[0] || sc->shape[1] != sp[1]) {
            shape_str(sp, 2, want, sizeof want);
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s.weight_scale must be F8_E4M3 %s", dir, module, want);
        }
        if (!s2 || !lwq_ckpt_is_f32_scalar(s2))
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s.weight_scale_2 must be an F32 scalar", dir, module);
    } else {
        int same = wq->ndim == ws->ndim;
        for (int d = 0; same && d < ws->ndim; d++)
            same = wq->shape[d] == ws->shape[d];
        if (!same) {
            shape_str(wq->shape, wq->ndim, got, sizeof got);
            shape_str(ws->shape, ws->ndim, want, sizeof want);
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s.weight has shape %s, the source's is %s", dir, module, got, want);
        }
        if (!sc || !lwq_ckpt_is_f32_scalar(sc))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s.weight_scale is not an F32 scalar; only per-tensor FP8 "
                            "weights are emulated", dir, module);
        if (s2)
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s is FP8 but has a weight_scale_2", dir, module);
    }
    return 0;
}

/* A tensor of the quantized checkpoint that the source does not have must be one of a quantized
 * linear's scales, or a k/v cache scale of a decoder layer. */
static int check_extra(const lwq_qdir *q, const lwq_ckpt *src, const lwq_ckpt_tensor *t, lwq_error *e)
{
    static const char *const sfx[] = {".weight_scale_2", ".weight_scale", ".input_scale"};
    char module[512];
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++)
        if (lwq_srcfmt_strip_suffix(t->name, sfx[i], module, sizeof module)) {
            const lwq_ckpt_tensor *w = lwq_ckpt_find_in(&q->ck, module, ".weight");
            if (!w || (w->dtype != LWQ_U8 && w->dtype != LWQ_F8_E4M3) || !lwq_ckpt_find_in(src, module, ".weight"))
                return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s belongs to no quantized linear of the source", q->ck.dir,
                                t->name);
            return 0;
        }
    if (lwq_srcfmt_strip_suffix(t->name, ".k_scale", module, sizeof module) ||
        lwq_srcfmt_strip_suffix(t->name, ".v_scale", module, sizeof module)) {
        if (t->layer < 0 || !lwq_ckpt_is_f32_scalar(t))
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s must be an F32 scalar of a decoder layer", q->ck.dir, t->name);
        return 0;
    }
    return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s is not in the source checkpoint %s", q->ck.dir, t->name, src->dir);
}

static int check_tensors(const lwq_qdir *q, const lwq_ckpt *src, const cJSON *mixed, lwq_error *e)
{
    const lwq_ckpt *c = &q->ck;
    char module[512], logical[512];
    for (int i = 0; i < src->ntensors; i++) {
        const lwq_ckpt_tensor *s = &src->tensors[i];
        if (lwq_srcfmt_is_aux(src, s->name))
            continue; /* an FP8-block / MXFP4 scale of the source: dequantized away */
        int nd = s->ndim;
        int64_t shape[LWQ_ST_MAX_DIMS];
        memcpy(shape, s->shape, sizeof shape);
        const char *name = s->name;
        int packed = 0;
        if (lwq_srcfmt_strip_suffix(s->name, LWQ_SRCFMT_BLOCKS, logical, sizeof logical) &&
            lwq_srcfmt_packed_shape(src, logical, &nd, shape) == 1) {
            name = logical;
            packed = 1;
        }
        packed |= s->dtype == LWQ_F8_E4M3; /* an FP8-block source weight */
        const lwq_ckpt_tensor *t = lwq_ckpt_find(c, name);
        if (!t)
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s of the source %s is missing", c->dir, name, src->dir);
        int quantized = lwq_srcfmt_strip_suffix(name, ".weight", module, sizeof module) &&
                        lwq_ckpt_find_in(c, module, ".weight_scale") && (t->dtype == LWQ_U8 || t->dtype == LWQ_F8_E4M3);
        if (quantized) {
            lwq_ckpt_tensor sv = *s;
            sv.ndim = nd;
            memcpy(sv.shape, shape, sizeof shape);
            int rc = check_quantized(q, mixed, module, &sv, t, s->layer, e);
            if (rc)
                return rc;
            continue;
        }
        int same = t->ndim == nd;
        for (int d = 0; same && d < nd; d++)
            same = t->shape[d] == shape[d];
        if (!same) {
            char a[96], b[96];
            shape_str(t->shape, t->ndim, a, sizeof a);
            shape_str(shape, nd, b, sizeof b);
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s has shape %s, the source's is %s", c->dir, name, a, b);
        }
        if (!packed && t->dtype != s->dtype)
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s is %s, the source's is %s (unquantized tensors must keep the "
                            "source dtype)", c->dir, name, lwq_dtype_name(t->dtype), lwq_dtype_name(s->dtype));
    }
    for (int i = 0; i < c->ntensors; i++) {
        const lwq_ckpt_tensor *t = &c->tensors[i];
        if (lwq_ckpt_find(src, t->name))
            continue;
        char blocks[560];
        snprintf(blocks, sizeof blocks, "%s%s", t->name, LWQ_SRCFMT_BLOCKS);
        if (lwq_ckpt_find(src, blocks))
            continue;
        int rc = check_extra(q, src, t, e);
        if (rc)
            return rc;
    }
    return 0;
}

int lwq_qdir_open(lwq_qdir *q, const char *dir, const lwq_ckpt *src, lwq_error *e)
{
    memset(q, 0, sizeof *q);
    int rc = lwq_ckpt_open(dir, &q->ck, e);
    if (rc)
        return rc;
    q->open = 1;
    const lwq_model_config *a = &src->cfg, *b = &q->ck.cfg;
    if (strcmp(a->model_type, b->model_type) || a->num_hidden_layers != b->num_hidden_layers ||
        a->hidden_size != b->hidden_size || a->vocab_size != b->vocab_size) {
        lwq_qdir_free(q);
        return lwq_errf(e, LWQ_EFORMAT, "%s/config.json describes a %s model with %d layers, hidden %lld, vocab %lld; "
                        "the source %s is a %s model with %d layers, hidden %lld, vocab %lld", dir, b->model_type,
                        b->num_hidden_layers, (long long)b->hidden_size, (long long)b->vocab_size, src->dir,
                        a->model_type, a->num_hidden_layers, (long long)a->hidden_size, (long long)a->vocab_size);
    }
    cJSON *mixed = NULL, *owner = NULL;
    if ((rc = read_declared(q, dir, &mixed, &owner, e)) == 0)
        rc = check_tensors(q, src, mixed, e);
    cJSON_Delete(owner);
    for (int i = 0; rc == 0 && i < q->ck.ntensors; i++)
        if (q->ck.tensors[i].layer < 0 || q->ck.tensors[i].layer >= q->ck.cfg.num_hidden_layers)
            q->tail_bytes += q->ck.tensors[i].nbytes;
    if (rc)
        lwq_qdir_free(q);
    return rc;
}

void lwq_qdir_free(lwq_qdir *q)
{
    if (q->open)
        lwq_ckpt_free(&q->ck);
    memset(q, 0, sizeof *q);
}

void lwq_qdir_name_file(const lwq_qdir *q, lwq_error *e)
{
    if (!e || !e->code || !q->open)
        return;
    char name[512], msg[LWQ_ERRMSG_MAX];
    size_t n = strcspn(e->msg, " [:");
    if (n == 0 || n >= sizeof name)
        return;
    memcpy(name, e->msg, n);
    name[n] = 0;
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&q->ck, name);
    if (!t)
        return;
    int w = snprintf(msg, sizeof msg, "%s: %s", q->ck.files[t->file].path, e->msg);
    if (w > 0 && (size_t)w < sizeof msg)
        memcpy(e->msg, msg, (size_t)w + 1);
}

int lwq_qdir_read_layer(const lwq_qdir *q, int layer, lwq_tlist *out, lwq_error *e)
{
    const lwq_ckpt *c = &q->ck;
    const lwq_ckpt_layer *L = layer < 0 ? &c->tail : &c->layers[layer];
    memset(out, 0, sizeof *out);
    for (int k = 0; k < L->n; k++) {
        const lwq_ckpt_tensor *t = &c->tensors[L->idx[k]];
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf) {
            lwq_tlist_free(out);
            return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu bytes", t->name, (unsigned long long)t->nbytes);
        }
        int rc = lwq_ckpt_read_tensor(c, t, buf, e);
        if (rc == 0)
            rc = lwq_tlist_add(out, t->name, t->dtype, t->ndim, t->shape, buf, 1, e);
        else
            free(buf);
        if (rc < 0) {
            lwq_tlist_free(out);
            return rc;
        }
    }
    lwq_tlist_sort(out);
    return 0;
}

/* ---- the dequantized view of a quantized layer ------------------------------------------------ */

static const lwq_htensor *tfind(const lwq_tlist *l, const char *module, const char *suffix)
{
    char n[640];
    snprintf(n, sizeof n, "%s%s", module, suffix);
    return lwq_tlist_find(l, n);
}

static float scalar(const lwq_htensor *t) { return *(const float *)t->data; }

/* The stored codes of quantized linear `module` (w: its weight, sc / s2: its scales): NVFP4 block
 * scales positive and finite E4M3, weight_scale_2 and an FP8 weight_scale finite and > 0, no NaN
 * FP8 weight code, and no weight the scales make larger than a float: a finite but huge
 * weight_scale_2 times a block scale (times the largest E2M1 code, 6) or an FP8 weight_scale times
 * a code would dequantize into inf (and 0 x inf into NaN).  The first bad one is named. */
static int check_codes(const char *module, lwq_qformat f, const lwq_htensor *w, const lwq_htensor *sc,
                       const lwq_htensor *s2, lwq_error *e)
{
    const uint8_t *b = f == LWQ_QFMT_NVFP4 ? sc->data : w->data;
    uint64_t n = f == LWQ_QFMT_NVFP4 ? sc->nbytes : w->nbytes, at = 0;
    float top = 0; /* the largest block scale (NVFP4) or |code| (FP8), at index `at` */
    for (uint64_t i = 0; i < n; i++) {
        float v = lwq_e4m3_to_f32(b[i] & 0x7f);
        if (v > top)
            top = v, at = i;
        if (f == LWQ_QFMT_NVFP4 && !lwq_e4m3_is_block_scale(b[i]))
            return lwq_errf(e, LWQ_ENUMERIC, "%s.weight_scale[%llu] is %s (E4M3 byte 0x%02X); every NVFP4 block "
                            "scale must be finite and > 0", module, (unsigned long long)i,
                            lwq_e4m3_is_nan(b[i]) ? "NaN" : b[i] & 0x80 ? "negative" : "zero", b[i]);
        if (f == LWQ_QFMT_FP8 && lwq_e4m3_is_nan(b[i]))
            return lwq_errf(e, LWQ_ENUMERIC, "%s.weight[%llu] is an FP8 NaN code (0x%02X)", module,
                            (unsigned long long)i, b[i]);
    }
    float g = scalar(f == LWQ_QFMT_NVFP4 ? s2 : sc);
    const char *gname = f == LWQ_QFMT_NVFP4 ? "weight_scale_2" : "weight_scale";
    if (!(g > 0) || g > 3.4e38f)
        return lwq_errf(e, LWQ_ENUMERIC, "%s.%s is %g; it must be finite and > 0", module, gname, (double)g);
    double big = (double)g * top * (f == LWQ_QFMT_NVFP4 ? LWQ_E2M1_MAX : 1.0);
    if (big > FLT_MAX)
        return lwq_errf(e, LWQ_ENUMERIC, "%s.%s is %g: with %s.%s[%llu] = %g its weights reach %g, beyond a float",
                        module, gname, (double)g, module, f == LWQ_QFMT_NVFP4 ? "weight_scale" : "weight",
                        (unsigned long long)at, (double)top, big);
    return 0;
}

void lwq_qlayer_view_free(lwq_qlayer_view *v)
{
    lwq_tlist_free(&v->overlay);
    memset(v, 0, sizeof *v);
}

int lwq_qlayer_view_make(const lwq_arch_layer *plan, const lwq_tlist *qt, int kv_fp8, int weights_only, lwq_emul *em,
                         lwq_qlayer_view *v, lwq_error *e)
{
    memset(v, 0, sizeof *v);
    lwq_emul_reset(em);
    int rc = 0;
    for (int i = 0; i < plan->nlinears && rc == 0; i++) {
        const lwq_arch_linear *l = &plan->linears[i];
        const lwq_htensor *w = tfind(qt, l->name, ".weight"), *sc = tfind(qt, l->name, ".weight_scale");
        const lwq_htensor *s2 = tfind(qt, l->name, ".weight_scale_2"), *is = tfind(qt, l->name, ".input_scale");
        if (!w)
            continue; /* an absent optional linear (the forward reports a required one) */
        uint64_t elems = (uint64_t)l->out_features * (uint64_t)l->in_features;
        v->linear_weights += elems;
        v->linear_bytes += w->nbytes + (sc ? sc->nbytes : 0) + (s2 ? s2->nbytes : 0) + (is ? is->nbytes : 0);
        if (!sc || (w->dtype != LWQ_U8 && w->dtype != LWQ_F8_E4M3))
            continue; /* unquantized: runs in the source dtype */
        lwq_qformat f = w->dtype == LWQ_U8 ? LWQ_QFMT_NVFP4 : LWQ_QFMT_FP8;
        /* weight-only NVFP4 (W4A16: no input_scale, the directory's config checked that) */
        int wo = f == LWQ_QFMT_NVFP4 && !is && s2;
        if ((!is && !wo) || (f == LWQ_QFMT_NVFP4 && !s2))
            return lwq_errf(e, LWQ_EFORMAT, "%s: the scales of a %s linear are incomplete", l->name, lwq_qformat_name(f));
        /* a depthwise conv1d is no GEMM: its input quantization is not emulated, its FP8 weight
         * dequantizes like any other (weights only) */
        int conv = l->role == LWQ_ROLE_LIN_CONV;
        if (conv && !weights_only)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the input quantization of a quantized conv1d is not emulated; "
                            "--weights-only evaluates its dequantized weight", l->name);
        if (conv && f != LWQ_QFMT_FP8)
            return lwq_errf(e, LWQ_EFORMAT, "%s: a conv1d is quantized to FP8 only", l->name);
        int64_t rows = l->out_features, cols = l->in_features;
        int64_t shape[3] = {rows, conv ? 1 : cols, cols};
        /* every value is checked before anything is allocated: a NaN, zero or negative scale or
         * a NaN code would dequantize into NaN weights and a plausible-looking report */
        float in_scale = wo ? 1.0f : scalar(is);
        if (!(in_scale > 0) || in_scale > 3.4e38f)
            return lwq_errf(e, LWQ_ENUMERIC, "%s.input_scale is %g; it must be finite and > 0", l->name,
                            (double)in_scale);
        if ((rc = check_codes(l->name, f, w, sc, s2, e)) < 0)
            return rc;
        float *buf = malloc((size_t)(rows * cols) * sizeof(float) + 1);
        if (!buf)
            return lwq_errf(e, LWQ_ENOMEM, "%s: no memory for its dequantized weight", l->name);
        rc = f == LWQ_QFMT_NVFP4
                 ? lwq_quant_nvfp4_dequant(w->data, sc->data, scalar(s2), rows, cols, LWQ_F32, buf, e)
                 : lwq_quant_fp8_dequant(w->data, scalar(sc), rows * cols, LWQ_F32, buf, e);
        if (rc < 0) {
            free(buf);
            return rc;
        }
        if ((rc = lwq_tlist_add(&v->overlay, w->name, LWQ_F32, conv ? 3 : 2, shape, buf, 1, e)) < 0)
            return rc;
        /* weights only: the GEMM wrapper does not know the linear, so its input is used as is */
        if (!weights_only && !wo && (rc = lwq_emul_add(em, l->name, f, in_scale, e)) < 0)
            return rc;
        v->quantized++;
        rc = 0;
    }
    lwq_tlist_sort(&v->overlay);
    /* the KV cache: the layer's k/v scales (any name ending .k_scale / .v_scale) */
    const lwq_htensor *ks = NULL, *vs = NULL;
    for (int t = 0; t < qt->n; t++) {
        size_t n = strlen(qt->v[t].name);
        if (n > 8 && !strcmp(qt->v[t].name + n - 8, ".k_scale"))
            ks = &qt->v[t];
        if (n > 8 && !strcmp(qt->v[t].name + n - 8, ".v_scale"))
            vs = &qt->v[t];
    }
    if ((ks != NULL) != (vs != NULL))
        return lwq_errf(e, LWQ_EFORMAT, "layer %d: %s without its %s", plan->layer, ks ? ks->name : vs->name,
                        ks ? "v_scale" : "k_scale");
    if (ks && kv_fp8) {
        em->kv_fp8 = 1;
        em->k_scale = scalar(ks);
        em->v_scale = scalar(vs);
        if (!(em->k_scale > 0) || !(em->v_scale > 0) || em->k_scale > 3.4e38f || em->v_scale > 3.4e38f)
            return lwq_errf(e, LWQ_ENUMERIC, "layer %d: k_scale %g / v_scale %g must be finite and > 0", plan->layer,
                            (double)em->k_scale, (double)em->v_scale);
    } else if (kv_fp8) {
        em->kv_fp8 = 1; /* cast mode */
    }
    return 0;
}
