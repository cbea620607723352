/* engine/run/run_log.c — the --log-json file: one JSON object per line (a layer once its shard is
 * durable, GPTQ errors, the summary).  Called from the writer thread (lwq_run_log_layer, in the
 * shard's completion callback) and the engine thread; lines are whole and in order under
 * r->log_mu.  The bottom of the run's reporting: it calls nothing of the run. */
#include <inttypes.h>
#include <stdio.h>

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
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"event\":\"layer\",\"layer\":%d,\"bytes_read\":%" PRIu64 ",\"read_wait_s\":%.6f,\"forward_s\":%.6f,"
             "\"quantize_s\":%.6f,\"write_s\":%.6f,\"rss_bytes\":%" PRIu64 ",\"gpu_bytes\":%" PRIu64
             ",\"cold_experts\":%d,\"n_experts\":%d}",
             L, s->bytes_read, s->read_wait_s, s->forward_s, s->quantize_s, s->write_s, s->rss, s->gpu_bytes,
             s->cold_experts, s->n_experts);
    lwq_run_jlog(r, buf);
}
