#!/bin/sh
# perf/bench_qwen3next.sh — make a synthetic qwen3_next checkpoint (Qwen3-Next-like head geometry:
# linear attention 8 key / 16 value heads of 128, gated attention 8 x 128 with 2 kv heads, 8
# experts) and run perf/bench_qwen3next.c on it: CPU cost of a Gated DeltaNet layer (its core runs
# on the host, engine/forward/model_qwen3next.c) against a gated full-attention layer.
# usage: perf/bench_qwen3next.sh [BUILD_DIR] [THREADS]
set -eu
B=${1:-build}
T=${2:-1}
W=$(mktemp -d /tmp/lwq-bench-qn-XXXXXX)
trap 'rm -rf "$W"' EXIT
"$B/lwq" mkmodel "$W/m" --arch qwen3_next --hidden 1024 --layers 4 --heads 8 --kv-heads 2 \
    --head-dim 128 --experts 8 --moe-intermediate 256 --linear-key-heads 8 \
    --linear-value-heads 16 --linear-key-dim 128 --linear-value-dim 128 --vocab 4096 --quiet
"$B/bench_qwen3next" "$W/m" "$T" 8 256
