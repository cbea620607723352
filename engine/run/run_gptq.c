/* engine/run/run_gptq.c — what a run says about its GPTQ linears: per layer, how much GPTQ lowered the
 * layer-output error ||WX - ŴX||^2 against the max calibration with the same scales (measured by
 * engine/quant/qlayer_gptq.c on the calibration tokens), in the layer report (kept in the manifest and
 * written to calibration_report.json), the JSON log (one entry per linear) and the progress. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/sys/log.h"
#include "engine/run/run_internal.h"

static double rel(double err, double ref) { return ref > 0 ? err / ref : 0.0; }

typedef struct gsum {
    double rel_gptq, rel_max; /* means over linears of the relative errors */
    double worst;             /* max over linears of err / max_err */
    int worse;                /* linears where GPTQ's error exceeds max's */
    int sampled;              /* linears measured on a row sample */
} gsum;

static gsum summarize(const lwq_qlayer_report *rep)
{
    gsum g = {0};
    for (int i = 0; i < rep->gptq_n; i++) {
        const lwq_qlayer_gptq_err *x = &rep->gptq[i];
        g.rel_gptq += rel(x->err, x->ref);
        g.rel_max += rel(x->max_err, x->ref);
        double q = x->max_err > 0 ? x->err / x->max_err : (x->err > 0 ? INFINITY : 1.0);
        g.worst = q > g.worst ? q : g.worst;
        g.worse += x->err > x->max_err;
        g.sampled += x->sampled;
    }
    if (rep->gptq_n) {
        g.rel_gptq /= rep->gptq_n;
        g.rel_max /= rep->gptq_n;
    }
    return g;
}

void lwq_run_gptq_summary(struct cJSON *l, const lwq_qlayer_report *rep)
{
    gsum g = summarize(rep);
    cJSON *o = cJSON_AddObjectToObject(l, "gptq");
    cJSON_AddNumberToObject(o, "linears", rep->gptq_n);
    cJSON_AddNumberToObject(o, "cold_on_max_path", rep->gptq_fallback);
    cJSON_AddNumberToObject(o, "mean_rel_output_error", g.rel_gptq);
    cJSON_AddNumberToObject(o, "mean_rel_output_error_max", g.rel_max);
    cJSON_AddNumberToObject(o, "worst_ratio_to_max", isfinite(g.worst) ? g.worst : -1.0);
    cJSON_AddNumberToObject(o, "linears_worse_than_max", g.worse);
    if (g.sampled)
        cJSON_AddNumberToObject(o, "linears_measured_on_a_row_sample", g.sampled);
}

void lwq_run_log_gptq(lwq_run *r, int L, const lwq_qlayer_report *rep)
{
    if (!rep->gptq_n)
        return;
    for (int i = 0; r->jlog && i < rep->gptq_n; i++) {
        const lwq_qlayer_gptq_err *x = &rep->gptq[i];
        cJSON *o = cJSON_CreateObject(); /* cJSON escapes the name */
        cJSON_AddStringToObject(o, "event", "gptq");
        cJSON_AddNumberToObject(o, "layer", L);
        cJSON_AddStringToObject(o, "linear", x->name);
        cJSON_AddNumberToObject(o, "output_error", x->err);
        cJSON_AddNumberToObject(o, "max_output_error", x->max_err);
        cJSON_AddNumberToObject(o, "output_norm", x->ref);
        if (x->sampled)
            cJSON_AddBoolToObject(o, "row_sample", 1);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (s)
            lwq_run_jlog(r, s);
        free(s);
    }
    if (r->o->quiet)
        return;
    gsum g = summarize(rep);
    LWQ_INFO("layer %d: GPTQ on %d linears: relative output error %.3g (max calibration %.3g); worst "
             "linear at %.3f of max's%s",
             L, rep->gptq_n, g.rel_gptq, g.rel_max, g.worst, g.worse ? " (some above max: see --log-json)" : "");
}
