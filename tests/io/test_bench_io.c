/* tests/io/test_bench_io.c — `lwq bench-io`: JSON output per mode, and usage errors. */
#include "tests/helpers/io_testutil.h"

#include <sys/wait.h>

static int run(const char *args, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' bench-io %s 2>&1", LWQ_BIN, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(bench_io, json_line_per_mode_with_required_fields)
{
    char dir[64], file[128], args[512], out[8192];
    tu_tmpdir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/data.bin", dir);
    tu_write_pattern(file, (3u << 20) + 100, 3);
    snprintf(args, sizeof args, "'%s' --json --qd 4 --block 0.5 --window 1 --mode all", file);
    cr_assert_eq(run(args, out, sizeof out), 0, "%s", out);
    const char *modes[] = {"uring-direct-reg", "uring-direct", "pread", "mmap"};
    for (int m = 0; m < 4; m++) {
        char key[64];
        snprintf(key, sizeof key, "{\"mode\":\"%s\",\"bytes\":3145828,", modes[m]);
        const char *line = strstr(out, key);
        cr_assert_not_null(line, "no line for %s in:\n%s", modes[m], out);
        cr_assert(strstr(line, "\"seconds\":") && strstr(line, "\"gbps\":") &&
                  strstr(line, "\"qd\":") && strstr(line, "\"block_bytes\":"), "%s", line);
    }
    cr_assert(strstr(out, "\"block_bytes\":524288"), "%s", out);
    tu_rmrf(dir);
}

Test(bench_io, missing_file_and_bad_options_exit_2)
{
    char out[4096];
    cr_assert_eq(run("/nonexistent/lwq-file", out, sizeof out), 2);
    cr_assert(strstr(out, "/nonexistent/lwq-file"), "%s", out);
    cr_assert_eq(run("/etc/hostname --qd 0", out, sizeof out), 2);
    cr_assert(strstr(out, "--qd 0"), "%s", out);
    cr_assert_eq(run("/etc/hostname --mode fast", out, sizeof out), 2);
    cr_assert(strstr(out, "unknown --mode fast"), "%s", out);
    cr_assert_eq(run("/etc/hostname --block 0.001", out, sizeof out), 2);
}
