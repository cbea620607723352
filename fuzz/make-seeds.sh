#!/usr/bin/env bash
# Write the fuzzers' seed corpora, tests/data/fuzz/<harness>/, from lwq itself: tiny synthetic
# checkpoints (lwq mkmodel), their quantized outputs and resume manifests (lwq quantize, killed
# at each durable step), the preset recipes, tests/data/modelopt_recipes, and small hand-written
# tokenizers, calibration files and safetensors headers.  Run it again after a format change;
# reproducers of fixed crashes live beside the seeds as crash-*.* and are kept.
#
# usage: fuzz/make-seeds.sh [LWQ_BINARY]   (default build/lwq)
set -euo pipefail
cd "$(dirname "$0")/.."
LWQ=$(realpath "${1:-build/lwq}")
[ -x "$LWQ" ] || { echo "make-seeds: $LWQ is not an lwq binary (build first)" >&2; exit 2; }
OUT=tests/data/fuzz
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# a fresh corpus folder, keeping crash reproducers
fresh() { mkdir -p "$OUT/$1"; find "$OUT/$1" -maxdepth 1 -type f ! -name 'crash-*' -delete; }

# pack OUT NAME=PATH...: an archive of files (fuzz/fuzz_util.h)
pack() {
    local out=$1 first=1 spec
    shift
    : >"$out"
    for spec in "$@"; do
        local name=${spec%%=*} path=${spec#*=}
        if LC_ALL=C grep -aq '^==> ' "$path"; then
            echo "make-seeds: $path holds a line starting '==> ', which would split the archive" >&2
            exit 2
        fi
        [ $first = 1 ] || printf '\n' >>"$out"
        printf '==> %s <==\n' "$name" >>"$out"
        cat "$path" >>"$out"
        first=0
    done
}

# st NAME JSON [DATA_BYTES]: a safetensors file with that header and DATA_BYTES zero bytes
st() {
    local f=$OUT/safetensors/$1 json=$2 n=${3:-0} len i LC_ALL=C
    len=${#json}
    : >"$f"
    for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(((len >> (8 * i)) & 255)))" >>"$f"; done
    printf '%s' "$json" >>"$f"
    head -c "$n" /dev/zero >>"$f"
}

small=(--hidden 16 --layers 2 --heads 2 --vocab 273 --tie --intermediate 16 --moe-intermediate 16
       --experts 4 --top-k 2 --quiet)
quant() { # quant SRC OUT [options]
    local src=$1 out=$2
    shift 2
    "$LWQ" quantize "$W/$src" -o "$W/$out" --calib-size 4 --calib-seq 16 --quiet "$@"
}

# ---- models: the QUANT_DIR harness's sources, and configs --------------------------------------
for a in llama qwen3 qwen3_moe mixtral deepseek_v2 deepseek_v3 qwen3_next; do
    extra=()
    [ $a = qwen3_next ] && extra=(--full-attn-every 2)
    "$LWQ" mkmodel "$W/m_$a" --arch $a "${small[@]}" "${extra[@]}"
done
"$LWQ" mkmodel "$W/m_fp8" --arch deepseek_v3 --source-format fp8 --hidden 128 --layers 1 --heads 2 \
    --vocab 273 --tie --intermediate 128 --moe-intermediate 128 --experts 2 --top-k 1 --quiet
"$LWQ" mkmodel "$W/m_mxfp4" --arch deepseek_v3 --source-format mxfp4 --hidden 64 --layers 1 --heads 2 \
    --vocab 273 --tie --intermediate 64 --moe-intermediate 64 --experts 2 --top-k 1 --quiet
"$LWQ" mkmodel "$W/m_3layers" --arch llama "${small[@]}" --layers 3

rm -rf "$OUT/qdir-src"
for a in llama qwen3_moe deepseek_v3 qwen3_next; do
    mkdir -p "$OUT/qdir-src/$a"
    cp "$W/m_$a/config.json" "$W/m_$a/model.safetensors" "$OUT/qdir-src/$a/"
done

# ---- quantized checkpoints (QUANT_DIR) -----------------------------------------------------------
quant m_llama q_llama_nvfp4 --qformat nvfp4
quant m_llama q_llama_fp8 --qformat fp8 --kv-cache fp8
quant m_llama q_llama_nvfp4_kvnone --qformat nvfp4 --kv-cache none
quant m_qwen3_moe q_moe_experts --qformat nvfp4_experts_only
quant m_qwen3_moe q_moe_mixed --qformat nvfp4_experts-fp8_attn
quant m_deepseek_v3 q_ds3_nvfp4 --qformat nvfp4 --kv-cache none
quant m_qwen3_next q_q3n_nvfp4 --qformat nvfp4
fresh qdir
for q in q_llama_nvfp4 q_llama_fp8 q_llama_nvfp4_kvnone q_moe_experts q_moe_mixed q_ds3_nvfp4 q_q3n_nvfp4; do
    files=()
    for f in config.json hf_quant_config.json model.safetensors.index.json "$W/$q"/*.safetensors; do
        f=$(basename "$f")
        files+=("$f=$W/$q/$f")
    done
    pack "$OUT/qdir/$q" "${files[@]}"
done
# Model Optimizer exports may carry only config.json's quantization_config
files=()
for f in config.json model.safetensors.index.json "$W/q_llama_nvfp4"/*.safetensors; do
    f=$(basename "$f")
    files+=("$f=$W/q_llama_nvfp4/$f")
done
pack "$OUT/qdir/q_llama_nvfp4_no_hf_quant_config" "${files[@]}"

# ---- config.json ---------------------------------------------------------------------------------
fresh config
for a in llama qwen3 qwen3_moe mixtral deepseek_v2 deepseek_v3 qwen3_next fp8 mxfp4; do
    cp "$W/m_$a/config.json" "$OUT/config/$a.json"
done
cp "$W/q_moe_mixed/config.json" "$OUT/config/quantized_qwen3_moe.json"
{ printf '{"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"], "text_config": '
  cat "$W/m_deepseek_v3/config.json"; printf '}\n'; } >"$OUT/config/kimi_k25_wrapper.json"

# ---- safetensors ---------------------------------------------------------------------------------
fresh safetensors
cp "$W/m_llama/model.safetensors" "$OUT/safetensors/bf16_llama.safetensors"
cp "$W/m_qwen3_next/model.safetensors" "$OUT/safetensors/bf16_qwen3_next.safetensors"
cp "$W/q_llama_nvfp4/model-layer-00000.safetensors" "$OUT/safetensors/nvfp4_layer.safetensors"
cp "$W/q_llama_fp8/model-layer-00001.safetensors" "$OUT/safetensors/fp8_layer.safetensors"
cp "$W/q_llama_nvfp4/model-tail.safetensors" "$OUT/safetensors/tail.safetensors"
st empty.safetensors '{}'
st metadata_only.safetensors '{"__metadata__":{"format":"pt","lwq_fingerprint":"0123456789abcdef"}}'
st zero_sized.safetensors '{"a":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"b":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}' 8
st dtypes.safetensors '{"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},"e":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[2,4]},"h":{"dtype":"F16","shape":[1,2],"data_offsets":[4,8]},"i":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},"u":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}}    ' 16
st escapes.safetensors '{"model.layers.0.\u00e9\"q\\\"":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}' 4

# ---- recipes -------------------------------------------------------------------------------------
fresh recipe-json
for p in nvfp4 nvfp4_experts_only nvfp4_mlp_only fp8 nvfp4_experts-fp8_attn qwen3next_production; do
    "$LWQ" quantize --qformat "$p" --print-recipe >"$OUT/recipe-json/preset_$p.json"
done
cp recipes/*.json "$OUT/recipe-json/"
cat >"$OUT/recipe-json/every_field.json" <<'EOF'
{"name": "every_field", "algorithm": {"method": "gptq", "fp8_scale_sweep": true, "gptq_damp": 0.05,
 "gptq_act_order": true}, "kv_cache": "fp8",
 "rules": [{"match": "*", "format": "nvfp4", "algo": "mse"},
           {"match": "*.self_attn.*", "mla_projection": true, "format": "none"},
           {"match": "*.experts.[0-3].*", "quantizer": "weight", "format": "fp8", "fp8_scale_sweep": false},
           {"match": "*.experts.[0-3].*", "quantizer": "input", "format": "fp8", "input_amax": 448.0},
           {"match": "*.mlp.gate", "enable": false},
           {"match": "model.layers.?.self_attn", "quantizer": "kv", "kv_cache": "fp8", "enable": true},
           {"match": "*.o_proj", "algo": "local_hessian"}]}
EOF

fresh recipe-yaml
units=()
while IFS= read -r f; do units+=("${f#tests/data/modelopt_recipes/}=$f"); done \
    < <(find tests/data/modelopt_recipes/configs -name '*.yaml' | sort)
while IFS= read -r f; do
    name=$(basename "$f" .yaml)
    pack "$OUT/recipe-yaml/$name" "recipe.yaml=$f" "${units[@]}"
done < <(find tests/data/modelopt_recipes/lwq_equiv tests/data/modelopt_recipes/models -name '*.yaml' | sort)

# ---- resume manifests: a run killed at every durable step, then the complete one ----------------
fresh manifest
for k in $(seq 1 200); do
    rm -rf "$W/r" "$W/r.layerwise_resume"
    # (a shell of its own, so that the kill is not reported here)
    LWQ_SYS_CRASH_STEP=$k LWQ_SYS_CRASH_MODE=kill bash -c '"$@"; exit $?' _ "$LWQ" quantize "$W/m_3layers" \
        -o "$W/r" --qformat nvfp4 --calib-size 4 --calib-seq 16 --quiet >/dev/null 2>&1 && break || true
    m=$W/r.layerwise_resume/manifest.json
    [ -f "$m" ] && cp "$m" "$OUT/manifest/step_$k.json"
done
cp "$W/r.layerwise_resume/manifest.json" "$OUT/manifest/complete.json"
quant m_qwen3_moe q_gptq --qformat nvfp4 --algo gptq
cp "$W/q_gptq.layerwise_resume/manifest.json" "$OUT/manifest/complete_gptq_moe.json"
# identical manifests (steps that wrote something else) are kept once
for f in "$OUT"/manifest/step_*.json; do
    for g in "$OUT"/manifest/*.json; do
        [ "$f" != "$g" ] && [ -f "$f" ] && [ -f "$g" ] && cmp -s "$f" "$g" && rm -f "$f"
    done
done

# ---- tokenizers ----------------------------------------------------------------------------------
rm -rf "$OUT/tokenizer-bpe"
mkdir -p "$OUT/tokenizer-bpe"
cp "$W/m_llama/tokenizer.json" "$W/m_llama/tokenizer_config.json" "$OUT/tokenizer-bpe/"
fresh tokenizer
T=$W/tok
mkdir -p "$T"
cat >"$T/wordlevel.json" <<'EOF'
{"version": "1.0", "added_tokens": [{"id": 0, "content": "[UNK]", "special": true},
 {"id": 1, "content": "[CLS]", "special": true}, {"id": 2, "content": "[SEP]", "special": true}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Strip", "strip_left": true, "strip_right": true}]},
 "pre_tokenizer": {"type": "Whitespace"},
 "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
 "decoder": null,
 "model": {"type": "WordLevel", "unk_token": "[UNK]",
  "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, ",": 4, "world": 5, "!": 6, "It": 7, "'": 8, "s": 9, "caf\u00e9": 10}}}
EOF
cat >"$T/bpe_byte_fallback.json" <<'EOF'
{"version": "1.0", "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
 {"id": 1, "content": "<s>", "special": true}, {"id": 2, "content": "</s>", "special": true},
 {"id": 20, "content": "<|tool|>", "special": false, "lstrip": true, "rstrip": false, "single_word": false, "normalized": false}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
 "pre_tokenizer": null,
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
  "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
  "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
 "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
 "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
  "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x00>": 3, "<0x0A>": 4, "<0xC3>": 5, "<0xA9>": 6, "\u2581": 7, "h": 8, "e": 9, "l": 10, "o": 11,
            "\u2581h": 12, "el": 13, "lo": 14, "\u2581hel": 15, "\u2581hello": 16, "w": 17, "r": 18, "d": 19},
  "merges": ["\u2581 h", "e l", "l o", "\u2581h el", "\u2581hel lo"]}}
EOF
cat >"$T/bytelevel_split_digits.json" <<'EOF'
{"version": "1.0", "added_tokens": [{"id": 12, "content": "<|endoftext|>", "special": true}],
 "normalizer": {"type": "NFD"},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
   {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
   {"type": "Digits", "individual_digits": true},
   {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
 "post_processor": {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 12], "cls": ["<|endoftext|>", 12], "trim_offsets": true, "add_prefix_space": false},
 "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
 "model": {"type": "BPE", "continuing_subword_prefix": "", "end_of_word_suffix": "", "ignore_merges": true,
  "vocab": {"H": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "w": 5, "1": 6, "2": 7, "He": 8, "ll": 9, "Hell": 10, "\u0120w": 11},
  "merges": [["H", "e"], ["l", "l"], ["He", "ll"], ["\u0120", "w"]]}}
EOF
cat >"$T/metaspace.json" <<'EOF'
{"version": "1.0", "added_tokens": [],
 "normalizer": {"type": "NFC"},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true}]},
 "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": false}]},
 "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
 "model": {"vocab": {"\u2581a": 0, "b": 1, "\u2581": 2, "a": 3, "?": 4}, "unk_token": "?", "merges": ["\u2581 a"]}}
EOF
printf 'Hello, world! 12 w\xc3\xa9\n\n<|endoftext|>  x' >"$T/text"
echo '{"pad_token": "<unk>", "eos_token": "</s>", "bos_token": "<s>", "add_bos_token": true, "add_eos_token": true}' >"$T/config.json"
for f in wordlevel bpe_byte_fallback bytelevel_split_digits metaspace; do
    mkdir -p "$W/t_$f"
    cp "$T/$f.json" "$W/t_$f/tokenizer.json"
    printf 'Hello, world!\n' | "$LWQ" tokenize "$W/t_$f" >/dev/null || {
        echo "make-seeds: lwq does not load the seed tokenizer $f.json" >&2
        exit 2
    }
    cp "$T/$f.json" "$OUT/tokenizer/$f.json"
    pack "$OUT/tokenizer/${f}_with_text" "tokenizer.json=$T/$f.json" "tokenizer_config.json=$T/config.json" "text=$T/text"
done
pack "$OUT/tokenizer/mkmodel_bytelevel_bpe" "tokenizer.json=$W/m_llama/tokenizer.json" \
    "tokenizer_config.json=$W/m_llama/tokenizer_config.json" "text=$T/text"

# ---- calibration data ----------------------------------------------------------------------------
fresh calib
C=$W/calib
mkdir -p "$C"
cat >"$C/all_keys.jsonl" <<'EOF'
{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8]}
{"text": "The quick brown fox jumps over the lazy dog."}

{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello \u00e9t\u00e9!"}]}
{"conversations": [{"from": "human", "value": "2 + 2?"}, {"from": "gpt", "value": "4"}]}
{"prompt": "Translate: chat", "completion": " cat", "response": "", "output": "le chat"}
{"input": "sum 1 2", "output": "3"}
{"text": ""}
EOF
printf '{"input_ids": [0, 272, 5]}\n{"input_ids": []}\n' >"$C/ids.jsonl"
printf 'First paragraph,\nwith two lines.\n\n  \t\nSecond paragraph \xe2\x80\x94 UTF-8.\r\n\r\nThird.\n' >"$C/paragraphs.txt"
cp "$C/all_keys.jsonl" "$OUT/calib/all_keys.jsonl"
pack "$OUT/calib/ids_only" "calib.jsonl=$C/ids.jsonl"
pack "$OUT/calib/text_file" "calib.txt=$C/paragraphs.txt"
pack "$OUT/calib/directory" "a.jsonl=$C/all_keys.jsonl" "b.txt=$C/paragraphs.txt" "c.jsonl=$C/ids.jsonl"

# ---- auto-quantize scores files (fuzz_scores: checked against qdir-src/llama, which is m_llama) -----
fresh scores
aqs() { # aqs NAME OUT [options]: OUT's scores.json as NAME
    local name=$1 out=$2
    shift 2
    quant m_llama "$out" "$@" >/dev/null 2>&1 || true
    cp "$W/$out.layerwise_resume/auto_quantize/scores.json" "$OUT/scores/$name.json"
}
aqs complete_layer aq_a --auto-quantize-bits 6
aqs complete_kl aq_b --auto-quantize-bits 6 --auto-quantize-score kl
aqs complete_nvfp4_none aq_c --auto-quantize-bits 6 --auto-quantize-formats nvfp4,none
# killed in pass 1: before the first layer's commit, and after it
for k in 20 25; do
    rm -rf "$W/aq_d" "$W/aq_d.layerwise_resume"
    LWQ_SYS_CRASH_STEP=$k LWQ_SYS_CRASH_MODE=kill bash -c '"$@"; exit $?' _ "$LWQ" quantize "$W/m_llama" \
        -o "$W/aq_d" --calib-size 4 --calib-seq 16 --quiet --auto-quantize-bits 6 >/dev/null 2>&1 || true
    cp "$W/aq_d.layerwise_resume/auto_quantize/scores.json" "$OUT/scores/killed_step_$k.json"
done

# ---- hf_ptq command lines (the translator of tools/hfptq_args.c): one argument per line -------
fresh hfptq
H=$OUT/hfptq
printf -- '--pyt_ckpt_path\nm\n--export_path\no\n--qformat\nnvfp4\n--kv_cache_qformat\nfp8\n--calib_size\n512\n--calib_seq\n256\n--batch_size\n4' >"$H/hf_ptq_nvfp4"
printf -- '--model\nm\n--export_path\no\n--auto_quantize_bits\n6\n--qformat=nvfp4_w4a4_weight_mse_fp8_sweep,fp8\n--auto_quantize_method\nkl_div\n--auto_quantize_score_size\n64\n--auto_quantize_cost_model\nweight\n--auto_quantize_checkpoint\nck' >"$H/auto_quantize"
printf -- '--pyt_ckpt_path=m\n--recipe=r.yaml\n--qformat\nfp8\n--kv_cache_qformat=none\n--auto_quantize_bits=5\n--trust_remote_code\n--attn_implementation\neager\n--skip_generate\n--offload_folder\nx\n--sparsity_fmt\ndense\n--max_gpu_memory_gb\n40\n--max_cpu_memory_gb=100' >"$H/recipe_and_noeffect"
printf -- 'm\n-o\no\n--qformat\nnvfp4_experts-fp8_attn\n--calib\nc.jsonl\n--device\ncpu\n--quiet' >"$H/lwq_own"
printf -- '--model\nm\n--qformat\nint4_awq\n--use_fsdp2\n--dataset\na,b' >"$H/refused"

# ---- dictionaries: the names each parser looks for (its string literals), fuzz/dict/<harness>.dict
mkdir -p fuzz/dict
dict() { # dict HARNESS SOURCE_FILE_NAME... [-- EXTRA_ENTRY...]
    local h=$1 f files=()
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        f=$(git ls-files "*/$1" | head -1)
        [ -n "$f" ] || { echo "make-seeds: no source file $1 for the $h dictionary" >&2; exit 2; }
        files+=("$f")
        shift
    done
    [ $# -gt 0 ] && shift
    {
        echo "# fuzz/make-seeds.sh: string literals of ${files[*]}"
        grep -ohE '"[A-Za-z_][A-Za-z0-9_.:$*-]{1,39}"' "${files[@]}" | sort -u
        # extra entries as the input should hold them; a dictionary escapes \ and "
        for f in "$@"; do printf '"%s"\n' "$(printf '%s' "$f" | sed 's/\\/\\\\/g; s/"/\\"/g')"; done
    } >"fuzz/dict/$h.dict"
}
dict safetensors safetensors.c dtype.c -- '{"' '":' '[0,' '],' '"data_offsets":[' '"shape":['
dict config config.c -- 'null' 'true' 'false' '1e308' '-1' '4096' '"text_config":{'
dict recipe_json recipe.c recipe_attrs.c -- '[!' '[a-z]' '*.' 'true' 'false' 'null' '1e-50'
dict recipe_yaml recipe_yaml.c recipe_autoq.c recipe_qcfg.c recipe_attrs.c yaml_doc.c -- 'imports:' '$import:' \
    'quant_cfg:' 'quantizer_name:' 'cfg:' '- ' ': ' '---' '[' ']' '{' '}' '&a' '*a' '!!str' '(4, 3)' '(2, 1)'
dict scores autoq_state.c -- '"0123456789abcdef"' 'true' 'false' 'null' '1e308' '-1' 'nvfp4' 'fp8' 'none' \
    'state-0.bin' 'state-1.bin'
dict manifest manifest.c -- '"0123456789abcdef"' 'true' 'false' 'null' '1e20' '-1'
dict qdir eval_qdir.c checkpoint.c safetensors.c dtype.c arch.c -- '==> ' ' <==' 'model-layer-00000.safetensors'
dict calib dataset.c -- '==> ' ' <==' '.txt' '.jsonl' '\u0000' '\ud800'
# (the flags too: the literal pattern above skips names starting with --)
# shellcheck disable=SC2046
dict hfptq hfptq_args.c -- '=' ',' 'nvfp4,fp8' '-o' $(grep -ohE '"--[a-z0-9_-]+"' tools/hfptq_args.c | tr -d '"' | sort -u)
dict tokenizer tokenizer.c tokenizer_model.c tokenizer_pretok.c tokenizer_text.c -- '==> ' ' <==' 'text' \
    '\u2581' '\u0120' '<0x0A>' '(?i:' '\\p{L}'

echo "make-seeds: $(find "$OUT" -type f | wc -l) files, $(du -sh "$OUT" | cut -f1) in $OUT"
