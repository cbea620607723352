/* layout/config_internal.h — inside the config parser: the typed key readers config.c defines
 * and the per-family parsers beside it (config_nemotron.c) use.  Not public.
 *
 * Every reader names config.json, the section ("" or "text_config.") and the key in its error;
 * JSON null counts as absent (transformers writes "rope_scaling": null). */
#ifndef LWQ_LAYOUT_CONFIG_INTERNAL_H
#define LWQ_LAYOUT_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "layout/config.h"

typedef struct lwq_cfg_ctx {
    const char *path;
    const char *section; /* "" or "text_config." */
    lwq_error *e;
} lwq_cfg_ctx;

/* The value of key, or NULL when absent or null. */
const struct cJSON *lwq_cfg_get(const struct cJSON *o, const char *key);
/* An integer in [lo, hi]; `req` makes absence an error, else *out = def. */
int lwq_cfg_get_int(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int req, int64_t def,
                    int64_t lo, int64_t hi, int64_t *out);
int lwq_cfg_get_i32(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int req, int def, int lo,
                    int hi, int *out);
/* A finite number (def when absent). */
int lwq_cfg_get_num(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, double def, double *out);
int lwq_cfg_get_bool(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int def, int *out);
/* A string shorter than cap (def when absent). */
int lwq_cfg_get_str(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, const char *def, char *out,
                    size_t cap);

/* nemotron_h (config_nemotron.c): the layer list (layers_block_type, layer_types or
 * hybrid_override_pattern) -> num_hidden_layers, layer_mixer, layer_moe; before any other key. */
int lwq_cfg_nemotron_layers(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);
/* ... and its Mamba2, MLP and MoE keys, checked against each other, naming key, value and layer. */
int lwq_cfg_nemotron_keys(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);

#endif
