/* engine/run/run_log.c — the --log-json file: one JSON object per line (a layer once its shard is
 * durable, GPTQ errors, the summary).  Called from the writer thread (lwq_run_log_layer, in the
 * shard's completion callback) and the engine thread; lines are whole and in order under
 * r->log_mu.  The bottom of the run's reporting: it calls nothing of the run. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/run/run_internal.h"

void lwq_run_jlog(lwq_run *r, const char *json)
{
    if (!r->jlog)
        return;
    pthread_mutex_lock(&r->log_mu);
    fprintf(r->jlog, "%s\n", json);
    fflush(r->jlog);
    pthread_mutex_unlock(&r->log_mu);
}

void lwq_run_log_layer(lwq_run *r, int L)
{
    const struct lwq_layer_log *s = &r->lstat[L];
    int nr = r->rtimes ? r->rk->size : 0;
    size_t cap = 512 + (size_t)nr * 160, k;
    char *buf = malloc(cap);
    if (!buf)
        return;
    k = (size_t)snprintf(buf, cap,
             "{\"event\":\"layer\",\"layer\":%d,\"bytes_read\":%" PRIu64 ",\"read_wait_s\":%.6f,\"forward_s\":%.6f,"
             "\"quantize_s\":%.6f,\"write_s\":%.6f,\"rss_bytes\":%" PRIu64 ",\"gpu_bytes\":%" PRIu64
             ",\"cold_experts\":%d,\"n_experts\":%d",
             L, s->bytes_read, s->read_wait_s, s->forward_s, s->quantize_s, s->write_s, s->rss, s->gpu_bytes,
             s->cold_experts, s->n_experts);
    /* a run over ranks: each rank's share of the layer (its batches' forward, the meeting of the
     * statistics, its linears' quantization, sending them to rank 0, waiting for its part of the
     * next boundary to be durable) */
    for (int q = 0; q < nr && k < cap; q++) {
        const struct lwq_rank_times *t = &r->rtimes[(size_t)L * nr + q];
        k += (size_t)snprintf(buf + k, cap - k,
                              "%s{\"rank\":%d,\"read_wait_s\":%.6f,\"forward_s\":%.6f,\"reduce_s\":%.6f,"
                              "\"quantize_s\":%.6f,\"gather_s\":%.6f,\"part_wait_s\":%.6f}%s",
                              q ? "," : ",\"ranks\":[", q, t->read_wait_s, t->forward_s, t->reduce_s, t->quantize_s,
                              t->gather_s, t->part_wait_s, q == nr - 1 ? "]" : "");
    }
    if (k < cap)
        snprintf(buf + k, cap - k, "}");
    lwq_run_jlog(r, buf);
    free(buf);
}
