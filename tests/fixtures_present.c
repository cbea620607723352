/* tests/fixtures_present.c — ctest entry "fixtures_present": lists the fixture folders of
 * tests/helpers/fixtures.c that are missing and exits 77 (ctest: "Skipped") when any is, so a
 * plain `ctest` run shows that fixture tests were skipped; 0 when all are found. */
#include <stdio.h>

#include "tests/helpers/fixtures.h"

int main(void)
{
    int missing = 0;
    for (int i = 0; i < lwqt_nfixture_folders; i++) {
        if (!lwqt_fixture_find(lwqt_fixture_folders[i].name)) {
            printf("fixture %s not found: %s\n", lwqt_fixture_folders[i].name, lwqt_fixture_folders[i].what);
            missing++;
        }
    }
    printf("fixtures: %d of %d folders found (looked in %s)\n", lwqt_nfixture_folders - missing,
           lwqt_nfixture_folders, lwqt_fixture_roots());
    if (missing)
        printf("the tests that need them are skipped; see README, Test fixtures\n");
    return missing ? 77 : 0;
}
