/* fuzz/fuzz_tokenizer.c — tokenizer.json (with tokenizer_config.json) through
 * lwq_tokenizer_load_buffer, then encoding and decoding, as calibration and `lwq tokenize` do.
 *
 * Input: an archive (fuzz/fuzz_util.h): tokenizer.json (the main file), optionally
 * tokenizer_config.json, and optionally "text", the text to encode (else a fixed sample with
 * ASCII, accents, CJK, digits and a special-token spelling).  Checked on success: every id is
 * below the vocabulary size, truncation keeps at most max_len ids, decoding the ids works, and
 * decoding arbitrary ids (the text's bytes) fails cleanly or succeeds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_util.h"
#include "text/tokenizer.h"

static const char k_sample[] = "Hello, world!  It's 2024: 12345 tokens.\n\tcaf\xc3\xa9 na\xc3\xafve "
                               "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e <|endoftext|></s><unk> [CLS]";

static void encode_decode(const lwq_tokenizer *t, const char *text, size_t len)
{
    size_t vocab = lwq_tokenizer_vocab_size(t);
    lwq_token_ids ids = {0};
    for (int pass = 0; pass < 2; pass++) {
        size_t max_len = pass ? 5 : 0;
        int trunc = 0;
        lwq_error e = {0};
        int rc = lwq_tokenizer_encode(t, text, len, pass == 0, max_len, &ids, &trunc, &e);
        lwq_fuzz_check_error(rc, &e, "lwq_tokenizer_encode");
        if (rc < 0)
            continue;
        if ((size_t)rc != ids.n)
            lwq_fuzz_fail("encode returned %d but holds %zu ids", rc, ids.n);
        if (max_len && ids.n > max_len)
            lwq_fuzz_fail("truncated to %zu ids, more than max_len %zu", ids.n, max_len);
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] < 0 || (size_t)ids.ids[i] >= vocab)
                lwq_fuzz_fail("id %d out of the vocabulary (%zu)", ids.ids[i], vocab);
        char *s = NULL;
        size_t slen = 0;
        lwq_error de = {0};
        int drc = lwq_tokenizer_decode(t, ids.ids, ids.n, pass, &s, &slen, &de);
        lwq_fuzz_check_error(drc, &de, "lwq_tokenizer_decode");
        /* (a byte-fallback <0x00> decodes to a NUL inside the text: only the end is checked) */
        if (drc == 0 && (!s || s[slen] != '\0' || strlen(s) > slen))
            lwq_fuzz_fail("decode gave %s not ending at its length %zu", s ? "a string" : "NULL", slen);
        free(s);
    }
    /* hostile ids: the text's bytes, near the vocabulary and beyond it */
    size_t nid = len / 4 < 64 ? len / 4 : 64;
    int32_t *raw = malloc((nid + 1) * sizeof *raw);
    for (size_t i = 0; raw && i < nid; i++) {
        uint32_t u;
        memcpy(&u, text + 4 * i, 4);
        raw[i] = (int32_t)(u % (uint32_t)(vocab + 3)) - (u >> 31 ? 1 : 0);
    }
    if (raw) {
        char *s = NULL;
        size_t slen = 0;
        lwq_error de = {0};
        int drc = lwq_tokenizer_decode(t, raw, nid, 0, &s, &slen, &de);
        lwq_fuzz_check_error(drc, &de, "lwq_tokenizer_decode of raw ids");
        free(s);
        free(raw);
    }
    lwq_token_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lwq_fuzz_quiet();
    lwq_fuzz_file f[LWQ_FUZZ_MAX_FILES];
    int nf = lwq_fuzz_split(d, n, "tokenizer.json", f, LWQ_FUZZ_MAX_FILES);
    const lwq_fuzz_file *tj = lwq_fuzz_get(f, nf, "tokenizer.json");
    if (!tj)
        return 0;
    const lwq_fuzz_file *tc = lwq_fuzz_get(f, nf, "tokenizer_config.json");
    const lwq_fuzz_file *tx = lwq_fuzz_get(f, nf, "text");
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    int rc = lwq_tokenizer_load_buffer(&t, (const char *)tj->data, tj->len,
                                       tc ? (const char *)tc->data : NULL, tc ? tc->len : 0,
                                       "tokenizer.json", &e);
    lwq_fuzz_check_error(rc, &e, "lwq_tokenizer_load_buffer");
    if (rc == 0) {
        if (tx) {
            char *text = lwq_fuzz_cstr(tx->data, tx->len);
            encode_decode(t, text, tx->len);
            free(text);
        } else {
            encode_decode(t, k_sample, sizeof k_sample - 1);
        }
        (void)lwq_tokenizer_pad_id(t);
        (void)lwq_tokenizer_eos_id(t);
        (void)lwq_tokenizer_model_type(t);
        lwq_tokenizer_free(t);
    }
    return 0;
}
