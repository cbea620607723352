/* engine/run_ranks.c — a run over several ranks (`mpirun -np N lwq quantize`; ../shared/DESIGN.md
 * "Beyond one machine").  What every rank does, and what only rank 0 does:
 *
 *   set up     every rank opens the checkpoint, builds all batches and takes its contiguous range
 *              of whole batches (engine/quant/dist.h); the binary, the options and the inputs are compared
 *              (lwq_run_ranks_same); rank 0 alone locks, clears and decides fresh / resume on the
 *              output, and tells the others (lwq_run_ranks_output), who then read its manifest:
 *              the output and resume directories must be on a filesystem every rank sees.
 *   per layer  every rank reads the whole layer and runs its batches (its rows of the boundary
 *              only); the statistics meet exactly (run_layer.c: lwq_run_stats_done); the linears
 *              are quantized where engine/quant/dist.h assigns them (whole, or by rows) and gathered to rank 0
 *              (lwq_run_ranks_quantize: to every rank with --qdq-next, which re-runs the layer);
 *              rank 0 alone writes the shard; every rank writes its part of the next boundary;
 *   commit     shard (rank 0) -> every rank's boundary part, durable -> manifest (rank 0) naming
 *              every part with its batches and checksum (lwq_run_ranks_end_layer).  Parts are
 *              addressed by batch range, so a resume with another rank count reads any rows.
 *   finish     rank 0 writes the tail, index, configs and report; the others wait.
 * Every collective is reached by every rank in the same order.  A step that can fail on one rank
 * ends in an agreement (lwq_run_agree), so the error ("rank 2: ...") stops every rank cleanly; a
 * rank that dies (SIGKILL, OOM) makes the launcher end the job, and the identical command resumes.
 * Engine thread only: the writer and prefetch threads never call MPI. */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/data/hash.h"
#include "core/sys/log.h"
#include "engine/quant/dist.h"
#include "engine/run/run_internal.h"
#include "io/durable.h"
#include "io/sys.h"

void lwq_run_ranks_fault(const lwq_run *r, int L)
{
    const char *v = getenv("LWQ_RANKS_KILL");
    int kr, kl;
    if (v && sscanf(v, "%d:%d", &kr, &kl) == 2 && kr == r->rk->rank && kl == L)
        raise(SIGKILL);
}

int lwq_run_agree(lwq_run *r, int rc, lwq_error *e)
{
    return r->rk->size > 1 ? lwq_ranks_agree(r->rk, rc, e) : (rc < 0 ? rc : 0);
}

/* ---- set up ----------------------------------------------------------------------------------- */

int lwq_run_ranks_split(lwq_run *r, lwq_error *e)
{
    const lwq_ranks *rk = r->rk;
    r->b0 = 0;
    r->b1 = r->nb;
    r->bnd_all = r->boff[r->nb];
    if (rk->size > 1 && (r->o->whole_model || r->o->dry_read))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s runs in one process; start it without mpirun (%d ranks here)",
                        r->o->whole_model ? "--whole-model (the reference path)" : "--dry-read", rk->size);
    r->bfirst = malloc((size_t)(rk->size + 1) * sizeof *r->bfirst);
    if (!r->bfirst)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    int rc = lwq_dist_split_batches(r->rows, r->nb, rk->size, r->bfirst, e);
    if (rc)
        return rc;
    r->b0 = r->bfirst[rk->rank];
    r->b1 = r->bfirst[rk->rank + 1];
    r->bnd_base = r->boff[r->b0];
    r->bnd_bytes = r->boff[r->b1] - r->boff[r->b0];
    if (rk->size > 1 && rk->rank == 0 &&
        !(r->rtimes = calloc((size_t)r->nlayers * (size_t)rk->size, sizeof *r->rtimes)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    if (rk->size > 1 && !r->o->quiet) {
        LWQ_INFO("%d ranks (%s); %d calibration batches, rank 0 computes batches [%d, %d)", rk->size, rk->impl, r->nb,
                 r->b0, r->b1);
    }
    return 0;
}

/* What must be equal on every rank, each part hashed on its own so a difference can be named. */
enum { SAME_BINARY = 0, SAME_OPTIONS, SAME_PATHS, SAME_FP0, SAME_N = SAME_FP0 + LWQ_FP_PARTS };

static uint64_t binary_hash(void)
{
    uint64_t h = 0, n = 0;
    lwq_error ig = {0};
    if (lwq_file_xxh64("/proc/self/exe", &h, &n, &ig) != 0)
        return 0;
    return h ^ n;
}

static uint64_t hash_str(uint64_t h, const char *s)
{
    return lwq_xxh64(s ? s : "", s ? strlen(s) + 1 : 1, h);
}

static int nccl_wanted(void)
{
    const char *v = getenv("LWQ_NCCL");
    return v && !strcmp(v, "1");
}

int lwq_run_ranks_nccl(lwq_run *r, lwq_error *e)
{
    if (!nccl_wanted() || !r->rk->mpi || r->be.ops->device == LWQ_DEV_CPU)
        return 0;
    int rc = lwq_nccl_open(&r->nccl, r->rk, &r->be, e);
    if (rc == 0 && !r->o->quiet)
        LWQ_INFO("NCCL: the Hessians' sums go through ncclAllReduce on the GPUs (LWQ_NCCL=1)");
    return rc;
}

int lwq_run_ranks_same(lwq_run *r, lwq_error *e)
{
    lwq_ranks *rk = r->rk;
    if (rk->size <= 1)
        return 0;
    const lwq_quantize_opts *o = r->o;
    uint64_t mine[SAME_N];
    mine[SAME_BINARY] = binary_hash();
    /* every option that changes what a rank computes or where it writes (not --threads, which
     * changes no byte, nor --quiet / --log-json, which rank 0 alone honours) */
    double num[] = {o->batch_size, o->include_padding, o->all_experts, o->qdq_next, o->whole_model, o->dry_read,
                    o->device, o->max_gpu_gb, o->max_cpu_gb, o->prefetch, o->expert_group, o->repair, nccl_wanted()};
    mine[SAME_OPTIONS] = lwq_xxh64(num, sizeof num, 0);
    mine[SAME_PATHS] = hash_str(hash_str(hash_str(0, o->model_dir), o->out_dir), o->resume_dir);
    for (int i = 0; i < LWQ_FP_PARTS; i++)
        mine[SAME_FP0 + i] = r->fp.part[i];
    uint64_t *all = malloc((size_t)rk->size * sizeof mine);
    if (!all)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    int rc = lwq_ranks_allgather(rk, mine, sizeof mine, all, e);
    for (int q = 1; rc == 0 && q < rk->size; q++) {
        char diff[512] = "";
        size_t k = 0;
        for (int i = 0; i < SAME_N; i++) {
            if (all[(size_t)q * SAME_N + i] == all[i])
                continue;
            const char *what = i == SAME_BINARY ? "the lwq binary" : i == SAME_OPTIONS ? "options"
                               : i == SAME_PATHS ? "model, output or resume directory" : lwq_fp_part_names[i - SAME_FP0];
            k += (size_t)snprintf(diff + k, k < sizeof diff ? sizeof diff - k : 0, "%s%s", k ? ", " : "", what);
            if (k >= sizeof diff)
                k = sizeof diff - 1;
        }
        if (diff[0]) { /* every rank sees the same table: every rank fails alike */
            rk->agreed = 1;
            rc = lwq_errf(e, LWQ_EINVAL, "rank %d differs from rank 0 in: %s; every rank must run the same lwq binary "
                          "with the same options and inputs", q, diff);
        }
    }
    free(all);
    return rc;
}

int lwq_run_ranks_output(lwq_run *r, int rc, int *nothing_to_do, lwq_error *e)
{
    lwq_ranks *rk = r->rk;
    if (rk->size <= 1)
        return rc;
    /* rank 0's outcome first: its error (a lock held elsewhere, foreign files, another run's
     * manifest) is every rank's */
    if ((rc = lwq_ranks_agree(rk, rc, e)) != 0)
        return rc;
    int32_t d[2] = {*nothing_to_do, r->start_layer};
    if ((rc = lwq_ranks_bcast(rk, d, sizeof d, 0, e)) != 0)
        return rc;
    *nothing_to_do = d[0];
    if (rk->rank != 0) {
        r->start_layer = d[1];
        rc = lwq_manifest_load(r->manifest_path, &r->man, e);
        if (rc == 0 && (r->man.fp.all != r->fp.all || r->man.committed != r->start_layer))
            rc = lwq_errf(e, LWQ_ESTATE, "%s is not the manifest rank 0 prepared (committed %d, rank 0 decided %d)",
                          r->manifest_path, r->man.committed, r->start_layer);
        if (rc == LWQ_ENOENT)
            rc = lwq_errf(e, LWQ_ENOENT, "%s does not exist here, but rank 0 wrote it", r->manifest_path);
        if (rc)
            rc = lwq_errf(e, rc, "(the output and resume directories must be on a filesystem every rank sees)");
    } else if (*nothing_to_do == 0 && r->start_layer < r->nlayers) {
        rc = lwq_run_remove_stale_parts(r, e); /* before any rank writes a new part */
    }
    return lwq_ranks_agree(rk, rc, e);
}

/* ---- resume: this rank's rows from the committed boundary ------------------------------------- */

/* Read the whole of one boundary source (to check its checksum), copying the rows of batches
 * [b0, b1) that fall in it into dst. */
static int read_source(lwq_run *r, const char *name, int s0, int s1, uint64_t bytes, uint64_t xxh, unsigned char *dst,
                       lwq_error *e)
{
    char p[PATH_MAX];
    int rc = lwq_pathf(e, p, sizeof p, "%s/%s", r->resume_dir, name);
    if (rc)
        return rc;
    uint64_t want = r->boff[s1] - r->boff[s0];
    if (bytes != want)
        return lwq_errf(e, LWQ_ESTATE, "%s: the manifest gives %" PRIu64 " bytes for batches [%d, %d), this run's batches "
                        "there hold %" PRIu64 " (another --batch-size or calibration set wrote it; rerun with the "
                        "original options, or delete %s and the output to start over)", p, bytes, s0, s1, want,
                        r->resume_dir);
    const lwq_sys_table *sys = lwq_sys();
    int fd = lwq_durable_open_regular(p, 0, NULL, e); /* a FIFO there is refused, not waited on */
    if (fd < 0)
        return fd;
    size_t cap = 8u << 20;
    unsigned char *buf = malloc(cap);
    lwq_xxh64_state h;
    lwq_xxh64_init(&h, 0);
    uint64_t lo = r->boff[r->b0 > s0 ? r->b0 : s0] - r->boff[s0], hi = r->boff[r->b1 < s1 ? r->b1 : s1] - r->boff[s0];
    uint64_t at = 0;
    rc = buf ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    while (rc == 0 && at < bytes) {
        size_t k = (size_t)(bytes - at < cap ? bytes - at : cap);
        if ((rc = lwq_durable_pread_all(fd, buf, k, (off_t)at, p, e)) != 0)
            break;
        lwq_xxh64_update(&h, buf, k);
        uint64_t a = at > lo ? at : lo, b = at + k < hi ? at + k : hi; /* the overlap with this rank's rows */
        if (a < b)
            memcpy(dst + (r->boff[s0] + a - r->bnd_base), buf + (a - at), (size_t)(b - a));
        at += k;
    }
    char extra;
    if (rc == 0 && sys->pread(fd, &extra, 1, (off_t)bytes) > 0)
        rc = lwq_errf(e, LWQ_ESTATE, "%s is longer than the %" PRIu64 " bytes the manifest gives", p, bytes);
    sys->close(fd);
    free(buf);
    if (rc == 0 && lwq_xxh64_digest(&h) != xxh)
        rc = lwq_errf(e, LWQ_ESTATE, "%s fails its checksum (damaged resume state: delete %s and the output to start "
                      "over)", p, r->resume_dir);
    return rc;
}

int lwq_run_load_boundary(lwq_run *r, unsigned char *dst, lwq_error *e)
{
    const lwq_manifest *m = &r->man;
    if (!m->nparts) /* one file: the whole calibration set */
        return read_source(r, m->boundary_file, 0, r->nb, m->boundary_bytes, m->boundary_xxh64, dst, e);
    if (m->parts[m->nparts - 1].b1 != r->nb)
        return lwq_errf(e, LWQ_ESTATE, "%s: its boundary parts cover %d batches, this run makes %d (another --batch-size "
                        "or calibration set?)", r->manifest_path, m->parts[m->nparts - 1].b1, r->nb);
    for (int i = 0; i < m->nparts; i++) {
        const lwq_manifest_part *q = &m->parts[i];
        if (q->b1 <= r->b0 || q->b0 >= r->b1)
            continue;
        char name[64];
        lwq_part_name(m->committed, q->b0, q->b1, name);
        int rc = read_source(r, name, q->b0, q->b1, q->bytes, q->xxh64, dst, e);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- per layer -------------------------------------------------------------------------------- */

int lwq_run_ranks_quantize(lwq_run *r, int L, const lwq_layer_stats *st, const lwq_tlist *src, const uint8_t *only,
                           lwq_kv_mode kv, int all, lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e)
{
    lwq_ranks *rk = r->rk;
    const lwq_arch_layer *p = &r->plans[L];
    memset(rep, 0, sizeof *rep);
    if (rk->size <= 1)
        return only ? lwq_qlayer_run_part(p, r->choice[L], kv, st, src, &r->qops, only, out, rep, e)
                    : lwq_qlayer_run(p, r->choice[L], kv, st, src, &r->qops, out, rep, e);
    size_t n = (size_t)(p->nlinears ? p->nlinears : 1);
    lwq_qlayer_rows *share = malloc(n * (size_t)rk->size * sizeof *share), *mine = malloc(n * sizeof *mine);
    int rc = share && mine ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    if (rc == 0 && (rc = lwq_dist_assign(p, r->choice[L], only, rk->size, share, e)) == 0) {
        for (int i = 0; i < p->nlinears; i++)
            mine[i] = share[(size_t)i * rk->size + rk->rank];
        rc = lwq_qlayer_run_mine(p, r->choice[L], kv, st, src, &r->qops, only, mine, rk->rank == 0, out, rep, e);
    }
    free(share);
    free(mine);
    double t = lwq_now();
    if ((rc = lwq_run_agree(r, rc, e)) != 0)
        return rc;
    /* the quantized tensors travel to rank 0 (to every rank with `all`); views of the source
     * (rank 0's pass-through tensors) stay, every rank has the source */
    void *blob = NULL, **blobs = NULL;
    uint64_t bytes = 0, *sizes = NULL;
    lwq_qlayer_report none = {0};
    int here = rk->rank == 0 || all;
    rc = rk->rank == 0 && !all ? lwq_dist_pack(out, out->n, &none, &blob, &bytes, e)
                               : lwq_dist_pack(out, 0, rk->rank == 0 ? &none : rep, &blob, &bytes, e);
    if (rc == 0 && here) {
        blobs = calloc((size_t)rk->size, sizeof *blobs);
        sizes = calloc((size_t)rk->size, sizeof *sizes);
        if (!blobs || !sizes)
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    if ((rc = lwq_run_agree(r, rc, e)) == 0)
        rc = lwq_ranks_gather_blobs(rk, all ? -1 : 0, blob, bytes, blobs, sizes, e);
    free(blob);
    if (rc == 0 && here) {
        /* a linear split over ranks arrives in pieces, in rank order, joined in place */
        lwq_dist_join j = {0};
        if (rk->rank != 0) { /* its own tensors come back with everyone's, in rank order */
            lwq_tlist_free(out);
            lwq_qlayer_report_free(rep);
            memset(rep, 0, sizeof *rep);
        } else {
            rc = lwq_dist_join_own(out, &j, e);
        }
        for (int q = 0; rc == 0 && q < rk->size; q++)
            if (q != rk->rank || rk->rank != 0)
                rc = lwq_dist_unpack(blobs[q], sizes[q], q, out, rep, &j, e);
        rc = lwq_dist_join_end(&j, out, rc, e);
        lwq_dist_sort_gptq(p, rep);
    }
    if (!here) /* sent */
        lwq_tlist_free(out);
    for (int q = 0; blobs && q < rk->size; q++)
        free(blobs[q]);
    free(blobs);
    free(sizes);
    r->lstat[L].gather_s += lwq_now() - t;
    return lwq_run_agree(r, rc, e);
}

/* What each rank says at the end of a layer. */
typedef struct end_msg {
    int32_t rc, stop;
    uint64_t part_hash, part_bytes;
    struct lwq_rank_times t;
} end_msg;

int lwq_run_ranks_end_layer(lwq_run *r, int L, int rc, int *stop, lwq_error *e)
{
    lwq_ranks *rk = r->rk;
    end_msg mine;
    memset(&mine, 0, sizeof mine);
    /* this rank's part of the next boundary must be durable before rank 0 names it */
    if (rc == 0 && L + 1 < r->nlayers) {
        double t = lwq_now();
        lwq_run_wait_boundary(r, 1 - r->cur);
        r->lstat[L].part_wait_s = lwq_now() - t;
        pthread_mutex_lock(&r->mu);
        mine.part_hash = r->part_hash;
        rc = r->part_rc;
        pthread_mutex_unlock(&r->mu);
        if (rc)
            rc = lwq_errf(e, rc, "layer %d: the boundary part for batches [%d, %d) was not written (see the writer's "
                          "error)", L, r->b0, r->b1);
    }
    const struct lwq_layer_log *ls = &r->lstat[L];
    mine.rc = rc;
    mine.stop = *stop;
    mine.part_bytes = r->bnd_bytes;
    mine.t = (struct lwq_rank_times){ls->read_wait_s, ls->forward_s, ls->reduce_s, ls->quantize_s, ls->gather_s,
                                     ls->part_wait_s};
    end_msg *all = malloc((size_t)rk->size * sizeof *all);
    if (!all)
        return lwq_ranks_agree(rk, lwq_errf(e, LWQ_ENOMEM, "out of memory"), e);
    int mrc = lwq_ranks_allgather(rk, &mine, sizeof mine, all, e);
    int failed = 0;
    *stop = 0;
    for (int q = 0; mrc == 0 && q < rk->size; q++) {
        failed |= all[q].rc < 0;
        *stop |= all[q].stop;
    }
    if (mrc || failed) {
        free(all);
        return mrc ? mrc : lwq_ranks_agree(rk, rc, e);
    }
    if (rk->rank == 0) {
        for (int q = 0; q < rk->size; q++)
            r->rtimes[(size_t)L * rk->size + q] = all[q].t;
        lwq_manifest_part *parts = NULL;
        int np = L + 1 < r->nlayers ? rk->size : 0;
        if (np && !(parts = calloc((size_t)np, sizeof *parts)))
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        for (int q = 0; rc == 0 && q < np; q++)
            parts[q] = (lwq_manifest_part){r->bfirst[q], r->bfirst[q + 1], all[q].part_bytes, all[q].part_hash};
        if (rc == 0)
            rc = lwq_run_submit_manifest(r, L, parts, np, e);
        else
            free(parts);
    }
    free(all);
    return lwq_ranks_agree(rk, rc, e);
}
