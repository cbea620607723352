/* layout/recipe/recipe.h — what to quantize and how: presets, recipe files, per-module resolution.
 *
 * A recipe is global algorithm settings plus an ordered list of rules
 *   {"match": glob over module names, "format": "nvfp4"|"fp8"|"none", "enable": bool,
 *    "algo": "max"|"mse"|"local_hessian"|"gptq", "fp8_scale_sweep": bool}
 * Every rule that matches a module applies the fields it sets, in order, so later rules win.
 * A rule may also select on what the architecture says about the module: "mla_projection":
 * true (false) restricts it to (away from) the q/kv projections of multi-head latent attention
 * (q_proj, q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj of DeepSeek layers; not o_proj).
 * A module no rule enables stays in the source dtype.  A preset (`--qformat`) is just a
 * built-in recipe.  Routers are never quantized whatever the recipe says (the engine asks the
 * architecture plan); the recipe only decides among quantizable linears.
 *
 * A rule may narrow itself to one quantizer of the module, as Model Optimizer's quant_cfg does:
 * "quantizer": "weight" or "input" (absent: both).  The weight and the input quantizer of a
 * linear are resolved separately.  lwq writes W4A4 NVFP4, W8A8 FP8 and weight-only NVFP4 (W4A16:
 * weight NVFP4, input quantizer disabled; the choice says `weight_only`, no input_scale is
 * written); any other pair of different formats (FP8 weights alone, an input quantizer alone,
 * NVFP4 weights with FP8 inputs) the choice says so (`split`) and the engine refuses the module
 * by name.  "quantizer": "kv" rules select attention modules and set
 * {"kv_cache": mode} or "enable" for their k/v cache quantizers; with such rules every attention
 * module must resolve to the recipe's "kv_cache" (lwq writes one KV cache mode per model).
 * layout/recipe/recipe_yaml.h turns Model Optimizer's recipe YAML into these rules.
 *
 * GPTQ settings are global: "algorithm": {"gptq_damp": number in (0, 10], "gptq_act_order": bool}
 * (defaults 0.01 and false); they are written to the canonical JSON only when some module uses
 * gptq, so other recipes keep their fingerprints.
 *
 * Glob syntax: `*` any run of characters (dots included), `?` one character, `[abc]` / `[a-z]` /
 * `[!abc]` one character of (not of) a set, everything else literal (an unclosed `[` too).
 * Matching is iterative, O(len(pattern) * len(name)) at worst, so a hostile recipe cannot make it
 * run without bound.
 *
 * Recipe files are untrusted input: size-capped (1 MiB), unknown keys and bad values rejected
 * with the key named. */
#ifndef LWQ_LAYOUT_RECIPE_H
#define LWQ_LAYOUT_RECIPE_H

#include "core/sys/error.h"

typedef enum lwq_qformat { LWQ_QFMT_NONE = 0, LWQ_QFMT_NVFP4, LWQ_QFMT_FP8 } lwq_qformat;
/* GPTQ rewrites the weight (kernels/gptq.h); the others only choose scales. */
typedef enum lwq_calib_algo { LWQ_ALGO_MAX = 0, LWQ_ALGO_MSE, LWQ_ALGO_LOCAL_HESSIAN, LWQ_ALGO_GPTQ } lwq_calib_algo;
/* FP8_CAST and NVFP4_CAST: the cache is cast with a constant amax (Model Optimizer's
 * use_constant_amax); no k/v scales are calibrated or written. */
typedef enum lwq_kv_mode { LWQ_KV_NONE = 0, LWQ_KV_FP8, LWQ_KV_FP8_CAST, LWQ_KV_NVFP4_CAST } lwq_kv_mode;

/* The range of a fixed input amax (input_amax, Model Optimizer's constant_amax): its input scale,
 * amax / 2688 for NVFP4 (amax / 448 for FP8), must be a normal float, and amax a finite one.  A
 * smaller amax (1e-50 is 0 as a float) used to fail later as "amax 0 (was calibration data
 * seen?)", blaming the calibration for the recipe. */
#define LWQ_RECIPE_AMAX_MIN (2688.0 * 1.17549435082228750797e-38) /* 2688 * FLT_MIN = 3.16e-35 */
#define LWQ_RECIPE_AMAX_MAX 3.0e38
#define LWQ_RECIPE_AMAX_OK(x) ((x) >= LWQ_RECIPE_AMAX_MIN && (x) <= LWQ_RECIPE_AMAX_MAX)

/* Which quantizers of a module a rule touches.  OUTPUT (a linear's or an embedding's output
 * quantizer), QBMM and SOFTMAX (an attention module's q_bmm and softmax quantizers) are Model
 * Optimizer quantizers lwq never writes: their rules carry only "enable", and a module whose rules
 * leave one of them enabled is refused by name (lwq_recipe_check_unwritten). */
typedef enum lwq_qsel {
    LWQ_QSEL_BOTH = 0, LWQ_QSEL_WEIGHT, LWQ_QSEL_INPUT, LWQ_QSEL_KV,
    LWQ_QSEL_OUTPUT, LWQ_QSEL_QBMM, LWQ_QSEL_SOFTMAX
} lwq_qsel;

typedef struct lwq_recipe_rule {
    char *match;              /* a glob over checkpoint module names ("match"), or NULL with qname */
    char *qname;              /* "quantizer_name" (rules from Model Optimizer's YAML): a glob over the
                                 full quantizer names of the model as Model Optimizer 0.47 holds it in
                                 memory (lwq_qnames), matched as its _match_quantizer does; NULL with
                                 match.  A rule has exactly one of the two */
    lwq_qsel quantizer;
    int has_format, has_enable, has_algo, has_sweep, has_mla, has_kv;
    lwq_kv_mode kv;           /* with has_kv (quantizer kv rules only) */
    int has_input_amax;       /* "input_amax": x on an "input" rule with a format: a fixed input
                                 amax (Model Optimizer's constant_amax), no calibration statistic */
    double input_amax;
    int mla;                  /* with has_mla: the rule applies only when the module's
                                 LWQ_MODULE_MLA_PROJ fact equals this */
    lwq_qformat format;
    int enable;
    lwq_calib_algo algo;
    int sweep;
    int has_f46, f46;         /* "four_over_six": on a weight rule (or one without quantizer):
                                 Four-over-Six NVFP4 block scaling of static (mse) NVFP4 weights */
    int has_embed, embed;     /* "embedding": the rule applies only when the module's
                                 LWQ_MODULE_EMBEDDING fact equals this (Model Optimizer's
                                 parent_class nn.Embedding) */
} lwq_recipe_rule;

typedef struct lwq_recipe {
    char name[64];            /* preset name or "custom" */
    lwq_calib_algo algo;      /* default for rules that do not set one */
    int fp8_scale_sweep;      /* default likewise */
    double gptq_damp;         /* GPTQ dampening, fraction of the mean Hessian diagonal */
    int gptq_act_order;       /* GPTQ visits columns by descending Hessian diagonal */
    lwq_kv_mode kv;           /* the model's KV cache mode (kv rules must agree per module) */
    int lm_head;              /* LWQ_LMHEAD_*: lm_head quantized weight-only (NVFP4 or FP8) or not */
    int embed_rules;          /* 1: the rules decide the token embedding's weight quantizer too, as a
                                 Model Optimizer quant_cfg does (recipes read from its YAML; JSON
                                 "embedding": "rules"); 0: the embedding stays in the source dtype
                                 and rules concern linears (lwq's own recipes) */
    int mse_range;            /* the mse search's amax multipliers (Model Optimizer's start_multiplier,
                                 stop_multiplier, step_size): LWQ_MSE_RANGE_* */
    double mse_mult[3];       /* with LWQ_MSE_RANGE_OWN: start, stop, step */
    int nrules;
    lwq_recipe_rule *rules;
} lwq_recipe;

/* How lm_head is written ("lm_head" in the recipe JSON): NONE, the source dtype ("none"); else
 * weight-only NVFP4 (W4A16_NVFP4) with dynamic block scales ("w4a16_nvfp4", algorithm max), or
 * static ones from the weight searches of the decoder linears: the mse search ("w4a16_nvfp4-mse")
 * or the FP8 scale sweep ("w4a16_nvfp4-fp8_scale_sweep"; the huggingface/qwen3_5*
 * w4a16_nvfp4_mse recipes' nvfp4_static lm_head under method mse, fp8_scale_sweep true), or
 * Four-over-Six static NVFP4 under mse over the recipe's multiplier range
 * ("w4a16_nvfp4-four_over_six"; Nemotron-3.5-Lightning's w4a16_nvfp4_4o6); or FP8 per-tensor
 * weight-only at the weight's amax ("w8a16_fp8", algorithm max; Nemotron-3-Nano-4B's nvfp4_w4a16:
 * Model Optimizer 0.47 calls it quant_algo FP8, writes weight and weight_scale, no input_scale); or
 * FP8 W8A8 ("fp8", algorithm max: a recipe enabling '*lm_head*' FP8 weight and input quantizers, the
 * `fp8` candidate of Model Optimizer's auto_quantize search on lm_head): the weight at its amax, an
 * input_scale from the calibration amax of lm_head's input (the final norm's output).
 * The numbers are stable: the run fingerprint hashes them. */
enum {
    LWQ_LMHEAD_NONE = 0,
    LWQ_LMHEAD_MAX = 1,
    LWQ_LMHEAD_MSE = 2,
    LWQ_LMHEAD_SWEEP = 3,
    LWQ_LMHEAD_FP8 = 4,
    LWQ_LMHEAD_F46 = 5,
    LWQ_LMHEAD_W8A8 = 6,
    LWQ_LMHEAD_LAST = LWQ_LMHEAD_W8A8
};
const char *lwq_lm_head_name(int lm_head);

/* The mse multiplier range: Model Optimizer's default (0.25 to 4.0 by 0.1, 39 candidates), or the
 * recipe's own (mse_mult: start, stop, step; e.g. the nvfp4_four_over_six preset's 1.0 to 1.5 by
 * 0.5: [1.0, 1.5]), whose candidates are lwq_mse_linspace's (at most LWQ_MSE_MAX_STEPS). */
enum { LWQ_MSE_RANGE_DEFAULT = 0, LWQ_MSE_RANGE_OWN = 1 };

/* What a module gets. */
typedef struct lwq_quant_choice {
    lwq_qformat format;       /* NONE = not quantized */
    lwq_calib_algo algo;
    int fp8_scale_sweep;
    double gptq_damp;         /* the recipe's, for algo gptq */
    int gptq_act_order;
    int split;                /* weight and input quantizers disagree: not writable (format NONE) */
    int weight_only;          /* format NVFP4 with the input quantizer disabled: W4A16_NVFP4, the
                                 weights as NVFP4 writes them and no input_scale */
    lwq_qformat weight_format, input_format;  /* with split: what each resolved to */
    int has_input_amax;       /* the input amax is fixed to input_amax (not calibrated) */
    float input_amax;
    int four_over_six;        /* NVFP4 weights: block scales normalised to 256 (Four-over-Six) */
    int mse_range;            /* the recipe's LWQ_MSE_RANGE_* */
    double mse_mult[3];       /* the recipe's mse_mult */
} lwq_quant_choice;

/* The mse candidates of a choice (LWQ_MSE_RANGE_OWN: lwq_mse_linspace of its mse_mult) into
 * out[LWQ_MSE_MAX_STEPS]; returns their count, or 0 for the default range (lwq_mse_multiplier's
 * 39, which the kernels take as mult NULL). */
int lwq_choice_mse_candidates(const lwq_quant_choice *c, float *out);

/* Built-in presets: nvfp4, nvfp4_experts_only, nvfp4_mlp_only, fp8, nvfp4_experts-fp8_attn,
 * qwen3next_production, w4a16_nvfp4 (recipe.c says what each holds).
 * The NVFP4 presets keep MLA q/kv projections unquantized, as NVIDIA's published DeepSeek and
 * Kimi checkpoints do (o_proj, dense/shared MLPs and routed experts are quantized by nvfp4);
 * nvfp4 and fp8 keep qwen3_next's linear_attn.conv1d and in_proj_ba unquantized, as Model
 * Optimizer's default_disabled_quantizers does. */
int lwq_recipe_preset(const char *name, lwq_recipe *r, lwq_error *e);
const char *lwq_recipe_preset_names(void);
int lwq_recipe_load(const char *path, lwq_recipe *r, lwq_error *e);
int lwq_recipe_parse(const char *path_for_errors, const char *json, lwq_recipe *r, lwq_error *e);
void lwq_recipe_free(lwq_recipe *r);
/* Canonical JSON of the effective recipe (malloc'd; NULL on allocation failure).  Parsing it
 * gives the same recipe; it is what --print-recipe shows and what the run fingerprint hashes. */
char *lwq_recipe_to_json(const lwq_recipe *r);
lwq_quant_choice lwq_recipe_resolve(const lwq_recipe *r, const char *module);

/* A module's quantizers under the names Model Optimizer 0.47 gives them in the model transformers
 * 5.14.1 holds in memory (conversion.py _match_quantizer matches a quantizer_name glob against
 * these, and against the name with a fused experts module's per-expert index dropped).  For a plain
 * linear, MODULE.weight_quantizer / .input_quantizer / .output_quantizer; for one routed expert of a
 * fused experts module (layout/arch/arch.h lwq_arch_qnames: mixtral's
 * model.layers.3.block_sparse_moe.experts.5.w1 is held as model.layers.3.mlp.experts, its gate and
 * up halves in gate_up_proj), EXPERTS.gate_up_proj_weight_quantizers.5 (and its normalised
 * EXPERTS.gate_up_proj_weight_quantizer), EXPERTS.gate_up_proj_input_quantizer (shared by every
 * expert) and no output quantizer.  "match" rules see `module`, the checkpoint's name. */
#define LWQ_QNAME_MAX 320
typedef struct lwq_qnames {
    const char *module;             /* the checkpoint's module name */
    char base[LWQ_QNAME_MAX];       /* the module's in-memory name (an attention module's k/v, q_bmm and
                                       softmax quantizers are base + ".k_bmm_quantizer", ...) */
    char weight[2][LWQ_QNAME_MAX];  /* the weight quantizer's name(s): nweight of them */
    int nweight;
    char input[LWQ_QNAME_MAX];
    char output[LWQ_QNAME_MAX];     /* "" when Model Optimizer gives the module no output quantizer */
} lwq_qnames;
/* The names of a module that Model Optimizer holds as it is named (module + suffix). */
void lwq_qnames_plain(lwq_qnames *q, const char *module);
/* lwq_recipe_resolve_module with the quantizers' in-memory names (q->module for "match" rules). */
lwq_quant_choice lwq_recipe_resolve_names(const lwq_recipe *r, const lwq_qnames *q, unsigned facts);
/* Model Optimizer's quantizer-name match (conversion.py _match_quantizer): the glob against the
 * full name, or against it with a fused experts list index dropped
 * ("...gate_up_proj_weight_quantizers.5" -> "...gate_up_proj_weight_quantizer"). */
int lwq_qname_match(const char *glob, const char *qname);
/* Facts about a module for rules that select on them (layout/arch knows them). */
#define LWQ_MODULE_MLA_PROJ 1u
#define LWQ_MODULE_EMBEDDING 2u /* the token embedding (model.embed_tokens) */
/* lwq_recipe_resolve with the module's facts; lwq_recipe_resolve passes none. */
lwq_quant_choice lwq_recipe_resolve_module(const lwq_recipe *r, const char *module,
                                           unsigned facts);

/* The unwritten quantizers (LWQ_QSEL_OUTPUT, _QBMM, _SOFTMAX) of one module: 0 when the rules leave
 * `kind` disabled on `module` (every quantizer starts disabled, as after Model Optimizer's
 * base_disable_all), else an error naming the module and the last rule that enabled it.  The
 * engine asks it of every quantizable linear, lm_head and the embedding (OUTPUT) and of every
 * attention module (QBMM, SOFTMAX): the modules that carry such quantizers in Model Optimizer. */
int lwq_recipe_check_unwritten(const lwq_recipe *r, const char *module, unsigned facts, lwq_qsel kind,
                               lwq_error *e);
/* The same under the module's in-memory names (an OUTPUT of a fused expert, which has none: 0). */
int lwq_recipe_check_unwritten_names(const lwq_recipe *r, const lwq_qnames *q, unsigned facts, lwq_qsel kind,
                                     lwq_error *e);

/* How the token embedding `embed_module` ("model.embed_tokens", the checkpoint's name) is written:
 * LWQ_LMHEAD_NONE (source dtype; always without embed_rules), or weight-only NVFP4 as an lm_head
 * would be (LWQ_LMHEAD_MAX, _MSE, _SWEEP), as Model Optimizer 0.47 exports a QuantEmbedding whose
 * weight quantizer is NVFP4 (its input quantizer is hard-disabled, so input rules do not count);
 * any other weight format is an error naming the module (< 0). */
int lwq_recipe_embedding(const lwq_recipe *r, const char *embed_module, lwq_error *e);
/* The same under the embedding's in-memory names (nemotron_h's backbone.embeddings is
 * model.embeddings in memory: layout/arch/arch_qnames.h). */
int lwq_recipe_embedding_names(const lwq_recipe *r, const lwq_qnames *q, lwq_error *e);

/* The KV cache mode the recipe gives one attention module (e.g. "model.layers.3.self_attn"). */
lwq_kv_mode lwq_recipe_resolve_kv(const lwq_recipe *r, const char *attn_module);
/* 0 when the module resolves to r->kv; else an error naming the module. */
int lwq_recipe_check_kv(const lwq_recipe *r, const char *attn_module, lwq_error *e);
/* The two above with the attention module's in-memory names. */
lwq_kv_mode lwq_recipe_resolve_kv_names(const lwq_recipe *r, const lwq_qnames *attn);
int lwq_recipe_check_kv_names(const lwq_recipe *r, const lwq_qnames *attn, lwq_error *e);
/* The error for a choice with `split` set, naming the module. */
int lwq_recipe_split_error(const lwq_quant_choice *c, const char *module, lwq_error *e);

int lwq_glob_match(const char *pattern, const char *name);
/* A rule that names an embedding ("embed" in its glob, the vision branch's '*embed_vision*' aside)
 * and turns a weight format on, in a recipe without embed_rules: refused, naming the rule (lwq's
 * own recipes never quantize the embedding). */
int lwq_recipe_check_embedding(const lwq_recipe *r, const char *path, lwq_error *e);
/* LWQ_MSE_RANGE_* of Model Optimizer's (start_multiplier, stop_multiplier, step_size), or -1 when
 * it is no finite positive ascending range or has more than LWQ_MSE_MAX_STEPS candidates. */
int lwq_recipe_mse_range(double start, double stop, double step);

const char *lwq_qformat_name(lwq_qformat f);     /* "nvfp4", "fp8", "none" */
/* What a choice writes: lwq_qformat_name, or "w4a16_nvfp4" for weight-only NVFP4. */
const char *lwq_choice_format_name(const lwq_quant_choice *c);
const char *lwq_algo_name(lwq_calib_algo a);     /* "max", "mse", "local_hessian", "gptq" */
/* 1 when some rule or the default selects gptq (the run then calibrates sequentially). */
int lwq_recipe_uses_gptq(const lwq_recipe *r);
const char *lwq_kv_mode_name(lwq_kv_mode k);     /* "none", "fp8", "fp8_cast", "nvfp4_cast" */
const char *lwq_qsel_name(lwq_qsel q);          /* "" (both), "weight", "input", "kv", "output", ... */
int lwq_qformat_parse(const char *s, lwq_qformat *out);
int lwq_algo_parse(const char *s, lwq_calib_algo *out);
int lwq_kv_mode_parse(const char *s, lwq_kv_mode *out);

#endif
