/* engine/run/run_reference.c — the whole-model reference path (`--whole-model`): data outside, depth
 * inside, every layer resident.  It is what the layerwise loop of run.c must equal byte for byte
 * (tests/engine/run/test_quantize_paths.c), kept simple on purpose: no ring, no writer thread, no
 * commits (the manifest is written once, complete, by lwq_run_finish).  Engine thread only. */
#include <stdlib.h>

#include "engine/source/layersrc.h"
#include "engine/run/run_internal.h"

/* Without --qdq-next each batch goes through all layers once, observed; with it, layer L is
 * calibrated on batches that went through the already-quantized (dequantized) layers 0..L-1,
 * recomputed from the embedding. */
int lwq_run_whole(lwq_run *r, lwq_error *e)
{
    int N = r->nlayers, rc = 0;
    lwq_tlist *src = calloc((size_t)N, sizeof *src), *ov = calloc((size_t)N, sizeof *ov);
    lwq_tlist *out = calloc((size_t)N, sizeof *out);
    lwq_layer_stats *st = calloc((size_t)N, sizeof *st);
    lwq_layer_weights *lw = calloc((size_t)N, sizeof *lw);
    lwq_tlist tail = {0};
    if (!src || !ov || !out || !st || !lw) {
        rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        goto done;
    }
    for (int L = 0; L < N && rc == 0; L++) {
        if ((rc = lwq_layersrc_read(&r->ck, L, &src[L], e)) == 0)
            rc = lwq_run_stats_init(r, L, &st[L], e);
        lwq_layer_weights_init(&lw[L], &r->be, &src[L], NULL, &r->ck.cfg.names);
    }
    if (rc == 0)
        rc = lwq_layersrc_read(&r->ck, -1, &tail, e);
    lwq_layer_weights tw;
    lwq_layer_weights_init(&tw, &r->be, &tail, NULL, &r->ck.cfg.names);
    int passes = r->o->qdq_next ? N : 1;
    /* a W8A8 lm_head's input amax: the final norm of every batch's last hidden state (never with
     * --qdq-next: run_setup.c refuses the pair) */
    int head = r->o->recipe->lm_head == LWQ_LMHEAD_W8A8 && !r->o->qdq_next;
    float head_amax = 0;
    for (int pass = 0; pass < passes && rc == 0; pass++) {
        for (int b = r->b0; b < r->b1 && rc == 0; b++) {
            lwq_tensor h = lwq_run_work_view(r, b);
            rc = lwq_model_embed(&r->model, &tw.w, r->tokens[b], &h, e);
            int last = r->o->qdq_next ? pass : N - 1;
            for (int L = 0; L <= last && rc == 0; L++) {
                int observe = !r->o->qdq_next || L == pass;
                rc = lwq_model_layer_forward(&r->model, L, &lw[L].w, &r->batches[b], &h, observe ? &st[L].obs : NULL, e);
            }
            if (rc == 0 && head)
                rc = lwq_run_head_amax_batch(r, &tw.w, b, &h, &head_amax, e);
        }
        if (head && r->rk->size > 1 && (rc = lwq_ranks_agree(r->rk, rc, e)) == 0)
            rc = lwq_ranks_max_f32(r->rk, &head_amax, 1, e);
        if (rc == 0 && head) { /* no commits here: lwq_run_finish writes the manifest, complete */
            r->man.has_head_amax = 1;
            r->man.head_amax = head_amax;
        }
        int q0 = r->o->qdq_next ? pass : 0, q1 = r->o->qdq_next ? pass : N - 1;
        for (int L = q0; L <= q1 && rc == 0; L++) {
            lwq_qlayer_report rep = {0};
            rc = lwq_run_stats_done(r, &st[L], NULL, 1, 0, e);
            if (rc == 0)
                rc = lwq_qlayer_run(&r->plans[L], r->choice[L], r->o->recipe->kv, &st[L], &src[L], &r->qops, &out[L], &rep,
                                e);
            if (rc == 0 && r->o->qdq_next) {
                lwq_layer_weights_free(&lw[L]);
                if ((rc = lwq_run_qdq_overlay(r, L, &out[L], &src[L], &ov[L], e)) == 0)
                    lwq_layer_weights_init(&lw[L], &r->be, &src[L], &ov[L], &r->ck.cfg.names);
            }
            if (rc == 0) {
                int nE = r->plans[L].is_moe ? r->ck.cfg.num_experts : 0;
                r->man.layers[L].report = lwq_run_layer_report(L, &rep, nE ? st[L].expert_tokens : NULL);
                rc = r->man.layers[L].report ? lwq_run_write_shard_now(r, L, &out[L], e)
                                             : lwq_errf(e, LWQ_ENOMEM, "out of memory");
                r->cold_total += rep.cold_experts;
                lwq_run_log_gptq(r, L, &rep);
            }
            lwq_qlayer_report_free(&rep);
        }
    }
    lwq_layer_weights_free(&tw);
done:
    for (int L = 0; L < N && src; L++) {
        if (lw)
            lwq_layer_weights_free(&lw[L]);
        if (st)
            lwq_stats_free(&st[L]);
        if (out)
            lwq_tlist_free(&out[L]);
        if (ov)
            lwq_tlist_free(&ov[L]);
        lwq_tlist_free(&src[L]);
    }
    lwq_tlist_free(&tail);
    free(src);
    free(ov);
    free(out);
    free(st);
    free(lw);
    return rc;
}
