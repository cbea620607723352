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

#include "core/sys/file.h"
#include "core/sys/log.h"
#include "engine/autoq/autoq_recipe.h"
#include "engine/autoq/head/autoq_head.h"
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
        if (!(s->rec = calloc((size_t)s->nlayers + 1, sizeof *s->rec)))
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
    /* the file is untrusted: its records against the model before anything uses or copies them */
    if ((rc = lwq_aq_scores_check(o, ck, plans, s, from, e)) != 0)
        return rc;
    /* a copy in this output's resume directory: a rerun needs nothing outside it */
    return from != p->scores ? lwq_aq_scores_save(p->scores, s, e) : 0;
}

/* Bytes OUT holds for the decoder-layer linears' weights and scales, and for every tensor. */
static int written(const lwq_autoq_opts *o, const lwq_ckpt *src, const lwq_arch_layer *plans, uint64_t *lin,
                   uint64_t *all, lwq_error *e)
{
    /* the tensors only: lwq eval's reader (lwq_qdir_open) also refuses what it does not emulate, such as
     * the quantized lm_head of a baseline or a searched lm_head, which the bytes do not depend on */
    lwq_ckpt ck;
    int rc = lwq_ckpt_open(o->q.out_dir, &ck, e);
    if (rc)
        return rc;
    static const char *const parts[] = {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"};
    *lin = *all = 0;
    for (int i = 0; i < ck.ntensors; i++)
        *all += ck.tensors[i].nbytes;
    for (int L = 0; L < src->cfg.num_hidden_layers; L++)
        for (int i = 0; i < plans[L].nlinears; i++)
            for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
                char n[LWQ_ARCH_NAME_MAX + 24];
                snprintf(n, sizeof n, "%s%s", plans[L].linears[i].name, parts[k]);
                const lwq_ckpt_tensor *t = lwq_ckpt_find(&ck, n);
                *lin += t ? t->nbytes : 0;
            }
    /* a searched lm_head counts as the linears do (its group is in the budget) */
    uint8_t hallow[LWQ_AQ_FORMATS];
    lwq_error ig = {0};
    if (lwq_aq_head_allowed(o, src, hallow, &ig) > 0)
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            char c[LWQ_ARCH_NAME_MAX], n[LWQ_ARCH_NAME_MAX + 24];
            lwq_names_full(&src->cfg.names, "lm_head", c, sizeof c);
            snprintf(n, sizeof n, "%s%s", c, parts[k]);
            const lwq_ckpt_tensor *t = lwq_ckpt_find(&ck, n);
            *lin += t ? t->nbytes : 0;
        }
    lwq_ckpt_free(&ck);
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
 * against it: rho[0] the error per token, rho[1] relative to the layer's output, rho[2] that times
 * the later layers' gains (the layer score). */
static int correlations(const lwq_aq_scores *s, double rho[3], int *pairs)
{
    int n = 0;
    for (int L = 0; L < s->nlayers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++)
            n += lwq_aq_nquantized(s->rec[L].g[k].allowed);
    size_t sz = (size_t)(n ? n : 1) * sizeof(double);
    double *kl = malloc(sz), *v[3] = {malloc(sz), malloc(sz), malloc(sz)};
    int rc = kl && v[0] && v[1] && v[2] ? 0 : -1;
    for (int L = 0, i = 0; rc == 0 && L < s->nlayers; L++)
        for (int k = 0; k < s->rec[L].ngroups; k++)
            for (int f = 1; f < LWQ_AQ_FORMATS; f++) {
                const lwq_aq_lrec *r = &s->rec[L];
                if (!r->g[k].allowed[f])
                    continue;
                kl[i] = r->g[k].kl[f];
                v[0][i] = r->tokens ? r->g[k].err[f] / (double)r->tokens : 0;
                v[1][i] = r->out_sq > 0 ? r->g[k].err[f] / r->out_sq : 0;
                v[2][i] = v[1][i] * lwq_aq_amplification(s, L);
                i++;
            }
    for (int j = 0; rc == 0 && j < 3; j++)
        rho[j] = spearman(v[j], kl, n);
    *pairs = n;
    free(kl);
    for (int j = 0; j < 3; j++)
        free(v[j]);
    return rc;
}

/* The uniform mixes the run writes beside the search's: nvfp4 and fp8, then each other quantized
 * candidate asked for (w4a16_nvfp4, nvfp4_w4a4_weight_mse_fp8_sweep, w4a16_nvfp4_four_over_six); their
 * count. */
static int uniform_list(const lwq_autoq_opts *o, int uni[LWQ_AQ_FORMATS])
{
    int n = 0;
    uni[n++] = LWQ_QFMT_NVFP4;
    uni[n++] = LWQ_QFMT_FP8;
    if (o->formats[LWQ_AQ_W4A16])
        uni[n++] = LWQ_AQ_W4A16;
    if (o->formats[LWQ_AQ_NVFP4_MSE])
        uni[n++] = LWQ_AQ_NVFP4_MSE;
    if (o->formats[LWQ_AQ_W4A16_F46])
        uni[n++] = LWQ_AQ_W4A16_F46;
    return n;
}

static void put_raw(cJSON *o, const char *k, const char *fmt, double v)
{
    char b[48];
    snprintf(b, sizeof b, fmt, v);
    cJSON_AddItemToObject(o, k, cJSON_CreateRaw(b));
}

/* OUT/auto_quantize.json: what was asked, chosen, predicted and written (no timings). */
static char *report_json(const lwq_autoq_opts *o, const lwq_aq_scores *s, const lwq_aq_solution *sol,
                         const lwq_aq_recipe *rc_, uint64_t w_lin, uint64_t w_all, int have_written,
                         const double *uni_bits, const uint64_t *uni_bytes)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *bud = cJSON_AddObjectToObject(root, "budget");
    if (o->bits > 0)
        put_raw(bud, "bits_per_weight", "%.17g", o->bits);
    else
        put_raw(bud, "gb", "%.17g", o->gb);
    cJSON *fs = cJSON_AddArrayToObject(root, "formats");
    static const int shown[] = {LWQ_QFMT_NVFP4, LWQ_QFMT_FP8, LWQ_AQ_W4A16, LWQ_AQ_NVFP4_MSE, LWQ_AQ_W4A16_F46,
                                LWQ_QFMT_NONE};
    for (int j = 0; j < LWQ_AQ_FORMATS; j++)
        if (o->formats[shown[j]])
            cJSON_AddItemToArray(fs, cJSON_CreateString(lwq_aq_format_name(shown[j])));
    cJSON_AddStringToObject(root, "score", lwq_aq_score_name(o->score));
    cJSON_AddNumberToObject(root, "score_samples", lwq_aq_score_samples(o));
    cJSON_AddStringToObject(root, "base_recipe", o->q.recipe->name);
    cJSON *pr = cJSON_AddObjectToObject(root, "predicted");
    put_raw(pr, "bits_per_weight", "%.6f", sol->bits);
    put_raw(pr, "linear_bytes", "%.0f", (double)sol->linear_bytes);
    put_raw(pr, "bytes", "%.0f", (double)sol->bytes);
    if (o->active_moe) {
        /* Model Optimizer's cost model: what the budget bounds (engine/autoq/autoq.h) */
        cJSON *cm = cJSON_AddObjectToObject(root, "cost_model");
        cJSON_AddStringToObject(cm, "name", "active_moe");
        put_raw(cm, "active_moe_expert_ratio", "%.17g", o->active_moe_ratio);
        put_raw(cm, "expert_weight", "%.17g", (double)llround(o->active_moe_ratio * LWQ_AQ_WEIGHT_ONE) / LWQ_AQ_WEIGHT_ONE);
        put_raw(cm, "weighted_linear_weights", "%.17g", sol->weighted_elements);
        put_raw(cm, "predicted_active_bits_per_weight", "%.6f", sol->active_bits);
    }
    if (have_written) {
        cJSON *wr = cJSON_AddObjectToObject(root, "written");
        put_raw(wr, "bits_per_weight", "%.6f", 8.0 * (double)w_lin / (double)sol->linear_elements);
        put_raw(wr, "linear_bytes", "%.0f", (double)w_lin);
        put_raw(wr, "bytes", "%.0f", (double)w_all);
    }
    put_raw(root, "linear_weights", "%.0f", (double)sol->linear_elements);
    cJSON *un = cJSON_AddArrayToObject(root, "uniform");
    int uni[LWQ_AQ_FORMATS], nuni = uniform_list(o, uni);
    for (int u = 0; u < nuni; u++) {
        cJSON *x = cJSON_CreateObject();
        char name[48];
        snprintf(name, sizeof name, "uniform_%s", lwq_aq_format_name(uni[u]));
        cJSON_AddStringToObject(x, "recipe", name);
        put_raw(x, "bits_per_weight", "%.6f", uni_bits[u]);
        put_raw(x, "bytes", "%.0f", (double)uni_bytes[u]);
        cJSON_AddItemToArray(un, x);
    }
    cJSON *ks = cJSON_AddObjectToObject(root, "knapsack");
    put_raw(ks, "score", "%.9g", sol->score);
    put_raw(ks, "lp_bound", "%.9g", sol->lp_bound);
    cJSON_AddNumberToObject(ks, "groups", sol->ngroups);
    cJSON_AddNumberToObject(ks, "open_after_reduction", sol->free_items);
    if (s->score == LWQ_AQ_SCORE_KL) {
        double rho[3];
        int n = 0;
        if (correlations(s, rho, &n) == 0) {
            cJSON *c = cJSON_AddObjectToObject(root, "rank_correlation_with_kl");
            cJSON_AddNumberToObject(c, "pairs", n);
            put_raw(c, "layer_error_per_token", "%.6f", rho[0]);
            put_raw(c, "layer_error_relative", "%.6f", rho[1]);
            put_raw(c, "layer_score", "%.6f", rho[2]);
        }
    }
    if (!rc_->yaml)
        cJSON_AddStringToObject(root, "yaml_not_written", rc_->yaml_why);
    cJSON *gs = cJSON_AddArrayToObject(root, "groups");
    for (int L = 0, i = 0; L < lwq_aq_nrec(s); L++)
        for (int k = 0; k < s->rec[L].ngroups; k++, i++) {
            const lwq_aq_gscore *g = &s->rec[L].g[k];
            cJSON *go = cJSON_CreateObject();
            if (L < s->nlayers) /* lm_head's group (the last) is in no layer */
                cJSON_AddNumberToObject(go, "layer", L);
            cJSON_AddStringToObject(go, "group", lwq_aq_kind_name(g->kind));
            cJSON_AddStringToObject(go, "first_module", g->first);
            cJSON_AddNumberToObject(go, "modules", g->nmembers);
            cJSON_AddStringToObject(go, "format", lwq_aq_format_name(sol->fmt[i]));
            if (o->active_moe)
                put_raw(go, "cost_weight", "%.17g", (double)lwq_aq_cost_weight(o, g) / LWQ_AQ_WEIGHT_ONE);
            cJSON *opt = cJSON_AddObjectToObject(go, "candidates");
            for (int f = 0; f < LWQ_AQ_FORMATS; f++) {
                if (!g->allowed[f])
                    continue;
                cJSON *fo = cJSON_AddObjectToObject(opt, lwq_aq_format_name(f));
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
    int wo = o->formats[LWQ_AQ_W4A16], wm = o->formats[LWQ_AQ_NVFP4_MSE], wf = o->formats[LWQ_AQ_W4A16_F46];
    fprintf(stderr, "%5s  %-11s %12s %12s%s%s%s  %s\n", "layer", "group", "nvfp4", "fp8", wo ? "  w4a16_nvfp4" : "",
            wm ? "    nvfp4_mse" : "", wf ? "    w4a16_4o6" : "", "chosen");
    for (int L = 0, i = 0; L < lwq_aq_nrec(s); L++)
        for (int k = 0; k < s->rec[L].ngroups; k++, i++) {
            const lwq_aq_gscore *g = &s->rec[L].g[k];
            char a[24] = "-", b[24] = "-", c[24] = "-", d[24] = "-", x[24] = "-", l[16] = "-";
            if (L < s->nlayers)
                snprintf(l, sizeof l, "%d", L);
            if (g->allowed[LWQ_QFMT_NVFP4])
                snprintf(a, sizeof a, "%.4g", lwq_aq_score_of(s, &s->rec[L], g, LWQ_QFMT_NVFP4));
            if (g->allowed[LWQ_QFMT_FP8])
                snprintf(b, sizeof b, "%.4g", lwq_aq_score_of(s, &s->rec[L], g, LWQ_QFMT_FP8));
            if (g->allowed[LWQ_AQ_W4A16])
                snprintf(c, sizeof c, "%.4g", lwq_aq_score_of(s, &s->rec[L], g, LWQ_AQ_W4A16));
            if (g->allowed[LWQ_AQ_NVFP4_MSE])
                snprintf(d, sizeof d, "%.4g", lwq_aq_score_of(s, &s->rec[L], g, LWQ_AQ_NVFP4_MSE));
            fprintf(stderr, "%5s  %-11s %12s %12s", l, lwq_aq_kind_name(g->kind), a, b);
            if (wo)
                fprintf(stderr, " %12s", c);
            if (g->allowed[LWQ_AQ_W4A16_F46])
                snprintf(x, sizeof x, "%.4g", lwq_aq_score_of(s, &s->rec[L], g, LWQ_AQ_W4A16_F46));
            if (wm)
                fprintf(stderr, " %12s", d);
            if (wf)
                fprintf(stderr, " %12s", x);
            fprintf(stderr, "  %s\n", lwq_aq_format_name(sol->fmt[i]));
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
    if (!lwq_aq_nquantized(o->formats))
        return lwq_errf(e, LWQ_EINVAL, "--auto-quantize-formats needs nvfp4, fp8 or w4a16_nvfp4 among its formats");
    if (lwq_recipe_uses_gptq(o->q.recipe))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "recipe \"%s\" uses gptq: GPTQ calibrates each layer on the quantized "
                        "layers before it, which the search (every group scored against the source) cannot "
                        "predict; search with max, mse or local_hessian", o->q.recipe->name);
    if (o->q.whole_model || o->q.dry_read || o->q.qdq_next)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "the auto-quantize search runs layerwise and calibrates on the source "
                        "model: --whole-model, --dry-read and --qdq-next do not combine with it");
    if (o->active_moe && o->gb > 0)
        return lwq_errf(e, LWQ_EINVAL, "cost model active_moe weighs the routed experts in an effective-bits budget: "
                        "give --auto-quantize-bits, not --auto-quantize-gb (bytes on disk are not weighted)");
    if (!o->active_moe && o->active_moe_ratio != 0)
        return lwq_errf(e, LWQ_EINVAL, "an active_moe_expert_ratio (%g) needs cost model active_moe", o->active_moe_ratio);
    if (o->active_moe && o->active_moe_ratio != 0 &&
        !(o->active_moe_ratio >= 1.0 / LWQ_AQ_WEIGHT_ONE && o->active_moe_ratio <= 1))
        return lwq_errf(e, LWQ_EINVAL, "active_moe_expert_ratio %g: expected a ratio in [2^-20, 1]", o->active_moe_ratio);
    return 0;
}

/* Cost model active_moe on this model: the ratio inferred when not given (Model Optimizer's
 * infer_active_moe_expert_ratio: top-k over the experts, at most 1), and every routed expert in a
 * search group whose members agree on being routed (the solve weighs a group by its first
 * member and the fixed linears by 1). */
static int active_moe_setup(lwq_autoq_opts *o, const lwq_ckpt *ck, const lwq_arch_layer *plans, int N, lwq_error *e)
{
    if (!o->active_moe)
        return 0;
    if (o->active_moe_ratio == 0) {
        const lwq_model_config *c = &ck->cfg;
        if (c->num_experts <= 0 || c->num_experts_per_tok <= 0)
            return lwq_errf(e, LWQ_EINVAL, "%s: cost model active_moe: could not infer active_moe_expert_ratio from "
                            "config.json (num_experts %d, num_experts_per_tok %d); give it "
                            "(--auto-quantize-active-moe-ratio R)", o->q.model_dir, c->num_experts,
                            c->num_experts_per_tok);
        double r = (double)c->num_experts_per_tok / (double)c->num_experts;
        o->active_moe_ratio = r < 1 ? r : 1;
    }
    for (int L = 0; L < N; L++) {
        lwq_aq_layer A;
        int rc = lwq_aq_layer_build(&A, &plans[L], o->q.recipe, o, e);
        if (rc)
            return rc;
        for (int i = 0; i < plans[L].nlinears && rc == 0; i++) {
            const char *nm = plans[L].linears[i].name;
            int k = A.group_of[i];
            if (k < 0 && lwq_aq_routed_name(nm))
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "cost model active_moe: routed expert %s is in no search group "
                              "(the base recipe %s leaves it unquantized); lwq weighs only searched experts",
                              nm, o->q.recipe->name);
            else if (k >= 0 && lwq_aq_routed_name(nm) != lwq_aq_routed_name(plans[L].linears[A.g[k].lin[0]].name))
                rc = lwq_errf(e, LWQ_EUNSUPPORTED, "cost model active_moe: search group of %s mixes routed experts "
                              "and other linears", nm);
        }
        lwq_aq_layer_free(&A);
        if (rc)
            return rc;
    }
    return 0;
}

/* Pass 1's memory: quantize's plan for the same run (ring, boundaries, scratch, statistics; no
 * writer) and what the search adds: the probe and kl streams of the scored rows, the layer's
 * quantized copies (one per format), one group dequantized to f32, the memo's record of one
 * scored batch (every GEMM's input and output, every attention's q, k, v and output; routed
 * experts at their expected share of the rows), and at resume the state file read whole. */
typedef struct aq_plan {
    lwq_mem_plan q;
    uint64_t streams, copies, overlay, memo, state, host, gpu;
    uint64_t head;            /* a searched lm_head, after the last layer: the tail read whole, one
                                 dequantized lm_head, two chunks of logits (engine/autoq/head/) */
} aq_plan;

static int plan_pass1(const lwq_autoq_opts *o, const lwq_ckpt *ck, const lwq_arch_layer *plans, aq_plan *ap,
                      lwq_error *e)
{
    memset(ap, 0, sizeof *ap);
    int rc = lwq_quantize_plan_ckpt(&o->q, ck, &ap->q, e);
    if (rc)
        return rc;
    const lwq_model_config *c = &ck->cfg;
    uint64_t esz = lwq_dtype_size(c->dtype), rows = 0, max_rows = 0;
    int B = o->q.batch_size > 0 ? o->q.batch_size : 8, ns = lwq_aq_score_samples(o);
    for (int s0 = 0; s0 < ns; s0 += B) {
        int64_t seq = 0;
        for (int i = s0; i < ns && i < s0 + B; i++)
            seq = o->q.calib->len[i] > seq ? o->q.calib->len[i] : seq;
        uint64_t r = (uint64_t)((ns - s0 < B ? ns - s0 : B) * seq);
        rows += r;
        max_rows = r > max_rows ? r : max_rows;
    }
    uint64_t score_bytes = rows * (uint64_t)c->hidden_size * esz, nstreams = 0, bnd = ap->q.boundary_bytes / 2;
    double share = c->num_experts > 0 ? (double)c->num_experts_per_tok / (double)c->num_experts : 1;
    for (int L = 0; L < c->num_hidden_layers && rc == 0; L++) {
        lwq_aq_layer A;
        if ((rc = lwq_aq_layer_build(&A, &plans[L], o->q.recipe, o, e)) != 0)
            break;
        uint64_t copies = 0, memo = 0;
        for (int k = 0; k < A.ngroups; k++) {
            nstreams += (uint64_t)lwq_aq_nquantized(A.g[k].allowed);
            copies += A.g[k].elements * (A.g[k].allowed[LWQ_QFMT_NVFP4] ? 9 : 0) / 16 +
                      A.g[k].elements * (A.g[k].allowed[LWQ_AQ_W4A16] ? 9 : 0) / 16 +
                      A.g[k].elements * (A.g[k].allowed[LWQ_AQ_NVFP4_MSE] ? 9 : 0) / 16 +
                      A.g[k].elements * (A.g[k].allowed[LWQ_AQ_W4A16_F46] ? 9 : 0) / 16 +
                      A.g[k].elements * A.g[k].allowed[LWQ_QFMT_FP8];
            ap->overlay = 4 * A.g[k].elements > ap->overlay ? 4 * A.g[k].elements : ap->overlay;
        }
        for (int i = 0; i < plans[L].nlinears; i++) {
            const lwq_arch_linear *l = &plans[L].linears[i];
            double r = (double)max_rows * (l->expert >= 0 ? share : 1);
            memo += (uint64_t)(r * (double)(l->in_features + l->out_features)) * esz;
        }
        memo += max_rows * 4 * (uint64_t)c->hidden_size * esz; /* attention: q, k, v, out */
        ap->copies = copies > ap->copies ? copies : ap->copies;
        ap->memo = memo > ap->memo ? memo : ap->memo;
        lwq_aq_layer_free(&A);
    }
    if (rc)
        return rc;
    int cpu = strcmp(backend_name(o), "cpu") == 0;
    ap->streams = score_bytes * (1 + (o->score == LWQ_AQ_SCORE_KL ? nstreams : 0));
    ap->memo = cpu && !o->no_memo ? ap->memo : 0;
    ap->state = bnd + ap->streams;
    ap->host = ap->q.host_peak - ap->q.writer_bytes + ap->streams + ap->copies + (cpu ? ap->overlay : 0) + ap->memo +
               ap->state;
    ap->gpu = ap->q.gpu_peak ? ap->q.gpu_peak + ap->overlay : 0;
    uint8_t hallow[LWQ_AQ_FORMATS];
    if ((rc = lwq_aq_head_allowed(o, ck, hallow, e)) < 0)
        return rc;
    if (rc > 0) {
        char wn[LWQ_ARCH_NAME_MAX + 8];
        lwq_names_full(&ck->cfg.names, "lm_head.weight", wn, sizeof wn);
        const lwq_ckpt_tensor *w = lwq_ckpt_find(ck, wn);
        uint64_t tail = 0;
        for (int i = 0; i < ck->ntensors; i++)
            if (ck->tensors[i].layer < 0 || ck->tensors[i].layer >= c->num_hidden_layers)
                tail += ck->tensors[i].nbytes;
        ap->head = tail + (w ? 2 * w->nbytes : 0) + 2 * 64 * (uint64_t)c->vocab_size * 4;
        /* it runs once the layers are done: beside the boundaries and the streams, not a layer's copies */
        uint64_t h = ap->q.host_peak - ap->q.writer_bytes + ap->streams + ap->state + ap->head;
        ap->host = h > ap->host ? h : ap->host;
        ap->gpu = ap->gpu ? ap->gpu + 2 * 64 * (uint64_t)c->vocab_size * 4 + (w ? w->nbytes : 0) : 0;
    }
    return 0;
}

static int check_plan(const lwq_autoq_opts *o, const aq_plan *ap, lwq_error *e)
{
    if (!o->q.quiet)
        fprintf(stderr, "auto-quantize pass 1: plan host peak %.3f GB = quantize's %.3f GB without its writer + probe "
                "and kl streams %.3f GB + quantized copies %.3f GB + a dequantized group %.3f GB + memo %.3f GB + the "
                "state read at resume %.3f GB; GPU peak %.3f GB\n", (double)ap->host / 1e9,
                (double)(ap->q.host_peak - ap->q.writer_bytes) / 1e9, (double)ap->streams / 1e9,
                (double)ap->copies / 1e9, (double)ap->overlay / 1e9, (double)ap->memo / 1e9, (double)ap->state / 1e9,
                (double)ap->gpu / 1e9);
    if (!o->q.quiet && ap->head)
        fprintf(stderr, "auto-quantize pass 1: lm_head is searched after the last layer: the host peak is then at most "
                "%.3f GB (its %.3f GB: the tail read whole, a dequantized lm_head, two chunks of logits)\n",
                (double)ap->host / 1e9, (double)ap->head / 1e9);
    if (o->q.max_cpu_gb > 0 && (double)ap->host > o->q.max_cpu_gb * 1e9)
        return lwq_errf(e, LWQ_ENOMEM, "auto-quantize pass 1 needs %.2f GB of host memory, more than "
                        "--max-cpu-memory-gb %.2f; lower --auto-quantize-score-size, --calib-size or --calib-seq%s",
                        (double)ap->host / 1e9, o->q.max_cpu_gb, o->score == LWQ_AQ_SCORE_KL ? ", or use the layer "
                        "score (the kl score keeps a stream per group and format)" : "");
    if (o->q.max_gpu_gb > 0 && (double)ap->gpu > o->q.max_gpu_gb * 1e9)
        return lwq_errf(e, LWQ_ENOMEM, "auto-quantize pass 1 needs %.2f GB of GPU memory, more than "
                        "--max-gpu-memory-gb %.2f", (double)ap->gpu / 1e9, o->q.max_gpu_gb);
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
    double uni_bits[LWQ_AQ_FORMATS]; /* the uniform mixes of the same groups (uniform_list) */
    uint64_t uni_bytes[LWQ_AQ_FORMATS];
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
static int search(lwq_autoq_opts *o, const aq_paths *p, aq_run *r, lwq_error *e)
{
    int rc = lwq_ckpt_open(o->q.model_dir, &r->ck, e);
    if (rc)
        return rc;
    r->ck_open = 1;
    /* full attention only: before pass 1 reads a weight or writes a score */
    if ((rc = lwq_calib_set_check_window(o->q.calib, &r->ck.cfg, o->q.model_dir, "a calibration sequence",
                                         "--calib-seq", e)) != 0)
        return rc;
    r->N = r->ck.cfg.num_hidden_layers;
    if (!(r->plans = calloc((size_t)(r->N ? r->N : 1), sizeof *r->plans)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int L = 0; L < r->N; L++)
        if ((rc = lwq_arch_layer_plan(&r->ck.cfg, L, &r->plans[L], e)) != 0)
            return rc;
    if ((rc = lwq_aq_baseline_check(o, r->plans, r->N, e)) != 0 ||
        (rc = active_moe_setup(o, &r->ck, r->plans, r->N, e)) != 0)
        return rc;
    /* a named CUDA module that cannot be loaded is an error before anything is written, not a
     * CPU search (kernels/backend.h) */
    if (o->q.device == LWQ_DEVICE_AUTO && (rc = lwq_backend_cuda_auto(e)) < 0)
        return rc;
    /* the memory plan before anything is written: a refused run leaves nothing behind */
    aq_plan ap;
    if ((rc = plan_pass1(o, &r->ck, r->plans, &ap, e)) != 0 || (rc = check_plan(o, &ap, e)) != 0)
        return rc;
    /* the two named on the command line (or the default beside OUT) may be links; auto_quantize/,
     * made by lwq below the resume directory, must not be */
    if ((rc = lwq_durable_mkdir_named(p->out, NULL, e)) != 0 || (rc = lwq_durable_mkdir_named(p->resume, NULL, e)) != 0 ||
        (rc = lwq_runlock_acquire(&r->lock, p->out, p->resume, e)) != 0 ||
        (rc = lwq_durable_mkdir(p->dir, NULL, e)) != 0)
        return rc;
    if ((rc = open_scores(o, p, &r->ck, r->plans, &r->s, e)) != 0)
        return rc;
    /* pass 1's own records are checked too (open_scores checked what a file brought): the solve
     * trusts these byte counts, so they must be the model's */
    if (!r->s.complete) {
        if ((rc = lwq_aq_pass1(o, p->dir, &r->s, e)) != 0 ||
            (rc = lwq_aq_scores_check(o, &r->ck, r->plans, &r->s, p->scores, e)) != 0)
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
        (rc = lwq_aq_recipe_build(o, &r->sol, r->plans, r->N, LWQ_AQ_RECIPE_NAME, yp, &r->rec, e)) != 0)
        return rc;
    if ((rc = write_text(p->dir, LWQ_AQ_RECIPE_JSON, r->rec.json, e)) != 0)
        return rc;
    /* the uniform mixes of the same groups, as recipes to evaluate beside the search's */
    int uni[LWQ_AQ_FORMATS], nuni = uniform_list(o, uni);
    for (int u = 0; u < nuni && rc == 0; u++) {
        lwq_aq_solution us;
        lwq_aq_recipe ur;
        char name[48], file[64];
        snprintf(name, sizeof name, "uniform_%s", lwq_aq_format_name(uni[u]));
        snprintf(file, sizeof file, "%s.yaml", name);
        if ((rc = lwq_aq_uniform(&r->s, uni[u], &us, e)) != 0 ||
            (rc = lwq_pathf(e, yp, sizeof yp, "%s/%s", p->dir, file)) != 0)
            break;
        if ((rc = lwq_aq_recipe_build(o, &us, r->plans, r->N, name, yp, &ur, e)) == 0) {
            snprintf(file, sizeof file, "%s.json", name);
            rc = write_text(p->dir, file, ur.json, e);
            r->uni_bits[u] = us.bits;
            r->uni_bytes[u] = us.bytes;
            lwq_aq_recipe_free(&ur);
        }
        lwq_aq_solution_free(&us);
    }
    if (rc)
        return rc;
    if (!o->q.quiet) {
        LWQ_INFO("auto-quantize: recipe %s/" LWQ_AQ_RECIPE_JSON "%s", p->dir, r->rec.yaml ? " and .yaml" : "");
        if (!r->rec.yaml)
            LWQ_WARN("auto-quantize: no Model Optimizer YAML of this mix: %s", r->rec.yaml_why);
    }
    return 0;
}

int lwq_autoq_run(const lwq_autoq_opts *o_, lwq_error *e)
{
    lwq_autoq_opts oo = *o_, *o = &oo; /* search() resolves the active_moe ratio */
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
    if (rc == 0 && !(r.report = report_json(o, &r.s, &r.sol, &r.rec, w_lin, w_all, !o->pass1_only, r.uni_bits,
                                             r.uni_bytes)))
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
                    "tensors); recipe %s/%s%s\n", r.sol.bits, 8.0 * (double)w_lin / (double)r.sol.linear_elements, w_all,
                    p.out, LWQ_AQ_RECIPE_JSON, r.rec.yaml ? " (and .yaml)" : "");
        fprintf(stderr, "auto-quantize: the uniform mixes of the same groups: %.4f bits per weight (nvfp4 where it can), "
                "%.4f (fp8); to compare all three in one pass:\n  lwq eval %s --recipe %s/%s --recipe %s/uniform_nvfp4.json "
                "--recipe %s/uniform_fp8.json  (with this run's --calib options)\n", r.uni_bits[0], r.uni_bits[1],
                o->q.model_dir, o->pass1_only ? p.dir : p.out, LWQ_AQ_RECIPE_JSON, p.dir, p.dir);
    }
    run_free(&r);
    return rc;
}
