/* tools/tool_util.h — small helpers shared by the `lwq` subcommands (CLI side only: these print
 * to stderr, the library never does). */
#ifndef LWQ_TOOLS_TOOL_UTIL_H
#define LWQ_TOOLS_TOOL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"

/* Parse option `opt`'s value `s` as an integer in [lo, hi]; prints the reason and returns -1. */
int lwq_tool_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
/* "12.3 MiB" into buf. */
const char *lwq_tool_bytes(uint64_t b, char *buf, size_t cap);
/* Write `n` bytes to `path` (create/truncate). */
int lwq_tool_write_file(const char *path, const void *data, size_t n, lwq_error *e);
/* A command that runs in one process each, started by an MPI launcher (core/parallel/ranks.h): its ranks
 * first meet in the job's first agreement (lwq_ranks_agree_job), where a rank of another command
 * (an `lwq quantize` waiting for its ranks) learns it, naming the rank; then MPI is finalized
 * and each runs alone, as without a launcher.  0: go on; LWQ_EXIT_ERR: the job is refused
 * (rank 0 said why).  Nothing without a launcher or in a build without MPI (which cannot wait). */
int lwq_tool_job_alone(const char *command);

#endif
