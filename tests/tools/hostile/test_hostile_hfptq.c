/* hf_ptq's spelling under a hostile command line (issue 36, finding 2): however many words the arguments become, the translation holds them (no heap overflow) and lwq answers with its own error. */
#include <criterion/criterion.h>

#include "tests/helpers/run.h"

TestSuite(hostile_hfptq, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 60);

/* Each `--qformat=nvfp4_w4a4_weight_mse_fp8_sweep,fp8` with --auto_quantize_bits became 7 words
 * (--qformat fp8 --algo mse --fp8-scale-sweep --auto-quantize-formats nvfp4,fp8; now 4, the
 * candidate having its own name); the translated argv was sized for 6 per argument, so 46 of them
 * wrote past it (glibc: "corrupted size vs. prev_size", SIGABRT). */
Test(hostile_hfptq, seven_words_per_argument_fit)
{
    char args[3000] = "";
    size_t n = 0;
    for (int i = 0; i < 60; i++)
        n += (size_t)snprintf(args + n, sizeof args - n, " --qformat=nvfp4_w4a4_weight_mse_fp8_sweep,fp8");
    cr_assert_lt(n, sizeof args);
    int rc = lwqt_sh("cd %s && %s quantize --pyt_ckpt_path m --export_path o --auto_quantize_bits 6%s "
                     ">out.txt 2>err.txt </dev/null", lwqt_dir, lwqt_bin(), args);
    char *err = lwqt_err();
    cr_assert_eq(rc, 2, "exit %d, expected 2 (134: SIGABRT); stderr: %s", rc, err);
    cr_assert(strstr(err, "m: no config.json"), "the model was not named; stderr: %s", err);
    free(err);
}
