/* engine/autoq/autoq_state.c — pass 1's resume state: its fingerprint, scores.json and the
 * alternating state files (engine/autoq/autoq_internal.h), and scores.json's records checked
 * against the model (lwq_aq_scores_check, at the end).
 *
 * Commit of layer L, each step durable before the next (io/durable.h):
 *   1. the state after L (the calibration boundary entering L + 1, then the kl streams) into the
 *      state file scores.json does not name (tmp, fsync, rename, fsync dir);
 *   2. scores.json naming L + 1 committed layers and that state file with its size and XXH64.
 * Invariant: scores.json never names a state file that is not durable; the other one may be
 * half-written, and nothing reads it.  Scores are written with 17 significant digits, which
 * strtod reads back to the same double, so a resumed search solves the same knapsack. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/data/dtype.h"
#include "core/sys/file.h"
#include "core/data/hash.h"
#include "engine/autoq/autoq_internal.h"
#include "engine/autoq/head/autoq_head.h"
#include "engine/quant/qlayer.h"
#include "engine/run/resume/fingerprint.h"
#include "io/durable.h"
#include "layout/checkpoint/srcfmt.h"

#define SCORES_MAX_BYTES (64u << 20)
#define AQ_VERSION 1

const char *lwq_aq_score_name(lwq_aq_score s) { return s == LWQ_AQ_SCORE_KL ? "kl" : "layer"; }

int lwq_aq_score_samples(const lwq_autoq_opts *o)
{
    int n = o->q.calib->n;
    if (o->score_size > 0)
        return o->score_size < n ? o->score_size : n;
    return (n + 7) / 8;
}

int lwq_aq_fingerprint(const lwq_autoq_opts *o, const lwq_ckpt *ck, const lwq_arch_layer *plans, const char *backend,
                       lwq_fingerprint *fp, lwq_error *e)
{
    int N = ck->cfg.num_hidden_layers, rc = 0;
    lwq_quant_choice **ch = calloc((size_t)(N ? N : 1), sizeof *ch);
    if (!ch)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int L = 0; L < N && rc == 0; L++) {
        if (!(ch[L] = calloc((size_t)(plans[L].nlinears ? plans[L].nlinears : 1), sizeof **ch))) {
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
            break;
        }
        for (int i = 0; i < plans[L].nlinears; i++)
            ch[L][i] = lwq_qlayer_choice(o->q.recipe, &plans[L], i);
    }
    if (rc == 0)
        rc = lwq_fingerprint_run(ck, N, plans, ch, &o->q, backend, fp, e);
    for (int L = 0; L < N; L++)
        free(ch[L]);
    free(ch);
    if (rc)
        return rc;
    /* what the search adds: its candidate formats, score and the samples it scores */
    int64_t aq[6] = {o->formats[0], o->formats[1], o->formats[2], o->score, o->score_size, AQ_VERSION};
    lwq_xxh64_state s;
    lwq_xxh64_init(&s, fp->part[LWQ_FP_OPTIONS]);
    lwq_xxh64_update(&s, aq, sizeof aq);
    /* weight-only NVFP4 among the candidates: mixed in only then, so every search without it
     * keeps the fingerprint (and resumes) it had */
    int64_t w4a16 = o->formats[LWQ_AQ_W4A16];
    if (w4a16)
        lwq_xxh64_update(&s, &w4a16, sizeof w4a16);
    /* NVFP4 with its own weight algorithm: likewise, with its index so that it differs from the above */
    int64_t mse[2] = {LWQ_AQ_NVFP4_MSE, o->formats[LWQ_AQ_NVFP4_MSE]};
    if (mse[1])
        lwq_xxh64_update(&s, mse, sizeof mse);
    int64_t f46[2] = {LWQ_AQ_W4A16_F46, o->formats[LWQ_AQ_W4A16_F46]};
    if (f46[1])
        lwq_xxh64_update(&s, f46, sizeof f46);
    /* candidates with their own algorithms: mixed in only where a base choice's algorithm is not max
     * (elsewhere it changes nothing) */
    int64_t own[2] = {-1, o->own_algos};
    for (int L = 0; own[1] && L < N && own[0] < 0; L++)
        for (int i = 0; i < plans[L].nlinears && own[0] < 0; i++)
            if (lwq_qlayer_choice(o->q.recipe, &plans[L], i).algo != LWQ_ALGO_MAX)
                own[0] = 1;
    if (own[0] > 0)
        lwq_xxh64_update(&s, own, sizeof own);
    int64_t bb = (int64_t)(o->baseline_bits * 1e6);
    if (bb)
        lwq_xxh64_update(&s, &bb, sizeof bb);
    /* module_search_spaces: likewise mixed in only when there are some */
    for (int k = 0; k < o->nspaces; k++) {
        const lwq_recipe_aq_space *sp = &o->spaces[k];
        int64_t v[6] = {k, sp->npatterns, sp->nvfp4, sp->fp8, sp->w4a16, sp->allow_no_quant};
        lwq_xxh64_update(&s, v, sizeof v);
        int64_t vm[2] = {LWQ_AQ_NVFP4_MSE, sp->nvfp4_mse};
        if (vm[1])
            lwq_xxh64_update(&s, vm, sizeof vm);
        int64_t vf[2] = {LWQ_AQ_W4A16_F46, sp->w4a16_f46};
        if (vf[1])
            lwq_xxh64_update(&s, vf, sizeof vf);
        for (int j = 0; j < sp->npatterns; j++)
            lwq_xxh64_update(&s, sp->pattern[j], strlen(sp->pattern[j]) + 1);
        /* the first four candidates as before the others existed, then each only when it is one */
        if (k == o->nspaces - 1) {
            lwq_xxh64_update(&s, o->unmatched, LWQ_AQ_NVFP4_MSE + (o->unmatched[LWQ_AQ_NVFP4_MSE] != 0));
            if (o->unmatched[LWQ_AQ_W4A16_F46])
                lwq_xxh64_update(&s, f46, sizeof f46);
        }
    }
    /* a fixed baseline (its rules are in the base choices above): the unmatched groups fixed, not searched */
    int64_t baseline = o->baseline;
    if (baseline)
        lwq_xxh64_update(&s, &baseline, sizeof baseline);
    fp->part[LWQ_FP_OPTIONS] = lwq_xxh64_digest(&s);
    lwq_fp_finish(fp);
    return 0;
}

void lwq_aq_scores_free(lwq_aq_scores *s)
{
    for (int L = 0; s->rec && L <= s->nlayers; L++) /* rec[nlayers]: lm_head's */
        free(s->rec[L].g);
    free(s->rec);
    memset(s, 0, sizeof *s);
}

/* ---- scores.json ------------------------------------------------------------------------------ */

static void put_num(cJSON *o, const char *k, double v)
{
    char b[40];
    snprintf(b, sizeof b, "%.17g", v);
    cJSON_AddItemToObject(o, k, cJSON_CreateRaw(b));
}

static void put_u64(cJSON *o, const char *k, uint64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    cJSON_AddItemToObject(o, k, cJSON_CreateRaw(b));
}

static int get_num(const cJSON *o, const char *k, double *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble < 0)
        return -1;
    *v = j->valuedouble;
    return 0;
}

static cJSON *render(const lwq_aq_scores *s)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "lwq-auto-quantize-scores");
    cJSON_AddNumberToObject(root, "version", AQ_VERSION);
    lwq_json_put_hex(root, "fingerprint", s->fp.all);
    cJSON *in = cJSON_AddObjectToObject(root, "inputs");
    for (int i = 0; i < LWQ_FP_PARTS; i++) {
        char k[8];
        snprintf(k, sizeof k, "p%d", i);
        lwq_json_put_hex(in, k, s->fp.part[i]);
    }
    cJSON_AddStringToObject(root, "score", lwq_aq_score_name(s->score));
    cJSON_AddNumberToObject(root, "num_layers", s->nlayers);
    cJSON_AddNumberToObject(root, "committed", s->committed);
    cJSON_AddBoolToObject(root, "complete", s->complete);
    put_u64(root, "tail_bytes", s->tail_bytes);
    cJSON *st = cJSON_AddObjectToObject(root, "state");
    cJSON_AddStringToObject(st, "file", s->state_file);
    put_u64(st, "bytes", s->state_bytes);
    lwq_json_put_hex(st, "xxh64", s->state_xxh64);
    cJSON_AddNumberToObject(st, "streams", s->nstreams);
    cJSON *ls = cJSON_AddArrayToObject(root, "layers");
    /* the layers, then lm_head's record ("head", layer -1) once it is measured */
    for (int L = 0; L < s->committed + (s->has_head && s->complete); L++) {
        const lwq_aq_lrec *r = &s->rec[L < s->committed ? L : s->nlayers];
        cJSON *l = cJSON_CreateObject();
        cJSON_AddNumberToObject(l, "layer", L < s->committed ? L : -1);
        put_u64(l, "tokens", (uint64_t)r->tokens);
        put_num(l, "out_sq", r->out_sq);
        put_num(l, "gain", r->gain);
        put_u64(l, "fixed_bytes", r->fixed_bytes);
        put_u64(l, "other_bytes", r->other_bytes);
        put_u64(l, "linear_elements", r->linear_elements);
        cJSON *gs = cJSON_AddArrayToObject(l, "groups");
        for (int k = 0; k < r->ngroups; k++) {
            const lwq_aq_gscore *g = &r->g[k];
            cJSON *go = cJSON_CreateObject();
            cJSON_AddStringToObject(go, "kind", lwq_aq_kind_name(g->kind));
            cJSON_AddStringToObject(go, "first", g->first);
            cJSON_AddNumberToObject(go, "members", g->nmembers);
            put_u64(go, "elements", g->elements);
            cJSON *fs = cJSON_AddObjectToObject(go, "formats");
            for (int f = 0; f < LWQ_AQ_FORMATS; f++) {
                if (!g->allowed[f])
                    continue;
                cJSON *fo = cJSON_AddObjectToObject(fs, lwq_aq_format_name(f));
                put_u64(fo, "bytes", g->cost[f]);
                put_num(fo, "err", g->err[f]);
                put_num(fo, "kl", g->kl[f]);
            }
            cJSON_AddItemToArray(gs, go);
        }
        if (L < s->committed)
            cJSON_AddItemToArray(ls, l);
        else
            cJSON_AddItemToObject(root, "head", l);
    }
    return root;
}

int lwq_aq_scores_save(const char *path, const lwq_aq_scores *s, lwq_error *e)
{
    cJSON *root = render(s);
    char *txt = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!txt)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    int rc = lwq_durable_write_file(path, txt, strlen(txt), e);
    free(txt);
    return rc;
}

static int parse_group(const cJSON *go, lwq_aq_gscore *g)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(go, "kind");
    const cJSON *first = cJSON_GetObjectItemCaseSensitive(go, "first");
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(go, "members");
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(go, "formats");
    if (!cJSON_IsString(kind) || !cJSON_IsString(first) || strlen(first->valuestring) >= sizeof g->first ||
        !cJSON_IsNumber(mem) || mem->valuedouble < 1 || mem->valuedouble > 1e6 || !cJSON_IsObject(fs) ||
        lwq_json_get_u64(go, "elements", &g->elements))
        return -1;
    g->kind = LWQ_AQ_KINDS;
    for (int k = 0; k < LWQ_AQ_KINDS; k++)
        if (!strcmp(kind->valuestring, lwq_aq_kind_name((lwq_aq_kind)k)))
            g->kind = (lwq_aq_kind)k;
    if (g->kind == LWQ_AQ_KINDS)
        return -1;
    snprintf(g->first, sizeof g->first, "%s", first->valuestring);
    g->nmembers = (int)mem->valuedouble;
    for (const cJSON *fo = fs->child; fo; fo = fo->next) {
        int f = fo->string ? lwq_aq_format_parse(fo->string) : -1;
        if (f < 0 || g->allowed[f] ||
            lwq_json_get_u64(fo, "bytes", &g->cost[f]) || get_num(fo, "err", &g->err[f]) ||
            get_num(fo, "kl", &g->kl[f]))
            return -1;
        g->allowed[f] = 1;
    }
    return g->allowed[LWQ_QFMT_NONE] || lwq_aq_nquantized(g->allowed) ? 0 : -1;
}

static int parse_layer(const cJSON *l, int L, lwq_aq_lrec *r)
{
    const cJSON *idx = cJSON_GetObjectItemCaseSensitive(l, "layer");
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(l, "groups");
    uint64_t tok;
    if (!cJSON_IsNumber(idx) || idx->valuedouble != L || lwq_json_get_u64(l, "tokens", &tok) ||
        get_num(l, "out_sq", &r->out_sq) || get_num(l, "gain", &r->gain) ||
        lwq_json_get_u64(l, "fixed_bytes", &r->fixed_bytes) ||
        lwq_json_get_u64(l, "other_bytes", &r->other_bytes) ||
        lwq_json_get_u64(l, "linear_elements", &r->linear_elements) || !cJSON_IsArray(gs))
        return -1;
    r->tokens = (int64_t)tok;
    int n = cJSON_GetArraySize(gs);
    if (n > LWQ_AQ_KINDS)
        return -1;
    r->g = calloc((size_t)(n ? n : 1), sizeof *r->g);
    if (!r->g)
        return -2;
    r->ngroups = n;
    int k = 0;
    for (const cJSON *go = gs->child; go; go = go->next, k++)
        if (parse_group(go, &r->g[k]))
            return -1;
    return 0;
}

int lwq_aq_scores_load(const char *path, lwq_aq_scores *s, lwq_error *e)
{
    memset(s, 0, sizeof *s);
    cJSON *root;
    int rc = lwq_json_state_load(path, SCORES_MAX_BYTES, &root, e);
    if (rc)
        return rc;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "score");
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(root, "complete");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "state");
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "layers");
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(root, "head");
    uint64_t nl = 0, cm = 0, ns = 0;
    const char *bad = NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "lwq-auto-quantize-scores") || !cJSON_IsNumber(ver) ||
        ver->valuedouble != AQ_VERSION)
        bad = "format or version";
    else if (lwq_json_get_hex(root, "fingerprint", &s->fp.all) || !cJSON_IsObject(in))
        bad = "fingerprint";
    for (int i = 0; !bad && i < LWQ_FP_PARTS; i++) {
        char k[8];
        snprintf(k, sizeof k, "p%d", i);
        if (lwq_json_get_hex(in, k, &s->fp.part[i]))
            bad = "inputs";
    }
    if (bad) {
    } else if (!cJSON_IsString(sc) || (strcmp(sc->valuestring, "layer") && strcmp(sc->valuestring, "kl")))
        bad = "score";
    else if (lwq_json_get_u64(root, "num_layers", &nl) || nl < 1 || nl > 100000)
        bad = "num_layers";
    else if (lwq_json_get_u64(root, "committed", &cm) || cm > nl)
        bad = "committed";
    else if (!cJSON_IsBool(cp) || lwq_json_get_u64(root, "tail_bytes", &s->tail_bytes))
        bad = "complete / tail_bytes";
    else if (!cJSON_IsObject(st) || lwq_json_get_u64(st, "bytes", &s->state_bytes) ||
             lwq_json_get_hex(st, "xxh64", &s->state_xxh64) || lwq_json_get_u64(st, "streams", &ns) || ns > 1000000)
        bad = "state";
    else if (!cJSON_IsArray(ls) || (uint64_t)cJSON_GetArraySize(ls) != cm)
        bad = "layers";
    if (!bad) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(st, "file");
        if (!cJSON_IsString(f) || (f->valuestring[0] && strcmp(f->valuestring, "state-0.bin") &&
                                   strcmp(f->valuestring, "state-1.bin")))
            bad = "state.file";
        else
            snprintf(s->state_file, sizeof s->state_file, "%s", f->valuestring);
    }
    if (!bad) {
        s->score = !strcmp(sc->valuestring, "kl") ? LWQ_AQ_SCORE_KL : LWQ_AQ_SCORE_LAYER;
        s->nlayers = (int)nl;
        s->committed = (int)cm;
        s->complete = cJSON_IsTrue(cp);
        s->nstreams = (int)ns;
        if (!(s->rec = calloc(nl + 1, sizeof *s->rec))) {
            cJSON_Delete(root);
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
        }
        int L = 0;
        for (const cJSON *l = ls->child; l && !bad; l = l->next, L++) {
            int r = parse_layer(l, L, &s->rec[L]);
            if (r == -2) {
                cJSON_Delete(root);
                lwq_aq_scores_free(s);
                return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
            }
            if (r)
                bad = "a layer record";
        }
        if (!bad && hd) { /* lm_head's record: in a complete file only, one group of kind lm_head */
            int r = parse_layer(hd, -1, &s->rec[nl]);
            s->has_head = 1;
            if (r == -2) {
                cJSON_Delete(root);
                lwq_aq_scores_free(s);
                return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
            }
            if (r || !s->complete || s->rec[nl].ngroups != 1 || s->rec[nl].g[0].kind != LWQ_AQ_HEAD)
                bad = "the lm_head record";
        }
    }
    cJSON_Delete(root);
    if (bad) {
        lwq_aq_scores_free(s);
        return lwq_errf(e, LWQ_ESTATE, "%s: %s is missing or malformed (damaged resume state: remove the resume "
                        "directory to start over)", path, bad);
    }
    return 0;
}

/* ---- state files ------------------------------------------------------------------------------ */

int lwq_aq_state_write(const char *dir, lwq_aq_scores *s, const void *const *parts, const uint64_t *bytes, int nparts,
                       lwq_error *e)
{
    char name[32], path[PATH_MAX];
    snprintf(name, sizeof name, LWQ_AQ_STATE_FMT, strcmp(s->state_file, "state-0.bin") ? 0 : 1);
    int rc = lwq_pathf(e, path, sizeof path, "%s/%s", dir, name);
    if (rc)
        return rc;
    lwq_durable_file f;
    if ((rc = lwq_durable_open(&f, path, e)) != 0)
        return rc;
    lwq_xxh64_state h;
    lwq_xxh64_init(&h, 0);
    uint64_t total = 0;
    for (int i = 0; i < nparts && rc == 0; i++) {
        rc = lwq_durable_append(&f, parts[i], (size_t)bytes[i], e);
        lwq_xxh64_update(&h, parts[i], (size_t)bytes[i]);
        total += bytes[i];
    }
    if (rc) {
        lwq_durable_abort(&f);
        return rc;
    }
    if ((rc = lwq_durable_commit(&f, e)) != 0)
        return rc;
    snprintf(s->state_file, sizeof s->state_file, "%s", name);
    s->state_bytes = total;
    s->state_xxh64 = lwq_xxh64_digest(&h);
    return 0;
}

int lwq_aq_state_read(const char *dir, const lwq_aq_scores *s, void *const *parts, const uint64_t *bytes, int nparts,
                      lwq_error *e)
{
    char path[PATH_MAX];
    int rc = lwq_pathf(e, path, sizeof path, "%s/%s", dir, s->state_file);
    if (rc)
        return rc;
    uint64_t total = 0;
    for (int i = 0; i < nparts; i++)
        total += bytes[i];
    if (total != s->state_bytes)
        return lwq_errf(e, LWQ_ESTATE, "%s: the search expects %" PRIu64 " bytes of state, scores.json names %" PRIu64
                        " (damaged resume state: remove the resume directory to start over)", path, total,
                        s->state_bytes);
    char *buf;
    size_t len;
    if ((rc = lwq_durable_read_file(path, (size_t)total + 1, &buf, &len, e)) != 0)
        return rc;
    if (len != total || lwq_xxh64(buf, len, 0) != s->state_xxh64) {
        free(buf);
        return lwq_errf(e, LWQ_ESTATE, "%s: %zu bytes, checksum %s; scores.json expects %" PRIu64 " bytes and its "
                        "checksum (damaged resume state: remove the resume directory to start over)", path, len,
                        len == total ? "differs" : "not checked", total);
    }
    uint64_t off = 0;
    for (int i = 0; i < nparts; i++) {
        memcpy(parts[i], buf + off, (size_t)bytes[i]);
        off += bytes[i];
    }
    free(buf);
    return 0;
}

/* ---- the records checked against the model -------------------------------------------------
 *
 * A scores file is untrusted input (--auto-quantize-scores FILE, or the resume directory's own):
 * a record whose groups are shifted, or whose byte costs are edited, would make the knapsack
 * meet the budget on paper and write more.  So every committed layer's groups are rebuilt from
 * the model's plan, the base recipe and the formats (lwq_aq_layer_init) and compared one by one,
 * and every byte count the solve uses is recomputed here from shapes alone and compared:
 *   NVFP4   weight (out, in/2) U8 + weight_scale (out, in/16) E4M3 + weight_scale_2 + input_scale
 *           (F32 scalars): out*in*9/16 + 8 bytes per linear (engine/quant/qlayer.c, emit_nvfp4);
 *   FP8     weight out*in E4M3 + weight_scale + input_scale: out*in + 8 (emit_fp8; a conv1d's
 *           [channels, 1, kernel] is channels*kernel);
 *   none    the source weight as the quantizer reads it: its bytes in the checkpoint, or for an
 *           FP8-block / MXFP4 source tensor out*in in the dequantized dtype (layout/checkpoint/srcfmt.h);
 *   a layer's fixed bytes (linears in no group, at the base recipe's format), its other bytes
 *           (every other tensor of its shard: the source's after dequantization, plus the FP8
 *           k/v scales), its linear elements, and the tail's bytes.
 * They are exact, and cheap (the checkpoint's table, no tensor read).  The check also runs on the
 * records pass 1 just made, so a change to what lwq writes that this file does not follow fails
 * every search at once instead of mis-sizing some. */

/* Bytes of source tensor `name` as the quantizer receives it (dequantized when packed), 0 when
 * the checkpoint has no such tensor; *aux = 1 for a tensor that only serves another's
 * dequantization (dropped from the layer). */
static uint64_t src_bytes(const lwq_ckpt *ck, const lwq_srcfmt *sf, const char *name, int *aux)
{
    *aux = 0;
    char base[LWQ_ARCH_NAME_MAX + 32];
    if (lwq_srcfmt_is_aux(ck, name)) {
        *aux = 1;
        /* the X_blocks half stands for X; X_scales and X_scale_inv vanish */
        if (!lwq_srcfmt_strip_suffix(name, LWQ_SRCFMT_BLOCKS, base, sizeof base))
            return 0;
        int nd;
        int64_t sh[LWQ_ST_MAX_DIMS];
        if (!lwq_srcfmt_packed_shape(ck, base, &nd, sh))
            return 0;
        uint64_t n = 1;
        for (int i = 0; i < nd; i++)
            n *= (uint64_t)sh[i];
        *aux = 0;
        return n * lwq_dtype_size(sf->out);
    }
    const lwq_ckpt_tensor *t = lwq_ckpt_find(ck, name);
    if (!t) {
        int nd;
        int64_t sh[LWQ_ST_MAX_DIMS];
        if (!lwq_srcfmt_packed_shape(ck, name, &nd, sh))
            return 0;
        uint64_t n = 1;
        for (int i = 0; i < nd; i++)
            n *= (uint64_t)sh[i];
        return n * lwq_dtype_size(sf->out);
    }
    if (t->dtype == LWQ_F8_E4M3 && sf->kind == LWQ_SRCFMT_FP8_BLOCK) {
        snprintf(base, sizeof base, "%s" LWQ_SRCFMT_SCALE_INV, name);
        if (lwq_ckpt_find(ck, base)) {
            uint64_t n = 1;
            for (int i = 0; i < t->ndim; i++)
                n *= (uint64_t)t->shape[i];
            return n * lwq_dtype_size(sf->out);
        }
    }
    return t->nbytes;
}

static uint64_t weight_src_bytes(const lwq_ckpt *ck, const lwq_srcfmt *sf, const lwq_arch_linear *l)
{
    char name[LWQ_ARCH_NAME_MAX + 16];
    int aux;
    snprintf(name, sizeof name, "%s.weight", l->name);
    return src_bytes(ck, sf, name, &aux);
}

/* What lwq writes for linear l's weight and scales in candidate f: NVFP4 packed weight, E4M3
 * block scales, weight_scale_2 and input_scale (W4A16: no input_scale; NVFP4_MSE as NVFP4); FP8
 * weight and two scalars; else the source weight. */
static uint64_t linear_cost(const lwq_ckpt *ck, const lwq_srcfmt *sf, const lwq_arch_linear *l, int f)
{
    uint64_t q = lwq_aq_quant_bytes((uint64_t)l->out_features * (uint64_t)l->in_features, f);
    return q ? q : weight_src_bytes(ck, sf, l);
}

static int mismatch(lwq_error *e, const char *file, int L, const char *what, uint64_t found, uint64_t want)
{
    return lwq_errf(e, LWQ_ESTATE, "%s: layer %d: %s is %" PRIu64 " in the file, %" PRIu64 " for this model and "
                    "recipe (the scores do not belong to this model, or were edited: remove the file, or the resume "
                    "directory it is in, to score again)", file, L, what, found, want);
}

static int check_layer(const lwq_autoq_opts *o, const lwq_ckpt *ck, const lwq_srcfmt *sf, const lwq_arch_layer *p,
                       const lwq_aq_lrec *r, int L, const char *file, lwq_error *e)
{
    lwq_aq_layer A;
    int rc = lwq_aq_layer_build(&A, p, o->q.recipe, o, e);
    if (rc)
        return rc;
    char what[LWQ_ARCH_NAME_MAX + 96];
    if (A.ngroups != r->ngroups)
        rc = mismatch(e, file, L, "the number of search groups", (uint64_t)r->ngroups, (uint64_t)A.ngroups);
    for (int k = 0; rc == 0 && k < A.ngroups; k++) {
        const lwq_aq_group *g = &A.g[k];
        const lwq_aq_gscore *h = &r->g[k];
        const char *first = p->linears[g->lin[0]].name;
        if (h->kind != g->kind || strcmp(h->first, first)) {
            rc = lwq_errf(e, LWQ_ESTATE, "%s: layer %d: search group %d is %s (first module %s) in the file, %s (%s) "
                          "in this model (the scores do not belong to this model, or were edited: remove the file, "
                          "or the resume directory it is in, to score again)", file, L, k, lwq_aq_kind_name(h->kind),
                          h->first, lwq_aq_kind_name(g->kind), first);
            break;
        }
        snprintf(what, sizeof what, "group %s (%s): its modules", lwq_aq_kind_name(g->kind), first);
        if (h->nmembers != g->n) {
            rc = mismatch(e, file, L, what, (uint64_t)h->nmembers, (uint64_t)g->n);
            break;
        }
        snprintf(what, sizeof what, "group %s (%s): its weight elements", lwq_aq_kind_name(g->kind), first);
        if (h->elements != g->elements) {
            rc = mismatch(e, file, L, what, h->elements, g->elements);
            break;
        }
        for (int f = 0; rc == 0 && f < LWQ_AQ_FORMATS; f++) {
            const char *fn = lwq_aq_format_name(f);
            snprintf(what, sizeof what, "group %s (%s): candidate %s", lwq_aq_kind_name(g->kind), first, fn);
            if (h->allowed[f] != g->allowed[f]) {
                rc = mismatch(e, file, L, what, h->allowed[f], g->allowed[f]);
                break;
            }
            if (!g->allowed[f])
                continue;
            uint64_t want = 0;
            for (int m = 0; m < g->n; m++)
                want += linear_cost(ck, sf, &p->linears[g->lin[m]], f);
            snprintf(what, sizeof what, "group %s (%s): the bytes of %s", lwq_aq_kind_name(g->kind), first, fn);
            if (h->cost[f] != want)
                rc = mismatch(e, file, L, what, h->cost[f], want);
        }
    }
    /* what no choice changes */
    uint64_t fixed = 0, lin_src = 0, elements = 0, layer_src = 0;
    int has_attn = 0;
    for (int i = 0; rc == 0 && i < p->nlinears; i++) {
        const lwq_arch_linear *l = &p->linears[i];
        elements += (uint64_t)l->out_features * (uint64_t)l->in_features;
        lin_src += weight_src_bytes(ck, sf, l);
        if (A.group_of[i] < 0)
            fixed += weight_src_bytes(ck, sf, l)
                         ? linear_cost(ck, sf, l, A.base[i].weight_only ? LWQ_AQ_W4A16 : (int)A.base[i].format)
                         : 0;
        has_attn |= l->role == LWQ_ROLE_K || l->role == LWQ_ROLE_KV_A;
    }
    if (rc == 0 && L < ck->nlayers)
        for (int k = 0; k < ck->layers[L].n; k++) {
            int aux;
            uint64_t b = src_bytes(ck, sf, ck->tensors[ck->layers[L].idx[k]].name, &aux);
            layer_src += aux ? 0 : b;
        }
    uint64_t other = layer_src - lin_src + (o->q.recipe->kv == LWQ_KV_FP8 && has_attn ? 8 : 0);
    if (rc == 0 && r->linear_elements != elements)
        rc = mismatch(e, file, L, "the linear weight elements", r->linear_elements, elements);
    if (rc == 0 && r->fixed_bytes != fixed)
        rc = mismatch(e, file, L, "the bytes of the linears in no search group", r->fixed_bytes, fixed);
    if (rc == 0 && r->other_bytes != other)
        rc = mismatch(e, file, L, "the bytes of the layer's other tensors", r->other_bytes, other);
    lwq_aq_layer_free(&A);
    return rc;
}

uint64_t lwq_aq_tail_bytes(const lwq_autoq_opts *o, const lwq_ckpt *ck)
{
    uint8_t allowed[LWQ_AQ_FORMATS];
    lwq_error ig = {0};
    int head = lwq_aq_head_allowed(o, ck, allowed, &ig) > 0; /* its errors are the search's, reported there */
    char wn[LWQ_ARCH_NAME_MAX + 8];
    lwq_names_full(&ck->cfg.names, "lm_head.weight", wn, sizeof wn);
    uint64_t tail = 0;
    for (int i = 0; i < ck->ntensors; i++)
        if ((ck->tensors[i].layer < 0 || ck->tensors[i].layer >= ck->cfg.num_hidden_layers) &&
            !(head && !strcmp(ck->tensors[i].name, wn)))
            tail += ck->tensors[i].nbytes;
    return tail;
}

int lwq_aq_scores_check(const lwq_autoq_opts *o, const lwq_ckpt *ck, const lwq_arch_layer *plans,
                        const lwq_aq_scores *s, const char *file, lwq_error *e)
{
    lwq_srcfmt sf;
    int rc = lwq_srcfmt_from_config(&ck->cfg, &sf, e);
    if (rc)
        return rc;
    if (s->nlayers != ck->cfg.num_hidden_layers || s->committed < 0 || s->committed > s->nlayers)
        return lwq_errf(e, LWQ_ESTATE, "%s: %d of %d layers committed; this model has %d layers", file, s->committed,
                        s->nlayers, ck->cfg.num_hidden_layers);
    for (int L = 0; L < s->committed && rc == 0; L++)
        rc = check_layer(o, ck, &sf, &plans[L], &s->rec[L], L, file, e);
    /* lm_head: searched by this run exactly when the complete file has its record */
    uint8_t hallow[LWQ_AQ_FORMATS];
    int head = rc == 0 ? lwq_aq_head_allowed(o, ck, hallow, e) : 0;
    if (head < 0)
        return head;
    if (rc == 0 && s->complete && (head > 0) != s->has_head)
        rc = lwq_errf(e, LWQ_ESTATE, "%s: %s lm_head record, and this search %s lm_head in its budget (the scores do not belong to "
                      "this recipe, or were edited: remove the file, or the resume directory it is in, to score "
                      "again)", file, s->has_head ? "has an" : "has no", head ? "counts" : "does not count");
    if (rc == 0 && s->has_head)
        rc = lwq_aq_head_check(o, ck, &s->rec[s->nlayers], file, e);
    if (rc == 0 && s->committed > 0) { /* pass 1 counts the tail when it starts */
        uint64_t tail = lwq_aq_tail_bytes(o, ck);
        if (tail != s->tail_bytes)
            rc = lwq_errf(e, LWQ_ESTATE, "%s: the tensors outside the decoder layers are %" PRIu64 " bytes in the "
                          "file, %" PRIu64 " in this model (the scores do not belong to this model, or were edited: "
                          "remove the file, or the resume directory it is in, to score again)", file, s->tail_bytes,
                          tail);
    }
    return rc;
}
