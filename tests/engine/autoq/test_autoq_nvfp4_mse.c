/* NVFP4 with its own weight algorithm (nvfp4_w4a4_weight_mse_fp8_sweep) as a candidate of lwq quantize --auto-quantize-*: its cost, its own weights and scores, its export, its recipes, its scores file, resume, the published recipe and hf_ptq's spelling. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(autoq_nvfp4_mse, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"
#define MSE "nvfp4_w4a4_weight_mse_fp8_sweep"

static void make_llama(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch llama --hidden 128 --layers 3 --heads 4 --kv-heads 2 --vocab 512 "
                         "--quiet", lwqt_bin(), lwqt_path("m")), 0);
}

/* lwq [env] quantize m -o <out> QARGS <extra>; stderr to stderr.txt */
static int aq(const char *env, const char *out, const char *extra)
{
    return lwqt_sh("%s %s quantize %s -o %s " QARGS " %s 2>%s", env ? env : "", lwqt_bin(), lwqt_path("m"),
                   lwqt_path(out), extra, lwqt_path("stderr.txt"));
}

static int same_layers(const char *a, const char *b)
{
    return lwqt_sh("cd %s && ls model-layer-*.safetensors >/dev/null && for f in model-layer-*.safetensors; do "
                   "cmp -s $f %s/$f || exit 1; done", lwqt_path(a), lwqt_path(b)) == 0;
}

/* The name of the first tensor of checkpoint a that b lacks or holds with other bytes ("" when they
 * hold the same tensors; the shards' metadata, which names the run's fingerprint, aside). */
static void first_difference(const char *a, const char *b, char *out, size_t cap)
{
    lwq_ckpt x, y;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path(a), &x, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_ckpt_open(lwqt_path(b), &y, &e), 0, "%s", e.msg);
    out[0] = 0;
    if (x.ntensors != y.ntensors)
        snprintf(out, cap, "%d tensors against %d", x.ntensors, y.ntensors);
    for (int i = 0; !out[0] && i < x.ntensors; i++) {
        const lwq_ckpt_tensor *t = &x.tensors[i], *u = lwq_ckpt_find(&y, t->name);
        if (!u || u->nbytes != t->nbytes || u->dtype != t->dtype) {
            snprintf(out, cap, "%s", t->name);
            break;
        }
        void *p = malloc(t->nbytes + 1), *q = malloc(u->nbytes + 1);
        cr_assert(p && q);
        cr_assert_eq(lwq_ckpt_read_tensor(&x, t, p, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_ckpt_read_tensor(&y, u, q, &e), 0, "%s", e.msg);
        if (memcmp(p, q, t->nbytes))
            snprintf(out, cap, "%s", t->name);
        free(p);
        free(q);
    }
    lwq_ckpt_free(&x);
    lwq_ckpt_free(&y);
}

static cJSON *json_of(const char *rel)
{
    cJSON *j = lwqt_json(lwqt_path(rel));
    cr_assert_not_null(j, "%s", rel);
    return j;
}

static double cand(const cJSON *g, const char *f, const char *k)
{
    const cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "candidates"), f), k);
    cr_assert(cJSON_IsNumber(x), "no %s.%s", f, k);
    return x->valuedouble;
}

/* Its bytes are NVFP4's (static block scales are written as the dynamic ones are) */
Test(autoq_nvfp4_mse, its_cost_is_nvfp4s)
{
    make_llama();
    cr_assert_eq(aq(NULL, "o", "--auto-quantize-bits 16 --auto-quantize-formats nvfp4," MSE), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *j = json_of("o/auto_quantize.json");
    const cJSON *g;
    int n = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(j, "groups"))
    {
        cr_assert_eq(cand(g, MSE, "bytes"), cand(g, "nvfp4", "bytes"));
        n++;
    }
    cr_assert_eq(n, 12, "3 layers of q/k/v, o, gate/up, down");
    cJSON_Delete(j);
}

/* Its score is the replay of its own weights (the mse search's block scales), not NVFP4's: it
 * differs from NVFP4's in every group */
Test(autoq_nvfp4_mse, its_score_is_of_its_own_weights)
{
    make_llama();
    cr_assert_eq(aq(NULL, "o", "--auto-quantize-bits 16 --auto-quantize-formats nvfp4," MSE), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *j = json_of("o/auto_quantize.json");
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(j, "groups"))
    {
        double a = cand(g, MSE, "score"), b = cand(g, "nvfp4", "score");
        cr_assert(a > 0 && a != b, "%s %s: mse %g, nvfp4 %g", cJSON_GetObjectItem(g, "first_module")->valuestring,
                  cJSON_GetObjectItem(g, "group")->valuestring, a, b);
    }
    cJSON_Delete(j);
}

/* Every group in it is written as lwq quantize --qformat nvfp4 --algo mse --fp8-scale-sweep writes
 * it, whatever the base recipe's algorithm (max here) */
Test(autoq_nvfp4_mse, its_groups_are_written_as_the_mse_sweep_writes_them)
{
    make_llama();
    cr_assert_eq(aq(NULL, "o", "--kv-cache none --auto-quantize-bits 16 --auto-quantize-formats " MSE), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(aq(NULL, "p", "--kv-cache none --qformat nvfp4 --algo mse --fp8-scale-sweep"), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    char d[300];
    first_difference("o", "p", d, sizeof d);
    cr_assert_str_eq(d, "", "the search writes %s other than the mse sweep", d);
    cr_assert_eq(aq(NULL, "q", "--kv-cache none --qformat nvfp4"), 0);
    first_difference("o", "q", d, sizeof d);
    cr_assert_str_neq(d, "", "the plain NVFP4 preset writes the same tensors: the test tells nothing");
}

/* A mix of it and FP8: the written YAML (one algorithm, mse with the FP8 scale sweep; the FP8 modules
 * are then max-calibrated, as Model Optimizer skips them) reruns to the same layers */
Test(autoq_nvfp4_mse, its_yaml_recipe_reruns_to_the_same_layers)
{
    make_llama();
    cr_assert_eq(aq(NULL, "o", "--qformat fp8 --kv-cache none --auto-quantize-bits 6 --auto-quantize-formats "
                    MSE ",fp8"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    char *y = lwqt_slurp(lwqt_path("o/auto_quantize_recipe.yaml"));
    cr_assert(strstr(y, "    method: mse\n    fp8_scale_sweep: true\n") && strstr(y, "type: static") &&
              strstr(y, "{num_bits: e4m3, axis: null}"), "%s", y);
    free(y);
    char extra[600];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("o/auto_quantize_recipe.yaml"));
    cr_assert_eq(aq(NULL, "y", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert(same_layers("o", "y"), "the YAML recipe writes other layers");
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("o/auto_quantize_recipe.json"));
    cr_assert_eq(aq(NULL, "j", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert(same_layers("o", "j"), "the JSON recipe writes other layers");
}

/* scores.json names the candidate; a search without it (or with it where the scores lack it) refuses
 * them: the fingerprint holds the format set */
Test(autoq_nvfp4_mse, scores_of_another_format_set_are_refused)
{
    make_llama();
    cr_assert_eq(aq(NULL, "o", "--qformat fp8 --auto-quantize-bits 7 --auto-quantize-formats " MSE ",fp8"), 0);
    cr_assert_eq(aq(NULL, "n", "--qformat fp8 --auto-quantize-bits 7 --auto-quantize-formats nvfp4,fp8"), 0);
    const char *mine = "o.layerwise_resume/auto_quantize/scores.json", *other = "n.layerwise_resume/auto_quantize/scores.json";
    cr_assert_eq(lwqt_sh("grep -q '\"" MSE "\"' %s", lwqt_path(mine)), 0);
    char extra[700];
    snprintf(extra, sizeof extra, "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats " MSE ",fp8 "
             "--auto-quantize-scores %s", lwqt_path(mine));
    cr_assert_eq(aq(NULL, "p", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    snprintf(extra, sizeof extra, "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats nvfp4,fp8 "
             "--auto-quantize-scores %s", lwqt_path(mine));
    cr_assert_eq(aq(NULL, "x", extra), 2);
    snprintf(extra, sizeof extra, "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats " MSE ",fp8 "
             "--auto-quantize-scores %s", lwqt_path(other));
    cr_assert_eq(aq(NULL, "z", extra), 2);
}

/* kills in pass 1 and pass 2, then the same command: the same bytes as one run */
Test(autoq_nvfp4_mse, kills_resume_byte_identical)
{
    make_llama();
    const char *opts = "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats " MSE ",fp8,none";
    cr_assert_eq(aq(NULL, "ref", opts), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    static const int steps[] = {3, 15, 40, 90, 150};
    int pass2 = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        lwqt_sh("rm -rf %s %s.layerwise_resume", lwqt_path("o"), lwqt_path("o"));
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", steps[i]);
        int rc = aq(env, "o", opts);
        if (rc == 0)
            continue;
        cr_assert_eq(rc, 128 + SIGKILL, "step %d: exit %d: %s", steps[i], rc, lwqt_slurp(lwqt_path("stderr.txt")));
        pass2 += lwqt_sh("test -e %s", lwqt_path("o.layerwise_resume/manifest.json")) == 0;
        cr_assert_eq(aq(NULL, "o", opts), 0, "resume after step %d: %s", steps[i], lwqt_slurp(lwqt_path("stderr.txt")));
        cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("ref"), lwqt_path("o")), 0,
                     "a kill at step %d, then the same command: the output differs", steps[i]);
    }
    cr_assert(pass2 >= 1 && pass2 <= 4, "kills in pass 2: %d of 5", pass2);
}

/* Model Optimizer's general/auto_quantize/nvfp4_mse_fp8_at_6p0bits runs as its options */
Test(autoq_nvfp4_mse, the_published_recipe_runs_as_its_options)
{
    make_llama();
    lwqt_write_str("r.yaml",
                   "imports:\n  base_disabled_layers: configs/auto_quantize/units/base_disabled_layers\n"
                   "  base_cost_excluded_layers: configs/auto_quantize/units/base_cost_excluded_layers\n"
                   "  nvfp4_mse: configs/ptq/presets/model/nvfp4_w4a4_weight_mse_fp8_sweep\n"
                   "  fp8: configs/ptq/presets/model/fp8\n"
                   "metadata:\n  recipe_type: auto_quantize\n"
                   "auto_quantize:\n  constraints:\n    effective_bits: 6.0\n"
                   "  candidate_formats:\n    - $import: nvfp4_mse\n    - $import: fp8\n"
                   "  auto_quantize_method: gradient\n  score_size: 2\n"
                   "  disabled_layers:\n    - $import: base_disabled_layers\n"
                   "  cost_excluded_layers:\n    - $import: base_cost_excluded_layers\n");
    char extra[600];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("r.yaml"));
    cr_assert_eq(aq(NULL, "a", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(aq(NULL, "b", "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats " MSE ",fp8,none "
                    "--auto-quantize-score-size 2"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("a"), lwqt_path("b")), 0);
    char *r = lwqt_slurp(lwqt_path("a/auto_quantize.json"));
    cr_assert(strstr(r, "\"" MSE "\"") && strstr(r, "\"base_recipe\":\t\"fp8\""), "%s", r);
    free(r);
}

/* hf_ptq's --qformat nvfp4_w4a4_weight_mse_fp8_sweep,fp8 --auto_quantize_bits is the same search: the
 * candidate with its own algorithm, FP8 max-calibrated (not the base recipe's algorithm for all) */
Test(autoq_nvfp4_mse, hf_ptq_spelling_gives_the_same_bytes)
{
    make_llama();
    cr_assert_eq(aq(NULL, "a", "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats " MSE ",fp8,none "
                    "--auto-quantize-score-size 1"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("%s quantize --pyt_ckpt_path %s --export_path %s --qformat " MSE ",fp8 "
                         "--auto_quantize_bits 6 --auto_quantize_score_size 1 --calib_size 6 --calib_seq 24 "
                         "--batch_size 4 --quiet 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path("b"),
                         lwqt_path("stderr.txt")), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("a"), lwqt_path("b")), 0);
}
