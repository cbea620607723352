/* glm4_moe (GLM-4.5+) end to end on the transformers-written tiny checkpoint of tests/data/peers: expert streaming and resume byte-identical, inspect / verify / eval, and the refusal of a partial_rotary_factor lwq cannot rotate (before any weight is read, nothing written). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/shell.h"

static char g_tmp[256];

static void setup(void) { lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-glm4moe"); }
static void teardown(void) { lwqt_rmtree(g_tmp); }

TestSuite(glm4_moe, .init = setup, .fini = teardown, .timeout = 300);

static const char *data_root(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/tools/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*stests/data/peers", (int)(cut - me), me);
    return path;
}

/* g_tmp/m: a copy of the tiny F32 glm4_moe (its MTP layer model.layers.2.* included). */
static void copy_model(void)
{
    cr_assert_eq(lwqt_sh("cp -r '%s/src/glm4_moe-f32' %s/m", data_root(), g_tmp), 0);
}

static int quantize(const char *out, const char *env, const char *extra)
{
    return lwqt_sh("%s '%s' quantize %s/m -o %s/%s --calib '%s/calib.jsonl' --calib-size 8 --calib-seq 32 "
                   "--batch-size 4 --threads 2 --quiet %s 2>>%s/stderr.txt",
                   env ? env : "", lwqt_bin(), g_tmp, g_tmp, out, data_root(), extra, g_tmp);
}

static int same_dirs(const char *a, const char *b)
{
    return lwqt_sh("diff -r %s/%s %s/%s >/dev/null 2>&1", g_tmp, a, g_tmp, b) == 0;
}

Test(glm4_moe, expert_streaming_is_byte_identical)
{
    copy_model();
    cr_assert_eq(quantize("a", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(quantize("b", NULL, "--qformat nvfp4 --expert-group 3"), 0);
    cr_assert_eq(lwqt_sh("cd %s && for f in a/*.safetensors; do cmp -s $f b/${f#a/} || exit 1; done", g_tmp), 0,
                 "streamed shards differ");
}

Test(glm4_moe, resume_after_a_kill_is_byte_identical)
{
    copy_model();
    cr_assert_eq(quantize("ref", NULL, "--qformat fp8"), 0);
    int rc = quantize("out", "LWQ_SYS_CRASH_STEP=6 LWQ_SYS_CRASH_MODE=kill", "--qformat fp8");
    cr_assert_eq(rc, 128 + SIGKILL, "exit %d, expected a SIGKILL at step 6", rc);
    cr_assert_eq(quantize("out", NULL, "--qformat fp8"), 0, "resume failed");
    cr_assert(same_dirs("ref", "out"), "resumed output differs");
}

Test(glm4_moe, inspect_verify_and_eval)
{
    copy_model();
    cr_assert_eq(lwqt_sh("'%s' inspect %s/m 2>&1 | grep -q 'model.layers.2.\\* .* pass through'", lwqt_bin(), g_tmp),
                 0, "inspect does not pass the MTP layer through");
    cr_assert_eq(quantize("q", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(lwqt_sh("'%s' verify %s/q >/dev/null 2>&1", lwqt_bin(), g_tmp), 0, "verify failed");
    cr_assert_eq(lwqt_sh("grep -q '\"model.layers.2\\*\"' %s/q/hf_quant_config.json", g_tmp), 0,
                 "the MTP layer is not excluded");
    cr_assert_eq(lwqt_sh("'%s' eval %s/m %s/q --data '%s/calib.jsonl' --data-size 2 --data-seq 16 --threads 2 "
                         "--quiet --json %s/ev.json >/dev/null 2>&1 && test -s %s/ev.json",
                         lwqt_bin(), g_tmp, g_tmp, data_root(), g_tmp, g_tmp),
                 0, "eval failed");
}

Test(glm4_moe, unrotatable_partial_rotary_factor_is_refused_by_name_before_reading_and_writes_nothing)
{
    copy_model();
    /* head_dim 16 x 0.1 = 1 rotary dim; the weights unreadable: a refusal that read them would fail
     * differently */
    cr_assert_eq(lwqt_sh("cd %s/m && sed -i 's/\"partial_rotary_factor\": 0.5/\"partial_rotary_factor\": 0.1/' "
                         "config.json && grep -q '\"partial_rotary_factor\": 0.1' config.json && "
                         "truncate -s 100 model.safetensors && mkdir -p %s/out",
                         g_tmp, g_tmp),
                 0);
    int rc = quantize("out", NULL, "--qformat nvfp4");
    cr_assert_eq(rc, 2, "exit %d", rc);
    cr_assert_eq(lwqt_sh("grep -q \"model_type 'glm4_moe': \\\"partial_rotary_factor\\\" = 0.1 gives 1 rotary "
                         "dims\" %s/stderr.txt",
                         g_tmp),
                 0, "the message names neither the model_type nor the key and value");
    cr_assert_eq(lwqt_sh("test -z \"$(ls -A %s/out)\"", g_tmp), 0, "something was written");
}
