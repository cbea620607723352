/* lwq quantize writes the same bytes for any --batch-size, --threads and CPU kernel (issue 14); a run names its CPU path where the bytes depend on it.
 *
 * A qwen3_moe model from `lwq mkmodel` (no fixtures needed) is calibrated on seven samples of
 * different lengths (5..64 tokens), so batches are left-padded and every expert sees a different
 * set of tokens per batch size.  Every output file but calibration_report.json (which records the
 * batch size) must be byte-identical: shards, their metadata, the index and the configs. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/gemm/gemm_isa.h"
#include "tests/helpers/run.h"

static const int LENS[] = {13, 40, 5, 33, 21, 64, 9};

static void make_model(const char *dtype)
{
    const char *a[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_moe", "--hidden", "64", "--heads", "4",
                       "--kv-heads", "2", "--experts", "8", "--top-k", "2", "--layers", "2", "--dtype", dtype,
                       "--quiet", NULL};
    int rc = lwqt_run(a);
    cr_assert_eq(rc, 0, "mkmodel exited %d: %s", rc, lwqt_err());
    /* ids below 273: the tokenizer's vocabulary (mkmodel writes a byte-level BPE) */
    FILE *fp = fopen(lwqt_path("calib.jsonl"), "w");
    cr_assert_not_null(fp);
    unsigned s = 12345;
    for (size_t i = 0; i < sizeof LENS / sizeof LENS[0]; i++) {
        fprintf(fp, "{\"input_ids\": [");
        for (int t = 0; t < LENS[i]; t++) {
            s = s * 1103515245u + 12345u;
            fprintf(fp, "%s%u", t ? ", " : "", (s >> 8) % 273);
        }
        fprintf(fp, "]}\n");
    }
    fclose(fp);
}

/* lwq quantize m -o <out> --batch-size <bs> --threads <th>, with LWQ_CPU_KERNELS=<kern> if set. */
static void quantize(const char *out, const char *bs, const char *th, const char *kern)
{
    char m[512], o[512], c[512];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(o, sizeof o, "%s", lwqt_path(out));
    snprintf(c, sizeof c, "%s", lwqt_path("calib.jsonl"));
    const char *a[] = {"quantize", m, "-o", o, "--calib", c, "--calib-size", "7", "--calib-seq", "64",
                       "--batch-size", bs, "--threads", th, "--qformat", "nvfp4", "--kv-cache", "fp8",
                       "--device", "cpu", "--quiet", NULL};
    if (kern)
        setenv("LWQ_CPU_KERNELS", kern, 1);
    int rc = lwqt_run(a);
    unsetenv("LWQ_CPU_KERNELS");
    cr_assert_eq(rc, 0, "quantize --batch-size %s --threads %s exited %d: %s", bs, th, rc, lwqt_err());
}

static void assert_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    cr_assert_not_null(fa, "cannot open %s", a);
    cr_assert_not_null(fb, "%s has no counterpart %s", a, b);
    long off = 0;
    for (;;) {
        int x = fgetc(fa), y = fgetc(fb);
        cr_assert_eq(x, y, "%s and %s differ at byte %ld", a, b, off);
        if (x == EOF)
            break;
        off++;
    }
    fclose(fa);
    fclose(fb);
}

/* Every file of <tmp>/a but the calibration report is byte-identical in <tmp>/b. */
static void assert_same_output(const char *a, const char *b)
{
    char da[512], db[512];
    snprintf(da, sizeof da, "%s", lwqt_path(a));
    snprintf(db, sizeof db, "%s", lwqt_path(b));
    DIR *d = opendir(da);
    cr_assert_not_null(d, "cannot list %s", da);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "calibration_report.json"))
            continue;
        char fa[1024], fb[1024];
        snprintf(fa, sizeof fa, "%s/%s", da, de->d_name);
        snprintf(fb, sizeof fb, "%s/%s", db, de->d_name);
        assert_same_file(fa, fb);
        files++;
    }
    closedir(d);
    cr_assert_geq(files, 5, "%s holds only %d files", da, files);
}

static void batch_sizes(const char *dtype)
{
    make_model(dtype);
    quantize("b1", "1", "2", NULL);
    quantize("b2", "2", "2", NULL);
    quantize("b3", "3", "2", NULL);
    assert_same_output("b1", "b2");
    assert_same_output("b1", "b3");
}

TestSuite(batch_invariance_e2e, .init = lwqt_setup, .fini = lwqt_teardown);

Test(batch_invariance_e2e, bf16_qwen3_moe_batch_sizes_1_2_3_write_identical_bytes) { batch_sizes("bf16"); }
Test(batch_invariance_e2e, f32_qwen3_moe_batch_sizes_1_2_3_write_identical_bytes) { batch_sizes("f32"); }
Test(batch_invariance_e2e, f16_qwen3_moe_batch_sizes_1_2_3_write_identical_bytes) { batch_sizes("f16"); }

Test(batch_invariance_e2e, thread_count_does_not_change_the_bytes)
{
    make_model("bf16");
    quantize("t1", "3", "1", NULL);
    quantize("t2", "3", "2", NULL);
    quantize("t3", "3", "3", NULL);
    assert_same_output("t1", "t2");
    assert_same_output("t1", "t3");
}

/* The AVX-512, AVX2 and portable kernels (the FMA paths), forced through LWQ_CPU_KERNELS; a kernel
 * this CPU cannot run falls back to the automatic choice, so the baseline is the portable one,
 * which runs everywhere, and a fallback to a BF16 dot path (amx) is skipped, named. */
Test(batch_invariance_e2e, fma_cpu_kernels_do_not_change_the_bytes)
{
    make_model("bf16");
    quantize("portable", "3", "2", "portable");
    static const char *const fma[] = {"avx2", "avx512"};
    for (int i = 0; i < 2; i++) {
        if (lwq_cpu_kernels_force(fma[i]) != 0) {
            cr_log_info("kernels %s: this CPU cannot run them, not compared", fma[i]);
            continue;
        }
        quantize(fma[i], i ? "2" : "1", i ? "1" : "2", fma[i]);
        assert_same_output("portable", fma[i]);
    }
}

/* A BF16 dot path (amx, avx512bf16) has bits of its own, but the same bits for any batch size and
 * thread count; a path this CPU cannot run is skipped, named. */
static void dot_path(const char *kern)
{
    if (lwq_cpu_kernels_force(kern) != 0) {
        cr_skip_test("kernels %s: this CPU (or its OS) cannot run them", kern);
    }
    make_model("bf16");
    quantize("d1", "1", "2", kern);
    quantize("d2", "2", "1", kern);
    quantize("d3", "3", "2", kern);
    assert_same_output("d1", "d2");
    assert_same_output("d1", "d3");
}

Test(batch_invariance_e2e, amx_kernels_batch_sizes_and_threads_write_identical_bytes) { dot_path("amx"); }
Test(batch_invariance_e2e, avx512bf16_kernels_batch_sizes_and_threads_write_identical_bytes)
{
    dot_path("avx512bf16");
}

/* lwq quantize m -o <out> with LWQ_CPU_KERNELS=<kern>: its exit status (stderr in lwqt_err) */
static int quantize_rc(const char *out, const char *kern)
{
    char m[512], o[512], c[512];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(o, sizeof o, "%s", lwqt_path(out));
    snprintf(c, sizeof c, "%s", lwqt_path("calib.jsonl"));
    const char *a[] = {"quantize", m, "-o", o, "--calib", c, "--calib-size", "7", "--calib-seq", "64",
                       "--qformat", "nvfp4", "--kv-cache", "fp8", "--device", "cpu", NULL};
    setenv("LWQ_CPU_KERNELS", kern, 1);
    int rc = lwqt_run(a);
    unsetenv("LWQ_CPU_KERNELS");
    return rc;
}

static const char *a_dot_path(void)
{
    return lwq_cpu_kernels_force("amx") == 0 ? "amx" : lwq_cpu_kernels_force("avx512bf16") == 0 ? "avx512bf16" : NULL;
}

/* A BF16 model's layers from a dot path and from the FMA paths differ, so the run's identity names
 * the path: the same output rerun on the other path is refused (a resume or a rank there would mix
 * two kinds of layers), not taken for complete */
Test(batch_invariance_e2e, a_bf16_output_rerun_on_another_cpu_path_is_refused)
{
    const char *dot = a_dot_path();
    if (!dot)
        cr_skip_test("neither amx nor avx512bf16 runs on this CPU (or its OS): no second CPU path to try");
    make_model("bf16");
    cr_assert_eq(quantize_rc("o", dot), 0, "%s: %s", dot, lwqt_err());
    cr_assert_eq(quantize_rc("o", "portable"), 2, "the %s output was taken as portable's: %s", dot, lwqt_err());
    cr_assert(strstr(lwqt_err(), "changed: backend"), "%s", lwqt_err());
    cr_assert_eq(quantize_rc("o", dot), 0, "%s", lwqt_err());
    cr_assert(strstr(lwqt_err(), "nothing to do"), "%s", lwqt_err());
}

/* An F32 model never takes the BF16 dot products: its bytes and identity are the same on every path */
Test(batch_invariance_e2e, an_f32_output_is_the_same_run_on_every_cpu_path)
{
    const char *dot = a_dot_path();
    if (!dot)
        cr_skip_test("neither amx nor avx512bf16 runs on this CPU (or its OS): no second CPU path to try");
    make_model("f32");
    cr_assert_eq(quantize_rc("o", dot), 0, "%s: %s", dot, lwqt_err());
    cr_assert_eq(quantize_rc("o", "portable"), 0, "%s", lwqt_err());
    cr_assert(strstr(lwqt_err(), "nothing to do"), "%s", lwqt_err());
}
