/* perf/bench_qwen3next.c — CPU cost of a qwen3_next Gated DeltaNet layer against a gated
 * full-attention layer of the same model (both with the same MoE), on the CPU backend.
 *
 * Reads a checkpoint made by `lwq mkmodel --arch qwen3_next` (perf/bench_qwen3next.sh makes one),
 * holds every tensor in host memory, and times lwq_model_layer_forward on `batch` sequences of
 * `seq` tokens for the first linear-attention and the first full-attention layer, best of 3,
 * wall and process CPU time (the dev VM is shared, so CPU time is the stable figure).
 *
 * usage: bench_qwen3next MODEL_DIR [threads] [batch] [seq]   (defaults 1, 8, 256) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/parallel/parallel.h"
#include "engine/forward/forward.h"
#include "layout/checkpoint/checkpoint.h"

typedef struct src {
    lwq_ckpt ck;
    void **data;
} src;

static int get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    src *s = ctx;
    (void)e;
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&s->ck, name);
    if (!t)
        return LWQ_ENOENT;
    *out = lwq_tensor_view(s->data[t - s->ck.tensors], t->dtype, t->ndim, t->shape);
    return 0;
}

static double clk(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_qwen3next MODEL_DIR [threads] [batch] [seq]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int64_t B = argc > 3 ? atoll(argv[3]) : 8, T = argc > 4 ? atoll(argv[4]) : 256;
    lwq_error e = {0};
    src s;
    if (lwq_ckpt_open(argv[1], &s.ck, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    const lwq_model_config *c = &s.ck.cfg;
    if (!lwq_mixer_is_gdn(c->family->linear)) {
        fprintf(stderr, "%s is not a qwen3_next checkpoint\n", argv[1]);
        return 1;
    }
    s.data = calloc((size_t)s.ck.ntensors, sizeof *s.data);
    for (int i = 0; i < s.ck.ntensors; i++) {
        s.data[i] = malloc(s.ck.tensors[i].nbytes + 1);
        if (lwq_ckpt_read_tensor(&s.ck, &s.ck.tensors[i], s.data[i], &e) != 0) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
    }
    lwq_weights w = {get, &s};
    lwq_backend be;
    lwq_model m;
    lwq_batch b;
    if (lwq_backend_cpu_create(&be, threads, &e) != 0 || lwq_model_init(&m, c, &be, c->dtype, &e) != 0 ||
        lwq_batch_init(&b, &be, B, T, NULL, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    int32_t *tok = malloc((size_t)(B * T) * sizeof *tok);
    for (int64_t i = 0; i < B * T; i++)
        tok[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    int64_t shape[2] = {B * T, c->hidden_size};
    lwq_tensor h0, h;
    if (lwq_backend_tensor_alloc(&be, c->dtype, 2, shape, &h0, &e) != 0 ||
        lwq_backend_tensor_alloc(&be, c->dtype, 2, shape, &h, &e) != 0 ||
        lwq_model_embed(&m, &w, tok, &h0, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    int lin = -1, full = -1;
    for (int L = 0; L < c->num_hidden_layers; L++) {
        int is_lin = lwq_mixer_is_gdn(lwq_config_layer_mixer(c, L));
        if (is_lin && lin < 0)
            lin = L;
        if (!is_lin && full < 0)
            full = L;
    }
    printf("qwen3_next hidden %lld, linear attention %d key / %d value heads (%lld x %lld), %d heads "
           "x %lld, %d experts top-%d; %lld x %lld tokens, %d threads\n",
           (long long)c->hidden_size, c->linear_num_key_heads, c->linear_num_value_heads,
           (long long)c->linear_key_head_dim, (long long)c->linear_value_head_dim,
           c->num_attention_heads, (long long)c->head_dim, c->num_experts, c->num_experts_per_tok,
           (long long)B, (long long)T, lwq_parallel_threads());
    int layers[2] = {lin, full};
    for (int k = 0; k < 2; k++) {
        if (layers[k] < 0)
            continue;
        double bw = 1e30, bc = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            memcpy(h.data, h0.data, (size_t)(B * T * c->hidden_size) * lwq_dtype_size(c->dtype));
            double w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
            if (lwq_model_layer_forward(&m, layers[k], &w, &b, &h, NULL, &e) != 0) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            double dw = clk(CLOCK_MONOTONIC) - w0, dc = clk(CLOCK_PROCESS_CPUTIME_ID) - c0;
            bw = dw < bw ? dw : bw;
            bc = dc < bc ? dc : bc;
        }
        printf("layer %d (%s): best of 3: wall %.3f s, CPU %.3f s, %.0f tokens per CPU-s\n",
               layers[k], k == 0 ? "Gated DeltaNet + MoE" : "gated attention + MoE", bw, bc,
               (double)(B * T) / bc);
    }
    lwq_backend_tensor_free(&be, &h0);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    lwq_backend_destroy(&be);
    for (int i = 0; i < s.ck.ntensors; i++)
        free(s.data[i]);
    free(s.data);
    free(tok);
    lwq_ckpt_free(&s.ck);
    lwq_parallel_shutdown();
    return 0;
}
