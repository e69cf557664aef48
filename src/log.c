/* Log sinks: a process-wide default and per-instance overrides. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "vmem_internal.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static vmem_log_fn global_fn;
static void *global_ctx;
static vmem_log_level_t global_level = VMEM_LOG_WARN;
/* Whether an embedder called vmem_set_log.  Until then an instance's own
 * level (VMEM_LOG_LEVEL, cfg.log_level) alone decides what reaches the
 * default stderr sink; global_level filters only messages that have no
 * instance.  After it, the embedder's min_level filters too. */
static int global_set;

static void stderr_sink(void *ctx, vmem_log_level_t level, const char *msg)
{
    static const char *names[] = {"debug", "info", "warning", "error", "?"};
    (void)ctx;
    fprintf(stderr, "libvmem: %s: %s\n", names[level < 4 ? level : 4], msg);
}

void vmem_set_log(vmem_log_fn fn, void *ctx, vmem_log_level_t min_level)
{
    pthread_mutex_lock(&log_lock);
    global_fn = fn;
    global_ctx = ctx;
    global_level = min_level;
    global_set = 1;
    pthread_mutex_unlock(&log_lock);
}

void vmem_log(const vmem_t *v, vmem_log_level_t level, const char *fmt, ...)
{
    vmem_log_fn fn;
    void *ctx;
    vmem_log_level_t min;
    if (v && v->log_fn) {
        fn = v->log_fn;
        ctx = v->log_ctx;
        min = v->log_level;
    } else {
        pthread_mutex_lock(&log_lock);
        fn = global_fn ? global_fn : stderr_sink;
        ctx = global_ctx;
        min = v ? v->log_level : global_level;
        if (v && global_set && global_level > min)
            min = global_level;
        pthread_mutex_unlock(&log_lock);
    }
    if (level < min || level >= VMEM_LOG_NONE)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(ctx, level, buf);
}

double vmem_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
