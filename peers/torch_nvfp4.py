"""The patched peer: Model Optimizer's Triton NVFP4 fake quantization replaced by pure torch.

Model Optimizer 0.47 fake-quantizes static NVFP4 weights (the mse / fp8_scale_sweep /
local_hessian / GPTQ paths) with Triton kernels that need CUDA:
  * StaticBlockwiseFP4FakeQuantFunction -> triton_kernel.static_blockwise_fp4_fake_quant
    (modelopt/torch/quantization/tensor_quant.py), called from
    StaticBlockScaleQuantizer._fake_quantize (nn/modules/tensor_quantizer.py);
  * dynamic_block_quantize_op (tensor_quant.py) -> triton fp4_fake_quant_block or the CUDA
    extension (dynamic NVFP4 blocks: the activations of a quantized forward, which
    local_hessian and GPTQ's layerwise pass run).
Its own CPU unit tests monkeypatch the first one the same way (tests/unit/torch/quantization/
test_lsq.py, test_nvfp4_four_over_six.py).  The replacements below compute what the kernels
compute, step for step as the kernels' source states it:
  block scale  = amax / 6, fake-quantized to E4M3 against global_amax / 6 (compute_fp4_scales:
                 scaled_e4m3_impl, which on the CPU is Model Optimizer's own fp8_eager);
  element      = |x| / scale rounded to the E2M1 grid with the kernel's boundaries
                 (<=0.25, <0.75, <=1.25, <1.75, <=2.5, <3.5, <=5 -> 0, .5, 1, 1.5, 2, 3, 4, else 6),
                 times scale, the sign of x; a zero scale gives 0 (nvfp4_scalar_quant).
Everything a run made this way writes is labelled "patched" by the harness.
"""

import torch

E4M3_MAX = 448.0


def fp4_round_magnitude(a):
    """|x| / scale to the nearest E2M1 magnitude, the kernel's boundaries."""
    out = torch.full_like(a, 6.0)
    for bound, val, strict in ((5.0, 4.0, False), (3.5, 3.0, True), (2.5, 2.0, False), (1.75, 1.5, True),
                               (1.25, 1.0, False), (0.75, 0.5, True), (0.25, 0.0, False)):
        m = a < bound if strict else a <= bound
        out = torch.where(m, torch.full_like(a, val), out)
    return out


def scalar_quant(x, scale):
    """nvfp4_scalar_quant: x (..., 16) float32, scale (..., 1) float32."""
    zero = scale == 0.0
    safe = torch.where(zero | torch.isnan(scale) | torch.isinf(scale), torch.ones_like(scale), scale)
    q = fp4_round_magnitude(x.abs() / safe) * safe
    q = torch.where(x >= 0, q, -q)
    return torch.where(zero, torch.zeros_like(q), q)


def compute_fp4_scales(amax, global_amax=None, quantize_block_scales=True, fp8_max_for_normalization=E4M3_MAX):
    from modelopt.torch.quantization.tensor_quant import scaled_e4m3_impl

    amax = amax.float()
    scale = amax / 6.0
    if quantize_block_scales:
        if global_amax is None:
            global_amax = amax.max()
        global_amax = global_amax.float()
        scale = scaled_e4m3_impl(scale, global_amax * (E4M3_MAX / fp8_max_for_normalization) / 6.0)
    return scale


def static_blockwise_fp4_fake_quant(x, amax, global_amax=None, quantize_block_scales=True,
                                    fp8_max_for_normalization=E4M3_MAX, out_dtype=None, pass_through_bwd=False):
    nblocks = amax.numel()
    if x.numel() % nblocks:
        raise ValueError(f"x.numel() {x.numel()} is not a multiple of amax.numel() {nblocks}")
    out_dtype = out_dtype or x.dtype
    scale = compute_fp4_scales(amax, global_amax, quantize_block_scales, fp8_max_for_normalization)
    xb = x.contiguous().view(nblocks, -1).float()
    y = scalar_quant(xb, scale.contiguous().view(nblocks, 1))
    return y.to(out_dtype).view(x.shape)


def dynamic_fp4_fake_quant(x, block_size, amax):
    """Dynamic NVFP4 (per-block amax from the data, the calibrated per-tensor amax given): what
    fp4_fake_quant_kernel (kernels/quantization/gemm/fp4_kernel_hopper.py) computes:
    global_scale = amax / (6 * 448); block scale = e4m3(min(block_max / (6 * global_scale), 448))
    * global_scale (fp8_quantize_scale), 1.0 where below 1e-5; elements as nvfp4_scalar_quant."""
    shape = x.shape
    xb = x.float().reshape(-1, block_size)
    gs = amax.float().reshape(-1).amax() / (6.0 * E4M3_MAX)
    gs = torch.where(gs > 0, gs, torch.full_like(gs, 1e-12))
    bmax = xb.abs().amax(dim=-1, keepdim=True)
    s = torch.clamp(bmax / (6.0 * gs), max=E4M3_MAX).to(torch.float8_e4m3fn).float() * gs
    s = torch.where(s >= 1e-5, s, torch.ones_like(s))
    q = fp4_round_magnitude(xb.abs() / s) * s
    return torch.where(xb >= 0, q, -q).to(x.dtype).reshape(shape)


def unquantized_hessian_inputs():
    """For one comparison only (labelled so): local_hessian_calibrate (model_calib.py) builds its
    per-block Hessians in a forward with weight fake quant disabled and every input quantizer
    left on, so each linear's H comes from activations that went through NVFP4-quantized
    activations upstream.  This turns the input quantizers off too for that forward, giving the
    Hessian of the plain calibration activations -- what lwq's local_hessian uses."""
    import modelopt.torch.quantization.model_calib as mc

    orig = mc.set_quantizer_by_cfg_context

    def ctx(model, cfg):
        if cfg == [{"quantizer_name": "*weight_quantizer", "enable": False}]:
            cfg = cfg + [{"quantizer_name": "*input_quantizer", "enable": False}]
        return orig(model, cfg)

    mc.set_quantizer_by_cfg_context = ctx
    print("torch_nvfp4: local_hessian's Hessian forward runs with unquantized inputs", flush=True)


def install():
    import modelopt.torch.quantization.nn.modules.tensor_quantizer as tqm
    import modelopt.torch.quantization.tensor_quant as tq

    # the registered torch op (tensorrt::dynamic_block_quantize_op) that
    # _dynamic_block_quantize_forward calls through the module global dynamic_block_quantize_op
    orig_dynamic = tq.dynamic_block_quantize_op

    def dynamic(inputs, block_size, amax, num_bits, exponent_bits, scale_num_bits, scale_exponent_bits):
        if (exponent_bits, num_bits - exponent_bits - 1) == (2, 1) and \
                (scale_exponent_bits, scale_num_bits - scale_exponent_bits - 1) == (4, 3) and amax is not None:
            return dynamic_fp4_fake_quant(inputs, block_size, amax)
        return orig_dynamic(inputs, block_size, amax, num_bits, exponent_bits, scale_num_bits, scale_exponent_bits)

    tq.dynamic_block_quantize_op = dynamic
    tq.static_blockwise_fp4_fake_quant = static_blockwise_fp4_fake_quant
    tqm.static_blockwise_fp4_fake_quant = static_blockwise_fp4_fake_quant
    print("torch_nvfp4: Model Optimizer's Triton NVFP4 fake quant replaced by pure torch (patched peer)", flush=True)
