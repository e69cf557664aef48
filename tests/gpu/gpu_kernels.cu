// Kernels for the GPU suites: they touch memory through the pointers that
// vmem_alloc returned, wherever libvmem placed it (device or pinned host).
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)(i * 2654435761u) ^ seed;
}

__global__ void transform_kernel(const uint32_t *src, uint32_t *dst, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i] * 3u + 1u;
}

extern "C" int gpu_fill(void *p, size_t n_words, uint32_t seed)
{
    fill_kernel<<<256, 256>>>((uint32_t *)p, n_words, seed);
    if (cudaGetLastError() != cudaSuccess)
        return -1;
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -2;
}

extern "C" int gpu_transform(const void *src, void *dst, size_t n_words)
{
    transform_kernel<<<256, 256>>>((const uint32_t *)src, (uint32_t *)dst, n_words);
    if (cudaGetLastError() != cudaSuccess)
        return -1;
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -2;
}

extern "C" int gpu_copy_to_host(void *dst, const void *src, size_t bytes)
{
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) == cudaSuccess ? 0 : -1;
}

// 1 if the pointer is host memory registered with CUDA (pinned), 2 if device
// memory, 0 otherwise / on error.
extern "C" int gpu_pointer_kind(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (a.type == cudaMemoryTypeHost)
        return 1;
    if (a.type == cudaMemoryTypeDevice)
        return 2;
    return 0;
}
