"""vLLM's Model Optimizer loader reads lwq's checkpoints, on the CPU.

Runs in the `vllm` venv (vllm 0.33.0):

    .peers/venvs/vllm/bin/python peers/clients/check_vllm.py --jobs JOBS.jsonl --out RESULTS.jsonl

One job per line: {"case", "lwq": lwq output dir}.  Per job:

1. Configs: vLLM's Model Optimizer config classes parse both of lwq's configs: config.json's
   quantization_config (what vLLM uses when both exist) and hf_quant_config.json, each through
   the class vLLM's own dispatch picks (`override_quantization_method` of every registered
   method, vllm/model_executor/layers/quantization/modelopt.py), with `from_config`.  The two
   parses must mean the same (class, algorithm, KV-cache algorithm, group size, exclusions,
   per-layer algorithms).  Then `EngineArgs(...).create_engine_config()` builds the engine's
   config from the directory as `vllm serve` does (VLLM_TARGET_DEVICE=cpu): its quant_config and
   the KV-cache dtype it resolves are recorded.
2. Weights: the model class vLLM resolves for the checkpoint is built with vLLM's
   `initialize_model` (so every linear's and every fused-MoE layer's quant method runs its
   `create_weights`), and `model.load_weights` is fed every tensor of every shard of lwq's
   output, as the default loader does.  Kernel selection is patched the way vLLM's own tests
   and CPU runs allow: vLLM's pure-torch `EmulationNvFp4LinearKernel` is registered for the CPU
   platform with vLLM's `register_linear_kernel`, and MoE layers run with
   `moe_backend="emulation"`; no kernel runs.  A tensor is accepted when a parameter's weight
   loader took it (the loader is wrapped to record the tensor's storage) and did not decline it.
   Every parameter element must be written: the model is built and loaded twice, once with
   every parameter byte preset to 0x00 and once to 0xFF; an element that differs between the
   two loads was never written.  Attention's q_scale / prob_scale (and k_scale / v_scale when the
   checkpoint has no KV cache, and the input_scale vLLM registers beside every W4A16_NVFP4 layer
   only to drop it) are parameters Model Optimizer checkpoints do not carry; they are listed
   apart.  MTP tensors (qwen3_5's `mtp.*`, the layers past num_hidden_layers of glm4_moe and the
   DeepSeek family) are dropped by vLLM's main model by its own rule (its WeightsMapper /
   get_spec_layer_idx_from_weight_name: they load into its MTP draft model); they are counted
   apart as "MTP, skipped by vLLM's main model", not as accepted.
   Two more CPU patches, for kernels only (no parameter depends on them): weight-only NVFP4
   linears get vLLM's Marlin kernel object although Marlin needs a GPU, and DeepSeek-V3.2 /
   GLM-5's sparse MLA attention the CUDA FlashMLA sparse backend class (vLLM's CPU platform has
   none: "Sparse Attention is not supported on CPU"), with vLLM's workspace manager set up on
   the CPU; each run lists what it patched (moe_backend_fallback).
3. vLLM's `process_weights_after_loading` (the emulation kernels' post-load processing, which
   also checks that NVFP4 block scales were loaded) is run and its outcome recorded.
"""

import json
import os
import sys
import time
import traceback

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402

_DIST = {"done": False}


def setup_vllm():
    """Kernel selection for a CPU without vLLM's CPU build: vLLM's pure-torch NVFP4 emulation kernel
    registered for the CPU platform (vLLM's register_linear_kernel), and the MoE backend oracles
    falling back to their emulation / Triton backend (as vLLM's tests patch
    modelopt.init_nvfp4_linear_kernel) when no backend supports a CPU device."""
    from vllm.model_executor.kernels.linear import EmulationNvFp4LinearKernel, register_linear_kernel
    from vllm.platforms.interface import PlatformEnum
    import vllm.model_executor.layers.quantization.modelopt as mo
    from vllm.model_executor.layers.fused_moe.oracle import fp8 as ofp8, nvfp4 as onv
    register_linear_kernel(EmulationNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")

    def fallback(select, backend, kernels):
        def sel(*a, **k):
            try:
                return select(*a, **k)
            except (ValueError, NotImplementedError):
                PATCHED.add(backend.value)
                return backend, kernels(backend)[0]
        return sel
    mo.select_nvfp4_moe_backend = fallback(mo.select_nvfp4_moe_backend, onv.NvFp4MoeBackend.EMULATION,
                                           onv.backend_to_kernel_cls)
    mo.select_fp8_moe_backend = fallback(mo.select_fp8_moe_backend, ofp8.Fp8MoeBackend.TRITON,
                                         ofp8.backend_to_kernel_cls)

    # W4A16_NVFP4 linears: vLLM has only GPU weight-only kernels (it forces Marlin, "Marlin FP4 not
    # available" on a CPU).  The parameters are the NVFP4 scheme's own (create_weights does not
    # depend on the kernel), so the Marlin kernel object is built anyway; its
    # process_weights_after_loading (GPU repacking) is then expected to fail, and is recorded.
    from vllm.model_executor.kernels.linear import MarlinNvFp4LinearKernel
    from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearLayerConfig
    init = mo.init_nvfp4_linear_kernel

    def init_a16(use_a16=False):
        try:
            return init(use_a16=use_a16)
        except ValueError:
            if not use_a16:
                raise
            PATCHED.add("w4a16 linear: MarlinNvFp4LinearKernel (not supported on this CPU)")
            return LoaderOnlyMarlin(NvFp4LinearLayerConfig())

    class LoaderOnlyMarlin(MarlinNvFp4LinearKernel):
        @classmethod
        def is_supported(cls, compute_capability=None):
            return True, None
    mo.init_nvfp4_linear_kernel = init_a16

    # DeepSeek-V3.2 / GLM-5 (DSA): vLLM's CPU platform has no sparse MLA backend ("Sparse Attention
    # is not supported on CPU") and refuses to build the attention layers, whose parameters live
    # in the MLA wrapper's and the indexer's linears, not in the backend.  The CUDA platform's
    # FlashMLA sparse backend class is named instead (imported, never run), as on a GPU.
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    get_cls = CpuPlatform.get_attn_backend_cls.__func__

    def attn_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        if attn_selector_config.use_sparse:
            PATCHED.add("sparse MLA attention: FlashMLASparseBackend (CUDA's; not run)")
            return AttentionBackendEnum.FLASHMLA_SPARSE.get_path()
        return get_cls(cls, selected_backend, attn_selector_config, num_heads)
    CpuPlatform.get_attn_backend_cls = classmethod(attn_cls)
    # the sparse backend's impl reserves its scratch from vLLM's workspace manager at construction
    from vllm.v1.worker.workspace import init_workspace_manager
    init_workspace_manager(torch.device("cpu"))

    # Nemotron-H's non-gated ReLU^2 experts (is_act_and_mul=False): FusedMoEConfig refuses them on
    # any platform but CUDA, XPU and ROCm ("is_act_and_mul=False is supported only for CUDA, XPU
    # and ROCm for now"), before any parameter exists.  The check is passed for that one call (the
    # module's current_platform answers is_cuda_alike() = True inside __post_init__); the expert
    # parameters are then the quant method's own, and no MoE kernel runs.
    import vllm.model_executor.layers.fused_moe.config as fmc
    post = fmc.FusedMoEConfig.__post_init__

    class CudaAlike:
        def __init__(self, p):
            self._p = p

        def is_cuda_alike(self):
            return True

        def __getattr__(self, k):
            return getattr(self._p, k)

    def post_init(self):
        if self.activation.is_gated:
            return post(self)
        real = fmc.current_platform
        fmc.current_platform = CudaAlike(real)
        try:
            PATCHED.add("non-gated MoE: FusedMoEConfig's CUDA/XPU/ROCm-only check passed on the CPU (no kernel runs)")
            return post(self)
        finally:
            fmc.current_platform = real
    fmc.FusedMoEConfig.__post_init__ = post_init

    # Kimi-Linear: vLLM 0.33's KimiLinearModel.__init__ (vllm/models/kimi_k3/nvidia/model.py)
    # creates a CUDA stream for overlapping the MLA output gate's GEMM (`aux_stream =
    # torch.cuda.Stream()`), which raises on a machine without a CUDA driver before any parameter
    # exists.  Without CUDA, torch.cuda.Stream gives None, which the decoder layers accept
    # (`aux_stream: torch.cuda.Stream | None = None`); no stream is used by loading.
    if not torch.cuda.is_available():
        class NoStream:  # a class, so that vLLM's `torch.cuda.Stream | None` annotations still evaluate
            def __new__(cls, *a, **k):
                PATCHED.add("torch.cuda.Stream() -> None (no CUDA driver; KimiLinearModel's aux_stream, "
                            "not used by loading)")
                return None
        torch.cuda.Stream = NoStream


PATCHED = set()
CONVERTED = []  # quantized tensors a loader copied into a parameter of another dtype


def parse_configs(d, log):
    """Both of lwq's configs through vLLM's Model Optimizer config classes."""
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config
    with open(os.path.join(d, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    with open(os.path.join(d, "hf_quant_config.json")) as f:
        hq = json.load(f)

    def dispatch(cfg):
        for name in QUANTIZATION_METHODS:
            cls = get_quantization_config(name)
            over = cls.override_quantization_method(cfg, None)
            if over is not None:
                return over
        return None

    # vLLM's dispatch reads the config.json form; the legacy file is parsed by the same class
    name = dispatch(qc)
    if name is None:
        raise ValueError(f"{d}/config.json: no vLLM quantization method claims this quantization_config")
    cls = get_quantization_config(name)
    a, b = cls.from_config(qc), cls.from_config(hq)

    def meaning(c):
        return {"class": type(c).__name__,
                "quant_method": getattr(c, "quant_method", None),
                "kv_cache": getattr(c, "kv_cache_quant_method", getattr(c, "kv_cache_quant_algo", None)),
                "group_size": getattr(c, "group_size", None),
                "exclude_modules": sorted(c.exclude_modules),
                "quantized_layers": {k: v.get("quant_algo") for k, v in
                                     sorted((getattr(c, "quantized_layers", None) or {}).items())}}

    ma, mb = meaning(a), meaning(b)
    log["method"] = name
    log["config_json"] = ma
    log["configs_equal"] = ma == mb
    if ma != mb:
        log["hf_quant_config"] = mb


def overrides(d):
    """What this CPU run changes in vLLM's reading of the checkpoint, with the reason.

    - transformers' DeepseekV3Config (and DeepseekV32Config, GlmMoeDsaConfig) writes no "topk_method"; vLLM's DeepSeek model creates the
      router's e_score_correction_bias only for topk_method "noaux_tc" (DeepSeek-V3's own
      config.json has it), so a transformers-written source fails to load even unquantized
      (the control rows show it): hf_overrides supplies it.
    - minimax_m2: vLLM's MiniMaxM2 model reads `rotary_dim`, `scoring_func` and
      `use_routing_bias` (MiniMax's published config.json has them: 64 = head_dim x
      partial_rotary_factor, "sigmoid", true); transformers 5.14.1's MiniMaxM2Config writes none
      of them (its model is always sigmoid + e_score_correction_bias with
      rope_parameters.partial_rotary_factor), so every transformers-written checkpoint, Model
      Optimizer's exports included, fails ("'MiniMaxM2Config' object has no attribute
      'rotary_dim'"; without use_routing_bias vLLM builds no e_score_correction_bias):
      hf_overrides supplies the three with the values transformers computes with.
    - kimi_linear: transformers 5.23 (the sources' writer) writes its own form of the config,
      which vLLM 0.33's KimiLinearConfig (Moonshot's form) does not read, so every
      transformers-written checkpoint, Model Optimizer's exports included, is built wrong or
      refused.  (a) `mla_use_nope` is not written when it is transformers' default, true (its MLA
      has no RoPE; lwq reads the same default, layout/config/config_kimi.c); vLLM defaults it to
      false and refuses ("Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only").  (b) the layer
      kinds are `layer_types` / `mlp_layer_types` with `linear_num_heads`, `linear_head_dim`,
      `linear_conv_kernel_dim`; vLLM reads `linear_attn_config` (1-based `kda_layers`,
      `full_attn_layers`, `num_heads`, `head_dim`, `short_conv_kernel_size`) and
      `first_k_dense_replace`, and without them builds every layer as MLA + MoE ("KeyError:
      'layers.0.mlp.down_proj.input_scale'").  hf_overrides supplies Moonshot's keys with the
      values of transformers' (docs/FAMILIES.md lists both forms).
    - vLLM's CPU platform has no MLA attention with an FP8 KV cache ("--kv-cache-dtype fp8_e4m3
      is not supported by MLA attention on CPU"): the KV cache is set to bfloat16 for the run;
      the checkpoint's k/v scales still load into the attention layer's KV-cache parameters."""
    if os.environ.get("PEERS_VLLM_NO_OVERRIDES"):
        return {}
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    kw = {}
    if cfg.get("model_type") in ("deepseek_v3", "deepseek_v2", "deepseek_v32", "glm_moe_dsa"):
        if "topk_method" not in cfg:
            kw["hf_overrides"] = {"topk_method": "noaux_tc"}
        kw["kv_cache_dtype"] = "bfloat16"
    if cfg.get("model_type") == "kimi_linear":
        km = {}
        if "mla_use_nope" not in cfg:
            km["mla_use_nope"] = True
        lt = cfg.get("layer_types")
        if "linear_attn_config" not in cfg and lt:
            km["linear_attn_config"] = {
                "kda_layers": [i + 1 for i, t in enumerate(lt) if t == "linear_attention"],
                "full_attn_layers": [i + 1 for i, t in enumerate(lt) if t == "full_attention"],
                "num_heads": cfg["linear_num_heads"], "head_dim": cfg["linear_head_dim"],
                "short_conv_kernel_size": cfg["linear_conv_kernel_dim"]}
        mt = cfg.get("mlp_layer_types")
        if mt and "first_k_dense_replace" not in cfg:
            k = next((i for i, t in enumerate(mt) if t != "dense"), len(mt))
            if all(t == "sparse" for t in mt[k:]):
                km["first_k_dense_replace"] = k
        if km:
            kw["hf_overrides"] = km
    if cfg.get("model_type") == "minimax_m2":
        rp = cfg.get("rope_parameters") or {}
        f = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
        mm = {"rotary_dim": int(cfg["head_dim"] * f), "scoring_func": "sigmoid", "use_routing_bias": True}
        mm = {k: v for k, v in mm.items() if k not in cfg}
        if mm:
            kw["hf_overrides"] = mm
    return kw


def engine_config(d, dtype):
    from vllm.engine.arg_utils import EngineArgs
    args = EngineArgs(model=d, skip_tokenizer_init=True, enforce_eager=True, max_model_len=64,
                      load_format="safetensors", dtype=dtype, **overrides(d))
    return args.create_engine_config()


def parallel(vc):
    """One rank, gloo; the model-parallel groups are rebuilt for each config (MoE configs need the
    expert-parallel group)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel
    with set_current_vllm_config(vc):
        if not _DIST["done"]:
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method="tcp://127.0.0.1:%d" % (29000 + os.getpid() % 1000),
                                         backend="gloo")
            _DIST["done"] = True
        else:
            destroy_model_parallel()
        initialize_model_parallel(1, 1)


def checkpoint_tensors(d):
    from safetensors import safe_open
    p = os.path.join(d, "model.safetensors.index.json")
    shards = sorted(set(json.load(open(p))["weight_map"].values())) if os.path.exists(p) else ["model.safetensors"]
    for shard in shards:
        with safe_open(os.path.join(d, shard), "pt") as sf:
            for k in sorted(sf.keys()):
                yield k, sf.get_tensor(k)


def as_bytes(t):
    """The bytes of a contiguous tensor, 0-d included, as a uint8 view."""
    return t.reshape(-1).view(torch.uint8)


def renamed(model, k):
    """The name vLLM's loader is given for checkpoint tensor k.  Nemotron-H: transformers 5.14.1 (the
    sources' writer) saves the embedding as `backbone.embedding.weight` (its conversion mapping renames
    `embeddings` to `embedding` on save and back on load), and Model Optimizer's export and lwq keep
    that name; vLLM 0.33's NemotronH WeightsMapper maps only `embeddings` (NVIDIA's published
    checkpoints' name) to `embed_tokens`.  The one tensor is fed under NVIDIA's name, recorded."""
    if type(model).__name__ == "NemotronHForCausalLM" and k == "backbone.embedding.weight":
        PATCHED.add("renamed backbone.embedding.weight (transformers' name) to backbone.embeddings.weight "
                    "(NVIDIA's, the one vLLM's NemotronH mapper reads)")
        return "backbone.embeddings.weight"
    return k


def build_and_load(vc, d, fill):
    """The model with every parameter byte preset to `fill`, loaded from d: (params snapshot,
    per-tensor record, loaded names, model)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader
    from vllm.utils.torch_utils import set_default_torch_dtype
    with set_current_vllm_config(vc), set_default_torch_dtype(vc.model_config.dtype):
        model = initialize_model(vllm_config=vc)
        params = dict(model.named_parameters())
        accepted = {}  # storage pointer -> (param, shard/expert args)
        converted = CONVERTED
        for n, p in params.items():
            if p.data.numel():
                as_bytes(p.data).fill_(fill)
            wl = getattr(p, "weight_loader", default_weight_loader)

            def rec(*a, _wl=wl, _n=n, **k):
                r = _wl(*a, **k)
                loaded = a[1] if len(a) > 1 else k.get("loaded_weight")
                param = a[0] if a else k.get("param")
                # FusedMoE's loader returns False for a tensor it does not take
                if r is not False and isinstance(loaded, torch.Tensor):
                    accepted.setdefault(loaded.untyped_storage().data_ptr(), []).append(_n)
                    # a quantized tensor (packed U8, FP8) copied into a parameter of another dtype
                    # would be accepted and wrong
                    q = (torch.uint8, torch.float8_e4m3fn)
                    if isinstance(param, torch.Tensor) and param.dtype != loaded.dtype and \
                            (param.dtype in q or loaded.dtype in q):
                        converted.append(f"{_n}: {loaded.dtype} into {param.dtype}")
                return r
            p.weight_loader = rec
        tensors = {}

        def it():
            for k, t in checkpoint_tensors(d):
                tensors[k] = (t.untyped_storage().data_ptr(), tuple(t.shape), str(t.dtype).replace("torch.", ""), t)
                yield renamed(model, k), t
        loaded = model.load_weights(it())
        snap = {n: p.data.detach().clone() for n, p in model.named_parameters()}
        rows = {k: {"shape": v[1], "dtype": v[2], "params": accepted.get(v[0], [])} for k, v in tensors.items()}
        return snap, rows, loaded, model


def dropped_as_mtp(model, vc, name):
    """True when vLLM's main model discards `name` by design as an MTP (multi-token prediction)
    weight, the way its own load_weights does: the model's WeightsMapper maps it to None (qwen3_5's
    `mtp.` prefix, minimax_m2's layers past num_hidden_layers), or vLLM's
    get_spec_layer_idx_from_weight_name places it in a layer past num_hidden_layers
    (`num_nextn_predict_layers`: glm4_moe, the DeepSeek family; skip_spec_layers)."""
    from vllm.model_executor.models.utils import get_spec_layer_idx_from_weight_name
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    if mapper is not None and mapper._map_name(name) is None:
        return True
    return get_spec_layer_idx_from_weight_name(vc.model_config.hf_text_config, name) is not None


def check_weights(job, vc, log):
    d = job["lwq"]
    CONVERTED.clear()
    parallel(vc)
    snap0, rows, loaded, _ = build_and_load(vc, d, 0x00)
    # a second model registers its attention layers again: it needs a config of its own
    vc = engine_config(d, job.get("dtype", "auto"))
    snap1, _, _, model = build_and_load(vc, d, 0xFF)
    log["model_class"] = type(model).__name__
    log["tensors"] = len(rows)
    # MTP tensors the main model drops by its own rule: they are loaded by vLLM's MTP draft model
    mtp = sorted(k for k, r in rows.items() if not r["params"] and dropped_as_mtp(model, vc, k))
    rej = sorted(k for k, r in rows.items() if not r["params"] and k not in mtp)
    log["tensors_mtp_skipped"] = len(mtp)
    log["tensors_accepted"] = len(rows) - len(rej) - len(mtp)
    log["tensors_not_accepted"] = rej
    kinds = {}
    for k, r in rows.items():
        kind = f"{k.rpartition('.')[2]} {r['dtype']}"
        kinds.setdefault(kind, [0, 0])
        kinds[kind][0] += 1
        kinds[kind][1] += bool(r["params"])
    log["by_kind"] = {k: f"{v[1]}/{v[0]}" for k, v in sorted(kinds.items())}
    unwritten, defaults = [], []
    kv = vc.cache_config.cache_dtype.startswith("fp8")
    has_kv_scales = any(k.endswith((".k_scale", ".v_scale")) for k in rows)
    # weight-only NVFP4: vLLM registers an input_scale beside every W4A16 linear and fused-MoE
    # layer only to take (and then drop: modelopt.py _DropInputScale) one an older export may
    # carry; Model Optimizer 0.47 writes none, so with no input_scale in the checkpoint they
    # stay at their default
    weight_only = (log.get("config_json", {}).get("quant_method") == "W4A16_NVFP4" and
                   not any(k.endswith("input_scale") for k in rows))
    for n in snap0:
        a, b = as_bytes(snap0[n]), as_bytes(snap1[n])
        if a.numel() and not torch.equal(a, b):
            frac = (a != b).float().mean().item()
            leaf = n.rpartition(".")[2]
            if leaf in ("q_scale", "prob_scale") or (leaf in ("k_scale", "v_scale") and not has_kv_scales) or \
                    (weight_only and leaf.endswith("input_scale")):
                defaults.append(n)
            else:
                unwritten.append(f"{n} ({100 * frac:.0f}% of it)")
    log["dtype_converted"] = sorted(set(CONVERTED))
    log["params"] = len(snap0)
    log["params_unwritten"] = unwritten
    log["params_defaulted"] = len(defaults)
    log["kv_cache_dtype"] = vc.cache_config.cache_dtype
    log["kv_scales_in_checkpoint"] = has_kv_scales
    log["kv_declared"] = kv
    try:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.utils import process_weights_after_loading
        with set_current_vllm_config(vc):
            process_weights_after_loading(model, vc.model_config, torch.device("cpu"))
        log["process_weights_after_loading"] = "ok"
    except Exception as e:
        log["process_weights_after_loading"] = f"{type(e).__name__}: {e}"[:300]


def run_job(job):
    log = {"case": job["case"], "lwq": job["lwq"]}
    t0 = time.time()
    try:
        if os.path.exists(os.path.join(job["lwq"], "hf_quant_config.json")):
            parse_configs(job["lwq"], log)
        else:  # a control: the unquantized source through the same loader
            log["configs_equal"] = True
            log["config_json"] = {"class": "none (source)", "quant_method": None, "kv_cache": None}
        vc = engine_config(job["lwq"], job.get("dtype", "auto"))
        log["engine_quant_config"] = type(vc.quant_config).__name__
        log["overrides"] = overrides(job["lwq"])
        PATCHED.clear()
        log["dtype"] = str(vc.model_config.dtype).replace("torch.", "")
        check_weights(job, vc, log)
        log["moe_backend_fallback"] = sorted(PATCHED)
        ok = (log["configs_equal"] and not log["tensors_not_accepted"] and not log["params_unwritten"] and
              not log["dtype_converted"])
        log["status"] = "ok" if ok else "REJECTED"
    except Exception as e:
        log["status"] = f"{type(e).__name__}: {e}"[:600]
        log["traceback"] = traceback.format_exc()[-3000:]
    log["wall_s"] = round(time.time() - t0, 2)
    return log


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jobs
    jobs.main(__doc__, setup_vllm, run_job, "check_vllm")
