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

