/* A W8A8 FP8 lm_head (recipe "lm_head": "fp8", or '*lm_head*' FP8 weight and input quantizers): written with an input_scale from the calibration amax of the final norm's output, the same bytes on every path (whole-model, expert streaming, MPI ranks) and through a resume; refusals by name (issue 33). */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(lm_head_w8a8, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 300);

#define RECIPE "{\"lm_head\":\"fp8\",\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"}]}"

static void make_model(const char *extra)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s mkmodel %s --arch qwen3_moe --layers 2 --experts 4 --vocab 512 --quiet %s", lwqt_bin(),
             lwqt_path("m"), extra);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* lwq quantize m -o OUT with recipe file `recipe` and `extra` options; the exit status */
static int quantize(const char *out, const char *recipe, const char *env, const char *extra)
{
    return lwqt_sh("%s %s quantize %s -o %s --recipe %s --calib-size 6 --calib-seq 24 --batch-size 4 --quiet %s "
                   "2>>%s",
                   env ? env : "", lwqt_bin(), lwqt_path("m"), lwqt_path(out), lwqt_path(recipe), extra ? extra : "",
                   lwqt_path("stderr.txt"));
}

static float scalar_of(const lwq_ckpt *c, const char *name)
{
    const lwq_ckpt_tensor *t = lwq_ckpt_find(c, name);
    cr_assert(t && t->dtype == LWQ_F32 && t->nbytes == 4, "%s is not an F32 scalar", name);
    float v;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_read_tensor(c, t, &v, &e), 0, "%s", e.msg);
    return v;
}

static int same_dirs(const char *a, const char *b)
{
    return lwqt_sh("diff -r %s %s >/dev/null 2>&1", lwqt_path(a), lwqt_path(b)) == 0;
}

/* lm_head.weight E4M3 with weight_scale, input_scale an F32 scalar > 0, no weight_scale_2; the config
 * lists lm_head as FP8 (W8A8: its group has input activations); verify accepts the output */
Test(lm_head_w8a8, is_written_with_weight_scale_and_input_scale_and_verifies)
{
    make_model("");
    lwqt_write_str("r.json", RECIPE);
    cr_assert_eq(quantize("o", "r.json", NULL, NULL), 0);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("o"), &c, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *w = lwq_ckpt_find(&c, "lm_head.weight");
    cr_assert(w && w->dtype == LWQ_F8_E4M3 && w->ndim == 2, "lm_head.weight is not FP8");
    cr_assert_gt(scalar_of(&c, "lm_head.weight_scale"), 0);
    float is = scalar_of(&c, "lm_head.input_scale");
    cr_assert(is > 0 && isfinite(is), "input_scale %g", is);
    cr_assert_null(lwq_ckpt_find(&c, "lm_head.weight_scale_2"));
    lwq_ckpt_free(&c);
    char *hq = lwqt_slurp(lwqt_path("o/hf_quant_config.json"));
    cr_assert(strstr(hq, "\"MIXED_PRECISION\"") && strstr(hq, "\"lm_head\":\t{\n\t\t\t\t\"quant_algo\":\t\"FP8\""), "%s",
              hq);
    free(hq);
    const char *v[] = {"verify", lwqt_path("o"), NULL};
    cr_assert_eq(lwqt_run(v), 0);
}

/* Model Optimizer's form of the same recipe ('*lm_head*' weight and input quantizers FP8 after the
 * decoder linears' FP8) reads as the JSON "lm_head": "fp8": the same bytes */
Test(lm_head_w8a8, a_yaml_recipe_enabling_both_lm_head_quantizers_writes_the_json_recipes_bytes)
{
    make_model("");
    lwqt_write_str("r.json", "{\"lm_head\":\"fp8\",\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"}]}");
    lwqt_write_str("r.yaml", "metadata: {recipe_type: ptq}\nquantize:\n  algorithm: max\n  quant_cfg:\n"
                             "    - {quantizer_name: '*', enable: false}\n"
                             "    - {quantizer_name: '*weight_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*input_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*embed_tokens*', enable: false}\n"
                             "    - {quantizer_name: '*lm_head*', enable: false}\n"
                             "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*lm_head*input_quantizer', cfg: {num_bits: e4m3}}\n");
    cr_assert_eq(quantize("a", "r.json", NULL, NULL), 0);
    cr_assert_eq(quantize("b", "r.yaml", NULL, NULL), 0);
    static const char *const names[] = {"lm_head.weight", "lm_head.weight_scale", "lm_head.input_scale"};
    lwq_ckpt a, b;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("a"), &a, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_ckpt_open(lwqt_path("b"), &b, &e), 0, "%s", e.msg);
    for (int i = 0; i < 3; i++) {
        const lwq_ckpt_tensor *x = lwq_ckpt_find(&a, names[i]), *y = lwq_ckpt_find(&b, names[i]);
        cr_assert(x && y && x->dtype == y->dtype && x->nbytes == y->nbytes, "%s", names[i]);
        char *bx = malloc(x->nbytes), *by = malloc(y->nbytes);
        cr_assert_eq(lwq_ckpt_read_tensor(&a, x, bx, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_ckpt_read_tensor(&b, y, by, &e), 0, "%s", e.msg);
        cr_assert_eq(memcmp(bx, by, x->nbytes), 0, "%s: the YAML recipe wrote other bytes", names[i]);
        free(bx);
        free(by);
    }
    lwq_ckpt_free(&a);
    lwq_ckpt_free(&b);
}

/* --whole-model (the reference path, every batch through all layers, then the final norm) writes the
 * layerwise run's bytes: the input amax does not depend on the path */
Test(lm_head_w8a8, the_whole_model_path_writes_the_layerwise_bytes)
{
    make_model("");
    lwqt_write_str("r.json", RECIPE);
    cr_assert_eq(quantize("a", "r.json", NULL, NULL), 0);
    cr_assert_eq(quantize("b", "r.json", NULL, "--whole-model"), 0);
    cr_assert(same_dirs("a", "b"), "--whole-model wrote other bytes");
}

/* Expert streaming (the MoE layers as the dense part and groups of experts) writes the unstreamed bytes */
Test(lm_head_w8a8, expert_streaming_writes_the_unstreamed_bytes)
{
    make_model("");
    lwqt_write_str("r.json", RECIPE);
    cr_assert_eq(quantize("a", "r.json", NULL, NULL), 0);
    cr_assert_eq(quantize("b", "r.json", NULL, "--expert-group 1"), 0);
    cr_assert(same_dirs("a", "b"), "--expert-group 1 wrote other bytes");
}

/* Over 2 MPI ranks (each rank's rows of the final hidden state, the amax met by MAX) the bytes of one process */
Test(lm_head_w8a8, two_ranks_write_the_bytes_of_one_process)
{
    const char *mpiexec = getenv("LWQ_MPIEXEC");
    if (!mpiexec || !*mpiexec)
        cr_skip_test("this lwq was built without MPI: no launcher to test with");
    if (access(mpiexec, X_OK) != 0)
        cr_skip_test("the MPI launcher this lwq was built with, %s, is not here", mpiexec);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("OMPI_MCA_hwloc_base_binding_policy", "none", 1);
    setenv("OMPI_MCA_plm_rsh_agent", "", 1);
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
    make_model("");
    lwqt_write_str("r.json", RECIPE);
    cr_assert_eq(quantize("a", "r.json", NULL, "--threads 1"), 0);
    char launch[600];
    snprintf(launch, sizeof launch, "'%s' -n 2", mpiexec);
    cr_assert_eq(quantize("b", "r.json", launch, "--threads 1"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert(same_dirs("a", "b"), "2 ranks wrote other bytes than one process");
}

/* The amax is committed with the last layer (the manifest): a run killed at any durable write step,
 * after the last layer's commit too, resumes to the uninterrupted run's bytes */
Test(lm_head_w8a8, a_crash_at_every_write_step_resumes_byte_identical)
{
    make_model("");
    lwqt_write_str("r.json", RECIPE);
    cr_assert_eq(quantize("ref", "r.json", NULL, NULL), 0);
    int steps = 0, completed = 0;
    for (int k = 0; k < 400 && !completed; k++) {
        lwqt_sh("rm -rf %s %s.layerwise_resume", lwqt_path("o"), lwqt_path("o"));
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", k);
        int rc = quantize("o", "r.json", env, NULL);
        if (rc == 0) {
            completed = 1;
        } else {
            cr_assert_eq(rc, 128 + SIGKILL, "step %d: exit %d, expected SIGKILL", k, rc);
            steps++;
            cr_assert_eq(quantize("o", "r.json", NULL, NULL), 0, "resume after a crash at step %d failed", k);
        }
        cr_assert(same_dirs("ref", "o"), "output after a crash at step %d differs from the uninterrupted run", k);
    }
    cr_assert(completed && steps > 10, "only %d crash points exercised", steps);
}

/* A checkpoint whose lm_head is the tied embedding: refused before anything is written, naming lm_head */
Test(lm_head_w8a8, a_tied_lm_head_is_refused_before_anything_is_written)
{
    make_model("--tie");
    lwqt_write_str("r.json", RECIPE);
    cr_assert_eq(quantize("o", "r.json", NULL, NULL), 2);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "lm_head: the recipe quantizes lm_head (fp8) but the checkpoint has no lm_head.weight "
                          "(tie_word_embeddings)"), "%s", err);
    free(err);
    cr_assert_neq(access(lwqt_path("o/model-layer-00000.safetensors"), F_OK), 0, "a shard was written");
}

/* Sequential calibration (gptq) feeds the last layers the quantized model: refused by name */
Test(lm_head_w8a8, with_gptq_is_refused_by_name)
{
    make_model("");
    lwqt_write_str("r.json", "{\"lm_head\":\"fp8\",\"algorithm\":{\"method\":\"gptq\"},\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"}]}");
    cr_assert_eq(quantize("o", "r.json", NULL, NULL), 2);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "lm_head: the recipe quantizes lm_head as W8A8 FP8 and the run calibrates sequentially"), "%s",
              err);
    free(err);
}

/* A W8A8 lm_head with a fixed input amax is not what Model Optimizer calibrates: refused, naming the file */
Test(lm_head_w8a8, a_fixed_input_amax_on_lm_head_is_refused)
{
    make_model("");
    lwqt_write_str("r.yaml", "metadata: {recipe_type: ptq}\nquantize:\n  algorithm: max\n  quant_cfg:\n"
                             "    - {quantizer_name: '*', enable: false}\n"
                             "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*mlp*input_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*lm_head*input_quantizer', cfg: {num_bits: e4m3, constant_amax: 448.0}}\n");
    cr_assert_eq(quantize("o", "r.yaml", NULL, NULL), 2);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "r.yaml: the recipe quantizes lm_head as W8A8 FP8 under max with a fixed input amax"), "%s",
              err);
    free(err);
}
