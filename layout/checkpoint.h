/* layout/checkpoint.h — a Hugging Face checkpoint directory as a tensor table.
 *
 * Opens config.json and either model.safetensors or a `*.safetensors.index.json` + shards,
 * validates every shard (lwq_st_open), and builds one table: name -> (file, absolute offset,
 * length, dtype, shape), each tensor classified as decoder layer i or head/tail.  As transformers
 * does, a model.safetensors is used when present, else the index (model.safetensors.index.json,
 * or the one `*.safetensors.index.json` of the directory).
 *
 * A file name from an index may never leave the model directory: it must be a plain entry name
 * (no '/', no '\', not "." or "..", not empty), so it names an entry of `dir` itself.  Symbolic
 * links placed in the directory are followed deliberately: the Hugging Face hub cache stores
 * every snapshot file as a link into ../../blobs.  An index that names a missing file, a tensor
 * absent from its shard, or a shard tensor the index does not list, is an error naming both.
 * Every decoder layer below num_hidden_layers must have at least one tensor.
 *
 * Ownership: lwq_ckpt owns everything it points to; lwq_ckpt_free releases it.  No global state. */
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
    char **owned_names;         /* names of the per-expert tensors of fused experts (below) */
    int nowned;
} lwq_ckpt;

int lwq_ckpt_open(const char *dir, lwq_ckpt *c, lwq_error *e);
/* Same with the config read from `config_path` (NULL: dir/config.json), for weight folders
 * without their own config.json. */
int lwq_ckpt_open_with_config(const char *dir, const char *config_path, lwq_ckpt *c, lwq_error *e);
/* Read a tensor's bytes (t->nbytes) into buf (pread; for tools/tests — the engine uses io/). */
int lwq_ckpt_read_tensor(const lwq_ckpt *c, const lwq_ckpt_tensor *t, void *buf, lwq_error *e);
void lwq_ckpt_free(lwq_ckpt *c);
/* Tensor by name, or NULL (binary search). */
const lwq_ckpt_tensor *lwq_ckpt_find(const lwq_ckpt *c, const char *name);
/* Tensor `module` + `suffix` ("model.layers.0.mlp.down_proj" + ".weight_scale"), or NULL. */
const lwq_ckpt_tensor *lwq_ckpt_find_in(const lwq_ckpt *c, const char *module, const char *suffix);
/* Whether t holds one F32 value (no dimension, or every dimension 1). */
int lwq_ckpt_is_f32_scalar(const lwq_ckpt_tensor *t);
/* Decoder-layer index parsed from a name starting "model.layers.<i>." (decimal, no sign, no
 * leading zeros, i < LWQ_MAX_LAYERS), or -1.  Callers map the name to its canonical form first (lwq_names_canon). */
int lwq_tensor_layer_index(const char *name);
/* Fused 3-D experts (layout/ckpt_fused.c): for a family with HF-named routed experts, each
 * decoder layer's mlp.experts.gate_up_proj [E, 2I, H] and mlp.experts.down_proj [E, H, I] are
 * replaced in the table by the per-expert tensors mlp.experts.<e>.{gate,up,down}_proj.weight
 * (contiguous byte ranges of them; gate = rows [0, I), up = rows [I, 2I)).  A shape other than
 * the config's (num_experts, moe_intermediate_size, hidden_size) is LWQ_EFORMAT naming the
 * tensor, the expected and the found shape; before any weight is read.  Run by lwq_ckpt_open. */
int lwq_ckpt_split_fused_experts(lwq_ckpt *c, lwq_error *e);
/* kimi_linear (family->kimi_names; layout/ckpt_fused.c): the table lists the decoder layers'
 * tensors under the names transformers gives them on load (block_sparse_moe -> mlp, experts'
 * w1/w3/w2 -> gate/up/down_proj, self_attn.{f_a_proj, f_b_proj, dt_bias, A_log} under
 * self_attn.forget_gate); two tensors that map to one name are LWQ_EFORMAT.  Run by
 * lwq_ckpt_open after the fused-expert split. */
int lwq_ckpt_rename_kimi(lwq_ckpt *c, lwq_error *e);
/* Join dir and a file name from an index after checking it stays inside dir; out has `cap`. */
int lwq_path_in_dir(const char *dir, const char *fname, char *out, size_t cap, lwq_error *e);

#endif
