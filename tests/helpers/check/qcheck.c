/* tests/helpers/check/qcheck.c — see qcheck.h. */
#include "tests/helpers/check/qcheck.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/sys/file.h"
#include "engine/forward/forward.h"
#include "kernels/quant.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/format/quant_formats.h"
#include "tests/helpers/model/fwd_fixture.h"

/* ---- names ---------------------------------------------------------------------------------- */

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

qc_fmt qc_preset_format(const char *preset, const char *m)
{
    if (ends_with(m, ".mlp.gate") || ends_with(m, ".block_sparse_moe.gate") || ends_with(m, ".shared_expert_gate"))
        return QC_NONE;
    int experts = strstr(m, ".mlp.experts.") || strstr(m, ".block_sparse_moe.experts.");
    int mlp = strstr(m, ".mlp.") || strstr(m, ".block_sparse_moe.");
    int attn = strstr(m, ".self_attn.") != NULL;
    /* Model Optimizer's default_disabled_quantizers: the Gated DeltaNet's in_proj_a* / in_proj_b* */
    if ((!strcmp(preset, "nvfp4") || !strcmp(preset, "fp8")) &&
        (strstr(m, ".linear_attn.in_proj_a") || strstr(m, ".linear_attn.in_proj_b")))
        return QC_NONE;
    if (!strcmp(preset, "nvfp4"))
        return QC_NVFP4;
    if (!strcmp(preset, "nvfp4_experts_only"))
        return experts ? QC_NVFP4 : QC_NONE;
    if (!strcmp(preset, "nvfp4_mlp_only"))
        return mlp ? QC_NVFP4 : QC_NONE;
    if (!strcmp(preset, "fp8"))
        return QC_FP8;
    if (!strcmp(preset, "nvfp4_experts-fp8_attn"))
        return experts ? QC_NVFP4 : attn ? QC_FP8 : QC_NONE;
    cr_assert_fail("unknown preset %s", preset);
    return QC_NONE;
}

/* ---- calibration data ------------------------------------------------------------------------ */

void qc_calib_make(qc_calib *c, int n, const int64_t *len, int64_t vocab, unsigned seed)
{
    c->n = n;
    c->len = calloc((size_t)n, sizeof *c->len);
    c->ids = calloc((size_t)n, sizeof *c->ids);
    cr_assert(c->len && c->ids);
    uint64_t s = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        c->len[i] = len[i];
        c->ids[i] = malloc((size_t)len[i] * sizeof(int32_t));
        cr_assert_not_null(c->ids[i]);
        for (int64_t t = 0; t < len[i]; t++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            c->ids[i][t] = (int32_t)((s >> 33) % (uint64_t)vocab);
        }
    }
}

void qc_calib_write(const qc_calib *c, const char *path)
{
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp, "cannot write %s", path);
    for (int i = 0; i < c->n; i++) {
        fprintf(fp, "{\"input_ids\": [");
        for (int64_t t = 0; t < c->len[i]; t++)
            fprintf(fp, "%s%d", t ? ", " : "", c->ids[i][t]);
        fprintf(fp, "]}\n");
    }
    fclose(fp);
}

void qc_calib_free(qc_calib *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->ids[i]);
    free(c->ids);
    free(c->len);
    memset(c, 0, sizeof *c);
}

/* ---- reference statistics ------------------------------------------------------------------- */

static int ref_slot(qc_ref *r, const char *module)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->name[i], module))
            return i;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->name = realloc(r->name, (size_t)r->cap * sizeof *r->name);
        r->amax = realloc(r->amax, (size_t)r->cap * sizeof *r->amax);
        r->rows = realloc(r->rows, (size_t)r->cap * sizeof *r->rows);
        cr_assert(r->name && r->amax && r->rows);
    }
    snprintf(r->name[r->n], sizeof r->name[0], "%s", module);
    r->amax[r->n] = 0;
    r->rows[r->n] = 0;
    return r->n++;
}

/* max |x| over the rows that count (host tensor); returns the number of those rows. */
static int64_t host_amax(const qc_ref *r, const lwq_tensor *x, const lwq_tensor *valid, float *amax)
{
    int64_t rows = x->shape[0], cols = x->shape[1], n = 0;
    const uint8_t *v = valid && !r->include_padding ? (const uint8_t *)valid->data : NULL;
    float m = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (v && !v[i])
            continue;
        n++;
        for (int64_t j = 0; j < cols; j++) {
            float a = fabsf(lwq_load_f(x->data, x->dtype, (size_t)(i * cols + j)));
            cr_assert(isfinite(a), "non-finite activation at row %lld", (long long)i);
            m = a > m ? a : m;
        }
    }
    *amax = m;
    return n;
}

static int obs_linear(void *ctx, int layer, const char *module, const lwq_tensor *x, const lwq_tensor *valid,
                      const int32_t *tok, lwq_error *e)
{
    (void)layer;
    (void)e;
    qc_ref *r = ctx;
    float a;
    int64_t n = host_amax(r, x, valid, &a);
    int s = ref_slot(r, module);
    r->rows[s] += n;
    if (n && a > r->amax[s])
        r->amax[s] = a;
    return 0;
}

static int obs_kv(void *ctx, int layer, const lwq_tensor *k, const lwq_tensor *v, const lwq_tensor *valid,
                  lwq_error *e)
{
    (void)e;
    qc_ref *r = ctx;
    float a, b;
    host_amax(r, k, valid, &a);
    host_amax(r, v, valid, &b);
    r->k_amax[layer] = fmaxf(r->k_amax[layer], a);
    r->v_amax[layer] = fmaxf(r->v_amax[layer], b);
    return 0;
}

static int obs_counts(void *ctx, int layer, const int64_t *counts, int n, lwq_error *e)
{
    (void)e;
    qc_ref *r = ctx;
    cr_assert_eq(n, r->nexp);
    for (int i = 0; i < n; i++)
        r->counts[layer * r->nexp + i] += counts[i];
    return 0;
}

void qc_ref_compute(qc_ref *r, const char *model_dir, const qc_calib *c, int batch_size, int include_padding,
                    int all_experts)
{
    memset(r, 0, sizeof *r);
    r->include_padding = include_padding;
    lwq_error e = {0};
    lwq_backend be;
    fwd_fixture f;
    lwq_model m;
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0, "%s", e.msg);
    cr_assert_eq(fwd_fixture_open(&f, model_dir, NULL, &e), 0, "%s", e.msg);
    const lwq_model_config *cfg = &f.ck.cfg;
    cr_assert_eq(lwq_model_init(&m, cfg, &be, cfg->dtype, &e), 0, "%s", e.msg);
    r->nlayers = cfg->num_hidden_layers;
    r->nexp = cfg->num_experts > 0 ? cfg->num_experts : 1;
    r->k_amax = calloc((size_t)r->nlayers, sizeof *r->k_amax);
    r->v_amax = calloc((size_t)r->nlayers, sizeof *r->v_amax);
    r->counts = calloc((size_t)(r->nlayers * r->nexp), sizeof *r->counts);
    lwq_observer obs = {r, obs_linear, obs_kv, obs_counts, all_experts, NULL};
    for (int s0 = 0; s0 < c->n; s0 += batch_size) {
        int ns = c->n - s0 < batch_size ? c->n - s0 : batch_size;
        int64_t seq = 0, *lens = calloc((size_t)ns, sizeof *lens);
        for (int i = 0; i < ns; i++) {
            lens[i] = c->len[s0 + i];
            seq = lens[i] > seq ? lens[i] : seq;
        }
        int32_t *tok = calloc((size_t)(ns * seq), sizeof *tok); /* padding: id 0 */
        for (int i = 0; i < ns; i++)
            memcpy(tok + i * seq + (seq - lens[i]), c->ids[s0 + i], (size_t)lens[i] * sizeof *tok);
        lwq_batch b;
        lwq_tensor h;
        int64_t shape[2] = {ns * seq, cfg->hidden_size};
        cr_assert_eq(lwq_batch_init(&b, &be, ns, seq, lens, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_backend_tensor_alloc(&be, cfg->dtype, 2, shape, &h, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_model_embed(&m, &f.w, tok, &h, &e), 0, "%s", e.msg);
        for (int L = 0; L < r->nlayers; L++)
            cr_assert_eq(lwq_model_layer_forward(&m, L, &f.w, &b, &h, &obs, &e), 0, "%s", e.msg);
        lwq_backend_tensor_free(&be, &h);
        lwq_batch_free(&b, &be);
        free(tok);
        free(lens);
    }
    lwq_model_free(&m);
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
}

void qc_ref_free(qc_ref *r)
{
    free(r->name);
    free(r->amax);
    free(r->rows);
    free(r->k_amax);
    free(r->v_amax);
    free(r->counts);
    memset(r, 0, sizeof *r);
}

float qc_ref_amax(const qc_ref *r, const char *module, int64_t *rows)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->name[i], module)) {
            *rows = r->rows[i];
            return r->amax[i];
        }
    *rows = 0;
    return 0;
}

/* ---- the output directory ------------------------------------------------------------------- */

static char *slurp(const char *path)
{
    char *buf;
    size_t len;
    lwq_error e = {0};
    cr_assert_eq(lwq_file_read_all(path, 64u << 20, &buf, &len, &e), 0, "%s", e.msg);
    return buf;
}

static cJSON *read_json(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *s = slurp(p);
    cJSON *j = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(j, "%s is not valid JSON", p);
    return j;
}

void qc_out_open(qc_out *o, const char *dir)
{
    memset(o, 0, sizeof *o);
    snprintf(o->dir, sizeof o->dir, "%s", dir);
    cJSON *idx = read_json(dir, "model.safetensors.index.json");
    cJSON *wm = cJSON_GetObjectItem(idx, "weight_map");
    cr_assert(cJSON_IsObject(wm), "index: weight_map missing");
    int entries = 0;
    uint64_t total = 0;
    lwq_error e = {0};
    for (cJSON *it = wm->child; it; it = it->next, entries++) {
        cr_assert(cJSON_IsString(it), "index: %s maps to a non-string", it->string);
        const char *fn = it->valuestring;
        cr_assert(!strchr(fn, '/'), "index: %s maps to %s, outside the directory", it->string, fn);
        int f = 0;
        while (f < o->nfiles && strcmp(o->fname[f], fn))
            f++;
        if (f == o->nfiles) {
            cr_assert_lt(o->nfiles, 64);
            char p[1024];
            snprintf(o->fname[f], sizeof o->fname[f], "%s", fn);
            snprintf(p, sizeof p, "%s/%s", dir, fn);
            cr_assert_eq(lwq_st_open(p, &o->files[f], &e), 0, "index names %s: %s", fn, e.msg);
            o->nfiles++;
        }
        int k = lwq_st_find(&o->files[f], it->string);
        cr_assert_geq(k, 0, "index: %s -> %s, but that shard does not hold it", it->string, fn);
        total += o->files[f].entries[k].end - o->files[f].entries[k].begin;
    }
    int held = 0;
    for (int f = 0; f < o->nfiles; f++)
        held += o->files[f].n;
    cr_assert_eq(held, entries, "the shards hold %d tensors, the index lists %d", held, entries);
    cJSON *ts = cJSON_GetObjectItem(cJSON_GetObjectItem(idx, "metadata"), "total_size");
    cr_assert(cJSON_IsNumber(ts) && (uint64_t)ts->valuedouble == total, "index: total_size %.0f, tensors hold %llu",
              cJSON_IsNumber(ts) ? ts->valuedouble : -1.0, (unsigned long long)total);
    cJSON_Delete(idx);
    /* no shard outside the index */
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    for (struct dirent *de; (de = readdir(d));) {
        if (!ends_with(de->d_name, ".safetensors"))
            continue;
        int f = 0;
        while (f < o->nfiles && strcmp(o->fname[f], de->d_name))
            f++;
        cr_assert_lt(f, o->nfiles, "%s/%s is not in the index", dir, de->d_name);
    }
    closedir(d);
}

void qc_out_free(qc_out *o)
{
    for (int f = 0; f < o->nfiles; f++)
        lwq_st_free(&o->files[f]);
    o->nfiles = 0;
}

const lwq_st_entry *qc_out_find(const qc_out *o, const char *name, int *file)
{
    for (int f = 0; f < o->nfiles; f++) {
        int k = lwq_st_find(&o->files[f], name);
        if (k >= 0) {
            if (file)
                *file = f;
            return &o->files[f].entries[k];
        }
    }
    return NULL;
}

void *qc_out_read(const qc_out *o, const char *name, lwq_dtype dt, int ndim, const int64_t *shape)
{
    int f;
    const lwq_st_entry *t = qc_out_find(o, name, &f);
    cr_assert_not_null(t, "%s: missing from the output", name);
    cr_assert_eq(t->dtype, dt, "%s: dtype %s, expected %s", name, lwq_dtype_name(t->dtype), lwq_dtype_name(dt));
    if (ndim >= 0) {
        cr_assert_eq(t->ndim, ndim, "%s: %d dims, expected %d", name, t->ndim, ndim);
        for (int i = 0; i < ndim; i++)
            cr_assert_eq(t->shape[i], shape[i], "%s: dim %d is %lld, expected %lld", name, i, (long long)t->shape[i],
                         (long long)shape[i]);
    }
    uint64_t n = t->end - t->begin;
    void *buf = malloc(n ? n : 1);
    lwq_error e = {0};
    cr_assert_eq(lwq_st_read(&o->files[f], o->files[f].data_start + t->begin, buf, n, &e), 0, "%s", e.msg);
    return buf;
}

float qc_out_scalar(const qc_out *o, const char *name)
{
    float *p = qc_out_read(o, name, LWQ_F32, 0, NULL), v = *p;
    free(p);
    return v;
}

/* ---- file comparison ------------------------------------------------------------------------- */

int qc_same_file(const char *a, const char *b)
{
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    while (same) {
        int c = fgetc(x), d = fgetc(y);
        same = c == d;
        if (c == EOF || d == EOF)
            break;
    }
    if (x)
        fclose(x);
    if (y)
        fclose(y);
    return same;
}

static int list_files(const char *dir, char names[][128], int cap)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            cr_assert_lt(n, cap);
            cr_assert_lt(snprintf(names[n++], 128, "%s", de->d_name), 128);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, 128, (int (*)(const void *, const void *))strcmp);
    return n;
}

void qc_assert_same_dirs(const char *a, const char *b)
{
    static char na[256][128], nb[256][128];
    int n = list_files(a, na, 256), m = list_files(b, nb, 256);
    cr_assert_eq(n, m, "%s holds %d files, %s %d", a, n, b, m);
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(na[i], nb[i], "file sets differ: %s vs %s", na[i], nb[i]);
        char pa[1024], pb[1024];
        cr_assert_lt(snprintf(pa, sizeof pa, "%s/%s", a, na[i]), (int)sizeof pa);
        cr_assert_lt(snprintf(pb, sizeof pb, "%s/%s", b, nb[i]), (int)sizeof pb);
        cr_assert(qc_same_file(pa, pb), "%s and %s differ", pa, pb);
    }
}
