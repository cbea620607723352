/* tools/mkmodel/mkmodel_src.c — DeepSeek-V3 config and packed source formats for `lwq mkmodel`
 * (see mkmodel_src.h). */
#include "tools/mkmodel/mkmodel_src.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layout/format/quant_formats.h"
#include "layout/checkpoint/srcfmt.h"
#include "tools/mkmodel/mkmodel_values.h"

int lwq_mkmodel_src_parse(const char *s, mk_src_format *out)
{
    if (!strcmp(s, "bf16"))
        *out = MK_SRC_BF16;
    else if (!strcmp(s, "fp8"))
        *out = MK_SRC_FP8;
    else if (!strcmp(s, "mxfp4"))
        *out = MK_SRC_MXFP4;
    else
        return -1;
    return 0;
}

static void set_num(cJSON *c, const char *k, double v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(c, k);
    cJSON_AddNumberToObject(c, k, v);
}

void lwq_mkmodel_ds_config(cJSON *c, int v2, int64_t hidden, int64_t heads, int64_t head_dim,
                           int64_t experts, int64_t topk, int64_t moe_inter)
{
    (void)heads;
    /* DeepSeek-V3's proportions, scaled: q_lora ~ hidden/2, latent hidden/4, rope half a head */
    cJSON_DeleteItemFromObjectCaseSensitive(c, "head_dim"); /* MLA derives its head widths */
    set_num(c, "q_lora_rank", (double)(hidden / 2));
    set_num(c, "kv_lora_rank", (double)(hidden / 4));
    set_num(c, "qk_nope_head_dim", (double)head_dim);
    set_num(c, "qk_rope_head_dim", (double)(head_dim / 2));
    set_num(c, "v_head_dim", (double)head_dim);
    set_num(c, "n_routed_experts", (double)experts);
    set_num(c, "n_shared_experts", 1);
    set_num(c, "num_experts_per_tok", (double)topk);
    set_num(c, "moe_intermediate_size", (double)moe_inter);
    set_num(c, "first_k_dense_replace", 1);
    set_num(c, "moe_layer_freq", 1);
    /* group-limited routing when the experts split into 4 groups that can hold top-k in 2 */
    int grouped = experts % 4 == 0 && (experts / 4) * 2 >= topk;
    set_num(c, "n_group", grouped ? 4 : 1);
    set_num(c, "topk_group", grouped ? 2 : 1);
    /* V2: softmax scores, groups ranked by their best expert, no renormalisation (DeepSeek-V2) */
    set_num(c, "routed_scaling_factor", v2 ? 16.0 : 2.5);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "norm_topk_prob");
    cJSON_AddBoolToObject(c, "norm_topk_prob", !v2);
    cJSON_AddStringToObject(c, "scoring_func", v2 ? "softmax" : "sigmoid");
    cJSON_AddStringToObject(c, "topk_method", v2 ? "group_limited_greedy" : "noaux_tc");
    set_num(c, "num_nextn_predict_layers", 0);
    set_num(c, "rope_theta", 10000.0);
    set_num(c, "max_position_embeddings", 163840);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "rope_scaling");
    cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
    cJSON_AddNumberToObject(rs, "beta_fast", 32);
    cJSON_AddNumberToObject(rs, "beta_slow", 1);
    cJSON_AddNumberToObject(rs, "factor", 40);
    cJSON_AddNumberToObject(rs, "mscale", v2 ? 0.707 : 1.0);
    cJSON_AddNumberToObject(rs, "mscale_all_dim", v2 ? 0.707 : 1.0);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", 4096);
    cJSON_AddStringToObject(rs, "type", "yarn");
}

void lwq_mkmodel_src_config(cJSON *c, mk_src_format f)
{
    if (f == MK_SRC_BF16)
        return;
    cJSON *q = cJSON_AddObjectToObject(c, "quantization_config");
    if (f == MK_SRC_MXFP4) {
        cJSON_AddStringToObject(q, "quant_method", "mxfp4");
        return;
    }
    cJSON_AddStringToObject(q, "activation_scheme", "dynamic");
    cJSON_AddStringToObject(q, "fmt", "e4m3");
    cJSON_AddStringToObject(q, "quant_method", "fp8");
    cJSON *bs = cJSON_AddArrayToObject(q, "weight_block_size");
    cJSON_AddItemToArray(bs, cJSON_CreateNumber(MK_FP8_BLOCK));
    cJSON_AddItemToArray(bs, cJSON_CreateNumber(MK_FP8_BLOCK));
}

int lwq_mkmodel_src_packs(mk_src_format f, const lwq_arch_linear *l)
{
    if (f == MK_SRC_FP8) /* DeepSeek-V3 keeps its routers in BF16; a conv1d is not a 2-D block */
        return !l->is_router && l->role != LWQ_ROLE_LIN_CONV;
    if (f == MK_SRC_MXFP4) /* published MXFP4 checkpoints pack the experts only */
        return l->role == LWQ_ROLE_EXPERT_GATE || l->role == LWQ_ROLE_EXPERT_UP ||
               l->role == LWQ_ROLE_EXPERT_DOWN;
    return 0;
}

void lwq_mkmodel_src_parts(mk_src_format f, int64_t rows, int64_t cols, const char *suffix[2],
                           lwq_dtype dt[2], int ndim[2], int64_t shape[2][3])
{
    if (f == MK_SRC_FP8) {
        suffix[0] = "";
        suffix[1] = LWQ_SRCFMT_SCALE_INV;
        dt[0] = LWQ_F8_E4M3;
        dt[1] = LWQ_F32;
        ndim[0] = ndim[1] = 2;
        shape[0][0] = rows;
        shape[0][1] = cols;
        shape[1][0] = (rows + MK_FP8_BLOCK - 1) / MK_FP8_BLOCK;
        shape[1][1] = (cols + MK_FP8_BLOCK - 1) / MK_FP8_BLOCK;
        return;
    }
    suffix[0] = LWQ_SRCFMT_BLOCKS;
    suffix[1] = LWQ_SRCFMT_SCALES;
    dt[0] = dt[1] = LWQ_U8;
    ndim[0] = 3;
    ndim[1] = 2;
    shape[0][0] = shape[1][0] = rows;
    shape[0][1] = shape[1][1] = cols / LWQ_MXFP4_GROUP;
    shape[0][2] = LWQ_MXFP4_GROUP / 2;
}

static void fp8_pack(const float *v, int64_t rows, int64_t cols, uint8_t *codes, float *sinv)
{
    const int64_t B = MK_FP8_BLOCK, sc = (cols + B - 1) / B;
    for (int64_t r0 = 0; r0 < rows; r0 += B)
        for (int64_t c0 = 0; c0 < cols; c0 += B) {
            int64_t r1 = r0 + B < rows ? r0 + B : rows, c1 = c0 + B < cols ? c0 + B : cols;
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    amax = fmaxf(amax, fabsf(v[r * cols + c]));
            float s = amax > 0.0f ? amax / 448.0f : 1.0f;
            sinv[(r0 / B) * sc + c0 / B] = s;
            if (codes)
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < c1; c++)
                        codes[r * cols + c] = lwq_e4m3_from_f32(v[r * cols + c] / s);
        }
}

static void mx_pack(const float *v, int64_t rows, int64_t cols, uint8_t *blocks, uint8_t *scales)
{
    const int64_t G = cols / LWQ_MXFP4_GROUP;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < G; g++) {
            const float *x = v + r * cols + g * LWQ_MXFP4_GROUP;
            float amax = 0.0f;
            for (int i = 0; i < LWQ_MXFP4_GROUP; i++)
                amax = fmaxf(amax, fabsf(x[i]));
            int ex = 0;
            if (amax > 0.0f) {
                int k;
                frexpf(amax, &k); /* amax = m 2^k, m in [0.5, 1): floor(log2 amax) = k - 1 */
                ex = k - 1 - 2;   /* E2M1's largest power of two is 2^2 */
                ex = ex < -127 ? -127 : (ex > 127 ? 127 : ex);
            }
            if (scales)
                scales[r * G + g] = (uint8_t)(ex + 127);
            if (blocks)
                for (int i = 0; i < LWQ_MXFP4_GROUP; i += 2) {
                    uint8_t lo = lwq_e2m1_from_f32(ldexpf(x[i], -ex));
                    uint8_t hi = lwq_e2m1_from_f32(ldexpf(x[i + 1], -ex));
                    blocks[(r * G + g) * 16 + i / 2] = (uint8_t)(lo | (hi << 4));
                }
        }
}

int lwq_mkmodel_src_fill(mk_pack part, uint64_t seed, const char *base, int64_t rows,
                         int64_t cols, float mean, float std, lwq_dtype dt, void *out,
                         lwq_error *e)
{
    float *v = malloc((size_t)(rows * cols + 1) * sizeof(float));
    float *sinv = NULL;
    if (!v)
        return lwq_errf(e, LWQ_ENOMEM, "%s: no memory for %lld values", base,
                        (long long)(rows * cols));
    lwq_mkmodel_values(seed, base, mean, std, 0, rows * cols, v);
    for (int64_t i = 0; i < rows * cols; i++) /* what the plain model stores */
        v[i] = lwq_round_to(v[i], dt);
    int rc = 0;
    switch (part) {
    case MK_PACK_FP8_WEIGHT:
    case MK_PACK_FP8_SCALE_INV: {
        int64_t n = ((rows + MK_FP8_BLOCK - 1) / MK_FP8_BLOCK) *
                    ((cols + MK_FP8_BLOCK - 1) / MK_FP8_BLOCK);
        sinv = part == MK_PACK_FP8_SCALE_INV ? out : malloc((size_t)(n + 1) * sizeof(float));
        if (!sinv) {
            rc = lwq_errf(e, LWQ_ENOMEM, "%s: no memory for the block scales", base);
            break;
        }
        fp8_pack(v, rows, cols, part == MK_PACK_FP8_WEIGHT ? out : NULL, sinv);
        if (part == MK_PACK_FP8_WEIGHT)
            free(sinv);
        break;
    }
    case MK_PACK_MX_BLOCKS: mx_pack(v, rows, cols, out, NULL); break;
    case MK_PACK_MX_SCALES: mx_pack(v, rows, cols, NULL, out); break;
    default: rc = lwq_errf(e, LWQ_EINVAL, "%s: not a packed part", base);
    }
    free(v);
    return rc;
}
