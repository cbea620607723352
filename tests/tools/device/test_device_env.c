/* LWQ_DEVICE sets `lwq quantize`'s default device (--device wins); a bad value or an unusable CUDA device is an error naming the reason, never a silent CPU run. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"
#include "kernels/backend.h"

TestSuite(device_env, .init = lwqt_setup, .fini = lwqt_teardown);

static void model(char *m, size_t cap)
{
    snprintf(m, cap, "%s", lwqt_path("m"));
    const char *mk[] = {"mkmodel", m, "--hidden", "64", "--layers", "1", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "%s", lwqt_err());
}

static int quantize(const char *m, const char *out, const char *device)
{
    const char *q[] = {"quantize", m, "-o", out, "--calib-size", "2", "--calib-seq", "8", "--quiet",
                       device ? "--device" : NULL, device, NULL};
    return lwqt_run(q);
}

Test(device_env, a_bad_value_is_refused)
{
    char m[600];
    model(m, sizeof m);
    setenv("LWQ_DEVICE", "tpu", 1);
    int rc = quantize(m, lwqt_path("q"), NULL);
    unsetenv("LWQ_DEVICE");
    char *err = lwqt_err();
    cr_expect_neq(rc, 0);
    cr_expect(strstr(err, "LWQ_DEVICE tpu") != NULL, "%s", err);
    free(err);
}

Test(device_env, cuda_without_a_usable_device_fails_with_the_reason)
{
    lwq_error pe = {0};
    if (lwq_backend_cuda_probe(&pe) > 0)
        cr_skip("a CUDA device is present");
    char m[600];
    model(m, sizeof m);
    setenv("LWQ_DEVICE", "cuda", 1);
    int rc = quantize(m, lwqt_path("q"), NULL);
    char *err = lwqt_err();
    cr_expect_neq(rc, 0, "LWQ_DEVICE=cuda ran without a GPU");
    cr_expect(strstr(err, "cuda") != NULL, "%s", err);
    free(err);
    /* --device on the command line wins over the environment */
    cr_expect_eq(quantize(m, lwqt_path("q2"), "cpu"), 0, "%s", lwqt_err());
    unsetenv("LWQ_DEVICE");
}
