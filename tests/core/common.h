/*
 * Helpers shared by the core suites: log capture, byte patterns written into
 * live blocks, a deterministic generator, and instance set-up.
 */
#ifndef VMEM_TEST_COMMON_H
#define VMEM_TEST_COMMON_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "vmem.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* ------------------------------------------------------------------------ */
/* Log capture                                                              */
/* ------------------------------------------------------------------------ */

/* Counts the lines a sink received and keeps the last one.
 * Invariant: lines == number of calls of capture_log since capture_reset. */
typedef struct log_capture {
    pthread_mutex_t lock;
    unsigned lines;
    vmem_log_level_t last_level;
    char last[512];
} log_capture_t;

static inline void capture_log(void *ctx, vmem_log_level_t level, const char *msg)
{
    log_capture_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->lines++;
    c->last_level = level;
    snprintf(c->last, sizeof c->last, "%s", msg);
    pthread_mutex_unlock(&c->lock);
}

static inline void capture_reset(log_capture_t *c)
{
    pthread_mutex_lock(&c->lock);
    c->lines = 0;
    c->last[0] = '\0';
    pthread_mutex_unlock(&c->lock);
}

static inline unsigned capture_lines(log_capture_t *c)
{
    pthread_mutex_lock(&c->lock);
    unsigned n = c->lines;
    pthread_mutex_unlock(&c->lock);
    return n;
}

#define LOG_CAPTURE_INIT {PTHREAD_MUTEX_INITIALIZER, 0, VMEM_LOG_DEBUG, {0}}

/* ------------------------------------------------------------------------ */
/* Deterministic random numbers (xorshift64*)                               */
/* ------------------------------------------------------------------------ */

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(uint64_t *s, size_t lo, size_t hi)
{
    return lo + (size_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* A size spread over several orders of magnitude, 1 B .. max. */
static inline size_t rng_size(uint64_t *s, size_t max)
{
    size_t cap = (size_t)1 << rng_range(s, 0, 63 - (unsigned)__builtin_clzll(max));
    if (cap > max)
        cap = max;
    return rng_range(s, 1, cap);
}

/* ------------------------------------------------------------------------ */
/* Patterns: every live block holds bytes derived from its id                */
/* ------------------------------------------------------------------------ */

static inline unsigned char pattern_byte(uint64_t id, size_t i)
{
    return (unsigned char)((id * 131u + i * 7u + 0x5Au) & 0xFF);
}

/* Fills the first `size` bytes of p: the 8-byte id at both ends (where it
 * fits) and a byte pattern between.  Byte-wise for short blocks. */
static inline void pattern_fill(void *p, size_t size, uint64_t id)
{
    unsigned char *b = p;
    if (size < 16) {
        for (size_t i = 0; i < size; i++)
            b[i] = pattern_byte(id, i);
        return;
    }
    memset(b, pattern_byte(id, 0), size);
    memcpy(b, &id, sizeof id);
    memcpy(b + size - sizeof id, &id, sizeof id);
}

/* 1 if p still holds what pattern_fill(p, size, id) wrote. */
static inline int pattern_ok(const void *p, size_t size, uint64_t id)
{
    const unsigned char *b = p;
    if (size < 16) {
        for (size_t i = 0; i < size; i++)
            if (b[i] != pattern_byte(id, i))
                return 0;
        return 1;
    }
    uint64_t head, tail;
    memcpy(&head, b, sizeof head);
    memcpy(&tail, b + size - sizeof tail, sizeof tail);
    if (head != id || tail != id)
        return 0;
    unsigned char x = pattern_byte(id, 0);
    for (size_t i = sizeof id; i < size - sizeof id; i++)
        if (b[i] != x)
            return 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Instances                                                                */
/* ------------------------------------------------------------------------ */

/* A config for the simulated device with the given limits (start cap: the
 * larger of limit and start_cap), its log captured into cap. */
static inline vmem_config_t sim_config(vmem_backend_kind_t kind, size_t limit, size_t start_cap,
                                       size_t host_limit, log_capture_t *cap)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = kind;
    cfg.limit = limit;
    cfg.start_cap = start_cap > limit ? start_cap : limit;
    cfg.host_limit = host_limit;
    cfg.sim_capacity = 4 * GiB;
    if (cap) {
        cfg.log_fn = capture_log;
        cfg.log_ctx = cap;
    }
    return cfg;
}

static inline vmem_t *create_or_die(const vmem_config_t *cfg)
{
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(cfg, &v);
    cr_assert_eq(st, VMEM_OK, "vmem_create(%s): %s", vmem_backend_name(cfg->backend),
                 vmem_strerror(st));
    cr_assert_not_null(v);
    return v;
}

/* vmem_create must refuse the setting name=value with VMEM_ERR_ENV and
 * create nothing (the variable is unset again after). */
static inline void expect_env_refused(const char *name, const char *value,
                                      vmem_backend_kind_t kind)
{
    setenv(name, value, 1);
    vmem_config_t cfg = sim_config(kind, 16 * MiB, 0, 64 * MiB, NULL);
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    unsetenv(name);
    cr_assert_eq(st, VMEM_ERR_ENV, "%s=\"%s\" taken: %s", name, value, vmem_strerror(st));
    cr_assert_null(v);
}

/* vmem_check must pass; the arguments (a printf format and its values) name
 * the operation after which it ran.  The broken invariant itself goes to the
 * instance's log. */
#define CHECK_VMEM(v, ...) cr_assert_eq(vmem_check(v), VMEM_OK, "vmem_check failed after " __VA_ARGS__)

static inline vmem_stats_t stats_of(vmem_t *v)
{
    vmem_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    return s;
}

/* A counter of the statistics JSON (vmem_stats_json). */
static inline unsigned long long json_u64(vmem_t *v, const char *key)
{
    char buf[16384], pat[64];
    size_t need = 0;
    cr_assert_eq(vmem_stats_json(v, buf, sizeof buf, &need), VMEM_OK);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(buf, pat);
    cr_assert_not_null(at, "no %s in the statistics", key);
    return strtoull(at + strlen(pat), NULL, 10);
}

static inline vmem_location_t location_of(vmem_t *v, const void *p)
{
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, p, &info), VMEM_OK, "vmem_ptr_info(%p) failed", p);
    return info.location;
}

/* Unsets every variable that changes vmem_config_from_env's result (the
 * test starts from the defaults). */
static inline void env_unset_all(void)
{
    static const char *vars[] = {
        "VMEM_BACKEND", "VMEM_DEVICE", "VMEM_LIMIT", "VMEM_START_CAP", "VMEM_HOST_LIMIT",
        "VMEM_HOST_FALLBACK", "VMEM_SIM_CAPACITY", "VMEM_SIM_FAIL_NTH", "VMEM_SIM_FAIL_RATE",
        "VMEM_SIM_SEED", "VMEM_CONTROL_FILE", "VMEM_STATS_FILE", "VMEM_CONTROL_IMMEDIATE",
        "VMEM_LOG_LEVEL", "VMEM_PLACEMENT", "VMEM_GROWTH", "VMEM_TRIM", "VMEM_TRIM_AGE",
        "VMEM_TRIM_RULE", "VMEM_COPY_BLOCKS", "VMEM_TRACE_FILE", "VMEM_SIM_BIG",
        "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0",
    };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

#endif
