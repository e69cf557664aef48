/* The cudaMalloc device backend and the pinned-host backend
 * (cudaHostAlloc, mapped and portable). */
#include "backend.h"

#include <stdlib.h>

#ifdef VMEM_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <unistd.h>

#define CUDA_GRANULE ((size_t)2 << 20)

typedef struct cuda_backend {
    backend_t base;
    int device;
} cuda_backend_t;

/* Runs with `device` current on the calling thread, restoring the previous one. */
static int device_enter(int device, int *saved)
{
    if (cudaGetDevice(saved) != cudaSuccess)
        *saved = -1;
    if (*saved != device && cudaSetDevice(device) != cudaSuccess)
        return -1;
    return 0;
}

static void device_leave(int device, int saved)
{
    if (saved >= 0 && saved != device)
        cudaSetDevice(saved);
}

int backend_cuda_present(int device)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return device >= 0 && device < n;
}

static vmem_status_t cuda_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    cuda_backend_t *c = (cuda_backend_t *)b;
    (void)hint;
    int saved;
    if (device_enter(c->device, &saved) != 0)
        return VMEM_ERR_BACKEND;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size);
    device_leave(c->device, saved);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error state */
        return e == cudaErrorMemoryAllocation ? VMEM_ERR_NOMEM : VMEM_ERR_BACKEND;
    }
    *base = p;
    return VMEM_OK;
}

static void cuda_region_free(backend_t *b, void *base, size_t size)
{
    cuda_backend_t *c = (cuda_backend_t *)b;
    (void)size;
    int saved;
    if (device_enter(c->device, &saved) == 0) {
        cudaFree(base);
        device_leave(c->device, saved);
    }
}

static vmem_status_t cuda_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    cuda_backend_t *c = (cuda_backend_t *)b;
    int saved;
    if (device_enter(c->device, &saved) != 0)
        return VMEM_ERR_BACKEND;
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    device_leave(c->device, saved);
    return e == cudaSuccess ? VMEM_OK : VMEM_ERR_BACKEND;
}

static void cuda_destroy(backend_t *b) { free(b); }

static const backend_ops_t cuda_ops = {cuda_region_alloc, cuda_region_free, cuda_mem_info,
                                       cuda_destroy, NULL, NULL};

vmem_status_t backend_cuda_create(int device, backend_t **out)
{
    if (!backend_cuda_present(device))
        return VMEM_ERR_UNAVAILABLE;
    cuda_backend_t *c = calloc(1, sizeof *c);
    if (!c)
        return VMEM_ERR_NOMEM;
    c->device = device;
    c->base.ops = &cuda_ops;
    c->base.name = "cuda";
    c->base.flags = 0;
    /* cudaMalloc returns 256-byte (in practice 512-byte or better) aligned
     * pointers; regions are sized in 2 MiB steps like the driver's pages. */
    c->base.granule = CUDA_GRANULE;
    backend_set_faults(&c->base, 0, 0, 0);
    *out = &c->base;
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* Pinned host memory, mapped into the device's address space               */
/* ------------------------------------------------------------------------ */

static vmem_status_t pinned_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    cuda_backend_t *c = (cuda_backend_t *)b;
    (void)hint;
    int saved;
    if (device_enter(c->device, &saved) != 0)
        return VMEM_ERR_BACKEND;
    void *p = NULL, *d = NULL;
    cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) {
        e = cudaHostGetDevicePointer(&d, p, 0);
        if (e != cudaSuccess || d != p) {
            /* Without unified addressing the device pointer differs from
             * the host pointer, and one pointer could not serve both. */
            cudaFreeHost(p);
            e = cudaErrorNotSupported;
        }
    }
    device_leave(c->device, saved);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? VMEM_ERR_NOMEM : VMEM_ERR_BACKEND;
    }
    *base = p;
    return VMEM_OK;
}

static void pinned_region_free(backend_t *b, void *base, size_t size)
{
    (void)b;
    (void)size;
    cudaFreeHost(base);
}

static vmem_status_t pinned_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    (void)b;
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES),
         psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
        return VMEM_ERR_BACKEND;
    *total_bytes = (size_t)pages * (size_t)psz;
    *free_bytes = avail > 0 ? (size_t)avail * (size_t)psz : 0;
    return VMEM_OK;
}

static const backend_ops_t pinned_ops = {pinned_region_alloc, pinned_region_free, pinned_mem_info,
                                         cuda_destroy, NULL, NULL};

vmem_status_t backend_pinned_create(int device, backend_t **out)
{
    if (!backend_cuda_present(device))
        return VMEM_ERR_UNAVAILABLE;
    cuda_backend_t *c = calloc(1, sizeof *c);
    if (!c)
        return VMEM_ERR_NOMEM;
    c->device = device;
    c->base.ops = &pinned_ops;
    c->base.name = "pinned";
    c->base.flags = BACKEND_F_HOST;
    c->base.granule = CUDA_GRANULE;
    backend_set_faults(&c->base, 0, 0, 0);
    *out = &c->base;
    return VMEM_OK;
}

#else /* !VMEM_HAVE_CUDA */

int backend_cuda_present(int device)
{
    (void)device;
    return 0;
}

vmem_status_t backend_cuda_create(int device, backend_t **out)
{
    (void)device;
    (void)out;
    return VMEM_ERR_UNAVAILABLE;
}

vmem_status_t backend_pinned_create(int device, backend_t **out)
{
    (void)device;
    (void)out;
    return VMEM_ERR_UNAVAILABLE;
}

#endif

#ifdef VMEM_HAVE_CUDA
vmem_status_t backend_cuda_pci_bus_id(int device, char *buf, size_t len)
{
    if (!backend_cuda_present(device))
        return VMEM_ERR_UNAVAILABLE;
    if (cudaDeviceGetPCIBusId(buf, (int)len, device) != cudaSuccess) {
        cudaGetLastError();
        return VMEM_ERR_BACKEND;
    }
    return VMEM_OK;
}

void backend_stream_sync(void *stream)
{
    if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
        cudaGetLastError();
}

/* The device is made current around both calls: the event belongs to it,
 * and the NULL stream means the current device's default stream. */
int backend_fence_record(void **fence, void *stream, int device)
{
    int saved;
    if (device_enter(device, &saved) != 0) {
        cudaGetLastError();
        return -1;
    }
    cudaError_t err = cudaSuccess;
    if (!*fence) {
        cudaEvent_t e;
        err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        if (err == cudaSuccess)
            *fence = e;
    }
    if (err == cudaSuccess)
        err = cudaEventRecord((cudaEvent_t)*fence, (cudaStream_t)stream);
    device_leave(device, saved);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}

int backend_fence_done(void *fence)
{
    if (!fence)
        return 1;
    cudaError_t err = cudaEventQuery((cudaEvent_t)fence);
    if (err == cudaErrorNotReady)
        return 0;
    if (err != cudaSuccess)
        cudaGetLastError(); /* a broken event cannot be waited on either */
    return 1;
}

void backend_fence_wait(void *fence)
{
    if (fence && cudaEventSynchronize((cudaEvent_t)fence) != cudaSuccess)
        cudaGetLastError();
}

int backend_fence_stream_wait(void *fence, void *stream)
{
    if (!fence)
        return 0;
    if (cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)fence, 0) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}

void backend_fence_destroy(void *fence)
{
    if (fence)
        cudaEventDestroy((cudaEvent_t)fence);
}
#else
vmem_status_t backend_cuda_pci_bus_id(int device, char *buf, size_t len)
{
    (void)device;
    (void)buf;
    (void)len;
    return VMEM_ERR_UNAVAILABLE;
}

void backend_stream_sync(void *stream) { (void)stream; }

int backend_fence_record(void **fence, void *stream, int device)
{
    (void)fence;
    (void)stream;
    (void)device;
    return -1;
}

int backend_fence_done(void *fence)
{
    (void)fence;
    return 1;
}

void backend_fence_wait(void *fence) { (void)fence; }
int backend_fence_stream_wait(void *fence, void *stream)
{
    (void)fence;
    (void)stream;
    return -1;
}
void backend_fence_destroy(void *fence) { (void)fence; }
#endif
