/* tools/cmd_inspect.c — `lwq inspect DIR [--json]`: what a checkpoint holds, as the rest of lwq
 * sees it (architecture, dims, layers, experts, dtypes, bytes per layer, the largest layer and
 * what fills it, tail tensors, and how the tensors match the architecture plan). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"
#include "tools/commands.h"
#include "tools/tool_util.h"

static void usage(FILE *fp)
{
    fprintf(fp, "usage: lwq inspect MODEL_DIR [--json] [--config FILE]\n"
                "\n"
                "Describe a checkpoint: architecture, dims, layers, experts and top-k, dtypes,\n"
                "total bytes, per-layer bytes (min/median/max), the largest layer and what it\n"
                "holds, tail tensors, and tensors that do not match the architecture.\n"
                "\n"
                "  --json         one JSON object on stdout instead of text\n"
                "  --config FILE  read the config from FILE instead of MODEL_DIR/config.json\n"
                "\n"
                "exit status: 0 ok, 1 tensors missing or mis-shaped for the architecture,\n"
                "             2 the checkpoint cannot be read (message on stderr)\n");
}

enum { B_ATTN, B_MLP, B_EXPERTS, B_SHARED, B_ROUTER, B_NORM, B_OTHER, B_COUNT };
static const char *bucket_name[B_COUNT] = {"attention", "mlp", "experts", "shared_experts",
                                           "router", "norms", "other"};

typedef struct layer_parts {
    uint64_t bytes[B_COUNT];
    int tensors[B_COUNT];
    int experts;
} layer_parts;

static int bucket_of(const lwq_arch_layer *plan, const lwq_arch_tensor *p)
{
    if (p->kind == LWQ_TK_NORM)
        return B_NORM;
    if (p->linear < 0)
        return B_OTHER;
    switch (plan->linears[p->linear].role) {
    case LWQ_ROLE_GATE:
    case LWQ_ROLE_UP:
    case LWQ_ROLE_DOWN: return B_MLP;
    case LWQ_ROLE_EXPERT_GATE:
    case LWQ_ROLE_EXPERT_UP:
    case LWQ_ROLE_EXPERT_DOWN: return B_EXPERTS;
    case LWQ_ROLE_SHARED_GATE:
    case LWQ_ROLE_SHARED_UP:
    case LWQ_ROLE_SHARED_DOWN: return B_SHARED;
    case LWQ_ROLE_ROUTER:
    case LWQ_ROLE_SHARED_EXPERT_GATE: return B_ROUTER;
    default: return B_ATTN;
    }
}

static int describe_layer(const lwq_ckpt *c, int l, layer_parts *lp, lwq_error *e)
{
    memset(lp, 0, sizeof *lp);
    lwq_arch_layer plan;
    int rc = lwq_arch_layer_plan(&c->cfg, l, &plan, e);
    if (rc != 0)
        return rc;
    for (int i = 0; i < c->layers[l].n; i++) {
        const lwq_ckpt_tensor *t = &c->tensors[c->layers[l].idx[i]];
        const lwq_arch_tensor *p = lwq_arch_find_tensor(&plan, t->name);
        int b = p ? bucket_of(&plan, p) : B_OTHER;
        lp->bytes[b] += t->nbytes;
        lp->tensors[b]++;
    }
    lp->experts = plan.is_moe ? c->cfg.num_experts : 0;
    lwq_arch_layer_free(&plan);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void shape_str(const lwq_ckpt_tensor *t, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

typedef struct summary {
    int moe_layers, largest;
    uint64_t min, median, max;
    uint64_t dt_bytes[LWQ_DTYPE_COUNT];
    int dt_count[LWQ_DTYPE_COUNT];
    layer_parts big;
} summary;

static int summarize(const lwq_ckpt *c, summary *s, lwq_error *e)
{
    memset(s, 0, sizeof *s);
    int L = c->cfg.num_hidden_layers;
    uint64_t *v = malloc((size_t)L * sizeof *v);
    if (!v)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int l = 0; l < L; l++) {
        v[l] = c->layers[l].bytes;
        if (v[l] > c->layers[s->largest].bytes)
            s->largest = l;
        s->moe_layers += lwq_config_layer_is_moe(&c->cfg, l);
    }
    qsort(v, (size_t)L, sizeof *v, cmp_u64);
    s->min = v[0];
    s->max = v[L - 1];
    s->median = (L % 2) ? v[L / 2] : (v[L / 2 - 1] + v[L / 2]) / 2;
    free(v);
    for (int i = 0; i < c->ntensors; i++) {
        s->dt_bytes[c->tensors[i].dtype] += c->tensors[i].nbytes;
        s->dt_count[c->tensors[i].dtype]++;
    }
    return describe_layer(c, s->largest, &s->big, e);
}

/* config.json's quantization_config.quant_algo (or quant_method), or NULL. */
static const char *declared_quant(const lwq_ckpt *c)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(c->cfg.raw, "quantization_config");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(q, "quant_algo");
    if (!cJSON_IsString(a))
        a = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    return cJSON_IsString(a) ? a->valuestring : NULL;
}

/* Where the text model's weights are, as one prefix: "" for a plain causal LM, what every name
 * carries first when one prefix covers them all ("language_model." of kimi_k25), else the layer
 * root ("model.language_model." of the Qwen3.5 VLM wrappers). */
static const char *weight_prefix(const lwq_model_config *g)
{
    static _Thread_local char buf[80];
    if (!strcmp(g->names.root, "model.") && !g->names.head[0])
        return "";
    snprintf(buf, sizeof buf, "%smodel.", g->names.head);
    if (!strcmp(buf, g->names.root))
        return g->names.head;
    return g->names.root;
}

static void print_text(const lwq_ckpt *c, const summary *s, const lwq_arch_report *r)
{
    const lwq_model_config *g = &c->cfg;
    char b1[32], b2[32], b3[32];
    printf("model       %s\n", c->dir);
    printf("arch        %s (model_type %s%s%s), config dtype %s\n", lwq_family_name(g->family),
           g->model_type, weight_prefix(g)[0] ? ", weights under " : "", weight_prefix(g),
           g->dtype_explicit ? lwq_dtype_name(g->dtype) : "not given");
    printf("dims        hidden %lld, intermediate %lld, heads %d (kv %d, head_dim %lld), vocab %lld%s\n",
           (long long)g->hidden_size, (long long)g->intermediate_size, g->num_attention_heads,
           g->num_key_value_heads, (long long)g->head_dim, (long long)g->vocab_size,
           g->tie_word_embeddings ? ", tied embeddings" : "");
    printf("layers      %d", g->num_hidden_layers);
    if (c->nlayers > g->num_hidden_layers)
        printf(" (+%d extra, e.g. MTP)", c->nlayers - g->num_hidden_layers);
    if (g->num_experts)
        printf(", %d MoE: %d experts, top-%d, expert width %lld%s", s->moe_layers, g->num_experts,
               g->num_experts_per_tok, (long long)g->moe_intermediate_size,
               g->n_shared_experts ? " + shared" : "");
    printf("\n");
    printf("tensors     %d in %d file%s, %s\n", c->ntensors, c->nfiles, c->nfiles > 1 ? "s" : "",
           lwq_tool_bytes(c->total_bytes, b1, sizeof b1));
    printf("dtypes     ");
    for (int d = 0; d < LWQ_DTYPE_COUNT; d++)
        if (s->dt_count[d])
            printf(" %s: %d tensors %s;", lwq_dtype_name((lwq_dtype)d), s->dt_count[d],
                   lwq_tool_bytes(s->dt_bytes[d], b1, sizeof b1));
    printf("\n");
    printf("per layer   min %s, median %s, max %s\n", lwq_tool_bytes(s->min, b1, sizeof b1),
           lwq_tool_bytes(s->median, b2, sizeof b2), lwq_tool_bytes(s->max, b3, sizeof b3));
    printf("largest     layer %d: %s, %d tensors:", s->largest,
           lwq_tool_bytes(c->layers[s->largest].bytes, b1, sizeof b1), c->layers[s->largest].n);
    const char *sep = " ";
    for (int k = 0; k < B_COUNT; k++) {
        if (!s->big.tensors[k])
            continue;
        printf("%s%s %s (%d tensor%s", sep, bucket_name[k],
               lwq_tool_bytes(s->big.bytes[k], b1, sizeof b1), s->big.tensors[k],
               s->big.tensors[k] > 1 ? "s" : "");
        if (k == B_EXPERTS)
            printf(", %d experts", s->big.experts);
        printf(")");
        sep = ", ";
    }
    printf("\n");
    printf("tail        %d tensors, %s\n", c->tail.n, lwq_tool_bytes(c->tail.bytes, b1, sizeof b1));
    for (int i = 0; i < c->tail.n && i < 20; i++) {
        const lwq_ckpt_tensor *t = &c->tensors[c->tail.idx[i]];
        char sh[96];
        shape_str(t, sh, sizeof sh);
        printf("            %s %s %s %s\n", t->name, lwq_dtype_name(t->dtype), sh,
               lwq_tool_bytes(t->nbytes, b1, sizeof b1));
    }
    if (c->tail.n > 20)
        printf("            ... %d more\n", c->tail.n - 20);
    if (r->quantized_nvfp4 + r->quantized_fp8) {
        const char *d = declared_quant(c);
        printf("quantized   %d linears NVFP4, %d FP8, each with its scales; %d KV cache scales%s%s%s\n",
               r->quantized_nvfp4, r->quantized_fp8, r->kv_scales, d ? "; config.json declares " : "", d ? d : "",
               d ? "" : "; config.json declares no quantization_config");
    }
    if (r->n == 0) {
        printf("check       ok: every tensor matches the %s plan%s\n", lwq_family_name(g->family),
               r->quantized_nvfp4 + r->quantized_fp8 ? " (quantized linears with their packed shapes and scales)" : "");
        return;
    }
    printf("check       %d missing, %d bad shape, %d unexpected (kept as is), %d extra layers\n",
           r->count[LWQ_ISSUE_MISSING], r->count[LWQ_ISSUE_BAD_SHAPE], r->count[LWQ_ISSUE_UNEXPECTED],
           r->count[LWQ_ISSUE_EXTRA_LAYER]);
    for (int i = 0; i < r->n && i < 30; i++)
        printf("            %s: %s%s%s\n", lwq_arch_issue_name(r->v[i].kind), r->v[i].name,
               r->v[i].detail[0] ? " — " : "", r->v[i].detail);
    if (r->n > 30)
        printf("            ... %d more\n", r->n - 30);
}

static void print_json(const lwq_ckpt *c, const summary *s, const lwq_arch_report *r)
{
    const lwq_model_config *g = &c->cfg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dir", c->dir);
    cJSON_AddStringToObject(o, "model_type", g->model_type);
    cJSON_AddStringToObject(o, "arch", lwq_family_name(g->family));
    cJSON_AddStringToObject(o, "weight_prefix", weight_prefix(g));
    if (g->dtype_explicit)
        cJSON_AddStringToObject(o, "dtype", lwq_dtype_name(g->dtype));
    else
        cJSON_AddNullToObject(o, "dtype");
    cJSON_AddNumberToObject(o, "hidden_size", (double)g->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", (double)g->intermediate_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", g->num_hidden_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", g->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", g->num_key_value_heads);
    cJSON_AddNumberToObject(o, "head_dim", (double)g->head_dim);
    cJSON_AddNumberToObject(o, "vocab_size", (double)g->vocab_size);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", g->tie_word_embeddings);
    cJSON_AddNumberToObject(o, "num_experts", g->num_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", g->num_experts_per_tok);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", (double)g->moe_intermediate_size);
    cJSON_AddNumberToObject(o, "n_shared_experts", g->n_shared_experts);
    cJSON_AddNumberToObject(o, "moe_layers", s->moe_layers);
    cJSON_AddNumberToObject(o, "checkpoint_layers", c->nlayers);
    cJSON_AddNumberToObject(o, "files", c->nfiles);
    cJSON_AddNumberToObject(o, "tensors", c->ntensors);
    cJSON_AddNumberToObject(o, "total_bytes", (double)c->total_bytes);
    cJSON *dt = cJSON_AddObjectToObject(o, "dtypes");
    for (int d = 0; d < LWQ_DTYPE_COUNT; d++) {
        if (!s->dt_count[d])
            continue;
        cJSON *x = cJSON_AddObjectToObject(dt, lwq_dtype_name((lwq_dtype)d));
        cJSON_AddNumberToObject(x, "tensors", s->dt_count[d]);
        cJSON_AddNumberToObject(x, "bytes", (double)s->dt_bytes[d]);
    }
    cJSON *lb = cJSON_AddObjectToObject(o, "layer_bytes");
    cJSON_AddNumberToObject(lb, "min", (double)s->min);
    cJSON_AddNumberToObject(lb, "median", (double)s->median);
    cJSON_AddNumberToObject(lb, "max", (double)s->max);
    cJSON *la = cJSON_AddArrayToObject(o, "layers");
    for (int l = 0; l < c->nlayers; l++)
        cJSON_AddItemToArray(la, cJSON_CreateNumber((double)c->layers[l].bytes));
    cJSON *big = cJSON_AddObjectToObject(o, "largest_layer");
    cJSON_AddNumberToObject(big, "index", s->largest);
    cJSON_AddNumberToObject(big, "bytes", (double)c->layers[s->largest].bytes);
    cJSON_AddNumberToObject(big, "tensors", c->layers[s->largest].n);
    cJSON_AddNumberToObject(big, "experts", s->big.experts);
    cJSON *parts = cJSON_AddObjectToObject(big, "parts");
    for (int k = 0; k < B_COUNT; k++) {
        if (!s->big.tensors[k])
            continue;
        cJSON *x = cJSON_AddObjectToObject(parts, bucket_name[k]);
        cJSON_AddNumberToObject(x, "tensors", s->big.tensors[k]);
        cJSON_AddNumberToObject(x, "bytes", (double)s->big.bytes[k]);
    }
    cJSON *tail = cJSON_AddArrayToObject(o, "tail");
    for (int i = 0; i < c->tail.n; i++) {
        const lwq_ckpt_tensor *t = &c->tensors[c->tail.idx[i]];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", t->name);
        cJSON_AddStringToObject(x, "dtype", lwq_dtype_name(t->dtype));
        cJSON *sh = cJSON_AddArrayToObject(x, "shape");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddNumberToObject(x, "bytes", (double)t->nbytes);
        cJSON_AddItemToArray(tail, x);
    }
    cJSON *qz = cJSON_AddObjectToObject(o, "quantized");
    cJSON_AddNumberToObject(qz, "nvfp4_linears", r->quantized_nvfp4);
    cJSON_AddNumberToObject(qz, "fp8_linears", r->quantized_fp8);
    cJSON_AddNumberToObject(qz, "kv_cache_scales", r->kv_scales);
    const char *dq = declared_quant(c);
    if (dq)
        cJSON_AddStringToObject(qz, "declared", dq);
    else
        cJSON_AddNullToObject(qz, "declared");
    cJSON *is = cJSON_AddArrayToObject(o, "issues");
    for (int i = 0; i < r->n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "kind", lwq_arch_issue_name(r->v[i].kind));
        cJSON_AddNumberToObject(x, "layer", r->v[i].layer);
        cJSON_AddStringToObject(x, "name", r->v[i].name);
        cJSON_AddStringToObject(x, "detail", r->v[i].detail);
        cJSON_AddItemToArray(is, x);
    }
    char *txt = cJSON_Print(o);
    if (txt)
        printf("%s\n", txt);
    free(txt);
    cJSON_Delete(o);
}

int lwq_cmd_inspect(int argc, char **argv)
{
    static const struct option lo[] = {{"json", 0, 0, 'j'}, {"config", 1, 0, 'c'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int json = 0, c;
    const char *config = NULL;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'c': config = optarg; break;
        case 'h': usage(stdout); return LWQ_EXIT_OK;
        case ':': fprintf(stderr, "lwq inspect: %s needs a value\n", argv[optind - 1]); return LWQ_EXIT_ERR;
        default: fprintf(stderr, "lwq inspect: unknown option '%s'\n", argv[optind - 1]); return LWQ_EXIT_ERR;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "lwq inspect: expected one MODEL_DIR (see lwq inspect --help)\n");
        return LWQ_EXIT_ERR;
    }
    lwq_ckpt ck;
    lwq_error e = {0};
    if (lwq_ckpt_open_with_config(argv[optind], config, &ck, &e) != 0) {
        fprintf(stderr, "lwq inspect: %s\n", e.msg);
        return LWQ_EXIT_ERR;
    }
    lwq_arch_report r;
    summary s;
    int blocking = lwq_arch_check(&ck, &r, &e);
    if (blocking < 0 || summarize(&ck, &s, &e) != 0) {
        fprintf(stderr, "lwq inspect: %s\n", e.msg);
        if (blocking >= 0)
            lwq_arch_report_free(&r);
        lwq_ckpt_free(&ck);
        return LWQ_EXIT_ERR;
    }
    if (json)
        print_json(&ck, &s, &r);
    else
        print_text(&ck, &s, &r);
    lwq_arch_report_free(&r);
    lwq_ckpt_free(&ck);
    return blocking > 0 ? LWQ_EXIT_DIFF : LWQ_EXIT_OK;
}
