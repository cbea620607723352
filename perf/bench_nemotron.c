/* perf/bench_nemotron.c — CPU cost per token of a nemotron_h Mamba2 layer (its conv1d, SSD scan and
 * gated norm run on the host, engine/forward/model_nemotron.c) against a NoPE attention layer of the
 * same model, on the CPU backend, and how much of the Mamba2 layer is the scan part.
 *
 * Reads a nemotron_h checkpoint (perf/bench_nemotron.sh writes a Nemotron-shaped one with
 * transformers), holds every tensor in host memory, checks that a layer forward is deterministic
 * (two runs, the same bytes) before timing, then times, best of 3, wall and process CPU time:
 *   mamba   lwq_model_layer_forward of the first Mamba2 layer (norm, in_proj, conv, scan, gated
 *           norm, out_proj, residual)
 *   gemms   that layer's two GEMMs alone (in_proj and out_proj on the same rows)
 *   attn    lwq_model_layer_forward of the first attention layer (norm, q/k/v/o, causal GQA)
 *   op      the backend's mamba2 op alone on that layer's in_proj output (conv1d, dt, scan, gated
 *           norm and its dtype conversions), with the scan kernel of the automatic choice, and
 *           again with the portable (scalar) scan kernel forced: their difference is what the
 *           vector scan saves; both must give the same bytes (checked)
 * and prints per token: mamba, gemms, mamba - gemms (the host part: conv1d, scan, gated norm,
 * the transfers and the norm/residual, which the attention layer has too), attn, op, and the ratios.
 * The dev VM is shared: CPU time is the stable figure, and only ratios of one run are compared.
 *
 * usage: bench_nemotron MODEL_DIR [threads] [batch] [seq]   (defaults 1, 4, 512) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/parallel/parallel.h"
#include "engine/forward/forward.h"
#include "kernels/cpu/gemm/gemm_isa.h"
#include "layout/checkpoint/checkpoint.h"

typedef struct src {
    lwq_ckpt ck;
    void **data;
} src;

static int get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    src *s = ctx;
    (void)e;
    char full[512];
    lwq_names_full(&s->ck.cfg.names, name, full, sizeof full);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&s->ck, full);
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

typedef struct best {
    double wall, cpu;
} best;

static void take(best *b, double w0, double c0)
{
    double w = clk(CLOCK_MONOTONIC) - w0, c = clk(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (b->wall == 0 || w < b->wall)
        b->wall = w;
    if (b->cpu == 0 || c < b->cpu)
        b->cpu = c;
}

static int die(const lwq_error *e)
{
    fprintf(stderr, "bench_nemotron: %s\n", e->msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_nemotron MODEL_DIR [threads] [batch] [seq]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int64_t B = argc > 3 ? atoll(argv[3]) : 4, T = argc > 4 ? atoll(argv[4]) : 512;
    lwq_error e = {0};
    src s;
    if (lwq_ckpt_open(argv[1], &s.ck, &e) != 0)
        return die(&e);
    const lwq_model_config *c = &s.ck.cfg;
    if (!c->family || !c->family->single) {
        fprintf(stderr, "bench_nemotron: %s is not a nemotron_h checkpoint\n", argv[1]);
        return 1;
    }
    int lm = -1, la = -1;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        lwq_mixer_kind k = lwq_config_layer_mixer(c, i);
        if (!lwq_config_layer_is_moe(c, i) && k == LWQ_MIXER_MAMBA2 && lm < 0)
            lm = i;
        if (!lwq_config_layer_is_moe(c, i) && k == LWQ_MIXER_GQA && la < 0)
            la = i;
    }
    if (lm < 0 || la < 0) {
        fprintf(stderr, "bench_nemotron: %s needs a Mamba2 and an attention layer\n", argv[1]);
        return 1;
    }
    s.data = calloc((size_t)s.ck.ntensors, sizeof *s.data);
    uint64_t bytes = 0;
    for (int i = 0; i < s.ck.ntensors; i++) {
        s.data[i] = malloc(s.ck.tensors[i].nbytes + 1);
        bytes += s.ck.tensors[i].nbytes;
        if (!s.data[i] || lwq_ckpt_read_tensor(&s.ck, &s.ck.tensors[i], s.data[i], &e) != 0)
            return die(&e);
    }
    lwq_weights w = {get, &s};
    lwq_backend be;
    lwq_model m;
    lwq_batch b;
    if (lwq_backend_cpu_create(&be, threads, &e) != 0 || lwq_model_init(&m, c, &be, c->dtype, &e) != 0 ||
        lwq_batch_init(&b, &be, B, T, NULL, &e) != 0)
        return die(&e);
    const int64_t n = B * T, D = c->hidden_size, H = c->mamba_num_heads, I = H * c->mamba_head_dim;
    const int64_t W = 2 * I + 2 * (int64_t)c->mamba_n_groups * c->ssm_state_size + H;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int64_t i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    int64_t sh[2] = {n, D}, sp[2] = {n, W}, sc[2] = {n, I};
    lwq_tensor h0, h, proj, core, win, wout;
    if (lwq_backend_tensor_alloc(&be, m.act, 2, sh, &h0, &e) || lwq_backend_tensor_alloc(&be, m.act, 2, sh, &h, &e) ||
        lwq_backend_tensor_alloc(&be, m.act, 2, sp, &proj, &e) ||
        lwq_backend_tensor_alloc(&be, m.act, 2, sc, &core, &e) || lwq_model_embed(&m, &w, tok, &h0, &e))
        return die(&e);
    char nm[128];
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.in_proj.weight", lm);
    if (get(&s, nm, &win, &e))
        return fprintf(stderr, "bench_nemotron: no %s\n", nm), 1;
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.out_proj.weight", lm);
    if (get(&s, nm, &wout, &e))
        return fprintf(stderr, "bench_nemotron: no %s\n", nm), 1;
    lwq_tensor wconv, bconv, alog, dtb, dd, wn;
    const char *mw[] = {"conv1d.weight", "conv1d.bias", "A_log", "dt_bias", "D", "norm.weight"};
    lwq_tensor *mt[] = {&wconv, &bconv, &alog, &dtb, &dd, &wn};
    for (int i = 0; i < 6; i++) {
        snprintf(nm, sizeof nm, "model.layers.%d.mixer.%s", lm, mw[i]);
        if (get(&s, nm, mt[i], &e) && !(i == 1 && !c->mamba_conv_bias))
            return fprintf(stderr, "bench_nemotron: no %s\n", nm), 1;
    }
    lwq_mamba2_args op = {.proj = &proj, .conv_w = &wconv, .conv_b = c->mamba_conv_bias ? &bconv : NULL,
                          .a_log = &alog, .dt_bias = &dtb, .d = &dd, .norm_w = &wn, .valid = &b.valid,
                          .out = &core, .batch = B, .seq = T, .heads = H, .head_dim = c->mamba_head_dim,
                          .state = c->ssm_state_size, .groups = c->mamba_n_groups, .kernel = c->mamba_conv_kernel,
                          .eps = (float)c->rms_norm_eps, .dt_min = (float)c->time_step_min};
    memset(core.data, 0, (size_t)(n * I) * lwq_dtype_size(core.dtype));
    const size_t hb = (size_t)(n * D) * lwq_dtype_size(m.act);
    /* correctness before timing: the Mamba2 layer twice on the same input gives the same bytes */
    void *ref = malloc(hb);
    for (int k = 0; k < 2; k++) {
        memcpy(h.data, h0.data, hb);
        if (lwq_model_layer_forward(&m, lm, &w, &b, &h, NULL, &e))
            return die(&e);
        if (k == 0)
            memcpy(ref, h.data, hb);
        else if (memcmp(ref, h.data, hb)) {
            fprintf(stderr, "bench_nemotron: the Mamba2 layer is not deterministic\n");
            return 1;
        }
    }
    /* the op alone: the automatic scan kernel and the portable one give the same bytes */
    const char *kname = lwq_cpu_kernels_get()->name;
    const size_t cb = (size_t)(n * I) * lwq_dtype_size(core.dtype);
    void *cref = malloc(cb);
    if (lwq_backend_gemm(&be, &h0, &win, NULL, &proj, &e) || lwq_backend_mamba2(&be, &op, &e))
        return die(&e);
    memcpy(cref, core.data, cb);
    if (lwq_cpu_kernels_force("portable") || lwq_backend_mamba2(&be, &op, &e) || lwq_cpu_kernels_force(NULL))
        return fprintf(stderr, "bench_nemotron: the portable mamba2 op failed: %s\n", e.msg), 1;
    if (memcmp(cref, core.data, cb)) {
        fprintf(stderr, "bench_nemotron: the %s and portable scans differ\n", kname);
        return 1;
    }
    best bo = {0}, bp = {0};
    best bm = {0}, bg = {0}, ba = {0};
    for (int rep = 0; rep < 3; rep++) {
        memcpy(h.data, h0.data, hb);
        double w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
        if (lwq_model_layer_forward(&m, lm, &w, &b, &h, NULL, &e))
            return die(&e);
        take(&bm, w0, c0);
        w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
        if (lwq_backend_gemm(&be, &h0, &win, NULL, &proj, &e) || lwq_backend_gemm(&be, &core, &wout, NULL, &h, &e))
            return die(&e);
        take(&bg, w0, c0);
        memcpy(h.data, h0.data, hb);
        w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
        if (lwq_model_layer_forward(&m, la, &w, &b, &h, NULL, &e))
            return die(&e);
        take(&ba, w0, c0);
        w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
        if (lwq_backend_mamba2(&be, &op, &e))
            return die(&e);
        take(&bo, w0, c0);
        lwq_cpu_kernels_force("portable");
        w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
        if (lwq_backend_mamba2(&be, &op, &e))
            return die(&e);
        take(&bp, w0, c0);
        lwq_cpu_kernels_force(NULL);
    }
    const double us = 1e6 / (double)n;
    printf("bench_nemotron: %s, %.2f GB, %s, %d thread(s), %lld x %lld tokens; Mamba2 layer %d (%d heads x %lld, "
           "%d groups, state %lld, conv %d), attention layer %d (%d heads, %d kv, head_dim %lld); %s kernels\n",
           argv[1], (double)bytes / 1e9, lwq_dtype_name(c->dtype), threads, (long long)B, (long long)T, lm, (int)H,
           (long long)c->mamba_head_dim, c->mamba_n_groups, (long long)c->ssm_state_size, c->mamba_conv_kernel, la,
           c->num_attention_heads, c->num_key_value_heads, (long long)c->head_dim, kname);
    printf("  per token (CPU us / wall us): mamba2 layer %.1f / %.1f, its in_proj+out_proj GEMMs %.1f / %.1f, "
           "rest (conv1d, scan, gated norm, transfers, norm, residual) %.1f / %.1f; attention layer %.1f / %.1f\n",
           bm.cpu * us, bm.wall * us, bg.cpu * us, bg.wall * us, (bm.cpu - bg.cpu) * us, (bm.wall - bg.wall) * us,
           ba.cpu * us, ba.wall * us);
    printf("  mamba2 op alone (CPU us / wall us): %s scan %.1f / %.1f, portable scan %.1f / %.1f; attention layer / "
           "op %.2f\n",
           kname, bo.cpu * us, bo.wall * us, bp.cpu * us, bp.wall * us, ba.cpu / bo.cpu);
    printf("  ratios (CPU time): mamba2 layer / attention layer %.2f; scan part / attention layer %.2f; scan part "
           "/ mamba2 layer %.2f\n",
           bm.cpu / ba.cpu, (bm.cpu - bg.cpu) / ba.cpu, (bm.cpu - bg.cpu) / bm.cpu);
    return 0;
}
