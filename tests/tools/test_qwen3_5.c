/* Qwen3.5 (qwen3_5 / qwen3_5_moe VLM wrappers, synthetic checkpoints from `lwq mkmodel`) end to
 * end: the text model under model.language_model., split gated-DeltaNet projections quantized as
 * fused groups, the vision tower and mtp.* copied through and excluded as Model Optimizer 0.47
 * excludes them, expert streaming and resume byte-identical, inspect / plan / verify / eval; and
 * fused 3-D experts on disk (mlp.experts.gate_up_proj / down_proj) quantized exactly as the same
 * experts stored per expert, and listed as one module in a MIXED_PRECISION export; two MPI ranks
 * and --auto-quantize-bits; the refusals: an unknown layer_types entry and a fused expert tensor
 * of the wrong shape (before any weight is read, nothing written), image calibration inputs. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout/checkpoint.h"
#include "layout/safetensors.h"
#include "tests/helpers/run.h"

static char g_tmp[256];

static void setup(void) { lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-q35"); }
static void teardown(void) { lwqt_rmtree(g_tmp); }

TestSuite(qwen3_5, .init = setup, .fini = teardown, .timeout = 300);

static void make_model(const char *name, const char *arch)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s/%s --arch %s --hidden 64 --layers 4 --heads 4 --kv-heads 2 "
                         "--head-dim 16 --experts 4 --top-k 2 --moe-intermediate 32 "
                         "--shared-intermediate 48 --linear-value-heads 4 --linear-value-dim 8 "
                         "--vocab 300 --mtp --quiet",
                         lwqt_bin(), g_tmp, name, arch),
                 0, "mkmodel --arch %s failed", arch);
}

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --threads 2 --quiet"

static int quantize(const char *model, const char *out, const char *env, const char *extra)
{
    return lwqt_sh("%s %s quantize %s/%s -o %s/%s " QARGS " %s 2>>%s/stderr.txt", env ? env : "",
                   lwqt_bin(), g_tmp, model, g_tmp, out, extra ? extra : "", g_tmp);
}

static int same_dirs(const char *a, const char *b)
{
    return lwqt_sh("diff -r %s/%s %s/%s >/dev/null 2>&1", g_tmp, a, g_tmp, b) == 0;
}

static char *slurp_rel(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_tmp, rel);
    return lwqt_slurp(p);
}

/* The bytes of tensor `name` in the safetensors file `rel`, malloc'd; NULL when absent. */
static void *tensor_bytes(const char *rel, const char *name, uint64_t *n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_tmp, rel);
    lwq_st_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_st_open(p, &f, &e), 0, "%s", e.msg);
    void *buf = NULL;
    int i = lwq_st_find(&f, name);
    if (i >= 0) {
        const lwq_st_entry *t = &f.entries[i];
        *n = t->end - t->begin;
        buf = malloc(*n + 1);
        cr_assert_eq(lwq_st_read(&f, f.data_start + t->begin, buf, *n, &e), 0, "%s", e.msg);
    }
    lwq_st_free(&f);
    return buf;
}

Test(qwen3_5, moe_vlm_nvfp4_keeps_the_vision_tower_and_mtp_and_excludes_them)
{
    make_model("m", "qwen3_5_moe");
    cr_assert_eq(quantize("m", "q", NULL, "--qformat nvfp4"), 0, "quantize failed");
    char *hq = slurp_rel("q/hf_quant_config.json");
    cr_assert(strstr(hq, "\"model.visual*\""), "%s", hq);
    cr_assert(strstr(hq, "\"mtp*\""), "%s", hq);
    cr_assert(strstr(hq, "\"model.language_model.embed_tokens\""), "%s", hq);
    cr_assert(strstr(hq, "\"model.language_model.layers.0.linear_attn.in_proj_a\""), "%s", hq);
    cr_assert(strstr(hq, "\"model.language_model.layers.0.linear_attn.in_proj_b\""), "%s", hq);
    cr_assert(strstr(hq, "\"model.language_model.layers.0.linear_attn.conv1d\""), "%s", hq);
    cr_assert(strstr(hq, "\"model.language_model.layers.0.mlp.shared_expert_gate\""), "%s", hq);
    cr_assert(strstr(hq, "\"lm_head\""), "%s", hq);
    cr_assert_null(strstr(hq, "linear_attn.in_proj_qkv\""), "in_proj_qkv is quantized: %s", hq);
    free(hq);
    /* the vision tower's tensor passes through byte for byte */
    uint64_t na = 0, nb = 0;
    void *a = tensor_bytes("m/model.safetensors", "model.visual.blocks.0.attn.qkv.weight", &na);
    void *b = tensor_bytes("q/model-tail.safetensors", "model.visual.blocks.0.attn.qkv.weight", &nb);
    cr_assert(a && b && na == nb && !memcmp(a, b, na), "model.visual.* not copied through");
    free(a);
    free(b);
    /* in_proj_qkv and in_proj_z are one fused group: one weight global scale */
    a = tensor_bytes("q/model-layer-00000.safetensors",
                     "model.language_model.layers.0.linear_attn.in_proj_qkv.weight_scale_2", &na);
    b = tensor_bytes("q/model-layer-00000.safetensors",
                     "model.language_model.layers.0.linear_attn.in_proj_z.weight_scale_2", &nb);
    cr_assert(a && b && na == 4 && nb == 4 && !memcmp(a, b, 4), "qkv and z scales differ");
    free(a);
    free(b);
    cr_assert_eq(lwqt_sh("%s verify %s/q >/dev/null 2>&1", lwqt_bin(), g_tmp), 0, "verify failed");
    cr_assert_eq(lwqt_sh("%s inspect %s/q 2>&1 | grep -q 'every tensor matches the qwen3_5_moe plan'",
                         lwqt_bin(), g_tmp),
                 0, "inspect of the output");
}

Test(qwen3_5, expert_streaming_is_byte_identical)
{
    make_model("m", "qwen3_5_moe");
    cr_assert_eq(quantize("m", "a", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(quantize("m", "b", NULL, "--qformat nvfp4 --expert-group 3"), 0);
    cr_assert_eq(lwqt_sh("cd %s && for f in a/*.safetensors; do cmp -s $f b/${f#a/} || exit 1; done",
                         g_tmp),
                 0, "streamed shards differ");
}

Test(qwen3_5, resume_after_a_kill_is_byte_identical)
{
    make_model("m", "qwen3_5_moe");
    cr_assert_eq(quantize("m", "ref", NULL, "--qformat fp8"), 0);
    int rc = quantize("m", "out", "LWQ_SYS_CRASH_STEP=12 LWQ_SYS_CRASH_MODE=kill", "--qformat fp8");
    cr_assert_eq(rc, 128 + SIGKILL, "exit %d, expected a SIGKILL at step 12", rc);
    cr_assert_eq(quantize("m", "out", NULL, "--qformat fp8"), 0, "resume failed");
    cr_assert(same_dirs("ref", "out"), "resumed output differs");
}

Test(qwen3_5, dense_vlm_inspect_plan_fp8_and_eval)
{
    make_model("m", "qwen3_5");
    cr_assert_eq(lwqt_sh("%s inspect %s/m 2>&1 | grep -q 'weights under model.language_model.'",
                         lwqt_bin(), g_tmp),
                 0);
    cr_assert_eq(lwqt_sh("%s inspect %s/m 2>&1 | grep -q 'every tensor matches the qwen3_5 plan'",
                         lwqt_bin(), g_tmp),
                 0);
    cr_assert_eq(lwqt_sh("%s plan %s/m --qformat fp8 --calib-size 6 --calib-seq 24 >/dev/null 2>&1",
                         lwqt_bin(), g_tmp),
                 0, "plan failed");
    cr_assert_eq(quantize("m", "q", NULL, "--qformat fp8"), 0);
    cr_assert_eq(lwqt_sh("%s eval %s/m %s/q --data-size 2 --data-seq 16 --threads 2 --quiet "
                         "--json %s/ev.json >/dev/null 2>&1",
                         lwqt_bin(), g_tmp, g_tmp, g_tmp),
                 0, "eval failed");
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/ev.json", g_tmp);
    cr_assert(stat(p, &st) == 0 && st.st_size > 0, "eval wrote no report");
}

/* A config.json of the qwen3_5 wrapper whose layer_types holds `bad` at index 2. */
static void write_bad_layer_types(const char *bad)
{
    make_model("m", "qwen3_5");
    cr_assert_eq(lwqt_sh("cd %s/m && sed -i '0,/\"full_attention\"/s//\"%s\"/' config.json && "
                         "grep -q '\"%s\"' config.json",
                         g_tmp, bad, bad),
                 0, "could not patch layer_types");
}

Test(qwen3_5, unknown_layer_type_is_refused_by_name_before_reading_and_writes_nothing)
{
    write_bad_layer_types("mamba");
    /* the weights are unreadable: a refusal that read them would fail differently */
    cr_assert_eq(lwqt_sh("cd %s/m && truncate -s 100 model.safetensors", g_tmp), 0);
    cr_assert_eq(lwqt_sh("mkdir -p %s/out", g_tmp), 0);
    int rc = quantize("m", "out", NULL, "--qformat nvfp4");
    cr_assert_eq(rc, 2, "exit %d", rc);
    cr_assert_eq(lwqt_sh("grep -q \"model_type 'qwen3_5_text'\" %s/stderr.txt && "
                         "grep -q 'text_config.layer_types\"\\[3\\] = \"mamba\"' %s/stderr.txt",
                         g_tmp, g_tmp),
                 0, "the message names neither the model_type nor the key and value");
    cr_assert_eq(lwqt_sh("test -z \"$(ls -A %s/out)\"", g_tmp), 0, "something was written");
    cr_assert_neq(lwqt_sh("%s inspect %s/m >/dev/null 2>&1", lwqt_bin(), g_tmp), 0);
}

Test(qwen3_5, image_calibration_input_is_refused_by_name)
{
    make_model("m", "qwen3_5");
    cr_assert_eq(lwqt_sh("printf '{\"input_ids\": [1,2,3,4,5,6,7,8], \"image_grid_thw\": [[1,2,2]]}\\n' "
                         "> %s/c.jsonl",
                         g_tmp),
                 0);
    char extra[600];
    snprintf(extra, sizeof extra, "--qformat fp8 --calib %s/c.jsonl", g_tmp);
    int rc = quantize("m", "out", NULL, extra);
    cr_assert_eq(rc, 2, "exit %d", rc);
    cr_assert_eq(lwqt_sh("grep -q '\"image_grid_thw\": image and video calibration inputs are not "
                         "supported' %s/stderr.txt",
                         g_tmp),
                 0, "the refusal does not name the key");
    cr_assert_neq(lwqt_sh("test -f %s/out/config.json", g_tmp), 0, "an output was written");
}

/* dst = src with each decoder layer's routed experts stored fused, as Qwen3.5-MoE checkpoints
 * are published: mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up rows, per expert) and
 * mlp.experts.down_proj [E, H, I].  bad: declare gate_up_proj [E, 4I, H/2] (same bytes). */
static void fuse_checkpoint(const char *src, const char *dst, int bad)
{
    char sp[512], dp[512];
    snprintf(sp, sizeof sp, "%s/%s", g_tmp, src);
    snprintf(dp, sizeof dp, "%s/%s", g_tmp, dst);
    cr_assert_eq(lwqt_sh("mkdir -p %s && cp %s/*.json %s/", dp, sp, dp), 0);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(sp, &c, &e), 0, "%s", e.msg);
    const int64_t E = c.cfg.num_experts, I = c.cfg.moe_intermediate_size, H = c.cfg.hidden_size;
    const size_t es = lwq_dtype_size(c.cfg.dtype);
    int L = c.cfg.num_hidden_layers, n = 0;
    lwq_st_out_tensor *t = calloc((size_t)c.ntensors + 2 * (size_t)L, sizeof *t);
    void **bufs = calloc((size_t)c.ntensors + 2 * (size_t)L, sizeof *bufs);
    char (*names)[160] = calloc(2 * (size_t)L, sizeof *names);
    cr_assert(t && bufs && names);
    uint8_t **gu = calloc((size_t)L, sizeof *gu), **dn = calloc((size_t)L, sizeof *dn);
    for (int i = 0; i < c.ntensors; i++) {
        const lwq_ckpt_tensor *x = &c.tensors[i];
        void *b = malloc(x->nbytes + 1);
        cr_assert_eq(lwq_ckpt_read_tensor(&c, x, b, &e), 0, "%s", e.msg);
        int layer, ex;
        char kind[8];
        if (sscanf(x->name, "model.language_model.layers.%d.mlp.experts.%d.%4[a-z]_proj.weight", &layer,
                   &ex, kind) == 3 && layer >= 0 && layer < L) {
            if (!gu[layer]) {
                gu[layer] = malloc((size_t)(E * 2 * I * H) * es);
                dn[layer] = malloc((size_t)(E * H * I) * es);
            }
            size_t blk = (size_t)(I * H) * es;
            if (!strcmp(kind, "gate"))
                memcpy(gu[layer] + (size_t)(2 * ex) * blk, b, blk);
            else if (!strcmp(kind, "up"))
                memcpy(gu[layer] + (size_t)(2 * ex + 1) * blk, b, blk);
            else
                memcpy(dn[layer] + (size_t)ex * blk, b, blk);
            free(b);
            continue;
        }
        bufs[n] = b;
        t[n] = (lwq_st_out_tensor){x->name, x->dtype, x->ndim, {0}, b};
        memcpy(t[n].shape, x->shape, sizeof x->shape);
        n++;
    }
    for (int l = 0; l < L; l++) {
        cr_assert_not_null(gu[l], "layer %d has no routed experts", l);
        snprintf(names[2 * l], sizeof names[0], "model.language_model.layers.%d.mlp.experts.gate_up_proj", l);
        snprintf(names[2 * l + 1], sizeof names[0], "model.language_model.layers.%d.mlp.experts.down_proj", l);
        t[n] = (lwq_st_out_tensor){names[2 * l], c.cfg.dtype, 3, {E, bad ? 4 * I : 2 * I, bad ? H / 2 : H}, gu[l]};
        bufs[n++] = gu[l];
        t[n] = (lwq_st_out_tensor){names[2 * l + 1], c.cfg.dtype, 3, {E, H, I}, dn[l]};
        bufs[n++] = dn[l];
    }
    /* the writer wants the tensors sorted by name */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(t[j - 1].name, t[j].name) > 0; j--) {
            lwq_st_out_tensor tmp = t[j];
            t[j] = t[j - 1];
            t[j - 1] = tmp;
        }
    char fp[600];
    snprintf(fp, sizeof fp, "%s/model.safetensors", dp);
    lwq_st_kv meta = {"format", "pt"};
    cr_assert_eq(lwq_st_write_file(fp, t, n, &meta, 1, &e), 0, "%s", e.msg);
    for (int i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(t);
    free(names);
    free(gu);
    free(dn);
    lwq_ckpt_free(&c);
}

Test(qwen3_5, fused_3d_experts_quantize_as_the_same_experts_stored_per_expert)
{
    make_model("m", "qwen3_5_moe");
    fuse_checkpoint("m", "f", 0);
    cr_assert_eq(lwqt_sh("%s inspect %s/f 2>&1 | grep -q 'every tensor matches the qwen3_5_moe plan'",
                         lwqt_bin(), g_tmp),
                 0, "the fused checkpoint does not match the plan");
    cr_assert_eq(quantize("m", "a", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(quantize("f", "b", NULL, "--qformat nvfp4 --expert-group 2"), 0);
    /* same tensors, same bytes (the shards' fingerprints name their sources and differ) */
    int rc = lwqt_sh("%s diff %s/a %s/b > %s/diff.txt 2>&1", lwqt_bin(), g_tmp, g_tmp, g_tmp);
    char *d = slurp_rel("diff.txt");
    /* only the fingerprint metadata (it hashes the source files) may differ */
    cr_assert_eq(rc, 1, "%s", d);
    cr_assert(strstr(d, "different: 2 tensor/metadata differences") && strstr(d, "0 config differences"),
              "%s", d);
    cr_assert_eq(lwqt_sh("test $(grep -c lwq_fingerprint %s/diff.txt) -eq 2", g_tmp), 0, "%s", d);
    free(d);
    uint64_t na = 0, nb = 0;
    const char *w = "model.language_model.layers.1.mlp.experts.3.up_proj.weight";
    void *a = tensor_bytes("a/model-layer-00001.safetensors", w, &na);
    void *b = tensor_bytes("b/model-layer-00001.safetensors", w, &nb);
    cr_assert(a && b && na == nb && !memcmp(a, b, na), "%s differs", w);
    free(a);
    free(b);
}

Test(qwen3_5, fused_expert_tensor_of_the_wrong_shape_is_refused_naming_it)
{
    make_model("m", "qwen3_5_moe");
    fuse_checkpoint("m", "f", 1);
    cr_assert_eq(lwqt_sh("mkdir -p %s/out", g_tmp), 0);
    int rc = quantize("f", "out", NULL, "--qformat nvfp4");
    cr_assert_eq(rc, 2, "exit %d", rc);
    cr_assert_eq(lwqt_sh("grep -q 'tensor model.language_model.layers.0.mlp.experts.gate_up_proj has "
                         "shape \\[4, 128, 32\\], expected \\[4, 64, 64\\]' %s/stderr.txt",
                         g_tmp),
                 0, "the refusal does not name the tensor and both shapes");
    cr_assert_eq(lwqt_sh("test -z \"$(ls -A %s/out)\"", g_tmp), 0, "something was written");
}

Test(qwen3_5, two_ranks_write_the_bytes_of_one_process)
{
    const char *mpiexec = getenv("LWQ_MPIEXEC");
    if (!mpiexec || !*mpiexec)
        cr_skip_test("this lwq was built without MPI (LWQ_MPI=OFF or none found): no launcher to test with");
    if (access(mpiexec, X_OK) != 0)
        cr_skip_test("the MPI launcher this lwq was built with, %s, is not here", mpiexec);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("OMPI_MCA_hwloc_base_binding_policy", "none", 1);
    setenv("OMPI_MCA_plm_rsh_agent", "", 1);
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
    make_model("m", "qwen3_5_moe");
    cr_assert_eq(quantize("m", "one", NULL, "--qformat nvfp4"), 0);
    char launch[600];
    snprintf(launch, sizeof launch, "'%s' -n 2", mpiexec);
    cr_assert_eq(quantize("m", "two", launch, "--qformat nvfp4"), 0, "mpiexec -n 2 failed");
    cr_assert(same_dirs("one", "two"), "two ranks wrote other bytes");
}

Test(qwen3_5, auto_quantize_bits_picks_a_mix_within_the_budget)
{
    make_model("m", "qwen3_5_moe");
    cr_assert_eq(quantize("m", "q", NULL, "--auto-quantize-bits 6"), 0, "auto-quantize failed");
    char *r = slurp_rel("q/auto_quantize.json");
    cr_assert(strstr(r, "model.language_model.layers.0.linear_attn.in_proj_qkv"),
              "the split DeltaNet projections are not a candidate group: %s", r);
    free(r);
    char p[512];
    snprintf(p, sizeof p, "%s/q/auto_quantize.json", g_tmp);
    cJSON *j = lwqt_json(p);
    double bits = lwqt_num(cJSON_GetObjectItemCaseSensitive(j, "written"), "bits_per_weight");
    cr_assert(bits <= 6.0 && bits > 4.0, "written %g bits per weight for a budget of 6", bits);
    cJSON_Delete(j);
    cr_assert_eq(lwqt_sh("%s verify %s/q >/dev/null 2>&1", lwqt_bin(), g_tmp), 0, "verify failed");
}

/* MIXED_PRECISION: Model Optimizer 0.47 lists each layer's fused experts (transformers 5's
 * Qwen3_5MoeExperts) as one module, "...mlp.experts", in quantized_layers and the config group
 * targets, and no exclusion but the MTP prefixes; lwq verify reads that listing */
Test(qwen3_5, mixed_precision_lists_the_fused_experts_as_one_module)
{
    make_model("m", "qwen3_5_moe");
    cr_assert_eq(quantize("m", "q", NULL, "--qformat nvfp4_experts-fp8_attn"), 0, "quantize failed");
    char *hq = slurp_rel("q/hf_quant_config.json");
    cr_assert(strstr(hq, "\"MIXED_PRECISION\""), "%s", hq);
    cr_assert(strstr(hq, "\"model.language_model.layers.0.mlp.experts\":"), "one entry for the experts: %s", hq);
    cr_assert(!strstr(hq, "mlp.experts.0."), "no per-expert entry: %s", hq);
    cr_assert(!strstr(hq, "\"lm_head\""), "MIXED_PRECISION excludes only mtp*: %s", hq);
    free(hq);
    char *cj = slurp_rel("q/config.json");
    cr_assert(strstr(cj, "\"model.language_model.layers.3.mlp.experts\"") && !strstr(cj, "mlp.experts.3."), "%s", cj);
    free(cj);
    cr_assert_eq(lwqt_sh("%s verify %s/q >/dev/null 2>&1", lwqt_bin(), g_tmp), 0, "lwq verify failed");
}
