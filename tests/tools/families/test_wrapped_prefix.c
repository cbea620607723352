/* A wrapped checkpoint (kimi_k25: the DeepSeek-V3 text model under "language_model." names, its
 * config under "text_config") quantizes to exactly the tensors of the plain model, under the
 * wrapped names, with the wrapped lm_head name in the exclusions. */
#include <criterion/criterion.h>

#include "layout/checkpoint/checkpoint.h"
#include "layout/checkpoint/safetensors.h"
#include "tests/helpers/run.h"

TestSuite(wrapped, .init = lwqt_setup, .fini = lwqt_teardown);

/* Rewrite `src` as a kimi_k25 wrapper in `dst`: one shard, every name prefixed. */
static void wrap(const char *src, const char *dst)
{
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(src, &ck, &e), 0, "%s", e.msg);
    cr_assert_eq(mkdir(dst, 0755), 0);
    lwq_st_out_tensor *t = calloc((size_t)ck.ntensors, sizeof *t);
    char **names = calloc((size_t)ck.ntensors, sizeof *names);
    void **bufs = calloc((size_t)ck.ntensors, sizeof *bufs);
    for (int i = 0; i < ck.ntensors; i++) {
        const lwq_ckpt_tensor *s = &ck.tensors[i];
        names[i] = malloc(strlen(s->name) + 32);
        sprintf(names[i], "language_model.%s", s->name);
        bufs[i] = malloc(s->nbytes ? s->nbytes : 1);
        cr_assert_eq(lwq_ckpt_read_tensor(&ck, s, bufs[i], &e), 0, "%s", e.msg);
        t[i].name = names[i];
        t[i].dtype = s->dtype;
        t[i].ndim = s->ndim;
        memcpy(t[i].shape, s->shape, sizeof t[i].shape);
        t[i].data = bufs[i];
    }
    char p[700];
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    cr_assert_eq(lwq_st_write_file(p, t, ck.ntensors, NULL, 0, &e), 0, "%s", e.msg);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model_type", "kimi_k25");
    cJSON_AddItemToObject(root, "text_config", cJSON_Duplicate(ck.cfg.raw, 1));
    char *js = cJSON_Print(root);
    snprintf(p, sizeof p, "%s/config.json", dst);
    FILE *fp = fopen(p, "w");
    fputs(js, fp);
    fclose(fp);
    free(js);
    cJSON_Delete(root);
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "cp %s/tokenizer.json %s/tokenizer_config.json %s/", src, src, dst);
    cr_assert_eq(system(cmd), 0);
    for (int i = 0; i < ck.ntensors; i++) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(t);
    lwq_ckpt_free(&ck);
}

static void quantize(const char *src, const char *out)
{
    const char *a[] = {"quantize", src, "-o", out, "--calib-size", "6", "--calib-seq", "24", "--kv-cache", "fp8",
                       "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "quantize %s: %s", src, err);
    free(err);
}

Test(wrapped, language_model_prefix_gives_the_plain_tensors_under_wrapped_names)
{
    char m[600], w[600], qm[600], qw[600];
    snprintf(m, sizeof m, "%s", lwqt_path("m"));
    snprintf(w, sizeof w, "%s", lwqt_path("w"));
    snprintf(qm, sizeof qm, "%s", lwqt_path("qm"));
    snprintf(qw, sizeof qw, "%s", lwqt_path("qw"));
    const char *mk[] = {"mkmodel", m, "--arch", "deepseek_v3", "--layers", "2", "--experts", "4", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    wrap(m, w);
    quantize(m, qm);
    quantize(w, qw);
    lwq_ckpt a, b;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(qm, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_ckpt_open(qw, &b, &e), 0, "%s", e.msg);
    cr_assert_eq(a.ntensors, b.ntensors);
    for (int i = 0; i < a.ntensors; i++) {
        char n[512];
        snprintf(n, sizeof n, "language_model.%s", a.tensors[i].name);
        const lwq_ckpt_tensor *x = &a.tensors[i], *y = lwq_ckpt_find(&b, n);
        cr_assert_not_null(y, "%s missing from the wrapped output", n);
        cr_assert(x->dtype == y->dtype && x->nbytes == y->nbytes, "%s differs in dtype or size", n);
        void *bx = malloc(x->nbytes ? x->nbytes : 1), *by = malloc(y->nbytes ? y->nbytes : 1);
        cr_assert_eq(lwq_ckpt_read_tensor(&a, x, bx, &e), 0);
        cr_assert_eq(lwq_ckpt_read_tensor(&b, y, by, &e), 0);
        cr_assert_eq(memcmp(bx, by, x->nbytes), 0, "%s: data differs", n);
        free(bx);
        free(by);
    }
    lwq_ckpt_free(&a);
    lwq_ckpt_free(&b);
    char p[700];
    snprintf(p, sizeof p, "%s/hf_quant_config.json", qw);
    char *hq = lwqt_slurp(p);
    cr_assert(strstr(hq, "\"language_model.lm_head\""), "exclusions lack the wrapped lm_head: %s", hq);
    cr_assert(strstr(hq, "\"language_model.model.layers.1.mlp.gate\""), "router exclusion not wrapped");
    free(hq);
    const char *v[] = {"verify", qw, NULL};
    cr_assert_eq(lwqt_run(v), 0, "verify of the wrapped output failed");
}
