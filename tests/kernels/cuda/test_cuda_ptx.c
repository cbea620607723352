/* The CUDA element-wise kernels keep backend.h's no-contraction rule in the PTX nvcc emits: swiglu's 1 + exp(-x) is its own rounded add, add and moe_combine contain no FMA. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"

#ifndef LWQ_CUDA_PTX
Test(cuda_ptx, elementwise_kernels_do_not_contract)
{
    cr_skip("lwq built without CUDA: no PTX to check");
}
#else

/* The body of the kernel whose mangled name contains `name` (from its .entry to the next). */
static char *kernel_body(const char *name)
{
    char *all = lwqt_slurp(LWQ_CUDA_PTX);
    cr_assert_not_null(all, "cannot read the PTX %s", LWQ_CUDA_PTX);
    char *p = all, *start = NULL;
    while ((p = strstr(p, ".entry ")) != NULL) {
        char *eol = strchr(p, '\n');
        if (eol && memmem(p, (size_t)(eol - p), name, strlen(name))) {
            start = p;
            break;
        }
        p += 7;
    }
    cr_assert_not_null(start, "no kernel %s in %s", name, LWQ_CUDA_PTX);
    char *end = strstr(start + 7, ".entry ");
    size_t len = end ? (size_t)(end - start) : strlen(start);
    char *body = malloc(len + 1);
    cr_assert_not_null(body);
    memcpy(body, start, len);
    body[len] = 0;
    free(all);
    return body;
}

/* The opcode of the instruction that writes register `reg` ("%f51") in body, or "" if none. */
static void defining_opcode(const char *body, const char *reg, char *op, size_t cap)
{
    op[0] = 0;
    const char *line = body;
    while (line && *line) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[256];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        char opc[64], dst[64];
        if (sscanf(buf, " %63s %63[^,;]", opc, dst) == 2 && !strcmp(dst, reg))
            snprintf(op, cap, "%s", opc);
        line = eol ? eol + 1 : NULL;
    }
}

/* nvcc fused the last multiply of expf with the `1.0f +` into fma.rn.f32 ..., 0f3F800000, so the
 * divisor of silu rounded once where the CPU rounds twice. */
Test(cuda_ptx, swiglu_one_plus_exp_is_a_separate_rounded_add)
{
    char *body = kernel_body("k_swiglu");
    int divs = 0;
    for (const char *p = body; (p = strstr(p, "div.rn.f32")) != NULL; p++) {
        char a[64], b[64], c[64];
        cr_assert_eq(sscanf(p, "div.rn.f32 %63[^,], %63[^,], %63[^;]", a, b, c), 3, "unparsed: %.60s", p);
        char op[64];
        defining_opcode(body, c, op, sizeof op);
        cr_expect_str_eq(op, "add.rn.f32", "the divisor %s of silu comes from '%s', not a rounded add", c, op);
        divs++;
    }
    cr_expect_gt(divs, 0, "no IEEE division in k_swiglu");
    for (const char *p = body; (p = strstr(p, "fma.")) != NULL; p++) {
        const char *eol = strchr(p, '\n');
        cr_expect(!memmem(p, eol ? (size_t)(eol - p) : strlen(p), "0f3F800000", 10),
                  "a constant 1.0 is an FMA's addend in k_swiglu: %.60s", p);
    }
    free(body);
}

Test(cuda_ptx, add_and_combine_have_no_fma)
{
    static const char *const k[] = {"k_add", "k_combine"};
    for (int i = 0; i < 2; i++) {
        char *body = kernel_body(k[i]);
        cr_expect_null(strstr(body, "fma."), "%s contains an FMA: %.80s", k[i], strstr(body, "fma."));
        free(body);
    }
}
#endif
