#include "engine/run/spill.h"

#include "io/durable.h"
#include "io/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lwq_spill_open(lwq_spill *s, const char *dir, int layer, lwq_error *e)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if ((size_t)snprintf(s->path, sizeof s->path, "%s/model-layer-%05d.spill", dir, layer) >= sizeof s->path)
        return lwq_errf(e, LWQ_EINVAL, "%s: path too long", dir);
    int fd = lwq_durable_create(s->path, O_RDWR, 0600, "the expert spill file", e);
    if (fd < 0)
        return fd;
    s->fd = fd;
    int rc = lwq_sys()->unlink(s->path);
    if (rc < 0) {
        lwq_sys()->close(s->fd);
        s->fd = -1;
        return lwq_errsys(e, rc, "%s: cannot unlink the expert spill file", s->path);
    }
    return 0;
}

static int write_all(lwq_spill *s, const void *p, uint64_t n, lwq_error *e)
{
    const unsigned char *b = p;
    uint64_t done = 0;
    while (done < n) {
        size_t k = (size_t)(n - done > ((uint64_t)1 << 30) ? (uint64_t)1 << 30 : n - done);
        ssize_t w = lwq_sys()->pwrite(s->fd, b + done, k, (off_t)(s->size + done));
        if (w == -EINTR)
            continue;
        if (w <= 0)
            return lwq_errsys(e, w == -ENOSPC ? LWQ_ENOSPC : LWQ_EIO, "%s: writing %llu bytes at %llu", s->path,
                              (unsigned long long)n, (unsigned long long)s->size);
        done += (uint64_t)w;
    }
    return 0;
}

int lwq_spill_move(lwq_spill *s, lwq_tlist *out, int from, lwq_error *e)
{
    for (int i = from < 0 ? 0 : from; i < out->n; i++) {
        lwq_htensor *t = &out->v[i];
        if (t->spilled || t->nbytes < LWQ_SPILL_MIN_BYTES)
            continue;
        int rc = write_all(s, t->data, t->nbytes, e);
        if (rc)
            return rc;
        if (t->owned)
            free(t->data);
        t->data = NULL;
        t->owned = 0;
        t->spilled = 1;
        t->spill_off = s->size;
        s->size += t->nbytes;
    }
    return 0;
}

int lwq_spill_read(const lwq_spill *s, uint64_t off, void *buf, size_t n, lwq_error *e)
{
    unsigned char *b = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = lwq_sys()->pread(s->fd, b + done, n - done, (off_t)(off + done));
        if (r == -EINTR)
            continue;
        if (r <= 0)
            return lwq_errsys(e, LWQ_EIO, "%s: reading %zu bytes at %llu%s", s->path, n, (unsigned long long)off,
                              r == 0 ? " (short file)" : "");
        done += (size_t)r;
    }
    return 0;
}

void lwq_spill_close(lwq_spill *s)
{
    if (s->fd >= 0)
        lwq_sys()->close(s->fd);
    s->fd = -1;
}
