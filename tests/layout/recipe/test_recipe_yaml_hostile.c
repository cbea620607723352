/* Recipe YAML as hostile input: aliases, tags, depth, documents, import cycles, escapes, fan-out; name lookup. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers/craft.h"
#include "tests/helpers/check/recipe_refused.h"
#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"
#include "layout/recipe/yaml_doc.h"

static void in_tmp(void)
{
    lwqt_setup();
    cr_assert_eq(chdir(lwqt_dir), 0);
    mkdir("u", 0755);
}

TestSuite(recipe_yaml_hostile, .init = in_tmp, .fini = lwqt_teardown);

#define HEAD "metadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
#define LIST "# modelopt-schema: modelopt.torch.quantization.config.QuantizerCfgListConfig\n"

Test(recipe_yaml_hostile, billion_laughs_aliases_are_refused)
{
    lwqt_recipe_refused("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n",
            "r.yaml:2: YAML aliases (*a) are not supported in recipes");
}

Test(recipe_yaml_hostile, tags_are_refused)
{
    lwqt_recipe_refused("metadata: !!python/object:os.system {recipe_type: ptq}\n",
            "r.yaml:1: YAML tags (tag:yaml.org,2002:python/object:os.system) are not supported in recipes");
}

Test(recipe_yaml_hostile, deep_nesting_is_refused)
{
    char buf[512];
    int k = 0;
    for (int i = 0; i < 70; i++)
        buf[k++] = '[';
    for (int i = 0; i < 70; i++)
        buf[k++] = ']';
    buf[k++] = '\n';
    buf[k] = 0;
    lwqt_recipe_refused(buf, "r.yaml:1: nested deeper than 64 levels");
}

Test(recipe_yaml_hostile, a_third_document_is_refused)
{
    lwqt_recipe_refused("a: 1\n---\nb: 2\n---\nc: 3\n",
            "r.yaml:4: more than 2 YAML documents (a recipe or unit has one, or an imports header and a list)");
}

Test(recipe_yaml_hostile, duplicate_keys_are_refused)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\nmetadata: {recipe_type: ptq}\n", "r.yaml:2: duplicate key \"metadata\"");
}

Test(recipe_yaml_hostile, invalid_yaml_names_the_line)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq\nquantize: 1\n",
            "r.yaml:2: invalid YAML: did not find expected ',' or '}'");
}

Test(recipe_yaml_hostile, too_many_nodes_are_refused)
{
    size_t n = 3 * 100001 + 16;
    char *b = malloc(n);
    size_t k = (size_t)snprintf(b, n, "a: [");
    for (int i = 0; i < 100001; i++)
        k += (size_t)snprintf(b + k, n - k, "1,");
    snprintf(b + k, n - k, "1]\n");
    lwqt_recipe_refused(b, "r.yaml:1: more than 100000 YAML nodes");
    free(b);
}

Test(recipe_yaml_hostile, import_cycles_are_refused)
{
    lwqt_write_str("u/a.yaml", LIST "imports: {b: u/b}\n---\n- $import: b\n");
    lwqt_write_str("u/b.yaml", LIST "imports: {a: u/a}\n---\n- $import: a\n");
    lwqt_recipe_refused("imports: {a: u/a}\n" HEAD "    - $import: a\n",
            "u/b:2: import a (u/a) is already being loaded: circular import");
}

Test(recipe_yaml_hostile, a_self_import_is_a_cycle)
{
    lwqt_write_str("u/a.yaml", LIST "imports: {me: u/a.yaml}\n---\n- $import: me\n");
    lwqt_recipe_refused("imports: {a: u/a}\n" HEAD "    - $import: a\n",
            "u/a:2: import me (u/a.yaml) is already being loaded: circular import");
}

Test(recipe_yaml_hostile, imports_cannot_leave_the_root)
{
    lwqt_recipe_refused("imports: {x: ../etc/passwd}\n" HEAD,
            "r.yaml:1: import x \"../etc/passwd\": the path must be relative to the recipe root, without \"..\"");
    lwqt_recipe_refused("imports: {x: /etc/passwd}\n" HEAD,
            "r.yaml:1: import x \"/etc/passwd\": the path must be relative to the recipe root, without \"..\"");
}

Test(recipe_yaml_hostile, symlinks_cannot_leave_the_root)
{
    cr_assert_eq(symlink("/etc/hostname", "u/link.yaml"), 0);
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "imports: {x: u/link}\n" HEAD);
    cr_assert_neq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0);
    cr_assert(strstr(e.msg, "r.yaml:1: import x \"u/link\": resolves to /etc/hostname, outside the recipe root "),
              "%s", e.msg);
}

Test(recipe_yaml_hostile, missing_imports_name_the_probes)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "imports: {x: u/nothing}\n" HEAD);
    cr_assert_neq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0);
    char want[600];
    snprintf(want, sizeof want, "r.yaml:1: import x \"u/nothing\": no u/nothing.yml or .yaml under the recipe root %s",
             lwqt_dir);
    cr_assert_str_eq(e.msg, want);
}

Test(recipe_yaml_hostile, imports_need_a_schema_comment)
{
    lwqt_write_str("u/a.yaml", "- {quantizer_name: '*', enable: false}\n");
    lwqt_recipe_refused("imports: {a: u/a}\n" HEAD "    - $import: a\n",
            "r.yaml:1: import a (u/a) has no '# modelopt-schema:' comment, which Model Optimizer requires of imported "
            "units");
}

Test(recipe_yaml_hostile, whole_configs_are_not_importable)
{
    lwqt_write_str("u/a.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizeConfig\nalgorithm: max\n");
    lwqt_recipe_refused("imports: {a: u/a}\n" HEAD,
            "r.yaml:1: import a (u/a): modelopt-schema modelopt.torch.quantization.config.QuantizeConfig is not "
            "supported as an import (QuantizerAttributeConfig, QuantizerCfgEntry and QuantizerCfgListConfig are)");
}

Test(recipe_yaml_hostile, unknown_import_names_are_refused)
{
    lwqt_write_str("u/a.yaml", LIST "- {quantizer_name: '*', enable: false}\n");
    lwqt_recipe_refused("imports: {a: u/a}\n" HEAD "    - $import: b\n", "r.yaml:5: $import b: no such name in imports (a)");
}

Test(recipe_yaml_hostile, units_must_fit_where_they_are_spliced)
{
    lwqt_write_str("u/n.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                               "num_bits: e4m3\n");
    lwqt_recipe_refused("imports: {n: u/n}\n" HEAD "    - $import: n\n",
            "r.yaml:5: $import n in quant_cfg names u/n (modelopt.torch.quantization.config.QuantizerAttributeConfig); "
            "a list entry takes a QuantizerCfgEntry or QuantizerCfgListConfig unit");
    lwqt_write_str("u/l.yaml", LIST "- {quantizer_name: '*', enable: false}\n");
    lwqt_recipe_refused("imports: {l: u/l}\n" HEAD "    - {quantizer_name: '*', cfg: {$import: l}}\n",
            "r.yaml:5: $import l in a cfg must name a QuantizerAttributeConfig unit (u/l is "
            "modelopt.torch.quantization.config.QuantizerCfgListConfig)");
}

Test(recipe_yaml_hostile, deep_import_chains_are_refused)
{
    for (int i = 0; i < 20; i++) {
        char name[32], text[256];
        snprintf(name, sizeof name, "u/c%d.yaml", i);
        snprintf(text, sizeof text, LIST "imports: {n: u/c%d}\n---\n- $import: n\n", i + 1);
        lwqt_write_str(name, text);
    }
    lwqt_write_str("u/c20.yaml", LIST "- {quantizer_name: '*', enable: false}\n");
    lwqt_recipe_refused("imports: {c: u/c0}\n" HEAD "    - $import: c\n", "u/c16: imports nested deeper than 16");
}

Test(recipe_yaml_hostile, import_fan_out_is_bounded)
{
    /* each level splices the one below 16 times: 16^5 entries if nothing stopped it */
    for (int i = 0; i < 5; i++) {
        char name[32], text[1024];
        snprintf(name, sizeof name, "u/f%d.yaml", i);
        int k = snprintf(text, sizeof text, LIST "imports: {n: u/f%d}\n---\n", i + 1);
        for (int j = 0; j < 16; j++)
            k += snprintf(text + k, sizeof text - (size_t)k, "- $import: n\n");
        lwqt_write_str(name, text);
    }
    lwqt_write_str("u/f5.yaml", LIST "- {quantizer_name: '*', enable: false}\n");
    lwqt_recipe_refused("imports: {f: u/f0}\n" HEAD "    - $import: f\n",
            "u/f5:2: quant_cfg has more than 4096 entries after imports");
}

Test(recipe_yaml_hostile, names_resolve_under_the_root_with_suffix_probing)
{
    mkdir("general", 0755);
    lwqt_write_str("general/x.yml", "a: 1\n");
    char out[4096];
    int is_yaml = 0;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_find("general/x", ".", out, sizeof out, &is_yaml, &e), 0, "%s", e.msg);
    char want[600];
    snprintf(want, sizeof want, "%s/general/x.yml", lwqt_dir);
    cr_assert_str_eq(out, want);
    cr_assert(is_yaml);
    cr_assert_neq(lwq_recipe_find("general/nothing", NULL, out, sizeof out, &is_yaml, &e), 0);
    cr_assert_str_eq(e.msg, "--recipe general/nothing: no such file (a recipe name resolves under --recipe-root DIR "
                            "or $LWQ_RECIPE_ROOT)");
    memset(&e, 0, sizeof e);
    cr_assert_neq(lwq_recipe_find("general", ".", out, sizeof out, &is_yaml, &e), 0);
    cr_assert_str_eq(e.msg, "--recipe general is a directory (directory recipes, metadata.yml + quantize.yml, are "
                            "not supported)");
    memset(&e, 0, sizeof e);
    cr_assert_neq(lwq_recipe_find("../no-such-recipe-here", ".", out, sizeof out, &is_yaml, &e), 0);
    cr_assert_str_eq(e.msg, "--recipe \"../no-such-recipe-here\": the path must be relative to the recipe root, without \"..\"");
}

Test(recipe_yaml_hostile, scalars_resolve_like_yaml_1_1)
{
    lwq_ydoc d;
    lwq_error e = {0};
    const char *t = "a: yes\nb: 'true'\nc: ~\nd: -1\ne: 2688.0\nf: \"\"\n";
    cr_assert_eq(lwq_yaml_parse("t", t, strlen(t), &d, &e), 0, "%s", e.msg);
    int b = 0;
    long long i = 0;
    double x = 0;
    cr_assert(lwq_y_bool(lwq_y_get(d.docs[0], "a"), &b) == 0 && b == 1);
    cr_assert(lwq_y_bool(lwq_y_get(d.docs[0], "b"), &b) != 0, "a quoted 'true' is a string");
    cr_assert(lwq_y_is_null(lwq_y_get(d.docs[0], "c")));
    cr_assert(lwq_y_int(lwq_y_get(d.docs[0], "d"), &i) == 0 && i == -1);
    cr_assert(lwq_y_number(lwq_y_get(d.docs[0], "e"), &x) == 0 && x == 2688.0);
    cr_assert(!lwq_y_is_null(lwq_y_get(d.docs[0], "f")), "a quoted empty string is not null");
    lwq_yaml_free(&d);
}

Test(recipe_yaml_hostile, nul_bytes_and_long_values_are_refused)
{
    lwq_ydoc d;
    lwq_error e = {0};
    const char nul[] = "a: \"x\\0y\"\n";
    cr_assert_neq(lwq_yaml_parse("t", nul, sizeof nul - 1, &d, &e), 0);
    cr_assert_str_eq(e.msg, "t:1: a value holds a NUL character");
    size_t n = 70000;
    char *b = malloc(n + 8);
    memcpy(b, "a: ", 3);
    memset(b + 3, 'x', n);
    memcpy(b + 3 + n, "\n", 2);
    memset(&e, 0, sizeof e);
    cr_assert_neq(lwq_yaml_parse("t", b, strlen(b), &d, &e), 0);
    cr_assert_str_eq(e.msg, "t:1: a value longer than 65536 bytes");
    free(b);
}

Test(recipe_yaml_hostile, too_many_files_are_refused)
{
    /* a wide DAG of distinct units: 10 imported by the recipe, 7 leaves under each (81 files) */
    char rec[4096];
    int k = snprintf(rec, sizeof rec, "imports:\n");
    for (int i = 0; i < 10; i++) {
        char name[32], text[1024];
        int t = snprintf(text, sizeof text, LIST "imports:\n");
        for (int j = 0; j < 7; j++) {
            char leaf[32];
            snprintf(leaf, sizeof leaf, "u/l%d_%d.yaml", i, j);
            lwqt_write_str(leaf, LIST "- {quantizer_name: '*', enable: false}\n");
            t += snprintf(text + t, sizeof text - (size_t)t, "  l%d: u/l%d_%d\n", j, i, j);
        }
        snprintf(text + t, sizeof text - (size_t)t, "---\n- $import: l0\n");
        snprintf(name, sizeof name, "u/a%d.yaml", i);
        lwqt_write_str(name, text);
        k += snprintf(rec + k, sizeof rec - (size_t)k, "  a%d: u/a%d\n", i, i);
    }
    snprintf(rec + k, sizeof rec - (size_t)k, HEAD);
    lwqt_recipe_refused(rec, "u/l7_6: more than 64 recipe files through imports");
}

Test(recipe_yaml_hostile, intricate_globs_are_bounded)
{
    char rec[2048], glob[600];
    memset(glob, '*', 300); /* every suffix of 300 stars matches ".weight_quantizer" */
    glob[300] = 0;
    snprintf(rec, sizeof rec, HEAD "    - {quantizer_name: '*', enable: false}\n    - {quantizer_name: '%s', enable: false}\n",
             glob);
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", rec);
    cr_assert_neq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0);
    cr_assert(strstr(e.msg, "quantizer_name is too intricate (more than 256 module patterns for one quantizer kind)"),
              "%s", e.msg);
}

Test(recipe_yaml_hostile, the_filesystem_root_as_recipe_root_holds_every_path)
{
    lwqt_write_str("x.yaml", "a: 1\n");
    char out[4096], arg[600];
    int is_yaml = 0;
    lwq_error e = {0};
    snprintf(arg, sizeof arg, "%s/x", lwqt_dir + 1); /* relative to "/" */
    cr_assert_eq(lwq_recipe_find(arg, "/", out, sizeof out, &is_yaml, &e), 0, "%s", e.msg);
    char want[600];
    snprintf(want, sizeof want, "%s/x.yaml", lwqt_dir);
    cr_assert_str_eq(out, want);
}
