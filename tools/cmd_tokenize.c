/* tools/cmd_tokenize.c — `lwq tokenize DIR [--jsonl] [--decode] [--no-special] [--skip-special]`:
 * tokenize (or decode) stdin line by line with the directory's tokenizer.json, printing what
 * transformers' `tokenizer(text)["input_ids"]` (or `tokenizer.decode(ids)`) gives. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "tools/commands.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: lwq tokenize MODEL_DIR|TOKENIZER_DIR|tokenizer.json [options] < input\n\n"
            "Reads stdin one line at a time.  Without --decode each line is one text and the\n"
            "output line is its ids; with --decode each line is ids and the output is the text.\n\n"
            "  --jsonl          input texts are JSON strings, ids are JSON arrays (one per line);\n"
            "                   otherwise texts are raw lines and ids are separated by spaces\n"
            "  --decode         ids -> text\n"
            "  --no-special     do not add the post-processor's special tokens (BOS/EOS)\n"
            "  --skip-special   with --decode, drop special tokens from the text\n");
}

/* Parse ids from a line: a JSON array with --jsonl, else space-separated integers. */
static int parse_ids(const char *line, int jsonl, lwq_token_ids *ids, char *err, size_t errn)
{
    ids->n = 0;
    if (jsonl) {
        cJSON *j = cJSON_Parse(line);
        int ok = cJSON_IsArray(j);
        for (const cJSON *x = ok ? j->child : NULL; x && ok; x = x->next) {
            ok = cJSON_IsNumber(x) && x->valuedouble >= INT32_MIN && x->valuedouble <= INT32_MAX &&
                 x->valuedouble == (double)(long)x->valuedouble;
            if (ok && ids->n == ids->cap) {
                size_t cap = ids->cap ? ids->cap * 2 : 64;
                int32_t *p = realloc(ids->ids, cap * sizeof *p);
                if (!p) ok = 0;
                else { ids->ids = p; ids->cap = cap; }
            }
            if (ok) ids->ids[ids->n++] = (int32_t)x->valuedouble;
        }
        cJSON_Delete(j);
        if (!ok) snprintf(err, errn, "expected a JSON array of integer ids");
        return ok ? 0 : -1;
    }
    const char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < INT32_MIN || v > INT32_MAX) {
            snprintf(err, errn, "'%.20s' is not an integer id", p);
            return -1;
        }
        if (ids->n == ids->cap) {
            size_t cap = ids->cap ? ids->cap * 2 : 64;
            int32_t *q = realloc(ids->ids, cap * sizeof *q);
            if (!q) { snprintf(err, errn, "out of memory"); return -1; }
            ids->ids = q;
            ids->cap = cap;
        }
        ids->ids[ids->n++] = (int32_t)v;
        p = end;
    }
    return 0;
}

int lwq_cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL;
    int jsonl = 0, decode = 0, no_special = 0, skip_special = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else if (!strcmp(argv[i], "--decode")) decode = 1;
        else if (!strcmp(argv[i], "--no-special")) no_special = 1;
        else if (!strcmp(argv[i], "--skip-special")) skip_special = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return LWQ_EXIT_OK; }
        else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "lwq tokenize: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return LWQ_EXIT_ERR;
        } else dir = argv[i];
    }
    if (!dir) {
        usage(stderr);
        return LWQ_EXIT_ERR;
    }
    lwq_error e = {0};
    lwq_tokenizer *t = NULL;
    if (lwq_tokenizer_load(&t, dir, &e) < 0) {
        fprintf(stderr, "lwq tokenize: %s\n", e.msg);
        return LWQ_EXIT_ERR;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t got;
    lwq_token_ids ids = {0};
    int status = LWQ_EXIT_OK;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') line[--len] = 0;
        lwq_error_clear(&e);
        char err[160] = "";
        if (decode) {
            char *text = NULL;
            size_t tl;
            if (parse_ids(line, jsonl, &ids, err, sizeof err) ||
                lwq_tokenizer_decode(t, ids.ids, ids.n, skip_special, &text, &tl, &e) < 0) {
                fprintf(stderr, "lwq tokenize: stdin line %zu: %s\n", lineno, err[0] ? err : e.msg);
                status = LWQ_EXIT_ERR;
                break;
            }
            if (jsonl) {
                cJSON *s = cJSON_CreateString(text);
                char *out = s ? cJSON_PrintUnformatted(s) : NULL;
                if (out) puts(out);
                free(out);
                cJSON_Delete(s);
            } else {
                fwrite(text, 1, tl, stdout);
                putchar('\n');
            }
            free(text);
            continue;
        }
        const char *text = line;
        size_t tl = len;
        cJSON *j = NULL;
        if (jsonl) {
            j = cJSON_ParseWithLength(line, len);
            if (!cJSON_IsString(j)) {
                fprintf(stderr, "lwq tokenize: stdin line %zu: expected a JSON string\n", lineno);
                cJSON_Delete(j);
                status = LWQ_EXIT_ERR;
                break;
            }
            text = j->valuestring;
            tl = strlen(text);
        }
        int n = lwq_tokenizer_encode(t, text, tl, !no_special, 0, &ids, NULL, &e);
        cJSON_Delete(j);
        if (n < 0) {
            fprintf(stderr, "lwq tokenize: stdin line %zu: %s\n", lineno, e.msg);
            status = LWQ_EXIT_ERR;
            break;
        }
        if (jsonl) putchar('[');
        for (size_t i = 0; i < ids.n; i++) printf(i ? (jsonl ? ",%d" : " %d") : "%d", ids.ids[i]);
        puts(jsonl ? "]" : "");
    }
    if (fflush(stdout)) {
        perror("lwq tokenize: stdout");
        status = LWQ_EXIT_ERR;
    }
    free(line);
    lwq_token_ids_free(&ids);
    lwq_tokenizer_free(t);
    return status;
}
