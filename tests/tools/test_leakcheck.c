/* valgrind --leak-check=full --error-exitcode=9 on lwq quantize, inspect and verify of a small model: exit 0 (no leak, no error, no thread left running). */
#include <criterion/criterion.h>

#include "tests/helpers/run.h"

TestSuite(leakcheck, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 400);

static void need_valgrind(void)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip("an AddressSanitizer build does not run under valgrind");
#endif
    if (lwqt_sh("valgrind --version >/dev/null 2>&1") != 0)
        cr_skip("valgrind is not installed");
}

/* `lwq args` under valgrind (as the command line); its exit status, the log in vg.txt. */
static int under_valgrind(const char *args)
{
    return lwqt_sh("cd %s && valgrind --leak-check=full --error-exitcode=9 --log-file=vg.txt %s %s >out.txt 2>err.txt",
                   lwqt_dir, lwqt_bin(), args);
}

static void clean(const char *args)
{
    int rc = under_valgrind(args);
    char *log = lwqt_slurp(lwqt_path("vg.txt"));
    cr_assert_eq(rc, 0, "valgrind lwq %s: exit %d\n%s", args, rc, log);
    free(log);
}

Test(leakcheck, quantize_inspect_and_verify_are_clean)
{
    need_valgrind();
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_moe", "--hidden", "64", "--layers", "2", "--heads",
                        "4", "--kv-heads", "2", "--experts", "4", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    clean("quantize m -o q --calib-size 4 --calib-seq 16 --threads 2 --quiet");
    clean("inspect q");
    clean("verify q");
}

/* A refused run frees what it had (the error paths are where leaks hide). */
Test(leakcheck, a_refused_run_is_clean)
{
    need_valgrind();
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    lwqt_write_str("r.json", "{\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"}],\"rules\":[]}");
    int rc = under_valgrind("quantize m -o q --recipe r.json --calib-size 4 --calib-seq 16 --quiet");
    char *log = lwqt_slurp(lwqt_path("vg.txt"));
    cr_assert_eq(rc, 2, "exit %d (expected 2: refused, without a valgrind error)\n%s", rc, log);
    free(log);
}
