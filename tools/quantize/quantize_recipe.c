/* tools/quantize/quantize_recipe.c — the recipe a quantize command line asks for: a preset, an lwq
 * JSON or Model Optimizer YAML recipe, the options that override it, and an auto_quantize recipe's
 * search options (see quantize_args.h). */
#include "tools/quantize/quantize_args.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/log.h"
#include "engine/run/resume/manifest.h"

/* An auto_quantize recipe (layout/recipe/recipe_yaml.h) is the search's options; an --auto-quantize-*
 * option given on the command line wins, as over any recipe. */
static int aq_from_recipe(qargs *a, const lwq_recipe_run *run, const char *path, lwq_error *e)
{
    if (a->print_recipe)
        return lwq_errf(e, LWQ_EINVAL, "%s is an auto_quantize recipe: --print-recipe does not run the auto-quantize "
                        "search (it runs with lwq quantize -o OUT)", path);
    if (run->aq_baseline && a->aq_formats)
        return lwq_errf(e, LWQ_EINVAL, "%s has a fixed quantize baseline: the groups no module_search_spaces entry "
                        "matches keep its formats, so --auto-quantize-formats %s has nothing to apply to", path,
                        a->aq_formats);
    a->aq_baseline = run->aq_baseline;
    if (a->aq_bits <= 0 && a->aq_gb <= 0)
        a->aq_bits = run->aq_bits;
    if (!a->aq_formats) {
        memset(a->aq_fmt, 0, sizeof a->aq_fmt);
        a->aq_fmt[LWQ_QFMT_NONE] = 1; /* always a candidate, as Model Optimizer adds it */
        a->aq_fmt[LWQ_QFMT_NVFP4] = (uint8_t)run->aq_nvfp4;
        a->aq_fmt[LWQ_QFMT_FP8] = (uint8_t)run->aq_fp8;
        a->aq_fmt[LWQ_AQ_W4A16] = (uint8_t)run->aq_w4a16;
        a->aq_fmt[LWQ_AQ_NVFP4_MSE] = (uint8_t)(run->aq_nvfp4_mse != 0);
        a->aq_fmt[LWQ_AQ_W4A16_F46] = (uint8_t)(run->aq_w4a16_f46 != 0);
    }
    /* Model Optimizer calibrates each of a recipe's candidates with its own algorithm */
    a->aq_own_algos = 1;
    a->aq_baseline_bits = run->aq_baseline_bits;
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
            a->aq_fmt[LWQ_AQ_NVFP4_MSE] |= (uint8_t)(run->aq_space[k].nvfp4_mse != 0);
            a->aq_fmt[LWQ_AQ_W4A16_F46] |= (uint8_t)(run->aq_space[k].w4a16_f46 != 0);
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

int lwq_quantize_args_recipe(qargs *a, lwq_recipe *r, lwq_error *e)
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
