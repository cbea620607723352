/* engine/eval/emul/eval_memo.h — reuse a layer forward's GEMM and attention results in a second
 * forward of the same batch when an op is reached again with the same inputs.
 *
 * The auto-quantize search runs one layer over one batch many times, each time with one group of
 * linears quantized: every op before that group, and every op after it whose inputs did not
 * change (the MLP when only down_proj is quantized: its gate/up GEMMs), computes what the source
 * forward computed.  Recording one forward and replaying the others turns those ops into copies.
 *
 * Record: every GEMM (input bytes, weight and bias pointers, output bytes) and every attention
 * (q, k, v and key-mask bytes, geometry, output bytes) in call order.  Replay: the k-th GEMM with
 * a given weight pointer is matched with the k-th recorded GEMM with that pointer (attention: the
 * k-th call), and when the bias pointer, dtypes, shapes and input bytes are all equal the recorded
 * output is copied instead of computed; anything else is computed.  Ops are deterministic, so a
 * replay gives bit for bit what computing gives (tests/engine/autoq/test_memo.c).  Weights are
 * told apart by pointer: the caller keeps every recorded weight alive and unchanged until
 * lwq_memo_clear (the layer's source views; a quantized replacement is another buffer).
 *
 * Host memory only: the inputs are compared with memcmp, so the memo is for the CPU backend (on a
 * GPU the comparison would move every input across the bus, more than the GEMM it saves).
 * Memory: the inputs and outputs of every GEMM and attention of one forward of one batch.
 * One thread. */
#ifndef LWQ_ENGINE_EVAL_MEMO_H
#define LWQ_ENGINE_EVAL_MEMO_H

#include <stdint.h>

#include "kernels/backend.h"

typedef enum lwq_memo_mode { LWQ_MEMO_OFF = 0, LWQ_MEMO_RECORD, LWQ_MEMO_REPLAY } lwq_memo_mode;

typedef struct lwq_memo_call {
    int kind;                  /* 0 GEMM, 1 attention */
    const void *w, *bias;      /* GEMM: weight and bias data pointers */
    int64_t geo[8];            /* dtypes, shapes and attention geometry that must match */
    float scale;               /* attention's softmax scale */
    int kv_fp8;                /* attention: the emulated FP8 KV cache was on */
    float k_scale, v_scale;    /* ... with these scales */
    void *in;                  /* the input bytes (attention: q | k | v | key mask) */
    size_t in_bytes, in_cap;
    void *out;
    size_t out_bytes, out_cap;
} lwq_memo_call;

typedef struct lwq_memo {
    lwq_memo_mode mode;
    int n, cap;                /* recorded calls */
    lwq_memo_call *calls;
    int *idx;                  /* (n) call indexes sorted by (kind, w, order), built for replay */
    int *cnt;                  /* (n) calls of a run of idx matched so far in this replay */
    int indexed;
    int64_t hits, misses;      /* over the memo's life */
    uint64_t bytes_saved;      /* output bytes copied instead of computed */
} lwq_memo;

void lwq_memo_init(lwq_memo *m);
void lwq_memo_free(lwq_memo *m);
/* Forget the recorded forward (buffers are kept for the next one) and switch to RECORD. */
void lwq_memo_record(lwq_memo *m);
/* Start a replay of the recorded forward (every call may match again). */
void lwq_memo_replay(lwq_memo *m);
void lwq_memo_off(lwq_memo *m);

/* For the backend wrapper (engine/eval/emul/eval_emul.c).  *_lookup: 1 when the recorded output was
 * copied into y / a->out (REPLAY only), 0 when the op must be computed.  *_store: after computing,
 * in RECORD mode, keep the call (0, or LWQ_ENOMEM). */
int lwq_memo_gemm_lookup(lwq_memo *m, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias, lwq_tensor *y);
int lwq_memo_gemm_store(lwq_memo *m, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                        const lwq_tensor *y, lwq_error *e);
int lwq_memo_attn_lookup(lwq_memo *m, const lwq_attn_args *a, int kv_fp8, float k_scale, float v_scale);
int lwq_memo_attn_store(lwq_memo *m, const lwq_attn_args *a, int kv_fp8, float k_scale, float v_scale,
                        lwq_error *e);

#endif
