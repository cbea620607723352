/* tests/report_hooks.c — linked into every test program: prints each skipped test with its reason
 * ("[SKIP] suite::test: fixture ... not found ...") and a final "[====] Skipped: N of M tests"
 * line, which Criterion's own summary leaves out.  scripts/test.sh counts these lines. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>

ReportHook(POST_TEST)(struct criterion_test_stats *st)
{
    if (st->test_status == CR_STATUS_SKIPPED)
        fprintf(stderr, "[SKIP] %s::%s: %s\n", st->test->category, st->test->name, st->message ? st->message : "");
}

ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
    if (st->tests_skipped)
        fprintf(stderr, "[====] Skipped: %zu of %zu tests\n", st->tests_skipped, st->nb_tests);
}
