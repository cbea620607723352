/* text/tokenizer_normalize.c — the normalizers of tokenizer.json (Sequence, Prepend, Replace,
 * Strip, NFC/NFD; NFKC/NFKD on ASCII only): built from their JSON and applied to a text.  The
 * Unicode algorithm itself is in tokenizer_nfc.c, the regex layer and UTF-8 helpers in
 * tokenizer_text.c; both sit below this file. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

static void norm_release(tok_norm *n)
{
    for (size_t i = 0; i < n->nsubs; i++) norm_release(&n->subs[i]);
    free(n->subs);
    free(n->str);
    tok_regex_free(&n->re);
    memset(n, 0, sizeof *n);
}

void tok_norm_free(tok_norm *n)
{
    if (!n) return;
    norm_release(n);
    free(n);
}

static int norm_build_into(tok_norm *n, const cJSON *j, const char *name, int depth, lwq_error *e)
{
    memset(n, 0, sizeof *n);
    const char *type = tok_jstr(j, "type");
    if (!type) return lwq_errf(e, LWQ_EFORMAT, "%s: normalizer without a \"type\"", name);
    if (depth > 8) return lwq_errf(e, LWQ_EFORMAT, "%s: normalizers nested too deep", name);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr))
            return lwq_errf(e, LWQ_EFORMAT, "%s: Sequence normalizer without \"normalizers\"", name);
        n->kind = TOK_NORM_SEQUENCE;
        size_t cnt = (size_t)cJSON_GetArraySize(arr);
        if (cnt > 64) return lwq_errf(e, LWQ_EFORMAT, "%s: %zu normalizers in a Sequence", name, cnt);
        n->subs = calloc(cnt ? cnt : 1, sizeof *n->subs);
        if (!n->subs) return LWQ_ENOMEM;
        for (const cJSON *c = arr->child; c; c = c->next) {
            int rc = norm_build_into(&n->subs[n->nsubs++], c, name, depth + 1, e);
            if (rc) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "Prepend")) {
        const char *s = tok_jstr(j, "prepend");
        if (!s) return lwq_errf(e, LWQ_EFORMAT, "%s: Prepend normalizer without \"prepend\"", name);
        n->kind = TOK_NORM_PREPEND;
        n->str_len = strlen(s);
        return (n->str = strdup(s)) ? 0 : LWQ_ENOMEM;
    }
    if (!strcmp(type, "Replace")) {
        const char *s = tok_jstr(j, "content");
        if (!s) return lwq_errf(e, LWQ_EFORMAT, "%s: Replace normalizer without \"content\"", name);
        n->kind = TOK_NORM_REPLACE;
        n->str_len = strlen(s);
        if (!(n->str = strdup(s))) return LWQ_ENOMEM;
        return tok_pattern_compile(&n->re, cJSON_GetObjectItemCaseSensitive(j, "pattern"), name, e);
    }
    if (!strcmp(type, "Strip")) {
        n->kind = TOK_NORM_STRIP;
        n->left = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "strip_left"));
        n->right = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "strip_right"));
        return 0;
    }
    if (!strcmp(type, "NFC") || !strcmp(type, "NFD") || !strcmp(type, "NFKC") || !strcmp(type, "NFKD")) {
        n->kind = TOK_NORM_UNICODE;
        snprintf(n->form, sizeof n->form, "%s", type);
        return 0;
    }
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: normalizer type '%.64s' is not supported "
                    "(supported: Sequence, Prepend, Replace, Strip, NFC, NFD, NFKC, NFKD)", name, type);
}

int tok_norm_build(tok_norm **out, const cJSON *j, const char *name, lwq_error *e)
{
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return 0;
    tok_norm *n = calloc(1, sizeof *n);
    if (!n) return LWQ_ENOMEM;
    int rc = norm_build_into(n, j, name, 0, e);
    if (rc) {
        tok_norm_free(n);
        return rc;
    }
    *out = n;
    return 0;
}


static int norm_one(const tok_norm *n, tok_buf *cur, tok_buf *tmp, lwq_error *e)
{
    tmp->n = 0;
    switch (n->kind) {
    case TOK_NORM_SEQUENCE:
        for (size_t i = 0; i < n->nsubs; i++) {
            int rc = norm_one(&n->subs[i], cur, tmp, e);
            if (rc) return rc;
        }
        return 0;
    case TOK_NORM_PREPEND:
        if (!cur->n) return 0;
        if (tok_buf_put(tmp, n->str, n->str_len) || tok_buf_put(tmp, cur->p, cur->n)) return LWQ_ENOMEM;
        break;
    case TOK_NORM_REPLACE: {
        tok_spans sp = {0};
        int rc = tok_regex_spans(&n->re, cur->p, cur->n, &sp, e);
        for (size_t i = 0; !rc && i < sp.n; i++) {
            if (sp.v[i].match) rc = tok_buf_put(tmp, n->str, n->str_len);
            else rc = tok_buf_put(tmp, cur->p + sp.v[i].start, sp.v[i].end - sp.v[i].start);
        }
        free(sp.v);
        if (rc) return rc;
        if (!cur->n && tok_buf_put(tmp, "", 0)) return LWQ_ENOMEM;
        break;
    }
    case TOK_NORM_STRIP: {
        size_t a = 0, b = cur->n;
        const unsigned char *u = (const unsigned char *)cur->p;
        while (n->left && a < b) {
            uint32_t cp;
            int l = tok_utf8_decode(u + a, b - a, &cp);
            if (l <= 0 || !tok_is_ws(cp)) break;
            a += (size_t)l;
        }
        while (n->right && b > a) {
            size_t k = b - 1;
            while (k > a && (u[k] & 0xC0) == 0x80) k--;
            uint32_t cp;
            int l = tok_utf8_decode(u + k, b - k, &cp);
            if (l <= 0 || !tok_is_ws(cp)) break;
            b = k;
        }
        if (tok_buf_put(tmp, cur->p + a, b - a)) return LWQ_ENOMEM;
        break;
    }
    case TOK_NORM_UNICODE: {
        if (!strcmp(n->form, "NFC") || !strcmp(n->form, "NFD")) {
            if (tok_unicode_normalize(cur->p, cur->n, n->form[2] == 'C', tmp))
                return lwq_errf(e, LWQ_ENOMEM, "normalizer %s: out of memory", n->form);
            break;
        }
        /* NFKC/NFKD need the compatibility mappings, which lwq does not carry: it handles them
         * only on ASCII, which they leave unchanged. */
        for (size_t i = 0; i < cur->n; i++)
            if ((unsigned char)cur->p[i] >= 0x80)
                return lwq_errf(e, LWQ_EUNSUPPORTED, "normalizer %s: non-ASCII text (byte %zu) needs "
                                "compatibility decompositions, which lwq does not implement", n->form, i);
        return 0;
    }
    }
    tok_buf t = *cur;
    *cur = *tmp;
    *tmp = t;
    return 0;
}

int tok_norm_apply(const tok_norm *n, const char *s, size_t len, tok_buf *out, lwq_error *e)
{
    out->n = 0;
    if (tok_buf_put(out, s, len)) return LWQ_ENOMEM;
    tok_buf tmp = {0};
    int rc = norm_one(n, out, &tmp, e);
    free(tmp.p);
    return rc;
}
