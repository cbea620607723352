/* tools/cmd_quantize.c — `lwq quantize` and `lwq plan`. */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/sys/log.h"
#include "core/parallel/ranks.h"
#include "engine/autoq/autoq.h"
#include "engine/run/engine.h"
#include "engine/run/resume/manifest.h"
#include "io/sys.h"
#include "text/dataset.h"
#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"
#include "text/tokenizer.h"
#include "tools/commands.h"
#include "tools/hfptq_args.h"
#include "tools/quantize_batch.h"
#include "tools/tool_util.h"

static void usage(FILE *fp, const char *cmd)
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
            "                       NVFP4), none (default nvfp4,fp8,none); only those: without none every\n"
            "                       searched group is quantized\n"
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

typedef struct qargs {
    const char *model, *out, *qformat, *recipe_file, *recipe_root, *calib, *algo, *kv, *aq_formats, *aq_score,
        *aq_scores, *aq_cost;
    double aq_moe_ratio;
    int help, print_recipe, sweep, calib_size, calib_seq, act_order, aq_score_size;
    double aq_bits, aq_gb;
    uint8_t aq_fmt[LWQ_AQ_FORMATS]; /* candidate formats (engine/autoq/autoq.h) */
    int aq_nspaces;                 /* an auto_quantize recipe's module_search_spaces */
    lwq_recipe_aq_space aq_space[LWQ_RECIPE_AQ_MAX_SPACES];
    uint8_t aq_unmatched[LWQ_AQ_FORMATS]; /* with them: the formats of the groups none matches */
    double damp; /* 0: the recipe's */
    lwq_quantize_opts o;
} qargs;

/* Where the command line's refusals go: stderr, or under a launcher with several ranks a buffer
 * whose text becomes this rank's status at the job's first agreement (run_cmd), so every rank
 * learns it as "rank N: ..." and none is left waiting for one that left. */
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

/* --auto-quantize-formats "nvfp4,fp8,w4a16_nvfp4,none" -> f[candidate] (engine/autoq/autoq.h). */
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
            fprintf(perr, "lwq: --auto-quantize-formats: unknown format \"%s\" (nvfp4, fp8, w4a16_nvfp4, none)\n", t);
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

static int parse_args(int argc, char **argv, int is_plan, qargs *a, lwq_ranks_job *job)
{
    memset(a, 0, sizeof *a);
    a->qformat = "nvfp4";
    a->calib_size = 64;
    a->calib_seq = 256;
    a->o.batch_size = 8;
    memset(a->aq_fmt, 1, sizeof a->aq_fmt); /* nvfp4, fp8, none; w4a16_nvfp4 only when listed */
    a->aq_fmt[LWQ_AQ_W4A16] = 0;
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

/* An auto_quantize recipe (layout/recipe/recipe_yaml.h) is the search's options; an --auto-quantize-*
 * option given on the command line wins, as over any recipe. */
static int aq_from_recipe(qargs *a, const lwq_recipe_run *run, const char *path, lwq_error *e)
{
    if (a->print_recipe)
        return lwq_errf(e, LWQ_EINVAL, "%s is an auto_quantize recipe: --print-recipe does not run the auto-quantize "
                        "search (it runs with lwq quantize -o OUT)", path);
    if (a->aq_bits <= 0 && a->aq_gb <= 0)
        a->aq_bits = run->aq_bits;
    if (!a->aq_formats) {
        memset(a->aq_fmt, 0, sizeof a->aq_fmt);
        a->aq_fmt[LWQ_QFMT_NONE] = 1; /* always a candidate, as Model Optimizer adds it */
        a->aq_fmt[LWQ_QFMT_NVFP4] = (uint8_t)run->aq_nvfp4;
        a->aq_fmt[LWQ_QFMT_FP8] = (uint8_t)run->aq_fp8;
        a->aq_fmt[LWQ_AQ_W4A16] = (uint8_t)run->aq_w4a16;
    }
    /* module_search_spaces: the top-level candidates (or --auto-quantize-formats, which wins) are the
     * unmatched groups'; the search quantizes every candidate of either */
    a->aq_nspaces = run->aq_nspaces;
    if (run->aq_nspaces > 0) {
        memcpy(a->aq_space, run->aq_space, sizeof a->aq_space);
        memcpy(a->aq_unmatched, a->aq_fmt, sizeof a->aq_unmatched);
        for (int k = 0; k < run->aq_nspaces; k++) {
            a->aq_fmt[LWQ_QFMT_NVFP4] |= (uint8_t)(run->aq_space[k].nvfp4 != 0);
            a->aq_fmt[LWQ_QFMT_FP8] |= (uint8_t)(run->aq_space[k].fp8 != 0);
            a->aq_fmt[LWQ_AQ_W4A16] |= (uint8_t)(run->aq_space[k].w4a16 != 0);
        }
    }
    if (!a->aq_cost && run->aq_active_moe)
        a->aq_cost = "active_moe";
    if (a->aq_moe_ratio <= 0 && run->aq_moe_ratio > 0)
        a->aq_moe_ratio = run->aq_moe_ratio;
    if (!a->aq_score)
        a->aq_score = run->aq_kl ? "kl" : "layer";
    if (!run->aq_kl)
        LWQ_INFO("%s: auto_quantize_method gradient has no lwq equivalent: lwq scores by the layer-output error", path);
    if (a->aq_score_size <= 0)
        a->aq_score_size = run->aq_score_size > 0 ? run->aq_score_size : 128; /* Model Optimizer's default */
    return 0;
}

/* --recipe: lwq JSON, or Model Optimizer YAML whose layerwise block can set the resume directory
 * and --qdq-next (the command line wins over the recipe). */
static int load_recipe(qargs *a, lwq_recipe *r, lwq_error *e)
{
    const char *root = a->recipe_root ? a->recipe_root : getenv("LWQ_RECIPE_ROOT");
    if (root && !*root)
        root = NULL;
    char path[PATH_MAX];
    int is_yaml = 0;
    int rc = lwq_recipe_find(a->recipe_file, root, path, sizeof path, &is_yaml, e);
    if (rc)
        return rc;
    if (!is_yaml)
        return lwq_recipe_load(path, r, e);
    lwq_recipe_run run;
    if ((rc = lwq_recipe_yaml_load(path, root, r, &run, e)) != 0)
        return rc;
    /* lwq writes only into the output, its resume directory and directories the command line
     * names: a recipe (a file from anywhere) may say where the resume state goes, but only a
     * --resume-dir makes it so */
    if (run.has_checkpoint_dir && !a->o.resume_dir)
        return lwq_errf(e, LWQ_EINVAL, "%s: quantize.algorithm.layerwise.checkpoint_dir is \"%s\"; a recipe does not "
                        "choose where lwq writes: give --resume-dir %s to use that directory, or remove the key (the "
                        "resume state then goes beside the output, in OUT" LWQ_RESUME_SUFFIX ")",
                        run.checkpoint_dir_at, run.checkpoint_dir, run.checkpoint_dir);
    if (run.has_checkpoint_dir && strcmp(run.checkpoint_dir, a->o.resume_dir))
        LWQ_INFO("%s: checkpoint_dir %s is overridden by --resume-dir %s", run.checkpoint_dir_at, run.checkpoint_dir,
                 a->o.resume_dir);
    if (run.has_qdq_next && run.qdq_next)
        a->o.qdq_next = 1;
    return run.is_aq ? aq_from_recipe(a, &run, path, e) : 0;
}

static int build_recipe(qargs *a, lwq_recipe *r, lwq_error *e)
{
    memset(r, 0, sizeof *r); /* lwq_recipe_free is safe on it whatever fails below */
    int rc = a->recipe_file ? load_recipe(a, r, e) : lwq_recipe_preset(a->qformat, r, e);
    if (rc)
        return rc;
    if (a->algo) {
        if (!strcmp(a->algo, "awq") || !strcmp(a->algo, "svdquant") || !strcmp(a->algo, "smoothquant") ||
            !strcmp(a->algo, "awq_lite"))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "--algo %s is not supported (supported: max, mse, local_hessian, gptq)",
                            a->algo);
        if (lwq_algo_parse(a->algo, &r->algo) != 0)
            return lwq_errf(e, LWQ_EINVAL, "--algo %s: expected max, mse, local_hessian or gptq", a->algo);
    }
    if ((a->damp > 0 || a->act_order) && !lwq_recipe_uses_gptq(r))
        return lwq_errf(e, LWQ_EINVAL, "%s is for GPTQ, but no module of recipe \"%s\" uses gptq (add --algo gptq)",
                        a->damp > 0 ? "--gptq-damp" : "--gptq-act-order", r->name);
    if (a->damp > 0)
        r->gptq_damp = a->damp;
    if (a->act_order)
        r->gptq_act_order = 1;
    if (a->sweep)
        r->fp8_scale_sweep = 1;
    if (a->kv && lwq_kv_mode_parse(a->kv, &r->kv) != 0)
        return lwq_errf(e, LWQ_EINVAL, "--kv-cache %s: expected none, fp8, fp8_cast or nvfp4_cast", a->kv);
    return 0;
}

/* The calibration set: token sequences, unpadded, in file order. */
static int load_calib(qargs *a, lwq_calib_set *cs, lwq_error *e)
{
    memset(cs, 0, sizeof *cs);
    char cfgpath[PATH_MAX], tokpath[PATH_MAX];
    int rc = lwq_pathf(e, cfgpath, sizeof cfgpath, "%s/config.json", a->model);
    if (rc || (rc = lwq_pathf(e, tokpath, sizeof tokpath, "%s/tokenizer.json", a->model)) != 0)
        return rc;
    if (access(cfgpath, F_OK) != 0)
        return lwq_errsys(e, -errno, "%s: no config.json; not a Hugging Face checkpoint directory", a->model);
    lwq_tokenizer *tok = NULL;
    if (access(tokpath, F_OK) == 0)
        rc = lwq_tokenizer_load(&tok, tokpath, e);
    if (rc)
        return rc;
    lwq_calib_opts co = {0};
    co.max_samples = (size_t)a->calib_size;
    co.seq_len = (size_t)a->calib_seq;
    if (!tok) {
        co.pad_id = 0;
        co.has_pad_id = 1;
    }
    const char *path = a->calib && strcmp(a->calib, "builtin") ? a->calib : NULL;
    if (!path && !tok) {
        return lwq_errf(e, LWQ_EINVAL, "%s has no tokenizer.json, so the built-in text cannot be tokenized; give "
                        "--calib FILE.jsonl with \"input_ids\"", a->model);
    }
    lwq_calib_batch b;
    lwq_calib_stats st;
    rc = lwq_calib_load(tok, path, &co, &b, &st, e);
    lwq_tokenizer_free(tok);
    if (rc)
        return rc;
    if (!a->o.quiet)
        lwq_calib_stats_log(&st);
    cs->n = (int)b.n;
    cs->ids = calloc(b.n ? b.n : 1, sizeof *cs->ids);
    cs->len = calloc(b.n ? b.n : 1, sizeof *cs->len);
    cs->pad_id = b.pad_id >= 0 ? b.pad_id : 0;
    snprintf(cs->source, sizeof cs->source, "%s", path ? path : "built-in text");
    if (!cs->ids || !cs->len) {
        lwq_calib_batch_free(&b);
        lwq_calib_set_free(cs);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < b.n; i++) {
        int64_t len = b.lengths[i];
        cs->len[i] = len;
        cs->ids[i] = malloc((size_t)(len ? len : 1) * sizeof(int32_t));
        if (!cs->ids[i]) {
            lwq_calib_batch_free(&b);
            lwq_calib_set_free(cs);
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        }
        memcpy(cs->ids[i], b.ids + i * b.seq + (b.seq - (size_t)len), (size_t)len * sizeof(int32_t));
    }
    lwq_calib_batch_free(&b);
    return 0;
}

static int quantize_ranks(qargs *a, lwq_ranks *rk, lwq_error *e, int *quiet_err);

static void on_signal(int sig)
{
    (void)sig;
    lwq_engine_request_stop();
    static const char msg[] = "\nlwq: stopping after the layer in flight is committed (signal again to kill)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

/* This rank's refusal of its command line as an error, from what it wrote to perr: one message a
 * line, without their "lwq: ". */
static int refusal(const char *text, lwq_error *e)
{
    char m[LWQ_ERRMSG_MAX];
    size_t k = 0;
    m[0] = 0;
    for (const char *p = text ? text : ""; *p && k < sizeof m;) {
        if (!strncmp(p, "lwq: ", 5))
            p += 5;
        size_t n = strcspn(p, "\n");
        if (n)
            k += (size_t)snprintf(m + k, sizeof m - k, "%s%.*s", k ? "; " : "", (int)n, p);
        p += n + (p[n] == '\n');
    }
    return lwq_errf(e, LWQ_EINVAL, "%s", m[0] ? m : "its command line was refused");
}

static int run_translated(qargs *a, lwq_ranks *rk, int is_plan, lwq_recipe *r, lwq_error *e, int *quiet_err);

static int run_cmd(int argc0, char **argv0, int is_plan)
{
    lwq_ranks rk;
    memset(&rk, 0, sizeof rk);
    rk.size = rk.local_size = 1;
    lwq_error e = {0};
    /* The ranks of an MPI job (core/parallel/ranks.h) first agree on what each was asked to do, before any
     * can leave: one that would print and exit (--print-recipe, --help, lwq plan) or refuse its
     * command line would leave the others waiting for ever in their first collective, and ranks
     * with other options would meet in other collectives.  A build without MPI cannot wait on
     * anyone: it starts its ranks where the run starts (and refuses there). */
    int job_first = lwq_ranks_built_with_mpi() && lwq_ranks_launched();
    if (job_first && lwq_ranks_init(NULL, NULL, &rk, &e) != 0) {
        fprintf(stderr, "lwq: %s\n", e.msg);
        lwq_ranks_finalize(&rk);
        return LWQ_EXIT_ERR;
    }
    char *errtext = NULL, *notes = NULL;
    size_t errlen = 0, nlen = 0;
    perr = rk.size > 1 ? open_memstream(&errtext, &errlen) : NULL;
    if (!perr)
        perr = stderr;
    FILE *nf = open_memstream(&notes, &nlen);
    lwq_hfptq_argv hf;
    memset(&hf, 0, sizeof hf);
    qargs a;
    memset(&a, 0, sizeof a);
    lwq_ranks_job job;
    memset(&job, 0, sizeof job);
    lwq_recipe r;
    memset(&r, 0, sizeof r);
    /* refused: the command line (its message is in perr), or a step with its message in e */
    int refused = !nf || lwq_hfptq_translate(argc0, argv0, &hf, nf, perr) != 0 ||
                  parse_args(hf.argc, hf.argv, is_plan, &a, &job) != 0;
    if (nf)
        fclose(nf);
    int rc = refused ? LWQ_EINVAL : 0;
    lwq_ranks_job_command(&job, a.help ? (is_plan ? "lwq plan --help" : "lwq quantize --help")
                                : a.print_recipe ? "lwq quantize --print-recipe" : is_plan ? "lwq plan" : "lwq quantize");
    /* crash-test hook: LWQ_SYS_CRASH_STEP=k kills the process at its (k+1)-th mutating file step */
    if (rc == 0 && !a.help && lwq_sys_fault_from_env() < 0)
        rc = lwq_errf(&e, LWQ_EINVAL, "LWQ_SYS_CRASH_STEP / LWQ_SYS_CRASH_MODE are malformed");
    if (rc == 0 && !a.help)
        rc = build_recipe(&a, &r, &e);
    if (perr != stderr) {
        fclose(perr);
        if (refused)
            refusal(errtext, &e);
    }
    perr = stderr;
    free(errtext);
    if (rk.size > 1)
        rc = lwq_ranks_agree_job(&rk, rc, &job, &e);
    lwq_ranks_job_free(&job);
    int quiet_err = refused && rk.size <= 1; /* said already, on stderr */
    if (rc == 0) {
        if (rk.rank == 0)
            fputs(notes ? notes : "", stderr); /* what hf_ptq's flags became, once the command line is known good */
        if (a.help) {
            if (rk.rank == 0)
                usage(stdout, hf.argv[0]);
        } else {
            rc = run_translated(&a, &rk, is_plan, &r, &e, &quiet_err);
        }
    }
    quiet_err |= rc && rk.agreed && rk.rank > 0;
    lwq_recipe_free(&r);
    lwq_hfptq_free(&hf);
    free(notes);
    if (rc && !quiet_err)
        fprintf(stderr, "lwq: %s\n", e.msg[0] ? e.msg : lwq_strerror(rc));
    /* an error every rank has: no rank leaves before rank 0 has said it (a launcher ends the job
     * when the first rank exits non-zero) */
    if (rc && rk.agreed) {
        fflush(stderr);
        lwq_ranks_barrier(&rk, NULL);
    }
    lwq_ranks_finalize(&rk);
    return rc ? LWQ_EXIT_ERR : LWQ_EXIT_OK;
}

/* The command, its line agreed by every rank. */
static int run_translated(qargs *a, lwq_ranks *rk, int is_plan, lwq_recipe *r, lwq_error *e, int *quiet_err)
{
    if (a->o.quiet)
        lwq_log_set_level(LWQ_LOG_WARN);
    if (is_plan && (a->aq_bits > 0 || a->aq_gb > 0))
        return lwq_errf(e, LWQ_EINVAL, "%s is an auto_quantize recipe: lwq plan does not run the auto-quantize search "
                        "(it runs with lwq quantize -o OUT)", a->recipe_file);
    if (a->print_recipe) {
        if (rk->rank == 0) {
            char *s = lwq_recipe_to_json(r);
            printf("%s\n", s ? s : "{}");
            free(s);
        }
        return 0;
    }
    /* the ranks of an MPI job (core/parallel/ranks.h) before anything is said: rank 0 speaks for the job */
    int rc = 0;
    if (!lwq_ranks_built_with_mpi() && !is_plan && (rc = lwq_ranks_init(NULL, NULL, rk, e)) != 0)
        return rc;
    if (rk->rank > 0) {
        a->o.quiet = 1;
        lwq_log_set_level(LWQ_LOG_ERROR);
    }
    lwq_calib_set cs;
    int have_cs = (rc = load_calib(a, &cs, e)) == 0;
    if (rc == 0) {
        a->o.model_dir = a->model;
        a->o.out_dir = a->out;
        a->o.recipe = r;
        a->o.calib = &cs;
        if (a->o.batch_size == 0) /* hf_ptq's default: the largest batch that fits */
            rc = lwq_pick_batch_size(&a->o, e);
    }
    if (rk->size > 1) /* every rank got this far: one of them failing is everyone's error */
        rc = lwq_ranks_agree(rk, rc, e);
    if (rc != 0) {
        /* reported by run_cmd */
    } else if (is_plan) {
        lwq_mem_plan p;
        if ((rc = lwq_quantize_plan(&a->o, &p, e)) == 0 && rk->rank == 0) {
            lwq_mem_plan_print(&p, &a->o);
            if (a->o.max_cpu_gb > 0 && (double)p.host_peak > a->o.max_cpu_gb * 1e9)
                printf("does not fit: host peak %.3f GB > --max-cpu-memory-gb %.3f\n", (double)p.host_peak / 1e9,
                       a->o.max_cpu_gb);
            else if (a->o.max_gpu_gb > 0 && (double)p.gpu_peak > a->o.max_gpu_gb * 1e9)
                printf("does not fit: GPU peak %.3f GB > --max-gpu-memory-gb %.3f\n", (double)p.gpu_peak / 1e9,
                       a->o.max_gpu_gb);
            else
                printf("fits: host %.3f GB, GPU %.3f GB, output %.3f GB\n", (double)p.host_peak / 1e9,
                       (double)p.gpu_peak / 1e9, (double)p.output_bytes / 1e9);
        }
        if (rk->size > 1)
            rc = lwq_ranks_agree(rk, rc, e);
    } else {
        rc = quantize_ranks(a, rk, e, quiet_err);
    }
    if (have_cs)
        lwq_calib_set_free(&cs);
    return rc;
}

/* CPUs this process may run on (an MPI launcher's binding, a cgroup or taskset narrow it). */
static int cpus_allowed(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* lwq quantize, or the auto-quantize search (engine/autoq/), which runs in one process. */
static int run_one(qargs *a, lwq_ranks *rk, lwq_error *e)
{
    if (a->aq_bits <= 0 && a->aq_gb <= 0)
        return lwq_quantize_run(&a->o, e);
    if (rk->size > 1) {
        rk->agreed = 1; /* every rank refuses alike */
        return lwq_errf(e, LWQ_EUNSUPPORTED, "--auto-quantize-bits / --auto-quantize-gb search in one process; start "
                        "it without mpirun (%d ranks here)", rk->size);
    }
    lwq_autoq_opts ao;
    memset(&ao, 0, sizeof ao);
    ao.q = a->o;
    ao.bits = a->aq_bits;
    ao.gb = a->aq_gb;
    ao.score_size = a->aq_score_size;
    ao.scores_from = a->aq_scores;
    ao.active_moe = a->aq_cost && !strcmp(a->aq_cost, "active_moe");
    ao.active_moe_ratio = a->aq_moe_ratio;
    memcpy(ao.formats, a->aq_fmt, sizeof ao.formats);
    ao.spaces = a->aq_space;
    ao.nspaces = a->aq_nspaces;
    memcpy(ao.unmatched, a->aq_unmatched, sizeof ao.unmatched);
    if (a->aq_score && !strcmp(a->aq_score, "kl"))
        ao.score = LWQ_AQ_SCORE_KL;
    else if (a->aq_score && strcmp(a->aq_score, "layer"))
        return lwq_errf(e, LWQ_EINVAL, "--auto-quantize-score %s: expected layer or kl", a->aq_score);
    return lwq_autoq_run(&ao, e);
}

/* The run, as one of the ranks of an MPI job when launched so (core/parallel/ranks.h).  An error every rank
 * shares (agreed) is printed by rank 0 alone; one only this rank knows ends the whole job. */
static int quantize_ranks(qargs *a, lwq_ranks *rk_, lwq_error *e, int *quiet_err)
{
    lwq_ranks rk = *rk_;
    int rc = 0;
    {
        if (rk.mpi)
            a->o.ranks = &rk;
        /* ranks on one node share its cores unless --threads says otherwise */
        if (a->o.threads == 0 && rk.local_size > 1) {
            int n = cpus_allowed();
            a->o.threads = n > rk.local_size ? n / rk.local_size : 1;
        }
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        /* A fixed threshold turns off glibc's dynamic one, which after the first large free
         * serves buffers up to 32 MB from the heap, where freed layers stay resident: peak
         * RSS then wandered by that much from run to run and with the layer count. */
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
        rc = run_one(a, &rk, e);
        if (rc && rk.size > 1 && !rk.agreed) {
            fprintf(stderr, "lwq: rank %d: %s\n", rk.rank, e->msg[0] ? e->msg : lwq_strerror(rc));
            fflush(stderr);
            lwq_ranks_abort(&rk, LWQ_EXIT_ERR);
        }
        *quiet_err = rc && rk.rank > 0;
    }
    *rk_ = rk;
    return rc;
}

int lwq_cmd_quantize(int argc, char **argv) { return run_cmd(argc, argv, 0); }
int lwq_cmd_plan(int argc, char **argv)
{
    /* lwq plan --eval SRC [QUANT_DIR] [eval options]: the plan of an eval run (tools/cmd_eval.c) */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--eval")) {
            if (lwq_tool_job_alone("lwq plan --eval") != 0)
                return LWQ_EXIT_ERR;
            char **v = calloc((size_t)argc + 2, sizeof *v);
            if (!v)
                return LWQ_EXIT_ERR;
            int n = 0;
            v[n++] = "eval";
            for (int j = 1; j < argc; j++)
                if (j != i)
                    v[n++] = argv[j];
            v[n++] = "--plan";
            int rc = lwq_cmd_eval(n, v);
            free(v);
            return rc;
        }
    return run_cmd(argc, argv, 1);
}
