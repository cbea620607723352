#!/usr/bin/env bash
# Runs every peer case and prints the table (peers/run.py --help); needs peers/setup.sh first
# and a built lwq (build/lwq, or LWQ_BIN).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.peers/venvs/modelopt/bin/python"
[ -x "$py" ] || { echo "run.sh: no Model Optimizer venv at $root/.peers/venvs/modelopt: run peers/setup.sh first" >&2; exit 2; }
exec "$py" "$root/peers/run.py" "$@"
