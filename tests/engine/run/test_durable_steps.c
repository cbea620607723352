/* Every file step of a quantize run goes through the io/sys.h table (issue 14): a recording table
 * sees every file and directory the run leaves in the output and resume directories, every
 * created directory is followed by an fsync of its parent, and with every mutating step failing
 * the run changes nothing on disk.  Runs the engine in-process so the table applies. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/run/engine.h"
#include "io/sys.h"
#include "layout/recipe/recipe.h"
#include "tests/helpers/inproc.h"
#include "tests/helpers/shell.h"

static char g_tmp[256];

static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-steps");
    cr_assert_eq(lwqt_sh("%s mkmodel %s/m --arch qwen3_moe --hidden 64 --layers 2 --heads 4 --kv-heads 2 "
                         "--experts 4 --top-k 2 --vocab 512 --quiet",
                         lwqt_bin(), g_tmp),
                 0);
}

static void teardown(void)
{
    lwq_sys_set(NULL);
    lwq_sys_fault_clear();
    lwqt_rmtree(g_tmp);
}

static int run(const char *out, lwq_error *e)
{
    return lwqt_quantize_inproc(g_tmp, "m", out, (lwqt_ids){5, 10, 31, 7}, 2, e);
}

/* ---- a recording table: every path created, and the events "mkdir P" / "fsync P" in order ---- */

#define MAXEV 4096
static char g_ev[MAXEV][320];
static int g_nev;
static char g_fdpath[1024][300];

static void ev(const char *what, const char *path)
{
    if (g_nev < MAXEV)
        snprintf(g_ev[g_nev++], sizeof g_ev[0], "%s %s", what, path);
}

static int r_open(const char *p, int flags, mode_t m)
{
    int fd = lwq_sys_kernel()->open(p, flags, m);
    if (fd >= 0 && fd < 1024)
        snprintf(g_fdpath[fd], sizeof g_fdpath[0], "%s", p);
    if (fd >= 0 && (flags & O_CREAT))
        ev("create", p);
    return fd;
}
static int r_fsync(int fd)
{
    if (fd >= 0 && fd < 1024)
        ev("fsync", g_fdpath[fd]);
    return lwq_sys_kernel()->fsync(fd);
}
static int r_rename(const char *a, const char *b)
{
    ev("rename", b);
    return lwq_sys_kernel()->rename(a, b);
}
static int r_mkdir(const char *p, mode_t m)
{
    ev("mkdir", p);
    return lwq_sys_kernel()->mkdir(p, m);
}

static lwq_sys_table g_rec;

static void record(void)
{
    g_rec = *lwq_sys_kernel();
    g_rec.open = r_open;
    g_rec.fsync = r_fsync;
    g_rec.rename = r_rename;
    g_rec.mkdir = r_mkdir;
    g_nev = 0;
    lwq_sys_set(&g_rec);
}

static int seen(const char *what, const char *path, int from)
{
    char want[320];
    snprintf(want, sizeof want, "%s %s", what, path);
    for (int i = from; i < g_nev; i++)
        if (!strcmp(g_ev[i], want))
            return i;
    return -1;
}

/* Every entry of `dir` was made through the table (created, renamed to, or mkdir'ed). */
static void all_entries_seen(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        cr_assert(seen("create", p, 0) >= 0 || seen("rename", p, 0) >= 0 || seen("mkdir", p, 0) >= 0,
                  "%s was made behind the syscall table's back", p);
        n++;
    }
    closedir(d);
    cr_assert_gt(n, 0, "%s is empty", dir);
}

TestSuite(durable_steps, .init = setup, .fini = teardown, .timeout = 120);

Test(durable_steps, every_output_and_resume_file_is_made_through_the_table)
{
    lwq_error e = {0};
    record();
    int rc = run("out", &e);
    lwq_sys_set(NULL);
    cr_assert_eq(rc, 0, "%s", e.msg);
    char out[300], res[300];
    snprintf(out, sizeof out, "%s/out", g_tmp);
    snprintf(res, sizeof res, "%s/out.layerwise_resume", g_tmp);
    all_entries_seen(out);
    all_entries_seen(res);
}

Test(durable_steps, every_created_directory_is_followed_by_an_fsync_of_its_parent)
{
    lwq_error e = {0};
    record();
    int rc = run("out", &e);
    lwq_sys_set(NULL);
    cr_assert_eq(rc, 0, "%s", e.msg);
    int dirs = 0;
    for (int i = 0; i < g_nev; i++) {
        if (strncmp(g_ev[i], "mkdir ", 6))
            continue;
        char parent[320];
        snprintf(parent, sizeof parent, "%s", g_ev[i] + 6);
        *strrchr(parent, '/') = 0;
        cr_assert_geq(seen("fsync", parent, i + 1), 0, "%s is not followed by an fsync of %s", g_ev[i], parent);
        dirs++;
    }
    cr_assert_eq(dirs, 2, "expected the output and the resume directory to be made, saw %d mkdirs", dirs);
}

/* A listing of every file under g_tmp with its size and checksum. */
static char *snapshot(void)
{
    char cmd[600], *buf = calloc(1, 1 << 16);
    snprintf(cmd, sizeof cmd, "cd %s && find . -path ./m -prune -o -print | sort | while read f; do "
             "if [ -f \"$f\" ]; then echo \"$f $(cksum < \"$f\")\"; else echo \"$f\"; fi; done", g_tmp);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(buf, 1, (1 << 16) - 1, p);
    pclose(p);
    buf[n] = 0;
    return buf;
}

Test(durable_steps, with_every_mutating_step_failing_nothing_changes_on_disk)
{
    lwq_error e = {0};
    /* a fresh output: not even the directories may appear */
    char *before = snapshot();
    lwq_sys_crash_at(0, LWQ_SYS_CRASH_FAIL);
    cr_assert_neq(run("out", &e), 0, "the run succeeded without a single file step");
    lwq_sys_fault_clear();
    char *after = snapshot();
    cr_assert_str_eq(after, before, "a failing run changed the disk behind the table's back");
    free(before);
    free(after);
    /* a half-done output (a kill after some steps): resuming must not touch it either */
    for (long k = 10; k <= 40; k += 15) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        cr_assert_eq(system(cmd), 0);
        lwq_sys_crash_at(k, LWQ_SYS_CRASH_FAIL);
        lwq_error_clear(&e);
        cr_assert_neq(run("out", &e), 0, "no crash at step %ld", k);
        lwq_sys_fault_clear();
        /* without the manifest the rerun also clears the run's own leftover shards */
        if (k == 40) {
            snprintf(cmd, sizeof cmd, "rm -f %s/out.layerwise_resume/manifest.json", g_tmp);
            cr_assert_eq(system(cmd), 0);
        }
        before = snapshot();
        lwq_sys_crash_at(0, LWQ_SYS_CRASH_FAIL);
        lwq_error_clear(&e);
        cr_assert_neq(run("out", &e), 0);
        lwq_sys_fault_clear();
        after = snapshot();
        cr_assert_str_eq(after, before, "a failing rerun after a crash at step %ld changed the disk", k);
        free(before);
        free(after);
        lwq_error_clear(&e);
        cr_assert_eq(run("out", &e), 0, "rerun after a crash at step %ld: %s", k, e.msg);
    }
}
