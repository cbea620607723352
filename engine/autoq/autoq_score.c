/* engine/autoq/autoq_score.c — pass 1 of the auto-quantize search: one pass over the disk that
 * scores every search group of every layer in every candidate format (engine/autoq/autoq.h).
 *
 * Per layer L, its weights arriving through the prefetch ring as in lwq quantize
 * (autoq_layer.c does 1-4):
 *   1. calibration forward: every calibration batch from bnd[cur] through L into bnd[nxt], the
 *      statistics observer of lwq quantize recording (engine/quant/stats.h);
 *   2. quantize: the layer once per format f (NONE included, which quantizes only what the base
 *      recipe fixes), every group that can take f in f (engine/quant/qlayer.h): the tensors and
 *      so the exact bytes lwq quantize would write;
 *   3. the probe (the previous layer's replay of one group) through L: the layer's gain; then per
 *      scored batch the source forward once more with the memo recording, and per group and
 *      format the layer with that group's tensors from step 2 (dequantized, inputs emulated)
 *      and everything else the source's; the squared error of the output against the source
 *      output (bnd[nxt]) is summed over the real tokens;
 *   4. kl score: the streams born before L go through L; each replay's output becomes a stream;
 *   5. commit: the state (bnd[nxt], the probe, the streams), then scores.json (autoq_state.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sys/file.h"
#include "core/sys/log.h"
#include "core/parallel/parallel.h"
#include "core/sys/proc.h"
#include "engine/autoq/autoq_pass1.h"
#include "engine/autoq/head/autoq_head.h"
#include "engine/eval/eval_internal.h"
#include "engine/quant/qlayer.h"
#include "engine/quant/stats.h"
#include "engine/source/layersrc.h"
#include "io/durable.h"

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
    if (d == LWQ_DEVICE_AUTO) {
        int cuda = lwq_backend_cuda_auto(e);
        if (cuda < 0)
            return cuda;
        d = cuda ? LWQ_DEVICE_CUDA : LWQ_DEVICE_CPU;
    }
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
    int ns = lwq_aq_score_samples(o);
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
    if (!(c->probe = calloc(1, c->score_bytes ? c->score_bytes : 1)))
        return lwq_errf(e, LWQ_ENOMEM, "cannot allocate %.2f GB for the probe", (double)c->score_bytes / 1e9);
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
    free(c->probe);
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

/* Streams the committed layers made (kl score): one per group and quantized format. */
static int count_streams(const lwq_aq_scores *s, int layers)
{
    int n = 0;
    for (int L = 0; L < layers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++)
            n += lwq_aq_nquantized(s->rec[L].g[k].allowed);
    return n;
}

/* The state file's parts: the boundary entering layer `next`, the probe, then the streams. */
static int state_parts(lwq_aq_ctx *c, unsigned char *bnd, void ***parts, uint64_t **bytes, lwq_error *e)
{
    int n = 2 + c->nstreams;
    *parts = malloc((size_t)n * sizeof **parts);
    *bytes = malloc((size_t)n * sizeof **bytes);
    if (!*parts || !*bytes)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    (*parts)[0] = bnd;
    (*bytes)[0] = c->bnd_bytes;
    (*parts)[1] = c->probe;
    (*bytes)[1] = c->score_bytes;
    for (int i = 0; i < c->nstreams; i++) {
        (*parts)[2 + i] = c->stream[i];
        (*bytes)[2 + i] = c->score_bytes;
    }
    return n;
}

/* Every boundary starts as the embedding of its tokens, or as the committed state. */
static int initial_state(lwq_aq_ctx *c, lwq_error *e)
{
    lwq_aq_scores *s = c->s;
    int rc = 0;
    /* the committed records were checked against the model (lwq_aq_scores_check, autoq_run.c) */
    if (s->committed > 0) {
        int want = c->o->score == LWQ_AQ_SCORE_KL ? count_streams(s, s->committed) : 0;
        if (want != s->nstreams)
            return lwq_errf(e, LWQ_ESTATE, "%s/%s names %d kl streams, its layers make %d (damaged resume state: "
                            "remove the resume directory to start over)", c->dir, LWQ_AQ_MANIFEST, s->nstreams, want);
        if ((rc = lwq_aq_streams_grow(c, want, e)) != 0)
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
    lwq_layer_weights_init(&lw, &c->be, &tail, NULL, &c->ck.cfg.names);
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
    s->tail_bytes = lwq_aq_tail_bytes(c->o, &c->ck);
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
            rc = lwq_aq_layer_process(c, L, &src, &c->s->rec[L], e);
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
        /* lm_head's group, from the source's output of the last layer (autoq_head.h) */
        uint8_t hallow[LWQ_AQ_FORMATS];
        int head = lwq_aq_head_allowed(o, &c.ck, hallow, e);
        rc = head < 0 ? head : 0;
        if (rc == 0 && head && (rc = lwq_aq_head_record(o, &c.ck, &s->rec[s->nlayers], e)) == 0) {
            double t = lwq_aq_cpu_now();
            if ((rc = lwq_aq_head_score(&c, &s->rec[s->nlayers], e)) == 0)
                s->has_head = 1;
            if (rc == 0 && !o->q.quiet)
                LWQ_INFO("auto-quantize pass 1: lm_head scored in %.2f CPU seconds", lwq_aq_cpu_now() - t);
        }
        if (rc == 0 && o->score == LWQ_AQ_SCORE_KL)
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
