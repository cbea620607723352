/* tools/mkmodel/mkmodel_values.h — the values `lwq mkmodel` writes: a counter-based hash of
 * (seed, tensor name, element index), so a tensor's bytes do not depend on the shard size, the
 * write order or the thread count.  Irwin-Hall of four 16-bit uniforms, scaled to
 * ~N(mean, std), rounded (nearest even) to the tensor's dtype.  The bottom of mkmodel:
 * cmd_mkmodel.c (plain tensors) and mkmodel_src.c (the logical values of packed ones) both draw
 * from it. */
#ifndef LWQ_TOOLS_MKMODEL_VALUES_H
#define LWQ_TOOLS_MKMODEL_VALUES_H

#include <stdint.h>

#include "core/data/dtype.h"

/* Elements [first, first + count) of tensor `name` in dtype dt (bf16, f16 or f32) into out. */
void lwq_mkmodel_fill(uint64_t seed, const char *name, float mean, float std, lwq_dtype dt,
                      int64_t first, int64_t count, void *out);
/* The same elements as f32 (the logical values of a packed tensor). */
void lwq_mkmodel_values(uint64_t seed, const char *name, float mean, float std, int64_t first,
                        int64_t count, float *out);

#endif
