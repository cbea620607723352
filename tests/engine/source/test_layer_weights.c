/* engine/source/layersrc.c's device copies on a host fake (a "device" of malloc'd memory): O(1) lookup among hundreds of expert weights, the reusable slab (no per-tensor allocation once it has grown), and the quantizer reading the forward's copy instead of uploading again. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/source/devslab.h"
#include "engine/source/layersrc.h"
#include "engine/quant/qops.h"
#include "kernels/quant.h"
#include "tests/helpers/device/fakedev.h"

static lwq_backend fake;
static lwq_devslab slab;

static void setup(void)
{
    fakedev_init(&fake);
    lwq_devslab_init(&slab, &fake);
}

static void teardown(void)
{
    lwq_devslab_free(&slab);
    cr_expect_eq(fakedev.n_live, 0, "%d fake device buffers leaked", fakedev.n_live);
}

TestSuite(layer_weights, .init = setup, .fini = teardown);

enum { NE = 512, R = 4, C = 32 };

/* A layer of NE expert weights (R, C) BF16, values depending on (layer, expert). */
static void make_layer(lwq_tlist *src, int layer)
{
    memset(src, 0, sizeof *src);
    lwq_error e = {0};
    for (int x = 0; x < NE; x++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", layer, x);
        uint16_t *d = malloc(sizeof(uint16_t) * R * C);
        for (int i = 0; i < R * C; i++)
            d[i] = lwq_f32_to_bf16((float)((x * 31 + i * 7 + layer * 13) % 97) / 50.0f - 0.9f);
        int64_t shape[2] = {R, C};
        cr_assert_eq(lwq_tlist_add(src, name, LWQ_BF16, 2, shape, d, 1, &e), 0, "%s", e.msg);
    }
    lwq_tlist_sort(src);
}

static void get_all(lwq_layer_weights *lw, int layer)
{
    lwq_error e = {0};
    for (int k = 0; k < NE; k++) {
        int x = (k * 193) % NE; /* not in list order */
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", layer, x);
        lwq_tensor t;
        cr_assert_eq(lw->w.get(lw->w.ctx, name, &t, &e), 0, "%s: %s", name, e.msg);
        const lwq_htensor *h = lwq_tlist_find(lw->src, name);
        cr_assert_eq(memcmp(t.data, h->data, h->nbytes), 0, "%s: the device copy holds another tensor", name);
    }
}

Test(layer_weights, lookup_finds_each_of_512_experts_and_uploads_each_once)
{
    lwq_tlist src;
    make_layer(&src, 0);
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &fake, &src, NULL, NULL);
    get_all(&lw, 0);
    get_all(&lw, 0); /* again: cached */
    cr_expect_eq(fakedev.n_upload, NE, "%d uploads for %d tensors", fakedev.n_upload, NE);
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&src);
}

Test(layer_weights, the_slab_grows_once_and_later_layers_allocate_nothing)
{
    for (int layer = 0; layer < 3; layer++) {
        lwq_tlist src;
        make_layer(&src, layer);
        lwq_layer_weights lw;
        lwq_layer_weights_init(&lw, &fake, &src, NULL, NULL);
        lwq_layer_weights_use_slab(&lw, &slab);
        int before = fakedev.n_alloc;
        get_all(&lw, layer);
        if (layer == 0)
            cr_expect_eq(fakedev.n_alloc - before, NE, "layer 0 overflows the empty slab tensor by tensor");
        else
            cr_expect_eq(fakedev.n_alloc - before, 0, "layer %d made %d device allocations", layer, fakedev.n_alloc - before);
        lwq_layer_weights_free(&lw);
        lwq_tlist_free(&src);
    }
    cr_expect_eq(slab.allocs, 1, "the slab was allocated %llu times", (unsigned long long)slab.allocs);
}

Test(layer_weights, the_quantizer_reads_the_forwards_copy_without_uploading)
{
    lwq_tlist src;
    make_layer(&src, 0);
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &fake, &src, NULL, NULL);
    get_all(&lw, 0);
    lwq_qops q;
    lwq_qops_init_with(&q, &fake, lwq_quant_host_ops());
    lwq_qops_set_devcopies(&q, lwq_layer_weights_device, &lw);
    const lwq_htensor *w = lwq_tlist_find(&src, "model.layers.0.mlp.experts.7.up_proj.weight");
    cr_assert_not_null(w);
    lwq_error e = {0};
    uint8_t got[R * C], want[R * C];
    float ws1, ws2;
    int before = fakedev.n_upload;
    cr_assert_geq(lwq_qops_fp8(&q, w, R, C, 2.0f, w->name, got, &ws1, &e), 0, "%s", e.msg);
    cr_expect_eq(fakedev.n_upload, before, "the weight was uploaded again");
    cr_assert_geq(lwq_quant_fp8(w->data, LWQ_BF16, R, C, 2.0f, w->name, want, &ws2, &e), 0, "%s", e.msg);
    cr_expect_eq(memcmp(got, want, sizeof got), 0);
    /* a record with the same name but other host data is not served the forward's copy */
    lwq_htensor other = *w;
    uint16_t d[R * C];
    memcpy(d, w->data, sizeof d);
    d[0] ^= 0x10;
    other.data = d;
    cr_expect_null(lwq_layer_weights_device(&lw, &other));
    lwq_qops_free(&q);
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&src);
}
