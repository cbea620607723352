#!/usr/bin/env bash
# perf/bench-io.sh — lwq's io_uring read path against fio on the same file, in the same run.
#
#   perf/bench-io.sh [FILE]        (env: LWQ_BIN=build/lwq SIZE_GIB=4 REPEAT=3 QD=32 BLOCK_MIB=1)
#
# Creates FILE (default /tmp/lwq-bench-io.bin, SIZE_GIB GiB of random bytes) if it is missing or
# has another size, then REPEAT times, alternating:
#   fio --ioengine=io_uring --direct=1 --bs=1M --iodepth=32 --rw=read        (the reference)
#   the same fio with --fixedbufs=1 --registerfiles=1                        (stricter reference)
#   lwq bench-io FILE --qd 32 --block 1 --mode all --json                     (idle machine)
#   lwq bench-io FILE --qd 32 --block 1 --mode all --json --busy-core         (a compute thread
#                                                                              keeps a core busy)
# and prints a markdown table of the medians with the ratios to fio (targets: io_uring path
# >= 90% of fio idle, >= 85% with the busy core).  Installs fio with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=${1:-/tmp/lwq-bench-io.bin}
LWQ=${LWQ_BIN:-build/lwq}
SIZE_GIB=${SIZE_GIB:-4}
REPEAT=${REPEAT:-3}
QD=${QD:-32}
BLOCK_MIB=${BLOCK_MIB:-1}
SIZE=$((SIZE_GIB * 1024 * 1024 * 1024))

if ! command -v fio >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq fio >/dev/null
fi
[ -x "$LWQ" ] || { echo "bench-io.sh: $LWQ not built (cmake --build build)" >&2; exit 2; }

if [ ! -f "$FILE" ] || [ "$(stat -c %s "$FILE")" != "$SIZE" ]; then
  echo "creating $FILE ($SIZE_GIB GiB)..." >&2
  head -c "$SIZE" /dev/urandom > "$FILE"
  sync "$FILE"
fi

OUT=$(mktemp -d /tmp/lwq-bench-io-out.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
drop() {  # cold cache for the buffered modes (O_DIRECT bypasses it anyway)
  if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
}
for i in $(seq 1 "$REPEAT"); do
  drop
  fio --name=seqread --filename="$FILE" --ioengine=io_uring --direct=1 --bs=1M \
      --iodepth="$QD" --rw=read --size="$SIZE" --numjobs=1 --output-format=json \
      > "$OUT/fio.$i.json"
  drop  # fio with registered buffers and files, like lwq's default path: a stricter reference
  fio --name=seqread --filename="$FILE" --ioengine=io_uring --direct=1 --bs=1M \
      --iodepth="$QD" --rw=read --size="$SIZE" --numjobs=1 --fixedbufs=1 --registerfiles=1 \
      --output-format=json > "$OUT/fiofix.$i.json"
  drop
  "$LWQ" bench-io "$FILE" --qd "$QD" --block "$BLOCK_MIB" --mode all --json > "$OUT/lwq.$i.json"
  drop
  "$LWQ" bench-io "$FILE" --qd "$QD" --block "$BLOCK_MIB" --mode all --json --busy-core \
      > "$OUT/busy.$i.json"
done

python3 - "$OUT" "$REPEAT" "$FILE" <<'PY'
import json, statistics, sys
out, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def fio_runs(kind):
    return [json.load(open(f"{out}/{kind}.{i}.json"))["jobs"][0]["read"]["bw_bytes"] / 1e9
            for i in range(1, n + 1)]
fio, fiofix = fio_runs("fio"), fio_runs("fiofix")
def load(kind):
    runs = {}
    for i in range(1, n + 1):
        for line in open(f"{out}/{kind}.{i}.json"):
            r = json.loads(line)
            runs.setdefault(r["mode"], []).append(r["gbps"])
    return runs
idle, busy = load("lwq"), load("busy")
f = statistics.median(fio)
print(f"file: {path}, {n} runs each, medians (all runs in brackets)\n")
ff = statistics.median(fiofix)
lst = lambda v: ", ".join(f"{x:.2f}" for x in v)
print("| path | idle GB/s | vs fio | vs fio fixedbufs | busy core GB/s | vs fio | vs fio fixedbufs |")
print("|---|---|---|---|---|---|---|")
print(f"| fio io_uring direct bs=1M qd=32 | {f:.3f} [{lst(fio)}] | 100% | {100*f/ff:.0f}% | | | |")
print(f"| fio ... --fixedbufs --registerfiles | {ff:.3f} [{lst(fiofix)}] | {100*ff/f:.0f}% | 100% | | | |")
for mode in idle:
    mi, mb = statistics.median(idle[mode]), statistics.median(busy.get(mode, [0]))
    print(f"| lwq {mode} | {mi:.3f} [{lst(idle[mode])}] | {100*mi/f:.0f}% | {100*mi/ff:.0f}% "
          f"| {mb:.3f} [{lst(busy.get(mode, []))}] | {100*mb/f:.0f}% | {100*mb/ff:.0f}% |")
PY
