/* engine/autoq/head/autoq_head.c — lm_head as a search group (engine/autoq/head/autoq_head.h). */
#include "engine/autoq/head/autoq_head.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/data/dtype.h"
#include "engine/autoq/autoq_pass1.h"
#include "engine/eval/eval_kl.h"
#include "engine/source/layersrc.h"
#include "kernels/quant.h"

/* Rows of logits computed at once (two chunks of rows x vocab f32 live together). */
#define HEAD_ROWS 64

int lwq_aq_head_mode(int f)
{
    return f == LWQ_QFMT_FP8 ? LWQ_LMHEAD_W8A8 : f == LWQ_AQ_W4A16 ? LWQ_LMHEAD_MAX : f == LWQ_QFMT_NONE ? LWQ_LMHEAD_NONE
                                                                                                       : -1;
}

int lwq_aq_head_format(int mode)
{
    return mode == LWQ_LMHEAD_W8A8 ? LWQ_QFMT_FP8 : mode == LWQ_LMHEAD_MAX ? LWQ_AQ_W4A16
                                                  : mode == LWQ_LMHEAD_NONE ? LWQ_QFMT_NONE : -1;
}

uint64_t lwq_aq_head_cost(const lwq_ckpt_tensor *w, int f)
{
    uint64_t q = f == LWQ_QFMT_FP8 || f == LWQ_AQ_W4A16
                     ? lwq_aq_quant_bytes((uint64_t)w->shape[0] * (uint64_t)w->shape[1], f)
                     : 0;
    return q ? q : w->nbytes;
}

/* lm_head's module and weight names as the checkpoint spells them */
static void head_names(const lwq_ckpt *ck, char *mod, size_t mcap, char *wn, size_t wcap)
{
    lwq_names_full(&ck->cfg.names, "lm_head", mod, mcap);
    lwq_names_full(&ck->cfg.names, "lm_head.weight", wn, wcap);
}

int lwq_aq_head_allowed(const lwq_autoq_opts *o, const lwq_ckpt *ck, uint8_t allowed[LWQ_AQ_FORMATS], lwq_error *e)
{
    memset(allowed, 0, LWQ_AQ_FORMATS);
    char mod[LWQ_ARCH_NAME_MAX], wn[LWQ_ARCH_NAME_MAX + 8];
    head_names(ck, mod, sizeof mod, wn, sizeof wn);
    int hit = -1;
    for (int s = 0; s < o->nspaces; s++) {
        int m = 0;
        for (int j = 0; j < o->spaces[s].npatterns && !m; j++)
            m = lwq_glob_match(o->spaces[s].pattern[j], mod);
        if (!m)
            continue;
        if (hit >= 0)
            return lwq_errf(e, LWQ_EINVAL, "%s: module_search_spaces[%d] (line %d) and [%d] (line %d) both match it: a "
                            "module takes one space's candidates (Model Optimizer refuses it alike)", mod, hit,
                            o->spaces[hit].line, s, o->spaces[s].line);
        hit = s;
    }
    if (hit < 0) {
        /* no entry matches it: under a fixed baseline its one choice is the baseline's lm_head, inside the
         * budget (Model Optimizer's _resolve_fixed_group_recipe, as for a decoder group no entry matches);
         * a form no candidate is (weight-only FP8, the static NVFP4 searches, Four-over-Six) and a tied
         * lm_head stay outside the search, the base recipe's */
        int f = o->baseline && o->nspaces > 0 ? lwq_aq_head_format(o->q.recipe->lm_head) : -1;
        const lwq_ckpt_tensor *w = lwq_ckpt_find(ck, wn);
        if (f < 0 || !w || w->ndim != 2 || (f == LWQ_AQ_W4A16 && w->shape[1] % 16) ||
            (w->dtype != LWQ_BF16 && w->dtype != LWQ_F16 && w->dtype != LWQ_F32))
            return 0;
        allowed[f] = 1;
        return 2;
    }
    const lwq_recipe_aq_space *sp = &o->spaces[hit];
    if (sp->nvfp4 || sp->nvfp4_mse)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: module_search_spaces[%d] (line %d) offers it %s (W4A4); lwq writes "
                        "an lm_head as fp8 (W8A8), w4a16_nvfp4 or in the source dtype only", mod, hit, sp->line,
                        sp->nvfp4 ? "nvfp4" : "nvfp4_w4a4_weight_mse_fp8_sweep");
    if (sp->w4a16_f46) /* Muse-Glimmer's: its scores and bytes would need the Four-over-Six search on lm_head */
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: module_search_spaces[%d] (line %d) offers it w4a16_nvfp4_four_over_six; "
                        "lwq's lm_head search has fp8 (W8A8), w4a16_nvfp4 and the source dtype only (a searched "
                        "Four-over-Six lm_head is not implemented: leave lm_head out of the entry's patterns)", mod, hit,
                        sp->line);
    const lwq_ckpt_tensor *w = lwq_ckpt_find(ck, wn);
    if (!w)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: module_search_spaces[%d] (line %d) searches it, but the checkpoint has "
                        "no %s (tie_word_embeddings): lwq does not quantize a shared embedding", mod, hit, sp->line, wn);
    if (w->ndim != 2 || w->shape[0] <= 0 || w->shape[1] <= 0 ||
        (w->dtype != LWQ_BF16 && w->dtype != LWQ_F16 && w->dtype != LWQ_F32))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: searched lm_head must be a 2-D BF16/F16/F32 matrix, not %s with %d "
                        "dimensions", wn, lwq_dtype_name(w->dtype), w->ndim);
    allowed[LWQ_QFMT_FP8] = (uint8_t)sp->fp8;
    allowed[LWQ_AQ_W4A16] = (uint8_t)(sp->w4a16 && w->shape[1] % 16 == 0);
    allowed[LWQ_QFMT_NONE] = (uint8_t)sp->allow_no_quant;
    if (!allowed[LWQ_QFMT_FP8] && !allowed[LWQ_AQ_W4A16] && !allowed[LWQ_QFMT_NONE])
        return lwq_errf(e, LWQ_EINVAL, "%s: can take none of module_search_spaces[%d]'s (line %d) candidates "
                        "(w4a16_nvfp4 needs a width that is a multiple of 16; %s has %lld)", mod, hit, sp->line, wn,
                        (long long)w->shape[1]);
    return 1;
}

int lwq_aq_head_record(const lwq_autoq_opts *o, const lwq_ckpt *ck, lwq_aq_lrec *rec, lwq_error *e)
{
    uint8_t allowed[LWQ_AQ_FORMATS];
    int rc = lwq_aq_head_allowed(o, ck, allowed, e);
    if (rc <= 0)
        return rc ? rc : lwq_errf(e, LWQ_ESTATE, "lm_head is not searched");
    char mod[LWQ_ARCH_NAME_MAX], wn[LWQ_ARCH_NAME_MAX + 8];
    head_names(ck, mod, sizeof mod, wn, sizeof wn);
    const lwq_ckpt_tensor *w = lwq_ckpt_find(ck, wn);
    free(rec->g);
    memset(rec, 0, sizeof *rec);
    if (!(rec->g = calloc(1, sizeof *rec->g)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    rec->ngroups = 1;
    rec->gain = 1;
    rec->linear_elements = (uint64_t)w->shape[0] * (uint64_t)w->shape[1];
    lwq_aq_gscore *g = rec->g;
    g->kind = LWQ_AQ_HEAD;
    g->nmembers = 1;
    snprintf(g->first, sizeof g->first, "%s", mod);
    g->elements = rec->linear_elements;
    for (int f = 0; f < LWQ_AQ_FORMATS; f++) {
        g->allowed[f] = allowed[f];
        g->cost[f] = allowed[f] ? lwq_aq_head_cost(w, f) : 0;
    }
    return 0;
}

int lwq_aq_head_check(const lwq_autoq_opts *o, const lwq_ckpt *ck, const lwq_aq_lrec *rec, const char *file,
                      lwq_error *e)
{
    lwq_aq_lrec want = {0};
    int rc = lwq_aq_head_record(o, ck, &want, e);
    if (rc)
        return rc;
    const lwq_aq_gscore *g = rec->ngroups == 1 ? rec->g : NULL, *h = want.g;
    const char *what = NULL;
    if (!g)
        what = "its number of groups";
    else if (g->kind != h->kind || strcmp(g->first, h->first) || g->nmembers != 1)
        what = "its group";
    else if (g->elements != h->elements || rec->linear_elements != want.linear_elements)
        what = "its weight elements";
    else if (rec->fixed_bytes || rec->other_bytes || rec->gain != 1)
        what = "its fixed bytes or gain";
    for (int f = 0; !what && f < LWQ_AQ_FORMATS; f++)
        if (g->allowed[f] != h->allowed[f] || (h->allowed[f] && g->cost[f] != h->cost[f]))
            what = "its candidates or their bytes";
    if (what)
        rc = lwq_errf(e, LWQ_ESTATE, "%s: the lm_head record: %s differ from this model and recipe's (the scores do not "
                      "belong to this model, or were edited: remove the file, or the resume directory it is in, to "
                      "score again)", file, what);
    free(want.g);
    return rc;
}

/* ---- pass 1 ------------------------------------------------------------------------------------ */

/* The calibration amax of lm_head's input: the final norm of every row of the boundary (the scored
 * rows, then the others), real tokens only unless --include-padding. */
static int input_amax(lwq_aq_ctx *c, const lwq_weights *tail, float *amax, lwq_error *e)
{
    const lwq_eval_bset *sets[2] = {&c->sc, &c->rest};
    const unsigned char *src[2] = {c->bnd[c->cur], c->bnd[c->cur] + c->score_bytes};
    int rc = 0;
    *amax = 0;
    for (int k = 0; k < 2 && rc == 0; k++)
        for (int b = 0; b < sets[k]->nb && rc == 0; b++) {
            lwq_tensor h = lwq_eval_bset_view(sets[k], b, &c->work);
            float a = 0;
            if ((rc = lwq_eval_bset_load(sets[k], b, &c->be, src[k], &c->work, e)) == 0 &&
                (rc = lwq_model_final_norm(&c->model, tail, &h, e)) == 0 &&
                (rc = lwq_backend_amax(&c->be, &h, c->o->q.include_padding ? NULL : &sets[k]->batches[b].valid, &a,
                                       e)) == 0 &&
                a > *amax)
                *amax = a;
        }
    return rc;
}

/* lm_head in candidate f, as lwq quantize writes it, dequantized into `dq` (the weight's dtype). */
static int quantize_head(const lwq_htensor *w, int f, float wamax, void *dq, lwq_error *e)
{
    int64_t rows = w->shape[0], cols = w->shape[1];
    int rc;
    if (f == LWQ_QFMT_FP8) {
        uint8_t *q = malloc((size_t)(rows * cols));
        float ws = 0;
        if (!q)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", w->name);
        if ((rc = lwq_quant_fp8(w->data, w->dtype, rows, cols, wamax, w->name, q, &ws, e)) >= 0)
            rc = lwq_quant_fp8_dequant(q, ws, rows * cols, w->dtype, dq, e);
        free(q);
        return rc < 0 ? rc : 0;
    }
    uint8_t *packed = malloc((size_t)(rows * cols / 2) + 1), *scale = malloc((size_t)(rows * (cols / 16)) + 1);
    float ws2 = 0;
    rc = packed && scale ? 0 : lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", w->name);
    if (rc == 0 && (rc = lwq_quant_nvfp4_max(w->data, w->dtype, rows, cols, wamax, w->name, packed, scale, &ws2, e)) >= 0)
        rc = lwq_quant_nvfp4_dequant(packed, scale, ws2, rows, cols, w->dtype, dq, e);
    free(packed);
    free(scale);
    return rc < 0 ? rc : 0;
}

/* The logits of rows [r0, r0 + n) of scored batch b (the source's final hidden state) through the
 * final norm and lm_head of `w` -> host (n, V) f32. */
static int logits(lwq_aq_ctx *c, const lwq_weights *w, int b, int64_t r0, int64_t n, lwq_tensor *lg, float *host,
                  lwq_error *e)
{
    return lwq_aq_head_rows(c, w, c->bnd[c->cur], b, r0, n, lg, host, e);
}

/* Candidate f's err, out_sq (the source's, summed once: `first`), tokens and KL over the scored rows. */
static int replay(lwq_aq_ctx *c, const lwq_tlist *tail, const lwq_tlist *ov, const char *mod, int f, float in_scale,
                  int first, lwq_aq_lrec *rec, lwq_tensor *lg, float *zs, float *zq, lwq_error *e)
{
    const int64_t V = c->ck.cfg.vocab_size;
    lwq_layer_weights sw, qw;
    lwq_emul_weights ew;
    lwq_layer_weights_init(&sw, &c->be, tail, NULL, &c->ck.cfg.names);
    lwq_layer_weights_init(&qw, &c->be, tail, ov, &c->ck.cfg.names);
    lwq_emul_reset(&c->em);
    int rc = f == LWQ_QFMT_FP8 ? lwq_emul_add(&c->em, mod, LWQ_QFMT_FP8, in_scale, e) : 0;
    lwq_emul_weights_init(&ew, &c->em, &qw.w, &c->ck.cfg.names);
    double err = 0, osq = 0, kl = 0;
    int64_t tokens = 0;
    for (int b = 0; b < c->sc.nb && rc == 0; b++) {
        const lwq_batch *bt = &c->sc.batches[b];
        for (int64_t r0 = 0; r0 < c->sc.rows[b] && rc == 0; r0 += HEAD_ROWS) {
            int64_t n = c->sc.rows[b] - r0 < HEAD_ROWS ? c->sc.rows[b] - r0 : HEAD_ROWS;
            int any = 0;
            for (int64_t i = 0; i < n; i++)
                any |= bt->valid_host[r0 + i];
            if (!any)
                continue;
            if ((rc = logits(c, &sw.w, b, r0, n, lg, zs, e)) != 0 || (rc = logits(c, &ew.w, b, r0, n, lg, zq, e)) != 0)
                break;
            for (int64_t i = 0; i < n; i++) {
                if (!bt->valid_host[r0 + i])
                    continue;
                const float *s = zs + i * V, *q = zq + i * V;
                for (int64_t v = 0; v < V; v++) {
                    double d = (double)q[v] - (double)s[v];
                    err += d * d;
                    osq += (double)s[v] * (double)s[v];
                }
                if (c->o->score == LWQ_AQ_SCORE_KL)
                    kl += lwq_eval_kl_row(s, lwq_eval_logit_stat(s, V), q, lwq_eval_logit_stat(q, V), V);
                tokens++;
            }
        }
    }
    lwq_layer_weights_free(&qw);
    lwq_layer_weights_free(&sw);
    lwq_emul_reset(&c->em);
    if (rc)
        return rc;
    if (!isfinite(err) || !isfinite(osq))
        return lwq_errf(e, LWQ_ENUMERIC, "%s: the logits of candidate %s are not finite", mod, lwq_aq_format_name(f));
    rec->g[0].err[f] = err;
    rec->g[0].kl[f] = tokens ? fmax(0.0, kl / (double)tokens) : 0; /* f32 logits of near-equal models: -1e-17 */
    if (first) {
        rec->out_sq = osq;
        rec->tokens = tokens;
    }
    return 0;
}

int lwq_aq_head_score(lwq_aq_ctx *c, lwq_aq_lrec *rec, lwq_error *e)
{
    const int64_t V = c->ck.cfg.vocab_size;
    char mod[LWQ_ARCH_NAME_MAX], wn[LWQ_ARCH_NAME_MAX + 8];
    head_names(&c->ck, mod, sizeof mod, wn, sizeof wn);
    lwq_tlist tail = {0}, ov = {0};
    int rc = lwq_layersrc_read(&c->ck, -1, &tail, e);
    if (rc)
        return rc;
    lwq_tlist_sort(&tail);
    const lwq_htensor *w = lwq_tlist_find(&tail, wn);
    float *zs = malloc((size_t)(HEAD_ROWS * V) * sizeof(float)), *zq = malloc((size_t)(HEAD_ROWS * V) * sizeof(float));
    lwq_tensor lg = {0};
    int64_t shape[2] = {HEAD_ROWS, V};
    rc = !w ? lwq_errf(e, LWQ_EFORMAT, "%s: no %s in the checkpoint's tail", c->ck.dir, wn)
         : w->ndim != 2 || w->shape[0] != V ? lwq_errf(e, LWQ_EFORMAT, "%s: shape [%lld, ...], the config's vocab_size "
                                                       "is %lld", wn, (long long)w->shape[0], (long long)V)
         : zs && zq ? 0 : lwq_errf(e, LWQ_ENOMEM, "lm_head scores: out of memory");
    if (rc == 0)
        rc = lwq_backend_tensor_alloc(&c->be, LWQ_F32, 2, shape, &lg, e);
    float in_amax = 0, in_scale = 0, wamax = 0;
    if (rc == 0) {
        lwq_layer_weights tw;
        lwq_layer_weights_init(&tw, &c->be, &tail, NULL, &c->ck.cfg.names);
        rc = input_amax(c, &tw.w, &in_amax, e);
        lwq_layer_weights_free(&tw);
    }
    if (rc == 0 && rec->g[0].allowed[LWQ_QFMT_FP8])
        rc = lwq_quant_input_scale(in_amax, LWQ_QUANT_FP8, mod, &in_scale, e);
    if (rc == 0)
        rc = lwq_quant_amax(w->data, w->dtype, w->shape[0] * w->shape[1], wn, &wamax, e);
    int first = 1;
    for (int f = 1; f < LWQ_AQ_FORMATS && rc == 0; f++) {
        if (!rec->g[0].allowed[f])
            continue;
        void *dq = malloc((size_t)w->nbytes ? (size_t)w->nbytes : 1);
        if (!dq) {
            rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", wn);
            break;
        }
        if ((rc = quantize_head(w, f, wamax, dq, e)) != 0) {
            free(dq);
            break;
        }
        lwq_tlist_free(&ov);
        memset(&ov, 0, sizeof ov);
        if ((rc = lwq_tlist_add(&ov, w->name, w->dtype, w->ndim, w->shape, dq, 1, e)) < 0)
            break;
        lwq_tlist_sort(&ov);
        rc = replay(c, &tail, &ov, mod, f, in_scale, first, rec, &lg, zs, zq, e);
        first = 0;
    }
    if (rc == 0 && first) { /* none alone: the source logits' size still describes the group */
        rec->out_sq = 0;
        rec->tokens = 0;
    }
    lwq_tlist_free(&ov);
    if (lg.data)
        lwq_backend_tensor_free(&c->be, &lg);
    lwq_tlist_free(&tail);
    free(zs);
    free(zq);
    return rc < 0 ? rc : 0;
}
