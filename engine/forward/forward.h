/* engine/forward/forward.h — the decoder-layer forward of each supported architecture, built from
 * backend ops, observable at every quantizable input.
 *
 * Supported model types: llama (and mistral), qwen2 (q/k/v bias), qwen3 (q/k RMSNorm,
 * head_dim != hidden/heads), qwen3_moe (norm_topk_prob, decoder_sparse_step, mlp_only_layers),
 * mixtral, deepseek_v2 and deepseek_v3 / kimi_k2 (multi-head latent attention, DeepSeek MoE
 * routing: model_deepseek.c), qwen3_next (Gated DeltaNet / gated attention hybrid:
 * model_qwen3next.c).  The semantics are transformers' *ForCausalLM
 * (../shared/spec/ARCHITECTURES.md).
 * Activations stay in the model's activation dtype between ops (BF16 for BF16 models) and
 * every op accumulates in FP32, as the backend ops define; results are deterministic for a given
 * backend and thread count.
 *
 * Weights reach the forward through lwq_weights: a callback that maps a full tensor name
 * ("model.layers.3.mlp.down_proj.weight") to a tensor view on the backend's device, so the engine
 * can serve views into its prefetch buffers and tests can serve from a file.  The forward checks
 * every tensor's dtype and shape and names the tensor and layer in its error.
 *
 * A batch is `batch` sequences of `seq` tokens, LEFT-padded: sequence s has lengths[s] real
 * tokens in its last positions, at positions 0..lengths[s]-1.  Padding rows never influence a
 * real row (attention masks padding keys, MoE routes only real tokens) nor any observation
 * (observers get the row-valid mask, expert counts count real tokens only).
 *
 * Ownership: lwq_model borrows the config and the backend (both must outlive it) and owns its
 * RoPE table and a scratch arena on the backend device.  Not thread-safe: one forward at a time
 * per lwq_model.  Failure: 0 or a negative LWQ_E* code with the lwq_error filled; an observer
 * returning an error stops the forward with that error. */
#ifndef LWQ_ENGINE_FORWARD_H
#define LWQ_ENGINE_FORWARD_H

#include <stdint.h>

#include "core/sys/error.h"
#include "core/data/tensor.h"
#include "kernels/backend.h"
#include "layout/config/config.h"

/* Tensor lookup: fill *out with a view of `name` on the backend device.  Return 0, LWQ_ENOENT when
 * the tensor does not exist (the forward then reports it with the layer, or falls back, e.g. to
 * the tied embedding), or another negative code with `e` filled. */
typedef int (*lwq_weight_fn)(void *ctx, const char *name, lwq_tensor *out, lwq_error *e);
typedef struct lwq_weights {
    lwq_weight_fn get;
    void *ctx;
} lwq_weights;

struct lwq_batch;

/* Observation hooks; any may be NULL.  Tensors are on the backend device and valid only during
 * the call.  `row_valid` is a U8 (rows) mask of real tokens, or NULL when every row is real (the
 * rows of an expert's input are the real tokens routed to it).  `row_tok` is NULL when x's rows
 * are the batch's rows in order; else row i of x is the batch's row row_tok[i] (host, ascending:
 * an expert's input gathered from the tokens routed to it).  Within a batch, the rows a linear
 * sees arrive in ascending token order.  `module` is the linear's module name without ".weight",
 * e.g. "model.layers.3.mlp.experts.5.up_proj". */
typedef struct lwq_observer {
    void *ctx;
    int (*linear_input)(void *ctx, int layer, const char *module, const lwq_tensor *x,
                        const lwq_tensor *row_valid, const int32_t *row_tok, lwq_error *e);
    /* k and v as they enter the cache: k after k-norm and RoPE.  (rows, kv_heads*head_dim). */
    int (*kv)(void *ctx, int layer, const lwq_tensor *k, const lwq_tensor *v,
              const lwq_tensor *row_valid, lwq_error *e);
    /* Real tokens routed to each expert in this batch (routing, not the all-experts runs). */
    int (*expert_counts)(void *ctx, int layer, const int64_t *counts, int n_experts, lwq_error *e);
    /* Calibrate all experts: every expert also runs on every real token, for the observers only;
     * the layer output still uses the routed experts alone (bitwise the same as without). */
    int all_experts;
    /* Before the observations of a batch (lwq_model_layer_forward and the streamed forward of
     * engine/fwd_stream.h): the rows that follow are b's. */
    int (*begin_batch)(void *ctx, int layer, const struct lwq_batch *b, lwq_error *e);
} lwq_observer;

typedef struct lwq_batch {
    int64_t batch, seq;       /* rows n = batch * seq, sequence-major */
    int64_t n_valid;          /* real tokens */
    lwq_tensor pos;           /* I32 (n) on the device: position of each row (0 for padding) */
    lwq_tensor valid;         /* U8 (n) on the device: 1 = real token */
    uint8_t *valid_host;      /* (n), owned */
} lwq_batch;

/* Build a left-padded batch; lengths NULL means every sequence is full.  lengths[s] in [0, seq]. */
int lwq_batch_init(lwq_batch *b, const lwq_backend *be, int64_t batch, int64_t seq,
                   const int64_t *lengths, lwq_error *e);
void lwq_batch_free(lwq_batch *b, const lwq_backend *be);

struct lwq_arena;

typedef struct lwq_model {
    const lwq_model_config *cfg;
    const lwq_backend *be;
    lwq_dtype act;            /* activation dtype between ops */
    lwq_tensor inv_freq;      /* F32 (rotary dims/2) on the device, after rope scaling (MLA:
                                 qk_rope_head_dim/2) */
    float attn_scaling;       /* RoPE cos/sin factor (1 for default and llama3) */
    struct lwq_arena *arena;  /* per-forward scratch, reused across calls */
} lwq_model;

/* Supported model_type list for messages: "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral,
 * deepseek_v2, deepseek_v3, kimi_k2, qwen3_next". */
const char *lwq_forward_supported(void);
/* Check the config (architecture, rope type, geometry) and prepare tables.  `act` is the
 * activation dtype; pass cfg->dtype to run as transformers runs the checkpoint's dtype.  An
 * architecture without a forward here is LWQ_EUNSUPPORTED naming the supported list. */
int lwq_model_init(lwq_model *m, const lwq_model_config *cfg, const lwq_backend *be, lwq_dtype act,
                   lwq_error *e);
void lwq_model_free(lwq_model *m);
/* The forward's scratch arena starts with one block of this size unless reserved. */
#define LWQ_FWD_ARENA_FIRST ((uint64_t)1 << 20)
/* Give the arena its first block now, of max(bytes, LWQ_FWD_ARENA_FIRST): the run reserves the
 * scratch its memory plan counts, so the device holds that one block, not the doubling blocks
 * (1, 2, 4 MiB, ... live together) the first forward would otherwise allocate while it grows.
 * No-op once the arena has a block. */
int lwq_model_reserve_scratch(lwq_model *m, uint64_t bytes, lwq_error *e);

/* Whether layer i has a routed-expert MoE block (qwen3_moe: decoder_sparse_step, mlp_only_layers). */
int lwq_model_layer_is_moe(const lwq_model *m, int layer);

/* h (n, hidden) act on the device = embedding rows of tokens (I32 (n), host). */
int lwq_model_embed(lwq_model *m, const lwq_weights *w, const int32_t *tokens, lwq_tensor *h,
                    lwq_error *e);
/* One decoder layer in place on h (n, hidden).  obs may be NULL. */
int lwq_model_layer_forward(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e);
/* Final norm and lm_head (or the tied embedding when tie_word_embeddings and lm_head.weight is
 * absent): logits (n, vocab) act on the device.  h is overwritten by the normed hidden state. */
int lwq_model_head(lwq_model *m, const lwq_weights *w, lwq_tensor *h, lwq_tensor *logits,
                   lwq_error *e);
/* The final norm alone, in place on h (n, hidden): lm_head's input (a W8A8 lm_head's input amax). */
int lwq_model_final_norm(lwq_model *m, const lwq_weights *w, lwq_tensor *h, lwq_error *e);
/* embed -> all layers -> head.  tokens (n) host; logits (n, vocab) on the device. */
int lwq_model_forward(lwq_model *m, const lwq_weights *w, const int32_t *tokens,
                      const lwq_batch *b, lwq_tensor *logits, const lwq_observer *obs,
                      lwq_error *e);

/* The RoPE inverse frequencies transformers computes (f32) for this config: (rotary dims / 2;
 * head_dim unless the row has partial rotary). */
int lwq_rope_inv_freq(const lwq_model_config *cfg, float *inv_freq, float *attn_scaling,
                      lwq_error *e);

#endif
