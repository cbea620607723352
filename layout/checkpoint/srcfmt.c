/* layout/checkpoint/srcfmt.c — FP8-block and MXFP4 source tensors (contract in srcfmt.h). */
#include "layout/checkpoint/srcfmt.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "layout/format/quant_formats.h"

const char *lwq_srcfmt_name(lwq_srcfmt_kind k)
{
    switch (k) {
    case LWQ_SRCFMT_PLAIN: return "plain";
    case LWQ_SRCFMT_FP8_BLOCK: return "fp8-block";
    case LWQ_SRCFMT_MXFP4: return "mxfp4";
    }
    return "?";
}

static const cJSON *find_qc(const cJSON *root)
{
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (!qc) {
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (cJSON_IsObject(tc))
            qc = cJSON_GetObjectItemCaseSensitive(tc, "quantization_config");
    }
    return qc;
}

int lwq_srcfmt_from_config(const lwq_model_config *c, lwq_srcfmt *f, lwq_error *e)
{
    memset(f, 0, sizeof *f);
    f->out = lwq_dtype_is_float(c->dtype) && c->dtype != LWQ_F64 ? c->dtype : LWQ_BF16;
    const cJSON *qc = c->raw ? find_qc(c->raw) : NULL;
    if (!qc || cJSON_IsNull(qc))
        return 0;
    if (!cJSON_IsObject(qc))
        return lwq_errf(e, LWQ_EFORMAT, "config.json: quantization_config must be an object");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    if (!cJSON_IsString(m))
        return lwq_errf(e, LWQ_EFORMAT, "config.json: quantization_config.quant_method must be a "
                        "string");
    if (!strcmp(m->valuestring, "mxfp4")) {
        f->kind = LWQ_SRCFMT_MXFP4;
        return 0;
    }
    if (strcmp(m->valuestring, "fp8"))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config.json: source quantization_config.quant_method "
                        "\"%s\" is not supported (fp8 with weight_block_size, mxfp4)",
                        m->valuestring);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(qc, "fmt");
    if (fmt && (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "e4m3")))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config.json: quantization_config.fmt must be "
                        "\"e4m3\" (FP8 E4M3 sources only)");
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(qc, "weight_block_size");
    if (!cJSON_IsArray(bs) || cJSON_GetArraySize(bs) != 2)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config.json: FP8 sources need quantization_config."
                        "weight_block_size [rows, cols] (per-tensor FP8 sources are not "
                        "supported)");
    int64_t v[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetArrayItem(bs, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 1 ||
            x->valuedouble > 65536)
            return lwq_errf(e, LWQ_EFORMAT, "config.json: quantization_config.weight_block_size"
                            "[%d] must be an integer in 1..65536", i);
        v[i] = (int64_t)x->valuedouble;
    }
    f->kind = LWQ_SRCFMT_FP8_BLOCK;
    f->block_rows = v[0];
    f->block_cols = v[1];
    return 0;
}

/* ---- kernels --------------------------------------------------------------------------------- */

typedef struct deq_job {
    const uint8_t *a, *b; /* fp8: weight bytes; mxfp4: blocks, scales */
    const void *sinv;
    lwq_dtype sdt, odt;
    int64_t cols, scols, br, bc, groups;
    void *out;
    int64_t *bad;         /* per thread: first bad element / group, or -1 */
    float lut[256];       /* fp8: value of each E4M3 byte (NaN bytes included, flagged apart) */
} deq_job;

/* n values of f32 row v into out[o..] as dt (one rounding each). */
static inline void put_row(void *out, lwq_dtype dt, int64_t o, const float *v, int64_t n)
{
    if (dt == LWQ_BF16) {
        uint16_t *d = (uint16_t *)out + o;
        for (int64_t i = 0; i < n; i++)
            d[i] = lwq_f32_to_bf16(v[i]);
    } else if (dt == LWQ_F32) {
        memcpy((float *)out + o, v, (size_t)n * sizeof(float));
    } else {
        uint16_t *d = (uint16_t *)out + o;
        for (int64_t i = 0; i < n; i++)
            d[i] = lwq_f32_to_f16(v[i]);
    }
}

#define DEQ_CHUNK 256

static void fp8_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    deq_job *j = ctx;
    float buf[DEQ_CHUNK];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = j->a + r * j->cols;
        int64_t sr = (r / j->br) * j->scols;
        for (int64_t c0 = 0; c0 < j->cols; c0 += j->bc) {
            const float s = lwq_load_f(j->sinv, j->sdt, (size_t)(sr + c0 / j->bc));
            const int64_t c1 = c0 + j->bc < j->cols ? c0 + j->bc : j->cols;
            for (int64_t a = c0; a < c1; a += DEQ_CHUNK) {
                int64_t m = c1 - a < DEQ_CHUNK ? c1 - a : DEQ_CHUNK;
                int nan = 0;
                for (int64_t i = 0; i < m; i++) {
                    buf[i] = j->lut[w[a + i]] * s;
                    nan |= (w[a + i] & 0x7f) == 0x7f;
                }
                if (nan && j->bad[tid] < 0)
                    for (int64_t i = 0; i < m && j->bad[tid] < 0; i++)
                        if ((w[a + i] & 0x7f) == 0x7f)
                            j->bad[tid] = r * j->cols + a + i;
                put_row(j->out, j->odt, r * j->cols + a, buf, m);
            }
        }
    }
}

static void mx_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    deq_job *j = ctx;
    float lut[16], buf[LWQ_MXFP4_GROUP];
    for (int c = 0; c < 16; c++)
        lut[c] = lwq_e2m1_to_f32((uint8_t)c);
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t g = 0; g < j->groups; g++) {
            const uint8_t *blk = j->a + (r * j->groups + g) * (LWQ_MXFP4_GROUP / 2);
            /* 2^(byte - 127) is a power of two down to 2^-127 (an f32 subnormal): every product
             * below is exact in f32 unless it overflows, which only the group maximum can tell */
            const float sc = ldexpf(1.0f, (int)j->b[r * j->groups + g] - 127);
            for (int i = 0; i < LWQ_MXFP4_GROUP / 2; i++) {
                buf[2 * i] = lut[blk[i] & 0x0f] * sc;
                buf[2 * i + 1] = lut[blk[i] >> 4] * sc;
            }
            if (isinf(lwq_round_to(6.0f * sc, j->odt)))
                for (int i = 0; i < LWQ_MXFP4_GROUP && j->bad[tid] < 0; i++)
                    if (isinf(lwq_round_to(buf[i], j->odt)))
                        j->bad[tid] = r * j->groups + g;
            put_row(j->out, j->odt, (r * j->groups + g) * LWQ_MXFP4_GROUP, buf, LWQ_MXFP4_GROUP);
        }
    }
}

static int64_t first_bad(const int64_t *bad, int n)
{
    int64_t b = -1;
    for (int i = 0; i < n; i++)
        if (bad[i] >= 0 && (b < 0 || bad[i] < b))
            b = bad[i];
    return b;
}

static int check_out(const char *name, lwq_dtype dt, lwq_error *e)
{
    if (dt != LWQ_F32 && dt != LWQ_BF16 && dt != LWQ_F16)
        return lwq_errf(e, LWQ_EINVAL, "%s: dequantize to %s: output must be F32, BF16 or F16",
                        name, lwq_dtype_name(dt));
    return 0;
}

int lwq_srcfmt_fp8_dequant(const char *name, const uint8_t *w, int64_t rows, int64_t cols,
                           const void *sinv, lwq_dtype sdt, int64_t srows, int64_t scols,
                           int64_t br, int64_t bc, lwq_dtype out_dt, void *out, lwq_error *e)
{
    int rc = check_out(name, out_dt, e);
    if (rc)
        return rc;
    if (sdt != LWQ_F32 && sdt != LWQ_BF16 && sdt != LWQ_F16)
        return lwq_errf(e, LWQ_EFORMAT, "%s" LWQ_SRCFMT_SCALE_INV ": dtype %s, expected F32, BF16 "
                        "or F16", name, lwq_dtype_name(sdt));
    if (rows < 0 || cols < 0 || br < 1 || bc < 1 || srows != (rows + br - 1) / br ||
        scols != (cols + bc - 1) / bc)
        return lwq_errf(e, LWQ_EFORMAT, "%s" LWQ_SRCFMT_SCALE_INV ": shape [%" PRId64 ", %" PRId64
                        "], expected [%" PRId64 ", %" PRId64 "] for a [%" PRId64 ", %" PRId64
                        "] weight in %" PRId64 "x%" PRId64 " blocks", name, srows, scols,
                        br > 0 ? (rows + br - 1) / br : 0, bc > 0 ? (cols + bc - 1) / bc : 0, rows,
                        cols, br, bc);
    for (int64_t i = 0; i < srows * scols; i++) {
        float s = lwq_load_f(sinv, sdt, (size_t)i);
        if (!isfinite(s))
            return lwq_errf(e, LWQ_EFORMAT, "%s" LWQ_SRCFMT_SCALE_INV ": block (%" PRId64 ", %"
                            PRId64 ") has scale %g; scales must be finite", name, i / scols,
                            i % scols, (double)s);
    }
    int nt = lwq_parallel_threads();
    int64_t *bad = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *bad);
    if (!bad)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    for (int i = 0; i < nt; i++)
        bad[i] = -1;
    deq_job *j = malloc(sizeof *j);
    if (!j) {
        free(bad);
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    }
    *j = (deq_job){w, NULL, sinv, sdt, out_dt, cols, scols, br, bc, 0, out, bad, {0}};
    for (int b = 0; b < 256; b++)
        j->lut[b] = lwq_e4m3_to_f32((uint8_t)b);
    lwq_parallel_for(rows, 16, fp8_rows, j);
    free(j);
    int64_t b = first_bad(bad, nt);
    free(bad);
    if (b >= 0)
        return lwq_errf(e, LWQ_EFORMAT, "%s: element (%" PRId64 ", %" PRId64 ") is the E4M3 NaN "
                        "byte 0x%02x", name, b / cols, b % cols, w[b]);
    return 0;
}

int lwq_srcfmt_mxfp4_dequant(const char *name, const uint8_t *blocks, const uint8_t *scales,
                             int64_t rows, int64_t groups, lwq_dtype out_dt, void *out,
                             lwq_error *e)
{
    int rc = check_out(name, out_dt, e);
    if (rc)
        return rc;
    for (int64_t i = 0; i < rows * groups; i++)
        if (scales[i] == 255)
            return lwq_errf(e, LWQ_EFORMAT, "%s" LWQ_SRCFMT_SCALES ": group %" PRId64 " of row %"
                            PRId64 " has the E8M0 NaN scale 0xff", name, i % groups, i / groups);
    int nt = lwq_parallel_threads();
    int64_t *bad = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *bad);
    if (!bad)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    for (int i = 0; i < nt; i++)
        bad[i] = -1;
    deq_job j = {blocks, scales, NULL, LWQ_F32, out_dt, 0, 0, 1, 1, groups, out, bad, {0}};
    lwq_parallel_for(rows, 16, mx_rows, &j);
    int64_t b = first_bad(bad, nt);
    free(bad);
    if (b >= 0)
        return lwq_errf(e, LWQ_EFORMAT, "%s: group %" PRId64 " of row %" PRId64 " (scale 2^%d) "
                        "overflows %s", name, b % groups, b / groups, (int)scales[b] - 127,
                        lwq_dtype_name(out_dt));
    return 0;
}

/* ---- naming rules ---------------------------------------------------------------------------- */

static const lwq_ckpt_tensor *find_suffixed(const lwq_ckpt *c, const char *base, const char *suf)
{
    char n[512];
    if ((size_t)snprintf(n, sizeof n, "%s%s", base, suf) >= sizeof n)
        return NULL;
    return lwq_ckpt_find(c, n);
}

int lwq_srcfmt_strip_suffix(const char *name, const char *suf, char *out, size_t cap)
{
    size_t n = strlen(name), s = strlen(suf);
    if (n <= s || strcmp(name + n - s, suf) || n - s >= cap)
        return 0;
    memcpy(out, name, n - s);
    out[n - s] = 0;
    return 1;
}

int lwq_srcfmt_packed_shape(const lwq_ckpt *c, const char *name, int *ndim, int64_t *shape)
{
    const lwq_ckpt_tensor *b = find_suffixed(c, name, LWQ_SRCFMT_BLOCKS);
    const lwq_ckpt_tensor *s = find_suffixed(c, name, LWQ_SRCFMT_SCALES);
    if (!b || !s || b->ndim < 2 || b->shape[b->ndim - 1] != LWQ_MXFP4_GROUP / 2)
        return 0;
    *ndim = b->ndim - 1;
    for (int i = 0; i < b->ndim - 1; i++)
        shape[i] = b->shape[i];
    shape[b->ndim - 2] *= LWQ_MXFP4_GROUP;
    return 1;
}

int lwq_srcfmt_is_aux(const lwq_ckpt *c, const char *name)
{
    char base[512];
    if (lwq_srcfmt_strip_suffix(name, LWQ_SRCFMT_SCALE_INV, base, sizeof base)) {
        const lwq_ckpt_tensor *w = lwq_ckpt_find(c, base);
        return w && w->dtype == LWQ_F8_E4M3;
    }
    if (lwq_srcfmt_strip_suffix(name, LWQ_SRCFMT_BLOCKS, base, sizeof base))
        return find_suffixed(c, base, LWQ_SRCFMT_SCALES) != NULL;
    if (lwq_srcfmt_strip_suffix(name, LWQ_SRCFMT_SCALES, base, sizeof base))
        return find_suffixed(c, base, LWQ_SRCFMT_BLOCKS) != NULL;
    return 0;
}
