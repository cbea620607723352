#!/usr/bin/env bash
# Set up, build and run the whole test suite (README command 2; .ci/run calls this).
# Tests whose third-party fixture is missing ($LWQ_FIXTURES, then ../shared/fixtures) are skipped,
# not failed; the last lines list every skipped test with its reason, then the count.
#
# The suite certifies one tree: a build in this tree while it runs (an edit rebuilt, a link of lwq
# or of a test) makes tests fail for no fault of the code, e.g. `sh: lwq: Permission denied`,
# exit 126, while the linker writes the binary without its execute bit, or pass on other code than
# was built.  So the tracked sources and the binaries ctest runs are checked not to have changed,
# and the run fails naming what did.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
tree_state() { # HEAD and the tracked files' changes; empty outside a git checkout
    git rev-parse -q HEAD 2>/dev/null && git diff HEAD 2>/dev/null | sha256sum
}
tree0=$(tree_state || true)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
cd build
stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT
rc=0
ctest --output-on-failure -j"$(nproc)" || rc=$?
relinked=$(find . -maxdepth 1 -type f -newer "$stamp" \( -name lwq -o -name 'test_*' -o -name '*.so' \) \
    -printf '%f ' 2>/dev/null || true)
if [ -n "$relinked" ]; then
    echo "test.sh: rebuilt while the suite ran (another build in this tree?): $relinked-- the results are not this build's"
    rc=1
fi
if [ "$( (cd .. && tree_state) || true)" != "$tree0" ]; then
    echo "test.sh: the tracked sources or HEAD changed while the suite ran: the results are not this commit's"
    rc=1
fi
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
