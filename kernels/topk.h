/* kernels/topk.h — the k largest of a row in the order torch.topk returns them on the CPU, so
 * that lwq's MoE routers pick the same experts as transformers' when router scores tie.
 *
 * torch 2.13's CPU top-k (ATen native/TopKImpl.h, topk_impl_loop; read, not copied) fills a
 * queue of (value, position) pairs 0..n-1 and compares VALUES ONLY (NaN above everything, then
 * larger first).  It then runs libstdc++'s unstable algorithms on that queue:
 *   k * 64 <= n : std::partial_sort(q, q + k, q + n)          (heap select, then sort_heap)
 *   otherwise   : std::nth_element(q, q + k - 1, q + n)      (introselect: median-of-three
 *                 quickselect, heap select past 2*floor(log2 n) rounds, insertion sort at <= 3)
 *                 and, when sorted=True, std::sort(q, q + k - 1) (introsort; insertion sort
 *                 below 17 elements, so stable there)
 * and returns the first k.  Which of several tied values wins, and in which order tied values
 * come out, is therefore a fixed function of the row's values, n, k and `sorted` (the same row
 * always gives the same answer, on any thread or batch), but it is no simple rule: it depends on
 * where the ties sit relative to the pivots those algorithms choose.  This file performs the
 * same sequence of comparisons and moves on an array of positions (values are looked up, never
 * moved), written from the algorithms' definitions in GCC's libstdc++ (torch 2.13 wheels are
 * built with GCC 13, whose libstdc++ implements them as GCC 12's in this checkout's compiler).
 * tests/kernels/test_topk_torch.c checks it against torch's own output on tie-heavy rows.
 *
 * LWQ_HD: plain C on the host, __host__ __device__ under nvcc (kernels/cuda/route.h).  No
 * recursion (introsort's right halves go on a fixed stack of 64 ranges, enough for any n below
 * 2^31 because each pushed range has a smaller depth budget than the one below it) and no
 * allocation: the caller passes n int32 of scratch. */
#ifndef LWQ_KERNELS_TOPK_H
#define LWQ_KERNELS_TOPK_H

#include <stdint.h>

#include "core/data/dtype.h"

/* a comes before b: a is NaN and b is not, or a is larger (torch's `largest` comparator). */
LWQ_HD int lwq_topk_before(const float *v, int32_t a, int32_t b)
{
    const float x = v[a], y = v[b];
    return (x != x && y == y) || x > y;
}

LWQ_HD void lwq_topk_swap(int32_t *q, int64_t i, int64_t j)
{
    int32_t t = q[i];
    q[i] = q[j];
    q[j] = t;
}

/* floor(log2 n), n >= 1 */
LWQ_HD int lwq_topk_lg(int64_t n)
{
    int r = 0;
    while (n > 1) {
        n >>= 1;
        r++;
    }
    return r;
}

/* Hole at `hole` of the heap q[f..f+len), filled by sifting down then up with `val`. */
LWQ_HD void lwq_topk_adjust_heap(const float *v, int32_t *q, int64_t f, int64_t hole, int64_t len, int32_t val)
{
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (lwq_topk_before(v, q[f + child], q[f + child - 1]))
            child--;
        q[f + hole] = q[f + child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        q[f + hole] = q[f + child - 1];
        hole = child - 1;
    }
    int64_t parent = (hole - 1) / 2;
    while (hole > top && lwq_topk_before(v, q[f + parent], val)) {
        q[f + hole] = q[f + parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    q[f + hole] = val;
}

LWQ_HD void lwq_topk_make_heap(const float *v, int32_t *q, int64_t f, int64_t l)
{
    const int64_t len = l - f;
    if (len < 2)
        return;
    for (int64_t parent = (len - 2) / 2;; parent--) {
        lwq_topk_adjust_heap(v, q, f, parent, len, q[f + parent]);
        if (parent == 0)
            return;
    }
}

/* The heap's top to q[res], q[res]'s old element sifted into the heap q[f..l). */
LWQ_HD void lwq_topk_pop_heap(const float *v, int32_t *q, int64_t f, int64_t l, int64_t res)
{
    int32_t val = q[res];
    q[res] = q[f];
    lwq_topk_adjust_heap(v, q, f, 0, l - f, val);
}

/* q[f..m) becomes a heap of the m-f elements of q[f..l) that come last in the order's reverse
 * (i.e. the first ones: the heap's top is the one that comes latest among them). */
LWQ_HD void lwq_topk_heap_select(const float *v, int32_t *q, int64_t f, int64_t m, int64_t l)
{
    lwq_topk_make_heap(v, q, f, m);
    for (int64_t i = m; i < l; i++)
        if (lwq_topk_before(v, q[i], q[f]))
            lwq_topk_pop_heap(v, q, f, m, i);
}

LWQ_HD void lwq_topk_sort_heap(const float *v, int32_t *q, int64_t f, int64_t l)
{
    while (l - f > 1) {
        l--;
        lwq_topk_pop_heap(v, q, f, l, l);
    }
}

LWQ_HD void lwq_topk_linear_insert(const float *v, int32_t *q, int64_t last)
{
    const int32_t val = q[last];
    int64_t next = last - 1;
    while (lwq_topk_before(v, val, q[next])) {
        q[last] = q[next];
        last = next;
        next--;
    }
    q[last] = val;
}

LWQ_HD void lwq_topk_insertion_sort(const float *v, int32_t *q, int64_t f, int64_t l)
{
    if (f == l)
        return;
    for (int64_t i = f + 1; i != l; i++) {
        if (lwq_topk_before(v, q[i], q[f])) {
            const int32_t val = q[i];
            for (int64_t j = i; j > f; j--)
                q[j] = q[j - 1];
            q[f] = val;
        } else {
            lwq_topk_linear_insert(v, q, i);
        }
    }
}

/* The median of q[a], q[b], q[c] swapped into q[r]. */
LWQ_HD void lwq_topk_median_to_first(const float *v, int32_t *q, int64_t r, int64_t a, int64_t b, int64_t c)
{
    int64_t m;
    if (lwq_topk_before(v, q[a], q[b]))
        m = lwq_topk_before(v, q[b], q[c]) ? b : lwq_topk_before(v, q[a], q[c]) ? c : a;
    else
        m = lwq_topk_before(v, q[a], q[c]) ? a : lwq_topk_before(v, q[b], q[c]) ? c : b;
    lwq_topk_swap(q, r, m);
}

/* Median-of-three pivot moved to q[f], then Hoare's partition of q[f+1..l) around it; returns
 * the cut. */
LWQ_HD int64_t lwq_topk_partition(const float *v, int32_t *q, int64_t f, int64_t l)
{
    lwq_topk_median_to_first(v, q, f, f + 1, f + (l - f) / 2, l - 1);
    const int32_t pivot = q[f];
    int64_t a = f + 1, b = l;
    for (;;) {
        while (lwq_topk_before(v, q[a], pivot))
            a++;
        b--;
        while (lwq_topk_before(v, pivot, q[b]))
            b--;
        if (!(a < b))
            return a;
        lwq_topk_swap(q, a, b);
        a++;
    }
}

/* std::sort of q[f..l) (introsort, then insertion sort over the whole range). */
LWQ_HD void lwq_topk_sort(const float *v, int32_t *q, int64_t f, int64_t l)
{
    if (f == l)
        return;
    int64_t sf[64], sl[64];
    int sd[64], top = 0;
    sf[0] = f;
    sl[0] = l;
    sd[0] = 2 * lwq_topk_lg(l - f);
    top = 1;
    while (top > 0) {
        top--;
        int64_t a = sf[top], b = sl[top];
        int d = sd[top];
        while (b - a > 16) {
            if (d == 0) {
                lwq_topk_heap_select(v, q, a, b, b);
                lwq_topk_sort_heap(v, q, a, b);
                break;
            }
            d--;
            int64_t cut = lwq_topk_partition(v, q, a, b);
            sf[top] = cut; /* ranges are disjoint: the order they are done in does not matter */
            sl[top] = b;
            sd[top] = d;
            top++;
            b = cut;
        }
    }
    if (l - f > 16) {
        lwq_topk_insertion_sort(v, q, f, f + 16);
        for (int64_t i = f + 16; i != l; i++)
            lwq_topk_linear_insert(v, q, i);
    } else {
        lwq_topk_insertion_sort(v, q, f, l);
    }
}

/* std::nth_element(q + f, q + nth, q + l). */
LWQ_HD void lwq_topk_select(const float *v, int32_t *q, int64_t f, int64_t nth, int64_t l)
{
    if (f == l || nth == l)
        return;
    int depth = 2 * lwq_topk_lg(l - f);
    while (l - f > 3) {
        if (depth == 0) {
            lwq_topk_heap_select(v, q, f, nth + 1, l);
            lwq_topk_swap(q, f, nth);
            return;
        }
        depth--;
        int64_t cut = lwq_topk_partition(v, q, f, l);
        if (cut <= nth)
            f = cut;
        else
            l = cut;
    }
    lwq_topk_insertion_sort(v, q, f, l);
}

/* out (k) = positions of the k largest of v (n), 0 <= k <= n, in torch.topk(v, k, sorted)'s
 * order on the CPU; q: n int32 of scratch. */
LWQ_HD void lwq_topk_torch(const float *v, int64_t n, int64_t k, int sorted, int32_t *q, int32_t *out)
{
    if (k <= 0)
        return;
    for (int64_t i = 0; i < n; i++)
        q[i] = (int32_t)i;
    if (k * 64 <= n) {
        lwq_topk_heap_select(v, q, 0, k, n);
        lwq_topk_sort_heap(v, q, 0, k);
    } else {
        lwq_topk_select(v, q, 0, k - 1, n);
        if (sorted)
            lwq_topk_sort(v, q, 0, k - 1);
    }
    for (int64_t i = 0; i < k; i++)
        out[i] = q[i];
}

#endif
