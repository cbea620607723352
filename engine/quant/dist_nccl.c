/* engine/quant/dist_nccl.c — the optional NCCL path of GPU ranks (dist.h): the Hessians' integer
 * limbs summed by ncclAllReduce(ncclInt64, ncclSum) on the devices instead of MPI_SUM on the host.
 * The same integers either way, so the same bytes.  NCCL is loaded at run time (libnccl.so.2, as
 * the CUDA module is: lwq links no CUDA library) and bootstrapped over MPI: rank 0's ncclUniqueId
 * is broadcast, then every rank joins with ncclCommInitRank on the GPU its backend uses.  Built
 * only where nccl.h is found (LWQ_HAVE_NCCL_H); elsewhere lwq_nccl_open says so.  The staged MPI
 * path is the default and the tested one; LWQ_NCCL=1 asks for this one. */
#include "engine/quant/dist.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#ifdef LWQ_HAVE_NCCL_H
#include <nccl.h>

struct lwq_nccl {
    void *lib;
    ncclComm_t comm;
    const lwq_backend *be;
    void *dev;          /* device staging buffer */
    size_t dev_bytes;
    ncclResult_t (*get_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*err)(ncclResult_t);
};

static int nccl_fail(lwq_nccl *n, ncclResult_t r, const char *what, lwq_error *e)
{
    return lwq_errf(e, LWQ_EDEVICE, "NCCL: %s failed: %s", what, n->err ? n->err(r) : "error");
}

int lwq_nccl_open(lwq_nccl **out, lwq_ranks *rk, const lwq_backend *be, lwq_error *e)
{
    *out = NULL;
    lwq_nccl *n = calloc(1, sizeof *n);
    if (!n)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    n->be = be;
    int rc = 0;
    /* the loader's search first, then where the build found NCCL */
    n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#ifdef LWQ_NCCL_PATH
    if (!n->lib)
        n->lib = dlopen(LWQ_NCCL_PATH, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!n->lib)
        rc = lwq_errf(e, LWQ_EUNSUPPORTED, "NCCL: cannot load libnccl.so.2 (%s)", dlerror());
    if (rc == 0) {
        *(void **)&n->get_id = dlsym(n->lib, "ncclGetUniqueId");
        *(void **)&n->init_rank = dlsym(n->lib, "ncclCommInitRank");
        *(void **)&n->all_reduce = dlsym(n->lib, "ncclAllReduce");
        *(void **)&n->destroy = dlsym(n->lib, "ncclCommDestroy");
        *(void **)&n->err = dlsym(n->lib, "ncclGetErrorString");
        if (!n->get_id || !n->init_rank || !n->all_reduce || !n->destroy)
            rc = lwq_errf(e, LWQ_EUNSUPPORTED, "NCCL: libnccl.so.2 lacks the functions lwq calls");
    }
    /* every rank reaches the broadcast, loaded or not */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = ncclSuccess;
    if (rc == 0 && rk->rank == 0 && (r = n->get_id(&id)) != ncclSuccess)
        rc = nccl_fail(n, r, "ncclGetUniqueId", e);
    if ((rc = lwq_ranks_agree(rk, rc, e)) == 0)
        rc = lwq_ranks_bcast(rk, &id, sizeof id, 0, e);
    if (rc == 0 && (r = n->init_rank(&n->comm, rk->size, id, rk->rank)) != ncclSuccess)
        rc = nccl_fail(n, r, "ncclCommInitRank", e);
    if ((rc = lwq_ranks_agree(rk, rc, e)) != 0) {
        lwq_nccl_close(n);
        return rc;
    }
    *out = n;
    return 0;
}

int lwq_nccl_sum_i64(lwq_nccl *n, int64_t *v, size_t count, lwq_error *e)
{
    size_t bytes = count * sizeof *v;
    if (bytes > n->dev_bytes) {
        if (n->dev)
            lwq_backend_free(n->be, n->dev);
        n->dev = NULL;
        n->dev_bytes = 0;
        LWQ_TRY(lwq_backend_alloc(n->be, bytes, &n->dev, e));
        n->dev_bytes = bytes;
    }
    LWQ_TRY(lwq_backend_upload(n->be, n->dev, v, bytes, e));
    LWQ_TRY(lwq_backend_synchronize(n->be, e));
    /* stream 0: the legacy default stream, which orders it with the backend's copies */
    ncclResult_t r = n->all_reduce(n->dev, n->dev, count, ncclInt64, ncclSum, n->comm, 0);
    if (r != ncclSuccess)
        return nccl_fail(n, r, "ncclAllReduce", e);
    LWQ_TRY(lwq_backend_synchronize(n->be, e));
    return lwq_backend_download(n->be, v, n->dev, bytes, e);
}

void lwq_nccl_close(lwq_nccl *n)
{
    if (!n)
        return;
    if (n->dev)
        lwq_backend_free(n->be, n->dev);
    if (n->comm && n->destroy)
        n->destroy(n->comm);
    if (n->lib)
        dlclose(n->lib);
    free(n);
}

#else /* no nccl.h at build time */

struct lwq_nccl {
    int unused;
};

int lwq_nccl_open(lwq_nccl **out, lwq_ranks *rk, const lwq_backend *be, lwq_error *e)
{
    (void)be;
    *out = NULL;
    return lwq_ranks_agree(rk, lwq_errf(e, LWQ_EUNSUPPORTED, "this lwq was built without nccl.h: LWQ_NCCL=1 cannot be "
                                           "honoured (the statistics go through MPI without it)"), e);
}

int lwq_nccl_sum_i64(lwq_nccl *n, int64_t *v, size_t count, lwq_error *e)
{
    (void)n, (void)v, (void)count;
    return lwq_errf(e, LWQ_EUNSUPPORTED, "NCCL: not built");
}

void lwq_nccl_close(lwq_nccl *n) { free(n); }

#endif
