/* GPTQ runs killed (SIGKILL) at write steps and mid-computation resume to byte-identical output. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_tmp[256];
static const char *bin(void)
{
    const char *b = getenv("LWQ_BIN");
    return b ? b : LWQ_BIN;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1)
        return -1;
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

static void setup(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/lwq-gptq-resume-XXXXXX");
    cr_assert_not_null(mkdtemp(g_tmp));
    /* MoE: experts, fused q/k/v and gate/up groups sharing one Hessian, GPTQ on every linear */
    cr_assert_eq(sh("%s mkmodel %s/m --arch qwen3_moe --hidden 64 --layers 3 --heads 4 --kv-heads 2 --experts 4 "
                    "--top-k 2 --vocab 512 --quiet",
                    bin(), g_tmp),
                 0);
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    cr_assert_eq(system(cmd), 0);
}

#define QARGS "--algo gptq --gptq-act-order --calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

static int quantize(const char *out, const char *env)
{
    return sh("%s %s quantize %s/m -o %s/%s " QARGS " 2>>%s/stderr.txt", env ? env : "", bin(), g_tmp, g_tmp, out,
              g_tmp);
}

static int same_dirs(const char *a, const char *b)
{
    return sh("diff -r %s/%s %s/%s >/dev/null 2>&1", g_tmp, a, g_tmp, b) == 0;
}

TestSuite(gptq_resume, .init = setup, .fini = teardown, .timeout = 300);

/* Three crash points (early: first shard; middle: a boundary/manifest of layer 1; late: the tail),
 * each killed once and resumed. */
Test(gptq_resume, kill_at_three_write_steps_resumes_byte_identical)
{
    cr_assert_eq(quantize("ref", NULL), 0);
    static const int steps[] = {3, 17, 38};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
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
    cr_assert_eq(sh("%s mkmodel %s/big --arch llama --hidden 256 --layers 3 --quiet", bin(), g_tmp), 0);
    const char *args = "--algo gptq --calib-size 8 --calib-seq 64 --quiet";
    cr_assert_eq(sh("%s quantize %s/big -o %s/ref %s", bin(), g_tmp, g_tmp, args), 0);
    static const int delay_ms[] = {100, 500, 1000};
    for (size_t t = 0; t < sizeof delay_ms / sizeof delay_ms[0]; t++) {
        sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        pid_t p = fork();
        cr_assert_geq(p, 0);
        if (p == 0) {
            char m[512], o[512];
            snprintf(m, sizeof m, "%s/big", g_tmp);
            snprintf(o, sizeof o, "%s/out", g_tmp);
            if (!freopen("/dev/null", "w", stderr))
                _exit(126);
            execl(bin(), bin(), "quantize", m, "-o", o, "--algo", "gptq", "--calib-size", "8", "--calib-seq", "64",
                  "--quiet", (char *)NULL);
            _exit(127);
        }
        struct timespec ts = {delay_ms[t] / 1000, (delay_ms[t] % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(p, SIGKILL);
        int st;
        waitpid(p, &st, 0);
        cr_assert_eq(sh("%s quantize %s/big -o %s/out %s", bin(), g_tmp, g_tmp, args), 0);
        cr_assert(sh("diff -r %s/ref %s/out >/dev/null", g_tmp, g_tmp) == 0, "output differs after a kill at %d ms",
                  delay_ms[t]);
    }
}
