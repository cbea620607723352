/* io/reader.h — reads a job's byte ranges from files into one buffer, as fast as the disk allows.
 *
 * A job is a list of (file path, offset, length) ranges — for the engine, the tensors of one
 * layer.  lwq_io_plan_build sorts them per file, merges ranges separated by small gaps, widens
 * each merged extent to 4 KiB boundaries (O_DIRECT needs aligned offsets, lengths and buffers),
 * lays the extents out back to back in the job buffer and writes into every range its `dst`: the
 * buffer offset where its first byte will be.  No copy ever moves bytes to another place.
 *
 * lwq_io_reader_read then issues the extents in requests of `block_bytes` on one io_uring ring
 * (liburing 2.3 API) with up to `queue_depth` in flight, using registered buffers (the pool's
 * memory, <= 1 GiB per iovec) and registered files when the kernel allows.  Fallbacks are chosen
 * at run time and logged once: O_DIRECT refused by the filesystem -> buffered reads of that file;
 * buffer/file registration refused -> plain reads; io_uring unavailable, or disabled (option or
 * LWQ_IO_URING=0) -> a pool of pread threads over the same requests.  LWQ_IO_DIRECT=0 disables
 * O_DIRECT.  Short reads and EINTR are handled in one function for every path.
 *
 * Errors name the file, offset and length (and the file size when a range lies past its end).
 * A failed read returns only after every request already given to the kernel has completed, so
 * the buffer is never written behind the caller's back.  If an io_uring submission itself fails,
 * the ring's state is unknown and the reader stays failed (sticky) until freed.
 *
 * Thread-safety: plans are plain data.  One reader is used by one thread at a time (the
 * prefetch thread); `cancel`, when given, may be set from any thread and stops the read early
 * with LWQ_ECANCELED. */
#ifndef LWQ_IO_READER_H
#define LWQ_IO_READER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"

#define LWQ_IO_ALIGN 4096u

typedef struct lwq_io_range {
    const char *path;   /* file to read; must stay valid while the plan is built */
    uint64_t offset;    /* first byte in the file */
    uint64_t length;    /* bytes */
    uint64_t dst;       /* OUT: offset of the first byte in the job buffer (plan_build) */
} lwq_io_range;

typedef struct lwq_io_extent {
    uint32_t file;      /* index into plan->files */
    uint64_t file_off;  /* aligned start in the file */
    uint64_t len;       /* aligned length */
    uint64_t need_end;  /* file offset up to which the bytes must exist (unaligned end) */
    uint64_t buf_off;   /* aligned offset in the job buffer */
} lwq_io_extent;

typedef struct lwq_io_plan {
    char **files;       /* distinct paths (owned copies) */
    uint32_t nfiles;
    lwq_io_extent *ext;
    size_t next;
    uint64_t bytes;     /* job buffer size needed (multiple of LWQ_IO_ALIGN) */
    uint64_t payload;   /* sum of the range lengths */
} lwq_io_plan;

/* Build the plan and fill ranges[i].dst.  Ranges whose gap (on the same file) is at most
 * `merge_gap` bytes are read as one extent.  Rejects empty paths and offset+length overflow. */
int lwq_io_plan_build(lwq_io_plan *p, lwq_io_range *ranges, size_t n, uint64_t merge_gap,
                      lwq_error *e);
void lwq_io_plan_free(lwq_io_plan *p);

typedef struct lwq_io_reader_opts {
    int use_uring;          /* 1: io_uring (falls back to pread), 0: pread thread pool */
    int direct;             /* 1: O_DIRECT where the filesystem allows, 0: buffered */
    int register_buffers;   /* 1: io_uring_register_buffers for lwq_io_reader_register */
    int register_files;     /* 1: registered file table */
    unsigned queue_depth;   /* requests in flight (1..4096) */
    size_t block_bytes;     /* request size, multiple of 4 KiB (4 KiB .. 64 MiB) */
    unsigned pread_threads; /* pread fallback threads (1..256) */
} lwq_io_reader_opts;

/* Defaults: io_uring, O_DIRECT, registered buffers and files, qd 32, 2 MiB, 4 pread threads;
 * then LWQ_IO_URING=0 / LWQ_IO_DIRECT=0 from the environment switch those off. */
void lwq_io_reader_opts_default(lwq_io_reader_opts *o);

typedef struct lwq_io_reader lwq_io_reader;

int lwq_io_reader_init(lwq_io_reader **out, const lwq_io_reader_opts *o, lwq_error *e);
void lwq_io_reader_free(lwq_io_reader *rd);

/* Register [base, base+len) (the pool) as fixed buffers, split in <= 1 GiB iovecs, replacing an
 * earlier registration.  Refusal by the kernel is not an error: it is logged and reads use plain
 * buffers.  Returns 1 when registered, 0 when not, negative on bad arguments. */
int lwq_io_reader_register(lwq_io_reader *rd, void *base, size_t len, lwq_error *e);

/* Read every extent of `p` into buf (LWQ_IO_ALIGN-aligned, cap >= p->bytes).  Checks first that
 * each range lies inside its file.  Returns 0, or a negative code with the failing file/offset. */
int lwq_io_reader_read(lwq_io_reader *rd, const lwq_io_plan *p, void *buf, size_t cap,
                       const atomic_int *cancel, lwq_error *e);

/* What is in use, e.g. "io_uring qd 32, 2 MiB requests, O_DIRECT, registered buffers, registered
 * files" (O_DIRECT is reported as refused once a file needed the buffered fallback). */
const char *lwq_io_reader_describe(const lwq_io_reader *rd);
/* 1 when reads go through io_uring, 0 when through the pread pool. */
int lwq_io_reader_uses_uring(const lwq_io_reader *rd);
/* Requests reissued after short reads or EINTR since init (tests check the path ran). */
uint64_t lwq_io_reader_retries(const lwq_io_reader *rd);

#endif
