/* engine/autoq/autoq_score.c — pass 1 of the auto-quantize search: one pass over the disk that
 * scores every search group of every layer in every candidate format (engine/autoq/autoq.h).
 *
 * Per layer L, its weights arriving through the prefetch ring as in lwq quantize:
 *   1. calibration forward: every calibration batch from bnd[cur] through L into bnd[nxt], the
 *      statistics observer of lwq quantize recording (engine/quant/stats.h);
 *   2. quantize: the layer once per format f (NONE included, which quantizes only what the base
 *      recipe fixes), every group that can take f in f (engine/quant/qlayer.h): the tensors and
 *      so the exact bytes lwq quantize would write;
 *   3. replays, per scored batch: the source forward once more with the memo recording, then per
 *      group and format the layer with that group's tensors from step 2 (dequantized, inputs
 *      emulated) and everything else the source's; the squared error of the output against the
 *      source output (bnd[nxt]) is summed over the real tokens;
 *   4. kl score: the streams born before L go through L; each replay's output becomes a stream;
 *   5. commit: the state (bnd[nxt] and the streams), then scores.json (autoq_state.c).
 * Sums run in double over real tokens in sample order, so they do not depend on the batch size. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/file.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/proc.h"
#include "engine/autoq/autoq_pass1.h"
#include "engine/eval/eval_internal.h"
#include "engine/quant/qlayer.h"
#include "engine/quant/stats.h"
#include "engine/source/layersrc.h"
#include "io/durable.h"

double lwq_aq_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- set-up --------------------------------------------------------------------------------- */

static int setup(lwq_aq_ctx *c, lwq_error *e)
{
    const lwq_autoq_opts *o = c->o;
    int rc = lwq_ckpt_open(o->q.model_dir, &c->ck, e);
    if (rc)
        return rc;
    c->ck_open = 1;
    c->N = c->ck.cfg.num_hidden_layers;
    c->hidden = c->ck.cfg.hidden_size;
    c->act = c->ck.cfg.dtype;
    if (c->act != LWQ_BF16 && c->act != LWQ_F16 && c->act != LWQ_F32)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: dtype %s is not a compute dtype (BF16, F16, F32)", o->q.model_dir,
                        lwq_dtype_name(c->act));
    c->esz = lwq_dtype_size(c->act);
    lwq_arch_report rep = {0};
    if ((rc = lwq_arch_check(&c->ck, &rep, e)) > 0)
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: %d tensor problem(s) against the %s architecture (lwq inspect shows them)",
                      c->ck.dir, rc, c->ck.cfg.model_type);
    lwq_arch_report_free(&rep);
    if (rc)
        return rc;
    if (!(c->plans = calloc((size_t)c->N, sizeof *c->plans)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int L = 0; L < c->N; L++)
        if ((rc = lwq_arch_layer_plan(&c->ck.cfg, L, &c->plans[L], e)) != 0)
            return rc;
    lwq_device_choice d = o->q.device;
    if (d == LWQ_DEVICE_AUTO)
        d = lwq_backend_cuda_device_count() > 0 ? LWQ_DEVICE_CUDA : LWQ_DEVICE_CPU;
    rc = d == LWQ_DEVICE_CUDA ? lwq_backend_cuda_create(&c->be, 0, e) : lwq_backend_cpu_create(&c->be, o->q.threads, e);
    if (rc)
        return rc;
    c->be_open = 1;
    lwq_qops_init(&c->qops, &c->be);
    if (o->q.threads > 0)
        lwq_parallel_set_threads(o->q.threads);
    lwq_emul_init(&c->em, &c->be);
    c->em_open = 1;
    lwq_memo_init(&c->memo);
    c->use_memo = !o->no_memo && c->be.ops->device == LWQ_DEV_CPU;
    c->em.memo = c->use_memo ? &c->memo : NULL;
    if ((rc = lwq_model_init(&c->model, &c->ck.cfg, &c->em.be, c->act, e)) != 0)
        return rc;
    c->model_open = 1;
    /* the scored samples first: they are batches of their own, so a replay runs exactly them */
    const lwq_calib_set *cs = o->q.calib;
    int ns = o->score_size > 0 && o->score_size < cs->n ? o->score_size : cs->n;
    c->cs_score = *cs;
    c->cs_score.n = ns;
    c->cs_rest = *cs;
    c->cs_rest.n = cs->n - ns;
    c->cs_rest.ids = cs->ids + ns;
    c->cs_rest.len = cs->len + ns;
    int B = o->q.batch_size > 0 ? o->q.batch_size : 8;
    if ((rc = lwq_eval_bset_build(&c->sc, &c->cs_score, B, &c->be, c->hidden, c->esz, "scored calibration", e)) != 0)
        return rc;
    if (c->cs_rest.n > 0 &&
        (rc = lwq_eval_bset_build(&c->rest, &c->cs_rest, B, &c->be, c->hidden, c->esz, "calibration", e)) != 0)
        return rc;
    c->score_bytes = c->sc.boff[c->sc.nb];
    c->bnd_bytes = c->score_bytes + (c->rest.nb ? c->rest.boff[c->rest.nb] : 0);
    int64_t rows = c->sc.max_rows > c->rest.max_rows ? c->sc.max_rows : c->rest.max_rows;
    int64_t shape[2] = {rows, c->hidden};
    if ((rc = lwq_backend_tensor_alloc(&c->be, c->act, 2, shape, &c->work, e)) != 0)
        return rc;
    for (int k = 0; k < 2; k++)
        if (!(c->bnd[k] = malloc(c->bnd_bytes ? c->bnd_bytes : 1)))
            return lwq_errf(e, LWQ_ENOMEM, "cannot allocate 2 x %.2f GB of calibration activations",
                            (double)c->bnd_bytes / 1e9);
    return 0;
}

static void ctx_free(lwq_aq_ctx *c)
{
    if (c->pf)
        lwq_prefetch_free(c->pf);
    if (c->rd)
        lwq_io_reader_free(c->rd);
    if (c->pool_open)
        lwq_pool_free(&c->pool);
    for (int L = 0; c->ranges && L < c->N; L++)
        free(c->ranges[L]);
    free(c->ranges);
    free(c->nranges);
    for (int i = 0; i < c->nstreams; i++)
        free(c->stream[i]);
    free(c->stream);
    free(c->bnd[0]);
    free(c->bnd[1]);
    if (c->model_open)
        lwq_model_free(&c->model);
    lwq_memo_free(&c->memo);
    if (c->em_open)
        lwq_emul_free(&c->em);
    if (c->be_open) {
        lwq_eval_bset_free(&c->sc, &c->be);
        lwq_eval_bset_free(&c->rest, &c->be);
        if (c->work.data)
            lwq_backend_tensor_free(&c->be, &c->work);
        lwq_qops_free(&c->qops);
        lwq_backend_destroy(&c->be);
    }
    for (int L = 0; c->plans && L < c->N; L++)
        lwq_arch_layer_free(&c->plans[L]);
    free(c->plans);
    if (c->ck_open)
        lwq_ckpt_free(&c->ck);
    if (c->jlog)
        fclose(c->jlog);
}

/* The groups of layer L as this run makes them (a resumed record must describe the same). */
static int layer_groups(lwq_aq_ctx *c, int L, lwq_aq_layer *A, lwq_error *e)
{
    return lwq_aq_layer_init(A, &c->plans[L], c->o->q.recipe, c->o->formats, e);
}

static int check_record(lwq_aq_ctx *c, int L, const lwq_aq_lrec *r, lwq_error *e)
{
    lwq_aq_layer A;
    int rc = layer_groups(c, L, &A, e);
    if (rc)
        return rc;
    int same = A.ngroups == r->ngroups;
    for (int k = 0; same && k < A.ngroups; k++) {
        const lwq_aq_group *g = &A.g[k];
        same = g->kind == r->g[k].kind && g->n == r->g[k].nmembers && g->elements == r->g[k].elements &&
               !strcmp(c->plans[L].linears[g->lin[0]].name, r->g[k].first) &&
               !memcmp(g->allowed, r->g[k].allowed, sizeof g->allowed);
    }
    lwq_aq_layer_free(&A);
    return same ? 0 : lwq_errf(e, LWQ_ESTATE, "%s/%s: layer %d's groups differ from this model's (damaged resume "
                               "state: remove the resume directory to start over)", c->dir, LWQ_AQ_MANIFEST, L);
}

/* Streams the committed layers made (kl score): one per group and quantized format. */
static int count_streams(const lwq_aq_scores *s, int layers)
{
    int n = 0;
    for (int L = 0; L < layers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++)
            n += s->rec[L].g[k].allowed[LWQ_QFMT_NVFP4] + s->rec[L].g[k].allowed[LWQ_QFMT_FP8];
    return n;
}

static int grow_streams(lwq_aq_ctx *c, int n, lwq_error *e)
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

/* The state file's parts: the boundary entering layer `next`, then the streams. */
static int state_parts(lwq_aq_ctx *c, unsigned char *bnd, void ***parts, uint64_t **bytes, lwq_error *e)
{
    int n = 1 + c->nstreams;
    *parts = malloc((size_t)n * sizeof **parts);
    *bytes = malloc((size_t)n * sizeof **bytes);
    if (!*parts || !*bytes)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    (*parts)[0] = bnd;
    (*bytes)[0] = c->bnd_bytes;
    for (int i = 0; i < c->nstreams; i++) {
        (*parts)[1 + i] = c->stream[i];
        (*bytes)[1 + i] = c->score_bytes;
    }
    return n;
}

/* Every boundary starts as the embedding of its tokens, or as the committed state. */
static int initial_state(lwq_aq_ctx *c, lwq_error *e)
{
    lwq_aq_scores *s = c->s;
    int rc = 0;
    for (int L = 0; L < s->committed && rc == 0; L++)
        rc = check_record(c, L, &s->rec[L], e);
    if (rc)
        return rc;
    if (s->committed > 0) {
        int want = c->o->score == LWQ_AQ_SCORE_KL ? count_streams(s, s->committed) : 0;
        if (want != s->nstreams)
            return lwq_errf(e, LWQ_ESTATE, "%s/%s names %d kl streams, its layers make %d (damaged resume state: "
                            "remove the resume directory to start over)", c->dir, LWQ_AQ_MANIFEST, s->nstreams, want);
        if ((rc = grow_streams(c, want, e)) != 0)
            return rc;
        void **parts;
        uint64_t *bytes;
        int n = state_parts(c, c->bnd[c->cur], &parts, &bytes, e);
        if (n > 0)
            rc = lwq_aq_state_read(c->dir, s, parts, bytes, n, e);
        else
            rc = n;
        free(parts);
        free(bytes);
        return rc;
    }
    lwq_tlist tail;
    if ((rc = lwq_layersrc_read(&c->ck, -1, &tail, e)) != 0)
        return rc;
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &c->be, &tail, NULL, c->ck.cfg.weight_prefix);
    const lwq_eval_bset *sets[2] = {&c->sc, &c->rest};
    unsigned char *dst[2] = {c->bnd[c->cur], c->bnd[c->cur] + c->score_bytes};
    for (int k = 0; k < 2 && rc == 0; k++)
        for (int b = 0; b < sets[k]->nb && rc == 0; b++) {
            lwq_tensor h = lwq_eval_bset_view(sets[k], b, &c->work);
            if ((rc = lwq_model_embed(&c->model, &lw.w, sets[k]->tokens[b], &h, e)) == 0)
                rc = lwq_eval_bset_store(sets[k], b, &c->be, &c->work, dst[k], e);
        }
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&tail);
    s->tail_bytes = 0;
    for (int i = 0; i < c->ck.ntensors; i++)
        if (c->ck.tensors[i].layer < 0 || c->ck.tensors[i].layer >= c->N)
            s->tail_bytes += c->ck.tensors[i].nbytes;
    return rc;
}

static int start_io(lwq_aq_ctx *c, int first, lwq_error *e)
{
    lwq_io_reader_opts ro;
    lwq_io_reader_opts_default(&ro);
    int rc = lwq_io_reader_init(&c->rd, &ro, e);
    if (rc)
        return rc;
    if (!(c->ranges = calloc((size_t)c->N, sizeof *c->ranges)) || !(c->nranges = calloc((size_t)c->N, sizeof(int))))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    uint64_t slot = LWQ_IO_ALIGN;
    for (int L = first; L < c->N; L++) {
        lwq_io_plan p;
        if ((rc = lwq_layersrc_ranges(&c->ck, L, &c->ranges[L], &c->nranges[L], e)) != 0 ||
            (rc = lwq_io_plan_build(&p, c->ranges[L], (size_t)c->nranges[L], LWQ_LAYERSRC_MERGE_GAP, e)) != 0)
            return rc;
        slot = p.bytes > slot ? p.bytes : slot;
        lwq_io_plan_free(&p);
    }
    lwq_pool_opts po = {0};
    po.slot_bytes = (size_t)slot;
    po.nslots = c->o->q.prefetch > 0 ? c->o->q.prefetch : 2;
    po.numa_node = -1;
    if ((rc = lwq_pool_init(&c->pool, &po, e)) != 0)
        return rc;
    c->pool_open = 1;
    lwq_prefetch_opts pf = {c->rd, &c->pool, LWQ_LAYERSRC_MERGE_GAP};
    if ((rc = lwq_prefetch_init(&c->pf, &pf, e)) != 0)
        return rc;
    for (int L = first; L < c->N; L++)
        if (lwq_prefetch_submit(c->pf, c->ranges[L], (size_t)c->nranges[L], e) < 0)
            return e->code;
    return 0;
}

/* ---- one layer --------------------------------------------------------------------------------- */

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
        lwq_quant_choice ch = A->base[i];
        int g = A->group_of[i];
        for (int f = 0; f < LWQ_AQ_FORMATS; f++) {
            if (g < 0 ? f != (int)A->base[i].format : !A->g[g].allowed[f])
                continue;
            ch.format = (lwq_qformat)f;
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
        lwq_layer_weights_init(&lw, &c->be, &t, &view.overlay, c->ck.cfg.weight_prefix);
        lwq_emul_weights_init(&ew, &c->em, &lw.w, c->ck.cfg.weight_prefix);
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
        n += A->g[k].allowed[LWQ_QFMT_NVFP4] + A->g[k].allowed[LWQ_QFMT_FP8];
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

/* Steps 3 and 4's new streams: every scored batch, the source forward recorded (its output must
 * be the calibration forward's, byte for byte), then each group in each quantized format. */
static int replays(lwq_aq_ctx *c, int L, const lwq_aq_layer *A, const lwq_tlist *src, lwq_tlist *Q,
                   const lwq_weights *wsrc, lwq_aq_lrec *rec, int stream0, lwq_error *e)
{
    int rc = 0;
    size_t cap = 0;
    unsigned char *hb = NULL;
    for (int b = 0; b < c->sc.nb && rc == 0; b++) {
        size_t n = (size_t)(c->sc.boff[b + 1] - c->sc.boff[b]);
        if (n > cap) {
            free(hb);
            if (!(hb = malloc(n)))
                return lwq_errf(e, LWQ_ENOMEM, "out of memory for a batch of %zu bytes", n);
            cap = n;
        }
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
        int si = stream0;
        for (int k = 0; k < A->ngroups && rc == 0; k++)
            for (int f = LWQ_QFMT_NVFP4; f <= LWQ_QFMT_FP8 && rc == 0; f++) {
                if (!A->g[k].allowed[f])
                    continue;
                if ((rc = replay(c, L, &A->g[k], src, &Q[f], b, e)) != 0 || (rc = work_out(c, hb, n, e)) != 0)
                    break;
                double den = 0;
                batch_diff(c, &c->sc, b, want, hb, &rec->g[k].err[f], &den, NULL);
                if (c->o->score == LWQ_AQ_SCORE_KL)
                    memcpy(c->stream[si] + c->sc.boff[b], hb, n);
                si++;
            }
        c->t_replay += lwq_aq_cpu_now() - t;
    }
    if (c->use_memo)
        lwq_memo_off(&c->memo);
    free(hb);
    return rc;
}

/* Steps 1-4 of layer L (its source tensors src): the record, the kl streams. */
static int process_layer(lwq_aq_ctx *c, int L, const lwq_tlist *src, lwq_aq_lrec *rec, lwq_error *e)
{
    const lwq_arch_layer *p = &c->plans[L];
    const lwq_autoq_opts *o = c->o;
    lwq_aq_layer A;
    int rc = layer_groups(c, L, &A, e);
    if (rc)
        return rc;
    lwq_tlist Q[LWQ_AQ_FORMATS];
    memset(Q, 0, sizeof Q);
    lwq_layer_stats st;
    int st_open = 0;
    uint8_t *want = hessians_wanted(p, &A);
    lwq_qformat *fmt = calloc((size_t)(A.ngroups ? A.ngroups : 1), sizeof *fmt);
    lwq_quant_choice *ch = calloc((size_t)(p->nlinears ? p->nlinears : 1), sizeof *ch);
    rec->g = calloc((size_t)(A.ngroups ? A.ngroups : 1), sizeof *rec->g);
    rec->ngroups = A.ngroups;
    if (!want || !fmt || !ch || !rec->g)
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", L);
    if (rc == 0 && (rc = lwq_stats_init(&st, p, &c->be, p->is_moe ? c->ck.cfg.num_experts : 0, o->q.include_padding,
                                        o->q.all_experts, want, c->ck.cfg.weight_prefix, e)) == 0)
        st_open = 1;
    lwq_layer_weights lw;
    lwq_emul_weights ew;
    lwq_layer_weights_init(&lw, &c->be, src, NULL, c->ck.cfg.weight_prefix);
    lwq_emul_weights_init(&ew, &c->em, &lw.w, c->ck.cfg.weight_prefix);
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
            fmt[k] = A.g[k].allowed[f] ? (lwq_qformat)f : LWQ_QFMT_NONE;
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
    int stream0 = c->nstreams;
    if (rc == 0 && o->score == LWQ_AQ_SCORE_KL)
        rc = grow_streams(c, c->nstreams + layer_streams(&A), e);
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

static int commit(lwq_aq_ctx *c, int L, lwq_error *e)
{
    void **parts;
    uint64_t *bytes;
    int n = state_parts(c, c->bnd[1 - c->cur], &parts, &bytes, e);
    int rc = n < 0 ? n : lwq_aq_state_write(c->dir, c->s, (const void *const *)parts, bytes, n, e);
    free(parts);
    free(bytes);
    if (rc)
        return rc;
    char path[PATH_MAX];
    if ((rc = lwq_pathf(e, path, sizeof path, "%s/%s", c->dir, LWQ_AQ_MANIFEST)) != 0)
        return rc;
    c->s->committed = L + 1;
    c->s->nstreams = c->nstreams;
    return lwq_aq_scores_save(path, c->s, e);
}

static void progress(lwq_aq_ctx *c, int L, double wall, double t_start, const double *cpu)
{
    if (c->jlog) {
        fprintf(c->jlog, "{\"event\":\"auto_quantize_layer\",\"layer\":%d,\"wall_s\":%.6f,\"calib_cpu_s\":%.6f,"
                "\"quantize_cpu_s\":%.6f,\"record_cpu_s\":%.6f,\"replay_cpu_s\":%.6f,\"streams_cpu_s\":%.6f,"
                "\"memo_hits\":%" PRId64 ",\"memo_misses\":%" PRId64 "}\n",
                L, wall, cpu[0], cpu[1], cpu[2], cpu[3], cpu[4], c->memo.hits, c->memo.misses);
        fflush(c->jlog);
    }
    if (c->o->q.quiet)
        return;
    double el = lwq_now() - t_start, eta = el / (L + 1 - c->first) * (c->N - L - 1);
    uint64_t rss, hwm;
    lwq_rss(&rss, &hwm);
    fprintf(stderr, "score layer %d/%d  %.2fs  calib %.2fs  quantize %.2fs  replays %.2fs%s  rss %.2f GB  ETA %.0fs\n",
            L + 1, c->N, wall, cpu[0], cpu[1], cpu[2] + cpu[3], c->use_memo ? "" : " (no memo)", (double)rss / 1e9,
            eta);
}

static int depth_loop(lwq_aq_ctx *c, lwq_error *e)
{
    double t_start = lwq_now();
    int rc = 0;
    for (int L = c->first; L < c->N && rc == 0; L++) {
        double t0 = lwq_now(), cpu0[5] = {c->t_calib, c->t_quant, c->t_record, c->t_replay, c->t_streams};
        void *slot;
        if ((rc = lwq_prefetch_wait(c->pf, L - c->first, &slot, e)) != 0)
            break;
        lwq_tlist src;
        if ((rc = lwq_layersrc_views(&c->ck, L, c->ranges[L], slot, &src, e)) == 0) {
            rc = process_layer(c, L, &src, &c->s->rec[L], e);
            lwq_tlist_free(&src);
        }
        int rrc = lwq_prefetch_release(c->pf, L - c->first, rc ? NULL : e);
        if (rc == 0)
            rc = rrc;
        if (rc == 0)
            rc = commit(c, L, e);
        if (rc)
            break;
        c->cur = 1 - c->cur;
        double cpu[5] = {c->t_calib - cpu0[0], c->t_quant - cpu0[1], c->t_record - cpu0[2], c->t_replay - cpu0[3],
                         c->t_streams - cpu0[4]};
        progress(c, L, lwq_now() - t0, t_start, cpu);
        if (lwq_engine_stop_requested() && L + 1 < c->N)
            rc = lwq_errf(e, LWQ_ECANCELED, "stopped by a signal after scoring layer %d/%d; rerun the same command to "
                          "resume", L + 1, c->N);
    }
    return rc;
}

int lwq_aq_pass1(const lwq_autoq_opts *o, const char *dir, lwq_aq_scores *s, lwq_error *e)
{
    lwq_aq_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.dir = dir;
    c.s = s;
    c.first = s->committed;
    int rc = setup(&c, e);
    if (rc == 0 && o->q.log_json && !(c.jlog = fopen(o->q.log_json, "a")))
        rc = lwq_errsys(e, -errno, "%s: cannot open the JSON log", o->q.log_json);
    /* the input of the first layer to compute is bnd[cur] */
    c.cur = c.first % 2;
    if (rc == 0)
        rc = initial_state(&c, e);
    if (rc == 0 && c.first < c.N) {
        if (!o->q.quiet)
            LWQ_INFO("auto-quantize pass 1: scoring %d calibration samples (%lld tokens) of %d, %s score, layers %d..%d "
                     "of %d%s", c.cs_score.n, (long long)c.sc.real_tokens, o->q.calib->n, lwq_aq_score_name(o->score),
                     c.first, c.N - 1, c.N, c.first ? " (resumed)" : "");
        if ((rc = start_io(&c, c.first, e)) == 0)
            rc = depth_loop(&c, e);
        if (rc && c.pf)
            lwq_prefetch_cancel(c.pf);
    }
    if (rc == 0 && !s->complete) {
        if (o->score == LWQ_AQ_SCORE_KL)
            rc = lwq_aq_streams_head(&c, e);
        /* final: the scores stay (a few KB), the state files go */
        char path[PATH_MAX];
        if (rc == 0) {
            s->complete = 1;
            s->state_file[0] = 0;
            s->state_bytes = s->state_xxh64 = 0;
            s->nstreams = 0;
            if ((rc = lwq_pathf(e, path, sizeof path, "%s/%s", dir, LWQ_AQ_MANIFEST)) == 0)
                rc = lwq_aq_scores_save(path, s, e);
        }
        for (int k = 0; k < 2 && rc == 0; k++) {
            char name[32];
            snprintf(name, sizeof name, LWQ_AQ_STATE_FMT, k);
            if ((rc = lwq_pathf(e, path, sizeof path, "%s/%s", dir, name)) == 0)
                rc = lwq_durable_unlink(path, e);
        }
    }
    if (rc == 0 && !o->q.quiet && c.first < c.N)
        LWQ_INFO("auto-quantize pass 1: CPU seconds calibration %.2f, quantization %.2f, source record %.2f, replays "
                 "%.2f, kl streams %.2f; memo: %" PRId64 " of %" PRId64 " GEMM/attention calls reused",
                 c.t_calib, c.t_quant, c.t_record, c.t_replay, c.t_streams, c.memo.hits, c.memo.hits + c.memo.misses);
    ctx_free(&c);
    return rc;
}
