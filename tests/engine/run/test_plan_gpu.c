/* `lwq plan`'s GPU peak counts what the CUDA run holds: the CUDA context and cuBLAS workspace, the quantizer's copy of a weight and its outputs, the F32 staging of mixed-dtype GEMMs. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "engine/run/engine.h"
#include "layout/checkpoint.h"
#include "layout/recipe.h"

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
} planned;

static planned plan_of(const char *dir, const char *algo)
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
    o.device = LWQ_DEVICE_CUDA;
    lwq_ckpt ck;
    cr_assert_eq(lwq_ckpt_open(dir, &ck, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quantize_plan_ckpt(&o, &ck, &r.p, &e), 0, "%s", e.msg);
    r.inter = ck.cfg.intermediate_size;
    lwq_ckpt_free(&ck);
    lwq_recipe_free(&rec);
    return r;
}

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

/* Weights stored as F32 in a BF16 model: cu_gemm widens x and W to F32 and writes an F32 result
 * before the cast, in a workspace that stays at its largest size. */
Test(plan_gpu, mixed_dtype_gemms_add_their_f32_staging)
{
    char m[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    mkmodel(m, "f32");
    char cfgp[700];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", m);
    char *cfg = lwqt_slurp(cfgp), *at = strstr(cfg, "\"float32\"");
    cr_assert_not_null(at, "config.json has no float32 dtype");
    FILE *fp = fopen(cfgp, "wb");
    cr_assert_not_null(fp);
    fprintf(fp, "%.*s\"bfloat16\"%s", (int)(at - cfg), cfg, at + strlen("\"float32\""));
    fclose(fp);
    free(cfg);
    planned x = plan_of(m, "max");
    uint64_t rows = 4 * 32, n = 256 * (uint64_t)x.inter;
    uint64_t want = rows * 256 * 4 + n * 4 + rows * (uint64_t)x.inter * 4;
    cr_expect_geq(x.p.gpu_staging_bytes, want, "staging %llu < %llu", (unsigned long long)x.p.gpu_staging_bytes,
                  (unsigned long long)want);
    cr_expect_lt(x.p.gpu_staging_bytes, want + 4096);
    cr_expect_geq(x.p.gpu_peak, x.p.gpu_runtime_bytes + x.p.largest_layer_bytes + x.p.gpu_staging_bytes +
                                    x.p.gpu_quant_bytes);
}
