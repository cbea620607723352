#!/usr/bin/env bash
# Makes the peers' virtual environments under .peers/ (git-ignored): one per
# peer whose pins conflict, each installed exactly from peers/requirements/*.lock.
#
#   peers/setup.sh            all of them (modelopt llmcompressor ct vllm)
#   peers/setup.sh modelopt   only the named ones
#
# The locks were made with `uv pip compile peers/requirements/X.in -o X.lock
# --python-version 3.11 --python-platform x86_64-manylinux_2_28`; rerun that to
# move a pin.  The PyPI torch wheel pulls the CUDA libraries: expect ~5 GB of
# downloads per torch version (uv's cache hard-links them into every venv).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.peers"
req="$root/peers/requirements"
uv_version=0.13.9
python=${PEERS_PYTHON:-python3}
all=(modelopt llmcompressor ct vllm)
peers=("$@")
[ ${#peers[@]} -eq 0 ] && peers=("${all[@]}")

for p in "${peers[@]}"; do
    [ -f "$req/$p.lock" ] || { echo "setup.sh: no lock file $req/$p.lock (peers: ${all[*]})" >&2; exit 2; }
done

# Fail fast without a network: one short request to the package index.
index=${UV_INDEX_URL:-${PIP_INDEX_URL:-https://pypi.org/simple}}
if ! "$python" - "$index" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/uv/", timeout=10).read(64)
except Exception as e:
    sys.stderr.write(f"setup.sh: the package index {sys.argv[1]} is unreachable ({e}).\n"
                     "setup.sh: the peers need a network to install; lwq's own build and tests do not.\n")
    sys.exit(2)
EOF
then
    exit 2
fi

"$python" -c 'import sys; assert sys.version_info[:2] >= (3, 10), sys.version' ||
    { echo "setup.sh: $python is older than Python 3.10 (set PEERS_PYTHON)" >&2; exit 2; }

mkdir -p "$dir"
export UV_CACHE_DIR="$dir/cache"   # same file system as the venvs: hard links, one copy of torch
export UV_LINK_MODE=hardlink
if [ ! -x "$dir/uv/bin/uv" ] || [ "$("$dir/uv/bin/uv" --version | cut -d' ' -f2)" != "$uv_version" ]; then
    echo "setup.sh: installing uv $uv_version into $dir/uv"
    "$python" -m venv "$dir/uv"
    "$dir/uv/bin/pip" install --quiet "uv==$uv_version"
fi
uv="$dir/uv/bin/uv"

for p in "${peers[@]}"; do
    venv="$dir/venvs/$p"
    echo "setup.sh: $p -> $venv (from peers/requirements/$p.lock)"
    [ -x "$venv/bin/python" ] || "$uv" venv --quiet --python "$python" "$venv"
    "$uv" pip sync --quiet --python "$venv/bin/python" "$req/$p.lock"
    "$venv/bin/python" -c "import torch; print('setup.sh: $p ready, torch', torch.__version__)"
done
echo "setup.sh: done; activate one with: source .peers/venvs/<peer>/bin/activate"
