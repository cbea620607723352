/* kernels/cpu/gemm/gemm_cpu.c — y = x W^T (+ bias) on the CPU with lwq's own kernels (gemm_isa.h).
 *
 * Every output element is computed by the fixed arithmetic of gemm_isa.h (16 fused lane sums in
 * k order, then a fixed tree), so a token's result depends on its own row and the weights only:
 * not on the batch size, the padding, which other tokens share the call (MoE experts see a
 * different set in every batch) or the thread count.  The AVX-512, AVX2 and portable kernels give
 * the same bits on every CPU; BF16 x BF16 products go through AMX tiles instead where the CPU and OS have AMX-BF16 (gemm_amx.c: 14x the FMA path's peak
 * here, bits of their own), or through vdpbf16ps when forced (gemm_avx512bf16.c).  The fastest
 * path this CPU runs is picked at the first call (LWQ_CPU_KERNELS=amx|avx512bf16|avx512|avx2|
 * portable overrides it, for tests and comparisons; lwq_backend_cpu_kernels says which is in use).
 *
 * Work split: the outputs are cut into blocks of GEMM_NB weight rows and whole blocks go to the
 * threads of core/parallel; each thread walks the rows in slices of GEMM_RB, packs a slice into
 * the kernels' k order (f32, rows of kp floats) and runs it against its blocks.  BF16/F16 weights are
 * widened in registers by the kernels; only the partial last 32-block of each weight row (when
 * k % 32 != 0) is copied, zero-padded, so the kernels never read past a row.  Scratch is the
 * calling thread's kept buffer (scratch_cpu.c), not allocated per call. */
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/gemm/gemm_isa.h"

#define GEMM_NB 48  /* outputs per block: a multiple of every kernel's MC, <= LWQ_GEMM_MAXC */
#ifndef GEMM_RB
#define GEMM_RB 64 /* rows per slice: its packed x stays in L2 while the weight blocks pass */
#endif

/* ---- kernel choice ------------------------------------------------------------------------- */

static const lwq_cpu_kernels k_amx = {"amx", lwq_gemm_panel_avx512, lwq_gemm_axpy_avx512, NULL, 1,
                                      lwq_gemm_pv_avx512, lwq_gemm_scores_avx512};
static const lwq_cpu_kernels k_avx512bf16 = {"avx512bf16", lwq_gemm_panel_avx512,
                                             lwq_gemm_axpy_avx512, lwq_gemm_panel_avx512bf16, 0,
                                             lwq_gemm_pv_avx512, lwq_gemm_scores_avx512};
static const lwq_cpu_kernels k_avx512 = {"avx512", lwq_gemm_panel_avx512, lwq_gemm_axpy_avx512, NULL, 0,
                                         lwq_gemm_pv_avx512, lwq_gemm_scores_avx512};
static const lwq_cpu_kernels k_avx2 = {"avx2", lwq_gemm_panel_avx2, lwq_gemm_axpy_avx2, NULL, 0,
                                       lwq_gemm_pv_avx2, lwq_gemm_scores_avx2};
static const lwq_cpu_kernels k_ref = {"portable", lwq_gemm_panel_ref, lwq_gemm_axpy_ref, NULL, 0,
                                      lwq_gemm_pv_ref, lwq_gemm_scores_ref};

static const lwq_cpu_kernels *kernels_named(const char *name)
{
    __builtin_cpu_init();
    if (!strcmp(name, "amx"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") &&
                       lwq_gemm_amx_usable()
                   ? &k_amx
                   : NULL;
    if (!strcmp(name, "avx512bf16"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512bf16")
                   ? &k_avx512bf16
                   : NULL;
    if (!strcmp(name, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") ? &k_avx512
                                                                                  : NULL;
    if (!strcmp(name, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &k_avx2 : NULL;
    if (!strcmp(name, "portable"))
        return &k_ref;
    return NULL;
}

static const lwq_cpu_kernels *g_kernels;

static const lwq_cpu_kernels *kernels_auto(void)
{
    const char *env = getenv("LWQ_CPU_KERNELS");
    const lwq_cpu_kernels *k = env && *env ? kernels_named(env) : NULL;
    if (!k)
        k = kernels_named("amx");
    /* AMD's AVX512-BF16 (Zen 4 and later) runs vdpbf16ps at twice its FMA rate (perf/RESULTS.md,
     * "fourth pass"); Intel's without AMX (Cooper Lake, or a Sapphire Rapids whose OS withholds the
     * tile state: half the FMA rate measured there) stays on the FMA path.  A rule of the CPU's
     * identity, never a timing, so a CPU always picks the same path and writes the same bytes. */
    if (!k && __builtin_cpu_is("amd"))
        k = kernels_named("avx512bf16");
    if (!k)
        k = kernels_named("avx512");
    if (!k)
        k = kernels_named("avx2");
    return k ? k : &k_ref;
}

const lwq_cpu_kernels *lwq_cpu_kernels_get(void)
{
    const lwq_cpu_kernels *k = __atomic_load_n(&g_kernels, __ATOMIC_ACQUIRE);
    if (!k) {
        k = kernels_auto();
        __atomic_store_n(&g_kernels, k, __ATOMIC_RELEASE);
    }
    return k;
}

int lwq_cpu_kernels_force(const char *name)
{
    const lwq_cpu_kernels *k = name ? kernels_named(name) : kernels_auto();
    if (!k)
        return -1;
    __atomic_store_n(&g_kernels, k, __ATOMIC_RELEASE);
    return 0;
}

/* ---- the GEMM ------------------------------------------------------------------------------ */

typedef struct gemm_job {
    const lwq_cpu_kernels *k;
    lwq_gemm_panel_fn panel; /* k->panel, or k->panel_bf16 for BF16 x BF16 */
    const lwq_tensor *x, *w;
    lwq_tensor *y;
    const char *wt;    /* (out, 32) tail blocks or NULL */
    const float *bias; /* (out) f32 or NULL */
    int64_t n, in, out, kp;
    float *scratch;    /* per thread: accumulators, the (GEMM_RB, GEMM_NB) f32 output tile, the
                          (GEMM_RB, kp) packed x slice, one f32 row of x */
    int64_t per_thread;
} gemm_job;

/* The thread's scratch (per_thread floats): accumulators, the output tile, the packed x slice,
 * one f32 row of x. */
typedef struct gemm_mine {
    float *acc, *yt, *xs, *row;
} gemm_mine;

static gemm_mine gemm_mine_of(float *base, int64_t kp)
{
    gemm_mine t;
    t.acc = base;
    t.yt = t.acc + LWQ_GEMM_ACC_FLOATS;
    t.xs = t.yt + GEMM_RB * GEMM_NB;
    t.row = t.xs + GEMM_RB * kp;
    return t;
}

/* Rows [r0, r0 + nr) of x into the thread's packed slice (the dot panel's raw BF16 rows, or f32 in
 * lwq_gemm_pack_row's order). */
static void gemm_pack_slice(const gemm_job *j, int64_t r0, int64_t nr, const gemm_mine *t)
{
    const int dot = j->panel != j->k->panel;
    uint16_t *xh = (uint16_t *)t->xs; /* the dot panel's BF16 rows: half of the f32 slice */
    for (int64_t r = 0; r < nr && dot; r++) {
        memcpy(xh + r * j->kp, (const uint16_t *)j->x->data + (r0 + r) * j->in, (size_t)j->in * 2);
        memset(xh + r * j->kp + j->in, 0, (size_t)(j->kp - j->in) * 2);
    }
    for (int64_t r = 0; r < nr && !dot; r++) {
        const int64_t off = (r0 + r) * j->in;
        if (j->x->dtype == LWQ_BF16) {
            lwq_cpu_pack_row_bf16((const uint16_t *)j->x->data + off, j->in, t->xs + r * j->kp);
            continue;
        }
        const float *src = t->row;
        if (j->x->dtype == LWQ_F32)
            src = (const float *)j->x->data + off;
        else
            lwq_cpu_load_f32(j->x->data, j->x->dtype, off, j->in, t->row);
        lwq_cpu_pack_row_f32(src, j->in, t->xs + r * j->kp);
    }
}

/* Output blocks [b, e) of the packed slice of rows [r0, r0 + nr): the panel, the bias, the store. */
static void gemm_run_blocks(const gemm_job *j, int64_t r0, int64_t nr, int64_t b, int64_t e,
                            const gemm_mine *t)
{
    const int64_t es = (int64_t)lwq_dtype_size(j->w->dtype);
    lwq_gemm_panel p;
    p.x = t->xs;
    p.xh = (const uint16_t *)t->xs;
    p.ldx = j->kp;
    p.ldw = j->in * es;
    p.wkind = j->w->dtype == LWQ_BF16 ? 0 : j->w->dtype == LWQ_F16 ? 1 : 2;
    p.nfull = j->in / 32;
    p.nr = nr;
    for (int64_t blk = b; blk < e; blk++) {
        int64_t c0 = blk * GEMM_NB, nc = j->out - c0 < GEMM_NB ? j->out - c0 : GEMM_NB;
        p.w = (const char *)j->w->data + c0 * p.ldw;
        p.wt = j->wt ? j->wt + c0 * 32 * es : NULL;
        p.nc = nc;
        p.ldy = nc;
        p.y = t->yt;
        j->panel(&p, t->acc);
        if (j->y->dtype == LWQ_BF16) {
            lwq_cpu_store_tile_bf16(t->yt, nr, nc, j->bias ? j->bias + c0 : NULL,
                                    (uint16_t *)j->y->data + r0 * j->out + c0, j->out);
            continue;
        }
        for (int64_t r = 0; r < nr; r++) {
            float *yr = t->yt + r * nc;
            if (j->bias)
                for (int64_t c = 0; c < nc; c++)
                    yr[c] = yr[c] + j->bias[c0 + c];
            lwq_cpu_store_f32(j->y->data, j->y->dtype, (r0 + r) * j->out + c0, nc, yr);
        }
    }
}

/* Each thread packs the row slices it needs itself (the packing is ~1/out of the work), so the
 * packed copy is one slice per thread, whatever the number of rows, and stays in that core's L2
 * while its weight blocks pass. */
static void gemm_blocks(void *ctx, int64_t b, int64_t e, int tid)
{
    gemm_job *j = (gemm_job *)ctx;
    const gemm_mine t = gemm_mine_of(j->scratch + (int64_t)tid * j->per_thread, j->kp);
    for (int64_t r0 = 0; r0 < j->n; r0 += GEMM_RB) {
        const int64_t nr = j->n - r0 < GEMM_RB ? j->n - r0 : GEMM_RB;
        gemm_pack_slice(j, r0, nr, &t);
        gemm_run_blocks(j, r0, nr, b, e, &t);
    }
}

int lwq_cpu_gemm(void *ctx, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                 lwq_tensor *y, lwq_error *e)
{
    (void)ctx;
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.k = lwq_cpu_kernels_get();
    j.panel = j.k->panel_bf16 && x->dtype == LWQ_BF16 && w->dtype == LWQ_BF16 ? j.k->panel_bf16
                                                                              : j.k->panel;
    j.x = x;
    j.w = w;
    j.y = y;
    j.n = x->shape[0];
    j.in = x->shape[1];
    j.out = w->shape[0];
    j.kp = lwq_gemm_kp(j.in);
    if (j.n == 0 || j.out == 0)
        return 0;
    if (j.k->amx && x->dtype == LWQ_BF16 && w->dtype == LWQ_BF16) {
        float *bf = bias ? (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM_AUX, j.out, sizeof(float))
                         : NULL;
        if (bias && !bf)
            return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for a bias of %lld", (long long)j.out);
        if (bias)
            lwq_cpu_load_f32(bias->data, bias->dtype, 0, j.out, bf);
        return lwq_gemm_amx(x, w, bf, y, e);
    }
    const int64_t es = (int64_t)lwq_dtype_size(w->dtype), tail = j.in % 32;
    const int64_t nblocks = (j.out + GEMM_NB - 1) / GEMM_NB;
    const int threads = lwq_parallel_threads() < nblocks ? lwq_parallel_threads() : (int)nblocks;
    if (j.kp > (INT64_MAX / 4 - LWQ_GEMM_ACC_FLOATS - GEMM_RB * GEMM_NB) / (GEMM_RB + 1) / threads)
        return lwq_errf(e, LWQ_EINVAL, "gemm: rows of %lld elements are too long", (long long)j.in);
    j.per_thread = LWQ_GEMM_ACC_FLOATS + GEMM_RB * GEMM_NB + (GEMM_RB + 1) * j.kp;
    j.per_thread = (j.per_thread + 15) / 16 * 16; /* each thread's block 64-byte aligned */
    float *bias_f = NULL;
    char *wt = NULL;
    j.scratch = (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM, j.per_thread * threads, sizeof(float));
    if (bias)
        bias_f = (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM_AUX, j.out, sizeof(float));
    if (tail)
        wt = (char *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM_AUX2, j.out * 32 * es, 1);
    int rc = 0;
    if (!j.scratch || (bias && !bias_f) || (tail && !wt)) {
        rc = lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for %d threads' tiles (%lld floats each)",
                      threads, (long long)j.per_thread);
        goto out;
    }
    if (bias) {
        lwq_cpu_load_f32(bias->data, bias->dtype, 0, j.out, bias_f);
        j.bias = bias_f;
    }
    if (tail) {
        memset(wt, 0, (size_t)(j.out * 32 * es));
        for (int64_t o = 0; o < j.out; o++)
            memcpy(wt + o * 32 * es, (const char *)w->data + (o * j.in + j.in - tail) * es,
                   (size_t)(tail * es));
        j.wt = wt;
    }
    lwq_parallel_for(nblocks, 1, gemm_blocks, &j);
out:
    return rc;
}

/* ---- grouped: many products in one loop ------------------------------------------------------
 * Products that read the same x (consecutive groups with the same x data, rows, k and panel: an
 * expert's gate and up) form a family.  Work items are (family, row slice, group, output block),
 * families in order, then slices, then the family's groups and their blocks; the static split of
 * core/parallel gives each thread a contiguous run, so a thread packs each slice it meets once for
 * the family's products, and both threads stay busy across product boundaries (a MoE layer's
 * products are split as one list, not each product in halves of whole blocks, with a fork and join
 * per product).  Each element is computed exactly as lwq_cpu_gemm computes it. */

typedef struct gemm_grouped {
    const gemm_job *jobs;
    const int64_t *first;   /* (nfam + 1): each family's first item */
    const int64_t *lead;    /* (nfam): each family's first product */
    const int64_t *fblocks; /* (nfam): output blocks summed over the family's products */
    float *scratch;
    int64_t per_thread;
} gemm_grouped;

static void grouped_items(void *ctx, int64_t b, int64_t e, int tid)
{
    const gemm_grouped *G = (const gemm_grouped *)ctx;
    float *base = G->scratch + (int64_t)tid * G->per_thread;
    int64_t fam = 0, packed_fam = -1, packed_r0 = -1;
    for (int64_t it = b; it < e; it++) {
        while (G->first[fam + 1] <= it)
            fam++;
        const int64_t local = it - G->first[fam], fb = G->fblocks[fam];
        int64_t blk = local % fb, grp = G->lead[fam];
        int64_t nblocks = (G->jobs[grp].out + GEMM_NB - 1) / GEMM_NB;
        while (blk >= nblocks) {
            blk -= nblocks;
            grp++;
            nblocks = (G->jobs[grp].out + GEMM_NB - 1) / GEMM_NB;
        }
        const gemm_job *j = &G->jobs[grp];
        const gemm_mine t = gemm_mine_of(base, j->kp);
        const int64_t r0 = local / fb * GEMM_RB, nr = j->n - r0 < GEMM_RB ? j->n - r0 : GEMM_RB;
        if (fam != packed_fam || r0 != packed_r0) {
            gemm_pack_slice(j, r0, nr, &t);
            packed_fam = fam;
            packed_r0 = r0;
        }
        gemm_run_blocks(j, r0, nr, blk, blk + 1, &t);
    }
}

/* The FMA paths' grouped products: one loop when no product has a bias or a partial last k block
 * (those need per-product scratch), else one lwq_cpu_gemm per product; the same bits either way. */
static int fma_grouped(void *ctx, const lwq_gemm_group *g, int count, lwq_error *e)
{
    const lwq_cpu_kernels *k = lwq_cpu_kernels_get();
    int one_loop = count > 1;
    for (int i = 0; i < count && one_loop; i++)
        one_loop = !g[i].bias && g[i].x->shape[1] % 32 == 0;
    if (!one_loop) {
        for (int i = 0; i < count; i++)
            if (lwq_tensor_numel(g[i].y) > 0)
                LWQ_TRY(lwq_cpu_gemm(ctx, g[i].x, g[i].w, g[i].bias, g[i].y, e));
        return 0;
    }
    gemm_job *jobs = (gemm_job *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM_AUX, count, sizeof(gemm_job));
    int64_t *first = (int64_t *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM_AUX2, 3 * (int64_t)count + 1,
                                                     sizeof(int64_t));
    if (!jobs || !first)
        return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for the plan of %d grouped products", count);
    int64_t *lead = first + count + 1, *fblocks = lead + count, nfam = 0, per_thread = 0, n = 0;
    for (int i = 0; i < count; i++) {
        if (g[i].x->shape[0] == 0 || g[i].w->shape[0] == 0)
            continue;
        gemm_job *j = &jobs[n];
        memset(j, 0, sizeof *j);
        j->k = k;
        j->panel = k->panel_bf16 && g[i].x->dtype == LWQ_BF16 && g[i].w->dtype == LWQ_BF16
                       ? k->panel_bf16
                       : k->panel;
        j->x = g[i].x;
        j->w = g[i].w;
        j->y = g[i].y;
        j->n = g[i].x->shape[0];
        j->in = g[i].x->shape[1];
        j->out = g[i].w->shape[0];
        j->kp = lwq_gemm_kp(j->in);
        if (j->kp > (INT64_MAX / 4 - LWQ_GEMM_ACC_FLOATS - GEMM_RB * GEMM_NB) / (GEMM_RB + 1) /
                        lwq_parallel_threads())
            return lwq_errf(e, LWQ_EINVAL, "gemm: rows of %lld elements are too long",
                            (long long)j->in);
        const int64_t per = (LWQ_GEMM_ACC_FLOATS + GEMM_RB * GEMM_NB + (GEMM_RB + 1) * j->kp + 15) / 16 * 16;
        per_thread = per > per_thread ? per : per_thread;
        const int64_t nblocks = (j->out + GEMM_NB - 1) / GEMM_NB;
        const gemm_job *l = nfam > 0 ? &jobs[lead[nfam - 1]] : NULL;
        if (l && l->x->data == j->x->data && l->x->dtype == j->x->dtype && l->n == j->n &&
            l->in == j->in && l->panel == j->panel) {
            fblocks[nfam - 1] += nblocks; /* the same x: one more product of the family */
        } else {
            lead[nfam] = n;
            fblocks[nfam++] = nblocks;
        }
        n++;
    }
    if (n == 0)
        return 0;
    first[0] = 0;
    for (int64_t f = 0; f < nfam; f++)
        first[f + 1] = first[f] + fblocks[f] * ((jobs[lead[f]].n + GEMM_RB - 1) / GEMM_RB);
    const int64_t items = first[nfam];
    const int threads = lwq_parallel_threads() < items ? lwq_parallel_threads() : (int)items;
    gemm_grouped G = {jobs, first, lead, fblocks, NULL, per_thread};
    G.scratch = (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_GEMM, per_thread * threads, sizeof(float));
    if (!G.scratch)
        return lwq_errf(e, LWQ_ENOMEM, "gemm: no memory for %d threads' tiles (%lld floats each)",
                        threads, (long long)per_thread);
    lwq_parallel_for(items, 1, grouped_items, &G);
    return 0;
}

int lwq_cpu_gemm_grouped(void *ctx, const lwq_gemm_group *g, int count, lwq_error *e)
{
    const lwq_cpu_kernels *k = lwq_cpu_kernels_get();
    int amx = k->amx;
    for (int i = 0; i < count && amx; i++)
        amx = g[i].x->dtype == LWQ_BF16 && g[i].w->dtype == LWQ_BF16 && !g[i].bias;
    if (amx)
        return lwq_gemm_amx_grouped(g, count, e);
    return fma_grouped(ctx, g, count, e);
}
