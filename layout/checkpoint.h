/* layout/checkpoint.h — a Hugging Face checkpoint directory as a tensor table.
 *
 * Opens config.json and either model.safetensors or a `*.safetensors.index.json` + shards,
 * validates every shard (lwq_st_open), and builds one table: name -> (file, absolute offset,
 * length, dtype, shape), each tensor classified as decoder layer i or head/tail.  A file name
 * from an index may never leave the model directory (no '/', no "..", no absolute path; the
 * resolved path must stay inside `dir`).  An index that names a missing file, or a tensor absent
 * from its shard, is an error naming both. */
#ifndef LWQ_LAYOUT_CHECKPOINT_H
#define LWQ_LAYOUT_CHECKPOINT_H

#include <stdint.h>

#include "core/error.h"
#include "layout/config.h"
#include "layout/safetensors.h"

typedef struct lwq_ckpt_tensor {
    const char *name;   /* points into the shard's entry */
    int file;           /* index into lwq_ckpt.files */
    lwq_dtype dtype;
    int ndim;
    int64_t shape[LWQ_ST_MAX_DIMS];
    uint64_t offset;    /* absolute byte offset in the file */
    uint64_t nbytes;
    int layer;          /* decoder layer index, or -1 for head/tail tensors */
} lwq_ckpt_tensor;

typedef struct lwq_ckpt_layer {
    int n;              /* tensors of this layer */
    int *idx;           /* indexes into lwq_ckpt.tensors, sorted by name */
    uint64_t bytes;     /* sum of nbytes */
} lwq_ckpt_layer;

typedef struct lwq_ckpt {
    char *dir;
    lwq_model_config cfg;
    int nfiles;
    lwq_st_file *files; /* files[i].path is the full path */
    int ntensors;
    lwq_ckpt_tensor *tensors;   /* sorted by name */
    int nlayers;                /* tensors may name layers >= cfg.num_hidden_layers (MTP) */
    lwq_ckpt_layer *layers;     /* nlayers entries */
    lwq_ckpt_layer tail;        /* layer == -1 */
    uint64_t total_bytes;
} lwq_ckpt;

int lwq_ckpt_open(const char *dir, lwq_ckpt *c, lwq_error *e);
void lwq_ckpt_free(lwq_ckpt *c);
/* Tensor by name, or NULL (binary search). */
const lwq_ckpt_tensor *lwq_ckpt_find(const lwq_ckpt *c, const char *name);
/* Decoder-layer index parsed from "model.layers.<i>.", or -1. */
int lwq_tensor_layer_index(const char *name);
/* Join dir and a file name from an index after checking it stays inside dir; out has `cap`. */
int lwq_path_in_dir(const char *dir, const char *fname, char *out, size_t cap, lwq_error *e);

#endif
