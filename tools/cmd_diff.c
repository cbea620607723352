/* tools/cmd_diff.c — `lwq diff A B`: tensor-for-tensor comparison of two checkpoints (names,
 * dtypes, shapes, bytes; for float types also max abs/rel difference) plus a semantic comparison
 * of config.json and hf_quant_config.json (key order and number spelling do not matter).  The
 * shard layout does not matter either: the same tensors split differently are identical. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/checkpoint/checkpoint.h"
#include "core/sys/file.h"
#include "tools/commands.h"
#include "tools/tool_util.h"

#define DIFF_CHUNK (8u << 20)

static void usage(FILE *fp)
{
    fprintf(fp, "usage: lwq diff A_DIR B_DIR [--max N] [--no-metadata]\n"
                "\n"
                "Compare two checkpoints tensor by tensor (names, dtypes, shapes, bytes; max abs and\n"
                "relative difference for float tensors, F8 included) and compare config.json and\n"
                "hf_quant_config.json as JSON values, and the safetensors __metadata__ pairs of all\n"
                "shards.  Prints the first differences.\n"
                "\n"
                "  --max N        print at most N differences (default 20)\n"
                "  --no-metadata  do not compare safetensors __metadata__\n"
                "\n"
                "exit status: 0 identical, 1 different, 2 error (message on stderr)\n");
}

typedef struct dstate {
    int shown, max_shown, ndiff;
} dstate;

static void report(dstate *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(dstate *d, const char *fmt, ...)
{
    d->ndiff++;
    if (d->shown >= d->max_shown)
        return;
    d->shown++;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* ---- tensors --------------------------------------------------------------------------------- */

static float e4m3_to_f32(uint8_t b)
{
    int s = b >> 7, ex = (b >> 3) & 0xf, m = b & 7;
    if (ex == 0xf && m == 7)
        return NAN;
    float v = ex == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, ex - 7);
    return s ? -v : v;
}

static int diffable_float(lwq_dtype t)
{
    return lwq_dtype_is_float(t) || t == LWQ_F8_E4M3 || t == LWQ_F8_E5M2;
}

static float load_any(const void *p, lwq_dtype t, size_t i)
{
    if (t == LWQ_F8_E4M3)
        return e4m3_to_f32(((const uint8_t *)p)[i]);
    if (t == LWQ_F8_E5M2)
        return lwq_f16_to_f32((uint16_t)(((const uint8_t *)p)[i] << 8));
    return lwq_load_f(p, t, i);
}

static void shape_str(const lwq_ckpt_tensor *t, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* Compare the data of two tensors of equal dtype and shape.  Returns 1 differ, 0 same, <0 error. */
static int diff_data(const lwq_ckpt *A, const lwq_ckpt_tensor *a, const lwq_ckpt *B,
                     const lwq_ckpt_tensor *b, char *ba, char *bb, dstate *d, lwq_error *e)
{
    size_t es = lwq_dtype_size(a->dtype);
    uint64_t ndiff = 0, first = 0;
    double max_abs = 0, max_rel = 0;
    int nan_mismatch = 0, isf = diffable_float(a->dtype);
    for (uint64_t at = 0; at < a->nbytes; at += DIFF_CHUNK) {
        uint64_t n = a->nbytes - at < DIFF_CHUNK ? a->nbytes - at : DIFF_CHUNK;
        int rc = lwq_st_read(&A->files[a->file], a->offset + at, ba, n, e);
        if (rc == 0)
            rc = lwq_st_read(&B->files[b->file], b->offset + at, bb, n, e);
        if (rc != 0)
            return rc;
        if (!memcmp(ba, bb, n))
            continue;
        size_t cnt = (size_t)(n / es);
        for (size_t i = 0; i < cnt; i++) {
            if (!memcmp(ba + i * es, bb + i * es, es))
                continue;
            if (!ndiff++)
                first = at / es + i;
            if (!isf)
                continue;
            double x = load_any(ba, a->dtype, i), y = load_any(bb, a->dtype, i);
            if (isnan(x) || isnan(y)) {
                nan_mismatch++;
                continue;
            }
            double ad = fabs(x - y), den = fmax(fabs(x), fabs(y));
            if (ad > max_abs)
                max_abs = ad;
            if (den > 0 && ad / den > max_rel)
                max_rel = ad / den;
        }
    }
    if (!ndiff)
        return 0;
    uint64_t numel = a->nbytes / es;
    char where[96] = "";
    if (a->ndim == 2 && a->shape[1] > 0)
        snprintf(where, sizeof where, " [%llu, %llu]", (unsigned long long)(first / (uint64_t)a->shape[1]),
                 (unsigned long long)(first % (uint64_t)a->shape[1]));
    if (isf)
        report(d,
               "tensor %s: data differs in %llu of %llu elements (first at element %llu%s), "
               "max abs diff %.6g, max rel diff %.6g%s",
               a->name, (unsigned long long)ndiff, (unsigned long long)numel,
               (unsigned long long)first, where, max_abs, max_rel,
               nan_mismatch ? " (NaN on one side)" : "");
    else
        report(d, "tensor %s: data differs in %llu of %llu %s elements (first at element %llu%s)",
               a->name, (unsigned long long)ndiff, (unsigned long long)numel,
               lwq_dtype_name(a->dtype), (unsigned long long)first, where);
    return 1;
}

static int diff_tensors(const lwq_ckpt *A, const lwq_ckpt *B, dstate *d, int *same_out,
                        lwq_error *e)
{
    char *ba = malloc(DIFF_CHUNK), *bb = malloc(DIFF_CHUNK);
    if (!ba || !bb) {
        free(ba);
        free(bb);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory for the compare buffers");
    }
    int i = 0, j = 0, rc = 0, same = 0;
    char s1[96], s2[96];
    while (rc >= 0 && (i < A->ntensors || j < B->ntensors)) {
        int c = i >= A->ntensors ? 1 : j >= B->ntensors ? -1
                                                        : strcmp(A->tensors[i].name, B->tensors[j].name);
        if (c < 0) {
            report(d, "tensor %s: only in A", A->tensors[i++].name);
            continue;
        }
        if (c > 0) {
            report(d, "tensor %s: only in B", B->tensors[j++].name);
            continue;
        }
        const lwq_ckpt_tensor *a = &A->tensors[i++], *b = &B->tensors[j++];
        if (a->dtype != b->dtype) {
            report(d, "tensor %s: dtype %s vs %s", a->name, lwq_dtype_name(a->dtype),
                   lwq_dtype_name(b->dtype));
            continue;
        }
        int sh = a->ndim == b->ndim;
        for (int k = 0; sh && k < a->ndim; k++)
            sh = a->shape[k] == b->shape[k];
        if (!sh) {
            shape_str(a, s1, sizeof s1);
            shape_str(b, s2, sizeof s2);
            report(d, "tensor %s: shape %s vs %s", a->name, s1, s2);
            continue;
        }
        rc = diff_data(A, a, B, b, ba, bb, d, e);
        if (rc == 0)
            same++;
    }
    free(ba);
    free(bb);
    *same_out = same;
    return rc < 0 ? rc : 0;
}

/* ---- safetensors __metadata__ ---------------------------------------------------------------- */

/* The (key, value) pairs of all shards, sorted and deduplicated: shard layout does not matter. */
static int collect_meta(const lwq_ckpt *c, const lwq_st_kv ***out, int *nout)
{
    int n = 0;
    for (int f = 0; f < c->nfiles; f++)
        n += c->files[f].nmeta;
    const lwq_st_kv **v = malloc(((size_t)n + 1) * sizeof *v);
    if (!v)
        return -1;
    n = 0;
    for (int f = 0; f < c->nfiles; f++)
        for (int k = 0; k < c->files[f].nmeta; k++)
            v[n++] = &c->files[f].meta[k];
    for (int i = 1; i < n; i++) /* insertion sort: a handful of keys */
        for (int j = i; j > 0; j--) {
            int cmp = strcmp(v[j - 1]->key, v[j]->key);
            if (cmp < 0 || (cmp == 0 && strcmp(v[j - 1]->value, v[j]->value) <= 0))
                break;
            const lwq_st_kv *t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!m || strcmp(v[m - 1]->key, v[i]->key) || strcmp(v[m - 1]->value, v[i]->value))
            v[m++] = v[i];
    *out = v;
    *nout = m;
    return 0;
}

static int diff_meta(const lwq_ckpt *A, const lwq_ckpt *B, dstate *d, lwq_error *e)
{
    const lwq_st_kv **a = NULL, **b = NULL;
    int na = 0, nb = 0;
    if (collect_meta(A, &a, &na) != 0 || collect_meta(B, &b, &nb) != 0) {
        free(a);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    int i = 0, j = 0;
    while (i < na || j < nb) {
        int c = i >= na ? 1 : j >= nb ? -1 : strcmp(a[i]->key, b[j]->key);
        if (c == 0)
            c = strcmp(a[i]->value, b[j]->value);
        if (c == 0) {
            i++;
            j++;
        } else if (c < 0) {
            report(d, "safetensors __metadata__: \"%s\": \"%.60s\" only in A", a[i]->key, a[i]->value);
            i++;
        } else {
            report(d, "safetensors __metadata__: \"%s\": \"%.60s\" only in B", b[j]->key, b[j]->value);
            j++;
        }
    }
    free(a);
    free(b);
    return 0;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void json_brief(const cJSON *v, char *out, size_t cap)
{
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    if (!s) {
        snprintf(out, cap, "(absent)");
        return;
    }
    if (strlen(s) > 60)
        snprintf(out, cap, "%.57s...", s);
    else
        snprintf(out, cap, "%s", s);
    free(s);
}

static int num_equal(double x, double y)
{
    return x == y || fabs(x - y) <= 1e-12 * fmax(fabs(x), fabs(y));
}

static void json_diff(const char *file, const char *path, const cJSON *a, const cJSON *b, dstate *d)
{
    char sa[80], sb[80], sub[512];
    int ta = a->type & 0xff, tb = b->type & 0xff;
    if (ta != tb && !(cJSON_IsBool(a) && cJSON_IsBool(b))) {
        json_brief(a, sa, sizeof sa);
        json_brief(b, sb, sizeof sb);
        report(d, "%s: %s: %s vs %s", file, path[0] ? path : "(root)", sa, sb);
        return;
    }
    if (cJSON_IsObject(a)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, a)
        {
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", x->string);
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y)
                report(d, "%s: %s: only in A", file, sub);
            else
                json_diff(file, sub, x, y, d);
        }
        cJSON_ArrayForEach(x, b)
        {
            if (!cJSON_GetObjectItemCaseSensitive(a, x->string)) {
                snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", x->string);
                report(d, "%s: %s: only in B", file, sub);
            }
        }
        return;
    }
    if (cJSON_IsArray(a)) {
        int na = cJSON_GetArraySize(a), nb = cJSON_GetArraySize(b);
        if (na != nb)
            report(d, "%s: %s: %d vs %d elements", file, path, na, nb);
        for (int k = 0; k < na && k < nb; k++) {
            snprintf(sub, sizeof sub, "%s[%d]", path, k);
            json_diff(file, sub, cJSON_GetArrayItem(a, k), cJSON_GetArrayItem(b, k), d);
        }
        return;
    }
    int eq = cJSON_IsNumber(a)   ? num_equal(a->valuedouble, b->valuedouble)
             : cJSON_IsString(a) ? !strcmp(a->valuestring, b->valuestring)
             : cJSON_IsBool(a)   ? cJSON_IsTrue(a) == cJSON_IsTrue(b)
                                 : 1;
    if (!eq) {
        json_brief(a, sa, sizeof sa);
        json_brief(b, sb, sizeof sb);
        report(d, "%s: %s: %s vs %s", file, path, sa, sb);
    }
}

/* Returns 1 when the file exists on either side, 0 when on neither, <0 on error. */
static int diff_json_file(const char *da, const char *db, const char *name, dstate *d, lwq_error *e)
{
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/%s", da, name);
    snprintf(pb, sizeof pb, "%s/%s", db, name);
    char *ta = NULL, *tb = NULL;
    lwq_error ea = {0}, eb = {0};
    int ra = lwq_file_read_all(pa, 64u << 20, &ta, NULL, &ea);
    int rb = lwq_file_read_all(pb, 64u << 20, &tb, NULL, &eb);
    int rc = 1;
    if (ra == LWQ_ENOENT && rb == LWQ_ENOENT) {
        rc = 0;
    } else if (ra != 0 && ra != LWQ_ENOENT) {
        rc = lwq_errf(e, ra, "%s", ea.msg);
    } else if (rb != 0 && rb != LWQ_ENOENT) {
        rc = lwq_errf(e, rb, "%s", eb.msg);
    } else if (ra != 0 || rb != 0) {
        report(d, "%s: only in %s", name, ra == 0 ? "A" : "B");
    } else {
        cJSON *ja = cJSON_Parse(ta), *jb = cJSON_Parse(tb);
        if (!ja || !jb)
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: not valid JSON", !ja ? pa : pb);
        else
            json_diff(name, "", ja, jb, d);
        cJSON_Delete(ja);
        cJSON_Delete(jb);
    }
    free(ta);
    free(tb);
    return rc;
}

int lwq_cmd_diff(int argc, char **argv)
{
    static const struct option lo[] = {{"max", 1, 0, 'm'}, {"no-metadata", 0, 0, 'n'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int64_t maxn = 20;
    int c, meta = 1;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (lwq_tool_parse_i64("--max", optarg, 0, 1 << 30, &maxn) != 0)
                return LWQ_EXIT_ERR;
            break;
        case 'n': meta = 0; break;
        case 'h': usage(stdout); return LWQ_EXIT_OK;
        case ':': fprintf(stderr, "lwq diff: %s needs a value\n", argv[optind - 1]); return LWQ_EXIT_ERR;
        default: fprintf(stderr, "lwq diff: unknown option '%s'\n", argv[optind - 1]); return LWQ_EXIT_ERR;
        }
    }
    if (optind != argc - 2) {
        fprintf(stderr, "lwq diff: expected two directories (see lwq diff --help)\n");
        return LWQ_EXIT_ERR;
    }
    const char *da = argv[optind], *db = argv[optind + 1];
    lwq_ckpt A, B;
    lwq_error e = {0};
    if (lwq_ckpt_open(da, &A, &e) != 0) {
        fprintf(stderr, "lwq diff: A: %s\n", e.msg);
        return LWQ_EXIT_ERR;
    }
    if (lwq_ckpt_open(db, &B, &e) != 0) {
        fprintf(stderr, "lwq diff: B: %s\n", e.msg);
        lwq_ckpt_free(&A);
        return LWQ_EXIT_ERR;
    }
    dstate d = {.max_shown = (int)maxn};
    int same = 0, rc = diff_tensors(&A, &B, &d, &same, &e);
    if (rc >= 0 && meta)
        rc = diff_meta(&A, &B, &d, &e);
    int tensor_diffs = d.ndiff;
    int njson = 0;
    const char *jsons[] = {"config.json", "hf_quant_config.json"};
    for (int k = 0; rc >= 0 && k < 2; k++) {
        rc = diff_json_file(da, db, jsons[k], &d, &e);
        njson += rc > 0;
    }
    int ret;
    if (rc < 0) {
        fprintf(stderr, "lwq diff: %s\n", e.msg);
        ret = LWQ_EXIT_ERR;
    } else if (d.ndiff == 0) {
        char b[32];
        printf("identical: %d tensors (%s), %d config file%s\n", same,
               lwq_tool_bytes(A.total_bytes, b, sizeof b), njson, njson == 1 ? "" : "s");
        ret = LWQ_EXIT_OK;
    } else {
        if (d.ndiff > d.shown)
            printf("... %d more differences\n", d.ndiff - d.shown);
        printf("different: %d tensor/metadata difference%s (%d tensors identical), %d config "
               "difference%s\n",
               tensor_diffs, tensor_diffs == 1 ? "" : "s", same, d.ndiff - tensor_diffs,
               d.ndiff - tensor_diffs == 1 ? "" : "s");
        ret = LWQ_EXIT_DIFF;
    }
    lwq_ckpt_free(&A);
    lwq_ckpt_free(&B);
    return ret;
}
