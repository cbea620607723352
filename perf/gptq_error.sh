#!/usr/bin/env bash
# perf/gptq_error.sh — GPTQ against max calibration, per linear, on the test models.
#
#   perf/gptq_error.sh [MODEL_DIR...]
#
# For each model (default: the NVFP4-capable fixtures of ../shared/fixtures plus a synthetic
# llama and qwen3_moe from `lwq mkmodel`) and each of nvfp4 and fp8, one `lwq quantize --algo gptq`
# run with --log-json.  The engine measures, for every GPTQ linear, the layer-output error
# ||WX - ŴX||^2 over its calibration tokens (the run's own Hessian sums) of the GPTQ weight and of
# the max-calibrated weight with the same scales (engine/quant/qlayer_gptq.c).  Prints a markdown table:
# linears, how many GPTQ is worse than max on (must be 0), the worst GPTQ/max ratio, the mean
# ratio, and the mean relative errors (err / ||WX||^2) of both; then every linear of the first
# model.  Calibration: CALIB_SIZE sequences of CALIB_SEQ token ids drawn uniformly from the model's
# vocabulary with a fixed seed (the fixtures are tiny random-weight models without tokenizers).  Environment: LWQ_BIN [build/lwq], DIR [/tmp/lwq-gptq-error], CALIB_SIZE [32],
# CALIB_SEQ [64], ACT_ORDER [0] (1: --gptq-act-order).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LWQ_BIN:-build/lwq}
DIR=${DIR:-/tmp/lwq-gptq-error}
CS=${CALIB_SIZE:-32}
SEQ=${CALIB_SEQ:-64}
AO=()
[ "${ACT_ORDER:-0}" = 1 ] && AO=(--gptq-act-order)
FIX=${LWQ_FIXTURES:-../shared/fixtures}
rm -rf "$DIR" && mkdir -p "$DIR"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  for f in mlxd-tiny-llama3-bf16 mlxd-tiny-qwen3-bf16 agilerl-tiny-qwen3-moe quatricmorph-tiny-llama-2shard; do
    [ -d "$FIX/$f" ] && models+=("$FIX/$f")
  done
  "$BIN" mkmodel "$DIR/synthetic-llama" --arch llama --hidden 256 --layers 2 --vocab 273 --quiet
  "$BIN" mkmodel "$DIR/synthetic-qwen3-moe" --arch qwen3_moe --hidden 128 --layers 2 --experts 8 --vocab 273 --quiet
  models+=("$DIR/synthetic-llama" "$DIR/synthetic-qwen3-moe")
fi
echo "| model | format | GPTQ linears | worse than max | worst GPTQ/max | mean GPTQ/max | mean rel. err GPTQ | mean rel. err max |"
echo "|---|---|---|---|---|---|---|---|"
first=""
for m in "${models[@]}"; do
  name=$(basename "$m")
  python3 - "$m/config.json" "$CS" "$SEQ" >"$DIR/$name-calib.jsonl" <<'PY'
import json, random, sys
c = json.load(open(sys.argv[1]))
c = c.get("text_config", c)
rng = random.Random(1234)
for _ in range(int(sys.argv[2])):
    print(json.dumps({"input_ids": [rng.randrange(c["vocab_size"]) for _ in range(int(sys.argv[3]))]}))
PY
  for q in nvfp4 fp8; do
    out="$DIR/$name-$q"
    "$BIN" quantize "$m" -o "$out" --qformat "$q" --algo gptq "${AO[@]}" --calib "$DIR/$name-calib.jsonl" \
      --calib-size "$CS" --calib-seq "$SEQ" --log-json "$out.jsonl" --quiet
    [ -z "$first" ] && first="$out.jsonl"
    python3 - "$name" "$q" "$out.jsonl" <<'PY'
import json, sys
name, q, path = sys.argv[1:4]
ev = [json.loads(l) for l in open(path) if '"event":"gptq"' in l]
worse = sum(e["output_error"] > e["max_output_error"] for e in ev)
ratios = [e["output_error"] / e["max_output_error"] for e in ev if e["max_output_error"] > 0]
rg = sum(e["output_error"] / e["output_norm"] for e in ev) / len(ev)
rm = sum(e["max_output_error"] / e["output_norm"] for e in ev) / len(ev)
print(f"| {name} | {q} | {len(ev)} | {worse} | {max(ratios):.3f} | {sum(ratios)/len(ratios):.3f} | {rg:.3e} | {rm:.3e} |")
PY
  done
done
echo
echo "Every linear of $(basename "${first%.jsonl}") (layer-output squared error over the calibration tokens):"
echo
python3 - "$first" <<'PY'
import json, sys
print("| layer | linear | GPTQ | max | GPTQ/max |")
print("|---|---|---|---|---|")
for l in open(sys.argv[1]):
    if '"event":"gptq"' not in l:
        continue
    e = json.loads(l)
    r = e["output_error"] / e["max_output_error"] if e["max_output_error"] > 0 else float("nan")
    print(f'| {e["layer"]} | {e["linear"].split("layers.")[-1]} | {e["output_error"]:.4e} | {e["max_output_error"]:.4e} | {r:.3f} |')
PY
