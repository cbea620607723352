"""Compare two exported checkpoints tensor by tensor, by name (shard layouts may differ).

Rules (issue 23 part 4):
  * every tensor except the calibrated activation scales must be byte-identical (dtype, shape,
    bytes): weight, weight_scale, weight_scale_2 and every unquantized tensor;
  * input_scale, k_scale and v_scale are compared as numbers: within `rtol` relative (1e-5
    for F32 sources; for BF16 sources the bound run.py derives, see README / perf/RESULTS.md);
  * hf_quant_config.json and config.json's quantization_config must be equal in meaning:
    quant_algo, kv_cache_quant_algo, group_size, quantized_layers, and the exclusion lists
    as the set of the checkpoint's modules they match (a glob and the names it covers are
    the same exclusion).

Pure Python (struct + json), no torch:  python peers/compare.py A B [--rtol 1e-5] [--json]
Exit status 0 equal, 1 different, 2 error.
"""

import argparse
import fnmatch
import json
import os
import struct
import sys

SCALE_SUFFIXES = {"input_scale": "input", "k_scale": "kv", "v_scale": "kv"}


class Bad(Exception):
    pass


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} of one file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise Bad(f"{path}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise Bad(f"{path}: header length {n} past the end of the file")
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        if not 0 <= b <= e <= len(raw) - base:
            raise Bad(f"{path}: tensor {name}: data_offsets {b}..{e} outside the file")
        out[name] = (meta["dtype"], tuple(meta["shape"]), raw[base + b:base + e])
    return out


def read_checkpoint(d):
    """All tensors of a checkpoint directory, whatever its shard layout."""
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    if not files:
        raise Bad(f"{d}: no .safetensors files")
    tensors = {}
    for f in files:
        for name, t in read_safetensors(os.path.join(d, f)).items():
            if name in tensors:
                raise Bad(f"{d}: tensor {name} in two shards")
            tensors[name] = t
    return tensors


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def scalar_f32(t):
    dtype, shape, data = t
    if dtype != "F32" or len(data) != 4:
        raise Bad(f"a scale is {dtype} {list(shape)}, not an F32 scalar")
    return struct.unpack("<f", data)[0]


def modules_of(tensors):
    """The quantizable modules of a checkpoint: those with a weight of two or more dimensions
    (linears, embeddings, the conv1d; not norms), which is what an exclusion list is about."""
    return {n[:-len(".weight")] for n, t in tensors.items() if n.endswith(".weight") and len(t[1]) >= 2}


def matched(patterns, modules):
    """The modules an exclusion list covers: exact names, fnmatch globs, and a name's children."""
    out = set()
    for p in patterns or []:
        for m in modules:
            if m == p or fnmatch.fnmatchcase(m, p) or m.startswith(p + "."):
                out.add(m)
    return out


def config_diffs(a_dir, b_dir, modules):
    diffs = []
    qa = (load_json(os.path.join(a_dir, "hf_quant_config.json")) or {}).get("quantization")
    qb = (load_json(os.path.join(b_dir, "hf_quant_config.json")) or {}).get("quantization")
    if qa is None or qb is None:
        diffs.append(f"hf_quant_config.json: quantization missing in {'A' if qa is None else 'B'}")
    else:
        for k in sorted(set(qa) | set(qb)):
            if k == "exclude_modules":
                ma, mb = matched(qa.get(k), modules), matched(qb.get(k), modules)
                if ma != mb:
                    diffs.append(f"hf_quant_config.json: exclude_modules cover different modules: only A "
                                 f"{sorted(ma - mb)[:6]}, only B {sorted(mb - ma)[:6]}")
            elif qa.get(k) != qb.get(k):
                diffs.append(f"hf_quant_config.json: {k}: {json.dumps(qa.get(k))[:120]} vs {json.dumps(qb.get(k))[:120]}")
    ca = (load_json(os.path.join(a_dir, "config.json")) or {}).get("quantization_config")
    cb = (load_json(os.path.join(b_dir, "config.json")) or {}).get("quantization_config")
    if ca is None or cb is None:
        diffs.append(f"config.json: quantization_config missing in {'A' if ca is None else 'B'}")
    else:
        for k in sorted(set(ca) | set(cb)):
            if k == "producer":
                continue
            if k == "ignore":
                ma, mb = matched(ca.get(k), modules), matched(cb.get(k), modules)
                if ma != mb:
                    diffs.append(f"config.json: quantization_config.ignore covers different modules: only A "
                                 f"{sorted(ma - mb)[:6]}, only B {sorted(mb - ma)[:6]}")
            elif ca.get(k) != cb.get(k):
                diffs.append(f"config.json: quantization_config.{k}: {json.dumps(ca.get(k))[:120]} vs "
                             f"{json.dumps(cb.get(k))[:120]}")
    return diffs


def compare(a_dir, b_dir, rtol):
    ta, tb = read_checkpoint(a_dir), read_checkpoint(b_dir)
    r = {"exact_total": 0, "exact_identical": 0, "exact_diffs": [], "only_a": sorted(set(ta) - set(tb)),
         "only_b": sorted(set(tb) - set(ta)), "scales": 0, "worst": {"input": None, "kv": None}, "scale_diffs": []}
    for name in sorted(set(ta) & set(tb)):
        kind = SCALE_SUFFIXES.get(name.rsplit(".", 1)[-1])
        if kind is None:
            r["exact_total"] += 1
            if ta[name] == tb[name]:
                r["exact_identical"] += 1
            else:
                (da, sa, xa), (db, sb, xb) = ta[name], tb[name]
                why = (f"dtype {da} vs {db}" if da != db else f"shape {list(sa)} vs {list(sb)}" if sa != sb
                       else f"{sum(p != q for p, q in zip(xa, xb))} of {len(xa)} bytes differ")
                r["exact_diffs"].append(f"{name}: {why}")
            continue
        r["scales"] += 1
        va, vb = scalar_f32(ta[name]), scalar_f32(tb[name])
        rel = abs(va - vb) / abs(vb) if vb else (0.0 if va == vb else float("inf"))
        w = r["worst"][kind]
        if w is None or rel > w[0]:
            r["worst"][kind] = (rel, name, va, vb)
        if rel > rtol:
            r["scale_diffs"].append(f"{name}: {va:.9g} vs {vb:.9g} (rel {rel:.3g} > {rtol:.3g})")
    r["config_diffs"] = config_diffs(a_dir, b_dir, modules_of(ta) | modules_of(tb))
    r["equal"] = not (r["exact_diffs"] or r["only_a"] or r["only_b"] or r["scale_diffs"] or r["config_diffs"])
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        r = compare(a.a, a.b, a.rtol)
    except (Bad, OSError, ValueError) as e:
        print(f"compare: {e}", file=sys.stderr)
        sys.exit(2)
    if a.json:
        print(json.dumps(r, indent=1))
    else:
        print(f"tensors byte-identical: {r['exact_identical']}/{r['exact_total']}; scales compared: {r['scales']}")
        for k, w in r["worst"].items():
            if w:
                print(f"worst {k} scale: rel {w[0]:.3g} at {w[1]} ({w[2]:.9g} vs {w[3]:.9g})")
        for line in r["exact_diffs"] + r["scale_diffs"] + r["config_diffs"]:
            print("  " + line)
        for n in r["only_a"]:
            print(f"  only in A: {n}")
        for n in r["only_b"]:
            print(f"  only in B: {n}")
        print("equal" if r["equal"] else "different")
    sys.exit(0 if r["equal"] else 1)


if __name__ == "__main__":
    main()
