#!/usr/bin/env bash
# Install lwq's build and test dependencies from Debian packages.  Idempotent: installs only
# what is missing and does nothing when everything is there.
set -euo pipefail
# clang-14 + libclang-rt-14-dev: the fuzzers (scripts/fuzz.sh; ctest's fuzz_smoke builds them)
pkgs=(build-essential cmake pkg-config liburing-dev libnuma-dev libcjson-dev libcriterion-dev
      libopenblas-dev libpcre2-dev libyaml-dev clang-14 libclang-rt-14-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  # a here-string, not `dpkg-query | grep -q` under pipefail: grep -q's early exit can kill the
  # writer with SIGPIPE (141), and an installed package would then count as missing
  grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
