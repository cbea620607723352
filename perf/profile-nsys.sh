#!/usr/bin/env bash
# perf/profile-nsys.sh — a timeline of `lwq quantize --device cuda` in Nsight Systems: the NVTX
# ranges of core/sys/trace.h on every thread (engine: "read-wait L", "forward L", "upload",
# "quantize L"; prefetch thread: "read job J"; writer thread: "write L", "boundary", "commit L",
# "durable J" = fsync + rename), CUDA API calls, kernels and copies.
#
#   perf/profile-nsys.sh [MODEL_DIR] [-- more lwq quantize options]
#
# Needs a CUDA build (NVTX is compiled in only with CUDA) and nsys.  Builds build-nsys
# (RelWithDebInfo, LWQ_CUDA=ON) when needed, writes a synthetic qwen3_moe model when no
# MODEL_DIR is given (hidden 2048, 32 experts, 4 layers, ~2.5 GB), profiles one quantize run and
# prints nsys's summaries: time per NVTX range, per kernel, per memory copy.  Output in $OUT
# (default /tmp/lwq-nsys): lwq.nsys-rep (open it in the Nsight Systems GUI), stats.txt.
# Environment: QFORMAT [nvfp4_experts-fp8_attn]  CALIB_SIZE [16]  CALIB_SEQ [128]  OUT  BUILD
#   NSYS (path of nsys; else PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-systems*/)
# Exit status: 0 done, 2 set-up error, 3 nsys not found.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "profile-nsys.sh: $*" >&2; exit 2; }

MODEL=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then MODEL=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
OUT=${OUT:-/tmp/lwq-nsys}
BUILD=${BUILD:-build-nsys}
QFORMAT=${QFORMAT:-nvfp4_experts-fp8_attn}
CALIB_SIZE=${CALIB_SIZE:-16}
CALIB_SEQ=${CALIB_SEQ:-128}

find_nsys() {
    if [ -n "${NSYS:-}" ]; then echo "$NSYS"; return; fi
    if command -v nsys >/dev/null; then command -v nsys; return; fi
    local c
    for c in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys \
             /opt/nvidia/nsight-systems/*/target-linux-x64/nsys; do
        if [ -x "$c" ]; then echo "$c"; return; fi
    done
}
NSYS_BIN=$(find_nsys)
if [ -z "$NSYS_BIN" ]; then
    echo "profile-nsys.sh: nsys (Nsight Systems) not found on PATH, in /usr/local/cuda/bin or /opt/nvidia;" \
         "install it or set NSYS=/path/to/nsys.  Without it: perf/profile-perf.sh for CPU time, and the" \
         "per-layer timings of lwq quantize --log-json." >&2
    exit 3
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || die "nvcc not found: the NVTX ranges exist only in a CUDA build"

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLWQ_TESTS=OFF -DLWQ_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target lwq_cli >/dev/null
LWQ=$BUILD/lwq

mkdir -p "$OUT"
if [ -z "$MODEL" ]; then
    MODEL=$OUT/model
    [ -f "$MODEL/config.json" ] || "$LWQ" mkmodel "$MODEL" --arch qwen3_moe --hidden 2048 --layers 4 --heads 32 \
        --kv-heads 4 --head-dim 128 --experts 32 --top-k 8 --moe-intermediate 768 --vocab 32000 --quiet
fi
[ -f "$MODEL/config.json" ] || die "$MODEL has no config.json"
rm -rf "$OUT/q" "$OUT/q.layerwise_resume" "$OUT/lwq.nsys-rep" "$OUT/lwq.sqlite"

"$NSYS_BIN" profile --trace=cuda,nvtx,osrt --sample=none --force-overwrite=true -o "$OUT/lwq" -- \
    "$LWQ" quantize "$MODEL" -o "$OUT/q" --device cuda --qformat "$QFORMAT" --calib-size "$CALIB_SIZE" \
    --calib-seq "$CALIB_SEQ" --log-json "$OUT/quantize.jsonl" --quiet "$@"
[ -f "$OUT/lwq.nsys-rep" ] || die "nsys wrote no report ($OUT/lwq.nsys-rep); see its messages above"
"$NSYS_BIN" stats --force-export=true --report nvtx_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum \
    "$OUT/lwq.nsys-rep" > "$OUT/stats.txt" 2>&1 || die "nsys stats failed: $(tail -3 "$OUT/stats.txt")"
cat "$OUT/stats.txt"
rm -rf "$OUT/q" "$OUT/q.layerwise_resume"
echo "timeline: $OUT/lwq.nsys-rep (Nsight Systems GUI); summaries: $OUT/stats.txt"
