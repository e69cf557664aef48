/*
 * Remaps under the limit (bfc_remap, VMEM_REMAP; docs/vmm.md, "Remaps"): an
 * allocation that no free block fits, while the arena's free memory lies in
 * pieces, moves whole free granules to the arena's end instead of giving
 * memory back and mapping new memory (which waits for the device on vmm).
 * On sim-vmm: what moves, what stays, when it does not apply.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vmem.h"

static vmem_t *cut_instance(size_t limit)
{
    env_unset_all();
    unsetenv("VMEM_REMAP");
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, limit, 0, 64 * MiB, NULL);
    return create_or_die(&cfg);
}

/* Four 4 MiB blocks fill a 16 MiB limit; the second and the last are freed:
 * 8 MiB free, in two pieces that are not neighbours (the last one the
 * arena's free tail). */
static void fill_and_cut(vmem_t *v, void *p[4])
{
    for (int i = 0; i < 4; i++) {
        p[i] = vmem_alloc(v, 4 * MiB);
        cr_assert_not_null(p[i]);
        cr_assert_eq(location_of(v, p[i]), VMEM_LOC_DEVICE);
        pattern_fill(p[i], 4 * MiB, (uint64_t)i + 1);
    }
    cr_assert_eq(vmem_free(v, p[1]), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[3]), VMEM_OK);
    CHECK_VMEM(v, "the frees");
}

/* fill_and_cut, then an 8 MiB allocation, which must land on the device;
 * the statistics before and after it in *s0 and *s1. */
static void *cut_then_alloc(vmem_t *v, void *p[4], vmem_stats_t *s0, vmem_stats_t *s1)
{
    fill_and_cut(v, p);
    *s0 = stats_of(v);
    void *q = vmem_alloc(v, 8 * MiB);
    cr_assert_not_null(q);
    *s1 = stats_of(v);
    cr_assert_eq(location_of(v, q), VMEM_LOC_DEVICE, "served by the device, not the host");
    return q;
}

/* Frees q and the two blocks fill_and_cut left live. */
static void free_rest(vmem_t *v, void *q, void *p[4])
{
    cr_assert_eq(vmem_free(v, q), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[0]), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[2]), VMEM_OK);
    CHECK_VMEM(v, "the last frees");
}

Test(remap, pieces_under_the_limit_move_to_the_tail_without_a_release)
{
    vmem_t *v = cut_instance(16 * MiB);
    void *p[4];
    vmem_stats_t s0, s1;
    void *q = cut_then_alloc(v, p, &s0, &s1);
    cr_assert_eq(s1.device_remaps - s0.device_remaps, 1, "one run moved: %llu",
                 (unsigned long long)(s1.device_remaps - s0.device_remaps));
    cr_assert_eq(s1.device_remapped - s0.device_remapped, 4 * MiB, "the 4 MiB hole moved");
    cr_assert_eq(s1.device_region_frees, s0.device_region_frees, "nothing given back");
    cr_assert_eq(s1.device_held, s0.device_held, "held unchanged: %zu -> %zu", s0.device_held,
                 s1.device_held);
    cr_assert_leq(s1.device_peak_held, 16 * MiB, "never above the limit");
    cr_assert_eq(s1.spills, s0.spills, "nothing on host");
    /* the block is the old tail and the moved hole, one range */
    cr_assert_eq((char *)q, (char *)p[3], "the free tail is where it starts");
    pattern_fill(q, 8 * MiB, 9);
    cr_assert(pattern_ok(p[0], 4 * MiB, 1), "the live blocks keep their data");
    cr_assert(pattern_ok(p[2], 4 * MiB, 3));
    cr_assert(pattern_ok(q, 8 * MiB, 9));
    CHECK_VMEM(v, "the remap");
    /* the moved hole's addresses left the arena: no block is there */
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, p[1], &info), VMEM_ERR_FOREIGN_PTR);
    free_rest(v, q, p);
    vmem_destroy(v);
}

Test(remap, off_gives_memory_back_and_maps_it_again)
{
    vmem_t *v = cut_instance(16 * MiB);
    vmem_destroy(v);
    setenv("VMEM_REMAP", "off", 1);
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, 16 * MiB, 0, 64 * MiB, NULL);
    v = create_or_die(&cfg);
    unsetenv("VMEM_REMAP");
    void *p[4];
    vmem_stats_t s0, s1;
    void *q = cut_then_alloc(v, p, &s0, &s1);
    cr_assert_eq(s1.device_remaps, 0);
    cr_assert_gt(s1.device_region_frees, s0.device_region_frees, "the release path gave back");
    cr_assert(pattern_ok(p[0], 4 * MiB, 1));
    cr_assert(pattern_ok(p[2], 4 * MiB, 3));
    CHECK_VMEM(v, "the release");
    free_rest(v, q, p);
    vmem_destroy(v);
}

Test(remap, a_bad_setting_is_refused)
{
    env_unset_all();
    expect_env_refused("VMEM_REMAP", "sometimes", VMEM_BACKEND_SIM_VMM);
}

/* sim-vmm's growth alignment: what one 100 MiB allocation makes the device
 * arena hold (100 MiB lack a big handle or more, so an aligned growth ends on
 * a big-handle boundary). */
static size_t held_for_100m(void)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, GiB, 0, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *p = vmem_alloc(v, 100 * MiB);
    cr_assert_not_null(p);
    size_t held = stats_of(v).device_held;
    vmem_free(v, p);
    vmem_destroy(v);
    return held;
}

/* VMEM_VMM_GROW_ALIGN (a boolean) and VMEM_VMM_BIG_MIB (a power of two of
 * 2 to 256 granules: 4 to 512 MiB) on sim-vmm: anything else fails the
 * creation instead of meaning on, or the default. */
Test(remap, bad_growth_alignment_settings_are_refused)
{
    static const char *bad_align[] = {"", "2", "maybe", "00", "0 ", "offf"};
    static const char *bad_big[] = {"", "2", "100", "1024", "2048", "0", "64x", "-64", " 64",
                                    "64M"};
    env_unset_all();
    unsetenv("VMEM_VMM_GROW_ALIGN");
    unsetenv("VMEM_VMM_BIG_MIB");
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++)
        expect_env_refused("VMEM_VMM_GROW_ALIGN", bad_align[i], VMEM_BACKEND_SIM_VMM);
    for (size_t i = 0; i < sizeof bad_big / sizeof bad_big[0]; i++)
        expect_env_refused("VMEM_VMM_BIG_MIB", bad_big[i], VMEM_BACKEND_SIM_VMM);
    /* read even with the alignment off */
    setenv("VMEM_VMM_GROW_ALIGN", "0", 1);
    expect_env_refused("VMEM_VMM_BIG_MIB", "100", VMEM_BACKEND_SIM_VMM);
    unsetenv("VMEM_VMM_GROW_ALIGN");
    /* valid values: the default aligns to 64 MiB, a boolean off does not */
    cr_assert_eq(held_for_100m(), 128 * MiB);
    static const char *off[] = {"0", "off", "FALSE", "no"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        setenv("VMEM_VMM_GROW_ALIGN", off[i], 1);
        cr_assert_eq(held_for_100m(), 100 * MiB, "VMEM_VMM_GROW_ALIGN=%s", off[i]);
    }
    setenv("VMEM_VMM_GROW_ALIGN", "on", 1);
    cr_assert_eq(held_for_100m(), 128 * MiB);
    setenv("VMEM_VMM_BIG_MIB", "16", 1);
    cr_assert_eq(held_for_100m(), 112 * MiB);
    setenv("VMEM_VMM_BIG_MIB", "512", 1); /* lacking less than one: no rounding */
    cr_assert_eq(held_for_100m(), 100 * MiB);
    unsetenv("VMEM_VMM_GROW_ALIGN");
    unsetenv("VMEM_VMM_BIG_MIB");
}

Test(remap, not_while_two_streams_allocate)
{
    vmem_t *v = cut_instance(16 * MiB);
    void *s1 = (void *)(uintptr_t)0x1000, *s2 = (void *)(uintptr_t)0x2000;
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = vmem_alloc_stream(v, 4 * MiB, i % 2 ? s2 : s1);
        cr_assert_not_null(p[i]);
        pattern_fill(p[i], 4 * MiB, (uint64_t)i + 1);
    }
    cr_assert_eq(vmem_free_stream(v, p[1], s2), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[3], s2), VMEM_OK);
    void *q = vmem_alloc_stream(v, 8 * MiB, s1);
    cr_assert_not_null(q);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.device_remaps, 0, "another stream's free memory is not moved without a wait");
    cr_assert(pattern_ok(p[0], 4 * MiB, 1));
    cr_assert(pattern_ok(p[2], 4 * MiB, 3));
    CHECK_VMEM(v, "the allocation");
    cr_assert_eq(vmem_free_stream(v, q, s1), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[0], s1), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[2], s1), VMEM_OK);
    vmem_destroy(v);
}

Test(remap, pieces_smaller_than_a_granule_do_not_move)
{
    /* 1 MiB holes between live blocks hold no whole granule: nothing moves,
     * and the allocation is served another way (host fallback here). */
    vmem_t *v = cut_instance(16 * MiB);
    void *p[16];
    for (int i = 0; i < 16; i++) {
        p[i] = vmem_alloc(v, MiB);
        cr_assert_not_null(p[i]);
    }
    for (int i = 0; i < 16; i += 2)
        cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
    void *q = vmem_alloc(v, 2 * MiB);
    cr_assert_not_null(q);
    cr_assert_eq(stats_of(v).device_remaps, 0);
    CHECK_VMEM(v, "the allocation");
    cr_assert_eq(vmem_free(v, q), VMEM_OK);
    for (int i = 1; i < 16; i += 2)
        cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
    vmem_destroy(v);
}

/* Random blocks under a tight limit, each filled with its own pattern:
 * remaps happen, every block keeps its data, the invariants hold after
 * every operation, and held stays under the limit. */
Test(remap, random_work_under_a_limit_keeps_every_block)
{
    vmem_t *v = cut_instance(32 * MiB);
    enum { N = 24 };
    void *p[N] = {0};
    size_t sz[N] = {0};
    uint64_t rng = 12345, ids[N] = {0}, next = 1;
    for (int op = 0; op < 3000; op++) {
        size_t i = rng_range(&rng, 0, N - 1);
        if (p[i]) {
            cr_assert(pattern_ok(p[i], sz[i], ids[i]), "block %zu lost its data at op %d", i, op);
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
            p[i] = NULL;
        } else {
            sz[i] = rng_range(&rng, 1, 6) * MiB / (rng_range(&rng, 0, 1) ? 1 : 3);
            p[i] = vmem_alloc(v, sz[i]);
            cr_assert_not_null(p[i], "op %d: %zu bytes", op, sz[i]);
            ids[i] = next++;
            pattern_fill(p[i], sz[i], ids[i]);
        }
        if (op % 50 == 0)
            CHECK_VMEM(v, "op %d", op);
    }
    vmem_stats_t s = stats_of(v);
    cr_assert_gt(s.device_remaps, 0, "the workload made remaps");
    cr_assert_leq(s.device_peak_held, 32 * MiB);
    cr_log_info("remaps %llu (%zu MiB), region frees %llu, spills %llu",
                (unsigned long long)s.device_remaps, (size_t)(s.device_remapped / MiB),
                (unsigned long long)s.device_region_frees, (unsigned long long)s.spills);
    for (int i = 0; i < N; i++)
        if (p[i]) {
            cr_assert(pattern_ok(p[i], sz[i], ids[i]));
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
        }
    CHECK_VMEM(v, "the end");
    vmem_destroy(v);
}

/* VMEM_SIM_BIG (sim-vmm modelling vmm's 64 MiB handles, here 8 MiB of four
 * granules): eight 4 MiB blocks fill a 32 MiB region, mapped in one piece,
 * so with big handles wherever it covers an aligned 8 MiB.  Blocks 1 and 2 (granules 2-5) and 7 are freed: the
 * 8 MiB hole cuts big handles, and no whole handle in it can move to the
 * tail by a multiple of its size; the arena gives memory back instead
 * (splitting the handles), as on a GPU.  Without big handles the hole
 * moves to the tail and nothing is given back.  sim_big: the value of
 * VMEM_SIM_BIG (NULL: unset); big: whether it makes big handles. */
static void big_case_with(const char *sim_big, int big)
{
    env_unset_all();
    if (sim_big)
        setenv("VMEM_SIM_BIG", sim_big, 1);
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, 32 * MiB, 0, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    unsetenv("VMEM_SIM_BIG");
    void *w = vmem_alloc(v, 32 * MiB); /* one 32 MiB region: its big handles */
    cr_assert_not_null(w);
    cr_assert_eq(vmem_free(v, w), VMEM_OK);
    void *p[8];
    for (int i = 0; i < 8; i++) {
        p[i] = vmem_alloc(v, 4 * MiB);
        cr_assert_not_null(p[i]);
        pattern_fill(p[i], 4 * MiB, (uint64_t)i + 1);
    }
    for (int i = 1; i < 8; i++)
        cr_assert_eq((char *)p[i], (char *)p[0] + (size_t)i * 4 * MiB, "one range in order");
    cr_assert_eq(vmem_free(v, p[1]), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[2]), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[7]), VMEM_OK);
    vmem_stats_t s0 = stats_of(v);
    void *q = vmem_alloc(v, 12 * MiB);
    cr_assert_not_null(q);
    cr_assert_eq(location_of(v, q), VMEM_LOC_DEVICE);
    vmem_stats_t s1 = stats_of(v);
    if (big) {
        /* (a whole handle may still move somewhere else, not next to the
         * tail, as on vmm: that does not serve the request) */
        cr_assert_gt(s1.device_region_frees, s0.device_region_frees, "the release path");
    } else {
        cr_assert_gt(s1.device_remaps, s0.device_remaps, "the hole should move");
        cr_assert_eq(s1.device_region_frees, s0.device_region_frees, "nothing given back");
    }
    cr_assert_leq(s1.device_peak_held, 32 * MiB, "never above the limit");
    pattern_fill(q, 12 * MiB, 99);
    for (int i = 0; i < 7; i++)
        if (i != 1 && i != 2)
            cr_assert(pattern_ok(p[i], 4 * MiB, (uint64_t)i + 1), "block %d lost its data", i);
    cr_assert(pattern_ok(q, 12 * MiB, 99));
    CHECK_VMEM(v, "the allocation");
    vmem_free(v, q);
    for (int i = 0; i < 7; i++)
        if (i != 1 && i != 2)
            vmem_free(v, p[i]);
    vmem_destroy(v);
}

/* Big handles of 8 MiB (four granules), or unset: granules only. */
static void big_case(int big) { big_case_with(big ? "8M" : NULL, big); }

Test(remap, simulated_big_handles_cut_by_a_hole_do_not_move) { big_case(1); }

Test(remap, without_big_handles_the_same_hole_moves) { big_case(0); }

/* VMEM_SIM_BIG: 0 or a power of two above 2 MiB; anything else fails the
 * creation (it used to mean granules only). */
Test(remap, a_bad_simulated_big_handle_size_is_refused)
{
    static const char *bad[] = {"", "x", "2M", "1M", "6M", "3M", "8M junk", "-8M", "8.5M",
                                "0x800000", "99999999999999999999"};
    env_unset_all();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_env_refused("VMEM_SIM_BIG", bad[i], VMEM_BACKEND_SIM_VMM);
    /* valid values create, and 0 is granules only: the hole moves */
    static const char *good[] = {"4M", "8M", "64M", "1G", "1048576K", " 16M "};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("VMEM_SIM_BIG", good[i], 1);
        vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, 16 * MiB, 0, 64 * MiB, NULL);
        vmem_destroy(create_or_die(&cfg));
    }
    big_case_with("0", 0);
}

/* Whole big handles move, by a multiple of their size only: random work
 * under a limit with every block's data checked, big handles on. */
Test(remap, random_work_with_simulated_big_handles_keeps_every_block)
{
    env_unset_all();
    setenv("VMEM_SIM_BIG", "8M", 1);
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, 96 * MiB, 0, 256 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    unsetenv("VMEM_SIM_BIG");
    enum { N = 48 };
    void *p[N] = {0};
    size_t sz[N] = {0};
    unsigned seed = 11;
    for (int i = 0; i < 6000; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % N);
        if (p[k]) {
            cr_assert(pattern_ok(p[k], sz[k], (uint64_t)k + 100), "block %d lost its data", k);
            cr_assert_eq(vmem_free(v, p[k]), VMEM_OK);
            p[k] = NULL;
        } else {
            sz[k] = ((seed >> 16) % 24 + 1) * MiB / 2;
            p[k] = vmem_alloc(v, sz[k]);
            if (p[k])
                pattern_fill(p[k], sz[k], (uint64_t)k + 100);
        }
        if (i % 600 == 599) {
            CHECK_VMEM(v, "op %d", i);
            cr_assert_eq(vmem_step_end(v), VMEM_OK);
        }
    }
    vmem_stats_t s = stats_of(v);
    cr_assert_gt(s.device_remaps, 0, "the work should have moved memory");
    for (int k = 0; k < N; k++)
        if (p[k]) {
            cr_assert(pattern_ok(p[k], sz[k], (uint64_t)k + 100), "block %d lost its data", k);
            vmem_free(v, p[k]);
        }
    vmem_destroy(v);
}
