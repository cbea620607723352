"""Speed side by side (issue 23 part 7): lwq, Model Optimizer and llm-compressor on this CPU, one
run each, the same qwen3_moe checkpoint (>= 1 GB in BF16, written by peers/make_sources.py
--size speed), the same calibration ids (64 x 256 by default), NVFP4 max and FP8 max.  Wall
time and peak RSS of each whole process come from GNU time (/usr/bin/time -v); the Python tools'
own quantize-only time (mtq.quantize / oneshot) is printed beside it.

    peers/setup.sh modelopt llmcompressor && cmake --build build
    .peers/venvs/modelopt/bin/python peers/speed.py [--samples 64 --seq 256 --batch 8]

Writes .peers/work/speed/{table.md,speed.json}.  Runs are sequential, so the three tools see
the same machine state as far as one run can.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run  # noqa: E402

VENVS = os.environ.get("PEERS_VENVS", os.path.join(ROOT, ".peers", "venvs"))  # another tree's venvs, read-only


def timed(cmd, log):
    """(wall s, peak RSS bytes, exit status) of cmd under GNU time."""
    with open(log, "w") as f:
        p = subprocess.run(["/usr/bin/time", "-v"] + cmd, stdout=f, stderr=subprocess.STDOUT)
    text = open(log).read()
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    w = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    wall = 0.0
    for part in (w.group(1).split(":") if w else []):
        wall = wall * 60 + float(part)
    return wall, int(m.group(1)) * 1024 if m else 0, p.returncode


def bf16_moe_bound():
    """The input_scale bound of tests/data/peers for the BF16 qwen3_moe (MANIFEST bf16_bounds: twice
    torch's own BF16-vs-F32 drift of a calibrated scale, at least one BF16 step), and where it is
    from.  README "Side by side with the real tools" says what it covers on MoE checkpoints."""
    man = os.path.join(ROOT, "tests", "data", "peers", "MANIFEST.json")
    b = json.load(open(man))["bf16_bounds"]["qwen3_moe-bf16"]
    return b["bound"], f"tests/data/peers qwen3_moe-bf16: 2 x torch's BF16-vs-F32 drift {b['delta']:.3g}"


def outputs_side_by_side(work, formats, rows):
    """Lines comparing lwq's and Model Optimizer's exports of each format: weights, weight scales
    and unquantized tensors byte for byte, input scales against the BF16 MoE bound."""
    import compare
    ok = {(r["tool"], r["format"]) for r in rows if r["rc"] == 0}
    bound, why = bf16_moe_bound()
    out = []
    for fmt in formats:
        if ("lwq", fmt) not in ok or ("modelopt", fmt) not in ok:
            continue
        r = compare.compare(os.path.join(work, f"out-lwq-{fmt}"), os.path.join(work, f"out-modelopt-{fmt}"), bound)
        beyond = r["scale_diffs"]
        w = r["worst"]["input"]
        out += ["", f"outputs {fmt}: {r['exact_identical']} of {r['exact_total']} tensors besides the input scales "
                f"byte-identical; {r['scales'] - len(beyond)} of {r['scales']} input scales within the BF16 MoE bound "
                f"{bound:.3g} ({why}), {len(beyond)} beyond it"
                + (f"; worst {w[0]:.3g} at {w[1]} (lwq {w[2]:.6g}, Model Optimizer {w[3]:.6g})" if w else "")]
        out += [f"  beyond: {d}" for d in beyond[:10]]
        if len(beyond) > 10:
            out.append(f"  ... and {len(beyond) - 10} more")
        out += [f"  differs: {d}" for d in r["exact_diffs"][:10]]
    if out:
        out += ["", "A routed expert's input scale can lie beyond the bound where a calibration token's BF16 hidden "
                "state has drifted far enough to change its top-k (in torch's BF16 forward as in lwq's): that "
                "expert's amax is then one token's (README, peers: the BF16 MoE bound)."]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--formats", default="nvfp4,fp8")
    ap.add_argument("--tools", default="lwq,modelopt,llmcompressor")
    a = ap.parse_args()
    work = os.path.join(run.WORK, "speed")
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "qwen3_moe-speed-bf16")
    if not os.path.isdir(src):
        subprocess.run([sys.executable, os.path.join(HERE, "make_sources.py"), work, "--size", "speed"], check=True)
        shutil.rmtree(os.path.join(work, "qwen3_moe-speed-f32"), ignore_errors=True)  # only BF16 is timed
    cfg = json.load(open(os.path.join(src, "config.json")))
    calib = os.path.join(work, f"calib-{a.samples}x{a.seq}.jsonl")
    if not os.path.exists(calib):
        subprocess.run([sys.executable, os.path.join(HERE, "make_sources.py"), "--calib", calib, "--vocab",
                        str(cfg["vocab_size"]), "--samples", str(a.samples), "--seq", str(a.seq)], check=True)
    size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src) if f.endswith(".safetensors"))
    rows = []
    for fmt in a.formats.split(","):
        for tool in a.tools.split(","):
            out = os.path.join(work, f"out-{tool}-{fmt}")
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(out + ".layerwise_resume", ignore_errors=True)
            if tool == "lwq":
                cmd = [run.LWQ, "quantize", src, "-o", out, "--qformat", fmt, "--kv-cache", "none", "--calib", calib,
                       "--calib-size", str(a.samples), "--calib-seq", str(a.seq), "--batch-size", str(a.batch),
                       "--quiet"]
            elif tool == "modelopt":
                cmd = [os.path.join(VENVS, "modelopt", "bin", "python"), os.path.join(HERE, "modelopt_driver.py"),
                       "--src", src, "--out", out, "--calib", calib, "--qformat", fmt, "--kv", "none",
                       "--batch-size", str(a.batch)]
            else:
                cmd = [os.path.join(VENVS, "llmcompressor", "bin", "python"), os.path.join(HERE, "llmc_driver.py"),
                       "--src", src, "--out", out, "--calib", calib, "--scheme", fmt.upper(), "--batch-size",
                       str(a.batch)]
            print(f"speed: {tool} {fmt} ...", flush=True)
            t = time.strftime("%Y-%m-%d %H:%M")
            wall, rss, rc = timed(cmd, out + ".log")
            qs = None
            pr = os.path.join(out, "PEERS_RUN.json")
            if os.path.exists(pr):
                qs = json.load(open(pr)).get("quantize_s")
            rows.append({"tool": tool, "format": fmt, "wall_s": round(wall, 1), "peak_rss_gb": round(rss / 1e9, 2),
                         "quantize_only_s": qs, "rc": rc, "started": t, "command": " ".join(cmd)})
            print(f"speed: {tool} {fmt}: {wall:.1f} s, {rss / 1e9:.2f} GB peak RSS, exit {rc}", flush=True)
    lines = [f"source {src}: {size / 1e9:.2f} GB BF16 ({cfg['num_hidden_layers']} layers, "
             f"{cfg['num_local_experts']} experts, top-{cfg['num_experts_per_tok']}); calibration {a.samples} x {a.seq} "
             f"tokens, batch {a.batch}; {os.cpu_count()} CPUs", "",
             "| format | tool | wall (s) | x lwq | peak RSS (GB) | x lwq | quantize only (s) | exit |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        base = next((b for b in rows if b["tool"] == "lwq" and b["format"] == r["format"]), None)
        xw = f"{r['wall_s'] / base['wall_s']:.1f}" if base and base["wall_s"] else "-"
        xr = f"{r['peak_rss_gb'] / base['peak_rss_gb']:.1f}" if base and base["peak_rss_gb"] else "-"
        lines.append(f"| {r['format']} | {r['tool']} | {r['wall_s']} | {xw} | {r['peak_rss_gb']} | {xr} | "
                     f"{r['quantize_only_s'] if r['quantize_only_s'] is not None else '-'} | {r['rc']} |")
    lines += outputs_side_by_side(work, a.formats.split(","), rows)
    table = "\n".join(lines)
    print(table)
    open(os.path.join(work, "table.md"), "w").write(table + "\n")
    json.dump({"rows": rows, "source_bytes": size, "samples": a.samples, "seq": a.seq, "batch": a.batch},
              open(os.path.join(work, "speed.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
