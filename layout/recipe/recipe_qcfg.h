/* layout/recipe/recipe_qcfg.h — Model Optimizer quant_cfg entries -> lwq recipe rules.
 *
 * layout/recipe/recipe_yaml.c reads the YAML (imports, $import splicing, attribute validation) and hands
 * over the final ordered entry list; this file maps it onto lwq's rules exactly or refuses.
 *
 * Model Optimizer matches `quantizer_name` (fnmatch) against the quantizers' full names in the
 * model as transformers holds it in memory ("model.layers.0.self_attn.k_bmm_quantizer",
 * "model.layers.0.mlp.experts.gate_up_proj_weight_quantizers.3", ...).  Each entry becomes rules
 * that keep the entry's own pattern ("quantizer_name" rules, recipe.h), matched against those
 * names when a module is resolved (layout/arch/arch_qnames.h gives them), so lwq selects what
 * Model Optimizer selects.  Which quantizer kinds an entry can reach, for its cfg checks, comes
 * from the module globs of the pattern: for a fixed suffix S (".weight_quantizer", the fused
 * experts' "_weight_quantizer", ".k_bmm_quantizer", ...) the modules M with fnmatch(P, M + S) are
 * exactly those matched by P[:i] for every token boundary i where P[i:] matches S, and P[:i+1]
 * for every `*` at i where P[i:] matches S (the star spans the boundary). */
#ifndef LWQ_LAYOUT_RECIPE_QCFG_H
#define LWQ_LAYOUT_RECIPE_QCFG_H

#include "layout/recipe/recipe.h"

#define LWQ_QCFG_MAX_ENTRIES 4096
#define LWQ_QCFG_GLOB_MAX 512

/* The quantizer attributes lwq can write (validated by recipe_yaml.c). */
typedef enum lwq_mo_kind { LWQ_MO_FP8 = 0, LWQ_MO_NVFP4_DYNAMIC, LWQ_MO_NVFP4_STATIC } lwq_mo_kind;

typedef struct lwq_mo_entry {
    char glob[LWQ_QCFG_GLOB_MAX + 1];
    char where[320];          /* "file:line" for messages */
    int has_enable, enable;
    int has_cfg;
    lwq_mo_kind kind;         /* with has_cfg */
    int use_constant_amax;    /* cfg.use_constant_amax: true */
    int four_over_six;        /* cfg.block_sizes.four_over_six: true (static NVFP4 weights only) */
    int has_constant_amax;    /* cfg.constant_amax: x */
    double constant_amax;
    int embedding_only;       /* parent_class: nn.Embedding (a disabling entry): its rules select the
                                 token embedding only */
} lwq_mo_entry;

/* The algorithm block as far as it decides per-module calibration. */
typedef struct lwq_mo_algo {
    lwq_calib_algo method;
    int sweep;                /* fp8_scale_sweep (local_hessian: always 1) */
    const char *where;        /* for messages about static NVFP4 under max */
    int mse_range;            /* start_multiplier / stop_multiplier / step_size: LWQ_MSE_RANGE_* */
    double mse_mult[3];       /* with LWQ_MSE_RANGE_OWN: the three */
    int candidate;            /* an auto_quantize candidate's quant_cfg: applied to one module at a time
                                 (names relative to it), so the model's lm_head is none of its business */
} lwq_mo_algo;

/* Append the rules for entries[0..n) to r (r->name, algo, sweep set by the caller); sets r->kv. */
int lwq_qcfg_compile(const lwq_mo_entry *v, int n, const lwq_mo_algo *a, const char *path, lwq_recipe *r,
                     lwq_error *e);

/* The module globs G with fnmatch(pattern, M + suffix) <=> some G matches M (see above).
 * Writes at most `max` malloc'd strings to out; returns their count, or -1 when there are more
 * (or no memory). */
int lwq_qcfg_module_globs(const char *pattern, const char *suffix, char **out, int max);

#endif
