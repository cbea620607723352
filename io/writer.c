/* io/writer.c — the writer thread (see writer.h). */
#include "io/writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/log.h"
#include "core/sys/trace.h"

typedef struct wjob {
    lwq_writer_job j;
    char *path;
    int64_t id;
    struct wjob *next;
} wjob;

struct lwq_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* queue changed / job finished / stop */
    wjob *head, *tail;
    int queued, max_queued, busy, stop;
    int64_t next_id;
    lwq_error err;            /* sticky */
};

static int write_one(const wjob *w, lwq_error *e)
{
    if (w->j.data || !w->j.serialize) {
        LWQ_TRACE_BEGIN("durable write", w->id);
        int rc = lwq_durable_write_file(w->path, w->j.data, w->j.len, e);
        LWQ_TRACE_END();
        return rc;
    }
    lwq_durable_file f;
    int rc = lwq_durable_open(&f, w->path, e);
    if (rc < 0)
        return rc;
    rc = w->j.serialize(w->j.serialize_ctx, &f, e);
    if (rc < 0) {
        if (!e || !e->code)
            lwq_errf(e, rc, "serialize %s failed", w->path);
        lwq_durable_abort(&f);
        return rc;
    }
    /* fsync, rename, fsync of the directory: where the disk's write latency shows */
    LWQ_TRACE_BEGIN("durable", w->id);
    rc = lwq_durable_commit(&f, e);
    LWQ_TRACE_END();
    return rc;
}

static void *writer_main(void *arg)
{
    lwq_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->head)
            break;
        wjob *job = w->head;
        w->head = job->next;
        if (!w->head)
            w->tail = NULL;
        w->queued--;
        w->busy = 1;
        lwq_error failed = w->err;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);

        lwq_error le = {0};
        int rc;
        if (failed.code)
            rc = lwq_errf(&le, LWQ_ECANCELED, "%s not written: an earlier write failed: %s",
                          job->path, failed.msg);
        else
            rc = write_one(job, &le);
        if (rc < 0 && !failed.code)
            LWQ_ERROR("writer: %s", le.msg);
        if (job->j.done)
            job->j.done(job->j.done_ctx, job->id, rc, &le);

        pthread_mutex_lock(&w->mu);
        if (rc < 0 && !w->err.code)
            w->err = le;
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
        free(job->path);
        free(job);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int lwq_writer_init(lwq_writer **out, int max_queued, lwq_error *e)
{
    *out = NULL;
    if (max_queued < 1)
        return lwq_errf(e, LWQ_EINVAL, "writer: max_queued must be >= 1 (got %d)", max_queued);
    lwq_writer *w = calloc(1, sizeof *w);
    if (!w)
        return lwq_errf(e, LWQ_ENOMEM, "writer: out of memory");
    w->max_queued = max_queued;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return lwq_errf(e, LWQ_ENOMEM, "writer: cannot start the thread");
    }
    *out = w;
    return 0;
}

int64_t lwq_writer_submit(lwq_writer *w, const lwq_writer_job *job, lwq_error *e)
{
    if (!job || !job->path || !job->path[0] || (!job->data && job->len) ||
        (!job->data && !job->serialize && job->len))
        return lwq_errf(e, LWQ_EINVAL, "writer: a job needs a path and data or a serializer");
    wjob *n = calloc(1, sizeof *n);
    char *path = strdup(job->path);
    if (!n || !path) {
        free(n);
        free(path);
        return lwq_errf(e, LWQ_ENOMEM, "writer: out of memory");
    }
    n->j = *job;
    n->path = path;
    pthread_mutex_lock(&w->mu);
    while (w->queued >= w->max_queued && !w->err.code)
        pthread_cond_wait(&w->cv, &w->mu);
    if (w->err.code) {
        int rc = lwq_errf(e, w->err.code, "%s", w->err.msg);
        pthread_mutex_unlock(&w->mu);
        free(n->path);
        free(n);
        return rc;
    }
    n->id = w->next_id++;
    if (w->tail)
        w->tail->next = n;
    else
        w->head = n;
    w->tail = n;
    w->queued++;
    int64_t id = n->id;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return id;
}

int lwq_writer_flush(lwq_writer *w, lwq_error *e)
{
    pthread_mutex_lock(&w->mu);
    while (w->head || w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->err.code ? lwq_errf(e, w->err.code, "%s", w->err.msg) : 0;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void lwq_writer_free(lwq_writer *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
