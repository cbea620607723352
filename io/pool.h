/* io/pool.h — the pinned host buffer pool that weights are read into (the prefetcher's slots).
 *
 * One page-aligned anonymous mapping cut into `nslots` equal slots.  The memory is placed on the
 * GPU's NUMA node (PCI bus id -> <sysfs>/bus/pci/devices/<id>/numa_node; the node of the calling
 * CPU without a GPU or when the device reports no node) with a preferred-node policy, touched once
 * at init so no page fault happens during reads, and mlock'ed; when locking fails (RLIMIT_MEMLOCK)
 * the pool still works and a warning says so.  It is never cudaHostAlloc memory: O_DIRECT reads
 * need ordinary pages.  The CUDA backend pins it for DMA through the registration callback
 * (cudaHostRegister), which keeps this module free of CUDA; a failing callback fails init.
 *
 * Ownership: the pool owns the mapping; lwq_pool_free unregisters (callback), unlocks and unmaps.
 * Thread-safety: init/free from one thread; slot pointers may be used from any thread (the pool
 * does not track which slot is in use — the prefetcher does). */
#ifndef LWQ_IO_POOL_H
#define LWQ_IO_POOL_H

#include <stddef.h>

#include "core/sys/error.h"

/* Pin `len` bytes at `ptr` for device DMA (e.g. cudaHostRegister); 0 or a negative LWQ_E*. */
typedef int (*lwq_pool_register_fn)(void *ctx, void *ptr, size_t len, lwq_error *e);
typedef void (*lwq_pool_unregister_fn)(void *ctx, void *ptr, size_t len);

typedef struct lwq_pool_opts {
    size_t slot_bytes;          /* rounded up to 4 KiB; the largest layer from the memory plan */
    int nslots;                 /* >= 1; the prefetch depth K */
    int numa_node;              /* >= 0 forces a node; -1: from pci_bus_id, else the local node */
    const char *pci_bus_id;     /* "0000:17:00.0" or NULL */
    const char *sysfs_root;     /* NULL = "/sys" (tests point it at a fake tree) */
    int no_lock;                /* 1: skip mlock */
    lwq_pool_register_fn reg;   /* optional */
    lwq_pool_unregister_fn unreg;
    void *reg_ctx;
} lwq_pool_opts;

typedef struct lwq_pool {
    unsigned char *base;        /* slot i at base + i * slot_bytes, 4 KiB aligned */
    size_t slot_bytes;
    int nslots;
    size_t map_bytes;           /* the whole mapping (munmap length) */
    unsigned char *map;
    int node;                   /* NUMA node the memory prefers, -1 when NUMA is unavailable */
    int locked;                 /* 1 when mlock succeeded */
    int registered;             /* 1 when the callback pinned it */
    lwq_pool_unregister_fn unreg;
    void *reg_ctx;
} lwq_pool;

int lwq_pool_init(lwq_pool *p, const lwq_pool_opts *o, lwq_error *e);
void lwq_pool_free(lwq_pool *p);
/* Start of slot i (0 <= i < nslots), or NULL when out of range. */
void *lwq_pool_slot(const lwq_pool *p, int i);

/* NUMA node of a PCI device from sysfs: >= 0, or -1 when the device reports none.  Rejects bus
 * ids that are not of the form [0-9a-fA-F:.]+ (no path escapes). */
int lwq_pool_pci_numa_node(const char *sysfs_root, const char *pci_bus_id, lwq_error *e);

#endif
