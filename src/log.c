/* Log sinks: a process-wide default and per-instance overrides. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
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

/* Length of the valid UTF-8 sequence at s (1 to 4), 0 if none starts there
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    int n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (n == 0 || c > 0xf4)
        return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return n;
}

/* Copies msg into out (at least 4 * strlen(msg) + 1 bytes) with control
 * characters (C0, DEL, C1) and bytes that are not valid UTF-8 written as
 * \xNN: messages quote paths, environment values and control-file text,
 * which must not drive the reader's terminal or break a UTF-8 log. */
static void text_escape(const char *msg, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)msg;
    char *o = out;
    while (*s) {
        int n = *s < 0x80 ? (*s >= 0x20 && *s != 0x7f) : utf8_len(s), bad = 1;
        if (n == 2 && s[0] == 0xc2 && s[1] < 0xa0)
            n = 0, bad = 2; /* U+0080..U+009F: C1 controls */
        if (n == 0) {
            for (int k = 0; k < bad; k++, s++) {
                *o++ = '\\';
                *o++ = 'x';
                *o++ = hex[*s >> 4];
                *o++ = hex[*s & 15];
            }
            continue;
        }
        memcpy(o, s, (size_t)n);
        o += n;
        s += n;
    }
    *o = '\0';
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
    char buf[512], shown[4 * sizeof buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    text_escape(buf, shown);
    fn(ctx, level, shown);
}

double vmem_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
