/* tests/helpers/fixtures.h — the third-party test fixtures (tiny real checkpoints, tokenizers and
 * published configs copied from public repositories; each folder has a PROVENANCE.md): the one
 * table of them, and the lookup every test uses.
 *
 * A fixture is looked for in $LWQ_FIXTURES, then in ../shared/fixtures next to the source tree.
 * When it is in neither, the test asking for it is skipped (Criterion's skip) with one line naming
 * the missing folder and where it looked; tests/report_hooks.c prints those lines and the count.
 * LWQ_FIXTURES_NO_FALLBACK=1 leaves ../shared/fixtures out (the suite uses it to check the
 * skipping on a machine that has the fixtures). */
#ifndef LWQ_TESTS_FIXTURES_H
#define LWQ_TESTS_FIXTURES_H

#include <stddef.h>

/* One fixture folder. */
typedef struct lwqt_fixture_folder {
    const char *name;    /* folder under the fixtures root */
    const char *what;
} lwqt_fixture_folder;

extern const lwqt_fixture_folder lwqt_fixture_folders[];
extern const int lwqt_nfixture_folders;

/* One Hugging Face checkpoint among the fixtures (the parameter of the tests that run on every
 * one): `dir` is relative to the fixtures root; `config` is a config.json to use instead of the
 * folder's own (relative too), or NULL. */
typedef struct lwqt_ckpt_fixture {
    const char *dir;
    const char *config;
} lwqt_ckpt_fixture;

extern const lwqt_ckpt_fixture lwqt_ckpt_fixtures[];
extern const int lwqt_nckpt_fixtures;
/* 0 .. lwqt_nckpt_fixtures-1, the parameters of a Criterion ParameterizedTest over the table
 * (Criterion copies parameters into the test process by value: an index survives, a pointer into
 * the table does not). */
int *lwqt_ckpt_fixture_indexes(void);

/* Path of `rel` ("cai-tiny-llama", "cai-tiny-llama/config.json") under the first root that holds
 * it; skips the calling test (one line naming what is missing) when no root does.  The first
 * path component must be a folder of the table (else the test fails: add it to the table).
 * Returns one of 16 rotating static buffers. */
const char *lwqt_fixture(const char *rel);
/* The same without skipping: NULL when absent. */
const char *lwqt_fixture_find(const char *rel);
/* One line saying where fixtures are looked for (for messages). */
const char *lwqt_fixture_roots(void);
/* The source tree this test was built from (absolute; __FILE__ may be relative under ccache's
 * base_dir, and a test that changes directory cannot use it). */
const char *lwqt_source_dir(void);

#endif
