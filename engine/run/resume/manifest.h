/* engine/run/resume/manifest.h — the resume manifest: what is committed, and what the run was.
 *
 * manifest.json lives in the resume directory (`<out>.layerwise_resume/`).  It names the run's
 * fingerprint (with one hash per input, so a refused rerun can say which input changed), the
 * number of committed layers with each committed shard's size and XXH64, and the boundary file
 * that holds the input of the first uncommitted layer.  It is replaced atomically
 * (io/durable.h): the invariant is that it never names a shard or boundary that is not durable
 * (the commit order is in engine/run/run_output.c, the step list in engine/run/run.c).  Parsing treats
 * the file as untrusted: sizes capped, every field type-checked, file names restricted to the
 * names lwq itself writes. */
#ifndef LWQ_ENGINE_MANIFEST_H
#define LWQ_ENGINE_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "layout/checkpoint/safetensors.h"

#define LWQ_MANIFEST_VERSION 1
#define LWQ_FP_PARTS 8

typedef struct lwq_fingerprint {
    uint64_t part[LWQ_FP_PARTS];   /* see lwq_fp_part_names */
    uint64_t all;                  /* hash of the parts */
} lwq_fingerprint;

/* "source checkpoint", "config.json", "recipe", "calibration tokens", ... */
extern const char *const lwq_fp_part_names[LWQ_FP_PARTS];
enum {
    LWQ_FP_SOURCE = 0, LWQ_FP_CONFIG, LWQ_FP_RECIPE, LWQ_FP_CALIB, LWQ_FP_BATCHING,
    LWQ_FP_OPTIONS, LWQ_FP_BACKEND, LWQ_FP_VERSION
};
void lwq_fp_finish(lwq_fingerprint *f);

typedef struct lwq_manifest_layer {
    uint64_t bytes, xxh64;
    char *report;                  /* owned compact JSON object: the layer's calibration report */
} lwq_manifest_layer;

/* A run over ranks keeps the boundary as parts, one per rank, named by the layer whose input
 * they hold and their batch range (LWQ_RESUME_PART_FMT), so a resume with another rank count
 * reads any rows from them.  The parts tile the batches [0, nb) in order. */
typedef struct lwq_manifest_part {
    int b0, b1;                    /* calibration batches [b0, b1) */
    uint64_t bytes, xxh64;
} lwq_manifest_part;

typedef struct lwq_manifest {
    lwq_fingerprint fp;
    int num_layers;
    int committed;                 /* layers 0..committed-1 are durable */
    int complete;                  /* tail, index and configs written too */
    char boundary_file[32];        /* "" or "boundary-0.bin" / "boundary-1.bin" */
    uint64_t boundary_bytes, boundary_xxh64;
    int nparts;                    /* 0, or the boundary is these parts (boundary_file is "") */
    lwq_manifest_part *parts;
    lwq_manifest_layer *layers;    /* num_layers entries (committed ones meaningful) */
    int has_head_amax;             /* a W8A8 lm_head: its input's calibration amax, committed with the last
                                      layer (the final norm of that layer's output, which is kept nowhere) */
    float head_amax;               /* "lm_head_input_amax": its f32 bits as hex, exact */
} lwq_manifest;

int lwq_manifest_init(lwq_manifest *m, const lwq_fingerprint *fp, int num_layers, lwq_error *e);
void lwq_manifest_free(lwq_manifest *m);
/* LWQ_ENOENT (no message) when the file does not exist. */
int lwq_manifest_load(const char *path, lwq_manifest *m, lwq_error *e);
/* The JSON text (malloc'd; NULL when out of memory). */
char *lwq_manifest_render(const lwq_manifest *m);
/* Durable replace of `path`. */
int lwq_manifest_save(const char *path, const lwq_manifest *m, lwq_error *e);
/* Writes into `out` the names of the inputs that differ ("recipe, calibration tokens"); returns
 * how many differ. */
int lwq_fp_diff(const lwq_fingerprint *a, const lwq_fingerprint *b, char *out, size_t cap);
/* JSON fields of the resume files, read as untrusted input: a 16-digit hex string; a number that
 * is a non-negative integer <= 2^53.  0, or -1 when the field is absent or malformed. */
struct cJSON;
void lwq_json_put_hex(struct cJSON *o, const char *k, uint64_t v);
int lwq_json_get_hex(const struct cJSON *o, const char *k, uint64_t *v);
int lwq_json_get_u64(const struct cJSON *o, const char *k, uint64_t *v);
/* A resume-state JSON file (at most max_bytes, read as every input is) parsed into *root (the
 * caller's to delete): LWQ_ENOENT when there is none, LWQ_EFORMAT when it is not JSON. */
int lwq_json_state_load(const char *path, size_t max_bytes, struct cJSON **root, lwq_error *e);
/* "model-layer-00003.safetensors" */
void lwq_shard_name(int layer, char out[40]);

/* ---- naming rules: the resume directory (one home; layout/format/export.h has the output's) ---- */
#define LWQ_RESUME_SUFFIX ".layerwise_resume"   /* default resume dir: OUT + this, beside OUT */
#define LWQ_RESUME_MANIFEST "manifest.json"
#define LWQ_RESUME_BOUNDARY_FMT "boundary-%d.bin" /* %d: 0 or 1, the boundary alternation */
#define LWQ_RESUME_PART_PREFIX "boundary-L"
#define LWQ_RESUME_PART_FMT LWQ_RESUME_PART_PREFIX "%d-b%d-%d.bin" /* layer, b0, b1 */
/* "boundary-L5-b0-16.bin": the part of layer `layer`'s input holding batches [b0, b1). */
void lwq_part_name(int layer, int b0, int b1, char out[64]);
/* XXH64 and size of a whole file. */
int lwq_file_xxh64(const char *path, uint64_t *hash, uint64_t *bytes, lwq_error *e);
/* lwq_st_open of an output or resume file, opened through the io/sys.h table. */
int lwq_out_st_open(const char *path, lwq_st_file *f, lwq_error *e);

#endif
