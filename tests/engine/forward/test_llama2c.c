/* The llama2.c stories260K fixture converted to an HF checkpoint runs in lwq's forward as llama2.c runs it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/model/fwd_fixture.h"
#include "tests/helpers/model/llama2c.h"
#include "tests/helpers/craft.h"

TestSuite(llama2c, .init = lwqt_setup, .fini = lwqt_teardown);

/* Bound: F32 weights and activations over 5 layers of width 64/172 and 32 positions: each op is
 * f32 with a few ulps of relative error; logits of this model reach ~15, so 1e-4 relative to the
 * logit scale is ~100 ulps of margin, while a wrong q/k permutation moves logits by > 1. */
Test(llama2c, converted_checkpoint_matches_llama2c_float64)
{
    char buf[1024], why[1200];
    const char *bin = llama2c_fixture_path(buf, sizeof buf, why, sizeof why);
    if (!bin)
        cr_skip("%s", why);
    lwq_error e = {0};
    llama2c_model m;
    cr_assert_eq(llama2c_load(bin, &m, &e), 0, "%s", e.msg);
    cr_assert_eq(m.dim, 64);
    cr_assert_eq(m.hidden, 172);
    cr_assert_eq(llama2c_to_hf(&m, lwqt_dir, &e), 0, "%s", e.msg);
    enum { T = 32 };
    int32_t tok[T];
    cr_assert_eq(llama2c_sample(&m, 1234, 1, T, tok), 0);
    double *ref = malloc(sizeof(double) * T * m.vocab);
    cr_assert_eq(llama2c_logits64(&m, tok, T, ref), 0);

    lwq_backend be;
    fwd_fixture f;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    cr_assert_eq(fwd_fixture_open(&f, lwqt_dir, NULL, &e), 0, "%s", e.msg);
    lwq_model mod;
    cr_assert_eq(lwq_model_init(&mod, &f.ck.cfg, &be, LWQ_F32, &e), 0, "%s", e.msg);
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, 1, T, NULL, &e), 0, "%s", e.msg);
    int64_t shape[2] = {T, m.vocab};
    lwq_tensor logits;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, shape, &logits, &e), 0);
    cr_assert_eq(lwq_model_forward(&mod, &f.w, tok, &b, &logits, NULL, &e), 0, "%s", e.msg);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        double scale = 1, err = 0;
        for (int v = 0; v < m.vocab; v++)
            scale = fmax(scale, fabs(ref[t * m.vocab + v]));
        for (int v = 0; v < m.vocab; v++)
            err = fmax(err, fabs(((float *)logits.data)[t * m.vocab + v] - ref[t * m.vocab + v]));
        worst = fmax(worst, err / scale);
    }
    cr_log_info("stories260K: max relative logit error %.3g over %d tokens", worst, T);
    cr_assert(worst < 1e-4, "max relative logit error %.3g", worst);
    lwq_backend_tensor_free(&be, &logits);
    lwq_batch_free(&b, &be);
    lwq_model_free(&mod);
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
    free(ref);
    llama2c_free(&m);
}

Test(llama2c, truncated_file_is_refused)
{
    char buf[1024], why[1200];
    const char *bin = llama2c_fixture_path(buf, sizeof buf, why, sizeof why);
    if (!bin)
        cr_skip("%s", why);
    FILE *fp = fopen(bin, "rb");
    cr_assert_not_null(fp);
    char *data = malloc(4096);
    size_t n = fread(data, 1, 4096, fp);
    fclose(fp);
    lwqt_write("short.bin", data, n);
    free(data);
    lwq_error e = {0};
    llama2c_model m;
    cr_assert_lt(llama2c_load(lwqt_path("short.bin"), &m, &e), 0);
    cr_assert(strstr(e.msg, "short.bin") && strstr(e.msg, "bytes"), "%s", e.msg);
}
