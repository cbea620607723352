/* lwq's decoder layers against transformers' own, layer by layer: the forward dumps of tests/data/peers/forward (issue 34). */
/*
 * Each dump (peers/layer_dump.py, listed under "forward" in tests/data/peers/MANIFEST.json) holds
 * transformers 5.14.1's (kimi_linear: 5.23's) F32 forward of a tiny F32 source on the first calibration rows
 * (kimi_linear: also longer sequences and left-padded ones, with an attention_mask): hidden.0
 * (the embedding output) and hidden.{i+1} (decoder layer i's output), taken with hooks on the
 * decoder layers.  Here hidden.i goes through lwq's layer i (F32 activations, CPU backend) and
 * the result is compared with hidden.{i+1}: max |lwq - transformers| over the layer's output,
 * relative to its largest magnitude, within the entry's tol (1e-5).  Each layer starts from
 * transformers' input, so an error is the layer's own, not carried from the one before.  The
 * embedding is checked too (hidden.0 against lwq's).  A family lwq refuses by model_type is
 * skipped, and only that refusal.
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

static const char *data_root(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/engine/forward/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*stests/data/peers", (int)(cut - me), me);
    return path;
}

/* The MANIFEST "forward" entry whose src is src/<name> (with `dump` non-NULL: whose dump is it). */
static cJSON *entry(cJSON **m, const char *name, const char *dump)
{
    char p[1100], *s = NULL, want[128];
    lwq_error e = {0};
    snprintf(p, sizeof p, "%s/MANIFEST.json", data_root());
    cr_assert_eq(lwq_file_read_all(p, 1u << 20, &s, NULL, &e), 0, "%s", e.msg);
    *m = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(*m, "%s is not JSON", p);
    snprintf(want, sizeof want, "src/%s", name);
    const cJSON *fw = cJSON_GetObjectItem(*m, "forward");
    cr_assert(cJSON_IsArray(fw), "%s: no forward list", p);
    for (cJSON *x = fw->child; x; x = x->next) {
        const cJSON *src = cJSON_GetObjectItem(x, "src"), *d = cJSON_GetObjectItem(x, "dump");
        if (cJSON_IsString(src) && !strcmp(src->valuestring, want) &&
            (!dump || (cJSON_IsString(d) && !strcmp(d->valuestring, dump))))
            return x;
    }
    cr_assert_fail("%s: no forward entry for %s", p, want);
    return NULL;
}

/* F32 tensor `name` of the dump, its element count checked against want. */
static float *dump_tensor(const lwq_st_file *f, const char *name, int64_t want)
{
    int i = lwq_st_find(f, name);
    cr_assert_geq(i, 0, "%s: no %s", f->path, name);
    const lwq_st_entry *t = &f->entries[i];
    cr_assert(t->dtype == LWQ_F32 && lwq_st_numel(t) == want, "%s: %s is not F32 of %lld elements", f->path,
              name, (long long)want);
    float *v = malloc((size_t)want * sizeof(float));
    lwq_error e = {0};
    cr_assert_not_null(v);
    cr_assert_eq(lwq_st_read(f, f->data_start + t->begin, v, (uint64_t)want * sizeof(float), &e), 0, "%s",
                 e.msg);
    return v;
}

/* max |a - ref| / max |ref| over the rows (of D values) that valid marks (NULL: all). */
static double rel_err_rows(const float *a, const float *ref, int64_t rows, int64_t D, const uint8_t *valid)
{
    double err = 0, scale = 0;
    for (int64_t i = 0; i < rows * D; i++) {
        if (valid && !valid[i / D])
            continue;
        err = fmax(err, fabs((double)a[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    return scale > 0 ? err / scale : err;
}

static void check_dump(const char *src, const char *dump_rel)
{
    cJSON *m;
    const cJSON *x = entry(&m, src, dump_rel);
    const cJSON *dump = cJSON_GetObjectItem(x, "dump"), *tol = cJSON_GetObjectItem(x, "tol");
    cr_assert(cJSON_IsString(dump) && cJSON_IsNumber(tol) && tol->valuedouble > 0 && tol->valuedouble < 1e-3,
              "MANIFEST.json: bad forward entry for %s", src);
    char dir[1100], path[1200];
    snprintf(dir, sizeof dir, "%s/src/%s", data_root(), src);
    snprintf(path, sizeof path, "%s/%s", data_root(), dump->valuestring);

    lwq_error e = {0};
    fwd_fixture f;
    int rc = fwd_fixture_open(&f, dir, NULL, &e);
    if (rc == LWQ_EUNSUPPORTED && strstr(e.msg, "unknown model_type")) {
        cJSON_Delete(m);
        fwd_fixture_free(&f);
        cr_skip_test("lwq refuses %s: %s", src, e.msg);
    }
    cr_assert_eq(rc, 0, "%s: %s", src, e.msg);
    const lwq_model_config *c = &f.ck.cfg;
    lwq_st_file d;
    cr_assert_eq(lwq_st_open(path, &d, &e), 0, "%s", e.msg);
    int ii = lwq_st_find(&d, "input_ids");
    cr_assert(ii >= 0 && d.entries[ii].ndim == 2 && d.entries[ii].dtype == LWQ_I32, "%s: no input_ids (I32, 2-D)",
              path);
    const int64_t nseq = d.entries[ii].shape[0], T = d.entries[ii].shape[1], n = nseq * T, D = c->hidden_size;
    cr_assert(nseq > 0 && T > 0 && n <= 4096, "%s: %lld x %lld tokens", path, (long long)nseq, (long long)T);
    int32_t *tok = malloc((size_t)n * sizeof(int32_t));
    cr_assert_not_null(tok);
    cr_assert_eq(lwq_st_read(&d, d.data_start + d.entries[ii].begin, tok, (uint64_t)n * sizeof(int32_t), &e), 0,
                 "%s", e.msg);

    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0, "%s", e.msg);
    lwq_model mod;
    cr_assert_eq(lwq_model_init(&mod, c, &be, LWQ_F32, &e), 0, "%s", e.msg);
    /* a left-padded dump: attention_mask 0 then 1 on each row; only its real rows are compared */
    int64_t *lengths = NULL;
    int mi = lwq_st_find(&d, "attention_mask");
    if (mi >= 0) {
        cr_assert(d.entries[mi].dtype == LWQ_I32 && lwq_st_numel(&d.entries[mi]) == n, "%s: bad attention_mask", path);
        int32_t *mask = malloc((size_t)n * sizeof(int32_t));
        lengths = malloc((size_t)nseq * sizeof(int64_t));
        cr_assert(mask && lengths);
        cr_assert_eq(lwq_st_read(&d, d.data_start + d.entries[mi].begin, mask, (uint64_t)n * sizeof(int32_t), &e), 0,
                     "%s", e.msg);
        for (int64_t s = 0; s < nseq; s++) {
            lengths[s] = 0;
            for (int64_t t = 0; t < T; t++)
                lengths[s] += mask[s * T + t] != 0;
            for (int64_t t = 0; t < T; t++)
                cr_assert_eq(mask[s * T + t] != 0, t >= T - lengths[s], "%s: sequence %lld is not left-padded", path,
                             (long long)s);
        }
        free(mask);
    }
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, nseq, T, lengths, &e), 0, "%s", e.msg);
    free(lengths);
    const uint8_t *valid = mi >= 0 ? b.valid_host : NULL;
    int64_t shape[2] = {n, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, shape, &h, &e), 0, "%s", e.msg);
    float *ours = malloc((size_t)(n * D) * sizeof(float));
    cr_assert_not_null(ours);

    char name[64];
    float *ref = dump_tensor(&d, "hidden.0", n * D);
    cr_assert_eq(lwq_model_embed(&mod, &f.w, tok, &h, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_download(&be, ours, h.data, (size_t)(n * D) * sizeof(float), &e), 0, "%s", e.msg);
    double worst = rel_err_rows(ours, ref, n, D, valid);
    cr_assert(worst <= tol->valuedouble, "%s: embedding differs from transformers' by %.3g", src, worst);
    for (int L = 0; L < c->num_hidden_layers; L++) {
        cr_assert_eq(lwq_backend_upload(&be, h.data, ref, (size_t)(n * D) * sizeof(float), &e), 0, "%s", e.msg);
        free(ref);
        snprintf(name, sizeof name, "hidden.%d", L + 1);
        ref = dump_tensor(&d, name, n * D);
        cr_assert_eq(lwq_model_layer_forward(&mod, L, &f.w, &b, &h, NULL, &e), 0, "%s layer %d: %s", src, L,
                     e.msg);
        cr_assert_eq(lwq_backend_download(&be, ours, h.data, (size_t)(n * D) * sizeof(float), &e), 0, "%s",
                     e.msg);
        double err = rel_err_rows(ours, ref, n, D, valid);
        printf("forward dumps: %s layer %d: %.3g relative to its largest output (bound %.1g)\n", src, L, err,
               tol->valuedouble);
        fflush(stdout);
        cr_assert(err <= tol->valuedouble, "%s: layer %d's output differs from transformers' by %.3g (bound %.1g)",
                  src, L, err, tol->valuedouble);
        worst = fmax(worst, err);
    }
    free(ref);
    free(ours);
    free(tok);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&mod);
    lwq_backend_destroy(&be);
    lwq_st_free(&d);
    fwd_fixture_free(&f);
    cJSON_Delete(m);
}

static void check_family(const char *src) { check_dump(src, NULL); }

Test(forward_peer_dumps, glm4_moe) { check_family("glm4_moe-f32"); }
Test(forward_peer_dumps, minimax_m2) { check_family("minimax_m2-f32"); }
Test(forward_peer_dumps, deepseek_v32) { check_family("deepseek_v32-f32"); }
Test(forward_peer_dumps, glm_moe_dsa) { check_family("glm_moe_dsa-f32"); }
Test(forward_peer_dumps, mistral4) { check_family("mistral4-f32"); }
/* DeepSeek-V3 routing where the chosen group holds fewer than top-k experts with a positive biased
 * score (peers/make_group_mask_source.py): transformers 5.14.1 fills the unchosen groups' scores
 * with -inf, so the second expert comes from the chosen group.  Before, lwq's deepseek_v3 and
 * kimi_k2 rows filled 0.0 and took expert 4 of the other group for every token. */
Test(forward_peer_dumps, deepseek_v3_group_mask) { check_family("deepseek_v3_group_mask-f32"); }
/* transformers 5.14.1 reads a kimi_k2 text config as deepseek_v3 (Kimi-K2.5's wrapper does): the
 * same dump */
Test(forward_peer_dumps, kimi_k2_group_mask) { check_family("kimi_k2_group_mask-f32"); }
/* kimi_linear (issue 35): KDA + NoPE MLA + DeepSeek-V3 MoE, transformers 5.23's forward; within one
 * 64-token chunk of its chunked delta rule, across two and three chunks, and left-padded */
Test(forward_peer_dumps, kimi_linear_calib_rows) { check_dump("kimi_linear-f32", "forward/kimi_linear-f32.safetensors"); }
Test(forward_peer_dumps, kimi_linear_two_chunks) { check_dump("kimi_linear-f32", "forward/kimi_linear-f32-t80.safetensors"); }
Test(forward_peer_dumps, kimi_linear_left_padded)
{
    check_dump("kimi_linear-f32", "forward/kimi_linear-f32-t80-pad.safetensors");
}
Test(forward_peer_dumps, kimi_linear_three_chunks_padded)
{
    check_dump("kimi_linear-f32", "forward/kimi_linear-f32-t130-pad.safetensors");
}

/* nemotron_h (issue 35): the Mamba2 scan, NoPE attention, ReLU^2 MLP and MoE, on sequences of
 * 32 and 7 tokens and left-padded by 0, 15, 27 and 31 tokens; the latent-MoE model. */
Test(forward_peer_dumps, nemotron_h) { check_dump("nemotron_h-f32", "forward/nemotron_h-f32.safetensors"); }
Test(forward_peer_dumps, nemotron_h_short) { check_dump("nemotron_h-f32", "forward/nemotron_h-f32-len7.safetensors"); }
Test(forward_peer_dumps, nemotron_h_left_padded)
{
    check_dump("nemotron_h-f32", "forward/nemotron_h-f32-padded.safetensors");
}
Test(forward_peer_dumps, nemotron_h_latent)
{
    check_dump("nemotron_h_latent-f32", "forward/nemotron_h_latent-f32.safetensors");
}
