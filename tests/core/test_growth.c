/*
 * The growth and trim policy (src/growth.h): the pure functions, the
 * environment, and what the engine does with them (bfc_check after every
 * operation).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bfc.h"
#include "common.h"
#include "growth.h"

static const growth_policy_t legacy = {0};
static const growth_policy_t tight = {.tight = 1};

Test(growth, legacy_doubles_and_aligns)
{
    /* 2 MiB lacking, next region 8 MiB: the doubling size; contiguous with a
     * 64 MiB grow_align from offset 0: up to 64 MiB. */
    cr_assert_eq(growth_size(&legacy, 2 * MiB, 8 * MiB, 0, 0, 0, 0, GiB), 8 * MiB);
    cr_assert_eq(growth_size(&legacy, 2 * MiB, 8 * MiB, 0, 1, 64 * MiB, 0, GiB), 64 * MiB);
    /* the alignment counts from where the region starts */
    cr_assert_eq(growth_size(&legacy, 2 * MiB, 8 * MiB, 0, 1, 64 * MiB, 60 * MiB, GiB), 68 * MiB);
    /* dedicated: its own size */
    cr_assert_eq(growth_size(&legacy, 70 * MiB, 256 * MiB, 1, 0, 0, 0, GiB), 70 * MiB);
    /* never above the room */
    cr_assert_eq(growth_size(&legacy, 2 * MiB, 8 * MiB, 0, 0, 0, 0, 4 * MiB), 4 * MiB);
}

Test(growth, tight_grows_contiguous_arenas_by_what_is_missing)
{
    /* small lack: exactly that, no 64 MiB rounding */
    cr_assert_eq(growth_size(&tight, 2 * MiB, 256 * MiB, 0, 1, 64 * MiB, 0, GiB), 2 * MiB);
    cr_assert_eq(growth_size(&tight, 40 * MiB, 256 * MiB, 0, 1, 64 * MiB, 6 * MiB, GiB), 40 * MiB);
    /* a lack of a big handle or more ends on a big-handle boundary */
    cr_assert_eq(growth_size(&tight, 100 * MiB, 2 * MiB, 0, 1, 64 * MiB, 0, GiB), 128 * MiB);
    cr_assert_eq(growth_size(&tight, 64 * MiB, 2 * MiB, 0, 1, 64 * MiB, 2 * MiB, GiB), 126 * MiB);
    /* ... unless the room does not allow it */
    cr_assert_eq(growth_size(&tight, 100 * MiB, 2 * MiB, 0, 1, 64 * MiB, 0, 110 * MiB), 100 * MiB);
    /* separate regions keep doubling (docs/benchmarks.md) */
    cr_assert_eq(growth_size(&tight, 2 * MiB, 32 * MiB, 0, 0, 0, 0, GiB), 32 * MiB);
}

Test(growth, trim_target)
{
    growth_policy_t on = {.tight = 1, .trim = 1, .trim_slack = 0.02};
    /* off: never */
    cr_assert_eq(growth_trim_target(&tight, 500 * MiB, 100 * MiB, 100 * MiB, 0), SIZE_MAX);
    /* within 2 % of the high-water mark: nothing */
    cr_assert_eq(growth_trim_target(&on, 0, 100 * MiB, 100 * MiB, 0), SIZE_MAX);
    cr_assert_eq(growth_trim_target(&on, 2 * MiB, 100 * MiB, 100 * MiB, 0), SIZE_MAX);
    /* above: hold at most the allowance less the growth */
    size_t allow = (size_t)(100.0 * MiB * 1.02);
    cr_assert_eq(growth_trim_target(&on, 64 * MiB, 100 * MiB, 100 * MiB, 0), allow - 100 * MiB);
    /* a growth above the allowance: give back all that is free */
    cr_assert_eq(growth_trim_target(&on, 64 * MiB, 200 * MiB, 100 * MiB, 0), 0);
}

Test(growth, trim_target_at_peak)
{
    growth_policy_t peak = {.tight = 1, .trim = 1, .trim_slack = 0.03, .at_peak = 1};
    size_t allow = (size_t)(100.0 * MiB * 1.03);
    /* above the peak so far and the allowance: down to the allowance */
    cr_assert_eq(growth_trim_target(&peak, 80 * MiB, 40 * MiB, 100 * MiB, 90 * MiB),
                 allow - 40 * MiB);
    /* the peak so far is above the allowance: down to the peak, no lower */
    cr_assert_eq(growth_trim_target(&peak, 200 * MiB, 40 * MiB, 100 * MiB, 150 * MiB),
                 110 * MiB);
    /* within the peak so far: nothing (the floor rule would trim here) */
    cr_assert_eq(growth_trim_target(&peak, 100 * MiB, 40 * MiB, 100 * MiB, 150 * MiB), SIZE_MAX);
    growth_policy_t floor = peak;
    floor.at_peak = 0;
    cr_assert_eq(growth_trim_target(&floor, 100 * MiB, 40 * MiB, 100 * MiB, 150 * MiB),
                 allow - 40 * MiB);
}

Test(growth, environment_trim_rule)
{
    growth_policy_t p;
    unsetenv("VMEM_GROWTH");
    unsetenv("VMEM_TRIM");
    unsetenv("VMEM_TRIM_AGE");
    unsetenv("VMEM_TRIM_RULE");
    cr_assert_eq(growth_policy_from_env(&p, 1), VMEM_OK);
    cr_assert(!p.at_peak && !p.trim);
    /* peak turns trimming on, even on contiguous backends, with its slack */
    setenv("VMEM_TRIM_RULE", "peak", 1);
    cr_assert_eq(growth_policy_from_env(&p, 1), VMEM_OK);
    cr_assert(p.at_peak && p.trim && p.trim_slack == GROWTH_TRIM_PEAK_DEFAULT);
    setenv("VMEM_TRIM", "1", 1);
    cr_assert_eq(growth_policy_from_env(&p, 1), VMEM_OK);
    cr_assert(p.at_peak && p.trim && p.trim_slack == 0.01);
    setenv("VMEM_TRIM", "off", 1);
    cr_assert_eq(growth_policy_from_env(&p, 1), VMEM_OK);
    cr_assert(p.at_peak && !p.trim);
    unsetenv("VMEM_TRIM");
    setenv("VMEM_TRIM_RULE", "floor", 1);
    cr_assert_eq(growth_policy_from_env(&p, 0), VMEM_OK);
    cr_assert(!p.at_peak && p.trim && p.trim_slack == GROWTH_TRIM_DEFAULT);
    static const char *bad[] = {"", "Peak", "peak ", "at-peak"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("VMEM_TRIM_RULE", bad[i], 1);
        growth_policy_t q = {.tight = 7};
        cr_assert_eq(growth_policy_from_env(&q, 1), VMEM_ERR_ENV, "VMEM_TRIM_RULE=\"%s\"", bad[i]);
        cr_assert_eq(q.tight, 7);
    }
    unsetenv("VMEM_TRIM_RULE");
}

Test(growth, environment)
{
    growth_policy_t p;
    unsetenv("VMEM_GROWTH");
    unsetenv("VMEM_TRIM");
    unsetenv("VMEM_TRIM_AGE");
    unsetenv("VMEM_TRIM_RULE");
    cr_assert_eq(growth_policy_from_env(&p, 0), VMEM_OK);
    cr_assert(p.tight && p.share && p.trim && p.trim_slack == GROWTH_TRIM_DEFAULT);
    cr_assert_eq(p.trim_age, GROWTH_TRIM_AGE_DEFAULT);
    cr_assert_eq(growth_policy_from_env(&p, 1), VMEM_OK);
    cr_assert(p.tight && !p.trim);
    setenv("VMEM_GROWTH", "legacy", 1);
    setenv("VMEM_TRIM", "0.5", 1);
    setenv("VMEM_TRIM_AGE", "1000", 1);
    cr_assert_eq(growth_policy_from_env(&p, 1), VMEM_OK);
    cr_assert(!p.tight && !p.share && p.trim && p.trim_slack == 0.005 && p.trim_age == 1000);
    setenv("VMEM_TRIM", "off", 1);
    cr_assert_eq(growth_policy_from_env(&p, 0), VMEM_OK);
    cr_assert(!p.trim);
    /* bad values: an error, p untouched */
    const char *bad[][2] = {{"VMEM_GROWTH", "double"}, {"VMEM_TRIM", "-1"}, {"VMEM_TRIM", "2%"},
                            {"VMEM_TRIM", ""}, {"VMEM_TRIM_AGE", "-3"}, {"VMEM_TRIM_AGE", "x"},
                            /* strtoull skips blanks before a sign (" -5" was 2^64 - 5);
                             * strtod reads hexadecimal, exponents, infinities */
                            {"VMEM_TRIM_AGE", " -5"}, {"VMEM_TRIM_AGE", " 5"},
                            {"VMEM_TRIM_AGE", "+5"}, {"VMEM_TRIM", "0x10"}, {"VMEM_TRIM", " 2"},
                            {"VMEM_TRIM", "1e1"}, {"VMEM_TRIM", "."}, {"VMEM_TRIM", "1.2.3"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsetenv("VMEM_GROWTH");
        unsetenv("VMEM_TRIM");
        unsetenv("VMEM_TRIM_AGE");
        setenv(bad[i][0], bad[i][1], 1);
        growth_policy_t q = {.tight = 7};
        cr_assert_eq(growth_policy_from_env(&q, 0), VMEM_ERR_ENV, "%s=%s", bad[i][0], bad[i][1]);
        cr_assert_eq(q.tight, 7);
    }
    unsetenv("VMEM_GROWTH");
    unsetenv("VMEM_TRIM");
    unsetenv("VMEM_TRIM_AGE");
}

/* ------------------------------------------------------------------------ */
/* In the engine                                                            */
/* ------------------------------------------------------------------------ */

static backend_t *be;
static bfc_arena_t arena;

static bfc_arena_t *open_arena(int vmm_style, const growth_policy_t *g, size_t grow_align)
{
    bfc_params_t p = {.min_region = 2 * MiB, .max_region = 256 * MiB, .split_min = 256,
                      .dedicated_min = 64 * MiB, .growth = *g};
    cr_assert_eq(backend_sim_create(8 * GiB, vmm_style, &be), VMEM_OK);
    be->grow_align = grow_align;
    cr_assert_eq(bfc_init(&arena, be, &p, 8 * GiB), VMEM_OK);
    return &arena;
}

static void close_arena(void)
{
    bfc_fini(&arena);
    backend_destroy(be);
}

static void *checked_alloc(bfc_arena_t *a, size_t n)
{
    void *p = bfc_alloc(a, n, 0);
    cr_assert_not_null(p);
    char why[256] = "";
    cr_assert_eq(bfc_check(a, why, sizeof why), VMEM_OK, "%s", why);
    return p;
}

static void checked_free(bfc_arena_t *a, void *p)
{
    cr_assert_eq(bfc_free(a, p, 0, NULL), VMEM_OK);
    char why[256] = "";
    cr_assert_eq(bfc_check(a, why, sizeof why), VMEM_OK, "%s", why);
}

/* An empty dedicated region that cannot serve the next large request goes
 * back before the arena grows for it (before: it stayed, held 164 MiB). */
Test(growth, trim_gives_back_an_empty_region_before_growing)
{
    growth_policy_t g = {.tight = 1, .trim = 1, .trim_slack = 0.02};
    bfc_arena_t *a = open_arena(0, &g, 0);
    checked_free(a, checked_alloc(a, 64 * MiB));
    cr_assert_eq(a->held, 64 * MiB);
    void *b = checked_alloc(a, 100 * MiB);
    cr_assert_eq(a->held, 100 * MiB);
    cr_assert_eq(a->peak_held, 100 * MiB);
    cr_assert_eq(a->trims, 1);
    cr_assert_eq(a->trimmed, 64 * MiB);
    checked_free(a, b);
    close_arena();
}

Test(growth, trim_off_keeps_the_empty_region)
{
    bfc_arena_t *a = open_arena(0, &tight, 0);
    checked_free(a, checked_alloc(a, 64 * MiB));
    void *b = checked_alloc(a, 100 * MiB);
    cr_assert_eq(a->held, 164 * MiB);
    cr_assert_eq(a->trims, 0);
    checked_free(a, b);
    close_arena();
}

/* A workload that needs the trimmed memory again: after the first time,
 * trims stop (no backend calls in a repeating steady state). */
Test(growth, trim_stops_when_it_only_churns)
{
    growth_policy_t g = {.tight = 1, .trim = 1, .trim_slack = 0.02};
    bfc_arena_t *a = open_arena(0, &g, 0);
    uint64_t allocs_after[6];
    for (int i = 0; i < 6; i++) {
        void *x = checked_alloc(a, 64 * MiB);
        void *y = checked_alloc(a, 100 * MiB); /* both live: 164 MiB needed */
        checked_free(a, x);
        checked_free(a, y);
        checked_free(a, checked_alloc(a, 100 * MiB));
        checked_free(a, checked_alloc(a, 64 * MiB));
        allocs_after[i] = a->region_allocs;
    }
    /* settled: no region requests in the later rounds */
    cr_assert_eq(allocs_after[5], allocs_after[2], "%llu region requests in rounds 3-6",
                 (unsigned long long)(allocs_after[5] - allocs_after[2]));
    cr_assert_leq(a->trims, 2);
    close_arena();
}

/* Uncapped (share_dedicated), a request no other free chunk fits splits a
 * free dedicated chunk instead of growing (before: held 128 + 32 MiB). */
Test(growth, uncapped_small_request_shares_an_empty_dedicated_region)
{
    growth_policy_t g = {.tight = 1, .share = 1};
    bfc_arena_t *a = open_arena(0, &g, 0);
    a->share_dedicated = 1;
    checked_free(a, checked_alloc(a, 128 * MiB));
    uint64_t regions = a->region_allocs;
    void *x = checked_alloc(a, 32 * MiB);
    void *y = checked_alloc(a, 32 * MiB);
    cr_assert_eq(a->held, 128 * MiB);
    cr_assert_eq(a->region_allocs, regions);
    checked_free(a, x);
    checked_free(a, y);
    close_arena();
}

/* Not shared: with share_dedicated 0 (a limit was set), with the legacy
 * policy, and when the room under the limit could not grow the chunk again. */
Test(growth, dedicated_region_stays_whole_under_a_limit_or_legacy_or_without_room)
{
    growth_policy_t shared = {.tight = 1, .share = 1};
    growth_policy_t legacy_share = {.tight = 0, .share = 0};
    struct {
        const growth_policy_t *g;
        int share_dedicated;
        size_t limit;
    } cases[] = {{&shared, 0, 8 * GiB}, {&legacy_share, 1, 8 * GiB}, {&shared, 1, 200 * MiB}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bfc_arena_t *a = open_arena(0, cases[i].g, 0);
        a->share_dedicated = cases[i].share_dedicated;
        cr_assert_eq(bfc_set_limit(a, cases[i].limit), VMEM_OK);
        checked_free(a, checked_alloc(a, 128 * MiB));
        void *x = checked_alloc(a, 32 * MiB);
        cr_assert_geq(a->held, 160 * MiB, "case %zu: held %zu", i, a->held);
        checked_free(a, x);
        close_arena();
    }
}

/* vmem_create sets share_dedicated only when no limit was given, and
 * vmem_set_limit clears it (public API, sim backend). */
Test(growth, vmem_shares_dedicated_regions_only_while_uncapped)
{
    unsetenv("VMEM_GROWTH");
    unsetenv("VMEM_LIMIT");
    unsetenv("CUDA_DEVICE_MEMORY_LIMIT");
    unsetenv("CUDA_DEVICE_MEMORY_LIMIT_0");
    for (int capped = 0; capped < 3; capped++) {
        vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, capped == 1 ? 2 * GiB : 0, 0, 64 * MiB,
                                       NULL);
        vmem_t *v = NULL;
        cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
        if (capped == 2)
            cr_assert_eq(vmem_set_limit(v, 2 * GiB, NULL), VMEM_OK);
        void *big = vmem_alloc(v, 128 * MiB);
        cr_assert_not_null(big);
        cr_assert_eq(vmem_free(v, big), VMEM_OK);
        void *x = vmem_alloc(v, 32 * MiB);
        cr_assert_not_null(x);
        /* capped: a region of its own (the trim may give the empty 128 MiB back) */
        vmem_stats_t st = stats_of(v);
        cr_assert_eq(st.device_region_allocs, capped ? 2u : 1u, "capped %d: %llu regions", capped,
                     (unsigned long long)st.device_region_allocs);
        if (!capped)
            cr_assert_eq(st.device_held, 128 * MiB, "uncapped: held %zu", st.device_held);
        cr_assert_eq(vmem_free(v, x), VMEM_OK);
        cr_assert_eq(vmem_check(v), VMEM_OK);
        vmem_destroy(v);
    }
}

/* Contiguous: a 2 MiB request grows by 2 MiB (before: a 64 MiB region,
 * grow_align), a 100 MiB one to the next 64 MiB boundary. */
Test(growth, tight_contiguous_growth)
{
    bfc_arena_t *a = open_arena(1, &tight, 64 * MiB);
    void *s = checked_alloc(a, 2 * MiB);
    cr_assert_eq(a->held, 2 * MiB);
    void *l = checked_alloc(a, 100 * MiB);
    cr_assert_eq(a->held, 128 * MiB);
    cr_assert_eq(a->nregions, 1);
    checked_free(a, l);
    checked_free(a, s);
    close_arena();
    a = open_arena(1, &legacy, 64 * MiB);
    s = checked_alloc(a, 2 * MiB);
    cr_assert_eq(a->held, 64 * MiB);
    checked_free(a, s);
    close_arena();
}

/* A trim on a splittable arena gives back holes, never the free tail the
 * growth is extending. */
Test(growth, trim_keeps_the_tail)
{
    growth_policy_t g = {.tight = 1, .trim = 1, .trim_slack = 0.0};
    bfc_arena_t *a = open_arena(1, &g, 0);
    void *h = checked_alloc(a, 8 * MiB);  /* becomes a hole */
    void *k = checked_alloc(a, 2 * MiB);  /* keeps it a hole */
    void *t = checked_alloc(a, 6 * MiB);  /* becomes the free tail */
    checked_free(a, h);
    checked_free(a, t);
    cr_assert_eq(a->held, 16 * MiB);
    /* 10 MiB fits neither: the tail (6 MiB) is extended by 4 MiB, and 4 MiB
     * of the hole go first (hwm 16 MiB, no slack: held stays 16 MiB) */
    void *n = checked_alloc(a, 10 * MiB);
    cr_assert_eq(a->trims, 1);
    cr_assert_eq(a->trimmed, 4 * MiB);
    cr_assert_eq(a->held, 16 * MiB);
    cr_assert_eq((uintptr_t)n, (uintptr_t)t);
    checked_free(a, n);
    checked_free(a, k);
    close_arena();
}

/* A fragmenting workload of whole granules on a contiguous, splittable
 * arena (sim-vmm): under the peak rule every free chunk can go back, so held
 * never passes (1 + slack) times the most bytes ever in use.  Without
 * trimming the same workload holds more (it does fragment), and the floor
 * rule stops trimming once the memory is needed again. */
static size_t fragmenting_peak_held(const growth_policy_t *g, size_t *peak_in_use, uint64_t *trims)
{
    bfc_arena_t *a = open_arena(1, g, 0);
    enum { SLOTS = 48 };
    void *slot[SLOTS] = {0};
    unsigned seed = 12345;
    for (int op = 0; op < 6000; op++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = (seed >> 8) % 1000;
        size_t i = (seed >> 20) % SLOTS;
        if (slot[i]) {
            checked_free(a, slot[i]);
            slot[i] = NULL;
        } else if (a->in_use < 400 * MiB) {
            /* mostly small blocks, some large: 2-16 MiB, or 40-100 MiB */
            size_t n = r < 850 ? 2 * MiB * (1 + r % 8) : 2 * MiB * (20 + r % 31);
            slot[i] = checked_alloc(a, n);
        }
        if (g->at_peak) {
            size_t bound = (size_t)((double)a->peak_in_use * (1.0 + g->trim_slack));
            cr_assert_leq(a->held, bound, "op %d: held %zu MiB above %zu MiB", op, a->held / MiB,
                          bound / MiB);
        }
    }
    for (size_t i = 0; i < SLOTS; i++)
        if (slot[i])
            checked_free(a, slot[i]);
    size_t peak = a->peak_held;
    *peak_in_use = a->peak_in_use;
    *trims = a->trims;
    close_arena();
    return peak;
}

Test(growth, trim_at_peak_keeps_held_near_the_bytes_in_use)
{
    growth_policy_t peak = {.tight = 1, .trim = 1, .trim_slack = 0.03, .at_peak = 1};
    growth_policy_t floor = {.tight = 1, .trim = 1, .trim_slack = 0.03};
    size_t live_p, live_f, live_n;
    uint64_t trims_p, trims_f, trims_n;
    size_t held_p = fragmenting_peak_held(&peak, &live_p, &trims_p);
    size_t held_f = fragmenting_peak_held(&floor, &live_f, &trims_f);
    size_t held_n = fragmenting_peak_held(&tight, &live_n, &trims_n);
    cr_assert_eq(live_p, live_n);
    cr_assert_gt(trims_p, trims_f, "peak rule %llu trims, floor rule %llu",
                 (unsigned long long)trims_p, (unsigned long long)trims_f);
    cr_assert_eq(trims_n, 0);
    cr_assert_gt(held_n, (size_t)((double)live_n * 1.03), "no trim: held %zu MiB, live %zu MiB",
                 held_n / MiB, live_n / MiB);
    cr_assert_lt(held_p, held_f, "peak rule %zu MiB, floor rule %zu MiB", held_p / MiB,
                 held_f / MiB);
}

/* ------------------------------------------------------------------------ */
/* Settings of the vmm backend from the environment (backend_vmm_env)      */
/* ------------------------------------------------------------------------ */

static const char *const vmm_vars[] = {
    "VMEM_VMM_BIG", "VMEM_VMM_HOST_BIG", "VMEM_VMM_DEVICE_BIG", "VMEM_VMM_GROW_ALIGN",
    "VMEM_VMM_BIG_MIB", "VMEM_VMM_HUGE_MIB", "VMEM_VMM_SPLIT_THREADS",
    "VMEM_VMM_RESERVE_THREADS", "VMEM_VMM_HOST_KEEP", "VMEM_VMM_MOVE_MIRROR",
    "VMEM_VMM_MOVE_SWAP", "VMEM_VMM_FREE_LATE", "VMEM_VMM_PHASES",
};

static void vmm_env_unset(void)
{
    for (size_t i = 0; i < sizeof vmm_vars / sizeof vmm_vars[0]; i++)
        unsetenv(vmm_vars[i]);
}

/* backend_vmm_env with 2 MiB granules; fails the test unless it succeeds. */
static backend_vmm_env_t vmm_env_ok(const char *name, const char *value)
{
    backend_vmm_env_t e;
    memset(&e, 0xAB, sizeof e);
    vmem_status_t st = backend_vmm_env(2 * MiB, &e);
    cr_assert_eq(st, VMEM_OK, "%s=\"%s\" refused", name, value);
    return e;
}

/* name=value must make backend_vmm_env (granule bytes) refuse with
 * VMEM_ERR_ENV, leave *out alone, and log one error naming the variable
 * and the value.  The variable is unset again after. */
static void vmm_env_refused(size_t granule, const char *name, const char *value)
{
    static log_capture_t cap = LOG_CAPTURE_INIT;
    capture_reset(&cap);
    vmem_set_log(capture_log, &cap, VMEM_LOG_WARN);
    setenv(name, value, 1);
    backend_vmm_env_t e;
    memset(&e, 0xAB, sizeof e);
    vmem_status_t st = backend_vmm_env(granule, &e);
    unsetenv(name);
    vmem_set_log(NULL, NULL, VMEM_LOG_WARN);
    cr_assert_eq(st, VMEM_ERR_ENV, "%s=\"%s\" taken: %s", name, value, vmem_strerror(st));
    cr_assert_eq(e.split_threads, (int)0xABABABAB, "%s=\"%s\": out written", name, value);
    cr_assert_eq(capture_lines(&cap), 1, "%s=\"%s\": %u log lines", name, value,
                 capture_lines(&cap));
    cr_assert_eq(cap.last_level, VMEM_LOG_ERROR);
    char want[128];
    snprintf(want, sizeof want, "invalid %s=\"%s\" (expected ", name, value);
    cr_assert(strstr(cap.last, want) != NULL, "%s=\"%s\": logged \"%s\"", name, value, cap.last);
}

/* Unset, every setting has its default.  The eight switches are booleans
 * (1/0, true/false, yes/no, on/off, any case); anything else used to mean
 * on (the four study switches of the moves, VMEM_VMM_MOVE_MIRROR to
 * VMEM_VMM_PHASES, were not checked when the backend opened at all, and
 * took an empty value as unset). */
Test(growth, vmm_switches_are_booleans)
{
    static const char *sw[] = {"VMEM_VMM_BIG",         "VMEM_VMM_HOST_BIG",
                               "VMEM_VMM_DEVICE_BIG",  "VMEM_VMM_GROW_ALIGN",
                               "VMEM_VMM_MOVE_MIRROR", "VMEM_VMM_MOVE_SWAP",
                               "VMEM_VMM_FREE_LATE",   "VMEM_VMM_PHASES"};
    static const int dflt[] = {1, 1, 1, 1, 1, 1, 0, 0};
    static const char *bad[] = {"", "2", "maybe", "00", "0 ", " 1", "-1", "o", "offf"};
    static const struct { const char *text; int on; } good[] = {
        {"0", 0}, {"1", 1}, {"off", 0}, {"OFF", 0}, {"false", 0}, {"no", 0},
        {"on", 1}, {"True", 1}, {"yes", 1},
    };
    vmm_env_unset();
    backend_vmm_env_t d = vmm_env_ok("(all)", "unset");
    cr_assert(d.big && d.host_big && d.device_big && d.grow_align);
    cr_assert(d.move_mirror && d.move_swap && !d.free_late && !d.phases);
    cr_assert_eq(d.big_bytes, 64 * MiB);
    cr_assert_eq(d.huge_bytes, 512 * MiB);
    cr_assert_eq(d.split_threads, 1);
    cr_assert_eq(d.reserve_threads, 4);
    cr_assert_eq(d.host_keep, SIZE_MAX);
    int on = 0;
    cr_assert_eq(backend_grow_align_from_env(&on), VMEM_OK);
    cr_assert_eq(on, 1);
    size_t big = 0;
    cr_assert_eq(backend_big_from_env(2 * MiB, &big), VMEM_OK);
    cr_assert_eq(big, 64 * MiB);
    for (size_t v = 0; v < sizeof sw / sizeof sw[0]; v++) {
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            vmm_env_refused(2 * MiB, sw[v], bad[i]);
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            setenv(sw[v], good[i].text, 1);
            backend_vmm_env_t e = vmm_env_ok(sw[v], good[i].text);
            int got[] = {e.big,         e.host_big, e.device_big, e.grow_align,
                         e.move_mirror, e.move_swap, e.free_late, e.phases};
            cr_assert_eq(sizeof got / sizeof got[0], sizeof sw / sizeof sw[0]);
            for (size_t k = 0; k < sizeof got / sizeof got[0]; k++)
                cr_assert_eq(got[k], k == v ? good[i].on : dflt[k], "%s=%s: switch %zu is %d",
                             sw[v], good[i].text, k, got[k]);
            unsetenv(sw[v]);
        }
    }
}

/* The study switches of the moves, read again at each move
 * (backend_vmm_move_switch): a boolean as above, else the default, never
 * on; an error names a malformed value once per variable.  (They used to
 * read anything but "0" as on, silently.)  The only test here that calls
 * backend_vmm_move_switch, so its once-flags start clear (Criterion runs
 * each test in a process of its own). */
Test(growth, vmm_move_switches_read_at_each_move)
{
    static const struct { backend_vmm_switch_t which; const char *name; int dflt; } sw[] = {
        {BACKEND_VMM_MOVE_MIRROR, "VMEM_VMM_MOVE_MIRROR", 1},
        {BACKEND_VMM_MOVE_SWAP, "VMEM_VMM_MOVE_SWAP", 1},
        {BACKEND_VMM_FREE_LATE, "VMEM_VMM_FREE_LATE", 0},
        {BACKEND_VMM_PHASES, "VMEM_VMM_PHASES", 0},
    };
    static const struct { const char *text; int on; } good[] = {
        {"0", 0}, {"1", 1}, {"off", 0}, {"Off", 0}, {"FALSE", 0}, {"no", 0},
        {"on", 1}, {"true", 1}, {"YES", 1},
    };
    static const char *bad[] = {"2", "garbage", "offf", "", "00", " 0", "-1"};
    static log_capture_t cap = LOG_CAPTURE_INIT;
    cr_assert_eq(sizeof sw / sizeof sw[0], BACKEND_VMM_SWITCHES);
    vmm_env_unset();
    capture_reset(&cap);
    vmem_set_log(capture_log, &cap, VMEM_LOG_WARN);
    for (size_t v = 0; v < sizeof sw / sizeof sw[0]; v++) {
        cr_assert_eq(backend_vmm_move_switch(sw[v].which), sw[v].dflt, "%s unset", sw[v].name);
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            setenv(sw[v].name, good[i].text, 1);
            cr_assert_eq(backend_vmm_move_switch(sw[v].which), good[i].on, "%s=%s", sw[v].name,
                         good[i].text);
        }
        cr_assert_eq(capture_lines(&cap), 0, "%s: a good value logged \"%s\"", sw[v].name,
                     cap.last);
        /* malformed: the default at every move, one error for the first */
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            setenv(sw[v].name, bad[i], 1);
            for (int move = 0; move < 3; move++)
                cr_assert_eq(backend_vmm_move_switch(sw[v].which), sw[v].dflt, "%s=\"%s\"",
                             sw[v].name, bad[i]);
        }
        cr_assert_eq(capture_lines(&cap), 1, "%s: %u log lines", sw[v].name,
                     capture_lines(&cap));
        cr_assert_eq(cap.last_level, VMEM_LOG_ERROR);
        char want[128];
        snprintf(want, sizeof want, "invalid %s=\"%s\" (expected ", sw[v].name, bad[0]);
        cr_assert(strstr(cap.last, want) != NULL, "%s: logged \"%s\"", sw[v].name, cap.last);
        /* a good value set again is read again */
        setenv(sw[v].name, sw[v].dflt ? "off" : "on", 1);
        cr_assert_eq(backend_vmm_move_switch(sw[v].which), !sw[v].dflt);
        unsetenv(sw[v].name);
        capture_reset(&cap);
    }
    vmem_set_log(NULL, NULL, VMEM_LOG_WARN);
}

/* Handle sizes: VMEM_VMM_BIG_MIB a power of two from 4 to 1024 MiB that is
 * 2 to 256 granules; VMEM_VMM_HUGE_MIB 0, or a power of two up to 4096 MiB
 * that is 2 to 64 big handles.  Out of range used to mean the default (or,
 * for a big handle too large for the granule, no big handles). */
Test(growth, handle_sizes_from_the_environment)
{
    vmm_env_unset();
    setenv("VMEM_VMM_BIG_MIB", "128", 1);
    cr_assert_eq(vmm_env_ok("VMEM_VMM_BIG_MIB", "128").big_bytes, 128 * MiB);
    setenv("VMEM_VMM_BIG_MIB", "4", 1);
    cr_assert_eq(vmm_env_ok("VMEM_VMM_BIG_MIB", "4").big_bytes, 4 * MiB);
    setenv("VMEM_VMM_BIG_MIB", "512", 1);
    cr_assert_eq(vmm_env_ok("VMEM_VMM_BIG_MIB", "512").big_bytes, 512 * MiB);
    /* (huge handles left at their default: 512 MiB is one big handle, off
     * in the backend, not an error) */
    cr_assert_eq(vmm_env_ok("VMEM_VMM_BIG_MIB", "512").huge_bytes, 512 * MiB);
    unsetenv("VMEM_VMM_BIG_MIB");
    static const char *bad_big[] = {"100", "2", "1024", "2048", "0", "64x", "-64", "", " 64",
                                    "64M", "0x40", "18446744073709551680"};
    for (size_t i = 0; i < sizeof bad_big / sizeof bad_big[0]; i++)
        vmm_env_refused(2 * MiB, "VMEM_VMM_BIG_MIB", bad_big[i]);
    /* the granule bounds the range: 1024 MiB is 256 granules of 4 MiB, 4 MiB
     * only one */
    size_t big = 0;
    setenv("VMEM_VMM_BIG_MIB", "1024", 1);
    cr_assert_eq(backend_big_from_env(4 * MiB, &big), VMEM_OK);
    cr_assert_eq(big, GiB);
    cr_assert_eq(backend_big_from_env(2 * MiB, &big), VMEM_ERR_ENV);
    unsetenv("VMEM_VMM_BIG_MIB");
    vmm_env_refused(4 * MiB, "VMEM_VMM_BIG_MIB", "4");

    const char *huge = "VMEM_VMM_HUGE_MIB";
    static const struct { const char *text; size_t bytes; } good_huge[] = {
        {"0", 0}, {"00", 0}, {"128", 128 * MiB}, {"0128", 128 * MiB}, {"1024", GiB},
        {"4096", 4 * GiB},
    };
    for (size_t i = 0; i < sizeof good_huge / sizeof good_huge[0]; i++) {
        setenv(huge, good_huge[i].text, 1);
        cr_assert_eq(vmm_env_ok(huge, good_huge[i].text).huge_bytes, good_huge[i].bytes);
    }
    unsetenv(huge);
    static const char *bad_huge[] = {"8192", "768", "-512", "big", "", "64", "32", "1",
                                     "512 ", "512M", "0x200"};
    for (size_t i = 0; i < sizeof bad_huge / sizeof bad_huge[0]; i++)
        vmm_env_refused(2 * MiB, huge, bad_huge[i]);
    /* the range follows the big handles: with 32 MiB ones, 64 to 2048 MiB */
    setenv("VMEM_VMM_BIG_MIB", "32", 1);
    setenv(huge, "64", 1);
    cr_assert_eq(vmm_env_ok(huge, "64").huge_bytes, 64 * MiB);
    unsetenv(huge);
    vmm_env_refused(2 * MiB, huge, "4096");
    unsetenv("VMEM_VMM_BIG_MIB");
}

/* Thread counts: 1 to 4 (split), 1 to 16 (reserve); outside used to be
 * clamped, junk to read as its leading digits. */
Test(growth, vmm_thread_counts_in_range)
{
    static const struct { const char *name; int max; } t[] = {
        {"VMEM_VMM_SPLIT_THREADS", 4}, {"VMEM_VMM_RESERVE_THREADS", 16},
    };
    static const char *bad[] = {"0", "", "x", "2x", "-1", " 2", "2 ", "+2", "1.5",
                                "99999999999999999999"};
    vmm_env_unset();
    for (size_t v = 0; v < sizeof t / sizeof t[0]; v++) {
        for (int n = 1; n <= t[v].max; n++) {
            char text[16];
            snprintf(text, sizeof text, "%d", n);
            setenv(t[v].name, text, 1);
            backend_vmm_env_t e = vmm_env_ok(t[v].name, text);
            cr_assert_eq(v == 0 ? e.split_threads : e.reserve_threads, n);
        }
        unsetenv(t[v].name);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            vmm_env_refused(2 * MiB, t[v].name, bad[i]);
        char over[16];
        snprintf(over, sizeof over, "%d", t[v].max + 1);
        vmm_env_refused(2 * MiB, t[v].name, over);
    }
}

/* VMEM_VMM_HOST_KEEP: a size, or all; a bad size used to mean all. */
Test(growth, vmm_host_keep_is_a_size)
{
    static const struct { const char *text; size_t bytes; } good[] = {
        {"0", 0}, {"4G", 4 * GiB}, {"64M", 64 * MiB}, {"1048576", MiB}, {"all", SIZE_MAX},
        {"ALL", SIZE_MAX},
    };
    static const char *bad[] = {"", "lots", "-1", "1.5G", "4Q", "4G4", "everything",
                                "99999999999999999999"};
    vmm_env_unset();
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("VMEM_VMM_HOST_KEEP", good[i].text, 1);
        cr_assert_eq(vmm_env_ok("VMEM_VMM_HOST_KEEP", good[i].text).host_keep, good[i].bytes);
    }
    unsetenv("VMEM_VMM_HOST_KEEP");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        vmm_env_refused(2 * MiB, "VMEM_VMM_HOST_KEEP", bad[i]);
}
