"""Copy the tiny sources, the shared calibration ids and Model Optimizer's exports of them into
tests/data/peers, where tests/tools/test_peer_goldens.c checks lwq against them without torch.

    peers/run.sh --only core,kv,algos      # makes .peers/work/{src,mo,...} and the BF16 bounds
    .peers/venvs/modelopt/bin/python peers/make_goldens.py
    # issue 33: the qwen3_5 family only, the other cases kept as they are in MANIFEST.json
    peers/run.sh --only qwen3_5,qwen3_5_w4a16,qwen3_5_patched,qwen3_5_recipes
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --family qwen3_5

Writes tests/data/peers/{calib.jsonl, src/, modelopt/, lwq_recipes/, layers/, MANIFEST.json,
README.md, SHA256SUMS}.  MANIFEST.json records, per case, the source, the golden, lwq's arguments
and the scale tolerance (1e-5 for F32 sources, the derived bound for BF16 ones), plus the
versions and the commands that made everything.  --family qwen3_5 rewrites only the qwen3_5
sources, cases and layer dumps (peers/layer_dump.py) and keeps every other case, bound and file.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
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

# issue 33 (about 4 MB in all): the VLM wrappers in F32 and BF16 with the three --qformat presets
# of the "Must show", Four-over-Six (patched) in F32, the text-only forms in F32, and the
# snapshot's qwen3_5* recipes (FP8 KV caches: kv_fp8 and kv_fp8_cast)
QWEN3_5_CASES = {(f"{a}-{d}", q) for a in ("qwen3_5", "qwen3_5_moe") for d in ("f32", "bf16")
                 for q in ("fp8", "nvfp4", "w4a16_nvfp4")} | \
    {("qwen3_5-f32", "nvfp4_four_over_six-patched"), ("qwen3_5_moe-f32", "nvfp4_four_over_six-patched"),
     ("qwen3_5_text-f32", "nvfp4"),
     ("qwen3_5_moe_text-f32", "nvfp4"), ("qwen3_5_moe_text-f32", "w4a16_nvfp4"),
     ("qwen3_5-f32", "huggingface_qwen3_5_ptq_w4a16_nvfp4-fp8_attn-kv_fp8_cast"),
     ("qwen3_5-bf16", "huggingface_qwen3_5_ptq_w4a16_nvfp4_mse-fp8_attn-kv_fp8_cast-patched"),
     ("qwen3_5_moe-f32", "huggingface_qwen3_5_moe_ptq_nvfp4_experts_mse-fp8_rest-kv_fp8-patched"),
     ("qwen3_5_moe-bf16", "huggingface_qwen3_5_moe_ptq_w4a16_nvfp4-fp8_attn-kv_fp8_cast"),
     ("qwen3_5_moe_text-f32", "huggingface_qwen3_5_moe_ptq_w4a16_nvfp4_mse-fp8_attn-kv_fp8_cast-patched")}
LAYER_DUMPS = ("qwen3_5-f32", "qwen3_5_moe-f32", "qwen3_5_text-f32", "qwen3_5_moe_text-f32")
RECIPES_AT = "@MODELOPT_RECIPES@"  # the test resolves it (tests/tools/test_peer_goldens.c)


def is_qwen3_5(src):
    return src.split("-")[0] in run.QWEN3_5


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def recipe_files(name):
    """The recipe file and every file it imports, relative to the recipe root, with their hashes:
    the test checks that the recipe tree it is given is the one the golden was made from."""
    import yaml

    root = run.recipe_root()
    todo, seen = [name], {}
    while todo:
        n = todo.pop()
        rel = next((n + ext for ext in (".yaml", ".yml", "") if os.path.isfile(os.path.join(root, n + ext))), None)
        if rel is None:
            sys.exit(f"make_goldens: recipe {n} not under {root}")
        if rel in seen:
            continue
        seen[rel] = sha256(os.path.join(root, rel))
        for doc in yaml.safe_load_all(open(os.path.join(root, rel))):
            if isinstance(doc, dict) and isinstance(doc.get("imports"), dict):
                todo.extend(doc["imports"].values())
    return dict(sorted(seen.items()))


def wanted(c, family):
    if family == "qwen3_5":
        return (c.src, c.label) in QWEN3_5_CASES
    if is_qwen3_5(c.src):
        return False
    if c.src.startswith("deepseek_v3-") and c.label == "nvfp4":
        return False  # lwq's preset keeps the MLA projections in BF16 by design: nvfp4-as_modelopt_preset
    return c.label in LABELS or (c.src, c.label) in EXTRA_CASES


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=("all", "qwen3_5"), default="all",
                    help="qwen3_5: rewrite only the qwen3_5 cases, keep the others")
    a = ap.parse_args()
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    bounds = res["bounds"]
    kept, old = [], None
    if a.family == "qwen3_5":
        old = json.load(open(os.path.join(DEST, "MANIFEST.json")))
        kept = [c for c in old["cases"] if not is_qwen3_5(c["src"][len("src/"):])]
        bounds = {**{k: v for k, v in old["bf16_bounds"].items() if not is_qwen3_5(k)},
                  **{k: v for k, v in bounds.items() if is_qwen3_5(k)}}
        for sub in ("src", "modelopt"):
            for d in os.listdir(os.path.join(DEST, sub)):
                if is_qwen3_5(d):
                    shutil.rmtree(os.path.join(DEST, sub, d))
        shutil.rmtree(os.path.join(DEST, "layers"), ignore_errors=True)
        if sha256(os.path.join(run.WORK, "calib.jsonl")) != sha256(os.path.join(DEST, "calib.jsonl")):
            sys.exit("make_goldens: .peers/work/calib.jsonl differs from tests/data/peers/calib.jsonl")
    else:
        shutil.rmtree(DEST, ignore_errors=True)
        os.makedirs(DEST)
        shutil.copy(os.path.join(run.WORK, "calib.jsonl"), os.path.join(DEST, "calib.jsonl"))
        os.makedirs(os.path.join(DEST, "lwq_recipes"))
        shutil.copy(os.path.join(HERE, "lwq_recipes", "nvfp4_modelopt.json"), os.path.join(DEST, "lwq_recipes"))
    cases, versions = list(kept), None
    for c in run.cases():
        if not wanted(c, a.family if a.family == "qwen3_5" else "all"):
            continue
        mo = c.mo_dir()
        if not os.path.exists(os.path.join(mo, "PEERS_RUN.json")):
            sys.exit(f"make_goldens: {mo} is missing: run peers/run.sh --only core,kv,algos first")
        if c.src.endswith("-bf16") and c.src not in bounds:
            sys.exit(f"make_goldens: no BF16 bound for {c.src} in results.json: run peers/run.sh --only core,kv,algos")
        src_dest = os.path.join(DEST, "src", c.src)
        if not os.path.isdir(src_dest):
            os.makedirs(src_dest)
            for f in SRC_FILES:
                shutil.copy(os.path.join(run.WORK, "src", c.src, f), src_dest)
        gold = os.path.join("modelopt", c.src, c.label)
        os.makedirs(os.path.join(DEST, gold))
        for f in MO_FILES:
            if f == "PEERS_RUN.json":  # the run's paths, relative to the repository
                with open(os.path.join(mo, f)) as fi, open(os.path.join(DEST, gold, f), "w") as fo:
                    fo.write(fi.read().replace(ROOT + "/", ""))
            else:
                shutil.copy(os.path.join(mo, f), os.path.join(DEST, gold))
        rj = json.load(open(os.path.join(mo, "PEERS_RUN.json")))
        versions = {k: rj[k] for k in ("modelopt", "torch", "transformers")}
        args = [x.replace(os.path.join(HERE, "lwq_recipes") + "/", "@DATA@/lwq_recipes/").replace(
            run.recipe_root(), RECIPES_AT) for x in c.lwq]
        case = {"name": c.id, "src": f"src/{c.src}", "golden": gold, "lwq": args,
                "rtol": bounds[c.src]["bound"] if c.src in bounds else run.F32_RTOL,
                "modelopt": {k: v for k, v in c.mo.items()}}
        if is_qwen3_5(c.src):
            case["group"] = c.group
            if "recipe" in c.mo:
                case["recipe_files"] = recipe_files(c.mo["recipe"])
        cases.append(case)
    if a.family == "qwen3_5" or any(is_qwen3_5(c["src"][len("src/"):]) for c in cases):
        os.makedirs(os.path.join(DEST, "layers"), exist_ok=True)
        for s in LAYER_DUMPS:
            subprocess.run([sys.executable, os.path.join(HERE, "layer_dump.py"), os.path.join(run.WORK, "src", s),
                            os.path.join(DEST, "layers", s + ".safetensors"), "--calib",
                            os.path.join(DEST, "calib.jsonl")], check=True)
    used = {c["src"][len("src/"):] for c in cases}
    bounds = {k: v for k, v in bounds.items() if k in used}
    manifest = {
        "what": "Model Optimizer's CPU exports of transformers-written tiny checkpoints, for "
                "tests/tools/test_peer_goldens.c (issues 23 and 33); transformers' layer-by-layer forward "
                "of the qwen3_5 ones (layers/), for tests/engine/forward/test_forward_peer_layers.c",
        "versions": versions or old["versions"],
        "commands": ["peers/setup.sh modelopt",
                     "peers/run.sh --only core,kv,algos   (peers/make_sources.py writes src/ and calib.jsonl; "
                     "peers/modelopt_driver.py the goldens)",
                     ".peers/venvs/modelopt/bin/python peers/make_goldens.py",
                     "peers/run.sh --only qwen3_5,qwen3_5_w4a16,qwen3_5_patched,qwen3_5_recipes",
                     ".peers/venvs/modelopt/bin/python peers/make_goldens.py --family qwen3_5   "
                     "(peers/layer_dump.py writes layers/)"],
        "calib": {"file": "calib.jsonl", "size": run.CALIB["size"], "seq": run.CALIB["seq"],
                  "batch": run.CALIB["batch"]},
        "bf16_bounds": bounds,
        "cases": cases,
    }
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    with open(os.path.join(DEST, "README.md"), "w") as f:
        f.write(README.format(**(versions or old["versions"]), n=len(cases),
                              n35=sum(is_qwen3_5(c["src"][len("src/"):]) for c in cases)))
    sums = []
    for d, _, files in os.walk(DEST):
        for fn in files:
            p = os.path.join(d, fn)
            rel = os.path.relpath(p, DEST)
            if rel != "SHA256SUMS":
                sums.append(f"{hashlib.sha256(open(p, 'rb').read()).hexdigest()}  {rel}\n")
    with open(os.path.join(DEST, "SHA256SUMS"), "w") as f:
        f.writelines(sorted(sums, key=lambda s: s.split("  ", 1)[1]))
    size = sum(os.path.getsize(os.path.join(d, fn)) for d, _, fs in os.walk(DEST) for fn in fs)
    print(f"make_goldens: {len(cases)} cases, {size / 1e6:.2f} MB in {DEST}")


README = """# Model Optimizer goldens (issue 23)

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

Regenerate (needs the network once, for peers/setup.sh):

    peers/setup.sh modelopt
    peers/run.sh --only core,kv,algos
    .peers/venvs/modelopt/bin/python peers/make_goldens.py

MANIFEST.json lists each case with lwq's arguments and Model Optimizer's settings.
"""

if __name__ == "__main__":
    main()
