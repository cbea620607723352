#!/usr/bin/env bash
# perf/profile-perf.sh — where the CPU time of `lwq quantize` goes: `perf record -g` on a
# RelWithDebInfo build (-O2 -g, frame pointers kept, so call stacks are whole; see CMakeLists.txt).
#
#   perf/profile-perf.sh [MODEL_DIR] [-- more lwq quantize options]
#
# Builds build-rwd (RelWithDebInfo, CPU only unless CUDA=1) when needed, writes a synthetic
# qwen3_moe model when no MODEL_DIR is given (hidden 2048, 16 experts, 3 layers, ~1.6 GB),
# records `lwq quantize` with call graphs, and prints the hottest symbols by self time and by
# inclusive time (callers included).  Everything lands in $OUT (default /tmp/lwq-profile):
# perf.data, report-self.txt, report-children.txt, quantize.jsonl, and the model it made.
# Environment: QFORMAT [nvfp4_experts-fp8_attn]  CALIB_SIZE [4]  CALIB_SEQ [32]  FREQ [499]
#   OUT [/tmp/lwq-profile]  BUILD [build-rwd]  CUDA [0]  KEEP_MODEL [0]
# Reading it: `perf report -i $OUT/perf.data` (interactive), or `perf report --no-children
# --stdio -i ...`; the worker threads of core/parallel show as `worker`, the prefetch thread
# under `prefetch_main`/io_uring, the writer under `writer_main`.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "profile-perf.sh: $*" >&2; exit 2; }

MODEL=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then MODEL=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
OUT=${OUT:-/tmp/lwq-profile}
BUILD=${BUILD:-build-rwd}
QFORMAT=${QFORMAT:-nvfp4_experts-fp8_attn}
CALIB_SIZE=${CALIB_SIZE:-4}
CALIB_SEQ=${CALIB_SEQ:-32}
FREQ=${FREQ:-499}

if ! command -v perf >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq linux-perf >/dev/null 2>&1 || true
    command -v perf >/dev/null || die "perf is not installed (Debian: apt-get install linux-perf)"
fi
PARANOID=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 2)
if [ "$(id -u)" -ne 0 ] && [ "$PARANOID" -gt 1 ]; then
    die "kernel.perf_event_paranoid is $PARANOID: run as root or 'sysctl kernel.perf_event_paranoid=1'"
fi

CUDA_OPT=-DLWQ_CUDA=OFF; [ "${CUDA:-0}" = 1 ] && CUDA_OPT=-DLWQ_CUDA=ON
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLWQ_TESTS=OFF "$CUDA_OPT" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target lwq_cli >/dev/null
LWQ=$BUILD/lwq

mkdir -p "$OUT"
if [ -z "$MODEL" ]; then
    MODEL=$OUT/model
    if [ ! -f "$MODEL/config.json" ]; then
        "$LWQ" mkmodel "$MODEL" --arch qwen3_moe --hidden 2048 --layers 3 --heads 32 --kv-heads 4 --head-dim 128 \
            --experts 16 --top-k 8 --moe-intermediate 768 --vocab 32000 --quiet
    fi
fi
[ -f "$MODEL/config.json" ] || die "$MODEL has no config.json"
rm -rf "$OUT/q" "$OUT/q.layerwise_resume" "$OUT/quantize.jsonl"

# -g with frame pointers (the build keeps them); perf needs no DWARF unwinding then.
perf record -F "$FREQ" -g --call-graph fp -o "$OUT/perf.data" -- \
    "$LWQ" quantize "$MODEL" -o "$OUT/q" --qformat "$QFORMAT" --calib-size "$CALIB_SIZE" \
    --calib-seq "$CALIB_SEQ" --log-json "$OUT/quantize.jsonl" --quiet "$@" 2> "$OUT/record.err" ||
    { cat "$OUT/record.err" >&2; die "perf record or lwq quantize failed (see above)"; }
perf report -i "$OUT/perf.data" --no-children --stdio --percent-limit 1 --sort comm,dso,symbol -g none \
    > "$OUT/report-self.txt" 2>/dev/null
perf report -i "$OUT/perf.data" --children --stdio --percent-limit 5 --sort symbol -g none \
    > "$OUT/report-children.txt" 2>/dev/null
echo "== self time (top 20; $OUT/report-self.txt)"
# awk, not `grep | head -20` under set -e + pipefail: head's early exit kills the writer with
# SIGPIPE once a report is past a pipe write, and the script stopped here with 141
awk '!/^#/ && !/^$/ && n++ < 20' "$OUT/report-self.txt"
echo "== inclusive time (top 20; $OUT/report-children.txt)"
awk '!/^#/ && !/^$/ && n++ < 20' "$OUT/report-children.txt"
echo "== per layer (s): forward / quantize / write, from $OUT/quantize.jsonl"
python3 - "$OUT/quantize.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["event"] == "layer":
        print("layer %d: %.2f / %.2f / %.2f" % (r["layer"], r["forward_s"], r["quantize_s"], r["write_s"]))
PY
rm -rf "$OUT/q" "$OUT/q.layerwise_resume"
if [ "${KEEP_MODEL:-0}" != 1 ] && [ "$MODEL" = "$OUT/model" ]; then rm -rf "$MODEL"; fi
