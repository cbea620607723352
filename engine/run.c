/* engine/run.c — the depth loop of `lwq quantize` (layerwise and whole-model paths). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/trace.h"
#include "engine/layersrc.h"
#include "engine/run_internal.h"
#include "io/durable.h"
#include "kernels/quant.h"

static volatile sig_atomic_t g_stop;

void lwq_engine_request_stop(void) { g_stop = 1; }

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

void lwq_run_jlog(lwq_run *r, const char *json)
{
    if (!r->jlog)
        return;
    pthread_mutex_lock(&r->log_mu);
    fprintf(r->jlog, "%s\n", json);
    fflush(r->jlog);
    pthread_mutex_unlock(&r->log_mu);
}

void lwq_run_log_layer(lwq_run *r, int L)
{
    const struct lwq_layer_log *s = &r->lstat[L];
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"event\":\"layer\",\"layer\":%d,\"bytes_read\":%" PRIu64 ",\"read_wait_s\":%.6f,\"forward_s\":%.6f,"
             "\"quantize_s\":%.6f,\"write_s\":%.6f,\"rss_bytes\":%" PRIu64 ",\"gpu_bytes\":%" PRIu64
             ",\"cold_experts\":%d,\"n_experts\":%d}",
             L, s->bytes_read, s->read_wait_s, s->forward_s, s->quantize_s, s->write_s, s->rss, s->gpu_bytes,
             s->cold_experts, s->n_experts);
    lwq_run_jlog(r, buf);
}

/* ---- set-up -------------------------------------------------------------------------------- */

static int check_checkpoint(lwq_run *r, lwq_error *e)
{
    lwq_arch_report rep = {0};
    int rc = lwq_arch_check(&r->ck, &rep, e);
    if (rc < 0)
        return rc;
    for (int i = 0; i < rep.n; i++) {
        const lwq_arch_issue *x = &rep.v[i];
        if (x->kind == LWQ_ARCH_UNEXPECTED)
            LWQ_WARN("tensor %s is not part of the %s architecture; it is copied unchanged", x->name,
                     r->ck.cfg.model_type);
        else if (x->kind == LWQ_ARCH_EXTRA_LAYER)
            LWQ_INFO("layer %d is beyond num_hidden_layers (an MTP block?); it goes to the tail unchanged", x->layer);
    }
    if (rc > 0) {
        const lwq_arch_issue *x = NULL;
        for (int i = 0; i < rep.n && !x; i++)
            if (rep.v[i].kind == LWQ_ARCH_MISSING || rep.v[i].kind == LWQ_ARCH_BAD_SHAPE)
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
            r->choice[L][i] = lwq_recipe_resolve_module(
                r->o->recipe, p->linears[i].name,
                lwq_arch_is_mla_projection(p, &p->linears[i]) ? LWQ_MODULE_MLA_PROJ : 0);
            if (p->linears[i].is_router) /* never quantized, whatever a rule matched */
                r->choice[L][i].format = LWQ_QFMT_NONE;
            quantized += r->choice[L][i].format != LWQ_QFMT_NONE;
            /* the k/v cache quantizers of Model Optimizer live on the attention module */
            if (p->linears[i].role == LWQ_ROLE_O) {
                char attn[LWQ_ARCH_NAME_MAX];
                snprintf(attn, sizeof attn, "%s", p->linears[i].name);
                char *dot = strrchr(attn, '.');
                if (dot)
                    *dot = 0;
                if ((rc = lwq_recipe_check_kv(r->o->recipe, attn, e)) != 0)
                    return rc;
            }
        }
        if ((rc = lwq_qlayer_check(p, r->choice[L], e)) != 0)
            return rc;
    }
    if (!quantized)
        return lwq_errf(e, LWQ_EINVAL, "recipe \"%s\" quantizes no linear of this %s model", r->o->recipe->name,
                        r->ck.cfg.model_type);
    return 0;
}

static int make_backend(lwq_run *r, lwq_error *e)
{
    lwq_device_choice d = r->o->device;
    if (d == LWQ_DEVICE_AUTO)
        d = lwq_backend_cuda_device_count() > 0 ? LWQ_DEVICE_CUDA : LWQ_DEVICE_CPU;
    int rc = d == LWQ_DEVICE_CUDA ? lwq_backend_cuda_create(&r->be, 0, e) : lwq_backend_cpu_create(&r->be, r->o->threads, e);
    if (rc)
        return rc;
    r->be_open = 1;
    lwq_qops_init(&r->qops, &r->be);
    if (!r->o->quiet)
        LWQ_INFO("forward on the %s backend; weights quantized on the %s", r->be.ops->name,
                 lwq_qops_where(&r->qops));
    if (r->o->threads > 0)
        lwq_parallel_set_threads(r->o->threads);
    return 0;
}

/* ---- boundary <-> work tensor ---------------------------------------------------------------- */

static lwq_tensor work_view(lwq_run *r, int b)
{
    lwq_tensor t = r->work;
    t.shape[0] = r->rows[b];
    return t;
}

static int to_work(lwq_run *r, int b, const unsigned char *buf, lwq_error *e)
{
    size_t n = (size_t)(r->boff[b + 1] - r->boff[b]);
    if (r->be.ops->device == LWQ_DEV_CPU) {
        memcpy(r->work.data, buf + r->boff[b], n);
        return 0;
    }
    return lwq_backend_upload(&r->be, r->work.data, buf + r->boff[b], n, e);
}

static int from_work(lwq_run *r, int b, unsigned char *buf, lwq_error *e)
{
    size_t n = (size_t)(r->boff[b + 1] - r->boff[b]);
    if (r->be.ops->device == LWQ_DEV_CPU) {
        memcpy(buf + r->boff[b], r->work.data, n);
        return 0;
    }
    return lwq_backend_download(&r->be, buf + r->boff[b], r->work.data, n, e);
}

static int embed_all(lwq_run *r, unsigned char *dst, lwq_error *e)
{
    /* only the embedding matrix: lm_head, as large, is not needed to embed */
    lwq_tlist tail = {0};
    char name[128];
    snprintf(name, sizeof name, "%smodel.embed_tokens.weight", r->ck.cfg.weight_prefix);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&r->ck, name);
    int rc = 0;
    if (t && t->dtype != LWQ_F8_E4M3 && t->dtype != LWQ_U8) {
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf)
            return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu bytes", name, (unsigned long long)t->nbytes);
        if ((rc = lwq_ckpt_read_tensor(&r->ck, t, buf, e)) == 0)
            rc = lwq_tlist_add(&tail, t->name, t->dtype, t->ndim, t->shape, buf, 1, e);
        else
            free(buf);
    } else { /* absent (the forward names it) or packed: the general path */
        rc = lwq_layersrc_read(&r->ck, -1, &tail, e);
    }
    if (rc) {
        lwq_tlist_free(&tail);
        return rc;
    }
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &r->be, &tail, NULL, r->ck.cfg.weight_prefix);
    for (int b = 0; b < r->nb && rc == 0; b++) {
        lwq_tensor h = work_view(r, b);
        if ((rc = lwq_model_embed(&r->model, &lw.w, r->tokens[b], &h, e)) == 0)
            rc = from_work(r, b, dst, e);
    }
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&tail);
    return rc;
}

static int load_boundary(lwq_run *r, unsigned char *dst, lwq_error *e)
{
    char p[PATH_MAX];
    int rc = lwq_pathf(e, p, sizeof p, "%s/%s", r->resume_dir, r->man.boundary_file);
    if (rc)
        return rc;
    char *buf;
    size_t len;
    if ((rc = lwq_durable_read_file(p, (size_t)r->bnd_bytes + 1, &buf, &len, e)) != 0)
        return rc;
    if (len != r->bnd_bytes || lwq_xxh64(buf, len, 0) != r->man.boundary_xxh64) {
        free(buf);
        return lwq_errf(e, LWQ_ESTATE, "%s: %zu bytes, checksum %s; the manifest expects %" PRIu64 " bytes and "
                        "its checksum (damaged resume state: delete %s and the output to start over)", p, len,
                        len == r->bnd_bytes ? "differs" : "not checked", r->bnd_bytes, r->resume_dir);
    }
    memcpy(dst, buf, len);
    free(buf);
    return 0;
}

/* ---- one layer ----------------------------------------------------------------------------- */

static uint8_t *hessian_wanted(lwq_run *r, int L)
{
    const lwq_arch_layer *p = &r->plans[L];
    uint8_t *w = calloc((size_t)(p->nlinears ? p->nlinears : 1), 1);
    for (int i = 0; w && i < p->nlinears; i++)
        w[i] = r->choice[L][i].format == LWQ_QFMT_NVFP4 && r->choice[L][i].algo == LWQ_ALGO_LOCAL_HESSIAN;
    return w;
}

/* Dequantized copies of the layer's quantized weights, in the source dtype (--qdq-next). */
static int qdq_overlay(lwq_run *r, int L, lwq_tlist *out, const lwq_tlist *src, lwq_tlist *ov, lwq_error *e)
{
    const lwq_arch_layer *p = &r->plans[L];
    lwq_tlist_sort(out);
    memset(ov, 0, sizeof *ov);
    for (int i = 0; i < p->nlinears; i++) {
        lwq_qformat f = r->choice[L][i].format;
        if (f == LWQ_QFMT_NONE)
            continue;
        char n[LWQ_ARCH_NAME_MAX + 32];
        snprintf(n, sizeof n, "%s.weight", p->linears[i].name);
        const lwq_htensor *s = lwq_tlist_find(src, n), *q = lwq_tlist_find(out, n);
        snprintf(n, sizeof n, "%s.weight_scale", p->linears[i].name);
        const lwq_htensor *sc = lwq_tlist_find(out, n);
        snprintf(n, sizeof n, "%s.weight_scale_2", p->linears[i].name);
        const lwq_htensor *s2 = lwq_tlist_find(out, n);
        if (!s || !q || !sc || (f == LWQ_QFMT_NVFP4 && !s2))
            return lwq_errf(e, LWQ_ESTATE, "%s: quantized tensors missing for --qdq-next", p->linears[i].name);
        /* FP8 dequantizes every element (a conv1d weight is 3-D) */
        int64_t rows = s->shape[0], cols = s->shape[1];
        void *buf = malloc((size_t)s->nbytes);
        if (!buf)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", s->name);
        int rc = f == LWQ_QFMT_NVFP4
                     ? lwq_quant_nvfp4_dequant(q->data, sc->data, *(const float *)s2->data, rows, cols, s->dtype, buf, e)
                     : lwq_quant_fp8_dequant(q->data, *(const float *)sc->data,
                                             (int64_t)(s->nbytes / lwq_dtype_size(s->dtype)), s->dtype, buf, e);
        if (rc < 0) {
            free(buf);
            return rc;
        }
        /* lwq_tlist_add takes buf over, and frees it when it fails */
        if ((rc = lwq_tlist_add(ov, s->name, s->dtype, s->ndim, s->shape, buf, 1, e)) < 0)
            return rc;
    }
    lwq_tlist_sort(ov);
    return 0;
}

/* Forward layer L over every batch from bnd[in] into bnd[outb] (outb < 0: outputs dropped),
 * observing with st when given. */
static int forward_layer(lwq_run *r, int L, const lwq_weights *w, int in, int outb, lwq_layer_stats *st,
                         lwq_error *e)
{
    int rc = 0;
    for (int b = 0; b < r->nb && rc == 0; b++) {
        lwq_tensor h = work_view(r, b);
        if ((rc = to_work(r, b, r->bnd[in], e)) == 0 &&
            (rc = lwq_model_layer_forward(&r->model, L, w, &r->batches[b], &h, st ? &st->obs : NULL, e)) == 0 &&
            outb >= 0)
            rc = from_work(r, b, r->bnd[outb], e);
    }
    return rc;
}

/* Calibrate and quantize layer L whose source tensors are `src`; the output of the layer goes to
 * bnd[1 - cur] (unless `no_output`). */
static int process_layer(lwq_run *r, int L, const lwq_tlist *src, lwq_tlist *out, int no_output, lwq_error *e)
{
    struct lwq_layer_log *ls = &r->lstat[L];
    const lwq_arch_layer *p = &r->plans[L];
    int nxt = 1 - r->cur, nE = p->is_moe ? r->ck.cfg.num_experts : 0;
    uint8_t *wh = hessian_wanted(r, L);
    lwq_layer_stats st;
    lwq_layer_weights lw;
    lwq_tlist ov = {0};
    lwq_qlayer_report rep;
    int rc = wh ? lwq_stats_init(&st, p, &r->be, nE, r->o->include_padding, r->o->all_experts, wh, r->ck.cfg.weight_prefix, e)
                : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    free(wh);
    if (rc)
        return rc;
    lwq_layer_weights_init(&lw, &r->be, src, NULL, r->ck.cfg.weight_prefix);
    double t = lwq_now();
    if (!no_output)
        lwq_run_wait_boundary(r, nxt);
    LWQ_TRACE_BEGIN("forward", L);
    rc = forward_layer(r, L, &lw.w, r->cur, r->o->qdq_next || no_output ? -1 : nxt, &st, e);
    LWQ_TRACE_END();
    ls->forward_s = lwq_now() - t;
    t = lwq_now();
    LWQ_TRACE_BEGIN("quantize", L);
    if (rc == 0)
        rc = lwq_qlayer_run(p, r->choice[L], r->o->recipe->kv, &st, src, &r->qops, out, &rep, e);
    LWQ_TRACE_END();
    ls->quantize_s = lwq_now() - t;
    if (rc == 0 && r->o->qdq_next && !no_output) {
        t = lwq_now();
        lwq_layer_weights_free(&lw);
        if ((rc = qdq_overlay(r, L, out, src, &ov, e)) == 0) {
            lwq_layer_weights_init(&lw, &r->be, src, &ov, r->ck.cfg.weight_prefix);
            LWQ_TRACE_BEGIN("forward qdq", L);
            rc = forward_layer(r, L, &lw.w, r->cur, nxt, NULL, e);
            LWQ_TRACE_END();
        }
        ls->forward_s += lwq_now() - t;
    }
    if (rc == 0) {
        ls->cold_experts = rep.cold_experts;
        ls->n_experts = nE;
        r->cold_total += rep.cold_experts;
        free(r->man.layers[L].report);
        r->man.layers[L].report = lwq_run_layer_report(L, &rep, nE ? st.expert_tokens : NULL);
        if (!r->man.layers[L].report)
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&ov);
    lwq_stats_free(&st);
    return rc;
}

/* One line per layer: its bytes and the wall time since the previous layer finished, so the GB/s
 * shown is what the whole pipeline sustains, not the disk alone. */
static void progress(lwq_run *r, int L, double t_start, double *t_prev, int done_layers)
{
    const struct lwq_layer_log *s = &r->lstat[L];
    uint64_t rss, hwm;
    lwq_rss(&rss, &hwm);
    r->lstat[L].rss = rss;
    r->peak_rss = rss > r->peak_rss ? rss : r->peak_rss;
    r->lstat[L].gpu_bytes = lwq_backend_mem_peak(&r->be);
    double now = lwq_now(), wall = now - *t_prev;
    *t_prev = now;
    if (r->o->quiet)
        return;
    double el = now - t_start, eta = done_layers ? el / done_layers * (r->nlayers - L - 1) : 0;
    char cold[48] = "";
    if (s->n_experts)
        snprintf(cold, sizeof cold, "  cold experts %d/%d", s->cold_experts, s->n_experts);
    fprintf(stderr, "layer %d/%d  %.3f GB in %.2fs (%.2f GB/s; waited %.2fs for reads)  forward %.2fs  quantize %.2fs"
                    "  rss %.2f GB%s  ETA %.0fs\n",
            L + 1, r->nlayers, (double)s->bytes_read / 1e9, wall, wall > 0 ? (double)s->bytes_read / 1e9 / wall : 0.0,
            s->read_wait_s, s->forward_s, s->quantize_s, (double)rss / 1e9, cold, eta);
}

/* ---- the layerwise path ---------------------------------------------------------------------- */

/* Pool registration with the backend (cudaHostRegister on a GPU).  A refusal is not fatal: the
 * run goes on with pageable uploads, and says so. */
static int pool_register(void *ctx, void *ptr, size_t len, lwq_error *e)
{
    struct pool_reg *pr = ctx;
    lwq_error sub = {0};
    int rc = lwq_backend_host_register(pr->be, ptr, len, &sub);
    pr->done = rc == 0;
    if (rc < 0)
        LWQ_WARN("cannot page-lock the %.1f MB read ring for the GPU (%s); uploads will be slower",
                 (double)len / 1e6, sub.msg);
    (void)e;
    return 0;
}

static void pool_unregister(void *ctx, void *ptr, size_t len)
{
    struct pool_reg *pr = ctx;
    (void)len;
    if (pr->done)
        lwq_backend_host_unregister(pr->be, ptr);
}

static int start_io(lwq_run *r, lwq_io_range **ranges, int *nranges, lwq_error *e)
{
    lwq_io_reader_opts ro;
    lwq_io_reader_opts_default(&ro);
    int rc = lwq_io_reader_init(&r->rd, &ro, e);
    if (rc)
        return rc;
    uint64_t slot = LWQ_IO_ALIGN;
    if (r->stream && (rc = lwq_run_stream_slot(r, &slot, e)) != 0)
        return rc;
    for (int L = r->start_layer; L < r->nlayers && !r->stream; L++) {
        lwq_io_plan p;
        if ((rc = lwq_layersrc_ranges(&r->ck, L, &ranges[L], &nranges[L], e)) != 0 ||
            (rc = lwq_io_plan_build(&p, ranges[L], (size_t)nranges[L], LWQ_LAYERSRC_MERGE_GAP, e)) != 0)
            return rc;
        slot = p.bytes > slot ? p.bytes : slot;
        lwq_io_plan_free(&p);
    }
    lwq_pool_opts po = {0};
    po.slot_bytes = (size_t)slot;
    po.nslots = r->o->prefetch > 0 ? r->o->prefetch : 2;
    po.numa_node = -1;
    /* memory on the GPU's NUMA node, page-locked for its DMA */
    char bus[32];
    if (lwq_backend_pci_bus_id(&r->be, bus, sizeof bus) == 0)
        po.pci_bus_id = bus;
    r->pool_reg.be = &r->be;
    po.reg = pool_register;
    po.unreg = pool_unregister;
    po.reg_ctx = &r->pool_reg;
    if ((rc = lwq_pool_init(&r->pool, &po, e)) != 0)
        return rc;
    r->pool_open = 1;
    lwq_prefetch_opts pf = {r->rd, &r->pool, LWQ_LAYERSRC_MERGE_GAP};
    if ((rc = lwq_prefetch_init(&r->pf, &pf, e)) != 0)
        return rc;
    if (!r->o->quiet)
        LWQ_INFO("reading with %s; %d ring slots of %.1f MB", lwq_io_reader_describe(r->rd), po.nslots,
                 (double)slot / 1e6);
    for (int L = r->start_layer; L < r->nlayers; L++) {
        int64_t job;
        if (r->stream ? lwq_run_stream_submit(r, L, &job, e) != 0
                      : lwq_prefetch_submit(r->pf, ranges[L], (size_t)nranges[L], e) < 0)
            return e->code;
    }
    return 0;
}

static int run_layerwise(lwq_run *r, lwq_error *e)
{
    lwq_io_range **ranges = calloc((size_t)r->nlayers, sizeof *ranges);
    int *nranges = calloc((size_t)r->nlayers, sizeof *nranges);
    int rc = ranges && nranges ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    /* The input of the first layer to compute, before the ring exists: embed_all holds the whole
     * tail (embedding and lm_head, >1 GB for a 150k vocabulary) for a moment, and with the ring
     * slots already allocated and filling, that moment set the run's peak RSS.  The disk is busy
     * with the tail then anyway, so reading layer 0 later costs little. */
    if (rc == 0 && !r->o->dry_read && r->start_layer < r->nlayers)
        rc = r->man.boundary_file[0] ? load_boundary(r, r->bnd[r->cur], e) : embed_all(r, r->bnd[r->cur], e);
    if (rc == 0)
        rc = start_io(r, ranges, nranges, e);
    if (rc == 0 && !r->o->dry_read)
        rc = lwq_writer_init(&r->wr, 4, e);
    /* the unchanged tail is copied by the writer while the first layers compute */
    if (rc == 0 && !r->o->dry_read && r->start_layer < r->nlayers)
        rc = lwq_run_submit_tail(r, e);
    double t_start = lwq_now(), t_prev = t_start;
    r->setup_s = t_start - r->t0;
    for (int L = r->start_layer; rc == 0 && L < r->nlayers; L++) {
        int64_t job = r->stream ? lwq_run_stream_job0(r, L) : L - r->start_layer;
        void *slot;
        if (lwq_run_stream_active(r, L)) { /* expert streaming: units (run_stream.c) */
            if ((rc = lwq_run_stream_layer(r, L, e)) != 0)
                break;
            progress(r, L, t_start, &t_prev, L - r->start_layer + 1);
            r->cur = 1 - r->cur;
            if (g_stop && L + 1 < r->nlayers) {
                if ((rc = lwq_writer_flush(r->wr, e)) == 0)
                    rc = lwq_errf(e, LWQ_ECANCELED, "stopped by a signal after layer %d/%d was committed; rerun "
                                  "the same command to resume", L + 1, r->nlayers);
                break;
            }
            continue;
        }
        double t = lwq_now();
        LWQ_TRACE_BEGIN("read-wait", L);
        rc = lwq_prefetch_wait(r->pf, job, &slot, e);
        LWQ_TRACE_END();
        if (rc != 0)
            break;
        struct lwq_layer_log *ls = &r->lstat[L];
        ls->read_wait_s = lwq_now() - t;
        ls->bytes_read = r->ck.layers[L].bytes;
        r->bytes_read += ls->bytes_read;
        r->read_wait_total += ls->read_wait_s;
        if (r->o->dry_read) {
            rc = lwq_prefetch_release(r->pf, job, e);
            progress(r, L, t_start, &t_prev, L - r->start_layer + 1);
            continue;
        }
        lwq_tlist src, out = {0};
        if ((rc = r->stream ? lwq_run_stream_views(r, L, slot, &src, e)
                            : lwq_layersrc_views(&r->ck, L, ranges[L], slot, &src, e)) != 0)
            break;
        if ((rc = process_layer(r, L, &src, &out, 0, e)) != 0) {
            lwq_tlist_free(&out);
            lwq_tlist_free(&src);
            break;
        }
        progress(r, L, t_start, &t_prev, L - r->start_layer + 1);
        /* the slot is released, and src/out freed, once the shard is on disk */
        if ((rc = lwq_run_commit_layer(r, L, &out, &src, job, e)) != 0)
            break;
        r->cur = 1 - r->cur;
        if (g_stop && L + 1 < r->nlayers) {
            if ((rc = lwq_writer_flush(r->wr, e)) == 0)
                rc = lwq_errf(e, LWQ_ECANCELED, "stopped by a signal after layer %d/%d was committed; rerun the same "
                              "command to resume", L + 1, r->nlayers);
            break;
        }
    }
    if (r->wr) {
        int frc = lwq_writer_flush(r->wr, rc ? NULL : e);
        if (rc == 0)
            rc = frc;
    }
    r->loop_s = lwq_now() - t_start;
    if (rc && r->pf)
        lwq_prefetch_cancel(r->pf);
    /* Every slot is released once the writer is flushed.  Give the ring back now, so the tail
     * that lwq_run_finish reads (as large as the embedding and lm_head) does not stack on it.
     * The reader goes first: its io_uring holds the registered slot pages until it is freed. */
    if (rc == 0) {
        lwq_prefetch_free(r->pf);
        r->pf = NULL;
        lwq_io_reader_free(r->rd);
        r->rd = NULL;
        lwq_pool_free(&r->pool);
        r->pool_open = 0;
    }
    for (int L = 0; L < r->nlayers && ranges; L++)
        free(ranges[L]);
    free(ranges);
    free(nranges);
    return rc;
}

/* ---- the whole-model reference path ---------------------------------------------------------- */

/* Data outside, depth inside, every layer resident.  Without --qdq-next each batch goes through
 * all layers once, observed; with it, layer L is calibrated on batches that went through the
 * already-quantized (dequantized) layers 0..L-1, recomputed from the embedding. */
static int run_whole(lwq_run *r, lwq_error *e)
{
    int N = r->nlayers, rc = 0;
    lwq_tlist *src = calloc((size_t)N, sizeof *src), *ov = calloc((size_t)N, sizeof *ov);
    lwq_tlist *out = calloc((size_t)N, sizeof *out);
    lwq_layer_stats *st = calloc((size_t)N, sizeof *st);
    lwq_layer_weights *lw = calloc((size_t)N, sizeof *lw);
    lwq_tlist tail = {0};
    if (!src || !ov || !out || !st || !lw) {
        rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        goto done;
    }
    for (int L = 0; L < N && rc == 0; L++) {
        uint8_t *wh = hessian_wanted(r, L);
        rc = (rc = lwq_layersrc_read(&r->ck, L, &src[L], e)) != 0 ? rc
             : wh ? lwq_stats_init(&st[L], &r->plans[L], &r->be, r->plans[L].is_moe ? r->ck.cfg.num_experts : 0,
                                   r->o->include_padding, r->o->all_experts, wh, r->ck.cfg.weight_prefix, e)
                  : lwq_errf(e, LWQ_ENOMEM, "out of memory");
        free(wh);
        lwq_layer_weights_init(&lw[L], &r->be, &src[L], NULL, r->ck.cfg.weight_prefix);
    }
    if (rc == 0)
        rc = lwq_layersrc_read(&r->ck, -1, &tail, e);
    lwq_layer_weights tw;
    lwq_layer_weights_init(&tw, &r->be, &tail, NULL, r->ck.cfg.weight_prefix);
    int passes = r->o->qdq_next ? N : 1;
    for (int pass = 0; pass < passes && rc == 0; pass++) {
        for (int b = 0; b < r->nb && rc == 0; b++) {
            lwq_tensor h = work_view(r, b);
            rc = lwq_model_embed(&r->model, &tw.w, r->tokens[b], &h, e);
            int last = r->o->qdq_next ? pass : N - 1;
            for (int L = 0; L <= last && rc == 0; L++) {
                int observe = !r->o->qdq_next || L == pass;
                rc = lwq_model_layer_forward(&r->model, L, &lw[L].w, &r->batches[b], &h, observe ? &st[L].obs : NULL, e);
            }
        }
        int q0 = r->o->qdq_next ? pass : 0, q1 = r->o->qdq_next ? pass : N - 1;
        for (int L = q0; L <= q1 && rc == 0; L++) {
            lwq_qlayer_report rep;
            rc = lwq_qlayer_run(&r->plans[L], r->choice[L], r->o->recipe->kv, &st[L], &src[L], &r->qops, &out[L], &rep,
                                e);
            if (rc == 0 && r->o->qdq_next) {
                lwq_layer_weights_free(&lw[L]);
                if ((rc = qdq_overlay(r, L, &out[L], &src[L], &ov[L], e)) == 0)
                    lwq_layer_weights_init(&lw[L], &r->be, &src[L], &ov[L], r->ck.cfg.weight_prefix);
            }
            if (rc == 0) {
                int nE = r->plans[L].is_moe ? r->ck.cfg.num_experts : 0;
                r->man.layers[L].report = lwq_run_layer_report(L, &rep, nE ? st[L].expert_tokens : NULL);
                rc = r->man.layers[L].report ? lwq_run_write_shard_now(r, L, &out[L], e)
                                             : lwq_errf(e, LWQ_ENOMEM, "out of memory");
                r->cold_total += rep.cold_experts;
            }
        }
    }
    lwq_layer_weights_free(&tw);
done:
    for (int L = 0; L < N && src; L++) {
        if (lw)
            lwq_layer_weights_free(&lw[L]);
        if (st)
            lwq_stats_free(&st[L]);
        if (out)
            lwq_tlist_free(&out[L]);
        if (ov)
            lwq_tlist_free(&ov[L]);
        lwq_tlist_free(&src[L]);
    }
    lwq_tlist_free(&tail);
    free(src);
    free(ov);
    free(out);
    free(st);
    free(lw);
    return rc;
}

/* ---- entry ------------------------------------------------------------------------------------ */

static void run_free(lwq_run *r)
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
    if (r->be_open)
        lwq_qops_free(&r->qops);
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
    lwq_manifest_free(&r->man);
    if (r->be_open)
        lwq_backend_free_backend(&r->be);
    if (r->ck_open)
        lwq_ckpt_free(&r->ck);
    if (r->jlog)
        fclose(r->jlog);
    lwq_runlock_release(&r->lock);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->log_mu);
}

static void summary(lwq_run *r, double wall)
{
    r->peak_gpu = lwq_backend_mem_peak(&r->be);
    uint64_t rss, hwm, out_bytes = 0, in_bytes = 0;
    lwq_rss(&rss, &hwm);
    /* The kernel updates VmHWM lazily (on unmap, not when freed pages are zapped, and from
     * batched per-CPU counters), so it can read below a VmRSS sampled earlier: take both. */
    hwm = r->peak_rss > hwm ? r->peak_rss : hwm;
    for (int L = 0; L < r->nlayers; L++) {
        /* a --dry-read run has no manifest (nothing is written) */
        if (r->man.layers)
            out_bytes += r->man.layers[L].bytes;
        in_bytes += r->ck.layers[L].bytes;
    }
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"event\":\"summary\",\"layers\":%d,\"wall_s\":%.3f,\"bytes_read\":%" PRIu64 ",\"read_gbps\":%.3f,"
             "\"setup_s\":%.3f,\"loop_s\":%.3f,\"read_wait_s\":%.3f,\"peak_rss_bytes\":%" PRIu64 ",\"peak_gpu_bytes\":%" PRIu64
             ",\"output_layer_bytes\":%" PRIu64 ",\"source_layer_bytes\":%" PRIu64 ",\"source_bytes\":%" PRIu64 ",\"cold_experts\":%d,\"backend\":\"%s\"}",
             r->nlayers, wall, r->bytes_read, wall > 0 ? (double)r->bytes_read / 1e9 / wall : 0, r->setup_s, r->loop_s,
             r->read_wait_total, hwm, r->peak_gpu, out_bytes, in_bytes, r->ck.total_bytes, r->cold_total,
             r->be.ops->name);
    lwq_run_jlog(r, buf);
    if (r->o->quiet)
        return;
    fprintf(stderr,
            "done: %d layers in %.2fs; read %.3f GB (%.2f GB/s overall, %.2fs waiting on the disk); peak RSS %.2f GB; "
            "decoder layers %.3f GB -> %.3f GB (%.1f%%); cold experts %d; output in %s\n",
            r->nlayers, wall, (double)r->bytes_read / 1e9, wall > 0 ? (double)r->bytes_read / 1e9 / wall : 0,
            r->read_wait_total, (double)hwm / 1e9, (double)in_bytes / 1e9, (double)out_bytes / 1e9,
            in_bytes ? 100.0 * (double)out_bytes / (double)in_bytes : 0, r->cold_total,
            r->out_dir);
}

static int run_setup(lwq_run *r, lwq_error *e)
{
    int rc;
    if ((rc = lwq_ckpt_open(r->o->model_dir, &r->ck, e)) != 0)
        return rc;
    r->ck_open = 1;
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
    return lwq_run_build_batches(r, e);
}

int lwq_quantize_run(const lwq_quantize_opts *o, lwq_error *e)
{
    lwq_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_mutex_init(&r.log_mu, NULL);
    double t0 = lwq_now();
    r.t0 = t0;
    int rc = run_setup(&r, e), nothing = 0;
    if (rc == 0 && o->log_json && !(r.jlog = fopen(o->log_json, "a")))
        rc = lwq_errsys(e, -errno, "%s: cannot open the JSON log", o->log_json);
    lwq_mem_plan mp;
    if (rc == 0)
        rc = lwq_quantize_plan_ckpt(o, &r.ck, &mp, e);
    if (rc == 0) {
        if (!o->quiet)
            lwq_mem_plan_print(&mp, o);
        if (o->max_cpu_gb > 0 && (double)mp.host_peak > o->max_cpu_gb * 1e9 && mp.stream_min_host > 0)
            rc = lwq_errf(e, LWQ_ENOMEM, "the plan needs %.3f GB of host memory, more than --max-cpu-memory-gb %.3f, "
                          "and streaming experts one at a time still needs %.3f GB (dense part %.3f GB + one expert "
                          "%.3f GB per unit); give at least --max-cpu-memory-gb %.3f or lower --calib-size/--calib-seq",
                          (double)mp.host_peak / 1e9, o->max_cpu_gb, (double)mp.stream_min_host / 1e9,
                          (double)mp.dense_bytes / 1e9, (double)mp.expert_bytes / 1e9,
                          (double)mp.stream_min_host / 1e9);
        else if (o->max_gpu_gb > 0 && mp.gpu_peak > 0 && (double)mp.gpu_peak > o->max_gpu_gb * 1e9 &&
                 mp.stream_min_gpu > 0)
            rc = lwq_errf(e, LWQ_ENOMEM, "the plan needs %.3f GB of GPU memory, more than --max-gpu-memory-gb %.3f, "
                          "and streaming experts one at a time still needs %.3f GB; give at least "
                          "--max-gpu-memory-gb %.3f", (double)mp.gpu_peak / 1e9, o->max_gpu_gb,
                          (double)mp.stream_min_gpu / 1e9, (double)mp.stream_min_gpu / 1e9);
        else if (o->max_cpu_gb > 0 && (double)mp.host_peak > o->max_cpu_gb * 1e9)
            rc = lwq_errf(e, LWQ_ENOMEM, "the plan needs %.2f GB of host memory, more than --max-cpu-memory-gb %.2f; "
                          "lower --calib-size/--calib-seq or --prefetch", (double)mp.host_peak / 1e9, o->max_cpu_gb);
        else if (o->max_gpu_gb > 0 && (double)mp.gpu_peak > o->max_gpu_gb * 1e9)
            rc = lwq_errf(e, LWQ_ENOMEM, "the plan needs %.2f GB of GPU memory, more than --max-gpu-memory-gb %.2f",
                          (double)mp.gpu_peak / 1e9, o->max_gpu_gb);
    }
    if (rc == 0 && (rc = lwq_run_fingerprint(&r, e)) == 0 && !o->dry_read)
        rc = lwq_run_prepare_output(&r, &nothing, e);
    if (rc == 0 && nothing) {
        if (!o->quiet)
            fprintf(stderr, "lwq: %s is complete (all %d layers committed); nothing to do\n", r.out_dir, r.nlayers);
        run_free(&r);
        return 0;
    }
    if (rc == 0 && !o->whole_model && !o->dry_read && r.start_layer < r.nlayers) {
        r.bnd[0] = malloc(r.bnd_bytes ? r.bnd_bytes : 1);
        r.bnd[1] = malloc(r.bnd_bytes ? r.bnd_bytes : 1);
        if (!r.bnd[0] || !r.bnd[1])
            rc = lwq_errf(e, LWQ_ENOMEM, "cannot allocate 2 x %.2f GB of boundary activations",
                          (double)r.bnd_bytes / 1e9);
        r.cur = r.start_layer % 2;
    }
    if (rc == 0 && !o->whole_model && r.start_layer < r.nlayers && mp.expert_group > 0) {
        if (!o->quiet)
            LWQ_INFO("expert streaming: MoE layers in units of %d experts", mp.expert_group);
        rc = lwq_run_stream_init(&r, mp.expert_group, e);
    }
    if (rc == 0 && r.start_layer < r.nlayers)
        rc = o->whole_model ? run_whole(&r, e) : run_layerwise(&r, e);
    if (rc == 0 && !o->dry_read)
        rc = lwq_run_finish(&r, e);
    if (rc == 0)
        summary(&r, lwq_now() - t0);
    run_free(&r);
    return rc;
}
