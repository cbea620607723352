/* io/pool.c — pinned, NUMA-placed slot memory (see pool.h). */
#include "io/pool.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/sys/log.h"
#include "core/parallel/parallel.h"

#define PAGE 4096u
/* Mapping aligned to 2 MiB so transparent huge pages can back it (fewer pages to pin). */
#define HUGE_ALIGN (2u << 20)

int lwq_pool_pci_numa_node(const char *sysfs_root, const char *pci_bus_id, lwq_error *e)
{
    size_t n = pci_bus_id ? strlen(pci_bus_id) : 0;
    if (n == 0 || n > 64 || strspn(pci_bus_id, "0123456789abcdefABCDEF:.") != n)
        return lwq_errf(e, LWQ_EINVAL, "bad PCI bus id '%.64s' (expected like 0000:17:00.0)",
                        pci_bus_id ? pci_bus_id : "");
    char path[4096];
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node", sysfs_root ? sysfs_root : "/sys",
             pci_bus_id);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return lwq_errsys(e, -errno, "read NUMA node of PCI device %s (%s)", pci_bus_id, path);
    long node = -2;
    int ok = fscanf(fp, "%ld", &node) == 1;
    fclose(fp);
    if (!ok || node < -1 || node > 4095)
        return lwq_errf(e, LWQ_EFORMAT, "%s: expected a node number, found something else", path);
    return (int)node;
}

static void touch_pages(void *base, int64_t first, int64_t end, int tid)
{
    (void)tid;
    for (int64_t i = first; i < end; i++)
        ((volatile unsigned char *)base)[(size_t)i * PAGE] = 0;
}

static int local_node(void)
{
    int cpu = sched_getcpu();
    int node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
    return node >= 0 ? node : 0;
}

/* Prefer (not bind) the node: a full node must not turn into an allocation failure. */
static void prefer_node(void *ptr, size_t len, int node)
{
    struct bitmask *m = numa_allocate_nodemask();
    if (!m)
        return;
    numa_bitmask_setbit(m, (unsigned)node);
    if (mbind(ptr, len, MPOL_PREFERRED, m->maskp, m->size + 1, 0) != 0)
        LWQ_WARN("pool: cannot place %zu bytes on NUMA node %d (%s); using default placement",
                 len, node, strerror(errno));
    numa_free_nodemask(m);
}

int lwq_pool_init(lwq_pool *p, const lwq_pool_opts *o, lwq_error *e)
{
    memset(p, 0, sizeof *p);
    p->node = -1;
    if (!o || o->nslots < 1 || o->nslots > 1024 || o->slot_bytes == 0)
        return lwq_errf(e, LWQ_EINVAL, "pool: need 1..1024 slots of at least 1 byte (got %d x %zu)",
                        o ? o->nslots : 0, o ? o->slot_bytes : 0);
    if (o->slot_bytes > (SIZE_MAX / 2) / (size_t)o->nslots)
        return lwq_errf(e, LWQ_ENOMEM, "pool: %d slots of %zu bytes overflow", o->nslots,
                        o->slot_bytes);
    size_t slot = (o->slot_bytes + PAGE - 1) / PAGE * PAGE;
    size_t total = slot * (size_t)o->nslots;
    size_t map_bytes = total + HUGE_ALIGN;
    void *map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return lwq_errsys(e, -errno, "pool: cannot map %zu bytes (%d slots of %zu)", total,
                          o->nslots, slot);
    p->map = map;
    p->map_bytes = map_bytes;
    p->base = (unsigned char *)(((uintptr_t)map + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
    p->slot_bytes = slot;
    p->nslots = o->nslots;
    madvise(p->base, total, MADV_HUGEPAGE); /* advisory; failure only costs TLB reach */

    int node = o->numa_node;
    if (node < 0 && o->pci_bus_id) {
        lwq_error pe = {0};
        node = lwq_pool_pci_numa_node(o->sysfs_root, o->pci_bus_id, &pe);
        if (node < 0 && pe.code)
            LWQ_WARN("pool: %s; using the local NUMA node", pe.msg);
    }
    if (numa_available() >= 0) {
        if (node < 0)
            node = local_node();
        if (node > numa_max_node()) {
            LWQ_WARN("pool: NUMA node %d does not exist here (max %d); using the local node", node,
                     numa_max_node());
            node = local_node();
        }
        prefer_node(p->base, total, node);
        p->node = node;
    }

    /* Fault every page in now, on this node, so reads never take page faults.  The kernel zeroes
     * each page on first touch (in a VM the host may back it too): ~1 s per GB on one core, all
     * of it before the first read can start, so the cores share it (the node policy set above
     * places the pages whichever thread touches them). */
    lwq_parallel_for((int64_t)(total / PAGE), HUGE_ALIGN / PAGE, touch_pages, p->base);

    if (!o->no_lock) {
        if (mlock(p->base, total) == 0)
            p->locked = 1;
        else
            LWQ_WARN("pool: cannot lock %zu bytes in memory (%s); reads still work but pages may "
                     "be swapped out (raise `ulimit -l`)", total, strerror(errno));
    }
    if (o->reg) {
        int rc = o->reg(o->reg_ctx, p->base, total, e);
        if (rc < 0) {
            lwq_pool_free(p);
            return rc;
        }
        p->registered = 1;
        p->unreg = o->unreg;
        p->reg_ctx = o->reg_ctx;
    }
    LWQ_DEBUG("pool: %d slots x %zu bytes, NUMA node %d, %s", p->nslots, p->slot_bytes, p->node,
              p->locked ? "locked" : "not locked");
    return 0;
}

void lwq_pool_free(lwq_pool *p)
{
    if (!p->map)
        return;
    size_t total = p->slot_bytes * (size_t)p->nslots;
    if (p->registered && p->unreg)
        p->unreg(p->reg_ctx, p->base, total);
    if (p->locked)
        munlock(p->base, total);
    munmap(p->map, p->map_bytes);
    memset(p, 0, sizeof *p);
    p->node = -1;
}

void *lwq_pool_slot(const lwq_pool *p, int i)
{
    if (!p->base || i < 0 || i >= p->nslots)
        return NULL;
    return p->base + (size_t)i * p->slot_bytes;
}
