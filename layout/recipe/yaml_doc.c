/* layout/recipe/yaml_doc.c — libyaml's event stream into a bounded tree (see yaml_doc.h). */
#include "layout/recipe/yaml_doc.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static void node_free(lwq_ynode *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->nkids; i++)
        node_free(n->kids[i]);
    free(n->kids);
    free(n->str);
    free(n);
}

void lwq_yaml_free(lwq_ydoc *d)
{
    if (!d)
        return;
    for (int i = 0; i < 2; i++)
        node_free(d->docs[i]);
    memset(d, 0, sizeof *d);
}

typedef struct builder {
    const char *path;
    lwq_ynode *stack[LWQ_YAML_MAX_DEPTH];
    int depth;
    long nodes;
    lwq_ydoc *doc;
} builder;

/* Attach c to the open container (or make it the document's root); c is owned by the tree
 * afterwards, or freed here when it cannot be attached. */
static int add_child(builder *b, lwq_ynode *c, lwq_error *e)
{
    if (b->depth == 0) {
        b->doc->docs[b->doc->ndocs - 1] = c;
        return 0;
    }
    lwq_ynode *p = b->stack[b->depth - 1];
    if (p->nkids == p->cap) {
        int nc = p->cap ? p->cap * 2 : 8;
        lwq_ynode **k = realloc(p->kids, (size_t)nc * sizeof *k);
        if (!k) {
            node_free(c);
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", b->path);
        }
        p->kids = k;
        p->cap = nc;
    }
    int slot = p->nkids++;
    p->kids[slot] = c;
    if (p->kind == LWQ_Y_SEQ || slot % 2 == 1)
        p->n++;
    else if (c->kind != LWQ_Y_SCALAR)
        return lwq_errf(e, LWQ_EFORMAT, "%s:%d: a mapping key must be a plain value, not a %s", b->path, c->line,
                        c->kind == LWQ_Y_MAP ? "mapping" : "list");
    return 0;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp((*(lwq_ynode *const *)a)->str, (*(lwq_ynode *const *)b)->str);
}

/* Duplicate keys: sorted copy of the key pointers, O(n log n). */
static int check_dups(const char *path, const lwq_ynode *m, lwq_error *e)
{
    if (m->n < 2)
        return 0;
    lwq_ynode **k = malloc((size_t)m->n * sizeof *k);
    if (!k)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < m->n; i++)
        k[i] = m->kids[2 * i];
    qsort(k, (size_t)m->n, sizeof *k, key_cmp);
    int rc = 0;
    for (int i = 1; i < m->n && !rc; i++)
        if (!strcmp(k[i - 1]->str, k[i]->str))
            rc = lwq_errf(e, LWQ_EFORMAT, "%s:%d: duplicate key \"%s\"", path,
                          k[i]->line > k[i - 1]->line ? k[i]->line : k[i - 1]->line, k[i]->str);
    free(k);
    return rc;
}

static lwq_ynode *new_node(builder *b, lwq_ykind kind, int line, lwq_error *e)
{
    if (++b->nodes > LWQ_YAML_MAX_NODES) {
        lwq_errf(e, LWQ_EFORMAT, "%s:%d: more than %d YAML nodes", b->path, line, LWQ_YAML_MAX_NODES);
        return NULL;
    }
    lwq_ynode *n = calloc(1, sizeof *n);
    if (!n) {
        lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", b->path);
        return NULL;
    }
    n->kind = kind;
    n->line = line;
    return n;
}

static int on_event(builder *b, const yaml_event_t *ev, lwq_error *e)
{
    int line = (int)ev->start_mark.line + 1;
    const char *path = b->path;
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (b->doc->ndocs == 2)
            return lwq_errf(e, LWQ_EFORMAT, "%s:%d: more than 2 YAML documents (a recipe or unit has one, or an "
                            "imports header and a list)", path, line);
        b->doc->ndocs++;
        return 0;
    case YAML_ALIAS_EVENT:
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s:%d: YAML aliases (*%s) are not supported in recipes", path, line,
                        (const char *)ev->data.alias.anchor);
    case YAML_SCALAR_EVENT: {
        if (ev->data.scalar.tag)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s:%d: YAML tags (%s) are not supported in recipes", path, line,
                            (const char *)ev->data.scalar.tag);
        if (ev->data.scalar.length > LWQ_YAML_MAX_SCALAR)
            return lwq_errf(e, LWQ_EFORMAT, "%s:%d: a value longer than %d bytes", path, line, LWQ_YAML_MAX_SCALAR);
        if (memchr(ev->data.scalar.value, 0, ev->data.scalar.length))
            return lwq_errf(e, LWQ_EFORMAT, "%s:%d: a value holds a NUL character", path, line);
        lwq_ynode *n = new_node(b, LWQ_Y_SCALAR, line, e);
        if (!n)
            return LWQ_EFORMAT;
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        n->str = malloc(ev->data.scalar.length + 1);
        if (!n->str) {
            node_free(n);
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
        }
        memcpy(n->str, ev->data.scalar.value, ev->data.scalar.length);
        n->str[ev->data.scalar.length] = 0;
        return add_child(b, n, e);
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        const yaml_char_t *tag = ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.tag
                                                                       : ev->data.mapping_start.tag;
        if (tag)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s:%d: YAML tags (%s) are not supported in recipes", path, line,
                            (const char *)tag);
        if (b->depth >= LWQ_YAML_MAX_DEPTH)
            return lwq_errf(e, LWQ_EFORMAT, "%s:%d: nested deeper than %d levels", path, line, LWQ_YAML_MAX_DEPTH);
        lwq_ynode *n = new_node(b, ev->type == YAML_SEQUENCE_START_EVENT ? LWQ_Y_SEQ : LWQ_Y_MAP, line, e);
        if (!n)
            return LWQ_EFORMAT;
        int rc = add_child(b, n, e);
        if (rc)
            return rc;
        b->stack[b->depth++] = n;
        return 0;
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        lwq_ynode *n = b->stack[--b->depth];
        return n->kind == LWQ_Y_MAP ? check_dups(path, n, e) : 0;
    }
    default:
        return 0;
    }
}

/* "# modelopt-schema: X" among the comment lines before the first content line. */
static int scan_schema(const char *path, const char *buf, size_t len, char *out, size_t cap, lwq_error *e)
{
    out[0] = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && buf[j] != '\n')
            j++;
        size_t a = i;
        while (a < j && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r'))
            a++;
        if (a < j && buf[a] != '#')
            break;
        if (a < j) {
            size_t k = a + 1;
            while (k < j && (buf[k] == ' ' || buf[k] == '\t'))
                k++;
            static const char tag[] = "modelopt-schema:";
            if (j - k >= sizeof tag - 1 && !memcmp(buf + k, tag, sizeof tag - 1)) {
                k += sizeof tag - 1;
                while (k < j && (buf[k] == ' ' || buf[k] == '\t'))
                    k++;
                size_t z = j;
                while (z > k && isspace((unsigned char)buf[z - 1]))
                    z--;
                if (out[0])
                    return lwq_errf(e, LWQ_EFORMAT, "%s: more than one modelopt-schema comment", path);
                if (z == k || z - k >= cap)
                    return lwq_errf(e, LWQ_EFORMAT, "%s: malformed modelopt-schema comment", path);
                memcpy(out, buf + k, z - k);
                out[z - k] = 0;
            }
        }
        i = j + 1;
    }
    return 0;
}

int lwq_yaml_parse(const char *path, const char *buf, size_t len, lwq_ydoc *out, lwq_error *e)
{
    memset(out, 0, sizeof *out);
    int rc = scan_schema(path, buf, len, out->schema, sizeof out->schema, e);
    if (rc)
        return rc;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    builder b = {.path = path, .doc = out};
    for (int done = 0; !done && !rc;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s:%d: invalid YAML: %s", path, (int)p.problem_mark.line + 1,
                          p.problem ? p.problem : "parse error");
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        rc = on_event(&b, &ev, e);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    if (rc) {
        /* nodes still open are reachable from the document roots */
        lwq_yaml_free(out);
    }
    return rc;
}

const lwq_ynode *lwq_y_get(const lwq_ynode *m, const char *key)
{
    if (!m || m->kind != LWQ_Y_MAP)
        return NULL;
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->kids[2 * i]->str, key))
            return m->kids[2 * i + 1];
    return NULL;
}

int lwq_y_is_null(const lwq_ynode *n)
{
    if (!n)
        return 1;
    if (n->kind != LWQ_Y_SCALAR || !n->plain)
        return 0;
    const char *s = n->str;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

int lwq_y_bool(const lwq_ynode *n, int *out)
{
    static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    if (!n || n->kind != LWQ_Y_SCALAR || !n->plain)
        return -1;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!strcmp(n->str, t[i])) {
            *out = 1;
            return 0;
        }
        if (!strcmp(n->str, f[i])) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

int lwq_y_int(const lwq_ynode *n, long long *out)
{
    if (!n || n->kind != LWQ_Y_SCALAR || !n->plain || !n->str[0])
        return -1;
    const char *s = n->str;
    size_t i = (*s == '-' || *s == '+') ? 1 : 0;
    if (!s[i])
        return -1;
    for (size_t k = i; s[k]; k++)
        if (!isdigit((unsigned char)s[k]))
            return -1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno)
        return -1;
    *out = v;
    return 0;
}

int lwq_y_number(const lwq_ynode *n, double *out)
{
    long long i;
    if (lwq_y_int(n, &i) == 0) {
        *out = (double)i;
        return 0;
    }
    if (!n || n->kind != LWQ_Y_SCALAR || !n->plain || !n->str[0])
        return -1;
    /* YAML 1.1 floats: digits with a '.', optional exponent (no hex, no inf/nan spellings) */
    const char *s = n->str;
    int dot = 0, digits = 0;
    for (const char *c = s; *c; c++) {
        if (isdigit((unsigned char)*c))
            digits++;
        else if (*c == '.')
            dot++;
        else if (!strchr("+-eE_", *c))
            return -1;
    }
    if (!digits || dot > 1)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

const char *lwq_y_str(const lwq_ynode *n)
{
    if (!n || n->kind != LWQ_Y_SCALAR || lwq_y_is_null(n))
        return NULL;
    return n->str;
}
