/* engine/run_output.c — what a run writes during the depth loop (the end of the run: run_finish.c).
 *
 * Commit order for layer L (../shared/DESIGN.md "Durable commit"), as three writer-thread jobs
 * that run in this order and stop at the first failure (io/writer.h is sticky):
 *   1. shard: model-layer-L.safetensors.tmp, fsync, rename, fsync dir  (shard_serialize)
 *   2. boundary: the input of layer L+1 into boundary-((L+1)%2).bin, the file that does NOT hold
 *      the input of layer L, durably                                    (boundary_serialize)
 *   3. manifest.json.tmp naming L+1 committed layers, the new boundary and the shard checksum,
 *      fsync, rename, fsync dir                                         (manifest_serialize)
 * Invariant: manifest.json never names a shard or boundary that is not durable, and the boundary
 * it names is never overwritten while it is named (the next boundary goes to the other file).
 * A crash anywhere leaves either the old manifest (layer L recomputed on rerun, its shard
 * overwritten) or the new one (layer L skipped). */
#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/sys/file.h"
#include "core/data/hash.h"
#include "core/sys/log.h"
#include "core/sys/trace.h"
#include "engine/run/run_internal.h"
#include "io/durable.h"
#include "io/sys.h"
#include "engine/source/layersrc.h"
#include "kernels/quant.h"
#include "layout/format/export.h"

/* ---- shard serialization --------------------------------------------------------------------- */

/* Appends through a 4 MiB staging buffer, so a shard of thousands of small tensors (scales,
 * norms) costs a few large writes rather than one write each; hashes what it appends. */
#define STAGE_BYTES (4u << 20)
typedef struct hashed_file {
    lwq_durable_file *f;
    lwq_xxh64_state h;
    unsigned char *buf;
    size_t n;
} hashed_file;

static int hflush(hashed_file *hf, lwq_error *e)
{
    int rc = hf->n ? lwq_durable_append(hf->f, hf->buf, hf->n, e) : 0;
    hf->n = 0;
    return rc;
}

static int happend(hashed_file *hf, const void *p, size_t n, lwq_error *e)
{
    lwq_xxh64_update(&hf->h, p, n);
    if (hf->n + n <= STAGE_BYTES) {
        memcpy(hf->buf + hf->n, p, n);
        hf->n += n;
        return 0;
    }
    int rc = hflush(hf, e);
    if (rc)
        return rc;
    if (n >= STAGE_BYTES / 2)
        return lwq_durable_append(hf->f, p, n, e);
    memcpy(hf->buf, p, n);
    hf->n = n;
    return 0;
}

/* A spilled tensor's bytes (engine/run/spill.h), read back through the staging buffer. */
static int happend_spilled(hashed_file *hf, const lwq_spill *sp, uint64_t off, uint64_t n, lwq_error *e)
{
    if (!sp || sp->fd < 0)
        return lwq_errf(e, LWQ_ESTATE, "%s: a spilled tensor without its spill file", hf->f->path);
    int rc = hflush(hf, e);
    for (uint64_t done = 0; rc == 0 && done < n;) {
        size_t k = (size_t)(n - done < STAGE_BYTES ? n - done : STAGE_BYTES);
        if ((rc = lwq_spill_read(sp, off + done, hf->buf, k, e)) == 0) {
            lwq_xxh64_update(&hf->h, hf->buf, k);
            rc = lwq_durable_append(hf->f, hf->buf, k, e);
        }
        done += k;
    }
    return rc;
}

/* Write a shard's bytes (safetensors, tensors sorted by name, our fingerprint in __metadata__). */
static int write_tlist(const char *fp_hex, const lwq_tlist *l, lwq_durable_file *f, uint64_t *hash,
                       uint64_t *bytes, const lwq_spill *sp, lwq_error *e)
{
    lwq_st_out_tensor *t = calloc((size_t)(l->n ? l->n : 1), sizeof *t);
    if (!t)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", f->path);
    for (int i = 0; i < l->n; i++) {
        t[i].name = l->v[i].name;
        t[i].dtype = l->v[i].dtype;
        t[i].ndim = l->v[i].ndim;
        memcpy(t[i].shape, l->v[i].shape, sizeof t[i].shape);
        t[i].data = l->v[i].data;
    }
    lwq_st_kv meta[2] = {{(char *)"format", (char *)"pt"}, {(char *)"lwq_fingerprint", (char *)fp_hex}};
    lwq_st_plan p;
    int rc = lwq_st_plan_make(t, l->n, meta, 2, &p, e);
    if (rc) {
        free(t);
        return rc;
    }
    hashed_file hf = {f, {{0}, 0, 0, {0}, 0}, malloc(STAGE_BYTES), 0};
    lwq_xxh64_init(&hf.h, 0);
    rc = hf.buf ? happend(&hf, p.header, p.header_bytes, e) : lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", f->path);
    for (int i = 0; rc == 0 && i < p.n; i++) {
        int k = p.order[i];
        rc = l->v[k].spilled ? happend_spilled(&hf, sp, l->v[k].spill_off, p.nbytes[k], e)
                             : happend(&hf, l->v[k].data, p.nbytes[k], e);
    }
    if (rc == 0)
        rc = hflush(&hf, e);
    free(hf.buf);
    if (rc == 0) {
        *hash = lwq_xxh64_digest(&hf.h);
        *bytes = p.header_bytes + p.data_bytes;
    }
    lwq_st_plan_free(&p);
    free(t);
    return rc;
}

typedef struct shard_job {
    lwq_run *r;
    int layer;
    double t0;
    int64_t slot_job;     /* prefetch job to release once written, or -1 */
    lwq_tlist out, src;
    lwq_spill spill;      /* a streamed layer's quantized experts (fd -1: none) */
    uint64_t hash, bytes;
} shard_job;

static int shard_serialize(void *ctx, lwq_durable_file *f, lwq_error *e)
{
    shard_job *j = ctx;
    j->t0 = lwq_now();
    lwq_tlist_sort(&j->out);
    LWQ_TRACE_BEGIN("write", j->layer);
    int rc = write_tlist(j->r->fp_hex, &j->out, f, &j->hash, &j->bytes, &j->spill, e);
    LWQ_TRACE_END();
    return rc;
}

static void shard_done(void *ctx, int64_t id, int rc, const lwq_error *e)
{
    shard_job *j = ctx;
    (void)id;
    (void)e;
    if (rc == 0) {
        j->r->man.layers[j->layer].bytes = j->bytes;
        j->r->man.layers[j->layer].xxh64 = j->hash;
        j->r->lstat[j->layer].write_s = lwq_now() - j->t0;
        if (j->r->rk->size <= 1) /* over ranks: once every rank's times are in (manifest_done) */
            lwq_run_log_layer(j->r, j->layer);
    }
    lwq_tlist_free(&j->out);
    lwq_tlist_free(&j->src);
    lwq_spill_close(&j->spill);
    if (j->slot_job >= 0)
        lwq_prefetch_release(j->r->pf, j->slot_job, NULL);
    free(j);
}

typedef struct boundary_job {
    lwq_run *r;
    int buf;              /* bnd index written */
    uint64_t hash;
} boundary_job;


static int boundary_serialize(void *ctx, lwq_durable_file *f, lwq_error *e)
{
    boundary_job *j = ctx;
    lwq_xxh64_state h;
    lwq_xxh64_init(&h, 0);
    const unsigned char *p = j->r->bnd[j->buf];
    uint64_t n = j->r->bnd_bytes, chunk = 64u << 20;
    int rc = 0;
    LWQ_TRACE_BEGIN("boundary", -1);
    for (uint64_t off = 0; off < n && rc == 0; off += chunk) {
        size_t k = (size_t)(n - off < chunk ? n - off : chunk);
        lwq_xxh64_update(&h, p + off, k);
        rc = lwq_durable_append(f, p + off, k, e);
    }
    LWQ_TRACE_END();
    if (rc)
        return rc;
    j->hash = lwq_xxh64_digest(&h);
    return 0;
}

static void boundary_done(void *ctx, int64_t id, int rc, const lwq_error *e)
{
    boundary_job *j = ctx;
    (void)id;
    (void)e;
    lwq_run *r = j->r;
    pthread_mutex_lock(&r->mu);
    if (rc == 0 && r->rk->size <= 1) {
        r->man.boundary_bytes = r->bnd_bytes;
        r->man.boundary_xxh64 = j->hash;
    }
    r->part_rc = rc;
    r->part_hash = j->hash;
    r->bnd_pending[j->buf] = 0;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    free(j);
}

void lwq_run_wait_boundary(lwq_run *r, int i)
{
    pthread_mutex_lock(&r->mu);
    while (r->bnd_pending[i])
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

typedef struct manifest_job {
    lwq_run *r;
    int committed;
    lwq_manifest_part *parts;   /* ranks: the boundary's parts (taken over), NULL: one file */
    int nparts;
    lwq_manifest_part *stale;   /* the parts the previous manifest named, removed once replaced */
    int nstale, stale_layer;
    char stale_file[32];        /* a one-file boundary replaced by parts */
    int has_head_amax;          /* the last commit of a run with a W8A8 lm_head: its input amax */
    float head_amax;
} manifest_job;

static int manifest_serialize(void *ctx, lwq_durable_file *f, lwq_error *e)
{
    manifest_job *j = ctx;
    lwq_manifest *m = &j->r->man;
    /* commits are consecutive, and this job runs only after the shard of layer committed-1 and
     * the boundary for layer committed were made durable (the writer is sticky: a failed job
     * cancels the ones after it), whose callbacks filled in their sizes; over ranks, every
     * rank's part was durable before rank 0 queued this job (run_ranks.c) */
    assert(j->committed == m->committed + 1);
    assert(m->layers[j->committed - 1].bytes > 0);
    assert(j->committed == m->num_layers || j->parts || m->boundary_bytes == j->r->bnd_bytes);
    j->stale = m->parts;
    j->nstale = m->nparts;
    j->stale_layer = m->committed;
    m->parts = NULL;
    m->nparts = 0;
    if (j->nparts && m->boundary_file[0])
        snprintf(j->stale_file, sizeof j->stale_file, "%s", m->boundary_file);
    m->committed = j->committed;
    if (j->has_head_amax) {
        m->has_head_amax = 1;
        m->head_amax = j->head_amax;
    }
    if (j->committed < m->num_layers && j->nparts) {
        m->boundary_file[0] = 0;
        m->parts = j->parts;
        m->nparts = j->nparts;
        j->parts = NULL;
        m->boundary_bytes = m->boundary_xxh64 = 0;
        for (int i = 0; i < m->nparts; i++)
            m->boundary_bytes += m->parts[i].bytes;
    } else if (j->committed < m->num_layers) {
        snprintf(m->boundary_file, sizeof m->boundary_file, LWQ_RESUME_BOUNDARY_FMT, j->committed % 2);
    } else {
        m->boundary_file[0] = 0;
    }
    char *s = lwq_manifest_render(m);
    if (!s)
        return lwq_errf(e, LWQ_ENOMEM, "manifest: out of memory");
    LWQ_TRACE_BEGIN("commit", j->committed - 1);
    int rc = lwq_durable_append(f, s, strlen(s), e);
    LWQ_TRACE_END();
    free(s);
    return rc;
}

/* The manifest is durable: the boundary files it no longer names go (a failure to remove one
 * leaves a stale file that the next start removes), and over ranks layer L's log line, now that
 * every rank's times are in. */
static void manifest_done(void *ctx, int64_t id, int rc, const lwq_error *e)
{
    manifest_job *j = ctx;
    lwq_run *r = j->r;
    (void)id;
    (void)e;
    for (int i = 0; rc == 0 && i < j->nstale + (j->stale_file[0] != 0); i++) {
        char name[64], p[PATH_MAX];
        if (i < j->nstale)
            lwq_part_name(j->stale_layer, j->stale[i].b0, j->stale[i].b1, name);
        else
            snprintf(name, sizeof name, "%s", j->stale_file);
        lwq_error ig = {0};
        if (lwq_pathf(&ig, p, sizeof p, "%s/%s", r->resume_dir, name) == 0)
            lwq_durable_unlink(p, &ig);
    }
    if (rc == 0 && r->rk->size > 1)
        lwq_run_log_layer(r, j->committed - 1);
    free(j->parts);
    free(j->stale);
    free(j);
}

/* Write `l` as out_dir/name, durably, now (whole-model shards and the tail). */
static int write_tlist_file(lwq_run *r, const char *name, const lwq_tlist *l, uint64_t *hash, uint64_t *bytes,
                            lwq_error *e)
{
    char path[PATH_MAX];
    int rc = lwq_pathf(e, path, sizeof path, "%s/%s", r->out_dir, name);
    if (rc)
        return rc;
    lwq_durable_file f;
    lwq_tlist sorted = *l;
    lwq_tlist_sort(&sorted);
    if ((rc = lwq_durable_open(&f, path, e)) != 0)
        return rc;
    if ((rc = write_tlist(r->fp_hex, &sorted, &f, hash, bytes, NULL, e)) != 0) {
        lwq_durable_abort(&f);
        return rc;
    }
    return lwq_durable_commit(&f, e);
}

int lwq_run_write_shard_now(lwq_run *r, int layer, const lwq_tlist *out, lwq_error *e)
{
    char name[40];
    lwq_shard_name(layer, name);
    return write_tlist_file(r, name, out, &r->man.layers[layer].xxh64, &r->man.layers[layer].bytes, e);
}

int lwq_run_commit_layer(lwq_run *r, int layer, lwq_tlist *out, lwq_tlist *src, int64_t slot_job, lwq_error *e)
{
    return lwq_run_commit_layer_spill(r, layer, out, src, slot_job, NULL, e);
}

int lwq_run_commit_layer_spill(lwq_run *r, int layer, lwq_tlist *out, lwq_tlist *src, int64_t slot_job,
                               lwq_spill *spill, lwq_error *e)
{
    if (r->rk->rank != 0) { /* the shard is rank 0's: here only this rank's part of the next boundary */
        lwq_tlist_free(out);
        lwq_tlist_free(src);
        if (spill)
            lwq_spill_close(spill);
        int rc = slot_job >= 0 ? lwq_prefetch_release(r->pf, slot_job, e) : 0;
        return rc == 0 && layer + 1 < r->nlayers ? lwq_run_submit_part(r, layer, e) : rc;
    }
    char name[40], path[PATH_MAX];
    lwq_shard_name(layer, name);
    int rc = lwq_pathf(e, path, sizeof path, "%s/%s", r->out_dir, name);
    shard_job *sj = calloc(1, sizeof *sj);
    if (rc || !sj) {
        free(sj);
        lwq_tlist_free(out);
        lwq_tlist_free(src);
        if (spill)
            lwq_spill_close(spill);
        return rc ? rc : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    sj->spill.fd = -1;
    if (spill) {
        sj->spill = *spill;
        spill->fd = -1;
    }
    sj->r = r;
    sj->layer = layer;
    sj->slot_job = slot_job;
    sj->out = *out;
    sj->src = *src;
    memset(out, 0, sizeof *out);
    memset(src, 0, sizeof *src);
    lwq_writer_job job = {path, NULL, 0, shard_serialize, sj, shard_done, sj};
    if (lwq_writer_submit(r->wr, &job, e) < 0) {
        shard_done(sj, -1, -1, NULL);
        return e->code;
    }
    if (r->rk->size > 1) /* the part, then (lwq_run_ranks_end_layer) the manifest of rank 0 */
        return layer + 1 < r->nlayers ? lwq_run_submit_part(r, layer, e) : 0;
    /* the output boundary of this layer (the input of the next): boundary alternation puts it in
     * bnd[(L + 1) % 2] and boundary-((L + 1) % 2).bin, never the file the manifest names now */
    int nxt = 1 - r->cur;
    assert(r->cur == layer % 2);
    if (layer + 1 < r->nlayers) {
        boundary_job *bj = calloc(1, sizeof *bj);
        char bpath[PATH_MAX];
        if (!bj)
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        if ((rc = lwq_pathf(e, bpath, sizeof bpath, "%s/" LWQ_RESUME_BOUNDARY_FMT, r->resume_dir, (layer + 1) % 2)) != 0) {
            free(bj);
            return rc;
        }
        bj->r = r;
        bj->buf = nxt;
        pthread_mutex_lock(&r->mu);
        r->bnd_pending[nxt] = 1;
        pthread_mutex_unlock(&r->mu);
        lwq_writer_job bjob = {bpath, NULL, 0, boundary_serialize, bj, boundary_done, bj};
        if (lwq_writer_submit(r->wr, &bjob, e) < 0) {
            boundary_done(bj, -1, -1, NULL);
            return e->code;
        }
    }
    return lwq_run_submit_manifest(r, layer, NULL, 0, e);
}

int lwq_run_submit_part(lwq_run *r, int layer, lwq_error *e)
{
    if (r->part_for == layer + 1) /* already on its way, from right after the forward (run.c) */
        return 0;
    r->part_for = layer + 1;
    char name[64], bpath[PATH_MAX];
    lwq_part_name(layer + 1, r->b0, r->b1, name);
    int nxt = 1 - r->cur, rc = lwq_pathf(e, bpath, sizeof bpath, "%s/%s", r->resume_dir, name);
    boundary_job *bj = rc ? NULL : calloc(1, sizeof *bj);
    if (!bj)
        return rc ? rc : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    bj->r = r;
    bj->buf = nxt;
    pthread_mutex_lock(&r->mu);
    r->bnd_pending[nxt] = 1;
    r->part_rc = LWQ_ECANCELED; /* until the writer says how it went */
    pthread_mutex_unlock(&r->mu);
    lwq_writer_job bjob = {bpath, NULL, 0, boundary_serialize, bj, boundary_done, bj};
    if (lwq_writer_submit(r->wr, &bjob, e) < 0) {
        boundary_done(bj, -1, -1, NULL);
        return e->code;
    }
    return 0;
}

int lwq_run_submit_manifest(lwq_run *r, int layer, lwq_manifest_part *parts, int nparts, lwq_error *e)
{
    manifest_job *mj = calloc(1, sizeof *mj);
    if (!mj) {
        free(parts);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    mj->r = r;
    mj->committed = layer + 1;
    mj->parts = parts;
    mj->nparts = nparts;
    /* the engine thread set it before this submission (lwq_run_head_amax); the writer copies it into the
     * manifest of the last commit only */
    if (layer + 1 == r->nlayers && r->has_head_amax) {
        mj->has_head_amax = 1;
        mj->head_amax = r->head_amax;
    }
    lwq_writer_job mjob = {r->manifest_path, NULL, 0, manifest_serialize, mj, manifest_done, mj};
    if (lwq_writer_submit(r->wr, &mjob, e) < 0) {
        free(parts);
        free(mj);
        return e->code;
    }
    return 0;
}

int lwq_run_remove_stale_parts(lwq_run *r, lwq_error *e)
{
    DIR *d = opendir(r->resume_dir);
    if (!d)
        return 0;
    struct dirent *de;
    int rc = 0, removed = 0;
    const lwq_manifest *m = &r->man;
    while ((de = readdir(d)) && rc == 0) {
        if (strncmp(de->d_name, LWQ_RESUME_PART_PREFIX, sizeof LWQ_RESUME_PART_PREFIX - 1))
            continue;
        int named = 0;
        for (int i = 0; i < m->nparts && !named; i++) {
            char name[64];
            lwq_part_name(m->committed, m->parts[i].b0, m->parts[i].b1, name);
            named = !strcmp(name, de->d_name);
        }
        char p[PATH_MAX];
        if (named || (rc = lwq_pathf(e, p, sizeof p, "%s/%s", r->resume_dir, de->d_name)) != 0)
            continue;
        if ((rc = lwq_durable_unlink(p, e)) == 0)
            removed++;
    }
    closedir(d);
    if (rc == 0 && removed)
        rc = lwq_durable_fsync_dir(r->resume_dir, e);
    return rc;
}


/* ---- the end of a run: tail, index, configs ---------------------------------------------------- */


/* The tail: every tensor outside decoder layers 0..num_hidden_layers-1 (embeddings, final norm,
 * lm_head, MTP layers), unchanged.  Streamed from the source files through a fixed 8 MiB buffer
 * (the embedding and lm_head of a large model are gigabytes), unless a tensor there must be
 * dequantized first (FP8 / MXFP4 MTP layers), which goes through memory. */
static int tail_tensors(const lwq_run *r, int **idx, int *n, int *packed)
{
    int cap = r->ck.tail.n;
    for (int L = r->nlayers; L < r->ck.nlayers; L++)
        cap += r->ck.layers[L].n;
    *idx = malloc((size_t)(cap ? cap : 1) * sizeof **idx);
    if (!*idx)
        return -1;
    *n = 0;
    *packed = 0;
    for (int L = -1; L < r->ck.nlayers; L++) {
        if (L >= 0 && L < r->nlayers)
            continue;
        const lwq_ckpt_layer *cl = L < 0 ? &r->ck.tail : &r->ck.layers[L];
        for (int k = 0; k < cl->n; k++) {
            const lwq_ckpt_tensor *t = &r->ck.tensors[cl->idx[k]];
            *packed |= t->dtype == LWQ_F8_E4M3 || t->dtype == LWQ_U8;
            (*idx)[(*n)++] = cl->idx[k];
        }
    }
    return 0;
}

static int stream_tail(lwq_run *r, const int *idx, int n, lwq_durable_file *f, lwq_error *e)
{
    lwq_st_out_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
    unsigned char *buf = malloc(STAGE_BYTES);
    int *fds = malloc((size_t)r->ck.nfiles * sizeof *fds);
    int rc = t && buf && fds ? 0 : lwq_errf(e, LWQ_ENOMEM, "tail: out of memory");
    for (int i = 0; fds && i < r->ck.nfiles; i++)
        fds[i] = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        const lwq_ckpt_tensor *s = &r->ck.tensors[idx[i]];
        t[i].name = s->name;
        t[i].dtype = s->dtype;
        t[i].ndim = s->ndim;
        memcpy(t[i].shape, s->shape, sizeof t[i].shape);
    }
    lwq_st_kv meta[2] = {{(char *)"format", (char *)"pt"}, {(char *)"lwq_fingerprint", r->fp_hex}};
    lwq_st_plan p = {0};
    if (rc == 0 && (rc = lwq_st_plan_make(t, n, meta, 2, &p, e)) == 0)
        rc = lwq_durable_append(f, p.header, p.header_bytes, e);
    for (int i = 0; rc == 0 && i < p.n; i++) {
        const lwq_ckpt_tensor *s = &r->ck.tensors[idx[p.order[i]]];
        const char *path = r->ck.files[s->file].path;
        if (fds[s->file] < 0 && (fds[s->file] = lwq_durable_open_regular(path, 0, NULL, e)) < 0) {
            rc = fds[s->file];
            fds[s->file] = -1;
            break;
        }
        for (uint64_t off = 0; rc == 0 && off < s->nbytes;) {
            size_t k = (size_t)(s->nbytes - off < STAGE_BYTES ? s->nbytes - off : STAGE_BYTES);
            if ((rc = lwq_durable_pread_all(fds[s->file], buf, k, s->offset + off, path, e)) == 0)
                rc = lwq_durable_append(f, buf, k, e);
            off += k;
        }
    }
    for (int i = 0; fds && i < r->ck.nfiles; i++)
        if (fds[i] >= 0)
            lwq_sys()->close(fds[i]);
    lwq_st_plan_free(&p);
    free(fds);
    free(buf);
    free(t);
    return rc;
}

static int tail_serialize(void *ctx, lwq_durable_file *f, lwq_error *e)
{
    lwq_run *r = ctx;
    int *idx, n, packed;
    if (tail_tensors(r, &idx, &n, &packed) != 0)
        return lwq_errf(e, LWQ_ENOMEM, "tail: out of memory");
    int rc = stream_tail(r, idx, n, f, e);
    free(idx);
    return rc;
}

static void tail_done(void *ctx, int64_t id, int rc, const lwq_error *e)
{
    lwq_run *r = ctx;
    (void)id;
    (void)e;
    r->tail_written = rc == 0;
}

int lwq_run_submit_tail(lwq_run *r, lwq_error *e)
{
    int *idx, n, packed;
    if (tail_tensors(r, &idx, &n, &packed) != 0)
        return lwq_errf(e, LWQ_ENOMEM, "tail: out of memory");
    free(idx);
    /* needs dequantization, or a weight-only lm_head or embedding: written at the end, through memory */
    if (packed || r->o->recipe->lm_head || r->embed)
        return 0;
    char path[PATH_MAX];
    int rc = lwq_pathf(e, path, sizeof path, "%s/" LWQ_OUT_TAIL, r->out_dir);
    if (rc)
        return rc;
    lwq_writer_job job = {path, NULL, 0, tail_serialize, r, tail_done, r};
    return lwq_writer_submit(r->wr, &job, e) < 0 ? e->code : 0;
}

/* lm_head.weight (or the token embedding's weight: `canon`) of the tail, replaced by its weight-only
 * form, as Model Optimizer 0.47 exports a module whose weight quantizer alone is enabled:
 *   - NVFP4 (W4A16_NVFP4): the packed weight, weight_scale, weight_scale_2 = amax / 2688, no
 *     input_scale; dynamic block scales (LWQ_LMHEAD_MAX), or static ones searched as a decoder
 *     linear's are (engine/quant/qlayer.c: the FP8 scale sweep without a Hessian, the mse search,
 *     or Four-over-Six's mse search over the recipe's multipliers, weight_scale_2 = amax / 1536),
 *     against the tensor's own amax; on the host, whatever the device;
 *   - FP8 per tensor (LWQ_LMHEAD_FP8; Model Optimizer's quant_algo FP8): the E4M3 weight and
 *     weight_scale = amax / 448, no input_scale (its input quantizer never calibrated);
 *   - W8A8 FP8 (LWQ_LMHEAD_W8A8): the same weight and weight_scale, and input_scale = the calibration
 *     amax of lm_head's input (the manifest's, lwq_run_head_amax) / 448, as Model Optimizer 0.47
 *     exports an FP8 lm_head whose input quantizer is enabled (F32 scalars). */
static int quantize_weight_only(lwq_run *r, lwq_tlist *tail, const char *canon, int mode, lwq_error *e)
{
    char name[128];
    lwq_names_full(&r->ck.cfg.names, canon, name, sizeof name);
    int at = -1;
    for (int i = 0; i < tail->n && at < 0; i++)
        if (!strcmp(tail->v[i].name, name))
            at = i;
    if (at < 0)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes %s but the checkpoint has no %s (tied "
                        "word embeddings?); lwq does not quantize a shared embedding", r->ck.dir, canon, name);
    const lwq_htensor *w = &tail->v[at];
    int fp8 = mode == LWQ_LMHEAD_FP8 || mode == LWQ_LMHEAD_W8A8;
    if (w->ndim != 2 || (!fp8 && w->shape[1] % 16) ||
        (w->dtype != LWQ_BF16 && w->dtype != LWQ_F16 && w->dtype != LWQ_F32))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s must be a 2-D BF16/F16/F32 matrix%s, not %s with %d dimensions "
                        "(width %lld)", r->ck.dir, name, fp8 ? "" : " whose width is a multiple of 16 for NVFP4",
                        lwq_dtype_name(w->dtype), w->ndim, w->ndim == 2 ? (long long)w->shape[1] : -1LL);
    int64_t rows = w->shape[0], cols = w->shape[1];
    if (rows <= 0 || cols <= 0 || rows > INT64_MAX / cols)
        return lwq_errf(e, LWQ_EFORMAT, "%s: %s has shape [%lld, %lld]", r->ck.dir, name, (long long)rows,
                        (long long)cols);
    float amax = 0, ws = 0;
    int rc = lwq_quant_amax(w->data, w->dtype, rows * cols, name, &amax, e);
    if (rc < 0)
        return rc;
    char sn[160], s2[160];
    snprintf(sn, sizeof sn, "%.*s_scale", (int)strlen(name), name);
    snprintf(s2, sizeof s2, "%.*s_scale_2", (int)strlen(name), name);
    lwq_htensor *t = &tail->v[at];
    if (fp8) {
        uint8_t *q = malloc((size_t)(rows * cols));
        if (!q)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
        if ((rc = lwq_quant_fp8(w->data, w->dtype, rows, cols, amax, name, q, &ws, e)) < 0) {
            free(q);
            return rc;
        }
        if (t->owned)
            free(t->data);
        t->dtype = LWQ_F8_E4M3;
        t->data = q;
        t->nbytes = (uint64_t)(rows * cols);
        t->owned = 1;
        if ((rc = lwq_tlist_add_scalar(tail, sn, ws, e)) < 0)
            return rc;
        if (mode == LWQ_LMHEAD_W8A8) {
            float is = 0;
            char in[160];
            snprintf(in, sizeof in, "%.*sinput_scale", (int)(strlen(name) - strlen("weight")), name);
            if (!r->man.has_head_amax)
                return lwq_errf(e, LWQ_ESTATE, "%s: %s: no calibration amax of lm_head's input was committed (remove "
                                "the resume directory to start over)", r->manifest_path, name);
            if ((rc = lwq_quant_input_scale(r->man.head_amax, LWQ_QUANT_FP8, in, &is, e)) < 0 ||
                (rc = lwq_tlist_add_scalar(tail, in, is, e)) < 0)
                return rc;
        }
        lwq_tlist_sort(tail);
        return 0;
    }
    uint8_t *packed = malloc((size_t)(rows * cols / 2) + 1), *scale = malloc((size_t)(rows * (cols / 16)) + 1);
    rc = packed && scale ? 0 : lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    float *bamax = NULL;
    if (rc == 0 && mode != LWQ_LMHEAD_MAX && !(bamax = malloc((size_t)(rows * (cols / 16)) * sizeof *bamax)))
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    if (rc == 0 && mode == LWQ_LMHEAD_MAX) {
        rc = lwq_quant_nvfp4_max(w->data, w->dtype, rows, cols, amax, name, packed, scale, &ws, e);
    } else if (rc == 0 && mode == LWQ_LMHEAD_F46) {
        /* lm_head's resolved choice (run_setup.c), as a decoder linear's Four-over-Six search takes it */
        const lwq_quant_choice *c = &r->lm_choice;
        float m[LWQ_MSE_MAX_STEPS];
        int nm = lwq_choice_mse_candidates(c, m);
        if (c->mse_range != LWQ_MSE_RANGE_DEFAULT && nm < 1)
            rc = lwq_errf(e, LWQ_EINVAL, "%s: mse multipliers %g, %g, %g give no candidates (at most %d)", name,
                          c->mse_mult[0], c->mse_mult[1], c->mse_mult[2], LWQ_MSE_MAX_STEPS);
        else if ((rc = lwq_quant_nvfp4_mse46(w->data, w->dtype, rows, cols, amax, nm ? m : NULL, nm, name, bamax, e)) >= 0)
            rc = lwq_quant_nvfp4_static46(w->data, w->dtype, rows, cols, bamax, amax, name, packed, scale, &ws, e);
    } else if (rc == 0) {
        if ((rc = mode == LWQ_LMHEAD_SWEEP
                      ? lwq_quant_nvfp4_sweep(w->data, w->dtype, rows, cols, amax, NULL, name, bamax, NULL, e)
                      : lwq_quant_nvfp4_mse(w->data, w->dtype, rows, cols, amax, name, bamax, e)) >= 0)
            rc = lwq_quant_nvfp4_static(w->data, w->dtype, rows, cols, bamax, amax, name, packed, scale, &ws, e);
    }
    free(bamax);
    if (rc < 0) {
        free(packed);
        free(scale);
        return rc;
    }
    int64_t ss[2] = {rows, cols / 16};
    if (t->owned)
        free(t->data);
    t->dtype = LWQ_U8;
    t->shape[1] = cols / 2;
    t->data = packed;
    t->nbytes = (uint64_t)(rows * cols / 2);
    t->owned = 1;
    if ((rc = lwq_tlist_add(tail, sn, LWQ_F8_E4M3, 2, ss, scale, 1, e)) < 0)
        return rc;
    if ((rc = lwq_tlist_add_scalar(tail, s2, ws, e)) < 0)
        return rc;
    lwq_tlist_sort(tail);
    return 0;
}

int lwq_run_write_tail(lwq_run *r, lwq_error *e)
{
    int *idx, n, packed;
    if (tail_tensors(r, &idx, &n, &packed) != 0)
        return lwq_errf(e, LWQ_ENOMEM, "tail: out of memory");
    int rc;
    if (!packed && !r->o->recipe->lm_head && !r->embed) {
        char path[PATH_MAX];
        lwq_durable_file f;
        if ((rc = lwq_pathf(e, path, sizeof path, "%s/" LWQ_OUT_TAIL, r->out_dir)) == 0 &&
            (rc = lwq_durable_open(&f, path, e)) == 0) {
            if ((rc = stream_tail(r, idx, n, &f, e)) != 0)
                lwq_durable_abort(&f);
            else
                rc = lwq_durable_commit(&f, e);
        }
        free(idx);
        return rc;
    }
    free(idx);
    lwq_tlist tail = {0}, part;
    rc = lwq_layersrc_read(&r->ck, -1, &tail, e);
    for (int L = r->nlayers; rc == 0 && L < r->ck.nlayers; L++) {
        if ((rc = lwq_layersrc_read(&r->ck, L, &part, e)) != 0)
            break;
        for (int i = 0; rc == 0 && i < part.n; i++) {
            rc = lwq_tlist_add(&tail, part.v[i].name, part.v[i].dtype, part.v[i].ndim, part.v[i].shape,
                               part.v[i].data, 1, e);
            part.v[i].owned = 0;
        }
        lwq_tlist_free(&part);
    }
    if (rc == 0 && r->o->recipe->lm_head)
        rc = quantize_weight_only(r, &tail, "lm_head.weight", r->o->recipe->lm_head, e);
    /* Model Optimizer 0.47 exports a QuantEmbedding's NVFP4 weight as it does a linear's */
    if (rc == 0 && r->embed)
        rc = quantize_weight_only(r, &tail, "model.embed_tokens.weight", r->embed, e);
    uint64_t h, b;
    if (rc == 0)
        rc = write_tlist_file(r, LWQ_OUT_TAIL, &tail, &h, &b, e);
    lwq_tlist_free(&tail);
    return rc;
}
