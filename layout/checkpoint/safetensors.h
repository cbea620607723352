/* layout/checkpoint/safetensors.h — read, validate and write safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
 * then the data; offsets are relative to the end of the header.  Readers must not assume N is a
 * multiple of 8.  Every size and offset from a header is treated as hostile: it is checked
 * against the file size and against overflow before use (lwq_st_open), so callers may trust
 * an opened lwq_st_file's entries.
 *
 * Thread-safety: no global state; distinct lwq_st_file objects may be used from any thread.
 *
 * The writer is deterministic: tensors sorted by name, header padded with spaces to a multiple
 * of 8, data contiguous in header order with no gaps. */
#ifndef LWQ_LAYOUT_SAFETENSORS_H
#define LWQ_LAYOUT_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"

#define LWQ_ST_MAX_DIMS 8
#define LWQ_ST_MAX_HEADER (100u * 1000u * 1000u) /* 100 MB: larger headers are refused */

typedef struct lwq_st_entry {
    char *name;
    lwq_dtype dtype;
    int ndim;
    int64_t shape[LWQ_ST_MAX_DIMS];
    uint64_t begin, end; /* relative to data_start; end - begin == numel * dtype size */
} lwq_st_entry;

typedef struct lwq_st_kv {
    char *key, *value;
} lwq_st_kv;

typedef struct lwq_st_file {
    char *path;
    uint64_t file_size;
    uint64_t header_len;  /* N */
    uint64_t data_start;  /* 8 + N */
    int n;                /* entries, in file offset order */
    lwq_st_entry *entries;
    int *by_name;         /* entry indexes sorted by name (for lwq_st_find) */
    int nmeta;            /* __metadata__ pairs, in header order */
    lwq_st_kv *meta;
} lwq_st_file;

/* Open and fully validate `path`: header length within the file and <= LWQ_ST_MAX_HEADER,
 * valid JSON, known dtypes, shapes non-negative and overflow-free, dtype x shape == byte length,
 * offsets within the data area and non-overlapping, no duplicate names.  On error the message
 * names the file and the tensor. */
int lwq_st_open(const char *path, lwq_st_file *f, lwq_error *e);
/* The same on a file the caller opened (the engine opens its output files through the io/sys.h
 * table); `path` names it in errors; fd stays open. */
int lwq_st_open_fd(int fd, const char *path, lwq_st_file *f, lwq_error *e);
/* Parse a header held in memory (for tests and for already-read headers). */
int lwq_st_parse_header(const char *path_for_errors, const char *json, uint64_t header_len,
                        uint64_t file_size, lwq_st_file *f, lwq_error *e);
void lwq_st_free(lwq_st_file *f);
/* Index of `name` or -1 (binary search). */
int lwq_st_find(const lwq_st_file *f, const char *name);
/* Read `n` bytes at absolute file offset `off` of f->path into buf (pread loop; a short file is
 * LWQ_EFORMAT naming the path and offset).  For tools and tests; the engine reads through io/. */
int lwq_st_read(const lwq_st_file *f, uint64_t off, void *buf, uint64_t n, lwq_error *e);
/* Value of a __metadata__ key or NULL. */
const char *lwq_st_meta(const lwq_st_file *f, const char *key);
/* Number of elements of an entry. */
int64_t lwq_st_numel(const lwq_st_entry *t);

/* ---- writer ---------------------------------------------------------------------------------- */

typedef struct lwq_st_out_tensor {
    const char *name;
    lwq_dtype dtype;
    int ndim;
    int64_t shape[LWQ_ST_MAX_DIMS];
    const void *data; /* may be NULL when the data is streamed by the caller */
} lwq_st_out_tensor;

typedef struct lwq_st_plan {
    char *header;          /* 8-byte length + JSON + space padding */
    uint64_t header_bytes; /* total bytes before the data */
    int n;
    int *order;            /* order[i] = index into the caller's array of the i-th tensor written */
    uint64_t *offset;      /* offset[k] = data offset (from data start) of caller's tensor k */
    uint64_t *nbytes;      /* nbytes[k] */
    uint64_t data_bytes;
} lwq_st_plan;

/* Lay out n tensors (sorted by name) and build the header.  `meta` may be NULL. */
int lwq_st_plan_make(const lwq_st_out_tensor *t, int n, const lwq_st_kv *meta, int nmeta,
                     lwq_st_plan *p, lwq_error *e);
/* A caller streaming data writes p->header (p->header_bytes bytes), then for i = 0..n-1 the
 * p->nbytes[p->order[i]] bytes of tensor p->order[i]; the file is then header_bytes + data_bytes
 * long. */
void lwq_st_plan_free(lwq_st_plan *p);
/* Write to `path` (plain write, no fsync: durable writes belong to io/). */
int lwq_st_write_file(const char *path, const lwq_st_out_tensor *t, int n, const lwq_st_kv *meta,
                      int nmeta, lwq_error *e);

#endif
