/* A damaged CUDA module (issue 36, finding 5): a truncated liblwq-cuda.so or a file that is no module, named by LWQ_CUDA_MODULE, is refused before dlopen maps it (exit 2, "cannot load the CUDA module PATH: ..."), never a SIGBUS, on --device cuda, lwq eval --device cuda and --device auto. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/helpers/run.h"

TestSuite(hostile_module, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 120);

/* The module the build put beside lwq (static buffer); the test is skipped without it. */
static const char *built_module(void)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s", lwqt_bin());
    char *slash = strrchr(p, '/');
    cr_assert_not_null(slash);
    snprintf(slash + 1, sizeof p - (size_t)(slash + 1 - p), "liblwq-cuda.so");
    struct stat st;
    if (stat(p, &st) != 0)
        cr_skip("liblwq-cuda.so is not built beside %s (a build without CUDA)", lwqt_bin());
    return p;
}

static void make_model(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --hidden 64 --layers 1 --vocab 300 --quiet", lwqt_bin(), lwqt_path("m")), 0);
}

/* `lwq CMD` (a shell fragment after the binary, run in the temp dir) with LWQ_CUDA_MODULE=bad.so
 * exits 2 naming the module and `why`; 135 is SIGBUS. */
static void refused(const char *cmd, const char *why)
{
    int rc = lwqt_sh("cd %s && LWQ_CUDA_MODULE=%s/bad.so %s %s >out.txt 2>err.txt </dev/null", lwqt_dir, lwqt_dir,
                     lwqt_bin(), cmd);
    char *err = lwqt_err();
    cr_assert_neq(rc, 135, "lwq %s: SIGBUS (dlopen of the damaged module)", cmd);
    cr_assert_eq(rc, 2, "lwq %s: exit %d, expected 2; stderr: %s", cmd, rc, err);
    char want[600];
    snprintf(want, sizeof want, "cannot load the CUDA module %s/bad.so: ", lwqt_dir);
    cr_assert(strstr(err, want), "lwq %s: stderr lacks \"%s\": %s", cmd, want, err);
    cr_assert(strstr(err, why), "lwq %s: stderr lacks \"%s\": %s", cmd, why, err);
    free(err);
}

#define Q "quantize m -o q --calib-size 2 --calib-seq 8 --quiet"
#define E "eval m --calib-size 2 --calib-seq 8 --data-size 2 --data-seq 8"

/* bad.so = the first `percent` % of the built module */
static void truncated(int percent)
{
    const char *mod = built_module();
    struct stat st;
    cr_assert_eq(stat(mod, &st), 0);
    cr_assert_eq(lwqt_sh("head -c %lld %s > %s/bad.so", (long long)st.st_size * percent / 100, mod, lwqt_dir), 0);
}

Test(hostile_module, a_truncated_module_quantize_device_cuda)
{
    make_model();
    truncated(50);
    refused(Q " --device cuda", "truncated");
}

Test(hostile_module, a_truncated_module_eval_device_cuda)
{
    make_model();
    truncated(90);
    refused(E " --device cuda", "truncated");
}

Test(hostile_module, a_truncated_module_device_auto)
{
    make_model();
    truncated(99);
    refused(Q " --device auto", "truncated");
    refused(Q " --device auto --auto-quantize-bits 6", "truncated");
}

/* the section headers dropped from the header (e_shoff = 0), then cut inside the PT_LOAD segments:
 * the segment check names the program header */
Test(hostile_module, a_module_cut_inside_a_segment)
{
    make_model();
    truncated(50);
    cr_assert_eq(lwqt_sh("printf '\\0\\0\\0\\0\\0\\0\\0\\0' | dd of=%s/bad.so bs=1 seek=40 conv=notrunc status=none",
                         lwqt_dir), 0);
    refused(Q " --device cuda", "(PT_LOAD) needs bytes");
}

Test(hostile_module, garbage_files_are_refused)
{
    make_model();
    (void)built_module();
    cr_assert_eq(lwqt_sh("head -c 4096 /dev/urandom > %s/bad.so", lwqt_dir), 0);
    refused(Q " --device cuda", "not an ELF file");
    cr_assert_eq(lwqt_sh(": > %s/bad.so", lwqt_dir), 0);
    refused(Q " --device cuda", "too short for an ELF header");
    cr_assert_eq(lwqt_sh("printf '\\177ELF' > %s/bad.so", lwqt_dir), 0);
    refused(Q " --device cuda", "too short for an ELF header");
    cr_assert_eq(lwqt_sh("rm %s/bad.so && mkdir %s/bad.so", lwqt_dir, lwqt_dir), 0);
    refused(Q " --device cuda", "not a regular file");
}

Test(hostile_module, a_32_bit_or_foreign_machine_module_is_refused)
{
    make_model();
    const char *mod = built_module();
    cr_assert_eq(lwqt_sh("cp %s %s/bad.so && printf '\\001' | dd of=%s/bad.so bs=1 seek=4 conv=notrunc status=none",
                         mod, lwqt_dir, lwqt_dir), 0);
    refused(Q " --device cuda", "not a 64-bit little-endian ELF file");
    /* e_machine 0x1234 */
    cr_assert_eq(lwqt_sh("cp %s %s/bad.so && printf '\\064\\022' | dd of=%s/bad.so bs=1 seek=18 conv=notrunc "
                         "status=none", mod, lwqt_dir, lwqt_dir), 0);
    refused(Q " --device cuda", "built for ELF machine 4660");
}

/* the intact module named by LWQ_CUDA_MODULE still loads; without a GPU, auto runs on the CPU */
Test(hostile_module, the_intact_module_named_still_loads)
{
    make_model();
    const char *mod = built_module();
    int rc = lwqt_sh("cd %s && LWQ_CUDA_MODULE=%s %s " Q " --device auto >out.txt 2>err.txt", lwqt_dir, mod,
                     lwqt_bin());
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(!strstr(err, "cannot load"), "%s", err);
    free(err);
}
