/* core/file.h — small whole-file helpers for bounded reads of untrusted text files (configs,
 * recipes, index files).  Large binary data never goes through here. */
#ifndef LWQ_CORE_FILE_H
#define LWQ_CORE_FILE_H

#include <stddef.h>

#include "core/error.h"

/* Read all of `path` into a NUL-terminated malloc'd buffer.  Files larger than `max_bytes` are
 * refused (LWQ_EFORMAT naming the file and both sizes) without being read. */
int lwq_file_read_all(const char *path, size_t max_bytes, char **out, size_t *len, lwq_error *e);

#endif
