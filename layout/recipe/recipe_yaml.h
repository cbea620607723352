/* layout/recipe/recipe_yaml.h — NVIDIA Model Optimizer's PTQ recipe YAML as an lwq recipe.
 *
 * What is read and how it maps is docs/RECIPES.md; in short: top-level `imports` (alias -> path
 * relative to the recipe root, `.yml` / `.yaml` probed in that order), `metadata.recipe_type: ptq`,
 * `quantize: {algorithm, quant_cfg}`; `$import` splices list units and merges attribute units;
 * list units with imports are two YAML documents.  Everything lwq would have to approximate is
 * refused with the file, line, entry and field named (recipe_qcfg.c maps the entries).
 *
 * Hostile input: every file is at most 1 MiB and goes through layout/recipe/yaml_doc.h (no aliases, no
 * tags, bounded depth and size); at most LWQ_RECIPE_YAML_MAX_FILES files, imports nested at most
 * LWQ_RECIPE_YAML_MAX_DEPTH deep, cycles refused; an import path must be relative, without `..`,
 * and must resolve (symlinks included) inside the recipe root. */
#ifndef LWQ_LAYOUT_RECIPE_YAML_H
#define LWQ_LAYOUT_RECIPE_YAML_H

#include <limits.h>
#include <stddef.h>

#include "layout/recipe/recipe.h"

#define LWQ_RECIPE_YAML_MAX_FILES 64
#define LWQ_RECIPE_YAML_MAX_DEPTH 16

#define LWQ_RECIPE_AQ_MAX_SPACES 16
#define LWQ_RECIPE_AQ_MAX_PATTERNS 16
#define LWQ_RECIPE_AQ_PATTERN_MAX 128

/* One of an auto_quantize recipe's module_search_spaces (Model Optimizer 0.47's
 * AutoQuantizeModuleSearchSpace): a search group every member of which matches one of the globs
 * (over module names, Model Optimizer's fnmatch) takes these candidates instead of the top-level
 * ones; none only with allow_no_quant (Model Optimizer's default: true). */
typedef struct lwq_recipe_aq_space {
    int npatterns;
    char pattern[LWQ_RECIPE_AQ_MAX_PATTERNS][LWQ_RECIPE_AQ_PATTERN_MAX];
    int nvfp4, fp8, w4a16;          /* candidate_formats, by their presets' paths */
    int nvfp4_mse;                  /* nvfp4_w4a4_weight_mse_fp8_sweep (NVFP4 with its own weight algorithm) */
    int w4a16_f46;                  /* weight-only Four-over-Six NVFP4 (an inline candidate's) */
    int allow_no_quant;
    int line;                       /* of the entry, for messages */
} lwq_recipe_aq_space;

/* Run settings the algorithm's `layerwise` block carries (lwq is always layerwise). */
typedef struct lwq_recipe_run {
    int has_checkpoint_dir;
    char checkpoint_dir[PATH_MAX];  /* layerwise.checkpoint_dir: the resume directory, which only the
                                       command line may choose (lwq quantize refuses it without a
                                       --resume-dir: a recipe from elsewhere must not pick where
                                       lwq writes) */
    char checkpoint_dir_at[PATH_MAX + 16]; /* "file:line" of that key, for the message */
    int has_qdq_next, qdq_next;     /* layerwise.get_qdq_activations_from_prev_layer */
    /* An auto_quantize recipe lwq runs (docs/RECIPES.md): its search, as the same command's
     * --auto-quantize-* options; the lwq_recipe is then the preset `aq_qformat` (the search's base). */
    int is_aq;
    char aq_qformat[8];             /* "fp8" when an FP8 candidate is listed, else "nvfp4" */
    double aq_bits;                 /* constraints.effective_bits */
    int aq_nvfp4, aq_fp8, aq_w4a16; /* candidate_formats (none is always added, as Model Optimizer adds it) */
    int aq_nvfp4_mse;               /* the nvfp4_w4a4_weight_mse_fp8_sweep preset among them */
    int aq_w4a16_f46;               /* weight-only Four-over-Six NVFP4 among them (an inline candidate) */
    int aq_active_moe;              /* constraints.cost_model active_moe */
    double aq_moe_ratio;            /* constraints.cost.active_moe_expert_ratio; 0: not given */
    int aq_kl;                      /* auto_quantize_method kl_div (else gradient) */
    int aq_score_size;              /* score_size; 0: not given (Model Optimizer's default, 128) */
    int aq_nspaces;                 /* module_search_spaces; with them aq_nvfp4/fp8/w4a16 are the top-level
                                       candidates of the groups no space matches (none always among them,
                                       all of them when candidate_formats is absent: a group then takes none) */
    lwq_recipe_aq_space aq_space[LWQ_RECIPE_AQ_MAX_SPACES];
    /* A top-level `quantize` beside auto_quantize (Model Optimizer's fixed PTQ baseline): the lwq_recipe is
     * then that baseline, compiled as a ptq recipe's quantize block is; the groups no space matches keep
     * its format (engine/autoq/autoq.h).  As Model Optimizer's schema requires, it comes with
     * module_search_spaces and without top-level candidate_formats. */
    int aq_baseline;
    double aq_baseline_bits;        /* the baseline's quantize.effective_bits (0: none) */
} lwq_recipe_run;

/* Load a YAML recipe; imports resolve under `root` (NULL: the current directory). */
int lwq_recipe_yaml_load(const char *path, const char *root, lwq_recipe *r, lwq_recipe_run *run, lwq_error *e);

/* What --recipe ARG names: an existing file as given, else ARG, ARG.yml, ARG.yaml under `root`
 * (NULL: no root, so only the file as given).  Writes the path to out; *is_yaml says whether it
 * is YAML (.yml / .yaml) rather than lwq's JSON. */
int lwq_recipe_find(const char *arg, const char *root, char *out, size_t cap, int *is_yaml, lwq_error *e);

#endif
