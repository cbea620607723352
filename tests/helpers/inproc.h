/* tests/helpers/inproc.h — quantize a model in-process with the nvfp4 preset on the CPU, so the
 * io/sys.h fault and recording tables apply, on synthetic calibration ids: sample i (of n) is
 * (i * mul_i + t * mul_t) % 500 for t < len0 + i.  Header-only `static inline`. */
#ifndef LWQ_TESTS_INPROC_H
#define LWQ_TESTS_INPROC_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/run/engine.h"
#include "layout/recipe/recipe.h"

#define LWQT_IDS_MAX 8
#define LWQT_IDS_LEN 32

typedef struct lwqt_ids {
    int n, len0, mul_i, mul_t;
} lwqt_ids;

/* lwq_quantize_run of dir/model into dir/out with batch size `batch`; its return code. */
static inline int lwqt_quantize_inproc(const char *dir, const char *model, const char *out,
                                       lwqt_ids ids, int batch, lwq_error *e)
{
    cr_assert(ids.n > 0 && ids.n <= LWQT_IDS_MAX && ids.len0 > 0 &&
              ids.len0 + ids.n - 1 <= LWQT_IDS_LEN);
    int32_t buf[LWQT_IDS_MAX][LWQT_IDS_LEN];
    int32_t *rows[LWQT_IDS_MAX];
    int64_t lens[LWQT_IDS_MAX];
    for (int i = 0; i < ids.n; i++) {
        for (int t = 0; t < LWQT_IDS_LEN; t++)
            buf[i][t] = (int32_t)((i * ids.mul_i + t * ids.mul_t) % 500);
        rows[i] = buf[i];
        lens[i] = ids.len0 + i; /* unequal lengths: batches are padded */
    }
    lwq_calib_set cs = {ids.n, rows, lens, 0, "test ids"};
    lwq_recipe r;
    cr_assert_eq(lwq_recipe_preset("nvfp4", &r, e), 0);
    char mp[512], op[512];
    snprintf(mp, sizeof mp, "%s/%s", dir, model);
    snprintf(op, sizeof op, "%s/%s", dir, out);
    lwq_quantize_opts opts = {0};
    opts.model_dir = mp;
    opts.out_dir = op;
    opts.recipe = &r;
    opts.calib = &cs;
    opts.batch_size = batch;
    opts.device = LWQ_DEVICE_CPU;
    opts.quiet = 1;
    int rc = lwq_quantize_run(&opts, e);
    lwq_recipe_free(&r);
    return rc;
}

#endif
