/* tests/text/test_tokenizer.c — tokenizer.json loading errors, hostile input, and behaviours
 * not covered by the golden sets (merge pair form, byte fallback, truncation, config override,
 * decode errors, concurrent use). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "tests/helpers/fixtures.h"

static int load_str(lwq_tokenizer **t, const char *json, const char *cfg, lwq_error *e)
{
    return lwq_tokenizer_load_buffer(t, json, strlen(json), cfg, cfg ? strlen(cfg) : 0, "test.json", e);
}

static lwq_tokenizer *must_load(const char *json, const char *cfg)
{
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    int rc = load_str(&t, json, cfg, &e);
    cr_assert_eq(rc, 0, "load failed: %s", e.msg);
    return t;
}

static size_t enc(lwq_tokenizer *t, const char *text, int32_t *ids, size_t cap)
{
    lwq_token_ids v = {0};
    lwq_error e = {0};
    int n = lwq_tokenizer_encode(t, text, strlen(text), 1, 0, &v, NULL, &e);
    cr_assert_geq(n, 0, "encode failed: %s", e.msg);
    cr_assert_leq(v.n, cap);
    memcpy(ids, v.ids, v.n * sizeof *ids);
    size_t r = v.n;
    lwq_token_ids_free(&v);
    return r;
}

static void expect_fail(const char *json, int code, const char *needle)
{
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    int rc = load_str(&t, json, NULL, &e);
    cr_assert_eq(rc, code, "expected %d, got %d (%s)", code, rc, e.msg);
    cr_assert_null(t);
    cr_assert(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
}

#define BPE_HEAD "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"c\":3},"

Test(tokenizer, malformed_json_names_the_byte)
{
    expect_fail("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,,}}}", LWQ_EFORMAT,
                "malformed JSON near byte");
}

Test(tokenizer, top_level_must_be_an_object)
{
    expect_fail("[1, 2, 3]", LWQ_EFORMAT, "not a JSON object");
}

Test(tokenizer, unknown_model_type_is_unsupported)
{
    expect_fail("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}}", LWQ_EUNSUPPORTED,
                "model type 'Unigram' is not supported");
}

Test(tokenizer, unknown_pre_tokenizer_is_unsupported)
{
    expect_fail(BPE_HEAD "\"merges\":[]},\"pre_tokenizer\":{\"type\":\"CharDelimiterSplit\"}}",
                LWQ_EUNSUPPORTED, "CharDelimiterSplit");
}

Test(tokenizer, missing_model_is_a_format_error)
{
    expect_fail("{\"normalizer\": null}", LWQ_EFORMAT, "\"model\" is missing");
}

Test(tokenizer, vocab_id_must_be_an_integer)
{
    expect_fail("{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":\"zero\"}}}", LWQ_EFORMAT,
                "vocab token 'a' has id that is not a number");
}

Test(tokenizer, vocab_id_out_of_range)
{
    expect_fail("{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":1e12}}}", LWQ_EFORMAT,
                "out of range");
}

Test(tokenizer, merge_with_unknown_token)
{
    expect_fail(BPE_HEAD "\"merges\":[\"a z\"]}}", LWQ_EFORMAT, "uses token 'z'");
}

Test(tokenizer, merge_without_space)
{
    expect_fail(BPE_HEAD "\"merges\":[\"ab\"]}}", LWQ_EFORMAT, "is not \"left right\"");
}

Test(tokenizer, merge_of_wrong_shape)
{
    expect_fail(BPE_HEAD "\"merges\":[[\"a\"]]}}", LWQ_EFORMAT, "neither");
}

Test(tokenizer, unk_token_must_be_in_vocab)
{
    expect_fail(BPE_HEAD "\"merges\":[],\"unk_token\":\"<unk>\"}}", LWQ_EFORMAT,
                "unk_token '<unk>' is not in the vocab");
}

Test(tokenizer, bad_regex_is_reported)
{
    expect_fail(BPE_HEAD "\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":"
                "{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\"}}", LWQ_EFORMAT,
                "does not compile");
}

Test(tokenizer, bad_added_token_is_reported)
{
    expect_fail(BPE_HEAD "\"merges\":[]},\"added_tokens\":[{\"content\":\"\",\"id\":9}]}",
                LWQ_EFORMAT, "added_tokens[0]");
}

Test(tokenizer, template_id_out_of_range)
{
    expect_fail(BPE_HEAD "\"merges\":[]},\"post_processor\":{\"type\":\"TemplateProcessing\","
                "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],"
                "\"special_tokens\":{\"<s>\":{\"ids\":[99]}}}}", LWQ_EFORMAT, "id out of range");
}

Test(tokenizer, oversized_json_is_refused_before_parsing)
{
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    int rc = lwq_tokenizer_load_buffer(&t, "{}", LWQ_TOK_MAX_JSON_BYTES + 1, NULL, 0, "big.json", &e);
    cr_assert_eq(rc, LWQ_ENOMEM);
    cr_assert(strstr(e.msg, "over the"), "%s", e.msg);
}

Test(tokenizer, missing_directory_is_enoent)
{
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&t, "/nonexistent/model", &e), LWQ_ENOENT);
    cr_assert(strstr(e.msg, "/nonexistent/model"), "%s", e.msg);
}

Test(tokenizer, invalid_utf8_text_is_rejected_with_offset)
{
    lwq_tokenizer *t = must_load(BPE_HEAD "\"merges\":[\"a b\"]}}", NULL);
    lwq_token_ids v = {0};
    lwq_error e = {0};
    int rc = lwq_tokenizer_encode(t, "ab\xC3(", 4, 1, 0, &v, NULL, &e);
    cr_assert_eq(rc, LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "invalid UTF-8 at byte 2"), "%s", e.msg);
    /* An encoded surrogate is not UTF-8 either. */
    lwq_error_clear(&e);
    cr_assert_eq(lwq_tokenizer_encode(t, "\xED\xA0\x80", 3, 1, 0, &v, NULL, &e), LWQ_EFORMAT);
    lwq_token_ids_free(&v);
    lwq_tokenizer_free(t);
}

Test(tokenizer, pathological_regex_ends_in_an_error_not_a_hang)
{
    lwq_tokenizer *t = must_load(BPE_HEAD "\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
                                 "\"pattern\":{\"Regex\":\"(a|aa)+$\"},\"behavior\":\"Isolated\"}}", NULL);
    char text[200];
    memset(text, 'a', 150);
    text[150] = 'c';
    text[151] = 0;
    lwq_token_ids v = {0};
    lwq_error e = {0};
    int rc = lwq_tokenizer_encode(t, text, strlen(text), 1, 0, &v, NULL, &e);
    cr_assert_eq(rc, LWQ_EFORMAT, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, "regex matching stopped"), "%s", e.msg);
    lwq_token_ids_free(&v);
    lwq_tokenizer_free(t);
}

Test(tokenizer, merges_as_pairs_equal_merges_as_strings)
{
    lwq_tokenizer *a = must_load(BPE_HEAD "\"merges\":[\"a b\"]}}", NULL);
    lwq_tokenizer *b = must_load(BPE_HEAD "\"merges\":[[\"a\",\"b\"]]}}", NULL);
    int32_t x[16], y[16];
    size_t nx = enc(a, "abcab", x, 16), ny = enc(b, "abcab", y, 16);
    cr_assert_eq(nx, 3);
    cr_assert_eq(ny, 3);
    cr_assert_eq(x[0], 2);
    cr_assert_eq(x[1], 3);
    cr_assert_eq(x[2], 2);
    cr_assert_arr_eq(x, y, 3 * sizeof *x);
    lwq_tokenizer_free(a);
    lwq_tokenizer_free(b);
}

Test(tokenizer, old_file_without_model_type_is_bpe_when_it_has_merges)
{
    lwq_tokenizer *t = must_load("{\"model\":{\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}", NULL);
    cr_assert_str_eq(lwq_tokenizer_model_type(t), "BPE");
    int32_t x[4];
    cr_assert_eq(enc(t, "ab", x, 4), 1);
    cr_assert_eq(x[0], 2);
    lwq_tokenizer_free(t);
    t = must_load("{\"model\":{\"vocab\":{\"a\":0,\"[UNK]\":1},\"unk_token\":\"[UNK]\"}}", NULL);
    cr_assert_str_eq(lwq_tokenizer_model_type(t), "WordLevel");
    lwq_tokenizer_free(t);
}

Test(tokenizer, byte_fallback_and_fused_unk)
{
    const char *j = "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"fuse_unk\":true,"
                    "\"unk_token\":\"<unk>\",\"vocab\":{\"<unk>\":0,\"a\":1,\"<0xC3>\":2,\"<0xA9>\":3},"
                    "\"merges\":[]}}";
    lwq_tokenizer *t = must_load(j, NULL);
    int32_t x[8];
    size_t n = enc(t, "a\xC3\xA9" "a", x, 8); /* a é a: é falls back to its two bytes */
    cr_assert_eq(n, 4);
    cr_assert_eq(x[1], 2);
    cr_assert_eq(x[2], 3);
    lwq_tokenizer_free(t);
    /* Without the byte tokens, consecutive unknown chars fuse into one unk. */
    t = must_load("{\"model\":{\"type\":\"BPE\",\"fuse_unk\":true,\"unk_token\":\"<unk>\","
                  "\"vocab\":{\"<unk>\":0,\"a\":1},\"merges\":[]}}", NULL);
    n = enc(t, "axyza", x, 8);
    cr_assert_eq(n, 3);
    cr_assert_eq(x[1], 0);
    lwq_tokenizer_free(t);
}

static lwq_tokenizer *tinyllama(const char *cfg)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", lwqt_fixture("tokenizer-tinyllama-sentencepiece-bpe/tokenizer.json"));
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load_buffer(&t, b, (size_t)n, cfg, cfg ? strlen(cfg) : 0, path, &e), 0, "%s", e.msg);
    free(b);
    return t;
}

Test(tokenizer, truncation_keeps_the_special_tokens)
{
    lwq_tokenizer *t = tinyllama(NULL);
    lwq_token_ids v = {0};
    lwq_error e = {0};
    int trunc = 0;
    /* "Hello world" is [1, 15043, 3186]; max_len 2 leaves room for BOS + one token. */
    int n = lwq_tokenizer_encode(t, "Hello world", 11, 1, 2, &v, &trunc, &e);
    cr_assert_eq(n, 2);
    cr_assert_eq(trunc, 1);
    cr_assert_eq(v.ids[0], 1);
    cr_assert_eq(v.ids[1], 15043);
    n = lwq_tokenizer_encode(t, "Hello world", 11, 1, 3, &v, &trunc, &e);
    cr_assert_eq(n, 3);
    cr_assert_eq(trunc, 0);
    lwq_token_ids_free(&v);
    lwq_tokenizer_free(t);
}

Test(tokenizer, llama_config_add_eos_rebuilds_the_template)
{
    lwq_tokenizer *t = tinyllama("{\"tokenizer_class\":\"LlamaTokenizer\",\"bos_token\":\"<s>\","
                                 "\"eos_token\":\"</s>\",\"add_eos_token\":true}");
    int32_t x[8];
    size_t n = enc(t, "Hello world", x, 8);
    cr_assert_eq(n, 4);
    cr_assert_eq(x[0], 1);
    cr_assert_eq(x[3], 2);
    cr_assert_eq(lwq_tokenizer_pad_id(t), 2, "no pad_token: eos is the pad");
    lwq_tokenizer_free(t);
}

Test(tokenizer, decode_rejects_ids_outside_the_vocabulary)
{
    lwq_tokenizer *t = tinyllama(NULL);
    int32_t ids[] = {1, 15043, 32000};
    char *out = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_decode(t, ids, 3, 0, &out, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "id 32000 at position 2"), "%s", e.msg);
    cr_assert_null(out);
    lwq_tokenizer_free(t);
}

Test(tokenizer, decode_can_skip_special_tokens)
{
    lwq_tokenizer *t = tinyllama(NULL);
    int32_t ids[] = {1, 15043, 3186, 2};
    char *out = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_decode(t, ids, 4, 1, &out, NULL, &e), 0, "%s", e.msg);
    cr_assert_str_eq(out, "Hello world");
    free(out);
    lwq_tokenizer_free(t);
}

struct thr { lwq_tokenizer *t; const char *text; lwq_token_ids out; int rc; };

static void *worker(void *p)
{
    struct thr *a = p;
    lwq_error e = {0};
    for (int i = 0; i < 50 && a->rc >= 0; i++)
        a->rc = lwq_tokenizer_encode(a->t, a->text, strlen(a->text), 1, 0, &a->out, NULL, &e);
    return NULL;
}

Test(tokenizer, concurrent_encodes_agree_with_a_single_thread)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", lwqt_fixture("tokenizer-gpt2-bytelevel-bpe"));
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&t, path, &e), 0, "%s", e.msg);
    const char *text = "Concurrency: four threads share one tokenizer and its word cache, 1234 "
                       "times, émigré 日本 😀 — and must all see the same ids.";
    lwq_token_ids ref = {0};
    cr_assert_gt(lwq_tokenizer_encode(t, text, strlen(text), 1, 0, &ref, NULL, &e), 0);
    struct thr th[4];
    pthread_t id[4];
    for (int i = 0; i < 4; i++) {
        th[i] = (struct thr){t, text, {0}, 0};
        pthread_create(&id[i], NULL, worker, &th[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(id[i], NULL);
        cr_assert_eq(th[i].rc, (int)ref.n);
        cr_assert_arr_eq(th[i].out.ids, ref.ids, ref.n * sizeof *ref.ids);
        lwq_token_ids_free(&th[i].out);
    }
    lwq_token_ids_free(&ref);
    lwq_tokenizer_free(t);
}

Test(tokenizer, digits_split_every_unicode_numeral_like_rust)
{
    /* The Rust crate's Digits uses char::is_numeric (all of Unicode N); tokenizers.js only ASCII
     * \d, so this is checked here rather than in the JS-made goldens. */
    lwq_tokenizer *t = must_load("{\"model\":{\"type\":\"WordLevel\",\"unk_token\":\"?\",\"vocab\":"
                                 "{\"\xF0\x9D\x9F\x99\":0,\"\xF0\x9D\x9F\x9A\":1,\"x\":2,\"?\":3,\"7\":4}},"
                                 "\"pre_tokenizer\":{\"type\":\"Digits\",\"individual_digits\":true}}", NULL);
    int32_t x[8];
    size_t n = enc(t, "x\xF0\x9D\x9F\x99\xF0\x9D\x9F\x9A" "7", x, 8); /* x𝟙𝟚7 */
    cr_assert_eq(n, 4);
    int32_t want[] = {2, 0, 1, 4};
    cr_assert_arr_eq(x, want, sizeof want);
    lwq_tokenizer_free(t);
}

Test(tokenizer, decode_keeps_nul_bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", lwqt_fixture("tokenizer-gpt2-bytelevel-bpe"));
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&t, path, &e), 0, "%s", e.msg);
    lwq_token_ids v = {0};
    cr_assert_eq(lwq_tokenizer_encode(t, "a\0b", 3, 1, 0, &v, NULL, &e), 3, "%s", e.msg);
    char *out = NULL;
    size_t n = 0;
    cr_assert_eq(lwq_tokenizer_decode(t, v.ids, v.n, 0, &out, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 3);
    cr_assert_arr_eq(out, "a\0b", 3);
    free(out);
    lwq_token_ids_free(&v);
    lwq_tokenizer_free(t);
}

Test(tokenizer, oversized_word_is_refused)
{
    /* No pre-tokenizer: the whole text is one BPE word. */
    lwq_tokenizer *t = must_load(BPE_HEAD "\"merges\":[\"a b\"]}}", NULL);
    size_t n = LWQ_TOK_MAX_WORD_BYTES + 1;
    char *text = malloc(n);
    memset(text, 'a', n);
    lwq_token_ids v = {0};
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_encode(t, text, n, 1, 0, &v, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "over the"), "%s", e.msg);
    free(text);
    lwq_token_ids_free(&v);
    lwq_tokenizer_free(t);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(tokenizer, mutated_json_fails_cleanly)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", lwqt_fixture("agilerl-tiny-qwen3-moe/tokenizer.json"));
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    char base[4096];
    size_t n = fread(base, 1, sizeof base, f);
    fclose(f);
    uint64_t s = 12345;
    static const char junk[] = "{}[]\",:0-9e\\u\xff ";
    size_t loaded = 0;
    for (int it = 0; it < 1500; it++) {
        char buf[4096];
        memcpy(buf, base, n);
        int edits = 1 + (int)(rng_next(&s) % 4);
        for (int k = 0; k < edits; k++)
            buf[rng_next(&s) % n] = junk[rng_next(&s) % (sizeof junk - 1)];
        lwq_tokenizer *t = NULL;
        lwq_error e = {0};
        int rc = lwq_tokenizer_load_buffer(&t, buf, n, NULL, 0, "mutant.json", &e);
        if (rc == 0) {
            lwq_token_ids v = {0};
            lwq_tokenizer_encode(t, "0123 [EOS] 4", 12, 1, 0, &v, NULL, &e);
            lwq_token_ids_free(&v);
            lwq_tokenizer_free(t);
            loaded++;
        } else {
            cr_assert_lt(rc, 0);
            cr_assert_null(t);
            cr_assert_neq(e.msg[0], 0, "failure without a message");
        }
    }
    cr_assert_lt(loaded, 1500, "mutations should break some files");
}

/* Random UTF-8 from several scripts, whitespace and emoji. */
static size_t random_text(uint64_t *s, char *out, size_t cap)
{
    static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x20, 0x7E}, {0x09, 0x0A}, {0xC0, 0x17F},
                                         {0x391, 0x3C9}, {0x4E00, 0x4FFF}, {0x3040, 0x30FF},
                                         {0x1F600, 0x1F64F}, {0xAC00, 0xAD00}, {0x2000, 0x2030}};
    size_t n = 0, len = 1 + rng_next(s) % 40;
    for (size_t i = 0; i < len && n + 4 < cap; i++) {
        const uint32_t *r = ranges[rng_next(s) % 10];
        uint32_t cp = r[0] + (uint32_t)(rng_next(s) % (r[1] - r[0] + 1));
        if (cp < 0x80) out[n++] = (char)cp;
        else if (cp < 0x800) { out[n++] = (char)(0xC0 | cp >> 6); out[n++] = (char)(0x80 | (cp & 63)); }
        else if (cp < 0x10000) {
            out[n++] = (char)(0xE0 | cp >> 12); out[n++] = (char)(0x80 | ((cp >> 6) & 63));
            out[n++] = (char)(0x80 | (cp & 63));
        } else {
            out[n++] = (char)(0xF0 | cp >> 18); out[n++] = (char)(0x80 | ((cp >> 12) & 63));
            out[n++] = (char)(0x80 | ((cp >> 6) & 63)); out[n++] = (char)(0x80 | (cp & 63));
        }
    }
    out[n] = 0;
    return n;
}

static void round_trip(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", lwqt_fixture(dir));
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&t, path, &e), 0, "%s", e.msg);
    uint64_t s = 987654321;
    lwq_token_ids v = {0};
    for (int it = 0; it < 300; it++) {
        char text[256];
        size_t n = random_text(&s, text, sizeof text);
        cr_assert_geq(lwq_tokenizer_encode(t, text, n, 0, 0, &v, NULL, &e), 0, "%s", e.msg);
        char *out = NULL;
        size_t on = 0;
        cr_assert_eq(lwq_tokenizer_decode(t, v.ids, v.n, 0, &out, &on, &e), 0, "%s", e.msg);
        cr_assert(on == n && !memcmp(out, text, n), "%s: decode(encode(\"%s\")) = \"%s\"", dir, text, out);
        free(out);
    }
    lwq_token_ids_free(&v);
    lwq_tokenizer_free(t);
}

Test(tokenizer, gpt2_round_trips_random_unicode)
{
    round_trip("tokenizer-gpt2-bytelevel-bpe");
}

Test(tokenizer, tinyllama_round_trips_random_unicode)
{
    round_trip("tokenizer-tinyllama-sentencepiece-bpe");
}

#define PER_CHAR "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"\"},\"behavior\":\"Isolated\"}"

Test(tokenizer, nfd_decomposes_and_reorders)
{
    lwq_tokenizer *t = must_load("{\"model\":{\"type\":\"WordLevel\",\"unk_token\":\"?\",\"vocab\":{\"e\":0,"
                                 "\"\xCC\x81\":1,\"?\":2,\"o\":3,\"\xCC\xA3\":4,\"\xCC\x82\":5}},"
                                 "\"normalizer\":{\"type\":\"NFD\"}," PER_CHAR "}", NULL);
    int32_t x[8];
    /* é -> e + U+0301; ộ written o + U+0302 + U+0323 -> o + U+0323 (class 220) + U+0302 (230). */
    size_t n = enc(t, "\xC3\xA9o\xCC\x82\xCC\xA3", x, 8);
    int32_t want[] = {0, 1, 3, 4, 5};
    cr_assert_eq(n, 5);
    cr_assert_arr_eq(x, want, sizeof want);
    lwq_tokenizer_free(t);
}

Test(tokenizer, nfkc_on_non_ascii_is_unsupported)
{
    lwq_tokenizer *t = must_load("{\"model\":{\"type\":\"WordLevel\",\"unk_token\":\"?\",\"vocab\":{\"?\":0}},"
                                 "\"normalizer\":{\"type\":\"NFKC\"}}", NULL);
    lwq_token_ids v = {0};
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_encode(t, "ascii ok", 8, 1, 0, &v, NULL, &e), 1, "%s", e.msg);
    cr_assert_eq(lwq_tokenizer_encode(t, "\xEF\xAC\x81", 3, 1, 0, &v, NULL, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "NFKC"), "%s", e.msg);
    lwq_token_ids_free(&v);
    lwq_tokenizer_free(t);
}

/* Found by fuzz/fuzz_tokenizer (reproducer tests/data/fuzz/tokenizer/crash-bpe-word-of-no-ids):
 * a BPE word whose characters are all unknown, with no unk_token, gives no ids; storing that
 * empty result in the word cache, and reading it back, did arithmetic on the NULL id array
 * (UBSan: "applying zero offset to null pointer"; fails before the fix under LWQ_SANITIZE). */
Test(tokenizer, bpe_word_of_unknown_chars_without_unk_gives_no_ids)
{
    lwq_tokenizer *t = must_load(BPE_HEAD "\"merges\":[]}}", NULL);
    for (int pass = 0; pass < 2; pass++) { /* the second encode hits the word cache */
        lwq_token_ids v = {0};
        lwq_error e = {0};
        cr_assert_eq(lwq_tokenizer_encode(t, "zz", 2, 1, 0, &v, NULL, &e), 0, "pass %d: %s", pass, e.msg);
        cr_assert_eq(v.n, 0);
        lwq_token_ids_free(&v);
    }
    lwq_tokenizer_free(t);
}
