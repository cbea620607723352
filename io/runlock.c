/* io/runlock.c — the run lock (see runlock.h). */
#include "io/runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/sys/log.h"
#include "io/durable.h"
#include "io/sys.h"

/* The lock file holds "<pid>\n"; anything larger is not one lwq wrote. */
#define LOCK_MAX_BYTES 64

long lwq_runlock_holder(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return 0;
    FILE *f = fopen("/proc/locks", "r");
    if (!f)
        return 0;
    /* "1: FLOCK  ADVISORY  WRITE 4242 fe:00:10955004 0 EOF"; waiters carry "->" after the id */
    char line[256];
    long pid = 0;
    while (!pid && fgets(line, sizeof line, f)) {
        char kind[16], mode[16], rw[16];
        long p;
        unsigned maj, min;
        unsigned long long ino;
        if (strstr(line, "->"))
            continue;
        if (sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%llu", kind, mode, rw, &p, &maj, &min, &ino) == 7 &&
            !strcmp(kind, "FLOCK") && ino == (unsigned long long)st.st_ino && p > 0)
            pid = p;
    }
    fclose(f);
    return pid;
}

/* The pid text of the lock file, when the kernel's table did not say. */
static long pid_from_file(int fd)
{
    char buf[32];
    ssize_t n = lwq_sys()->pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *end;
    long p = strtol(buf, &end, 10);
    return p > 0 && (*end == '\n' || !*end) ? p : 0;
}

/* How long a lock held by a run that has exited is waited for.  The kernel closes a killed
 * multi-threaded process's files only once its last thread is gone, which can be after its main
 * thread is a zombie (~0.1-0.2 s measured after `timeout -s KILL`); the rerun of the identical
 * command, which the resume promises, must not be refused for that moment. */
#define WAIT_EXITED_MS 5000

static long holder_pid(int fd, int from_file)
{
    long pid = lwq_runlock_holder(fd);
    return pid || !from_file ? pid : pid_from_file(fd);
}

/* Whether process `pid` has exited: no such process, or a zombie (state Z, or X) in
 * /proc/PID/stat.  0 for an unknown pid, this process, and a live one (a stopped one too). */
static int holder_exited(long pid)
{
    if (pid <= 0 || pid == (long)getpid())
        return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 1;
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* "PID (COMM) S ...": COMM may hold ')' and spaces */
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static int refuse(lwq_error *e, long pid, int exited, double waited, const char *what, const char *dir)
{
    char who[160];
    if (pid && exited)
        snprintf(who, sizeof who, "pid %ld, which has exited, still holds it after waiting %.1f s for the kernel to "
                 "release it: another process may have inherited its descriptor", pid, waited);
    else if (pid)
        snprintf(who, sizeof who, "pid %ld", pid);
    else
        snprintf(who, sizeof who, "pid unknown");
    return lwq_errf(e, LWQ_ESTATE,
                    "%s %s is in use by another lwq run (%s); one run per output: wait for it to finish or "
                    "stop it, then rerun", what, dir, who);
}

/* flock(fd, LOCK_EX | LOCK_NB), `path` naming fd.  A live holder is refused at once; one that has
 * exited (gone, or a zombie) is waited for, polling, at most WAIT_EXITED_MS, saying so on stderr.
 * The holder is looked up again at every poll, so a live run that takes the lock meanwhile is
 * refused at once.  0 when locked, else a negative code with e set. */
static int lock_or_wait(int fd, const char *path, const char *what, const char *dir, int from_file, lwq_error *e)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long told = 0;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK)
            return lwq_errsys(e, -errno, "%s: cannot lock", path);
        long pid = holder_pid(fd, from_file);
        int exited = holder_exited(pid);
        double waited = seconds_since(&t0);
        if (!exited || waited * 1000 >= WAIT_EXITED_MS)
            return refuse(e, pid, exited, waited, what, dir);
        if (pid != told)
            LWQ_WARN("%s %s is still locked by pid %ld, which has exited (a killed run whose files the kernel is "
                     "closing?); waiting up to %d s for the kernel to release the lock", what, dir, pid,
                     WAIT_EXITED_MS / 1000);
        told = pid;
        struct timespec d = {0, 20 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
}

/* Open and flock the lock file at `path`; retried when the file it locked was unlinked (or
 * replaced) between the open and the lock.  Returns the fd, or a negative code with e set. */
static int lock_file(const char *path, const char *resume_dir, lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    for (int attempt = 0; attempt < 16; attempt++) {
        /* the one file lwq opens again: checked before it is locked, truncated or written */
        int fd = lwq_durable_open_own(path, O_RDWR, 0644, LOCK_MAX_BYTES, "the run lock", e);
        if (fd < 0)
            return fd;
        int rc = lock_or_wait(fd, path, "the resume directory", resume_dir, 1, e);
        if (rc) {
            s->close(fd);
            return rc;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return fd;
        s->close(fd); /* locked a file that is no longer at the path */
    }
    return lwq_errf(e, LWQ_ESTATE, "%s: the run lock keeps being replaced; is another program removing it?", path);
}

int lwq_runlock_acquire(lwq_runlock *l, const char *out_dir, const char *resume_dir, lwq_error *e)
{
    const lwq_sys_table *s = lwq_sys();
    memset(l, 0, sizeof *l);
    char *path = l->path;
    int rc = lwq_pathf(e, path, sizeof l->path, "%s/lock", resume_dir);
    if (rc)
        return rc;
    int fd = lock_file(path, resume_dir, e);
    if (fd < 0)
        return fd;
    char txt[32];
    int n = snprintf(txt, sizeof txt, "%ld\n", (long)getpid());
    if ((rc = s->ftruncate(fd, 0)) < 0) {
        s->close(fd);
        return lwq_errsys(e, rc, "%s: cannot truncate the run lock", path);
    }
    if ((rc = lwq_durable_pwrite_all(fd, txt, (size_t)n, 0, path, e)) != 0) {
        s->close(fd);
        return rc;
    }
    int dfd = s->open(out_dir, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        s->close(fd);
        return lwq_errsys(e, dfd, "%s: cannot open the output directory", out_dir);
    }
    if ((rc = lock_or_wait(dfd, out_dir, "the output directory", out_dir, 0, e)) != 0) {
        s->close(dfd);
        s->close(fd);
        return rc;
    }
    l->fd_resume = fd;
    l->fd_out = dfd;
    l->held = 1;
    return 0;
}

void lwq_runlock_release(lwq_runlock *l)
{
    if (!l->held)
        return;
    /* closing the last descriptor of each open file description drops its flock */
    lwq_sys()->close(l->fd_out);
    lwq_sys()->close(l->fd_resume);
    l->held = 0;
}

void lwq_runlock_remove(lwq_runlock *l, const char *resume_dir, int remove_dir)
{
    if (!l->held)
        return;
    const lwq_sys_table *s = lwq_sys();
    lwq_error ig = {0};
    if (s->unlink(l->path) == 0) {
        if (remove_dir && s->rmdir(resume_dir) == 0)
            lwq_durable_fsync_parent(resume_dir, &ig);
        else
            lwq_durable_fsync_dir(resume_dir, &ig);
    }
    lwq_runlock_release(l);
}
