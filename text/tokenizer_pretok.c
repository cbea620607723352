/* text/tokenizer_pretok.c — pre-tokenizers and decoders of tokenizer.json.
 *
 * A pre-tokenizer turns the list of pieces of one text segment into a finer list; each kind
 * reproduces the Rust crate's split behaviours (Removed, Isolated, MergedWithPrevious,
 * MergedWithNext, Contiguous) over the match spans of its pattern, and empty pieces are dropped.
 * A ByteLevel step that is the last one before a BPE model leaves the pieces as raw bytes
 * ("lazy"), and the model maps bytes to ids directly instead of building GPT-2 byte chars.
 * Decoders run over the token strings of decode() in the order the file lists them. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jbool(const cJSON *o, const char *k, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* ---- pre-tokenizers: building ------------------------------------------------------------- */
static void pre_release(tok_pre *p)
{
    for (size_t i = 0; i < p->nsubs; i++) pre_release(&p->subs[i]);
    free(p->subs);
    tok_regex_free(&p->re);
    memset(p, 0, sizeof *p);
}

void tok_pre_free(tok_pre *p)
{
    if (!p) return;
    pre_release(p);
    free(p);
}

static int metaspace_prepend(const cJSON *j)
{
    const char *s = jstr(j, "prepend_scheme");
    if (s) return !strcmp(s, "first") ? TOK_PREPEND_FIRST : !strcmp(s, "never") ? TOK_PREPEND_NEVER
                                                                              : TOK_PREPEND_ALWAYS;
    /* Older files: add_prefix_space (default true) means "always". */
    return jbool(j, "add_prefix_space", 1) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
}

static int replacement(const cJSON *j, char *out, size_t *len, const char *name, lwq_error *e)
{
    const char *s = jstr(j, "replacement");
    if (!s) s = "\xE2\x96\x81"; /* U+2581, the SentencePiece space */
    uint32_t cp;
    int l = tok_utf8_decode((const unsigned char *)s, strlen(s), &cp);
    if (l <= 0 || (size_t)l != strlen(s))
        return lwq_errf(e, LWQ_EFORMAT, "%s: Metaspace replacement '%.16s' is not one char", name, s);
    memcpy(out, s, (size_t)l);
    *len = (size_t)l;
    return 0;
}

static int pre_build_into(tok_pre *p, const cJSON *j, const char *name, int depth, lwq_error *e)
{
    memset(p, 0, sizeof *p);
    const char *type = jstr(j, "type");
    if (!type) return lwq_errf(e, LWQ_EFORMAT, "%s: pre_tokenizer without a \"type\"", name);
    if (depth > 8) return lwq_errf(e, LWQ_EFORMAT, "%s: pre_tokenizers nested too deep", name);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr))
            return lwq_errf(e, LWQ_EFORMAT, "%s: Sequence pre_tokenizer without \"pretokenizers\"",
                            name);
        size_t cnt = (size_t)cJSON_GetArraySize(arr);
        if (cnt > 64) return lwq_errf(e, LWQ_EFORMAT, "%s: %zu pre_tokenizers in a Sequence", name, cnt);
        p->kind = TOK_PRE_SEQUENCE;
        if (!(p->subs = calloc(cnt ? cnt : 1, sizeof *p->subs))) return LWQ_ENOMEM;
        for (const cJSON *c = arr->child; c; c = c->next) {
            int rc = pre_build_into(&p->subs[p->nsubs++], c, name, depth + 1, e);
            if (rc) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        p->kind = TOK_PRE_BYTELEVEL;
        p->add_prefix_space = jbool(j, "add_prefix_space", 1);
        p->use_regex = jbool(j, "use_regex", 1);
        if (p->use_regex) return tok_regex_compile(&p->re, GPT2_PATTERN, strlen(GPT2_PATTERN), 0, name, e);
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const char *b = jstr(j, "behavior");
        p->kind = TOK_PRE_SPLIT;
        p->invert = jbool(j, "invert", 0);
        if (!b) return lwq_errf(e, LWQ_EFORMAT, "%s: Split pre_tokenizer without \"behavior\"", name);
        if (!strcmp(b, "Removed")) p->behavior = TOK_SPLIT_REMOVED;
        else if (!strcmp(b, "Isolated")) p->behavior = TOK_SPLIT_ISOLATED;
        else if (!strcmp(b, "MergedWithPrevious")) p->behavior = TOK_SPLIT_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext")) p->behavior = TOK_SPLIT_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous")) p->behavior = TOK_SPLIT_CONTIGUOUS;
        else return lwq_errf(e, LWQ_EFORMAT, "%s: Split behavior '%.32s' is unknown", name, b);
        return tok_pattern_compile(&p->re, cJSON_GetObjectItemCaseSensitive(j, "pattern"), name, e);
    }
    if (!strcmp(type, "Metaspace")) {
        p->kind = TOK_PRE_METASPACE;
        p->prepend = metaspace_prepend(j);
        p->split = jbool(j, "split", 1);
        return replacement(j, p->repl, &p->repl_len, name, e);
    }
    if (!strcmp(type, "Digits")) {
        p->kind = TOK_PRE_DIGITS;
        p->individual = jbool(j, "individual_digits", 0);
        p->behavior = p->individual ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS;
        return tok_regex_compile(&p->re, "\\p{N}", 5, 0, name, e);
    }
    if (!strcmp(type, "Whitespace")) {
        p->kind = TOK_PRE_WHITESPACE;
        p->behavior = TOK_SPLIT_REMOVED;
        p->invert = 1;
        return tok_regex_compile(&p->re, "\\w+|[^\\w\\s]+", 12, 0, name, e);
    }
    if (!strcmp(type, "WhitespaceSplit")) {
        p->kind = TOK_PRE_WSSPLIT;
        p->behavior = TOK_SPLIT_REMOVED;
        return tok_regex_compile(&p->re, "\\s", 2, 0, name, e);
    }
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: pre_tokenizer type '%.64s' is not supported "
                    "(supported: Sequence, ByteLevel, Split, Metaspace, Digits, Whitespace, "
                    "WhitespaceSplit)", name, type);
}

int tok_pre_build(tok_pre **out, const cJSON *j, const char *name, lwq_error *e)
{
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return 0;
    tok_pre *p = calloc(1, sizeof *p);
    if (!p) return LWQ_ENOMEM;
    int rc = pre_build_into(p, j, name, 0, e);
    if (rc) {
        tok_pre_free(p);
        return rc;
    }
    /* Let the final ByteLevel hand raw bytes to the model. */
    tok_pre *last = p;
    while (last->kind == TOK_PRE_SEQUENCE && last->nsubs) last = &last->subs[last->nsubs - 1];
    if (last->kind == TOK_PRE_BYTELEVEL) last->lazy = 1;
    *out = p;
    return 0;
}

/* ---- pre-tokenizers: applying ------------------------------------------------------------- */
/* Apply a split behaviour to match spans and append the kept pieces of `s` to `o`. */
static int split_spans(tok_span *sp, size_t n, int behavior, int invert, const char *s, int first,
                       tok_pieces *o)
{
    if (invert)
        for (size_t i = 0; i < n; i++) sp[i].match = !sp[i].match;
    size_t k = 0; /* compact in place into (start, end, remove) spans */
    int prev_match = 0;
    if (behavior == TOK_SPLIT_MERGED_NEXT) {
        /* Walk backwards: a match joins the span after it. */
        size_t w = n;
        for (size_t i = n; i-- > 0;) {
            tok_span c = sp[i];
            if (c.match && !prev_match && w < n) sp[w].start = c.start;
            else sp[--w] = (tok_span){c.start, c.end, 0};
            prev_match = c.match;
        }
        memmove(sp, sp + w, (n - w) * sizeof *sp);
        k = n - w;
    } else {
        for (size_t i = 0; i < n; i++) {
            tok_span c = sp[i];
            switch (behavior) {
            case TOK_SPLIT_REMOVED: sp[k++] = c; break;
            case TOK_SPLIT_ISOLATED: sp[k++] = (tok_span){c.start, c.end, 0}; break;
            case TOK_SPLIT_CONTIGUOUS:
                if (k && c.match == prev_match) sp[k - 1].end = c.end;
                else sp[k++] = (tok_span){c.start, c.end, 0};
                break;
            case TOK_SPLIT_MERGED_PREV:
                if (k && c.match && !prev_match) sp[k - 1].end = c.end;
                else sp[k++] = (tok_span){c.start, c.end, 0};
                break;
            }
            prev_match = c.match;
        }
    }
    for (size_t i = 0; i < k; i++) {
        if (sp[i].match) continue; /* Removed drops the matches */
        if (sp[i].end == sp[i].start) continue;
        if (tok_pieces_add(o, s + sp[i].start, sp[i].end - sp[i].start, first && sp[i].start == 0))
            return LWQ_ENOMEM;
    }
    return 0;
}

static int bytes_to_chars(tok_pieces *o, const char *s, size_t n, int first)
{
    char tmp[512];
    size_t k = 0;
    tok_buf big = {0};
    char *dst = tmp;
    if (2 * n > sizeof tmp) {
        if (tok_buf_reserve(&big, 2 * n)) return LWQ_ENOMEM;
        dst = big.p;
    }
    for (size_t i = 0; i < n; i++) k += tok_utf8_encode(tok_byte_cp((unsigned char)s[i]), dst + k);
    int rc = tok_pieces_add(o, dst, k, first);
    free(big.p);
    return rc;
}

static int pre_one(const tok_pre *p, tok_pieces *in, tok_pieces *out, lwq_error *e)
{
    if (p->kind == TOK_PRE_SEQUENCE) {
        for (size_t i = 0; i < p->nsubs; i++) {
            int rc = pre_one(&p->subs[i], in, out, e);
            if (rc) return rc;
        }
        return 0;
    }
    tok_pieces_reset(out);
    tok_spans sp = {0};
    tok_buf tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const char *s = in->buf.p + in->v[i].off;
        size_t n = in->v[i].len;
        int first = in->v[i].first;
        switch (p->kind) {
        case TOK_PRE_BYTELEVEL:
            tmp.n = 0;
            if (p->add_prefix_space && s[0] != ' ') rc = tok_buf_put(&tmp, " ", 1);
            if (!rc) rc = tok_buf_put(&tmp, s, n);
            if (rc) break;
            if (p->use_regex) {
                if ((rc = tok_regex_spans(&p->re, tmp.p, tmp.n, &sp, e))) break;
            } else {
                if (!sp.cap && !(sp.v = malloc(sizeof *sp.v))) { rc = LWQ_ENOMEM; break; }
                sp.cap = sp.cap ? sp.cap : 1;
                sp.v[0] = (tok_span){0, tmp.n, 0};
                sp.n = 1;
            }
            for (size_t k = 0; k < sp.n && !rc; k++) {
                const char *ps = tmp.p + sp.v[k].start;
                size_t pn = sp.v[k].end - sp.v[k].start;
                int pf = first && sp.v[k].start == 0;
                rc = p->lazy ? tok_pieces_add(out, ps, pn, pf) : bytes_to_chars(out, ps, pn, pf);
            }
            break;
        case TOK_PRE_METASPACE: {
            tmp.n = 0;
            int starts = n >= p->repl_len && !memcmp(s, p->repl, p->repl_len);
            /* " " becomes the replacement first, so a leading space also counts as "starts". */
            starts = starts || s[0] == ' ';
            if (!starts && (p->prepend == TOK_PREPEND_ALWAYS ||
                            (p->prepend == TOK_PREPEND_FIRST && first)))
                rc = tok_buf_put(&tmp, p->repl, p->repl_len);
            for (size_t k = 0; k < n && !rc; k++)
                rc = s[k] == ' ' ? tok_buf_put(&tmp, p->repl, p->repl_len) : tok_buf_put(&tmp, s + k, 1);
            if (rc) break;
            if (!p->split) { rc = tok_pieces_add(out, tmp.p, tmp.n, first); break; }
            /* Split before each replacement char (MergedWithNext on the replacement). */
            size_t a = 0;
            for (size_t k = 1; k + p->repl_len <= tmp.n && !rc; k++)
                if (!memcmp(tmp.p + k, p->repl, p->repl_len)) {
                    rc = tok_pieces_add(out, tmp.p + a, k - a, first && a == 0);
                    a = k;
                }
            if (!rc) rc = tok_pieces_add(out, tmp.p + a, tmp.n - a, first && a == 0);
            break;
        }
        default: /* Split, Digits, Whitespace, WhitespaceSplit */
            if ((rc = tok_regex_spans(&p->re, s, n, &sp, e))) break;
            rc = split_spans(sp.v, sp.n, p->behavior, p->invert, s, first, out);
            break;
        }
    }
    free(sp.v);
    free(tmp.p);
    if (rc == LWQ_ENOMEM) lwq_errf(e, rc, "out of memory in the pre-tokenizer");
    if (!rc) {
        out->raw_bytes = p->kind == TOK_PRE_BYTELEVEL && p->lazy;
        tok_pieces t = *in;
        *in = *out;
        *out = t;
    }
    return rc;
}

int tok_pre_apply(const tok_pre *p, tok_pieces *ps, tok_pieces *tmp, lwq_error *e)
{
    return pre_one(p, ps, tmp, e);
}

/* ---- decoders ----------------------------------------------------------------------------- */
static void dec_release(tok_dec *d)
{
    for (size_t i = 0; i < d->nsubs; i++) dec_release(&d->subs[i]);
    free(d->subs);
    free(d->pat);
    free(d->content);
    memset(d, 0, sizeof *d);
}

void tok_dec_free(tok_dec *d)
{
    if (!d) return;
    dec_release(d);
    free(d);
}

static int dec_build_into(tok_dec *d, const cJSON *j, const char *name, int depth, lwq_error *e)
{
    memset(d, 0, sizeof *d);
    const char *type = jstr(j, "type");
    if (!type) return lwq_errf(e, LWQ_EFORMAT, "%s: decoder without a \"type\"", name);
    if (depth > 8) return lwq_errf(e, LWQ_EFORMAT, "%s: decoders nested too deep", name);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr))
            return lwq_errf(e, LWQ_EFORMAT, "%s: Sequence decoder without \"decoders\"", name);
        size_t cnt = (size_t)cJSON_GetArraySize(arr);
        if (cnt > 64) return lwq_errf(e, LWQ_EFORMAT, "%s: %zu decoders in a Sequence", name, cnt);
        d->kind = TOK_DEC_SEQUENCE;
        if (!(d->subs = calloc(cnt ? cnt : 1, sizeof *d->subs))) return LWQ_ENOMEM;
        for (const cJSON *c = arr->child; c; c = c->next) {
            int rc = dec_build_into(&d->subs[d->nsubs++], c, name, depth + 1, e);
            if (rc) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) { d->kind = TOK_DEC_BYTELEVEL; return 0; }
    if (!strcmp(type, "ByteFallback")) { d->kind = TOK_DEC_BYTEFALLBACK; return 0; }
    if (!strcmp(type, "Fuse")) { d->kind = TOK_DEC_FUSE; return 0; }
    if (!strcmp(type, "Metaspace")) {
        d->kind = TOK_DEC_METASPACE;
        d->prepend = metaspace_prepend(j);
        return replacement(j, d->repl, &d->repl_len, name, e);
    }
    if (!strcmp(type, "Strip")) {
        const char *c = jstr(j, "content");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "start");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "stop");
        uint32_t cp;
        int l = c ? tok_utf8_decode((const unsigned char *)c, strlen(c), &cp) : 0;
        if (l <= 0 || (size_t)l != strlen(c) || !cJSON_IsNumber(st) || !cJSON_IsNumber(sp) ||
            st->valuedouble < 0 || sp->valuedouble < 0 || st->valuedouble > 1e6 || sp->valuedouble > 1e6)
            return lwq_errf(e, LWQ_EFORMAT, "%s: Strip decoder needs one-char content and "
                            "start/stop counts", name);
        d->kind = TOK_DEC_STRIP;
        memcpy(d->repl, c, (size_t)l);
        d->repl_len = (size_t)l;
        d->start = (size_t)st->valuedouble;
        d->stop = (size_t)sp->valuedouble;
        return 0;
    }
    if (!strcmp(type, "Replace")) {
        const char *c = jstr(j, "content");
        const char *pat = jstr(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "String");
        if (!c || !pat || !*pat)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: Replace decoder needs a non-empty "
                            "{\"String\": ...} pattern and a content", name);
        d->kind = TOK_DEC_REPLACE;
        d->pat_len = strlen(pat);
        d->content_len = strlen(c);
        if (!(d->pat = strdup(pat)) || !(d->content = strdup(c))) return LWQ_ENOMEM;
        return 0;
    }
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: decoder type '%.64s' is not supported (supported: "
                    "Sequence, ByteLevel, ByteFallback, Fuse, Metaspace, Strip, Replace)", name, type);
}

int tok_dec_build(tok_dec **out, const cJSON *j, const char *name, lwq_error *e)
{
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return 0;
    tok_dec *d = calloc(1, sizeof *d);
    if (!d) return LWQ_ENOMEM;
    int rc = dec_build_into(d, j, name, 0, e);
    if (rc) {
        tok_dec_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* Token list: malloc'd strings with lengths (a ByteLevel step can produce NUL bytes); each
 * step replaces the list. */
typedef struct { char **v; size_t *len; size_t n, cap; } strv;

static int strv_push(strv *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) return LWQ_ENOMEM;
        l->v = v;
        size_t *len = realloc(l->len, cap * sizeof *len);
        if (!len) return LWQ_ENOMEM;
        l->len = len;
        l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return LWQ_ENOMEM;
    memcpy(c, s, n);
    c[n] = 0;
    l->len[l->n] = n;
    l->v[l->n++] = c;
    return 0;
}

static void strv_free(strv *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                          : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int dec_one(const tok_dec *d, strv *in, strv *out)
{
    int rc = 0;
    tok_buf b = {0};
    switch (d->kind) {
    case TOK_DEC_SEQUENCE:
        for (size_t i = 0; i < d->nsubs && !rc; i++) rc = dec_one(&d->subs[i], in, out);
        return rc;
    case TOK_DEC_BYTELEVEL: {
        tok_buf raw = {0};
        for (size_t i = 0; i < in->n && !rc; i++) {
            const unsigned char *s = (const unsigned char *)in->v[i];
            size_t n = in->len[i], start = raw.n, k = 0;
            int ok = 1;
            while (k < n && ok) {
                uint32_t cp;
                int l = tok_utf8_decode(s + k, n - k, &cp);
                int byte = l > 0 ? tok_cp_byte(cp) : -1;
                if (byte < 0) { ok = 0; break; }
                unsigned char c = (unsigned char)byte;
                rc = tok_buf_put(&raw, &c, 1);
                k += (size_t)l;
            }
            if (!ok) { raw.n = start; rc = tok_buf_put(&raw, s, n); } /* token kept as its bytes */
        }
        if (!rc) rc = tok_utf8_lossy(&b, (const unsigned char *)raw.p, raw.n);
        free(raw.p);
        if (!rc) rc = strv_push(out, b.p ? b.p : "", b.n);
        break;
    }
    case TOK_DEC_BYTEFALLBACK: {
        tok_buf bytes = {0};
        for (size_t i = 0; i <= in->n && !rc; i++) {
            const char *t = i < in->n ? in->v[i] : NULL;
            size_t tl = t ? in->len[i] : 0;
            int hv = -1;
            if (t && tl == 6 && !strncmp(t, "<0x", 3) && t[5] == '>' && hexval(t[3]) >= 0 &&
                hexval(t[4]) >= 0)
                hv = hexval(t[3]) * 16 + hexval(t[4]);
            if (hv >= 0) { unsigned char c = (unsigned char)hv; rc = tok_buf_put(&bytes, &c, 1); continue; }
            if (bytes.n) {
                if (tok_utf8_valid_prefix(bytes.p, bytes.n) == bytes.n) rc = strv_push(out, bytes.p, bytes.n);
                else for (size_t k = 0; k < bytes.n && !rc; k++) rc = strv_push(out, "\xEF\xBF\xBD", 3);
                bytes.n = 0;
            }
            if (t && !rc) rc = strv_push(out, t, tl);
        }
        free(bytes.p);
        break;
    }
    case TOK_DEC_FUSE:
        for (size_t i = 0; i < in->n && !rc; i++) rc = tok_buf_put(&b, in->v[i], in->len[i]);
        if (!rc) rc = strv_push(out, b.p ? b.p : "", b.n);
        break;
    case TOK_DEC_STRIP:
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *s = in->v[i];
            size_t n = in->len[i], a = 0, z = n;
            for (size_t k = 0; k < d->start && a + d->repl_len <= z && !memcmp(s + a, d->repl, d->repl_len); k++)
                a += d->repl_len;
            for (size_t k = 0; k < d->stop && z >= a + d->repl_len && !memcmp(s + z - d->repl_len, d->repl, d->repl_len); k++)
                z -= d->repl_len;
            rc = strv_push(out, s + a, z - a);
        }
        break;
    case TOK_DEC_REPLACE:
    case TOK_DEC_METASPACE:
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *s = in->v[i];
            const char *pat = d->kind == TOK_DEC_REPLACE ? d->pat : d->repl;
            size_t pl = d->kind == TOK_DEC_REPLACE ? d->pat_len : d->repl_len;
            const char *with = d->kind == TOK_DEC_REPLACE ? d->content : " ";
            size_t wl = d->kind == TOK_DEC_REPLACE ? d->content_len : 1;
            b.n = 0;
            for (size_t k = 0, n = in->len[i]; k < n && !rc;) {
                if (n - k >= pl && !memcmp(s + k, pat, pl)) { rc = tok_buf_put(&b, with, wl); k += pl; }
                else { rc = tok_buf_put(&b, s + k, 1); k++; }
            }
            size_t skip = 0;
            if (d->kind == TOK_DEC_METASPACE && i == 0 && d->prepend != TOK_PREPEND_NEVER && b.n && b.p[0] == ' ')
                skip = 1;
            if (!rc) rc = strv_push(out, b.p ? b.p + skip : "", b.n - skip);
        }
        break;
    }
    free(b.p);
    if (!rc) {
        strv t = *in;
        *in = *out;
        *out = t;
        for (size_t i = 0; i < out->n; i++) free(out->v[i]);
        out->n = 0;
    }
    return rc;
}

int tok_dec_apply(const tok_dec *d, char **toks, size_t n, tok_buf *out, lwq_error *e)
{
    strv in = {0}, tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) rc = strv_push(&in, toks[i], strlen(toks[i]));
    if (!rc && d) rc = dec_one(d, &in, &tmp);
    for (size_t i = 0; i < in.n && !rc; i++) {
        if (!d && i && (rc = tok_buf_put(out, " ", 1))) break; /* no decoder: join with spaces */
        rc = tok_buf_put(out, in.v[i], in.len[i]);
    }
    if (!rc) rc = tok_buf_put(out, "", 0);
    strv_free(&in);
    strv_free(&tmp);
    if (rc) return lwq_errf(e, LWQ_ENOMEM, "out of memory decoding");
    return 0;
}
