/* tests/helpers/model/llama2c.c — llama2.c checkpoint loader, HF converter and float64 reference
 * (tests/helpers/model/llama2c.h). */
#include "tests/helpers/model/llama2c.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "layout/checkpoint/safetensors.h"

void llama2c_free(llama2c_model *m)
{
    free(m->data);
    memset(m, 0, sizeof *m);
}

int llama2c_load(const char *path, llama2c_model *m, lwq_error *e)
{
    memset(m, 0, sizeof *m);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return lwq_errsys(e, -errno, "%s: cannot open", path);
    int32_t h[7];
    struct stat st;
    if (fread(h, sizeof h, 1, fp) != 1 || fstat(fileno(fp), &st) != 0) {
        fclose(fp);
        return lwq_errf(e, LWQ_EFORMAT, "%s: shorter than the 28-byte llama2.c header", path);
    }
    for (int i = 0; i < 7; i++)
        if (h[i] == 0 || h[i] > (1 << 20) || h[i] < -(1 << 20)) {
            fclose(fp);
            return lwq_errf(e, LWQ_EFORMAT, "%s: header field %d is %d", path, i, h[i]);
        }
    m->dim = h[0];
    m->hidden = h[1];
    m->nlayers = h[2];
    m->nheads = h[3];
    m->nkv = h[4];
    int shared = h[5] > 0;
    m->vocab = abs(h[5]);
    m->seq_len = h[6];
    if (m->dim <= 0 || m->hidden <= 0 || m->nlayers <= 0 || m->nheads <= 0 || m->nkv <= 0 ||
        m->dim % m->nheads || m->nheads % m->nkv || (m->dim / m->nheads) % 2 || m->seq_len <= 0) {
        fclose(fp);
        return lwq_errf(e, LWQ_EFORMAT, "%s: bad geometry in the header", path);
    }
    int64_t D = m->dim, F = m->hidden, L = m->nlayers, V = m->vocab, hd = D / m->nheads, KD = m->nkv * hd;
    int64_t n = V * D + L * D + L * D * D + 2 * L * KD * D + L * D * D + L * D + 3 * L * F * D + D +
                m->seq_len * hd; /* two freq_cis arrays of (seq_len, hd/2) */
    if (!shared)
        n += V * D;
    if ((uint64_t)st.st_size != 28 + 4 * (uint64_t)n) {
        fclose(fp);
        return lwq_errf(e, LWQ_EFORMAT, "%s: %lld bytes, the header implies %lld", path, (long long)st.st_size,
                        (long long)(28 + 4 * n));
    }
    if (!shared) {
        fclose(fp);
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: an unshared classifier is not supported by this helper", path);
    }
    m->data = malloc((size_t)n * sizeof(float));
    if (!m->data || fread(m->data, sizeof(float), (size_t)n, fp) != (size_t)n) {
        fclose(fp);
        llama2c_free(m);
        return lwq_errf(e, LWQ_EIO, "%s: cannot read its arrays", path);
    }
    fclose(fp);
    const float *p = m->data;
    m->emb = p, p += V * D;
    m->rms_att = p, p += L * D;
    m->wq = p, p += L * D * D;
    m->wk = p, p += L * KD * D;
    m->wv = p, p += L * KD * D;
    m->wo = p, p += L * D * D;
    m->rms_ffn = p, p += L * D;
    m->w1 = p, p += L * F * D;
    m->w2 = p, p += L * D * F;
    m->w3 = p, p += L * F * D;
    m->rms_final = p;
    return 0;
}

/* llama2.c interleaved rotary rows -> transformers rotate_half rows, per head. */
static float *permute_rows(const float *w, int heads, int hd, int cols)
{
    float *o = malloc((size_t)heads * hd * cols * sizeof *o);
    if (!o)
        return NULL;
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < hd / 2; i++)
            for (int r = 0; r < 2; r++)
                memcpy(o + ((size_t)h * hd + (size_t)r * (hd / 2) + i) * cols,
                       w + ((size_t)h * hd + 2 * (size_t)i + r) * cols, (size_t)cols * sizeof *o);
    return o;
}

static int cmp_out(const void *a, const void *b)
{
    return strcmp(((const lwq_st_out_tensor *)a)->name, ((const lwq_st_out_tensor *)b)->name);
}

int llama2c_to_hf(const llama2c_model *m, const char *out_dir, lwq_error *e)
{
    const int L = m->nlayers, D = m->dim, F = m->hidden, hd = D / m->nheads, KD = m->nkv * hd;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return lwq_errsys(e, -errno, "%s: cannot create", path);
    fprintf(fp,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d, "
            "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\", "
            "\"tie_word_embeddings\": true, \"torch_dtype\": \"float32\", \"bos_token_id\": 1, "
            "\"eos_token_id\": 2}\n",
            D, F, L, m->nheads, m->nkv, m->vocab, m->seq_len);
    if (fclose(fp) != 0)
        return lwq_errsys(e, -errno, "%s: cannot write", path);

    int n = 0, cap = 3 + 9 * L;
    lwq_st_out_tensor *t = calloc((size_t)cap, sizeof *t);
    char (*names)[96] = calloc((size_t)cap, sizeof *names);
    float **owned = calloc((size_t)(2 * L), sizeof *owned);
    int rc = t && names && owned ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory");
#define ADD(nm, p, r, c)                                                                            \
    do {                                                                                           \
        snprintf(names[n], sizeof names[n], "%s", nm);                                            \
        t[n].name = names[n];                                                                     \
        t[n].dtype = LWQ_F32;                                                                     \
        t[n].ndim = (c) ? 2 : 1;                                                                  \
        t[n].shape[0] = (r);                                                                      \
        t[n].shape[1] = (c);                                                                      \
        t[n].data = (p);                                                                          \
        n++;                                                                                      \
    } while (0)
    if (rc == 0) {
        ADD("model.embed_tokens.weight", m->emb, m->vocab, D);
        ADD("model.norm.weight", m->rms_final, D, 0);
    }
    for (int l = 0; l < L && rc == 0; l++) {
        char nm[96];
        owned[2 * l] = permute_rows(m->wq + (size_t)l * D * D, m->nheads, hd, D);
        owned[2 * l + 1] = permute_rows(m->wk + (size_t)l * KD * D, m->nkv, hd, D);
        if (!owned[2 * l] || !owned[2 * l + 1]) {
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
            break;
        }
#define LN(s) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, s), nm)
        ADD(LN("input_layernorm.weight"), m->rms_att + (size_t)l * D, D, 0);
        ADD(LN("post_attention_layernorm.weight"), m->rms_ffn + (size_t)l * D, D, 0);
        ADD(LN("self_attn.q_proj.weight"), owned[2 * l], D, D);
        ADD(LN("self_attn.k_proj.weight"), owned[2 * l + 1], KD, D);
        ADD(LN("self_attn.v_proj.weight"), m->wv + (size_t)l * KD * D, KD, D);
        ADD(LN("self_attn.o_proj.weight"), m->wo + (size_t)l * D * D, D, D);
        ADD(LN("mlp.gate_proj.weight"), m->w1 + (size_t)l * F * D, F, D);
        ADD(LN("mlp.down_proj.weight"), m->w2 + (size_t)l * D * F, D, F);
        ADD(LN("mlp.up_proj.weight"), m->w3 + (size_t)l * F * D, F, D);
#undef LN
    }
#undef ADD
    if (rc == 0) {
        qsort(t, (size_t)n, sizeof *t, cmp_out);
        snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        lwq_st_kv meta = {"format", "pt"};
        rc = lwq_st_write_file(path, t, n, &meta, 1, e);
    }
    for (int i = 0; owned && i < 2 * L; i++)
        free(owned[i]);
    free(owned);
    free(names);
    free(t);
    return rc;
}

/* ---- float64 reference, llama2.c's run.c semantics ---------------------------------------- */

/* Nearest E4M3 value (ties to the even mantissa), saturating at +-448: from the format's
 * definition (3 mantissa bits, exponent bias 7, subnormal step 2^-9), not from lwq's encoder. */
static double fp8_round(double v)
{
    double a = fabs(v), step, r;
    if (a >= 448.0)
        r = 448.0;
    else {
        int ex;
        frexp(a, &ex); /* a = f * 2^ex, f in [0.5, 1) */
        step = a < ldexp(1.0, -6) ? ldexp(1.0, -9) : ldexp(1.0, ex - 1 - 3);
        r = nearbyint(a / step) * step; /* the default rounding mode: ties to even */
        r = r > 448.0 ? 448.0 : r;
    }
    return v < 0 ? -r : r;
}

static void rmsnorm64(double *o, const double *x, const float *w, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    ss = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++)
        o[i] = (double)w[i] * (ss * x[i]);
}

/* o (rows) = W (rows, cols) x */
static void matvec64(double *o, const float *w, const double *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)w[(size_t)r * cols + c] * x[c];
        o[r] = s;
    }
}

/* Run positions [p0, p1) of `tokens` with the caches kc/vc (L, cap, KD) holding 0..p0-1;
 * logits of each position to logits + (pos - p0) * vocab. */
/* The input of linear group k (0: q/k/v, 1: o, 2: gate/up, 3: down) of layer l: observed into
 * amax[4 l + k] and/or rounded through FP8 with scale in_scale[4 l + k] (either NULL: skipped). */
static void act_hook(double *x, int n, int l, int k, double *amax, const float *in_scale, double *tmp)
{
    if (amax)
        for (int i = 0; i < n; i++)
            amax[4 * l + k] = fabs(x[i]) > amax[4 * l + k] ? fabs(x[i]) : amax[4 * l + k];
    if (in_scale) {
        double s = in_scale[4 * l + k];
        for (int i = 0; i < n; i++)
            tmp[i] = fp8_round(x[i] / s) * s;
        memcpy(x, tmp, sizeof(double) * (size_t)n);
    }
}

static int run64q(const llama2c_model *m, const int32_t *tokens, int p0, int p1, int cap, double *kc, double *vc,
                  double *logits, double *amax, const float *in_scale, int kv_fp8)
{
    const int D = m->dim, F = m->hidden, L = m->nlayers, H = m->nheads, hd = D / H, KD = m->nkv * hd,
              kvmul = H / m->nkv;
    double *x = malloc(sizeof(double) * D), *xb = malloc(sizeof(double) * D), *xb2 = malloc(sizeof(double) * D);
    double *q = malloc(sizeof(double) * D), *hb = malloc(sizeof(double) * F), *hb2 = malloc(sizeof(double) * F);
    double *att = malloc(sizeof(double) * (size_t)cap), *tmp = malloc(sizeof(double) * (size_t)(D > F ? D : F));
    int rc = x && xb && xb2 && q && hb && hb2 && att && tmp ? 0 : LWQ_ENOMEM;
    for (int pos = p0; pos < p1 && rc == 0; pos++) {
        int tok = tokens[pos];
        if (tok < 0 || tok >= m->vocab) {
            rc = LWQ_EINVAL;
            break;
        }
        for (int i = 0; i < D; i++)
            x[i] = m->emb[(size_t)tok * D + i];
        for (int l = 0; l < L; l++) {
            double *k = kc + ((size_t)l * cap + pos) * KD, *v = vc + ((size_t)l * cap + pos) * KD;
            rmsnorm64(xb, x, m->rms_att + (size_t)l * D, D);
            act_hook(xb, D, l, 0, amax, in_scale, tmp);
            matvec64(q, m->wq + (size_t)l * D * D, xb, D, D);
            matvec64(k, m->wk + (size_t)l * KD * D, xb, KD, D);
            matvec64(v, m->wv + (size_t)l * KD * D, xb, KD, D);
            for (int i = 0; i < D; i += 2) {
                double freq = 1.0 / pow(10000.0, (double)(i % hd) / (double)hd), a = pos * freq;
                double c = cos(a), s = sin(a);
                for (int which = 0; which < (i < KD ? 2 : 1); which++) {
                    double *vec = which == 0 ? q : k, v0 = vec[i], v1 = vec[i + 1];
                    vec[i] = v0 * c - v1 * s;
                    vec[i + 1] = v0 * s + v1 * c;
                }
            }
            for (int i = 0; kv_fp8 && i < KD; i++) { /* the FP8 cache, scale 1 (cast mode) */
                k[i] = fp8_round(k[i]);
                v[i] = fp8_round(v[i]);
            }
            for (int h = 0; h < H; h++) {
                const double *qh = q + (size_t)h * hd;
                double mx = -INFINITY, sum = 0;
                for (int t = 0; t <= pos; t++) {
                    const double *kt = kc + ((size_t)l * cap + t) * KD + (size_t)(h / kvmul) * hd;
                    double s = 0;
                    for (int i = 0; i < hd; i++)
                        s += qh[i] * kt[i];
                    att[t] = s / sqrt((double)hd);
                    mx = att[t] > mx ? att[t] : mx;
                }
                for (int t = 0; t <= pos; t++)
                    sum += (att[t] = exp(att[t] - mx));
                for (int i = 0; i < hd; i++) {
                    double s = 0;
                    for (int t = 0; t <= pos; t++)
                        s += att[t] / sum * vc[((size_t)l * cap + t) * KD + (size_t)(h / kvmul) * hd + i];
                    xb[h * hd + i] = s;
                }
            }
            act_hook(xb, D, l, 1, amax, in_scale, tmp);
            matvec64(xb2, m->wo + (size_t)l * D * D, xb, D, D);
            for (int i = 0; i < D; i++)
                x[i] += xb2[i];
            rmsnorm64(xb, x, m->rms_ffn + (size_t)l * D, D);
            act_hook(xb, D, l, 2, amax, in_scale, tmp);
            matvec64(hb, m->w1 + (size_t)l * F * D, xb, F, D);
            matvec64(hb2, m->w3 + (size_t)l * F * D, xb, F, D);
            for (int i = 0; i < F; i++)
                hb[i] = hb[i] / (1.0 + exp(-hb[i])) * hb2[i];
            act_hook(hb, F, l, 3, amax, in_scale, tmp);
            matvec64(xb, m->w2 + (size_t)l * D * F, hb, D, F);
            for (int i = 0; i < D; i++)
                x[i] += xb[i];
        }
        rmsnorm64(xb, x, m->rms_final, D);
        matvec64(logits + (size_t)(pos - p0) * m->vocab, m->emb, xb, m->vocab, D);
    }
    free(x), free(xb), free(xb2), free(q), free(hb), free(hb2), free(att), free(tmp);
    return rc;
}

static int run64(const llama2c_model *m, const int32_t *tokens, int p0, int p1, int cap, double *kc, double *vc,
                 double *logits)
{
    return run64q(m, tokens, p0, p1, cap, kc, vc, logits, NULL, NULL, 0);
}

static int caches(const llama2c_model *m, int len, double **kc, double **vc)
{
    size_t n = (size_t)m->nlayers * (size_t)len * (size_t)(m->nkv * (m->dim / m->nheads));
    *kc = malloc(n * sizeof(double));
    *vc = malloc(n * sizeof(double));
    return *kc && *vc ? 0 : LWQ_ENOMEM;
}

int llama2c_logits64(const llama2c_model *m, const int32_t *tokens, int len, double *logits)
{
    if (len <= 0 || len > m->seq_len)
        return LWQ_EINVAL;
    double *kc, *vc;
    int rc = caches(m, len, &kc, &vc);
    if (rc == 0)
        rc = run64(m, tokens, 0, len, len, kc, vc, logits);
    free(kc);
    free(vc);
    return rc;
}

static uint64_t xorshift64s(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

int llama2c_write_samples(const llama2c_model *m, const char *path, uint64_t seed, int nseq, int len)
{
    int32_t *tok = malloc((size_t)(len > 0 ? len : 1) * sizeof *tok);
    FILE *fp = tok ? fopen(path, "w") : NULL;
    int rc = fp ? 0 : LWQ_EIO;
    for (int s = 0; s < nseq && rc == 0; s++) {
        if ((rc = llama2c_sample(m, seed + (uint64_t)s * 7919, 1, len, tok)) != 0)
            break;
        fprintf(fp, "{\"input_ids\": [");
        for (int t = 0; t < len; t++)
            fprintf(fp, "%s%d", t ? ", " : "", tok[t]);
        fprintf(fp, "]}\n");
    }
    if (fp && fclose(fp) != 0 && rc == 0)
        rc = LWQ_EIO;
    free(tok);
    return rc;
}

int llama2c_sample(const llama2c_model *m, uint64_t seed, int32_t first, int len, int32_t *out)
{
    if (len <= 0 || len > m->seq_len || first < 0 || first >= m->vocab)
        return LWQ_EINVAL;
    double *z = malloc(sizeof(double) * (size_t)m->vocab), *kc, *vc;
    int rc = caches(m, len, &kc, &vc);
    if (!z)
        rc = LWQ_ENOMEM;
    uint64_t s = seed ? seed : 0x9E3779B97F4A7C15ull;
    out[0] = first;
    for (int pos = 1; pos < len && rc == 0; pos++) {
        if ((rc = run64(m, out, pos - 1, pos, len, kc, vc, z)) != 0)
            break;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < m->vocab; v++)
            mx = z[v] > mx ? z[v] : mx;
        for (int v = 0; v < m->vocab; v++)
            sum += exp(z[v] - mx);
        double u = (double)(xorshift64s(&s) >> 11) * 0x1p-53 * sum, acc = 0;
        int pick = m->vocab - 1;
        for (int v = 0; v < m->vocab; v++) {
            acc += exp(z[v] - mx);
            if (u < acc) {
                pick = v;
                break;
            }
        }
        out[pos] = pick;
    }
    free(z);
    free(kc);
    free(vc);
    return rc;
}

/* ---- FP8 W8A8 emulation in the reference ----------------------------------------------------- */

int llama2c_fp8_calibrate(const llama2c_model *m, const int32_t *tokens, int nseq, int len, double *amax)
{
    double *kc, *vc, *lg = malloc(sizeof(double) * (size_t)len * m->vocab);
    int rc = caches(m, len, &kc, &vc);
    if (!lg)
        rc = LWQ_ENOMEM;
    memset(amax, 0, sizeof(double) * 4 * (size_t)m->nlayers);
    for (int s = 0; s < nseq && rc == 0; s++)
        rc = run64q(m, tokens + (size_t)s * len, 0, len, len, kc, vc, lg, amax, NULL, 0);
    free(kc);
    free(vc);
    free(lg);
    return rc;
}

/* Weight w (n elements) -> e4m3(w / ws) * ws, ws = amax / 448, in f32 as FORMATS.md 3 says. */
static void fp8_weight(float *w, size_t n)
{
    float amax = 0;
    for (size_t i = 0; i < n; i++)
        amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
    float ws = amax / 448.0f;
    for (size_t i = 0; i < n; i++)
        w[i] = (float)fp8_round((double)(w[i] / ws)) * ws;
}

int llama2c_logits64_fp8(const llama2c_model *m, const double *amax, const int32_t *tokens, int len, double *logits)
{
    const int L = m->nlayers, D = m->dim, F = m->hidden, KD = m->nkv * (m->dim / m->nheads);
    llama2c_model q = *m;
    size_t total = (size_t)(m->rms_final - m->data) + (size_t)D;
    float *data = malloc(total * sizeof(float)), in_scale[4 * 64];
    if (!data || L > 64) {
        free(data);
        return LWQ_ENOMEM;
    }
    memcpy(data, m->data, total * sizeof(float));
#define REBASE(f) q.f = data + (m->f - m->data)
    REBASE(emb), REBASE(rms_att), REBASE(wq), REBASE(wk), REBASE(wv), REBASE(wo), REBASE(rms_ffn), REBASE(w1),
        REBASE(w2), REBASE(w3), REBASE(rms_final);
#undef REBASE
    q.data = data;
    for (int l = 0; l < L; l++) {
        fp8_weight((float *)q.wq + (size_t)l * D * D, (size_t)D * D);
        fp8_weight((float *)q.wk + (size_t)l * KD * D, (size_t)KD * D);
        fp8_weight((float *)q.wv + (size_t)l * KD * D, (size_t)KD * D);
        fp8_weight((float *)q.wo + (size_t)l * D * D, (size_t)D * D);
        fp8_weight((float *)q.w1 + (size_t)l * F * D, (size_t)F * D);
        fp8_weight((float *)q.w2 + (size_t)l * D * F, (size_t)D * F);
        fp8_weight((float *)q.w3 + (size_t)l * F * D, (size_t)F * D);
    }
    for (int i = 0; i < 4 * L; i++)
        in_scale[i] = (float)amax[i] / 448.0f;
    double *kc, *vc;
    int rc = caches(m, len, &kc, &vc);
    if (rc == 0)
        rc = run64q(&q, tokens, 0, len, len, kc, vc, logits, NULL, in_scale, 1);
    free(kc);
    free(vc);
    free(data);
    return rc;
}
