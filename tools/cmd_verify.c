/* tools/cmd_verify.c — `lwq verify OUT_DIR`: is a quantized checkpoint whole and servable?
 *
 * Checks: every layer shard's size and XXH64 against the resume manifest (when the resume
 * directory is there), and every shard's lwq_fingerprint against the manifest's run (without a
 * manifest: the shards against each other); every safetensors header (lwq_st_open validates
 * offsets, dtypes, sizes); every index entry resolves to a shard holding that tensor and every
 * shard tensor is indexed; the index against config.json: every decoder layer there with every
 * tensor its architecture plan names, quantized linears with their packed shapes and scales
 * (layout/arch/arch.h); hf_quant_config.json / config.json agree with the tensors (a quantized module
 * has its scales with the right dtype/shape; an excluded module has none); every scale is finite
 * and > 0, every E4M3 block scale positive and finite, no FP8 weight code NaN.
 *
 * What it proves (README, "Crashes, resume and verification"): the files are whole, consistent
 * with each other and with what the run recorded.  XXH64 is a checksum against accidents, not a
 * signature: whoever can write the output and the resume directory can make both agree. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/data/hash.h"
#include "engine/run/resume/manifest.h"
#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/format/export.h"
#include "layout/format/quant_formats.h"
#include "layout/checkpoint/safetensors.h"
#include "tools/commands.h"

typedef struct vstate {
    const char *dir;
    int problems;
    int quiet;
} vstate;

static void problem(vstate *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(vstate *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (v->problems < 50) {
        fprintf(stdout, "FAIL: ");
        vfprintf(stdout, fmt, ap);
        fputc('\n', stdout);
    }
    va_end(ap);
    v->problems++;
}

typedef struct shard {
    char name[64];
    lwq_st_file f;
    int ok;
} shard;

/* The shard's bytes, opened as every input is (core/sys/file.h: a FIFO put there since its header was
 * read is refused, not waited on); NULL when it cannot be. */
static FILE *open_shard(const char *path)
{
    lwq_error e = {0};
    int fd = lwq_file_open_regular(path, 0, NULL, &e);
    FILE *fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !fp)
        close(fd);
    return fp;
}

static int read_scalar(const char *path, const lwq_st_file *f, int i, float *out)
{
    const lwq_st_entry *t = &f->entries[i];
    if (t->dtype != LWQ_F32 || t->end - t->begin != 4)
        return -1;
    FILE *fp = open_shard(path);
    if (!fp)
        return -1;
    int ok = fseeko(fp, (off_t)(f->data_start + t->begin), SEEK_SET) == 0 && fread(out, 4, 1, fp) == 1;
    fclose(fp);
    return ok ? 0 : -1;
}

/* The first byte of tensor i that `bad` rejects: its index in *at (0 when none), 1; 0 when every
 * byte passes; -1 when the bytes cannot be read. */
static int first_bad_byte(const char *path, const lwq_st_file *f, int i, int (*bad)(uint8_t), uint64_t *at,
                          uint8_t *byte)
{
    const lwq_st_entry *t = &f->entries[i];
    uint64_t n = t->end - t->begin, done = 0;
    FILE *fp = open_shard(path);
    if (!fp)
        return -1;
    unsigned char buf[65536];
    int rc = fseeko(fp, (off_t)(f->data_start + t->begin), SEEK_SET) == 0 ? 0 : -1;
    while (rc == 0 && done < n) {
        size_t k = n - done < sizeof buf ? (size_t)(n - done) : sizeof buf;
        if (fread(buf, 1, k, fp) != k) {
            rc = -1;
            break;
        }
        for (size_t j = 0; j < k && rc == 0; j++)
            if (bad(buf[j])) {
                *at = done + j;
                *byte = buf[j];
                rc = 1;
            }
        done += k;
    }
    fclose(fp);
    return rc;
}

static int not_block_scale(uint8_t b) { return !lwq_e4m3_is_block_scale(b); }
static int fp8_nan(uint8_t b) { return lwq_e4m3_is_nan(b); }

/* A problem naming the first byte of tensor i of shard s that `bad` rejects ("<what>"). */
static void check_bytes(vstate *v, const shard *s, const char *path, int i, int (*bad)(uint8_t), const char *what)
{
    uint64_t at = 0;
    uint8_t b = 0;
    int r = first_bad_byte(path, &s->f, i, bad, &at, &b);
    if (r < 0)
        problem(v, "%s: %s cannot be read", s->name, s->f.entries[i].name);
    else if (r > 0)
        problem(v, "%s: %s[%llu] is %s (0x%02X)", s->name, s->f.entries[i].name, (unsigned long long)at, what, b);
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static void check_shard_tensors(vstate *v, shard *s)
{
    char path[PATH_MAX];
    lwq_error pe = {0};
    if (lwq_pathf(&pe, path, sizeof path, "%s/%s", v->dir, s->name) != 0) {
        problem(v, "%s", pe.msg);
        return;
    }
    for (int i = 0; i < s->f.n; i++) {
        const lwq_st_entry *t = &s->f.entries[i];
        if (ends_with(t->name, ".input_scale") || ends_with(t->name, ".weight_scale_2") || ends_with(t->name, ".k_scale") ||
            ends_with(t->name, ".v_scale") || (ends_with(t->name, ".weight_scale") && t->dtype == LWQ_F32)) {
            float x;
            if (read_scalar(path, &s->f, i, &x) != 0)
                problem(v, "%s: %s is not an F32 scalar", s->name, t->name);
            else if (!isfinite(x) || !(x > 0))
                problem(v, "%s: %s = %g; every scale must be finite and > 0", s->name, t->name, (double)x);
        } else if (ends_with(t->name, ".weight_scale") && t->dtype == LWQ_F8_E4M3) {
            check_bytes(v, s, path, i, not_block_scale, "a zero, negative or NaN E4M3 block scale");
        } else if (ends_with(t->name, ".weight") && t->dtype == LWQ_F8_E4M3) {
            check_bytes(v, s, path, i, fp8_nan, "an FP8 NaN code");
        }
    }
}

/* 1 when `file` holds `tensor`, or when `file` could not be opened (reported once already). */
static int find_in(const shard *sh, int ns, const char *file, const char *tensor)
{
    for (int i = 0; i < ns; i++)
        if (!strcmp(sh[i].name, file))
            return !sh[i].ok || lwq_st_find(&sh[i].f, tensor) >= 0;
    return 0;
}

static const lwq_st_entry *find_any(const shard *sh, int ns, const char *tensor)
{
    for (int i = 0; i < ns; i++) {
        int k = sh[i].ok ? lwq_st_find(&sh[i].f, tensor) : -1;
        if (k >= 0)
            return &sh[i].f.entries[k];
    }
    return NULL;
}

/* A quantized module must carry its scales; an excluded one must not. */
static void check_module(vstate *v, const shard *sh, int ns, const char *m, const char *algo)
{
    char n[512];
    snprintf(n, sizeof n, "%s.weight", m);
    const lwq_st_entry *w = find_any(sh, ns, n);
    if (!w) {
        problem(v, "config names quantized module %s but %s is in no shard", m, n);
        return;
    }
    /* W4A16_NVFP4 (weight-only): NVFP4's weight and weight scales, and no input_scale */
    int wo = !strcmp(algo, "W4A16_NVFP4"), nv = wo || !strcmp(algo, "NVFP4");
    if (!nv && strcmp(algo, "FP8")) {
        problem(v, "%s: unknown quant_algo %s", m, algo);
        return;
    }
    if (w->dtype != (nv ? LWQ_U8 : LWQ_F8_E4M3))
        problem(v, "%s is %s, expected %s for %s", n, lwq_dtype_name(w->dtype), nv ? "U8" : "F8_E4M3", algo);
    static const char *const nv_s[] = {"weight_scale", "weight_scale_2", "input_scale"};
    static const char *const f8_s[] = {"weight_scale", "input_scale"};
    if (wo) {
        snprintf(n, sizeof n, "%s.input_scale", m);
        if (find_any(sh, ns, n))
            problem(v, "%s is weight-only (W4A16_NVFP4) but %s is in a shard", m, n);
    }
    for (int i = 0; i < (wo ? 2 : nv ? 3 : 2); i++) {
        snprintf(n, sizeof n, "%s.%s", m, nv ? nv_s[i] : f8_s[i]);
        const lwq_st_entry *s = find_any(sh, ns, n);
        /* FP8 names a weight-only FP8 module too (Model Optimizer 0.47: a Nemotron-3-Nano lm_head),
         * which has no input_scale: the architecture check (check_architecture) requires one of
         * every FP8 decoder linear, where weight-only FP8 is never written */
        if (!s && !nv && i == 1)
            continue;
        if (!s)
            problem(v, "quantized module %s lacks %s", m, n);
        else if (nv && i == 0 && (s->dtype != LWQ_F8_E4M3 || s->ndim != 2 || w->ndim != 2 ||
                                  s->shape[0] != w->shape[0] || s->shape[1] * 8 != w->shape[1]))
            problem(v, "%s: expected F8_E4M3 [%lld, %lld]", n, (long long)w->shape[0], (long long)w->shape[1] / 8);
    }
}

static void check_configs(vstate *v, const shard *sh, int ns)
{
    char path[PATH_MAX], *txt;
    lwq_error e = {0};
    if (lwq_pathf(&e, path, sizeof path, "%s/hf_quant_config.json", v->dir) != 0 ||
        lwq_file_read_all(path, 64u << 20, &txt, NULL, &e) != 0) {
        problem(v, "%s", e.msg);
        return;
    }
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "quantization");
    const cJSON *algo = cJSON_GetObjectItemCaseSensitive(q, "quant_algo");
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(q, "exclude_modules");
    if (!cJSON_IsString(algo) || !cJSON_IsArray(ex) || !cJSON_GetObjectItemCaseSensitive(q, "kv_cache_quant_algo")) {
        problem(v, "hf_quant_config.json: quantization.quant_algo, kv_cache_quant_algo and exclude_modules are required");
        cJSON_Delete(j);
        return;
    }
    int mixed = !strcmp(algo->valuestring, "MIXED_PRECISION");
    if (!mixed && strcmp(algo->valuestring, "NVFP4") && strcmp(algo->valuestring, "FP8") &&
        strcmp(algo->valuestring, "W4A16_NVFP4"))
        problem(v, "hf_quant_config.json: unknown quant_algo %s", algo->valuestring);
    /* every module with a weight_scale must be quantized per the config, every excluded one not */
    for (int i = 0; i < ns; i++) {
        for (int k = 0; sh[i].ok && k < sh[i].f.n; k++) {
            const char *t = sh[i].f.entries[k].name;
            if (!ends_with(t, ".weight_scale"))
                continue;
            char m[512];
            snprintf(m, sizeof m, "%.*s", (int)(strlen(t) - strlen(".weight_scale")), t);
            const char *ma = algo->valuestring;
            if (mixed) {
                const cJSON *ql = cJSON_GetObjectItemCaseSensitive(q, "quantized_layers");
                const cJSON *a = cJSON_GetObjectItemCaseSensitive(lwq_export_listed(ql, m), "quant_algo");
                if (!cJSON_IsString(a)) {
                    problem(v, "%s carries scales but is not in quantized_layers", m);
                    continue;
                }
                ma = a->valuestring;
            }
            for (const cJSON *x = ex->child; x; x = x->next) {
                if (!cJSON_IsString(x))
                    continue;
                size_t L = strlen(x->valuestring);
                int glob = L && x->valuestring[L - 1] == '*';
                if ((!glob && !strcmp(x->valuestring, m)) || (glob && !strncmp(x->valuestring, m, L - 1)))
                    problem(v, "exclusion %s matches quantized module %s", x->valuestring, m);
            }
            check_module(v, sh, ns, m, ma);
        }
    }
    cJSON_Delete(j);
    if (lwq_pathf(&e, path, sizeof path, "%s/config.json", v->dir) != 0 ||
        lwq_file_read_all(path, 64u << 20, &txt, NULL, &e) != 0) {
        problem(v, "%s", e.msg);
        return;
    }
    j = cJSON_Parse(txt);
    free(txt);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(qc, "kv_cache_scheme");
    if (!cJSON_IsObject(qc) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(qc, "quant_method")))
        problem(v, "config.json: quantization_config with quant_method is missing");
    else if (kv && !cJSON_IsObject(kv) && !(cJSON_IsString(kv) && !strcmp(kv->valuestring, "NVFP4")))
        problem(v, "config.json: kv_cache_scheme must be an object (or \"NVFP4\", as Model Optimizer writes an "
                   "NVFP4 cache)");
    cJSON_Delete(j);
}

/* Every shard lwq wrote carries the run's fingerprint in its header: all of them the manifest's
 * (`want`, "" without a manifest: then the first one's).  A shard from another run, or one whose
 * header was edited and its checksum in the manifest updated with it, differs. */
static void check_fingerprints(vstate *v, const shard *sh, int ns, const char *want)
{
    const char *ref = want[0] ? want : NULL, *ref_from = "the manifest";
    for (int i = 0; i < ns; i++) {
        if (!sh[i].ok)
            continue;
        const char *fp = lwq_st_meta(&sh[i].f, "lwq_fingerprint");
        if (!fp) {
            if (want[0])
                problem(v, "%s has no lwq_fingerprint; the manifest's run is %s", sh[i].name, want);
            continue;
        }
        if (!ref) {
            ref = fp;
            ref_from = sh[i].name;
        } else if (strcmp(fp, ref)) {
            problem(v, "%s: lwq_fingerprint %s, but %s says the run is %s (a shard of another run, or an edited "
                    "header)", sh[i].name, fp, ref_from, ref);
        }
    }
}

/* The index against config.json: every decoder layer present with every tensor of its plan, in
 * the shape the plan and the quantization give (layout/arch/arch.h). */
static void check_architecture(vstate *v)
{
    lwq_ckpt ck;
    lwq_error e = {0};
    if (lwq_ckpt_open(v->dir, &ck, &e) != 0) {
        problem(v, "%s", e.msg);
        return;
    }
    lwq_arch_report r;
    int blocking = lwq_arch_check(&ck, &r, &e);
    if (blocking < 0) {
        problem(v, "%s", e.msg);
    } else {
        for (int i = 0; i < r.n; i++)
            if (r.v[i].kind == LWQ_ISSUE_MISSING || r.v[i].kind == LWQ_ISSUE_BAD_SHAPE)
                problem(v, "%s: layer %d: %s %s%s%s (against the %s plan of config.json)", v->dir, r.v[i].layer,
                        lwq_arch_issue_name(r.v[i].kind), r.v[i].name, r.v[i].detail[0] ? ": " : "", r.v[i].detail,
                        ck.cfg.model_type);
        lwq_arch_report_free(&r);
    }
    lwq_ckpt_free(&ck);
}

int lwq_cmd_verify(int argc, char **argv)
{
    vstate v = {0};
    const char *resume = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: lwq verify OUT_DIR [--resume-dir DIR]\n\n"
                   "Check a quantized checkpoint: shard checksums against the resume manifest (when present),\n"
                   "safetensors headers, index entries, configs against tensors, every scale finite and > 0.\n\n"
                   "exit status: 0 all good, 1 problems found (listed), 2 error\n");
            return LWQ_EXIT_OK;
        }
        if (!strcmp(argv[i], "--resume-dir") && i + 1 < argc)
            resume = argv[++i];
        else if (argv[i][0] != '-' && !v.dir)
            v.dir = argv[i];
        else {
            fprintf(stderr, "lwq: verify: unexpected argument %s\n", argv[i]);
            return LWQ_EXIT_ERR;
        }
    }
    if (!v.dir) {
        fprintf(stderr, "lwq: verify needs OUT_DIR\n");
        return LWQ_EXIT_ERR;
    }
    /* checksums from the resume manifest */
    char mpath[PATH_MAX];
    lwq_manifest m;
    lwq_error e = {0};
    int mrc = resume ? lwq_pathf(&e, mpath, sizeof mpath, "%s/" LWQ_RESUME_MANIFEST, resume)
                     : lwq_pathf(&e, mpath, sizeof mpath, "%s" LWQ_RESUME_SUFFIX "/" LWQ_RESUME_MANIFEST, v.dir);
    if (mrc == 0)
        mrc = lwq_manifest_load(mpath, &m, &e);
    int checked = 0;
    char want_fp[17] = "";
    if (mrc == 0) {
        lwq_hex64(m.fp.all, want_fp);
        for (int L = 0; L < m.committed; L++) {
            char name[40], p[PATH_MAX];
            lwq_shard_name(L, name);
            uint64_t h, b;
            lwq_error_clear(&e);
            if (lwq_pathf(&e, p, sizeof p, "%s/%s", v.dir, name) != 0 || lwq_file_xxh64(p, &h, &b, &e) != 0)
                problem(&v, "%s", e.msg);
            else if (h != m.layers[L].xxh64 || b != m.layers[L].bytes)
                problem(&v, "%s: checksum or size differs from the manifest (the file was changed or damaged)", p);
            checked++;
        }
        if (!m.complete)
            problem(&v, "%s: the run is not complete (%d/%d layers committed)", mpath, m.committed, m.num_layers);
        lwq_manifest_free(&m);
    } else if (mrc != LWQ_ENOENT) {
        problem(&v, "%s", e.msg);
    }
    char ipath[PATH_MAX], *txt;
    lwq_error_clear(&e);
    if (lwq_pathf(&e, ipath, sizeof ipath, "%s/model.safetensors.index.json", v.dir) != 0 ||
        lwq_file_read_all(ipath, 256u << 20, &txt, NULL, &e) != 0) {
        fprintf(stderr, "lwq: %s\n", e.msg);
        return LWQ_EXIT_ERR;
    }
    cJSON *idx = cJSON_Parse(txt);
    free(txt);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    if (!cJSON_IsObject(wm)) {
        fprintf(stderr, "lwq: %s: no weight_map object\n", ipath);
        cJSON_Delete(idx);
        return LWQ_EXIT_ERR;
    }
    /* the shards the index names */
    int ns = 0, cap = 64;
    shard *sh = calloc((size_t)cap, sizeof *sh);
    for (const cJSON *x = wm->child; x && sh; x = x->next) {
        if (!cJSON_IsString(x) || strchr(x->valuestring, '/') || strlen(x->valuestring) >= sizeof sh->name) {
            problem(&v, "index entry %s names an invalid file", x->string);
            continue;
        }
        int known = 0;
        for (int i = 0; i < ns && !known; i++)
            known = !strcmp(sh[i].name, x->valuestring);
        if (known)
            continue;
        if (ns == cap) {
            shard *n2 = realloc(sh, (size_t)(cap *= 2) * sizeof *sh);
            if (!n2)
                break;
            sh = n2;
        }
        memset(&sh[ns], 0, sizeof sh[ns]);
        snprintf(sh[ns].name, sizeof sh[ns].name, "%s", x->valuestring);
        char p[PATH_MAX];
        lwq_error_clear(&e);
        if (lwq_pathf(&e, p, sizeof p, "%s/%s", v.dir, sh[ns].name) == 0 && lwq_st_open(p, &sh[ns].f, &e) == 0)
            sh[ns].ok = 1;
        else
            problem(&v, "%s", e.msg);
        ns++;
    }
    if (!sh) {
        cJSON_Delete(idx);
        fprintf(stderr, "lwq: out of memory\n");
        return LWQ_EXIT_ERR;
    }
    for (const cJSON *x = wm->child; x; x = x->next)
        if (cJSON_IsString(x) && !find_in(sh, ns, x->valuestring, x->string))
            problem(&v, "index: %s -> %s, which does not hold it", x->string, x->valuestring);
    for (int i = 0; i < ns; i++)
        for (int k = 0; sh[i].ok && k < sh[i].f.n; k++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(wm, sh[i].f.entries[k].name);
            if (!cJSON_IsString(x) || strcmp(x->valuestring, sh[i].name))
                problem(&v, "%s holds %s, which the index does not map to it", sh[i].name, sh[i].f.entries[k].name);
        }
    for (int i = 0; i < ns; i++)
        if (sh[i].ok)
            check_shard_tensors(&v, &sh[i]);
    check_fingerprints(&v, sh, ns, want_fp);
    check_configs(&v, sh, ns);
    check_architecture(&v);
    int tensors = 0;
    for (int i = 0; i < ns; i++) {
        tensors += sh[i].ok ? sh[i].f.n : 0;
        if (sh[i].ok)
            lwq_st_free(&sh[i].f);
    }
    free(sh);
    cJSON_Delete(idx);
    if (v.problems) {
        printf("%s: %d problem(s)\n", v.dir, v.problems);
        return LWQ_EXIT_DIFF;
    }
    printf("%s: ok (%d shards, %d tensors, %s)\n", v.dir, ns, tensors,
           mrc == 0 ? "checksums match the manifest" : "no resume manifest: checksums not checked");
    (void)checked;
    return LWQ_EXIT_OK;
}
