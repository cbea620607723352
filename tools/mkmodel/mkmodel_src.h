/* tools/mkmodel/mkmodel_src.h — the parts of `lwq mkmodel` specific to DeepSeek-V3-shaped models and to
 * quantized source formats, kept out of cmd_mkmodel.c's generic writer:
 *   - the deepseek_v3 / deepseek_v2 config keys (MLA dims, routing, yarn RoPE);
 *   - --source-format fp8: every decoder-layer linear weight except the routers stored as
 *     DeepSeek does (F8_E4M3 "X.weight" + F32 "X.weight_scale_inv" per 128x128 block, edge
 *     blocks partial), config quantization_config {"quant_method": "fp8", "fmt": "e4m3",
 *     "weight_block_size": [128, 128], "activation_scheme": "dynamic"};
 *   - --source-format mxfp4: the routed experts' weights stored as "X.weight_blocks" (U8
 *     [rows, cols/32, 16]) + "X.weight_scales" (U8 E8M0 [rows, cols/32]), quantization_config
 *     {"quant_method": "mxfp4"}.
 * The packed values encode the same logical values the plain (--source-format bf16) model holds
 * (same seed, same names), rounded to the model dtype first: FP8 scale = block amax / 448 (1 for
 * an all-zero block), codes e4m3(w / scale) saturating; MXFP4 scale 2^(floor(log2 amax) - 2)
 * (OCP MX), codes e2m1(w / scale) saturating at 6.  A packed tensor is built whole in memory
 * (its logical f32 values plus the packed bytes), so memory grows with the largest linear. */
#ifndef LWQ_TOOLS_MKMODEL_SRC_H
#define LWQ_TOOLS_MKMODEL_SRC_H

#include <stdint.h>

#include "core/sys/error.h"
#include "layout/arch/arch.h"

struct cJSON;

typedef enum mk_src_format { MK_SRC_BF16 = 0, MK_SRC_FP8, MK_SRC_MXFP4 } mk_src_format;

typedef enum mk_pack {
    MK_PACK_NONE = 0,
    MK_PACK_FP8_WEIGHT,
    MK_PACK_FP8_SCALE_INV,
    MK_PACK_MX_BLOCKS,
    MK_PACK_MX_SCALES,
} mk_pack;

#define MK_FP8_BLOCK 128

/* "bf16" | "fp8" | "mxfp4" -> format; -1 for anything else. */
int lwq_mkmodel_src_parse(const char *s, mk_src_format *out);
/* deepseek_v3 (v2 = 0) or deepseek_v2 keys for a model of the given size. */
void lwq_mkmodel_ds_config(struct cJSON *c, int v2, int64_t hidden, int64_t heads,
                           int64_t head_dim, int64_t experts, int64_t topk, int64_t moe_inter);
/* The source format's quantization_config (nothing for bf16). */
void lwq_mkmodel_src_config(struct cJSON *c, mk_src_format f);
/* Whether linear l of a layer is stored packed under format f. */
int lwq_mkmodel_src_packs(mk_src_format f, const lwq_arch_linear *l);
/* The two tensors a packed weight [rows, cols] is stored as: suffix, dtype, shape. */
void lwq_mkmodel_src_parts(mk_src_format f, int64_t rows, int64_t cols, const char *suffix[2],
                           lwq_dtype dt[2], int ndim[2], int64_t shape[2][3]);
/* Bytes of one part, given the logical weight `base` [rows, cols] of dtype `dt` (model dtype). */
int lwq_mkmodel_src_fill(mk_pack part, uint64_t seed, const char *base, int64_t rows,
                         int64_t cols, float mean, float std, lwq_dtype dt, void *out,
                         lwq_error *e);

#endif
