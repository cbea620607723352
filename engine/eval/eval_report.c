/* engine/eval/eval_report.c — `lwq eval`'s memory plan, its --json object and its table for people. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eval/eval.h"
#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"

/* ---- plan ------------------------------------------------------------------------------------- */

static int64_t rows_of(const lwq_calib_set *c, int B, int64_t *tokens)
{
    int64_t rows = 0;
    for (int s0 = 0; c && s0 < c->n; s0 += B) {
        int64_t seq = 0;
        for (int i = s0; i < c->n && i < s0 + B; i++) {
            seq = c->len[i] > seq ? c->len[i] : seq;
            *tokens += c->len[i];
        }
        rows += (c->n - s0 < B ? c->n - s0 : B) * seq;
    }
    return rows;
}

static int64_t max_batch_rows(const lwq_calib_set *c, int B)
{
    int64_t m = 0;
    for (int s0 = 0; c && s0 < c->n; s0 += B) {
        int64_t seq = 0;
        for (int i = s0; i < c->n && i < s0 + B; i++)
            seq = c->len[i] > seq ? c->len[i] : seq;
        int64_t r = (c->n - s0 < B ? c->n - s0 : B) * seq;
        m = r > m ? r : m;
    }
    return m;
}

int lwq_eval_plan(const lwq_eval_opts *o, lwq_mem_plan *p, lwq_error *e)
{
    lwq_ckpt ck;
    int rc = lwq_ckpt_open(o->model_dir, &ck, e);
    if (rc)
        return rc;
    /* ring, scratch and process as a quantize run over the eval rows would have them */
    lwq_recipe r;
    const lwq_recipe *rec = NULL;
    for (int c = 0; c < o->ncand && !rec; c++)
        rec = o->cand[c].recipe;
    int own = 0;
    if (!rec) {
        if ((rc = lwq_recipe_preset("nvfp4", &r, e)) != 0) {
            lwq_ckpt_free(&ck);
            return rc;
        }
        rec = &r;
        own = 1;
    }
    lwq_quantize_opts q = {0};
    q.model_dir = o->model_dir;
    q.recipe = rec;
    q.calib = o->data;
    q.batch_size = o->batch_size > 0 ? o->batch_size : 8;
    q.device = o->device;
    q.prefetch = o->prefetch;
    rc = lwq_quantize_plan_ckpt(&q, &ck, p, e);
    if (own)
        lwq_recipe_free(&r);
    if (rc == 0) {
        const lwq_model_config *c = &ck.cfg;
        size_t act = lwq_dtype_size(c->dtype);
        int B = q.batch_size, in_memory = !own;
        int64_t dt = 0, ct = 0, drows = rows_of(o->data, B, &dt), crows = in_memory ? rows_of(o->calib, B, &ct) : 0;
        p->calib_tokens = dt;
        p->calib_rows = drows;
        /* one boundary per stream: source + candidates on the eval rows, the calibration stream */
        p->boundary_bytes = ((uint64_t)(1 + o->ncand) * (uint64_t)drows + (uint64_t)crows) * (uint64_t)c->hidden_size * act;
        /* one candidate layer at a time: its quantized tensors and their f32 dequantized weights */
        uint64_t lin = 0, max_in = (uint64_t)c->hidden_size;
        for (int L = 0; L < c->num_hidden_layers; L++) {
            lwq_arch_layer plan;
            if (lwq_arch_layer_plan(c, L, &plan, NULL) != 0)
                continue;
            uint64_t n = 0;
            for (int i = 0; i < plan.nlinears; i++) {
                n += (uint64_t)plan.linears[i].out_features * (uint64_t)plan.linears[i].in_features;
                max_in = (uint64_t)plan.linears[i].in_features > max_in ? (uint64_t)plan.linears[i].in_features : max_in;
            }
            lin = n > lin ? n : lin;
            lwq_arch_layer_free(&plan);
        }
        p->writer_bytes = lin * 4 + p->largest_layer_bytes;
        /* every stream's model keeps its own forward scratch (the estimate above is one batch of
         * one stream); each candidate also keeps its emulated GEMM input (f32, one batch) and the
         * input it was computed from (activation dtype) */
        p->workspace_bytes *= (uint64_t)(1 + o->ncand + in_memory);
        p->workspace_bytes += (uint64_t)o->ncand * (uint64_t)max_batch_rows(o->data, B) * max_in * (4 + act);
        /* the head: every model's tail (embedding, norm, lm_head) and two chunks of f32 logits */
        uint64_t ntail = 1;
        for (int k = 0; k < o->ncand; k++)
            ntail += o->cand[k].recipe == NULL;
        p->embed_bytes = ntail * ck.tail.bytes + 2 * 64 * (uint64_t)c->vocab_size * 4;
        uint64_t ring = (uint64_t)p->slots * p->slot_bytes;
        p->host_peak = p->process_bytes + ring + p->boundary_bytes + p->workspace_bytes + p->writer_bytes +
                       p->stats_bytes + p->embed_bytes;
        p->output_bytes = 0;
    }
    lwq_ckpt_free(&ck);
    return rc;
}

static double gb(uint64_t b) { return (double)b / 1e9; }

void lwq_eval_plan_print(const lwq_mem_plan *p, const lwq_eval_opts *o, FILE *fp)
{
    fprintf(fp,
            "plan: source %.3f GB; largest layer %d holds %.3f GB; %d candidate(s)\n"
            "plan: eval %lld tokens in %lld rows (batch %d)\n"
            "plan: host peak %.3f GB = process %.3f GB + ring %d x %.3f GB + boundaries %.3f GB (%d streams) + scratch "
            "%.3f GB + candidate layer %.3f GB + statistics %.3f GB + head %.3f GB\n",
            gb(p->source_bytes), p->largest_layer, gb(p->largest_layer_bytes), o->ncand, (long long)p->calib_tokens,
            (long long)p->calib_rows, o->batch_size > 0 ? o->batch_size : 8, gb(p->host_peak), gb(p->process_bytes),
            p->slots, gb(p->slot_bytes), gb(p->boundary_bytes), 1 + o->ncand + (o->calib != NULL),
            gb(p->workspace_bytes), gb(p->writer_bytes), gb(p->stats_bytes), gb(p->embed_bytes));
}

/* ---- --json ----------------------------------------------------------------------------------- */

int lwq_eval_write_json(const lwq_eval_result *r, const char *path, lwq_error *e)
{
    cJSON *root = cJSON_CreateObject(), *cands = NULL;
    int ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "model", r->model);
    ok = ok && cJSON_AddNumberToObject(root, "tokens", (double)r->tokens);
    ok = ok && cJSON_AddNumberToObject(root, "eval_tokens", (double)r->eval_tokens);
    ok = ok && cJSON_AddNumberToObject(root, "ppl_src", r->ppl_src);
    ok = ok && cJSON_AddNumberToObject(root, "nll_src", r->nll_src);
    ok = ok && cJSON_AddBoolToObject(root, "weights_only", r->weights_only);
    ok = ok && cJSON_AddNumberToObject(root, "wall_s", r->wall_s);
    ok = ok && cJSON_AddNumberToObject(root, "peak_rss_bytes", (double)r->peak_rss_bytes);
    ok = ok && cJSON_AddNumberToObject(root, "calib_forward_s", r->calib_s);
    ok = ok && cJSON_AddNumberToObject(root, "src_forward_s", r->forward_src_s);
    ok = ok && cJSON_AddNumberToObject(root, "quantize_s", r->quantize_s);
    ok = ok && cJSON_AddNumberToObject(root, "cand_forward_s", r->forward_q_s);
    ok = ok && (cands = cJSON_AddArrayToObject(root, "candidates")) != NULL;
    for (int c = 0; ok && c < r->ncand; c++) {
        const lwq_eval_cand_result *cr = &r->c[c];
        cJSON *o = cJSON_CreateObject(), *layers = NULL;
        ok = o && cJSON_AddItemToArray(cands, o);
        ok = ok && cJSON_AddStringToObject(o, "name", cr->name);
        ok = ok && cJSON_AddNumberToObject(o, "kl", cr->kl);
        ok = ok && cJSON_AddNumberToObject(o, "top1_agree", cr->top1_agree);
        ok = ok && cJSON_AddNumberToObject(o, "ppl", cr->ppl);
        ok = ok && cJSON_AddNumberToObject(o, "nll", cr->nll);
        ok = ok && cJSON_AddNumberToObject(o, "bits_per_weight", cr->bits_per_weight);
        ok = ok && cJSON_AddNumberToObject(o, "output_bytes", (double)cr->output_bytes);
        ok = ok && cJSON_AddNumberToObject(o, "quantized_linears", cr->quantized_linears);
        ok = ok && (layers = cJSON_AddArrayToObject(o, "layers")) != NULL;
        for (int L = 0; ok && L < r->nlayers; L++) {
            const lwq_eval_layer *ly = &cr->layers[L];
            cJSON *l = cJSON_CreateObject(), *w = NULL;
            ok = l && cJSON_AddItemToArray(layers, l);
            ok = ok && cJSON_AddNumberToObject(l, "layer", L);
            ok = ok && cJSON_AddNumberToObject(l, "rel_mse", ly->rel_mse);
            ok = ok && cJSON_AddNumberToObject(l, "max_abs", ly->max_abs);
            if (ok && ly->nworst) {
                ok = (w = cJSON_AddArrayToObject(l, "worst_experts")) != NULL;
                for (int k = 0; ok && k < ly->nworst; k++) {
                    cJSON *x = cJSON_CreateObject();
                    ok = x && cJSON_AddItemToArray(w, x);
                    ok = ok && cJSON_AddNumberToObject(x, "expert", ly->worst[k].expert);
                    ok = ok && cJSON_AddNumberToObject(x, "rel_err", ly->worst[k].rel_err);
                    ok = ok && cJSON_AddNumberToObject(x, "tokens", (double)ly->worst[k].tokens);
                }
            }
        }
    }
    char *s = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!s)
        return lwq_errf(e, LWQ_ENOMEM, "--json: out of memory");
    FILE *fp = fopen(path, "w");
    int rc = 0;
    if (!fp)
        rc = lwq_errsys(e, -errno, "%s: cannot create", path);
    else {
        fputs(s, fp);
        fputc('\n', fp);
        if (fclose(fp) != 0)
            rc = lwq_errsys(e, -errno, "%s: cannot write", path);
    }
    free(s);
    return rc;
}

/* ---- the table -------------------------------------------------------------------------------- */

void lwq_eval_print_table(const lwq_eval_result *r, FILE *fp)
{
    fprintf(fp, "eval of %s: %lld next-token predictions (%lld tokens); source perplexity %.4f\n", r->model,
            (long long)r->tokens, (long long)r->eval_tokens, r->ppl_src);
    fprintf(fp, "%s\n\n", r->weights_only ? "weights only: dequantized weights; activations and KV cache unquantized"
                                            : "activations and KV cache quantized as the serving engine does");
    fprintf(fp, "%-28s %12s %10s %10s %9s %6s %10s %11s\n", "candidate", "KL (nats)", "top-1", "ppl", "ppl/src",
            "bits/w", "size (MB)", "worst layer");
    for (int c = 0; c < r->ncand; c++) {
        const lwq_eval_cand_result *cr = &r->c[c];
        int wl = 0;
        for (int L = 1; L < r->nlayers; L++)
            if (cr->layers[L].rel_mse > cr->layers[wl].rel_mse)
                wl = L;
        fprintf(fp, "%-28s %12.6f %9.2f%% %10.4f %9.4f %6.2f %10.3f %5d (%.2g)\n", cr->name, cr->kl,
                100.0 * cr->top1_agree, cr->ppl, r->ppl_src > 0 ? cr->ppl / r->ppl_src : 0, cr->bits_per_weight,
                (double)cr->output_bytes / 1e6, wl, cr->layers[wl].rel_mse);
    }
    fprintf(fp, "\nrelative MSE of the hidden state after each layer (||h_q - h||^2 / ||h||^2):\n%-6s", "layer");
    for (int c = 0; c < r->ncand; c++)
        fprintf(fp, " %14.14s", r->c[c].name);
    fprintf(fp, "\n");
    for (int L = 0; L < r->nlayers; L++) {
        fprintf(fp, "%-6d", L);
        for (int c = 0; c < r->ncand; c++)
            fprintf(fp, " %14.4g", r->c[c].layers[L].rel_mse);
        fprintf(fp, "\n");
        for (int c = 0; c < r->ncand; c++) {
            const lwq_eval_layer *ly = &r->c[c].layers[L];
            if (!ly->nworst)
                continue;
            fprintf(fp, "       %s worst experts (rel err, tokens):", r->c[c].name);
            for (int k = 0; k < ly->nworst; k++)
                fprintf(fp, " %d (%.3g, %lld)", ly->worst[k].expert, ly->worst[k].rel_err, (long long)ly->worst[k].tokens);
            fprintf(fp, "\n");
        }
    }
    if (r->ncand > 1) {
        int best = 0;
        for (int c = 1; c < r->ncand; c++)
            if (r->c[c].kl < r->c[best].kl)
                best = c;
        fprintf(fp, "\nlowest KL: %s\n", r->c[best].name);
    }
}
