/* kernels/cpu/gptq/gptq_factor_cpu.c — the Hessian side of kernels/gptq.h: the full x^T x sums, the
 * factor U (dead inputs, act order, dampening, Cholesky of H, its inverse, Cholesky of H^-1) and
 * the layer-output error.
 *
 * Why not LAPACK: OpenBLAS's LAPACK runs per-CPU kernels whose last bits differ between CPU
 * models (OPENBLAS_CORETYPE), which would break "same bytes on any CPU".  These loops are plain
 * double-precision C whose every sum runs in one fixed order: a dot product accumulates 8 lanes
 * (element k into lane k % 8, ascending) and adds the lanes in a fixed tree, so vector width and
 * thread count change nothing.  This file is compiled with -ffp-contract=off (CMakeLists.txt): no
 * fused multiply-add may change a rounding behind our back.  The matrices are at most a few
 * thousand wide (in-features), where O(n^3) double loops take seconds to a minute on a CPU; the
 * CUDA backend has its own. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/gptq.h"
#include "kernels/quant_check.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LWQ_CLONES
#endif

static void atomic_min_i64(_Atomic int64_t *a, int64_t v)
{
    int64_t cur = atomic_load(a);
    while (v < cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

/* sum_k a[k] b[k] for k in [0, n): lane k % 8 in ascending k, lanes added pairwise. */
static inline double dot8(const double *a, const double *b, int64_t n)
{
    double l[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int i = 0; i < 8; i++)
            l[i] = l[i] + a[k + i] * b[k + i];
    for (int i = 0; k < n; k++, i++)
        l[i] = l[i] + a[k] * b[k];
    for (int i = 0; i < 4; i++)
        l[i] = l[i] + l[i + 4];
    l[0] = l[0] + l[2];
    l[1] = l[1] + l[3];
    return l[0] + l[1];
}

/* Task k of n -> an index whose work pairs a short row with a long one (triangular loops). */
static inline int64_t balanced(int64_t k, int64_t n) { return (k & 1) ? n - 1 - k / 2 : k / 2; }

/* ---- Hessian sums --------------------------------------------------------------------------- */

#define HROWS 4 /* H rows updated together: each x_t[j] load serves 4 rows */

typedef struct hacc_ctx {
    const double *x; /* (tokens, cols) as double */
    int64_t tokens, cols, nblk;
    double *h;
} hacc_ctx;

LWQ_CLONES static void hacc_rows(void *vc, int64_t k0, int64_t k1, int tid)
{
    hacc_ctx *c = vc;
    const int64_t n = c->cols;
    for (int64_t k = k0; k < k1; k++) {
        int64_t i0 = balanced(k, c->nblk) * HROWS;
        int nr = (int)(n - i0 < HROWS ? n - i0 : HROWS);
        if (nr == HROWS) {
            double *h0 = c->h + i0 * n, *h1 = h0 + n, *h2 = h1 + n, *h3 = h2 + n;
            for (int64_t t = 0; t < c->tokens; t++) {
                const double *xt = c->x + t * n;
                const double a0 = xt[i0], a1 = xt[i0 + 1], a2 = xt[i0 + 2], a3 = xt[i0 + 3];
                /* entries left of the diagonal inside the 4-row strip are summed too (never read) */
                for (int64_t j = i0; j < n; j++) {
                    const double v = xt[j];
                    h0[j] = h0[j] + a0 * v; /* products of two floats are exact in double */
                    h1[j] = h1[j] + a1 * v;
                    h2[j] = h2[j] + a2 * v;
                    h3[j] = h3[j] + a3 * v;
                }
            }
        } else {
            for (int r = 0; r < nr; r++) {
                double *hr = c->h + (i0 + r) * n;
                for (int64_t t = 0; t < c->tokens; t++) {
                    const double *xt = c->x + t * n;
                    const double a = xt[i0 + r];
                    for (int64_t j = i0; j < n; j++)
                        hr[j] = hr[j] + a * xt[j];
                }
            }
        }
    }
}

int lwq_gptq_hessian_accumulate(const void *x, lwq_dtype dt, int64_t tokens, int64_t cols, double *h_sum,
                                const char *name, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, x, dt, tokens, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!h_sum)
        return lwq_errf(err, LWQ_EINVAL, "activations of %s: NULL Hessian buffer", lwq_quant_name(name));
    /* tokens go through in chunks of ~4 MB of doubles; each entry still sums them in token order */
    int64_t chunk = (int64_t)(((size_t)4 << 20) / 8 / (size_t)cols);
    chunk = chunk < 1 ? 1 : chunk > tokens ? tokens : chunk;
    double *xd = malloc((size_t)(chunk * cols) * sizeof *xd);
    if (!xd)
        return lwq_errf(err, LWQ_ENOMEM, "activations of %s: cannot allocate %lld bytes of staging",
                        lwq_quant_name(name), (long long)(chunk * cols * 8));
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
        int64_t nt = tokens - t0 < chunk ? tokens - t0 : chunk;
        for (int64_t i = 0; i < nt * cols; i++) {
            double v = (double)lwq_load_f(x, dt, (size_t)(t0 * cols + i));
            if (!isfinite(v)) {
                free(xd);
                int64_t at = t0 * cols + i;
                return lwq_errf(err, LWQ_ENUMERIC, "activations of %s: non-finite value at token %lld, column %lld",
                                lwq_quant_name(name), (long long)(at / cols), (long long)(at % cols));
            }
            xd[i] = v;
        }
        hacc_ctx c = {.x = xd, .tokens = nt, .cols = cols, .nblk = (cols + HROWS - 1) / HROWS, .h = h_sum};
        lwq_parallel_for(c.nblk, 1, hacc_rows, &c);
    }
    free(xd);
    return 0;
}

/* ---- factor --------------------------------------------------------------------------------- */

typedef struct fac_ctx {
    double *a;          /* (n, n) row-major working matrix */
    double *m;          /* (n, n) second matrix */
    int64_t n, j;
    _Atomic int64_t bad;
} fac_ctx;

/* Cholesky column j below the diagonal: L[i][j] = (A[i][j] - L[i][:j] . L[j][:j]) / L[j][j]. */
LWQ_CLONES static void chol_col(void *vc, int64_t i0, int64_t i1, int tid)
{
    fac_ctx *c = vc;
    const int64_t n = c->n, j = c->j;
    const double *lj = c->a + j * n, djj = lj[j];
    for (int64_t i = c->j + 1 + i0; i < c->j + 1 + i1; i++) {
        double *li = c->a + i * n;
        li[j] = (li[j] - dot8(li, lj, j)) / djj;
    }
}

/* In-place lower Cholesky of a (lower triangle read; the strict upper triangle set to 0).
 * Returns the first column whose pivot is not positive, or -1. */
static int64_t cholesky(double *a, int64_t n)
{
    fac_ctx c = {.a = a, .n = n};
    for (int64_t j = 0; j < n; j++) {
        double *lj = a + j * n;
        double d = lj[j] - dot8(lj, lj, j);
        if (!(d > 0.0) || !isfinite(d))
            return j;
        lj[j] = sqrt(d);
        c.j = j;
        if (n - j - 1 > 0) /* a task gets >= ~64k multiply-adds, or the loop runs inline */
            lwq_parallel_for(n - j - 1, 65536 / (j + 1) + 16, chol_col, &c);
    }
    for (int64_t i = 0; i < n; i++)
        memset(a + i * n + i + 1, 0, (size_t)(n - i - 1) * sizeof *a);
    return -1;
}

/* Column j of L^-1 (lower L in c->a) into row j of c->m (so m = (L^-1)^T, upper):
 * x_j = 1 / L_jj; x_i = -(L[i][j:i] . x[j:i]) / L_ii. */
LWQ_CLONES static void trinv_cols(void *vc, int64_t k0, int64_t k1, int tid)
{
    fac_ctx *c = vc;
    const int64_t n = c->n;
    for (int64_t k = k0; k < k1; k++) {
        int64_t j = balanced(k, n);
        double *x = c->m + j * n;
        memset(x, 0, (size_t)n * sizeof *x);
        x[j] = 1.0 / c->a[j * n + j];
        for (int64_t i = j + 1; i < n; i++) {
            const double *li = c->a + i * n;
            x[i] = -dot8(li + j, x + j, i - j) / li[i];
        }
    }
}

/* Lower triangle of H^-1 = (L^-1)^T L^-1 into c->a: Hinv[p][q] = m[p][p:] . m[q][p:], p >= q. */
LWQ_CLONES static void inv_rows(void *vc, int64_t k0, int64_t k1, int tid)
{
    fac_ctx *c = vc;
    const int64_t n = c->n;
    for (int64_t k = k0; k < k1; k++) {
        int64_t p = balanced(k, n);
        const double *mp = c->m + p * n;
        for (int64_t q = 0; q <= p; q++)
            c->a[p * n + q] = dot8(mp + p, c->m + q * n + p, n - p);
    }
}

typedef struct diag_ent {
    double v;
    int64_t i;
} diag_ent;

static int cmp_diag_desc(const void *x, const void *y)
{
    const diag_ent *a = x, *b = y;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

int lwq_gptq_prepare(const double *h_sum, int64_t ntokens, int64_t cols, const lwq_gptq_opts *o, const char *name,
                     int64_t *perm, double *a, uint8_t *dead, lwq_error *err)
{
    name = lwq_quant_name(name);
    if (!h_sum || !perm || !a || !o || cols <= 0)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: bad in-features %lld or NULL buffer", name, (long long)cols);
    if (ntokens <= 0)
        return lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: no calibration tokens reached this linear", name);
    if (!(o->damp > 0.0) || !isfinite(o->damp))
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: dampening %g must be > 0", name, o->damp);
    const int64_t n = cols;
    const double f = 2.0 / (double)ntokens;
    diag_ent *dg = malloc((size_t)n * sizeof *dg);
    if (!dg)
        return lwq_errf(err, LWQ_ENOMEM, "GPTQ of %s: out of memory", name);
    for (int64_t i = 0; i < n; i++) {
        double v = h_sum[i * n + i] * f;
        if (!isfinite(v)) {
            free(dg);
            return lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: Hessian diagonal entry %lld is not finite", name,
                            (long long)i);
        }
        if (dead)
            dead[i] = v == 0.0;
        dg[i].v = v == 0.0 ? 1.0 : v; /* dead input: H_ii = 1 (its weights are zeroed by the sweep) */
        dg[i].i = i;
    }
    if (o->act_order)
        qsort(dg, (size_t)n, sizeof *dg, cmp_diag_desc);
    for (int64_t p = 0; p < n; p++)
        perm[p] = dg[p].i;
    double mean = 0;
    for (int64_t i = 0; i < n; i++)
        mean += dg[i].v;
    mean /= (double)n;
    const double damp = o->damp * mean;
    /* a = P H P^T, dampened, both triangles; h_sum holds the upper triangle */
    for (int64_t p = 0; p < n; p++)
        for (int64_t q = 0; q <= p; q++) {
            int64_t i = perm[p], j = perm[q];
            double v = p == q ? dg[p].v + damp : (i <= j ? h_sum[i * n + j] : h_sum[j * n + i]) * f;
            if (!isfinite(v)) {
                free(dg);
                return lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: Hessian entry [%lld, %lld] is not finite", name,
                                (long long)i, (long long)j);
            }
            a[p * n + q] = a[q * n + p] = v;
        }
    free(dg);
    return 0;
}

int lwq_gptq_factor(const double *h_sum, int64_t ntokens, int64_t cols, const lwq_gptq_opts *o, const char *name,
                    int64_t *perm, double *u, uint8_t *dead, lwq_error *err)
{
    name = lwq_quant_name(name);
    if (!u || cols <= 0)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: bad in-features %lld or NULL buffer", name, (long long)cols);
    const int64_t n = cols;
    double *a = malloc((size_t)(n * n) * sizeof *a);
    if (!a)
        return lwq_errf(err, LWQ_ENOMEM, "GPTQ of %s: cannot allocate %lld bytes for the Hessian factor", name,
                        (long long)(n * n * 8));
    int rc = lwq_gptq_prepare(h_sum, ntokens, cols, o, name, perm, a, dead, err);
    if (rc < 0) {
        free(a);
        return rc;
    }
    int64_t badcol = cholesky(a, n);
    if (badcol >= 0) {
        free(a);
        return lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: the dampened Hessian is not positive definite (pivot %lld); "
                        "raise --gptq-damp (now %g)", name, (long long)badcol, o->damp);
    }
    fac_ctx c = {.a = a, .m = u, .n = n}; /* u serves as the scratch for (L^-1)^T */
    lwq_parallel_for(n, 1, trinv_cols, &c);
    lwq_parallel_for(n, 1, inv_rows, &c);
    badcol = cholesky(a, n);
    if (badcol >= 0) {
        free(a);
        return lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: the inverse Hessian is not positive definite (pivot %lld); "
                        "raise --gptq-damp (now %g)", name, (long long)badcol, o->damp);
    }
    for (int64_t i = 0; i < n; i++) /* U = L2^T */
        for (int64_t j = 0; j < n; j++)
            u[i * n + j] = j >= i ? a[j * n + i] : 0.0;
    free(a);
    return 0;
}

/* ---- output error --------------------------------------------------------------------------- */

typedef struct oerr_ctx {
    const void *w;
    lwq_dtype dt;
    const float *wq;
    const double *h;
    int64_t cols;
    double *row_err, *row_ref;
    _Atomic int64_t bad;
    _Atomic int nomem;
} oerr_ctx;

/* d^T S d with S the mirrored upper triangle: sum_i d_i (S_ii d_i + 2 sum_{j>i} S_ij d_j). */
static double quad(const double *h, const double *d, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        if (d[i] == 0.0)
            continue;
        const double *hi = h + i * n;
        s += d[i] * (hi[i] * d[i] + 2.0 * dot8(hi + i + 1, d + i + 1, n - i - 1));
    }
    return s;
}

static void oerr_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    oerr_ctx *c = vc;
    const int64_t n = c->cols;
    double *d = malloc((size_t)n * 2 * sizeof *d);
    if (!d) {
        atomic_store(&c->nomem, 1);
        return;
    }
    double *wr = d + n;
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t j = 0; j < n; j++) {
            wr[j] = (double)lwq_load_f(c->w, c->dt, (size_t)(r * n + j));
            d[j] = wr[j] - (double)c->wq[r * n + j];
            if (!isfinite(d[j]))
                atomic_min_i64(&c->bad, r * n + j);
        }
        c->row_err[r] = quad(c->h, d, n);
        if (c->row_ref)
            c->row_ref[r] = quad(c->h, wr, n);
    }
    free(d);
}

int lwq_gptq_output_error(const void *w, lwq_dtype dt, const float *wq, int64_t rows, int64_t cols,
                          const double *h_sum, double *out_err, double *ref, lwq_error *err)
{
    int rc = lwq_quant_check_shape(NULL, w, dt, rows, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!wq || !h_sum || !out_err)
        return lwq_errf(err, LWQ_EINVAL, "output error: NULL buffer");
    oerr_ctx c = {.w = w, .dt = dt, .wq = wq, .h = h_sum, .cols = cols};
    c.row_err = malloc((size_t)rows * sizeof(double));
    c.row_ref = ref ? malloc((size_t)rows * sizeof(double)) : NULL;
    atomic_init(&c.bad, INT64_MAX);
    atomic_init(&c.nomem, 0);
    if (!c.row_err || (ref && !c.row_ref)) {
        free(c.row_err);
        free(c.row_ref);
        return lwq_errf(err, LWQ_ENOMEM, "output error: out of memory");
    }
    lwq_parallel_for(rows, 1, oerr_rows, &c);
    if (atomic_load(&c.nomem))
        rc = lwq_errf(err, LWQ_ENOMEM, "output error: out of memory");
    else if (atomic_load(&c.bad) != INT64_MAX)
        rc = lwq_quant_err_nonfinite(NULL, atomic_load(&c.bad), cols, err);
    double s = 0, sr = 0;
    for (int64_t r = 0; rc == 0 && r < rows; r++) {
        s += c.row_err[r];
        if (ref)
            sr += c.row_ref[r];
    }
    if (rc == 0) {
        *out_err = s;
        if (ref)
            *ref = sr;
    }
    free(c.row_err);
    free(c.row_ref);
    return rc;
}
