"""Model Optimizer's export of the mix lwq's search chose under one of Model Optimizer 0.47's published
auto_quantize recipes with candidates of their own algorithm (issue 33): goldens of group autoq (the
module_spaces baseline cases are peers/autoq_baseline.py's).

Model Optimizer's own search does not run on the CPU (its dynamic NVFP4 block fake quant asserts
"amax must be a CUDA tensor"), so each golden is its export of lwq's chosen mix (lwq's
OUT/auto_quantize_recipe.yaml), run through peers/modelopt_driver.py --recipe; the case runs lwq's
search itself and compares its output with that export.  The cases (CASES below):

- autoq-nvfp4_mse_fp8-6bits-patched (qwen3_5-f32): general/auto_quantize/nvfp4_mse_fp8_at_6p0bits as
  published (candidates nvfp4_w4a4_weight_mse_fp8_sweep and fp8).  The mix's static NVFP4 blocks (mse
  with the FP8 scale sweep) need Model Optimizer's static NVFP4 fake quant, which is Triton: the
  patched peer (peers/torch_nvfp4.py, --patch torch-nvfp4), labelled so.
- autoq-muse_glimmer-no_lm_head-least-patched (qwen3_5-f32): models/meta-models/Muse-Glimmer-30B/auto_quantize/
  w4a16_nvfp4_4o6_mixed with "*lm_head*" left out of its search patterns (peers/recipes/
  muse_glimmer-no_lm_head.yaml), at the least its candidates allow on the F32 source (16.4571 bits: lm_head, a fixed group at its baseline's none, and the
  linear attention its baseline leaves unquantized counts 32): every searched group in its inline
  weight-only Four-over-Six candidate, the one mix of it a single-algorithm YAML expresses (beside FP8 under
  max it is not).  Four-over-Six is Model Optimizer's static NVFP4 fake quant: the patched peer.

    .peers/venvs/modelopt/bin/python peers/autoq_recipes.py [LABEL...]            # run, compare
    .peers/venvs/modelopt/bin/python peers/autoq_recipes.py --commit [LABEL...]   # and write the goldens
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

COMMAND = ".peers/venvs/modelopt/bin/python peers/autoq_recipes.py --commit"
GLIMMER_PUBLISHED = "models/meta-models/Muse-Glimmer-30B/auto_quantize/w4a16_nvfp4_4o6_mixed"

# label -> the source, the published recipe, the recipe lwq runs (None: the published one), the budget given
# on the command line (None: the recipe's), the Model Optimizer patch, the recipe files the case reads
CASES = {
    "autoq-nvfp4_mse_fp8-6bits-patched": dict(
        src="qwen3_5-f32", published="general/auto_quantize/nvfp4_mse_fp8_at_6p0bits", recipe=None, bits=None,
        patch="torch-nvfp4", imports=()),
    "autoq-muse_glimmer-no_lm_head-least-patched": dict(
        src="qwen3_5-f32", published=GLIMMER_PUBLISHED,
        recipe=os.path.join(HERE, "recipes", "muse_glimmer-no_lm_head.yaml"), bits="16.4571", patch="torch-nvfp4",
        imports=("configs/ptq/units/base_disable_all", "configs/auto_quantize/units/base_disabled_layers",
                 "configs/auto_quantize/units/base_cost_excluded_layers",
                 "configs/ptq/units/default_disabled_quantizers", "configs/ptq/units/w8a8_fp8_fp8",
                 "configs/numerics/nvfp4_four_over_six")),
}


def make_recipe(root, published, path):
    """peers/recipes/<name>.yaml: the published recipe without its '*lm_head*' search pattern."""
    text = open(os.path.join(root, published + ".yaml")).read()
    line = '        - "*lm_head*"\n'
    if text.count(line) != 1:
        sys.exit(f"autoq_recipes: {published} has no single '*lm_head*' pattern line")
    head = ("# lwq peers: Model Optimizer 0.47's " + published + "\n# with \"*lm_head*\" left out of its "
            "module_search_spaces entry: peers/autoq_recipes.py\n")
    with open(path, "w") as f:
        f.write(head + text.replace(line, ""))


def run_case(label, spec, root, commit):
    src_name = spec["src"]
    recipe = spec["recipe"] or os.path.join(root, spec["published"] + ".yaml")
    if spec["recipe"]:
        make_recipe(root, spec["published"], spec["recipe"])
    mix = os.path.join(HERE, "recipes", f"{label}-{src_name}.yaml")  # lwq's chosen mix, Model Optimizer's recipe
    src = os.path.join(mg.DEST, "src", src_name)
    calib = os.path.join(mg.DEST, "calib.jsonl")
    lw = os.path.join(run.WORK, "lwq", src_name, label)
    mo = os.path.join(run.WORK, "mo", src_name, label)
    for d in (lw, lw + ".layerwise_resume", mo):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.dirname(lw), exist_ok=True)
    bits = ["--auto-quantize-bits", spec["bits"]] if spec["bits"] else []
    lwq_args = ["--recipe", recipe, "--recipe-root", root] + bits
    p = subprocess.run([run.LWQ, "quantize", src, "-o", lw, "--calib", calib, "--calib-size", str(run.CALIB["size"]),
                        "--calib-seq", str(run.CALIB["seq"]), "--batch-size", str(run.CALIB["batch"]), "--quiet"]
                       + lwq_args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"autoq_recipes: {label}: lwq: exit {p.returncode}: {p.stderr[-600:]}")
    shutil.copy(os.path.join(lw, "auto_quantize_recipe.yaml"), mix)
    patch = ["--patch", spec["patch"]] if spec["patch"] else []
    p = subprocess.run([sys.executable, os.path.join(HERE, "modelopt_driver.py"), "--src", src, "--out", mo,
                        "--calib", calib, "--calib-size", str(run.CALIB["size"]), "--batch-size",
                        str(run.CALIB["batch"]), "--recipe", mix] + patch, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"autoq_recipes: {label}: Model Optimizer: exit {p.returncode}: {(p.stdout + p.stderr)[-600:]}")
    r = compare.compare(lw, mo, run.F32_RTOL)
    print(f"autoq_recipes: {src_name}/{label}: tensors byte-identical {r['exact_identical']}/{r['exact_total']}, "
          f"{r['scales']} scales, worst input scale {(r['worst']['input'] or (0,))[0]:.3g}, "
          f"{'equal' if r['equal'] else 'DIFFERENT'}")
    if not r["equal"]:
        sys.exit(f"autoq_recipes: lwq and Model Optimizer differ: {json.dumps(r, default=str)[:1500]}")
    if not commit:
        return
    gold = os.path.join("modelopt", src_name, label)
    shutil.rmtree(os.path.join(mg.DEST, gold), ignore_errors=True)
    os.makedirs(os.path.join(mg.DEST, gold))
    for f in mg.MO_FILES:
        if f == "PEERS_RUN.json":
            with open(os.path.join(mo, f)) as fi, open(os.path.join(mg.DEST, gold, f), "w") as fo:
                fo.write(fi.read().replace(run.ROOT + "/", ""))
        else:
            shutil.copy(os.path.join(mo, f), os.path.join(mg.DEST, gold))
    # the recipe lwq runs (and what it imports) and the mix Model Optimizer exported: a recipe of
    # peers/recipes under issue33/, a published one under its own name
    os.makedirs(os.path.join(mg.DEST, mg.RECIPES, "issue33"), exist_ok=True)
    if spec["recipe"]:
        name = mg.recipe_name(spec["recipe"])
        shutil.copy(spec["recipe"], os.path.join(mg.DEST, mg.RECIPES, name + ".yaml"))
    else:
        name = spec["published"]
        mg.copy_recipe(name, root)
    shutil.copy(mix, os.path.join(mg.DEST, mg.RECIPES, mg.recipe_name(mix) + ".yaml"))
    for imp in spec["imports"]:
        mg.copy_recipe(imp, root)
    man = json.load(open(os.path.join(mg.DEST, "MANIFEST.json")))
    case = {"name": f"{src_name}/{label}", "src": f"src/{src_name}", "golden": gold,
            "lwq": ["--recipe", f"@DATA@/{mg.RECIPES}/{name}.yaml", "--recipe-root", f"@DATA@/{mg.RECIPES}"] + bits,
            "rtol": run.F32_RTOL, "modelopt": {"recipe": os.path.relpath(mix, run.ROOT), **(
                {"patch": spec["patch"]} if spec["patch"] else {})}, "group": "autoq",
            "recipe_files": {**mg.recipe_files(name), **mg.recipe_files(mg.recipe_name(mix))}}
    man["cases"] = [c for c in man["cases"] if c["name"] != case["name"]] + [case]
    if COMMAND not in man["commands"]:
        man["commands"].append(COMMAND)
    with open(os.path.join(mg.DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    mg.write_readme(man)
    size = mg.sums_and_size()
    print(f"autoq_recipes: case {case['name']} added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {mg.DEST}")


def main():
    args = sys.argv[1:]
    commit = "--commit" in args
    labels = [a for a in args if a != "--commit"] or list(CASES)
    for label in labels:
        if label not in CASES:
            sys.exit(f"autoq_recipes: no case {label} (cases: {', '.join(CASES)})")
    root = run.recipe_root()
    for label in labels:
        run_case(label, CASES[label], root, commit)


if __name__ == "__main__":
    main()
