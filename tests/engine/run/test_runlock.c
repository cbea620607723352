/* One run per output (issue 14): a second `lwq quantize` on the same output or resume directory
 * is refused at once naming the first one's pid; a kill -9'd run never leaves a lock that blocks
 * the rerun.  Library-level lock tests first, then the real binary (LWQ_BIN) on a tiny model. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers/shell.h"

#include "io/runlock.h"

static char g_tmp[256];

static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-runlock");
}

static void teardown(void)
{
    lwqt_rmtree(g_tmp);
}

static const char *tp(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, name);
    return buf[k];
}

TestSuite(runlock, .init = setup, .fini = teardown, .timeout = 300);

/* ---- the lock itself --------------------------------------------------------------------- */

Test(runlock, second_lock_in_the_same_process_is_refused_with_the_pid)
{
    cr_assert_eq(mkdir(tp("out"), 0755), 0);
    cr_assert_eq(mkdir(tp("res"), 0755), 0);
    lwq_runlock a, b;
    lwq_error e = {0};
    cr_assert_eq(lwq_runlock_acquire(&a, tp("out"), tp("res"), &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_runlock_acquire(&b, tp("out"), tp("res"), &e), LWQ_ESTATE);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    cr_assert(strstr(e.msg, pid) && strstr(e.msg, tp("res")), "message: %s", e.msg);
    cr_assert_eq(b.held, 0);
    lwq_runlock_release(&a);
    lwq_error e2 = {0};
    cr_assert_eq(lwq_runlock_acquire(&b, tp("out"), tp("res"), &e2), 0, "released lock still blocks: %s", e2.msg);
    lwq_runlock_release(&b);
}

Test(runlock, shared_output_with_another_resume_dir_is_refused)
{
    cr_assert_eq(mkdir(tp("out"), 0755), 0);
    cr_assert_eq(mkdir(tp("res1"), 0755), 0);
    cr_assert_eq(mkdir(tp("res2"), 0755), 0);
    lwq_runlock a, b;
    lwq_error e = {0};
    cr_assert_eq(lwq_runlock_acquire(&a, tp("out"), tp("res1"), &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_runlock_acquire(&b, tp("out"), tp("res2"), &e), LWQ_ESTATE);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    cr_assert(strstr(e.msg, "output directory") && strstr(e.msg, pid), "message: %s", e.msg);
    cr_assert_eq(b.held, 0);
    lwq_runlock_release(&a);
}

Test(runlock, lock_held_by_a_killed_process_is_free)
{
    cr_assert_eq(mkdir(tp("out"), 0755), 0);
    cr_assert_eq(mkdir(tp("res"), 0755), 0);
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) {
        lwq_runlock l;
        lwq_error e = {0};
        int rc = lwq_runlock_acquire(&l, tp("out"), tp("res"), &e);
        char c = rc == 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1)
            _exit(3);
        pause();
        _exit(0);
    }
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    cr_assert_eq(c, 'y');
    lwq_runlock l;
    lwq_error e = {0};
    cr_assert_eq(lwq_runlock_acquire(&l, tp("out"), tp("res"), &e), LWQ_ESTATE, "the child's lock did not hold");
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)p);
    cr_assert(strstr(e.msg, pid), "the child's pid is not named: %s", e.msg);
    kill(p, SIGKILL);
    int st;
    waitpid(p, &st, 0);
    lwq_error e2 = {0};
    cr_assert_eq(lwq_runlock_acquire(&l, tp("out"), tp("res"), &e2), 0, "stale lock blocks: %s", e2.msg);
    lwq_runlock_release(&l);
    close(ready[0]);
    close(ready[1]);
}

/* issue 36, finding 3: the lock file was opened and truncated through a hard link planted there */
Test(runlock, a_hard_linked_lock_file_is_refused_and_its_other_file_untouched)
{
    cr_assert_eq(mkdir(tp("out"), 0755), 0);
    cr_assert_eq(mkdir(tp("res"), 0755), 0);
    cr_assert_eq(lwqt_sh("echo precious > %s/victim && ln %s/victim %s/res/lock", g_tmp, g_tmp, g_tmp), 0);
    lwq_runlock l;
    lwq_error e = {0};
    cr_assert_eq(lwq_runlock_acquire(&l, tp("out"), tp("res"), &e), LWQ_EINVAL, "a hard-linked lock file was taken");
    cr_assert(strstr(e.msg, tp("res/lock")) && strstr(e.msg, "hard links"), "%s", e.msg);
    cr_assert_eq(lwqt_sh("grep -qx precious %s/victim", g_tmp), 0, "the linked file was written through");
}

/* A lock file holds a pid: a larger file at its name is not one lwq wrote, and is not truncated. */
Test(runlock, a_lock_file_larger_than_a_pid_is_refused_and_kept)
{
    cr_assert_eq(mkdir(tp("out"), 0755), 0);
    cr_assert_eq(mkdir(tp("res"), 0755), 0);
    cr_assert_eq(lwqt_sh("seq 1 100 > %s/res/lock", g_tmp), 0);
    lwq_runlock l;
    lwq_error e = {0};
    cr_assert_eq(lwq_runlock_acquire(&l, tp("out"), tp("res"), &e), LWQ_EINVAL, "a 292-byte lock file was taken");
    cr_assert(strstr(e.msg, "292 bytes"), "%s", e.msg);
    cr_assert_eq(lwqt_sh("test $(wc -l < %s/res/lock) = 100", g_tmp), 0, "the file was changed");
}

/* ---- the binary ------------------------------------------------------------------------------ */

#define QARGS "--calib-size 16 --calib-seq 64 --quiet"

static void make_model(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s/m --arch qwen3_moe --hidden 512 --layers 6 --heads 4 --kv-heads 2 --experts 4 "
                         "--top-k 2 --vocab 512 --quiet",
                         lwqt_bin(), g_tmp),
                 0);
}

/* Start `lwq quantize m -o out` in the background, stderr to <tmp>/a.err. */
static pid_t start_run(void)
{
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) {
        if (!freopen(tp("a.err"), "w", stderr))
            _exit(126);
        execl(lwqt_bin(), lwqt_bin(), "quantize", tp("m"), "-o", tp("out"), "--calib-size", "16", "--calib-seq", "64", "--quiet",
              (char *)NULL);
        _exit(127);
    }
    return p;
}

/* Wait until the run `p` holds the lock (its pid is in the lock file); 0 if it exited first. */
static int wait_for_lock(pid_t p)
{
    char want[32];
    snprintf(want, sizeof want, "%ld", (long)p);
    for (int i = 0; i < 20000; i++) {
        FILE *f = fopen(tp("out.layerwise_resume/lock"), "r");
        char got[32] = {0};
        if (f) {
            if (!fgets(got, sizeof got, f))
                got[0] = 0;
            fclose(f);
        }
        if (!strncmp(got, want, strlen(want)) && got[strlen(want)] == '\n')
            return 1;
        int st;
        if (waitpid(p, &st, WNOHANG) == p)
            return 0;
        usleep(500);
    }
    return 0;
}

Test(runlock, concurrent_quantize_is_refused_naming_the_first_pid)
{
    make_model();
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/ref " QARGS, lwqt_bin(), g_tmp, g_tmp), 0);
    pid_t a = start_run();
    cr_assert(wait_for_lock(a), "the first run never took the lock");
    kill(a, SIGSTOP); /* hold it mid-run, whatever the machine's speed */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = lwqt_sh("%s quantize %s/m -o %s/out " QARGS " 2>%s/b.err", lwqt_bin(), g_tmp, g_tmp, g_tmp);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kill(a, SIGCONT);
    cr_assert_eq(rc, 2, "the second run was not refused (exit %d)", rc);
    cr_assert_eq(lwqt_sh("grep -q 'in use by another lwq run (pid %ld)' %s/b.err", (long)a, g_tmp), 0,
                 "the refusal does not name pid %ld", (long)a);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_lt(s, 30.0, "the refusal took %.1f s", s);
    int st;
    cr_assert_eq(waitpid(a, &st, 0), a);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the first run failed after the refused second one");
    cr_assert_eq(lwqt_sh("diff -r %s/ref %s/out >/dev/null", g_tmp, g_tmp), 0, "the first run's output differs");
}

Test(runlock, sigkilled_run_leaves_no_lock_that_blocks_the_rerun)
{
    make_model();
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/ref " QARGS, lwqt_bin(), g_tmp, g_tmp), 0);
    pid_t a = start_run();
    cr_assert(wait_for_lock(a), "the first run never took the lock");
    kill(a, SIGKILL);
    int st;
    cr_assert_eq(waitpid(a, &st, 0), a);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* the dead run's pid is still written in the lock file; only the kernel's lock counts */
    cr_assert_eq(lwqt_sh("grep -qx %ld %s/out.layerwise_resume/lock", (long)a, g_tmp), 0);
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/out " QARGS " 2>%s/b.err", lwqt_bin(), g_tmp, g_tmp, g_tmp), 0,
                 "the rerun after kill -9 failed");
    cr_assert_eq(lwqt_sh("diff -r %s/ref %s/out >/dev/null", g_tmp, g_tmp), 0, "output after kill -9 + rerun differs");
}

Test(runlock, refused_foreign_output_leaves_no_lock_or_resume_dir_behind)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s/m --arch qwen3_moe --hidden 64 --layers 2 --heads 4 --kv-heads 2 --experts 4 "
                         "--top-k 2 --vocab 512 --quiet",
                         lwqt_bin(), g_tmp),
                 0);
    cr_assert_eq(mkdir(tp("out"), 0755), 0);
    cr_assert_eq(lwqt_sh("echo mine > %s/out/notes.txt", g_tmp), 0);
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/out " QARGS " 2>%s/b.err", lwqt_bin(), g_tmp, g_tmp, g_tmp), 2);
    cr_assert_eq(lwqt_sh("grep -q 'holds notes.txt, which is not from this run' %s/b.err", g_tmp), 0);
    cr_assert_eq(lwqt_sh("test \"$(ls -A %s/out)\" = notes.txt && grep -qx mine %s/out/notes.txt", g_tmp, g_tmp), 0,
                 "the refused run changed the output directory");
    cr_assert_eq(lwqt_sh("test ! -e %s/out.layerwise_resume", g_tmp), 0, "the refused run left its resume directory");
}

Test(runlock, remove_deletes_the_lock_file_and_an_emptied_resume_dir)
{
    cr_assert_eq(mkdir(tp("out"), 0755), 0);
    cr_assert_eq(mkdir(tp("res"), 0755), 0);
    lwq_runlock a;
    lwq_error e = {0};
    cr_assert_eq(lwq_runlock_acquire(&a, tp("out"), tp("res"), &e), 0, "%s", e.msg);
    lwq_runlock_remove(&a, tp("res"), 1);
    cr_assert_eq(a.held, 0);
    cr_assert_eq(lwqt_sh("test ! -e %s/res", g_tmp), 0);
    cr_assert_eq(mkdir(tp("res"), 0755), 0);
    cr_assert_eq(lwq_runlock_acquire(&a, tp("out"), tp("res"), &e), 0, "%s", e.msg);
    lwq_runlock_remove(&a, tp("res"), 0); /* a resume directory the run did not make stays */
    cr_assert_eq(lwqt_sh("test -d %s/res && test ! -e %s/res/lock", g_tmp, g_tmp), 0);
}
