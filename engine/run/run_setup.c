/* engine/run/run_setup.c — start-up and tear-down of a run (engine thread, before any other thread
 * of the run exists and after they are gone): the checkpoint opened and checked, the per-layer
 * plans and quantization choices, the backend and model, the calibration batches, the JSON log,
 * the memory plan against the limits, the fingerprint, the fresh/restart/resume decision for
 * the output and resume directories, and the two boundary buffers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/data/hash.h"
#include "core/sys/log.h"
#include "core/parallel/parallel.h"
#include "engine/run/resume/fingerprint.h"
#include "engine/quant/dist.h"
#include "engine/run/run_internal.h"
#include "io/durable.h"
#include "layout/arch/arch_qnames.h"
#include "layout/format/export.h"
#include "io/sys.h"

void lwq_calib_set_free(lwq_calib_set *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        free(c->ids[i]);
    free(c->ids);
    free(c->len);
    memset(c, 0, sizeof *c);
}

int64_t lwq_calib_set_longest(const lwq_calib_set *c)
{
    int64_t m = 0;
    for (int i = 0; c && i < c->n; i++)
        m = c->len[i] > m ? c->len[i] : m;
    return m;
}

int lwq_calib_set_check_window(const lwq_calib_set *c, const lwq_model_config *cfg, const char *model_dir,
                               const char *what, const char *option, lwq_error *e)
{
    return lwq_config_check_seq(cfg, model_dir, lwq_calib_set_longest(c), what, option, e);
}

/* ---- the checkpoint, the plans, the backend ------------------------------------------------- */

static int check_checkpoint(lwq_run *r, lwq_error *e)
{
    lwq_arch_report rep = {0};
    int rc = lwq_arch_check(&r->ck, &rep, e);
    if (rc < 0)
        return rc;
    for (int i = 0; i < rep.n; i++) {
        const lwq_arch_issue *x = &rep.v[i];
        if (x->kind == LWQ_ISSUE_UNEXPECTED)
            LWQ_WARN("tensor %s is not part of the %s architecture; it is copied unchanged", x->name,
                     r->ck.cfg.model_type);
        else if (x->kind == LWQ_ISSUE_EXTRA_LAYER)
            LWQ_INFO("layer %d is beyond num_hidden_layers (an MTP block?); it goes to the tail unchanged", x->layer);
    }
    if (rep.quantized_nvfp4 + rep.quantized_fp8 > 0) {
        rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s is already quantized (%s and %d more linear weights are stored as "
                      "NVFP4 or FP8 with their scales); lwq quantizes BF16, F16 and F32 checkpoints and FP8-block or "
                      "MXFP4 sources", r->ck.dir, rep.first_quantized, rep.quantized_nvfp4 + rep.quantized_fp8 - 1);
        lwq_arch_report_free(&rep);
        return rc;
    }
    if (rc > 0) {
        const lwq_arch_issue *x = NULL;
        for (int i = 0; i < rep.n && !x; i++)
            if (rep.v[i].kind == LWQ_ISSUE_MISSING || rep.v[i].kind == LWQ_ISSUE_BAD_SHAPE)
                x = &rep.v[i];
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: %d tensor problem(s); first: layer %d: %s %s%s%s", r->ck.dir, rc,
                      x ? x->layer : -1, x ? lwq_arch_issue_name(x->kind) : "?", x ? x->name : "",
                      x && x->detail[0] ? ": " : "", x ? x->detail : "");
    }
    lwq_arch_report_free(&rep);
    return rc;
}

static int build_plans(lwq_run *r, lwq_error *e)
{
    r->plans = calloc((size_t)r->nlayers, sizeof *r->plans);
    r->choice = calloc((size_t)r->nlayers, sizeof *r->choice);
    r->lstat = calloc((size_t)r->nlayers, sizeof *r->lstat);
    if (!r->plans || !r->choice || !r->lstat)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    int quantized = 0;
    for (int L = 0; L < r->nlayers; L++) {
        int rc = lwq_arch_layer_plan(&r->ck.cfg, L, &r->plans[L], e);
        if (rc)
            return rc;
        lwq_arch_layer *p = &r->plans[L];
        r->choice[L] = calloc((size_t)(p->nlinears ? p->nlinears : 1), sizeof **r->choice);
        if (!r->choice[L])
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        for (int i = 0; i < p->nlinears; i++) {
            r->choice[L][i] = lwq_qlayer_choice(r->o->recipe, p, i);
            quantized += r->choice[L][i].format != LWQ_QFMT_NONE;
            /* the k/v cache quantizers of Model Optimizer live on the attention module */
            if (p->linears[i].role == LWQ_ROLE_O) {
                char attn[LWQ_ARCH_NAME_MAX];
                snprintf(attn, sizeof attn, "%s", p->linears[i].name);
                char *dot = strrchr(attn, '.');
                if (dot)
                    *dot = 0;
                lwq_qnames aq; /* under its in-memory name (nemotron_h: model.layers.N.mixer) */
                lwq_arch_qnames_module(r->ck.cfg.family, attn, &aq);
                if ((rc = lwq_recipe_check_kv_names(r->o->recipe, &aq, e)) != 0 ||
                    (rc = lwq_recipe_check_unwritten_names(r->o->recipe, &aq, 0, LWQ_QSEL_QBMM, e)) != 0 ||
                    (rc = lwq_recipe_check_unwritten_names(r->o->recipe, &aq, 0, LWQ_QSEL_SOFTMAX, e)) != 0)
                    return rc;
            }
            /* routers: transformers 5's are no nn.Linear, Model Optimizer gives them no quantizer */
            if (!p->linears[i].is_router) {
                lwq_qnames q; /* a fused expert has no output quantizer in Model Optimizer */
                lwq_arch_qnames(p, &p->linears[i], &q);
                if ((rc = lwq_recipe_check_unwritten_names(r->o->recipe, &q, 0, LWQ_QSEL_OUTPUT, e)) != 0)
                    return rc;
            }
        }
        if ((rc = lwq_qlayer_check(p, r->choice[L], e)) != 0)
            return rc;
    }
    /* lm_head (a linear) and the token embedding (Model Optimizer wraps nn.Embedding too) have
     * output quantizers as well */
    static const char *const ends[] = {"lm_head", "model.embed_tokens"};
    char m[2][LWQ_ARCH_NAME_MAX];
    lwq_qnames mq[2];
    for (int i = 0; i < 2; i++) {
        lwq_names_full(&r->ck.cfg.names, ends[i], m[i], sizeof m[i]);
        lwq_arch_qnames_module(r->ck.cfg.family, m[i], &mq[i]);
        int rc = lwq_recipe_check_unwritten_names(r->o->recipe, &mq[i], i ? LWQ_MODULE_EMBEDDING : 0, LWQ_QSEL_OUTPUT,
                                                  e);
        if (rc)
            return rc;
    }
    /* lm_head's choice, by the decoder linears' path (lwq_qlayer_choice: the in-memory names); how
     * lm_head is written is the recipe's lm_head, its search's candidates are this choice's */
    r->lm_choice = lwq_recipe_resolve_names(r->o->recipe, &mq[0], 0);
    /* a quantized lm_head needs its own matrix: refused before any weight is read */
    char lmw[LWQ_ARCH_NAME_MAX + 8];
    lwq_names_full(&r->ck.cfg.names, "lm_head.weight", lmw, sizeof lmw);
    if (r->o->recipe->lm_head && !lwq_ckpt_find(&r->ck, lmw))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes lm_head (%s) but the checkpoint has no %s "
                        "(tie_word_embeddings): lwq does not quantize a shared embedding", m[0],
                        lwq_lm_head_name(r->o->recipe->lm_head), lmw);
    /* a W8A8 lm_head's input amax is the source model's final norm output over the calibration set (Model
     * Optimizer 0.47 calibrates every quantizer in one forward of the source model); lwq's sequential
     * calibration (--qdq-next, gptq) feeds the last layers another model's activations */
    if (r->o->recipe->lm_head == LWQ_LMHEAD_W8A8 && r->o->qdq_next)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes lm_head as W8A8 FP8 and the run calibrates "
                        "sequentially (--qdq-next or gptq); lwq calibrates a W8A8 lm_head's input on the source "
                        "model only", m[0]);
    /* the token embedding: weight-only NVFP4 when a Model Optimizer recipe's rules say so */
    if ((r->embed = lwq_recipe_embedding_names(r->o->recipe, &mq[1], e)) < 0)
        return r->embed;
    if (r->embed && r->ck.cfg.tie_word_embeddings)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes the token embedding, which this checkpoint ties "
                        "to lm_head (tie_word_embeddings); lwq does not quantize a shared embedding", m[1]);
    if (r->embed && lwq_recipe_uses_gptq(r->o->recipe))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes the token embedding and uses gptq; lwq's "
                        "sequential calibration feeds the layers the source embedding, so that pair is refused", m[1]);
    if (!quantized)
        return lwq_errf(e, LWQ_EINVAL, "recipe \"%s\" quantizes no linear of this %s model", r->o->recipe->name,
                        r->ck.cfg.model_type);
    return 0;
}

static int make_backend(lwq_run *r, lwq_error *e)
{
    lwq_device_choice d = r->o->device;
    if (d == LWQ_DEVICE_AUTO) {
        int cuda = lwq_backend_cuda_auto(e);
        if (cuda < 0)
            return cuda;
        d = cuda ? LWQ_DEVICE_CUDA : LWQ_DEVICE_CPU;
    }
    /* one GPU per rank: the rank's place on its node picks it */
    int ngpu = d == LWQ_DEVICE_CUDA && !r->o->backend ? lwq_backend_cuda_device_count() : 0;
    int dev = ngpu > 0 ? r->rk->local_rank % ngpu : 0;
    int rc = r->o->backend                   ? (r->be = *r->o->backend, 0) /* the caller's (a test's fake device) */
             : d == LWQ_DEVICE_CUDA ? lwq_backend_cuda_create(&r->be, dev, e)
                                    : lwq_backend_cpu_create(&r->be, r->o->threads, e);
    if (rc)
        return rc;
    r->be_open = 1;
    r->be_owned = r->o->backend == NULL;
    lwq_qops_init(&r->qops, &r->be);
    lwq_devslab_init(&r->wslab, &r->be);
    if (!r->o->quiet)
        LWQ_INFO("forward on the %s backend%s%s%s%s%s; weights quantized on the %s", r->be.ops->name,
                 r->be.ops->device == LWQ_DEV_CPU ? " (" : "",
                 r->be.ops->device == LWQ_DEV_CPU ? lwq_backend_cpu_kernels() : "",
                 r->be.ops->device == LWQ_DEV_CPU ? " GEMM kernels, " : "",
                 r->be.ops->device == LWQ_DEV_CPU ? lwq_backend_cpu_exp() : "",
                 r->be.ops->device == LWQ_DEV_CPU ? " expf)" : "", lwq_qops_where(&r->qops));
    if (r->o->threads > 0)
        lwq_parallel_set_threads(r->o->threads);
    return 0;
}

static int open_model(lwq_run *r, lwq_error *e)
{
    int rc;
    if ((rc = lwq_ckpt_open(r->o->model_dir, &r->ck, e)) != 0)
        return rc;
    r->ck_open = 1;
    /* full attention only: a window shorter than a calibration sequence is refused before any
     * weight is read or anything is written */
    if ((rc = lwq_calib_set_check_window(r->o->calib, &r->ck.cfg, r->o->model_dir, "a calibration sequence",
                                         "--calib-seq", e)) != 0)
        return rc;
    r->nlayers = r->ck.cfg.num_hidden_layers;
    r->hidden = r->ck.cfg.hidden_size;
    r->act = r->ck.cfg.dtype;
    if (r->act != LWQ_BF16 && r->act != LWQ_F16 && r->act != LWQ_F32)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: dtype %s is not a compute dtype (BF16, F16, F32)", r->o->model_dir,
                        lwq_dtype_name(r->act));
    if ((rc = check_checkpoint(r, e)) != 0 || (rc = build_plans(r, e)) != 0 || (rc = make_backend(r, e)) != 0)
        return rc;
    if ((rc = lwq_model_init(&r->model, &r->ck.cfg, &r->be, r->act, e)) != 0)
        return rc;
    r->model_open = 1;
    if ((rc = lwq_run_build_batches(r, e)) != 0)
        return rc;
    return lwq_run_ranks_split(r, e);
}

/* The memory plan, printed, and held against --max-cpu-memory-gb / --max-gpu-memory-gb before
 * any weight is read. */
static int check_memory(lwq_run *r, lwq_mem_plan *p, lwq_error *e)
{
    const lwq_quantize_opts *o = r->o;
    lwq_mem_plan mp;
    int rc = lwq_quantize_plan_ckpt(o, &r->ck, &mp, e);
    if (rc)
        return rc;
    *p = mp;
    r->plan_host_peak = mp.host_peak;
    if (!o->quiet)
        lwq_mem_plan_print(&mp, o);
    if ((rc = lwq_plan_stream_refusal(o, &mp, e)) != 0) /* a streaming minimum decides it */
        return rc;
    if (o->max_cpu_gb > 0 && (double)mp.host_peak > o->max_cpu_gb * 1e9)
        return lwq_errf(e, LWQ_ENOMEM, "the plan needs %.2f GB of host memory, more than --max-cpu-memory-gb %.2f; "
                        "lower --calib-size/--calib-seq or --prefetch", (double)mp.host_peak / 1e9, o->max_cpu_gb);
    if (o->max_gpu_gb > 0 && (double)mp.gpu_peak > o->max_gpu_gb * 1e9)
        return lwq_errf(e, LWQ_ENOMEM, "the plan needs %.2f GB of GPU memory, more than --max-gpu-memory-gb %.2f",
                        (double)mp.gpu_peak / 1e9, o->max_gpu_gb);
    return 0;
}

static int alloc_boundaries(lwq_run *r, const lwq_mem_plan *pm, lwq_error *e);

void lwq_run_init(lwq_run *r, const lwq_quantize_opts *o)
{
    memset(r, 0, sizeof *r);
    r->o = o;
    r->rk_one.size = r->rk_one.local_size = 1;
    r->rk = o->ranks ? o->ranks : &r->rk_one;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_mutex_init(&r->log_mu, NULL);
    r->t0 = lwq_now();
}

int lwq_run_setup(lwq_run *r, int *nothing_to_do, lwq_error *e)
{
    const lwq_quantize_opts *o = r->o;
    *nothing_to_do = 0;
    lwq_mem_plan mp;
    memset(&mp, 0, sizeof mp);
    /* with several ranks every step ends in an agreement, so a failure on one rank is the same
     * error on all of them, not a hang */
    int rc = lwq_run_agree(r, open_model(r, e), e);
    if (rc == 0 && r->rk->rank == 0 && o->log_json && !(r->jlog = fopen(o->log_json, "a")))
        rc = lwq_errsys(e, -errno, "%s: cannot open the JSON log", o->log_json);
    if (rc == 0)
        rc = lwq_run_agree(r, check_memory(r, &mp, e), e);
    /* on a device, the forward's scratch as the plan counts it, in one block (forward.h) */
    if (rc == 0 && !o->dry_read && r->be.ops->device != LWQ_DEV_CPU)
        rc = lwq_run_agree(r, lwq_model_reserve_scratch(&r->model, mp.workspace_bytes, e), e);
    if (rc == 0)
        rc = lwq_run_agree(r, lwq_run_fingerprint(r, e), e);
    if (rc == 0)
        rc = lwq_run_ranks_same(r, e);
    if (rc == 0)
        rc = lwq_run_ranks_nccl(r, e);
    if (rc == 0 && !o->dry_read) {
        int prc = r->rk->rank == 0 ? lwq_run_prepare_output(r, nothing_to_do, e) : lwq_run_output_paths(r, e);
        rc = lwq_run_ranks_output(r, prc, nothing_to_do, e);
    }
    if (rc || *nothing_to_do)
        return rc;
    rc = lwq_run_agree(r, alloc_boundaries(r, &mp, e), e);
    return rc;
}

static int alloc_boundaries(lwq_run *r, const lwq_mem_plan *pm, lwq_error *e)
{
    const lwq_quantize_opts *o = r->o;
    lwq_mem_plan mp = *pm;
    if (!o->whole_model && !o->dry_read && r->start_layer < r->nlayers) {
        r->bnd[0] = malloc(r->bnd_bytes ? r->bnd_bytes : 1);
        r->bnd[1] = malloc(r->bnd_bytes ? r->bnd_bytes : 1);
        if (!r->bnd[0] || !r->bnd[1])
            return lwq_errf(e, LWQ_ENOMEM, "cannot allocate 2 x %.2f GB of boundary activations",
                            (double)r->bnd_bytes / 1e9);
        /* boundary alternation: the input of layer L is always bnd[L % 2] (run.c, run_output.c) */
        r->cur = r->start_layer % 2;
    }
    if (!o->whole_model && r->start_layer < r->nlayers && mp.expert_group > 0) {
        if (!o->quiet)
            LWQ_INFO("expert streaming: MoE layers in units of %d experts", mp.expert_group);
        return lwq_run_stream_init(r, mp.expert_group, e);
    }
    return 0;
}

void lwq_run_free(lwq_run *r)
{
    lwq_run_stream_free(r);
    if (r->pf)
        lwq_prefetch_free(r->pf);
    if (r->wr)
        lwq_writer_free(r->wr);
    if (r->pool_open)
        lwq_pool_free(&r->pool);
    if (r->rd)
        lwq_io_reader_free(r->rd);
    for (int b = 0; b < r->nb; b++) {
        if (r->batches)
            lwq_batch_free(&r->batches[b], &r->be);
        if (r->tokens)
            free(r->tokens[b]);
    }
    free(r->batches);
    free(r->tokens);
    free(r->rows);
    free(r->boff);
    free(r->bnd[0]);
    free(r->bnd[1]);
    if (r->be_open && r->work.data)
        lwq_backend_tensor_free(&r->be, &r->work);
    if (r->be_open) {
        lwq_qops_free(&r->qops);
        lwq_devslab_free(&r->wslab);
    }
    if (r->model_open)
        lwq_model_free(&r->model);
    for (int L = 0; L < r->nlayers; L++) {
        if (r->plans)
            lwq_arch_layer_free(&r->plans[L]);
        if (r->choice)
            free(r->choice[L]);
    }
    free(r->plans);
    free(r->choice);
    free(r->lstat);
    free(r->rtimes);
    lwq_nccl_close(r->nccl); /* before the backend its buffer lives on */
    free(r->bfirst);
    lwq_manifest_free(&r->man);
    if (r->be_open && r->be_owned)
        lwq_backend_destroy(&r->be);
    if (r->ck_open)
        lwq_ckpt_free(&r->ck);
    if (r->jlog)
        fclose(r->jlog);
    lwq_runlock_release(&r->lock);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->log_mu);
}

/* ---- fingerprint, output directory, batches ------------------------------------------------- */

int lwq_run_fingerprint(lwq_run *r, lwq_error *e)
{
    int rc = lwq_fingerprint_run(&r->ck, r->nlayers, r->plans, r->choice, r->o, r->be.ops->name, &r->fp, e);
    if (rc == 0)
        lwq_hex64(r->fp.all, r->fp_hex);
    return rc;
}

/* What an entry of out_dir is to this run: a file of an unfinished attempt of it (a shard or the
 * tail with its fingerprint, or the temp file of one), or anything else. */
static int own_file(lwq_run *r, const char *name, const char *path)
{
    size_t n = strlen(name);
    /* the shards and the tail carry the run's fingerprint in their metadata */
    int shard = !strncmp(name, LWQ_OUT_SHARD_PREFIX, sizeof LWQ_OUT_SHARD_PREFIX - 1) || !strncmp(name, "model-tail.", 11);
    if (shard && n > 16 && !strcmp(name + n - 4, ".tmp"))
        return 1; /* an unfinished durable write */
    if (!shard)
        return 0;
    lwq_st_file f;
    lwq_error ig = {0};
    if (lwq_out_st_open(path, &f, &ig) != 0)
        return 0;
    const char *fp = lwq_st_meta(&f, "lwq_fingerprint");
    int ours = fp && !strcmp(fp, r->fp_hex);
    lwq_st_free(&f);
    return ours;
}

static int outputs_present(lwq_run *r);

/* Without a manifest: is out_dir this run's finished output?  Every layer's shard and the tail
 * are there and carry this run's fingerprint, and the index and configs are there.  Their bytes
 * cannot be checked (the checksums were in the manifest): `lwq verify` checks the rest.  1 when
 * whole, else 0 with `why` saying what is missing. */
static int finished_without_manifest(lwq_run *r, char *why, size_t cap)
{
    for (int L = -1; L < r->nlayers; L++) {
        char name[40], p[PATH_MAX];
        if (L < 0)
            snprintf(name, sizeof name, "%s", LWQ_OUT_TAIL);
        else
            lwq_shard_name(L, name);
        lwq_error ig = {0};
        if (lwq_pathf(&ig, p, sizeof p, "%s/%s", r->out_dir, name) != 0)
            return snprintf(why, cap, "a path is too long"), 0;
        if (access(p, F_OK) != 0)
            return snprintf(why, cap, "%s is missing", name), 0;
        if (!own_file(r, name, p))
            return snprintf(why, cap, "%s is not this run's (another fingerprint, or not a readable shard)", name), 0;
    }
    if (!outputs_present(r))
        return snprintf(why, cap, "%s, %s or %s is missing", LWQ_OUT_INDEX, LWQ_OUT_CONFIG, LWQ_OUT_HF_QUANT_CONFIG), 0;
    return 1;
}

/* The fresh start's decision on out_dir, made before anything in it is touched:
 *  - empty or absent: 0;
 *  - only files of an unfinished attempt of this run (a run whose resume directory is gone before
 *    its first commit, or was removed): they are removed, and 0;
 *  - anything else there: nothing is removed.  When it is this run's finished output
 *    (finished_without_manifest) *complete is set and 0 returned: nothing to do; otherwise
 *    LWQ_ESTATE naming the first such file (in name order).
 * Deciding first matters: removing as the directory is walked deleted a finished output's shards
 * before its config.json was met and refused (issue 36, finding 1). */
static int clear_own_leftovers(lwq_run *r, int *complete, lwq_error *e)
{
    *complete = 0;
    struct dirent **v = NULL;
    int n = scandir(r->out_dir, &v, NULL, alphasort);
    if (n < 0)
        return errno == ENOENT ? 0 : lwq_errsys(e, -errno, "%s: cannot list", r->out_dir);
    char *mine = calloc((size_t)(n ? n : 1), 1);
    int rc = mine ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory listing %s", r->out_dir), other = -1;
    char p[PATH_MAX];
    for (int i = 0; i < n && rc == 0; i++) { /* first the decision */
        const char *name = v[i]->d_name;
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        if ((rc = lwq_pathf(e, p, sizeof p, "%s/%s", r->out_dir, name)) == 0 && !(mine[i] = (char)own_file(r, name, p)) &&
            other < 0)
            other = i;
    }
    if (rc == 0 && other >= 0) {
        char why[200];
        if (finished_without_manifest(r, why, sizeof why)) {
            *complete = 1;
            if (!r->o->quiet)
                LWQ_INFO("%s is this run's finished output (all %d layer shards and the tail carry its fingerprint; "
                         "no resume manifest at %s, so their checksums are not checked: lwq verify checks the rest)",
                         r->out_dir, r->nlayers, r->manifest_path);
        } else {
            rc = lwq_errf(e, LWQ_ESTATE, "%s holds %s, which is not from this run; refusing to overwrite another "
                          "run's or foreign files, and nothing was removed (not this run's finished output either: %s; "
                          "no resume manifest at %s). Choose an empty output directory", r->out_dir, v[other]->d_name,
                          why, r->manifest_path);
        }
    }
    int removed = 0;
    for (int i = 0; i < n && rc == 0 && other < 0; i++) { /* then, only an unfinished attempt's files */
        if (!mine[i] || (rc = lwq_pathf(e, p, sizeof p, "%s/%s", r->out_dir, v[i]->d_name)) != 0)
            continue;
        if ((rc = lwq_sys()->unlink(p)) == 0 || rc == -ENOENT)
            removed++, rc = 0;
        else
            rc = lwq_errsys(e, rc, "%s: cannot remove an uncommitted shard of an earlier attempt", p);
    }
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
    free(mine);
    if (rc == 0 && removed)
        rc = lwq_durable_fsync_dir(r->out_dir, e);
    if (rc == 0 && removed)
        LWQ_INFO("removed %d uncommitted shard file(s) of an earlier attempt of this run", removed);
    return rc;
}

static int outputs_present(lwq_run *r)
{
    static const char *const need[] = {LWQ_OUT_TAIL, LWQ_OUT_INDEX, LWQ_OUT_CONFIG, LWQ_OUT_HF_QUANT_CONFIG};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        char p[PATH_MAX];
        lwq_error ig = {0};
        if (lwq_pathf(&ig, p, sizeof p, "%s/%s", r->out_dir, need[i]) != 0 || access(p, F_OK) != 0)
            return 0;
    }
    return 1;
}

int lwq_run_output_paths(lwq_run *r, lwq_error *e)
{
    const lwq_quantize_opts *o = r->o;
    int rc = lwq_pathf(e, r->out_dir, sizeof r->out_dir, "%s", o->out_dir);
    if (rc)
        return rc;
    size_t n = strlen(r->out_dir);
    while (n > 1 && r->out_dir[n - 1] == '/')
        r->out_dir[--n] = 0;
    rc = o->resume_dir ? lwq_pathf(e, r->resume_dir, sizeof r->resume_dir, "%s", o->resume_dir)
                       : lwq_pathf(e, r->resume_dir, sizeof r->resume_dir, "%s" LWQ_RESUME_SUFFIX, r->out_dir);
    if (rc == 0)
        rc = lwq_pathf(e, r->manifest_path, sizeof r->manifest_path, "%s/" LWQ_RESUME_MANIFEST, r->resume_dir);
    return rc;
}

int lwq_run_prepare_output(lwq_run *r, int *nothing_to_do, lwq_error *e)
{
    const lwq_quantize_opts *o = r->o;
    *nothing_to_do = 0;
    int rc = lwq_run_output_paths(r, e);
    if (rc)
        return rc;
    /* one run per output: both directories exist and are locked before anything in them is
     * read, removed or written */
    int made_resume = 0;
    if ((rc = lwq_durable_mkdir_named(r->out_dir, NULL, e)) != 0 ||
        (rc = lwq_durable_mkdir_named(r->resume_dir, &made_resume, e)) != 0 ||
        (rc = lwq_runlock_acquire(&r->lock, r->out_dir, r->resume_dir, e)) != 0)
        return rc;

    rc = lwq_manifest_load(r->manifest_path, &r->man, e);
    if (rc == LWQ_ENOENT) {
        int complete = 0;
        if ((rc = clear_own_leftovers(r, &complete, e)) != 0 || complete) {
            /* refused (foreign files), or a finished output left alone: no lock file or resume
             * directory left behind */
            lwq_runlock_remove(&r->lock, r->resume_dir, made_resume);
            *nothing_to_do = complete;
            return rc;
        }
        if ((rc = lwq_manifest_init(&r->man, &r->fp, r->nlayers, e)) != 0 ||
            (rc = lwq_manifest_save(r->manifest_path, &r->man, e)) != 0)
            return rc;
        r->start_layer = 0;
        return 0;
    }
    if (rc)
        return rc;
    char diff[512];
    if (r->man.fp.all != r->fp.all) {
        lwq_fp_diff(&r->man.fp, &r->fp, diff, sizeof diff);
        return lwq_errf(e, LWQ_ESTATE, "%s belongs to a run with different inputs (changed: %s); refusing to mix "
                        "them. Rerun the original command, or delete %s and %s to start over", r->manifest_path,
                        diff, r->out_dir, r->resume_dir);
    }
    if (r->man.num_layers != r->nlayers)
        return lwq_errf(e, LWQ_ESTATE, "%s: %d layers, the model has %d", r->manifest_path, r->man.num_layers,
                        r->nlayers);
    /* every committed shard must be intact */
    for (int i = 0; i < r->man.committed; i++) {
        char name[40], p[PATH_MAX];
        lwq_shard_name(i, name);
        if ((rc = lwq_pathf(e, p, sizeof p, "%s/%s", r->out_dir, name)) != 0)
            return rc;
        uint64_t h = 0, b = 0;
        lwq_error ig = {0};
        int bad = lwq_file_xxh64(p, &h, &b, &ig) != 0 || h != r->man.layers[i].xxh64 || b != r->man.layers[i].bytes;
        /* The checksum holds against accidents; the shard must also be this run's: one of
         * another run, or whose header was edited and its checksum updated in the manifest,
         * carries another fingerprint (or none). */
        char why[160] = "";
        if (!bad) {
            lwq_st_file f;
            if (lwq_out_st_open(p, &f, &ig) != 0) {
                bad = 1;
            } else {
                const char *fp = lwq_st_meta(&f, "lwq_fingerprint");
                if ((bad = !fp || strcmp(fp, r->fp_hex)) != 0)
                    snprintf(why, sizeof why, "its header carries lwq_fingerprint %.20s, not this run's %s",
                             fp ? fp : "(none)", r->fp_hex);
                lwq_st_free(&f);
            }
        }
        if (!bad)
            continue;
        if (o->repair && i == r->man.committed - 1 && r->man.committed >= 1) {
            /* the boundary of layer i is the other file, if it is still there */
            LWQ_WARN("%s is damaged; --repair recomputes layer %d", p, i);
            r->man.committed = i;
            snprintf(r->man.boundary_file, sizeof r->man.boundary_file, LWQ_RESUME_BOUNDARY_FMT, i % 2);
            char bp[PATH_MAX];
            if ((rc = lwq_pathf(e, bp, sizeof bp, "%s/%s", r->resume_dir, r->man.boundary_file)) != 0)
                return rc;
            uint64_t bh, bb;
            if (i == 0) {
                r->man.boundary_file[0] = 0; /* layer 0 starts from the embedding */
            } else if (lwq_file_xxh64(bp, &bh, &bb, &ig) != 0 || bb != r->bnd_bytes) {
                return lwq_errf(e, LWQ_ESTATE, "%s is damaged and the input boundary of layer %d is gone; delete %s "
                                "and %s to start over", p, i, r->out_dir, r->resume_dir);
            } else {
                r->man.boundary_bytes = bb;
                r->man.boundary_xxh64 = bh;
            }
            break;
        }
        if (why[0])
            return lwq_errf(e, LWQ_ESTATE, "committed shard %s: %s (a shard of another run, or an edited header); "
                            "rerun with --repair to recompute it if it is the last committed layer, or delete %s and "
                            "%s to start over", p, why, r->out_dir, r->resume_dir);
        return lwq_errf(e, LWQ_ESTATE, "committed shard %s fails its checksum or size (%s); the output is damaged. "
                        "Rerun with --repair to recompute it if it is the last committed layer, or delete %s and %s "
                        "to start over", p, ig.code ? ig.msg : "contents changed", r->out_dir, r->resume_dir);
    }
    r->start_layer = r->man.committed;
    if (r->man.complete) {
        if (outputs_present(r)) {
            *nothing_to_do = 1;
            return 0;
        }
        LWQ_INFO("all %d layers are committed; writing the missing tail, index and config files", r->nlayers);
        return 0;
    }
    if (r->start_layer > 0)
        LWQ_INFO("resuming at layer %d/%d (%s)", r->start_layer, r->nlayers, r->manifest_path);
    return 0;
}

int lwq_run_build_batches(lwq_run *r, lwq_error *e)
{
    const lwq_calib_set *c = r->o->calib;
    int B = r->o->batch_size > 0 ? r->o->batch_size : 1;
    if (c->n <= 0)
        return lwq_errf(e, LWQ_EINVAL, "the calibration set is empty");
    r->nb = (c->n + B - 1) / B;
    r->batches = calloc((size_t)r->nb, sizeof *r->batches);
    r->tokens = calloc((size_t)r->nb, sizeof *r->tokens);
    r->rows = calloc((size_t)r->nb, sizeof *r->rows);
    r->boff = calloc((size_t)r->nb + 1, sizeof *r->boff);
    if (!r->batches || !r->tokens || !r->rows || !r->boff)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory for %d batches", r->nb);
    size_t esz = lwq_dtype_size(r->act);
    int64_t max_rows = 0;
    for (int b = 0; b < r->nb; b++) {
        int s0 = b * B, ns = c->n - s0 < B ? c->n - s0 : B;
        int64_t seq = 0, lens[4096];
        if (ns > 4096)
            return lwq_errf(e, LWQ_EINVAL, "--batch-size %d is larger than 4096", B);
        for (int i = 0; i < ns; i++) {
            if (c->len[s0 + i] <= 0)
                return lwq_errf(e, LWQ_EINVAL, "calibration sample %d is empty", s0 + i);
            lens[i] = c->len[s0 + i];
            seq = lens[i] > seq ? lens[i] : seq;
        }
        r->rows[b] = ns * seq;
        r->tokens[b] = malloc((size_t)r->rows[b] * sizeof(int32_t));
        if (!r->tokens[b])
            return lwq_errf(e, LWQ_ENOMEM, "out of memory for batch %d", b);
        for (int i = 0; i < ns; i++) {
            int64_t pad = seq - lens[i];
            for (int64_t t = 0; t < seq; t++)
                r->tokens[b][i * seq + t] = t < pad ? c->pad_id : c->ids[s0 + i][t - pad];
            r->calib_tokens += lens[i];
        }
        int rc = lwq_batch_init(&r->batches[b], &r->be, ns, seq, lens, e);
        if (rc)
            return rc;
        r->boff[b + 1] = r->boff[b] + (uint64_t)r->rows[b] * (uint64_t)r->hidden * esz;
        max_rows = r->rows[b] > max_rows ? r->rows[b] : max_rows;
    }
    r->bnd_bytes = r->boff[r->nb];
    int64_t shape[2] = {max_rows, r->hidden};
    return lwq_backend_tensor_alloc(&r->be, r->act, 2, shape, &r->work, e);
}
