/* kernels/cpu/gemm_amx.c — y = x W^T (+ bias) for BF16 activations and BF16 weights on CPUs with
 * AMX-BF16 (Sapphire Rapids and later Xeons): the "amx" path of gemm_isa.h.
 *
 * Arithmetic: y[t][o] is one AMX tile element, C[o][t] (16 outputs x 16 tokens, f32), started at
 * +0 and accumulated by TDPBF16PS over the 32-element blocks of k in ascending order (the last
 * block zero-padded on both sides); inside a block the instruction adds its 32 exact BF16 x BF16
 * products in its own fixed way (f32, round to nearest even, denormals read as zero and
 * flushed).  Every element therefore depends on its token's row of x and its weight row only:
 * not on the batch, the padding, the other tokens of the call, which tile or thread computed it,
 * or the thread count.  The bits are AMX's, not the FMA paths' (README: which CPUs give which
 * bytes).
 *
 * Layout: weight tiles are read in place, 16 rows of 64 bytes `in * 2` bytes apart (the partial
 * last output tile and the partial last k block from zero-padded copies made once per call);
 * x is packed per thread, one slice of AMX_RB tokens at a time, into the pair-interleaved layout
 * TDPBF16PS wants for its second operand (per 16 tokens and 32-block: 16 rows of 16 token pairs).
 * Register use: C tiles 0-3 (2 output tiles x 2 token tiles), weight tiles 4-5, x tiles 6-7.
 * The work split is gemm_cpu.c's: whole blocks of AMX_NB outputs per thread.  Each thread loads
 * the tile configuration at the start of its share and releases the tiles at the end, so no
 * AMX state outlives a call.  Compiled for AMX as a whole file; called only after
 * lwq_gemm_amx_usable() said yes. */
#include <cpuid.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/parallel.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/gemm_isa.h"

#if defined(__clang__)
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("amx-tile,amx-bf16,avx512f"))), apply_to = function)
#else
#pragma GCC target("amx-tile,amx-bf16,avx512f")
#include <immintrin.h>
#endif

#define AMX_NB 32 /* outputs per block: two weight tiles */
#define AMX_RB 64 /* tokens per packed slice: four x tiles */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;
_Static_assert(sizeof(tile_config) == 64, "LDTILECFG reads 64 bytes");

int lwq_gemm_amx_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return 0; /* no AMX-BF16 or no AMX-TILE */
    /* Linux hands out the 8 KiB tile state only on request (it says no where the kernel is
     * older than 5.16 or the hypervisor hides the state); the grant is for the whole process */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

typedef struct amx_job {
    const uint16_t *x;    /* (n, in) BF16 */
    const uint16_t *w;    /* (out, in) BF16 */
    const uint16_t *wlast; /* the last output tile when out % 16 != 0: (16, in), zero rows past out */
    const uint16_t *wt;   /* the partial last k block of every output row, (out16, 32), or NULL */
    const float *bias;    /* (out) or NULL */
    void *y;
    lwq_dtype ydt;
    int64_t n, in, out, nfull, nkb;
    char *scratch;
    int64_t per_thread;   /* bytes */
} amx_job;

/* The 16 x 64-byte weight tile of outputs [o0, o0 + 16) and k block kb, and its row stride. */
static const uint16_t *wtile(const amx_job *j, int64_t o0, int64_t kb, int64_t *stride)
{
    if (kb == j->nfull) {
        *stride = 64;
        return j->wt + o0 * 32;
    }
    *stride = j->in * 2;
    if (o0 + 16 > j->out)
        return j->wlast + kb * 32;
    return j->w + o0 * j->in + kb * 32;
}

/* Tokens [r0, r0 + nr) of x into tiles: xp[(g * nkb + kb) * 512 + i * 32 + t * 2 + h] =
 * x[r0 + 16g + t][32 kb + 2i + h], zero past n and past in. */
static void pack_x(const amx_job *j, int64_t r0, int64_t nr, uint16_t *xp)
{
    const int64_t ng = (nr + 15) / 16;
    memset(xp, 0, (size_t)(ng * j->nkb) * 1024);
    for (int64_t t = 0; t < nr; t++) {
        const uint16_t *xr = j->x + (r0 + t) * j->in;
        uint32_t *base = (uint32_t *)(xp + (t / 16) * j->nkb * 512) + t % 16;
        for (int64_t kb = 0; kb < j->nfull; kb++) {
            uint32_t pairs[16];
            memcpy(pairs, xr + kb * 32, 64);
            uint32_t *tile = base + kb * 256;
            for (int i = 0; i < 16; i++)
                tile[i * 16] = pairs[i];
        }
        if (j->nkb > j->nfull) {
            uint16_t *tile = xp + ((t / 16) * j->nkb + j->nfull) * 512 + (t % 16) * 2;
            for (int64_t k = j->nfull * 32; k < j->in; k++) {
                int64_t q = k - j->nfull * 32;
                tile[(q / 2) * 32 + (q & 1)] = xr[k];
            }
        }
    }
}

/* C tiles of NO output tiles x NG token tiles over all k blocks; c: (NO*16, 16) per token tile. */
static inline __attribute__((always_inline)) void
amx_block(const int NO, const int NG, const amx_job *j, int64_t o0, const uint16_t *xg, float *cs)
{
    _tile_zero(0);
    if (NG == 2)
        _tile_zero(1);
    if (NO == 2) {
        _tile_zero(2);
        if (NG == 2)
            _tile_zero(3);
    }
    const int64_t xs = j->nkb * 512; /* elements between token tiles */
    for (int64_t kb = 0; kb < j->nkb; kb++) {
        int64_t s0, s1;
        const uint16_t *a0 = wtile(j, o0, kb, &s0);
        _tile_loadd(4, a0, s0);
        _tile_loadd(6, xg + kb * 512, 64);
        if (NG == 2)
            _tile_loadd(7, xg + xs + kb * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (NG == 2)
            _tile_dpbf16ps(1, 4, 7);
        if (NO == 2) {
            const uint16_t *a1 = wtile(j, o0 + 16, kb, &s1);
            _tile_loadd(5, a1, s1);
            _tile_dpbf16ps(2, 5, 6);
            if (NG == 2)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    /* cs[(g * 32 + m) * 16 + t]: output o0 + m, token 16g + t */
    _tile_stored(0, cs, 64);
    if (NO == 2)
        _tile_stored(2, cs + 256, 64);
    if (NG == 2) {
        _tile_stored(1, cs + 512, 64);
        if (NO == 2)
            _tile_stored(3, cs + 768, 64);
    }
}

static void amx_blocks(void *ctx, int64_t b, int64_t e, int tid)
{
    const amx_job *j = (const amx_job *)ctx;
    char *mine = j->scratch + (int64_t)tid * j->per_thread;
    float *cs = (float *)mine;                 /* 2 x 2 C tiles: 1024 floats */
    float *yt = cs + 1024;                     /* (AMX_RB, AMX_NB) outputs of a block */
    uint16_t *xp = (uint16_t *)(yt + AMX_RB * AMX_NB); /* the packed slice */
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
    for (int64_t r0 = 0; r0 < j->n; r0 += AMX_RB) {
        const int64_t nr = j->n - r0 < AMX_RB ? j->n - r0 : AMX_RB, ng = (nr + 15) / 16;
        pack_x(j, r0, nr, xp);
        for (int64_t blk = b; blk < e; blk++) {
            const int64_t o0 = blk * AMX_NB, nc = j->out - o0 < AMX_NB ? j->out - o0 : AMX_NB;
            const int no = nc > 16 ? 2 : 1;
            for (int64_t g = 0; g < ng; g += 2) {
                const uint16_t *xg = xp + g * j->nkb * 512;
                const int two = g + 1 < ng;
                if (no == 2 && two)
                    amx_block(2, 2, j, o0, xg, cs);
                else if (no == 2)
                    amx_block(2, 1, j, o0, xg, cs);
                else if (two)
                    amx_block(1, 2, j, o0, xg, cs);
                else
                    amx_block(1, 1, j, o0, xg, cs);
                for (int gg = 0; gg < 1 + two; gg++)
                    for (int64_t t = 0; t < 16 && (g + gg) * 16 + t < nr; t++)
                        for (int64_t m = 0; m < nc; m++)
                            yt[((g + gg) * 16 + t) * AMX_NB + m] = cs[(gg * 32 + m) * 16 + t];
            }
            for (int64_t t = 0; t < nr; t++) {
                float *yr = yt + t * AMX_NB;
                if (j->bias)
                    for (int64_t c = 0; c < nc; c++)
                        yr[c] = yr[c] + j->bias[o0 + c];
                lwq_cpu_store_f32(j->y, j->ydt, (r0 + t) * j->out + o0, nc, yr);
            }
        }
    }
    _tile_release();
}

int lwq_gemm_amx(const lwq_tensor *x, const lwq_tensor *w, const float *bias, lwq_tensor *y,
                 lwq_error *e)
{
    amx_job j;
    memset(&j, 0, sizeof j);
    j.x = (const uint16_t *)x->data;
    j.w = (const uint16_t *)w->data;
    j.bias = bias;
    j.y = y->data;
    j.ydt = y->dtype;
    j.n = x->shape[0];
    j.in = x->shape[1];
    j.out = w->shape[0];
    j.nfull = j.in / 32;
    j.nkb = (j.in + 31) / 32;
    const int64_t out16 = (j.out + 15) / 16 * 16, tail = j.in % 32;
    const int64_t nblocks = (j.out + AMX_NB - 1) / AMX_NB;
    const int threads = lwq_parallel_threads() < nblocks ? lwq_parallel_threads() : (int)nblocks;
    if (j.nkb > (INT64_MAX / 4 - 65536) / (AMX_RB / 16 * 1024) / threads)
        return lwq_errf(e, LWQ_EINVAL, "gemm: rows of %lld elements are too long", (long long)j.in);
    j.per_thread = (1024 + AMX_RB * AMX_NB) * 4 + AMX_RB / 16 * j.nkb * 1024;
    j.per_thread = (j.per_thread + 63) / 64 * 64;
    uint16_t *wlast = NULL, *wt = NULL;
    int rc = 0;
    j.scratch = (char *)lwq_cpu_scratch(j.per_thread * threads, 1);
    if (j.out % 16)
        wlast = (uint16_t *)lwq_cpu_scratch(16 * j.in, 2);
    if (tail)
        wt = (uint16_t *)lwq_cpu_scratch(out16 * 32, 2);
    if (!j.scratch || (j.out % 16 && !wlast) || (tail && !wt)) {
        rc = lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for %d threads' AMX tiles (%lld bytes each)",
                      threads, (long long)j.per_thread);
        goto out;
    }
    if (wlast) {
        const int64_t o0 = j.out / 16 * 16;
        memset(wlast, 0, (size_t)(16 * j.in) * 2);
        memcpy(wlast, j.w + o0 * j.in, (size_t)((j.out - o0) * j.in) * 2);
        j.wlast = wlast;
    }
    if (wt) {
        memset(wt, 0, (size_t)(out16 * 32) * 2);
        for (int64_t o = 0; o < j.out; o++)
            memcpy(wt + o * 32, j.w + o * j.in + j.nfull * 32, (size_t)tail * 2);
        j.wt = wt;
    }
    lwq_parallel_for(nblocks, 1, amx_blocks, &j);
out:
    free(wt);
    free(wlast);
    free(j.scratch);
    return rc;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
