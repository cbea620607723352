/* engine/autoq/autoq_pass1.h — the state of pass 1, shared by autoq_score.c (set-up, resume
 * state, the depth loop), autoq_layer.c (one layer: calibration, quantization, replays) and
 * autoq_kl.c (the kl score's streams and their head).  Calls go score -> layer -> kl.  Not public. */
#ifndef LWQ_ENGINE_AUTOQ_PASS1_H
#define LWQ_ENGINE_AUTOQ_PASS1_H

#include <stdio.h>
#include <time.h>

#include "engine/autoq/autoq_internal.h"
#include "engine/eval/emul/eval_bset.h"
#include "engine/eval/emul/eval_emul.h"
#include "engine/eval/emul/eval_memo.h"
#include "engine/forward/forward.h"
#include "engine/quant/qops.h"
#include "io/pool.h"
#include "io/prefetch.h"
#include "io/reader.h"

typedef struct lwq_aq_ctx {
    const lwq_autoq_opts *o;
    const char *dir;           /* <resume>/auto_quantize */
    lwq_aq_scores *s;
    lwq_ckpt ck;
    int ck_open;
    int N;
    lwq_arch_layer *plans;
    lwq_dtype act;
    int64_t hidden;
    size_t esz;
    lwq_backend be;
    int be_open;
    lwq_qops qops;
    lwq_emul em;               /* the forward's backend: emulation of the replayed group's inputs */
    int em_open;
    lwq_memo memo;             /* replays reuse the recorded source forward (CPU) */
    int use_memo;
    lwq_model model;
    int model_open;
    lwq_calib_set cs_score, cs_rest; /* views of the calibration set: the scored samples, the others */
    lwq_eval_bset sc, rest;
    lwq_tensor work;           /* (max rows, hidden) act on the device */
    unsigned char *bnd[2];     /* calibration boundary: the scored rows (sc), then the others (rest) */
    int cur;                   /* bnd[cur] is the input of the next layer */
    uint64_t score_bytes, bnd_bytes;
    unsigned char *probe;      /* scored rows: the source input of the next layer plus one group's
                                  quantization error (the last layer's probe replay), score_bytes */
    int nstreams;              /* kl streams: one per (layer, group, quantized format), in that order */
    unsigned char **stream;    /* (nstreams) scored rows of each, score_bytes */
    lwq_io_reader *rd;
    lwq_pool pool;
    int pool_open;
    lwq_prefetch *pf;
    lwq_io_range **ranges;
    int *nranges;
    FILE *jlog;
    int first;                 /* the first layer this process computes */
    double t_calib, t_quant, t_record, t_replay, t_streams; /* process CPU seconds, summed */
} lwq_aq_ctx;

/* Process CPU seconds (per-phase costs a busy machine distorts less than walls). */
static inline double lwq_aq_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- autoq_layer.c ---- */
/* The search groups of layer L as this run makes them (a resumed record must describe the same). */
int lwq_aq_layer_groups(const lwq_aq_ctx *c, int L, lwq_aq_layer *A, lwq_error *e);
/* Steps 1-4 of layer L, its source tensors src (sorted views): rec filled, bnd[1 - cur] holds the
 * layer's output, the probe and the kl streams advanced. */
int lwq_aq_layer_process(lwq_aq_ctx *c, int L, const lwq_tlist *src, lwq_aq_lrec *rec, lwq_error *e);

/* ---- autoq_kl.c ---- */
/* Grow the kl streams to n (new ones allocated, contents undefined). */
int lwq_aq_streams_grow(lwq_aq_ctx *c, int n, lwq_error *e);
/* Every kl stream born before layer L through layer L with the source weights w. */
int lwq_aq_streams_layer(lwq_aq_ctx *c, int L, const lwq_weights *w, lwq_error *e);
/* After the last layer: the head of the source and of every stream on the scored rows; each
 * stream's mean KL goes to its group's kl[format]. */
int lwq_aq_streams_head(lwq_aq_ctx *c, lwq_error *e);
/* Final norm + lm_head of `w` on rows [r0, r0 + n) of scored batch b of boundary bnd -> host (n, V)
 * f32 logits (through lg, on the device; also the head search's, engine/autoq/head). */
int lwq_aq_head_rows(lwq_aq_ctx *c, const lwq_weights *w, const unsigned char *bnd, int b, int64_t r0, int64_t n,
                     lwq_tensor *lg, float *host, lwq_error *e);

#endif
