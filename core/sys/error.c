#include "core/sys/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int verr(lwq_error *e, int code, int with_sys, const char *fmt, va_list ap)
{
    if (!e || e->code != 0)
        return code;
    e->code = code;
    int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    if (with_sys && n >= 0 && (size_t)n < sizeof e->msg)
        snprintf(e->msg + n, sizeof e->msg - (size_t)n, ": %s", lwq_strerror(code));
    return code;
}

int lwq_errf(lwq_error *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verr(e, code, 0, fmt, ap);
    va_end(ap);
    return code;
}

int lwq_errsys(lwq_error *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verr(e, code, 1, fmt, ap);
    va_end(ap);
    return code;
}

void lwq_error_clear(lwq_error *e)
{
    if (e) {
        e->code = 0;
        e->msg[0] = 0;
    }
}

const char *lwq_strerror(int code)
{
    switch (code) {
    case LWQ_OK: return "ok";
    case LWQ_EFORMAT: return "malformed input";
    case LWQ_EUNSUPPORTED: return "unsupported";
    case LWQ_ENUMERIC: return "numeric error";
    case LWQ_ESTATE: return "inconsistent state";
    case LWQ_ECANCELED: return "canceled";
    case LWQ_EDEVICE: return "device error";
    default: return code < 0 ? strerror(-code) : "unknown error";
    }
}
