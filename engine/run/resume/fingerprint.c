/* engine/run/resume/fingerprint.c — a run's identity (engine/run/resume/fingerprint.h). */
#include "engine/run/resume/fingerprint.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/sys/file.h"
#include "core/data/hash.h"
#include "io/durable.h"
#include "io/sys.h"
#include "kernels/backend.h"
#include "layout/arch/arch_qnames.h"

static int cmp_path(const void *a, const void *b)
{
    const lwq_st_file *x = a, *y = b;
    return strcmp(x->path, y->path);
}

int lwq_fingerprint_run(const lwq_ckpt *ck, int nlayers, const lwq_arch_layer *plans, lwq_quant_choice *const *choice,
                        const lwq_quantize_opts *o, const char *backend, lwq_fingerprint *f, lwq_error *e)
{
    memset(f, 0, sizeof *f);
    /* source: every shard's name, size and header bytes, in path order */
    lwq_st_file *files = malloc((size_t)ck->nfiles * sizeof *files);
    if (!files)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    memcpy(files, ck->files, (size_t)ck->nfiles * sizeof *files);
    qsort(files, (size_t)ck->nfiles, sizeof *files, cmp_path);
    lwq_xxh64_state s;
    lwq_xxh64_init(&s, 0);
    int rc = 0;
    for (int i = 0; i < ck->nfiles && rc == 0; i++) {
        const char *base = strrchr(files[i].path, '/');
        base = base ? base + 1 : files[i].path;
        lwq_xxh64_update(&s, base, strlen(base) + 1);
        lwq_xxh64_update(&s, &files[i].file_size, sizeof files[i].file_size);
        /* a rewritten file with the same layout (other weights, same header) is caught by its
         * modification time; hashing every weight byte would double the run's reads */
        struct stat fst;
        if (stat(files[i].path, &fst) == 0) {
            int64_t mt[2] = {(int64_t)fst.st_mtim.tv_sec, (int64_t)fst.st_mtim.tv_nsec};
            lwq_xxh64_update(&s, mt, sizeof mt);
        }
        char *hdr = malloc(files[i].data_start);
        int fd = lwq_durable_open_regular(files[i].path, 0, NULL, e);
        if (!hdr || fd < 0)
            rc = fd < 0 ? fd : lwq_errf(e, LWQ_ENOMEM, "%s: cannot read its header", files[i].path);
        else
            rc = lwq_durable_pread_all(fd, hdr, files[i].data_start, 0, files[i].path, e);
        if (rc == 0)
            lwq_xxh64_update(&s, hdr, files[i].data_start);
        free(hdr);
        if (fd >= 0)
            lwq_sys()->close(fd);
    }
    free(files);
    if (rc)
        return rc;
    f->part[LWQ_FP_SOURCE] = lwq_xxh64_digest(&s);

    char path[PATH_MAX], *txt;
    size_t len;
    if ((rc = lwq_pathf(e, path, sizeof path, "%s/config.json", o->model_dir)) != 0 ||
        (rc = lwq_file_read_all(path, 16u << 20, &txt, &len, e)) != 0)
        return rc;
    f->part[LWQ_FP_CONFIG] = lwq_xxh64(txt, len, 0);
    free(txt);

    /* the recipe as this run applies it: its name (calibration_report.json holds it), the KV cache
     * mode and every linear's resolved choice, reduced to what the quantizer reads; two recipes
     * that resolve alike (a preset and its Model Optimizer YAML) write the same bytes */
    lwq_xxh64_init(&s, 0);
    lwq_xxh64_update(&s, o->recipe->name, strlen(o->recipe->name) + 1);
    /* a weight-only lm_head: bit 8; its other forms (LWQ_LMHEAD_MSE, _SWEEP, _FP8, _F46) as
     * lm_head - LWQ_LMHEAD_MAX in bits 9-11, 0 for the dynamic one, so that runs from before them
     * keep their fingerprints */
    int32_t kv = (int32_t)o->recipe->kv | (o->recipe->lm_head ? 0x100 : 0) |
                 (o->recipe->lm_head > LWQ_LMHEAD_MAX ? (o->recipe->lm_head - LWQ_LMHEAD_MAX) << 9 : 0);
    /* a weight-only NVFP4 token embedding (LWQ_LMHEAD_* in bits 12-13; 0 without, so that other runs
     * keep their fingerprints) */
    char em[LWQ_ARCH_NAME_MAX];
    lwq_names_full(&ck->cfg.names, "model.embed_tokens", em, sizeof em);
    lwq_qnames emq; /* under its in-memory name (layout/arch/arch_qnames.h) */
    lwq_arch_qnames_module(ck->cfg.family, em, &emq);
    int embed = lwq_recipe_embedding_names(o->recipe, &emq, NULL);
    kv |= embed > 0 ? embed << 12 : 0;
    lwq_xxh64_update(&s, &kv, sizeof kv);
    for (int L = 0; L < nlayers; L++)
        for (int i = 0; i < plans[L].nlinears; i++) {
            const lwq_quant_choice *c = &choice[L][i];
            /* weight-only NVFP4 sets bit 8 of the format word, Four-over-Six bit 9, a recipe's own mse
             * range bit 10 (and its three values, unless [1.0, 1.5, 0.5]): other choices hash as they did */
            int32_t v[5] = {(int32_t)c->format | (c->weight_only ? 0x100 : 0) | (c->four_over_six ? 0x200 : 0) |
                                (c->mse_range ? 0x400 : 0),
                            0, 0, 0, 0};
            if (c->mse_range && !(c->mse_mult[0] == 1.0 && c->mse_mult[1] == 1.5 && c->mse_mult[2] == 0.5))
                lwq_xxh64_update(&s, c->mse_mult, sizeof c->mse_mult); /* [1.0, 1.5, 0.5] hashes as before */
            float ia = 0;
            double damp = 0;
            if (c->format == LWQ_QFMT_FP8) /* FP8 reads max / gptq / anything else = the mse search */
                v[1] = c->algo == LWQ_ALGO_MAX ? 0 : c->algo == LWQ_ALGO_GPTQ ? 2 : 1;
            else if (c->format == LWQ_QFMT_NVFP4)
                v[1] = (int32_t)c->algo;
            if (c->format == LWQ_QFMT_NVFP4)
                v[2] = c->algo == LWQ_ALGO_MSE && c->fp8_scale_sweep;
            if (c->format != LWQ_QFMT_NONE && c->algo == LWQ_ALGO_GPTQ) {
                damp = c->gptq_damp;
                v[4] = c->gptq_act_order;
            }
            if (c->format != LWQ_QFMT_NONE && c->has_input_amax) {
                v[3] = 1;
                ia = c->input_amax;
            }
            lwq_xxh64_update(&s, v, sizeof v);
            lwq_xxh64_update(&s, &ia, sizeof ia);
            lwq_xxh64_update(&s, &damp, sizeof damp);
        }
    f->part[LWQ_FP_RECIPE] = lwq_xxh64_digest(&s);

    lwq_xxh64_init(&s, 0);
    lwq_xxh64_update(&s, &o->calib->n, sizeof o->calib->n);
    lwq_xxh64_update(&s, &o->calib->pad_id, sizeof o->calib->pad_id);
    for (int i = 0; i < o->calib->n; i++) {
        lwq_xxh64_update(&s, &o->calib->len[i], sizeof o->calib->len[i]);
        lwq_xxh64_update(&s, o->calib->ids[i], (size_t)o->calib->len[i] * sizeof(int32_t));
    }
    f->part[LWQ_FP_CALIB] = lwq_xxh64_digest(&s);

    /* CPU results depend neither on the thread count nor on the batching (kernels/cpu: a
     * token's result is computed the same way whatever shares its GEMM call), so the batch size
     * is part of the run's identity only when padded rows are counted or on another backend
     * (cuBLAS picks its kernels by shape); a resume may then change it and still match */
    const char *bn = backend;
    const int batch_matters = o->include_padding || strcmp(bn, "cpu") != 0;
    int64_t batching[2] = {batch_matters ? o->batch_size : 0, o->include_padding};
    f->part[LWQ_FP_BATCHING] = lwq_xxh64(batching, sizeof batching, 0);
    int64_t opts[2] = {o->all_experts, o->qdq_next};
    f->part[LWQ_FP_OPTIONS] = lwq_xxh64(opts, sizeof opts, 0);
    /* the CPU's BF16 dot paths (amx, avx512bf16) sum BF16 x BF16 products in an order of their
     * own, so a BF16 model's forward, and its input scales, differ from the FMA paths': there the
     * path is part of the identity, so that a resume or a rank on another path is refused instead
     * of mixing two kinds of layers.  F32 models and the FMA paths keep the bare backend name
     * (one set of bytes on every CPU, as before). */
    const char *cls = !strcmp(bn, "cpu") && ck->cfg.dtype != LWQ_F32 ? lwq_backend_cpu_bytes() : "fma";
    char bk[64];
    snprintf(bk, sizeof bk, strcmp(cls, "fma") ? "%s+%s" : "%s", bn, cls);
    f->part[LWQ_FP_BACKEND] = lwq_xxh64(bk, strlen(bk), 0);
    /* format 2: Hessians are fixed-point sums of per-sequence partials (core/data/fixsum.h); the
     * GPTQ and local_hessian bytes of format 1 can differ, so its resume state is not mixed in */
    const char *ver = "lwq-format-2";
    f->part[LWQ_FP_VERSION] = lwq_xxh64(ver, strlen(ver), 0);
    lwq_fp_finish(f);
    return 0;
}

