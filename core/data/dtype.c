#include "core/data/dtype.h"

#include "core/sys/error.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[LWQ_DTYPE_COUNT] = {
    [LWQ_F64] = {"F64", 8},   [LWQ_F32] = {"F32", 4},         [LWQ_F16] = {"F16", 2},
    [LWQ_BF16] = {"BF16", 2}, [LWQ_I64] = {"I64", 8},         [LWQ_I32] = {"I32", 4},
    [LWQ_I16] = {"I16", 2},   [LWQ_I8] = {"I8", 1},           [LWQ_U8] = {"U8", 1},
    [LWQ_BOOL] = {"BOOL", 1}, [LWQ_F8_E4M3] = {"F8_E4M3", 1}, [LWQ_F8_E5M2] = {"F8_E5M2", 1},
};

size_t lwq_dtype_size(lwq_dtype t) { return (unsigned)t < LWQ_DTYPE_COUNT ? dtypes[t].size : 0; }

const char *lwq_dtype_name(lwq_dtype t) { return (unsigned)t < LWQ_DTYPE_COUNT ? dtypes[t].name : "?"; }

int lwq_dtype_parse(const char *s, lwq_dtype *out)
{
    for (int i = 0; i < LWQ_DTYPE_COUNT; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (lwq_dtype)i;
            return 0;
        }
    }
    return LWQ_EFORMAT;
}

int lwq_dtype_is_float(lwq_dtype t) { return t == LWQ_F64 || t == LWQ_F32 || t == LWQ_F16 || t == LWQ_BF16; }
