/* core/sys/file.h — small whole-file helpers for bounded reads of untrusted text files (configs,
 * recipes, index files).  Large binary data never goes through here. */
#ifndef LWQ_CORE_FILE_H
#define LWQ_CORE_FILE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/sys/error.h"

/* Read all of `path` into a NUL-terminated malloc'd buffer (*len excludes the NUL; len may be
 * NULL).  Anything but a regular file is refused without blocking (lwq_file_open_regular), and so
 * are files larger than `max_bytes`
 * (LWQ_EFORMAT naming the file and both sizes), without being read.  A file that shrinks while
 * it is read gives what it holds. */
int lwq_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len, lwq_error *e);

/* The system calls that read goes through, each returning >= 0 or -errno.  lwq_file_read_all
 * uses the kernel's; io/durable.c's lwq_durable_read_file passes io/sys.h's table, so fault
 * injection reaches the reads of the resume state.  One implementation for both. */
typedef struct lwq_file_ops {
    int (*open)(const char *path, int flags, mode_t mode);
    int (*fstat)(int fd, struct stat *st);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    int (*close)(int fd);
} lwq_file_ops;
int lwq_file_read_all_ops(const lwq_file_ops *ops, const char *path, size_t max_bytes, char **out,
                          size_t *len, lwq_error *e);

/* Open `path` read-only (with extra `flags` such as O_DIRECT) without ever blocking on a special
 * file: it is opened O_NONBLOCK (a FIFO without a writer blocks a plain open() forever, past
 * SIGTERM), anything but a regular file is refused (LWQ_EFORMAT "PATH: not a regular file (a
 * FIFO)"), then O_NONBLOCK is cleared, so reads (io_uring included) behave as on any file.  Every
 * file lwq reads from its inputs is opened this way.  Returns the fd, or a negative code with `e`
 * filled (the open's own -errno is returned as is, so a caller may retry without O_DIRECT);
 * *st (may be NULL) receives the file's status. */
int lwq_file_open_regular(const char *path, int flags, struct stat *st, lwq_error *e);
int lwq_file_open_regular_ops(const lwq_file_ops *ops, const char *path, int flags, struct stat *st,
                              lwq_error *e);
/* "a FIFO", "a directory", "a socket", ... for messages about a mode that is not S_ISREG. */
const char *lwq_file_kind(mode_t mode);

/* snprintf for paths: LWQ_EINVAL "path too long: ..." instead of a silently truncated name. */
int lwq_pathf(lwq_error *e, char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#endif
