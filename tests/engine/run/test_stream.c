/* Expert streaming (issue 16): MoE layers computed as the dense part + expert groups give the unstreamed bytes for every group size and architecture, stay within a memory budget a quarter of a layer above the process, refuse a budget below dense part + one expert, and resume byte-identically after SIGKILL inside a streamed layer. */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers/shell.h"

static char g_tmp[256];
static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-stream");
}

static void teardown(void)
{
    lwqt_rmtree(g_tmp);
}

TestSuite(stream, .init = setup, .fini = teardown, .timeout = 300);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

static void make_model(const char *name, const char *arch, const char *geometry)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s/%s --arch %s %s --vocab 512 --quiet", lwqt_bin(), g_tmp, name, arch, geometry), 0,
                 "mkmodel %s failed", arch);
}

static int quantize(const char *model, const char *out, const char *env, const char *extra)
{
    return lwqt_sh("%s %s quantize %s/%s -o %s/%s " QARGS " %s 2>>%s/stderr.txt", env ? env : "", lwqt_bin(), g_tmp, model,
                   g_tmp, out, extra ? extra : "", g_tmp);
}

static int same_dirs(const char *a, const char *b)
{
    return lwqt_sh("diff -r %s/%s %s/%s >/dev/null 2>&1", g_tmp, a, g_tmp, b) == 0;
}

static int stderr_has(const char *needle)
{
    return lwqt_sh("grep -q -- '%s' %s/stderr.txt", needle, g_tmp) == 0;
}

#define SMALL_MOE "--hidden 128 --layers 2 --heads 4 --kv-heads 2 --experts 8 --top-k 2"

Test(stream, every_group_size_gives_the_unstreamed_bytes)
{
    make_model("m", "qwen3_moe", SMALL_MOE);
    cr_assert_eq(quantize("m", "ref", NULL, NULL), 0);
    static const char *groups[] = {"1", "3", "5", "8"};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        char out[32], extra[64];
        snprintf(out, sizeof out, "g%s", groups[i]);
        snprintf(extra, sizeof extra, "--expert-group %s", groups[i]);
        cr_assert_eq(quantize("m", out, NULL, extra), 0, "--expert-group %s failed", groups[i]);
        cr_assert(same_dirs("ref", out), "--expert-group %s: output differs from the unstreamed run", groups[i]);
    }
}

Test(stream, mixtral_and_all_experts_calibration_stream_byte_identically)
{
    make_model("mx", "mixtral", "--hidden 128 --intermediate 128 --layers 2 --heads 4 --kv-heads 2 --experts 6 --top-k 2");
    cr_assert_eq(quantize("mx", "ref", NULL, "--calib-all-experts"), 0);
    cr_assert_eq(quantize("mx", "g2", NULL, "--calib-all-experts --expert-group 2"), 0);
    cr_assert(same_dirs("ref", "g2"), "mixtral --calib-all-experts --expert-group 2 differs from the unstreamed run");
}

Test(stream, cold_experts_in_other_groups_are_filled_as_unstreamed)
{
    /* 16 experts, top-1, 2 samples of 4 tokens: most experts get no token, and the siblings they
     * are filled from are in other groups */
    make_model("m", "qwen3_moe", "--hidden 128 --layers 2 --heads 4 --kv-heads 2 --experts 16 --top-k 1");
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/ref --calib-size 2 --calib-seq 4 2>>%s/stderr.txt", lwqt_bin(), g_tmp, g_tmp,
                         g_tmp), 0);
    cr_assert(lwqt_sh("grep -q 'cold experts [1-9]' %s/stderr.txt", g_tmp) == 0, "the fixture should leave experts cold");
    cr_assert_eq(lwqt_sh("%s quantize %s/m -o %s/g3 --calib-size 2 --calib-seq 4 --quiet --expert-group 3 "
                         "2>>%s/stderr.txt", lwqt_bin(), g_tmp, g_tmp, g_tmp), 0);
    cr_assert(same_dirs("ref", "g3"), "cold-expert filling across groups differs from the unstreamed run");
}

Test(stream, deepseek_shared_experts_stream_byte_identically)
{
    /* MLA attention, group-limited routing and a shared expert in the dense part; layer 0 dense */
    make_model("ds", "deepseek_v3", "--hidden 128 --layers 3 --heads 4 --experts 8 --top-k 2");
    cr_assert_eq(quantize("ds", "ref", NULL, NULL), 0);
    cr_assert_eq(quantize("ds", "g3", NULL, "--expert-group 3"), 0);
    cr_assert(same_dirs("ref", "g3"), "deepseek_v3 --expert-group 3 differs from the unstreamed run");
}

Test(stream, qwen3_next_gated_shared_expert_streams_byte_identically)
{
    /* Gated DeltaNet and full-attention layers, the sigmoid-gated shared expert */
    make_model("qn", "qwen3_next", "--hidden 128 --layers 4 --heads 4 --kv-heads 2 --experts 8 --top-k 2");
    cr_assert_eq(quantize("qn", "ref", NULL, NULL), 0);
    cr_assert_eq(quantize("qn", "g3", NULL, "--expert-group 3"), 0);
    cr_assert(same_dirs("ref", "g3"), "qwen3_next --expert-group 3 differs from the unstreamed run");
}

Test(stream, fp8_block_and_mxfp4_sources_stream_byte_identically)
{
    /* packed sources are dequantized per unit: an expert's weight and its scales land together */
    make_model("f8", "deepseek_v3", "--source-format fp8 --hidden 128 --layers 3 --heads 4 --experts 8 --top-k 2");
    make_model("mx", "qwen3_moe", "--source-format mxfp4 " SMALL_MOE);
    cr_assert_eq(quantize("f8", "f8ref", NULL, NULL), 0);
    cr_assert_eq(quantize("f8", "f8g3", NULL, "--expert-group 3"), 0);
    cr_assert(same_dirs("f8ref", "f8g3"), "FP8-block source: --expert-group 3 differs from the unstreamed run");
    cr_assert_eq(quantize("mx", "mxref", NULL, NULL), 0);
    cr_assert_eq(quantize("mx", "mxg3", NULL, "--expert-group 3"), 0);
    cr_assert(same_dirs("mxref", "mxg3"), "MXFP4 source: --expert-group 3 differs from the unstreamed run");
}

Test(stream, expert_group_on_a_model_without_experts_is_refused)
{
    make_model("ll", "llama", "--hidden 128 --layers 2 --heads 4");
    cr_assert_neq(quantize("ll", "out", NULL, "--expert-group 2"), 0);
    cr_assert(stderr_has("has no routed experts"), "the refusal should say why");
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* peak_rss_bytes of the run's JSON summary: the kernel's high-water mark (VmHWM) read by the run
 * at its end, before exit.  (lwq links no CUDA library; the CUDA module is loaded only by
 * --device cuda, or auto where a driver is present.) */
static long long json_peak(const char *log)
{
    char cmd[512], out[64];
    snprintf(cmd, sizeof cmd, "grep -o '\"peak_rss_bytes\":[0-9]*' %s | tail -1 | tr -dc 0-9", log);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    if (!fgets(out, sizeof out, f))
        out[0] = 0;
    pclose(f);
    return atoll(out);
}

/* The "process" term of `lwq plan`, in bytes. */
static double plan_process(const char *model)
{
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd, "%s plan %s/%s " QARGS " 2>&1 | sed -n 's/.*= process \\([0-9.]*\\) GB.*/\\1/p'", lwqt_bin(),
             g_tmp, model);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(out, sizeof out, f), "lwq plan printed no process term");
    pclose(f);
    return atof(out) * 1e9;
}

static long long dir_layer_bytes(const char *model)
{
    char cmd[512], out[64];
    /* the synthetic model is one shard: its bytes / layers bound a layer from below well enough;
     * the plan's "largest layer" line is exact */
    snprintf(cmd, sizeof cmd, "%s plan %s/%s " QARGS " 2>&1 | sed -n 's/.*largest layer [0-9]* holds \\([0-9.]*\\) GB.*/\\1/p'",
             lwqt_bin(), g_tmp, model);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(out, sizeof out, f));
    pclose(f);
    return (long long)(atof(out) * 1e9);
}

Test(stream, budget_a_quarter_of_a_layer_streams_within_it)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip("peak RSS under AddressSanitizer (shadow memory, quarantine) says nothing about the engine's budget");
#endif
    /* a layer of ~100 MB: 128 experts of 0.8 MB */
    make_model("big", "qwen3_moe", "--hidden 256 --moe-intermediate 512 --layers 2 --heads 4 --kv-heads 2 --experts 128 "
                                   "--top-k 4");
    cr_assert_eq(quantize("big", "ref", NULL, NULL), 0);
    double proc = plan_process("big");
    long long layer = dir_layer_bytes("big");
    cr_assert(proc > 0 && layer > 0);
    /* working budgets above the process floor, each at most a quarter of a layer */
    static const double work_mb[] = {12, 18, 24};
    int groups_seen[3] = {0};
    for (int i = 0; i < 3; i++) {
        double budget = proc + work_mb[i] * 1e6;
        cr_assert(layer >= 4 * (long long)(work_mb[i] * 1e6), "the layer (%lld B) must be >= 4x the budget above the "
                  "process (%.0f MB)", layer, work_mb[i]);
        char extra[256], name[16], log[PATH_MAX];
        snprintf(name, sizeof name, "b%d", i);
        snprintf(log, sizeof log, "%s/b%d.json", g_tmp, i);
        snprintf(extra, sizeof extra, "--max-cpu-memory-gb %.6f --log-json %s", budget / 1e9, log);
        cr_assert_eq(lwqt_sh("%s quantize %s/big -o %s/%s --calib-size 6 --calib-seq 24 --batch-size 4 %s 2>>%s/stderr.txt",
                             lwqt_bin(), g_tmp, g_tmp, name, extra, g_tmp), 0, "budget %.1f MB: the run failed", budget / 1e6);
        cr_assert(same_dirs("ref", name), "budget %.1f MB: output differs from the unconstrained run", budget / 1e6);
        long long peak = json_peak(log);
        cr_assert(peak > 0, "no peak_rss_bytes in %s", log);
        cr_assert(peak <= (long long)(budget * 1.10), "budget %.1f MB: peak RSS %.1f MB is over the budget + 10%%",
                  budget / 1e6, (double)peak / 1e6);
        char cmd[512], g[32] = "";
        snprintf(cmd, sizeof cmd, "grep -o 'units of [0-9]* experts' %s/stderr.txt | tail -1 | tr -dc 0-9", g_tmp);
        FILE *f = popen(cmd, "r");
        cr_assert_not_null(f);
        if (!fgets(g, sizeof g, f))
            g[0] = 0;
        pclose(f);
        groups_seen[i] = atoi(g);
        cr_assert(groups_seen[i] > 0 && groups_seen[i] < 128, "budget %.1f MB did not stream (group %d)",
                  budget / 1e6, groups_seen[i]);
    }
    cr_assert(groups_seen[0] != groups_seen[1] && groups_seen[1] != groups_seen[2] && groups_seen[0] != groups_seen[2],
              "three budgets should give three group sizes, got %d %d %d", groups_seen[0], groups_seen[1],
              groups_seen[2]);
}

Test(stream, budget_below_dense_part_plus_one_expert_is_refused_before_reading)
{
    make_model("big", "qwen3_moe", "--hidden 256 --moe-intermediate 512 --layers 2 --heads 4 --kv-heads 2 --experts 64 "
                                   "--top-k 4");
    double proc = plan_process("big");
    char extra[64];
    snprintf(extra, sizeof extra, "--max-cpu-memory-gb %.6f", (proc + 0.5e6) / 1e9);
    cr_assert_neq(quantize("big", "out", NULL, extra), 0);
    cr_assert(stderr_has("streaming experts one at a time still needs"), "the refusal should give the minimum");
    cr_assert(stderr_has("give at least --max-cpu-memory-gb"));
    struct stat sb;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/out", g_tmp);
    cr_assert_neq(stat(p, &sb), 0, "nothing may be written when the budget is refused");
}

Test(stream, expert_group_too_large_for_the_budget_is_refused)
{
    make_model("big", "qwen3_moe", "--hidden 256 --moe-intermediate 512 --layers 2 --heads 4 --kv-heads 2 --experts 64 "
                                   "--top-k 4");
    double proc = plan_process("big");
    char extra[96];
    snprintf(extra, sizeof extra, "--max-cpu-memory-gb %.6f --expert-group 64", (proc + 12e6) / 1e9);
    cr_assert_neq(quantize("big", "out", NULL, extra), 0);
    cr_assert(stderr_has("lower --expert-group"), "the refusal should point at the group size");
}

/* ---- resume ------------------------------------------------------------------------------------ */

Test(stream, sigkill_inside_a_streamed_layer_resumes_byte_identical)
{
    make_model("m", "qwen3_moe", SMALL_MOE);
    cr_assert_eq(quantize("m", "ref", NULL, NULL), 0);
    /* Find mutating steps that belong to a streamed layer: in fail mode the first failing step
     * names its file, and the expert spill file (model-layer-N.spill) is written only while a
     * streamed layer is in flight. */
    int spill_steps[64], ns = 0, completed = 0;
    for (int k = 0; k < 400 && !completed && ns < 64; k += 4) {
        char env[96];
        lwqt_sh("rm -rf %s/f %s/f.layerwise_resume %s/stderr.txt", g_tmp, g_tmp, g_tmp);
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=fail", k);
        if (quantize("m", "f", env, "--expert-group 3") == 0)
            completed = 1;
        else if (stderr_has(".spill"))
            spill_steps[ns++] = k;
    }
    cr_assert(completed, "the streamed run never completed");
    cr_assert(ns >= 4, "only %d crash points inside streamed layers", ns);
    /* SIGKILL at the first, two middle and the last of them, then the identical command */
    int pick[4] = {spill_steps[0], spill_steps[ns / 3], spill_steps[2 * ns / 3], spill_steps[ns - 1]};
    for (int i = 0; i < 4; i++) {
        char env[96];
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", pick[i]);
        cr_assert_eq(quantize("m", "out", env, "--expert-group 3"), 128 + SIGKILL, "no kill at step %d", pick[i]);
        cr_assert_eq(quantize("m", "out", NULL, "--expert-group 3"), 0, "resume after a kill at step %d failed",
                     pick[i]);
        cr_assert(same_dirs("ref", "out"), "output after a kill at step %d differs from the uninterrupted run",
                  pick[i]);
    }
}
