#!/usr/bin/env bash
# perf/gpu-debs.sh — fetch, HERE (a Debian machine whose apt works), the .deb files lwq needs to
# build and run its tests on a machine that has neither network nor Debian -dev packages (the
# lent H200), into perf/.debs/ (git-ignored).  Carry that folder to the device (run's `carry`:
# ["perf/.debs"]); perf/gpu-check.sh unpacks it into a private prefix there (dpkg-deb -x, never
# into /) and points pkg-config, CMake and the loader at it.
#
#   perf/gpu-debs.sh            (env: DEST [perf/.debs]  NO_CRITERION [0]: 1 = the build
#                                dependencies only; gpu-check.sh then runs --no-criterion)
#
# The list is explicit (what CMakeLists.txt finds, what their .so files need at run time, and
# Criterion's closure), not apt's dependency closure, which drags in libc6 and the base system
# the device image already has.  Size: ~5 MB with Criterion.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-perf/.debs}
# (no OpenBLAS: only bench_forward links it, and CMakeLists.txt builds that benchmark when it is found)
BUILD_DEBS=(liburing-dev liburing2 libcjson-dev libcjson1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
            libpcre2-posix3 libnuma-dev libnuma1 libyaml-dev libyaml-0-2 pkgconf pkgconf-bin libpkgconf3)
TEST_DEBS=(libcriterion-dev libcriterion3 libnanomsg5 libnanomsg-dev libgit2-1.5 libhttp-parser2.9 libmbedcrypto7
           libmbedx509-1 libmbedtls14 libssh2-1 libboxfort-dev libffi8 libffi-dev libgssapi-krb5-2 libkrb5-3
           libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2)
pkgs=("${BUILD_DEBS[@]}")
[ "${NO_CRITERION:-0}" = 1 ] || pkgs+=("${TEST_DEBS[@]}")
command -v apt-get >/dev/null || { echo "gpu-debs.sh: apt-get not found (run this on the Debian dev machine)" >&2; exit 2; }
mkdir -p "$DEST"
rm -f "$DEST"/*.deb
(cd "$DEST" && apt-get download "${pkgs[@]}") || {
    echo "gpu-debs.sh: apt-get download failed; try 'apt-get update' first" >&2
    exit 2
}
n=$(ls "$DEST"/*.deb | wc -l)
echo "gpu-debs.sh: $n packages, $(du -sh "$DEST" | cut -f1) in $DEST (carry it: [\"$DEST\"])"
