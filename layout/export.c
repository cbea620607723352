#include "layout/export.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* What a module is written as: its lwq_qformat, or KIND_W4A16 for weight-only NVFP4. */
enum { KIND_NONE = LWQ_QFMT_NONE, KIND_NVFP4 = LWQ_QFMT_NVFP4, KIND_FP8 = LWQ_QFMT_FP8, KIND_W4A16, NKINDS };
_Static_assert((int)KIND_W4A16 > (int)LWQ_QFMT_NVFP4 && (int)KIND_W4A16 > (int)LWQ_QFMT_FP8, "kinds extend lwq_qformat");

static int kind_of(const lwq_export_module *m)
{
    return m->format == LWQ_QFMT_NVFP4 && m->weight_only ? KIND_W4A16 : (int)m->format;
}

static const char *algo_of(int k) { return k == KIND_NVFP4 ? "NVFP4" : k == KIND_W4A16 ? "W4A16_NVFP4" : "FP8"; }
static int grouped(int k) { return k == KIND_NVFP4 || k == KIND_W4A16; } /* group_size 16 */

/* The single kind used by all quantized modules, KIND_NONE when none is quantized, or -1 when
 * several are (MIXED_PRECISION). */
static int overall_format(const lwq_export_quant *q)
{
    int f = KIND_NONE;
    for (int i = 0; i < q->nmods; i++) {
        int m = kind_of(&q->mods[i]);
        if (m == KIND_NONE)
            continue;
        if (f == KIND_NONE)
            f = m;
        else if (f != m)
            return -1;
    }
    return f;
}

/* Sorted exclusion list: lm_head, extras, every unquantized decoder linear; for MIXED_PRECISION
 * (mixed) only the MTP blocks, as Model Optimizer writes it (export.h). */
static cJSON *exclude_list(const lwq_export_quant *q, int mixed)
{
    if (mixed) {
        int n = q->nextra_mtp < 0 ? 0 : q->nextra_mtp < q->nextra ? q->nextra_mtp : q->nextra;
        const char **v = malloc((size_t)(n ? n : 1) * sizeof *v);
        cJSON *a = v ? cJSON_CreateArray() : NULL;
        for (int i = 0; a && i < n; i++)
            v[i] = q->extra_excludes[i];
        if (a)
            qsort(v, (size_t)n, sizeof *v, cmp_str);
        for (int i = 0; a && i < n; i++)
            if (i == 0 || strcmp(v[i], v[i - 1]))
                cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
        free(v);
        return a;
    }
    int n = 1 + q->nextra;
    for (int i = 0; i < q->nmods; i++)
        n += q->mods[i].format == LWQ_QFMT_NONE;
    const char **v = malloc((size_t)n * sizeof *v);
    if (!v)
        return NULL;
    int k = 0;
    char lm[96];
    lwq_names_full(q->names, "lm_head", lm, sizeof lm);
    int lm_quantized = 0; /* a recipe that quantizes lm_head lists it among the modules */
    for (int i = 0; i < q->nmods; i++)
        lm_quantized |= q->mods[i].format != LWQ_QFMT_NONE && !strcmp(q->mods[i].name, lm);
    if (!lm_quantized)
        v[k++] = lm;
    for (int i = 0; i < q->nextra; i++)
        v[k++] = q->extra_excludes[i];
    for (int i = 0; i < q->nmods; i++)
        if (q->mods[i].format == LWQ_QFMT_NONE)
            v[k++] = q->mods[i].name;
    qsort(v, (size_t)k, sizeof *v, cmp_str);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < k; i++)
        if (i == 0 || strcmp(v[i], v[i - 1]))
            cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    free(v);
    return a;
}

/* One entry of a MIXED_PRECISION listing: the module's name (or the in-memory module it belongs
 * to) and its kind; i: the module's index. */
typedef struct {
    const char *key;
    int kind, i;
} listed;

static int cmp_listed(const void *a, const void *b)
{
    const listed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* The quantized modules as a MIXED_PRECISION config lists them, sorted by name: a listed_as
 * module once when all its members share one quantized kind, else each quantized member by its
 * own name; every other quantized module by its name.  The count, or -1 out of memory. */
static int listing(const lwq_export_quant *q, listed **out)
{
    int n = q->nmods, k = 0, ng = 0;
    listed *v = malloc((size_t)(n ? n : 1) * sizeof *v), *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    if (!v || !g) {
        free(v);
        free(g);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int f = kind_of(&q->mods[i]);
        if (q->mods[i].listed_as)
            g[ng++] = (listed){q->mods[i].listed_as, f, i};
        else if (f != KIND_NONE)
            v[k++] = (listed){q->mods[i].name, f, i};
    }
    qsort(g, (size_t)ng, sizeof *g, cmp_listed);
    for (int a = 0, b; a < ng; a = b) {
        int same = g[a].kind != KIND_NONE;
        for (b = a + 1; b < ng && !strcmp(g[b].key, g[a].key); b++)
            same &= g[b].kind == g[a].kind;
        if (same) {
            v[k++] = g[a];
            continue;
        }
        for (int m = a; m < b; m++)
            if (g[m].kind != KIND_NONE)
                v[k++] = (listed){q->mods[g[m].i].name, g[m].kind, g[m].i};
    }
    free(g);
    qsort(v, (size_t)k, sizeof *v, cmp_listed);
    *out = v;
    return k;
}

static cJSON *quantized_layers(const lwq_export_quant *q)
{
    listed *v;
    int k = listing(q, &v);
    if (k < 0)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < k; i++) {
        if (i && !strcmp(v[i].key, v[i - 1].key))
            continue;
        cJSON *l = cJSON_AddObjectToObject(o, v[i].key);
        cJSON_AddStringToObject(l, "quant_algo", algo_of(v[i].kind));
        if (grouped(v[i].kind))
            cJSON_AddNumberToObject(l, "group_size", 16);
    }
    free(v);
    return o;
}

const cJSON *lwq_export_listed(const cJSON *quantized_layers, const char *module)
{
    char name[512];
    if (!cJSON_IsObject(quantized_layers) || !module || strlen(module) >= sizeof name)
        return NULL;
    snprintf(name, sizeof name, "%s", module);
    for (;;) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(quantized_layers, name);
        if (cJSON_IsObject(x))
            return x;
        char *dot = strrchr(name, '.');
        if (!dot)
            return NULL;
        *dot = 0;
    }
}

static void add_producer(cJSON *o)
{
    cJSON *p = cJSON_AddObjectToObject(o, "producer");
    cJSON_AddStringToObject(p, "name", LWQ_PRODUCER_NAME);
    cJSON_AddStringToObject(p, "version", LWQ_PRODUCER_VERSION);
}

static int check_modules(const lwq_export_quant *q, lwq_error *e)
{
    if (overall_format(q) == LWQ_QFMT_NONE)
        return lwq_errf(e, LWQ_EINVAL, "export: no module is quantized; nothing to describe");
    for (int i = 0; i < q->nmods; i++) {
        if (!q->mods[i].name || !q->mods[i].name[0])
            return lwq_errf(e, LWQ_EINVAL, "export: module %d has no name", i);
        if (q->mods[i].weight_only && q->mods[i].format != LWQ_QFMT_NVFP4)
            return lwq_errf(e, LWQ_EINVAL, "export: %s is weight-only %s; only NVFP4 has a weight-only form",
                            q->mods[i].name, lwq_qformat_name(q->mods[i].format));
    }
    return 0;
}

static int finish(cJSON *root, char **out, lwq_error *e)
{
    *out = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!*out)
        return lwq_errf(e, LWQ_ENOMEM, "export: out of memory building JSON");
    return 0;
}

int lwq_export_hf_quant_config(const lwq_export_quant *q, char **out, lwq_error *e)
{
    *out = NULL;
    int rc = check_modules(q, e);
    if (rc)
        return rc;
    int f = overall_format(q);
    cJSON *root = cJSON_CreateObject();
    add_producer(root);
    cJSON *qz = cJSON_AddObjectToObject(root, "quantization");
    cJSON_AddStringToObject(qz, "quant_algo", f < 0 ? "MIXED_PRECISION" : algo_of(f));
    if (q->kv == LWQ_KV_NONE)
        cJSON_AddNullToObject(qz, "kv_cache_quant_algo");
    else
        cJSON_AddStringToObject(qz, "kv_cache_quant_algo", q->kv == LWQ_KV_NVFP4_CAST ? "NVFP4" : "FP8");
    if (f >= 0 && grouped(f))
        cJSON_AddNumberToObject(qz, "group_size", 16);
    cJSON_AddItemToObject(qz, "exclude_modules", exclude_list(q, f < 0));
    if (f < 0)
        cJSON_AddItemToObject(qz, "quantized_layers", quantized_layers(q));
    return finish(root, out, e);
}

static cJSON *group_details(int f)
{
    cJSON *g = cJSON_CreateObject();
    int bits = grouped(f) ? 4 : 8;
    if (f != KIND_W4A16) {
        cJSON *ia = cJSON_AddObjectToObject(g, "input_activations");
        cJSON_AddBoolToObject(ia, "dynamic", 0);
        cJSON_AddNumberToObject(ia, "num_bits", bits);
        cJSON_AddStringToObject(ia, "type", "float");
        if (f == KIND_NVFP4)
            cJSON_AddNumberToObject(ia, "group_size", 16);
    }
    cJSON *w = cJSON_AddObjectToObject(g, "weights");
    cJSON_AddBoolToObject(w, "dynamic", 0);
    cJSON_AddNumberToObject(w, "num_bits", bits);
    cJSON_AddStringToObject(w, "type", "float");
    if (grouped(f))
        cJSON_AddNumberToObject(w, "group_size", 16);
    return g;
}

/* The quantization_config object (FORMATS.md 7) for q, whose single format is f (-1: several). */
static cJSON *quantization_config(const lwq_export_quant *q, int f)
{
    cJSON *qc = cJSON_CreateObject();
    cJSON *groups = cJSON_AddObjectToObject(qc, "config_groups");
    if (f >= 0) {
        cJSON *g = group_details(f);
        cJSON *t = cJSON_AddArrayToObject(g, "targets");
        cJSON_AddItemToArray(t, cJSON_CreateString("Linear"));
        cJSON_AddItemToObject(groups, "group_0", g);
    } else {
        /* one group per distinct format, numbered as Model Optimizer numbers them (in the order
         * its quantized_layers, the modules' order, first meets each format), targets = the
         * sorted names quantized_layers lists */
        listed *v;
        int n = listing(q, &v), gi = 0, first[NKINDS], order[3] = {KIND_NVFP4, KIND_FP8, KIND_W4A16};
        if (n < 0) {
            cJSON_Delete(qc);
            return NULL;
        }
        for (int k = 0; k < NKINDS; k++)
            first[k] = INT_MAX;
        for (int i = 0; i < n; i++)
            first[v[i].kind] = v[i].i < first[v[i].kind] ? v[i].i : first[v[i].kind];
        for (int a = 1; a < 3; a++) /* three kinds: insertion sort by first appearance */
            for (int b = a; b > 0 && first[order[b]] < first[order[b - 1]]; b--) {
                int t = order[b];
                order[b] = order[b - 1];
                order[b - 1] = t;
            }
        for (int k = 0; k < 3; k++) {
            cJSON *g = NULL, *t = NULL;
            for (int i = 0; i < n; i++) {
                if (v[i].kind != order[k] || (i && !strcmp(v[i].key, v[i - 1].key)))
                    continue;
                if (!g) {
                    g = group_details(order[k]);
                    t = cJSON_AddArrayToObject(g, "targets");
                    char key[24];
                    snprintf(key, sizeof key, "group_%d", gi++);
                    cJSON_AddItemToObject(groups, key, g);
                }
                cJSON_AddItemToArray(t, cJSON_CreateString(v[i].key));
            }
        }
        free(v);
        cJSON_AddItemToObject(qc, "quantized_layers", quantized_layers(q));
    }
    cJSON_AddItemToObject(qc, "ignore", exclude_list(q, f < 0));
    cJSON_AddStringToObject(qc, "quant_algo", f < 0 ? "MIXED_PRECISION" : algo_of(f));
    if (q->kv == LWQ_KV_NVFP4_CAST) {
        /* Model Optimizer 0.47 (convert_hf_quant_config_format) writes an object for FP8 only and
         * the algorithm's name for any other KV cache */
        cJSON_AddStringToObject(qc, "kv_cache_scheme", "NVFP4");
    } else if (q->kv != LWQ_KV_NONE) {
        cJSON *kv = cJSON_AddObjectToObject(qc, "kv_cache_scheme");
        cJSON_AddBoolToObject(kv, "dynamic", 0);
        cJSON_AddNumberToObject(kv, "num_bits", 8);
        cJSON_AddStringToObject(kv, "type", "float");
    }
    add_producer(qc);
    cJSON_AddStringToObject(qc, "quant_method", "modelopt");
    return qc;
}

/* ---- config.json: the source's own bytes, its quantization_config replaced ----------------------
 * The source text is kept as it is rather than re-serialized: cJSON prints 0.0 as 0 and 10000.0
 * as 10000, and typed config readers refuse an integer where their class declares a float
 * (transformers 5.20's strict MixtralConfig, which vLLM 0.33 uses, rejects
 * "router_jitter_noise": 0).  The scanner below walks text that cJSON has already accepted as
 * one JSON object, and checks every index against the length anyway. */

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

/* s[i] == '"': the index past the closing quote, or 0 when the string does not end. */
static size_t skip_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return 0;
}

/* The index past the JSON value starting at s[i], or 0. */
static size_t skip_value(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return 0;
    if (s[i] == '"')
        return skip_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            if (s[i] == '"') {
                if (!(i = skip_string(s, n, i)))
                    return 0;
                continue;
            }
            if (s[i] == '{' || s[i] == '[')
                depth++;
            else if ((s[i] == '}' || s[i] == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return 0;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' &&
           s[i] != '\r')
        i++;
    return i;
}

/* Whether the JSON string s[a, b) (quotes included) decodes to `name`. */
static int key_is(const char *s, size_t a, size_t b, const char *name)
{
    cJSON *k = cJSON_ParseWithLength(s + a, b - a);
    int is = cJSON_IsString(k) && !strcmp(k->valuestring, name);
    cJSON_Delete(k);
    return is;
}

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) {
            b->oom = 1;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = 0;
}

int lwq_export_config_json(const char *src, size_t n, const lwq_export_quant *q, char **out, lwq_error *e)
{
    *out = NULL;
    int rc = check_modules(q, e);
    if (rc)
        return rc;
    cJSON *parsed = src ? cJSON_ParseWithLength(src, n) : NULL;
    int is_obj = cJSON_IsObject(parsed);
    cJSON_Delete(parsed);
    if (!is_obj)
        return lwq_errf(e, LWQ_EINVAL, "export: source config.json is not a JSON object");
    cJSON *qc = quantization_config(q, overall_format(q));
    char *qtext = qc ? cJSON_Print(qc) : NULL;
    cJSON_Delete(qc);
    if (!qtext)
        return lwq_errf(e, LWQ_ENOMEM, "export: out of memory building quantization_config");
    /* members of the top-level object: kept ones copied as they are, with the source's own
     * separator; every "quantization_config" dropped; the new one appended last */
    sbuf b = {0};
    size_t i = skip_ws(src, n, 0) + 1, first = skip_ws(src, n, i), last_end = first, kept = 0;
    const char *sep = ",\n  ";
    size_t sep_len = strlen(sep);
    put(&b, src, first);
    for (size_t k = first; k < n && src[k] == '"';) {
        size_t ke = skip_string(src, n, k), c = ke ? skip_ws(src, n, ke) : 0;
        size_t vs = c && c < n && src[c] == ':' ? skip_ws(src, n, c + 1) : 0, ve = vs ? skip_value(src, n, vs) : 0;
        if (!ve) {
            free(b.buf);
            free(qtext);
            return lwq_errf(e, LWQ_EFORMAT, "export: source config.json: cannot read the member at byte %zu", k);
        }
        size_t next = skip_ws(src, n, ve);
        if (next < n && src[next] == ',' && kept == 0 && k == first) {
            sep = src + ve; /* the source's separator: from the first value to the second key */
            sep_len = skip_ws(src, n, next + 1) - ve;
        }
        if (!key_is(src, k, ke, "quantization_config")) {
            if (kept++)
                put(&b, sep, sep_len);
            put(&b, src + k, ve - k);
        }
        last_end = ve;
        k = next < n && src[next] == ',' ? skip_ws(src, n, next + 1) : n;
    }
    if (kept)
        put(&b, sep, sep_len);
    put(&b, "\"quantization_config\": ", 23);
    put(&b, qtext, strlen(qtext));
    put(&b, src + last_end, n - last_end);
    free(qtext);
    if (b.oom) {
        free(b.buf);
        return lwq_errf(e, LWQ_ENOMEM, "export: out of memory building config.json");
    }
    *out = b.buf;
    return 0;
}

typedef struct {
    const char *name, *file;
} name_file;

static int cmp_nf(const void *a, const void *b) { return strcmp(((const name_file *)a)->name, ((const name_file *)b)->name); }

int lwq_export_index_json(const char *const *names, const char *const *files, int n, uint64_t total_size,
                          char **out, lwq_error *e)
{
    *out = NULL;
    name_file *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return lwq_errf(e, LWQ_ENOMEM, "export: out of memory building the index");
    for (int i = 0; i < n; i++)
        v[i] = (name_file){names[i], files[i]};
    qsort(v, (size_t)n, sizeof *v, cmp_nf);
    for (int i = 1; i < n; i++)
        if (!strcmp(v[i].name, v[i - 1].name)) {
            int rc = lwq_errf(e, LWQ_EINVAL, "export: tensor %s listed twice in the index (%s, %s)", v[i].name,
                              v[i - 1].file, v[i].file);
            free(v);
            return rc;
        }
    cJSON *root = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(root, "metadata");
    cJSON_AddNumberToObject(md, "total_size", (double)total_size);
    cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
    for (int i = 0; i < n; i++)
        cJSON_AddStringToObject(wm, v[i].name, v[i].file);
    free(v);
    return finish(root, out, e);
}
