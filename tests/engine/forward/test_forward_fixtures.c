/* Whole-model logits of the cai-tiny-* fixtures against transformers' float64 logits
 * (reference_logits.json: all 3 sequences of 16 tokens, run here as one batch).
 *
 * Error measure, per token: max_v |ours - ref| / max(1, max_v |ref|) (the logit vector's error
 * relative to its scale; logits near 0 make a per-element ratio meaningless).  We report the max
 * over all tokens.  Bound for F32 weights run with F32 activations: 1e-5.  Why: every op is f32
 * with f32 accumulation over at most a few dozen terms (hidden 8, intermediate 12, 16 keys), so
 * each op's relative error is a few f32 ulps (~1e-7 each); through 2 layers of ~15 ops with unit
 * scale activations the accumulated error stays ~1e-6, and 1e-5 leaves a 10x margin while
 * catching any semantic slip (a wrong rope pairing, eps, or routing changes logits by >1e-3).
 * smollm2 has BF16 weights: run with F32 activations it is exactly transformers' float64 model
 * up to f32 rounding (same 1e-5 bound); run with BF16 activations (as transformers would in
 * bfloat16) each op rounds to 8 mantissa bits (2^-9 relative), ~30 roundings in sequence plus
 * the residual stream's growth give a few 1e-2 at most: bound 5e-2. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/model/fwd_fixture.h"

static double run_logits(const char *fixture, lwq_dtype act, int *nchecked)
{
    char dir[1024], cfgp[1200], refdir[1024];
    lwq_error e = {0};
    /* the 2-shard variant lives in a subfolder without its own config/reference */
    const char *sub = strchr(fixture, '/');
    char base[256];
    snprintf(base, sizeof base, "%.*s", sub ? (int)(sub - fixture) : (int)strlen(fixture), fixture);
    fwd_fixture_dir(fixture, dir, sizeof dir);
    fwd_fixture_dir(base, refdir, sizeof refdir);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", refdir);
    lwq_backend be;
    fwd_fixture f;
    fwd_ref r;
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0);
    cr_assert_eq(fwd_fixture_open(&f, dir, cfgp, &e), 0, "%s", e.msg);
    const lwq_model_config *c = &f.ck.cfg;
    cr_assert_eq(fwd_ref_load(refdir, c->vocab_size, &r, &e), 0, "%s", e.msg);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, c, &be, act, &e), 0, "%s", e.msg);
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, r.nseq, r.len, NULL, &e), 0, "%s", e.msg);
    int64_t n = (int64_t)r.nseq * r.len, shape[2] = {n, c->vocab_size};
    lwq_tensor logits;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, act, 2, shape, &logits, &e), 0);
    cr_assert_eq(lwq_model_forward(&m, &f.w, r.tokens, &b, &logits, NULL, &e), 0, "%s", e.msg);
    double worst = 0;
    for (int64_t t = 0; t < n; t++) {
        double scale = 1, err = 0;
        for (int64_t v = 0; v < c->vocab_size; v++)
            scale = fmax(scale, fabs(r.logits[t * c->vocab_size + v]));
        for (int64_t v = 0; v < c->vocab_size; v++) {
            double ours = lwq_load_f(logits.data, act, (size_t)(t * c->vocab_size + v));
            err = fmax(err, fabs(ours - r.logits[t * c->vocab_size + v]));
        }
        worst = fmax(worst, err / scale);
    }
    *nchecked = (int)n;
    lwq_backend_tensor_free(&be, &logits);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    fwd_ref_free(&r);
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
    return worst;
}

static void check(const char *fixture, lwq_dtype act, double bound)
{
    int n;
    double err = run_logits(fixture, act, &n);
    cr_log_info("%s (%s activations): max relative logit error %.3g over %d tokens", fixture,
                lwq_dtype_name(act), err, n);
    fprintf(stderr, "%s (%s activations): max relative logit error %.3g over %d tokens\n",
            fixture, lwq_dtype_name(act), err, n);
    cr_assert(err <= bound, "%s: max relative logit error %.3g exceeds %.1g", fixture, err, bound);
}

Test(forward_fixtures, llama_f32) { check("cai-tiny-llama", LWQ_F32, 1e-5); }
Test(forward_fixtures, llama_two_shards) { check("cai-tiny-llama/sharded", LWQ_F32, 1e-5); }
Test(forward_fixtures, smollm2_tied_bf16_weights_f32_act) { check("cai-tiny-smollm2", LWQ_F32, 1e-5); }
Test(forward_fixtures, smollm2_tied_bf16_activations) { check("cai-tiny-smollm2", LWQ_BF16, 5e-2); }
Test(forward_fixtures, qwen2_qkv_bias) { check("cai-tiny-qwen2", LWQ_F32, 1e-5); }
Test(forward_fixtures, qwen3_qk_norm) { check("cai-tiny-qwen3", LWQ_F32, 1e-5); }
Test(forward_fixtures, qwen3_moe) { check("cai-tiny-qwen3-moe", LWQ_F32, 1e-5); }
Test(forward_fixtures, mixtral) { check("cai-tiny-mixtral", LWQ_F32, 1e-5); }
/* MLA (q_proj path, nope/rope split, interleaved RoPE, v_head_dim != qk head), a dense first
 * layer, then softmax-greedy routing with routed_scaling_factor 1.5 and two shared experts. */
Test(forward_fixtures, deepseek_v2_mla) { check("cai-tiny-deepseek-v2", LWQ_F32, 1e-5); }
/* The same with BF16 activations (the head split / assembly copies and RoPE round to BF16): the
 * smollm2 BF16 bound. */
Test(forward_fixtures, deepseek_v2_mla_bf16_activations)
{
    check("cai-tiny-deepseek-v2", LWQ_BF16, 5e-2);
}

Test(forward_fixtures, unsupported_model_type_is_refused_with_the_list)
{
    lwq_error e = {0};
    lwq_backend be;
    fwd_fixture f;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    char dir[1024];
    cr_assert_eq(fwd_fixture_open(&f, fwd_fixture_dir("cai-tiny-llama", dir, sizeof dir), NULL, &e),
                 0, "%s", e.msg);
    /* every parsed model_type now has a forward: stand in a config without a family row */
    const lwq_family *fam = f.ck.cfg.family;
    f.ck.cfg.family = NULL;
    snprintf(f.ck.cfg.model_type, sizeof f.ck.cfg.model_type, "gpt2");
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, &f.ck.cfg, &be, LWQ_F32, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "model_type 'gpt2' has no forward in lwq (supported: llama, "
                            "mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2"), "%s", e.msg);
    f.ck.cfg.family = fam;
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
}
