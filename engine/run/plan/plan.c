/* engine/run/plan/plan.c — `lwq plan`: predicted peak host/GPU memory and output size, from headers only.
 *
 * Host peak = ring slots (K x the largest layer's aligned read extents) + two boundaries (every
 * calibration row x hidden x activation size) + the forward's scratch for the largest batch +
 * local-Hessian sums + the quantized output (and, for FP8-block / MXFP4 sources, the dequantized
 * weights) of up to two layers in flight at the writer + the host's FP8 weight search (its per-row
 * losses over the real candidate count, a recipe's own range up to LWQ_MSE_MAX_STEPS, and a routed
 * expert's stacked gate+up copy) + the tail tensors read for the embedding step.  The process term is fixed allowances and the
 * calibration ids, never a sample of the live RSS, so what the plan decides (the expert group,
 * --batch-size 0) depends only on the inputs, the options and the machine's fixed facts.
 * GPU peak (CUDA backend) = the CUDA context and cuBLAS workspace + the larger of two phases:
 *   the embedding step: the embedding matrix uploaded + one batch of rows (run_layer.c);
 *   a layer: the weights on the device (the largest layer and its dequantized sources; with
 *   --whole-model every layer and the embedding, all resident) + one batch of activations +
 *   scratch + the GEMM's F32 staging (kept at its high-water mark, kernels/cuda/backend_cuda.cu
 *   ws_reserve) + the quantizer's own copy of a weight and its output buffers (engine/quant/qops.c
 *   keeps them, grown to the largest, while the forward's copies are held) + GPTQ's device buffers
 *   and its cuBLAS / cuSOLVER handles (kernels/cuda/gptq_cuda.cu: live while the quantizer's
 *   buffers are held, so the two add).
 * The forward scratch is an estimate (the activations of one batch through the widest op of the
 * layer, with a 1.5x margin), the context and the library handles allowances; the rest are exact
 * byte counts.  perf/gpu-check.sh's plan-gpu row compares the GPU peak with the one the run
 * measures (cudaMemGetInfo at every allocation of the CUDA module). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/log.h"
#include "core/sys/proc.h"
#include "engine/quant/dist.h"
#include "engine/forward/forward.h"
#include "engine/run/engine.h"
#include "kernels/gptq.h"
#include "engine/source/layersrc.h"
#include "engine/quant/qlayer.h"
#include "kernels/backend.h"
#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/format/quant_formats.h"

/* The CUDA context (module images, the runtime's heaps, streams) on the device, as cudaMemGetInfo
 * counts it: an allowance, since it depends on driver and toolkit (perf/gpu-check.sh measures the
 * real one and RESULTS.md records it). */
#define LWQ_PLAN_CUDA_CONTEXT_BYTES ((uint64_t)768 << 20)
/* cuBLAS's workspace: the size the cuBLAS documentation (cublasSetWorkspace) recommends for
 * Hopper, 32 MiB (4 MiB before Hopper); the larger is assumed. */
#define LWQ_PLAN_CUBLAS_WS_BYTES ((uint64_t)32 << 20)
/* A cuSOLVER handle (GPTQ's factor): its own cuBLAS handle and workspace, and its scratch; an
 * allowance. */
#define LWQ_PLAN_CUSOLVER_BYTES ((uint64_t)64 << 20)
/* The process on the host before any data: the binary, libc and the libraries lwq links, thread
 * stacks, the checkpoint index, the allocator's slack.  An allowance (a CPU run of a small model
 * peaks at ~5 MB, perf/RESULTS.md); never a live sample. */
#define LWQ_PLAN_PROCESS_BYTES ((uint64_t)16 << 20)
/* What the CUDA module adds on the host when it is loaded: the pages of libcudart, libcublas(Lt)
 * and libcusolver and the runtime's host heaps once a context exists; an allowance, measured by
 * perf/gpu-check.sh's plan-gpu row. */
#define LWQ_PLAN_CUDA_HOST_BYTES ((uint64_t)512 << 20)
/* The model's constant tables on the device (RoPE inverse frequencies): an allowance. */
#define LWQ_PLAN_MODEL_TABLES_BYTES ((uint64_t)64 << 10)

static uint64_t linear_out_bytes(const lwq_arch_linear *l, lwq_qformat f, uint64_t src_bytes)
{
    uint64_t n = (uint64_t)l->out_features * (uint64_t)l->in_features;
    if (f == LWQ_QFMT_NVFP4)
        return n / 2 + n / 16 + 8;
    if (f == LWQ_QFMT_FP8)
        return n + 8;
    return src_bytes;
}

/* Bytes the checkpoint stores for linear `module`'s weight: the plain weight, or its packed
 * parts; `dense` when nothing is found (the plan check reports missing tensors elsewhere). */
static uint64_t stored_bytes(const lwq_ckpt *ck, const char *module, uint64_t dense)
{
    static const char *const parts[] = {".weight", ".weight_scale_inv", ".weight_blocks",
                                        ".weight_scales"};
    uint64_t n = 0;
    int found = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s%s", module, parts[i]);
        const lwq_ckpt_tensor *t = lwq_ckpt_find(ck, name);
        if (t) {
            n += t->nbytes;
            found = 1;
        }
    }
    return found ? n : dense;
}

/* GPU bytes one linear needs beyond the layer's weights, folded into the maxima *staging and
 * *quant.  Staging is the GEMM's F32 workspace as kernels/cuda/backend_cuda.cu cu_gemm sizes it:
 * when the weight's dtype is not the activations' (BF16 weights in an F16 model, F32 weights),
 * each operand that is not F32 is widened to F32 (256-byte aligned regions), and the output goes
 * through F32 when a bias or a dtype change needs the extra pass.  Quant is the quantizer's
 * (engine/quant/qops.c): the weight's device copy, the output buffers, the uploaded block amax /
 * Hessian, and the FP8 mse search's per-row losses in quant_fp8_cuda.cu (the default range's 39
 * candidates: a recipe's own range is searched on the host, fp8_search). */
/* The FP8 weight search of linear i (engine/quant/qlayer.c fp8_searches): 0 when none runs (max,
 * GPTQ, another format, or a routed expert's up, searched with its gate); else the rows searched
 * (a routed expert's gate and up stacked) into *rows, the candidates (a recipe's own range's
 * lwq_mse_linspace count, at most LWQ_MSE_MAX_STEPS, or the default 39) into *ncand, the host
 * copy of a stacked pair into *stacked, and whether the device runs it (the default range on
 * CUDA; a recipe's own range is searched by the host kernel whatever the device). */
static int fp8_search(const lwq_quantize_opts *o, const lwq_ckpt *ck, const lwq_arch_layer *plan, int i,
                      const lwq_quant_choice *ch, uint64_t *rows, int *ncand, uint64_t *stacked, int *on_device)
{
    const lwq_arch_linear *l = &plan->linears[i];
    if (ch->format != LWQ_QFMT_FP8 || ch->algo == LWQ_ALGO_MAX || ch->algo == LWQ_ALGO_GPTQ)
        return 0;
    float m[LWQ_MSE_MAX_STEPS];
    int nm = ch->algo == LWQ_ALGO_MSE ? lwq_choice_mse_candidates(ch, m) : 0;
    *ncand = nm ? nm : LWQ_MSE_STEPS;
    *on_device = nm == 0;
    *rows = (uint64_t)l->out_features;
    *stacked = 0;
    for (int k = 0; l->expert >= 0 && l->group >= 0 && k < plan->nlinears; k++) {
        const lwq_arch_linear *pk = &plan->linears[k];
        if (k == i || pk->group != l->group)
            continue;
        lwq_quant_choice ck2 = lwq_qlayer_choice(o->recipe, plan, k);
        if (ck2.format != LWQ_QFMT_FP8 || ck2.algo == LWQ_ALGO_MAX || ck2.algo == LWQ_ALGO_GPTQ)
            continue;
        if (l->role != LWQ_ROLE_EXPERT_GATE)
            return 0; /* searched with its gate, over the gate's choice */
        uint64_t src = (uint64_t)pk->out_features * (uint64_t)pk->in_features * lwq_dtype_size(ck->cfg.dtype);
        *rows += (uint64_t)pk->out_features;
        *stacked = stored_bytes(ck, l->name, (uint64_t)l->out_features * (uint64_t)l->in_features *
                                                 lwq_dtype_size(ck->cfg.dtype)) +
                   stored_bytes(ck, pk->name, src);
    }
    return 1;
}

static void gpu_linear(const lwq_ckpt *ck, const lwq_arch_linear *l, const lwq_quant_choice *ch, lwq_dtype act_dt,
                       uint64_t rows, uint64_t fp8_loss_rows, uint64_t fp8_stacked, uint64_t *staging,
                       uint64_t *quant)
{
    char name[512];
    uint64_t in = (uint64_t)l->in_features, outf = (uint64_t)l->out_features, n = in * outf;
    size_t act = lwq_dtype_size(act_dt);
    snprintf(name, sizeof name, "%s.weight", l->name);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(ck, name);
    /* a packed source (FP8 blocks, MXFP4) is dequantized to the activation dtype first */
    int float_w = t && (t->dtype == LWQ_F32 || t->dtype == LWQ_BF16 || t->dtype == LWQ_F16);
    lwq_dtype wdt = float_w ? t->dtype : act_dt;
    uint64_t wbytes = float_w ? t->nbytes : n * act;
    snprintf(name, sizeof name, "%s.bias", l->name);
    int bias = lwq_ckpt_find(ck, name) != NULL;
    const lwq_dtype in_dt = wdt == act_dt ? act_dt : LWQ_F32;
    const int conv_x = act_dt != in_dt, conv_w = wdt != in_dt;
    const int direct = !bias && (act_dt == in_dt || act_dt == LWQ_F32); /* y is in the activation dtype */
    const uint64_t al = 256;
    uint64_t st = (conv_x ? (rows * in * 4 + al - 1) / al * al : 0) + (conv_w ? (n * 4 + al - 1) / al * al : 0) +
                  (direct ? 0 : rows * outf * 4) + al;
    *staging = st > *staging ? st : *staging;
    uint64_t q = 0;
    if (ch->format == LWQ_QFMT_NVFP4) {
        q = wbytes + n / 2 + n / 16;
        if (ch->algo != LWQ_ALGO_MAX)
            q += n / 16 * sizeof(float);
        if (ch->algo == LWQ_ALGO_LOCAL_HESSIAN)
            q += in / 16 * 256 * sizeof(float);
    } else if (ch->format == LWQ_QFMT_FP8) {
        /* the device's search: the default 39 candidates' per-row losses, over a routed expert's
         * gate and up stacked (uploaded as one weight) */
        q = (fp8_stacked > wbytes ? fp8_stacked : wbytes) + n + fp8_loss_rows * LWQ_MSE_STEPS * sizeof(double);
    }
    *quant = q > *quant ? q : *quant;
}

int lwq_quantize_plan_ckpt(const lwq_quantize_opts *o, const lwq_ckpt *ck, lwq_mem_plan *p, lwq_error *e)
{
    memset(p, 0, sizeof *p);
    int rc = 0;
    const lwq_model_config *c = &ck->cfg;
    size_t act = lwq_dtype_size(c->dtype);
    int N = c->num_hidden_layers;
    uint64_t layer_out_max = 0, deq_max = 0;
    /* calibration rows as the engine batches them */
    int B = o->batch_size > 0 ? o->batch_size : 1;
    int64_t max_rows = 0;
    uint64_t layers_sum = 0, deq_sum = 0; /* --whole-model keeps every layer on the device */
    for (int s0 = 0; s0 < o->calib->n; s0 += B) {
        int64_t seq = 0;
        for (int i = s0; i < o->calib->n && i < s0 + B; i++) {
            seq = o->calib->len[i] > seq ? o->calib->len[i] : seq;
            p->calib_tokens += o->calib->len[i];
        }
        int64_t rows = (o->calib->n - s0 < B ? o->calib->n - s0 : B) * seq;
        p->calib_rows += rows;
        max_rows = rows > max_rows ? rows : max_rows;
    }
    const int cuda =
        o->device == LWQ_DEVICE_CUDA || (o->device == LWQ_DEVICE_AUTO && lwq_backend_cuda_device_count() > 0);
    for (int L = 0; L < N && rc == 0; L++) {
        lwq_arch_layer plan;
        if ((rc = lwq_arch_layer_plan(c, L, &plan, e)) != 0)
            break;
        uint64_t out = ck->layers[L].bytes, hess = 0, deq = 0, ghess = 0;
        uint8_t *gptq = calloc((size_t)(plan.nlinears ? plan.nlinears : 1), 1);
        if (!gptq) {
            lwq_arch_layer_free(&plan);
            rc = lwq_errf(e, LWQ_ENOMEM, "plan: out of memory");
            break;
        }
        for (int i = 0; i < plan.nlinears; i++) {
            const lwq_arch_linear *l = &plan.linears[i];
            lwq_quant_choice ch = lwq_qlayer_choice(o->recipe, &plan, i);
            uint64_t src = (uint64_t)l->out_features * (uint64_t)l->in_features * lwq_dtype_size(c->dtype);
            /* FP8-block / MXFP4 sources store the weight packed; unquantized it comes out
             * dequantized (engine/source/srcdeq.h), so the output holds `src` bytes */
            uint64_t stored = stored_bytes(ck, l->name, src);
            out = out - stored + linear_out_bytes(l, ch.format, src);
            deq += stored != src ? src : 0;
            int hk = lwq_qlayer_hessian(l, &ch);
            if (hk == LWQ_STATS_H_BLOCK)
                hess += (uint64_t)(l->in_features / 16) * 256 * (sizeof(double) + sizeof(lwq_fix)); /* partial + grid */
            if (hk == LWQ_STATS_H_FULL) {
                uint64_t in = (uint64_t)l->in_features;
                /* one in x in double sum per input: fused-group members share theirs (engine/quant/stats.c) */
                int shared = 0;
                for (int j = 0; j < i && l->group >= 0 && !shared; j++)
                    shared = plan.linears[j].group == l->group && plan.linears[j].in_features == l->in_features &&
                             gptq[j];
                gptq[i] = 1;
                if (!shared)
                    ghess += in * in * sizeof(double) + in * (in + 1) / 2 * sizeof(lwq_fix); /* partial + grid */
                /* factor (two in x in doubles while it is built) + two dequantized copies for the
                 * error report, one linear at a time */
                uint64_t f = 2 * in * in * sizeof(double) + 2 * (uint64_t)l->out_features * in * sizeof(float);
                p->gptq_factor_bytes = f > p->gptq_factor_bytes ? f : p->gptq_factor_bytes;
                /* on the GPU (kernels/cuda/gptq_cuda.cu), one after the other: the factor's matrix and
                 * cuSOLVER workspace (~2 in^2 doubles) with its cuSOLVER handle; then the sweep's weight
                 * copy, its double working copy, the factor, the block errors and the codes with its
                 * cuBLAS handle.  The quantizer's buffers (gpu_quant_bytes) stay allocated meanwhile. */
                uint64_t outf = (uint64_t)l->out_features;
                uint64_t g = 2 * in * in * sizeof(double) + LWQ_PLAN_CUSOLVER_BYTES;
                uint64_t sw = outf * in * (lwq_dtype_size(c->dtype) + sizeof(double) + 1) + in * in * sizeof(double) +
                              outf * LWQ_GPTQ_BLOCK * sizeof(double) + 3 * in * sizeof(int64_t) +
                              LWQ_PLAN_CUBLAS_WS_BYTES;
                g = sw > g ? sw : g;
                p->gpu_gptq_bytes = g > p->gpu_gptq_bytes ? g : p->gpu_gptq_bytes;
            }
            uint64_t srows = 0, stacked = 0, dev_rows = 0, dev_stacked = 0;
            int ncand = 0, on_device = 0;
            if (fp8_search(o, ck, &plan, i, &ch, &srows, &ncand, &stacked, &on_device)) {
                /* the host's search (any on the CPU backend, a recipe's own range on CUDA): its
                 * per-row losses over every candidate, and a stacked pair's copy */
                uint64_t h = stacked + (on_device && cuda ? 0 : srows * (uint64_t)ncand * sizeof(double));
                p->search_bytes = h > p->search_bytes ? h : p->search_bytes;
                dev_rows = on_device ? srows : 0;
                dev_stacked = on_device ? stacked : 0;
            }
            gpu_linear(ck, l, &ch, c->dtype, (uint64_t)max_rows, dev_rows, dev_stacked, &p->gpu_staging_bytes,
                       &p->gpu_quant_bytes);
        }
        free(gptq);
        hess += ghess;
        if (o->whole_model) /* every layer's statistics are resident together */
            p->gptq_hessian_bytes += ghess;
        else
            p->gptq_hessian_bytes = ghess > p->gptq_hessian_bytes ? ghess : p->gptq_hessian_bytes;
        lwq_arch_layer_free(&plan);
        p->output_bytes += out;
        layer_out_max = out > layer_out_max ? out : layer_out_max;
        deq_max = deq > deq_max ? deq : deq_max;
        layers_sum += ck->layers[L].bytes;
        deq_sum += deq;
        if (o->whole_model)
            p->stats_bytes += hess;
        else
            p->stats_bytes = hess > p->stats_bytes ? hess : p->stats_bytes;
        if (ck->layers[L].bytes > p->largest_layer_bytes) {
            p->largest_layer_bytes = ck->layers[L].bytes;
            p->largest_layer = L;
        }
        lwq_io_range *ranges;
        int n;
        lwq_io_plan iop;
        if (rc == 0 && (rc = lwq_layersrc_ranges(ck, L, &ranges, &n, e)) == 0) {
            if ((rc = lwq_io_plan_build(&iop, ranges, (size_t)n, LWQ_LAYERSRC_MERGE_GAP, e)) == 0) {
                p->slot_bytes = iop.bytes > p->slot_bytes ? iop.bytes : p->slot_bytes;
                lwq_io_plan_free(&iop);
            }
            free(ranges);
        }
    }
    if (rc == 0) {
        p->source_bytes = ck->total_bytes;
        p->output_bytes += ck->tail.bytes;
        for (int L = N; L < ck->nlayers; L++)
            p->output_bytes += ck->layers[L].bytes;
        p->slots = o->prefetch > 0 ? o->prefetch : 2;
        p->boundary_bytes = o->whole_model || o->dry_read ? 0 : 2 * (uint64_t)p->calib_rows * (uint64_t)c->hidden_size * act;
        int64_t q = (int64_t)c->num_attention_heads * c->head_dim, kv = (int64_t)c->num_key_value_heads * c->head_dim;
        int64_t mlp = 3 * c->intermediate_size;
        int64_t moe = c->num_experts ? 3 * c->moe_intermediate_size * c->num_experts_per_tok + c->num_experts : 0;
        int64_t per_row = 4 * c->hidden_size + q + 2 * kv + (mlp > moe ? mlp : moe);
        /* qwen3_next: q_proj's gate half, and the Gated DeltaNet's f32 host arrays (projections,
         * conv input and output, z, core output, b and a; model_qwen3next.c) */
        int64_t host_lin = 0;
        if (lwq_mixer_is_gdn(c->family->linear)) {
            int64_t kd = (int64_t)c->linear_num_key_heads * c->linear_key_head_dim;
            int64_t vd = (int64_t)c->linear_num_value_heads * c->linear_value_head_dim;
            host_lin = (2 * kd + 2 * vd) + 2 * (2 * kd + vd) + 2 * vd + 4 * (int64_t)c->linear_num_value_heads;
            per_row += q + host_lin;
        } else if (c->family->linear == LWQ_MIXER_KDA) {
            /* kimi_linear's KDA host arrays (model_kimi.c): x, conv input and output, the forget
             * gate, the output gate, the core output and beta */
            int64_t qkv = (int64_t)c->linear_num_key_heads * c->linear_key_head_dim;
            host_lin = c->hidden_size + 9 * qkv + c->linear_num_key_heads;
            per_row += host_lin;
        }
        p->workspace_bytes = (uint64_t)((double)max_rows * (double)per_row * 4.0 * 1.5);
        /* a layer's dequantized source weights live until its shard is written */
        p->writer_bytes = o->dry_read ? 0 : 2 * (layer_out_max + deq_max);
        p->embed_bytes = o->dry_read ? 0 : ck->tail.bytes;
        uint64_t weights = o->whole_model ? ck->total_bytes - ck->tail.bytes : (uint64_t)p->slots * p->slot_bytes;
        uint64_t work = (uint64_t)max_rows * (uint64_t)c->hidden_size * act;
        p->process_bytes = LWQ_PLAN_PROCESS_BYTES + (uint64_t)p->calib_tokens * sizeof(int32_t) +
                           (cuda ? LWQ_PLAN_CUDA_HOST_BYTES : 0);
        p->host_peak = p->process_bytes + weights + p->boundary_bytes + p->writer_bytes + p->stats_bytes +
                       p->gptq_factor_bytes + p->search_bytes + p->embed_bytes +
                       (cuda ? (uint64_t)max_rows * (uint64_t)host_lin * 4 : p->workspace_bytes + work);
        p->gpu_runtime_bytes = cuda ? LWQ_PLAN_CUDA_CONTEXT_BYTES + LWQ_PLAN_CUBLAS_WS_BYTES : 0;
        if (!cuda) {
            p->gpu_staging_bytes = p->gpu_quant_bytes = p->gpu_gptq_bytes = 0;
        } else {
            /* the embedding matrix as the device holds it (a packed one dequantized) */
            char name[256];
            lwq_names_full(&c->names, "model.embed_tokens.weight", name, sizeof name);
            const lwq_ckpt_tensor *t = lwq_ckpt_find(ck, name);
            uint64_t emb = (uint64_t)c->vocab_size * (uint64_t)c->hidden_size * act;
            if (t && (t->dtype == LWQ_F32 || t->dtype == LWQ_BF16 || t->dtype == LWQ_F16))
                emb = t->nbytes;
            p->gpu_embed_bytes = 0; /* set below, with the activations */
            p->gpu_weights_bytes = o->whole_model ? layers_sum + deq_sum + emb : p->largest_layer_bytes + deq_max;
            /* one batch of rows, the forward's scratch in its reserved block (at least the arena's
             * first block, engine/forward/forward.h), every batch's positions (I32) and validity (U8)
             * per row, and the constant tables */
            uint64_t scratch = p->workspace_bytes > LWQ_FWD_ARENA_FIRST ? p->workspace_bytes : LWQ_FWD_ARENA_FIRST;
            p->gpu_act_bytes = work + scratch + (uint64_t)p->calib_rows * 5 + LWQ_PLAN_MODEL_TABLES_BYTES;
            /* the embedding step takes its ids from the same scratch */
            p->gpu_embed_bytes = emb + p->gpu_act_bytes;
            uint64_t layer = p->gpu_weights_bytes + p->gpu_act_bytes + p->gpu_staging_bytes + p->gpu_quant_bytes +
                             p->gpu_gptq_bytes;
            /* --whole-model: the embedding is among the weights, resident with the layers */
            p->gpu_peak = p->gpu_runtime_bytes + (o->whole_model || layer >= p->gpu_embed_bytes ? layer : p->gpu_embed_bytes);
        }
    }
    if (rc == 0)
        rc = lwq_plan_stream(o, ck, p, e);
    return rc;
}

int lwq_quantize_plan(const lwq_quantize_opts *o, lwq_mem_plan *p, lwq_error *e)
{
    lwq_ckpt ck;
    int rc = lwq_ckpt_open(o->model_dir, &ck, e);
    if (rc)
        return rc;
    rc = lwq_quantize_plan_ckpt(o, &ck, p, e);
    lwq_ckpt_free(&ck);
    return rc;
}

static double gb(uint64_t b) { return (double)b / 1e9; }

/* lwq plan --ranks N: each rank holds its batches' rows of the boundaries (and of the streamed MoE
 * activations); rank 0 also receives the other ranks' quantized tensors (at most one layer's
 * output, counted as half the writer's two layers). */
static void print_ranks(const lwq_mem_plan *p, const lwq_quantize_opts *o)
{
    int N = o->plan_ranks, B = o->batch_size > 0 ? o->batch_size : 1, nb = (o->calib->n + B - 1) / B;
    if (N <= 1)
        return;
    int64_t *rows = calloc((size_t)(nb ? nb : 1), sizeof *rows);
    int *first = calloc((size_t)N + 1, sizeof *first);
    lwq_error e = {0};
    if (!rows || !first || nb == 0) {
        free(rows);
        free(first);
        return;
    }
    for (int b = 0; b < nb; b++) {
        int64_t seq = 0;
        int s0 = b * B, ns = o->calib->n - s0 < B ? o->calib->n - s0 : B;
        for (int i = s0; i < s0 + ns; i++)
            seq = o->calib->len[i] > seq ? o->calib->len[i] : seq;
        rows[b] = ns * seq;
    }
    if (lwq_dist_split_batches(rows, nb, N, first, &e) != 0) {
        fprintf(stderr, "plan: --ranks %d: %s\n", N, e.msg);
    } else {
        uint64_t split = p->boundary_bytes + p->stream_bytes, base = p->host_peak - split;
        for (int r = 0; r < N; r++) {
            int64_t rr = 0;
            for (int b = first[r]; b < first[r + 1]; b++)
                rr += rows[b];
            uint64_t mine = p->calib_rows ? (uint64_t)((double)split * (double)rr / (double)p->calib_rows) : 0;
            uint64_t gather = r == 0 ? p->writer_bytes / 2 : 0;
            fprintf(stderr, "plan: rank %d of %d: batches [%d, %d), %lld rows; host peak %.3f GB (boundaries and MoE "
                    "activations %.3f GB%s)\n", r, N, first[r], first[r + 1], (long long)rr, gb(base + mine + gather),
                    gb(mine), r == 0 ? ", + the other ranks' quantized tensors" : "");
        }
    }
    free(rows);
    free(first);
}

void lwq_mem_plan_print(const lwq_mem_plan *p, const lwq_quantize_opts *o)
{
    /* streamed, the GPU holds one unit (the ring slot) instead of the largest layer */
    uint64_t gpu_weights = p->expert_group > 0 ? p->slot_bytes : p->gpu_weights_bytes;
    fprintf(stderr,
            "plan: source %.3f GB; largest layer %d holds %.3f GB\n"
            "plan: calibration %lld tokens in %lld rows (batch %d)\n"
            "plan: host peak %.3f GB = process %.3f GB + ring %d x %.3f GB + boundaries %.3f GB + scratch %.3f GB"
            " + writer %.3f GB + statistics %.3f GB + FP8 search %.3f GB + tail %.3f GB\n"
            "plan: GPU peak %.3f GB%s; output %.3f GB\n",
            gb(p->source_bytes), p->largest_layer, gb(p->largest_layer_bytes), (long long)p->calib_tokens,
            (long long)p->calib_rows, o->batch_size, gb(p->host_peak), gb(p->process_bytes), p->slots, gb(p->slot_bytes),
            gb(p->boundary_bytes), gb(p->workspace_bytes), gb(p->writer_bytes), gb(p->stats_bytes), gb(p->search_bytes), gb(p->embed_bytes),
            gb(p->gpu_peak), p->gpu_peak ? "" : " (CPU backend)", gb(p->output_bytes));
    if (p->gpu_peak)
        fprintf(stderr,
                "plan: GPU peak = CUDA context + cuBLAS workspace %.3f GB + the larger of the embedding step %.3f GB"
                " and a layer: weights %.3f GB%s + activations and scratch %.3f GB + GEMM F32 staging %.3f GB +"
                " quantizer copy and outputs %.3f GB + GPTQ buffers and cuBLAS/cuSOLVER handles %.3f GB\n",
                gb(p->gpu_runtime_bytes), gb(p->gpu_embed_bytes), gb(gpu_weights),
                o->whole_model ? " (every layer and the embedding)" : p->expert_group > 0 ? " (one unit)" : "",
                gb(p->gpu_act_bytes), gb(p->gpu_staging_bytes), gb(p->gpu_quant_bytes), gb(p->gpu_gptq_bytes));
    if (p->gptq_hessian_bytes)
        fprintf(stderr, "plan: GPTQ: Hessian sums %.3f GB (in statistics; per input in^2 x 8 bytes of partial + in^2/2 x 16 of fixed-point sums) + factor %.3f GB"
                        " (largest linear)\n", gb(p->gptq_hessian_bytes), gb(p->gptq_factor_bytes));
    if (p->expert_group > 0)
        fprintf(stderr,
                "plan: expert streaming: units of %d of %d experts (ring slot %.3f GB; largest expert %.3f GB,"
                " dense part %.3f GB); MoE activations %.3f GB\n",
                p->expert_group, p->num_experts, gb(p->slot_bytes), gb(p->expert_bytes), gb(p->dense_bytes),
                gb(p->stream_bytes));
    else if (p->stream_min_host > 0) {
        char g[64] = "";
        if (p->stream_min_gpu)
            snprintf(g, sizeof g, ", GPU %.3f GB", gb(p->stream_min_gpu));
        fprintf(stderr, "plan: layers are whole; with expert streaming the least is host %.3f GB%s (dense part"
                " %.3f GB + one expert %.3f GB per unit)\n", gb(p->stream_min_host), g,
                gb(p->dense_bytes), gb(p->expert_bytes));
    }
    print_ranks(p, o);
}
