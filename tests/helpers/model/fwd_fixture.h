/* tests/helpers/model/fwd_fixture.h — serve a fixture checkpoint's tensors to the forward (host
 * memory, CPU backend), and read a fixture's reference_logits.json.  Test-only. */
#ifndef LWQ_TESTS_FWD_FIXTURE_H
#define LWQ_TESTS_FWD_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/forward/forward.h"
#include "tests/helpers/fixtures.h"
#include "layout/checkpoint/checkpoint.h"

typedef struct fwd_fixture {
    lwq_ckpt ck;
    int n;
    lwq_tensor *t;      /* t[i] is ck.tensors[i], loaded */
    lwq_weights w;      /* serves t by name */
} fwd_fixture;

/* Open the checkpoint in `dir` (config from `config_path`, NULL = dir/config.json) and load
 * every tensor. */
int fwd_fixture_open(fwd_fixture *f, const char *dir, const char *config_path, lwq_error *e);
void fwd_fixture_free(fwd_fixture *f);

typedef struct fwd_ref {
    int nseq, len;
    int64_t vocab;
    int32_t *tokens;    /* (nseq, len) */
    double *logits;     /* (nseq, len, vocab) */
} fwd_ref;

/* dir/reference_logits.json */
int fwd_ref_load(const char *dir, int64_t vocab, fwd_ref *r, lwq_error *e);
void fwd_ref_free(fwd_ref *r);

/* Path of a fixture folder (tests/helpers/fixtures.h: $LWQ_FIXTURES, then ../shared/fixtures);
 * skips the calling test, naming what is missing, when it is in neither. */
static inline const char *fwd_fixture_dir(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", lwqt_fixture(name));
    return buf;
}

#endif
