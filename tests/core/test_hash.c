/* tests/core/test_hash.c — XXH64 against reference values, in one shot and in any chunking; hex
 * formatting. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "core/data/hash.h"

/* Expected values from the reference implementation: `xxhsum -H1` (Debian xxhash 0.8) on
 * data[i] = (uint8_t)(i * 131 + 17). */
static const struct {
    size_t len;
    uint64_t want;
} vec[] = {
    {0, 0xef46db3751d8e999ull},
    {1, 0xad10cd9780ac4ff7ull},
    {3, 0x40626d96276e4594ull},
    {4, 0x882207c122c76e23ull},
    {7, 0xcfc90033aa9dac4full},
    {8, 0x90fda2f089fa86deull},
    {31, 0x44cc9efe5d2d0233ull},
    {32, 0x0e1aab1d173cf196ull},
    {33, 0x5c820b4b4fe28fdcull},
    {63, 0x1153d36cade87066ull},
    {64, 0xd4c20ef54cbc9f67ull},
    {100, 0x7f8375f3e09d8123ull},
    {1000, 0x9fb3251bef67c2b5ull},
    {100000, 0x029cc8f2f3ff488eull},
};

static unsigned char *pattern(size_t n)
{
    unsigned char *d = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)(i * 131 + 17);
    return d;
}

Test(hash, xxh64_matches_reference_one_shot)
{
    for (size_t k = 0; k < sizeof vec / sizeof vec[0]; k++) {
        unsigned char *d = pattern(vec[k].len);
        cr_assert_eq(lwq_xxh64(d, vec[k].len, 0), vec[k].want, "len %zu", vec[k].len);
        free(d);
    }
}

Test(hash, xxh64_streaming_any_chunking)
{
    for (size_t k = 0; k < sizeof vec / sizeof vec[0]; k++) {
        unsigned char *d = pattern(vec[k].len);
        for (size_t step = 1; step < 70; step += 13) {
            lwq_xxh64_state s;
            lwq_xxh64_init(&s, 0);
            for (size_t off = 0; off < vec[k].len; off += step)
                lwq_xxh64_update(&s, d + off, vec[k].len - off < step ? vec[k].len - off : step);
            cr_assert_eq(lwq_xxh64_digest(&s), vec[k].want, "len %zu step %zu", vec[k].len, step);
        }
        free(d);
    }
}

Test(hash, hex_is_16_lowercase_digits)
{
    char h[17];
    lwq_hex64(0xef46db3751d8e999ull, h);
    cr_assert_str_eq(h, "ef46db3751d8e999");
    lwq_hex64(1, h);
    cr_assert_str_eq(h, "0000000000000001");
}
