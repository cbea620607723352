/* kimi_linear (issue 35) end to end on the transformers-written tiny checkpoint of tests/data/peers: expert streaming and resume byte-identical, inspect / verify / eval, and the refusals by name (before any weight is read, nothing written). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/shell.h"

static char g_tmp[256];

static void setup(void) { lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-kimi"); }
static void teardown(void) { lwqt_rmtree(g_tmp); }

TestSuite(kimi_linear, .init = setup, .fini = teardown, .timeout = 300);

static const char *data_root(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/tools/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*stests/data/peers", (int)(cut - me), me);
    return path;
}

/* g_tmp/m: a copy of src/kimi_linear-f32 (KDA + dense, MLA + MoE, KDA + MoE) */
static void copy_model(void)
{
    cr_assert_eq(lwqt_sh("cp -r '%s/src/kimi_linear-f32' %s/m", data_root(), g_tmp), 0);
}

static int quantize(const char *out, const char *env, const char *extra)
{
    return lwqt_sh("%s '%s' quantize %s/m -o %s/%s --calib '%s/calib.jsonl' --calib-size 8 --calib-seq 32 "
                   "--batch-size 4 --threads 2 --quiet %s 2>>%s/stderr.txt",
                   env ? env : "", lwqt_bin(), g_tmp, g_tmp, out, data_root(), extra, g_tmp);
}

/* want (a fixed string) is in g_tmp/stderr.txt and g_tmp/out is empty */
static void said_and_wrote_nothing(const char *want)
{
    char wp[300];
    snprintf(wp, sizeof wp, "%s/want.txt", g_tmp);
    FILE *f = fopen(wp, "w");
    cr_assert(f && fputs(want, f) >= 0 && fclose(f) == 0, "%s", wp);
    cr_assert_eq(lwqt_sh("grep -qF -f %s %s/stderr.txt", wp, g_tmp), 0, "the message does not say %s", want);
    cr_assert_eq(lwqt_sh("test -z \"$(ls -A %s/out)\"", g_tmp), 0, "something was written");
}

/* config.json edited with the sed expression `edit` (checked with grep `check`), the weights made
 * unreadable (a refusal that read them would fail differently): quantize exits 2 saying `want`. */
static void refused(const char *edit, const char *check, const char *want)
{
    copy_model();
    cr_assert_eq(lwqt_sh("cd %s/m && sed -i '%s' config.json && grep -qF '%s' config.json && "
                         "truncate -s 100 model.safetensors && mkdir -p %s/out",
                         g_tmp, edit, check, g_tmp),
                 0, "could not edit config.json");
    int rc = quantize("out", NULL, "--qformat nvfp4");
    cr_assert_eq(rc, 2, "exit %d", rc);
    said_and_wrote_nothing(want);
}

Test(kimi_linear, expert_streaming_is_byte_identical)
{
    copy_model();
    cr_assert_eq(quantize("a", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(quantize("b", NULL, "--qformat nvfp4 --expert-group 3"), 0);
    cr_assert_eq(lwqt_sh("cd %s && for f in a/*.safetensors; do cmp -s $f b/${f#a/} || exit 1; done", g_tmp), 0,
                 "streamed shards differ");
}

Test(kimi_linear, resume_after_a_kill_is_byte_identical)
{
    copy_model();
    cr_assert_eq(quantize("ref", NULL, "--qformat fp8"), 0);
    int rc = quantize("out", "LWQ_SYS_CRASH_STEP=6 LWQ_SYS_CRASH_MODE=kill", "--qformat fp8");
    cr_assert_eq(rc, 128 + SIGKILL, "exit %d, expected a SIGKILL at step 6", rc);
    cr_assert_eq(quantize("out", NULL, "--qformat fp8"), 0, "resume failed");
    cr_assert_eq(lwqt_sh("diff -r %s/ref %s/out >/dev/null 2>&1", g_tmp, g_tmp), 0, "resumed output differs");
}

/* the MLA layer's FP8 KV cache is not emulated by lwq eval: --kv-cache none */
Test(kimi_linear, verify_and_eval)
{
    copy_model();
    cr_assert_eq(quantize("q", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(lwqt_sh("'%s' verify %s/q >/dev/null 2>&1", lwqt_bin(), g_tmp), 0, "verify failed");
    cr_assert_eq(lwqt_sh("'%s' eval %s/m %s/q --data '%s/calib.jsonl' --data-size 2 --data-seq 16 --threads 2 "
                         "--quiet --kv-cache none --json %s/ev.json >/dev/null 2>&1 && test -s %s/ev.json",
                         lwqt_bin(), g_tmp, g_tmp, data_root(), g_tmp, g_tmp),
                 0, "eval failed");
}

/* the checkpoint's names (block_sparse_moe, experts.E.w1, self_attn.f_a_proj) are read as
 * transformers' (mlp, gate_proj, forget_gate.f_a_proj): every tensor matches the plan */
Test(kimi_linear, inspect_matches_every_tensor_under_transformers_names)
{
    copy_model();
    cr_assert_eq(lwqt_sh("grep -q 'block_sparse_moe.experts.0.w1' %s/m/model.safetensors", g_tmp), 0,
                 "the source is not in Kimi's own names");
    cr_assert_eq(lwqt_sh("'%s' inspect %s/m 2>&1 | grep -q 'every tensor matches the kimi_linear plan'", lwqt_bin(),
                         g_tmp),
                 0, "inspect does not match every tensor");
    cr_assert_eq(quantize("q", NULL, "--qformat fp8"), 0);
    cr_assert_eq(lwqt_sh("grep -q '\"model.layers.1.mlp.gate\"' %s/q/hf_quant_config.json && "
                         "grep -q 'model.layers.1.mlp.experts.0.gate_proj.weight' %s/q/model.safetensors.index.json",
                         g_tmp, g_tmp),
                 0, "the router is not excluded, or the experts are not named as transformers names them");
}

Test(kimi_linear, rope_on_the_mla_layers_is_refused_by_name)
{
    refused("s/\"model_type\": \"kimi_linear\",/\"model_type\": \"kimi_linear\", \"mla_use_nope\": false,/",
            "\"mla_use_nope\": false", "model_type 'kimi_linear': \"mla_use_nope\" = false");
}

Test(kimi_linear, unknown_layer_type_is_refused_by_name)
{
    refused("0,/\"full_attention\"/s//\"sliding_attention\"/", "\"sliding_attention\"",
            "model_type 'kimi_linear': \"layer_types\"[1] = \"sliding_attention\" is not a layer type");
}

/* a head_dim that disagrees with the tensors: refused naming the layer, the tensor and both shapes */
Test(kimi_linear, kda_shape_that_disagrees_with_the_config_is_refused_by_name)
{
    copy_model();
    cr_assert_eq(lwqt_sh("cd %s/m && sed -i 's/\"linear_head_dim\": 16/\"linear_head_dim\": 8/' config.json && "
                         "grep -qF '\"linear_head_dim\": 8' config.json && mkdir -p %s/out",
                         g_tmp, g_tmp),
                 0);
    int rc = quantize("out", NULL, "--qformat nvfp4");
    cr_assert_eq(rc, 2, "exit %d", rc);
    said_and_wrote_nothing("layer 0: bad shape model.layers.0.self_attn.q_proj.weight: expected [16, 32], found [32, 32]");
}
