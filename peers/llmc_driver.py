"""llm-compressor on the CPU, for the speed comparison (issue 23 part 7): oneshot() with a
QuantizationModifier of compressed-tensors' preset scheme (NVFP4, or FP8 = static per-tensor
W8A8 with min-max observers, the equivalent of Model Optimizer's FP8 max) over the shared
calibration ids, then save_pretrained.  Routers and lm_head stay unquantized.

    .peers/venvs/llmcompressor/bin/python peers/llmc_driver.py --src SRC --out OUT \
        --calib ids.jsonl --scheme NVFP4 [--batch-size 8]

moe_calibrate_all_experts is set to False, so that each expert sees the tokens routed to it,
as in lwq and Model Optimizer (llm-compressor's default, True, runs every expert on every token).
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modelopt_driver import load_ids  # noqa: E402  (pure: json + torch)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--calib-size", type=int, default=None)
    ap.add_argument("--scheme", required=True, choices=("NVFP4", "FP8"))
    ap.add_argument("--batch-size", type=int, default=8)
    a = ap.parse_args()

    t0 = time.time()
    import llmcompressor
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    ids = load_ids(a.calib, a.calib_size)
    ds = Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()})
    model = AutoModelForCausalLM.from_pretrained(a.src, dtype="auto", device_map="cpu")
    recipe = QuantizationModifier(targets="Linear", scheme=a.scheme,
                                  ignore=["lm_head", "re:.*mlp.gate$", "re:.*block_sparse_moe.gate$"])
    t1 = time.time()
    oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=ids.shape[1], num_calibration_samples=ids.shape[0],
            batch_size=a.batch_size, shuffle_calibration_samples=False, moe_calibrate_all_experts=False)
    t2 = time.time()
    model.save_pretrained(a.out, save_compressed=True)
    t3 = time.time()
    run = {"command": " ".join(sys.argv), "llmcompressor": llmcompressor.__version__, "torch": torch.__version__,
           "load_s": round(t1 - t0, 3), "quantize_s": round(t2 - t1, 3), "export_s": round(t3 - t2, 3)}
    with open(os.path.join(a.out, "PEERS_RUN.json"), "w") as f:
        json.dump(run, f, indent=1)
    print(f"llmc_driver: {a.out} ({run['quantize_s']} s quantize, {run['export_s']} s save)")


if __name__ == "__main__":
    main()
