/* io/prefetch.c — background reading of the next K jobs (see prefetch.h). */
#include "io/prefetch.h"
#include "core/sys/trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sys/log.h"

typedef enum { JOB_QUEUED = 0, JOB_LOADING, JOB_READY, JOB_RELEASED } job_state;

typedef struct {
    lwq_io_plan plan;
    job_state state;
} pf_job;

struct lwq_prefetch {
    lwq_io_reader *rd;
    lwq_pool *pool;
    uint64_t merge_gap;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* any state change: submit, load done, release, error, cancel */
    pf_job *jobs;
    int64_t njobs, cap;
    int64_t next_load;        /* first job not yet loaded */
    atomic_int cancel;
    lwq_error err;            /* sticky */
    lwq_prefetch_stats st;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int slot_free_for(const lwq_prefetch *pf, int64_t j)
{
    int64_t prev = j - pf->pool->nslots;
    return prev < 0 || pf->jobs[prev].state == JOB_RELEASED;
}

static void *prefetch_main(void *arg)
{
    lwq_prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!atomic_load(&pf->cancel) && !pf->err.code &&
               !(pf->next_load < pf->njobs && slot_free_for(pf, pf->next_load)))
            pthread_cond_wait(&pf->cv, &pf->mu);
        if (atomic_load(&pf->cancel) || pf->err.code)
            break;
        int64_t j = pf->next_load;
        pf_job *job = &pf->jobs[j];
        job->state = JOB_LOADING;
        /* The plan is immutable once queued and jobs[] may be reallocated by submit, so read
         * from a copy of the plan's header. */
        lwq_io_plan plan = job->plan;
        void *slot = lwq_pool_slot(pf->pool, (int)(j % pf->pool->nslots));
        pthread_mutex_unlock(&pf->mu);

        lwq_error le = {0};
        double t0 = now_s();
        LWQ_TRACE_BEGIN("read job", j);
        int rc = lwq_io_reader_read(pf->rd, &plan, slot, pf->pool->slot_bytes, &pf->cancel, &le);
        LWQ_TRACE_END();
        double dt = now_s() - t0;

        pthread_mutex_lock(&pf->mu);
        pf->st.read_seconds += dt;
        if (rc < 0) {
            if (rc != LWQ_ECANCELED) {
                lwq_errf(&pf->err, rc, "prefetch of job %lld: %s", (long long)j, le.msg);
                LWQ_ERROR("%s", pf->err.msg);
            }
            pthread_cond_broadcast(&pf->cv);
            break;
        }
        pf->jobs[j].state = JOB_READY;
        pf->next_load = j + 1;
        pf->st.jobs_loaded++;
        pf->st.bytes_read += plan.bytes;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

int lwq_prefetch_init(lwq_prefetch **out, const lwq_prefetch_opts *o, lwq_error *e)
{
    *out = NULL;
    if (!o || !o->reader || !o->pool || o->pool->nslots < 1)
        return lwq_errf(e, LWQ_EINVAL, "prefetch: needs a reader and a pool with slots");
    lwq_prefetch *pf = calloc(1, sizeof *pf);
    if (!pf)
        return lwq_errf(e, LWQ_ENOMEM, "prefetch: out of memory");
    pf->rd = o->reader;
    pf->pool = o->pool;
    pf->merge_gap = o->merge_gap ? o->merge_gap : 256u << 10;
    int rc = lwq_io_reader_register(pf->rd, pf->pool->base,
                                    pf->pool->slot_bytes * (size_t)pf->pool->nslots, e);
    if (rc < 0) {
        free(pf);
        return rc;
    }
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    if (pthread_create(&pf->thread, NULL, prefetch_main, pf) != 0) {
        pthread_cond_destroy(&pf->cv);
        pthread_mutex_destroy(&pf->mu);
        free(pf);
        return lwq_errf(e, LWQ_ENOMEM, "prefetch: cannot start the thread");
    }
    LWQ_INFO("prefetch: %d slots of %.1f MiB, %s", pf->pool->nslots,
             (double)pf->pool->slot_bytes / (1 << 20),
             lwq_io_reader_describe(pf->rd));
    *out = pf;
    return 0;
}

void lwq_prefetch_free(lwq_prefetch *pf)
{
    if (!pf)
        return;
    lwq_prefetch_cancel(pf);
    pthread_join(pf->thread, NULL);
    for (int64_t i = 0; i < pf->njobs; i++)
        lwq_io_plan_free(&pf->jobs[i].plan);
    free(pf->jobs);
    pthread_cond_destroy(&pf->cv);
    pthread_mutex_destroy(&pf->mu);
    free(pf);
}

void lwq_prefetch_cancel(lwq_prefetch *pf)
{
    pthread_mutex_lock(&pf->mu);
    atomic_store(&pf->cancel, 1);
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
}

/* Called with the lock held: the sticky error or cancellation, if any. */
static int stopped(lwq_prefetch *pf, lwq_error *e)
{
    if (pf->err.code)
        return lwq_errf(e, pf->err.code, "%s", pf->err.msg);
    if (atomic_load(&pf->cancel))
        return lwq_errf(e, LWQ_ECANCELED, "prefetch canceled");
    return 0;
}

int64_t lwq_prefetch_submit(lwq_prefetch *pf, lwq_io_range *ranges, size_t n, lwq_error *e)
{
    lwq_io_plan plan;
    int rc = lwq_io_plan_build(&plan, ranges, n, pf->merge_gap, e);
    if (rc < 0)
        return rc;
    if (plan.bytes > pf->pool->slot_bytes) {
        uint64_t need = plan.bytes;
        lwq_io_plan_free(&plan);
        return lwq_errf(e, LWQ_ENOMEM,
                        "prefetch: job needs %llu bytes (aligned) but a slot holds %zu; size the "
                        "pool from the largest layer", (unsigned long long)need,
                        pf->pool->slot_bytes);
    }
    pthread_mutex_lock(&pf->mu);
    rc = stopped(pf, e);
    if (rc == 0 && pf->njobs == pf->cap) {
        int64_t cap = pf->cap ? 2 * pf->cap : 16;
        pf_job *nj = realloc(pf->jobs, (size_t)cap * sizeof *nj);
        if (!nj)
            rc = lwq_errf(e, LWQ_ENOMEM, "prefetch: out of memory for the job list");
        else {
            pf->jobs = nj;
            pf->cap = cap;
        }
    }
    int64_t id = rc;
    if (rc == 0) {
        id = pf->njobs++;
        pf->jobs[id] = (pf_job){plan, JOB_QUEUED};
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    if (id < 0)
        lwq_io_plan_free(&plan);
    return id;
}

int lwq_prefetch_wait(lwq_prefetch *pf, int64_t id, void **slot, lwq_error *e)
{
    *slot = NULL;
    double t0 = now_s();
    pthread_mutex_lock(&pf->mu);
    int rc = 0;
    if (id < 0 || id >= pf->njobs || pf->jobs[id].state == JOB_RELEASED) {
        rc = lwq_errf(e, LWQ_EINVAL, "prefetch: wait for job %lld, which is %s", (long long)id,
                      id < 0 || id >= pf->njobs ? "not submitted" : "already released");
    } else {
        while (pf->jobs[id].state != JOB_READY && !(rc = stopped(pf, e)))
            pthread_cond_wait(&pf->cv, &pf->mu);
        if (rc == 0)
            *slot = lwq_pool_slot(pf->pool, (int)(id % pf->pool->nslots));
    }
    pf->st.wait_seconds += now_s() - t0;
    pthread_mutex_unlock(&pf->mu);
    return rc;
}

int lwq_prefetch_release(lwq_prefetch *pf, int64_t id, lwq_error *e)
{
    pthread_mutex_lock(&pf->mu);
    int rc = 0;
    if (id < 0 || id >= pf->njobs || pf->jobs[id].state != JOB_READY)
        rc = lwq_errf(e, LWQ_EINVAL, "prefetch: release of job %lld, which is not loaded",
                      (long long)id);
    else {
        pf->jobs[id].state = JOB_RELEASED;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return rc;
}

void lwq_prefetch_get_stats(lwq_prefetch *pf, lwq_prefetch_stats *st)
{
    pthread_mutex_lock(&pf->mu);
    *st = pf->st;
    pthread_mutex_unlock(&pf->mu);
}
