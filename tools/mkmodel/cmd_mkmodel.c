/* tools/mkmodel/cmd_mkmodel.c — `lwq mkmodel`: a synthetic Hugging Face checkpoint for tests and
 * benchmarks (llama, qwen3, qwen3_moe, mixtral, deepseek_v3/v2, qwen3_next; FP8-block or MXFP4
 * sources through tools/mkmodel/mkmodel_src.c).
 *
 * The tensor list comes from the architecture plans (layout/arch), so what mkmodel writes is
 * exactly what the rest of lwq expects to read.  Values are a counter-based hash of
 * (seed, tensor name, element index) (tools/mkmodel/mkmodel_values.c), so a tensor's bytes do
 * not depend on the shard size, the write order or the thread count, and the same flags always
 * give the same files.  Weights are
 * ~N(0, 0.02) (Irwin-Hall of four 16-bit uniforms), norm weights ~1.0 (qwen3_next: its zero-centred
 * (1 + w) norms ~N(0, 0.1), the gated norm ~1.0, conv1d ~N(0, 0.3), A_log and dt_bias ~N(0, 0.5)).
 * qwen3_next can also get Multi-Token-Prediction weights (--mtp), named as Qwen ships them
 * (mtp.fc, mtp.pre_fc_norm_{embedding,hidden}, mtp.norm, mtp.layers.0.* = one full-attention MoE
 * layer); they are not part of the forward and pass through quantization unchanged.  Data streams through one
 * fixed buffer, so memory does not grow with the model. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "layout/arch/arch.h"
#include "layout/checkpoint/safetensors.h"
#include "tools/commands.h"
#include "tools/mkmodel/mkmodel_qwen3next.h"
#include "tools/mkmodel/mkmodel_src.h"
#include "tools/mkmodel/mkmodel_tokenizer.h"
#include "tools/mkmodel/mkmodel_values.h"
#include "tools/tool_util.h"

#define MK_BUF_BYTES (8u << 20)

typedef struct mk_opts {
    const char *out, *arch;
    int64_t hidden, inter, moe_inter, layers, heads, kv_heads, head_dim, experts, topk, vocab;
    int64_t shard_bytes, seed;
    lwq_dtype dtype;
    mk_src_format src;
    int force, quiet, tie;
    mk_qn_opts qn; /* qwen3_next (tools/mkmodel/mkmodel_qwen3next.h) */
    double weight_std;
} mk_opts;

typedef struct mk_tensor {
    char name[LWQ_ARCH_NAME_MAX];
    int ndim;
    int64_t shape[4];
    float mean, std;
    uint64_t nbytes;
    int shard;
    lwq_dtype dtype;
    mk_pack pack;                  /* a part of a packed weight (--source-format) */
    char base[LWQ_ARCH_NAME_MAX];  /* the packed weight's plain name */
    int64_t lrows, lcols;          /* and its shape */
} mk_tensor;

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: lwq mkmodel OUT_DIR [options]\n"
            "\n"
            "Write a synthetic checkpoint: config.json, safetensors shards (+ index when more\n"
            "than one), a byte-level BPE tokenizer.json, tokenizer_config.json and\n"
            "generation_config.json.  Same flags -> same bytes.\n"
            "\n"
            "  --arch A              llama | qwen3 | qwen3_moe | mixtral | deepseek_v3 |\n"
            "                        deepseek_v2 | qwen3_next | qwen3_5 | qwen3_5_moe\n"
            "                        (qwen3_5*: the VLM wrapper, text model under\n"
            "                        text_config, a stand-in vision tower model.visual.*)\n"
            "                        (default llama)\n"
            "  --source-format F     bf16 | fp8 | mxfp4 (default bf16): fp8 stores every layer\n"
            "                        linear but the routers as F8_E4M3 + 128x128 weight_scale_inv\n"
            "                        (DeepSeek-V3), mxfp4 the routed experts as _blocks/_scales\n"
            "  --hidden N            hidden size (default 256)\n"
            "  --intermediate N      dense MLP width; Mixtral's expert width (default 4 x hidden/3,\n"
            "                        rounded to 64)\n"
            "  --moe-intermediate N  qwen3_moe expert width (default hidden / 2)\n"
            "  --layers N            decoder layers (default 4)\n"
            "  --heads N             attention heads (default 4)\n"
            "  --kv-heads N          key/value heads (default = heads)\n"
            "  --head-dim N          head dim (default hidden / heads)\n"
            "  --experts N           routed experts for MoE archs (default 8)\n"
            "  --top-k N             experts per token (default 2)\n"
            "  --vocab N             vocabulary (default 1024; at least the tokenizer's 273)\n"
            "  --dtype D             bf16 | f16 | f32 (default bf16)\n"
            "  --shard-size N[K|M|G] largest shard, MiB without a suffix (default 2048)\n"
            "  --seed S              value seed (default 0)\n"
            "  --tie                 tie_word_embeddings: no lm_head.weight is written\n"
            "  --weight-std X        std of linear weights and embeddings (default 0.02)\n"
            LWQ_MKMODEL_QWEN3NEXT_USAGE
            "  --force               write into a non-empty OUT_DIR (old shards are removed)\n"
            "  --quiet               no summary line\n"
            "\n"
            "exit status: 0 written, 2 bad option or write error (message on stderr)\n");
}

static int write_all(int fd, const void *p, size_t n, const char *path, lwq_error *e)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return lwq_errsys(e, w < 0 ? -errno : LWQ_EIO, "%s: write", path);
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_shard(const mk_opts *o, const mk_tensor *t, int nt, int shard, const char *path,
                       void *buf, lwq_error *e)
{
    int n = 0;
    for (int i = 0; i < nt; i++)
        n += t[i].shard == shard;
    lwq_st_out_tensor *ot = calloc((size_t)n + 1, sizeof *ot);
    const mk_tensor **src = calloc((size_t)n + 1, sizeof *src);
    if (!ot || !src) {
        free(ot);
        free(src);
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    }
    for (int i = 0, k = 0; i < nt; i++) {
        if (t[i].shard != shard)
            continue;
        ot[k] = (lwq_st_out_tensor){.name = t[i].name, .dtype = t[i].dtype, .ndim = t[i].ndim};
        memcpy(ot[k].shape, t[i].shape, sizeof t[i].shape);
        src[k++] = &t[i];
    }
    lwq_st_kv meta[] = {{"format", "pt"}};
    lwq_st_plan p;
    int rc = lwq_st_plan_make(ot, n, meta, 1, &p, e);
    if (rc != 0)
        goto out_free;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = lwq_errsys(e, -errno, "%s: create", path);
        goto out_plan;
    }
    rc = write_all(fd, p.header, p.header_bytes, path, e);
    for (int i = 0; rc == 0 && i < n; i++) {
        const mk_tensor *m = src[p.order[i]];
        if (m->pack != MK_PACK_NONE) {
            void *pb = malloc(m->nbytes ? m->nbytes : 1);
            rc = pb ? lwq_mkmodel_src_fill(m->pack, (uint64_t)o->seed, m->base, m->lrows, m->lcols,
                                           m->mean, m->std, o->dtype, pb, e)
                    : lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", m->name);
            if (rc == 0)
                rc = write_all(fd, pb, m->nbytes, path, e);
            free(pb);
            continue;
        }
        size_t esz = lwq_dtype_size(m->dtype);
        int64_t per_buf = (int64_t)(MK_BUF_BYTES / esz);
        int64_t numel = (int64_t)(m->nbytes / esz);
        for (int64_t at = 0; rc == 0 && at < numel; at += per_buf) {
            int64_t cnt = numel - at < per_buf ? numel - at : per_buf;
            lwq_mkmodel_fill((uint64_t)o->seed, m->name, m->mean, m->std, m->dtype, at, cnt, buf);
            rc = write_all(fd, buf, (size_t)cnt * esz, path, e);
        }
    }
    if (close(fd) != 0 && rc == 0)
        rc = lwq_errsys(e, -errno, "%s: close", path);
out_plan:
    lwq_st_plan_free(&p);
out_free:
    free(ot);
    free(src);
    return rc;
}

/* ---- config, tokenizer and friends ----------------------------------------------------------- */

static const char *arch_class(const char *a)
{
    if (!strcmp(a, "llama"))
        return "LlamaForCausalLM";
    if (!strcmp(a, "qwen3"))
        return "Qwen3ForCausalLM";
    if (!strcmp(a, "qwen3_moe"))
        return "Qwen3MoeForCausalLM";
    if (!strcmp(a, "mixtral"))
        return "MixtralForCausalLM";
    if (!strcmp(a, "deepseek_v3"))
        return "DeepseekV3ForCausalLM";
    if (!strcmp(a, "deepseek_v2"))
        return "DeepseekV2ForCausalLM";
    if (!strcmp(a, "qwen3_next"))
        return "Qwen3NextForCausalLM";
    if (!strcmp(a, "qwen3_5"))
        return "Qwen3_5ForConditionalGeneration";
    if (!strcmp(a, "qwen3_5_moe"))
        return "Qwen3_5MoeForConditionalGeneration";
    return NULL;
}

static const char *torch_dtype(lwq_dtype t)
{
    return t == LWQ_BF16 ? "bfloat16" : t == LWQ_F16 ? "float16" : "float32";
}

static char *config_json(const mk_opts *o)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch_class(o->arch)));
    /* Qwen3.5: the VLM wrapper's text model under text_config (built flat here, wrapped below) */
    const int q35 = !strncmp(o->arch, "qwen3_5", 7);
    char inner[32];
    snprintf(inner, sizeof inner, "%s_text", o->arch);
    cJSON_AddStringToObject(c, "model_type", q35 ? inner : o->arch);
    cJSON_AddNumberToObject(c, "hidden_size", (double)o->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)o->inter);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)o->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)o->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)o->kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", (double)o->head_dim);
    cJSON_AddNumberToObject(c, "vocab_size", (double)o->vocab);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 4096);
    int qwen = !strncmp(o->arch, "qwen3", 5);
    cJSON_AddNumberToObject(c, "rms_norm_eps", qwen ? 1e-6 : 1e-5);
    cJSON_AddNumberToObject(c, "rope_theta", qwen ? 1000000.0 : 500000.0);
    cJSON_AddNullToObject(c, "rope_scaling");
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tie);
    cJSON_AddNumberToObject(c, "bos_token_id", LWQ_MK_EOT_ID);
    cJSON_AddNumberToObject(c, "eos_token_id", LWQ_MK_EOT_ID);
    cJSON_AddStringToObject(c, "torch_dtype", torch_dtype(o->dtype));
    if (!strcmp(o->arch, "qwen3_moe")) {
        cJSON_AddNumberToObject(c, "num_experts", (double)o->experts);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->topk);
        cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)o->moe_inter);
        cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
        cJSON_AddItemToObject(c, "mlp_only_layers", cJSON_CreateArray());
        cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
    } else if (!strcmp(o->arch, "qwen3_next") || q35) {
        lwq_mkmodel_qwen3next_config(c, &o->qn, o->layers, o->experts, o->topk, o->moe_inter);
    } else if (!strcmp(o->arch, "mixtral")) {
        cJSON_AddNumberToObject(c, "num_local_experts", (double)o->experts);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->topk);
    } else if (!strncmp(o->arch, "deepseek_v", 10)) {
        lwq_mkmodel_ds_config(c, o->arch[10] == '2', o->hidden, o->heads, o->head_dim, o->experts,
                              o->topk, o->moe_inter);
    }
    lwq_mkmodel_src_config(c, o->src);
    if (q35) {
        cJSON *w = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(w, "architectures"),
                             cJSON_CreateString(arch_class(o->arch)));
        cJSON_AddStringToObject(w, "model_type", o->arch);
        cJSON_DeleteItemFromObject(c, "architectures");
        cJSON_AddItemToObject(w, "text_config", c);
        cJSON_AddBoolToObject(w, "tie_word_embeddings", o->tie);
        cJSON_AddStringToObject(w, "dtype", torch_dtype(o->dtype));
        c = w;
    }
    cJSON_AddStringToObject(c, "transformers_version", q35 ? "5.14.1" : "4.51.0");
    char *s = cJSON_Print(c);
    cJSON_Delete(c);
    return s;
}

static int write_json_file(const char *dir, const char *name, char *text, lwq_error *e)
{
    if (!text)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t n = strlen(text);
    int rc = lwq_tool_write_file(p, text, n, e);
    free(text);
    return rc;
}

static int cmp_mk_name(const void *a, const void *b, void *ctx)
{
    const mk_tensor *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

/* ---- the command ----------------------------------------------------------------------------- */

static int mkdir_p(const char *path, lwq_error *e)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return lwq_errf(e, LWQ_EINVAL, "%s: path too long", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return lwq_errsys(e, -errno, "%s: mkdir", p);
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return lwq_errsys(e, -errno, "%s: mkdir", p);
    return 0;
}

static int prepare_dir(const mk_opts *o, lwq_error *e)
{
    int mk = mkdir_p(o->out, e);
    if (mk != 0)
        return mk;
    DIR *d = opendir(o->out);
    if (!d)
        return lwq_errsys(e, -errno, "%s: open directory", o->out);
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (!o->force) {
            rc = lwq_errf(e, LWQ_EINVAL, "%s: not empty (holds %s); use --force to write into it",
                          o->out, de->d_name);
            break;
        }
        /* Stale shards of another layout would be picked up by readers: remove them. */
        size_t n = strlen(de->d_name);
        if (strstr(de->d_name, ".safetensors") &&
            (!strncmp(de->d_name, "model", 5) || (n > 5 && !strcmp(de->d_name + n - 5, ".json")))) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", o->out, de->d_name);
            if (unlink(p) != 0) {
                rc = lwq_errsys(e, -errno, "%s: remove", p);
                break;
            }
        }
    }
    closedir(d);
    return rc;
}

/* Value distribution of a planned tensor (see the header comment). */
static void tensor_dist(const lwq_model_config *cfg, float wstd, const lwq_arch_tensor *p,
                        mk_tensor *m)
{
    m->mean = p->kind == LWQ_TK_NORM ? 1.0f : 0.0f;
    m->std = p->kind == LWQ_TK_NORM ? 0.02f : wstd;
    if (lwq_mixer_is_gdn(cfg->family->linear))
        lwq_mkmodel_qwen3next_dist(p, &m->mean, &m->std);
}

static int build_tensors(const lwq_model_config *cfg, mk_src_format src, int mtp, float wstd,
                         mk_tensor **out, int *nout, lwq_error *e)
{
    lwq_arch_layer tail;
    int rc = lwq_arch_tail_plan(cfg, &tail, e);
    if (rc != 0)
        return rc;
    int cap = 64, n = 0;
    mk_tensor *t = malloc((size_t)cap * sizeof *t);
    for (int part = -1; t && rc == 0 && part <= cfg->num_hidden_layers; part++) {
        /* Order on disk: embedding, layers 0..L-1, final norm and lm_head (as HF saves). */
        lwq_arch_layer lp, *pl = &tail;
        if (part >= 0 && part < cfg->num_hidden_layers) {
            if ((rc = lwq_arch_layer_plan(cfg, part, &lp, e)) != 0)
                break;
            pl = &lp;
        }
        for (int i = 0; i < pl->ntensors; i++) {
            const lwq_arch_tensor *p = &pl->tensors[i];
            /* optional tensors are not written, except the MTP block when asked for */
            int is_mtp = pl == &tail && !strncmp(p->name, "mtp.", 4);
            if (p->optional && !(mtp && is_mtp && p->kind != LWQ_TK_BUFFER))
                continue;
            if (pl == &tail && (part < 0) != (p->kind == LWQ_TK_EMBED))
                continue;
            const lwq_arch_linear *lin = p->linear >= 0 ? &pl->linears[p->linear] : NULL;
            int packed = p->kind == LWQ_TK_WEIGHT && lin && lwq_mkmodel_src_packs(src, lin);
            if (packed && src == MK_SRC_MXFP4 && p->shape[1] % 32) {
                rc = lwq_errf(e, LWQ_EINVAL, "--source-format mxfp4: %s has %lld input features, "
                              "not a multiple of 32", p->name, (long long)p->shape[1]);
                break;
            }
            if (n + 1 >= cap) {
                mk_tensor *nt = realloc(t, (size_t)(cap *= 2) * sizeof *t);
                if (!nt) {
                    free(t);
                    t = NULL;
                    break;
                }
                t = nt;
            }
            mk_tensor *m = &t[n++];
            memset(m, 0, sizeof *m);
            snprintf(m->name, sizeof m->name, "%s", p->name);
            m->ndim = p->ndim;
            memcpy(m->shape, p->shape, sizeof m->shape);
            tensor_dist(cfg, wstd, p, m);
            uint64_t numel = 1;
            for (int d = 0; d < p->ndim; d++)
                numel *= (uint64_t)p->shape[d];
            m->nbytes = numel * lwq_dtype_size(cfg->dtype);
            m->dtype = cfg->dtype;
            if (packed) { /* the weight becomes two tensors (tools/mkmodel/mkmodel_src.h) */
                const char *suf[2];
                lwq_dtype dt[2];
                int nd[2];
                int64_t sh[2][3];
                lwq_mkmodel_src_parts(src, p->shape[0], p->shape[1], suf, dt, nd, sh);
                mk_tensor w = *m;
                for (int k = 0; k < 2; k++) {
                    mk_tensor *q = k ? &t[n++] : m;
                    *q = w;
                    snprintf(q->base, sizeof q->base, "%s", p->name);
                    snprintf(q->name, sizeof q->name, "%s%s", p->name, suf[k]);
                    q->lrows = p->shape[0];
                    q->lcols = p->shape[1];
                    q->dtype = dt[k];
                    q->ndim = nd[k];
                    memcpy(q->shape, sh[k], sizeof sh[k]);
                    q->pack = src == MK_SRC_FP8 ? (k ? MK_PACK_FP8_SCALE_INV : MK_PACK_FP8_WEIGHT)
                                                : (k ? MK_PACK_MX_SCALES : MK_PACK_MX_BLOCKS);
                    q->nbytes = (uint64_t)(sh[k][0] * sh[k][1] * (nd[k] == 3 ? sh[k][2] : 1)) *
                                lwq_dtype_size(dt[k]);
                }
            }
        }
        if (pl != &tail)
            lwq_arch_layer_free(pl);
        if (!t)
            break;
    }
    lwq_arch_layer_free(&tail);
    if (rc != 0) {
        free(t);
        return rc;
    }
    if (!t)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory for the tensor list");
    if (cfg->passthrough) {
        /* a stand-in for the wrapper's vision tower: tensors no plan knows, which a run copies
         * through unquantized (two linears and a bias, hidden-wide at the merger's output) */
        static const struct {
            const char *name;
            int ndim;
            int64_t d0, d1;
        } vis[] = {{"blocks.0.attn.qkv.weight", 2, 96, 32},
                   {"blocks.0.attn.qkv.bias", 1, 96, 0},
                   {"merger.linear_fc2.weight", 2, -1, 128}};
        mk_tensor *nt = realloc(t, (size_t)(n + 3) * sizeof *t);
        if (!nt) {
            free(t);
            return lwq_errf(e, LWQ_ENOMEM, "out of memory for the tensor list");
        }
        t = nt;
        for (size_t i = 0; i < 3; i++) {
            mk_tensor *m = &t[n++];
            memset(m, 0, sizeof *m);
            snprintf(m->name, sizeof m->name, "%s%s", cfg->passthrough, vis[i].name);
            m->ndim = vis[i].ndim;
            m->shape[0] = vis[i].d0 < 0 ? cfg->hidden_size : vis[i].d0;
            m->shape[1] = vis[i].d1;
            m->std = wstd;
            m->dtype = cfg->dtype;
            m->nbytes = (uint64_t)m->shape[0] * (uint64_t)(m->ndim == 2 ? m->shape[1] : 1) *
                        lwq_dtype_size(cfg->dtype);
        }
    }
    *out = t;
    *nout = n;
    return 0;
}

static int parse_opts(int argc, char **argv, mk_opts *o)
{
    static const struct option lo[] = {
        {"arch", 1, 0, 'a'},     {"hidden", 1, 0, 'H'},   {"intermediate", 1, 0, 'I'},
        {"moe-intermediate", 1, 0, 'M'}, {"layers", 1, 0, 'L'}, {"heads", 1, 0, 'n'},
        {"kv-heads", 1, 0, 'k'}, {"head-dim", 1, 0, 'd'}, {"experts", 1, 0, 'E'},
        {"top-k", 1, 0, 't'},    {"vocab", 1, 0, 'V'},    {"dtype", 1, 0, 'T'},
        {"shard-size", 1, 0, 'S'}, {"seed", 1, 0, 's'},   {"force", 0, 0, 'f'},
        {"quiet", 0, 0, 'q'},    {"tie", 0, 0, 'Y'},      {"help", 0, 0, 'h'},
        {"source-format", 1, 0, 'F'},
        LWQ_MKMODEL_QWEN3NEXT_LONGOPTS, {"weight-std", 1, 0, 9},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->arch = "llama";
    o->hidden = 256;
    o->layers = 4;
    o->heads = 4;
    o->experts = 8;
    o->topk = 2;
    o->vocab = 1024;
    o->shard_bytes = INT64_C(2048) << 20;
    o->dtype = LWQ_BF16;
    o->weight_std = 0.02;
    const int64_t BIG = INT64_C(1) << 20;
    int c, bad = 0;
    optind = 1;
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'a': o->arch = optarg; break;
        case 'H': bad = lwq_tool_parse_i64("--hidden", optarg, 1, BIG, &o->hidden); break;
        case 'I': bad = lwq_tool_parse_i64("--intermediate", optarg, 1, BIG, &o->inter); break;
        case 'M': bad = lwq_tool_parse_i64("--moe-intermediate", optarg, 1, BIG, &o->moe_inter); break;
        case 'L': bad = lwq_tool_parse_i64("--layers", optarg, 1, LWQ_MAX_LAYERS, &o->layers); break;
        case 'n': bad = lwq_tool_parse_i64("--heads", optarg, 1, 4096, &o->heads); break;
        case 'k': bad = lwq_tool_parse_i64("--kv-heads", optarg, 1, 4096, &o->kv_heads); break;
        case 'd': bad = lwq_tool_parse_i64("--head-dim", optarg, 1, 4096, &o->head_dim); break;
        case 'E': bad = lwq_tool_parse_i64("--experts", optarg, 1, 4096, &o->experts); break;
        case 't': bad = lwq_tool_parse_i64("--top-k", optarg, 1, 4096, &o->topk); break;
        case 'V': bad = lwq_tool_parse_i64("--vocab", optarg, LWQ_MK_EOT_ID + 1, INT64_C(1) << 24, &o->vocab); break;
        case 'S': {
            /* MiB by default; a K/M/G suffix gives KiB/MiB/GiB (tests want small shards). */
            char num[32];
            size_t len = strlen(optarg);
            int64_t unit = 1 << 20;
            char last = len ? optarg[len - 1] : 0;
            if (last == 'K' || last == 'M' || last == 'G') {
                unit = last == 'K' ? 1 << 10 : last == 'M' ? 1 << 20 : INT64_C(1) << 30;
                len--;
            }
            snprintf(num, sizeof num, "%.*s", (int)(len < sizeof num ? len : sizeof num - 1), optarg);
            bad = lwq_tool_parse_i64("--shard-size", num, 1, INT64_C(1) << 30, &o->shard_bytes);
            if (!bad && o->shard_bytes > (INT64_C(1) << 50) / unit) {
                fprintf(stderr, "lwq mkmodel: --shard-size %s is too large\n", optarg);
                bad = -1;
            }
            o->shard_bytes *= unit;
            break;
        }
        case 's': bad = lwq_tool_parse_i64("--seed", optarg, 0, INT64_MAX, &o->seed); break;
        case 'T':
            if (!strcmp(optarg, "bf16"))
                o->dtype = LWQ_BF16;
            else if (!strcmp(optarg, "f16"))
                o->dtype = LWQ_F16;
            else if (!strcmp(optarg, "f32"))
                o->dtype = LWQ_F32;
            else {
                fprintf(stderr, "lwq mkmodel: --dtype must be bf16, f16 or f32, got '%s'\n", optarg);
                bad = -1;
            }
            break;
        case 'F':
            if (lwq_mkmodel_src_parse(optarg, &o->src) != 0) {
                fprintf(stderr, "lwq mkmodel: --source-format must be bf16, fp8 or mxfp4, got "
                                "'%s'\n", optarg);
                bad = -1;
            }
            break;
        case 'f': o->force = 1; break;
        case 'q': o->quiet = 1; break;
        case 'Y': o->tie = 1; break;
        case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8:
            bad = lwq_mkmodel_qwen3next_option(&o->qn, c, optarg);
            break;
        case 9: {
            char *end = NULL;
            o->weight_std = strtod(optarg, &end);
            if (!end || *end || !(o->weight_std > 0 && o->weight_std <= 10)) {
                fprintf(stderr, "lwq mkmodel: --weight-std must be a number in (0, 10], got '%s'\n",
                        optarg);
                bad = -1;
            }
            break;
        }
        case 'h': usage(stdout); return 1;
        case ':': fprintf(stderr, "lwq mkmodel: %s needs a value\n", argv[optind - 1]); return -1;
        default: fprintf(stderr, "lwq mkmodel: unknown option '%s'\n", argv[optind - 1]); return -1;
        }
    }
    if (bad)
        return -1;
    if (optind != argc - 1) {
        fprintf(stderr, "lwq mkmodel: expected one OUT_DIR (see lwq mkmodel --help)\n");
        return -1;
    }
    o->out = argv[optind];
    if (!arch_class(o->arch)) {
        fprintf(stderr, "lwq mkmodel: --arch must be llama, qwen3, qwen3_moe, mixtral, deepseek_v3, "
                        "deepseek_v2, qwen3_next, qwen3_5 or qwen3_5_moe, got '%s'\n", o->arch);
        return -1;
    }
    if (!o->kv_heads)
        o->kv_heads = o->heads;
    if (!o->head_dim) {
        if (o->hidden % o->heads) {
            fprintf(stderr, "lwq mkmodel: --hidden %lld is not a multiple of --heads %lld; give "
                            "--head-dim\n",
                    (long long)o->hidden, (long long)o->heads);
            return -1;
        }
        o->head_dim = o->hidden / o->heads;
    }
    if (!o->inter)
        o->inter = ((o->hidden * 8 / 3 + 63) / 64) * 64;
    if (!o->moe_inter)
        o->moe_inter = o->hidden / 2 > 0 ? o->hidden / 2 : 1;
    if (lwq_mkmodel_qwen3next_finish(&o->qn, o->arch, o->head_dim, o->moe_inter) != 0)
        return -1;
    if (o->topk > o->experts) {
        fprintf(stderr, "lwq mkmodel: --top-k %lld exceeds --experts %lld\n", (long long)o->topk,
                (long long)o->experts);
        return -1;
    }
    return 0;
}

int lwq_cmd_mkmodel(int argc, char **argv)
{
    mk_opts o;
    int pr = parse_opts(argc, argv, &o);
    if (pr != 0)
        return pr > 0 ? LWQ_EXIT_OK : LWQ_EXIT_ERR;
    lwq_error e = {0};
    lwq_model_config cfg;
    mk_tensor *t = NULL;
    void *buf = NULL;
    int nt = 0, rc;
    char *cfg_text = config_json(&o);
    if (!cfg_text) {
        fprintf(stderr, "lwq mkmodel: out of memory\n");
        return LWQ_EXIT_ERR;
    }
    /* Parse our own config back: the same validation every reader applies. */
    rc = lwq_config_parse("config.json", cfg_text, &cfg, &e);
    if (rc != 0) {
        free(cfg_text);
        fprintf(stderr, "lwq mkmodel: %s\n", e.msg);
        return LWQ_EXIT_ERR;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if ((rc = build_tensors(&cfg, o.src, o.qn.mtp, (float)o.weight_std, &t, &nt, &e)) != 0 ||
        (rc = prepare_dir(&o, &e)) != 0)
        goto out;
    /* Greedy shards in disk order; a tensor larger than the shard size gets a shard alone. */
    uint64_t limit = (uint64_t)o.shard_bytes, cur = 0, total = 0;
    int nshards = 1;
    for (int i = 0; i < nt; i++) {
        if (cur > 0 && cur + t[i].nbytes > limit) {
            nshards++;
            cur = 0;
        }
        t[i].shard = nshards - 1;
        cur += t[i].nbytes;
        total += t[i].nbytes;
    }
    buf = malloc(MK_BUF_BYTES);
    if (!buf) {
        rc = lwq_errf(&e, LWQ_ENOMEM, "out of memory for the write buffer");
        goto out;
    }
    char path[4096], fname[64];
    cJSON *index = nshards > 1 ? cJSON_CreateObject() : NULL;
    cJSON *wm = NULL;
    if (index) {
        cJSON *md = cJSON_AddObjectToObject(index, "metadata");
        cJSON_AddNumberToObject(md, "total_size", (double)total);
        wm = cJSON_AddObjectToObject(index, "weight_map");
    }
    for (int s = 0; rc == 0 && s < nshards; s++) {
        if (nshards == 1)
            snprintf(fname, sizeof fname, "model.safetensors");
        else
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        snprintf(path, sizeof path, "%s/%s", o.out, fname);
        rc = write_shard(&o, t, nt, s, path, buf, &e);
    }
    if (wm) {
        /* weight_map sorted by tensor name, as transformers writes it. */
        int *ord = malloc((size_t)nt * sizeof *ord);
        if (!ord) {
            cJSON_Delete(index);
            rc = lwq_errf(&e, LWQ_ENOMEM, "out of memory for the index");
            goto out;
        }
        for (int i = 0; i < nt; i++)
            ord[i] = i;
        qsort_r(ord, (size_t)nt, sizeof *ord, cmp_mk_name, t);
        for (int i = 0; i < nt; i++) {
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", t[ord[i]].shard + 1,
                     nshards);
            cJSON_AddStringToObject(wm, t[ord[i]].name, fname);
        }
        free(ord);
    }
    if (rc == 0 && index)
        rc = write_json_file(o.out, "model.safetensors.index.json", cJSON_Print(index), &e);
    cJSON_Delete(index);
    if (rc == 0) {
        rc = write_json_file(o.out, "config.json", cfg_text, &e);
        cfg_text = NULL;
    }
    if (rc == 0)
        rc = write_json_file(o.out, "tokenizer.json", lwq_mkmodel_tokenizer_json(), &e);
    if (rc == 0) {
        char tc[512];
        snprintf(tc, sizeof tc,
                 "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"bos_token\": "
                 "\"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n  \"model_max_length\": "
                 "4096\n}\n");
        rc = write_json_file(o.out, "tokenizer_config.json", strdup(tc), &e);
    }
    if (rc == 0) {
        char gc[256];
        snprintf(gc, sizeof gc,
                 "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"do_sample\": false\n}\n",
                 LWQ_MK_EOT_ID, LWQ_MK_EOT_ID);
        rc = write_json_file(o.out, "generation_config.json", strdup(gc), &e);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0 && !o.quiet) {
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        char b[32];
        printf("lwq mkmodel: %s %s, %lld layers, %d tensors, %s in %d shard%s -> %s (%.2f s, %.0f "
               "MB/s)\n",
               o.arch, lwq_dtype_name(o.dtype), (long long)o.layers, nt,
               lwq_tool_bytes(total, b, sizeof b), nshards, nshards > 1 ? "s" : "", o.out, s,
               s > 0 ? (double)total / s / 1e6 : 0.0);
    }
out:
    free(cfg_text);
    free(buf);
    free(t);
    lwq_config_free(&cfg);
    if (rc != 0) {
        fprintf(stderr, "lwq mkmodel: %s\n", e.msg);
        return LWQ_EXIT_ERR;
    }
    return LWQ_EXIT_OK;
}
