/* text/dataset.h — calibration sets: text files -> one left-padded batch of token ids.
 *
 * Sources (chosen by `path`):
 *   NULL or "builtin"  the built-in text of text/calib_text.c, one sample per paragraph;
 *   FILE.jsonl         one JSON object per line (blank lines skipped); the first key present of
 *                      "input_ids" (array of ints, used as is); "messages" or "conversations"
 *                      (chat: the "content" — for conversations also "value" — strings of all
 *                      turns joined with "\n", roles dropped: the rule Model Optimizer's
 *                      dataset_utils.py applies to its chat sets, `_join_messages_content`
 *                      for nemotron-post-training-dataset-v2, the same join for magpie's
 *                      conversations); "prompt" (joined with "\n" to whichever of "completion",
 *                      "response", "output" are present); "text"; "input" (+ "output") — the
 *                      order of Model Optimizer's format auto-detection;
 *   FILE.txt           one sample per paragraph; paragraphs are separated by blank lines
 *                      (lines of only spaces/tabs/CR) and keep their inner newlines;
 *   DIRECTORY          its *.jsonl and *.txt files (not hidden, not recursive) in strcmp order.
 * The first `max_samples` samples in file order are taken (deterministic); empty texts and
 * samples with no tokens are dropped and counted.  Texts are tokenized as `tokenizer(text,
 * truncation=True, max_length=seq_len)` does; id samples are cut to their first seq_len ids.
 * Rows are left-padded (the side Model Optimizer uses for calibration) to the longest row with
 * the tokenizer's pad token, else its eos token.
 *
 * A line's "input_ids" array is parsed as a stream (the first seq_len ids kept, every one
 * checked), so a line of millions of ids costs the line's bytes, not a JSON node per id; the
 * rest of such a line is parsed as JSON as any other.  Every file is opened without blocking
 * (a FIFO is refused, core/sys/file.h), directory entries too.
 *
 * Ownership: the batch's arrays are malloc'd and freed by lwq_calib_batch_free.
 * Thread-safety: no shared state; concurrent calls on different outputs are fine.
 * Failure: a negative LWQ_E* code with file, line and byte in `e`: unreadable file, malformed
 * JSON line, line over LWQ_CALIB_MAX_LINE bytes, invalid UTF-8, an object with none of the
 * keys, ids out of the vocabulary, no samples at all, padding needed but no pad/eos token. */
#ifndef LWQ_LAYOUT_DATASET_H
#define LWQ_LAYOUT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "text/tokenizer.h"

#define LWQ_CALIB_MAX_LINE ((size_t)64 << 20)
#define LWQ_CALIB_MAX_SAMPLES ((size_t)1 << 20)
#define LWQ_CALIB_MAX_SEQ ((size_t)1 << 20)

typedef struct lwq_calib_opts {
    size_t max_samples; /* N > 0: take the first N samples */
    size_t seq_len;     /* T_max > 0: truncate every sample to this many tokens */
    int no_special;     /* 1: do not add the post-processor's special tokens */
    int32_t pad_id;     /* used when has_pad_id; otherwise the tokenizer's pad, else eos */
    int has_pad_id;
} lwq_calib_opts;

typedef struct lwq_calib_batch {
    size_t n;          /* B: samples */
    size_t seq;        /* T: longest sample after truncation */
    int32_t *ids;      /* ids: (B, T) row-major, left-padded with pad_id */
    uint8_t *mask;     /* mask: (B, T), 1 where ids holds a real token */
    int32_t *lengths;  /* lengths: (B,) real tokens per row */
    int32_t pad_id;    /* -1 when no row needed padding and none was known */
} lwq_calib_batch;

typedef struct lwq_calib_stats {
    size_t samples;       /* rows of the batch */
    size_t tokens;        /* real tokens in all rows */
    size_t max_len;       /* T */
    size_t truncated;     /* samples cut to seq_len */
    size_t dropped_empty; /* empty texts / samples with no tokens, skipped */
    size_t files;         /* files read (0 for the built-in text) */
    double mean_len;      /* tokens / samples */
    double pad_fraction;  /* padding tokens / (B * T) */
} lwq_calib_stats;

/* Load, tokenize and batch a calibration set.  `tok` may be NULL only if every sample is
 * "input_ids" and opts->has_pad_id is set (or no padding is needed).  `st` may be NULL. */
int lwq_calib_load(const lwq_tokenizer *tok, const char *path, const lwq_calib_opts *opts,
                   lwq_calib_batch *out, lwq_calib_stats *st, lwq_error *e);
/* The same from texts in memory (`n` NUL-terminated UTF-8 strings). */
int lwq_calib_from_texts(const lwq_tokenizer *tok, const char *const *texts, size_t n,
                         const lwq_calib_opts *opts, lwq_calib_batch *out, lwq_calib_stats *st,
                         lwq_error *e);
void lwq_calib_batch_free(lwq_calib_batch *b);

/* "16 samples, 2345 tokens, mean 146.6, max 256, padding 42.7%, 3 truncated, ..." */
int lwq_calib_stats_format(const lwq_calib_stats *st, char *buf, size_t n);
/* Log the stats line at INFO level. */
void lwq_calib_stats_log(const lwq_calib_stats *st);

/* The built-in calibration text (text/calib_text.c): count and i-th sample, NULL past the
 * end.  Strings are static. */
size_t lwq_calib_builtin_count(void);
const char *lwq_calib_builtin_sample(size_t i);

#endif
