#!/usr/bin/env bash
# perf/gpu-check.sh — everything lwq needs a GPU to show, in one run that ends within 8 minutes on
# an H200 (one lent device session): build with CUDA, run every test (the CPU-vs-CUDA op and
# quantizer parity tests run instead of skipping), the GPU quantizer and host-to-device benchmarks,
# the I/O benchmark, and an end-to-end quantization of a ~20 GB synthetic model on --device cuda;
# then one table: read GB/s (fio, lwq bench-io, --dry-read, end to end), H2D GB/s, the GPU's share
# of the engine's time, peak GPU memory (cudaMemGetInfo via the JSON log), wall.
#
#   perf/gpu-check.sh            (env: BUDGET_S [450] E2E_GB [20] WORK [/tmp/lwq-gpu-check]
#                                  BUILD [build-gpu] QFORMAT [nvfp4_experts-fp8_attn]
#                                  CTEST_RESERVE_S [100] DEBS_DIR [] SKIP_CTEST [0]
#                                  NO_GPU [0]: 1 = test this script on a machine without a GPU:
#                                  the probe and end-to-end runs use --device cpu, and the GPU
#                                  tests' skips are reported, not failures)
#
# Order: machine and dependencies; build; the GPU parity tests (test_*cuda*, which must not
# skip); bench_quant_cuda and bench_h2d; a 2-layer probe model (mkmodel write speed, lwq bench-io
# and fio on its largest shard, one quantize on cuda: compute speed); the end-to-end run sized
# from those rates; the whole ctest suite with the time left (CTEST_RESERVE_S is kept for it).
#
# Needs: an NVIDIA GPU with its driver, the CUDA toolkit (nvcc on PATH or in /usr/local/cuda/bin),
# python3, and lwq's Debian build dependencies (scripts/setup.sh installs them when run as root
# with a package mirror; on a machine without network, DEBS_DIR=dir of .deb files is unpacked
# into / first).  Time: every step has a timeout taken from what is left of BUDGET_S, and the
# end-to-end model shrinks (never below 2 GB) when the measured disk and compute rates say 20 GB
# would not fit; the table says so.  The report is printed and written to $WORK/report.md.
# Exit status: 0 all ran and passed, 1 a test or check failed (the table still prints),
# 2 set-up error (no GPU, no nvcc, missing dependencies, build failure).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
BUDGET_S=${BUDGET_S:-450}
E2E_GB=${E2E_GB:-20}
WORK=${WORK:-/tmp/lwq-gpu-check}
BUILD=${BUILD:-build-gpu}
QFORMAT=${QFORMAT:-nvfp4_experts-fp8_attn}
SKIP_CTEST=${SKIP_CTEST:-0}
NO_GPU=${NO_GPU:-0}
DEVICE=cuda; [ "$NO_GPU" = 1 ] && DEVICE=cpu
CTEST_RESERVE_S=${CTEST_RESERVE_S:-100}
FAILED=0

elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET_S - $(date +%s) + START )); }
log() { echo "[gpu-check +$(elapsed)s] $*" >&2; }
die() { echo "gpu-check.sh: $*" >&2; exit 2; }
fail() { echo "gpu-check.sh: FAILED: $*" >&2; FAILED=1; }
# run_for SECONDS CMD...: the command under a hard timeout; its exit status (124 = timed out)
run_for() {
    local s=$1; shift
    [ "$s" -lt 5 ] && { echo "gpu-check.sh: no time left for: $*" >&2; return 124; }
    timeout --kill-after=10 "$s" "$@"
}
declare -A R   # report values

mkdir -p "$WORK" || die "cannot create $WORK"

# ---- 0. the machine ------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
    R[gpu]=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)
fi
[ -n "${R[gpu]:-}" ] || ls /dev/nvidia0 >/dev/null 2>&1 || [ "$NO_GPU" = 1 ] ||
    die "no NVIDIA GPU (nvidia-smi finds none, no /dev/nvidia0); NO_GPU=1 tests this script without one"
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -n "$NVCC" ] || die "nvcc not found (PATH, /usr/local/cuda/bin): the CUDA toolkit is needed"
export PATH="$(dirname "$NVCC"):$PATH"
command -v python3 >/dev/null || die "python3 is needed for the report"
R[machine]="$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p')"
log "GPU: ${R[gpu]:-unknown}; ${R[machine]}"

# ---- 1. dependencies -----------------------------------------------------------------------------
if [ -n "${DEBS_DIR:-}" ]; then
    log "unpacking the .deb files of $DEBS_DIR into /"
    for f in "$DEBS_DIR"/*.deb; do dpkg -x "$f" / || die "dpkg -x $f failed"; done
    ldconfig || true
fi
missing_deps() {
    local m=()
    command -v cmake >/dev/null || m+=(cmake)
    command -v pkg-config >/dev/null || m+=(pkg-config)
    for p in liburing libcjson libpcre2-8 criterion; do
        pkg-config --exists "$p" 2>/dev/null || m+=("$p")
    done
    [ -f /usr/include/numa.h ] || m+=(libnuma-dev)
    local f blas=0
    for f in /usr/include/cblas.h /usr/include/*/openblas*/cblas.h /usr/include/openblas/cblas.h; do
        [ -f "$f" ] && blas=1
    done
    [ $blas = 1 ] || m+=(libopenblas-dev)
    echo "${m[*]:-}"
}
M=$(missing_deps)
if [ -n "$M" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        log "missing: $M; running scripts/setup.sh"
        run_for 240 scripts/setup.sh >&2 || die "scripts/setup.sh failed (no package mirror?); missing: $M. Carry the .deb files and set DEBS_DIR"
        M=$(missing_deps)
    fi
    [ -z "$M" ] || die "missing build dependencies: $M (scripts/setup.sh as root, or DEBS_DIR=dir of .deb files)"
fi
# the fixture tests read ../shared/fixtures (CMakeLists.txt); a copy inside the checkout also does
if [ ! -d ../shared/fixtures ] && [ -d shared/fixtures ] && [ ! -e ../shared ]; then
    ln -s "$ROOT/shared" ../shared && log "linked ../shared -> $ROOT/shared for the fixture tests"
fi
[ -d ../shared/fixtures ] || log "warning: ../shared/fixtures is missing; the fixture tests will fail"

# ---- 2. build --------------------------------------------------------------------------------------
t=$(date +%s)
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
[ -f "$BUILD/CMakeCache.txt" ] && GEN=()  # keep the generator of an existing build dir
log "building $BUILD (Release, CUDA sm_90)"
run_for $(( $(left) - 240 > 300 ? 300 : $(left) - 240 )) cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DLWQ_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 > "$WORK/cmake.log" 2>&1 ||
    { tail -20 "$WORK/cmake.log" >&2; die "cmake configure failed ($WORK/cmake.log)"; }
grep -q "CUDA backend ON" "$WORK/cmake.log" || die "cmake did not enable the CUDA backend ($WORK/cmake.log)"
run_for $(( $(left) - 200 > 300 ? 300 : $(left) - 200 )) cmake --build "$BUILD" -j"$(nproc)" > "$WORK/build.log" 2>&1 ||
    { grep -E "error|Error" "$WORK/build.log" | head -20 >&2; die "build failed ($WORK/build.log)"; }
R[build_s]=$(( $(date +%s) - t ))
LWQ=$ROOT/$BUILD/lwq

# ---- 3. tests: the GPU parity tests must run, not skip ---------------------------------------------
t=$(date +%s)
GPU_TESTS=$(cd "$BUILD" && ls test_*cuda* 2>/dev/null | grep -v '\.' || true)
R[gpu_tests]=""
for x in $GPU_TESTS; do
    rc=0
    out=$(LWQ_FIXTURES="$ROOT/../shared/fixtures" run_for 180 "$BUILD/$x" --jobs 1 --verbose 2>&1) || rc=$?
    echo "$out" > "$WORK/$x.log"
    syn=$(echo "$out" | grep "Synthesis" | sed 's/.*Synthesis: //; s/ *| */, /g; s/ *$//' || true)
    skips=$(echo "$out" | grep -c "\[SKIP\]" || true)
    R[gpu_tests]+="$x: ${syn:-no synthesis (exit $rc)}, $skips skipped; "
    [ $rc -eq 0 ] || fail "$x (exit $rc; $WORK/$x.log)"
    [ "$skips" -eq 0 ] || [ "$NO_GPU" = 1 ] || fail "$x skipped $skips test(s) on a GPU machine ($WORK/$x.log)"
done
[ -n "$GPU_TESTS" ] || fail "no test_*cuda* executable in $BUILD"
R[test_s]=$(( $(date +%s) - t ))

# ---- 4. GPU quantizers and host-to-device copies ----------------------------------------------------
if [ -x "$BUILD/bench_quant_cuda" ]; then
    run_for 90 "$BUILD/bench_quant_cuda" > "$WORK/bench_quant_cuda.txt" 2>&1 || fail "bench_quant_cuda ($WORK/bench_quant_cuda.txt)"
    R[quant_max]=$(awk '/^nvfp4 max/ {print $(NF-5)" GB/s"}' "$WORK/bench_quant_cuda.txt")
    R[quant_sweep]=$(awk '/^nvfp4 fp8_scale_sweep/ {print $(NF-5)" GB/s"}' "$WORK/bench_quant_cuda.txt")
fi
run_for 90 "$BUILD/bench_h2d" --json 1024 64 5 > "$WORK/h2d.json" 2> "$WORK/h2d.err" || fail "bench_h2d ($WORK/h2d.err)"

# ---- 5. the disk: a probe model (mkmodel speed), bench-io and fio on its largest shard, and one
#         quantized layer (compute speed); these size the end-to-end run ---------------------------
PROBE=$WORK/probe
rm -rf "$PROBE" "$PROBE-q" "$PROBE-q.layerwise_resume"
E2E_SHAPE=(--arch qwen3_moe --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 64 --top-k 8
           --moe-intermediate 768 --vocab 151936 --dtype bf16)
t=$(date +%s.%N)
run_for 120 "$LWQ" mkmodel "$PROBE" "${E2E_SHAPE[@]}" --layers 2 --quiet || die "mkmodel of the probe failed"
sync -f "$PROBE/config.json"
PROBE_BYTES=$(du -sb "$PROBE" | cut -f1)
R[mk_gbps]=$(awk -v b="$PROBE_BYTES" -v a="$t" -v c="$(date +%s.%N)" 'BEGIN{printf "%.3f", b/1e9/(c-a)}')
BIG=$(ls -S "$PROBE"/*.safetensors | head -1)
sync; if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; fi
run_for 60 "$LWQ" bench-io "$BIG" --qd 32 --block 1 --mode all --json > "$WORK/bench-io.json" 2> "$WORK/bench-io.err" ||
    fail "lwq bench-io ($WORK/bench-io.err)"
if ! command -v fio >/dev/null && [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive run_for 60 apt-get install -y -qq fio >/dev/null 2>&1 || true
fi
if command -v fio >/dev/null; then
    run_for 60 fio --name=seqread --filename="$BIG" --ioengine=io_uring --direct=1 --bs=1M --iodepth=32 --rw=read \
        --numjobs=1 --output-format=json > "$WORK/fio.json" 2>&1 || fail "fio ($WORK/fio.json)"
fi
run_for 120 "$LWQ" quantize "$PROBE" -o "$PROBE-q" --device "$DEVICE" --qformat "$QFORMAT" --calib-size 4 --calib-seq 32 \
    --quiet --log-json "$WORK/probe.jsonl" 2> "$WORK/probe.err" || fail "quantize of the probe on $DEVICE ($WORK/probe.err)"
# -- 5b. expert streaming (issue 16; this step belongs to the `stream` work): the probe again in
#        units of 16 experts on the same device (each group's weights uploaded on their own); the
#        output must be byte-identical to the unstreamed run above
run_for 120 "$LWQ" quantize "$PROBE" -o "$PROBE-s" --device "$DEVICE" --qformat "$QFORMAT" --calib-size 4 --calib-seq 32 \
    --expert-group 16 --quiet --log-json "$WORK/stream.jsonl" 2> "$WORK/stream.err" ||
    fail "quantize of the probe in expert groups on $DEVICE ($WORK/stream.err)"
if diff -r "$PROBE-q" "$PROBE-s" >/dev/null 2>&1; then
    log "expert streaming (--expert-group 16) on $DEVICE: output byte-identical to the unstreamed run"
else
    fail "expert streaming (--expert-group 16) on $DEVICE: output differs from the unstreamed run"
fi
rm -rf "$PROBE" "$PROBE-q" "$PROBE-q.layerwise_resume" "$PROBE-s" "$PROBE-s.layerwise_resume"

# ---- 6. end to end ----------------------------------------------------------------------------------
AVAIL=$(df --output=avail -B1 "$WORK" | tail -1)
SIZE=$(CTEST_RESERVE_S=$CTEST_RESERVE_S python3 - "$WORK" "$E2E_GB" "$(left)" "$AVAIL" "${R[mk_gbps]}" <<'PY'
import json, os, sys
work, want, left, avail, mk = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def first(path, key, pick=lambda r: True):
    try:
        for line in open(path):
            r = json.loads(line)
            if key in r and pick(r):
                return r
    except (OSError, ValueError):
        pass
    return None
io = first(f"{work}/bench-io.json", "gbps", lambda r: r.get("mode", "").startswith("uring-direct"))
read = io["gbps"] if io else 0.5
lay = [json.loads(l) for l in open(f"{work}/probe.jsonl")] if os.path.exists(f"{work}/probe.jsonl") else []
lay = [r for r in lay if r.get("event") == "layer"]
comp = sum(r["bytes_read"] for r in lay) / 1e9 / max(1e-3, sum(r["forward_s"] + r["quantize_s"] for r in lay)) if lay else 0.2
# seconds per GB: mkmodel + fio + dry read + the run (the slower of reading and computing) + margin
per_gb = 1 / max(mk, 0.05) + 2 / read + 1 / min(read, comp) + 0.5
fit = (left - 40 - int(os.environ.get("CTEST_RESERVE_S", "100"))) / per_gb
room = avail / 1e9 / 1.5
print(f"{max(2.0, min(want, fit, room)):.1f} {read:.3f} {comp:.3f} {per_gb:.2f}")
PY
)
read -r E2E_SIZE PROBE_READ PROBE_COMP PER_GB <<< "$SIZE"
R[e2e_note]=""
awk -v a="$E2E_SIZE" -v b="$E2E_GB" 'BEGIN{exit !(a < b)}' &&
    R[e2e_note]="shrunk from $E2E_GB GB to fit the time or disk left (disk read ~$PROBE_READ GB/s, compute ~$PROBE_COMP GB/s, mkmodel ${R[mk_gbps]} GB/s)"
log "end to end: $E2E_SIZE GB on --device $DEVICE ${R[e2e_note]}"
t=$(date +%s)
SKIP_FIO=1; command -v fio >/dev/null && SKIP_FIO=0
T=$(( $(left) - CTEST_RESERVE_S / 2 ))
DIR="$WORK/e2e" DEVICE=$DEVICE QFORMAT="$QFORMAT" KEEP=0 JSON_OUT="$WORK/e2e.json" STEP_TIMEOUT=$(( T - 5 )) \
    SKIP_FIO=$SKIP_FIO LWQ_BIN="$LWQ" run_for "$T" perf/bench_e2e.sh "$E2E_SIZE" > "$WORK/e2e.md" 2> "$WORK/e2e.err" ||
    fail "perf/bench_e2e.sh $E2E_SIZE ($WORK/e2e.err: $(tail -2 "$WORK/e2e.err" | tr '\n' ' '))"
R[e2e_s]=$(( $(date +%s) - t ))
rm -rf "$WORK/e2e/model" "$WORK/e2e/out" "$WORK/e2e/out.layerwise_resume"

# ---- 7. every test, with the time left ---------------------------------------------------------
t=$(date +%s)
if [ "$SKIP_CTEST" != 1 ]; then
    T=$(( $(left) - 5 ))
    log "ctest, every other test ($T s at most)"
    rc=0
    (cd "$BUILD" && run_for "$T" ctest -E cuda -j"$(nproc)" --timeout 200 --output-on-failure) > "$WORK/ctest.log" 2>&1 ||
        rc=$?
    np=$(grep -c " Passed " "$WORK/ctest.log" || true)
    nf=$(grep -cE '\*\*\*(Failed|Exception|Timeout)|Not Run' "$WORK/ctest.log" || true)
    nt=$(cd "$BUILD" && ctest -E cuda -N 2>/dev/null | sed -n 's/^Total Tests: //p' || true)
    R[ctest]="$np passed, $nf failed of ${nt:-?}"
    # Running out of time is reported, not a failure: the GPU tests ran above, and CI runs these.
    [ $rc -eq 124 ] && R[ctest]+=" (stopped after ${T}s: $((${nt:-0} - np - nf)) not run)"
    [ "$nf" -eq 0 ] || fail "ctest: ${R[ctest]} ($WORK/ctest.log)"
    [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$nf" -gt 0 ] || fail "ctest exited $rc ($WORK/ctest.log)"
else
    R[ctest]="skipped (SKIP_CTEST=1)"
fi
R[ctest_s]=$(( $(date +%s) - t ))

# ---- 8. the table -----------------------------------------------------------------------------------
{
echo "# lwq gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "GPU: ${R[gpu]:-?}; ${R[machine]}; total $(elapsed) s (budget ${BUDGET_S} s)"
echo
python3 - "$WORK" "${R[build_s]}" "${R[test_s]}" "${R[ctest_s]:-0}" "${R[ctest]}" "${R[gpu_tests]}" "${R[mk_gbps]}" "${R[quant_max]:-}" \
    "${R[quant_sweep]:-}" "$E2E_SIZE" "${R[e2e_note]}" "${R[e2e_s]}" <<'PY'
import json, os, sys
work, build_s, test_s, ctest_s, ctest, gpu_tests, mk, qmax, qsweep, size, note, e2e_s = sys.argv[1:]
def lines(p):
    try:
        return [json.loads(l) for l in open(p) if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []
io = {r["mode"]: r["gbps"] for r in lines(f"{work}/bench-io.json") if "mode" in r}
fio = None
try:
    fio = json.load(open(f"{work}/fio.json"))["jobs"][0]["read"]["bw_bytes"] / 1e9
except (OSError, ValueError, KeyError, IndexError):
    pass
h2d = (lines(f"{work}/h2d.json") or [{}])[0]
e = (lines(f"{work}/e2e.json") or [None])[0]
G = 1e9
rows = [("build (Release, CUDA sm_90)", f"{build_s} s"),
        ("GPU parity tests", (gpu_tests.strip().rstrip(";") or "none ran") + f" ({test_s} s)"),
        ("ctest, every other test (-E cuda)", f"{ctest} ({ctest_s} s)"),
        ("disk read: fio io_uring O_DIRECT QD32 1M (probe shard)", f"{fio:.2f} GB/s" if fio else "fio not available"),
        ("disk read: lwq bench-io (probe shard)", ", ".join(f"{k} {v:.2f}" for k, v in io.items()) + " GB/s" if io else "failed"),
        ("mkmodel write", f"{mk} GB/s")]
if h2d.get("pageable_gbps"):
    rows.append(("H2D, engine path (pool slot registered with lwq_backend_host_register, lwq_backend_upload "
                 "in 64 MiB pieces)", f"{h2d['pinned_gbps']:.1f} GB/s"))
    rows.append(("H2D, same slot pageable (not registered)", f"{h2d['pageable_gbps']:.1f} GB/s"))
elif h2d:
    rows.append(("H2D", str(h2d)))
if qmax:
    rows.append(("GPU quantizer NVFP4 max / fp8_scale_sweep (bench_quant_cuda, 8192^2 BF16)", f"{qmax} / {qsweep}"))
if e:
    ref = fio or max(io.values(), default=0)
    e2e = e["bytes_read"] / G / e["wall_s"]
    rows += [(f"end to end: {size} GB model, {e['layers']} layers" + (f" ({note})" if note else ""),
              f"wall {e['wall_s']:.1f} s; {e['bytes_read']/G:.2f} GB read at {e2e:.2f} GB/s"
              + (f" = {100*e2e/ref:.0f}% of the disk (target >= 85%)" if ref else "")),
             ("--dry-read on the same model", f"{e['dry_read_gbps']:.2f} GB/s"
              + (f" ({100*e['dry_read_gbps']/e['fio_gbps']:.0f}% of fio on its shards)" if e.get("fio_gbps") else "")),
             ("engine time: forward (kernels + uploads) / quantize / write, share of wall",
              f"{100*e['forward_s']/e['wall_s']:.0f}% / {100*e['quantize_s']/e['wall_s']:.0f}% / "
              f"{100*e['write_s']/e['wall_s']:.0f}%; waited on reads {100*e['read_wait_s']/e['wall_s']:.0f}%"),
             ("GPU kernel time share", "needs nsys (perf/profile-nsys.sh); forward + quantize above bound it"),
             ("overlap wall / max(read-only, compute)", f"{e['overlap']:.3f} (target <= 1.15)"),
             ("overlap wall / max(read-only, forward + quantize, write) (the writer runs in parallel)",
              f"{e['overlap_stage']:.3f}; depth loop alone {e['loop_overlap_stage']:.3f}"),
             ("peak GPU memory (cudaMemGetInfo, sampled at every device allocation)",
              f"{e['peak_gpu_bytes']/G:.2f} GB" + (f"; layer 2 {e['gpu_bytes'][1]/G:.2f} -> last {e['gpu_bytes'][-1]/G:.2f} GB"
                                                    if len(e['gpu_bytes']) > 1 else "")),
             ("peak RSS", f"{e['peak_rss_bytes']/G:.2f} GB (target {e['rss_target_bytes']/G:.2f} GB)"),
             ("end-to-end step wall (mkmodel + fio + dry read + run)", f"{e2e_s} s")]
else:
    rows.append(("end to end", "did not complete (see e2e.err)"))
print("| quantity | value |\n|---|---|")
for k, v in rows:
    print(f"| {k} | {v} |")
PY
if [ -s "$WORK/e2e.md" ]; then echo; echo "## perf/bench_e2e.sh $E2E_SIZE (--device $DEVICE)"; cat "$WORK/e2e.md"; fi
} | tee "$WORK/report.md"
[ $FAILED -eq 0 ] || { echo "gpu-check.sh: some steps FAILED (see above and $WORK)" >&2; exit 1; }
log "done in $(elapsed) s; report in $WORK/report.md"
