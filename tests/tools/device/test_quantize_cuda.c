/* The GPU path end to end (skipped without a CUDA device): `lwq quantize --device cuda` gives the
 * same weight bytes and weight scales as `--device cpu` (the quantizers are byte-identical and the
 * weights do not depend on the forward), input scales within the activation-dtype tolerance of
 * the two backends' forwards, and an output that `lwq verify` accepts. */
#include <criterion/criterion.h>
#include <math.h>

#include "kernels/backend.h"
#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(quantize_cuda, .init = lwqt_setup, .fini = lwqt_teardown);

static int ends(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

Test(quantize_cuda, gpu_output_matches_cpu)
{
    lwq_error pe = {0};
    if (lwq_backend_cuda_probe(&pe) <= 0)
        cr_skip("the GPU quantize path is not run here (perf/gpu-check.sh runs it): %s", pe.msg);
    char m[600], qc[600], qg[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(qc, sizeof qc, "%s", lwqt_path("qc"));
    snprintf(qg, sizeof qg, "%s", lwqt_path("qg"));
    const char *mk[] = {"mkmodel", m, "--arch", "qwen3_moe", "--hidden", "256", "--layers", "2", "--experts", "8",
                        "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *presets[] = {"nvfp4", "nvfp4_experts-fp8_attn"};
    for (int p = 0; p < 2; p++) {
        char sc[700], sg[700];
        snprintf(sc, sizeof sc, "%s%d", qc, p);
        snprintf(sg, sizeof sg, "%s%d", qg, p);
        const char *a[] = {"quantize", m, "-o", sc, "--qformat", presets[p], "--calib-size", "8", "--calib-seq", "32",
                           "--device", "cpu", "--quiet", NULL};
        cr_assert_eq(lwqt_run(a), 0, "cpu run: %s", lwqt_err());
        const char *b[] = {"quantize", m, "-o", sg, "--qformat", presets[p], "--calib-size", "8", "--calib-seq", "32",
                           "--device", "cuda", "--quiet", NULL};
        cr_assert_eq(lwqt_run(b), 0, "cuda run: %s", lwqt_err());
        const char *v[] = {"verify", sg, NULL};
        cr_assert_eq(lwqt_run(v), 0, "verify of the GPU output failed");
        lwq_ckpt x, y;
        lwq_error e = {0};
        cr_assert_eq(lwq_ckpt_open(sc, &x, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_ckpt_open(sg, &y, &e), 0, "%s", e.msg);
        cr_assert_eq(x.ntensors, y.ntensors);
        for (int i = 0; i < x.ntensors; i++) {
            const lwq_ckpt_tensor *t = &x.tensors[i], *u = lwq_ckpt_find(&y, t->name);
            cr_assert_not_null(u, "%s missing from the GPU output", t->name);
            unsigned char *bx = malloc(t->nbytes + 1), *by = malloc(u->nbytes + 1);
            cr_assert_eq(lwq_ckpt_read_tensor(&x, t, bx, &e), 0);
            cr_assert_eq(lwq_ckpt_read_tensor(&y, u, by, &e), 0);
            if (ends(t->name, ".input_scale")) {
                float a1, a2;
                memcpy(&a1, bx, 4);
                memcpy(&a2, by, 4);
                cr_assert(fabsf(a1 - a2) <= 2e-2f * fabsf(a1), "%s: cpu %g, cuda %g", t->name, a1, a2);
            } else {
                cr_assert_eq(memcmp(bx, by, t->nbytes), 0, "%s: bytes differ between cpu and cuda", t->name);
            }
            free(bx);
            free(by);
        }
        lwq_ckpt_free(&x);
        lwq_ckpt_free(&y);
    }
}
