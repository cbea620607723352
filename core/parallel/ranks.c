#include "core/parallel/ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef LWQ_HAVE_MPI
#include <mpi.h>
#endif

/* MPI counts are ints: anything larger goes in pieces of this many bytes */
#define PIECE ((size_t)1 << 30)

static long env_long(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : -1;
}

int lwq_ranks_built_with_mpi(void)
{
#ifdef LWQ_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

/* the world size a launcher announced (-1: none) */
static long launcher_size(void)
{
    long n;
    if ((n = env_long("OMPI_COMM_WORLD_SIZE")) >= 0 || (n = env_long("PMI_SIZE")) >= 0)
        return n; /* Open MPI; MPICH's hydra and srun --mpi=pmi2 */
    if (getenv("PMIX_RANK") || getenv("PMI_RANK"))
        return 1; /* PMIx (srun --mpi=pmix): launched, size from MPI */
    if ((n = env_long("SLURM_STEP_NUM_TASKS")) > 1)
        return n; /* srun of several tasks (a single task or the batch script itself is no launch) */
    return -1;
}

int lwq_ranks_launched(void)
{
    long force = env_long("LWQ_MPI");
    if (force == 0 || force == 1)
        return (int)force;
    return launcher_size() >= 0;
}

static void one_rank(lwq_ranks *rk)
{
    memset(rk, 0, sizeof *rk);
    rk->size = rk->local_size = 1;
}

#ifdef LWQ_HAVE_MPI

#define COMM(rk) (*(MPI_Comm *)(rk)->comm)

static int mpi_err(lwq_error *e, int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", rc);
    return lwq_errf(e, LWQ_EIO, "MPI: %s failed: %s", what, s);
}

#define MPI_TRY(call, what)                                                                                       \
    do {                                                                                                          \
        int mpi_rc_ = (call);                                                                                     \
        if (mpi_rc_ != MPI_SUCCESS)                                                                               \
            return mpi_err(e, mpi_rc_, what);                                                                     \
    } while (0)

int lwq_ranks_init(int *argc, char ***argv, lwq_ranks *rk, lwq_error *e)
{
    one_rank(rk);
    if (!lwq_ranks_launched())
        return 0;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_TRY(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    rk->mpi = !inited;
    MPI_Comm *c = malloc(sizeof *c);
    if (!c)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    rk->comm = c;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, c), "MPI_Comm_dup");
    /* failures come back as codes, so the error can name the rank and the step */
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    MPI_TRY(MPI_Comm_rank(*c, &rk->rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(*c, &rk->size), "MPI_Comm_size");
    MPI_Comm node;
    MPI_TRY(MPI_Comm_split_type(*c, MPI_COMM_TYPE_SHARED, rk->rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    MPI_Comm_rank(node, &rk->local_rank);
    MPI_Comm_size(node, &rk->local_size);
    MPI_Comm_free(&node);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, "\n")] = 0;
        snprintf(rk->impl, sizeof rk->impl, "%s", lib);
    }
    if (!inited && provided < MPI_THREAD_FUNNELED)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "MPI: the library gives thread level %d, lwq needs MPI_THREAD_FUNNELED "
                        "(its I/O threads run beside the one thread that calls MPI)", provided);
    return 0;
}

void lwq_ranks_finalize(lwq_ranks *rk)
{
    if (rk->comm) {
        MPI_Comm_free((MPI_Comm *)rk->comm);
        free(rk->comm);
        rk->comm = NULL;
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (rk->mpi && !fin)
        MPI_Finalize();
    rk->mpi = 0;
}

void lwq_ranks_abort(const lwq_ranks *rk, int code)
{
    if (rk->comm)
        MPI_Abort(COMM(rk), code);
    exit(code);
}

/* Wait for q without spinning a core: an MPI library's blocking calls poll at full speed, and a rank
 * that waits for a slower one (its forward or quantization took longer, rank 0 writes the shard)
 * would take the core from the ranks, threads and other jobs sharing it.  Polls at full speed for
 * a moment (ranks nearly in step), then sleeps between polls, up to 1 ms. */
static int polite_wait(MPI_Request *q, const char *what, lwq_error *e)
{
    long ns = 0;
    for (int polls = 0;; polls++) {
        int done = 0;
        MPI_TRY(MPI_Test(q, &done, MPI_STATUS_IGNORE), what);
        if (done)
            return 0;
        if (polls < 1000)
            continue;
        ns = ns ? (ns < 1000000 ? 2 * ns : ns) : 20000;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
    }
}

int lwq_ranks_barrier(const lwq_ranks *rk, lwq_error *e)
{
    if (rk->size <= 1)
        return 0;
    MPI_Request q;
    MPI_TRY(MPI_Ibarrier(COMM(rk), &q), "MPI_Ibarrier");
    return polite_wait(&q, "MPI_Ibarrier", e);
}

int lwq_ranks_agree(lwq_ranks *rk, int rc, lwq_error *e)
{
    if (rk->size <= 1)
        return rc < 0 ? rc : 0;
    int mine = rc < 0 ? rk->rank : rk->size, first = rk->size;
    MPI_Request q;
    MPI_TRY(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, COMM(rk), &q), "MPI_Iallreduce (status)");
    int prc = polite_wait(&q, "MPI_Iallreduce (status)", e);
    if (prc)
        return prc;
    if (first == rk->size)
        return 0;
    struct {
        int code, agreed;
        char msg[LWQ_ERRMSG_MAX];
    } m;
    memset(&m, 0, sizeof m);
    if (rk->rank == first) {
        m.code = rc;
        m.agreed = rk->agreed; /* an error met at an earlier agreement already names its rank */
        snprintf(m.msg, sizeof m.msg, "%s", e && e->msg[0] ? e->msg : lwq_strerror(rc));
    }
    MPI_TRY(MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, first, COMM(rk)), "MPI_Bcast (error)");
    rk->agreed = 1;
    lwq_error_clear(e);
    if (m.agreed)
        return lwq_errf(e, m.code < 0 ? m.code : LWQ_ESTATE, "%s", m.msg);
    return lwq_errf(e, m.code < 0 ? m.code : LWQ_ESTATE, "rank %d: %s", first, m.msg);
}

int lwq_ranks_bcast(const lwq_ranks *rk, void *buf, size_t bytes, int root, lwq_error *e)
{
    for (size_t off = 0; rk->size > 1 && off < bytes; off += PIECE) {
        size_t k = bytes - off < PIECE ? bytes - off : PIECE;
        MPI_TRY(MPI_Bcast((char *)buf + off, (int)k, MPI_BYTE, root, COMM(rk)), "MPI_Bcast");
    }
    return 0;
}

int lwq_ranks_max_f32(const lwq_ranks *rk, float *v, size_t n, lwq_error *e)
{
    for (size_t off = 0; rk->size > 1 && off < n; off += PIECE / 4) {
        size_t k = n - off < PIECE / 4 ? n - off : PIECE / 4;
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v + off, (int)k, MPI_FLOAT, MPI_MAX, COMM(rk)), "MPI_Allreduce (max)");
    }
    return 0;
}

int lwq_ranks_sum_i64(const lwq_ranks *rk, int64_t *v, size_t n, lwq_error *e)
{
    for (size_t off = 0; rk->size > 1 && off < n; off += PIECE / 8) {
        size_t k = n - off < PIECE / 8 ? n - off : PIECE / 8;
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v + off, (int)k, MPI_INT64_T, MPI_SUM, COMM(rk)), "MPI_Allreduce (sum)");
    }
    return 0;
}

int lwq_ranks_allgather(const lwq_ranks *rk, const void *mine, size_t bytes, void *all, lwq_error *e)
{
    if (rk->size <= 1) {
        memcpy(all, mine, bytes);
        return 0;
    }
    if (bytes > PIECE)
        return lwq_errf(e, LWQ_EINVAL, "MPI: allgather of %zu bytes per rank", bytes);
    MPI_TRY(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, COMM(rk)), "MPI_Allgather");
    return 0;
}

static int send_blob(const lwq_ranks *rk, const void *p, uint64_t n, int to, lwq_error *e)
{
    for (uint64_t off = 0; off < n; off += PIECE) {
        size_t k = (size_t)(n - off < PIECE ? n - off : PIECE);
        MPI_TRY(MPI_Send((const char *)p + off, (int)k, MPI_BYTE, to, 7, COMM(rk)), "MPI_Send");
    }
    return 0;
}

static int recv_blob(const lwq_ranks *rk, void *p, uint64_t n, int from, lwq_error *e)
{
    for (uint64_t off = 0; off < n; off += PIECE) {
        size_t k = (size_t)(n - off < PIECE ? n - off : PIECE);
        MPI_TRY(MPI_Recv((char *)p + off, (int)k, MPI_BYTE, from, 7, COMM(rk), MPI_STATUS_IGNORE), "MPI_Recv");
    }
    return 0;
}

/* LWQ_RANKS_FAIL_ALLOC=R: rank R's gather buffers are refused as if out of memory (test_ranks) */
static int fail_alloc_hook(const lwq_ranks *rk)
{
    long v = env_long("LWQ_RANKS_FAIL_ALLOC");
    return v >= 0 && v == rk->rank;
}

int lwq_ranks_gather_blobs(lwq_ranks *rk, int root, const void *mine, uint64_t n, void **blobs, uint64_t *sizes,
                           lwq_error *e)
{
    int here = root < 0 || rk->rank == root, rc = 0;
    /* Every buffer is allocated before any transfer, and the ranks agree on the result: a rank
     * that stopped on a failed allocation would leave the others blocked in a send or a
     * broadcast for ever.  Where the blobs arrive they are all kept, so allocating them first
     * does not raise the peak. */
    uint64_t *sz = calloc((size_t)rk->size, sizeof *sz);
    if ((rc = lwq_ranks_agree(rk, sz ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory"), e)) != 0) {
        free(sz);
        return rc;
    }
    if ((rc = lwq_ranks_allgather(rk, &n, sizeof n, sz, e)) != 0) {
        free(sz);
        return rc;
    }
    if (here)
        for (int r = 0; r < rk->size; r++) {
            sizes[r] = sz[r];
            blobs[r] = NULL;
        }
    for (int r = 0; here && r < rk->size && rc == 0; r++)
        if (fail_alloc_hook(rk) || !(blobs[r] = malloc(sz[r] ? sz[r] : 1)))
            rc = lwq_errf(e, LWQ_ENOMEM, "cannot allocate %llu bytes for rank %d's quantized tensors",
                          (unsigned long long)sz[r], r);
    if ((rc = lwq_ranks_agree(rk, rc, e)) == 0) {
        if (here)
            memcpy(blobs[rk->rank], mine, n);
        for (int r = 0; r < rk->size && rc == 0; r++) {
            if (root < 0) /* everyone: rank r broadcasts */
                rc = lwq_ranks_bcast(rk, blobs[r], sz[r], r, e);
            else if (r != root && rk->rank == r)
                rc = send_blob(rk, mine, n, root, e);
            else if (r != root && rk->rank == root)
                rc = recv_blob(rk, blobs[r], sz[r], r, e);
        }
    }
    if (rc && here)
        for (int r = 0; r < rk->size; r++) {
            free(blobs[r]);
            blobs[r] = NULL;
        }
    free(sz);
    return rc;
}

#else /* built without MPI: one rank */

int lwq_ranks_init(int *argc, char ***argv, lwq_ranks *rk, lwq_error *e)
{
    (void)argc;
    (void)argv;
    one_rank(rk);
    long n = launcher_size();
    if (env_long("LWQ_MPI") == 1 || n > 1)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "started as one of %ld processes, but this lwq was built without MPI "
                        "(LWQ_MPI=OFF or no MPI found): each would write the whole output. Rebuild with MPI "
                        "(scripts/setup.sh installs Open MPI)", n > 1 ? n : 0);
    return 0;
}

void lwq_ranks_finalize(lwq_ranks *rk) { (void)rk; }
void lwq_ranks_abort(const lwq_ranks *rk, int code)
{
    (void)rk;
    exit(code);
}
int lwq_ranks_barrier(const lwq_ranks *rk, lwq_error *e)
{
    (void)rk;
    (void)e;
    return 0;
}
int lwq_ranks_agree(lwq_ranks *rk, int rc, lwq_error *e)
{
    (void)rk;
    (void)e;
    return rc < 0 ? rc : 0;
}
int lwq_ranks_bcast(const lwq_ranks *rk, void *buf, size_t bytes, int root, lwq_error *e)
{
    (void)rk, (void)buf, (void)bytes, (void)root, (void)e;
    return 0;
}
int lwq_ranks_max_f32(const lwq_ranks *rk, float *v, size_t n, lwq_error *e)
{
    (void)rk, (void)v, (void)n, (void)e;
    return 0;
}
int lwq_ranks_sum_i64(const lwq_ranks *rk, int64_t *v, size_t n, lwq_error *e)
{
    (void)rk, (void)v, (void)n, (void)e;
    return 0;
}
int lwq_ranks_allgather(const lwq_ranks *rk, const void *mine, size_t bytes, void *all, lwq_error *e)
{
    (void)rk, (void)e;
    memcpy(all, mine, bytes);
    return 0;
}
int lwq_ranks_gather_blobs(lwq_ranks *rk, int root, const void *mine, uint64_t n, void **blobs, uint64_t *sizes,
                           lwq_error *e)
{
    (void)rk, (void)root;
    blobs[0] = malloc(n ? n : 1);
    if (!blobs[0])
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    memcpy(blobs[0], mine, n);
    sizes[0] = n;
    return 0;
}

#endif
