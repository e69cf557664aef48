/*
 * The host fallback (DESIGN semantics 3) on the simulated device: device
 * arena within the limit, then its empty regions released and one retry,
 * then the host arena within the host limit, then failure.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common.h"

typedef struct event_log {
    unsigned spills, failures, limit_changes;
    vmem_event_t last[4]; /* last event of each kind */
} event_log_t;

static void on_event(void *ctx, const vmem_event_t *ev)
{
    event_log_t *e = ctx;
    cr_assert(ev->kind >= VMEM_EVENT_SPILL && ev->kind <= VMEM_EVENT_LIMIT_CHANGED);
    e->last[ev->kind] = *ev;
    e->spills += ev->kind == VMEM_EVENT_SPILL;
    e->failures += ev->kind == VMEM_EVENT_ALLOC_FAILED;
    e->limit_changes += ev->kind == VMEM_EVENT_LIMIT_CHANGED;
}

static void watch_events(vmem_t *v, event_log_t *e)
{
    memset(e, 0, sizeof *e);
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_SPILL, on_event, e), VMEM_OK);
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_ALLOC_FAILED, on_event, e), VMEM_OK);
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_LIMIT_CHANGED, on_event, e), VMEM_OK);
}

static void *alloc_checked(vmem_t *v, size_t size)
{
    void *p = vmem_alloc(v, size);
    CHECK_VMEM(v, "vmem_alloc(%zu)", size);
    if (p)
        pattern_fill(p, size, (uint64_t)(uintptr_t)p);
    return p;
}

static void free_checked(vmem_t *v, void *p, size_t size)
{
    cr_assert(pattern_ok(p, size, (uint64_t)(uintptr_t)p), "block %p overwritten", p);
    cr_assert_eq(vmem_free(v, p), VMEM_OK);
    CHECK_VMEM(v, "vmem_free(%p)", p);
}

TestSuite(fallback, .timeout = 30);

Test(fallback, limit_bites_block_lands_on_host)
{
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 8 * MiB, 64 * MiB, 64 * MiB, &cap);
    vmem_t *v = create_or_die(&cfg);
    event_log_t ev;
    watch_events(v, &ev);
    void *d = alloc_checked(v, 6 * MiB);
    cr_assert_not_null(d);
    cr_assert_eq(location_of(v, d), VMEM_LOC_DEVICE);
    cr_assert_eq(ev.spills, 0);
    /* 4 MiB more does not fit under 8 MiB: the host takes it. */
    void *h = alloc_checked(v, 4 * MiB);
    cr_assert_not_null(h, "spill failed: %s", vmem_strerror(vmem_last_status()));
    cr_assert_eq(vmem_last_status(), VMEM_OK);
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, h, &info), VMEM_OK);
    cr_assert_eq(info.location, VMEM_LOC_HOST);
    cr_assert_eq(info.requested, 4 * MiB);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.spills, 1);
    cr_assert_eq(s.spilled_bytes, 4 * MiB);
    cr_assert_eq(s.failures, 0);
    cr_assert_leq(s.device_held, 8 * MiB);
    cr_assert_geq(s.host_in_use, 4 * MiB);
    cr_assert_eq(ev.spills, 1, "spill callback fired %u times", ev.spills);
    cr_assert_eq(ev.last[VMEM_EVENT_SPILL].size, 4 * MiB);
    char json[4096];
    cr_assert_eq(vmem_stats_json(v, json, sizeof json, NULL), VMEM_OK);
    cr_assert_not_null(strstr(json, "\"swapReason\":\"limit\""), "%s", json);
    /* Host blocks are real memory with the sim backend. */
    free_checked(v, h, 4 * MiB);
    free_checked(v, d, 6 * MiB);
    s = stats_of(v);
    cr_assert_eq(s.host_in_use + s.device_in_use, 0);
    vmem_destroy(v);
}

Test(fallback, empty_regions_released_before_spilling)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 8 * MiB, 8 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    /* Two 4 MiB regions, emptied: they hold the whole limit. */
    void *a = alloc_checked(v, 3 * MiB), *b = alloc_checked(v, 3 * MiB);
    cr_assert(a && b);
    free_checked(v, a, 3 * MiB);
    free_checked(v, b, 3 * MiB);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.device_held, 8 * MiB, "setup: the limit should be held (%zu)", s.device_held);
    cr_assert_geq(s.device_regions, 2);
    /* 6 MiB fits neither region: they are given back and a new one made. */
    void *c = alloc_checked(v, 6 * MiB);
    cr_assert_not_null(c);
    cr_assert_eq(location_of(v, c), VMEM_LOC_DEVICE, "should not spill while regions are empty");
    s = stats_of(v);
    cr_assert_eq(s.spills, 0);
    cr_assert_leq(s.device_held, 8 * MiB);
    free_checked(v, c, 6 * MiB);
    vmem_destroy(v);
}

/* An instance holding 38 MiB of free device memory around a live 8 MiB
 * block (returned: the caller frees it). */
static void *hold_free_memory(vmem_t *v)
{
    void *a = alloc_checked(v, 8 * MiB), *b = alloc_checked(v, 8 * MiB),
         *c = alloc_checked(v, 30 * MiB);
    cr_assert(a && b && c);
    free_checked(v, a, 8 * MiB);
    free_checked(v, c, 30 * MiB);
    vmem_stats_t s = stats_of(v);
    cr_assert_gt(s.device_held, s.device_in_use, "setup: free memory held");
    return b;
}

/* A request larger than the limit can never be served by the device, so
 * nothing is given back or moved for it: it goes to host, and the free
 * memory the arena holds stays for the blocks that fit (it was all given
 * back first, and mapped again by the next allocations: on vmm, a device
 * synchronisation each time).  Tagged requests the same. */
static void case_larger_than_limit_keeps_free_memory(vmem_backend_kind_t kind)
{
    vmem_config_t cfg = sim_config(kind, 64 * MiB, 64 * MiB, 1 * GiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *b = hold_free_memory(v);
    vmem_stats_t before = stats_of(v);
    for (unsigned tag = 0; tag < 2; tag++) {
        void *h = vmem_alloc_tagged(v, 100 * MiB, tag);
        CHECK_VMEM(v, "vmem_alloc_tagged(100 MiB, tag %u)", tag);
        cr_assert_not_null(h, "tag %u: %s", tag, vmem_strerror(vmem_last_status()));
        cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
        vmem_stats_t after = stats_of(v);
        cr_assert_eq(after.device_held, before.device_held,
                     "tag %u: device memory given back for a request above the limit (%zu -> %zu)",
                     tag, before.device_held, after.device_held);
        cr_assert_eq(after.device_region_frees, before.device_region_frees, "tag %u", tag);
        cr_assert_eq(after.device_remaps, before.device_remaps, "tag %u", tag);
        cr_assert_eq(vmem_free(v, h), VMEM_OK);
        CHECK_VMEM(v, "vmem_free(tag %u)", tag);
    }
    /* A request that fits under the limit still gets the room it needs. */
    void *d = alloc_checked(v, 48 * MiB);
    cr_assert_not_null(d);
    cr_assert_eq(location_of(v, d), VMEM_LOC_DEVICE);
    free_checked(v, d, 48 * MiB);
    free_checked(v, b, 8 * MiB);
    vmem_destroy(v);
}
Test(fallback, larger_than_limit_keeps_free_memory_sim)
{
    case_larger_than_limit_keeps_free_memory(VMEM_BACKEND_SIM);
}
Test(fallback, larger_than_limit_keeps_free_memory_sim_vmm)
{
    case_larger_than_limit_keeps_free_memory(VMEM_BACKEND_SIM_VMM);
}

/* A request within the limit whose size in whole granules is not (the limit
 * is no multiple of the 2 MiB granule) cannot be grown for either: giving
 * back the free memory first only loses it. */
static void case_granules_above_limit_keep_free_memory(vmem_backend_kind_t kind)
{
    vmem_config_t cfg = sim_config(kind, 64 * MiB + 1024, 64 * MiB, 1 * GiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *b = hold_free_memory(v);
    vmem_stats_t before = stats_of(v);
    void *h = alloc_checked(v, 64 * MiB + 512);
    cr_assert_not_null(h);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    vmem_stats_t after = stats_of(v);
    cr_assert_eq(after.device_held, before.device_held,
                 "device memory given back for a request no growth can serve (%zu -> %zu)",
                 before.device_held, after.device_held);
    cr_assert_eq(after.device_region_frees, before.device_region_frees);
    free_checked(v, h, 64 * MiB + 512);
    free_checked(v, b, 8 * MiB);
    vmem_destroy(v);
}
Test(fallback, granules_above_limit_keep_free_memory_sim)
{
    case_granules_above_limit_keep_free_memory(VMEM_BACKEND_SIM);
}
Test(fallback, granules_above_limit_keep_free_memory_sim_vmm)
{
    case_granules_above_limit_keep_free_memory(VMEM_BACKEND_SIM_VMM);
}

Test(fallback, host_limit_reached_returns_nomem)
{
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 4 * MiB, 4 * MiB, 8 * MiB, &cap);
    vmem_t *v = create_or_die(&cfg);
    event_log_t ev;
    watch_events(v, &ev);
    void *d = alloc_checked(v, 4 * MiB);
    void *h1 = alloc_checked(v, 4 * MiB);
    void *h2 = alloc_checked(v, 4 * MiB);
    cr_assert(d && h1 && h2);
    cr_assert_eq(location_of(v, h1), VMEM_LOC_HOST);
    cr_assert_eq(location_of(v, h2), VMEM_LOC_HOST);
    capture_reset(&cap);
    void *x = alloc_checked(v, 256);
    cr_assert_null(x, "device and host are both full");
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    cr_assert_geq(capture_lines(&cap), 1, "the failure should be logged");
    cr_assert_eq(ev.failures, 1);
    cr_assert_eq(ev.last[VMEM_EVENT_ALLOC_FAILED].status, VMEM_ERR_NOMEM);
    cr_assert_eq(ev.last[VMEM_EVENT_ALLOC_FAILED].size, 256);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.failures, 1);
    cr_assert_eq(s.spills, 2);
    cr_assert_leq(s.host_held, 8 * MiB);
    /* A failure leaves the thread's status; the next success clears it. */
    free_checked(v, h1, 4 * MiB);
    void *y = alloc_checked(v, 256);
    cr_assert_not_null(y);
    cr_assert_eq(vmem_last_status(), VMEM_OK);
    cr_assert_eq(location_of(v, y), VMEM_LOC_HOST);
    free_checked(v, y, 256);
    free_checked(v, h2, 4 * MiB);
    free_checked(v, d, 4 * MiB);
    vmem_destroy(v);
}

Test(fallback, host_limit_can_be_lowered)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 2 * MiB, 2 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *d = alloc_checked(v, 2 * MiB);
    void *h = alloc_checked(v, MiB);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    free_checked(v, h, MiB);
    cr_assert_eq(vmem_set_host_limit(v, 0), VMEM_OK, "the empty host region is given back");
    CHECK_VMEM(v, "vmem_set_host_limit(0)");
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.host_held, 0);
    cr_assert_eq(s.host_limit, 0);
    cr_assert_null(alloc_checked(v, MiB));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    free_checked(v, d, 2 * MiB);
    vmem_destroy(v);
}

Test(fallback, disabled_returns_null)
{
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 4 * MiB, 4 * MiB, 64 * MiB, &cap);
    cfg.host_fallback = 0;
    vmem_t *v = create_or_die(&cfg);
    cr_assert_eq(stats_of(v).host_fallback, 0);
    void *d = alloc_checked(v, 4 * MiB);
    cr_assert_not_null(d);
    cr_assert_null(alloc_checked(v, MiB), "fallback off: no host block");
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.spills, 0);
    cr_assert_eq(s.host_held, 0);
    cr_assert_eq(s.failures, 1);
    /* Turned on at run time: the next one spills; off again: fails. */
    cr_assert_eq(vmem_set_host_fallback(v, 1), VMEM_OK);
    void *h = alloc_checked(v, MiB);
    cr_assert_not_null(h);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    cr_assert_eq(vmem_set_host_fallback(v, 0), VMEM_OK);
    cr_assert_eq(stats_of(v).host_fallback, 0);
    cr_assert_null(alloc_checked(v, MiB));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    free_checked(v, h, MiB);
    free_checked(v, d, 4 * MiB);
    vmem_destroy(v);
}

Test(fallback, raised_limit_brings_blocks_back_to_device)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 4 * MiB, 64 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    event_log_t ev;
    watch_events(v, &ev);
    void *d = alloc_checked(v, 4 * MiB);
    void *h = alloc_checked(v, 4 * MiB);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 32 * MiB, &applied), VMEM_OK);
    CHECK_VMEM(v, "vmem_set_limit(32M)");
    cr_assert_eq(ev.limit_changes, 1);
    void *n = alloc_checked(v, 4 * MiB);
    cr_assert_not_null(n);
    cr_assert_eq(location_of(v, n), VMEM_LOC_DEVICE, "after the raise new blocks are on the device");
    /* The spilled block stays where it is, intact. */
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    free_checked(v, h, 4 * MiB);
    free_checked(v, n, 4 * MiB);
    free_checked(v, d, 4 * MiB);
    cr_assert_eq(stats_of(v).spills, 1);
    vmem_destroy(v);
}

Test(fallback, sim_device_full_spills_with_reason)
{
    /* The simulated device itself is smaller than the limit. */
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 64 * MiB, 64 * MiB, NULL);
    cfg.sim_capacity = 8 * MiB;
    vmem_t *v = create_or_die(&cfg);
    void *a = alloc_checked(v, 6 * MiB);
    cr_assert_eq(location_of(v, a), VMEM_LOC_DEVICE);
    void *b = alloc_checked(v, 4 * MiB);
    cr_assert_not_null(b);
    cr_assert_eq(location_of(v, b), VMEM_LOC_HOST);
    char json[4096];
    cr_assert_eq(vmem_stats_json(v, json, sizeof json, NULL), VMEM_OK);
    cr_assert_not_null(strstr(json, "\"swapReason\":\"device_full\""), "%s", json);
    free_checked(v, a, 6 * MiB);
    free_checked(v, b, 4 * MiB);
    vmem_destroy(v);
}
