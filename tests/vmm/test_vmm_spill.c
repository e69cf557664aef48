/* Pointer-stable spill through the public API on sim-vmm: blocks that do
 * not fit under the limit are backed by host memory at device addresses,
 * come back to the device at vmem_step_end when the limit allows, and a
 * shrink below the live bytes evicts at the step boundary.  vmem_check runs
 * after every operation. */
#include "common.h"

#include "vmem_internal.h"

static vmem_t *open_sim(vmem_backend_kind_t kind, size_t limit, size_t host_limit)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = kind;
    cfg.limit = limit;
    cfg.start_cap = GiB;
    cfg.host_limit = host_limit;
    cfg.sim_capacity = 4 * GiB;
    cfg.log_level = VMEM_LOG_NONE;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    return v;
}

#define CHECK(v) cr_assert_eq(vmem_check(v), VMEM_OK, "vmem_check failed")

static vmem_location_t where(vmem_t *v, void *p)
{
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, p, &info), VMEM_OK);
    cr_assert_eq(info.base, p);
    return info.location;
}

static vmem_stats_t stats(vmem_t *v)
{
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    return s;
}

Test(vmm_api, spill_keeps_the_address_and_comes_back)
{
    vmem_t *v = open_sim(VMEM_BACKEND_SIM_VMM, 64 * MiB, GiB);
    void *d = vmem_alloc(v, 48 * MiB);
    void *s = vmem_alloc(v, 48 * MiB); /* does not fit under 64 MiB */
    cr_assert(d && s);
    CHECK(v);
    pattern_fill(d, 48 * MiB, 1);
    pattern_fill(s, 48 * MiB, 2);
    cr_assert_eq(where(v, d), VMEM_LOC_DEVICE);
    cr_assert_eq(where(v, s), VMEM_LOC_HOST);
    vmem_stats_t st = stats(v);
    cr_assert_eq(st.spills, 1);
    cr_assert_leq(st.device_held, 64 * MiB);
    cr_assert_gt(st.host_held, 0, "host memory mapped in place must show in the statistics");
    /* In place: inside the device arena, not in the separate host arena. */
    cr_assert(bfc_contains(&v->dev, s));
    cr_assert_eq(v->host.held, 0);

    cr_assert_eq(vmem_step_end(v), VMEM_OK); /* limit unchanged: stays */
    CHECK(v);
    cr_assert_eq(where(v, s), VMEM_LOC_HOST);

    cr_assert_eq(vmem_set_limit(v, 128 * MiB, NULL), VMEM_OK);
    cr_assert_eq(where(v, s), VMEM_LOC_HOST, "moves wait for the step boundary");
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    cr_assert_eq(where(v, s), VMEM_LOC_DEVICE);
    cr_assert(pattern_ok(s, 48 * MiB, 2), "data lost coming back");
    cr_assert(pattern_ok(d, 48 * MiB, 1));
    st = stats(v);
    cr_assert_eq(st.host_held, 0, "no byte may be left on host");
    cr_assert_leq(st.device_held, 128 * MiB);
    cr_assert_eq(vmem_free(v, s), VMEM_OK);
    cr_assert_eq(vmem_free(v, d), VMEM_OK);
    CHECK(v);
    vmem_destroy(v);
}

Test(vmm_api, shrink_below_live_evicts_at_step_end)
{
    vmem_t *v = open_sim(VMEM_BACKEND_SIM_VMM, 256 * MiB, GiB);
    void *blk[4];
    for (int i = 0; i < 4; i++) {
        blk[i] = vmem_alloc(v, 32 * MiB);
        cr_assert_not_null(blk[i]);
        pattern_fill(blk[i], 32 * MiB, (uint64_t)i);
    }
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 64 * MiB, &applied), VMEM_PENDING);
    cr_assert_gt(applied, 64 * MiB);
    CHECK(v);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    vmem_stats_t st = stats(v);
    cr_assert_eq(st.pending_limit, 0, "the step boundary completes the shrink");
    cr_assert_leq(st.device_held, 64 * MiB);
    cr_assert_eq(st.host_held, 64 * MiB);
    cr_assert_eq(where(v, blk[0]), VMEM_LOC_HOST);
    cr_assert_eq(where(v, blk[1]), VMEM_LOC_HOST);
    cr_assert_eq(where(v, blk[2]), VMEM_LOC_DEVICE);
    cr_assert_eq(where(v, blk[3]), VMEM_LOC_DEVICE);
    for (int i = 0; i < 4; i++)
        cr_assert(pattern_ok(blk[i], 32 * MiB, (uint64_t)i));
    /* The job goes on: new blocks past the limit spill in place. */
    void *extra = vmem_alloc(v, 8 * MiB);
    cr_assert_not_null(extra);
    cr_assert_eq(where(v, extra), VMEM_LOC_HOST);
    CHECK(v);
    cr_assert_eq(vmem_free(v, extra), VMEM_OK);
    /* Raised again: everything back within one step. */
    cr_assert_eq(vmem_set_limit(v, 256 * MiB, NULL), VMEM_OK);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    st = stats(v);
    cr_assert_eq(st.host_held, 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(where(v, blk[i]), VMEM_LOC_DEVICE);
        cr_assert(pattern_ok(blk[i], 32 * MiB, (uint64_t)i));
        cr_assert_eq(vmem_free(v, blk[i]), VMEM_OK);
    }
    CHECK(v);
    vmem_destroy(v);
}

/* docs/vmm.md (issue 16): eviction moves only the granules it needs, so a
 * block may be partly on host; its bytes count where they lie, and
 * vmem_ptr_info reports it on host.  A 48 MiB block under a 10 MiB limit:
 * 38 MiB go to host, 10 MiB stay on the device. */
Test(vmm_api, shrink_evicts_only_the_granules_needed)
{
    vmem_t *v = open_sim(VMEM_BACKEND_SIM_VMM, 64 * MiB, GiB);
    void *b = vmem_alloc(v, 48 * MiB);
    cr_assert_not_null(b);
    pattern_fill(b, 48 * MiB, 7);
    cr_assert_eq(vmem_set_limit(v, 10 * MiB, NULL), VMEM_PENDING);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    vmem_stats_t st = stats(v);
    cr_assert_eq(st.pending_limit, 0);
    cr_assert_eq(st.device_held, 10 * MiB, "the device keeps what the limit allows");
    cr_assert_eq(st.host_held, 38 * MiB, "only the excess moves");
    cr_assert_eq(st.device_in_use, 10 * MiB, "bytes count where they lie");
    cr_assert_eq(st.host_in_use, 38 * MiB);
    cr_assert_eq(where(v, b), VMEM_LOC_HOST, "a block with any byte on host is reported there");
    cr_assert(pattern_ok(b, 48 * MiB, 7));
    cr_assert_eq(vmem_set_limit(v, 64 * MiB, NULL), VMEM_OK);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    st = stats(v);
    cr_assert_eq(st.host_held, 0);
    cr_assert_eq(where(v, b), VMEM_LOC_DEVICE);
    cr_assert(pattern_ok(b, 48 * MiB, 7));
    cr_assert_eq(vmem_free(v, b), VMEM_OK);
    vmem_destroy(v);
}

Test(vmm_api, page_granular_shrink_applies_at_once)
{
    vmem_t *v = open_sim(VMEM_BACKEND_SIM_VMM, GiB, GiB);
    void *blk[128];
    for (int i = 0; i < 128; i++) {
        blk[i] = vmem_alloc(v, 2 * MiB);
        cr_assert_not_null(blk[i]);
    }
    for (int i = 0; i < 128; i += 2)
        cr_assert_eq(vmem_free(v, blk[i]), VMEM_OK);
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 128 * MiB, &applied), VMEM_OK);
    cr_assert_leq(applied, 128 * MiB);
    CHECK(v);
    cr_assert_eq(stats(v).host_held, 0, "a shrink of free granules moves nothing");
    for (int i = 1; i < 128; i += 2)
        cr_assert_eq(vmem_free(v, blk[i]), VMEM_OK);
    vmem_destroy(v);
}

Test(vmm_api, host_limit_covers_both_kinds_of_host_memory)
{
    vmem_t *v = open_sim(VMEM_BACKEND_SIM_VMM, 16 * MiB, 32 * MiB);
    void *d = vmem_alloc(v, 16 * MiB);
    void *s1 = vmem_alloc(v, 24 * MiB);
    cr_assert(d && s1);
    cr_assert_eq(where(v, s1), VMEM_LOC_HOST);
    void *s2 = vmem_alloc(v, 16 * MiB); /* 24 + 16 > 32 MiB of host */
    cr_assert_null(s2);
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    CHECK(v);
    cr_assert_leq(stats(v).host_held, 32 * MiB);
    vmem_free(v, s1);
    vmem_free(v, d);
    vmem_destroy(v);
}

Test(vmm_api, sim_keeps_the_separate_host_arena)
{
    vmem_t *v = open_sim(VMEM_BACKEND_SIM, 64 * MiB, GiB);
    void *d = vmem_alloc(v, 48 * MiB);
    void *s = vmem_alloc(v, 48 * MiB);
    cr_assert(d && s);
    cr_assert_eq(where(v, s), VMEM_LOC_HOST);
    cr_assert(!bfc_contains(&v->dev, s), "sim has no host backing in place");
    cr_assert_gt(v->host.held, 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    vmem_free(v, s);
    vmem_free(v, d);
    vmem_destroy(v);
}

Test(vmm_api, host_fallback_off_means_no_spill_and_no_eviction)
{
    vmem_t *v = open_sim(VMEM_BACKEND_SIM_VMM, 16 * MiB, GiB);
    cr_assert_eq(vmem_set_host_fallback(v, 0), VMEM_OK);
    void *d = vmem_alloc(v, 16 * MiB);
    cr_assert_not_null(d);
    cr_assert_null(vmem_alloc(v, 4 * MiB));
    cr_assert_eq(stats(v).host_held, 0);
    CHECK(v);
    /* A shrink below the live bytes waits for frees, as with sim. */
    cr_assert_eq(vmem_set_limit(v, 8 * MiB, NULL), VMEM_PENDING);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    CHECK(v);
    vmem_stats_t s = stats(v);
    cr_assert_eq(s.host_held, 0);
    cr_assert_eq(s.pending_limit, 8 * MiB);
    cr_assert_eq(vmem_free(v, d), VMEM_OK);
    cr_assert_eq(stats(v).pending_limit, 0);
    vmem_destroy(v);
}
