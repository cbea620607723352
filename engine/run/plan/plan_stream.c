/* engine/run/plan/plan_stream.c — the memory plan with expert streaming (engine/source/units.h).
 *
 * Streamed, a MoE layer occupies the ring as units: the dense part, then groups of G experts, so a
 * ring slot holds the largest unit instead of the largest layer.  In exchange the run keeps the
 * MoE input x and the running expert sum of every calibration row (one boundary each) and the
 * routing (rows x top-k index and weight).  Quantized experts go to a spill file, so the writer
 * holds only the dense part's output of up to two layers, plus the group being quantized.
 *   host(G) = host(whole) - K x slot(whole) - writer(whole) + K x slot(G) + writer(G) + stream
 *   gpu(G)  = runtime + the larger of the embedding step and slot(G) + one batch of activations x 3
 *             (h, x, partial) + scratch + staging + quantizer copy + GPTQ buffers
 * G comes from --expert-group, or is the largest that fits the budget when a whole layer does not;
 * with no G that fits, stream_min_* say what one expert per unit needs (the run refuses). */
#include <stdint.h>
#include <string.h>

#include "engine/run/engine.h"
#include "engine/source/units.h"
#include "kernels/backend.h"
#include "layout/checkpoint/checkpoint.h"

typedef struct peaks {
    uint64_t slot, host, gpu, writer, act;
} peaks;

static int peaks_for(const lwq_quantize_opts *o, const lwq_ckpt *ck, const lwq_mem_plan *p, int G, int cuda,
                     peaks *q, lwq_error *e)
{
    int rc = lwq_units_max_slot(ck, G, &q->slot, NULL, NULL, e);
    if (rc)
        return rc;
    (void)o;
    /* dense output of two layers in flight + the group being quantized (at most half its source) */
    q->writer = 2 * p->dense_bytes + q->slot / 2;
    q->host = p->host_peak - (uint64_t)p->slots * p->slot_bytes - p->writer_bytes + (uint64_t)p->slots * q->slot +
              q->writer + p->stream_bytes;
    uint64_t act = lwq_dtype_size(ck->cfg.dtype), rows = 0;
    int B = o->batch_size > 0 ? o->batch_size : 1;
    for (int s0 = 0; s0 < o->calib->n; s0 += B) {
        int64_t seq = 0;
        for (int i = s0; i < o->calib->n && i < s0 + B; i++)
            seq = o->calib->len[i] > seq ? o->calib->len[i] : seq;
        uint64_t r = (uint64_t)((o->calib->n - s0 < B ? o->calib->n - s0 : B) * seq);
        rows = r > rows ? r : rows;
    }
    /* h, x and the running sum instead of one batch of rows (plan.c's gpu_act_bytes has one) */
    const lwq_model_config *c = &ck->cfg;
    uint64_t sum = rows * (uint64_t)c->hidden_size * act; /* nemotron_h: latent wide, float32 */
    if (c->family->single && c->family->experts == LWQ_EXPERTS_NEMOTRON)
        sum = rows * (uint64_t)(c->moe_latent_size > 0 ? c->moe_latent_size : c->hidden_size) * sizeof(float);
    q->act = p->gpu_act_bytes + rows * (uint64_t)c->hidden_size * act + sum;
    uint64_t layer = q->slot + q->act + p->gpu_staging_bytes + p->gpu_quant_bytes + p->gpu_gptq_bytes;
    q->gpu = cuda ? p->gpu_runtime_bytes + (layer >= p->gpu_embed_bytes ? layer : p->gpu_embed_bytes) : 0;
    return 0;
}

static int fits(const lwq_quantize_opts *o, uint64_t host, uint64_t gpu)
{
    return (o->max_cpu_gb <= 0 || (double)host <= o->max_cpu_gb * 1e9) &&
           (o->max_gpu_gb <= 0 || !gpu || (double)gpu <= o->max_gpu_gb * 1e9);
}

int lwq_plan_stream(const lwq_quantize_opts *o, const lwq_ckpt *ck, lwq_mem_plan *p, lwq_error *e)
{
    const lwq_model_config *c = &ck->cfg;
    int E = c->num_experts, moe = 0;
    for (int L = 0; L < c->num_hidden_layers && E > 0; L++)
        moe |= lwq_config_layer_is_moe(c, L);
    if (!moe || E <= 0) {
        if (o->expert_group > 0)
            return lwq_errf(e, LWQ_EINVAL, "--expert-group %d: %s (%s) has no routed experts to stream",
                            o->expert_group, o->model_dir, c->model_type);
        return 0;
    }
    if (o->whole_model) {
        if (o->expert_group > 0)
            return lwq_errf(e, LWQ_EINVAL, "--expert-group and --whole-model cannot be combined");
        return 0;
    }
    p->num_experts = E;
    int rc = lwq_units_max_slot(ck, 0, &p->slot_bytes, &p->dense_bytes, &p->expert_bytes, e);
    if (rc)
        return rc;
    int cuda = o->device == LWQ_DEVICE_CUDA || (o->device == LWQ_DEVICE_AUTO && lwq_backend_cuda_device_count() > 0);
    /* x and the running sum (+ DeepSeek's shared-expert output): one boundary each; the routing */
    /* nemotron_h: its ReLU^2 shared expert always, and the sum in float32 (run_stream.c buffers) */
    const int nemotron = c->family->single && c->family->experts == LWQ_EXPERTS_NEMOTRON;
    int shared = nemotron || (c->family->shared == LWQ_SHARED_DEEPSEEK && c->n_shared_experts > 0) ||
                 (c->family->shared == LWQ_SHARED_GATED && c->shared_expert_intermediate_size > 0);
    uint64_t sum = p->boundary_bytes / 2;
    if (nemotron && c->hidden_size > 0) {
        uint64_t w = (uint64_t)(c->moe_latent_size > 0 ? c->moe_latent_size : c->hidden_size);
        sum = sum / (uint64_t)c->hidden_size / lwq_dtype_size(c->dtype) * w * sizeof(float);
    }
    p->stream_bytes = o->dry_read ? 0
                                  : p->boundary_bytes / 2 * (uint64_t)(1 + shared) + sum +
                                        (uint64_t)p->calib_rows * (uint64_t)c->num_experts_per_tok * 8;
    peaks one;
    if ((rc = peaks_for(o, ck, p, 1, cuda, &one, e)) != 0)
        return rc;
    p->stream_min_host = one.host;
    p->stream_min_gpu = one.gpu;
    int G = 0;
    if (o->expert_group > 0) {
        G = o->expert_group < E ? o->expert_group : E;
    } else if (!fits(o, p->host_peak, p->gpu_peak) && fits(o, one.host, one.gpu)) {
        int lo = 1, hi = E; /* largest G that fits: peaks grow with G */
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            peaks q;
            if ((rc = peaks_for(o, ck, p, mid, cuda, &q, e)) != 0)
                return rc;
            if (fits(o, q.host, q.gpu))
                lo = mid;
            else
                hi = mid - 1;
        }
        G = lo;
    }
    if (G <= 0)
        return 0;
    peaks q;
    if ((rc = peaks_for(o, ck, p, G, cuda, &q, e)) != 0)
        return rc;
    p->expert_group = G;
    p->host_peak = q.host;
    p->gpu_peak = q.gpu;
    p->slot_bytes = q.slot;
    p->writer_bytes = q.writer;
    if (q.gpu)
        p->gpu_act_bytes = q.act;
    return 0;
}

int lwq_plan_stream_refusal(const lwq_quantize_opts *o, const lwq_mem_plan *p, lwq_error *e)
{
    const double G = 1e9;
    int over_host = o->max_cpu_gb > 0 && (double)p->host_peak > o->max_cpu_gb * G;
    int over_gpu = o->max_gpu_gb > 0 && p->gpu_peak > 0 && (double)p->gpu_peak > o->max_gpu_gb * G;
    if (!p->stream_min_host || (!over_host && !over_gpu))
        return 0;
    if (o->expert_group > 1 && fits(o, p->stream_min_host, p->stream_min_gpu))
        return lwq_errf(e, LWQ_ENOMEM, "with --expert-group %d the plan needs %.3f GB of host and %.3f GB of GPU "
                        "memory, more than the budget; a smaller group fits (one expert per unit needs %.3f GB host, "
                        "%.3f GB GPU): lower --expert-group or leave it out to size it to the budget",
                        o->expert_group, (double)p->host_peak / G, (double)p->gpu_peak / G,
                        (double)p->stream_min_host / G, (double)p->stream_min_gpu / G);
    if (over_host && (double)p->stream_min_host > o->max_cpu_gb * G)
        return lwq_errf(e, LWQ_ENOMEM, "the plan needs %.3f GB of host memory, more than --max-cpu-memory-gb %.3f, "
                        "and streaming experts one at a time still needs %.3f GB (dense part %.3f GB + one expert "
                        "%.3f GB per unit); give at least --max-cpu-memory-gb %.3f or lower --calib-size/--calib-seq",
                        (double)p->host_peak / G, o->max_cpu_gb, (double)p->stream_min_host / G,
                        (double)p->dense_bytes / G, (double)p->expert_bytes / G, (double)p->stream_min_host / G);
    if (over_gpu && p->stream_min_gpu > 0 && (double)p->stream_min_gpu > o->max_gpu_gb * G)
        return lwq_errf(e, LWQ_ENOMEM, "the plan needs %.3f GB of GPU memory, more than --max-gpu-memory-gb %.3f, "
                        "and streaming experts one at a time still needs %.3f GB (dense part %.3f GB + one expert "
                        "%.3f GB per unit); give at least --max-gpu-memory-gb %.3f", (double)p->gpu_peak / G,
                        o->max_gpu_gb, (double)p->stream_min_gpu / G, (double)p->dense_bytes / G,
                        (double)p->expert_bytes / G, (double)p->stream_min_gpu / G);
    return 0;
}
