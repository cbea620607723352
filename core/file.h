/* core/file.h — small whole-file helpers for bounded reads of untrusted text files (configs,
 * recipes, index files).  Large binary data never goes through here. */
#ifndef LWQ_CORE_FILE_H
#define LWQ_CORE_FILE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/error.h"

/* Read all of `path` into a NUL-terminated malloc'd buffer (*len excludes the NUL; len may be
 * NULL).  Anything but a regular file is refused, and so are files larger than `max_bytes`
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



/* snprintf for paths: LWQ_EINVAL "path too long: ..." instead of a silently truncated name. */
int lwq_pathf(lwq_error *e, char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#endif
