/* engine/eval/emul/eval_bset.c — batches of token sequences and their boundary slices (eval_bset.h). */
#include "engine/eval/emul/eval_bset.h"

#include <stdlib.h>
#include <string.h>

void lwq_eval_bset_free(lwq_eval_bset *s, const lwq_backend *be)
{
    for (int b = 0; b < s->nb; b++) {
        if (s->batches)
            lwq_batch_free(&s->batches[b], be);
        if (s->tokens)
            free(s->tokens[b]);
    }
    free(s->batches);
    free(s->tokens);
    free(s->rows);
    free(s->boff);
    memset(s, 0, sizeof *s);
}

int lwq_eval_bset_build(lwq_eval_bset *s, const lwq_calib_set *c, int B, const lwq_backend *be, int64_t hidden,
                      size_t esz, const char *what, lwq_error *e)
{
    memset(s, 0, sizeof *s);
    if (!c || c->n <= 0)
        return lwq_errf(e, LWQ_EINVAL, "the %s set is empty", what);
    s->nb = (c->n + B - 1) / B;
    s->batches = calloc((size_t)s->nb, sizeof *s->batches);
    s->tokens = calloc((size_t)s->nb, sizeof *s->tokens);
    s->rows = calloc((size_t)s->nb, sizeof *s->rows);
    s->boff = calloc((size_t)s->nb + 1, sizeof *s->boff);
    if (!s->batches || !s->tokens || !s->rows || !s->boff)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory for %d %s batches", s->nb, what);
    int64_t lens[4096];
    for (int b = 0; b < s->nb; b++) {
        int s0 = b * B, ns = c->n - s0 < B ? c->n - s0 : B;
        int64_t seq = 0;
        for (int i = 0; i < ns; i++) {
            if (c->len[s0 + i] <= 0)
                return lwq_errf(e, LWQ_EINVAL, "%s sample %d is empty", what, s0 + i);
            lens[i] = c->len[s0 + i];
            seq = lens[i] > seq ? lens[i] : seq;
        }
        s->rows[b] = ns * seq;
        if (!(s->tokens[b] = malloc((size_t)s->rows[b] * sizeof(int32_t))))
            return lwq_errf(e, LWQ_ENOMEM, "out of memory for %s batch %d", what, b);
        for (int i = 0; i < ns; i++) {
            int64_t pad = seq - lens[i];
            for (int64_t t = 0; t < seq; t++)
                s->tokens[b][i * seq + t] = t < pad ? c->pad_id : c->ids[s0 + i][t - pad];
            s->real_tokens += lens[i];
        }
        int rc = lwq_batch_init(&s->batches[b], be, ns, seq, lens, e);
        if (rc)
            return rc;
        s->boff[b + 1] = s->boff[b] + (uint64_t)s->rows[b] * (uint64_t)hidden * esz;
        s->max_rows = s->rows[b] > s->max_rows ? s->rows[b] : s->max_rows;
    }
    return 0;
}

lwq_tensor lwq_eval_bset_view(const lwq_eval_bset *s, int b, const lwq_tensor *work)
{
    lwq_tensor t = *work;
    t.shape[0] = s->rows[b];
    return t;
}

int lwq_eval_bset_load(const lwq_eval_bset *s, int b, const lwq_backend *be, const unsigned char *bnd,
                       lwq_tensor *work, lwq_error *e)
{
    size_t n = (size_t)(s->boff[b + 1] - s->boff[b]);
    if (be->ops->device == LWQ_DEV_CPU) {
        memcpy(work->data, bnd + s->boff[b], n);
        return 0;
    }
    return lwq_backend_upload(be, work->data, bnd + s->boff[b], n, e);
}

int lwq_eval_bset_store(const lwq_eval_bset *s, int b, const lwq_backend *be, const lwq_tensor *work,
                        unsigned char *bnd, lwq_error *e)
{
    size_t n = (size_t)(s->boff[b + 1] - s->boff[b]);
    if (be->ops->device == LWQ_DEV_CPU) {
        memcpy(bnd + s->boff[b], work->data, n);
        return 0;
    }
    return lwq_backend_download(be, bnd + s->boff[b], work->data, n, e);
}
