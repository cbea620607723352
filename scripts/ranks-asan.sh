#!/usr/bin/env bash
# scripts/ranks-asan.sh — the multi-rank code and the auto-quantize search under AddressSanitizer +
# UBSan with leak checking: test_ranks, the dist unit tests, scripts/ranks-check.sh (no MPI against
# 1-4 ranks) and the autoq suite (tests/engine/autoq/, test_autoq_e2e, test_autoq_stories,
# test_hostile_autoq; their `lwq` runs are the sanitized binary, LWQ_BIN) run from a build
# configured -DLWQ_SANITIZE=ON.  Open MPI dlopens its components and dlcloses them at exit,
# which leaves LeakSanitizer with allocations from unloaded modules that it can neither name nor
# suppress; a shim built here makes dlclose a no-op for these runs, so scripts/lsan-mpi.supp
# suppresses MPI's own allocations by library and anything of lwq's is reported.
#
#   scripts/ranks-asan.sh BUILD_DIR       (exit 0: every test passed with no sanitizer report)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/ranks-asan.sh BUILD_DIR (configured -DLWQ_SANITIZE=ON)}
grep -q '^LWQ_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
  { echo "ranks-asan: $build is not a -DLWQ_SANITIZE=ON build"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'int dlclose(void *h) { (void)h; return 0; }\n' >"$tmp/nodlclose.c"
cc -shared -fPIC -o "$tmp/nodlclose.so" "$tmp/nodlclose.c" || exit 2
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0"
# the shim alone is preloaded (into every process of the scripts: harmless outside lwq), so the ASan
# runtime, linked into lwq, does not come first: verify_asan_link_order=0 lets it start anyway
# Every process's report goes to a file of its own under $tmp/san (log_path.PID), read below: a
# report in an `lwq` a test runs would otherwise be only an exit status, and a test that expects a
# refusal (any non-zero status) would not see it.
mkdir -p "$tmp/san"
export ASAN_OPTIONS="fast_unwind_on_malloc=0:verify_asan_link_order=0:log_path=$tmp/san/asan"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$tmp/san/ubsan"
export LD_PRELOAD="$tmp/nodlclose.so"
status=0
(cd "$build" && ctest -R 'test_ranks|test_dist_|test_autoq_|test_mckp|test_hostile_autoq' --output-on-failure) \
    >"$tmp/ctest.log" 2>&1 || status=1
WORK="$tmp/rc" scripts/ranks-check.sh "$build" >"$tmp/rc.log" 2>&1 || status=1
unset LD_PRELOAD
grep -h -E 'tests passed|^ranks-check:' "$tmp/ctest.log" "$tmp/rc.log"
logs=("$tmp/ctest.log" "$tmp/rc.log" "$tmp"/rc/*.log "$tmp"/san/*)
echo "ranks-asan: $(ls "$tmp/san" | wc -l) sanitizer log files"
if grep -q -E 'ERROR: (Address|Leak)Sanitizer|runtime error' "${logs[@]}" 2>/dev/null; then
  echo "ranks-asan: sanitizer reports:"
  grep -h -A12 -E 'ERROR: (Address|Leak)Sanitizer|runtime error' "${logs[@]}" 2>/dev/null | head -80
  status=1
fi
[ $status = 0 ] && echo "ranks-asan: no sanitizer report; every test passed" || { cat "$tmp/ctest.log" | tail -40; echo "ranks-asan: FAILED"; }
exit $status
