"""Copy the tiny sources, the shared calibration ids and Model Optimizer's exports of them into
tests/data/peers, where tests/tools/test_peer_goldens.c checks lwq against them without torch.

    peers/run.sh --only core,kv,algos      # makes .peers/work/{src,mo,...} and the BF16 bounds
    .peers/venvs/modelopt/bin/python peers/make_goldens.py

Writes tests/data/peers/{calib.jsonl, src/, modelopt/, lwq_recipes/, MANIFEST.json, README.md,
SHA256SUMS}.  MANIFEST.json records, per case, the source, the golden, lwq's arguments and the
scale tolerance (1e-5 for F32 sources, the derived bound for BF16 ones), plus the versions and
the commands that made everything.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run  # noqa: E402

DEST = os.path.join(ROOT, "tests", "data", "peers")
SRC_FILES = ("config.json", "generation_config.json", "model.safetensors", "PEERS_SOURCE.json")
MO_FILES = ("config.json", "hf_quant_config.json", "model.safetensors", "PEERS_RUN.json")
# FP8 max and NVFP4 max for every source; KV-cache scales (MLA's too) and the FP8 mse search on a few
LABELS = {"fp8", "nvfp4", "nvfp4-as_modelopt_preset"}
EXTRA_CASES = {("llama-bf16", "nvfp4-kv_fp8"), ("qwen3_moe-f32", "nvfp4-kv_fp8"), ("qwen3_next-bf16", "fp8-kv_fp8"),
               ("deepseek_v3-f32", "fp8-kv_fp8"), ("qwen3_moe-f32", "fp8-mse"), ("llama-bf16", "fp8-mse")}
# issue 33: the formats of Model Optimizer 0.47's published recipes (peers/run.py group "formats"),
# added with --add formats beside the goldens above
FORMAT_SRCS = ("llama-f32", "llama-bf16", "qwen3_moe-f32", "qwen3_moe-bf16")
FORMAT_CASES = {(s, "w4a16_nvfp4") for s in FORMAT_SRCS} | \
               {(s, "general_ptq_nvfp4_weight_only-kv_fp8_cast") for s in ("qwen3_moe-f32", "qwen3_moe-bf16")} | \
               {("llama-bf16", "nvfp4-kv_nvfp4_cast"), ("qwen3_moe-f32", "nvfp4-kv_nvfp4_cast")} | \
               {(s, "general_ptq_nvfp4_default-kv_nvfp4_cast") for s in ("llama-f32", "qwen3_moe-bf16")} | \
               {(s, "nvfp4_four_over_six-patched") for s in ("llama-f32", "qwen3_moe-f32", "qwen3_moe-bf16")} | \
               {(s, "w4a16_nvfp4-lm_head") for s in ("llama-f32", "qwen3_moe-bf16")}
RECIPES = "modelopt_recipes"  # the recipe YAML the recipe cases read, with its imports, under DEST


def copy_recipe(name, root):
    """Copies recipe `name` (relative to Model Optimizer's modelopt_recipes, without .yaml) and
    every file it imports into DEST/modelopt_recipes."""
    todo, seen = [name], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        src = os.path.join(root, n + ".yaml")
        dst = os.path.join(DEST, RECIPES, n + ".yaml")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy(src, dst)
        text = open(src).read()
        block = re.search(r"^imports:\n((?:[ \t]+\S.*\n)+)", text, re.M)
        for line in (block.group(1).splitlines() if block else []):
            todo.append(line.split(":", 1)[1].strip())


def sums_and_size():
    sums = []
    for d, _, files in os.walk(DEST):
        for fn in files:
            p = os.path.join(d, fn)
            rel = os.path.relpath(p, DEST)
            if rel != "SHA256SUMS":
                sums.append(f"{hashlib.sha256(open(p, 'rb').read()).hexdigest()}  {rel}\n")
    with open(os.path.join(DEST, "SHA256SUMS"), "w") as f:
        f.writelines(sorted(sums, key=lambda s: s.split("  ", 1)[1]))
    return sum(os.path.getsize(os.path.join(d, fn)) for d, _, fs in os.walk(DEST) for fn in fs)


def copy_case(c, bounds):
    """Copies one case's source (once) and golden into DEST; returns its MANIFEST entry."""
    mo = c.mo_dir()
    if not os.path.exists(os.path.join(mo, "PEERS_RUN.json")):
        sys.exit(f"make_goldens: {mo} is missing: run peers/run.sh --only {c.group} first")
    if c.src.endswith("-bf16") and c.src not in bounds:
        sys.exit(f"make_goldens: no BF16 bound for {c.src} in results.json: run peers/run.sh --only {c.group}")
    src_dest = os.path.join(DEST, "src", c.src)
    if not os.path.isdir(src_dest):
        os.makedirs(src_dest)
        for f in SRC_FILES:
            shutil.copy(os.path.join(run.WORK, "src", c.src, f), src_dest)
    gold = os.path.join("modelopt", c.src, c.label)
    shutil.rmtree(os.path.join(DEST, gold), ignore_errors=True)
    os.makedirs(os.path.join(DEST, gold))
    for f in MO_FILES:
        if f == "PEERS_RUN.json":  # the run's paths, relative to the repository
            with open(os.path.join(mo, f)) as fi, open(os.path.join(DEST, gold, f), "w") as fo:
                fo.write(fi.read().replace(ROOT + "/", ""))
        else:
            shutil.copy(os.path.join(mo, f), os.path.join(DEST, gold))
    args = [a.replace(os.path.join(HERE, "lwq_recipes") + "/", "@DATA@/lwq_recipes/") for a in c.lwq]
    if "--recipe-root" in args:  # a Model Optimizer recipe: its YAML travels with the goldens
        root = args[args.index("--recipe-root") + 1]
        rec = c.mo["recipe"]
        if os.path.isabs(rec):  # one of peers/recipes: under issue33/, its imports from the root
            dst = os.path.join(DEST, RECIPES, "issue33", os.path.basename(rec))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(rec, dst)
            text = open(rec).read()
            block = re.search(r"^imports:\n((?:[ \t]+\S.*\n)+)", text, re.M)
            for line in (block.group(1).splitlines() if block else []):
                copy_recipe(line.split(":", 1)[1].strip(), root)
            args = [f"@DATA@/{RECIPES}/issue33/{os.path.basename(rec)}" if a == rec else a for a in args]
        else:
            copy_recipe(rec, root)
        args = [f"@DATA@/{RECIPES}" if a == root else a for a in args]
    return {"name": c.id, "src": f"src/{c.src}", "golden": gold, "lwq": args,
            "rtol": bounds[c.src]["bound"] if c.src in bounds else run.F32_RTOL,
            "modelopt": {k: v for k, v in c.mo.items()}}


def add_formats():
    """--add formats: the FORMAT_CASES goldens beside the ones in DEST (whose sources, bounds and
    cases stay as they are)."""
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    bounds = dict(man["bf16_bounds"])
    for k, b in res["bounds"].items():  # the same model, the same runs: the bound must not move
        if k in bounds and abs(bounds[k]["bound"] - b["bound"]) > 1e-12:
            sys.exit(f"make_goldens: the BF16 bound of {k} moved ({bounds[k]['bound']} -> {b['bound']})")
        bounds.setdefault(k, b)
    new = [copy_case(c, bounds) for c in run.cases() if (c.src, c.label) in FORMAT_CASES and c.group == "formats"]
    names = {c["name"] for c in new}
    man["cases"] = [c for c in man["cases"] if c["name"] not in names] + new
    man["bf16_bounds"] = bounds
    if FORMAT_COMMAND not in man["commands"]:
        man["commands"].append(FORMAT_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    with open(os.path.join(DEST, "README.md"), "w") as f:
        f.write(README.format(**man["versions"], n=len(man["cases"])))
    size = sums_and_size()
    print(f"make_goldens: {len(new)} format cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


FORMAT_COMMAND = ("peers/run.sh --only formats --src llama-f32,llama-bf16,qwen3_moe-f32,qwen3_moe-bf16; "
                  ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add formats")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--add", choices=("formats",), help="add one group's goldens to those in tests/data/peers")
    a = ap.parse_args()
    if a.add:
        return add_formats()
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    bounds = res["bounds"]
    shutil.rmtree(DEST, ignore_errors=True)
    os.makedirs(DEST)
    shutil.copy(os.path.join(run.WORK, "calib.jsonl"), os.path.join(DEST, "calib.jsonl"))
    os.makedirs(os.path.join(DEST, "lwq_recipes"))
    shutil.copy(os.path.join(HERE, "lwq_recipes", "nvfp4_modelopt.json"), os.path.join(DEST, "lwq_recipes"))
    cases, versions = [], None
    for c in run.cases():
        if c.group == "formats":
            if (c.src, c.label) in FORMAT_CASES:
                cases.append(copy_case(c, bounds))
            continue
        if c.label not in LABELS and (c.src, c.label) not in EXTRA_CASES:
            continue
        if c.src.startswith("deepseek_v3-") and c.label == "nvfp4":
            continue  # lwq's preset keeps the MLA projections in BF16 by design: nvfp4-as_modelopt_preset
        cases.append(copy_case(c, bounds))
        rj = json.load(open(os.path.join(c.mo_dir(), "PEERS_RUN.json")))
        versions = {k: rj[k] for k in ("modelopt", "torch", "transformers")}
    manifest = {
        "what": "Model Optimizer's CPU exports of transformers-written tiny checkpoints, for "
                "tests/tools/test_peer_goldens.c (issues 23 and 33)",
        "versions": versions,
        "commands": ["peers/setup.sh modelopt",
                     "peers/run.sh --only core,kv,algos,formats   (peers/make_sources.py writes src/ and calib.jsonl; "
                     "peers/modelopt_driver.py the goldens)",
                     ".peers/venvs/modelopt/bin/python peers/make_goldens.py"],
        "calib": {"file": "calib.jsonl", "size": run.CALIB["size"], "seq": run.CALIB["seq"],
                  "batch": run.CALIB["batch"]},
        "bf16_bounds": bounds,
        "cases": cases,
    }
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    with open(os.path.join(DEST, "README.md"), "w") as f:
        f.write(README.format(**versions, n=len(cases)))
    size = sums_and_size()
    print(f"make_goldens: {len(cases)} cases, {size / 1e6:.2f} MB in {DEST}")


README = """# Model Optimizer goldens (issues 23 and 33)

Tiny checkpoints written by transformers {transformers} (`src/`, random init with fixed seeds,
`save_pretrained`, F32 and BF16), the calibration ids every tool used (`calib.jsonl`), and what
NVIDIA Model Optimizer {modelopt} (torch {torch}) exported from them on the CPU (`modelopt/`),
{n} cases.  `tests/tools/test_peer_goldens.c` quantizes each source with lwq and compares with
the golden: every tensor except input_scale / k_scale / v_scale byte-identical, those within
`rtol` (1e-5 for F32 sources; for BF16 sources the bound derived from torch's own BF16 forward,
`bf16_bounds`), configs equal in meaning.  Its test `one_changed_byte_of_a_golden_fails` flips
one byte of a weight, a block scale, an input scale and a KV scale in a copy of a golden and
shows that each is reported; `SHA256SUMS` pins every byte besides (`goldens_are_intact`: a
last-bit change of an input_scale would be within tolerance).  The deepseek_v3 `nvfp4` case is
`nvfp4-as_modelopt_preset` here: lwq's own nvfp4 preset keeps the MLA projections in BF16 by
design (perf/RESULTS.md, "Side by side with Model Optimizer 0.47").

The formats of Model Optimizer 0.47's published recipes (issue 33, `peers/run.py` group
`formats`): weight-only NVFP4 (`w4a16_nvfp4`, quant_algo W4A16_NVFP4, no input_scale) on llama
and qwen3_moe, F32 and BF16, the `general/ptq/nvfp4_weight_only-kv_fp8_cast` recipe
and `general/ptq/nvfp4_default-kv_nvfp4_cast` read from their own YAML, copied with their
imports into `modelopt_recipes/` (lwq runs them with `--recipe-root @DATA@/modelopt_recipes`), and
an NVFP4 KV cache in cast mode (`nvfp4-kv_nvfp4_cast`: hf_ptq's `--kv_cache_qformat nvfp4_cast`),
and a weight-only NVFP4 lm_head (`w4a16_nvfp4-lm_head`: `peers/recipes/w4a16_nvfp4-lm_head.yaml`,
copied to `modelopt_recipes/issue33/`, the qwen3_5 recipes' `*lm_head*weight_quantizer` rule).
Four-over-Six (`nvfp4_four_over_six-patched`, llama F32 and qwen3_moe F32/BF16) is from the
**patched peer**: Model Optimizer computes it with its static NVFP4 fake quant, a Triton kernel
that needs CUDA (unpatched on the CPU: `static_blockwise_fp4_fake_quant requires triton`), so
`peers/modelopt_driver.py --patch torch-nvfp4` replaces that one function by
`peers/torch_nvfp4.py`'s pure-torch copy of its arithmetic (block scale = amax / 6 fake-quantized
to E4M3 against global_amax * (448 / 256) / 6 by Model Optimizer's own `scaled_e4m3_impl`,
elements rounded to E2M1 with the kernel's boundaries), as Model Optimizer's own CPU test of
Four-over-Six (tests/unit/torch/quantization/test_nvfp4_four_over_six.py) monkeypatches it; its
MANIFEST entries say `"patch": "torch-nvfp4"`.  Every other case is unpatched.

Regenerate (needs the network once, for peers/setup.sh):

    peers/setup.sh modelopt
    peers/run.sh --only core,kv,algos,formats
    .peers/venvs/modelopt/bin/python peers/make_goldens.py

or only the format cases, beside the others:

    peers/run.sh --only formats --src llama-f32,llama-bf16,qwen3_moe-f32,qwen3_moe-bf16
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --add formats

MANIFEST.json lists each case with lwq's arguments and Model Optimizer's settings.
"""

if __name__ == "__main__":
    main()
