/* engine/eval/eval_head.c — what `lwq eval` measures: hidden-state differences after each layer, and
 * from the final norm + lm_head of every stream, per next-token prediction, KL(P_src || P_q),
 * top-1 agreement and both perplexities (engine/eval/eval.h).
 *
 * The head runs on chunks of LWQ_EVAL_HEAD_ROWS rows so that the logits in memory are two chunks
 * (source and one candidate) of rows x vocab f32, however long the eval set.  Logits are f32 (the
 * lm_head GEMM's f32 accumulation, not rounded to the activation dtype), and every softmax, log
 * and sum runs in double, so identical logits give a KL of exactly 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eval/eval_kl.h"
#include "engine/eval/eval_run.h"
#include "engine/source/layersrc.h"

#define LWQ_EVAL_HEAD_ROWS 64

void lwq_eval_layer_diff(const lwq_eval_ctx *v, const unsigned char *a, const unsigned char *b, double *rel_mse,
                         double *max_abs)
{
    double num = 0, den = 0, mx = 0;
    const int64_t D = v->hidden;
    for (int bi = 0; bi < v->data.nb; bi++) {
        const lwq_batch *bt = &v->data.batches[bi];
        const void *pa = a + v->data.boff[bi], *pb = b + v->data.boff[bi];
        for (int64_t r = 0; r < v->data.rows[bi]; r++) {
            if (!bt->valid_host[r])
                continue;
            for (int64_t j = 0; j < D; j++) {
                double h = lwq_load_f(pa, v->act, (size_t)(r * D + j)), q = lwq_load_f(pb, v->act, (size_t)(r * D + j));
                double d = q - h;
                num += d * d;
                den += h * h;
                mx = fabs(d) > mx ? fabs(d) : mx;
            }
        }
    }
    *rel_mse = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    *max_abs = mx;
}

/* The model's final norm + lm_head on rows [r0, r0 + n) of batch b of stream s -> host f32 logits. */
static int head_rows(lwq_eval_ctx *v, lwq_eval_stream *s, const lwq_weights *w, int b, int64_t r0, int64_t n,
                     lwq_tensor *dev_logits, float *host, lwq_error *e)
{
    size_t esz = lwq_dtype_size(v->act), bytes = (size_t)(n * v->hidden) * esz;
    const unsigned char *src = s->bnd + v->data.boff[b] + (size_t)r0 * (size_t)v->hidden * esz;
    int rc = v->be.ops->device == LWQ_DEV_CPU ? (memcpy(v->work.data, src, bytes), 0)
                                              : lwq_backend_upload(&v->be, v->work.data, src, bytes, e);
    if (rc)
        return rc;
    lwq_tensor h = v->work, lg = *dev_logits;
    h.shape[0] = n;
    lg.shape[0] = n;
    if ((rc = lwq_model_head(&s->model, w, &h, &lg, e)) != 0)
        return rc;
    size_t lb = (size_t)(n * v->ck.cfg.vocab_size) * sizeof(float);
    if (v->be.ops->device == LWQ_DEV_CPU) {
        memcpy(host, lg.data, lb);
        return 0;
    }
    return lwq_backend_download(&v->be, host, lg.data, lb, e);
}

lwq_logit_stat lwq_eval_logit_stat(const float *z, int64_t V)
{
    lwq_logit_stat s = {0, 0};
    double m = z[0];
    for (int64_t i = 1; i < V; i++)
        if (z[i] > m) {
            m = z[i];
            s.argmax = i;
        }
    double sum = 0;
    for (int64_t i = 0; i < V; i++)
        sum += exp((double)z[i] - m);
    s.lse = m + log(sum);
    return s;
}

double lwq_eval_kl_row(const float *zs, lwq_logit_stat ss, const float *zq, lwq_logit_stat sq, int64_t V)
{
    double k = 0;
    for (int64_t j = 0; j < V; j++) {
        double lp = (double)zs[j] - ss.lse, lq = (double)zq[j] - sq.lse;
        k += exp(lp) * (lp - lq);
    }
    return k;
}

int lwq_eval_head(lwq_eval_ctx *v, lwq_error *e)
{
    const lwq_eval_opts *o = v->o;
    const int64_t V = v->ck.cfg.vocab_size;
    lwq_tlist src_tail = {0}, *qtails = calloc((size_t)o->ncand, sizeof *qtails);
    lwq_layer_weights src_w, *qw = calloc((size_t)o->ncand, sizeof *qw);
    float *zs = malloc((size_t)(LWQ_EVAL_HEAD_ROWS * V) * sizeof(float));
    float *zq = malloc((size_t)(LWQ_EVAL_HEAD_ROWS * V) * sizeof(float));
    double *kl = calloc((size_t)o->ncand, sizeof *kl), *nll = calloc((size_t)o->ncand, sizeof *nll);
    int64_t *agree = calloc((size_t)o->ncand, sizeof *agree);
    lwq_logit_stat *ss = malloc(LWQ_EVAL_HEAD_ROWS * sizeof *ss);
    lwq_tensor lg = {0};
    int rc = qtails && qw && zs && zq && kl && nll && agree && ss ? 0 : lwq_errf(e, LWQ_ENOMEM, "head: out of memory");
    int64_t shape[2] = {LWQ_EVAL_HEAD_ROWS, V};
    if (rc == 0)
        rc = lwq_backend_tensor_alloc(&v->be, LWQ_F32, 2, shape, &lg, e);
    if (rc == 0)
        rc = lwq_layersrc_read(&v->ck, -1, &src_tail, e);
    lwq_layer_weights_init(&src_w, &v->be, &src_tail, NULL, &v->ck.cfg.names);
    for (int c = 0; c < o->ncand && qw; c++) {
        if (rc == 0 && !o->cand[c].recipe)
            rc = lwq_qdir_read_layer(&v->cand[c].qd, -1, &qtails[c], e);
        lwq_layer_weights_init(&qw[c], &v->be, o->cand[c].recipe ? &src_tail : &qtails[c], NULL,
                               &v->ck.cfg.names);
        lwq_emul_reset(&v->cand[c].em); /* no quantized linear in the head */
    }
    double nll_src = 0;
    int64_t tokens = 0;
    for (int b = 0; b < v->data.nb && rc == 0; b++) {
        const lwq_batch *bt = &v->data.batches[b];
        for (int64_t r0 = 0; r0 < v->data.rows[b] && rc == 0; r0 += LWQ_EVAL_HEAD_ROWS) {
            int64_t n = v->data.rows[b] - r0 < LWQ_EVAL_HEAD_ROWS ? v->data.rows[b] - r0 : LWQ_EVAL_HEAD_ROWS;
            /* rows that predict a next token: real, and not the last position of their sequence */
            int any = 0;
            for (int64_t i = 0; i < n; i++)
                any |= bt->valid_host[r0 + i] && (r0 + i + 1) % bt->seq != 0;
            if (!any)
                continue;
            if ((rc = head_rows(v, &v->src, &src_w.w, b, r0, n, &lg, zs, e)) != 0)
                break;
            for (int64_t i = 0; i < n; i++) {
                int64_t r = r0 + i;
                if (!bt->valid_host[r] || (r + 1) % bt->seq == 0)
                    continue;
                ss[i] = lwq_eval_logit_stat(zs + i * V, V);
                nll_src += ss[i].lse - zs[i * V + v->data.tokens[b][r + 1]];
                tokens++;
            }
            for (int c = 0; c < o->ncand && rc == 0; c++) {
                if ((rc = head_rows(v, &v->cand[c], &qw[c].w, b, r0, n, &lg, zq, e)) != 0)
                    break;
                for (int64_t i = 0; i < n; i++) {
                    int64_t r = r0 + i;
                    if (!bt->valid_host[r] || (r + 1) % bt->seq == 0)
                        continue;
                    const float *a = zs + i * V, *q = zq + i * V;
                    lwq_logit_stat sq = lwq_eval_logit_stat(q, V);
                    kl[c] += lwq_eval_kl_row(a, ss[i], q, sq, V);
                    nll[c] += sq.lse - q[v->data.tokens[b][r + 1]];
                    agree[c] += sq.argmax == ss[i].argmax;
                }
            }
        }
    }
    if (rc == 0 && tokens == 0)
        rc = lwq_errf(e, LWQ_EINVAL, "the eval set has no next-token prediction (every sample is one token long)");
    if (rc == 0) {
        lwq_eval_result *res = v->res;
        res->tokens = tokens;
        res->nll_src = nll_src / (double)tokens;
        res->ppl_src = exp(res->nll_src);
        for (int c = 0; c < o->ncand; c++) {
            res->c[c].kl = kl[c] / (double)tokens;
            res->c[c].nll = nll[c] / (double)tokens;
            res->c[c].ppl = exp(res->c[c].nll);
            res->c[c].top1_agree = (double)agree[c] / (double)tokens;
        }
    }
    lwq_layer_weights_free(&src_w);
    for (int c = 0; c < o->ncand && qw; c++) {
        lwq_layer_weights_free(&qw[c]);
        lwq_tlist_free(&qtails[c]);
    }
    lwq_tlist_free(&src_tail);
    if (lg.data)
        lwq_backend_tensor_free(&v->be, &lg);
    free(qtails);
    free(qw);
    free(zs);
    free(zq);
    free(kl);
    free(nll);
    free(agree);
    free(ss);
    return rc;
}
