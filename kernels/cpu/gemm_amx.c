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
 * Layout (none of it changes a bit: the same instructions on the same values in the same order):
 * x is packed per thread, one slice of up to AMX_RB tokens (about 1 MiB) at a time, into the
 * pair-interleaved layout TDPBF16PS wants for its second operand (per 16 tokens and 32-block: 16
 * rows of 16 token pairs, one 16 x 16 dword transpose in registers); for each block of AMX_NB
 * outputs the thread copies the block's weight rows into contiguous zero-padded tiles (pack_w:
 * read in place, a tile's 16 rows would be `in` x 2 bytes apart, one L1 set for power-of-two
 * widths), then runs every token tile of the slice against it while both sit in L2; each C tile
 * goes back to token-major rows through a register transpose.  All scratch is the calling
 * thread's kept buffer (scratch_cpu.c): nothing is allocated per call.
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
#pragma clang attribute push(__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl"))), apply_to = function)
#else
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")
#include <immintrin.h>
#endif

#define AMX_NB 32  /* outputs per block: two weight tiles */
#define AMX_RB 256 /* tokens per packed slice, at most: sixteen x tiles */
#define AMX_SLICE_BYTES (1 << 20) /* a packed slice's size, at most, when k allows more than 32 */
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
    const float *bias;    /* (out) or NULL */
    void *y;
    lwq_dtype ydt;
    int64_t n, in, out, nfull, nkb;
    int64_t rb;           /* tokens per packed slice: a multiple of 32, <= AMX_RB */
    char *scratch;
    int64_t per_thread;   /* bytes */
} amx_job;

/* 16 x 16 transpose of 32-bit elements in registers: r[i] row i in, column i out. */
static inline __attribute__((always_inline)) void tr16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

/* The k block kb (32 BF16 = 16 dwords) of row r of a (rows, in) BF16 matrix, zero past in. */
static inline __attribute__((always_inline)) __m512 kblock(const amx_job *j, const uint16_t *m,
                                                           int64_t r, int64_t kb)
{
    const uint16_t *p = m + r * j->in + kb * 32;
    if (kb < j->nfull)
        return _mm512_loadu_ps(p);
    const int64_t tail = j->in - kb * 32; /* 1..31 BF16 */
    return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16((__mmask32)((1ull << tail) - 1), p));
}

/* Tokens [r0, r0 + nr) of x into tiles: xp[(g * nkb + kb) * 512 + i * 32 + t * 2 + h] =
 * x[r0 + 16g + t][32 kb + 2i + h], zero past nr and past in: per (16 tokens, k block) one
 * 16 x 16 dword transpose. */
static void pack_x(const amx_job *j, int64_t r0, int64_t nr, uint16_t *xp)
{
    const int64_t ng = (nr + 15) / 16;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t kb = 0; kb < j->nkb; kb++) {
            __m512 r[16];
            for (int t = 0; t < 16; t++)
                r[t] = 16 * g + t < nr ? kblock(j, j->x, r0 + 16 * g + t, kb) : _mm512_setzero_ps();
            tr16(r);
            float *tile = (float *)(xp + (g * j->nkb + kb) * 512);
            for (int i = 0; i < 16; i++)
                _mm512_store_ps(tile + i * 16, r[i]);
        }
}

/* Outputs [o0, o0 + nc) of w as nc > 16 ? 2 : 1 tiles per k block, contiguous:
 * wp[(ot * nkb + kb) * 512 + r * 32 + c] = w[o0 + 16 ot + r][32 kb + c], zero past out and in.
 * Read in place the 16 rows of a weight tile would be `in` x 2 bytes apart, which for the usual
 * power-of-two widths puts them all in one L1 set. */
static void pack_w(const amx_job *j, int64_t o0, int64_t nc, uint16_t *wp)
{
    const int no = nc > 16 ? 2 : 1;
    for (int64_t r = 0; r < 16 * no; r++) {
        uint16_t *dst = wp + (r / 16) * j->nkb * 512 + (r % 16) * 32;
        for (int64_t kb = 0; kb < j->nkb; kb++)
            _mm512_store_ps((float *)(dst + kb * 512),
                            r < nc ? kblock(j, j->w, o0 + r, kb) : _mm512_setzero_ps());
    }
}

/* The next weight block's cache lines, fetched into L2 while the current block computes, so its
 * pack_w reads from L2 instead of waiting on memory: line l is row l / nkb, k block l % nkb. */
typedef struct amx_pf {
    const char *w;      /* the next block's first row, or NULL */
    int64_t rows, line; /* its rows; the next line to fetch */
    int per_kb;         /* lines to fetch per k block of amx_block */
} amx_pf;

static inline __attribute__((always_inline)) void prefetch_next(const amx_job *j, amx_pf *pf)
{
    for (int i = 0; i < pf->per_kb && pf->line < pf->rows * j->nkb; i++, pf->line++)
        _mm_prefetch(pf->w + (pf->line / j->nkb) * j->in * 2 + (pf->line % j->nkb) * 64,
                     _MM_HINT_T1);
}

/* C tiles of NO output tiles x NG token tiles over all k blocks; cs: per token tile g, per output
 * tile o, the (16 outputs, 16 tokens) tile at cs + (g * 2 + o) * 256. */
static inline __attribute__((always_inline)) void
amx_block(const int NO, const int NG, const amx_job *j, const uint16_t *wp, const uint16_t *xg,
          float *cs, amx_pf *pf)
{
    _tile_zero(0);
    if (NG == 2)
        _tile_zero(1);
    if (NO == 2) {
        _tile_zero(2);
        if (NG == 2)
            _tile_zero(3);
    }
    const int64_t st = j->nkb * 512; /* elements between two tiles' k rows */
    for (int64_t kb = 0; kb < j->nkb; kb++) {
        if (pf->w)
            prefetch_next(j, pf);
        _tile_loadd(4, wp + kb * 512, 64);
        _tile_loadd(6, xg + kb * 512, 64);
        if (NG == 2)
            _tile_loadd(7, xg + st + kb * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (NG == 2)
            _tile_dpbf16ps(1, 4, 7);
        if (NO == 2) {
            _tile_loadd(5, wp + st + kb * 512, 64);
            _tile_dpbf16ps(2, 5, 6);
            if (NG == 2)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, cs, 64);
    if (NO == 2)
        _tile_stored(2, cs + 256, 64);
    if (NG == 2) {
        _tile_stored(1, cs + 512, 64);
        if (NO == 2)
            _tile_stored(3, cs + 768, 64);
    }
}

/* y's BF16 of 16 f32 lanes (m: the lanes to write): core/dtype.h's rounding, nearest even with
 * NaN kept quiet, lane by lane (lwq_cpu_f32_to_bf16's formula, in registers). */
static inline __attribute__((always_inline)) void store_bf16(uint16_t *d, __m512 v, __mmask16 m)
{
    const __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                 _mm512_and_si512(hi, _mm512_set1_epi32(1)));
    r = _mm512_srli_epi32(r, 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm256_mask_storeu_epi16(d, m, _mm512_cvtepi32_epi16(r));
}

/* Token tile g's C tiles (cs, as amx_block wrote them) to y rows row .. row + nt, outputs
 * o0 .. o0 + nc: transposed in registers, plus the bias (one f32 add), rounded once to y's dtype
 * (BF16 and F32 straight from the registers; F16 through lwq_cpu_store_f32). */
static void store_c(const amx_job *j, const float *cs, int64_t row, int64_t nt, int64_t o0,
                    int64_t nc, float *yt)
{
    for (int o = 0; o * 16 < nc; o++) {
        __m512 r[16];
        for (int m = 0; m < 16; m++)
            r[m] = _mm512_load_ps(cs + o * 256 + m * 16);
        tr16(r);
        const int64_t c0 = o0 + o * 16, w = nc - o * 16 < 16 ? nc - o * 16 : 16;
        const __mmask16 mk = (__mmask16)((1u << w) - 1);
        const __m512 b = j->bias ? _mm512_maskz_loadu_ps(mk, j->bias + c0) : _mm512_setzero_ps();
        for (int64_t t = 0; t < nt; t++) {
            const __m512 v = j->bias ? _mm512_add_ps(r[t], b) : r[t];
            if (j->ydt == LWQ_BF16)
                store_bf16((uint16_t *)j->y + (row + t) * j->out + c0, v, mk);
            else if (j->ydt == LWQ_F32)
                _mm512_mask_storeu_ps((float *)j->y + (row + t) * j->out + c0, mk, v);
            else
                _mm512_store_ps(yt + t * AMX_NB + o * 16, v);
        }
    }
    if (j->ydt != LWQ_BF16 && j->ydt != LWQ_F32)
        for (int64_t t = 0; t < nt; t++)
            lwq_cpu_store_f32(j->y, j->ydt, (row + t) * j->out + o0, nc, yt + t * AMX_NB);
}

static void tiles_on(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
}

/* The thread's scratch: 2 x 2 C tiles (1024 floats), the (16, AMX_NB) outputs of a token tile,
 * the packed weight block, the packed token slice. */
typedef struct amx_mine {
    float *cs, *yt;
    uint16_t *wp, *xp;
} amx_mine;

static amx_mine mine_of(char *base, int64_t nkb)
{
    amx_mine t;
    t.cs = (float *)base;
    t.yt = t.cs + 1024;
    t.wp = (uint16_t *)(t.yt + 16 * AMX_NB);
    t.xp = t.wp + 2 * nkb * 512;
    return t;
}

/* Output block blk against the packed slice of tokens [r0, r0 + nr) (t.xp); prefetches block
 * blk + 1 of the same weights when `next`. */
static void run_block(const amx_job *j, int64_t r0, int64_t nr, int64_t blk, int next,
                      const amx_mine *t)
{
    const int64_t ng = (nr + 15) / 16;
    const int64_t o0 = blk * AMX_NB, nc = j->out - o0 < AMX_NB ? j->out - o0 : AMX_NB;
    const int no = nc > 16 ? 2 : 1;
    pack_w(j, o0, nc, t->wp);
    amx_pf pf = {NULL, 0, 0, 0};
    if (next && o0 + AMX_NB < j->out) {
        pf.w = (const char *)(j->w + (o0 + AMX_NB) * j->in);
        pf.rows = j->out - o0 - AMX_NB < AMX_NB ? j->out - o0 - AMX_NB : AMX_NB;
        pf.per_kb = (int)((pf.rows + (ng + 1) / 2 - 1) / ((ng + 1) / 2));
    }
    for (int64_t g = 0; g < ng; g += 2) {
        const uint16_t *xg = t->xp + g * j->nkb * 512;
        const int two = g + 1 < ng;
        if (no == 2 && two)
            amx_block(2, 2, j, t->wp, xg, t->cs, &pf);
        else if (no == 2)
            amx_block(2, 1, j, t->wp, xg, t->cs, &pf);
        else if (two)
            amx_block(1, 2, j, t->wp, xg, t->cs, &pf);
        else
            amx_block(1, 1, j, t->wp, xg, t->cs, &pf);
        for (int gg = 0; gg < 1 + two; gg++) {
            const int64_t t0 = (g + gg) * 16, nt = nr - t0 < 16 ? nr - t0 : 16;
            store_c(j, t->cs + gg * 512, r0 + t0, nt, o0, nc, t->yt);
        }
    }
}

static void amx_blocks(void *ctx, int64_t b, int64_t e, int tid)
{
    const amx_job *j = (const amx_job *)ctx;
    const amx_mine t = mine_of(j->scratch + (int64_t)tid * j->per_thread, j->nkb);
    tiles_on();
    for (int64_t r0 = 0; r0 < j->n; r0 += j->rb) {
        const int64_t nr = j->n - r0 < j->rb ? j->n - r0 : j->rb;
        pack_x(j, r0, nr, t.xp);
        for (int64_t blk = b; blk < e; blk++)
            run_block(j, r0, nr, blk, blk + 1 < e, &t);
    }
    _tile_release();
}

/* Set j up for y = x W^T (+ bias); the bytes of scratch one thread needs, or -1 when k is too
 * long. */
static int64_t job_init(amx_job *j, const lwq_tensor *x, const lwq_tensor *w, const float *bias,
                        lwq_tensor *y)
{
    memset(j, 0, sizeof *j);
    j->x = (const uint16_t *)x->data;
    j->w = (const uint16_t *)w->data;
    j->bias = bias;
    j->y = y->data;
    j->ydt = y->dtype;
    j->n = x->shape[0];
    j->in = x->shape[1];
    j->out = w->shape[0];
    j->nfull = j->in / 32;
    j->nkb = (j->in + 31) / 32;
    /* the slice and the weight block stay in L2 while the block's tiles pass */
    j->rb = AMX_SLICE_BYTES / (j->nkb * 64) / 32 * 32;
    j->rb = j->rb < 32 ? 32 : j->rb > AMX_RB ? AMX_RB : j->rb;
    if (j->nkb > (INT64_MAX / 4 - 65536) / ((AMX_RB / 16 + 2) * 1024) / 64)
        return -1;
    int64_t bytes = (1024 + 16 * AMX_NB) * 4 + (2 + j->rb / 16) * j->nkb * 1024;
    return (bytes + 63) / 64 * 64;
}

int lwq_gemm_amx(const lwq_tensor *x, const lwq_tensor *w, const float *bias, lwq_tensor *y,
                 lwq_error *e)
{
    amx_job j;
    const int64_t per = job_init(&j, x, w, bias, y);
    if (per < 0)
        return lwq_errf(e, LWQ_EINVAL, "gemm: rows of %lld elements are too long", (long long)j.in);
    const int64_t nblocks = (j.out + AMX_NB - 1) / AMX_NB;
    const int threads = lwq_parallel_threads() < nblocks ? lwq_parallel_threads() : (int)nblocks;
    if (per > INT64_MAX / threads)
        return lwq_errf(e, LWQ_EINVAL, "gemm: rows of %lld elements are too long", (long long)j.in);
    j.per_thread = per;
    j.scratch = (char *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM, j.per_thread * threads, 1);
    if (!j.scratch)
        return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for %d threads' AMX tiles (%lld bytes each)",
                        threads, (long long)j.per_thread);
    lwq_parallel_for(nblocks, 1, amx_blocks, &j);
    return 0;
}

/* ---- grouped: many products (a MoE layer's experts) in one loop -------------------------------
 * Work items are (group, token slice, output block), group after group, slices before blocks;
 * the static split gives each thread a contiguous run of them, so a thread packs each slice it
 * meets once and the threads stay busy across group boundaries (no fork and join per expert).
 * Each element is computed exactly as lwq_gemm_amx computes it. */

typedef struct amx_grouped {
    amx_job *jobs;
    const int64_t *first; /* (count + 1): each group's first item */
    int count;
    char *scratch;
    int64_t per_thread;
} amx_grouped;

static void grouped_items(void *ctx, int64_t b, int64_t e, int tid)
{
    const amx_grouped *G = (const amx_grouped *)ctx;
    char *base = G->scratch + (int64_t)tid * G->per_thread;
    int grp = 0, packed_grp = -1;
    int64_t packed_r0 = -1;
    while (G->first[grp + 1] <= b)
        grp++;
    tiles_on();
    for (int64_t it = b; it < e; it++) {
        while (G->first[grp + 1] <= it)
            grp++;
        const amx_job *j = &G->jobs[grp];
        const amx_mine t = mine_of(base, j->nkb);
        const int64_t nblocks = (j->out + AMX_NB - 1) / AMX_NB, local = it - G->first[grp];
        const int64_t r0 = local / nblocks * j->rb, blk = local % nblocks;
        const int64_t nr = j->n - r0 < j->rb ? j->n - r0 : j->rb;
        if (grp != packed_grp || r0 != packed_r0) {
            pack_x(j, r0, nr, t.xp);
            packed_grp = grp;
            packed_r0 = r0;
        }
        run_block(j, r0, nr, blk, it + 1 < e && blk + 1 < nblocks, &t);
    }
    _tile_release();
}

int lwq_gemm_amx_grouped(const lwq_gemm_group *g, int count, lwq_error *e)
{
    if (count <= 0)
        return 0;
    amx_job *jobs = (amx_job *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM_AUX, count, sizeof(amx_job));
    int64_t *first = (int64_t *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM_AUX2, (int64_t)count + 1,
                                                     sizeof(int64_t));
    if (!jobs || !first)
        return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for the plan of %d grouped products", count);
    amx_grouped G = {jobs, first, count, NULL, 0};
    first[0] = 0;
    for (int i = 0; i < count; i++) {
        const int64_t per = job_init(&jobs[i], g[i].x, g[i].w, NULL, g[i].y);
        if (per < 0)
            return lwq_errf(e, LWQ_EINVAL, "gemm: rows of %lld elements are too long",
                            (long long)jobs[i].in);
        const int64_t nblocks = (jobs[i].out + AMX_NB - 1) / AMX_NB;
        const int64_t slices = (jobs[i].n + jobs[i].rb - 1) / jobs[i].rb;
        first[i + 1] = first[i] + nblocks * slices;
        G.per_thread = per > G.per_thread ? per : G.per_thread;
    }
    if (first[count] == 0)
        return 0;
    const int threads = lwq_parallel_threads() < first[count] ? lwq_parallel_threads()
                                                              : (int)first[count];
    if (G.per_thread > INT64_MAX / threads)
        return lwq_errf(e, LWQ_EINVAL, "gemm: grouped rows are too long");
    G.scratch = (char *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM, G.per_thread * threads, 1);
    if (!G.scratch)
        return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for %d threads' AMX tiles (%lld bytes each)",
                        threads, (long long)G.per_thread);
    lwq_parallel_for(first[count], 1, grouped_items, &G);
    return 0;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
