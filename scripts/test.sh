#!/usr/bin/env bash
# Set up, build and run the whole test suite (README command 2; .ci/run calls this).
# Tests whose third-party fixture is missing ($LWQ_FIXTURES, then ../shared/fixtures) are skipped,
# not failed; the last lines list every skipped test with its reason, then the count.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
cd build
rc=0
ctest --output-on-failure -j"$(nproc)" || rc=$?
# "[SKIP] suite::test: reason" lines (tests/report_hooks.c) from every program's output, except
# the *_without_fixtures entries, which skip on purpose to check that skipping works.
skips=$(awk '/^[0-9]+\/[0-9]+ Testing: / { t = $3 } /^\[SKIP\] / && t !~ /_without_fixtures$/ { print }' \
        Testing/Temporary/LastTest.log | sort -u)
n=0 nf=0
if [ -n "$skips" ]; then
    printf '%s\n' "$skips"
    n=$(printf '%s\n' "$skips" | wc -l)
    nf=$(printf '%s\n' "$skips" | grep -c ': fixture .* not found' || true)
fi
echo "test.sh: $n test(s) skipped: $nf for a missing fixture, $((n - nf)) for another reason (no GPU, ...)"
exit "$rc"
