/* io/writer.h — the writer thread: makes finished shards durable while the engine computes on.
 *
 * Each job names a final path and either a buffer or a serialize callback that appends the
 * file's bytes through lwq_durable_append.  The thread writes "<path>.tmp", fsyncs, renames and
 * fsyncs the directory (io/durable.h), then calls the job's completion callback with 0 — the
 * only signal on which the engine may commit the shard (name it in the manifest).  Jobs run in
 * submit order.
 *
 * Errors are sticky: after a failed write (ENOSPC, EIO, a serialize error) nothing more is
 * written — every later job's callback gets LWQ_ECANCELED "not written: an earlier write
 * failed: ...", and submit/flush return the first error.  No final file exists for a failed job
 * (durable.h invariant 4).
 *
 * Ownership: the job's buffer and contexts stay the caller's and must stay valid until its
 * completion callback has run (the callback is the place to free them); paths are copied.
 * Callbacks run on the writer thread.  Thread-safety: submit and flush from any thread; free
 * from one.  Submit blocks while `max_queued` jobs are waiting (memory back-pressure). */
#ifndef LWQ_IO_WRITER_H
#define LWQ_IO_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "io/durable.h"

typedef int (*lwq_writer_serialize_fn)(void *ctx, lwq_durable_file *f, lwq_error *e);
/* rc is 0 when the file is durable under its final name; e holds the message otherwise. */
typedef void (*lwq_writer_done_fn)(void *ctx, int64_t id, int rc, const lwq_error *e);

typedef struct lwq_writer_job {
    const char *path;                  /* final path */
    const void *data;                  /* bytes to write, or NULL with serialize */
    size_t len;
    lwq_writer_serialize_fn serialize; /* used when data is NULL */
    void *serialize_ctx;
    lwq_writer_done_fn done;           /* optional */
    void *done_ctx;
} lwq_writer_job;

typedef struct lwq_writer lwq_writer;

/* Start the thread; max_queued >= 1 jobs may wait before submit blocks. */
int lwq_writer_init(lwq_writer **out, int max_queued, lwq_error *e);
/* Queue a job; returns its id (0, 1, ...) or the sticky error / LWQ_EINVAL (then the callback is
 * not called). */
int64_t lwq_writer_submit(lwq_writer *w, const lwq_writer_job *job, lwq_error *e);
/* Wait until every queued job has completed; returns 0 or the sticky error. */
int lwq_writer_flush(lwq_writer *w, lwq_error *e);
/* Flush, stop and join the thread. */
void lwq_writer_free(lwq_writer *w);

#endif
