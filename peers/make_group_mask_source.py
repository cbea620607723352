"""A DeepSeek-V3 source whose chosen expert group has fewer than top-k experts with a positive
biased score: where filling the other groups' choice scores with 0.0 and with -inf route
differently.

    python peers/make_group_mask_source.py SRC_DIR OUT_DIR [--model-type kimi_k2]

SRC_DIR: a transformers-written deepseek_v3 checkpoint (peers/make_sources.py; 8 routed experts in
n_group 2 groups of 4, topk_group 1, top-2).  OUT_DIR: the same model with every MoE layer's
`mlp.gate.e_score_correction_bias` set to [2, -5, -5, -5, -5, -5, -5, -5]: the biased score
sigmoid + bias of expert 0 is above 1 and of every other expert below -4, so group 0 (score
= the sum of its two best, about -2.5) is always chosen over group 1 (about -9), and it holds a
single positive biased score for a top-2.  transformers 5.14.1's DeepseekV3TopkRouter fills the
unchosen group with -inf, so the second expert is group 0's best negative one; a fill of 0.0 (the
remote modeling_deepseek.py of DeepSeek's checkpoints, transformers 4) picks expert 4 of group 1
instead, for every token.  --model-type kimi_k2 writes the config as Kimi-K2 does (transformers
5.14.1 has no kimi_k2 model: it reads such a text config as deepseek_v3, Kimi-K2.5's wrapper
does that), for lwq's kimi_k2 row; transformers' forward is the deepseek_v3 one.
"""

import argparse
import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

BIAS = [2.0, -5.0, -5.0, -5.0, -5.0, -5.0, -5.0, -5.0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--model-type", default="deepseek_v3", choices=("deepseek_v3", "kimi_k2"))
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    assert cfg["model_type"] == "deepseek_v3" and cfg["n_routed_experts"] == len(BIAS), "a tiny deepseek_v3 source"
    assert cfg["n_group"] == 2 and cfg["topk_group"] == 1 and cfg["num_experts_per_tok"] == 2
    t = load_file(os.path.join(a.src, "model.safetensors"))
    n = 0
    for k in t:
        if k.endswith("mlp.gate.e_score_correction_bias"):
            t[k] = torch.tensor(BIAS, dtype=t[k].dtype)
            n += 1
    assert n, "no e_score_correction_bias"
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    cfg["model_type"] = a.model_type
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(a.src, extra)):
            shutil.copy(os.path.join(a.src, extra), a.out)
    save_file(t, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(a.out, "PEERS_SOURCE.json"), "w") as f:
        json.dump({"from": os.path.basename(os.path.normpath(a.src)), "writer": "peers/make_group_mask_source.py",
                   "e_score_correction_bias": BIAS, "model_type": a.model_type, "torch": torch.__version__}, f, indent=1)
        f.write("\n")
    print(f"make_group_mask_source: {n} biases set: {a.out}")


if __name__ == "__main__":
    main()
