/* GPTQ runs killed (SIGKILL) at write steps and mid-computation resume to byte-identical output. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers/shell.h"

static char g_tmp[256];
static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-gptq-resume");
    /* MoE: experts, fused q/k/v and gate/up groups sharing one Hessian, GPTQ on every linear */
    cr_assert_eq(lwqt_sh("%s mkmodel %s/m --arch qwen3_moe --hidden 64 --layers 3 --heads 4 --kv-heads 2 --experts 4 "
                         "--top-k 2 --vocab 512 --quiet",
                         lwqt_bin(), g_tmp),
                 0);
}

static void teardown(void)
{
    lwqt_rmtree(g_tmp);
}

#define QARGS "--algo gptq --gptq-act-order --calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

static int quantize(const char *out, const char *env)
{
    return lwqt_sh("%s %s quantize %s/m -o %s/%s " QARGS " 2>>%s/stderr.txt", env ? env : "", lwqt_bin(), g_tmp, g_tmp, out,
                   g_tmp);
}

static int same_dirs(const char *a, const char *b)
{
    return lwqt_sh("diff -r %s/%s %s/%s >/dev/null 2>&1", g_tmp, a, g_tmp, b) == 0;
}

TestSuite(gptq_resume, .init = setup, .fini = teardown, .timeout = 300);

/* Three crash points (early: first shard; middle: a boundary/manifest of layer 1; late: the tail),
 * each killed once and resumed. */
Test(gptq_resume, kill_at_three_write_steps_resumes_byte_identical)
{
    cr_assert_eq(quantize("ref", NULL), 0);
    static const int steps[] = {3, 17, 38};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", steps[i]);
        cr_assert_eq(quantize("out", env), 128 + SIGKILL, "no kill at step %d", steps[i]);
        cr_assert_eq(quantize("out", NULL), 0, "resume after a kill at step %d failed", steps[i]);
        cr_assert(same_dirs("ref", "out"), "output after a kill at step %d differs", steps[i]);
    }
}

/* The same three points killed in one run, one after the other. */
Test(gptq_resume, three_kills_in_one_run)
{
    cr_assert_eq(quantize("ref", NULL), 0);
    static const int steps[] = {9, 9, 9};
    for (int i = 0; i < 3; i++) {
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d", steps[i]);
        cr_assert_eq(quantize("out", env), 128 + SIGKILL, "kill %d did not happen", i);
    }
    cr_assert_eq(quantize("out", NULL), 0);
    cr_assert(same_dirs("ref", "out"), "output differs after three kills");
}

/* Kills at times that land in the forwards and the GPTQ sweeps (no write step involved). */
Test(gptq_resume, timed_kills_mid_computation)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s/big --arch llama --hidden 256 --layers 3 --quiet", lwqt_bin(), g_tmp), 0);
    const char *args = "--algo gptq --calib-size 8 --calib-seq 64 --quiet";
    cr_assert_eq(lwqt_sh("%s quantize %s/big -o %s/ref %s", lwqt_bin(), g_tmp, g_tmp, args), 0);
    static const int delay_ms[] = {100, 500, 1000};
    for (size_t t = 0; t < sizeof delay_ms / sizeof delay_ms[0]; t++) {
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        pid_t p = fork();
        cr_assert_geq(p, 0);
        if (p == 0) {
            char m[512], o[512];
            snprintf(m, sizeof m, "%s/big", g_tmp);
            snprintf(o, sizeof o, "%s/out", g_tmp);
            if (!freopen("/dev/null", "w", stderr))
                _exit(126);
            execl(lwqt_bin(), lwqt_bin(), "quantize", m, "-o", o, "--algo", "gptq", "--calib-size", "8", "--calib-seq", "64",
                  "--quiet", (char *)NULL);
            _exit(127);
        }
        struct timespec ts = {delay_ms[t] / 1000, (delay_ms[t] % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(p, SIGKILL);
        int st;
        waitpid(p, &st, 0);
        cr_assert_eq(lwqt_sh("%s quantize %s/big -o %s/out %s", lwqt_bin(), g_tmp, g_tmp, args), 0);
        cr_assert(lwqt_sh("diff -r %s/ref %s/out >/dev/null", g_tmp, g_tmp) == 0, "output differs after a kill at %d ms",
                  delay_ms[t]);
    }
}
