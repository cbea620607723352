/* engine/quant/qops.c's device path on a host fake (a "device" of malloc'd memory running the host quantizers): the weight cache's key, reuse of buffers, and bytes equal to the host path. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/data/dtype.h"
#include "engine/quant/qops.h"
#include "kernels/quant.h"
#include "tests/helpers/device/fakedev.h"

static lwq_backend fake;
static lwq_qops q;

static void setup(void)
{
    fakedev_init(&fake);
    lwq_qops_init_with(&q, &fake, lwq_quant_host_ops());
}

static void teardown(void)
{
    lwq_qops_free(&q);
    cr_expect_eq(fakedev.n_live, 0, "the fake device holds %d buffers after lwq_qops_free", fakedev.n_live);
}

TestSuite(qops_cache, .init = setup, .fini = teardown);

enum { R = 8, C = 64 };

/* BF16 weight values from a seed (every seed gives a different tensor and amax). */
static float fill(uint16_t *w, uint32_t seed)
{
    float amax = 0;
    for (int i = 0; i < R * C; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (float)(1 + seed % 3);
        w[i] = lwq_f32_to_bf16(v);
        float a = fabsf(lwq_bf16_to_f32(w[i]));
        amax = a > amax ? a : amax;
    }
    return amax;
}

static lwq_htensor record(char *name, uint16_t *data)
{
    lwq_htensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = LWQ_BF16;
    t.ndim = 2;
    t.shape[0] = R;
    t.shape[1] = C;
    t.data = data;
    t.nbytes = sizeof(uint16_t) * R * C;
    return t;
}

/* The reported bug: the writer frees each layer's list and the allocator hands the same record
 * address (and the ring the same slot address) to the next layer's tensor.  Keyed on the record's
 * address, the device path quantized layer 0's weight again. */
Test(qops_cache, next_layer_at_the_same_record_and_slot_address_is_uploaded_again)
{
    static uint16_t slot[R * C];
    char n0[] = "model.layers.0.self_attn.o_proj.weight", n1[] = "model.layers.1.self_attn.o_proj.weight";
    lwq_error e = {0};
    uint8_t got[R * C], want[R * C];
    float ws_got, ws_want;
    float a0 = fill(slot, 1);
    lwq_htensor rec = record(n0, slot);
    cr_assert_eq(lwq_qops_fp8(&q, &rec, R, C, a0, n0, got, &ws_got, &e), 0, "%s", e.msg);
    /* layer 1: same record, same slot, new name and contents; no lwq_qops_end_layer in between */
    float a1 = fill(slot, 2);
    rec = record(n1, slot);
    cr_assert_eq(lwq_qops_fp8(&q, &rec, R, C, a1, n1, got, &ws_got, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_fp8(slot, LWQ_BF16, R, C, a1, n1, want, &ws_want, &e), 0, "%s", e.msg);
    cr_expect_eq(memcmp(got, want, sizeof got), 0, "layer 1 got the FP8 bytes of a stale device copy");
    cr_expect_eq(ws_got, ws_want);
    cr_expect_eq(fakedev.n_upload, 2, "each layer's weight is uploaded once: %d uploads", fakedev.n_upload);
}

Test(qops_cache, end_of_layer_drops_the_cache_even_for_the_same_name_and_address)
{
    static uint16_t slot[R * C];
    char n0[] = "model.layers.0.mlp.down_proj.weight";
    lwq_error e = {0};
    uint8_t got[R * C], want[R * C];
    float ws;
    float a0 = fill(slot, 3);
    lwq_htensor rec = record(n0, slot);
    cr_assert_eq(lwq_qops_fp8(&q, &rec, R, C, a0, n0, got, &ws, &e), 0, "%s", e.msg);
    lwq_qops_end_layer(&q); /* e.g. a whole-model run of the same checkpoint again */
    float a1 = fill(slot, 4);
    cr_assert_eq(lwq_qops_fp8(&q, &rec, R, C, a1, n0, got, &ws, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_fp8(slot, LWQ_BF16, R, C, a1, n0, want, &ws, &e), 0, "%s", e.msg);
    cr_expect_eq(memcmp(got, want, sizeof got), 0, "the second generation read the first one's copy");
}

Test(qops_cache, search_then_quantize_of_one_weight_uploads_it_once)
{
    static uint16_t w[R * C];
    char n[] = "model.layers.3.mlp.up_proj.weight";
    lwq_error e = {0};
    float amax = fill(w, 5), bamax[R * C / 16];
    lwq_htensor rec = record(n, w);
    cr_assert_geq(lwq_qops_nvfp4_mse(&q, &rec, R, C, amax, n, bamax, &e), 0, "%s", e.msg);
    uint8_t packed[R * C / 2], scale[R * C / 16];
    float ws2;
    cr_assert_geq(lwq_qops_nvfp4_static(&q, &rec, R, C, bamax, amax, n, packed, scale, &ws2, &e), 0, "%s", e.msg);
    /* the weight once, the block amax once */
    cr_expect_eq(fakedev.n_upload, 2, "%d uploads for one weight's search and quantization", fakedev.n_upload);
}

Test(qops_cache, a_second_layer_of_the_same_shapes_allocates_nothing)
{
    static uint16_t w[R * C];
    char n0[] = "model.layers.0.self_attn.q_proj.weight", n1[] = "model.layers.1.self_attn.q_proj.weight";
    lwq_error e = {0};
    uint8_t packed[R * C / 2], scale[R * C / 16];
    float ws2, amax = fill(w, 6);
    lwq_htensor rec = record(n0, w);
    cr_assert_geq(lwq_qops_nvfp4_max(&q, &rec, R, C, amax, n0, packed, scale, &ws2, &e), 0, "%s", e.msg);
    lwq_qops_end_layer(&q);
    int before = fakedev.n_alloc;
    amax = fill(w, 7);
    rec = record(n1, w);
    cr_assert_geq(lwq_qops_nvfp4_max(&q, &rec, R, C, amax, n1, packed, scale, &ws2, &e), 0, "%s", e.msg);
    cr_expect_eq(fakedev.n_alloc, before, "%d device allocations for a layer of the same shapes", fakedev.n_alloc - before);
}

Test(qops_cache, every_op_gives_the_host_paths_bytes)
{
    static uint16_t w[R * C];
    char n[] = "model.layers.2.mlp.gate_proj.weight";
    lwq_error e = {0};
    float amax = fill(w, 8);
    lwq_htensor rec = record(n, w);
    lwq_qops h;
    lwq_qops_init(&h, NULL);
    float hess[(C / 16) * 256];
    for (int i = 0; i < (C / 16) * 256; i++)
        hess[i] = (i % 17 == 0) ? 1.0f : 0.01f * (float)(i % 5);
    const float *hs[2] = {NULL, hess};
    for (int k = 0; k < 2; k++) {
        float b1[R * C / 16], b2[R * C / 16];
        cr_assert_geq(lwq_qops_nvfp4_sweep(&q, &rec, R, C, amax, hs[k], n, b1, &e), 0, "%s", e.msg);
        cr_assert_geq(lwq_qops_nvfp4_sweep(&h, &rec, R, C, amax, hs[k], n, b2, &e), 0, "%s", e.msg);
        cr_expect_eq(memcmp(b1, b2, sizeof b1), 0, "sweep (hessian %d)", k);
    }
    float m1[R * C / 16], m2[R * C / 16];
    cr_assert_geq(lwq_qops_nvfp4_mse(&q, &rec, R, C, amax, n, m1, &e), 0, "%s", e.msg);
    cr_assert_geq(lwq_qops_nvfp4_mse(&h, &rec, R, C, amax, n, m2, &e), 0, "%s", e.msg);
    cr_expect_eq(memcmp(m1, m2, sizeof m1), 0, "nvfp4 mse");
    uint8_t p1[R * C / 2], p2[R * C / 2], s1[R * C / 16], s2[R * C / 16];
    float w1, w2;
    cr_assert_geq(lwq_qops_nvfp4_static(&q, &rec, R, C, m1, amax, n, p1, s1, &w1, &e), 0, "%s", e.msg);
    cr_assert_geq(lwq_qops_nvfp4_static(&h, &rec, R, C, m1, amax, n, p2, s2, &w2, &e), 0, "%s", e.msg);
    cr_expect(memcmp(p1, p2, sizeof p1) == 0 && memcmp(s1, s2, sizeof s1) == 0 && w1 == w2, "nvfp4 static");
    cr_assert_geq(lwq_qops_nvfp4_max(&q, &rec, R, C, amax, n, p1, s1, &w1, &e), 0, "%s", e.msg);
    cr_assert_geq(lwq_qops_nvfp4_max(&h, &rec, R, C, amax, n, p2, s2, &w2, &e), 0, "%s", e.msg);
    cr_expect(memcmp(p1, p2, sizeof p1) == 0 && memcmp(s1, s2, sizeof s1) == 0 && w1 == w2, "nvfp4 max");
    float f1, f2;
    cr_assert_geq(lwq_qops_fp8_mse(&q, &rec, R, C, n, &f1, &e), 0, "%s", e.msg);
    cr_assert_geq(lwq_qops_fp8_mse(&h, &rec, R, C, n, &f2, &e), 0, "%s", e.msg);
    cr_expect_eq(f1, f2, "fp8 mse");
    uint8_t q1[R * C], q2[R * C];
    cr_assert_geq(lwq_qops_fp8(&q, &rec, R, C, f1, n, q1, &w1, &e), 0, "%s", e.msg);
    cr_assert_geq(lwq_qops_fp8(&h, &rec, R, C, f1, n, q2, &w2, &e), 0, "%s", e.msg);
    cr_expect(memcmp(q1, q2, sizeof q1) == 0 && w1 == w2, "fp8");
    cr_expect_eq(fakedev.n_upload > 0, 1);
    lwq_qops_free(&h);
}

Test(qops_cache, a_shape_larger_than_the_data_is_refused_before_any_upload)
{
    static uint16_t w[R * C];
    char n[] = "model.layers.0.mlp.down_proj.weight";
    lwq_error e = {0};
    lwq_htensor rec = record(n, w);
    rec.nbytes = 100;
    uint8_t out[R * C];
    float ws;
    cr_expect_eq(lwq_qops_fp8(&q, &rec, R, C, 1.0f, n, out, &ws, &e), LWQ_EINVAL);
    cr_expect(strstr(e.msg, n) != NULL, "%s", e.msg);
    cr_expect_eq(fakedev.n_upload, 0);
}
