/* tools/quantize_batch.h — `--batch-size 0` (hf_ptq's default): the largest batch whose planned
 * peak memory fits the budgets. */
#ifndef LWQ_TOOLS_QUANTIZE_BATCH_H
#define LWQ_TOOLS_QUANTIZE_BATCH_H

#include "engine/run/engine.h"

/* o->batch_size is set to the largest B in [1, min(samples, 4096)] whose lwq_quantize_plan peaks
 * fit --max-cpu-memory-gb (default: the machine's physical memory) and --max-gpu-memory-gb (when
 * given); the choice is printed on stderr unless o->quiet.  The plan grows with the batch, so a
 * binary search finds it. */
int lwq_pick_batch_size(lwq_quantize_opts *o, lwq_error *e);

#endif
