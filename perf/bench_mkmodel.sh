#!/usr/bin/env bash
# perf/bench_mkmodel.sh — write speed of `lwq mkmodel` against `dd` to the same disk, same run.
#
# Both write ~2 GB and are timed until the data is on disk (dd conv=fsync; mkmodel then `sync -f`
# on the output), so the page cache does not flatter either.  Also reports mkmodel's peak RSS
# (streaming: it must stay near its 8 MiB buffer whatever the model size).
# usage: perf/bench_mkmodel.sh [LWQ_BIN] [SCRATCH_DIR]
set -euo pipefail
BIN=${1:-build/lwq}
DIR=${2:-/tmp/lwq-bench-mkmodel}
rm -rf "$DIR" && mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT

now() { date +%s.%N; }
args() {
    echo mkmodel "$1" --arch qwen3_moe --hidden 2048 --layers 10 --heads 16 --kv-heads 4 \
        --experts 16 --top-k 2 --moe-intermediate 768 --vocab 32000 --dtype bf16 --shard-size 512 --quiet
}
THR=${LWQ_THREADS:-$(nproc)}
REPS=${REPS:-3}
# The disk is shared with other work: alternate dd and mkmodel and report every run.
for r in $(seq 1 "$REPS"); do
    t0=$(now)
    dd if=/dev/zero of="$DIR/dd.bin" bs=8M count=256 conv=fsync status=none
    t1=$(now)
    rm -f "$DIR/dd.bin"
    rm -rf "$DIR/m"
    t2=$(now)
    /usr/bin/time -f "%M %U %S" -o "$DIR/rss.txt" "$BIN" $(args "$DIR/m")
    sync -f "$DIR/m/config.json"
    t3=$(now)
    mk_bytes=$(du -sb "$DIR/m" | cut -f1)
    awk -v db=$((8 * 1024 * 1024 * 256)) -v mb="$mk_bytes" -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
        -v tm="$(cat "$DIR/rss.txt")" -v thr="$THR" -v r="$r" 'BEGIN {
        split(tm, f, " "); rss = f[1]; cpu = f[2] + f[3];
        dd = db / (b - a) / 1e6; mk = mb / (d - c) / 1e6;
        printf "run %d: dd %.2f GB %.0f MB/s (conv=fsync) | mkmodel %.2f GB %.0f MB/s incl. sync (%.0f%% of dd), peak RSS %d KiB, CPU %.1f s, %d threads\n",
               r, db / 1e9, dd, mb / 1e9, mk, 100 * mk / dd, rss, cpu, thr;
    }'
done
rm -rf "$DIR/m"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# Generation alone (no disk): the same model into tmpfs, when there is room.
if [ -d /dev/shm ] && [ "$(df --output=avail -B1 /dev/shm | tail -1)" -gt 3000000000 ]; then
    S=/dev/shm/lwq-bench-mkmodel
    rm -rf "$S"
    t0=$(now)
    "$BIN" $(args "$S/m")
    t1=$(now)
    mb=$(du -sb "$S/m" | cut -f1)
    rm -rf "$S"
    awk -v mb="$mb" -v a="$t0" -v b="$t1" -v thr="$THR" 'BEGIN {
        printf "tmpfs:  mkmodel %.2f GB in %.2f s: %.0f MB/s (generation + copy into page cache), %d threads\n",
               mb / 1e9, b - a, mb / (b - a) / 1e6, thr; }'
fi
