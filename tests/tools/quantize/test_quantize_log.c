/* tests/tools/quantize/test_quantize_log.c — what `lwq quantize --log-json` reports, the numbers that
 * perf/bench_e2e.sh builds its overlap, memory and throughput report from: one line per layer
 * (bytes read, timings, RSS, device memory) and a summary; and --dry-read, which reads every
 * layer through the I/O path and computes nothing. */
#include <criterion/criterion.h>
#include <string.h>

#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(quantize_log, .init = lwqt_setup, .fini = lwqt_teardown);

#define LAYERS 3

static const char *make_model(void)
{
    const char *dir = lwqt_path("m");
    const char *a[] = {"mkmodel", dir, "--arch", "qwen3_moe", "--hidden", "256", "--layers", "3", "--experts", "4",
                       "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "mkmodel exit %d: %s", rc, err);
    free(err);
    return dir;
}

/* Reads the JSON log: layer lines into layer[] (by index), the summary into *summary. */
static int read_log(const char *path, cJSON **layer, cJSON **summary)
{
    char *s = lwqt_slurp(path);
    int nlayer = 0;
    *summary = NULL;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "not JSON: %.200s", line);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
        cr_assert_not_null(ev, "no event: %.200s", line);
        if (!strcmp(ev, "layer")) {
            int L = cJSON_GetObjectItem(j, "layer")->valueint;
            cr_assert(L >= 0 && L < LAYERS && !layer[L], "layer %d unexpected or twice", L);
            layer[L] = j;
            nlayer++;
        } else {
            cr_assert_str_eq(ev, "summary");
            cr_assert_null(*summary, "two summaries");
            *summary = j;
        }
    }
    free(s);
    cr_assert_not_null(*summary, "no summary line");
    return nlayer;
}

static double num(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(j, k);
    cr_assert(cJSON_IsNumber(v), "%s missing or not a number", k);
    return v->valuedouble;
}

/* --dry-read with --log-json used to crash in the summary (no manifest exists in that mode). */
Test(quantize_log, dry_read_reads_every_layer_and_writes_nothing)
{
    const char *m = make_model();
    char log[512];
    snprintf(log, sizeof log, "%s", lwqt_path("dry.jsonl"));
    const char *a[] = {"quantize", m, "--dry-read", "--calib-size", "2", "--calib-seq", "16", "--log-json", log,
                       "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    free(err);
    cJSON *layer[LAYERS] = {0}, *sum;
    cr_assert_eq(read_log(log, layer, &sum), 0, "a dry read computes no layer");
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(m, &c, &e), 0, "%s", e.msg);
    uint64_t want = 0;
    for (int L = 0; L < c.cfg.num_hidden_layers; L++)
        want += c.layers[L].bytes;
    cr_assert_eq((uint64_t)num(sum, "bytes_read"), want, "every decoder layer's bytes are read once");
    cr_assert_eq((int)num(sum, "layers"), LAYERS);
    cr_assert_eq(num(sum, "output_layer_bytes"), 0.0);
    cr_assert(num(sum, "peak_rss_bytes") > 0);
    cr_assert(num(sum, "loop_s") > 0 && num(sum, "loop_s") <= num(sum, "wall_s"), "the depth loop is part of the wall");
    lwq_ckpt_free(&c);
    cJSON_Delete(sum);
    struct stat st;
    cr_assert_neq(stat(lwqt_path("m.layerwise_resume"), &st), 0, "a dry read leaves no resume state");
}

Test(quantize_log, one_line_per_layer_with_bytes_timings_and_memory)
{
    const char *m = make_model();
    char log[512], out[512];
    snprintf(log, sizeof log, "%s", lwqt_path("q.jsonl"));
    snprintf(out, sizeof out, "%s", lwqt_path("q"));
    const char *a[] = {"quantize", m, "-o", out, "--device", "cpu", "--calib-size", "2", "--calib-seq", "16",
                       "--log-json", log, "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    free(err);
    cJSON *layer[LAYERS] = {0}, *sum;
    cr_assert_eq(read_log(log, layer, &sum), LAYERS);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(m, &c, &e), 0, "%s", e.msg);
    double peak = num(sum, "peak_rss_bytes"), read = 0;
    for (int L = 0; L < LAYERS; L++) {
        cr_assert_eq((uint64_t)num(layer[L], "bytes_read"), c.layers[L].bytes, "layer %d", L);
        read += num(layer[L], "bytes_read");
        cr_assert(num(layer[L], "forward_s") > 0 && num(layer[L], "quantize_s") > 0 && num(layer[L], "write_s") > 0,
                  "layer %d: every stage took some time", L);
        cr_assert(num(layer[L], "read_wait_s") >= 0);
        double rss = num(layer[L], "rss_bytes");
        cr_assert(rss > 0 && rss <= peak, "layer %d: RSS %.0f, peak %.0f", L, rss, peak);
        cr_assert_eq(num(layer[L], "gpu_bytes"), 0.0, "the CPU backend uses no device memory");
        cJSON_Delete(layer[L]);
    }
    cr_assert_eq(num(sum, "bytes_read"), read);
    cr_assert_eq(num(sum, "peak_gpu_bytes"), 0.0);
    cr_assert(num(sum, "loop_s") > 0 && num(sum, "setup_s") > 0 &&
              num(sum, "setup_s") + num(sum, "loop_s") <= num(sum, "wall_s"), "set-up and loop are parts of the wall");
    cr_assert(num(sum, "output_layer_bytes") > 0);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(sum, "backend")), "cpu");
    lwq_ckpt_free(&c);
    cJSON_Delete(sum);
}
