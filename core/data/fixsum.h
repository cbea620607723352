/* core/data/fixsum.h — sums of doubles whose bits do not depend on how the terms are split.
 *
 * A floating-point sum depends on the order of its additions, so a Hessian summed over 1, 2 or N
 * ranks (or by MPI's reduction tree) would differ in its last bits.  Here each term is rounded
 * ONCE (to nearest, ties to even) onto the grid 2^-LWQ_FIX_FRAC and added as a 128-bit integer.
 * Integer addition is associative and exact, so a sum over any split of the same terms, in any
 * order, on any number of processes, has the same bits.  The grid's resolution is 2^-56
 * (1.4e-17); an accumulator holds magnitudes below 2^64 (1.8e19) on one process, a reduced total
 * below 2^70.  Leaving that range is reported (the index of the entry), never wrapped.
 *
 * For reductions between processes an accumulator is written as LWQ_FIX_LIMBS int64 limbs of 32
 * bits each (the top one signed), which plain integer SUM reductions (MPI_SUM, ncclSum) add
 * without overflow for up to 2^30 contributors; lwq_fix_from_limbs carries them back. */
#ifndef LWQ_CORE_FIXSUM_H
#define LWQ_CORE_FIXSUM_H

#include <stdint.h>

__extension__ typedef __int128 lwq_fix;

#define LWQ_FIX_FRAC 56  /* grid 2^-56 */
#define LWQ_FIX_LIMBS 4  /* int64 limbs per value on the wire */

/* acc[i] += round(x[i] * 2^56) for i in [0, n).  Returns -1, or the first index whose term is not
 * finite or whose term or new sum leaves the range (acc[i] is then left unchanged; entries before
 * it were added). */
int64_t lwq_fix_add(lwq_fix *acc, const double *x, int64_t n);
/* a * 2^-56 as the nearest double (the same bits for the same integer, wherever computed). */
double lwq_fix_to_double(lwq_fix a);
/* limbs[4i..4i+3] = a[i] as 32-bit digits, least significant first, the top one signed. */
void lwq_fix_to_limbs(const lwq_fix *a, int64_t n, int64_t *limbs);
/* a[i] = the value of summed limbs (carries propagated).  Returns -1, or the first index whose
 * value leaves the reduced range. */
int64_t lwq_fix_from_limbs(const int64_t *limbs, int64_t n, lwq_fix *a);

#endif
