/* layout/format/export.h — the config files of a quantized checkpoint (spec/FORMATS.md sections 7, 8).
 *
 * Given every decoder-layer linear with the format it was written in (routers and other
 * unquantized linears with LWQ_QFMT_NONE), builds:
 *   - hf_quant_config.json (legacy ModelOpt form: producer + quantization{quant_algo,
 *     kv_cache_quant_algo, group_size, exclude_modules[, quantized_layers]});
 *   - config.json = the source config's own text (numbers keep their spelling: 0.0 stays 0.0)
 *     with any "quantization_config" member replaced by lwq's (config_groups, ignore,
 *     quant_algo, kv_cache_scheme object, producer, quant_method "modelopt"), appended last;
 *   - model.safetensors.index.json.
 * One format for all quantized linears gives quant_algo NVFP4, FP8 or W4A16_NVFP4 (weight-only
 * NVFP4, whose config group has no input_activations, as Model Optimizer 0.47 writes it); more
 * than one gives MIXED_PRECISION with a quantized_layers map.  Exclusions are explicit module names (never
 * globs, so an exclusion can never match a quantized module), sorted, with lm_head unless it is
 * one of the quantized modules (a recipe that quantizes it weight-only).
 *
 * MIXED_PRECISION is written as Model Optimizer 0.47 writes it (quant_utils.py
 * process_layer_quant_config, unified_export_hf.py _add_mtp_exclusions):
 *   - quantized_layers (and the config groups' targets) name the modules that own the quantizers
 *     in memory.  transformers 5.14 holds the routed experts of most MoE families as one module
 *     with 3-D parameters (Qwen3MoeExperts, DeepseekV3Experts, ...; whatever the checkpoint on
 *     disk stores), so a layer's experts are listed once, as "<layer>.mlp.experts"
 *     (lwq_export_module.listed_as), when every expert of it has one format; per-expert names
 *     otherwise, and for families whose experts are separate linears in memory (kimi_k2);
 *   - exclude_modules (config.json "ignore") holds only the MTP blocks' prefix globs (the first
 *     nextra_mtp extra_excludes): no lm_head, embedding, router or other unquantized linear, since
 *     a module that quantized_layers does not name is unquantized.
 * Output is deterministic: same inputs, same bytes. */
#ifndef LWQ_LAYOUT_EXPORT_H
#define LWQ_LAYOUT_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "layout/config/config.h"
#include "layout/recipe/recipe.h"

struct cJSON;

typedef struct lwq_export_module {
    const char *name;         /* "model.layers.3.self_attn.q_proj" */
    lwq_qformat format;
    int weight_only;          /* with NVFP4: W4A16_NVFP4 (no input_activations, no input_scale) */
    const char *listed_as;    /* the in-memory module it belongs to, listed in a MIXED_PRECISION
                                 quantized_layers for all its members at once when they share one
                                 format ("model.layers.3.mlp.experts"), or NULL: its own name */
} lwq_export_module;

typedef struct lwq_export_quant {
    const lwq_export_module *mods;
    int nmods;
    const char *const *extra_excludes; /* beyond lm_head, e.g. MTP layers "model.layers.61*" */
    int nextra;
    lwq_kv_mode kv;
    const lwq_names *names;            /* where the checkpoint keeps the text model (the lm_head
                                          entry: "language_model.lm_head" for kimi_k25), or NULL */
    int nextra_mtp;                    /* the first nextra_mtp extra_excludes are MTP blocks: the
                                          only exclusions of a MIXED_PRECISION config */
} lwq_export_quant;

#define LWQ_PRODUCER_NAME "modelopt"
#define LWQ_PRODUCER_VERSION "0.33.0+lwq." LWQ_VERSION

/* Both return a malloc'd JSON text in *out. */
int lwq_export_hf_quant_config(const lwq_export_quant *q, char **out, lwq_error *e);
/* src: the source config.json text, n bytes (it must hold one JSON object). */
int lwq_export_config_json(const char *src, size_t n, const lwq_export_quant *q, char **out, lwq_error *e);
/* The entry of a MIXED_PRECISION quantized_layers map for linear `module`: its own, or that of the
 * nearest ancestor module listed ("model.layers.3.mlp.experts" for
 * "model.layers.3.mlp.experts.5.up_proj"); NULL when neither is listed. */
const struct cJSON *lwq_export_listed(const struct cJSON *quantized_layers, const char *module);
/* names[i] lives in files[i]; total_size = sum of tensor bytes. */
int lwq_export_index_json(const char *const *names, const char *const *files, int n,
                          uint64_t total_size, char **out, lwq_error *e);

/* ---- naming rules: the files of an output checkpoint (one home; engine/run/resume/manifest.h has the
 * resume directory's) ---- */
#define LWQ_OUT_SHARD_PREFIX "model-layer-"          /* + %05d + ".safetensors": lwq_shard_name */
#define LWQ_OUT_TAIL "model-tail.safetensors"        /* every tensor outside the decoder layers */
#define LWQ_OUT_INDEX "model.safetensors.index.json"
#define LWQ_OUT_CONFIG "config.json"
#define LWQ_OUT_HF_QUANT_CONFIG "hf_quant_config.json"
#define LWQ_OUT_REPORT "calibration_report.json"

#endif
