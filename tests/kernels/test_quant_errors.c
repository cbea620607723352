/* Every refusal of kernels/quant.h: the code and a message naming the tensor and the place. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "kernels/quant.h"

#define NAME "model.layers.2.mlp.up_proj.weight"

static float w[4 * 32];
static uint8_t p[64], sc[8], q[128];
static float ws;

static void setup(void)
{
    for (int i = 0; i < 128; i++)
        w[i] = (float)(i % 7) - 3.0f;
}

#define EXPECT(call, code, ...)                                                                         \
    do {                                                                                                \
        lwq_error e_ = {0};                                                                             \
        lwq_error *err = &e_;                                                                           \
        int rc_ = (call);                                                                               \
        cr_assert_eq(rc_, code, "rc %d: %s", rc_, e_.msg);                                              \
        const char *subs_[] = {__VA_ARGS__};                                                            \
        for (size_t i_ = 0; i_ < sizeof subs_ / sizeof subs_[0]; i_++)                                  \
            cr_assert(strstr(e_.msg, subs_[i_]), "'%s' not in '%s'", subs_[i_], e_.msg);                \
    } while (0)

Test(quant_errors, nan_in_weight_names_tensor_and_position, .init = setup)
{
    w[2 * 32 + 5] = NAN;
    EXPECT(lwq_quant_nvfp4_max(w, LWQ_F32, 4, 32, 3.0f, NAME, p, sc, &ws, err), LWQ_ENUMERIC, NAME, "[2, 5]");
    EXPECT(lwq_quant_nvfp4_sweep(w, LWQ_F32, 4, 32, 3.0f, NULL, NAME, NULL, sc, err), LWQ_ENUMERIC, NAME, "[2, 5]");
    EXPECT(lwq_quant_fp8(w, LWQ_F32, 4, 32, 3.0f, NAME, q, &ws, err), LWQ_ENUMERIC, NAME, "[2, 5]");
    EXPECT(lwq_quant_fp8_mse(w, LWQ_F32, 4, 32, NAME, &ws, NULL, err), LWQ_ENUMERIC, NAME, "[2, 5]");
    float ba[8];
    EXPECT(lwq_quant_nvfp4_mse(w, LWQ_F32, 4, 32, 3.0f, NAME, ba, err), LWQ_ENUMERIC, NAME, "[2, 5]");
    float a;
    EXPECT(lwq_quant_amax(w, LWQ_F32, 128, NAME, &a, err), LWQ_ENUMERIC, NAME, "element 69");
}

Test(quant_errors, inf_in_bf16_weight, .init = setup)
{
    uint16_t b[64] = {0};
    b[40] = 0xff80; /* -inf */
    EXPECT(lwq_quant_nvfp4_max(b, LWQ_BF16, 2, 32, 1.0f, NAME, p, sc, &ws, err), LWQ_ENUMERIC, NAME, "[1, 8]");
}

Test(quant_errors, nvfp4_needs_in_features_multiple_of_16, .init = setup)
{
    EXPECT(lwq_quant_nvfp4_max(w, LWQ_F32, 4, 24, 3.0f, NAME, p, sc, &ws, err), LWQ_EINVAL, NAME, "24",
           "multiple of 16");
    EXPECT(lwq_quant_nvfp4_sweep(w, LWQ_F32, 8, 8, 3.0f, NULL, NAME, NULL, sc, err), LWQ_EINVAL, NAME, "8");
}

Test(quant_errors, empty_tensor, .init = setup)
{
    EXPECT(lwq_quant_nvfp4_max(w, LWQ_F32, 0, 32, 3.0f, NAME, p, sc, &ws, err), LWQ_EINVAL, NAME, "empty");
    EXPECT(lwq_quant_fp8(w, LWQ_F32, 4, 0, 3.0f, NAME, q, &ws, err), LWQ_EINVAL, NAME, "empty");
    float a;
    EXPECT(lwq_quant_amax(w, LWQ_F32, 0, NAME, &a, err), LWQ_EINVAL, NAME, "empty");
}

Test(quant_errors, unsupported_dtype, .init = setup)
{
    EXPECT(lwq_quant_nvfp4_max(w, LWQ_I32, 4, 32, 3.0f, NAME, p, sc, &ws, err), LWQ_EUNSUPPORTED, NAME, "I32");
}

Test(quant_errors, global_amax_below_tensor_amax, .init = setup)
{
    EXPECT(lwq_quant_nvfp4_max(w, LWQ_F32, 4, 32, 2.0f, NAME, p, sc, &ws, err), LWQ_EINVAL, NAME, "amax 3",
           "global amax 2");
    /* amax 0 claims an all-zero tensor */
    EXPECT(lwq_quant_fp8(w, LWQ_F32, 4, 32, 0.0f, NAME, q, &ws, err), LWQ_EINVAL, NAME);
}

Test(quant_errors, bad_global_amax_values, .init = setup)
{
    EXPECT(lwq_quant_nvfp4_max(w, LWQ_F32, 4, 32, -1.0f, NAME, p, sc, &ws, err), LWQ_ENUMERIC, NAME, "-1");
    EXPECT(lwq_quant_nvfp4_max(w, LWQ_F32, 4, 32, NAN, NAME, p, sc, &ws, err), LWQ_ENUMERIC, NAME, "nan");
    float tiny[16] = {1e-35f};
    EXPECT(lwq_quant_nvfp4_max(tiny, LWQ_F32, 1, 16, 1e-35f, NAME, p, sc, &ws, err), LWQ_ENUMERIC, NAME, "subnormal");
    float huge[16] = {1e30f};
    EXPECT(lwq_quant_nvfp4_sweep(huge, LWQ_F32, 1, 16, 1e30f, NULL, NAME, NULL, sc, err), LWQ_ENUMERIC, NAME,
           "loss");
}

Test(quant_errors, static_block_amax_nan, .init = setup)
{
    float ba[8] = {1, 1, 1, NAN, 1, 1, 1, 1};
    EXPECT(lwq_quant_nvfp4_static(w, LWQ_F32, 4, 32, ba, 3.0f, NAME, p, sc, &ws, err), LWQ_ENUMERIC, NAME,
           "[1, 1]");
    EXPECT(lwq_quant_nvfp4_static(w, LWQ_F32, 4, 32, NULL, 3.0f, NAME, p, sc, &ws, err), LWQ_EINVAL, NAME);
}

Test(quant_errors, hessian_inputs, .init = setup)
{
    double hs[2 * 256] = {0};
    float h[2 * 256];
    w[33] = INFINITY;
    EXPECT(lwq_quant_hessian_accumulate(w, LWQ_F32, 4, 32, hs, NAME, err), LWQ_ENUMERIC, NAME, "token 1",
           "column 1");
    EXPECT(lwq_quant_hessian_finalize(hs, 0, 32, h, NAME, err), LWQ_ENUMERIC, NAME, "no calibration tokens");
    for (int i = 0; i < 512; i++)
        h[i] = 0;
    h[300] = NAN;
    w[33] = 0;
    EXPECT(lwq_quant_nvfp4_sweep(w, LWQ_F32, 4, 32, 3.0f, h, NAME, NULL, sc, err), LWQ_ENUMERIC, NAME, "block 1");
}

Test(quant_errors, dequant_bad_arguments, .init = setup)
{
    float out[128];
    EXPECT(lwq_quant_nvfp4_dequant(p, sc, 0.0f, 4, 32, LWQ_F32, out, err), LWQ_ENUMERIC, "scale 0");
    EXPECT(lwq_quant_nvfp4_dequant(p, sc, 1.0f, 4, 20, LWQ_F32, out, err), LWQ_EINVAL, "[4, 20]");
    EXPECT(lwq_quant_fp8_dequant(q, 1.0f, 16, LWQ_U8, out, err), LWQ_EUNSUPPORTED, "U8");
}
