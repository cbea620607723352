#!/usr/bin/env bash
# perf/gpu-check.sh — every check lwq needs a GPU for, in one command that fits a short lease on a
# bare machine (no network, no Debian -dev packages, maybe no ../shared): build with what is there,
# then, each step bounded by the time LEFT, print and save the table after every step, so a cut
# run still reports what it measured.
#
#   perf/gpu-check.sh [--no-criterion]
#     env: BUDGET_S [540]  total seconds (the device runs a command for at most 600)
#          NO_GPU [0]      1 = dry mode, for machines without a GPU (CI runs it: ctest
#                          gpu_check_dry): --device cpu everywhere, GPU tests must skip
#          WORK [/tmp/lwq-gpu-check]   scratch; logs in $WORK/logs
#          BUILD [$WORK/build]         build dir (dry mode reuses an existing one as it is)
#          DEBS [perf/.debs]           .deb files from perf/gpu-debs.sh, unpacked into
#                                      $WORK/prefix when a dependency is missing
#          FORCE_PREFIX [0]            1 = use $DEBS even when the system has everything
#          E2E_GB [0]                  > 0: also the large end-to-end run (perf/bench_e2e.sh)
#          OUT                         when set: report.md, steps.log, logs.tgz are written there
#     --no-criterion: build without the Criterion tests (LWQ_TESTS=OFF); the checks that need
#          them are reported as not run, the CLI checks and benchmarks still run.  Chosen
#          automatically when Criterion is neither installed nor in $DEBS.
#
# Steps (the table's rows; perf/RESULTS.md "GPU claims" names the row that measures each claim):
#   machine, deps, build, gpu-tests, sanitizer, identity-max, identity-mse-sweep,
#   identity-local-hessian, identity-batch, stream, plan-gpu, resume, qwen3next, bench-quant, bench-attention, bench-h2d, e2e
# Exit status: 0 every step ran and passed; 1 a check failed or was cut by the budget; 2 set-up
# error (no GPU, no nvcc, missing dependency: named, within seconds).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
NO_GPU=${NO_GPU:-0}
WORK=${WORK:-/tmp/lwq-gpu-check}
BUILD=${BUILD:-$WORK/build}
DEBS=${DEBS:-$ROOT/perf/.debs}
FORCE_PREFIX=${FORCE_PREFIX:-0}
E2E_GB=${E2E_GB:-0}
OUTDIR=${OUT:-}
NO_CRITERION=0
for a in "$@"; do
    case "$a" in
    --no-criterion) NO_CRITERION=1 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done
DEVICE=cuda
[ "$NO_GPU" = 1 ] && DEVICE=cpu
LOGS=$WORK/logs
mkdir -p "$LOGS" || { echo "gpu-check.sh: cannot create $LOGS" >&2; exit 2; }
[ -n "$OUTDIR" ] && { mkdir -p "$OUTDIR" || OUTDIR=""; }
FAILED=0

elapsed() { echo $(($(date +%s) - START)); }
left() { echo $((BUDGET_S - $(date +%s) + START)); }
log() { echo "[gpu-check +$(elapsed)s] $*" >&2; }

# ---- the table: one row per step, rewritten and printed after every step ---------------------
ROWS=()
row() { # row STEP STATUS DETAIL SECONDS
    ROWS+=("| $1 | $2 | $3 | $4 |")
    [ "$2" = FAIL ] || [ "$2" = CUT ] && FAILED=1
    report
}
report() {
    {
        echo "# lwq perf/gpu-check.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
        echo
        echo "mode: $([ "$NO_GPU" = 1 ] && echo "NO_GPU=1 dry run (--device cpu)" || echo "GPU (--device cuda)")$([ "$NO_CRITERION" = 1 ] && echo ", --no-criterion"); elapsed $(elapsed) s of $BUDGET_S s"
        echo "machine: ${MACHINE:-?}"
        echo
        echo "| step | status | result | s |"
        echo "|---|---|---|---|"
        printf '%s\n' "${ROWS[@]}"
    } > "$WORK/report.md"
    cat "$WORK/report.md" >&2
    if [ -n "$OUTDIR" ]; then
        cp "$WORK/report.md" "$OUTDIR/report.md" 2>/dev/null
        tar -czf "$OUTDIR/logs.tgz" -C "$WORK" logs report.md 2>/dev/null
    fi
}
# step_log NAME: append a step's log tail to $OUT/steps.log (the whole logs are in logs.tgz)
step_log() {
    [ -n "$OUTDIR" ] && [ -f "$LOGS/$1.log" ] &&
        { echo "==== $1"; tail -n 120 "$LOGS/$1.log"; } >> "$OUTDIR/steps.log" 2>/dev/null
    return 0
}
# bounded CAP CMD...: CMD under a timeout of min(CAP, time left - RESERVE); 124 when cut or when
# less than 5 s would be left for it.
RESERVE=${RESERVE:-10}
bounded() {
    local cap=$1 t
    shift
    t=$(($(left) - RESERVE))
    [ "$t" -gt "$cap" ] && t=$cap
    [ "$t" -lt 5 ] && return 124
    timeout --kill-after=5 "$t" "$@"
}
setup_fail() { row "$1" FAIL "$2" "$(elapsed)"; echo "gpu-check.sh: $2" >&2; exit 2; }

# ---- machine -----------------------------------------------------------------------------------
t0=$(date +%s)
GPU=""
command -v nvidia-smi >/dev/null &&
    GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
NVCC=$(command -v nvcc || true)
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do [ -z "$NVCC" ] && [ -x "$c" ] && NVCC=$c; done
MACHINE="$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM; GPU: ${GPU:-none}"
if [ "$NO_GPU" != 1 ] && [ -z "$GPU" ] && [ ! -e /dev/nvidia0 ]; then
    setup_fail machine "no NVIDIA GPU (nvidia-smi finds none, no /dev/nvidia0); NO_GPU=1 runs the dry mode"
fi
[ -n "$NVCC" ] || setup_fail machine "nvcc not found (PATH, /usr/local/cuda*/bin): the CUDA toolkit is needed"
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
MACHINE+="; $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p') at $CUDA_HOME"
export PATH="$CUDA_HOME/bin:$PATH"
# libcudart / libcublas next to nvcc; pip's nvidia-* wheels (the device image's torch) as a fallback
LIBS="$CUDA_HOME/lib64:$CUDA_HOME/lib:$CUDA_HOME/targets/x86_64-linux/lib"
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
    [ -d "$d" ] && LIBS+=":$d"
done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
row machine ok "$MACHINE" $(($(date +%s) - t0))

# ---- dependencies: what is there, else the carried .debs, else name what is missing -------------
t0=$(date +%s)
PC=$(command -v pkg-config || command -v pkgconf || true)
CMAKE_DEP_ARGS=()
missing_deps() { # prints the Debian packages that are missing
    local m=() f blas=0
    command -v cmake >/dev/null || m+=(cmake)
    command -v cc >/dev/null || command -v gcc >/dev/null || m+=(gcc)
    if [ -z "$PC" ]; then
        m+=(pkgconf)
    else
        "$PC" --exists liburing 2>/dev/null || m+=(liburing-dev)
        "$PC" --exists libcjson 2>/dev/null || m+=(libcjson-dev)
        "$PC" --exists libpcre2-8 2>/dev/null || m+=(libpcre2-dev)
        [ "$NO_CRITERION" = 1 ] || "$PC" --exists criterion 2>/dev/null || m+=(libcriterion-dev)
    fi
    [ -f "${SYSROOT:-}/usr/include/numa.h" ] || m+=(libnuma-dev)
    for f in "${SYSROOT:-}"/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h "${SYSROOT:-}"/usr/include/openblas/cblas.h \
        "${SYSROOT:-}"/usr/include/cblas.h; do
        [ -f "$f" ] && blas=1
    done
    [ $blas = 1 ] || m+=(libopenblas-dev)
    echo "${m[*]:-}"
}
use_prefix() { # unpack $DEBS into $WORK/prefix and point pkg-config, CMake and the loader at it
    local P=$WORK/prefix f
    rm -rf "$P" && mkdir -p "$P" || return 1
    for f in "$DEBS"/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$f" "$P" || return 1
        else # ar + tar: data.tar.{xz,zst,gz}
            (cd "$P" && ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -xaf - 2>/dev/null ||
                ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -xJf -) || return 1
        fi
    done
    local L=$P/usr/lib/x86_64-linux-gnu
    # Criterion's .pc names static helpers and -dev packages the run does not need
    [ -f "$L/pkgconfig/criterion.pc" ] && sed -i '/^Requires.private/d; /^Libs.private/d' "$L/pkgconfig/criterion.pc"
    export LD_LIBRARY_PATH="$L:$L/openblas-pthread:$P/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
    export PKG_CONFIG_LIBDIR="$L/pkgconfig:$P/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR=$P
    SYSROOT=$P
    [ -z "$PC" ] || [ "$FORCE_PREFIX" = 1 ] && [ -x "$P/usr/bin/pkgconf" ] && PC=$P/usr/bin/pkgconf
    CMAKE_DEP_ARGS=(-DPKG_CONFIG_EXECUTABLE="$PC" -DCMAKE_PREFIX_PATH="$P/usr" -DNUMA_INC="$P/usr/include"
        -DNUMA_LIB="$L/libnuma.so" -DCBLAS_INC="$P/usr/include/x86_64-linux-gnu/openblas-pthread"
        -DOPENBLAS_LIB="$L/openblas-pthread/libopenblas.so"
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$L -Wl,-rpath-link,$L/openblas-pthread -Wl,-rpath,$L -Wl,-rpath,$L/openblas-pthread")
    PREFIX_USED=$P
}
PREFIX_USED=""
M=$(missing_deps)
if { [ -n "$M" ] || [ "$FORCE_PREFIX" = 1 ]; } && ls "$DEBS"/*.deb >/dev/null 2>&1; then
    log "unpacking $(ls "$DEBS"/*.deb | wc -l) .deb files of $DEBS into $WORK/prefix (missing here: ${M:-nothing, FORCE_PREFIX=1})"
    use_prefix || setup_fail deps "unpacking $DEBS failed"
    M=$(missing_deps)
fi
if [ -n "$M" ] && [ "$NO_CRITERION" = 0 ] && [ "$M" = libcriterion-dev ]; then
    log "Criterion is missing: --no-criterion (the Criterion tests are not built)"
    NO_CRITERION=1
    M=$(missing_deps)
fi
[ -z "$M" ] || setup_fail deps "missing Debian packages: $M. Here: perf/gpu-debs.sh, then carry perf/.debs (DEBS=dir)"
FIX=""
for d in "${LWQ_FIXTURES:-}" "$ROOT/../shared/fixtures" "$ROOT/shared/fixtures"; do
    [ -n "$d" ] && [ -d "$d" ] && { FIX=$(cd "$d" && pwd); break; }
done
[ -n "$FIX" ] && export LWQ_FIXTURES=$FIX
row deps ok "$([ -n "$PREFIX_USED" ] && echo "carried prefix $PREFIX_USED" || echo "system packages")$([ "$NO_CRITERION" = 1 ] && echo ", no Criterion"); fixtures: ${FIX:-none (fixture tests skip)}" $(($(date +%s) - t0))

# ---- build ---------------------------------------------------------------------------------------
t0=$(date +%s)
TESTS=ON
[ "$NO_CRITERION" = 1 ] && TESTS=OFF
if [ "$NO_GPU" = 1 ] && [ -f "$BUILD/CMakeCache.txt" ] && [ -x "$BUILD/lwq" ]; then
    row build ok "dry mode: reusing $BUILD as it is" $(($(date +%s) - t0))
else
    GEN=()
    command -v ninja >/dev/null && [ ! -f "$BUILD/CMakeCache.txt" ] && GEN=(-G Ninja)
    log "configuring $BUILD (Release, CUDA sm_90, tests $TESTS)"
    bounded 120 cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLWQ_TESTS=$TESTS -DLWQ_CUDA=ON \
        -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 "${CMAKE_DEP_ARGS[@]}" > "$LOGS/cmake.log" 2>&1
    rc=$?
    step_log cmake
    [ $rc -eq 0 ] || setup_fail build "cmake configure failed (exit $rc): $(grep -m3 -E 'Error|error|not found' "$LOGS/cmake.log" | tr '\n' ' ')"
    grep -q "CUDA backend ON" "$LOGS/cmake.log" || setup_fail build "cmake did not enable the CUDA backend"
    log "building"
    bounded 480 cmake --build "$BUILD" -j"$(nproc)" > "$LOGS/build.log" 2>&1
    rc=$?
    step_log build
    [ $rc -eq 0 ] || setup_fail build "build failed (exit $rc): $(grep -m3 -E 'error' "$LOGS/build.log" | tr '\n' ' ')"
    row build ok "Release, CUDA sm_90, tests $TESTS" $(($(date +%s) - t0))
fi
LWQ=$BUILD/lwq
export LWQ_BIN=$LWQ
[ -x "$LWQ" ] || setup_fail build "$LWQ was not built"
if ldd "$LWQ" 2>/dev/null | grep -q "not found"; then
    setup_fail build "libraries not found for $LWQ: $(ldd "$LWQ" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
fi

# ---- Criterion tests (cr TEST [FILTER] [ENV...]): "Tested: n | Passing: ..." and the skips ------
cr() {
    local x=$1 filter=${2:-} cap=${3:-200} rc=0 args=(--jobs 1 --verbose)
    [ -n "$filter" ] && args+=(--filter "$filter")
    if [ ! -x "$BUILD/$x" ]; then CR="not built"; return 3; fi
    # from the build dir, as ctest runs them (some open ../recipes/...)
    (cd "$BUILD" && bounded "$cap" env LWQ_DEVICE="$DEVICE" "$BUILD/$x" "${args[@]}") > "$LOGS/$x.log" 2>&1 || rc=$?
    step_log "$x"
    local syn skips fskips
    syn=$(grep "Synthesis" "$LOGS/$x.log" | sed 's/.*Synthesis: //; s/ *$//; s/ *| */, /g' | tr 'A-Z' 'a-z')
    # a test whose fixture is absent (no ../shared or shared/fixtures on this machine) is reported,
    # not failed: every other skip on a GPU machine is a failure
    fskips=$(grep "\[SKIP\]" "$LOGS/$x.log" | grep -c "fixture .* not found")
    skips=$(($(grep -c "\[SKIP\]" "$LOGS/$x.log") - fskips))
    CR="${syn:-no synthesis (exit $rc)}, $skips skipped"
    [ "$fskips" -eq 0 ] || CR+=", $fskips skipped for a missing fixture"
    [ $rc -eq 124 ] && { CR+=", cut by the budget"; return 124; }
    [ $rc -eq 0 ] || return 1
    [ "$skips" -eq 0 ] || [ "$NO_GPU" = 1 ] || return 2
    return 0
}
status_of() { case $1 in 0) echo ok ;; 124) echo CUT ;; 3) echo "not run" ;; *) echo FAIL ;; esac; }

# ---- GPU parity tests: op by op and quantizer by quantizer against the CPU ------------------------
t0=$(date +%s)
if [ "$NO_CRITERION" = 1 ]; then
    row gpu-tests "not run" "--no-criterion" 0
else
    det=""
    st=0
    for x in test_ops_cuda test_quant_cuda test_quantize_cuda; do
        cr "$x" "" 200
        r=$?
        det+="$x: $CR; "
        [ $r -eq 0 ] || st=$r
    done
    row gpu-tests "$(status_of $st)" "$det" $(($(date +%s) - t0))
fi

# ---- compute-sanitizer (memcheck) on the small GPU tests and on one quantize ----------------------
t0=$(date +%s)
CS=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer 2>/dev/null || true)
mk_model() { # mk_model DIR: the tiny qwen3_moe of the identity checks
    [ -f "$1/config.json" ] && return 0
    bounded 60 "$LWQ" mkmodel "$1" --arch qwen3_moe --hidden 128 --layers 2 --heads 4 --kv-heads 2 --experts 4 \
        --top-k 2 --moe-intermediate 64 --vocab 512 --quiet
}
TINY=$WORK/tiny
rm -rf "$TINY" "$WORK"/q-*
mk_model "$TINY" > "$LOGS/mkmodel.log" 2>&1 || row mkmodel FAIL "lwq mkmodel of the tiny model ($LOGS/mkmodel.log)" 0
if [ "$NO_GPU" = 1 ]; then
    row sanitizer "not run" "no GPU (compute-sanitizer $([ -n "$CS" ] && echo found || echo "not found"))" 0
elif [ -z "$CS" ]; then
    row sanitizer FAIL "compute-sanitizer not found next to nvcc" 0
else
    det=""
    st=0
    for x in test_ops_cuda test_quant_cuda; do
        [ -x "$BUILD/$x" ] || continue
        rc=0
        bounded 150 "$CS" --tool memcheck --report-api-errors no --error-exitcode 99 "$BUILD/$x" --jobs 1 > "$LOGS/sanitizer-$x.log" 2>&1 || rc=$?
        step_log "sanitizer-$x"
        det+="$x: $(grep -m1 -E 'ERROR SUMMARY' "$LOGS/sanitizer-$x.log" | sed 's/=* *//' || echo "exit $rc"); "
        [ $rc -eq 0 ] || st=$([ $rc -eq 124 ] && echo 124 || echo 1)
    done
    rc=0
    bounded 120 "$CS" --tool memcheck --report-api-errors no --error-exitcode 99 "$LWQ" quantize "$TINY" -o "$WORK/q-cs" --device cuda \
        --algo mse --fp8-scale-sweep --calib-size 4 --calib-seq 16 --quiet > "$LOGS/sanitizer-quantize.log" 2>&1 || rc=$?
    step_log sanitizer-quantize
    det+="lwq quantize: $(grep -m1 -E 'ERROR SUMMARY' "$LOGS/sanitizer-quantize.log" | sed 's/=* *//' || echo "exit $rc")"
    [ $rc -eq 0 ] || st=$([ $rc -eq 124 ] && echo 124 || echo 1)
    row sanitizer "$(status_of $st)" "$det" $(($(date +%s) - t0))
fi

# ---- identity: lwq quantize on --device cuda vs --device cpu, compared with `lwq diff` ----------
# What holds (README "GPU"): the weights' bytes and weight scales do not depend on the forward,
# so for max and mse + sweep every tensor but the input scales must be byte-identical; input
# scales come from each backend's forward and agree within 2e-2 relative (tests/tools/
# test_quantize_cuda.c's bound).  local_hessian's block scales come from the forward too (its
# Hessian): the output's structure must be identical, and the row reports how many quantized
# weights came out byte-identical.  Dry mode compares two CPU runs: everything identical.
identity() { # identity NAME strict|hessian "A's options" "B's options" ARGS...
    local name=$1 mode=$2 oa=$3 ob=$4 rc=0 t0 d=$LOGS/identity-$1.diff
    shift 4
    t0=$(date +%s)
    rm -rf "$WORK/q-$name-cpu" "$WORK/q-$name-dev"
    {
        # shellcheck disable=SC2086 # $oa / $ob are option lists
        bounded 120 "$LWQ" quantize "$TINY" -o "$WORK/q-$name-cpu" $oa --calib-size 6 --calib-seq 24 --quiet "$@" &&
            bounded 120 "$LWQ" quantize "$TINY" -o "$WORK/q-$name-dev" $ob --calib-size 6 --calib-seq 24 --quiet "$@"
    } > "$LOGS/identity-$name.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        step_log "identity-$name"
        row "identity-$name" "$([ $rc -eq 124 ] && echo CUT || echo FAIL)" "$oa vs $ob ($*): quantize exit $rc, $(tail -2 "$LOGS/identity-$name.log" | tr '\n' ' ')" $(($(date +%s) - t0))
        return
    fi
    "$LWQ" diff "$WORK/q-$name-cpu" "$WORK/q-$name-dev" --max 100000 --no-metadata > "$d" 2>&1
    rc=$?
    cat "$d" >> "$LOGS/identity-$name.log"
    step_log "identity-$name"
    local nin rel other wdiff st=ok
    nin=$(grep -c '\.input_scale: data differs' "$d")
    rel=$(grep '\.input_scale: data differs' "$d" | sed 's/.*max rel diff \([0-9.e+-]*\).*/\1/' |
        awk 'BEGIN {m = 0} {if ($1 + 0 > m) m = $1 + 0} END {printf "%.3g", m}')
    other=$(grep -v '\.input_scale: data differs' "$d" | grep -vcE '^(identical|different): ')
    wdiff=$(grep -cE '\.weight(_scale)?: data differs' "$d")
    [ $rc -le 1 ] || st=FAIL
    awk -v r="$rel" 'BEGIN {exit !(r > 2e-2)}' && st=FAIL
    if [ "$mode" = strict ]; then
        [ "$other" -eq 0 ] || st=FAIL
    else
        [ "$((other - wdiff))" -eq 0 ] || st=FAIL
    fi
    row "identity-$name" "$st" "$oa vs $ob ($*): $(ls "$WORK/q-$name-cpu" | wc -l) files; $other tensors differ besides input scales ($wdiff weights/weight scales); $nin input scales differ, max rel $rel (<= 2e-2)" $(($(date +%s) - t0))
}
C="--device cpu --batch-size 4" G="--device $DEVICE --batch-size 4"
identity max strict "$C" "$G" --qformat nvfp4_experts-fp8_attn --algo max
identity mse-sweep strict "$C" "$G" --qformat nvfp4_experts-fp8_attn --algo mse --fp8-scale-sweep
identity local-hessian hessian "$C" "$G" --qformat nvfp4 --algo local_hessian
# batch size on the device (README "GPU": what holds): weights and weight scales identical, input
# scales from forwards whose GEMMs cuBLAS tiles by row count; the row reports their difference
identity batch strict "$G" "--device $DEVICE --batch-size 1" --qformat nvfp4_experts-fp8_attn --algo max

# ---- expert streaming (issue 16, the `stream` work): the tiny MoE again in units of 2 experts on the
#      same device, each group's weights uploaded on their own; byte-identical to the unstreamed run
t0=$(date +%s)
rm -rf "$WORK/q-stream-a" "$WORK/q-stream-b"
rc=0
SA=(--qformat nvfp4_experts-fp8_attn --calib-size 6 --calib-seq 24 --batch-size 4 --device "$DEVICE" --quiet)
{ bounded 120 "$LWQ" quantize "$TINY" -o "$WORK/q-stream-a" "${SA[@]}" &&
    bounded 120 "$LWQ" quantize "$TINY" -o "$WORK/q-stream-b" "${SA[@]}" --expert-group 2 &&
    diff -r "$WORK/q-stream-a" "$WORK/q-stream-b"; } > "$LOGS/stream.log" 2>&1 || rc=$?
step_log stream
if [ $rc -eq 0 ]; then
    row stream ok "--expert-group 2 on $DEVICE: byte-identical to the unstreamed run" $(($(date +%s) - t0))
else
    row stream "$([ $rc -eq 124 ] && echo CUT || echo FAIL)" "--expert-group 2 on $DEVICE: exit $rc, $(tail -2 "$LOGS/stream.log" | tr '\n' ' ')" $(($(date +%s) - t0))
fi

# ---- lwq plan's GPU peak against the peak the run measures (cudaMemGetInfo at every allocation) ---
t0=$(date +%s)
PA=(--qformat nvfp4_experts-fp8_attn --algo mse --fp8-scale-sweep --calib-size 6 --calib-seq 24 --batch-size 4)
rm -rf "$WORK/q-plan"
rc=0
{ bounded 60 "$LWQ" plan "$TINY" --device cuda "${PA[@]}" && bounded 120 "$LWQ" quantize "$TINY" -o "$WORK/q-plan" \
    --device "$DEVICE" "${PA[@]}" --quiet --log-json "$LOGS/plan-run.jsonl"; } > "$LOGS/plan.log" 2>&1 || rc=$?
step_log plan
planned=$(sed -n 's/^plan: GPU peak \([0-9.]*\) GB.*/\1/p' "$LOGS/plan.log" | head -1)
measured=$(grep -o '"peak_gpu_bytes":[0-9]*' "$LOGS/plan-run.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
if [ $rc -ne 0 ] || [ -z "$planned" ] || [ -z "$measured" ]; then
    row plan-gpu "$([ $rc -eq 124 ] && echo CUT || echo FAIL)" "plan or run failed (exit $rc; $LOGS/plan.log)" $(($(date +%s) - t0))
elif [ "$NO_GPU" = 1 ]; then
    row plan-gpu ok "planned ${planned} GB for cuda; the CPU run measures no GPU memory ($measured)" $(($(date +%s) - t0))
else
    awk -v p="$planned" -v m="$measured" 'BEGIN {exit !(m / 1e9 <= p)}' && st=ok || st=FAIL
    row plan-gpu "$st" "planned ${planned} GB >= measured $(awk -v m="$measured" 'BEGIN {printf "%.3f", m / 1e9}') GB (whole device, context included)" $(($(date +%s) - t0))
fi

# ---- the resume test and the Qwen3-Next production test, on the device explicitly ----------------
t0=$(date +%s)
if [ "$NO_CRITERION" = 1 ]; then
    row resume "not run" "--no-criterion" 0
    row qwen3next "not run" "--no-criterion" 0
else
    # dry mode: one short test of each proves the plumbing; the GPU run takes them all
    f=""; [ "$NO_GPU" = 1 ] && f="resume/finished_run*"
    cr test_resume "$f" 240
    row resume "$(status_of $?)" "LWQ_DEVICE=$DEVICE test_resume${f:+ --filter $f}: $CR" $(($(date +%s) - t0))
    t0=$(date +%s)
    f=""; [ "$NO_GPU" = 1 ] && f="qwen3next_production/shipped_recipe*"
    cr test_qwen3next_production "$f" 150
    row qwen3next "$(status_of $?)" "LWQ_DEVICE=$DEVICE test_qwen3next_production${f:+ --filter $f}: $CR" $(($(date +%s) - t0))
fi

# ---- benchmarks ---------------------------------------------------------------------------------
bench() { # bench ROW CAP BINARY ARGS...
    local name=$1 cap=$2 b=$3 rc=0 t0
    shift 3
    t0=$(date +%s)
    if [ ! -x "$BUILD/$b" ]; then row "$name" FAIL "$b not built" 0; return; fi
    bounded "$cap" "$BUILD/$b" "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
    step_log "$name"
    local st=ok
    [ $rc -eq 0 ] || st=$([ $rc -eq 124 ] && echo CUT || echo FAIL)
    row "$name" "$st" "$(grep -E '^(nvfp4|fp8|attention|sweep|h2d|\{)|nothing to measure' "$LOGS/$name.log" | head -8 | tr '\n' ';' | sed 's/|/\//g')" $(($(date +%s) - t0))
}
bench bench-quant 120 bench_quant_cuda
bench bench-attention 120 bench_attn_cuda
bench bench-h2d 60 bench_h2d --json 1024 64 5

# ---- the large end-to-end run (E2E_GB > 0) --------------------------------------------------------
if [ "$E2E_GB" != 0 ] && [ "$NO_GPU" != 1 ]; then
    t0=$(date +%s)
    T=$(($(left) - RESERVE))
    rc=0
    DIR="$WORK/e2e" DEVICE=cuda KEEP=0 JSON_OUT="$LOGS/e2e.json" STEP_TIMEOUT=$((T - 5)) SKIP_FIO=1 LWQ_BIN="$LWQ" \
        bounded "$T" perf/bench_e2e.sh "$E2E_GB" > "$LOGS/e2e.log" 2>&1 || rc=$?
    step_log e2e
    row e2e "$(status_of $rc)" "perf/bench_e2e.sh $E2E_GB: $(tail -3 "$LOGS/e2e.log" | tr '\n' ' ' | sed 's/|/\//g')" $(($(date +%s) - t0))
    rm -rf "$WORK/e2e"
fi

rm -rf "$TINY" "$WORK"/q-*
log "done in $(elapsed) s; table in $WORK/report.md${OUTDIR:+ and $OUTDIR/report.md}"
exit $FAILED
