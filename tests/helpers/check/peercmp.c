/* tests/helpers/check/peercmp.c — pc_compare (see peercmp.h). */
#include "tests/helpers/check/peercmp.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/file.h"
#include "layout/checkpoint/safetensors.h"

#define PC_MAX_FILES 64

typedef struct pc_tensor {
    const char *name;
    const lwq_st_file *f;
    const lwq_st_entry *t;
} pc_tensor;

typedef struct pc_ckpt {
    int nfiles, n;
    lwq_st_file files[PC_MAX_FILES];
    pc_tensor *v; /* sorted by name */
} pc_ckpt;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const pc_tensor *)a)->name, ((const pc_tensor *)b)->name);
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static void ckpt_open(pc_ckpt *c, const char *dir)
{
    memset(c, 0, sizeof *c);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s: cannot open the directory", dir);
    for (struct dirent *de; (de = readdir(d));) {
        if (!ends_with(de->d_name, ".safetensors"))
            continue;
        cr_assert_lt(c->nfiles, PC_MAX_FILES, "%s: more than %d shards", dir, PC_MAX_FILES);
        char p[1024];
        lwq_error e = {0};
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        cr_assert_eq(lwq_st_open(p, &c->files[c->nfiles], &e), 0, "%s", e.msg);
        c->n += c->files[c->nfiles++].n;
    }
    closedir(d);
    cr_assert_gt(c->nfiles, 0, "%s: no .safetensors file", dir);
    c->v = calloc((size_t)c->n, sizeof *c->v);
    cr_assert_not_null(c->v);
    int k = 0;
    for (int f = 0; f < c->nfiles; f++)
        for (int i = 0; i < c->files[f].n; i++)
            c->v[k++] = (pc_tensor){c->files[f].entries[i].name, &c->files[f], &c->files[f].entries[i]};
    qsort(c->v, (size_t)c->n, sizeof *c->v, by_name);
    for (int i = 1; i < c->n; i++)
        cr_assert(strcmp(c->v[i - 1].name, c->v[i].name), "%s: tensor %s in two shards", dir, c->v[i].name);
}

static void ckpt_free(pc_ckpt *c)
{
    for (int f = 0; f < c->nfiles; f++)
        lwq_st_free(&c->files[f]);
    free(c->v);
}

static void *read_bytes(const pc_tensor *t)
{
    uint64_t n = t->t->end - t->t->begin;
    void *b = malloc(n ? n : 1);
    lwq_error e = {0};
    cr_assert_not_null(b);
    cr_assert_eq(lwq_st_read(t->f, t->f->data_start + t->t->begin, b, n, &e), 0, "%s", e.msg);
    return b;
}

static void note(pc_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(pc_result *r, const char *fmt, ...)
{
    if (r->ndiff < PC_MAX_NOTES) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->notes[r->ndiff], sizeof r->notes[0], fmt, ap);
        va_end(ap);
    }
    r->ndiff++;
}

static int is_scale(const char *name)
{
    return ends_with(name, ".input_scale") || ends_with(name, ".k_scale") || ends_with(name, ".v_scale");
}

static void compare_tensor(const pc_tensor *a, const pc_tensor *b, double rtol, pc_result *r)
{
    const lwq_st_entry *x = a->t, *y = b->t;
    int same_meta = x->dtype == y->dtype && x->ndim == y->ndim && !memcmp(x->shape, y->shape, sizeof x->shape);
    if (!is_scale(a->name)) {
        r->exact_total++;
        if (!same_meta) {
            note(r, "%s: %s rank %d vs %s rank %d", a->name, lwq_dtype_name(x->dtype), x->ndim, lwq_dtype_name(y->dtype),
                 y->ndim);
            return;
        }
        uint64_t n = x->end - x->begin;
        unsigned char *p = read_bytes(a), *q = read_bytes(b);
        uint64_t bad = 0;
        for (uint64_t i = 0; i < n; i++)
            bad += p[i] != q[i];
        if (bad)
            note(r, "%s: %llu of %llu bytes differ", a->name, (unsigned long long)bad, (unsigned long long)n);
        else
            r->exact_identical++;
        free(p);
        free(q);
        return;
    }
    r->scales++;
    if (!same_meta || x->dtype != LWQ_F32 || lwq_st_numel(x) != 1) {
        note(r, "%s: a scale must be an F32 scalar in both (%s vs %s)", a->name, lwq_dtype_name(x->dtype),
             lwq_dtype_name(y->dtype));
        return;
    }
    float *p = read_bytes(a), *q = read_bytes(b);
    double rel = *q != 0 ? fabs((double)*p - (double)*q) / fabs((double)*q) : (*p == *q ? 0.0 : INFINITY);
    if (!(rel <= r->worst_rel)) {
        r->worst_rel = rel;
        snprintf(r->worst, sizeof r->worst, "%s", a->name);
    }
    if (!(rel <= rtol))
        note(r, "%s: %.9g vs %.9g (relative %.3g > %.3g)", a->name, *p, *q, rel, rtol);
    free(p);
    free(q);
}

/* ---- configs ----------------------------------------------------------------------------------- */

/* *mangled: 1 when the text holds Model Optimizer 0.47's mangled name sentinel.  Its export of
 * nemotron_h appends ".\u0000modelopt_name_sentinel" to every module name before reversing
 * transformers' "backbone." -> "model." rename, which rewrites the sentinel itself, so the suffix
 * is never removed: "lm_head.\u0000backbone.pt_name_sentinel" (tests/data/peers/README.md).  cJSON
 * reads \u0000 as a NUL, so each such name reads as the module's name and a dot. */
static cJSON *read_json(const char *dir, const char *file, int *mangled)
{
    char p[1024], *s = NULL;
    lwq_error e = {0};
    snprintf(p, sizeof p, "%s/%s", dir, file);
    cr_assert_eq(lwq_file_read_all(p, 16u << 20, &s, NULL, &e), 0, "%s", e.msg);
    *mangled = strstr(s, "\\u0000backbone.pt_name_sentinel") != NULL;
    cJSON *j = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(j, "%s: not JSON", p);
    return j;
}

/* Names read up to the mangled sentinel (read_json): the trailing dot of every object key and
 * string value under j dropped, in place; returns how many.  A module name never ends in a dot. */
static int unmangle(cJSON *j)
{
    int k = 0;
    for (cJSON *x = j ? j->child : NULL; x; x = x->next) {
        size_t n;
        if (x->string && (n = strlen(x->string)) > 0 && x->string[n - 1] == '.') {
            x->string[n - 1] = 0;
            k++;
        }
        if (cJSON_IsString(x) && (n = strlen(x->valuestring)) > 0 && x->valuestring[n - 1] == '.') {
            x->valuestring[n - 1] = 0;
            k++;
        }
        k += unmangle(x);
    }
    return k;
}

/* A map of modules or config groups (quantized_layers, config_groups), entry by entry: each entry
 * only one side has, or that differs, named.  A side whose names carry the mangled sentinel is
 * compared by the names before it, and said so once (a recorded difference of its own). */
static void compare_entries(const char *what, const cJSON *ea, const cJSON *eb, const int mangled[2], pc_result *r)
{
    cJSON *d[2] = {cJSON_Duplicate(ea, 1), cJSON_Duplicate(eb, 1)};
    cr_assert(d[0] && d[1], "%s: out of memory", what);
    for (int s = 0; s < 2; s++)
        if (mangled[s] && unmangle(d[s]) > 0)
            note(r, "%s: %s's module names end in Model Optimizer's mangled name sentinel (compared by the "
                    "names before it)", what, s ? "B" : "A");
    if (!cJSON_IsObject(d[0]) || !cJSON_IsObject(d[1])) {
        if (!cJSON_Compare(d[0], d[1], 1))
            note(r, "%s differs", what);
    } else {
        for (int s = 0; s < 2; s++)
            for (const cJSON *x = d[s]->child; x; x = x->next) {
                const cJSON *y = cJSON_GetObjectItemCaseSensitive(d[1 - s], x->string);
                if (!y)
                    note(r, "%s: %s only in %s", what, x->string, s ? "B" : "A");
                else if (s == 0 && !cJSON_Compare(x, y, 1))
                    note(r, "%s.%s differs", what, x->string);
            }
    }
    cJSON_Delete(d[0]);
    cJSON_Delete(d[1]);
}

/* Whether the exclusion list covers module m: an exact name, an fnmatch glob, or an ancestor. */
static int covers(const cJSON *list, const char *m)
{
    for (const cJSON *x = list ? list->child : NULL; x; x = x->next) {
        if (!cJSON_IsString(x))
            continue;
        size_t n = strlen(x->valuestring);
        if (!strcmp(m, x->valuestring) || !fnmatch(x->valuestring, m, 0) ||
            (!strncmp(m, x->valuestring, n) && m[n] == '.'))
            return 1;
    }
    return 0;
}

/* The quantizable modules of both checkpoints: those with a weight of two or more dimensions
 * (linears, embeddings, the conv1d; not norms), which is what an exclusion list is about. */
static void compare_excludes(const char *what, const cJSON *la, const cJSON *lb, const pc_ckpt *a, const pc_ckpt *b,
                             pc_result *r)
{
    const pc_ckpt *cs[2] = {a, b};
    int shown = 0;
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < cs[c]->n; i++) {
            char m[256];
            const char *name = cs[c]->v[i].name;
            if (!ends_with(name, ".weight") || cs[c]->v[i].t->ndim < 2)
                continue;
            snprintf(m, sizeof m, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
            int ca = covers(la, m), cb = covers(lb, m);
            if (ca != cb && shown++ == 0)
                note(r, "%s: %s is excluded only in %s", what, m, ca ? "A" : "B");
        }
}

static void compare_object(const char *what, const cJSON *oa, const cJSON *ob, const char *list_key, const pc_ckpt *a,
                           const pc_ckpt *b, const int mangled[2], pc_result *r)
{
    if (!cJSON_IsObject(oa) || !cJSON_IsObject(ob)) {
        note(r, "%s: missing in %s", what, cJSON_IsObject(oa) ? "B" : "A");
        return;
    }
    const cJSON *objs[2] = {oa, ob};
    for (int s = 0; s < 2; s++)
        for (const cJSON *x = objs[s]->child; x; x = x->next) {
            if (!strcmp(x->string, "producer"))
                continue;
            const cJSON *ya = cJSON_GetObjectItem(oa, x->string), *yb = cJSON_GetObjectItem(ob, x->string);
            if (s == 1 && ya)
                continue; /* seen from A */
            char k[160];
            snprintf(k, sizeof k, "%s.%s", what, x->string);
            if (!strcmp(x->string, list_key))
                compare_excludes(k, ya, yb, a, b, r);
            else if (ya && yb && (!strcmp(x->string, "quantized_layers") || !strcmp(x->string, "config_groups")))
                compare_entries(k, ya, yb, mangled, r);
            else if (!ya || !yb || !cJSON_Compare(ya, yb, 1))
                note(r, "%s differs", k);
        }
}

void pc_compare(const char *da, const char *db, double rtol, pc_result *r)
{
    memset(r, 0, sizeof *r);
    pc_ckpt a, b;
    ckpt_open(&a, da);
    ckpt_open(&b, db);
    int i = 0, j = 0;
    while (i < a.n || j < b.n) {
        int c = i == a.n ? 1 : j == b.n ? -1 : strcmp(a.v[i].name, b.v[j].name);
        if (c < 0)
            note(r, "%s: only in A", a.v[i++].name);
        else if (c > 0)
            note(r, "%s: only in B", b.v[j++].name);
        else
            compare_tensor(&a.v[i++], &b.v[j++], rtol, r);
    }
    int mh[2], mc[2];
    cJSON *ha = read_json(da, "hf_quant_config.json", &mh[0]), *hb = read_json(db, "hf_quant_config.json", &mh[1]);
    compare_object("hf_quant_config.json quantization", cJSON_GetObjectItem(ha, "quantization"),
                   cJSON_GetObjectItem(hb, "quantization"), "exclude_modules", &a, &b, mh, r);
    cJSON *ca = read_json(da, "config.json", &mc[0]), *cb = read_json(db, "config.json", &mc[1]);
    compare_object("config.json quantization_config", cJSON_GetObjectItem(ca, "quantization_config"),
                   cJSON_GetObjectItem(cb, "quantization_config"), "ignore", &a, &b, mc, r);
    cJSON_Delete(ha);
    cJSON_Delete(hb);
    cJSON_Delete(ca);
    cJSON_Delete(cb);
    ckpt_free(&a);
    ckpt_free(&b);
}
