/* The resume manifest's lm_head_input_amax (a W8A8 lm_head's calibration amax, committed with the last layer): exact round trip, and the file's value read as untrusted input. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/run/resume/manifest.h"
#include "tests/helpers/run.h"

TestSuite(manifest_head, .init = lwqt_setup, .fini = lwqt_teardown);

/* a manifest of 2 layers, `committed` of them committed, rendered into m.json */
static void write_manifest(int committed, int has, float amax)
{
    lwq_fingerprint fp = {{1, 2, 3, 4, 5, 6, 7, 8}, 0};
    lwq_fp_finish(&fp);
    lwq_manifest m;
    lwq_error e = {0};
    cr_assert_eq(lwq_manifest_init(&m, &fp, 2, &e), 0, "%s", e.msg);
    m.committed = committed;
    if (committed > 0 && committed < 2) {
        snprintf(m.boundary_file, sizeof m.boundary_file, LWQ_RESUME_BOUNDARY_FMT, committed % 2);
        m.boundary_bytes = 64;
    }
    m.has_head_amax = has;
    m.head_amax = amax;
    char *s = lwq_manifest_render(&m);
    cr_assert_not_null(s);
    lwqt_write_str("m.json", s);
    free(s);
    lwq_manifest_free(&m);
}

Test(manifest_head, the_amax_round_trips_bit_for_bit)
{
    float a = nextafterf(3.25f, 4.0f);
    write_manifest(2, 1, a);
    lwq_manifest m;
    lwq_error e = {0};
    cr_assert_eq(lwq_manifest_load(lwqt_path("m.json"), &m, &e), 0, "%s", e.msg);
    cr_assert(m.has_head_amax);
    cr_assert_eq(memcmp(&m.head_amax, &a, sizeof a), 0, "%.9g read back as %.9g", a, m.head_amax);
    lwq_manifest_free(&m);
}

Test(manifest_head, a_manifest_without_it_has_none)
{
    write_manifest(2, 0, 0);
    lwq_manifest m;
    lwq_error e = {0};
    cr_assert_eq(lwq_manifest_load(lwqt_path("m.json"), &m, &e), 0, "%s", e.msg);
    cr_assert_not(m.has_head_amax);
    lwq_manifest_free(&m);
}

/* the amax belongs to the last commit: a manifest of 1 of 2 layers naming one is refused, naming the field */
Test(manifest_head, before_the_last_commit_it_is_refused)
{
    write_manifest(1, 1, 2.0f);
    lwq_manifest m;
    lwq_error e = {0};
    cr_assert_neq(lwq_manifest_load(lwqt_path("m.json"), &m, &e), 0);
    cr_assert(strstr(e.msg, "field \"lm_head_input_amax\" is missing or invalid"), "%s", e.msg);
}

/* an edited value that is no finite non-negative f32 (here NaN's bits) is refused */
Test(manifest_head, a_nan_amax_is_refused)
{
    write_manifest(2, 1, 1.0f);
    char *s = lwqt_slurp(lwqt_path("m.json"));
    char *p = strstr(s, "\"000000003f800000\"");
    cr_assert_not_null(p, "%s", s);
    memcpy(p, "\"000000007fc00000\"", 18);
    lwqt_write_str("m.json", s);
    free(s);
    lwq_manifest m;
    lwq_error e = {0};
    cr_assert_neq(lwq_manifest_load(lwqt_path("m.json"), &m, &e), 0);
    cr_assert(strstr(e.msg, "lm_head_input_amax"), "%s", e.msg);
}
