/* io/extents.c — job ranges -> merged, 4 KiB-aligned extents laid out in one buffer (reader.h). */
#include <stdlib.h>
#include <string.h>

#include "io/reader.h"

typedef struct {
    uint32_t file;
    uint64_t off, end;
    size_t idx;
} sorted_range;

static int cmp_range(const void *a, const void *b)
{
    const sorted_range *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

void lwq_io_plan_free(lwq_io_plan *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->nfiles; i++)
        free(p->files[i]);
    free(p->files);
    free(p->ext);
    memset(p, 0, sizeof *p);
}

/* Index of `path` in p->files, adding it when new; -1 on allocation failure. */
static long file_index(lwq_io_plan *p, const char *path, uint32_t *last)
{
    if (*last < p->nfiles && !strcmp(p->files[*last], path))
        return *last;
    for (uint32_t i = 0; i < p->nfiles; i++)
        if (!strcmp(p->files[i], path))
            return *last = i;
    char **f = realloc(p->files, (p->nfiles + 1) * sizeof *f);
    if (!f)
        return -1;
    p->files = f;
    if (!(f[p->nfiles] = strdup(path)))
        return -1;
    return *last = p->nfiles++;
}

int lwq_io_plan_build(lwq_io_plan *p, lwq_io_range *r, size_t n, uint64_t merge_gap,
                      lwq_error *e)
{
    memset(p, 0, sizeof *p);
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / sizeof(sorted_range))
        return lwq_errf(e, LWQ_ENOMEM, "io plan: %zu ranges", n);
    sorted_range *s = malloc(n * sizeof *s);
    if (!s)
        return lwq_errf(e, LWQ_ENOMEM, "io plan: cannot allocate %zu ranges", n);
    uint32_t last = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].path || !r[i].path[0]) {
            rc = lwq_errf(e, LWQ_EINVAL, "io plan: range %zu has no file path", i);
            goto fail;
        }
        /* Keep every aligned end representable: offset + length + 4 KiB must not overflow. */
        if (r[i].length > UINT64_MAX - LWQ_IO_ALIGN ||
            r[i].offset > UINT64_MAX - LWQ_IO_ALIGN - r[i].length) {
            rc = lwq_errf(e, LWQ_EINVAL, "io plan: %s: range at offset %llu of %llu bytes overflows",
                          r[i].path, (unsigned long long)r[i].offset,
                          (unsigned long long)r[i].length);
            goto fail;
        }
        long f = file_index(p, r[i].path, &last);
        if (f < 0) {
            rc = lwq_errf(e, LWQ_ENOMEM, "io plan: out of memory for file names");
            goto fail;
        }
        s[i] = (sorted_range){(uint32_t)f, r[i].offset, r[i].offset + r[i].length, i};
    }
    qsort(s, n, sizeof *s, cmp_range);

    /* Pass 1: count extents; pass 2: fill them.  Gaps use the running maximum end so a range
     * nested in an earlier one never splits an extent. */
    const uint64_t A = LWQ_IO_ALIGN;
    size_t next = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0;
        uint64_t buf = 0;
        for (size_t i = 0; i < n;) {
            uint64_t start = s[i].off, end = s[i].end;
            size_t j = i + 1;
            while (j < n && s[j].file == s[i].file &&
                   (s[j].off <= end || s[j].off - end <= merge_gap)) {
                if (s[j].end > end)
                    end = s[j].end;
                j++;
            }
            uint64_t astart = start / A * A;
            uint64_t aend = (end + A - 1) / A * A;
            if (aend == astart)
                aend += A; /* an empty range still gets a (tiny) place of its own */
            if (pass == 1) {
                lwq_io_extent *x = &p->ext[k];
                *x = (lwq_io_extent){s[i].file, astart, aend - astart, end, buf};
                for (size_t t = i; t < j; t++)
                    r[s[t].idx].dst = buf + (s[t].off - astart);
            }
            if (aend - astart > UINT64_MAX - buf) {
                rc = lwq_errf(e, LWQ_EINVAL, "io plan: job larger than 2^64 bytes");
                goto fail;
            }
            buf += aend - astart;
            k++;
            i = j;
        }
        if (pass == 0) {
            next = k;
            p->ext = calloc(next, sizeof *p->ext);
            if (!p->ext) {
                rc = lwq_errf(e, LWQ_ENOMEM, "io plan: cannot allocate %zu extents", next);
                goto fail;
            }
        } else {
            p->next = next;
            p->bytes = buf;
        }
    }
    for (size_t i = 0; i < n; i++)
        p->payload += r[i].length;
    free(s);
    return 0;
fail:
    free(s);
    lwq_io_plan_free(p);
    return rc;
}
