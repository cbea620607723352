/* fuzz/fuzz_scores.c — an auto-quantize scores file (OUT.layerwise_resume/auto_quantize/
 * scores.json, or --auto-quantize-scores FILE) through lwq_aq_scores_load, then, as the search
 * does before its solve, lwq_aq_scores_check against a model (the llama of
 * tests/data/fuzz/qdir-src) and lwq_aq_solve.
 *
 * Checked on success: committed <= num_layers, every committed group of a known kind with at
 * least one member and one candidate format, the state file "" or a name lwq writes; the file
 * lwq would write back loads again and is written the same (a resume rewrites it); and when the
 * records pass the check against the model, the solve's predicted bits per weight are within the
 * budget whatever the file says (issue 36, finding 8). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/file.h"
#include "engine/autoq/autoq_internal.h"
#include "fuzz/fuzz_util.h"

#define BUDGET_BITS 6.0

static struct {
    int ready;
    lwq_ckpt ck;
    lwq_arch_layer *plans;
    lwq_recipe recipe;
    lwq_autoq_opts o;
} g;

static void model(void)
{
    if (g.ready)
        return;
    lwq_error e = {0};
    if (lwq_ckpt_open(lwq_fuzz_data("qdir-src/llama"), &g.ck, &e) != 0)
        lwq_fuzz_fail("the model of tests/data/fuzz/qdir-src/llama does not open: %s", e.msg);
    int N = g.ck.cfg.num_hidden_layers;
    if (!(g.plans = calloc((size_t)N, sizeof *g.plans)))
        lwq_fuzz_fail("out of memory");
    for (int L = 0; L < N; L++)
        if (lwq_arch_layer_plan(&g.ck.cfg, L, &g.plans[L], &e) != 0)
            lwq_fuzz_fail("layer %d: %s", L, e.msg);
    if (lwq_recipe_preset("nvfp4", &g.recipe, &e) != 0)
        lwq_fuzz_fail("preset nvfp4: %s", e.msg);
    g.o.q.recipe = &g.recipe;
    g.o.bits = BUDGET_BITS;
    memset(g.o.formats, 1, sizeof g.o.formats);
    g.ready = 1;
}

static char *load_save(const char *dir, const char *name, const uint8_t *d, size_t n, lwq_aq_scores *s, int *rc,
                       lwq_error *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(d, 1, n, fp) != n) || fclose(fp) != 0)
        lwq_fuzz_fail("writing %s failed", path);
    *rc = lwq_aq_scores_load(path, s, e);
    if (*rc == LWQ_ENOENT)
        lwq_fuzz_fail("lwq_aq_scores_load: %s exists, yet LWQ_ENOENT", path);
    lwq_fuzz_check_error(*rc, e, "lwq_aq_scores_load");
    if (*rc)
        return NULL;
    char back[4096];
    snprintf(back, sizeof back, "%s/back-%s", dir, name);
    lwq_error se = {0};
    if (lwq_aq_scores_save(back, s, &se) != 0)
        lwq_fuzz_fail("lwq_aq_scores_save of a loaded file failed: %s", se.msg);
    fp = fopen(back, "rb");
    if (!fp)
        lwq_fuzz_fail("%s was not written", back);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *txt = malloc((size_t)len + 1);
    if (!txt || fread(txt, 1, (size_t)len, fp) != (size_t)len)
        lwq_fuzz_fail("reading %s failed", back);
    txt[len] = 0;
    fclose(fp);
    return txt;
}

static void invariants(const lwq_aq_scores *s)
{
    if (s->nlayers < 1 || s->committed < 0 || s->committed > s->nlayers)
        lwq_fuzz_fail("%d of %d layers committed", s->committed, s->nlayers);
    if (s->state_file[0] && strcmp(s->state_file, "state-0.bin") && strcmp(s->state_file, "state-1.bin"))
        lwq_fuzz_fail("state file \"%s\" is not a name lwq writes", s->state_file);
    for (int L = 0; L < s->committed; L++) {
        const lwq_aq_lrec *r = &s->rec[L];
        if (r->ngroups < 0 || r->ngroups > LWQ_AQ_KINDS)
            lwq_fuzz_fail("layer %d: %d groups", L, r->ngroups);
        for (int k = 0; k < r->ngroups; k++) {
            const lwq_aq_gscore *q = &r->g[k];
            if ((unsigned)q->kind >= LWQ_AQ_KINDS || q->nmembers < 1 ||
                !(q->allowed[0] || q->allowed[1] || q->allowed[2]))
                lwq_fuzz_fail("layer %d group %d: kind %d, %d members, no candidate format", L, k, (int)q->kind,
                              q->nmembers);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lwq_fuzz_quiet();
    model();
    const char *dir = lwq_fuzz_scratch("scores");
    lwq_aq_scores s, s2;
    lwq_error e = {0}, e2 = {0};
    int rc;
    char *t1 = load_save(dir, "scores.json", d, n, &s, &rc, &e);
    if (rc)
        return 0;
    invariants(&s);
    char *t2 = load_save(dir, "again.json", (const uint8_t *)t1, strlen(t1), &s2, &rc, &e2);
    if (rc)
        lwq_fuzz_fail("the scores file lwq wrote back does not load: %s", e2.msg);
    if (strcmp(t1, t2))
        lwq_fuzz_fail("written back twice, the scores file changed:\n%s\n----\n%s", t1, t2);
    lwq_aq_scores_free(&s2);
    free(t1);
    free(t2);
    lwq_error ce = {0};
    rc = lwq_aq_scores_check(&g.o, &g.ck, g.plans, &s, "scores.json", &ce);
    lwq_fuzz_check_error(rc, &ce, "lwq_aq_scores_check");
    if (rc == 0 && s.committed == s.nlayers) {
        lwq_aq_solution sol;
        lwq_error pe = {0};
        int prc = lwq_aq_solve(&g.o, &s, &sol, &pe);
        lwq_fuzz_check_error(prc, &pe, "lwq_aq_solve");
        if (prc == 0) {
            if (!(sol.bits <= BUDGET_BITS))
                lwq_fuzz_fail("checked scores solved to %.6f bits per weight, over the budget of %g", sol.bits,
                              BUDGET_BITS);
            lwq_aq_solution_free(&sol);
        }
    }
    lwq_aq_scores_free(&s);
    return 0;
}
