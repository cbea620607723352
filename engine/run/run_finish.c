/* engine/run/run_finish.c — step 7, after the last layer (rank 0 alone over several ranks): the
 * tail if the writer did not copy it already, the index, the config files with their
 * quantization sections, the files a server needs beside the weights, the calibration report;
 * then the manifest marked complete and the boundary files removed.  Engine thread. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/sys/file.h"
#include "engine/run/run_internal.h"
#include "io/durable.h"
#include "layout/format/export.h"

static int write_text(lwq_run *r, const char *name, const char *text, lwq_error *e)
{
    char path[PATH_MAX];
    int rc = lwq_pathf(e, path, sizeof path, "%s/%s", r->out_dir, name);
    return rc ? rc : lwq_durable_write_file(path, text, strlen(text), e);
}

static int write_index(lwq_run *r, lwq_error *e)
{
    int cap = 1024, n = 0, rc = 0;
    char **names = malloc((size_t)cap * sizeof *names);
    const char **files = malloc((size_t)cap * sizeof *files);
    char (*fnames)[40] = calloc((size_t)r->nlayers + 1, 40);
    uint64_t total = 0;
    if (!names || !files || !fnames) {
        rc = lwq_errf(e, LWQ_ENOMEM, "index: out of memory");
        goto out;
    }
    for (int L = 0; L <= r->nlayers && rc == 0; L++) {
        if (L < r->nlayers)
            lwq_shard_name(L, fnames[L]);
        else
            snprintf(fnames[L], 40, LWQ_OUT_TAIL);
        char path[PATH_MAX];
        lwq_st_file f;
        if ((rc = lwq_pathf(e, path, sizeof path, "%s/%s", r->out_dir, fnames[L])) != 0 ||
            (rc = lwq_out_st_open(path, &f, e)) != 0)
            break;
        for (int i = 0; i < f.n && rc == 0; i++) {
            if (n == cap) {
                cap *= 2;
                char **nn = realloc(names, (size_t)cap * sizeof *nn);
                const char **nf = nn ? realloc(files, (size_t)cap * sizeof *nf) : NULL;
                if (nn)
                    names = nn;
                if (nf)
                    files = nf;
                if (!nn || !nf) {
                    rc = lwq_errf(e, LWQ_ENOMEM, "index: out of memory");
                    break;
                }
            }
            names[n] = strdup(f.entries[i].name);
            files[n] = fnames[L];
            if (!names[n]) {
                rc = lwq_errf(e, LWQ_ENOMEM, "index: out of memory");
                break;
            }
            total += f.entries[i].end - f.entries[i].begin;
            n++;
        }
        lwq_st_free(&f);
    }
    char *js = NULL;
    if (rc == 0 && (rc = lwq_export_index_json((const char *const *)names, files, n, total, &js, e)) == 0)
        rc = write_text(r, LWQ_OUT_INDEX, js, e);
    free(js);
out:
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(files);
    free(fnames);
    return rc;
}

static int write_configs(lwq_run *r, lwq_error *e)
{
    int total = 0;
    for (int L = 0; L < r->nlayers; L++)
        total += r->plans[L].nlinears;
    /* +2: a quantized lm_head, a quantized token embedding */
    lwq_export_module *mods = calloc((size_t)total + 2, sizeof *mods);
    char lm[96], em[LWQ_ARCH_NAME_MAX];
    /* +1: the qwen3_next MTP block (mtp.*), kept in the tail and unquantized; +1: the token
     * embedding; +1: a VLM wrapper's vision tower */
    char **extra = calloc((size_t)(r->ck.nlayers > r->nlayers ? r->ck.nlayers - r->nlayers : 0) + 3, sizeof *extra);
    /* the in-memory experts module of each routed expert, for a family that fuses them */
    char **owner = calloc((size_t)total + 2, sizeof *owner);
    int nextra = 0, nextra_mtp = 0, k = 0, rc = 0;
    int fused = r->ck.cfg.family && r->ck.cfg.family->fused_experts;
    if (!mods || !extra || !owner) {
        rc = lwq_errf(e, LWQ_ENOMEM, "configs: out of memory");
        goto out;
    }
    /* in Model Optimizer's module order (the config groups are numbered by first appearance): the
     * embedding (written weight-only by lwq_run_write_tail; not excluded then), the layers, lm_head */
    if (r->embed) {
        lwq_names_full(&r->ck.cfg.names, "model.embed_tokens", em, sizeof em);
        mods[k].name = em;
        mods[k].format = LWQ_QFMT_NVFP4;
        mods[k++].weight_only = 1;
    }
    for (int L = 0; L < r->nlayers; L++)
        for (int i = 0; i < r->plans[L].nlinears; i++) {
            const lwq_arch_linear *l = &r->plans[L].linears[i];
            const char *x = fused && (l->role == LWQ_ROLE_EXPERT_GATE || l->role == LWQ_ROLE_EXPERT_UP || l->role == LWQ_ROLE_EXPERT_DOWN) ? strstr(l->name, ".experts.") : NULL;
            if (x && !(owner[k] = strndup(l->name, (size_t)(x - l->name) + strlen(".experts")))) {
                rc = lwq_errf(e, LWQ_ENOMEM, "configs: out of memory");
                goto out;
            }
            mods[k].listed_as = owner[k];
            mods[k].name = r->plans[L].linears[i].name;
            mods[k].format = r->choice[L][i].format;
            mods[k++].weight_only = r->choice[L][i].weight_only;
        }
    if (r->o->recipe->lm_head) { /* written weight-only by lwq_run_write_tail */
        lwq_names_full(&r->ck.cfg.names, "lm_head", lm, sizeof lm);
        mods[k].name = lm;
        /* weight-only FP8 is listed as FP8 (Model Optimizer 0.47's get_quantization_format does not
         * look at the input quantizer for FP8): its config group has input_activations, and the
         * checkpoint no input_scale for it */
        int fp8 = r->o->recipe->lm_head == LWQ_LMHEAD_FP8 || r->o->recipe->lm_head == LWQ_LMHEAD_W8A8;
        mods[k].format = fp8 ? LWQ_QFMT_FP8 : LWQ_QFMT_NVFP4;
        mods[k++].weight_only = !fp8;
    }
    for (int L = r->nlayers; L < r->ck.nlayers; L++) {
        char g[96], canon[48];
        snprintf(canon, sizeof canon, "model.layers.%d*", L);
        lwq_names_full(&r->ck.cfg.names, canon, g, sizeof g);
        if (!(extra[nextra++] = strdup(g))) {
            rc = lwq_errf(e, LWQ_ENOMEM, "configs: out of memory");
            goto out;
        }
    }
    {
        char mtp[64];
        size_t np = lwq_names_full(&r->ck.cfg.names, "mtp.", mtp, sizeof mtp);
        for (int i = 0; i < r->ck.tail.n; i++)
            if (!strncmp(r->ck.tensors[r->ck.tail.idx[i]].name, mtp, np)) {
                mtp[np - 1] = '*'; /* "mtp*": a prefix glob at the dot boundary */
                if (!(extra[nextra++] = strdup(mtp))) {
                    rc = lwq_errf(e, LWQ_ENOMEM, "configs: out of memory");
                    goto out;
                }
                break;
            }
    }
    nextra_mtp = nextra; /* the MTP blocks: all a MIXED_PRECISION config excludes */
    /* a wrapper's own modules (the vision tower "model.visual."): Model Optimizer keeps them
     * unquantized and excludes them as one prefix glob, "model.visual*" */
    if (r->ck.cfg.passthrough) {
        const char *p = r->ck.cfg.passthrough;
        size_t np = strlen(p);
        for (int i = 0; i < r->ck.tail.n; i++)
            if (!strncmp(r->ck.tensors[r->ck.tail.idx[i]].name, p, np)) {
                char g[64];
                snprintf(g, sizeof g, "%.*s*", (int)(np && p[np - 1] == '.' ? np - 1 : np), p);
                if (!(extra[nextra++] = strdup(g))) {
                    rc = lwq_errf(e, LWQ_ENOMEM, "configs: out of memory");
                    goto out;
                }
                break;
            }
    }
    /* Model Optimizer lists the token embedding too: export_hf_checkpoint excludes every module
     * it wrapped with quantizers and left disabled, and it wraps nn.Embedding (disabled by its
     * default_disabled_quantizers unit, parent_class nn.Embedding) */
    char emb[96];
    lwq_names_full(&r->ck.cfg.names, "model.embed_tokens.weight", emb, sizeof emb);
    for (int i = 0; !r->embed && i < r->ck.tail.n; i++) {
        const char *t = r->ck.tensors[r->ck.tail.idx[i]].name;
        size_t n = strlen(t), suf = strlen("embed_tokens.weight");
        /* the embedding where the names put it (nemotron_h: backbone.embedding(s)), or any
         * *.embed_tokens.weight */
        if (!strcmp(t, emb) ||
            (n >= suf && !strcmp(t + n - suf, "embed_tokens.weight") && (n == suf || t[n - suf - 1] == '.'))) {
            if (!(extra[nextra++] = strndup(t, n - strlen(".weight")))) {
                rc = lwq_errf(e, LWQ_ENOMEM, "configs: out of memory");
                goto out;
            }
            break;
        }
    }
    lwq_export_quant q = {mods, k, (const char *const *)extra, nextra, r->o->recipe->kv, &r->ck.cfg.names,
                          nextra_mtp};
    char *hq = NULL, *cj = NULL;
    if ((rc = lwq_export_hf_quant_config(&q, &hq, e)) == 0 && (rc = lwq_export_config_json(r->ck.cfg.text, r->ck.cfg.text_len, &q, &cj, e)) == 0 &&
        (rc = write_text(r, LWQ_OUT_HF_QUANT_CONFIG, hq, e)) == 0)
        rc = write_text(r, LWQ_OUT_CONFIG, cj, e);
    free(hq);
    free(cj);
out:
    for (int i = 0; i < nextra; i++)
        free(extra[i]);
    free(extra);
    for (int i = 0; owner && i < total + 2; i++)
        free(owner[i]);
    free(owner);
    free(mods);
    return rc;
}

/* Files a server needs beside the weights, copied as they are when present. */
static int copy_side_files(lwq_run *r, lwq_error *e)
{
    static const char *const names[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
                                        "added_tokens.json", "chat_template.jinja", "chat_template.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[PATH_MAX], *buf;
        size_t len;
        int rc = lwq_pathf(e, src, sizeof src, "%s/%s", r->o->model_dir, names[i]);
        if (rc)
            return rc;
        if (access(src, F_OK) != 0)
            continue;
        if ((rc = lwq_file_read_all(src, 256u << 20, &buf, &len, e)) != 0)
            return rc;
        char dst[PATH_MAX];
        if ((rc = lwq_pathf(e, dst, sizeof dst, "%s/%s", r->out_dir, names[i])) == 0)
            rc = lwq_durable_write_file(dst, buf, len, e);
        free(buf);
        if (rc)
            return rc;
    }
    return 0;
}

static int write_report(lwq_run *r, lwq_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "recipe", r->o->recipe->name);
    cJSON_AddNumberToObject(root, "calibration_samples", r->o->calib->n);
    cJSON_AddNumberToObject(root, "calibration_tokens", (double)r->calib_tokens);
    cJSON_AddNumberToObject(root, "batch_size", r->o->batch_size);
    cJSON_AddBoolToObject(root, "padding_excluded", !r->o->include_padding);
    cJSON_AddBoolToObject(root, "calib_all_experts", r->o->all_experts);
    cJSON *layers = cJSON_AddArrayToObject(root, "layers");
    int cold_total = 0;
    for (int L = 0; L < r->nlayers; L++) {
        cJSON *l = r->man.layers[L].report ? cJSON_Parse(r->man.layers[L].report) : NULL;
        if (!l)
            l = cJSON_CreateObject();
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(l, "cold_experts");
        if (cJSON_IsNumber(c))
            cold_total += c->valueint;
        cJSON_AddItemToArray(layers, l);
    }
    cJSON_AddNumberToObject(root, "cold_experts_total", cold_total);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s)
        return lwq_errf(e, LWQ_ENOMEM, "report: out of memory");
    int rc = write_text(r, LWQ_OUT_REPORT, s, e);
    free(s);
    return rc;
}

int lwq_run_finish(lwq_run *r, lwq_error *e)
{
    int rc;
    if ((!r->tail_written && (rc = lwq_run_write_tail(r, e)) != 0) || (rc = write_index(r, e)) != 0 || (rc = write_configs(r, e)) != 0 ||
        (rc = copy_side_files(r, e)) != 0)
        return rc;
    if ((rc = write_report(r, e)) != 0)
        return rc;
    r->man.committed = r->nlayers;
    r->man.complete = 1;
    free(r->man.parts);
    r->man.parts = NULL;
    r->man.nparts = 0;
    r->man.boundary_file[0] = 0;
    r->man.boundary_bytes = r->man.boundary_xxh64 = 0;
    if ((rc = lwq_manifest_save(r->manifest_path, &r->man, e)) != 0)
        return rc;
    for (int i = 0; i < 2; i++) {
        char p[PATH_MAX];
        if (lwq_pathf(e, p, sizeof p, "%s/" LWQ_RESUME_BOUNDARY_FMT, r->resume_dir, i) == 0 && (rc = lwq_durable_unlink(p, e)) != 0)
            return rc;
    }
    free(r->man.parts); /* the complete manifest names none: every part file goes */
    r->man.parts = NULL;
    r->man.nparts = 0;
    return lwq_run_remove_stale_parts(r, e);
}
