#!/usr/bin/env bash
# perf/bench_e2e.sh — end to end at scale: is lwq disk-bound, and is its memory set by one layer?
#
#   perf/bench_e2e.sh SIZE_GB
#
# In one run, on one synthetic BF16 qwen3_moe-style checkpoint of ~SIZE_GB decimal GB (hidden
# 2048, 32 query / 4 KV heads of 128, EXPERTS routed experts of 768, top-8, vocab 151936: the
# proportions of Qwen3-30B-A3B, the layer count set by SIZE_GB), with the page cache dropped
# before each step (echo 3 > /proc/sys/vm/drop_caches, when writable; every read path below also
# uses O_DIRECT, so the cache cannot help even without that):
#   1. lwq mkmodel                            (reused when DIR/model holds the same arguments)
#   2. fio on the same shard files            (io_uring, O_DIRECT, QD 32, bs 1M, one file after
#                                              another; the reference disk throughput)
#   3. lwq quantize --dry-read                (every layer through the real I/O path, no compute)
#   4. lwq quantize -o OUT --log-json         (the real run)
# and prints a markdown report: wall, bytes read and GB/s, fio GB/s, read-only time, compute time
# (sum over layers of forward_s + quantize_s + write_s from the JSON log), overlap efficiency =
# wall / max(read-only, compute) (and, since the writer thread runs beside the engine, also
# wall / max(read-only, forward + quantize, write), and the same for the depth loop alone, from
# the summary's loop_s), peak RSS (VmHWM, the log's summary) against 2 x largest layer +
# boundary activations + 512 MiB, RSS after every layer (flat: last within 5% of layer 2), output
# bytes; each target is marked met or MISSED.  A one-line JSON summary goes to $JSON_OUT when set
# (perf/gpu-check.sh reads it).
#
# Environment (defaults in brackets):
#   LWQ_BIN [build/lwq]  DIR [/tmp/lwq-e2e]  QFORMAT [nvfp4_experts-fp8_attn]
#   CALIB_SIZE [4]  CALIB_SEQ [32]  (small, so the forward is a small part of the compute)
#   EXPERTS [64]  HIDDEN [2048]  MOE_INTER [768]  TOPK [8]  VOCAB [151936]  SHARD_MIB [2048]
#   DEVICE [auto]  THREADS [all cores]  PREFETCH [2]  KEEP [0: delete model and output at the end]
#   SKIP_FIO [0]  JSON_OUT []  STEP_TIMEOUT [0: none; seconds allowed for each lwq/fio step]
#   EXTRA_ARGS []  (more lwq quantize options, e.g. --max-gpu-memory-gb 60)
# Installs fio with apt-get when missing (skips the fio step if that fails).  Exit status 0 when
# every step ran (targets missed are reported, not fatal), 2 on a usage or set-up error, else the
# status of the failing step.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "bench_e2e.sh: $*" >&2; exit 2; }
[ $# -eq 1 ] || die "usage: perf/bench_e2e.sh SIZE_GB   (e.g. 4 or 30; see the header for the environment)"
SIZE_GB=$1
[[ "$SIZE_GB" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "SIZE_GB must be a positive number of GB, got '$SIZE_GB'"

LWQ=${LWQ_BIN:-build/lwq}
DIR=${DIR:-/tmp/lwq-e2e}
QFORMAT=${QFORMAT:-nvfp4_experts-fp8_attn}
CALIB_SIZE=${CALIB_SIZE:-4}
CALIB_SEQ=${CALIB_SEQ:-32}
EXPERTS=${EXPERTS:-64}
HIDDEN=${HIDDEN:-2048}
MOE_INTER=${MOE_INTER:-768}
TOPK=${TOPK:-8}
VOCAB=${VOCAB:-151936}
SHARD_MIB=${SHARD_MIB:-2048}
DEVICE=${DEVICE:-auto}
PREFETCH=${PREFETCH:-2}
KEEP=${KEEP:-0}
SKIP_FIO=${SKIP_FIO:-0}
JSON_OUT=${JSON_OUT:-}
STEP_TIMEOUT=${STEP_TIMEOUT:-0}
EXTRA_ARGS=${EXTRA_ARGS:-}
HEADS=32 KV_HEADS=4 HEAD_DIM=128

[ -x "$LWQ" ] || die "$LWQ is not built (cmake -S . -B build && cmake --build build -j)"
command -v python3 >/dev/null || die "python3 is needed for the report"

# ---- the model's shape: bytes per decoder layer and of the tail, then the layer count ----------
read -r LAYER_BYTES TAIL_BYTES LAYERS < <(python3 - "$SIZE_GB" "$HIDDEN" "$HEADS" "$KV_HEADS" "$HEAD_DIM" \
    "$EXPERTS" "$MOE_INTER" "$VOCAB" <<'PY'
import sys
size, h, nh, nkv, hd, E, mi, V = float(sys.argv[1]), *map(int, sys.argv[2:])
attn = h * nh * hd * 2 + h * nkv * hd * 2 + 2 * hd          # q, o; k, v; q_norm, k_norm
layer = 2 * (attn + 2 * h + E * h + E * 3 * h * mi)          # + 2 norms, router, experts (BF16)
tail = 2 * (2 * V * h + h)                                   # embed_tokens, lm_head, final norm
print(layer, tail, max(3, round((size * 1e9 - tail) / layer)))
PY
)
MODEL=$DIR/model
OUT=$DIR/out
LOG=$DIR/quantize.jsonl
DRYLOG=$DIR/dry.jsonl
mkdir -p "$DIR"
NEED=$(( (LAYER_BYTES * LAYERS + TAIL_BYTES) * 14 / 10 + (1 << 30) ))   # model + output + margin
MK_ARGS="--arch qwen3_moe --hidden $HIDDEN --layers $LAYERS --heads $HEADS --kv-heads $KV_HEADS \
--head-dim $HEAD_DIM --experts $EXPERTS --top-k $TOPK --moe-intermediate $MOE_INTER --vocab $VOCAB \
--dtype bf16 --shard-size $SHARD_MIB"
HAVE=0
if [ -f "$MODEL/.bench_e2e_args" ] && [ "$(cat "$MODEL/.bench_e2e_args")" = "$MK_ARGS" ]; then
    HAVE=1
    NEED=$(( NEED - LAYER_BYTES * LAYERS - TAIL_BYTES ))
fi
rm -rf "$OUT" "$OUT.layerwise_resume" "$LOG" "$DRYLOG"
AVAIL=$(df --output=avail -B1 "$DIR" | tail -1)
[ "$AVAIL" -gt "$NEED" ] || die "$DIR has $((AVAIL >> 30)) GiB free; this run needs ~$((NEED >> 30)) GiB (model + output)"

cleanup() {
    if [ "$KEEP" != 1 ]; then rm -rf "$MODEL" "$OUT" "$OUT.layerwise_resume"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
drop() {  # a cold page cache for every step
    sync
    if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; fi
}
CAN_DROP=no; [ -w /proc/sys/vm/drop_caches ] && CAN_DROP=yes
step() {  # step NAME CMD...: run with the optional per-step timeout, name the step on failure
    local name=$1; shift
    local rc=0
    if [ "$STEP_TIMEOUT" != 0 ]; then timeout --signal=KILL "$STEP_TIMEOUT" "$@" || rc=$?; else "$@" || rc=$?; fi
    if [ $rc -ne 0 ]; then
        [ $rc -eq 137 ] && [ "$STEP_TIMEOUT" != 0 ] && echo "bench_e2e.sh: step '$name' ran past STEP_TIMEOUT=${STEP_TIMEOUT}s" >&2
        echo "bench_e2e.sh: step '$name' failed (exit $rc)" >&2
        exit $rc
    fi
}

echo "bench_e2e: $LAYERS layers x $(awk -v b="$LAYER_BYTES" 'BEGIN{printf "%.3f", b/1e9}') GB + tail \
$(awk -v b="$TAIL_BYTES" 'BEGIN{printf "%.3f", b/1e9}') GB; $QFORMAT; calib $CALIB_SIZE x $CALIB_SEQ; device $DEVICE; \
drop_caches: $CAN_DROP; dir $DIR" >&2

# ---- 1. the model ------------------------------------------------------------------------------
MK_S=reused
if [ $HAVE = 0 ]; then
    rm -rf "$MODEL"
    t0=$(now)
    # shellcheck disable=SC2086  # MK_ARGS is a list of options
    step mkmodel "$LWQ" mkmodel "$MODEL" $MK_ARGS --quiet
    sync -f "$MODEL/config.json"
    MK_S=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.1f", b - a}')
    echo "$MK_ARGS" > "$MODEL/.bench_e2e_args"
fi
SRC_BYTES=$(du -sb "$MODEL" | cut -f1)
mapfile -t SHARDS < <(ls "$MODEL"/*.safetensors)

# ---- 2. fio on the same files ------------------------------------------------------------------
FIO_JSON=$DIR/fio.json
rm -f "$FIO_JSON"
if [ "$SKIP_FIO" != 1 ] && ! command -v fio >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive timeout 120 $SUDO apt-get install -y -qq fio >/dev/null 2>&1 ||
        echo "bench_e2e.sh: fio is missing and apt-get could not install it; no fio reference" >&2
fi
if [ "$SKIP_FIO" != 1 ] && command -v fio >/dev/null; then
    JOB=$DIR/read.fio
    {
        printf '[global]\nioengine=io_uring\ndirect=1\nbs=1M\niodepth=32\nrw=read\nnumjobs=1\nstonewall\n'
        for i in "${!SHARDS[@]}"; do printf '[f%d]\nfilename=%s\n' "$i" "${SHARDS[$i]}"; done
    } > "$JOB"
    drop
    step fio fio --output-format=json --output="$FIO_JSON" "$JOB"
fi

# ---- 3. read only ------------------------------------------------------------------------------
QARGS=(--qformat "$QFORMAT" --calib-size "$CALIB_SIZE" --calib-seq "$CALIB_SEQ" --device "$DEVICE"
       --prefetch "$PREFETCH")
[ -n "${THREADS:-}" ] && QARGS+=(--threads "$THREADS")
# shellcheck disable=SC2206  # EXTRA_ARGS is a list of options
[ -n "$EXTRA_ARGS" ] && QARGS+=($EXTRA_ARGS)
drop
t0=$(now)
step dry-read "$LWQ" quantize "$MODEL" --dry-read --quiet --log-json "$DRYLOG" "${QARGS[@]}"
DRY_S=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.3f", b - a}')

# ---- 4. the run --------------------------------------------------------------------------------
drop
t0=$(now)
step quantize "$LWQ" quantize "$MODEL" -o "$OUT" --log-json "$LOG" "${QARGS[@]}" 2> "$DIR/quantize.err"
WALL_S=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.3f", b - a}')
OUT_BYTES=$(du -sb "$OUT" | cut -f1)
grep '^plan:' "$DIR/quantize.err" >&2 || true

python3 - "$LOG" "$DRYLOG" "$FIO_JSON" "$SIZE_GB" "$SRC_BYTES" "$WALL_S" "$DRY_S" "$OUT_BYTES" "$MK_S" \
    "$DIR/quantize.err" "$QFORMAT" "$LAYERS" "$EXPERTS" "$CAN_DROP" "$JSON_OUT" <<'PY'
import json, os, re, sys
(log, drylog, fio_json, size_gb, src_bytes, wall, dry, out_bytes, mk_s, errf, qformat, nlayers, experts,
 can_drop, json_out) = sys.argv[1:]
src_bytes, out_bytes, wall, dry = int(src_bytes), int(out_bytes), float(wall), float(dry)
layers, summ = [], None
for line in open(log):
    r = json.loads(line)
    if r.get("event") == "layer":
        layers.append(r)
    elif r.get("event") == "summary":
        summ = r
dsum = [json.loads(l) for l in open(drylog) if '"summary"' in l][-1]
layers.sort(key=lambda r: r["layer"])
fio_gbps, fio_bytes = None, 0
if os.path.exists(fio_json) and os.path.getsize(fio_json):
    jobs = json.load(open(fio_json))["jobs"]
    fio_bytes = sum(j["read"]["io_bytes"] for j in jobs)
    fio_s = sum(j["read"]["runtime"] for j in jobs) / 1e3
    fio_gbps = fio_bytes / 1e9 / fio_s
plan = open(errf).read()
m = re.search(r"boundaries ([0-9.]+) GB", plan)
boundary = float(m.group(1)) * 1e9 if m else 0.0
largest = max(r["bytes_read"] for r in layers)
compute = sum(r["forward_s"] + r["quantize_s"] + r["write_s"] for r in layers)
fwd = sum(r["forward_s"] for r in layers)
qnt = sum(r["quantize_s"] for r in layers)
wrt = sum(r["write_s"] for r in layers)
waited = sum(r["read_wait_s"] for r in layers)
read_bytes = summ["bytes_read"]
dry_gbps = dsum["bytes_read"] / 1e9 / dry
# the depth loop alone: without process start, calibration set-up and the ring's allocation
# (the kernel zeroes 2 x largest layer of fresh pages first: a fixed cost, ~1 s per GB here)
dry_loop = dsum.get("loop_s", 0)
dry_loop_gbps = dsum["bytes_read"] / 1e9 / dry_loop if dry_loop > 0 else None
overlap = wall / max(dry, compute)
# write_s runs on the writer thread beside the engine: the pipeline's own bound is the slowest
# stage, max(read-only, forward + quantize, write), over the wall and over the depth loop alone
stage = max(dry, fwd + qnt, wrt)
overlap_stage = wall / stage
loop_stage = summ.get("loop_s", 0) / max(dsum.get("loop_s", 0), fwd + qnt, wrt)
peak = summ["peak_rss_bytes"]
rss_target = 2 * largest + boundary + 512 * 2**20
rss = [r["rss_bytes"] for r in layers]
flat = abs(rss[-1] - rss[1]) / rss[1] if len(rss) > 1 else 0.0
gpu = [r.get("gpu_bytes", 0) for r in layers]
gpu_flat = abs(gpu[-1] - gpu[1]) / gpu[1] if len(gpu) > 1 and gpu[1] else None
G = 1e9
mk_label = mk_s if mk_s == "reused" else mk_s + " s"
def ok(c): return "met" if c else "MISSED"
print(f"\nmodel: {nlayers} layers, {experts} experts, {src_bytes/G:.2f} GB on disk (mkmodel: {mk_label}); "
      f"{qformat}; backend {summ['backend']}; page cache dropped before each step: {can_drop}\n")
print("| quantity | value | target |")
print("|---|---|---|")
ls, ss = summ.get("loop_s", 0), summ.get("setup_s", 0)
print(f"| wall, `lwq quantize` | {wall:.1f} s = set-up {ss:.1f} (embedding, ring) + depth loop {ls:.1f} "
      f"+ the rest {wall - ss - ls:.1f} (tail copy, index, configs, process exit) | |")
print(f"| bytes read (decoder layers) | {read_bytes/G:.2f} GB, {read_bytes/G/wall:.3f} GB/s over the wall | |")
if fio_gbps:
    print(f"| fio, same shard files (io_uring, O_DIRECT, QD32, 1M) | {fio_bytes/G:.2f} GB at {fio_gbps:.3f} GB/s | |")
dr = f"{100*dry_gbps/fio_gbps:.0f}% of fio: {ok(dry_gbps >= 0.9*fio_gbps)}" if fio_gbps else "no fio"
print(f"| read-only (`--dry-read`), whole process | {dry:.1f} s, {dry_gbps:.3f} GB/s | >= 90% of fio: {dr} |")
if dry_loop_gbps:
    dl = f"{100*dry_loop_gbps/fio_gbps:.0f}% of fio: {ok(dry_loop_gbps >= 0.9*fio_gbps)}" if fio_gbps else ""
    print(f"| read-only, depth loop alone (set-up {dry - dry_loop:.1f} s excluded) | {dry_loop:.1f} s, "
          f"{dry_loop_gbps:.3f} GB/s | {dl} |")
print(f"| compute (forward + quantize + write) | {compute:.1f} s = {fwd:.1f} + {qnt:.1f} + {wrt:.1f} | |")
print(f"| engine waited for reads | {waited:.1f} s | |")
print(f"| overlap efficiency wall / max(read-only, compute) | {overlap:.3f} | <= 1.15: {ok(overlap <= 1.15)} |")
print(f"| ... wall / max(read-only, forward + quantize, write) | {overlap_stage:.3f} | <= 1.15: {ok(overlap_stage <= 1.15)} |")
print(f"| ... depth loop / max(its read-only loop, forward + quantize, write) | {loop_stage:.3f} | |")
print(f"| peak RSS (VmHWM) | {peak/G:.3f} GB | <= 2 x {largest/G:.3f} + {boundary/G:.3f} + 0.537 = "
      f"{rss_target/G:.3f} GB: {ok(peak <= rss_target)} |")
if len(rss) > 1:
    print(f"| RSS layer 2 -> last | {rss[1]/G:.3f} -> {rss[-1]/G:.3f} GB ({100*flat:.1f}%) | within 5%: {ok(flat <= 0.05)} |")
if gpu_flat is not None:
    print(f"| peak GPU memory so far, layer 2 -> last | {gpu[1]/G:.3f} -> {gpu[-1]/G:.3f} GB ({100*gpu_flat:.1f}%) | "
          f"within 5%: {ok(gpu_flat <= 0.05)} |")
print(f"| output | {out_bytes/G:.3f} GB ({100*out_bytes/src_bytes:.1f}% of the source) | |")
print("\nRSS after each layer (GB): " + " ".join(f"{x/G:.2f}" for x in rss))
if any(gpu):
    print("peak GPU memory so far after each layer (GB): " + " ".join(f"{x/G:.2f}" for x in gpu))
if json_out:
    with open(json_out, "w") as f:
        json.dump({"layers": int(nlayers), "source_bytes": src_bytes, "wall_s": wall, "bytes_read": read_bytes,
                   "fio_gbps": fio_gbps, "dry_read_s": dry, "dry_read_gbps": dry_gbps,
                   "dry_loop_gbps": dry_loop_gbps, "loop_s": summ.get("loop_s"), "compute_s": compute,
                   "forward_s": fwd, "quantize_s": qnt, "write_s": wrt, "read_wait_s": waited,
                   "overlap": overlap, "overlap_stage": overlap_stage, "loop_overlap_stage": loop_stage, "peak_rss_bytes": peak, "rss_target_bytes": rss_target,
                   "peak_gpu_bytes": summ.get("peak_gpu_bytes", 0), "gpu_bytes": gpu, "rss_bytes": rss,
                   "output_bytes": out_bytes, "backend": summ["backend"]}, f)
        f.write("\n")
PY
