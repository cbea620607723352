/* core/sys/trace.c — NVTX behind core/sys/trace.h (built with CUDA only; see the header). */
#include "core/sys/trace.h"

#ifdef LWQ_HAVE_CUDA
#include <stdio.h>

#include <nvtx3/nvToolsExt.h>

void lwq_trace_begin(const char *what, int64_t index)
{
    if (index < 0) {
        nvtxRangePushA(what);
        return;
    }
    char name[96];
    snprintf(name, sizeof name, "%s %lld", what, (long long)index);
    nvtxRangePushA(name);
}

void lwq_trace_end(void) { nvtxRangePop(); }
#else
/* ISO C wants at least one declaration in a translation unit */
typedef int lwq_trace_unused;
#endif
