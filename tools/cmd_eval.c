/* tools/cmd_eval.c — `lwq eval SRC [QUANT_DIR]`: what quantization cost (engine/eval/eval.h). */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys/log.h"
#include "engine/eval/eval.h"
#include "text/dataset.h"
#include "text/eval_text.h"
#include "layout/recipe/recipe.h"
#include "text/tokenizer.h"
#include "tools/commands.h"

#define MAX_CAND 16

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: lwq eval SRC [QUANT_DIR] [options]\n\n"
            "Measure what quantization costs: the source model and each quantized candidate walk the layers\n"
            "together, one layer in memory, with the serving engine's activation and KV-cache quantization\n"
            "emulated (--weights-only: without).  Reports per layer the relative MSE of the hidden state, and\n"
            "at the end KL(P_src||P_q), top-1 agreement, perplexity under both, size and bits per weight of\n"
            "each candidate.\n\n"
            "candidates (without QUANT_DIR: built in memory, nothing written; all evaluated in one pass):\n"
            "  QUANT_DIR            a quantized checkpoint: lwq's export or a Model Optimizer HF export\n"
            "                       (hf_quant_config.json / quantization_config: NVFP4, FP8, MIXED_PRECISION)\n"
            "  --qformat A,B,...    presets: %s (default nvfp4)\n"
            "  --recipe FILE.json   a recipe candidate (repeat for several)\n"
            "  --algo A             max | mse | local_hessian, for every recipe candidate (gptq candidates:\n"
            "                       quantize them and evaluate the written checkpoint)\n"
            "  --fp8-scale-sweep    NVFP4 block scales by sweeping all 126 E4M3 values (with --algo mse)\n"
            "  --kv-cache M         none | fp8 | fp8_cast, for every recipe candidate; with QUANT_DIR only\n"
            "                       none: leave the checkpoint's FP8 KV cache out of the emulation\n"
            "  --weights-only       dequantized weights only: activations and the KV cache stay unquantized\n"
            "                       (what another framework computes from the dequantized checkpoint)\n"
            "calibration of recipe candidates (as lwq quantize):\n"
            "  --calib PATH  --calib-size N (64)  --calib-seq L (256)  --calib-include-padding  --calib-all-experts\n"
            "eval data:\n"
            "  --data PATH          same formats as --calib (default: the built-in held-out text, which does not\n"
            "                       overlap the built-in calibration text)\n"
            "  --data-size N        samples (default 64)     --data-seq L   tokens per sample at most (default 256)\n"
            "  --batch-size B       sequences per batch, left-padded (default 8)\n"
            "run:\n"
            "  --device D  --threads N  --prefetch K  --max-gpu-memory-gb X  --max-cpu-memory-gb X\n"
            "  --plan               print the memory plan and exit\n"
            "  --json FILE          the results as one JSON object\n"
            "  --log-json FILE      one JSON line per layer and a summary\n"
            "  --quiet              no progress output\n\n"
            "exit status: 0 done, 2 error (message on stderr)\n",
            lwq_recipe_preset_names());
}

typedef struct eargs {
    const char *src, *qdir, *qformat, *recipes[MAX_CAND], *calib, *data, *algo, *kv, *json;
    int nrecipes, sweep, calib_size, calib_seq, data_size, data_seq, plan;
    lwq_eval_opts o;
} eargs;

static int int_opt(int *i, int argc, char **argv, int lo, int hi, int *out)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "lwq: %s needs a value\n", argv[*i]);
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(argv[*i + 1], &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "lwq: %s %s: expected an integer in [%d, %d]\n", argv[*i], argv[*i + 1], lo, hi);
        return 0;
    }
    *out = (int)v;
    (*i)++;
    return 1;
}

static int gb_opt(int *i, int argc, char **argv, double *out)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "lwq: %s needs a value\n", argv[*i]);
        return 0;
    }
    char *end;
    double v = strtod(argv[*i + 1], &end);
    if (*end || !(v > 0) || v > 1e6) {
        fprintf(stderr, "lwq: %s %s: expected a positive number of GB\n", argv[*i], argv[*i + 1]);
        return 0;
    }
    *out = v;
    (*i)++;
    return 1;
}

static int parse(int argc, char **argv, eargs *a)
{
    memset(a, 0, sizeof *a);
    a->calib_size = a->data_size = 64;
    a->calib_seq = a->data_seq = 256;
    a->o.batch_size = 8;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
#define VAL(dst)                                                                                   \
    do {                                                                                           \
        if (i + 1 >= argc) {                                                                       \
            fprintf(stderr, "lwq: %s needs a value\n", s);                                         \
            return -1;                                                                             \
        }                                                                                          \
        dst = argv[++i];                                                                           \
    } while (0)
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(stdout);
            exit(LWQ_EXIT_OK);
        } else if (!strcmp(s, "--qformat")) {
            VAL(a->qformat);
        } else if (!strcmp(s, "--recipe")) {
            if (a->nrecipes == MAX_CAND) {
                fprintf(stderr, "lwq: at most %d --recipe candidates\n", MAX_CAND);
                return -1;
            }
            VAL(a->recipes[a->nrecipes]);
            a->nrecipes++;
        } else if (!strcmp(s, "--algo")) {
            VAL(a->algo);
        } else if (!strcmp(s, "--fp8-scale-sweep")) {
            a->sweep = 1;
        } else if (!strcmp(s, "--kv-cache")) {
            VAL(a->kv);
        } else if (!strcmp(s, "--calib")) {
            VAL(a->calib);
        } else if (!strcmp(s, "--data")) {
            VAL(a->data);
        } else if (!strcmp(s, "--json")) {
            VAL(a->json);
        } else if (!strcmp(s, "--log-json")) {
            VAL(a->o.log_json);
        } else if (!strcmp(s, "--calib-size")) {
            if (!int_opt(&i, argc, argv, 1, 1 << 20, &a->calib_size))
                return -1;
        } else if (!strcmp(s, "--calib-seq")) {
            if (!int_opt(&i, argc, argv, 1, 1 << 20, &a->calib_seq))
                return -1;
        } else if (!strcmp(s, "--data-size")) {
            if (!int_opt(&i, argc, argv, 1, 1 << 20, &a->data_size))
                return -1;
        } else if (!strcmp(s, "--data-seq")) {
            if (!int_opt(&i, argc, argv, 2, 1 << 20, &a->data_seq))
                return -1;
        } else if (!strcmp(s, "--batch-size")) {
            if (!int_opt(&i, argc, argv, 1, 4096, &a->o.batch_size))
                return -1;
        } else if (!strcmp(s, "--threads")) {
            if (!int_opt(&i, argc, argv, 1, 256, &a->o.threads))
                return -1;
        } else if (!strcmp(s, "--prefetch")) {
            if (!int_opt(&i, argc, argv, 1, 16, &a->o.prefetch))
                return -1;
        } else if (!strcmp(s, "--max-gpu-memory-gb")) {
            if (!gb_opt(&i, argc, argv, &a->o.max_gpu_gb))
                return -1;
        } else if (!strcmp(s, "--max-cpu-memory-gb")) {
            if (!gb_opt(&i, argc, argv, &a->o.max_cpu_gb))
                return -1;
        } else if (!strcmp(s, "--calib-include-padding")) {
            a->o.include_padding = 1;
        } else if (!strcmp(s, "--calib-all-experts")) {
            a->o.all_experts = 1;
        } else if (!strcmp(s, "--plan")) {
            a->plan = 1;
        } else if (!strcmp(s, "--quiet")) {
            a->o.quiet = 1;
        } else if (!strcmp(s, "--weights-only")) {
            a->o.weights_only = 1;
        } else if (!strcmp(s, "--device")) {
            const char *d;
            VAL(d);
            if (!strcmp(d, "auto"))
                a->o.device = LWQ_DEVICE_AUTO;
            else if (!strcmp(d, "cpu"))
                a->o.device = LWQ_DEVICE_CPU;
            else if (!strcmp(d, "cuda"))
                a->o.device = LWQ_DEVICE_CUDA;
            else {
                fprintf(stderr, "lwq: --device %s: expected auto, cpu or cuda\n", d);
                return -1;
            }
        } else if (s[0] == '-') {
            fprintf(stderr, "lwq: unknown option %s (lwq eval --help)\n", s);
            return -1;
        } else if (!a->src) {
            a->src = s;
        } else if (!a->qdir) {
            a->qdir = s;
        } else {
            fprintf(stderr, "lwq: unexpected argument %s\n", s);
            return -1;
        }
#undef VAL
    }
    if (!a->src) {
        fprintf(stderr, "lwq: eval needs SRC (lwq eval --help)\n");
        return -1;
    }
    if (a->qdir && (a->qformat || a->nrecipes || a->algo || a->sweep || a->calib)) {
        fprintf(stderr, "lwq: with QUANT_DIR the checkpoint is the candidate; --qformat, --recipe, --algo, "
                        "--fp8-scale-sweep and --calib build candidates in memory instead\n");
        return -1;
    }
    if (a->qdir && a->kv && strcmp(a->kv, "none")) {
        fprintf(stderr, "lwq: with QUANT_DIR the checkpoint declares its KV cache; --kv-cache none (do not emulate "
                        "it) is the only choice\n");
        return -1;
    }
    return 0;
}

/* A token set: a file (PATH), or the built-in calibration (calib) / held-out eval text. */
static int load_set(const char *model, const char *path, int size, int seq, int is_eval, int quiet,
                    lwq_calib_set *cs, lwq_error *e)
{
    memset(cs, 0, sizeof *cs);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/tokenizer.json", model);
    lwq_tokenizer *tok = NULL;
    int rc = access(p, F_OK) == 0 ? lwq_tokenizer_load(&tok, p, e) : 0;
    if (rc)
        return rc;
    lwq_calib_opts co = {0};
    co.max_samples = (size_t)size;
    co.seq_len = (size_t)seq;
    if (!tok) {
        co.pad_id = 0;
        co.has_pad_id = 1;
    }
    const char *file = path && strcmp(path, "builtin") ? path : NULL;
    if (!file && !tok)
        return lwq_errf(e, LWQ_EINVAL, "%s has no tokenizer.json, so the built-in text cannot be tokenized; give --%s "
                        "FILE.jsonl with \"input_ids\"", model, is_eval ? "data" : "calib");
    lwq_calib_batch b;
    lwq_calib_stats st;
    if (!file && is_eval) {
        size_t n = lwq_eval_builtin_count();
        const char *texts[64];
        for (size_t i = 0; i < n && i < 64; i++)
            texts[i] = lwq_eval_builtin_sample(i);
        rc = lwq_calib_from_texts(tok, texts, n < (size_t)size ? n : (size_t)size, &co, &b, &st, e);
    } else {
        rc = lwq_calib_load(tok, file, &co, &b, &st, e);
    }
    lwq_tokenizer_free(tok);
    if (rc)
        return rc;
    if (!quiet) {
        char line[256];
        lwq_calib_stats_format(&st, line, sizeof line);
        fprintf(stderr, "lwq: %s: %s\n", is_eval ? "eval data" : "calibration", line);
    }
    cs->n = (int)b.n;
    cs->ids = calloc(b.n ? b.n : 1, sizeof *cs->ids);
    cs->len = calloc(b.n ? b.n : 1, sizeof *cs->len);
    cs->pad_id = b.pad_id >= 0 ? b.pad_id : 0;
    snprintf(cs->source, sizeof cs->source, "%s", file ? file : is_eval ? "built-in held-out text" : "built-in text");
    for (size_t i = 0; cs->ids && cs->len && i < b.n; i++) {
        int64_t len = b.lengths[i];
        cs->len[i] = len;
        if (!(cs->ids[i] = malloc((size_t)(len ? len : 1) * sizeof(int32_t))))
            break;
        memcpy(cs->ids[i], b.ids + i * b.seq + (b.seq - (size_t)len), (size_t)len * sizeof(int32_t));
    }
    int bad = !cs->ids || !cs->len || (b.n && !cs->ids[b.n - 1]);
    lwq_calib_batch_free(&b);
    if (bad) {
        lwq_calib_set_free(cs);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    return 0;
}

/* One recipe per candidate: --recipe files, else the --qformat list; --algo / --fp8-scale-sweep /
 * --kv-cache applied to each. */
static int build_recipes(eargs *a, lwq_recipe *r, lwq_eval_candidate *c, int *n, lwq_error *e)
{
    *n = 0;
    char list[1024];
    int rc = 0;
    if (a->nrecipes) {
        for (int i = 0; i < a->nrecipes && rc == 0; i++) {
            if ((rc = lwq_recipe_load(a->recipes[i], &r[*n], e)) != 0)
                break;
            const char *base = strrchr(a->recipes[i], '/');
            snprintf(c[*n].name, sizeof c[*n].name, "%s", base ? base + 1 : a->recipes[i]);
            char *dot = strrchr(c[*n].name, '.');
            if (dot && !strcmp(dot, ".json"))
                *dot = 0;
            (*n)++;
        }
    } else {
        snprintf(list, sizeof list, "%s", a->qformat ? a->qformat : "nvfp4");
        char *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t && rc == 0; t = strtok_r(NULL, ",", &save)) {
            if (*n == MAX_CAND)
                return lwq_errf(e, LWQ_EINVAL, "--qformat: at most %d candidates", MAX_CAND);
            if ((rc = lwq_recipe_preset(t, &r[*n], e)) != 0)
                break;
            snprintf(c[*n].name, sizeof c[*n].name, "%s", t);
            (*n)++;
        }
    }
    for (int i = 0; i < *n && rc == 0; i++) {
        if (a->algo && lwq_algo_parse(a->algo, &r[i].algo) != 0)
            rc = lwq_errf(e, LWQ_EINVAL, "--algo %s: expected max, mse or local_hessian", a->algo);
        if (a->sweep)
            r[i].fp8_scale_sweep = 1;
        if (rc == 0 && a->kv && lwq_kv_mode_parse(a->kv, &r[i].kv) != 0)
            rc = lwq_errf(e, LWQ_EINVAL, "--kv-cache %s: expected none, fp8 or fp8_cast", a->kv);
        /* the stream emulates an FP8 cache only: an NVFP4 one would be reported as unquantized */
        if (rc == 0 && r[i].lm_head)
            rc = lwq_errf(e, LWQ_EUNSUPPORTED, "candidate %s: a quantized lm_head is not emulated by lwq eval (the "
                          "head runs in the source dtype)", c[i].name);
        if (rc == 0 && r[i].kv == LWQ_KV_NVFP4_CAST)
            rc = lwq_errf(e, LWQ_EUNSUPPORTED, "candidate %s: an NVFP4 KV cache is not emulated by lwq eval "
                          "(--kv-cache none evaluates the weights and activations alone)", c[i].name);
        c[i].recipe = &r[i];
        for (int j = 0; j < i; j++) /* names must tell candidates apart */
            if (!strcmp(c[j].name, c[i].name)) {
                size_t len = strlen(c[i].name);
                snprintf(c[i].name + (len < 120 ? len : 120), sizeof c[i].name - (len < 120 ? len : 120), "#%d", i + 1);
            }
    }
    return rc;
}

int lwq_cmd_eval(int argc, char **argv)
{
    eargs a;
    if (parse(argc, argv, &a) != 0)
        return LWQ_EXIT_ERR;
    if (a.o.quiet)
        lwq_log_set_level(LWQ_LOG_WARN);
    lwq_error e = {0};
    lwq_recipe rec[MAX_CAND];
    lwq_eval_candidate cand[MAX_CAND];
    memset(cand, 0, sizeof cand);
    int ncand = 0, rc = 0;
    lwq_calib_set calib = {0}, data = {0};
    if (a.qdir) {
        const char *base = strrchr(a.qdir, '/');
        snprintf(cand[0].name, sizeof cand[0].name, "%s", base && base[1] ? base + 1 : a.qdir);
        cand[0].quant_dir = a.qdir;
        cand[0].kv_none = a.kv != NULL;
        ncand = 1;
    } else {
        rc = build_recipes(&a, rec, cand, &ncand, &e);
        if (rc == 0)
            rc = load_set(a.src, a.calib, a.calib_size, a.calib_seq, 0, a.o.quiet, &calib, &e);
    }
    if (rc == 0)
        rc = load_set(a.src, a.data, a.data_size, a.data_seq, 1, a.o.quiet, &data, &e);
    a.o.model_dir = a.src;
    a.o.ncand = ncand;
    a.o.cand = cand;
    a.o.calib = a.qdir ? NULL : &calib;
    a.o.data = &data;
    lwq_eval_result res = {0};
    if (rc == 0 && a.plan) {
        lwq_mem_plan p;
        if ((rc = lwq_eval_plan(&a.o, &p, &e)) == 0)
            lwq_eval_plan_print(&p, &a.o, stdout);
    } else if (rc == 0) {
        mallopt(M_MMAP_THRESHOLD, 1 << 20); /* as quantize: freed layers do not stay resident */
        rc = lwq_eval_run(&a.o, &res, &e);
        if (rc == 0) {
            lwq_eval_print_table(&res, stdout);
            if (a.json)
                rc = lwq_eval_write_json(&res, a.json, &e);
        }
        lwq_eval_result_free(&res);
    }
    lwq_calib_set_free(&calib);
    lwq_calib_set_free(&data);
    for (int i = 0; !a.qdir && i < ncand; i++)
        lwq_recipe_free(&rec[i]);
    if (rc) {
        fprintf(stderr, "lwq: %s\n", e.msg[0] ? e.msg : lwq_strerror(rc));
        return LWQ_EXIT_ERR;
    }
    return LWQ_EXIT_OK;
}
