/*
 * Deferred frees (vmem_record_stream, src/deferred.c; docs/design.md,
 * "Deferred frees"): a block freed while another stream's recorded work may
 * still read it is not reused until that work is done.  On the simulated
 * devices a fence is done only once something waited for it, so every reuse
 * shows as a wait in the statistics.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "deferred.h"
#include "vmem.h"

#define COPY_STREAM ((void *)0x5157) /* a simulated stream token */

static vmem_t *instance(vmem_backend_kind_t kind, size_t limit)
{
    env_unset_all();
    vmem_config_t cfg = sim_config(kind, limit, 0, 256 * MiB, NULL);
    return create_or_die(&cfg);
}

Test(deferred, a_recorded_block_is_not_reused_while_there_is_room)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 64 * MiB);
    void *a = vmem_alloc(v, 4 * MiB);
    cr_assert_not_null(a);
    cr_assert_eq(vmem_record_stream(v, a, COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.device_in_use, 0, "a waiting block is not in use");
    cr_assert_geq(s.device_held, 4 * MiB, "but still held");
    cr_assert_eq(json_u64(v, "deferredFrees"), 1);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 4 * MiB);
    void *b = vmem_alloc(v, 4 * MiB);
    cr_assert_not_null(b);
    cr_assert_neq(b, a, "the waiting block was handed out again");
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, a, &info), VMEM_ERR_FOREIGN_PTR);
    cr_assert_eq(vmem_free(v, a), VMEM_ERR_DOUBLE_FREE);
    cr_assert_eq(vmem_record_stream(v, a, COPY_STREAM), VMEM_ERR_DOUBLE_FREE);
    CHECK_VMEM(v, "a deferred free");
    cr_assert_eq(vmem_free(v, b), VMEM_OK);
    vmem_destroy(v);
}

Test(deferred, an_unrecorded_block_is_reused_at_once)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 64 * MiB);
    void *a = vmem_alloc(v, 4 * MiB);
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    void *b = vmem_alloc(v, 4 * MiB);
    cr_assert_eq(b, a);
    cr_assert_eq(json_u64(v, "deferredFrees"), 0);
    vmem_free(v, b);
    vmem_destroy(v);
}

/* Four 4 MiB blocks fill a 16 MiB limit; two are recorded and freed.  An
 * allocation of `need` must land on the device by making its stream wait,
 * not on host and not by the CPU waiting; the other blocks keep their data.
 * (sim: 4 MiB, since two freed neighbours of separate regions do not make
 * room for 8 MiB there even without a deferral.) */
static void pressure(vmem_backend_kind_t kind, size_t need)
{
    vmem_t *v = instance(kind, 16 * MiB);
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = vmem_alloc(v, 4 * MiB);
        cr_assert_not_null(p[i]);
        cr_assert_eq(location_of(v, p[i]), VMEM_LOC_DEVICE);
        pattern_fill(p[i], 4 * MiB, (uint64_t)i + 1);
    }
    cr_assert_eq(vmem_record_stream(v, p[1], COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_record_stream(v, (char *)p[2] + 4096, COPY_STREAM), VMEM_OK,
                 "an address inside the block records the whole block");
    cr_assert_eq(vmem_free(v, p[1]), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[2]), VMEM_OK);
    void *q = vmem_alloc(v, need);
    cr_assert_not_null(q);
    cr_assert_eq(location_of(v, q), VMEM_LOC_DEVICE, "the allocation went to host");
    cr_assert_eq(stats_of(v).host_in_use, 0);
    cr_assert_geq(json_u64(v, "deferredStreamWaits"), 1);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 0);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 8 * MiB - need);
    cr_assert(pattern_ok(p[0], 4 * MiB, 1));
    cr_assert(pattern_ok(p[3], 4 * MiB, 4));
    CHECK_VMEM(v, "the reclaim");
    vmem_free(v, q);
    vmem_free(v, p[0]);
    vmem_free(v, p[3]);
    vmem_destroy(v);
}

Test(deferred, pressure_reclaims_by_a_stream_wait_sim_vmm)
{
    pressure(VMEM_BACKEND_SIM_VMM, 8 * MiB);
}
Test(deferred, pressure_reclaims_by_a_stream_wait_sim) { pressure(VMEM_BACKEND_SIM, 4 * MiB); }

Test(deferred, with_two_streams_the_cpu_waits)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 16 * MiB);
    void *s1 = (void *)0x101, *s2 = (void *)0x202;
    void *p[4];
    for (int i = 0; i < 4; i++)
        cr_assert_not_null(p[i] = vmem_alloc_stream(v, 4 * MiB, i % 2 ? s2 : s1));
    cr_assert_eq(vmem_record_stream(v, p[0], COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_record_stream(v, p[2], COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[0], s1), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[2], s1), VMEM_OK);
    void *q = vmem_alloc_stream(v, 4 * MiB, s1);
    cr_assert_not_null(q);
    cr_assert_eq(location_of(v, q), VMEM_LOC_DEVICE);
    cr_assert_eq(json_u64(v, "deferredStreamWaits"), 0);
    cr_assert_geq(json_u64(v, "deferredCpuWaits"), 1);
    CHECK_VMEM(v, "two streams");
    vmem_free_stream(v, q, s1);
    vmem_free_stream(v, p[1], s2);
    vmem_free_stream(v, p[3], s2);
    vmem_destroy(v);
}

Test(deferred, a_limit_change_and_a_trim_give_waiting_blocks_back)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 64 * MiB);
    void *a = vmem_alloc(v, 4 * MiB), *b = vmem_alloc(v, 4 * MiB);
    cr_assert_eq(vmem_record_stream(v, a, COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    cr_assert_eq(vmem_set_limit(v, 32 * MiB, NULL), VMEM_OK);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 0);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 1);
    cr_assert_eq(vmem_record_stream(v, b, COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_free(v, b), VMEM_OK);
    size_t released = 0;
    cr_assert_eq(vmem_trim(v, &released), VMEM_OK);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 2);
    cr_assert_eq(stats_of(v).device_held, 0, "the trim gave the waited-for block back");
    CHECK_VMEM(v, "the limit change and the trim");
    vmem_destroy(v);
}

Test(deferred, the_same_stream_again_keeps_one_fence_and_a_fifth_stream_waits)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 64 * MiB);
    void *a = vmem_alloc(v, MiB);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(vmem_record_stream(v, a, COPY_STREAM), VMEM_OK);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 0);
    for (uintptr_t s = 1; s <= 4; s++)
        cr_assert_eq(vmem_record_stream(v, a, (void *)(0x1000 * s)), VMEM_OK);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 1, "the fifth stream waits for the oldest");
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    cr_assert_eq(json_u64(v, "deferredFrees"), 1);
    vmem_destroy(v); /* gives it back: no live block is reported, nothing leaks */
}

Test(deferred, bad_arguments)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 64 * MiB);
    int x;
    cr_assert_eq(vmem_record_stream(NULL, &x, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_record_stream(v, NULL, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_record_stream(v, &x, NULL), VMEM_ERR_FOREIGN_PTR);
    unsigned prev;
    cr_assert_eq(vmem_set_tag(v, 3, &prev), VMEM_OK);
    void *t = vmem_alloc(v, MiB);
    cr_assert_not_null(t);
    cr_assert_eq(vmem_record_stream(v, t, COPY_STREAM), VMEM_ERR_UNSUPPORTED);
    cr_assert_eq(vmem_free(v, t), VMEM_OK);
    cr_assert_eq(vmem_set_tag(v, prev, NULL), VMEM_OK);
    vmem_destroy(v);
}

/* Tagged allocations (docs/tags.md) and the main arena's waiting blocks.
 * Four 4 MiB blocks of the main (untagged) arena fill a 16 MiB limit, which
 * the tags share; two of them are recorded on a copy stream and freed, so
 * they wait, held by the main arena.  A tag's arena can grow only into
 * memory the main arena gives back to the backend: on sim-vmm any whole free
 * granule (the second and third blocks wait), on sim only a whole empty
 * region (the main arena's regions there are 4, 4 and 8 MiB: the third and
 * fourth blocks, which share the 8 MiB one, wait). */
#define TAG 5

typedef struct main_blocks {
    void *p[4];
    int waits[4]; /* 1: recorded and freed */
} main_blocks_t;

static vmem_t *tag_instance(vmem_backend_kind_t kind, int fallback)
{
    env_unset_all();
    vmem_config_t cfg = sim_config(kind, 16 * MiB, 0, 256 * MiB, NULL);
    cfg.host_fallback = fallback;
    return create_or_die(&cfg);
}

static void fill_main(vmem_t *v, vmem_backend_kind_t kind, main_blocks_t *m)
{
    int first = kind == VMEM_BACKEND_SIM ? 2 : 1;
    for (int i = 0; i < 4; i++) {
        m->p[i] = vmem_alloc(v, 4 * MiB);
        cr_assert_not_null(m->p[i]);
        cr_assert_eq(location_of(v, m->p[i]), VMEM_LOC_DEVICE);
        pattern_fill(m->p[i], 4 * MiB, (uint64_t)i + 1);
        m->waits[i] = i == first || i == first + 1;
    }
}

/* The blocks fill_main chose are recorded and freed: they wait. */
static void defer_main(vmem_t *v, main_blocks_t *m)
{
    for (int i = 0; i < 4; i++)
        if (m->waits[i]) {
            cr_assert_eq(vmem_record_stream(v, m->p[i], COPY_STREAM), VMEM_OK);
            cr_assert_eq(vmem_free(v, m->p[i]), VMEM_OK);
        }
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 8 * MiB);
    cr_assert_eq(stats_of(v).device_held, 16 * MiB, "the waiting blocks are held");
}

static void fill_and_defer(vmem_t *v, vmem_backend_kind_t kind, main_blocks_t *m)
{
    fill_main(v, kind, m);
    defer_main(v, m);
}

/* The live main blocks keep their data and the device stays within the
 * limit. */
static void main_blocks_intact(vmem_t *v, const main_blocks_t *m)
{
    for (int i = 0; i < 4; i++)
        if (!m->waits[i])
            cr_assert(pattern_ok(m->p[i], 4 * MiB, (uint64_t)i + 1), "block %d lost its data", i);
    cr_assert_leq(stats_of(v).device_held, 16 * MiB, "the device holds more than the limit");
}

static void main_blocks_free(vmem_t *v, const main_blocks_t *m)
{
    for (int i = 0; i < 4; i++)
        if (!m->waits[i])
            cr_assert_eq(vmem_free(v, m->p[i]), VMEM_OK);
}

static vmem_tag_stats_t tag_stats(vmem_t *v, unsigned tag)
{
    vmem_tag_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    cr_assert_eq(vmem_get_tag_stats(v, tag, &s), VMEM_OK);
    return s;
}

/* Only the waiting blocks can make room: a tagged allocation gives them back
 * to the main arena (oldest first, the CPU waiting for their fences), which
 * gives the memory to the backend, and the tag grows into it, on the
 * device.  On sim-vmm the oldest alone makes room for 4 MiB (the newer one
 * keeps waiting); on sim it shares its region with the newer one, so both go
 * back. */
static void tagged_reclaim(vmem_backend_kind_t kind)
{
    vmem_t *v = tag_instance(kind, 1);
    main_blocks_t m;
    fill_and_defer(v, kind, &m);
    unsigned long long first_waits = kind == VMEM_BACKEND_SIM ? 2 : 1;
    void *t1 = vmem_alloc_tagged(v, 4 * MiB, TAG);
    cr_assert_not_null(t1);
    cr_assert_eq(location_of(v, t1), VMEM_LOC_DEVICE, "the tagged allocation went to host");
    cr_assert_eq(stats_of(v).host_in_use, 0);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), first_waits);
    cr_assert_eq(json_u64(v, "deferredStreamWaits"), 0);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 8 * MiB - first_waits * 4 * MiB);
    pattern_fill(t1, 4 * MiB, 11);
    main_blocks_intact(v, &m);
    CHECK_VMEM(v, "a tagged allocation's reclaim");
    void *t2 = vmem_alloc_tagged(v, 4 * MiB, TAG);
    cr_assert_not_null(t2);
    cr_assert_eq(location_of(v, t2), VMEM_LOC_DEVICE, "the tagged allocation went to host");
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 2);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 0);
    pattern_fill(t2, 4 * MiB, 12);
    vmem_tag_stats_t ts = tag_stats(v, TAG);
    cr_assert_eq(ts.device_held, 8 * MiB);
    cr_assert_eq(ts.host_held, 0);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.spills, 0);
    cr_assert_eq(s.device_in_use, 16 * MiB, "two main and two tagged blocks");
    main_blocks_intact(v, &m);
    cr_assert(pattern_ok(t1, 4 * MiB, 11));
    cr_assert(pattern_ok(t2, 4 * MiB, 12));
    CHECK_VMEM(v, "a second tagged allocation's reclaim");
    cr_assert_eq(vmem_free(v, t1), VMEM_OK);
    cr_assert_eq(vmem_free(v, t2), VMEM_OK);
    main_blocks_free(v, &m);
    CHECK_VMEM(v, "the frees");
    vmem_destroy(v);
}

Test(deferred, a_tagged_allocation_reclaims_the_main_arenas_waiting_blocks_sim_vmm)
{
    tagged_reclaim(VMEM_BACKEND_SIM_VMM);
}
Test(deferred, a_tagged_allocation_reclaims_the_main_arenas_waiting_blocks_sim)
{
    tagged_reclaim(VMEM_BACKEND_SIM);
}

/* Even with every waiting block back there is no room for 12 MiB: the tag
 * spills to host (fallback on) or fails (off), after giving back every
 * waiting block; nothing is lost, and the room they made serves the next
 * tagged allocation on the device. */
static void tagged_reclaim_not_enough(vmem_backend_kind_t kind, int fallback)
{
    vmem_t *v = tag_instance(kind, fallback);
    main_blocks_t m;
    fill_and_defer(v, kind, &m);
    void *t = vmem_alloc_tagged(v, 12 * MiB, TAG);
    if (fallback) {
        cr_assert_not_null(t, "no spill: %s", vmem_strerror(vmem_last_status()));
        cr_assert_eq(location_of(v, t), VMEM_LOC_HOST);
        cr_assert_eq(stats_of(v).spills, 1);
        pattern_fill(t, 12 * MiB, 21);
    } else {
        cr_assert_null(t);
        cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
        cr_assert_eq(stats_of(v).failures, 1);
    }
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 0, "blocks still wait");
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 2);
    cr_assert_eq(tag_stats(v, TAG).device_held, 0, "the tag holds device memory for nothing");
    main_blocks_intact(v, &m);
    CHECK_VMEM(v, "a tagged allocation that did not fit");
    void *u = vmem_alloc_tagged(v, 8 * MiB, TAG);
    cr_assert_not_null(u);
    cr_assert_eq(location_of(v, u), VMEM_LOC_DEVICE);
    pattern_fill(u, 8 * MiB, 22);
    main_blocks_intact(v, &m);
    if (t)
        cr_assert(pattern_ok(t, 12 * MiB, 21));
    cr_assert(pattern_ok(u, 8 * MiB, 22));
    CHECK_VMEM(v, "the next tagged allocation");
    if (t)
        cr_assert_eq(vmem_free(v, t), VMEM_OK);
    cr_assert_eq(vmem_free(v, u), VMEM_OK);
    main_blocks_free(v, &m);
    CHECK_VMEM(v, "the frees");
    vmem_destroy(v);
}

Test(deferred, a_tagged_allocation_that_reclaiming_cannot_fit_spills_sim_vmm)
{
    tagged_reclaim_not_enough(VMEM_BACKEND_SIM_VMM, 1);
}
Test(deferred, a_tagged_allocation_that_reclaiming_cannot_fit_spills_sim)
{
    tagged_reclaim_not_enough(VMEM_BACKEND_SIM, 1);
}
Test(deferred, a_tagged_allocation_that_reclaiming_cannot_fit_fails_sim_vmm)
{
    tagged_reclaim_not_enough(VMEM_BACKEND_SIM_VMM, 0);
}

/* Two streams allocate and free (stream keys on the main arena's chunks);
 * the thread's tag routes an allocation on one of them: the waiting blocks
 * still go back (the CPU waits, as always for a tag) and the tag lands on
 * the device. */
Test(deferred, a_tagged_allocation_reclaims_with_two_streams_sim_vmm)
{
    vmem_t *v = tag_instance(VMEM_BACKEND_SIM_VMM, 1);
    void *s1 = (void *)0x101, *s2 = (void *)0x202;
    void *p[4];
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(p[i] = vmem_alloc_stream(v, 4 * MiB, i % 2 ? s2 : s1));
        pattern_fill(p[i], 4 * MiB, (uint64_t)i + 1);
    }
    cr_assert_eq(vmem_record_stream(v, p[1], COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_record_stream(v, p[2], COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[1], s2), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[2], s1), VMEM_OK);
    unsigned prev;
    cr_assert_eq(vmem_set_tag(v, TAG, &prev), VMEM_OK);
    void *t = vmem_alloc_stream(v, 8 * MiB, s2);
    cr_assert_eq(vmem_set_tag(v, prev, NULL), VMEM_OK);
    cr_assert_not_null(t);
    cr_assert_eq(location_of(v, t), VMEM_LOC_DEVICE, "the tagged allocation went to host");
    cr_assert_eq(tag_stats(v, TAG).device_held, 8 * MiB);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 0);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 2);
    cr_assert_eq(json_u64(v, "deferredStreamWaits"), 0);
    pattern_fill(t, 8 * MiB, 31);
    cr_assert(pattern_ok(p[0], 4 * MiB, 1));
    cr_assert(pattern_ok(p[3], 4 * MiB, 4));
    CHECK_VMEM(v, "a tagged allocation's reclaim with two streams");
    cr_assert(pattern_ok(t, 8 * MiB, 31));
    cr_assert_eq(vmem_free_stream(v, t, s2), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[0], s1), VMEM_OK);
    cr_assert_eq(vmem_free_stream(v, p[3], s2), VMEM_OK);
    CHECK_VMEM(v, "the frees");
    vmem_destroy(v);
}

/* A resume (docs/tags.md) and the main arena's waiting blocks (sim-vmm: the
 * simulated backend that pauses).  The tag's block of tag_bytes is made
 * while the device is empty, filled and paused (`pause`: keep or discard);
 * then the main arena fills the 16 MiB limit and two of its blocks wait.
 * Only they can make room: the resume gives back the oldest first, the CPU
 * waiting for their fences, as many as the tag needs (4 MiB: one, the newer
 * keeps waiting; 8 MiB: both), and maps the tag on the device.  Before, it
 * failed with VMEM_ERR_NOMEM, or with VMEM_RESUME_SPILL left the tag on
 * host, while that memory sat idle. */
static void resume_reclaim(unsigned pause, size_t tag_bytes, unsigned resume_flags)
{
    vmem_t *v = tag_instance(VMEM_BACKEND_SIM_VMM, 1);
    void *t = vmem_alloc_tagged(v, tag_bytes, TAG);
    cr_assert_not_null(t);
    pattern_fill(t, tag_bytes, 41);
    cr_assert_eq(vmem_pause(v, TAG, pause), VMEM_OK);
    cr_assert_eq(tag_stats(v, TAG).device_held, 0);
    main_blocks_t m;
    fill_and_defer(v, VMEM_BACKEND_SIM_VMM, &m);
    vmem_status_t st = vmem_resume_ex(v, TAG, resume_flags);
    cr_assert_eq(st, VMEM_OK, "the resume: %s", vmem_strerror(st));
    vmem_tag_stats_t ts = tag_stats(v, TAG);
    cr_assert_eq(ts.state, VMEM_TAG_ACTIVE);
    cr_assert_eq(ts.device_held, tag_bytes, "the tag is not wholly on the device");
    cr_assert_eq(ts.host_held, 0, "part of the tag stayed on host");
    cr_assert_eq(location_of(v, t), VMEM_LOC_DEVICE);
    if (pause == VMEM_PAUSE_KEEP)
        cr_assert(pattern_ok(t, tag_bytes, 41), "the kept contents were lost");
    unsigned long long waits = tag_bytes / (4 * MiB);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), waits);
    cr_assert_eq(json_u64(v, "deferredStreamWaits"), 0);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 8 * MiB - waits * 4 * MiB,
                 "the resume gave back more (or fewer) waiting blocks than it needed");
    cr_assert_eq(stats_of(v).spills, 0);
    main_blocks_intact(v, &m);
    CHECK_VMEM(v, "a resume's reclaim");
    pattern_fill(t, tag_bytes, 42);
    main_blocks_intact(v, &m);
    cr_assert(pattern_ok(t, tag_bytes, 42));
    cr_assert_eq(vmem_free(v, t), VMEM_OK);
    main_blocks_free(v, &m);
    CHECK_VMEM(v, "the frees");
    vmem_destroy(v);
}

Test(deferred, a_keep_resume_reclaims_the_main_arenas_oldest_waiting_block_sim_vmm)
{
    resume_reclaim(VMEM_PAUSE_KEEP, 4 * MiB, 0);
}
Test(deferred, a_keep_resume_reclaims_the_main_arenas_waiting_blocks_sim_vmm)
{
    resume_reclaim(VMEM_PAUSE_KEEP, 8 * MiB, 0);
}
Test(deferred, a_discard_resume_reclaims_the_main_arenas_waiting_blocks_sim_vmm)
{
    resume_reclaim(VMEM_PAUSE_DISCARD, 8 * MiB, 0);
}
Test(deferred, a_discard_resume_reclaims_the_main_arenas_oldest_waiting_block_sim_vmm)
{
    resume_reclaim(VMEM_PAUSE_DISCARD, 4 * MiB, 0);
}
Test(deferred, a_spilling_resume_reclaims_before_it_leaves_data_on_host_sim_vmm)
{
    resume_reclaim(VMEM_PAUSE_KEEP, 8 * MiB, VMEM_RESUME_SPILL);
}

/* A paused 12 MiB tag cannot fit even with every waiting block back: the
 * resume gives them all back and fails (the tag stays paused, its kept data
 * intact); a resume with VMEM_RESUME_SPILL then maps 8 MiB on the device and
 * leaves 4 on host, nothing waiting. */
Test(deferred, a_resume_that_reclaiming_cannot_fit_fails_then_spills_sim_vmm)
{
    vmem_t *v = tag_instance(VMEM_BACKEND_SIM_VMM, 1);
    void *t = vmem_alloc_tagged(v, 12 * MiB, TAG);
    cr_assert_not_null(t);
    pattern_fill(t, 12 * MiB, 43);
    cr_assert_eq(vmem_pause(v, TAG, VMEM_PAUSE_KEEP), VMEM_OK);
    main_blocks_t m;
    fill_and_defer(v, VMEM_BACKEND_SIM_VMM, &m);
    cr_assert_eq(vmem_resume(v, TAG), VMEM_ERR_NOMEM);
    cr_assert_eq(tag_stats(v, TAG).state, VMEM_TAG_PAUSED_KEEP);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 0, "blocks still wait");
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 2);
    cr_assert_eq(stats_of(v).device_held, 8 * MiB, "the main arena kept the reclaimed memory");
    main_blocks_intact(v, &m);
    cr_assert(pattern_ok(t, 12 * MiB, 43));
    CHECK_VMEM(v, "a resume that did not fit");
    cr_assert_eq(vmem_resume_ex(v, TAG, VMEM_RESUME_SPILL), VMEM_OK);
    vmem_tag_stats_t ts = tag_stats(v, TAG);
    cr_assert_eq(ts.state, VMEM_TAG_ACTIVE);
    cr_assert_eq(ts.device_held, 8 * MiB);
    cr_assert_eq(ts.host_held, 4 * MiB);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 2);
    main_blocks_intact(v, &m);
    cr_assert(pattern_ok(t, 12 * MiB, 43));
    CHECK_VMEM(v, "a resume that spilled");
    cr_assert_eq(vmem_free(v, t), VMEM_OK);
    main_blocks_free(v, &m);
    CHECK_VMEM(v, "the frees");
    vmem_destroy(v);
}

/* The step end's move of a tag's host data back to the device (sim-vmm: a
 * tag's spills lie in host memory of its own range).  The main arena fills
 * the limit, so a tagged block of tag_bytes spills to host; only then do
 * two main blocks wait (on the device, no shrink pending: the step end's own
 * settle leaves them waiting).  The step end gives back as many as the
 * tag's data needs (4 MiB: the oldest; 12 MiB: both, and 8 MiB of it moves
 * back, the rest stays on host), the CPU waiting for them, and moves the
 * data back, contents intact.  Before, it stayed on host. */
static void step_end_reclaim(size_t tag_bytes)
{
    vmem_t *v = tag_instance(VMEM_BACKEND_SIM_VMM, 1);
    main_blocks_t m;
    fill_main(v, VMEM_BACKEND_SIM_VMM, &m);
    void *t = vmem_alloc_tagged(v, tag_bytes, TAG);
    cr_assert_not_null(t);
    cr_assert_eq(location_of(v, t), VMEM_LOC_HOST);
    cr_assert_eq(stats_of(v).spills, 1);
    pattern_fill(t, tag_bytes, 51);
    defer_main(v, &m);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    size_t back = tag_bytes < 8 * MiB ? tag_bytes : 8 * MiB;
    unsigned long long waits = (back + 4 * MiB - 1) / (4 * MiB);
    vmem_tag_stats_t ts = tag_stats(v, TAG);
    cr_assert_eq(ts.device_held, back, "the step end moved %zu bytes back", ts.device_held);
    cr_assert_eq(ts.host_in_use, tag_bytes - back);
    if (back == tag_bytes)
        cr_assert_eq(location_of(v, t), VMEM_LOC_DEVICE);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), waits);
    cr_assert_eq(json_u64(v, "deferredStreamWaits"), 0);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 8 * MiB - waits * 4 * MiB,
                 "the step end gave back more (or fewer) waiting blocks than it needed");
    cr_assert(pattern_ok(t, tag_bytes, 51), "the moved data was lost");
    main_blocks_intact(v, &m);
    CHECK_VMEM(v, "a step end's reclaim");
    cr_assert_eq(vmem_step_end(v), VMEM_OK); /* nothing more to do */
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), waits);
    cr_assert_eq(tag_stats(v, TAG).device_held, back);
    cr_assert(pattern_ok(t, tag_bytes, 51));
    CHECK_VMEM(v, "a second step end");
    cr_assert_eq(vmem_free(v, t), VMEM_OK);
    main_blocks_free(v, &m);
    CHECK_VMEM(v, "the frees");
    vmem_destroy(v);
}

Test(deferred, a_step_end_reclaims_to_move_a_tags_host_data_back_sim_vmm)
{
    step_end_reclaim(4 * MiB);
}
Test(deferred, a_step_end_reclaims_all_waiting_blocks_and_moves_back_what_fits_sim_vmm)
{
    step_end_reclaim(12 * MiB);
}

/* The main arena's own data on host (sim-vmm: spilled in place) comes back
 * at the end of a step that fits into the device memory of its waiting
 * blocks: the step end waits for them (the CPU) when live data on host is to
 * come back.  Before, they kept waiting and the data stayed on host. */
Test(deferred, a_step_end_moves_the_main_arenas_host_data_back_into_waiting_blocks_sim_vmm)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 16 * MiB);
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = vmem_alloc(v, 4 * MiB);
        cr_assert_not_null(p[i]);
        pattern_fill(p[i], 4 * MiB, (uint64_t)i + 1);
    }
    void *h = vmem_alloc(v, 4 * MiB); /* the limit is full: on host */
    cr_assert_not_null(h);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    pattern_fill(h, 4 * MiB, 9);
    for (int i = 1; i <= 2; i++) {
        cr_assert_eq(vmem_record_stream(v, p[i], COPY_STREAM), VMEM_OK);
        cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
    }
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 8 * MiB);
    /* The step did not fit (20 MiB at its peak): the plan keeps what is on
     * host there, and the blocks keep waiting. */
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 8 * MiB);
    /* This one fits (12 MiB): the data comes back into the waiting blocks'
     * memory. */
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(location_of(v, h), VMEM_LOC_DEVICE, "the host data did not come back");
    cr_assert_eq(stats_of(v).host_in_use, 0);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 0);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 2);
    cr_assert_eq(json_u64(v, "deferredStreamWaits"), 0);
    cr_assert_leq(stats_of(v).device_held, 16 * MiB);
    cr_assert(pattern_ok(h, 4 * MiB, 9), "the moved data was lost");
    cr_assert(pattern_ok(p[0], 4 * MiB, 1));
    cr_assert(pattern_ok(p[3], 4 * MiB, 4));
    CHECK_VMEM(v, "a step end that waited for the waiting blocks");
    cr_assert_eq(vmem_free(v, h), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[0]), VMEM_OK);
    cr_assert_eq(vmem_free(v, p[3]), VMEM_OK);
    vmem_destroy(v);
}

/* With nothing on host to bring back, the step end lets them wait (no CPU
 * wait for work that may still run). */
Test(deferred, a_step_end_without_host_data_lets_the_blocks_wait_sim_vmm)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 16 * MiB);
    void *a = vmem_alloc(v, 4 * MiB), *b = vmem_alloc(v, 4 * MiB);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_eq(vmem_record_stream(v, a, COPY_STREAM), VMEM_OK);
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(json_u64(v, "deferredWaitingBytes"), 4 * MiB);
    cr_assert_eq(json_u64(v, "deferredCpuWaits"), 0);
    CHECK_VMEM(v, "a step end with nothing on host");
    cr_assert_eq(vmem_free(v, b), VMEM_OK);
    vmem_destroy(v);
}

/* Random work under a limit: every live block keeps its pattern, and the
 * bytes in use are the live blocks' whatever waits. */
Test(deferred, random_work_under_a_limit)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM_VMM, 48 * MiB);
    enum { N = 64 };
    void *p[N] = {0};
    size_t sz[N] = {0};
    uint64_t rng = 12345;
    for (int it = 0; it < 4000; it++) {
        int i = (int)rng_range(&rng, 0, N - 1);
        if (p[i]) {
            cr_assert(pattern_ok(p[i], sz[i], (uint64_t)i + 1), "block %d lost its data", i);
            if (rng_range(&rng, 0, 1))
                cr_assert_eq(vmem_record_stream(v, p[i], COPY_STREAM), VMEM_OK);
            cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
            p[i] = NULL;
        } else {
            sz[i] = rng_range(&rng, 1, 3 * MiB);
            p[i] = vmem_alloc(v, sz[i]);
            cr_assert_not_null(p[i]);
            pattern_fill(p[i], sz[i], (uint64_t)i + 1);
        }
        if (it % 97 == 0) {
            CHECK_VMEM(v, "step %d", it);
            vmem_stats_t s = stats_of(v);
            size_t live = 0;
            for (int k = 0; k < N; k++) {
                vmem_ptr_info_t info;
                if (p[k] && vmem_ptr_info(v, p[k], &info) == VMEM_OK)
                    live += info.size;
            }
            cr_assert_eq(s.device_in_use + s.host_in_use, live);
        }
    }
    cr_assert_gt(json_u64(v, "deferredFrees"), 0);
    for (int i = 0; i < N; i++)
        if (p[i])
            vmem_free(v, p[i]);
    vmem_destroy(v);
}

/* The engine: many records, frees in random order, FIFO pops. */
Test(deferred, engine_map_and_queue)
{
    deferred_t d;
    deferred_init(&d, 0, 0);
    enum { N = 5000 };
    static uintptr_t order[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(deferred_record(&d, (uintptr_t)(i + 1) * 256, COPY_STREAM), 0);
    cr_assert_eq(d.count, N);
    uint64_t rng = 7;
    for (int i = 0; i < N; i++)
        order[i] = (uintptr_t)(i + 1) * 256;
    for (int i = N - 1; i > 0; i--) {
        size_t j = rng_range(&rng, 0, (size_t)i);
        uintptr_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0) {
            deferred_wait_drop(&d, order[i]);
            cr_assert_null(deferred_find(&d, order[i]));
        } else {
            defer_entry_t sz = {.dev = 256, .req_dev = 200};
            cr_assert_eq(deferred_free(&d, order[i], 0, 0, &sz), 1);
            cr_assert(deferred_find(&d, order[i])->freed);
        }
    }
    for (int i = 0; i < N; i++) /* the map still finds every waiting block */
        if (i % 3)
            cr_assert_not_null(deferred_find(&d, order[i]));
    defer_entry_t e;
    cr_assert_eq(deferred_pop(&d, DEFER_DONE, NULL, &e), 0, "a simulated fence is not done");
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0)
            continue;
        cr_assert_eq(deferred_pop(&d, DEFER_STREAM, NULL, &e), 1);
        cr_assert_eq(e.ptr, order[i], "not in free order");
    }
    cr_assert_eq(d.count, 0);
    cr_assert_eq(d.dev_bytes, 0);
    cr_assert_eq(d.dev_requested, 0);
    cr_assert_eq(deferred_waiting(&d), 0);
    deferred_fini(&d);
}
