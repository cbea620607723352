"""Model Optimizer's export of the mix lwq's search chose under an auto_quantize recipe with a fixed
`quantize` baseline (issue 33): the goldens of group autoq's baseline case.

The recipe is Model Optimizer 0.47's
huggingface/qwen3_6_moe/auto_quantize/w4a16_nvfp4_fp8_module_spaces_at_6p0bits-active_moe with
"*lm_head*" left out of its one module_search_spaces entry (lwq does not search lm_head yet; lm_head
keeps the baseline's '*lm_head*weight_quantizer' NVFP4, weight-only), kept as
peers/recipes/qwen3_6_moe-module_spaces-no_lm_head.yaml, at --auto-quantize-bits 7 (under lwq's byte
costs the tiny source's least mix is 6.2352 active_moe bits: F32 routers and unsearched linears count
at 32 bits).  Model Optimizer's own search does not run on the CPU (its dynamic NVFP4 block fake quant
asserts "amax must be a CUDA tensor"), so the golden is its export of lwq's chosen mix (lwq's
OUT/auto_quantize_recipe.yaml, which carries the baseline's fixed choices: the routed experts W4A16,
lm_head W4A16, the FP8 KV cache in cast mode), run through peers/modelopt_driver.py --recipe; the case
runs lwq's search itself and compares its output with that export.

    .peers/venvs/modelopt/bin/python peers/autoq_baseline.py            # run both, compare
    .peers/venvs/modelopt/bin/python peers/autoq_baseline.py --commit   # and write the goldens
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import make_goldens as mg  # noqa: E402
import run  # noqa: E402

SRC = "qwen3_5_moe-f32"
PUBLISHED = "huggingface/qwen3_6_moe/auto_quantize/w4a16_nvfp4_fp8_module_spaces_at_6p0bits-active_moe"
RECIPE = os.path.join(HERE, "recipes", "qwen3_6_moe-module_spaces-no_lm_head.yaml")
LABEL = "autoq-module_spaces-baseline-7bits"
MIX = os.path.join(HERE, "recipes", f"{LABEL}-{SRC}.yaml")  # lwq's chosen mix, Model Optimizer's recipe
BITS = "7"
COMMAND = ".peers/venvs/modelopt/bin/python peers/autoq_baseline.py --commit"


def make_recipe(root):
    text = open(os.path.join(root, PUBLISHED + ".yaml")).read()
    line = '        - "*lm_head*"\n'
    if text.count(line) != 1:
        sys.exit(f"autoq_baseline: {PUBLISHED} has no single '*lm_head*' pattern line")
    head = ("# lwq peers: Model Optimizer 0.47's " + PUBLISHED + "\n# with \"*lm_head*\" left out of its "
            "module_search_spaces entry (lwq does not search lm_head yet): peers/autoq_baseline.py\n")
    with open(RECIPE, "w") as f:
        f.write(head + text.replace(line, ""))


def main():
    commit = "--commit" in sys.argv[1:]
    root = run.recipe_root()
    make_recipe(root)
    src = os.path.join(mg.DEST, "src", SRC)
    calib = os.path.join(mg.DEST, "calib.jsonl")
    lw = os.path.join(run.WORK, "lwq", SRC, LABEL)
    mo = os.path.join(run.WORK, "mo", SRC, LABEL)
    for d in (lw, lw + ".layerwise_resume", mo):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.dirname(lw), exist_ok=True)
    lwq_args = ["--recipe", RECIPE, "--recipe-root", root, "--auto-quantize-bits", BITS]
    p = subprocess.run([run.LWQ, "quantize", src, "-o", lw, "--calib", calib, "--calib-size", str(run.CALIB["size"]),
                        "--calib-seq", str(run.CALIB["seq"]), "--batch-size", str(run.CALIB["batch"]), "--quiet"]
                       + lwq_args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"autoq_baseline: lwq: exit {p.returncode}: {p.stderr[-600:]}")
    shutil.copy(os.path.join(lw, "auto_quantize_recipe.yaml"), MIX)
    p = subprocess.run([sys.executable, os.path.join(HERE, "modelopt_driver.py"), "--src", src, "--out", mo,
                        "--calib", calib, "--calib-size", str(run.CALIB["size"]), "--batch-size",
                        str(run.CALIB["batch"]), "--recipe", MIX], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"autoq_baseline: Model Optimizer: exit {p.returncode}: {(p.stdout + p.stderr)[-600:]}")
    r = compare.compare(lw, mo, run.F32_RTOL)
    print(f"autoq_baseline: {SRC}/{LABEL}: tensors byte-identical {r['exact_identical']}/{r['exact_total']}, "
          f"{r['scales']} scales, {'equal' if r['equal'] else 'DIFFERENT'}")
    if not r["equal"]:
        sys.exit(f"autoq_baseline: lwq and Model Optimizer differ: {json.dumps(r, default=str)[:1500]}")
    if not commit:
        return
    gold = os.path.join("modelopt", SRC, LABEL)
    shutil.rmtree(os.path.join(mg.DEST, gold), ignore_errors=True)
    os.makedirs(os.path.join(mg.DEST, gold))
    for f in mg.MO_FILES:
        if f == "PEERS_RUN.json":
            with open(os.path.join(mo, f)) as fi, open(os.path.join(mg.DEST, gold, f), "w") as fo:
                fo.write(fi.read().replace(run.ROOT + "/", ""))
        else:
            shutil.copy(os.path.join(mo, f), os.path.join(mg.DEST, gold))
    # the recipe lwq runs (and what it imports) and the mix Model Optimizer exported, under issue33/
    name = mg.recipe_name(RECIPE)
    os.makedirs(os.path.join(mg.DEST, mg.RECIPES, "issue33"), exist_ok=True)
    shutil.copy(RECIPE, os.path.join(mg.DEST, mg.RECIPES, name + ".yaml"))
    shutil.copy(MIX, os.path.join(mg.DEST, mg.RECIPES, mg.recipe_name(MIX) + ".yaml"))
    for imp in ("configs/auto_quantize/units/base_disabled_layers", "configs/auto_quantize/units/base_cost_excluded_layers",
                "configs/ptq/presets/model/fp8", "configs/ptq/presets/model/w4a16_nvfp4",
                "huggingface/qwen3_5/ptq/w4a16_nvfp4-fp8_attn-kv_fp8_cast.quant_cfg"):
        mg.copy_recipe(imp, root)
    man = json.load(open(os.path.join(mg.DEST, "MANIFEST.json")))
    case = {"name": f"{SRC}/{LABEL}", "src": f"src/{SRC}", "golden": gold,
            "lwq": ["--recipe", f"@DATA@/{mg.RECIPES}/{name}.yaml", "--recipe-root", f"@DATA@/{mg.RECIPES}",
                    "--auto-quantize-bits", BITS],
            "rtol": run.F32_RTOL, "modelopt": {"recipe": os.path.relpath(MIX, run.ROOT)}, "group": "autoq",
            "recipe_files": {**mg.recipe_files(name), **mg.recipe_files(mg.recipe_name(MIX))}}
    man["cases"] = [c for c in man["cases"] if c["name"] != case["name"]] + [case]
    if COMMAND not in man["commands"]:
        man["commands"].append(COMMAND)
    with open(os.path.join(mg.DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    mg.write_readme(man)
    size = mg.sums_and_size()
    print(f"autoq_baseline: case {case['name']} added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {mg.DEST}")


if __name__ == "__main__":
    main()
