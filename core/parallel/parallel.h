/* core/parallel/parallel.h — a small persistent thread pool for data-parallel loops ("threads over rows").
 *
 * lwq_parallel_for(n, fn, ctx) splits [0, n) into T contiguous static chunks (T = thread count,
 * fewer when n is small) and calls fn(ctx, begin, end, tid) once per chunk, returning when all are
 * done.  The split depends only on n and T, so results are deterministic for a given thread count
 * as long as each index's result does not depend on the chunking.  Calls are serialized (one loop
 * runs at a time; a second caller waits); a call made from inside a worker runs inline on that
 * worker.  The pool starts lazily; the default thread count is the number of CPUs the process may
 * run on (its affinity mask: taskset, cgroups, MPI binding), or LWQ_THREADS from the environment.
 * The workers are joined at exit (atexit), so leak checkers see no thread left running. */
#ifndef LWQ_CORE_PARALLEL_H
#define LWQ_CORE_PARALLEL_H

#include <stdint.h>

typedef void (*lwq_parallel_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* Set the thread count (>= 1) for later loops; stops and restarts the pool if it changed. */
/* The CPUs this process may run on (>= 1): its affinity mask (taskset, cgroup cpusets, an MPI launcher's
 * binding), not every online CPU, so a run pinned to one core starts one thread. */
int lwq_parallel_usable_cpus(void);
void lwq_parallel_set_threads(int n);
int lwq_parallel_threads(void);
/* Run fn over [0, n) in at most lwq_parallel_threads() chunks, each at least `min_chunk` long. */
void lwq_parallel_for(int64_t n, int64_t min_chunk, lwq_parallel_fn fn, void *ctx);
/* Stop the worker threads (for leak checkers; the pool restarts on next use). */
void lwq_parallel_shutdown(void);

#endif
