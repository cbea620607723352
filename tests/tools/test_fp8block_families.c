/* FP8-block sources (F8_E4M3 weights, 128x128 weight_scale_inv) of the issue-34 families: read and streamed like the DeepSeek-V3 ones, and wrong block scales refused by name before anything is written. */
/*
 * The sources are tests/data/peers/src/{minimax_m2,glm4_moe}-fp8block-{f32,bf16}, written by
 * peers/make_fp8_block.py from the transformers-written tiny checkpoints beside them.  That
 * lwq's output from them equals Model Optimizer 0.47's export of their dequantized form is
 * test_peer_goldens' (their MANIFEST cases); here: streaming, and the refusals.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/safetensors.h"
#include "tests/helpers/shell.h"

static char g_tmp[256];

static void setup(void) { lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-fp8block"); }
static void teardown(void) { lwqt_rmtree(g_tmp); }

TestSuite(fp8block, .init = setup, .fini = teardown, .timeout = 300);

static const char *data_root(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/tools/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*stests/data/peers", (int)(cut - me), me);
    return path;
}

static void copy_model(const char *src)
{
    cr_assert_eq(lwqt_sh("cp -r '%s/src/%s' %s/m", data_root(), src, g_tmp), 0);
}

static int quantize(const char *out, const char *extra)
{
    return lwqt_sh("'%s' quantize %s/m -o %s/%s --calib '%s/calib.jsonl' --calib-size 8 --calib-seq 32 --batch-size 4 "
                   "--threads 2 --quiet %s 2>>%s/stderr.txt",
                   lwqt_bin(), g_tmp, g_tmp, out, data_root(), extra, g_tmp);
}

static int stderr_has(const char *s)
{
    return lwqt_sh("grep -qF -- '%s' %s/stderr.txt", s, g_tmp) == 0;
}

static int nothing_written(const char *out)
{
    return lwqt_sh("[ ! -e %s/%s ] && [ ! -e %s/%s.layerwise_resume ]", g_tmp, out, g_tmp, out) == 0;
}

/* g_tmp/m/model.safetensors rewritten with tensor `name` replaced by an F32 tensor of shape
 * [d0, d1] holding 1.0 everywhere (every other tensor byte for byte as it was). */
static void replace_with_ones(const char *name, int64_t d0, int64_t d1)
{
    char path[400];
    snprintf(path, sizeof path, "%s/m/model.safetensors", g_tmp);
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(path, &f, &e), 0, "%s", e.msg);
    lwq_st_out_tensor *t = calloc((size_t)f.n, sizeof *t);
    void **data = calloc((size_t)f.n, sizeof *data);
    cr_assert(t && data);
    int found = 0;
    for (int i = 0; i < f.n; i++) {
        const lwq_st_entry *s = &f.entries[i];
        t[i] = (lwq_st_out_tensor){.name = s->name, .dtype = s->dtype, .ndim = s->ndim};
        memcpy(t[i].shape, s->shape, sizeof t[i].shape);
        if (!strcmp(s->name, name)) {
            found = 1;
            t[i].dtype = LWQ_F32;
            t[i].ndim = 2;
            t[i].shape[0] = d0;
            t[i].shape[1] = d1;
            float *v = malloc((size_t)(d0 * d1) * sizeof *v);
            cr_assert_not_null(v);
            for (int64_t k = 0; k < d0 * d1; k++)
                v[k] = 1.0f;
            data[i] = v;
        } else {
            data[i] = malloc(s->end - s->begin + 1);
            cr_assert_not_null(data[i]);
            cr_assert_eq(lwq_st_read(&f, f.data_start + s->begin, data[i], s->end - s->begin, &e), 0, "%s", e.msg);
        }
        t[i].data = data[i];
    }
    cr_assert(found, "%s: no tensor %s", path, name);
    lwq_st_kv meta[] = {{"format", "pt"}};
    cr_assert_eq(lwq_st_write_file(path, t, f.n, meta, 1, &e), 0, "%s", e.msg);
    for (int i = 0; i < f.n; i++)
        free(data[i]);
    free(data);
    free(t);
    lwq_st_free(&f);
}

/* An FP8-block MiniMax-M2 source streamed in groups of 3 experts: the shards of the unstreamed
 * run (each expert's F8_E4M3 weight and its scale are dequantized together, per unit). */
Test(fp8block, minimax_m2_fp8_block_source_streams_byte_identically)
{
    copy_model("minimax_m2-fp8block-bf16");
    cr_assert_eq(quantize("a", "--qformat nvfp4"), 0);
    cr_assert_eq(quantize("b", "--qformat nvfp4 --expert-group 3"), 0);
    cr_assert_eq(lwqt_sh("cd %s && for f in a/*.safetensors; do cmp -s $f b/${f#a/} || exit 1; done", g_tmp), 0,
                 "streamed shards differ");
}

/* One routed expert's weight_scale_inv with two rows of blocks for a weight of one: refused by
 * name, with the shape it should have, before any weight is read (before, the reader found it
 * in layer 1, after layer 0's shard and the resume state were written). */
Test(fp8block, a_weight_scale_inv_of_the_wrong_shape_is_refused_naming_it)
{
    copy_model("minimax_m2-fp8block-bf16");
    replace_with_ones("model.layers.1.block_sparse_moe.experts.3.w1.weight_scale_inv", 2, 1);
    cr_assert_eq(quantize("o", "--qformat fp8"), 2);
    cr_assert(stderr_has("model.layers.1.block_sparse_moe.experts.3.w1.weight_scale_inv: expected [1, 1] for a "
                         "[16, 32] weight in 128x128 blocks (weight_block_size), found [2, 1]"),
              "the refusal should name the scale and both shapes");
    cr_assert(nothing_written("o"), "a refused source left files behind");
}

/* A weight_block_size the stored scales do not fit (16 x 128 for [1, 1] scales of 32- and
 * 64-row weights): refused naming the first scale that disagrees, nothing written. */
Test(fp8block, a_block_size_the_scales_do_not_fit_is_refused_naming_the_tensor)
{
    copy_model("glm4_moe-fp8block-bf16");
    cr_assert_eq(lwqt_sh("sed -z -i 's/\"weight_block_size\": *\\[[^]]*\\]/\"weight_block_size\": [16, 128]/' "
                         "%s/m/config.json && grep -q '\"weight_block_size\": \\[16, 128\\]' %s/m/config.json",
                         g_tmp, g_tmp), 0, "the config edit did not apply");
    cr_assert_eq(quantize("o", "--qformat nvfp4"), 2);
    cr_assert(stderr_has("bad shape model.layers.0.self_attn.q_proj.weight_scale_inv: expected [4, 1] for a [64, 32] "
                         "weight in 16x128 blocks (weight_block_size), found [1, 1]"),
              "the refusal should name the scale, the block size and both shapes");
    cr_assert(nothing_written("o"), "a refused source left files behind");
}
