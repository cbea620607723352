/* tools/mkmodel/mkmodel_qwen3next.h — the parts of `lwq mkmodel` specific to qwen3_next (Qwen3-Next /
 * Qwen3.8 hybrids), kept out of cmd_mkmodel.c's generic writer: the options of the Gated
 * DeltaNet geometry, their defaults and checks, the config.json keys (layer_types from
 * --full-attn-every, linear_* dims, partial_rotary_factor 0.25, shared expert, MTP), and the value
 * distribution of its tensors: the zero-centred (1 + w) norms ~N(0, 0.1), the gated norm ~1.0,
 * conv1d ~N(0, 0.3), A_log and dt_bias ~N(0, 0.5).  No state; errors go to stderr (tools/). */
#ifndef LWQ_TOOLS_MKMODEL_QWEN3NEXT_H
#define LWQ_TOOLS_MKMODEL_QWEN3NEXT_H

#include <stdint.h>

#include "layout/arch/arch.h"

struct cJSON;

typedef struct mk_qn_opts {
    int64_t lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel, full_every, shared_inter;
    int mtp; /* also write the MTP block (mtp.*) */
} mk_qn_opts;

#define LWQ_MKMODEL_QWEN3NEXT_USAGE                                                                \
    "qwen3_next only:\n"                                                                           \
    "  --linear-key-heads N  Gated DeltaNet key heads (default 2)\n"                               \
    "  --linear-value-heads N  value heads, a multiple of the key heads (default 2 x key heads)\n" \
    "  --linear-key-dim N    key head dim (default head dim)\n"                                    \
    "  --linear-value-dim N  value head dim (default head dim)\n"                                  \
    "  --conv-kernel N       conv1d kernel (default 4)\n"                                          \
    "  --full-attn-every N   every N-th layer is full attention (default 4)\n"                     \
    "  --shared-intermediate N  shared expert width (default = expert width)\n"                    \
    "  --mtp                 also write Multi-Token-Prediction weights (mtp.*)\n"

/* getopt_long codes of the options (the values of the `val` fields), 1..8. */
#define LWQ_MKMODEL_QWEN3NEXT_LONGOPTS                                                             \
    {"linear-key-heads", 1, 0, 1}, {"linear-value-heads", 1, 0, 2}, {"linear-key-dim", 1, 0, 3},   \
        {"linear-value-dim", 1, 0, 4}, {"conv-kernel", 1, 0, 5}, {"full-attn-every", 1, 0, 6},     \
        {"shared-intermediate", 1, 0, 7}, {"mtp", 0, 0, 8}

/* Handle option code `c` (1..8) with argument `arg`: 0 taken, -1 bad value (message printed). */
int lwq_mkmodel_qwen3next_option(mk_qn_opts *q, int c, const char *arg);
/* Defaults from the generic sizes; -1 (message printed) when the options do not fit `arch`. */
int lwq_mkmodel_qwen3next_finish(mk_qn_opts *q, const char *arch, int64_t head_dim,
                                 int64_t moe_inter);
/* config.json keys of a qwen3_next model of `layers` layers with the given expert settings. */
void lwq_mkmodel_qwen3next_config(struct cJSON *c, const mk_qn_opts *q, int64_t layers,
                                  int64_t experts, int64_t topk, int64_t moe_inter);
/* Mean and std of planned tensor p of a qwen3_next model; leaves them when p is not special. */
void lwq_mkmodel_qwen3next_dist(const lwq_arch_tensor *p, float *mean, float *std);

#endif
