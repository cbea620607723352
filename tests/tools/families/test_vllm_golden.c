/* lwq still writes, for every new-family case vLLM 0.33's loader accepted (tests/data/clients/vllm.json), exactly the tensors and the quantization config vLLM was given. */
/*
 * tests/data/clients/vllm.json is made by peers/clients/make_goldens.py --vllm from a run of
 * peers/clients/check_vllm.py (vLLM 0.33 on the CPU: config classes, model class, every tensor
 * through load_weights, every parameter written) over lwq's outputs of the transformers-written
 * sources in tests/data/peers/src.  For each case vLLM accepted it records the output's tensors
 * (name, safetensors dtype, shape) and hf_quant_config.json's "quantization".  This test quantizes
 * each such case again and requires the same tensor set, dtypes and shapes and an equal
 * "quantization" object: CI cannot run vLLM, so a change to what lwq writes for these families
 * fails here until vLLM is run again and the golden remade.  The tensor values are covered by
 * test_peer_goldens (Model Optimizer's exports), not here.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/data/dtype.h"
#include "core/sys/file.h"
#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/shell.h"

static const char *tree(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/tools/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*s", (int)(cut - me), me);
    return path;
}

static cJSON *json_file(const char *p)
{
    char *s = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_file_read_all(p, 16u << 20, &s, NULL, &e), 0, "%s", e.msg);
    cJSON *j = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(j, "%s is not JSON", p);
    return j;
}

static cJSON *golden(void)
{
    char p[1100];
    snprintf(p, sizeof p, "%stests/data/clients/vllm.json", tree());
    return json_file(p);
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItem(o, k);
    cr_assert(cJSON_IsString(x), "vllm.json: %s missing", k);
    return x->valuestring;
}

/* lwq quantize case c into out (the golden's command; @ROOT@ is the source tree) */
static int quantize(const cJSON *c, const char *out)
{
    char args[2048] = "";
    const cJSON *q = cJSON_GetObjectItem(c, "quantize");
    cr_assert(cJSON_IsArray(q), "vllm.json: %s: quantize missing", str_of(c, "source"));
    for (const cJSON *a = q->child; a; a = a->next) {
        cr_assert(cJSON_IsString(a) && !strchr(a->valuestring, '\''), "vllm.json: bad argument");
        size_t n = strlen(args);
        const char *v = a->valuestring;
        if (!strncmp(v, "@ROOT@/", 7))
            snprintf(args + n, sizeof args - n, " '%s%s'", tree(), v + 7);
        else
            snprintf(args + n, sizeof args - n, " '%s'", v);
        cr_assert_lt(strlen(args), sizeof args - 1, "arguments too long");
    }
    return lwqt_sh("'%s' quantize '%stests/data/peers/src/%s' -o '%s' --calib '%stests/data/peers/calib.jsonl' "
                   "--calib-size 16 --calib-seq 32 --batch-size 4 --quiet%s > '%s.log' 2>&1",
                   lwqt_bin(), tree(), str_of(c, "source"), out, tree(), args, out);
}

/* "DTYPE [d0, d1]" as the golden writes it (Python's json.dumps of the shape) */
static void describe(const lwq_st_entry *t, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s [", lwq_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && n < (int)cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < (int)cap)
        snprintf(buf + n, cap - (size_t)n, "]");
}

/* Differences between out's tensors and the golden's, printed (at most a few); their count. */
static int compare_tensors(const char *label, const char *out, const cJSON *want)
{
    DIR *d = opendir(out);
    cr_assert_not_null(d, "%s: no output directory %s", label, out);
    int seen = 0, diff = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 12 || strcmp(de->d_name + n - 12, ".safetensors"))
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", out, de->d_name);
        lwq_st_file f;
        lwq_error e = {0};
        cr_assert_eq(lwq_st_open(p, &f, &e), 0, "%s", e.msg);
        for (int i = 0; i < f.n; i++) {
            char got[200];
            describe(&f.entries[i], got, sizeof got);
            const cJSON *w = cJSON_GetObjectItem(want, f.entries[i].name);
            seen++;
            if (!cJSON_IsString(w) || strcmp(w->valuestring, got)) {
                if (diff++ < 8)
                    printf("vllm golden: %s: %s is %s, vLLM was given %s\n", label, f.entries[i].name, got,
                           cJSON_IsString(w) ? w->valuestring : "no such tensor");
            }
        }
        lwq_st_free(&f);
    }
    closedir(d);
    int expected = cJSON_GetArraySize(want);
    if (seen != expected) {
        printf("vllm golden: %s: %d tensors written, vLLM was given %d\n", label, seen, expected);
        diff++;
    }
    return diff;
}

/* Every accepted case of the golden whose source starts with `prefix`. */
static void run_sources(const char *prefix)
{
    cJSON *g = golden();
    const cJSON *cases = cJSON_GetObjectItem(g, "cases");
    cr_assert(cJSON_IsArray(cases), "vllm.json: cases missing");
    char tmp[256];
    lwqt_tmpdir(tmp, sizeof tmp, "lwq-vllm-golden");
    int ran = 0, failed = 0;
    for (const cJSON *c = cases->child; c; c = c->next) {
        const char *src = str_of(c, "source");
        if (strncmp(src, prefix, strlen(prefix)) || strcmp(str_of(c, "vllm"), "ok"))
            continue;
        char label[200], out[512], p[700];
        snprintf(label, sizeof label, "%s/%s", src, str_of(c, "case"));
        snprintf(out, sizeof out, "%s/%d", tmp, ran++);
        int rc = quantize(c, out);
        cr_assert_eq(rc, 0, "%s: lwq quantize failed (exit %d), see %s.log", label, rc, out);
        int bad = compare_tensors(label, out, cJSON_GetObjectItem(c, "tensors"));
        snprintf(p, sizeof p, "%s/hf_quant_config.json", out);
        cJSON *h = json_file(p);
        if (!cJSON_Compare(cJSON_GetObjectItem(h, "quantization"), cJSON_GetObjectItem(c, "hf_quant_config"), 1)) {
            printf("vllm golden: %s: hf_quant_config.json's quantization is not the one vLLM parsed\n", label);
            bad++;
        }
        cJSON_Delete(h);
        printf("vllm golden: %-40s %s\n", label, bad ? "DIFFERENT" : "as vLLM accepted it");
        failed += bad > 0;
    }
    cJSON_Delete(g);
    lwqt_rmtree(tmp);
    cr_assert_gt(ran, 0, "vllm.json has no accepted case for %s", prefix);
    cr_assert_eq(failed, 0, "%d of %d case(s) write other tensors or another config than vLLM accepted (printed above)",
                 failed, ran);
}

/* The comparison catches a changed name, dtype or shape and a missing tensor. */
Test(vllm_golden, a_changed_tensor_is_reported)
{
    cJSON *g = golden();
    const cJSON *c = cJSON_GetObjectItem(g, "cases")->child;
    while (c && strcmp(str_of(c, "vllm"), "ok"))
        c = c->next;
    cr_assert_not_null(c, "vllm.json has no accepted case");
    char tmp[256], out[400];
    lwqt_tmpdir(tmp, sizeof tmp, "lwq-vllm-golden");
    snprintf(out, sizeof out, "%s/o", tmp);
    cr_assert_eq(quantize(c, out), 0);
    cJSON *want = cJSON_Duplicate(cJSON_GetObjectItem(c, "tensors"), 1);
    cr_assert_eq(compare_tensors("unchanged", out, want), 0);
    cJSON *first = want->child;
    cJSON_SetValuestring(first, "F32 [1]");
    cr_assert_eq(compare_tensors("a changed dtype/shape", out, want), 1);
    cJSON_DeleteItemFromObject(want, first->string);
    cr_assert_eq(compare_tensors("a tensor vLLM was not given", out, want), 2);
    cJSON_Delete(want);
    cJSON_Delete(g);
    lwqt_rmtree(tmp);
}

Test(vllm_golden, qwen3_5, .timeout = 300) { run_sources("qwen3_5"); }
Test(vllm_golden, glm4_moe, .timeout = 300) { run_sources("glm4_moe"); }
Test(vllm_golden, minimax_m2, .timeout = 300) { run_sources("minimax_m2"); }
Test(vllm_golden, deepseek_v32, .timeout = 300) { run_sources("deepseek_v32"); }
Test(vllm_golden, glm_moe_dsa, .timeout = 300) { run_sources("glm_moe_dsa"); }
/* issue 35: nemotron_h and nemotron_h_latent (kimi_linear has no accepted case: perf/RESULTS.md) */
Test(vllm_golden, nemotron_h, .timeout = 300) { run_sources("nemotron_h"); }
