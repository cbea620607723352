/* tests/helpers/check/qcheck.h — check a `lwq quantize` output directory against its source checkpoint,
 * ../shared/spec/FORMATS.md and statistics recomputed independently of the engine.  Test-only.
 *
 * The recomputation (qc_ref_compute) runs the source model through engine/forward/forward.h batch by
 * batch, the way the engine batches (left padding, batch_size sequences), with observers that
 * take every amax on the host from the rows they are shown; the layer plan, the recipe code and
 * the engine's statistics module are not used.  Which linears a preset quantizes, the fused
 * groups and the expert input rule are written down here from the issue, FORMATS.md and Model
 * Optimizer 0.47's export (perf/RESULTS.md, "Side by side with Model Optimizer").  Scales
 * are compared for exact equality, so the run under test must use the CPU backend (--device cpu)
 * like the recomputation; FP8 weight scales are checked for the `max` algorithm (all presets).
 *
 * Failures are Criterion assertions naming the tensor or file; helpers must be called from a
 * test.  Nothing here is thread-safe. */
#ifndef LWQ_TESTS_QCHECK_H
#define LWQ_TESTS_QCHECK_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "layout/checkpoint/safetensors.h"

typedef enum qc_fmt { QC_NONE = 0, QC_NVFP4, QC_FP8 } qc_fmt;
typedef enum qc_kv { QC_KV_NONE = 0, QC_KV_FP8, QC_KV_FP8_CAST } qc_kv;

/* What a preset does to a decoder-layer linear `module` (routers: QC_NONE). */
qc_fmt qc_preset_format(const char *preset, const char *module);

/* Calibration sequences: ids[i][0..len[i]). */
typedef struct qc_calib {
    int n;
    int64_t *len;
    int32_t **ids;
} qc_calib;

/* n samples of the given lengths, ids pseudo-random in [0, vocab) from seed. */
void qc_calib_make(qc_calib *c, int n, const int64_t *len, int64_t vocab, unsigned seed);
/* As {"input_ids": [...]} lines. */
void qc_calib_write(const qc_calib *c, const char *path);
void qc_calib_free(qc_calib *c);

typedef struct qc_ref {
    int n, cap;
    char (*name)[128];     /* observed linear inputs, by module name */
    float *amax;
    int64_t *rows;
    int nlayers, nexp;
    float *k_amax, *v_amax;   /* (nlayers) */
    int64_t *counts;          /* (nlayers, nexp) routed real tokens */
    int include_padding;
} qc_ref;

/* Statistics of the calibration set on the source model in model_dir. */
void qc_ref_compute(qc_ref *r, const char *model_dir, const qc_calib *c, int batch_size, int include_padding,
                    int all_experts);
void qc_ref_free(qc_ref *r);
/* amax of the input of `module` and the rows seen (0 rows: never reached). */
float qc_ref_amax(const qc_ref *r, const char *module, int64_t *rows);

/* An output directory: the index and every shard it names. */
typedef struct qc_out {
    char dir[512];
    int nfiles;
    lwq_st_file files[64];
    char fname[64][64];
} qc_out;

void qc_out_open(qc_out *o, const char *dir);
void qc_out_free(qc_out *o);
/* Entry of tensor `name` (NULL when absent); *file receives the shard index. */
const lwq_st_entry *qc_out_find(const qc_out *o, const char *name, int *file);
/* The tensor's bytes (malloc'd); asserts presence, dtype and shape (ndim < 0: not checked). */
void *qc_out_read(const qc_out *o, const char *name, lwq_dtype dt, int ndim, const int64_t *shape);
float qc_out_scalar(const qc_out *o, const char *name);

/* Every check of the end-to-end list: tensors and their dtypes/shapes, the index, the
 * shard a tensor lives in, unquantized tensors byte-identical to the source, dequantization
 * within one code step, weight_scale_2 / weight_scale from the (group) weight amax, input
 * scales from ref (fused-group max, routed experts' shared input max), k/v scales, and both config
 * files (FORMATS.md 7). */
void qc_check_output(const char *model_dir, const char *out_dir, const char *preset, qc_kv kv, const qc_ref *ref);

/* Whether two files have the same bytes. */
int qc_same_file(const char *a, const char *b);
/* Every regular file of a and b: same names, same bytes (asserts, naming the first difference). */
void qc_assert_same_dirs(const char *a, const char *b);

#endif
