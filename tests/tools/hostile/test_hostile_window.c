/* Sliding-window attention (issue 36, finding 12): a window shorter than a calibration or eval sequence is refused before anything is read or written, read as transformers reads each model_type's keys; switched-off windows run. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"

TestSuite(hostile_window, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 300);

#define QARGS "--calib-size 8 --calib-seq 32 --batch-size 4 --threads 1 --quiet"

/* A tiny model m of `arch` whose config.json says model_type `as` and carries `keys` (JSON
 * members, "" for none) in place of the model_type line mkmodel wrote. */
static void make_model(const char *arch, const char *as, const char *keys)
{
    int moe = !strcmp(arch, "qwen3_moe") || !strcmp(arch, "mixtral");
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch %s --hidden 128 --layers 2 %s --quiet", lwqt_bin(), lwqt_path("m"), arch,
                         moe ? "--experts 4 --top-k 2" : ""),
                 0);
    char *cfg = lwqt_slurp(lwqt_path("m/config.json"));
    char line[64];
    snprintf(line, sizeof line, "\"model_type\":\t\"%s\",", arch);
    char *at = strstr(cfg, line);
    cr_assert_not_null(at, "no %s in m/config.json", line);
    FILE *f = fopen(lwqt_path("m/config.json"), "w");
    cr_assert_not_null(f);
    fprintf(f, "%.*s\"model_type\": \"%s\",%s%s%s", (int)(at - cfg), cfg, as, keys, *keys ? "," : "", at + strlen(line));
    fclose(f);
    free(cfg);
}

/* lwq quantize m -o o QARGS EXTRA; stderr in err.txt */
static int quantize(const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s " QARGS " %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path("o"), extra,
                   lwqt_path("err.txt"));
}

/* The refusal: exit 2, err.txt holds every one of the NULL-terminated strings, and nothing was
 * written where the output and its resume state would go. */
static void refused(int rc, const char *const *says)
{
    char *err = lwqt_err();
    cr_assert_eq(rc, 2, "exit %d, expected 2 (refused): %s", rc, err);
    for (int i = 0; says[i]; i++)
        cr_assert(strstr(err, says[i]), "the refusal does not say \"%s\": %s", says[i], err);
    cr_assert_eq(lwqt_sh("[ ! -e %s ] && [ ! -e %s ]", lwqt_path("o"), lwqt_path("o.layerwise_resume")), 0,
                 "a refused run wrote into o or o.layerwise_resume: %s", err);
    free(err);
}

static void runs(int rc)
{
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "exit %d, expected 0: %s", rc, err);
    free(err);
}

Test(hostile_window, a_mistral_window_shorter_than_the_calibration_is_refused)
{
    make_model("llama", "mistral", "\"sliding_window\": 16");
    refused(quantize(""), (const char *[]){"m/config.json", "a calibration sequence of 32 tokens is longer than the "
                                           "sliding window of 16 tokens", "mistral", "\"sliding_window\": 16",
                                           "every layer", "--calib-seq 16 or less", NULL});
}

Test(hostile_window, a_mistral_window_as_long_as_the_calibration_runs)
{
    make_model("llama", "mistral", "\"sliding_window\": 32");
    runs(quantize(""));
}

Test(hostile_window, a_null_mistral_window_is_full_attention)
{
    make_model("llama", "mistral", "\"sliding_window\": null");
    runs(quantize(""));
}

/* MistralConfig's default is a window of 4096: a config without the key has one. */
Test(hostile_window, a_mistral_config_without_the_key_has_transformers_default_window)
{
    make_model("llama", "mistral", "");
    FILE *f = fopen(lwqt_path("long.jsonl"), "w");
    cr_assert_not_null(f);
    fputs("{\"input_ids\": [", f);
    for (int i = 0; i < 4097; i++)
        fprintf(f, "%s%d", i ? "," : "", 1 + i % 250);
    fputs("]}\n", f);
    fclose(f);
    char extra[600];
    snprintf(extra, sizeof extra, "--calib %s --calib-size 1 --calib-seq 4097 --batch-size 1", lwqt_path("long.jsonl"));
    refused(quantize(extra), (const char *[]){"a calibration sequence of 4097 tokens is longer than the sliding "
                                              "window of 4096 tokens", "no \"sliding_window\": 4096, transformers' "
                                              "default", NULL});
}

/* Llama has no sliding attention in transformers: the key is not read. */
Test(hostile_window, a_llama_sliding_window_key_is_ignored)
{
    make_model("llama", "llama", "\"sliding_window\": 16");
    runs(quantize(""));
}

Test(hostile_window, a_qwen3_window_switched_off_runs)
{
    make_model("qwen3", "qwen3", "\"use_sliding_window\": false, \"sliding_window\": 16, \"max_window_layers\": 0");
    runs(quantize(""));
}

Test(hostile_window, a_qwen3_window_from_max_window_layers_is_refused)
{
    make_model("qwen3", "qwen3", "\"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 1");
    refused(quantize(""), (const char *[]){"sliding window of 16 tokens of this qwen3 model", "1 of 2 layers, the "
                                           "first 1", NULL});
}

/* Qwen3Config's max_window_layers is 28 when absent: no layer of a 2-layer model is windowed. */
Test(hostile_window, a_qwen3_window_without_max_window_layers_starts_at_layer_28)
{
    make_model("qwen3", "qwen3", "\"use_sliding_window\": true, \"sliding_window\": 16");
    runs(quantize(""));
}

Test(hostile_window, qwen3_layer_types_name_the_windowed_layers)
{
    make_model("qwen3", "qwen3", "\"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 28, "
               "\"layer_types\": [\"sliding_attention\", \"full_attention\"]");
    refused(quantize(""), (const char *[]){"sliding window of 16 tokens", "1 of 2 layers, the first 0", NULL});
}

/* Qwen3MoeConfig has no max_window_layers: the window is on every layer. */
Test(hostile_window, a_qwen3_moe_window_is_on_every_layer)
{
    make_model("qwen3_moe", "qwen3_moe", "\"use_sliding_window\": true, \"sliding_window\": 16, "
               "\"max_window_layers\": 99");
    refused(quantize(""), (const char *[]){"sliding window of 16 tokens of this qwen3_moe model", "every layer", NULL});
}

Test(hostile_window, a_mixtral_window_is_refused)
{
    make_model("mixtral", "mixtral", "\"sliding_window\": 16");
    refused(quantize(""), (const char *[]){"sliding window of 16 tokens of this mixtral model", NULL});
}

Test(hostile_window, the_auto_quantize_search_is_refused_before_it_writes)
{
    make_model("llama", "mistral", "\"sliding_window\": 16");
    refused(quantize("--auto-quantize-bits 6"), (const char *[]){"sliding window of 16 tokens", NULL});
}

Test(hostile_window, eval_refuses_a_data_sequence_longer_than_the_window)
{
    make_model("llama", "mistral", "\"sliding_window\": 16");
    int rc = lwqt_sh("%s eval %s --data-size 4 --data-seq 32 --calib-size 4 --calib-seq 16 --batch-size 4 --quiet "
                     ">/dev/null 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path("err.txt"));
    refused(rc, (const char *[]){"an eval sequence of 32 tokens is longer than the sliding window of 16 tokens",
                                 "--data-seq 16 or less", NULL});
}

Test(hostile_window, eval_refuses_a_calibration_sequence_longer_than_the_window)
{
    make_model("llama", "mistral", "\"sliding_window\": 16");
    int rc = lwqt_sh("%s eval %s --data-size 4 --data-seq 16 --calib-size 4 --calib-seq 32 --batch-size 4 --quiet "
                     ">/dev/null 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path("err.txt"));
    refused(rc, (const char *[]){"a calibration sequence of 32 tokens", "--calib-seq 16 or less", NULL});
}

Test(hostile_window, a_negative_sliding_window_is_refused)
{
    make_model("llama", "mistral", "\"sliding_window\": -1");
    refused(quantize(""), (const char *[]){"\"sliding_window\" = -1 is outside", NULL});
}

Test(hostile_window, a_fractional_sliding_window_is_refused)
{
    make_model("llama", "mistral", "\"sliding_window\": 16.5");
    refused(quantize(""), (const char *[]){"\"sliding_window\" must be an integer", NULL});
}

Test(hostile_window, a_use_sliding_window_that_is_not_a_boolean_is_refused)
{
    make_model("qwen3", "qwen3", "\"use_sliding_window\": \"yes\", \"sliding_window\": 16");
    refused(quantize(""), (const char *[]){"\"use_sliding_window\" must be true or false", NULL});
}
