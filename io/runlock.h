/* io/runlock.h — one run per output: the advisory lock a quantize run holds on its resume and
 * output directories.
 *
 * The resume directory holds a file "lock"; the run takes flock(LOCK_EX | LOCK_NB) on it and
 * writes its pid into it.  The output directory itself is flock'ed too (a directory fd, so no
 * foreign file appears in the output), which also catches two runs that share an output but were
 * given different --resume-dir.  flock locks belong to the open file description: the kernel
 * drops them when the holder exits or is killed (kill -9 included), so a dead run never blocks
 * the next one; the stale pid left in the file is only text.  A second run is refused at once
 * (LWQ_ESTATE) with the holder's pid: the kernel's record (/proc/locks), else the file's text.
 * Only a holder that has exited (no such process, or a zombie) is waited for, a few seconds at
 * most, saying so on stderr: the kernel drops a killed multi-threaded run's locks only once its
 * last thread is gone, a moment after its main thread became a zombie.
 *
 * The lock file is created through the io/sys.h table (open, ftruncate, pwrite are fault-
 * injectable steps); it is not fsync'ed (after a crash there is nothing to hold).  It is the one
 * file lwq opens again rather than creates, so it is opened by lwq_durable_open_own and checked
 * before it is locked, truncated or written: a symbolic link, a FIFO, a file with another hard
 * link (its truncation would truncate that other file), another user's, or one larger than a pid
 * is refused.  A lock taken
 * on a file that was unlinked meanwhile (lwq_runlock_remove) is dropped and taken again on the
 * file now at the path. */
#ifndef LWQ_IO_RUNLOCK_H
#define LWQ_IO_RUNLOCK_H

#include <limits.h>

#include "core/sys/error.h"

typedef struct lwq_runlock {
    int held;        /* 0 in a zeroed struct: nothing to release */
    int fd_resume;   /* the lock file in the resume directory */
    int fd_out;      /* the output directory */
    char path[PATH_MAX];  /* the lock file */
} lwq_runlock;

/* Lock `resume_dir` (which must exist; its "lock" file is created) and then `out_dir` (which must
 * exist).  On failure nothing is held.  l must not be held already. */
int lwq_runlock_acquire(lwq_runlock *l, const char *out_dir, const char *resume_dir, lwq_error *e);
/* Drop both locks (a no-op when nothing is held, e.g. on a zeroed struct). */
void lwq_runlock_release(lwq_runlock *l);
/* For a run refused before it wrote anything: remove the lock file and the resume directory
 * (when `remove_dir` and it is then empty) while still holding the lock, then release.  Best
 * effort.  A run waiting on the removed file sees that it is gone and locks the new one. */
void lwq_runlock_remove(lwq_runlock *l, const char *resume_dir, int remove_dir);
/* The pid holding an flock on the file open as `fd` according to /proc/locks, or 0 if unknown. */
long lwq_runlock_holder(int fd);

#endif
