/* The CUDA backend is a loadable module: lwq links no CUDA library, a CPU run maps none, and --device cuda without the module, with a library of the module missing or with a file that is no module exits 2 naming what is missing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_module.h"
#include "tests/helpers/shell.h"

#ifndef LWQ_HAVE_CUDA
Test(cuda_module, loads_for_device_cuda)
{
    cr_skip("lwq built without CUDA: no module");
}
#else

static char g_tmp[256];

static void setup(void)
{
    lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-cudamod");
    cr_assert_eq(lwqt_sh("%s mkmodel %s/m --hidden 64 --layers 1 --vocab 300 --quiet", lwqt_bin(), g_tmp), 0);
}

static void teardown(void) { lwqt_rmtree(g_tmp); }

TestSuite(cuda_module, .init = setup, .fini = teardown);

/* `lwq quantize` of the tiny model with `env` and `device`; stderr to $tmp/err.txt. */
static int quantize(const char *env, const char *bin, const char *device)
{
    return lwqt_sh("rm -rf %s/q %s/q.* && %s %s quantize %s/m -o %s/q --calib-size 2 --calib-seq 8 --quiet "
                   "--device %s 2>%s/err.txt", g_tmp, g_tmp, env, bin, g_tmp, g_tmp, device, g_tmp);
}

static int err_has(const char *needle)
{
    return lwqt_sh("grep -q -- '%s' %s/err.txt", needle, g_tmp) == 0;
}

#define CUDA_LIBS "libcudart|libcublas|libcusolver|libcuda\\.so|libnvrtc|libnvJitLink|liblwq-cuda"

Test(cuda_module, the_binary_needs_no_cuda_library)
{
    if (lwqt_sh("command -v readelf >/dev/null") != 0)
        cr_skip("readelf not found (binutils)");
    cr_assert_eq(lwqt_sh("readelf -d %s | grep -q NEEDED", lwqt_bin()), 0, "readelf shows no NEEDED entry");
    cr_expect_neq(lwqt_sh("readelf -d %s | grep NEEDED | grep -Eq '%s|libopenblas'", lwqt_bin(), CUDA_LIBS), 0,
                  "lwq links a CUDA library or OpenBLAS");
}

/* LD_DEBUG=libs lists every library the dynamic loader maps, dlopen()ed ones included. */
Test(cuda_module, a_cpu_run_maps_no_cuda_library)
{
    cr_assert_eq(quantize("LD_DEBUG=libs", lwqt_bin(), "cpu"), 0);
    cr_assert(err_has("calling init"), "LD_DEBUG=libs printed nothing");
    cr_expect(!lwqt_sh("grep -Eq '%s' %s/err.txt", CUDA_LIBS, g_tmp) == 0, "--device cpu mapped a CUDA library");
    if (lwq_cuda_driver_present())
        return; /* auto loads the module where there is a driver */
    cr_assert_eq(quantize("LD_DEBUG=libs", lwqt_bin(), "auto"), 0);
    cr_expect(!lwqt_sh("grep -Eq '%s' %s/err.txt", CUDA_LIBS, g_tmp) == 0,
              "--device auto without a driver mapped a CUDA library");
}

Test(cuda_module, a_missing_module_is_named)
{
    /* the binary alone in a directory: no module beside it */
    cr_assert_eq(lwqt_sh("mkdir -p %s/bin && cp %s %s/bin/lwq", g_tmp, lwqt_bin(), g_tmp), 0);
    char bin[300];
    snprintf(bin, sizeof bin, "%s/bin/lwq", g_tmp);
    cr_expect_eq(quantize("env -u LWQ_CUDA_MODULE", bin, "cuda"), 2);
    cr_expect(err_has("the CUDA module liblwq-cuda.so is missing"), "stderr does not name the module");
    cr_expect(err_has(g_tmp), "stderr does not say where it looked");
    cr_expect_eq(quantize("LWQ_CUDA_MODULE=/nonexistent/liblwq-cuda.so", lwqt_bin(), "cuda"), 2);
    cr_expect(err_has("/nonexistent/liblwq-cuda.so (LWQ_CUDA_MODULE) does not exist"));
}

Test(cuda_module, a_missing_library_of_the_module_is_named)
{
    char env[512];
    snprintf(env, sizeof env, "LWQ_CUDA_MODULE=%s", LWQ_TEST_NEEDS_GONE);
    cr_expect_eq(quantize(env, lwqt_bin(), "cuda"), 2);
    cr_expect(err_has("needs liblwqtest_gone.so, which the dynamic loader cannot find"), "stderr does not name the library");
}

Test(cuda_module, a_file_that_is_no_module_is_refused)
{
    char env[512];
    snprintf(env, sizeof env, "LWQ_CUDA_MODULE=%s", LWQ_TEST_GONE);
    cr_expect_eq(quantize(env, lwqt_bin(), "cuda"), 2);
    cr_expect(err_has("is not an lwq CUDA module"));
}

/* The module beside the binary loads (every lwq_* function it calls resolves in lwq): what is left
 * to say without a GPU is the driver's or the device's reason. */
Test(cuda_module, the_built_module_loads_and_reports_the_driver)
{
    int rc = quantize("env -u LWQ_CUDA_MODULE", lwqt_bin(), "cuda");
    if (rc == 0)
        return; /* a GPU: the module ran */
    cr_expect_eq(rc, 2);
    cr_expect(err_has("cudaGetDeviceCount") || err_has("no CUDA device"), "not the driver's reason");
    cr_expect(!err_has("CUDA module"), "the module did not load");
}

Test(cuda_module, loads_in_process_with_matching_abi)
{
    unsetenv("LWQ_CUDA_MODULE");
    lwq_error e = {0};
    const lwq_cuda_module *m = lwq_cuda_module_load(&e);
    cr_assert_not_null(m, "%s", e.msg);
    cr_expect_eq(m->abi, LWQ_CUDA_MODULE_ABI);
    cr_expect_str_eq(m->version, LWQ_VERSION);
    cr_expect(m->quant && m->gptq && m->probe && m->backend_create);
    cr_expect_eq(lwq_cuda_module_load(&e), m, "a second load gives the same module");
}
#endif
