#!/usr/bin/env bash
# README command 1: set up, build, make the built-in demo model (a small qwen3_moe written by
# `lwq mkmodel`) and quantize it to NVFP4 with the built-in calibration text.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
demo=${LWQ_DEMO_DIR:-build/demo}
rm -rf "$demo/model" "$demo/out" "$demo/out.layerwise_resume"
mkdir -p "$demo"
./build/lwq mkmodel "$demo/model" --arch qwen3_moe --hidden 512 --layers 8 --heads 8 --kv-heads 4 \
    --experts 16 --top-k 4 --vocab 4096 --seed 1
./build/lwq inspect "$demo/model"
./build/lwq quantize "$demo/model" -o "$demo/out" --qformat nvfp4 --calib-size 16 --calib-seq 128 \
    --log-json "$demo/log.jsonl"
# a failing check fails the demo (exit 1, the failing file named by verify)
if ! ./build/lwq verify "$demo/out"; then
    echo "demo: lwq verify found a problem in $demo/out (see above)" >&2
    exit 1
fi
echo "demo: quantized checkpoint in $demo/out (per-layer JSON log in $demo/log.jsonl)"
