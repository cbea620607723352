/* GPTQ (kernels/gptq.h) against a naive unblocked double-precision GPTQ written here. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/gptq.h"
#include "kernels/quant.h"
#include "tests/helpers/check/quant_naive.h"

/* ---- random linears ------------------------------------------------------------------------- */

typedef struct lin {
    int64_t rows, cols, tokens;
    lwq_dtype wdt;
    void *w;        /* (rows, cols) of wdt */
    float *wf;      /* the same values as float */
    float *x;       /* (tokens, cols) correlated activations; columns in `dead` are 0 */
    double *hs;     /* full symmetric sum of x x^T, summed naively */
} lin;

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

static lin make_lin(int64_t rows, int64_t cols, int64_t tokens, lwq_dtype wdt, int ndead, uint64_t seed)
{
    lin L = {.rows = rows, .cols = cols, .tokens = tokens, .wdt = wdt};
    L.w = malloc((size_t)(rows * cols) * 4);
    L.wf = malloc((size_t)(rows * cols) * 4);
    L.x = malloc((size_t)(tokens * cols) * 4);
    L.hs = calloc((size_t)(cols * cols), 8);
    for (int64_t i = 0; i < rows * cols; i++) {
        float v = nv_rand_val(&seed, 0.05f);
        if (wdt == LWQ_BF16) {
            ((uint16_t *)L.w)[i] = lwq_f32_to_bf16(v);
            v = lwq_bf16_to_f32(lwq_f32_to_bf16(v));
        } else {
            ((float *)L.w)[i] = v;
        }
        L.wf[i] = v;
    }
    /* x = a few shared factors + noise, per-column scales that differ: a Hessian with strong
     * off-diagonal structure and a spread diagonal (act order matters) */
    enum { F = 4 };
    double mix[F][512];
    for (int f = 0; f < F; f++)
        for (int64_t j = 0; j < cols; j++)
            mix[f][j] = urand(&seed) * 2.0;
    for (int64_t t = 0; t < tokens; t++) {
        double z[F];
        for (int f = 0; f < F; f++)
            z[f] = urand(&seed) * 3.0;
        for (int64_t j = 0; j < cols; j++) {
            double v = urand(&seed) * 0.3;
            for (int f = 0; f < F; f++)
                v += z[f] * mix[f][j];
            v *= 1.0 + (double)(j % 7);
            L.x[t * cols + j] = (float)v;
        }
    }
    for (int d = 0; d < ndead; d++) {
        int64_t j = (int64_t)(d * 37 + 5) % cols;
        for (int64_t t = 0; t < tokens; t++)
            L.x[t * cols + j] = 0.0f;
    }
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t i = 0; i < cols; i++)
            for (int64_t j = 0; j < cols; j++)
                L.hs[i * cols + j] += (double)L.x[t * cols + i] * (double)L.x[t * cols + j];
    return L;
}

static void drop_lin(lin *L)
{
    free(L->w);
    free(L->wf);
    free(L->x);
    free(L->hs);
}

/* lwq's Hessian sums (upper triangle) */
static double *lwq_hs(const lin *L)
{
    double *h = calloc((size_t)(L->cols * L->cols), 8);
    lwq_error e = {0};
    int rc = lwq_gptq_hessian_accumulate(L->x, LWQ_F32, L->tokens, L->cols, h, "x", &e);
    cr_assert_eq(rc, 0, "%s", e.msg);
    return h;
}

/* ---- the naive GPTQ ------------------------------------------------------------------------- */

/* Steps 1-4 of the paper, written out: dead inputs, act order, dampening, H^-1 by Gauss-Jordan,
 * then the upper Cholesky factor of H^-1 row by row. */
static void naive_factor(const double *hs, int64_t n, int64_t ntok, double damp, int act, int64_t *perm,
                         double *U, uint8_t *dead)
{
    double *H = malloc((size_t)(n * n) * 8), *A = malloc((size_t)(n * 2 * n) * 8);
    double *diag = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        dead[i] = hs[i * n + i] == 0.0;
        diag[i] = dead[i] ? 1.0 : hs[i * n + i] * (2.0 / (double)ntok);
        perm[i] = i;
    }
    if (act) /* insertion sort: descending, stable */
        for (int64_t i = 1; i < n; i++)
            for (int64_t k = i; k > 0 && diag[perm[k]] > diag[perm[k - 1]]; k--) {
                int64_t t = perm[k];
                perm[k] = perm[k - 1];
                perm[k - 1] = t;
            }
    double mean = 0;
    for (int64_t i = 0; i < n; i++)
        mean += diag[i];
    mean /= (double)n;
    for (int64_t p = 0; p < n; p++)
        for (int64_t q = 0; q < n; q++)
            H[p * n + q] = p == q ? diag[perm[p]] + damp * mean : hs[perm[p] * n + perm[q]] * (2.0 / (double)ntok);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < 2 * n; j++)
            A[i * 2 * n + j] = j < n ? H[i * n + j] : (j - n == i);
    for (int64_t c = 0; c < n; c++) {
        double p = A[c * 2 * n + c];
        for (int64_t j = 0; j < 2 * n; j++)
            A[c * 2 * n + j] /= p;
        for (int64_t i = 0; i < n; i++) {
            if (i == c)
                continue;
            double f = A[i * 2 * n + c];
            for (int64_t j = 0; j < 2 * n; j++)
                A[i * 2 * n + j] -= f * A[c * 2 * n + j];
        }
    }
    memset(U, 0, (size_t)(n * n) * 8);
    for (int64_t i = 0; i < n; i++) {
        double s = A[i * 2 * n + n + i];
        for (int64_t k = 0; k < i; k++)
            s -= U[k * n + i] * U[k * n + i];
        U[i * n + i] = sqrt(s);
        for (int64_t j = i + 1; j < n; j++) {
            double t = A[i * 2 * n + n + j];
            for (int64_t k = 0; k < i; k++)
                t -= U[k * n + i] * U[k * n + j];
            U[i * n + j] = t / U[i * n + i];
        }
    }
    free(H);
    free(A);
    free(diag);
}

/* Column by column, every update applied at once.  codes: (rows, cols) one code per element;
 * scales: (rows, cols/16) for NVFP4; wq: (rows, cols) dequantized. */
static void naive_sweep(const lin *L, int fp8, float gamax, const int64_t *perm, const double *U, const uint8_t *dead,
                        uint8_t *codes, uint8_t *scales, float *wq)
{
    const int64_t n = L->cols, nb = n / 16;
    float ws = fp8 ? gamax / 448.0f : gamax / 2688.0f;
    double *wr = malloc((size_t)n * 8);
    int64_t *inv = malloc((size_t)n * 8);
    uint8_t *seen = malloc((size_t)(nb ? nb : 1));
    for (int64_t p = 0; p < n; p++)
        inv[perm[p]] = p;
    for (int64_t r = 0; r < L->rows; r++) {
        memset(seen, 0, (size_t)(nb ? nb : 1));
        for (int64_t p = 0; p < n; p++)
            wr[p] = dead[perm[p]] ? 0.0 : (double)L->wf[r * n + perm[p]];
        for (int64_t i = 0; i < n; i++) {
            int64_t col = perm[i];
            float x = (float)wr[i], qv;
            if (fp8) {
                int code = nv_e4m3_enc(x / ws);
                codes[r * n + col] = (uint8_t)code;
                qv = (float)(nv_e4m3_val(code) * (double)ws);
            } else {
                int64_t b = col / 16;
                if (!seen[b]) {
                    float blk[16];
                    for (int j = 0; j < 16; j++)
                        blk[j] = (float)wr[inv[b * 16 + j]];
                    scales[r * nb + b] = (uint8_t)nv_scale_max(blk, ws);
                    seen[b] = 1;
                }
                float d = (float)nv_e4m3_val(scales[r * nb + b]) * ws;
                int code = nv_e2m1_enc(x / d);
                codes[r * n + col] = (uint8_t)code;
                qv = (float)(nv_e2m1_val(code) * (double)d);
            }
            wq[r * n + col] = qv;
            double err = (wr[i] - (double)qv) / U[i * n + i];
            for (int64_t j = i + 1; j < n; j++)
                wr[j] -= err * U[i * n + j];
        }
    }
    free(wr);
    free(inv);
    free(seen);
}

/* ---- lwq's GPTQ, unpacked to one code per element ------------------------------------------- */

typedef struct res {
    uint8_t *codes, *scales;
    float *wq;
    float ws;
} res;

static void drop_res(res *r)
{
    free(r->codes);
    free(r->scales);
    free(r->wq);
}

static float amax_of(const lin *L)
{
    float m = 0;
    for (int64_t i = 0; i < L->rows * L->cols; i++)
        m = fmaxf(m, fabsf(L->wf[i]));
    return m;
}

static res lwq_run(const lin *L, int fp8, const int64_t *perm, const double *U, const uint8_t *dead)
{
    const int64_t n = L->cols, rows = L->rows;
    res o = {.codes = calloc((size_t)(rows * n), 1), .scales = calloc((size_t)(rows * n / 16 + 1), 1),
             .wq = malloc((size_t)(rows * n) * 4)};
    lwq_error e = {0};
    if (fp8) {
        int rc = lwq_gptq_fp8(L->w, L->wdt, rows, n, amax_of(L), perm, U, dead, "w", o.codes, &o.ws, &e);
        cr_assert_geq(rc, 0, "%s", e.msg);
        cr_assert_eq(lwq_quant_fp8_dequant(o.codes, o.ws, rows * n, LWQ_F32, o.wq, &e), 0, "%s", e.msg);
    } else {
        uint8_t *packed = malloc((size_t)(rows * n / 2));
        int rc = lwq_gptq_nvfp4(L->w, L->wdt, rows, n, amax_of(L), perm, U, dead, "w", packed, o.scales, &o.ws, &e);
        cr_assert_geq(rc, 0, "%s", e.msg);
        cr_assert_eq(lwq_quant_nvfp4_dequant(packed, o.scales, o.ws, rows, n, LWQ_F32, o.wq, &e), 0, "%s", e.msg);
        for (int64_t i = 0; i < rows * n; i++)
            o.codes[i] = (uint8_t)((i & 1) ? packed[i / 2] >> 4 : packed[i / 2] & 15);
        free(packed);
    }
    return o;
}

static double out_err(const lin *L, const float *wq)
{
    double s = 0;
    lwq_error e = {0};
    double *h = lwq_hs(L);
    cr_assert_eq(lwq_gptq_output_error(L->w, L->wdt, wq, L->rows, L->cols, h, &s, NULL, &e), 0, "%s", e.msg);
    free(h);
    return s;
}

typedef struct fac {
    int64_t *perm;
    double *U;
    uint8_t *dead;
} fac;

static fac lwq_fac(const lin *L, int act)
{
    fac f = {malloc((size_t)L->cols * 8), malloc((size_t)(L->cols * L->cols) * 8), malloc((size_t)L->cols)};
    double *h = lwq_hs(L);
    lwq_gptq_opts o = {LWQ_GPTQ_DAMP_DEFAULT, act};
    lwq_error e = {0};
    int rc = lwq_gptq_factor(h, L->tokens, L->cols, &o, "w", f.perm, f.U, f.dead, &e);
    cr_assert_eq(rc, 0, "%s", e.msg);
    free(h);
    return f;
}

static void drop_fac(fac *f)
{
    free(f->perm);
    free(f->U);
    free(f->dead);
}

static const int64_t shapes[4][3] = {{8, 32, 96}, {13, 144, 300}, {5, 272, 400}, {24, 128, 64}};

/* ---- tests ---------------------------------------------------------------------------------- */

Test(gptq, hessian_sums_are_exact_and_independent_of_token_split)
{
    lin L = make_lin(4, 48, 200, LWQ_F32, 2, 11);
    double *h1 = lwq_hs(&L), *h2 = calloc(48 * 48, 8);
    lwq_error e = {0};
    /* 7 + 150 + 43 tokens in three calls: each entry still sums tokens in order */
    cr_assert_eq(lwq_gptq_hessian_accumulate(L.x, LWQ_F32, 7, 48, h2, "x", &e), 0);
    cr_assert_eq(lwq_gptq_hessian_accumulate(L.x + 7 * 48, LWQ_F32, 150, 48, h2, "x", &e), 0);
    cr_assert_eq(lwq_gptq_hessian_accumulate(L.x + 157 * 48, LWQ_F32, 43, 48, h2, "x", &e), 0);
    for (int i = 0; i < 48; i++)
        for (int j = i; j < 48; j++) {
            cr_assert_eq(h1[i * 48 + j], L.hs[i * 48 + j], "[%d,%d]", i, j); /* same order as the naive sum */
            cr_assert_eq(h2[i * 48 + j], h1[i * 48 + j], "[%d,%d]", i, j);
        }
    free(h1);
    free(h2);
    drop_lin(&L);
}

/* The blocked sweep on lwq's own factor equals the naive sweep on that factor, bit for bit. */
static void same_factor_case(int fp8, int act)
{
    for (int s = 0; s < 4; s++) {
        lin L = make_lin(shapes[s][0], shapes[s][1], shapes[s][2], s % 2 ? LWQ_F32 : LWQ_BF16, 3, 100 + s);
        fac f = lwq_fac(&L, act);
        res a = lwq_run(&L, fp8, f.perm, f.U, f.dead);
        uint8_t *codes = malloc((size_t)(L.rows * L.cols)), *scales = calloc((size_t)(L.rows * L.cols / 16 + 1), 1);
        float *wq = malloc((size_t)(L.rows * L.cols) * 4);
        naive_sweep(&L, fp8, amax_of(&L), f.perm, f.U, f.dead, codes, scales, wq);
        cr_assert_eq(memcmp(codes, a.codes, (size_t)(L.rows * L.cols)), 0, "shape %d: codes differ", s);
        if (!fp8)
            cr_assert_eq(memcmp(scales, a.scales, (size_t)(L.rows * L.cols / 16)), 0, "shape %d: scales differ", s);
        free(codes);
        free(scales);
        free(wq);
        drop_res(&a);
        drop_fac(&f);
        drop_lin(&L);
    }
}

Test(gptq, blocked_sweep_equals_naive_on_the_same_factor_nvfp4) { same_factor_case(0, 0); }
Test(gptq, blocked_sweep_equals_naive_on_the_same_factor_nvfp4_act_order) { same_factor_case(0, 1); }
Test(gptq, blocked_sweep_equals_naive_on_the_same_factor_fp8_act_order) { same_factor_case(1, 1); }

/* The whole naive GPTQ (its own factor): the factors agree to 1e-6, and then the codes are equal
 * and the output error within 1%. */
static void naive_case(int fp8, int act)
{
    for (int s = 0; s < 4; s++) {
        lin L = make_lin(shapes[s][0], shapes[s][1], shapes[s][2], s % 2 ? LWQ_BF16 : LWQ_F32, 2, 200 + s);
        const int64_t n = L.cols;
        fac f = lwq_fac(&L, act);
        fac g = {malloc((size_t)n * 8), malloc((size_t)(n * n) * 8), malloc((size_t)n)};
        naive_factor(L.hs, n, L.tokens, LWQ_GPTQ_DAMP_DEFAULT, act, g.perm, g.U, g.dead);
        cr_assert_eq(memcmp(f.perm, g.perm, (size_t)n * 8), 0, "shape %d: column order differs", s);
        cr_assert_eq(memcmp(f.dead, g.dead, (size_t)n), 0, "shape %d: dead inputs differ", s);
        double umax = 0, dmax = 0;
        for (int64_t i = 0; i < n * n; i++) {
            umax = fmax(umax, fabs(g.U[i]));
            dmax = fmax(dmax, fabs(f.U[i] - g.U[i]));
        }
        cr_assert_lt(dmax, 1e-6 * umax, "shape %d: factors differ by %g (max %g)", s, dmax, umax);
        res a = lwq_run(&L, fp8, f.perm, f.U, f.dead);
        uint8_t *codes = malloc((size_t)(L.rows * n)), *scales = calloc((size_t)(L.rows * n / 16 + 1), 1);
        float *wq = malloc((size_t)(L.rows * n) * 4);
        naive_sweep(&L, fp8, amax_of(&L), g.perm, g.U, g.dead, codes, scales, wq);
        cr_assert_eq(memcmp(codes, a.codes, (size_t)(L.rows * n)), 0, "shape %d: codes differ", s);
        double ea = out_err(&L, a.wq), en = out_err(&L, wq);
        cr_assert_leq(fabs(ea - en), 0.01 * en, "shape %d: output error %g vs naive %g", s, ea, en);
        free(codes);
        free(scales);
        free(wq);
        drop_res(&a);
        drop_fac(&f);
        drop_fac(&g);
        drop_lin(&L);
    }
}

Test(gptq, matches_naive_gptq_nvfp4) { naive_case(0, 0); }
Test(gptq, matches_naive_gptq_nvfp4_act_order) { naive_case(0, 1); }
Test(gptq, matches_naive_gptq_fp8) { naive_case(1, 0); }

/* On correlated inputs GPTQ's layer-output error is below the max calibration's. */
Test(gptq, output_error_below_max_calibration)
{
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (int s = 0; s < 4; s++) {
            lin L = make_lin(shapes[s][0], shapes[s][1], shapes[s][2], LWQ_BF16, 0, 300 + s);
            fac f = lwq_fac(&L, 1);
            res a = lwq_run(&L, fp8, f.perm, f.U, f.dead);
            float *mq = malloc((size_t)(L.rows * L.cols) * 4);
            lwq_error e = {0};
            if (fp8) {
                uint8_t *q = malloc((size_t)(L.rows * L.cols));
                float ws;
                cr_assert_geq(lwq_quant_fp8(L.w, L.wdt, L.rows, L.cols, amax_of(&L), "w", q, &ws, &e), 0);
                cr_assert_eq(lwq_quant_fp8_dequant(q, ws, L.rows * L.cols, LWQ_F32, mq, &e), 0);
                free(q);
            } else {
                uint8_t *p = malloc((size_t)(L.rows * L.cols / 2)), *sc = malloc((size_t)(L.rows * L.cols / 16));
                float ws2;
                cr_assert_geq(lwq_quant_nvfp4_max(L.w, L.wdt, L.rows, L.cols, amax_of(&L), "w", p, sc, &ws2, &e), 0);
                cr_assert_eq(lwq_quant_nvfp4_dequant(p, sc, ws2, L.rows, L.cols, LWQ_F32, mq, &e), 0);
                free(p);
                free(sc);
            }
            double eg = out_err(&L, a.wq), em = out_err(&L, mq);
            cr_assert_lt(eg, em, "%s shape %d: gptq %g, max %g", fp8 ? "fp8" : "nvfp4", s, eg, em);
            free(mq);
            drop_res(&a);
            drop_fac(&f);
            drop_lin(&L);
        }
}

Test(gptq, same_bytes_for_any_thread_count)
{
    lin L = make_lin(37, 272, 300, LWQ_BF16, 1, 7);
    res r[2];
    for (int t = 0; t < 2; t++) {
        lwq_parallel_set_threads(t ? 3 : 1);
        fac f = lwq_fac(&L, 1);
        r[t] = lwq_run(&L, 0, f.perm, f.U, f.dead);
        drop_fac(&f);
    }
    lwq_parallel_set_threads(1);
    cr_assert_eq(memcmp(r[0].codes, r[1].codes, (size_t)(L.rows * L.cols)), 0);
    cr_assert_eq(memcmp(r[0].scales, r[1].scales, (size_t)(L.rows * L.cols / 16)), 0);
    drop_res(&r[0]);
    drop_res(&r[1]);
    drop_lin(&L);
}

Test(gptq, dead_inputs_get_zero_codes)
{
    lin L = make_lin(6, 64, 80, LWQ_F32, 2, 9); /* columns 5 and 42 are dead */
    fac f = lwq_fac(&L, 1);
    cr_assert(f.dead[5] && f.dead[42]);
    res a = lwq_run(&L, 0, f.perm, f.U, f.dead);
    for (int64_t r = 0; r < L.rows; r++) {
        cr_assert_eq(a.wq[r * 64 + 5], 0.0f);
        cr_assert_eq(a.wq[r * 64 + 42], 0.0f);
    }
    drop_res(&a);
    drop_fac(&f);
    drop_lin(&L);
}

Test(gptq, bad_input_is_refused_with_a_named_error)
{
    lin L = make_lin(4, 32, 20, LWQ_F32, 0, 3);
    lwq_error e = {0};
    double *h = calloc(32 * 32, 8);
    L.x[5 * 32 + 7] = NAN;
    cr_assert_eq(lwq_gptq_hessian_accumulate(L.x, LWQ_F32, 20, 32, h, "layers.0.q_proj", &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "layers.0.q_proj") && strstr(e.msg, "token 5, column 7"), "%s", e.msg);
    int64_t perm[32];
    double *u = malloc(32 * 32 * 8);
    lwq_gptq_opts o = {0.0, 0};
    e = (lwq_error){0};
    cr_assert_eq(lwq_gptq_factor(L.hs, 20, 32, &o, "m", perm, u, NULL, &e), LWQ_EINVAL);
    o.damp = 0.01;
    e = (lwq_error){0};
    cr_assert_eq(lwq_gptq_factor(L.hs, 0, 32, &o, "m", perm, u, NULL, &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "no calibration tokens"), "%s", e.msg);
    /* an indefinite "Hessian" cannot be factored */
    memset(h, 0, 32 * 32 * 8);
    for (int i = 0; i < 32; i++)
        h[i * 32 + i] = 1.0;
    h[0 * 32 + 1] = 5.0;
    e = (lwq_error){0};
    cr_assert_eq(lwq_gptq_factor(h, 10, 32, &o, "m", perm, u, NULL, &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "--gptq-damp"), "%s", e.msg);
    free(h);
    free(u);
    drop_lin(&L);
}
