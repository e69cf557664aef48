/*
 * The runtime limit (DESIGN semantics 2 and 5): shrink gives back empty
 * regions at once, a shrink below live data stays pending until frees
 * complete it, grow takes effect at once, the start cap holds unless forced.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common.h"

typedef struct limit_events {
    unsigned count;
    size_t old_limit, new_limit;
} limit_events_t;

static void on_limit(void *ctx, const vmem_event_t *ev)
{
    limit_events_t *e = ctx;
    cr_assert_eq(ev->kind, VMEM_EVENT_LIMIT_CHANGED);
    e->count++;
    e->old_limit = ev->old_limit;
    e->new_limit = ev->new_limit;
}

/* n live blocks of `size`, each with its pattern. */
static void fill(vmem_t *v, void **p, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        p[i] = vmem_alloc(v, size);
        cr_assert_not_null(p[i], "block %d of %zu", i, size);
        cr_assert_eq(location_of(v, p[i]), VMEM_LOC_DEVICE, "block %d spilled", i);
        pattern_fill(p[i], size, (uint64_t)i + 1);
        CHECK_VMEM(v, "vmem_alloc #%d", i);
    }
}

static void drain(vmem_t *v, void **p, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        if (!p[i])
            continue;
        cr_assert(pattern_ok(p[i], size, (uint64_t)i + 1), "block %d overwritten", i);
        cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
        CHECK_VMEM(v, "vmem_free #%d", i);
        p[i] = NULL;
    }
}

static size_t limit_of(vmem_t *v)
{
    size_t l = 0;
    cr_assert_eq(vmem_get_limit(v, &l), VMEM_OK);
    return l;
}

TestSuite(limit, .timeout = 30);

Test(limit, shrink_frees_empty_regions_at_once)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 64 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *p[10];
    fill(v, p, 10, 4 * MiB);
    drain(v, p, 10, 4 * MiB);
    vmem_stats_t s = stats_of(v);
    cr_assert_geq(s.device_held, 40 * MiB, "setup: freed blocks stay cached (%zu)", s.device_held);
    size_t applied = SIZE_MAX;
    cr_assert_eq(vmem_set_limit(v, 16 * MiB, &applied), VMEM_OK);
    CHECK_VMEM(v, "vmem_set_limit(16M)");
    cr_assert_leq(applied, 16 * MiB);
    s = stats_of(v);
    cr_assert_eq(applied, s.device_held, "applied is what the arena holds");
    cr_assert_eq(s.limit, 16 * MiB);
    cr_assert_eq(s.pending_limit, 0);
    cr_assert_eq(limit_of(v), 16 * MiB);
    cr_assert_geq(s.device_region_frees, 1);
    /* To zero: everything goes. */
    cr_assert_eq(vmem_set_limit(v, 0, &applied), VMEM_OK);
    cr_assert_eq(applied, 0);
    cr_assert_eq(stats_of(v).device_held, 0);
    CHECK_VMEM(v, "vmem_set_limit(0)");
    vmem_destroy(v);
}

Test(limit, shrink_below_live_is_pending_until_frees)
{
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 64 * MiB, 256 * MiB, &cap);
    vmem_t *v = create_or_die(&cfg);
    void *p[8];
    fill(v, p, 8, 4 * MiB);
    vmem_stats_t s = stats_of(v);
    size_t held = s.device_held;
    cr_assert_geq(held, 32 * MiB);
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 8 * MiB, &applied), VMEM_PENDING);
    CHECK_VMEM(v, "pending vmem_set_limit(8M)");
    s = stats_of(v);
    cr_assert_eq(applied, s.device_held, "applied reports how far the shrink got");
    cr_assert_gt(applied, 8 * MiB);
    cr_assert_eq(s.pending_limit, 8 * MiB);
    cr_assert_eq(s.limit, 8 * MiB);
    cr_assert_eq(limit_of(v), 8 * MiB, "get_limit gives the pending target");
    /* While pending, no new device memory: a block that fits no free
     * chunk goes to the host; small ones may reuse what is held. */
    void *big = vmem_alloc(v, 6 * MiB);
    CHECK_VMEM(v, "alloc while pending");
    cr_assert_not_null(big);
    cr_assert_eq(location_of(v, big), VMEM_LOC_HOST);
    cr_assert_leq(stats_of(v).device_held, held);
    /* Each free gives memory back; the shrink completes on the last. */
    size_t before = stats_of(v).device_held;
    for (int i = 0; i < 8; i++) {
        cr_assert(pattern_ok(p[i], 4 * MiB, (uint64_t)i + 1), "block %d overwritten", i);
        cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
        p[i] = NULL;
        CHECK_VMEM(v, "free #%d while pending", i);
        s = stats_of(v);
        cr_assert_leq(s.device_held, before, "a free while pending took memory");
        before = s.device_held;
        /* No new device memory was taken at any point. */
        void *q = vmem_alloc(v, 3 * MiB);
        cr_assert_not_null(q);
        if (s.pending_limit)
            cr_assert_leq(stats_of(v).device_held, before, "allocation while pending grew the arena");
        cr_assert_eq(vmem_free(v, q), VMEM_OK);
        CHECK_VMEM(v, "alloc/free #%d while pending", i);
    }
    s = stats_of(v);
    cr_assert_eq(s.pending_limit, 0, "the shrink should be complete");
    cr_assert_leq(s.device_held, 8 * MiB);
    cr_assert_eq(s.limit, 8 * MiB);
    cr_assert_eq(vmem_free(v, big), VMEM_OK);
    CHECK_VMEM(v, "last free");
    vmem_destroy(v);
}

Test(limit, pending_shrink_then_grow_cancels_it)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 64 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *p[4];
    fill(v, p, 4, 4 * MiB);
    cr_assert_eq(vmem_set_limit(v, 4 * MiB, NULL), VMEM_PENDING);
    cr_assert_eq(vmem_set_limit(v, 64 * MiB, NULL), VMEM_OK);
    CHECK_VMEM(v, "grow after a pending shrink");
    cr_assert_eq(stats_of(v).pending_limit, 0);
    void *q = vmem_alloc(v, 16 * MiB);
    cr_assert_not_null(q);
    cr_assert_eq(location_of(v, q), VMEM_LOC_DEVICE, "the raise is in force at once");
    cr_assert_eq(vmem_free(v, q), VMEM_OK);
    drain(v, p, 4, 4 * MiB);
    vmem_destroy(v);
}

Test(limit, grow_takes_effect_at_once)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 8 * MiB, 64 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *p[2];
    fill(v, p, 2, 4 * MiB);
    void *h = vmem_alloc(v, 4 * MiB);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST, "setup: the device is at its limit");
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 24 * MiB, &applied), VMEM_OK);
    CHECK_VMEM(v, "grow");
    cr_assert_eq(limit_of(v), 24 * MiB);
    cr_assert_leq(applied, 24 * MiB);
    void *q[4];
    fill(v, q, 4, 4 * MiB);
    cr_assert_leq(stats_of(v).device_held, 24 * MiB);
    drain(v, q, 4, 4 * MiB);
    drain(v, p, 2, 4 * MiB);
    cr_assert_eq(vmem_free(v, h), VMEM_OK);
    vmem_destroy(v);
}

Test(limit, start_cap_and_force)
{
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 32 * MiB, 64 * MiB, &cap);
    vmem_t *v = create_or_die(&cfg);
    limit_events_t ev = {0};
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_LIMIT_CHANGED, on_limit, &ev), VMEM_OK);
    cr_assert_eq(stats_of(v).start_cap, 32 * MiB);
    /* Up to the cap: fine. */
    cr_assert_eq(vmem_set_limit(v, 32 * MiB, NULL), VMEM_OK);
    cr_assert_eq(ev.count, 1);
    cr_assert_eq(ev.old_limit, 16 * MiB);
    cr_assert_eq(ev.new_limit, 32 * MiB);
    /* Above it: refused, logged, nothing changes, no event. */
    capture_reset(&cap);
    size_t applied = 12345;
    cr_assert_eq(vmem_set_limit(v, 32 * MiB + 2 * MiB, &applied), VMEM_ERR_ABOVE_CAP);
    cr_assert_eq(applied, 12345, "out-parameter untouched on failure");
    cr_assert_geq(capture_lines(&cap), 1, "the refusal should be logged");
    cr_assert_eq(limit_of(v), 32 * MiB);
    cr_assert_eq(ev.count, 1);
    CHECK_VMEM(v, "refused raise");
    /* Forced: allowed, and it moves the cap. */
    cr_assert_eq(vmem_set_limit_ex(v, 48 * MiB, VMEM_LIMIT_FORCE, &applied), VMEM_OK);
    CHECK_VMEM(v, "forced raise");
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.limit, 48 * MiB);
    cr_assert_eq(s.start_cap, 48 * MiB);
    cr_assert_eq(ev.count, 2);
    cr_assert_eq(ev.new_limit, 48 * MiB);
    /* Unknown flags are rejected. */
    cr_assert_eq(vmem_set_limit_ex(v, 8 * MiB, 0x80, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(limit_of(v), 48 * MiB);
    /* Setting the same limit again fires no event. */
    cr_assert_eq(vmem_set_limit(v, 48 * MiB, NULL), VMEM_OK);
    cr_assert_eq(ev.count, 2);
    /* Cleared callback: no more events. */
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_LIMIT_CHANGED, NULL, NULL), VMEM_OK);
    cr_assert_eq(vmem_set_limit(v, 8 * MiB, NULL), VMEM_OK);
    cr_assert_eq(ev.count, 2);
    vmem_destroy(v);
}

/* Under a limit forced to SIZE_MAX, a request within one granule (2 MiB) of
 * SIZE_MAX: rounding it to whole granules wrapped to 0, and the retry gave
 * back every free byte for a request that no give-back can fit. */
static void check_huge_request_keeps_free_memory(vmem_backend_kind_t kind)
{
    vmem_config_t cfg = sim_config(kind, 64 * MiB, 64 * MiB, 256 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *p[4];
    fill(v, p, 4, 4 * MiB);
    drain(v, p, 4, 4 * MiB);
    cr_assert_eq(vmem_set_limit_ex(v, SIZE_MAX, VMEM_LIMIT_FORCE, NULL), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_geq(s.device_held, 16 * MiB, "setup: freed blocks stay cached (%zu)", s.device_held);
    static const size_t sizes[] = {SIZE_MAX - MiB, SIZE_MAX - 2 * MiB + 257, SIZE_MAX - 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cr_assert_null(vmem_alloc(v, sizes[i]), "vmem_alloc(%zu) succeeded", sizes[i]);
        vmem_stats_t t = stats_of(v);
        cr_assert_eq(t.device_held, s.device_held,
                     "%s: vmem_alloc(%zu) gave back free memory: held %zu -> %zu",
                     kind == VMEM_BACKEND_SIM ? "sim" : "sim-vmm", sizes[i], s.device_held,
                     t.device_held);
        cr_assert_eq(t.device_region_frees, s.device_region_frees);
        CHECK_VMEM(v, "vmem_alloc(%zu)", sizes[i]);
    }
    vmem_destroy(v);
}

Test(limit, huge_request_under_forced_huge_limit_keeps_free_memory)
{
    check_huge_request_keeps_free_memory(VMEM_BACKEND_SIM);
    check_huge_request_keeps_free_memory(VMEM_BACKEND_SIM_VMM);
}

Test(limit, default_start_cap_is_initial_limit)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 64 * MiB, NULL);
    cfg.start_cap = 0;
    vmem_t *v = create_or_die(&cfg);
    cr_assert_eq(stats_of(v).start_cap, 16 * MiB);
    cr_assert_eq(vmem_set_limit(v, 18 * MiB, NULL), VMEM_ERR_ABOVE_CAP);
    cr_assert_eq(vmem_set_limit(v, 8 * MiB, NULL), VMEM_OK);
    cr_assert_eq(vmem_set_limit(v, 16 * MiB, NULL), VMEM_OK, "back up to the start cap");
    vmem_destroy(v);
    /* A limit above an explicit start cap is a bad config. */
    cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 64 * MiB, NULL);
    cfg.start_cap = 8 * MiB;
    v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cr_assert_null(v);
}

/* With vmm granules a shrink also gives back the free pages of regions that
 * still hold live blocks; with separate regions (sim) it cannot.  Setup:
 * one 20 MiB region holding a 1 KiB block at each end, free between. */
static vmem_status_t shrink_around_live(vmem_backend_kind_t kind, size_t *held_after)
{
    setenv("VMEM_VMM_GROW_ALIGN", "0", 1); /* one region of exactly 20 MiB */
    vmem_config_t cfg = sim_config(kind, 64 * MiB, 64 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    char *whole = vmem_alloc(v, 20 * MiB);
    cr_assert_not_null(whole);
    cr_assert_eq(vmem_free(v, whole), VMEM_OK);
    char *head = vmem_alloc(v, KiB);
    char *mid = vmem_alloc(v, 18 * MiB);
    char *tail = vmem_alloc(v, KiB);
    cr_assert(head && mid && tail);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.device_regions, 1, "setup: one region (%zu)", s.device_regions);
    cr_assert_eq(s.device_held, 20 * MiB, "setup: 20 MiB held (%zu)", s.device_held);
    pattern_fill(head, KiB, 1);
    pattern_fill(tail, KiB, 2);
    cr_assert_eq(vmem_free(v, mid), VMEM_OK);
    CHECK_VMEM(v, "setup");
    size_t applied = 0;
    vmem_status_t st = vmem_set_limit(v, 8 * MiB, &applied);
    CHECK_VMEM(v, "shrink around live blocks");
    cr_assert_eq(applied, stats_of(v).device_held);
    cr_assert(pattern_ok(head, KiB, 1) && pattern_ok(tail, KiB, 2), "live data damaged by the shrink");
    *held_after = applied;
    cr_assert_eq(vmem_free(v, head), VMEM_OK);
    CHECK_VMEM(v, "first free after the shrink");
    cr_assert_eq(vmem_free(v, tail), VMEM_OK);
    CHECK_VMEM(v, "frees after the shrink");
    s = stats_of(v);
    cr_assert_leq(s.device_held, 8 * MiB, "held %zu after the last free", s.device_held);
    cr_assert_eq(s.pending_limit, 0);
    vmem_destroy(v);
    return st;
}

Test(limit, sim_vmm_shrink_releases_free_granules_of_live_regions)
{
    size_t held = 0;
    cr_assert_eq(shrink_around_live(VMEM_BACKEND_SIM_VMM, &held), VMEM_OK);
    cr_assert_leq(held, 8 * MiB);
}

Test(limit, sim_shrink_around_live_region_stays_pending)
{
    size_t held = 0;
    cr_assert_eq(shrink_around_live(VMEM_BACKEND_SIM, &held), VMEM_PENDING);
    cr_assert_gt(held, 8 * MiB);
}

/* Random operations while the limit moves, over both simulated backends,
 * with a step boundary now and then; patterns verified. */
static void moving_limit(vmem_backend_kind_t kind)
{
    vmem_config_t cfg = sim_config(kind, 32 * MiB, 32 * MiB, 512 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    enum { SLOTS = 64 };
    void *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    uint64_t rng = 7;
    size_t limit = 32 * MiB, prev_held = 0;
    for (int op = 0; op < 3000; op++) {
        if (op % 100 == 99) {
            limit = rng_range(&rng, 1, 16) * 2 * MiB; /* not 0: pending_limit 0 means none */
            vmem_status_t st = vmem_set_limit(v, limit, NULL);
            cr_assert(st == VMEM_OK || st == VMEM_PENDING, "vmem_set_limit: %s", vmem_strerror(st));
            CHECK_VMEM(v, "vmem_set_limit(%zu)", limit);
        }
        size_t i = rng_range(&rng, 0, SLOTS - 1);
        if (p[i]) {
            cr_assert(pattern_ok(p[i], sz[i], i + 1), "op %d: block %zu overwritten", op, i);
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
            p[i] = NULL;
        } else {
            sz[i] = rng_size(&rng, 3 * MiB);
            p[i] = vmem_alloc(v, sz[i]);
            cr_assert_not_null(p[i]);
            pattern_fill(p[i], sz[i], i + 1);
        }
        CHECK_VMEM(v, "op %d", op);
        if (op % 37 == 36) {
            /* The step boundary: vmm moves data between host and device here. */
            cr_assert_eq(vmem_step_end(v), VMEM_OK);
            CHECK_VMEM(v, "vmem_step_end at op %d", op);
            for (int k = 0; k < SLOTS; k++)
                if (p[k])
                    cr_assert(pattern_ok(p[k], sz[k], (uint64_t)k + 1),
                              "block %d changed across vmem_step_end (op %d)", k, op);
        }
        vmem_stats_t s = stats_of(v);
        if (!s.pending_limit)
            cr_assert_leq(s.device_held, limit, "op %d: held %zu over limit %zu", op, s.device_held,
                          limit);
        else
            cr_assert_leq(s.device_held, prev_held, "op %d: the arena grew while pending", op);
        prev_held = s.device_held;
    }
    for (int i = 0; i < SLOTS; i++)
        if (p[i])
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
    CHECK_VMEM(v, "drain");
    cr_assert_leq(stats_of(v).device_held, limit);
    vmem_destroy(v);
}

Test(limit, sim_limit_never_exceeded_while_it_moves)
{
    moving_limit(VMEM_BACKEND_SIM);
}

Test(limit, sim_vmm_limit_never_exceeded_while_it_moves)
{
    moving_limit(VMEM_BACKEND_SIM_VMM);
}
