#!/usr/bin/env bash
# perf/ranks_speed.sh — one `lwq quantize` on a compute-bound recipe (nvfp4, mse + FP8 scale
# sweep: the quantizer dominates) run three ways, back to back in one invocation:
#   A: 1 process,  --threads 1            (no launcher)
#   B: mpiexec -n 2, --threads 1 per rank
#   C: 1 process,  --threads 2
# ROUNDS times each, interleaved A B C A B C ..., so a change in the machine's load hits all three.
# Per run: the wall time, and each process's CPU time (user + sys, /usr/bin/time).  Prints the
# median wall times and the ratios A/B (target >= 1.7) and C/B, the load average before and after,
# and checks that B and C wrote A's bytes.  On a machine shared with other jobs the wall times are
# noisy (a process gets a share of a core); the CPU times are not: A's CPU time over the larger of
# B's two ranks' CPU times is what the wall ratio would be with a free core per rank (a lower bound
# of it: a rank waiting in MPI polls, and the polling counts as its CPU time).
#
#   perf/ranks_speed.sh     Environment: LWQ_BIN [build/lwq], LWQ_MPIEXEC [mpiexec],
#                           DIR [/tmp/lwq-ranks-speed], ROUNDS [3], HIDDEN [2048], LAYERS [2]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${LWQ_BIN:-build/lwq}")
MPIEXEC=${LWQ_MPIEXEC:-mpiexec}
DIR=${DIR:-/tmp/lwq-ranks-speed}
ROUNDS=${ROUNDS:-3}
command -v "$MPIEXEC" >/dev/null || { echo "ranks_speed: no $MPIEXEC (scripts/setup.sh installs Open MPI)"; exit 2; }
[ -x /usr/bin/time ] || { echo "ranks_speed: needs /usr/bin/time (apt-get install time)"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_plm_rsh_agent=
rm -rf "$DIR" && mkdir -p "$DIR"
"$BIN" mkmodel "$DIR/m" --arch llama --hidden "${HIDDEN:-2048}" --layers "${LAYERS:-2}" --quiet
# each process's CPU seconds into $CPU_OUT.<rank> (Open MPI's or MPICH's rank variable; 0 alone)
cat >"$DIR/cpu.sh" <<'SH'
#!/bin/sh
exec /usr/bin/time -f "%U %S" -o "$CPU_OUT.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" "$@"
SH
chmod +x "$DIR/cpu.sh"
args=(--qformat nvfp4 --algo mse --fp8-scale-sweep --calib-size 16 --calib-seq 64 --batch-size 4 --quiet)
# run NAME THREADS [LAUNCHER...]: prints "wall cpu_sum cpu_max"
run() {
  local name=$1 th=$2; shift 2
  local out="$DIR/$name" t0 t1
  rm -rf "$out" "$out.layerwise_resume" "$out".cpu.*
  t0=$(date +%s.%N)
  CPU_OUT="$out.cpu" "$@" "$DIR/cpu.sh" "$BIN" quantize "$DIR/m" -o "$out" "${args[@]}" --threads "$th" >"$out.log" 2>&1 ||
    { echo "ranks_speed: $name failed, see $out.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  (cd "$out" && sha256sum * | sort -k2) >"$out.sha"
  cat "$out".cpu.* | awk -v w="$(echo "$t1 - $t0" | bc)" '{ c = $1 + $2; s += c; if (c > m) m = c } END { printf "%.2f %.2f %.2f\n", w, s, m }'
}
echo "ranks_speed: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $("$MPIEXEC" --version 2>&1 | grep -m1 -E 'OpenRTE|Version:' | sed 's/^ *//; s/  */ /g')"
echo "ranks_speed: load before $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%F %T') UTC; model llama hidden ${HIDDEN:-2048}, ${LAYERS:-2} layers"
A=() B=() C=() Acpu=() Bmax=()
for ((i = 0; i < ROUNDS; i++)); do
  read -r aw as am < <(run A 1 env)
  read -r bw bs bm < <(run B 1 "$MPIEXEC" -n 2)
  read -r cw cs cm < <(run C 2 env)
  A+=("$aw") B+=("$bw") C+=("$cw") Acpu+=("$as") Bmax+=("$bm")
  echo "round $((i + 1)): wall (CPU) 1 rank x 1 thread $aw s ($as), 2 ranks x 1 thread $bw s (ranks' sum $bs, larger $bm), 1 rank x 2 threads $cw s ($cs)"
  cmp -s "$DIR/A.sha" "$DIR/B.sha" || { echo "ranks_speed: 2 ranks wrote other bytes"; exit 1; }
  cmp -s "$DIR/A.sha" "$DIR/C.sha" || { echo "ranks_speed: 2 threads wrote other bytes"; exit 1; }
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
a=$(med "${A[@]}") b=$(med "${B[@]}") c=$(med "${C[@]}") ac=$(med "${Acpu[@]}") bm=$(med "${Bmax[@]}")
echo "median wall: 1 rank x 1 thread $a s, 2 ranks x 1 thread $b s, 1 rank x 2 threads $c s"
echo "wall ratio (1 rank x 1 thread) / (2 ranks x 1 thread): $(echo "scale=2; $a / $b" | bc)"
echo "wall ratio (1 rank x 2 threads) / (2 ranks x 1 thread): $(echo "scale=2; $c / $b" | bc)"
echo "CPU ratio (1 rank x 1 thread) / (larger rank of 2 x 1 thread): $(echo "scale=2; $ac / $bm" | bc)"
echo "ranks_speed: every run wrote the same bytes; load after $(cut -d' ' -f1-3 /proc/loadavg)"
