"""Source checkpoints written by transformers itself, and the shared calibration ids.

Random init from small configs with fixed seeds, saved with ``save_pretrained`` in F32 and
BF16 (the BF16 checkpoint is the F32 one loaded with ``from_pretrained(dtype=torch.bfloat16)``
and saved again, so the two hold the same weights up to that rounding, and tensors that
transformers keeps in F32 stay F32).  Every 1-D parameter and buffer (norm weights, biases,
A_log, dt_bias, DeepSeek's e_score_correction_bias) gets noise on top of transformers' init
(ones / zeros), so a norm that is applied the wrong way round, or a bias that is ignored,
changes the statistics.

    python peers/make_sources.py OUT_DIR [--archs llama,qwen3,...] [--size tiny|speed]
    python peers/make_sources.py /tmp/speed --size speed --archs qwen3_5_moe   # ~1.3 GB, BF16 only
    python peers/make_sources.py --calib FILE.jsonl --vocab V --samples N --seq L [--seed S]

Run in the modelopt venv (peers/setup.sh): its transformers writes the sources.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
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


def qwen3_5_text(moe):
    """Qwen3.5 / 3.6 text config: one Gated DeltaNet layer (split in_proj_qkv / z / b / a), one
    gated full-attention layer (q_proj 2x wide: query and gate), partial rotary 0.25 with the
    interleaved mRoPE section of the published configs (sums to rotary_dim / 2 = 4), and the
    published configs' mtp_num_hidden_layers (transformers builds no MTP module: see with_mtp)."""
    d = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, max_position_embeddings=256, rms_norm_eps=1e-6,
             tie_word_embeddings=False, initializer_range=0.05, num_attention_heads=2, num_key_value_heads=1,
             head_dim=32, layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
             linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
             mtp_num_hidden_layers=1,
             rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                              "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    if moe:
        d.update(moe_intermediate_size=16, shared_expert_intermediate_size=16, num_experts=8, num_experts_per_tok=2)
    else:
        d.update(intermediate_size=32)
    return d


# a vision tower as small as the config allows: one block, patch 4, 16 wide, merged 2x2 into the
# text width (pos_embed's 16 entries are a 4x4 grid)
QWEN3_5_VISION = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=1, patch_size=4, temporal_patch_size=2,
                      spatial_merge_size=2, out_hidden_size=32, num_position_embeddings=16, initializer_range=0.05)


def qwen3_5_configs():
    """name -> (config, how save_pretrained writes it).  The VLM wrappers (what Qwen publishes:
    Qwen3_5[Moe]ForConditionalGeneration, model.language_model.* and model.visual.*, plus mtp.*)
    and the text-only *ForCausalLM forms (model.layers.*).  transformers 5.14.1 writes MoE experts
    per expert by default (save_original_format: experts.N.gate_proj.weight ...); the VLM MoE is
    written with save_original_format=False: its experts fused on disk, as 3-D
    mlp.experts.gate_up_proj [E, 2I, H] and mlp.experts.down_proj [E, H, I]."""
    return {
        "qwen3_5": (transformers.Qwen3_5Config(text_config=qwen3_5_text(False), vision_config=QWEN3_5_VISION,
                                               tie_word_embeddings=False), {}),
        "qwen3_5_moe": (transformers.Qwen3_5MoeConfig(text_config=qwen3_5_text(True), vision_config=QWEN3_5_VISION,
                                                      tie_word_embeddings=False), {"save_original_format": False}),
        "qwen3_5_text": (transformers.Qwen3_5TextConfig(**qwen3_5_text(False)), {}),
        "qwen3_5_moe_text": (transformers.Qwen3_5MoeTextConfig(**qwen3_5_text(True)), {}),
    }


def speed_config():
    """qwen3_moe of about 1.2 GB in BF16 for the speed comparison (part 7)."""
    return transformers.Qwen3MoeConfig(
        vocab_size=32000, hidden_size=1024, num_hidden_layers=10, max_position_embeddings=4096, rms_norm_eps=1e-6,
        tie_word_embeddings=False, initializer_range=0.02, intermediate_size=2048, moe_intermediate_size=512,
        num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_local_experts=32, num_experts_per_tok=4,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def speed_qwen3_5_moe_config():
    """A Qwen3.5-MoE-shaped VLM of about 1.3 GB in BF16 for the timing of issue 33 (written under
    /tmp, not committed): 12 layers in the published 3 x linear_attention + 1 x full_attention
    pattern, hidden 1024, 32 experts of 512 (top 4) and a 512-wide gated shared expert, a one-block
    vision tower and an MTP block, experts fused 3-D on disk as in qwen3_5_moe-*."""
    text = dict(vocab_size=32000, hidden_size=1024, num_hidden_layers=12, max_position_embeddings=4096,
                rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.02, num_attention_heads=8,
                num_key_value_heads=2, head_dim=128,
                layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 +
                ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
                linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=4,
                linear_num_value_heads=8, moe_intermediate_size=512, shared_expert_intermediate_size=512,
                num_experts=32, num_experts_per_tok=4, mtp_num_hidden_layers=1,
                rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [6, 5, 5], "mrope_interleaved": True})
    vision = dict(QWEN3_5_VISION, hidden_size=64, intermediate_size=64, num_heads=2, out_hidden_size=1024)
    return transformers.Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)


def perturb_1d(model, gen):
    """Noise on every 1-D parameter and buffer, so norms and biases are not the identity."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.ndim != 1 or not t.is_floating_point() or "inv_freq" in name:
                continue
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float32) * 0.1
            t.copy_((t.float() + noise).to(t.dtype))


def model_class(cfg):
    """The class the config names (as hf_ptq's get_model loads it); AutoModelForCausalLM would make a
    Qwen3_5ForCausalLM of a VLM config and drop its vision tower."""
    arch = (cfg.architectures or [None])[0]
    if arch is None:
        arch = {"qwen3_5": "Qwen3_5ForConditionalGeneration", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
                "qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM"}.get(cfg.model_type)
    return getattr(transformers, arch) if arch else AutoModelForCausalLM


def mtp_tensors(model, gen):
    """An MTP block as the published Qwen3.5 / 3.6 VLM checkpoints carry it beside the model
    (mtp.fc [H, 2H], mtp.pre_fc_norm_{embedding,hidden}, one full-attention decoder layer of the
    model's own kind under mtp.layers.0., mtp.norm).  transformers builds no module for it (it
    ignores ^mtp.* on load), so the tensors are made here, random with a fixed seed, in F32."""
    tc = model.config.get_text_config()
    full = tc.layer_types.index("full_attention")
    layer = type(model.model.language_model.layers[full])(tc, full)
    h = tc.hidden_size
    out = {"mtp.fc.weight": torch.randn((h, 2 * h), generator=gen) * 0.05}
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        out[f"mtp.{n}.weight"] = torch.randn((h,), generator=gen) * 0.1
    for n, t in layer.state_dict().items():
        out[f"mtp.layers.0.{n}"] = (torch.randn(t.shape, generator=gen) * (0.1 if t.ndim == 1 else 0.05)).contiguous()
    return out


def add_tensors(d, extra, dtype):
    """Append `extra` (cast to dtype) to d/model.safetensors (one file: the tiny models are one shard)."""
    p = os.path.join(d, "model.safetensors")
    if not os.path.exists(p):
        sys.exit(f"make_sources: {d}: expected a single model.safetensors to add the MTP block to")
    t = load_file(p)
    t.update({k: v.to(dtype) for k, v in extra.items()})
    save_file(t, p, metadata={"format": "pt"})


def write_model(cfg, out_dir, seed, save_kwargs=None, dtypes=("f32", "bf16")):
    save_kwargs = save_kwargs or {}
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    cls = model_class(cfg)
    model = (cls.from_config(cfg, dtype=torch.float32) if cls is AutoModelForCausalLM
             else cls._from_config(cfg, dtype=torch.float32))
    perturb_1d(model, gen)
    model.eval()
    mtp = mtp_tensors(model, gen) if getattr(cfg.get_text_config(), "mtp_num_hidden_layers", 0) and \
        hasattr(model.model, "language_model") else None
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        if tag not in dtypes:
            continue
        d = f"{out_dir}-{tag}"
        if dtype == torch.float32:
            model.save_pretrained(d, **save_kwargs)
        elif "f32" not in dtypes:  # BF16 only (the speed model): the same rounding, no F32 copy on disk
            model.to(dtype).save_pretrained(d, **save_kwargs)
        else:
            # loaded back the way a BF16 checkpoint is loaded, so that tensors transformers keeps
            # in F32 (DeepSeek-V3's e_score_correction_bias: _keep_in_fp32_modules_strict) stay F32
            cls.from_pretrained(f"{out_dir}-f32", dtype=dtype).save_pretrained(d, **save_kwargs)
        if mtp is not None:
            add_tensors(d, mtp, dtype)
        with open(os.path.join(d, "PEERS_SOURCE.json"), "w") as f:
            json.dump({"seed": seed, "dtype": tag, "transformers": transformers.__version__,
                       "torch": torch.__version__, "writer": "peers/make_sources.py", "class": cls.__name__,
                       "save_pretrained": save_kwargs,
                       "mtp": "mtp.* added after save_pretrained (peers/make_sources.py mtp_tensors)" if mtp else None},
                      f, indent=1)
        print(f"make_sources: {d}")


def write_calib(path, vocab, samples, seq, seed):
    """`samples` sequences of `seq` ids drawn uniformly from [0, vocab) (no padding needed)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (samples, seq), generator=gen)
    with open(path, "w") as f:
        for row in ids.tolist():
            f.write(json.dumps({"input_ids": row}) + "\n")
    print(f"make_sources: {path} ({samples} x {seq} ids below {vocab})")


# ---- issue 34: the MLA / sparse-attention-indexer / router families ----------------------------------

def families34_configs():
    """name -> (config, model class).  Hidden 32 (two NVFP4 blocks), 2 layers, vocab 64:
      glm4_moe     GQA with q/k/v bias and per-head q/k RMSNorm, partial rotary 0.5 (rotate_half);
                   layer 0 dense (first_k_dense_replace), layer 1 DeepSeek-V3 routing (sigmoid + bias,
                   2 groups, top-1 group) + one shared expert; one MTP layer (model.layers.2.*,
                   added after save_pretrained: glm_mtp_tensors)
      minimax_m2   GQA with full-width q/k RMSNorm, partial rotary 0.5; every layer MoE, sigmoid +
                   e_score_correction_bias top-2 without groups, Mixtral names (block_sparse_moe.experts.N.w1/w2/w3)
      deepseek_v32 DeepSeek-V3 MLA + the DSA indexer (wq_b, wk, k_norm LayerNorm, weights_proj), index_topk
                   32 = the calibration length: every key selected, the attention exactly dense
      glm_moe_dsa  the same with the indexer's interleaved RoPE and indexer_types "FS": layer 1 reuses
                   layer 0's selection and holds no indexer
      mistral4     MLA with a softmax router (1 group), a shared expert, YaRN rope (factor 32 = 256 / 8) and the
                   Llama-4 query scale; original_max_position_embeddings 8, so that the scale 1 + 0.1 ln(1 + floor(pos/8))
                   changes within a 32-token calibration sequence"""
    common = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.05,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    mla = dict(intermediate_size=32, moe_intermediate_size=16, num_attention_heads=4, num_key_value_heads=4,
               q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
               n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, norm_topk_prob=True)
    dsa = dict(mla, first_k_dense_replace=1, routed_scaling_factor=2.5, index_topk=32, index_head_dim=32,
               index_n_heads=2, rope_parameters=rope)
    return {
        "glm4_moe": (transformers.Glm4MoeConfig(
            **common, intermediate_size=32, moe_intermediate_size=16, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, attention_bias=True, use_qk_norm=True, n_routed_experts=8, n_shared_experts=1,
            num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, num_nextn_predict_layers=1, rope_parameters=dict(rope, partial_rotary_factor=0.5)),
            transformers.Glm4MoeForCausalLM),
        "minimax_m2": (transformers.MiniMaxM2Config(
            **common, intermediate_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_local_experts=8, num_experts_per_tok=2, rope_parameters=dict(rope, partial_rotary_factor=0.5)),
            transformers.MiniMaxM2ForCausalLM),
        "deepseek_v32": (transformers.DeepseekV32Config(**common, **dsa, n_group=2, topk_group=1),
                         transformers.DeepseekV32ForCausalLM),
        "glm_moe_dsa": (transformers.GlmMoeDsaConfig(**common, **dsa, n_group=1, topk_group=1, index_topk_pattern="FS"),
                        transformers.GlmMoeDsaForCausalLM),
        # not in transformers' AutoModelForCausalLM table: the class itself
        "mistral4": (transformers.Mistral4Config(
            **common, **mla, n_group=1, topk_group=1, first_k_dense_replace=0, routed_scaling_factor=1.0,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 32.0,
                             "original_max_position_embeddings": 8, "max_position_embeddings": 256,
                             "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                             "llama_4_scaling_beta": 0.1}),
            transformers.Mistral4ForCausalLM),
    }


def kimi_linear_configs():
    """Issue 35's kimi_linear (Kimi-Linear): needs transformers >= 5.23 (5.14.1, the version of the
    modelopt venv, has no kimi_linear; docs/FAMILIES.md): name -> (config, model class).  Hidden 32,
    3 layers, vocab 64: layer 0 KDA + dense MLP (mlp_layer_types), layer 1 MLA (NoPE, q_proj
    without q_lora) + DeepSeek-V3 routing (8 experts in 2 groups, top-1 group, top-2, one shared
    expert), layer 2 KDA + MoE; KDA with 2 heads of 16, conv kernel 4."""
    common = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.05,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return {
        "kimi_linear": (transformers.KimiLinearConfig(
            **common, intermediate_size=32, moe_intermediate_size=16, num_attention_heads=4, num_key_value_heads=4,
            q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
            num_local_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
            routed_scaling_factor=2.5, norm_topk_prob=True,
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            mlp_layer_types=["dense", "sparse", "sparse"], linear_head_dim=16, linear_num_heads=2,
            linear_conv_kernel_dim=4), transformers.KimiLinearForCausalLM),
    }


# ---- issue 35: Nemotron-H / Nemotron-3 (Mamba2 + NoPE attention + ReLU^2 MLP / non-gated MoE) ---------

def nemotron_configs():
    """name -> (config, model class).  Hidden 32, vocab 64; the Mamba2 mixer with 4 heads of 8
    (intermediate 32), 2 groups of state 8 (conv_dim 64), conv kernel 4 and chunk_size 128 (the
    published models' value): every calibration sequence is one chunk of transformers' torch SSD
    path, whose inter-chunk state passing sums the chunk decays over the wrong axis (docs/FAMILIES.md,
    peers/mamba_chunks.py), so only single-chunk sequences compute the Mamba2 recurrence there:
      nemotron_h         hybrid_override_pattern "M-*EM": Mamba2, ReLU^2 MLP, NoPE GQA attention,
                         MoE (DeepSeek-V3 routing: sigmoid + bias, 2 groups, top-1 group, top-2,
                         routed_scaling_factor 2.5; non-gated ReLU^2 experts; one shared expert),
                         Mamba2 again
      nemotron_h_latent  "ME*E" with moe_latent_size 16: the routed experts run in a 16-wide latent
                         between fc1_latent_proj and fc2_latent_proj; one routing group"""
    common = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  intermediate_size=32, mamba_num_heads=4, mamba_head_dim=8, n_groups=2, ssm_state_size=8,
                  conv_kernel=4, chunk_size=128, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                  moe_shared_expert_intermediate_size=32, routed_scaling_factor=2.5, norm_topk_prob=True,
                  layer_norm_epsilon=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
                  initializer_range=0.05, use_mamba_kernels=False, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None)
    return {
        "nemotron_h": (transformers.NemotronHConfig(**common, hybrid_override_pattern="M-*EM", n_group=2,
                                                    topk_group=1), transformers.NemotronHForCausalLM),
        "nemotron_h_latent": (transformers.NemotronHConfig(**common, hybrid_override_pattern="ME*E", n_group=1,
                                                           topk_group=1, moe_latent_size=16),
                              transformers.NemotronHForCausalLM),
    }


def glm_mtp_tensors(model, gen):
    """GLM-4.5's MTP block as its checkpoints carry it, inlined after the decoder layers
    (model.layers.{num_hidden_layers}.: eh_proj [H, 2H], enorm, hnorm, shared_head.norm and one MoE
    decoder layer; GLM-4.6 has no shared_head.head / embed_tokens there).  transformers builds no
    module for it (Glm4MoePreTrainedModel ignores those keys on load), so the tensors are made here,
    random with a fixed seed, in F32."""
    cfg = model.config
    n, h = cfg.num_hidden_layers, cfg.hidden_size
    layer = type(model.model.layers[n - 1])(cfg, n)
    pre = f"model.layers.{n}."
    out = {pre + "eh_proj.weight": torch.randn((h, 2 * h), generator=gen) * 0.05}
    for k in ("enorm", "hnorm", "shared_head.norm"):
        out[pre + k + ".weight"] = 1 + torch.randn((h,), generator=gen) * 0.1
    sd = layer.state_dict()
    # on disk per expert, as the published checkpoints hold them (and transformers writes its own
    # layers): experts.E.{gate,up,down}_proj.weight from the fused [E, 2I, H] / [E, H, I] parameters
    gate_up, down = sd.pop("mlp.experts.gate_up_proj"), sd.pop("mlp.experts.down_proj")
    inter = gate_up.shape[1] // 2
    for e in range(gate_up.shape[0]):
        sd[f"mlp.experts.{e}.gate_proj.weight"] = gate_up[e, :inter]
        sd[f"mlp.experts.{e}.up_proj.weight"] = gate_up[e, inter:]
        sd[f"mlp.experts.{e}.down_proj.weight"] = down[e]
    for k, t in sd.items():
        if t.ndim == 1 and k.endswith("norm.weight"):
            out[pre + k] = 1 + torch.randn(t.shape, generator=gen) * 0.1
        else:
            out[pre + k] = (torch.randn(t.shape, generator=gen) * (0.1 if t.ndim == 1 else 0.05)).contiguous()
    return out


def write_family(name, cfg, cls, out_dir, seed):
    """write_model for the issue-34 families: the model class given (mistral4 has no
    AutoModelForCausalLM entry), glm4_moe's MTP layer appended to model.safetensors."""
    from safetensors.torch import load_file, save_file
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = cls._from_config(cfg, dtype=torch.float32)
    perturb_1d(model, gen)
    model.eval()
    mtp = glm_mtp_tensors(model, gen) if name == "glm4_moe" else None
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        d = f"{out_dir}-{tag}"
        if dtype == torch.float32:
            model.save_pretrained(d)
        else:
            cls.from_pretrained(f"{out_dir}-f32", dtype=dtype).save_pretrained(d)
        if mtp is not None:
            p = os.path.join(d, "model.safetensors")
            t = load_file(p)
            # e_score_correction_bias stays F32 as the layers transformers writes keep it
            t.update({k: v if k.endswith("e_score_correction_bias") else v.to(dtype) for k, v in mtp.items()})
            save_file(t, p, metadata={"format": "pt"})
        with open(os.path.join(d, "PEERS_SOURCE.json"), "w") as f:
            json.dump({"seed": seed, "dtype": tag, "transformers": transformers.__version__,
                       "torch": torch.__version__, "writer": "peers/make_sources.py", "class": cls.__name__,
                       "mtp": "model.layers.2.* added after save_pretrained (glm_mtp_tensors)" if mtp else None},
                      f, indent=1)
        print(f"make_sources: {d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--archs", default=",".join(list(tiny_configs()) + list(qwen3_5_configs())))
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
        if a.archs == "qwen3_5_moe":
            write_model(speed_qwen3_5_moe_config(), os.path.join(a.out, "qwen3_5_moe-speed"), a.seed,
                        {"save_original_format": False}, dtypes=("bf16",))
        else:
            write_model(speed_config(), os.path.join(a.out, "qwen3_moe-speed"), a.seed)
        return
    cfgs = {k: (v, {}) for k, v in tiny_configs().items()}
    cfgs.update(qwen3_5_configs())
    fam = families34_configs()
    kimi = ("kimi_linear",)
    nem = nemotron_configs()
    for arch in a.archs.split(","):
        if arch in nem:  # seeds of their own, from the row's place in the table
            write_family(arch, *nem[arch], os.path.join(a.out, arch), a.seed + 3500 + 100 * list(nem).index(arch))
            continue
        if arch in kimi:  # transformers >= 5.23 only (kimi_linear_configs)
            write_family(arch, *kimi_linear_configs()[arch], os.path.join(a.out, arch), a.seed + 3500)
            continue
        if arch in fam:  # the seed from the family's place in its table, whatever --archs asks for
            write_family(arch, *fam[arch], os.path.join(a.out, arch), a.seed + 3400 + 100 * list(fam).index(arch))
            continue
        if arch not in cfgs:
            sys.exit(f"make_sources: unknown architecture {arch!r} (have {', '.join(cfgs)})")
        # the seed is the architecture's place in the table, whatever --archs asks for: the
        # original six keep theirs (100 * i), the qwen3_5 ones follow
        i = list(cfgs).index(arch)
        write_model(cfgs[arch][0], os.path.join(a.out, arch), a.seed + 100 * i, cfgs[arch][1])


if __name__ == "__main__":
    main()
