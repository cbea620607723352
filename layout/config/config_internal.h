/* layout/config/config_internal.h — what the files of the config parser share (layout/config/config.c: the
 * model as a whole; config_moe.c: routed experts, DeepSeek routing, MLA and DSA keys; config_keys.c:
 * typed key access; config_kimi.c: kimi_linear).  Not for use outside layout/config*.c.
 *
 * Typed key access: JSON null counts as absent (HF writes "rope_scaling": null); a key of the
 * wrong type or out of range is LWQ_EFORMAT naming config.json (x->path) and the key with its
 * section ("text_config." inside a wrapper).  Each returns 0 or a negative code. */
#ifndef LWQ_LAYOUT_CONFIG_INTERNAL_H
#define LWQ_LAYOUT_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "layout/config/config.h"

typedef struct lwq_cfg_ctx {
    const char *path;
    const char *section; /* "" or "text_config." */
    lwq_error *e;
} lwq_cfg_ctx;

/* o[key], NULL when o is NULL, the key is absent or null. */
const struct cJSON *lwq_cfg_get(const struct cJSON *o, const char *key);
/* An integer key in [lo, hi]; `req` makes absence an error, else *out = def. */
int lwq_cfg_int(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int req, int64_t def, int64_t lo,
                int64_t hi, int64_t *out);
int lwq_cfg_i32(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int req, int def, int lo, int hi,
                int *out);
/* A finite number; def when absent. */
int lwq_cfg_num(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, double def, double *out);
int lwq_cfg_bool(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int def, int *out);
/* A string shorter than cap; def when absent. */
int lwq_cfg_str(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, const char *def, char *out,
                size_t cap);

/* config_moe.c, called by parse_text_model once the common keys (dims, RoPE) are read: the
 * expert counts and routing keys of a MoE row, the MLA geometry (and mistral4's RoPE and query
 * scale), the DSA indexer of a dsa row. */
int lwq_cfg_parse_moe(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);
int lwq_cfg_parse_mla(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);
int lwq_cfg_parse_dsa(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);

/* config_kimi.c: kimi_linear's routed-expert keys (LWQ_KEYS_KIMI, from lwq_cfg_parse_moe), and
 * its KDA geometry with every layer's mixer and MLP kind (layer_mixer, layer_moe). */
int lwq_cfg_parse_kimi_moe(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);
int lwq_cfg_parse_kimi_layers(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);
/* nemotron_h (config_nemotron.c): the layer list (layers_block_type, layer_types or
 * hybrid_override_pattern) -> num_hidden_layers, layer_mixer, layer_moe, before any key that
 * depends on the layer count; then its Mamba2, MLP and MoE keys, checked against each other,
 * naming key, value and layer. */
int lwq_cfg_nemotron_layers(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);
int lwq_cfg_nemotron_keys(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);

#endif
