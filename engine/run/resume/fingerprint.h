/* engine/run/resume/fingerprint.h — what a quantize run is: the hash of every input that changes its
 * output (the source shards' names, sizes, modification times and headers; config.json; every
 * linear's resolved quantization choice and the recipe's name and KV cache mode; the calibration
 * tokens; batching where it matters; calibration options; backend; format version), one hash per
 * input so a refused resume can name what changed (engine/run/resume/manifest.h).  The one home of a
 * run's identity: lwq quantize and the auto-quantize search (which adds its own settings to the
 * options part) both compute it here. */
#ifndef LWQ_ENGINE_FINGERPRINT_H
#define LWQ_ENGINE_FINGERPRINT_H

#include "engine/run/engine.h"
#include "engine/run/resume/manifest.h"
#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"

/* choice[L][i]: linear i of layer L (plans[L]); backend: the backend's name ("cpu", "cuda"). */
int lwq_fingerprint_run(const lwq_ckpt *ck, int nlayers, const lwq_arch_layer *plans, lwq_quant_choice *const *choice,
                        const lwq_quantize_opts *o, const char *backend, lwq_fingerprint *f, lwq_error *e);

#endif
