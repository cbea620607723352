#!/usr/bin/env bash
# perf/bench_eval.sh — cost of `lwq eval` per layer against the forward of `lwq quantize` on the
# same model and the same tokens.
#
# Writes a synthetic llama (default hidden 1024, 4 layers, BF16) and one token file used both as
# the calibration set and as the eval set, then runs `lwq eval` with one in-memory NVFP4 candidate
# and --log-json.  Its calibration stream is exactly quantize's forward (same function, same
# observer, same tokens), so per layer (eval source forward + candidate forward) / calibration
# forward is the cost of evaluating one candidate relative to quantize's forward, measured in the
# same process in process CPU seconds (THREADS=1 by default), the minimum over REPEAT=3 runs
# (robust on a shared, loaded machine).
# The wall ratio against a separate `lwq quantize` run's forward_s is printed beside it.
#
# usage: [THREADS=1] [REPEAT=3] perf/bench_eval.sh [HIDDEN] [LAYERS] [SAMPLES] [SEQ]   (from the repository root)
set -euo pipefail
H=${1:-1024}
L=${2:-4}
N=${3:-16}
T=${4:-128}
THREADS=${THREADS:-1}
REPEAT=${REPEAT:-3}
LWQ=${LWQ:-./build/lwq}
W=$(mktemp -d /tmp/lwq-bench-eval.XXXXXX)
trap 'rm -rf "$W"' EXIT
"$LWQ" mkmodel "$W/m" --arch llama --hidden "$H" --layers "$L" --heads 8 --kv-heads 4 --vocab 4096 --seed 5 >/dev/null
python3 "$(dirname "$0")/random_ids.py" "$W/data.jsonl" "$N" "$T"
"$LWQ" quantize "$W/m" -o "$W/q" --qformat nvfp4 --calib "$W/data.jsonl" --calib-size "$N" --calib-seq "$T" \
    --quiet --log-json "$W/q.jsonl" --threads "$THREADS"
for r in $(seq "$REPEAT"); do
    "$LWQ" eval "$W/m" --qformat nvfp4 --calib "$W/data.jsonl" --calib-size "$N" --calib-seq "$T" \
        --data "$W/data.jsonl" --data-size "$N" --data-seq "$T" --quiet --log-json "$W/m.jsonl" \
        --threads "$THREADS" >/dev/null
done
python3 - "$W/q.jsonl" "$W/m.jsonl" "$H" "$L" "$N" "$T" "$THREADS" <<'EOF'
import json, sys
q = [json.loads(l) for l in open(sys.argv[1]) if '"event":"layer"' in l]
# REPEAT runs appended to one log: per layer and phase the minimum (the run least disturbed by
# other processes on a shared machine)
runs = {}
for l in open(sys.argv[2]):
    if '"eval_layer"' in l:
        d = json.loads(l)
        runs.setdefault(d["layer"], []).append(d)
m = []
for L in sorted(runs):
    d = dict(runs[L][0])
    for k in d:
        if k.endswith("_s"):
            d[k] = min(x[k] for x in runs[L])
    m.append(d)
print("model: llama hidden %s, %s layers, BF16; %s x %s tokens (calibration = eval set); --threads %s" % tuple(sys.argv[3:8]))
print("process CPU seconds per layer inside one eval run (its calibration stream is quantize's forward:")
print("the same lwq_model_layer_forward with the same statistics observer over the same tokens)")
print("%-6s %10s %10s %10s %8s | %12s %10s" % ("layer", "calib fwd", "src fwd", "cand fwd", "ratio", "quantize fwd", "wall ratio"))
tc = te = 0
for a, b in zip(q, m):
    ev = b["src_forward_cpu_s"] + b["cand_forward_cpu_s"]
    tc += b["calib_forward_cpu_s"]; te += ev
    print("%-6d %9.3fs %9.3fs %9.3fs %8.2f | %11.3fs %10.2f" % (b["layer"], b["calib_forward_cpu_s"],
          b["src_forward_cpu_s"], b["cand_forward_cpu_s"], ev / b["calib_forward_cpu_s"], a["forward_s"],
          (b["src_forward_s"] + b["cand_forward_s"]) / a["forward_s"]))
print("total  %9.3fs %21.3fs %8.2f   (eval of one candidate / quantize forward, CPU time; target <= 2.2)" % (tc, te, te / tc))
EOF
