/* fuzz/fuzz_hfptq.c — a command line through lwq_hfptq_translate (tools/hfptq_args.h), the
 * rewrite of Model Optimizer hf_ptq.py's flags that `lwq quantize` and `lwq plan` run first.
 *
 * Input: the arguments after `lwq quantize`, one per line (a line may be empty; no NUL, so
 * each line is one C string).  Checked: a refusal prints a message ("lwq: ..."); on success
 * argv[0] is the command name given, argc words follow, none NULL, argv[argc] is NULL, every
 * owned string is one of the words, and a second translation of the same line gives the same
 * words (nothing read uninitialized).  ASan finds a write past the arrays (issue 36, finding 2:
 * 7 words from one --qformat=A,B with --auto_quantize_bits in an array sized for 6). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_util.h"
#include "tools/hfptq_args.h"

#define MAX_ARGS 4096

static int translate(int argc, char **argv, lwq_hfptq_argv *out, char **err)
{
    char *notes = NULL;
    size_t nn = 0, ne = 0;
    FILE *nf = open_memstream(&notes, &nn), *ef = open_memstream(err, &ne);
    if (!nf || !ef)
        lwq_fuzz_fail("open_memstream failed");
    int rc = lwq_hfptq_translate(argc, argv, out, nf, ef);
    fclose(nf);
    fclose(ef);
    free(notes);
    return rc;
}

static void check(int argc, char **argv, const lwq_hfptq_argv *a)
{
    if (a->argc < 1 || !a->argv || a->argv[0] != argv[0])
        lwq_fuzz_fail("translated argv does not start with the command name (argc %d)", a->argc);
    if (a->argv[a->argc] != NULL)
        lwq_fuzz_fail("translated argv[%d] (its end) is not NULL", a->argc);
    for (int i = 0; i < a->argc; i++)
        if (!a->argv[i])
            lwq_fuzz_fail("translated argv[%d] of %d is NULL", i, a->argc);
    if (a->nowned < 0 || a->nowned > a->argc)
        lwq_fuzz_fail("%d owned strings for %d words", a->nowned, a->argc);
    for (int k = 0; k < a->nowned; k++) {
        int found = 0;
        for (int i = 0; i < a->argc && !found; i++)
            found = a->argv[i] == a->owned[k];
        if (!found)
            lwq_fuzz_fail("owned string %d (\"%s\") is no word of the translation", k, a->owned[k]);
    }
    (void)argc;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lwq_fuzz_quiet();
    if (memchr(d, 0, n))
        return 0;
    char *text = lwq_fuzz_cstr(d, n);
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "quantize";
    for (char *p = text; n > 0 && p;) {
        if (argc > MAX_ARGS) {
            free(text);
            return 0;
        }
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (nl)
            *nl++ = 0;
        p = nl;
    }
    argv[argc] = NULL;
    lwq_hfptq_argv a, b;
    char *err = NULL, *err2 = NULL;
    int rc = translate(argc, argv, &a, &err);
    if (rc != 0 && rc != -1)
        lwq_fuzz_fail("lwq_hfptq_translate returned %d", rc);
    if (rc && strncmp(err, "lwq: ", 5))
        lwq_fuzz_fail("a refused command line printed no message (\"%s\")", err);
    if (rc == 0) {
        check(argc, argv, &a);
        if (translate(argc, argv, &b, &err2) != 0)
            lwq_fuzz_fail("the second translation of the same command line was refused: %s", err2);
        if (b.argc != a.argc)
            lwq_fuzz_fail("two translations: %d and %d words", a.argc, b.argc);
        for (int i = 0; i < a.argc; i++)
            if (strcmp(a.argv[i], b.argv[i]))
                lwq_fuzz_fail("two translations differ at word %d: %s / %s", i, a.argv[i], b.argv[i]);
        lwq_hfptq_free(&b);
    }
    lwq_hfptq_free(&a);
    free(err);
    free(err2);
    free(text);
    return 0;
}
