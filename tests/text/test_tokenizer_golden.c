/* tests/text/test_tokenizer_golden.c — ids and decoded text equal to Hugging Face's for the
 * committed golden sets (the JSON files in tests/tokenizer/, made by tests/tokenizer/gen_golden.mjs). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "tests/helpers/fixtures.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

static cJSON *golden(const char *name)
{
    char path[4096];
    const char *src = __FILE__;
    const char *slash = strrchr(src, '/');
    snprintf(path, sizeof path, "%.*s/../tokenizer/%s", (int)(slash - src), src, name);
    size_t n;
    char *s = slurp(path, &n);
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    cr_assert_not_null(j, "golden %s does not parse", path);
    return j;
}

static lwq_tokenizer *load(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", lwqt_fixture(dir));
    lwq_error e = {0};
    lwq_tokenizer *t = NULL;
    int rc = lwq_tokenizer_load(&t, path, &e);
    cr_assert_eq(rc, 0, "load %s: %s", path, e.msg);
    return t;
}

static void check_ids(const char *dir, const char *file)
{
    lwq_tokenizer *t = load(dir);
    cJSON *g = golden(file);
    const cJSON *cases = cJSON_GetObjectItem(g, "cases");
    size_t ncase = 0, bad = 0;
    lwq_token_ids ids = {0};
    for (const cJSON *c = cases->child; c; c = c->next, ncase++) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        lwq_error e = {0};
        int n = lwq_tokenizer_encode(t, text, strlen(text), 1, 0, &ids, NULL, &e);
        cr_assert_geq(n, 0, "%s: encode failed on case %zu: %s", dir, ncase, e.msg);
        int same = (size_t)cJSON_GetArraySize(want) == ids.n;
        size_t k = 0;
        for (const cJSON *w = want->child; same && w; w = w->next, k++) same = w->valueint == ids.ids[k];
        if (!same && bad++ < 5) {
            char *ws = cJSON_PrintUnformatted(want);
            fprintf(stderr, "%s case %zu text %s\n  want %s\n  got ", dir, ncase, text, ws);
            for (size_t i = 0; i < ids.n; i++) fprintf(stderr, "%d,", ids.ids[i]);
            fprintf(stderr, "\n");
            free(ws);
        }
    }
    lwq_token_ids_free(&ids);
    cr_assert_geq(ncase, 200, "%s: only %zu golden cases", file, ncase);
    cr_assert_eq(bad, 0, "%s: %zu of %zu cases differ from Hugging Face", dir, bad, ncase);
    cJSON_Delete(g);
    lwq_tokenizer_free(t);
}

static void check_decode(const char *dir, const char *file)
{
    lwq_tokenizer *t = load(dir);
    cJSON *g = golden(file);
    size_t ncase = 0, bad = 0;
    for (const cJSON *c = cJSON_GetObjectItem(g, "cases")->child; c; c = c->next, ncase++) {
        const cJSON *want_ids = cJSON_GetObjectItem(c, "ids");
        const char *want = cJSON_GetObjectItem(c, "decoded")->valuestring;
        size_t n = (size_t)cJSON_GetArraySize(want_ids), k = 0;
        int32_t *ids = calloc(n + 1, sizeof *ids);
        for (const cJSON *w = want_ids->child; w; w = w->next) ids[k++] = w->valueint;
        char *got = NULL;
        size_t gl;
        lwq_error e = {0};
        int rc = lwq_tokenizer_decode(t, ids, n, 0, &got, &gl, &e);
        cr_assert_eq(rc, 0, "%s: decode failed on case %zu: %s", dir, ncase, e.msg);
        if ((gl != strlen(want) || memcmp(got, want, gl)) && bad++ < 5)
            fprintf(stderr, "%s decode case %zu\n  want [%s]\n  got  [%s]\n", dir, ncase, want, got);
        free(got);
        free(ids);
    }
    cr_assert_eq(bad, 0, "%s: %zu of %zu decodes differ from Hugging Face", dir, bad, ncase);
    cJSON_Delete(g);
    lwq_tokenizer_free(t);
}

Test(tokenizer_golden, gpt2_bytelevel_bpe_ids)
{
    check_ids("tokenizer-gpt2-bytelevel-bpe", "gpt2_bytelevel_bpe.json");
}

Test(tokenizer_golden, tinyllama_sentencepiece_bpe_ids)
{
    check_ids("tokenizer-tinyllama-sentencepiece-bpe", "tinyllama_sentencepiece_bpe.json");
}

Test(tokenizer_golden, agilerl_wordlevel_ids)
{
    check_ids("agilerl-tiny-qwen3-moe", "agilerl_wordlevel.json");
}

Test(tokenizer_golden, gpt2_bytelevel_bpe_decode)
{
    check_decode("tokenizer-gpt2-bytelevel-bpe", "gpt2_bytelevel_bpe.json");
}

Test(tokenizer_golden, tinyllama_sentencepiece_bpe_decode)
{
    check_decode("tokenizer-tinyllama-sentencepiece-bpe", "tinyllama_sentencepiece_bpe.json");
}

Test(tokenizer_golden, agilerl_wordlevel_decode)
{
    check_decode("agilerl-tiny-qwen3-moe", "agilerl_wordlevel.json");
}
