/* tools/quantize_batch.c — the largest calibration batch that fits (see quantize_batch.h). */
#include "tools/quantize_batch.h"

#include <stdio.h>
#include <unistd.h>

static int fits(lwq_quantize_opts *o, int b, double host_budget, double gpu_budget, lwq_mem_plan *p, lwq_error *e)
{
    o->batch_size = b;
    int rc = lwq_quantize_plan(o, p, e);
    if (rc)
        return rc;
    return (double)p->host_peak <= host_budget && (gpu_budget <= 0 || (double)p->gpu_peak <= gpu_budget) ? 1 : 0;
}

int lwq_pick_batch_size(lwq_quantize_opts *o, lwq_error *e)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    double host = o->max_cpu_gb > 0 ? o->max_cpu_gb * 1e9 : (double)pages * (double)psz;
    double gpu = o->max_gpu_gb > 0 ? o->max_gpu_gb * 1e9 : 0;
    int hi = o->calib->n < 4096 ? o->calib->n : 4096;
    if (hi < 1)
        hi = 1;
    lwq_mem_plan p;
    int rc = fits(o, 1, host, gpu, &p, e);
    if (rc < 0 || (rc > 1))
        return rc;
    if (rc == 0)
        return lwq_errf(e, LWQ_EINVAL, "--batch-size 0: even a batch of 1 needs %.3f GB host / %.3f GB GPU, over the "
                        "budget of %.3f GB host%s", (double)p.host_peak / 1e9, (double)p.gpu_peak / 1e9, host / 1e9,
                        gpu > 0 ? " and the GPU budget" : "");
    int lo = 1;
    while (lo < hi) { /* invariant: lo fits; hi is the largest candidate left */
        int mid = lo + (hi - lo + 1) / 2;
        rc = fits(o, mid, host, gpu, &p, e);
        if (rc < 0 || rc > 1)
            return rc;
        if (rc)
            lo = mid;
        else
            hi = mid - 1;
    }
    o->batch_size = lo;
    if ((rc = lwq_quantize_plan(o, &p, e)) != 0)
        return rc;
    if (!o->quiet)
        fprintf(stderr, "lwq: --batch-size 0: batch size %d (the largest that fits: host %.3f GB of %.3f GB%s%s)\n",
                lo, (double)p.host_peak / 1e9, host / 1e9, gpu > 0 ? ", GPU within --max-gpu-memory-gb" : "",
                lo == (o->calib->n < 4096 ? o->calib->n : 4096) ? "; every sample in one batch" : "");
    return 0;
}
