/* tests/helpers/check/quant_naive.h — a deliberately naive second implementation of FORMATS.md for
 * the quantizer tests: table searches in double for every rounding decision, no bit tricks, no
 * shared code with layout/format/quant_formats.h.  The float32 operations that FORMATS.md prescribes
 * (divisions and products of scales) are written out as float expressions. */
#ifndef LWQ_TESTS_QUANT_NAIVE_H
#define LWQ_TESTS_QUANT_NAIVE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static inline double nv_e4m3_val(int b)
{
    int e = (b >> 3) & 15, m = b & 7;
    if ((b & 0x7f) == 0x7f)
        return NAN;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return (b & 0x80) ? -v : v;
}

static inline int nv_e4m3_enc(float f)
{
    int sign = signbit(f) ? 0x80 : 0;
    double a = fabs((double)f);
    int best = 0;
    double bd = INFINITY;
    for (int b = 0; b <= 0x7e; b++) {
        double d = fabs(a - nv_e4m3_val(b));
        if (d < bd || (d == bd && (b & 1) == 0)) {
            bd = d;
            best = b;
        }
    }
    return best | sign;
}

static const double nv_e2m1_tab[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

static inline int nv_e2m1_enc(float q)
{
    double a = fabs((double)q);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 8; c++) {
        double d = fabs(a - nv_e2m1_tab[c]);
        if (d < bd || (d == bd && (c & 1) == 0)) {
            bd = d;
            best = c;
        }
    }
    return best | (q < 0 ? 8 : 0);
}

static inline double nv_e2m1_val(int c) { return (c & 8) ? -nv_e2m1_tab[c & 7] : nv_e2m1_tab[c & 7]; }

static inline float nv_clamp(float s) { return s < 0x1p-9f ? 0x1p-9f : (s > 448.0f ? 448.0f : s); }

/* Dynamic path for one block. */
static inline int nv_scale_max(const float *x, float ws2)
{
    double m = 0;
    for (int i = 0; i < 16; i++)
        m = fmax(m, fabs((double)x[i]));
    float t = 6.0f * ws2;
    float s = (float)m / t;
    if (s == 0.0f)
        s = 1.0f;
    return nv_e4m3_enc(nv_clamp(s));
}

static inline int nv_scale_static(float bamax, float gamax)
{
    float s = bamax / 6.0f;
    if (s == 0.0f)
        s = 1.0f;
    float g6 = gamax / 6.0f;
    float t = s * 448.0f;
    return nv_e4m3_enc(nv_clamp(t / g6));
}

static inline void nv_block_codes(const float *x, int sbyte, float ws2, uint8_t *out)
{
    float d = (float)nv_e4m3_val(sbyte) * ws2;
    for (int i = 0; i < 8; i++) {
        float q0 = x[2 * i] / d, q1 = x[2 * i + 1] / d;
        out[i] = (uint8_t)(nv_e2m1_enc(q0) | (nv_e2m1_enc(q1) << 4));
    }
}

/* Squared error in the contract's float order: halving tree over the 16 terms. */
static inline float nv_tree(float *t)
{
    for (int h = 8; h; h >>= 1)
        for (int i = 0; i < h; i++)
            t[i] = t[i] + t[i + h];
    return t[0];
}

static inline void nv_dw(const float *x, float d, float *dw)
{
    for (int i = 0; i < 16; i++) {
        float q = x[i] / d;
        float deq = (float)(nv_e2m1_val(nv_e2m1_enc(q)) * (double)d); /* one rounding */
        dw[i] = x[i] - deq;
    }
}

static inline float nv_loss(const float *x, float d, const float *h)
{
    float dw[16], t[16];
    nv_dw(x, d, dw);
    for (int i = 0; i < 16; i++) {
        if (!h) {
            t[i] = dw[i] * dw[i];
            continue;
        }
        float acc = 0.0f;
        for (int j = 0; j < 16; j++) {
            float p = h[i * 16 + j] * dw[j];
            acc = acc + p;
        }
        t[i] = dw[i] * acc;
    }
    return nv_tree(t);
}

/* Brute force over all 126 bytes; also returns the loss of each candidate in double. */
static inline int nv_sweep(const float *x, float ws2, const float *h, double *loss_d)
{
    int best = 1;
    float bl = 0;
    for (int b = 1; b <= 126; b++) {
        float d = (float)nv_e4m3_val(b) * ws2;
        float l = nv_loss(x, d, h);
        if (loss_d) {
            float dw[16];
            nv_dw(x, d, dw);
            double s = 0;
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 16; j++)
                    s += (double)dw[i] * (h ? h[i * 16 + j] : (double)(i == j)) * (double)dw[j];
            loss_d[b] = s;
        }
        if (b == 1 || l < bl) {
            bl = l;
            best = b;
        }
    }
    return best;
}

/* Random weights: a normal-ish spread times `scale`, a few outliers, some exact zeros. */
static inline float nv_rand_val(uint64_t *s, float scale)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t r = (uint32_t)(*s >> 32);
    if (r % 97 == 0)
        return 0.0f;
    double u = 0;
    for (int k = 0; k < 4; k++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        u += (double)(*s >> 11) / 9007199254740992.0;
    }
    u -= 2.0;
    if (r % 53 == 0)
        u *= 8;
    return (float)(u * scale);
}

#endif
