/* engine/run/run.c — `lwq quantize`: the steps of a run, and the layerwise depth loop.
 *
 * THE STEPS (../shared/DESIGN.md "Pipeline and threads"; the function that performs each):
 *
 *   0. set up       checkpoint, plans, backend, batches, memory plan, fingerprint, and the
 *                   fresh / resume / nothing-to-do decision      lwq_run_setup       run_setup.c
 *   1. embed        the calibration set into the boundary, or load the committed boundary of a
 *                   resumed run                                  lwq_run_embed       run_layer.c
 *                                                                load_boundary       here
 *   then for each layer L from the first uncommitted one:
 *   2. read         prefetch thread: L's byte ranges into a ring slot, queued ahead
 *                                                                start_io            here
 *                   engine: wait for the slot, view its tensors  lwq_prefetch_wait,
 *                                                                lwq_layersrc_views
 *   3. forward +    every batch from bnd[L % 2] through layer L into bnd[(L + 1) % 2], the
 *      observe      observers recording amax, expert counts, Hessians
 *                                                                lwq_run_forward_layer run_layer.c
 *   4. quantize     the shard's tensors from the statistics      lwq_qlayer_run      qlayer.c
 *                   (process_layer, here, does 3 and 4 and the --qdq-next re-forward)
 *   5. write        writer thread: the shard, durable            shard_serialize     run_output.c
 *                   writer thread: the next boundary, durable    boundary_serialize  run_output.c
 *   6. commit       writer thread: manifest.json naming L + 1 layers
 *                                                                manifest_serialize  run_output.c
 *                   (5 and 6 are queued, in order, by lwq_run_commit_layer; the engine goes on
 *                   with L + 1 while they run; the slot of L is released once its shard is on
 *                   disk)
 *   after the last layer:
 *   7. finish       tail, index, configs, side files, calibration report; manifest complete
 *                                                                lwq_run_finish      run_finish.c
 *   8. report       summary line and JSON                        lwq_run_summary     run_report.c
 *
 * Expert streaming (run_stream.c) does 2-4 of a MoE layer as units: the dense part, then groups
 * of routed experts, each read, computed, observed and quantized in turn; 5-6 are unchanged.
 * --whole-model replaces 1-6 with the reference path (lwq_run_whole, run_reference.c): every
 * layer resident, each batch through all layers, shards written at once, no commits.
 *
 * WHO OWNS WHAT (lwq_run, run_internal.h):
 *   - engine thread: everything during steps 0 and 7-8 (no other thread of the run exists
 *     then); during the loop: the boundaries it computes into, the work tensor, the model and
 *     statistics, lstat[L] up to the commit of L, and man.layers[L].report of the layer it
 *     computes (written before L is submitted; the writer renders only committed layers).
 *   - writer thread (callbacks in run_output.c), during the loop: man.layers[L].bytes/xxh64,
 *     man.boundary_bytes/xxh64, man.committed, man.boundary_file, lstat[L].write_s, and the
 *     tail_written flag.  The engine reads them only after lwq_writer_flush.
 *   - shared, under r->mu: bnd_pending[] (a boundary buffer the writer is still saving; the
 *     engine waits on r->cv before computing into it); under r->log_mu: the JSON log.
 *   - prefetch thread: only the ring slots it fills, handed over by lwq_prefetch_wait and back
 *     by lwq_prefetch_release (from the writer thread, once the layer's shard is durable).
 *
 * INVARIANTS (asserted where they are relied on):
 *   - boundary alternation: the input of layer L is bnd[L % 2] in memory and, once committed,
 *     boundary-(L % 2).bin on disk; the output of L goes to the other one, so the file the
 *     manifest names is never the one being written (process_layer, lwq_run_commit_layer).
 *   - commits are consecutive: the manifest for L + 1 layers follows the one for L layers, and
 *     is rendered only after layer L's shard and boundary are durable (manifest_serialize). */
#include <assert.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/file.h"
#include "core/data/hash.h"
#include "core/sys/log.h"
#include "core/sys/trace.h"
#include "engine/source/layersrc.h"
#include "engine/run/run_internal.h"
#include "io/durable.h"

static volatile sig_atomic_t g_stop;

void lwq_engine_request_stop(void) { g_stop = 1; }
int lwq_engine_stop_requested(void) { return g_stop != 0; }

static int run_layerwise(lwq_run *r, lwq_error *e);
/* ---- step 1 on resume, steps 3-4 ------------------------------------------------------------ */

static int process_layer(lwq_run *r, int L, const lwq_tlist *src, lwq_tlist *out, int no_output, lwq_error *e);
static int end_layer(lwq_run *r, int L, int rc, lwq_error *e);
static int stop_point(lwq_run *r, int L, lwq_error *e);
static int start_io(lwq_run *r, lwq_io_range **ranges, int *nranges, lwq_error *e);

int lwq_quantize_run(const lwq_quantize_opts *o, lwq_error *e)
{
    /* sequential GPTQ: each layer is calibrated on the quantized previous layers' outputs */
    lwq_quantize_opts eff = *o;
    eff.qdq_next |= o->recipe && lwq_recipe_uses_gptq(o->recipe);
    o = &eff;
    lwq_run r;
    lwq_run_init(&r, o);
    int nothing = 0, rc = lwq_run_setup(&r, &nothing, e);
    if (rc == 0 && nothing) {
        if (!o->quiet)
            LWQ_INFO("nothing to do: %s is complete (all %d layers)", r.out_dir, r.nlayers);
        lwq_run_free(&r);
        return 0;
    }
    if (rc == 0 && r.start_layer < r.nlayers)
        rc = o->whole_model ? lwq_run_whole(&r, e) : run_layerwise(&r, e);
    /* rank 0 alone writes the tail, index and configs; the others wait for its outcome */
    if (rc == 0 && !o->dry_read)
        rc = lwq_run_agree(&r, r.rk->rank == 0 ? lwq_run_finish(&r, e) : 0, e);
    if (rc == 0)
        lwq_run_summary(&r, lwq_now() - r.t0);
    lwq_run_free(&r);
    return rc;
}

/* ---- the layerwise path ---------------------------------------------------------------------- */

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
        rc = r->man.boundary_file[0] || r->man.nparts ? lwq_run_load_boundary(r, r->bnd[r->cur], e)
                                                       : lwq_run_embed(r, r->bnd[r->cur], e);
    if (rc == 0)
        rc = start_io(r, ranges, nranges, e);
    if (rc == 0 && !r->o->dry_read)
        rc = lwq_writer_init(&r->wr, 4, e);
    /* the unchanged tail is copied by the writer while the first layers compute (rank 0) */
    if (rc == 0 && !r->o->dry_read && r->start_layer < r->nlayers && r->rk->rank == 0)
        rc = lwq_run_submit_tail(r, e);
    rc = lwq_run_agree(r, rc, e);
    double t_start = lwq_now(), t_prev = t_start;
    r->setup_s = t_start - r->t0;
    for (int L = r->start_layer; rc == 0 && L < r->nlayers; L++) {
        int64_t job = r->stream ? lwq_run_stream_job0(r, L) : L - r->start_layer;
        void *slot;
        if (lwq_run_stream_active(r, L)) { /* expert streaming: units (run_stream.c) */
            rc = lwq_run_stream_layer(r, L, e);
            if ((rc = end_layer(r, L, rc, e)) != 0)
                break;
            lwq_run_progress(r, L, t_start, &t_prev, L - r->start_layer + 1);
            r->cur = 1 - r->cur;
            if ((rc = stop_point(r, L, e)) != 0)
                break;
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
            lwq_run_progress(r, L, t_start, &t_prev, L - r->start_layer + 1);
            continue;
        }
        lwq_tlist src, out = {0};
        if ((rc = r->stream ? lwq_run_stream_views(r, L, slot, &src, e)
                            : lwq_layersrc_views(&r->ck, L, ranges[L], slot, &src, e)) != 0)
            rc = lwq_run_agree(r, rc, e);
        else if ((rc = process_layer(r, L, &src, &out, 0, e)) != 0) {
            lwq_tlist_free(&out);
            lwq_tlist_free(&src);
        } else {
            /* a W8A8 lm_head's input amax, from the last layer's output, goes with its commit */
            if (L == r->nlayers - 1 && (rc = lwq_run_head_amax(r, 1 - r->cur, e)) != 0) {
                lwq_tlist_free(&out);
                lwq_tlist_free(&src);
            } else {
                /* the slot is released, and src/out freed, once the shard is on disk */
                rc = lwq_run_commit_layer(r, L, &out, &src, job, e);
            }
        }
        if ((rc = end_layer(r, L, rc, e)) != 0)
            break;
        lwq_run_progress(r, L, t_start, &t_prev, L - r->start_layer + 1);
        r->cur = 1 - r->cur;
        if ((rc = stop_point(r, L, e)) != 0)
            break;
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

/* Over ranks, the end of every layer is a meeting (run_ranks.c): the boundary parts are durable,
 * rank 0 commits, and a failure or a stop request anywhere is known everywhere. */
static int end_layer(lwq_run *r, int L, int rc, lwq_error *e)
{
    if (r->rk->size <= 1)
        return rc;
    int stop = g_stop != 0;
    rc = lwq_run_ranks_end_layer(r, L, rc, &stop, e);
    if (stop)
        g_stop = 1;
    return rc;
}

/* SIGINT/SIGTERM: stop once the layer just done is committed (on every rank alike: end_layer). */
static int stop_point(lwq_run *r, int L, lwq_error *e)
{
    if (!g_stop || L + 1 >= r->nlayers)
        return 0;
    int rc = lwq_writer_flush(r->wr, e);
    if (r->rk->size > 1)
        rc = lwq_run_agree(r, rc, e);
    if (rc == 0)
        rc = lwq_errf(e, LWQ_ECANCELED, "stopped by a signal after layer %d/%d was committed; rerun the same "
                      "command to resume", L + 1, r->nlayers);
    if (r->rk->size > 1)
        r->rk->agreed = 1; /* every rank stops here, with this message */
    return rc;
}

/* Calibrate and quantize layer L whose source tensors are `src`; the output of the layer goes to
 * bnd[1 - cur] (unless `no_output`). */
static int process_layer(lwq_run *r, int L, const lwq_tlist *src, lwq_tlist *out, int no_output, lwq_error *e)
{
    struct lwq_layer_log *ls = &r->lstat[L];
    const lwq_arch_layer *p = &r->plans[L];
    int nxt = 1 - r->cur, nE = p->is_moe ? r->ck.cfg.num_experts : 0;
    lwq_layer_stats st;
    lwq_layer_weights lw;
    lwq_tlist ov = {0};
    lwq_qlayer_report rep = {0};
    assert(r->cur == L % 2); /* boundary alternation: the input of layer L is bnd[L % 2] */
    int rc = lwq_run_stats_init(r, L, &st, e);
    if (rc)
        return rc;
    lwq_layer_weights_init(&lw, &r->be, src, NULL, &r->ck.cfg.names);
    lwq_layer_weights_use_slab(&lw, &r->wslab);
    double t = lwq_now();
    if (!no_output) /* bnd[nxt] holds layer L-2's output (L-1's input): the writer may still be saving it */
        lwq_run_wait_boundary(r, nxt);
    LWQ_TRACE_BEGIN("forward", L);
    rc = lwq_run_forward_layer(r, L, &lw.w, r->cur, r->o->qdq_next || no_output ? -1 : nxt, &st, e);
    LWQ_TRACE_END();
    ls->forward_s = lwq_now() - t;
    /* over ranks, this rank's rows of the next boundary are final once the forward is done (unless
     * --qdq-next runs it again): they go to disk while the layer quantizes, so they are durable by
     * the meeting at its end (lwq_run_ranks_end_layer) instead of being waited for there */
    if (rc == 0 && r->rk->size > 1 && !r->o->qdq_next && !no_output && L + 1 < r->nlayers)
        rc = lwq_run_submit_part(r, L, e);
    lwq_run_ranks_fault(r, L);
    /* every rank reaches the reduction, with its forward's outcome */
    rc = lwq_run_stats_done(r, &st, NULL, 1, rc, e);
    t = lwq_now();
    LWQ_TRACE_BEGIN("quantize", L);
    if (rc == 0) {
        /* the quantizers read the forward's device copies of the weights (no second upload) */
        lwq_qops_set_devcopies(&r->qops, lwq_layer_weights_device, &lw);
        rc = lwq_run_ranks_quantize(r, L, &st, src, NULL, r->o->recipe->kv, r->o->qdq_next, out, &rep, e);
        lwq_qops_set_devcopies(&r->qops, NULL, NULL);
    }
    LWQ_TRACE_END();
    ls->quantize_s = lwq_now() - t - ls->gather_s;
    if (rc == 0 && r->o->qdq_next && !no_output) {
        t = lwq_now();
        lwq_layer_weights_free(&lw);
        if ((rc = lwq_run_qdq_overlay(r, L, out, src, &ov, e)) == 0) {
            lwq_layer_weights_init(&lw, &r->be, src, &ov, &r->ck.cfg.names);
            lwq_layer_weights_use_slab(&lw, &r->wslab);
            LWQ_TRACE_BEGIN("forward qdq", L);
            rc = lwq_run_forward_layer(r, L, &lw.w, r->cur, nxt, NULL, e);
            LWQ_TRACE_END();
        }
        ls->forward_s += lwq_now() - t;
        rc = lwq_run_agree(r, rc, e);
    }
    if (rc == 0) {
        ls->cold_experts = rep.cold_experts;
        ls->n_experts = nE;
        r->cold_total += rep.cold_experts;
        free(r->man.layers[L].report);
        r->man.layers[L].report = lwq_run_layer_report(L, &rep, nE ? st.expert_tokens : NULL);
        if (!r->man.layers[L].report)
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        else
            lwq_run_log_gptq(r, L, &rep);
    }
    lwq_qlayer_report_free(&rep);
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&ov);
    lwq_stats_free(&st);
    return rc;
}

/* ---- step 2: the read path ----------------------------------------------------------------- */

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

