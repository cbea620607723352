/* layout/recipe/yaml_doc.h — a bounded YAML reader (libyaml events -> a small tree) for recipe files.
 *
 * YAML recipe files are untrusted input.  The reader refuses what could make it run or allocate
 * without bound or mean something other than it says: aliases (`*name`, the "billion laughs"
 * expansion), explicit tags (`!!python/...`), more than two documents, nesting deeper than
 * LWQ_YAML_MAX_DEPTH, more than LWQ_YAML_MAX_NODES nodes, scalars longer than
 * LWQ_YAML_MAX_SCALAR bytes, non-scalar or duplicate mapping keys.  Every error names the file
 * and the line.
 *
 * Scalars keep their text and whether they were plain (unquoted): PyYAML's `safe_load` (what
 * Model Optimizer uses) resolves only plain scalars to null / bool / int / float, and the helpers
 * below do the same with YAML 1.1's spellings (yes/no/on/off are booleans there). */
#ifndef LWQ_LAYOUT_YAML_DOC_H
#define LWQ_LAYOUT_YAML_DOC_H

#include <stddef.h>

#include "core/sys/error.h"

#define LWQ_YAML_MAX_DEPTH 64
#define LWQ_YAML_MAX_NODES 100000
#define LWQ_YAML_MAX_SCALAR 65536

typedef enum lwq_ykind { LWQ_Y_SCALAR = 0, LWQ_Y_SEQ, LWQ_Y_MAP } lwq_ykind;

typedef struct lwq_ynode {
    lwq_ykind kind;
    int line;                 /* 1-based line where the node starts */
    int plain;                /* scalar written without quotes or block style */
    char *str;                /* scalar text (NUL-terminated) */
    int n;                    /* seq: items; map: key/value pairs */
    struct lwq_ynode **kids;  /* seq: n items; map: 2n nodes, key then value */
    int nkids, cap;           /* slots used (a key may wait for its value) and allocated */
} lwq_ynode;

typedef struct lwq_ydoc {
    int ndocs;                /* 0, 1 or 2 */
    lwq_ynode *docs[2];
    char schema[160];         /* "# modelopt-schema: X" from the leading comments, or "" */
} lwq_ydoc;

/* Parse `len` bytes of `buf`; `path` is for messages.  On error nothing is left allocated. */
int lwq_yaml_parse(const char *path, const char *buf, size_t len, lwq_ydoc *out, lwq_error *e);
void lwq_yaml_free(lwq_ydoc *d);

/* The value of `key` in a mapping, or NULL. */
const lwq_ynode *lwq_y_get(const lwq_ynode *map, const char *key);
int lwq_y_is_null(const lwq_ynode *n);
/* 0 and *out set when the node is a YAML 1.1 boolean; else -1. */
int lwq_y_bool(const lwq_ynode *n, int *out);
/* 0 and *out set when the node is a plain decimal integer; else -1. */
int lwq_y_int(const lwq_ynode *n, long long *out);
/* 0 and *out set when the node is a plain number (int or float); else -1. */
int lwq_y_number(const lwq_ynode *n, double *out);
/* The text of a scalar that is not null (a string, or any plain scalar's text); NULL otherwise. */
const char *lwq_y_str(const lwq_ynode *n);

#endif
