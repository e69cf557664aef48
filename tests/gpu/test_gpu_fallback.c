/* GPU suite: the cuda backend and the transparent pinned-host fallback on a
 * real device.  Skipped (with a message) where no GPU is found. */
#include <criterion/criterion.h>

#include "../skip77.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "vmem.h"

#define MiB ((size_t)1 << 20)

int gpu_fill(void *p, size_t n_words, uint32_t seed);
int gpu_transform(const void *src, void *dst, size_t n_words);
int gpu_copy_to_host(void *dst, const void *src, size_t bytes);
int gpu_pointer_kind(const void *p);

static vmem_t *open_cuda(size_t limit, size_t host_limit)
{
    if (!backend_cuda_present(0))
        cr_skip_test("no CUDA device on this machine: GPU suite skipped");
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_CUDA;
    cfg.limit = limit;
    cfg.host_limit = host_limit;
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    cr_assert_eq(st, VMEM_OK, "vmem_create(cuda): %s", vmem_strerror(st));
    return v;
}

static void check_pattern(const uint32_t *h, size_t n, uint32_t seed, uint32_t mul, uint32_t add)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t want = ((uint32_t)(i * 2654435761u) ^ seed) * mul + add;
        if (h[i] != want)
            cr_assert_fail("word %zu: got %#x, want %#x", i, h[i], want);
    }
}

Test(gpu, fallback_is_transparent_to_kernels)
{
    vmem_t *v = open_cuda(64 * MiB, 1024 * MiB);
    size_t bytes = 48 * MiB, n = bytes / 4;
    void *dev = vmem_alloc(v, bytes);
    cr_assert_not_null(dev);
    void *host = vmem_alloc(v, bytes); /* does not fit under the 64 MiB limit */
    cr_assert_not_null(host, "fallback allocation failed: %s", vmem_strerror(vmem_last_status()));
    vmem_ptr_info_t di, hi;
    cr_assert_eq(vmem_ptr_info(v, dev, &di), VMEM_OK);
    cr_assert_eq(vmem_ptr_info(v, host, &hi), VMEM_OK);
    cr_assert_eq(di.location, VMEM_LOC_DEVICE);
    cr_assert_eq(hi.location, VMEM_LOC_HOST, "second block should have spilled to host");
    cr_assert_eq(gpu_pointer_kind(dev), 2, "device block is not device memory");
    cr_assert_eq(gpu_pointer_kind(host), 1, "spilled block is not pinned host memory");

    /* A kernel writes the host block through the pointer vmem_alloc gave. */
    cr_assert_eq(gpu_fill(host, n, 0xabcd1234u), 0);
    /* The CPU reads it directly (same address on both sides). */
    check_pattern(host, n, 0xabcd1234u, 1, 0);
    /* A kernel reads the host block and writes the device block. */
    cr_assert_eq(gpu_transform(host, dev, n), 0);
    uint32_t *h = malloc(bytes);
    cr_assert_not_null(h);
    cr_assert_eq(gpu_copy_to_host(h, dev, bytes), 0);
    check_pattern(h, n, 0xabcd1234u, 3, 1);
    /* And the other way round: device -> host block through a kernel. */
    cr_assert_eq(gpu_fill(dev, n, 0x5555u), 0);
    cr_assert_eq(gpu_transform(dev, host, n), 0);
    check_pattern(host, n, 0x5555u, 3, 1);
    free(h);

    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert_eq(s.spills, 1);
    cr_assert_str_eq(s.backend, "cuda");
    cr_assert_eq(vmem_free(v, host), VMEM_OK);
    cr_assert_eq(vmem_free(v, dev), VMEM_OK);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
}

Test(gpu, cuda_contract_and_limit)
{
    vmem_t *v = open_cuda(512 * MiB, 512 * MiB);
    enum { N = 200 };
    void *p[N] = {0};
    unsigned seed = 12345;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            if (p[i]) {
                cr_assert_eq(vmem_free(v, p[i]), VMEM_OK);
                p[i] = NULL;
            } else {
                size_t sz = (size_t)256 << ((seed >> 16) % 15); /* 256 B .. 4 MiB */
                p[i] = vmem_alloc(v, sz);
                cr_assert_not_null(p[i]);
                cr_assert_eq(gpu_fill(p[i], sz / 4, (uint32_t)i), 0);
            }
        }
        cr_assert_eq(vmem_check(v), VMEM_OK);
    }
    for (int i = 0; i < N; i++)
        vmem_free(v, p[i]);
    size_t applied = 0;
    cr_assert_eq(vmem_set_limit(v, 0, &applied), VMEM_OK);
    cr_assert_eq(applied, 0, "empty regions were not given back: %zu held", applied);
    cr_assert_eq(vmem_set_limit(v, 512 * MiB, &applied), VMEM_OK);
    void *q = vmem_alloc(v, 100 * MiB);
    vmem_ptr_info_t qi;
    cr_assert_eq(vmem_ptr_info(v, q, &qi), VMEM_OK);
    cr_assert_eq(qi.location, VMEM_LOC_DEVICE);
    cr_assert_eq(vmem_free(v, q), VMEM_OK);
    int local = 0;
    cr_assert_eq(vmem_free(v, &local), VMEM_ERR_FOREIGN_PTR);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
}

Test(gpu, auto_backend_picks_a_gpu_backend)
{
    if (!backend_cuda_present(0))
        cr_skip_test("no CUDA device on this machine: GPU suite skipped");
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.limit = 64 * MiB;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert(strcmp(s.backend, "cuda") == 0 || strcmp(s.backend, "vmm") == 0, "backend %s",
              s.backend);
    vmem_destroy(v);
}

Test(gpu, no_gpu_fails_over_cleanly)
{
    if (backend_cuda_present(0))
        cr_skip_test("a GPU is present: the no-GPU path is tested on CPU machines");
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_CUDA;
    vmem_t *v = (vmem_t *)0x1;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_ERR_UNAVAILABLE);
    cr_assert_eq(v, (vmem_t *)0x1, "out-parameter touched on failure");
    cfg.backend = VMEM_BACKEND_AUTO;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    cr_assert_str_eq(s.backend, "sim");
    vmem_destroy(v);
}
