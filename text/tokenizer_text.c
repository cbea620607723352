/* text/tokenizer_text.c — UTF-8 helpers, buffers, the bounded PCRE2 regex layer and the pattern
 * objects of tokenizer.json: the bottom of the tokenizer, calling none of its other files (the
 * normalizers are in tokenizer_normalize.c, NFC/NFD in tokenizer_nfc.c).
 *
 * Regex patterns in tokenizer.json are written for Oniguruma (what the Rust crate uses).  PCRE2
 * with UTF+UCP agrees on the constructs these patterns use except the shorthands \s and \w, so
 * those are rewritten to Oniguruma's Unicode definitions before compiling (see onig_rewrite).
 * Every match runs under a match limit, a depth limit and a heap limit, so a hostile pattern or
 * text ends in an error, not a hang. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

/* ---- UTF-8 -------------------------------------------------------------------------------- */
int tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (!n) return 0;
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t tok_utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int l = tok_utf8_decode(u + i, n - i, &cp);
        if (!l) break;
        i += (size_t)l;
    }
    return i;
}

size_t tok_utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the maximal subpart of an ill-formed sequence at s (Unicode 3.9 / WHATWG), which is
 * what Rust's from_utf8_lossy and JavaScript's TextDecoder replace with one U+FFFD. */
static size_t utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else return 1;
    size_t i = 1;
    while (i <= need && i < n) {
        if (s[i] < lo || s[i] > hi) break;
        lo = 0x80;
        hi = 0xBF;
        i++;
    }
    return i;
}

int tok_utf8_lossy(tok_buf *b, const unsigned char *s, size_t n)
{
    if (tok_buf_reserve(b, n + 3 * 4)) return LWQ_ENOMEM;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int l = tok_utf8_decode(s + i, n - i, &cp);
        if (l) {
            if (tok_buf_put(b, s + i, (size_t)l)) return LWQ_ENOMEM;
            i += (size_t)l;
        } else {
            if (tok_buf_put(b, "\xEF\xBF\xBD", 3)) return LWQ_ENOMEM;
            i += utf8_bad_len(s + i, n - i);
        }
    }
    return 0;
}

int tok_cp_byte(uint32_t cp)
{
    if (cp < 256) return ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174) ? (int)cp : -1;
    if (cp <= 288) return (int)cp - 256;
    if (cp <= 322) return (int)cp - 162;
    if (cp == 323) return 173;
    return -1;
}

/* ---- buffers and pieces ------------------------------------------------------------------- */
int tok_buf_reserve(tok_buf *b, size_t extra)
{
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) {
        if (cap > SIZE_MAX / 2) return LWQ_ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return LWQ_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_put(tok_buf *b, const void *p, size_t n)
{
    if (tok_buf_reserve(b, n + 1)) return LWQ_ENOMEM;
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tok_pieces_add(tok_pieces *ps, const char *s, size_t n, int first)
{
    if (!n) return 0; /* empty splits are dropped, as in the Rust crate */
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 64;
        tok_piece *v = realloc(ps->v, cap * sizeof *v);
        if (!v) return LWQ_ENOMEM;
        ps->v = v;
        ps->cap = cap;
    }
    size_t off = ps->buf.n;
    if (tok_buf_put(&ps->buf, s, n)) return LWQ_ENOMEM;
    ps->v[ps->n++] = (tok_piece){off, n, first};
    return 0;
}

void tok_pieces_reset(tok_pieces *ps)
{
    ps->buf.n = 0;
    ps->n = 0;
    ps->raw_bytes = 0;
}

void tok_pieces_free(tok_pieces *ps)
{
    free(ps->buf.p);
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

/* ---- regex -------------------------------------------------------------------------------- */
#define TOK_RE_MATCH_LIMIT 10000000u
#define TOK_RE_DEPTH_LIMIT 10000u
#define TOK_RE_HEAP_LIMIT_KIB 65536u

/* Oniguruma's Unicode \s is White_Space minus nothing PCRE2 lacks: 9-13, U+85 and Z*.  PCRE2's
 * adds U+180E; its \w lacks marks and connector punctuation.  Rewrite both. */
static int onig_rewrite(const char *p, size_t n, tok_buf *o)
{
    static const char S_IN[] = "\\t-\\r\\x{85}\\p{Z}";
    static const char W_IN[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            const char *in = d == 's' || d == 'S' ? S_IN : d == 'w' || d == 'W' ? W_IN : NULL;
            int neg = d == 'S' || d == 'W';
            int rc = 0;
            if (in && !depth) {
                rc = tok_buf_put(o, neg ? "[^" : "[", neg ? 2 : 1);
                rc = rc ? rc : tok_buf_put(o, in, strlen(in));
                rc = rc ? rc : tok_buf_put(o, "]", 1);
            } else if (in && !neg) {
                rc = tok_buf_put(o, in, strlen(in));
            } else {
                rc = tok_buf_put(o, p + i, 2); /* negated shorthand inside a class: keep */
            }
            if (rc) return rc;
            i++;
            continue;
        }
        if (c == '[') depth++;
        else if (c == ']' && depth) depth--;
        if (tok_buf_put(o, &c, 1)) return LWQ_ENOMEM;
    }
    return 0;
}

int tok_regex_compile(tok_regex *r, const char *pat, size_t len, int literal, const char *what,
                      lwq_error *e)
{
    tok_buf b = {0};
    uint32_t opts = PCRE2_UTF;
    if (literal) {
        opts |= PCRE2_LITERAL; /* PCRE2 refuses UCP with LITERAL; it has no classes to affect */
        if (tok_buf_put(&b, pat, len)) return LWQ_ENOMEM;
    } else {
        opts |= PCRE2_UCP | PCRE2_MULTILINE; /* Oniguruma's ^ and $ are line anchors */
        if (onig_rewrite(pat, len, &b) || tok_buf_put(&b, "", 0)) {
            free(b.p);
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory compiling a regex", what);
        }
    }
    int err;
    PCRE2_SIZE erroff;
    r->code = pcre2_compile((PCRE2_SPTR)(b.p ? b.p : ""), b.n, opts, &err, &erroff, NULL);
    free(b.p);
    if (!r->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lwq_errf(e, LWQ_EFORMAT, "%s: regex '%.80s' does not compile at offset %zu: %s",
                        what, pat, (size_t)erroff, (const char *)msg);
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void tok_regex_free(tok_regex *r)
{
    if (r->code) pcre2_code_free(r->code);
    r->code = NULL;
}

static int spans_push(tok_spans *o, size_t a, size_t b, int m)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 32;
        tok_span *v = realloc(o->v, cap * sizeof *v);
        if (!v) return LWQ_ENOMEM;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = (tok_span){a, b, m};
    return 0;
}

int tok_regex_spans(const tok_regex *r, const char *s, size_t n, tok_spans *out, lwq_error *e)
{
    out->n = 0;
    if (!n) return 0;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    int rc = 0;
    if (!md || !mc) {
        rc = lwq_errf(e, LWQ_ENOMEM, "out of memory for a regex match");
        goto out;
    }
    pcre2_set_match_limit(mc, TOK_RE_MATCH_LIMIT);
    pcre2_set_depth_limit(mc, TOK_RE_DEPTH_LIMIT);
    pcre2_set_heap_limit(mc, TOK_RE_HEAP_LIMIT_KIB);
    size_t pos = 0, prev = 0, last_match_end = SIZE_MAX;
    while (pos <= n) {
        /* Text was validated as UTF-8 once, and pieces are cut on char boundaries. */
        int m = r->jit ? pcre2_jit_match(r->code, (PCRE2_SPTR)s, n, pos, 0, md, mc)
                       : pcre2_match(r->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, mc);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(m, msg, sizeof msg);
            rc = lwq_errf(e, LWQ_EFORMAT, "regex matching stopped at byte %zu of a %zu-byte piece: "
                          "%s", pos, n, (const char *)msg);
            goto out;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me && me == last_match_end) {
            /* Oniguruma's iterator skips an empty match right after the previous match and
             * resumes one char later. */
            if (pos >= n) break;
            uint32_t cp;
            int l = tok_utf8_decode((const unsigned char *)s + pos, n - pos, &cp);
            pos += l > 0 ? (size_t)l : 1;
            continue;
        }
        pos = me;
        last_match_end = me;
        if (prev != ms && spans_push(out, prev, ms, 0)) goto oom;
        if (spans_push(out, ms, me, 1)) goto oom;
        prev = me;
    }
    if (prev != n && spans_push(out, prev, n, 0)) goto oom;
    goto out;
oom:
    rc = lwq_errf(e, LWQ_ENOMEM, "out of memory splitting text");
out:
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    return rc;
}

/* ---- patterns and characters the normalizers and pre-tokenizers share -------------------- */
const char *tok_jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A {"String": s} or {"Regex": r} pattern. */
int tok_pattern_compile(tok_regex *re, const cJSON *pat, const char *what, lwq_error *e)
{
    const char *s = tok_jstr(pat, "String");
    if (s) return tok_regex_compile(re, s, strlen(s), 1, what, e);
    s = tok_jstr(pat, "Regex");
    if (s) return tok_regex_compile(re, s, strlen(s), 0, what, e);
    return lwq_errf(e, LWQ_EFORMAT, "%s: pattern is neither {\"String\": ...} nor {\"Regex\": ...}",
                    what);
}

int tok_is_ws(uint32_t c) /* Rust char::is_whitespace (White_Space) */
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}
