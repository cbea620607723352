/* io/sys.c — kernel system-call table and the fault-injecting table (see sys.h). */
#include "io/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys/error.h"

/* ---- kernel table -------------------------------------------------------------------------- */

static int k_open(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_CLOEXEC, mode);
    return fd < 0 ? -errno : fd;
}
static int k_close(int fd) { return close(fd) < 0 ? -errno : 0; }
static ssize_t k_pread(int fd, void *buf, size_t n, off_t off)
{
    ssize_t r = pread(fd, buf, n, off);
    return r < 0 ? -errno : r;
}
static ssize_t k_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    ssize_t r = pwrite(fd, buf, n, off);
    return r < 0 ? -errno : r;
}
static int k_fsync(int fd) { return fsync(fd) < 0 ? -errno : 0; }
static int k_fdatasync(int fd) { return fdatasync(fd) < 0 ? -errno : 0; }
static int k_ftruncate(int fd, off_t len) { return ftruncate(fd, len) < 0 ? -errno : 0; }
static int k_fstat(int fd, struct stat *st) { return fstat(fd, st) < 0 ? -errno : 0; }
static int k_rename(const char *a, const char *b) { return rename(a, b) < 0 ? -errno : 0; }
static int k_unlink(const char *p) { return unlink(p) < 0 ? -errno : 0; }
static int k_mkdir(const char *p, mode_t m) { return mkdir(p, m) < 0 ? -errno : 0; }
static int k_rmdir(const char *p) { return rmdir(p) < 0 ? -errno : 0; }
static int k_uring_submit(struct io_uring *r) { return io_uring_submit(r); }
static int k_uring_wait(struct io_uring *r, lwq_sys_cqe *out)
{
    struct io_uring_cqe *cqe = NULL;
    int rc = io_uring_wait_cqe(r, &cqe);
    if (rc < 0)
        return rc;
    out->user_data = cqe->user_data;
    out->res = cqe->res;
    io_uring_cqe_seen(r, cqe);
    return 0;
}

static const lwq_sys_table kernel_table = {
    .open = k_open, .close = k_close, .pread = k_pread, .pwrite = k_pwrite, .fsync = k_fsync,
    .fdatasync = k_fdatasync, .ftruncate = k_ftruncate, .fstat = k_fstat, .rename = k_rename,
    .unlink = k_unlink, .mkdir = k_mkdir, .rmdir = k_rmdir, .uring_submit = k_uring_submit,
    .uring_wait = k_uring_wait,
};

static _Atomic(const lwq_sys_table *) g_table = &kernel_table;

const lwq_sys_table *lwq_sys(void) { return atomic_load_explicit(&g_table, memory_order_acquire); }
const lwq_sys_table *lwq_sys_kernel(void) { return &kernel_table; }

const lwq_sys_table *lwq_sys_set(const lwq_sys_table *t)
{
    return atomic_exchange(&g_table, t ? t : &kernel_table);
}

/* ---- fault injection ----------------------------------------------------------------------- */

#define MAX_FAULTS 16

typedef struct {
    lwq_sys_fault f;
    long base;    /* op counter value when armed */
} armed_fault;

static armed_fault g_faults[MAX_FAULTS];
static int g_nfaults;
static atomic_long g_calls[LWQ_SYS_OP_COUNT];
static atomic_long g_steps;
static atomic_long g_fired;
static atomic_long g_crash_at = -1;
static atomic_int g_crash_mode;
static atomic_int g_crashed;

/* Count a call of `op`; returns the matching armed fault, if any. */
static const lwq_sys_fault *hit(lwq_sys_op op)
{
    long n = atomic_fetch_add(&g_calls[op], 1) + 1;
    for (int i = 0; i < g_nfaults; i++) {
        const armed_fault *a = &g_faults[i];
        if (a->f.op != op)
            continue;
        long k = n - a->base;
        if (k >= a->f.nth && (a->f.times <= 0 || k < a->f.nth + a->f.times)) {
            atomic_fetch_add(&g_fired, 1);
            return &a->f;
        }
    }
    return NULL;
}

/* A mutating step: returns 0 to go ahead, -EIO when the simulated crash has happened. */
static int step(void)
{
    long limit = atomic_load(&g_crash_at);
    long s = atomic_fetch_add(&g_steps, 1);
    if (limit >= 0 && s >= limit) {
        atomic_store(&g_crashed, 1);
        if (atomic_load(&g_crash_mode) == LWQ_SYS_CRASH_KILL)
            raise(SIGKILL);
        return -EIO;
    }
    return 0;
}

static int f_open(const char *path, int flags, mode_t mode)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_OPEN);
    if (f && f->err)
        return -f->err;
    if (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) {
        int rc = step();
        if (rc)
            return rc;
    }
    return k_open(path, flags, mode);
}

static int f_close(int fd)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_CLOSE);
    int rc = k_close(fd); /* never leak the descriptor, even when reporting a failure */
    return f && f->err ? -f->err : rc;
}

static ssize_t f_pread(int fd, void *buf, size_t n, off_t off)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_READ);
    if (f && f->err)
        return -f->err;
    if (f && f->short_io && n > 1)
        n /= 2;
    return k_pread(fd, buf, n, off);
}

static ssize_t f_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_WRITE);
    int rc = step();
    if (rc)
        return rc;
    if (f && f->err)
        return -f->err;
    if (f && f->short_io && n > 1)
        n /= 2;
    return k_pwrite(fd, buf, n, off);
}

static int sync_common(int fd, int (*fn)(int))
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_FSYNC);
    int rc = step();
    if (rc)
        return rc;
    if (f && f->err)
        return -f->err;
    return fn(fd);
}
static int f_fsync(int fd) { return sync_common(fd, k_fsync); }
static int f_fdatasync(int fd) { return sync_common(fd, k_fdatasync); }

static int f_ftruncate(int fd, off_t len)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_FTRUNCATE);
    int rc = step();
    if (rc)
        return rc;
    return f && f->err ? -f->err : k_ftruncate(fd, len);
}

static int f_rename(const char *a, const char *b)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_RENAME);
    int rc = step();
    if (rc)
        return rc;
    return f && f->err ? -f->err : k_rename(a, b);
}

static int f_unlink(const char *p)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_UNLINK);
    int rc = step();
    if (rc)
        return rc;
    return f && f->err ? -f->err : k_unlink(p);
}

static int f_mkdir(const char *p, mode_t m)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_MKDIR);
    int rc = step();
    if (rc)
        return rc;
    return f && f->err ? -f->err : k_mkdir(p, m);
}

static int f_rmdir(const char *p)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_RMDIR);
    int rc = step();
    if (rc)
        return rc;
    return f && f->err ? -f->err : k_rmdir(p);
}

static int f_uring_submit(struct io_uring *r)
{
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_SUBMIT);
    if (f && f->err)
        return -f->err;
    return k_uring_submit(r);
}

/* Read faults on the ring rewrite the completion's result, as if the kernel had reported it. */
static int f_uring_wait(struct io_uring *r, lwq_sys_cqe *out)
{
    int rc = k_uring_wait(r, out);
    if (rc < 0)
        return rc;
    const lwq_sys_fault *f = hit(LWQ_SYS_OP_READ);
    if (f && f->err)
        out->res = -f->err;
    else if (f && f->short_io && out->res > 1)
        out->res /= 2;
    return 0;
}

static const lwq_sys_table fault_table = {
    .open = f_open, .close = f_close, .pread = f_pread, .pwrite = f_pwrite, .fsync = f_fsync,
    .fdatasync = f_fdatasync, .ftruncate = f_ftruncate, .fstat = k_fstat, .rename = f_rename,
    .unlink = f_unlink, .mkdir = f_mkdir, .rmdir = f_rmdir, .uring_submit = f_uring_submit,
    .uring_wait = f_uring_wait,
};

int lwq_sys_fault_add(const lwq_sys_fault *f)
{
    if (!f || f->op < 0 || f->op >= LWQ_SYS_OP_COUNT || f->nth < 1 || g_nfaults >= MAX_FAULTS ||
        (!f->err && !f->short_io))
        return LWQ_EINVAL;
    g_faults[g_nfaults].f = *f;
    g_faults[g_nfaults].base = atomic_load(&g_calls[f->op]);
    g_nfaults++;
    lwq_sys_set(&fault_table);
    return 0;
}

void lwq_sys_crash_at(long steps, lwq_sys_crash_mode mode)
{
    atomic_store(&g_crash_mode, (int)mode);
    atomic_store(&g_crash_at, steps < 0 ? -1 : atomic_load(&g_steps) + steps);
    if (steps >= 0)
        lwq_sys_set(&fault_table);
}

long lwq_sys_steps(void) { return atomic_load(&g_steps); }
long lwq_sys_faults_fired(void) { return atomic_load(&g_fired); }
int lwq_sys_crashed(void) { return atomic_load(&g_crashed); }

void lwq_sys_fault_clear(void)
{
    lwq_sys_set(NULL);
    g_nfaults = 0;
    for (int i = 0; i < LWQ_SYS_OP_COUNT; i++)
        atomic_store(&g_calls[i], 0);
    atomic_store(&g_steps, 0);
    atomic_store(&g_fired, 0);
    atomic_store(&g_crash_at, -1);
    atomic_store(&g_crashed, 0);
}

int lwq_sys_fault_from_env(void)
{
    const char *s = getenv("LWQ_SYS_CRASH_STEP");
    if (!s || !*s)
        return 0;
    char *end = NULL;
    errno = 0;
    long k = strtol(s, &end, 10);
    if (errno || *end || k < 0)
        return LWQ_EINVAL;
    const char *m = getenv("LWQ_SYS_CRASH_MODE");
    lwq_sys_crash_mode mode = LWQ_SYS_CRASH_KILL;
    if (m && !strcmp(m, "fail"))
        mode = LWQ_SYS_CRASH_FAIL;
    else if (m && *m && strcmp(m, "kill"))
        return LWQ_EINVAL;
    lwq_sys_crash_at(k, mode);
    return 1;
}
