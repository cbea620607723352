/* tests/core/test_parallel.c — the thread pool visits every index once; nested calls run inline; workers joined at exit; the default count follows CPU affinity. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/parallel/parallel.h"

static void fill(void *ctx, int64_t b, int64_t e, int tid)
{
    int *a = ctx;
    for (int64_t i = b; i < e; i++)
        a[i] += (int)i + 1;
}

Test(parallel, every_index_visited_once)
{
    for (int t = 1; t <= 4; t++) {
        lwq_parallel_set_threads(t);
        for (int64_t n = 0; n < 50; n++) {
            int a[64] = {0};
            lwq_parallel_for(n, 1, fill, a);
            for (int64_t i = 0; i < 64; i++)
                cr_assert_eq(a[i], i < n ? (int)i + 1 : 0, "t=%d n=%ld i=%ld", t, (long)n, (long)i);
        }
    }
    lwq_parallel_shutdown();
}

static void nested(void *ctx, int64_t b, int64_t e, int tid)
{
    for (int64_t i = b; i < e; i++)
        lwq_parallel_for(4, 1, fill, (int *)ctx + 4 * i);
}

Test(parallel, nested_call_runs_inline)
{
    lwq_parallel_set_threads(3);
    int a[32] = {0};
    lwq_parallel_for(8, 1, nested, a);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(a[i], i % 4 + 1);
    lwq_parallel_shutdown();
}

/* Threads of this process, from /proc/self/task. */
static int task_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Registered before the pool starts, so it runs after the pool's own exit hook. */
static void exit_with_task_count(void) { _exit(task_count() == 1 ? 0 : 10 + task_count()); }

/* The workers are joined at exit (valgrind --leak-check=full counted their stacks as "possibly
 * lost" in every lwq command). */
Test(parallel, workers_are_joined_at_exit)
{
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) {
        atexit(exit_with_task_count);
        lwq_parallel_set_threads(4);
        int a[64] = {0};
        lwq_parallel_for(64, 1, fill, a);
        exit(0);
    }
    int st;
    cr_assert_eq(waitpid(p, &st, 0), p);
    cr_assert(WIFEXITED(st));
    cr_assert_eq(WEXITSTATUS(st), 0, "%d threads (the main one included) were running at exit", WEXITSTATUS(st) - 10);
}

/* A child forked after the pool started has none of its workers; it starts its own and exits
 * (it used to hand its loop to the parent's workers and wait for them forever). */
Test(parallel, a_forked_child_runs_loops_and_exits, .timeout = 30)
{
    lwq_parallel_set_threads(3);
    int a[64] = {0};
    lwq_parallel_for(64, 1, fill, a);
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) {
        int b[64] = {0};
        lwq_parallel_for(64, 1, fill, b);
        exit(b[63] == 64 ? 0 : 1);
    }
    int st;
    cr_assert_eq(waitpid(p, &st, 0), p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    lwq_parallel_shutdown();
}

/* The default thread count is the affinity mask's CPU count: a run pinned to one core (taskset,
 * cgroups, MPI binding) starts one thread, not one per online CPU. */
Test(parallel, default_threads_follow_the_affinity_mask)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        cr_skip("one online CPU: pinning cannot change the count");
    unsetenv("LWQ_THREADS");
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &set))
        cpu++;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0);
    cr_assert_eq(lwq_parallel_threads(), 1, "pinned to CPU %d, the default is %d threads", cpu, lwq_parallel_threads());
}
