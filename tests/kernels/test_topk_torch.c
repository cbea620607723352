/* kernels/topk.h and the CPU MoE router pick the experts torch.topk picks on the CPU when scores tie (goldens from peers/topk_ties.py, torch 2.13), on any thread count. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/backend.h"
#include "kernels/topk.h"
#include "tests/helpers/fixtures.h"

#define MAXN 1024
#define MAXROWS 1024

typedef struct golden_row {
    int route; /* 0: plain top-k of v; 1: softmax router over logits v */
    int n, k, sorted;
    float v[MAXN];
    int32_t idx[MAXN];
} golden_row;

static golden_row *g_rows;
static int g_count;

/* Reads tests/data/topk/torch_topk.txt into g_rows (once). */
static void load(void)
{
    if (g_rows)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/topk/torch_topk.txt", lwqt_source_dir());
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    g_rows = calloc(MAXROWS, sizeof *g_rows);
    cr_assert(g_rows);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == '#')
            continue;
        cr_assert(g_count < MAXROWS, "%s: more than %d rows", path, MAXROWS);
        golden_row *g = &g_rows[g_count++];
        char *s = line;
        if (!strncmp(s, "route", 5)) {
            g->route = 1;
            g->sorted = 1;
            s += 5;
            g->n = (int)strtol(s, &s, 10);
            g->k = (int)strtol(s, &s, 10);
        } else {
            g->n = (int)strtol(s, &s, 10);
            g->k = (int)strtol(s, &s, 10);
            g->sorted = (int)strtol(s, &s, 10);
        }
        cr_assert(g->n > 0 && g->n <= MAXN && g->k > 0 && g->k <= g->n, "%s row %d: n %d k %d", path, g_count, g->n,
                  g->k);
        s = strchr(s, '|');
        cr_assert(s, "%s row %d: no values", path, g_count);
        s++;
        for (int i = 0; i < g->n; i++) {
            while (*s == ' ')
                s++;
            if (!strncmp(s, "nan", 3)) {
                g->v[i] = NAN;
                s += 3;
            } else {
                char *end;
                g->v[i] = strtof(s, &end);
                cr_assert(end != s, "%s row %d: value %d unreadable", path, g_count, i);
                s = end;
            }
        }
        s = strchr(s, '|');
        cr_assert(s, "%s row %d: no indices", path, g_count);
        s++;
        for (int i = 0; i < g->k; i++)
            g->idx[i] = (int32_t)strtol(s, &s, 10);
    }
    free(line);
    fclose(f);
}

/* The rule lwq used before: by value descending, ties to the lower index, NaN last. */
static void lower_index_rule(const float *v, int n, int k, int32_t *out)
{
    uint8_t taken[MAXN] = {0};
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!taken[i] && (best < 0 || v[i] > v[best] || (v[best] != v[best] && v[i] == v[i])))
                best = i;
        taken[best] = 1;
        out[s] = best;
    }
}

Test(topk_torch, every_golden_row_in_torch_order)
{
    load();
    int32_t q[MAXN], out[MAXN];
    int plain = 0;
    for (int r = 0; r < g_count; r++) {
        const golden_row *g = &g_rows[r];
        if (g->route)
            continue;
        plain++;
        lwq_topk_torch(g->v, g->n, g->k, g->sorted, q, out);
        for (int s = 0; s < g->k; s++)
            cr_expect_eq(out[s], g->idx[s], "row %d (n %d k %d sorted %d) slot %d: %d, torch %d", r, g->n, g->k,
                         g->sorted, s, out[s], g->idx[s]);
    }
    cr_assert_gt(plain, 600, "only %d plain rows", plain);
}

/* The goldens tell the rules apart: the lower-index rule misses torch's choice on many rows, so
 * the test above would fail with it. */
Test(topk_torch, the_lower_index_rule_differs_from_torch)
{
    load();
    int differ = 0;
    int32_t out[MAXN];
    for (int r = 0; r < g_count; r++) {
        const golden_row *g = &g_rows[r];
        if (g->route || !g->sorted)
            continue;
        lower_index_rule(g->v, g->n, g->k, out);
        differ += memcmp(out, g->idx, (size_t)g->k * sizeof *out) != 0;
    }
    cr_assert_gt(differ, 50, "the lower-index rule differs from torch on only %d rows", differ);
}

/* lwq_backend_moe_route (CPU, softmax then top-k) on the router rows, all rows of one E in one
 * call, with 1 and 2 threads: torch's experts every time. */
static void route_rows_with(int threads)
{
    load();
    lwq_backend be;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&be, threads, &e), 0, "%s", e.msg);
    int checked = 0;
    for (int r = 0; r < g_count;) {
        const golden_row *g0 = &g_rows[r];
        if (!g0->route) {
            r++;
            continue;
        }
        int m = 0;
        while (r + m < g_count && g_rows[r + m].route && g_rows[r + m].n == g0->n && g_rows[r + m].k == g0->k)
            m++;
        const int E = g0->n, k = g0->k;
        float *lg = malloc((size_t)m * E * sizeof *lg), *w = malloc((size_t)m * k * sizeof *w);
        int32_t *idx = malloc((size_t)m * k * sizeof *idx);
        cr_assert(lg && w && idx);
        for (int i = 0; i < m; i++)
            memcpy(lg + (size_t)i * E, g_rows[r + i].v, (size_t)E * sizeof *lg);
        int64_t sl[2] = {m, E}, sk[2] = {m, k};
        lwq_tensor L = lwq_tensor_view(lg, LWQ_F32, 2, sl), I = lwq_tensor_view(idx, LWQ_I32, 2, sk),
                   W = lwq_tensor_view(w, LWQ_F32, 2, sk);
        cr_assert_eq(lwq_backend_moe_route(&be, &L, k, LWQ_ROUTE_SOFTMAX_TOPK_NORM, LWQ_F32, &I, &W, &e), 0, "%s",
                     e.msg);
        for (int i = 0; i < m; i++)
            for (int s = 0; s < k; s++)
                cr_expect_eq(idx[i * k + s], g_rows[r + i].idx[s], "%d threads, router row %d (E %d k %d) slot %d: %d, torch %d",
                             threads, r + i, E, k, s, idx[i * k + s], g_rows[r + i].idx[s]);
        checked += m;
        free(lg);
        free(w);
        free(idx);
        r += m;
    }
    cr_assert_gt(checked, 40, "only %d router rows", checked);
    lwq_backend_destroy(&be);
}

Test(topk_torch, cpu_router_picks_torchs_experts_on_one_thread) { route_rows_with(1); }

Test(topk_torch, cpu_router_picks_torchs_experts_on_two_threads) { route_rows_with(2); }
