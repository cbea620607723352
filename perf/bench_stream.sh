#!/usr/bin/env bash
# perf/bench_stream.sh — expert streaming (issue 16): peak RSS against --max-cpu-memory-gb when a
# layer is several times the budget, and the output bytes against the unstreamed run.
#
#   perf/bench_stream.sh [BUDGET_MB ...]      (default: 26 32 38)
#
# Uses the default build's lwq (LWQ_BIN, default build/lwq, configured and built when missing):
# it links no CUDA library (the CUDA backend is a module that only --device cuda loads), so the
# process starts at ~3-5 MB and a budget of tens of MB can hold.  One synthetic qwen3_moe
# checkpoint (default: hidden 512, 96 experts of 512, top-4, 2 layers: ~152 MB per layer;
# HIDDEN, MOE_INTER, EXPERTS change it) is quantized unconstrained, then once per budget; every
# run's peak RSS is the kernel's ru_maxrss of the child over its whole life (os.wait4), the group
# size is the one the plan chose, and each output directory is compared byte for byte with the
# unconstrained one.  Prints a markdown table.  Environment: LWQ_BIN, DIR [/tmp/lwq-stream],
# KEEP [0], HIDDEN [512], MOE_INTER [512], EXPERTS [96], DEVICE [cpu].
set -euo pipefail
cd "$(dirname "$0")/.."
LWQ=${LWQ_BIN:-build/lwq}
HIDDEN=${HIDDEN:-512}
MOE_INTER=${MOE_INTER:-512}
EXPERTS=${EXPERTS:-96}
DEVICE=${DEVICE:-cpu}
DIR=${DIR:-/tmp/lwq-stream}
KEEP=${KEEP:-0}
BUDGETS=("$@")
[ ${#BUDGETS[@]} -gt 0 ] || BUDGETS=(26 32 38)
if [ ! -x "$LWQ" ]; then
    [ "$LWQ" = build/lwq ] || { echo "bench_stream.sh: $LWQ is not built" >&2; exit 2; }
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build -j"$(nproc)" --target lwq_cli >/dev/null
fi
command -v python3 >/dev/null || { echo "bench_stream.sh: python3 is needed" >&2; exit 2; }
rm -rf "$DIR"
mkdir -p "$DIR"
[ "$KEEP" = 1 ] || trap 'rm -rf "$DIR"' EXIT
"$LWQ" mkmodel "$DIR/model" --arch qwen3_moe --hidden "$HIDDEN" --moe-intermediate "$MOE_INTER" --layers 2 --heads 8 \
    --kv-heads 2 --experts "$EXPERTS" --top-k 4 --vocab 512 --quiet
python3 - "$LWQ" "$DIR" "$DEVICE" "$EXPERTS" "${BUDGETS[@]}" <<'PY'
import os, re, subprocess, sys, time
lwq, d, device, nexp, budgets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], [float(b) for b in sys.argv[5:]]
Q = ["--calib-size", "8", "--calib-seq", "32", "--batch-size", "4", "--device", device]
def run(out, extra):
    err = open(f"{d}/{out}.err", "w")
    t0 = time.time()
    p = subprocess.Popen([lwq, "quantize", f"{d}/model", "-o", f"{d}/{out}"] + Q + extra, stderr=err)
    _, st, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    err.close()
    text = open(f"{d}/{out}.err").read()
    if st != 0:
        sys.exit(f"bench_stream.sh: {out} failed:\n{text}")
    g = re.search(r"units of (\d+) of (\d+) experts", text)
    layer = float(re.search(r"largest layer \d+ holds ([0-9.]+) GB", text).group(1)) * 1e9
    return ru.ru_maxrss * 1024, wall, (int(g.group(1)), int(g.group(2))) if g else None, layer
peak0, wall0, _, layer = run("ref", [])
print(f"\nmodel: qwen3_moe, 2 layers of {layer/1e6:.0f} MB ({nexp} experts), calibration 8 x 32 tokens; {lwq} --device {device}\n")
print("| run | --max-cpu-memory-gb | layer / budget | expert group | peak RSS (ru_maxrss) | peak / budget | wall | output |")
print("|---|---|---|---|---|---|---|---|")
print(f"| unconstrained | - | - | whole layer | {peak0/1e6:.1f} MB | - | {wall0:.1f} s | reference |")
for b in budgets:
    out = f"b{b:g}"
    peak, wall, g, _ = run(out, ["--max-cpu-memory-gb", f"{b/1000:.6f}"])
    same = subprocess.run(["diff", "-r", f"{d}/ref", f"{d}/{out}"], capture_output=True).returncode == 0
    gs = f"{g[0]} of {g[1]}" if g else "whole layer"
    print(f"| budget {b:g} MB | {b/1000:.3f} | {layer/(b*1e6):.1f}x | {gs} | {peak/1e6:.1f} MB | "
          f"{peak/(b*1e6):.3f} {'(<= 1.10: met)' if peak <= 1.10*b*1e6 else '(> 1.10: MISSED)'} | {wall:.1f} s | "
          f"{'byte-identical' if same else 'DIFFERS'} |")
PY
