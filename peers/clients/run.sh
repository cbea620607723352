#!/usr/bin/env bash
# compressed-tensors, transformers and vLLM read lwq's outputs (peers/clients/run.py --help);
# needs peers/setup.sh ct vllm, the sources of peers/run.sh, and a built lwq.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
exec python3 "$root/peers/clients/run.py" "$@"
