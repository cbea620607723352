#!/usr/bin/env bash
# scripts/gpu-check-dry.sh — perf/gpu-check.sh as a bare GPU machine meets it, without the GPU
# (ctest gpu_check_dry): the carried .debs only (FORCE_PREFIX=1: pkg-config sees the prefix and
# nothing of this system's packages), a fresh configure and build of the lease's targets, every
# row in dry mode (--device cpu).  Then checks what the lease depends on: the script passed, the
# prefix alone was used, the log names each step with its cap in the planned order, and the
# table's rows come in that order.
#
#   scripts/gpu-check-dry.sh BUILD_DIR      (env: DEBS [BUILD_DIR/gpu-debs], reused when present)
#
# Exit 0 when all hold, 1 when one does not, 77 (ctest: skipped) when the .debs cannot be fetched
# here (perf/gpu-debs.sh needs apt-get and a package mirror).
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:?usage: gpu-check-dry.sh BUILD_DIR}" && pwd)
DEBS=${DEBS:-$B/gpu-debs}
W=$B/gpu-check-dry
fail() { echo "gpu-check-dry: $*" >&2; exit 1; }

if ! ls "$DEBS"/*.deb >/dev/null 2>&1; then
    if ! DEST=$DEBS perf/gpu-debs.sh > "$B/gpu-debs.log" 2>&1; then
        # the package lists may be missing (a fresh container): refresh them once, as root only
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq >> "$B/gpu-debs.log" 2>&1 &&
            DEST=$DEBS perf/gpu-debs.sh >> "$B/gpu-debs.log" 2>&1; then
            :
        else
            echo "skipped: perf/gpu-debs.sh could not fetch the .debs here ($(tail -1 "$B/gpu-debs.log"))"
            exit 77
        fi
    fi
fi
rm -rf "$W"
mkdir -p "$W"
rc=0
NO_GPU=1 FORCE_PREFIX=1 DEBS=$DEBS WORK=$W BUILD=$W/build OUT= BUDGET_S=${BUDGET_S:-900} \
    perf/gpu-check.sh > "$W/gpu-check.log" 2>&1 || rc=$?
tail -40 "$W/gpu-check.log"
[ $rc -eq 0 ] || fail "perf/gpu-check.sh exited $rc (log $W/gpu-check.log)"
grep -q "alone (FORCE_PREFIX=1)" "$W/report.md" || fail "the deps row does not say the carried prefix alone was used"
grep -q "^| build | ok | Release" "$W/report.md" || fail "the build step did not configure and build (it reused a tree?)"

# the planned order, as the script prints it first
plan=$(grep -m1 "steps in order (cap in s):" "$W/gpu-check.log" | sed 's/.*(cap in s): //; s/; budget.*//')
[ -n "$plan" ] || fail "the log does not list the steps and their caps"
names=$(echo "$plan" | tr ',' '\n' | awk '{print $1}')
n=$(echo "$names" | grep -c .)
# each step is named, in that order, with its cap, when it starts
started=$(grep -o "step [0-9]*/$n [a-z0-9-]*: cap [0-9]* s" "$W/gpu-check.log" | awk '{print $3}' | tr -d ':')
[ "$started" = "$names" ] || fail "steps started in another order than planned:
planned: $(echo $names)
started: $(echo $started)"
# the table's rows in the planned order (mkmodel appears only when it fails)
rows=$(sed -n 's/^| \([a-z0-9-]*\) | .*/\1/p' "$W/report.md" | grep -v '^step$')
[ "$rows" = "$names" ] || fail "the table's rows are not in the planned order:
planned: $(echo $names)
rows:    $(echo $rows)"
for first in identity-max plan-gpu stream gptq; do
    # after probe, deps and build: identity (4 rows), plan, stream, GPTQ
    # no pipe into grep -q: under pipefail its early exit can kill head with SIGPIPE (status 141),
    # which failed this check now and then on a loaded machine
    grep -qx "$first" <<<"$(head -10 <<<"$names")" || fail "$first is not among the first rows"
done
[ "$(echo "$names" | tail -1)" = memcheck ] || fail "memcheck is not the last step"
echo "gpu-check-dry: ok: $n steps in order, the carried prefix alone, configure + build + every row passed"
