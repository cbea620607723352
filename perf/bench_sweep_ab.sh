#!/usr/bin/env bash
# Old against new NVFP4 block searches in one run: builds perf/bench_sweep at BASE_REV (with this
# tree's perf/bench_sweep.c, so both time the same weights; BENCH_DIST passes through), runs it
# and this tree's build/bench_sweep alternately ROUNDS times on the same weight, and prints per search the median CPU time of each
# (CPU time, not wall: on a shared machine the wall time includes waiting for a core) and
# old / new.  Exit 1 when the two builds' output hashes differ (other bytes), 0 otherwise.
#
#   perf/bench_sweep_ab.sh BASE_REV [ROWS COLS [REPS [ROUNDS]]]   (defaults 768 2048 3 5)
#
# Needs build/bench_sweep (cmake --build build --target bench_sweep).  The base build goes to
# ${LWQ_SWEEP_AB_DIR:-/tmp/lwq-sweep-ab}/build-SHA and is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: perf/bench_sweep_ab.sh BASE_REV [ROWS COLS [REPS [ROUNDS]]]}
rows=${2:-768} cols=${3:-2048} reps=${4:-3} rounds=${5:-5}
work=${LWQ_SWEEP_AB_DIR:-/tmp/lwq-sweep-ab}
new=build/bench_sweep
[ -x "$new" ] || { echo "bench_sweep_ab.sh: no $new (cmake --build build --target bench_sweep)" >&2; exit 2; }
sha=$(git rev-parse --short=12 "$base")
src=$work/src-$sha bdir=$work/build-$sha
if [ ! -f "$src/CMakeLists.txt" ]; then
    rm -rf "$src" && mkdir -p "$src"
    git archive "$sha" | tar -x -C "$src"
    cmake -S "$src" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DLWQ_CUDA=OFF >"$work/cmake-$sha.log" 2>&1
fi
# the same bench (weights, BENCH_DIST) around both kernels; copied only when it changed, so an
# unchanged base build is reused
cmp -s perf/bench_sweep.c "$src/perf/bench_sweep.c" || cp perf/bench_sweep.c "$src/perf/"
cmake --build "$bdir" -j2 --target bench_sweep >"$work/build-$sha.log" 2>&1
out=$work/runs.txt
: >"$out"
for r in $(seq "$rounds"); do
    "$bdir/bench_sweep" "$rows" "$cols" "$reps" | sed -n 's/^\(nvfp4 .*\)$/old \1/p' >>"$out"
    "$new" "$rows" "$cols" "$reps" | sed -n 's/^\(nvfp4 .*\)$/new \1/p' >>"$out"
done
echo "bench_sweep_ab: $rows x $cols BF16, base $sha against the work tree, $rounds alternating rounds of $reps reps; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(old|new) (nvfp4 .+?)\s+([\d.]+) ms\s+cpu\s+([\d.]+) ms.*hash (\w+)", line)
    if m:
        runs.setdefault(m.group(2), {}).setdefault(m.group(1), []).append((float(m.group(4)), float(m.group(3)), m.group(5)))
same = True
print(f"{'search':<24} {'old cpu ms':>11} {'new cpu ms':>11} {'old/new':>8}   (median; wall medians old/new)   hashes")
for name, d in runs.items():
    o, n = d["old"], d["new"]
    oc, nc = statistics.median(x[0] for x in o), statistics.median(x[0] for x in n)
    ow, nw = statistics.median(x[1] for x in o), statistics.median(x[1] for x in n)
    hashes = {x[2] for x in o} | {x[2] for x in n}
    same &= len(hashes) == 1
    print(f"{name:<24} {oc:11.2f} {nc:11.2f} {oc / nc:8.2f}   ({ow:.1f} / {nw:.1f} ms)   "
          f"{'identical' if len(hashes) == 1 else 'DIFFER: ' + ' '.join(sorted(hashes))}")
sys.exit(0 if same else 1)
EOF
