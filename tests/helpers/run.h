/* tests/helpers/run.h — run the built `lwq` binary (LWQ_BIN) with posix_spawn, capturing stdout
 * and stderr into files of the test's temp dir.  Header-only `static inline`. */
#ifndef LWQ_TESTS_RUN_H
#define LWQ_TESTS_RUN_H

#include <cjson/cJSON.h>
#include <dirent.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include "tests/helpers/craft.h"
#include "tests/helpers/shell.h"

extern char **environ;

/* Run `lwq args...` (NULL-terminated); stdout -> <tmp>/out.txt, stderr -> <tmp>/err.txt.
 * Returns the exit status. */
static inline int lwqt_run(const char *const *args)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = lwqt_bin();
    for (int i = 0; args[i] && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    /* Own buffers: lwqt_path's rotating ones may hold this call's arguments. */
    char op[512], ep[512];
    snprintf(op, sizeof op, "%s/out.txt", lwqt_dir);
    snprintf(ep, sizeof ep, "%s/err.txt", lwqt_dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, op, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0, "cannot spawn %s", argv[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "%s did not exit normally", argv[0]);
    return WEXITSTATUS(st);
}

/* Whole file as a NUL-terminated malloc'd string. */
static inline char *lwqt_slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, fp), (size_t)n);
    b[n] = 0;
    fclose(fp);
    return b;
}

static inline char *lwqt_out(void) { return lwqt_slurp(lwqt_path("out.txt")); }
static inline char *lwqt_err(void) { return lwqt_slurp(lwqt_path("err.txt")); }

/* Copy every regular file of directory `src` into `dst` (created). */
static inline void lwqt_copy_dir(const char *src, const char *dst)
{
    cr_assert(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    DIR *d = opendir(src);
    cr_assert_not_null(d);
    struct dirent *de;
    static char buf[1 << 20];
    while ((de = readdir(d)) != NULL) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", src, de->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, de->d_name);
        struct stat st;
        if (stat(a, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        int fi = open(a, O_RDONLY), fo = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        cr_assert(fi >= 0 && fo >= 0);
        ssize_t r;
        while ((r = read(fi, buf, sizeof buf)) > 0)
            cr_assert_eq(write(fo, buf, (size_t)r), r);
        close(fi);
        close(fo);
    }
    closedir(d);
}

/* The JSON file at `path` (a full path, or lwqt_path(name)), parsed; the caller deletes it. */
static inline cJSON *lwqt_json(const char *path)
{
    char *t = lwqt_slurp(path);
    cJSON *j = cJSON_Parse(t);
    free(t);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

/* The number o[k]; the test fails when it is not one. */
static inline double lwqt_num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return v->valuedouble;
}

#endif
