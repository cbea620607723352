/* tests/helpers/io_testutil.h — shared helpers for the io tests: temp dirs and files with a known,
 * offset-dependent byte pattern. */
#ifndef LWQ_TESTS_IO_TESTUTIL_H
#define LWQ_TESTS_IO_TESTUTIL_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline uint8_t tu_byte(uint64_t seed, uint64_t off)
{
    uint64_t x = (off >> 3) * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    return (uint8_t)(x >> ((off & 7) * 8));
}

/* mkdtemp under /tmp (a disk filesystem here, so O_DIRECT works); caller rm -rf's it. */
static inline void tu_tmpdir(char *out, size_t n)
{
    snprintf(out, n, "/tmp/lwq-io-test-XXXXXX");
    cr_assert_not_null(mkdtemp(out), "mkdtemp");
}

static inline void tu_rmrf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static inline void tu_write_pattern(const char *path, uint64_t size, uint64_t seed)
{
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp, "create %s", path);
    uint8_t buf[65536];
    for (uint64_t o = 0; o < size;) {
        size_t n = size - o < sizeof buf ? (size_t)(size - o) : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = tu_byte(seed, o + i);
        cr_assert_eq(fwrite(buf, 1, n, fp), n);
        o += n;
    }
    cr_assert_eq(fclose(fp), 0);
}

static inline int tu_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* xorshift for reproducible random test inputs */
static inline uint64_t tu_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
