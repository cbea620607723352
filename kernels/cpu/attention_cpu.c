/* kernels/cpu/attention_cpu.c — causal grouped-query attention on the CPU, flash style.
 *
 * Work items are (sequence, head, query tile of ATT_QT rows); a query tile walks the key tiles
 * (ATT_KT keys) it can see, computing the scores Q K^T with the kernels' scores (gemm_isa.h:
 * each score is the GEMM panel's fixed-order dot product, computed for 16 keys at once from keys
 * transposed to (head dim, key), bit for bit the panel's), scaling them, and folding each row's visible keys
 * (causal, not padding) into its running maximum / sum / output (online softmax, all f32; the
 * output is a chain of fused multiply-adds over the keys in order).  Keys a row cannot see are
 * skipped, not weighted by 0.  P V runs through the kernels' blocked pv (4 query rows at a time
 * over the keys all of them see, the same fused chain per element as one axpy per key), the
 * remaining keys of each row one axpy each.  A thread widens the keys and values of the
 * (sequence, kv head) of its items to f32 once per run of items on them (the keys transposed),
 * and each query tile as it comes, so no f32 copy of the whole q, k, v is made.  Memory per thread
 * is about ATT_QT x (ATT_KT + 4 head_dim) + 2 (seq + 32) x (head_dim + 32) floats, kept from call
 * to call (scratch_cpu.c).  Items are ordered (sequence, head,
 * tile) so the static split of core/parallel gives each thread a similar mix of short and long
 * causal rows.
 *
 * Batch invariance by construction: a row's result depends on its query, the keys and values it
 * sees, and the key-tile grid, which starts at its sequence's first valid key (not at row 0 of
 * the padded batch); so left padding, the other sequences of the batch, the thread count and
 * the CPU's kernels (AVX-512, AVX2, portable give the same bits) do not change it.
 * Rows before the first valid key see no key and are written as zeros. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/exp/exp.h"
#include "kernels/cpu/gemm/gemm_isa.h"

#define ATT_QT 64
#define ATT_KT 64

typedef struct att_job {
    const lwq_attn_args *a;
    const lwq_cpu_kernels *kern;
    const lwq_exp_kernels *ek;
    const uint8_t *valid;
    const int64_t *first;    /* per sequence: its first valid key (seq when none) */
    int64_t nqt;             /* query tiles per sequence (at most) */
    int64_t hdp;             /* head_dim rounded up to 32 (packed query rows) */
    int64_t ldk;             /* the transposed keys' row: seq rounded up to 16, plus 16 */
    float *scratch;
    int64_t per_thread;
} att_job;

/* rows [r0, r0 + nr) of t's columns [c0, c0 + hd) as f32, rows hd apart (exact: a widening) */
static void load_rows(const lwq_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t hd,
                      float *dst)
{
    const int64_t ld = t->shape[1];
    for (int64_t r = 0; r < nr; r++)
        lwq_cpu_load_f32(t->data, t->dtype, (r0 + r) * ld + c0, hd, dst + r * hd);
}

/* Rows [r0, r0 + nr) of t's columns [c0, c0 + hd) transposed into kt: kt[d * ldk + i] = row
 * r0 + i's element d, as f32 (exact: a widening); row is one key's scratch of hd floats. */
static void load_keys_t(const lwq_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t hd,
                        float *kt, int64_t ldk, float *row)
{
    const int64_t ld = t->shape[1];
    for (int64_t i = 0; i < nr; i++) {
        lwq_cpu_load_f32(t->data, t->dtype, (r0 + i) * ld + c0, hd, row);
        for (int64_t d = 0; d < hd; d++)
            kt[d * ldk + i] = row[d];
    }
}

static void att_items(void *ctx, int64_t b, int64_t e, int tid)
{
    att_job *j = (att_job *)ctx;
    const lwq_attn_args *a = j->a;
    const int64_t hd = a->head_dim, T = a->seq, hdp = j->hdp, ldk = j->ldk;
    const int64_t ldq = (int64_t)a->n_heads * hd;
    const int group = a->n_heads / a->n_kv_heads;
    float *S = j->scratch + (int64_t)tid * j->per_thread;
    int64_t *vis = (int64_t *)(S + ATT_QT * ATT_KT); /* per query row: keys it sees in the tile */
    float *acc = (float *)(vis + ATT_QT);
    float *m = acc + ATT_QT * hd;
    float *l = m + ATT_QT;
    float *qp = l + ATT_QT;             /* ATT_QT packed query rows */
    float *qf = qp + ATT_QT * hdp;      /* the query rows, f32, hd apart; a key row while widening */
    float *kall = qf + ATT_QT * hd;     /* the item's sequence and kv head: keys, f32, transposed
                                           (hdp rows of ldk, zero past hd and past T) */
    float *vall = kall + hdp * ldk;     /* ... and values, hd apart */
    int64_t have = -1; /* the (sequence, kv head) whose keys and values kall / vall hold */
    for (int64_t it = b; it < e; it++) {
        int64_t qt = it % j->nqt;
        int64_t h = (it / j->nqt) % a->n_heads;
        int64_t s = it / (j->nqt * a->n_heads);
        int64_t g = h / group;
        int64_t row0 = s * T, base = j->first[s];
        if (qt == 0)
            for (int64_t r = 0; r < base; r++) {
                memset(acc, 0, (size_t)hd * sizeof(float));
                lwq_cpu_store_f32(a->out->data, a->out->dtype, (row0 + r) * ldq + h * hd, hd, acc);
            }
        int64_t i0 = base + qt * ATT_QT;
        if (i0 >= T)
            continue;
        int64_t nq = T - i0 < ATT_QT ? T - i0 : ATT_QT;
        /* items run (sequence, head, tile) in order and heads of one kv head are neighbours, so a
         * thread widens each kv head's keys and values once per run of its items */
        if (have != s * a->n_kv_heads + g) {
            if (have < 0) /* the zeros past hd and past T stay from one (sequence, kv head) to the next */
                memset(kall, 0, (size_t)(hdp * ldk) * sizeof(float));
            load_keys_t(a->k, row0 + base, T - base, g * hd, hd, kall + base, ldk, qf);
            load_rows(a->v, row0 + base, T - base, g * hd, hd, vall + base * hd);
            have = s * a->n_kv_heads + g;
        }
        load_rows(a->q, row0 + i0, nq, h * hd, hd, qf);
        for (int64_t r = 0; r < nq; r++) {
            lwq_cpu_pack_row_f32(qf + r * hd, hd, qp + r * hdp);
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        memset(acc, 0, (size_t)(nq * hd) * sizeof(float));
        for (int64_t j0 = base; j0 < i0 + nq; j0 += ATT_KT) {
            int64_t nk = i0 + nq - j0 < ATT_KT ? i0 + nq - j0 : ATT_KT;
            const float *vf = vall + j0 * hd;
            int all_valid = 1;
            for (int64_t c = 0; j->valid && c < nk; c++)
                all_valid &= j->valid[row0 + j0 + c] != 0;
            /* S = Q K^T for the tile (each score is the fixed dot product of gemm_isa.h) */
            j->kern->scores(qp, hdp, kall + j0, ldk, hdp / 32, S, nk, nq, nk);
        for (int64_t r = 0; r < nq; r++) {
                /* keys this row sees: causal (<= its position) and not padding; the others are
                 * skipped, not weighted by 0, so a row depends on its visible keys alone */
                float *sr = S + r * nk;
                vis[r] = i0 + r - j0 + 1 < nk ? i0 + r - j0 + 1 : nk;
                float mt = -INFINITY;
                for (int64_t c = 0; c < vis[r]; c++) {
                    if (j->valid && !j->valid[row0 + j0 + c]) {
                        sr[c] = -INFINITY;
                        continue;
                    }
                    sr[c] = sr[c] * a->scale;
                    if (sr[c] > mt)
                        mt = sr[c];
                }
                if (mt == -INFINITY) {
                    vis[r] = 0; /* no visible key here: the row's output is not touched */
                    continue;
                }
                float mn = mt > m[r] ? mt : m[r];
                float corr = expf(m[r] - mn); /* 0 when m[r] is -inf */
                float sum = 0.0f;
                /* sr[c] = expf(sr[c] - mn): exactly 0 for a skipped key (-inf - mn is -inf, mn
                 * being a finite or +inf maximum) */
                j->ek->exp_sub(sr, mn, sr, vis[r]);
                for (int64_t c = 0; c < vis[r]; c++)
                    sum += sr[c];
                l[r] = l[r] * corr + sum;
                m[r] = mn;
                float *ar = acc + r * hd;
                if (corr != 1.0f)
                    for (int64_t d = 0; d < hd; d++)
                        ar[d] *= corr;
            }
            /* acc += P V.  Per output element one fused chain over the row's visible keys in
             * order; keys every row of a block of 4 sees go through the blocked kernel (the same
             * chain, bit for bit), the rest of each row key by key. */
            for (int64_t r0 = 0; r0 < nq; r0 += 4) {
                const int64_t nr = nq - r0 < 4 ? nq - r0 : 4;
                int64_t common = all_valid ? vis[r0] : 0;
                for (int64_t r = r0; r < r0 + nr; r++)
                    common = vis[r] < common ? vis[r] : common;
                if (common > 0)
                    j->kern->pv(S + r0 * nk, nk, vf, hd, acc + r0 * hd, hd, nr, common, hd);
                for (int64_t r = r0; r < r0 + nr; r++)
                    for (int64_t c = common; c < vis[r]; c++)
                        if (!j->valid || j->valid[row0 + j0 + c])
                            j->kern->axpy(S[r * nk + c], vf + c * hd, acc + r * hd, hd);
            }
        }
        for (int64_t r = 0; r < nq; r++) {
            float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            for (int64_t d = 0; d < hd; d++)
                acc[r * hd + d] = l[r] > 0.0f ? acc[r * hd + d] * inv : 0.0f;
            lwq_cpu_store_f32(a->out->data, a->out->dtype, (row0 + i0 + r) * ldq + h * hd, hd,
                              acc + r * hd);
        }
    }
}

int lwq_cpu_attention(void *ctx, const lwq_attn_args *a, lwq_error *e)
{
    (void)ctx;
    if (a->seq == 0)
        return 0;
    if (a->head_dim > INT32_MAX / 64 || a->n_heads * a->head_dim > INT32_MAX)
        return lwq_errf(e, LWQ_EINVAL, "attention: head geometry (%d heads x %lld) is too large",
                        a->n_heads, (long long)a->head_dim);
    att_job j;
    memset(&j, 0, sizeof j);
    j.a = a;
    j.kern = lwq_cpu_kernels_get();
    j.ek = lwq_exp_kernels_get();
    j.hdp = lwq_gemm_kp(a->head_dim);
    j.valid = a->key_valid ? (const uint8_t *)a->key_valid->data : NULL;
    j.nqt = (a->seq + ATT_QT - 1) / ATT_QT;
    int64_t *first = (int64_t *)lwq_cpu_scratch_slot(LWQ_SCRATCH_ATTN_SEQ,
                                                     a->batch > 0 ? a->batch : 1, sizeof *first);
    for (int64_t s = 0; first && s < a->batch; s++) {
        int64_t f = 0;
        while (j.valid && f < a->seq && !j.valid[s * a->seq + f])
            f++;
        first[s] = f;
    }
    j.first = first;
    if (a->seq > INT64_MAX / 64 / (a->head_dim + 32) / lwq_parallel_threads())
        return lwq_errf(e, LWQ_EINVAL, "attention: sequences of %lld tokens are too long",
                        (long long)a->seq);
    j.ldk = (a->seq + 15) / 16 * 16 + 16;
    j.per_thread = ATT_QT * ATT_KT + ATT_QT * a->head_dim + 2 * ATT_QT + ATT_QT * j.hdp +
                   ATT_QT * a->head_dim + j.hdp * j.ldk + a->seq * a->head_dim + 2 * ATT_QT;
    j.per_thread = (j.per_thread + 15) / 16 * 16; /* each thread's block 64-byte aligned */
    int threads = lwq_parallel_threads();
    j.scratch = (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_ATTN, j.per_thread * threads,
                                              sizeof(float));
    if (!j.scratch || !first)
        return lwq_errf(e, LWQ_ENOMEM, "attention: no memory for the tile scratch (seq %lld, "
                        "heads %d)", (long long)a->seq, a->n_heads);
    lwq_parallel_for(a->batch * a->n_heads * j.nqt, 1, att_items, &j);
    return 0;
}
