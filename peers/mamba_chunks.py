"""transformers 5.14.1's torch (non-CUDA-kernel) Mamba2 path against itself: its output depends on
chunk_size once a sequence spans more than one chunk.

    .peers/venvs/modelopt/bin/python peers/mamba_chunks.py SRC_DIR --calib ids.jsonl [--layer 0]

NemotronHMamba2Mixer.torch_forward computes the SSD scan in chunks; the state entering each chunk
is meant to be sum_c decay_chunk[z, c] * states[c] (Mamba2's einsum "bhzc,bchpn->bzhpn"), but the
code sums `decay_chunk[..., None, None] * states_permuted[:, :, None, ...]` over dim 2 (z) instead of
dim 3 (c).  This script runs that mixer, unchanged, on the first calibration rows with chunk_size 4,
8, 16 and with one chunk for the whole sequence (where the inter-chunk step does nothing), and the
same torch_forward with only that one axis changed (its source patched in memory, nothing written):
the shipped path moves by ~1e-4 with the chunk size, the one-axis change agrees with the one-chunk
run to float32 rounding.  lwq computes the recurrence itself (engine/forward/model_nemotron.c), which
is the one-chunk value; so its goldens use chunk_size 128 and 32-token sequences (docs/FAMILIES.md).
"""

import argparse
import inspect
import json
import textwrap

import torch
import transformers
import transformers.models.nemotron_h.modeling_nemotron_h as nh


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("--calib", required=True)
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--layer", type=int, default=0)
    a = ap.parse_args()
    model = transformers.NemotronHForCausalLM.from_pretrained(a.src, dtype=torch.float32)
    layer = model.model.layers[a.layer]
    if layer.block_type != "linear_attention":
        raise SystemExit(f"mamba_chunks: layer {a.layer} is {layer.block_type}, not a Mamba2 layer")
    with open(a.calib) as f:
        ids = torch.tensor([json.loads(line)["input_ids"] for line in f if line.strip()][:a.seqs])
    text = textwrap.dedent(inspect.getsource(nh.NemotronHMamba2Mixer.torch_forward))
    wrong = "states_permuted[:, :, None, ...]).sum(dim=2)"
    if text.count(wrong) != 1:
        raise SystemExit("mamba_chunks: this transformers' torch_forward has no .sum(dim=2) inter-chunk step")
    ns = dict(vars(nh))
    exec(text.replace(wrong, "states_permuted[:, :, None, ...]).sum(dim=3)").replace(
        "def torch_forward", "def torch_forward_dim3"), ns)
    mixer, T = layer.mixer, ids.shape[1]
    with torch.no_grad():
        x = layer.norm(model.model.embeddings(ids))
        mixer.chunk_size = T
        one = mixer.torch_forward(x)
        print(f"{a.src} layer {a.layer}, {ids.shape[0]} x {T} tokens; relative to one chunk of {T}:")
        for cs in (4, 8, 16):
            mixer.chunk_size = cs
            shipped, dim3 = mixer.torch_forward(x), ns["torch_forward_dim3"](mixer, x)
            rel = lambda y: ((y - one).abs().max() / one.abs().max()).item()  # noqa: E731
            print(f"  chunk_size {cs:3d}: as shipped {rel(shipped):.3e}, inter-chunk sum over dim 3 {rel(dim3):.3e}")


if __name__ == "__main__":
    main()
