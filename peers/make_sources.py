"""Source checkpoints written by transformers itself, and the shared calibration ids.

Random init from small configs with fixed seeds, saved with ``save_pretrained`` in F32 and
BF16 (the BF16 checkpoint is the F32 one loaded with ``from_pretrained(dtype=torch.bfloat16)``
and saved again, so the two hold the same weights up to that rounding, and tensors that
transformers keeps in F32 stay F32).  Every 1-D parameter and buffer (norm weights, biases,
A_log, dt_bias, DeepSeek's e_score_correction_bias) gets noise on top of transformers' init
(ones / zeros), so a norm that is applied the wrong way round, or a bias that is ignored,
changes the statistics.

    python peers/make_sources.py OUT_DIR [--archs llama,qwen3,...] [--size tiny|speed]
    python peers/make_sources.py --calib FILE.jsonl --vocab V --samples N --seq L [--seed S]

Run in the modelopt venv (peers/setup.sh): its transformers writes the sources.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

SEED = 20260923
VOCAB = 64  # tiny sources: every calibration id is below this


def tiny_configs():
    """Small configs: every linear's input width is a multiple of 16 (NVFP4 blocks)."""
    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.05)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return {
        "llama": transformers.LlamaConfig(**common, intermediate_size=64, num_attention_heads=4,
                                          num_key_value_heads=2, head_dim=16, rope_parameters=rope),
        # head_dim 32 != hidden / heads (16): q_norm / k_norm over head_dim
        "qwen3": transformers.Qwen3Config(**common, intermediate_size=64, num_attention_heads=4,
                                          num_key_value_heads=2, head_dim=32, rope_parameters=rope),
        # layer 0 dense (mlp_only_layers), layer 1 sparse: both kinds of MLP
        "qwen3_moe": transformers.Qwen3MoeConfig(**common, intermediate_size=64, moe_intermediate_size=16,
                                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                                 num_local_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                                                 decoder_sparse_step=1, mlp_only_layers=[0], rope_parameters=rope),
        "mixtral": transformers.MixtralConfig(**common, intermediate_size=32, num_attention_heads=4,
                                              num_key_value_heads=2, head_dim=16, num_local_experts=4,
                                              num_experts_per_tok=2, rope_parameters=rope),
        # MLA with q_lora, first layer dense, 8 routed experts in 2 groups + 1 shared
        "deepseek_v3": transformers.DeepseekV3Config(
            **common, intermediate_size=64, moe_intermediate_size=16, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
            v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2,
            topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
            rope_parameters=rope),
        # one Gated DeltaNet layer, one gated full-attention layer, MoE + shared expert in both
        "qwen3_next": transformers.Qwen3NextConfig(
            **common, intermediate_size=64, moe_intermediate_size=16, shared_expert_intermediate_size=16,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
            layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
    }


def speed_config():
    """qwen3_moe of about 1.2 GB in BF16 for the speed comparison (part 7)."""
    return transformers.Qwen3MoeConfig(
        vocab_size=32000, hidden_size=1024, num_hidden_layers=10, max_position_embeddings=4096, rms_norm_eps=1e-6,
        tie_word_embeddings=False, initializer_range=0.02, intermediate_size=2048, moe_intermediate_size=512,
        num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_local_experts=32, num_experts_per_tok=4,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def perturb_1d(model, gen):
    """Noise on every 1-D parameter and buffer, so norms and biases are not the identity."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.ndim != 1 or not t.is_floating_point() or "inv_freq" in name:
                continue
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float32) * 0.1
            t.copy_((t.float() + noise).to(t.dtype))


def write_model(cfg, out_dir, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    perturb_1d(model, gen)
    model.eval()
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        d = f"{out_dir}-{tag}"
        if dtype == torch.float32:
            model.save_pretrained(d)
        else:
            # loaded back the way a BF16 checkpoint is loaded, so that tensors transformers keeps
            # in F32 (DeepSeek-V3's e_score_correction_bias: _keep_in_fp32_modules_strict) stay F32
            AutoModelForCausalLM.from_pretrained(f"{out_dir}-f32", dtype=dtype).save_pretrained(d)
        with open(os.path.join(d, "PEERS_SOURCE.json"), "w") as f:
            json.dump({"seed": seed, "dtype": tag, "transformers": transformers.__version__,
                       "torch": torch.__version__, "writer": "peers/make_sources.py"}, f, indent=1)
        print(f"make_sources: {d}")


def write_calib(path, vocab, samples, seq, seed):
    """`samples` sequences of `seq` ids drawn uniformly from [0, vocab) (no padding needed)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (samples, seq), generator=gen)
    with open(path, "w") as f:
        for row in ids.tolist():
            f.write(json.dumps({"input_ids": row}) + "\n")
    print(f"make_sources: {path} ({samples} x {seq} ids below {vocab})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--archs", default=",".join(tiny_configs()))
    ap.add_argument("--size", choices=("tiny", "speed"), default="tiny")
    ap.add_argument("--calib")
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--seed", type=int, default=SEED)
    a = ap.parse_args()
    if a.calib:
        write_calib(a.calib, a.vocab, a.samples, a.seq, a.seed)
        return
    if not a.out:
        ap.error("OUT_DIR or --calib is required")
    if a.size == "speed":
        write_model(speed_config(), os.path.join(a.out, "qwen3_moe-speed"), a.seed)
        return
    cfgs = tiny_configs()
    for i, arch in enumerate(a.archs.split(",")):
        if arch not in cfgs:
            sys.exit(f"make_sources: unknown architecture {arch!r} (have {', '.join(cfgs)})")
        write_model(cfgs[arch], os.path.join(a.out, arch), a.seed + 100 * i)


if __name__ == "__main__":
    main()
