/*
 * The contract suite, run over every backend: sim and sim-vmm always, cuda
 * and vmm where a GPU is found (skipped with a message elsewhere).
 *
 * On simulated backends every live block holds a distinct byte pattern,
 * verified before it is freed, so overlapping blocks are caught; on real
 * devices (whose memory the CPU cannot write) overlap is checked on the
 * address ranges only.  vmem_check runs after every operation.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

typedef struct backend_param {
    vmem_backend_kind_t kind;
} backend_param_t;

static backend_param_t all_backends[] = {
    {VMEM_BACKEND_SIM},
    {VMEM_BACKEND_SIM_VMM},
    {VMEM_BACKEND_CUDA},
    {VMEM_BACKEND_VMM},
};
#define NBACKENDS (sizeof all_backends / sizeof all_backends[0])

static int is_simulated(vmem_backend_kind_t k)
{
    return k == VMEM_BACKEND_SIM || k == VMEM_BACKEND_SIM_VMM;
}

/* A GPU is visible to this process: the NVIDIA driver lists one and
 * CUDA_VISIBLE_DEVICES does not hide them all. */
static int gpu_visible(void)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && (!*vis || !strcmp(vis, "-1") || !strcasecmp(vis, "none")))
        return 0;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    int n = 0;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            n += e->d_name[0] != '.';
        closedir(d);
    }
    return n > 0 || access("/dev/nvidia0", F_OK) == 0;
}

/* Creates an instance on the backend, or skips the test with the reason:
 * CUDA not built, no GPU, or (vmm only) the backend not available on this
 * GPU.  cuda on a machine with a GPU must come up. */
static vmem_t *open_backend(vmem_backend_kind_t kind, size_t limit, size_t host_limit,
                            log_capture_t *cap)
{
    if (!is_simulated(kind)) {
#ifndef VMEM_TEST_HAVE_CUDA
        cr_skip_test("backend %s: libvmem was built without CUDA", vmem_backend_name(kind));
#endif
        if (!gpu_visible())
            cr_skip_test("backend %s: no GPU found on this machine", vmem_backend_name(kind));
    }
    vmem_config_t cfg = sim_config(kind, limit, limit, host_limit, cap);
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    if (st == VMEM_ERR_UNAVAILABLE && kind == VMEM_BACKEND_VMM)
        cr_skip_test("backend vmm: unavailable with this GPU/driver/build (%s)", vmem_strerror(st));
    cr_assert_eq(st, VMEM_OK, "vmem_create(%s): %s", vmem_backend_name(kind), vmem_strerror(st));
    vmem_stats_t s = stats_of(v);
    cr_assert_str_eq(s.backend, vmem_backend_name(kind));
    return v;
}

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* A live block: what was asked, where, and its pattern id. */
typedef struct block {
    char *p;
    size_t size;
    uint64_t id;
    int patterned; /* the CPU wrote the pattern (simulated, or pinned host) */
} block_t;

/* The block at idx overlaps no other live block (checked on addresses). */
static void assert_disjoint(const block_t *b, size_t n, size_t idx)
{
    uintptr_t lo = (uintptr_t)b[idx].p, hi = lo + round256(b[idx].size);
    for (size_t i = 0; i < n; i++) {
        if (i == idx || !b[i].p)
            continue;
        uintptr_t l2 = (uintptr_t)b[i].p, h2 = l2 + round256(b[i].size);
        cr_assert(hi <= l2 || h2 <= lo, "blocks %p+%zu and %p+%zu overlap", b[idx].p, b[idx].size,
                  b[i].p, b[i].size);
    }
}

/* Allocates into slot b, checks what vmem_ptr_info says about it, writes its
 * pattern (simulated backends).  Returns 0 if the allocation failed. */
static int block_alloc(vmem_t *v, vmem_backend_kind_t kind, block_t *b, size_t size, uint64_t id)
{
    char *p = vmem_alloc(v, size);
    CHECK_VMEM(v, "vmem_alloc(%zu)", size);
    if (!p)
        return 0;
    cr_assert_eq((uintptr_t)p % 256, 0, "vmem_alloc(%zu) = %p not 256-aligned", size, (void *)p);
    vmem_ptr_info_t in;
    cr_assert_eq(vmem_ptr_info(v, p, &in), VMEM_OK);
    cr_assert(in.requested == size && in.size >= round256(size) && in.base == p,
              "ptr_info(%p): requested %zu size %zu base %p for a %zu-byte block", (void *)p,
              in.requested, in.size, in.base, size);
    cr_assert(in.location == VMEM_LOC_DEVICE || in.location == VMEM_LOC_HOST);
    cr_assert_eq(vmem_ptr_info(v, p + size - 1, &in), VMEM_OK);
    cr_assert_eq(in.base, p, "ptr_info of the last byte names another block");
    /* The CPU may write simulated memory and cuda's pinned host blocks (not
     * vmm's host-backed granules: they live at device addresses). */
    b->patterned = is_simulated(kind) || (kind == VMEM_BACKEND_CUDA && in.location == VMEM_LOC_HOST);
    if (b->patterned)
        pattern_fill(p, size, id);
    b->p = p;
    b->size = size;
    b->id = id;
    return 1;
}

static void block_free(vmem_t *v, block_t *b)
{
    vmem_ptr_info_t in;
    cr_assert_eq(vmem_ptr_info(v, b->p, &in), VMEM_OK);
    if (b->patterned)
        cr_assert(pattern_ok(b->p, b->size, b->id), "block %p (%zu bytes, id %llu) overwritten",
                  (void *)b->p, b->size, (unsigned long long)b->id);
    cr_assert_eq(vmem_free(v, b->p), VMEM_OK, "vmem_free(%p)", (void *)b->p);
    CHECK_VMEM(v, "vmem_free(%p)", (void *)b->p);
    b->p = NULL;
}

/* allocs - frees == live blocks; in-use bytes == their rounded sizes. */
static void assert_counts(vmem_t *v, const block_t *b, size_t n)
{
    size_t live = 0, bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (b[i].p) {
            live++;
            bytes += round256(b[i].size);
        }
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.allocs - s.frees, live, "allocs %llu - frees %llu != live %zu",
                 (unsigned long long)s.allocs, (unsigned long long)s.frees, live);
    cr_assert_geq(s.device_in_use + s.host_in_use, bytes);
    cr_assert_leq(s.device_held, s.limit, "device holds %zu over limit %zu", s.device_held, s.limit);
    cr_assert_leq(s.host_held, s.host_limit);
    cr_assert_leq(s.device_in_use, s.device_held);
    cr_assert_leq(s.host_in_use, s.host_held);
}

#define CONTRACT_TEST(name)                                                                    \
    ParameterizedTestParameters(contract, name)                                                \
    {                                                                                          \
        return cr_make_param_array(backend_param_t, all_backends, NBACKENDS);                  \
    }                                                                                          \
    ParameterizedTest(backend_param_t *param, contract, name, .timeout = 60)

CONTRACT_TEST(alloc_sizes)
{
    vmem_backend_kind_t kind = param->kind;
    vmem_t *v = open_backend(kind, 64 * MiB, 64 * MiB, NULL);
    size_t sizes[] = {1, 255, 256, 257, 4095, 4096, 100000, MiB, 3 * MiB + 5, 16 * MiB};
    enum { N = sizeof sizes / sizeof sizes[0] };
    block_t b[N] = {{0}};
    for (size_t i = 0; i < N; i++) {
        cr_assert(block_alloc(v, kind, &b[i], sizes[i], i + 1), "vmem_alloc(%zu) failed: %s",
                  sizes[i], vmem_strerror(vmem_last_status()));
        cr_assert_eq(vmem_last_status(), VMEM_OK);
        cr_assert_eq(location_of(v, b[i].p), VMEM_LOC_DEVICE, "fits the limit: on the device");
        assert_disjoint(b, N, i);
    }
    assert_counts(v, b, N);
    vmem_stats_t s = stats_of(v);
    size_t bytes = 0;
    for (size_t i = 0; i < N; i++)
        bytes += round256(sizes[i]);
    cr_assert_geq(s.device_in_use, bytes);
    cr_assert_eq(s.host_in_use, 0);
    cr_assert_eq(s.spills, 0);
    for (size_t i = 0; i < N; i += 2)
        block_free(v, &b[i]);
    for (size_t i = 1; i < N; i += 2)
        block_free(v, &b[i]);
    assert_counts(v, b, N);
    s = stats_of(v);
    cr_assert_eq(s.device_in_use, 0);
    cr_assert_eq(s.device_requested, 0);
    cr_assert_eq(s.allocs, N);
    cr_assert_eq(s.frees, N);
    size_t released = 0;
    cr_assert_eq(vmem_trim(v, &released), VMEM_OK);
    CHECK_VMEM(v, "vmem_trim");
    cr_assert_eq(released, s.device_held + s.host_held);
    s = stats_of(v);
    cr_assert_eq(s.device_held, 0);
    cr_assert_eq(s.device_regions, 0);
    vmem_destroy(v);
}

CONTRACT_TEST(free_null_is_noop)
{
    vmem_t *v = open_backend(param->kind, 64 * MiB, 64 * MiB, NULL);
    cr_assert_eq(vmem_free(v, NULL), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.frees, 0);
    cr_assert_eq(s.bad_frees, 0);
    CHECK_VMEM(v, "vmem_free(NULL)");
    vmem_destroy(v);
}

/* Random sequences, with the device limit small enough that some blocks
 * spill to the host and the host limit small enough that some fail. */
CONTRACT_TEST(random_alloc_free)
{
    vmem_backend_kind_t kind = param->kind;
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_t *v = open_backend(kind, 12 * MiB, 8 * MiB, &cap);
    enum { SLOTS = 96, OPS = 2500 };
    block_t b[SLOTS] = {{0}};
    uint64_t rng = 0xC0FFEE + (uint64_t)kind, id = 0;
    unsigned spilled = 0, failed = 0;
    for (int op = 0; op < OPS; op++) {
        size_t i = rng_range(&rng, 0, SLOTS - 1);
        if (b[i].p) {
            block_free(v, &b[i]);
        } else {
            size_t size = rng_size(&rng, 4 * MiB);
            if (!block_alloc(v, kind, &b[i], size, ++id)) {
                cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM, "vmem_alloc(%zu): %s", size,
                             vmem_strerror(vmem_last_status()));
                failed++;
                continue;
            }
            spilled += location_of(v, b[i].p) == VMEM_LOC_HOST;
            assert_disjoint(b, SLOTS, i);
        }
        if (op % 97 == 0) {
            cr_assert_eq(vmem_step_end(v), VMEM_OK);
            CHECK_VMEM(v, "vmem_step_end");
        }
        if (op % 50 == 0)
            assert_counts(v, b, SLOTS);
    }
    assert_counts(v, b, SLOTS);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.spills, spilled);
    cr_assert_eq(s.failures, failed);
    if (is_simulated(kind))
        cr_assert(spilled > 0 && failed > 0, "the sequence should exercise spill (%u) and failure (%u)",
                  spilled, failed);
    for (size_t i = 0; i < SLOTS; i++)
        if (b[i].p)
            block_free(v, &b[i]);
    s = stats_of(v);
    cr_assert_eq(s.device_in_use + s.host_in_use, 0);
    cr_assert_eq(s.allocs, s.frees);
    cr_assert_eq(s.bad_frees, 0);
    cr_assert_eq(vmem_trim(v, NULL), VMEM_OK);
    s = stats_of(v);
    cr_assert_eq(s.device_held + s.host_held, 0);
    CHECK_VMEM(v, "final vmem_trim");
    vmem_destroy(v);
}

/* Many small blocks: all coalesce back, nothing is lost. */
CONTRACT_TEST(many_small_blocks)
{
    vmem_backend_kind_t kind = param->kind;
    vmem_t *v = open_backend(kind, 64 * MiB, 64 * MiB, NULL);
    enum { N = 4000 };
    block_t *b = calloc(N, sizeof *b);
    cr_assert_not_null(b);
    uint64_t rng = 42;
    for (size_t i = 0; i < N; i++) {
        size_t size = rng_range(&rng, 1, 2048);
        char *p = vmem_alloc(v, size);
        cr_assert_not_null(p, "block %zu", i);
        b[i] = (block_t){p, size, i + 1, is_simulated(kind)};
        if (is_simulated(kind))
            pattern_fill(p, size, i + 1);
        if (i % 250 == 0)
            CHECK_VMEM(v, "%zu small allocations", i);
    }
    CHECK_VMEM(v, "all small allocations");
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.spills, 0, "8 MiB of small blocks fit a 64 MiB limit");
    /* Free every other one, then the rest. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = (size_t)pass; i < N; i += 2) {
            if (is_simulated(kind))
                cr_assert(pattern_ok(b[i].p, b[i].size, b[i].id), "block %zu overwritten", i);
            cr_assert_eq(vmem_free(v, b[i].p), VMEM_OK);
            if (i % 250 < 2)
                CHECK_VMEM(v, "freeing block %zu", i);
        }
    }
    CHECK_VMEM(v, "freeing all small blocks");
    s = stats_of(v);
    cr_assert_eq(s.device_in_use, 0);
    cr_assert_eq(s.allocs, N);
    cr_assert_eq(s.frees, N);
    /* Everything coalesced: the same workload again fits in what is held,
     * without a new region. */
    uint64_t regions = s.device_region_allocs;
    size_t held = s.device_held;
    rng = 42;
    for (size_t i = 0; i < N; i++) {
        b[i].size = rng_range(&rng, 1, 2048);
        b[i].p = vmem_alloc(v, b[i].size);
        cr_assert_not_null(b[i].p);
    }
    CHECK_VMEM(v, "the second round of small allocations");
    s = stats_of(v);
    cr_assert_eq(s.device_region_allocs, regions, "the second round needed new regions");
    cr_assert_eq(s.device_held, held);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(vmem_free(v, b[i].p), VMEM_OK);
    CHECK_VMEM(v, "the second round of frees");
    free(b);
    vmem_destroy(v);
}

/* Fault injection: simulated backends only; a failed device region request
 * spills to the host. */
CONTRACT_TEST(fault_injection)
{
    vmem_backend_kind_t kind = param->kind;
    /* The first region asked for is the minimum (no smaller retry that
     * would succeed where the fault hit). */
    setenv("VMEM_VMM_GROW_ALIGN", "0", 1);
    vmem_t *v = open_backend(kind, 64 * MiB, 64 * MiB, NULL);
    vmem_status_t st = vmem_inject_faults(v, VMEM_ARENA_DEVICE, 1, 0, 0);
    if (!is_simulated(kind)) {
        cr_assert_eq(st, VMEM_ERR_UNSUPPORTED);
        vmem_destroy(v);
        return;
    }
    cr_assert_eq(st, VMEM_OK);
    void *p = vmem_alloc(v, MiB);
    CHECK_VMEM(v, "alloc with a device fault");
    cr_assert_not_null(p);
    cr_assert_eq(location_of(v, p), VMEM_LOC_HOST, "the failed region request spills");
    void *q = vmem_alloc(v, MiB);
    cr_assert_not_null(q);
    cr_assert_eq(location_of(v, q), VMEM_LOC_DEVICE, "one fault only");
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.spills, 1);
    /* Faults on both arenas: the allocation fails cleanly. */
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 1.0, 7), VMEM_OK);
    cr_assert_eq(vmem_inject_faults(v, VMEM_ARENA_HOST, 0, 1.0, 7), VMEM_OK);
    cr_assert_null(vmem_alloc(v, 200 * MiB));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    CHECK_VMEM(v, "alloc with all regions failing");
    cr_assert_eq(vmem_free(v, p), VMEM_OK);
    cr_assert_eq(vmem_free(v, q), VMEM_OK);
    CHECK_VMEM(v, "frees");
    vmem_destroy(v);
}
