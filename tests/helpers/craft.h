/* tests/helpers/craft.h — helpers for tests that craft (bad) checkpoint files in a temp dir.
 * Header-only `static inline` so each test executable takes what it uses. */
#ifndef LWQ_TESTS_CRAFT_H
#define LWQ_TESTS_CRAFT_H

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char lwqt_dir[256];

static inline int lwqt_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Fresh temp dir per test (Criterion runs each test in its own process). */
static inline void lwqt_setup(void)
{
    snprintf(lwqt_dir, sizeof lwqt_dir, "/tmp/lwqt-XXXXXX");
    cr_assert_not_null(mkdtemp(lwqt_dir));
}

static inline void lwqt_teardown(void)
{
    if (lwqt_dir[0])
        nftw(lwqt_dir, lwqt_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* Path of `name` inside the temp dir (static buffer rotating over 16 slots). */
static inline const char *lwqt_path(const char *name)
{
    static char buf[16][512];
    static int k;
    char *b = buf[k++ & 15];
    snprintf(b, sizeof buf[0], "%s/%s", lwqt_dir, name);
    return b;
}

static inline void lwqt_write(const char *name, const void *data, size_t n)
{
    FILE *fp = fopen(lwqt_path(name), "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(data, 1, n, fp), n);
    fclose(fp);
}

static inline void lwqt_write_str(const char *name, const char *s) { lwqt_write(name, s, strlen(s)); }

/* A safetensors file: 8-byte length (`declared`, or strlen(json) when declared == UINT64_MAX),
 * the JSON, then `data_len` bytes of data. */
static inline void lwqt_write_st(const char *name, const char *json, uint64_t declared,
                                 size_t data_len)
{
    size_t jl = strlen(json);
    uint64_t n = declared == UINT64_MAX ? jl : declared;
    size_t tot = 8 + jl + data_len;
    unsigned char *b = calloc(1, tot);
    cr_assert_not_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(n >> (8 * i));
    memcpy(b + 8, json, jl);
    for (size_t i = 0; i < data_len; i++)
        b[8 + jl + i] = (unsigned char)(i * 7 + 1);
    lwqt_write(name, b, tot);
    free(b);
}

#endif
