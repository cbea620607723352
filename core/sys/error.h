/* core/sys/error.h — the one error convention of lwq.
 *
 * Every function below tools/ returns 0 (or a non-negative count) on success and a negative
 * LWQ_E* code on failure, and on failure fills a caller-provided lwq_error with a message that
 * names the thing: file, tensor, byte offset, layer, expected vs found. Library code never exits
 * or aborts on bad input; only tools/ decides to exit.  A NULL lwq_error is allowed (the message
 * is dropped).  The first error written wins unless lwq_error_clear() is called, so a cleanup path
 * cannot overwrite the root cause. */
#ifndef LWQ_CORE_ERROR_H
#define LWQ_CORE_ERROR_H

#include <errno.h>

enum {
    LWQ_OK = 0,
    LWQ_EIO = -EIO,                /* read/write/fsync failed */
    LWQ_ENOMEM = -ENOMEM,          /* allocation failed or a budget would be exceeded */
    LWQ_EINVAL = -EINVAL,          /* bad argument / bad option */
    LWQ_ENOSPC = -ENOSPC,          /* disk full */
    LWQ_ENOENT = -ENOENT,          /* file or tensor missing */
    LWQ_EFORMAT = -1000,           /* malformed input file (safetensors, json, tokenizer) */
    LWQ_EUNSUPPORTED = -1001,      /* valid input we do not handle (architecture, dtype) */
    LWQ_ENUMERIC = -1002,          /* NaN/Inf or an impossible scale */
    LWQ_ESTATE = -1003,            /* resume state / fingerprint mismatch / foreign files */
    LWQ_ECANCELED = -1004,         /* stopped by a signal or another thread's error */
    LWQ_EDEVICE = -1005,           /* GPU/driver error */
};

#define LWQ_ERRMSG_MAX 1024

typedef struct lwq_error {
    int code;                      /* 0 or the LWQ_E* code of the first error */
    char msg[LWQ_ERRMSG_MAX];
} lwq_error;

/* Record an error (if none is recorded yet) and return `code` so callers can
 * `return lwq_errf(e, LWQ_EFORMAT, "%s: ...", path);`. */
int lwq_errf(lwq_error *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Like lwq_errf, appending ": strerror(-code)" for errno-style codes. */
int lwq_errsys(lwq_error *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void lwq_error_clear(lwq_error *e);
/* Human name of a code: "I/O error", "bad format", ... */
const char *lwq_strerror(int code);

/* The one error-flow idiom (liburing's `ret < 0`): evaluate x, return its value from the
 * enclosing function when negative.  0 and positive counts go on. */
#define LWQ_TRY(x)                                                                                 \
    do {                                                                                           \
        int lwq_try_rc_ = (x);                                                                     \
        if (lwq_try_rc_ < 0)                                                                       \
            return lwq_try_rc_;                                                                    \
    } while (0)

#endif
