/* Disk full during a run (issue 7): an injected ENOSPC stops the run with a clear error, nothing
 * past the last good layer is committed, and the rerun after space is freed completes with the
 * same bytes as an uninterrupted run.  Runs the engine in-process so the io/sys.h fault table
 * applies. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/run/engine.h"
#include "engine/run/resume/manifest.h"
#include "io/sys.h"
#include "layout/recipe/recipe.h"
#include "tests/helpers/inproc.h"
#include "tests/helpers/shell.h"

static char g_tmp[256];

static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-diskfull");
    cr_assert_eq(lwqt_sh("%s mkmodel %s/m --arch qwen3_moe --hidden 64 --layers 3 --heads 4 --kv-heads 2 "
                         "--experts 4 --top-k 2 --vocab 512 --quiet",
                         lwqt_bin(), g_tmp),
                 0);
}

static void teardown(void)
{
    lwq_sys_fault_clear();
    lwqt_rmtree(g_tmp);
}

static int run(const char *out, lwq_error *e)
{
    return lwqt_quantize_inproc(g_tmp, "m", out, (lwqt_ids){6, 12, 37, 11}, 4, e);
}

static int committed(const char *out, int *complete)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s.layerwise_resume/manifest.json", g_tmp, out);
    lwq_manifest m;
    lwq_error e = {0};
    cr_assert_eq(lwq_manifest_load(p, &m, &e), 0, "%s", e.msg);
    int c = m.committed;
    if (complete)
        *complete = m.complete;
    lwq_manifest_free(&m);
    return c;
}

TestSuite(diskfull, .init = setup, .fini = teardown, .timeout = 120);

Test(diskfull, enospc_stops_cleanly_and_the_rerun_is_identical)
{
    lwq_error e = {0};
    cr_assert_eq(run("ref", &e), 0, "%s", e.msg);
    /* Writes after arming: 1 the run lock's pid, 2 the initial manifest, 3 the tail (streamed by
     * the writer before the first shard); per layer a shard, a boundary (not after the last layer)
     * and a manifest; then the index and configs.  Every write from the nth on fails. */
    static const struct {
        int nth, max_committed;
    } cases[] = {{3, 0}, {4, 0}, {5, 0}, {8, 1}, {11, 3}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int nth = cases[ci].nth;
        char out[32], cmd[1024];
        snprintf(out, sizeof out, "out%d", nth);
        lwq_sys_fault f = {LWQ_SYS_OP_WRITE, nth, 0, ENOSPC, 0};
        cr_assert_eq(lwq_sys_fault_add(&f), 0);
        lwq_error_clear(&e);
        int rc = run(out, &e);
        lwq_sys_fault_clear();
        cr_assert_eq(rc, LWQ_ENOSPC, "write %d: rc %d (%s)", nth, rc, e.msg);
        cr_assert(strstr(e.msg, "No space left on device") && strstr(e.msg, g_tmp), "message: %s", e.msg);
        int complete = 1, c = committed(out, &complete);
        cr_assert_leq(c, cases[ci].max_committed, "write %d: %d layers committed past the failed write", nth, c);
        cr_assert_not(complete, "write %d: the run was marked complete", nth);
        snprintf(cmd, sizeof cmd, "test ! -e %s/%s/model.safetensors.index.json", g_tmp, out);
        cr_assert_eq(system(cmd), 0, "write %d: the index was written after a failed write", nth);
        lwq_error_clear(&e);
        cr_assert_eq(run(out, &e), 0, "rerun after space is freed: %s", e.msg);
        snprintf(cmd, sizeof cmd, "diff -r %s/ref %s/%s >/dev/null", g_tmp, g_tmp, out);
        cr_assert_eq(system(cmd), 0, "output after ENOSPC at write %d differs", nth);
    }
}

Test(diskfull, eio_on_fsync_is_an_error_not_a_commit)
{
    lwq_error e = {0};
    lwq_sys_fault f = {LWQ_SYS_OP_FSYNC, 3, 1, EIO, 0};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    int rc = run("out", &e);
    lwq_sys_fault_clear();
    cr_assert_eq(rc, LWQ_EIO, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, "fsync"), "message does not name the step: %s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(run("out", &e), 0, "%s", e.msg);
    cr_assert_eq(committed("out", NULL), 3);
}

/* The steps before the first manifest: the lock file's pid, the directories. */
Test(diskfull, enospc_before_the_first_manifest_names_the_step_and_the_rerun_is_identical)
{
    lwq_error e = {0};
    cr_assert_eq(run("ref", &e), 0, "%s", e.msg);
    static const struct {
        lwq_sys_op op;
        int err;
        const char *names;
    } cases[] = {
        {LWQ_SYS_OP_WRITE, ENOSPC, "lock"},          /* the pid into out.layerwise_resume/lock */
        {LWQ_SYS_OP_MKDIR, ENOSPC, "cannot create directory"},
        {LWQ_SYS_OP_FSYNC, EIO, "fsync directory"}, /* the parent of the new output directory */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char out[32], cmd[1024];
        snprintf(out, sizeof out, "out%zu", ci);
        lwq_sys_fault f = {cases[ci].op, 1, 1, cases[ci].err, 0};
        cr_assert_eq(lwq_sys_fault_add(&f), 0);
        lwq_error_clear(&e);
        int rc = run(out, &e);
        lwq_sys_fault_clear();
        cr_assert_neq(rc, 0, "case %zu: the run ignored the fault", ci);
        cr_assert(strstr(e.msg, cases[ci].names) && strstr(e.msg, g_tmp), "case %zu: message: %s", ci, e.msg);
        snprintf(cmd, sizeof cmd, "test ! -e %s/%s.layerwise_resume/manifest.json", g_tmp, out);
        cr_assert_eq(system(cmd), 0, "case %zu: a manifest was written after the failed step", ci);
        lwq_error_clear(&e);
        cr_assert_eq(run(out, &e), 0, "case %zu: rerun: %s", ci, e.msg);
        snprintf(cmd, sizeof cmd, "diff -r %s/ref %s/%s >/dev/null", g_tmp, g_tmp, out);
        cr_assert_eq(system(cmd), 0, "case %zu: output differs after the rerun", ci);
    }
}
