#!/usr/bin/env python3
"""perf/random_ids.py PATH N T: N lines of {"input_ids": [T ids]} (ids 3..272, fixed seed 7), the
token files the perf scripts calibrate and evaluate on."""
import random
import sys

path, n, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(7)
with open(path, "w") as f:
    for _ in range(n):
        f.write('{"input_ids": [%s]}\n' % ", ".join(str(r.randrange(3, 273)) for _ in range(t)))
