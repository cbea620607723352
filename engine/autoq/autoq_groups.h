/* engine/autoq/autoq_groups.h — what the auto-quantize search chooses among: the search groups of
 * a decoder layer, the formats each may take, and their exact byte costs.
 *
 * A search group is a set of linears of one layer that gets one format (issue 25): q/k/v together
 * (with multi-head latent attention: q_proj / q_a_proj / q_b_proj / kv_a_proj_with_mqa /
 * kv_b_proj), o_proj, gate/up together (a dense MLP's, or a MoE layer's shared experts'), down
 * (likewise), every routed expert of the layer together, the linear-attention projections
 * (in_proj_qkvz, in_proj_ba, out_proj).  The linear-attention conv1d is in no group: lwq eval
 * does not emulate a quantized conv1d, so it cannot be scored, and it keeps the base recipe's
 * choice (FP8 in qwen3next_production, unquantized in the NVFP4 presets).  Every fused group of the plan (spec/FORMATS.md 5) lies inside one search group, so "a fused
 * group shares one format" holds by construction.  Routers (and qwen3_next's shared_expert_gate)
 * are in no group: never quantized.
 *
 * The base recipe (the --qformat / --recipe given with the search) still applies: a linear it
 * leaves unquantized stays unquantized (it is in no group), a linear in no group keeps the base
 * recipe's choice, and a chosen format keeps the base
 * recipe's calibration settings for the module (algorithm, FP8 scale sweep, a fixed input amax).
 * A group may take format f only when every member can: NVFP4 (and W4A16) needs in-features % 16
 * == 0 and is not written for a conv1d; "none" only when it is among the formats asked for (a group that can
 * take none of them is an error naming it: the list means what it says).
 *
 * Byte cost of a group in format f = the bytes lwq quantize writes for its members' weights and
 * scales (weight, weight_scale, weight_scale_2, input_scale), read off the tensors lwq_qlayer_run
 * produced for f (so scales are counted exactly as written: W4A16 has no input_scale); in "none"
 * the source weight bytes.
 * lwq eval's bits per weight counts the same bytes. */
#ifndef LWQ_ENGINE_AUTOQ_GROUPS_H
#define LWQ_ENGINE_AUTOQ_GROUPS_H

#include <stdint.h>

#include "engine/autoq/autoq.h"
#include "engine/source/tlist.h"
#include "layout/arch/arch.h"
#include "layout/recipe/recipe.h"

/* The candidate formats (LWQ_AQ_FORMATS, LWQ_AQ_W4A16, LWQ_AQ_NVFP4_MSE): engine/autoq/autoq.h.  What
 * candidate f writes: its lwq_qformat (NVFP4 for W4A16 and NVFP4_MSE) and whether the input quantizer
 * is off. */
lwq_qformat lwq_aq_qformat(int f);
int lwq_aq_weight_only(int f);
/* The bytes lwq writes for n weight elements in a quantized candidate f: NVFP4 packed weight, E4M3
 * block scales, weight_scale_2 and input_scale (no input_scale when weight-only); FP8 weight,
 * weight_scale and input_scale.  0 for NONE (the source's bytes, which the caller knows). */
uint64_t lwq_aq_quant_bytes(uint64_t n, int f);
/* A linear's choice in candidate f from its base recipe choice: the format replaced (W4A16: NVFP4,
 * weight_only), the base's calibration settings kept, except a candidate with its own weight
 * algorithm (NVFP4_MSE: mse with the FP8 scale sweep; W4A16_F46: Four-over-Six mse over 1.0 and 1.5)
 * and, with own_algos (engine/autoq/autoq.h), every candidate (the others: max). */
lwq_quant_choice lwq_aq_candidate_choice(const lwq_quant_choice *base, int f, int own_algos);
/* The quantized candidates a group may take (NVFP4, FP8, W4A16). */
int lwq_aq_nquantized(const uint8_t allowed[LWQ_AQ_FORMATS]);

typedef enum lwq_aq_kind {
    LWQ_AQ_QKV = 0,
    LWQ_AQ_O,
    LWQ_AQ_GATE_UP,
    LWQ_AQ_DOWN,
    LWQ_AQ_EXPERTS,
    LWQ_AQ_LINEAR_ATTN,
    LWQ_AQ_HEAD,               /* lm_head, a group of its own outside the layers (engine/autoq/head/autoq_head.h) */
    LWQ_AQ_KINDS
} lwq_aq_kind;

/* "qkv", "o", "gate_up", "down", "experts", "linear_attn", "lm_head" */
const char *lwq_aq_kind_name(lwq_aq_kind k);

typedef struct lwq_aq_group {
    lwq_aq_kind kind;
    int n;                     /* members */
    int *lin;                  /* (n) linear indexes into the layer plan, ascending */
    uint8_t allowed[LWQ_AQ_FORMATS]; /* may take format f (NONE: when asked for); at least one */
    uint64_t elements;         /* weight elements of the members */
    int fixed;                 /* the fixed baseline's format, its one choice (autoq.h `baseline`) */
} lwq_aq_group;

typedef struct lwq_aq_layer {
    int layer;
    int ngroups;
    lwq_aq_group *g;
    int *group_of;             /* (plan->nlinears) the group of linear i, or -1 (fixed at its base choice) */
    int own_algos;             /* lwq_aq_layer_build's o->own_algos (lwq_aq_layer_init: 0) */
    lwq_quant_choice *base;    /* (plan->nlinears) the base recipe's choice of each linear */
} lwq_aq_layer;

/* The groups of layer plan p under base recipe r, restricted to the formats in want[f] (NONE
 * included only when want[NONE]); a group that can take none of them is an error naming it.  A linear the base recipe enables with a split weight/input choice is an error
 * naming it (lwq writes W4A4 and W8A8 only). */
int lwq_aq_layer_init(lwq_aq_layer *a, const lwq_arch_layer *p, const lwq_recipe *r,
                      const uint8_t want[LWQ_AQ_FORMATS], lwq_error *e);
void lwq_aq_layer_free(lwq_aq_layer *a);
/* The groups the search of o sees: lwq_aq_layer_init with o->formats, then o's module_search_spaces
 * (engine/autoq/autoq.h) restricting each group's formats; with o->baseline a group no space matches
 * takes the base recipe's format as its one choice (fixed), its members agreeing on it. */
int lwq_aq_layer_build(lwq_aq_layer *a, const lwq_arch_layer *p, const lwq_recipe *r, const lwq_autoq_opts *o,
                       lwq_error *e);
/* Model Optimizer's refusals of a fixed baseline over the whole model (plans: N layers): every fixed group
 * in one format, the cheapest the baseline gives any searched linear or fixed group (its effective
 * bits: NVFP4 4.5, FP8 8).  An error names the group. */
int lwq_aq_baseline_check(const lwq_autoq_opts *o, const lwq_arch_layer *plans, int N, lwq_error *e);

/* "nvfp4,nvfp4_w4a4_weight_mse_fp8_sweep,fp8,w4a16_nvfp4,w4a16_nvfp4_four_over_six,none" for the
 * formats in want (in that order), as --auto-quantize-formats spells it (at most 96 characters). */
void lwq_aq_formats_str(const uint8_t want[LWQ_AQ_FORMATS], char *buf, size_t cap);

/* The choice of every linear of the layer when group k takes candidate fmt[k] (fmt: (ngroups)):
 * lwq_aq_candidate_choice of the base choice; linears in no group keep their base choice (routers:
 * NONE). */
void lwq_aq_choices(const lwq_aq_layer *a, const lwq_arch_layer *p, const uint8_t *fmt, lwq_quant_choice *out);

/* Bytes written for linear l's weight and scales in the sorted tensors t of a layer (what
 * lwq_qlayer_run produced, or the source for an unquantized linear); 0 when its weight is absent. */
uint64_t lwq_aq_linear_bytes(const lwq_tlist *t, const lwq_arch_linear *l);

#endif
