"""transformers' numbers for lwq's weights-only eval, as a golden that CI checks without torch.

    peers/clients/run.sh                       # makes WORK/clients/results.json
    python3 peers/clients/make_goldens.py      # writes tests/data/clients/
    python3 peers/clients/make_goldens.py --vllm   # writes tests/data/clients/vllm.json (below)

Writes tests/data/clients/{eval_ids.jsonl, transformers.json}.  transformers.json records, per
case: the source (a folder of tests/data/peers/src, the peers harness's committed copy of the
transformers-written sources), lwq quantize's arguments (calibration: tests/data/peers/
calib.jsonl), the numbers `lwq eval SRC OUT --weights-only` gave (KL, nll and perplexity of
both streams, top-1), transformers' numbers on the same eval ids (the exact dequantization and
compressed-tensors' dense checkpoint), the agreement bounds of peers/clients/run.py, and the
versions and commands that made them.  tests/tools/eval/test_eval_transformers_golden.c reruns
lwq on every case: its numbers must equal the recorded ones and lie within the bounds of
transformers'.
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import run  # noqa: E402

DEST = os.path.join(ROOT, "tests", "data", "clients")
# NVFP4 max for every source, FP8 max for one F32 and one BF16 MoE source, the Qwen3-Next
# production recipe (MIXED_PRECISION)
CASES = [(f"{a}-{d}", "nvfp4") for a in run.ARCHS for d in ("f32", "bf16")] + \
        [("qwen3_moe-f32", "fp8"), ("mixtral-bf16", "fp8"), ("qwen3_next-bf16", "qwen3next_production")]
LWQ_KEYS = ("kl", "nll", "ppl", "nll_src", "ppl_src", "top1_agree", "tokens")


def versions():
    py = os.path.join(run.VENVS, "ct", "bin", "python")
    out = subprocess.run([py, "-c", "import json, torch, transformers, compressed_tensors; print(json.dumps("
                          "{'torch': torch.__version__, 'transformers': transformers.__version__, "
                          "'compressed_tensors': compressed_tensors.__version__}))"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def st_tensors(d):
    """name -> "DTYPE [d0, d1, ...]" of every tensor of an export, from its safetensors headers."""
    idx = os.path.join(d, "model.safetensors.index.json")
    shards = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for sh in shards:
        with open(os.path.join(d, sh), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            head = json.loads(f.read(n))
        for k, v in head.items():
            if k != "__metadata__":
                out[k] = f"{v['dtype']} {json.dumps(v['shape'])}"
    return dict(sorted(out.items()))


def vllm_versions():
    py = os.path.join(run.VENVS, "vllm", "bin", "python")
    out = subprocess.run([py, "-c", "import json, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in "
                          "('vllm', 'torch', 'transformers')}))"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def vllm_goldens():
    """tests/data/clients/vllm.json: what vLLM's loader said of lwq's output of each new-family
    case (peers/clients/run.sh --only vllm --modelopt over run.NEW_SOURCES and issue 35's NEMOTRON_SOURCES
    and KIMI_SOURCES; a run over some of them keeps the others' recorded cases), and, for each case it
    accepted, the tensors (names, dtypes, shapes) and the quantization config it accepted.
    tests/tools/families/test_vllm_golden.c quantizes every accepted case again and checks lwq still writes
    exactly those tensors and that config: a change to them needs vLLM run again."""
    res = json.load(open(os.path.join(run.WORK, "clients", "results.json")))
    opts = {(s, c): o for s, c, o in run.cases()}
    cases = []
    for r in res["rows"]:
        if r["src"] not in run.NEW_SOURCES + run.NEMOTRON_SOURCES + run.KIMI_SOURCES or "vllm" not in r:
            continue
        v, m = r["vllm"], r.get("vllm_modelopt")
        c = {"source": r["src"], "case": r["case"], "quantize": [x.replace(run.ROOT, "@ROOT@") for x in opts[(r["src"], r["case"])]],
             "vllm": v["status"][:300], "modelopt_export": (m or {}).get("status", "no golden")[:300]}
        if v["status"] == "ok":
            cj = v["config_json"]
            c.update(model_class=v["model_class"], overrides=v.get("overrides", {}),
                     vllm_patched=v.get("moe_backend_fallback", []), mtp_skipped=v.get("tensors_mtp_skipped", 0),
                     vllm_config=f"{cj['class']} {cj['quant_method']}, kv {cj['kv_cache']}, group {cj['group_size']}",
                     hf_quant_config=json.load(open(os.path.join(r["lwq"], "hf_quant_config.json")))["quantization"],
                     tensors=st_tensors(r["lwq"]))
        cases.append(c)
    # a run over some of the sources (--src) keeps the recorded cases of the others
    done = {(c["source"], c["case"]) for c in cases}
    old = os.path.join(DEST, "vllm.json")
    if cases and os.path.exists(old):
        kept = [c for c in json.load(open(old))["cases"] if (c["source"], c["case"]) not in done]
        cases = kept + cases
    if not cases:
        sys.exit(f"make_goldens: no vLLM result for the new families in {run.WORK}/clients/results.json: run "
                 "peers/clients/run.sh --only vllm --modelopt --src ... first")
    os.makedirs(DEST, exist_ok=True)
    doc = {"about": "vLLM's loader (peers/clients/check_vllm.py) on lwq's outputs of the new families' "
                    "transformers-written sources; made by peers/clients/make_goldens.py --vllm",
           "quantize": "lwq quantize tests/data/peers/src/SOURCE -o OUT --calib tests/data/peers/calib.jsonl "
                       f"--calib-size {run.CALIB['size']} --calib-seq {run.CALIB['seq']} --batch-size "
                       f"{run.CALIB['batch']} QUANTIZE (@ROOT@: the source tree)",
           "versions": vllm_versions(), "cases": cases}
    with open(os.path.join(DEST, "vllm.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"make_goldens: {len(cases)} case(s), {sum(c['vllm'] == 'ok' for c in cases)} accepted, in "
          f"{os.path.join(DEST, 'vllm.json')}")


def main():
    if sys.argv[1:] == ["--vllm"]:
        return vllm_goldens()
    res = json.load(open(os.path.join(run.WORK, "clients", "results.json")))
    rows = {(r["src"], r["case"]): r for r in res["rows"]}
    opts = {(s, c): o for s, c, o in run.cases()}
    cases = []
    for key in CASES:
        r = rows.get(key)
        if not r or not r.get("agreement"):
            sys.exit(f"make_goldens: no checked result for {key[0]}/{key[1]} in {run.WORK}/clients/results.json: "
                     "run peers/clients/run.sh first")
        ct, lw, ag = r["ct"], r["lwq_eval"], r["agreement"]
        if not all(v["agree"] for v in ag.values()):
            sys.exit(f"make_goldens: {key[0]}/{key[1]}: transformers and lwq disagree; no golden is written")
        t = {}
        for run_name, k in (("exact", "transformers_exact"), ("ct_dense", "transformers")):
            a = ag["exact" if run_name == "exact" else "ct"]
            t[run_name] = {"kl": ct[k]["kl"], "nll_src": ct[k]["nll_src"], "nll": ct[k]["nll"],
                           "bound_kl": a["bound_kl"], "bound_nll_src": a["bound_nll_src"], "bound_nll": a["bound_nll"]}
        cases.append({"source": key[0], "case": key[1],
                      "quantize": ["--calib-size", str(run.CALIB["size"]), "--calib-seq", str(run.CALIB["seq"]),
                                   "--batch-size", str(run.CALIB["batch"])] + opts[key],
                      "lwq_eval": {k: lw[k] for k in LWQ_KEYS}, "transformers": t})
    os.makedirs(DEST, exist_ok=True)
    shutil.copy(os.path.join(run.WORK, "eval_ids.jsonl"), os.path.join(DEST, "eval_ids.jsonl"))
    doc = {"about": "lwq eval --weights-only against transformers on the transformers-written sources of "
                    "tests/data/peers/src; made by peers/clients/make_goldens.py from peers/clients/run.sh",
           "quantize": "lwq quantize tests/data/peers/src/SOURCE -o OUT --calib tests/data/peers/calib.jsonl QUANTIZE",
           "eval": f"lwq eval tests/data/peers/src/SOURCE OUT --weights-only --data tests/data/clients/eval_ids.jsonl "
                   f"--data-size {run.EVAL['size']} --data-seq {run.EVAL['seq']}",
           "bounds": "peers/clients/run.py (module docstring): |KL_t - KL_lwq| <= 2 (2 sqrt(KL* E) + E), "
                     "|nll_t - nll_lwq| <= 2 R per stream, E and R measured against transformers' float64 run",
           "versions": versions(), "cases": cases}
    with open(os.path.join(DEST, "transformers.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"make_goldens: {len(cases)} case(s) in {DEST}")


if __name__ == "__main__":
    main()
