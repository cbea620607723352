/* Hostile calibration lines (issue 28): the line limit holds at its stated size (F10), a huge input_ids line is streamed in bounded memory (F11), and the streamed ids parse exactly as JSON does. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tests/helpers/craft.h"
#include "text/dataset.h"

TestSuite(calib_hostile, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 240);

static lwq_calib_opts opts(size_t n, size_t seq) { return (lwq_calib_opts){.max_samples = n, .seq_len = seq}; }

/* Load `text` as c.jsonl without a tokenizer (ids only); the return code, the batch in *b. */
static int load(const char *text, size_t n, size_t seq, lwq_calib_batch *b, lwq_calib_stats *st, lwq_error *e)
{
    lwqt_write_str("c.jsonl", text);
    lwq_calib_opts o = opts(n, seq);
    o.has_pad_id = 1;
    o.pad_id = 0;
    return lwq_calib_load(NULL, lwqt_path("c.jsonl"), &o, b, st, e);
}

static void refused(const char *text, const char *needle)
{
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(load(text, 4, 8, &b, NULL, &e), LWQ_EFORMAT, "accepted: %s", text);
    cr_assert(strstr(e.msg, needle), "message lacks \"%s\": %s", needle, e.msg);
    char where[600];
    snprintf(where, sizeof where, "%s:1: ", lwqt_path("c.jsonl"));
    cr_assert(strstr(e.msg, where), "message does not name %s: %s", where, e.msg);
}

/* F10: the limit was checked only when the buffer grew, so lines up to 128 MiB passed. */
Test(calib_hostile, a_line_one_byte_over_the_limit_is_refused)
{
    FILE *fp = fopen(lwqt_path("c.jsonl"), "w");
    cr_assert_not_null(fp);
    const char *head = "{\"input_ids\": [1]}";
    fputs(head, fp);
    static char spaces[1 << 16];
    memset(spaces, ' ', sizeof spaces);
    size_t left = LWQ_CALIB_MAX_LINE + 1 - strlen(head);
    while (left) {
        size_t k = left < sizeof spaces ? left : sizeof spaces;
        cr_assert_eq(fwrite(spaces, 1, k, fp), k);
        left -= k;
    }
    fputc('\n', fp);
    fclose(fp);
    lwq_calib_opts o = opts(4, 8);
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(NULL, lwqt_path("c.jsonl"), &o, &b, NULL, &e), LWQ_EFORMAT);
    char want[700];
    snprintf(want, sizeof want, "%s:1: line longer than %zu bytes", lwqt_path("c.jsonl"), LWQ_CALIB_MAX_LINE);
    cr_assert(strstr(e.msg, want), "%s", e.msg);
}

/* ... and one of exactly the limit is read. */
Test(calib_hostile, a_line_of_exactly_the_limit_is_read)
{
    FILE *fp = fopen(lwqt_path("c.jsonl"), "w");
    cr_assert_not_null(fp);
    const char *head = "{\"input_ids\": [7, 9]}";
    fputs(head, fp);
    for (size_t i = strlen(head); i < LWQ_CALIB_MAX_LINE; i++)
        fputc(' ', fp);
    fputc('\n', fp);
    fclose(fp);
    lwq_calib_opts o = opts(4, 8);
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(NULL, lwqt_path("c.jsonl"), &o, &b, NULL, &e), 0, "%s", e.msg);
    cr_assert(b.n == 1 && b.seq == 2 && b.ids[0] == 7 && b.ids[1] == 9);
    lwq_calib_batch_free(&b);
}

/* F11: one 40 MiB line of 20 M ids, of which 16 are kept: parsed as a stream, its peak memory is
 * the line buffer, not a JSON node per id (that took 23 s and 4.9 GB for 63 MiB). */
Test(calib_hostile, a_huge_input_ids_line_is_streamed)
{
    FILE *fp = fopen(lwqt_path("c.jsonl"), "w");
    cr_assert_not_null(fp);
    fputs("{\"input_ids\": [", fp);
    size_t n = 20u << 20;
    for (size_t i = 0; i < n; i++)
        fprintf(fp, "%s%zu", i ? "," : "", i % 10);
    fputs("], \"source\": \"x\"}\n{\"input_ids\": [3, 4]}\n", fp);
    fclose(fp);
    lwq_calib_opts o = opts(4, 16);
    o.has_pad_id = 1;
    o.pad_id = 0;
    lwq_calib_batch b;
    lwq_calib_stats st;
    lwq_error e = {0};
    cr_assert_eq(lwq_calib_load(NULL, lwqt_path("c.jsonl"), &o, &b, &st, &e), 0, "%s", e.msg);
    cr_assert_eq(b.n, 2);
    cr_assert_eq(b.seq, 16);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(b.ids[i], i % 10, "id %d", i);
    cr_assert_eq(b.ids[16 + 14], 3);
    cr_assert_eq(st.truncated, 1);
    lwq_calib_batch_free(&b);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* the 40 MiB line in a 64 MiB buffer; a JSON node per id would be over 1 GB */
    cr_assert_lt(ru.ru_maxrss, 400L << 10, "peak RSS %ld KiB for a 40 MiB line", ru.ru_maxrss);
}

/* The streamed path gives exactly what JSON gives (the first key wins; escapes in keys; numbers
 * in any JSON form that is an integer) and refuses what JSON refuses. */
Test(calib_hostile, streamed_ids_parse_as_json)
{
    lwq_calib_batch b;
    lwq_error e = {0};
    cr_assert_eq(load("{\"text\": \"a]b\", \"input\\u005fids\" : [ 5 , 6.0,7e0 ,1E1] , \"input_ids\": [9]}\n"
                      "{ \"input_ids\":[0], \"meta\": {\"k\": [1, {\"x\": \"}\"}]}}\n",
                      4, 8, &b, NULL, &e),
                 0, "%s", e.msg);
    cr_assert(b.n == 2 && b.seq == 4);
    int32_t want[8] = {5, 6, 7, 10, -1, -1, -1, 0};
    for (int i = 0; i < 8; i++)
        if (b.mask[i])
            cr_assert_eq(b.ids[i], want[i], "id %d", i);
    lwq_calib_batch_free(&b);
}

Test(calib_hostile, malformed_streamed_lines_are_refused)
{
    refused("{\"input_ids\": [1,,2]}\n", "malformed JSON");
    refused("{\"input_ids\": [1, 2,]}\n", "malformed JSON");
    refused("{\"input_ids\": [1 2]}\n", "malformed JSON");
    refused("{\"input_ids\": [1, 2], \"x\": tru}\n", "malformed JSON");
    refused("{\"input_ids\": [1, 2] \"x\": 1}\n", "malformed JSON");
    refused("{\"input_ids\": [1, 2\n", "malformed JSON");
    refused("{\"input_ids\": [0x10]}\n", "malformed JSON");
    refused("{\"input_ids\": [01]}\n", "malformed JSON");
    refused("{\"input_ids\": [1, 2.5]}\n", "input_ids[1] is not an integer id");
    refused("{\"input_ids\": [1, -3]}\n", "input_ids[1] is not an integer id");
    refused("{\"input_ids\": [1, \"2\"]}\n", "input_ids[1] is not an integer id");
    refused("{\"input_ids\": [1, [2]]}\n", "input_ids[1] is not an integer id");
    refused("{\"input_ids\": \"1 2\"}\n", "\"input_ids\" is not an array");
}
