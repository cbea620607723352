/* text/tokenizer_internal.h — shared internals of tokenizer.c (loading, pipeline, post-
 * processing), tokenizer_model.c (vocab maps, BPE, WordLevel), tokenizer_pretok.c
 * (pre-tokenizers, decoders), tokenizer_normalize.c (normalizers), tokenizer_nfc.c (NFC/NFD)
 * and tokenizer_text.c (UTF-8, regex), calling one another in that order, down.  Not a public
 * header. */
#ifndef LWQ_LAYOUT_TOKENIZER_INTERNAL_H
#define LWQ_LAYOUT_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>

#include "text/tokenizer.h"

struct cJSON;

/* ---- string pool + string -> int32 map (open addressing, power-of-two capacity) ---------- */
typedef struct tok_strmap {
    char *pool;
    size_t pool_len, pool_cap;
    struct tok_strent { uint64_t hash; uint32_t off, len; int32_t val; } *ents;
    size_t n, ents_cap;
    uint32_t *slots; /* index+1 into ents, 0 = empty */
    size_t slots_cap;
} tok_strmap;

uint64_t tok_hash(const void *p, size_t n);
/* Insert or overwrite.  Returns the entry index, or LWQ_ENOMEM. */
int tok_strmap_put(tok_strmap *m, const char *s, size_t n, int32_t val);
/* Entry index of `s`, or -1. */
long tok_strmap_find(const tok_strmap *m, const char *s, size_t n);
static inline int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t n)
{
    long i = tok_strmap_find(m, s, n);
    return i < 0 ? -1 : m->ents[i].val;
}
void tok_strmap_free(tok_strmap *m);
void tok_strmap_clear(tok_strmap *m);

/* ---- (left id, right id) -> (rank, merged id) ------------------------------------------- */
typedef struct tok_pairmap {
    struct tok_pairent { uint64_t key; uint32_t rank; int32_t id; } *slots; /* key ~0 = empty */
    size_t n, cap;
} tok_pairmap;

int tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
const struct tok_pairent *tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b);
void tok_pairmap_free(tok_pairmap *m);

/* ---- growable byte buffer + list of pieces (byte ranges of the buffer) ------------------- */
typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;
int tok_buf_reserve(tok_buf *b, size_t extra);
int tok_buf_put(tok_buf *b, const void *p, size_t n);

typedef struct tok_piece {
    size_t off, len;
    int first; /* piece starts at offset 0 of the whole input (Metaspace prepend_scheme=first) */
} tok_piece;

typedef struct tok_pieces {
    tok_buf buf;
    tok_piece *v;
    size_t n, cap;
    int raw_bytes; /* pieces are raw bytes a ByteLevel step has not mapped to chars yet */
} tok_pieces;
int tok_pieces_add(tok_pieces *ps, const char *s, size_t n, int first);
void tok_pieces_reset(tok_pieces *ps);
void tok_pieces_free(tok_pieces *ps);

/* ---- regex (PCRE2, UTF + UCP, bounded) --------------------------------------------------- */
typedef struct tok_regex {
    pcre2_code *code;
    int jit;
} tok_regex;
/* `literal` compiles the pattern as a literal string (Split/Replace "String" patterns). */
int tok_regex_compile(tok_regex *r, const char *pat, size_t len, int literal, const char *what,
                      lwq_error *e);
void tok_regex_free(tok_regex *r);
/* The string member `k` of JSON object `o`, or NULL. */
const char *tok_jstr(const struct cJSON *o, const char *k);
/* A {"String": s} (literal) or {"Regex": r} pattern object. */
int tok_pattern_compile(tok_regex *re, const struct cJSON *pat, const char *what, lwq_error *e);
int tok_is_ws(uint32_t c); /* Unicode White_Space, as Rust's char::is_whitespace */

/* A match span list as the Rust library's find_matches builds it: alternating non-match and
 * match spans covering [0, n). */
typedef struct tok_span { size_t start, end; int match; } tok_span;
typedef struct tok_spans { tok_span *v; size_t n, cap; } tok_spans;
int tok_regex_spans(const tok_regex *r, const char *s, size_t n, tok_spans *out, lwq_error *e);

/* ---- normalizers, pre-tokenizers, decoders ------------------------------------------------ */
enum { TOK_NORM_SEQUENCE, TOK_NORM_PREPEND, TOK_NORM_REPLACE, TOK_NORM_STRIP, TOK_NORM_UNICODE };
typedef struct tok_norm {
    int kind;
    struct tok_norm *subs;
    size_t nsubs;
    char *str;       /* Prepend: text; Replace: content */
    size_t str_len;
    tok_regex re;    /* Replace */
    int left, right; /* Strip */
    char form[8];    /* NFC, NFKC, NFD, NFKD */
} tok_norm;

enum { TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_MERGED_PREV, TOK_SPLIT_MERGED_NEXT,
       TOK_SPLIT_CONTIGUOUS };
enum { TOK_PRE_SEQUENCE, TOK_PRE_BYTELEVEL, TOK_PRE_SPLIT, TOK_PRE_METASPACE, TOK_PRE_DIGITS,
       TOK_PRE_WHITESPACE, TOK_PRE_WSSPLIT };
enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };
typedef struct tok_pre {
    int kind;
    struct tok_pre *subs;
    size_t nsubs;
    tok_regex re;     /* Split, ByteLevel (use_regex), Whitespace */
    int behavior, invert;
    int add_prefix_space, use_regex, lazy; /* ByteLevel; lazy: leave raw bytes for the model */
    char repl[8];     /* Metaspace replacement, UTF-8 */
    size_t repl_len;
    int prepend, split; /* Metaspace */
    int individual;     /* Digits */
} tok_pre;

enum { TOK_DEC_SEQUENCE, TOK_DEC_BYTELEVEL, TOK_DEC_METASPACE, TOK_DEC_REPLACE,
       TOK_DEC_BYTEFALLBACK, TOK_DEC_FUSE, TOK_DEC_STRIP };
typedef struct tok_dec {
    int kind;
    struct tok_dec *subs;
    size_t nsubs;
    char *pat, *content; /* Replace (String pattern) */
    size_t pat_len, content_len;
    char repl[8];        /* Metaspace, Strip content */
    size_t repl_len;
    int prepend;         /* Metaspace */
    size_t start, stop;  /* Strip */
} tok_dec;

/* ---- the tokenizer ------------------------------------------------------------------------ */
typedef struct tok_added {
    char *content;
    size_t len;
    int32_t id;
    int special, normalized, lstrip, rstrip, single_word;
} tok_added;

enum { TOK_MODEL_BPE, TOK_MODEL_WORDLEVEL };
enum { TOK_POST_ITEM_SEQ, TOK_POST_ITEM_SPECIAL };

struct lwq_tokenizer {
    char name[512];
    int model;
    /* model vocabulary */
    tok_strmap vocab;
    char **id_tok;     /* id -> token string (model vocab, overridden by added tokens) */
    size_t n_ids;      /* max id + 1 */
    int32_t unk_id;    /* -1 when the model has no unk token */
    /* BPE */
    tok_pairmap merges;
    int byte_fallback, fuse_unk, ignore_merges;
    char *cont_prefix, *eow_suffix;
    int32_t byte_ids[256];      /* ByteLevel: id of the mapped char of each byte, -1 if none */
    int32_t fallback_ids[256];  /* byte_fallback: id of "<0xXX>", -1 if none */
    /* added tokens */
    tok_added *added;
    size_t n_added;
    uint8_t added_first_raw[256], added_first_norm[256]; /* first bytes present */
    /* pipeline */
    tok_norm *norm;
    tok_pre *pre;
    tok_dec *dec;
    /* post-processor: the single-sequence template */
    struct tok_post_item { int kind; int32_t *ids; size_t n; } *post;
    size_t n_post;
    size_t n_special;
    int32_t pad_id, eos_id, bos_id;
    /* word cache: raw word bytes -> ids in cache_ids */
    pthread_mutex_t cache_mu;
    tok_strmap cache;
    int32_t *cache_ids;
    size_t cache_ids_n, cache_ids_cap;
};

/* UTF-8 */
size_t tok_utf8_valid_prefix(const char *s, size_t n); /* length of the longest valid prefix */
int tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp); /* bytes used, 0 if bad */
size_t tok_utf8_encode(uint32_t cp, char *out);
/* Append `n` bytes to `b`, replacing maximal invalid subsequences with U+FFFD. */
int tok_utf8_lossy(tok_buf *b, const unsigned char *s, size_t n);

/* GPT-2's byte <-> char table: printable Latin-1 bytes stand for themselves, the other 68
 * bytes (0-32, 127-160, 173) for U+0100.. in byte order. */
static inline uint32_t tok_byte_cp(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    if (b <= 32) return 256 + b;
    if (b <= 160) return b + 162; /* 127..160 -> 289..322 */
    return 323;                   /* 173 */
}
int tok_cp_byte(uint32_t cp); /* -1 if not a byte char */

/* Builders from cJSON (normalizers: tokenizer_normalize.c; pre-tokenizers and decoders:
 * tokenizer_pretok.c).  `j` is a cJSON object. */
int tok_norm_build(tok_norm **out, const struct cJSON *j, const char *name, lwq_error *e);
int tok_pre_build(tok_pre **out, const struct cJSON *j, const char *name, lwq_error *e);
int tok_dec_build(tok_dec **out, const struct cJSON *j, const char *name, lwq_error *e);
void tok_norm_free(tok_norm *n);
void tok_pre_free(tok_pre *p);
void tok_dec_free(tok_dec *d);

/* NFC (compose_too) or NFD of valid UTF-8 `s` into `out` (tokenizer_nfc.c). */
int tok_unicode_normalize(const char *s, size_t n, int compose_too, tok_buf *out);
/* Apply a normalizer to `s` into `out` (cleared first). */
int tok_norm_apply(const tok_norm *n, const char *s, size_t len, tok_buf *out, lwq_error *e);
/* Run the pre-tokenizer over `ps` (in place via `tmp`). */
int tok_pre_apply(const tok_pre *p, tok_pieces *ps, tok_pieces *tmp, lwq_error *e);
/* Run the decoder chain over tokens (strings, NUL-terminated) into `out`. */
int tok_dec_apply(const tok_dec *d, char **toks, size_t n, tok_buf *out, lwq_error *e);

/* Model (tokenizer_model.c). */
int tok_model_load(lwq_tokenizer *t, const struct cJSON *model, lwq_error *e);
/* Tokenize one pre-token (or raw bytes when `raw_bytes`) and append ids to `out`. */
int tok_model_word(const lwq_tokenizer *t, const char *s, size_t n, int raw_bytes,
                   lwq_token_ids *out, lwq_error *e);
int tok_ids_push(lwq_token_ids *v, int32_t id);

#endif
