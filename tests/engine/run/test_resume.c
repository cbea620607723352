/* Resume and crash safety (issue 7): SIGKILL at every durable-write step, repeated kills, timed
 * kills mid-read/forward, SIGINT, disk full, changed inputs, damaged shards.  Each test runs the
 * real `lwq` binary (LWQ_BIN) on a tiny synthetic MoE model and compares the output directory byte
 * for byte with an uninterrupted run. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers/run.h"

static char g_tmp[256];

static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-resume");
}

static void teardown(void)
{
    lwqt_rmtree(g_tmp);
}

static void make_model(const char *name, int layers, int hidden)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s/%s --arch qwen3_moe --hidden %d --layers %d --heads 4 --kv-heads 2 --experts 4 "
                         "--top-k 2 --vocab 512 --quiet",
                         lwqt_bin(), g_tmp, name, hidden, layers),
                 0);
}

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

static int quantize(const char *model, const char *out, const char *env, const char *extra)
{
    return lwqt_sh("%s %s quantize %s/%s -o %s/%s " QARGS " %s 2>>%s/stderr.txt", env ? env : "", lwqt_bin(), g_tmp, model, g_tmp,
                   out, extra ? extra : "", g_tmp);
}

/* Byte-compare every file of two output directories (same names, same bytes). */
static int same_dirs(const char *a, const char *b)
{
    return lwqt_sh("diff -r %s/%s %s/%s >/dev/null 2>&1", g_tmp, a, g_tmp, b) == 0;
}

static int stderr_has(const char *needle)
{
    return lwqt_sh("grep -q -- '%s' %s/stderr.txt", needle, g_tmp) == 0;
}

TestSuite(resume, .init = setup, .fini = teardown, .timeout = 300);

Test(resume, crash_at_every_write_step_resumes_byte_identical)
{
    make_model("m", 2, 64);
    cr_assert_eq(quantize("m", "ref", NULL, NULL), 0);
    int steps = 0, completed = 0;
    for (int k = 0; k < 400 && !completed; k++) {
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", k);
        int rc = quantize("m", "out", env, NULL);
        if (rc == 0) {
            completed = 1; /* k is past the last step: nothing left to crash */
        } else {
            cr_assert_eq(rc, 128 + SIGKILL, "step %d: exit %d, expected SIGKILL", k, rc);
            steps++;
            cr_assert_eq(quantize("m", "out", NULL, NULL), 0, "resume after a crash at step %d failed", k);
        }
        cr_assert(same_dirs("ref", "out"), "output after a crash at step %d differs from the uninterrupted run", k);
    }
    cr_assert(completed && steps > 30, "only %d crash points exercised", steps);
}

Test(resume, three_kills_in_one_run)
{
    make_model("m", 3, 64);
    cr_assert_eq(quantize("m", "ref", NULL, NULL), 0);
    static const int kills[][3] = {{9, 9, 9}, {20, 3, 31}, {33, 15, 7}};
    for (size_t t = 0; t < sizeof kills / sizeof kills[0]; t++) {
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        for (int i = 0; i < 3; i++) {
            char env[64];
            snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d", kills[t][i]);
            cr_assert_eq(quantize("m", "out", env, NULL), 128 + SIGKILL, "kill %d of series %zu did not happen", i, t);
        }
        cr_assert_eq(quantize("m", "out", NULL, NULL), 0);
        cr_assert(same_dirs("ref", "out"), "series %zu: output differs after three kills", t);
    }
}

/* Kills at times that land in reads and forwards (no write step involved). */
Test(resume, timed_kills_mid_read_and_forward)
{
    make_model("big", 4, 512);
    cr_assert_eq(lwqt_sh("%s quantize %s/big -o %s/ref --calib-size 16 --calib-seq 64 --quiet", lwqt_bin(), g_tmp, g_tmp), 0);
    static const int delay_ms[] = {40, 120, 250, 400};
    for (size_t t = 0; t < sizeof delay_ms / sizeof delay_ms[0]; t++) {
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        pid_t p = fork();
        cr_assert_geq(p, 0);
        if (p == 0) {
            char m[512], o[512];
            snprintf(m, sizeof m, "%s/big", g_tmp);
            snprintf(o, sizeof o, "%s/out", g_tmp);
            freopen("/dev/null", "w", stderr);
            execl(lwqt_bin(), lwqt_bin(), "quantize", m, "-o", o, "--calib-size", "16", "--calib-seq", "64", "--quiet", (char *)NULL);
            _exit(127);
        }
        struct timespec ts = {0, delay_ms[t] * 1000000L};
        nanosleep(&ts, NULL);
        kill(p, SIGKILL);
        int st;
        waitpid(p, &st, 0);
        cr_assert_eq(lwqt_sh("%s quantize %s/big -o %s/out --calib-size 16 --calib-seq 64 --quiet", lwqt_bin(), g_tmp, g_tmp), 0);
        cr_assert(same_dirs("ref", "out"), "output differs after a kill at %d ms", delay_ms[t]);
    }
}

Test(resume, sigint_stops_after_a_committed_layer)
{
    make_model("big", 6, 512);
    cr_assert_eq(lwqt_sh("%s quantize %s/big -o %s/ref --calib-size 16 --calib-seq 64 --quiet", lwqt_bin(), g_tmp, g_tmp), 0);
    char log[512];
    snprintf(log, sizeof log, "%s/log.jsonl", g_tmp);
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) {
        char m[512], o[512], err[512];
        snprintf(m, sizeof m, "%s/big", g_tmp);
        snprintf(o, sizeof o, "%s/out", g_tmp);
        snprintf(err, sizeof err, "%s/stderr.txt", g_tmp);
        freopen(err, "w", stderr);
        execl(lwqt_bin(), lwqt_bin(), "quantize", m, "-o", o, "--calib-size", "16", "--calib-seq", "64", "--log-json", log,
              (char *)NULL);
        _exit(127);
    }
    /* wait for the first committed layer in the JSON log, then interrupt */
    for (int i = 0; i < 2000 && lwqt_sh("grep -q '\"layer\":0' %s 2>/dev/null", log) != 0; i++)
        usleep(5000);
    kill(p, SIGINT);
    int st;
    waitpid(p, &st, 0);
    cr_assert(WIFEXITED(st), "SIGINT must end the run cleanly, not kill it");
    if (WEXITSTATUS(st) == 2) { /* stopped early: it must say how to resume */
        cr_assert(stderr_has("rerun the same command to resume"));
    }
    cr_assert_eq(lwqt_sh("%s quantize %s/big -o %s/out --calib-size 16 --calib-seq 64 --quiet", lwqt_bin(), g_tmp, g_tmp), 0);
    cr_assert(same_dirs("ref", "out"));
}

Test(resume, changed_inputs_are_refused_with_the_difference_named)
{
    make_model("m", 2, 64);
    cr_assert_eq(quantize("m", "out", "LWQ_SYS_CRASH_STEP=25", NULL), 128 + SIGKILL);
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/out --calib-size 5 --calib-seq 24 --batch-size 4 --quiet 2>%s/stderr.txt",
                         lwqt_bin(), g_tmp, g_tmp, g_tmp),
                 2);
    cr_assert(stderr_has("calibration tokens"), "calibration change not named");
    cr_assert_eq(quantize("m", "out", NULL, "--qformat fp8"), 2);
    cr_assert(stderr_has("recipe"), "recipe change not named");
    /* the batch size alone does not change a CPU run's bytes (so it may change on resume);
     * counting padded rows does */
    cr_assert_eq(quantize("m", "out", NULL, "--batch-size 2 --calib-include-padding"), 2);
    cr_assert(stderr_has("batching and padding"));
    /* a different source checkpoint under the same path */
    lwqt_sh("rm -rf %s/m", g_tmp);
    cr_assert_eq(lwqt_sh("%s mkmodel %s/m --arch qwen3_moe --hidden 64 --layers 2 --heads 4 --kv-heads 2 --experts 4 --top-k 2 "
                         "--vocab 512 --seed 7 --shard-size 1 --quiet",
                         lwqt_bin(), g_tmp),
                 0);
    cr_assert_eq(quantize("m", "out", NULL, NULL), 2);
    cr_assert(stderr_has("source checkpoint"), "source change not named");
}

Test(resume, damaged_committed_shard_is_refused_and_verify_names_it)
{
    make_model("m", 3, 64);
    cr_assert_eq(quantize("m", "ref", NULL, NULL), 0);
    cr_assert_eq(lwqt_sh("%s verify %s/ref >/dev/null", lwqt_bin(), g_tmp), 0);
    /* the first crash point after which layer 0 is committed but the run is not finished */
    int k = 10;
    for (; k < 200; k++) {
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d", k);
        cr_assert_eq(quantize("m", "out", env, NULL), 128 + SIGKILL, "no crash at step %d", k);
        if (lwqt_sh("grep -q '\"committed\":[[:space:]]*[1-9]' %s/out.layerwise_resume/manifest.json", g_tmp) == 0)
            break;
    }
    cr_assert_lt(k, 200, "layer 0 never got committed");
    /* flip one data byte near the end of the committed shard */
    cr_assert_eq(lwqt_sh("f=%s/out/model-layer-00000.safetensors; s=$(stat -c %%s $f); "
                         "printf '\\377' | dd of=$f bs=1 seek=$((s-3)) conv=notrunc 2>/dev/null",
                         g_tmp),
                 0);
    cr_assert_eq(quantize("m", "out", NULL, NULL), 2);
    cr_assert(stderr_has("model-layer-00000.safetensors fails its checksum"));
    /* verify names the damaged file in a finished output as well */
    cr_assert_eq(lwqt_sh("cp %s/ref/model-layer-00001.safetensors %s/x && printf '\\001' | dd of=%s/ref/model-layer-00001.safetensors "
                         "bs=1 seek=$(( $(stat -c %%s %s/x) - 2 )) conv=notrunc 2>/dev/null",
                         g_tmp, g_tmp, g_tmp, g_tmp),
                 0);
    cr_assert_eq(lwqt_sh("%s verify %s/ref > %s/verify.txt", lwqt_bin(), g_tmp, g_tmp), 1);
    cr_assert_eq(lwqt_sh("grep -q 'model-layer-00001.safetensors: checksum or size differs' %s/verify.txt", g_tmp), 0);
}

Test(resume, finished_run_leaves_a_few_kb_and_reruns_as_a_no_op)
{
    make_model("m", 2, 64);
    cr_assert_eq(quantize("m", "out", NULL, NULL), 0);
    cr_assert_eq(lwqt_sh("test $(du -sk %s/out.layerwise_resume | cut -f1) -le 16", g_tmp), 0, "resume state over 16 KiB");
    cr_assert_eq(lwqt_sh("ls %s/out.layerwise_resume | grep -q boundary", g_tmp), 1, "boundary files left behind");
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/out " QARGS " 2>%s/stderr.txt", lwqt_bin(), g_tmp, g_tmp, g_tmp), 0);
    /* a lost config file is rewritten without recomputing anything */
    lwqt_sh("cp -r %s/out %s/ref && rm %s/out/config.json", g_tmp, g_tmp, g_tmp);
    cr_assert_eq(quantize("m", "out", NULL, NULL), 0);
    cr_assert(same_dirs("ref", "out"));
}

Test(resume, foreign_files_in_the_output_are_refused)
{
    make_model("m", 2, 64);
    lwqt_sh("mkdir -p %s/out && echo hello > %s/out/notes.txt", g_tmp, g_tmp);
    cr_assert_eq(quantize("m", "out", NULL, NULL), 2);
    cr_assert(stderr_has("notes.txt"));
    cr_assert_eq(lwqt_sh("cat %s/out/notes.txt | grep -q hello", g_tmp), 0, "a foreign file was touched");
}
