/* Helpers shared by the reliability suites (faults, stress, regressions). */
#ifndef VMEM_FUZZ_COMMON_H
#define VMEM_FUZZ_COMMON_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "vmem.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* A log sink that drops everything: the suites provoke errors on purpose. */
static inline void quiet_log(void *ctx, vmem_log_level_t level, const char *msg)
{
    (void)ctx;
    (void)level;
    (void)msg;
}

/* An instance on a simulated device of `capacity` bytes with device limit
 * `limit` (0: the capacity) and host limit `host_limit` (0: default). */
static inline vmem_t *sim_open(vmem_backend_kind_t kind, size_t capacity, size_t limit,
                               size_t host_limit)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = kind;
    cfg.sim_capacity = capacity;
    cfg.limit = limit;
    cfg.host_limit = host_limit;
    cfg.log_fn = quiet_log;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK, "vmem_create(%s)", vmem_backend_name(kind));
    return v;
}

static inline vmem_stats_t stats_of(vmem_t *v)
{
    vmem_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    return s;
}

static inline vmem_location_t location_of(vmem_t *v, void *p)
{
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, p, &info), VMEM_OK, "ptr_info(%p)", p);
    return info.location;
}

/* Byte patterns: written at allocation, verified at free. */
static inline uint8_t pattern_at(uint64_t id, size_t off)
{
    return (uint8_t)(((id + 1) * 0x9E3779B97F4A7C15ull + off * 0xBF58476D1CE4E5B9ull) >> 56);
}

static inline void pattern_fill(void *p, size_t n, uint64_t id)
{
    uint8_t *b = p;
    size_t head = n < 64 ? n : 64;
    for (size_t i = 0; i < head; i++)
        b[i] = pattern_at(id, i);
    for (size_t i = n > 64 ? n - 64 : n; i < n; i++)
        b[i] = pattern_at(id, i);
}

static inline int pattern_ok(const void *p, size_t n, uint64_t id)
{
    const uint8_t *b = p;
    size_t head = n < 64 ? n : 64;
    for (size_t i = 0; i < head; i++)
        if (b[i] != pattern_at(id, i))
            return 0;
    for (size_t i = n > 64 ? n - 64 : n; i < n; i++)
        if (b[i] != pattern_at(id, i))
            return 0;
    return 1;
}

/* Everything freed: a trim must leave nothing held on either side. */
static inline void assert_nothing_held(vmem_t *v)
{
    size_t released = 0;
    cr_assert_eq(vmem_trim(v, &released), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.device_in_use, 0, "device in use %zu", s.device_in_use);
    cr_assert_eq(s.host_in_use, 0, "host in use %zu", s.host_in_use);
    cr_assert_eq(s.device_held, 0, "device still holds %zu after trim", s.device_held);
    cr_assert_eq(s.host_held, 0, "host still holds %zu after trim", s.host_held);
    cr_assert_eq(s.allocs, s.frees, "allocs %llu frees %llu", (unsigned long long)s.allocs,
                 (unsigned long long)s.frees);
    cr_assert_eq(vmem_check(v), VMEM_OK);
}

#endif
