"""Real clients read lwq's output: compressed-tensors converts it, transformers runs it, vLLM loads it.

    peers/clients/run.sh                  # every case below, then the two tables
    peers/clients/run.sh --scan DIR       # instead: every lwq output under DIR/lwq/<source>/<case>
                                          # (the peers harness's work folder, peers/run.py)
    peers/clients/run.sh --only ct|vllm --src llama-f32,qwen3_moe-bf16
    peers/clients/run.sh --only tables --case fp8,nvfp4   # the tables from the last results

Needs peers/setup.sh (the `ct` and `vllm` venvs), the transformers-written sources in
tests/data/peers/src (else WORK/src: peers/make_sources.py) and the calibration ids
tests/data/peers/calib.jsonl (else WORK/calib.jsonl), and a built lwq
(build/lwq or LWQ_BIN).  Steps: (1) lwq quantize every case (the peers harness's command: same
calibration, same options, same output path WORK/lwq/<source>/<case>, so the two harnesses share
outputs); (2) `lwq eval SRC OUT --weights-only` on the eval ids WORK/eval_ids.jsonl (16 x 64
random ids, seed 23: another generator and seed than the calibration ids); (3)
peers/clients/check_ct.py in the ct venv; (4) peers/clients/check_vllm.py in the vllm venv;
(5) the tables, to stdout and WORK/clients/table.md, all numbers in WORK/clients/results.json.

Agreement of transformers with `lwq eval --weights-only` (both compute the same quantity: mean
KL(P_src || P_q) per next-token prediction, f32 logits of the final hidden state, log-softmax
in double; perplexity exp(mean nll)).  Each framework's logits z differ from the exact
(float64) ones z* by rounding noise e.  To second order, KL(p||q) = 1/2 Var_p(d) for the logit
difference d = z_q - z_src, so with d = d* + e (e = e_q - e_src) and Cauchy-Schwarz,
    |KL - KL*| <= 2 sqrt(KL* * E) + E,    E = 1/2 Var_p(e) ~= KL(P* || P) of the source run plus
                                          that of the quantized run,
measured for transformers against its own float64 run.  lwq rounds at the same places (BF16
activations) with F32 weights, so its E is taken to be at most transformers': the bound on
|KL_transformers - KL_lwq| is twice the right-hand side.  For perplexity: log p(t) = z_t -
logsumexp(z) moves by at most max(e) - min(e) over the vocabulary, exactly; R = the mean of that
range over the predictions (per stream, measured the same way) bounds |nll - nll*|, and
2 R bounds |nll_transformers - nll_lwq| per stream.  F32 sources: E ~ 1e-14, the bounds are
~1e-8 relative; BF16 sources: E is what BF16 rounding of activations (and, in transformers, of
the dequantized weights) does, ~1e-5.

compressed-tensors' dequantizer rounds NVFP4 weights to BF16 whatever dtype it is asked for
(compressors/nvfp4/base.py, `decompress`: `unpack_fp4_from_uint8` defaults to bfloat16 and
`dequantize` keeps that dtype), so its dense checkpoint is not exactly the model lwq encodes;
transformers is therefore also run on the exact dequantization (FORMATS.md 2, computed in torch
from the checkpoint's tensors), which for F32 sources is lwq's weights-only model bit for bit.
Both are compared with lwq, each with its own measured E and R.
"""

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORK = os.environ.get("PEERS_WORK", os.path.join(ROOT, ".peers", "work"))
VENVS = os.environ.get("PEERS_VENVS", os.path.join(ROOT, ".peers", "venvs"))
LWQ = os.environ.get("LWQ_BIN", os.path.join(ROOT, "build", "lwq"))
CALIB = dict(size=16, seq=32, batch=4)  # as peers/run.py
EVAL = dict(size=16, seq=64, seed=23)
ARCHS = ["llama", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "qwen3_next"]
MOE = {"qwen3_moe", "mixtral", "deepseek_v3", "qwen3_next"}
# issues 33 and 34: the new families' sources (tests/data/peers/src; the qwen3_5 ones VLM wrappers
# with model.visual.* and mtp.*, qwen3_5_moe's experts fused 3-D on disk; glm4_moe with an MTP
# layer); the MLA ones' NVFP4 also as Model Optimizer's preset (lwq's own keeps MLA in BF16)
NEW_SOURCES = ["qwen3_5-f32", "qwen3_5-bf16", "qwen3_5_moe-f32", "qwen3_5_moe-bf16", "qwen3_5_text-f32",
               "qwen3_5_moe_text-f32"] + [f"{a}-{d}" for a in ("glm4_moe", "minimax_m2", "deepseek_v32", "glm_moe_dsa")
                                           for d in ("f32", "bf16")]
NEW_MLA = ("deepseek_v32", "glm_moe_dsa", "mistral4")
# issue 35: Nemotron-H (Mamba2, NoPE attention, non-gated and latent MoE) and Kimi-Linear (KDA +
# MLA); the cases of peers/run.py's nemotron and kimi_linear groups, Model Optimizer's goldens
NEMOTRON_SOURCES = [f"{a}-{d}" for a in ("nemotron_h", "nemotron_h_latent") for d in ("f32", "bf16")]
KIMI_SOURCES = ["kimi_linear-f32", "kimi_linear-bf16"]


def cases():
    """(source, case, lwq options): the lwq side of peers/run.py's core, kv, subsets and recipes
    groups, the qwen3_next production recipe (and its FP8 form vLLM 0.33 reads), and the
    calibration algorithms of its patched rows."""
    out = []
    for arch in ARCHS:
        for dt in ("f32", "bf16"):
            s = f"{arch}-{dt}"

            def add(label, qformat, kv="none", extra=()):
                out.append((s, label, ["--qformat", qformat, "--kv-cache", kv, *extra]))
            add("fp8", "fp8")
            add("nvfp4", "nvfp4")
            add("nvfp4-kv_fp8", "nvfp4", "fp8")
            add("nvfp4-kv_fp8_cast", "nvfp4", "fp8_cast")
            add("fp8-kv_fp8", "fp8", "fp8")
            add("nvfp4_mlp_only", "nvfp4_mlp_only")
            if arch in MOE:
                add("nvfp4_experts_only", "nvfp4_experts_only")
            if arch == "qwen3_next":
                out.append((s, "qwen3next_production", ["--qformat", "qwen3next_production"]))
                # FP8 with the conv1d left in the source dtype: what vLLM 0.33's Qwen3-Next loader reads
                out.append((s, "fp8-conv1d_unquantized",
                            ["--recipe", os.path.join(HERE, "recipes", "fp8_conv1d_unquantized.json")]))
            add("fp8-mse", "fp8", extra=("--algo", "mse"))
            add("nvfp4-mse-fp8_scale_sweep", "nvfp4", extra=("--algo", "mse", "--fp8-scale-sweep"))
            add("nvfp4-local_hessian", "nvfp4", extra=("--algo", "local_hessian"))
            # issue 25: an auto-quantize mix (MIXED_PRECISION, per-layer NVFP4 / FP8 / none)
            out.append((s, "autoq-6bits", ["--auto-quantize-bits", "6"]))
    # the new families: FP8, NVFP4 and weight-only NVFP4 (hf_ptq's presets, no KV cache)
    for s in NEW_SOURCES:
        for q in ("fp8", "nvfp4", "w4a16_nvfp4"):
            out.append((s, q, ["--qformat", q, "--kv-cache", "none"]))
        if s.startswith(NEW_MLA):
            out.append((s, "nvfp4-as_modelopt_preset",
                        ["--recipe", os.path.join(ROOT, "peers", "lwq_recipes", "nvfp4_modelopt.json")]))
    for s in NEMOTRON_SOURCES:
        for q in ("fp8", "nvfp4", "mamba_moe_nvfp4_conservative"):
            out.append((s, q, ["--qformat", q, "--kv-cache", "none"]))
    for s in KIMI_SOURCES:
        out.append((s, "fp8", ["--qformat", "fp8", "--kv-cache", "none"]))
        out.append((s, "nvfp4-as_modelopt_preset",
                    ["--recipe", os.path.join(ROOT, "peers", "lwq_recipes", "nvfp4_modelopt.json")]))
    # peers/run.py's recipes group: every published general/ptq recipe of Model Optimizer, on qwen3_moe
    root = recipe_root()
    if root:
        for s in ("qwen3_moe-f32", "qwen3_moe-bf16"):
            for name in sorted(os.listdir(os.path.join(root, "general", "ptq"))):
                r = "general/ptq/" + name.rsplit(".", 1)[0]
                out.append((s, r.replace("/", "_"), ["--recipe", r, "--recipe-root", root]))
    return out


def recipe_root():
    """Model Optimizer's modelopt_recipes folder in the modelopt venv (no import: any Python runs this)."""
    lib = os.path.join(VENVS, "modelopt", "lib")
    for py in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        d = os.path.join(lib, py, "site-packages", "modelopt_recipes")
        if os.path.isdir(os.path.join(d, "general", "ptq")):
            return d
    return None


def sh(cmd, log):
    with open(log, "w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode


def last_line(path):
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return lines[-1] if lines else ""
    except FileNotFoundError:
        return ""


def sources():
    """The committed transformers-written sources and calibration ids (tests/data/peers), else the
    peers harness's work folder; PEERS_SRC / PEERS_CALIB override."""
    committed = os.path.join(ROOT, "tests", "data", "peers")
    base = committed if os.path.isdir(os.path.join(committed, "src")) else WORK
    return (os.environ.get("PEERS_SRC", os.path.join(base, "src")),
            os.environ.get("PEERS_CALIB", os.path.join(base, "calib.jsonl")))


def eval_ids(src_dir):
    """16 x 64 random ids below the sources' vocabulary, seed 23."""
    path = os.path.join(WORK, "eval_ids.jsonl")
    vocab = min(json.load(open(os.path.join(src_dir, f"{a}-f32", "config.json")))["vocab_size"] for a in ARCHS
                if os.path.exists(os.path.join(src_dir, f"{a}-f32", "config.json")))
    r = random.Random(EVAL["seed"])
    text = "".join(json.dumps({"input_ids": [r.randrange(vocab) for _ in range(EVAL["seq"])]}) + "\n"
                   for _ in range(EVAL["size"]))
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)
    return path


def digest(paths, extra):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for b in iter(lambda: f.read(1 << 20), b""):
                h.update(b)
    h.update(json.dumps(extra).encode())
    return h.hexdigest()


def quantize(src_dir, src, label, opts, force):
    """lwq quantize, unless the output exists from the same source bytes, calibration ids, options
    and lwq binary (a stamp beside it says so)."""
    out = os.path.join(WORK, "lwq", src, label)
    sd = os.path.join(src_dir, src)
    stamp = digest([os.path.join(sd, f) for f in sorted(os.listdir(sd))] + [sources()[1], LWQ],
                   [CALIB, opts])
    stamp_file = out + ".clients-stamp"
    if not force and os.path.exists(os.path.join(out, "model.safetensors.index.json")) and \
            os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
        return out, None
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out + ".layerwise_resume", ignore_errors=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [LWQ, "quantize", os.path.join(src_dir, src), "-o", out, "--calib", sources()[1],
           "--calib-size", str(CALIB["size"]), "--calib-seq", str(CALIB["seq"]), "--batch-size", str(CALIB["batch"]),
           "--quiet"] + opts
    if sh(cmd, out + ".log") != 0:
        return out, "lwq refuses: " + last_line(out + ".log")
    with open(stamp_file, "w") as f:
        f.write(stamp)
    return out, None


def lwq_eval(src_dir, src, out, data):
    j = os.path.join(WORK, "clients", src, os.path.basename(out), "lwq_eval.json")
    os.makedirs(os.path.dirname(j), exist_ok=True)
    cmd = [LWQ, "eval", os.path.join(src_dir, src), out, "--weights-only", "--data", data, "--data-size",
           str(EVAL["size"]), "--data-seq", str(EVAL["seq"]), "--quiet", "--json", j]
    if sh(cmd, j + ".log") != 0:
        return {"error": last_line(j + ".log")}
    with open(j) as f:
        r = json.load(f)
    c = r["candidates"][0]
    return {"kl": c["kl"], "ppl": c["ppl"], "nll": c["nll"], "top1_agree": c["top1_agree"], "ppl_src": r["ppl_src"],
            "nll_src": r["nll_src"], "tokens": r["tokens"]}


def earlier(name):
    """The results an earlier run of one peer left (a run with --only shows the other's last ones)."""
    rf = os.path.join(WORK, "clients", f"results-{name}.jsonl")
    res = {}
    if os.path.exists(rf):
        for ln in open(rf):
            r = json.loads(ln)
            res[r["case"]] = r
    return res


def run_peer(venv, script, jobs, name):
    py = os.path.join(VENVS, venv, "bin", "python")
    if not os.access(py, os.X_OK):
        sys.exit(f"run: no {venv} venv at {os.path.join(VENVS, venv)}: run peers/setup.sh {venv}")
    jf = os.path.join(WORK, "clients", f"jobs-{name}.jsonl")
    rf = os.path.join(WORK, "clients", f"results-{name}.jsonl")
    with open(jf, "w") as f:
        for j in jobs:
            f.write(json.dumps(j) + "\n")
    print(f"run: {name}: {len(jobs)} case(s) in the {venv} venv (log {rf}.new.log)", flush=True)
    sh([py, os.path.join(HERE, script), "--jobs", jf, "--out", rf + ".new"], rf + ".new.log")
    res, new = earlier(name), {}
    if os.path.exists(rf + ".new"):
        for ln in open(rf + ".new"):
            r = json.loads(ln)
            new[r["case"]] = r
    res.update(new)  # the cases of this run replace theirs in the file; the others stay
    with open(rf, "w") as f:
        for r in res.values():
            f.write(json.dumps(r) + "\n")
    return new


def agreement(lw, ct):
    """The bounds of the module docstring, for transformers on the compressed-tensors dense
    checkpoint ('ct') and on the exact dequantization ('exact')."""
    out = {}
    kl_ref = ct["f64"]["kl"]
    for run, key in (("ct", "transformers"), ("exact", "transformers_exact")):
        t = ct[key]
        E = ct["noise_" + run]
        b_kl = 2 * (2 * math.sqrt(max(kl_ref, 0) * E) + E)
        b_src = 2 * ct["range_src"]
        b_q = 2 * ct["range_" + run]
        d_kl = abs(t["kl"] - lw["kl"])
        d_src = abs(t["nll_src"] - lw["nll_src"])
        d_q = abs(t["nll"] - lw["nll"])
        out[run] = {"kl": t["kl"], "ppl": t["ppl"], "ppl_src": t["ppl_src"], "d_kl": d_kl, "bound_kl": b_kl,
                    "d_nll_src": d_src, "bound_nll_src": b_src, "d_nll": d_q, "bound_nll": b_q,
                    "agree": d_kl <= b_kl and d_src <= b_src and d_q <= b_q}
    return out


def fmt(x, f="%.4g"):
    return "-" if x is None else f % x


def golden(r):
    """Model Optimizer 0.47's export of the same case, where the peers goldens have one."""
    d = os.path.join(ROOT, "tests", "data", "peers", "modelopt", r["src"], r["case"])
    return d if os.path.exists(os.path.join(d, "hf_quant_config.json")) else None


def tables(rows):
    head_a = ["source", "case", "compressed-tensors", "names/shapes/dtypes", "KL lwq", "KL transformers exact",
              "|diff| / bound", "KL transformers (CT dense)", "|diff| / bound", "ppl src lwq / transformers",
              "ppl q lwq / transformers", "agree"]
    head_b = ["source", "case", "vLLM config (both files)", "tensors accepted", "params unwritten", "by kind",
              "process_weights_after_loading", "status", "Model Optimizer's export (--modelopt)"]
    ta, tb = [], []

    def mo(r):
        m = r.get("vllm_modelopt")
        if m is None:
            return "-"
        return m["status"][:80] + (f" ({m['tensors_accepted']}/{m['tensors']})" if "tensors" in m else "")
    for r in rows:
        ct, vl, lw, ag = r.get("ct"), r.get("vllm"), r.get("lwq_eval"), r.get("agreement")
        if ct is not None:
            if ct.get("status") != "ok":
                ta.append([r["src"], r["case"], ct.get("converter", "-"), "-", "-", "-", "-", "-", "-", "-", "-",
                           ct["status"][:120]])
            else:
                conv = (f"{ct['converter'].split(' ')[0]}: {ct['ct_weight_packed']} packed, "
                        f"{ct['ct_fp8_weights']} FP8; dequantized {ct['dequantized_linears']}")
                a = ag or {}
                e, c = a.get("exact", {}), a.get("ct", {})
                ta.append([r["src"], r["case"], conv, "equal" if ct["names_shapes_dtypes_equal"] else "DIFFERENT",
                           fmt(lw.get("kl") if lw else None, "%.6g"), fmt(e.get("kl"), "%.6g"),
                           f"{fmt(e.get('d_kl'), '%.1e')} / {fmt(e.get('bound_kl'), '%.1e')}",
                           fmt(c.get("kl"), "%.6g"), f"{fmt(c.get('d_kl'), '%.1e')} / {fmt(c.get('bound_kl'), '%.1e')}",
                           f"{fmt(lw.get('ppl_src') if lw else None, '%.4f')} / {fmt(e.get('ppl_src'), '%.4f')}",
                           f"{fmt(lw.get('ppl') if lw else None, '%.4f')} / {fmt(e.get('ppl'), '%.4f')}",
                           ("yes" if e.get("agree") and c.get("agree") else "NO") if a else
                           (lw or {}).get("error", "-")[:80]])
        if vl is not None:
            if "tensors" in vl:
                tb.append([r["src"], r["case"],
                           f"{vl['config_json']['class']} {vl['config_json']['quant_method']}, kv "
                           f"{vl['config_json']['kv_cache']}; {'equal' if vl['configs_equal'] else 'DIFFERENT'}",
                           f"{vl['tensors_accepted']}/{vl['tensors']}", str(len(vl["params_unwritten"])),
                           ", ".join(f"{k} {v}" for k, v in vl["by_kind"].items()),
                           vl.get("process_weights_after_loading", "-")[:60], vl["status"][:80], mo(r)])
            else:
                tb.append([r["src"], r["case"], "-", "-", "-", "-", "-", vl["status"][:120], mo(r)])

    def md(head, body):
        if not body:
            return ""
        w = [max(len(str(x[i])) for x in body + [head]) for i in range(len(head))]
        lines = ["| " + " | ".join(str(v).ljust(w[i]) for i, v in enumerate(x)) + " |" for x in [head] + body]
        lines.insert(1, "|" + "|".join("-" * (k + 2) for k in w) + "|")
        return "\n".join(lines) + "\n"
    return md(head_a, ta), md(head_b, tb)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scan", help="check every lwq output under DIR/lwq/<source>/<case> instead of quantizing")
    ap.add_argument("--only", choices=("ct", "vllm", "tables"),
                    help="run only this peer (the other's last results are shown), or neither: "
                         "'tables' rebuilds the tables from both peers' last results (default both)")
    ap.add_argument("--src", help="comma-separated sources")
    ap.add_argument("--case", help="comma-separated case labels")
    ap.add_argument("--force", action="store_true", help="quantize again cases whose outputs exist")
    ap.add_argument("--modelopt", action="store_true",
                    help="vLLM also loads Model Optimizer 0.47's own export of each case where tests/data/peers/"
                         "modelopt/<source>/<case> has one (the 'Model Optimizer' column)")
    a = ap.parse_args()
    t0 = time.time()
    src_dir, calib = sources()
    if not os.path.isdir(src_dir) or not os.path.exists(calib):
        sys.exit(f"run: no sources in {src_dir} or no {calib}: run peers/run.sh once (it makes them with "
                 "peers/make_sources.py), or set PEERS_WORK")
    if not os.access(LWQ, os.X_OK):
        sys.exit(f"run: no lwq binary at {LWQ} (build it, or set LWQ_BIN)")
    os.makedirs(os.path.join(WORK, "clients"), exist_ok=True)
    data = eval_ids(src_dir)
    todo = []
    if a.scan:
        root = os.path.join(a.scan, "lwq")
        for s in sorted(os.listdir(root)):
            for c in sorted(os.listdir(os.path.join(root, s))):
                d = os.path.join(root, s, c)
                if os.path.isdir(d) and not c.endswith(".layerwise_resume"):
                    todo.append((s, c, d, None if os.path.exists(os.path.join(d, "model.safetensors.index.json"))
                                 else "lwq refuses: " + last_line(os.path.join(d, "PEERS_FAILED.txt"))))
    else:
        for s, c, opts in cases():
            if (a.src and s not in a.src.split(",")) or (a.case and c not in a.case.split(",")):
                continue
            out, err = quantize(src_dir, s, c, opts, a.force)
            todo.append((s, c, out, err))
    if a.scan:
        todo = [t for t in todo if (not a.src or t[0] in a.src.split(",")) and (not a.case or t[1] in a.case.split(","))]
    print(f"run: {len(todo)} lwq output(s), {sum(t[3] is not None for t in todo)} refused by lwq", flush=True)
    rows = []
    for s, c, out, err in todo:
        r = {"src": s, "case": c, "lwq": out}
        if err:
            r["ct"] = r["vllm"] = {"status": err}
        else:
            # the eval feeds only compressed-tensors' agreement (and some new sources' vocabularies
            # are below the eval ids')
            r["lwq_eval"] = lwq_eval(src_dir, s, out, data) if a.only != "vllm" else {"error": "not run (--only vllm)"}
        rows.append(r)
    ok = [r for r in rows if "lwq_eval" in r]
    key = lambda r: f"{r['src']}/{r['case']}"  # noqa: E731
    if a.only in (None, "ct"):
        res = run_peer("ct", "check_ct.py", [{"case": key(r), "lwq": r["lwq"], "src": os.path.join(src_dir, r["src"]),
                                              "data": data, "work": os.path.join(WORK, "clients", r["src"], r["case"])}
                                             for r in ok], "ct")
    else:
        res = earlier("ct")
    if res:
        for r in ok:
            r["ct"] = res.get(key(r), {"status": "check_ct.py gave no result (see its log)"})
            if r["ct"].get("status") == "ok" and "error" not in r["lwq_eval"]:
                r["agreement"] = agreement(r["lwq_eval"], r["ct"])
    if a.only in (None, "vllm"):
        jobs = [{"case": key(r), "lwq": r["lwq"], "dtype": "auto"} for r in ok]
        if a.modelopt:
            jobs += [{"case": "modelopt:" + key(r), "lwq": golden(r), "dtype": "auto"} for r in rows if golden(r)]
        res = run_peer("vllm", "check_vllm.py", jobs, "vllm")
    else:
        res = earlier("vllm")
    if res:
        for r in ok:
            r["vllm"] = res.get(key(r), {"status": "check_vllm.py gave no result (see its log)"})
        for r in rows:
            if golden(r) and "modelopt:" + key(r) in res:
                r["vllm_modelopt"] = res["modelopt:" + key(r)]
    ta, tb = tables(rows)
    text = ("### compressed-tensors and transformers\n\n" + ta + "\n### vLLM 0.33 loader\n\n" + tb) if ta or tb else ""
    print(text)
    with open(os.path.join(WORK, "clients", "table.md"), "w") as f:
        f.write(text)
    for r in rows:
        for k in ("ct", "vllm"):
            if isinstance(r.get(k), dict):
                r[k].pop("traceback", None) if r[k].get("status") == "ok" else None
    with open(os.path.join(WORK, "clients", "results.json"), "w") as f:
        json.dump({"rows": rows, "calib": CALIB, "eval": EVAL, "wall_s": round(time.time() - t0, 1)}, f, indent=1)
    n_ct = sum(bool(r.get("agreement")) and all(v["agree"] for v in r["agreement"].values()) for r in rows)
    n_v = sum((r.get("vllm") or {}).get("status") == "ok" for r in rows)
    print(f"run: {len(rows)} output(s): transformers agrees with lwq eval on {n_ct}, vLLM accepts {n_v}; "
          f"{time.time() - t0:.0f} s; details in {os.path.join(WORK, 'clients', 'results.json')}")


if __name__ == "__main__":
    main()
