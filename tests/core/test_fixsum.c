/* core/data/fixsum: terms rounded once onto the 2^-56 grid, sums exact and independent of their split. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/data/fixsum.h"

static double grid(double k) { return ldexp(k, -LWQ_FIX_FRAC); }

Test(fixsum, terms_round_to_nearest_even_on_the_grid)
{
    double x[4] = {grid(1.5), grid(2.5), grid(0.5), grid(-1.5)};
    lwq_fix a[4] = {0};
    cr_assert_eq(lwq_fix_add(a, x, 4), -1);
    cr_assert(a[0] == 2 && a[1] == 2 && a[2] == 0 && a[3] == -2);
    cr_assert_eq(lwq_fix_to_double(a[0]), grid(2));
}

Test(fixsum, any_split_and_order_gives_the_same_bits)
{
    enum { N = 2000 };
    double *t = malloc(N * sizeof *t);
    srand(7);
    for (int i = 0; i < N; i++)
        t[i] = ldexp((double)rand() / RAND_MAX - 0.5, rand() % 60 - 30);
    lwq_fix fwd = 0, rev = 0, halves[2] = {0, 0};
    for (int i = 0; i < N; i++)
        cr_assert_eq(lwq_fix_add(&fwd, &t[i], 1), -1);
    for (int i = N - 1; i >= 0; i--)
        cr_assert_eq(lwq_fix_add(&rev, &t[i], 1), -1);
    for (int i = 0; i < N; i++)
        cr_assert_eq(lwq_fix_add(&halves[i % 2], &t[i], 1), -1);
    /* the two halves meet as limbs summed with plain integer addition (as MPI_SUM does) */
    int64_t l0[LWQ_FIX_LIMBS], l1[LWQ_FIX_LIMBS], sum[LWQ_FIX_LIMBS];
    lwq_fix_to_limbs(&halves[0], 1, l0);
    lwq_fix_to_limbs(&halves[1], 1, l1);
    for (int k = 0; k < LWQ_FIX_LIMBS; k++)
        sum[k] = l0[k] + l1[k];
    lwq_fix joined;
    cr_assert_eq(lwq_fix_from_limbs(sum, 1, &joined), -1);
    cr_assert(fwd == rev && fwd == joined);
    cr_assert_eq(lwq_fix_to_double(fwd), lwq_fix_to_double(joined));
    /* and the value is the exact sum to within one grid step per term */
    long double ref = 0;
    for (int i = 0; i < N; i++)
        ref += t[i];
    cr_assert(fabsl((long double)lwq_fix_to_double(fwd) - ref) < N * grid(1) + fabsl(ref) * 1e-15L);
    free(t);
}

Test(fixsum, negative_values_survive_the_limbs)
{
    double x[3] = {-12345.678, 3.0e-9, -1.0e15};
    lwq_fix a[3] = {0}, b[3];
    int64_t l[3 * LWQ_FIX_LIMBS];
    cr_assert_eq(lwq_fix_add(a, x, 3), -1);
    lwq_fix_to_limbs(a, 3, l);
    cr_assert_eq(lwq_fix_from_limbs(l, 3, b), -1);
    for (int i = 0; i < 3; i++) {
        cr_assert(a[i] == b[i]);
        cr_assert(fabs(lwq_fix_to_double(b[i]) - x[i]) <= grid(1), "%d", i);
    }
}

Test(fixsum, leaving_the_range_is_reported_not_wrapped)
{
    double big[2] = {1.0, ldexp(1.0, 64)}, nan[1] = {NAN};
    lwq_fix a[2] = {0, 0}, z = 0;
    cr_assert_eq(lwq_fix_add(a, big, 2), 1, "the second term is out of range");
    cr_assert(a[1] == 0, "left unchanged");
    cr_assert_eq(lwq_fix_add(&z, nan, 1), 0);
    /* many in-range terms whose sum leaves the range */
    double t = ldexp(1.0, 62);
    lwq_fix s = 0;
    int64_t bad = -1;
    for (int i = 0; i < 8 && bad < 0; i++)
        bad = lwq_fix_add(&s, &t, 1);
    cr_assert_eq(bad, 0, "the sum past 2^64 is refused");
}
