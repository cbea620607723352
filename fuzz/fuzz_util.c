/* fuzz/fuzz_util.c — archives of files, scratch directories and the error contract check
 * (fuzz/fuzz_util.h). */
#include "fuzz/fuzz_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sys/log.h"
#include "layout/recipe/recipe.h"

#ifndef LWQ_SOURCE_DIR
#error "LWQ_SOURCE_DIR must name the source tree (fuzz/CMakeLists.txt sets it)"
#endif

void lwq_fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("lwq fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static int verbose(void)
{
    static int v = -1;
    if (v < 0)
        v = getenv("LWQ_FUZZ_VERBOSE") != NULL;
    return v;
}

void lwq_fuzz_check_error(int rc, const lwq_error *e, const char *what)
{
    if (rc < 0 && (!e || e->msg[0] == '\0'))
        lwq_fuzz_fail("%s failed with %d (%s) and no message", what, rc, lwq_strerror(rc));
    if (verbose() && rc < 0)
        fprintf(stderr, "lwq fuzz: %s: %s\n", what, e->msg);
}

static int skip(const char *why)
{
    if (verbose())
        fprintf(stderr, "lwq fuzz: input skipped: %s\n", why);
    return 0;
}

void lwq_fuzz_quiet(void) { lwq_log_set_level(LWQ_LOG_ERROR); }

char *lwq_fuzz_cstr(const uint8_t *d, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        lwq_fuzz_fail("out of memory copying %zu bytes", n);
    if (n)
        memcpy(s, d, n);
    s[n] = '\0';
    return s;
}

const char *lwq_fuzz_data(const char *sub)
{
    static char p[PATH_MAX];
    const char *root = getenv("LWQ_FUZZ_DATA");
    if (root && *root)
        snprintf(p, sizeof p, "%s/%s", root, sub);
    else
        snprintf(p, sizeof p, "%s/tests/data/fuzz/%s", LWQ_SOURCE_DIR, sub);
    return p;
}

/* ---- scratch directories ---------------------------------------------------------------------- */

static char g_base[PATH_MAX];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void rm_base(void)
{
    if (g_base[0])
        rm_tree(g_base);
}

const char *lwq_fuzz_scratch(const char *sub)
{
    static char p[PATH_MAX];
    if (!g_base[0]) {
        const char *t = getenv("TMPDIR");
        if (!t || !*t)
            t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(g_base, sizeof g_base, "%s/lwq-fuzz-%d", t, (int)getpid());
        rm_tree(g_base);
        if (mkdir(g_base, 0700) != 0)
            lwq_fuzz_fail("mkdir %s: %s", g_base, strerror(errno));
        atexit(rm_base);
    }
    snprintf(p, sizeof p, "%s/%s", g_base, sub);
    rm_tree(p);
    if (mkdir(p, 0700) != 0)
        lwq_fuzz_fail("mkdir %s: %s", p, strerror(errno));
    return p;
}

/* ---- archives --------------------------------------------------------------------------------- */

static int good_name(const char *s)
{
    if (!*s || *s == '/')
        return 0;
    int depth = 0;
    for (const char *c = s; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-' || *c == '/'))
            return 0;
        if (*c == '/' && (c[1] == '/' || c[1] == '\0' || ++depth > 6))
            return 0;
    }
    return strstr(s, "..") == NULL;
}

/* A header at d[i]: "==> NAME <==\n".  Returns the index after it, or 0 (not a header). */
static size_t header_at(const uint8_t *d, size_t n, size_t i, char *name, size_t cap)
{
    if (n - i < 4 || memcmp(d + i, "==> ", 4) != 0)
        return 0;
    const uint8_t *nl = memchr(d + i, '\n', n - i);
    if (!nl)
        return 0;
    size_t end = (size_t)(nl - d), len = end - (i + 4);
    if (len < 5 || memcmp(d + end - 4, " <==", 4) != 0 || len - 4 >= cap)
        return 0;
    memcpy(name, d + i + 4, len - 4);
    name[len - 4] = '\0';
    return end + 1;
}

static int put(lwq_fuzz_file *f, int n, int max, const char *name, const uint8_t *d, size_t len)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(f[k].name, name)) {
            f[k].data = d, f[k].len = len;
            return n;
        }
    if (n == max)
        return -1;
    snprintf(f[n].name, sizeof f[n].name, "%s", name);
    f[n].data = d, f[n].len = len;
    return n + 1;
}

int lwq_fuzz_split(const uint8_t *d, size_t n, const char *main, lwq_fuzz_file *f, int max)
{
    char name[256];
    int nf = 0;
    size_t start = 0;
    const char *cur = main;
    char curbuf[256];
    size_t h = header_at(d, n, 0, name, sizeof name);
    if (h) {
        if (!good_name(name))
            return skip("a file name outside [A-Za-z0-9._-/] or with \"..\"");
        snprintf(curbuf, sizeof curbuf, "%s", name);
        cur = curbuf, start = h;
    }
    for (size_t i = start;; i++) {
        const uint8_t *nl = i < n ? memchr(d + i, '\n', n - i) : NULL;
        size_t hn = nl ? header_at(d, n, (size_t)(nl - d) + 1, name, sizeof name) : 0;
        if (!nl || hn) {
            size_t end = nl ? (size_t)(nl - d) : n;
            if ((nf = put(f, nf, max, cur, d + start, end - start)) < 0)
                return skip("too many files");
            if (!nl)
                return nf;
            if (!good_name(name))
                return skip("a file name outside [A-Za-z0-9._-/] or with \"..\"");
            snprintf(curbuf, sizeof curbuf, "%s", name);
            cur = curbuf, start = hn;
            i = hn - 1;
        } else {
            i = (size_t)(nl - d);
        }
    }
}

/* The directories of path's components after `from` (the scratch directory exists). */
static int mkdirs_for(char *path, size_t from)
{
    for (char *s = strchr(path + from, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        int rc = mkdir(path, 0700);
        *s = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

int lwq_fuzz_write(const char *dir, const lwq_fuzz_file *f, int n)
{
    char p[PATH_MAX];
    for (int k = 0; k < n; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, f[k].name);
        int fd = mkdirs_for(p, strlen(dir) + 1) == 0 ? open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
        if (fd < 0) /* "a" and "a/b" in one archive: a name that is also a directory */
            return skip("a file name that is also a directory") - 1;
        size_t off = 0;
        while (off < f[k].len) {
            ssize_t w = write(fd, f[k].data + off, f[k].len - off);
            if (w <= 0)
                lwq_fuzz_fail("writing %s: %s", p, w < 0 ? strerror(errno) : "short write");
            off += (size_t)w;
        }
        close(fd);
    }
    return 0;
}

const lwq_fuzz_file *lwq_fuzz_get(const lwq_fuzz_file *f, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(f[k].name, name))
            return &f[k];
    return NULL;
}

/* ---- recipes ---------------------------------------------------------------------------------- */

static const char *const k_modules[] = {
    "model.layers.0.self_attn.q_proj",      "model.layers.0.self_attn.o_proj",
    "model.layers.3.mlp.down_proj",         "model.layers.1.mlp.experts.7.gate_proj",
    "model.layers.1.mlp.experts.0.w2",      "model.layers.1.block_sparse_moe.experts.3.w1",
    "model.layers.1.mlp.shared_experts.up_proj", "model.layers.1.mlp.shared_expert.down_proj",
    "model.layers.2.mlp.gate",              "model.layers.2.mlp.shared_expert_gate",
    "model.layers.0.self_attn.kv_a_proj_with_mqa", "model.layers.0.self_attn.q_b_proj",
    "model.layers.4.linear_attn.in_proj_qkvz", "model.layers.4.linear_attn.out_proj",
    "language_model.model.layers.0.mlp.up_proj", "lm_head", "mtp.layers.0.mlp.experts.1.up_proj",
};
static const char *const k_attn[] = {"model.layers.0.self_attn", "model.layers.5.self_attn",
                                     "language_model.model.layers.1.self_attn"};

void lwq_fuzz_recipe_check(const lwq_recipe *r)
{
    for (size_t i = 0; i < sizeof k_modules / sizeof k_modules[0]; i++)
        for (unsigned facts = 0; facts <= LWQ_MODULE_MLA_PROJ; facts++) {
            lwq_quant_choice c = lwq_recipe_resolve_module(r, k_modules[i], facts);
            if (c.split) {
                lwq_error e = {0};
                int rc = lwq_recipe_split_error(&c, k_modules[i], &e);
                if (rc >= 0)
                    lwq_fuzz_fail("split choice for %s gives no error", k_modules[i]);
                lwq_fuzz_check_error(rc, &e, "lwq_recipe_split_error");
            }
        }
    for (size_t i = 0; i < sizeof k_attn / sizeof k_attn[0]; i++) {
        (void)lwq_recipe_resolve_kv(r, k_attn[i]);
        lwq_error e = {0};
        lwq_fuzz_check_error(lwq_recipe_check_kv(r, k_attn[i], &e), &e, "lwq_recipe_check_kv");
    }
    (void)lwq_recipe_uses_gptq(r);
    char *j1 = lwq_recipe_to_json(r);
    if (!j1)
        lwq_fuzz_fail("lwq_recipe_to_json returned NULL");
    lwq_recipe r2;
    lwq_error e = {0};
    if (lwq_recipe_parse("canonical", j1, &r2, &e) != 0)
        lwq_fuzz_fail("the canonical JSON of a parsed recipe does not parse: %s\n%s", e.msg, j1);
    char *j2 = lwq_recipe_to_json(&r2);
    if (!j2 || strcmp(j1, j2) != 0)
        lwq_fuzz_fail("canonical JSON changes when parsed again:\n%s\n%s", j1, j2 ? j2 : "(null)");
    free(j2);
    free(j1);
    lwq_recipe_free(&r2);
}
