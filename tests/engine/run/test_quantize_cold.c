/* Cold experts (issue 6, "Must show"): a routed expert that calibration never reaches gets finite
 * scales filled from its calibrated siblings, and the run reports it (log line, JSON log,
 * calibration_report.json).  Since issue 23 every expert of a layer shares one input scale per
 * input (Model Optimizer 0.47's fused-experts quantizers), which the fill is a case of.
 *
 * The model is `lwq mkmodel` qwen3_moe (8 experts, top-2) whose layer-1 router is edited so that
 * expert 5 can never be picked: rows 1 and 3 become the negations of rows 0 and 2 and row 5
 * becomes zero.  For every token one of logits 0/1 and one of 2/3 is >= 0 = logit 5, and all four
 * have a lower index, so even a tie never selects expert 5. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers/run.h"
#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/check/qcheck.h"

#define NEXP 8
#define COLD 5

static const int64_t LENS[8] = {32, 9, 27, 32, 14, 32, 5, 21};
static char g_model[600], g_calib[600];

static void make_model(qc_calib *c)
{
    snprintf(g_model, sizeof g_model, "%s", lwqt_path("m"));
    snprintf(g_calib, sizeof g_calib, "%s", lwqt_path("calib.jsonl"));
    const char *mk[] = {"mkmodel", g_model, "--arch", "qwen3_moe", "--hidden", "64", "--layers", "2", "--experts",
                        "8", "--top-k", "2", "--vocab", "300", "--seed", "3", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel failed");
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(g_model, &ck, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&ck, "model.layers.1.mlp.gate.weight");
    cr_assert_not_null(t);
    cr_assert(t->dtype == LWQ_BF16 && t->shape[0] == NEXP, "unexpected router %s", lwq_dtype_name(t->dtype));
    int64_t H = t->shape[1];
    uint16_t *w = malloc(t->nbytes);
    cr_assert_eq(lwq_ckpt_read_tensor(&ck, t, w, &e), 0, "%s", e.msg);
    for (int64_t j = 0; j < H; j++) {
        w[1 * H + j] = w[0 * H + j] ^ 0x8000; /* bf16 negation: the sign bit */
        w[3 * H + j] = w[2 * H + j] ^ 0x8000;
        w[COLD * H + j] = 0;
    }
    int fd = open(ck.files[t->file].path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, w, t->nbytes, (off_t)t->offset), (ssize_t)t->nbytes);
    close(fd);
    free(w);
    qc_calib_make(c, 8, LENS, 256, 5); /* ids the byte-level tokenizer knows */
    qc_calib_write(c, g_calib);
    lwq_ckpt_free(&ck);
}

static const char *quantize(const char *name, const char *preset, int all_experts)
{
    static char out[600], log[700];
    snprintf(out, sizeof out, "%s", lwqt_path(name));
    snprintf(log, sizeof log, "%s.jsonl", out);
    const char *args[] = {"quantize", g_model, "-o", out, "--qformat", preset, "--calib", g_calib, "--calib-size",
                          "8", "--calib-seq", "32", "--batch-size", "4", "--log-json", log, "--device", "cpu",
                          all_experts ? "--calib-all-experts" : NULL, NULL};
    int rc = lwqt_run(args);
    if (rc != 0)
        cr_assert_fail("lwq quantize exited %d: %s", rc, lwqt_err());
    return out;
}

static cJSON *json_file(const char *path)
{
    char *s = lwqt_slurp(path);
    cJSON *j = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(j, "%s: invalid JSON", path);
    return j;
}

static void check_report(const char *out, const qc_ref *ref, int all_experts)
{
    char p[700];
    snprintf(p, sizeof p, "%s/calibration_report.json", out);
    cJSON *rep = json_file(p);
    cJSON *layers = cJSON_GetObjectItem(rep, "layers");
    cr_assert_eq(cJSON_GetArraySize(layers), 2);
    int total = 0;
    for (int L = 0; L < 2; L++) {
        cJSON *l = cJSON_GetArrayItem(layers, L), *tok = cJSON_GetObjectItem(l, "expert_tokens");
        int cold = 0;
        cr_assert_eq(cJSON_GetArraySize(tok), NEXP);
        for (int x = 0; x < NEXP; x++) {
            int64_t n = (int64_t)cJSON_GetArrayItem(tok, x)->valuedouble;
            cr_assert_eq(n, ref->counts[L * ref->nexp + x], "layer %d expert %d: report %lld tokens, forward %lld", L,
                         x, (long long)n, (long long)ref->counts[L * ref->nexp + x]);
            cold += n == 0;
        }
        cr_assert_eq(cJSON_GetObjectItem(l, "cold_experts")->valueint, cold, "layer %d cold_experts", L);
        /* with --calib-all-experts every expert has its own statistics: nothing to fill */
        cr_assert_eq(cJSON_GetObjectItem(l, "filled_experts")->valueint, all_experts ? 0 : cold);
        total += cold;
    }
    cr_assert_eq(ref->counts[1 * ref->nexp + COLD], 0, "the edited router still routes to expert %d", COLD);
    cr_assert_eq(cJSON_GetObjectItem(rep, "cold_experts_total")->valueint, total);
    cJSON_Delete(rep);

    /* JSON log: one layer event each, then the summary */
    snprintf(p, sizeof p, "%s.jsonl", out);
    char *log = lwqt_slurp(p);
    int seen = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *ev = cJSON_Parse(line);
        cr_assert_not_null(ev, "bad JSON log line: %s", line);
        const char *kind = cJSON_GetObjectItem(ev, "event")->valuestring;
        if (!strcmp(kind, "layer") && cJSON_GetObjectItem(ev, "layer")->valueint == 1) {
            cr_assert_eq(cJSON_GetObjectItem(ev, "cold_experts")->valueint, 1);
            cr_assert_eq(cJSON_GetObjectItem(ev, "n_experts")->valueint, NEXP);
            seen |= 1;
        } else if (!strcmp(kind, "summary")) {
            cr_assert_eq(cJSON_GetObjectItem(ev, "cold_experts")->valueint, total);
            seen |= 2;
        }
        cJSON_Delete(ev);
    }
    free(log);
    cr_assert_eq(seen, 3, "JSON log lacks the layer-1 event or the summary");

    /* progress line of layer 2/2 */
    char *err = lwqt_err(), *line = strstr(err, "layer 2/2");
    cr_assert_not_null(line, "no progress line for layer 2/2: %s", err);
    char *eol = strchr(line, '\n');
    if (eol)
        *eol = 0;
    cr_assert(strstr(line, "cold experts 1/8"), "progress line does not report the cold expert: %s", line);
    free(err);
}

static void cold_case(const char *preset, int all_experts)
{
    qc_calib c;
    make_model(&c);
    const char *out = quantize("out", preset, all_experts);
    qc_ref ref;
    qc_ref_compute(&ref, g_model, &c, 4, 0, all_experts);
    check_report(out, &ref, all_experts);
    /* every tensor, with the sibling-max rule applied independently (qcheck) */
    qc_check_output(g_model, out, preset, QC_KV_FP8_CAST, &ref);
    /* and spelled out for the cold expert */
    qc_out o;
    qc_out_open(&o, out);
    static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
    for (int p = 0; p < 3; p++) {
        char n[160];
        float sib = 0;
        for (int x = 0; x < NEXP; x++) {
            if (x == COLD)
                continue;
            snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.%s.input_scale", x, proj[p]);
            sib = fmaxf(sib, qc_out_scalar(&o, n));
        }
        snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.%s.input_scale", COLD, proj[p]);
        float s = qc_out_scalar(&o, n);
        cr_assert(isfinite(s) && s > 0, "%s = %g", n, s);
        if (!all_experts)
            cr_assert(s == sib, "%s = %.9g, the max over its siblings is %.9g", n, s, sib);
        /* Model Optimizer 0.47 (one input quantizer per input for transformers' fused experts):
         * every expert of the layer carries the same input_scale, gate and up one value, down one */
        for (int x = 0; x < NEXP; x++) {
            char o2[160];
            snprintf(o2, sizeof o2, "model.layers.1.mlp.experts.%d.%s.input_scale", x, p == 2 ? "down_proj" : "gate_proj");
            cr_assert(qc_out_scalar(&o, o2) == s, "%s = %.9g differs from %s = %.9g", o2, qc_out_scalar(&o, o2), n, s);
        }
        snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.%s.%s", COLD, proj[p],
                 strcmp(preset, "fp8") ? "weight_scale_2" : "weight_scale");
        s = qc_out_scalar(&o, n);
        cr_assert(isfinite(s) && s > 0, "%s = %g", n, s);
    }
    qc_out_free(&o);
    qc_ref_free(&ref);
    qc_calib_free(&c);
}

Test(quantize_cold, nvfp4_sibling_max_and_report, .init = lwqt_setup, .fini = lwqt_teardown) { cold_case("nvfp4", 0); }
Test(quantize_cold, fp8_sibling_max_and_report, .init = lwqt_setup, .fini = lwqt_teardown) { cold_case("fp8", 0); }
Test(quantize_cold, all_experts_calibrates_the_cold_expert, .init = lwqt_setup, .fini = lwqt_teardown)
{
    cold_case("nvfp4", 1);
}

/* The bytes of tensor name in output dir o (its dtype and shape as stored); *n its size. */
static void *tensor_bytes(const qc_out *o, const char *name, size_t *n)
{
    const lwq_st_entry *t = qc_out_find(o, name, NULL);
    cr_assert_not_null(t, "%s: no tensor %s", o->dir, name);
    *n = (size_t)(t->end - t->begin);
    return qc_out_read(o, name, t->dtype, t->ndim, t->shape);
}

/* local_hessian with a cold expert (issue 23): Model Optimizer 0.47 gives a weight its Hessian
 * hooks never fed the plain squared-error sweep (model_calib.py, _mse_calibrate_weights with
 * hessian_for -> None), where lwq refused the run ("no calibration tokens for the local-Hessian
 * search").  The cold expert's weight and scales equal those of mse + fp8_scale_sweep; a
 * calibrated expert's, searched with its Hessian, differ from them. */
Test(quantize_cold, local_hessian_sweeps_the_cold_expert_without_a_hessian, .init = lwqt_setup,
     .fini = lwqt_teardown)
{
    qc_calib c;
    make_model(&c);
    lwqt_write_str("lh.json", "{\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\", \"algo\": \"local_hessian\"}]}");
    lwqt_write_str("sw.json", "{\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\", \"algo\": \"mse\", "
                              "\"fp8_scale_sweep\": true}]}");
    const char *names[2] = {"lh", "sw"};
    char outs[2][600];
    for (int k = 0; k < 2; k++) {
        char recipe[600];
        snprintf(outs[k], sizeof outs[k], "%s", lwqt_path(names[k]));
        snprintf(recipe, sizeof recipe, "%s.json", outs[k]);
        const char *args[] = {"quantize", g_model, "-o", outs[k], "--recipe", recipe, "--calib", g_calib,
                              "--calib-size", "8", "--calib-seq", "32", "--batch-size", "4", "--device", "cpu", NULL};
        int rc = lwqt_run(args);
        if (rc != 0)
            cr_assert_fail("lwq quantize --recipe %s exited %d: %s", recipe, rc, lwqt_err());
    }
    qc_out lh, sw;
    qc_out_open(&lh, outs[0]);
    qc_out_open(&sw, outs[1]);
    static const char *const what[] = {"weight", "weight_scale", "weight_scale_2"};
    int calibrated_differs = 0;
    for (int x = 0; x < NEXP; x++)
        for (int w = 0; w < 3; w++) {
            char n[160];
            size_t na, nb;
            snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.down_proj.%s", x, what[w]);
            void *a = tensor_bytes(&lh, n, &na), *b = tensor_bytes(&sw, n, &nb);
            int same = na == nb && !memcmp(a, b, na);
            if (x == COLD)
                cr_assert(same, "%s: local_hessian's cold expert differs from the plain sweep", n);
            else
                calibrated_differs |= !same;
            free(a);
            free(b);
        }
    cr_assert(calibrated_differs, "no calibrated expert's search used its Hessian");
    char p[700];
    snprintf(p, sizeof p, "%s/calibration_report.json", outs[0]);
    cJSON *rep = json_file(p), *l1 = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "layers"), 1);
    const cJSON *fb = cJSON_GetObjectItem(l1, "local_hessian_cold_without_hessian");
    cr_assert(cJSON_IsNumber(fb) && fb->valueint == 3, "layer 1 reports the cold expert's 3 linears");
    cJSON_Delete(rep);
    qc_out_free(&lh);
    qc_out_free(&sw);
    qc_calib_free(&c);
}
