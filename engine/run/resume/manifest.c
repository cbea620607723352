#include "engine/run/resume/manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/data/hash.h"
#include "io/durable.h"
#include "io/sys.h"
#include "layout/format/export.h"

#define MANIFEST_MAX_BYTES (64u << 20)

const char *const lwq_fp_part_names[LWQ_FP_PARTS] = {
    "source checkpoint (shard headers, sizes and modification times)", "config.json", "recipe", "calibration tokens",
    "batching and padding", "calibration options", "backend", "lwq format version",
};

void lwq_fp_finish(lwq_fingerprint *f) { f->all = lwq_xxh64(f->part, sizeof f->part, 0x6c7771); }

void lwq_shard_name(int layer, char out[40]) { snprintf(out, 40, LWQ_OUT_SHARD_PREFIX "%05d.safetensors", layer); }

void lwq_part_name(int layer, int b0, int b1, char out[64]) { snprintf(out, 64, LWQ_RESUME_PART_FMT, layer, b0, b1); }

int lwq_manifest_init(lwq_manifest *m, const lwq_fingerprint *fp, int num_layers, lwq_error *e)
{
    memset(m, 0, sizeof *m);
    m->fp = *fp;
    m->num_layers = num_layers;
    m->layers = calloc((size_t)(num_layers > 0 ? num_layers : 1), sizeof *m->layers);
    if (!m->layers)
        return lwq_errf(e, LWQ_ENOMEM, "manifest: out of memory");
    return 0;
}

void lwq_manifest_free(lwq_manifest *m)
{
    if (m) {
        for (int i = 0; m->layers && i < m->num_layers; i++)
            free(m->layers[i].report);
        free(m->layers);
        free(m->parts);
        memset(m, 0, sizeof *m);
    }
}

void lwq_json_put_hex(cJSON *o, const char *k, uint64_t v)
{
    char h[17];
    lwq_hex64(v, h);
    cJSON_AddStringToObject(o, k, h);
}

int lwq_json_get_hex(const cJSON *o, const char *k, uint64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(j) || strlen(j->valuestring) != 16)
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(j->valuestring, &end, 16);
    if (errno || *end)
        return -1;
    *v = x;
    return 0;
}

int lwq_json_state_load(const char *path, size_t max_bytes, cJSON **root, lwq_error *e)
{
    *root = NULL;
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return LWQ_ENOENT;
    char *buf;
    size_t len;
    int rc = lwq_durable_read_file(path, max_bytes, &buf, &len, e);
    if (rc)
        return rc;
    *root = cJSON_Parse(buf);
    free(buf);
    if (!*root)
        return lwq_errf(e, LWQ_EFORMAT, "%s: not valid JSON (remove the resume directory to start over)", path);
    return 0;
}

int lwq_json_get_u64(const cJSON *o, const char *k, uint64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > 9007199254740992.0 ||
        j->valuedouble != (double)(uint64_t)j->valuedouble)
        return -1;
    *v = (uint64_t)j->valuedouble;
    return 0;
}

char *lwq_manifest_render(const lwq_manifest *m)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "lwq-resume");
    cJSON_AddNumberToObject(root, "version", LWQ_MANIFEST_VERSION);
    lwq_json_put_hex(root, "fingerprint", m->fp.all);
    cJSON *in = cJSON_AddObjectToObject(root, "inputs");
    for (int i = 0; i < LWQ_FP_PARTS; i++) {
        char k[8];
        snprintf(k, sizeof k, "p%d", i);
        lwq_json_put_hex(in, k, m->fp.part[i]);
    }
    cJSON_AddNumberToObject(root, "num_layers", m->num_layers);
    cJSON_AddNumberToObject(root, "committed", m->committed);
    cJSON_AddBoolToObject(root, "complete", m->complete);
    if (m->has_head_amax) {
        uint32_t bits;
        memcpy(&bits, &m->head_amax, sizeof bits);
        lwq_json_put_hex(root, "lm_head_input_amax", bits);
    }
    cJSON *b = cJSON_AddObjectToObject(root, "boundary");
    cJSON_AddStringToObject(b, "file", m->boundary_file);
    cJSON_AddNumberToObject(b, "bytes", (double)m->boundary_bytes);
    lwq_json_put_hex(b, "xxh64", m->boundary_xxh64);
    if (m->nparts) {
        cJSON *ps = cJSON_AddArrayToObject(b, "parts");
        for (int i = 0; i < m->nparts; i++) {
            cJSON *q = cJSON_CreateObject();
            cJSON *br = cJSON_AddArrayToObject(q, "batches");
            cJSON_AddItemToArray(br, cJSON_CreateNumber(m->parts[i].b0));
            cJSON_AddItemToArray(br, cJSON_CreateNumber(m->parts[i].b1));
            cJSON_AddNumberToObject(q, "bytes", (double)m->parts[i].bytes);
            lwq_json_put_hex(q, "xxh64", m->parts[i].xxh64);
            cJSON_AddItemToArray(ps, q);
        }
    }
    cJSON *ls = cJSON_AddArrayToObject(root, "layers");
    for (int i = 0; i < m->committed; i++) {
        cJSON *l = cJSON_CreateObject();
        char name[40];
        lwq_shard_name(i, name);
        cJSON_AddStringToObject(l, "file", name);
        cJSON_AddNumberToObject(l, "bytes", (double)m->layers[i].bytes);
        lwq_json_put_hex(l, "xxh64", m->layers[i].xxh64);
        if (m->layers[i].report)
            cJSON_AddItemToObject(l, "report", cJSON_Parse(m->layers[i].report));
        cJSON_AddItemToArray(ls, l);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

int lwq_manifest_save(const char *path, const lwq_manifest *m, lwq_error *e)
{
    char *s = lwq_manifest_render(m);
    if (!s)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    int rc = lwq_durable_write_file(path, s, strlen(s), e);
    free(s);
    return rc;
}

/* boundary.parts: absent, or 1..100000 parts tiling batches [0, n) in order, and then
 * boundary.file is "".  Returns -1 when malformed. */
static int load_parts(const cJSON *b, lwq_manifest *m)
{
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(b, "parts");
    if (!ps)
        return 0;
    int n = cJSON_IsArray(ps) ? cJSON_GetArraySize(ps) : 0;
    if (n < 1 || n > 100000 || m->boundary_file[0] || !(m->parts = calloc((size_t)n, sizeof *m->parts)))
        return -1;
    m->nparts = n;
    int i = 0, next = 0;
    for (const cJSON *q = ps->child; q; q = q->next, i++) {
        const cJSON *br = cJSON_GetObjectItemCaseSensitive(q, "batches");
        const cJSON *a = cJSON_IsArray(br) && cJSON_GetArraySize(br) == 2 ? br->child : NULL;
        lwq_manifest_part *p = &m->parts[i];
        if (!a || !cJSON_IsNumber(a) || !cJSON_IsNumber(a->next) || a->valuedouble != next ||
            !(a->next->valuedouble > a->valuedouble) || a->next->valuedouble > 1e9 ||
            lwq_json_get_u64(q, "bytes", &p->bytes) || p->bytes == 0 || lwq_json_get_hex(q, "xxh64", &p->xxh64))
            return -1;
        p->b0 = next;
        p->b1 = next = (int)a->next->valuedouble;
    }
    return 0;
}

int lwq_manifest_load(const char *path, lwq_manifest *m, lwq_error *e)
{
    memset(m, 0, sizeof *m);
    cJSON *root;
    int rc = lwq_json_state_load(path, MANIFEST_MAX_BYTES, &root, e);
    if (rc)
        return rc;
    const char *bad = NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "boundary");
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "layers");
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(root, "complete");
    uint64_t nl = 0, cm = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "lwq-resume"))
        bad = "format";
    else if (!cJSON_IsNumber(ver) || ver->valueint != LWQ_MANIFEST_VERSION)
        bad = "version";
    else if (lwq_json_get_hex(root, "fingerprint", &m->fp.all))
        bad = "fingerprint";
    else if (!cJSON_IsObject(in))
        bad = "inputs";
    else if (lwq_json_get_u64(root, "num_layers", &nl) || nl > 100000)
        bad = "num_layers";
    else if (lwq_json_get_u64(root, "committed", &cm) || cm > nl)
        bad = "committed";
    else if (!cJSON_IsBool(comp))
        bad = "complete";
    else if (!cJSON_IsObject(b) || lwq_json_get_u64(b, "bytes", &m->boundary_bytes) || lwq_json_get_hex(b, "xxh64", &m->boundary_xxh64))
        bad = "boundary";
    else if (!cJSON_IsArray(ls) || (uint64_t)cJSON_GetArraySize(ls) != cm)
        bad = "layers";
    for (int i = 0; !bad && i < LWQ_FP_PARTS; i++) {
        char k[8];
        snprintf(k, sizeof k, "p%d", i);
        if (lwq_json_get_hex(in, k, &m->fp.part[i]))
            bad = "inputs";
    }
    if (!bad) {
        const cJSON *bf = cJSON_GetObjectItemCaseSensitive(b, "file");
        if (!cJSON_IsString(bf) || (strcmp(bf->valuestring, "") && strcmp(bf->valuestring, "boundary-0.bin") &&
                                    strcmp(bf->valuestring, "boundary-1.bin")))
            bad = "boundary.file";
        else
            snprintf(m->boundary_file, sizeof m->boundary_file, "%s", bf->valuestring);
    }
    if (!bad && load_parts(b, m) != 0)
        bad = "boundary.parts";
    if (!bad && cJSON_GetObjectItemCaseSensitive(root, "lm_head_input_amax")) {
        uint64_t bits = 0;
        float a = -1;
        if (lwq_json_get_hex(root, "lm_head_input_amax", &bits) || bits > UINT32_MAX || cm != nl)
            bad = "lm_head_input_amax";
        uint32_t b32 = (uint32_t)bits;
        memcpy(&a, &b32, sizeof a);
        if (!bad && !(a >= 0 && a <= 3.4e38f)) /* finite, not negative, not NaN */
            bad = "lm_head_input_amax";
        if (!bad) {
            m->has_head_amax = 1;
            m->head_amax = a;
        }
    }
    /* The boundary is the input of the first uncommitted layer: it exists exactly when some but
     * not all layers are committed, and then it is the file the commit of layer committed-1
     * wrote (run_output.c alternates them), or the parts a run over ranks wrote.  Without this
     * an empty name sent a resumed run back to the embedding for layer `committed`, a wrong
     * output that looked complete. */
    if (!bad && cJSON_IsTrue(comp) && cm != nl)
        bad = "complete";
    if (!bad && m->nparts && !(cm > 0 && cm < nl))
        bad = "boundary.parts";
    if (!bad && !m->nparts) {
        char want[32] = "";
        if (cm > 0 && cm < nl)
            snprintf(want, sizeof want, LWQ_RESUME_BOUNDARY_FMT, (int)(cm % 2));
        if (strcmp(m->boundary_file, want) || (want[0] && m->boundary_bytes == 0)) {
            int rc = want[0] ? lwq_errf(e, LWQ_EFORMAT, "%s: %d of %d layers committed, so boundary.file must be \"%s\" "
                                        "with its size, not \"%s\" (%" PRIu64 " bytes): the input of layer %d is "
                                        "missing (remove the resume directory to start over)", path, (int)cm, (int)nl,
                                        want, m->boundary_file, m->boundary_bytes, (int)cm)
                             : lwq_errf(e, LWQ_EFORMAT, "%s: boundary.file is \"%s\" with %d of %d layers committed, "
                                        "where no boundary may be named (remove the resume directory to start over)",
                                        path, m->boundary_file, (int)cm, (int)nl);
            cJSON_Delete(root);
            lwq_manifest_free(m);
            return rc;
        }
    }
    if (!bad) {
        m->num_layers = (int)nl;
        m->committed = (int)cm;
        m->complete = cJSON_IsTrue(comp);
        m->layers = calloc(nl ? nl : 1, sizeof *m->layers);
        if (!m->layers) {
            cJSON_Delete(root);
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
        }
        int i = 0;
        for (const cJSON *l = ls->child; l && !bad; l = l->next, i++) {
            char want[40];
            lwq_shard_name(i, want);
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(l, "file");
            if (!cJSON_IsString(f) || strcmp(f->valuestring, want) || lwq_json_get_u64(l, "bytes", &m->layers[i].bytes) ||
                lwq_json_get_hex(l, "xxh64", &m->layers[i].xxh64))
                bad = "layers";
            const cJSON *rep = cJSON_GetObjectItemCaseSensitive(l, "report");
            if (!bad && rep) {
                if (!cJSON_IsObject(rep) || !(m->layers[i].report = cJSON_PrintUnformatted(rep)))
                    bad = "layers";
            }
        }
    }
    cJSON_Delete(root);
    if (bad) {
        lwq_manifest_free(m);
        return lwq_errf(e, LWQ_EFORMAT, "%s: field \"%s\" is missing or invalid (remove the resume directory to "
                        "start over)", path, bad);
    }
    lwq_fingerprint chk = m->fp;
    lwq_fp_finish(&chk);
    if (chk.all != m->fp.all) {
        lwq_manifest_free(m);
        return lwq_errf(e, LWQ_EFORMAT, "%s: fingerprint does not match its inputs (edited or corrupt)", path);
    }
    return 0;
}

int lwq_fp_diff(const lwq_fingerprint *a, const lwq_fingerprint *b, char *out, size_t cap)
{
    int n = 0;
    size_t k = 0;
    if (cap)
        out[0] = 0;
    for (int i = 0; i < LWQ_FP_PARTS; i++) {
        if (a->part[i] == b->part[i])
            continue;
        int w = snprintf(out + k, cap > k ? cap - k : 0, "%s%s", n ? ", " : "", lwq_fp_part_names[i]);
        if (w > 0 && k + (size_t)w < cap)
            k += (size_t)w;
        n++;
    }
    return n;
}

int lwq_file_xxh64(const char *path, uint64_t *hash, uint64_t *bytes, lwq_error *e)
{
    const lwq_sys_table *sys = lwq_sys();
    int fd = lwq_durable_open_regular(path, 0, NULL, e);
    if (fd < 0)
        return fd;
    size_t cap = 4u << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        sys->close(fd);
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
    }
    lwq_xxh64_state s;
    lwq_xxh64_init(&s, 0);
    uint64_t total = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = sys->pread(fd, buf, cap, (off_t)total);
        if (r == -EINTR)
            continue;
        if (r < 0) {
            rc = lwq_errsys(e, (int)r, "%s: read failed at byte %" PRIu64, path, total);
            break;
        }
        if (r == 0)
            break;
        lwq_xxh64_update(&s, buf, (size_t)r);
        total += (uint64_t)r;
    }
    free(buf);
    sys->close(fd);
    if (rc)
        return rc;
    *hash = lwq_xxh64_digest(&s);
    *bytes = total;
    return 0;
}

int lwq_out_st_open(const char *path, lwq_st_file *f, lwq_error *e)
{
    const lwq_sys_table *sys = lwq_sys();
    int fd = lwq_durable_open_regular(path, 0, NULL, e);
    if (fd < 0) {
        memset(f, 0, sizeof *f);
        return fd;
    }
    int rc = lwq_st_open_fd(fd, path, f, e);
    sys->close(fd);
    return rc;
}
