/* tests/helpers/model/fwd_fixture.c — see fwd_fixture.h. */
#include "tests/helpers/model/fwd_fixture.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/file.h"


static int get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    fwd_fixture *f = (fwd_fixture *)ctx;
    char full[512]; /* the forward asks by canonical name; the checkpoint may keep the text model
                       elsewhere (model.language_model. of a VLM wrapper) */
    if (lwq_names_full(&f->ck.cfg.names, name, full, sizeof full) >= sizeof full)
        return lwq_errf(e, LWQ_EINVAL, "tensor name %s too long", name);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&f->ck, full);
    if (!t)
        return lwq_errf(e, LWQ_ENOENT, "not in %s", f->ck.dir);
    if (!f->t[t - f->ck.tensors].data)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "fixture %s: tensor %s has %d dims: not loaded", f->ck.dir, full,
                        t->ndim);
    *out = f->t[t - f->ck.tensors];
    return 0;
}

int fwd_fixture_open(fwd_fixture *f, const char *dir, const char *config_path, lwq_error *e)
{
    const char *name = dir;
    memset(f, 0, sizeof *f);
    int rc = config_path ? lwq_ckpt_open_with_config(dir, config_path, &f->ck, e)
                         : lwq_ckpt_open(dir, &f->ck, e);
    if (rc < 0)
        return rc;
    f->n = f->ck.ntensors;
    f->t = calloc((size_t)f->n, sizeof *f->t);
    if (!f->t)
        return lwq_errf(e, LWQ_ENOMEM, "fixture %s: no memory", name);
    for (int i = 0; i < f->n; i++) {
        const lwq_ckpt_tensor *ct = &f->ck.tensors[i];
        if (ct->ndim > LWQ_TENSOR_MAX_DIMS) /* no forward weight (a VLM's Conv3d patch embedding) */
            continue;
        void *p = malloc(ct->nbytes ? ct->nbytes : 1);
        if (!p)
            return lwq_errf(e, LWQ_ENOMEM, "fixture %s: no memory for %s", name, ct->name);
        f->t[i] = lwq_tensor_view(p, ct->dtype, ct->ndim, ct->shape);
        if ((rc = lwq_ckpt_read_tensor(&f->ck, ct, p, e)) < 0)
            return rc;
    }
    f->w.get = get;
    f->w.ctx = f;
    return 0;
}

void fwd_fixture_free(fwd_fixture *f)
{
    for (int i = 0; f->t && i < f->n; i++)
        free(f->t[i].data);
    free(f->t);
    lwq_ckpt_free(&f->ck);
    memset(f, 0, sizeof *f);
}

int fwd_ref_load(const char *dir, int64_t vocab, fwd_ref *r, lwq_error *e)
{
    char path[1200];
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/reference_logits.json", dir);
    char *text;
    size_t len;
    int rc = lwq_file_read_all(path, 16u << 20, &text, &len, e);
    if (rc < 0)
        return rc;
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON *seqs = cJSON_GetObjectItem(j, "sequences"), *lg = cJSON_GetObjectItem(j, "logits");
    rc = LWQ_EFORMAT;
    if (!cJSON_IsArray(seqs) || !cJSON_IsArray(lg) ||
        cJSON_GetArraySize(seqs) != cJSON_GetArraySize(lg) || cJSON_GetArraySize(seqs) < 1)
        goto out;
    r->nseq = cJSON_GetArraySize(seqs);
    r->len = cJSON_GetArraySize(cJSON_GetArrayItem(seqs, 0));
    r->vocab = vocab;
    r->tokens = malloc((size_t)(r->nseq * r->len) * sizeof(int32_t));
    r->logits = malloc((size_t)(r->nseq * r->len * vocab) * sizeof(double));
    for (int s = 0; s < r->nseq; s++) {
        cJSON *sq = cJSON_GetArrayItem(seqs, s), *ls = cJSON_GetArrayItem(lg, s);
        if (cJSON_GetArraySize(sq) != r->len || cJSON_GetArraySize(ls) != r->len)
            goto out;
        for (int t = 0; t < r->len; t++) {
            r->tokens[s * r->len + t] = cJSON_GetArrayItem(sq, t)->valueint;
            cJSON *row = cJSON_GetArrayItem(ls, t);
            if (cJSON_GetArraySize(row) != vocab)
                goto out;
            for (int64_t v = 0; v < vocab; v++)
                r->logits[(s * r->len + t) * vocab + v] = cJSON_GetArrayItem(row, (int)v)->valuedouble;
        }
    }
    rc = 0;
out:
    cJSON_Delete(j);
    if (rc < 0) {
        lwq_errf(e, rc, "%s: sequences/logits missing or not (%d, %d, %lld) shaped", path, r->nseq,
                 r->len, (long long)vocab);
        fwd_ref_free(r);
    }
    return rc;
}

void fwd_ref_free(fwd_ref *r)
{
    free(r->tokens);
    free(r->logits);
    memset(r, 0, sizeof *r);
}
