/* tools/quantize/quantize_args.h — internal to tools/quantize: `lwq quantize` / `lwq plan`'s command
 * line, parsed into one qargs (quantize_args.c), and the recipe it asks for (quantize_recipe.c).
 * cmd_quantize.c runs the command from them.  Nothing here reads a checkpoint or writes a file. */
#ifndef LWQ_TOOLS_QUANTIZE_ARGS_H
#define LWQ_TOOLS_QUANTIZE_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "core/parallel/ranks.h"
#include "core/sys/error.h"
#include "engine/autoq/autoq.h"
#include "engine/run/engine.h"
#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"

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
    int aq_baseline;                /* the recipe's fixed quantize baseline is the base recipe */
    double aq_baseline_bits;        /* its effective_bits (0: none) */
    int aq_own_algos;               /* an auto_quantize recipe's candidates carry their own algorithms */
    double damp; /* 0: the recipe's */
    lwq_quantize_opts o;
} qargs;

/* The usage text of `lwq CMD --help` (CMD: "quantize" or "plan") on fp. */
void lwq_quantize_usage(FILE *fp, const char *cmd);
/* argv (hf_ptq's flags translated already) into *a, each option noted in *job for the ranks'
 * first agreement; is_plan: `lwq plan`.  -1 when the command line is refused, with the reason
 * written to err (lwq: ... lines). */
int lwq_quantize_args_parse(int argc, char **argv, int is_plan, qargs *a, lwq_ranks_job *job, FILE *err);

/* The recipe *a asks for (--qformat, or --recipe with the options that override it) into *r;
 * lwq_recipe_free is safe on *r whatever fails.  An auto_quantize recipe also sets a's search
 * options that the command line left unset. */
int lwq_quantize_args_recipe(qargs *a, lwq_recipe *r, lwq_error *e);

#endif
