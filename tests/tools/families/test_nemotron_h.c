/* nemotron_h (issue 35) end to end on the transformers-written tiny checkpoints of tests/data/peers: resume, batch and thread invariance, hybrid_override_pattern, verify / eval, and the refusals by name (before any weight is read, nothing written). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/shell.h"

static char g_tmp[256];

static void setup(void) { lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-nemotron"); }
static void teardown(void) { lwqt_rmtree(g_tmp); }

TestSuite(nemotron_h, .init = setup, .fini = teardown, .timeout = 300);

static const char *data_root(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/tools/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*stests/data/peers", (int)(cut - me), me);
    return path;
}

/* g_tmp/m: a copy of src/<src>. */
static void copy_model(const char *src)
{
    cr_assert_eq(lwqt_sh("cp -r '%s/src/%s' %s/m", data_root(), src, g_tmp), 0);
}

static int quantize(const char *out, const char *env, const char *extra)
{
    return lwqt_sh("%s '%s' quantize %s/m -o %s/%s --calib '%s/calib.jsonl' --calib-size 8 --calib-seq 32 "
                   "--quiet %s 2>>%s/stderr.txt",
                   env ? env : "", lwqt_bin(), g_tmp, g_tmp, out, data_root(), extra, g_tmp);
}

static int same_shards(const char *a, const char *b)
{
    return lwqt_sh("cd %s && ls %s/*.safetensors >/dev/null && for f in %s/*.safetensors; do cmp -s $f %s/${f#%s/} "
                   "|| exit 1; done",
                   g_tmp, a, a, b, a);
}

Test(nemotron_h, resume_after_a_kill_is_byte_identical)
{
    copy_model("nemotron_h-f32");
    cr_assert_eq(quantize("ref", NULL, "--qformat fp8 --batch-size 4"), 0);
    int rc = quantize("out", "LWQ_SYS_CRASH_STEP=6 LWQ_SYS_CRASH_MODE=kill", "--qformat fp8 --batch-size 4");
    cr_assert_eq(rc, 128 + SIGKILL, "exit %d, expected a SIGKILL at step 6", rc);
    cr_assert_eq(quantize("out", NULL, "--qformat fp8 --batch-size 4"), 0, "resume failed");
    cr_assert_eq(lwqt_sh("diff -r %s/ref %s/out >/dev/null 2>&1", g_tmp, g_tmp), 0, "resumed output differs");
}

/* the Mamba2 state is per sequence and per head: one sequence a batch on one thread gives the
 * bytes of four a batch on two (the BF16 source, where every rounding shows) */
Test(nemotron_h, batch_size_and_threads_do_not_change_the_bytes)
{
    copy_model("nemotron_h_latent-bf16");
    cr_assert_eq(quantize("a", NULL, "--qformat nvfp4 --batch-size 4 --threads 2"), 0);
    cr_assert_eq(quantize("b", NULL, "--qformat nvfp4 --batch-size 1 --threads 1"), 0);
    cr_assert_eq(same_shards("a", "b"), 0, "batch size 1 on one thread gives other bytes than 4 on two");
}

/* the legacy spelling of the layer list: the same model, the same tensors */
Test(nemotron_h, hybrid_override_pattern_reads_as_layers_block_type)
{
    copy_model("nemotron_h-f32");
    cr_assert_eq(quantize("a", NULL, "--qformat nvfp4 --batch-size 4"), 0);
    cr_assert_eq(lwqt_sh("cd %s/m && sed -z -i 's/\"layers_block_type\": \\[[^]]*\\]/\"hybrid_override_pattern\": "
                         "\"M-*EM\"/' config.json && grep -q '\"hybrid_override_pattern\": \"M-\\*EM\"' config.json && "
                         "! grep -q '\"layers_block_type\"' config.json",
                         g_tmp),
                 0, "could not edit config.json");
    cr_assert_eq(quantize("b", NULL, "--qformat nvfp4 --batch-size 4"), 0);
    /* every tensor the same; the shards' fingerprints and config.json differ (its key) */
    cr_assert_eq(lwqt_sh("'%s' diff %s/a %s/b > %s/diff.txt 2>&1; grep -q '^different: 2 tensor/metadata differences "
                         "(134 tensors identical), 2 config differences$' %s/diff.txt && test $(grep -c "
                         "'lwq_fingerprint' %s/diff.txt) = 2",
                         lwqt_bin(), g_tmp, g_tmp, g_tmp, g_tmp, g_tmp),
                 0, "hybrid_override_pattern gives other tensors (see %s/diff.txt)", g_tmp);
}

Test(nemotron_h, verify_and_eval)
{
    copy_model("nemotron_h_latent-f32");
    cr_assert_eq(quantize("q", NULL, "--qformat mamba_moe_nvfp4_conservative"), 0);
    cr_assert_eq(lwqt_sh("'%s' verify %s/q >/dev/null 2>&1", lwqt_bin(), g_tmp), 0, "verify failed");
    cr_assert_eq(lwqt_sh("'%s' eval %s/m %s/q --data '%s/calib.jsonl' --data-size 2 --data-seq 16 --threads 2 "
                         "--quiet --json %s/ev.json >/dev/null 2>&1 && test -s %s/ev.json",
                         lwqt_bin(), g_tmp, g_tmp, data_root(), g_tmp, g_tmp),
                 0, "eval failed");
}

/* config.json edited with the sed expression `edit` (checked with grep `check`), the weights made
 * unreadable unless keep_weights (a refusal that read them would fail differently): quantize exits
 * 2, stderr holds `want` (a fixed string), the output directory stays empty. */
static void refused(const char *edit, const char *check, const char *want, int keep_weights)
{
    copy_model("nemotron_h-f32");
    cr_assert_eq(lwqt_sh("cd %s/m && sed -i '%s' config.json && grep -qF '%s' config.json && "
                         "{ %s truncate -s 100 model.safetensors; } && mkdir -p %s/out",
                         g_tmp, edit, check, keep_weights ? "true ||" : "", g_tmp),
                 0, "could not edit config.json");
    int rc = quantize("out", NULL, "--qformat nvfp4");
    cr_assert_eq(rc, 2, "exit %d", rc);
    char wp[300];
    snprintf(wp, sizeof wp, "%s/want.txt", g_tmp);
    FILE *f = fopen(wp, "w");
    cr_assert(f && fputs(want, f) >= 0 && fclose(f) == 0, "%s", wp);
    cr_assert_eq(lwqt_sh("grep -qF -f %s %s/stderr.txt", wp, g_tmp), 0, "the message does not say %s", want);
    cr_assert_eq(lwqt_sh("test -z \"$(ls -A %s/out)\"", g_tmp), 0, "something was written");
}

Test(nemotron_h, unknown_block_type_is_refused_by_key_value_and_layer)
{
    refused("s/\"mlp\",/\"sliding\",/", "\"sliding\",",
            "model_type 'nemotron_h': \"layers_block_type\"[1] = \"sliding\" (layer 1) is not a block type", 0);
}

Test(nemotron_h, groups_not_dividing_the_heads_are_refused_by_key_value_and_layer)
{
    refused("s/\"n_groups\": 2/\"n_groups\": 3/", "\"n_groups\": 3",
            "\"n_groups\" = 3 does not divide \"mamba_num_heads\" = 4 (layer 0 is Mamba2", 0);
}

Test(nemotron_h, a_layer_count_disagreeing_with_the_list_is_refused)
{
    refused("s/\"layer_norm_epsilon\"/\"num_hidden_layers\": 4, \"layer_norm_epsilon\"/", "\"num_hidden_layers\": 4",
            "\"num_hidden_layers\" = 4, but \"layers_block_type\" lists 5 layers", 0);
}

Test(nemotron_h, in_proj_biases_are_refused_by_name)
{
    refused("s/\"use_bias\": false/\"use_bias\": true/", "\"use_bias\": true",
            "\"use_bias\" = true is not supported (the Mamba2 in_proj / out_proj biases)", 0);
}

/* a state size the tensors do not have: the plan's shapes disagree with the file's headers */
Test(nemotron_h, a_tensor_shape_disagreeing_with_the_config_is_refused_by_name)
{
    refused("s/\"ssm_state_size\": 8/\"ssm_state_size\": 16/", "\"ssm_state_size\": 16",
            "layer 0: bad shape backbone.layers.0.mixer.in_proj.weight: expected [132, 32], found [100, 32]", 1);
}
