"""compressed-tensors reads lwq's checkpoints, transformers runs them.

Runs in the `ct` venv (compressed-tensors 0.20.0, transformers, torch):

    .peers/venvs/ct/bin/python peers/clients/check_ct.py --jobs JOBS.jsonl --out RESULTS.jsonl

One job per line: {"case", "lwq": lwq output dir, "src": its source checkpoint, "data": eval ids
(jsonl of input_ids), "work": scratch dir}.  Per job:

1. compressed-tensors: lwq's NVFP4 linears go through compressed-tensors' own Model Optimizer
   converter (`ModelOptNvfp4Converter`, compressed_tensors/entrypoints/convert/converters/
   modelopt_nvfp4.py), driven by `convert_checkpoint`, which first runs the converter's
   `validate` on every shard: every input_scale / weight_scale / weight_scale_2 (and k/v scale)
   of a module that lwq's exclusion list does not exclude must belong to a packed U8 weight.
   compressed-tensors 0.20.0 has no Model Optimizer FP8 converter: a Model Optimizer FP8 linear
   (F8_E4M3 weight, F32 weight_scale and input_scale scalars) already has the names of
   compressed-tensors' float-quantized format, so those are declared as a float-quantized
   config group (per-tensor, static) and read as they are.  Then compressed-tensors'
   `CompressedTensorsDequantizer` (converters/ct_dequantizer.py) writes a dense checkpoint; its
   `validate` refuses a targeted module without its scales and any quantization parameter left
   over on a module that is not ignored.  The exclusion list is lwq's own `exclude_modules`
   (Model Optimizer's fnmatch globs, written for compressed-tensors as `re:` patterns), plus the
   modules the architecture does not run as nn.Linear (embeddings, conv1d), which
   compressed-tensors would otherwise take for linears because it matches by name here.
2. The dense checkpoint has the source's tensor names, shapes and dtypes, and its weights are
   lwq's dequantization (e2m1 * (float(E4M3 scale) * weight_scale_2), FORMATS.md 2) up to the
   rounding of compressed-tensors' own arithmetic (it inverts weight_scale_2 and divides).
3. transformers loads the source and the dense checkpoint (AutoModelForCausalLM, the source
   dtype) and computes, on the eval ids, one sequence at a time (no padding), the f32 logits of
   the final hidden state times lm_head (as `lwq eval` does), then per next-token prediction
   log p = z - logsumexp(z) in double, KL(P_src || P_q), top-1 agreement, nll; mean KL,
   exp(mean nll).  The same models in float64 (weights upcast: the F32 dequantization) give the
   reference the rounding-noise bound is measured against (run.py states the bound).
"""

import fnmatch
import json
import math
import os
import shutil
import sys
import time
import traceback

import torch

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def ct_pattern(glob):
    """A Model Optimizer exclude entry (fnmatch glob or plain name) as compressed-tensors writes one."""
    return glob if not any(ch in glob for ch in "*?[") else "re:" + fnmatch.translate(glob)


def read_quant(d):
    with open(os.path.join(d, "hf_quant_config.json")) as f:
        q = json.load(f)["quantization"]
    return q


def shards(d):
    """The safetensors files of a checkpoint: its index's, or the single model.safetensors."""
    p = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(p):
        return ["model.safetensors"]
    with open(p) as f:
        return sorted(set(json.load(f)["weight_map"].values()))


def tensor_names(d):
    from safetensors import safe_open
    out = []
    for shard in shards(d):
        with safe_open(os.path.join(d, shard), "pt") as sf:
            out += list(sf.keys())
    return out


def load_all(d):
    from safetensors import safe_open
    out = {}
    for shard in shards(d):
        with safe_open(os.path.join(d, shard), "pt") as sf:
            for k in sf.keys():
                out[k] = sf.get_tensor(k)
    return out


def not_linear_modules(src, quantized):
    """Modules of the source architecture that own a `weight` but are not nn.Linear (embeddings,
    norms, an unquantized conv1d) and that the checkpoint does not quantize (`quantized`: module
    names with a weight_scale): compressed-tensors' name matching would take them for linears.
    A quantized conv1d (Qwen3-Next FP8, as Model Optimizer writes it) stays a target."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(src)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg)
    out = []
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Linear) or name in quantized:
            continue
        if isinstance(getattr(mod, "weight", None), torch.nn.Parameter):
            out.append(name)
    return out


def fp8_scheme(targets):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    args = dict(num_bits=8, type="float", strategy="tensor", symmetric=True, dynamic=False)
    return QuantizationScheme(targets=targets, weights=QuantizationArgs(**args),
                              input_activations=QuantizationArgs(**args))


def write_ct_config(d, nvfp4_config, fp8_targets, ignore):
    """config.json's quantization_config for compressed-tensors: the converter's NVFP4 group (if
    any) plus a float-quantized FP8 group for the FP8 linears."""
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.config import CompressionFormat
    groups = dict(nvfp4_config.config_groups) if nvfp4_config is not None else {}
    if fp8_targets:
        s = fp8_scheme(fp8_targets)
        s.format = CompressionFormat.float_quantized.value
        groups["config_group_fp8"] = s
    qc = QuantizationConfig(config_groups=groups, ignore=list(ignore),
                            kv_cache_scheme=nvfp4_config.kv_cache_scheme if nvfp4_config else None,
                            format=(CompressionFormat.mixed_precision.value if nvfp4_config and fp8_targets else
                                    CompressionFormat.nvfp4_pack_quantized.value if nvfp4_config else
                                    CompressionFormat.float_quantized.value),
                            quantization_status="compressed")
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    c["quantization_config"] = qc.model_dump()
    with open(p, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def to_ct(job, q, ct_dir, log):
    """lwq's checkpoint in compressed-tensors' format (ct_dir), through its converter."""
    from compressed_tensors.entrypoints.convert import ModelOptNvfp4Converter, convert_checkpoint
    from compressed_tensors.quantization import QuantizationArgs, QuantizationType
    algo = q["quant_algo"]
    layers = q.get("quantized_layers") or {}
    nvfp4 = [m for m, v in layers.items() if v.get("quant_algo") == "NVFP4"]
    fp8 = [m for m, v in layers.items() if v.get("quant_algo") == "FP8"]
    excl = list(q.get("exclude_modules") or [])
    names = tensor_names(job["lwq"])
    quantized = {n[:-len(".weight_scale")] for n in names if n.endswith(".weight_scale")}
    ignore = [ct_pattern(g) for g in excl] + not_linear_modules(job["src"], quantized)
    # an FP8 KV cache with calibrated k/v scales is compressed-tensors' static FP8 kv_cache_scheme;
    # Model Optimizer's fp8_cast (lwq's default) writes kv_cache_quant_algo FP8 and no scales at
    # all (a reader uses 1.0), which that scheme cannot describe: the converter would then demand
    # a k_scale for every attention it targets by name
    kv_scales = any(n.endswith((".k_scale", ".v_scale")) for n in names)
    kv = QuantizationArgs(num_bits=8, dynamic=False, type=QuantizationType.FLOAT) \
        if q.get("kv_cache_quant_algo") == "FP8" and kv_scales else None
    log["kv_scales"] = kv_scales
    log["exclude_modules"] = excl
    log["ignore"] = ignore
    shutil.rmtree(ct_dir, ignore_errors=True)
    if algo == "NVFP4" or (algo == "MIXED_PRECISION" and nvfp4):
        # the FP8 linears of a MIXED_PRECISION checkpoint are not the NVFP4 converter's: left to
        # the float-quantized group below
        conv = ModelOptNvfp4Converter(ignore=ignore + fp8, targets=["Linear"] if algo == "NVFP4" else nvfp4,
                                      kv_cache_scheme=kv)
        convert_checkpoint(job["lwq"], ct_dir, conv, max_workers=1, device="cpu")
        log["converter"] = "ModelOptNvfp4Converter"
        nv_cfg = conv.update_config(None)
        write_ct_config(ct_dir, nv_cfg, fp8, ignore)
    elif algo in ("FP8", "MIXED_PRECISION"):
        shutil.copytree(job["lwq"], ct_dir, ignore=shutil.ignore_patterns("*.layerwise_resume"))
        log["converter"] = "none (FP8: float-quantized names already)"
        write_ct_config(ct_dir, None, ["Linear"] if algo == "FP8" else fp8, ignore)
    else:
        raise ValueError(f"{job['lwq']}: quant_algo {algo} is neither NVFP4, FP8 nor MIXED_PRECISION")
    ct_t = load_all(ct_dir)
    log["ct_tensors"] = len(ct_t)
    log["ct_weight_packed"] = sum(n.endswith(".weight_packed") for n in ct_t)
    log["ct_input_global_scale"] = sum(n.endswith(".input_global_scale") for n in ct_t)
    log["ct_fp8_weights"] = sum(n.endswith(".weight") and t.dtype == torch.float8_e4m3fn for n, t in ct_t.items())


class DropActivationScales:
    """Removes the static activation scales (input_global_scale, input_scale) of the quantized
    linears before CompressedTensorsDequantizer: its `process` (compressed-tensors 0.20.0,
    converters/ct_dequantizer.py) pops only the weight's compression parameters and keeps the
    rest, and its `validate` then refuses the activation scales of any W4A4 / W8A8 checkpoint as
    "residual quantization params".  A dense model has no activation quantization, so they are
    dropped; everything else reaches the dequantizer unchanged."""

    NAMES = ("input_global_scale", "input_scale")

    def __init__(self):
        self.dropped = 0

    def process(self, tensors):
        for n in [n for n in tensors if n.rpartition(".")[2] in self.NAMES]:
            del tensors[n]
            self.dropped += 1
        return tensors

    def validate(self, tensors):
        return self.process(dict(tensors))

    def update_config(self, config):
        return config

    def update_model_config(self, model_config):
        return model_config

    def get_dependencies(self, weight_name):
        return set()


def dequantize(ct_dir, out_dir, dtype):
    from compressed_tensors.entrypoints.convert import CompressedTensorsDequantizer, convert_checkpoint
    shutil.rmtree(out_dir, ignore_errors=True)
    convert_checkpoint(ct_dir, out_dir, [DropActivationScales(), CompressedTensorsDequantizer(ct_dir, dtype=dtype)],
                       max_workers=1, device="cpu")
    os.remove(os.path.join(out_dir, "hf_quant_config.json")) if os.path.exists(
        os.path.join(out_dir, "hf_quant_config.json")) else None


def lwq_dequant(t, name):
    """lwq's dequantization of linear `name` from its own tensors (FORMATS.md 2 / 3), f32."""
    w = t[name + ".weight"]
    if w.dtype == torch.uint8:
        lo, hi = (w & 0x0F).long(), (w >> 4).long()
        codes = torch.stack([lo, hi], dim=-1).reshape(w.shape[0], w.shape[1] * 2)
        v = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
        bs = t[name + ".weight_scale"].float() * t[name + ".weight_scale_2"].float()  # f32 product first
        return v * bs.repeat_interleave(16, dim=1)
    return w.float() * t[name + ".weight_scale"].float()


def check_dense(job, dense_dir, log):
    """Names, shapes and dtypes of the dense checkpoint against the source; its weights against lwq's
    own dequantization."""
    src, dense, q = load_all(job["src"]), load_all(dense_dir), load_all(job["lwq"])
    missing = sorted(set(src) - set(dense))
    extra = sorted(set(dense) - set(src))
    bad = [n for n in src if n in dense and (tuple(src[n].shape) != tuple(dense[n].shape) or
                                             src[n].dtype != dense[n].dtype)]
    log["dense_tensors"] = len(dense)
    log["names_shapes_dtypes_equal"] = not (missing or extra or bad)
    if missing or extra or bad:
        log["dense_mismatch"] = {"missing": missing[:8], "extra": extra[:8], "shape_or_dtype": bad[:8]}
    worst, at, nq = 0.0, None, 0
    for n in dense:
        m = n[:-len(".weight")] if n.endswith(".weight") else None
        if m is None or m + ".weight_scale" not in q:
            continue
        nq += 1
        ref = lwq_dequant(q, m)
        got = dense[n].float()
        d = ((got - ref).abs() / ref.abs().clamp_min(torch.finfo(torch.float32).tiny)).masked_fill(ref == 0, 0)
        d = torch.where((ref == 0) & (got != 0), torch.tensor(float("inf")), d)
        if d.max().item() > worst:
            worst, at = d.max().item(), n
    log["dequantized_linears"] = nq
    log["dequant_worst_rel_vs_lwq"] = worst
    log["dequant_worst_at"] = at


def read_ids(path):
    with open(path) as f:
        return [json.loads(ln)["input_ids"] for ln in f if ln.strip()]


def final_logits(model, ids):
    """f32 logits of one sequence: final hidden state (after the final norm) times lm_head in f32."""
    with torch.no_grad():
        h = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        w = model.get_output_embeddings().weight
        return (h.to(torch.float64 if h.dtype == torch.float64 else torch.float32) @
                w.to(h.dtype if h.dtype == torch.float64 else torch.float32).T).double()


def metrics(pairs):
    """pairs: per sequence (logits_src, logits_q, ids) -> the lwq eval metrics."""
    kl = top1 = nll_s = nll_q = 0.0
    n = 0
    for zs, zq, ids in pairs:
        ls, lq = torch.log_softmax(zs[:-1], -1), torch.log_softmax(zq[:-1], -1)
        tgt = torch.tensor(ids[1:])
        kl += (ls.exp() * (ls - lq)).sum().item()
        top1 += (zs[:-1].argmax(-1) == zq[:-1].argmax(-1)).sum().item()
        nll_s -= ls.gather(1, tgt[:, None]).sum().item()
        nll_q -= lq.gather(1, tgt[:, None]).sum().item()
        n += len(ids) - 1
    return {"kl": kl / n, "top1_agree": top1 / n, "ppl_src": math.exp(nll_s / n), "ppl": math.exp(nll_q / n),
            "nll_src": nll_s / n, "nll": nll_q / n, "tokens": n}


def kl_between(a, b):
    """mean KL(P_a || P_b) over the predictions of two runs of one model."""
    kl, n = 0.0, 0
    for za, zb in zip(a, b):
        la, lb = torch.log_softmax(za[:-1], -1), torch.log_softmax(zb[:-1], -1)
        kl += (la.exp() * (la - lb)).sum().item()
        n += za.shape[0] - 1
    return kl / n


def write_exact(job, out_dir, dtype):
    """The source checkpoint with every quantized linear replaced by its exact dequantization from
    lwq's tensors (lwq_dequant, f32), stored in `dtype`: for an F32 dtype this is the model that
    `lwq eval --weights-only` runs, bit for bit in the weights."""
    from safetensors.torch import save_file
    src, q = load_all(job["src"]), load_all(job["lwq"])
    out = {}
    for n, t in src.items():
        m = n[:-len(".weight")] if n.endswith(".weight") else None
        out[n] = lwq_dequant(q, m).to(dtype) if m and m + ".weight_scale" in q else t.to(dtype)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    save_file(out, os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(job["src"], "config.json")) as f:
        cfg = json.load(f)
    cfg["dtype"] = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def source_dtype(src):
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.get("dtype") or cfg.get("torch_dtype")]


def logits_of(path, dtype, ids, f64=False):
    from transformers import AutoModelForCausalLM
    kw = dict(attn_implementation="eager")
    if f64:
        kw["experts_implementation"] = "eager"  # grouped_mm has no float64
    m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw).eval()
    if f64:
        m = m.to(torch.float64)
    return [final_logits(m, s) for s in ids]


def mean_range(a, b):
    """mean over predictions of max_v(e) - min_v(e), e = logits_b - logits_a: it bounds how far the
    noise e moves log p(token) = z - logsumexp(z), hence nll, exactly."""
    r, n = 0.0, 0
    for za, zb in zip(a, b):
        e = (zb - za)[:-1]
        r += (e.max(-1).values - e.min(-1).values).sum().item()
        n += e.shape[0]
    return r / n


def run_transformers(job, dense_dir, log):
    """transformers' metrics of: the compressed-tensors dense checkpoint (`transformers`), the exact
    dequantization in the source dtype (`transformers_exact`), and both models in float64 with the
    exact F32 dequantization (`f64`, the reference); the rounding noise of each run is
    KL(P_f64 || P_run), summed over its source and quantized streams."""
    ids = read_ids(job["data"])
    dt = source_dtype(job["src"])
    exact = os.path.join(job["work"], "exact")
    exact32 = os.path.join(job["work"], "exact-f32")
    write_exact(job, exact, dt)
    if dt == torch.float32:
        exact32 = exact
    else:
        write_exact(job, exact32, torch.float32)
    zs = logits_of(job["src"], dt, ids)
    zct = logits_of(dense_dir, dt, ids)
    zex = logits_of(exact, dt, ids)
    zs64 = logits_of(job["src"], torch.float32, ids, f64=True)
    zq64 = logits_of(exact32, torch.float32, ids, f64=True)
    log["transformers"] = metrics(list(zip(zs, zct, ids)))
    log["transformers_exact"] = metrics(list(zip(zs, zex, ids)))
    log["f64"] = metrics(list(zip(zs64, zq64, ids)))
    log["noise_src"] = kl_between(zs64, zs)
    log["noise_ct"] = log["noise_src"] + kl_between(zq64, zct)
    log["noise_exact"] = log["noise_src"] + kl_between(zq64, zex)
    log["range_src"] = mean_range(zs64, zs)
    log["range_ct"] = mean_range(zq64, zct)
    log["range_exact"] = mean_range(zq64, zex)


def run_job(job):
    log = {"case": job["case"], "lwq": job["lwq"]}
    t0 = time.time()
    try:
        q = read_quant(job["lwq"])
        log["quant_algo"] = q["quant_algo"]
        ct_dir = os.path.join(job["work"], "ct")
        to_ct(job, q, ct_dir, log)
        log["ct_converted"] = True
        dense = os.path.join(job["work"], "dense")
        dequantize(ct_dir, dense, source_dtype(job["src"]))
        log["ct_dequantized"] = True
        check_dense(job, dense, log)
        run_transformers(job, dense, log)
        log["status"] = "ok"
    except Exception as e:  # one case's failure is a row of the table, not the end of the run
        log["status"] = f"{type(e).__name__}: {e}"[:600]
        log["traceback"] = traceback.format_exc()[-3000:]
    log["wall_s"] = round(time.time() - t0, 2)
    return log


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jobs
    jobs.main(__doc__, None, run_job, "check_ct")
