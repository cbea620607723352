#!/usr/bin/env bash
# perf/gpu-check.sh — every check lwq needs a GPU for, in one command that fits a short lease on a
# bare machine (no network, no Debian -dev packages, maybe no ../shared): probe the GPU first,
# build with what is there, then run the rows that matter most first, each bounded by the time
# LEFT, printing and saving the table after every step, so a cut run still reports what it
# measured.  memcheck runs last, on a filtered set, in whatever time is left.
#
#   perf/gpu-check.sh [--no-criterion]
#     env: BUDGET_S [540]  total seconds (the device runs a command for at most 600)
#          NO_GPU [0]      1 = dry mode, for machines without a GPU (ctest gpu_check_dry runs it,
#                          scripts/gpu-check-dry.sh): --device cpu everywhere, GPU tests must skip
#          WORK [/tmp/lwq-gpu-check]   scratch; logs in $WORK/logs
#          BUILD [$WORK/build]         build dir (configured and built when it has no lwq)
#          DEBS [perf/.debs]           .deb files from perf/gpu-debs.sh, unpacked into
#                                      $WORK/prefix when a dependency is missing
#          FORCE_PREFIX [0]            1 = use $DEBS only, as a bare machine would: pkg-config
#                                      sees the prefix and nothing of the system's
#          CUDA_ARCH [the GPU's]       CMAKE_CUDA_ARCHITECTURES (dry mode: 90)
#          E2E_GB [0]                  > 0: also the large end-to-end run (perf/bench_e2e.sh)
#          OUT                         when set: report.md, steps.log, logs.tgz are written there
#     --no-criterion: build without the Criterion tests (LWQ_TESTS=OFF); the checks that need
#          them are reported as not run.  Chosen automatically when Criterion is neither
#          installed nor in $DEBS.
#
# The steps, in order, with the cap of each in seconds (a step gets min(cap, time left - 10)); the
# log prints this list first and names each step with its cap when it starts:
#   probe 15, deps 60, build 420, identity-max 90, identity-mse-sweep 90, identity-local-hessian 90,
#   identity-batch 90, plan-gpu 150, stream 90, gptq 240, ranks 90, gpu-tests 300, resume 240, qwen3next 150,
#   bench-quant 120, bench-attention 120, bench-h2d 60, e2e (E2E_GB > 0: the time left), memcheck 420
# perf/RESULTS.md "GPU claims" names the row that measures each claim.
# Exit status: 0 every step ran and passed ("not available" and "not run" included); 1 a check
# failed or was cut by the budget; 2 set-up error (no GPU, no driver, no nvcc or g++, a missing
# dependency: named, within seconds).
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
    -h | --help) sed -n '2,36p' "$0"; exit 0 ;;
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

# ---- the steps and their caps (seconds), in the order they run ----------------------------------
STEPS=(probe:15 deps:60 build:420 identity-max:90 identity-mse-sweep:90 identity-local-hessian:90
       identity-batch:90 plan-gpu:150 stream:90 gptq:240 ranks:90 gpu-tests:300 resume:240 qwen3next:150
       bench-quant:120 bench-attention:120 bench-h2d:60 e2e:0 memcheck:420)
cap_of() { local s; for s in "${STEPS[@]}"; do [ "${s%%:*}" = "$1" ] && { echo "${s##*:}"; return; }; done; echo 60; }
STEPNO=0
# step NAME: log the start of a step with its number, cap and the time left; sets CAP
step() {
    STEPNO=$((STEPNO + 1))
    CAP=$(cap_of "$1")
    [ "$CAP" = 0 ] && CAP=$(($(left) - RESERVE))
    log "step $STEPNO/${#STEPS[@]} $1: cap ${CAP} s, $(left) s left"
}
log "steps in order (cap in s): $(printf '%s ' "${STEPS[@]}" | sed 's/:/ /g; s/ $//; s/\([0-9]\) /\1, /g'); budget $BUDGET_S s"

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
        echo "mode: $([ "$NO_GPU" = 1 ] && echo "NO_GPU=1 dry run (--device cpu)" || echo "GPU (--device cuda)")$([ "$NO_CRITERION" = 1 ] && echo ", --no-criterion")$([ "$FORCE_PREFIX" = 1 ] && echo ", FORCE_PREFIX=1"); elapsed $(elapsed) s of $BUDGET_S s"
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
status_of() { case $1 in 0) echo ok ;; 124) echo CUT ;; 3) echo "not run" ;; *) echo FAIL ;; esac; }

# ---- probe: the GPU, its driver and compute capability, before anything is built ---------------
step probe
t0=$(date +%s)
NVCC=$(command -v nvcc || true)
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do [ -z "$NVCC" ] && [ -x "$c" ] && NVCC=$c; done
[ -n "$NVCC" ] && CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd) || CUDA_HOME=""
MACHINE="$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"
CC_ARCH=""
if [ "$NO_GPU" = 1 ]; then
    CC_ARCH=${CUDA_ARCH:-90}
    MACHINE+="; GPU: none (dry mode)"
    row probe "not run" "dry mode: no GPU probed; CUDA arch $CC_ARCH" 0
else
    command -v nvidia-smi >/dev/null ||
        setup_fail probe "nvidia-smi not found: no NVIDIA driver on this machine"
    q=$(bounded 15 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -1)
    case "$q" in
    *,*,*,*) ;;
    *) setup_fail probe "nvidia-smi cannot query the GPU (driver not loaded, or no device): $q" ;;
    esac
    CC=$(echo "$q" | awk -F', *' '{print $4}')
    CC_ARCH=${CUDA_ARCH:-$(echo "$CC" | tr -d '.')}
    grep -Eq '^[0-9]+$' <<<"$CC_ARCH" || setup_fail probe "compute capability '$CC' not understood (set CUDA_ARCH)"
    [ "${CC%%.*}" -ge 8 ] 2>/dev/null || setup_fail probe "compute capability $CC: lwq's kernels need 8.0 or newer"
    # the driver as the CUDA runtime meets it: a device query through libcuda (nvcc's own tool);
    # where the toolkit has none, the module's probe says it in the first GPU row
    dqn="no device query tool"
    if [ -n "$CUDA_HOME" ] && [ -x "$CUDA_HOME/bin/__nvcc_device_query" ]; then
        dq=$(bounded 15 "$CUDA_HOME/bin/__nvcc_device_query" 2>&1) ||
            setup_fail probe "the CUDA driver cannot run a device query (libcuda.so.1): $dq"
        dqn="device query: sm_$dq"
    fi
    MACHINE+="; GPU: $q"
    row probe ok "$q; $dqn; building for sm_$CC_ARCH" $(($(date +%s) - t0))
fi

# ---- deps: the toolchain, then what is there, else the carried .debs, else name what is missing -
step deps
t0=$(date +%s)
[ -n "$NVCC" ] || setup_fail deps "nvcc not found (PATH, /usr/local/cuda*/bin): the CUDA toolkit is needed"
MACHINE+="; $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p') at $CUDA_HOME"
export PATH="$CUDA_HOME/bin:$PATH"
# nvcc compiles the host half of every .cu file with a C++ compiler
command -v g++ >/dev/null || command -v c++ >/dev/null ||
    setup_fail deps "g++ not found: nvcc needs a host C++ compiler (Debian: g++)"
# libcudart / libcublas next to nvcc; pip's nvidia-* wheels (the device image's torch) as a fallback
LIBS="$CUDA_HOME/lib64:$CUDA_HOME/lib:$CUDA_HOME/targets/x86_64-linux/lib"
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
    [ -d "$d" ] && LIBS+=":$d"
done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PC=$(command -v pkg-config || command -v pkgconf || true)
CMAKE_DEP_ARGS=()
missing_deps() { # prints the Debian packages that are missing
    local m=()
    command -v cmake >/dev/null || m+=(cmake)
    command -v cc >/dev/null || command -v gcc >/dev/null || m+=(gcc)
    if [ -z "$PC" ]; then
        m+=(pkgconf)
    else
        "$PC" --exists liburing 2>/dev/null || m+=(liburing-dev)
        "$PC" --exists libcjson 2>/dev/null || m+=(libcjson-dev)
        "$PC" --exists libpcre2-8 2>/dev/null || m+=(libpcre2-dev)
        "$PC" --exists yaml-0.1 2>/dev/null || m+=(libyaml-dev)
        [ "$NO_CRITERION" = 1 ] || "$PC" --exists criterion 2>/dev/null || m+=(libcriterion-dev)
    fi
    [ -f "${SYSROOT:-}/usr/include/numa.h" ] || m+=(libnuma-dev)
    echo "${m[*]:-}"
}
use_prefix() { # unpack $DEBS into $WORK/prefix and point pkg-config, CMake and the loader at it
    local P=$WORK/prefix f sys=""
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
    export LD_LIBRARY_PATH="$L:$P/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
    # FORCE_PREFIX: the prefix alone, as a bare machine has it; otherwise the prefix first and
    # then the system's own .pc files, so a system package (a yaml already installed) still counts
    if [ "$FORCE_PREFIX" != 1 ] && [ -n "$PC" ]; then
        sys=$("$PC" --variable pc_path pkg-config 2>/dev/null || true)
        [ -n "$sys" ] || sys=/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig
        export PKG_CONFIG_PATH="$L/pkgconfig:$P/usr/share/pkgconfig"
        export PKG_CONFIG_LIBDIR="$sys"
        unset PKG_CONFIG_SYSROOT_DIR
        SYSROOT=""
        [ -f "$P/usr/include/numa.h" ] && SYSROOT=$P
    else
        export PKG_CONFIG_LIBDIR="$L/pkgconfig:$P/usr/share/pkgconfig"
        export PKG_CONFIG_SYSROOT_DIR=$P
        SYSROOT=$P
    fi
    { [ -z "$PC" ] || [ "$FORCE_PREFIX" = 1 ]; } && [ -x "$P/usr/bin/pkgconf" ] && PC=$P/usr/bin/pkgconf
    CMAKE_DEP_ARGS=(-DPKG_CONFIG_EXECUTABLE="$PC" -DCMAKE_PREFIX_PATH="$P/usr")
    if [ -f "$P/usr/include/numa.h" ]; then
        CMAKE_DEP_ARGS+=(-DNUMA_INC="$P/usr/include" -DNUMA_LIB="$L/libnuma.so")
    fi
    CMAKE_DEP_ARGS+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$L -Wl,-rpath,$L")
    PREFIX_USED=$P
}
PREFIX_USED=""
M=$(missing_deps)
if { [ -n "$M" ] || [ "$FORCE_PREFIX" = 1 ]; } && ls "$DEBS"/*.deb >/dev/null 2>&1; then
    log "unpacking $(ls "$DEBS"/*.deb | wc -l) .deb files of $DEBS into $WORK/prefix (missing here: ${M:-nothing, FORCE_PREFIX=1})"
    use_prefix || setup_fail deps "unpacking $DEBS failed"
    M=$(missing_deps)
elif [ "$FORCE_PREFIX" = 1 ]; then
    setup_fail deps "FORCE_PREFIX=1 but $DEBS has no .deb files (perf/gpu-debs.sh makes them)"
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
row deps ok "g++ $(g++ -dumpversion 2>/dev/null || echo '?'); $([ -n "$PREFIX_USED" ] && echo "carried prefix $PREFIX_USED$([ "$FORCE_PREFIX" = 1 ] && echo " alone (FORCE_PREFIX=1)")" || echo "system packages")$([ "$NO_CRITERION" = 1 ] && echo ", no Criterion"); fixtures: ${FIX:-none (fixture tests skip)}" $(($(date +%s) - t0))

# ---- build: configure, then only the targets the rows run ---------------------------------------
step build
t0=$(date +%s)
TESTS=ON
[ "$NO_CRITERION" = 1 ] && TESTS=OFF
TARGETS=(lwq_cli lwq_cuda bench_quant_cuda bench_attn_cuda bench_h2d)
[ "$TESTS" = ON ] && TARGETS+=(test_ops_cuda test_mamba2_cuda test_quant_cuda test_quantize_cuda test_gptq_cuda test_cuda_module
                               test_resume test_qwen3next_production)
if [ -f "$BUILD/CMakeCache.txt" ] && [ -x "$BUILD/lwq" ] && [ "$NO_GPU" = 1 ] && [ "${REBUILD:-0}" != 1 ]; then
    row build ok "dry mode: reusing $BUILD as it is" $(($(date +%s) - t0))
else
    GEN=()
    command -v ninja >/dev/null && [ ! -f "$BUILD/CMakeCache.txt" ] && GEN=(-G Ninja)
    log "configuring $BUILD (Release, CUDA sm_$CC_ARCH, tests $TESTS)"
    bounded "$CAP" cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLWQ_TESTS=$TESTS -DLWQ_CUDA=ON \
        -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$CC_ARCH" "${CMAKE_DEP_ARGS[@]}" > "$LOGS/cmake.log" 2>&1
    rc=$?
    step_log cmake
    [ $rc -eq 0 ] || setup_fail build "cmake configure failed (exit $rc): $(grep -m3 -E 'Error|error|not found' "$LOGS/cmake.log" | tr '\n' ' ')"
    grep -q "CUDA backend ON" "$LOGS/cmake.log" || setup_fail build "cmake did not enable the CUDA backend"
    log "building ${TARGETS[*]}"
    bounded $((CAP - $(date +%s) + t0)) cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]}" > "$LOGS/build.log" 2>&1
    rc=$?
    step_log build
    [ $rc -eq 0 ] || setup_fail build "build failed (exit $rc): $(grep -m3 -E 'error' "$LOGS/build.log" | tr '\n' ' ')"
    row build ok "Release, CUDA sm_$CC_ARCH, ${#TARGETS[@]} targets (tests $TESTS)" $(($(date +%s) - t0))
fi
LWQ=$BUILD/lwq
export LWQ_BIN=$LWQ
[ -x "$LWQ" ] || setup_fail build "$LWQ was not built"
for f in "$LWQ" "$BUILD/liblwq-cuda.so"; do
    # not `ldd | grep -q` under pipefail: grep -q's early exit can kill ldd with SIGPIPE (141)
    if grep -q "not found" <<<"$(ldd "$f" 2>/dev/null)"; then
        setup_fail build "libraries not found for $f: $(ldd "$f" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
    fi
done

# ---- Criterion tests (cr TEST [FILTER] CAP): "Tested: n | Passing: ..." and the skips -----------
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

mk_model() { # mk_model DIR: the tiny qwen3_moe of the identity checks
    [ -f "$1/config.json" ] && return 0
    bounded 60 "$LWQ" mkmodel "$1" --arch qwen3_moe --hidden 128 --layers 2 --heads 4 --kv-heads 2 --experts 4 \
        --top-k 2 --moe-intermediate 64 --vocab 512 --quiet
}
TINY=$WORK/tiny
rm -rf "$TINY" "$WORK"/q-*
mk_model "$TINY" > "$LOGS/mkmodel.log" 2>&1 || row mkmodel FAIL "lwq mkmodel of the tiny model ($LOGS/mkmodel.log)" 0

# ---- identity: lwq quantize on --device cuda vs --device cpu, compared with `lwq diff` ----------
# What holds (README "GPU"): the weights' bytes and weight scales do not depend on the forward,
# so for max and mse + sweep every tensor but the input scales must be byte-identical; input
# scales come from each backend's forward and agree within 2e-2 relative (tests/tools/
# test_quantize_cuda.c's bound).  local_hessian's block scales and GPTQ's codes come from the
# forward too (its Hessian): the output's structure must be identical, and the row reports how
# many quantized weights came out byte-identical.  Dry mode compares two CPU runs: everything
# identical.
# identity NAME strict|hessian "A's options" "B's options" ARGS...: sets ID_ST (ok, FAIL, CUT) and
# ID_DET; identity_row prints them as the row identity-NAME
identity() {
    local name=$1 mode=$2 oa=$3 ob=$4 rc=0 t0 d=$LOGS/identity-$1.diff
    shift 4
    t0=$(date +%s)
    rm -rf "$WORK/q-$name-cpu" "$WORK/q-$name-dev"
    {
        # shellcheck disable=SC2086 # $oa / $ob are option lists
        bounded "$CAP" "$LWQ" quantize "$TINY" -o "$WORK/q-$name-cpu" $oa --calib-size 6 --calib-seq 24 --quiet "$@" &&
            bounded $((CAP - $(date +%s) + t0)) "$LWQ" quantize "$TINY" -o "$WORK/q-$name-dev" $ob --calib-size 6 \
                --calib-seq 24 --quiet "$@"
    } > "$LOGS/identity-$name.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        step_log "identity-$name"
        ID_ST=$([ $rc -eq 124 ] && echo CUT || echo FAIL)
        ID_DET="$oa vs $ob ($*): quantize exit $rc, $(tail -2 "$LOGS/identity-$name.log" | tr '\n' ' ')"
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
    ID_ST=$st
    ID_DET="$oa vs $ob ($*): $(ls "$WORK/q-$name-cpu" | wc -l) files; $other tensors differ besides input scales ($wdiff weights/weight scales); $nin input scales differ, max rel $rel (<= 2e-2)"
}
identity_row() { # identity_row NAME ...: step, identity, row
    local t0
    step "identity-$1"
    t0=$(date +%s)
    identity "$@"
    row "identity-$1" "$ID_ST" "$ID_DET" $(($(date +%s) - t0))
}
C="--device cpu --batch-size 4" G="--device $DEVICE --batch-size 4"
identity_row max strict "$C" "$G" --qformat nvfp4_experts-fp8_attn --algo max
identity_row mse-sweep strict "$C" "$G" --qformat nvfp4_experts-fp8_attn --algo mse --fp8-scale-sweep
identity_row local-hessian hessian "$C" "$G" --qformat nvfp4 --algo local_hessian
# batch size on the device (README "GPU": what holds): weights and weight scales identical, input
# scales from forwards whose GEMMs cuBLAS tiles by row count; the row reports their difference
identity_row batch strict "$G" "--device $DEVICE --batch-size 1" --qformat nvfp4_experts-fp8_attn --algo max

# ---- lwq plan's peaks against the peaks the run measures ------------------------------------------
# GPU: peak_gpu_bytes of the run's JSON log (cudaMemGetInfo at every allocation the CUDA module
# makes, GPTQ's and the libraries' included, and at every synchronize: the whole device);
# host: peak_rss_bytes (VmHWM) against the plan for the run's own device.  Three runs: layerwise
# mse + sweep, GPTQ, --whole-model.  The row fails when a measured peak is over its plan.
step plan-gpu
t0=$(date +%s)
PA=(--qformat nvfp4_experts-fp8_attn --calib-size 6 --calib-seq 24 --batch-size 4)
det="" st=ok
for v in "mse:--algo mse --fp8-scale-sweep" "gptq:--algo gptq" "whole:--algo max --whole-model"; do
    n=${v%%:*}
    # shellcheck disable=SC2206 # the run's options, split on purpose
    opts=(${v#*:})
    rm -rf "$WORK/q-plan-$n" "$LOGS/plan-$n.jsonl"
    rc=0
    { bounded 60 "$LWQ" plan "$TINY" --device cuda "${PA[@]}" "${opts[@]}" &&
        bounded 60 "$LWQ" plan "$TINY" --device "$DEVICE" "${PA[@]}" "${opts[@]}" 2>&1 | sed 's/^plan: host/plan: run-device host/' &&
        bounded $((CAP - $(date +%s) + t0)) "$LWQ" quantize "$TINY" -o "$WORK/q-plan-$n" --device "$DEVICE" "${PA[@]}" \
            "${opts[@]}" --quiet --log-json "$LOGS/plan-$n.jsonl"; } > "$LOGS/plan-$n.log" 2>&1 || rc=$?
    step_log "plan-$n"
    pg=$(sed -n 's/^plan: GPU peak \([0-9.]*\) GB.*/\1/p' "$LOGS/plan-$n.log" | head -1)
    ph=$(sed -n 's/^plan: run-device host peak \([0-9.]*\) GB.*/\1/p' "$LOGS/plan-$n.log" | head -1)
    mg=$(grep -o '"peak_gpu_bytes":[0-9]*' "$LOGS/plan-$n.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
    mh=$(grep -o '"peak_rss_bytes":[0-9]*' "$LOGS/plan-$n.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
    if [ $rc -ne 0 ] || [ -z "$pg" ] || [ -z "$mg" ] || [ -z "$mh" ]; then
        st=$([ $rc -eq 124 ] && echo CUT || echo FAIL)
        det+="$n: plan or run failed (exit $rc; $LOGS/plan-$n.log); "
        continue
    fi
    ratio=$(awk -v p="$pg" -v m="$mg" 'BEGIN {r = 0; if (p > 0) r = m / 1e9 / p; printf "%.2f of planned", r}')
    det+="$n: GPU planned $pg GB, measured $(awk -v m="$mg" 'BEGIN {printf "%.3f", m / 1e9}') GB ($ratio); host planned $ph GB, measured $(awk -v m="$mh" 'BEGIN {printf "%.3f", m / 1e9}') GB; "
    if [ "$NO_GPU" != 1 ]; then
        awk -v p="$pg" -v m="$mg" 'BEGIN {exit !(m / 1e9 <= p)}' || st=FAIL
    fi
    awk -v p="$ph" -v m="$mh" 'BEGIN {exit !(m / 1e9 <= p)}' || st=FAIL
done
[ "$NO_GPU" = 1 ] && det+="(dry: the plan is for cuda, the CPU runs measure no GPU memory)"
row plan-gpu "$st" "$det" $(($(date +%s) - t0))

# ---- expert streaming (issue 16, the `stream` work): the tiny MoE again in units of 2 experts on the
#      same device, each group's weights uploaded on their own; byte-identical to the unstreamed run
step stream
t0=$(date +%s)
rm -rf "$WORK/q-stream-a" "$WORK/q-stream-b"
rc=0
SA=(--qformat nvfp4_experts-fp8_attn --calib-size 6 --calib-seq 24 --batch-size 4 --device "$DEVICE" --quiet)
{ bounded "$CAP" "$LWQ" quantize "$TINY" -o "$WORK/q-stream-a" "${SA[@]}" &&
    bounded $((CAP - $(date +%s) + t0)) "$LWQ" quantize "$TINY" -o "$WORK/q-stream-b" "${SA[@]}" --expert-group 2 &&
    diff -r "$WORK/q-stream-a" "$WORK/q-stream-b"; } > "$LOGS/stream.log" 2>&1 || rc=$?
step_log stream
if [ $rc -eq 0 ]; then
    row stream ok "--expert-group 2 on $DEVICE: byte-identical to the unstreamed run" $(($(date +%s) - t0))
else
    row stream "$([ $rc -eq 124 ] && echo CUT || echo FAIL)" "--expert-group 2 on $DEVICE: exit $rc, $(tail -2 "$LOGS/stream.log" | tr '\n' ' ')" $(($(date +%s) - t0))
fi

# ---- GPTQ on the device: the kernels against the CPU (test_gptq_cuda), then a whole quantize -----
step gptq
t0=$(date +%s)
if [ "$NO_CRITERION" = 1 ]; then
    det="test_gptq_cuda: not run (--no-criterion); "
    st=0
else
    cr test_gptq_cuda "" $((CAP / 2))
    st=$?
    det="test_gptq_cuda: $CR; "
fi
identity gptq hessian "$C" "$G" --qformat nvfp4_experts-fp8_attn --algo gptq
case "$ID_ST" in ok) ;; CUT) [ $st -eq 0 ] && st=124 ;; *) st=1 ;; esac
row gptq "$(status_of $st)" "$det--algo gptq: $ID_DET" $(($(date +%s) - t0))

# ---- one rank under MPI (issue 24): `mpiexec -n 1 lwq quantize` on the device against the same run
# without MPI, local_hessian (the fixed-point Hessians), every output file identical; then the same
# with LWQ_NCCL=1, whose Hessian limbs go through ncclAllReduce on the GPU (NCCL bootstrapped over
# MPI; the sum of one rank is the identity, so the bytes must not move).  "not available" when the
# build has no MPI or no launcher is found; the NCCL half when libnccl.so.2 does not load.
step ranks
t0=$(date +%s)
MPX=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$BUILD/CMakeCache.txt" 2>/dev/null | head -1)
if ! grep -q 'libmpi' <<<"$(ldd "$LWQ" 2>/dev/null)" || [ -z "$MPX" ] || [ ! -x "$MPX" ]; then
    row ranks "not available" "this build has no MPI or no launcher (MPIEXEC_EXECUTABLE '$MPX'): mpiexec -n 1 not run" \
        $(($(date +%s) - t0))
else
    RA=(--qformat nvfp4 --algo local_hessian --calib-size 6 --calib-seq 24 --batch-size 2 --device "$DEVICE" --quiet)
    rk_env=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=
            OMPI_MCA_hwloc_base_binding_policy=none)
    rm -rf "$WORK"/q-rank-* "$WORK"/q-rank-*.layerwise_resume
    rc=0 det="" st=ok
    { bounded "$CAP" "$LWQ" quantize "$TINY" -o "$WORK/q-rank-none" "${RA[@]}" &&
        bounded $((CAP - $(date +%s) + t0)) "${rk_env[@]}" "$MPX" -n 1 "$LWQ" quantize "$TINY" -o "$WORK/q-rank-one" \
            "${RA[@]}"; } > "$LOGS/ranks.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        st=$([ $rc -eq 124 ] && echo CUT || echo FAIL)
        det="quantize exit $rc: $(tail -2 "$LOGS/ranks.log" | tr '\n' ' ')"
    elif ! diff <(cd "$WORK/q-rank-none" && sha256sum ./*) <(cd "$WORK/q-rank-one" && sha256sum ./*) >> "$LOGS/ranks.log"; then
        st=FAIL det="mpiexec -n 1 wrote other bytes than no MPI ($LOGS/ranks.log)"
    else
        det="mpiexec -n 1 = no MPI: $(ls "$WORK/q-rank-none" | wc -l) files identical"
        if [ "$NO_GPU" = 1 ]; then
            det+="; NCCL not run (dry mode, no GPU)"
        elif bounded $((CAP - $(date +%s) + t0)) "${rk_env[@]}" LWQ_NCCL=1 "$MPX" -n 1 "$LWQ" quantize "$TINY" \
                -o "$WORK/q-rank-nccl" "${RA[@]}" > "$LOGS/ranks-nccl.log" 2>&1; then
            if diff <(cd "$WORK/q-rank-none" && sha256sum ./*) <(cd "$WORK/q-rank-nccl" && sha256sum ./*) >> "$LOGS/ranks.log"; then
                det+="; with LWQ_NCCL=1 (ncclAllReduce) identical too"
            else
                st=FAIL det+="; LWQ_NCCL=1 wrote other bytes ($LOGS/ranks.log)"
            fi
        elif grep -qE 'cannot load libnccl|without nccl.h' "$LOGS/ranks-nccl.log"; then
            det+="; NCCL not available: $(grep -oE 'cannot load libnccl[^)]*\)|built without nccl.h' "$LOGS/ranks-nccl.log" | head -1)"
        else
            st=FAIL det+="; LWQ_NCCL=1 failed: $(tail -1 "$LOGS/ranks-nccl.log")"
        fi
    fi
    step_log ranks
    row ranks "$st" "$det" $(($(date +%s) - t0))
fi

# ---- GPU parity tests: op by op and quantizer by quantizer against the CPU; the module's loading -
step gpu-tests
t0=$(date +%s)
if [ "$NO_CRITERION" = 1 ]; then
    row gpu-tests "not run" "--no-criterion" 0
else
    det=""
    st=0
    for x in test_ops_cuda test_mamba2_cuda test_quant_cuda test_quantize_cuda test_cuda_module; do
        cr "$x" "" $((CAP - $(date +%s) + t0))
        r=$?
        det+="$x: $CR; "
        [ $r -eq 0 ] || st=$r
    done
    row gpu-tests "$(status_of $st)" "$det" $(($(date +%s) - t0))
fi

# ---- the resume test and the Qwen3-Next production test, on the device explicitly ----------------
if [ "$NO_CRITERION" = 1 ]; then
    step resume
    row resume "not run" "--no-criterion" 0
    step qwen3next
    row qwen3next "not run" "--no-criterion" 0
else
    step resume
    t0=$(date +%s)
    # dry mode: one short test of each proves the plumbing; the GPU run takes them all
    f=""; [ "$NO_GPU" = 1 ] && f="resume/finished_run*"
    cr test_resume "$f" "$CAP"
    row resume "$(status_of $?)" "LWQ_DEVICE=$DEVICE test_resume${f:+ --filter $f}: $CR" $(($(date +%s) - t0))
    step qwen3next
    t0=$(date +%s)
    f=""; [ "$NO_GPU" = 1 ] && f="qwen3next_production/shipped_recipe*"
    cr test_qwen3next_production "$f" "$CAP"
    row qwen3next "$(status_of $?)" "LWQ_DEVICE=$DEVICE test_qwen3next_production${f:+ --filter $f}: $CR" $(($(date +%s) - t0))
fi

# ---- benchmarks ---------------------------------------------------------------------------------
bench() { # bench ROW BINARY ARGS...
    local name=$1 b=$2 rc=0 t0
    shift 2
    step "$name"
    t0=$(date +%s)
    if [ ! -x "$BUILD/$b" ]; then row "$name" FAIL "$b not built" 0; return; fi
    bounded "$CAP" "$BUILD/$b" "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
    step_log "$name"
    local st=ok
    [ $rc -eq 0 ] || st=$([ $rc -eq 124 ] && echo CUT || echo FAIL)
    row "$name" "$st" "$(grep -E '^(nvfp4|fp8|attention|sweep|h2d|\{)|nothing to measure' "$LOGS/$name.log" | head -8 | tr '\n' ';' | sed 's/|/\//g')" $(($(date +%s) - t0))
}
bench bench-quant bench_quant_cuda
bench bench-attention bench_attn_cuda
bench bench-h2d bench_h2d --json 1024 64 5

# ---- the large end-to-end run (E2E_GB > 0) --------------------------------------------------------
step e2e
if [ "$E2E_GB" != 0 ] && [ "$NO_GPU" != 1 ]; then
    t0=$(date +%s)
    T=$(($(left) - RESERVE - 60)) # memcheck keeps a minute
    rc=0
    DIR="$WORK/e2e" DEVICE=cuda KEEP=0 JSON_OUT="$LOGS/e2e.json" STEP_TIMEOUT=$((T - 5)) SKIP_FIO=1 LWQ_BIN="$LWQ" \
        bounded "$T" perf/bench_e2e.sh "$E2E_GB" > "$LOGS/e2e.log" 2>&1 || rc=$?
    step_log e2e
    row e2e "$(status_of $rc)" "perf/bench_e2e.sh $E2E_GB: $(tail -3 "$LOGS/e2e.log" | tr '\n' ' ' | sed 's/|/\//g')" $(($(date +%s) - t0))
    rm -rf "$WORK/e2e"
else
    row e2e "not run" "E2E_GB=0$([ "$NO_GPU" = 1 ] && echo ", dry mode")" 0
fi

# ---- compute-sanitizer (memcheck), last, on a filtered set, in the time that is left ------------
# The filter keeps one test of each kind the kernels have: a GEMM with bias, the element-wise ops,
# routing + gather + combine, a gather error, amax, the tiled attention; the quantizers' byte
# checks; then one small quantize.  A missing compute-sanitizer is "not available", not a failure.
step memcheck
t0=$(date +%s)
CS=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer "$CUDA_HOME"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1 || true)
if [ "$NO_GPU" = 1 ]; then
    row memcheck "not run" "dry mode (compute-sanitizer $([ -n "$CS" ] && echo "found: $CS" || echo "not available"))" 0
elif [ -z "$CS" ]; then
    row memcheck "not available" "compute-sanitizer is not installed with this toolkit ($CUDA_HOME)" 0
else
    det=""
    st=0
    MC=(--tool memcheck --report-api-errors no --error-exitcode 99)
    OPS_F='ops_cuda/@(gemm_bf16_bias|swiglu_add_bf16|moe_route_gather_combine|gather_out_of_range_reported_at_synchronize|amax_masked|attention_tiled_equals_warp_short_and_fully_padded)'
    QUANT_F='quant_cuda/@(amax_and_nvfp4_max_equal_cpu|sweep_equal_cpu|fp8_mse_equal_cpu)'
    M2_F='mamba2_cuda/@(left_padding_f32|wide_head_large_state_bf16)'
    for spec in "test_ops_cuda:$OPS_F" "test_mamba2_cuda:$M2_F" "test_quant_cuda:$QUANT_F"; do
        x=${spec%%:*}
        [ -x "$BUILD/$x" ] || continue
        rc=0
        bounded $((CAP / 3)) "$CS" "${MC[@]}" "$BUILD/$x" --jobs 1 --filter "${spec#*:}" > "$LOGS/memcheck-$x.log" 2>&1 || rc=$?
        step_log "memcheck-$x"
        det+="$x (filtered): $(grep -m1 -E 'ERROR SUMMARY' "$LOGS/memcheck-$x.log" | sed 's/=* *//' || echo "exit $rc"); "
        [ $rc -eq 0 ] || st=$([ $rc -eq 124 ] && echo 124 || echo 1)
    done
    rc=0
    bounded $((CAP / 3)) "$CS" "${MC[@]}" "$LWQ" quantize "$TINY" -o "$WORK/q-cs" --device cuda \
        --algo mse --fp8-scale-sweep --calib-size 4 --calib-seq 16 --quiet > "$LOGS/memcheck-quantize.log" 2>&1 || rc=$?
    step_log memcheck-quantize
    det+="lwq quantize: $(grep -m1 -E 'ERROR SUMMARY' "$LOGS/memcheck-quantize.log" | sed 's/=* *//' || echo "exit $rc")"
    [ $rc -eq 0 ] || st=$([ $rc -eq 124 ] && echo 124 || echo 1)
    row memcheck "$(status_of $st)" "$det" $(($(date +%s) - t0))
fi

rm -rf "$TINY" "$WORK"/q-*
log "done in $(elapsed) s; table in $WORK/report.md${OUTDIR:+ and $OUTDIR/report.md}"
exit $FAILED
