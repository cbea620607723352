/* fuzz/fuzz_calib.c — calibration data (`--calib PATH`) through lwq_calib_load with a real
 * byte-level BPE tokenizer (tests/data/fuzz/tokenizer-bpe, the one `lwq mkmodel` writes).
 *
 * Input: an archive (fuzz/fuzz_util.h) whose main file is calib.jsonl.  One file is loaded as
 * the file it is (.jsonl, .txt or another name); several are loaded as a directory.  Checked on
 * success: the batch is what text/dataset.h says — 1 to max_samples rows of seq <= seq_len ids,
 * left-padded, the mask and lengths agreeing with the ids, every real id in the vocabulary. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "fuzz/fuzz_util.h"
#include "text/dataset.h"
#include "text/tokenizer.h"

#define MAX_SAMPLES 16
#define SEQ_LEN 48

static lwq_tokenizer *g_tok;

static void check_batch(const lwq_calib_batch *b, const lwq_calib_stats *st)
{
    size_t vocab = lwq_tokenizer_vocab_size(g_tok);
    if (b->n < 1 || b->n > MAX_SAMPLES || b->seq < 1 || b->seq > SEQ_LEN)
        lwq_fuzz_fail("batch of %zu x %zu (limits %d x %d)", b->n, b->seq, MAX_SAMPLES, SEQ_LEN);
    if (st->samples != b->n || st->max_len != b->seq)
        lwq_fuzz_fail("stats say %zu x %zu, the batch is %zu x %zu", st->samples, st->max_len, b->n,
                      b->seq);
    size_t tokens = 0;
    for (size_t r = 0; r < b->n; r++) {
        size_t len = (size_t)b->lengths[r];
        if (b->lengths[r] < 1 || len > b->seq)
            lwq_fuzz_fail("row %zu has length %d of %zu", r, b->lengths[r], b->seq);
        for (size_t t = 0; t < b->seq; t++) {
            int real = t >= b->seq - len;
            int32_t id = b->ids[r * b->seq + t];
            if (b->mask[r * b->seq + t] != real)
                lwq_fuzz_fail("row %zu: mask[%zu] is %d, rows are left-padded to length %zu", r, t,
                              b->mask[r * b->seq + t], len);
            if (real && (id < 0 || (size_t)id >= vocab))
                lwq_fuzz_fail("row %zu: id %d at %zu is out of the vocabulary (%zu)", r, id, t, vocab);
            if (!real && id != b->pad_id)
                lwq_fuzz_fail("row %zu: padding at %zu holds %d, not pad id %d", r, t, id, b->pad_id);
        }
        tokens += len;
    }
    if (st->tokens != tokens)
        lwq_fuzz_fail("stats count %zu tokens, the rows hold %zu", st->tokens, tokens);
    char line[512];
    lwq_calib_stats_format(st, line, sizeof line);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!g_tok) {
        lwq_fuzz_quiet();
        lwq_error e = {0};
        if (lwq_tokenizer_load(&g_tok, lwq_fuzz_data("tokenizer-bpe"), &e) != 0)
            lwq_fuzz_fail("the harness's tokenizer: %s", e.msg);
    }
    lwq_fuzz_file f[LWQ_FUZZ_MAX_FILES];
    int nf = lwq_fuzz_split(d, n, "calib.jsonl", f, LWQ_FUZZ_MAX_FILES);
    if (nf == 0)
        return 0;
    const char *dir = lwq_fuzz_scratch("calib");
    if (lwq_fuzz_write(dir, f, nf) != 0)
        return 0;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s%s", dir, nf == 1 ? "/" : "", nf == 1 ? f[0].name : "");
    lwq_calib_opts o = {.max_samples = MAX_SAMPLES, .seq_len = SEQ_LEN};
    lwq_calib_batch b = {0};
    lwq_calib_stats st = {0};
    lwq_error e = {0};
    int rc = lwq_calib_load(g_tok, path, &o, &b, &st, &e);
    lwq_fuzz_check_error(rc, &e, "lwq_calib_load");
    if (rc == 0)
        check_batch(&b, &st);
    lwq_calib_batch_free(&b);
    return 0;
}
