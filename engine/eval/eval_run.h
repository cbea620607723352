/* engine/eval/eval_run.h — state of one `lwq eval` run, shared by eval.c (set-up and the depth loop)
 * and eval_head.c (hidden-state differences, the head and the next-token metrics).  Not public. */
#ifndef LWQ_ENGINE_EVAL_RUN_H
#define LWQ_ENGINE_EVAL_RUN_H

#include "engine/eval/emul/eval_bset.h"
#include "engine/eval/eval_internal.h"
#include "engine/forward/forward.h"
#include "engine/quant/qops.h"
#include "io/pool.h"
#include "io/prefetch.h"
#include "io/reader.h"

typedef struct lwq_eval_stream {
    unsigned char *bnd;        /* hidden states of every batch entering the next layer (host) */
    lwq_model model;
    int model_open;
    lwq_emul em;               /* candidates: the serving engine's activation quantization */
    int em_open;
    lwq_qdir qd;               /* a quantized checkpoint candidate */
    lwq_quant_choice **choice; /* an in-memory candidate: [layer][linear] */
    int kv_fp8;                /* FP8 KV cache (scales from the layer, else 1.0) */
} lwq_eval_stream;

typedef struct lwq_eval_ctx {
    const lwq_eval_opts *o;
    lwq_eval_result *res;
    lwq_ckpt ck;
    int ck_open;
    int N;
    lwq_arch_layer *plans;
    lwq_backend be;
    int be_open;
    lwq_qops qops;
    lwq_dtype act;
    int64_t hidden;
    lwq_eval_bset data, calib;
    int in_memory;             /* some candidate is built from a recipe: the calibration stream runs */
    lwq_tensor work;           /* (max rows, hidden) act on the device */
    lwq_eval_stream src, cal;
    lwq_eval_stream *cand;     /* o->ncand */
    lwq_io_reader *rd;
    lwq_pool pool;
    int pool_open;
    lwq_prefetch *pf;
    lwq_io_range **ranges;
    int *nranges;
    FILE *jlog;
} lwq_eval_ctx;

/* Boundary <-> work tensor for batch b of `bs`. */
int lwq_eval_to_work(lwq_eval_ctx *v, const lwq_eval_bset *bs, int b, const unsigned char *bnd, lwq_error *e);
int lwq_eval_from_work(lwq_eval_ctx *v, const lwq_eval_bset *bs, int b, unsigned char *bnd, lwq_error *e);

/* eval_head.c */
/* ||h_q - h||^2 / ||h||^2 and max |h_q - h| over the real eval tokens of two boundaries. */
void lwq_eval_layer_diff(const lwq_eval_ctx *v, const unsigned char *src, const unsigned char *q, double *rel_mse,
                         double *max_abs);
/* Final norm + lm_head of every stream on the eval tokens: KL, top-1, perplexities. */
int lwq_eval_head(lwq_eval_ctx *v, lwq_error *e);

#endif
