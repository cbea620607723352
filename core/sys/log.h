/* core/sys/log.h — leveled logging to stderr.  Thread-safe (one line per call).  Level from
 * lwq_log_set_level or the LWQ_LOG environment variable (error|warn|info|debug). */
#ifndef LWQ_CORE_LOG_H
#define LWQ_CORE_LOG_H

typedef enum { LWQ_LOG_ERROR = 0, LWQ_LOG_WARN, LWQ_LOG_INFO, LWQ_LOG_DEBUG } lwq_log_level;

void lwq_log_set_level(lwq_log_level lvl);
lwq_log_level lwq_log_get_level(void);
void lwq_log(lwq_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LWQ_ERROR(...) lwq_log(LWQ_LOG_ERROR, __VA_ARGS__)
#define LWQ_WARN(...) lwq_log(LWQ_LOG_WARN, __VA_ARGS__)
#define LWQ_INFO(...) lwq_log(LWQ_LOG_INFO, __VA_ARGS__)
#define LWQ_DEBUG(...) lwq_log(LWQ_LOG_DEBUG, __VA_ARGS__)

#endif
