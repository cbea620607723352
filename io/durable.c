/* io/durable.c — durable writes.
 *
 * Invariants (what a reader of the directory can rely on, at any crash point):
 *  1. A final name never holds a partial file: bytes are written only to "<path>.tmp".
 *  2. The temp file is fsync'ed (lwq_durable_commit step a) BEFORE it is renamed
 *     (step c), so a crash after the rename cannot expose unsynced data under the final name.
 *  3. rename() replaces the final name atomically (same directory), and the directory is
 *     fsync'ed (step d) before commit returns 0, so a 0 return means the name survives a crash.
 *  4. Any failure before step c leaves the final name untouched (old content or absent) and
 *     removes the temp file; a failure of step d removes the final name as well, because its
 *     durability is unknown.  Callers commit (e.g. name the file in a manifest) only after 0.
 *  5. lwq writes only files it made: a temp file is created with O_CREAT | O_EXCL
 *     (lwq_durable_create), never opened, truncated or followed when something is at its path;
 *     a leftover of lwq's own (a regular file with one link, of this user) is unlinked first,
 *     anything else (a symbolic link, a FIFO, a file with another hard link, another user's) is
 *     refused.  The one file lwq keeps and opens again, the run lock, passes the same checks
 *     before it is touched (lwq_durable_open_own).
 *
 * Order inside lwq_durable_commit, one function per step:
 *   a. fsync(tmp fd)                 sys->fsync
 *   b. close(tmp fd)                 sys->close (a close error is reported: NFS reports write
 *                                    errors here)
 *   c. rename(tmp, path)             sys->rename
 *   d. fsync(directory of path)      lwq_durable_fsync_parent
 */
#include "io/durable.h"

#include "core/sys/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/sys.h"

/* Consecutive EINTR / zero-byte results tolerated before giving up on a call. */
#define MAX_RETRIES 1000

/* fsync may report EINTR when a signal arrives; that says nothing about the data, so retry. */
static int fsync_retry(int fd)
{
    int rc;
    int tries = 0;
    do
        rc = lwq_sys()->fsync(fd);
    while (rc == -EINTR && ++tries < MAX_RETRIES);
    return rc;
}

int lwq_durable_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what,
                           lwq_error *e)
{
    const char *p = buf;
    int stalls = 0;
    while (n > 0) {
        ssize_t r = lwq_sys()->pwrite(fd, p, n, (off_t)off);
        if (r == -EINTR || r == -EAGAIN || r == 0) {
            if (++stalls > MAX_RETRIES)
                return lwq_errf(e, LWQ_EIO, "write %s at offset %llu: no progress after %d tries",
                                what, (unsigned long long)off, MAX_RETRIES);
            continue;
        }
        if (r < 0)
            return lwq_errsys(e, (int)r, "write %s at offset %llu (%zu bytes)", what,
                              (unsigned long long)off, n);
        stalls = 0;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int lwq_durable_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *what,
                          lwq_error *e)
{
    char *p = buf;
    int stalls = 0;
    while (n > 0) {
        ssize_t r = lwq_sys()->pread(fd, p, n, (off_t)off);
        if (r == -EINTR || r == -EAGAIN) {
            if (++stalls > MAX_RETRIES)
                return lwq_errf(e, LWQ_EIO, "read %s at offset %llu: no progress after %d tries",
                                what, (unsigned long long)off, MAX_RETRIES);
            continue;
        }
        if (r < 0)
            return lwq_errsys(e, (int)r, "read %s at offset %llu (%zu bytes)", what,
                              (unsigned long long)off, n);
        if (r == 0)
            return lwq_errf(e, LWQ_EIO, "read %s: file ends at byte %llu, needed %zu more bytes",
                            what, (unsigned long long)off, n);
        stalls = 0;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* The bounded whole-file read is core/sys/file.c's; only its system calls come from the table. */
static int sys_open(const char *path, int flags, mode_t mode) { return lwq_sys()->open(path, flags, mode); }
static int sys_fstat(int fd, struct stat *st) { return lwq_sys()->fstat(fd, st); }
static ssize_t sys_pread(int fd, void *buf, size_t n, off_t off) { return lwq_sys()->pread(fd, buf, n, off); }
static int sys_close(int fd) { return lwq_sys()->close(fd); }

static const lwq_file_ops sys_file_ops = {sys_open, sys_fstat, sys_pread, sys_close};

int lwq_durable_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                          lwq_error *e)
{
    return lwq_file_read_all_ops(&sys_file_ops, path, max_bytes, out, len, e);
}

int lwq_durable_open_regular(const char *path, int flags, struct stat *st, lwq_error *e)
{
    return lwq_file_open_regular_ops(&sys_file_ops, path, flags, st, e);
}

/* What is at `path` (lstat'ed into st) when lwq is about to make a file of its own there: 0 when
 * it is a leftover lwq may remove (a regular file with one link, of this user: a temp file of an
 * attempt that died before its rename), else LWQ_EINVAL naming it.  A file with another hard link
 * is another file's name: writing it would write that file, wherever it is. */
static int check_own(const char *path, const struct stat *st, const char *what, lwq_error *e)
{
    if (S_ISLNK(st->st_mode))
        return lwq_errf(e, LWQ_EINVAL, "%s: %s is a symbolic link; lwq writes only files of its own there (remove it)",
                        path, what);
    if (!S_ISREG(st->st_mode))
        return lwq_errf(e, LWQ_EINVAL, "%s: %s is not a regular file (a FIFO?); remove it", path, what);
    if (st->st_nlink != 1)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s has %lu hard links (it is also another file); lwq writes only files of "
                        "its own there (remove it)", path, what, (unsigned long)st->st_nlink);
    if (st->st_uid != geteuid())
        return lwq_errf(e, LWQ_EINVAL, "%s: %s belongs to another user (uid %lu); lwq writes only files of its own "
                        "there (remove it)", path, what, (unsigned long)st->st_uid);
    return 0;
}

int lwq_durable_create(const char *path, int flags, mode_t mode, const char *what, lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    for (int attempt = 0; attempt < 8; attempt++) {
        /* O_EXCL: the file is new, made by this call; nothing at the path is followed or opened */
        int fd = s->open(path, (flags & O_ACCMODE) | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0)
            return fd;
        if (fd != -EEXIST)
            return lwq_errsys(e, fd, "create %s", path);
        struct stat st;
        if (lstat(path, &st) != 0) {
            if (errno == ENOENT)
                continue; /* gone meanwhile */
            return lwq_errsys(e, -errno, "lstat %s", path);
        }
        int rc = check_own(path, &st, what, e);
        if (rc)
            return rc;
        /* unlink removes a name; it never writes the file, even if that name changed meanwhile */
        if ((rc = s->unlink(path)) < 0 && rc != -ENOENT)
            return lwq_errsys(e, rc, "%s: cannot remove the stale %s", path, what);
    }
    return lwq_errf(e, LWQ_ESTATE, "%s: %s keeps reappearing; is another program writing there?", path, what);
}

int lwq_durable_open_own(const char *path, int flags, mode_t mode, uint64_t max_bytes, const char *what,
                         lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    /* no O_TRUNC: nothing is changed before the checks on what was opened */
    int fd = s->open(path, (flags & O_ACCMODE) | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd == -ELOOP)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s is a symbolic link; lwq writes only files of its own there (remove it)",
                        path, what);
    if (fd == -ENXIO) /* a FIFO without a reader, opened for writing */
        return lwq_errf(e, LWQ_EINVAL, "%s: %s is not a regular file (a FIFO?); remove it", path, what);
    if (fd < 0)
        return lwq_errsys(e, fd, "open %s", path);
    struct stat st;
    int rc = s->fstat(fd, &st);
    if (rc < 0) {
        s->close(fd);
        return lwq_errsys(e, rc, "fstat %s", path);
    }
    if ((rc = check_own(path, &st, what, e)) == 0 && (uint64_t)st.st_size > max_bytes)
        rc = lwq_errf(e, LWQ_EINVAL, "%s: %s holds %lld bytes, more than the %llu lwq writes there: not a file of "
                      "lwq's (remove it)", path, what, (long long)st.st_size, (unsigned long long)max_bytes);
    int fl;
    if (rc == 0 && ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
        rc = lwq_errsys(e, -errno, "fcntl %s", path);
    if (rc) {
        s->close(fd);
        return rc;
    }
    return fd;
}

int lwq_durable_fsync_dir(const char *dir, lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    int fd = s->open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return lwq_errsys(e, fd, "open directory %s for fsync", dir);
    int rc = fsync_retry(fd);
    int crc = s->close(fd);
    if (rc < 0)
        return lwq_errsys(e, rc, "fsync directory %s", dir);
    if (crc < 0)
        return lwq_errsys(e, crc, "close directory %s", dir);
    return 0;
}

int lwq_durable_fsync_parent(const char *path, lwq_error *e)
{
    char dir[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof dir)
        return lwq_errf(e, LWQ_EINVAL, "path too long (%zu bytes): %.64s...", n, path);
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return lwq_durable_fsync_dir(".", e);
    if (slash == dir)
        slash[1] = 0; /* "/file" -> "/" */
    else
        *slash = 0;
    return lwq_durable_fsync_dir(dir, e);
}

int lwq_durable_open(lwq_durable_file *f, const char *path, lwq_error *e)
{
    f->fd = -1;
    f->size = 0;
    size_t n = strlen(path);
    if (n == 0 || n + 5 > sizeof f->tmp)
        return lwq_errf(e, LWQ_EINVAL, "bad output path (%zu bytes): %.64s", n, path);
    memcpy(f->path, path, n + 1);
    memcpy(f->tmp, path, n);
    memcpy(f->tmp + n, ".tmp", 5);
    int fd = lwq_durable_create(f->tmp, O_WRONLY, 0644, "the temporary file", e);
    if (fd < 0)
        return fd;
    f->fd = fd;
    return 0;
}

int lwq_durable_append(lwq_durable_file *f, const void *data, size_t len, lwq_error *e)
{
    if (f->fd < 0)
        return lwq_errf(e, LWQ_EINVAL, "append to %s: file is not open", f->tmp);
    int rc = lwq_durable_pwrite_all(f->fd, data, len, f->size, f->tmp, e);
    if (rc < 0)
        return rc;
    f->size += len;
    return 0;
}

int lwq_durable_pwrite(lwq_durable_file *f, const void *data, size_t len, uint64_t off,
                       lwq_error *e)
{
    if (f->fd < 0)
        return lwq_errf(e, LWQ_EINVAL, "write to %s: file is not open", f->tmp);
    if (off > f->size || len > f->size - off)
        return lwq_errf(e, LWQ_EINVAL, "write to %s: bytes [%llu, %llu) past the %llu written",
                        f->tmp, (unsigned long long)off, (unsigned long long)(off + len),
                        (unsigned long long)f->size);
    return lwq_durable_pwrite_all(f->fd, data, len, off, f->tmp, e);
}

void lwq_durable_abort(lwq_durable_file *f)
{
    if (f->fd >= 0) {
        lwq_sys()->close(f->fd);
        f->fd = -1;
        lwq_sys()->unlink(f->tmp);
    }
}

int lwq_durable_commit(lwq_durable_file *f, lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    if (f->fd < 0)
        return lwq_errf(e, LWQ_EINVAL, "commit %s: file is not open", f->tmp);
    int rc = fsync_retry(f->fd); /* step a */
    if (rc < 0) {
        lwq_errsys(e, rc, "fsync %s", f->tmp);
        lwq_durable_abort(f);
        return rc;
    }
    rc = s->close(f->fd); /* step b */
    f->fd = -1;
    if (rc < 0) {
        s->unlink(f->tmp);
        return lwq_errsys(e, rc, "close %s", f->tmp);
    }
    rc = s->rename(f->tmp, f->path); /* step c */
    if (rc < 0) {
        s->unlink(f->tmp);
        return lwq_errsys(e, rc, "rename %s -> %s", f->tmp, f->path);
    }
    rc = lwq_durable_fsync_parent(f->path, e); /* step d */
    if (rc < 0) {
        s->unlink(f->path);
        return rc;
    }
    return 0;
}

int lwq_durable_write_file(const char *path, const void *data, size_t len, lwq_error *e)
{
    lwq_durable_file f;
    int rc = lwq_durable_open(&f, path, e);
    if (rc < 0)
        return rc;
    rc = lwq_durable_append(&f, data, len, e);
    if (rc < 0) {
        lwq_durable_abort(&f);
        return rc;
    }
    return lwq_durable_commit(&f, e);
}

int lwq_durable_rename(const char *from, const char *to, lwq_error *e)
{
    int rc = lwq_sys()->rename(from, to);
    if (rc < 0)
        return lwq_errsys(e, rc, "rename %s -> %s", from, to);
    return lwq_durable_fsync_parent(to, e);
}

int lwq_durable_unlink(const char *path, lwq_error *e)
{
    int rc = lwq_sys()->unlink(path);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return lwq_errsys(e, rc, "unlink %s", path);
    return lwq_durable_fsync_parent(path, e);
}

/* mkdir + fsync of the parent; `follow`: whether a symbolic link to a directory at the path is
 * taken for the directory (only for the ones the command line names). */
static int mkdir_at(const char *path, int follow, int *created, lwq_error *e)
{
    int rc = lwq_sys()->mkdir(path, 0755);
    if (created)
        *created = rc == 0;
    if (rc != 0 && rc != -EEXIST)
        return lwq_errsys(e, rc, "%s: cannot create directory", path);
    struct stat st;
    if (rc != 0) {
        if (lstat(path, &st) != 0)
            return lwq_errsys(e, -errno, "%s: cannot stat", path);
        if (S_ISLNK(st.st_mode) && !follow)
            return lwq_errf(e, LWQ_EINVAL, "%s is a symbolic link; lwq makes the directories below the output and "
                            "resume directories itself and does not follow a link there (remove it)", path);
        if ((S_ISLNK(st.st_mode) && stat(path, &st) != 0) || !S_ISDIR(st.st_mode))
            return lwq_errf(e, LWQ_EINVAL, "%s exists and is not a directory", path);
    }
    return lwq_durable_fsync_parent(path, e);
}

int lwq_durable_mkdir(const char *path, int *created, lwq_error *e) { return mkdir_at(path, 0, created, e); }

int lwq_durable_mkdir_named(const char *path, int *created, lwq_error *e) { return mkdir_at(path, 1, created, e); }
