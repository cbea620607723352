/* core/sys/proc.h — facts about this process: a monotonic clock and its memory use. */
#ifndef LWQ_CORE_PROC_H
#define LWQ_CORE_PROC_H

#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC. */
double lwq_now(void);
/* Resident and peak resident set size in bytes (VmRSS, VmHWM of /proc/self/status; 0 when
 * unavailable). */
void lwq_rss(uint64_t *rss, uint64_t *hwm);

#endif
