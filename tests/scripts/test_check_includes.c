/* scripts/check-includes.sh on a copy of the tree: it passes as the tree is, and fails, naming the arrow, when a file adds an include or a call that points up (between engine's subfolders, between folders) or a call cycle, or sits in engine/ outside the subfolders. */
#include <criterion/criterion.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/shell.h"

static char tree[256];  /* the copy: core layout text io kernels engine tools scripts */
static char objs[2048]; /* the build's object folders, then the copy's own (obj/) */

/* <repo>/ from this file's path */
static void repo_root(char *out, size_t cap)
{
    const char *me = __FILE__, *cut = strstr(me, "tests/scripts/");
    cr_assert_not_null(cut, "%s: not under tests/scripts/", me);
    cr_assert((size_t)snprintf(out, cap, "%.*s", (int)(cut - me), me) < cap);
}

static void setup(void)
{
    char root[1024], bin[1024];
    repo_root(root, sizeof root);
    lwqt_tmpdir(tree, sizeof tree, "lwq-check-includes");
    cr_assert_eq(lwqt_sh("cd '%s' && cp -r core layout text io kernels engine tools scripts '%s'/",
                         root, tree), 0, "copy the tree into %s", tree);
    snprintf(bin, sizeof bin, "%s", lwqt_bin());
    const char *build = dirname(bin);
    cr_assert((size_t)snprintf(objs, sizeof objs,
                               "'%s/CMakeFiles/lwq.dir' '%s/CMakeFiles/lwq_cli.dir' "
                               "'%s/CMakeFiles/lwq_cuda_kernels.dir' '%s/CMakeFiles/lwq_cuda.dir' "
                               "'%s/obj'",
                               build, build, build, build, tree) < sizeof objs);
}

static void teardown(void)
{
    lwqt_rmtree(tree);
}

TestSuite(check_includes, .init = setup, .fini = teardown);

/* Run the copy's checker; its output in *out (malloc'd).  Returns its exit status. */
static int check(char **out)
{
    int rc = lwqt_sh("'%s/scripts/check-includes.sh' %s >'%s/out.txt' 2>&1", tree, objs, tree);
    char path[512];
    snprintf(path, sizeof path, "%s/out.txt", tree);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    *out = strdup(buf);
    return rc;
}

/* Append one line to a file of the copy. */
static void append(const char *file, const char *line)
{
    cr_assert_eq(lwqt_sh("printf '%%s\\n' '%s' >>'%s/%s'", line, tree, file), 0, "%s", file);
}

/* A new source file in the copy, and its object in the copy's obj/ (named as CMake names it). */
static void add_compiled(const char *file, const char *code)
{
    cr_assert_eq(lwqt_sh("printf '%%s\\n' '%s' >'%s/%s' && mkdir -p \"$(dirname '%s/obj/%s')\" && "
                         "cc -c -o '%s/obj/%s.o' '%s/%s'",
                         code, tree, file, tree, file, tree, file, tree, file),
                 0, "compile %s", file);
}

/* The checker refuses the copy (exit 1), its output naming each of the NULL-ended needles. */
static void expect_refused(const char *what, ...)
{
    char *out;
    int rc = check(&out);
    cr_expect_eq(rc, 1, "%s passed:\n%s", what, out);
    va_list ap;
    va_start(ap, what);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        cr_expect_not_null(strstr(out, needle), "%s: \"%s\" is not in the output:\n%s", what,
                           needle, out);
    va_end(ap);
    free(out);
}

Test(check_includes, passes_on_the_tree_as_it_is)
{
    char *out;
    int rc = check(&out);
    cr_expect_eq(rc, 0, "check-includes failed on an unchanged copy:\n%s", out);
    cr_expect_not_null(strstr(out, "call graph:"), "the call graph was not checked:\n%s", out);
    cr_expect_not_null(strstr(out, "cycles: 0"), "%s", out);
    free(out);
}

Test(check_includes, fails_on_an_include_from_engine_forward_up_into_engine_eval)
{
    append("engine/forward/forward.c", "#include \"engine/eval/eval.h\"");
    expect_refused("an include up from engine/forward/ to engine/eval/",
                   "engine/forward/forward.c -> engine/eval/eval.h: engine/forward/ must not depend "
                   "on engine/eval/", NULL);
}

Test(check_includes, fails_on_an_include_from_engine_quant_up_into_engine_run)
{
    append("engine/quant/qlayer.h", "#include \"engine/run/resume/manifest.h\"");
    expect_refused("an include up from engine/quant/ to engine/run/",
                   "engine/quant/qlayer.h -> engine/run/resume/manifest.h: engine/quant/ must not depend "
                   "on engine/run/", NULL);
}

Test(check_includes, fails_on_an_include_from_a_lower_folder_up_into_engine)
{
    append("layout/arch/arch.c", "#include \"engine/forward/forward.h\"");
    expect_refused("an include up from layout/ to engine/",
                   "layout/arch/arch.c -> engine/forward/forward.h: layout/ must not depend on engine/", NULL);
}

Test(check_includes, fails_on_a_call_from_engine_forward_up_into_engine_eval)
{
    /* a forward file calling lwq eval (engine/eval/eval.c), declared by hand: no include */
    add_compiled("engine/forward/fwd_up.c",
                 "int lwq_eval_run(void);\nint lwq_fwd_up(void) { return lwq_eval_run(); }");
    expect_refused("a call up from engine/forward/ to engine/eval/",
                   "calls that point up:\n  engine/forward/fwd_up.c -> engine/eval/eval.c: "
                   "engine/forward/ must not depend on engine/eval/", NULL);
}

Test(check_includes, fails_on_two_files_calling_each_other)
{
    add_compiled("text/zz_ping.c", "int zz_pong(int);\nint zz_ping(int n) { return n ? zz_pong(n - 1) : 0; }");
    add_compiled("text/zz_pong.c", "int zz_ping(int);\nint zz_pong(int n) { return n ? zz_ping(n - 1) : 1; }");
    expect_refused("a call cycle", "files calling each other:\n-: input contains a loop:\n",
                   "\ntext/zz_ping.c\n", "\ntext/zz_pong.c\n", NULL);
}

Test(check_includes, fails_on_an_engine_file_outside_the_subfolders)
{
    append("engine/new_job.c", "/* a new engine file, not in a subfolder */");
    expect_refused("engine/new_job.c", "engine/new_job.c: engine/ files live in one of", NULL);
}
