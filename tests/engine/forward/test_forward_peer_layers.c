/* lwq's forward of the qwen3_5 goldens' sources, layer by layer, against transformers' own forward of the same layers (tests/data/peers/layers, F32, 1e-5). */
/*
 * peers/layer_dump.py ran transformers 5.14.1 on tests/data/peers/src/<src> (F32) over the first
 * two calibration sequences and stored, per decoder layer, the hidden state entering it
 * (hidden.i) and leaving it (hidden.{i+1}), with hooks on transformers' decoder layers.  Here each
 * of lwq's layers gets transformers' hidden.i as its input, so the bound is per layer, not
 * compounded: a Gated DeltaNet layer (split in_proj_qkv / z / b / a, causal conv, the chunked
 * delta rule) and a gated full-attention layer (partial rotary through the text-only mRoPE), each
 * with the dense or the routed + gated shared expert MLP.
 *
 * Error per token: max_d |lwq - ref| / max_d |ref|; bound 1e-5 (F32 activations: every op f32
 * with f32 accumulation over <= 64 terms, ~20 ops in sequence: a few 1e-7; a semantic slip, a
 * wrong norm offset, gate or RoPE pairing, moves outputs by 1e-2 or more).  The embedding is
 * compared too (a lookup: exact).
 *
 * While lwq itself refuses the source's model_type ("unknown model_type 'M'", from its config
 * parser) a test skips, saying so; any other failure is a failure.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/file.h"
#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/model/fwd_fixture.h"

#define BOUND 1e-5

static const char *peers_dir(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/engine/forward/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*stests/data/peers", (int)(cut - me), me);
    return path;
}

/* The tensor `name` of the dump (dtype and element count checked), malloc'd. */
static void *dump_tensor(const lwq_st_file *f, const char *name, lwq_dtype dt, int64_t numel)
{
    int i = lwq_st_find(f, name);
    cr_assert_geq(i, 0, "%s: no tensor %s", f->path, name);
    const lwq_st_entry *t = &f->entries[i];
    cr_assert(t->dtype == dt && lwq_st_numel(t) == numel, "%s: %s is %s x %lld, expected %s x %lld", f->path, name,
              lwq_dtype_name(t->dtype), (long long)lwq_st_numel(t), lwq_dtype_name(dt), (long long)numel);
    void *p = malloc(t->end - t->begin);
    lwq_error e = {0};
    cr_assert_eq(lwq_st_read(f, f->data_start + t->begin, p, t->end - t->begin, &e), 0, "%s", e.msg);
    return p;
}

/* Worst per-token relative error of h (F32, n x d) against ref. */
static double worst_rel(const float *h, const float *ref, int64_t n, int64_t d)
{
    double worst = 0;
    for (int64_t t = 0; t < n; t++) {
        double scale = 0, err = 0;
        for (int64_t i = 0; i < d; i++) {
            scale = fmax(scale, fabs(ref[t * d + i]));
            err = fmax(err, fabs((double)h[t * d + i] - ref[t * d + i]));
        }
        worst = fmax(worst, scale > 0 ? err / scale : err);
    }
    return worst;
}

/* Skip while lwq refuses the source's model_type; fail on any other error.  Returns 0 when the
 * checkpoint opened. */
static int open_or_skip(fwd_fixture *f, const char *dir)
{
    lwq_error e = {0};
    int rc = fwd_fixture_open(f, dir, NULL, &e);
    if (rc == 0)
        return 0;
    char p[1200], *s = NULL, want[200] = "";
    lwq_error e2 = {0};
    snprintf(p, sizeof p, "%s/config.json", dir);
    cr_assert_eq(lwq_file_read_all(p, 1u << 20, &s, NULL, &e2), 0, "%s", e2.msg);
    cJSON *j = cJSON_Parse(s);
    free(s);
    const cJSON *mt = cJSON_GetObjectItem(j, "model_type");
    cr_assert(cJSON_IsString(mt), "%s: no model_type", p);
    snprintf(want, sizeof want, "unknown model_type '%s'", mt->valuestring);
    cJSON_Delete(j);
    cr_assert(rc == LWQ_EUNSUPPORTED && strstr(e.msg, want), "%s: %s", dir, e.msg);
    fwd_fixture_free(f);
    cr_skip_test("lwq refuses the model_type: %s", e.msg);
    return -1;
}

static void run(const char *src)
{
    char dir[1100], dump[1100];
    snprintf(dir, sizeof dir, "%s/src/%s", peers_dir(), src);
    snprintf(dump, sizeof dump, "%s/layers/%s.safetensors", peers_dir(), src);
    lwq_error e = {0};
    fwd_fixture f;
    if (open_or_skip(&f, dir))
        return;
    const lwq_model_config *c = &f.ck.cfg;
    lwq_st_file df;
    cr_assert_eq(lwq_st_open(dump, &df, &e), 0, "%s", e.msg);
    int it = lwq_st_find(&df, "input_ids");
    cr_assert_geq(it, 0, "%s: no input_ids", dump);
    cr_assert_eq(df.entries[it].ndim, 2, "%s: input_ids is not (seqs, T)", dump);
    const int64_t B = df.entries[it].shape[0], T = df.entries[it].shape[1], D = c->hidden_size, N = B * T;
    cr_assert(B > 0 && T > 0 && B * T <= 4096, "%s: input_ids is %lld x %lld", dump, (long long)B, (long long)T);
    int32_t *tok = dump_tensor(&df, "input_ids", LWQ_I32, N);

    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0, "%s", e.msg);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, c, &be, LWQ_F32, &e), 0, "%s: %s", src, e.msg);
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, B, T, NULL, &e), 0, "%s", e.msg);
    int64_t shape[2] = {N, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, shape, &h, &e), 0, "%s", e.msg);

    float *ref = dump_tensor(&df, "hidden.0", LWQ_F32, N * D);
    cr_assert_eq(lwq_model_embed(&m, &f.w, tok, &h, &e), 0, "%s: %s", src, e.msg);
    double w = worst_rel(h.data, ref, N, D);
    fprintf(stderr, "%s embedding: max relative error %.3g\n", src, w);
    cr_assert_eq(w, 0.0, "%s: the embedding differs from transformers' (%.3g)", src, w);
    for (int layer = 0; layer < c->num_hidden_layers; layer++) {
        char name[64];
        memcpy(h.data, ref, (size_t)(N * D) * sizeof(float)); /* transformers' input to this layer */
        free(ref);
        snprintf(name, sizeof name, "hidden.%d", layer + 1);
        ref = dump_tensor(&df, name, LWQ_F32, N * D);
        cr_assert_eq(lwq_model_layer_forward(&m, layer, &f.w, &b, &h, NULL, &e), 0, "%s layer %d: %s", src, layer,
                     e.msg);
        w = worst_rel(h.data, ref, N, D);
        fprintf(stderr, "%s layer %d: max relative error %.3g (bound %.0e)\n", src, layer, w, BOUND);
        cr_assert(w <= BOUND, "%s layer %d: lwq's output is %.3g from transformers' (bound %.0e)", src, layer, w,
                  BOUND);
    }
    free(ref);
    free(tok);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    lwq_backend_destroy(&be);
    lwq_st_free(&df);
    fwd_fixture_free(&f);
}

/* Qwen3_5ForConditionalGeneration: model.language_model.layers, model.visual and mtp beside them */
Test(forward_peer_layers, qwen3_5_vlm, .timeout = 120) { run("qwen3_5-f32"); }
/* Qwen3_5MoeForConditionalGeneration: fused 3-D experts on disk, routed + gated shared expert */
Test(forward_peer_layers, qwen3_5_moe_vlm, .timeout = 120) { run("qwen3_5_moe-f32"); }
/* Qwen3_5ForCausalLM: model.layers */
Test(forward_peer_layers, qwen3_5_text, .timeout = 120) { run("qwen3_5_text-f32"); }
/* Qwen3_5MoeForCausalLM: experts per expert on disk (transformers' default save) */
Test(forward_peer_layers, qwen3_5_moe_text, .timeout = 120) { run("qwen3_5_moe_text-f32"); }
/* families lwq already has, through the same dumps: qwen3_next (interleaved in_proj_qkvz / ba,
 * the block qwen3_5 splits) and qwen3_moe */
Test(forward_peer_layers, qwen3_next, .timeout = 120) { run("qwen3_next-f32"); }
Test(forward_peer_layers, qwen3_moe, .timeout = 120) { run("qwen3_moe-f32"); }
