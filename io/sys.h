/* io/sys.h — the replaceable system-call table of the io layer, and its fault injector.
 *
 * Every system call the io layer (and the resume code) makes that touches a file or an io_uring
 * ring goes through lwq_sys(), a table of function pointers.  The default table calls the kernel.
 * Each entry returns a non-negative result on success and a NEGATIVE ERRNO on failure (liburing's
 * convention), never -1 + errno, so the table is safe to call from several threads.
 *
 * Tests replace the table (lwq_sys_set) or, more simply, arm faults on the built-in injecting
 * table (lwq_sys_fault_add): "fail the 3rd pwrite with ENOSPC", "make every read short once",
 * "return EINTR from the next fsync", and lwq_sys_crash_at(k, ...) which simulates a process crash
 * after k mutating steps (open-for-write, pwrite, fsync, fdatasync, ftruncate, rename, unlink,
 * mkdir, rmdir):
 * in LWQ_SYS_CRASH_FAIL mode step k+1 and every later mutating step fail with EIO without touching
 * the disk (what is on disk is what a crash after step k leaves, except that unsynced page-cache
 * data is not dropped); in LWQ_SYS_CRASH_KILL mode the process raises SIGKILL at step k+1 (for
 * subprocess tests).  lwq_sys_fault_from_env() arms the crash from LWQ_SYS_CRASH_STEP /
 * LWQ_SYS_CRASH_MODE (fail|kill) so a test can crash an unmodified `lwq` binary.
 *
 * Thread-safety: calls through the table are thread-safe (fault counters are atomic).  Swapping
 * the table, adding or clearing faults must happen while no I/O is in flight. */
#ifndef LWQ_IO_SYS_H
#define LWQ_IO_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

struct io_uring;

/* One completion taken from a ring: the request's user_data and its result (bytes or -errno). */
typedef struct lwq_sys_cqe {
    uint64_t user_data;
    int32_t res;
} lwq_sys_cqe;

typedef struct lwq_sys_table {
    int (*open)(const char *path, int flags, mode_t mode);
    int (*close)(int fd);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
    int (*fsync)(int fd);
    int (*fdatasync)(int fd);
    int (*ftruncate)(int fd, off_t len);
    int (*fstat)(int fd, struct stat *st);
    int (*rename)(const char *from, const char *to);
    int (*unlink)(const char *path);
    int (*mkdir)(const char *path, mode_t mode);
    int (*rmdir)(const char *path);
    /* io_uring_submit(); returns the number submitted or -errno. */
    int (*uring_submit)(struct io_uring *ring);
    /* Wait for one completion (or take a ready one), copy it to *out and mark it seen. */
    int (*uring_wait)(struct io_uring *ring, lwq_sys_cqe *out);
} lwq_sys_table;

/* The table in use (never NULL). */
const lwq_sys_table *lwq_sys(void);
/* Replace the table; NULL restores the kernel table.  Returns the previous table. */
const lwq_sys_table *lwq_sys_set(const lwq_sys_table *t);
/* The table that calls the kernel directly. */
const lwq_sys_table *lwq_sys_kernel(void);

/* ---- fault injection ----------------------------------------------------------------------- */

typedef enum {
    LWQ_SYS_OP_OPEN = 0,   /* any open */
    LWQ_SYS_OP_READ,       /* pread calls AND io_uring read completions */
    LWQ_SYS_OP_WRITE,      /* pwrite */
    LWQ_SYS_OP_FSYNC,      /* fsync and fdatasync */
    LWQ_SYS_OP_FTRUNCATE,
    LWQ_SYS_OP_RENAME,
    LWQ_SYS_OP_UNLINK,
    LWQ_SYS_OP_CLOSE,
    LWQ_SYS_OP_SUBMIT,     /* io_uring submit */
    LWQ_SYS_OP_MKDIR,
    LWQ_SYS_OP_RMDIR,
    LWQ_SYS_OP_COUNT
} lwq_sys_op;

typedef struct lwq_sys_fault {
    lwq_sys_op op;
    long nth;        /* first call (1-based, counted per op since arming) that the fault hits */
    long times;      /* how many consecutive calls it hits from there; <= 0 means every later call */
    int err;         /* errno to return (EIO, ENOSPC, EINTR, ...); 0 with short_io set */
    int short_io;    /* READ/WRITE: transfer only half the bytes (at least 1) instead of failing */
} lwq_sys_fault;

typedef enum { LWQ_SYS_CRASH_FAIL = 0, LWQ_SYS_CRASH_KILL = 1 } lwq_sys_crash_mode;

/* Arm a fault (up to 16 at once) and switch to the injecting table.  Returns 0 or LWQ_EINVAL. */
int lwq_sys_fault_add(const lwq_sys_fault *f);
/* Simulate a crash after `steps` mutating steps (see above).  steps < 0 disarms. */
void lwq_sys_crash_at(long steps, lwq_sys_crash_mode mode);
/* Mutating steps performed since the last lwq_sys_fault_clear (to choose crash points). */
long lwq_sys_steps(void);
/* How many times armed faults fired, and whether the simulated crash has happened. */
long lwq_sys_faults_fired(void);
int lwq_sys_crashed(void);
/* Disarm everything, reset counters and restore the kernel table. */
void lwq_sys_fault_clear(void);
/* Arm a crash from LWQ_SYS_CRASH_STEP (and LWQ_SYS_CRASH_MODE=fail|kill, default kill).
 * Returns 1 if armed, 0 if the variable is unset, LWQ_EINVAL if it is malformed. */
int lwq_sys_fault_from_env(void);

#endif
