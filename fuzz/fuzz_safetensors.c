/* fuzz/fuzz_safetensors.c — a whole safetensors file (length, JSON header, data) through
 * lwq_st_open_fd, as every checkpoint, shard and resume file is opened.
 *
 * Checked on success: what layout/checkpoint/safetensors.h promises callers (every entry inside the data
 * area, byte length = dtype x shape, entries in offset order without overlap, lookups by name
 * find each entry), and that lwq's writer, given the parsed tables, writes a header the parser
 * reads back to the same names, dtypes, shapes and metadata (lwq copies source tensor names into
 * its output). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz/fuzz_util.h"
#include "layout/checkpoint/safetensors.h"

static void check_entries(const lwq_st_file *f)
{
    uint64_t data_len = f->file_size - f->data_start, last_end = 0;
    for (int i = 0; i < f->n; i++) {
        const lwq_st_entry *t = &f->entries[i];
        if (t->begin > t->end || t->end > data_len)
            lwq_fuzz_fail("entry '%s' [%llu, %llu] outside the %llu-byte data area", t->name,
                          (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)data_len);
        if ((uint64_t)lwq_st_numel(t) * lwq_dtype_size(t->dtype) != t->end - t->begin)
            lwq_fuzz_fail("entry '%s': dtype x shape is not its byte length", t->name);
        if (t->end > t->begin) {
            if (t->begin < last_end)
                lwq_fuzz_fail("entry '%s' overlaps an earlier one (ending at %llu)", t->name,
                              (unsigned long long)last_end);
            last_end = t->end;
        }
        if (lwq_st_find(f, t->name) != i)
            lwq_fuzz_fail("lwq_st_find('%s') does not find entry %d", t->name, i);
    }
    for (int i = 0; i < f->nmeta; i++)
        if (!lwq_st_meta(f, f->meta[i].key))
            lwq_fuzz_fail("metadata key '%s' not found", f->meta[i].key);
}

/* The writer's header for the same tables, parsed again. */
static void check_rewrite(const lwq_st_file *f)
{
    lwq_st_out_tensor *t = calloc((size_t)f->n + 1, sizeof *t);
    if (!t)
        lwq_fuzz_fail("out of memory");
    for (int i = 0; i < f->n; i++) {
        t[i].name = f->entries[i].name;
        t[i].dtype = f->entries[i].dtype;
        t[i].ndim = f->entries[i].ndim;
        memcpy(t[i].shape, f->entries[i].shape, sizeof t[i].shape);
    }
    lwq_st_plan p;
    lwq_error e = {0};
    int rc = lwq_st_plan_make(t, f->n, f->meta, f->nmeta, &p, &e);
    lwq_fuzz_check_error(rc, &e, "lwq_st_plan_make");
    if (rc == 0) {
        lwq_st_file g;
        lwq_error e2 = {0};
        char *json = lwq_fuzz_cstr((const uint8_t *)p.header + 8, p.header_bytes - 8);
        rc = lwq_st_parse_header("rewritten", json, p.header_bytes - 8, p.header_bytes + p.data_bytes,
                                 &g, &e2);
        if (rc)
            lwq_fuzz_fail("the writer's header does not parse: %s", e2.msg);
        if (g.n != f->n || g.nmeta != f->nmeta)
            lwq_fuzz_fail("rewritten header has %d tensors and %d metadata keys, not %d and %d", g.n,
                          g.nmeta, f->n, f->nmeta);
        for (int i = 0; i < f->n; i++) {
            const lwq_st_entry *a = &f->entries[i];
            int k = lwq_st_find(&g, a->name);
            if (k < 0)
                lwq_fuzz_fail("tensor '%s' lost in the rewritten header", a->name);
            const lwq_st_entry *b = &g.entries[k];
            if (a->dtype != b->dtype || a->ndim != b->ndim ||
                memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) != 0)
                lwq_fuzz_fail("tensor '%s' changed dtype or shape when rewritten", a->name);
        }
        for (int i = 0; i < f->nmeta; i++) {
            const char *v = lwq_st_meta(&g, f->meta[i].key);
            if (!v || strcmp(v, f->meta[i].value) != 0)
                lwq_fuzz_fail("metadata '%s' changed when rewritten", f->meta[i].key);
        }
        lwq_st_free(&g);
        free(json);
        lwq_st_plan_free(&p);
    }
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static int fd = -1;
    if (fd < 0) {
        lwq_fuzz_quiet();
        if ((fd = memfd_create("fuzz.safetensors", 0)) < 0)
            lwq_fuzz_fail("memfd_create failed");
    }
    if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, d, n, 0) != (ssize_t)n))
        lwq_fuzz_fail("writing the memfd failed");
    lwq_st_file f;
    lwq_error e = {0};
    int rc = lwq_st_open_fd(fd, "fuzz.safetensors", &f, &e);
    lwq_fuzz_check_error(rc, &e, "lwq_st_open_fd");
    if (rc == 0) {
        check_entries(&f);
        check_rewrite(&f);
        lwq_st_free(&f);
    }
    return 0;
}
