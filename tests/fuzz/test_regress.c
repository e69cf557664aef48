/*
 * Regressions: bugs found by the fuzzer (or while writing it), each reduced
 * to the smallest sequence that failed before its fix.
 */
#include "fuzz_common.h"

#define S1 ((void *)0x1000) /* fake stream handles: sim never calls CUDA on them */
#define S2 ((void *)0x2000)

/* Bug 1: an empty region whose free chunks carry different stream tags (not
 * merged, by design) was given back by region_release, which assumed one
 * chunk per empty region: an assertion in debug builds, and in release
 * builds the other chunks stayed in the bins pointing at the freed region.
 * Reached by vmem_trim after frees on two streams. */
Test(regress, trim_region_with_two_stream_tags)
{
    vmem_t *v = sim_open(VMEM_BACKEND_SIM, 64 * MiB, 32 * MiB, 0);
    void *a = vmem_alloc_stream(v, 4096, S1);
    void *b = vmem_alloc_stream(v, 4096, S1);
    void *c = vmem_alloc_stream(v, 4096, S1);
    cr_assert(a && b && c);
    cr_assert_eq(vmem_free_stream(v, a, S1), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, c, S2), VMEM_OK); /* second stream: tags from here */
    cr_assert_eq(vmem_free_stream(v, b, S1), VMEM_OK);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    assert_nothing_held(v);
    /* and the arena still works */
    void *d = vmem_alloc_stream(v, MiB, S2);
    cr_assert_not_null(d);
    cr_assert_eq(location_of(v, d), VMEM_LOC_DEVICE);
    cr_assert_eq(vmem_free_stream(v, d, S2), VMEM_OK);
    assert_nothing_held(v);
    vmem_destroy(v);
}

/* Bug 1, second path: a free while a shrink is pending releases the block's
 * region once it is empty — the same single-chunk assumption. */
Test(regress, pending_free_region_with_two_stream_tags)
{
    vmem_t *v = sim_open(VMEM_BACKEND_SIM, 64 * MiB, 32 * MiB, 0);
    void *a = vmem_alloc_stream(v, 4096, S1);
    void *b = vmem_alloc_stream(v, 4096, S1);
    void *big = vmem_alloc_stream(v, 2 * MiB, S1); /* a second region */
    cr_assert(a && b && big);
    vmem_stats_t s = stats_of(v);
    cr_assert_gt(s.device_regions, 1);
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, s.device_held - 2 * MiB, &applied), VMEM_PENDING);
    cr_assert_eq(vmem_free_stream(v, a, S2), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, b, S1), VMEM_OK); /* region of a, b now empty */
    cr_assert_eq(vmem_check(v), VMEM_OK);
    s = stats_of(v);
    cr_assert_eq(s.pending_limit, 0, "shrink still pending with %zu held, limit %zu",
                 s.device_held, s.limit);
    cr_assert_leq(s.device_held, s.limit);
    cr_assert_eq(vmem_free_stream(v, big, S1), VMEM_OK);
    assert_nothing_held(v);
    vmem_destroy(v);
}

/* Bug 2 (sim-vmm): a trim that punched a hole out of a free chunk could leave
 * the part of the region after the hole as a separate, entirely free region
 * (its chunks have different stream tags, none holds a whole granule); the
 * whole-region pass had already run, so vmem_trim kept it. */
Test(regress, trim_after_punch_leaves_no_empty_region)
{
    vmem_t *v = sim_open(VMEM_BACKEND_SIM_VMM, 256 * MiB, 64 * MiB, 0);
    void *l = vmem_alloc_stream(v, MiB, S1);     /* [0, 1) MiB of region [0, 2) */
    void *m = vmem_alloc_stream(v, 3 * MiB, S1); /* grows the range to [0, 6): [1, 4) */
    void *n = vmem_alloc_stream(v, MiB, S1);     /* [4, 5); [5, 6) stays free */
    cr_assert(l && m && n);
    cr_assert_eq((char *)m - (char *)l, (ptrdiff_t)MiB);
    cr_assert_eq((char *)n - (char *)l, (ptrdiff_t)(4 * MiB));
    cr_assert_eq(vmem_free_stream(v, n, S2), VMEM_OK); /* tag 2, not merged with [5, 6) */
    cr_assert_eq(vmem_free_stream(v, m, S1), VMEM_OK); /* tag 1 over [1, 4) */
    size_t released = 0;
    cr_assert_eq(vmem_trim(v, &released), VMEM_OK);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    /* Only the granule holding l is still needed. */
    cr_assert_eq(s.device_held, 2 * MiB, "trim kept %zu bytes for one 1 MiB block", s.device_held);
    cr_assert_eq(vmem_free_stream(v, l, S1), VMEM_OK);
    assert_nothing_held(v);
    vmem_destroy(v);
}

/* Bug 3 (sim-vmm): a pending shrink waited for a granule that was entirely
 * free but cut into chunks of different stream tags.  When an allocation
 * settled the streams (tags cleared, chunks merged) the shrink did not go on,
 * so the arena stayed above its limit until some later free. */
Test(regress, settle_continues_pending_shrink)
{
    vmem_t *v = sim_open(VMEM_BACKEND_SIM_VMM, 256 * MiB, 64 * MiB, 0);
    void *a = vmem_alloc_stream(v, MiB, S1); /* [0, 1) MiB */
    void *b = vmem_alloc_stream(v, MiB, S1); /* [1, 2) */
    void *c = vmem_alloc_stream(v, MiB, S1); /* [2, 3) of a range grown to [0, 6) */
    cr_assert(a && b && c);
    cr_assert_eq((char *)c - (char *)a, (ptrdiff_t)(2 * MiB));
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 2 * MiB, &applied), VMEM_PENDING);
    cr_assert_eq(applied, 4 * MiB);
    cr_assert_eq(vmem_free_stream(v, a, S2), VMEM_OK); /* tag 2 */
    cr_assert_eq(vmem_free_stream(v, b, S1), VMEM_OK); /* tag 1: [0, 2) free, two chunks */
    /* Too big for the device: settles the streams, then spills. */
    void *big = vmem_alloc_stream(v, 3 * MiB, S1);
    cr_assert_not_null(big);
    cr_assert_eq(location_of(v, big), VMEM_LOC_HOST);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.pending_limit, 0, "shrink still pending: %zu held, limit %zu", s.device_held,
                 s.limit);
    cr_assert_eq(s.device_held, 2 * MiB);
    cr_assert_eq(vmem_free_stream(v, big, S1), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, c, S1), VMEM_OK);
    assert_nothing_held(v);
    vmem_destroy(v);
}

/* Bug 4 (sim-vmm, found by the long fuzz run, seed 1001): free host memory
 * kept in place for later spills still held address space of the reserved
 * range, so after a 67 GiB spill was freed an empty 1 GiB device could not
 * serve 900 MiB with the fallback off (VMEM_ERR_NOMEM) although the device
 * was empty and the request within its limit. */
Test(regress, free_host_memory_does_not_block_device_allocations)
{
    vmem_t *v = sim_open(VMEM_BACKEND_SIM_VMM, GiB, 0, 0);
    cr_assert_eq(vmem_set_host_limit(v, SIZE_MAX), VMEM_OK);
    void *h = vmem_alloc(v, 69000 * MiB); /* more than the range's host room */
    cr_assert_not_null(h);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    cr_assert_eq(vmem_free(v, h), VMEM_OK);
    cr_assert_eq(vmem_set_host_fallback(v, 0), VMEM_OK);
    void *d = vmem_alloc(v, 900 * MiB);
    cr_assert_not_null(d, "empty device refused 900 MiB: %s", vmem_strerror(vmem_last_status()));
    cr_assert_eq(location_of(v, d), VMEM_LOC_DEVICE);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    cr_assert_eq(vmem_free(v, d), VMEM_OK);
    assert_nothing_held(v);
    vmem_destroy(v);
}

/* Bug 5 (found by the long fuzz run, seed 2000): with the limit above what
 * the device has, a failed allocation gave back empty regions only down to
 * limit - size; the device itself still could not fit the request, and it
 * failed although every region was empty. */
Test(regress, device_full_releases_every_empty_region)
{
    vmem_t *v = sim_open(VMEM_BACKEND_SIM, 64 * MiB, 100 * MiB, 0);
    cr_assert_eq(vmem_set_host_fallback(v, 0), VMEM_OK);
    void *a = vmem_alloc(v, 42 * MiB);
    void *b = vmem_alloc(v, 2 * MiB);
    cr_assert(a && b);
    cr_assert_eq(stats_of(v).device_regions, 2);
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    cr_assert_eq(vmem_free(v, b), VMEM_OK);
    void *c = vmem_alloc(v, 64 * MiB); /* the whole device */
    cr_assert_not_null(c, "empty 64 MiB device refused 64 MiB: %s",
                       vmem_strerror(vmem_last_status()));
    cr_assert_eq(location_of(v, c), VMEM_LOC_DEVICE);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    cr_assert_eq(vmem_free(v, c), VMEM_OK);
    assert_nothing_held(v);
    vmem_destroy(v);
}
