#!/bin/sh
# perf/bench_nemotron.sh — a Nemotron-shaped nemotron_h checkpoint (perf/nemotron_bench_model.py,
# transformers in the modelopt venv) and perf/bench_nemotron.c on it: the Mamba2 layer's CPU cost per
# token (its conv1d / scan / gated norm on the host) beside a NoPE attention layer's.
# usage: perf/bench_nemotron.sh [BUILD_DIR] [THREADS] [BATCH] [SEQ]
set -eu
B=${1:-build}
W=$(mktemp -d /tmp/lwq-bench-nemotron-XXXXXX)
trap 'rm -rf "$W"' EXIT
.peers/venvs/modelopt/bin/python perf/nemotron_bench_model.py "$W/m"
"$B/bench_nemotron" "$W/m" "${2:-1}" "${3:-4}" "${4:-512}"
