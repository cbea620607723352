#include "core/sys/proc.h"

#include <stdio.h>
#include <time.h>

double lwq_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void lwq_rss(uint64_t *rss, uint64_t *hwm)
{
    *rss = *hwm = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            *rss = kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            *hwm = kb * 1024;
    }
    fclose(f);
}

