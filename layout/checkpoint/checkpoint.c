/* layout/checkpoint/checkpoint.c — a checkpoint directory as one validated tensor table (contract in
 * checkpoint.h). */
#include "layout/checkpoint/checkpoint.h"

#include "core/sys/file.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_MAX_BYTES (256u << 20)
#define PATH_CAP 4096

static const char INDEX_SUFFIX[] = ".safetensors.index.json";

int lwq_path_in_dir(const char *dir, const char *fname, char *out, size_t cap, lwq_error *e)
{
    if (!fname[0] || !strcmp(fname, ".") || !strcmp(fname, "..") || strchr(fname, '/') ||
        strchr(fname, '\\'))
        return lwq_errf(e, LWQ_EFORMAT,
                        "%s: file name \"%s\" from the index is not a plain file name inside the "
                        "model directory",
                        dir, fname);
    for (const unsigned char *p = (const unsigned char *)fname; *p; p++)
        if (*p < 0x20)
            return lwq_errf(e, LWQ_EFORMAT, "%s: file name from the index holds a control character",
                            dir);
    int n = snprintf(out, cap, "%s/%s", dir, fname);
    if (n < 0 || (size_t)n >= cap)
        return lwq_errf(e, LWQ_EINVAL, "%s/%s: path too long", dir, fname);
    return 0;
}

/* Whatever its type: a FIFO or directory by that name is then refused when opened, by name,
 * instead of being passed over for another file. */
static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

void lwq_ckpt_free(lwq_ckpt *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nfiles; i++)
        lwq_st_free(&c->files[i]);
    free(c->files);
    free(c->tensors);
    for (int i = 0; i < c->nowned; i++)
        free(c->owned_names[i]);
    free(c->owned_names);
    for (int i = 0; i < c->nlayers; i++)
        free(c->layers[i].idx);
    free(c->layers);
    free(c->tail.idx);
    lwq_config_free(&c->cfg);
    free(c->dir);
    memset(c, 0, sizeof *c);
}

/* Find the weights: model.safetensors first (as transformers), then the index. `which` gets the
 * file name; *is_index says which kind. */
static int find_weights(const char *dir, char *which, size_t cap, int *is_index, lwq_error *e)
{
    char p[PATH_CAP];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (file_exists(p)) {
        snprintf(which, cap, "model.safetensors");
        *is_index = 0;
        return 0;
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    if (file_exists(p)) {
        snprintf(which, cap, "model.safetensors.index.json");
        *is_index = 1;
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d)
        return lwq_errsys(e, -errno, "%s: open directory", dir);
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name), s = sizeof INDEX_SUFFIX - 1;
        if (n <= s || strcmp(de->d_name + n - s, INDEX_SUFFIX) != 0)
            continue;
        if (found++) {
            int rc = lwq_errf(e, LWQ_EFORMAT, "%s: more than one index file (%s and %s)", dir,
                              which, de->d_name);
            closedir(d);
            return rc;
        }
        snprintf(which, cap, "%s", de->d_name);
    }
    closedir(d);
    if (!found)
        return lwq_errf(e, LWQ_ENOENT,
                        "%s: no model.safetensors and no *.safetensors.index.json in the directory",
                        dir);
    *is_index = 1;
    return 0;
}


typedef struct ientry {
    const char *name, *file;
    int fidx;
} ientry;

static int cmp_ientry(const void *a, const void *b)
{
    return strcmp(((const ientry *)a)->name, ((const ientry *)b)->name);
}

static int find_ientry(const ientry *v, int n, const char *name)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(v[mid].name, name);
        if (!c)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int add_file(lwq_ckpt *c, const char *path, lwq_error *e)
{
    lwq_st_file *nf = realloc(c->files, ((size_t)c->nfiles + 1) * sizeof *nf);
    if (!nf)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    c->files = nf;
    int rc = lwq_st_open(path, &c->files[c->nfiles], e);
    if (rc != 0)
        return rc;
    return c->nfiles++;
}

static int add_tensor(lwq_ckpt *c, int file, int entry)
{
    const lwq_st_file *f = &c->files[file];
    const lwq_st_entry *s = &f->entries[entry];
    lwq_ckpt_tensor *t = &c->tensors[c->ntensors++];
    t->name = s->name;
    t->file = file;
    t->dtype = s->dtype;
    t->ndim = s->ndim;
    memcpy(t->shape, s->shape, sizeof t->shape);
    t->offset = f->data_start + s->begin;
    t->nbytes = s->end - s->begin;
    t->layer = -1;
    return 0;
}

static int load_index(lwq_ckpt *c, const char *index_name, lwq_error *e)
{
    char ipath[PATH_CAP], spath[PATH_CAP];
    snprintf(ipath, sizeof ipath, "%s/%s", c->dir, index_name);
    char *text = NULL;
    int rc = lwq_file_read_all(ipath, INDEX_MAX_BYTES, &text, NULL, e);
    if (rc != 0)
        return rc;
    ientry *ent = NULL;
    char **fnames = NULL;
    int nf = 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root)
        return lwq_errf(e, LWQ_EFORMAT, "%s: not valid JSON", ipath);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: missing \"weight_map\" object", ipath);
        goto out;
    }
    int n = cJSON_GetArraySize(wm);
    ent = calloc((size_t)n + 1, sizeof *ent);
    fnames = calloc((size_t)n + 1, sizeof *fnames);
    if (!ent || !fnames) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory for %d entries", ipath, n);
        goto out;
    }
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, wm)
    {
        if (!cJSON_IsString(it)) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: weight_map entry '%s' is not a file name string",
                          ipath, it->string);
            goto out;
        }
        if (lwq_path_in_dir(c->dir, it->valuestring, spath, sizeof spath, NULL) != 0) {
            rc = lwq_errf(e, LWQ_EFORMAT,
                          "%s: tensor '%s' maps to \"%s\", which is not a plain file name inside "
                          "the model directory",
                          ipath, it->string, it->valuestring);
            goto out;
        }
        ent[k].name = it->string;
        ent[k].file = it->valuestring;
        /* Shards usually come in runs, so check the last file first. */
        int fi = -1;
        if (nf && !strcmp(fnames[nf - 1], it->valuestring))
            fi = nf - 1;
        for (int j = 0; fi < 0 && j < nf; j++)
            if (!strcmp(fnames[j], it->valuestring))
                fi = j;
        if (fi < 0) {
            fi = nf;
            fnames[nf++] = it->valuestring;
        }
        ent[k++].fidx = fi;
    }
    qsort(ent, (size_t)n, sizeof *ent, cmp_ientry);
    for (int i = 1; i < n; i++) {
        if (!strcmp(ent[i - 1].name, ent[i].name)) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s' is listed twice", ipath, ent[i].name);
            goto out;
        }
    }
    /* Open every shard; c->files[j] is fnames[j]. */
    for (int j = 0; j < nf; j++) {
        lwq_path_in_dir(c->dir, fnames[j], spath, sizeof spath, NULL);
        if (!file_exists(spath)) {
            const char *who = "?";
            for (int i = 0; i < n; i++)
                if (ent[i].fidx == j) {
                    who = ent[i].name;
                    break;
                }
            rc = lwq_errf(e, LWQ_ENOENT, "%s: names file \"%s\" (for tensor '%s'), which does not exist",
                          ipath, fnames[j], who);
            goto out;
        }
        if ((rc = add_file(c, spath, e)) < 0)
            goto out;
        rc = 0;
    }
    int total = 0;
    for (int j = 0; j < nf; j++)
        total += c->files[j].n;
    c->tensors = calloc((size_t)total + 1, sizeof *c->tensors);
    if (!c->tensors) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", ipath);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const lwq_st_file *f = &c->files[ent[i].fidx];
        int si = lwq_st_find(f, ent[i].name);
        if (si < 0) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s' is listed in shard \"%s\" but absent from it",
                          ipath, ent[i].name, ent[i].file);
            goto out;
        }
        add_tensor(c, ent[i].fidx, si);
    }
    /* Every shard tensor must be the one the index points at, or the index is stale. */
    for (int j = 0; j < nf; j++) {
        for (int s = 0; s < c->files[j].n; s++) {
            const char *nm = c->files[j].entries[s].name;
            int ii = find_ientry(ent, n, nm);
            if (ii < 0 || ent[ii].fidx != j) {
                rc = lwq_errf(e, LWQ_EFORMAT,
                              "%s: shard \"%s\" holds tensor '%s', which the index %s",
                              ipath, fnames[j], nm,
                              ii < 0 ? "does not list" : "maps to another shard");
                goto out;
            }
        }
    }
out:
    free(ent);
    free(fnames);
    cJSON_Delete(root);
    return rc;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const lwq_ckpt_tensor *)a)->name, ((const lwq_ckpt_tensor *)b)->name);
}

static int has_tensor(const lwq_ckpt *c, const char *name)
{
    for (int i = 0; i < c->ntensors; i++)
        if (!strcmp(c->tensors[i].name, name))
            return 1;
    return 0;
}

static int build_layers(lwq_ckpt *c, lwq_error *e)
{
    qsort(c->tensors, (size_t)c->ntensors, sizeof *c->tensors, cmp_tensor_name);
    /* nemotron_h: the published checkpoints name the embedding backbone.embeddings, transformers'
     * save_pretrained writes backbone.embedding (its conversion mapping renames either on load) */
    char emb[64];
    snprintf(emb, sizeof emb, "%s.weight", c->cfg.names.embed);
    if (!strcmp(c->cfg.names.embed, "backbone.embeddings") && !has_tensor(c, emb) &&
        has_tensor(c, "backbone.embedding.weight"))
        snprintf(c->cfg.names.embed, sizeof c->cfg.names.embed, "backbone.embedding");
    int maxl = -1;
    for (int i = 0; i < c->ntensors; i++) {
        lwq_ckpt_tensor *t = &c->tensors[i];
        int l = -1;
        char canon[600];
        if (lwq_names_canon(&c->cfg.names, t->name, canon, sizeof canon))
            l = lwq_tensor_layer_index(canon);
        t->layer = l;
        if (l > maxl)
            maxl = l;
        c->total_bytes += t->nbytes;
    }
    c->nlayers = maxl + 1;
    c->layers = calloc((size_t)c->nlayers + 1, sizeof *c->layers);
    if (!c->layers)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", c->dir);
    for (int i = 0; i < c->ntensors; i++) {
        int l = c->tensors[i].layer;
        (l < 0 ? &c->tail : &c->layers[l])->n++;
    }
    for (int l = 0; l <= c->nlayers; l++) {
        lwq_ckpt_layer *L = l < c->nlayers ? &c->layers[l] : &c->tail;
        L->idx = malloc(((size_t)L->n + 1) * sizeof *L->idx);
        if (!L->idx)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", c->dir);
        L->n = 0;
    }
    for (int i = 0; i < c->ntensors; i++) {
        int l = c->tensors[i].layer;
        lwq_ckpt_layer *L = l < 0 ? &c->tail : &c->layers[l];
        L->idx[L->n++] = i;
        L->bytes += c->tensors[i].nbytes;
    }
    for (int l = 0; l < c->cfg.num_hidden_layers; l++) {
        if (l >= c->nlayers || c->layers[l].n == 0)
            return lwq_errf(e, LWQ_EFORMAT,
                            "%s: config.json declares %d decoder layers, but no tensor belongs to "
                            "layer %d (expected names %slayers.%d.*)",
                            c->dir, c->cfg.num_hidden_layers, l, c->cfg.names.root, l);
    }
    return 0;
}

int lwq_ckpt_open_with_config(const char *dir, const char *config_path, lwq_ckpt *c, lwq_error *e)
{
    memset(c, 0, sizeof *c);
    char p[PATH_CAP], which[512];
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    c->dir = malloc(dl + 1);
    if (!c->dir)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", dir);
    memcpy(c->dir, dir, dl);
    c->dir[dl] = 0;
    if (dl + 600 > PATH_CAP) {
        int rc = lwq_errf(e, LWQ_EINVAL, "%s: path too long", c->dir);
        lwq_ckpt_free(c);
        return rc;
    }
    if (!config_path) {
        snprintf(p, sizeof p, "%s/config.json", c->dir);
        config_path = p;
    }
    int rc = lwq_config_load(config_path, &c->cfg, e);
    if (rc != 0)
        goto fail;
    int is_index = 0;
    if ((rc = find_weights(c->dir, which, sizeof which, &is_index, e)) != 0)
        goto fail;
    if (is_index) {
        rc = load_index(c, which, e);
    } else {
        snprintf(p, sizeof p, "%s/%s", c->dir, which);
        rc = add_file(c, p, e);
        if (rc >= 0) {
            c->tensors = calloc((size_t)c->files[0].n + 1, sizeof *c->tensors);
            if (!c->tensors)
                rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", p);
            else
                for (int i = 0; i < c->files[0].n; i++)
                    add_tensor(c, 0, i);
        }
    }
    if (rc < 0)
        goto fail;
    if ((rc = lwq_ckpt_split_fused_experts(c, e)) != 0 || (rc = lwq_ckpt_rename_kimi(c, e)) != 0 ||
        (rc = build_layers(c, e)) != 0)
        goto fail;
    return 0;
fail:
    lwq_ckpt_free(c);
    return rc;
}

int lwq_ckpt_open(const char *dir, lwq_ckpt *c, lwq_error *e)
{
    return lwq_ckpt_open_with_config(dir, NULL, c, e);
}

const lwq_ckpt_tensor *lwq_ckpt_find(const lwq_ckpt *c, const char *name)
{
    int lo = 0, hi = c->ntensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int k = strcmp(c->tensors[mid].name, name);
        if (!k)
            return &c->tensors[mid];
        if (k < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const lwq_ckpt_tensor *lwq_ckpt_find_in(const lwq_ckpt *c, const char *module, const char *suffix)
{
    char n[640];
    if ((size_t)snprintf(n, sizeof n, "%s%s", module, suffix) >= sizeof n)
        return NULL;
    return lwq_ckpt_find(c, n);
}

int lwq_ckpt_is_f32_scalar(const lwq_ckpt_tensor *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1)
            return 0;
    return t->dtype == LWQ_F32;
}

int lwq_ckpt_read_tensor(const lwq_ckpt *c, const lwq_ckpt_tensor *t, void *buf, lwq_error *e)
{
    if (t->file < 0 || t->file >= c->nfiles)
        return lwq_errf(e, LWQ_EINVAL, "%s: tensor '%s' has no file", c->dir, t->name);
    return lwq_st_read(&c->files[t->file], t->offset, buf, t->nbytes, e);
}
