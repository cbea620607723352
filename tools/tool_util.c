/* tools/tool_util.c — helpers shared by the subcommands (see tool_util.h). */
#include "tools/tool_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "core/parallel/ranks.h"

int lwq_tool_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno) {
        fprintf(stderr, "lwq: %s expects an integer, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "lwq: %s %lld is outside [%lld, %lld]\n", opt, v, (long long)lo,
                (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

const char *lwq_tool_bytes(uint64_t b, char *buf, size_t cap)
{
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    if (i == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)b);
    else
        snprintf(buf, cap, "%.1f %s", v, u[i]);
    return buf;
}

int lwq_tool_write_file(const char *path, const void *data, size_t n, lwq_error *e)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return lwq_errsys(e, -errno, "%s: create", path);
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int rc = lwq_errsys(e, w < 0 ? -errno : LWQ_EIO, "%s: write", path);
            close(fd);
            return rc;
        }
        p += w;
        n -= (size_t)w;
    }
    if (close(fd) != 0)
        return lwq_errsys(e, -errno, "%s: close", path);
    return 0;
}


int lwq_tool_job_alone(const char *command)
{
    if (!lwq_ranks_built_with_mpi() || !lwq_ranks_launched())
        return 0;
    lwq_ranks rk;
    lwq_ranks_job job;
    lwq_error e = {0};
    memset(&job, 0, sizeof job);
    int rc = lwq_ranks_init(NULL, NULL, &rk, &e);
    if (rc == 0) {
        lwq_ranks_job_command(&job, command);
        rc = lwq_ranks_agree_job(&rk, 0, &job, &e);
    }
    lwq_ranks_job_free(&job);
    if (rc && (rk.rank == 0 || !rk.agreed))
        fprintf(stderr, "lwq: %s\n", e.msg[0] ? e.msg : lwq_strerror(rc));
    if (rc && rk.agreed) { /* no rank leaves before rank 0 has said it */
        fflush(stderr);
        lwq_ranks_barrier(&rk, NULL);
    }
    lwq_ranks_finalize(&rk);
    return rc ? 2 : 0;
}
