/* core/parallel/ranks_job.c — the first agreement of an MPI job (core/parallel/ranks.h, lwq_ranks_agree_job): every
 * rank says what it was asked to do, in collectives whose sizes do not depend on it, and the job
 * goes on only when every rank was asked the same.  Built on the module's collectives, so it is
 * the same code with and without MPI (one rank: nothing to compare). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/data/hash.h"
#include "core/parallel/ranks.h"

static char *dup_str(lwq_ranks_job *j, const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d)
        j->oom = 1;
    return d;
}

void lwq_ranks_job_command(lwq_ranks_job *j, const char *command)
{
    free(j->command);
    j->command = dup_str(j, command);
}

void lwq_ranks_job_add(lwq_ranks_job *j, const char *key, const char *val)
{
    for (int i = 0; i < j->n; i++)
        if (!strcmp(j->key[i], key)) { /* a later option overrides an earlier one */
            free(j->val[i]);
            j->val[i] = dup_str(j, val);
            return;
        }
    if (j->n == j->cap) {
        int cap = j->cap ? 2 * j->cap : 32;
        char **k = realloc(j->key, (size_t)cap * sizeof *k);
        if (k)
            j->key = k;
        char **v = k ? realloc(j->val, (size_t)cap * sizeof *v) : NULL;
        if (v)
            j->val = v;
        if (!k || !v) {
            j->oom = 1;
            return;
        }
        j->cap = cap;
    }
    j->key[j->n] = dup_str(j, key);
    j->val[j->n] = dup_str(j, val);
    j->n++;
}

void lwq_ranks_job_free(lwq_ranks_job *j)
{
    for (int i = 0; i < j->n; i++) {
        free(j->key[i]);
        free(j->val[i]);
    }
    free(j->key);
    free(j->val);
    free(j->command);
    memset(j, 0, sizeof *j);
}

/* ---- the wire form: command NUL, then key NUL value NUL per option, sorted by key --------------- */

static const lwq_ranks_job *sort_job;
static int by_key(const void *a, const void *b)
{
    return strcmp(sort_job->key[*(const int *)a], sort_job->key[*(const int *)b]);
}

/* *out (malloc'd) and *len; NULL on a failed allocation */
static char *serialize(const lwq_ranks_job *j, size_t *len)
{
    int *ord = malloc((size_t)(j->n ? j->n : 1) * sizeof *ord);
    size_t n = strlen(j->command ? j->command : "") + 1;
    for (int i = 0; i < j->n; i++)
        n += strlen(j->key[i] ? j->key[i] : "") + strlen(j->val[i] ? j->val[i] : "") + 2;
    char *s = malloc(n);
    if (!ord || !s) {
        free(ord);
        free(s);
        return NULL;
    }
    for (int i = 0; i < j->n; i++)
        ord[i] = i;
    sort_job = j; /* the engine thread alone calls this module (core/parallel/ranks.h) */
    qsort(ord, (size_t)j->n, sizeof *ord, by_key);
    size_t at = 0;
#define PUT(str)                                                                                                  \
    do {                                                                                                          \
        const char *p_ = (str) ? (str) : "";                                                                      \
        size_t k_ = strlen(p_) + 1;                                                                               \
        memcpy(s + at, p_, k_);                                                                                   \
        at += k_;                                                                                                 \
    } while (0)
    PUT(j->command);
    for (int i = 0; i < j->n; i++) {
        PUT(j->key[ord[i]]);
        PUT(j->val[ord[i]]);
    }
#undef PUT
    free(ord);
    *len = at;
    return s;
}

/* The next NUL-terminated string of blob [*at, n), or NULL past the end (a blob from another rank
 * is read within its length, whatever it holds). */
static const char *next_str(const char *b, size_t n, size_t *at)
{
    if (*at >= n)
        return NULL;
    const char *s = b + *at, *z = memchr(s, 0, n - *at);
    if (!z)
        return NULL;
    *at = (size_t)(z - b) + 1;
    return s;
}

#define SHOWN 80 /* a value longer than this is cut in the message */

static const char *shown(const char *v, char buf[SHOWN + 1])
{
    if (!v)
        return "not given";
    if (!*v)
        return "given";
    snprintf(buf, SHOWN + 1, "%s", v);
    if (strlen(v) > SHOWN)
        memcpy(buf + SHOWN - 3, "...", 4);
    return buf;
}

/* The next (key, value) of a blob, or 0 past its end. */
static int next_pair(const char *b, size_t n, size_t *at, const char **k, const char **v)
{
    *k = next_str(b, n, at);
    *v = *k ? next_str(b, n, at) : NULL;
    if (!*v)
        *k = NULL;
    return *k != NULL;
}

/* The message of rank q's difference from rank 0 (blobs a: rank 0's, b: rank q's). */
static int name_difference(int q, const char *a, size_t na, const char *b, size_t nb, lwq_error *e)
{
    size_t at = 0, bt = 0;
    const char *ca = next_str(a, na, &at), *cb = next_str(b, nb, &bt);
    if (!ca || !cb || strcmp(ca, cb))
        return lwq_errf(e, LWQ_EINVAL, "rank %d was started as `%s`, rank 0 as `%s`: every rank of an MPI job must run "
                        "the same lwq command with the same options", q, cb ? cb : "?", ca ? ca : "?");
    char msg[LWQ_ERRMSG_MAX - 160], va[SHOWN + 1], vb[SHOWN + 1];
    size_t k = 0;
    msg[0] = 0;
    /* every key of either, in order: both lists are sorted by key, so walk them together */
    const char *ka, *xa, *kb, *xb;
    next_pair(a, na, &at, &ka, &xa);
    next_pair(b, nb, &bt, &kb, &xb);
    while (ka || kb) {
        int c = !ka ? 1 : !kb ? -1 : strcmp(ka, kb);
        const char *x = c <= 0 ? xa : NULL, *y = c >= 0 ? xb : NULL;
        if ((c != 0 || strcmp(x, y)) && k < sizeof msg) {
            k += (size_t)snprintf(msg + k, sizeof msg - k, "%s%s (rank %d: %s, rank 0: %s)", k ? ", " : "",
                                  c <= 0 ? ka : kb, q, shown(y, vb), shown(x, va));
        }
        if (c <= 0)
            next_pair(a, na, &at, &ka, &xa);
        if (c >= 0)
            next_pair(b, nb, &bt, &kb, &xb);
    }
    if (!msg[0]) /* the same pairs in another wire form: not made by this code */
        snprintf(msg, sizeof msg, "its command line");
    return lwq_errf(e, LWQ_EINVAL, "rank %d differs from rank 0 in: %s; every rank of an MPI job must run the same lwq "
                    "command with the same options", q, msg);
}

int lwq_ranks_agree_job(lwq_ranks *rk, int status, const lwq_ranks_job *j, lwq_error *e)
{
    if (status == 0 && j->oom)
        status = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    if (rk->size <= 1)
        return status < 0 ? status : 0;
    size_t len = 0;
    char *mine = status == 0 ? serialize(j, &len) : NULL;
    uint64_t me[2] = {0, 0}, *all = malloc((size_t)rk->size * sizeof me);
    if (status == 0 && (!mine || !all))
        status = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    /* 1: the statuses (an int, then a fixed-size message) */
    int rc = lwq_ranks_agree(rk, status, e);
    if (rc == 0) { /* 2: a hash and a length each */
        me[0] = lwq_xxh64(mine, len, 0);
        me[1] = len;
        rc = lwq_ranks_allgather(rk, me, sizeof me, all, e);
    }
    int q = 0;
    for (int r = 1; rc == 0 && r < rk->size && !q; r++)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
            q = r;
    if (rc == 0 && q) { /* 3: they differ (every rank sees it): the descriptions, to name it */
        void **blobs = calloc((size_t)rk->size, sizeof *blobs);
        uint64_t *sizes = calloc((size_t)rk->size, sizeof *sizes);
        rc = lwq_ranks_agree(rk, blobs && sizes ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory"), e);
        if (rc == 0)
            rc = lwq_ranks_gather_blobs(rk, -1, mine, len, blobs, sizes, e);
        if (rc == 0) {
            rc = name_difference(q, blobs[0], (size_t)sizes[0], blobs[q], (size_t)sizes[q], e);
            rk->agreed = 1; /* every rank computed the same message from the same bytes */
        }
        for (int r = 0; blobs && r < rk->size; r++)
            free(blobs[r]);
        free(blobs);
        free(sizes);
    }
    free(all);
    free(mine);
    return rc;
}
