#!/usr/bin/env bash
# Byte-identity check for refactors: builds two git revisions (default: main and the work tree's
# HEAD), runs the same set of `lwq mkmodel` + `lwq quantize` commands with each, and compares the
# sha256 of every file written (models, quantized outputs, the resume manifests).
#
#   scripts/refactor-check.sh [BASE_REV [NEW_REV]]     (NEW_REV "WORKTREE" = uncommitted tree)
#
# Exit 0 when every hash matches, 1 when any differs (the differing files are listed).
# Not hashed: the --log-json log (timings) and the run lock (a pid); everything else a run leaves
# on disk is.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
base=${1:-main}
new=${2:-HEAD}
work=${LWQ_REFACTOR_CHECK_DIR:-/tmp/lwq-refactor-check}
threads=${LWQ_REFACTOR_CHECK_THREADS:-2}
mkdir -p "$work"
export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}

build_rev() { # rev -> prints the path of its lwq binary
    local rev=$1 src bdir
    if [ "$rev" = WORKTREE ]; then
        src=$root
        bdir=$work/build-worktree
    else
        local sha
        sha=$(git rev-parse --short=12 "$rev")
        src=$work/src-$sha
        bdir=$work/build-$sha
        if [ ! -d "$src" ]; then
            mkdir -p "$src"
            git archive "$sha" | tar -x -C "$src"
        fi
    fi
    cmake -S "$src" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DLWQ_CUDA=OFF -DLWQ_TESTS=OFF >/dev/null
    cmake --build "$bdir" -j2 --target lwq_cli >/dev/null
    echo "$bdir/lwq"
}

make_models() { # lwq_binary dir: the synthetic checkpoints (their bytes are compared too)
    local lwq=$1 m=$2
    rm -rf "$m"
    mkdir -p "$m"
    # the demo's model (scripts/demo.sh)
    "$lwq" mkmodel "$m/demo" --arch qwen3_moe --hidden 512 --layers 8 --heads 8 --kv-heads 4 \
        --experts 16 --top-k 4 --vocab 4096 --seed 1 --quiet
    "$lwq" mkmodel "$m/llama" --arch llama --hidden 128 --layers 3 --heads 4 --kv-heads 2 --seed 2 --quiet
    "$lwq" mkmodel "$m/moe" --arch qwen3_moe --hidden 128 --layers 3 --heads 4 --kv-heads 2 \
        --experts 8 --top-k 2 --seed 3 --quiet
    "$lwq" mkmodel "$m/mixtral" --arch mixtral --hidden 128 --layers 2 --heads 4 --kv-heads 2 \
        --experts 4 --top-k 2 --seed 4 --quiet
    "$lwq" mkmodel "$m/ds3" --arch deepseek_v3 --hidden 128 --layers 3 --heads 4 --experts 8 \
        --top-k 2 --seed 5 --quiet
    "$lwq" mkmodel "$m/ds3fp8" --arch deepseek_v3 --source-format fp8 --hidden 256 --layers 2 \
        --heads 4 --experts 4 --top-k 2 --seed 6 --quiet
    "$lwq" mkmodel "$m/qnext" --arch qwen3_next --hidden 128 --layers 4 --heads 4 --kv-heads 2 \
        --experts 8 --top-k 2 --seed 7 --quiet
    "$lwq" mkmodel "$m/qwen3" --arch qwen3 --hidden 128 --layers 2 --heads 4 --dtype f32 --seed 8 --quiet
    (cd "$m" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

# Quantize the models in $m (made once, by the base revision: the run fingerprint includes the
# source files' modification times, so both revisions must read the very same files).
quantize_set() { # lwq_binary models_dir out_dir
    local lwq=$1 m=$2 d=$3
    rm -rf "$d"
    mkdir -p "$d"
    local q=(--calib-size 8 --calib-seq 64 --threads "$threads" --quiet)
    "$lwq" quantize "$m/demo" -o "$d/o_demo" --qformat nvfp4 --calib-size 16 --calib-seq 128 \
        --threads "$threads" --quiet
    "$lwq" quantize "$m/llama" -o "$d/o_llama_nvfp4" --qformat nvfp4 "${q[@]}"
    "$lwq" quantize "$m/llama" -o "$d/o_llama_fp8" --qformat fp8 "${q[@]}"
    "$lwq" quantize "$m/llama" -o "$d/o_llama_mse" --qformat nvfp4 --algo mse --fp8-scale-sweep "${q[@]}"
    "$lwq" quantize "$m/llama" -o "$d/o_llama_lh" --qformat nvfp4 --algo local_hessian "${q[@]}"
    "$lwq" quantize "$m/llama" -o "$d/o_llama_whole" --qformat nvfp4 --whole-model "${q[@]}"
    "$lwq" quantize "$m/llama" -o "$d/o_llama_qdq" --qformat nvfp4 --qdq-next --kv-cache fp8 "${q[@]}"
    "$lwq" quantize "$m/llama" -o "$d/o_llama_wqdq" --qformat nvfp4 --qdq-next --whole-model "${q[@]}"
    "$lwq" quantize "$m/moe" -o "$d/o_moe_experts" --qformat nvfp4_experts_only "${q[@]}"
    "$lwq" quantize "$m/moe" -o "$d/o_moe_mixed" --qformat nvfp4_experts-fp8_attn --calib-all-experts "${q[@]}"
    "$lwq" quantize "$m/moe" -o "$d/o_moe_whole" --qformat nvfp4 --whole-model --algo mse "${q[@]}"
    "$lwq" quantize "$m/mixtral" -o "$d/o_mixtral" --qformat nvfp4_mlp_only "${q[@]}"
    "$lwq" quantize "$m/ds3" -o "$d/o_ds3" --qformat nvfp4 "${q[@]}"
    "$lwq" quantize "$m/ds3" -o "$d/o_ds3_whole" --qformat fp8 --whole-model "${q[@]}"
    "$lwq" quantize "$m/ds3fp8" -o "$d/o_ds3fp8" --qformat nvfp4_experts-fp8_attn "${q[@]}"
    "$lwq" quantize "$m/qnext" -o "$d/o_qnext" --qformat qwen3next_production "${q[@]}"
    "$lwq" quantize "$m/qnext" -o "$d/o_qnext_lh" --qformat nvfp4 --algo local_hessian "${q[@]}"
    "$lwq" quantize "$m/qwen3" -o "$d/o_qwen3" --qformat nvfp4 --batch-size 3 "${q[@]}"
    # expert streaming, where the revision has it (same bytes as the unstreamed run by design)
    # (the help text goes to a file first: with pipefail, grep -q closing the pipe early would
    # fail the test by SIGPIPE)
    "$lwq" quantize --help >"$work/help.txt"
    if grep -q -- --expert-group "$work/help.txt"; then
        "$lwq" quantize "$m/moe" -o "$d/o_moe_stream" --qformat nvfp4 --expert-group 3 "${q[@]}"
        "$lwq" quantize "$m/ds3" -o "$d/o_ds3_stream" --qformat nvfp4 --expert-group 2 "${q[@]}"
    fi
    # real tiny checkpoints (../shared/fixtures): a tokenizer's own text, token ids, two shards
    local fx=${LWQ_FIXTURES:-$root/../shared/fixtures}
    if [ -d "$fx/agilerl-tiny-qwen3-moe" ]; then
        "$lwq" quantize "$fx/agilerl-tiny-qwen3-moe" -o "$d/o_fx_moe" --qformat nvfp4 "${q[@]}"
    fi
    printf '{"input_ids": [%s]}\n' "$(seq -s, 1 40)" "$(seq -s, 5 3 62)" "$(seq -s, 2 2 60)" >"$d/calib.jsonl"
    if [ -d "$fx/quatricmorph-tiny-llama-2shard" ]; then
        "$lwq" quantize "$fx/quatricmorph-tiny-llama-2shard" -o "$d/o_fx_2shard" --qformat fp8 \
            --calib "$d/calib.jsonl" --calib-size 3 --threads "$threads" --quiet
    fi
    if [ -d "$fx/cai-tiny-deepseek-v2" ]; then
        printf '{"input_ids": [%s]}\n' "1,2,3,4,5,6,7,8,9,10" "3,1,4,1,5,9,2,6" >"$d/calib11.jsonl"
        "$lwq" quantize "$fx/cai-tiny-deepseek-v2" -o "$d/o_fx_ds2" --qformat fp8 --whole-model \
            --calib "$d/calib11.jsonl" --calib-size 3 --threads "$threads" --quiet
    fi
    (cd "$d" && find . -type f ! -name '*.jsonl' ! -name lock -print0 | sort -z | xargs -0 sha256sum)
}

lwq_a=$(build_rev "$base")
lwq_b=$(build_rev "$new")
echo "refactor-check: base $base ($lwq_a), new $new ($lwq_b)"
make_models "$lwq_a" "$work/models-a" >"$work/hashes-a.txt"
make_models "$lwq_b" "$work/models-b" >"$work/hashes-b.txt"
quantize_set "$lwq_a" "$work/models-a" "$work/run-a" >>"$work/hashes-a.txt"
quantize_set "$lwq_b" "$work/models-a" "$work/run-b" >>"$work/hashes-b.txt"
n=$(wc -l <"$work/hashes-a.txt")
if diff "$work/hashes-a.txt" "$work/hashes-b.txt"; then
    echo "refactor-check: OK: $n files byte-identical ($work/hashes-a.txt)"
else
    echo "refactor-check: DIFFERENT (above: < $base, > $new)"
    exit 1
fi
