/* io/reader.c — io_uring reader with pread-pool fallback (see reader.h). */
#include "io/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "core/sys/log.h"
#include "io/durable.h"
#include "io/sys.h"

#define MAX_FILES 64
#define GIB (1ull << 30)
/* Consecutive EINTR/EAGAIN or no-progress results on one request before giving up. */
#define MAX_STALLS 1000

typedef struct {
    char *path;
    int fd;
    int direct;        /* opened with O_DIRECT */
    uint64_t size;
    uint64_t stamp;    /* last read that used it (eviction order) */
} file_ent;

typedef struct {
    int file;          /* index in rd->files */
    uint64_t off;      /* file offset of the request's first byte */
    uint64_t len;      /* bytes asked for (aligned) */
    uint64_t need;     /* bytes that must exist (the rest is alignment padding past EOF) */
    uint64_t done;
    unsigned char *buf;
    int buf_index;     /* registered buffer, or -1 */
    int stalls;
} io_req;

typedef struct {
    size_t ext;        /* next extent */
    uint64_t pos;      /* bytes of it already handed out */
} cursor;

struct lwq_io_reader {
    lwq_io_reader_opts o;
    int uring;                 /* ring is live */
    struct io_uring ring;
    int files_registered;
    int bufs_registered;
    unsigned char *reg_base;
    size_t reg_len;
    file_ent files[MAX_FILES];
    uint64_t stamp;
    int direct_refused;
    lwq_error broken;          /* sticky failure of the ring itself */
    _Atomic uint64_t retries;
    io_req *reqs;              /* queue_depth slots for the ring */
    unsigned *free_slots;
    void *probe;               /* 4 KiB aligned scratch for the O_DIRECT probe */
    char desc[256];
};

static void describe(lwq_io_reader *rd)
{
    size_t bmib = rd->o.block_bytes >> 20;
    if (rd->uring)
        snprintf(rd->desc, sizeof rd->desc, "io_uring qd %u, %zu %s requests, %s%s%s",
                 rd->o.queue_depth, bmib ? bmib : rd->o.block_bytes >> 10, bmib ? "MiB" : "KiB",
                 !rd->o.direct ? "buffered" : rd->direct_refused ? "O_DIRECT refused: buffered"
                                                                  : "O_DIRECT",
                 rd->bufs_registered ? ", registered buffers" : "",
                 rd->files_registered ? ", registered files" : "");
    else
        snprintf(rd->desc, sizeof rd->desc, "pread pool of %u threads, %zu %s requests, %s",
                 rd->o.pread_threads, bmib ? bmib : rd->o.block_bytes >> 10, bmib ? "MiB" : "KiB",
                 !rd->o.direct ? "buffered" : rd->direct_refused ? "O_DIRECT refused: buffered"
                                                                  : "O_DIRECT");
}

void lwq_io_reader_opts_default(lwq_io_reader_opts *o)
{
    *o = (lwq_io_reader_opts){.use_uring = 1, .direct = 1, .register_buffers = 1,
                              .register_files = 1, .queue_depth = 32, .block_bytes = 2u << 20,
                              .pread_threads = 4};
    const char *s = getenv("LWQ_IO_URING");
    if (s && !strcmp(s, "0"))
        o->use_uring = 0;
    s = getenv("LWQ_IO_DIRECT");
    if (s && !strcmp(s, "0"))
        o->direct = 0;
}

int lwq_io_reader_init(lwq_io_reader **out, const lwq_io_reader_opts *o, lwq_error *e)
{
    *out = NULL;
    lwq_io_reader_opts def;
    if (!o) {
        lwq_io_reader_opts_default(&def);
        o = &def;
    }
    if (o->queue_depth < 1 || o->queue_depth > 4096 || o->block_bytes < LWQ_IO_ALIGN ||
        o->block_bytes > (64u << 20) || o->block_bytes % LWQ_IO_ALIGN || o->pread_threads < 1 ||
        o->pread_threads > 256)
        return lwq_errf(e, LWQ_EINVAL,
                        "io reader: bad options (queue depth %u in 1..4096, block %zu bytes a "
                        "multiple of 4 KiB in 4 KiB..64 MiB, %u pread threads in 1..256)",
                        o->queue_depth, o->block_bytes, o->pread_threads);
    lwq_io_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return lwq_errf(e, LWQ_ENOMEM, "io reader: out of memory");
    rd->o = *o;
    for (int i = 0; i < MAX_FILES; i++)
        rd->files[i].fd = -1;
    rd->reqs = calloc(o->queue_depth, sizeof *rd->reqs);
    rd->free_slots = calloc(o->queue_depth, sizeof *rd->free_slots);
    if (!rd->reqs || !rd->free_slots || posix_memalign(&rd->probe, LWQ_IO_ALIGN, LWQ_IO_ALIGN)) {
        rd->probe = NULL;
        lwq_io_reader_free(rd);
        return lwq_errf(e, LWQ_ENOMEM, "io reader: out of memory");
    }
    if (o->use_uring) {
        int rc = io_uring_queue_init(o->queue_depth, &rd->ring, 0);
        if (rc < 0) {
            LWQ_WARN("io_uring unavailable (%s): reading with a pool of %u pread threads",
                     strerror(-rc), o->pread_threads);
        } else {
            rd->uring = 1;
            if (o->register_files) {
                rc = io_uring_register_files_sparse(&rd->ring, MAX_FILES);
                if (rc < 0)
                    LWQ_WARN("io_uring: registered files refused (%s): using plain descriptors",
                             strerror(-rc));
                else
                    rd->files_registered = 1;
            }
        }
    }
    describe(rd);
    LWQ_DEBUG("io reader: %s", rd->desc);
    *out = rd;
    return 0;
}

static void close_file(lwq_io_reader *rd, int i)
{
    file_ent *f = &rd->files[i];
    if (f->fd >= 0) {
        if (rd->files_registered) {
            int none = -1;
            io_uring_register_files_update(&rd->ring, (unsigned)i, &none, 1);
        }
        lwq_sys()->close(f->fd);
    }
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

void lwq_io_reader_free(lwq_io_reader *rd)
{
    if (!rd)
        return;
    for (int i = 0; i < MAX_FILES; i++)
        close_file(rd, i);
    if (rd->uring)
        io_uring_queue_exit(&rd->ring);
    free(rd->reqs);
    free(rd->free_slots);
    free(rd->probe);
    free(rd);
}

int lwq_io_reader_register(lwq_io_reader *rd, void *base, size_t len, lwq_error *e)
{
    if (!base || len == 0 || (uintptr_t)base % LWQ_IO_ALIGN)
        return lwq_errf(e, LWQ_EINVAL, "io reader: register needs a 4 KiB aligned, non-empty region");
    if (rd->bufs_registered) {
        io_uring_unregister_buffers(&rd->ring);
        rd->bufs_registered = 0;
    }
    rd->reg_base = NULL;
    rd->reg_len = 0;
    if (!rd->uring || !rd->o.register_buffers) {
        describe(rd);
        return 0;
    }
    size_t n = (len + GIB - 1) / GIB;
    struct iovec *iov = calloc(n, sizeof *iov);
    if (!iov)
        return lwq_errf(e, LWQ_ENOMEM, "io reader: out of memory");
    for (size_t i = 0; i < n; i++) {
        iov[i].iov_base = (unsigned char *)base + i * GIB;
        iov[i].iov_len = i + 1 < n ? GIB : len - i * GIB;
    }
    int rc = io_uring_register_buffers(&rd->ring, iov, (unsigned)n);
    free(iov);
    if (rc < 0) {
        LWQ_WARN("io_uring: registering %zu bytes of buffers refused (%s): using plain reads", len,
                 strerror(-rc));
    } else {
        rd->bufs_registered = 1;
        rd->reg_base = base;
        rd->reg_len = len;
    }
    describe(rd);
    return rd->bufs_registered;
}

const char *lwq_io_reader_describe(const lwq_io_reader *rd) { return rd->desc; }
int lwq_io_reader_uses_uring(const lwq_io_reader *rd) { return rd->uring; }
uint64_t lwq_io_reader_retries(const lwq_io_reader *rd) { return rd->retries; }

/* Open (or find in the cache) `path`; returns its cache index or a negative code. */
static int open_file(lwq_io_reader *rd, const char *path, lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    int victim = -1;
    for (int i = 0; i < MAX_FILES; i++) {
        if (rd->files[i].path && !strcmp(rd->files[i].path, path)) {
            rd->files[i].stamp = rd->stamp;
            return i;
        }
        if (rd->files[i].stamp != rd->stamp &&
            (victim < 0 || !rd->files[i].path ||
             (rd->files[victim].path && rd->files[i].stamp < rd->files[victim].stamp)))
            victim = i;
    }
    if (victim < 0)
        return lwq_errf(e, LWQ_EINVAL, "io reader: one job reads more than %d files (at %s)",
                        MAX_FILES, path);
    close_file(rd, victim);
    int direct = rd->o.direct, rc;
    struct stat st;
    lwq_error de = {0}; /* the O_DIRECT attempt's: a refusal of O_DIRECT is not reported */
    int fd = lwq_durable_open_regular(path, direct ? O_DIRECT : 0, &st, direct ? &de : e);
    if (fd == -EINVAL && direct) {
        direct = 0;
        fd = lwq_durable_open_regular(path, 0, &st, e);
    } else if (fd < 0 && direct) {
        return lwq_errf(e, fd, "%s", de.msg);
    }
    if (fd < 0)
        return fd;
    if (direct) {
        /* Some filesystems accept O_DIRECT at open and refuse it per read.  This capability
         * probe uses the kernel table on purpose, so injected faults hit only real reads. */
        ssize_t r = lwq_sys_kernel()->pread(fd, rd->probe, LWQ_IO_ALIGN, 0);
        if (r == -EINVAL) {
            s->close(fd);
            direct = 0;
            fd = lwq_durable_open_regular(path, 0, &st, e);
            if (fd < 0)
                return fd;
        }
    }
    if (!direct && rd->o.direct && !rd->direct_refused) {
        rd->direct_refused = 1;
        LWQ_WARN("O_DIRECT refused by the filesystem of %s: buffered reads", path);
        describe(rd);
    }
    if (rd->files_registered) {
        rc = io_uring_register_files_update(&rd->ring, (unsigned)victim, &fd, 1);
        if (rc < 0) {
            LWQ_WARN("io_uring: registered file update refused (%s): using plain descriptors",
                     strerror(-rc));
            io_uring_unregister_files(&rd->ring);
            rd->files_registered = 0;
            describe(rd);
        }
    }
    file_ent *f = &rd->files[victim];
    f->path = strdup(path);
    if (!f->path) {
        s->close(fd);
        return lwq_errf(e, LWQ_ENOMEM, "io reader: out of memory");
    }
    f->fd = fd;
    f->direct = direct;
    f->size = (uint64_t)st.st_size;
    f->stamp = rd->stamp;
    return victim;
}

/* Next request of the plan, or 0 when all are handed out.  Requests never cross a registered
 * buffer's 1 GiB iovec boundary. */
static int next_request(lwq_io_reader *rd, const lwq_io_plan *p, unsigned char *buf,
                        const int *fmap, cursor *c, io_req *q)
{
    while (c->ext < p->next && c->pos >= p->ext[c->ext].len) {
        c->ext++;
        c->pos = 0;
    }
    if (c->ext >= p->next)
        return 0;
    const lwq_io_extent *x = &p->ext[c->ext];
    uint64_t len = x->len - c->pos;
    if (len > rd->o.block_bytes)
        len = rd->o.block_bytes;
    unsigned char *dst = buf + x->buf_off + c->pos;
    int bi = -1;
    if (rd->bufs_registered && dst >= rd->reg_base && dst < rd->reg_base + rd->reg_len) {
        size_t rel = (size_t)(dst - rd->reg_base);
        bi = (int)(rel / GIB);
        size_t lim = (size_t)(bi + 1) * GIB;
        if (lim > rd->reg_len)
            lim = rd->reg_len;
        if (len > lim - rel)
            len = lim - rel;
    }
    q->file = fmap[x->file];
    q->off = x->file_off + c->pos;
    q->len = len;
    q->need = x->need_end > q->off ? (x->need_end - q->off < len ? x->need_end - q->off : len) : 0;
    q->done = 0;
    q->buf = dst;
    q->buf_index = bi;
    q->stalls = 0;
    c->pos += len;
    return 1;
}

/* The one place that interprets a transfer result (io_uring completion or pread return).
 * Returns 1 when the request is complete, 0 when its remainder must be reissued, or a negative
 * code.  Thread-safe: touches only q and atomic counters. */
static int req_advance(lwq_io_reader *rd, io_req *q, long res, lwq_error *e)
{
    const file_ent *f = &rd->files[q->file];
    if (res == -EINTR || res == -EAGAIN) {
        rd->retries++;
        if (++q->stalls > MAX_STALLS)
            return lwq_errf(e, LWQ_EIO, "read %s at offset %llu: interrupted %d times in a row",
                            f->path, (unsigned long long)(q->off + q->done), MAX_STALLS);
        return 0;
    }
    if (res < 0)
        return lwq_errsys(e, (int)res, "read %s at offset %llu (%llu bytes)", f->path,
                          (unsigned long long)(q->off + q->done),
                          (unsigned long long)(q->len - q->done));
    if ((uint64_t)res > q->len - q->done)
        return lwq_errf(e, LWQ_EIO, "read %s at offset %llu: got %ld bytes, asked for %llu",
                        f->path, (unsigned long long)(q->off + q->done), res,
                        (unsigned long long)(q->len - q->done));
    uint64_t before = q->done;
    q->done += (uint64_t)res;
    if (q->done >= q->need)
        return 1; /* what is left is alignment padding past the end of the file */
    if (res == 0)
        return lwq_errf(e, LWQ_EIO,
                        "read %s: file ends at byte %llu but bytes up to %llu are needed "
                        "(file shrank while reading?)",
                        f->path, (unsigned long long)(q->off + q->done),
                        (unsigned long long)(q->off + q->need));
    rd->retries++;
    /* O_DIRECT must resume at an aligned offset; re-reading the few bytes before it is harmless
     * because buffer and file positions move together. */
    if (f->direct)
        q->done = q->done / LWQ_IO_ALIGN * LWQ_IO_ALIGN;
    if (q->done <= before) {
        if (++q->stalls > MAX_STALLS)
            return lwq_errf(e, LWQ_EIO, "read %s at offset %llu: no progress after %d short reads",
                            f->path, (unsigned long long)(q->off + q->done), MAX_STALLS);
    } else {
        q->stalls = 0;
    }
    return 0;
}

static int canceled(const atomic_int *cancel) { return cancel && atomic_load(cancel); }

static void prep(lwq_io_reader *rd, unsigned slot)
{
    io_req *q = &rd->reqs[slot];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&rd->ring); /* never NULL: in flight <= depth */
    const file_ent *f = &rd->files[q->file];
    int fd = rd->files_registered ? q->file : f->fd;
    unsigned char *dst = q->buf + q->done;
    unsigned len = (unsigned)(q->len - q->done);
    if (q->buf_index >= 0)
        io_uring_prep_read_fixed(sqe, fd, dst, len, q->off + q->done, q->buf_index);
    else
        io_uring_prep_read(sqe, fd, dst, len, q->off + q->done);
    if (rd->files_registered)
        io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
    io_uring_sqe_set_data64(sqe, slot);
}

static int read_uring(lwq_io_reader *rd, const lwq_io_plan *p, unsigned char *buf,
                      const int *fmap, const atomic_int *cancel, lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    unsigned nfree = rd->o.queue_depth;
    for (unsigned i = 0; i < nfree; i++)
        rd->free_slots[i] = nfree - 1 - i;
    cursor c = {0, 0};
    unsigned inflight = 0, pending = 0;
    int err = 0, more = 1, stalls = 0;
    for (;;) {
        while (!err && more && nfree > 0) {
            if (canceled(cancel)) {
                err = lwq_errf(e, LWQ_ECANCELED, "read canceled");
                break;
            }
            unsigned slot = rd->free_slots[nfree - 1];
            if (!next_request(rd, p, buf, fmap, &c, &rd->reqs[slot])) {
                more = 0;
                break;
            }
            nfree--;
            prep(rd, slot);
            pending++;
        }
        if (pending > 0 && !rd->broken.code) {
            int n = s->uring_submit(&rd->ring);
            if (n >= 0) {
                inflight += (unsigned)n;
                pending -= (unsigned)n;
            } else if (n == -EINTR || n == -EAGAIN || n == -EBUSY) {
                rd->retries++;
                if (inflight == 0 && ++stalls > MAX_STALLS) {
                    lwq_errsys(&rd->broken, n, "io_uring submit: no progress after %d tries",
                               MAX_STALLS);
                    if (!err)
                        err = lwq_errsys(e, n, "io_uring submit: no progress after %d tries",
                                         MAX_STALLS);
                }
            } else {
                /* Prepared entries stay in the ring and would run on a later submit: the ring
                 * can no longer be trusted. */
                lwq_errsys(&rd->broken, n, "io_uring submit while reading %s", p->files[0]);
                if (!err)
                    err = lwq_errsys(e, n, "io_uring submit while reading %s", p->files[0]);
            }
        }
        if (inflight == 0) {
            if (pending == 0 || rd->broken.code)
                break;
            continue;
        }
        lwq_sys_cqe cqe;
        int rc = s->uring_wait(&rd->ring, &cqe);
        if (rc == -EINTR) {
            rd->retries++;
            continue;
        }
        if (rc < 0) {
            lwq_errsys(&rd->broken, rc, "io_uring wait while reading %s", p->files[0]);
            if (!err)
                err = lwq_errsys(e, rc, "io_uring wait while reading %s", p->files[0]);
            break;
        }
        inflight--;
        stalls = 0;
        unsigned slot = (unsigned)cqe.user_data;
        int a = req_advance(rd, &rd->reqs[slot], cqe.res, e);
        if (a == 0 && !err) {
            prep(rd, slot);
            pending++;
        } else {
            rd->free_slots[nfree++] = slot;
            if (a < 0 && !err)
                err = a;
        }
    }
    if (rd->broken.code) {
        /* Tearing the ring down cancels what was never submitted. */
        io_uring_queue_exit(&rd->ring);
        rd->uring = 0;
        rd->files_registered = 0;
        rd->bufs_registered = 0;
    }
    return err;
}

typedef struct {
    lwq_io_reader *rd;
    const lwq_io_plan *p;
    unsigned char *buf;
    const int *fmap;
    const atomic_int *cancel;
    cursor c;
    pthread_mutex_t mu;
    int stop;
    lwq_error err;
} pread_job;

static void *pread_worker(void *arg)
{
    pread_job *j = arg;
    const lwq_sys_table *s = lwq_sys();
    for (;;) {
        io_req q;
        pthread_mutex_lock(&j->mu);
        int go = !j->stop && next_request(j->rd, j->p, j->buf, j->fmap, &j->c, &q);
        pthread_mutex_unlock(&j->mu);
        if (!go)
            return NULL;
        lwq_error le = {0};
        int a;
        do {
            if (canceled(j->cancel)) {
                a = lwq_errf(&le, LWQ_ECANCELED, "read canceled");
                break;
            }
            const file_ent *f = &j->rd->files[q.file];
            ssize_t r = s->pread(f->fd, q.buf + q.done, q.len - q.done, (off_t)(q.off + q.done));
            a = req_advance(j->rd, &q, (long)r, &le);
        } while (a == 0);
        if (a < 0) {
            pthread_mutex_lock(&j->mu);
            if (!j->err.code)
                j->err = le;
            j->stop = 1;
            pthread_mutex_unlock(&j->mu);
            return NULL;
        }
    }
}

static int read_pread(lwq_io_reader *rd, const lwq_io_plan *p, unsigned char *buf,
                      const int *fmap, const atomic_int *cancel, lwq_error *e)
{
    pread_job j = {.rd = rd, .p = p, .buf = buf, .fmap = fmap, .cancel = cancel};
    pthread_mutex_init(&j.mu, NULL);
    unsigned nt = rd->o.pread_threads;
    pthread_t th[256];
    unsigned started = 0;
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, pread_worker, &j) != 0)
            break;
    if (started == 0)
        pread_worker(&j); /* no thread could start: read on this one */
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.err.code) {
        lwq_errf(e, j.err.code, "%s", j.err.msg);
        return j.err.code;
    }
    return 0;
}

int lwq_io_reader_read(lwq_io_reader *rd, const lwq_io_plan *p, void *buf, size_t cap,
                       const atomic_int *cancel, lwq_error *e)
{
    if (rd->broken.code)
        return lwq_errf(e, rd->broken.code, "io reader unusable after an earlier failure: %s",
                        rd->broken.msg);
    if (p->next == 0)
        return 0;
    if (!buf || (uintptr_t)buf % LWQ_IO_ALIGN || cap < p->bytes)
        return lwq_errf(e, LWQ_EINVAL,
                        "io reader: job needs a 4 KiB aligned buffer of %llu bytes (got %zu at %p)",
                        (unsigned long long)p->bytes, cap, buf);
    if (p->nfiles > MAX_FILES)
        return lwq_errf(e, LWQ_EINVAL, "io reader: one job reads %u files, at most %d allowed",
                        p->nfiles, MAX_FILES);
    rd->stamp++;
    int fmap[MAX_FILES];
    for (uint32_t i = 0; i < p->nfiles; i++) {
        int rc = open_file(rd, p->files[i], e);
        if (rc < 0)
            return rc;
        fmap[i] = rc;
    }
    for (size_t i = 0; i < p->next; i++) {
        const lwq_io_extent *x = &p->ext[i];
        const file_ent *f = &rd->files[fmap[x->file]];
        if (x->need_end > f->size)
            return lwq_errf(e, LWQ_EFORMAT,
                            "%s: bytes up to offset %llu are needed but the file has %llu bytes",
                            f->path, (unsigned long long)x->need_end, (unsigned long long)f->size);
    }
    if (rd->uring)
        return read_uring(rd, p, buf, fmap, cancel, e);
    return read_pread(rd, p, buf, fmap, cancel, e);
}
