/* tests/core/test_dtype.c — dtype names, BF16/F16 conversions and their rounding against a double
 * reference. */
#include <criterion/criterion.h>
#include <math.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"

Test(dtype, parse_all_names_round_trip)
{
    for (int i = 0; i < LWQ_DTYPE_COUNT; i++) {
        lwq_dtype t;
        cr_assert_eq(lwq_dtype_parse(lwq_dtype_name((lwq_dtype)i), &t), 0);
        cr_assert_eq((int)t, i);
    }
}

Test(dtype, unknown_name_is_format_error)
{
    lwq_dtype t;
    cr_assert_eq(lwq_dtype_parse("F4", &t), LWQ_EFORMAT);
    cr_assert_eq(lwq_dtype_parse("f32", &t), LWQ_EFORMAT);
}

Test(dtype, bf16_round_to_nearest_even)
{
    /* 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0 */
    cr_assert_eq(lwq_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even) -> up */
    cr_assert_eq(lwq_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    cr_assert_eq(lwq_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    cr_assert(isnan(lwq_bf16_to_f32(lwq_f32_to_bf16(NAN))));
}

Test(dtype, f16_all_codes_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = lwq_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        cr_assert_eq(lwq_f32_to_f16(f), h, "code %04x -> %g -> %04x", h, f, lwq_f32_to_f16(f));
    }
}

Test(dtype, f16_rounding_matches_double_reference)
{
    /* midpoints between consecutive f16 values must round to the even code */
    for (uint32_t h = 0; h < 0x7bff; h += 7) {
        float a = lwq_f16_to_f32((uint16_t)h), b = lwq_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)a + (double)b) / 2);
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        cr_assert_eq(lwq_f32_to_f16(mid), want, "mid of %04x", h);
    }
    cr_assert_eq(lwq_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(lwq_f32_to_f16(65519.0f), 0x7bff);
    cr_assert_eq(lwq_f32_to_f16(0x1p-25f), 0);
    cr_assert_eq(lwq_f32_to_f16(0x1.000002p-25f), 1);
}
