/* engine/forward/model_deepseek.c — DeepSeek-V2 / DeepSeek-V3 (and Kimi-K2, the V3 text model):
 * multi-head latent attention and the DeepSeek MoE block (spec/ARCHITECTURES.md).
 *
 *   x = input_layernorm(h)
 *   q = q_proj(x)  or  q_b_proj(q_a_layernorm(q_a_proj(x)))   observed: q_proj | q_a_proj, q_b_proj
 *   kva = kv_a_proj_with_mqa(x) = [latent (kv_lora_rank) | k_rope (qk_rope_head_dim)]
 *   kvb = kv_b_proj(kv_a_layernorm(latent))  per head [k_nope | v]     observed: kv_a, kv_b
 *   (q_a_layernorm and kv_a_layernorm use eps 1e-6 whatever rms_norm_eps says: transformers and
 *   DeepSeek's own code build them with the RMSNorm default)
 *   q_rope, k_rope: RoPE on adjacent pairs (2i, 2i+1) ("interleaved"); none at all where the row
 *   says mla_nope (kimi_linear: the parts enter the scores unrotated)
 *   q = [q_nope | q_rope], k = [k_nope | k_rope shared by all heads]
 *   a = causal attention, scale (qk_nope+qk_rope)^-0.5 * yarn_mscale(mscale_all_dim)^2
 *   h = h + o_proj(a)                                                   observed: o_proj
 *
 * The interleaved RoPE is computed as transformers' DeepSeek-V3 does it: the rope part of q and
 * k is de-interleaved (even dims, then odd dims) and rotated with the rotate-half op.  Attention
 * scores are dot products over all dims, so the same permutation of q's and k's rope dims gives
 * the scores of the interleaved layout exactly.  The value head (v_head_dim) may differ from the
 * q/k head; the narrower of the two is zero-padded to the wider for the attention op (zero
 * columns add exact zeros to the scores and produce zero output columns, dropped afterwards),
 * as transformers does for flash attention.  Observed: kv(k, v) with k = [k_nope | k_rope] and v
 * per head, zero padding included (it changes no amax) -- what Model Optimizer's KV-cache
 * quantizers see in transformers' attention and export as self_attn.k_proj.k_scale / v_proj.v_scale
 * (an MLA cache holds the latent, but this is what Model Optimizer writes; perf/RESULTS.md).
 *
 * Mistral-Small-4 (mistral4; the row's mla_plain_scale, llama4_qscale): the softmax scale is the
 *   plain qk_head_dim^-0.5 (yarn enters through the cos/sin tables only), and after RoPE the
 *   whole query row is multiplied by 1 + llama_4_scaling_beta * ln(1 + floor(pos /
 *   original_max_position_embeddings)), computed in f32 as torch does and rounded to the act
 *   dtype, then the product rounded (llama4_query_scale).
 *
 * MoE (layers >= first_k_dense_replace, every moe_layer_freq):
 *   logits = x Wgate^T in f32 (transformers casts both to float32)
 *   V2: softmax, top-k ("greedy", or "group_limited_greedy": the topk_group groups with the
 *       best max score), renormalised when norm_topk_prob, times routed_scaling_factor.
 * DeepSeek-V3.2 / GLM-5 (family->dsa): the DSA indexer's linears (self_attn.indexer.wq_b on the
 *   q_b_proj input, wk and weights_proj on the layer input) are observed; the attention is the
 *   dense one above, exact while a sequence is at most index_topk long (longer ones refused:
 *   lwq_config_check_seq).
 *   V3: sigmoid scores s; choice c = s + e_score_correction_bias; the topk_group groups with the
 *       largest sum of their two best c; c of the other groups set to -inf (transformers 5.14.1's
 *       DeepseekV3TopkRouter, which Model Optimizer 0.47 runs; every V3-routed row sets
 *       family->group_mask_inf; 0.0 was transformers 4's and DeepSeek's remote code); top-k of c; weights
 *       are the unbiased s of the chosen experts, / (sum + 1e-20) when norm_topk_prob, times
 *       routed_scaling_factor.
 *   Mistral-4 (LWQ_ROUTER_SOFTMAX_GROUPED): logits x Wgate^T in the act dtype, softmax over all
 *       experts rounded to the act dtype, V3's groups on those scores (sum of the two best,
 *       rounded) with 0.0 outside the chosen ones, top-k, weights the chosen scores / (their
 *       rounded sum + 1e-20, rounded) when norm_topk_prob, times routed_scaling_factor, each step
 *       rounded to the act dtype as transformers runs the router in the model's dtype.
 *   Weights stay f32; each weight x expert-output product and each partial sum is rounded to the
 *   act dtype, in expert order (transformers 5's experts loop for both; transformers 4's V3
 *   accumulated in f32 instead, which differs only in BF16 rounding).
 *   out = routed + shared_experts(x) (one SwiGLU MLP of width moe_intermediate_size *
 *       n_shared_experts).
 * Routing runs on the host (router logits are downloaded), threaded over tokens: a few passes
 * over n x n_experts floats, small next to the expert GEMMs, and it keeps the selection rules in
 * one place for every backend.  The group choice and the final top-k are torch.topk(...,
 * sorted=False)'s picks and order on the CPU (kernels/topk.h), ties included; a group's score
 * takes its best one or two values, whichever of tied experts they come from. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/parallel/parallel.h"
#include "engine/forward/forward_internal.h"
#include "kernels/cpu/exp/exp.h"
#include "kernels/topk.h"

/* Geometry checks of an MLA config (lwq_model_init, after the common checks). */
int lwq_fwd_mla_check(const lwq_model_config *c, lwq_error *e)
{
    if (c->kv_lora_rank <= 0 || c->qk_rope_head_dim <= 0 || c->qk_rope_head_dim % 2 ||
        c->qk_nope_head_dim < 0 || c->v_head_dim <= 0 || c->q_lora_rank < 0 ||
        c->qk_rope_head_dim > 4096 || c->qk_nope_head_dim > 4096 || c->v_head_dim > 4096)
        return lwq_errf(e, LWQ_EINVAL, "config (%s): bad MLA geometry: kv_lora_rank %" PRId64
                        ", q_lora_rank %" PRId64 ", qk_nope_head_dim %" PRId64 ", qk_rope_head_dim %"
                        PRId64 " (must be even), v_head_dim %" PRId64, c->model_type,
                        c->kv_lora_rank, c->q_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim,
                        c->v_head_dim);
    if (c->attention_bias)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config (%s): attention_bias is not supported with "
                        "MLA (no published DeepSeek checkpoint uses it)", c->model_type);
    return 0;
}

/* Routing checks of a DeepSeek-routed config, MLA or not (lwq_model_init). */
int lwq_fwd_deepseek_routing_check(const lwq_model_config *c, lwq_error *e)
{
    if (c->num_experts > 0) {
        int ng = c->n_group > 0 ? c->n_group : 1, tg = c->topk_group > 0 ? c->topk_group : 1;
        if (c->num_experts % ng || tg > ng)
            return lwq_errf(e, LWQ_EINVAL, "config (%s): %d experts in n_group %d groups with "
                            "topk_group %d is not usable", c->model_type, c->num_experts, ng, tg);
        if (c->family->router == LWQ_ROUTER_DEEPSEEK_V2 && strcmp(c->topk_method, "greedy") &&
            strcmp(c->topk_method, "group_limited_greedy"))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "config (%s): topk_method \"%s\" is not "
                            "supported (greedy, group_limited_greedy)", c->model_type,
                            c->topk_method);
        /* every token must be able to find k experts inside its chosen groups */
        if ((int64_t)tg * (c->num_experts / ng) < c->num_experts_per_tok &&
            (c->family->router == LWQ_ROUTER_DEEPSEEK_V3 || c->family->router == LWQ_ROUTER_SOFTMAX_GROUPED ||
             !strcmp(c->topk_method, "group_limited_greedy")))
            return lwq_errf(e, LWQ_EINVAL, "config (%s): topk_group %d groups of %d experts hold "
                            "fewer than num_experts_per_tok %d", c->model_type, tg,
                            c->num_experts / ng, c->num_experts_per_tok);
    }
    return 0;
}

/* ---- RoPE tables ------------------------------------------------------------------------------ */

static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rotations, double dim, double base, double max_pos)
{
    return dim * log(max_pos / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

/* Yarn keys config.h does not keep: "attention_factor" (overrides the mscale ratio),
 * "truncate" (default true), and whether "factor" (else max_position_embeddings /
 * original_max_position_embeddings) and both "mscale" keys (else mscale(factor, 1)) were given,
 * as transformers tells them apart. */
static void yarn_extra(const lwq_model_config *c, double *attention_factor, int *truncate,
                       int *has_factor, int *has_mscales)
{
    *attention_factor = 0.0;
    *truncate = 1;
    *has_factor = 1;
    *has_mscales = c->rope_mscale != 0.0 && c->rope_mscale_all_dim != 0.0;
    const cJSON *root = c->raw, *tc = root ? cJSON_GetObjectItemCaseSensitive(root, "text_config")
                                           : NULL;
    if (c->text_config && cJSON_IsObject(tc))
        root = tc;
    const cJSON *rs = root ? cJSON_GetObjectItemCaseSensitive(root, "rope_scaling") : NULL;
    if (!cJSON_IsObject(rs))
        rs = root ? cJSON_GetObjectItemCaseSensitive(root, "rope_parameters") : NULL;
    if (!cJSON_IsObject(rs))
        return;
    const cJSON *af = cJSON_GetObjectItemCaseSensitive(rs, "attention_factor");
    if (cJSON_IsNumber(af) && af->valuedouble > 0.0)
        *attention_factor = af->valuedouble;
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rs, "truncate");
    if (cJSON_IsBool(tr))
        *truncate = cJSON_IsTrue(tr);
    *has_factor = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rs, "factor"));
    *has_mscales = *has_mscales && cJSON_GetObjectItemCaseSensitive(rs, "mscale") &&
                   cJSON_GetObjectItemCaseSensitive(rs, "mscale_all_dim");
}

/* rope_scaling.factor, or max_position_embeddings / original_max_position_embeddings when the
 * config gives none (transformers' rule). */
static double yarn_factor(const lwq_model_config *c)
{
    double af;
    int tr, has_factor, hm;
    yarn_extra(c, &af, &tr, &has_factor, &hm);
    const double orig = (double)c->rope_original_max_position;
    return has_factor || !(orig > 0.0) ? c->rope_factor
                                       : (double)c->max_position_embeddings / orig;
}

/* RoPE table of the rope part (qk_rope_head_dim/2 entries) with default or yarn scaling;
 * *attn_scaling is the yarn cos/sin factor. */
int lwq_fwd_mla_inv_freq(const lwq_model_config *c, float *inv, float *attn_scaling, lwq_error *e)
{
    const int64_t dim = c->qk_rope_head_dim, half = dim / 2;
    const float base = (float)c->rope_theta;
    if (!(c->rope_theta > 0.0))
        return lwq_errf(e, LWQ_EINVAL, "config: rope_theta %g must be > 0", c->rope_theta);
    /* as transformers: base ** (2i / dim) in f32 */
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0f / powf(base, (float)(2 * i) / (float)dim);
    *attn_scaling = 1.0f;
    if (c->rope_type == LWQ_ROPE_DEFAULT)
        return 0;
    if (c->rope_type != LWQ_ROPE_YARN)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config (%s): rope type %d is not supported by the "
                        "MLA forward (default and yarn are)", c->model_type, (int)c->rope_type);
    double attention_factor;
    int truncate, has_factor, has_mscales;
    yarn_extra(c, &attention_factor, &truncate, &has_factor, &has_mscales);
    const double orig = (double)c->rope_original_max_position, factor = yarn_factor(c);
    if (!(factor > 0.0) || !(orig > 0.0))
        return lwq_errf(e, LWQ_EINVAL, "config (%s): yarn rope_scaling needs factor > 0 and "
                        "original_max_position_embeddings > 0 (got %g, %g)", c->model_type,
                        factor, orig);
    double beta_fast = c->rope_beta_fast != 0.0 ? c->rope_beta_fast : 32.0;
    double beta_slow = c->rope_beta_slow != 0.0 ? c->rope_beta_slow : 1.0;
    /* transformers: attention_factor = mscale(f, mscale) / mscale(f, mscale_all_dim) when both
     * are set, else mscale(f, 1) */
    if (attention_factor > 0.0)
        *attn_scaling = (float)attention_factor;
    else if (has_mscales)
        *attn_scaling = (float)(yarn_mscale(factor, c->rope_mscale) /
                                yarn_mscale(factor, c->rope_mscale_all_dim));
    else
        *attn_scaling = (float)yarn_mscale(factor, 1.0);
    /* correction range, truncated to whole dims unless "truncate": false */
    double low = yarn_correction_dim(beta_fast, (double)dim, c->rope_theta, orig);
    double high = yarn_correction_dim(beta_slow, (double)dim, c->rope_theta, orig);
    if (truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0.0)
        low = 0.0;
    if (high > (double)(dim - 1))
        high = (double)(dim - 1);
    if (low == high)
        high += 0.001;
    const float span = (float)(high - low), flow = (float)low, ffac = (float)factor;
    for (int64_t i = 0; i < half; i++) {
        float pos = powf(base, (float)(2 * i) / (float)dim);
        float extra = 1.0f / pos, inter = 1.0f / (ffac * pos);
        float ramp = ((float)i - flow) / span;
        ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
        float ef = 1.0f - ramp;
        inv[i] = inter * (1.0f - ef) + extra * ef;
    }
    return 0;
}

/* Softmax scale of the MLA attention (computed per layer call: a few JSON lookups). */
static float mla_softmax_scale(const lwq_model_config *c)
{
    double s = 1.0 / sqrt((double)(c->qk_nope_head_dim + c->qk_rope_head_dim));
    if (c->rope_type == LWQ_ROPE_YARN && c->rope_mscale_all_dim != 0.0 && !c->family->mla_plain_scale) {
        double ms = yarn_mscale(yarn_factor(c), c->rope_mscale_all_dim);
        s = s * ms * ms;
    }
    return (float)s;
}

/* ---- attention -------------------------------------------------------------------------------- */

/* dst (rows, groups*rope) contiguous <- the rope parts of src, de-interleaved per group:
 * dst[r, g, j] = src[r, g*gstride + off + 2j] and dst[r, g, half + j] = src[..., off + 2j + 1]. */
static int deinterleave(const lwq_backend *be, const lwq_tensor *src, int64_t ld, int64_t groups,
                        int64_t gstride, int64_t off, int64_t rope, lwq_tensor *dst, lwq_error *e)
{
    const int64_t n = src->shape[0], half = rope / 2;
    for (int odd = 0; odd < 2; odd++) {
        lwq_tensor s = lwq_fwd_sview(src, off + odd, 3, n, groups, half, ld, gstride, 2);
        lwq_tensor d = lwq_fwd_sview(dst, odd * half, 3, n, groups, half, groups * rope, rope, 1);
        LWQ_TRY(lwq_backend_copy(be, &s, &d, e));
    }
    return 0;
}

/* Mistral-4's Llama-4 query scale: out = q * round(1 + beta * ln(1 + floor(pos /
 * original_max_position_embeddings))) per row, each factor computed in f32 as torch computes it
 * (pos / orig in f32, floor, log, times f32(beta), plus 1), rounded to the act dtype, and the
 * product rounded once (transformers multiplies query_states by the factor cast to its dtype).
 * lwq_backend_moe_combine with one slot per row is that product exactly: out[t] = round(w[t] *
 * q[t]), its accumulator starting at 0.  Returns 1 with *out filled, 0 when every factor is 1
 * (positions below original_max_position_embeddings: q * 1 is q), or a negative error. */
static int llama4_query_scale(lwq_model *m, const lwq_batch *b, const lwq_tensor *q, lwq_tensor *out,
                              lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = q->shape[0];
    int32_t *pos = malloc(((size_t)n + 1) * sizeof *pos), *slot = malloc(((size_t)n + 1) * sizeof *slot);
    float *f = malloc(((size_t)n + 1) * sizeof *f);
    int rc = 0, any = 0;
    if (!pos || !slot || !f) {
        rc = lwq_errf(e, LWQ_ENOMEM, "no memory for the query scale of %" PRId64 " rows", n);
        goto out;
    }
    if ((rc = lwq_backend_download(m->be, pos, b->pos.data, (size_t)n * sizeof *pos, e)) < 0)
        goto out;
    const float beta = (float)c->llama4_beta, orig = (float)c->llama4_orig_max;
    for (int64_t t = 0; t < n; t++) {
        float v = 1.0f + beta * logf(1.0f + floorf((float)pos[t] / orig));
        f[t] = lwq_round_to(v, m->act);
        slot[t] = (int32_t)t;
        any |= f[t] != 1.0f;
    }
    if (!any)
        goto out;
    lwq_tensor ts, tw;
    if ((rc = lwq_fwd_tensor(m, LWQ_I32, n, 1, &ts, e)) < 0 || (rc = lwq_fwd_tensor(m, LWQ_F32, n, 1, &tw, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, m->act, n, q->shape[1], out, e)) < 0 ||
        (rc = lwq_backend_upload(m->be, ts.data, slot, (size_t)n * sizeof *slot, e)) < 0 ||
        (rc = lwq_backend_upload(m->be, tw.data, f, (size_t)n * sizeof *f, e)) < 0 ||
        (rc = lwq_backend_moe_combine(m->be, q, &ts, &tw, out, e)) < 0)
        goto out;
    rc = 1;
out:
    free(pos);
    free(slot);
    free(f);
    return rc;
}

int lwq_fwd_mla_attention_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                                lwq_tensor *h, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const lwq_backend *be = m->be;
    const int64_t n = h->shape[0], D = c->hidden_size, H = c->num_attention_heads;
    const int64_t nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim, vd = c->v_head_dim;
    const int64_t qk = nope + rope, kvr = c->kv_lora_rank, qr = c->q_lora_rank;
    const int64_t hd = qk > vd ? qk : vd; /* head width the attention op runs at */
    const float eps = (float)c->rms_norm_eps, lora_eps = 1e-6f;
    char name[LWQ_NAME_MAX], mq[LWQ_NAME_MAX], mqa[LWQ_NAME_MAX], mqb[LWQ_NAME_MAX],
        mkva[LWQ_NAME_MAX], mkvb[LWQ_NAME_MAX], mo[LWQ_NAME_MAX];
    const char *pre = "model.layers";
    snprintf(mq, sizeof mq, "%s.%d.self_attn.q_proj", pre, layer);
    snprintf(mqa, sizeof mqa, "%s.%d.self_attn.q_a_proj", pre, layer);
    snprintf(mqb, sizeof mqb, "%s.%d.self_attn.q_b_proj", pre, layer);
    snprintf(mkva, sizeof mkva, "%s.%d.self_attn.kv_a_proj_with_mqa", pre, layer);
    snprintf(mkvb, sizeof mkvb, "%s.%d.self_attn.kv_b_proj", pre, layer);
    snprintf(mo, sizeof mo, "%s.%d.self_attn.o_proj", pre, layer);

    lwq_tensor ln1, wq, wqa, qan, wqb, wkva, kvan, wkvb, wo;
#define WEIGHT(mod, d0, d1, out)                                                                   \
    do {                                                                                           \
        snprintf(name, sizeof name, "%s.weight", mod);                                             \
        LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 2, d0, d1, 0, out, e));                          \
    } while (0)
    snprintf(name, sizeof name, "%s.%d.input_layernorm.weight", pre, layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, D, 0, 0, &ln1, e));
    if (qr > 0) {
        WEIGHT(mqa, qr, D, &wqa);
        WEIGHT(mqb, H * qk, qr, &wqb);
        snprintf(name, sizeof name, "%s.%d.self_attn.q_a_layernorm.weight", pre, layer);
        LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, qr, 0, 0, &qan, e));
    } else {
        WEIGHT(mq, H * qk, D, &wq);
    }
    WEIGHT(mkva, kvr + rope, D, &wkva);
    WEIGHT(mkvb, H * (nope + vd), kvr, &wkvb);
    WEIGHT(mo, D, H * vd, &wo);
#undef WEIGHT
    snprintf(name, sizeof name, "%s.%d.self_attn.kv_a_layernorm.weight", pre, layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, kvr, 0, 0, &kvan, e));

    lwq_tensor x, qa, q, kva, lat, kvb, qrot, krot, qf, kf, vf, af, a, o;
    const lwq_dtype act = m->act;
    LWQ_TRY(lwq_fwd_tensor(m, act, n, D, &x, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * qk, &q, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, kvr + rope, &kva, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, kvr, &lat, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * (nope + vd), &kvb, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * rope, &qrot, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, rope, &krot, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * hd, &qf, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * hd, &kf, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * hd, &vf, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * hd, &af, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, H * vd, &a, e));
    LWQ_TRY(lwq_fwd_tensor(m, act, n, D, &o, e));

    LWQ_TRY(lwq_backend_rmsnorm(be, h, &ln1, eps, &x, e));
    if (qr > 0) {
        LWQ_TRY(lwq_fwd_tensor(m, act, n, qr, &qa, e));
        LWQ_TRY(lwq_fwd_observe(obs, layer, mqa, &x, &b->valid, e));
        LWQ_TRY(lwq_backend_gemm(be, &x, &wqa, NULL, &qa, e));
        LWQ_TRY(lwq_backend_rmsnorm(be, &qa, &qan, lora_eps, &qa, e));
        LWQ_TRY(lwq_fwd_observe(obs, layer, mqb, &qa, &b->valid, e));
        if (lwq_config_layer_has_indexer(c, layer)) {
            /* the DSA indexer: with every key selected (b->seq <= index_topk, checked) it changes
             * nothing in the attention; its linears are observed on the tensors they read */
            if (b->seq > c->index_topk)
                return lwq_errf(e, LWQ_EUNSUPPORTED, "layer %d: a sequence of %lld tokens is longer than index_topk "
                                "%d: the dense DSA attention is not the model's", layer, (long long)b->seq,
                                c->index_topk);
            char mi[LWQ_NAME_MAX];
            snprintf(mi, sizeof mi, "%s.%d.self_attn.indexer.wq_b", pre, layer);
            LWQ_TRY(lwq_fwd_observe(obs, layer, mi, &qa, &b->valid, e));
            snprintf(mi, sizeof mi, "%s.%d.self_attn.indexer.wk", pre, layer);
            LWQ_TRY(lwq_fwd_observe(obs, layer, mi, &x, &b->valid, e));
            snprintf(mi, sizeof mi, "%s.%d.self_attn.indexer.weights_proj", pre, layer);
            LWQ_TRY(lwq_fwd_observe(obs, layer, mi, &x, &b->valid, e));
        }
        LWQ_TRY(lwq_backend_gemm(be, &qa, &wqb, NULL, &q, e));
    } else {
        LWQ_TRY(lwq_fwd_observe(obs, layer, mq, &x, &b->valid, e));
        LWQ_TRY(lwq_backend_gemm(be, &x, &wq, NULL, &q, e));
    }
    LWQ_TRY(lwq_fwd_observe(obs, layer, mkva, &x, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(be, &x, &wkva, NULL, &kva, e));
    lwq_tensor lsrc = lwq_fwd_sview(&kva, 0, 2, n, kvr, 0, kvr + rope, 1, 0);
    LWQ_TRY(lwq_backend_copy(be, &lsrc, &lat, e));
    LWQ_TRY(lwq_backend_rmsnorm(be, &lat, &kvan, lora_eps, &lat, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mkvb, &lat, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(be, &lat, &wkvb, NULL, &kvb, e));

    if (c->family->mla_nope) {
        /* kimi_linear: no RoPE, the "rope" parts enter the scores as they are */
        lwq_tensor s0 = lwq_fwd_sview(&q, nope, 3, n, H, rope, H * qk, qk, 1);
        lwq_tensor d0 = lwq_fwd_sview(&qrot, 0, 3, n, H, rope, H * rope, rope, 1);
        LWQ_TRY(lwq_backend_copy(be, &s0, &d0, e));
        s0 = lwq_fwd_sview(&kva, kvr, 2, n, rope, 0, kvr + rope, 1, 0);
        LWQ_TRY(lwq_backend_copy(be, &s0, &krot, e));
    } else {
        /* rope parts, de-interleaved, rotated */
        LWQ_TRY(deinterleave(be, &q, H * qk, H, qk, nope, rope, &qrot, e));
        LWQ_TRY(deinterleave(be, &kva, kvr + rope, 1, 0, kvr, rope, &krot, e));
        LWQ_TRY(lwq_backend_rope(be, &qrot, rope, &b->pos, &m->inv_freq, m->attn_scaling, e));
        LWQ_TRY(lwq_backend_rope(be, &krot, rope, &b->pos, &m->inv_freq, m->attn_scaling, e));
    }

    /* q = [q_nope | q_rope], k = [k_nope | k_rope], v = [v]; zero past each part's width */
    if (hd > qk) {
        LWQ_TRY(lwq_backend_memset0(be, qf.data, (size_t)(n * H * hd) * lwq_dtype_size(act), e));
        LWQ_TRY(lwq_backend_memset0(be, kf.data, (size_t)(n * H * hd) * lwq_dtype_size(act), e));
    }
    if (hd > vd)
        LWQ_TRY(lwq_backend_memset0(be, vf.data, (size_t)(n * H * hd) * lwq_dtype_size(act), e));
    lwq_tensor s, d;
    s = lwq_fwd_sview(&q, 0, 3, n, H, nope, H * qk, qk, 1);
    d = lwq_fwd_sview(&qf, 0, 3, n, H, nope, H * hd, hd, 1);
    LWQ_TRY(lwq_backend_copy(be, &s, &d, e));
    s = lwq_fwd_sview(&qrot, 0, 3, n, H, rope, H * rope, rope, 1);
    d = lwq_fwd_sview(&qf, nope, 3, n, H, rope, H * hd, hd, 1);
    LWQ_TRY(lwq_backend_copy(be, &s, &d, e));
    s = lwq_fwd_sview(&kvb, 0, 3, n, H, nope, H * (nope + vd), nope + vd, 1);
    d = lwq_fwd_sview(&kf, 0, 3, n, H, nope, H * hd, hd, 1);
    LWQ_TRY(lwq_backend_copy(be, &s, &d, e));
    s = lwq_fwd_sview(&krot, 0, 3, n, H, rope, rope, 0, 1); /* shared by all heads */
    d = lwq_fwd_sview(&kf, nope, 3, n, H, rope, H * hd, hd, 1);
    LWQ_TRY(lwq_backend_copy(be, &s, &d, e));
    s = lwq_fwd_sview(&kvb, nope, 3, n, H, vd, H * (nope + vd), nope + vd, 1);
    d = lwq_fwd_sview(&vf, 0, 3, n, H, vd, H * hd, hd, 1);
    LWQ_TRY(lwq_backend_copy(be, &s, &d, e));

    if (obs && obs->kv)
        LWQ_TRY(obs->kv(obs->ctx, layer, &kf, &vf, &b->valid, e));
    lwq_tensor qs;
    int scaled = 0;
    if (c->family->llama4_qscale && (scaled = llama4_query_scale(m, b, &qf, &qs, e)) < 0)
        return scaled;
    lwq_attn_args aa = {scaled ? &qs : &qf, &kf, &vf, &af, &b->valid, b->batch, b->seq, (int)H, (int)H, hd,
                        mla_softmax_scale(c)};
    LWQ_TRY(lwq_backend_attention(be, &aa, e));
    s = lwq_fwd_sview(&af, 0, 3, n, H, vd, H * hd, hd, 1);
    d = lwq_fwd_sview(&a, 0, 3, n, H, vd, H * vd, vd, 1);
    LWQ_TRY(lwq_backend_copy(be, &s, &d, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mo, &a, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(be, &a, &wo, NULL, &o, e));
    return lwq_backend_add(be, h, &o, e);
}

/* ---- routing ---------------------------------------------------------------------------------- */

/* Indexes of the k largest of v[0..n) into out (descending, ties to the lower index), in one
 * pass with an insertion-sorted list.  NaN never enters; slots left empty get -1.  Used only for
 * a group's best one or two VALUES, which do not depend on which of tied experts they come from
 * (a token with a NaN score is reported before). */
static void topk(const float *v, int n, int k, int *out)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        float x = v[i];
        if (x != x || (m == k && !(x > v[out[k - 1]])))
            continue;
        int p = m < k ? m++ : k - 1;
        while (p > 0 && x > v[out[p - 1]]) { /* equal values keep the earlier index first */
            out[p] = out[p - 1];
            p--;
        }
        out[p] = i;
    }
    for (int s = m; s < k; s++)
        out[s] = -1;
}

/* Keep only the experts of the topk_group groups with the best group score (`fill` elsewhere:
 * 0.0, or -inf where the row says so). */
static void mask_groups(float *choice, int E, int ng, int tg, int v3, float fill, lwq_dtype dt, float *gscore,
                        int32_t *gsel, int32_t *q)
{
    const int gs = E / ng;
    for (int g = 0; g < ng; g++) {
        const float *cg = choice + g * gs;
        if (v3) { /* sum of the two best */
            int t2[2] = {-1, -1};
            topk(cg, gs, gs < 2 ? gs : 2, t2);
            gscore[g] = lwq_round_to((t2[0] >= 0 ? cg[t2[0]] : NAN) + (gs > 1 && t2[1] >= 0 ? cg[t2[1]] : 0.0f), dt);
        } else { /* V2 group_limited_greedy: the best */
            int t1 = -1;
            topk(cg, gs, 1, &t1);
            gscore[g] = t1 >= 0 ? cg[t1] : NAN;
        }
    }
    lwq_topk_torch(gscore, ng, tg, 0, q, gsel); /* torch.topk(group_scores, sorted=False) */
    for (int g = 0; g < ng; g++) {
        int keep = 0;
        for (int t = 0; t < tg && !keep; t++)
            keep = gsel[t] == g;
        if (!keep)
            for (int i = 0; i < gs; i++)
                choice[g * gs + i] = fill;
    }
}

typedef struct route_job {
    const lwq_model_config *c;
    const float *logits, *bias;
    const uint8_t *valid;
    int32_t *idx;
    float *wts;
    int64_t *bad; /* per thread: first token with NaN scores, -1; -2 out of memory */
    lwq_dtype act;
} route_job;

static void route_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    const route_job *j = ctx;
    const lwq_model_config *c = j->c;
    const int E = c->num_experts, K = c->num_experts_per_tok;
    const int sb = c->family->router == LWQ_ROUTER_SIGMOID_BIAS;
    const int sg = c->family->router == LWQ_ROUTER_SOFTMAX_GROUPED;
    const int v3 = c->family->router == LWQ_ROUTER_DEEPSEEK_V3 || sb; /* sigmoid + bias scoring */
    const int grouped = !sb && (v3 || sg || !strcmp(c->topk_method, "group_limited_greedy"));
    const lwq_dtype rd = sg ? j->act : LWQ_F32; /* Mistral-4 rounds every step to the act dtype */
    const int ng = c->n_group > 0 ? c->n_group : 1, tg = c->topk_group > 0 ? c->topk_group : 1;
    float *score = malloc((size_t)(2 * E + ng) * sizeof(float));
    int32_t *gsel = malloc((size_t)(ng + E + ng) * sizeof(int32_t)), sel[64];
    if (!score || !gsel) {
        j->bad[tid] = -2;
        free(score);
        free(gsel);
        return;
    }
    int32_t *q = gsel + ng; /* the top-k's positions (kernels/topk.h) */
    const lwq_exp_kernels *ek = lwq_exp_kernels_get();
    float *choice = score + E, *gscore = choice + E;
    for (int64_t t = t0; t < t1; t++) {
        int32_t *idx = j->idx + t * K;
        float *wts = j->wts + t * K;
        if (!j->valid[t]) {
            for (int s = 0; s < K; s++) {
                idx[s] = 0;
                wts[s] = 0.0f;
            }
            continue;
        }
        const float *lg = j->logits + t * E;
        if (v3) {
            ek->sigmoid(lg, score, E); /* score[i] = 1 / (1 + expf(-lg[i])) */
            for (int i = 0; i < E; i++)
                choice[i] = score[i] + j->bias[i];
        } else {
            float mx = -INFINITY, sum = 0.0f;
            for (int i = 0; i < E; i++)
                mx = lg[i] > mx ? lg[i] : mx;
            ek->exp_sub(lg, mx, score, E); /* score[i] = expf(lg[i] - mx) */
            for (int i = 0; i < E; i++)
                sum += score[i];
            for (int i = 0; i < E; i++) {
                score[i] = lwq_round_to(score[i] / sum, rd);
                choice[i] = score[i];
            }
        }
        int nan = 0;
        for (int i = 0; i < E; i++)
            nan |= choice[i] != choice[i];
        if (nan && j->bad[tid] == -1) /* group masking would hide a NaN behind 0.0 */
            j->bad[tid] = t;
        if (grouped && ng > 1)
            mask_groups(choice, E, ng, tg, v3 || sg, c->family->group_mask_inf ? -INFINITY : 0.0f, rd, gscore, gsel, q);
        lwq_topk_torch(choice, E, K, 0, q, sel); /* torch.topk(scores_for_choice, sorted=False) */
        float wsum = 0.0f;
        for (int s = 0; s < K; s++) {
            idx[s] = sel[s];
            wts[s] = score[sel[s]];
            wsum += score[sel[s]];
        }
        if (c->norm_topk_prob) {
            /* V3 and Mistral-4 add 1e-20 to the denominator; V2 and MiniMax-M2 renormalise by the
             * plain sum */
            float den = (v3 && !sb) || sg ? lwq_round_to(lwq_round_to(wsum, rd) + 1e-20f, rd) : wsum;
            for (int s = 0; s < K; s++)
                wts[s] = lwq_round_to(wts[s] / den, rd);
        }
        if (!sb) /* MiniMax-M2 has no routed_scaling_factor */
            for (int s = 0; s < K; s++)
                wts[s] = lwq_round_to(wts[s] * (float)c->routed_scaling_factor, rd);
    }
    free(score);
    free(gsel);
}

/* logits (n, E) f32 host -> idx/wts (n, K) for the valid rows, threaded over tokens (each
 * token's routing is independent, so the result does not depend on the split). */
static int deepseek_route(const lwq_model_config *c, int layer, const float *logits,
                          const float *bias, const uint8_t *valid, int64_t n, int32_t *idx,
                          float *wts, lwq_dtype act, lwq_error *e)
{
    int nt = lwq_parallel_threads();
    int64_t *bad = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *bad);
    if (!bad)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for routing", layer);
    for (int i = 0; i < nt; i++)
        bad[i] = -1;
    route_job j = {c, logits, bias, valid, idx, wts, bad, act};
    lwq_parallel_for(n, 64, route_rows, &j);
    int64_t first = -1;
    int oom = 0;
    for (int i = 0; i < nt; i++) {
        oom |= bad[i] == -2;
        if (bad[i] >= 0 && (first < 0 || bad[i] < first))
            first = bad[i];
    }
    free(bad);
    if (oom)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for routing %d experts", layer,
                        c->num_experts);
    if (first >= 0)
        return lwq_errf(e, LWQ_ENUMERIC, "layer %d: router scores of token %" PRId64 " are NaN",
                        layer, first);
    return 0;
}

int lwq_fwd_deepseek_route(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                           const lwq_tensor *x, int32_t *idx, float *wts, const lwq_observer *obs,
                           lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const lwq_backend *be = m->be;
    const int64_t n = x->shape[0], D = c->hidden_size;
    const int E = c->num_experts;
    const int sb = c->family->router == LWQ_ROUTER_SIGMOID_BIAS;
    const int v3 = c->family->router == LWQ_ROUTER_DEEPSEEK_V3 || sb;
    char prefix[128], name[LWQ_NAME_MAX];
    int mixtral;
    int64_t inter;
    lwq_fwd_experts_names(c, layer, prefix, sizeof prefix, &mixtral, &inter);
    lwq_tensor wg, wb, logits, la;
    snprintf(name, sizeof name, "%s.gate.weight", prefix);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 2, E, D, 0, &wg, e));
    if (v3) { /* DeepSeek keeps the bias on the gate, MiniMax-M2 on the MoE block */
        snprintf(name, sizeof name, sb ? "%s.e_score_correction_bias" : "%s.gate.e_score_correction_bias", prefix);
        LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, E, 0, 0, &wb, e));
    }
    snprintf(name, sizeof name, "%s.gate", prefix);
    LWQ_TRY(lwq_fwd_observe(obs, layer, name, x, &b->valid, e));
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_F32, n, E, &logits, e));
    if (sb || c->family->router == LWQ_ROUTER_SOFTMAX_GROUPED) {
        /* transformers: F.linear in the weight's dtype (then .float() for MiniMax-M2; Mistral-4's
         * softmax reads the act-dtype logits, in f32 inside) */
        LWQ_TRY(lwq_fwd_tensor(m, m->act, n, E, &la, e));
        LWQ_TRY(lwq_backend_gemm(be, x, &wg, NULL, &la, e));
        LWQ_TRY(lwq_backend_copy(be, &la, &logits, e));
    } else {
        LWQ_TRY(lwq_backend_gemm(be, x, &wg, NULL, &logits, e));
    }

    float *hl = malloc(((size_t)(n * E) + 1) * sizeof(float));
    float *bias = malloc(((size_t)E + 1) * sizeof(float));
    void *braw = malloc(((size_t)E + 1) * sizeof(float));
    int rc = 0;
    if (!hl || !bias || !braw) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for routing %" PRId64 " tokens", layer,
                      n);
        goto out;
    }
    if ((rc = lwq_backend_download(be, hl, logits.data, (size_t)(n * E) * sizeof(float), e)) < 0)
        goto out;
    if (v3) {
        if ((rc = lwq_backend_download(be, braw, wb.data, (size_t)E * lwq_dtype_size(wb.dtype),
                                       e)) < 0)
            goto out;
        for (int i = 0; i < E; i++)
            bias[i] = lwq_load_f(braw, wb.dtype, (size_t)i);
    }
    rc = deepseek_route(c, layer, hl, bias, b->valid_host, n, idx, wts, m->act, e);
out:
    free(hl);
    free(bias);
    free(braw);
    return rc < 0 ? rc : 0;
}

int lwq_fwd_deepseek_shared(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            const lwq_tensor *x, lwq_tensor *sh, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    char name[LWQ_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%d.mlp.shared_experts", layer);
    return lwq_fwd_swiglu_mlp(m, layer, w, name, "gate_proj", "up_proj", "down_proj",
                              c->moe_intermediate_size * c->n_shared_experts, x, &b->valid, NULL,
                              NULL, sh, obs, e);
}

int lwq_fwd_deepseek_routed(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs,
                            lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0];
    const int K = c->num_experts_per_tok;
    char prefix[128];
    int mixtral;
    int64_t inter;
    lwq_fwd_experts_names(c, layer, prefix, sizeof prefix, &mixtral, &inter);
    size_t nk = (size_t)(n * K) + 1;
    int32_t *idx = malloc(nk * sizeof(int32_t));
    float *wts = malloc(nk * sizeof(float));
    int rc = 0;
    if (!idx || !wts) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for routing %" PRId64 " tokens", layer,
                      n);
        goto out;
    }
    if ((rc = lwq_fwd_deepseek_route(m, layer, w, b, x, idx, wts, obs, e)) < 0)
        goto out;
    rc = lwq_fwd_moe_experts(m, layer, w, b, x, prefix, mixtral, inter, idx, wts, out, obs, e);
out:
    free(idx);
    free(wts);
    return rc < 0 ? rc : 0;
}
