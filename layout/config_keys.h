/* layout/config_keys.h — the typed config.json key readers of layout/config.c, for the parsers
 * of single families that live in files of their own (layout/config_kimi.c).  Internal to
 * layout/: not part of config.h's contract.
 *
 * A key that is JSON null counts as absent.  Every reader names the file and the key (with the
 * "text_config." section of a wrapper) in its error. */
#ifndef LWQ_LAYOUT_CONFIG_KEYS_H
#define LWQ_LAYOUT_CONFIG_KEYS_H

#include <stdint.h>

#include "layout/config.h"

struct cJSON;

typedef struct lwq_cfg_ctx {
    const char *path;
    const char *section; /* "" or "text_config." */
    lwq_error *e;
} lwq_cfg_ctx;

/* o[key], NULL when absent or null. */
const struct cJSON *lwq_cfg_get(const struct cJSON *o, const char *key);
/* An integer in [lo, hi]; `req` makes absence an error, else *out = def. */
int lwq_cfg_int(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int req, int64_t def, int64_t lo,
                int64_t hi, int64_t *out);
int lwq_cfg_i32(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int req, int def, int lo, int hi,
                int *out);
int lwq_cfg_num(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, double def, double *out);
int lwq_cfg_bool(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, int def, int *out);
int lwq_cfg_str(const lwq_cfg_ctx *x, const struct cJSON *o, const char *key, const char *def, char *out,
                size_t cap);

/* kimi_linear (layout/config_kimi.c): the routed-expert keys (LWQ_KEYS_KIMI), and the KDA
 * geometry with every layer's mixer and MLP kind (layer_mixer, layer_moe). */
int lwq_cfg_parse_kimi_moe(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);
int lwq_cfg_parse_kimi_layers(const lwq_cfg_ctx *x, const struct cJSON *o, lwq_model_config *c);

#endif
