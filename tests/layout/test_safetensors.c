/* tests/layout/test_safetensors.c — safetensors headers: valid files open, every malformed header
 * is refused with a reason. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "tests/helpers/craft.h"
#include "layout/checkpoint/safetensors.h"

TestSuite(st, .init = lwqt_setup, .fini = lwqt_teardown);

/* Open a crafted file and expect failure with every `want` substring in the message. */
static void expect_fail(const char *name, int code, const char *want1, const char *want2)
{
    lwq_st_file f;
    lwq_error e = {0};
    int rc = lwq_st_open(lwqt_path(name), &f, &e);
    cr_assert_eq(rc, code, "rc %d, expected %d: %s", rc, code, e.msg);
    cr_assert_eq(e.code, code);
    cr_assert(strstr(e.msg, name), "message does not name the file: %s", e.msg);
    if (want1)
        cr_assert(strstr(e.msg, want1), "message lacks '%s': %s", want1, e.msg);
    if (want2)
        cr_assert(strstr(e.msg, want2), "message lacks '%s': %s", want2, e.msg);
}

Test(st, valid_file_with_odd_header_length_opens)
{
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]}}";
    cr_assert_neq(strlen(h) % 8, 0, "the point is a header length that is not a multiple of 8");
    lwqt_write_st("ok.safetensors", h, UINT64_MAX, 30);
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(lwqt_path("ok.safetensors"), &f, &e), 0, "%s", e.msg);
    cr_assert_eq(f.n, 2);
    cr_assert_eq(f.header_len, strlen(h));
    int a = lwq_st_find(&f, "a"), b = lwq_st_find(&f, "b");
    cr_assert(a >= 0 && b >= 0);
    cr_assert_eq(lwq_st_find(&f, "c"), -1);
    cr_assert_eq(f.entries[a].dtype, LWQ_F32);
    cr_assert_eq(lwq_st_numel(&f.entries[a]), 6);
    cr_assert_eq(f.entries[b].begin, 24);
    cr_assert_eq(f.entries[b].end, 30);
    unsigned char buf[6];
    cr_assert_eq(lwq_st_read(&f, f.data_start + 24, buf, 6, &e), 0);
    cr_assert_eq(buf[0], (unsigned char)(24 * 7 + 1));
    lwq_st_free(&f);
}

Test(st, header_length_beyond_file)
{
    lwqt_write_st("long.safetensors", "{}", 5000, 0);
    expect_fail("long.safetensors", LWQ_EFORMAT, "header length 5000", "beyond the end");
}

Test(st, file_shorter_than_length_field)
{
    lwqt_write("tiny.safetensors", "\x02\0\0", 3);
    expect_fail("tiny.safetensors", LWQ_EFORMAT, "shorter than the 8-byte", NULL);
}

Test(st, header_over_100mb_is_refused_before_reading)
{
    lwqt_write_st("huge.safetensors", "{}", 200u * 1000u * 1000u, 0);
    expect_fail("huge.safetensors", LWQ_EFORMAT, "exceeds the 100000000 byte limit", NULL);
}

Test(st, invalid_json)
{
    lwqt_write_st("bad.safetensors", "{\"a\":{\"dtype\":\"F32\",", UINT64_MAX, 0);
    expect_fail("bad.safetensors", LWQ_EFORMAT, "not valid JSON", NULL);
}

Test(st, garbage_after_json)
{
    lwqt_write_st("tail.safetensors", "{}  x", UINT64_MAX, 0);
    expect_fail("tail.safetensors", LWQ_EFORMAT, "after the JSON header", NULL);
}

Test(st, header_not_an_object)
{
    lwqt_write_st("arr.safetensors", "[1,2]", UINT64_MAX, 0);
    expect_fail("arr.safetensors", LWQ_EFORMAT, "not a JSON object", NULL);
}

Test(st, offsets_out_of_range)
{
    lwqt_write_st("oor.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", UINT64_MAX,
                  16);
    expect_fail("oor.safetensors", LWQ_EFORMAT, "tensor 'w'", "out of range");
}

Test(st, truncated_data_area)
{
    /* A file cut short: the header is intact, the last tensor's bytes are missing. */
    lwqt_write_st("cut.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}",
                  UINT64_MAX, 20);
    expect_fail("cut.safetensors", LWQ_EFORMAT, "tensor 'b'", "data area is 20 bytes");
}

Test(st, end_before_begin)
{
    lwqt_write_st("rev.safetensors",
                  "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", UINT64_MAX, 8);
    expect_fail("rev.safetensors", LWQ_EFORMAT, "tensor 'w'", "end before begin");
}

Test(st, overlapping_offsets)
{
    lwqt_write_st("ovl.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                  UINT64_MAX, 24);
    expect_fail("ovl.safetensors", LWQ_EFORMAT, "'a'", "'b' [8, 24] overlap");
}

Test(st, dtype_times_shape_differs_from_byte_length)
{
    lwqt_write_st("size.safetensors",
                  "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
                  UINT64_MAX, 24);
    expect_fail("size.safetensors", LWQ_EFORMAT, "tensor 'w'", "= 12 bytes, but data_offsets span 24");
}

Test(st, duplicate_names)
{
    lwqt_write_st("dup.safetensors",
                  "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                  UINT64_MAX, 8);
    expect_fail("dup.safetensors", LWQ_EFORMAT, "duplicate tensor name 'w'", NULL);
}

Test(st, unknown_dtype)
{
    lwqt_write_st("dt.safetensors",
                  "{\"w\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]}}", UINT64_MAX, 2);
    expect_fail("dt.safetensors", LWQ_EFORMAT, "tensor 'w'", "unknown dtype \"F4\"");
}

Test(st, negative_and_fractional_shapes)
{
    lwqt_write_st("neg.safetensors",
                  "{\"w\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}", UINT64_MAX, 4);
    expect_fail("neg.safetensors", LWQ_EFORMAT, "tensor 'w'", "shape[0]");
    lwqt_write_st("frac.safetensors",
                  "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", UINT64_MAX, 4);
    expect_fail("frac.safetensors", LWQ_EFORMAT, "tensor 'w'", "shape[0]");
}

Test(st, shape_product_overflow)
{
    lwqt_write_st("ovf.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                  "\"data_offsets\":[0,4]}}",
                  UINT64_MAX, 4);
    expect_fail("ovf.safetensors", LWQ_EFORMAT, "tensor 'w'", "overflows");
}

Test(st, missing_fields)
{
    lwqt_write_st("nodt.safetensors", "{\"w\":{\"shape\":[4],\"data_offsets\":[0,4]}}", UINT64_MAX,
                  4);
    expect_fail("nodt.safetensors", LWQ_EFORMAT, "tensor 'w'", "\"dtype\"");
    lwqt_write_st("nooff.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4]}}", UINT64_MAX, 4);
    expect_fail("nooff.safetensors", LWQ_EFORMAT, "tensor 'w'", "data_offsets");
}

Test(st, metadata_must_hold_strings)
{
    lwqt_write_st("meta.safetensors", "{\"__metadata__\":{\"format\":1}}", UINT64_MAX, 0);
    expect_fail("meta.safetensors", LWQ_EFORMAT, "__metadata__ value of 'format'", NULL);
}

Test(st, missing_file_is_enoent)
{
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(lwqt_path("nope.safetensors"), &f, &e), LWQ_ENOENT);
    cr_assert(strstr(e.msg, "nope.safetensors"));
}

/* ---- writer ---------------------------------------------------------------------------------- */

static void read_all(const char *path, unsigned char **buf, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *buf = malloc(*n);
    cr_assert_eq(fread(*buf, 1, *n, fp), *n);
    fclose(fp);
}

Test(st, writer_round_trip_all_dtypes_deterministic)
{
    static unsigned char data[LWQ_DTYPE_COUNT][24];
    lwq_st_out_tensor t[LWQ_DTYPE_COUNT], rev[LWQ_DTYPE_COUNT];
    char names[LWQ_DTYPE_COUNT][32];
    for (int i = 0; i < LWQ_DTYPE_COUNT; i++) {
        for (int j = 0; j < 24; j++)
            data[i][j] = (unsigned char)(i * 31 + j);
        snprintf(names[i], sizeof names[i], "t.%s \"q\"", lwq_dtype_name((lwq_dtype)i));
        t[i] = (lwq_st_out_tensor){.name = names[i], .dtype = (lwq_dtype)i, .ndim = 2,
                                   .shape = {3, (int64_t)(8 / lwq_dtype_size((lwq_dtype)i))},
                                   .data = data[i]};
        rev[LWQ_DTYPE_COUNT - 1 - i] = t[i];
    }
    lwq_st_kv meta[] = {{"format", "pt"}, {"lwq", "x\"y"}};
    lwq_error e = {0};
    cr_assert_eq(lwq_st_write_file(lwqt_path("a.safetensors"), t, LWQ_DTYPE_COUNT, meta, 2, &e), 0,
                 "%s", e.msg);
    cr_assert_eq(lwq_st_write_file(lwqt_path("b.safetensors"), rev, LWQ_DTYPE_COUNT, meta, 2, &e),
                 0, "%s", e.msg);
    unsigned char *a, *b;
    size_t na, nb;
    read_all(lwqt_path("a.safetensors"), &a, &na);
    read_all(lwqt_path("b.safetensors"), &b, &nb);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(a, b, na), 0, "input order changed the bytes");
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | a[i];
    cr_assert_eq(hl % 8, 0, "header not padded to a multiple of 8");
    cr_assert_eq(na, 8 + hl + LWQ_DTYPE_COUNT * 24, "data not contiguous");

    lwq_st_file f;
    cr_assert_eq(lwq_st_open(lwqt_path("a.safetensors"), &f, &e), 0, "%s", e.msg);
    cr_assert_eq(f.n, LWQ_DTYPE_COUNT);
    cr_assert_str_eq(lwq_st_meta(&f, "lwq"), "x\"y");
    for (int i = 0; i < LWQ_DTYPE_COUNT; i++) {
        int k = lwq_st_find(&f, names[i]);
        cr_assert(k >= 0, "%s missing", names[i]);
        cr_assert_eq(f.entries[k].dtype, (lwq_dtype)i);
        cr_assert_eq(memcmp(a + f.data_start + f.entries[k].begin, data[i], 24), 0);
    }
    lwq_st_free(&f);
    free(a);
    free(b);
}

Test(st, writer_refuses_duplicate_names)
{
    float x = 1;
    lwq_st_out_tensor t[2] = {{.name = "w", .dtype = LWQ_F32, .ndim = 1, .shape = {1}, .data = &x},
                              {.name = "w", .dtype = LWQ_F32, .ndim = 1, .shape = {1}, .data = &x}};
    lwq_error e = {0};
    cr_assert_eq(lwq_st_write_file(lwqt_path("d.safetensors"), t, 2, NULL, 0, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "duplicate tensor name 'w'"), "%s", e.msg);
}

Test(st, plan_offsets_follow_name_order)
{
    lwq_st_out_tensor t[3] = {{.name = "c", .dtype = LWQ_F32, .ndim = 1, .shape = {2}},
                              {.name = "a", .dtype = LWQ_BF16, .ndim = 2, .shape = {2, 2}},
                              {.name = "b", .dtype = LWQ_U8, .ndim = 0}};
    lwq_st_plan p;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_plan_make(t, 3, NULL, 0, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p.order[0], 1);
    cr_assert_eq(p.order[1], 2);
    cr_assert_eq(p.order[2], 0);
    cr_assert_eq(p.offset[1], 0);
    cr_assert_eq(p.offset[2], 8);
    cr_assert_eq(p.nbytes[2], 1, "a 0-d tensor holds one element");
    cr_assert_eq(p.offset[0], 9);
    cr_assert_eq(p.data_bytes, 17);
    cr_assert_eq(p.header_bytes % 8, 0);
    lwq_st_plan_free(&p);
}

/* Mutated headers (fixed seed): every outcome is 0 or an error with a message, never a crash or
 * an entry that escapes the data area.  Run under the ASan build to catch memory errors. */
Test(st, mutated_headers_fail_cleanly)
{
    const char *base = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]}}";
    size_t n = strlen(base);
    static const char alphabet[] = "{}[]\",:0123456789-.eE \\\"u_FBIU8";
    uint64_t s = 0x1234567;
    char *buf = malloc(n + 1);
    int ok = 0, failed = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, base, n + 1);
        int edits = 1 + (int)(s % 4);
        for (int k = 0; k < edits; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(s >> 33) % n;
            buf[pos] = alphabet[(s >> 20) % (sizeof alphabet - 1)];
        }
        lwq_st_file f;
        lwq_error e = {0};
        int rc = lwq_st_parse_header("fuzz.safetensors", buf, n, 8 + n + 30, &f, &e);
        if (rc == 0) {
            ok++;
            for (int i = 0; i < f.n; i++) {
                cr_assert(f.entries[i].end <= 30 && f.entries[i].begin <= f.entries[i].end);
                cr_assert_eq(f.entries[i].end - f.entries[i].begin,
                             (uint64_t)lwq_st_numel(&f.entries[i]) * lwq_dtype_size(f.entries[i].dtype));
            }
            lwq_st_free(&f);
        } else {
            failed++;
            cr_assert(rc < 0 && e.msg[0], "error without a message");
        }
    }
    free(buf);
    cr_assert(ok > 0 && failed > 0, "ok %d failed %d", ok, failed);
}

/* F3 (issue 28): a zero-element [2^53, 1024, 0] has no bytes and no element count to overflow,
 * so the parser passed it; a caller multiplying its first two dimensions then overflowed int64
 * (UBSan, in eval's QUANT_DIR scalar check).  Every partial product must stay below 2^53. */
Test(st, a_zero_element_shape_whose_partial_product_overflows)
{
    lwqt_write_st("zovf.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,1024,0],\"data_offsets\":[0,0]}}", UINT64_MAX,
                  0);
    expect_fail("zovf.safetensors", LWQ_EFORMAT, "tensor 'w': the product of the dimensions up to shape[1] overflows",
                "(limit 2^53 elements, zero dimensions aside)");
    /* a zero dimension first does not hide the others' product */
    lwqt_write_st("zovf2.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740992,1024],\"data_offsets\":[0,0]}}", UINT64_MAX,
                  0);
    expect_fail("zovf2.safetensors", LWQ_EFORMAT, "up to shape[2] overflows", NULL);
}
