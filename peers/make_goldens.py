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
# qwen3_next and qwen3_moe too: the same test runs on families lwq has, so the dumps and the test
# are checked against a forward known to match before qwen3_5's lands
LAYER_DUMPS = ("qwen3_5-f32", "qwen3_5_moe-f32", "qwen3_5_text-f32", "qwen3_5_moe_text-f32", "qwen3_next-f32",
               "qwen3_moe-f32")
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


README = """# Model Optimizer goldens (issues 23 and 33)

Tiny checkpoints written by transformers {transformers} (`src/`, random init with fixed seeds,
`save_pretrained`, F32 and BF16), the calibration ids every tool used (`calib.jsonl`), and what
NVIDIA Model Optimizer {modelopt} (torch {torch}) exported from them on the CPU (`modelopt/`),
{n} cases ({n35} of them the qwen3_5 family, below).  `tests/tools/test_peer_goldens.c`
quantizes each source with lwq and compares with the golden: every tensor except input_scale /
k_scale / v_scale byte-identical, those within `rtol` (1e-5 for F32 sources; for BF16 sources the
bound derived from torch's own BF16 forward, `bf16_bounds`), configs equal in meaning.  Its test
`one_changed_byte_of_a_golden_fails` flips one byte of a weight, a block scale, an input scale and
a KV scale in a copy of a golden and shows that each is reported; `SHA256SUMS` pins every byte
besides (`goldens_are_intact`: a last-bit change of an input_scale would be within tolerance).
The deepseek_v3 `nvfp4` case is `nvfp4-as_modelopt_preset` here: lwq's own nvfp4 preset keeps the
MLA projections in BF16 by design (perf/RESULTS.md, "Side by side with Model Optimizer 0.47").

Regenerate (needs the network once, for peers/setup.sh):

    peers/setup.sh modelopt
    peers/run.sh --only core,kv,algos
    .peers/venvs/modelopt/bin/python peers/make_goldens.py
    peers/run.sh --only qwen3_5,qwen3_5_w4a16,qwen3_5_patched,qwen3_5_recipes
    .peers/venvs/modelopt/bin/python peers/make_goldens.py --family qwen3_5

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

The qwen3_5 cases run in groups (tests `qwen3_5`, `qwen3_5_w4a16`,
`qwen3_5_four_over_six_patched`, `qwen3_5_recipes`).  A case is skipped only while lwq itself
refuses it (exit 2 with `unknown model_type 'M'` for the source's model_type, `--qformat Q is not
supported` for the case's qformat, or a refusal naming one of the case's recipe files; the test
`only_lwq_refusals_skip` pins that); any other failure fails.  Recipe cases read Model
Optimizer's own recipe tree (`$LWQ_MODELOPT_RECIPES`, else `.peers/venvs/modelopt`; not copied
here) after checking by sha256 that it holds the files the golden was made from
(`recipe_files`).

`layers/`: transformers' own forward of the F32 qwen3_5 sources (and of qwen3_next-f32 and
qwen3_moe-f32, families lwq already has) on the first two calibration sequences, per decoder
layer: `hidden.0` the embedding output, `hidden.{{i+1}}` layer i's output (peers/layer_dump.py,
forward hooks on transformers' decoder layers).  tests/engine/forward/test_forward_peer_layers.c
feeds each lwq layer transformers' input and compares with its output (F32, 1e-5).
"""

if __name__ == "__main__":
    main()
