"""FP8-block forms of transformers-written sources, as DeepSeek-V3, GLM-4.5 and MiniMax-M2 publish
theirs, and their dequantized forms, for Model Optimizer (which runs on the dequantized weights).

    python peers/make_fp8_block.py SRC_DIR FP8_DIR DEQUANT_DIR

FP8_DIR: SRC_DIR's config.json with `"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
"activation_scheme": "dynamic", "weight_block_size": [128, 128]}` and, for every linear weight the
published checkpoints store in FP8 (every 2-D `*_proj.weight` / expert `w1`/`w2`/`w3` weight,
the MTP layer's included; not the embeddings, lm_head, the routers or the norms), an F8_E4M3
`X.weight` and an F32 `X.weight_scale_inv` [ceil(rows/128), ceil(cols/128)] with one scale per
block: scale = amax(|block|) / 448 (1 for an all-zero block), code = E4M3(w / scale) (torch's
round-to-nearest-even cast).  Every other tensor is copied unchanged.

DEQUANT_DIR: the same model with every FP8 weight dequantized as lwq's FP8-block reader and
DeepSeek's own `weight_dequant` do: E4M3 code times its block's scale in float32, rounded to the
source's dtype (nearest even), scale tensors dropped, config.json without quantization_config.
Quantizing DEQUANT_DIR with Model Optimizer is what quantizing FP8_DIR means: the goldens
(peers/run.py group fp8block) come from it, and lwq reads FP8_DIR.
"""

import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

BLOCK = 128
FP8_MAX = 448.0


def is_fp8_weight(name, t):
    if t.dim() != 2 or not name.endswith(".weight"):
        return False
    mod = name[:-len(".weight")]
    leaf = mod.rsplit(".", 1)[-1]
    if leaf in ("gate", "embed_tokens", "lm_head") or "norm" in leaf:
        return False
    return leaf.endswith("_proj") or leaf in ("w1", "w2", "w3")


def quantize(w):
    rows, cols = w.shape
    sr, sc = -(-rows // BLOCK), -(-cols // BLOCK)
    w32 = w.float()
    code = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    sinv = torch.empty(sr, sc, dtype=torch.float32)
    for i in range(sr):
        for j in range(sc):
            b = w32[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            amax = b.abs().max().item()
            s = torch.tensor(amax / FP8_MAX if amax > 0 else 1.0, dtype=torch.float32)
            code[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = (b / s).to(torch.float8_e4m3fn)
            sinv[i, j] = s
    return code, sinv


def dequantize(code, sinv, dtype):
    full = sinv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:code.shape[0], :code.shape[1]]
    return (code.float() * full).to(dtype)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, fp8_dir, deq_dir = sys.argv[1:]
    cfg = json.load(open(os.path.join(src, "config.json")))
    tensors = load_file(os.path.join(src, "model.safetensors"))
    fp8, deq = {}, {}
    n = 0
    for name, t in sorted(tensors.items()):
        if is_fp8_weight(name, t):
            code, sinv = quantize(t)
            fp8[name] = code
            fp8[name + "_scale_inv"] = sinv
            deq[name] = dequantize(code, sinv, t.dtype)
            n += 1
        else:
            fp8[name] = deq[name] = t
    for d, ts, qc in ((fp8_dir, fp8, True), (deq_dir, deq, False)):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        c = dict(cfg)
        if qc:
            c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                        "weight_block_size": [BLOCK, BLOCK]}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
            f.write("\n")
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(src, extra)):
                shutil.copy(os.path.join(src, extra), os.path.join(d, extra))
        save_file({k: v.contiguous() for k, v in ts.items()}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})
        with open(os.path.join(d, "PEERS_SOURCE.json"), "w") as f:
            json.dump({"from": os.path.basename(os.path.normpath(src)), "writer": "peers/make_fp8_block.py",
                       "form": "fp8-block 128x128" if qc else "the fp8-block form dequantized",
                       "fp8_weights": n, "torch": torch.__version__}, f, indent=1)
            f.write("\n")
    print(f"make_fp8_block: {n} FP8 weights: {fp8_dir}, {deq_dir}")


if __name__ == "__main__":
    main()
