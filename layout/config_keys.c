/* layout/config_keys.c — typed access to config.json keys (contract in config_internal.h). */
#include "layout/config_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const cJSON *lwq_cfg_get(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

int lwq_cfg_int(const lwq_cfg_ctx *x, const cJSON *o, const char *key, int req, int64_t def, int64_t lo,
                int64_t hi, int64_t *out)
{
    const cJSON *v = lwq_cfg_get(o, key);
    if (!v) {
        if (req)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: required key \"%s%s\" is missing", x->path,
                            x->section, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" must be an integer", x->path, x->section,
                        key);
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" = %.0f is outside [%lld, %lld]", x->path,
                        x->section, key, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

int lwq_cfg_i32(const lwq_cfg_ctx *x, const cJSON *o, const char *key, int req, int def, int lo, int hi,
                int *out)
{
    int64_t v;
    int rc = lwq_cfg_int(x, o, key, req, def, lo, hi, &v);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

int lwq_cfg_num(const lwq_cfg_ctx *x, const cJSON *o, const char *key, double def, double *out)
{
    const cJSON *v = lwq_cfg_get(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" must be a finite number", x->path,
                        x->section, key);
    *out = v->valuedouble;
    return 0;
}

int lwq_cfg_bool(const lwq_cfg_ctx *x, const cJSON *o, const char *key, int def, int *out)
{
    const cJSON *v = lwq_cfg_get(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" must be true or false", x->path,
                        x->section, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int lwq_cfg_str(const lwq_cfg_ctx *x, const cJSON *o, const char *key, const char *def, char *out,
                size_t cap)
{
    const cJSON *v = lwq_cfg_get(o, key);
    const char *s = def;
    if (v) {
        if (!cJSON_IsString(v))
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" must be a string", x->path,
                            x->section, key);
        s = v->valuestring;
    }
    if (strlen(s) >= cap)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" is too long", x->path, x->section, key);
    snprintf(out, cap, "%s", s);
    return 0;
}
