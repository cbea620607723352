/* `lwq plan`'s GPU peak counts what the CUDA run holds: the CUDA context and cuBLAS workspace, the quantizer's copy of a weight and its outputs, GPTQ's buffers and library handles on top of them, the F32 staging of mixed-dtype GEMMs (BF16 weights in an F16 model too), every layer and the embedding with --whole-model, the embedding step, the FP8 mse search's per-row losses over its real candidate count (a recipe's own range of up to 48, searched on the host); and its process term is not a sample of the live RSS. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "engine/run/engine.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/format/quant_formats.h"
#include "layout/recipe/recipe.h"

TestSuite(plan_gpu, .init = lwqt_setup, .fini = lwqt_teardown);

static void mkmodel(const char *dir, const char *dtype)
{
    const char *mk[] = {"mkmodel", dir, "--arch", "llama", "--hidden", "256", "--layers", "2", "--dtype", dtype,
                        "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel: %s", lwqt_err());
}

/* The plan used to predict a few MB for this model on CUDA, so a limit far below what the CUDA
 * context alone takes was accepted, and the run went past it. */
Test(plan_gpu, a_limit_below_the_cuda_runtime_is_refused)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "bf16");
    const char *plan[] = {"plan", m, "--device", "cuda", "--max-gpu-memory-gb", "0.1", "--calib-size", "4",
                          "--calib-seq", "32", NULL};
    lwqt_run(plan);
    char *out = lwqt_out(), *err = lwqt_err();
    cr_expect(strstr(out, "does not fit: GPU peak") != NULL, "stdout: %s\nstderr: %s", out, err);
    cr_expect(strstr(err, "cuBLAS workspace") != NULL, "the breakdown names its parts: %s", err);
    free(out), free(err);
}

typedef struct planned {
    lwq_mem_plan p;
    int64_t inter;
    uint64_t layers;  /* every decoder layer's bytes */
    uint64_t embed;   /* the embedding matrix's bytes */
} planned;

static planned plan_with(const char *dir, const char *algo, lwq_device_choice device, int whole)
{
    planned r;
    lwq_error e = {0};
    lwq_recipe rec;
    cr_assert_eq(lwq_recipe_preset("nvfp4", &rec, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_algo_parse(algo, &rec.algo), 0);
    lwq_calib_set cs = {0};
    int64_t len[4] = {32, 32, 32, 32};
    int32_t ids[32] = {0}, *rows[4] = {ids, ids, ids, ids};
    cs.n = 4;
    cs.len = len;
    cs.ids = rows;
    lwq_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.model_dir = dir;
    o.recipe = &rec;
    o.calib = &cs;
    o.batch_size = 4;
    o.device = device;
    o.whole_model = whole;
    lwq_ckpt ck;
    cr_assert_eq(lwq_ckpt_open(dir, &ck, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quantize_plan_ckpt(&o, &ck, &r.p, &e), 0, "%s", e.msg);
    r.inter = ck.cfg.intermediate_size;
    r.layers = 0;
    for (int L = 0; L < ck.cfg.num_hidden_layers; L++)
        r.layers += ck.layers[L].bytes;
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&ck, "model.embed_tokens.weight");
    cr_assert_not_null(t);
    r.embed = t->nbytes;
    lwq_ckpt_free(&ck);
    lwq_recipe_free(&rec);
    return r;
}

static planned plan_of(const char *dir, const char *algo) { return plan_with(dir, algo, LWQ_DEVICE_CUDA, 0); }

/* config.json's dtype `from` -> `to` (the weights keep theirs). */
static void set_config_dtype(const char *m, const char *from, const char *to)
{
    char cfgp[700];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", m);
    char *cfg = lwqt_slurp(cfgp), *at = strstr(cfg, from);
    cr_assert_not_null(at, "config.json has no %s dtype", from);
    FILE *fp = fopen(cfgp, "wb");
    cr_assert_not_null(fp);
    fprintf(fp, "%.*s%s%s", (int)(at - cfg), cfg, to, at + strlen(from));
    fclose(fp);
    free(cfg);
}

static uint64_t al256(uint64_t b) { return (b + 255) / 256 * 256; }

Test(plan_gpu, quantizer_copy_and_outputs_of_the_largest_weight_are_counted)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "bf16");
    planned x = plan_of(m, "mse");
    uint64_t n = 256 * (uint64_t)x.inter; /* the MLP's linears are the largest */
    /* BF16 weight copy, packed E2M1, E4M3 block scales, the searched block amax (F32) */
    uint64_t want = 2 * n + n / 2 + n / 16 + 4 * (n / 16);
    cr_expect_eq(x.p.gpu_quant_bytes, want, "quantizer bytes %llu, expected %llu",
                 (unsigned long long)x.p.gpu_quant_bytes, (unsigned long long)want);
    cr_expect_geq(x.p.gpu_runtime_bytes, (uint64_t)32 << 20, "cuBLAS's 32 MiB Hopper workspace at least");
    cr_expect_geq(x.p.gpu_peak, x.p.gpu_runtime_bytes + x.p.largest_layer_bytes + x.p.gpu_quant_bytes);
    cr_expect_lt(x.p.gpu_staging_bytes, 4096, "no mixed-dtype or bias GEMM in a plain BF16 llama");
    planned mx = plan_of(m, "max");
    cr_expect_eq(mx.p.gpu_quant_bytes, 2 * n + n / 2 + n / 16, "max: no searched block amax");
}

/* Weights stored as F32 in a BF16 model: cu_gemm widens x to F32 (W already is) and writes an
 * F32 result before the cast, in a workspace that stays at its largest size. */
Test(plan_gpu, mixed_dtype_gemms_add_their_f32_staging)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "f32");
    set_config_dtype(m, "\"float32\"", "\"bfloat16\"");
    planned x = plan_of(m, "max");
    uint64_t rows = 4 * 32;
    uint64_t want = al256(rows * 256 * 4) + rows * (uint64_t)x.inter * 4 + 256;
    cr_expect_eq(x.p.gpu_staging_bytes, want, "staging %llu, cu_gemm takes %llu",
                 (unsigned long long)x.p.gpu_staging_bytes, (unsigned long long)want);
    cr_expect_geq(x.p.gpu_peak, x.p.gpu_runtime_bytes + x.p.largest_layer_bytes + x.p.gpu_staging_bytes +
                                    x.p.gpu_quant_bytes);
}

/* BF16 and F16 are both two bytes, and the plan took "same size" for "same dtype": BF16 weights in
 * an F16 model got no staging, while cu_gemm widens both operands to F32. */
Test(plan_gpu, bf16_weights_in_an_f16_model_are_widened)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "bf16");
    set_config_dtype(m, "\"bfloat16\"", "\"float16\"");
    planned x = plan_of(m, "max");
    uint64_t rows = 4 * 32, in = (uint64_t)x.inter, n = 256 * in;
    /* the widest: down_proj (in = intermediate, out = 256) or up/gate (in = 256, out = intermediate) */
    uint64_t down = al256(rows * in * 4) + al256(n * 4) + rows * 256 * 4 + 256;
    uint64_t up = al256(rows * 256 * 4) + al256(n * 4) + rows * in * 4 + 256;
    uint64_t want = down > up ? down : up;
    cr_expect_eq(x.p.gpu_staging_bytes, want, "staging %llu, cu_gemm takes %llu",
                 (unsigned long long)x.p.gpu_staging_bytes, (unsigned long long)want);
}

/* --whole-model keeps every layer and the embedding on the device; the plan counted the largest
 * layer, as for a layerwise run. */
Test(plan_gpu, whole_model_counts_every_layer_and_the_embedding)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "bf16");
    planned w = plan_with(m, "max", LWQ_DEVICE_CUDA, 1), l = plan_of(m, "max");
    cr_expect_eq(w.p.gpu_weights_bytes, w.layers + w.embed, "weights %llu, layers %llu + embedding %llu",
                 (unsigned long long)w.p.gpu_weights_bytes, (unsigned long long)w.layers, (unsigned long long)w.embed);
    cr_expect_geq(w.p.gpu_peak, w.p.gpu_runtime_bytes + w.layers + w.embed + w.p.gpu_act_bytes + w.p.gpu_quant_bytes);
    cr_expect_eq(l.p.gpu_weights_bytes, l.p.largest_layer_bytes, "layerwise: one layer");
    cr_expect_gt(w.p.gpu_peak, l.p.gpu_peak);
}

/* GPTQ allocates its buffers and cuBLAS / cuSOLVER handles while the quantizer's copy of the
 * weight and its outputs stay allocated; the plan took the larger of the two. */
Test(plan_gpu, gptq_buffers_and_the_quantizer_copy_add_up)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "bf16");
    planned g = plan_of(m, "gptq");
    uint64_t in = (uint64_t)g.inter, outf = 256; /* down_proj: the widest input */
    uint64_t sweep = outf * in * (2 + 8 + 1) + in * in * 8 + outf * 128 * 8 + 3 * in * 8 + ((uint64_t)32 << 20);
    cr_expect_geq(g.p.gpu_gptq_bytes, sweep, "GPTQ %llu < its sweep's buffers + a cuBLAS workspace %llu",
                  (unsigned long long)g.p.gpu_gptq_bytes, (unsigned long long)sweep);
    cr_expect_gt(g.p.gpu_quant_bytes, 0);
    cr_expect_geq(g.p.gpu_peak, g.p.gpu_runtime_bytes + g.p.largest_layer_bytes + g.p.gpu_quant_bytes +
                                    g.p.gpu_gptq_bytes);
    cr_expect_eq(plan_of(m, "max").p.gpu_gptq_bytes, 0, "max runs no GPTQ");
}

/* The embedding step uploads the embedding matrix, which for a large vocabulary outweighs a
 * layer; it was not counted. */
Test(plan_gpu, the_embedding_step_is_counted)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    const char *mk[] = {"mkmodel", m, "--arch", "llama", "--hidden", "256", "--layers", "2", "--vocab", "65536",
                        "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel: %s", lwqt_err());
    planned x = plan_of(m, "max");
    cr_assert_gt(x.embed, x.p.largest_layer_bytes, "the fixture's embedding should outweigh a layer");
    cr_expect_geq(x.p.gpu_embed_bytes, x.embed + 4 * 32 * 256 * 2, "the embedding and one batch of rows");
    cr_expect_geq(x.p.gpu_peak, x.p.gpu_runtime_bytes + x.p.gpu_embed_bytes);
}

/* The host peak took the process's live RSS when the plan was made, so the chosen expert group and
 * --batch-size 0 moved with whatever else the process held. */
Test(plan_gpu, the_process_term_does_not_follow_the_live_rss)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "bf16");
    planned a = plan_with(m, "max", LWQ_DEVICE_CPU, 0);
    size_t big = (size_t)256 << 20;
    volatile char *hold = malloc(big);
    cr_assert_not_null(hold);
    for (size_t i = 0; i < big; i += 4096)
        hold[i] = (char)i;
    planned b = plan_with(m, "max", LWQ_DEVICE_CPU, 0);
    free((void *)hold);
    cr_expect_eq(a.p.process_bytes, b.p.process_bytes, "process %llu, then %llu with 256 MB more resident",
                 (unsigned long long)a.p.process_bytes, (unsigned long long)b.p.process_bytes);
    cr_expect_eq(a.p.host_peak, b.p.host_peak);
    planned c = plan_with(m, "max", LWQ_DEVICE_CUDA, 0);
    cr_expect_gt(c.p.process_bytes, a.p.process_bytes, "a CUDA run counts the CUDA libraries' host memory");
}

/* FP8 mse over a recipe's own multiplier range: 0.5 to 1.5 by 1/47, lwq_mse_linspace's 48
 * candidates (the most a range may have). */
static lwq_mem_plan plan_fp8(const char *dir, int own, lwq_device_choice device)
{
    lwq_error e = {0};
    lwq_recipe rec;
    cr_assert_eq(lwq_recipe_preset("fp8", &rec, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_algo_parse("mse", &rec.algo), 0);
    if (own) {
        rec.mse_range = LWQ_MSE_RANGE_OWN;
        rec.mse_mult[0] = 0.5, rec.mse_mult[1] = 1.5, rec.mse_mult[2] = 1.0 / 47;
    }
    lwq_calib_set cs = {0};
    int64_t len[4] = {32, 32, 32, 32};
    int32_t ids[32] = {0}, *rows[4] = {ids, ids, ids, ids};
    cs.n = 4, cs.len = len, cs.ids = rows;
    lwq_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.model_dir = dir, o.recipe = &rec, o.calib = &cs, o.batch_size = 4, o.device = device;
    lwq_ckpt ck;
    lwq_mem_plan p;
    cr_assert_eq(lwq_ckpt_open(dir, &ck, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quantize_plan_ckpt(&o, &ck, &p, &e), 0, "%s", e.msg);
    lwq_ckpt_free(&ck);
    lwq_recipe_free(&rec);
    return p;
}

/* The plan sized the device's FP8 losses with the default 39 candidates for every range, while a
 * recipe's own range (up to 48) is searched by the host kernel, which holds rows x 48 doubles:
 * the host peak left them out and the GPU counted a buffer the device never allocates. */
Test(plan_gpu, fp8_mse_own_range_losses_are_the_hosts_over_48_candidates)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "bf16");
    float c[LWQ_MSE_MAX_STEPS];
    cr_assert_eq(lwq_mse_linspace(0.5, 1.5, 1.0 / 47, c, LWQ_MSE_MAX_STEPS), 48);
    lwq_mem_plan def = plan_fp8(m, 0, LWQ_DEVICE_CUDA), own = plan_fp8(m, 1, LWQ_DEVICE_CUDA);
    lwq_error e = {0};
    lwq_ckpt ck;
    cr_assert_eq(lwq_ckpt_open(m, &ck, &e), 0, "%s", e.msg);
    uint64_t inter = (uint64_t)ck.cfg.intermediate_size, n = 256 * inter; /* gate/up: the most rows */
    lwq_ckpt_free(&ck);
    cr_expect_eq(def.gpu_quant_bytes, 2 * n + n + inter * 39 * 8, "default range: the device's 39 losses per row");
    cr_expect_eq(own.gpu_quant_bytes, 2 * n + n, "own range: no losses on the device");
    cr_expect_eq(own.host_peak - def.host_peak, inter * 48 * 8, "host peak %llu vs %llu: 48 losses per row",
                 (unsigned long long)own.host_peak, (unsigned long long)def.host_peak);
    lwq_mem_plan cpu39 = plan_fp8(m, 0, LWQ_DEVICE_CPU), cpu48 = plan_fp8(m, 1, LWQ_DEVICE_CPU);
    cr_expect_eq(cpu48.host_peak - cpu39.host_peak, inter * (48 - 39) * 8,
                 "CPU: the host searches both ranges, 9 more losses per row for the own one");
}
