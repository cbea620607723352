#include "engine/quant/stats.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/gptq.h"
#include "kernels/quant.h"

static int cmp_linear(const void *a, const void *b, void *plan)
{
    const lwq_arch_layer *p = plan;
    return strcmp(p->linears[*(const int *)a].name, p->linears[*(const int *)b].name);
}

int lwq_stats_find(const lwq_layer_stats *s, const char *module)
{
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(s->plan->linears[s->by_name[mid]].name, module);
        if (c == 0)
            return s->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Host copy of a device tensor (or the tensor itself on the CPU backend). */
static int host_view(lwq_layer_stats *s, const lwq_tensor *x, const void **out, lwq_error *e)
{
    if (x->device == LWQ_DEV_CPU) {
        *out = x->data;
        return 0;
    }
    size_t bytes = (size_t)lwq_tensor_numel(x) * lwq_dtype_size(x->dtype);
    if (bytes > s->scratch_bytes) {
        void *p = realloc(s->scratch, bytes);
        if (!p)
            return lwq_errf(e, LWQ_ENOMEM, "stats: cannot allocate %zu bytes of staging", bytes);
        s->scratch = p;
        s->scratch_bytes = bytes;
    }
    int rc = lwq_backend_download(s->be, s->scratch, x->data, bytes, e);
    if (rc)
        return rc;
    *out = s->scratch;
    return 0;
}

static int64_t count_valid(lwq_layer_stats *s, const lwq_tensor *valid, int64_t rows, uint8_t **host, lwq_error *e)
{
    *host = NULL;
    if (!valid || s->include_padding)
        return rows;
    uint8_t *h = malloc((size_t)rows);
    if (!h)
        return lwq_errf(e, LWQ_ENOMEM, "stats: out of memory");
    int rc = valid->device == LWQ_DEV_CPU ? (memcpy(h, valid->data, (size_t)rows), 0)
                                          : lwq_backend_download(s->be, h, valid->data, (size_t)rows, e);
    if (rc) {
        free(h);
        return rc;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < rows; i++)
        n += h[i] != 0;
    *host = h;
    return n;
}

/* ---- the per-sequence partials ---------------------------------------------------------------- */

int64_t lwq_stats_hfix_len(const lwq_layer_stats *s, int i)
{
    if (!s->hfix || !s->hfix[i] || s->hown[i] != i)
        return 0;
    int64_t in = s->plan->linears[i].in_features;
    return s->hkind[i] == LWQ_STATS_H_FULL ? in * (in + 1) / 2 : in / 16 * 256;
}

/* The sequence a batch row belongs to, as a key unique within the layer's observations. */
static int64_t seq_key(const lwq_layer_stats *s, int64_t row)
{
    return s->batch_serial * ((int64_t)1 << 24) + row / s->cur_batch->seq;
}

typedef struct fold_ctx {
    lwq_layer_stats *s;
    int i;
    int64_t in;
    _Atomic int64_t bad; /* first entry out of the grid's range, INT64_MAX: none */
} fold_ctx;

/* Rows [r0, r1) of a full Hessian's partial (its upper triangle), or blocks [r0, r1) of a block
 * Hessian: added to the grid and zeroed.  Entries are independent, so the split over threads
 * cannot change a bit. */
static void fold_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    fold_ctx *c = ctx;
    const lwq_layer_stats *s = c->s;
    double *h = s->hsum[c->i];
    lwq_fix *acc = s->hfix[c->i];
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        int64_t off, n;
        double *p;
        if (s->hkind[c->i] == LWQ_STATS_H_FULL) {
            off = r * c->in - r * (r - 1) / 2; /* packed row r starts after rows 0..r-1 */
            n = c->in - r;
            p = h + r * c->in + r;
        } else {
            off = r * 256;
            n = 256;
            p = h + off;
        }
        int64_t bad = lwq_fix_add(acc + off, p, n);
        if (bad >= 0) {
            int64_t at = off + bad, cur = atomic_load(&c->bad);
            while (at < cur && !atomic_compare_exchange_weak(&c->bad, &cur, at))
                ;
            return;
        }
        memset(p, 0, (size_t)n * sizeof *p);
    }
}

static int fold(lwq_layer_stats *s, int i, const char *module, lwq_error *e)
{
    if (s->hopen[i] == -1)
        return 0;
    s->hopen[i] = -1;
    int64_t in = s->plan->linears[i].in_features;
    fold_ctx c = {s, i, in, INT64_MAX};
    int full = s->hkind[i] == LWQ_STATS_H_FULL;
    lwq_parallel_for(full ? in : in / 16, full ? 64 : 16, fold_rows, &c);
    int64_t bad = atomic_load(&c.bad);
    if (bad != INT64_MAX)
        return lwq_errf(e, LWQ_ENUMERIC, "the Hessian of %s leaves the fixed-point grid's range (|sum| >= 2^%d) at "
                        "entry %lld: its inputs are too large or not finite", module ? module : s->plan->linears[i].name,
                        120 - LWQ_FIX_FRAC, (long long)bad);
    return 0;
}

static int on_batch(void *ctx, int layer, const lwq_batch *b, lwq_error *e)
{
    lwq_layer_stats *s = ctx;
    (void)layer;
    s->cur_batch = b;
    s->batch_serial++; /* every sequence of a new batch is a new key: nothing to close yet */
    (void)e;
    return 0;
}

int lwq_stats_flush(lwq_layer_stats *s, const uint8_t *only, lwq_error *e)
{
    for (int i = 0; i < s->n; i++)
        if (s->hfix && s->hfix[i] && (!only || only[i])) {
            int rc = fold(s, i, NULL, e);
            if (rc)
                return rc;
        }
    return 0;
}

static int finalize_one(lwq_layer_stats *s, int i, lwq_error *e)
{
    if (s->hdone[i])
        return 0;
    int o = s->hown[i];
    if (o != i) { /* a shared buffer: finished with its owner */
        int rc = finalize_one(s, o, e);
        s->hdone[i] = s->hdone[o];
        return rc;
    }
    if (s->hopen[i] != -1)
        return lwq_errf(e, LWQ_ESTATE, "%s: Hessian finalized with a sequence still open", s->plan->linears[i].name);
    int64_t in = s->plan->linears[i].in_features;
    const lwq_fix *acc = s->hfix[i];
    double *h = s->hsum[i];
    if (s->hkind[i] == LWQ_STATS_H_FULL) {
        for (int64_t r = 0, k = 0; r < in; r++)
            for (int64_t c = r; c < in; c++)
                h[r * in + c] = lwq_fix_to_double(acc[k++]);
    } else {
        for (int64_t k = 0; k < in / 16 * 256; k++)
            h[k] = lwq_fix_to_double(acc[k]);
    }
    s->hdone[i] = 1;
    return 0;
}

int lwq_stats_finalize(lwq_layer_stats *s, const uint8_t *only, lwq_error *e)
{
    for (int i = 0; i < s->n; i++)
        if (s->hsum[i] && (!only || only[i])) {
            int rc = finalize_one(s, i, e);
            if (rc)
                return rc;
        }
    return 0;
}

int lwq_stats_finish(lwq_layer_stats *s, const uint8_t *only, lwq_error *e)
{
    int rc = lwq_stats_flush(s, only, e);
    return rc ? rc : lwq_stats_finalize(s, only, e);
}

static int on_linear(void *ctx, int layer, const char *module, const lwq_tensor *x, const lwq_tensor *valid,
                     const int32_t *tok, lwq_error *e)
{
    lwq_layer_stats *s = ctx;
    char full[512];
    if (s->names) {
        lwq_names_full(s->names, module, full, sizeof full);
        module = full;
    }
    int i = lwq_stats_find(s, module);
    if (i < 0) /* an input the plan does not quantize (e.g. a router): nothing to keep */
        return 0;
    int64_t rows = x->shape[0], cols = x->shape[1];
    if (s->hsum[i] && cols != s->plan->linears[i].in_features) /* the sums are sized by the plan */
        return lwq_errf(e, LWQ_EINVAL, "layer %d: input of %s is %lld wide, the plan says %lld in-features", layer,
                        module, (long long)cols, (long long)s->plan->linears[i].in_features);
    uint8_t *vh;
    int64_t nvalid = count_valid(s, valid, rows, &vh, e);
    if (nvalid < 0)
        return (int)nvalid;
    int rc = 0;
    if (nvalid > 0) {
        float a = 0;
        rc = lwq_backend_amax(s->be, x, s->include_padding ? NULL : valid, &a, e);
        if (rc == 0 && !isfinite(a))
            rc = lwq_errf(e, LWQ_ENUMERIC, "layer %d: input of %s holds NaN or Inf", layer, module);
        if (rc == 0 && a > s->in_amax[i])
            s->in_amax[i] = a;
    }
    /* a fused-group member shares its owner's full sums: the same input, observed once */
    int shared = s->hsum[i] && s->hown[i] != i;
    if (rc == 0 && shared && nvalid > 0)
        s->htokens[i] += nvalid;
    if (rc == 0 && s->hsum[i] && !shared && nvalid > 0) {
        const lwq_batch *b = s->cur_batch;
        if (b && !tok && rows != b->batch * b->seq)
            rc = lwq_errf(e, LWQ_EINVAL, "layer %d: input of %s has %lld rows, its batch %lld", layer, module,
                          (long long)rows, (long long)(b->batch * b->seq));
        if (rc == 0 && s->hdone[i])
            rc = lwq_errf(e, LWQ_ESTATE, "layer %d: %s observed after its statistics were finished", layer, module);
        const void *hx = NULL;
        if (rc == 0)
            rc = host_view(s, x, &hx, e);
        size_t rowb = (size_t)cols * lwq_dtype_size(x->dtype);
        /* runs of consecutive real rows of one sequence, in row order: each sequence's rows
         * summed in token order into the partial, which is added to the grid when the sequence
         * ends (a batch without geometry counts each call as one sequence) */
        int64_t call_key = b && b->seq > 0 ? 0 : -(++s->call_serial) - 1;
        for (int64_t r = 0; rc == 0 && r < rows;) {
            if (vh && !vh[r]) {
                r++;
                continue;
            }
            int64_t key = b && b->seq > 0 ? seq_key(s, tok ? tok[r] : r) : call_key, r1 = r;
            while (r1 < rows && (!vh || vh[r1]) && (!b || b->seq <= 0 || seq_key(s, tok ? tok[r1] : r1) == key))
                r1++;
            if (s->hopen[i] != key && (rc = fold(s, i, module, e)) != 0)
                break;
            s->hopen[i] = key;
            const void *xr = (const char *)hx + (size_t)r * rowb;
            rc = s->hkind[i] == LWQ_STATS_H_FULL
                     ? lwq_gptq_hessian_accumulate(xr, x->dtype, r1 - r, cols, s->hsum[i], module, e)
                     : lwq_quant_hessian_accumulate(xr, x->dtype, r1 - r, cols, s->hsum[i], module, e);
            r = r1;
        }
        s->htokens[i] += nvalid;
    }
    s->in_rows[i] += nvalid;
    free(vh);
    return rc;
}

static int on_kv(void *ctx, int layer, const lwq_tensor *k, const lwq_tensor *v, const lwq_tensor *valid, lwq_error *e)
{
    lwq_layer_stats *s = ctx;
    const lwq_tensor *use = s->include_padding ? NULL : valid;
    float ka = 0, va = 0;
    int rc = lwq_backend_amax(s->be, k, use, &ka, e);
    if (rc == 0)
        rc = lwq_backend_amax(s->be, v, use, &va, e);
    if (rc)
        return rc;
    if (!isfinite(ka) || !isfinite(va))
        return lwq_errf(e, LWQ_ENUMERIC, "layer %d: k or v holds NaN or Inf", layer);
    if (ka > s->k_amax)
        s->k_amax = ka;
    if (va > s->v_amax)
        s->v_amax = va;
    s->kv_rows += k->shape[0];
    return 0;
}

static int on_counts(void *ctx, int layer, const int64_t *counts, int n, lwq_error *e)
{
    lwq_layer_stats *s = ctx;
    if (n != s->n_experts)
        return lwq_errf(e, LWQ_EINVAL, "layer %d: forward reports %d experts, plan has %d", layer, n, s->n_experts);
    for (int i = 0; i < n; i++)
        s->expert_tokens[i] += counts[i];
    return 0;
}

void lwq_stats_free(lwq_layer_stats *s)
{
    if (!s)
        return;
    if (s->hsum)
        for (int i = 0; i < s->n; i++)
            if (!s->hown || s->hown[i] == i) {
                free(s->hsum[i]);
                if (s->hfix)
                    free(s->hfix[i]);
            }
    free(s->hsum);
    free(s->hfix);
    free(s->hopen);
    free(s->hdone);
    free(s->hkind);
    free(s->hown);
    free(s->htokens);
    free(s->by_name);
    free(s->in_amax);
    free(s->in_rows);
    free(s->expert_tokens);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}

int lwq_stats_init(lwq_layer_stats *s, const lwq_arch_layer *plan, const lwq_backend *be, int n_experts,
                   int include_padding, int all_experts, const uint8_t *want_hessian, const lwq_names *names, lwq_error *e)
{
    memset(s, 0, sizeof *s);
    s->names = names;
    s->plan = plan;
    s->be = be;
    s->include_padding = include_padding;
    s->n = plan->nlinears;
    s->n_experts = n_experts;
    size_t n = (size_t)(s->n ? s->n : 1);
    s->by_name = malloc(n * sizeof *s->by_name);
    s->in_amax = calloc(n, sizeof *s->in_amax);
    s->in_rows = calloc(n, sizeof *s->in_rows);
    s->hsum = calloc(n, sizeof *s->hsum);
    s->htokens = calloc(n, sizeof *s->htokens);
    s->hkind = calloc(n, sizeof *s->hkind);
    s->hown = calloc(n, sizeof *s->hown);
    s->expert_tokens = calloc((size_t)(n_experts > 0 ? n_experts : 1), sizeof *s->expert_tokens);
    s->hfix = calloc(n, sizeof *s->hfix);
    s->hopen = malloc(n * sizeof *s->hopen);
    s->hdone = calloc(n, 1);
    if (!s->by_name || !s->in_amax || !s->in_rows || !s->hsum || !s->htokens || !s->hkind || !s->hown ||
        !s->expert_tokens || !s->hfix || !s->hopen || !s->hdone) {
        lwq_stats_free(s);
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: cannot allocate statistics", plan->layer);
    }
    for (int i = 0; i < s->n; i++)
        s->by_name[i] = i;
    qsort_r(s->by_name, (size_t)s->n, sizeof *s->by_name, cmp_linear, (void *)plan);
    for (int i = 0; i < s->n; i++) {
        s->hown[i] = i;
        s->hopen[i] = -1;
    }
    for (int i = 0; i < s->n; i++) {
        if (!want_hessian || !want_hessian[i])
            continue;
        const lwq_arch_linear *l = &plan->linears[i];
        int64_t in = l->in_features;
        s->hkind[i] = want_hessian[i] == LWQ_STATS_H_FULL ? LWQ_STATS_H_FULL : LWQ_STATS_H_BLOCK;
        if (s->hkind[i] == LWQ_STATS_H_FULL) {
            int own = -1;
            for (int j = 0; j < i && own < 0 && l->group >= 0; j++)
                if (plan->linears[j].group == l->group && s->hkind[j] == LWQ_STATS_H_FULL &&
                    plan->linears[j].in_features == in && s->hown[j] == j)
                    own = j;
            if (own >= 0) {
                s->hown[i] = own;
                s->hsum[i] = s->hsum[own];
                continue;
            }
            if (in <= 0 || (uint64_t)in > (uint64_t)1 << 17) {
                lwq_stats_free(s);
                return lwq_errf(e, LWQ_EINVAL, "%s: in-features %lld out of range for a GPTQ Hessian", l->name,
                                (long long)in);
            }
            s->hsum[i] = calloc((size_t)in * (size_t)in, sizeof(double));
            s->hfix[i] = calloc((size_t)in * (size_t)(in + 1) / 2, sizeof(lwq_fix));
            if (!s->hsum[i] || !s->hfix[i]) {
                lwq_stats_free(s);
                return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate the %.2f GB GPTQ Hessian", l->name,
                                (double)in * (double)in * 16 / 1e9);
            }
            continue;
        }
        if (in % 16) {
            lwq_stats_free(s);
            return lwq_errf(e, LWQ_EINVAL, "%s: in-features %lld not a multiple of 16", plan->linears[i].name,
                            (long long)in);
        }
        s->hsum[i] = calloc((size_t)(in / 16) * 256, sizeof(double));
        s->hfix[i] = calloc((size_t)(in / 16) * 256, sizeof(lwq_fix));
        if (!s->hsum[i] || !s->hfix[i]) {
            lwq_stats_free(s);
            return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate Hessian statistics", plan->linears[i].name);
        }
    }
    s->obs.ctx = s;
    s->obs.linear_input = on_linear;
    s->obs.begin_batch = on_batch;
    s->obs.kv = on_kv;
    s->obs.expert_counts = on_counts;
    s->obs.all_experts = all_experts;
    return 0;
}
