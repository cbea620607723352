/* layout/export.h — the config files of a quantized checkpoint (spec/FORMATS.md sections 7, 8).
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
 * than one gives MIXED_PRECISION with a quantized_layers map (one entry per listed module) and one
 * config group per format, numbered in the order the modules first show it (Model Optimizer groups
 * quantized_layers, which follows named_modules(), in first-seen order).
 *
 * The exclusion list (exclude_modules, config.json's ignore) follows Model Optimizer 0.47's
 * export: get_quant_config gives every module that carries quantizers a format and, only when all
 * quantized modules share one format (process_layer_quant_config), lists the unquantized ones
 * (lm_head unless it is quantized, the embedding, the vision tower as "model.visual*", every
 * unquantized decoder linear: here sorted explicit names beside the extra globs); a
 * MIXED_PRECISION export lists none of them (quantized_layers says what is quantized).  Then, in
 * both cases, _add_mtp_exclusions appends the MTP prefixes (`always`).  A MIXED_PRECISION export
 * with no MTP prefix has no exclude_modules key in hf_quant_config.json (config.json: "ignore": []),
 * as Model Optimizer's.
 * Output is deterministic: same inputs, same bytes. */
#ifndef LWQ_LAYOUT_EXPORT_H
#define LWQ_LAYOUT_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "layout/config.h"
#include "layout/recipe.h"

struct cJSON;

typedef struct lwq_export_module {
    const char *name;         /* "model.layers.3.self_attn.q_proj" */
    lwq_qformat format;
    int weight_only;          /* with NVFP4: W4A16_NVFP4 (no input_activations, no input_scale) */
    const char *listed;       /* the module Model Optimizer lists it as in quantized_layers and the
                                 config_groups targets (a fused experts module
                                 "model.layers.3.mlp.experts"; every module listed so must have one
                                 format), or NULL: name */
} lwq_export_module;

typedef struct lwq_export_quant {
    const lwq_export_module *mods;
    int nmods;
    const char *const *extra_excludes; /* unquantized modules beyond lm_head and the decoder linears:
                                          the embedding, "model.visual*" (one format only) */
    int nextra;
    lwq_kv_mode kv;
    const lwq_names *names;            /* where the checkpoint keeps the text model (the lm_head
                                          entry: "language_model.lm_head" for kimi_k25), or NULL */
    const char *const *always;         /* MTP prefixes ("model.layers.61*", "mtp*"), listed whatever
                                          the format */
    int nalways;
} lwq_export_quant;

#define LWQ_PRODUCER_NAME "modelopt"
#define LWQ_PRODUCER_VERSION "0.33.0+lwq." LWQ_VERSION

/* The quantized_layers entry of `module` (a MIXED_PRECISION export's): its own, or its nearest
 * ancestor's (a fused experts module lists its experts' projections), or NULL. */
const struct cJSON *lwq_export_layer_entry(const struct cJSON *quantized_layers, const char *module);

/* Both return a malloc'd JSON text in *out. */
int lwq_export_hf_quant_config(const lwq_export_quant *q, char **out, lwq_error *e);
/* src: the source config.json text, n bytes (it must hold one JSON object). */
int lwq_export_config_json(const char *src, size_t n, const lwq_export_quant *q, char **out, lwq_error *e);
/* names[i] lives in files[i]; total_size = sum of tensor bytes. */
int lwq_export_index_json(const char *const *names, const char *const *files, int n,
                          uint64_t total_size, char **out, lwq_error *e);

/* ---- naming rules: the files of an output checkpoint (one home; engine/run/manifest.h has the
 * resume directory's) ---- */
#define LWQ_OUT_SHARD_PREFIX "model-layer-"          /* + %05d + ".safetensors": lwq_shard_name */
#define LWQ_OUT_TAIL "model-tail.safetensors"        /* every tensor outside the decoder layers */
#define LWQ_OUT_INDEX "model.safetensors.index.json"
#define LWQ_OUT_CONFIG "config.json"
#define LWQ_OUT_HF_QUANT_CONFIG "hf_quant_config.json"
#define LWQ_OUT_REPORT "calibration_report.json"

#endif
