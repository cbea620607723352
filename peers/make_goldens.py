"""Copy the tiny sources, the shared calibration ids and Model Optimizer's exports of them into
tests/data/peers, where tests/tools/families/test_peer_goldens.c checks lwq against them without torch.

    peers/run.sh --only core,kv,algos      # makes .peers/work/{src,mo,...} and the BF16 bounds
    .peers/venvs/modelopt/bin/python peers/make_goldens.py
    # one group beside the others (the other cases, bounds and files kept as they are):
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --add formats
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --add qwen3_5

Writes tests/data/peers/{calib.jsonl, src/, modelopt/, lwq_recipes/, modelopt_recipes/, layers/,
MANIFEST.json, README.md, SHA256SUMS}.  MANIFEST.json records, per case, the source, the golden,
lwq's arguments and the scale tolerance (1e-5 for F32 sources, the derived bound for BF16 ones),
plus the versions and the commands that made everything.  --add qwen3_5 (issue 33) rewrites the
qwen3_5 sources, cases and layer dumps (peers/layer_dump.py: layers/).
"""

import argparse
import hashlib
import json
import os
import re
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
# issue 33: the formats of Model Optimizer 0.47's published recipes (peers/run.py group "formats"),
# added with --add formats beside the goldens above
FORMAT_SRCS = ("llama-f32", "llama-bf16", "qwen3_moe-f32", "qwen3_moe-bf16")
FORMAT_CASES = {(s, "w4a16_nvfp4") for s in FORMAT_SRCS} | \
               {(s, "general_ptq_nvfp4_weight_only-kv_fp8_cast") for s in ("qwen3_moe-f32", "qwen3_moe-bf16")} | \
               {("llama-bf16", "nvfp4-kv_nvfp4_cast"), ("qwen3_moe-f32", "nvfp4-kv_nvfp4_cast")} | \
               {(s, "general_ptq_nvfp4_default-kv_nvfp4_cast") for s in ("llama-f32", "qwen3_moe-bf16")} | \
               {(s, "nvfp4_four_over_six-patched") for s in ("llama-f32", "qwen3_moe-f32", "qwen3_moe-bf16")} | \
               {(s, "w4a16_nvfp4-lm_head") for s in ("llama-f32", "qwen3_moe-bf16")} | \
               {(s, "w4a16_nvfp4-embed") for s in ("llama-f32", "qwen3_moe-bf16")}
RECIPES = "modelopt_recipes"  # the recipe YAML the recipe cases read, with its imports, under DEST

# issue 33 (about 4 MB in all): the VLM wrappers in F32 and BF16 with the three --qformat presets
# of the "Must show", Four-over-Six (patched) in F32, the text-only forms in F32, and the
# snapshot's qwen3_5* recipes (FP8 KV caches: kv_fp8 and kv_fp8_cast)
QWEN3_5_CASES = {(f"{a}-{d}", q) for a in ("qwen3_5", "qwen3_5_moe") for d in ("f32", "bf16")
                 for q in ("fp8", "nvfp4", "w4a16_nvfp4")} | \
    {("qwen3_5-f32", "nvfp4_four_over_six-patched"), ("qwen3_5_moe-f32", "nvfp4_four_over_six-patched"),
     ("qwen3_5-f32", "nvfp4_w4a4_weight_mse_fp8_sweep-patched"),
     ("qwen3_5_moe-f32", "nvfp4_w4a4_weight_mse_fp8_sweep-patched"),
     ("qwen3_5-f32", "nvfp4_w4a4_weight_local_hessian-patched-unquantized_hessian_inputs"),
     ("qwen3_5_moe-f32", "nvfp4_w4a4_weight_local_hessian-patched-unquantized_hessian_inputs"),
     ("qwen3_5_text-f32", "nvfp4"),
     ("qwen3_5_moe_text-f32", "nvfp4"), ("qwen3_5_moe_text-f32", "w4a16_nvfp4"),
     ("qwen3_5-f32", "huggingface_qwen3_5_ptq_w4a16_nvfp4-fp8_attn-kv_fp8_cast"),
     ("qwen3_5-bf16", "huggingface_qwen3_5_ptq_w4a16_nvfp4_mse-fp8_attn-kv_fp8_cast-patched"),
     ("qwen3_5_moe-f32", "huggingface_qwen3_5_moe_ptq_nvfp4_experts_mse-fp8_rest-kv_fp8-patched"),
     ("qwen3_5_moe-bf16", "huggingface_qwen3_5_moe_ptq_w4a16_nvfp4-fp8_attn-kv_fp8_cast"),
     ("qwen3_5_moe_text-f32", "huggingface_qwen3_5_moe_ptq_w4a16_nvfp4_mse-fp8_attn-kv_fp8_cast-patched")}
# qwen3_next and qwen3_moe too: the same test runs on families lwq has, so the dumps and the test
# are checked against a forward known to match before qwen3_5's lands
# Differences between lwq and Model Optimizer that are recorded, not hidden: the case's comparison
# must give exactly these notes (tests/tools/families/test_peer_goldens.c), so it fails on any other
# difference and again when lwq is fixed (then the entry goes).  README.md says what each is.
KNOWN_DIFFERENCES = {
}
# nemotron_h: Model Optimizer 0.47's export runs every exclude_modules / ignore name through the
# reverse of transformers' "backbone." -> "model." rename with a sentinel appended
# (quant_aware_conversion.build_reverse_name_mapper, ".\x00modelopt_name_sentinel"); the rename
# rewrites "model" inside the sentinel itself, removesuffix then finds no sentinel, and every name
# comes out as "lm_head.\u0000backbone.pt_name_sentinel": its lists cover no module, lwq's name them
for _src in ("nemotron_h-f32", "nemotron_h-bf16", "nemotron_h_latent-f32", "nemotron_h_latent-bf16"):
    for _label in ("fp8", "nvfp4", "mamba_moe_nvfp4_conservative"):
        KNOWN_DIFFERENCES[(_src, _label)] = [
            "hf_quant_config.json quantization.exclude_modules: backbone.embedding is excluded only in A",
            "config.json quantization_config.ignore: backbone.embedding is excluded only in A"]
# The published Nemotron-3 recipes (group nemotron_recipes) are MIXED_PRECISION: the same mangling
# reaches quantized_layers and the config groups' targets, which tests/helpers/check/peercmp.c then compares
# by the names before the sentinel (and says so).  Nano-4B's recipe quantizes the embedding too:
# lwq lists it by its checkpoint name, backbone.embedding (the module of backbone.embedding.weight);
# Model Optimizer by its in-memory name, backbone.embeddings, which transformers' conversion mapping
# gives the tensor only ("embedding.weight" -> "embeddings.weight"), so no export reverses it.
_MANGLED = [f"{w}: B's module names end in Model Optimizer's mangled name sentinel (compared by the names before it)"
            for w in ("hf_quant_config.json quantization.quantized_layers", "config.json quantization_config.config_groups",
                      "config.json quantization_config.quantized_layers")]
_EMBEDDING = ["hf_quant_config.json quantization.quantized_layers: backbone.embedding only in A",
              "hf_quant_config.json quantization.quantized_layers: backbone.embeddings only in B",
              "config.json quantization_config.config_groups.group_0 differs",
              "config.json quantization_config.quantized_layers: backbone.embedding only in A",
              "config.json quantization_config.quantized_layers: backbone.embeddings only in B"]
for _src in ("nemotron_h-f32", "nemotron_h-bf16"):
    for _name in run.NEMOTRON_RECIPES:
        _label = "models_nvidia_" + _name.replace("/", "_")
        if _name.endswith("/nvfp4_w4a16"):
            KNOWN_DIFFERENCES[(_src, _label)] = _MANGLED + _EMBEDDING
        else:  # the mse recipes run against the patched peer
            KNOWN_DIFFERENCES[(_src, _label + "-patched" if "max-calib" not in _name else _label)] = _MANGLED
LAYER_DUMPS = ("qwen3_5-f32", "qwen3_5_moe-f32", "qwen3_5_text-f32", "qwen3_5_moe_text-f32", "qwen3_next-f32",
               "qwen3_moe-f32")


def is_qwen3_5(src):
    return src.split("-")[0] in run.QWEN3_5


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


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


def recipe_name(rec):
    """A case's recipe as named under DEST/modelopt_recipes: one of peers/recipes (an absolute
    path) is issue33/<its stem> there (copy_case)."""
    return "issue33/" + os.path.basename(rec).rsplit(".", 1)[0] if os.path.isabs(rec) else rec


def recipe_files(name):
    """The recipe file and every file it imports, relative to DEST/modelopt_recipes (copy_recipe
    copied them there), with their sha256."""
    todo, seen = [name], {}
    while todo:
        n = todo.pop()
        rel = n + ".yaml"
        if rel in seen:
            continue
        text = open(os.path.join(DEST, RECIPES, rel)).read()
        seen[rel] = hashlib.sha256(text.encode()).hexdigest()
        block = re.search(r"^imports:\n((?:[ \t]+\S.*\n)+)", text, re.M)
        for line in (block.group(1).splitlines() if block else []):
            todo.append(line.split(":", 1)[1].strip())
    return dict(sorted(seen.items()))


def layer_dumps():
    os.makedirs(os.path.join(DEST, "layers"), exist_ok=True)
    for s in LAYER_DUMPS:
        subprocess.run([sys.executable, os.path.join(HERE, "layer_dump.py"), os.path.join(run.WORK, "src", s),
                        os.path.join(DEST, "layers", s + ".safetensors"), "--calib",
                        os.path.join(DEST, "calib.jsonl")], check=True)


def write_readme(man):
    with open(os.path.join(DEST, "README.md"), "w") as f:
        f.write(README.format(**man["versions"], n=len(man["cases"]),
                              n35=sum(is_qwen3_5(c["src"][len("src/"):]) for c in man["cases"])))


def add_qwen3_5():
    """--add qwen3_5: the QWEN3_5_CASES goldens and the layer dumps, replacing the qwen3_5 ones in
    DEST; every other case, bound and file stays as it is."""
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    if hashlib.sha256(open(os.path.join(run.WORK, "calib.jsonl"), "rb").read()).digest() != \
            hashlib.sha256(open(os.path.join(DEST, "calib.jsonl"), "rb").read()).digest():
        sys.exit("make_goldens: .peers/work/calib.jsonl differs from tests/data/peers/calib.jsonl")
    for sub in ("src", "modelopt"):
        for d in os.listdir(os.path.join(DEST, sub)):
            if is_qwen3_5(d):
                shutil.rmtree(os.path.join(DEST, sub, d))
    shutil.rmtree(os.path.join(DEST, "layers"), ignore_errors=True)
    bounds = {k: v for k, v in man["bf16_bounds"].items() if not is_qwen3_5(k)}
    bounds.update({k: v for k, v in res["bounds"].items() if is_qwen3_5(k)})
    new = [copy_case(c, bounds) for c in run.cases() if (c.src, c.label) in QWEN3_5_CASES]
    man["cases"] = [c for c in man["cases"] if not is_qwen3_5(c["src"][len("src/"):])] + new
    used = {c["src"][len("src/"):] for c in man["cases"]}
    man["bf16_bounds"] = {k: v for k, v in bounds.items() if k in used}
    man["what"] = WHAT
    if QWEN3_5_COMMAND not in man["commands"]:
        man["commands"].append(QWEN3_5_COMMAND)
    layer_dumps()
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} qwen3_5 cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


WHAT = ("Model Optimizer's CPU exports of transformers-written tiny checkpoints, for "
        "tests/tools/families/test_peer_goldens.c (issues 23 and 33); transformers' layer-by-layer forward "
        "of some of them (layers/), for tests/engine/forward/test_forward_peer_layers.c")
QWEN3_5_COMMAND = ("peers/run.sh --only qwen3_5,qwen3_5_w4a16,qwen3_5_patched,qwen3_5_recipes; "
                   ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add qwen3_5   "
                   "(peers/layer_dump.py writes layers/)")


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
    case = {"name": c.id, "src": f"src/{c.src}", "golden": gold, "lwq": args,
            "rtol": bounds[c.src]["bound"] if c.src in bounds else run.F32_RTOL,
            "modelopt": {k: v.replace(ROOT + "/", "") if isinstance(v, str) else v for k, v in c.mo.items()}}
    if run.mo_source(c.src) != c.src:  # Model Optimizer quantized the dequantized form
        case["modelopt"]["source"] = f"{run.mo_source(c.src)} (peers/make_fp8_block.py; not committed)"
    if is_qwen3_5(c.src) or c.group in ("nemotron", "nemotron_recipes"):
        # the group is the Criterion test that runs the case (tests/tools/families/test_peer_goldens.c); the
        # recipe's files name lwq's refusals of it
        case["group"] = c.group
        if "recipe" in c.mo:
            case["recipe_files"] = recipe_files(recipe_name(c.mo["recipe"]))
        if (c.src, c.label) in KNOWN_DIFFERENCES:
            case["known_differences"] = KNOWN_DIFFERENCES[(c.src, c.label)]
    return case


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
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} format cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


# issue 34: FP8 and NVFP4 on each family (peers/run.py group "families34"), added with --add
# families34, and transformers' per-layer forward of their F32 sources (forward/)
FAMILY_LABELS = {"fp8", "nvfp4", "nvfp4-as_modelopt_preset"}
FORWARD_SEQS = 4  # calibration rows in each forward dump
FAMILIES34_COMMAND = ("peers/run.sh --only families34; "
                      ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add families34")


def forward34():
    """transformers' own forward, layer by layer (peers/layer_dump.py), of each issue-34 family's F32
    source, into DEST/forward/<src>.safetensors; their MANIFEST entries."""
    out = []
    os.makedirs(os.path.join(DEST, "forward"), exist_ok=True)
    for arch in run.FAMILIES34:
        src = f"{arch}-f32"
        rel = os.path.join("forward", src + ".safetensors")
        subprocess.run([sys.executable, os.path.join(HERE, "layer_dump.py"), os.path.join(run.WORK, "src", src),
                        os.path.join(DEST, rel), "--calib", os.path.join(run.WORK, "calib.jsonl"),
                        "--seqs", str(FORWARD_SEQS)], check=True)
        out.append({"src": f"src/{src}", "dump": rel, "seqs": FORWARD_SEQS, "tol": run.F32_RTOL})
    return out


def add_families34():
    """--add families34: the families34 goldens and forward dumps beside the ones in DEST."""
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    bounds = dict(man["bf16_bounds"])
    for k, b in res["bounds"].items():
        if k.split("-")[0] in run.FAMILIES34:
            bounds.setdefault(k, b)
    new = [copy_case(c, bounds) for c in run.cases() if c.group == "families34" and c.label in FAMILY_LABELS]
    names = {c["name"] for c in new}
    man["cases"] = [c for c in man["cases"] if c["name"] not in names] + new
    man["bf16_bounds"] = bounds
    # the other groups' dumps (kimi_linear's) stay
    man["forward"] = [f for f in man.get("forward", []) if os.path.basename(f["src"]).rsplit("-", 1)[0]
                      not in run.FAMILIES34] + forward34()
    if FAMILIES34_COMMAND not in man["commands"]:
        man["commands"].append(FAMILIES34_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} families34 cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


# FP8-block sources (peers/run.py group "fp8block": lwq reads the FP8 form, Model Optimizer the
# dequantized one) and weight-only NVFP4 on the issue-34 families (group "families34_w4a16"),
# added with --add GROUP
GROUP_LABELS = {"fp8block": {"fp8", "nvfp4"}, "families34_w4a16": {"w4a16_nvfp4"},
                # issue 35: Model Optimizer 0.47's five published Nemotron-3 recipes on nemotron_h
                # (F32, BF16), the mse ones against the patched peer: every case of the group
                "nemotron_recipes": None,
                # a W8A8 FP8 lm_head (peers/recipes/fp8-lm_head.yaml) on llama F32 and qwen3_moe BF16
                "lm_head": None}


def add_group(group):
    """--add fp8block / families34_w4a16 / nemotron_recipes: that group's goldens beside the ones in DEST."""
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    bounds = dict(man["bf16_bounds"])
    for k, b in res["bounds"].items():
        if k in bounds and abs(bounds[k]["bound"] - b["bound"]) > 1e-12:
            sys.exit(f"make_goldens: the BF16 bound of {k} moved ({bounds[k]['bound']} -> {b['bound']})")
        bounds.setdefault(k, b)
    todo = [c for c in run.cases() if c.group == group and (GROUP_LABELS[group] is None or c.label in GROUP_LABELS[group])]
    for c in todo:  # a family not run (mistral4 while lwq refuses it) is left out, said so
        if not os.path.exists(os.path.join(c.mo_dir(), "PEERS_RUN.json")):
            print(f"make_goldens: {c.id}: no Model Optimizer export in {c.mo_dir()}; left out")
    new = [copy_case(c, bounds) for c in todo if os.path.exists(os.path.join(c.mo_dir(), "PEERS_RUN.json"))]
    names = {c["name"] for c in new}
    man["cases"] = [c for c in man["cases"] if c["name"] not in names] + new
    man["bf16_bounds"] = bounds
    cmd = f"peers/run.sh --only {group}; .peers/venvs/modelopt/bin/python peers/make_goldens.py --add {group}"
    if cmd not in man["commands"]:
        man["commands"].append(cmd)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} {group} cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


# DeepSeek-V3 routing where the group fill matters (peers/make_group_mask_source.py): the source
# as deepseek_v3 and as kimi_k2, and transformers' forward of it, added with --add group_mask
GROUP_MASK = ("deepseek_v3_group_mask-f32", "kimi_k2_group_mask-f32")
GROUP_MASK_COMMAND = ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add group_mask"


def add_group_mask():
    """--add group_mask: the two sources (from WORK/src/deepseek_v3-f32) and the forward dump of
    transformers 5.14.1 (deepseek_v3's modeling for both: it reads a kimi_k2 text config as
    deepseek_v3), listed under "forward"."""
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    base = os.path.join(run.WORK, "src", "deepseek_v3-f32")
    dump = os.path.join("forward", GROUP_MASK[0] + ".safetensors")
    for src, mt in zip(GROUP_MASK, ("deepseek_v3", "kimi_k2")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_group_mask_source.py"), base,
                        os.path.join(DEST, "src", src), "--model-type", mt], check=True)
    subprocess.run([sys.executable, os.path.join(HERE, "layer_dump.py"), os.path.join(DEST, "src", GROUP_MASK[0]),
                    os.path.join(DEST, dump), "--calib", os.path.join(run.WORK, "calib.jsonl"),
                    "--seqs", str(FORWARD_SEQS)], check=True)
    want = {f"src/{s}" for s in GROUP_MASK}
    man["forward"] = [x for x in man["forward"] if x["src"] not in want] + \
        [{"src": f"src/{s}", "dump": dump, "seqs": FORWARD_SEQS, "tol": run.F32_RTOL} for s in GROUP_MASK]
    if GROUP_MASK_COMMAND not in man["commands"]:
        man["commands"].append(GROUP_MASK_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: group_mask sources and forward dump added, {size / 1e6:.2f} MB in {DEST}")


# issue 35: kimi_linear, made in a venv with transformers 5.23 beside Model Optimizer 0.47 (transformers
# 5.14.1 has no kimi_linear; docs/FAMILIES.md), and transformers' forward of its F32 source layer by layer
# on the calibration rows, on longer sequences (two and three of its 64-token delta-rule chunks) and
# left-padded ones (forward/kimi_linear-f32*.safetensors)
KIMI_COMMAND = ("PEERS_WORK=.peers/kwork .peers/venvs/kimi523/bin/python peers/run.py --only kimi_linear; "
                "PEERS_WORK=.peers/kwork .peers/venvs/kimi523/bin/python peers/make_goldens.py --add kimi_linear")
KIMI_FORWARD = [("", 4, 0, ""), ("-t80", 2, 80, ""), ("-t80-pad", 3, 80, "0,7,33"), ("-t130-pad", 2, 130, "0,61")]
# transformers stacks the three depthwise convs into self_attn.conv1d.weight and Model Optimizer exports
# that; lwq writes the checkpoint's q_conv1d / k_conv1d / v_conv1d (same bytes, q | k | v)
KIMI_KNOWN = [f"model.layers.{i}.self_attn.{q}_conv1d.weight: only in A" for i in (0, 2) for q in "kqv"] + \
             [f"model.layers.{i}.self_attn.conv1d.weight: only in B" for i in (0, 2)]
# recorded with the others, so that --add mixed (which refreshes every case's notes) keeps them
KNOWN_DIFFERENCES.update({(f"kimi_linear-{d}", label): KIMI_KNOWN for d in ("f32", "bf16")
                          for label in ("fp8", "nvfp4-as_modelopt_preset")})


def add_kimi():
    """--add kimi_linear: its goldens and forward dumps beside the ones in DEST."""
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    bounds = dict(man["bf16_bounds"])
    for k, b in res["bounds"].items():
        if k.split("-")[0] in run.KIMI:
            bounds[k] = b
    new = []
    for c in run.cases():
        if c.group == "kimi_linear" and c.label in FAMILY_LABELS:
            case = copy_case(c, bounds)
            case["known_differences"] = KIMI_KNOWN
            new.append(case)
    names = {c["name"] for c in new}
    man["cases"] = [c for c in man["cases"] if c["name"] not in names] + new
    man["bf16_bounds"] = bounds
    fw = [f for f in man.get("forward", []) if not f["src"].startswith("src/kimi_linear")]
    for tag, seqs, seq, pad in KIMI_FORWARD:
        rel = os.path.join("forward", f"kimi_linear-f32{tag}.safetensors")
        cmd = [sys.executable, os.path.join(HERE, "layer_dump.py"), os.path.join(run.WORK, "src", "kimi_linear-f32"),
               os.path.join(DEST, rel), "--calib", os.path.join(run.WORK, "calib.jsonl"), "--seqs", str(seqs)]
        cmd += (["--seq", str(seq)] if seq else []) + (["--pad", pad] if pad else [])
        subprocess.run(cmd, check=True)
        fw.append({"src": "src/kimi_linear-f32", "dump": rel, "seqs": seqs, "tol": run.F32_RTOL})
    man["forward"] = fw
    if KIMI_COMMAND not in man["commands"]:
        man["commands"].append(KIMI_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} kimi_linear cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


# the budgets at which Model Optimizer's solver (peers/autoq_lps.py) is run on lwq's autoq scores
AUTOQ_LPS_BITS = ("5", "5.5", "6", "6.5", "7", "7.5")


# the active_moe golden: the qwen3_6_moe auto_quantize recipes' cost model and ratio
AUTOQ_ACTIVE_MOE = ("--auto-quantize-cost-model", "active_moe", "--auto-quantize-active-moe-ratio", "0.03125")


def autoq_lps(c, extra=(), suffix="", scored_at=None):
    """DEST/autoq/<src>.lps.json for autoq case c: lwq's search over c's source at each of
    AUTOQ_LPS_BITS (the first run's scores reused, as --auto-quantize-scores does), and Model
    Optimizer's LPS on each report's scores, costs and budget (peers/autoq_lps.py); budgets below
    the least mix (lwq refuses them) are left out.  Every choice must be Model Optimizer's."""
    import autoq_lps
    src = os.path.join(DEST, "src", c.src)
    calib = os.path.join(DEST, "calib.jsonl")
    base = os.path.join(run.WORK, "lps", c.src)
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    i = c.lwq.index("--auto-quantize-bits")
    first = scored_at or c.lwq[i + 1]
    rows = []
    for b in (first,) + tuple(x for x in AUTOQ_LPS_BITS if x != first):
        args = c.lwq[:i + 1] + [b] + c.lwq[i + 2:] + list(extra)
        if b != first:
            args += ["--auto-quantize-scores", os.path.join(base, first + ".layerwise_resume", "auto_quantize",
                                                            "scores.json")]
        out = os.path.join(base, b)
        p = subprocess.run([run.LWQ, "quantize", src, "-o", out, "--calib", calib, "--calib-size",
                            str(run.CALIB["size"]), "--calib-seq", str(run.CALIB["seq"]), "--batch-size",
                            str(run.CALIB["batch"]), "--quiet"] + args, capture_output=True, text=True)
        if p.returncode == 2 and "is below the smallest mix" in p.stderr:
            continue
        if p.returncode != 0:
            sys.exit(f"make_goldens: lwq {' '.join(args)}: exit {p.returncode}: {p.stderr[-400:]}")
        rows.append(autoq_lps.solve(json.load(open(os.path.join(out, "auto_quantize.json")))))
    if not all(r["same"] for r in rows):
        sys.exit(f"make_goldens: {c.src}: Model Optimizer's solver chooses otherwise: {rows}")
    rows.sort(key=lambda r: r["bits_per_weight"])
    import modelopt
    rel = os.path.join("autoq", c.src + suffix + ".lps.json")
    os.makedirs(os.path.join(DEST, "autoq"), exist_ok=True)
    with open(os.path.join(DEST, rel), "w") as f:
        json.dump({"what": "Model Optimizer's LPS (modelopt.torch.opt.searcher) on the scores, byte costs and "
                   "budget of lwq's search over this source (peers/autoq_lps.py), per budget; scored at "
                   f"--auto-quantize-bits {first}, the others solved from those scores",
                   "modelopt": modelopt.__version__, "scored_at": float(first), "lwq_options": list(extra),
                   "budgets": rows}, f, indent=1)
    return rel


MIXED_COMMAND = ("peers/run.sh --only mixed,autoq; .peers/venvs/modelopt/bin/python peers/make_goldens.py --add mixed")


def add_mixed():
    """--add mixed: the mixed and autoq groups' goldens (peers/run.py mixed_cases, autoq_cases)
    beside the others, whose sources they share; every case's known_differences refreshed from
    KNOWN_DIFFERENCES."""
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    bounds = man["bf16_bounds"]
    new = []
    for c in run.mixed_cases() + run.autoq_cases():
        if not os.path.isdir(os.path.join(DEST, "src", c.src)):
            sys.exit(f"make_goldens: {c.src} is not among the goldens' sources (add its group first)")
        if c.group == "autoq":  # lwq runs the search; the mix it chose, which Model Optimizer exported
            dst = os.path.join(DEST, RECIPES, recipe_name(c.mo["recipe"]) + ".yaml")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(c.mo["recipe"], dst)
        case = copy_case(c, bounds)
        case["group"] = c.group
        case["recipe_files"] = recipe_files(recipe_name(c.mo["recipe"]))
        if c.group == "autoq":
            case["lps"] = autoq_lps(c)
        new.append(case)
    names = {c["name"] for c in new}
    man["cases"] = [c for c in man["cases"] if c["name"] not in names] + new
    for c in man["cases"]:
        key = (c["src"][len("src/"):], c["name"].split("/", 1)[1])
        c.pop("known_differences", None)
        if key in KNOWN_DIFFERENCES:
            c["known_differences"] = KNOWN_DIFFERENCES[key]
    if MIXED_COMMAND not in man["commands"]:
        man["commands"].append(MIXED_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} mixed / autoq cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


MIXED_NAMES_COMMAND = ("peers/run.sh --only mixed_names; "
                       ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add mixed_names")


def add_mixed_names():
    """--add mixed_names: the mixed recipe on mixtral and minimax_m2 (peers/run.py
    mixed_names_cases), whose hub names differ from transformers' in-memory ones; in the mixed
    group's test beside the others."""
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    bounds = dict(man["bf16_bounds"])
    for k, b in res["bounds"].items():
        if k in bounds and abs(bounds[k]["bound"] - b["bound"]) > 1e-12:
            sys.exit(f"make_goldens: the BF16 bound of {k} moved ({bounds[k]['bound']} -> {b['bound']})")
        bounds.setdefault(k, b)
    new = []
    for c in run.mixed_names_cases():
        case = copy_case(c, bounds)
        case["group"] = "mixed"
        case["recipe_files"] = recipe_files(recipe_name(c.mo["recipe"]))
        new.append(case)
    names = {c["name"] for c in new}
    man["cases"] = [c for c in man["cases"] if c["name"] not in names] + new
    man["bf16_bounds"] = bounds
    if MIXED_NAMES_COMMAND not in man["commands"]:
        man["commands"].append(MIXED_NAMES_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} mixed_names cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


# issue 35: Nemotron-H (peers/run.py group "nemotron"): FP8, NVFP4 and Model Optimizer's
# mamba_moe_nvfp4_conservative on each source, added with --add nemotron, and transformers'
# per-layer forward of the F32 sources at 32 and 7 tokens and left-padded by 0, 15, 27, 31 (forward/)
NEMOTRON_LABELS = {"fp8", "nvfp4", "mamba_moe_nvfp4_conservative"}
NEMOTRON_COMMAND = ("peers/run.sh --only nemotron; "
                    ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add nemotron")
# (source, dump name, layer_dump.py arguments)
NEMOTRON_DUMPS = [
    ("nemotron_h-f32", "nemotron_h-f32", []),
    ("nemotron_h-f32", "nemotron_h-f32-len7", ["--seq", "7"]),
    ("nemotron_h-f32", "nemotron_h-f32-padded", ["--pad", "0,15,27,31"]),
    ("nemotron_h_latent-f32", "nemotron_h_latent-f32", []),
]


def forward_nemotron():
    out = []
    os.makedirs(os.path.join(DEST, "forward"), exist_ok=True)
    for src, name, extra in NEMOTRON_DUMPS:
        rel = os.path.join("forward", name + ".safetensors")
        subprocess.run([sys.executable, os.path.join(HERE, "layer_dump.py"), os.path.join(run.WORK, "src", src),
                        os.path.join(DEST, rel), "--calib", os.path.join(run.WORK, "calib.jsonl"),
                        "--seqs", str(FORWARD_SEQS)] + extra, check=True)
        out.append({"src": f"src/{src}", "dump": rel, "seqs": FORWARD_SEQS, "tol": run.F32_RTOL,
                    "layer_dump_args": extra})
    return out


def add_nemotron():
    """--add nemotron: the nemotron goldens and forward dumps beside the ones in DEST."""
    res = json.load(open(os.path.join(run.WORK, "results.json")))
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    bounds = dict(man["bf16_bounds"])
    for k, b in res["bounds"].items():
        if k.rsplit("-", 1)[0] in run.NEMOTRON:
            bounds[k] = b
    new = [copy_case(c, bounds) for c in run.cases() if c.group == "nemotron" and c.label in NEMOTRON_LABELS]
    names = {c["name"] for c in new}
    man["cases"] = [c for c in man["cases"] if c["name"] not in names] + new
    man["bf16_bounds"] = bounds
    man["forward"] = [f for f in man.get("forward", []) if f["src"].split("/", 1)[1].rsplit("-", 1)[0]
                      not in run.NEMOTRON] + forward_nemotron()
    if NEMOTRON_COMMAND not in man["commands"]:
        man["commands"].append(NEMOTRON_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {len(new)} nemotron cases added, {len(man['cases'])} cases, {size / 1e6:.2f} MB in {DEST}")


AUTOQ_ACTIVE_MOE_COMMAND = ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add autoq_active_moe"


def add_autoq_active_moe():
    """--add autoq_active_moe: beside each autoq case's lps file, DEST/autoq/<src>-active_moe.lps.json:
    the same search with Model Optimizer's active_moe cost model at the qwen3_6_moe auto_quantize
    recipes' ratio (AUTOQ_ACTIVE_MOE), scored at 7 bits (6 active bits is below the least mix of the
    tiny qwen3_5_moe source: its unsearched F32 linears weigh in full), and Model Optimizer's solver with its cost weights on the
    same scores; the case's "lps" becomes the list of both."""
    man = json.load(open(os.path.join(DEST, "MANIFEST.json")))
    by_name = {c["name"]: c for c in man["cases"]}
    n = 0
    for c in run.autoq_cases():
        case = by_name.get(f"{c.src}/{c.label}")
        if case is None:
            sys.exit(f"make_goldens: {c.src}/{c.label} is not in MANIFEST.json (--add mixed first)")
        plain = case["lps"] if isinstance(case["lps"], str) else case["lps"][0]
        case["lps"] = [plain, autoq_lps(c, AUTOQ_ACTIVE_MOE, "-active_moe", "7")]
        n += 1
    if AUTOQ_ACTIVE_MOE_COMMAND not in man["commands"]:
        man["commands"].append(AUTOQ_ACTIVE_MOE_COMMAND)
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(man, f, indent=1)
    write_readme(man)
    size = sums_and_size()
    print(f"make_goldens: {n} active_moe lps files added, {size / 1e6:.2f} MB in {DEST}")


FORMAT_COMMAND = ("peers/run.sh --only formats --src llama-f32,llama-bf16,qwen3_moe-f32,qwen3_moe-bf16; "
                  ".peers/venvs/modelopt/bin/python peers/make_goldens.py --add formats")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--add", choices=("formats", "qwen3_5", "families34", "nemotron", "mixed", "mixed_names", "kimi_linear", "fp8block",
                                      "families34_w4a16", "nemotron_recipes", "group_mask", "autoq_active_moe", "lm_head"),
                    help="add one group's goldens to those in tests/data/peers")
    a = ap.parse_args()
    if a.add == "formats":
        return add_formats()
    if a.add == "families34":
        return add_families34()
    if a.add == "kimi_linear":
        return add_kimi()
    if a.add == "nemotron":
        return add_nemotron()
    if a.add == "mixed_names":
        return add_mixed_names()
    if a.add == "mixed":
        return add_mixed()
    if a.add == "autoq_active_moe":
        return add_autoq_active_moe()
    if a.add in GROUP_LABELS:
        return add_group(a.add)
    if a.add == "group_mask":
        return add_group_mask()
    if a.add == "qwen3_5":
        return add_qwen3_5()
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
        if c.group == "families34":
            if c.label in FAMILY_LABELS:
                cases.append(copy_case(c, bounds))
            continue
        if c.group == "nemotron":
            if c.label in NEMOTRON_LABELS:
                cases.append(copy_case(c, bounds))
            continue
        if is_qwen3_5(c.src):
            if (c.src, c.label) in QWEN3_5_CASES:
                cases.append(copy_case(c, bounds))
            continue
        if c.label not in LABELS and (c.src, c.label) not in EXTRA_CASES:
            continue
        if c.src.startswith("deepseek_v3-") and c.label == "nvfp4":
            continue  # lwq's preset keeps the MLA projections in BF16 by design: nvfp4-as_modelopt_preset
        cases.append(copy_case(c, bounds))
        rj = json.load(open(os.path.join(c.mo_dir(), "PEERS_RUN.json")))
        versions = {k: rj[k] for k in ("modelopt", "torch", "transformers")}
    layer_dumps()
    used = {c["src"][len("src/"):] for c in cases}
    bounds = {k: v for k, v in bounds.items() if k in used}
    manifest = {
        "what": WHAT,
        "versions": versions,
        "commands": ["peers/setup.sh modelopt",
                     "peers/run.sh --only core,kv,algos,formats,qwen3_5,qwen3_5_w4a16,qwen3_5_patched,qwen3_5_recipes"
                     "   (peers/make_sources.py writes src/ and calib.jsonl; peers/modelopt_driver.py the goldens)",
                     ".peers/venvs/modelopt/bin/python peers/make_goldens.py"],
        "calib": {"file": "calib.jsonl", "size": run.CALIB["size"], "seq": run.CALIB["seq"],
                  "batch": run.CALIB["batch"]},
        "bf16_bounds": bounds,
        "cases": cases,
    }
    with open(os.path.join(DEST, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    write_readme(manifest)
    size = sums_and_size()
    print(f"make_goldens: {len(cases)} cases, {size / 1e6:.2f} MB in {DEST}")


README = """# Model Optimizer goldens (issues 23 and 33)

Tiny checkpoints written by transformers {transformers} (`src/`, random init with fixed seeds,
`save_pretrained`, F32 and BF16), the calibration ids every tool used (`calib.jsonl`), and what
NVIDIA Model Optimizer {modelopt} (torch {torch}) exported from them on the CPU (`modelopt/`),
{n} cases ({n35} of them the qwen3_5 family, below).  `tests/tools/families/test_peer_goldens.c` quantizes each source with lwq and compares with
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
copied to `modelopt_recipes/issue33/`, the qwen3_5 recipes' `*lm_head*weight_quantizer` rule),
and a weight-only NVFP4 token embedding (`w4a16_nvfp4-embed`: `peers/recipes/w4a16_nvfp4-embed.yaml`,
the Nemotron-3-Nano W4A16 recipe's `*embeddings*weight_quantizer` rule on `*embed_tokens*`:
Model Optimizer 0.47 wraps nn.Embedding as a QuantEmbedding and exports `model.embed_tokens.weight`
packed, with `weight_scale` and `weight_scale_2`, and leaves it out of `exclude_modules`).
A W8A8 FP8 lm_head (`fp8-lm_head`, llama F32 and qwen3_moe BF16, group `lm_head`:
`peers/recipes/fp8-lm_head.yaml`, the fp8 preset with `*lm_head*` weight and input quantizers
re-enabled, what Model Optimizer's auto_quantize `fp8` candidate gives lm_head): `lm_head.weight`
F8_E4M3, F32 scalars `weight_scale` and `input_scale` (the calibrated amax of the final norm's
output / 448), quant_algo `FP8`, lm_head out of `exclude_modules`.
Four-over-Six (`nvfp4_four_over_six-patched`, llama F32 and qwen3_moe F32/BF16) is from the
**patched peer**: Model Optimizer computes it with its static NVFP4 fake quant, a Triton kernel
that needs CUDA (unpatched on the CPU: `static_blockwise_fp4_fake_quant requires triton`), so
`peers/modelopt_driver.py --patch torch-nvfp4` replaces that one function by
`peers/torch_nvfp4.py`'s pure-torch copy of its arithmetic (block scale = amax / 6 fake-quantized
to E4M3 against global_amax * (448 / 256) / 6 by Model Optimizer's own `scaled_e4m3_impl`,
elements rounded to E2M1 with the kernel's boundaries), as Model Optimizer's own CPU test of
Four-over-Six (tests/unit/torch/quantization/test_nvfp4_four_over_six.py) monkeypatches it; its
MANIFEST entries say `"patch": "torch-nvfp4"`.  Every other format case is unpatched.

The issue-34 families (`peers/run.py` group `families34`; docs/FAMILIES.md): glm4_moe with its
MTP layer, minimax_m2, deepseek_v32, glm_moe_dsa, mistral4, FP8 and NVFP4 through hf_ptq's
--qformat, F32 and BF16 (the MLA ones' NVFP4 as `nvfp4-as_modelopt_preset`).  Their tests are
skipped only while lwq itself refuses the source's model_type.  `forward/<src>.safetensors`:
transformers' forward of their F32 sources layer by layer (MANIFEST.json `forward`), matched by
tests/engine/forward/test_forward_peer_dumps.c to `tol`; added with `--add families34`.
Weight-only NVFP4 (`w4a16_nvfp4`) on glm4_moe, minimax_m2, deepseek_v32 and glm_moe_dsa (group
`families34_w4a16`, `--add families34_w4a16`; Model Optimizer quantizes the DSA indexer's linears
weight-only too).

FP8-block sources (group `fp8block`, `--add fp8block`): `src/{{minimax_m2,glm4_moe}}-fp8block-*` are
the minimax_m2 and glm4_moe sources as MiniMax and Zhipu publish theirs, written by
`peers/make_fp8_block.py`: every linear weight (the MTP layer's too; not embeddings, lm_head,
routers, norms) F8_E4M3 with an F32 `weight_scale_inv` per 128 x 128 block and
`quantization_config` `{{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}`.
Model Optimizer cannot read them (hf_ptq dequantizes such checkpoints first), so its goldens are
its export of the dequantized form (`SRC.dequant`, made by the same script: E4M3 times the block
scale in float32, rounded to the source dtype, as lwq's reader and DeepSeek's `weight_dequant`
do; not committed, the script remakes it byte for byte); lwq quantizes the FP8 form.  The BF16
bound is computed on the dequantized form.

Nemotron-H (issue 35; `peers/run.py` group `nemotron`; docs/FAMILIES.md): nemotron_h (Mamba2,
ReLU^2 MLP, NoPE attention, MoE) and nemotron_h_latent (MoE with moe_latent_size), F32 and BF16,
through hf_ptq's --qformat fp8, nvfp4 and mamba_moe_nvfp4_conservative; their forward dumps at 32
and 7 tokens and left-padded by 0, 15, 27, 31 tokens; added with `--add nemotron`.  Their
`known_differences`: Model Optimizer 0.47's export mangles every exclude_modules / ignore name of
this model (its reverse-rename "backbone." rule eats the name sentinel: "lm_head.\\u0000backbone.
pt_name_sentinel"), so its lists match no module and lwq's, which name the modules, differ.

Model Optimizer 0.47's published Nemotron-3 recipes (issue 35; `peers/run.py` group
`nemotron_recipes`, `--add nemotron_recipes`; docs/RECIPES.md section 10), read from their own YAML
(copied under `modelopt_recipes/models/nvidia/`) on nemotron_h F32 and BF16: Super-120B
`nvfp4-max-calib`, and against the **patched peer** Super-120B `nvfp4-mse`, Ultra-550B `nvfp4-4o6`
and Nemotron-3.5-Lightning `w4a16_nvfp4_4o6` (its lm_head weight-only Four-over-Six NVFP4:
`lm_head.weight` U8, `weight_scale`, `weight_scale_2`, no input_scale, `W4A16_NVFP4`), and unpatched
Nano-4B `nvfp4_w4a16` (its lm_head weight-only FP8: `lm_head.weight` F8_E4M3 and an F32
`weight_scale`, no input_scale, listed as quant_algo `FP8`, since Model Optimizer's
get_quantization_format does not look at the input quantizer of an FP8 module; its embedding
weight-only NVFP4).  All five are MIXED_PRECISION, so the mangling above reaches
`quantized_layers` and the config groups' targets; tests/helpers/check/peercmp.c compares those by the
names before the sentinel and records that it did (`known_differences`).  Nano-4B's also records
the embedding's name: lwq lists `backbone.embedding`, the module of the checkpoint's
`backbone.embedding.weight`; Model Optimizer lists the in-memory `backbone.embeddings`, a name
transformers' conversion mapping gives the tensor only (`embedding.weight` -> `embeddings.weight`),
so no export reverses it.

Regenerate (needs the network once, for peers/setup.sh):

    peers/setup.sh modelopt
    peers/run.sh --only core,kv,algos,formats
    .peers/venvs/modelopt/bin/python peers/make_goldens.py

or only the format cases, beside the others:

    peers/run.sh --only formats --src llama-f32,llama-bf16,qwen3_moe-f32,qwen3_moe-bf16
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --add formats

or only the qwen3_5 family (and the layer dumps):

    peers/run.sh --only qwen3_5,qwen3_5_w4a16,qwen3_5_patched,qwen3_5_recipes
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --add qwen3_5

MANIFEST.json lists each case with lwq's arguments and Model Optimizer's settings.

## Qwen3.5 / 3.6 (`qwen3_5`, `qwen3_5_moe`; issue 33)

Sources (peers/make_sources.py `qwen3_5_configs`): 2 decoder layers, `layer_types`
[linear_attention, full_attention], hidden 32, partial rotary 0.25 with the published configs'
interleaved mRoPE section (sums to rotary_dim / 2), MoE: 8 experts, top 2, a gated shared expert.

- `qwen3_5-*`, `qwen3_5_moe-*`: the VLM wrappers Qwen publishes
  (`Qwen3_5[Moe]ForConditionalGeneration`: `model.language_model.*`, `model.visual.*` (a 1-block
  vision tower), `lm_head`), plus an MTP block.  transformers builds no MTP module (it ignores
  `^mtp.*` on load), so make_sources adds one after `save_pretrained` (`mtp.fc [H, 2H]`,
  `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.layers.0.*` = one full-attention
  decoder layer of the model's own kind, `mtp.norm`; `text_config.mtp_num_hidden_layers: 1`).
- transformers 5.14.1's `save_pretrained` writes MoE experts **per expert** by default
  (`save_original_format=True`: `mlp.experts.N.{{gate,up,down}}_proj.weight`).  `qwen3_5_moe-*`
  is written with `save_original_format=False`: its experts are **fused 3-D on disk**,
  `mlp.experts.gate_up_proj [E, 2I, H]` and `mlp.experts.down_proj [E, H, I]` (its MTP experts
  too).  Both forms load into the same fused `Qwen3_5MoeExperts`.
- `qwen3_5_text-*`, `qwen3_5_moe_text-*`: the `*ForCausalLM` forms (`model_type`
  `qwen3_5_text` / `qwen3_5_moe_text`, `model.layers.*`, experts per expert on disk), no MTP.

What Model Optimizer 0.47 does with them (peers/modelopt_driver.py does hf_ptq's steps: the
class `architectures` names; with `--qformat` on a VLM, only `model.language_model` is quantized
and calibrated, as hf_ptq's `extract_and_prepare_language_model_from_vl` does, every other child
of the wrappers getting disabled quantizers; MTP tensors found by name, passed to the export as
`extra_state_dict` and their prefixes set as `_mtp_layer_prefixes`, as hf_ptq's
`load_mtp_weights` does):

- `exclude_modules` (= config.json `quantization_config.ignore`) of the `--qformat` presets:
  `lm_head`, `model.language_model.embed_tokens`, per linear-attention layer
  `...linear_attn.conv1d`, `...linear_attn.in_proj_a`, `...linear_attn.in_proj_b`, per MoE layer
  `...mlp.gate` (the router) and `...mlp.shared_expert_gate`, then the vision tower as **one
  wildcard** `model.visual*`, and the MTP block as **two** wildcards `mtp*` and `mtp.layers.0*`.
  Quantized: `linear_attn.in_proj_qkv`, `in_proj_z`, `out_proj`, `self_attn.{{q,k,v,o}}_proj`,
  the dense MLP, every expert, the shared expert.  The text forms have the same list with
  `model.layers.` and without the visual / MTP entries.
- Everything excluded is written as it was loaded: the vision tower, embed_tokens, lm_head,
  routers, norms, conv1d, A_log, dt_bias in the source dtype; the MTP tensors exactly as on disk
  (the fused MTP experts stay fused 3-D: they are never split per expert).
- Fused 3-D experts are **exported per expert**: `mlp.experts.N.{{gate,up,down}}_proj.` `weight`,
  `weight_scale`, `weight_scale_2` (and `input_scale` but for W4A16).  Gate and up of an expert
  have the same `weight_scale_2` (one weight quantizer per expert over the fused [2I, H] rows; the
  shared expert's gate/up are made equal too), and each projection's `input_scale` is the same for
  every expert of a layer (one input quantizer for all experts: gate/up = the MoE block input's
  amax, which is also the shared expert's; down = over every expert's intermediate), as for
  qwen3_moe's per-expert modules.  The per-expert-on-disk text form exports the same names.
- hf_quant_config.json: `quant_algo` `FP8` / `NVFP4` (group_size 16) / `W4A16_NVFP4` (group_size
  16; no input_scale tensor anywhere; config.json's `config_groups.group_0` has `weights` only,
  no `input_activations`).  Four-over-Six (`nvfp4_four_over_six`) is exported as plain `NVFP4`:
  nothing in either config says four_over_six.  `kv_cache_quant_algo` null for the presets here.
- The recipes (`--recipe`: hf_ptq keeps the whole model, so lm_head is reachable) export
  `MIXED_PRECISION` with `quantized_layers`: each quantized module and its algo, the fused experts
  as **one entry per layer** (`...mlp.experts`: `NVFP4` or `W4A16_NVFP4`, group_size 16) although
  the tensors are per expert; `exclude_modules` holds only the MTP wildcards (the vision tower,
  routers, in_proj_a/b, conv1d are simply absent from `quantized_layers`).  The
  `w4a16_nvfp4-fp8_attn-kv_fp8_cast` recipes quantize `lm_head` weight-only (`W4A16_NVFP4`);
  `kv_fp8_cast` gives `kv_cache_quant_algo: FP8` with **no** k_scale / v_scale tensors (constant
  amax); `nvfp4_experts_mse-fp8_rest-kv_fp8` writes `self_attn.k_proj.k_scale` / `v_proj.v_scale`.
- GPU only in Model Optimizer: Four-over-Six and the `mse` recipes fake-quantize static NVFP4
  weights with Triton (`static_blockwise_fp4_fake_quant requires triton` on the CPU); their
  goldens come from the patched peer (peers/torch_nvfp4.py, the same arithmetic in torch,
  including four_over_six's FP8 normalisation maximum of 256) and are labelled `-patched`.
- The other static-block searches on the F32 VLM forms, patched too (group `qwen3_5_patched`):
  `nvfp4_w4a4_weight_mse_fp8_sweep-patched` and
  `nvfp4_w4a4_weight_local_hessian-patched-unquantized_hessian_inputs` (Model Optimizer's Hessian
  from unquantized inputs, as lwq builds it: perf/RESULTS.md).  These four were run by hand with
  `peers/modelopt_driver.py --jobs` on this directory's own sources and calib.jsonl (their
  PEERS_RUN.json says so), the cases of `peers/run.py` that produce them.

The qwen3_5 cases run in groups (tests `qwen3_5`, `qwen3_5_w4a16`,
`qwen3_5_four_over_six_patched`, `qwen3_5_recipes`).  A case is skipped only while lwq itself
refuses it (exit 2 with `unknown model_type 'M'` for the source's model_type, `--qformat Q is not
supported` for the case's qformat, or a refusal naming one of the case's recipe files; the test
`only_lwq_refusals_skip` pins that); any other failure fails.  The recipes are read from their
own YAML, copied with their imports into `modelopt_recipes/` as for the format cases
(`recipe_files` lists them, by sha256).

How Model Optimizer matches recipe patterns on fused experts (`conversion.py`,
`_match_quantizer`): the quantizers of a fused-experts module are named
`...mlp.experts.gate_up_proj_weight_quantizers.E`, `...mlp.experts.down_proj_weight_quantizers.E`
(one per expert), `...mlp.experts.gate_up_proj_input_quantizer` and
`...mlp.experts.down_proj_input_quantizer` (one for all experts), and a pattern matches either
that name or the name with `_quantizers.E` collapsed to `_quantizer`.  So an expert's gate and up
rows are one quantizer that `*up_proj*` patterns reach (there is no `gate_proj` in
`gate_up_proj`), and no pattern can single out one expert by `experts.E.`: a recipe translated
onto lwq's per-expert names (`experts.E.gate_proj`) agrees only while gate and up get the same
rule and no pattern names an expert index.

Per-block searches on fused groups (Four-over-Six, mse, the FP8 scale sweep, local_hessian):
Model Optimizer searches each weight against its global_amax as max_calibrate leaves it, shared
only within its name groups (q/k/v, gate/up, w1/w3 under one parent: `SHARED_PATTERNS`,
utils/shared_input.py), and its export then gives every linear that reads one input (Qwen3.5's
`in_proj_qkv` and `in_proj_z`) one `weight_scale_2`, recomputing the block scales from the
searched block amaxes against it; lwq does the same (engine/quant/qlayer.c, `search_amaxes`), so
the `qwen3_5*-f32 / nvfp4_four_over_six-patched` cases are byte-identical.

Recorded differences (`known_differences` in MANIFEST.json; the case must differ exactly so):
none at present (the last two, Four-over-Six on the split Gated DeltaNet and the MIXED_PRECISION
listing of fused experts, are fixed).

`layers/`: transformers' own forward of the F32 qwen3_5 sources (and of qwen3_next-f32 and
qwen3_moe-f32, families lwq already has) on the first two calibration sequences, per decoder
layer: `hidden.0` the embedding output, `hidden.{{i+1}}` layer i's output (peers/layer_dump.py,
forward hooks on transformers' decoder layers).  tests/engine/forward/test_forward_peer_layers.c
feeds each lwq layer transformers' input and compares with its output (F32, 1e-5).

## MIXED_PRECISION (`peers/run.py` group `mixed`)

`peers/recipes/nvfp4_experts-fp8_rest.yaml` (copied to `modelopt_recipes/issue33/`): NVFP4 on
the routed experts, FP8 on every other linear, max calibration, on the MoE families whose
experts transformers 5.14 holds as **one fused module** in memory (`Qwen3MoeExperts`,
`DeepseekV3Experts`, ...), whether the checkpoint stores them per expert (qwen3_moe,
qwen3_5_moe_text, deepseek_v3, qwen3_next, glm4_moe, deepseek_v32, glm_moe_dsa) or fused 3-D
(qwen3_5_moe).  Model Optimizer 0.47 (`quant_utils.py` `get_quant_config` /
`process_layer_quant_config`) lists the modules that own quantizers: each layer's experts
**once**, `...mlp.experts` (`NVFP4`, group_size 16, also as the NVFP4 `config_groups` target),
although the tensors are written per expert; and a MIXED_PRECISION config has no exclusion list
of its own: `exclude_modules` (config.json `ignore`) holds only the MTP prefixes that
`_add_mtp_exclusions` adds (`mtp*`, `mtp.layers.0*`; glm4_moe's `model.layers.2*`), and none at
all without MTP (the key is absent).  lwq writes the same (layout/format/export.h; an empty
`exclude_modules` where Model Optimizer has none).  mixtral and minimax_m2 (`peers/run.py` group
`mixed_names`, in this group's test): their hub names say `block_sparse_moe.experts.E.w1`, but
transformers holds `mlp.experts` (gate_up_proj / down_proj), and the recipe's `*mlp.experts.*`
glob meets those names in Model Optimizer; lwq matches recipe globs against the same in-memory
names (layout/arch/arch_qnames.h; before, lwq made these experts FP8).  `qnames/<src>.json`:
Model Optimizer's own quantizer names of each F32 source (`peers/quantizer_names.py`), against
which tests/layout/recipe/test_recipe_qnames.c checks lwq's in-memory names.

## Auto-quantize with weight-only NVFP4 (`peers/run.py` group `autoq`)

lwq's `--auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4` (base `--qformat fp8`,
the formats of Model Optimizer's `qwen3_6_moe/auto_quantize` recipes) on `qwen3_moe-f32` and
`qwen3_5_moe-f32`.  Model Optimizer's own search does not run on the CPU (its dynamic NVFP4
block fake quant asserts `amax must be a CUDA tensor`), so the golden is Model Optimizer's export
of the mix lwq chose: lwq's `OUT/auto_quantize_recipe.yaml`, kept as
`peers/recipes/autoq-fp8_w4a16_nvfp4-6bits-<src>.yaml` (and under `modelopt_recipes/issue33/`),
run through `peers/modelopt_driver.py --recipe`.  The case runs the search itself and compares its
output with that export: the same fixed assignment (W4A16_NVFP4 and FP8 modules in one
MIXED_PRECISION checkpoint, no input_scale on the W4A16 ones), written by both.  `autoq/<src>.lps.json`
(the case's `lps`): the per-group choice given the same scores: Model Optimizer's own solver (the
integer program of its gradient search, `modelopt.torch.opt.searcher.LPS`) run by
`peers/autoq_lps.py` on the scores, byte costs and budget of lwq's search at 5 to 7.5 bits per
weight (scored once, the other budgets solved from those scores as `--auto-quantize-scores` does;
budgets below the least mix left out); `auto_quantize_choice_is_model_optimizers` checks lwq's
choice at each against it.

## Auto-quantize with a fixed `quantize` baseline (`peers/autoq_baseline.py`)

`qwen3_5_moe-f32/autoq-module_spaces-baseline-7bits`: Model Optimizer's
`huggingface/qwen3_6_moe/auto_quantize/w4a16_nvfp4_fp8_module_spaces_at_6p0bits-active_moe` with
`"*lm_head*"` left out of its search space (lm_head then keeps the baseline's weight-only NVFP4, a
fixed group inside the budget), `issue33/qwen3_6_moe-module_spaces-no_lm_head.yaml` with its imports, run by lwq
at `--auto-quantize-bits 7` (the tiny source's least mix under lwq's byte costs is 6.2352 active_moe
bits).  The routed experts, which no space matches, keep the baseline's W4A16; attention, linear
attention and the shared experts are searched over W4A16 / FP8.  The golden is Model Optimizer's
export of the mix lwq chose (`issue33/autoq-module_spaces-baseline-7bits-qwen3_5_moe-f32.yaml`,
lwq's `OUT/auto_quantize_recipe.yaml`: the baseline's lm_head and FP8 cast KV cache with it) through
`peers/modelopt_driver.py --recipe`; the case runs lwq's search and compares.

`qwen3_5_moe-f32/autoq-module_spaces-lm_head-7bits` and `-6p3bits`: the published recipe itself
(`huggingface/qwen3_6_moe/...`, copied with its imports), `"*lm_head*"` in its space, so lm_head is a
search group of its own (cost weight 1, in the budget's numerator and denominator, candidates fp8 and
w4a16_nvfp4 as the space gives them, Model Optimizer 0.47's semantics): at 7 bits lwq chooses lm_head
fp8, written W8A8 (`lm_head.input_scale` from the calibrated amax of the final norm's output), at 6.3
bits weight-only NVFP4.  Each golden is Model Optimizer's export of the mix lwq chose, lm_head
included; the 7-bit case's `autoq/qwen3_5_moe-f32-autoq-module_spaces-lm_head.lps.json` holds Model
Optimizer's solver on lwq's scores (lm_head's group among them) at every budget the source meets.
"""

if __name__ == "__main__":
    main()
