/* Model Optimizer recipe YAML end to end: the equivalents of lwq's presets write byte-identical outputs; the layerwise article's hf_ptq command line runs unchanged. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "layout/safetensors.h"
#include "tests/helpers/run.h"

TestSuite(recipe_yaml_e2e, .init = lwqt_setup, .fini = lwqt_teardown);

/* <repo>/tests/data/modelopt_recipes */
static const char *root(void) { return lwqt_source_path("tests/data/modelopt_recipes"); }

static void make(const char *dir, const char *arch)
{
    if (!strcmp(arch, "qwen3_next")) {
        const char *mk[] = {"mkmodel", lwqt_path(dir), "--arch", "qwen3_next", "--hidden", "64", "--layers", "4",
                            "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--experts", "4", "--top-k", "2",
                            "--moe-intermediate", "32", "--shared-intermediate", "48", "--linear-value-heads", "4",
                            "--linear-value-dim", "8", "--vocab", "300", "--mtp", "--quiet", NULL};
        cr_assert_eq(lwqt_run(mk), 0, "mkmodel qwen3_next");
        return;
    }
    const char *mk[] = {"mkmodel", lwqt_path(dir), "--arch", arch, "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--experts", "4", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel %s", arch);
}

/* lwq quantize MODEL -o OUT <args...> with a small calibration set. */
static void quantize(const char *model, const char *out, const char *const *args)
{
    const char *v[40] = {"quantize", lwqt_path(model), "-o", lwqt_path(out), "--calib-size", "8", "--calib-seq", "32",
                         "--quiet"};
    int n = 9;
    for (int i = 0; args[i]; i++)
        v[n++] = args[i];
    v[n] = NULL;
    int rc = lwqt_run(v);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "quantize %s: %s", out, err);
    free(err);
}

/* Every file of a and b: the same names and the same bytes. */
static int same_dirs(const char *a, const char *b, char *why, size_t cap)
{
    DIR *d = opendir(lwqt_path(a));
    cr_assert_not_null(d);
    struct dirent *de;
    int files = 0, same = 1;
    while ((de = readdir(d)) != NULL && same) {
        if (de->d_name[0] == '.')
            continue;
        char pa[1024], pb[1024];
        snprintf(pa, sizeof pa, "%s", lwqt_path(a));
        snprintf(pb, sizeof pb, "%s", lwqt_path(b));
        strcat(pa, "/"), strcat(pa, de->d_name), strcat(pb, "/"), strcat(pb, de->d_name);
        struct stat sa, sb;
        if (stat(pb, &sb) != 0 || stat(pa, &sa) != 0 || sa.st_size != sb.st_size) {
            snprintf(why, cap, "%s: missing or another size", de->d_name);
            same = 0;
            break;
        }
        char *x = lwqt_slurp(pa), *y = lwqt_slurp(pb);
        if (memcmp(x, y, (size_t)sa.st_size)) {
            snprintf(why, cap, "%s: other bytes", de->d_name);
            same = 0;
        }
        free(x), free(y);
        files++;
    }
    closedir(d);
    if (same && files < 5) {
        snprintf(why, cap, "only %d files", files);
        same = 0;
    }
    return same;
}

static void equivalent(const char *arch, const char *yaml, const char *const *native)
{
    make("m", arch);
    const char *y[] = {"--recipe", yaml, "--recipe-root", root(), NULL};
    quantize("m", "native", native);
    quantize("m", "yaml", y);
    char why[256] = "";
    cr_assert(same_dirs("native", "yaml", why, sizeof why), "%s vs the preset: %s", yaml, why);
    cr_assert(same_dirs("yaml", "native", why, sizeof why), "%s vs the preset: %s", yaml, why);
}

Test(recipe_yaml_e2e, nvfp4_yaml_writes_the_nvfp4_preset)
{
    const char *n[] = {"--qformat", "nvfp4", NULL};
    equivalent("qwen3_moe", "lwq_equiv/nvfp4", n);
}

Test(recipe_yaml_e2e, fp8_yaml_writes_the_fp8_preset)
{
    const char *n[] = {"--qformat", "fp8", NULL};
    equivalent("mixtral", "lwq_equiv/fp8.yaml", n);
}

Test(recipe_yaml_e2e, experts_only_kv_fp8_yaml_writes_the_preset_with_a_calibrated_kv_cache)
{
    const char *n[] = {"--qformat", "nvfp4_experts_only", "--kv-cache", "fp8", NULL};
    equivalent("mixtral", "lwq_equiv/kv_fp8/nvfp4_experts_only", n);
}

Test(recipe_yaml_e2e, experts_only_kv_fp8_cast_yaml_writes_the_preset)
{
    const char *n[] = {"--qformat", "nvfp4_experts_only", "--kv-cache", "fp8_cast", NULL};
    equivalent("qwen3_moe", "lwq_equiv/kv_fp8_cast/nvfp4_experts_only", n);
}

Test(recipe_yaml_e2e, mlp_only_yaml_writes_the_preset)
{
    const char *n[] = {"--qformat", "nvfp4_mlp_only", NULL};
    equivalent("qwen3_moe", "lwq_equiv/nvfp4_mlp_only", n);
}

Test(recipe_yaml_e2e, qwen3next_production_yaml_writes_the_production_recipe)
{
    const char *n[] = {"--qformat", "qwen3next_production", NULL};
    equivalent("qwen3_next", "lwq_equiv/qwen3next_production", n);
}

Test(recipe_yaml_e2e, a_different_recipe_writes_different_bytes)
{
    make("m", "qwen3_moe");
    const char *n[] = {"--qformat", "fp8", NULL}, *y[] = {"--recipe", "lwq_equiv/nvfp4", "--recipe-root", root(), NULL};
    quantize("m", "native", n);
    quantize("m", "yaml", y);
    char why[256];
    cr_assert_not(same_dirs("native", "yaml", why, sizeof why), "the comparison must see a different recipe");
}

/* The command of "Quantizing a 4.9 TB Qwen3.8 Model on a Single GPU", paths swapped for test paths. */
Test(recipe_yaml_e2e, the_articles_hf_ptq_command_runs_unchanged)
{
    make("qwen", "qwen3_next");
    FILE *fp = fopen(lwqt_path("nemotron.jsonl"), "w");
    cr_assert_not_null(fp);
    for (int i = 0; i < 12; i++)
        fprintf(fp, "{\"text\": \"Sample %d: layerwise calibration keeps one decoder layer resident while the "
                    "activations of the whole calibration set wait at the boundary.\"}\n", i);
    fclose(fp);
    mkdir(lwqt_path("scratch"), 0755);
    setenv("LWQ_RECIPE_ROOT", root(), 1);
    const char *recipe = "models/Qwen/Qwen3.8-2.4T-A95B/ptq/"
                         "nvfp4_experts_mse-fp8_self_attn-fp8_linear_attn-kv_fp8_cast_layerwise";
    const char *hf[] = {"quantize",
                        "--pyt_ckpt_path", lwqt_path("qwen"),
                        "--recipe", recipe,
                        "--export_path", lwqt_path("out"),
                        "--qformat", "nvfp4", "--attn_implementation", "eager",
                        "--offload_folder", lwqt_path("scratch"), "--max_gpu_memory_gb", "120", "--max_cpu_memory_gb", "600",
                        "--dataset", lwqt_path("nemotron.jsonl"),
                        "--calib_size", "512", "--calib_seq", "512", "--batch_size", "8", NULL};
    int rc = lwqt_run(hf);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(err, "lwq: note: --qformat nvfp4 is ignored: --recipe decides what is quantized (as in hf_ptq)\n"),
              "%s", err);
    cr_assert(strstr(err, "lwq: note: --attn_implementation has no effect in lwq (lwq has its own attention)\n"));
    cr_assert(strstr(err, "lwq: note: --offload_folder has no effect in lwq (lwq streams weights from the checkpoint "
                          "itself)\n"));
    free(err);
    const char *native[] = {"quantize", lwqt_path("qwen"), "--recipe", recipe, "-o", lwqt_path("native"),
                            "--max-gpu-memory-gb", "120", "--max-cpu-memory-gb", "600",
                            "--calib", lwqt_path("nemotron.jsonl"), "--calib-size", "512", "--calib-seq", "512",
                            "--batch-size", "8", NULL};
    cr_assert_eq(lwqt_run(native), 0);
    char why[256] = "";
    cr_assert(same_dirs("out", "native", why, sizeof why), "hf_ptq spelling vs native: %s", why);
    cr_assert(same_dirs("native", "out", why, sizeof why), "hf_ptq spelling vs native: %s", why);
    struct stat st;
    cr_assert_eq(stat(lwqt_path("out.layerwise_resume"), &st), 0, "checkpoint_dir omitted: <export_path>.layerwise_resume");
}

Test(recipe_yaml_e2e, batch_size_zero_picks_and_prints_the_batch)
{
    make("m", "llama");
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--calib-size", "6", "--calib-seq", "32",
                       "--batch-size", "0", "--max-cpu-memory-gb", "64", NULL};
    cr_assert_eq(lwqt_run(q), 0);
    char *err = lwqt_err();
    cr_assert(strstr(err, "lwq: --batch-size 0: batch size 6 (the largest that fits: host "), "%s", err);
    cr_assert(strstr(err, " GB of 64.000 GB; every sample in one batch)\n"), "%s", err);
    free(err);
    char *rep = lwqt_slurp(lwqt_path("o/calibration_report.json"));
    cr_assert(strstr(rep, "\"batch_size\":\t6"), "%s", rep);
    free(rep);
}

Test(recipe_yaml_e2e, batch_size_zero_shrinks_the_batch_to_the_budget)
{
    make("m", "llama");
    const char *one[] = {"plan", lwqt_path("m"), "--calib-size", "64", "--calib-seq", "256", "--batch-size", "1", NULL};
    cr_assert_eq(lwqt_run(one), 0);
    const char *all[] = {"plan", lwqt_path("m"), "--calib-size", "64", "--calib-seq", "256", "--batch-size", "64", NULL};
    cr_assert_eq(lwqt_run(all), 0);
    char *o = lwqt_out();
    const char *fits = strstr(o, "fits: host ");
    cr_assert_not_null(fits, "%s", o);
    double host64 = atof(fits + strlen("fits: host "));
    free(o);
    char budget[32];
    snprintf(budget, sizeof budget, "%.6f", host64 * 0.999); /* just under what a batch of 64 needs */
    const char *q[] = {"plan", lwqt_path("m"), "--calib-size", "64", "--calib-seq", "256", "--batch-size", "0",
                       "--max-cpu-memory-gb", budget, NULL};
    cr_assert_eq(lwqt_run(q), 0);
    char *err = lwqt_err();
    const char *p = strstr(err, "lwq: --batch-size 0: batch size ");
    cr_assert_not_null(p, "%s", err);
    int b = atoi(p + strlen("lwq: --batch-size 0: batch size "));
    cr_assert(b >= 1 && b < 64, "picked %d under a budget a batch of 64 exceeds", b);
    free(err);
}

Test(recipe_yaml_e2e, print_recipe_shows_the_effective_lwq_recipe)
{
    const char *q[] = {"quantize", "--print-recipe", "--recipe", "lwq_equiv/kv_fp8/nvfp4_experts_only", "--recipe-root",
                       root(), NULL};
    cr_assert_eq(lwqt_run(q), 0);
    char *o = lwqt_out();
    cJSON *j = cJSON_Parse(o);
    cr_assert_not_null(j, "%s", o);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "name")->valuestring, "nvfp4_experts_only");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "kv_cache")->valuestring, "fp8");
    const cJSON *rules = cJSON_GetObjectItem(j, "rules");
    int weight = 0, kv = 0;
    for (const cJSON *u = rules->child; u; u = u->next) {
        const cJSON *q2 = cJSON_GetObjectItem(u, "quantizer");
        weight += q2 && !strcmp(q2->valuestring, "weight");
        kv += q2 && !strcmp(q2->valuestring, "kv");
    }
    cr_assert(weight > 0 && kv > 0);
    cJSON_Delete(j);
    free(o);
}

Test(recipe_yaml_e2e, constant_amax_writes_a_fixed_input_scale)
{
    make("m", "qwen3_moe");
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  nvfp4: configs/numerics/nvfp4\n"
                "metadata: {recipe_type: ptq}\nquantize:\n  algorithm: max\n  quant_cfg:\n    - $import: off\n"
                "    - {quantizer_name: '*.experts.*weight_quantizer', cfg: {$import: nvfp4}}\n"
                "    - {quantizer_name: '*.experts.*input_quantizer', cfg: {$import: nvfp4, constant_amax: 2688.0}}\n");
    fclose(fp);
    const char *y[] = {"--recipe", lwqt_path("r.yaml"), "--recipe-root", root(), NULL};
    quantize("m", "o", y);
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(lwqt_path("o/model-layer-00000.safetensors"), &f, &e), 0, "%s", e.msg);
    int seen = 0;
    for (int i = 0; i < f.n; i++) {
        const char *n = f.entries[i].name;
        if (!strstr(n, ".experts.") || !strstr(n, ".input_scale"))
            continue;
        float v;
        cr_assert_eq(lwq_st_read(&f, f.data_start + f.entries[i].begin, &v, sizeof v, &e), 0, "%s", e.msg);
        cr_assert_eq(v, 1.0f, "%s: 2688 / (6 * 448)", n);
        seen++;
    }
    cr_assert_eq(seen, 4 * 3, "every expert projection");
    lwq_st_free(&f);
}

Test(recipe_yaml_e2e, a_module_with_split_formats_is_refused_by_name)
{
    make("m", "llama");
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  nvfp4: configs/numerics/nvfp4\n"
                "  fp8: configs/numerics/fp8\nmetadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
                "    - $import: off\n"
                "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                "    - {quantizer_name: '*mlp*input_quantizer', cfg: {$import: fp8}}\n");
    fclose(fp);
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.yaml"),
                       "--recipe-root", root(), "--calib-size", "4", NULL};
    cr_assert_eq(lwqt_run(q), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "lwq: model.layers.0.mlp.gate_proj: the recipe makes its weight quantizer nvfp4 and its "
                          "input quantizer fp8; lwq writes W4A4 NVFP4, W8A8 FP8 and weight-only NVFP4 (W4A16) only"), "%s", err);
    free(err);
}

/* An entry that enables every quantizer also enables Model Optimizer's output quantizers, which
 * lwq does not write: the run is refused by module and rule, before anything is written */
Test(recipe_yaml_e2e, a_module_left_with_an_output_quantizer_is_refused_by_name)
{
    make("m", "llama");
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  fp8: configs/numerics/fp8\n"
                "metadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n    - $import: off\n"
                "    - {quantizer_name: '*mlp*', cfg: {$import: fp8}}\n");
    fclose(fp);
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.yaml"),
                       "--recipe-root", root(), "--calib-size", "4", NULL};
    cr_assert_eq(lwqt_run(q), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "lwq: model.layers.0.mlp.gate_proj: recipe \"r\" rule "), "%s", err);
    cr_assert(strstr(err, "('*mlp*') leaves its output quantizer enabled, which lwq does not write"), "%s", err);
    free(err);
    cr_assert_neq(access(lwqt_path("o/config.json"), F_OK), 0, "nothing is written");
}

/* ... and one that disables them again after is what Model Optimizer runs: accepted */
Test(recipe_yaml_e2e, output_quantizers_disabled_again_run)
{
    make("m", "llama");
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  fp8: configs/numerics/fp8\n"
                "metadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n    - $import: off\n"
                "    - {quantizer_name: '*mlp*', cfg: {$import: fp8}}\n"
                "    - {quantizer_name: '*output_quantizer', enable: false}\n");
    fclose(fp);
    const char *y[] = {"--recipe", lwqt_path("r.yaml"), "--recipe-root", root(), NULL};
    quantize("m", "o", y);
    cr_assert_eq(access(lwqt_path("o/config.json"), F_OK), 0);
}

/* A recipe that leaves the embedding's weight quantizer NVFP4 writes the table packed with its
 * scales (as Model Optimizer 0.47 exports its QuantEmbedding: tests/data/peers w4a16_nvfp4-embed),
 * and lwq verify accepts that output (it refused the packed table as a bad shape) */
Test(recipe_yaml_e2e, a_quantized_embedding_is_written_packed_and_verifies)
{
    make("m", "llama");
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  nvfp4: configs/numerics/nvfp4\n"
                "metadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n    - $import: off\n"
                "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                "    - {quantizer_name: '*embed_tokens*weight_quantizer', cfg: {$import: nvfp4}}\n");
    fclose(fp);
    const char *y[] = {"--recipe", lwqt_path("r.yaml"), "--recipe-root", root(), NULL};
    quantize("m", "o", y);
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(lwqt_path("o/model-tail.safetensors"), &f, &e), 0, "%s", e.msg);
    int w = lwq_st_find(&f, "model.embed_tokens.weight"), s = lwq_st_find(&f, "model.embed_tokens.weight_scale");
    cr_assert(w >= 0 && f.entries[w].dtype == LWQ_U8 && f.entries[w].shape[1] == 32, "the table is NVFP4-packed");
    cr_assert(s >= 0 && f.entries[s].dtype == LWQ_F8_E4M3 && lwq_st_find(&f, "model.embed_tokens.weight_scale_2") >= 0);
    lwq_st_free(&f);
    const char *v[] = {"verify", lwqt_path("o"), NULL};
    cr_assert_eq(lwqt_run(v), 0, "lwq verify: %s", lwqt_err());
}

/* A recipe quantizing the token embedding of a checkpoint that ties it to lm_head is refused by
 * name (Model Optimizer would quantize the one shared table) */
Test(recipe_yaml_e2e, a_quantized_tied_embedding_is_refused_by_name)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--vocab", "300", "--tie", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel llama --tie");
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  nvfp4: configs/numerics/nvfp4\n"
                "metadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n    - $import: off\n"
                "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                "    - {quantizer_name: '*embed_tokens*weight_quantizer', cfg: {$import: nvfp4}}\n");
    fclose(fp);
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.yaml"),
                       "--recipe-root", root(), "--calib-size", "4", NULL};
    cr_assert_eq(lwqt_run(q), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "lwq: model.embed_tokens: the recipe quantizes the token embedding, which this checkpoint "
                          "ties to lm_head"), "%s", err);
    free(err);
    cr_assert_neq(access(lwqt_path("o/config.json"), F_OK), 0, "nothing is written");
}

/* The command line confirms a recipe's checkpoint_dir with --resume-dir (without it the run is
 * refused: tests/tools/test_hostile_recipe.c). */
Test(recipe_yaml_e2e, checkpoint_dir_is_the_resume_directory)
{
    make("m", "llama");
    FILE *fp = fopen(lwqt_path("r.yaml"), "w");
    fprintf(fp, "imports:\n  off: configs/ptq/units/base_disable_all\n  w: configs/ptq/units/w8a8_fp8_fp8\n"
                "metadata: {recipe_type: ptq}\nquantize:\n  algorithm:\n    method: max\n    layerwise:\n"
                "      enable: true\n      checkpoint_dir: %s\n  quant_cfg:\n    - $import: off\n    - $import: w\n"
                "    - {quantizer_name: '*lm_head*', enable: false}\n    - {quantizer_name: '*embed_tokens*', enable: false}\n",
            lwqt_path("ck"));
    fclose(fp);
    const char *y[] = {"--recipe", lwqt_path("r.yaml"), "--recipe-root", root(), "--resume-dir", lwqt_path("ck"), NULL};
    quantize("m", "o", y);
    struct stat st;
    cr_assert_eq(stat(lwqt_path("ck/manifest.json"), &st), 0, "the resume state went to checkpoint_dir");
    cr_assert_neq(stat(lwqt_path("o.layerwise_resume"), &st), 0);
}
