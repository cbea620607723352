/* The GPU plan covers what the engine keeps on a device: quantize on a fake CUDA device (tests/helpers/device/fakedev.h) and its peak of live device bytes stays within the plan's engine terms, layer by layer, with --whole-model, with an embedding larger than a layer and with expert streaming; a device error flagged in a streamed unit is reported by that run. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/run/engine.h"
#include "tests/helpers/device/fakedev.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/recipe/recipe.h"
#include "tests/helpers/run.h"

TestSuite(plan_fakedev, .init = lwqt_setup, .fini = lwqt_teardown);

static void mkmodel(const char *dir, const char *arch, const char *vocab, const char *extra)
{
    const char *mk[24] = {"mkmodel", dir, "--arch", arch, "--hidden", "128", "--layers", "3", "--heads", "4",
                          "--kv-heads", "2", "--vocab", vocab, "--quiet"};
    int n = 15;
    if (extra && !strcmp(extra, "moe")) {
        static const char *moe[] = {"--experts", "8", "--top-k", "2", "--moe-intermediate", "96"};
        for (int i = 0; i < 6; i++)
            mk[n++] = moe[i];
    }
    mk[n] = NULL;
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel: %s", lwqt_err());
}

typedef struct run_result {
    lwq_mem_plan plan;
    uint64_t peak;  /* the fake device's peak of live bytes */
    int rc;
    lwq_error e;
} run_result;

/* Plan for --device cuda, then quantize on the fake CUDA device with the same options; flag > 0:
 * the fake flags that gather (fakecu.flag_gather). */
static run_result plan_and_run(const char *model, const char *out, int whole, int group, int flag)
{
    run_result r;
    memset(&r, 0, sizeof r);
    lwq_recipe rec;
    cr_assert_eq(lwq_recipe_preset("nvfp4", &rec, &r.e), 0, "%s", r.e.msg);
    int32_t ids[4][24];
    int32_t *rows[4];
    int64_t len[4];
    for (int i = 0; i < 4; i++) {
        for (int t = 0; t < 24; t++)
            ids[i][t] = (int32_t)((i * 37 + t * 11) % 300);
        rows[i] = ids[i];
        len[i] = 20 + i;
    }
    lwq_calib_set cs = {4, rows, len, 0, "test ids"};
    lwq_backend fake;
    fakecu_init(&fake, 1);
    fakecu.flag_gather = flag;
    lwq_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.model_dir = model;
    o.out_dir = out;
    o.recipe = &rec;
    o.calib = &cs;
    o.batch_size = 2;
    o.device = LWQ_DEVICE_CUDA;
    o.whole_model = whole;
    o.expert_group = group;
    o.threads = 1;
    o.quiet = 1;
    cr_assert_eq(lwq_quantize_plan(&o, &r.plan, &r.e), 0, "%s", r.e.msg);
    o.backend = &fake;
    r.rc = lwq_quantize_run(&o, &r.e);
    r.peak = fakecu.peak;
    cr_expect_eq(fakecu.live, 0, "%llu fake device bytes left allocated", (unsigned long long)fakecu.live);
    lwq_backend_destroy(&fakecu.cpu);
    lwq_recipe_free(&rec);
    return r;
}

/* What the engine itself allocates on the device, in the plan: the larger of the embedding step
 * and a layer without the CUDA module's own buffers (GEMM staging, quantizer copies, GPTQ), which
 * a fake device running the host quantizers does not have; no runtime allowances. */
static uint64_t engine_part(const lwq_mem_plan *p)
{
    uint64_t layer = p->gpu_peak - p->gpu_runtime_bytes - p->gpu_staging_bytes - p->gpu_quant_bytes - p->gpu_gptq_bytes;
    return layer > p->gpu_embed_bytes ? layer : p->gpu_embed_bytes;
}

static void within_plan(const run_result *r, const char *what)
{
    cr_assert_eq(r->rc, 0, "%s: the run on the fake device failed: %s", what, r->e.msg);
    cr_assert_gt(r->peak, 0, "%s: nothing was allocated on the fake device", what);
    cr_expect_leq(r->peak, engine_part(&r->plan), "%s: the device held %llu bytes, the plan's engine part is %llu",
                  what, (unsigned long long)r->peak, (unsigned long long)engine_part(&r->plan));
}

/* mkmodel ARCH with VOCAB (moe: 8 experts), plan and run it on the fake device, the peak within
 * the plan; the plan is returned for the caller's own checks. */
static lwq_mem_plan check(const char *arch, const char *vocab, const char *moe, int whole, int group, const char *what)
{
    char m[600], q[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(q, sizeof q, "%s", lwqt_path("q"));
    mkmodel(m, arch, vocab, moe);
    run_result r = plan_and_run(m, q, whole, group, 0);
    within_plan(&r, what);
    return r.plan;
}

Test(plan_fakedev, layer_by_layer_stays_within_the_plan) { check("llama", "512", NULL, 0, 0, "layerwise"); }

/* The plan counted the largest layer for --whole-model, which keeps every layer and the
 * embedding on the device. */
Test(plan_fakedev, whole_model_stays_within_the_plan) { check("llama", "512", NULL, 1, 0, "--whole-model"); }

/* The embedding step's upload was not in the plan: with a 32k vocabulary the embedding matrix
 * (8 MB) is several times a layer. */
Test(plan_fakedev, an_embedding_larger_than_a_layer_stays_within_the_plan)
{
    lwq_mem_plan p = check("llama", "32768", NULL, 0, 0, "large embedding");
    cr_expect_gt(p.gpu_embed_bytes, p.largest_layer_bytes, "the fixture's embedding should outweigh a layer");
}

Test(plan_fakedev, expert_streaming_stays_within_the_plan)
{
    lwq_mem_plan p = check("qwen3_moe", "512", "moe", 0, 2, "--expert-group 2");
    cr_expect_eq(p.expert_group, 2);
}

/* Streamed layers never synchronized: a gather the device flagged inside a unit (a row index out
 * of range) went unreported, and the run committed its output.  The last gather of the run is in
 * the last unit of the last layer. */
Test(plan_fakedev, a_device_error_in_a_streamed_unit_is_reported)
{
    char m[600], q[600], q2[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(q, sizeof q, "%s", lwqt_path("q"));
    snprintf(q2, sizeof q2, "%s", lwqt_path("q2"));
    mkmodel(m, "qwen3_moe", "512", "moe");
    run_result r = plan_and_run(m, q, 0, 3, 0);
    cr_assert_eq(r.rc, 0, "%s", r.e.msg);
    int last = fakecu.gathers;
    cr_assert_gt(last, 0);
    /* the same run again, the fake flagging its last gather */
    run_result f = plan_and_run(m, q2, 0, 3, last);
    cr_expect_eq(fakecu.gathers, last, "the second run gathered %d times, the first %d", fakecu.gathers, last);
    cr_expect_lt(f.rc, 0, "the flagged gather went unreported");
    cr_expect(strstr(f.e.msg, "row index was outside") != NULL, "%s", f.e.msg);
}
