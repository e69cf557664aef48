/*
 * The CUDA driver API entry points libvmem uses (the VMM backend), reached
 * through the runtime's cudaGetDriverEntryPointByVersion -- never by linking
 * libcuda, so the library loads on machines without a driver and fails over
 * cleanly.  Every pointer is the entry point as of CUDA 12.0 (its signature
 * in cudaTypedefs.h is the one named in the comment).  Not installed.
 */
#ifndef VMEM_CUDA_DRIVER_H
#define VMEM_CUDA_DRIVER_H

#ifdef VMEM_HAVE_CUDA
#include <cuda.h>

/* Invariant: either every member is non-NULL, or cu_driver() returned NULL. */
typedef struct cu_driver {
    CUresult (*GetErrorString)(CUresult error, const char **str);            /* v6000 */
    CUresult (*DeviceGet)(CUdevice *device, int ordinal);                   /* v2000 */
    CUresult (*DeviceGetAttribute)(int *value, CUdevice_attribute attr, CUdevice dev);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);       /* v7000 */
    CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);                      /* v11000 */
    CUresult (*CtxPushCurrent)(CUcontext ctx);                              /* v4000 */
    CUresult (*CtxPopCurrent)(CUcontext *ctx);                              /* v4000 */
    CUresult (*CtxSynchronize)(void);                                       /* v2000 */
    CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);        /* v3020 */
    CUresult (*MemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment,
                                  CUdeviceptr addr, unsigned long long flags); /* v10020 */
    CUresult (*MemAddressFree)(CUdeviceptr ptr, size_t size);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *handle, size_t size,
                          const CUmemAllocationProp *prop, unsigned long long flags);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle handle);
    CUresult (*MemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                       CUmemGenericAllocationHandle handle, unsigned long long flags);
    CUresult (*MemUnmap)(CUdeviceptr ptr, size_t size);
    CUresult (*MemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                             size_t count);
    CUresult (*MemGetAllocationGranularity)(size_t *granularity, const CUmemAllocationProp *prop,
                                            CUmemAllocationGranularity_flags option);
    CUresult (*MemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
    CUresult (*StreamCreate)(CUstream *stream, unsigned int flags);          /* v2000 */
    CUresult (*StreamDestroy)(CUstream stream);                             /* v4000 */
    CUresult (*StreamSynchronize)(CUstream stream);                         /* v2000 */
    CUresult (*EventCreate)(CUevent *event, unsigned int flags);            /* v2000 */
    CUresult (*EventRecord)(CUevent event, CUstream stream);                /* v2000 */
    CUresult (*EventSynchronize)(CUevent event);                            /* v2000 */
    CUresult (*EventDestroy)(CUevent event);                                /* v4000 */
    CUresult (*StreamGetCaptureInfo)(CUstream s, CUstreamCaptureStatus *status,
                                     cuuint64_t *id, CUgraph *graph,
                                     const CUgraphNode **deps, size_t *ndeps); /* v11030 */
    CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode);  /* v10010 */
    CUresult (*MemRetainAllocationHandle)(CUmemGenericAllocationHandle *h, void *addr);
    CUresult (*ModuleLoadData)(CUmodule *module, const void *image);        /* v2000 */
    CUresult (*ModuleGetFunction)(CUfunction *fn, CUmodule module, const char *name);
    CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared, CUstream stream,
                             void **params, void **extra);                  /* v4000 */
} cu_driver_t;

/* The entry points, looked up once (thread-safe).  NULL when the runtime
 * finds no driver, the driver is older than CUDA 12.0, or any entry point is
 * missing; the reason is then in cu_driver_why(). */
const cu_driver_t *cu_driver(void);

/* Why cu_driver() returned NULL (a static string; "" if it did not). */
const char *cu_driver_why(void);

/* A name for a driver result (never NULL). */
const char *cu_error_string(CUresult r);

/* What the vmm backend did (src/backend_vmm.c), for vmm-bench and the GPU
 * suite: which path ran. */
typedef struct backend_vmm_counters {
    size_t big_bytes;          /* size of a big handle; 0: one handle per granule */
    size_t huge_bytes;         /* size of a huge (device) handle; 0: none */
    int unmap_runs;            /* 1: one cuMemUnmap covers a run of mappings */
    unsigned long long big_maps;       /* big handles created */
    unsigned long long big_fallbacks;  /* big or huge handle failed: smaller ones instead */
    unsigned long long huge_maps;      /* huge handles created */
    unsigned long long huge_splits;    /* huge mappings split */
    unsigned long long scratch_on_host; /* split scratch mapped in host memory (device full) */
    unsigned long long splits;         /* big mappings split by a partial release */
    unsigned long long split_failures; /* splits that left granules held (zombie) */
    unsigned long long syncs;          /* device synchronisations */
    unsigned long long lost;           /* granules lost by a failed undo (never expected) */
    unsigned long long moved;          /* bytes moved between host and device */
    size_t zombie_bytes;       /* given back but still held inside big mappings */
    unsigned long long swap_steps;   /* steps of moves to host by swap (VMEM_VMM_MOVE_SWAP) */
    unsigned long long mirror_steps; /* steps of moves to host through the mirror (VMEM_VMM_MOVE_MIRROR) */
    unsigned long long staged_steps; /* steps of moves through staging */
    double sync_seconds;       /* the CPU's time in those synchronisations */
    unsigned long long remaps;   /* free memory mapped at another address (region_remap) */
    unsigned long long remapped; /* bytes of those remaps */
    size_t aliased_bytes;      /* old addresses of remaps still mapped (until a sync) */
    double remap_seconds;      /* the CPU's time in remaps */
    double map_seconds;        /* ... in mapping new regions (region_alloc) */
    double unmap_seconds;      /* ... in giving memory back (region_free, release batches'
                                  ends: their synchronisation included) */
    double split_seconds;      /* ... of which in splits of huge and big mappings
                                  (scratch copies, unmaps, new handles) */
} backend_vmm_counters_t;

struct backend;
/* Copies the vmm backend's counters; -1 if b is not a vmm backend. */
int backend_vmm_counters(const struct backend *b, backend_vmm_counters_t *out);
#endif

#endif
