"""The job loop shared by check_ct.py and check_vllm.py: one JSON job per line in, one JSON
result per line out, flushed after each job so a crash keeps the finished ones."""

import argparse
import json
import os


def main(doc, setup, run_job, name):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    torch.set_num_threads(int(os.environ.get("PEERS_THREADS", "2")))
    if setup:
        setup()
    with open(a.jobs) as f:
        jobs = [json.loads(ln) for ln in f if ln.strip()]
    with open(a.out, "w") as out:
        for j in jobs:
            r = run_job(j)
            print(f"{name}: {r['case']}: {r['status'][:200]} ({r['wall_s']} s)", flush=True)
            out.write(json.dumps(r) + "\n")
            out.flush()
