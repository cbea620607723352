/* core/sys/trace.h — named time ranges for profilers: NVTX ranges that Nsight Systems draws on each
 * thread's timeline (perf/profile-nsys.sh).
 *
 * Compiled in only with CUDA (LWQ_HAVE_CUDA, when the build found the toolkit, whose nvtx3
 * headers are header-only); without it both macros expand to nothing and cost nothing.  With it,
 * a range costs a few nanoseconds unless a tool is attached: NVTX loads an injection library only
 * when a profiler asks for one.  Names are "<what> <index>" (e.g. "forward 12"), or just <what>
 * when index < 0.
 *
 * Rules: a range is begun and ended on the same thread (NVTX push/pop keep a per-thread stack),
 * so every LWQ_TRACE_BEGIN has its LWQ_TRACE_END in the same function on every path, and ranges
 * nest.  Thread-safety: any thread.  Failure: none; tracing never changes what the code does. */
#ifndef LWQ_CORE_TRACE_H
#define LWQ_CORE_TRACE_H

#include <stdint.h>

#ifdef LWQ_HAVE_CUDA
void lwq_trace_begin(const char *what, int64_t index);
void lwq_trace_end(void);
#define LWQ_TRACE_BEGIN(what, index) lwq_trace_begin((what), (int64_t)(index))
#define LWQ_TRACE_END() lwq_trace_end()
#else
#define LWQ_TRACE_BEGIN(what, index) ((void)0)
#define LWQ_TRACE_END() ((void)0)
#endif

#endif
