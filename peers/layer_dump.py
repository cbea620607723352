"""transformers' own forward of a checkpoint, layer by layer: the hidden state entering each
decoder layer and the one leaving it, F32, for the first calibration sequences.

    python peers/layer_dump.py SRC_DIR OUT.safetensors --calib ids.jsonl [--seqs 2]
    python peers/layer_dump.py SRC_DIR OUT.safetensors --calib ids.jsonl --seqs 3 --seq 80 --pad 0,5,17

Loads SRC_DIR in F32 with the class config.json names (a VLM wrapper's language model is
model.model.language_model), runs the text model on the first --seqs calibration rows as one
unpadded batch (causal, positions 0..T-1: the text-only mRoPE), and writes
  input_ids       I32 (seqs, T)
  hidden.0        F32 (seqs, T, H)   the embedding output = layer 0's input
  hidden.{i+1}    F32 (seqs, T, H)   layer i's output = layer i+1's input
taken with forward hooks on the decoder layers themselves (no re-implementation here), plus
metadata: the layer root, the layer types, the versions.  --seq T makes sequences of T ids from
the calibration ids read in order (rows concatenated), and --pad P0,P1,.. left-pads sequence s
with P_s pad positions (id 0, attention_mask 0: the first P_s ids of the sequence are replaced);
the dump then also holds attention_mask I32 (seqs, T), and only its 1-positions are the model's.  tests/engine/forward/
test_forward_peer_layers.c feeds hidden.i to lwq's layer i and compares with hidden.{i+1}.

Run in the modelopt venv (peers/setup.sh).
"""

import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig


def save_safetensors(tensors, path, metadata):
    """A safetensors file with its header's keys in sorted order (safetensors' own writer orders
    __metadata__ as a hash map does, so the bytes would change from run to run)."""
    header, blobs, off = {"__metadata__": dict(sorted(metadata.items()))}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": {torch.float32: "F32", torch.int32: "I32"}[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)


def text_model(model):
    """The module holding embed_tokens and layers, and its state-dict prefix."""
    if hasattr(model, "model") and hasattr(model.model, "language_model"):
        return model.model.language_model, "model.language_model."
    return model.model, "model."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--calib", required=True)
    ap.add_argument("--seqs", type=int, default=2)
    ap.add_argument("--seq", type=int, default=0, help="tokens per sequence (default: a calibration row's)")
    ap.add_argument("--pad", default="", help="left padding of each sequence, comma-separated")
    a = ap.parse_args()
    with open(a.calib) as f:
        rows = [json.loads(line)["input_ids"] for line in f if line.strip()]
    if a.seq:
        flat = [t for r in rows for t in r]
        if len(flat) < a.seqs * a.seq:
            sys.exit(f"layer_dump: {a.calib}: fewer than {a.seqs} x {a.seq} ids")
        rows = [flat[i * a.seq:(i + 1) * a.seq] for i in range(a.seqs)]
    rows = rows[:a.seqs]
    if len(rows) < a.seqs or len({len(r) for r in rows}) != 1:
        sys.exit(f"layer_dump: {a.calib}: need {a.seqs} rows of one length")
    ids = torch.tensor(rows, dtype=torch.long)
    mask = torch.ones_like(ids)
    pads = [int(p) for p in a.pad.split(",")] if a.pad else []
    if pads and (len(pads) != a.seqs or not all(0 <= p < ids.shape[1] for p in pads)):
        sys.exit(f"layer_dump: --pad needs {a.seqs} values in [0, {ids.shape[1]})")
    for s, p in enumerate(pads):
        ids[s, :p] = 0
        mask[s, :p] = 0

    cfg = AutoConfig.from_pretrained(a.src)
    model = getattr(transformers, cfg.architectures[0]).from_pretrained(a.src, dtype=torch.float32, device_map="cpu")
    model.eval()
    tm, root = text_model(model)
    states = {}

    def pre(i):
        def hook(mod, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            if i == 0:
                states["hidden.0"] = h.detach().clone()
        return hook

    def post(i):
        def hook(mod, args, kwargs, out):
            h = out[0] if isinstance(out, tuple) else out
            states[f"hidden.{i + 1}"] = h.detach().clone()
        return hook

    for i, layer in enumerate(tm.layers):
        layer.register_forward_pre_hook(pre(i), with_kwargs=True)
        layer.register_forward_hook(post(i), with_kwargs=True)
    with torch.no_grad():
        tm(input_ids=ids, attention_mask=mask, use_cache=False)
    n = len(tm.layers)
    if sorted(states) != sorted(f"hidden.{i}" for i in range(n + 1)):
        sys.exit(f"layer_dump: hooks saw {sorted(states)}, expected hidden.0..{n}")
    out = {k: v.float().contiguous() for k, v in states.items()}
    out["input_ids"] = ids.to(torch.int32)
    if pads:
        out["attention_mask"] = mask.to(torch.int32)
    tc = cfg.get_text_config()
    meta = {"src": os.path.basename(os.path.normpath(a.src)), "layer_root": root + "layers.",
            "layer_types": json.dumps(list(getattr(tc, "layer_types", []) or [])),
            "transformers": transformers.__version__, "torch": torch.__version__,
            "writer": "peers/layer_dump.py", "class": type(model).__name__}
    save_safetensors(out, a.out, meta)
    print(f"layer_dump: {a.out} ({n} layers, {ids.shape[0]} x {ids.shape[1]} tokens)")


if __name__ == "__main__":
    main()
