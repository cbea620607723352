"""transformers' numbers for lwq's weights-only eval, as a golden that CI checks without torch.

    peers/clients/run.sh                       # makes WORK/clients/results.json
    python3 peers/clients/make_goldens.py      # writes tests/data/clients/

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


def main():
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
