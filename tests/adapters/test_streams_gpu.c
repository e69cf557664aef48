/* GPU suite for the stream rules: a block freed on stream A goes to stream B
 * only once the work A queued before the free has completed (an event at
 * the free), without waiting for what A queued after it; A itself reuses
 * the block at once.  The "work" is a host function sleeping on the stream,
 * so no kernel (and no nvcc) is needed.  Skipped where no GPU is found. */
#include <criterion/criterion.h>

#include "../skip77.h"
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "vmem.h"

#define MiB ((size_t)1 << 20)

typedef struct sleeper {
    unsigned ms;
    atomic_int done;
} sleeper_t;

static void CUDART_CB sleep_then_mark(void *arg)
{
    sleeper_t *s = arg;
    struct timespec ts = {(time_t)(s->ms / 1000), (long)(s->ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    atomic_store(&s->done, 1);
}

static void require_gpu(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        cr_skip_test("no CUDA device on this machine: GPU stream suite skipped");
    }
}

static vmem_t *open_cuda(size_t limit)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_CUDA;
    cfg.limit = limit;
    cfg.host_fallback = 0;
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    cr_assert_eq(st, VMEM_OK, "vmem_create(cuda): %s", vmem_strerror(st));
    return v;
}

static cudaStream_t new_stream(void)
{
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    return s;
}

Test(gpu_streams, other_stream_waits_for_the_work_before_the_free_only)
{
    require_gpu();
    vmem_t *v = open_cuda(4 * MiB); /* two 2 MiB regions at most */
    cudaStream_t A = new_stream(), B = new_stream();
    void *b = vmem_alloc_stream(v, MiB, B);
    void *a = vmem_alloc_stream(v, 2 * MiB, A);
    cr_assert(a && b, "setup allocations failed: %s", vmem_strerror(vmem_last_status()));

    sleeper_t before = {.ms = 300}, after = {.ms = 3000};
    cr_assert_eq(cudaLaunchHostFunc(A, sleep_then_mark, &before), cudaSuccess);
    cr_assert_eq(vmem_free_stream(v, a, A), VMEM_OK);
    cr_assert_eq(cudaLaunchHostFunc(A, sleep_then_mark, &after), cudaSuccess);

    void *b2 = vmem_alloc_stream(v, 2 * MiB, B); /* no room but A's block */
    cr_assert_eq(b2, a, "B should get A's block: %s", vmem_strerror(vmem_last_status()));
    cr_assert_eq(atomic_load(&before.done), 1,
                 "B got the block before the work A queued before the free had run");
    cr_assert_eq(atomic_load(&after.done), 0,
                 "B waited for work A queued after the free (stream sync, not the event)");

    cr_assert_eq(cudaStreamSynchronize(A), cudaSuccess);
    vmem_free_stream(v, b2, B);
    vmem_free_stream(v, b, B);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
    cudaStreamDestroy(A);
    cudaStreamDestroy(B);
}

Test(gpu_streams, same_stream_reuses_without_waiting)
{
    require_gpu();
    vmem_t *v = open_cuda(64 * MiB);
    cudaStream_t A = new_stream(), B = new_stream();
    void *b = vmem_alloc_stream(v, MiB, B); /* two streams: tags are on */
    void *a = vmem_alloc_stream(v, MiB, A);
    sleeper_t busy = {.ms = 2000};
    cr_assert_eq(cudaLaunchHostFunc(A, sleep_then_mark, &busy), cudaSuccess);
    cr_assert_eq(vmem_free_stream(v, a, A), VMEM_OK);
    cr_assert_eq(vmem_alloc_stream(v, MiB, A), a);
    cr_assert_eq(atomic_load(&busy.done), 0, "A's own reuse waited for A's queue");
    void *b2 = vmem_alloc_stream(v, MiB, B);
    cr_assert_neq(b2, a);
    cr_assert_eq(cudaStreamSynchronize(A), cudaSuccess);
    vmem_free_stream(v, a, A);
    vmem_free_stream(v, b, B);
    vmem_free_stream(v, b2, B);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
    cudaStreamDestroy(A);
    cudaStreamDestroy(B);
}

Test(gpu_streams, torch_entry_points_give_device_memory)
{
    require_gpu();
    setenv("VMEM_BACKEND", "cuda", 1);
    setenv("VMEM_LIMIT", "64M", 1);
    void *p = vmem_torch_malloc(8 * MiB, 0, NULL);
    cr_assert_not_null(p);
    struct cudaPointerAttributes attr;
    cr_assert_eq(cudaPointerGetAttributes(&attr, p), cudaSuccess);
    cr_assert_eq(attr.type, cudaMemoryTypeDevice);
    cr_assert_eq(cudaMemset(p, 0x5a, 8 * MiB), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    vmem_torch_free(p, 8 * MiB, 0, NULL);
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(vmem_instance_peek(0), &s), VMEM_OK);
    cr_assert_eq(s.device_in_use, 0);
    cr_assert_eq(s.bad_frees, 0);
}
