/* tools/quantize/cmd_quantize.c — `lwq quantize` and `lwq plan`: the command line agreed by every rank,
 * the calibration set, and the run (the command line itself is quantize_args.c, its recipe
 * quantize_recipe.c). */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/sys/log.h"
#include "core/parallel/parallel.h"
#include "core/parallel/ranks.h"
#include "engine/autoq/autoq.h"
#include "engine/run/engine.h"
#include "io/sys.h"
#include "text/dataset.h"
#include "layout/recipe/recipe.h"
#include "text/tokenizer.h"
#include "tools/commands.h"
#include "tools/hfptq_args.h"
#include "tools/quantize/quantize_args.h"
#include "tools/quantize_batch.h"
#include "tools/tool_util.h"

/* Where the command line's refusals go: stderr, or under a launcher with several ranks a buffer
 * whose text becomes this rank's status at the job's first agreement (run_cmd), so every rank
 * learns it as "rank N: ..." and none is left waiting for one that left. */
static FILE *perr;

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
                  lwq_quantize_args_parse(hf.argc, hf.argv, is_plan, &a, &job, perr) != 0;
    if (nf)
        fclose(nf);
    int rc = refused ? LWQ_EINVAL : 0;
    lwq_ranks_job_command(&job, a.help ? (is_plan ? "lwq plan --help" : "lwq quantize --help")
                                : a.print_recipe ? "lwq quantize --print-recipe" : is_plan ? "lwq plan" : "lwq quantize");
    /* crash-test hook: LWQ_SYS_CRASH_STEP=k kills the process at its (k+1)-th mutating file step */
    if (rc == 0 && !a.help && lwq_sys_fault_from_env() < 0)
        rc = lwq_errf(&e, LWQ_EINVAL, "LWQ_SYS_CRASH_STEP / LWQ_SYS_CRASH_MODE are malformed");
    if (rc == 0 && !a.help)
        rc = lwq_quantize_args_recipe(&a, &r, &e);
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
                lwq_quantize_usage(stdout, hf.argv[0]);
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
    ao.baseline = a->aq_baseline;
    ao.baseline_bits = a->aq_baseline_bits;
    ao.own_algos = a->aq_own_algos;
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
            int n = lwq_parallel_usable_cpus();
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
