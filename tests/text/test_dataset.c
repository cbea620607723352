/* tests/text/test_dataset.c — calibration sets: formats, order, dropping, truncation, left
 * padding, masks, stats, and the errors on bad files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/dataset.h"
#include "text/tokenizer.h"
#include "tests/helpers/fixtures.h"

static char dir[256];
static lwq_tokenizer *llama; /* TinyLlama: BOS added, pad = eos = 2 */

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/lwq_test_dataset_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char p[4096];
    snprintf(p, sizeof p, "%s", lwqt_fixture("tokenizer-tinyllama-sentencepiece-bpe"));
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&llama, p, &e), 0, "%s", e.msg);
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    lwq_tokenizer_free(llama);
}

TestSuite(dataset, .init = setup, .fini = teardown);

static const char *put(const char *name, const char *content)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(content, 1, strlen(content), f);
    fclose(f);
    return path;
}

static lwq_calib_opts opts(size_t n, size_t seq)
{
    return (lwq_calib_opts){.max_samples = n, .seq_len = seq};
}

/* ids of `text` as the tokenizer gives them (with BOS). */
static size_t ids_of(const char *text, int32_t *out, size_t cap)
{
    lwq_token_ids v = {0};
    lwq_error e = {0};
    cr_assert_geq(lwq_tokenizer_encode(llama, text, strlen(text), 1, 0, &v, NULL, &e), 0, "%s", e.msg);
    cr_assert_leq(v.n, cap);
    memcpy(out, v.ids, v.n * sizeof *out);
    size_t n = v.n;
    lwq_token_ids_free(&v);
    return n;
}

static void expect_row(const lwq_calib_batch *b, size_t r, const char *text)
{
    int32_t want[512];
    size_t n = ids_of(text, want, 512);
    cr_assert_eq((size_t)b->lengths[r], n, "row %zu length", r);
    size_t lead = b->seq - n;
    for (size_t k = 0; k < lead; k++) {
        cr_assert_eq(b->ids[r * b->seq + k], b->pad_id, "row %zu pad at %zu", r, k);
        cr_assert_eq(b->mask[r * b->seq + k], 0);
    }
    for (size_t k = 0; k < n; k++) {
        cr_assert_eq(b->ids[r * b->seq + lead + k], want[k], "row %zu token %zu", r, k);
        cr_assert_eq(b->mask[r * b->seq + lead + k], 1);
    }
}

Test(dataset, jsonl_text_first_n_in_order_empty_dropped_left_padded)
{
    const char *p = put("a.jsonl", "{\"text\": \"Hello world\"}\n\n{\"text\": \"\"}\n"
                                   "{\"text\": \"The quick brown fox jumps\"}\n{\"text\": \"third\"}\n"
                                   "{\"text\": \"never read\"}\n");
    lwq_calib_opts o = opts(3, 64);
    lwq_calib_batch b;
    lwq_calib_stats st;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, p, &o, &b, &st, &e), 0, "%s", e.msg);
    cr_assert_eq(b.n, 3);
    cr_assert_eq(b.pad_id, 2, "TinyLlama's pad_token is </s>");
    expect_row(&b, 0, "Hello world");
    expect_row(&b, 1, "The quick brown fox jumps");
    expect_row(&b, 2, "third");
    cr_assert_eq(st.dropped_empty, 1);
    cr_assert_eq(st.samples, 3);
    cr_assert_eq(st.max_len, b.seq);
    size_t tok = (size_t)(b.lengths[0] + b.lengths[1] + b.lengths[2]);
    cr_assert_eq(st.tokens, tok);
    cr_assert_float_eq(st.pad_fraction, (double)(3 * b.seq - tok) / (double)(3 * b.seq), 1e-12);
    cr_assert_float_eq(st.mean_len, (double)tok / 3.0, 1e-12);
    lwq_calib_batch_free(&b);
}

Test(dataset, chat_messages_are_joined_with_newlines)
{
    const char *p = put("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi there\"},"
                                      " {\"role\": \"assistant\", \"content\": \"Hello! How can I help?\"}]}\n");
    lwq_calib_opts o = opts(8, 64);
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, p, &o, &b, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(b.n, 1);
    expect_row(&b, 0, "Hi there\nHello! How can I help?");
    lwq_calib_batch_free(&b);
}

Test(dataset, conversations_prompt_and_input_fields_are_joined)
{
    const char *p = put("mix.jsonl",
                        "{\"conversations\": [{\"from\": \"human\", \"value\": \"Q?\"}, {\"from\": \"gpt\", \"value\": \"A.\"}]}\n"
                        "{\"prompt\": \"Say hi\", \"completion\": \"hi\", \"output\": null}\n"
                        "{\"input\": \"2+2\", \"output\": \"4\"}\n"
                        "{\"text\": \"plain\", \"input\": \"ignored\"}\n");
    lwq_calib_opts o = opts(8, 64);
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, p, &o, &b, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(b.n, 4);
    expect_row(&b, 0, "Q?\nA.");
    expect_row(&b, 1, "Say hi\nhi");
    expect_row(&b, 2, "2+2\n4");
    expect_row(&b, 3, "plain");
    lwq_calib_batch_free(&b);
}

Test(dataset, input_ids_are_used_as_given_and_truncated)
{
    const char *p = put("ids.jsonl", "{\"input_ids\": [1, 450, 4996, 17354, 1701]}\n{\"input_ids\": [1, 2]}\n");
    lwq_calib_opts o = opts(8, 4);
    lwq_calib_batch b;
    lwq_calib_stats st;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, p, &o, &b, &st, &e), 0, "%s", e.msg);
    cr_assert_eq(b.seq, 4);
    int32_t row0[] = {1, 450, 4996, 17354}, row1[] = {2, 2, 1, 2};
    cr_assert_arr_eq(b.ids, row0, sizeof row0);
    cr_assert_arr_eq(b.ids + 4, row1, sizeof row1);
    cr_assert_eq(st.truncated, 1);
    cr_assert_eq(b.mask[4], 0);
    cr_assert_eq(b.mask[6], 1);
    lwq_calib_batch_free(&b);
}

Test(dataset, txt_paragraphs_split_on_blank_lines)
{
    const char *p = put("t.txt", "first line\nsecond line\n\n  \t\nnext paragraph\n\n\nlast");
    lwq_calib_opts o = opts(8, 128);
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, p, &o, &b, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(b.n, 3);
    expect_row(&b, 0, "first line\nsecond line");
    expect_row(&b, 1, "next paragraph");
    expect_row(&b, 2, "last");
    lwq_calib_batch_free(&b);
}

Test(dataset, directory_reads_files_in_sorted_order)
{
    put("b.txt", "from b");
    put("a.jsonl", "{\"text\": \"from a\"}\n");
    put(".hidden.txt", "hidden");
    put("notes.md", "ignored");
    lwq_calib_opts o = opts(8, 64);
    lwq_calib_batch b;
    lwq_calib_stats st;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, dir, &o, &b, &st, &e), 0, "%s", e.msg);
    cr_assert_eq(b.n, 2);
    cr_assert_eq(st.files, 2);
    expect_row(&b, 0, "from a");
    expect_row(&b, 1, "from b");
    lwq_calib_batch_free(&b);
}

Test(dataset, text_truncation_is_counted)
{
    const char *p = put("long.jsonl", "{\"text\": \"one two three four five six seven eight\"}\n");
    lwq_calib_opts o = opts(1, 5);
    lwq_calib_batch b;
    lwq_calib_stats st;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, p, &o, &b, &st, &e), 0, "%s", e.msg);
    cr_assert_eq(b.seq, 5);
    cr_assert_eq(b.ids[0], 1, "BOS survives truncation");
    cr_assert_eq(st.truncated, 1);
    char line[256];
    lwq_calib_stats_format(&st, line, sizeof line);
    cr_assert(strstr(line, "1 samples, 5 tokens"), "%s", line);
    cr_assert(strstr(line, "1 truncated"), "%s", line);
    lwq_calib_batch_free(&b);
}

Test(dataset, builtin_text_tokenizes)
{
    lwq_calib_opts o = opts(1000, 256);
    lwq_calib_batch b;
    lwq_calib_stats st;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, NULL, &o, &b, &st, &e), 0, "%s", e.msg);
    cr_assert_eq(b.n, lwq_calib_builtin_count());
    cr_assert_geq(b.n, 10);
    cr_assert_gt(st.tokens, 1000);
    size_t bytes = 0;
    for (size_t i = 0; i < lwq_calib_builtin_count(); i++) bytes += strlen(lwq_calib_builtin_sample(i));
    cr_assert_gt(bytes, 4000, "a few KB of text");
    cr_assert_null(lwq_calib_builtin_sample(lwq_calib_builtin_count()));
    lwq_calib_batch_free(&b);
}

static void expect_load_error(const char *path, int code, const char *needle)
{
    lwq_calib_opts o = opts(8, 64);
    lwq_calib_batch b;
    lwq_error e = {0};
    int rc = lwq_calib_load(llama, path, &o, &b, NULL, &e);
    cr_assert_eq(rc, code, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
    cr_assert_null(b.ids);
}

Test(dataset, malformed_json_line_names_file_and_line)
{
    const char *p = put("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
    char want[4200];
    snprintf(want, sizeof want, "%s:2: malformed JSON", p);
    expect_load_error(p, LWQ_EFORMAT, want);
}

Test(dataset, invalid_utf8_names_file_line_and_byte)
{
    const char *p = put("bad.txt", "good line\nbad \xFF byte\n");
    expect_load_error(p, LWQ_EFORMAT, "bad.txt:2: invalid UTF-8 at byte 4");
}

Test(dataset, object_without_known_keys)
{
    expect_load_error(put("x.jsonl", "{\"title\": \"hi\"}\n"), LWQ_EFORMAT,
                      "none of \"input_ids\", \"messages\", \"conversations\", \"prompt\"");
}

Test(dataset, message_without_content)
{
    expect_load_error(put("x.jsonl", "{\"messages\": [{\"role\": \"user\"}]}\n"), LWQ_EFORMAT,
                      "messages[0] has no string \"content\"");
}

Test(dataset, input_id_outside_vocabulary)
{
    expect_load_error(put("x.jsonl", "{\"input_ids\": [1, 32000]}\n"), LWQ_EFORMAT,
                      "input_ids[1] is not an integer id in [0, 32000)");
}

/* the message names the file (it said "calibration: no samples"; seen by fuzz/fuzz_calib) */
Test(dataset, no_samples_at_all)
{
    expect_load_error(put("empty.jsonl", "{\"text\": \"\"}\n\n"), LWQ_ENOENT,
                      "empty.jsonl: no samples (1 empty dropped)");
}

Test(dataset, wrong_extension)
{
    expect_load_error(put("data.csv", "a,b\n"), LWQ_EINVAL, "must end in .jsonl or .txt");
}

Test(dataset, zero_samples_requested)
{
    lwq_calib_opts o = opts(0, 64);
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(llama, NULL, &o, &b, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "sample count 0"), "%s", e.msg);
}

Test(dataset, padding_without_pad_or_eos_token)
{
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    const char *j = "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"b\":1,\"?\":2},\"unk_token\":\"?\"},"
                    "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"}}";
    cr_assert_eq(lwq_tokenizer_load_buffer(&t, j, strlen(j), NULL, 0, "w.json", &e), 0, "%s", e.msg);
    const char *texts[] = {"a b a", "b"};
    lwq_calib_opts o = opts(8, 64);
    lwq_calib_batch b;
    cr_assert_eq(lwq_calib_from_texts(t, texts, 2, &o, &b, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "no pad_token or eos_token"), "%s", e.msg);
    /* An explicit pad id resolves it. */
    lwq_error_clear(&e);
    o.has_pad_id = 1;
    o.pad_id = 2;
    cr_assert_eq(lwq_calib_from_texts(t, texts, 2, &o, &b, NULL, &e), 0, "%s", e.msg);
    int32_t want[] = {0, 1, 0, 2, 2, 1};
    cr_assert_arr_eq(b.ids, want, sizeof want);
    lwq_calib_batch_free(&b);
    lwq_tokenizer_free(t);
}

Test(dataset, gpt2_pad_falls_back_to_model_config_eos)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", lwqt_fixture("tokenizer-gpt2-bytelevel-bpe"));
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&t, p, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_tokenizer_eos_id(t), 50256);
    cr_assert_eq(lwq_tokenizer_pad_id(t), 50256);
    lwq_tokenizer_free(t);
}
