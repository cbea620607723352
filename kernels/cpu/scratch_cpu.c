/* kernels/cpu/scratch_cpu.c — the CPU ops' scratch, kept from call to call.
 *
 * A forward makes thousands of op calls per layer (a routed MoE layer: three GEMMs per expert),
 * and an aligned_alloc / free per call and thread share cost page faults and allocator locks
 * that showed in the profile (perf/RESULTS.md, issue 37).  Instead each calling thread owns one
 * grow-only, 64-byte aligned buffer per slot (lwq_cpu_scratch_slot), reused by every later call
 * on that thread and freed when the thread exits (a pthread key's destructor; the main thread's
 * stay reachable through the key until exit).  A buffer only grows to the largest request of
 * its slot, which the old per-call allocation needed at that moment anyway.  Contents are not
 * kept: a caller writes what it reads.  Thread-safety: per thread, so concurrent calls from
 * different threads never share a buffer; one call must not use one slot twice. */
#include <pthread.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

typedef struct scratch_set {
    void *p[LWQ_SCRATCH_SLOTS];
    size_t cap[LWQ_SCRATCH_SLOTS];
} scratch_set;

static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_key_ok;

static void scratch_set_free(void *v)
{
    scratch_set *s = (scratch_set *)v;
    for (int i = 0; i < LWQ_SCRATCH_SLOTS; i++)
        free(s->p[i]);
    free(s);
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_key, scratch_set_free) == 0; }

void *lwq_cpu_scratch_slot(int slot, int64_t count, size_t elem)
{
    if (slot < 0 || slot >= LWQ_SCRATCH_SLOTS || count < 0 ||
        (count > 0 && (uint64_t)count > (SIZE_MAX - 64) / elem))
        return NULL;
    pthread_once(&g_once, key_init);
    if (!g_key_ok)
        return NULL;
    scratch_set *s = (scratch_set *)pthread_getspecific(g_key);
    if (!s) {
        s = (scratch_set *)calloc(1, sizeof *s);
        if (!s || pthread_setspecific(g_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    size_t bytes = ((size_t)count * elem + 63) & ~(size_t)63;
    if (bytes == 0)
        bytes = 64;
    if (bytes > s->cap[slot]) {
        void *p = aligned_alloc(64, bytes);
        if (!p)
            return NULL;
        free(s->p[slot]);
        s->p[slot] = p;
        s->cap[slot] = bytes;
    }
    return s->p[slot];
}
