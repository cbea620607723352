"""Model Optimizer's export of the mix lwq's search chose under an auto_quantize recipe with a fixed
`quantize` baseline (issue 33): the goldens of group autoq's baseline case.

The recipe is Model Optimizer 0.47's
huggingface/qwen3_6_moe/auto_quantize/w4a16_nvfp4_fp8_module_spaces_at_6p0bits-active_moe with
"*lm_head*" left out of its one module_search_spaces entry (lm_head then keeps the baseline's
'*lm_head*weight_quantizer' NVFP4, weight-only: a fixed group inside the budget), kept as
peers/recipes/qwen3_6_moe-module_spaces-no_lm_head.yaml, at --auto-quantize-bits 7 (under lwq's byte
costs the tiny source's least mix is 6.2352 active_moe bits: F32 routers and unsearched linears count
at 32 bits).  Model Optimizer's own search does not run on the CPU (its dynamic NVFP4 block fake quant
asserts "amax must be a CUDA tensor"), so the golden is its export of lwq's chosen mix (lwq's
OUT/auto_quantize_recipe.yaml, which carries the baseline's fixed choices: the routed experts W4A16,
lm_head W4A16, the FP8 KV cache in cast mode), run through peers/modelopt_driver.py --recipe; the case
runs lwq's search itself and compares its output with that export.

The same for the published recipe itself, "*lm_head*" in its space (lwq searches lm_head, issue 33:
engine/autoq/head/), at two budgets the tiny source meets: 7 bits (lwq chooses lm_head fp8, W8A8: its
input_scale from the calibrated amax of the final norm's output) and 6.3 bits (lm_head weight-only
NVFP4); Model Optimizer exports the mix lwq chose, lm_head included, and the case compares.

    .peers/venvs/modelopt/bin/python peers/autoq_baseline.py            # run every case, compare
    .peers/venvs/modelopt/bin/python peers/autoq_baseline.py --commit   # and write the goldens
    .peers/venvs/modelopt/bin/python peers/autoq_baseline.py --only LABEL [--commit]
"""

import json
import os
import shutil
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import make_goldens as mg  # noqa: E402
import run  # noqa: E402

SRC = "qwen3_5_moe-f32"
PUBLISHED = "huggingface/qwen3_6_moe/auto_quantize/w4a16_nvfp4_fp8_module_spaces_at_6p0bits-active_moe"
RECIPE = os.path.join(HERE, "recipes", "qwen3_6_moe-module_spaces-no_lm_head.yaml")
COMMAND = ".peers/venvs/modelopt/bin/python peers/autoq_baseline.py --commit"
# label, the recipe lwq runs (a file of peers/recipes, or the published recipe's name), the budget, and what
# lwq must choose for lm_head there (without "*lm_head*" in the space: the baseline's weight-only NVFP4, its
# one choice, inside the budget as Model Optimizer resolves an unmatched group with the baseline)
# and whether its golden carries Model Optimizer's solver on lwq's scores at every budget (an lps file)
CASES = [("autoq-module_spaces-baseline-7bits", RECIPE, "7", "w4a16_nvfp4", False),
         ("autoq-module_spaces-lm_head-7bits", PUBLISHED, "7", "fp8", True),
         ("autoq-module_spaces-lm_head-6p3bits", PUBLISHED, "6.3", "w4a16_nvfp4", False)]


def make_recipe(root):
    text = open(os.path.join(root, PUBLISHED + ".yaml")).read()
    line = '        - "*lm_head*"\n'
    if text.count(line) != 1:
        sys.exit(f"autoq_baseline: {PUBLISHED} has no single '*lm_head*' pattern line")
    head = ("# lwq peers: Model Optimizer 0.47's " + PUBLISHED + "\n# with \"*lm_head*\" left out of its "
            "module_search_spaces entry (lm_head then keeps the baseline's weight-only NVFP4, a fixed group): "
            "peers/autoq_baseline.py\n")
    with open(RECIPE, "w") as f:
        f.write(head + text.replace(line, ""))


def run_case(root, label, recipe, bits, head, lps, commit):
    mix = os.path.join(HERE, "recipes", f"{label}-{SRC}.yaml")  # lwq's chosen mix, Model Optimizer's recipe
    src = os.path.join(mg.DEST, "src", SRC)
    calib = os.path.join(mg.DEST, "calib.jsonl")
    lw = os.path.join(run.WORK, "lwq", SRC, label)
    mo = os.path.join(run.WORK, "mo", SRC, label)
    for d in (lw, lw + ".layerwise_resume", mo):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.dirname(lw), exist_ok=True)
    lwq_args = ["--recipe", recipe, "--recipe-root", root, "--auto-quantize-bits", bits]
    p = subprocess.run([run.LWQ, "quantize", src, "-o", lw, "--calib", calib, "--calib-size", str(run.CALIB["size"]),
                        "--calib-seq", str(run.CALIB["seq"]), "--batch-size", str(run.CALIB["batch"]), "--quiet"]
                       + lwq_args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"autoq_baseline: {label}: lwq: exit {p.returncode}: {p.stderr[-600:]}")
    rep = json.load(open(os.path.join(lw, "auto_quantize.json")))
    got = [g["format"] for g in rep["groups"] if g["group"] == "lm_head"]
    if got != ([head] if head else []):
        sys.exit(f"autoq_baseline: {label}: lwq chose lm_head {got}, the case wants {head}")
    shutil.copy(os.path.join(lw, "auto_quantize_recipe.yaml"), mix)
    p = subprocess.run([sys.executable, os.path.join(HERE, "modelopt_driver.py"), "--src", src, "--out", mo,
                        "--calib", calib, "--calib-size", str(run.CALIB["size"]), "--batch-size",
                        str(run.CALIB["batch"]), "--recipe", mix], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"autoq_baseline: {label}: Model Optimizer: exit {p.returncode}: {(p.stdout + p.stderr)[-600:]}")
    r = compare.compare(lw, mo, run.F32_RTOL)
    print(f"autoq_baseline: {SRC}/{label}: lm_head {got[0] if got else 'not searched'}, "
          f"{rep['cost_model']['predicted_active_bits_per_weight']} active bits; tensors byte-identical "
          f"{r['exact_identical']}/{r['exact_total']}, {r['scales']} scales (worst input "
          f"{r['worst']['input'][0] if r['worst']['input'] else 0:.2e}), {'equal' if r['equal'] else 'DIFFERENT'}")
    if not r["equal"]:
        sys.exit(f"autoq_baseline: lwq and Model Optimizer differ: {json.dumps(r, default=str)[:1500]}")
    if not commit:
        return
    gold = os.path.join("modelopt", SRC, label)
    shutil.rmtree(os.path.join(mg.DEST, gold), ignore_errors=True)
    os.makedirs(os.path.join(mg.DEST, gold))
    for f in mg.MO_FILES:
        if f == "PEERS_RUN.json":
            with open(os.path.join(mo, f)) as fi, open(os.path.join(mg.DEST, gold, f), "w") as fo:
                fo.write(fi.read().replace(run.ROOT + "/", ""))
        else:
            shutil.copy(os.path.join(mo, f), os.path.join(mg.DEST, gold))
    # the recipe lwq runs (and what it imports), and the mix Model Optimizer exported under issue33/
    os.makedirs(os.path.join(mg.DEST, mg.RECIPES, "issue33"), exist_ok=True)
    if os.path.isabs(recipe):
        name = mg.recipe_name(recipe)
        shutil.copy(recipe, os.path.join(mg.DEST, mg.RECIPES, name + ".yaml"))
        lwq_recipe = f"@DATA@/{mg.RECIPES}/{name}.yaml"
        files = mg.recipe_files(name)
    else:  # the published recipe, by its name under the goldens' recipe root
        mg.copy_recipe(recipe, root)
        lwq_recipe = recipe
        files = mg.recipe_files(recipe)
    shutil.copy(mix, os.path.join(mg.DEST, mg.RECIPES, mg.recipe_name(mix) + ".yaml"))
    for imp in ("configs/auto_quantize/units/base_disabled_layers", "configs/auto_quantize/units/base_cost_excluded_layers",
                "configs/ptq/presets/model/fp8", "configs/ptq/presets/model/w4a16_nvfp4",
                "huggingface/qwen3_5/ptq/w4a16_nvfp4-fp8_attn-kv_fp8_cast.quant_cfg"):
        mg.copy_recipe(imp, root)
    man = json.load(open(os.path.join(mg.DEST, "MANIFEST.json")))
    case = {"name": f"{SRC}/{label}", "src": f"src/{SRC}", "golden": gold,
            "lwq": ["--recipe", lwq_recipe, "--recipe-root", f"@DATA@/{mg.RECIPES}", "--auto-quantize-bits", bits],
            "rtol": run.F32_RTOL, "modelopt": {"recipe": os.path.relpath(mix, run.ROOT)}, "group": "autoq",
            "recipe_files": {**files, **mg.recipe_files(mg.recipe_name(mix))}}
    if lps:  # Model Optimizer's solver on lwq's scores (lm_head's group among them) at every budget
        c = types.SimpleNamespace(src=SRC, lwq=lwq_args)
        case["lps"] = mg.autoq_lps(c, (), "-" + label.replace(f"-{bits.replace('.', 'p')}bits", ""), bits)
    man["cases"] = [c for c in man["cases"] if c["name"] != case["name"]] + [case]
    if COMMAND not in man["commands"]:
        man["commands"].append(COMMAND)
    with open(os.path.join(mg.DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    mg.write_readme(man)
    size = mg.sums_and_size()
    print(f"autoq_baseline: case {case['name']} added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {mg.DEST}")


def main():
    args = sys.argv[1:]
    commit = "--commit" in args
    only = args[args.index("--only") + 1] if "--only" in args else None
    root = run.recipe_root()
    make_recipe(root)
    todo = [c for c in CASES if only is None or c[0] == only]
    if not todo:
        sys.exit(f"autoq_baseline: no case {only} (have {', '.join(c[0] for c in CASES)})")
    for label, recipe, bits, head, lps in todo:
        run_case(root, label, recipe, bits, head, lps, commit)


if __name__ == "__main__":
    main()
