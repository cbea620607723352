/* engine/eval/eval_experts.h — relative output error of each routed expert of a candidate's MoE layer
 * (engine/eval/eval_experts.c).  Not public. */
#ifndef LWQ_ENGINE_EVAL_EXPERTS_H
#define LWQ_ENGINE_EVAL_EXPERTS_H

#include "engine/eval/eval.h"
#include "engine/forward/forward.h"
#include "layout/arch/arch.h"

typedef struct lwq_eval_experts {
    const lwq_arch_layer *plan;
    int n;                        /* routed experts */
    const lwq_names *names;       /* cfg.names */
    const lwq_backend *src_be, *q_be;
    lwq_dtype act;
    const lwq_weights *wsrc, *wq; /* the layer's source and candidate weights */
    double *num, *den;            /* (n) sums of squared error and of squared source output */
    int64_t *tokens;              /* (n) routed tokens seen */
    lwq_observer obs;             /* pass to the candidate's layer forward */
} lwq_eval_experts;

int lwq_eval_experts_init(lwq_eval_experts *X, const lwq_arch_layer *plan, int n_experts, const lwq_names *names,
                          const lwq_backend *src_be, const lwq_backend *q_be, lwq_dtype act, const lwq_weights *wsrc,
                          const lwq_weights *wq, lwq_error *e);
/* The LWQ_EVAL_WORST experts with the largest relative error (tokens > 0), largest first. */
void lwq_eval_experts_worst(const lwq_eval_experts *X, lwq_eval_layer *out);
void lwq_eval_experts_free(lwq_eval_experts *X);

#endif
