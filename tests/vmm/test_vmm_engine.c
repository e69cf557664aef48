/* The engine over sim-vmm: page-granular shrink, spill in place, eviction
 * and bring-back at the step boundary.  bfc_check runs after every
 * operation; blocks carry byte patterns that must survive every move. */
#include "common.h"

#include "backend.h"
#include "bfc.h"

static backend_t *b;
static bfc_arena_t a;

#define CHECK()                                                                           \
    do {                                                                                  \
        char why_[256] = "";                                                              \
        cr_assert_eq(bfc_check(&a, why_, sizeof why_), VMEM_OK, "bfc_check: %s", why_);   \
    } while (0)

static void arena_open(int vmm, size_t capacity, size_t limit)
{
    cr_assert_eq(backend_sim_create(capacity, vmm, &b), VMEM_OK);
    if (vmm)
        cr_assert(b->flags & BACKEND_F_HOST_BACKING, "sim-vmm has no host backing here");
    bfc_params_t p = {.min_region = GRANULE, .max_region = GiB, .split_min = 256};
    cr_assert_eq(bfc_init(&a, b, &p, limit), VMEM_OK);
    CHECK();
}

static void arena_close(void)
{
    bfc_fini(&a);
    backend_destroy(b);
    b = NULL;
}

static void *alloc_ok(size_t size)
{
    void *p = bfc_alloc(&a, size, 0);
    cr_assert_not_null(p, "bfc_alloc(%zu) failed (reason %d)", size, a.last_fail);
    CHECK();
    return p;
}

static void free_ok(void *p)
{
    cr_assert_eq(bfc_free(&a, p, 0, NULL), VMEM_OK);
    CHECK();
}

static size_t host_bytes(const void *p, size_t size) { return bfc_host_bytes(&a, p, size); }

/* ------------------------------------------------------------------------ */

Test(vmm_backend, move_copies_data_and_keeps_address)
{
    cr_assert_eq(backend_sim_create(256 * MiB, 1, &b), VMEM_OK);
    void *p = NULL;
    size_t moved = 0;
    cr_assert_eq(backend_region_alloc(b, 3 * GRANULE, NULL, &p), VMEM_OK);
    char *c = p;
    pattern_fill(c, 3 * GRANULE, 7);
    cr_assert_eq(backend_backing(b, c + GRANULE), BACKEND_BACKING_DEVICE);
    cr_assert_eq(backend_region_move(b, c + GRANULE, GRANULE, 1, &moved), VMEM_OK);
    cr_assert_eq(backend_backing(b, c), BACKEND_BACKING_DEVICE);
    cr_assert_eq(backend_backing(b, c + GRANULE), BACKEND_BACKING_HOST);
    cr_assert(pattern_ok(c, 3 * GRANULE, 7), "data lost moving to host");
    /* Moving what is already there is refused and changes nothing. */
    cr_assert_eq(backend_region_move(b, c, 2 * GRANULE, 1, &moved), VMEM_ERR_INVALID);
    cr_assert_eq(moved, 0);
    cr_assert_eq(backend_backing(b, c), BACKEND_BACKING_DEVICE);
    pattern_fill(c + GRANULE, GRANULE, 8); /* written while on host */
    cr_assert_eq(backend_region_move(b, c + GRANULE, GRANULE, 0, &moved), VMEM_OK);
    cr_assert_eq(backend_backing(b, c + GRANULE), BACKEND_BACKING_DEVICE);
    cr_assert(pattern_ok(c + GRANULE, GRANULE, 8), "data lost moving back");
    cr_assert(pattern_ok(c, GRANULE, 7));
    backend_region_free(b, p, 3 * GRANULE);
    cr_assert_eq(backend_backing(b, c), BACKEND_BACKING_NONE);
    /* Host-backed regions read as zero when new and are given back the same way. */
    cr_assert_eq(backend_region_alloc_host(b, 2 * GRANULE, p, &p), VMEM_OK);
    cr_assert_eq(p, (void *)c, "hint not honoured");
    cr_assert_eq(backend_backing(b, p), BACKEND_BACKING_HOST);
    cr_assert_eq(((uint64_t *)p)[0], 0u, "fresh host granule not zeroed");
    backend_region_free(b, p, 2 * GRANULE);
    cr_assert_eq(backend_backing(b, p), BACKEND_BACKING_NONE);
    backend_destroy(b);
}

Test(vmm_backend, device_capacity_bounds_moves_back)
{
    cr_assert_eq(backend_sim_create(4 * MiB, 1, &b), VMEM_OK);
    void *d = NULL, *h = NULL;
    size_t moved = 0;
    cr_assert_eq(backend_region_alloc(b, 4 * MiB, NULL, &d), VMEM_OK);
    cr_assert_eq(backend_region_alloc_host(b, GRANULE, NULL, &h), VMEM_OK);
    cr_assert_eq(backend_region_move(b, h, GRANULE, 0, &moved), VMEM_ERR_NOMEM, "device is full");
    cr_assert_eq(backend_backing(b, h), BACKEND_BACKING_HOST);
    backend_region_free(b, d, 4 * MiB);
    cr_assert_eq(backend_region_move(b, h, GRANULE, 0, &moved), VMEM_OK);
    backend_region_free(b, h, GRANULE);
    backend_destroy(b);
}

/* ------------------------------------------------------------------------ */
/* Page-granular shrink                                                     */
/* ------------------------------------------------------------------------ */

/* 64 blocks of 4 MiB, every other one freed: half the granules are free,
 * scattered through partly used regions. */
static void checkerboard(void **blk)
{
    for (int i = 0; i < 64; i++) {
        blk[i] = alloc_ok(4 * MiB);
        pattern_fill(blk[i], 4 * MiB, (uint64_t)i);
    }
    for (int i = 0; i < 64; i += 2) {
        free_ok(blk[i]);
        blk[i] = NULL;
    }
}

Test(vmm_shrink, frees_granules_inside_partly_used_regions)
{
    arena_open(1, GiB, GiB);
    void *blk[64];
    checkerboard(blk);
    cr_assert_geq(a.held, 256 * MiB);
    cr_assert_eq(bfc_set_limit(&a, 128 * MiB), VMEM_OK, "shrink to the live bytes must apply at once");
    CHECK();
    cr_assert_eq(a.held, 128 * MiB);
    cr_assert_eq(a.pending, 0);
    for (int i = 1; i < 64; i += 2)
        cr_assert(pattern_ok(blk[i], 4 * MiB, (uint64_t)i), "block %d damaged by the shrink", i);
    /* Nothing moved: every live block is still on the device. */
    cr_assert_eq(a.held_host, 0);
    for (int i = 1; i < 64; i += 2)
        free_ok(blk[i]);
    arena_close();
}

Test(vmm_shrink, separate_regions_cannot_do_it)
{
    /* The same pattern on sim (cudaMalloc-like regions): the shrink waits. */
    arena_open(0, GiB, GiB);
    void *blk[64];
    checkerboard(blk);
    cr_assert_eq(bfc_set_limit(&a, 128 * MiB), VMEM_PENDING);
    CHECK();
    for (int i = 1; i < 64; i += 2)
        free_ok(blk[i]);
    cr_assert_eq(a.pending, 0);
    arena_close();
}

Test(vmm_shrink, to_live_granules_with_odd_sizes)
{
    arena_open(1, GiB, GiB);
    /* 3 MiB blocks: granules are shared between neighbours. */
    void *blk[40];
    for (int i = 0; i < 40; i++)
        blk[i] = alloc_ok(3 * MiB);
    for (int i = 0; i < 40; i++) {
        if (i % 4 != 0) {
            free_ok(blk[i]);
            blk[i] = NULL;
        } else {
            pattern_fill(blk[i], 3 * MiB, (uint64_t)i);
        }
    }
    /* Granules touched by a live block: each 3 MiB block touches 2 or 3. */
    size_t touched = 0;
    uintptr_t last = 0;
    for (int i = 0; i < 40; i += 4) {
        uintptr_t lo = (uintptr_t)blk[i] / GRANULE * GRANULE;
        uintptr_t hi = ((uintptr_t)blk[i] + 3 * MiB + GRANULE - 1) / GRANULE * GRANULE;
        if (lo < last)
            lo = last;
        touched += hi - lo;
        last = hi;
    }
    cr_assert_eq(bfc_set_limit(&a, touched), VMEM_OK);
    CHECK();
    cr_assert_eq(a.held, touched);
    cr_assert_eq(bfc_set_limit(&a, touched - GRANULE), VMEM_PENDING, "below the live granules");
    for (int i = 0; i < 40; i += 4)
        cr_assert(pattern_ok(blk[i], 3 * MiB, (uint64_t)i));
    arena_close();
}

/* ------------------------------------------------------------------------ */
/* Spill in place                                                           */
/* ------------------------------------------------------------------------ */

Test(vmm_spill, lies_wholly_on_host_and_counts_as_host)
{
    arena_open(1, GiB, 16 * MiB);
    void *d = alloc_ok(12 * MiB);
    cr_assert_null(bfc_alloc(&a, 10 * MiB, 0), "10 MiB more cannot fit under 16 MiB");
    CHECK();
    size_t held = a.held;
    void *s = bfc_alloc_spill(&a, 10 * MiB, 0, GiB);
    cr_assert_not_null(s, "spill failed (reason %d)", a.last_fail);
    CHECK();
    cr_assert_eq(a.held, held, "spilling must not take device memory");
    cr_assert_leq(a.held, a.limit);
    cr_assert_eq(a.held_host, 10 * MiB);
    cr_assert_eq(host_bytes(s, 10 * MiB), 10 * MiB, "a spilled block lies wholly on host");
    cr_assert_eq(a.host_in_use, 10 * MiB);
    cr_assert_eq(host_bytes(d, 12 * MiB), 0, "the device block moved");
    cr_assert(bfc_contains(&a, s), "spilled block is not in the device arena's range");
    pattern_fill(s, 10 * MiB, 1);
    cr_assert(pattern_ok(s, 10 * MiB, 1));
    /* Free device memory is not taken by spills, free host memory not by
     * ordinary allocations. */
    void *small = alloc_ok(MiB);
    cr_assert_eq(host_bytes(small, MiB), 0);
    free_ok(small);
    held = a.held;
    /* Freed: the host memory stays mapped for the next spill... */
    free_ok(s);
    cr_assert_eq(a.held_host, 10 * MiB);
    cr_assert_eq(a.host_in_use, 0);
    cr_assert_eq(a.held, held);
    uint64_t requests = b->requests;
    void *s2 = bfc_alloc_spill(&a, 6 * MiB, 0, 0);
    cr_assert_not_null(s2, "kept host memory must serve a spill with no room for more");
    CHECK();
    cr_assert_eq(b->requests, requests, "no new host memory should be needed");
    cr_assert_eq(host_bytes(s2, 6 * MiB), 6 * MiB);
    free_ok(s2);
    /* ...until it is given back. */
    cr_assert_eq(bfc_release_host(&a), 10 * MiB);
    CHECK();
    cr_assert_eq(a.held_host, 0);
    cr_assert_eq(a.held, held);
    free_ok(d);
    arena_close();
}

Test(vmm_spill, kept_host_memory_goes_when_over_the_host_limit)
{
    arena_open(1, GiB, 8 * MiB);
    void *d = alloc_ok(8 * MiB);
    void *s1 = bfc_alloc_spill(&a, 8 * MiB, 0, GiB);
    void *s2 = bfc_alloc_spill(&a, 8 * MiB, 0, GiB);
    cr_assert(s1 && s2);
    a.host_limit = 8 * MiB; /* lowered while both are live */
    free_ok(s1);
    cr_assert_eq(a.held_host, 8 * MiB, "free host memory above the host limit must go");
    free_ok(s2);
    cr_assert_eq(a.held_host, 8 * MiB, "at the host limit: kept");
    free_ok(d);
    arena_close();
}

/* A free chunk cut where its backing changes (chunk_settle_host) keeps its
 * free age in every piece: VMEM_TRIM_AGE reads it (a piece at age 0 would
 * look freed long ago and be trimmed first). */
Test(vmm_spill, settled_pieces_keep_their_free_age)
{
    arena_open(1, GiB, 16 * MiB);
    void *d = alloc_ok(12 * MiB);
    /* s1 ends 1 MiB into its last granule; that free remainder merges with
     * s2's memory once s2 is freed: one free chunk from a granule s1 shares
     * into s2's granules. */
    void *s1 = bfc_alloc_spill(&a, 9 * MiB, 0, GiB);
    void *s2 = bfc_alloc_spill(&a, 10 * MiB, 0, GiB);
    cr_assert(s1 && s2);
    free_ok(s2);
    free_ok(d);
    uint64_t freed = a.seq;
    /* s1 goes back to the device: its last granule changes backing under
     * the free chunk, which is cut there. */
    bfc_moves_t mv;
    cr_assert_eq(bfc_rebalance(&a, GiB, &mv), VMEM_OK);
    CHECK();
    cr_assert_eq(host_bytes(s1, 9 * MiB), 0, "s1 moved back");
    for (const bfc_region_t *r = a.regions; r; r = r->next)
        for (const bfc_chunk_t *c = r->first; c; c = c->next)
            if (!c->in_use && c->addr >= (uintptr_t)s1 && c->addr < (uintptr_t)s2 + 10 * MiB)
                cr_assert_eq(c->seq, freed, "free piece at +%zu MiB: seq %llu, freed at %llu",
                             (size_t)(c->addr - (uintptr_t)s1) >> 20,
                             (unsigned long long)c->seq, (unsigned long long)freed);
    free_ok(s1);
    arena_close();
}

Test(vmm_spill, host_room_is_a_cap)
{
    arena_open(1, GiB, 8 * MiB);
    void *d = alloc_ok(8 * MiB);
    cr_assert_null(bfc_alloc_spill(&a, 8 * MiB, 0, 6 * MiB));
    cr_assert_eq(a.last_fail, BFC_FAIL_LIMIT);
    CHECK();
    cr_assert_eq(a.held_host, 0);
    void *s = bfc_alloc_spill(&a, 8 * MiB, 0, 8 * MiB);
    cr_assert_not_null(s);
    CHECK();
    cr_assert_eq(a.held_host, 8 * MiB);
    free_ok(s);
    free_ok(d);
    arena_close();
}

Test(vmm_spill, not_offered_without_host_backing)
{
    arena_open(0, GiB, 8 * MiB);
    cr_assert_null(bfc_alloc_spill(&a, MiB, 0, GiB));
    cr_assert_eq(a.last_fail, BFC_FAIL_BACKEND);
    CHECK();
    bfc_moves_t m;
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    cr_assert_eq(m.to_host + m.to_device + m.host_released, 0);
    arena_close();
}

Test(vmm_spill, checker_sees_a_broken_host_map)
{
    arena_open(1, GiB, 4 * MiB);
    void *d = alloc_ok(4 * MiB);
    void *s = bfc_alloc_spill(&a, 4 * MiB, 0, GiB);
    cr_assert_not_null(s);
    CHECK();
    char why[256];
    size_t gi = ((uintptr_t)d - b->range_base) / GRANULE;
    a.hostmap[gi] = 1; /* a device granule marked host */
    cr_assert_eq(bfc_check(&a, why, sizeof why), VMEM_ERR_INVALID);
    a.hostmap[gi] = 0;
    CHECK();
    a.held_host += GRANULE;
    cr_assert_eq(bfc_check(&a, why, sizeof why), VMEM_ERR_INVALID);
    a.held_host -= GRANULE;
    size_t far = a.hostmap_len - 1; /* a granule outside every region */
    a.hostmap[far] = 1;
    cr_assert_eq(bfc_check(&a, why, sizeof why), VMEM_ERR_INVALID);
    a.hostmap[far] = 0;
    CHECK();
    free_ok(s);
    free_ok(d);
    arena_close();
}

/* ------------------------------------------------------------------------ */
/* The step boundary: bring back, evict                                     */
/* ------------------------------------------------------------------------ */

Test(vmm_rebalance, brings_back_everything_when_the_limit_rises)
{
    arena_open(1, GiB, 16 * MiB);
    void *d = alloc_ok(16 * MiB);
    pattern_fill(d, 16 * MiB, 1);
    void *s[3];
    for (int i = 0; i < 3; i++) {
        s[i] = bfc_alloc_spill(&a, 6 * MiB, 0, GiB);
        cr_assert_not_null(s[i]);
        CHECK();
        pattern_fill(s[i], 6 * MiB, (uint64_t)i + 10);
    }
    size_t host = a.held_host;
    cr_assert_geq(host, 18 * MiB);
    bfc_moves_t m;
    /* Limit unchanged: nothing can come back. */
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(m.to_device, 0);
    cr_assert_eq(a.held_host, host);
    cr_assert_eq(bfc_set_limit(&a, 64 * MiB), VMEM_OK);
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(m.to_device, host);
    cr_assert_eq(a.held_host, 0);
    cr_assert_leq(a.held, a.limit);
    cr_assert(pattern_ok(d, 16 * MiB, 1));
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(host_bytes(s[i], 6 * MiB), 0);
        cr_assert(pattern_ok(s[i], 6 * MiB, (uint64_t)i + 10), "block %d lost data coming back", i);
        free_ok(s[i]);
    }
    free_ok(d);
    arena_close();
}

Test(vmm_rebalance, freed_device_memory_makes_room)
{
    arena_open(1, GiB, 16 * MiB);
    void *d1 = alloc_ok(8 * MiB), *d2 = alloc_ok(8 * MiB);
    void *s = bfc_alloc_spill(&a, 8 * MiB, 0, GiB);
    cr_assert_not_null(s);
    pattern_fill(s, 8 * MiB, 3);
    free_ok(d1); /* device memory free again, limit unchanged */
    bfc_moves_t m;
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(a.held_host, 0);
    cr_assert_eq(m.to_device, 8 * MiB);
    cr_assert_leq(a.held, 16 * MiB);
    cr_assert(pattern_ok(s, 8 * MiB, 3));
    free_ok(s);
    free_ok(d2);
    arena_close();
}

Test(vmm_rebalance, shrink_below_live_evicts_oldest_first)
{
    arena_open(1, GiB, 64 * MiB);
    void *blk[4];
    for (int i = 0; i < 4; i++) {
        blk[i] = alloc_ok(16 * MiB);
        pattern_fill(blk[i], 16 * MiB, (uint64_t)i);
    }
    cr_assert_eq(bfc_set_limit(&a, 32 * MiB), VMEM_PENDING);
    CHECK();
    bfc_moves_t m;
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(a.pending, 0, "eviction must complete the shrink");
    cr_assert_leq(a.held, 32 * MiB);
    cr_assert_eq(m.to_host, 32 * MiB);
    cr_assert_eq(host_bytes(blk[0], 16 * MiB), 16 * MiB, "oldest block not evicted");
    cr_assert_eq(host_bytes(blk[1], 16 * MiB), 16 * MiB);
    cr_assert_eq(host_bytes(blk[2], 16 * MiB), 0, "a young block was evicted");
    cr_assert_eq(host_bytes(blk[3], 16 * MiB), 0);
    for (int i = 0; i < 4; i++)
        cr_assert(pattern_ok(blk[i], 16 * MiB, (uint64_t)i), "block %d lost data", i);
    /* Room for one: the oldest comes back first. */
    cr_assert_eq(bfc_set_limit(&a, 48 * MiB), VMEM_OK);
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(m.to_device, 16 * MiB);
    cr_assert_eq(host_bytes(blk[0], 16 * MiB), 0, "oldest block should come back first");
    cr_assert_eq(host_bytes(blk[1], 16 * MiB), 16 * MiB);
    /* A freed evicted block leaves free host memory, kept while the device
     * is short of room and given back at the next step when it is not. */
    free_ok(blk[1]);
    cr_assert_eq(a.host_in_use, 0);
    cr_assert_eq(a.held_host, 16 * MiB);
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(a.held_host, 16 * MiB, "48 + 16 MiB > 48 MiB: kept for spills");
    cr_assert_eq(bfc_set_limit(&a, 64 * MiB), VMEM_OK);
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(a.held_host, 0, "everything fits: no host memory may stay");
    cr_assert_eq(m.host_released, 16 * MiB);
    for (int i = 0; i < 4; i++)
        if (i != 1)
            cr_assert(pattern_ok(blk[i], 16 * MiB, (uint64_t)i));
    arena_close();
}

Test(vmm_rebalance, eviction_stops_at_host_room)
{
    arena_open(1, GiB, 64 * MiB);
    void *blk[4];
    for (int i = 0; i < 4; i++)
        blk[i] = alloc_ok(16 * MiB);
    cr_assert_eq(bfc_set_limit(&a, 16 * MiB), VMEM_PENDING);
    bfc_moves_t m;
    cr_assert_eq(bfc_rebalance(&a, 20 * MiB, &m), VMEM_PENDING);
    CHECK();
    cr_assert_eq(m.to_host, 20 * MiB);
    cr_assert_eq(a.pending, 1, "still above the limit: the shrink stays pending");
    for (int i = 0; i < 4; i++)
        free_ok(blk[i]);
    cr_assert_eq(a.pending, 0);
    cr_assert_eq(a.host_in_use, 0);
    bfc_release_host(&a);
    CHECK();
    cr_assert_eq(a.held_host, 0);
    arena_close();
}

Test(vmm_rebalance, a_failed_move_changes_nothing)
{
    arena_open(1, GiB, 8 * MiB);
    void *d = alloc_ok(8 * MiB);
    void *s = bfc_alloc_spill(&a, 8 * MiB, 0, GiB);
    cr_assert_not_null(s);
    pattern_fill(s, 8 * MiB, 5);
    cr_assert_eq(bfc_set_limit(&a, 32 * MiB), VMEM_OK);
    backend_set_faults(b, 1, 0, 0); /* the next backend request fails */
    bfc_moves_t m;
    cr_assert_neq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(a.held_host, 8 * MiB);
    cr_assert(pattern_ok(s, 8 * MiB, 5));
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(a.held_host, 0);
    cr_assert(pattern_ok(s, 8 * MiB, 5));
    free_ok(s);
    free_ok(d);
    arena_close();
}

/* A backend whose moves stop half way (as a real one may when the device
 * runs out of memory part way through). */
static const backend_host_ops_t *real_host_ops;

static vmem_status_t half_move(backend_t *bk, void *base, size_t size, int to_host,
                               size_t *moved)
{
    size_t half = size / 2 / GRANULE * GRANULE;
    *moved = 0;
    if (half == 0)
        return VMEM_ERR_NOMEM;
    vmem_status_t st = real_host_ops->region_move(bk, base, half, to_host, moved);
    return st == VMEM_OK ? VMEM_ERR_NOMEM : st;
}

Test(vmm_rebalance, a_move_failing_half_way_keeps_what_moved)
{
    arena_open(1, GiB, 8 * MiB);
    void *d = alloc_ok(8 * MiB);
    void *s = bfc_alloc_spill(&a, 8 * MiB, 0, GiB);
    cr_assert_not_null(s);
    pattern_fill(s, 8 * MiB, 9);
    cr_assert_eq(bfc_set_limit(&a, 64 * MiB), VMEM_OK);
    static backend_host_ops_t ops;
    real_host_ops = b->host_ops;
    ops = *real_host_ops;
    ops.region_move = half_move;
    b->host_ops = &ops;
    bfc_moves_t m;
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_ERR_NOMEM);
    CHECK(); /* the map agrees with the backend granule by granule */
    cr_assert_eq(m.to_device, 4 * MiB);
    cr_assert_eq(a.held_host, 4 * MiB);
    cr_assert_eq(host_bytes(s, 8 * MiB), 4 * MiB);
    cr_assert(pattern_ok(s, 8 * MiB, 9));
    b->host_ops = real_host_ops;
    cr_assert_eq(bfc_rebalance(&a, GiB, &m), VMEM_OK);
    CHECK();
    cr_assert_eq(a.held_host, 0);
    cr_assert(pattern_ok(s, 8 * MiB, 9));
    free_ok(s);
    free_ok(d);
    arena_close();
}

/* ------------------------------------------------------------------------ */
/* Random operations                                                        */
/* ------------------------------------------------------------------------ */

typedef struct blk {
    void *p;
    size_t size;
    uint64_t seed;
} blk_t;

Test(vmm_random, every_move_keeps_data_and_invariants)
{
    enum { N = 256, OPS = 6000 };
    arena_open(1, 2 * GiB, 64 * MiB);
    blk_t live[N] = {{0}};
    uint64_t rng = 12345;
    size_t host_limit = 256 * MiB;
    size_t spilled = 0, moved_back = 0, evicted = 0;
    for (int op = 0; op < OPS; op++) {
        unsigned r = (unsigned)(rng_next(&rng) % 100);
        blk_t *x = &live[rng_next(&rng) % N];
        if (r < 55) {
            if (x->p)
                continue;
            /* log-uniform 256 B .. 8 MiB */
            size_t size = (size_t)256 << (rng_next(&rng) % 16);
            size += rng_next(&rng) % size;
            void *p = bfc_alloc(&a, size, 0);
            if (!p) {
                p = bfc_alloc_spill(&a, size, 0, host_limit - a.held_host);
                spilled += p != NULL;
            }
            CHECK();
            if (!p)
                continue;
            *x = (blk_t){p, size, rng_next(&rng)};
            pattern_fill(p, size, x->seed);
        } else if (r < 93) {
            if (!x->p)
                continue;
            cr_assert(pattern_ok(x->p, x->size, x->seed), "op %d: block damaged", op);
            free_ok(x->p);
            x->p = NULL;
        } else if (r < 97) {
            size_t limit = (size_t)(8 + rng_next(&rng) % 121) * MiB;
            bfc_set_limit(&a, limit);
            CHECK();
        } else {
            bfc_moves_t m;
            vmem_status_t st = bfc_rebalance(&a, host_limit - a.held_host, &m);
            cr_assert(st == VMEM_OK || st == VMEM_PENDING, "op %d: rebalance %d", op, st);
            CHECK();
            moved_back += m.to_device;
            evicted += m.to_host;
            if (st == VMEM_OK)
                cr_assert_leq(a.held, a.limit, "op %d: over the limit after the step", op);
            for (int i = 0; i < N; i++)
                if (live[i].p)
                    cr_assert(pattern_ok(live[i].p, live[i].size, live[i].seed),
                              "op %d: block %d damaged by a move", op, i);
        }
    }
    /* The run must have exercised what it is about. */
    cr_assert_gt(spilled, 0);
    cr_assert_gt(moved_back, 0);
    cr_assert_gt(evicted, 0);
    for (int i = 0; i < N; i++)
        if (live[i].p) {
            cr_assert(pattern_ok(live[i].p, live[i].size, live[i].seed));
            free_ok(live[i].p);
        }
    cr_assert_eq(a.host_in_use, 0);
    bfc_release_host(&a);
    CHECK();
    cr_assert_eq(a.held_host, 0);
    bfc_release(&a, 0);
    CHECK();
    cr_assert_eq(a.held + a.held_host, 0, "nothing may be held once all is freed");
    arena_close();
}
