/* nemotron_h (Mamba2, latent MoE) and kimi_linear (KDA, MLA): SIGKILL at a deterministic sample of the durable-write steps (the first layers' every step, every 7th, the tail's every step) then resume writes the uninterrupted run's bytes; kimi_linear and nemotron_h (plain and latent) stream their experts byte-identically, and a kill inside a streamed nemotron_h layer resumes to the same bytes. */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "tests/helpers/fixtures.h"

static char g_tmp[256];

static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-hybrid-runs");
}

static void teardown(void)
{
    lwqt_rmtree(g_tmp);
}

TestSuite(hybrid, .init = setup, .fini = teardown, .timeout = 300);

/* tests/data/peers: the transformers-written tiny checkpoints of the peers goldens */
static const char *peers_data(void)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tests/data/peers", lwqt_source_dir());
    return path;
}

static int quantize(const char *src, const char *out, const char *env, const char *args)
{
    const char *d = peers_data();
    return lwqt_sh("%s %s quantize '%s/src/%s' -o %s/%s --calib '%s/calib.jsonl' --calib-size 6 --calib-seq 24 "
                   "--batch-size 4 --quiet %s 2>>%s/stderr.txt",
                   env ? env : "", lwqt_bin(), d, src, g_tmp, out, d, args, g_tmp);
}

static int same_dirs(const char *a, const char *b)
{
    return lwqt_sh("diff -r %s/%s %s/%s >/dev/null 2>&1", g_tmp, a, g_tmp, b) == 0;
}

/* Kill the run at durable-write step k and resume with the same command, which must write the
 * uninterrupted run's bytes.  Kill the crashed run at k; 1 if it was killed, 0 if it completed
 * (k is past the last step). */
static int crash_at(const char *src, const char *args, int k)
{
    lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
    char env[64];
    snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", k);
    int rc = quantize(src, "out", env, args);
    if (rc != 0) {
        cr_assert_eq(rc, 128 + SIGKILL, "%s step %d: exit %d, expected SIGKILL", src, k, rc);
        cr_assert_eq(quantize(src, "out", NULL, args), 0, "%s: resume after a crash at step %d failed", src, k);
    }
    cr_assert(same_dirs("ref", "out"), "%s: output after a crash at step %d differs from the uninterrupted run", src, k);
    return rc != 0;
}

/* A deterministic sample of the durable-write steps (the whole run has S of them): every step of
 * the first DENSE (the first layers' shard, boundary and manifest, in every order of the protocol),
 * then every STRIDE-th (coprime with a layer's step count, so the sample moves through the
 * protocol's phases from layer to layer), and once a run completes at k > S, every step between
 * the last sampled one and k (the tail: embedding, lm_head, index, config, the final renames). */
#define DENSE 12
#define STRIDE 7
static void crash_at_sampled_steps(const char *src, const char *args)
{
    cr_assert_eq(quantize(src, "ref", NULL, args), 0, "the uninterrupted run of %s failed", src);
    int killed = 0, k = 0, last = -1;
    for (; k < 600; k = k < DENSE ? k + 1 : k + STRIDE) {
        if (!crash_at(src, args, k))
            break;
        killed++;
        last = k;
    }
    cr_assert_lt(k, 600, "%s: a run with a crash at step %d still crashed", src, k);
    for (int j = last + 1; j < k; j++) /* the steps after the last sampled one: killed, until the end */
        if (crash_at(src, args, j))
            killed++, last = j;
        else
            break;
    /* steps 0..last are the run's S: more than 30 (as when every step was killed) */
    cr_assert(last + 1 > 30 && killed >= DENSE + (last + 1 - DENSE) / STRIDE,
              "%s: %d steps, %d crash points exercised", src, last + 1, killed);
}

Test(hybrid, nemotron_h_latent_crash_at_sampled_write_steps_resumes_byte_identical)
{
    crash_at_sampled_steps("nemotron_h_latent-bf16", "--qformat nvfp4");
}

Test(hybrid, nemotron_h_preset_crash_at_sampled_write_steps_resumes_byte_identical)
{
    crash_at_sampled_steps("nemotron_h-f32", "--qformat mamba_moe_nvfp4_conservative --algo mse");
}

Test(hybrid, kimi_linear_crash_at_sampled_write_steps_resumes_byte_identical)
{
    crash_at_sampled_steps("kimi_linear-bf16", "--qformat nvfp4 --algo mse --fp8-scale-sweep");
}

/* Each of the n checkpoints under --qformat nvfp4: every expert group size, one expert to all 8,
 * writes the unstreamed bytes. */
static void streams_byte_identically(const char *const *src, size_t n)
{
    static const char *groups[] = {"1", "3", "8"};
    for (size_t s = 0; s < n; s++) {
        lwqt_sh("rm -rf %s/ref %s/ref.layerwise_resume", g_tmp, g_tmp);
        cr_assert_eq(quantize(src[s], "ref", NULL, "--qformat nvfp4"), 0, "%s unstreamed failed", src[s]);
        for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
            char out[32], args[64];
            snprintf(out, sizeof out, "g%s-%zu", groups[i], s);
            snprintf(args, sizeof args, "--qformat nvfp4 --expert-group %s", groups[i]);
            cr_assert_eq(quantize(src[s], out, NULL, args), 0, "%s --expert-group %s failed", src[s], groups[i]);
            cr_assert(same_dirs("ref", out), "%s --expert-group %s: other bytes than unstreamed", src[s], groups[i]);
        }
    }
}

/* kimi_linear (KDA and MLA layers, DeepSeek-style routing with shared experts), BF16 and F32. */
Test(hybrid, kimi_linear_streams_its_experts_byte_identically)
{
    static const char *const src[] = {"kimi_linear-bf16", "kimi_linear-f32"};
    streams_byte_identically(src, sizeof src / sizeof src[0]);
}

/* nemotron_h, plain and latent (its MoE block is the whole layer: the norm, DeepSeek-V3 routing,
 * the shared expert and fc1_latent_proj in the dense unit, ReLU^2 experts summed in float32 over
 * the groups, fc2_latent_proj in its own last unit), BF16 and F32.  Refused by name before this
 * existed. */
Test(hybrid, nemotron_h_streams_its_experts_byte_identically)
{
    static const char *const src[] = {"nemotron_h-bf16", "nemotron_h-f32", "nemotron_h_latent-bf16",
                                      "nemotron_h_latent-f32"};
    streams_byte_identically(src, sizeof src / sizeof src[0]);
}

/* The preset with mse weights (every linear's statistics, fc2_latent_proj's on the rounded sum) */
Test(hybrid, nemotron_h_latent_preset_streams_byte_identically)
{
    const char *a = "--qformat mamba_moe_nvfp4_conservative --algo mse";
    cr_assert_eq(quantize("nemotron_h_latent-f32", "ref", NULL, a), 0);
    cr_assert_eq(quantize("nemotron_h_latent-f32", "g3", NULL, "--qformat mamba_moe_nvfp4_conservative --algo mse "
                                                               "--expert-group 3"), 0);
    cr_assert(same_dirs("ref", "g3"), "mamba_moe_nvfp4_conservative --expert-group 3: other bytes than unstreamed");
}

/* SIGKILL while a streamed nemotron_h_latent layer is in flight (its expert groups computed and
 * spilled, its shard being written), then the same command: the unstreamed bytes.  The kill
 * points are every 5th write step; which of them fall inside a streamed layer depends on the
 * writer thread's timing (the step counter is global; the spill file is unlinked at creation), so
 * the resume manifest says (the next layer to commit is a MoE layer), and at least two must. */
Test(hybrid, nemotron_h_latent_sigkill_inside_a_streamed_layer_resumes_byte_identical)
{
    const char *src = "nemotron_h_latent-bf16", *a = "--qformat nvfp4 --expert-group 3";
    cr_assert_eq(quantize(src, "ref", NULL, "--qformat nvfp4"), 0);
    int inside = 0, completed = 0;
    for (int k = 0; k < 400 && !completed; k += 5) {
        lwqt_sh("rm -rf %s/out %s/out.layerwise_resume", g_tmp, g_tmp);
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", k);
        int rc = quantize(src, "out", env, a);
        if (rc == 0) {
            completed = 1;
        } else {
            cr_assert_eq(rc, 128 + SIGKILL, "step %d: exit %d, expected SIGKILL", k, rc);
            /* the manifest's committed count is the next layer: 1 and 3 are the MoE layers (ME*E) */
            inside += lwqt_sh("grep -Eq '\"committed\":[[:space:]]*(1|3),' %s/out.layerwise_resume/manifest.json",
                              g_tmp) == 0;
            cr_assert_eq(quantize(src, "out", NULL, a), 0, "resume after a kill at step %d failed", k);
        }
        cr_assert(same_dirs("ref", "out"), "output after a kill at step %d differs from the unstreamed run", k);
    }
    cr_assert(completed, "the streamed run never completed");
    cr_assert_geq(inside, 2, "only %d kills inside a streamed layer", inside);
}
