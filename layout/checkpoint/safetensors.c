/* layout/checkpoint/safetensors.c — safetensors header validation and the deterministic writer.
 * Contract in safetensors.h.  Every number from a header is checked before use: integral,
 * non-negative, below 2^53 (the largest integer a JSON double holds exactly), and every product
 * is overflow-checked, so an opened lwq_st_file can be trusted by its callers. */
#include "layout/checkpoint/safetensors.h"

#include "core/sys/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53 */

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* A JSON number that is a non-negative integer representable exactly. */
static int json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > MAX_EXACT_INT || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

void lwq_st_free(lwq_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++)
        free(f->entries[i].name);
    free(f->entries);
    free(f->by_name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->meta);
    free(f->path);
    memset(f, 0, sizeof *f);
}

int64_t lwq_st_numel(const lwq_st_entry *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

static int parse_meta(const char *path, const cJSON *m, lwq_st_file *f, lwq_error *e)
{
    if (cJSON_IsNull(m))
        return 0;
    if (!cJSON_IsObject(m))
        return lwq_errf(e, LWQ_EFORMAT, "%s: __metadata__ is not an object", path);
    int n = cJSON_GetArraySize(m);
    f->meta = calloc((size_t)n + 1, sizeof *f->meta);
    if (!f->meta)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory for __metadata__", path);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m)
    {
        if (!cJSON_IsString(kv))
            return lwq_errf(e, LWQ_EFORMAT, "%s: __metadata__ value of '%s' is not a string", path,
                            kv->string);
        for (int i = 0; i < f->nmeta; i++)
            if (!strcmp(f->meta[i].key, kv->string))
                return lwq_errf(e, LWQ_EFORMAT, "%s: duplicate __metadata__ key '%s'", path,
                                kv->string);
        lwq_st_kv *d = &f->meta[f->nmeta];
        d->key = dupstr(kv->string);
        d->value = dupstr(kv->valuestring);
        f->nmeta++;
        if (!d->key || !d->value)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory for __metadata__", path);
    }
    return 0;
}

static int parse_entry(const char *path, const cJSON *t, uint64_t data_len, lwq_st_entry *out,
                       lwq_error *e)
{
    const char *name = t->string;
    if (!name[0])
        return lwq_errf(e, LWQ_EFORMAT, "%s: a tensor has an empty name", path);
    if (!cJSON_IsObject(t))
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': entry is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(dt))
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", path,
                        name);
    if (lwq_dtype_parse(dt->valuestring, &out->dtype) != 0)
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': unknown dtype \"%s\"", path, name,
                        dt->valuestring);
    if (!cJSON_IsArray(sh))
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': missing or non-array \"shape\"", path,
                        name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > LWQ_ST_MAX_DIMS)
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': %d dims, at most %d supported", path,
                        name, nd, LWQ_ST_MAX_DIMS);
    out->ndim = nd;
    /* numel, and the product of the non-zero dimensions: a zero-element [2^53, 1024, 0] has no
     * bytes, but any code multiplying its first two dimensions overflows int64; every partial
     * product of a shape must stay below 2^53, whatever the dimensions' order */
    uint64_t numel = 1, nonzero = 1;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh)
    {
        uint64_t v;
        if (json_uint(d, &v) != 0)
            return lwq_errf(e, LWQ_EFORMAT,
                            "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name,
                            k);
        out->shape[k++] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel) ||
            __builtin_mul_overflow(nonzero, v ? v : 1, &nonzero) || nonzero > (uint64_t)MAX_EXACT_INT)
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': the product of the dimensions up to shape[%d] "
                            "overflows (limit 2^53 elements, zero dimensions aside)", path, name, k - 1);
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)lwq_dtype_size(out->dtype), &nbytes) ||
        nbytes > (uint64_t)MAX_EXACT_INT)
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': byte size overflows", path, name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        json_uint(cJSON_GetArrayItem(off, 0), &out->begin) != 0 ||
        json_uint(cJSON_GetArrayItem(off, 1), &out->end) != 0)
        return lwq_errf(e, LWQ_EFORMAT,
                        "%s: tensor '%s': \"data_offsets\" must be two non-negative integers",
                        path, name);
    if (out->end < out->begin)
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin",
                        path, name, (unsigned long long)out->begin, (unsigned long long)out->end);
    if (out->end > data_len)
        return lwq_errf(e, LWQ_EFORMAT,
                        "%s: tensor '%s': data_offsets [%llu, %llu] out of range: data area is "
                        "%llu bytes",
                        path, name, (unsigned long long)out->begin, (unsigned long long)out->end,
                        (unsigned long long)data_len);
    if (out->end - out->begin != nbytes)
        return lwq_errf(e, LWQ_EFORMAT,
                        "%s: tensor '%s': %s x %llu elements = %llu bytes, but data_offsets span "
                        "%llu bytes",
                        path, name, lwq_dtype_name(out->dtype), (unsigned long long)numel,
                        (unsigned long long)nbytes, (unsigned long long)(out->end - out->begin));
    out->name = dupstr(name);
    if (!out->name)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const lwq_st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* qsort_r (glibc) keeps the comparators free of globals, so parsing is thread-safe. */
static int cmp_by_name_idx(const void *a, const void *b, void *ctx)
{
    const lwq_st_entry *en = ctx;
    return strcmp(en[*(const int *)a].name, en[*(const int *)b].name);
}

int lwq_st_parse_header(const char *path, const char *json, uint64_t header_len,
                        uint64_t file_size, lwq_st_file *f, lwq_error *e)
{
    memset(f, 0, sizeof *f);
    int rc = 0;
    cJSON *root = NULL;
    if (header_len > LWQ_ST_MAX_HEADER)
        return lwq_errf(e, LWQ_EFORMAT, "%s: header length %llu exceeds the %u byte limit", path,
                        (unsigned long long)header_len, LWQ_ST_MAX_HEADER);
    if (file_size < 8 || header_len > file_size - 8)
        return lwq_errf(e, LWQ_EFORMAT,
                        "%s: header length %llu runs beyond the end of the file (%llu bytes)",
                        path, (unsigned long long)header_len, (unsigned long long)file_size);
    f->path = dupstr(path);
    if (!f->path)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    f->file_size = file_size;
    f->header_len = header_len;
    f->data_start = 8 + header_len;
    uint64_t data_len = file_size - f->data_start;

    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(json, (size_t)header_len, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - json) : 0;
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: header is not valid JSON (error near header byte %zu)",
                      path, at);
        goto out;
    }
    /* Writers pad the header with spaces; anything else after the JSON value is corruption. */
    for (const char *p = end; p < json + header_len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = lwq_errf(e, LWQ_EFORMAT,
                          "%s: unexpected byte 0x%02x after the JSON header at header byte %zu",
                          path, (unsigned char)*p, (size_t)(p - json));
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: header is not a JSON object", path);
        goto out;
    }
    int total = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)total + 1, sizeof *f->entries);
    if (!f->entries) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory for %d header entries", path, total);
        goto out;
    }
    int seen_meta = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        if (!strcmp(it->string, "__metadata__")) {
            if (seen_meta++) {
                rc = lwq_errf(e, LWQ_EFORMAT, "%s: duplicate __metadata__", path);
                goto out;
            }
            if ((rc = parse_meta(path, it, f, e)) != 0)
                goto out;
            continue;
        }
        rc = parse_entry(path, it, data_len, &f->entries[f->n], e);
        if (rc != 0)
            goto out;
        f->n++;
    }

    /* Name index; duplicates (cJSON keeps repeated keys) show up as neighbours. */
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    if (!f->by_name) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    qsort(f->entries, (size_t)f->n, sizeof *f->entries, cmp_by_offset);
    for (int i = 0; i < f->n; i++)
        f->by_name[i] = i;
    qsort_r(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_by_name_idx, f->entries);
    for (int i = 1; i < f->n; i++) {
        const char *a = f->entries[f->by_name[i - 1]].name, *b = f->entries[f->by_name[i]].name;
        if (!strcmp(a, b)) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: duplicate tensor name '%s'", path, a);
            goto out;
        }
    }
    /* Zero-byte tensors occupy no range, so they cannot overlap anything. */
    const lwq_st_entry *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const lwq_st_entry *t = &f->entries[i];
        if (t->begin == t->end)
            continue;
        if (prev && t->begin < prev->end) {
            rc = lwq_errf(e, LWQ_EFORMAT,
                          "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", path,
                          prev->name, (unsigned long long)prev->begin,
                          (unsigned long long)prev->end, t->name, (unsigned long long)t->begin,
                          (unsigned long long)t->end);
            goto out;
        }
        prev = t;
    }
out:
    cJSON_Delete(root);
    if (rc != 0)
        lwq_st_free(f);
    return rc;
}

int lwq_st_read(const lwq_st_file *f, uint64_t off, void *buf, uint64_t n, lwq_error *e)
{
    int fd = lwq_file_open_regular(f->path, 0, NULL, e);
    if (fd < 0)
        return fd;
    int rc = 0;
    uint64_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, (size_t)(n - done), (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = lwq_errsys(e, -errno, "%s: read at offset %llu", f->path,
                            (unsigned long long)(off + done));
            break;
        }
        if (r == 0) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: file ends at offset %llu, expected %llu more bytes",
                          f->path, (unsigned long long)(off + done),
                          (unsigned long long)(n - done));
            break;
        }
        done += (uint64_t)r;
    }
    close(fd);
    return rc;
}

int lwq_st_open(const char *path, lwq_st_file *f, lwq_error *e)
{
    memset(f, 0, sizeof *f);
    int fd = lwq_file_open_regular(path, 0, NULL, e);
    if (fd < 0)
        return fd;
    int rc = lwq_st_open_fd(fd, path, f, e);
    close(fd);
    return rc;
}

int lwq_st_open_fd(int fd, const char *path, lwq_st_file *f, lwq_error *e)
{
    memset(f, 0, sizeof *f);
    int rc = 0;
    char *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = lwq_errsys(e, -errno, "%s: stat", path);
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: not a regular file", path);
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: file is %llu bytes, shorter than the 8-byte header length",
                      path, (unsigned long long)size);
        goto out;
    }
    unsigned char lb[8];
    ssize_t got;
    while ((got = pread(fd, lb, 8, 0)) < 0 && errno == EINTR)
        ;
    if (got != 8) {
        rc = lwq_errsys(e, LWQ_EIO, "%s: reading the header length", path);
        goto out;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | lb[i];
    if (n > LWQ_ST_MAX_HEADER) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: header length %llu exceeds the %u byte limit", path,
                      (unsigned long long)n, LWQ_ST_MAX_HEADER);
        goto out;
    }
    if (n > size - 8) {
        rc = lwq_errf(e, LWQ_EFORMAT,
                      "%s: header length %llu runs beyond the end of the file (%llu bytes)", path,
                      (unsigned long long)n, (unsigned long long)size);
        goto out;
    }
    buf = malloc(n + 1);
    if (!buf) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu header bytes", path,
                      (unsigned long long)n);
        goto out;
    }
    for (uint64_t done = 0; done < n;) {
        ssize_t r = pread(fd, buf + done, (size_t)(n - done), (off_t)(8 + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? lwq_errsys(e, -errno, "%s: reading the header", path)
                       : lwq_errf(e, LWQ_EFORMAT, "%s: file truncated inside the header", path);
            goto out;
        }
        done += (uint64_t)r;
    }
    buf[n] = 0;
    rc = lwq_st_parse_header(path, buf, n, size, f, e);
out:
    free(buf);
    return rc;
}

int lwq_st_find(const lwq_st_file *f, const char *name)
{
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int i = f->by_name[mid];
        int c = strcmp(f->entries[i].name, name);
        if (c == 0)
            return i;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

const char *lwq_st_meta(const lwq_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta[i].key, key))
            return f->meta[i].value;
    return NULL;
}

/* ---- writer ---------------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* JSON string with the escapes RFC 8259 requires; bytes >= 0x80 pass through (UTF-8). */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_out_name(const void *a, const void *b, void *ctx)
{
    const lwq_st_out_tensor *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

void lwq_st_plan_free(lwq_st_plan *p)
{
    if (!p)
        return;
    free(p->header);
    free(p->order);
    free(p->offset);
    free(p->nbytes);
    memset(p, 0, sizeof *p);
}

int lwq_st_plan_make(const lwq_st_out_tensor *t, int n, const lwq_st_kv *meta, int nmeta,
                     lwq_st_plan *p, lwq_error *e)
{
    memset(p, 0, sizeof *p);
    if (n < 0 || nmeta < 0)
        return lwq_errf(e, LWQ_EINVAL, "safetensors writer: negative tensor count");
    p->n = n;
    p->order = malloc(((size_t)n + 1) * sizeof *p->order);
    p->offset = calloc((size_t)n + 1, sizeof *p->offset);
    p->nbytes = calloc((size_t)n + 1, sizeof *p->nbytes);
    if (!p->order || !p->offset || !p->nbytes) {
        lwq_st_plan_free(p);
        return lwq_errf(e, LWQ_ENOMEM, "safetensors writer: out of memory for %d tensors", n);
    }
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__")) {
            lwq_st_plan_free(p);
            return lwq_errf(e, LWQ_EINVAL, "safetensors writer: tensor %d has an invalid name", i);
        }
        if ((unsigned)t[i].dtype >= LWQ_DTYPE_COUNT || t[i].ndim < 0 ||
            t[i].ndim > LWQ_ST_MAX_DIMS) {
            lwq_st_plan_free(p);
            return lwq_errf(e, LWQ_EINVAL, "safetensors writer: tensor '%s': bad dtype or ndim",
                            t[i].name);
        }
        p->order[i] = i;
    }
    qsort_r(p->order, (size_t)n, sizeof *p->order, cmp_out_name, (void *)t);
    for (int i = 1; i < n; i++) {
        if (!strcmp(t[p->order[i - 1]].name, t[p->order[i]].name)) {
            const char *dup = t[p->order[i]].name;
            lwq_st_plan_free(p);
            return lwq_errf(e, LWQ_EINVAL, "safetensors writer: duplicate tensor name '%s'", dup);
        }
    }

    sbuf b = {0};
    sb_put(&b, "\0\0\0\0\0\0\0\0", 8); /* length, filled in below */
    sb_str(&b, "{");
    int first = 1;
    if (nmeta > 0) {
        sb_str(&b, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i)
                sb_str(&b, ",");
            sb_json_str(&b, meta[i].key);
            sb_str(&b, ":");
            sb_json_str(&b, meta[i].value);
        }
        sb_str(&b, "}");
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int k = p->order[i];
        uint64_t numel = 1;
        for (int d = 0; d < t[k].ndim; d++) {
            if (t[k].shape[d] < 0 ||
                __builtin_mul_overflow(numel, (uint64_t)t[k].shape[d], &numel)) {
                free(b.p);
                const char *nm = t[k].name;
                lwq_st_plan_free(p);
                return lwq_errf(e, LWQ_EINVAL, "safetensors writer: tensor '%s': bad shape", nm);
            }
        }
        uint64_t nb = numel * lwq_dtype_size(t[k].dtype);
        p->offset[k] = off;
        p->nbytes[k] = nb;
        char num[64];
        if (!first)
            sb_str(&b, ",");
        first = 0;
        sb_json_str(&b, t[k].name);
        sb_str(&b, ":{\"dtype\":\"");
        sb_str(&b, lwq_dtype_name(t[k].dtype));
        sb_str(&b, "\",\"shape\":[");
        for (int d = 0; d < t[k].ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t[k].shape[d]);
            sb_str(&b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nb));
        sb_str(&b, num);
        off += nb;
    }
    sb_str(&b, "}");
    while ((b.n - 8) % 8 != 0)
        sb_str(&b, " ");
    if (b.oom) {
        free(b.p);
        lwq_st_plan_free(p);
        return lwq_errf(e, LWQ_ENOMEM, "safetensors writer: out of memory for the header");
    }
    uint64_t hl = b.n - 8;
    if (hl > LWQ_ST_MAX_HEADER) {
        free(b.p);
        lwq_st_plan_free(p);
        return lwq_errf(e, LWQ_EINVAL, "safetensors writer: header of %llu bytes exceeds the limit",
                        (unsigned long long)hl);
    }
    for (int i = 0; i < 8; i++)
        b.p[i] = (char)((hl >> (8 * i)) & 0xff);
    p->header = b.p;
    p->header_bytes = b.n;
    p->data_bytes = off;
    return 0;
}

static int st_write_stream(FILE *fp, const char *path, const lwq_st_out_tensor *t, int n,
                        const lwq_st_kv *meta, int nmeta, lwq_error *e)
{
    for (int i = 0; i < n; i++)
        if (!t[i].data)
            return lwq_errf(e, LWQ_EINVAL, "%s: tensor '%s' has no data", path,
                            t[i].name ? t[i].name : "?");
    lwq_st_plan p;
    int rc = lwq_st_plan_make(t, n, meta, nmeta, &p, e);
    if (rc != 0)
        return rc;
    if (fwrite(p.header, 1, p.header_bytes, fp) != p.header_bytes)
        rc = lwq_errsys(e, LWQ_EIO, "%s: writing the header", path);
    for (int i = 0; rc == 0 && i < n; i++) {
        int k = p.order[i];
        if (p.nbytes[k] && fwrite(t[k].data, 1, p.nbytes[k], fp) != p.nbytes[k])
            rc = lwq_errsys(e, errno == ENOSPC ? LWQ_ENOSPC : LWQ_EIO, "%s: writing tensor '%s'",
                            path, t[k].name);
    }
    lwq_st_plan_free(&p);
    return rc;
}

int lwq_st_write_file(const char *path, const lwq_st_out_tensor *t, int n, const lwq_st_kv *meta,
                      int nmeta, lwq_error *e)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return lwq_errsys(e, -errno, "%s: create", path);
    int rc = st_write_stream(fp, path, t, n, meta, nmeta, e);
    if (fclose(fp) != 0 && rc == 0)
        rc = lwq_errsys(e, errno == ENOSPC ? LWQ_ENOSPC : LWQ_EIO, "%s: close", path);
    return rc;
}
