/* layout/recipe/recipe_yaml.c — Model Optimizer recipe YAML: files, imports, schema (see recipe_yaml.h). */
#include "layout/recipe/recipe_yaml.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/sys/file.h"
#include "layout/format/quant_formats.h"
#include "layout/recipe/recipe_qcfg.h"
#include "layout/recipe/recipe_attrs.h"
#include "layout/recipe/recipe_autoq.h"
#include "layout/recipe/yaml_doc.h"

#define YAML_MAX_BYTES (1u << 20)
#define MAX_ALIASES 64
#define MAX_WORK 200000 /* merge/splice steps over all imports (a DAG of imports can fan out) */

typedef enum ukind { U_RECIPE = 0, U_ATTR, U_ENTRY, U_LIST } ukind;

typedef struct yfile {
    char rel[PATH_MAX];       /* as messages name it */
    char real[PATH_MAX];
    lwq_ydoc doc;
    const lwq_ynode *body;
    ukind kind;
    int nimp;
    const char *alias[MAX_ALIASES];
    struct yfile *target[MAX_ALIASES];
} yfile;

typedef struct loader {
    char root[PATH_MAX];      /* realpath of the recipe root */
    yfile *files[LWQ_RECIPE_YAML_MAX_FILES];
    int nfiles;
    const char *stack[LWQ_RECIPE_YAML_MAX_DEPTH + 2];
    int depth;
    long work;
    lwq_mo_entry *ents;
    int n, cap;
    lwq_error *e;
} loader;

#define ERR(code, ...) lwq_errf(L->e, code, __VA_ARGS__)

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int is_yaml_name(const char *s) { return has_suffix(s, ".yml") || has_suffix(s, ".yaml"); }

/* Relative, no "..", no empty path. */
static int safe_relative(const char *p)
{
    if (!*p || *p == '/')
        return 0;
    for (const char *c = p; *c;) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return 0;
        c += n + (end ? 1 : 0);
    }
    return 1;
}

/* root/p with the Model Optimizer suffix probing; realpath must stay under root. */
static int resolve_under(const char *root, const char *p, char *real, lwq_error *e, const char *what)
{
    if (!safe_relative(p))
        return lwq_errf(e, LWQ_EINVAL, "%s \"%s\": the path must be relative to the recipe root, without \"..\"",
                        what, p);
    static const char *const sufs[] = {"", ".yml", ".yaml"};
    int first = is_yaml_name(p) ? 0 : 1;
    for (int i = first; i < 3; i++) {
        char cand[PATH_MAX];
        if (snprintf(cand, sizeof cand, "%s/%s%s", root, p, sufs[i]) >= (int)sizeof cand)
            return lwq_errf(e, LWQ_EINVAL, "%s \"%s\": path too long", what, p);
        struct stat st;
        if (stat(cand, &st) != 0)
            continue;
        /* a candidate that is there but unreadable is refused, not passed over for the next
         * suffix (a FIFO or a directory named x.yml must not let x.yaml, or nothing, stand in) */
        if (!S_ISREG(st.st_mode))
            return lwq_errf(e, LWQ_EFORMAT, "%s \"%s\": %s: not a regular file (%s); lwq reads only regular files",
                            what, p, cand, lwq_file_kind(st.st_mode));
        if (!realpath(cand, real))
            return lwq_errsys(e, -errno, "%s", cand);
        size_t rl = strlen(root);
        if (rl > 1 && (strncmp(real, root, rl) || real[rl] != '/')) /* root "/" holds every path */
            return lwq_errf(e, LWQ_EINVAL, "%s \"%s\": resolves to %s, outside the recipe root %s", what, p, real,
                            root);
        return 0;
    }
    return lwq_errf(e, LWQ_ENOENT, "%s \"%s\": no %s%s under the recipe root %s", what, p, p,
                    first ? ".yml or .yaml" : "", root);
}

static void yfile_free(yfile *f)
{
    if (!f)
        return;
    lwq_yaml_free(&f->doc);
    free(f);
}

/* Read and parse one file; body and imports by the document layout. */
static int read_yfile(loader *L, const char *rel, const char *real, yfile **out)
{
    if (L->nfiles == LWQ_RECIPE_YAML_MAX_FILES)
        return ERR(LWQ_EFORMAT, "%s: more than %d recipe files through imports", rel, LWQ_RECIPE_YAML_MAX_FILES);
    yfile *f = calloc(1, sizeof *f);
    if (!f)
        return ERR(LWQ_ENOMEM, "out of memory");
    snprintf(f->rel, sizeof f->rel, "%s", rel);
    snprintf(f->real, sizeof f->real, "%s", real);
    L->files[L->nfiles++] = f;
    *out = f;
    char *buf;
    size_t len;
    int rc = lwq_file_read_all(real, YAML_MAX_BYTES, &buf, &len, L->e);
    if (rc)
        return rc;
    rc = lwq_yaml_parse(rel, buf, len, &f->doc, L->e);
    free(buf);
    if (rc)
        return rc;
    const lwq_ynode *imports = NULL;
    if (f->doc.ndocs == 0 || lwq_y_is_null(f->doc.docs[f->doc.ndocs - 1]))
        return ERR(LWQ_EFORMAT, "%s: empty", rel);
    if (f->doc.ndocs == 1) {
        f->body = f->doc.docs[0];
        if (f->body->kind == LWQ_Y_MAP)
            imports = lwq_y_get(f->body, "imports");
    } else {
        const lwq_ynode *h = f->doc.docs[0];
        if (!lwq_y_is_null(h) && (h->kind != LWQ_Y_MAP || h->n != 1 || strcmp(h->kids[0]->str, "imports")))
            return ERR(LWQ_EFORMAT, "%s:%d: the first of two YAML documents may hold only imports", rel, h->line);
        imports = lwq_y_get(h, "imports");
        f->body = f->doc.docs[1];
        if (f->body->kind == LWQ_Y_MAP && lwq_y_get(f->body, "imports"))
            return ERR(LWQ_EFORMAT, "%s:%d: imports in both YAML documents", rel, f->body->line);
    }
    if (f->body->kind == LWQ_Y_SCALAR)
        return ERR(LWQ_EFORMAT, "%s:%d: must be a mapping or a list", rel, f->body->line);
    if (imports && !lwq_y_is_null(imports)) {
        if (imports->kind != LWQ_Y_MAP)
            return ERR(LWQ_EFORMAT, "%s:%d: imports must map names to paths", rel, imports->line);
        if (imports->n > MAX_ALIASES)
            return ERR(LWQ_EFORMAT, "%s:%d: more than %d imports", rel, imports->line, MAX_ALIASES);
        for (int i = 0; i < imports->n; i++) {
            const lwq_ynode *v = imports->kids[2 * i + 1];
            if (!lwq_y_str(v) || v->kind != LWQ_Y_SCALAR)
                return ERR(LWQ_EFORMAT, "%s:%d: import \"%s\" must be a path", rel, v->line, imports->kids[2 * i]->str);
            f->alias[i] = imports->kids[2 * i]->str;
        }
        f->nimp = imports->n;
    }
    return 0;
}

static ukind kind_of_schema(const char *s)
{
    if (has_suffix(s, ".QuantizerAttributeConfig"))
        return U_ATTR;
    if (has_suffix(s, ".QuantizerCfgEntry"))
        return U_ENTRY;
    if (has_suffix(s, ".QuantizerCfgListConfig"))
        return U_LIST;
    return U_RECIPE;
}

/* Whether node n (a subtree of a recipe) names alias in a $import. */
static int names_import(const lwq_ynode *n, const char *alias)
{
    if (!n || n->kind == LWQ_Y_SCALAR)
        return 0;
    const lwq_ynode *imp = n->kind == LWQ_Y_MAP ? lwq_y_get(n, "$import") : NULL;
    for (int i = 0; imp && i < (imp->kind == LWQ_Y_SEQ ? imp->n : 1); i++) {
        const char *s = lwq_y_str(imp->kind == LWQ_Y_SEQ ? imp->kids[i] : imp);
        if (s && !strcmp(s, alias))
            return 1;
    }
    int kids = n->kind == LWQ_Y_MAP ? 2 * n->n : n->n;
    for (int i = 0; i < kids; i++)
        if (names_import(n->kids[i], alias))
            return 1;
    return 0;
}

/* Resolve f's imports (loading each file once), refusing cycles and escapes; with `only`, just the
 * top-level imports that subtree names (an auto_quantize recipe's baseline: its other imports are
 * candidate presets and layer lists, schemas the ptq loader does not read). */
static int load_imports_of(loader *L, yfile *f, const lwq_ynode *only);
static int load_imports(loader *L, yfile *f) { return load_imports_of(L, f, NULL); }

static int load_imports_of(loader *L, yfile *f, const lwq_ynode *only)
{
    if (L->depth > LWQ_RECIPE_YAML_MAX_DEPTH)
        return ERR(LWQ_EFORMAT, "%s: imports nested deeper than %d", f->rel, LWQ_RECIPE_YAML_MAX_DEPTH);
    L->stack[L->depth++] = f->real;
    int rc = 0;
    for (int i = 0; i < f->nimp && !rc; i++) {
        const lwq_ynode *imports = f->doc.ndocs == 2 ? lwq_y_get(f->doc.docs[0], "imports") : lwq_y_get(f->body, "imports");
        const lwq_ynode *pv = imports->kids[2 * i + 1];
        if (only && !names_import(only, f->alias[i]))
            continue;
        char what[PATH_MAX + 64], real[PATH_MAX];
        snprintf(what, sizeof what, "%s:%d: import %s", f->rel, pv->line, f->alias[i]);
        if ((rc = resolve_under(L->root, pv->str, real, L->e, what)) != 0)
            break;
        for (int s = 0; s < L->depth; s++)
            if (!strcmp(L->stack[s], real)) {
                rc = ERR(LWQ_EFORMAT, "%s:%d: import %s (%s) is already being loaded: circular import", f->rel,
                         pv->line, f->alias[i], pv->str);
                break;
            }
        if (rc)
            break;
        yfile *t = NULL;
        for (int k = 0; k < L->nfiles && !t; k++)
            if (!strcmp(L->files[k]->real, real))
                t = L->files[k];
        if (!t) {
            if ((rc = read_yfile(L, pv->str, real, &t)) != 0)
                break;
            if (!t->doc.schema[0]) {
                rc = ERR(LWQ_EFORMAT, "%s:%d: import %s (%s) has no '# modelopt-schema:' comment, which Model "
                         "Optimizer requires of imported units", f->rel, pv->line, f->alias[i], pv->str);
                break;
            }
            t->kind = kind_of_schema(t->doc.schema);
            if (t->kind == U_RECIPE) {
                rc = ERR(LWQ_EUNSUPPORTED, "%s:%d: import %s (%s): modelopt-schema %s is not supported as an import "
                         "(QuantizerAttributeConfig, QuantizerCfgEntry and QuantizerCfgListConfig are)", f->rel,
                         pv->line, f->alias[i], pv->str, t->doc.schema);
                break;
            }
            if ((t->kind == U_LIST) != (t->body->kind == LWQ_Y_SEQ)) {
                rc = ERR(LWQ_EFORMAT, "%s: modelopt-schema %s but the content is a %s", t->rel, t->doc.schema,
                         t->body->kind == LWQ_Y_SEQ ? "list" : "mapping");
                break;
            }
            if ((rc = load_imports(L, t)) != 0)
                break;
        }
        f->target[i] = t;
    }
    L->depth--;
    return rc;
}

static yfile *lookup(loader *L, const yfile *f, const lwq_ynode *ref, int *rc)
{
    const char *name = lwq_y_str(ref);
    if (!name || ref->kind != LWQ_Y_SCALAR) {
        *rc = ERR(LWQ_EFORMAT, "%s:%d: $import needs an import name", f->rel, ref->line);
        return NULL;
    }
    for (int i = 0; i < f->nimp; i++)
        if (!strcmp(f->alias[i], name)) {
            if (!f->target[i]) /* not loaded: an auto_quantize recipe's import outside its baseline */
                *rc = ERR(LWQ_EFORMAT, "%s:%d: $import %s: not an import of the quantize block", f->rel, ref->line,
                          name);
            return f->target[i];
        }
    char known[512] = "";
    size_t k = 0;
    for (int i = 0; i < f->nimp && k < sizeof known; i++)
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", f->alias[i]);
    *rc = ERR(LWQ_EFORMAT, "%s:%d: $import %s: no such name in imports (%s)", f->rel, ref->line, name,
              f->nimp ? known : "none declared");
    return NULL;
}

/* ---- mappings with $import merges ------------------------------------------------------------ */

typedef lwq_mo_kv kvset;

static int kv_set(loader *L, kvset *s, const char *key, const lwq_ynode *v, const yfile *f)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->key[i], key)) {
            s->val[i] = v;
            s->from[i] = f;
            return 0;
        }
    if (s->n == 48)
        return ERR(LWQ_EFORMAT, "%s:%d: more than 48 keys", f->rel, v->line);
    s->key[s->n] = key;
    s->val[s->n] = v;
    s->from[s->n++] = f;
    return 0;
}

static const lwq_ynode *kv_get(const kvset *s, const char *key, const yfile **f)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->key[i], key)) {
            if (f)
                *f = (const yfile *)s->from[i];
            return s->val[i];
        }
    return NULL;
}

/* m (in f) with its `$import`s merged first and its own keys over them. */
static int merge_map(loader *L, const yfile *f, const lwq_ynode *m, ukind want, kvset *out)
{
    if (++L->work > MAX_WORK)
        return ERR(LWQ_EFORMAT, "%s: the imports expand to more than %d steps", f->rel, MAX_WORK);
    const lwq_ynode *imp = lwq_y_get(m, "$import");
    int rc = 0;
    if (imp) {
        int nref = imp->kind == LWQ_Y_SEQ ? imp->n : 1;
        for (int i = 0; i < nref && !rc; i++) {
            const lwq_ynode *ref = imp->kind == LWQ_Y_SEQ ? imp->kids[i] : imp;
            yfile *t = lookup(L, f, ref, &rc);
            if (!t)
                break;
            if (t->kind != want) {
                rc = ERR(LWQ_EFORMAT, "%s:%d: $import %s in a %s must name a %s unit (%s is %s)", f->rel, ref->line,
                         ref->str, want == U_ATTR ? "cfg" : "quant_cfg entry",
                         want == U_ATTR ? "QuantizerAttributeConfig" : "QuantizerCfgEntry", t->rel, t->doc.schema);
                break;
            }
            rc = merge_map(L, t, t->body, want, out);
        }
    }
    for (int i = 0; i < m->n && !rc; i++)
        if (strcmp(m->kids[2 * i]->str, "$import"))
            rc = kv_set(L, out, m->kids[2 * i]->str, m->kids[2 * i + 1], f);
    return rc;
}

/* ---- quant_cfg -------------------------------------------------------------------------------- */

/* Classes whose quantizers lwq never writes: entries that only disable them change nothing. */
static int never_quantized_class(const char *c)
{
    static const char *const v[] = {"nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d", "nn.LeakyReLU",
                                    "nn.Embedding",   "nn.LayerNorm",   "nn.GroupNorm",   "nn.Conv2d",
                                    "nn.Conv3d",      "nn.ConvTranspose1d", "nn.ConvTranspose2d", "nn.ConvTranspose3d"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strcmp(c, v[i]))
            return 1;
    return 0;
}

static int add_entry(loader *L, const yfile *f, const lwq_ynode *m);

static int add_item(loader *L, const yfile *f, const lwq_ynode *item)
{
    if (++L->work > MAX_WORK)
        return ERR(LWQ_EFORMAT, "%s: the imports expand to more than %d steps", f->rel, MAX_WORK);
    if (item->kind != LWQ_Y_MAP)
        return ERR(LWQ_EFORMAT, "%s:%d: a quant_cfg entry must be a mapping", f->rel, item->line);
    const lwq_ynode *imp = lwq_y_get(item, "$import");
    if (!imp || item->n != 1)
        return add_entry(L, f, item);
    int rc = 0;
    yfile *t = lookup(L, f, imp, &rc);
    if (!t)
        return rc;
    if (t->kind == U_LIST) {
        for (int i = 0; i < t->body->n && !rc; i++)
            rc = add_item(L, t, t->body->kids[i]);
        return rc;
    }
    if (t->kind == U_ENTRY)
        return add_entry(L, t, t->body);
    return ERR(LWQ_EFORMAT, "%s:%d: $import %s in quant_cfg names %s (%s); a list entry takes a QuantizerCfgEntry or "
               "QuantizerCfgListConfig unit", f->rel, imp->line, imp->str, t->rel, t->doc.schema);
}

static int add_entry(loader *L, const yfile *f, const lwq_ynode *m)
{
    kvset s = {0};
    int rc = merge_map(L, f, m, U_ENTRY, &s);
    if (rc)
        return rc;
    lwq_mo_entry en;
    memset(&en, 0, sizeof en);
    snprintf(en.where, sizeof en.where, "%s:%d", f->rel, m->line);
    const lwq_ynode *qn = kv_get(&s, "quantizer_name", NULL), *pc = kv_get(&s, "parent_class", NULL);
    const yfile *cf_file = NULL;
    const lwq_ynode *cfg = kv_get(&s, "cfg", &cf_file), *enable = kv_get(&s, "enable", NULL);
    if (!lwq_y_str(qn))
        return ERR(LWQ_EFORMAT, "%s: a quant_cfg entry needs quantizer_name", en.where);
    if (strlen(qn->str) > LWQ_QCFG_GLOB_MAX)
        return ERR(LWQ_EFORMAT, "%s: quantizer_name longer than %d characters", en.where, LWQ_QCFG_GLOB_MAX);
    snprintf(en.glob, sizeof en.glob, "%s", qn->str);
    for (int i = 0; i < s.n; i++)
        if (strcmp(s.key[i], "quantizer_name") && strcmp(s.key[i], "parent_class") && strcmp(s.key[i], "cfg") &&
            strcmp(s.key[i], "enable"))
            return ERR(LWQ_EFORMAT, "%s: quant_cfg entry '%s': unknown key \"%s\" (quantizer_name, parent_class, "
                       "cfg, enable)", en.where, en.glob, s.key[i]);
    if (enable) {
        if (lwq_y_bool(enable, &en.enable))
            return ERR(LWQ_EFORMAT, "%s: quant_cfg entry '%s': enable must be true or false", en.where, en.glob);
        en.has_enable = 1;
    }
    if (cfg && cfg->kind == LWQ_Y_SEQ)
        return ERR(LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg as a list (sequential quantizers, as in W4A8) is "
                   "not supported", en.where, en.glob);
    if (cfg && !lwq_y_is_null(cfg)) {
        if (cfg->kind != LWQ_Y_MAP)
            return ERR(LWQ_EFORMAT, "%s: quant_cfg entry '%s': cfg must be a mapping", en.where, en.glob);
        kvset a = {0};
        if ((rc = merge_map(L, cf_file, cfg, U_ATTR, &a)) != 0)
            return rc;
        if (a.n == 0) {
            if (!en.has_enable || en.enable)
                return ERR(LWQ_EFORMAT, "%s: quant_cfg entry '%s': cfg is empty (drop it, or give enable: false)",
                           en.where, en.glob);
        } else {
            en.has_cfg = 1;
            if ((rc = lwq_mo_parse_attrs(&en, &a, L->e)) != 0)
                return rc;
        }
    }
    if (!en.has_cfg && !en.has_enable)
        return ERR(LWQ_EFORMAT, "%s: quant_cfg entry '%s' has neither cfg nor enable, so it does nothing", en.where,
                   en.glob);
    if (pc && !lwq_y_is_null(pc)) {
        if (!lwq_y_str(pc))
            return ERR(LWQ_EFORMAT, "%s: quant_cfg entry '%s': parent_class must be a class name", en.where, en.glob);
        /* nn.Embedding is a quantized module in Model Optimizer 0.47 (its weight quantizer is
         * reached by name, e.g. the Nemotron-3-Nano W4A16 recipe's '*embeddings*weight_quantizer'):
         * the disabling entry stays, restricted to the token embedding */
        if (!en.has_cfg && !en.enable && !strcmp(pc->str, "nn.Embedding"))
            en.embedding_only = 1;
        else if (!en.has_cfg && !en.enable && never_quantized_class(pc->str))
            return 0; /* disables quantizers of a class lwq never quantizes: no effect */
        else
            return ERR(LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': parent_class %s is not supported (lwq selects "
                       "quantizers by name; only entries that disable a class lwq never quantizes, such as "
                       "nn.BatchNorm2d or nn.Embedding, are accepted)", en.where, en.glob, pc->str);
    }
    if (L->n == LWQ_QCFG_MAX_ENTRIES)
        return ERR(LWQ_EFORMAT, "%s: quant_cfg has more than %d entries after imports", en.where,
                   LWQ_QCFG_MAX_ENTRIES);
    if (L->n == L->cap) {
        int nc = L->cap ? L->cap * 2 : 64;
        lwq_mo_entry *v = realloc(L->ents, (size_t)nc * sizeof *v);
        if (!v)
            return ERR(LWQ_ENOMEM, "out of memory");
        L->ents = v;
        L->cap = nc;
    }
    L->ents[L->n++] = en;
    return 0;
}

/* ---- algorithm, metadata, the recipe ---------------------------------------------------------- */

static int parse_method(loader *L, const yfile *f, const lwq_ynode *v, lwq_mo_algo *a)
{
    static const struct {
        const char *name, *why;
    } refused[] = {
        {"awq_lite", "AWQ searches pre-quantization scales over the whole model, which lwq does not write per layer"},
        {"awq_clip", "AWQ searches pre-quantization scales over the whole model, which lwq does not write per layer"},
        {"awq_full", "AWQ searches pre-quantization scales over the whole model, which lwq does not write per layer"},
        {"smoothquant", "SmoothQuant folds per-channel scales into the previous layer (INT8), which lwq does not write"},
        {"svdquant", "SVDQuant adds low-rank branches, which lwq does not write"},
        {"gptq", "lwq's GPTQ (--algo gptq) takes each NVFP4 block scale from the weights as GPTQ has updated "
                 "them, Model Optimizer's from the max-calibrated original weights, so the codes would differ"},
    };
    const char *m = lwq_y_str(v);
    if (!m || v->kind != LWQ_Y_SCALAR)
        return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.method must be a name", f->rel, v->line);
    if (!strcmp(m, "max") || !strcmp(m, "mse") || !strcmp(m, "local_hessian")) {
        lwq_algo_parse(m, &a->method);
        return 0;
    }
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (!strcmp(m, refused[i].name))
            return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm method %s is not supported: %s", f->rel, v->line, m,
                       refused[i].why);
    return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm method %s is not supported (max, mse, local_hessian)",
               f->rel, v->line, m);
}

static int parse_layerwise(loader *L, const yfile *f, const lwq_ynode *lw, lwq_recipe_run *run)
{
    int b;
    if (!lwq_y_bool(lw, &b)) /* layerwise: true|false; lwq is layerwise either way, same bytes */
        return 0;
    if (lw->kind != LWQ_Y_MAP)
        return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.layerwise must be a mapping", f->rel, lw->line);
    for (int i = 0; i < lw->n; i++) {
        const char *k = lw->kids[2 * i]->str;
        const lwq_ynode *v = lw->kids[2 * i + 1];
        if (!strcmp(k, "enable") || !strcmp(k, "calib_mutates_weights")) {
            if (lwq_y_bool(v, &b))
                return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.layerwise.%s must be true or false", f->rel,
                           v->line, k);
        } else if (!strcmp(k, "get_qdq_activations_from_prev_layer")) {
            if (lwq_y_bool(v, &run->qdq_next))
                return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.layerwise.%s must be true or false", f->rel,
                           v->line, k);
            run->has_qdq_next = 1;
        } else if (!strcmp(k, "export_dir") || !strcmp(k, "checkpoint_dir")) {
            if (!lwq_y_is_null(v) && (v->kind != LWQ_Y_SCALAR || !v->str[0]))
                return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.layerwise.%s must be a path", f->rel, v->line, k);
            if (!strcmp(k, "checkpoint_dir") && !lwq_y_is_null(v)) {
                if (strlen(v->str) >= sizeof run->checkpoint_dir)
                    return ERR(LWQ_EFORMAT, "%s:%d: checkpoint_dir too long", f->rel, v->line);
                snprintf(run->checkpoint_dir, sizeof run->checkpoint_dir, "%s", v->str);
                snprintf(run->checkpoint_dir_at, sizeof run->checkpoint_dir_at, "%s:%d", f->rel, v->line);
                run->has_checkpoint_dir = 1;
            }
        } else {
            return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm.layerwise.%s is not supported", f->rel, v->line, k);
        }
    }
    return 0;
}

static int parse_algorithm(loader *L, const yfile *f, const lwq_ynode *alg, lwq_mo_algo *a, lwq_recipe_run *run)
{
    a->method = LWQ_ALGO_MAX; /* Model Optimizer's default */
    a->sweep = 0;
    a->mse_range = LWQ_MSE_RANGE_DEFAULT;
    if (!alg)
        return 0;
    if (lwq_y_is_null(alg))
        return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm null (no calibration) is not supported; lwq calibrates "
                   "(use max)", f->rel, alg->line);
    if (alg->kind == LWQ_Y_SCALAR)
        return parse_method(L, f, alg, a);
    if (alg->kind != LWQ_Y_MAP)
        return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm must be a name or a mapping", f->rel, alg->line);
    const lwq_ynode *m = lwq_y_get(alg, "method"), *sw = NULL;
    double range[3] = {0.25, 4.0, 0.1}; /* Model Optimizer's MseCalibConfig defaults */
    int range_line = alg->line;
    if (!m)
        return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm needs a method", f->rel, alg->line);
    int rc = parse_method(L, f, m, a);
    if (rc)
        return rc;
    for (int i = 0; i < alg->n && !rc; i++) {
        const char *k = alg->kids[2 * i]->str;
        const lwq_ynode *v = alg->kids[2 * i + 1];
        if (!strcmp(k, "method"))
            continue;
        if (!strcmp(k, "fp8_scale_sweep")) {
            if (lwq_y_bool(v, &a->sweep))
                return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.fp8_scale_sweep must be true or false", f->rel,
                           v->line);
            sw = v;
        } else if (!strcmp(k, "start_multiplier") || !strcmp(k, "stop_multiplier") || !strcmp(k, "step_size")) {
            double x;
            if (lwq_y_number(v, &x) || !isfinite(x))
                return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.%s must be a number", f->rel, v->line, k);
            range[!strcmp(k, "start_multiplier") ? 0 : !strcmp(k, "stop_multiplier") ? 1 : 2] = x;
            range_line = v->line;
        } else if (!strcmp(k, "layerwise")) {
            rc = parse_layerwise(L, f, v, run);
        } else if (!strcmp(k, "skip_forward_without_activation_calib") && a->method == LWQ_ALGO_MAX) {
            /* MaxCalibConfig's opt-in: Model Optimizer skips the forward loop when no activation
             * quantizer needs data (constant_amax everywhere); weights are calibrated on the weights
             * either way, so the output does not change.  lwq always runs its forward (it also
             * counts expert tokens); the same bytes. */
            int skip;
            if (lwq_y_bool(v, &skip))
                return ERR(LWQ_EFORMAT, "%s:%d: quantize.algorithm.%s must be true or false", f->rel, v->line, k);
        } else {
            return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm.%s is not supported", f->rel, v->line, k);
        }
    }
    if (rc)
        return rc;
    a->mse_range = lwq_recipe_mse_range(range[0], range[1], range[2]);
    if (a->mse_range < 0)
        return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm start_multiplier %g, stop_multiplier %g, step_size %g: "
                   "lwq needs 0 < start_multiplier <= stop_multiplier, step_size > 0 and at most %d candidates "
                   "(ceil((stop - start) / step) + 1)", f->rel, range_line, range[0], range[1], range[2],
                   LWQ_MSE_MAX_STEPS);
    for (int i = 0; i < 3; i++)
        a->mse_mult[i] = range[i];
    if (a->mse_range != LWQ_MSE_RANGE_DEFAULT && a->method != LWQ_ALGO_MSE)
        return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm start_multiplier / stop_multiplier / step_size need "
                   "method mse", f->rel, range_line);
    if (a->method == LWQ_ALGO_MAX && a->sweep)
        return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.algorithm.fp8_scale_sweep needs method mse or local_hessian",
                   f->rel, sw->line);
    if (a->method == LWQ_ALGO_LOCAL_HESSIAN) {
        if (sw && !a->sweep)
            return ERR(LWQ_EUNSUPPORTED, "%s:%d: method local_hessian with fp8_scale_sweep false (a Hessian-weighted "
                       "multiplier search) is not supported; lwq's local_hessian sweeps the FP8 scale values",
                       f->rel, sw->line);
        a->sweep = 1; /* Model Optimizer's default for local_hessian */
    }
    return 0;
}

/* A file's top-level imports: the first document of a two-document unit, else the body's. */
static const lwq_ynode *file_imports(const yfile *f)
{
    return f->doc.ndocs == 2 ? lwq_y_get(f->doc.docs[0], "imports") : lwq_y_get(f->body, "imports");
}

static int parse_top(loader *L, const yfile *f, lwq_mo_algo *a, lwq_recipe_run *run, const lwq_ynode **qcfg)
{
    const lwq_ynode *b = f->body, *meta = NULL, *quant = NULL;
    if (b->kind != LWQ_Y_MAP)
        return ERR(LWQ_EFORMAT, "%s: a recipe is a mapping (imports, metadata, quantize)", f->rel);
    for (int i = 0; i < b->n; i++) {
        const char *k = b->kids[2 * i]->str;
        int line = b->kids[2 * i]->line;
        if (!strcmp(k, "imports"))
            continue;
        if (!strcmp(k, "metadata"))
            meta = b->kids[2 * i + 1];
        else if (!strcmp(k, "quantize"))
            quant = b->kids[2 * i + 1];
        else if (!strcmp(k, "auto_quantize") && run->aq_baseline)
            continue; /* read already: this is its fixed baseline's compile */
        else if (!strcmp(k, "auto_quantize"))
            return lwq_recipe_aq_parse(&(lwq_recipe_aq_file){f->rel, f->body, file_imports(f), NULL, NULL}, b->kids[2 * i + 1],
                                       line, run, L->e);
        else if (!strcmp(k, "sparsity") || !strcmp(k, "sparsify"))
            return ERR(LWQ_EUNSUPPORTED, "%s:%d: %s is not supported (lwq writes dense checkpoints)", f->rel, line, k);
        else
            return ERR(LWQ_EFORMAT, "%s:%d: unknown top-level key \"%s\" (a ptq recipe has imports, metadata and "
                       "quantize)", f->rel, line, k);
    }
    const lwq_ynode *rt = lwq_y_get(meta, "recipe_type");
    if (!lwq_y_str(rt))
        return ERR(LWQ_EFORMAT, "%s: a recipe needs metadata.recipe_type (ptq)", f->rel);
    if (strcmp(rt->str, run->aq_baseline ? "auto_quantize" : "ptq"))
        return ERR(LWQ_EUNSUPPORTED, "%s:%d: metadata.recipe_type %s is not supported (lwq runs ptq recipes)", f->rel,
                   rt->line, rt->str);
    if (!quant || quant->kind != LWQ_Y_MAP)
        return ERR(LWQ_EFORMAT, "%s: a ptq recipe needs a quantize mapping", f->rel);
    for (int i = 0; i < quant->n; i++) {
        const char *k = quant->kids[2 * i]->str;
        const lwq_ynode *v = quant->kids[2 * i + 1];
        if (!strcmp(k, "effective_bits") && run->aq_baseline) {
            /* the fixed baseline's cost (Model Optimizer's QuantizeConfig.effective_bits): lwq counts bytes */
            if (lwq_y_number(v, &run->aq_baseline_bits) || !(run->aq_baseline_bits > 0 && run->aq_baseline_bits <= 16))
                return ERR(LWQ_EFORMAT, "%s:%d: quantize.effective_bits must be a number in (0, 16]", f->rel, v->line);
            continue;
        }
        if (strcmp(k, "algorithm") && strcmp(k, "quant_cfg"))
            return ERR(LWQ_EUNSUPPORTED, "%s:%d: quantize.%s is not supported (algorithm, quant_cfg%s)", f->rel,
                       quant->kids[2 * i]->line, k, run->aq_baseline ? ", effective_bits" : "");
    }
    *qcfg = lwq_y_get(quant, "quant_cfg");
    if (!*qcfg || (*qcfg)->kind != LWQ_Y_SEQ)
        return ERR(LWQ_EFORMAT, "%s: quantize.quant_cfg must be a list of entries", f->rel);
    return parse_algorithm(L, f, lwq_y_get(quant, "algorithm"), a, run);
}

/* An auto_quantize recipe's inline candidate `cand` of file f (recipe_autoq.h lwq_recipe_aq_file.compile):
 * its imports loaded, its algorithm and quant_cfg compiled as a ptq recipe's, a plain linear's quantizers
 * resolved under the names relative to the module that Model Optimizer applies a candidate's quant_cfg
 * to (set_quantizer_by_cfg on the module). */
typedef struct aq_inline_ctx {
    loader *L;
    yfile *f;
} aq_inline_ctx;

static int aq_inline_compile(void *ctx, const lwq_ynode *cand, lwq_quant_choice *c, lwq_error *e)
{
    aq_inline_ctx *x = ctx;
    loader *L = x->L;
    (void)e; /* L->e is the same error */
    int rc = load_imports_of(L, x->f, cand), n0 = L->n;
    lwq_mo_algo a = {LWQ_ALGO_MAX, 0, x->f->rel, LWQ_MSE_RANGE_DEFAULT, {0.25, 4.0, 0.1}, 1};
    lwq_recipe_run *scratch = calloc(1, sizeof *scratch);
    if (!rc && !scratch)
        rc = ERR(LWQ_ENOMEM, "out of memory");
    if (!rc)
        rc = parse_algorithm(L, x->f, lwq_y_get(cand, "algorithm"), &a, scratch);
    if (!rc && scratch->has_checkpoint_dir)
        rc = ERR(LWQ_EUNSUPPORTED, "%s:%d: an inline auto_quantize candidate's algorithm.layerwise.checkpoint_dir is "
                 "not read", x->f->rel, cand->line);
    free(scratch);
    const lwq_ynode *qc = lwq_y_get(cand, "quant_cfg");
    for (int i = 0; !rc && i < qc->n; i++)
        rc = add_item(L, x->f, qc->kids[i]);
    lwq_recipe r;
    memset(&r, 0, sizeof r);
    if (!rc) {
        r.algo = a.method;
        r.fp8_scale_sweep = a.sweep;
        r.mse_range = a.mse_range;
        memcpy(r.mse_mult, a.mse_mult, sizeof r.mse_mult);
        r.gptq_damp = 0.01;
        rc = lwq_qcfg_compile(L->ents + n0, L->n - n0, &a, x->f->rel, &r, L->e);
    }
    L->n = n0; /* the candidate's entries are not the recipe's */
    if (!rc) {
        lwq_qnames q;
        memset(&q, 0, sizeof q);
        q.module = "";
        snprintf(q.weight[0], sizeof q.weight[0], "weight_quantizer");
        q.nweight = 1;
        snprintf(q.input, sizeof q.input, "input_quantizer");
        snprintf(q.output, sizeof q.output, "output_quantizer");
        *c = lwq_recipe_resolve_names(&r, &q, 0);
    }
    lwq_recipe_free(&r);
    return rc;
}

int lwq_recipe_yaml_load(const char *path, const char *root, lwq_recipe *r, lwq_recipe_run *run, lwq_error *e)
{
    memset(r, 0, sizeof *r);
    memset(run, 0, sizeof *run);
    loader *L = calloc(1, sizeof *L);
    if (!L)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    L->e = e;
    int rc = 0;
    if (!realpath(root ? root : ".", L->root))
        rc = lwq_errsys(e, -errno, "recipe root %s", root ? root : ".");
    char real[PATH_MAX];
    yfile *f = NULL;
    if (!rc && !realpath(path, real))
        rc = lwq_errsys(e, -errno, "%s", path);
    if (!rc)
        rc = read_yfile(L, path, real, &f);
    /* an auto_quantize recipe is read (or refused) before its imports (schemas lwq does not read) load,
     * except those an inline candidate names; one lwq runs is the search's options and its base preset */
    aq_inline_ctx ictx = {L, f};
    for (int i = 0; !rc && f->body->kind == LWQ_Y_MAP && i < f->body->n; i++)
        if (!strcmp(f->body->kids[2 * i]->str, "auto_quantize"))
            rc = lwq_recipe_aq_parse(&(lwq_recipe_aq_file){f->rel, f->body, file_imports(f), aq_inline_compile, &ictx},
                                     f->body->kids[2 * i + 1], f->body->kids[2 * i]->line, run, e);
    if (!rc && run->is_aq)
        rc = lwq_recipe_aq_top(&(lwq_recipe_aq_file){f->rel, f->body, file_imports(f), NULL, NULL}, e);
    if (!rc && run->is_aq && !run->aq_baseline)
        rc = lwq_recipe_preset(run->aq_qformat, r, e);
    if (!rc && run->is_aq && !run->aq_baseline) {
        for (int i = 0; i < L->nfiles; i++)
            yfile_free(L->files[i]);
        free(L->ents);
        free(L);
        return 0;
    }
    /* a ptq recipe, or an auto_quantize recipe's fixed baseline (its quantize block and what that imports) */
    if (!rc)
        rc = load_imports_of(L, f, run->aq_baseline ? lwq_y_get(f->body, "quantize") : NULL);
    lwq_mo_algo a = {LWQ_ALGO_MAX, 0, path, LWQ_MSE_RANGE_DEFAULT, {0.25, 4.0, 0.1}, 0};
    const lwq_ynode *qcfg = NULL;
    if (!rc)
        rc = parse_top(L, f, &a, run, &qcfg);
    for (int i = 0; !rc && i < qcfg->n; i++)
        rc = add_item(L, f, qcfg->kids[i]);
    if (!rc) {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t n = strlen(base) - (has_suffix(base, ".yaml") ? 5 : has_suffix(base, ".yml") ? 4 : 0);
        snprintf(r->name, sizeof r->name, "%.*s", (int)(n < 63 ? n : 63), base);
        r->algo = a.method;
        r->fp8_scale_sweep = a.sweep;
        r->mse_range = a.mse_range;
        memcpy(r->mse_mult, a.mse_mult, sizeof r->mse_mult);
        r->gptq_damp = 0.01; /* lwq's default, as its JSON recipes have */
        rc = lwq_qcfg_compile(L->ents, L->n, &a, path, r, e);
    }
    for (int i = 0; i < L->nfiles; i++)
        yfile_free(L->files[i]);
    free(L->ents);
    free(L);
    if (rc)
        lwq_recipe_free(r);
    return rc;
}

int lwq_recipe_find(const char *arg, const char *root, char *out, size_t cap, int *is_yaml, lwq_error *e)
{
    struct stat st;
    if (stat(arg, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "--recipe %s is a directory (directory recipes, metadata.yml + "
                            "quantize.yml, are not supported)", arg);
        if (snprintf(out, cap, "%s", arg) >= (int)cap)
            return lwq_errf(e, LWQ_EINVAL, "--recipe %s: path too long", arg);
        *is_yaml = is_yaml_name(arg);
        return 0;
    }
    if (!root)
        return lwq_errf(e, LWQ_ENOENT, "--recipe %s: no such file (a recipe name resolves under --recipe-root DIR or "
                        "$LWQ_RECIPE_ROOT)", arg);
    char rr[PATH_MAX], real[PATH_MAX];
    if (!realpath(root, rr))
        return lwq_errsys(e, -errno, "recipe root %s", root);
    int rc = resolve_under(rr, arg, real, e, "--recipe");
    if (rc)
        return rc;
    if (snprintf(out, cap, "%s", real) >= (int)cap)
        return lwq_errf(e, LWQ_EINVAL, "--recipe %s: path too long", arg);
    *is_yaml = 1;
    return 0;
}
