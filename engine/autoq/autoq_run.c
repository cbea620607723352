/* engine/autoq/autoq_run.c — `lwq quantize --auto-quantize-*`: pass 1, the solve, the recipe,
 * pass 2, the report (engine/autoq/autoq.h).
 *
 * Steps (each resumable by rerunning the identical command):
 *   1. lock OUT and the resume directory (io/runlock.h); the pass-1 fingerprint against
 *      <resume>/auto_quantize/scores.json: absent -> fresh, other inputs -> refused naming them;
 *   2. pass 1 from the first uncommitted layer (autoq_score.c) unless the scores are complete;
 *   3. the knapsack (autoq_solve.c) and the recipe (autoq_recipe.c), written to
 *      <resume>/auto_quantize/auto_quantize_recipe.json and .yaml; the lock is released for pass 2;
 *   4. pass 2: lwq_quantize_run with the parsed recipe (its own resume and lock);
 *   5. the written size counted from OUT's tensors, then OUT/auto_quantize_recipe.json, .yaml
 *      and auto_quantize.json (no timings in them: a rerun writes the same bytes). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/log.h"
#include "engine/autoq/autoq_recipe.h"
#include "engine/eval/eval_internal.h"
#include "io/durable.h"

typedef struct aq_paths {
    char out[PATH_MAX], resume[PATH_MAX], dir[PATH_MAX], scores[PATH_MAX];
} aq_paths;

static int paths(const lwq_autoq_opts *o, aq_paths *p, lwq_error *e)
{
    int rc = lwq_pathf(e, p->out, sizeof p->out, "%s", o->q.out_dir);
    size_t n = strlen(p->out);
    while (rc == 0 && n > 1 && p->out[n - 1] == '/')
        p->out[--n] = 0;
    if (rc == 0)
        rc = o->q.resume_dir ? lwq_pathf(e, p->resume, sizeof p->resume, "%s", o->q.resume_dir)
                             : lwq_pathf(e, p->resume, sizeof p->resume, "%s" LWQ_RESUME_SUFFIX, p->out);
    if (rc == 0)
        rc = lwq_pathf(e, p->dir, sizeof p->dir, "%s/" LWQ_AQ_DIR, p->resume);
    if (rc == 0)
        rc = lwq_pathf(e, p->scores, sizeof p->scores, "%s/" LWQ_AQ_MANIFEST, p->dir);
    return rc;
}

static const char *backend_name(const lwq_autoq_opts *o)
{
    lwq_device_choice d = o->q.device;
    if (d == LWQ_DEVICE_AUTO)
        d = lwq_backend_cuda_device_count() > 0 ? LWQ_DEVICE_CUDA : LWQ_DEVICE_CPU;
    return d == LWQ_DEVICE_CUDA ? "cuda" : "cpu";
}

/* Step 1's decision: the committed scores, or a fresh record (saved at once, so a rerun with
 * other inputs is refused even before the first layer commits). */
static int open_scores(const lwq_autoq_opts *o, const aq_paths *p, const lwq_ckpt *ck, const lwq_arch_layer *plans,
                       lwq_aq_scores *s, lwq_error *e)
{
    lwq_fingerprint fp;
    int rc = lwq_aq_fingerprint(o, ck, plans, backend_name(o), &fp, e);
    if (rc)
        return rc;
    const char *from = p->scores;
    if (o->scores_from) {
        /* the earlier search's scores, unless this output has its own already */
        lwq_aq_scores own;
        int orc = lwq_aq_scores_load(p->scores, &own, e);
        lwq_aq_scores_free(&own);
        if (orc == LWQ_ENOENT)
            from = o->scores_from;
        else if (orc)
            return orc;
    }
    rc = lwq_aq_scores_load(from, s, e);
    if (rc == LWQ_ENOENT && from != p->scores)
        return lwq_errf(e, LWQ_ENOENT, "--auto-quantize-scores %s: no such file", from);
    if (rc == 0 && from != p->scores && !s->complete)
        return lwq_errf(e, LWQ_ESTATE, "--auto-quantize-scores %s: that search did not finish its pass 1", from);
    if (rc == LWQ_ENOENT) {
        memset(s, 0, sizeof *s);
        s->fp = fp;
        s->nlayers = ck->cfg.num_hidden_layers;
        s->score = o->score;
        if (!(s->rec = calloc((size_t)s->nlayers, sizeof *s->rec)))
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        return lwq_aq_scores_save(p->scores, s, e);
    }
    if (rc)
        return rc;
    if (s->fp.all != fp.all) {
        char diff[512];
        lwq_fp_diff(&s->fp, &fp, diff, sizeof diff);
        if (from != p->scores)
            return lwq_errf(e, LWQ_ESTATE, "--auto-quantize-scores %s: that search had different inputs (changed: %s)",
                            from, diff);
        return lwq_errf(e, LWQ_ESTATE, "%s belongs to an auto-quantize search with different inputs (changed: %s); "
                        "refusing to mix them.  Rerun the original command, or delete %s and %s to start over",
                        p->scores, diff, p->out, p->resume);
    }
    if (s->nlayers != ck->cfg.num_hidden_layers || s->score != o->score)
        return lwq_errf(e, LWQ_ESTATE, "%s: %d layers, score %s; this run has %d layers, score %s", from, s->nlayers,
                        lwq_aq_score_name(s->score), ck->cfg.num_hidden_layers, lwq_aq_score_name(o->score));
    /* a copy in this output's resume directory: a rerun needs nothing outside it */
    return from != p->scores ? lwq_aq_scores_save(p->scores, s, e) : 0;
}

/* Bytes OUT holds for the decoder-layer linears' weights and scales, and for every tensor. */
static int written(const lwq_autoq_opts *o, const lwq_ckpt *src, const lwq_arch_layer *plans, uint64_t *lin,
                   uint64_t *all, lwq_error *e)
{
    lwq_qdir q;
    int rc = lwq_qdir_open(&q, o->q.out_dir, src, e);
    if (rc)
        return rc;
    static const char *const parts[] = {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"};
    *lin = *all = 0;
    for (int i = 0; i < q.ck.ntensors; i++)
        *all += q.ck.tensors[i].nbytes;
    for (int L = 0; L < src->cfg.num_hidden_layers; L++)
        for (int i = 0; i < plans[L].nlinears; i++)
            for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
                char n[LWQ_ARCH_NAME_MAX + 24];
                snprintf(n, sizeof n, "%s%s", plans[L].linears[i].name, parts[k]);
                const lwq_ckpt_tensor *t = lwq_ckpt_find(&q.ck, n);
                *lin += t ? t->nbytes : 0;
            }
    lwq_qdir_free(&q);
    return 0;
}

/* Spearman's rank correlation of x and y (average ranks for ties); NAN for fewer than 2. */
static double spearman(const double *x, const double *y, int n)
{
    if (n < 2)
        return NAN;
    double *r[2] = {malloc((size_t)n * sizeof(double)), malloc((size_t)n * sizeof(double))};
    const double *v[2] = {x, y};
    double out = NAN;
    if (r[0] && r[1]) {
        for (int a = 0; a < 2; a++)
            for (int i = 0; i < n; i++) {
                int less = 0, eq = 0;
                for (int j = 0; j < n; j++) {
                    less += v[a][j] < v[a][i];
                    eq += v[a][j] == v[a][i];
                }
                r[a][i] = less + (eq + 1) / 2.0;
            }
        double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
        for (int i = 0; i < n; i++) {
            mx += r[0][i] / n;
            my += r[1][i] / n;
        }
        for (int i = 0; i < n; i++) {
            sxy += (r[0][i] - mx) * (r[1][i] - my);
            sxx += (r[0][i] - mx) * (r[0][i] - mx);
            syy += (r[1][i] - my) * (r[1][i] - my);
        }
        out = sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
    }
    free(r[0]);
    free(r[1]);
    return out;
}

/* With the kl score: how well the cheap layer-output scores rank the (group, format) pairs
 * against it; rho[0] for the error per token, rho[1] for the error relative to the output. */
static int correlations(const lwq_aq_scores *s, double rho[2], int *pairs)
{
    int n = 0;
    for (int L = 0; L < s->nlayers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++)
            n += s->rec[L].g[k].allowed[LWQ_QFMT_NVFP4] + s->rec[L].g[k].allowed[LWQ_QFMT_FP8];
    double *kl = malloc((size_t)(n ? n : 1) * sizeof *kl), *a = malloc((size_t)(n ? n : 1) * sizeof *a);
    double *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    if (!kl || !a || !b) {
        free(kl);
        free(a);
        free(b);
        return -1;
    }
    int i = 0;
    for (int L = 0; L < s->nlayers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++)
            for (int f = LWQ_QFMT_NVFP4; f <= LWQ_QFMT_FP8; f++) {
                const lwq_aq_lrec *r = &s->rec[L];
                if (!r->g[k].allowed[f])
                    continue;
                kl[i] = r->g[k].kl[f];
                a[i] = r->tokens ? r->g[k].err[f] / (double)r->tokens : 0;
                b[i++] = r->out_sq > 0 ? r->g[k].err[f] / r->out_sq : 0;
            }
    rho[0] = spearman(a, kl, n);
    rho[1] = spearman(b, kl, n);
    *pairs = n;
    free(kl);
    free(a);
    free(b);
    return 0;
}

static void put_raw(cJSON *o, const char *k, const char *fmt, double v)
{
    char b[48];
    snprintf(b, sizeof b, fmt, v);
    cJSON_AddItemToObject(o, k, cJSON_CreateRaw(b));
}

/* OUT/auto_quantize.json: what was asked, chosen, predicted and written (no timings). */
static char *report_json(const lwq_autoq_opts *o, const lwq_aq_scores *s, const lwq_aq_solution *sol,
                         const lwq_aq_recipe *rc_, uint64_t w_lin, uint64_t w_all, int have_written)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *bud = cJSON_AddObjectToObject(root, "budget");
    if (o->bits > 0)
        put_raw(bud, "bits_per_weight", "%.17g", o->bits);
    else
        put_raw(bud, "gb", "%.17g", o->gb);
    cJSON *fs = cJSON_AddArrayToObject(root, "formats");
    for (int f = 1; f <= LWQ_AQ_FORMATS; f++) /* nvfp4, fp8, then none */
        if (o->formats[f % LWQ_AQ_FORMATS])
            cJSON_AddItemToArray(fs, cJSON_CreateString(lwq_qformat_name((lwq_qformat)(f % LWQ_AQ_FORMATS))));
    cJSON_AddStringToObject(root, "score", lwq_aq_score_name(o->score));
    cJSON_AddNumberToObject(root, "score_samples", o->score_size > 0 && o->score_size < o->q.calib->n
                                                       ? o->score_size : o->q.calib->n);
    cJSON_AddStringToObject(root, "base_recipe", o->q.recipe->name);
    cJSON *pr = cJSON_AddObjectToObject(root, "predicted");
    put_raw(pr, "bits_per_weight", "%.6f", sol->bits);
    put_raw(pr, "linear_bytes", "%.0f", (double)sol->linear_bytes);
    put_raw(pr, "bytes", "%.0f", (double)sol->bytes);
    if (have_written) {
        cJSON *wr = cJSON_AddObjectToObject(root, "written");
        put_raw(wr, "bits_per_weight", "%.6f", 8.0 * (double)w_lin / (double)sol->linear_elements);
        put_raw(wr, "linear_bytes", "%.0f", (double)w_lin);
        put_raw(wr, "bytes", "%.0f", (double)w_all);
    }
    put_raw(root, "linear_weights", "%.0f", (double)sol->linear_elements);
    cJSON *ks = cJSON_AddObjectToObject(root, "knapsack");
    put_raw(ks, "score", "%.9g", sol->score);
    put_raw(ks, "lp_bound", "%.9g", sol->lp_bound);
    cJSON_AddNumberToObject(ks, "groups", sol->ngroups);
    cJSON_AddNumberToObject(ks, "open_after_reduction", sol->free_items);
    if (s->score == LWQ_AQ_SCORE_KL) {
        double rho[2];
        int n = 0;
        if (correlations(s, rho, &n) == 0) {
            cJSON *c = cJSON_AddObjectToObject(root, "rank_correlation_with_kl");
            cJSON_AddNumberToObject(c, "pairs", n);
            put_raw(c, "layer_error_per_token", "%.6f", rho[0]);
            put_raw(c, "layer_error_relative", "%.6f", rho[1]);
        }
    }
    if (!rc_->yaml)
        cJSON_AddStringToObject(root, "yaml_not_written", rc_->yaml_why);
    cJSON *gs = cJSON_AddArrayToObject(root, "groups");
    for (int L = 0, i = 0; L < s->nlayers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++, i++) {
            const lwq_aq_gscore *g = &s->rec[L].g[k];
            cJSON *go = cJSON_CreateObject();
            cJSON_AddNumberToObject(go, "layer", L);
            cJSON_AddStringToObject(go, "group", lwq_aq_kind_name(g->kind));
            cJSON_AddStringToObject(go, "first_module", g->first);
            cJSON_AddNumberToObject(go, "modules", g->nmembers);
            cJSON_AddStringToObject(go, "format", lwq_qformat_name(sol->fmt[i]));
            cJSON *opt = cJSON_AddObjectToObject(go, "candidates");
            for (int f = 0; f < LWQ_AQ_FORMATS; f++) {
                if (!g->allowed[f])
                    continue;
                cJSON *fo = cJSON_AddObjectToObject(opt, lwq_qformat_name((lwq_qformat)f));
                put_raw(fo, "bytes", "%.0f", (double)g->cost[f]);
                put_raw(fo, "score", "%.9g", lwq_aq_score_of(s, &s->rec[L], g, f));
            }
            cJSON_AddItemToArray(gs, go);
        }
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    return txt;
}

static void print_table(const lwq_autoq_opts *o, const lwq_aq_scores *s, const lwq_aq_solution *sol)
{
    fprintf(stderr, "auto-quantize: %s score; per group the score of each format (0 for none) and the choice\n",
            lwq_aq_score_name(s->score));
    fprintf(stderr, "%5s  %-11s %12s %12s  %s\n", "layer", "group", "nvfp4", "fp8", "chosen");
    for (int L = 0, i = 0; L < s->nlayers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++, i++) {
            const lwq_aq_gscore *g = &s->rec[L].g[k];
            char a[24] = "-", b[24] = "-";
            if (g->allowed[LWQ_QFMT_NVFP4])
                snprintf(a, sizeof a, "%.4g", lwq_aq_score_of(s, &s->rec[L], g, LWQ_QFMT_NVFP4));
            if (g->allowed[LWQ_QFMT_FP8])
                snprintf(b, sizeof b, "%.4g", lwq_aq_score_of(s, &s->rec[L], g, LWQ_QFMT_FP8));
            fprintf(stderr, "%5d  %-11s %12s %12s  %s\n", L, lwq_aq_kind_name(g->kind), a, b,
                    lwq_qformat_name(sol->fmt[i]));
        }
    if (o->bits > 0)
        fprintf(stderr, "auto-quantize: budget %.4g bits per weight; predicted %.4f (%.6f GB)\n", o->bits, sol->bits,
                (double)sol->bytes / 1e9);
    else
        fprintf(stderr, "auto-quantize: budget %.6g GB; predicted %.6f GB (%.4f bits per weight)\n", o->gb,
                (double)sol->bytes / 1e9, sol->bits);
}

static int write_text(const char *dir, const char *name, const char *txt, lwq_error *e)
{
    char p[PATH_MAX];
    int rc = lwq_pathf(e, p, sizeof p, "%s/%s", dir, name);
    return rc ? rc : lwq_durable_write_file(p, txt, strlen(txt), e);
}

static int check_opts(const lwq_autoq_opts *o, lwq_error *e)
{
    if ((o->bits > 0) == (o->gb > 0))
        return lwq_errf(e, LWQ_EINVAL, "give one budget: --auto-quantize-bits B or --auto-quantize-gb G");
    if (o->bits > 0 && !(o->bits <= 64))
        return lwq_errf(e, LWQ_EINVAL, "--auto-quantize-bits %g: expected bits per weight in (0, 64]", o->bits);
    if (!o->formats[LWQ_QFMT_NVFP4] && !o->formats[LWQ_QFMT_FP8])
        return lwq_errf(e, LWQ_EINVAL, "--auto-quantize-formats needs nvfp4 or fp8 among its formats");
    if (lwq_recipe_uses_gptq(o->q.recipe))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "recipe \"%s\" uses gptq: GPTQ calibrates each layer on the quantized "
                        "layers before it, which the search (every group scored against the source) cannot "
                        "predict; search with max, mse or local_hessian", o->q.recipe->name);
    if (o->q.whole_model || o->q.dry_read || o->q.qdq_next)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "the auto-quantize search runs layerwise and calibrates on the source "
                        "model: --whole-model, --dry-read and --qdq-next do not combine with it");
    return 0;
}

typedef struct aq_run {
    lwq_ckpt ck;
    int ck_open, N;
    lwq_arch_layer *plans;
    lwq_aq_scores s;
    lwq_aq_solution sol;
    lwq_aq_recipe rec;
    lwq_runlock lock;
    char *report;
} aq_run;

static void run_free(aq_run *r)
{
    lwq_runlock_release(&r->lock);
    lwq_aq_recipe_free(&r->rec);
    lwq_aq_solution_free(&r->sol);
    lwq_aq_scores_free(&r->s);
    for (int L = 0; r->plans && L < r->N; L++)
        lwq_arch_layer_free(&r->plans[L]);
    free(r->plans);
    if (r->ck_open)
        lwq_ckpt_free(&r->ck);
    free(r->report);
}

/* Steps 1-3: scores (computed or resumed), solution, recipe. */
static int search(const lwq_autoq_opts *o, const aq_paths *p, aq_run *r, lwq_error *e)
{
    int rc = lwq_ckpt_open(o->q.model_dir, &r->ck, e);
    if (rc)
        return rc;
    r->ck_open = 1;
    r->N = r->ck.cfg.num_hidden_layers;
    if (!(r->plans = calloc((size_t)(r->N ? r->N : 1), sizeof *r->plans)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int L = 0; L < r->N; L++)
        if ((rc = lwq_arch_layer_plan(&r->ck.cfg, L, &r->plans[L], e)) != 0)
            return rc;
    if ((rc = lwq_durable_mkdir(p->out, NULL, e)) != 0 || (rc = lwq_durable_mkdir(p->resume, NULL, e)) != 0 ||
        (rc = lwq_runlock_acquire(&r->lock, p->out, p->resume, e)) != 0 || (rc = lwq_durable_mkdir(p->dir, NULL, e)) != 0)
        return rc;
    if ((rc = open_scores(o, p, &r->ck, r->plans, &r->s, e)) != 0)
        return rc;
    if (!r->s.complete) {
        if ((rc = lwq_aq_pass1(o, p->dir, &r->s, e)) != 0)
            return rc;
    } else if (!o->q.quiet) {
        LWQ_INFO("auto-quantize: the scores of %s are complete; solving for this budget", p->scores);
    }
    if ((rc = lwq_aq_solve(o, &r->s, &r->sol, e)) != 0)
        return rc;
    if (!o->q.quiet)
        print_table(o, &r->s, &r->sol);
    char yp[PATH_MAX];
    if ((rc = lwq_pathf(e, yp, sizeof yp, "%s/" LWQ_AQ_RECIPE_YAML, p->dir)) != 0 ||
        (rc = lwq_aq_recipe_build(o, &r->sol, r->plans, r->N, yp, &r->rec, e)) != 0)
        return rc;
    if ((rc = write_text(p->dir, LWQ_AQ_RECIPE_JSON, r->rec.json, e)) != 0)
        return rc;
    if (!o->q.quiet) {
        LWQ_INFO("auto-quantize: recipe %s/" LWQ_AQ_RECIPE_JSON "%s", p->dir, r->rec.yaml ? " and .yaml" : "");
        if (!r->rec.yaml)
            LWQ_WARN("auto-quantize: no Model Optimizer YAML of this mix: %s", r->rec.yaml_why);
    }
    return 0;
}

int lwq_autoq_run(const lwq_autoq_opts *o, lwq_error *e)
{
    int rc = check_opts(o, e);
    aq_paths p;
    if (rc == 0)
        rc = paths(o, &p, e);
    if (rc)
        return rc;
    aq_run r;
    memset(&r, 0, sizeof r);
    rc = search(o, &p, &r, e);
    lwq_runlock_release(&r.lock); /* pass 2 takes it itself */
    uint64_t w_lin = 0, w_all = 0;
    if (rc == 0 && !o->pass1_only) {
        lwq_autoq_opts o2 = *o;
        o2.q.recipe = &r.rec.r;
        if ((rc = lwq_quantize_run(&o2.q, e)) == 0)
            rc = written(o, &r.ck, r.plans, &w_lin, &w_all, e);
    }
    if (rc == 0 && !(r.report = report_json(o, &r.s, &r.sol, &r.rec, w_lin, w_all, !o->pass1_only)))
        rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    /* the recipe and report beside the checkpoint, under the lock again */
    if (rc == 0)
        rc = lwq_runlock_acquire(&r.lock, p.out, p.resume, e);
    if (rc == 0)
        rc = write_text(o->pass1_only ? p.dir : p.out, LWQ_AQ_REPORT, r.report, e);
    if (rc == 0 && !o->pass1_only) {
        if ((rc = write_text(p.out, LWQ_AQ_RECIPE_JSON, r.rec.json, e)) == 0 && r.rec.yaml)
            rc = write_text(p.out, LWQ_AQ_RECIPE_YAML, r.rec.yaml, e);
    }
    if (rc == 0 && !o->q.quiet) {
        if (o->pass1_only)
            fprintf(stderr, "auto-quantize: predicted %.4f bits per weight; recipe in %s (nothing quantized)\n",
                    r.sol.bits, p.dir);
        else
            fprintf(stderr, "auto-quantize: predicted %.4f, written %.4f bits per weight (%" PRIu64 " bytes of "
                    "tensors); recipe %s/%s%s\nauto-quantize: compare with `lwq eval %s %s` and, for uniform recipes "
                    "of nearby size, `lwq eval %s --qformat ...`\n",
                    r.sol.bits, 8.0 * (double)w_lin / (double)r.sol.linear_elements, w_all, p.out, LWQ_AQ_RECIPE_JSON,
                    r.rec.yaml ? " (and .yaml)" : "", o->q.model_dir, p.out, o->q.model_dir);
    }
    run_free(&r);
    return rc;
}
