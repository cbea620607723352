/* kernels/cpu/mamba2/mamba2_scan_ref.c — the portable Mamba2 scan of mamba2_scan.h: the recurrence
 * as kernels/mamba2.h writes it, channel p outside and state k inside, one float at a time.  The
 * reference the vector kernels give the bits of (tests/kernels/test_mamba2_cpu.c). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/mamba2/mamba2_scan.h"

void lwq_mamba2_scan_ref(const lwq_mamba2_scan_item *it)
{
    const int64_t P = it->P, N = it->N;
    float *S = it->S; /* p-major here: P rows of N */
    memset(S, 0, (size_t)(P * N) * sizeof(float));
    for (int64_t t = 0; t < it->T; t++) {
        float *y = it->y + t * it->ldy;
        if (!it->valid[t]) {
            memset(y, 0, (size_t)P * sizeof(float));
            continue;
        }
        const float *x = it->x + t * it->ldx, *B = it->B + t * it->ldx, *Cm = it->C + t * it->ldx;
        const float dtv = it->dt[t * it->ldd], decay = expf(it->A * dtv);
        for (int64_t p = 0; p < P; p++) {
            float *restrict Sp = S + p * N;
            const float xd = x[p] * dtv;
            float acc = 0.0f;
            for (int64_t k = 0; k < N; k++) {
                Sp[k] = Sp[k] * decay + xd * B[k];
                acc += Sp[k] * Cm[k];
            }
            y[p] = acc + it->D * x[p];
        }
    }
}
