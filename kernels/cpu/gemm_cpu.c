/* kernels/cpu/gemm_cpu.c — y = x W^T (+ bias) on the CPU with OpenBLAS sgemm.
 *
 * The output columns are cut into fixed tiles of GEMM_TILE weight rows; core/parallel hands
 * whole tiles to threads and each tile is one single-threaded cblas_sgemm (OpenBLAS itself runs
 * with one thread).  A BF16/F16 weight tile is widened to f32 in per-thread scratch just before
 * its sgemm, so a weight is converted once per call and never materialised whole in f32.
 * Because the tiling does not depend on the thread count, every output element is computed by
 * the same sgemm call shape whatever the thread count: results are bitwise reproducible.
 *
 * Rows are cut too, into chunks of exactly GEMM_ROWS (the last one zero-padded): OpenBLAS picks
 * another kernel for small M (its small-matrix and gemv paths), whose sums round differently,
 * so without this a token's output would depend on how many rows shared its call — on the
 * batch size, the padding and, for MoE experts, on which other tokens were routed alike.  With
 * one call shape per weight tile a row's result depends on that row alone (64 is a multiple of
 * the M unroll of every OpenBLAS sgemm kernel, so no row goes through an edge kernel).  The cost:
 * up to 63 zero rows per weight tile, which matters only for experts that see few tokens. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"
#include "kernels/cpu/cpu_internal.h"

#define GEMM_TILE 128
#define GEMM_ROWS 64

typedef struct gemm_job {
    const float *xf;       /* (n, in) f32 */
    const float *xlast;    /* (GEMM_ROWS, in): the last partial row chunk, zero-padded, or NULL */
    int64_t n, in, out;
    const lwq_tensor *w, *bias;
    lwq_tensor *y;
    float *scratch;        /* per thread: wt (GEMM_TILE*in) then yt (GEMM_ROWS*GEMM_TILE) */
    int64_t scratch_per_thread;
} gemm_job;

typedef struct conv_job {
    const lwq_tensor *x;
    float *xf;
} conv_job;

static void conv_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    conv_job *j = (conv_job *)ctx;
    int64_t cols = j->x->shape[1];
    lwq_cpu_load_f32(j->x->data, j->x->dtype, b * cols, (e - b) * cols, j->xf + b * cols);
}

static void gemm_tiles(void *ctx, int64_t b, int64_t e, int tid)
{
    gemm_job *j = (gemm_job *)ctx;
    float *wt = j->scratch + (int64_t)tid * j->scratch_per_thread;
    float *yt = wt + GEMM_TILE * j->in;
    const int yf32 = j->y->dtype == LWQ_F32;
    for (int64_t t = b; t < e; t++) {
        int64_t c0 = t * GEMM_TILE;
        int64_t nc = j->out - c0 < GEMM_TILE ? j->out - c0 : GEMM_TILE;
        const float *wp;
        if (j->w->dtype == LWQ_F32) {
            wp = (const float *)j->w->data + c0 * j->in;
        } else {
            lwq_cpu_load_f32(j->w->data, j->w->dtype, c0 * j->in, nc * j->in, wt);
            wp = wt;
        }
        for (int64_t r0 = 0; r0 < j->n; r0 += GEMM_ROWS) {
            int64_t nr = j->n - r0 < GEMM_ROWS ? j->n - r0 : GEMM_ROWS;
            const float *a = nr == GEMM_ROWS ? j->xf + r0 * j->in : j->xlast;
            int direct = yf32 && nr == GEMM_ROWS;
            float *c = direct ? (float *)j->y->data + r0 * j->out + c0 : yt;
            int64_t ldc = direct ? j->out : nc;
            if (j->in > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, GEMM_ROWS, (int)nc, (int)j->in, 1.0f, a,
                            (int)j->in, wp, (int)j->in, 0.0f, c, (int)ldc);
            else
                for (int64_t r = 0; r < nr; r++)
                    memset(c + r * ldc, 0, (size_t)nc * sizeof(float));
            if (j->bias) {
                float bb[GEMM_TILE];
                lwq_cpu_load_f32(j->bias->data, j->bias->dtype, c0, nc, bb);
                for (int64_t r = 0; r < nr; r++)
                    for (int64_t i = 0; i < nc; i++)
                        c[r * ldc + i] += bb[i];
            }
            if (!direct)
                for (int64_t r = 0; r < nr; r++)
                    lwq_cpu_store_f32(j->y->data, j->y->dtype, (r0 + r) * j->out + c0, nc, c + r * ldc);
        }
    }
}

int lwq_cpu_gemm(void *ctx, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                 lwq_tensor *y, lwq_error *e)
{
    (void)ctx;
    int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
    if (n > INT32_MAX || in > INT32_MAX || out > INT32_MAX)
        return lwq_errf(e, LWQ_EINVAL, "gemm: dims (%lld, %lld, %lld) exceed the BLAS int range",
                        (long long)n, (long long)in, (long long)out);
    float *xf = NULL;
    if (x->dtype != LWQ_F32) {
        xf = (float *)lwq_cpu_scratch(n * in, sizeof(float));
        if (!xf)
            return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for a (%lld, %lld) f32 copy of x",
                            (long long)n, (long long)in);
        conv_job cj = {x, xf};
        lwq_parallel_for(n, 64, conv_rows, &cj);
    }
    int threads = lwq_parallel_threads();
    gemm_job j = {xf ? xf : (const float *)x->data, NULL, n, in, out, w, bias, y, NULL, 0};
    float *xlast = NULL;
    int64_t tail = n % GEMM_ROWS;
    if (tail) {
        xlast = (float *)calloc((size_t)(GEMM_ROWS * (in ? in : 1)), sizeof(float));
        if (!xlast) {
            free(xf);
            return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for a (%d, %lld) row chunk", GEMM_ROWS,
                            (long long)in);
        }
        memcpy(xlast, j.xf + (n - tail) * in, (size_t)(tail * in) * sizeof(float));
        j.xlast = xlast;
    }
    j.scratch_per_thread = GEMM_TILE * in + GEMM_ROWS * GEMM_TILE;
    j.scratch = (float *)lwq_cpu_scratch(j.scratch_per_thread * threads, sizeof(float));
    if (!j.scratch) {
        free(xlast);
        free(xf);
        return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for %d tiles of scratch (%lld floats "
                        "each)", threads, (long long)j.scratch_per_thread);
    }
    lwq_parallel_for((out + GEMM_TILE - 1) / GEMM_TILE, 1, gemm_tiles, &j);
    free(j.scratch);
    free(xlast);
    free(xf);
    return 0;
}
