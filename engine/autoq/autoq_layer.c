/* engine/autoq/autoq_layer.c — pass 1 on one layer (engine/autoq/autoq_score.c's steps 1-4):
 * the calibration forward, the layer quantized once per format, the source forward recorded for
 * the memo, the probe's gain, and the replays of every group in every quantized format on the
 * scored batches, whose outputs also start the kl streams.  Sums run in double over the real
 * tokens in sample order, so they do not depend on the batch size. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/autoq/autoq_pass1.h"
#include "engine/eval/eval_internal.h"
#include "engine/quant/qlayer.h"
#include "engine/quant/stats.h"
#include "engine/source/layersrc.h"

int lwq_aq_layer_groups(const lwq_aq_ctx *c, int L, lwq_aq_layer *A, lwq_error *e)
{
    return lwq_aq_layer_build(A, &c->plans[L], c->o->q.recipe, c->o, e);
}

/* Sum over the real rows of batch b of (q - h)^2 and of h^2 (h, q: the batch's bytes). */
static void batch_diff(const lwq_aq_ctx *c, const lwq_eval_bset *bs, int b, const void *h, const void *q, double *num,
                       double *den, int64_t *tokens)
{
    const lwq_batch *bt = &bs->batches[b];
    const int64_t D = c->hidden;
    for (int64_t r = 0; r < bs->rows[b]; r++) {
        if (!bt->valid_host[r])
            continue;
        for (int64_t j = 0; j < D; j++) {
            double x = lwq_load_f(h, c->act, (size_t)(r * D + j));
            if (q) {
                double d = lwq_load_f(q, c->act, (size_t)(r * D + j)) - x;
                *num += d * d;
            }
            *den += x * x;
        }
        if (tokens)
            (*tokens)++;
    }
}

/* The Hessian statistics any candidate format of linear i wants (local_hessian NVFP4). */
static uint8_t *hessians_wanted(const lwq_arch_layer *p, const lwq_aq_layer *A)
{
    uint8_t *w = calloc((size_t)(p->nlinears ? p->nlinears : 1), 1);
    for (int i = 0; w && i < p->nlinears; i++) {
        int g = A->group_of[i];
        for (int f = 0; f < LWQ_AQ_FORMATS; f++) {
            if (g < 0 ? f != (int)A->base[i].format : !A->g[g].allowed[f])
                continue;
            lwq_quant_choice ch = g < 0 || A->g[g].fixed ? A->base[i]
                                                          : lwq_aq_candidate_choice(&A->base[i], f, A->own_algos);
            int h = lwq_qlayer_hessian(&p->linears[i], &ch);
            w[i] = (uint8_t)(h > w[i] ? h : w[i]);
        }
    }
    return w;
}

/* Every batch of the calibration set through layer L, observed: bnd[cur] -> bnd[nxt]. */
static int calibrate(lwq_aq_ctx *c, int L, const lwq_weights *w, lwq_layer_stats *st, lwq_error *e)
{
    const lwq_eval_bset *sets[2] = {&c->sc, &c->rest};
    uint64_t off[2] = {0, c->score_bytes};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++)
        for (int b = 0; b < sets[k]->nb && rc == 0; b++) {
            lwq_tensor h = lwq_eval_bset_view(sets[k], b, &c->work);
            if ((rc = lwq_eval_bset_load(sets[k], b, &c->be, c->bnd[c->cur] + off[k], &c->work, e)) == 0 &&
                (rc = lwq_model_layer_forward(&c->model, L, w, &sets[k]->batches[b], &h, &st->obs, e)) == 0)
                rc = lwq_eval_bset_store(sets[k], b, &c->be, &c->work, c->bnd[1 - c->cur] + off[k], e);
        }
    return rc;
}

/* The layer's tensors with group g's linears taken from q (format f) and everything else from
 * src: views, sorted. */
static int combined(const lwq_arch_layer *p, const lwq_aq_group *g, const lwq_tlist *src, const lwq_tlist *q,
                    lwq_tlist *out, lwq_error *e)
{
    static const char *const parts[] = {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"};
    memset(out, 0, sizeof *out);
    int rc = 0;
    for (int t = 0; t < src->n && rc >= 0; t++) {
        int mine = 0;
        for (int m = 0; m < g->n && !mine; m++) {
            char n[LWQ_ARCH_NAME_MAX + 16];
            snprintf(n, sizeof n, "%s.weight", p->linears[g->lin[m]].name);
            mine = !strcmp(n, src->v[t].name);
        }
        if (!mine)
            rc = lwq_tlist_add(out, src->v[t].name, src->v[t].dtype, src->v[t].ndim, src->v[t].shape, src->v[t].data, 0,
                               e);
    }
    for (int m = 0; m < g->n && rc >= 0; m++)
        for (size_t k = 0; k < sizeof parts / sizeof parts[0] && rc >= 0; k++) {
            char n[LWQ_ARCH_NAME_MAX + 24];
            snprintf(n, sizeof n, "%s%s", p->linears[g->lin[m]].name, parts[k]);
            const lwq_htensor *h = lwq_tlist_find(q, n);
            if (h)
                rc = lwq_tlist_add(out, h->name, h->dtype, h->ndim, h->shape, h->data, 0, e);
        }
    if (rc < 0) {
        lwq_tlist_free(out);
        return rc;
    }
    lwq_tlist_sort(out);
    return 0;
}

/* One replay: batch b of the scored set through layer L with group g in format f (its tensors in
 * q); the output is left in c->work. */
static int replay(lwq_aq_ctx *c, int L, const lwq_aq_group *g, const lwq_tlist *src, const lwq_tlist *q, int b,
                  lwq_error *e)
{
    const lwq_arch_layer *p = &c->plans[L];
    lwq_tlist t;
    lwq_qlayer_view view = {0};
    int rc = combined(p, g, src, q, &t, e);
    if (rc)
        return rc;
    /* the KV cache stays in the source dtype: everything but the group is at full precision */
    if ((rc = lwq_qlayer_view_make(p, &t, 0, 0, &c->em, &view, e)) == 0) {
        lwq_layer_weights lw;
        lwq_emul_weights ew;
        lwq_layer_weights_init(&lw, &c->be, &t, &view.overlay, &c->ck.cfg.names);
        lwq_emul_weights_init(&ew, &c->em, &lw.w, &c->ck.cfg.names);
        if (c->use_memo)
            lwq_memo_replay(&c->memo);
        lwq_tensor h = lwq_eval_bset_view(&c->sc, b, &c->work);
        if ((rc = lwq_eval_bset_load(&c->sc, b, &c->be, c->bnd[c->cur], &c->work, e)) == 0)
            rc = lwq_model_layer_forward(&c->model, L, &ew.w, &c->sc.batches[b], &h, NULL, e);
        for (int i = 0; rc == 0 && i < c->em.n; i++)
            if (c->em.lin[i].dev_weight && c->em.lin[i].hits == 0)
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: its input quantization cannot be emulated: the %s forward does "
                              "not run this linear as one GEMM", c->em.lin[i].module, c->ck.cfg.model_type);
        lwq_layer_weights_free(&lw);
    }
    lwq_emul_reset(&c->em);
    lwq_qlayer_view_free(&view);
    lwq_tlist_free(&t);
    return rc;
}

/* The kl streams layer A makes: one per group and quantized format. */
static int layer_streams(const lwq_aq_layer *A)
{
    int n = 0;
    for (int k = 0; k < A->ngroups; k++)
        n += lwq_aq_nquantized(A->g[k].allowed);
    return n;
}

/* The work tensor's first `n` bytes -> host dst. */
static int work_out(lwq_aq_ctx *c, void *dst, size_t n, lwq_error *e)
{
    if (c->be.ops->device == LWQ_DEV_CPU) {
        memcpy(dst, c->work.data, n);
        return 0;
    }
    return lwq_backend_download(&c->be, dst, c->work.data, n, e);
}

/* The layer's gain: the probe (the previous layer's output with one group's quantization error)
 * through layer L with the source weights; its relative error against the source after the layer
 * over the one before.  It tells how much a perturbation entering L still matters after L, which
 * the layer score multiplies over the later layers (autoq_solve.c). */
static int probe_gain(lwq_aq_ctx *c, int L, const lwq_weights *w, double *gain, lwq_error *e)
{
    double in_num = 0, in_den = 0, out_num = 0, out_den = 0;
    unsigned char *hb = malloc(c->sc.max_rows * c->hidden * c->esz + 1);
    int rc = hb ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory for a batch of scored rows");
    for (int b = 0; b < c->sc.nb && rc == 0; b++) {
        size_t n = (size_t)(c->sc.boff[b + 1] - c->sc.boff[b]);
        batch_diff(c, &c->sc, b, c->bnd[c->cur] + c->sc.boff[b], c->probe + c->sc.boff[b], &in_num, &in_den, NULL);
        lwq_tensor h = lwq_eval_bset_view(&c->sc, b, &c->work);
        if ((rc = lwq_eval_bset_load(&c->sc, b, &c->be, c->probe, &c->work, e)) == 0 &&
            (rc = lwq_model_layer_forward(&c->model, L, w, &c->sc.batches[b], &h, NULL, e)) == 0 &&
            (rc = work_out(c, hb, n, e)) == 0)
            batch_diff(c, &c->sc, b, c->bnd[1 - c->cur] + c->sc.boff[b], hb, &out_num, &out_den, NULL);
    }
    free(hb);
    double rin = in_den > 0 ? in_num / in_den : 0, rout = out_den > 0 ? out_num / out_den : 0;
    *gain = rin > 0 && isfinite(rout / rin) ? rout / rin : 1;
    return rc;
}

/* The group whose FP8 replay (NVFP4 when none takes FP8, then NVFP4_MSE, W4A16, W4A16_F46) becomes
 * the next layer's probe. */
static void probe_pick(const lwq_aq_layer *A, int *pk, int *pf)
{
    static const int pref[] = {LWQ_QFMT_FP8, LWQ_QFMT_NVFP4, LWQ_AQ_NVFP4_MSE, LWQ_AQ_W4A16, LWQ_AQ_W4A16_F46};
    *pk = -1;
    for (int j = 0; j < 5 && *pk < 0; j++)
        for (int k = 0; k < A->ngroups && *pk < 0; k++)
            if (A->g[k].allowed[pref[j]]) {
                *pk = k;
                *pf = pref[j];
            }
}

/* Steps 3 and 4's new streams: every scored batch, the source forward recorded (its output must
 * be the calibration forward's, byte for byte), then each group in each quantized format. */
static int replays(lwq_aq_ctx *c, int L, const lwq_aq_layer *A, const lwq_tlist *src, lwq_tlist *Q,
                   const lwq_weights *wsrc, lwq_aq_lrec *rec, int stream0, lwq_error *e)
{
    unsigned char *hb = malloc(c->sc.max_rows * c->hidden * c->esz + 1);
    int rc = hb ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory for a batch of scored rows");
    for (int b = 0; b < c->sc.nb && rc == 0; b++) {
        size_t n = (size_t)(c->sc.boff[b + 1] - c->sc.boff[b]);
        const unsigned char *want = c->bnd[1 - c->cur] + c->sc.boff[b];
        double t = lwq_aq_cpu_now();
        if (c->use_memo)
            lwq_memo_record(&c->memo);
        lwq_tensor h = lwq_eval_bset_view(&c->sc, b, &c->work);
        if ((rc = lwq_eval_bset_load(&c->sc, b, &c->be, c->bnd[c->cur], &c->work, e)) == 0 &&
            (rc = lwq_model_layer_forward(&c->model, L, wsrc, &c->sc.batches[b], &h, NULL, e)) == 0 &&
            (rc = work_out(c, hb, n, e)) == 0 && memcmp(hb, want, n) != 0)
            rc = lwq_errf(e, LWQ_ESTATE, "layer %d: the source forward of scored batch %d gave other bytes the second "
                          "time (a nondeterministic backend cannot be scored)", L, b);
        c->t_record += lwq_aq_cpu_now() - t;
        if (rc)
            break;
        batch_diff(c, &c->sc, b, want, NULL, NULL, &rec->out_sq, &rec->tokens);
        t = lwq_aq_cpu_now();
        int si = stream0, pk, pf = LWQ_QFMT_NONE;
        probe_pick(A, &pk, &pf);
        if (pk < 0) /* nothing quantizable: the next layer's input unperturbed */
            memcpy(c->probe + c->sc.boff[b], want, n);
        for (int k = 0; k < A->ngroups && rc == 0; k++)
            for (int f = 1; f < LWQ_AQ_FORMATS && rc == 0; f++) { /* NVFP4, FP8, W4A16, NVFP4_MSE */
                if (!A->g[k].allowed[f])
                    continue;
                if ((rc = replay(c, L, &A->g[k], src, &Q[f], b, e)) != 0 || (rc = work_out(c, hb, n, e)) != 0)
                    break;
                double den = 0;
                batch_diff(c, &c->sc, b, want, hb, &rec->g[k].err[f], &den, NULL);
                if (c->o->score == LWQ_AQ_SCORE_KL)
                    memcpy(c->stream[si] + c->sc.boff[b], hb, n);
                if (k == pk && f == pf)
                    memcpy(c->probe + c->sc.boff[b], hb, n);
                si++;
            }
        c->t_replay += lwq_aq_cpu_now() - t;
    }
    if (c->use_memo)
        lwq_memo_off(&c->memo);
    free(hb);
    return rc;
}

int lwq_aq_layer_process(lwq_aq_ctx *c, int L, const lwq_tlist *src, lwq_aq_lrec *rec, lwq_error *e)
{
    const lwq_arch_layer *p = &c->plans[L];
    const lwq_autoq_opts *o = c->o;
    lwq_aq_layer A;
    int rc = lwq_aq_layer_groups(c, L, &A, e);
    if (rc)
        return rc;
    lwq_tlist Q[LWQ_AQ_FORMATS];
    memset(Q, 0, sizeof Q);
    lwq_layer_stats st;
    int st_open = 0;
    uint8_t *want = hessians_wanted(p, &A);
    uint8_t *fmt = calloc((size_t)(A.ngroups ? A.ngroups : 1), sizeof *fmt);
    lwq_quant_choice *ch = calloc((size_t)(p->nlinears ? p->nlinears : 1), sizeof *ch);
    rec->g = calloc((size_t)(A.ngroups ? A.ngroups : 1), sizeof *rec->g);
    rec->ngroups = A.ngroups;
    if (!want || !fmt || !ch || !rec->g)
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", L);
    if (rc == 0 && (rc = lwq_stats_init(&st, p, &c->be, p->is_moe ? c->ck.cfg.num_experts : 0, o->q.include_padding,
                                        o->q.all_experts, want, &c->ck.cfg.names, e)) == 0)
        st_open = 1;
    lwq_layer_weights lw;
    lwq_emul_weights ew;
    lwq_layer_weights_init(&lw, &c->be, src, NULL, &c->ck.cfg.names);
    lwq_emul_weights_init(&ew, &c->em, &lw.w, &c->ck.cfg.names);
    lwq_emul_reset(&c->em);
    double t = lwq_aq_cpu_now();
    if (rc == 0)
        rc = calibrate(c, L, &ew.w, &st, e);
    if (rc == 0) /* the Hessians' per-sequence partials closed and summed (engine/quant/stats.h) */
        rc = lwq_stats_finish(&st, NULL, e);
    c->t_calib += lwq_aq_cpu_now() - t;
    /* step 2: once per format; NONE quantizes only what the base recipe fixes (a conv1d) */
    t = lwq_aq_cpu_now();
    for (int f = 0; f < LWQ_AQ_FORMATS && rc == 0; f++) {
        int any = f == LWQ_QFMT_NONE;
        for (int k = 0; k < A.ngroups; k++) {
            fmt[k] = A.g[k].allowed[f] ? (uint8_t)f : LWQ_QFMT_NONE;
            any |= A.g[k].allowed[f];
        }
        if (!any)
            continue;
        lwq_aq_choices(&A, p, fmt, ch);
        lwq_qlayer_report qr = {0};
        if ((rc = lwq_qlayer_check(p, ch, e)) == 0)
            rc = lwq_qlayer_run(p, ch, o->q.recipe->kv, &st, src, &c->qops, &Q[f], &qr, e);
        lwq_qlayer_report_free(&qr);
        lwq_tlist_sort(&Q[f]);
    }
    c->t_quant += lwq_aq_cpu_now() - t;
    if (rc == 0) {
        for (int k = 0; k < A.ngroups; k++) {
            lwq_aq_gscore *g = &rec->g[k];
            g->kind = A.g[k].kind;
            g->nmembers = A.g[k].n;
            g->elements = A.g[k].elements;
            snprintf(g->first, sizeof g->first, "%s", p->linears[A.g[k].lin[0]].name);
            memcpy(g->allowed, A.g[k].allowed, sizeof g->allowed);
            for (int f = 0; f < LWQ_AQ_FORMATS; f++)
                for (int m = 0; g->allowed[f] && m < A.g[k].n; m++)
                    g->cost[f] += lwq_aq_linear_bytes(&Q[f], &p->linears[A.g[k].lin[m]]);
        }
        uint64_t lin = 0;
        for (int i = 0; i < p->nlinears; i++) {
            uint64_t b = lwq_aq_linear_bytes(&Q[LWQ_QFMT_NONE], &p->linears[i]);
            lin += b;
            rec->fixed_bytes += A.group_of[i] < 0 ? b : 0;
            rec->linear_elements += (uint64_t)p->linears[i].out_features * (uint64_t)p->linears[i].in_features;
        }
        rec->other_bytes = lwq_tlist_bytes(&Q[LWQ_QFMT_NONE]) - lin;
    }
    /* step 4 first for the older streams (they need the source layer), then the replays */
    t = lwq_aq_cpu_now();
    lwq_emul_reset(&c->em);
    if (rc == 0 && o->score == LWQ_AQ_SCORE_KL)
        rc = lwq_aq_streams_layer(c, L, &ew.w, e);
    c->t_streams += lwq_aq_cpu_now() - t;
    t = lwq_aq_cpu_now();
    if (rc == 0 && L > 0)
        rc = probe_gain(c, L, &ew.w, &rec->gain, e);
    c->t_record += lwq_aq_cpu_now() - t;
    int stream0 = c->nstreams;
    if (rc == 0 && o->score == LWQ_AQ_SCORE_KL)
        rc = lwq_aq_streams_grow(c, c->nstreams + layer_streams(&A), e);
    if (rc == 0)
        rc = replays(c, L, &A, src, Q, &ew.w, rec, stream0, e);
    lwq_layer_weights_free(&lw);
    for (int f = 0; f < LWQ_AQ_FORMATS; f++)
        lwq_tlist_free(&Q[f]);
    if (st_open)
        lwq_stats_free(&st);
    lwq_aq_layer_free(&A);
    free(want);
    free(fmt);
    free(ch);
    return rc;
}

