/* layout/recipe/recipe_attrs.h — a quant_cfg entry's cfg (Model Optimizer's QuantizerAttributeConfig),
 * after `$import` merges, into lwq_mo_entry's kind / use_constant_amax / constant_amax. */
#ifndef LWQ_LAYOUT_RECIPE_ATTRS_H
#define LWQ_LAYOUT_RECIPE_ATTRS_H

#include "layout/recipe/recipe_qcfg.h"
#include "layout/recipe/yaml_doc.h"

/* Keys in order of first appearance; a later value for a key replaced the earlier one. */
typedef struct lwq_mo_kv {
    const char *key[48];
    const lwq_ynode *val[48];
    const void *from[48];     /* the file the value was written in (recipe_yaml.c's) */
    int n;
} lwq_mo_kv;

/* en->where and en->glob name the entry in messages. */
int lwq_mo_parse_attrs(lwq_mo_entry *en, const lwq_mo_kv *a, lwq_error *e);

#endif
