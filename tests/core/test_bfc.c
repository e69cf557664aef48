/*
 * Engine unit tests: the BFC arena (src/bfc.h) directly over the simulated
 * backends.  bfc_check runs after every operation (the a_* helpers).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "bfc.h"
#include "common.h"

/* ------------------------------------------------------------------------ */
/* Fixture and checked operations                                           */
/* ------------------------------------------------------------------------ */

#define CHECK_ARENA(a, ...)                                                                    \
    do {                                                                                       \
        char why_[256] = "";                                                                   \
        if (bfc_check((a), why_, sizeof why_) != VMEM_OK)                                      \
            cr_assert_fail("bfc_check: %s (after %s)", why_, __VA_ARGS__);                     \
    } while (0)

typedef struct arena_fixture {
    backend_t *backend;
    bfc_arena_t arena;
} arena_fixture_t;

static arena_fixture_t fx;

/* An arena over sim (vmm_style 0) or sim-vmm (1).  Zero params: 2 MiB regions
 * growing to 64 MiB, split remainders of any size. */
static bfc_arena_t *arena_open(int vmm_style, size_t limit, const bfc_params_t *params)
{
    bfc_params_t p = {.min_region = 2 * MiB, .max_region = 64 * MiB, .split_min = 256};
    if (params)
        p = *params;
    cr_assert_eq(backend_sim_create(4 * GiB, vmm_style, &fx.backend), VMEM_OK);
    /* Region sizes exactly as the growth policy asks (the tests below count
     * them); the 64 MiB alignment of sim-vmm has tests of its own. */
    fx.backend->grow_align = 0;
    cr_assert_eq(bfc_init(&fx.arena, fx.backend, &p, limit), VMEM_OK);
    CHECK_ARENA(&fx.arena, "bfc_init");
    return &fx.arena;
}

static void arena_close(void)
{
    if (fx.backend) {
        bfc_fini(&fx.arena);
        backend_destroy(fx.backend);
        fx.backend = NULL;
    }
}

static void *a_alloc(bfc_arena_t *a, size_t size, uintptr_t tag)
{
    void *p = bfc_alloc(a, size, tag);
    CHECK_ARENA(a, "bfc_alloc");
    return p;
}

static void *a_alloc_ok(bfc_arena_t *a, size_t size, uintptr_t tag)
{
    void *p = a_alloc(a, size, tag);
    cr_assert_not_null(p, "bfc_alloc(%zu, tag %lu) failed (reason %d)", size, (unsigned long)tag,
                       a->last_fail);
    cr_assert_eq((uintptr_t)p % BFC_ALIGN, 0, "block %p not 256-aligned", p);
    return p;
}

static void a_free(bfc_arena_t *a, void *p, uintptr_t tag)
{
    size_t size = 0;
    cr_assert_eq(bfc_free(a, p, tag, &size), VMEM_OK, "bfc_free(%p)", p);
    cr_assert_gt(size, 0);
    CHECK_ARENA(a, "bfc_free");
}

static void a_release(bfc_arena_t *a, size_t target)
{
    bfc_release(a, target);
    CHECK_ARENA(a, "bfc_release");
}

static vmem_status_t a_set_limit(bfc_arena_t *a, size_t limit)
{
    vmem_status_t st = bfc_set_limit(a, limit);
    CHECK_ARENA(a, "bfc_set_limit");
    return st;
}

/* The chunk (free or in use) that starts at p, or NULL. */
static const bfc_chunk_t *chunk_at(const bfc_arena_t *a, const void *p)
{
    for (const bfc_region_t *r = a->regions; r; r = r->next)
        for (const bfc_chunk_t *c = r->first; c; c = c->next)
            if (c->addr == (uintptr_t)p)
                return c;
    return NULL;
}

static size_t region_count(const bfc_arena_t *a)
{
    size_t n = 0;
    for (const bfc_region_t *r = a->regions; r; r = r->next)
        n++;
    return n;
}

TestSuite(bfc, .fini = arena_close, .timeout = 30);

/* ------------------------------------------------------------------------ */
/* Sizes and bins                                                           */
/* ------------------------------------------------------------------------ */

Test(bfc, round_to_256)
{
    cr_assert_eq(bfc_round(1), 256);
    cr_assert_eq(bfc_round(255), 256);
    cr_assert_eq(bfc_round(256), 256);
    cr_assert_eq(bfc_round(257), 512);
    cr_assert_eq(bfc_round(1000), 1024);
    cr_assert_eq(bfc_round(3 * MiB + 1), 3 * MiB + 256);
    cr_assert_eq(bfc_round(0), 0, "size 0 must be rejected");
    cr_assert_eq(bfc_round(SIZE_MAX), 0, "rounding SIZE_MAX overflows");
    cr_assert_eq(bfc_round(SIZE_MAX - 100), 0, "rounding SIZE_MAX-100 overflows");
    cr_assert_eq(bfc_round(SIZE_MAX - 254), 0);
    cr_assert_eq(bfc_round(SIZE_MAX - 255), SIZE_MAX - 255, "largest roundable size");
    for (size_t s = 1; s < 8192; s += 37) {
        size_t r = bfc_round(s);
        cr_assert(r >= s && r - s < 256 && r % 256 == 0, "bfc_round(%zu) = %zu", s, r);
    }
}

Test(bfc, bin_index_monotonic)
{
    unsigned prev = 0;
    for (size_t s = 256; s <= 64 * MiB; s += 256) {
        unsigned b = bfc_bin_index(s);
        cr_assert_geq(b, prev, "bin(%zu) = %u < bin(%zu) = %u", s, b, s - 256, prev);
        cr_assert_lt(b, BFC_NBINS);
        prev = b;
    }
    /* Large sizes, up to 2^63 (what the bins cover, bfc.h). */
    prev = bfc_bin_index(64 * MiB);
    for (unsigned sh = 27; sh < 63; sh++) {
        size_t lo = (size_t)1 << sh;
        size_t mid = lo + (lo >> 1);
        size_t hi = lo + (lo - 256);
        unsigned bl = bfc_bin_index(lo), bm = bfc_bin_index(mid), bh = bfc_bin_index(hi);
        cr_assert(prev <= bl && bl < bm && bm <= bh && bh < BFC_NBINS,
                  "bins of 2^%u: %u %u %u after %u", sh, bl, bm, bh, prev);
        prev = bh;
    }
    /* Small sizes get exact bins. */
    for (size_t s = 256; s < 16 * 256; s += 256)
        cr_assert_lt(bfc_bin_index(s), bfc_bin_index(s + 256));
}

/* ------------------------------------------------------------------------ */
/* Best fit, split                                                          */
/* ------------------------------------------------------------------------ */

Test(bfc, best_fit_chosen)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    /* Free holes of 4, 8, 16 and 12 KiB, each fenced by live 1 KiB blocks. */
    size_t hole[] = {4 * KiB, 8 * KiB, 16 * KiB, 12 * KiB};
    void *h[4], *fence[5];
    fence[0] = a_alloc_ok(a, KiB, 0);
    for (int i = 0; i < 4; i++) {
        h[i] = a_alloc_ok(a, hole[i], 0);
        fence[i + 1] = a_alloc_ok(a, KiB, 0);
    }
    cr_assert_eq(a->nregions, 1, "all in the first region");
    for (int i = 0; i < 4; i++)
        a_free(a, h[i], 0);
    /* Each request takes the smallest hole that holds it. */
    void *p = a_alloc_ok(a, 10 * KiB, 0);
    cr_assert_eq(p, h[3], "10 KiB: expected the 12 KiB hole %p, got %p", h[3], p);
    p = a_alloc_ok(a, 5 * KiB, 0);
    cr_assert_eq(p, h[1], "5 KiB: expected the 8 KiB hole %p, got %p", h[1], p);
    p = a_alloc_ok(a, 4 * KiB, 0);
    cr_assert_eq(p, h[0], "4 KiB: expected the exact 4 KiB hole %p, got %p", h[0], p);
    p = a_alloc_ok(a, 16 * KiB, 0);
    cr_assert_eq(p, h[2], "16 KiB: expected the exact 16 KiB hole %p, got %p", h[2], p);
    /* Nothing left among the holes: 2 KiB comes from the remainder of the
     * 12 KiB hole (10 KiB used), the smallest free chunk that fits. */
    p = a_alloc_ok(a, 2 * KiB, 0);
    cr_assert_eq((uintptr_t)p, (uintptr_t)h[3] + 10 * KiB);
    (void)fence;
}

Test(bfc, best_fit_within_one_bin)
{
    /* 65 KiB and 67 KiB share a bin (64..68 KiB); the search must take the
     * smaller whatever order they were freed in.  Both insertion orders. */
    size_t first[2] = {65 * KiB, 67 * KiB};
    for (int order = 0; order < 2; order++) {
        bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
        size_t s0 = first[order], s1 = first[1 - order];
        cr_assert_eq(bfc_bin_index(s0), bfc_bin_index(s1), "setup: one bin");
        void *h0 = a_alloc_ok(a, s0, 0);
        a_alloc_ok(a, KiB, 0);
        void *h1 = a_alloc_ok(a, s1, 0);
        a_alloc_ok(a, KiB, 0);
        a_free(a, h0, 0);
        a_free(a, h1, 0);
        cr_assert(chunk_at(a, h0)->size == s0 && chunk_at(a, h1)->size == s1,
                  "setup: two fenced holes");
        void *small = s0 < s1 ? h0 : h1;
        void *p = a_alloc_ok(a, 64 * KiB + 512, 0);
        cr_assert_eq(p, small, "order %d: expected the 65 KiB hole %p, got %p", order, small, p);
        void *q = a_alloc_ok(a, 64 * KiB + 512, 0);
        cr_assert_eq(q, s0 < s1 ? h1 : h0, "order %d: then the 67 KiB hole", order);
        arena_close();
    }
}

/* Among free chunks of the same size, the lowest address goes first
 * (address-ordered best fit), whatever order they were freed in: it was the
 * last freed, and on the new jobs' traces (docs/benchmarks.md, round 7)
 * packing towards the bottom held up to 1.7 % less. */
Test(bfc, equal_sizes_lowest_address_first)
{
    for (int order = 0; order < 2; order++) {
        bfc_arena_t *a = arena_open(order, 64 * MiB, NULL);
        void *h[4];
        for (int i = 0; i < 4; i++) {
            h[i] = a_alloc_ok(a, 32 * KiB, 0);
            a_alloc_ok(a, KiB, 0); /* fence */
        }
        /* freed high to low, then low to high */
        for (int i = 0; i < 4; i++)
            a_free(a, h[order ? i : 3 - i], 0);
        for (int i = 0; i < 4; i++) {
            void *p = a_alloc_ok(a, 32 * KiB, 0);
            cr_assert_eq(p, h[i], "order %d: request %d took %p, expected the lowest %p", order,
                         i, p, h[i]);
        }
        arena_close();
    }
}

/* Many equal-size holes freed in random order: the bin gets a treap (an
 * insert walked past BFC_TREAP_WALK chunks), kept equal to the list in
 * order (CHECK_ARENA after every free), and best fit still takes the lowest
 * address first; the treap goes when the bin empties.  (With the list
 * alone each such free walked the bin: 17 us a free at 10 000 holes.) */
Test(bfc, many_holes_freed_in_random_order)
{
    enum { N = 600 };
    static void *h[N], *fence[N];
    bfc_arena_t *a = arena_open(1, 64 * MiB, NULL);
    for (int i = 0; i < N; i++) {
        h[i] = a_alloc_ok(a, KiB, 0);
        fence[i] = a_alloc_ok(a, 512, 0);
    }
    int order[N];
    for (int i = 0; i < N; i++)
        order[i] = i;
    uint64_t seed = 7;
    for (int i = N - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((seed >> 33) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < N; i++)
        a_free(a, h[order[i]], 0);
    unsigned b = bfc_bin_index(KiB);
    cr_assert_not_null(a->bin_roots[b], "a bin of %d holes freed in random order has a treap", N);
    /* Fences freed in random order: their holes leave the bin from its
     * middle (merged into larger chunks) */
    for (int i = 0; i < N / 3; i++) {
        int k = order[i];
        if (k + 1 >= N)
            continue;
        a_free(a, fence[k], 0);
        fence[k] = NULL;
    }
    size_t holes = 0;
    for (const bfc_chunk_t *c = a->bins[b]; c; c = c->fnext)
        holes += c->size == KiB;
    cr_assert_gt(holes, N / 4);
    void *last = NULL;
    for (size_t i = 0; i < holes; i++) {
        void *p = a_alloc_ok(a, KiB, 0);
        cr_assert_gt((uintptr_t)p, (uintptr_t)last, "holes taken lowest address first");
        last = p;
        CHECK_ARENA(a, "bfc_alloc");
    }
    cr_assert_null(a->bins[b]);
    cr_assert_null(a->bin_roots[b], "the treap goes with the bin's last chunk");
    arena_close();
}

Test(bfc, split_and_no_split)
{
    bfc_params_t prm = {.min_region = 2 * MiB, .max_region = 64 * MiB, .split_min = 4 * KiB};
    bfc_arena_t *a = arena_open(0, 64 * MiB, &prm);
    void *f0 = a_alloc_ok(a, KiB, 0);
    void *hole = a_alloc_ok(a, 8 * KiB, 0);
    void *f1 = a_alloc_ok(a, KiB, 0);
    (void)f0;
    (void)f1;
    a_free(a, hole, 0);
    /* Remainder 2 KiB < split_min: the whole 8 KiB chunk is handed out. */
    void *p = a_alloc_ok(a, 6 * KiB, 0);
    cr_assert_eq(p, hole);
    const bfc_chunk_t *c = chunk_at(a, p);
    cr_assert_not_null(c);
    cr_assert_eq(c->size, 8 * KiB, "no split expected, chunk is %zu", c->size);
    cr_assert_eq(c->requested, 6 * KiB);
    cr_assert_eq(a->in_use, KiB + 8 * KiB + KiB);
    a_free(a, p, 0);
    /* Remainder 4 KiB == split_min: split, the rest is a free chunk. */
    p = a_alloc_ok(a, 4 * KiB, 0);
    cr_assert_eq(p, hole);
    c = chunk_at(a, p);
    cr_assert_eq(c->size, 4 * KiB, "split expected, chunk is %zu", c->size);
    const bfc_chunk_t *rest = chunk_at(a, (char *)hole + 4 * KiB);
    cr_assert_not_null(rest);
    cr_assert(!rest->in_use && rest->size == 4 * KiB, "remainder: in_use %d size %zu",
              rest->in_use, rest->size);
}

Test(bfc, split_default_keeps_256_byte_remainder)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    a_alloc_ok(a, KiB, 0);
    void *hole = a_alloc_ok(a, 8 * KiB, 0);
    a_alloc_ok(a, KiB, 0);
    a_free(a, hole, 0);
    void *p = a_alloc_ok(a, 8 * KiB - 256, 0);
    cr_assert_eq(p, hole);
    cr_assert_eq(chunk_at(a, p)->size, 8 * KiB - 256);
    const bfc_chunk_t *rest = chunk_at(a, (char *)p + 8 * KiB - 256);
    cr_assert(rest && !rest->in_use && rest->size == 256);
}

/* ------------------------------------------------------------------------ */
/* Coalescing                                                               */
/* ------------------------------------------------------------------------ */

/* Five live 4 KiB blocks b[0..4] followed by the region's free tail. */
static bfc_arena_t *five_blocks(void *b[5])
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    for (int i = 0; i < 5; i++) {
        b[i] = a_alloc_ok(a, 4 * KiB, 0);
        if (i)
            cr_assert_eq((uintptr_t)b[i], (uintptr_t)b[i - 1] + 4 * KiB, "blocks not adjacent");
    }
    return a;
}

Test(bfc, coalesce_with_next)
{
    void *b[5];
    bfc_arena_t *a = five_blocks(b);
    a_free(a, b[2], 0);
    size_t nfree = a->nchunks_free;
    a_free(a, b[1], 0); /* merges with its free next neighbour b[2] */
    cr_assert_eq(a->nchunks_free, nfree);
    const bfc_chunk_t *c = chunk_at(a, b[1]);
    cr_assert(c && !c->in_use && c->size == 8 * KiB, "b1+b2 should be one 8 KiB chunk");
    cr_assert_null(chunk_at(a, b[2]), "b2 should be absorbed");
}

Test(bfc, coalesce_with_prev)
{
    void *b[5];
    bfc_arena_t *a = five_blocks(b);
    a_free(a, b[1], 0);
    size_t nfree = a->nchunks_free;
    a_free(a, b[2], 0); /* merges with its free prev neighbour b[1] */
    cr_assert_eq(a->nchunks_free, nfree);
    const bfc_chunk_t *c = chunk_at(a, b[1]);
    cr_assert(c && !c->in_use && c->size == 8 * KiB, "b1+b2 should be one 8 KiB chunk");
    cr_assert_null(chunk_at(a, b[2]));
}

Test(bfc, coalesce_with_both)
{
    void *b[5];
    bfc_arena_t *a = five_blocks(b);
    a_free(a, b[1], 0);
    a_free(a, b[3], 0);
    size_t nfree = a->nchunks_free;
    a_free(a, b[2], 0); /* joins b[1] and b[3] */
    cr_assert_eq(a->nchunks_free, nfree - 1);
    const bfc_chunk_t *c = chunk_at(a, b[1]);
    cr_assert(c && !c->in_use && c->size == 12 * KiB, "b1..b3 should be one 12 KiB chunk");
    /* Freeing the last block joins the tail; the first joins everything. */
    a_free(a, b[4], 0);
    a_free(a, b[0], 0);
    cr_assert_eq(a->nchunks_free, 1);
    const bfc_chunk_t *all = chunk_at(a, b[0]);
    cr_assert(all && all->size == a->regions->size && !all->next, "region should be one chunk");
    cr_assert_eq(a->in_use, 0);
    cr_assert_eq(a->requested, 0);
}

/* ------------------------------------------------------------------------ */
/* Regions: growth, limit, release                                          */
/* ------------------------------------------------------------------------ */

Test(bfc, regions_grow_geometrically_up_to_limit)
{
    bfc_params_t prm = {.min_region = 2 * MiB, .max_region = 16 * MiB, .split_min = 256};
    const size_t limit = 64 * MiB;
    bfc_arena_t *a = arena_open(0, limit, &prm);
    size_t sizes[32], n = 0;
    for (int i = 0; i < 200; i++) {
        size_t regions = a->nregions;
        size_t held = a->held;
        void *p = a_alloc(a, MiB, 0);
        cr_assert_leq(a->held, limit, "held %zu over limit", a->held);
        if (!p) {
            cr_assert_eq(a->last_fail, BFC_FAIL_LIMIT, "stopped for reason %d", a->last_fail);
            break;
        }
        if (a->nregions != regions) {
            cr_assert_eq(a->nregions, regions + 1);
            cr_assert_lt(n, 32);
            sizes[n++] = a->held - held;
        }
    }
    /* 2, 4, 8, 16, 16 (max_region), then the 18 MiB of room left: 16, 2. */
    size_t expect[] = {2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 16 * MiB, 16 * MiB, 2 * MiB};
    cr_assert_eq(n, sizeof expect / sizeof expect[0], "%zu regions", n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sizes[i], expect[i], "region %zu: %zu bytes, expected %zu", i, sizes[i],
                     expect[i]);
    cr_assert_eq(a->held, limit);
    cr_assert_eq(a->in_use, limit, "1 MiB blocks tile the regions");
    /* The limit is hard even for one large request. */
    cr_assert_null(a_alloc(a, 2 * MiB, 0));
    cr_assert_eq(a->held, limit);
}

Test(bfc, large_request_gets_one_region_of_its_size)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    void *p = a_alloc_ok(a, 9 * MiB + 3, 0);
    cr_assert_eq(a->nregions, 1);
    cr_assert_eq(a->held, 10 * MiB, "rounded to the 2 MiB granule");
    cr_assert_eq(chunk_at(a, p)->size, bfc_round(9 * MiB + 3));
    /* Over the limit: refused without touching the backend. */
    cr_assert_null(a_alloc(a, 60 * MiB, 0));
    cr_assert_eq(a->last_fail, BFC_FAIL_LIMIT);
    cr_assert_eq(a->held, 10 * MiB);
}

Test(bfc, huge_sizes_fail_cleanly)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    size_t sizes[] = {0, SIZE_MAX, SIZE_MAX - 100, SIZE_MAX - 255, (size_t)1 << 63, SIZE_MAX / 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cr_assert_null(a_alloc(a, sizes[i], 0), "bfc_alloc(%zu) succeeded", sizes[i]);
        cr_assert_neq(a->last_fail, BFC_FAIL_NONE);
        if (bfc_round(sizes[i]) == 0)
            cr_assert_eq(a->last_fail, BFC_FAIL_SIZE, "size %zu", sizes[i]);
        cr_assert_eq(a->held, 0);
    }
    a_alloc_ok(a, KiB, 0);
}

Test(bfc, backend_fault_reported)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    backend_set_faults(fx.backend, 1, 0, 0);
    cr_assert_null(a_alloc(a, KiB, 0));
    cr_assert_eq(a->last_fail, BFC_FAIL_BACKEND);
    cr_assert_eq(a->held, 0);
    a_alloc_ok(a, KiB, 0); /* the fault fired once */
}

Test(bfc, release_empty_regions)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    void *p[40];
    for (int i = 0; i < 40; i++)
        p[i] = a_alloc_ok(a, MiB, 0);
    size_t regions = a->nregions;
    cr_assert_geq(regions, 3);
    cr_assert_eq(a->region_allocs, regions);
    /* A region with a live block is kept; empty ones go, largest first,
     * until held <= target. */
    for (int i = 1; i < 40; i++)
        a_free(a, p[i], 0);
    cr_assert_eq(a->nregions, regions, "frees alone give nothing back");
    size_t held = a->held;
    size_t first = chunk_at(a, p[0])->region->size;
    a_release(a, held - 1);
    cr_assert_lt(a->held, held);
    cr_assert_gt(a->nregions, 1, "only as much as needed");
    a_release(a, 0);
    cr_assert_eq(a->nregions, 1, "the region with a live block stays");
    cr_assert_eq(a->held, first);
    a_free(a, p[0], 0);
    cr_assert_eq(bfc_release(a, 0), first);
    CHECK_ARENA(a, "release all");
    cr_assert_eq(a->held, 0);
    cr_assert_null(a->regions);
    cr_assert_eq(a->region_frees, a->region_allocs);
}

Test(bfc, set_limit_shrink_and_pending)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    void *p[30];
    for (int i = 0; i < 30; i++)
        p[i] = a_alloc_ok(a, MiB, 0);
    cr_assert_geq(a->held, 30 * MiB);
    /* Live data holds 30 MiB: a 8 MiB limit stays pending. */
    cr_assert_eq(a_set_limit(a, 8 * MiB), VMEM_PENDING);
    cr_assert(a->pending);
    size_t held = a->held;
    cr_assert_null(a_alloc(a, 16 * MiB, 0), "no new memory while pending");
    cr_assert_eq(a->last_fail, BFC_FAIL_LIMIT);
    cr_assert_eq(a->held, held);
    for (int i = 29; i >= 0; i--) {
        a_free(a, p[i], 0);
        cr_assert_leq(a->held, held, "a free took memory");
        held = a->held;
    }
    cr_assert_not(a->pending, "pending cleared once under the limit");
    cr_assert_leq(a->held, 8 * MiB);
    /* Grow: at once. */
    cr_assert_eq(a_set_limit(a, 64 * MiB), VMEM_OK);
    a_alloc_ok(a, 32 * MiB, 0);
}

/* ------------------------------------------------------------------------ */
/* sim-vmm: partial release and contiguous regions                          */
/* ------------------------------------------------------------------------ */

Test(bfc, vmm_release_free_granules_inside_live_region)
{
    bfc_params_t prm = {.min_region = 16 * MiB, .max_region = 64 * MiB, .split_min = 256};
    bfc_arena_t *a = arena_open(1, 64 * MiB, &prm);
    void *head = a_alloc_ok(a, KiB, 0);
    void *mid = a_alloc_ok(a, 8 * MiB, 0);
    void *tail = a_alloc_ok(a, KiB, 0);
    cr_assert_eq(a->nregions, 1);
    cr_assert_eq(a->held, 16 * MiB);
    pattern_fill(head, KiB, 1);
    pattern_fill(tail, KiB, 2);
    a_free(a, mid, 0);
    /* Free: [1K, 8M+1K) and [8M+2K, 16M).  Whole granules: [2M, 8M) and
     * [10M, 16M) -> 12 MiB back, 4 MiB (two granules) kept around the blocks. */
    a_release(a, 0);
    cr_assert_eq(a->held, 4 * MiB, "held %zu", a->held);
    cr_assert_eq(a->nregions, 2);
    cr_assert_eq(region_count(a), 2);
    cr_assert(pattern_ok(head, KiB, 1) && pattern_ok(tail, KiB, 2), "live data damaged");
    /* What stays is usable: both remaining granules' free parts. */
    void *q = a_alloc_ok(a, MiB, 0);
    cr_assert(bfc_contains(a, q));
    a_free(a, q, 0);
    a_free(a, head, 0);
    a_free(a, tail, 0);
    a_release(a, 0);
    cr_assert_eq(a->held, 0);
}

Test(bfc, vmm_release_stops_at_target)
{
    bfc_params_t prm = {.min_region = 32 * MiB, .max_region = 64 * MiB, .split_min = 256};
    bfc_arena_t *a = arena_open(1, 64 * MiB, &prm);
    void *head = a_alloc_ok(a, KiB, 0);
    cr_assert_eq(a->held, 32 * MiB);
    /* Shrinking the limit gives back free granules of the live region. */
    cr_assert_eq(a_set_limit(a, 10 * MiB), VMEM_OK);
    cr_assert_leq(a->held, 10 * MiB);
    cr_assert_geq(a->held, 2 * MiB);
    cr_assert(bfc_contains(a, head));
    a_free(a, head, 0);
}

/* sim-vmm (as vmm) ends regions on 64 MiB of its range where the limit
 * allows: the first region grows to 64 MiB, a later one to the next
 * boundary; under a tight limit the region is what the limit leaves. */
Test(bfc, vmm_growth_ends_regions_on_64_mib)
{
    bfc_params_t prm = {.min_region = 2 * MiB, .max_region = 1024 * MiB, .split_min = 256};
    bfc_arena_t *a = arena_open(1, 1024 * MiB, &prm);
    a->backend->grow_align = 64 * MiB;
    uintptr_t base = a->backend->range_base;
    void *p = a_alloc_ok(a, MiB, 0);
    cr_assert_eq(a->held, 64 * MiB, "first region %zu", a->held);
    cr_assert_eq((uintptr_t)p, base);
    void *q = a_alloc_ok(a, 100 * MiB, 0); /* does not fit the 63 MiB left */
    cr_assert_eq(a->held % (64 * MiB), 0, "held %zu", a->held);
    cr_assert_eq(a->nregions, 1, "touching regions merge");
    cr_assert_eq((a->regions->base + a->regions->size - base) % (64 * MiB), 0);
    a_free(a, q, 0);
    a_free(a, p, 0);
    a_release(a, 0);
    cr_assert_eq(a->held, 0);
    /* A limit that leaves less than the boundary: the region is clipped. */
    cr_assert_eq(a_set_limit(a, 10 * MiB), VMEM_OK);
    p = a_alloc_ok(a, 3 * MiB, 0);
    cr_assert_leq(a->held, 10 * MiB, "held %zu over the limit", a->held);
    cr_assert_geq(a->held, 4 * MiB);
    a_free(a, p, 0);
}

Test(bfc, vmm_touching_regions_merge)
{
    bfc_params_t prm = {.min_region = 2 * MiB, .max_region = 2 * MiB, .split_min = 256};
    bfc_arena_t *a = arena_open(1, 64 * MiB, &prm);
    void *p = a_alloc_ok(a, MiB + MiB / 2, 0);
    cr_assert_eq(a->held, 2 * MiB);
    /* 1.5 MiB more: the free 0.5 MiB tail plus a new region placed right
     * after it, merged into one range, so the block spans the boundary. */
    void *q = a_alloc_ok(a, MiB + MiB / 2, 0);
    cr_assert_eq((uintptr_t)q, (uintptr_t)p + MiB + MiB / 2, "block should continue the tail");
    cr_assert_eq(a->nregions, 1, "touching regions should merge");
    cr_assert_eq(a->regions->size, 4 * MiB);
    cr_assert_eq(a->region_allocs, 2);
    pattern_fill(p, MiB + MiB / 2, 3);
    pattern_fill(q, MiB + MiB / 2, 4);
    cr_assert(pattern_ok(p, MiB + MiB / 2, 3) && pattern_ok(q, MiB + MiB / 2, 4));
    a_free(a, p, 0);
    a_free(a, q, 0);
    cr_assert_eq(a->nchunks_free, 1, "one free chunk across the merged range");
}

Test(bfc, sim_regions_never_merge)
{
    bfc_params_t prm = {.min_region = 2 * MiB, .max_region = 2 * MiB, .split_min = 256};
    bfc_arena_t *a = arena_open(0, 64 * MiB, &prm);
    a_alloc_ok(a, MiB + MiB / 2, 0);
    a_alloc_ok(a, MiB + MiB / 2, 0);
    cr_assert_eq(a->nregions, 2, "cudaMalloc-like regions stay separate");
}

/* ------------------------------------------------------------------------ */
/* Tags                                                                     */
/* ------------------------------------------------------------------------ */

Test(bfc, tags_keep_blocks_for_their_stream)
{
    const uintptr_t S = 11, T = 22;
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    void *x = a_alloc_ok(a, 4 * KiB, 0);
    void *fence = a_alloc_ok(a, KiB, 0);
    a_free(a, x, S);
    cr_assert_eq(chunk_at(a, x)->stream, S);
    /* T may not reuse S's block; S may. */
    void *t = a_alloc_ok(a, 4 * KiB, T);
    cr_assert_neq(t, x, "tag %lu reused a block freed by tag %lu", (unsigned long)T,
                  (unsigned long)S);
    void *s = a_alloc_ok(a, 4 * KiB, S);
    cr_assert_eq(s, x, "tag S should reuse its own block");
    a_free(a, s, S);
    /* Untagged requests may not take it either. */
    void *u = a_alloc_ok(a, 4 * KiB, 0);
    cr_assert_neq(u, x);
    a_free(a, u, 0);
    /* Neighbours with different tags do not coalesce. */
    a_free(a, fence, T);
    cr_assert_eq(chunk_at(a, x)->size, 4 * KiB);
    bfc_clear_streams(a);
    CHECK_ARENA(a, "bfc_clear_streams");
    const bfc_chunk_t *c = chunk_at(a, x);
    cr_assert(c && c->stream == 0 && c->size > 4 * KiB, "cleared tags should coalesce");
    void *t2 = a_alloc_ok(a, 4 * KiB, T);
    cr_assert_eq(t2, x, "after bfc_clear_streams any tag reuses the block");
}

/* ------------------------------------------------------------------------ */
/* Foreign and double frees leave the arena unchanged                       */
/* ------------------------------------------------------------------------ */

Test(bfc, bad_frees_change_nothing)
{
    bfc_arena_t *a = arena_open(0, 64 * MiB, NULL);
    void *p = a_alloc_ok(a, 4 * KiB, 0);
    void *q = a_alloc_ok(a, 4 * KiB, 0);
    a_alloc_ok(a, KiB, 0);
    int on_stack;
    size_t held = a->held, in_use = a->in_use, nfree = a->nchunks_free;
    cr_assert_eq(bfc_free(a, &on_stack, 0, NULL), VMEM_ERR_FOREIGN_PTR);
    cr_assert_eq(bfc_free(a, (char *)p + 256, 0, NULL), VMEM_ERR_FOREIGN_PTR);
    cr_assert_eq(bfc_classify(a, (char *)p + 256), VMEM_ERR_FOREIGN_PTR, "inside a live block");
    cr_assert_eq(bfc_classify(a, &on_stack), VMEM_ERR_FOREIGN_PTR);
    CHECK_ARENA(a, "foreign frees");
    cr_assert(a->held == held && a->in_use == in_use && a->nchunks_free == nfree);
    a_free(a, q, 0);
    cr_assert_eq(bfc_free(a, q, 0, NULL), VMEM_ERR_FOREIGN_PTR);
    cr_assert_eq(bfc_classify(a, q), VMEM_ERR_DOUBLE_FREE);
    CHECK_ARENA(a, "double free");
    cr_assert_eq(a->in_use, in_use - 4 * KiB);
    cr_assert_eq(bfc_find_live(a, (char *)p + 100), chunk_at(a, p));
    cr_assert_null(bfc_find_live(a, q));
}

/* ------------------------------------------------------------------------ */
/* bfc_remap (docs/vmm.md, "Remaps")                                        */
/* ------------------------------------------------------------------------ */

static const backend_ops_t *sim_vmm_ops_saved;
static backend_ops_t refusing_ops;
static int remap_calls;

/* sim-vmm's remap, refusing its first call as vmm refuses a big handle that
 * would lose its alignment at the new address. */
static vmem_status_t refusing_remap(backend_t *b, void *src, size_t size, void *hint, void **dst)
{
    if (remap_calls++ == 0)
        return VMEM_ERR_UNSUPPORTED;
    return sim_vmm_ops_saved->region_remap(b, src, size, hint, dst);
}

/* Six 4 MiB blocks fill a 24 MiB limit; the second, the fourth and the last
 * are freed.  8 MiB lacks 4 after the free tail: the backend refuses the
 * first hole it is offered, and the other one moves. */
Test(bfc_remap, a_refused_run_is_skipped_and_the_next_hole_moves, .fini = arena_close)
{
    bfc_arena_t *a = arena_open(1, 24 * MiB, NULL);
    sim_vmm_ops_saved = fx.backend->ops;
    refusing_ops = *fx.backend->ops;
    refusing_ops.region_remap = refusing_remap;
    fx.backend->ops = &refusing_ops;
    remap_calls = 0;
    void *p[6];
    for (int i = 0; i < 6; i++)
        p[i] = a_alloc_ok(a, 4 * MiB, 0);
    a_free(a, p[1], 0);
    a_free(a, p[3], 0);
    a_free(a, p[5], 0);
    cr_assert_null(a_alloc(a, 8 * MiB, 0), "no free block of 8 MiB and no room");
    cr_assert_eq(a->last_fail, BFC_FAIL_LIMIT);
    size_t held = a->held;
    cr_assert_eq(bfc_remap(a, 8 * MiB, 0), 1, "the second hole moved and the request fits");
    CHECK_ARENA(a, "bfc_remap");
    cr_assert_eq(remap_calls, 2);
    cr_assert_eq(a->remap_refused, 1);
    cr_assert_eq(a->remaps, 1);
    cr_assert_eq(a->remapped, 4 * MiB);
    cr_assert_eq(a->remap_misses, 0);
    cr_assert_eq(a->held, held, "held unchanged");
    void *q = a_alloc_ok(a, 8 * MiB, 0);
    cr_assert_eq(q, p[5], "the block starts at the old free tail");
    fx.backend->ops = sim_vmm_ops_saved;
}

/* With a stream key (two streams seen), nothing moves. */
Test(bfc_remap, not_for_a_stream_key, .fini = arena_close)
{
    bfc_arena_t *a = arena_open(1, 16 * MiB, NULL);
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = a_alloc_ok(a, 4 * MiB, 0);
    a_free(a, p[1], 0);
    a_free(a, p[3], 0);
    cr_assert_eq(bfc_remap(a, 8 * MiB, 7), 0);
    cr_assert_eq(a->remaps, 0);
    cr_assert_eq(bfc_remap(a, 8 * MiB, 0), 1);
    CHECK_ARENA(a, "bfc_remap");
    cr_assert_eq(a->remaps, 1);
}
