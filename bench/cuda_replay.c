/*
 * cuda-replay: replays traces through CUDA's own allocators, by the same
 * method as vmem-replay (replay.h), for the GPU comparison.
 *
 *   cuda-replay --mode async|malloc [--repeat N] TRACE.txt.gz ...
 *
 * async:  cudaMallocAsync / cudaFreeAsync on the legacy default stream, from
 *         the device's default pool with its release threshold at UINT64_MAX
 *         (the pool keeps what it reserved); peak held is the pool's
 *         cudaMemPoolAttrReservedMemHigh.
 * malloc: cudaMalloc / cudaFree; peak held is the largest growth of the
 *         device's used memory (cudaMemGetInfo) over the warm-up pass,
 *         sampled after every event.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "replay.h"

typedef struct cuda_target {
    int async;
    int device;
    cudaMemPool_t pool;
    size_t base_used;  /* malloc: device memory used before the replay */
    size_t peak_used;  /* malloc: largest used memory seen */
} cuda_target_t;

static void *async_alloc(void *ctx, size_t size)
{
    (void)ctx;
    void *p = NULL;
    if (cudaMallocAsync(&p, size, (cudaStream_t)0) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void async_free(void *ctx, void *p)
{
    (void)ctx;
    cudaFreeAsync(p, (cudaStream_t)0);
}

static void *malloc_alloc(void *ctx, size_t size)
{
    (void)ctx;
    void *p = NULL;
    if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void malloc_free(void *ctx, void *p)
{
    (void)ctx;
    cudaFree(p);
}

static size_t used_now(void)
{
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return 0;
    return total - free_b;
}

static void malloc_observe(void *octx, size_t i)
{
    cuda_target_t *t = octx;
    (void)i;
    size_t u = used_now();
    if (u > t->peak_used)
        t->peak_used = u;
}

static int target_open(void *self, char *err, size_t len)
{
    cuda_target_t *t = self;
    cudaError_t e = cudaSetDevice(t->device);
    if (e == cudaSuccess)
        e = cudaFree(NULL); /* creates the context */
    if (e != cudaSuccess) {
        snprintf(err, len, "cudaSetDevice(%d): %s", t->device, cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    if (t->async) {
        uint64_t threshold = UINT64_MAX, zero = 0;
        e = cudaDeviceGetDefaultMemPool(&t->pool, t->device);
        if (e == cudaSuccess)
            e = cudaMemPoolSetAttribute(t->pool, cudaMemPoolAttrReleaseThreshold, &threshold);
        if (e == cudaSuccess)
            e = cudaMemPoolTrimTo(t->pool, 0);
        if (e == cudaSuccess)
            e = cudaMemPoolSetAttribute(t->pool, cudaMemPoolAttrReservedMemHigh, &zero);
        if (e != cudaSuccess) {
            snprintf(err, len, "default memory pool: %s", cudaGetErrorString(e));
            cudaGetLastError();
            return -1;
        }
    } else {
        cudaDeviceSynchronize();
        t->base_used = t->peak_used = used_now();
    }
    return 0;
}

static void target_close(void *self)
{
    cuda_target_t *t = self;
    cudaDeviceSynchronize();
    if (t->async)
        cudaMemPoolTrimTo(t->pool, 0);
}

static uint64_t target_peak(void *self)
{
    cuda_target_t *t = self;
    if (t->async) {
        uint64_t high = 0;
        cudaStreamSynchronize((cudaStream_t)0);
        if (cudaMemPoolGetAttribute(t->pool, cudaMemPoolAttrReservedMemHigh, &high) != cudaSuccess)
            return 0;
        return high;
    }
    return t->peak_used > t->base_used ? t->peak_used - t->base_used : 0;
}

int main(int argc, char **argv)
{
    cuda_target_t t = {0};
    int mode = -1;
    /* --mode comes first; the rest goes to replay_cli. */
    if (argc >= 3 && strcmp(argv[1], "--mode") == 0) {
        if (strcmp(argv[2], "async") == 0)
            mode = 1;
        else if (strcmp(argv[2], "malloc") == 0)
            mode = 0;
    }
    if (mode < 0) {
        fprintf(stderr, "usage: %s --mode async|malloc [--repeat N] TRACE.txt.gz ...\n", argv[0]);
        return 2;
    }
    t.async = mode;
    replay_target_t target = {
        .allocator = mode ? "cudaMallocAsync" : "cudaMalloc",
        .peak_source = mode ? "cudaMemPoolAttrReservedMemHigh of the default pool"
                            : "largest rise of cudaMemGetInfo used memory, warm-up pass",
        .open = target_open,
        .close = target_close,
        .peak_reserved = target_peak,
        .observe = mode ? NULL : malloc_observe,
        .ops = {.ctx = &t, .alloc = mode ? async_alloc : malloc_alloc,
                .free = mode ? async_free : malloc_free},
    };
    argv[2] = argv[0];
    return replay_cli(argc - 2, argv + 2, &target);
}
