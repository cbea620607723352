#!/usr/bin/env bash
# perf/peers_speed.sh — lwq, Model Optimizer and llm-compressor side by side on this CPU (issue 23
# part 7): peers/speed.py (one qwen3_moe checkpoint of >= 1 GB written by transformers with a
# fixed seed, the same 64 x 256 calibration ids, NVFP4 max and FP8 max, the tools one after
# another, wall time and peak RSS from /usr/bin/time -v), with the thread counts made equal and
# the machine's load recorded beside each row.
#
#   perf/peers_speed.sh [speed.py options, e.g. --samples 64 --seq 256 --batch 8]
#
# Environment: THREADS [nproc]: lwq runs with --threads THREADS (through a one-line wrapper
# given to speed.py as LWQ_BIN), the two torch tools with OMP_NUM_THREADS=MKL_NUM_THREADS=THREADS
# (torch's intra-op pool takes its size from OMP_NUM_THREADS); LWQ [build/lwq]; PEERS_VENVS
# [.peers/venvs]: where the venvs are (another worktree's, used read-only); PEERS_WORK
# [.peers/work]. llm-compressor's venv is needed only when --tools names it (the default does).
# Needs peers/setup.sh modelopt llmcompressor and a built lwq.  Writes, beside speed.py's
# .peers/work/speed/{table.md,speed.json}: load.tsv (the 1-minute load average every 5 s) and
# table-load.md (speed.py's table plus the mean load over each row's run).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "peers_speed.sh: $*" >&2; exit 2; }
THREADS=${THREADS:-$(nproc)}
LWQ=$(realpath "${LWQ:-build/lwq}")
VENVS=${PEERS_VENVS:-$PWD/.peers/venvs}
export PEERS_VENVS=$VENVS
PY=$VENVS/modelopt/bin/python
[ -x "$LWQ" ] || die "no lwq binary at $LWQ (build it, or set LWQ)"
[ -x "$PY" ] || die "no modelopt venv at $VENVS/modelopt: run peers/setup.sh modelopt llmcompressor (or set PEERS_VENVS)"
case " $* " in
*" --tools "*) case "$*" in *llmcompressor*) NEED_LLMC=1 ;; *) NEED_LLMC=0 ;; esac ;;
*) NEED_LLMC=1 ;;
esac
[ "$NEED_LLMC" = 0 ] || [ -x "$VENVS/llmcompressor/bin/python" ] ||
    die "no llmcompressor venv at $VENVS/llmcompressor: run peers/setup.sh llmcompressor (or pass --tools lwq,modelopt)"
[ -f peers/speed.py ] || die "no peers/speed.py in this tree"
[ -x /usr/bin/time ] || die "no /usr/bin/time (apt-get install time)"
WORK=${PEERS_WORK:-$PWD/.peers/work}/speed
mkdir -p "$WORK"

# lwq with the thread count fixed; every other argument is speed.py's
cat > "$WORK/lwq-threads.sh" <<EOF
#!/bin/sh
exec "$LWQ" "\$@" --threads $THREADS
EOF
chmod +x "$WORK/lwq-threads.sh"

: > "$WORK/load.tsv"
( while :; do printf '%s\t%s\n' "$(date +%s)" "$(cut -d' ' -f1 /proc/loadavg)" >> "$WORK/load.tsv"; sleep 5; done ) &
SAMPLER=$!
trap 'kill "$SAMPLER" 2>/dev/null || true' EXIT
echo "peers_speed.sh: $(nproc) CPUs, $THREADS threads per tool; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
LWQ_BIN="$WORK/lwq-threads.sh" OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS "$PY" peers/speed.py "$@"
kill "$SAMPLER" 2>/dev/null || true
echo "peers_speed.sh: load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# the mean load over each row: its log file ends with the run, so it spans [mtime - wall, mtime]
"$PY" - "$WORK" "$THREADS" <<'EOF'
import json, os, sys
work, threads = sys.argv[1], sys.argv[2]
load = [tuple(map(float, ln.split())) for ln in open(os.path.join(work, "load.tsv")) if ln.strip()]
s = json.load(open(os.path.join(work, "speed.json")))
table = open(os.path.join(work, "table.md")).read().rstrip("\n").split("\n")
out = [table[0] + f"; {threads} threads per tool (lwq --threads, OMP_NUM_THREADS for torch)", ""]
rows = iter(s["rows"])
for ln in table[1:]:
    if ln.startswith("| format"):
        ln += " load (1-min avg, mean over the run) |"
    elif ln.startswith("|---"):
        ln += "---|"
    elif ln.startswith("| "):
        r = next(rows)
        end = os.path.getmtime(os.path.join(work, f"out-{r['tool']}-{r['format']}.log"))
        xs = [v for t, v in load if end - r["wall_s"] <= t <= end]
        ln += f" {sum(xs) / len(xs):.1f} |" if xs else " - |"
    out.append(ln)
text = "\n".join(out) + "\n"
open(os.path.join(work, "table-load.md"), "w").write(text)
print(text)
EOF
