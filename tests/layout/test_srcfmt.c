/* FP8-block and MXFP4 source dequantization (layout/checkpoint/srcfmt, engine/source/srcdeq) against a
 * straightforward reference written here: E4M3 and E2M1 decoded from their bit fields, the
 * product taken in f32, rounded to BF16 by the textbook round-to-nearest-even on the bits.
 * Shapes leave partial edge blocks (FP8) and odd row counts (MXFP4); comparisons are bit-exact. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "engine/source/srcdeq.h"
#include "layout/checkpoint/srcfmt.h"

static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static float ref_e4m3(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return (b & 0x80) ? -v : v;
}

static uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float ref_e2m1(int c)
{
    static const float lut[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    return lut[c & 15];
}

static void fp8_case(int64_t rows, int64_t cols, int64_t br, int64_t bc, int threads)
{
    lwq_parallel_set_threads(threads);
    int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
    uint8_t *w = malloc((size_t)(rows * cols));
    float *s = malloc((size_t)(sr * sc) * sizeof(float));
    uint16_t *out = malloc((size_t)(rows * cols) * 2);
    for (int64_t i = 0; i < rows * cols; i++) {
        uint8_t b = (uint8_t)rnd();
        w[i] = (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
    }
    for (int64_t i = 0; i < sr * sc; i++) /* scales across many binades, some tiny */
        s[i] = ldexpf(1.0f + (float)(rnd() % 1000) / 1000.0f, (int)(rnd() % 40) - 30);
    lwq_error e = {0};
    cr_assert_eq(lwq_srcfmt_fp8_dequant("w", w, rows, cols, s, LWQ_F32, sr, sc, br, bc, LWQ_BF16,
                                        out, &e), 0, "%s", e.msg);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = ref_e4m3(w[r * cols + c]) * s[(r / br) * sc + c / bc];
            cr_assert_eq(out[r * cols + c], ref_bf16(v), "(%lld, %lld): got 0x%04x, want 0x%04x",
                         (long long)r, (long long)c, out[r * cols + c], ref_bf16(v));
        }
    free(w);
    free(s);
    free(out);
}

Test(srcfmt, fp8_blocks_with_partial_edge_blocks_bit_exact)
{
    fp8_case(300, 200, 128, 128, 2); /* edge blocks of 44 rows and 72 columns */
    fp8_case(128, 256, 128, 128, 1); /* exact tiling */
    fp8_case(5, 3, 128, 128, 2);     /* one partial block */
    fp8_case(70, 90, 16, 32, 2);     /* other block shape */
}

Test(srcfmt, fp8_nan_byte_is_named)
{
    uint8_t w[6] = {1, 2, 3, 4, 0xff, 6};
    float s[1] = {1.0f};
    uint16_t out[6];
    lwq_error e = {0};
    cr_assert_eq(lwq_srcfmt_fp8_dequant("model.layers.3.mlp.down_proj.weight", w, 2, 3, s,
                                        LWQ_F32, 1, 1, 128, 128, LWQ_BF16, out, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "model.layers.3.mlp.down_proj.weight: element (1, 1) is the E4M3 "
                            "NaN byte 0xff"), "%s", e.msg);
}

Test(srcfmt, fp8_scale_shape_and_value_are_checked)
{
    uint8_t w[6] = {0};
    float s[2] = {1.0f, INFINITY};
    uint16_t out[6];
    lwq_error e = {0};
    cr_assert_eq(lwq_srcfmt_fp8_dequant("x.weight", w, 2, 3, s, LWQ_F32, 2, 1, 128, 128, LWQ_BF16,
                                        out, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "x.weight_scale_inv: shape [2, 1], expected [1, 1] for a [2, 3] "
                            "weight in 128x128 blocks"), "%s", e.msg);
    memset(&e, 0, sizeof e);
    cr_assert_eq(lwq_srcfmt_fp8_dequant("x.weight", w, 2, 3, s, LWQ_F32, 2, 1, 1, 128, LWQ_BF16,
                                        out, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "x.weight_scale_inv: block (1, 0) has scale inf"), "%s", e.msg);
}

Test(srcfmt, mxfp4_bit_exact_every_code_and_scale)
{
    lwq_parallel_set_threads(2);
    const int64_t rows = 37, groups = 7;
    uint8_t *blk = malloc((size_t)(rows * groups * 16)), *sc = malloc((size_t)(rows * groups));
    uint16_t *out = malloc((size_t)(rows * groups * 32) * 2);
    for (int64_t i = 0; i < rows * groups * 16; i++)
        blk[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < rows * groups; i++) /* 0..252: 6 * 2^(253-127) overflows */
        sc[i] = (uint8_t)(i % 253);
    lwq_error e = {0};
    cr_assert_eq(lwq_srcfmt_mxfp4_dequant("x", blk, sc, rows, groups, LWQ_BF16, out, &e), 0, "%s",
                 e.msg);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < groups; g++)
            for (int i = 0; i < 32; i++) {
                uint8_t byte = blk[(r * groups + g) * 16 + i / 2];
                int code = i % 2 ? byte >> 4 : byte & 15;
                float v = ref_e2m1(code) * ldexpf(1.0f, (int)sc[r * groups + g] - 127);
                int64_t at = (r * groups + g) * 32 + i;
                cr_assert_eq(out[at], ref_bf16(v), "row %lld group %lld element %d",
                             (long long)r, (long long)g, i);
            }
    free(blk);
    free(sc);
    free(out);
}

Test(srcfmt, mxfp4_nan_scale_and_overflow_are_refused)
{
    uint8_t blk[32] = {0}, sc[2] = {127, 255};
    uint16_t out[64];
    lwq_error e = {0};
    cr_assert_eq(lwq_srcfmt_mxfp4_dequant("m.experts.gate_up_proj", blk, sc, 1, 2, LWQ_BF16, out,
                                          &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "m.experts.gate_up_proj_scales: group 1 of row 0 has the E8M0 NaN "
                            "scale 0xff"), "%s", e.msg);
    sc[1] = 254;
    blk[16] = 0x04; /* code 4 = 2.0 times 2^127 */
    memset(&e, 0, sizeof e);
    cr_assert_eq(lwq_srcfmt_mxfp4_dequant("m", blk, sc, 1, 2, LWQ_BF16, out, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "m: group 1 of row 0 (scale 2^127) overflows BF16"), "%s", e.msg);
}

static int parse(const char *json, lwq_model_config *c, lwq_srcfmt *f, lwq_error *e)
{
    int rc = lwq_config_parse("config.json", json, c, e);
    cr_assert_eq(rc, 0, "%s", e->msg);
    rc = lwq_srcfmt_from_config(c, f, e);
    return rc;
}

#define BASE "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1," \
             "\"num_attention_heads\":2,\"vocab_size\":10,\"intermediate_size\":96,"

Test(srcfmt, config_declares_the_format)
{
    lwq_model_config c;
    lwq_srcfmt f;
    lwq_error e = {0};
    cr_assert_eq(parse(BASE "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
                            "\"activation_scheme\":\"dynamic\",\"weight_block_size\":[128,64]}}",
                       &c, &f, &e), 0, "%s", e.msg);
    cr_assert_eq(f.kind, LWQ_SRCFMT_FP8_BLOCK);
    cr_assert_eq(f.block_rows, 128);
    cr_assert_eq(f.block_cols, 64);
    cr_assert_eq(f.out, LWQ_BF16);
    lwq_config_free(&c);
    cr_assert_eq(parse(BASE "\"torch_dtype\":\"float16\",\"quantization_config\":{\"quant_method\":"
                            "\"mxfp4\"}}", &c, &f, &e), 0);
    cr_assert_eq(f.kind, LWQ_SRCFMT_MXFP4);
    cr_assert_eq(f.out, LWQ_F16);
    lwq_config_free(&c);
    cr_assert_eq(parse(BASE "\"dtype\":\"bfloat16\"}", &c, &f, &e), 0);
    cr_assert_eq(f.kind, LWQ_SRCFMT_PLAIN);
    lwq_config_free(&c);
}

Test(srcfmt, config_other_methods_and_missing_block_size_are_refused)
{
    lwq_model_config c;
    lwq_srcfmt f;
    lwq_error e = {0};
    cr_assert_eq(parse(BASE "\"quantization_config\":{\"quant_method\":\"gptq\"}}", &c, &f, &e),
                 LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "quant_method \"gptq\" is not supported (fp8 with weight_block_size, "
                            "mxfp4)"), "%s", e.msg);
    lwq_config_free(&c);
    memset(&e, 0, sizeof e);
    cr_assert_eq(parse(BASE "\"quantization_config\":{\"quant_method\":\"fp8\"}}", &c, &f, &e),
                 LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "weight_block_size"), "%s", e.msg);
    lwq_config_free(&c);
}

/* ---- a layer's tensor list ------------------------------------------------------------------- */

static void add(lwq_tlist *l, const char *name, lwq_dtype dt, int ndim, int64_t d0, int64_t d1,
                int64_t d2, const void *data, size_t bytes)
{
    int64_t shape[3] = {d0, d1, d2};
    void *p = malloc(bytes);
    memcpy(p, data, bytes);
    lwq_error e = {0};
    cr_assert_eq(lwq_tlist_add(l, name, dt, ndim, shape, p, 1, &e), 0);
}

Test(srcfmt, layer_list_is_dequantized_and_scales_dropped)
{
    lwq_model_config c;
    lwq_srcfmt f;
    lwq_error e = {0};
    cr_assert_eq(parse(BASE "\"quantization_config\":{\"quant_method\":\"fp8\","
                            "\"weight_block_size\":[2,2]}}", &c, &f, &e), 0, "%s", e.msg);
    lwq_tlist l = {0};
    uint8_t w[6] = {0x38, 0x40, 0xb8, 0x30, 0x00, 0x48}; /* 1, 2, -1, 0.5, 0, 4 */
    float s[2] = {2.0f, 0.5f};
    uint16_t norm[3] = {0x3f80, 0x3f80, 0x3f80};
    add(&l, "a.norm.weight", LWQ_BF16, 1, 3, 0, 0, norm, sizeof norm);
    add(&l, "a.proj.weight_scale_inv", LWQ_F32, 2, 1, 2, 0, s, sizeof s);
    add(&l, "a.proj.weight", LWQ_F8_E4M3, 2, 2, 3, 0, w, sizeof w);
    cr_assert_eq(lwq_srcdeq_apply(&c, &l, &e), 0, "%s", e.msg);
    cr_assert_eq(l.n, 2);
    const lwq_htensor *t = lwq_tlist_find(&l, "a.proj.weight");
    cr_assert_not_null(t);
    cr_assert_eq(t->dtype, LWQ_BF16);
    cr_assert_eq(t->shape[0], 2);
    cr_assert_eq(t->shape[1], 3);
    const float want[6] = {2, 4, -0.5f, 1, 0, 2}; /* columns 0-1 scale 2, column 2 scale 0.5 */
    for (int i = 0; i < 6; i++)
        cr_assert_eq(lwq_bf16_to_f32(((const uint16_t *)t->data)[i]), want[i], "element %d", i);
    cr_assert_null(lwq_tlist_find(&l, "a.proj.weight_scale_inv"));
    cr_assert_not_null(lwq_tlist_find(&l, "a.norm.weight"));
    lwq_tlist_free(&l);
    lwq_config_free(&c);
}

Test(srcfmt, layer_list_mxfp4_blocks_become_the_plain_name)
{
    lwq_model_config c;
    lwq_srcfmt f;
    lwq_error e = {0};
    cr_assert_eq(parse(BASE "\"quantization_config\":{\"quant_method\":\"mxfp4\"}}", &c, &f, &e),
                 0);
    lwq_tlist l = {0};
    uint8_t blk[2 * 16], sc[2] = {127, 128};
    for (int i = 0; i < 32; i++)
        blk[i] = 0x21; /* codes 1 (0.5), 2 (1.0) */
    add(&l, "e.w_blocks", LWQ_U8, 3, 2, 1, 16, blk, sizeof blk);
    add(&l, "e.w_scales", LWQ_U8, 2, 2, 1, 0, sc, sizeof sc);
    cr_assert_eq(lwq_srcdeq_apply(&c, &l, &e), 0, "%s", e.msg);
    cr_assert_eq(l.n, 1);
    const lwq_htensor *t = lwq_tlist_find(&l, "e.w");
    cr_assert_not_null(t);
    cr_assert_eq(t->ndim, 2);
    cr_assert_eq(t->shape[1], 32);
    const uint16_t *v = t->data;
    cr_assert_eq(lwq_bf16_to_f32(v[0]), 0.5f);
    cr_assert_eq(lwq_bf16_to_f32(v[1]), 1.0f);
    cr_assert_eq(lwq_bf16_to_f32(v[32]), 1.0f); /* row 1: scale 2^1 */
    cr_assert_eq(lwq_bf16_to_f32(v[33]), 2.0f);
    lwq_tlist_free(&l);
    lwq_config_free(&c);
}

Test(srcfmt, fp8_weight_without_declaring_config_is_refused)
{
    lwq_model_config c;
    lwq_srcfmt f;
    lwq_error e = {0};
    cr_assert_eq(parse(BASE "\"dtype\":\"bfloat16\"}", &c, &f, &e), 0);
    lwq_tlist l = {0};
    uint8_t w[4] = {0};
    float s[1] = {1};
    add(&l, "p.weight", LWQ_F8_E4M3, 2, 2, 2, 0, w, sizeof w);
    add(&l, "p.weight_scale_inv", LWQ_F32, 2, 1, 1, 0, s, sizeof s);
    cr_assert_eq(lwq_srcdeq_apply(&c, &l, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "p.weight is F8_E4M3 with p.weight_scale_inv, but config.json's "
                            "quantization_config does not declare FP8 blocks"), "%s", e.msg);
    cr_assert_eq(l.n, 2, "the list is left as it was");
    lwq_tlist_free(&l);
    lwq_config_free(&c);
    cr_assert_eq(parse(BASE "\"quantization_config\":{\"quant_method\":\"fp8\","
                            "\"weight_block_size\":[128,128]}}", &c, &f, &e), 0);
    memset(&e, 0, sizeof e);
    add(&l, "q.weight", LWQ_F8_E4M3, 2, 2, 2, 0, w, sizeof w);
    cr_assert_eq(lwq_srcdeq_apply(&c, &l, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "q.weight is F8_E4M3 but q.weight_scale_inv is missing"), "%s", e.msg);
    lwq_tlist_free(&l);
    lwq_config_free(&c);
}
