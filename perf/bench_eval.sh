#!/usr/bin/env bash
# perf/bench_eval.sh — cost of `lwq eval` per layer against the forward of `lwq quantize` on the
# same model and the same tokens.
#
# Writes a synthetic llama (default hidden 1024, 4 layers, BF16), one token file used both as the
# calibration set of quantize and as the eval set of eval, quantizes it (NVFP4) with --log-json,
# then evaluates the written checkpoint (one candidate: the source stream + the candidate stream)
# with --log-json, and prints per layer: quantize forward_s, eval source + candidate forward, and
# their ratio (target <= 2.2).  Also evaluates the in-memory candidate (adds the calibration
# stream and the quantization, reported apart).
#
# usage: perf/bench_eval.sh [HIDDEN] [LAYERS] [SAMPLES] [SEQ]     (run from the repository root)
set -euo pipefail
H=${1:-1024}
L=${2:-4}
N=${3:-16}
T=${4:-128}
LWQ=${LWQ:-./build/lwq}
W=$(mktemp -d /tmp/lwq-bench-eval.XXXXXX)
trap 'rm -rf "$W"' EXIT
"$LWQ" mkmodel "$W/m" --arch llama --hidden "$H" --layers "$L" --heads 8 --kv-heads 4 --vocab 4096 --seed 5 >/dev/null
python3 - "$W/data.jsonl" "$N" "$T" <<'EOF'
import random, sys
path, n, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(7)
with open(path, "w") as f:
    for _ in range(n):
        f.write('{"input_ids": [%s]}\n' % ", ".join(str(r.randrange(3, 273)) for _ in range(t)))
EOF
"$LWQ" quantize "$W/m" -o "$W/q" --qformat nvfp4 --calib "$W/data.jsonl" --calib-size "$N" --calib-seq "$T" \
    --quiet --log-json "$W/q.jsonl"
"$LWQ" eval "$W/m" "$W/q" --data "$W/data.jsonl" --data-size "$N" --data-seq "$T" --quiet \
    --log-json "$W/e.jsonl" >/dev/null
"$LWQ" eval "$W/m" --qformat nvfp4 --calib "$W/data.jsonl" --calib-size "$N" --calib-seq "$T" \
    --data "$W/data.jsonl" --data-size "$N" --data-seq "$T" --quiet --log-json "$W/m.jsonl" >/dev/null
python3 - "$W/q.jsonl" "$W/e.jsonl" "$W/m.jsonl" "$H" "$L" "$N" "$T" <<'EOF'
import json, sys
q = [json.loads(l) for l in open(sys.argv[1]) if '"event":"layer"' in l]
e = [json.loads(l) for l in open(sys.argv[2]) if '"eval_layer"' in l]
m = [json.loads(l) for l in open(sys.argv[3]) if '"eval_layer"' in l]
print("model: llama hidden %s, %s layers, BF16; %s x %s tokens (calibration = eval set)" % tuple(sys.argv[4:8]))
print("%-6s %12s %12s %12s %8s %14s" % ("layer", "quantize fwd", "eval src", "eval cand", "ratio", "in-mem calib+q"))
tq = te = 0
for a, b, c in zip(q, e, m):
    ev = b["src_forward_s"] + b["cand_forward_s"]
    tq += a["forward_s"]; te += ev
    print("%-6d %11.3fs %11.3fs %11.3fs %8.2f %13.3fs" % (a["layer"], a["forward_s"], b["src_forward_s"],
          b["cand_forward_s"], ev / a["forward_s"], c["calib_forward_s"] + c["quantize_s"]))
print("total  %11.3fs %25.3fs %8.2f   (eval of one candidate / quantize forward; target <= 2.2)" % (tq, te, te / tq))
EOF
