/* engine/eval/eval_kl.h — the next-token statistics of one row of f32 logits, in double: its
 * log-sum-exp and argmax (first index on ties), and KL(P_src || P_q) between two rows.  Identical
 * rows give exactly 0.  Shared by lwq eval's head (engine/eval/eval_head.c) and the
 * auto-quantize search's KL score. */
#ifndef LWQ_ENGINE_EVAL_KL_H
#define LWQ_ENGINE_EVAL_KL_H

#include <stdint.h>

typedef struct lwq_logit_stat {
    double lse;
    int64_t argmax;
} lwq_logit_stat;

/* z: (V) */
lwq_logit_stat lwq_eval_logit_stat(const float *z, int64_t V);
/* sum_v p_src(v) (log p_src(v) - log p_q(v)) */
double lwq_eval_kl_row(const float *zs, lwq_logit_stat ss, const float *zq, lwq_logit_stat sq, int64_t V);

#endif
