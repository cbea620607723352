#include "kernels/quant_check.h"

#include <math.h>

#include "kernels/quant.h"

const char *lwq_quant_name(const char *name) { return name ? name : "(unnamed)"; }

int lwq_quant_check_shape(const char *name, const void *w, lwq_dtype dt, int64_t rows, int64_t cols, int block16,
                          lwq_error *err)
{
    name = lwq_quant_name(name);
    if (dt != LWQ_F32 && dt != LWQ_F16 && dt != LWQ_BF16)
        return lwq_errf(err, LWQ_EUNSUPPORTED, "tensor %s: dtype %s cannot be quantized (expected BF16, F16 or F32)",
                        name, lwq_dtype_name(dt));
    if (rows <= 0 || cols <= 0)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: empty or negative shape [%lld, %lld]", name, (long long)rows,
                        (long long)cols);
    if (rows > INT64_MAX / 8 / cols)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: shape [%lld, %lld] overflows", name, (long long)rows,
                        (long long)cols);
    if (block16 && cols % LWQ_NVFP4_BLOCK != 0)
        return lwq_errf(err, LWQ_EINVAL,
                        "tensor %s: in-features %lld is not a multiple of %d (NVFP4 block size)", name,
                        (long long)cols, LWQ_NVFP4_BLOCK);
    if (!w)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL data", name);
    return 0;
}

int lwq_quant_check_global(const char *name, float amax, float max_amax, float *eff, lwq_error *err)
{
    name = lwq_quant_name(name);
    if (!isfinite(amax) || amax < 0.0f)
        return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: global amax %g is not a finite value >= 0", name, (double)amax);
    if (amax == 0.0f) {
        *eff = 1.0f;
        return 1;
    }
    if (amax < LWQ_QUANT_AMAX_MIN)
        return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: amax %g is below %g; its scales would be subnormal", name,
                        (double)amax, (double)LWQ_QUANT_AMAX_MIN);
    if (amax > max_amax)
        return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: amax %g exceeds %g, the largest the search's loss can hold",
                        name, (double)amax, (double)max_amax);
    *eff = amax;
    return 0;
}

int lwq_quant_err_nonfinite(const char *name, int64_t idx, int64_t cols, lwq_error *err)
{
    return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: non-finite value (NaN or Inf) at [%lld, %lld]",
                    lwq_quant_name(name), (long long)(idx / cols), (long long)(idx % cols));
}

int lwq_quant_err_over_global(const char *name, float found, float global_amax, lwq_error *err)
{
    return lwq_errf(err, LWQ_EINVAL, "tensor %s: its amax %g exceeds the global amax %g it was given",
                    lwq_quant_name(name), (double)found, (double)global_amax);
}

int lwq_quant_check_dq(const void *in, const void *out, lwq_dtype dt, int64_t rows, int64_t cols, int block16,
                       float ws, lwq_error *err)
{
    if (dt != LWQ_F32 && dt != LWQ_BF16 && dt != LWQ_F16)
        return lwq_errf(err, LWQ_EUNSUPPORTED, "dequantize: output dtype %s (expected F32, BF16 or F16)",
                        lwq_dtype_name(dt));
    if (rows <= 0 || cols <= 0 || rows > INT64_MAX / 8 / cols || (block16 && cols % LWQ_NVFP4_BLOCK))
        return lwq_errf(err, LWQ_EINVAL, "dequantize: bad shape [%lld, %lld]", (long long)rows, (long long)cols);
    if (!in || !out)
        return lwq_errf(err, LWQ_EINVAL, "dequantize: NULL buffer");
    if (!isfinite(ws) || ws <= 0.0f)
        return lwq_errf(err, LWQ_ENUMERIC, "dequantize: scale %g is not finite and > 0", (double)ws);
    return 0;
}

int lwq_quant_mse_argmin(const double *loss, int64_t rows, int steps)
{
    int best = 0;
    double best_loss = 0.0;
    for (int k = 0; k < steps; k++) {
        double t = 0.0;
        for (int64_t r = 0; r < rows; r++)
            t += loss[r * steps + k];
        if (k == 0 || t < best_loss) {
            best = k;
            best_loss = t;
        }
    }
    return best;
}
