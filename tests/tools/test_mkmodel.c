/* tests/tools/test_mkmodel.c — `lwq mkmodel`: every architecture round-trips through the plans;
 * values and tokenizer are deterministic. */
#include <criterion/criterion.h>
#include <math.h>

#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"
#include "text/tokenizer.h"
#include "tests/helpers/run.h"

TestSuite(mkmodel, .init = lwqt_setup, .fini = lwqt_teardown);

static cJSON *inspect_json(const char *dir)
{
    const char *a[] = {"inspect", "--json", dir, NULL};
    int rc = lwqt_run(a);
    char *out = lwqt_out();
    cr_assert_eq(rc, 0, "inspect exit %d: %s", rc, out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    free(out);
    return j;
}

static int64_t jint(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(j, k);
    cr_assert_not_null(v, "no %s", k);
    return (int64_t)v->valuedouble;
}

/* Parameter count written down from the flags (independent of layout/arch). */
static int64_t params(int64_t h, int64_t I, int64_t L, int64_t H, int64_t kv, int64_t hd, int64_t E,
                      int64_t mi, int64_t V, int qk_norm)
{
    int64_t attn = h * H * hd + 2 * h * kv * hd + H * hd * h + (qk_norm ? 2 * hd : 0);
    int64_t mlp = E ? E * 3 * h * mi + E * h : 3 * h * I;
    return L * (attn + mlp + 2 * h) + 2 * V * h + h;
}

static void round_trip(const char *arch, int64_t E, int qk_norm, int64_t mi_flag)
{
    const char *out = lwqt_path("m");
    char es[16], mis[16];
    snprintf(es, sizeof es, "%lld", (long long)(E ? E : 1));
    snprintf(mis, sizeof mis, "%lld", (long long)mi_flag);
    const char *a[] = {"mkmodel", out, "--arch", arch, "--hidden", "64", "--intermediate", "96",
                       "--moe-intermediate", mis, "--layers", "3", "--heads", "4", "--kv-heads", "2",
                       "--head-dim", "32", "--experts", es, "--top-k", "1", "--vocab", "300",
                       "--dtype", "f16", "--shard-size", "100K", "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "mkmodel exit %d: %s", rc, err);
    free(err);
    cJSON *j = inspect_json(out);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "model_type")->valuestring, arch);
    cr_assert_eq(jint(j, "num_hidden_layers"), 3);
    cr_assert_eq(jint(j, "checkpoint_layers"), 3);
    cr_assert_eq(jint(j, "num_experts"), E);
    cr_assert_eq(jint(j, "head_dim"), 32);
    int64_t mi = !strcmp(arch, "mixtral") ? 96 : mi_flag;
    int64_t n = params(64, 96, 3, 4, 2, 32, E, mi, 300, qk_norm);
    cr_assert_eq(jint(j, "total_bytes"), 2 * n, "%lld bytes, flags give %lld", (long long)jint(j, "total_bytes"),
                 (long long)(2 * n));
    cr_assert(jint(j, "files") > 1, "--shard-size 1 should split this model");
    cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "dtypes"), "F16"));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "issues")), 0);
    cJSON_Delete(j);
}

Test(mkmodel, llama_round_trip) { round_trip("llama", 0, 0, 32); }
Test(mkmodel, qwen3_round_trip) { round_trip("qwen3", 0, 1, 32); }
Test(mkmodel, qwen3_moe_round_trip) { round_trip("qwen3_moe", 4, 1, 48); }
Test(mkmodel, mixtral_round_trip) { round_trip("mixtral", 4, 0, 48); }

static void mk(const char *name, const char *seed, const char *shard)
{
    const char *a[] = {"mkmodel", lwqt_path(name), "--arch", "qwen3_moe", "--hidden", "64",
                       "--layers", "2", "--experts", "4", "--seed", seed, "--shard-size", shard,
                       "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 0);
}

Test(mkmodel, same_seed_same_tensors_whatever_the_sharding)
{
    mk("a", "7", "64K");
    mk("b", "7", "4096");
    const char *d[] = {"diff", lwqt_path("a"), lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(d), 0);
    struct stat st;
    cr_assert_eq(stat(lwqt_path("b/model.safetensors"), &st), 0, "one shard: no index");
    cr_assert_neq(stat(lwqt_path("b/model.safetensors.index.json"), &st), 0);
    cr_assert_eq(stat(lwqt_path("a/model.safetensors.index.json"), &st), 0);
}

Test(mkmodel, other_seed_other_values)
{
    mk("a", "1", "4096");
    mk("b", "2", "4096");
    const char *d[] = {"diff", lwqt_path("a"), lwqt_path("b"), NULL};
    cr_assert_eq(lwqt_run(d), 1);
}

Test(mkmodel, values_look_like_weights)
{
    mk("a", "3", "4096");
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("a"), &c, &e), 0, "%s", e.msg);
    const char *names[] = {"model.embed_tokens.weight", "model.layers.1.input_layernorm.weight"};
    const double want_mean[] = {0.0, 1.0};
    for (int k = 0; k < 2; k++) {
        const lwq_ckpt_tensor *t = lwq_ckpt_find(&c, names[k]);
        cr_assert_not_null(t);
        cr_assert_eq(t->dtype, LWQ_BF16);
        uint16_t *v = malloc(t->nbytes);
        cr_assert_eq(lwq_ckpt_read_tensor(&c, t, v, &e), 0);
        size_t n = t->nbytes / 2;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < n; i++) {
            double x = lwq_bf16_to_f32(v[i]);
            s += x;
            s2 += x * x;
        }
        double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
        cr_assert(fabs(mean - want_mean[k]) < 0.01, "%s mean %g", names[k], mean);
        cr_assert(sd > 0.015 && sd < 0.025, "%s std %g", names[k], sd);
        free(v);
    }
    lwq_ckpt_free(&c);
}

Test(mkmodel, tokenizer_is_byte_level_bpe)
{
    mk("a", "0", "4096");
    char *txt = lwqt_slurp(lwqt_path("a/tokenizer.json"));
    cJSON *t = cJSON_Parse(txt);
    cr_assert_not_null(t, "tokenizer.json is not JSON");
    cJSON *model = cJSON_GetObjectItem(t, "model");
    cr_assert_str_eq(cJSON_GetObjectItem(model, "type")->valuestring, "BPE");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(t, "pre_tokenizer"), "type")->valuestring,
                     "ByteLevel");
    cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    int n = cJSON_GetArraySize(vocab);
    char seen[1024] = {0};
    cJSON *it;
    cJSON_ArrayForEach(it, vocab)
    {
        cr_assert(it->valueint >= 0 && it->valueint < n && !seen[it->valueint]++, "ids not 0..n-1");
    }
    /* GPT-2 byte map: space -> U+0120 id 220, '!' id 0, byte 0 -> U+0100, 0xff -> itself. */
    cr_assert_eq(cJSON_GetObjectItem(vocab, "\xc4\xa0")->valueint, 220);
    cr_assert_eq(cJSON_GetObjectItem(vocab, "!")->valueint, 0);
    cr_assert_not_null(cJSON_GetObjectItem(vocab, "\xc4\x80"));
    cr_assert_not_null(cJSON_GetObjectItem(vocab, "\xc3\xbf"));
    int bytes = 0;
    cJSON_ArrayForEach(it, vocab) bytes += it->valueint < 256;
    cr_assert_eq(bytes, 256);
    cJSON *mg = cJSON_GetObjectItem(model, "merges");
    cr_assert(cJSON_GetArraySize(mg) > 0);
    cJSON_ArrayForEach(it, mg)
    {
        char l[32], r[32], both[64];
        cr_assert_eq(sscanf(it->valuestring, "%31s %31s", l, r), 2);
        snprintf(both, sizeof both, "%s%s", l, r);
        cr_assert_not_null(cJSON_GetObjectItem(vocab, l), "merge part %s", l);
        cr_assert_not_null(cJSON_GetObjectItem(vocab, r), "merge part %s", r);
        cr_assert_not_null(cJSON_GetObjectItem(vocab, both), "merge result %s", both);
    }
    cJSON *added = cJSON_GetArrayItem(cJSON_GetObjectItem(t, "added_tokens"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(added, "content")->valuestring, "<|endoftext|>");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(added, "special")));
    int eot = cJSON_GetObjectItem(added, "id")->valueint;
    char *ctext = lwqt_slurp(lwqt_path("a/config.json"));
    cJSON *cfg = cJSON_Parse(ctext);
    cr_assert_eq(cJSON_GetObjectItem(cfg, "eos_token_id")->valueint, eot);
    cr_assert(cJSON_GetObjectItem(cfg, "vocab_size")->valueint >= n);
    char *gtext = lwqt_slurp(lwqt_path("a/generation_config.json"));
    cJSON *gen = cJSON_Parse(gtext);
    cr_assert_not_null(gen);
    cr_assert_eq(cJSON_GetObjectItem(gen, "eos_token_id")->valueint, eot);
    cJSON_Delete(gen);
    cJSON_Delete(cfg);
    cJSON_Delete(t);
    free(gtext);
    free(ctext);
    free(txt);
}

Test(mkmodel, refuses_a_non_empty_directory_without_force)
{
    mk("a", "0", "64K");
    struct stat st0;
    cr_assert_eq(stat(lwqt_path("a/model.safetensors.index.json"), &st0), 0);
    const char *a[] = {"mkmodel", lwqt_path("a"), "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "not empty"), "%s", err);
    free(err);
    /* --force replaces the 2-layer sharded model by a single-file llama; no stale shard stays. */
    const char *f[] = {"mkmodel", lwqt_path("a"), "--force", "--quiet", NULL};
    cr_assert_eq(lwqt_run(f), 0);
    struct stat st;
    cr_assert_neq(stat(lwqt_path("a/model.safetensors.index.json"), &st), 0);
    DIR *d = opendir(lwqt_path("a"));
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        cr_assert(strncmp(de->d_name, "model-", 6), "stale shard %s", de->d_name);
    closedir(d);
    const char *i[] = {"inspect", lwqt_path("a"), NULL};
    cr_assert_eq(lwqt_run(i), 0);
}

Test(mkmodel, bad_options_exit_2)
{
    const char *cases[][6] = {{"mkmodel", lwqt_path("x"), "--arch", "gpt2", NULL},
                              {"mkmodel", lwqt_path("x"), "--dtype", "f8", NULL},
                              {"mkmodel", lwqt_path("x"), "--hidden", "-3", NULL},
                              {"mkmodel", lwqt_path("x"), "--top-k", "9", NULL},
                              {"mkmodel", lwqt_path("x"), "--vocab", "100", NULL},
                              {"mkmodel", lwqt_path("x"), "--hidden", "100", "--heads", "3"},
                              {"mkmodel", NULL}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cr_assert_eq(lwqt_run(cases[k]), 2, "case %zu", k);
        char *err = lwqt_err();
        cr_assert(strlen(err) > 0, "case %zu: no message", k);
        free(err);
    }
    const char *h[] = {"mkmodel", "--help", NULL};
    cr_assert_eq(lwqt_run(h), 0);
    char *out = lwqt_out();
    cr_assert(strstr(out, "exit status"));
    free(out);
}

Test(mkmodel, tokenizer_loads_and_encodes_with_lwq_tokenizer)
{
    mk("a", "0", "4096");
    lwq_tokenizer *tk = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_tokenizer_load(&tk, lwqt_path("a"), &e), 0, "%s", e.msg);
    lwq_token_ids ids = {0};
    const char *text = " the cat<|endoftext|>";
    int n = lwq_tokenizer_encode(tk, text, strlen(text), 1, 0, &ids, NULL, &e);
    cr_assert_eq(n, 4, "%d ids: %s", n, e.msg);
    /* " the": Ġ t h e -> Ġt, he -> Ġthe (merge 6); " cat": Ġ c a t -> Ġc (13), at (9). */
    cr_assert_eq(ids.ids[0], 256 + 6);
    cr_assert_eq(ids.ids[1], 256 + 13);
    cr_assert_eq(ids.ids[2], 256 + 9);
    cr_assert_eq(ids.ids[3], 256 + 16, "<|endoftext|> is the added special token");
    char *back = NULL;
    size_t blen = 0;
    cr_assert_eq(lwq_tokenizer_decode(tk, ids.ids, ids.n, 0, &back, &blen, &e), 0, "%s", e.msg);
    cr_assert_str_eq(back, text);
    free(back);
    lwq_token_ids_free(&ids);
    lwq_tokenizer_free(tk);
}

Test(mkmodel, tied_embeddings_omit_lm_head)
{
    const char *a[] = {"mkmodel", lwqt_path("t"), "--tie", "--layers", "1", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 0);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("t"), &c, &e), 0, "%s", e.msg);
    cr_assert(c.cfg.tie_word_embeddings);
    cr_assert_null(lwq_ckpt_find(&c, "lm_head.weight"));
    cr_assert_not_null(lwq_ckpt_find(&c, "model.embed_tokens.weight"));
    lwq_arch_report r;
    cr_assert_eq(lwq_arch_check(&c, &r, &e), 0);
    cr_assert_eq(r.n, 0);
    lwq_arch_report_free(&r);
    lwq_ckpt_free(&c);
}

/* qwen3_next: layer_types from --full-attn-every, the linear-attention geometry in config.json,
 * parameters counted from the flags, and the MTP block only with --mtp. */
Test(mkmodel, qwen3_next_round_trip_with_mtp)
{
    const char *out = lwqt_path("m");
    const char *a[] = {"mkmodel", out, "--arch", "qwen3_next", "--hidden", "64", "--layers", "4",
                       "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--experts", "4",
                       "--moe-intermediate", "32", "--shared-intermediate", "48",
                       "--linear-key-heads", "2", "--linear-value-heads", "4",
                       "--linear-key-dim", "16", "--linear-value-dim", "8", "--conv-kernel", "3",
                       "--full-attn-every", "2", "--vocab", "300", "--mtp", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 0);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(out, &c, &e), 0, "%s", e.msg);
    cr_assert_str_eq(lwq_family_name(c.cfg.family), "qwen3_next");
    cr_assert_eq(c.cfg.linear_conv_kernel_dim, 3);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(lwq_config_layer_mixer(&c.cfg, i) == LWQ_MIXER_GDN, i % 2 == 0, "layer %d", i);
    lwq_arch_report r;
    cr_assert_eq(lwq_arch_check(&c, &r, &e), 0, "no missing or mis-shaped tensor");
    cr_assert_eq(r.count[LWQ_ISSUE_UNEXPECTED], 0, "the MTP block is known to the tail plan");
    /* h=64, kd=32, vd=32: linear layer = qkvz 128x64 + ba 8x64 + conv 96x3 + A_log, dt_bias 4+4 +
     * gated norm 8 + out 64x32; full layer = q 128x64 + k,v 2x32x64 + o 64x64 + 2x16 norms;
     * MoE = 4 x 3 x 64x32 + router 4x64 + shared 3 x 64x48 + gate 64; 2 layer norms */
    int64_t lin = 128 * 64 + 8 * 64 + 96 * 3 + 8 + 8 + 64 * 32, full = 128 * 64 + 2 * 32 * 64 +
                  64 * 64 + 32, moe = 4 * 3 * 64 * 32 + 4 * 64 + 3 * 64 * 48 + 64;
    int64_t layers = 2 * lin + 2 * full + 4 * (moe + 128), tail = 2 * 300 * 64 + 64;
    int64_t mtp = 64 * 128 + 3 * 64 + full + moe + 128;
    cr_assert_eq((int64_t)c.total_bytes / 2, layers + tail + mtp);
    cr_assert_not_null(lwq_ckpt_find(&c, "mtp.layers.0.mlp.experts.3.down_proj.weight"));
    cr_assert_not_null(lwq_ckpt_find(&c, "mtp.fc.weight"));
    const lwq_ckpt_tensor *cv = lwq_ckpt_find(&c, "model.layers.0.linear_attn.conv1d.weight");
    cr_assert(cv && cv->ndim == 3 && cv->shape[0] == 96 && cv->shape[1] == 1 && cv->shape[2] == 3);
    lwq_arch_report_free(&r);
    lwq_ckpt_free(&c);
}

Test(mkmodel, mtp_is_refused_for_other_architectures)
{
    const char *a[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--mtp", NULL};
    cr_assert_eq(lwqt_run(a), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "--mtp is for --arch qwen3_next and qwen3_5* only"), "%s", err);
    free(err);
}
