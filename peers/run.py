"""Run lwq beside NVIDIA Model Optimizer on the same transformers-written checkpoints, the same
calibration ids, and compare tensor by tensor.  One command, one table:

    peers/run.sh                 # = .peers/venvs/modelopt/bin/python peers/run.py
    peers/run.sh --only core     # only the FP8 max / NVFP4 max rows
    peers/run.sh --groups        # list the case groups

Steps: (1) sources and calibration ids (peers/make_sources.py) unless present; (2) Model
Optimizer (peers/modelopt_driver.py: one process per group, patched peers in their own);
(3) lwq on every case; (4) peers/compare.py on each pair; the table goes to stdout,
.peers/work/table.md and .peers/work/results.json.

Tolerances: F32 sources 1e-5 relative on input_scale / k_scale / v_scale.  BF16 sources: the
bound derived per model from torch itself (bf16_bound below).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402

WORK = os.environ.get("PEERS_WORK", os.path.join(ROOT, ".peers", "work"))
LWQ = os.environ.get("LWQ_BIN", os.path.join(ROOT, "build", "lwq"))
PY = sys.executable
CALIB = dict(size=16, seq=32, batch=4)
ARCHS = ["llama", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "qwen3_next"]
MOE = {"qwen3_moe", "mixtral", "deepseek_v3", "qwen3_next"}
# issue 34: GLM-4.5+, MiniMax-M2, DeepSeek-V3.2, GLM-5 (DSA), Mistral-Small-4 (peers/make_sources.py
# families34_configs); the MLA ones' nvfp4 is Model Optimizer's preset through lwq's recipe, as deepseek_v3's
FAMILIES34 = ["glm4_moe", "minimax_m2", "deepseek_v32", "glm_moe_dsa", "mistral4"]
MLA34 = {"deepseek_v32", "glm_moe_dsa", "mistral4"}
# issue 33: Qwen3.5 / 3.6 as published (VLM wrappers with model.visual.* and mtp.*; the MoE one's
# experts fused 3-D on disk) and the text-only *ForCausalLM forms (peers/make_sources.py)
# issue 35: Nemotron-H / Nemotron-3 (peers/make_sources.py nemotron_configs): Model Optimizer's
# fp8 / nvfp4 and its Mamba-MoE preset mamba_moe_nvfp4_conservative through hf_ptq's --qformat
NEMOTRON = ["nemotron_h", "nemotron_h_latent"]
QWEN3_5 = ["qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"]
QWEN3_5_RECIPES = {"qwen3_5": "huggingface/qwen3_5/ptq", "qwen3_5_moe": "huggingface/qwen3_5_moe/ptq"}
# FP8-block forms (peers/make_fp8_block.py) of two issue-34 sources, as MiniMax-M2 and GLM-4.5 are
# published: lwq reads the FP8 form, Model Optimizer the dequantized one (SRC.dequant)
FP8BLOCK = [f"{a}-fp8block-{d}" for a in ("minimax_m2", "glm4_moe") for d in ("f32", "bf16")]
# issue 35: Kimi-Linear (peers/make_sources.py kimi_linear_configs).  transformers 5.14.1 has no
# kimi_linear: this group runs in a venv with transformers 5.23 beside Model Optimizer 0.47
# (docs/FAMILIES.md); its MLA layers make nvfp4 Model Optimizer's preset through lwq's recipe
KIMI = ["kimi_linear"]
F32_RTOL = 1e-5
BF16_ULP = 2.0 ** -7  # one BF16 step, relative, at its widest (just above a power of two)


def recipe_root():
    import modelopt
    return os.path.join(os.path.dirname(os.path.dirname(modelopt.__file__)), "modelopt_recipes")


class Case:
    def __init__(self, group, src, label, mo, lwq, note=""):
        self.group, self.src, self.label, self.mo, self.lwq, self.note = group, src, label, mo, lwq, note

    @property
    def id(self):
        return f"{self.src}/{self.label}"

    def mo_dir(self):
        return os.path.join(WORK, "mo", self.src, self.label)

    def lwq_dir(self):
        return os.path.join(WORK, "lwq", self.src, self.label)


def preset(qformat, kv="none"):
    return dict(qformat=qformat, kv=kv), ["--qformat", qformat, "--kv-cache", kv]


def cases():
    out = []
    for arch in ARCHS:
        for dt in ("f32", "bf16"):
            src = f"{arch}-{dt}"
            out.append(Case("core", src, "fp8", *preset("fp8")))
            out.append(Case("core", src, "nvfp4", *preset("nvfp4")))
            if arch == "deepseek_v3":
                # lwq's nvfp4 keeps the MLA projections in BF16 (NVIDIA's published DeepSeek-V3.1
                # NVFP4); Model Optimizer's nvfp4 preset quantizes them: the same rules as a recipe
                out.append(Case("core", src, "nvfp4-as_modelopt_preset", dict(qformat="nvfp4", kv="none"),
                                ["--recipe", os.path.join(HERE, "lwq_recipes", "nvfp4_modelopt.json")]))
            out.append(Case("kv", src, "nvfp4-kv_fp8", *preset("nvfp4", "fp8")))
            out.append(Case("kv", src, "nvfp4-kv_fp8_cast", *preset("nvfp4", "fp8_cast")))
            out.append(Case("kv", src, "fp8-kv_fp8", *preset("fp8", "fp8")))
            out.append(Case("subsets", src, "nvfp4_mlp_only", *preset("nvfp4_mlp_only")))
            if arch in MOE:
                out.append(Case("subsets", src, "nvfp4_experts_only", *preset("nvfp4_experts_only")))
            # Model Optimizer's own layerwise calibration against its whole-model run and lwq
            mo, lw = preset("nvfp4", "fp8")
            mo = dict(mo, layerwise_checkpoint_dir=os.path.join(WORK, "mo-lw-ckpt", src))
            out.append(Case("layerwise", src, "nvfp4-kv_fp8-modelopt_layerwise", mo, lw))
            # patched peer: Model Optimizer's static NVFP4 fake quant replaced by peers/torch_nvfp4.py
            for q in ("nvfp4_w4a4_weight_mse_fp8_sweep", "nvfp4_w4a4_weight_local_hessian"):
                mo, lw = preset(q)
                out.append(Case("patched", src, q + "-patched", dict(mo, patch="torch-nvfp4"), lw))
            mo, lw = preset("nvfp4_w4a4_weight_local_hessian")
            out.append(Case("patched", src, "nvfp4_w4a4_weight_local_hessian-patched-unquantized_hessian_inputs",
                            dict(mo, patch="torch-nvfp4+lh-unquantized-inputs"), lw))
            if arch in ("llama", "qwen3_moe"):
                # Model Optimizer's GPTQ against lwq's own (they differ by design: docs/RECIPES.md)
                out.append(Case("patched", src, "nvfp4-gptq-vs_lwq_gptq-patched",
                                dict(recipe="general/ptq/nvfp4_default-kv_none-gptq", patch="torch-nvfp4"),
                                ["--qformat", "nvfp4", "--kv-cache", "none", "--algo", "gptq"]))
            out.append(Case("algos", src, "fp8-mse", dict(qformat="fp8", kv="none", algorithm='{"method": "mse"}'),
                            ["--qformat", "fp8", "--kv-cache", "none", "--algo", "mse"]))
            # the formats of Model Optimizer 0.47's published recipes (issue 33): weight-only NVFP4
            out.append(Case("formats", src, "w4a16_nvfp4", *preset("w4a16_nvfp4")))
            # an NVFP4 KV cache in cast mode (hf_ptq --kv_cache_qformat nvfp4_cast)
            out.append(Case("formats", src, "nvfp4-kv_nvfp4_cast", *preset("nvfp4", "nvfp4_cast")))
    for src in ("qwen3_moe-f32", "qwen3_moe-bf16", "llama-f32"):
        # the published recipes of those formats, as lwq reads them
        for r in ("general/ptq/nvfp4_weight_only-kv_fp8_cast", "general/ptq/nvfp4_weight_only-kv_fp16",
                  "general/ptq/nvfp4_default-kv_nvfp4_cast"):
            out.append(Case("formats", src, r.replace("/", "_"), dict(recipe=r),
                            ["--recipe", r, "--recipe-root", recipe_root()]))
        # a weight-only lm_head (the qwen3_5 recipes' '*lm_head*weight_quantizer' rule)
        r = os.path.join(HERE, "recipes", "w4a16_nvfp4-lm_head.yaml")
        out.append(Case("formats", src, "w4a16_nvfp4-lm_head", dict(recipe=r),
                        ["--recipe", r, "--recipe-root", recipe_root()]))
        # a W8A8 FP8 lm_head (what Model Optimizer's auto_quantize `fp8` candidate gives lm_head): group lm_head
        if src in ("llama-f32", "qwen3_moe-bf16"):
            r = os.path.join(HERE, "recipes", "fp8-lm_head.yaml")
            out.append(Case("lm_head", src, "fp8-lm_head", dict(recipe=r), ["--recipe", r, "--recipe-root", recipe_root()]))
        # a weight-only NVFP4 token embedding (the Nemotron-3-Nano W4A16 recipe's
        # '*embeddings*weight_quantizer' rule, on this family's embed_tokens)
        r = os.path.join(HERE, "recipes", "w4a16_nvfp4-embed.yaml")
        out.append(Case("formats", src, "w4a16_nvfp4-embed", dict(recipe=r),
                        ["--recipe", r, "--recipe-root", recipe_root()]))
        # Four-over-Six: Model Optimizer's static NVFP4 fake quant is a Triton kernel (CUDA only):
        # unpatched it fails on the CPU; the patched peer (torch_nvfp4.py) runs it
        out.append(Case("formats", src, "nvfp4_four_over_six", *preset("nvfp4_four_over_six")))
        mo, lw = preset("nvfp4_four_over_six")
        out.append(Case("formats", src, "nvfp4_four_over_six-patched", dict(mo, patch="torch-nvfp4"), lw))
    for src in ("qwen3_moe-f32", "qwen3_moe-bf16"):
        for name in sorted(os.listdir(os.path.join(recipe_root(), "general", "ptq"))):
            r = "general/ptq/" + name.rsplit(".", 1)[0]
            out.append(Case("recipes", src, r.replace("/", "_"), dict(recipe=r),
                            ["--recipe", r, "--recipe-root", recipe_root()]))
            if "mse" in r or "gptq" in r:  # Triton inside Model Optimizer: the patched peer too
                out.append(Case("patched", src, r.replace("/", "_") + "-patched", dict(recipe=r, patch="torch-nvfp4"),
                                ["--recipe", r, "--recipe-root", recipe_root()]))
    out += qwen3_5_cases()
    out += families34_cases()
    for src in FP8BLOCK:
        for q in ("fp8", "nvfp4"):
            out.append(Case("fp8block", src, q, *preset(q)))
        out.append(Case("fp8block", src, "fp8-kv_fp8", *preset("fp8", "fp8")))
    out += mixed_cases()
    out += mixed_names_cases()
    out += autoq_cases()
    out += kimi_cases()
    out += nemotron_cases()
    out += nemotron_recipes_cases()
    return out


def kimi_cases():
    """Group kimi_linear: FP8 and NVFP4 (hf_ptq's --qformat, no KV cache), fp8-kv_fp8 for the BF16 bound."""
    out = []
    for dt in ("f32", "bf16"):
        src = f"kimi_linear-{dt}"
        out.append(Case("kimi_linear", src, "fp8", *preset("fp8")))
        out.append(Case("kimi_linear", src, "nvfp4-as_modelopt_preset", dict(qformat="nvfp4", kv="none"),
                        ["--recipe", os.path.join(HERE, "lwq_recipes", "nvfp4_modelopt.json")]))
        out.append(Case("kimi_linear", src, "fp8-kv_fp8", *preset("fp8", "fp8")))
    return out


def mo_source(src):
    """The source Model Optimizer quantizes for src: the dequantized form of an FP8-block one."""
    return src + ".dequant" if src in FP8BLOCK else src


# MIXED_PRECISION exports (peers/recipes/nvfp4_experts-fp8_rest.yaml: NVFP4 routed experts, FP8
# the rest, max): on every MoE family whose experts transformers 5.14 holds as one fused module
# (per expert or fused 3-D on disk), where Model Optimizer lists "...mlp.experts" once.
MIXED_SRCS = ("qwen3_moe-f32", "qwen3_moe-bf16", "qwen3_5_moe-f32", "qwen3_5_moe-bf16", "qwen3_5_moe_text-f32",
              "deepseek_v3-f32", "qwen3_next-f32", "glm4_moe-f32", "deepseek_v32-f32", "glm_moe_dsa-f32")
# The same recipe where the names differ (issue 33, group "mixed_names"): mixtral's and
# minimax_m2's hub names say block_sparse_moe.experts.E.w1, transformers holds mlp.experts with
# gate_up_proj / down_proj, and Model Optimizer matches the recipe's '*mlp.experts.*' against
# those (lwq now does too: layout/arch/arch_qnames.h); before, lwq made their experts FP8.
MIXED_NAMES_SRCS = ("mixtral-f32", "mixtral-bf16", "minimax_m2-f32", "minimax_m2-bf16")


# lwq's --auto-quantize-bits with weight-only NVFP4 among the candidates (issue 33; the
# qwen3_6_moe auto_quantize recipes' formats): Model Optimizer's own search needs CUDA (its dynamic
# block fake quant asserts "amax must be a CUDA tensor"), so the golden is its export of the mix
# lwq chose (peers/recipes/autoq-*.yaml, lwq's OUT/auto_quantize_recipe.yaml), and lwq's case is
# the search itself: the same fixed assignment exported by both.
AUTOQ_SRCS = ("qwen3_moe-f32", "qwen3_5_moe-f32")
AUTOQ_LABEL = "autoq-fp8_w4a16_nvfp4-6bits"


def autoq_cases():
    """Group autoq: the search on each of AUTOQ_SRCS against Model Optimizer's export of its mix."""
    return [Case("autoq", src, AUTOQ_LABEL, dict(recipe=os.path.join(HERE, "recipes", f"{AUTOQ_LABEL}-{src}.yaml")),
                 ["--qformat", "fp8", "--kv-cache", "none", "--auto-quantize-bits", "6",
                  "--auto-quantize-formats", "fp8,w4a16_nvfp4"])
            for src in AUTOQ_SRCS]


def mixed_cases():
    """Group mixed: one MIXED_PRECISION recipe on each of MIXED_SRCS."""
    r = os.path.join(HERE, "recipes", "nvfp4_experts-fp8_rest.yaml")
    return [Case("mixed", src, "nvfp4_experts-fp8_rest", dict(recipe=r), ["--recipe", r, "--recipe-root", recipe_root()])
            for src in MIXED_SRCS]


def mixed_names_cases():
    """Group mixed_names: the mixed recipe on MIXED_NAMES_SRCS (hub and in-memory names differ)."""
    r = os.path.join(HERE, "recipes", "nvfp4_experts-fp8_rest.yaml")
    return [Case("mixed_names", src, "nvfp4_experts-fp8_rest", dict(recipe=r),
                 ["--recipe", r, "--recipe-root", recipe_root()]) for src in MIXED_NAMES_SRCS]


def qwen3_5_cases():
    """Groups qwen3_5 (FP8 / NVFP4 max, FP8 KV for the BF16 bound), qwen3_5_w4a16 (weight-only
    NVFP4), qwen3_5_patched (Four-over-Six: its static NVFP4 fake quant is Triton, so the patched
    peer) and qwen3_5_recipes (the snapshot's huggingface/qwen3_5* recipes on the model_type they
    target, text forms included; the mse ones patched)."""
    out = []
    for arch in QWEN3_5:
        for dt in ("f32", "bf16"):
            src = f"{arch}-{dt}"
            out.append(Case("qwen3_5", src, "fp8", *preset("fp8")))
            out.append(Case("qwen3_5", src, "nvfp4", *preset("nvfp4")))
            out.append(Case("qwen3_5", src, "fp8-kv_fp8", *preset("fp8", "fp8")))
            out.append(Case("qwen3_5_w4a16", src, "w4a16_nvfp4", *preset("w4a16_nvfp4")))
            mo, lw = preset("nvfp4_four_over_six")
            out.append(Case("qwen3_5_patched", src, "nvfp4_four_over_six-patched", dict(mo, patch="torch-nvfp4"), lw))
            # the other static-block searches on the fused-but-not-name-grouped in_proj_qkv/in_proj_z
            # (local_hessian with the Hessian inputs lwq uses: perf/RESULTS.md)
            for q, patch, tail in (("nvfp4_w4a4_weight_mse_fp8_sweep", "torch-nvfp4", "-patched"),
                                   ("nvfp4_w4a4_weight_local_hessian", "torch-nvfp4+lh-unquantized-inputs",
                                    "-patched-unquantized_hessian_inputs")):
                mo, lw = preset(q)
                out.append(Case("qwen3_5_patched", src, q + tail, dict(mo, patch=patch), lw))
            family = "qwen3_5_moe" if "moe" in arch else "qwen3_5"
            d = os.path.join(recipe_root(), QWEN3_5_RECIPES[family])
            for name in sorted(os.listdir(d)):
                if not name.endswith(".yaml") or name.endswith(".quant_cfg.yaml"):
                    continue  # a quant_cfg snippet is imported by a recipe, not a recipe itself
                r = QWEN3_5_RECIPES[family] + "/" + name[:-len(".yaml")]
                mo = dict(recipe=r)
                label = r.replace("/", "_")
                if "mse" in r:
                    mo["patch"] = "torch-nvfp4"
                    label += "-patched"
                out.append(Case("qwen3_5_recipes", src, label, mo, ["--recipe", r, "--recipe-root", recipe_root()]))
    return out


def families34_cases():
    """Group families34: FP8 and NVFP4 (hf_ptq's --qformat, no KV cache) on each issue-34 family,
    and fp8-kv_fp8 for the BF16 bound."""
    out = []
    for arch in FAMILIES34:
        for dt in ("f32", "bf16"):
            src = f"{arch}-{dt}"
            out.append(Case("families34", src, "fp8", *preset("fp8")))
            if arch in MLA34:
                out.append(Case("families34", src, "nvfp4-as_modelopt_preset", dict(qformat="nvfp4", kv="none"),
                                ["--recipe", os.path.join(HERE, "lwq_recipes", "nvfp4_modelopt.json")]))
            else:
                out.append(Case("families34", src, "nvfp4", *preset("nvfp4")))
            out.append(Case("families34", src, "fp8-kv_fp8", *preset("fp8", "fp8")))
            # weight-only NVFP4 (the published recipes' format), for the clients' check of it
            out.append(Case("families34_w4a16", src, "w4a16_nvfp4", *preset("w4a16_nvfp4")))
    return out


def nemotron_cases():
    """Group nemotron: FP8, NVFP4 and mamba_moe_nvfp4_conservative (hf_ptq's --qformat, no KV
    cache) on each Nemotron-H source, and fp8-kv_fp8 for the BF16 bound."""
    out = []
    for arch in NEMOTRON:
        for dt in ("f32", "bf16"):
            src = f"{arch}-{dt}"
            for q in ("fp8", "nvfp4", "mamba_moe_nvfp4_conservative"):
                out.append(Case("nemotron", src, q, *preset(q)))
            out.append(Case("nemotron", src, "fp8-kv_fp8", *preset("fp8", "fp8")))
    return out


# issue 35: Model Optimizer 0.47's published Nemotron-3 recipes (modelopt_recipes/models/nvidia/
# NVIDIA-Nemotron-3*/ptq/*.yaml) read from their own YAML; the mse ones (static NVFP4: Triton
# inside Model Optimizer) through the patched peer
NEMOTRON_RECIPES = ["NVIDIA-Nemotron-3-Nano-4B-BF16/ptq/nvfp4_w4a16",
                    "NVIDIA-Nemotron-3-Super-120B-A12B-BF16/ptq/nvfp4-max-calib",
                    "NVIDIA-Nemotron-3-Super-120B-A12B-BF16/ptq/nvfp4-mse",
                    "NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16/ptq/nvfp4-4o6",
                    "NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16/ptq/w4a16_nvfp4_4o6"]


def nemotron_recipes_cases():
    """Group nemotron_recipes: each of NEMOTRON_RECIPES on nemotron_h (F32, BF16)."""
    out = []
    for dt in ("f32", "bf16"):
        src = f"nemotron_h-{dt}"
        for name in NEMOTRON_RECIPES:
            r = "models/nvidia/" + name
            mo = dict(recipe=r)
            label = r.replace("/", "_")
            with open(os.path.join(recipe_root(), r + ".yaml")) as f:
                if "method: mse" in f.read():
                    mo["patch"] = "torch-nvfp4"
                    label += "-patched"
            out.append(Case("nemotron_recipes", src, label, mo, ["--recipe", r, "--recipe-root", recipe_root()]))
    return out


# ---- running -------------------------------------------------------------------------------------

def sh(cmd, log):
    with open(log, "w") as f:  # in WORK: nothing a tool writes relative to its cwd lands in the tree
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=WORK)
    return p.returncode


def last_line(path, grep=None):
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f if ln.strip() and (grep is None or grep in ln)]
        return lines[-1] if lines else ""
    except FileNotFoundError:
        return ""


def ensure_sources(todo=None):
    """Make the sources (and the calibration ids) the cases in todo need, or every source when todo
    is None.  Only what is asked: kimi_linear needs transformers >= 5.23, which this venv may lack,
    so a run of other groups must not try to write it."""
    src = os.path.join(WORK, "src")
    calib = os.path.join(WORK, "calib.jsonl")
    want = None if todo is None else {c.src.replace("-fp8block", "").rsplit("-", 1)[0] for c in todo}

    def missing(archs):
        return [a for a in archs if (want is None or a in want)
                and not all(os.path.isdir(os.path.join(src, f"{a}-{d}")) for d in ("f32", "bf16"))]

    for archs in (ARCHS + QWEN3_5, FAMILIES34 + NEMOTRON, KIMI):  # kimi_linear: transformers >= 5.23
        m = missing(archs)
        if m:
            subprocess.run([PY, os.path.join(HERE, "make_sources.py"), src, "--archs", ",".join(m)], check=True)
    for s in FP8BLOCK:
        if (todo is None or any(c.src == s for c in todo)) and not os.path.isdir(os.path.join(src, s + ".dequant")):
            base = s.replace("-fp8block", "")
            subprocess.run([PY, os.path.join(HERE, "make_fp8_block.py"), os.path.join(src, base), os.path.join(src, s),
                            os.path.join(src, s + ".dequant")], check=True)
    if not os.path.exists(calib):
        subprocess.run([PY, os.path.join(HERE, "make_sources.py"), "--calib", calib,
                        "--samples", str(CALIB["size"]), "--seq", str(CALIB["seq"])], check=True)
    return src, calib


def run_modelopt(todo, src_dir, calib, force):
    """One driver process per (group, patched) set: one torch import for many cases."""
    sets = {}
    for c in todo:
        if force or not os.path.exists(os.path.join(c.mo_dir(), "PEERS_RUN.json")):
            sets.setdefault(c.mo.get("patch", ""), []).append(c)
    for patch, cs in sets.items():
        jobs = os.path.join(WORK, f"jobs-{patch or 'plain'}.jsonl")
        with open(jobs, "w") as f:
            for c in cs:
                shutil.rmtree(c.mo_dir(), ignore_errors=True)
                lw = c.mo.get("layerwise_checkpoint_dir")
                if lw:
                    shutil.rmtree(lw, ignore_errors=True)
                f.write(json.dumps(dict(c.mo, src=os.path.join(src_dir, mo_source(c.src)), out=c.mo_dir(), calib=calib,
                                        batch_size=CALIB["batch"], calib_size=CALIB["size"])) + "\n")
        print(f"run: Model Optimizer, {len(cs)} case(s){' (patched: ' + patch + ')' if patch else ''}", flush=True)
        sh([PY, os.path.join(HERE, "modelopt_driver.py"), "--jobs", jobs], jobs + ".log")


def run_lwq(c, src_dir, calib, force):
    out = c.lwq_dir()
    if not force and os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        return
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out + ".layerwise_resume", ignore_errors=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [LWQ, "quantize", os.path.join(src_dir, c.src), "-o", out, "--calib", calib,
           "--calib-size", str(CALIB["size"]), "--calib-seq", str(CALIB["seq"]),
           "--batch-size", str(CALIB["batch"]), "--quiet"] + c.lwq
    rc = sh(cmd, out + ".log")
    if rc != 0:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "PEERS_FAILED.txt"), "w") as f:
            f.write(last_line(out + ".log") + "\n")


# ---- the BF16 bound -------------------------------------------------------------------------------

def bf16_bound(src, src_dir, calib, force):
    """How far BF16 rounding moves torch's own activation amaxes, counted on both sides.

    Model Optimizer runs FP8 + FP8 KV twice on the BF16 checkpoint: as hf_ptq loads it (BF16
    forward) and upcast to F32 (the same weights, F32 forward).  delta = the worst relative
    distance between the two runs' input_scale / k_scale / v_scale: what BF16 rounding inside
    torch's forward does to a calibrated scale.  lwq's BF16 forward rounds at the same places but
    in its own order, so lwq and torch may each be up to delta from the F32 value: bound =
    2 * delta, and never below one BF16 step (2^-7 relative): two correct BF16 forwards can
    round one element to neighbouring BF16 values."""
    ref = os.path.join(WORK, "mo", src, "bf16-bound-f32-forward")
    bf = os.path.join(WORK, "mo", src, "fp8-kv_fp8")
    if force or not os.path.exists(os.path.join(ref, "PEERS_RUN.json")):
        jobs = os.path.join(WORK, f"jobs-bound-{src}.jsonl")
        with open(jobs, "w") as f:
            f.write(json.dumps(dict(qformat="fp8", kv="fp8", load_dtype="float32", src=os.path.join(src_dir, mo_source(src)),
                                    out=ref, calib=calib, batch_size=CALIB["batch"], calib_size=CALIB["size"])) + "\n")
        sh([PY, os.path.join(HERE, "modelopt_driver.py"), "--jobs", jobs], jobs + ".log")
    ta, tb = compare.read_checkpoint(bf), compare.read_checkpoint(ref)
    delta, at = 0.0, None
    for n in ta:
        if n.rsplit(".", 1)[-1] in compare.SCALE_SUFFIXES and n in tb:
            va, vb = compare.scalar_f32(ta[n]), compare.scalar_f32(tb[n])
            d = abs(va - vb) / abs(vb)
            if d > delta:
                delta, at = d, n
    return {"delta": delta, "at": at, "bound": max(BF16_ULP, 2 * delta)}


# ---- table -----------------------------------------------------------------------------------------

def fmt_rel(w):
    return "-" if not w else f"{w[0]:.2e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated groups (core, kv, subsets, layerwise, patched, algos, recipes, formats, "
                    "qwen3_5, qwen3_5_w4a16, qwen3_5_patched, qwen3_5_recipes, families34, families34_w4a16, "
                    "fp8block, mixed, mixed_names, autoq, kimi_linear, nemotron, nemotron_recipes, lm_head)")
    ap.add_argument("--src", help="comma-separated sources (e.g. llama-f32,qwen3_moe-bf16)")
    ap.add_argument("--force", action="store_true", help="rerun cases whose outputs exist")
    ap.add_argument("--groups", action="store_true")
    a = ap.parse_args()
    allc = cases()
    if a.groups:
        for g in sorted({c.group for c in allc}):
            print(g, sum(c.group == g for c in allc))
        return
    todo = [c for c in allc if (not a.only or c.group in a.only.split(","))
            and (not a.src or c.src in a.src.split(","))]
    if not os.access(LWQ, os.X_OK):
        sys.exit(f"run: no lwq binary at {LWQ} (build it, or set LWQ_BIN)")
    os.makedirs(WORK, exist_ok=True)
    t0 = time.time()
    src_dir, calib = ensure_sources(todo)
    # every BF16 source's bound needs its fp8-kv_fp8 case
    need = {c.src for c in todo if c.src.endswith("-bf16")}
    extra = [c for c in allc if c.src in need and c.label == "fp8-kv_fp8" and c not in todo]
    run_modelopt(todo + extra, src_dir, calib, a.force)
    for c in todo:
        run_lwq(c, src_dir, calib, a.force)
    bounds = {s: bf16_bound(s, src_dir, calib, a.force) for s in sorted(need)}

    rows, results = [], []
    for c in todo:
        rtol = bounds[c.src]["bound"] if c.src in bounds else F32_RTOL
        r = {"case": c.id, "group": c.group, "src": c.src, "label": c.label, "rtol": rtol,
             "patched": bool(c.mo.get("patch"))}
        mo_fail = last_line(os.path.join(c.mo_dir(), "PEERS_FAILED.txt"))
        lwq_fail = last_line(os.path.join(c.lwq_dir(), "PEERS_FAILED.txt"))
        if mo_fail or lwq_fail:
            r["status"] = ("modelopt fails: " + mo_fail if mo_fail else "") + \
                          (" | " if mo_fail and lwq_fail else "") + ("lwq refuses: " + lwq_fail if lwq_fail else "")
        else:
            try:
                r.update(compare.compare(c.lwq_dir(), c.mo_dir(), rtol))
                r["status"] = "equal" if r["equal"] else "DIFFERENT"
            except compare.Bad as e:
                r["status"] = f"compare error: {e}"
        results.append(r)
        ident = f"{r['exact_identical']}/{r['exact_total']}" if "exact_total" in r else "-"
        cfg = ("yes" if not r["config_diffs"] else "NO") if "config_diffs" in r else "-"
        w = r.get("worst", {})
        rows.append([c.src, c.label + (" (patched)" if r["patched"] and "patched" not in c.label else ""), ident, fmt_rel(w.get("input")),
                     fmt_rel(w.get("kv")), f"{rtol:.2e}", cfg, r["status"][:150]])
    head = ["source", "case", "byte-identical", "worst input_scale", "worst kv scale", "bound", "configs equal", "status"]
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    lines = ["| " + " | ".join(str(v).ljust(widths[i]) for i, v in enumerate(row)) + " |" for row in [head] + rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    table = "\n".join(lines)
    print(table)
    for s, b in bounds.items():
        print(f"bound {s}: torch BF16 vs F32 forward worst {b['delta']:.3e} at {b['at']} -> bound {b['bound']:.3e}")
    with open(os.path.join(WORK, "table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(WORK, "results.json"), "w") as f:
        json.dump({"results": results, "bounds": bounds, "calib": CALIB, "wall_s": round(time.time() - t0, 1)},
                  f, indent=1, default=str)
    bad = sum(r["status"] == "DIFFERENT" for r in results)
    print(f"run: {len(results)} case(s), {sum(r['status'] == 'equal' for r in results)} equal, {bad} different, "
          f"{len(results) - bad - sum(r['status'] == 'equal' for r in results)} not compared; "
          f"{time.time() - t0:.0f} s; details in {os.path.join(WORK, 'results.json')}")


if __name__ == "__main__":
    main()
