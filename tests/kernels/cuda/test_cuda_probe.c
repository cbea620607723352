/* lwq_backend_cuda_probe: without a usable GPU it says why (no CUDA in the build, no driver, a driver too old), instead of a bare count of 0. */
#include <criterion/criterion.h>
#include <string.h>

#include "kernels/backend.h"

Test(cuda_probe, no_usable_device_names_the_reason)
{
    lwq_error e = {0};
    int n = lwq_backend_cuda_probe(&e);
    if (n > 0)
        cr_skip("%d CUDA device(s) present: nothing to explain", n);
    cr_expect_lt(n, 0);
    cr_expect(e.code == LWQ_EDEVICE || e.code == LWQ_EUNSUPPORTED, "code %d", e.code);
    cr_expect(strstr(e.msg, "cuda") != NULL && strlen(e.msg) > 20, "reason: '%s'", e.msg);
    cr_expect_eq(lwq_backend_cuda_device_count(), 0);
}

Test(cuda_probe, creating_the_backend_carries_the_reason)
{
    lwq_error e = {0}, p = {0};
    if (lwq_backend_cuda_probe(&p) > 0)
        cr_skip("a CUDA device is present");
    lwq_backend be;
    cr_expect_lt(lwq_backend_cuda_create(&be, 0, &e), 0);
    cr_expect_str_eq(e.msg, p.msg, "create says '%s', the probe '%s'", e.msg, p.msg);
}
