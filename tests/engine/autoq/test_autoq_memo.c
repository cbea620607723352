/* Pass 1's replays with the GEMM/attention memo score bit for bit what computing every op scores (dense, MoE routing, MLA, linear attention), and reuse a real share of the calls. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine/autoq/autoq.h"
#include "tests/helpers/run.h"

TestSuite(autoq_memo, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 300);

/* pass 1 of `model` into out (scores.json under its resume directory), memo on or off */
static void pass1(const char *model, const char *out, int no_memo, const char *log)
{
    int32_t buf[6][24], *rows[6];
    int64_t lens[6];
    for (int i = 0; i < 6; i++) {
        for (int t = 0; t < 24; t++)
            buf[i][t] = (int32_t)((i * 37 + t * 11) % 500);
        rows[i] = buf[i];
        lens[i] = 18 + i; /* unequal: batches are padded */
    }
    lwq_calib_set cs = {6, rows, lens, 0, "test ids"};
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4", &r, &e), 0);
    lwq_autoq_opts o;
    memset(&o, 0, sizeof o);
    char mp[512], op[512];
    snprintf(mp, sizeof mp, "%s", lwqt_path(model));
    snprintf(op, sizeof op, "%s", lwqt_path(out));
    o.q.model_dir = mp;
    o.q.out_dir = op;
    o.q.recipe = &r;
    o.q.calib = &cs;
    o.q.batch_size = 4;
    o.q.device = LWQ_DEVICE_CPU;
    o.q.quiet = 1;
    char lp[512];
    snprintf(lp, sizeof lp, "%s", lwqt_path(log));
    o.q.log_json = lp;
    o.bits = 12; /* above every model's least mix: this test is about the scores */
    memset(o.formats, 1, sizeof o.formats);
    o.score_size = 5;
    o.no_memo = no_memo;
    o.pass1_only = 1;
    int rc = lwq_autoq_run(&o, &e);
    lwq_recipe_free(&r);
    cr_assert_eq(rc, 0, "%s: %s", model, e.msg);
}

static void same_scores(const char *arch_args, const char *name)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s %s --hidden 64 --layers 2 --heads 4 --kv-heads 2 --vocab 512 --quiet",
                         lwqt_bin(), lwqt_path(name), arch_args), 0);
    char a[64], b[64];
    snprintf(a, sizeof a, "%s_memo", name);
    snprintf(b, sizeof b, "%s_all", name);
    pass1(name, a, 0, "memo.jsonl");
    pass1(name, b, 1, "all.jsonl");
    cr_assert_eq(lwqt_sh("cmp -s %s.layerwise_resume/auto_quantize/scores.json %s.layerwise_resume/auto_quantize/"
                         "scores.json", lwqt_path(a), lwqt_path(b)), 0,
                 "%s: the memo changed a score (or the fingerprint)", name);
    /* the memo's counters after the last layer: a share of the calls was copied, not computed */
    char *m = lwqt_slurp(lwqt_path("memo.jsonl")), *all = lwqt_slurp(lwqt_path("all.jsonl"));
    const char *h = NULL;
    long hits = -1, misses = -1;
    for (const char *p = strstr(m, "\"memo_hits\":"); p; p = strstr(p + 1, "\"memo_hits\":"))
        h = p;
    cr_assert_not_null(h, "%s: no layer line in the log", name);
    cr_assert_eq(sscanf(h, "\"memo_hits\":%ld,\"memo_misses\":%ld", &hits, &misses), 2);
    cr_assert(hits > 0 && misses > 0, "%s: %ld calls reused, %ld computed", name, hits, misses);
    cr_assert(strstr(all, "\"memo_hits\":0,"), "%s: without the memo nothing is reused", name);
    free(m);
    free(all);
}

Test(autoq_memo, dense_llama) { same_scores("--arch llama", "llama"); }
Test(autoq_memo, moe_routing) { same_scores("--arch qwen3_moe --experts 8 --top-k 2", "moe"); }
Test(autoq_memo, mla_deepseek) { same_scores("--arch deepseek_v3", "dsv3"); }
Test(autoq_memo, linear_attention_qwen3_next) { same_scores("--arch qwen3_next", "q3n"); }
