#!/bin/sh
# scripts/with-coretype.sh CORETYPE COMMAND [ARGS...] — run COMMAND with OPENBLAS_CORETYPE=CORETYPE
# when this CPU can run that OpenBLAS kernel set; otherwise say why and exit 77 (ctest: skipped).
# ctest runs the batch-invariance tests once per core type through this (CMakeLists.txt), so a
# result that depends on the BLAS kernel OpenBLAS picks would fail here on some CPU.
set -eu
ct=$1
shift
case $ct in
    Prescott) need="pni" ;;
    Sandybridge) need="avx" ;;
    Haswell | Zen) need="avx2 fma" ;;
    SkylakeX) need="avx512f avx512bw avx512vl avx512dq avx512cd" ;;
    Cooperlake) need="avx512f avx512bw avx512vl avx512dq avx512cd avx512_bf16" ;;
    *) echo "with-coretype.sh: unknown core type $ct" >&2; exit 2 ;;
esac
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
for f in $need; do
    case $flags in
        *" $f "*) ;;
        *) echo "skipped: this CPU lacks $f, needed by OPENBLAS_CORETYPE=$ct"; exit 77 ;;
    esac
done
OPENBLAS_CORETYPE=$ct
export OPENBLAS_CORETYPE
exec "$@"
