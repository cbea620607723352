#include "core/parallel/parallel.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#define LWQ_PAR_MAX 256

static pthread_mutex_t g_call = PTHREAD_MUTEX_INITIALIZER; /* one loop at a time */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_go = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;
static pthread_t g_tid[LWQ_PAR_MAX];
static int g_nthreads;   /* requested; 0 = not decided yet */
static int g_running;    /* workers started (excluding the caller) */
static unsigned long g_gen;
static int g_pending, g_stop;
static int64_t g_n;
static int g_chunks;
static lwq_parallel_fn g_fn;
static void *g_ctx;
static unsigned long g_start_gen[LWQ_PAR_MAX]; /* g_gen when worker i was created */
static _Thread_local int t_in_worker;

static void chunk(int c, int nchunks, int64_t n, int64_t *b, int64_t *e)
{
    *b = n * c / nchunks;
    *e = n * (c + 1) / nchunks;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg; /* 1..g_running */
    t_in_worker = 1;
    pthread_mutex_lock(&g_mu);
    /* a new worker must not replay the loop that ran before it existed */
    unsigned long seen = g_start_gen[id];
    for (;;) {
        while (g_gen == seen && !g_stop)
            pthread_cond_wait(&g_go, &g_mu);
        if (g_stop)
            break;
        seen = g_gen;
        if (id < g_chunks) {
            int64_t b, e;
            chunk(id, g_chunks, g_n, &b, &e);
            lwq_parallel_fn fn = g_fn;
            void *ctx = g_ctx;
            pthread_mutex_unlock(&g_mu);
            fn(ctx, b, e, id);
            pthread_mutex_lock(&g_mu);
            if (--g_pending == 0)
                pthread_cond_signal(&g_done);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

int lwq_parallel_usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
}

static int default_threads(void)
{
    const char *s = getenv("LWQ_THREADS");
    long n = s ? strtol(s, NULL, 10) : lwq_parallel_usable_cpus();
    if (n < 1)
        n = 1;
    if (n > LWQ_PAR_MAX)
        n = LWQ_PAR_MAX;
    return (int)n;
}

static void stop_locked(void)
{
    pthread_mutex_lock(&g_mu);
    g_stop = 1;
    pthread_cond_broadcast(&g_go);
    pthread_mutex_unlock(&g_mu);
    for (int i = 1; i <= g_running; i++)
        pthread_join(g_tid[i], NULL);
    g_running = 0;
    g_stop = 0;
}

/* At exit the workers are stopped and joined, so leak checkers see no live thread (valgrind
 * counted each one's stack as "possibly lost").  Skipped when a loop is running (exit from
 * another thread) or when exit is called from a worker: joining then would wait forever. */
static void join_at_exit(void)
{
    if (t_in_worker || pthread_mutex_trylock(&g_call) != 0)
        return;
    stop_locked();
    pthread_mutex_unlock(&g_call);
}

/* A forked child has none of its parent's workers: it must not join them, and starts its own. */
static void forget_in_child(void)
{
    g_running = 0;
    g_stop = 0;
    pthread_mutex_init(&g_call, NULL);
    pthread_mutex_init(&g_mu, NULL);
    pthread_cond_init(&g_go, NULL);
    pthread_cond_init(&g_done, NULL);
}

static void register_hooks(void)
{
    atexit(join_at_exit);
    pthread_atfork(NULL, NULL, forget_in_child);
}

static void start_locked(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_hooks);
    if (g_nthreads == 0)
        g_nthreads = default_threads();
    while (g_running < g_nthreads - 1) {
        int id = g_running + 1;
        pthread_mutex_lock(&g_mu);
        g_start_gen[id] = g_gen;
        pthread_mutex_unlock(&g_mu);
        if (pthread_create(&g_tid[id], NULL, worker, (void *)(intptr_t)id) != 0)
            break; /* fewer threads: still correct, loops use what started */
        g_running++;
    }
}

void lwq_parallel_set_threads(int n)
{
    if (n < 1)
        n = 1;
    if (n > LWQ_PAR_MAX)
        n = LWQ_PAR_MAX;
    pthread_mutex_lock(&g_call);
    if (n != g_nthreads) {
        stop_locked();
        g_nthreads = n;
    }
    pthread_mutex_unlock(&g_call);
}

int lwq_parallel_threads(void)
{
    pthread_mutex_lock(&g_call);
    if (g_nthreads == 0)
        g_nthreads = default_threads();
    int n = g_nthreads;
    pthread_mutex_unlock(&g_call);
    return n;
}

void lwq_parallel_for(int64_t n, int64_t min_chunk, lwq_parallel_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (t_in_worker) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&g_call);
    start_locked();
    int64_t chunks = g_running + 1;
    if (min_chunk < 1)
        min_chunk = 1;
    if (chunks > n / min_chunk)
        chunks = n / min_chunk;
    if (chunks < 1)
        chunks = 1;
    if (chunks == 1) {
        t_in_worker = 1;
        fn(ctx, 0, n, 0);
        t_in_worker = 0;
        pthread_mutex_unlock(&g_call);
        return;
    }
    pthread_mutex_lock(&g_mu);
    g_n = n;
    g_chunks = (int)chunks;
    g_fn = fn;
    g_ctx = ctx;
    g_pending = (int)chunks - 1;
    g_gen++;
    pthread_cond_broadcast(&g_go);
    pthread_mutex_unlock(&g_mu);

    int64_t b, e;
    chunk(0, (int)chunks, n, &b, &e);
    t_in_worker = 1;
    fn(ctx, b, e, 0);
    t_in_worker = 0;

    pthread_mutex_lock(&g_mu);
    while (g_pending > 0)
        pthread_cond_wait(&g_done, &g_mu);
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_call);
}

void lwq_parallel_shutdown(void)
{
    pthread_mutex_lock(&g_call);
    stop_locked();
    pthread_mutex_unlock(&g_call);
}
