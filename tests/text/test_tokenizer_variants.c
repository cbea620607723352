/* tests/text/test_tokenizer_variants.c — pipeline pieces the fixtures lack (Llama-3/Qwen2
 * Split regexes, ignore_merges, NFC, Metaspace, Digits, RobertaProcessing, added tokens with
 * lstrip/rstrip), each a fixture's
 * tokenizer.json with a patch, against ids from @huggingface/tokenizers (variant_*.json). */
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

static cJSON *parse_file(const char *path)
{
    size_t n;
    char *s = slurp(path, &n);
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    cr_assert_not_null(j, "%s does not parse", path);
    return j;
}

/* obj[item->string] = copy of item, added when absent. */
static void set(cJSON *obj, const cJSON *item)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, item->string);
    cJSON_AddItemToObject(obj, item->string, cJSON_Duplicate(item, 1));
}

static void check_variant(const char *file)
{
    char path[4096];
    const char *slash = strrchr(__FILE__, '/');
    snprintf(path, sizeof path, "%.*s/../tokenizer/%s", (int)(slash - __FILE__), __FILE__, file);
    cJSON *g = parse_file(path);
    char rel[512];
    snprintf(rel, sizeof rel, "%s/tokenizer.json", cJSON_GetObjectItem(g, "base")->valuestring);
    snprintf(path, sizeof path, "%s", lwqt_fixture(rel));
    cJSON *tj = parse_file(path);
    for (cJSON *p = cJSON_GetObjectItem(g, "patch")->child; p; p = p->next) {
        if (!strcmp(p->string, "model")) {
            for (cJSON *m = p->child; m; m = m->next) set(cJSON_GetObjectItem(tj, "model"), m);
        } else {
            set(tj, p);
        }
    }
    char *js = cJSON_PrintUnformatted(tj);
    cJSON_Delete(tj);
    lwq_tokenizer *t = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load_buffer(&t, js, strlen(js), NULL, 0, file, &e), 0, "%s", e.msg);
    free(js);
    size_t ncase = 0, bad = 0, nfc_changes = 0;
    lwq_token_ids ids = {0};
    for (const cJSON *c = cJSON_GetObjectItem(g, "cases")->child; c; c = c->next, ncase++) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        nfc_changes += cJSON_IsTrue(cJSON_GetObjectItem(c, "nfc_changes"));
        lwq_error_clear(&e);
        int n = lwq_tokenizer_encode(t, text, strlen(text), 1, 0, &ids, NULL, &e);
        cr_assert_geq(n, 0, "%s case %zu: %s", file, ncase, e.msg);
        int same = (size_t)cJSON_GetArraySize(want) == ids.n;
        size_t k = 0;
        for (const cJSON *w = want->child; same && w; w = w->next, k++) same = w->valueint == ids.ids[k];
        if (!same && bad++ < 5) {
            char *ws = cJSON_PrintUnformatted(want);
            fprintf(stderr, "%s case %zu text %s\n  want %s\n  got ", file, ncase, text, ws);
            for (size_t i = 0; i < ids.n; i++) fprintf(stderr, "%d,", ids.ids[i]);
            fprintf(stderr, "\n");
            free(ws);
            continue;
        }
        char *dec = NULL;
        cr_assert_eq(lwq_tokenizer_decode(t, ids.ids, ids.n, 0, &dec, NULL, &e), 0, "%s", e.msg);
        const char *wd = cJSON_GetObjectItem(c, "decoded")->valuestring;
        if (strcmp(dec, wd) && bad++ < 5)
            fprintf(stderr, "%s case %zu decode\n  want [%s]\n  got  [%s]\n", file, ncase, wd, dec);
        free(dec);
    }
    lwq_token_ids_free(&ids);
    cr_assert_eq(bad, 0, "%s: %zu of %zu cases differ", file, bad, ncase);
    if (strstr(file, "qwen2")) cr_assert_geq(nfc_changes, 20, "%s: too few texts that NFC changes", file);
    cJSON_Delete(g);
    lwq_tokenizer_free(t);
}

Test(tokenizer_variants, llama3_style_split_regex_ignore_merges_bos_template)
{
    check_variant("variant_llama3_style.json");
}

Test(tokenizer_variants, qwen2_style_nfc_split_regex)
{
    check_variant("variant_qwen2_style.json");
}

Test(tokenizer_variants, metaspace_prepend_first)
{
    check_variant("variant_metaspace.json");
}

Test(tokenizer_variants, digits_and_roberta_processing)
{
    check_variant("variant_digits_roberta.json");
}

Test(tokenizer_variants, added_tokens_with_lstrip_rstrip)
{
    check_variant("variant_added_strip.json");
}
