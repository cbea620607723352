/* Hostile quantized checkpoints for `lwq eval` and `lwq verify` (issue 28): bad scales and codes, an unreadable hf_quant_config.json, shapes whose products overflow. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <sys/stat.h>

#include "engine/eval/eval_internal.h"
#include "kernels/backend.h"
#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/run.h"

TestSuite(hostile_qdir, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 240);

/* m (2-layer llama) and q, its quantization with `qformat`. */
static void quantized(const char *qformat)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel");
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--qformat", qformat, "--calib-size", "4",
                       "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0, "quantize");
}

/* Overwrite `n` bytes at byte `at` of tensor `tensor` in shard q/model-layer-00000.safetensors. */
static void poke(const char *tensor, uint64_t at, const void *bytes, size_t n)
{
    const char *shard = lwqt_path("q/model-layer-00000.safetensors");
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(shard, &f, &e), 0, "%s", e.msg);
    int k = lwq_st_find(&f, tensor);
    cr_assert_geq(k, 0, "%s not in %s", tensor, shard);
    cr_assert_leq(at + n, f.entries[k].end - f.entries[k].begin);
    uint64_t off = f.data_start + f.entries[k].begin + at;
    lwq_st_free(&f);
    int fd = open(shard, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, bytes, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void poke_byte(const char *tensor, uint64_t at, uint8_t b) { poke(tensor, at, &b, 1); }
static void poke_f32(const char *tensor, float x) { poke(tensor, 0, &x, 4); }

/* `lwq args...` exits `want` and its stdout or stderr holds `needle`. */
static void expect(const char *const *args, int want, const char *needle)
{
    int rc = lwqt_run(args);
    char *err = lwqt_err(), *out = lwqt_out();
    cr_assert_eq(rc, want, "exit %d, expected %d; stdout: %s; stderr: %s", rc, want, out, err);
    cr_assert(strstr(err, needle) || strstr(out, needle), "output lacks \"%s\"; stdout: %s; stderr: %s", needle, out,
              err);
    free(err);
    free(out);
}

static void eval_refused(const char *needle)
{
    const char *a[] = {"eval", lwqt_path("m"), lwqt_path("q"), "--data-size", "2", "--data-seq", "8", "--quiet", NULL};
    expect(a, 2, needle);
}

/* ... naming the shard that holds the tensor, then `needle` */
static void eval_refused_in_shard(const char *needle)
{
    char want[1000];
    snprintf(want, sizeof want, "lwq: %s: %s", lwqt_path("q/model-layer-00000.safetensors"), needle);
    eval_refused(want);
}

static void verify_fails(const char *needle)
{
    const char *a[] = {"verify", lwqt_path("q"), NULL};
    expect(a, 1, needle);
}

#define DOWN "model.layers.0.mlp.down_proj"

/* F4: NaN, zero and negative E4M3 block scales were dequantized into NaN (or wrong) weights and
 * eval exited 0 with plausible numbers. */
Test(hostile_qdir, eval_refuses_a_nan_block_scale)
{
    quantized("nvfp4");
    poke_byte(DOWN ".weight_scale", 5, 0x7F);
    eval_refused_in_shard(DOWN ".weight_scale[5] is NaN (E4M3 byte 0x7F); every NVFP4 block scale must be finite and > 0");
}

Test(hostile_qdir, eval_refuses_a_zero_block_scale)
{
    quantized("nvfp4");
    poke_byte(DOWN ".weight_scale", 0, 0x00);
    eval_refused_in_shard(DOWN ".weight_scale[0] is zero (E4M3 byte 0x00)");
}

Test(hostile_qdir, eval_refuses_a_negative_block_scale)
{
    quantized("nvfp4");
    poke_byte(DOWN ".weight_scale", 3, 0xB8);
    eval_refused_in_shard(DOWN ".weight_scale[3] is negative (E4M3 byte 0xB8)");
}

Test(hostile_qdir, eval_refuses_a_nan_fp8_weight_code)
{
    quantized("fp8");
    poke_byte(DOWN ".weight", 7, 0xFF);
    eval_refused_in_shard(DOWN ".weight[7] is an FP8 NaN code (0xFF)");
}

/* An output as it is shipped, without its resume directory (whose checksums would catch any
 * edit): verify passed NaN codes. */
Test(hostile_qdir, verify_finds_a_nan_fp8_weight_code)
{
    quantized("fp8");
    lwqt_sh("rm -rf %s", lwqt_path("q.layerwise_resume"));
    poke_byte(DOWN ".weight", 7, 0x7F);
    verify_fails("model-layer-00000.safetensors: " DOWN ".weight[7] is an FP8 NaN code (0x7F)");
}

Test(hostile_qdir, eval_refuses_a_bad_weight_scale_2)
{
    quantized("nvfp4");
    poke_f32(DOWN ".weight_scale_2", -1.0f);
    eval_refused_in_shard(DOWN ".weight_scale_2 is -1; it must be finite and > 0");
}

/* Found by fuzz/fuzz_qdir after the F4 fix: a finite but huge weight_scale_2 (or FP8 weight_scale)
 * passed the finiteness checks, and its product with the largest block scale and code dequantized
 * into inf weights; eval exited 0. */
Test(hostile_qdir, eval_refuses_a_weight_scale_2_whose_weights_overflow)
{
    quantized("nvfp4");
    poke_byte(DOWN ".weight_scale", 0, 0x7E); /* 448, the largest block scale */
    poke_f32(DOWN ".weight_scale_2", 2e35f);   /* 2e35 x 448 x 6 = 5.4e38 > FLT_MAX */
    eval_refused_in_shard(DOWN ".weight_scale_2 is 2e+35: with " DOWN ".weight_scale[0] = 448 its weights reach 5.376e+38, "
                 "beyond a float");
}

Test(hostile_qdir, eval_refuses_an_fp8_weight_scale_whose_weights_overflow)
{
    quantized("fp8");
    poke_byte(DOWN ".weight", 0, 0xFE);     /* -448 */
    poke_f32(DOWN ".weight_scale", 1e36f); /* x 448 = 4.5e38 > FLT_MAX */
    eval_refused_in_shard(DOWN ".weight_scale is 1e+36: with " DOWN ".weight[0] = 448 its weights reach 4.48e+38, "
                 "beyond a float");
}

/* F2: a bad input_scale was reported, and the dequantized weight leaked (exit 1 under ASan). */
Test(hostile_qdir, eval_refuses_a_nan_input_scale)
{
    quantized("nvfp4");
    poke_f32(DOWN ".input_scale", NAN);
    eval_refused_in_shard(DOWN ".input_scale is nan; it must be finite and > 0");
}

Test(hostile_qdir, eval_refuses_an_infinite_zero_or_negative_input_scale)
{
    quantized("fp8");
    static const float bad[] = {INFINITY, 0.0f, -2.0f};
    static const char *const shown[] = {"inf", "0", "-2"};
    for (int i = 0; i < 3; i++) {
        poke_f32(DOWN ".input_scale", bad[i]);
        char want[200];
        snprintf(want, sizeof want, DOWN ".input_scale is %s; it must be finite and > 0", shown[i]);
        eval_refused_in_shard(want);
    }
}

/* F5: an hf_quant_config.json over 16 MiB, or a directory of that name, was passed over and
 * config.json used instead (here it would have declared W4A8_AWQ, which is not emulated). */
Test(hostile_qdir, an_oversized_hf_quant_config_is_refused)
{
    quantized("nvfp4");
    FILE *fp = fopen(lwqt_path("q/hf_quant_config.json"), "w");
    cr_assert_not_null(fp);
    fputs("{\"quantization\": {\"quant_algo\": \"W4A8_AWQ\"},\n", fp);
    for (int i = 0; i < 17 << 10; i++)
        fprintf(fp, "%1023s\n", "");
    fputs("}", fp);
    fclose(fp);
    struct stat st;
    cr_assert_eq(stat(lwqt_path("q/hf_quant_config.json"), &st), 0);
    char want[600];
    snprintf(want, sizeof want, "%s: %lld bytes, over the byte limit for this kind of file (16777216 allowed)",
             lwqt_path("q/hf_quant_config.json"), (long long)st.st_size);
    eval_refused(want);
}

Test(hostile_qdir, a_directory_as_hf_quant_config_is_refused)
{
    quantized("nvfp4");
    cr_assert_eq(unlink(lwqt_path("q/hf_quant_config.json")), 0);
    cr_assert_eq(mkdir(lwqt_path("q/hf_quant_config.json"), 0755), 0);
    char want[600];
    snprintf(want, sizeof want, "%s: not a regular file (a directory)", lwqt_path("q/hf_quant_config.json"));
    eval_refused(want);
}

/* F3: a zero-element tensor [2^53, 1024, 0] passed the parser, and a product of its first two
 * dimensions overflowed int64 (UBSan, in eval's scalar check). */
Test(hostile_qdir, a_shape_whose_product_overflows_is_refused)
{
    quantized("nvfp4");
    lwqt_write_st("q/extra.safetensors",
                  "{\"model.layers.0.mlp.down_proj.input_scale_x\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,1024,0],"
                  "\"data_offsets\":[0,0]}}",
                  UINT64_MAX, 0);
    char *idx = lwqt_slurp(lwqt_path("q/model.safetensors.index.json"));
    char *at = strstr(idx, "\"weight_map\"");
    cr_assert_not_null(at);
    at = strchr(at, '{');
    cr_assert_not_null(at);
    char *nidx = malloc(strlen(idx) + 200);
    sprintf(nidx, "%.*s{\"model.layers.0.mlp.down_proj.input_scale_x\": \"extra.safetensors\", %s", (int)(at - idx), idx,
            at + 1);
    lwqt_write_str("q/model.safetensors.index.json", nidx);
    free(idx);
    free(nidx);
    char want[700];
    snprintf(want, sizeof want, "%s: tensor 'model.layers.0.mlp.down_proj.input_scale_x': the product of the dimensions "
             "up to shape[1] overflows (limit 2^53 elements, zero dimensions aside)", lwqt_path("q/extra.safetensors"));
    eval_refused(want);
}

/* F2's leak, seen without a leak checker: the heap in use after a refused view is what it was
 * before (glibc's mallinfo2; ASan's is all zeros, and there LeakSanitizer sees the leak itself). */
Test(hostile_qdir, a_refused_input_scale_frees_what_it_dequantized)
{
    quantized("nvfp4");
    lwq_ckpt src;
    lwq_qdir qd;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("m"), &src, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_qdir_open(&qd, lwqt_path("q"), &src, &e), 0, "%s", e.msg);
    lwq_tlist qt;
    cr_assert_eq(lwq_qdir_read_layer(&qd, 0, &qt, &e), 0, "%s", e.msg);
    lwq_htensor *is = (lwq_htensor *)lwq_tlist_find(&qt, DOWN ".input_scale");
    cr_assert_not_null(is);
    *(float *)is->data = NAN;
    lwq_arch_layer plan;
    cr_assert_eq(lwq_arch_layer_plan(&src.cfg, 0, &plan, &e), 0, "%s", e.msg);
    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0, "%s", e.msg);
    lwq_emul em;
    lwq_emul_init(&em, &be);
    lwq_qlayer_view v = {0};
    /* one warm-up call, so lazily made state (the thread pool, the emulator's arrays) is there */
    cr_assert_eq(lwq_qlayer_view_make(&plan, &qt, 0, 0, &em, &v, &e), LWQ_ENUMERIC);
    lwq_qlayer_view_free(&v);
    size_t before = mallinfo2().uordblks;
    lwq_error e2 = {0};
    cr_assert_eq(lwq_qlayer_view_make(&plan, &qt, 0, 0, &em, &v, &e2), LWQ_ENUMERIC);
    cr_assert(strstr(e2.msg, DOWN ".input_scale is nan"), "%s", e2.msg);
    lwq_qlayer_view_free(&v);
    size_t after = mallinfo2().uordblks;
    cr_assert_eq(after, before, "%zu bytes still allocated after a refused layer view", after - before);
    lwq_emul_free(&em);
    lwq_backend_destroy(&be);
    lwq_arch_layer_free(&plan);
    lwq_tlist_free(&qt);
    lwq_qdir_free(&qd);
    lwq_ckpt_free(&src);
}
