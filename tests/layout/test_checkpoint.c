/* tests/layout/test_checkpoint.c — checkpoint opening: single file and shards, index parsing,
 * hostile index files. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/helpers/craft.h"
#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/fixtures.h"

TestSuite(ckpt, .init = lwqt_setup, .fini = lwqt_teardown);

/* ---- expected per-layer parameter counts, written from the configs independently of layout/ -- */

static int64_t expected_layer_elems(const lwq_model_config *c, int l)
{
    int64_t h = c->hidden_size, H = c->num_attention_heads, kv = c->num_key_value_heads;
    int64_t hd = c->head_dim, n = 2 * h; /* input + post-attention norms */
    if (c->family->attn == LWQ_MIXER_MLA) {
        int64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
        n += c->q_lora_rank ? h * c->q_lora_rank + c->q_lora_rank + c->q_lora_rank * H * qk
                            : h * H * qk;
        n += h * (c->kv_lora_rank + c->qk_rope_head_dim) + c->kv_lora_rank;
        n += c->kv_lora_rank * H * (c->qk_nope_head_dim + c->v_head_dim);
        n += H * c->v_head_dim * h;
    } else {
        n += h * H * hd + 2 * h * kv * hd + H * hd * h;
        if (c->attention_bias)
            n += H * hd + 2 * kv * hd;
        if (c->family->qk_norm)
            n += 2 * hd;
    }
    if (lwq_config_layer_is_moe(c, l)) {
        n += (int64_t)c->num_experts * 3 * h * c->moe_intermediate_size + c->num_experts * h;
        if (c->family->router == LWQ_ROUTER_DEEPSEEK_V3)
            n += c->num_experts;
        if (c->n_shared_experts && c->family->shared == LWQ_SHARED_DEEPSEEK)
            n += 3 * h * c->moe_intermediate_size * c->n_shared_experts;
    } else {
        n += 3 * h * c->intermediate_size;
    }
    return n;
}

static int count_experts(const lwq_ckpt *c, int l)
{
    char seen[4096] = {0};
    int n = 0;
    for (int i = 0; i < c->layers[l].n; i++) {
        const char *p = strstr(c->tensors[c->layers[l].idx[i]].name, ".experts.");
        if (!p)
            continue;
        int e = atoi(p + 9);
        cr_assert(e >= 0 && e < 4096);
        if (!seen[e]++)
            n++;
    }
    return n;
}

static void check_fixture(const char *rel, const char *config_rel)
{
    char dir[1024], cfgp[1024];
    snprintf(dir, sizeof dir, "%s", lwqt_fixture(rel));
    if (config_rel)
        snprintf(cfgp, sizeof cfgp, "%s", lwqt_fixture(config_rel));
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open_with_config(dir, config_rel ? cfgp : NULL, &c, &e), 0, "%s", e.msg);
    const lwq_model_config *cfg = &c.cfg;
    cr_assert_eq(c.nlayers, cfg->num_hidden_layers, "%s: %d layers, config %d", rel, c.nlayers,
                 cfg->num_hidden_layers);
    int64_t max_expected = 0;
    for (int l = 0; l < c.nlayers; l++) {
        int64_t elems = 0;
        uint64_t bytes = 0;
        for (int i = 0; i < c.layers[l].n; i++) {
            const lwq_ckpt_tensor *t = &c.tensors[c.layers[l].idx[i]];
            cr_assert_eq(t->layer, l);
            bytes += t->nbytes;
            if (strstr(t->name, "rotary_emb.inv_freq"))
                continue; /* a non-parameter buffer some exporters saved */
            int64_t n = 1;
            for (int d = 0; d < t->ndim; d++)
                n *= t->shape[d];
            elems += n;
        }
        cr_assert_eq(bytes, c.layers[l].bytes);
        int64_t want = expected_layer_elems(cfg, l);
        cr_assert_eq(elems, want, "%s layer %d: %lld parameters, config implies %lld", rel, l,
                     (long long)elems, (long long)want);
        if (want > max_expected)
            max_expected = want;
        int ne = count_experts(&c, l);
        cr_assert_eq(ne, lwq_config_layer_is_moe(cfg, l) ? cfg->num_experts : 0,
                     "%s layer %d: %d experts", rel, l, ne);
    }
    int largest = 0;
    for (int l = 1; l < c.nlayers; l++)
        if (c.layers[l].bytes > c.layers[largest].bytes)
            largest = l;
    cr_assert_eq(expected_layer_elems(cfg, largest), max_expected,
                 "%s: the largest layer on disk (%d) is not one the config makes largest", rel,
                 largest);
    cr_assert_not_null(lwq_ckpt_find(&c, "model.embed_tokens.weight"));
    cr_assert_not_null(lwq_ckpt_find(&c, "model.norm.weight"));
    if (!cfg->tie_word_embeddings)
        cr_assert_not_null(lwq_ckpt_find(&c, "lm_head.weight"));
    uint64_t total = c.tail.bytes;
    for (int l = 0; l < c.nlayers; l++)
        total += c.layers[l].bytes;
    cr_assert_eq(total, c.total_bytes);
    for (int i = 1; i < c.ntensors; i++)
        cr_assert(strcmp(c.tensors[i - 1].name, c.tensors[i].name) < 0, "table not sorted");
    lwq_ckpt_free(&c);
}

/* One test per checkpoint of the fixture table (tests/helpers/fixtures.c). */
ParameterizedTestParameters(ckpt, every_fixture_has_a_consistent_tensor_table)
{
    return cr_make_param_array(int, lwqt_ckpt_fixture_indexes(), (size_t)lwqt_nckpt_fixtures);
}
ParameterizedTest(int *i, ckpt, every_fixture_has_a_consistent_tensor_table)
{
    check_fixture(lwqt_ckpt_fixtures[*i].dir, lwqt_ckpt_fixtures[*i].config);
}

Test(ckpt, sharded_and_single_file_hold_the_same_bytes)
{
    char a[1024], b[1024], cfgp[1024];
    snprintf(a, sizeof a, "%s", lwqt_fixture("cai-tiny-llama"));
    snprintf(b, sizeof b, "%s", lwqt_fixture("cai-tiny-llama/sharded"));
    snprintf(cfgp, sizeof cfgp, "%s", lwqt_fixture("cai-tiny-llama/config.json"));
    lwq_ckpt x, y;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(a, &x, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_ckpt_open_with_config(b, cfgp, &y, &e), 0, "%s", e.msg);
    cr_assert_eq(x.ntensors, y.ntensors);
    cr_assert_eq(y.nfiles, 2);
    for (int i = 0; i < x.ntensors; i++) {
        const lwq_ckpt_tensor *s = &x.tensors[i], *t = lwq_ckpt_find(&y, s->name);
        cr_assert_not_null(t, "%s missing in the sharded copy", s->name);
        cr_assert_eq(s->nbytes, t->nbytes);
        char *p = malloc(s->nbytes + 1), *q = malloc(t->nbytes + 1);
        cr_assert_eq(lwq_ckpt_read_tensor(&x, s, p, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_ckpt_read_tensor(&y, t, q, &e), 0, "%s", e.msg);
        cr_assert_eq(memcmp(p, q, s->nbytes), 0, "%s differs", s->name);
        free(p);
        free(q);
    }
    lwq_ckpt_free(&x);
    lwq_ckpt_free(&y);
}

Test(ckpt, mixed_dtypes_in_one_checkpoint)
{
    char d[1024];
    snprintf(d, sizeof d, "%s", lwqt_fixture("quatricmorph-tiny-llama-2shard"));
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(d, &c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_ckpt_find(&c, "model.layers.0.mlp.gate_proj.weight")->dtype, LWQ_BF16);
    cr_assert_eq(lwq_ckpt_find(&c, "model.layers.0.mlp.up_proj.weight")->dtype, LWQ_F32);
    cr_assert(c.layers[0].bytes < c.layers[1].bytes);
    lwq_ckpt_free(&c);
}

Test(ckpt, layer_index_parsing)
{
    cr_assert_eq(lwq_tensor_layer_index("model.layers.0.mlp.up_proj.weight"), 0);
    cr_assert_eq(lwq_tensor_layer_index("model.layers.61.eh_proj.weight"), 61);
    cr_assert_eq(lwq_tensor_layer_index("model.layers.01.x"), -1);
    cr_assert_eq(lwq_tensor_layer_index("model.layers.x.y"), -1);
    cr_assert_eq(lwq_tensor_layer_index("model.layers.7"), -1);
    cr_assert_eq(lwq_tensor_layer_index("model.layers.99999999999999999999.w"), -1);
    cr_assert_eq(lwq_tensor_layer_index("model.norm.weight"), -1);
    cr_assert_eq(lwq_tensor_layer_index("lm_head.weight"), -1);
}

/* ---- crafted bad directories ----------------------------------------------------------------- */

#define CFG "{\"model_type\":\"llama\",\"hidden_size\":4,\"intermediate_size\":4," \
            "\"num_hidden_layers\":1,\"num_attention_heads\":1,\"vocab_size\":2}"
#define T(name, b, e) "\"" name "\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[" #b "," #e "]}"

static void write_two_shards(void)
{
    lwqt_write_str("config.json", CFG);
    lwqt_write_st("s1.safetensors", "{" T("model.layers.0.a", 0, 4) "," T("model.norm.weight", 4, 8) "}",
                  UINT64_MAX, 8);
    lwqt_write_st("s2.safetensors", "{" T("model.layers.0.b", 0, 4) "}", UINT64_MAX, 4);
}

static void expect_open_fail(int code, const char *want1, const char *want2)
{
    lwq_ckpt c;
    lwq_error e = {0};
    int rc = lwq_ckpt_open(lwqt_dir, &c, &e);
    cr_assert_eq(rc, code, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, want1), "message lacks '%s': %s", want1, e.msg);
    if (want2)
        cr_assert(strstr(e.msg, want2), "message lacks '%s': %s", want2, e.msg);
}

Test(ckpt, crafted_index_opens)
{
    write_two_shards();
    lwqt_write_str("model.safetensors.index.json",
                   "{\"metadata\":{},\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
                   "\"model.norm.weight\":\"s1.safetensors\",\"model.layers.0.b\":\"s2.safetensors\"}}");
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_dir, &c, &e), 0, "%s", e.msg);
    cr_assert_eq(c.ntensors, 3);
    cr_assert_eq(c.nfiles, 2);
    cr_assert_eq(c.layers[0].n, 2);
    cr_assert_eq(c.layers[0].bytes, 8);
    cr_assert_eq(c.tail.n, 1);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&c, "model.layers.0.b");
    cr_assert_not_null(t);
    cr_assert_eq(t->offset, c.files[t->file].data_start);
    lwq_ckpt_free(&c);
}

Test(ckpt, any_index_name_is_found)
{
    write_two_shards();
    lwqt_write_str("my.safetensors.index.json",
                   "{\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
                   "\"model.norm.weight\":\"s1.safetensors\",\"model.layers.0.b\":\"s2.safetensors\"}}");
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_dir, &c, &e), 0, "%s", e.msg);
    lwq_ckpt_free(&c);
}

Test(ckpt, two_index_files_are_ambiguous)
{
    write_two_shards();
    lwqt_write_str("a.safetensors.index.json", "{\"weight_map\":{}}");
    lwqt_write_str("b.safetensors.index.json", "{\"weight_map\":{}}");
    expect_open_fail(LWQ_EFORMAT, "more than one index file", NULL);
}

Test(ckpt, index_names_missing_file)
{
    write_two_shards();
    lwqt_write_str("model.safetensors.index.json",
                   "{\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
                   "\"model.norm.weight\":\"s1.safetensors\",\"model.layers.0.b\":\"s3.safetensors\"}}");
    expect_open_fail(LWQ_ENOENT, "\"s3.safetensors\" (for tensor 'model.layers.0.b')",
                     "does not exist");
}

Test(ckpt, index_tensor_absent_from_shard)
{
    write_two_shards();
    lwqt_write_str("model.safetensors.index.json",
                   "{\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
                   "\"model.norm.weight\":\"s1.safetensors\",\"model.layers.0.b\":\"s2.safetensors\","
                   "\"model.layers.0.c\":\"s2.safetensors\"}}");
    expect_open_fail(LWQ_EFORMAT, "tensor 'model.layers.0.c'", "absent from it");
}

Test(ckpt, shard_tensor_missing_from_index)
{
    write_two_shards();
    lwqt_write_str("model.safetensors.index.json",
                   "{\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
                   "\"model.layers.0.b\":\"s2.safetensors\"}}");
    expect_open_fail(LWQ_EFORMAT, "'model.norm.weight'", "does not list");
}

Test(ckpt, index_duplicate_entry)
{
    write_two_shards();
    lwqt_write_str("model.safetensors.index.json",
                   "{\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
                   "\"model.norm.weight\":\"s1.safetensors\",\"model.layers.0.b\":\"s2.safetensors\","
                   "\"model.layers.0.a\":\"s1.safetensors\"}}");
    expect_open_fail(LWQ_EFORMAT, "'model.layers.0.a' is listed twice", NULL);
}

static void escaping_name(const char *fname)
{
    write_two_shards();
    char idx[512];
    snprintf(idx, sizeof idx,
             "{\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
             "\"model.norm.weight\":\"s1.safetensors\",\"model.layers.0.b\":\"%s\"}}",
             fname);
    lwqt_write_str("model.safetensors.index.json", idx);
    expect_open_fail(LWQ_EFORMAT, "not a plain file name inside the model directory",
                     "'model.layers.0.b'");
}

Test(ckpt, index_name_parent_dir) { escaping_name("../x"); }
Test(ckpt, index_name_absolute) { escaping_name("/etc/passwd"); }
Test(ckpt, index_name_subdir)
{
    cr_assert_eq(mkdir(lwqt_path("a"), 0755), 0);
    lwqt_write_st("a/b", "{" T("model.layers.0.b", 0, 4) "}", UINT64_MAX, 4);
    escaping_name("a/b");
}
Test(ckpt, index_name_dotdot_alone) { escaping_name(".."); }

Test(ckpt, path_in_dir_rules)
{
    char out[64];
    cr_assert_eq(lwq_path_in_dir("/m", "model-00001.safetensors", out, sizeof out, NULL), 0);
    cr_assert_str_eq(out, "/m/model-00001.safetensors");
    cr_assert_eq(lwq_path_in_dir("/m", "", out, sizeof out, NULL), LWQ_EFORMAT);
    cr_assert_eq(lwq_path_in_dir("/m", ".", out, sizeof out, NULL), LWQ_EFORMAT);
    cr_assert_eq(lwq_path_in_dir("/m", "a\\b", out, sizeof out, NULL), LWQ_EFORMAT);
    cr_assert_eq(lwq_path_in_dir("/m", "x\ny", out, sizeof out, NULL), LWQ_EFORMAT);
    cr_assert_eq(lwq_path_in_dir("/m", "0123456789012345678901234567890123456789012345678901234567890",
                                 out, sizeof out, NULL),
                 LWQ_EINVAL);
}

Test(ckpt, bad_shard_error_names_the_shard)
{
    write_two_shards();
    lwqt_write_st("s2.safetensors", "{" T("model.layers.0.b", 0, 4) "}", 999, 4);
    lwqt_write_str("model.safetensors.index.json",
                   "{\"weight_map\":{\"model.layers.0.a\":\"s1.safetensors\","
                   "\"model.norm.weight\":\"s1.safetensors\",\"model.layers.0.b\":\"s2.safetensors\"}}");
    expect_open_fail(LWQ_EFORMAT, "s2.safetensors", "beyond the end");
}

Test(ckpt, index_not_json)
{
    write_two_shards();
    lwqt_write_str("model.safetensors.index.json", "{\"weight_map\":");
    expect_open_fail(LWQ_EFORMAT, "model.safetensors.index.json", "not valid JSON");
    lwqt_write_str("model.safetensors.index.json", "{\"metadata\":{}}");
    expect_open_fail(LWQ_EFORMAT, "missing \"weight_map\"", NULL);
    lwqt_write_str("model.safetensors.index.json", "{\"weight_map\":{\"model.norm.weight\":3}}");
    expect_open_fail(LWQ_EFORMAT, "'model.norm.weight' is not a file name", NULL);
}

Test(ckpt, missing_config)
{
    lwqt_write_st("model.safetensors", "{" T("model.layers.0.a", 0, 4) "}", UINT64_MAX, 4);
    expect_open_fail(LWQ_ENOENT, "config.json", NULL);
}

Test(ckpt, config_errors_propagate)
{
    lwqt_write_st("model.safetensors", "{" T("model.layers.0.a", 0, 4) "}", UINT64_MAX, 4);
    lwqt_write_str("config.json", "{\"model_type\":\"bert\"}");
    expect_open_fail(LWQ_EUNSUPPORTED, "unknown model_type 'bert'", "config.json");
    lwqt_write_str("config.json", "{\"model_type\":\"llama\",\"hidden_size\":4}");
    expect_open_fail(LWQ_EFORMAT, "config.json", "is missing");
}

Test(ckpt, no_weights)
{
    lwqt_write_str("config.json", CFG);
    expect_open_fail(LWQ_ENOENT, "no model.safetensors", NULL);
}

Test(ckpt, missing_decoder_layer)
{
    lwqt_write_str("config.json", "{\"model_type\":\"llama\",\"hidden_size\":4,\"intermediate_size\":4,"
                                  "\"num_hidden_layers\":2,\"num_attention_heads\":1,\"vocab_size\":2}");
    lwqt_write_st("model.safetensors", "{" T("model.layers.0.a", 0, 4) "}", UINT64_MAX, 4);
    expect_open_fail(LWQ_EFORMAT, "declares 2 decoder layers", "layer 1");
}

Test(ckpt, truncated_single_file)
{
    lwqt_write_str("config.json", CFG);
    lwqt_write_st("model.safetensors", "{" T("model.layers.0.a", 0, 4) "," T("model.layers.0.b", 4, 8) "}",
                  UINT64_MAX, 6);
    expect_open_fail(LWQ_EFORMAT, "model.safetensors", "tensor 'model.layers.0.b'");
}
