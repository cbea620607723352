"""Model Optimizer on the CPU: what examples/hf_ptq/hf_ptq.py does, without its GPU checks.

hf_ptq.py refuses to start without a GPU; this driver does the same three steps:
  1. the quantization config: ``QUANT_CFG_CHOICES[qformat]`` updated with
     ``KV_QUANT_CFG_CHOICES[kv]`` through ``mtq.update_quant_cfg_with_kv_cache_quant``
     (hf_ptq's --qformat / --kv_cache_qformat path), or ``load_recipe(name).quantize``
     (its --recipe path);
  2. ``mtq.quantize(model, cfg, forward_loop)`` with hf_ptq's own forward loop
     (``create_forward_loop(dataloader=...)``) over the shared calibration ids;
  3. ``export_hf_checkpoint(model, export_dir=OUT)``.
The model is loaded as hf_ptq's get_model loads it: the class config.json's ``architectures``
names, ``from_pretrained(dtype="auto")`` on the CPU.  Two more of hf_ptq's steps (examples/hf_ptq at
Model-Optimizer a2fbac7ba; the 0.47.0 wheel ships no examples):
  * a VLM wrapper (``model.model.language_model``: Qwen3_5[Moe]ForConditionalGeneration) with
    --qformat: only the language model is quantized and calibrated
    (``extract_and_prepare_language_model_from_vl``: every other child of the ancestors gets
    quantizers disabled; the forward loop runs the language model); with --recipe the whole
    model is, as hf_ptq keeps the outer model for recipes;
  * MTP weights (``load_mtp_weights``): tensors of the checkpoint with "mtp" in their name that
    the model does not hold are passed to the export as ``extra_state_dict`` and their prefixes
    set as ``model._mtp_layer_prefixes`` (the export adds ``PREFIX*`` to exclude_modules).

    python peers/modelopt_driver.py --src SRC --out OUT --calib ids.jsonl --qformat nvfp4 --kv fp8
    python peers/modelopt_driver.py --src SRC --out OUT --calib ids.jsonl --recipe general/ptq/fp8_default-kv_fp8

--patch torch-nvfp4 is the *patched peer*: Model Optimizer's static NVFP4 fake quant
(StaticBlockwiseFP4FakeQuantFunction, a Triton kernel that needs CUDA) is replaced by a
pure-torch one with the same arithmetic (peers/torch_nvfp4.py), as its own CPU tests
monkeypatch it, so that mse / fp8_scale_sweep / local_hessian / GPTQ run on the CPU.
Outputs made that way are labelled patched in every table.
"""

import argparse
import copy
import json
import os
import shutil
import sys
import time

import torch


def load_ids(path, limit=None):
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            ids = json.loads(line).get("input_ids")
            if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
                sys.exit(f"modelopt_driver: {path}:{i + 1}: no input_ids list of integers")
            rows.append(ids)
    if limit:
        rows = rows[:limit]
    if len({len(r) for r in rows}) != 1:
        sys.exit(f"modelopt_driver: {path}: rows of different lengths (the harness uses unpadded batches)")
    return torch.tensor(rows, dtype=torch.long)


def language_model_of_vl(model):
    """hf_ptq's extract_and_prepare_language_model_from_vl: the language model of a VLM wrapper,
    every other child of its ancestors with quantizers disabled; the model itself otherwise."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export.model_utils import get_language_model_from_vl

    lineage = get_language_model_from_vl(model)
    if lineage is None:
        return model
    lm = lineage.pop(-1)
    memo = set(lineage) | {lm}
    for anc in lineage:
        for _, mod in anc.named_children():
            if mod not in memo:
                mtq.quantize(mod, {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": "max"},
                             forward_loop=None)
                memo.add(mod)
    return lm


def mtp_weights(model, src):
    """hf_ptq's load_mtp_weights for a checkpoint of one or more .safetensors files: the tensors
    whose name holds "mtp" (and the inlined layers num_hidden_layers.. of num_nextn_predict_layers);
    those the model holds are loaded into it, the others returned for extra_state_dict."""
    from safetensors.torch import safe_open

    cfg = model.config
    nextn = int(getattr(cfg, "num_nextn_predict_layers", 0) or 0)
    inl = tuple(f"model.layers.{i}." for i in range(cfg.num_hidden_layers, cfg.num_hidden_layers + nextn)) \
        if nextn else ()
    tensors = {}
    for fn in sorted(os.listdir(src)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(src, fn), framework="pt", device="cpu") as f:
                for k in f.keys():  # noqa: SIM118
                    if (inl and k.startswith(inl)) or "mtp" in k:
                        tensors[k] = f.get_tensor(k)
    if not tensors:
        return [], {}
    prefixes = {p[:-1] for p in inl}
    for k in tensors:
        if k.startswith(inl) and inl:
            continue
        parts = k.split(".")
        if parts[0] != "model":
            prefixes.add(parts[0])
        for i, part in enumerate(parts):
            if part == "layers" and i + 1 < len(parts) and parts[i + 1].isdigit():
                prefixes.add(".".join(parts[:i + 2]))
                break
    state = model.state_dict()
    held = {k: v for k, v in tensors.items() if k in state}
    if held:
        model.load_state_dict(held, strict=False)
    return sorted(prefixes), {k: v for k, v in tensors.items() if k not in state}


def build_cfg(a):
    import modelopt.torch.quantization as mtq
    from modelopt.recipe import ModelOptPTQRecipe, load_recipe
    from modelopt.recipe.presets import KV_QUANT_CFG_CHOICES, QUANT_CFG_CHOICES

    if a.recipe:
        recipe = load_recipe(a.recipe)
        if not isinstance(recipe, ModelOptPTQRecipe):
            sys.exit(f"modelopt_driver: {a.recipe} is a {type(recipe).__name__}, not a PTQ recipe")
        cfg = recipe.quantize.model_dump()
    else:
        if a.qformat not in QUANT_CFG_CHOICES:
            sys.exit(f"modelopt_driver: unknown qformat {a.qformat} (have {', '.join(QUANT_CFG_CHOICES)})")
        cfg = copy.deepcopy(QUANT_CFG_CHOICES[a.qformat])
        if a.kv != "none":
            cfg = mtq.update_quant_cfg_with_kv_cache_quant(cfg, KV_QUANT_CFG_CHOICES[a.kv]["quant_cfg"])
    if a.algorithm:
        cfg["algorithm"] = json.loads(a.algorithm)
    alg = cfg.get("algorithm")
    lw = alg.get("layerwise") if isinstance(alg, dict) else None
    if isinstance(lw, dict) and lw.get("checkpoint_dir") and a.layerwise_checkpoint_dir is None:
        # a recipe's relative checkpoint_dir (general/ptq/...-gptq: output/layerwise_ckpts/) would be
        # shared by every run and resumed from; hf_ptq makes it unique per model
        # (example_utils.resolve_checkpoint_dir).  Here: beside the output, fresh each run.
        lw["checkpoint_dir"] = a.out.rstrip("/") + ".modelopt_layerwise"
        shutil.rmtree(lw["checkpoint_dir"], ignore_errors=True)
    if a.layerwise_checkpoint_dir is not None:
        # Model Optimizer's own layerwise calibration: algorithm.layerwise {enable, checkpoint_dir}
        # (export_dir exists only in 0.48, which is not on PyPI)
        alg = cfg["algorithm"]
        alg = {"method": alg} if isinstance(alg, str) else dict(alg)
        lw = {"enable": True}
        if a.layerwise_checkpoint_dir:
            lw["checkpoint_dir"] = a.layerwise_checkpoint_dir
        alg["layerwise"] = lw
        cfg["algorithm"] = alg
    return cfg


# torch-nvfp4: the patched peer (peers/torch_nvfp4.py); +lh-unquantized-inputs additionally runs
# local_hessian's Hessian forward without input quantization (torch_nvfp4.unquantized_hessian_inputs)
PATCHES = ("torch-nvfp4", "torch-nvfp4+lh-unquantized-inputs")


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", help="a jsonl file, one job per line: {\"src\": ..., \"out\": ..., ...} with the "
                    "options below as keys (dashes as underscores); one process, one import of torch")
    ap.add_argument("--src")
    ap.add_argument("--out")
    ap.add_argument("--calib", help="jsonl of input_ids, all rows the same length")
    ap.add_argument("--calib-size", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--qformat")
    ap.add_argument("--recipe")
    ap.add_argument("--kv", default="none", help="none | fp8 | fp8_cast | ... (KV_QUANT_CFG_CHOICES)")
    ap.add_argument("--algorithm", help="JSON replacing cfg['algorithm'] (e.g. '{\"method\": \"mse\"}')")
    ap.add_argument("--layerwise-checkpoint-dir", nargs="?", const="", default=None,
                    help="turn on Model Optimizer's layerwise calibration (optionally with checkpoint_dir)")
    ap.add_argument("--load-dtype", default="auto", help="auto (hf_ptq's) | float32")
    ap.add_argument("--patch", choices=PATCHES, default=None)
    ap.add_argument("--threads", type=int, default=None)
    return ap


def run_job(a):
    import modelopt
    import modelopt.torch.quantization as mtq
    import transformers
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.utils.dataset_utils import create_forward_loop
    from transformers import AutoConfig

    if not a.src or not a.out or not a.calib or (a.qformat is None) == (a.recipe is None):
        sys.exit("modelopt_driver: a job needs src, out, calib and one of qformat / recipe")
    t0 = time.time()
    cfg = build_cfg(a)
    dtype = "auto" if a.load_dtype == "auto" else getattr(torch, a.load_dtype)
    arch = AutoConfig.from_pretrained(a.src).architectures[0]
    model = getattr(transformers, arch).from_pretrained(a.src, dtype=dtype, device_map="cpu")
    model.eval()
    target = model
    if a.qformat:
        target = language_model_of_vl(model)

    ids = load_ids(a.calib, a.calib_size)
    batches = [{"input_ids": ids[i:i + a.batch_size], "attention_mask": torch.ones_like(ids[i:i + a.batch_size])}
               for i in range(0, ids.shape[0], a.batch_size)]
    forward_loop = create_forward_loop(dataloader=batches)

    t1 = time.time()
    quantized = mtq.quantize(target, cfg, forward_loop=forward_loop)
    if target is model:
        model = quantized
    t2 = time.time()
    with torch.no_grad():
        prefixes, extra = mtp_weights(model, a.src)
        if prefixes:
            model._mtp_layer_prefixes = prefixes
        export_hf_checkpoint(model, export_dir=a.out, extra_state_dict=extra or None)
    t3 = time.time()
    job = {k: v for k, v in vars(a).items() if v is not None and k not in ("jobs", "threads")}
    run = {
        "job": job,
        "modelopt": modelopt.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
        "patched": a.patch, "calib_rows": int(ids.shape[0]), "calib_seq": int(ids.shape[1]),
        "load_s": round(t1 - t0, 3), "quantize_s": round(t2 - t1, 3), "export_s": round(t3 - t2, 3),
    }
    with open(os.path.join(a.out, "PEERS_RUN.json"), "w") as f:
        json.dump(run, f, indent=1)
    print(f"modelopt_driver: {a.out} ({run['quantize_s']} s quantize, {run['export_s']} s export)", flush=True)


def main():
    ap = parser()
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    jobs = [a]
    if a.jobs:
        jobs = []
        with open(a.jobs) as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    argv = []
                    for k, v in d.items():
                        argv += [f"--{k.replace('_', '-')}", str(v)]
                    jobs.append(ap.parse_args(argv))
    if len({j.patch for j in jobs}) > 1:
        sys.exit("modelopt_driver: jobs with different patches cannot share a process")
    if jobs[0].patch:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torch_nvfp4
        torch_nvfp4.install()
        if jobs[0].patch.endswith("+lh-unquantized-inputs"):
            torch_nvfp4.unquantized_hessian_inputs()
    failed = 0
    for j in jobs:
        try:
            run_job(j)
        except Exception as e:  # one failing case must not hide the others; the table shows it
            failed += 1
            import traceback
            traceback.print_exc()
            if j.out:
                os.makedirs(j.out, exist_ok=True)
                with open(os.path.join(j.out, "PEERS_FAILED.txt"), "w") as f:
                    f.write(f"{type(e).__name__}: {e}\n")
            print(f"modelopt_driver: FAILED {j.out}: {type(e).__name__}: {e}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
