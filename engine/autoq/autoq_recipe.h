/* engine/autoq/autoq_recipe.h — the chosen mix as an lwq JSON recipe and a Model Optimizer YAML
 * recipe (engine/autoq/autoq_recipe.c).  Not public. */
#ifndef LWQ_ENGINE_AUTOQ_RECIPE_H
#define LWQ_ENGINE_AUTOQ_RECIPE_H

#include "engine/autoq/autoq_internal.h"

typedef struct lwq_aq_recipe {
    char *json;              /* lwq recipe JSON text */
    char *yaml;              /* Model Optimizer YAML text, or NULL (yaml_why says why) */
    char yaml_why[512];
    lwq_recipe r;            /* the JSON parsed: what pass 2 runs */
} lwq_aq_recipe;

/* The recipe of solution sol over the layer plans, named `name` (the stem of its files); the YAML
 * is also written to yaml_path (to be read back; removed again when it does not say what was
 * chosen).  The base recipe's rules come
 * first, so its calibration settings and exclusions stand; then per group a rule with its format. */
int lwq_aq_recipe_build(const lwq_autoq_opts *o, const lwq_aq_solution *sol, const lwq_arch_layer *plans, int N,
                        const char *name, const char *yaml_path, lwq_aq_recipe *out, lwq_error *e);
void lwq_aq_recipe_free(lwq_aq_recipe *r);

#endif
