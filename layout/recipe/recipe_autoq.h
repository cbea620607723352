/* layout/recipe/recipe_autoq.h — internal to layout/recipe: an auto_quantize recipe's search options.
 *
 * recipe_yaml.c reads the recipe file and hands its top-level mapping here before any import loads
 * (the candidates are known by their presets' paths); what is read, and what is refused, is
 * docs/RECIPES.md section 11.  Nothing here reads a file. */
#ifndef LWQ_LAYOUT_RECIPE_AUTOQ_H
#define LWQ_LAYOUT_RECIPE_AUTOQ_H

#include "core/sys/error.h"
#include "layout/recipe/recipe_yaml.h"
#include "layout/recipe/yaml_doc.h"

/* The recipe file as this part sees it: its name for messages, its top-level mapping, its top-level
 * imports (alias -> path; NULL when none), and how an inline candidate (a QuantizeConfig written in
 * the recipe) compiles: `compile` loads the imports it names and compiles its algorithm and quant_cfg
 * as a ptq recipe's quantize block, then resolves a plain linear's weight and input quantizers under
 * the names Model Optimizer applies a candidate with (relative to the module: weight_quantizer,
 * input_quantizer) into *c; 0, or a negative LWQ_E* with the message in e (NULL: inline candidates
 * are refused). */
typedef struct lwq_recipe_aq_file {
    const char *rel;
    const lwq_ynode *body;
    const lwq_ynode *imports;
    int (*compile)(void *ctx, const lwq_ynode *cand, lwq_quant_choice *c, lwq_error *e);
    void *ctx;
} lwq_recipe_aq_file;

/* The `auto_quantize` mapping `aq` (at `line` of f): fills run (is_aq and the search's options) when lwq
 * runs all it says, else refuses naming what it lacks and the equivalent --auto-quantize-* options. */
int lwq_recipe_aq_parse(const lwq_recipe_aq_file *f, const lwq_ynode *aq, int line, lwq_recipe_run *run, lwq_error *e);

/* The other top-level keys of an auto_quantize recipe lwq runs: imports, metadata (recipe_type
 * auto_quantize), auto_quantize. */
int lwq_recipe_aq_top(const lwq_recipe_aq_file *f, lwq_error *e);

#endif
