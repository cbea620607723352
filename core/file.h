/* core/file.h — small whole-file helpers for bounded reads of untrusted text files (configs,
 * recipes, index files).  Large binary data never goes through here. */
#ifndef LWQ_CORE_FILE_H
#define LWQ_CORE_FILE_H

#include <stddef.h>

#include "core/error.h"

/* Read all of `path` into a NUL-terminated malloc'd buffer.  Files larger than `max_bytes` are
 * refused (LWQ_EFORMAT naming the file and both sizes) without being read. */
int lwq_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len, lwq_error *e);



/* snprintf for paths: LWQ_EINVAL "path too long: ..." instead of a silently truncated name. */
int lwq_pathf(lwq_error *e, char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#endif
