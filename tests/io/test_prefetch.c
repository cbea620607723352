/* tests/io/test_prefetch.c — prefetch ordering, depth limit, cancellation, sticky errors. */
#include "tests/helpers/io_testutil.h"

#include <time.h>

#include "io/prefetch.h"
#include "io/sys.h"

#define JOB_BYTES (256u << 10)
#define NJOBS 7

static char dir[64], file[128];
static lwq_pool pool;
static lwq_io_reader *rd;
static lwq_prefetch *pf;

static void setup(void)
{
    tu_tmpdir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/shard.bin", dir);
    tu_write_pattern(file, (uint64_t)NJOBS * JOB_BYTES, 5);
    lwq_error e = {0};
    lwq_io_reader_opts o;
    lwq_io_reader_opts_default(&o);
    o.block_bytes = 64 << 10;
    cr_assert_eq(lwq_io_reader_init(&rd, &o, &e), 0, "%s", e.msg);
    lwq_pool_opts po = {.slot_bytes = JOB_BYTES + 8192, .nslots = 2, .numa_node = -1};
    cr_assert_eq(lwq_pool_init(&pool, &po, &e), 0, "%s", e.msg);
    lwq_prefetch_opts pfo = {.reader = rd, .pool = &pool};
    cr_assert_eq(lwq_prefetch_init(&pf, &pfo, &e), 0, "%s", e.msg);
}

static void teardown(void)
{
    lwq_prefetch_free(pf);
    lwq_io_reader_free(rd);
    lwq_pool_free(&pool);
    lwq_sys_fault_clear();
    tu_rmrf(dir);
}

TestSuite(prefetch, .init = setup, .fini = teardown);

/* Job j: two ranges of layer j, given in reverse file order, 100 bytes apart. */
static int64_t submit_job(int j, lwq_io_range r[2], lwq_error *e)
{
    uint64_t base = (uint64_t)j * JOB_BYTES;
    r[0] = (lwq_io_range){file, base + JOB_BYTES / 2 + 100, JOB_BYTES / 2 - 100, 0};
    r[1] = (lwq_io_range){file, base + 3, JOB_BYTES / 2 - 3, 0};
    return lwq_prefetch_submit(pf, r, 2, e);
}

static void check_job(const void *slot, const lwq_io_range r[2])
{
    const uint8_t *b = slot;
    for (int i = 0; i < 2; i++)
        for (uint64_t k = 0; k < r[i].length; k++)
            if (b[r[i].dst + k] != tu_byte(5, r[i].offset + k))
                cr_assert_fail("range at %llu: byte %llu differs",
                               (unsigned long long)r[i].offset, (unsigned long long)k);
}

static uint64_t loaded(void)
{
    lwq_prefetch_stats st;
    lwq_prefetch_get_stats(pf, &st);
    return st.jobs_loaded;
}

static void wait_loaded(uint64_t n)
{
    for (int i = 0; i < 2000 && loaded() < n; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

Test(prefetch, jobs_arrive_in_order_with_right_bytes)
{
    lwq_io_range r[NJOBS][2];
    lwq_error e = {0};
    for (int j = 0; j < NJOBS; j++)
        cr_assert_eq(submit_job(j, r[j], &e), j, "%s", e.msg);
    for (int j = 0; j < NJOBS; j++) {
        void *slot;
        cr_assert_eq(lwq_prefetch_wait(pf, j, &slot, &e), 0, "%s", e.msg);
        cr_assert_eq(slot, lwq_pool_slot(&pool, j % 2));
        check_job(slot, r[j]);
        cr_assert_eq(lwq_prefetch_release(pf, j, &e), 0);
    }
    cr_assert_eq(loaded(), NJOBS);
}

Test(prefetch, never_more_than_k_ahead)
{
    lwq_io_range r[NJOBS][2];
    lwq_error e = {0};
    for (int j = 0; j < 5; j++)
        cr_assert_eq(submit_job(j, r[j], &e), j);
    wait_loaded(2);
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    cr_assert_eq(loaded(), 2, "K=2 slots: job 2 must wait for job 0's release");
    void *slot;
    cr_assert_eq(lwq_prefetch_wait(pf, 0, &slot, &e), 0);
    cr_assert_eq(lwq_prefetch_release(pf, 0, &e), 0);
    wait_loaded(3);
    cr_assert_eq(loaded(), 3);
    cr_assert_eq(lwq_prefetch_wait(pf, 2, &slot, &e), 0);
    check_job(slot, r[2]);
}

Test(prefetch, cancel_wakes_waiters)
{
    lwq_io_range r[NJOBS][2];
    lwq_error e = {0};
    for (int j = 0; j < 4; j++)
        cr_assert_eq(submit_job(j, r[j], &e), j);
    lwq_prefetch_cancel(pf);
    void *slot;
    int rc = lwq_prefetch_wait(pf, 3, &slot, &e); /* job 3 can never load: slot of job 1 */
    cr_assert_eq(rc, LWQ_ECANCELED, "%d %s", rc, e.msg);
    cr_assert_null(slot);
    lwq_error_clear(&e);
    cr_assert_eq(submit_job(4, r[4], &e), LWQ_ECANCELED);
}

Test(prefetch, read_error_is_sticky_and_names_file)
{
    lwq_io_range r[NJOBS][2];
    lwq_error e = {0};
    cr_assert_eq(submit_job(0, r[0], &e), 0);
    void *slot;
    cr_assert_eq(lwq_prefetch_wait(pf, 0, &slot, &e), 0, "%s", e.msg);
    lwq_sys_fault f = {.op = LWQ_SYS_OP_READ, .nth = 2, .times = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    cr_assert_eq(submit_job(1, r[1], &e), 1);
    cr_assert_eq(lwq_prefetch_wait(pf, 1, &slot, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "job 1") && strstr(e.msg, file) && strstr(e.msg, "offset"), "%s",
              e.msg);
    lwq_error e2 = {0};
    cr_assert_eq(submit_job(2, r[2], &e2), LWQ_EIO, "submit after the error fails too");
    cr_assert_str_eq(e2.msg, e.msg);
}

Test(prefetch, job_larger_than_slot_rejected)
{
    lwq_io_range r = {file, 0, (uint64_t)3 * JOB_BYTES, 0};
    lwq_error e = {0};
    cr_assert_eq(lwq_prefetch_submit(pf, &r, 1, &e), LWQ_ENOMEM);
    cr_assert(strstr(e.msg, "a slot holds"), "%s", e.msg);
}

Test(prefetch, release_of_unloaded_job_rejected)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_prefetch_release(pf, 0, &e), LWQ_EINVAL);
    void *slot;
    cr_assert_eq(lwq_prefetch_wait(pf, 5, &slot, &e), LWQ_EINVAL);
}
