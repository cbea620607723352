/* io/durable.h — durable file writes: temp file, fsync, rename, fsync directory.
 *
 * The small API the writer thread and the resume code (manifest, boundary files) share.  A file
 * written with lwq_durable_write_file() or lwq_durable_open()/..._commit() either exists under
 * its final name with all its bytes on stable storage, or the call failed and the final name was
 * not created or replaced by this call (a stale "<path>.tmp" may remain after a crash; the next
 * lwq_durable_open of the same path removes it and creates a new one).  No call writes through a
 * file it did not create: see lwq_durable_create.  The exact order of steps and the invariants
 * are written at the top of durable.c.
 *
 * Every call goes through the io/sys.h table, so tests inject ENOSPC, EIO, short writes, EINTR
 * and crashes between steps.  Short writes and EINTR are retried here; any other failure is
 * returned as a negative LWQ_E* code with a message naming the step, the path and the offset.
 * Functions are thread-safe as long as two threads do not use the same lwq_durable_file or the
 * same final path at once. */
#ifndef LWQ_IO_DURABLE_H
#define LWQ_IO_DURABLE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "core/sys/error.h"

typedef struct lwq_durable_file {
    int fd;                  /* -1 when closed */
    uint64_t size;           /* bytes appended so far */
    char path[PATH_MAX];     /* final name */
    char tmp[PATH_MAX];      /* "<path>.tmp", in the same directory so rename is atomic */
} lwq_durable_file;

/* Write all `n` bytes at `off`, retrying short writes and EINTR.  `what` names the file. */
int lwq_durable_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what,
                           lwq_error *e);
/* Read exactly `n` bytes at `off`, retrying short reads and EINTR; hitting end of file first is
 * LWQ_EIO "... file ends at byte X". */
int lwq_durable_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *what,
                          lwq_error *e);
/* core/sys/file.h's lwq_file_read_all (bounded, NUL-terminated, regular files only) through the
 * io/sys.h table, for the resume state.  The caller frees *out. */
int lwq_durable_read_file(const char *path, size_t max_bytes, char **out, size_t *len,
                          lwq_error *e);

/* core/sys/file.h's lwq_file_open_regular (read-only, never blocking on a FIFO or device, regular
 * files only) through the io/sys.h table: the fd, or a negative code with `e` filled. */
int lwq_durable_open_regular(const char *path, int flags, struct stat *st, lwq_error *e);

/* Create a new file lwq writes: O_WRONLY or O_RDWR in flags (other bits are ignored), created with
 * O_CREAT | O_EXCL, so the file is this call's own, empty, and never a file that was there.  What
 * is at the path already is a leftover lwq removes first when it is a regular file with one link
 * of this user (a temp file of an attempt that died); a symbolic link, a FIFO or other special
 * file, a file with another hard link (writing it would write that other file) or another user's
 * is refused with LWQ_EINVAL naming `what` and the path.  The fd (close-on-exec), or a negative
 * code with `e` filled. */
int lwq_durable_create(const char *path, int flags, mode_t mode, const char *what, lwq_error *e);

/* Open, creating it when absent, a small file lwq keeps between runs and opens again (the run
 * lock): never truncated here, never through a symbolic link, never blocking on a FIFO; refused
 * (LWQ_EINVAL naming `what` and the path) unless a regular file with one link, of this user, of
 * at most max_bytes.  The caller may then truncate and write it.  The fd, or a negative code. */
int lwq_durable_open_own(const char *path, int flags, mode_t mode, uint64_t max_bytes, const char *what,
                         lwq_error *e);

/* fsync a directory so that a rename or unlink inside it is durable. */
int lwq_durable_fsync_dir(const char *dir, lwq_error *e);
/* fsync the directory that holds `path`. */
int lwq_durable_fsync_parent(const char *path, lwq_error *e);

/* tmp file, write, fsync, rename over `path`, fsync the directory. */
int lwq_durable_write_file(const char *path, const void *data, size_t len, lwq_error *e);

/* Streaming form: create "<path>.tmp" (lwq_durable_create), append, then commit or abort.
 * After a failed append the caller must call lwq_durable_abort. */
int lwq_durable_open(lwq_durable_file *f, const char *path, lwq_error *e);
int lwq_durable_append(lwq_durable_file *f, const void *data, size_t len, lwq_error *e);
/* Overwrite bytes already appended (e.g. a header written last); off + len <= f->size. */
int lwq_durable_pwrite(lwq_durable_file *f, const void *data, size_t len, uint64_t off,
                       lwq_error *e);
/* fsync, close, rename to the final name, fsync the directory.  On failure the temp file is
 * removed, and when only the directory fsync failed the final name is removed too (its
 * durability is unknown, so it must not be trusted); f is closed either way. */
int lwq_durable_commit(lwq_durable_file *f, lwq_error *e);
/* Close and remove the temp file (best effort; a no-op on a closed file). */
void lwq_durable_abort(lwq_durable_file *f);

/* rename + fsync of the directory (both names must be in the same directory). */
int lwq_durable_rename(const char *from, const char *to, lwq_error *e);
/* unlink + fsync of the directory; a missing file is not an error. */
int lwq_durable_unlink(const char *path, lwq_error *e);
/* mkdir + fsync of its parent, so the name survives a crash.  An existing directory is not an
 * error; its parent is synced all the same (an earlier attempt may have died between its mkdir
 * and that fsync).  An existing non-directory is LWQ_EINVAL naming it, and so is a symbolic link:
 * a directory lwq makes below the output or resume directory is never a link to elsewhere (it
 * would take what lwq writes there out of them).  *created (may be NULL) says whether this call
 * made the directory. */
int lwq_durable_mkdir(const char *path, int *created, lwq_error *e);
/* lwq_durable_mkdir for a directory the command line names (the output and resume directories):
 * a symbolic link to a directory there is the user's choice, like any path given, and is used. */
int lwq_durable_mkdir_named(const char *path, int *created, lwq_error *e);

#endif
