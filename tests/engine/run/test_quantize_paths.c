/* The layerwise run against the whole-model reference path, and batching (issue 6, "Must show").
 *
 * Layerwise (depth outside, data inside) and --whole-model (data outside, depth inside, every
 * layer resident) must write the same bytes, for every preset and with --qdq-next, where layer
 * L+1 calibrates on the dequantized output of layer L.  Batching: the same samples in batches
 * of 1, 3 or 10 sequences (left padding) give the same tensors; with --calib-include-padding
 * the padded rows count, so scales can only grow, and do grow when padding exists. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/model/fwd_fixture.h"
#include "tests/helpers/check/qcheck.h"

#define MOE "agilerl-tiny-qwen3-moe"
#define LLAMA3 "mlxd-tiny-llama3-bf16"
#define TWO_SHARD "quatricmorph-tiny-llama-2shard"

static const int64_t LENS[10] = {32, 7, 19, 32, 3, 25, 11, 32, 16, 28};

static char g_dir[1024], g_calib[600];

/* Fixture path and a calibration file of ten samples for it. */
static void prepare(const char *fixture, qc_calib *c)
{
    fwd_fixture_dir(fixture, g_dir, sizeof g_dir);
    snprintf(g_calib, sizeof g_calib, "%s", lwqt_path("calib.jsonl"));
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(g_dir, &ck, &e), 0, "%s", e.msg);
    qc_calib_make(c, 10, LENS, ck.cfg.vocab_size, 11);
    lwq_ckpt_free(&ck);
    qc_calib_write(c, g_calib);
}

/* lwq quantize <fixture> -o <tmp>/<out> with the calibration file and `extra` options. */
static const char *quantize(const char *out, const char *const *extra)
{
    static char o[8][600];
    static int k;
    char *p = o[k++ & 7];
    snprintf(p, 600, "%s", lwqt_path(out));
    const char *args[48] = {"quantize", g_dir, "-o", p, "--calib", g_calib, "--calib-size", "10", "--calib-seq",
                            "32", "--device", "cpu", "--quiet"};
    int n = 13;
    for (int i = 0; extra[i]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    int rc = lwqt_run(args);
    if (rc != 0) {
        char *err = lwqt_err();
        cr_assert_fail("lwq quantize -o %s exited %d: %s", out, rc, err);
    }
    return p;
}

static int diff(const char *a, const char *b)
{
    const char *args[] = {"diff", a, b, "--max", "3", NULL};
    return lwqt_run(args);
}

/* Tensors and configs only: a shard's __metadata__ names the run, batching included. */
static int diff_tensors(const char *a, const char *b)
{
    const char *args[] = {"diff", a, b, "--max", "3", "--no-metadata", NULL};
    return lwqt_run(args);
}

static void assert_identical(const char *a, const char *b)
{
    int rc = diff(a, b);
    if (rc != 0) {
        char *out = lwqt_out();
        cr_assert_fail("lwq diff %s %s exited %d: %s", a, b, rc, out);
    }
    qc_assert_same_dirs(a, b);
}

/* Four runs: layerwise / whole-model, each without and with --qdq-next. */
static void paths(const char *fixture, const char *preset, const char *algo)
{
    qc_calib c;
    prepare(fixture, &c);
    const char *base[] = {"--qformat", preset, "--kv-cache", "fp8", "--batch-size", "4", "--algo", algo, NULL};
    const char *lw = quantize("lw", base);
    const char *wm_args[] = {"--qformat", preset, "--kv-cache", "fp8", "--batch-size", "4", "--algo", algo,
                             "--whole-model", NULL};
    const char *wm = quantize("wm", wm_args);
    const char *lq_args[] = {"--qformat", preset, "--kv-cache", "fp8", "--batch-size", "4", "--algo", algo,
                             "--qdq-next", NULL};
    const char *lq = quantize("lq", lq_args);
    const char *wq_args[] = {"--qformat", preset, "--kv-cache", "fp8", "--batch-size", "4", "--algo", algo,
                             "--qdq-next", "--whole-model", NULL};
    const char *wq = quantize("wq", wq_args);
    assert_identical(lw, wm);
    assert_identical(lq, wq);
    /* --qdq-next really changed what the later layers saw */
    cr_assert_eq(diff(lw, lq), 1, "--qdq-next gave the same output as a plain run");
    qc_calib_free(&c);
}

#define PATHS(id, fixture, preset, algo)                                                               \
    Test(quantize_paths, id, .init = lwqt_setup, .fini = lwqt_teardown) { paths(fixture, preset, algo); }

PATHS(moe_nvfp4, MOE, "nvfp4", "max")
PATHS(moe_nvfp4_experts_only, MOE, "nvfp4_experts_only", "max")
PATHS(moe_nvfp4_mlp_only, MOE, "nvfp4_mlp_only", "max")
PATHS(moe_fp8, MOE, "fp8", "max")
PATHS(moe_nvfp4_experts_fp8_attn, MOE, "nvfp4_experts-fp8_attn", "max")
PATHS(moe_nvfp4_mse, MOE, "nvfp4", "mse")
PATHS(moe_nvfp4_local_hessian, MOE, "nvfp4", "local_hessian")
PATHS(llama3_nvfp4, LLAMA3, "nvfp4", "max")
PATHS(llama3_nvfp4_mlp_only, LLAMA3, "nvfp4_mlp_only", "max")
PATHS(llama3_fp8, LLAMA3, "fp8", "max")
PATHS(llama3_nvfp4_experts_fp8_attn, LLAMA3, "nvfp4_experts-fp8_attn", "max")
PATHS(two_shard_nvfp4_local_hessian, TWO_SHARD, "nvfp4", "local_hessian")
PATHS(two_shard_fp8_mse, TWO_SHARD, "fp8", "mse")

/* ---- batching ------------------------------------------------------------------------------------ */

static void batch_sizes_agree(const char *fixture)
{
    qc_calib c;
    prepare(fixture, &c);
    const char *a1[] = {"--kv-cache", "fp8", "--batch-size", "1", NULL};
    const char *a3[] = {"--kv-cache", "fp8", "--batch-size", "3", NULL};
    const char *a10[] = {"--kv-cache", "fp8", "--batch-size", "10", NULL};
    const char *o1 = quantize("b1", a1), *o3 = quantize("b3", a3), *o10 = quantize("b10", a10);
    cr_assert_eq(diff_tensors(o1, o3), 0, "batch 1 vs 3: %s", lwqt_out());
    cr_assert_eq(diff_tensors(o1, o10), 0, "batch 1 vs 10: %s", lwqt_out());
    /* and the padded run matches statistics taken without any padding */
    qc_ref ref;
    qc_ref_compute(&ref, g_dir, &c, 1, 0, 0);
    qc_check_output(g_dir, o10, "nvfp4", QC_KV_FP8, &ref);
    qc_ref_free(&ref);
    qc_calib_free(&c);
}

Test(quantize_batching, moe_batch_sizes_give_identical_scales, .init = lwqt_setup, .fini = lwqt_teardown)
{
    batch_sizes_agree(MOE);
}
Test(quantize_batching, llama3_batch_sizes_give_identical_scales, .init = lwqt_setup, .fini = lwqt_teardown)
{
    batch_sizes_agree(LLAMA3);
}
Test(quantize_batching, two_shard_batch_sizes_give_identical_scales, .init = lwqt_setup, .fini = lwqt_teardown)
{
    batch_sizes_agree(TWO_SHARD);
}

static int is_calibrated_scale(const char *name)
{
    size_t n = strlen(name);
    return (n > 12 && !strcmp(name + n - 12, ".input_scale")) || (n > 8 && !strcmp(name + n - 8, ".k_scale")) ||
           (n > 8 && !strcmp(name + n - 8, ".v_scale"));
}

/* The fixture has no tokenizer, so padded positions hold id 0, as the reference pads. */
Test(quantize_batching, include_padding_counts_padded_rows, .init = lwqt_setup, .fini = lwqt_teardown)
{
    qc_calib c;
    prepare(TWO_SHARD, &c);
    const char *a1[] = {"--kv-cache", "fp8", "--batch-size", "1", NULL};
    const char *a4[] = {"--kv-cache", "fp8", "--batch-size", "4", "--calib-include-padding", NULL};
    const char *a1p[] = {"--kv-cache", "fp8", "--batch-size", "1", "--calib-include-padding", NULL};
    const char *ex = quantize("ex", a1), *in = quantize("in", a4), *in1 = quantize("in1", a1p);
    cr_assert_eq(diff_tensors(ex, in1), 0, "without padding the option must change nothing: %s", lwqt_out());
    qc_out a, b;
    qc_out_open(&a, ex);
    qc_out_open(&b, in);
    int grew = 0;
    for (int f = 0; f < a.nfiles; f++)
        for (int i = 0; i < a.files[f].n; i++) {
            const lwq_st_entry *t = &a.files[f].entries[i];
            const lwq_st_entry *u = qc_out_find(&b, t->name, NULL);
            cr_assert_not_null(u, "%s missing with --calib-include-padding", t->name);
            void *x = qc_out_read(&a, t->name, t->dtype, -1, NULL), *y = qc_out_read(&b, t->name, t->dtype, -1, NULL);
            if (is_calibrated_scale(t->name)) {
                float sx = *(float *)x, sy = *(float *)y;
                cr_assert_geq(sy, sx, "%s: %.9g with padded rows counted, %.9g without", t->name, sy, sx);
                grew += sy > sx;
            } else {
                cr_assert(memcmp(x, y, t->end - t->begin) == 0, "%s changed with --calib-include-padding", t->name);
            }
            free(x);
            free(y);
        }
    cr_assert_gt(grew, 0, "no scale saw the padded rows");
    qc_ref ref;
    qc_ref_compute(&ref, g_dir, &c, 4, 1, 0);
    qc_check_output(g_dir, in, "nvfp4", QC_KV_FP8, &ref);
    qc_ref_free(&ref);
    qc_out_free(&a);
    qc_out_free(&b);
    qc_calib_free(&c);
}
