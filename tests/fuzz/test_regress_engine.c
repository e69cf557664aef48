/*
 * Engine-level regressions (suite 'fuzz'): the BFC engine over a scripted
 * backend that places regions exactly where a fuzzer input once made the
 * simulated backends place them.  The engine never touches the memory, so
 * the addresses are plain numbers.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "bfc.h"

#define MiB ((size_t)1 << 20)

/* A contiguous (vmm-like) backend with a capacity; successful requests take
 * their addresses, in order, from place[] whatever the hint. */
typedef struct scripted {
    backend_t base;
    size_t capacity, used;
    const uintptr_t *place;
    size_t nplace, next;
} scripted_t;

static vmem_status_t scripted_alloc(backend_t *b, size_t size, void *hint, void **out)
{
    scripted_t *s = (scripted_t *)b;
    (void)hint;
    if (size > s->capacity - s->used || s->next == s->nplace)
        return VMEM_ERR_NOMEM;
    s->used += size;
    *out = (void *)s->place[s->next++];
    return VMEM_OK;
}

static void scripted_free(backend_t *b, void *base, size_t size)
{
    (void)base;
    ((scripted_t *)b)->used -= size;
}

static vmem_status_t scripted_info(backend_t *b, size_t *free_bytes, size_t *total)
{
    scripted_t *s = (scripted_t *)b;
    *free_bytes = s->capacity - s->used;
    *total = s->capacity;
    return VMEM_OK;
}

static void scripted_destroy(backend_t *b) { (void)b; }

static const backend_ops_t scripted_ops = {scripted_alloc, scripted_free, scripted_info,
                                           scripted_destroy, NULL, NULL};

static void check(const bfc_arena_t *a)
{
    char why[256] = "";
    cr_assert_eq(bfc_check(a, why, sizeof why), VMEM_OK, "bfc_check: %s", why);
}

/* Bug 6 (found by the long fuzz run, seed 3000, on sim-vmm): arena_grow's
 * first request, meant to extend the last region's free tail (at the hint),
 * landed elsewhere, next to another region whose free tail it extended
 * enough for the request; the second request (the full size) failed, and
 * bfc_alloc returned NULL without looking at the bins again.  vmem then
 * served the allocation through the spill path, from that device chunk:
 * counted as a spill, located on the device. */
Test(regress_engine, grow_placed_elsewhere_still_serves)
{
    static const uintptr_t place[] = {0x10000000, 0x20000000, 0x10200000};
    scripted_t s;
    memset(&s, 0, sizeof s);
    s.base.ops = &scripted_ops;
    s.base.name = "scripted";
    s.base.flags = BACKEND_F_CONTIGUOUS | BACKEND_F_SPLITTABLE | BACKEND_F_SIMULATED;
    s.base.granule = 2 * MiB;
    s.capacity = 8 * MiB;
    s.place = place;
    s.nplace = 3;
    bfc_arena_t a;
    bfc_params_t p = {.min_region = 2 * MiB, .max_region = 1024 * MiB, .split_min = 256};
    cr_assert_eq(bfc_init(&a, &s.base, &p, 1024 * MiB), VMEM_OK);

    /* [l1 1 MiB | free 1 MiB] at 0x10000000 */
    void *l1 = bfc_alloc(&a, MiB, 0);
    cr_assert_eq((uintptr_t)l1, 0x10000000);
    /* a 4 MiB region away from the hint: [l2 1.75 MiB | free 2.25 MiB] */
    void *l2 = bfc_alloc(&a, 7 * MiB / 4, 0);
    cr_assert_eq((uintptr_t)l2, 0x20000000);
    check(&a);
    /* 3 MiB: the grow meant for the tail at 0x20400000 lands at 0x10200000,
     * extending the first region's free tail to exactly 3 MiB. */
    void *r = bfc_alloc(&a, 3 * MiB, 0);
    check(&a);
    cr_assert_not_null(r, "3 MiB refused although the arena has a free 3 MiB chunk");
    cr_assert_eq((uintptr_t)r, 0x10100000);
    size_t sz = 0;
    cr_assert_eq(bfc_free(&a, r, 0, &sz), VMEM_OK);
    cr_assert_eq(bfc_free(&a, l2, 0, &sz), VMEM_OK);
    cr_assert_eq(bfc_free(&a, l1, 0, &sz), VMEM_OK);
    check(&a);
    bfc_release(&a, 0);
    cr_assert_eq(a.held, 0);
    cr_assert_eq(s.used, 0);
    bfc_fini(&a);
}
