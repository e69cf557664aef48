/*
 * Fault injection through the backends (suite 'faults'): the Nth region
 * request fails, requests fail at random by seed, the host backend fails,
 * failures while a shrink is pending and while growing.  Every case ends
 * with the right status, vmem_check passing, nothing held after everything
 * is freed (no leak), and the allocator serving allocations again.
 * Each case runs over both simulated backends.
 */
#include "fuzz_common.h"

static const vmem_backend_kind_t kinds[] = {VMEM_BACKEND_SIM, VMEM_BACKEND_SIM_VMM};
#define NKINDS (sizeof kinds / sizeof kinds[0])

/* xorshift64 for the random workloads (seeded, reproducible). */
static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Clears the faults, then a 1 MiB block must land on the device. */
static void assert_works_again(vmem_t *v)
{
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 0, 0), VMEM_OK);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_HOST, 0, 0, 0), VMEM_OK);
    void *p = vmem_alloc(v, MiB);
    cr_assert_not_null(p, "allocator dead after faults: %s", vmem_strerror(vmem_last_status()));
    cr_assert_eq(location_of(v, p), VMEM_LOC_DEVICE);
    pattern_fill(p, MiB, 99);
    cr_assert(pattern_ok(p, MiB, 99));
    cr_assert_eq(vmem_free(v, p), VMEM_OK);
    cr_assert_eq(vmem_check(v), VMEM_OK);
}

/* The Nth request fails, for every N up to past the number of requests the
 * workload makes: with the fallback on nothing is lost (a failed region
 * request is retried at the minimum size or spills), the totals stay exact. */
Test(faults, nth_request_fails_with_fallback)
{
    for (size_t k = 0; k < NKINDS; k++) {
        for (uint64_t nth = 1; nth <= 12; nth++) {
            vmem_t *v = sim_open(kinds[k], 256 * MiB, 64 * MiB, 0);
            cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, nth, 0, 0), VMEM_OK);
            void *p[24];
            size_t spilled = 0;
            for (int i = 0; i < 24; i++) {
                size_t size = (size_t)(i % 5 + 1) * 700 * KiB;
                p[i] = vmem_alloc(v, size);
                cr_assert_not_null(p[i], "%s nth %llu: alloc %d failed: %s",
                                   vmem_backend_name(kinds[k]), (unsigned long long)nth, i,
                                   vmem_strerror(vmem_last_status()));
                spilled += location_of(v, p[i]) == VMEM_LOC_HOST;
                pattern_fill(p[i], size, (uint64_t)i);
                cr_assert_eq(vmem_check(v), VMEM_OK);
            }
            vmem_stats_t s = stats_of(v);
            cr_assert_eq(s.allocs, 24);
            cr_assert_eq(s.spills, spilled);
            cr_assert_eq(s.failures, 0);
            cr_assert_leq(s.device_held, s.limit);
            for (int i = 0; i < 24; i++) {
                cr_assert(pattern_ok(p[i], (size_t)(i % 5 + 1) * 700 * KiB, (uint64_t)i));
                cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
            }
            assert_nothing_held(v);
            assert_works_again(v);
            vmem_destroy(v);
        }
    }
}

/* Without the fallback, the failing request is an allocation failure with
 * VMEM_ERR_NOMEM, and only that one. */
Test(faults, nth_request_fails_without_fallback)
{
    setenv("VMEM_VMM_GROW_ALIGN", "0", 1); /* regions of the minimum size */
    for (size_t k = 0; k < NKINDS; k++) {
        vmem_t *v = sim_open(kinds[k], 256 * MiB, 64 * MiB, 0);
        cr_assert_eq(vmem_set_host_fallback(v, 0), VMEM_OK);
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 1, 0, 0), VMEM_OK);
        /* A 2 MiB request: the region asked for is exactly the minimum, so
         * there is no smaller retry. */
        void *p = vmem_alloc(v, 2 * MiB);
        cr_assert_null(p);
        cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
        vmem_stats_t s = stats_of(v);
        cr_assert_eq(s.failures, 1);
        cr_assert_eq(s.device_held, 0);
        cr_assert_eq(vmem_check(v), VMEM_OK);
        /* the fault is used up: the same request now succeeds */
        p = vmem_alloc(v, 2 * MiB);
        cr_assert_not_null(p);
        cr_assert_eq(location_of(v, p), VMEM_LOC_DEVICE);
        cr_assert_eq(vmem_free(v, p), VMEM_OK);
        assert_nothing_held(v);
        assert_works_again(v);
        vmem_destroy(v);
    }
}

/* Random failures by seed on the device backend, with a random workload of
 * allocations and frees: every NULL is VMEM_ERR_NOMEM, the totals match,
 * and the same seed gives the same outcome. */
static void random_run(vmem_backend_kind_t kind, uint64_t seed, double rate, int fallback,
                       uint64_t *outcome)
{
    vmem_t *v = sim_open(kind, 256 * MiB, 96 * MiB, 128 * MiB);
    cr_assert_eq(vmem_set_host_fallback(v, fallback), VMEM_OK);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, rate, seed), VMEM_OK);
    enum { N = 64 };
    void *p[N] = {0};
    size_t sz[N] = {0};
    uint64_t r = seed * 2654435761u + 1, nulls = 0, allocs = 0, frees = 0;
    for (int op = 0; op < 600; op++) {
        int i = (int)(rnd(&r) % N);
        if (p[i]) {
            cr_assert(pattern_ok(p[i], sz[i], (uint64_t)i));
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
            p[i] = NULL;
            frees++;
        } else {
            sz[i] = 1 + rnd(&r) % (6 * MiB);
            p[i] = vmem_alloc(v, sz[i]);
            if (!p[i]) {
                cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
                nulls++;
            } else {
                pattern_fill(p[i], sz[i], (uint64_t)i);
                allocs++;
            }
        }
        cr_assert_eq(vmem_check(v), VMEM_OK, "seed %llu op %d", (unsigned long long)seed, op);
    }
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.allocs, allocs);
    cr_assert_eq(s.frees, frees);
    cr_assert_eq(s.failures, nulls);
    cr_assert_leq(s.device_held, s.limit);
    if (!fallback)
        cr_assert_eq(s.spills, 0);
    *outcome = nulls * 1000003u + s.spills;
    for (int i = 0; i < N; i++)
        if (p[i])
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
    assert_nothing_held(v);
    assert_works_again(v);
    vmem_destroy(v);
}

Test(faults, random_failures_by_seed)
{
    for (size_t k = 0; k < NKINDS; k++) {
        for (uint64_t seed = 1; seed <= 12; seed++) {
            double rate = 0.1 + 0.07 * (double)(seed % 8);
            int fallback = seed % 3 != 0;
            uint64_t a, b;
            random_run(kinds[k], seed, rate, fallback, &a);
            random_run(kinds[k], seed, rate, fallback, &b);
            cr_assert_eq(a, b, "seed %llu is not reproducible", (unsigned long long)seed);
        }
    }
}

/* The host backend fails: spills fail with VMEM_ERR_NOMEM (the device keeps
 * serving what fits), and the next spill after the fault succeeds. */
Test(faults, host_backend_fails)
{
    for (size_t k = 0; k < NKINDS; k++) {
        vmem_t *v = sim_open(kinds[k], 256 * MiB, 8 * MiB, 256 * MiB);
        void *dev = vmem_alloc(v, 6 * MiB);
        cr_assert_not_null(dev);
        cr_assert_eq(location_of(v, dev), VMEM_LOC_DEVICE);
        /* The next host region request fails.  64 MiB is the host arena's
         * first region size, so there is no smaller retry. */
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_HOST, 1, 0, 0), VMEM_OK);
        void *q = vmem_alloc(v, 64 * MiB); /* does not fit the device limit */
        cr_assert_null(q);
        cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
        cr_assert_eq(vmem_check(v), VMEM_OK);
        vmem_stats_t s = stats_of(v);
        cr_assert_eq(s.host_held, 0);
        cr_assert_eq(s.failures, 1);
        /* Small blocks still fit on the device. */
        void *small = vmem_alloc(v, MiB);
        cr_assert_not_null(small);
        cr_assert_eq(location_of(v, small), VMEM_LOC_DEVICE);
        /* The fault was used: the spill works now. */
        q = vmem_alloc(v, 64 * MiB);
        cr_assert_not_null(q);
        cr_assert_eq(location_of(v, q), VMEM_LOC_HOST);
        pattern_fill(q, 64 * MiB, 7);
        /* Every host request failing: spills fail, nothing else changes. */
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_HOST, 0, 1.0, 3), VMEM_OK);
        void *big = vmem_alloc(v, 100 * MiB); /* needs a new host region */
        cr_assert_null(big);
        cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
        cr_assert(pattern_ok(q, 64 * MiB, 7));
        cr_assert_eq(vmem_check(v), VMEM_OK);
        cr_assert_eq(vmem_free(v, q), VMEM_OK);
        cr_assert_eq(vmem_free(v, small), VMEM_OK);
        cr_assert_eq(vmem_free(v, dev), VMEM_OK);
        assert_nothing_held(v);
        assert_works_again(v);
        vmem_destroy(v);
    }
}

/* Both backends failing every request: every allocation is NULL with
 * VMEM_ERR_NOMEM, no memory is taken, nothing is corrupted. */
Test(faults, everything_fails)
{
    for (size_t k = 0; k < NKINDS; k++) {
        vmem_t *v = sim_open(kinds[k], 256 * MiB, 0, 0);
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 1.0, 1), VMEM_OK);
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_HOST, 0, 1.0, 2), VMEM_OK);
        for (size_t size = 1; size < 512 * MiB; size = size * 3 + 1) {
            cr_assert_null(vmem_alloc(v, size));
            cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
        }
        vmem_stats_t s = stats_of(v);
        cr_assert_eq(s.device_held + s.host_held, 0);
        cr_assert_eq(s.allocs, 0);
        cr_assert_eq(vmem_check(v), VMEM_OK);
        assert_works_again(v);
        assert_nothing_held(v);
        vmem_destroy(v);
    }
}

/* Faults while a shrink is pending: no device memory is requested at all
 * (allocations spill), frees still give memory back, the shrink completes
 * once enough is freed. */
Test(faults, failures_during_pending_shrink)
{
    for (size_t k = 0; k < NKINDS; k++) {
        vmem_t *v = sim_open(kinds[k], 256 * MiB, 64 * MiB, 0);
        void *p[32];
        for (int i = 0; i < 32; i++) {
            p[i] = vmem_alloc(v, MiB + 512 * KiB);
            cr_assert_not_null(p[i]);
            cr_assert_eq(location_of(v, p[i]), VMEM_LOC_DEVICE);
            pattern_fill(p[i], MiB + 512 * KiB, (uint64_t)i);
        }
        size_t applied = 0;
        cr_assert_eq(vmem_set_limit(v, 16 * MiB, &applied), VMEM_PENDING);
        cr_assert_gt(applied, 16 * MiB);
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 1.0, 5), VMEM_OK);
        /* More than the free space left in what the arena holds. */
        vmem_stats_t before = stats_of(v);
        void *q = vmem_alloc(v, 20 * MiB);
        cr_assert_not_null(q);
        cr_assert_eq(location_of(v, q), VMEM_LOC_HOST);
        vmem_stats_t s = stats_of(v);
        cr_assert_leq(s.device_held, before.device_held);
        /* Free from the end: the held bytes never grow, and reach the limit. */
        size_t last = s.device_held;
        for (int i = 31; i >= 0; i--) {
            cr_assert(pattern_ok(p[i], MiB + 512 * KiB, (uint64_t)i));
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
            cr_assert_eq(vmem_check(v), VMEM_OK);
            s = stats_of(v);
            cr_assert_leq(s.device_held, last);
            last = s.device_held;
            if (i == 8) {
                cr_assert_eq(s.pending_limit, 0, "shrink still pending with %zu held",
                             s.device_held);
                cr_assert_leq(s.device_held, 16 * MiB);
            }
        }
        cr_assert_eq(vmem_free(v, q), VMEM_OK);
        assert_nothing_held(v);
        assert_works_again(v);
        vmem_destroy(v);
    }
}

/* Faults while growing: after the limit is raised, the region requests of
 * the growth fail; allocations spill rather than fail, and once the faults
 * stop the device is used again up to the new limit. */
Test(faults, failures_during_grow)
{
    for (size_t k = 0; k < NKINDS; k++) {
        vmem_t *v = sim_open(kinds[k], 256 * MiB, 128 * MiB, 0);
        size_t applied = 0;
        cr_assert_eq(vmem_set_limit(v, 8 * MiB, &applied), VMEM_OK);
        void *a = vmem_alloc(v, 6 * MiB);
        cr_assert_not_null(a);
        cr_assert_eq(location_of(v, a), VMEM_LOC_DEVICE);
        cr_assert_eq(vmem_set_limit(v, 128 * MiB, &applied), VMEM_OK);
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 1.0, 9), VMEM_OK);
        void *b = vmem_alloc(v, 32 * MiB);
        cr_assert_not_null(b);
        cr_assert_eq(location_of(v, b), VMEM_LOC_HOST);
        cr_assert_eq(vmem_check(v), VMEM_OK);
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 0, 0), VMEM_OK);
        void *c = vmem_alloc(v, 32 * MiB);
        cr_assert_not_null(c);
        cr_assert_eq(location_of(v, c), VMEM_LOC_DEVICE);
        vmem_stats_t s = stats_of(v);
        cr_assert_leq(s.device_held, 128 * MiB);
        cr_assert_eq(s.spills, 1);
        cr_assert_eq(vmem_free(v, a), VMEM_OK);
        cr_assert_eq(vmem_free(v, b), VMEM_OK);
        cr_assert_eq(vmem_free(v, c), VMEM_OK);
        assert_nothing_held(v);
        assert_works_again(v);
        vmem_destroy(v);
    }
}

/* Bad fault-injection arguments are refused and change nothing. */
Test(faults, bad_arguments)
{
    vmem_t *v = sim_open(VMEM_BACKEND_SIM, 64 * MiB, 0, 0);
    cr_assert_eq(vmem_inject_faults(NULL, VMEM_ARENA_DEVICE, 1, 0, 0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_inject_faults(v, (vmem_arena_kind_t)7, 1, 0, 0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 1, -0.1, 0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 1, 1.5, 0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 1, 0.0 / 0.0, 0), VMEM_ERR_INVALID);
    /* none of them armed a fault */
    void *p = vmem_alloc(v, 2 * MiB);
    cr_assert_not_null(p);
    cr_assert_eq(location_of(v, p), VMEM_LOC_DEVICE);
    cr_assert_eq(vmem_free(v, p), VMEM_OK);
    assert_nothing_held(v);
    vmem_destroy(v);
}

/* Destroying an instance with live blocks (and faults armed) releases
 * everything: LeakSanitizer and valgrind check there is no leak. */
Test(faults, destroy_with_live_blocks)
{
    for (size_t k = 0; k < NKINDS; k++) {
        vmem_t *v = sim_open(kinds[k], 64 * MiB, 8 * MiB, 0);
        for (int i = 0; i < 16; i++)
            cr_assert_not_null(vmem_alloc(v, (size_t)(i + 1) * 300 * KiB));
        vmem_stats_t s = stats_of(v);
        cr_assert_gt(s.spills, 0);
        cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 0.5, 1), VMEM_OK);
        vmem_destroy(v);
    }
}
