"""perf/bench_nemotron.sh: a Nemotron-shaped nemotron_h checkpoint (1.08 GB BF16: hidden 2688, Mamba2 64 x 64 heads,
8 groups, state 128; attention 32 x 128, 2 kv; MLP 10752; pattern M*M-M*M-; vocab 40960), random, via transformers.
usage: python perf/nemotron_bench_model.py OUT_DIR (the modelopt venv)"""
import sys
import torch, transformers, time
t=time.time()
cfg = transformers.NemotronHConfig(vocab_size=40960, hidden_size=2688, num_attention_heads=32, num_key_value_heads=2,
    head_dim=128, intermediate_size=10752, mamba_num_heads=64, mamba_head_dim=64, n_groups=8, ssm_state_size=128,
    conv_kernel=4, chunk_size=128, hybrid_override_pattern="M*M-M*M-", layer_norm_epsilon=1e-5,
    max_position_embeddings=4096, tie_word_embeddings=False, use_mamba_kernels=False, n_routed_experts=8,
    moe_intermediate_size=1856, moe_shared_expert_intermediate_size=3712)
torch.manual_seed(0)
with torch.device("cpu"):
    m = transformers.NemotronHForCausalLM._from_config(cfg, dtype=torch.bfloat16)
m.save_pretrained(sys.argv[1])
print("params", sum(p.numel() for p in m.parameters())/1e6, "M", time.time()-t, "s")
