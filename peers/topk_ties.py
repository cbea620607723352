#!/usr/bin/env python3
"""Golden rows for kernels/topk.h: torch.topk's CPU choice and order on tie-heavy rows.

Writes tests/data/topk/torch_topk.txt (read by tests/kernels/test_topk_torch.c), one row a line:
    n k sorted | v_0 ... v_{n-1} | i_0 ... i_{k-1}
values as small integers ("nan" for NaN, "-0" for negative zero) so that most rows tie, the
indices torch.topk(torch.tensor(v, dtype=float32), k, sorted=sorted) returned; then lines
    route E k | logits | i_0 ... i_{k-1}
for the softmax routers (torch.topk of the float32 softmax, sorted).  Shapes cover
both of torch's paths (k * 64 <= n: partial_sort; else nth_element + sort of the first k-1,
with k-1 above and below libstdc++'s 16-element insertion threshold) and the routers' sizes
(8..512 experts, top 1..10).  Run with the peers venv's python (torch 2.13.0, CPU)."""
import argparse
import random

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/topk/torch_topk.txt")
    ap.add_argument("--seed", type=int, default=37)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    shapes = [(2, 1), (3, 2), (4, 2), (5, 3), (8, 2), (8, 8), (16, 4), (17, 5), (24, 4), (32, 4),
              (32, 8), (60, 8), (64, 1), (64, 2), (64, 20), (128, 1), (128, 2), (128, 8), (128, 40),
              (160, 8), (256, 4), (256, 8), (384, 8), (512, 8), (512, 10), (100, 30), (200, 3)]
    lines = [f"# torch {torch.__version__}, seed {a.seed}: n k sorted | values | torch.topk indices"]
    for n, k in shapes:
        for rep in range(12):
            levels = rnd.choice([2, 3, 5, 20, 1000])
            vals = []
            for _ in range(n):
                r = rnd.random()
                if rep == 11 and r < 0.05:
                    vals.append("nan")
                elif rep == 10 and r < 0.1:
                    vals.append("-0")
                else:
                    vals.append(str(rnd.randrange(levels)))
            t = torch.tensor([float(x) for x in vals], dtype=torch.float32)
            for srt in (1, 0):
                idx = torch.topk(t, k, dim=-1, sorted=bool(srt))[1].tolist()
                lines.append(f"{n} {k} {srt} | {' '.join(vals)} | {' '.join(map(str, idx))}")
    # the softmax routers (qwen3_moe, qwen2_moe, mixtral, olmoe, qwen3_next, qwen3_5_moe):
    # softmax(logits, float32) then torch.topk(probs, k) sorted; logits on a 0.25 grid below 5, so
    # equal logits are the only ties and no probability underflows
    for E, k in [(8, 2), (24, 4), (32, 4), (60, 4), (64, 8), (128, 8), (512, 10)]:
        for rep in range(8):
            levels = rnd.choice([2, 4, 20])
            lg = [rnd.randrange(levels) * 0.25 for _ in range(E)]
            t = torch.tensor(lg, dtype=torch.float32)
            idx = torch.topk(torch.softmax(t, dim=-1, dtype=torch.float32), k, dim=-1)[1].tolist()
            lines.append(f"route {E} {k} | {' '.join(repr(x) for x in lg)} | {' '.join(map(str, idx))}")
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
