/* text/tokenizer.h — Hugging Face tokenizer.json in C, so calibration text needs no Python.
 *
 * Loads a `tokenizer.json` (and, next to it, `tokenizer_config.json` for pad/eos/bos and the
 * Llama/Gemma add_bos/add_eos override transformers applies) and turns UTF-8 text into the ids
 * that `tokenizer(text)` gives in transformers, and ids back into text.  Supported pieces:
 *   models          BPE (merges as "a b" strings or [a, b] pairs, byte_fallback, fuse_unk,
 *                   ignore_merges, continuing_subword_prefix/end_of_word_suffix) and WordLevel;
 *                   files without model.type are typed the way the Rust library does.
 *   normalizers     Sequence, Prepend, Replace, Strip, NFC, NFD (Unicode data generated from
 *                   Python's unicodedata, see tokenizer_nfc.c); NFKC/NFKD only on ASCII text
 *                   (other text fails with LWQ_EUNSUPPORTED).
 *   pre-tokenizers  ByteLevel (GPT-2 regex), Split (PCRE2, UTF+UCP, bounded), Sequence,
 *                   Metaspace, Digits, Whitespace, WhitespaceSplit.
 *   post-processors TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence.
 *   decoders        ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence.
 * Added tokens (special or not) are matched in the text before the model runs, longest first.
 *
 * Ownership: lwq_tokenizer_load returns a tokenizer the caller frees with lwq_tokenizer_free.
 * Encoded ids go into a caller-owned lwq_token_ids (reused across calls; free with
 * lwq_token_ids_free).
 * Thread-safety: after loading, a tokenizer may be used by several threads at once (the word
 * cache is behind a try-lock and is skipped when contended).
 * Failure: every function returns 0 or a count on success and a negative LWQ_E* code with a
 * message in `e` on failure: malformed json (LWQ_EFORMAT), unknown model / pre-tokenizer type
 * (LWQ_EUNSUPPORTED), invalid UTF-8 in the text (LWQ_EFORMAT with the byte offset; Python
 * cannot hold such text in a str, so transformers rejects it before tokenizing too), sizes over
 * the caps below (LWQ_ENOMEM).  Nothing aborts on bad input. */
#ifndef LWQ_LAYOUT_TOKENIZER_H
#define LWQ_LAYOUT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"

/* Caps on hostile input: a real tokenizer.json is < 40 MiB, vocabularies < 1M tokens. */
#define LWQ_TOK_MAX_JSON_BYTES ((size_t)256 << 20)
#define LWQ_TOK_MAX_VOCAB ((size_t)1 << 22)
#define LWQ_TOK_MAX_MERGES ((size_t)1 << 23)
#define LWQ_TOK_MAX_TOKEN_BYTES 4096
#define LWQ_TOK_MAX_TEXT_BYTES ((size_t)256 << 20)
/* One BPE word (a whole normalized segment when there is no pre-tokenizer, as in Llama-2) costs
 * about 50 bytes of work memory per byte, so words are capped. */
#define LWQ_TOK_MAX_WORD_BYTES ((size_t)16 << 20)

typedef struct lwq_tokenizer lwq_tokenizer;

/* A growable id vector; the tokenizer appends to it. */
typedef struct lwq_token_ids {
    int32_t *ids;
    size_t n, cap;
} lwq_token_ids;

void lwq_token_ids_free(lwq_token_ids *v);

/* `path` is a directory holding tokenizer.json (tokenizer_config.json optional) or the path of
 * a tokenizer.json file (tokenizer_config.json is then looked for next to it). */
int lwq_tokenizer_load(lwq_tokenizer **out, const char *path, lwq_error *e);
/* Same from memory; `config_json` may be NULL.  `name` is used in error messages. */
int lwq_tokenizer_load_buffer(lwq_tokenizer **out, const char *json, size_t json_len,
                              const char *config_json, size_t config_len, const char *name,
                              lwq_error *e);
void lwq_tokenizer_free(lwq_tokenizer *t);

/* Encode `len` bytes of UTF-8.  Clears `out` first.  With `add_special`, the post-processor's
 * special tokens are added (what `tokenizer(text)` does).  `max_len` > 0 truncates the way
 * transformers does with truncation=True, max_length=max_len: the text's tokens are cut from the
 * right so that they plus the special tokens fit; `*truncated` (may be NULL) says whether that
 * happened.  Returns the number of ids. */
int lwq_tokenizer_encode(const lwq_tokenizer *t, const char *text, size_t len, int add_special,
                         size_t max_len, lwq_token_ids *out, int *truncated, lwq_error *e);

/* Decode ids to a malloc'd NUL-terminated UTF-8 string (*out, length *out_len), as
 * `tokenizer.decode(ids, skip_special_tokens=skip_special, clean_up_tokenization_spaces=False)`. */
int lwq_tokenizer_decode(const lwq_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                         char **out, size_t *out_len, lwq_error *e);

/* Vocabulary size including added tokens (max id + 1). */
size_t lwq_tokenizer_vocab_size(const lwq_tokenizer *t);
/* pad_token from tokenizer_config.json, else eos_token, else -1.  When tokenizer_config.json
 * names no eos (GPT-2's relies on class defaults), lwq_tokenizer_load takes eos/bos/pad ids
 * from the model's config.json next to it. */
int32_t lwq_tokenizer_pad_id(const lwq_tokenizer *t);
int32_t lwq_tokenizer_eos_id(const lwq_tokenizer *t);
/* "BPE" or "WordLevel". */
const char *lwq_tokenizer_model_type(const lwq_tokenizer *t);

#endif
