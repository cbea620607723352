/* GPTQ statistics (engine/quant/stats.h): full Hessian sums shared within a fused group, sized by the plan; qlayer refuses GPTQ without them. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/quant/qlayer.h"
#include "engine/quant/stats.h"
#include "kernels/backend.h"
#include "kernels/gptq.h"

/* q and k read the same input (group 0), o another: in = 32, 32, 16 */
static lwq_arch_linear lins[3] = {
    {.name = "l.q_proj", .role = LWQ_ROLE_Q, .expert = -1, .out_features = 8, .in_features = 32, .group = 0},
    {.name = "l.k_proj", .role = LWQ_ROLE_K, .expert = -1, .out_features = 8, .in_features = 32, .group = 0},
    {.name = "l.o_proj", .role = LWQ_ROLE_O, .expert = -1, .out_features = 32, .in_features = 16, .group = -1},
};
static lwq_arch_layer plan = {.layer = 0, .nlinears = 3, .linears = lins, .ngroups = 1};

static lwq_tensor host2d(float *data, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return lwq_tensor_view(data, LWQ_F32, 2, shape);
}

Test(stats_gptq, group_members_share_one_sum_and_widths_are_checked)
{
    lwq_backend be;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0, "%s", e.msg);
    uint8_t want[3] = {LWQ_STATS_H_FULL, LWQ_STATS_H_FULL, LWQ_STATS_H_FULL};
    lwq_layer_stats st;
    cr_assert_eq(lwq_stats_init(&st, &plan, &be, 0, 1, 0, want, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(st.hsum[0], st.hsum[1], "q and k must share their sums");
    cr_assert_neq(st.hsum[0], st.hsum[2]);
    float x[5 * 32];
    for (int i = 0; i < 5 * 32; i++)
        x[i] = (float)((i * 37) % 11) - 5.0f;
    lwq_tensor t = host2d(x, 5, 32);
    cr_assert_eq(st.obs.linear_input(st.obs.ctx, 0, "l.q_proj", &t, NULL, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(st.obs.linear_input(st.obs.ctx, 0, "l.k_proj", &t, NULL, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(st.htokens[0], 5);
    cr_assert_eq(st.htokens[1], 5);
    /* observed once, not twice: the sums are those of the 5 tokens */
    double *ref = calloc(32 * 32, sizeof *ref);
    cr_assert_eq(lwq_gptq_hessian_accumulate(x, LWQ_F32, 5, 32, ref, "x", &e), 0);
    for (int i = 0; i < 32; i++)
        for (int j = i; j < 32; j++)
            cr_assert_eq(st.hsum[0][i * 32 + j], ref[i * 32 + j], "[%d,%d]", i, j);
    /* an input wider than the plan's in-features would overrun the sums: refused, named */
    cr_assert_eq(st.obs.linear_input(st.obs.ctx, 0, "l.o_proj", &t, NULL, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "l.o_proj") && strstr(e.msg, "32 wide") && strstr(e.msg, "16 in-features"), "%s", e.msg);
    free(ref);
    lwq_stats_free(&st);
    lwq_backend_destroy(&be);
}

/* Statistics collected without the GPTQ sums (a caller that did not ask for them): quantizing a
 * GPTQ choice is an error naming the linear, not max codes under a GPTQ name. */
Test(stats_gptq, gptq_without_its_hessian_is_an_error)
{
    lwq_backend be;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0, "%s", e.msg);
    lwq_arch_layer one = {.layer = 0, .nlinears = 1, .linears = &lins[2], .ngroups = 0};
    lwq_layer_stats st;
    cr_assert_eq(lwq_stats_init(&st, &one, &be, 0, 1, 0, NULL, NULL, &e), 0, "%s", e.msg);
    float x[3 * 16], *w = malloc(32 * 16 * sizeof *w);
    for (int i = 0; i < 3 * 16; i++)
        x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 32 * 16; i++)
        w[i] = (float)(i % 5) * 0.01f;
    lwq_tensor t = host2d(x, 3, 16);
    cr_assert_eq(st.obs.linear_input(st.obs.ctx, 0, "l.o_proj", &t, NULL, NULL, &e), 0, "%s", e.msg);
    lwq_tlist src = {0}, out = {0};
    int64_t shape[2] = {32, 16};
    cr_assert_eq(lwq_tlist_add(&src, "l.o_proj.weight", LWQ_F32, 2, shape, w, 1, &e), 0);
    lwq_tlist_sort(&src);
    lwq_quant_choice ch = {.format = LWQ_QFMT_NVFP4, .algo = LWQ_ALGO_GPTQ, .gptq_damp = 0.01};
    lwq_qops qo;
    lwq_qops_init(&qo, &be);
    lwq_qlayer_report rep = {0};
    cr_assert_eq(lwq_qlayer_run(&one, &ch, LWQ_KV_NONE, &st, &src, &qo, &out, &rep, &e), LWQ_ESTATE);
    cr_assert(strstr(e.msg, "l.o_proj") && strstr(e.msg, "no Hessian"), "%s", e.msg);
    lwq_qlayer_report_free(&rep);
    lwq_tlist_free(&out);
    lwq_tlist_free(&src);
    lwq_qops_free(&qo);
    lwq_stats_free(&st);
    lwq_backend_destroy(&be);
}
