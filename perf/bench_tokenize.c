/* perf/bench_tokenize.c — single-thread tokenization throughput (MB of UTF-8 text per second).
 *
 * usage: bench_tokenize [FIXTURES_DIR] [MB] [ONLY]   (FIXTURES_DIR defaults to $LWQ_FIXTURES,
 * then ../shared/fixtures; MB of text per corpus, default 16; ONLY: run the tokenizers whose
 * folder name contains this string)
 *
 * Throughput is MB per CPU-second of the tokenizing thread (and per wall second).
 * Two corpora: "prose+code" repeats the built-in calibration text (natural word frequencies,
 * so the BPE word cache hits as on real text), "random words" strings pseudo-random syllables,
 * digits, punctuation and some non-ASCII into words that rarely repeat (cache mostly misses).
 * Before timing, each tokenizer's output on a known text is checked against Hugging Face ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/dataset.h"
#include "text/tokenizer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of this thread: "per core" throughput that other jobs on a shared VM do not skew
 * as much as wall time. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *corpus_prose(size_t bytes, size_t *len)
{
    char *b = malloc(bytes + 65536);
    size_t n = 0;
    for (size_t i = 0; n < bytes; i = (i + 1) % lwq_calib_builtin_count()) {
        const char *s = lwq_calib_builtin_sample(i);
        size_t l = strlen(s);
        memcpy(b + n, s, l);
        n += l;
        b[n++] = '\n';
    }
    *len = n;
    return b;
}

static char *corpus_random(size_t bytes, size_t *len)
{
    static const char *syl[] = {"ka", "lo", "mi", "ren", "sta", "qu", "th", "or", "ex", "ple",
                                "ing", "tion", "é", "ü", "ñ", "str", "ght", "zz", "ow", "ae"};
    static const char *sep[] = {" ", " ", " ", " ", ", ", ". ", "\n", "  ", "-", "(", ") ", " 日本 "};
    char *b = malloc(bytes + 256);
    size_t n = 0;
    unsigned long long x = 88172645463325252ull;
    while (n < bytes) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int nsyl = 1 + (int)(x % 4);
        for (int k = 0; k < nsyl; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            const char *s = syl[x % 20];
            size_t l = strlen(s);
            memcpy(b + n, s, l);
            n += l;
        }
        if (x % 7 == 0) n += (size_t)sprintf(b + n, "%llu", (x >> 20) % 100000);
        const char *s = sep[(x >> 8) % 12];
        memcpy(b + n, s, strlen(s));
        n += strlen(s);
    }
    *len = n;
    return b;
}

static int check(lwq_tokenizer *t, const char *text, const int32_t *want, size_t nwant, const char *name)
{
    lwq_token_ids ids = {0};
    lwq_error e = {0};
    int n = lwq_tokenizer_encode(t, text, strlen(text), 1, 0, &ids, NULL, &e);
    int ok = n == (int)nwant && !memcmp(ids.ids, want, nwant * sizeof *want);
    if (!ok) fprintf(stderr, "%s: wrong ids for \"%s\" (%s)\n", name, text, e.msg);
    lwq_token_ids_free(&ids);
    return ok;
}

/* Tokenize the corpus line by line (one call per line, as a dataset would).  Returns CPU
 * seconds; *wall gets wall seconds. */
static double run(lwq_tokenizer *t, const char *buf, size_t len, size_t *ntok, double *wall)
{
    lwq_token_ids ids = {0};
    lwq_error e = {0};
    *ntok = 0;
    double w0 = now(), t0 = cpu_now();
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t l = nl ? (size_t)(nl - (buf + i)) + 1 : len - i;
        int n = lwq_tokenizer_encode(t, buf + i, l, 0, 0, &ids, NULL, &e);
        if (n < 0) { fprintf(stderr, "encode: %s\n", e.msg); exit(1); }
        *ntok += (size_t)n;
        i += l;
    }
    double dt = cpu_now() - t0;
    *wall = now() - w0;
    lwq_token_ids_free(&ids);
    return dt;
}

int main(int argc, char **argv)
{
    const char *fx = argc > 1 ? argv[1] : getenv("LWQ_FIXTURES");
    if (!fx) fx = "../shared/fixtures";
    size_t mb = argc > 2 ? (size_t)atoi(argv[2]) : 16;
    struct { const char *dir, *text; int32_t want[8]; size_t n; } tk[] = {
        {"tokenizer-gpt2-bytelevel-bpe", "Hello world", {15496, 995}, 2},
        {"tokenizer-tinyllama-sentencepiece-bpe", "Hello world", {1, 15043, 3186}, 3},
        {"agilerl-tiny-qwen3-moe", "01234 5", {0, 1, 2, 3, 4, 5, 5}, 7},
    };
    size_t lp, lr;
    char *prose = corpus_prose(mb << 20, &lp), *rnd = corpus_random(mb << 20, &lr);
    printf("%-40s %-14s %6s %12s %12s %14s\n", "tokenizer", "corpus", "MB", "MB/cpu-s", "MB/wall-s",
           "tokens/cpu-s");
    for (size_t k = 0; k < sizeof tk / sizeof tk[0]; k++) {
        char path[4096];
        if (argc > 3 && !strstr(tk[k].dir, argv[3])) continue;
        snprintf(path, sizeof path, "%s/%s", fx, tk[k].dir);
        lwq_tokenizer *t = NULL;
        lwq_error e = {0};
        double t0 = now();
        if (lwq_tokenizer_load(&t, path, &e) < 0) { fprintf(stderr, "%s\n", e.msg); return 1; }
        double tload = now() - t0;
        if (!check(t, tk[k].text, tk[k].want, tk[k].n, tk[k].dir)) return 1;
        for (int c = 0; c < 2; c++) {
            const char *buf = c ? rnd : prose;
            size_t len = c ? lr : lp, ntok;
            double wall;
            run(t, buf, len < (1u << 20) ? len : (1u << 20), &ntok, &wall); /* warm the cache */
            double dt = run(t, buf, len, &ntok, &wall);
            double mb = (double)len / 1048576.0;
            printf("%-40s %-14s %6.1f %12.1f %12.1f %14.0f\n", tk[k].dir, c ? "random words" : "prose+code",
                   mb, mb / dt, mb / wall, (double)ntok / dt);
        }
        printf("%-40s load %.3f s\n", tk[k].dir, tload);
        lwq_tokenizer_free(t);
    }
    free(prose);
    free(rnd);
    return 0;
}
