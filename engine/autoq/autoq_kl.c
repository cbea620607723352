/* engine/autoq/autoq_kl.c — the kl score: each (layer, group, format)'s replay output carried
 * through the later layers in the source dtype, then the model's head; KL(P_src || P_q) per real
 * scored token, averaged (engine/autoq/autoq_pass1.h).
 *
 * A stream is the scored rows' hidden states after its origin layer; stream i of layer L comes
 * after those of the layers before L, its groups in order and within a group NVFP4 before FP8.
 * Logits are f32 and everything after them double (engine/eval/eval_kl.h), in chunks of
 * LWQ_AQ_HEAD_ROWS rows so memory holds two chunks of rows x vocab.  Cost: one layer forward of
 * the scored rows per stream and later layer, which is why this score is for small models. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/autoq/autoq_pass1.h"
#include "engine/eval/eval_kl.h"
#include "engine/source/layersrc.h"

#define LWQ_AQ_HEAD_ROWS 64

int lwq_aq_streams_grow(lwq_aq_ctx *c, int n, lwq_error *e)
{
    unsigned char **p = realloc(c->stream, (size_t)(n ? n : 1) * sizeof *p);
    if (!p)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    c->stream = p;
    for (; c->nstreams < n; c->nstreams++)
        if (!(c->stream[c->nstreams] = malloc(c->score_bytes ? c->score_bytes : 1)))
            return lwq_errf(e, LWQ_ENOMEM, "cannot allocate %.2f GB for kl stream %d", (double)c->score_bytes / 1e9,
                            c->nstreams);
    return 0;
}

int lwq_aq_streams_layer(lwq_aq_ctx *c, int L, const lwq_weights *w, lwq_error *e)
{
    int rc = 0;
    for (int i = 0; i < c->nstreams && rc == 0; i++)
        for (int b = 0; b < c->sc.nb && rc == 0; b++) {
            lwq_tensor h = lwq_eval_bset_view(&c->sc, b, &c->work);
            if ((rc = lwq_eval_bset_load(&c->sc, b, &c->be, c->stream[i], &c->work, e)) == 0 &&
                (rc = lwq_model_layer_forward(&c->model, L, w, &c->sc.batches[b], &h, NULL, e)) == 0)
                rc = lwq_eval_bset_store(&c->sc, b, &c->be, &c->work, c->stream[i], e);
        }
    return rc;
}

int lwq_aq_head_rows(lwq_aq_ctx *c, const lwq_weights *w, const unsigned char *bnd, int b, int64_t r0, int64_t n,
                     lwq_tensor *lg, float *host, lwq_error *e)
{
    size_t bytes = (size_t)(n * c->hidden) * c->esz;
    const unsigned char *src = bnd + c->sc.boff[b] + (size_t)r0 * (size_t)c->hidden * c->esz;
    int rc = c->be.ops->device == LWQ_DEV_CPU ? (memcpy(c->work.data, src, bytes), 0)
                                               : lwq_backend_upload(&c->be, c->work.data, src, bytes, e);
    if (rc)
        return rc;
    lwq_tensor h = c->work, z = *lg;
    h.shape[0] = n;
    z.shape[0] = n;
    if ((rc = lwq_model_head(&c->model, w, &h, &z, e)) != 0)
        return rc;
    size_t lb = (size_t)(n * c->ck.cfg.vocab_size) * sizeof(float);
    if (c->be.ops->device == LWQ_DEV_CPU) {
        memcpy(host, z.data, lb);
        return 0;
    }
    return lwq_backend_download(&c->be, host, z.data, lb, e);
}

int lwq_aq_streams_head(lwq_aq_ctx *c, lwq_error *e)
{
    const int64_t V = c->ck.cfg.vocab_size;
    lwq_tlist tail = {0};
    lwq_layer_weights tw;
    float *zs = malloc((size_t)(LWQ_AQ_HEAD_ROWS * V) * sizeof(float));
    float *zq = malloc((size_t)(LWQ_AQ_HEAD_ROWS * V) * sizeof(float));
    double *kl = calloc((size_t)(c->nstreams ? c->nstreams : 1), sizeof *kl);
    lwq_logit_stat *ss = malloc(LWQ_AQ_HEAD_ROWS * sizeof *ss);
    lwq_tensor lg = {0};
    int rc = zs && zq && kl && ss ? 0 : lwq_errf(e, LWQ_ENOMEM, "kl head: out of memory");
    int64_t shape[2] = {LWQ_AQ_HEAD_ROWS, V}, tokens = 0;
    if (rc == 0)
        rc = lwq_backend_tensor_alloc(&c->be, LWQ_F32, 2, shape, &lg, e);
    if (rc == 0)
        rc = lwq_layersrc_read(&c->ck, -1, &tail, e);
    lwq_layer_weights_init(&tw, &c->be, &tail, NULL, &c->ck.cfg.names);
    lwq_emul_reset(&c->em);
    const unsigned char *src = c->bnd[c->cur]; /* the source after the last layer */
    for (int b = 0; b < c->sc.nb && rc == 0; b++) {
        const lwq_batch *bt = &c->sc.batches[b];
        for (int64_t r0 = 0; r0 < c->sc.rows[b] && rc == 0; r0 += LWQ_AQ_HEAD_ROWS) {
            int64_t n = c->sc.rows[b] - r0 < LWQ_AQ_HEAD_ROWS ? c->sc.rows[b] - r0 : LWQ_AQ_HEAD_ROWS;
            int any = 0;
            for (int64_t i = 0; i < n; i++)
                any |= bt->valid_host[r0 + i];
            if (!any)
                continue;
            if ((rc = lwq_aq_head_rows(c, &tw.w, src, b, r0, n, &lg, zs, e)) != 0)
                break;
            for (int64_t i = 0; i < n; i++)
                if (bt->valid_host[r0 + i]) {
                    ss[i] = lwq_eval_logit_stat(zs + i * V, V);
                    tokens++;
                }
            for (int s = 0; s < c->nstreams && rc == 0; s++) {
                if ((rc = lwq_aq_head_rows(c, &tw.w, c->stream[s], b, r0, n, &lg, zq, e)) != 0)
                    break;
                for (int64_t i = 0; i < n; i++)
                    if (bt->valid_host[r0 + i])
                        kl[s] += lwq_eval_kl_row(zs + i * V, ss[i], zq + i * V, lwq_eval_logit_stat(zq + i * V, V), V);
            }
        }
    }
    /* stream order: layers, their groups, NVFP4, FP8 then W4A16 */
    for (int L = 0, s = 0; rc == 0 && L < c->N; L++)
        for (int k = 0; k < c->s->rec[L].ngroups; k++)
            for (int f = 1; f < LWQ_AQ_FORMATS; f++) {
                lwq_aq_gscore *g = &c->s->rec[L].g[k];
                if (!g->allowed[f])
                    continue;
                /* a KL is >= 0; f32 logits of nearly equal models can give -1e-17 */
                g->kl[f] = tokens ? fmax(0.0, kl[s] / (double)tokens) : 0;
                s++;
            }
    lwq_layer_weights_free(&tw);
    lwq_tlist_free(&tail);
    if (lg.data)
        lwq_backend_tensor_free(&c->be, &lg);
    free(zs);
    free(zq);
    free(kl);
    free(ss);
    return rc;
}
