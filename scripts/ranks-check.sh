#!/usr/bin/env bash
# The sha256 of every output file, compared between no MPI and mpirun -np 1, 2, 3 and 4 (4 ranks
# oversubscribe a 2-core machine), over presets, algorithms, dense and MoE models, BF16 and
# FP8-block sources, with and without --expert-group.  Prints one row per case:
#   case                                  none  np1   np2   np3   np4
#   llama bf16 nvfp4 max                  ref   same  same  same  same
# "same": every file's sha256 equals the no-MPI run's; "DIFF": some file differs (named below the
# table); "fail": the run failed (its log is kept).  Exit 0 when every cell is "same".
#
#   scripts/ranks-check.sh [BUILD_DIR]      (default build; LWQ_MPIEXEC picks the launcher)
# REF_BIN=/path/to/lwq (a build configured -DLWQ_MPI=OFF) makes the "none" column that binary's.
# Models come from `lwq mkmodel` (tiny: 3 layers, hidden 128) and tests/data/peers/src (the new
# families, nemotron_h and kimi_linear among them), calibration 16 x 32 tokens in 4 batches of 4,
# so 4 ranks each get one batch.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
lwq=$(realpath "$build/lwq")
ref_bin=$(realpath "${REF_BIN:-$lwq}")
mpiexec=${LWQ_MPIEXEC:-mpiexec}
command -v "$mpiexec" >/dev/null || { echo "ranks-check: no $mpiexec (install Open MPI: scripts/setup.sh)"; exit 2; }
# as root, oversubscribed, without ssh (Open MPI; MPICH ignores these)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_plm_rsh_agent=
work=${WORK:-/tmp/lwq-ranks-check}
rm -rf "$work"
mkdir -p "$work"
calib=(--calib-size 16 --calib-seq 32 --batch-size 4 --threads 1)
mk() { "$lwq" mkmodel "$work/$1" --hidden 128 --layers 3 "${@:2}" >/dev/null; }
mk llama --arch llama
mk moe --arch qwen3_moe --experts 8 --top-k 2
mk dsfp8 --arch deepseek_v3 --source-format fp8 --experts 8 --top-k 2 --hidden 256
mk next --arch qwen3_next --experts 8 --top-k 2

cases=(
  "llama|nvfp4 max|--qformat nvfp4"
  "llama|nvfp4 mse+sweep|--qformat nvfp4 --algo mse --fp8-scale-sweep"
  "llama|nvfp4 local_hessian|--qformat nvfp4 --algo local_hessian"
  "llama|nvfp4 gptq|--qformat nvfp4 --algo gptq"
  "llama|fp8 max|--qformat fp8"
  "llama|fp8 gptq|--qformat fp8 --algo gptq"
  "moe|nvfp4 max|--qformat nvfp4"
  "moe|nvfp4 local_hessian|--qformat nvfp4 --algo local_hessian"
  "moe|nvfp4_experts-fp8_attn mse+sweep|--qformat nvfp4_experts-fp8_attn --algo mse --fp8-scale-sweep"
  "moe|nvfp4 gptq|--qformat nvfp4 --algo gptq"
  "moe|fp8 mse (an expert's gate+up searched together)|--qformat fp8 --algo mse"
  "moe|nvfp4 max --expert-group 3|--qformat nvfp4 --expert-group 3"
  "moe|nvfp4 local_hessian --expert-group 3|--qformat nvfp4 --algo local_hessian --expert-group 3"
  "dsfp8|nvfp4 max (FP8-block source)|--qformat nvfp4"
  "dsfp8|nvfp4_experts-fp8_attn (FP8-block) --expert-group 4|--qformat nvfp4_experts-fp8_attn --expert-group 4"
  "dsfp8|fp8 gptq (FP8-block source)|--qformat fp8 --algo gptq"
  "next|qwen3next_production|--qformat qwen3next_production"
  "next|qwen3next_production --expert-group 4|--qformat qwen3next_production --expert-group 4"
)
# the new families' transformers-written tiny sources (tests/data/peers/src) with their calibration
# ids: qwen3_5_moe's experts fused 3-D on disk, glm_moe_dsa's DSA indexer and a routed expert no
# token reaches (local_hessian's cold-expert count in the report)
for m in qwen3_5_moe-bf16 glm4_moe-bf16 minimax_m2-bf16 deepseek_v32-bf16 glm_moe_dsa-bf16 \
  nemotron_h-bf16 nemotron_h_latent-f32 kimi_linear-bf16; do
  cp -r "tests/data/peers/src/$m" "$work/$m"
done
pc="--calib $PWD/tests/data/peers/calib.jsonl"
cases+=(
  "qwen3_5_moe-bf16|nvfp4 (fused 3-D experts) --expert-group 3|$pc --qformat nvfp4 --expert-group 3"
  "qwen3_5_moe-bf16|fp8 mse (fused 3-D experts)|$pc --qformat fp8 --algo mse"
  "glm4_moe-bf16|nvfp4 local_hessian|$pc --qformat nvfp4 --algo local_hessian"
  "minimax_m2-bf16|nvfp4 mse+sweep --expert-group 3|$pc --qformat nvfp4 --algo mse --fp8-scale-sweep --expert-group 3"
  "deepseek_v32-bf16|fp8 gptq (DSA indexer)|$pc --qformat fp8 --algo gptq"
  "glm_moe_dsa-bf16|nvfp4 local_hessian (DSA, a cold expert)|$pc --qformat nvfp4 --algo local_hessian"
  "nemotron_h-bf16|nvfp4 (Mamba2, NoPE attention, ReLU2 MoE)|$pc --qformat nvfp4"
  "nemotron_h-bf16|mamba_moe_nvfp4_conservative|$pc --qformat mamba_moe_nvfp4_conservative"
  "nemotron_h_latent-f32|nvfp4 mse+sweep (latent MoE)|$pc --qformat nvfp4 --algo mse --fp8-scale-sweep"
  "kimi_linear-bf16|nvfp4 (KDA, MLA)|$pc --qformat nvfp4"
  "kimi_linear-bf16|fp8 gptq (KDA, MLA)|$pc --qformat fp8 --algo gptq"
)
printf '%-56s %-5s %-5s %-5s %-5s %-5s\n' "case" none np1 np2 np3 np4
status=0
notes=()
for c in "${cases[@]}"; do
  IFS='|' read -r model name args <<<"$c"
  tag=$(echo "$model $name" | tr -c 'a-zA-Z0-9\n' '_')
  row=$(printf '%-56s' "$model $name")
  ref="$work/$tag.none"
  # shellcheck disable=SC2086
  if "$ref_bin" quantize "$work/$model" -o "$ref" "${calib[@]}" $args --quiet >"$ref.log" 2>&1; then
    (cd "$ref" && sha256sum * | sort -k2) >"$ref.sha"
    row+=" ref  "
  else
    row+=" fail "; status=1; notes+=("$tag none: $ref.log"); echo "$row"; continue
  fi
  for np in 1 2 3 4; do
    out="$work/$tag.np$np"
    # shellcheck disable=SC2086
    if "$mpiexec" -n "$np" "$lwq" quantize "$work/$model" -o "$out" "${calib[@]}" $args --quiet >"$out.log" 2>&1; then
      (cd "$out" && sha256sum * | sort -k2) >"$out.sha"
      if cmp -s "$ref.sha" "$out.sha"; then
        row+=" same "
      else
        row+=" DIFF "; status=1
        notes+=("$tag np$np: $(diff "$ref.sha" "$out.sha" | awk '/^>/ {print $3}' | tr '\n' ' ')")
      fi
      rm -rf "$out" "$out.layerwise_resume"
    else
      row+=" fail "; status=1; notes+=("$tag np$np: $out.log")
    fi
  done
  echo "$row"
  rm -rf "$ref" "$ref.layerwise_resume"
done
for n in "${notes[@]}"; do echo "  $n"; done
mpiver=$("$mpiexec" --version 2>&1 | grep -m1 -E 'Open MPI|OpenRTE|Version:' | sed 's/^ *//; s/  */ /g')
echo "ranks-check: $("$lwq" version) (none: $ref_bin), $(basename "$mpiexec") ($mpiver, $(ldd "$lwq" | grep -o 'libmpi[a-z_]*\.so[.0-9]*' | head -1)), $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ $status = 0 ] && echo "ranks-check: every output file identical for no MPI and 1-4 ranks" || echo "ranks-check: FAILED"
exit $status
