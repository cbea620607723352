/* tests/io/test_writer.c — the writer thread: order, completion callbacks, sticky failures. */
#include "tests/helpers/io_testutil.h"

#include <pthread.h>

#include "io/sys.h"
#include "io/writer.h"

static char dir[64];
static lwq_writer *w;

#define MAXJ 8
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int done_rc[MAXJ];
static int64_t done_order[MAXJ];
static int ndone;
static char done_msg[MAXJ][LWQ_ERRMSG_MAX];

static void on_done(void *ctx, int64_t id, int rc, const lwq_error *e)
{
    pthread_mutex_lock(&mu);
    if (ndone < MAXJ) {
        done_order[ndone] = id;
        done_rc[id] = rc;
        snprintf(done_msg[id], sizeof done_msg[id], "%s", rc ? e->msg : "");
        ndone++;
    }
    pthread_mutex_unlock(&mu);
}

static void setup(void)
{
    tu_tmpdir(dir, sizeof dir);
    ndone = 0;
    lwq_error e = {0};
    cr_assert_eq(lwq_writer_init(&w, 2, &e), 0);
}

static void teardown(void)
{
    lwq_writer_free(w);
    lwq_sys_fault_clear();
    tu_rmrf(dir);
}

TestSuite(writer, .init = setup, .fini = teardown);

static char paths[MAXJ][128];
static char payload[MAXJ][64];

static int64_t submit(int i, lwq_error *e)
{
    snprintf(paths[i], sizeof paths[i], "%s/model-layer-%05d.safetensors", dir, i);
    snprintf(payload[i], sizeof payload[i], "shard %d payload", i);
    lwq_writer_job j = {.path = paths[i], .data = payload[i], .len = strlen(payload[i]),
                        .done = on_done};
    return lwq_writer_submit(w, &j, e);
}

static int has_content(const char *p, const char *want)
{
    FILE *fp = fopen(p, "rb");
    if (!fp)
        return 0;
    char buf[128] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    return n == strlen(want) && !memcmp(buf, want, n);
}

Test(writer, jobs_complete_in_order_and_are_durable)
{
    lwq_error e = {0};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(submit(i, &e), i, "%s", e.msg);
    cr_assert_eq(lwq_writer_flush(w, &e), 0, "%s", e.msg);
    cr_assert_eq(ndone, 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(done_order[i], i);
        cr_assert_eq(done_rc[i], 0);
        cr_assert(has_content(paths[i], payload[i]), "%s", paths[i]);
    }
}

Test(writer, enospc_stops_all_later_writes)
{
    lwq_error e = {0};
    cr_assert_eq(submit(0, &e), 0);
    cr_assert_eq(lwq_writer_flush(w, &e), 0);
    lwq_sys_fault f = {.op = LWQ_SYS_OP_WRITE, .nth = 1, .times = 1, .err = ENOSPC};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    cr_assert_eq(submit(1, &e), 1);
    int64_t r2 = submit(2, &e); /* may already see the sticky error */
    cr_assert(r2 == 2 || r2 == LWQ_ENOSPC, "%lld", (long long)r2);
    cr_assert_eq(lwq_writer_flush(w, &e), LWQ_ENOSPC);
    cr_assert(strstr(e.msg, "No space left") && strstr(e.msg, paths[1]), "%s", e.msg);
    cr_assert_eq(done_rc[0], 0);
    cr_assert_eq(done_rc[1], LWQ_ENOSPC);
    cr_assert(has_content(paths[0], payload[0]));
    cr_assert_not(tu_exists(paths[1]), "nothing committed after the failed write");
    if (r2 == 2) {
        cr_assert_eq(done_rc[2], LWQ_ECANCELED);
        cr_assert(strstr(done_msg[2], "earlier write failed"), "%s", done_msg[2]);
    }
    cr_assert_not(tu_exists(paths[2]));
    lwq_error e2 = {0};
    cr_assert_eq(submit(3, &e2), LWQ_ENOSPC);
    cr_assert_eq(lwq_writer_flush(w, &e2), LWQ_ENOSPC);
}

typedef struct {
    int fail_after;
} ser_ctx;

static int serialize(void *ctx, lwq_durable_file *f, lwq_error *e)
{
    ser_ctx *c = ctx;
    for (int i = 0; i < 3; i++) {
        if (i == c->fail_after)
            return lwq_errf(e, LWQ_ENUMERIC, "tensor layers.0.mlp: scale is NaN");
        int rc = lwq_durable_append(f, "chunk", 5, e);
        if (rc < 0)
            return rc;
    }
    return 0;
}

Test(writer, serialize_callback_success_and_failure)
{
    lwq_error e = {0};
    ser_ctx ok = {.fail_after = -1}, bad = {.fail_after = 2};
    snprintf(paths[0], sizeof paths[0], "%s/a", dir);
    snprintf(paths[1], sizeof paths[1], "%s/b", dir);
    lwq_writer_job j0 = {.path = paths[0], .serialize = serialize, .serialize_ctx = &ok,
                         .done = on_done};
    lwq_writer_job j1 = {.path = paths[1], .serialize = serialize, .serialize_ctx = &bad,
                         .done = on_done};
    cr_assert_eq(lwq_writer_submit(w, &j0, &e), 0);
    cr_assert_eq(lwq_writer_submit(w, &j1, &e), 1);
    cr_assert_eq(lwq_writer_flush(w, &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "scale is NaN"), "%s", e.msg);
    cr_assert(has_content(paths[0], "chunkchunkchunk"));
    cr_assert_not(tu_exists(paths[1]));
    char tmp[140];
    snprintf(tmp, sizeof tmp, "%s.tmp", paths[1]);
    cr_assert_not(tu_exists(tmp));
}

Test(writer, crash_before_rename_reports_failure)
{
    lwq_error e = {0};
    lwq_sys_crash_at(3, LWQ_SYS_CRASH_FAIL); /* create, write, fsync; the rename never happens */
    cr_assert_eq(submit(0, &e), 0);
    cr_assert_eq(lwq_writer_flush(w, &e), LWQ_EIO);
    cr_assert_eq(done_rc[0], LWQ_EIO);
    cr_assert_not(tu_exists(paths[0]));
}

Test(writer, bad_job_rejected)
{
    lwq_error e = {0};
    lwq_writer_job j = {.path = "", .data = "x", .len = 1};
    cr_assert_eq(lwq_writer_submit(w, &j, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "needs a path"), "%s", e.msg);
}
