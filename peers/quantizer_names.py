"""The quantizer names Model Optimizer 0.47 matches recipe quantizer_name globs against, for each
tiny source in tests/data/peers/src (issue 33): the model as transformers 5.14.1 holds it in
memory, its modules replaced by Model Optimizer's quantized ones (mtq.quantize with every quantizer
disabled, no calibration), and every TensorQuantizer's name from named_modules(), as
conversion.py _match_quantizer sees them.  Written to tests/data/peers/qnames/<src>.json:
{"src", "model_type", "versions", "quantizers": [...]} (sorted).

    .peers/venvs/modelopt/bin/python peers/quantizer_names.py [SRC...]

tests/layout/recipe/test_recipe_qnames.c checks lwq's in-memory names of every planned linear against
these lists."""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "tests", "data", "peers", "src")
DEST = os.path.join(ROOT, "tests", "data", "peers", "qnames")


def names_of(src):
    import modelopt
    import modelopt.torch.quantization as mtq
    import transformers
    from modelopt.torch.quantization.nn import TensorQuantizer
    from transformers import AutoConfig

    cfgj = json.load(open(os.path.join(src, "config.json")))
    arch = AutoConfig.from_pretrained(src).architectures[0]
    model = getattr(transformers, arch).from_pretrained(src, dtype=torch.float32, device_map="cpu")
    model.eval()
    mtq.quantize(model, {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": None},
                 forward_loop=None)
    q = sorted(n for n, m in model.named_modules() if isinstance(m, TensorQuantizer))
    return {"src": os.path.basename(src), "model_type": cfgj.get("model_type"), "architecture": arch,
            "versions": {"modelopt": modelopt.__version__, "transformers": transformers.__version__,
                         "torch": torch.__version__},
            "command": ".peers/venvs/modelopt/bin/python peers/quantizer_names.py",
            "quantizers": q}


def main():
    os.makedirs(DEST, exist_ok=True)
    srcs = sys.argv[1:] or sorted(d for d in os.listdir(SRC) if d.endswith("-f32"))
    for s in srcs:
        try:
            out = names_of(os.path.join(SRC, s))
        except Exception as ex:  # a family this transformers cannot load (kimi_linear: 5.23)
            print(f"quantizer_names: {s}: {type(ex).__name__}: {ex}; left out", file=sys.stderr)
            continue
        with open(os.path.join(DEST, s + ".json"), "w") as f:
            json.dump(out, f, indent=0)
            f.write("\n")
        print(f"quantizer_names: {s}: {len(out['quantizers'])} quantizers")


if __name__ == "__main__":
    main()
