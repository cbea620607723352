/* fuzz/fuzz_qdir.c — a quantized checkpoint, `lwq eval SRC QUANT_DIR`'s QUANT_DIR, through the
 * reader eval uses: lwq_qdir_open (config, hf_quant_config.json, index, shards, every tensor
 * checked against the source), then per decoder layer lwq_qdir_read_layer and
 * lwq_qlayer_view_make (the dequantized weights and the input quantization the forward emulates),
 * then the tail.
 *
 * Input: an archive (fuzz/fuzz_util.h) of the directory's files: config.json,
 * hf_quant_config.json, model.safetensors.index.json and the shards.  The source is the tiny
 * checkpoint of tests/data/fuzz/qdir-src/<model_type> named by the archive's config.json (llama
 * when it names none of them).  Checked on success: every dequantized weight is finite (a NaN
 * weight is a wrong output that looks complete). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eval/eval_internal.h"
#include "fuzz/fuzz_util.h"
#include "kernels/backend.h"

static const char *const k_src_names[] = {"llama", "qwen3_moe", "deepseek_v3", "qwen3_next"};
#define NSRC (int)(sizeof k_src_names / sizeof k_src_names[0])

typedef struct src_model {
    lwq_ckpt ck;
    lwq_arch_layer *plans;
} src_model;

static src_model g_src[NSRC];
static lwq_backend g_be;
static int g_ready;

static void setup(void)
{
    lwq_fuzz_quiet();
    lwq_error e = {0};
    if (lwq_backend_cpu_create(&g_be, 1, &e) != 0)
        lwq_fuzz_fail("CPU backend: %s", e.msg);
    for (int s = 0; s < NSRC; s++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", lwq_fuzz_data("qdir-src"));
        snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", k_src_names[s]);
        src_model *m = &g_src[s];
        if (lwq_ckpt_open(dir, &m->ck, &e) != 0)
            lwq_fuzz_fail("the harness's source %s: %s", dir, e.msg);
        int L = m->ck.cfg.num_hidden_layers;
        if (!(m->plans = calloc((size_t)L, sizeof *m->plans)))
            lwq_fuzz_fail("out of memory");
        for (int l = 0; l < L; l++)
            if (lwq_arch_layer_plan(&m->ck.cfg, l, &m->plans[l], &e) != 0)
                lwq_fuzz_fail("the harness's source %s, layer %d: %s", dir, l, e.msg);
    }
    g_ready = 1;
}

/* Which source the archive's config.json is quantized from. */
static int pick_source(const lwq_fuzz_file *f, int nf)
{
    const lwq_fuzz_file *c = lwq_fuzz_get(f, nf, "config.json");
    int s = 0;
    cJSON *j = c ? cJSON_ParseWithLength((const char *)c->data, c->len) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    for (int k = 0; cJSON_IsString(mt) && k < NSRC; k++)
        if (!strcmp(mt->valuestring, k_src_names[k]))
            s = k;
    cJSON_Delete(j);
    return s;
}

static void check_view(const lwq_qlayer_view *v, int layer)
{
    for (int i = 0; i < v->overlay.n; i++) {
        const lwq_htensor *t = &v->overlay.v[i];
        if (t->dtype != LWQ_F32 || !t->data)
            continue;
        const float *w = t->data;
        for (uint64_t k = 0; k < t->nbytes / sizeof(float); k++)
            if (!isfinite(w[k]))
                lwq_fuzz_fail("layer %d: dequantized %s[%llu] is %g and the layer was accepted", layer,
                              t->name, (unsigned long long)k, (double)w[k]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!g_ready)
        setup();
    lwq_fuzz_file f[LWQ_FUZZ_MAX_FILES];
    int nf = lwq_fuzz_split(d, n, "config.json", f, LWQ_FUZZ_MAX_FILES);
    if (nf == 0)
        return 0;
    const char *dir = lwq_fuzz_scratch("qdir");
    if (lwq_fuzz_write(dir, f, nf) != 0)
        return 0;
    src_model *src = &g_src[pick_source(f, nf)];
    lwq_qdir q = {0};
    lwq_error e = {0};
    int rc = lwq_qdir_open(&q, dir, &src->ck, &e);
    lwq_fuzz_check_error(rc, &e, "lwq_qdir_open");
    if (rc)
        return 0;
    lwq_emul em;
    lwq_emul_init(&em, &g_be);
    for (int l = 0; l < src->ck.cfg.num_hidden_layers; l++) {
        lwq_tlist qt = {0};
        lwq_qlayer_view view = {0};
        lwq_error le = {0};
        int lrc = lwq_qdir_read_layer(&q, l, &qt, &le);
        lwq_fuzz_check_error(lrc, &le, "lwq_qdir_read_layer");
        if (lrc == 0) {
            /* `lwq eval --weights-only` on inputs of odd length */
            lrc = lwq_qlayer_view_make(&src->plans[l], &qt, q.kv_fp8, (int)(n & 1), &em, &view, &le);
            lwq_fuzz_check_error(lrc, &le, "lwq_qlayer_view_make");
            if (lrc == 0)
                check_view(&view, l);
        }
        lwq_emul_reset(&em);
        lwq_qlayer_view_free(&view);
        lwq_tlist_free(&qt);
        if (lrc)
            break;
    }
    lwq_tlist tail = {0};
    lwq_error te = {0};
    lwq_fuzz_check_error(lwq_qdir_read_layer(&q, -1, &tail, &te), &te, "lwq_qdir_read_layer(tail)");
    lwq_tlist_free(&tail);
    lwq_emul_free(&em);
    lwq_qdir_free(&q);
    return 0;
}
