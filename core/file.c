#include "core/file.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int lwq_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len, lwq_error *e)
{
    *out = NULL;
    if (len)
        *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lwq_errsys(e, -errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = -errno;
        close(fd);
        return lwq_errsys(e, rc, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return lwq_errf(e, LWQ_EFORMAT, "%s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        close(fd);
        return lwq_errf(e, LWQ_EFORMAT, "%s: %lld bytes, over the %zu byte limit for this kind of file",
                        path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int rc = -errno;
            free(buf);
            close(fd);
            return lwq_errsys(e, rc, "%s: read failed at byte %zu", path, got);
        }
        if (r == 0)
            break; /* shrank while reading: take what is there */
        got += (size_t)r;
    }
    close(fd);
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
