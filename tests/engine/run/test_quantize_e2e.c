/* `lwq quantize` end to end on the NVFP4-ready fixtures, for every preset (issue 6, "Must show").
 *
 * Each case runs the built binary on a fixture with a calibration .jsonl of input_ids (ten
 * samples of mixed lengths, batches of four, so left padding is exercised), then checks the
 * output with tests/helpers/check/qcheck.h: every tensor FORMATS.md asks for with its dtype and shape,
 * the index, the shard of every tensor, unquantized tensors byte-identical to the source,
 * dequantization within one code step, weight and input scales (recomputed from a separate
 * forward with host-side amax observers, fused-group max and cold-expert rules applied), k/v
 * scales when calibrated, and both config files.  A preset that quantizes nothing of a dense
 * model must fail before writing anything. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "layout/checkpoint/checkpoint.h"
#include "text/dataset.h"
#include "text/tokenizer.h"
#include "tests/helpers/model/fwd_fixture.h"
#include "tests/helpers/check/qcheck.h"

static const int64_t LENS[10] = {32, 7, 19, 32, 3, 25, 11, 32, 16, 28};

static int64_t vocab_of(const char *dir)
{
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(dir, &ck, &e), 0, "%s", e.msg);
    int64_t v = ck.cfg.vocab_size;
    lwq_ckpt_free(&ck);
    return v;
}

static void e2e(const char *fixture, const char *preset, const char *kv)
{
    char dir[1024], calib[600], out[600];
    fwd_fixture_dir(fixture, dir, sizeof dir);
    snprintf(calib, sizeof calib, "%s", lwqt_path("calib.jsonl"));
    snprintf(out, sizeof out, "%s", lwqt_path("out"));
    qc_calib c;
    qc_calib_make(&c, 10, LENS, vocab_of(dir), 7);
    qc_calib_write(&c, calib);
    const char *args[] = {"quantize", dir, "-o", out, "--qformat", preset, "--calib", calib, "--calib-size", "10",
                          "--calib-seq", "32", "--batch-size", "4", "--kv-cache", kv, "--device", "cpu", "--quiet", NULL};
    int rc = lwqt_run(args);
    if (rc != 0) {
        char *err = lwqt_err();
        cr_assert_fail("lwq quantize %s --qformat %s exited %d: %s", fixture, preset, rc, err);
    }
    qc_ref ref;
    qc_ref_compute(&ref, dir, &c, 4, 0, 0);
    qc_kv k = !strcmp(kv, "fp8") ? QC_KV_FP8 : !strcmp(kv, "none") ? QC_KV_NONE : QC_KV_FP8_CAST;
    qc_check_output(dir, out, preset, k, &ref);
    qc_ref_free(&ref);
    qc_calib_free(&c);
}

/* A dense model has no routed experts: the experts-only preset must refuse, name the reason, and
 * leave no output behind. */
static void nothing_to_quantize(const char *fixture)
{
    char dir[1024], calib[600], out[600];
    fwd_fixture_dir(fixture, dir, sizeof dir);
    snprintf(calib, sizeof calib, "%s", lwqt_path("calib.jsonl"));
    snprintf(out, sizeof out, "%s", lwqt_path("out"));
    qc_calib c;
    qc_calib_make(&c, 4, LENS, vocab_of(dir), 3);
    qc_calib_write(&c, calib);
    const char *args[] = {"quantize", dir, "-o", out, "--qformat", "nvfp4_experts_only", "--calib", calib,
                          "--calib-size", "4", "--calib-seq", "32", "--device", "cpu", NULL};
    cr_assert_eq(lwqt_run(args), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "nvfp4_experts_only") && strstr(err, "quantizes no linear"),
              "unclear message: %s", err);
    free(err);
    cr_assert_neq(access(out, F_OK), 0, "%s was created by a run that quantizes nothing", out);
    qc_calib_free(&c);
}

/* The built-in calibration text through the fixture's own tokenizer (the demo's path); the
 * reference tokenizes it with the same library calls the command makes. */
Test(quantize_e2e, moe_builtin_text, .init = lwqt_setup, .fini = lwqt_teardown)
{
    char dir[1024], tok_path[1100], out[600];
    fwd_fixture_dir("agilerl-tiny-qwen3-moe", dir, sizeof dir);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    snprintf(out, sizeof out, "%s", lwqt_path("out"));
    const char *args[] = {"quantize", dir, "-o", out, "--calib", "builtin", "--calib-size", "6", "--calib-seq", "48",
                          "--batch-size", "4", "--kv-cache", "fp8", "--device", "cpu", "--quiet", NULL};
    int rc = lwqt_run(args);
    if (rc != 0)
        cr_assert_fail("lwq quantize --calib builtin exited %d: %s", rc, lwqt_err());
    lwq_tokenizer *tok;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&tok, tok_path, &e), 0, "%s", e.msg);
    lwq_calib_opts co = {0};
    co.max_samples = 6;
    co.seq_len = 48;
    lwq_calib_batch b;
    cr_assert_eq(lwq_calib_load(tok, NULL, &co, &b, NULL, &e), 0, "%s", e.msg);
    lwq_tokenizer_free(tok);
    cr_assert_eq(b.n, 6);
    qc_calib c = {(int)b.n, calloc(b.n, sizeof(int64_t)), calloc(b.n, sizeof(int32_t *))};
    for (size_t i = 0; i < b.n; i++) {
        c.len[i] = b.lengths[i];
        c.ids[i] = malloc((size_t)b.lengths[i] * sizeof(int32_t));
        memcpy(c.ids[i], b.ids + i * b.seq + (b.seq - (size_t)b.lengths[i]), (size_t)b.lengths[i] * sizeof(int32_t));
    }
    lwq_calib_batch_free(&b);
    qc_ref ref;
    qc_ref_compute(&ref, dir, &c, 4, 0, 0);
    qc_check_output(dir, out, "nvfp4", QC_KV_FP8, &ref);
    qc_ref_free(&ref);
    qc_calib_free(&c);
}

#define E2E(id, fixture, preset, kv)                                                                  \
    Test(quantize_e2e, id, .init = lwqt_setup, .fini = lwqt_teardown) { e2e(fixture, preset, kv); }

#define MOE "agilerl-tiny-qwen3-moe"
#define LLAMA3 "mlxd-tiny-llama3-bf16"
#define QWEN3 "mlxd-tiny-qwen3-bf16"
#define TWO_SHARD "quatricmorph-tiny-llama-2shard"

E2E(moe_nvfp4, MOE, "nvfp4", "fp8")
E2E(moe_nvfp4_experts_only, MOE, "nvfp4_experts_only", "fp8_cast")
E2E(moe_nvfp4_mlp_only, MOE, "nvfp4_mlp_only", "fp8_cast")
E2E(moe_fp8, MOE, "fp8", "none")
E2E(moe_nvfp4_experts_fp8_attn, MOE, "nvfp4_experts-fp8_attn", "fp8")

E2E(llama3_nvfp4, LLAMA3, "nvfp4", "fp8")
E2E(llama3_nvfp4_mlp_only, LLAMA3, "nvfp4_mlp_only", "fp8_cast")
E2E(llama3_fp8, LLAMA3, "fp8", "none")
E2E(llama3_nvfp4_experts_fp8_attn, LLAMA3, "nvfp4_experts-fp8_attn", "fp8_cast")

E2E(qwen3_nvfp4, QWEN3, "nvfp4", "fp8")
E2E(qwen3_nvfp4_mlp_only, QWEN3, "nvfp4_mlp_only", "fp8_cast")
E2E(qwen3_fp8, QWEN3, "fp8", "fp8")
E2E(qwen3_nvfp4_experts_fp8_attn, QWEN3, "nvfp4_experts-fp8_attn", "none")

E2E(two_shard_nvfp4, TWO_SHARD, "nvfp4", "fp8")
E2E(two_shard_nvfp4_mlp_only, TWO_SHARD, "nvfp4_mlp_only", "fp8_cast")
E2E(two_shard_fp8, TWO_SHARD, "fp8", "none")
E2E(two_shard_nvfp4_experts_fp8_attn, TWO_SHARD, "nvfp4_experts-fp8_attn", "fp8")

Test(quantize_e2e, llama3_experts_only_refused, .init = lwqt_setup, .fini = lwqt_teardown)
{
    nothing_to_quantize(LLAMA3);
}
Test(quantize_e2e, qwen3_experts_only_refused, .init = lwqt_setup, .fini = lwqt_teardown)
{
    nothing_to_quantize(QWEN3);
}
Test(quantize_e2e, two_shard_experts_only_refused, .init = lwqt_setup, .fini = lwqt_teardown)
{
    nothing_to_quantize(TWO_SHARD);
}
