#!/usr/bin/env bash
# Byte-identity check for refactors: builds two git revisions (default: main and the work tree's
# HEAD), runs the same set of commands with each, and compares the sha256 of every file written
# and of every report printed:
#   - `lwq mkmodel`: the synthetic models (their bytes are compared);
#   - `lwq quantize`: the quantized outputs and the resume manifests;
#   - `lwq inspect` (text and --json), `plan`, `verify`, `diff`, `eval` (checkpoints and
#     in-memory candidates, tables and --json, --plan) and `tokenize` (encode and decode of the
#     golden texts of tests/tokenizer/ with their tokenizers, normalizers included).
#
#   scripts/refactor-check.sh [BASE_REV [NEW_REV]]     (NEW_REV "WORKTREE" = uncommitted tree)
#
# Exit 0 when every hash matches, 1 when any differs (the differing files are listed).  Every
# command run is listed in $work/commands-{a,b}.txt.
# Not hashed: the --log-json log (timings) and the run lock (a pid); everything else a run leaves
# on disk is.  Masked in the reports: what measures the running process or the clock (the
# process's RSS in plan lines, eval's *_s and peak_rss_bytes fields).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
base=${1:-main}
new=${2:-HEAD}
# per checkout by default (git-ignored as /build*/): two worktrees checking at once must not share
# build-worktree/ or the run folders; a second run on the same folder is refused, not interleaved
work=${LWQ_REFACTOR_CHECK_DIR:-$root/build-refactor-check}
threads=${LWQ_REFACTOR_CHECK_THREADS:-2}
mkdir -p "$work"
exec 9>"$work/.lock"
if ! flock -n 9; then
    echo "refactor-check: another run is using $work (set LWQ_REFACTOR_CHECK_DIR to another folder)" >&2
    exit 2
fi
if [ -z "${CMAKE_C_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache
fi

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

# The reports of the other commands on the same models and outputs, one file each.
report_set() { # lwq_binary models_dir quantize_out_dir report_dir
    local lwq=$1 m=$2 d=$3 r=$4
    rm -rf "$r"
    mkdir -p "$r"
    local q=(--calib-size 8 --calib-seq 64 --threads "$threads")
    local ev=(--data-size 4 --data-seq 32 --threads "$threads" --quiet)
    local mask='s/process [0-9.]* GB/process * GB/; s/host peak [0-9.]* GB/host peak * GB/; s/fits: host [0-9.]* GB/fits: host * GB/'
    local x o
    for x in demo llama moe mixtral ds3 ds3fp8 qnext qwen3; do
        "$lwq" inspect "$m/$x" >"$r/inspect_$x.txt"
        "$lwq" inspect "$m/$x" --json >"$r/inspect_$x.json"
    done
    "$lwq" plan "$m/llama" --qformat nvfp4 "${q[@]}" 2>&1 | sed "$mask" >"$r/plan_llama.txt"
    "$lwq" plan "$m/moe" --qformat nvfp4_experts-fp8_attn --calib-all-experts "${q[@]}" 2>&1 |
        sed "$mask" >"$r/plan_moe.txt"
    "$lwq" plan "$m/ds3" --qformat nvfp4 --algo gptq "${q[@]}" 2>&1 | sed "$mask" >"$r/plan_ds3_gptq.txt"
    "$lwq" plan "$m/qnext" --qformat qwen3next_production --print-recipe >"$r/recipe_qnext.json"
    # outputs by relative name: the two revisions' output folders differ
    (
        cd "$d"
        for o in o_*; do
            case $o in *.layerwise_resume) continue ;; esac
            "$lwq" inspect "$o" >"$r/inspect_$o.txt" || echo "exit $?" >>"$r/inspect_$o.txt"
            "$lwq" verify "$o" >"$r/verify_$o.txt" 2>&1 || echo "exit $?" >>"$r/verify_$o.txt"
        done
        "$lwq" diff o_llama_nvfp4 o_llama_mse --max 50 >"$r/diff_llama.txt" 2>&1 || echo "exit $?" >>"$r/diff_llama.txt"
        "$lwq" diff o_moe_experts o_moe_mixed >"$r/diff_moe.txt" 2>&1 || echo "exit $?" >>"$r/diff_moe.txt"
        "$lwq" eval "$m/llama" o_llama_nvfp4 "${ev[@]}" --json "$r/eval_llama.json" >"$r/eval_llama.txt"
        "$lwq" eval "$m/ds3fp8" o_ds3fp8 --kv-cache none "${ev[@]}" --json "$r/eval_ds3fp8.json" >"$r/eval_ds3fp8.txt"
        "$lwq" eval --plan "$m/moe" o_moe_mixed "${ev[@]}" 2>&1 | sed "$mask" >"$r/eval_plan_moe.txt"
    )
    "$lwq" eval "$m/moe" --qformat nvfp4,fp8,nvfp4_experts_only "${q[@]}" "${ev[@]}" \
        --json "$r/eval_moe.json" >"$r/eval_moe.txt"
    "$lwq" eval "$m/qnext" --qformat nvfp4 --algo mse "${q[@]}" "${ev[@]}" --json "$r/eval_qnext.json" \
        >"$r/eval_qnext.txt"
    for x in "$r"/eval_*.json; do
        jq -S 'walk(if type == "object" then with_entries(select(.key | test("_s$|^peak_rss_bytes$") | not)) else . end)' \
            "$x" >"$x.masked"
        mv "$x.masked" "$x"
    done
    # tokenize: the golden texts of tests/tokenizer/ with their tokenizer (patched for variants),
    # by relative names (error messages name the file)
    local fx=${LWQ_FIXTURES:-$root/../shared/fixtures}
    (
        cd "$r"
        for g in "$root"/tests/tokenizer/*.json; do
            local name tok t
            name=$(basename "$g" .json)
            tok=$(jq -r '.tokenizer // .base' "$g")
            [ -f "$fx/$tok/tokenizer.json" ] || continue
            t=tok_$name
            jq -s '.[0] + (.[1].patch // {})' "$fx/$tok/tokenizer.json" "$g" >"$t.json"
            jq -c '.cases[].text' "$g" >"$t.in"
            "$lwq" tokenize "$t.json" --jsonl <"$t.in" >"$t.ids" 2>&1 || echo "exit $?" >>"$t.ids"
            "$lwq" tokenize "$t.json" --jsonl --no-special <"$t.in" >"$t.ids_nospecial" 2>&1 ||
                echo "exit $?" >>"$t.ids_nospecial"
            grep '^\[' "$t.ids" | "$lwq" tokenize "$t.json" --jsonl --decode >"$t.decoded" 2>&1 ||
                echo "exit $?" >>"$t.decoded"
        done
    )
    (cd "$r" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sed 's|  \./|  reports/|')
}

# The revision's binary behind a wrapper that lists every command it runs.
counted() { # lwq_binary list_file -> prints the wrapper's path
    local w
    w=$(dirname "$2")/lwq-$(basename "$2" .txt)
    printf '#!/bin/sh\nprintf "%%s\\n" "$*" >>"%s"\nexec "%s" "$@"\n' "$2" "$1" >"$w"
    chmod +x "$w"
    : >"$2"
    echo "$w"
}

lwq_a=$(build_rev "$base")
lwq_b=$(build_rev "$new")
echo "refactor-check: base $base ($lwq_a), new $new ($lwq_b)"
lwq_a=$(counted "$lwq_a" "$work/commands-a.txt")
lwq_b=$(counted "$lwq_b" "$work/commands-b.txt")
make_models "$lwq_a" "$work/models-a" >"$work/hashes-a.txt"
make_models "$lwq_b" "$work/models-b" >"$work/hashes-b.txt"
quantize_set "$lwq_a" "$work/models-a" "$work/run-a" >>"$work/hashes-a.txt"
quantize_set "$lwq_b" "$work/models-a" "$work/run-b" >>"$work/hashes-b.txt"
report_set "$lwq_a" "$work/models-a" "$work/run-a" "$work/report-a" >>"$work/hashes-a.txt"
report_set "$lwq_b" "$work/models-a" "$work/run-b" "$work/report-b" >>"$work/hashes-b.txt"
n=$(wc -l <"$work/hashes-a.txt")
na=$(wc -l <"$work/commands-a.txt")
nb=$(wc -l <"$work/commands-b.txt")
if [ "$na" != "$nb" ]; then
    echo "refactor-check: DIFFERENT: $na commands ran with $base, $nb with $new"
    exit 1
fi
if diff "$work/hashes-a.txt" "$work/hashes-b.txt"; then
    echo "refactor-check: OK: $na commands with each revision, $n of $n files byte-identical ($work/hashes-a.txt)"
else
    echo "refactor-check: DIFFERENT (above: < $base, > $new)"
    exit 1
fi
