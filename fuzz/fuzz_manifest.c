/* fuzz/fuzz_manifest.c — a resume manifest (`<out>.layerwise_resume/manifest.json`) through
 * lwq_manifest_load, as a rerun of quantize and `lwq verify` read it.
 *
 * Checked on success: committed <= num_layers, the boundary file is "" or a name lwq writes, and
 * the manifest lwq would write back (lwq_manifest_render) loads again and renders to the same
 * text: a resume that rewrites the manifest must not change what it says. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/run/resume/manifest.h"
#include "fuzz/fuzz_util.h"

static char *load_render(const char *path, const uint8_t *d, size_t n, lwq_manifest *m, int *rc,
                         lwq_error *e)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(d, 1, n, fp) != n) || fclose(fp) != 0)
        lwq_fuzz_fail("writing %s failed", path);
    *rc = lwq_manifest_load(path, m, e);
    lwq_fuzz_check_error(*rc, e, "lwq_manifest_load");
    if (*rc)
        return NULL;
    char *s = lwq_manifest_render(m);
    if (!s)
        lwq_fuzz_fail("lwq_manifest_render returned NULL");
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lwq_fuzz_quiet();
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", lwq_fuzz_scratch("manifest"));
    lwq_manifest m;
    lwq_error e = {0};
    int rc;
    char *s1 = load_render(path, d, n, &m, &rc, &e);
    if (rc)
        return 0;
    if (m.committed < 0 || m.committed > m.num_layers)
        lwq_fuzz_fail("committed %d of %d layers", m.committed, m.num_layers);
    if (m.boundary_file[0] && strcmp(m.boundary_file, "boundary-0.bin") &&
        strcmp(m.boundary_file, "boundary-1.bin"))
        lwq_fuzz_fail("boundary file \"%s\" is not a name lwq writes", m.boundary_file);
    lwq_manifest m2;
    lwq_error e2 = {0};
    char *s2 = load_render(path, (const uint8_t *)s1, strlen(s1), &m2, &rc, &e2);
    if (rc)
        lwq_fuzz_fail("the rendered manifest does not load: %s\n%s", e2.msg, s1);
    if (strcmp(s1, s2) != 0)
        lwq_fuzz_fail("the manifest changes when written and read again:\n%s\n%s", s1, s2);
    free(s2);
    lwq_manifest_free(&m2);
    free(s1);
    lwq_manifest_free(&m);
    return 0;
}
