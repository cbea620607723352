"""Copy the tiny sources, the shared calibration ids and Model Optimizer's exports of them into
tests/data/peers, where tests/tools/test_peer_goldens.c checks lwq against them without torch.

    peers/run.sh --only core,kv,algos,families34   # makes .peers/work/{src,mo,...} and the BF16 bounds
    .peers/venvs/modelopt/bin/python peers/make_goldens.py [--only GROUPS]

Writes tests/data/peers/{calib.jsonl, src/, modelopt/, lwq_recipes/, forward/, MANIFEST.json,
README.md, SHA256SUMS}; with --only GROUPS, the cases of other groups are kept as they are there.  MANIFEST.json records, per case, the source, the golden, lwq's arguments and the
scale tolerance (1e-5 for F32 sources, the derived bound for BF16 ones), plus the versions and
the commands that made everything.
"""

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
FORWARD_SEQS = 4  # calibration rows in each forward dump
EXTRA_CASES = {("llama-bf16", "nvfp4-kv_fp8"), ("qwen3_moe-f32", "nvfp4-kv_fp8"), ("qwen3_next-bf16", "fp8-kv_fp8"),
               ("deepseek_v3-f32", "fp8-kv_fp8"), ("qwen3_moe-f32", "fp8-mse"), ("llama-bf16", "fp8-mse")}


def keep_existing():
    """--only GROUPS: the goldens of cases outside GROUPS are kept as tests/data/peers holds them
    (files, MANIFEST entry, BF16 bound), so that one group can be regenerated without rerunning
    Model Optimizer on every other.  Returns (old manifest, a copy of DEST to take them from)."""
    old = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    keep = os.path.join(run.WORK, "goldens-kept")
    shutil.rmtree(keep, ignore_errors=True)
    shutil.copytree(DEST, keep)
    return old, keep


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated case groups (peers/run.py --groups) to take from .peers/work; "
                    "every other case is kept as tests/data/peers holds it")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    bounds = res["bounds"]
    old, kept = keep_existing() if only else (None, None)
    old_cases = {c["name"]: c for c in old["cases"]} if old else {}
    if old:
        bounds = dict(old["bf16_bounds"], **{s: b for s, b in bounds.items()
                                             if any(c.group in only and c.src == s for c in run.cases())})
    shutil.rmtree(DEST, ignore_errors=True)
    os.makedirs(DEST)
    shutil.copy(os.path.join(run.WORK, "calib.jsonl"), os.path.join(DEST, "calib.jsonl"))
    os.makedirs(os.path.join(DEST, "lwq_recipes"))
    shutil.copy(os.path.join(HERE, "lwq_recipes", "nvfp4_modelopt.json"), os.path.join(DEST, "lwq_recipes"))
    cases, versions = [], None
    for c in run.cases():
        if c.label not in LABELS and (c.src, c.label) not in EXTRA_CASES:
            continue
        if c.src.startswith("deepseek_v3-") and c.label == "nvfp4":
            continue  # lwq's preset keeps the MLA projections in BF16 by design: nvfp4-as_modelopt_preset
        if only and c.group not in only:
            k = old_cases.get(c.id)
            if k is None:
                sys.exit(f"make_goldens: {c.id} is not in tests/data/peers to keep (run without --only)")
            for rel in (k["src"], k["golden"]):
                if not os.path.isdir(os.path.join(DEST, rel)):
                    shutil.copytree(os.path.join(kept, rel), os.path.join(DEST, rel))
            cases.append(k)
            versions = versions or old["versions"]
            continue
        mo = c.mo_dir()
        if not os.path.exists(os.path.join(mo, "PEERS_RUN.json")):
            sys.exit(f"make_goldens: {mo} is missing: run peers/run.sh --only core,kv,algos,families34 first")
        if c.src.endswith("-bf16") and c.src not in bounds:
            sys.exit(f"make_goldens: no BF16 bound for {c.src} in results.json: run peers/run.sh --only core,kv,algos,families34")
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
        args = [a.replace(os.path.join(HERE, "lwq_recipes") + "/", "@DATA@/lwq_recipes/") for a in c.lwq]
        cases.append({"name": c.id, "src": f"src/{c.src}", "golden": gold, "lwq": args,
                      "rtol": bounds[c.src]["bound"] if c.src in bounds else run.F32_RTOL,
                      "modelopt": {k: v for k, v in c.mo.items()}})
    forward = forward_dumps(only, kept)
    manifest = {
        "what": "Model Optimizer's CPU exports of transformers-written tiny checkpoints, for "
                "tests/tools/test_peer_goldens.c (issue 23)",
        "versions": versions,
        "commands": ["peers/setup.sh modelopt",
                     "peers/run.sh --only core,kv,algos,families34   (peers/make_sources.py writes src/ and "
                     "calib.jsonl; peers/modelopt_driver.py the goldens)",
                     ".peers/venvs/modelopt/bin/python peers/make_goldens.py"],
        "calib": {"file": "calib.jsonl", "size": run.CALIB["size"], "seq": run.CALIB["seq"],
                  "batch": run.CALIB["batch"]},
        "bf16_bounds": bounds,
        "cases": cases,
        "forward": forward,
    }
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    with open(os.path.join(DEST, "README.md"), "w") as f:
        f.write(README.format(**versions, n=len(cases)))
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


def forward_dumps(only, kept):
    """transformers' own forward, layer by layer (peers/layer_dump.py: the hidden state entering each
    decoder layer and leaving it, F32, the first FORWARD_SEQS calibration rows) of each issue-34
    family's F32 source, in forward/<src>.safetensors; kept as they are with --only without families34."""
    out = []
    for arch in run.FAMILIES34:
        src = f"{arch}-f32"
        rel = os.path.join("forward", src + ".safetensors")
        os.makedirs(os.path.join(DEST, "forward"), exist_ok=True)
        if only and "families34" not in only:
            shutil.copy(os.path.join(kept, rel), os.path.join(DEST, rel))
        else:
            subprocess.run([sys.executable, os.path.join(HERE, "layer_dump.py"), os.path.join(run.WORK, "src", src),
                            os.path.join(DEST, rel), "--calib", os.path.join(run.WORK, "calib.jsonl"),
                            "--seqs", str(FORWARD_SEQS)], check=True)
        out.append({"src": f"src/{src}", "dump": rel, "seqs": FORWARD_SEQS, "tol": run.F32_RTOL})
    return out


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

The issue-34 families (glm4_moe with its MTP layer, minimax_m2, deepseek_v32, glm_moe_dsa,
mistral4; peers/make_sources.py `families34_configs` says what each tiny config exercises) have
FP8 and NVFP4 cases through hf_ptq's --qformat (the MLA ones' NVFP4 as `nvfp4-as_modelopt_preset`,
like deepseek_v3's).  Their test in `test_peer_goldens` is skipped only while lwq itself refuses
the source's model_type (`lwq inspect` says `unknown model_type '...'`); any other failure fails.
`forward/<src>.safetensors` holds transformers' own forward of each of their F32 sources, layer
by layer (peers/layer_dump.py: `hidden.0` the embedding output, `hidden.{{i+1}}` decoder layer i's
output, F32, the first calibration rows; MANIFEST.json `forward`), for lwq's forward to match to
`tol` (1e-5 relative to the largest magnitude of each layer's output).

Regenerate (needs the network once, for peers/setup.sh):

    peers/setup.sh modelopt
    peers/run.sh --only core,kv,algos,families34
    .peers/venvs/modelopt/bin/python peers/make_goldens.py

or one group only, every other case kept as it is here:

    peers/run.sh --only families34
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --only families34

MANIFEST.json lists each case with lwq's arguments and Model Optimizer's settings.
"""

if __name__ == "__main__":
    main()
