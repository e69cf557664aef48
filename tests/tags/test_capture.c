/* CUDA graph capture on the CPU: the graph pool (src/capture.c), the
 * PyTorch adapter keeping a capture's freed blocks mapped across a pause
 * (the H100 run's illegal address on graph replay after resume), and the
 * backends neither waiting nor moving while a capture runs. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../vmm/common.h"
#include "backend.h"
#include "capture.h"
#include "vmem_internal.h"

static void count_give(void *ctx, void *p)
{
    (void)p;
    (*(int *)ctx)++;
}

Test(capture, gpool_keeps_a_captures_blocks)
{
    gpool_t g;
    gpool_init(&g);
    char a[4], b[4], c[4];
    cr_assert_eq(gpool_free(&g, a), 0, "empty pool: not its pointer");
    cr_assert_eq(gpool_add(&g, b, 100, 7, 1), 0);
    cr_assert_eq(gpool_add(&g, a, 300, 7, 1), 0);
    cr_assert_eq(gpool_add(&g, c, 200, 8, 1), 0);
    cr_assert_eq(gpool_take(&g, 7, 1, 50), NULL, "all live: nothing to take");
    cr_assert_eq(gpool_free(&g, a), 1);
    cr_assert_eq(gpool_free(&g, b), 1);
    cr_assert_eq(gpool_free(&g, b), -1, "double free seen");
    cr_assert_eq(gpool_free(&g, (char *)b + 1), 0, "inner pointer: not a block");
    size_t live, freed;
    gpool_bytes(&g, &live, &freed);
    cr_assert_eq(live, 200);
    cr_assert_eq(freed, 400);
    cr_assert_eq(gpool_take(&g, 8, 1, 50), NULL, "another capture's block is not reused");
    cr_assert_eq(gpool_take(&g, 7, 2, 50), NULL, "another tag's block is not reused");
    cr_assert_eq(gpool_take(&g, 7, 1, 400), NULL, "too small");
    cr_assert_eq(gpool_take(&g, 7, 1, 90), b, "the smallest that fits");
    cr_assert_eq(gpool_take(&g, 7, 1, 90), a);
    cr_assert_eq(gpool_free(&g, a), 1);
    cr_assert_eq(gpool_free(&g, c), 1);
    int n = 0;
    cr_assert_eq(gpool_release(&g, count_give, &n), 500, "released bytes");
    cr_assert_eq(n, 2);
    gpool_bytes(&g, &live, &freed);
    cr_assert_eq(live, 100);
    cr_assert_eq(freed, 0);
    cr_assert_eq(gpool_free(&g, b), 1, "the live block is still the pool's");
    gpool_fini(&g);
}

/* The fake driver: stream 0x5000 captures (id 42), others do not. */
#define CAPTURING ((void *)0x5000)
static int fake_query(void *stream, uint64_t *id)
{
    if (stream != CAPTURING)
        return 0;
    *id = 42;
    return 1;
}

static vmem_t *adapter_instance(void)
{
    setenv("VMEM_BACKEND", "sim-vmm", 1);
    setenv("VMEM_SIM_CAPACITY", "1073741824", 1);
    setenv("VMEM_HOST_LIMIT", "1073741824", 1);
    setenv("VMEM_LOG_LEVEL", "error", 1);
    capture_set_query(fake_query);
    vmem_t *v = vmem_instance(0);
    cr_assert(v);
    return v;
}

/*
 * A graph's temporary: allocated during capture, freed during capture (as
 * PyTorch's pluggable allocator does), used again by every replay.  Before
 * the graph pool, the free returned it to the tag's arena, the pause gave
 * that free memory back and the replay after resume faulted (the H100 run:
 * illegal memory access; on sim-vmm a segfault, which fails this test).
 */
Test(capture, graph_temporary_survives_pause_and_resume)
{
    vmem_t *v = adapter_instance();
    unsigned prev;
    cr_assert_eq(vmem_set_tag(v, 5, &prev), VMEM_OK);
    size_t n = 8 * MiB;
    char *keep = vmem_torch_malloc(n, 0, CAPTURING);  /* the graph's output */
    char *tmp = vmem_torch_malloc(n, 0, CAPTURING);   /* its temporary */
    char *plain = vmem_torch_malloc(n, 0, (void *)0x6000); /* no capture */
    cr_assert(keep && tmp && plain);
    vmem_torch_free(tmp, n, 0, CAPTURING);
    vmem_torch_free(plain, n, 0, (void *)0x6000);
    size_t freed = 0;
    cr_assert_eq(vmem_torch_graph_held(0, &freed), 2 * n);
    cr_assert_eq(freed, n);
    /* Still allocated in libvmem: the tag holds both graph blocks. */
    vmem_tag_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_tag_stats(v, 5, &s), VMEM_OK);
    cr_assert_eq(s.in_use, 2 * n);
    memset(tmp, 0x5a, n); /* the replay writes its temporary */
    cr_assert_eq(vmem_pause(v, 5, VMEM_PAUSE_KEEP), VMEM_OK);
    cr_assert_eq(vmem_resume(v, 5), VMEM_OK);
    memset(tmp, 0xa5, n); /* the replay after resume: mapped */
    memset(keep, 1, n);
    cr_assert_eq(vmem_pause(v, 5, VMEM_PAUSE_DISCARD), VMEM_OK);
    cr_assert_eq(vmem_resume(v, 5), VMEM_OK);
    memset(tmp, 0x11, n);
    /* A later allocation of the same capture reuses the temporary; one
     * outside the capture does not. */
    char *other = vmem_torch_malloc(n, 0, (void *)0x6000);
    cr_assert_neq(other, tmp);
    cr_assert_eq(vmem_torch_malloc(n, 0, CAPTURING), tmp);
    vmem_torch_free(tmp, n, 0, CAPTURING);
    vmem_torch_free(other, n, 0, (void *)0x6000);
    /* The graphs destroyed: the freed graph block goes back. */
    cr_assert_eq(vmem_torch_graph_release(0), n);
    cr_assert_eq(vmem_get_tag_stats(v, 5, &s), VMEM_OK);
    cr_assert_eq(s.in_use, n, "only the live output stays");
    vmem_torch_free(keep, n, 0, CAPTURING);
    cr_assert_eq(vmem_torch_graph_release(0), n);
    cr_assert_eq(vmem_torch_graph_held(0, NULL), 0);
    cr_assert_eq(vmem_get_tag_stats(v, 5, &s), VMEM_OK);
    cr_assert_eq(s.in_use, 0);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_set_tag(v, prev, NULL);
}

/* During a capture nothing waits for the device: frees are deferred (the
 * device still holds them) until the next call outside the capture, moves
 * and parks are refused. */
Test(capture, backend_defers_frees_and_refuses_moves_during_capture)
{
    backend_t *b = NULL;
    cr_assert_eq(backend_sim_create(GiB, 1, &b), VMEM_OK);
    size_t fr, total;
    void *p = NULL, *q = NULL;
    cr_assert_eq(backend_region_alloc(b, 64 * MiB, NULL, &p), VMEM_OK);
    cr_assert_eq(backend_region_alloc(b, 64 * MiB, NULL, &q), VMEM_OK);
    cr_assert_eq(backend_mem_info(b, &fr, &total), VMEM_OK);
    size_t used = total - fr;
    cr_assert_eq(backend_capture_begin(1), 0);
    backend_region_free(b, p, 64 * MiB);
    cr_assert_eq(backend_mem_info(b, &fr, &total), VMEM_OK);
    cr_assert_eq(total - fr, used, "free deferred during the capture");
    size_t moved = 1;
    cr_assert_eq(backend_region_move(b, q, 64 * MiB, 1, &moved), VMEM_ERR_BUSY);
    cr_assert_eq(moved, 0);
    cr_assert_eq(backend_region_park(b, q, 64 * MiB), VMEM_ERR_BUSY);
    cr_assert_eq(backend_flush_deferred(b), 0, "not inside the capture");
    cr_assert_eq(backend_capture_begin(0), 1);
    cr_assert_eq(backend_region_move(b, q, 64 * MiB, 1, &moved), VMEM_OK, "after: moves");
    cr_assert_eq(backend_mem_info(b, &fr, &total), VMEM_OK);
    cr_assert_eq(total - fr, used - 128 * MiB, "deferred free done, q moved to host");
    backend_region_free(b, q, 64 * MiB);
    backend_destroy(b);
}
