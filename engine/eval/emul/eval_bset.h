/* engine/eval/emul/eval_bset.h — token sequences cut into left-padded batches, each with its place in
 * a host boundary buffer (the hidden states of every batch entering the next layer), and the
 * copies between a batch of the boundary and the device work tensor.  Shared by `lwq eval`
 * (engine/eval/eval.c) and the auto-quantize search (engine/autoq/).
 *
 * Ownership: the set owns its batches (on the backend given to build) and token arrays; free it
 * with the same backend. */
#ifndef LWQ_ENGINE_EVAL_BSET_H
#define LWQ_ENGINE_EVAL_BSET_H

#include <stdint.h>

#include "engine/forward/forward.h"
#include "engine/run/engine.h"

typedef struct lwq_eval_bset {
    int nb;
    lwq_batch *batches;
    int32_t **tokens;          /* per batch (rows), left-padded */
    int64_t *rows;
    uint64_t *boff;            /* byte offset of batch b in a boundary; boff[nb] = total */
    int64_t max_rows, real_tokens;
} lwq_eval_bset;

/* Samples of c in batches of B sequences; a boundary row is `hidden` elements of esz bytes.
 * `what` names the set in errors ("eval", "calibration").  An empty set or sample is refused. */
int lwq_eval_bset_build(lwq_eval_bset *s, const lwq_calib_set *c, int B, const lwq_backend *be, int64_t hidden,
                        size_t esz, const char *what, lwq_error *e);
void lwq_eval_bset_free(lwq_eval_bset *s, const lwq_backend *be);
/* The work tensor (max rows, hidden) cut to batch b's rows. */
lwq_tensor lwq_eval_bset_view(const lwq_eval_bset *s, int b, const lwq_tensor *work);
/* Batch b of the boundary bnd -> work, and back. */
int lwq_eval_bset_load(const lwq_eval_bset *s, int b, const lwq_backend *be, const unsigned char *bnd,
                       lwq_tensor *work, lwq_error *e);
int lwq_eval_bset_store(const lwq_eval_bset *s, int b, const lwq_backend *be, const lwq_tensor *work,
                        unsigned char *bnd, lwq_error *e);

#endif
