/* Peak memory does not grow with depth (issue 6, "Must show"): a 4-layer and a 16-layer synthetic
 * llama of the same width (hidden 1024, ~24 MB of BF16 per layer, so one layer's buffers
 * dominate the process baseline), by the run's own JSON summary (peak_rss_bytes = VmHWM).
 *
 * What the peak is made of: the ring (K slots of one layer), and the quantized output of at most
 * two layers, the one the writer is still making durable and the one being quantized (boundary
 * alternation bounds it: the engine computes into the boundary buffer whose save follows the
 * previous shard), which the plan counts as writer_bytes.  Whether a run ever has that second
 * layer's output alive is timing: the writer has to lag a layer's fsync behind the next layer's
 * quantization.  A 16-layer run has 15 chances, a 4-layer run 3, so with the default ring the
 * two peaks differ by a layer's output (~7 MB here, 78.5 vs 85.8 MB) on a loaded machine, which
 * once was more than 10% (76.2 vs 86.2 MB) and made the test flaky.  So the comparison of two
 * depths runs with --prefetch 1, where a layer's slot comes back only once its shard is durable
 * and exactly one layer is held at any time, whatever the timing; the default ring is held
 * against the bound the plan computes from one layer, the same for both depths. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "tests/helpers/check/qcheck.h"

static const int64_t LENS[8] = {32, 32, 32, 32, 32, 32, 32, 32};

/* Summary of a quantize run of a fresh mkmodel llama with `layers` layers. */
static void run_depth_w(const char *layers, const char *hidden, const char *calib, const char *prefetch, double *peak,
                        double *source, double *plan)
{
    char model[600], out[610], log[700];
    snprintf(model, sizeof model, "%s", lwqt_path(layers));
    snprintf(out, sizeof out, "%s.q", model);
    snprintf(log, sizeof log, "%s.jsonl", out);
    if (strcmp(hidden, "1024"))
        strcat(model, "w");
    snprintf(out, sizeof out, "%s.q", model);
    snprintf(log, sizeof log, "%s.jsonl", out);
    const char *mk[] = {"mkmodel", model, "--arch", "llama", "--hidden", hidden, "--layers", layers, "--vocab", "512",
                        "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel --layers %s failed", layers);
    const char *q[] = {"quantize", model, "-o", out, "--calib", calib, "--calib-size", "8", "--calib-seq", "32",
                       "--log-json", log, "--device", "cpu", "--quiet", "--prefetch", prefetch, NULL};
    int rc = lwqt_run(q);
    if (rc != 0)
        cr_assert_fail("lwq quantize (%s layers) exited %d: %s", layers, rc, lwqt_err());
    char *s = lwqt_slurp(log);
    char *line = strstr(s, "{\"event\":\"summary\"");
    cr_assert_not_null(line, "%s has no summary event", log);
    cJSON *sum = cJSON_Parse(line);
    cr_assert_not_null(sum);
    cJSON *p = cJSON_GetObjectItem(sum, "peak_rss_bytes"), *b = cJSON_GetObjectItem(sum, "source_bytes"),
          *h = cJSON_GetObjectItem(sum, "plan_host_peak_bytes");
    cr_assert(cJSON_IsNumber(p) && p->valuedouble > 0, "summary lacks peak_rss_bytes");
    cr_assert(cJSON_IsNumber(b) && b->valuedouble > 0, "summary lacks source_bytes");
    cr_assert(cJSON_IsNumber(h) && h->valuedouble > 0, "summary lacks plan_host_peak_bytes");
    cr_assert_eq(cJSON_GetObjectItem(sum, "layers")->valueint, atoi(layers));
    *peak = p->valuedouble;
    *source = b->valuedouble;
    *plan = h->valuedouble;
    cJSON_Delete(sum);
    free(s);
    /* the big model's files are not needed past this point */
    char rm[700];
    snprintf(rm, sizeof rm, "%s/model.safetensors", model);
    unlink(rm);
}

static void run_depth(const char *layers, const char *calib, const char *prefetch, double *peak, double *source,
                      double *plan)
{
    run_depth_w(layers, "1024", calib, prefetch, peak, source, plan);
}

static void write_calib(char *calib, size_t n)
{
    snprintf(calib, n, "%s", lwqt_path("calib.jsonl"));
    qc_calib c;
    qc_calib_make(&c, 8, LENS, 256, 9);
    qc_calib_write(&c, calib);
    qc_calib_free(&c);
}

Test(quantize_memory, peak_rss_independent_of_depth, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 120)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip("peak RSS under AddressSanitizer (shadow memory, quarantine) says nothing about the engine");
#endif
    char calib[600];
    write_calib(calib, sizeof calib);
    double p4, s4, h4, p16, s16, h16;
    run_depth("4", calib, "1", &p4, &s4, &h4);
    run_depth("16", calib, "1", &p16, &s16, &h16);
    cr_assert_gt(s16, 3.5 * s4, "the 16-layer model is not 4x the 4-layer one (%.0f vs %.0f bytes)", s16, s4);
    /* one layer held at a time: the peaks are 53.0-53.6 MB under load here (1.2% apart at most),
     * and a leak of 300 KB a layer would part them by the 5% allowed */
    double hi = p4 > p16 ? p4 : p16, lo = p4 > p16 ? p16 : p4;
    cr_assert_leq(hi - lo, 0.05 * hi, "--prefetch 1: peak RSS %.1f MB with 4 layers, %.1f MB with 16: more than 5%% "
                  "apart", p4 / 1e6, p16 / 1e6);
    /* the process's own floor (shared libraries: with CUDA built in, cuBLAS alone maps ~200 MB),
     * measured on a one-layer model of width 64 */
    double pb, sb, hb;
    run_depth_w("1", "64", calib, "1", &pb, &sb, &hb);
    cr_assert_lt(p16 - pb, 0.5 * s16, "peak RSS %.1f MB above the %.1f MB process floor holds much of the %.1f MB "
                 "model", (p16 - pb) / 1e6, pb / 1e6, s16 / 1e6);
}

/* The default ring (2 slots, two layers' outputs at most at the writer): the peak of either depth
 * stays under the host peak the plan computes from the largest layer, which is the same number
 * for 4 and 16 layers. */
Test(quantize_memory, peak_rss_within_depth_independent_plan, .init = lwqt_setup, .fini = lwqt_teardown,
     .timeout = 120)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip("peak RSS under AddressSanitizer (shadow memory, quarantine) says nothing about the engine");
#endif
    char calib[600];
    write_calib(calib, sizeof calib);
    double p4, s4, h4, p16, s16, h16;
    run_depth("4", calib, "2", &p4, &s4, &h4);
    run_depth("16", calib, "2", &p16, &s16, &h16);
    cr_assert_eq(h4, h16, "the plan's host peak depends on depth: %.0f bytes for 4 layers, %.0f for 16", h4, h16);
    cr_assert_leq(p4, h4, "4 layers: peak RSS %.1f MB above the plan's %.1f MB", p4 / 1e6, h4 / 1e6);
    cr_assert_leq(p16, h16, "16 layers: peak RSS %.1f MB above the plan's %.1f MB", p16 / 1e6, h16 / 1e6);
    cr_assert_lt(h16, 0.5 * s16, "the plan's host peak %.1f MB holds much of the %.1f MB model", h16 / 1e6, s16 / 1e6);
}
