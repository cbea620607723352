/* tests/tools/test_diff.c — `lwq diff`: tensor, config and metadata differences, exit codes. */
#include <criterion/criterion.h>

#include "layout/checkpoint/checkpoint.h"
#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/run.h"
#include "tests/helpers/fixtures.h"

TestSuite(diff, .init = lwqt_setup, .fini = lwqt_teardown);

Test(diff, finds_one_changed_byte_in_a_100mb_model)
{
    /* ~108 MB of BF16 in 3 shards. */
    const char *mk[] = {"mkmodel", lwqt_path("a"), "--arch", "llama", "--hidden", "1024",
                        "--intermediate", "2816", "--layers", "3", "--heads", "8", "--vocab",
                        "8192", "--shard-size", "40", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    lwqt_copy_dir(lwqt_path("a"), lwqt_path("b"));
    const char *d[] = {"diff", lwqt_path("a"), lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(d), 0, "a copy is identical");

    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("b"), &c, &e), 0, "%s", e.msg);
    cr_assert(c.total_bytes > 100000000ull, "model is only %llu bytes", (unsigned long long)c.total_bytes);
    const char *victim = "model.layers.1.mlp.down_proj.weight";
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&c, victim);
    cr_assert_not_null(t);
    uint64_t off = t->offset + t->nbytes / 2 + 1; /* high byte of a bf16 element */
    FILE *fp = fopen(c.files[t->file].path, "r+b");
    cr_assert_not_null(fp);
    fseek(fp, (long)off, SEEK_SET);
    int byte = fgetc(fp);
    fseek(fp, (long)off, SEEK_SET);
    fputc(byte ^ 0x01, fp);
    fclose(fp);
    lwq_ckpt_free(&c);

    cr_assert_eq(lwqt_run(d), 1);
    char *out = lwqt_out();
    cr_assert(strstr(out, "tensor model.layers.1.mlp.down_proj.weight: data differs in 1 of"), "%s",
              out);
    cr_assert(strstr(out, "max abs diff"), "%s", out);
    cr_assert(strstr(out, "1 tensor/metadata difference"), "%s", out);
    free(out);
}

static void fixture_copy(const char *rel)
{
    char src[1024];
    snprintf(src, sizeof src, "%s", lwqt_fixture(rel));
    lwqt_copy_dir(src, lwqt_path("b"));
}

Test(diff, identical_fixture_is_exit_0)
{
    char a[1024];
    snprintf(a, sizeof a, "%s", lwqt_fixture("quatricmorph-tiny-llama-2shard"));
    const char *d[] = {"diff", a, a, NULL};
    cr_assert_eq(lwqt_run(d), 0);
    char *out = lwqt_out();
    cr_assert(strstr(out, "identical: 111 tensors"), "%s", out);
    free(out);
}

Test(diff, config_compared_as_json_values)
{
    char a[1024];
    snprintf(a, sizeof a, "%s", lwqt_fixture("cai-tiny-llama"));
    fixture_copy("cai-tiny-llama");
    /* Same values, other key order, spacing and number spelling: identical. */
    lwqt_write_str("b/config.json",
                   "{\"rope_scaling\":null,\"tie_word_embeddings\":false,\"rope_theta\":1e4,"
                   "\"rms_norm_eps\":0.00001,\"max_position_embeddings\":16,\"vocab_size\":11,"
                   "\"num_key_value_heads\":1,\"num_attention_heads\":2,\"num_hidden_layers\":2,"
                   "\"intermediate_size\":12,\"hidden_size\":8,\"model_type\":\"llama\","
                   "\"architectures\":[\"LlamaForCausalLM\"]}");
    const char *d[] = {"diff", a, lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(d), 0);
    lwqt_write_str("b/config.json",
                   "{\"rope_scaling\":null,\"tie_word_embeddings\":false,\"rope_theta\":5e5,"
                   "\"rms_norm_eps\":0.00001,\"max_position_embeddings\":16,\"vocab_size\":11,"
                   "\"num_key_value_heads\":1,\"num_attention_heads\":2,\"num_hidden_layers\":2,"
                   "\"intermediate_size\":12,\"hidden_size\":8,\"model_type\":\"llama\","
                   "\"architectures\":[\"LlamaForCausalLM\"],\"extra\":1}");
    cr_assert_eq(lwqt_run(d), 1);
    char *out = lwqt_out();
    cr_assert(strstr(out, "config.json: rope_theta: 10000 vs 500000"), "%s", out);
    cr_assert(strstr(out, "config.json: extra: only in B"), "%s", out);
    free(out);
}

Test(diff, hf_quant_config_on_one_side)
{
    char a[1024];
    snprintf(a, sizeof a, "%s", lwqt_fixture("cai-tiny-llama"));
    fixture_copy("cai-tiny-llama");
    lwqt_write_str("b/hf_quant_config.json", "{\"quantization\":{\"quant_algo\":\"NVFP4\"}}");
    const char *d[] = {"diff", a, lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(d), 1);
    char *out = lwqt_out();
    cr_assert(strstr(out, "hf_quant_config.json: only in B"), "%s", out);
    free(out);
}

Test(diff, names_shapes_and_dtypes)
{
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s", lwqt_fixture("cai-tiny-qwen3"));
    snprintf(b, sizeof b, "%s", lwqt_fixture("cai-tiny-llama"));
    const char *d[] = {"diff", "--max", "100", a, b, NULL};
    cr_assert_eq(lwqt_run(d), 1);
    char *out = lwqt_out();
    cr_assert(strstr(out, "tensor model.layers.0.self_attn.q_norm.weight: only in A"), "%s", out);
    cr_assert(strstr(out, "tensor model.layers.0.self_attn.rotary_emb.inv_freq: only in B"), "%s", out);
    cr_assert(strstr(out, "tensor model.layers.0.self_attn.q_proj.weight: shape [12, 8] vs [8, 8]"),
              "%s", out);
    free(out);
    const char *m1[] = {"mkmodel", lwqt_path("x"), "--dtype", "f32", "--layers", "1", "--quiet", NULL};
    const char *m2[] = {"mkmodel", lwqt_path("y"), "--dtype", "bf16", "--layers", "1", "--quiet", NULL};
    cr_assert_eq(lwqt_run(m1), 0);
    cr_assert_eq(lwqt_run(m2), 0);
    const char *d2[] = {"diff", lwqt_path("x"), lwqt_path("y"), NULL};
    cr_assert_eq(lwqt_run(d2), 1);
    out = lwqt_out();
    cr_assert(strstr(out, "tensor lm_head.weight: dtype F32 vs BF16"), "%s", out);
    free(out);
}

Test(diff, errors_exit_2)
{
    char a[1024];
    snprintf(a, sizeof a, "%s", lwqt_fixture("cai-tiny-llama"));
    const char *d[] = {"diff", a, lwqt_path("nope"), NULL};
    cr_assert_eq(lwqt_run(d), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "B:"), "%s", err);
    free(err);
    const char *one[] = {"diff", a, NULL};
    cr_assert_eq(lwqt_run(one), 2);
    const char *h[] = {"diff", "--help", NULL};
    cr_assert_eq(lwqt_run(h), 0);
    char *out = lwqt_out();
    cr_assert(strstr(out, "exit status: 0 identical, 1 different, 2 error"));
    free(out);
}

Test(diff, safetensors_metadata_compared_unless_disabled)
{
    float x[2] = {1, 2};
    lwq_st_out_tensor t[1] = {{.name = "model.layers.0.w", .dtype = LWQ_F32, .ndim = 1, .shape = {2}, .data = x}};
    const char *cfg = "{\"model_type\":\"llama\",\"hidden_size\":4,\"intermediate_size\":4,"
                      "\"num_hidden_layers\":1,\"num_attention_heads\":1,\"vocab_size\":2}";
    lwq_st_kv ma[] = {{"format", "pt"}, {"run", "1"}}, mb[] = {{"format", "pt"}, {"run", "2"}};
    lwq_error e = {0};
    cr_assert_eq(mkdir(lwqt_path("a"), 0755), 0);
    cr_assert_eq(mkdir(lwqt_path("b"), 0755), 0);
    lwqt_write_str("a/config.json", cfg);
    lwqt_write_str("b/config.json", cfg);
    cr_assert_eq(lwq_st_write_file(lwqt_path("a/model.safetensors"), t, 1, ma, 2, &e), 0);
    cr_assert_eq(lwq_st_write_file(lwqt_path("b/model.safetensors"), t, 1, mb, 2, &e), 0);
    const char *d[] = {"diff", lwqt_path("a"), lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(d), 1);
    char *out = lwqt_out();
    cr_assert(strstr(out, "__metadata__: \"run\": \"1\" only in A"), "%s", out);
    free(out);
    const char *dn[] = {"diff", "--no-metadata", lwqt_path("a"), lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(dn), 0);
}
