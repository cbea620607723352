/* Hostile output and resume directories (issue 36): a rerun over a finished output without its manifest, hard links planted where lwq creates files, symlinked directories below the resume directory, and the run lock of a run that was just killed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers/run.h"

TestSuite(hostile_outdir, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 300);

#define QARGS "--calib-size 4 --calib-seq 16"

static void make_model(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch llama --hidden 64 --layers 3 --heads 4 --kv-heads 2 --vocab 300 --quiet",
                         lwqt_bin(), lwqt_path("m")), 0, "mkmodel");
}

/* lwq quantize m -o <out> QARGS <extra>: the exit status; stdout in out.txt, stderr in err.txt */
static int quantize(const char *out, const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s " QARGS " %s >%s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path(out), extra,
                   lwqt_path("out.txt"), lwqt_path("err.txt"));
}

static void stderr_has(const char *needle)
{
    char *err = lwqt_err();
    cr_assert(strstr(err, needle), "stderr lacks \"%s\": %s", needle, err);
    free(err);
}

/* The names and SHA-256 of every file of directory `dir` (of the temp dir) into <dir>.sum. */
static void snapshot(const char *dir)
{
    cr_assert_eq(lwqt_sh("cd %s && ls -A | sort > ../%s.ls && sha256sum $(cat ../%s.ls) > ../%s.sum", lwqt_path(dir), dir,
                         dir, dir), 0, "snapshot of %s", dir);
}

/* `dir` holds exactly the files of its snapshot, byte for byte; what differs is shown when not. */
static void unchanged(const char *dir)
{
    int rc = lwqt_sh("cd %s && ls -A | sort | diff ../%s.ls - >../diff.txt 2>&1 && sha256sum --quiet -c ../%s.sum "
                     ">>../diff.txt 2>&1", lwqt_path(dir), dir, dir);
    char *d = lwqt_slurp(lwqt_path("diff.txt"));
    cr_assert_eq(rc, 0, "%s changed (< before, > after):\n%s", dir, d);
    free(d);
}

/* ---- finding 1: a rerun over a finished output whose manifest is gone ------------------------- */

/* o: a finished output of m, its resume directory removed (or never seen by the rerun) */
static void finished_output_without_manifest(void)
{
    make_model();
    cr_assert_eq(quantize("o", "--quiet"), 0, "the first run");
    cr_assert_eq(lwqt_sh("rm -rf %s.layerwise_resume", lwqt_path("o")), 0);
    snapshot("o");
}

/* Before the fix the fresh-start cleanup unlinked this run's shards as it met them in readdir
 * order, then met config.json and refused: exit 2, shards gone. */
Test(hostile_outdir, a_rerun_without_the_manifest_leaves_a_finished_output_alone)
{
    finished_output_without_manifest();
    int rc = quantize("o", "");
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "the rerun exited %d, expected 0 (nothing to do); stderr: %s", rc, err);
    free(err);
    unchanged("o");
    stderr_has("nothing to do");
    cr_assert_eq(lwqt_sh("test ! -e %s.layerwise_resume", lwqt_path("o")), 0, "the rerun left a resume directory");
}

Test(hostile_outdir, a_rerun_with_another_resume_dir_leaves_a_finished_output_alone)
{
    finished_output_without_manifest();
    char extra[600];
    snprintf(extra, sizeof extra, "--resume-dir %s", lwqt_path("other_resume"));
    int rc = quantize("o", extra);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "the rerun exited %d, expected 0 (nothing to do); stderr: %s", rc, err);
    free(err);
    unchanged("o");
    stderr_has("nothing to do");
}

/* Not whole (its index is gone): refused, and not one file removed.  Before the fix, how many
 * shards went before the refusal depended on the directory's readdir order. */
Test(hostile_outdir, an_unfinished_output_without_its_manifest_is_refused_and_kept)
{
    finished_output_without_manifest();
    cr_assert_eq(lwqt_sh("rm %s/model.safetensors.index.json", lwqt_path("o")), 0);
    snapshot("o");
    int rc = quantize("o", "--quiet");
    cr_assert_eq(rc, 2, "the rerun exited %d, expected 2", rc);
    unchanged("o");
    stderr_has("nothing was removed");
}

/* A finished output with a file of the user's beside it: still this run's, still left alone. */
Test(hostile_outdir, a_finished_output_with_a_foreign_file_is_left_alone)
{
    finished_output_without_manifest();
    lwqt_write_str("o/notes.txt", "mine\n");
    snapshot("o");
    int rc = quantize("o", "");
    char *err = lwqt_err();
    cr_assert(rc == 0 || rc == 2, "the rerun exited %d; stderr: %s", rc, err);
    free(err);
    unchanged("o");
}

/* ---- finding 3: hard links at paths lwq creates ------------------------------------------------ */

/* victim: a file outside the output, hard-linked at `planted` (a path of the temp dir) */
static void plant_link(const char *planted)
{
    lwqt_write_str("victim", "precious bytes of another file\n");
    cr_assert_eq(link(lwqt_path("victim"), lwqt_path(planted)), 0, "link %s: %s", planted, strerror(errno));
}

/* The run was refused naming the planted path, and victim still holds its bytes. */
static void victim_untouched(int rc, const char *planted)
{
    char *v = lwqt_slurp(lwqt_path("victim"));
    char *err = lwqt_err();
    cr_assert_str_eq(v, "precious bytes of another file\n", "the file hard-linked at %s was written through (exit %d); "
                     "stderr: %s", planted, rc, err);
    cr_assert_eq(rc, 2, "exit %d, expected 2 (refused); stderr: %s", rc, err);
    cr_assert(strstr(err, lwqt_path(planted)), "the refusal does not name %s: %s", planted, err);
    free(err);
    free(v);
}

Test(hostile_outdir, a_hard_link_at_the_manifest_temporary_is_not_written_through)
{
    make_model();
    cr_assert_eq(mkdir(lwqt_path("o.layerwise_resume"), 0755), 0);
    plant_link("o.layerwise_resume/manifest.json.tmp");
    victim_untouched(quantize("o", "--quiet"), "o.layerwise_resume/manifest.json.tmp");
}

Test(hostile_outdir, a_hard_link_as_the_run_lock_is_not_written_through)
{
    make_model();
    cr_assert_eq(mkdir(lwqt_path("o.layerwise_resume"), 0755), 0);
    plant_link("o.layerwise_resume/lock");
    victim_untouched(quantize("o", "--quiet"), "o.layerwise_resume/lock");
}

Test(hostile_outdir, a_hard_link_at_a_boundary_temporary_is_not_written_through)
{
    make_model();
    cr_assert_eq(mkdir(lwqt_path("o.layerwise_resume"), 0755), 0);
    plant_link("o.layerwise_resume/boundary-1.bin.tmp");
    victim_untouched(quantize("o", "--quiet"), "o.layerwise_resume/boundary-1.bin.tmp");
}

Test(hostile_outdir, a_hard_link_at_the_expert_spill_file_is_not_written_through)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch qwen3_moe --hidden 128 --layers 2 --heads 4 --kv-heads 2 --experts 8 "
                         "--top-k 2 --vocab 512 --quiet", lwqt_bin(), lwqt_path("m")), 0, "mkmodel");
    cr_assert_eq(mkdir(lwqt_path("o.layerwise_resume"), 0755), 0);
    plant_link("o.layerwise_resume/model-layer-00000.spill");
    victim_untouched(quantize("o", "--quiet --expert-group 3"), "o.layerwise_resume/model-layer-00000.spill");
}

/* Layers committed after a run of m into o that crashed at its (k+1)-th file step (0 when none
 * or no manifest; 3, all of them, when it completed). */
static int committed_after_crash(int k)
{
    lwqt_sh("rm -rf %s %s.layerwise_resume", lwqt_path("o"), lwqt_path("o"));
    char env[64];
    snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d ", k);
    int rc = lwqt_sh("%s %s quantize %s -o %s " QARGS " --quiet >/dev/null 2>&1", env, lwqt_bin(), lwqt_path("m"),
                     lwqt_path("o"));
    if (rc == 0)
        return 3;
    char *t = NULL;
    FILE *f = fopen(lwqt_path("o.layerwise_resume/manifest.json"), "r");
    if (!f)
        return 0;
    fclose(f);
    t = lwqt_slurp(lwqt_path("o.layerwise_resume/manifest.json"));
    cJSON *j = cJSON_Parse(t);
    free(t);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "committed");
    int n = cJSON_IsNumber(c) ? c->valueint : 0;
    cJSON_Delete(j);
    return n;
}

/* A resumed run opens the next shard's temporary file without any cleanup before it. */
Test(hostile_outdir, a_hard_link_at_a_shard_temporary_on_resume_is_not_written_through)
{
    make_model();
    int lo = 0, hi = 400; /* committed_after_crash(lo) == 0, (hi) >= 1: the first crash after layer 0's commit */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (committed_after_crash(mid) >= 1)
            hi = mid;
        else
            lo = mid;
    }
    cr_assert_eq(committed_after_crash(hi), 1, "crash step %d leaves other than 1 layer committed", hi);
    lwqt_sh("rm -f %s/*.tmp", lwqt_path("o"));
    plant_link("o/model-layer-00001.safetensors.tmp");
    victim_untouched(quantize("o", "--quiet"), "o/model-layer-00001.safetensors.tmp");
}

/* ---- finding 4: symlinked directories below the resume directory ------------------------------- */

Test(hostile_outdir, a_symlinked_auto_quantize_directory_is_refused)
{
    make_model();
    cr_assert_eq(mkdir(lwqt_path("o.layerwise_resume"), 0755), 0);
    cr_assert_eq(mkdir(lwqt_path("elsewhere"), 0755), 0);
    cr_assert_eq(symlink(lwqt_path("elsewhere"), lwqt_path("o.layerwise_resume/auto_quantize")), 0);
    int rc = quantize("o", "--quiet --auto-quantize-bits 6");
    int written = lwqt_sh("test -z \"$(ls -A %s)\"", lwqt_path("elsewhere"));
    char *err = lwqt_err();
    cr_assert_eq(written, 0, "the search wrote into the link's target (exit %d): %s", rc, err);
    cr_assert_eq(rc, 2, "exit %d, expected 2; stderr: %s", rc, err);
    cr_assert(strstr(err, lwqt_path("o.layerwise_resume/auto_quantize")) && strstr(err, "symbolic link"),
              "the refusal does not name the link: %s", err);
    free(err);
}

/* The control: the output and resume directories the command line names may be links to
 * directories (the user's own choice, like any path given); only what lwq makes below them
 * must be real. */
Test(hostile_outdir, output_and_resume_directories_named_as_links_are_used)
{
    make_model();
    cr_assert_eq(mkdir(lwqt_path("real_o"), 0755), 0);
    cr_assert_eq(mkdir(lwqt_path("real_r"), 0755), 0);
    cr_assert_eq(symlink(lwqt_path("real_o"), lwqt_path("o")), 0);
    cr_assert_eq(symlink(lwqt_path("real_r"), lwqt_path("r")), 0);
    char extra[600];
    snprintf(extra, sizeof extra, "--quiet --resume-dir %s", lwqt_path("r"));
    int rc = quantize("o", extra);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "exit %d; stderr: %s", rc, err);
    free(err);
    cr_assert_eq(lwqt_sh("test -s %s/config.json && test -s %s/manifest.json", lwqt_path("real_o"),
                         lwqt_path("real_r")), 0);
}


/* ---- finding 11: the lock of a run that was just killed --------------------------------------- */

/* A killed run as the kernel shows it for a moment: its pid a zombie, its locks not yet dropped
 * (the kernel closes the files of a multi-threaded process after its main thread is a zombie).
 * Here: a child P takes both locks as a run does (the lock file with its pid, then the output
 * directory), forks C, which inherits them, and exits unreaped; C lets go `hold_ms` after lwq
 * opens the lock file (inotify), so after lwq's first try at the lock, whatever the machine's
 * speed.  Returns P, a zombie now; *c is C. */
static pid_t zombie_holder(int hold_ms, pid_t *c)
{
    cr_assert_eq(mkdir(lwqt_path("o"), 0755), 0);
    cr_assert_eq(mkdir(lwqt_path("o.layerwise_resume"), 0755), 0);
    char lockp[512], outp[512];
    snprintf(lockp, sizeof lockp, "%s", lwqt_path("o.layerwise_resume/lock"));
    snprintf(outp, sizeof outp, "%s", lwqt_path("o"));
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) {
        int fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644), dfd = open(outp, O_RDONLY | O_DIRECTORY);
        char txt[32];
        int n = snprintf(txt, sizeof txt, "%ld\n", (long)getpid());
        if (fd < 0 || dfd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 || ftruncate(fd, 0) != 0 ||
            write(fd, txt, (size_t)n) != n || flock(dfd, LOCK_EX | LOCK_NB) != 0)
            _exit(3);
        pid_t k = fork();
        if (k < 0)
            _exit(4);
        if (k == 0) {
            int in = inotify_init1(IN_CLOEXEC);
            if (in < 0 || inotify_add_watch(in, lockp, IN_OPEN) < 0)
                _exit(5);
            pid_t me = getpid();
            if (write(ready[1], &me, sizeof me) != (ssize_t)sizeof me)
                _exit(6);
            struct pollfd pf = {.fd = in, .events = POLLIN};
            if (poll(&pf, 1, 60000) == 1) /* lwq opened the lock file */
                usleep((useconds_t)hold_ms * 1000);
            _exit(0);
        }
        _exit(0); /* P: a zombie until the test reaps it */
    }
    pid_t k = 0;
    cr_assert_eq(read(ready[0], &k, sizeof k), (ssize_t)sizeof k, "the holder did not start");
    close(ready[0]);
    close(ready[1]);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    cr_assert_eq(waitid(P_PID, (id_t)p, &si, WEXITED | WNOWAIT), 0); /* exited, not reaped */
    cr_assert_eq(si.si_code, CLD_EXITED);
    cr_assert_eq(si.si_status, 0, "the holder could not take the locks (%d)", si.si_status);
    *c = k;
    return p;
}

static void reap(pid_t p, pid_t c)
{
    kill(c, SIGKILL);
    waitpid(p, NULL, 0);
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Before the fix: refused at once, "in use by another lwq run (pid P)", P a zombie. */
Test(hostile_outdir, a_lock_an_exited_run_still_holds_is_waited_for)
{
    make_model();
    pid_t c, p = zombie_holder(300, &c);
    int rc = quantize("o", "--quiet");
    reap(p, c);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "the rerun exited %d, expected 0 (after waiting for the release); stderr: %s", rc, err);
    char want[64];
    snprintf(want, sizeof want, "pid %ld, which has exited", (long)p);
    cr_assert(strstr(err, want) && strstr(err, "waiting"), "stderr does not say it waits for pid %ld: %s", (long)p, err);
    free(err);
}

/* A lock the exited run's pid keeps longer than the bounded wait: refused after it, saying so. */
Test(hostile_outdir, a_lock_an_exited_run_keeps_past_the_wait_is_refused_after_it)
{
    make_model();
    pid_t c, p = zombie_holder(30000, &c);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = quantize("o", "--quiet");
    double s = seconds_since(&t0);
    reap(p, c);
    char *err = lwqt_err();
    cr_assert_eq(rc, 2, "exit %d, expected 2; stderr: %s", rc, err);
    char want[64];
    snprintf(want, sizeof want, "(pid %ld, which has exited", (long)p);
    cr_assert(strstr(err, want) && strstr(err, "after waiting"), "the refusal does not say it waited: %s", err);
    cr_assert_lt(s, 25.0, "the wait took %.1f s: not bounded", s);
    free(err);
}
