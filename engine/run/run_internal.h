/* engine/run/run_internal.h — state of one `lwq quantize` run, shared by the run*.c files:
 *   run.c           the step list and the layerwise depth loop (read the list there first)
 *   run_setup.c     start-up (checkpoint, plans, backend, batches, resume decision), tear-down
 *   run_layer.c     one layer over the calibration set: embed, forward + observe, --qdq-next
 *   run_reference.c the whole-model reference path
 *   run_output.c    everything written during the loop: shard, boundary, manifest commits; the tail
 *   run_finish.c    after the last layer: index, configs, side files, report, manifest complete
 *   run_stream.c    a MoE layer as units (expert streaming)
 *   run_report.c    progress lines, the summary, per-layer calibration reports
 *   run_gptq.c      what a run says about its GPTQ linears
 *   run_log.c       the --log-json lines
 *   run_ranks.c     a run over MPI ranks: the split, the checks at start, the per-layer meetings
 * Calls go one way (scripts/check-includes.sh checks it): run.c -> run_setup, run_layer,
 * run_reference, run_stream -> run_ranks, run_finish -> run_output -> run_report -> run_gptq -> run_log.  Which thread
 * owns which field: engine/run/run.c.
 * Not public. */
#ifndef LWQ_ENGINE_RUN_INTERNAL_H
#define LWQ_ENGINE_RUN_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdio.h>

#include "core/sys/proc.h"
#include "core/parallel/ranks.h"
#include "engine/run/engine.h"
#include "engine/forward/forward.h"
#include "engine/run/resume/manifest.h"
#include "engine/quant/qlayer.h"
#include "engine/source/devslab.h"
#include "engine/quant/qops.h"
#include "engine/run/spill.h"
#include "engine/source/tlist.h"
#include "io/pool.h"
#include "io/prefetch.h"
#include "io/reader.h"
#include "io/runlock.h"
#include "io/writer.h"
#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"

typedef struct lwq_stream lwq_stream;

typedef struct lwq_run {
    const lwq_quantize_opts *o;
    lwq_ckpt ck;
    int ck_open;
    int nlayers;
    lwq_arch_layer *plans;        /* nlayers */
    lwq_quant_choice **choice;    /* [layer][linear] */
    int embed;                    /* LWQ_LMHEAD_*: how the token embedding is written (lwq_recipe_embedding) */
    lwq_quant_choice lm_choice;   /* lm_head's choice, resolved as a decoder linear's is (lwq_qlayer_choice):
                                   * the mse candidates of a Four-over-Six lm_head come from it */
    lwq_backend be;
    int be_open;
    int be_owned;                 /* made here (destroyed at the end), not the caller's o->backend */
    lwq_qops qops;                /* where weights are quantized (the GPU with the CUDA backend) */
    lwq_devslab wslab;            /* device memory of a layer's weight copies, reused (devslab.h) */
    lwq_model model;
    int model_open;
    lwq_dtype act;
    int64_t hidden;

    /* calibration batches */
    int nb;
    lwq_batch *batches;
    int32_t **tokens;             /* per batch, (rows) host, left-padded */
    int64_t *rows;                /* per batch */
    uint64_t *boff;               /* byte offset of batch b in a boundary buffer */
    uint64_t bnd_bytes;
    unsigned char *bnd[2];        /* the two boundaries (host) */
    int cur;                      /* bnd[cur] holds the input of the next layer */
    int bnd_pending[2];           /* a boundary write from bnd[i] is in flight */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    lwq_tensor work;              /* (max rows, hidden) act on the device */
    int64_t calib_tokens;

    /* ranks (core/parallel/ranks.h, engine/quant/dist.h, run_ranks.c): this rank computes batches [b0, b1) and
     * holds only their rows of a boundary; boff[] stays the whole calibration set's layout and
     * bnd_base = boff[b0] is where this rank's rows start in it.  One process: b0 = 0, b1 = nb. */
    lwq_ranks *rk;
    lwq_ranks rk_one;             /* the single rank of a run without MPI */
    int b0, b1;
    int *bfirst;                  /* (size + 1) every rank's first batch */
    uint64_t bnd_base;
    uint64_t bnd_all;             /* boff[nb]: the whole boundary, all ranks */
    struct lwq_nccl *nccl;        /* LWQ_NCCL=1 on GPU ranks: Hessian limbs summed by NCCL, else NULL */
    int part_rc;                  /* under mu: how the writer's last boundary part went */
    uint64_t part_hash;
    int part_for;                 /* engine thread: the commit (layer + 1) whose part was last
                                     submitted (lwq_run_submit_part; 0: none) */
    struct lwq_rank_times {
        double read_wait_s, forward_s, reduce_s, quantize_s, gather_s, part_wait_s;
    } *rtimes;                    /* rank 0 of several: (nlayers x size), filled at each layer's end */

    /* I/O */
    lwq_io_reader *rd;
    lwq_pool pool;
    int pool_open;
    struct pool_reg {
        const lwq_backend *be;
        int done;
    } pool_reg;
    lwq_prefetch *pf;
    lwq_writer *wr;
    lwq_stream *stream;           /* expert streaming (run_stream.c), NULL when off */

    /* output and resume */
    char out_dir[PATH_MAX];
    char resume_dir[PATH_MAX];
    char manifest_path[PATH_MAX];
    lwq_runlock lock;             /* one run per output: held from prepare_output to run_free */
    lwq_fingerprint fp;
    char fp_hex[17];
    lwq_manifest man;             /* split between engine and writer thread: see run.c */
    int start_layer;              /* first layer to compute (resume) */
    int has_head_amax;            /* engine thread: a W8A8 lm_head's input amax is known (lwq_run_head_amax), */
    float head_amax;              /* handed to the last commit's manifest job (run_output.c) */
    int tail_written;             /* model-tail.safetensors made durable by this process */

    /* report */
    int cold_total;
    struct lwq_layer_log {
        uint64_t bytes_read, rss, gpu_bytes;
        double read_wait_s, forward_s, quantize_s, write_s;
        double reduce_s, gather_s;  /* ranks: statistics met, quantized tensors sent to rank 0 */
        double part_wait_s;         /* ranks: waiting for this rank's boundary part to be durable */
        int cold_experts, n_experts;
    } *lstat;                      /* nlayers */
    pthread_mutex_t log_mu;
    FILE *jlog;
    double t0;
    uint64_t bytes_read;
    double read_wait_total;
    uint64_t peak_gpu;
    uint64_t peak_rss;            /* highest VmRSS sampled after a layer (VmHWM can lag it) */
    uint64_t plan_host_peak;      /* the memory plan's host peak (engine/run/plan/plan.c), the bound peak_rss
                                     must stay under; reported beside it in the summary */
    double setup_s;               /* start of the run to the first layer: set-up, embedding, ring */
    double loop_s;                /* the depth loop alone: wall minus set-up, embedding, tail */
} lwq_run;


/* Where batch b's rows start in this rank's boundary buffers. */
static inline uint64_t lwq_run_bofs(const lwq_run *r, int b) { return r->boff[b] - r->bnd_base; }

/* ---- run_setup.c: step 0 and the tear-down ---- */
void lwq_run_init(lwq_run *r, const lwq_quantize_opts *o);
/* Open, check and plan; sets *nothing_to_do when the output is already complete. */
int lwq_run_setup(lwq_run *r, int *nothing_to_do, lwq_error *e);
void lwq_run_free(lwq_run *r);
int lwq_run_fingerprint(lwq_run *r, lwq_error *e);
/* out_dir, resume_dir and manifest_path from the options. */
int lwq_run_output_paths(lwq_run *r, lwq_error *e);
/* Decide fresh / restart / resume / finish-only; sets r->start_layer and r->man. */
int lwq_run_prepare_output(lwq_run *r, int *nothing_to_do, lwq_error *e);
int lwq_run_build_batches(lwq_run *r, lwq_error *e);

/* ---- run_layer.c: one layer over the calibration set (both paths) ---- */
/* The work tensor cut to batch b's rows. */
lwq_tensor lwq_run_work_view(lwq_run *r, int b);
/* Step 1: embed every batch into the host boundary dst. */
int lwq_run_embed(lwq_run *r, unsigned char *dst, lwq_error *e);
/* A W8A8 lm_head (LWQ_LMHEAD_W8A8): the calibration amax of its input, the final norm of the last layer's
 * output bnd[outb] over this rank's rows (real tokens, padding too with --include-padding), the max over
 * ranks (every rank calls it); into r->head_amax for the last commit.  0 without a W8A8 lm_head. */
int lwq_run_head_amax(lwq_run *r, int outb, lwq_error *e);
/* The same on one batch's final hidden state h (the whole-model path; h is overwritten by the norm). */
int lwq_run_head_amax_batch(lwq_run *r, const lwq_weights *tail, int b, lwq_tensor *h, float *amax, lwq_error *e);
/* The observers of layer L (with Hessians for the linears that want them). */
int lwq_run_stats_init(lwq_run *r, int L, lwq_layer_stats *st, lwq_error *e);
/* Step 3: forward layer L over every batch from bnd[in] into bnd[outb] (outb < 0: outputs
 * dropped), observing with st when given. */
int lwq_run_forward_layer(lwq_run *r, int L, const lwq_weights *w, int in, int outb, lwq_layer_stats *st,
                          lwq_error *e);
/* The statistics of the linears with only[i] (NULL: all) after their forward: Hessian partials
 * closed, summed over the ranks (with `wide`, also the k/v and expert counts: the part of the
 * layer that observes them), finished.  rc: the forward's outcome, which every rank brings to the
 * reduction (a failure anywhere is then every rank's error). */
int lwq_run_stats_done(lwq_run *r, lwq_layer_stats *st, const uint8_t *only, int wide, int rc, lwq_error *e);
/* Dequantized copies of layer L's quantized weights, in the source dtype (--qdq-next). */
int lwq_run_qdq_overlay(lwq_run *r, int L, lwq_tlist *out, const lwq_tlist *src, lwq_tlist *ov, lwq_error *e);

/* ---- run_reference.c: the whole-model path ---- */
int lwq_run_whole(lwq_run *r, lwq_error *e);

/* ---- run_stream.c: expert streaming ---- */
/* init with group > 0 turns it on (units of every layer from start_layer); a layer is streamed
 * when it has more than one unit. */
int lwq_run_stream_init(lwq_run *r, int group, lwq_error *e);
void lwq_run_stream_free(lwq_run *r);
int lwq_run_stream_active(const lwq_run *r, int L);
int lwq_run_stream_tail_linear(const lwq_run *r, int L, const char *name);
/* Raise *slot to the largest unit's ring slot. */
int lwq_run_stream_slot(lwq_run *r, uint64_t *slot, lwq_error *e);
/* Submit layer L's units as prefetch jobs; *job = the first one. */
int lwq_run_stream_submit(lwq_run *r, int L, int64_t *job, lwq_error *e);
int64_t lwq_run_stream_job0(const lwq_run *r, int L);
/* Views of an unstreamed layer's single unit. */
int lwq_run_stream_views(lwq_run *r, int L, void *slot, lwq_tlist *src, lwq_error *e);
/* Compute, quantize and commit streamed layer L (its unit slots are released as it goes). */
int lwq_run_stream_layer(lwq_run *r, int L, lwq_error *e);

/* ---- run_ranks.c: a run over several ranks (one process: each is a no-op or the plain step) ---- */
/* After the batches are built: this rank's batches, and what several ranks cannot do. */
int lwq_run_ranks_split(lwq_run *r, lwq_error *e);
/* Every rank runs the same binary, options and inputs: compared at start, a difference refused
 * naming the rank and what differs. */
int lwq_run_ranks_same(lwq_run *r, lwq_error *e);
/* LWQ_NCCL=1 with the CUDA backend: NCCL joined (collective; after lwq_run_ranks_same). */
int lwq_run_ranks_nccl(lwq_run *r, lwq_error *e);
/* Rank 0's fresh/resume decision (rc, *nothing_to_do, start layer) given to every rank; the others
 * then read the manifest rank 0 prepared. */
int lwq_run_ranks_output(lwq_run *r, int rc, int *nothing_to_do, lwq_error *e);
/* Crash test (tests/tools/test_ranks.c): LWQ_RANKS_KILL=R:L makes rank R kill itself with
 * SIGKILL in layer L, after its forward, before the statistics meet. */
void lwq_run_ranks_fault(const lwq_run *r, int L);
/* rc agreed over the ranks (the first failing rank's error on all of them). */
int lwq_run_agree(lwq_run *r, int rc, lwq_error *e);
/* This rank's rows of the committed boundary, from the one boundary file or the parts. */
int lwq_run_load_boundary(lwq_run *r, unsigned char *dst, lwq_error *e);
/* Quantize layer L's linears (only: a streamed unit's) split over the ranks; out and rep on rank 0
 * (on every rank with `all`, for --qdq-next) are what lwq_qlayer_run[_part] gives. */
int lwq_run_ranks_quantize(lwq_run *r, int L, const lwq_layer_stats *st, const lwq_tlist *src, const uint8_t *only,
                           lwq_kv_mode kv, int all, lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e);
/* The end of layer L on every rank: its boundary part durable, statuses and times exchanged,
 * rank 0 queues the manifest naming every part; *stop: some rank was asked to stop. */
int lwq_run_ranks_end_layer(lwq_run *r, int L, int rc, int *stop, lwq_error *e);

/* ---- run_output.c: steps 5-7 ---- */
/* Queue shard + boundary + manifest writes of layer L (out/src freed when written). */
int lwq_run_commit_layer(lwq_run *r, int layer, lwq_tlist *out, lwq_tlist *src, int64_t job,
                         lwq_error *e);
/* The same for a streamed layer whose quantized experts are in `spill` (taken over, closed once
 * the shard is written; slot_job -1: its unit slots were released already). */
int lwq_run_commit_layer_spill(lwq_run *r, int layer, lwq_tlist *out, lwq_tlist *src, int64_t slot_job,
                               lwq_spill *spill, lwq_error *e);
/* Queue the tail's streamed copy as the writer's first job, so it overlaps the depth loop (a
 * no-op when a tail tensor needs dequantization; lwq_run_finish then writes it). */
int lwq_run_submit_tail(lwq_run *r, lwq_error *e);
/* Write one shard synchronously (whole-model path). */
int lwq_run_write_shard_now(lwq_run *r, int layer, const lwq_tlist *out, lwq_error *e);
/* The tail written now (when the writer did not copy it during the loop). */
int lwq_run_write_tail(lwq_run *r, lwq_error *e);

/* ---- run_finish.c: step 7 ---- */
/* Tail, index, configs, copied files, report; then mark the manifest complete. */
int lwq_run_finish(lwq_run *r, lwq_error *e);
/* Wait until no boundary write reads bnd[i]. */
void lwq_run_wait_boundary(lwq_run *r, int i);
/* Ranks: queue this rank's part of layer L's output boundary (the writer records its rc and hash
 * in part_rc / part_hash), and on rank 0 the manifest committing L naming `parts` (taken over). */
int lwq_run_submit_part(lwq_run *r, int layer, lwq_error *e);
int lwq_run_submit_manifest(lwq_run *r, int layer, lwq_manifest_part *parts, int nparts, lwq_error *e);
/* Rank 0: boundary parts in the resume directory that the manifest does not name are removed. */
int lwq_run_remove_stale_parts(lwq_run *r, lwq_error *e);

/* ---- run_log.c: the JSON log (calls nothing of the run) ---- */
/* One JSON line to --log-json (thread-safe). */
void lwq_run_jlog(lwq_run *r, const char *json);
/* Layer L's JSON line (writer thread, once its shard is durable). */
void lwq_run_log_layer(lwq_run *r, int layer);

/* ---- run_report.c: progress, summary, layer reports ---- */
/* Layer L's progress line; samples RSS and GPU peak into lstat[L]. */
void lwq_run_progress(lwq_run *r, int L, double t_start, double *t_prev, int done_layers);
void lwq_run_summary(lwq_run *r, double wall);
/* Compact JSON of a layer's calibration report (malloc'd, NULL when out of memory). */
char *lwq_run_layer_report(int layer, const lwq_qlayer_report *rep, const int64_t *expert_tokens);
/* engine/run/run_gptq.c: GPTQ's per-layer summary in the layer report (a cJSON object), and one JSON
 * log event + one progress line per layer with GPTQ linears. */
struct cJSON;
void lwq_run_gptq_summary(struct cJSON *layer_report, const lwq_qlayer_report *rep);
void lwq_run_log_gptq(lwq_run *r, int layer, const lwq_qlayer_report *rep);

#endif
