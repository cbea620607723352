/* Special files among lwq's inputs (issue 28, F6): a FIFO in place of any file lwq reads is refused at once (exit 2, naming it), never waited on. */
#include <criterion/criterion.h>
#include <sys/stat.h>

#include "tests/helpers/run.h"

TestSuite(hostile_files, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 240);

static void make_model(const char *dir)
{
    const char *mk[] = {"mkmodel", lwqt_path(dir), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel");
}

/* Replace `name` (in the temp dir) by a FIFO nobody writes to. */
static void fifo(const char *name)
{
    unlink(lwqt_path(name));
    cr_assert_eq(mkfifo(lwqt_path(name), 0644), 0, "mkfifo %s", name);
}

/* `lwq <args>` (a shell fragment, run in the temp dir) exits `want_rc` within 20 s, and its
 * stderr (or stdout: verify lists its findings there) names `file` as not a regular file.  A
 * blocking open shows as exit 137. */
static void found_fast(const char *args, const char *file, int want_rc)
{
    int rc = lwqt_sh("cd %s && timeout -s KILL 20 %s %s >out.txt 2>err.txt </dev/null", lwqt_dir, lwqt_bin(), args);
    char *err = lwqt_err(), *out = lwqt_out();
    cr_assert_neq(rc, 137, "lwq %s blocked on the FIFO %s", args, file);
    cr_assert_eq(rc, want_rc, "lwq %s: exit %d, expected %d; stderr: %s", args, rc, want_rc, err);
    char want[600];
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", file);
    cr_assert(strstr(err, want) || strstr(out, want), "output lacks \"%s\"; stdout: %s; stderr: %s", want, out, err);
    free(err);
    free(out);
}

/* ... refused: exit 2. */
static void refused_fast(const char *args, const char *file) { found_fast(args, file, 2); }

#define Q "quantize m -o o --calib-size 4 --calib-seq 16 --quiet"

Test(hostile_files, config_json)
{
    make_model("m");
    fifo("m/config.json");
    refused_fast(Q, "m/config.json");
}

Test(hostile_files, a_shard)
{
    make_model("m");
    fifo("m/model.safetensors");
    refused_fast(Q, "m/model.safetensors");
}

Test(hostile_files, the_index)
{
    make_model("m");
    unlink(lwqt_path("m/model.safetensors"));
    fifo("m/model.safetensors.index.json");
    refused_fast(Q, "m/model.safetensors.index.json");
}

Test(hostile_files, tokenizer_json)
{
    make_model("m");
    fifo("m/tokenizer.json");
    refused_fast(Q, "m/tokenizer.json");
}

Test(hostile_files, calib_file)
{
    make_model("m");
    fifo("c.jsonl");
    refused_fast(Q " --calib c.jsonl", "c.jsonl");
}

Test(hostile_files, calib_file_in_a_directory)
{
    make_model("m");
    mkdir(lwqt_path("cd"), 0755);
    lwqt_write_str("cd/a.jsonl", "{\"input_ids\": [1, 2, 3]}\n");
    fifo("cd/b.jsonl");
    refused_fast(Q " --calib cd", "cd/b.jsonl");
}

Test(hostile_files, json_recipe)
{
    make_model("m");
    fifo("r.json");
    refused_fast(Q " --recipe ./r.json", "./r.json");
}

Test(hostile_files, yaml_recipe)
{
    make_model("m");
    fifo("r.yaml");
    refused_fast(Q " --recipe ./r.yaml", "r.yaml");
}

/* A YAML recipe's import: a FIFO w8a8_fp8_fp8.yml was passed over for the next suffix, and
 * w8a8_fp8_fp8.yaml quantized the model in its place (exit 0). */
Test(hostile_files, yaml_recipe_import)
{
    make_model("m");
    cr_assert_eq(lwqt_sh("cp -r %s %s/rr", lwqt_source_path("tests/data/modelopt_recipes"), lwqt_dir), 0);
    fifo("rr/configs/ptq/units/w8a8_fp8_fp8.yml");
    lwqt_write_str("r.yaml", "imports:\n  off: configs/ptq/units/base_disable_all\n  w: configs/ptq/units/w8a8_fp8_fp8\n"
                             "metadata: {recipe_type: ptq}\nquantize:\n  algorithm:\n    method: max\n  quant_cfg:\n"
                             "    - $import: off\n    - $import: w\n    - {quantizer_name: '*lm_head*', enable: false}\n");
    refused_fast(Q " --recipe r.yaml --recipe-root rr", "rr/configs/ptq/units/w8a8_fp8_fp8.yml");
}

/* The model's other files, copied into the output. */
Test(hostile_files, generation_config_json)
{
    make_model("m");
    fifo("m/generation_config.json");
    refused_fast(Q, "m/generation_config.json");
}

Test(hostile_files, resume_manifest)
{
    make_model("m");
    mkdir(lwqt_path("o.layerwise_resume"), 0755);
    fifo("o.layerwise_resume/manifest.json");
    refused_fast(Q, "o.layerwise_resume/manifest.json");
}

/* quantize m into q (a QUANT_DIR for eval) */
static void quantized(void)
{
    make_model("m");
    cr_assert_eq(lwqt_sh("cd %s && %s quantize m -o q --calib-size 4 --calib-seq 16 --quiet 2>err.txt", lwqt_dir,
                         lwqt_bin()),
                 0);
}

#define E "eval m q --data-size 2 --data-seq 8 --quiet"

Test(hostile_files, eval_hf_quant_config)
{
    quantized();
    fifo("q/hf_quant_config.json");
    refused_fast(E, "q/hf_quant_config.json");
}

Test(hostile_files, eval_config_json)
{
    quantized();
    fifo("q/config.json");
    refused_fast(E, "q/config.json");
}

Test(hostile_files, verify_index)
{
    quantized();
    fifo("q/model.safetensors.index.json");
    refused_fast("verify q", "q/model.safetensors.index.json");
}

Test(hostile_files, eval_quant_dir_shard)
{
    quantized();
    fifo("q/model-layer-00000.safetensors");
    refused_fast(E, "q/model-layer-00000.safetensors");
}

Test(hostile_files, eval_quant_dir_index)
{
    quantized();
    fifo("q/model.safetensors.index.json");
    refused_fast(E, "q/model.safetensors.index.json");
}

Test(hostile_files, eval_data_file)
{
    quantized();
    fifo("d.jsonl");
    refused_fast(E " --data d.jsonl", "d.jsonl");
}

/* verify lists what it finds (exit 1): each file it reads, a FIFO named and not waited on */
Test(hostile_files, verify_shard)
{
    quantized();
    fifo("q/model-layer-00001.safetensors");
    found_fast("verify q", "q/model-layer-00001.safetensors", 1);
}

Test(hostile_files, verify_configs)
{
    quantized();
    fifo("q/hf_quant_config.json");
    fifo("q/config.json");
    found_fast("verify q", "q/hf_quant_config.json", 1);
    found_fast("verify q", "q/config.json", 1);
}

Test(hostile_files, verify_resume_manifest)
{
    quantized();
    mkdir(lwqt_path("q.layerwise_resume"), 0755);
    fifo("q.layerwise_resume/manifest.json");
    found_fast("verify q", "q.layerwise_resume/manifest.json", 1);
}

Test(hostile_files, inspect_diff_and_tokenize)
{
    quantized();
    fifo("q/config.json");
    fifo("m/tokenizer.json");
    refused_fast("inspect q", "q/config.json");
    refused_fast("diff m q", "q/config.json");
    refused_fast("tokenize m", "m/tokenizer.json");
}

Test(hostile_files, bench_io)
{
    fifo("f.bin");
    refused_fast("bench-io f.bin", "f.bin");
}
