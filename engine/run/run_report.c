/* engine/run/run_report.c — what a run tells people and programs while it works: the progress line
 * per layer and the closing summary (through core/sys/log.h, silenced by --quiet; the summary also
 * as a --log-json line), and the per-layer calibration report kept in the manifest (with the
 * GPTQ part from run_gptq.c).  Engine thread only.  Nothing here writes an output file, so the
 * files that do (run_output.c) and the loop (run.c) call in, and nothing here calls back. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "core/sys/log.h"
#include "engine/run/run_internal.h"

/* One line per layer: its bytes and the wall time since the previous layer finished, so the GB/s
 * shown is what the whole pipeline sustains, not the disk alone. */
void lwq_run_progress(lwq_run *r, int L, double t_start, double *t_prev, int done_layers)
{
    const struct lwq_layer_log *s = &r->lstat[L];
    uint64_t rss, hwm;
    lwq_rss(&rss, &hwm);
    r->lstat[L].rss = rss;
    r->peak_rss = rss > r->peak_rss ? rss : r->peak_rss;
    r->lstat[L].gpu_bytes = lwq_backend_mem_peak(&r->be);
    double now = lwq_now(), wall = now - *t_prev;
    *t_prev = now;
    if (r->o->quiet)
        return;
    double el = now - t_start, eta = done_layers ? el / done_layers * (r->nlayers - L - 1) : 0;
    char cold[48] = "";
    if (s->n_experts)
        snprintf(cold, sizeof cold, "  cold experts %d/%d", s->cold_experts, s->n_experts);
    LWQ_INFO("layer %d/%d  %.3f GB in %.2fs (%.2f GB/s; waited %.2fs for reads)  forward %.2fs  quantize %.2fs"
             "  rss %.2f GB%s  ETA %.0fs",
             L + 1, r->nlayers, (double)s->bytes_read / 1e9, wall, wall > 0 ? (double)s->bytes_read / 1e9 / wall : 0.0,
             s->read_wait_s, s->forward_s, s->quantize_s, (double)rss / 1e9, cold, eta);
}

void lwq_run_summary(lwq_run *r, double wall)
{
    r->peak_gpu = lwq_backend_mem_peak(&r->be);
    uint64_t rss, hwm, out_bytes = 0, in_bytes = 0;
    lwq_rss(&rss, &hwm);
    /* The kernel updates VmHWM lazily (on unmap, not when freed pages are zapped, and from
     * batched per-CPU counters), so it can read below a VmRSS sampled earlier: take both. */
    hwm = r->peak_rss > hwm ? r->peak_rss : hwm;
    for (int L = 0; L < r->nlayers; L++) {
        /* a --dry-read run has no manifest (nothing is written) */
        if (r->man.layers)
            out_bytes += r->man.layers[L].bytes;
        in_bytes += r->ck.layers[L].bytes;
    }
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"event\":\"summary\",\"layers\":%d,\"wall_s\":%.3f,\"bytes_read\":%" PRIu64 ",\"read_gbps\":%.3f,"
             "\"setup_s\":%.3f,\"loop_s\":%.3f,\"read_wait_s\":%.3f,\"peak_rss_bytes\":%" PRIu64 ",\"plan_host_peak_bytes\":%" PRIu64
             ",\"peak_gpu_bytes\":%" PRIu64
             ",\"output_layer_bytes\":%" PRIu64 ",\"source_layer_bytes\":%" PRIu64 ",\"source_bytes\":%" PRIu64 ",\"cold_experts\":%d,\"backend\":\"%s\",\"cpu_kernels\":\"%s\",\"cpu_expf\":\"%s\"}",
             r->nlayers, wall, r->bytes_read, wall > 0 ? (double)r->bytes_read / 1e9 / wall : 0, r->setup_s, r->loop_s,
             r->read_wait_total, hwm, r->plan_host_peak, r->peak_gpu, out_bytes, in_bytes, r->ck.total_bytes, r->cold_total,
             r->be.ops->name, lwq_backend_cpu_kernels(), lwq_backend_cpu_exp());
    lwq_run_jlog(r, buf);
    if (r->o->quiet)
        return;
    LWQ_INFO("done: %d layers in %.2fs; read %.3f GB (%.2f GB/s overall, %.2fs waiting on the disk); peak RSS %.2f GB; "
             "decoder layers %.3f GB -> %.3f GB (%.1f%%); cold experts %d; output in %s",
             r->nlayers, wall, (double)r->bytes_read / 1e9, wall > 0 ? (double)r->bytes_read / 1e9 / wall : 0,
             r->read_wait_total, (double)hwm / 1e9, (double)in_bytes / 1e9, (double)out_bytes / 1e9,
             in_bytes ? 100.0 * (double)out_bytes / (double)in_bytes : 0, r->cold_total,
             r->out_dir);
}

/* The per-layer report kept in the manifest (so a resumed run writes the same report). */
char *lwq_run_layer_report(int layer, const lwq_qlayer_report *rep, const int64_t *expert_tokens)
{
    cJSON *l = cJSON_CreateObject();
    cJSON_AddNumberToObject(l, "layer", layer);
    cJSON_AddNumberToObject(l, "quantized_linears", rep->quantized);
    if (expert_tokens) {
        cJSON_AddNumberToObject(l, "cold_experts", rep->cold_experts);
        cJSON_AddNumberToObject(l, "filled_experts", rep->filled_experts);
        cJSON *t = cJSON_AddArrayToObject(l, "expert_tokens");
        for (int x = 0; x < rep->n_experts; x++)
            cJSON_AddItemToArray(t, cJSON_CreateNumber((double)expert_tokens[x]));
    }
    if (rep->zero_weights)
        cJSON_AddNumberToObject(l, "all_zero_weights", rep->zero_weights);
    if (rep->hessian_fallback)
        cJSON_AddNumberToObject(l, "local_hessian_cold_without_hessian", rep->hessian_fallback);
    if (rep->gptq_n || rep->gptq_fallback)
        lwq_run_gptq_summary(l, rep);
    char *s = cJSON_PrintUnformatted(l);
    cJSON_Delete(l);
    return s;
}
