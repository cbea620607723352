/* tests/helpers/model/llama2c.h — the trained llama2.c checkpoint of the fixtures
 * (llama2c-stories260K-raw/stories260K.bin) as a test model: load it, convert it into a Hugging
 * Face LlamaForCausalLM checkpoint (config.json + model.safetensors, F32, tied embeddings), and
 * run it in float64 with llama2.c's own semantics (interleaved-pair RoPE on the unpermuted q/k),
 * a reference that shares no code with lwq's forward.  Test-only.
 *
 * Conversion (the fixture's PROVENANCE.md): w1 -> mlp.gate_proj, w2 -> mlp.down_proj, w3 ->
 * mlp.up_proj, rms_att -> input_layernorm, rms_ffn -> post_attention_layernorm, rms_final ->
 * model.norm; wq and wk are permuted from llama2.c's interleaved rotary pairs to transformers'
 * rotate_half layout: HF row (h, r, i) = llama2.c row (h, i, r) for head h, pair i, half r
 * (transformers' convert_llama_weights_to_hf `permute`).  The legacy freq_cis arrays are skipped;
 * the classifier is the embedding (vocab_size > 0 in the header), so no lm_head.weight is
 * written and config.json says tie_word_embeddings.
 *
 * Errors: a negative LWQ_E* code with the file named; a file whose size is not exactly the
 * header's arrays is refused. */
#ifndef LWQ_TESTS_LLAMA2C_H
#define LWQ_TESTS_LLAMA2C_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/sys/error.h"
#include "tests/helpers/fixtures.h"

typedef struct llama2c_model {
    int dim, hidden, nlayers, nheads, nkv, vocab, seq_len;
    float *data;  /* every array of the file after the header, owned */
    /* views into data, llama2.c layout: per layer arrays are stacked [nlayers, ...] */
    const float *emb;      /* (vocab, dim) */
    const float *rms_att;  /* (nlayers, dim) */
    const float *wq;       /* (nlayers, dim, dim) */
    const float *wk, *wv;  /* (nlayers, nkv*hd, dim) */
    const float *wo;       /* (nlayers, dim, dim) */
    const float *rms_ffn;  /* (nlayers, dim) */
    const float *w1, *w3;  /* (nlayers, hidden, dim) */
    const float *w2;       /* (nlayers, dim, hidden) */
    const float *rms_final;/* (dim) */
} llama2c_model;

/* Path of the fixture's stories260K.bin (tests/helpers/fixtures.h: $LWQ_FIXTURES, then
 * ../shared/fixtures), or NULL with `why` filled when it is absent. */
static inline const char *llama2c_fixture_path(char *buf, size_t cap, char *why, size_t why_cap)
{
    const char *p = lwqt_fixture_find("llama2c-stories260K-raw/stories260K.bin");
    if (!p) {
        snprintf(why, why_cap, "fixture llama2c-stories260K-raw/stories260K.bin not found (looked in %s); see "
                 "README, Test fixtures", lwqt_fixture_roots());
        return NULL;
    }
    snprintf(buf, cap, "%s", p);
    return buf;
}

int llama2c_load(const char *path, llama2c_model *m, lwq_error *e);
void llama2c_free(llama2c_model *m);

/* Write out_dir/config.json and out_dir/model.safetensors (out_dir must exist). */
int llama2c_to_hf(const llama2c_model *m, const char *out_dir, lwq_error *e);

/* Float64 forward of one sequence (positions 0..len-1): logits (len, vocab). */
int llama2c_logits64(const llama2c_model *m, const int32_t *tokens, int len, double *logits);

/* Sample `len` tokens from the model itself, starting with `first`, with a fixed-seed
 * generator (xorshift64*, temperature 1, float64 probabilities): out[0] = first. */
int llama2c_sample(const llama2c_model *m, uint64_t seed, int32_t first, int len, int32_t *out);

/* nseq sequences of len tokens sampled from the model (seeds seed + 7919 s, first token 1) as
 * .jsonl lines {"input_ids": [...]} in `path`: the model has no tokenizer, so calibration and eval
 * sets are its own samples.  0 or a negative LWQ_E* code. */
int llama2c_write_samples(const llama2c_model *m, const char *path, uint64_t seed, int nseq, int len);

/* FP8 W8A8 with an FP8 KV cache, emulated inside the float64 reference (no lwq code): every
 * linear weight per tensor e4m3(w / ws) * ws with ws = amax(w) / 448 (f32); every linear input
 * e4m3(x / s) * s with s = amax / 448 from llama2c_fp8_calibrate; k (after RoPE) and v rounded
 * to E4M3 with scale 1 (cast mode).  amax: (nlayers, 4) maxima of |x| at the inputs of q/k/v,
 * o, gate/up and down over every token of the nseq sequences of len tokens. */
int llama2c_fp8_calibrate(const llama2c_model *m, const int32_t *tokens, int nseq, int len, double *amax);
int llama2c_logits64_fp8(const llama2c_model *m, const double *amax, const int32_t *tokens, int len, double *logits);

#endif
