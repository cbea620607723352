"""The must-show table of issue 23 from .peers/work/results.json (peers/run.sh writes it), as the
markdown that perf/RESULTS.md holds: per source and case, tensors byte-identical out of total,
the worst input_scale difference against its bound, and whether the configs are equal.

    python3 peers/report.py [--groups core,patched] [--labels fp8,nvfp4,...]
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("PEERS_WORK", os.path.join(os.path.dirname(HERE), ".peers", "work"))


def cell(r):
    if "exact_total" not in r:
        return r["status"][:60]
    w = r.get("worst", {}).get("input")
    kv = r.get("worst", {}).get("kv")
    s = f"{r['exact_identical']}/{r['exact_total']}, {w[0]:.1e}" if w else f"{r['exact_identical']}/{r['exact_total']}, -"
    if kv:
        s += f", kv {kv[0]:.1e}"
    return s + (", cfg =" if not r["config_diffs"] else ", cfg DIFFER")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--groups", default="core,patched")
    ap.add_argument("--labels", default=None)
    a = ap.parse_args()
    res = json.load(open(os.path.join(WORK, "results.json")))
    rows = [r for r in res["results"] if r["group"] in a.groups.split(",")
            and (not a.labels or r["label"] in a.labels.split(","))]
    labels = []
    for r in rows:
        if r["label"] not in labels:
            labels.append(r["label"])
    srcs = []
    for r in rows:
        if r["src"] not in srcs:
            srcs.append(r["src"])
    by = {(r["src"], r["label"]): r for r in rows}
    print("| source | bound | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for s in srcs:
        bound = next((r["rtol"] for r in rows if r["src"] == s), None)
        cells = [cell(by[(s, l)]) if (s, l) in by else "" for l in labels]
        print(f"| {s} | {bound:.1e} | " + " | ".join(cells) + " |")
    eq = sum(r["status"] == "equal" for r in rows)
    print(f"\n{len(rows)} cases: {eq} equal in every respect", file=sys.stderr)


if __name__ == "__main__":
    main()
