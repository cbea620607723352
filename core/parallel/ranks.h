/* core/parallel/ranks.h — the processes of one run under MPI (`mpirun -np N lwq ...`, `srun lwq ...`), and
 * the few collectives the run needs.  No home-made transport: MPI (Open MPI or MPICH) moves the
 * bytes; built without MPI (LWQ_MPI=OFF, or none found) there is one rank and every collective is
 * a copy.
 *
 * MPI is initialised only when a launcher started the process (its environment says so:
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, or SLURM_NTASKS under srun; LWQ_MPI=0 / 1 overrides),
 * so a plain `lwq quantize` never touches MPI.  It is initialised with MPI_THREAD_FUNNELED: every
 * call of this module is made by the thread that called lwq_ranks_init (the engine thread); the
 * writer and prefetch threads never call it.
 *
 * Collectives: every rank calls the same ones in the same order.  Each returns 0 or a negative
 * LWQ_E* code (LWQ_EIO for an MPI failure, with MPI's message).  Sizes are in bytes or elements
 * of any size_t: they are split into pieces MPI's int counts can carry.  lwq_ranks_agree is how a
 * failure on one rank becomes the same error on all of them instead of a hang: every rank passes
 * its status, and all return the first failing rank's code and message ("rank 2: ..."). */
#ifndef LWQ_CORE_RANKS_H
#define LWQ_CORE_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"

typedef struct lwq_ranks {
    int rank, size;               /* 0 and 1 without MPI */
    int local_rank, local_size;   /* among the ranks on this node */
    int mpi;                      /* MPI was initialised by lwq_ranks_init */
    char impl[96];                /* "Open MPI v4.1.4, ..." / "MPICH Version: 4.0.2 ..." / "" */
    void *comm;                   /* the run's communicator (a dup of MPI_COMM_WORLD) */
    int agreed;                   /* a failure went through lwq_ranks_agree: every rank has it */
} lwq_ranks;

/* Whether this binary was built with MPI. */
int lwq_ranks_built_with_mpi(void);
/* Whether the environment says a launcher started this process as one of several (or LWQ_MPI=1). */
int lwq_ranks_launched(void);
/* One rank (no MPI) unless launched; then MPI_Init_thread.  Launched but built without MPI:
 * LWQ_EUNSUPPORTED saying so (N copies would each write the whole output). */
int lwq_ranks_init(int *argc, char ***argv, lwq_ranks *rk, lwq_error *e);
/* MPI_Finalize when initialised (every rank must reach it). */
void lwq_ranks_finalize(lwq_ranks *rk);
/* End every rank of the job now (a failure not every rank can learn at an agreement point). */
void lwq_ranks_abort(const lwq_ranks *rk, int code);

int lwq_ranks_barrier(const lwq_ranks *rk, lwq_error *e);
/* All ranks learn the first (lowest) failing rank's code and message; 0 when none failed.  A
 * failure sets rk->agreed (the caller may exit without ending the others). */
int lwq_ranks_agree(lwq_ranks *rk, int rc, lwq_error *e);
int lwq_ranks_bcast(const lwq_ranks *rk, void *buf, size_t bytes, int root, lwq_error *e);
/* Element-wise over all ranks, in place on every rank. */
int lwq_ranks_max_f32(const lwq_ranks *rk, float *v, size_t n, lwq_error *e);
int lwq_ranks_sum_i64(const lwq_ranks *rk, int64_t *v, size_t n, lwq_error *e);
/* all[r * bytes ..] = rank r's `mine` (bytes each), on every rank. */
int lwq_ranks_allgather(const lwq_ranks *rk, const void *mine, size_t bytes, void *all, lwq_error *e);
/* Variable-size blobs: rank r's (mine, n) arrive at root (root == -1: at every rank) as
 * blobs[r] (malloc'd, freed by the caller; blobs[self] is a copy) and sizes[r].  blobs and sizes
 * have size entries where they arrive, and are untouched elsewhere.  A failed allocation on any
 * rank is agreed (lwq_ranks_agree): every rank returns the error, none is left waiting. */
int lwq_ranks_gather_blobs(lwq_ranks *rk, int root, const void *mine, uint64_t n, void **blobs, uint64_t *sizes,
                           lwq_error *e);

/* ---- the job's first agreement: what every rank was asked to do -------------------------------
 * A rank that leaves before its first collective (it printed a recipe, a plan or its usage, ran
 * another command, or refused its command line) would leave the others waiting in theirs for
 * ever; ranks whose options differ would meet in different collectives (MPI_ERR_TRUNCATE).  So
 * every lwq process a launcher starts first calls lwq_ranks_agree_job, whatever its command and
 * options, with what it was asked to do: its command ("lwq quantize", "lwq quantize
 * --print-recipe", "lwq plan", "lwq verify", ...) and its options as (key, value) pairs, a flag's
 * value "" (a later pair of the same key replaces an earlier one, as a later option overrides).
 * Its collectives are of fixed size (the statuses, then a hash and a length per rank); only when
 * the descriptions differ are they exchanged, to name the difference. */
typedef struct lwq_ranks_job {
    char *command;
    char **key, **val;
    int n, cap;
    int oom; /* an allocation failed: the agreement reports it */
} lwq_ranks_job;

void lwq_ranks_job_command(lwq_ranks_job *j, const char *command);
void lwq_ranks_job_add(lwq_ranks_job *j, const char *key, const char *val);
void lwq_ranks_job_free(lwq_ranks_job *j);
/* Every rank's status (0 or a negative LWQ_E* code with e's message) and job.  0 when every rank
 * succeeded and every job equals rank 0's; otherwise every rank returns the same error and
 * rk->agreed is set: "rank N: <its message>" for the lowest failing rank, else "rank N was
 * started as `C`, rank 0 as `D`..." or "rank N differs from rank 0 in: KEY (rank N: V, rank 0:
 * W), ..." for the lowest rank that differs. */
int lwq_ranks_agree_job(lwq_ranks *rk, int status, const lwq_ranks_job *j, lwq_error *e);

#endif
