#include "core/data/fixsum.h"

#include <string.h>

/* |accumulator| < 2^120 on one process: its top limb then stays within +-2^24, so 2^30 of them
 * sum without overflow; a reduced value must stay below 2^126. */
#define ACC_BITS 120
#define SUM_BITS 126

static int in_range(lwq_fix v, int bits)
{
    lwq_fix hi = v >> bits; /* arithmetic: 0 or -1 when |v| < 2^bits */
    return hi == 0 || hi == -1;
}

/* round(x * 2^FRAC) into *q, exactly, from the IEEE-754 fields (no libm, no FPU rounding mode) */
static int fix_round(double x, lwq_fix *q)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    int neg = (int)(b >> 63), ex = (int)((b >> 52) & 0x7ff);
    uint64_t man = b & ((UINT64_C(1) << 52) - 1);
    if (ex == 0x7ff)
        return -1;
    if (ex == 0) {
        if (man == 0) {
            *q = 0;
            return 0;
        }
        ex = 1; /* subnormal: man * 2^(1 - 1075) */
    } else {
        man |= UINT64_C(1) << 52;
    }
    /* x = man * 2^(ex - 1075); scaled by 2^FRAC */
    int s = ex - 1075 + LWQ_FIX_FRAC;
    unsigned __int128 mag;
    if (s >= 0) {
        if (s > ACC_BITS - 1 - 53)
            return -1;
        mag = (unsigned __int128)man << s;
    } else if (-s >= 54) {
        mag = 0; /* man < 2^53: below half a grid step */
    } else {
        int sh = -s;
        uint64_t qm = man >> sh, rem = man & ((UINT64_C(1) << sh) - 1), half = UINT64_C(1) << (sh - 1);
        if (rem > half || (rem == half && (qm & 1)))
            qm++;
        mag = qm;
    }
    *q = neg ? -(lwq_fix)mag : (lwq_fix)mag;
    return 0;
}

int64_t lwq_fix_add(lwq_fix *acc, const double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (x[i] == 0)
            continue;
        lwq_fix q;
        if (fix_round(x[i], &q) < 0)
            return i;
        lwq_fix s = acc[i] + q; /* both below 2^120: no overflow */
        if (!in_range(s, ACC_BITS))
            return i;
        acc[i] = s;
    }
    return -1;
}

double lwq_fix_to_double(lwq_fix a)
{
    /* round to 53 bits by hand (ties to even), then scale: no dependence on the compiler's
     * int128 -> double conversion */
    int neg = a < 0;
    unsigned __int128 m = neg ? (unsigned __int128)(-a) : (unsigned __int128)a;
    if (m == 0)
        return 0.0;
    int top = 127;
    while (!((m >> top) & 1))
        top--;
    int e = -LWQ_FIX_FRAC;
    if (top > 52) {
        int sh = top - 52;
        unsigned __int128 q = m >> sh, rem = m & (((unsigned __int128)1 << sh) - 1),
                          half = (unsigned __int128)1 << (sh - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        m = q;
        e += sh;
    }
    double v = (double)(uint64_t)m; /* < 2^54: exact */
    /* scale by 2^e, e in [-56, 126 - 52]: exact (no subnormals, no overflow) */
    while (e > 0) {
        int k = e > 60 ? 60 : e;
        v *= (double)(UINT64_C(1) << k);
        e -= k;
    }
    while (e < 0) {
        int k = -e > 60 ? 60 : -e;
        v /= (double)(UINT64_C(1) << k);
        e += k;
    }
    return neg ? -v : v;
}

void lwq_fix_to_limbs(const lwq_fix *a, int64_t n, int64_t *limbs)
{
    for (int64_t i = 0; i < n; i++) {
        lwq_fix v = a[i];
        for (int k = 0; k < LWQ_FIX_LIMBS - 1; k++) {
            limbs[i * LWQ_FIX_LIMBS + k] = (int64_t)(v & 0xffffffff);
            v >>= 32; /* arithmetic: floor division */
        }
        limbs[i * LWQ_FIX_LIMBS + LWQ_FIX_LIMBS - 1] = (int64_t)v;
    }
}

int64_t lwq_fix_from_limbs(const int64_t *limbs, int64_t n, lwq_fix *a)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t l[LWQ_FIX_LIMBS];
        memcpy(l, limbs + i * LWQ_FIX_LIMBS, sizeof l);
        for (int k = 0; k < LWQ_FIX_LIMBS - 1; k++) { /* low limbs back into [0, 2^32) */
            int64_t c = l[k] >> 32;
            l[k] -= c * ((int64_t)1 << 32);
            l[k + 1] += c;
        }
        int64_t top = l[LWQ_FIX_LIMBS - 1];
        if (top >= ((int64_t)1 << (SUM_BITS - 96)) || top < -((int64_t)1 << (SUM_BITS - 96)))
            return i;
        lwq_fix v = top;
        for (int k = LWQ_FIX_LIMBS - 2; k >= 0; k--)
            v = v * ((lwq_fix)1 << 32) + l[k];
        a[i] = v;
    }
    return -1;
}
