/* text/tokenizer.c — loading tokenizer.json + tokenizer_config.json, the encode pipeline
 * (added tokens -> normalizer -> added tokens on normalized text -> pre-tokenizer -> model ->
 * post-processor), truncation and decode.  See text/tokenizer.h for the contract. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "text/tokenizer_internal.h"

void lwq_token_ids_free(lwq_token_ids *v)
{
    free(v->ids);
    memset(v, 0, sizeof *v);
}

/* ---- files -------------------------------------------------------------------------------- */
/* 1 and the file's bytes, 0 when an optional file does not exist, < 0 on error (a special file
 * is refused without blocking: core/sys/file.h). */
static int read_file(const char *path, size_t cap, char **out, size_t *len, int optional, lwq_error *e)
{
    *out = NULL;
    *len = 0;
    if (optional && access(path, F_OK) != 0 && errno == ENOENT)
        return 0;
    int rc = lwq_file_read_all(path, cap, out, len, e);
    return rc < 0 ? rc : 1;
}

static cJSON *parse_json(const char *s, size_t n, const char *what, lwq_error *e);

/* First id of a config.json "*_token_id" (an int or a list of ints) inside the vocab, or -1. */
static int32_t config_id(const lwq_tokenizer *t, const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsArray(v)) v = v->child;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= (double)t->n_ids) return -1;
    return (int32_t)v->valuedouble;
}

static void model_config_ids(lwq_tokenizer *t, const char *s, size_t n)
{
    cJSON *cfg = parse_json(s, n, "config.json", NULL);
    if (!cfg) return;
    t->eos_id = config_id(t, cfg, "eos_token_id");
    if (t->bos_id < 0) t->bos_id = config_id(t, cfg, "bos_token_id");
    if (t->pad_id < 0) t->pad_id = config_id(t, cfg, "pad_token_id");
    if (t->pad_id < 0) t->pad_id = t->eos_id;
    cJSON_Delete(cfg);
}

int lwq_tokenizer_load(lwq_tokenizer **out, const char *path, lwq_error *e)
{
    *out = NULL;
    char tj[4096], tc[4096];
    struct stat st;
    if (stat(path, &st)) return lwq_errsys(e, -errno, "%s: cannot stat", path);
    int n1, n2;
    if (S_ISDIR(st.st_mode)) {
        n1 = snprintf(tj, sizeof tj, "%s/tokenizer.json", path);
        n2 = snprintf(tc, sizeof tc, "%s/tokenizer_config.json", path);
    } else {
        const char *slash = strrchr(path, '/');
        int dl = slash ? (int)(slash - path) : 1;
        n1 = snprintf(tj, sizeof tj, "%s", path);
        n2 = snprintf(tc, sizeof tc, "%.*s/tokenizer_config.json", dl, slash ? path : ".");
    }
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof tj || (size_t)n2 >= sizeof tc)
        return lwq_errf(e, LWQ_EINVAL, "%s: path too long", path);
    char *j = NULL, *c = NULL, *m = NULL;
    size_t jl, cl, ml;
    int rc = read_file(tj, LWQ_TOK_MAX_JSON_BYTES, &j, &jl, 0, e);
    if (rc < 0) return rc;
    rc = read_file(tc, (size_t)16 << 20, &c, &cl, 1, e);
    if (rc >= 0) rc = lwq_tokenizer_load_buffer(out, j, jl, c, cl, tj, e);
    if (rc >= 0 && (*out)->eos_id < 0) {
        /* transformers' tokenizer classes carry default special tokens (GPT-2's eos is
         * <|endoftext|>) that tokenizer_config.json need not repeat; the model's config.json
         * names their ids, so take eos/pad/bos from there when the tokenizer files are silent. */
        char mc[4096];
        memcpy(mc, tc, sizeof mc);
        char *slash = strrchr(mc, '/');
        if (slash && (size_t)(slash - mc) + 13 < sizeof mc) strcpy(slash + 1, "config.json");
        if (slash && read_file(mc, (size_t)16 << 20, &m, &ml, 1, NULL) > 0) model_config_ids(*out, m, ml);
    }
    free(j);
    free(c);
    free(m);
    return rc < 0 ? rc : 0;
}

/* ---- loading ------------------------------------------------------------------------------ */
static cJSON *parse_json(const char *s, size_t n, const char *what, lwq_error *e)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!j) {
        const char *ep = end ? end : cJSON_GetErrorPtr();
        size_t off = ep && ep >= s && ep <= s + n ? (size_t)(ep - s) : 0;
        lwq_errf(e, LWQ_EFORMAT, "%s: malformed JSON near byte %zu of %zu", what, off, n);
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        lwq_errf(e, LWQ_EFORMAT, "%s: top level is not a JSON object", what);
        return NULL;
    }
    return j;
}

static int jint(const cJSON *v, long lo, long hi, long *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
        v->valuedouble != (double)(long)v->valuedouble)
        return -1;
    *out = (long)v->valuedouble;
    return 0;
}

static int load_added(lwq_tokenizer *t, const cJSON *arr, lwq_error *e)
{
    if (!arr || cJSON_IsNull(arr)) return 0;
    if (!cJSON_IsArray(arr)) return lwq_errf(e, LWQ_EFORMAT, "%s: added_tokens is not an array", t->name);
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n > ((size_t)1 << 20)) return lwq_errf(e, LWQ_ENOMEM, "%s: %zu added tokens", t->name, n);
    if (!(t->added = calloc(n ? n : 1, sizeof *t->added))) return LWQ_ENOMEM;
    for (const cJSON *a = arr->child; a; a = a->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        long id;
        size_t idx = t->n_added;
        if (!cJSON_IsString(c) || !*c->valuestring ||
            jint(cJSON_GetObjectItemCaseSensitive(a, "id"), 0, (long)LWQ_TOK_MAX_VOCAB * 2, &id))
            return lwq_errf(e, LWQ_EFORMAT, "%s: added_tokens[%zu] needs a non-empty \"content\" "
                            "and an integer \"id\" in [0, %zu]", t->name, idx, LWQ_TOK_MAX_VOCAB * 2);
        size_t len = strlen(c->valuestring);
        if (len > LWQ_TOK_MAX_TOKEN_BYTES || tok_utf8_valid_prefix(c->valuestring, len) != len)
            return lwq_errf(e, LWQ_EFORMAT, "%s: added_tokens[%zu] content is too long or not UTF-8",
                            t->name, idx);
        tok_added *d = &t->added[t->n_added++];
        if (!(d->content = strdup(c->valuestring))) return LWQ_ENOMEM;
        d->len = len;
        d->id = (int32_t)id;
        d->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        /* The Rust default for `normalized` is !special. */
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(a, "normalized");
        d->normalized = cJSON_IsBool(nm) ? cJSON_IsTrue(nm) : !d->special;
        d->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lstrip"));
        d->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "rstrip"));
        d->single_word = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "single_word"));
        if ((size_t)id + 1 > t->n_ids) t->n_ids = (size_t)id + 1;
    }
    /* Longest first, so the first hit at a position is the leftmost-longest match. */
    for (size_t i = 1; i < t->n_added; i++)
        for (size_t k = i; k > 0 && t->added[k - 1].len < t->added[k].len; k--) {
            tok_added x = t->added[k];
            t->added[k] = t->added[k - 1];
            t->added[k - 1] = x;
        }
    for (size_t i = 0; i < t->n_added; i++) {
        unsigned char b = (unsigned char)t->added[i].content[0];
        /* Normalized tokens are matched in normalized text (the raw text when there is no
         * normalizer), after the raw pass, as the Rust crate does. */
        if (t->added[i].normalized) t->added_first_norm[b] = 1;
        else t->added_first_raw[b] = 1;
    }
    return 0;
}

static int32_t lookup_token(const lwq_tokenizer *t, const char *s)
{
    if (!s) return -1;
    for (size_t i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].content, s)) return t->added[i].id;
    return tok_strmap_get(&t->vocab, s, strlen(s));
}

/* A template item list for one sequence; `kind` SEQ is where the text goes. */
static int post_push(lwq_tokenizer *t, int kind, const int32_t *ids, size_t n)
{
    struct tok_post_item *p = realloc(t->post, (t->n_post + 1) * sizeof *p);
    if (!p) return LWQ_ENOMEM;
    t->post = p;
    p[t->n_post] = (struct tok_post_item){kind, NULL, n};
    if (n) {
        if (!(p[t->n_post].ids = malloc(n * sizeof *ids))) return LWQ_ENOMEM;
        memcpy(p[t->n_post].ids, ids, n * sizeof *ids);
    }
    t->n_post++;
    return 0;
}

static void post_clear(lwq_tokenizer *t)
{
    for (size_t i = 0; i < t->n_post; i++) free(t->post[i].ids);
    free(t->post);
    t->post = NULL;
    t->n_post = 0;
}

static int post_special_pair(lwq_tokenizer *t, const cJSON *pr, const char *what, lwq_error *e)
{
    long id;
    if (!cJSON_IsArray(pr) || cJSON_GetArraySize(pr) != 2 ||
        jint(cJSON_GetArrayItem(pr, 1), 0, (long)t->n_ids - 1, &id))
        return lwq_errf(e, LWQ_EFORMAT, "%s: post_processor %s is not [token, id] with a known id",
                        t->name, what);
    int32_t v = (int32_t)id;
    return post_push(t, TOK_POST_ITEM_SPECIAL, &v, 1);
}

static int post_build(lwq_tokenizer *t, const cJSON *j, int depth, lwq_error *e)
{
    if (!j || cJSON_IsNull(j)) return 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
    const char *type = cJSON_IsString(ty) ? ty->valuestring : "";
    if (depth > 8) return lwq_errf(e, LWQ_EFORMAT, "%s: post_processors nested too deep", t->name);
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors");
        if (!cJSON_IsArray(arr)) return lwq_errf(e, LWQ_EFORMAT, "%s: Sequence post_processor "
                                                 "without \"processors\"", t->name);
        for (const cJSON *c = arr->child; c; c = c->next) {
            /* Each processor wraps what the previous ones built: expand it around that. */
            struct tok_post_item *outer = t->post;
            size_t n_outer = t->n_post;
            t->post = NULL;
            t->n_post = 0;
            int rc = post_build(t, c, depth + 1, e);
            struct tok_post_item *inner = t->post;
            size_t n_inner = t->n_post;
            t->post = NULL;
            t->n_post = 0;
            for (size_t i = 0; !rc && i < n_inner; i++) {
                if (inner[i].kind == TOK_POST_ITEM_SPECIAL)
                    rc = post_push(t, TOK_POST_ITEM_SPECIAL, inner[i].ids, inner[i].n);
                else
                    for (size_t k = 0; !rc && k < (n_outer ? n_outer : 1); k++)
                        rc = n_outer ? post_push(t, outer[k].kind, outer[k].ids, outer[k].n)
                                     : post_push(t, TOK_POST_ITEM_SEQ, NULL, 0);
            }
            if (!n_inner && !rc) /* a processor that adds nothing keeps the outer template */
                for (size_t k = 0; !rc && k < n_outer; k++)
                    rc = post_push(t, outer[k].kind, outer[k].ids, outer[k].n);
            for (size_t i = 0; i < n_inner; i++) free(inner[i].ids);
            for (size_t i = 0; i < n_outer; i++) free(outer[i].ids);
            free(inner);
            free(outer);
            if (rc) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        int rc = post_special_pair(t, cJSON_GetObjectItemCaseSensitive(j, "cls"), "cls", e);
        if (!rc) rc = post_push(t, TOK_POST_ITEM_SEQ, NULL, 0);
        if (!rc) rc = post_special_pair(t, cJSON_GetObjectItemCaseSensitive(j, "sep"), "sep", e);
        return rc;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
        if (!cJSON_IsArray(single))
            return lwq_errf(e, LWQ_EFORMAT, "%s: TemplateProcessing without a \"single\" list", t->name);
        for (const cJSON *it = single->child; it; it = it->next) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
            if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
                if (post_push(t, TOK_POST_ITEM_SEQ, NULL, 0)) return LWQ_ENOMEM;
                continue;
            }
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(st, "id");
            const cJSON *def = cJSON_IsString(name) ? cJSON_GetObjectItemCaseSensitive(sp, name->valuestring) : NULL;
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids");
            if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) > 64)
                return lwq_errf(e, LWQ_EFORMAT, "%s: TemplateProcessing item '%.64s' has no "
                                "special_tokens entry with ids", t->name,
                                cJSON_IsString(name) ? name->valuestring : "?");
            int32_t v[64];
            size_t n = 0;
            for (const cJSON *x = ids->child; x; x = x->next) {
                long id;
                if (jint(x, 0, (long)t->n_ids - 1, &id))
                    return lwq_errf(e, LWQ_EFORMAT, "%s: TemplateProcessing '%s' id out of range "
                                    "[0, %zu)", t->name, name->valuestring, t->n_ids);
                v[n++] = (int32_t)id;
            }
            if (post_push(t, TOK_POST_ITEM_SPECIAL, v, n)) return LWQ_ENOMEM;
        }
        return 0;
    }
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: post_processor type '%.64s' is not supported "
                    "(supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, "
                    "Sequence)", t->name, type);
}

static const char *cfg_token(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    v = cJSON_GetObjectItemCaseSensitive(v, "content"); /* serialized AddedToken */
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int load_config(lwq_tokenizer *t, const char *cfg_s, size_t cfg_len, lwq_error *e)
{
    t->pad_id = t->eos_id = t->bos_id = -1;
    if (!cfg_s) return 0;
    char what[600];
    snprintf(what, sizeof what, "%s (tokenizer_config.json)", t->name);
    cJSON *cfg = parse_json(cfg_s, cfg_len, what, e);
    if (!cfg) return LWQ_EFORMAT;
    t->eos_id = lookup_token(t, cfg_token(cfg, "eos_token"));
    t->bos_id = lookup_token(t, cfg_token(cfg, "bos_token"));
    t->pad_id = lookup_token(t, cfg_token(cfg, "pad_token"));
    if (t->pad_id < 0) t->pad_id = t->eos_id;
    /* transformers' Llama/Gemma fast tokenizers rebuild the post-processor from add_bos_token
     * (default true) and add_eos_token (default false), whatever tokenizer.json says. */
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer_class");
    int rc = 0;
    if (cJSON_IsString(cls) && (!strncmp(cls->valuestring, "LlamaTokenizer", 14) ||
                                !strncmp(cls->valuestring, "CodeLlamaTokenizer", 18) ||
                                !strncmp(cls->valuestring, "GemmaTokenizer", 14))) {
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
        const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
        int add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : 1, add_eos = cJSON_IsTrue(ae);
        post_clear(t);
        if (add_bos && t->bos_id >= 0) rc = post_push(t, TOK_POST_ITEM_SPECIAL, &t->bos_id, 1);
        if (!rc) rc = post_push(t, TOK_POST_ITEM_SEQ, NULL, 0);
        if (!rc && add_eos && t->eos_id >= 0) rc = post_push(t, TOK_POST_ITEM_SPECIAL, &t->eos_id, 1);
    }
    cJSON_Delete(cfg);
    return rc;
}

int lwq_tokenizer_load_buffer(lwq_tokenizer **out, const char *json, size_t json_len,
                              const char *config_json, size_t config_len, const char *name,
                              lwq_error *e)
{
    *out = NULL;
    if (json_len > LWQ_TOK_MAX_JSON_BYTES)
        return lwq_errf(e, LWQ_ENOMEM, "%s: %zu bytes, over the %zu-byte limit", name, json_len,
                        LWQ_TOK_MAX_JSON_BYTES);
    lwq_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    pthread_mutex_init(&t->cache_mu, NULL);
    snprintf(t->name, sizeof t->name, "%s", name ? name : "tokenizer.json");
    t->unk_id = t->pad_id = t->eos_id = t->bos_id = -1;
    int rc;
    cJSON *root = parse_json(json, json_len, t->name, e);
    if (!root) { rc = LWQ_EFORMAT; goto fail; }
    if ((rc = tok_model_load(t, cJSON_GetObjectItemCaseSensitive(root, "model"), e))) goto fail;
    if ((rc = tok_norm_build(&t->norm, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), t->name, e))) goto fail;
    if ((rc = tok_pre_build(&t->pre, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), t->name, e))) goto fail;
    if ((rc = tok_dec_build(&t->dec, cJSON_GetObjectItemCaseSensitive(root, "decoder"), t->name, e))) goto fail;
    if ((rc = load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), e))) goto fail;
    /* Raw-byte pieces only pay off for BPE (tok_model_word maps them back otherwise). */
    for (tok_pre *p = t->pre; p && t->model != TOK_MODEL_BPE; p = p->nsubs ? &p->subs[p->nsubs - 1] : NULL)
        p->lazy = 0;
    if (t->n_ids > LWQ_TOK_MAX_VOCAB * 2) { rc = lwq_errf(e, LWQ_ENOMEM, "%s: ids up to %zu", t->name, t->n_ids); goto fail; }
    if (!(t->id_tok = calloc(t->n_ids ? t->n_ids : 1, sizeof *t->id_tok))) { rc = LWQ_ENOMEM; goto fail; }
    for (size_t i = 0; i < t->vocab.n; i++)
        t->id_tok[t->vocab.ents[i].val] = t->vocab.pool + t->vocab.ents[i].off;
    for (size_t i = 0; i < t->n_added; i++) t->id_tok[t->added[i].id] = t->added[i].content;
    if ((rc = post_build(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), 0, e))) goto fail;
    if (!t->n_post && (rc = post_push(t, TOK_POST_ITEM_SEQ, NULL, 0))) goto fail;
    if ((rc = load_config(t, config_json, config_len, e))) goto fail;
    for (size_t i = 0; i < t->n_post; i++) t->n_special += t->post[i].n;
    cJSON_Delete(root);
    *out = t;
    return 0;
fail:
    if (rc == LWQ_ENOMEM) lwq_errf(e, rc, "%s: out of memory while loading", t->name);
    cJSON_Delete(root);
    lwq_tokenizer_free(t);
    return rc;
}

void lwq_tokenizer_free(lwq_tokenizer *t)
{
    if (!t) return;
    tok_strmap_free(&t->vocab);
    tok_strmap_free(&t->cache);
    free(t->cache_ids);
    tok_pairmap_free(&t->merges);
    free(t->id_tok);
    free(t->cont_prefix);
    free(t->eow_suffix);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    tok_norm_free(t->norm);
    tok_pre_free(t->pre);
    tok_dec_free(t->dec);
    post_clear(t);
    pthread_mutex_destroy(&t->cache_mu);
    free(t);
}

/* ---- encoding ----------------------------------------------------------------------------- */
static int is_word_char(const char *s, size_t n, int at_end)
{
    /* Rust: alphanumeric or '_'.  Non-ASCII non-space chars count as word chars here. */
    const unsigned char *u = (const unsigned char *)s;
    size_t k = at_end ? n - 1 : 0;
    if (at_end) while (k > 0 && (u[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    if (tok_utf8_decode(u + k, n - k, &cp) <= 0) return 0;
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    return !tok_is_ws(cp);
}

/* Leftmost-longest added token of the given `normalized` class in s[from..n). */
static int added_find(const lwq_tokenizer *t, const char *s, size_t n, size_t from, int normalized,
                      size_t *ms, size_t *me, int32_t *id)
{
    const uint8_t *first = normalized ? t->added_first_norm : t->added_first_raw;
    for (size_t i = from; i < n; i++) {
        if (!first[(unsigned char)s[i]]) continue;
        for (size_t k = 0; k < t->n_added; k++) {
            const tok_added *a = &t->added[k];
            if (a->normalized != normalized || a->len > n - i || memcmp(s + i, a->content, a->len)) continue;
            size_t st = i, en = i + a->len;
            if (a->single_word && ((st > 0 && is_word_char(s, st, 1)) || (en < n && is_word_char(s + en, n - en, 0))))
                continue;
            if (a->lstrip)
                while (st > from) {
                    size_t q = st - 1;
                    while (q > from && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                    uint32_t cp;
                    if (tok_utf8_decode((const unsigned char *)s + q, st - q, &cp) <= 0 || !tok_is_ws(cp)) break;
                    st = q;
                }
            if (a->rstrip)
                while (en < n) {
                    uint32_t cp;
                    int l = tok_utf8_decode((const unsigned char *)s + en, n - en, &cp);
                    if (l <= 0 || !tok_is_ws(cp)) break;
                    en += (size_t)l;
                }
            *ms = st;
            *me = en;
            *id = a->id;
            return 1;
        }
    }
    return 0;
}

typedef struct enc_ctx {
    tok_buf norm;
    tok_pieces ps, tmp;
} enc_ctx;

static int encode_words(const lwq_tokenizer *t, enc_ctx *c, const char *s, size_t n, int first,
                        lwq_token_ids *out, lwq_error *e)
{
    if (!n) return 0;
    tok_pieces_reset(&c->ps);
    if (tok_pieces_add(&c->ps, s, n, first)) return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    int rc;
    if (t->pre && (rc = tok_pre_apply(t->pre, &c->ps, &c->tmp, e))) return rc;
    for (size_t i = 0; i < c->ps.n; i++)
        if ((rc = tok_model_word(t, c->ps.buf.p + c->ps.v[i].off, c->ps.v[i].len, c->ps.raw_bytes, out, e)))
            return rc;
    return 0;
}

/* One stretch of text between raw-matched added tokens. */
static int encode_segment(const lwq_tokenizer *t, enc_ctx *c, const char *s, size_t n, int at_start,
                          lwq_token_ids *out, lwq_error *e)
{
    if (!n) return 0;
    int rc;
    if (t->norm) {
        if ((rc = tok_norm_apply(t->norm, s, n, &c->norm, e))) return rc;
        s = c->norm.p;
        n = c->norm.n;
    }
    /* Normalized text may be c->norm, which encode_words does not touch. */
    size_t pos = 0, ms, me;
    int32_t id;
    while (added_find(t, s, n, pos, 1, &ms, &me, &id)) {
        if ((rc = encode_words(t, c, s + pos, ms - pos, at_start && pos == 0, out, e))) return rc;
        if (tok_ids_push(out, id)) return LWQ_ENOMEM;
        pos = me;
    }
    return encode_words(t, c, s + pos, n - pos, at_start && pos == 0, out, e);
}

int lwq_tokenizer_encode(const lwq_tokenizer *t, const char *text, size_t len, int add_special,
                         size_t max_len, lwq_token_ids *out, int *truncated, lwq_error *e)
{
    out->n = 0;
    if (truncated) *truncated = 0;
    if (len > LWQ_TOK_MAX_TEXT_BYTES)
        return lwq_errf(e, LWQ_EINVAL, "%s: text of %zu bytes is over the %zu-byte limit", t->name,
                        len, LWQ_TOK_MAX_TEXT_BYTES);
    size_t ok = tok_utf8_valid_prefix(text, len);
    if (ok != len)
        return lwq_errf(e, LWQ_EFORMAT, "invalid UTF-8 at byte %zu of a %zu-byte text (byte 0x%02X)",
                        ok, len, (unsigned char)text[ok]);
    enc_ctx c = {0};
    int rc = 0;
    size_t pos = 0, ms, me;
    int32_t id;
    while (!rc && added_find(t, text, len, pos, 0, &ms, &me, &id)) {
        rc = encode_segment(t, &c, text + pos, ms - pos, pos == 0, out, e);
        if (!rc && tok_ids_push(out, id)) rc = LWQ_ENOMEM;
        pos = me;
    }
    if (!rc) rc = encode_segment(t, &c, text + pos, len - pos, pos == 0, out, e);
    free(c.norm.p);
    tok_pieces_free(&c.ps);
    tok_pieces_free(&c.tmp);
    if (rc) {
        if (rc == LWQ_ENOMEM) lwq_errf(e, rc, "%s: out of memory encoding", t->name);
        out->n = 0;
        return rc;
    }
    size_t nsp = add_special ? t->n_special : 0;
    if (max_len) {
        size_t room = max_len > nsp ? max_len - nsp : 0;
        if (out->n > room) {
            out->n = room;
            if (truncated) *truncated = 1;
        }
    }
    if (!add_special || !t->n_special) return (int)out->n;
    /* Expand the template around the content ids. */
    size_t content = out->n, total = content + nsp, pre = 0;
    for (size_t i = 0; i < t->n_post && t->post[i].kind == TOK_POST_ITEM_SPECIAL; i++) pre += t->post[i].n;
    if (out->cap < total) {
        int32_t *p = realloc(out->ids, total * sizeof *p);
        if (!p) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", t->name);
        out->ids = p;
        out->cap = total;
    }
    memmove(out->ids + pre, out->ids, content * sizeof *out->ids);
    size_t w = 0;
    int seen_seq = 0;
    for (size_t i = 0; i < t->n_post; i++) {
        if (t->post[i].kind == TOK_POST_ITEM_SEQ) {
            /* A template naming $A twice repeats it; the single template has it once in practice. */
            if (!seen_seq) w += content;
            seen_seq = 1;
            continue;
        }
        memcpy(out->ids + w, t->post[i].ids, t->post[i].n * sizeof *out->ids);
        w += t->post[i].n;
    }
    out->n = w;
    return (int)out->n;
}

/* ---- decoding and queries ----------------------------------------------------------------- */
int lwq_tokenizer_decode(const lwq_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                         char **out, size_t *out_len, lwq_error *e)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    char **toks = malloc((n ? n : 1) * sizeof *toks);
    if (!toks) return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", t->name);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->n_ids) {
            free(toks);
            return lwq_errf(e, LWQ_EINVAL, "%s: id %d at position %zu is outside the vocabulary "
                            "[0, %zu)", t->name, ids[i], i, t->n_ids);
        }
        char *s = t->id_tok[ids[i]];
        if (!s) continue; /* a hole in the id space: dropped, as transformers does */
        if (skip_special) {
            int sp = 0;
            for (size_t a = 0; a < t->n_added && !sp; a++) sp = t->added[a].id == ids[i] && t->added[a].special;
            if (sp) continue;
        }
        toks[k++] = s;
    }
    tok_buf b = {0};
    int rc = tok_dec_apply(t->dec, toks, k, &b, e);
    free(toks);
    if (rc) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}

size_t lwq_tokenizer_vocab_size(const lwq_tokenizer *t) { return t->n_ids; }
int32_t lwq_tokenizer_pad_id(const lwq_tokenizer *t) { return t->pad_id; }
int32_t lwq_tokenizer_eos_id(const lwq_tokenizer *t) { return t->eos_id; }
const char *lwq_tokenizer_model_type(const lwq_tokenizer *t)
{
    return t->model == TOK_MODEL_BPE ? "BPE" : "WordLevel";
}
