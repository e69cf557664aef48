/* Allocation tags, pause and resume on sim-vmm (the whole feature on the
 * CPU): routing, granule isolation, pause keep/discard with byte patterns,
 * the limit, spill on resume, faults, threads, random operations. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../vmm/common.h"
#include "vmem_internal.h"

static vmem_t *make(vmem_backend_kind_t kind, size_t limit, int fallback)
{
    vmem_config_t c;
    vmem_config_init(&c);
    c.backend = kind;
    c.limit = limit;
    c.sim_capacity = 4 * GiB;
    c.host_limit = 2 * GiB;
    c.host_fallback = fallback;
    c.log_level = getenv("TAGS_LOG") ? VMEM_LOG_ERROR : VMEM_LOG_NONE;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&c, &v), VMEM_OK);
    return v;
}

#define CHECK(v) cr_assert_eq(vmem_check(v), VMEM_OK, "vmem_check failed (line %d)", __LINE__)

static vmem_tag_stats_t tstats(vmem_t *v, unsigned tag)
{
    vmem_tag_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_tag_stats(v, tag, &s), VMEM_OK);
    return s;
}

/* Device bytes the simulated device has handed out. */
static size_t device_used(vmem_t *v)
{
    size_t free_b = 0, total = 0;
    cr_assert_eq(backend_mem_info(v->dev_backend, &free_b, &total), VMEM_OK);
    return total - free_b;
}

Test(tags, thread_tag_routes_allocations)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    unsigned prev = 99;
    cr_assert_eq(vmem_get_tag(v), 0);
    cr_assert_eq(vmem_set_tag(v, 3, &prev), VMEM_OK);
    cr_assert_eq(prev, 0);
    cr_assert_eq(vmem_get_tag(v), 3);
    void *a = vmem_alloc(v, MiB);
    void *z = vmem_alloc_tagged(v, MiB, 0); /* tag 0 whatever the thread's tag */
    cr_assert(a && z);
    cr_assert_eq(vmem_set_tag(v, 0, &prev), VMEM_OK);
    cr_assert_eq(prev, 3);
    cr_assert_eq(tstats(v, 3).blocks, 1);
    cr_assert_eq(tstats(v, 3).in_use, MiB);
    cr_assert_eq(tstats(v, 0).blocks, 1);
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, (char *)a + 100, &info), VMEM_OK);
    cr_assert_eq(info.base, a);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert_eq(s.device_in_use, 2 * MiB, "tagged blocks count in the totals");
    CHECK(v);
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    cr_assert_eq(vmem_free(v, a), VMEM_ERR_DOUBLE_FREE);
    cr_assert_eq(vmem_free(v, z), VMEM_OK);
    cr_assert_eq(tstats(v, 3).frees, 1);
    CHECK(v);
    vmem_destroy(v);
}

/* A granule never holds blocks of two tags, and free memory of one tag is
 * never handed to another (the bug torch_memory_saver's users report). */
Test(tags, granules_and_free_memory_stay_with_their_tag)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    enum { N = 600 };
    void *p[N];
    unsigned tag[N];
    size_t size[N];
    uint64_t rng = 7;
    for (int i = 0; i < N; i++) {
        tag[i] = (unsigned)(rng_next(&rng) % 3); /* 0, 1, 2 interleaved */
        size[i] = 256 + rng_next(&rng) % (300 * KiB);
        p[i] = vmem_alloc_tagged(v, size[i], tag[i]);
        cr_assert_not_null(p[i]);
        if (i % 3 == 2) { /* free some, so that free memory of every tag exists */
            int k = (int)(rng_next(&rng) % (unsigned)i);
            if (p[k]) {
                cr_assert_eq(vmem_free(v, p[k]), VMEM_OK);
                p[k] = NULL;
            }
        }
        CHECK(v);
    }
    /* Owner of every granule any live block touches. */
    for (int i = 0; i < N; i++) {
        if (!p[i])
            continue;
        uintptr_t lo = (uintptr_t)p[i] / GRANULE, hi = ((uintptr_t)p[i] + size[i] - 1) / GRANULE;
        for (int j = 0; j < N; j++) {
            if (!p[j] || tag[j] == tag[i])
                continue;
            uintptr_t lo2 = (uintptr_t)p[j] / GRANULE, hi2 = ((uintptr_t)p[j] + size[j] - 1) / GRANULE;
            cr_assert(hi < lo2 || hi2 < lo, "tags %u and %u share a granule (%p, %p)", tag[i],
                      tag[j], p[i], p[j]);
        }
    }
    for (int i = 0; i < N; i++)
        vmem_free(v, p[i]);
    CHECK(v);
    vmem_destroy(v);
}

Test(tags, pause_keep_gives_device_memory_back_and_resume_restores_contents)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    void *base = vmem_alloc_tagged(v, 8 * MiB, 0);
    void *p[20];
    size_t size[20];
    for (int i = 0; i < 20; i++) {
        size[i] = (size_t)(i + 1) * 700 * KiB;
        p[i] = vmem_alloc_tagged(v, size[i], 1);
        cr_assert_not_null(p[i]);
        pattern_fill(p[i], size[i], 100 + (uint64_t)i);
    }
    vmem_free(v, p[3]); /* free memory of the tag goes back, not copied */
    p[3] = NULL;
    size_t held = tstats(v, 1).device_held, used = device_used(v);
    cr_assert(held > 0);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    CHECK(v);
    vmem_tag_stats_t s = tstats(v, 1);
    cr_assert_eq(s.state, VMEM_TAG_PAUSED_KEEP);
    cr_assert_eq(s.device_held, 0, "a paused tag holds no device memory");
    cr_assert(s.host_held > 0 && s.host_held <= held);
    cr_assert_eq(s.host_in_use, s.in_use);
    cr_assert_eq(device_used(v), used - held, "the device got the tag's memory back");
    cr_assert_eq(s.bytes_to_host, s.host_held);
    /* Tag 0 and other tags keep working meanwhile. */
    void *q = vmem_alloc_tagged(v, 3 * MiB, 2);
    cr_assert_not_null(q);
    cr_assert_null(vmem_alloc_tagged(v, MiB, 1));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_BUSY);
    cr_assert_eq(vmem_free(v, p[5]), VMEM_OK, "blocks of a paused tag may be freed");
    p[5] = NULL;
    CHECK(v);
    cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    CHECK(v);
    s = tstats(v, 1);
    cr_assert_eq(s.state, VMEM_TAG_ACTIVE);
    cr_assert_eq(s.host_held, 0);
    cr_assert(s.device_held > 0);
    cr_assert_eq(s.pauses, 1);
    cr_assert_eq(s.resumes, 1);
    for (int i = 0; i < 20; i++)
        if (p[i])
            cr_assert(pattern_ok(p[i], size[i], 100 + (uint64_t)i), "block %d lost its data", i);
    void *again = vmem_alloc_tagged(v, MiB, 1);
    cr_assert_not_null(again);
    vmem_free(v, again);
    for (int i = 0; i < 20; i++)
        vmem_free(v, p[i]);
    vmem_free(v, q);
    vmem_free(v, base);
    CHECK(v);
    vmem_destroy(v);
}

Test(tags, pause_discard_keeps_addresses_and_frees_everything)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    void *p = vmem_alloc_tagged(v, 33 * MiB, 4);
    void *r = vmem_alloc_tagged(v, 5 * MiB, 4);
    cr_assert(p && r);
    memset(p, 1, 33 * MiB);
    size_t used = device_used(v), held = tstats(v, 4).device_held;
    cr_assert_eq(vmem_pause(v, 4, VMEM_PAUSE_DISCARD), VMEM_OK);
    CHECK(v);
    vmem_tag_stats_t s = tstats(v, 4);
    cr_assert_eq(s.state, VMEM_TAG_PAUSED_DISCARD);
    cr_assert_eq(s.device_held, 0);
    cr_assert_eq(s.host_held, 0);
    cr_assert(s.reserved >= 38 * MiB);
    cr_assert_eq(device_used(v), used - held);
    /* The instance's statistics: the discarded blocks are neither device
     * bytes in use nor host bytes (device_in_use once counted them, so
     * device_unused = held - in_use wrapped around). */
    vmem_stats_t is = {.size = sizeof is};
    cr_assert_eq(vmem_get_stats(v, &is), VMEM_OK);
    cr_assert_leq(is.device_in_use, is.device_held, "device in use %zu, held %zu",
                  is.device_in_use, is.device_held);
    cr_assert_leq(is.device_unused, is.device_held);
    cr_assert_eq(is.host_in_use, 0);
    /* The reserved addresses are not handed to anyone else. */
    void *other = vmem_alloc_tagged(v, 64 * MiB, 5);
    cr_assert_not_null(other);
    cr_assert((char *)other + 64 * MiB <= (char *)p || (char *)other >= (char *)p + 33 * MiB);
    cr_assert_eq(vmem_free(v, r), VMEM_OK);
    CHECK(v);
    cr_assert_eq(vmem_resume(v, 4), VMEM_OK);
    CHECK(v);
    s = tstats(v, 4);
    cr_assert_eq(s.reserved, 0);
    cr_assert(s.device_held >= 33 * MiB);
    memset(p, 2, 33 * MiB); /* mapped again, same address */
    cr_assert_eq(((unsigned char *)p)[33 * MiB - 1], 2);
    vmem_free(v, p);
    vmem_free(v, other);
    CHECK(v);
    vmem_destroy(v);
}

Test(tags, discard_over_keep_and_pause_twice)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    void *p = vmem_alloc_tagged(v, 10 * MiB, 1);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert(tstats(v, 1).host_held > 0);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_DISCARD), VMEM_OK);
    CHECK(v);
    cr_assert_eq(tstats(v, 1).host_held, 0, "discard over keep drops the host copy");
    cr_assert_eq(tstats(v, 1).state, VMEM_TAG_PAUSED_DISCARD);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert_eq(tstats(v, 1).state, VMEM_TAG_PAUSED_DISCARD);
    cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    cr_assert_eq(vmem_pause(v, 9, VMEM_PAUSE_KEEP), VMEM_OK, "a tag never used");
    cr_assert_null(vmem_alloc_tagged(v, MiB, 9), "... is paused too");
    cr_assert_eq(vmem_resume(v, 9), VMEM_OK);
    vmem_free(v, vmem_alloc_tagged(v, MiB, 9));
    vmem_free(v, p);
    CHECK(v);
    vmem_destroy(v);
}

Test(tags, bad_arguments_and_unsupported_backends)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    cr_assert_eq(vmem_pause(v, 0, VMEM_PAUSE_KEEP), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_pause(v, 1, 0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP | VMEM_PAUSE_DISCARD), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_resume_ex(v, 1, 8), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_pause(NULL, 1, VMEM_PAUSE_KEEP), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_set_tag(NULL, 1, NULL), VMEM_ERR_INVALID);
    vmem_tag_stats_t s = {.size = 4};
    cr_assert_eq(vmem_get_tag_stats(v, 1, &s), VMEM_ERR_INVALID);
    for (unsigned t = 1; t <= VMEM_MAX_TAGS; t++)
        vmem_free(v, vmem_alloc_tagged(v, 256, t));
    cr_assert_null(vmem_alloc_tagged(v, 256, VMEM_MAX_TAGS + 1));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_INVALID);
    CHECK(v);
    vmem_destroy(v);
    /* Separate regions (sim, like cuda): tags work, pause does not. */
    v = make(VMEM_BACKEND_SIM, GiB, 1);
    void *p = vmem_alloc_tagged(v, MiB, 1);
    cr_assert_not_null(p);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_ERR_UNSUPPORTED);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_DISCARD), VMEM_ERR_UNSUPPORTED);
    cr_assert_eq(vmem_free(v, p), VMEM_OK);
    CHECK(v);
    vmem_destroy(v);
}

Test(tags, the_limit_caps_all_tags_together)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, 64 * MiB, 0);
    void *a = vmem_alloc_tagged(v, 40 * MiB, 1);
    cr_assert_not_null(a);
    cr_assert_null(vmem_alloc_tagged(v, 40 * MiB, 2), "two tags above the limit");
    cr_assert_null(vmem_alloc_tagged(v, 40 * MiB, 0));
    void *b = vmem_alloc_tagged(v, 20 * MiB, 2);
    cr_assert_not_null(b);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert_leq(s.device_held, 64 * MiB);
    CHECK(v);
    /* A shrink gives back the tags' free memory. */
    vmem_free(v, b);
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 48 * MiB, &applied), VMEM_OK);
    vmem_get_stats(v, &s);
    cr_assert_leq(s.device_held, 48 * MiB);
    cr_assert_eq(vmem_set_limit(v, 16 * MiB, &applied), VMEM_PENDING, "tag 1's 40 MiB is live");
    CHECK(v);
    vmem_free(v, a);
    vmem_destroy(v);
}

Test(tags, resume_beyond_the_limit_fails_clearly_or_spills)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, 64 * MiB, 1);
    void *a = vmem_alloc_tagged(v, 40 * MiB, 1);
    pattern_fill(a, 40 * MiB, 11);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    void *b = vmem_alloc_tagged(v, 40 * MiB, 2); /* in the memory tag 1 gave back */
    cr_assert_not_null(b);
    cr_assert_eq(tstats(v, 2).host_in_use, 0, "on the device");
    cr_assert_eq(vmem_resume(v, 1), VMEM_ERR_NOMEM);
    cr_assert_eq(tstats(v, 1).state, VMEM_TAG_PAUSED_KEEP, "still paused");
    CHECK(v);
    cr_assert_eq(vmem_resume_ex(v, 1, VMEM_RESUME_SPILL), VMEM_OK);
    CHECK(v);
    vmem_tag_stats_t s = tstats(v, 1);
    cr_assert_eq(s.state, VMEM_TAG_ACTIVE);
    cr_assert(s.host_in_use > 0, "what does not fit stays on host");
    cr_assert(pattern_ok(a, 40 * MiB, 11));
    vmem_stats_t st = {.size = sizeof st};
    vmem_get_stats(v, &st);
    cr_assert_leq(st.device_held, 64 * MiB);
    /* Room again: the step end brings it back. */
    vmem_free(v, b);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    s = tstats(v, 1);
    cr_assert_eq(s.host_in_use, 0, "moved back at the step end");
    cr_assert(pattern_ok(a, 40 * MiB, 11));
    /* Discard, then resume partly on host. */
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_DISCARD), VMEM_OK);
    b = vmem_alloc_tagged(v, 40 * MiB, 2);
    cr_assert_eq(vmem_resume(v, 1), VMEM_ERR_NOMEM);
    cr_assert_eq(vmem_resume_ex(v, 1, VMEM_RESUME_SPILL), VMEM_OK);
    CHECK(v);
    s = tstats(v, 1);
    cr_assert(s.host_held > 0 && s.device_held > 0);
    memset(a, 3, 40 * MiB); /* all of it mapped */
    vmem_free(v, a);
    vmem_free(v, b);
    CHECK(v);
    vmem_destroy(v);
}

/* 1 if the kernel can read a byte at p (into_p 0: write(2) from p into a
 * pipe) or write one there (1: read(2) from a pipe into p), 0 if it cannot
 * (EFAULT).  No signal, so this also works under ASan, which turns a
 * SIGSEGV into an abort. */
static int kernel_can(void *p, int into_p)
{
    int fd[2];
    char c = 7;
    cr_assert_eq(pipe(fd), 0);
    if (into_p)
        cr_assert_eq(write(fd[1], &c, 1), 1);
    ssize_t n = into_p ? read(fd[0], p, 1) : write(fd[1], p, 1);
    int e = errno;
    close(fd[0]);
    close(fd[1]);
    cr_assert(n == 1 || (n < 0 && e == EFAULT), "%s: %zd, errno %d", into_p ? "read" : "write", n,
              e);
    return n == 1;
}

static int readable(void *p) { return kernel_can(p, 0); }
static int writable(void *p) { return kernel_can(p, 1); }

/* VMEM_PAUSE_GUARD=1: a kept block can be neither read nor written while its
 * tag is paused (an access faults); resumed, it can, contents intact. */
Test(tags, guarded_pause_makes_kept_blocks_inaccessible)
{
    setenv("VMEM_PAUSE_GUARD", "1", 1);
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, 256 * MiB, 1);
    char *a = vmem_alloc_tagged(v, 4 * MiB, 1);
    cr_assert_not_null(a);
    pattern_fill(a, 4 * MiB, 21);
    cr_assert(readable(a + 12345) && writable(a + 4 * MiB - 1), "active: accessible");
    pattern_fill(a, 4 * MiB, 21);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert_eq(tstats(v, 1).host_in_use, 4 * MiB, "kept on host");
    cr_assert(!readable(a + 12345), "a guarded paused block was readable");
    cr_assert(!writable(a + 12345), "a guarded paused block was writable");
    cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    cr_assert(readable(a) && pattern_ok(a, 4 * MiB, 21), "resumed: contents intact");
    /* Switch values as everywhere (on/off, true/false, ...); one the
     * parser refuses leaves the pause unguarded (and is logged). */
    static const char *const off[] = {NULL, "off", "false", "maybe"};
    for (int i = 0; i < 4; i++) {
        if (off[i])
            setenv("VMEM_PAUSE_GUARD", off[i], 1);
        else
            unsetenv("VMEM_PAUSE_GUARD");
        cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
        cr_assert(readable(a + 12345), "VMEM_PAUSE_GUARD=%s: a kept paused block is readable",
                  off[i] ? off[i] : "(unset)");
        cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    }
    setenv("VMEM_PAUSE_GUARD", "on", 1);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert(!readable(a + 12345), "VMEM_PAUSE_GUARD=on: guarded");
    cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    unsetenv("VMEM_PAUSE_GUARD");
    vmem_free(v, a);
    CHECK(v);
    vmem_destroy(v);
}

/* Guarded pauses keep contents across resume, a free while paused, and a
 * resume that leaves part on host (that part readable and writable at once);
 * without the variable a paused block stays readable host memory. */
Test(tags, guarded_pause_keeps_contents_and_opens_what_stays_on_host)
{
    setenv("VMEM_PAUSE_GUARD", "1", 1);
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, 64 * MiB, 1);
    char *a = vmem_alloc_tagged(v, 24 * MiB, 1), *b = vmem_alloc_tagged(v, 16 * MiB, 1);
    cr_assert(a && b);
    pattern_fill(a, 24 * MiB, 31);
    pattern_fill(b, 16 * MiB, 32);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert_eq(vmem_free(v, b), VMEM_OK); /* freed while paused */
    CHECK(v);
    cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    cr_assert(pattern_ok(a, 24 * MiB, 31));
    /* Paused again; tag 2 takes the room, so the resume spills. */
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    void *c = vmem_alloc_tagged(v, 56 * MiB, 2);
    cr_assert_not_null(c);
    cr_assert_eq(vmem_resume_ex(v, 1, VMEM_RESUME_SPILL), VMEM_OK);
    cr_assert(tstats(v, 1).host_in_use > 0, "part of the tag stays on host");
    cr_assert(pattern_ok(a, 24 * MiB, 31), "readable where it stays on host");
    pattern_fill(a, 24 * MiB, 33); /* and writable */
    cr_assert(pattern_ok(a, 24 * MiB, 33));
    CHECK(v);
    unsetenv("VMEM_PAUSE_GUARD");
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert(pattern_ok(a, 24 * MiB, 33), "unguarded: a paused block is readable host memory");
    cr_assert_eq(vmem_resume_ex(v, 1, VMEM_RESUME_SPILL), VMEM_OK);
    vmem_free(v, a);
    vmem_free(v, c);
    CHECK(v);
    vmem_destroy(v);
}

Test(tags, driver_failures_leave_the_tag_consistent)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    void *a = vmem_alloc_tagged(v, 70 * MiB, 1);
    void *b = vmem_alloc_tagged(v, 3 * MiB, 1);
    pattern_fill(a, 70 * MiB, 5);
    pattern_fill(b, 3 * MiB, 6);
    /* Keep: the move to host fails: the tag stays active, data intact. */
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_HOST, 1, 0, 0), VMEM_OK);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_ERR_BACKEND);
    CHECK(v);
    cr_assert_eq(tstats(v, 1).state, VMEM_TAG_ACTIVE);
    cr_assert_eq(tstats(v, 1).host_held, 0);
    cr_assert(pattern_ok(a, 70 * MiB, 5) && pattern_ok(b, 3 * MiB, 6));
    /* Discard: mapping device memory back fails: still paused, retry works. */
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_DISCARD), VMEM_OK);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 1, 0, 0), VMEM_OK);
    cr_assert_eq(vmem_resume(v, 1), VMEM_ERR_BACKEND);
    CHECK(v);
    cr_assert_eq(tstats(v, 1).state, VMEM_TAG_PAUSED_DISCARD);
    cr_assert_eq(vmem_resume(v, 1), VMEM_OK);
    CHECK(v);
    /* Keep: the move back fails half way: resumed, the rest on host, intact. */
    pattern_fill(a, 70 * MiB, 7);
    pattern_fill(b, 3 * MiB, 8);
    cr_assert_eq(vmem_pause(v, 1, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 2, 0, 0), VMEM_OK);
    vmem_status_t st = vmem_resume(v, 1);
    CHECK(v);
    cr_assert_eq(tstats(v, 1).state, VMEM_TAG_ACTIVE);
    cr_assert(st == VMEM_ERR_BACKEND || st == VMEM_OK);
    cr_assert(pattern_ok(a, 70 * MiB, 7) && pattern_ok(b, 3 * MiB, 8));
    vmem_free(v, a);
    vmem_free(v, b);
    CHECK(v);
    vmem_destroy(v);
}

/* Another thread allocates in its own tag while tags are paused and resumed. */
typedef struct worker {
    vmem_t *v;
    unsigned tag;
    int iters;
    int bad;
} worker_t;

static void *worker_run(void *arg)
{
    worker_t *w = arg;
    vmem_set_tag(w->v, w->tag, NULL);
    uint64_t rng = w->tag;
    void *p[16] = {0};
    size_t sz[16] = {0};
    for (int i = 0; i < w->iters; i++) {
        int k = (int)(rng_next(&rng) % 16);
        if (p[k]) {
            w->bad += !pattern_ok(p[k], sz[k], (uint64_t)(uintptr_t)p[k]);
            vmem_free(w->v, p[k]);
            p[k] = NULL;
        } else {
            sz[k] = 4096 + rng_next(&rng) % (3 * MiB);
            p[k] = vmem_alloc(w->v, sz[k]);
            if (p[k])
                pattern_fill(p[k], sz[k], (uint64_t)(uintptr_t)p[k]);
        }
    }
    for (int k = 0; k < 16; k++)
        vmem_free(w->v, p[k]);
    return NULL;
}

Test(tags, concurrent_allocation_on_other_tags)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, 256 * MiB, 1);
    void *mine = vmem_alloc_tagged(v, 20 * MiB, 1);
    pattern_fill(mine, 20 * MiB, 77);
    worker_t w[2] = {{v, 2, 3000, 0}, {v, 0, 3000, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker_run, &w[i]);
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(vmem_pause(v, 1, i % 3 ? VMEM_PAUSE_KEEP : VMEM_PAUSE_DISCARD), VMEM_OK);
        vmem_status_t st = vmem_resume_ex(v, 1, VMEM_RESUME_SPILL);
        cr_assert_eq(st, VMEM_OK);
        if (i % 3 == 0)
            pattern_fill(mine, 20 * MiB, 77); /* discarded: write it again */
        cr_assert(pattern_ok(mine, 20 * MiB, 77), "round %d", i);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(w[0].bad + w[1].bad, 0);
    CHECK(v);
    vmem_free(v, mine);
    vmem_destroy(v);
}

/* Random operations over three tags and tag 0 with byte patterns checked
 * across pauses and resumes, vmem_check after every operation. */
static void random_run(uint64_t seed, size_t limit, int ops)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, limit, 1);
    enum { N = 96, T = 4 };
    void *p[N] = {0};
    size_t sz[N] = {0};
    unsigned tg[N] = {0};
    uint64_t pat[N] = {0};
    int paused[T] = {0}; /* 0, 1 keep, 2 discard */
    uint64_t rng = seed;
    for (int op = 0; op < ops; op++) {
        unsigned r = (unsigned)(rng_next(&rng) % 100);
        int k = (int)(rng_next(&rng) % N);
        unsigned tag = (unsigned)(rng_next(&rng) % T);
        if (r < 70) {
            if (p[k]) {
                if (paused[tg[k]] != 2)
                    cr_assert(pattern_ok(p[k], sz[k], pat[k]), "seed %llu op %d: block of tag %u",
                              (unsigned long long)seed, op, tg[k]);
                cr_assert_eq(vmem_free(v, p[k]), VMEM_OK);
                p[k] = NULL;
            } else {
                size_t s = rng_next(&rng) % 4 ? 256 + rng_next(&rng) % (512 * KiB)
                                              : MiB + rng_next(&rng) % (12 * MiB);
                void *q = vmem_alloc_tagged(v, s, tag);
                if (paused[tag] && tag) {
                    cr_assert_null(q);
                    cr_assert_eq(vmem_last_status(), VMEM_ERR_BUSY);
                } else if (q) {
                    p[k] = q;
                    sz[k] = s;
                    tg[k] = tag;
                    pat[k] = rng_next(&rng);
                    pattern_fill(q, s, pat[k]);
                }
            }
        } else if (r < 82 && tag) {
            int keep = rng_next(&rng) % 3 != 0;
            vmem_status_t st = vmem_pause(v, tag, keep ? VMEM_PAUSE_KEEP : VMEM_PAUSE_DISCARD);
            cr_assert(st == VMEM_OK || (keep && st == VMEM_ERR_NOMEM), "pause: %d", st);
            if (st == VMEM_OK && (!paused[tag] || !keep))
                paused[tag] = keep ? 1 : 2;
        } else if (r < 94 && tag) {
            int spill = rng_next(&rng) % 2;
            vmem_status_t st = vmem_resume_ex(v, tag, spill ? VMEM_RESUME_SPILL : 0);
            cr_assert(st == VMEM_OK || st == VMEM_ERR_NOMEM, "resume: %d", st);
            if (st == VMEM_OK && paused[tag]) {
                if (paused[tag] == 2) /* contents undefined: write them again */
                    for (int i = 0; i < N; i++)
                        if (p[i] && tg[i] == tag)
                            pattern_fill(p[i], sz[i], pat[i]);
                paused[tag] = 0;
            }
            cr_assert_eq(tstats(v, tag).state == VMEM_TAG_ACTIVE, paused[tag] == 0);
        } else if (r < 97) {
            cr_assert_eq(vmem_step_end(v), VMEM_OK);
        } else {
            size_t applied;
            vmem_set_limit(v, limit / 2 + rng_next(&rng) % (limit / 2), &applied);
        }
        cr_assert_eq(vmem_check(v), VMEM_OK, "seed %llu op %d", (unsigned long long)seed, op);
        for (unsigned t = 1; t < T; t++)
            if (paused[t])
                cr_assert_eq(tstats(v, t).device_held, 0);
    }
    for (unsigned t = 1; t < T; t++)
        vmem_resume_ex(v, t, VMEM_RESUME_SPILL);
    for (int i = 0; i < N; i++) {
        if (p[i] && paused[tg[i]] != 2)
            cr_assert(pattern_ok(p[i], sz[i], pat[i]));
        vmem_free(v, p[i]);
    }
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
}

Test(tags, random_operations_with_patterns, .timeout = 300)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        random_run(seed, seed % 2 ? 96 * MiB : 512 * MiB, 1500);
}

Test(tags, json_lists_the_tags)
{
    vmem_t *v = make(VMEM_BACKEND_SIM_VMM, GiB, 1);
    void *p = vmem_alloc_tagged(v, MiB, 6);
    vmem_pause(v, 6, VMEM_PAUSE_DISCARD);
    char buf[8192];
    cr_assert_eq(vmem_stats_json(v, buf, sizeof buf, NULL), VMEM_OK);
    cr_assert(strstr(buf, "\"tags\":[{\"tag\":6,\"state\":\"paused-discard\""), "%s", buf);
    vmem_free(v, p);
    vmem_destroy(v);
}
