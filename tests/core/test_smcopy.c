/*
 * vmem_copy_async (src/smcopy.c; docs/placement.md, "Copies out by the
 * SMs"): its checks, its grid, and its copy on the simulated devices, where
 * the bytes are copied at once.  The kernel itself runs in the GPU suite
 * (tests/gpu/test_vmm.c, copy_async_*).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "smcopy.h"
#include "vmem.h"

static vmem_t *instance(vmem_backend_kind_t kind)
{
    env_unset_all();
    vmem_config_t cfg = sim_config(kind, 64 * MiB, 0, 64 * MiB, NULL);
    return create_or_die(&cfg);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u) >> 7 ^ seed);
}

Test(smcopy, simulated_devices_copy_at_once)
{
    vmem_backend_kind_t kinds[] = {VMEM_BACKEND_SIM, VMEM_BACKEND_SIM_VMM};
    for (int k = 0; k < 2; k++) {
        vmem_t *v = instance(kinds[k]);
        unsigned char *a = vmem_alloc(v, MiB), *b = vmem_alloc(v, MiB);
        cr_assert(a && b);
        fill(a, MiB, 3);
        memset(b, 0, MiB);
        cr_assert_eq(vmem_copy_async(v, b + 7, a + 3, 1000, (void *)0x77), VMEM_OK);
        cr_assert_eq(memcmp(b + 7, a + 3, 1000), 0);
        cr_assert_eq(b[6], 0, "a byte before the range was written");
        cr_assert_eq(b[1007], 0, "a byte past the range was written");
        cr_assert_eq(vmem_copy_async(v, b, a, 0, NULL), VMEM_OK);
        cr_assert_eq(vmem_copy_async(v, NULL, NULL, 0, NULL), VMEM_OK, "nothing to copy");
        vmem_free(v, a);
        vmem_free(v, b);
        vmem_destroy(v);
    }
}

Test(smcopy, bad_arguments_are_refused_and_nothing_is_written)
{
    vmem_t *v = instance(VMEM_BACKEND_SIM);
    unsigned char *a = vmem_alloc(v, MiB);
    cr_assert_not_null(a);
    fill(a, MiB, 9);
    unsigned char keep[256];
    memcpy(keep, a, sizeof keep);
    cr_assert_eq(vmem_copy_async(NULL, a, a + 512, 16, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_copy_async(v, NULL, a, 16, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_copy_async(v, a, NULL, 16, NULL), VMEM_ERR_INVALID);
    /* overlapping ranges, either way round, and the same range */
    cr_assert_eq(vmem_copy_async(v, a, a + 8, 16, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_copy_async(v, a + 8, a, 16, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_copy_async(v, a, a, 1, NULL), VMEM_ERR_INVALID);
    /* ranges that wrap the address space */
    cr_assert_eq(vmem_copy_async(v, a, (void *)(UINTPTR_MAX - 8), 64, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_copy_async(v, (void *)(UINTPTR_MAX - 8), a, 64, NULL), VMEM_ERR_INVALID);
    cr_assert_eq(memcmp(a, keep, sizeof keep), 0, "a refused copy wrote");
    /* adjacent ranges do not overlap */
    cr_assert_eq(vmem_copy_async(v, a + 16, a, 16, NULL), VMEM_OK);
    cr_assert_eq(memcmp(a + 16, keep, 16), 0);
    vmem_free(v, a);
    vmem_destroy(v);
}

Test(smcopy, the_blocks_setting_is_checked_at_create)
{
    const char *bad[] = {"0", "-1", "1025", "x", "", "32 ", "4294967328"};
    env_unset_all();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_env_refused("VMEM_COPY_BLOCKS", bad[i], VMEM_BACKEND_SIM);
    unsigned blocks = 0;
    setenv("VMEM_COPY_BLOCKS", "1024", 1);
    cr_assert_eq(smcopy_blocks_from_env(&blocks), VMEM_OK);
    cr_assert_eq(blocks, 1024);
    unsetenv("VMEM_COPY_BLOCKS");
    cr_assert_eq(smcopy_blocks_from_env(&blocks), VMEM_OK);
    cr_assert_eq(blocks, SMCOPY_BLOCKS_DEFAULT);
}

Test(smcopy, the_grid_covers_every_byte_once)
{
    unsigned long long n16, tail;
    char *base = (char *)(uintptr_t)0x10000;
    /* aligned: words, then the tail */
    cr_assert_eq(smcopy_shape(base, base + 4096, 1000003, 32, &n16, &tail), 32);
    cr_assert_eq(n16, 1000003 / 16);
    cr_assert_eq(tail, 3);
    /* either pointer unaligned: bytes only */
    cr_assert_eq(smcopy_shape(base + 1, base + 4096, 4096, 32, &n16, &tail), 16);
    cr_assert_eq(n16, 0);
    cr_assert_eq(tail, 4096);
    cr_assert_eq(smcopy_shape(base, base + 8, 4096, 32, &n16, &tail), 16);
    cr_assert_eq(n16, 0);
    cr_assert_eq(tail, 4096);
    /* small copies launch only the blocks they need; none for nothing */
    cr_assert_eq(smcopy_shape(base, base + 4096, 16 * 256 + 16, 32, &n16, &tail), 2);
    cr_assert_eq(smcopy_shape(base, base + 4096, 15, 32, &n16, &tail), 1);
    cr_assert_eq(n16, 0);
    cr_assert_eq(tail, 15);
    cr_assert_eq(smcopy_shape(base, base + 4096, 0, 32, &n16, &tail), 0);
    /* every split adds back up to the bytes */
    for (size_t bytes = 0; bytes < 5000; bytes += 37)
        for (unsigned skew = 0; skew < 32; skew += 5) {
            smcopy_shape(base + skew, base + 4096 + skew, bytes, 8, &n16, &tail);
            cr_assert_eq(n16 * 16 + tail, bytes);
            cr_assert(skew % 16 == 0 || n16 == 0);
        }
}
