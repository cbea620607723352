/* The auto-quantize search under hostile or edge inputs (issue 36, findings 8-10): a refused budget's printed least is accepted when given back, the format list means what it says, a scores file is checked against the model. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"

TestSuite(hostile_autoq, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 300);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

/* A tiny llama whose least mix (4.50909... bits per weight, 0.0001585... GB) both round DOWN to
 * nearest at the printed digits. */
static void make_model(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch llama --hidden 64 --layers 1 --heads 4 --kv-heads 2 --vocab 512 "
                         "--quiet", lwqt_bin(), lwqt_path("m")), 0);
}

/* lwq quantize m -o OUT QARGS EXTRA; stderr to err.txt. */
static int aq(const char *out, const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s " QARGS " %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path(out), extra,
                   lwqt_path("err.txt"));
}

/* The number after "allow: " in err.txt (the refusal's least), as printed. */
static void printed_least(char *num, size_t cap)
{
    char *err = lwqt_err();
    const char *p = strstr(err, "allow: ");
    cr_assert_not_null(p, "no least in the refusal: %s", err);
    p += strlen("allow: ");
    size_t n = strspn(p, "0123456789.");
    cr_assert(n > 0 && n < cap, "no number after \"allow: \": %s", err);
    memcpy(num, p, n);
    num[n] = 0;
    free(err);
}

static void least_given_back_is_accepted(const char *flag, const char *too_small)
{
    make_model();
    char extra[128], num[32];
    snprintf(extra, sizeof extra, "%s %s", flag, too_small);
    cr_assert_eq(aq("o", extra), 2, "%s %s was not refused", flag, too_small);
    printed_least(num, sizeof num);
    snprintf(extra, sizeof extra, "%s %s", flag, num);
    int rc = aq("o", extra);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s %s (the printed least) was refused again: %s", flag, num, err);
    free(err);
}

Test(hostile_autoq, the_printed_least_bits_are_accepted)
{
    least_given_back_is_accepted("--auto-quantize-bits", "1");
}

Test(hostile_autoq, the_printed_least_gb_is_accepted)
{
    least_given_back_is_accepted("--auto-quantize-gb", "0.00000001");
}
