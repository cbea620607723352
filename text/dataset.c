/* text/dataset.c — calibration sets: reading .jsonl/.txt/directories, tokenizing, batching.
 * See text/dataset.h for the rules. */
#include "text/dataset.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/sys/log.h"

/* Samples collected so far: ids of each, concatenated. */
typedef struct collect {
    const lwq_tokenizer *tok;
    const lwq_calib_opts *o;
    int32_t *ids;
    size_t n_ids, cap_ids;
    size_t *start;  /* start[i]: offset of sample i in ids; start[n] = n_ids */
    size_t n, cap;
    size_t truncated, dropped;
    lwq_token_ids tmp;
} collect;

static int full(const collect *c) { return c->n >= c->o->max_samples; }

static int add_ids(collect *c, const int32_t *ids, size_t n)
{
    if (c->n + 2 > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        size_t *s = realloc(c->start, cap * sizeof *s);
        if (!s) return LWQ_ENOMEM;
        c->start = s;
        c->cap = cap;
    }
    if (c->n_ids + n > c->cap_ids) {
        size_t cap = c->cap_ids ? c->cap_ids : 4096;
        while (cap < c->n_ids + n) cap *= 2;
        int32_t *p = realloc(c->ids, cap * sizeof *p);
        if (!p) return LWQ_ENOMEM;
        c->ids = p;
        c->cap_ids = cap;
    }
    memcpy(c->ids + c->n_ids, ids, n * sizeof *ids);
    c->start[c->n++] = c->n_ids;
    c->n_ids += n;
    c->start[c->n] = c->n_ids;
    return 0;
}

/* `where` names the sample ("file:line") for errors. */
static int add_text(collect *c, const char *s, size_t len, const char *where, lwq_error *e)
{
    if (full(c)) return 0;
    if (!len) {
        c->dropped++;
        return 0;
    }
    if (!c->tok)
        return lwq_errf(e, LWQ_EINVAL, "%s: a text sample needs a tokenizer", where);
    lwq_error in = {0};
    int trunc = 0;
    int rc = lwq_tokenizer_encode(c->tok, s, len, !c->o->no_special, c->o->seq_len, &c->tmp, &trunc, &in);
    if (rc < 0) return lwq_errf(e, rc, "%s: %s", where, in.msg);
    if (!c->tmp.n) {
        c->dropped++;
        return 0;
    }
    c->truncated += (size_t)trunc;
    return add_ids(c, c->tmp.ids, c->tmp.n) ? lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where) : 0;
}

static int add_id_array(collect *c, const cJSON *arr, const char *where, lwq_error *e)
{
    if (full(c)) return 0;
    size_t n = (size_t)cJSON_GetArraySize(arr), k = 0;
    size_t vocab = c->tok ? lwq_tokenizer_vocab_size(c->tok) : (size_t)INT32_MAX;
    if (!n) {
        c->dropped++;
        return 0;
    }
    size_t keep = n < c->o->seq_len ? n : c->o->seq_len;
    int32_t *ids = malloc(keep * sizeof *ids);
    if (!ids) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where);
    for (const cJSON *x = arr->child; x; x = x->next, k++) {
        double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (d < 0 || d >= (double)vocab || d != (double)(long)d) {
            free(ids);
            return lwq_errf(e, LWQ_EFORMAT, "%s: input_ids[%zu] is not an integer id in [0, %zu)",
                            where, k, vocab);
        }
        if (k < keep) ids[k] = (int32_t)d;
    }
    c->truncated += n > keep;
    int rc = add_ids(c, ids, keep);
    free(ids);
    return rc ? lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where) : 0;
}

/* Read one line (without its '\n') into *buf; 0 at EOF, 1 for a line, <0 on error.  Bounded by
 * LWQ_CALIB_MAX_LINE so a file without newlines cannot eat memory. */
static int read_line(FILE *f, char **buf, size_t *cap, size_t *len, const char *where, lwq_error *e)
{
    *len = 0;
    int ch, any = 0;
    if (!*buf) {
        if (!(*buf = malloc(4096))) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where);
        *cap = 4096;
    }
    while ((ch = getc_unlocked(f)) != EOF) {
        any = 1;
        if (ch == '\n') break;
        if (*len >= LWQ_CALIB_MAX_LINE) /* on every byte, not only when the buffer grows */
            return lwq_errf(e, LWQ_EFORMAT, "%s: line longer than %zu bytes (the limit for one line of "
                            "calibration data)", where, LWQ_CALIB_MAX_LINE);
        if (*len + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            char *p = realloc(*buf, nc);
            if (!p) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where);
            *buf = p;
            *cap = nc;
        }
        (*buf)[(*len)++] = (char)ch;
    }
    if (ferror(f)) return lwq_errsys(e, LWQ_EIO, "%s: read failed", where);
    if (any) (*buf)[*len] = 0;
    return any;
}

static int check_utf8(const char *s, size_t n, const char *where, lwq_error *e)
{
    size_t i = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        size_t l = ch < 0x80 ? 1 : ch >= 0xC2 && ch <= 0xDF ? 2 : ch >= 0xE0 && ch <= 0xEF ? 3
                 : ch >= 0xF0 && ch <= 0xF4 ? 4 : 0;
        int ok = l && i + l <= n;
        for (size_t k = 1; ok && k < l; k++) ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
        if (ok && l == 3) {
            unsigned c1 = (unsigned char)s[i + 1];
            ok = !(ch == 0xE0 && c1 < 0xA0) && !(ch == 0xED && c1 > 0x9F);
        }
        if (ok && l == 4) {
            unsigned c1 = (unsigned char)s[i + 1];
            ok = !(ch == 0xF0 && c1 < 0x90) && !(ch == 0xF4 && c1 > 0x8F);
        }
        if (!ok)
            return lwq_errf(e, LWQ_EFORMAT, "%s: invalid UTF-8 at byte %zu of the line (0x%02X); "
                            "Python's utf-8 decoding rejects such a file too", where, i, ch);
        i += l;
    }
    return 0;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* Growing "\n"-joined text. */
typedef struct { char *p; size_t n, cap; int parts; } joiner;

static int join_add(joiner *jn, const char *s)
{
    size_t l = strlen(s), need = jn->n + l + 2;
    if (need > jn->cap) {
        size_t cap = jn->cap ? jn->cap : 256;
        while (cap < need) cap *= 2;
        char *p = realloc(jn->p, cap);
        if (!p) return LWQ_ENOMEM;
        jn->p = p;
        jn->cap = cap;
    }
    if (jn->parts++) jn->p[jn->n++] = '\n';
    memcpy(jn->p + jn->n, s, l);
    jn->n += l;
    jn->p[jn->n] = 0;
    return 0;
}

static const cJSON *present(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Append the string field `k` of `o` (skipped when absent or null unless `required`). */
static int join_field(joiner *jn, const cJSON *o, const char *k, int required, const char *where,
                      lwq_error *e)
{
    const cJSON *v = present(o, k);
    if (!v && !required) return 0;
    if (!cJSON_IsString(v)) return lwq_errf(e, LWQ_EFORMAT, "%s: \"%s\" is not a string", where, k);
    return join_add(jn, v->valuestring) ? lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where) : 0;
}

/* ---- "input_ids" lines, streamed ----------------------------------------------------------
 * A pre-tokenized line can hold millions of ids, of which seq_len are kept: building a cJSON node
 * per id took 23 s and 4.9 GB for one 63 MiB line.  So a line whose first top-level key
 * "input_ids" has a non-null value is scanned instead: the ids are parsed in place (the first
 * seq_len kept, every one checked), and the rest of the line, with the array replaced by [], is
 * parsed by cJSON as before, so it is validated exactly as any other line.  Memory: the line and
 * one copy of what is not the array. */

typedef struct jscan {
    const char *s, *end;
    int bad;             /* 1: malformed at s */
} jscan;

static void js_ws(jscan *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\r' || *j->s == '\n')) j->s++;
}

/* A string token (at '"'): moves past its closing quote; sets *esc when it holds a backslash. */
static void js_string(jscan *j, int *esc)
{
    *esc = 0;
    if (j->s >= j->end || *j->s != '"') { j->bad = 1; return; }
    for (j->s++; j->s < j->end; j->s++) {
        if (*j->s == '\\') {
            *esc = 1;
            if (++j->s >= j->end) break;
        } else if (*j->s == '"') {
            j->s++;
            return;
        }
    }
    j->bad = 1;
}

/* Skip one value of any kind; only its extent matters here (cJSON checks its grammar later). */
static void js_skip(jscan *j)
{
    int depth = 0, esc;
    do {
        js_ws(j);
        if (j->s >= j->end) { j->bad = 1; return; }
        char ch = *j->s;
        if (ch == '"') {
            js_string(j, &esc);
        } else if (ch == '[' || ch == '{') {
            if (++depth > 1000) { j->bad = 1; return; } /* cJSON's nesting limit */
            j->s++;
        } else if (ch == ']' || ch == '}') {
            if (--depth < 0) { j->bad = 1; return; }
            j->s++;
        } else if (ch == ',' || ch == ':') {
            if (!depth) { j->bad = 1; return; }
            j->s++;
        } else {
            while (j->s < j->end && !strchr(" \t\r\n,:[]{}\"", *j->s)) j->s++;
        }
    } while (!j->bad && depth > 0);
}

/* Whether the key token [k, ke) (quotes included) names "input_ids". */
static int key_is_ids(const char *k, const char *ke, int esc)
{
    static const char want[] = "\"input_ids\"";
    if (!esc) return (size_t)(ke - k) == sizeof want - 1 && !memcmp(k, want, sizeof want - 1);
    cJSON *v = cJSON_ParseWithLength(k, (size_t)(ke - k)); /* escapes decoded as cJSON decodes them */
    int is = cJSON_IsString(v) && !strcmp(v->valuestring, "input_ids");
    cJSON_Delete(v);
    return is;
}

/* Whether [t, t + n) is a JSON number (RFC 8259's grammar, which cJSON accepts too). */
static int json_number(const char *t, size_t n)
{
    size_t i = 0;
#define DIGITS(min) do { size_t d0 = i; while (i < n && t[i] >= '0' && t[i] <= '9') i++; if (i - d0 < (min)) return 0; } while (0)
    if (i < n && t[i] == '-') i++;
    if (i < n && t[i] == '0') i++;
    else DIGITS(1);
    if (i < n && t[i] == '.') { i++; DIGITS(1); }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-')) i++;
        DIGITS(1);
    }
#undef DIGITS
    return i == n;
}

/* The ids of the array at [a, ae): every element an integer id below `vocab`, the first `keep`
 * stored in ids (room for `keep`); *count gets their number.  Offsets in messages count from `line`.  0 or an error naming the element. */
static int parse_ids(const char *line, const char *a, const char *ae, size_t vocab, int32_t *ids, size_t keep,
                     size_t *count, const char *where, lwq_error *e)
{
    jscan j = {a + 1, ae - 1, 0};
    size_t k = 0;
    js_ws(&j);
    while (j.s < j.end) {
        const char *t = j.s;
        while (j.s < j.end && !strchr(" \t\r\n,", *j.s)) j.s++;
        char num[40];
        size_t tl = (size_t)(j.s - t);
        if (!tl)
            return lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu", where, (size_t)(t - line));
        double d = -1;
        char *stop = NULL;
        int numeric = json_number(t, tl);
        if (!numeric && (*t == '-' || (*t >= '0' && *t <= '9'))) /* 0x10, 1e, 01: not JSON at all */
            return lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu", where, (size_t)(t - line));
        if (numeric && tl < sizeof num) {
            memcpy(num, t, tl);
            num[tl] = 0;
            d = strtod(num, &stop);
            if (*stop) d = -1;
        }
        if (d < 0 || d >= (double)vocab || d != (double)(long)d)
            return lwq_errf(e, LWQ_EFORMAT, "%s: input_ids[%zu] is not an integer id in [0, %zu)", where, k, vocab);
        if (k < keep) ids[k] = (int32_t)d;
        k++;
        js_ws(&j);
        if (j.s < j.end) {
            if (*j.s != ',')
                return lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu", where, (size_t)(j.s - line));
            j.s++;
            js_ws(&j);
            if (j.s >= j.end)
                return lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu", where, (size_t)(j.s - line));
        }
    }
    *count = k;
    return 0;
}

/* Image and video inputs (a VLM processor's outputs, or a media field beside the text) are refused
 * by name: lwq calibrates the text model alone, with text positions (for Qwen3.5's mRoPE the three
 * position ids are then equal, which is what the forward computes), so such a line would be
 * calibrated as something it is not. */
static int refuse_media(const cJSON *o, const char *where, lwq_error *e)
{
    static const char *const keys[] = {"pixel_values", "pixel_values_videos", "image_grid_thw",
                                       "video_grid_thw", "mm_token_type_ids", "image", "images",
                                       "video", "videos"};
    for (size_t i = 0; cJSON_IsObject(o) && i < sizeof keys / sizeof keys[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(o, keys[i]))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: \"%s\": image and video calibration inputs are "
                            "not supported (lwq calibrates the text model only, on text positions)",
                            where, keys[i]);
    return 0;
}

/* 1: the line's ids were taken (or the line was refused: < 0); 0: not an input_ids line. */
static int ids_line(collect *c, const char *s, size_t n, const char *where, lwq_error *e)
{
    jscan j = {s, s + n, 0};
    const char *vs = NULL, *ve = NULL;
    int esc, seen_key = 0;
    js_ws(&j);
    if (j.s >= j.end || *j.s != '{') return 0;
    j.s++;
    for (int first = 1; !j.bad; first = 0) {
        js_ws(&j);
        if (first && j.s < j.end && *j.s == '}') break;
        const char *k = j.s;
        js_string(&j, &esc);
        if (j.bad) break;
        int is_ids = !seen_key && key_is_ids(k, j.s, esc);
        js_ws(&j);
        if (j.s >= j.end || *j.s != ':') { j.bad = 1; break; }
        j.s++;
        js_ws(&j);
        const char *v = j.s;
        js_skip(&j);
        if (is_ids) {
            seen_key = 1;
            if (!((size_t)(j.s - v) == 4 && !memcmp(v, "null", 4))) { vs = v; ve = j.s; }
        }
        js_ws(&j);
        if (j.s < j.end && *j.s == ',') { j.s++; continue; }
        if (j.s < j.end && *j.s == '}') break;
        j.bad = 1;
    }
    if (!vs) return 0; /* no input_ids (or null, or a malformed line): the cJSON path decides */
    if (j.bad)
        return lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu", where, (size_t)(j.s - s));
    if (*vs != '[' || ve[-1] != ']')
        return lwq_errf(e, LWQ_EFORMAT, "%s: \"input_ids\" is not an array", where);
    /* the rest of the line, array emptied, through cJSON as any line */
    size_t head = (size_t)(vs - s), tail = (size_t)(s + n - ve);
    char *rest = malloc(head + 2 + tail + 1);
    if (!rest) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where);
    memcpy(rest, s, head);
    memcpy(rest + head, "[]", 2);
    memcpy(rest + head + 2, ve, tail);
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(rest, head + 2 + tail, &end, 0);
    if (!o) {
        size_t at = end && end >= rest ? (size_t)(end - rest) : 0;
        free(rest);
        return lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu", where,
                        at > head + 2 ? at - 2 + (size_t)(ve - vs) : at);
    }
    free(rest);
    int media = refuse_media(o, where, e);
    cJSON_Delete(o);
    if (media)
        return media;
    size_t vocab = c->tok ? lwq_tokenizer_vocab_size(c->tok) : (size_t)INT32_MAX;
    size_t keep = c->o->seq_len, count = 0, most = (size_t)(ve - vs) / 2 + 1; /* ids in the array, at most */
    size_t cap = keep < most ? keep : most;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where);
    int rc = parse_ids(s, vs, ve, vocab, ids, cap, &count, where, e);
    if (rc == 0 && !count) {
        c->dropped++;
    } else if (rc == 0) {
        c->truncated += count > keep;
        if (add_ids(c, ids, count < cap ? count : cap)) rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where);
    }
    free(ids);
    return rc < 0 ? rc : 1;
}

/* One JSON line.  Keys, first match wins (Model Optimizer's auto-detection order, with
 * pre-tokenized ids first): input_ids; messages / conversations (turn contents joined with
 * "\n"; a conversations turn may say "value"); prompt (+ completion, response, output); text;
 * input (+ output).  The joins are dataset_utils.py's. */
static int jsonl_line(collect *c, const char *s, size_t n, const char *where, lwq_error *e)
{
    int streamed = ids_line(c, s, n, where, e);
    if (streamed)
        return streamed < 0 ? streamed : 0;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!j)
        return lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu", where,
                        end && end >= s ? (size_t)(end - s) : 0);
    joiner jn = {0};
    int rc = 0, text = 1;
    const cJSON *v;
    if (!cJSON_IsObject(j)) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: expected a JSON object", where);
    } else if ((rc = refuse_media(j, where, e)) != 0) {
    } else if ((v = present(j, "input_ids"))) {
        text = 0;
        rc = cJSON_IsArray(v) ? add_id_array(c, v, where, e)
                              : lwq_errf(e, LWQ_EFORMAT, "%s: \"input_ids\" is not an array", where);
    } else if ((v = present(j, "messages")) || (v = present(j, "conversations"))) {
        const char *key = present(j, "messages") ? "messages" : "conversations";
        if (!cJSON_IsArray(v)) rc = lwq_errf(e, LWQ_EFORMAT, "%s: \"%s\" is not an array", where, key);
        size_t k = 0;
        for (const cJSON *m = rc ? NULL : v->child; m && !rc; m = m->next, k++) {
            const cJSON *ct = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsString(ct)) ct = cJSON_GetObjectItemCaseSensitive(m, "value");
            if (!cJSON_IsString(ct))
                rc = lwq_errf(e, LWQ_EFORMAT, "%s: %s[%zu] has no string \"content\"", where, key, k);
            else if (join_add(&jn, ct->valuestring))
                rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where);
        }
    } else if (present(j, "prompt")) {
        rc = join_field(&jn, j, "prompt", 1, where, e);
        if (!rc) rc = join_field(&jn, j, "completion", 0, where, e);
        if (!rc) rc = join_field(&jn, j, "response", 0, where, e);
        if (!rc) rc = join_field(&jn, j, "output", 0, where, e);
    } else if (present(j, "text")) {
        rc = join_field(&jn, j, "text", 1, where, e);
    } else if (present(j, "input")) {
        rc = join_field(&jn, j, "input", 1, where, e);
        if (!rc) rc = join_field(&jn, j, "output", 0, where, e);
    } else {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: object has none of \"input_ids\", \"messages\", "
                      "\"conversations\", \"prompt\", \"text\", \"input\"", where);
    }
    if (!rc && text) rc = add_text(c, jn.p ? jn.p : "", jn.n, where, e);
    free(jn.p);
    cJSON_Delete(j);
    return rc;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int read_file(collect *c, const char *path, lwq_error *e)
{
    int jsonl = ends_with(path, ".jsonl");
    if (!jsonl && !ends_with(path, ".txt"))
        return lwq_errf(e, LWQ_EINVAL, "%s: calibration files must end in .jsonl or .txt", path);
    int fd = lwq_file_open_regular(path, 0, NULL, e);
    if (fd < 0) return fd;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return lwq_errf(e, LWQ_ENOMEM, "%s: cannot open a stream", path);
    }
    char *line = NULL, where[4200];
    size_t cap = 0, len, lineno = 0;
    char *para = NULL;
    size_t para_len = 0, para_cap = 0, para_line = 0;
    int rc = 0;
    while (!full(c)) {
        snprintf(where, sizeof where, "%s:%zu", path, lineno + 1);
        rc = read_line(f, &line, &cap, &len, where, e);
        if (rc <= 0) break;
        lineno++;
        if (memchr(line, 0, len)) { rc = lwq_errf(e, LWQ_EFORMAT, "%s: NUL byte in a text line", where); break; }
        if ((rc = check_utf8(line, len, where, e))) break;
        if (jsonl) {
            if (blank(line, len)) continue;
            if ((rc = jsonl_line(c, line, len, where, e))) break;
            continue;
        }
        if (blank(line, len)) {
            snprintf(where, sizeof where, "%s:%zu", path, para_line);
            if (para_len && (rc = add_text(c, para, para_len, where, e))) break;
            para_len = 0;
            continue;
        }
        if (para_len + len + 2 > para_cap) {
            size_t nc = para_cap ? para_cap * 2 : 4096;
            while (nc < para_len + len + 2) nc *= 2;
            char *p = realloc(para, nc);
            if (!p) { rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", where); break; }
            para = p;
            para_cap = nc;
        }
        if (!para_len) para_line = lineno;
        else para[para_len++] = '\n';
        memcpy(para + para_len, line, len);
        para_len += len;
        if (para_len > LWQ_CALIB_MAX_LINE) { rc = lwq_errf(e, LWQ_EFORMAT, "%s: paragraph over %zu bytes", where, LWQ_CALIB_MAX_LINE); break; }
    }
    if (rc >= 0 && !jsonl && para_len) {
        snprintf(where, sizeof where, "%s:%zu", path, para_line);
        rc = add_text(c, para, para_len, where, e);
    }
    free(para);
    free(line);
    fclose(f);
    return rc < 0 ? rc : 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_dir(collect *c, const char *dir, size_t *files, lwq_error *e)
{
    DIR *d = opendir(dir);
    if (!d) return lwq_errsys(e, -errno, "%s: cannot open directory", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || !(ends_with(de->d_name, ".jsonl") || ends_with(de->d_name, ".txt")))
            continue;
        if (n == cap) {
            if (cap >= 1000000) { rc = lwq_errf(e, LWQ_ENOMEM, "%s: too many files", dir); break; }
            cap = cap ? cap * 2 : 16;
            char **p = realloc(names, cap * sizeof *p);
            if (!p) { rc = LWQ_ENOMEM; break; }
            names = p;
        }
        if (!(names[n] = strdup(de->d_name))) { rc = LWQ_ENOMEM; break; }
        n++;
    }
    closedir(d);
    if (!rc && !n) rc = lwq_errf(e, LWQ_ENOENT, "%s: no .jsonl or .txt files in the directory", dir);
    if (!rc) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; !rc && i < n && !full(c); i++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) || S_ISDIR(st.st_mode)) continue; /* subdirectories named *.txt */
        /* a FIFO or device: refused by read_file without blocking, not skipped unnoticed */
        rc = read_file(c, path, e);
        (*files)++;
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (rc == LWQ_ENOMEM) lwq_errf(e, rc, "%s: out of memory", dir);
    return rc;
}

static int check_opts(const lwq_calib_opts *o, lwq_error *e)
{
    if (!o->max_samples || o->max_samples > LWQ_CALIB_MAX_SAMPLES)
        return lwq_errf(e, LWQ_EINVAL, "calibration: sample count %zu not in [1, %zu]",
                        o->max_samples, LWQ_CALIB_MAX_SAMPLES);
    if (!o->seq_len || o->seq_len > LWQ_CALIB_MAX_SEQ)
        return lwq_errf(e, LWQ_EINVAL, "calibration: sequence length %zu not in [1, %zu]",
                        o->seq_len, LWQ_CALIB_MAX_SEQ);
    return 0;
}

/* `what`: the file or directory the samples came from, named in errors. */
static int build(collect *c, const char *what, lwq_calib_batch *out, lwq_calib_stats *st, size_t files,
                 lwq_error *e)
{
    memset(out, 0, sizeof *out);
    out->pad_id = -1;
    if (!c->n)
        return lwq_errf(e, LWQ_ENOENT, "%s: no samples (%zu empty dropped)", what, c->dropped);
    size_t T = 0, tokens = 0;
    for (size_t i = 0; i < c->n; i++) {
        size_t l = c->start[i + 1] - c->start[i];
        T = l > T ? l : T;
        tokens += l;
    }
    if (c->n * T > ((size_t)1 << 31))
        return lwq_errf(e, LWQ_ENOMEM, "%s: a %zu x %zu calibration batch is over 2^31 tokens", what, c->n, T);
    int32_t pad = c->o->has_pad_id ? c->o->pad_id : c->tok ? lwq_tokenizer_pad_id(c->tok) : -1;
    if (tokens != c->n * T && pad < 0)
        return lwq_errf(e, LWQ_EINVAL, "%s: calibration rows of different lengths need padding, but "
                        "the tokenizer has no pad_token or eos_token (tokenizer_config.json)", what);
    out->ids = malloc(c->n * T * sizeof *out->ids);
    out->mask = calloc(c->n * T, 1);
    out->lengths = malloc(c->n * sizeof *out->lengths);
    if (!out->ids || !out->mask || !out->lengths) {
        lwq_calib_batch_free(out);
        return lwq_errf(e, LWQ_ENOMEM, "calibration: out of memory for a %zu x %zu batch", c->n, T);
    }
    out->n = c->n;
    out->seq = T;
    out->pad_id = pad;
    for (size_t i = 0; i < c->n; i++) {
        size_t l = c->start[i + 1] - c->start[i], lead = T - l;
        for (size_t k = 0; k < lead; k++) out->ids[i * T + k] = pad;
        memcpy(out->ids + i * T + lead, c->ids + c->start[i], l * sizeof *out->ids);
        memset(out->mask + i * T + lead, 1, l);
        out->lengths[i] = (int32_t)l;
    }
    if (st) {
        *st = (lwq_calib_stats){c->n, tokens, T, c->truncated, c->dropped, files,
                                (double)tokens / (double)c->n,
                                (double)(c->n * T - tokens) / (double)(c->n * T)};
    }
    return 0;
}

static void collect_free(collect *c)
{
    free(c->ids);
    free(c->start);
    lwq_token_ids_free(&c->tmp);
}

int lwq_calib_from_texts(const lwq_tokenizer *tok, const char *const *texts, size_t n,
                         const lwq_calib_opts *opts, lwq_calib_batch *out, lwq_calib_stats *st,
                         lwq_error *e)
{
    memset(out, 0, sizeof *out);
    int rc = check_opts(opts, e);
    if (rc) return rc;
    collect c = {.tok = tok, .o = opts};
    for (size_t i = 0; i < n && !rc && !full(&c); i++) {
        char where[64];
        snprintf(where, sizeof where, "sample %zu", i);
        rc = add_text(&c, texts[i], strlen(texts[i]), where, e);
    }
    if (!rc) rc = build(&c, "calibration texts", out, st, 0, e);
    collect_free(&c);
    return rc;
}

int lwq_calib_load(const lwq_tokenizer *tok, const char *path, const lwq_calib_opts *opts,
                   lwq_calib_batch *out, lwq_calib_stats *st, lwq_error *e)
{
    memset(out, 0, sizeof *out);
    if (!path || !strcmp(path, "builtin")) {
        const char *texts[64];
        size_t n = lwq_calib_builtin_count();
        for (size_t i = 0; i < n && i < 64; i++) texts[i] = lwq_calib_builtin_sample(i);
        return lwq_calib_from_texts(tok, texts, n < 64 ? n : 64, opts, out, st, e);
    }
    int rc = check_opts(opts, e);
    if (rc) return rc;
    struct stat sb;
    if (stat(path, &sb)) return lwq_errsys(e, -errno, "%s: cannot stat calibration data", path);
    collect c = {.tok = tok, .o = opts};
    size_t files = 0;
    if (S_ISDIR(sb.st_mode)) {
        rc = read_dir(&c, path, &files, e);
    } else {
        rc = read_file(&c, path, e);
        files = 1;
    }
    if (!rc) rc = build(&c, path, out, st, files, e);
    collect_free(&c);
    return rc;
}

void lwq_calib_batch_free(lwq_calib_batch *b)
{
    free(b->ids);
    free(b->mask);
    free(b->lengths);
    memset(b, 0, sizeof *b);
    b->pad_id = -1;
}

int lwq_calib_stats_format(const lwq_calib_stats *st, char *buf, size_t n)
{
    return snprintf(buf, n, "%zu samples, %zu tokens, mean length %.1f, max length %zu, padding "
                    "%.1f%%, %zu truncated, %zu empty dropped, %zu files",
                    st->samples, st->tokens, st->mean_len, st->max_len, 100.0 * st->pad_fraction,
                    st->truncated, st->dropped_empty, st->files);
}

void lwq_calib_stats_log(const lwq_calib_stats *st)
{
    char buf[256];
    lwq_calib_stats_format(st, buf, sizeof buf);
    LWQ_INFO("calibration: %s", buf);
}
