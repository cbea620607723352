/* tools/hfptq_args.c — hf_ptq.py's flags into lwq quantize's (see hfptq_args.h). */
#include "tools/hfptq_args.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --qformat: Model Optimizer preset names lwq runs exactly, and lwq's own presets. */
static const struct {
    const char *name;
    const char *to[6];
} qformats[] = {
    {"nvfp4", {"--qformat", "nvfp4"}},
    {"fp8", {"--qformat", "fp8"}},
    {"nvfp4_experts_only", {"--qformat", "nvfp4_experts_only"}},
    {"nvfp4_mlp_only", {"--qformat", "nvfp4_mlp_only"}},
    {"nvfp4_w4a4_weight_mse_fp8_sweep", {"--qformat", "nvfp4", "--algo", "mse", "--fp8-scale-sweep"}},
    {"nvfp4_w4a4_weight_local_hessian", {"--qformat", "nvfp4", "--algo", "local_hessian"}},
    {"nvfp4_experts-fp8_attn", {"--qformat", "nvfp4_experts-fp8_attn"}},
    {"qwen3next_production", {"--qformat", "qwen3next_production"}},
    {"w4a16_nvfp4", {"--qformat", "w4a16_nvfp4"}},
    {"nvfp4_four_over_six", {"--qformat", "nvfp4_four_over_six"}},
    {"mamba_moe_nvfp4_aggressive", {"--qformat", "mamba_moe_nvfp4_aggressive"}},
    {"mamba_moe_nvfp4_conservative", {"--qformat", "mamba_moe_nvfp4_conservative"}},
    {"mamba_moe_fp8_aggressive", {"--qformat", "mamba_moe_fp8_aggressive"}},
    {"mamba_moe_fp8_conservative", {"--qformat", "mamba_moe_fp8_conservative"}},
};

static const char AWQ[] = "AWQ searches pre-quantization scales over the whole model, which lwq does not write per "
                          "layer";
static const char MX[] = "MX formats (power-of-two block scales) are not written by lwq";

static const struct {
    const char *name, *why;
} qformats_refused[] = {
    {"int8", "INT8 weights and activations are not written by lwq"},
    {"int8_smoothquant", "SmoothQuant folds scales into the previous layer (INT8), a format per-layer export cannot "
                         "write"},
    {"int8_weight_only", "INT8 weight-only is not written by lwq"},
    {"int4_awq", AWQ},
    {"int4_blockwise_weight_only", "INT4 weight-only is not written by lwq"},
    {"w4a8_awq_beta", AWQ},
    {"nvfp4_awq_lite", AWQ},
    {"nvfp4_awq_clip", AWQ},
    {"nvfp4_awq_full", AWQ},
    {"nvfp4_svdquant", "SVDQuant adds low-rank branches, which lwq does not write"},
    {"fp8_2d_blockwise_weight_only", "block-scaled FP8 weights (weight-only) are not written by lwq"},
    {"fp8_per_channel_per_token", "per-channel and per-token FP8 scales are not written by lwq"},
    {"mxfp4", MX},
    {"mxfp6", MX},
    {"mxfp8", MX},
    {"mxint8", MX},
    {"mxfp4_mlp_weight_only", MX},
    {"w4a8_mxfp4_fp8", MX},
    {"nvfp4_mlp_weight_only", "its weight-only NVFP4 uses blocks of 32 (numerics nvfp4_bs32); lwq writes NVFP4 with "
                              "blocks of 16 (w4a16_nvfp4)"},
    {"w4a8_nvfp4_fp8", "NVFP4 weights with FP8 activations (W4A8) are not written by lwq"},
    {"nvfp4_fp8_mha", "FP8 attention BMM and softmax quantizers are not written by lwq"},
    {"nvfp4_omlp_only", "not built into lwq; its quant_cfg runs as a --recipe YAML"},
};

const char *lwq_hfptq_qformat_help(void)
{
    return "nvfp4, fp8, nvfp4_experts_only, nvfp4_mlp_only, nvfp4_w4a4_weight_mse_fp8_sweep (= nvfp4 --algo mse "
           "--fp8-scale-sweep), nvfp4_w4a4_weight_local_hessian (= nvfp4 --algo local_hessian), "
           "nvfp4_experts-fp8_attn, qwen3next_production, w4a16_nvfp4 (weight-only NVFP4), nvfp4_four_over_six, "
           "mamba_moe_{nvfp4,fp8}_{aggressive,conservative}";
}

enum { F_MODEL, F_EXPORT, F_QFORMAT, F_KV, F_CALIB_SIZE, F_CALIB_SEQ, F_BATCH, F_DATASET, F_GPU, F_CPU, F_NOEFFECT,
       F_REFUSE, F_SPARSITY, F_RECIPE, F_AQ_BITS, F_AQ_METHOD, F_AQ_SCORE_SIZE, F_AQ_COST, F_AQ_RATIO };

static const struct {
    const char *flag;
    int kind, value;
    const char *why;
} flags[] = {
    {"--pyt_ckpt_path", F_MODEL, 1, NULL},
    {"--model", F_MODEL, 1, NULL},
    {"--export_path", F_EXPORT, 1, NULL},
    {"--qformat", F_QFORMAT, 1, NULL},
    {"--recipe", F_RECIPE, 1, NULL},
    {"--kv_cache_qformat", F_KV, 1, NULL},
    {"--calib_size", F_CALIB_SIZE, 1, NULL},
    {"--calib_seq", F_CALIB_SEQ, 1, NULL},
    {"--batch_size", F_BATCH, 1, NULL},
    {"--dataset", F_DATASET, 1, NULL},
    {"--max_gpu_memory_gb", F_GPU, 1, NULL},
    {"--max_cpu_memory_gb", F_CPU, 1, NULL},
    {"--offload_folder", F_NOEFFECT, 1, "lwq streams weights from the checkpoint itself"},
    {"--trust_remote_code", F_NOEFFECT, 0, "lwq runs no model code"},
    {"--attn_implementation", F_NOEFFECT, 1, "lwq has its own attention"},
    {"--skip_generate", F_NOEFFECT, 0, "lwq runs no generation preview"},
    {"--use_fsdp2", F_REFUSE, 0, "lwq is one process; FSDP2 ranks would each write the same shards"},
    {"--low_memory_mode", F_REFUSE, 0, "lwq always streams one layer at a time; hf_ptq's low-memory loader sets up "
                                       "quantizers from --qformat and cannot honor a recipe"},
    {"--vllm_fakequant_export", F_REFUSE, 0, "lwq writes the quantized checkpoint, not a vLLM fake-quant state"},
    {"--sparsity_fmt", F_SPARSITY, 1, "lwq writes dense checkpoints"},
    {"--awq_block_size", F_REFUSE, 1, AWQ},
    {"--auto_quantize_bits", F_AQ_BITS, 1, NULL},
    {"--auto_quantize_method", F_AQ_METHOD, 1, NULL},
    {"--auto_quantize_score_size", F_AQ_SCORE_SIZE, 1, NULL},
    {"--auto_quantize_cost_model", F_AQ_COST, 1, NULL},
    {"--auto_quantize_checkpoint", F_NOEFFECT, 1, "lwq keeps the search's scores in the resume directory "
                                                  "(OUT.layerwise_resume/auto_quantize/scores.json); a killed search "
                                                  "resumes from there"},
    {"--auto_quantize_active_moe_expert_ratio", F_AQ_RATIO, 1, NULL},
};

/* The translation writes at most a few words per argument (a --qformat A,B with
 * --auto_quantize_bits: 7), so both arrays grow as words are added, up to a bound no real
 * command line reaches: what is written decides the size, not an estimate per argument. */
#define HFPTQ_MAX_WORDS (1 << 24)

static int grow(lwq_hfptq_argv *a)
{
    if (a->argc + 1 < a->cap) /* room for the word and the NULL after it */
        return 0;
    if (a->cap >= HFPTQ_MAX_WORDS)
        return -1;
    int cap = a->cap ? a->cap * 2 : 64;
    char **v = realloc(a->argv, (size_t)cap * sizeof *v);
    if (!v)
        return -1;
    a->argv = v;
    char **o = realloc(a->owned, (size_t)cap * sizeof *o);
    if (!o)
        return -1;
    a->owned = o;
    a->cap = cap;
    return 0;
}

/* argv word s, not owned (an argument as given); argv stays NULL-terminated. */
static int pass(lwq_hfptq_argv *a, char *s)
{
    if (grow(a))
        return -1;
    a->argv[a->argc++] = s;
    a->argv[a->argc] = NULL;
    return 0;
}

/* A copy of s as the next word (nowned <= argc, so grow() covers owned too). */
static int keep(lwq_hfptq_argv *a, const char *s)
{
    char *d;
    if (grow(a) || !(d = strdup(s)))
        return -1;
    a->owned[a->nowned++] = d;
    a->argv[a->argc++] = d;
    a->argv[a->argc] = NULL;
    return 0;
}

void lwq_hfptq_free(lwq_hfptq_argv *a)
{
    for (int i = 0; i < a->nowned; i++)
        free(a->owned[i]);
    free(a->owned);
    free(a->argv);
    memset(a, 0, sizeof *a);
}

/* Which table entry s ("--flag" or "--flag=value") is; *eq points at the value after '='. */
static int find_flag(const char *s, const char **eq)
{
    *eq = NULL;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        size_t n = strlen(flags[i].flag);
        if (!strncmp(s, flags[i].flag, n) && (s[n] == 0 || s[n] == '=')) {
            if (s[n] == '=')
                *eq = s + n + 1;
            return (int)i;
        }
    }
    return -1;
}

static int qformat(lwq_hfptq_argv *a, const char *v, FILE *err)
{
    for (size_t i = 0; i < sizeof qformats / sizeof qformats[0]; i++)
        if (!strcmp(v, qformats[i].name)) {
            for (int k = 0; k < 6 && qformats[i].to[k]; k++)
                if (keep(a, qformats[i].to[k]))
                    return -1;
            return 0;
        }
    for (size_t i = 0; i < sizeof qformats_refused / sizeof qformats_refused[0]; i++)
        if (!strcmp(v, qformats_refused[i].name)) {
            fprintf(err, "lwq: --qformat %s is not supported: %s (supported: %s)\n", v, qformats_refused[i].why,
                    lwq_hfptq_qformat_help());
            return -1;
        }
    fprintf(err, "lwq: --qformat %s: unknown (supported: %s)\n", v, lwq_hfptq_qformat_help());
    return -1;
}

/* hf_ptq's AutoQuantize takes its candidates from --qformat A,B: lwq searches formats, so each
 * name must be one format (nvfp4, fp8, w4a16_nvfp4 (weight-only NVFP4, as the qwen3_6_moe
 * auto_quantize recipes use it), nvfp4_w4a4_weight_mse_fp8_sweep (NVFP4 with its own weight
 * algorithm, as Model Optimizer calibrates each candidate with its own); nvfp4_w4a4_weight_local_hessian
 * sets the base recipe's algorithm).  The base recipe is the fp8 preset when fp8 is a candidate (it leaves only routers
 * out), else nvfp4; "none" is always a candidate, as in Model Optimizer. */
static int aq_qformats(lwq_hfptq_argv *a, const char *v, FILE *err)
{
    char buf[256], list[96] = "";
    if (strlen(v) >= sizeof buf) {
        fprintf(err, "lwq: --qformat %s: too long\n", v);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", v);
    const char *algo[4] = {NULL, NULL, NULL, NULL};
    int nv = 0, fp = 0, wo = 0, nm = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "fp8")) {
            fp = 1;
        } else if (!strcmp(t, "w4a16_nvfp4")) {
            wo = 1;
        } else if (!strcmp(t, "nvfp4_w4a4_weight_mse_fp8_sweep")) {
            nm = 1;
        } else if (!strcmp(t, "nvfp4") || !strcmp(t, "nvfp4_w4a4_weight_local_hessian")) {
            if (nv++) {
                fprintf(err, "lwq: --qformat %s: lwq's search chooses among formats, so it takes one NVFP4 "
                             "candidate of nvfp4 and nvfp4_w4a4_weight_local_hessian, not both\n", v);
                return -1;
            }
            if (!strcmp(t, "nvfp4_w4a4_weight_local_hessian"))
                algo[0] = "--algo", algo[1] = "local_hessian";
        } else {
            fprintf(err, "lwq: --qformat %s with --auto_quantize_bits: candidate %s is not supported: lwq's search "
                         "chooses a format (nvfp4, fp8, w4a16_nvfp4, nvfp4_w4a4_weight_mse_fp8_sweep or none) per "
                         "group of every layer; give the "
                         "formats (e.g. --qformat nvfp4,fp8)\n", v, t);
            return -1;
        }
    }
    snprintf(list, sizeof list, "%s%s%s%snone", nv ? "nvfp4," : "", nm ? "nvfp4_w4a4_weight_mse_fp8_sweep," : "",
             fp ? "fp8," : "", wo ? "w4a16_nvfp4," : "");
    if (keep(a, "--qformat") || keep(a, fp ? "fp8" : "nvfp4"))
        return -1;
    for (int k = 0; k < 3 && algo[k]; k++)
        if (keep(a, algo[k]))
            return -1;
    return keep(a, "--auto-quantize-formats") || keep(a, list) ? -1 : 0;
}

static int kv_format(lwq_hfptq_argv *a, const char *v, FILE *err)
{
    if (!strcmp(v, "none") || !strcmp(v, "fp8") || !strcmp(v, "fp8_cast") || !strcmp(v, "nvfp4_cast"))
        return keep(a, "--kv-cache") || keep(a, v) ? -1 : 0;
    if (!strcmp(v, "fp8_affine") || !strcmp(v, "nvfp4_affine"))
        fprintf(err, "lwq: --kv_cache_qformat %s is not supported: affine (biased) KV cache quantization is "
                     "not written by lwq (supported: none, fp8, fp8_cast, nvfp4_cast)\n", v);
    else if (!strcmp(v, "nvfp4"))
        fprintf(err, "lwq: --kv_cache_qformat nvfp4 is not supported: a calibrated NVFP4 KV cache is not written by "
                     "lwq, its cast mode is (supported: none, fp8, fp8_cast, nvfp4_cast)\n");
    else if (!strcmp(v, "nvfp4_rotate"))
        fprintf(err, "lwq: --kv_cache_qformat nvfp4_rotate is not supported: rotated KV cache quantization is not "
                     "written by lwq (supported: none, fp8, fp8_cast, nvfp4_cast)\n");
    else
        fprintf(err, "lwq: --kv_cache_qformat %s: unknown (supported: none, fp8, fp8_cast, nvfp4_cast)\n", v);
    return -1;
}

int lwq_hfptq_translate(int argc, char **argv, lwq_hfptq_argv *a, FILE *notes, FILE *err)
{
    memset(a, 0, sizeof *a);
    if (pass(a, argv[0]))
        goto oom;
    int hf = 0, has_dataset = 0, has_recipe = 0, has_qformat = 0, has_out = 0, has_size = 0, has_seq = 0, has_batch = 0,
        has_aq = 0, has_score_size = 0;
    for (int i = 1; i < argc; i++) {
        const char *eq;
        int k = find_flag(argv[i], &eq);
        int kind = k >= 0 ? flags[k].kind : -1;
        hf |= kind == F_MODEL || kind == F_EXPORT;
        has_recipe |= kind == F_RECIPE;
        has_aq |= kind == F_AQ_BITS;
        has_score_size |= kind == F_AQ_SCORE_SIZE;
        has_dataset |= kind == F_DATASET || !strcmp(argv[i], "--calib");
        has_qformat |= kind == F_QFORMAT;
        has_out |= kind == F_EXPORT || !strcmp(argv[i], "-o") || !strcmp(argv[i], "--output");
        has_size |= kind == F_CALIB_SIZE || !strcmp(argv[i], "--calib-size");
        has_seq |= kind == F_CALIB_SEQ || !strcmp(argv[i], "--calib-seq");
        has_batch |= kind == F_BATCH || !strcmp(argv[i], "--batch-size");
        if (k >= 0 && flags[k].value && !eq)
            i++;
    }
    if (hf) { /* hf_ptq's defaults for what the command leaves out */
        const char *d[] = {!has_qformat && !has_recipe ? "--qformat" : NULL, "fp8",
                           !has_qformat && !has_recipe && has_aq ? "--auto-quantize-formats" : NULL, "fp8,none",
                           has_aq && !has_recipe && !has_score_size ? "--auto-quantize-score-size" : NULL, "128",
                           !has_size ? "--calib-size" : NULL, "1024",
                           !has_seq ? "--calib-seq" : NULL, "512",
                           !has_batch ? "--batch-size" : NULL, "0",
                           !has_out ? "-o" : NULL, "exported_model"};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; i += 2)
            if (d[i] && (keep(a, d[i]) || keep(a, d[i + 1])))
                goto oom;
    }
    for (int i = 1; i < argc; i++) {
        const char *eq, *s = argv[i];
        int k = find_flag(s, &eq);
        if (k < 0) {
            if (pass(a, argv[i]))
                goto oom;
            continue;
        }
        const char *v = eq;
        if (flags[k].value && !v) {
            if (i + 1 >= argc) {
                fprintf(err, "lwq: %s needs a value\n", s);
                return -1;
            }
            v = argv[++i];
        } else if (!flags[k].value && v) {
            fprintf(err, "lwq: %s takes no value\n", flags[k].flag);
            return -1;
        }
        const char *f = flags[k].flag;
        int rc = 0;
        switch (flags[k].kind) {
        case F_MODEL: rc = keep(a, v); break;
        case F_EXPORT: rc = keep(a, "-o") || keep(a, v); break;
        case F_RECIPE: rc = keep(a, "--recipe") || keep(a, v); break;
        case F_QFORMAT:
            if (has_recipe) {
                fprintf(notes, "lwq: note: --qformat %s is ignored: --recipe decides what is quantized (as in "
                               "hf_ptq)\n", v);
                break;
            }
            if (has_aq && !has_recipe ? aq_qformats(a, v, err) : qformat(a, v, err))
                return -1;
            break;
        case F_AQ_BITS:
            if (has_recipe) {
                fprintf(notes, "lwq: note: --auto_quantize_bits %s is ignored: --recipe decides what is quantized (as "
                               "in hf_ptq; lwq's own --auto-quantize-bits searches over a --recipe)\n", v);
                break;
            }
            rc = keep(a, "--auto-quantize-bits") || keep(a, v);
            break;
        case F_AQ_SCORE_SIZE:
            if (!has_recipe)
                rc = keep(a, "--auto-quantize-score-size") || keep(a, v);
            break;
        case F_AQ_METHOD:
            if (has_recipe)
                break;
            if (!strcmp(v, "kl_div")) {
                rc = keep(a, "--auto-quantize-score") || keep(a, "kl");
            } else if (!strcmp(v, "gradient")) {
                fprintf(notes, "lwq: note: --auto_quantize_method gradient: lwq computes no gradients; it scores each "
                               "group by the error it adds to its layer's output (kl_div: by the KL of the logits)\n");
            } else {
                fprintf(err, "lwq: --auto_quantize_method %s: unknown (gradient, kl_div)\n", v);
                return -1;
            }
            break;
        case F_AQ_COST:
            if (strcmp(v, "weight") && strcmp(v, "active_moe")) {
                fprintf(err, "lwq: --auto_quantize_cost_model %s: unknown (weight, active_moe)\n", v);
                return -1;
            }
            if (!has_recipe)
                rc = keep(a, "--auto-quantize-cost-model") || keep(a, v);
            break;
        case F_AQ_RATIO:
            if (!has_recipe)
                rc = keep(a, "--auto-quantize-active-moe-ratio") || keep(a, v);
            break;
        case F_KV:
            if (has_recipe) {
                fprintf(notes, "lwq: note: --kv_cache_qformat %s is ignored: the --recipe sets the KV cache (as in "
                               "hf_ptq)\n", v);
                break;
            }
            if (kv_format(a, v, err))
                return -1;
            break;
        case F_CALIB_SIZE:
            if (strchr(v, ',')) {
                fprintf(err, "lwq: --calib_size %s: lwq calibrates on one dataset, so give one size\n", v);
                return -1;
            }
            rc = keep(a, "--calib-size") || keep(a, v);
            break;
        case F_CALIB_SEQ: rc = keep(a, "--calib-seq") || keep(a, v); break;
        case F_BATCH: rc = keep(a, "--batch-size") || keep(a, v); break;
        case F_GPU: rc = keep(a, "--max-gpu-memory-gb") || keep(a, v); break;
        case F_CPU: rc = keep(a, "--max-cpu-memory-gb") || keep(a, v); break;
        case F_DATASET: {
            struct stat st;
            if (strchr(v, ',')) {
                fprintf(err, "lwq: --dataset %s: lwq calibrates on one dataset (one .jsonl / .txt file or a "
                             "directory)\n", v);
                return -1;
            }
            if (stat(v, &st) != 0) {
                fprintf(err, "lwq: --dataset %s: not a local file or directory; lwq reads no Hugging Face hub "
                             "datasets: export it to .jsonl (one {\"text\": ...} or {\"messages\": [...]} per line) "
                             "and pass that path\n", v);
                return -1;
            }
            rc = keep(a, "--calib") || keep(a, v);
            break;
        }
        case F_NOEFFECT:
            fprintf(notes, "lwq: note: %s has no effect in lwq (%s)\n", f, flags[k].why);
            break;
        case F_SPARSITY:
            if (strcmp(v, "dense")) {
                fprintf(err, "lwq: --sparsity_fmt %s is not supported: %s\n", v, flags[k].why);
                return -1;
            }
            break;
        case F_REFUSE:
            fprintf(err, "lwq: %s is not supported: %s\n", f, flags[k].why);
            return -1;
        }
        if (rc)
            goto oom;
    }
    if (hf) {
        char d[256] = "";
        snprintf(d, sizeof d, "%s%s%s%s%s%s", !has_qformat && !has_recipe ? ", --qformat fp8" : "",
                 !has_size ? ", --calib_size 1024" : "", !has_seq ? ", --calib_seq 512" : "",
                 !has_batch ? ", --batch_size 0" : "", !has_out ? ", --export_path exported_model" : "",
                 has_aq && !has_recipe && !has_score_size ? ", --auto_quantize_score_size 128" : "");
        if (d[0])
            fprintf(notes, "lwq: note: hf_ptq's defaults apply: %s\n", d + 2);
        if (!has_dataset)
            fprintf(notes, "lwq: note: no --dataset: lwq calibrates on its built-in text (hf_ptq would download its "
                           "default hub datasets)\n");
    }
    return 0;
oom:
    fprintf(err, "lwq: out of memory\n");
    return -1;
}
