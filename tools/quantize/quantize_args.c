/* tools/quantize/quantize_args.c — `lwq quantize` / `lwq plan`: the usage text and the command line
 * into a qargs (see quantize_args.h). */
#include "tools/quantize/quantize_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/hfptq_args.h"

void lwq_quantize_usage(FILE *fp, const char *cmd)
{
    fprintf(fp,
            "usage: lwq %s MODEL_DIR%s [options]\n\n"
            "%s\n\n"
            "what to quantize:\n"
            "  --qformat P          preset: %s (default nvfp4)\n"
            "  --recipe FILE.json   algorithm settings + ordered {match, format, enable, algo, fp8_scale_sweep,\n"
            "                       mla_projection, quantizer} rules (later rules win); replaces --qformat\n"
            "  --recipe FILE.yaml | NAME   a Model Optimizer PTQ recipe (docs/RECIPES.md); NAME resolves to\n"
            "                       NAME[.yml|.yaml] under the recipe root\n"
            "  --recipe-root DIR    where imports and recipe names resolve (default $LWQ_RECIPE_ROOT, else the\n"
            "                       current directory)\n"
            "  --print-recipe       print the effective lwq recipe as JSON and exit\n"
            "  --kv-cache M         none | fp8 | fp8_cast | nvfp4_cast (default fp8_cast: FP8 cache, no\n"
            "                       calibrated scales; nvfp4_cast: NVFP4 cache, likewise)\n"
            "  --algo A             max | mse | local_hessian | gptq (default: the recipe's, max for presets)\n"
            "  --fp8-scale-sweep    NVFP4 block scales by sweeping all 126 E4M3 values (with --algo mse)\n"
            "  --gptq-damp F        GPTQ dampening: F x mean Hessian diagonal added to it (default 0.01)\n"
            "  --gptq-act-order     GPTQ visits input columns by descending Hessian diagonal\n"
            "                       GPTQ (NVFP4, FP8 weights) rewrites each weight to cancel its rounding error\n"
            "                       on the calibration inputs; it calibrates sequentially: every layer sees the\n"
            "                       outputs of the already-quantized layers before it (--qdq-next is implied).\n"
            "                       Extra memory: an in x in Hessian (16 bytes an entry) per linear of a layer\n"
            "                       (`lwq plan` shows it); a killed run resumes with byte-identical output.\n"
            "the most accurate mix under a size budget (lwq quantize only):\n"
            "  --auto-quantize-bits B   at most B bits per weight over the decoder layers' linears (scales\n"
            "                       included, as lwq eval counts them)\n"
            "  --auto-quantize-gb G     at most G GB (1e9 bytes) of tensors written\n"
            "  --auto-quantize-formats F,...  candidate formats per group: nvfp4, fp8, w4a16_nvfp4 (weight-only\n"
            "                       NVFP4), nvfp4_w4a4_weight_mse_fp8_sweep (NVFP4 whose weights take the mse\n"
            "                       search with the FP8 scale sweep, whatever the base recipe's algorithm),\n"
            "                       w4a16_nvfp4_four_over_six (weight-only Four-over-Six NVFP4, mse over the\n"
            "                       multipliers 1.0 and 1.5),\n"
            "                       none (default nvfp4,fp8,none); only those: without none every searched\n"
            "                       group is quantized\n"
            "  --auto-quantize-score S  layer (default): each group alone quantized, the error it adds to its\n"
            "                       layer's output (relative), times how much the later layers grow such an\n"
            "                       error; kl: that output carried to the logits, KL to the source\n"
            "                       (one stream per group and format through the later layers: small models)\n"
            "  --auto-quantize-score-size N  calibration samples scored, the first N (default 1/8 of them,\n"
            "                       rounded up: Model Optimizer's ratio, 128 of hf_ptq's 1024)\n"
            "  --auto-quantize-cost-model M  weight (default): every linear counts alike; active_moe (Model\n"
            "                       Optimizer's): routed experts weigh the active ratio in costs and budget\n"
            "  --auto-quantize-active-moe-ratio R  that ratio (default num_experts_per_tok / num_experts)\n"
            "  --auto-quantize-scores FILE  reuse the complete pass 1 of an earlier search with the same inputs\n"
            "                       (its OUT.layerwise_resume/auto_quantize/scores.json): another budget then\n"
            "                       costs only the solve and pass 2\n"
            "                       Pass 1 scores the groups (q/k/v, o, gate/up, down, routed experts, linear\n"
            "                       attention) in one pass over the disk; an exact knapsack picks each group's\n"
            "                       format; the mix is written as a recipe (OUT/auto_quantize_recipe.json and\n"
            "                       .yaml, rerunnable with --recipe) and quantized by pass 2.  --qformat /\n"
            "                       --recipe give the base recipe: its exclusions and calibration settings\n"
            "                       apply, routers are never quantized.  Both passes resume after a kill.\n"
            "calibration:\n"
            "  --calib PATH         .jsonl (input_ids | messages | conversations | prompt | text | input per line),\n"
            "                       .txt (paragraphs), a directory,\n"
            "                       or \"builtin\" (default: the built-in text, tokenized with the model's\n"
            "                       tokenizer.json)\n"
            "  --calib-size N       samples (default 64)\n"
            "  --calib-seq L        tokens per sample at most (default 256)\n"
            "  --batch-size B       sequences per batch, left-padded (default 8; 0: the largest that fits\n"
            "                       --max-cpu-memory-gb / --max-gpu-memory-gb or physical memory, printed)\n"
            "  --calib-include-padding  padded positions count in statistics (Model Optimizer parity)\n"
            "  --calib-all-experts  every expert also runs on every token for its statistics\n"
            "run:\n"
            "  --device D           auto | cpu | cuda (default $LWQ_DEVICE, else auto); cuda loads the CUDA\n"
            "                       module liblwq-cuda.so from beside lwq (or $LWQ_CUDA_MODULE); auto uses\n"
            "                       it only where an NVIDIA driver is present\n"
            "  --threads N          CPU threads (default: all cores)\n"
            "  --max-gpu-memory-gb X, --max-cpu-memory-gb X   stop before reading weights if the plan exceeds them\n"
            "  --prefetch K         layers read ahead (ring slots, default 2)\n"
            "  --expert-group N     stream MoE layers as the dense part + groups of N routed experts\n"
            "                       (default: only when a layer does not fit the memory budget, with\n"
            "                       the largest group that fits; output bytes are the same either way)\n"
            "  --whole-model        reference path: all layers resident, data outside (same bytes)\n"
            "  --qdq-next           the next layer calibrates on the quantized layer's outputs (always on with\n"
            "                       gptq)\n"
            "  --dry-read           read every layer through the I/O path; compute and write nothing\n"
            "  --resume-dir DIR     resume state (default OUT_DIR.layerwise_resume)\n"
            "  --repair             recompute the last committed layer if its shard is damaged\n"
            "  --log-json FILE      one JSON object per layer and a summary\n"
            "  --quiet              no progress output\n"
            "ranks (MPI): mpirun -np N lwq quantize ... (or srun): every rank reads each layer, computes\n"
            "  its share of the calibration batches and of the quantization; rank 0 writes the output.\n"
            "  The bytes are those of one process; a resume may use another rank count.  Without\n"
            "  --threads each rank takes its share of the node's cores.  `lwq plan --ranks N` shows the\n"
            "  memory of each rank.\n\n"
            "A killed run resumes where it stopped when the same command is run again; the output is\n"
            "byte-identical to an uninterrupted run.  One run per output: a second run on the same\n"
            "output or resume directory is refused at once, naming the running one's pid.\n\n"
            "%s"
            "Model Optimizer hf_ptq.py's flags work too (--pyt_ckpt_path/--model, --export_path, --qformat,\n"
            "--kv_cache_qformat, --calib_size, --calib_seq, --batch_size, --dataset, --max_gpu_memory_gb,\n"
            "--max_cpu_memory_gb, --recipe); --qformat also takes Model Optimizer's names (docs/RECIPES.md):\n"
            "  %s.\n\n"
            "exit status: 0 done, 2 error (message on stderr)\n",
            cmd, strcmp(cmd, "plan") ? " -o OUT_DIR" : "",
            strcmp(cmd, "plan") ? "Quantize a Hugging Face checkpoint layer by layer to NVFP4/FP8 (ModelOpt format)."
                                : "Predict peak host/GPU memory and output size of a quantize run with these options.",
            lwq_recipe_preset_names(),
            strcmp(cmd, "plan") ? "" : "lwq plan --eval SRC [QUANT_DIR] [eval options] plans an `lwq eval` run instead.\n\n",
            lwq_hfptq_qformat_help());
}

/* Where the command line's refusals go, for the length of one lwq_quantize_args_parse: its caller's
 * stream (stderr, or under a launcher with several ranks a buffer whose text becomes this rank's
 * status at the job's first agreement: tools/quantize/cmd_quantize.c run_cmd). */
static FILE *perr;

static int need(int i, int argc, char **argv)
{
    if (i + 1 >= argc) {
        fprintf(perr, "lwq: %s needs a value\n", argv[i]);
        return 0;
    }
    return 1;
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(perr, "lwq: %s %s: expected an integer in [%d, %d]\n", opt, s, lo, hi);
        return 0;
    }
    *out = (int)v;
    return 1;
}

static int parse_gb(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0) || v > 1e6) {
        fprintf(perr, "lwq: %s %s: expected a positive number of GB\n", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_bits(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0) || v > 64) {
        fprintf(perr, "lwq: %s %s: expected bits per weight in (0, 64]\n", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_ratio(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= 1.0 / (1 << 20)) || v > 1) {
        fprintf(perr, "lwq: %s %s: expected routed experts active per token as a ratio in [2^-20, 1]\n", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_device(const char *what, const char *d, lwq_device_choice *out)
{
    if (!strcmp(d, "auto"))
        *out = LWQ_DEVICE_AUTO;
    else if (!strcmp(d, "cpu"))
        *out = LWQ_DEVICE_CPU;
    else if (!strcmp(d, "cuda"))
        *out = LWQ_DEVICE_CUDA;
    else {
        fprintf(perr, "lwq: %s %s: expected auto, cpu or cuda\n", what, d);
        return -1;
    }
    return 0;
}

/* --auto-quantize-formats "nvfp4,fp8,w4a16_nvfp4,nvfp4_w4a4_weight_mse_fp8_sweep,none" -> f[candidate]
 * (engine/autoq/autoq.h). */
static int parse_formats(const char *list, uint8_t f[LWQ_AQ_FORMATS])
{
    memset(f, 0, LWQ_AQ_FORMATS);
    char buf[128];
    if (strlen(list) >= sizeof buf) {
        fprintf(perr, "lwq: --auto-quantize-formats %s: too long\n", list);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int q = lwq_aq_format_parse(t);
        if (q < 0) {
            fprintf(perr, "lwq: --auto-quantize-formats: unknown format \"%s\" (nvfp4, fp8, w4a16_nvfp4, "
                    "nvfp4_w4a4_weight_mse_fp8_sweep, w4a16_nvfp4_four_over_six, none)\n", t);
            return -1;
        }
        f[q] = 1;
    }
    return 0;
}

/* What the job's first agreement compares (core/parallel/ranks.h, lwq_ranks_agree_job): each option as
 * given, but not --threads (it changes no byte) nor --quiet / --log-json (rank 0 alone honours
 * them). */
static void job_note(lwq_ranks_job *job, char **argv, int start, int i)
{
    const char *k = argv[start];
    if (!strcmp(k, "--threads") || !strcmp(k, "--quiet") || !strcmp(k, "--log-json"))
        return;
    if (k[0] != '-')
        lwq_ranks_job_add(job, "MODEL_DIR", k);
    else
        lwq_ranks_job_add(job, !strcmp(k, "--output") ? "-o" : k, i > start ? argv[i] : "");
}

int lwq_quantize_args_parse(int argc, char **argv, int is_plan, qargs *a, lwq_ranks_job *job, FILE *err)
{
    perr = err;
    memset(a, 0, sizeof *a);
    a->qformat = "nvfp4";
    a->calib_size = 64;
    a->calib_seq = 256;
    a->o.batch_size = 8;
    memset(a->aq_fmt, 1, sizeof a->aq_fmt); /* nvfp4, fp8, none; the others only when listed */
    a->aq_fmt[LWQ_AQ_W4A16] = 0;
    a->aq_fmt[LWQ_AQ_NVFP4_MSE] = 0;
    a->aq_fmt[LWQ_AQ_W4A16_F46] = 0;
    /* the default device may come from the environment (perf/gpu-check.sh runs the resume and
     * production tests with LWQ_DEVICE=cuda, so they cannot fall back to the CPU silently) */
    const char *env_dev = getenv("LWQ_DEVICE");
    if (env_dev && *env_dev && parse_device("LWQ_DEVICE", env_dev, &a->o.device) != 0)
        return -1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            a->help = 1; /* printed once every rank is known to have asked for it (run_cmd) */
            return 0;
        }
        int start = i;
#define VAL() (need(i, argc, argv) ? argv[++i] : NULL)
        if (!strcmp(s, "-o") || !strcmp(s, "--output")) {
            if (!(a->out = VAL()))
                return -1;
        } else if (!strcmp(s, "--qformat")) {
            if (!(a->qformat = VAL()))
                return -1;
        } else if (!strcmp(s, "--recipe")) {
            if (!(a->recipe_file = VAL()))
                return -1;
        } else if (!strcmp(s, "--recipe-root")) {
            if (!(a->recipe_root = VAL()))
                return -1;
        } else if (!strcmp(s, "--print-recipe")) {
            a->print_recipe = 1;
        } else if (!strcmp(s, "--kv-cache")) {
            if (!(a->kv = VAL()))
                return -1;
        } else if (!strcmp(s, "--algo")) {
            if (!(a->algo = VAL()))
                return -1;
        } else if (!strcmp(s, "--fp8-scale-sweep")) {
            a->sweep = 1;
        } else if (!strcmp(s, "--gptq-damp")) {
            const char *v = VAL();
            char *end;
            if (!v)
                return -1;
            errno = 0;
            a->damp = strtod(v, &end);
            if (errno || *end || !(a->damp > 0.0 && a->damp <= 10.0)) {
                fprintf(perr, "lwq: --gptq-damp %s: expected a number in (0, 10]\n", v);
                return -1;
            }
        } else if (!strcmp(s, "--gptq-act-order")) {
            a->act_order = 1;
        } else if (!strcmp(s, "--calib")) {
            if (!(a->calib = VAL()))
                return -1;
        } else if (!strcmp(s, "--calib-size")) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 1, 1 << 20, &a->calib_size))
                return -1;
        } else if (!strcmp(s, "--calib-seq")) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 1, 1 << 20, &a->calib_seq))
                return -1;
        } else if (!strcmp(s, "--batch-size")) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 0, 4096, &a->o.batch_size))
                return -1;
        } else if (!strcmp(s, "--calib-include-padding")) {
            a->o.include_padding = 1;
        } else if (!strcmp(s, "--calib-all-experts")) {
            a->o.all_experts = 1;
        } else if (!strcmp(s, "--device")) {
            const char *d = VAL();
            if (!d || parse_device("--device", d, &a->o.device) != 0)
                return -1;
        } else if (!strcmp(s, "--ranks") && is_plan) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 1, 65536, &a->o.plan_ranks))
                return -1;
        } else if (!strcmp(s, "--threads")) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 1, 256, &a->o.threads))
                return -1;
        } else if (!strcmp(s, "--expert-group")) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 1, 1 << 20, &a->o.expert_group))
                return -1;
        } else if (!strcmp(s, "--prefetch")) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 1, 16, &a->o.prefetch))
                return -1;
        } else if (!strcmp(s, "--max-gpu-memory-gb")) {
            if (!need(i, argc, argv) || !parse_gb(s, argv[++i], &a->o.max_gpu_gb))
                return -1;
        } else if (!strcmp(s, "--max-cpu-memory-gb")) {
            if (!need(i, argc, argv) || !parse_gb(s, argv[++i], &a->o.max_cpu_gb))
                return -1;
        } else if (!strcmp(s, "--whole-model")) {
            a->o.whole_model = 1;
        } else if (!strcmp(s, "--qdq-next")) {
            a->o.qdq_next = 1;
        } else if (!strcmp(s, "--dry-read")) {
            a->o.dry_read = 1;
        } else if (!strcmp(s, "--resume-dir")) {
            if (!(a->o.resume_dir = VAL()))
                return -1;
        } else if (!strcmp(s, "--repair")) {
            a->o.repair = 1;
        } else if (!strcmp(s, "--log-json")) {
            if (!(a->o.log_json = VAL()))
                return -1;
        } else if (!strcmp(s, "--quiet")) {
            a->o.quiet = 1;
        } else if (!strcmp(s, "--auto-quantize-bits")) {
            if (!need(i, argc, argv) || !parse_bits(s, argv[++i], &a->aq_bits))
                return -1;
        } else if (!strcmp(s, "--auto-quantize-gb")) {
            if (!need(i, argc, argv) || !parse_gb(s, argv[++i], &a->aq_gb))
                return -1;
        } else if (!strcmp(s, "--auto-quantize-formats")) {
            if (!(a->aq_formats = VAL()) || parse_formats(a->aq_formats, a->aq_fmt) != 0)
                return -1;
        } else if (!strcmp(s, "--auto-quantize-score")) {
            if (!(a->aq_score = VAL()))
                return -1;
        } else if (!strcmp(s, "--auto-quantize-scores")) {
            if (!(a->aq_scores = VAL()))
                return -1;
        } else if (!strcmp(s, "--auto-quantize-cost-model")) {
            if (!(a->aq_cost = VAL()))
                return -1;
            if (strcmp(a->aq_cost, "weight") && strcmp(a->aq_cost, "active_moe")) {
                fprintf(perr, "lwq: --auto-quantize-cost-model %s: expected weight or active_moe\n", a->aq_cost);
                return -1;
            }
        } else if (!strcmp(s, "--auto-quantize-active-moe-ratio")) {
            if (!need(i, argc, argv) || !parse_ratio(s, argv[++i], &a->aq_moe_ratio))
                return -1;
        } else if (!strcmp(s, "--auto-quantize-score-size")) {
            if (!need(i, argc, argv) || !parse_int(s, argv[++i], 1, 1 << 20, &a->aq_score_size))
                return -1;
        } else if (s[0] == '-') {
            fprintf(perr, "lwq: unknown option %s (lwq %s --help)\n", s, argv[0]);
            return -1;
        } else if (!a->model) {
            a->model = s;
        } else {
            fprintf(perr, "lwq: unexpected argument %s\n", s);
            return -1;
        }
#undef VAL
        job_note(job, argv, start, i);
    }
    if (!a->model && !a->print_recipe) {
        fprintf(perr, "lwq: %s needs MODEL_DIR (lwq %s --help)\n", argv[0], argv[0]);
        return -1;
    }
    if (!is_plan && !a->out && !a->print_recipe && !a->o.dry_read) {
        fprintf(perr, "lwq: quantize needs -o OUT_DIR\n");
        return -1;
    }
    int aq = a->aq_bits > 0 || a->aq_gb > 0;
    if (!aq && (a->aq_formats || a->aq_score || a->aq_score_size || a->aq_scores || a->aq_cost || a->aq_moe_ratio)) {
        fprintf(perr, "lwq: --auto-quantize-formats / -score / -score-size / -scores / -cost-model / "
                        "-active-moe-ratio need a budget: "
                        "--auto-quantize-bits B or --auto-quantize-gb G\n");
        return -1;
    }
    if (aq && (is_plan || a->print_recipe)) {
        fprintf(perr, "lwq: %s does not run the auto-quantize search (it runs with lwq quantize -o OUT)\n",
                is_plan ? "lwq plan" : "--print-recipe");
        return -1;
    }
    if (a->aq_bits > 0 && a->aq_gb > 0) {
        fprintf(perr, "lwq: give one budget: --auto-quantize-bits or --auto-quantize-gb\n");
        return -1;
    }
    return 0;
}
