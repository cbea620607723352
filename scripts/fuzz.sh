#!/usr/bin/env bash
# Build the libFuzzer harnesses of fuzz/ with clang, ASan and UBSan, and run each for a while.
# Stops at the first crash, sanitizer report, timeout or out-of-memory, and prints how to
# reproduce it; at the end prints the executions of every harness.  Exit 0: every harness ran
# clean; 1: a harness found something (or a run failed); 2: usage; 77: no clang with libFuzzer
# (the ctest entry fuzz_smoke reports that as skipped).
#
# usage: scripts/fuzz.sh [options] [HARNESS...]      (harnesses: fuzz/fuzz_<name>.c; default all)
#   -t, --time S       seconds per harness (default $FUZZ_TIME or 600)
#   -b, --build DIR    build directory (default build-fuzz)
#   -j, --jobs N       build jobs (default 2)
#   --fresh            start from the seeds only, in a temporary corpus (the ctest entry); by
#                      default each harness keeps what it found in DIR/corpus/<harness>
#   --timeout S        one input running longer than this is a finding (default 10)
#   --rss-limit MB     memory limit per harness, and per single allocation (default 2048)
#   --seed N           libFuzzer's random seed (default: a new one each run)
#   --list             print the harness names and exit
# Seeds: tests/data/fuzz/<harness with - for _>/, dictionaries: fuzz/dict/<harness>.dict.
# Findings: DIR/artifacts/<harness>/, logs: DIR/logs/<harness>.log, summary: DIR/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
T=${FUZZ_TIME:-600} BUILD=build-fuzz JOBS=2 FRESH=0 TIMEOUT=10 RSS=2048 LIST=0 SEED=0
want=()
while [ $# -gt 0 ]; do
    case $1 in
    -t | --time) T=$2; shift 2 ;;
    -b | --build) BUILD=$2; shift 2 ;;
    -j | --jobs) JOBS=$2; shift 2 ;;
    --fresh) FRESH=1; shift ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --rss-limit) RSS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --list) LIST=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
    *) want+=("$1"); shift ;;
    esac
done
all=()
for f in fuzz/fuzz_*.c; do
    n=$(basename "$f" .c)
    n=${n#fuzz_}
    [ "$n" = util ] || all+=("$n")
done
if [ $LIST = 1 ]; then printf '%s\n' "${all[@]}"; exit 0; fi
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
for h in "${want[@]}"; do
    # a here-string, not `printf | grep -q` under pipefail (grep -q's early exit, SIGPIPE)
    grep -qx "$h" <<<"$(printf '%s\n' "${all[@]}")" || { echo "fuzz.sh: no harness $h (have: ${all[*]})" >&2; exit 2; }
done
case $T in '' | 0 | *[!0-9]*) echo "fuzz.sh: --time wants a whole number of seconds (at least 1), not '$T'" >&2; exit 2 ;; esac

# ---- clang with libFuzzer? ---------------------------------------------------------------------
CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
    for c in clang clang-14 clang-15 clang-16; do command -v $c >/dev/null && { CC=$c; break; }; done
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' >"$probe/p.c"
if [ -z "$CC" ] || ! "$CC" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
    why="no clang on PATH"
    [ -n "$CC" ] && why="$CC cannot link -fsanitize=fuzzer: $(head -c 200 "$probe/err")"
    echo "[SKIP] fuzz: $why (Debian: apt-get install clang-14 libclang-rt-14-dev)"
    exit 77
fi

# ---- build -------------------------------------------------------------------------------------
echo "fuzz.sh: building the harnesses with $CC (ASan + UBSan) in $BUILD"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    CC=$CC cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLWQ_FUZZ=ON -DLWQ_SANITIZE=ON \
        -DLWQ_TESTS=OFF -DLWQ_CUDA=OFF >"$probe/cmake.log" 2>&1 || { cat "$probe/cmake.log"; exit 1; }
fi
cmake --build "$BUILD" -j"$JOBS" --target fuzzers >"$probe/build.log" 2>&1 || { tail -40 "$probe/build.log"; exit 1; }

# ---- run ---------------------------------------------------------------------------------------
mkdir -p "$BUILD/logs" "$BUILD/artifacts"
# scratch files of the harnesses (fuzz/fuzz_util.h): in memory when /dev/shm is there
if [ -w /dev/shm ]; then TMPDIR=$(mktemp -d /dev/shm/lwq-fuzz.XXXXXX); else TMPDIR=$(mktemp -d); fi
export TMPDIR
trap 'rm -rf "$probe" "$TMPDIR"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary=$BUILD/summary.txt
{
    echo "# scripts/fuzz.sh --time $T $(date -u +%Y-%m-%dT%H:%MZ) $(uname -m), $(nproc) cores, $($CC --version | head -1)"
    printf '%-14s %8s %12s %10s %8s  %s\n' harness seconds executions exec/s corpus result
} >"$summary"
rc=0
for h in "${want[@]}"; do
    seeds=$SRC/tests/data/fuzz/${h//_/-}
    corpus=$BUILD/corpus/$h
    [ $FRESH = 1 ] && corpus=$TMPDIR/corpus-$h
    mkdir -p "$corpus" "$BUILD/artifacts/$h"
    dict=()
    [ -f "fuzz/dict/$h.dict" ] && dict=(-dict="fuzz/dict/$h.dict")
    log=$BUILD/logs/$h.log
    echo "fuzz.sh: $h for ${T}s (seeds $seeds, log $log)"
    set +e
    "$BUILD/fuzz/fuzz_$h" -max_total_time="$T" -timeout="$TIMEOUT" -rss_limit_mb="$RSS" \
        -seed="$SEED" -print_final_stats=1 -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$BUILD/artifacts/$h/" \
        "${dict[@]}" "$corpus" "$seeds" >"$log" 2>&1
    hrc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
    files=$(find "$corpus" -type f | wc -l)
    result=ok
    if [ $hrc -ne 0 ] || ! grep -q '^Done [0-9]* runs' "$log"; then
        kind=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-zA-Z-]+|runtime error:.*|lwq fuzz: .*|out-of-memory.*' "$log" |
               head -c 200 || true)
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        result="FAILED: ${kind:-exit status $hrc}"
        echo "---- $log (last lines) ----"
        tail -n 60 "$log"
        echo "----"
        echo "fuzz.sh: $h: $result"
        [ -n "$art" ] && echo "fuzz.sh: reproduce: $BUILD/fuzz/fuzz_$h $art"
        rc=1
    fi
    printf '%-14s %8s %12s %10s %8s  %s\n' "$h" "${secs:--}" "${execs:--}" "${speed:--}" "$files" "$result" >>"$summary"
    [ $rc = 0 ] || break
done
cat "$summary"
exit $rc
