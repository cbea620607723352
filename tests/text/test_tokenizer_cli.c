/* tests/text/test_tokenizer_cli.c — `lwq tokenize`: plain and --jsonl modes, --decode, and
 * the exit status on bad input. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "tests/helpers/fixtures.h"

/* Run `lwq tokenize ARGS` with `input` on stdin; return the exit status, stdout in out. */
static int run(const char *args, const char *input, char *out, size_t cap)
{
    char in_path[] = "/tmp/lwq_tok_cli_XXXXXX";
    int fd = mkstemp(in_path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "wb");
    fwrite(input, 1, strlen(input), f);
    fclose(f);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' tokenize %s < %s 2>/dev/null", LWQ_BIN, args, in_path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    remove(in_path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* "'<fixture path>' <args>" for the shell command line */
static const char *tok_args(const char *fixture, const char *args)
{
    static char buf[4][2048];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "'%s'%s", lwqt_fixture(fixture), args);
    return buf[k];
}
#define GPT2(args) tok_args("tokenizer-gpt2-bytelevel-bpe", args)
#define LLAMA(args) tok_args("tokenizer-tinyllama-sentencepiece-bpe", args)

Test(tokenize_cli, plain_lines_give_space_separated_ids)
{
    char out[4096];
    cr_assert_eq(run(LLAMA(""), "Hello world\n\n", out, sizeof out), 0);
    cr_assert_str_eq(out, "1 15043 3186\n1\n");
}

Test(tokenize_cli, jsonl_strings_give_json_arrays_with_special_tokens)
{
    char out[4096];
    cr_assert_eq(run(GPT2(" --jsonl"), "\"Hello world\"\n\"a<|endoftext|>b\"\n", out, sizeof out), 0);
    cr_assert_str_eq(out, "[15496,995]\n[64,50256,65]\n");
}

Test(tokenize_cli, decode_jsonl)
{
    char out[4096];
    cr_assert_eq(run(LLAMA(" --jsonl --decode --skip-special"), "[1,15043,3186]\n", out, sizeof out), 0);
    cr_assert_str_eq(out, "\"Hello world\"\n");
}

Test(tokenize_cli, invalid_utf8_exits_2)
{
    char out[4096];
    cr_assert_eq(run(GPT2(""), "ok\nbad\xC0\n", out, sizeof out), 2);
    cr_assert_str_eq(out, "482\n", "the good line before the bad one is printed");
}

Test(tokenize_cli, missing_tokenizer_exits_2)
{
    char out[256];
    cr_assert_eq(run("/nonexistent", "x\n", out, sizeof out), 2);
    cr_assert_str_eq(out, "");
}
