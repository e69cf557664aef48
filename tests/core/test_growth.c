/*
 * The growth and trim policy (src/growth.h): the pure functions, the
 * environment, and what the engine does with them (bfc_check after every
 * operation).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

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
                            {"VMEM_TRIM", ""}, {"VMEM_TRIM_AGE", "-3"}, {"VMEM_TRIM_AGE", "x"}};
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
/* Handle sizes of the vmm backend from the environment (backend_env_mib)  */
/* ------------------------------------------------------------------------ */

Test(growth, handle_sizes_from_the_environment)
{
    unsetenv("VMEM_VMM_BIG_MIB");
    unsetenv("VMEM_VMM_HUGE_MIB");
    cr_assert_eq(backend_big_bytes(64 * MiB), 64 * MiB, "unset: the default");
    setenv("VMEM_VMM_BIG_MIB", "128", 1);
    cr_assert_eq(backend_big_bytes(64 * MiB), 128 * MiB);
    static const char *bad_big[] = {"100", "2", "2048", "0", "64x", "-64", ""};
    for (size_t i = 0; i < sizeof bad_big / sizeof bad_big[0]; i++) {
        setenv("VMEM_VMM_BIG_MIB", bad_big[i], 1);
        cr_assert_eq(backend_big_bytes(64 * MiB), 64 * MiB, "VMEM_VMM_BIG_MIB=%s", bad_big[i]);
    }
    /* Huge handles: 0 turns them off, else a power of two up to 4096. */
    const char *huge = "VMEM_VMM_HUGE_MIB";
    cr_assert_eq(backend_env_mib(huge, 512 * MiB, 0, 4096), 512 * MiB);
    setenv(huge, "0", 1);
    cr_assert_eq(backend_env_mib(huge, 512 * MiB, 0, 4096), 0);
    setenv(huge, "1024", 1);
    cr_assert_eq(backend_env_mib(huge, 512 * MiB, 0, 4096), GiB);
    static const char *bad_huge[] = {"8192", "768", "-512", "big"};
    for (size_t i = 0; i < sizeof bad_huge / sizeof bad_huge[0]; i++) {
        setenv(huge, bad_huge[i], 1);
        cr_assert_eq(backend_env_mib(huge, 512 * MiB, 0, 4096), 512 * MiB, "%s=%s", huge,
                     bad_huge[i]);
    }
}
