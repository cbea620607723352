#include "core/sys/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int k_open(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags, mode);
    return fd < 0 ? -errno : fd;
}

static int k_fstat(int fd, struct stat *st) { return fstat(fd, st) != 0 ? -errno : 0; }

static ssize_t k_pread(int fd, void *buf, size_t n, off_t off)
{
    ssize_t r = pread(fd, buf, n, off);
    return r < 0 ? -errno : r;
}

static int k_close(int fd) { return close(fd) != 0 ? -errno : 0; }

static const lwq_file_ops kernel_ops = {k_open, k_fstat, k_pread, k_close};

int lwq_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len, lwq_error *e)
{
    return lwq_file_read_all_ops(&kernel_ops, path, max_bytes, out, len, e);
}

const char *lwq_file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    return "not a plain file";
}

int lwq_file_open_regular_ops(const lwq_file_ops *ops, const char *path, int flags, struct stat *st,
                              lwq_error *e)
{
    int fd = ops->open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags, 0);
    if (fd < 0) {
        lwq_errsys(e, fd, "%s: cannot open", path);
        return fd;
    }
    struct stat sb;
    int rc = ops->fstat(fd, &sb);
    if (rc < 0) {
        ops->close(fd);
        return lwq_errsys(e, rc, "%s: cannot stat", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        ops->close(fd);
        return lwq_errf(e, LWQ_EFORMAT, "%s: not a regular file (%s); lwq reads only regular files", path,
                        lwq_file_kind(sb.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        rc = -errno;
        ops->close(fd);
        return lwq_errsys(e, rc, "%s: cannot clear O_NONBLOCK", path);
    }
    if (st)
        *st = sb;
    return fd;
}

int lwq_file_open_regular(const char *path, int flags, struct stat *st, lwq_error *e)
{
    return lwq_file_open_regular_ops(&kernel_ops, path, flags, st, e);
}

int lwq_file_read_all_ops(const lwq_file_ops *ops, const char *path, size_t max_bytes, char **out,
                          size_t *len, lwq_error *e)
{
    *out = NULL;
    if (len)
        *len = 0;
    struct stat st;
    int fd = lwq_file_open_regular_ops(ops, path, 0, &st, e);
    if (fd < 0)
        return fd;
    if (st.st_size < 0 || (unsigned long long)st.st_size > max_bytes) {
        ops->close(fd);
        return lwq_errf(e, LWQ_EFORMAT, "%s: %lld bytes, over the byte limit for this kind of file (%zu allowed)",
                        path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        ops->close(fd);
        return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = ops->pread(fd, buf + got, n - got, (off_t)got);
        if (r == -EINTR)
            continue;
        if (r < 0) {
            free(buf);
            ops->close(fd);
            return lwq_errsys(e, (int)r, "%s: read failed at byte %zu", path, got);
        }
        if (r == 0)
            break; /* shrank while reading: take what is there */
        got += (size_t)r;
    }
    ops->close(fd);
    buf[got] = 0;
    *out = buf;
    if (len)
        *len = got;
    return 0;
}

int lwq_pathf(lwq_error *e, char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap)
        return lwq_errf(e, LWQ_EINVAL, "path too long (%d bytes, at most %zu): %.200s...", n, cap - 1, out);
    return 0;
}
