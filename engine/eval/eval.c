/* engine/eval/eval.c — `lwq eval`: set-up, the streams and the depth loop (engine/eval/eval.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sys/log.h"
#include "core/parallel/parallel.h"
#include "core/sys/proc.h"
#include "engine/eval/eval_experts.h"
#include "engine/eval/eval_run.h"
#include "engine/source/layersrc.h"
#include "engine/quant/qlayer.h"
#include "engine/quant/stats.h"
#include "layout/arch/arch_qnames.h"

/* Process CPU seconds: per-phase costs that a busy machine does not distort as it does walls. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int lwq_eval_to_work(lwq_eval_ctx *v, const lwq_eval_bset *bs, int b, const unsigned char *bnd, lwq_error *e)
{
    return lwq_eval_bset_load(bs, b, &v->be, bnd, &v->work, e);
}

int lwq_eval_from_work(lwq_eval_ctx *v, const lwq_eval_bset *bs, int b, unsigned char *bnd, lwq_error *e)
{
    return lwq_eval_bset_store(bs, b, &v->be, &v->work, bnd, e);
}

/* ---- a stream over a batch set ------------------------------------------------------------------ */

static int stream_embed(lwq_eval_ctx *v, lwq_eval_stream *s, const lwq_eval_bset *bs, const lwq_tlist *tail,
                        lwq_error *e)
{
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &v->be, tail, NULL, &v->ck.cfg.names);
    int rc = 0;
    for (int b = 0; b < bs->nb && rc == 0; b++) {
        lwq_tensor h = lwq_eval_bset_view(bs, b, &v->work);
        if ((rc = lwq_model_embed(&s->model, &lw.w, bs->tokens[b], &h, e)) == 0)
            rc = lwq_eval_from_work(v, bs, b, s->bnd, e);
    }
    lwq_layer_weights_free(&lw);
    return rc;
}

/* Layer L of stream s over every batch of bs, in place on its boundary. */
static int stream_layer(lwq_eval_ctx *v, lwq_eval_stream *s, const lwq_eval_bset *bs, int L, const lwq_weights *w,
                        const lwq_observer *obs, lwq_error *e)
{
    int rc = 0;
    for (int b = 0; b < bs->nb && rc == 0; b++) {
        lwq_tensor h = lwq_eval_bset_view(bs, b, &v->work);
        if ((rc = lwq_eval_to_work(v, bs, b, s->bnd, e)) == 0 &&
            (rc = lwq_model_layer_forward(&s->model, L, w, &bs->batches[b], &h, obs, e)) == 0)
            rc = lwq_eval_from_work(v, bs, b, s->bnd, e);
    }
    return rc;
}

/* ---- set-up ------------------------------------------------------------------------------------- */

static int build_choices(lwq_eval_ctx *v, lwq_eval_stream *s, const lwq_recipe *rc_, lwq_error *e)
{
    /* GPTQ calibrates sequentially (each layer on the quantized layers before it); the in-memory
     * candidates all calibrate on the source stream, so a GPTQ candidate here would not be what
     * lwq quantize writes */
    if (lwq_recipe_uses_gptq(rc_))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "recipe \"%s\" uses gptq, which cannot be built in memory (it "
                        "calibrates each layer on the quantized layers before it); run lwq quantize --algo gptq "
                        "and evaluate its output: lwq eval SRC QUANT_DIR", rc_->name);
    /* as a quantized lm_head (tools/cmd_eval.c), a quantized embedding is not emulated: the stream
     * embeds with the source table */
    char em[LWQ_ARCH_NAME_MAX];
    lwq_names_full(&v->ck.cfg.names, "model.embed_tokens", em, sizeof em);
    lwq_qnames emq; /* under its in-memory name (layout/arch/arch_qnames.h) */
    lwq_arch_qnames_module(v->ck.cfg.family, em, &emq);
    int embed = lwq_recipe_embedding_names(rc_, &emq, e);
    if (embed < 0)
        return embed;
    if (embed)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "recipe \"%s\" quantizes the token embedding (%s), which lwq eval does not "
                        "emulate (the stream embeds with the source table)", rc_->name, em);
    s->choice = calloc((size_t)v->N, sizeof *s->choice);
    if (!s->choice)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int L = 0; L < v->N; L++) {
        const lwq_arch_layer *p = &v->plans[L];
        s->choice[L] = calloc((size_t)(p->nlinears ? p->nlinears : 1), sizeof **s->choice);
        if (!s->choice[L])
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        for (int i = 0; i < p->nlinears; i++) {
            s->choice[L][i] = lwq_qlayer_choice(rc_, p, i);
        }
        int rc = lwq_qlayer_check(p, s->choice[L], e);
        if (rc)
            return rc;
    }
    s->kv_fp8 = rc_->kv != LWQ_KV_NONE;
    return 0;
}

static int setup(lwq_eval_ctx *v, lwq_error *e)
{
    const lwq_eval_opts *o = v->o;
    int rc = lwq_ckpt_open(o->model_dir, &v->ck, e);
    if (rc)
        return rc;
    v->ck_open = 1;
    /* full attention only: a window shorter than a sequence is refused before any weight is read */
    if ((rc = lwq_calib_set_check_window(o->data, &v->ck.cfg, o->model_dir, "an eval sequence", "--data-seq", e)) != 0 ||
        (rc = lwq_calib_set_check_window(o->calib, &v->ck.cfg, o->model_dir, "a calibration sequence", "--calib-seq",
                                         e)) != 0)
        return rc;
    v->N = v->ck.cfg.num_hidden_layers;
    v->hidden = v->ck.cfg.hidden_size;
    v->act = v->ck.cfg.dtype;
    if (v->act != LWQ_BF16 && v->act != LWQ_F16 && v->act != LWQ_F32)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: dtype %s is not a compute dtype (BF16, F16, F32)", o->model_dir,
                        lwq_dtype_name(v->act));
    lwq_arch_report rep = {0};
    if ((rc = lwq_arch_check(&v->ck, &rep, e)) > 0)
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: %d tensor problem(s) against the %s architecture (lwq inspect shows them)",
                      v->ck.dir, rc, v->ck.cfg.model_type);
    else if (rc == 0 && rep.quantized_nvfp4 + rep.quantized_fp8 > 0)
        rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s is a quantized checkpoint (%s is stored quantized); the source of lwq "
                      "eval is the unquantized model (lwq eval SRC QUANT_DIR)", v->ck.dir, rep.first_quantized);
    lwq_arch_report_free(&rep);
    if (rc)
        return rc;
    if (!(v->plans = calloc((size_t)v->N, sizeof *v->plans)) || !(v->cand = calloc((size_t)o->ncand, sizeof *v->cand)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int L = 0; L < v->N; L++)
        if ((rc = lwq_arch_layer_plan(&v->ck.cfg, L, &v->plans[L], e)) != 0)
            return rc;
    for (int c = 0; c < o->ncand; c++) {
        const lwq_eval_candidate *cd = &o->cand[c];
        if (cd->recipe && lwq_recipe_uses_gptq(cd->recipe)) {
            return lwq_errf(e, LWQ_EUNSUPPORTED, "candidate %s uses gptq, which calibrates each layer on the quantized "
                            "previous layers; that is not built in memory: run lwq quantize with it and evaluate the "
                            "written checkpoint (lwq eval SRC QUANT_DIR)", cd->name);
        } else if (cd->recipe) {
            v->in_memory = 1;
            rc = build_choices(v, &v->cand[c], cd->recipe, e);
        } else {
            rc = lwq_qdir_open(&v->cand[c].qd, cd->quant_dir, &v->ck, e);
            v->cand[c].kv_fp8 = v->cand[c].qd.kv_fp8 && !cd->kv_none;
        }
        if (rc)
            return rc;
        if (o->weights_only)
            v->cand[c].kv_fp8 = 0; /* the KV cache runs in the activation dtype */
        if (v->cand[c].kv_fp8 && v->ck.cfg.family->attn == LWQ_MIXER_MLA)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "candidate %s: an FP8 KV cache of multi-head latent attention (the "
                            "serving engine caches the latent) is not emulated; use --kv-cache none", cd->name);
    }
    if (v->in_memory && !o->calib)
        return lwq_errf(e, LWQ_EINVAL, "candidates built from a recipe need calibration data");
    lwq_device_choice d = o->device;
    if (d == LWQ_DEVICE_AUTO) {
        int cuda = lwq_backend_cuda_auto(e);
        if (cuda < 0)
            return cuda;
        d = cuda ? LWQ_DEVICE_CUDA : LWQ_DEVICE_CPU;
    }
    rc = d == LWQ_DEVICE_CUDA ? lwq_backend_cuda_create(&v->be, 0, e) : lwq_backend_cpu_create(&v->be, o->threads, e);
    if (rc)
        return rc;
    v->be_open = 1;
    lwq_qops_init(&v->qops, &v->be);
    if (o->threads > 0)
        lwq_parallel_set_threads(o->threads);
    int B = o->batch_size > 0 ? o->batch_size : 8;
    size_t esz = lwq_dtype_size(v->act);
    if ((rc = lwq_eval_bset_build(&v->data, o->data, B, &v->be, v->hidden, esz, "eval", e)) != 0)
        return rc;
    if (v->in_memory && (rc = lwq_eval_bset_build(&v->calib, o->calib, B, &v->be, v->hidden, esz, "calibration", e)) != 0)
        return rc;
    int64_t rows = v->data.max_rows > v->calib.max_rows ? v->data.max_rows : v->calib.max_rows;
    int64_t shape[2] = {rows, v->hidden};
    if ((rc = lwq_backend_tensor_alloc(&v->be, v->act, 2, shape, &v->work, e)) != 0)
        return rc;
    /* the streams: models (candidates run through the emulating wrapper) and boundaries */
    lwq_eval_stream *all[3] = {&v->src, v->in_memory ? &v->cal : NULL, NULL};
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (!all[k])
            continue;
        const lwq_eval_bset *bs = k == 1 ? &v->calib : &v->data;
        if ((rc = lwq_model_init(&all[k]->model, &v->ck.cfg, &v->be, v->act, e)) == 0)
            all[k]->model_open = 1;
        if (rc == 0 && !(all[k]->bnd = malloc(bs->boff[bs->nb] ? bs->boff[bs->nb] : 1)))
            rc = lwq_errf(e, LWQ_ENOMEM, "cannot allocate %.2f GB of boundary activations",
                          (double)bs->boff[bs->nb] / 1e9);
    }
    for (int c = 0; c < o->ncand && rc == 0; c++) {
        lwq_eval_stream *s = &v->cand[c];
        lwq_emul_init(&s->em, &v->be);
        s->em_open = 1;
        if ((rc = lwq_model_init(&s->model, &v->ck.cfg, &s->em.be, v->act, e)) == 0)
            s->model_open = 1;
        if (rc == 0 && !(s->bnd = malloc(v->data.boff[v->data.nb] ? v->data.boff[v->data.nb] : 1)))
            rc = lwq_errf(e, LWQ_ENOMEM, "cannot allocate %.2f GB of boundary activations",
                          (double)v->data.boff[v->data.nb] / 1e9);
    }
    return rc;
}

static int start_io(lwq_eval_ctx *v, lwq_error *e)
{
    lwq_io_reader_opts ro;
    lwq_io_reader_opts_default(&ro);
    int rc = lwq_io_reader_init(&v->rd, &ro, e);
    if (rc)
        return rc;
    if (!(v->ranges = calloc((size_t)v->N, sizeof *v->ranges)) || !(v->nranges = calloc((size_t)v->N, sizeof(int))))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    uint64_t slot = LWQ_IO_ALIGN;
    for (int L = 0; L < v->N; L++) {
        lwq_io_plan p;
        if ((rc = lwq_layersrc_ranges(&v->ck, L, &v->ranges[L], &v->nranges[L], e)) != 0 ||
            (rc = lwq_io_plan_build(&p, v->ranges[L], (size_t)v->nranges[L], LWQ_LAYERSRC_MERGE_GAP, e)) != 0)
            return rc;
        slot = p.bytes > slot ? p.bytes : slot;
        lwq_io_plan_free(&p);
    }
    lwq_pool_opts po = {0};
    po.slot_bytes = (size_t)slot;
    po.nslots = v->o->prefetch > 0 ? v->o->prefetch : 2;
    po.numa_node = -1;
    if ((rc = lwq_pool_init(&v->pool, &po, e)) != 0)
        return rc;
    v->pool_open = 1;
    lwq_prefetch_opts pf = {v->rd, &v->pool, LWQ_LAYERSRC_MERGE_GAP};
    if ((rc = lwq_prefetch_init(&v->pf, &pf, e)) != 0)
        return rc;
    for (int L = 0; L < v->N; L++)
        if (lwq_prefetch_submit(v->pf, v->ranges[L], (size_t)v->nranges[L], e) < 0)
            return e->code;
    return 0;
}

/* Every stream's boundary starts as its model's embedding of its tokens. */
static int embed_all(lwq_eval_ctx *v, lwq_error *e)
{
    lwq_tlist tail;
    int rc = lwq_layersrc_read(&v->ck, -1, &tail, e);
    if (rc)
        return rc;
    rc = stream_embed(v, &v->src, &v->data, &tail, e);
    if (rc == 0 && v->in_memory)
        rc = stream_embed(v, &v->cal, &v->calib, &tail, e);
    for (int c = 0; c < v->o->ncand && rc == 0; c++) {
        if (v->o->cand[c].recipe) {
            rc = stream_embed(v, &v->cand[c], &v->data, &tail, e);
            continue;
        }
        lwq_tlist qt;
        if ((rc = lwq_qdir_read_layer(&v->cand[c].qd, -1, &qt, e)) == 0)
            rc = stream_embed(v, &v->cand[c], &v->data, &qt, e);
        lwq_tlist_free(&qt);
    }
    lwq_tlist_free(&tail);
    return rc;
}

/* ---- one layer ---------------------------------------------------------------------------------- */

/* The Hessian statistics candidate c's choices need in layer L, as lwq quantize asks for them
 * (LWQ_STATS_H_BLOCK for local_hessian NVFP4 linears, LWQ_STATS_H_FULL for GPTQ ones). */
static uint8_t *hessians_wanted(lwq_eval_ctx *v, int c, int L)
{
    const lwq_arch_layer *p = &v->plans[L];
    uint8_t *w = calloc((size_t)(p->nlinears ? p->nlinears : 1), 1);
    for (int i = 0; w && i < p->nlinears; i++)
        w[i] = (uint8_t)lwq_qlayer_hessian(&p->linears[i], &v->cand[c].choice[L][i]);
    return w;
}

/* The calibration statistics of one layer: one lwq_layer_stats per distinct set of Hessian
 * needs among the recipe candidates (a local_hessian and a GPTQ candidate cannot share one), all
 * fed by one calibration forward through a fan-out observer. */
typedef struct cal_stats {
    int n;                   /* candidates */
    int *own;                /* (n) the candidate whose stats candidate c uses, -1 for none */
    lwq_layer_stats *st;     /* (n) initialised where own[c] == c */
    lwq_observer obs;
} cal_stats;

static int fan_input(void *ctx, int layer, const char *module, const lwq_tensor *x, const lwq_tensor *valid,
                     const int32_t *tok, lwq_error *e)
{
    cal_stats *cs = ctx;
    for (int c = 0; c < cs->n; c++)
        if (cs->own[c] == c && cs->st[c].obs.linear_input) {
            int rc = cs->st[c].obs.linear_input(cs->st[c].obs.ctx, layer, module, x, valid, tok, e);
            if (rc < 0)
                return rc;
        }
    return 0;
}

static int fan_batch(void *ctx, int layer, const lwq_batch *b, lwq_error *e)
{
    cal_stats *cs = ctx;
    for (int c = 0; c < cs->n; c++)
        if (cs->own[c] == c && cs->st[c].obs.begin_batch) {
            int rc = cs->st[c].obs.begin_batch(cs->st[c].obs.ctx, layer, b, e);
            if (rc < 0)
                return rc;
        }
    return 0;
}

/* The calibration forward is over: the Hessians' per-sequence partials are closed and summed. */
static int cal_stats_finish(cal_stats *cs, lwq_error *e)
{
    for (int c = 0; c < cs->n; c++)
        if (cs->own[c] == c) {
            int rc = lwq_stats_finish(&cs->st[c], NULL, e);
            if (rc < 0)
                return rc;
        }
    return 0;
}

static int fan_kv(void *ctx, int layer, const lwq_tensor *k, const lwq_tensor *vv, const lwq_tensor *valid,
                  lwq_error *e)
{
    cal_stats *cs = ctx;
    for (int c = 0; c < cs->n; c++)
        if (cs->own[c] == c && cs->st[c].obs.kv) {
            int rc = cs->st[c].obs.kv(cs->st[c].obs.ctx, layer, k, vv, valid, e);
            if (rc < 0)
                return rc;
        }
    return 0;
}

static int fan_counts(void *ctx, int layer, const int64_t *counts, int n_experts, lwq_error *e)
{
    cal_stats *cs = ctx;
    for (int c = 0; c < cs->n; c++)
        if (cs->own[c] == c && cs->st[c].obs.expert_counts) {
            int rc = cs->st[c].obs.expert_counts(cs->st[c].obs.ctx, layer, counts, n_experts, e);
            if (rc < 0)
                return rc;
        }
    return 0;
}

static void cal_stats_free(cal_stats *cs)
{
    for (int c = 0; cs->own && c < cs->n; c++)
        if (cs->own[c] == c)
            lwq_stats_free(&cs->st[c]);
    free(cs->own);
    free(cs->st);
    memset(cs, 0, sizeof *cs);
}

static int cal_stats_init(lwq_eval_ctx *v, int L, cal_stats *cs, lwq_error *e)
{
    const lwq_arch_layer *p = &v->plans[L];
    int n = v->o->ncand, rc = 0;
    memset(cs, 0, sizeof *cs);
    cs->n = n;
    cs->own = malloc((size_t)n * sizeof *cs->own);
    cs->st = calloc((size_t)n, sizeof *cs->st);
    uint8_t **want = calloc((size_t)n, sizeof *want);
    if (!cs->own || !cs->st || !want)
        rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int c = 0; rc == 0 && c < n; c++) {
        cs->own[c] = -1;
        if (!v->cand[c].choice)
            continue;
        if (!(want[c] = hessians_wanted(v, c, L))) {
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
            break;
        }
        for (int d = 0; d < c && cs->own[c] < 0; d++)
            if (want[d] && !memcmp(want[d], want[c], (size_t)(p->nlinears ? p->nlinears : 1)))
                cs->own[c] = cs->own[d];
        if (cs->own[c] >= 0)
            continue;
        if ((rc = lwq_stats_init(&cs->st[c], p, &v->be, p->is_moe ? v->ck.cfg.num_experts : 0,
                                 v->o->include_padding, v->o->all_experts, want[c], &v->ck.cfg.names, e)) == 0)
            cs->own[c] = c;
    }
    for (int c = 0; want && c < n; c++)
        free(want[c]);
    free(want);
    cs->obs.ctx = cs;
    cs->obs.linear_input = fan_input;
    cs->obs.begin_batch = fan_batch;
    cs->obs.kv = fan_kv;
    cs->obs.expert_counts = fan_counts;
    cs->obs.all_experts = v->o->all_experts;
    if (rc)
        cal_stats_free(cs);
    return rc;
}

/* Candidate c's layer L: its tensors (quantized in memory from `st`, or read from its checkpoint),
 * dequantized, run over the eval batches, compared with the source stream. */
static int cand_layer(lwq_eval_ctx *v, int c, int L, const lwq_tlist *src, const lwq_weights *wsrc,
                      const lwq_layer_stats *st, double *q_s, double *f_s, double *f_cpu, lwq_error *e)
{
    lwq_eval_stream *s = &v->cand[c];
    const lwq_arch_layer *p = &v->plans[L];
    lwq_tlist qt = {0};
    lwq_qlayer_view view = {0};
    double t = lwq_now();
    int rc;
    if (s->choice) {
        lwq_qlayer_report rep;
        lwq_kv_mode kv = v->o->cand[c].recipe->kv;
        /* cast mode writes no scales: the stream's kv_fp8 gives it scale 1.0 */
        rc = lwq_qlayer_run(p, s->choice[L], kv == LWQ_KV_FP8 ? LWQ_KV_FP8 : LWQ_KV_NONE, st, src, &v->qops, &qt,
                            &rep, e);
        lwq_qlayer_report_free(&rep);
        lwq_tlist_sort(&qt);
    } else {
        rc = lwq_qdir_read_layer(&s->qd, L, &qt, e);
    }
    if (rc == 0)
        rc = lwq_qlayer_view_make(p, &qt, s->kv_fp8, v->o->weights_only, &s->em, &view, e);
    if (rc != 0 && !s->choice)
        lwq_qdir_name_file(&s->qd, e);
    *q_s += lwq_now() - t;
    t = lwq_now();
    double tc = cpu_now();
    if (rc == 0) {
        lwq_layer_weights lw;
        lwq_emul_weights cw;
        lwq_layer_weights_init(&lw, &v->be, &qt, &view.overlay, &v->ck.cfg.names);
        lwq_emul_weights_init(&cw, &s->em, &lw.w, &v->ck.cfg.names);
        lwq_eval_experts X;
        int moe = p->is_moe && v->ck.cfg.num_experts > 0;
        if (moe)
            rc = lwq_eval_experts_init(&X, p, v->ck.cfg.num_experts, &v->ck.cfg.names, &v->be, &s->em.be,
                                       v->act, wsrc, &cw.w, e);
        if (rc == 0)
            rc = stream_layer(v, s, &v->data, L, &cw.w, moe ? &X.obs : NULL, e);
        if (moe) {
            if (rc == 0)
                lwq_eval_experts_worst(&X, &v->res->c[c].layers[L]);
            lwq_eval_experts_free(&X);
        }
        for (int i = 0; rc == 0 && i < s->em.n; i++)
            if (s->em.lin[i].dev_weight && s->em.lin[i].hits == 0)
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: its input quantization cannot be emulated: the %s forward does "
                              "not run this linear as one GEMM", s->em.lin[i].module, v->ck.cfg.model_type);
        lwq_layer_weights_free(&lw);
    }
    *f_s += lwq_now() - t;
    *f_cpu += cpu_now() - tc;
    if (rc == 0) {
        lwq_eval_cand_result *cr = &v->res->c[c];
        lwq_eval_layer *ly = &cr->layers[L];
        lwq_eval_layer_diff(v, v->src.bnd, s->bnd, &ly->rel_mse, &ly->max_abs);
        cr->linear_bytes += view.linear_bytes;
        cr->linear_weights += view.linear_weights;
        cr->quantized_linears += view.quantized;
        cr->output_bytes += lwq_tlist_bytes(&qt);
    }
    lwq_emul_reset(&s->em);
    lwq_qlayer_view_free(&view);
    lwq_tlist_free(&qt);
    return rc;
}

static void log_layer(lwq_eval_ctx *v, int L, double wait_s, double cal_s, double src_s, double q_s, double f_s,
                      const double *cpu)
{
    if (!v->jlog)
        return;
    fprintf(v->jlog, "{\"event\":\"eval_layer\",\"layer\":%d,\"read_wait_s\":%.6f,\"calib_forward_s\":%.6f,"
                     "\"src_forward_s\":%.6f,\"quantize_s\":%.6f,\"cand_forward_s\":%.6f,\"calib_forward_cpu_s\":%.6f,"
                     "\"src_forward_cpu_s\":%.6f,\"cand_forward_cpu_s\":%.6f,\"candidates\":[",
            L, wait_s, cal_s, src_s, q_s, f_s, cpu[0], cpu[1], cpu[2]);
    for (int c = 0; c < v->o->ncand; c++)
        fprintf(v->jlog, "%s{\"name\":\"%s\",\"rel_mse\":%.9g,\"max_abs\":%.9g}", c ? "," : "", v->res->c[c].name,
                v->res->c[c].layers[L].rel_mse, v->res->c[c].layers[L].max_abs);
    fprintf(v->jlog, "]}\n");
    fflush(v->jlog);
}

static int depth_loop(lwq_eval_ctx *v, lwq_error *e)
{
    const lwq_eval_opts *o = v->o;
    double t_start = lwq_now();
    int rc = 0;
    for (int L = 0; L < v->N && rc == 0; L++) {
        void *slot;
        double t = lwq_now();
        if ((rc = lwq_prefetch_wait(v->pf, L, &slot, e)) != 0)
            break;
        double wait_s = lwq_now() - t, cal_s = 0, src_s, q_s = 0, f_s = 0, cpu[3] = {0, 0, 0}, tc;
        lwq_tlist src;
        if ((rc = lwq_layersrc_views(&v->ck, L, v->ranges[L], slot, &src, e)) != 0)
            break;
        lwq_layer_weights lw;
        lwq_layer_weights_init(&lw, &v->be, &src, NULL, &v->ck.cfg.names);
        cal_stats cs;
        int st_open = 0;
        if (v->in_memory) {
            rc = cal_stats_init(v, L, &cs, e);
            st_open = rc == 0;
            t = lwq_now();
            tc = cpu_now();
            if (rc == 0)
                rc = stream_layer(v, &v->cal, &v->calib, L, &lw.w, &cs.obs, e);
            if (rc == 0)
                rc = cal_stats_finish(&cs, e);
            cal_s = lwq_now() - t;
            cpu[0] = cpu_now() - tc;
        }
        t = lwq_now();
        tc = cpu_now();
        if (rc == 0)
            rc = stream_layer(v, &v->src, &v->data, L, &lw.w, NULL, e);
        src_s = lwq_now() - t;
        cpu[1] = cpu_now() - tc;
        for (int c = 0; c < o->ncand && rc == 0; c++)
            rc = cand_layer(v, c, L, &src, &lw.w, st_open && cs.own[c] >= 0 ? &cs.st[cs.own[c]] : NULL, &q_s, &f_s,
                            &cpu[2], e);
        if (st_open)
            cal_stats_free(&cs);
        lwq_layer_weights_free(&lw);
        lwq_tlist_free(&src);
        int rrc = lwq_prefetch_release(v->pf, L, rc ? NULL : e);
        if (rc == 0)
            rc = rrc;
        if (rc)
            break;
        v->res->calib_s += cal_s;
        v->res->forward_src_s += src_s;
        v->res->quantize_s += q_s;
        v->res->forward_q_s += f_s;
        log_layer(v, L, wait_s, cal_s, src_s, q_s, f_s, cpu);
        if (!o->quiet) {
            double el = lwq_now() - t_start, eta = el / (L + 1) * (v->N - L - 1);
            uint64_t rss, hwm;
            lwq_rss(&rss, &hwm);
            fprintf(stderr, "layer %d/%d  read-wait %.2fs  calib %.2fs  source %.2fs  quantize %.2fs  candidates %.2fs"
                    "  rss %.2f GB", L + 1, v->N, wait_s, cal_s, src_s, q_s, f_s, (double)rss / 1e9);
            for (int c = 0; c < o->ncand && c < 4; c++)
                fprintf(stderr, "  %s rel_mse %.3g", v->res->c[c].name, v->res->c[c].layers[L].rel_mse);
            fprintf(stderr, "%s  ETA %.0fs\n", o->ncand > 4 ? " ..." : "", eta);
        }
    }
    return rc;
}

/* ---- entry -------------------------------------------------------------------------------------- */

static void stream_free(lwq_eval_ctx *v, lwq_eval_stream *s)
{
    free(s->bnd);
    if (s->model_open)
        lwq_model_free(&s->model);
    if (s->em_open)
        lwq_emul_free(&s->em);
    lwq_qdir_free(&s->qd);
    for (int L = 0; s->choice && L < v->N; L++)
        free(s->choice[L]);
    free(s->choice);
}

static void ctx_free(lwq_eval_ctx *v)
{
    if (v->pf)
        lwq_prefetch_free(v->pf);
    if (v->rd)
        lwq_io_reader_free(v->rd);
    if (v->pool_open)
        lwq_pool_free(&v->pool);
    for (int L = 0; v->ranges && L < v->N; L++)
        free(v->ranges[L]);
    free(v->ranges);
    free(v->nranges);
    stream_free(v, &v->src);
    stream_free(v, &v->cal);
    for (int c = 0; v->cand && c < v->o->ncand; c++)
        stream_free(v, &v->cand[c]);
    free(v->cand);
    if (v->be_open) {
        lwq_eval_bset_free(&v->data, &v->be);
        lwq_eval_bset_free(&v->calib, &v->be);
        if (v->work.data)
            lwq_backend_tensor_free(&v->be, &v->work);
        lwq_qops_free(&v->qops);
        lwq_backend_destroy(&v->be);
    }
    for (int L = 0; v->plans && L < v->N; L++)
        lwq_arch_layer_free(&v->plans[L]);
    free(v->plans);
    if (v->ck_open)
        lwq_ckpt_free(&v->ck);
    if (v->jlog)
        fclose(v->jlog);
}

void lwq_eval_result_free(lwq_eval_result *r)
{
    for (int c = 0; r->c && c < r->ncand; c++)
        free(r->c[c].layers);
    free(r->c);
    memset(r, 0, sizeof *r);
}

int lwq_eval_run(const lwq_eval_opts *o, lwq_eval_result *res, lwq_error *e)
{
    memset(res, 0, sizeof *res);
    if (o->ncand <= 0)
        return lwq_errf(e, LWQ_EINVAL, "nothing to evaluate: no candidate");
    double t0 = lwq_now();
    lwq_eval_ctx v;
    memset(&v, 0, sizeof v);
    v.o = o;
    v.res = res;
    int rc = setup(&v, e);
    if (rc == 0 && o->log_json && !(v.jlog = fopen(o->log_json, "a")))
        rc = lwq_errsys(e, -errno, "%s: cannot open the JSON log", o->log_json);
    if (rc == 0) {
        snprintf(res->model, sizeof res->model, "%s", o->model_dir);
        res->nlayers = v.N;
        res->ncand = o->ncand;
        res->eval_tokens = v.data.real_tokens;
        res->weights_only = o->weights_only;
        if (!(res->c = calloc((size_t)o->ncand, sizeof *res->c)))
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        for (int c = 0; rc == 0 && c < o->ncand; c++) {
            snprintf(res->c[c].name, sizeof res->c[c].name, "%s", o->cand[c].name);
            if (!(res->c[c].layers = calloc((size_t)v.N, sizeof *res->c[c].layers)))
                rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        }
    }
    if (rc == 0) {
        lwq_mem_plan p;
        if ((rc = lwq_eval_plan(o, &p, e)) == 0) {
            if (!o->quiet)
                lwq_eval_plan_print(&p, o, stderr);
            if (o->max_cpu_gb > 0 && (double)p.host_peak > o->max_cpu_gb * 1e9)
                rc = lwq_errf(e, LWQ_ENOMEM, "the plan needs %.2f GB of host memory, more than --max-cpu-memory-gb "
                              "%.2f; lower --data-size/--data-seq or --calib-size/--calib-seq",
                              (double)p.host_peak / 1e9, o->max_cpu_gb);
            else if (o->max_gpu_gb > 0 && (double)p.gpu_peak > o->max_gpu_gb * 1e9)
                rc = lwq_errf(e, LWQ_ENOMEM, "the plan needs %.2f GB of GPU memory, more than --max-gpu-memory-gb %.2f",
                              (double)p.gpu_peak / 1e9, o->max_gpu_gb);
        }
    }
    if (rc == 0)
        rc = embed_all(&v, e);
    if (rc == 0)
        rc = start_io(&v, e);
    if (rc == 0)
        rc = depth_loop(&v, e);
    if (rc && v.pf)
        lwq_prefetch_cancel(v.pf);
    if (rc == 0) { /* the ring is not needed for the head */
        lwq_prefetch_free(v.pf);
        v.pf = NULL;
        lwq_io_reader_free(v.rd);
        v.rd = NULL;
        lwq_pool_free(&v.pool);
        v.pool_open = 0;
        double t = lwq_now();
        if (!o->quiet)
            fprintf(stderr, "head: final norm + lm_head of %d model(s) over %lld rows...\n", 1 + o->ncand,
                    (long long)v.data.boff[v.data.nb] / (long long)(v.hidden * (int64_t)lwq_dtype_size(v.act)));
        rc = lwq_eval_head(&v, e);
        if (rc == 0 && !o->quiet)
            fprintf(stderr, "head: %.2fs\n", lwq_now() - t);
    }
    for (int c = 0; rc == 0 && c < o->ncand; c++) {
        lwq_eval_cand_result *cr = &res->c[c];
        cr->bits_per_weight = cr->linear_weights ? 8.0 * (double)cr->linear_bytes / (double)cr->linear_weights : 0;
        uint64_t tail = 0;
        if (o->cand[c].recipe) {
            for (int i = 0; i < v.ck.ntensors; i++)
                if (v.ck.tensors[i].layer < 0 || v.ck.tensors[i].layer >= v.N)
                    tail += v.ck.tensors[i].nbytes;
        } else {
            tail = v.cand[c].qd.tail_bytes;
        }
        cr->output_bytes += tail;
    }
    res->wall_s = lwq_now() - t0;
    uint64_t rss_now = 0;
    lwq_rss(&rss_now, &res->peak_rss_bytes);
    if (rc == 0 && v.jlog) {
        fprintf(v.jlog, "{\"event\":\"eval_summary\",\"wall_s\":%.3f,\"peak_rss_bytes\":%" PRIu64 ",\"tokens\":%" PRId64
                ",\"ppl_src\":%.9g", res->wall_s, res->peak_rss_bytes, res->tokens, res->ppl_src);
        for (int c = 0; c < o->ncand; c++)
            fprintf(v.jlog, ",\"%s\":{\"kl\":%.9g,\"top1_agree\":%.9g,\"ppl\":%.9g}", res->c[c].name, res->c[c].kl,
                    res->c[c].top1_agree, res->c[c].ppl);
        fprintf(v.jlog, "}\n");
    }
    ctx_free(&v);
    if (rc)
        lwq_eval_result_free(res);
    return rc;
}
