/* core/data/tensor.h — a view of an n-d array (up to 4 dims) on the host or a device.
 * A tensor does not own its memory unless the function that made it says so.  Strides are in
 * elements, row-major by default; ops check shapes with the named predicates below rather than
 * assume contiguity silently. */
#ifndef LWQ_CORE_TENSOR_H
#define LWQ_CORE_TENSOR_H

#include <stdint.h>

#include "core/data/dtype.h"

#define LWQ_TENSOR_MAX_DIMS 4

typedef enum lwq_device { LWQ_DEV_CPU = 0, LWQ_DEV_CUDA = 1 } lwq_device;

typedef struct lwq_tensor {
    lwq_dtype dtype;
    int ndim;
    int64_t shape[LWQ_TENSOR_MAX_DIMS];
    int64_t stride[LWQ_TENSOR_MAX_DIMS]; /* in elements */
    void *data;
    lwq_device device;
} lwq_tensor;

/* A contiguous row-major view over `data`. */
static inline lwq_tensor lwq_tensor_view(void *data, lwq_dtype dt, int ndim, const int64_t *shape)
{
    lwq_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    t.data = data;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = s;
        s *= shape[i];
    }
    return t;
}

static inline int64_t lwq_tensor_numel(const lwq_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

static inline int lwq_tensor_is_contiguous(const lwq_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return 0;
        s *= t->shape[i];
    }
    return 1;
}

static inline int lwq_tensor_is_matrix(const lwq_tensor *t, int64_t rows, int64_t cols)
{
    return t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols;
}

#endif
