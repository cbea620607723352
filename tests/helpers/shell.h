/* tests/helpers/shell.h — for the tests that drive the built `lwq` binary (LWQ_BIN) through the
 * shell: the binary's path, a printf-style shell runner, and a temp dir made and removed per
 * test.  Header-only `static inline`. */
#ifndef LWQ_TESTS_SHELL_H
#define LWQ_TESTS_SHELL_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static inline const char *lwqt_bin(void)
{
    const char *b = getenv("LWQ_BIN");
    return b && *b ? b : LWQ_BIN;
}

/* Run a shell command made like printf; returns its exit status, 128+signal when it was killed,
 * -1 when no shell could be started. */
static inline int lwqt_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int lwqt_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof cmd, "shell command longer than %zu bytes", sizeof cmd);
    int st = system(cmd);
    if (st == -1)
        return -1;
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* <the source tree>/rel (static buffer), found from this header's own path. */
static inline const char *lwqt_source_path(const char *rel)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/helpers/");
    cr_assert_not_null(cut, "%s is not under tests/helpers/", me);
    cr_assert((size_t)snprintf(path, sizeof path, "%.*s%s", (int)(cut - me), me, rel) < sizeof path);
    return path;
}

/* dir (cap bytes) = a new directory /tmp/<prefix>-XXXXXX. */
static inline void lwqt_tmpdir(char *dir, size_t cap, const char *prefix)
{
    cr_assert((size_t)snprintf(dir, cap, "/tmp/%s-XXXXXX", prefix) < cap);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp /tmp/%s-XXXXXX", prefix);
}

/* rm -rf dir (made by lwqt_tmpdir). */
static inline void lwqt_rmtree(const char *dir)
{
    cr_assert_eq(lwqt_sh("rm -rf '%s'", dir), 0, "rm -rf %s", dir);
}

#endif
