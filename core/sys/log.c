#include "core/sys/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lwq_log_level g_level = LWQ_LOG_INFO;
static int g_level_set;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void lwq_log_set_level(lwq_log_level lvl)
{
    g_level = lvl;
    g_level_set = 1;
}

lwq_log_level lwq_log_get_level(void)
{
    if (!g_level_set) {
        const char *s = getenv("LWQ_LOG");
        if (s) {
            if (!strcmp(s, "error")) g_level = LWQ_LOG_ERROR;
            else if (!strcmp(s, "warn")) g_level = LWQ_LOG_WARN;
            else if (!strcmp(s, "debug")) g_level = LWQ_LOG_DEBUG;
            else g_level = LWQ_LOG_INFO;
        }
        g_level_set = 1;
    }
    return g_level;
}

void lwq_log(lwq_log_level lvl, const char *fmt, ...)
{
    if (lvl > lwq_log_get_level())
        return;
    static const char *tag[] = {"error", "warning", "info", "debug"};
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_lock);
    if (lvl <= LWQ_LOG_WARN)
        fprintf(stderr, "lwq: %s: %s\n", tag[lvl], buf);
    else
        fprintf(stderr, "lwq: %s\n", buf);
    pthread_mutex_unlock(&g_lock);
}
