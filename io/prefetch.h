/* io/prefetch.h — the prefetch thread: keeps up to K jobs (layers) loaded ahead of the engine.
 *
 * The engine submits jobs (a list of byte ranges each, see reader.h) in the order it will use
 * them; a background thread reads job j into pool slot j % K as soon as job j-K has been
 * released, so while the engine computes layer N, layers N+1..N+K-1 are being read and the engine
 * waits only when the disk is slower than compute.  K is the pool's slot count (default 2 in the
 * engine, from the memory plan).  lwq_prefetch_submit plans the job at once, so the caller learns
 * every range's place in the slot (ranges[i].dst) before the bytes arrive.
 *
 * Errors are sticky: the first read error (naming file and offset) stops all further reading,
 * and every later wait/submit returns it; the run must stop.  lwq_prefetch_cancel stops reading
 * as soon as the requests in flight complete; waiters then get LWQ_ECANCELED.
 *
 * Ownership: the prefetcher borrows the reader and the pool (it alone uses the reader from init
 * to free; it registers the pool's memory with it) and owns the job plans.  Thread-safety: submit,
 * wait, release, cancel and the stats may be called from any thread; free from one. */
#ifndef LWQ_IO_PREFETCH_H
#define LWQ_IO_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "io/pool.h"
#include "io/reader.h"

typedef struct lwq_prefetch lwq_prefetch;

typedef struct lwq_prefetch_opts {
    lwq_io_reader *reader;
    lwq_pool *pool;          /* K = pool->nslots; every job must fit in one slot */
    uint64_t merge_gap;      /* plan merge gap in bytes (0: default 256 KiB) */
} lwq_prefetch_opts;

typedef struct lwq_prefetch_stats {
    uint64_t jobs_loaded;
    uint64_t bytes_read;     /* buffer bytes read (aligned extents) */
    double read_seconds;     /* time the thread spent inside reads */
    double wait_seconds;     /* time callers spent blocked in lwq_prefetch_wait */
} lwq_prefetch_stats;

/* Starts the thread. */
int lwq_prefetch_init(lwq_prefetch **out, const lwq_prefetch_opts *o, lwq_error *e);
/* Cancel, join the thread and free the plans (slots in use by the caller become invalid). */
void lwq_prefetch_free(lwq_prefetch *pf);

/* Queue the next job; fills ranges[i].dst (offsets into the job's slot).  Never blocks.
 * Returns the job id (0, 1, 2, ... in submit order) or a negative code: a job larger than a slot,
 * a bad range, or the sticky error. */
int64_t lwq_prefetch_submit(lwq_prefetch *pf, lwq_io_range *ranges, size_t n, lwq_error *e);
/* Block until job `id` is loaded and set *slot to its bytes (valid until release). */
int lwq_prefetch_wait(lwq_prefetch *pf, int64_t id, void **slot, lwq_error *e);
/* Give job `id`'s slot back so job id+K can load.  Releasing an unknown or already released job
 * is LWQ_EINVAL. */
int lwq_prefetch_release(lwq_prefetch *pf, int64_t id, lwq_error *e);
/* Stop: no new reads start, the read in flight is cut short, waiters get LWQ_ECANCELED. */
void lwq_prefetch_cancel(lwq_prefetch *pf);
void lwq_prefetch_get_stats(lwq_prefetch *pf, lwq_prefetch_stats *st);

#endif
