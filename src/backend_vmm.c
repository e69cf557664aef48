/*
 * The CUDA virtual-memory-management backend: one reserved virtual range per
 * device, physical memory created and mapped in granules (cuMemCreate,
 * cuMemMap, cuMemSetAccess), so the arena is one contiguous range
 * (BACKEND_F_CONTIGUOUS) from which any granule-aligned sub-range can be
 * given back (BACKEND_F_SPLITTABLE).  Where the driver can create physical
 * memory on the host (CU_MEM_LOCATION_TYPE_HOST, or HOST_NUMA), granules
 * can be backed by host memory at the same addresses and moved between
 * host and device (BACKEND_F_HOST_BACKING): the pointer-stable spill.
 *
 * Handles: one per granule, released as soon as it is mapped, so the
 * mapping alone keeps the memory alive and an unmap frees it.  (A handle
 * larger than a granule could not be given back in part: cuMemMap maps a
 * whole handle and cuMemUnmap cannot split a mapping, so physical memory
 * would stay held until every granule of the handle was free.)  The costs
 * per granule are cut by batching instead: one cuMemSetAccess per run, one
 * cuMemUnmap per run where the driver accepts a range spanning several
 * mappings (probed at creation), and moves pipelined through a staging
 * range (below).
 *
 * The driver is reached through cuda_driver.c.  Backend calls are
 * serialised by the allocator's lock; the primary context of the device is
 * pushed around every call, so any thread may make them.
 */
#include "backend.h"

#ifdef VMEM_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"

#define VMM_GRANULE_MIN ((size_t)2 << 20)
#define VMM_RANGE_FACTOR 4                 /* reserved range: 4x the device memory ... */
#define VMM_RANGE_HOST ((size_t)256 << 30) /* ... plus room for host memory in place */
#define VMM_STAGE_BATCH ((size_t)64 << 20) /* bytes per step of a move (two in flight) */

enum { VMM_NONE = 0, VMM_DEVICE = 1, VMM_HOST = 2 };

/*
 * Invariants: state[i] says what backs granule i of [va, va + va_size)
 * (VMM_NONE: nothing mapped there); in_use == granule * count(VMM_DEVICE),
 * host_in_use == granule * count(VMM_HOST); no handle is held by the
 * backend outside a call (mappings keep the memory).  The staging range
 * [stage, stage + 2 * batch) is unmapped outside region_move.
 */
typedef struct vmm_backend {
    backend_t base;
    const cu_driver_t *cu;
    int device;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr va;
    size_t va_size, ngranules, granule;
    uint8_t *state;
    size_t in_use, host_in_use;
    CUmemAllocationProp prop[3];  /* indexed by VMM_DEVICE, VMM_HOST */
    CUmemAccessDesc access;
    int unmap_runs;               /* 1: cuMemUnmap takes a run of several mappings */
    CUdeviceptr stage;
    size_t batch;
    CUstream stream;
    CUevent done[2];
    CUmemGenericAllocationHandle *handles; /* batch / granule * 2, scratch for moves */
} vmm_backend_t;

static vmem_status_t status_of(CUresult r)
{
    return r == CUDA_SUCCESS             ? VMEM_OK
           : r == CUDA_ERROR_OUT_OF_MEMORY ? VMEM_ERR_NOMEM
                                           : VMEM_ERR_BACKEND;
}

static int ctx_enter(vmm_backend_t *m) { return m->cu->CtxPushCurrent(m->ctx) == CUDA_SUCCESS; }

static void ctx_leave(vmm_backend_t *m)
{
    CUcontext c;
    m->cu->CtxPopCurrent(&c);
}

static CUdeviceptr granule_addr(const vmm_backend_t *m, size_t i)
{
    return m->va + (CUdeviceptr)(i * m->granule);
}

static size_t granule_index(const vmm_backend_t *m, CUdeviceptr p)
{
    return (size_t)(p - m->va) / m->granule;
}

/* Unmaps [p, p + n granules), each granule its own mapping. */
static void run_unmap(vmm_backend_t *m, CUdeviceptr p, size_t n)
{
    if (m->unmap_runs && m->cu->MemUnmap(p, n * m->granule) == CUDA_SUCCESS)
        return;
    for (size_t i = 0; i < n; i++)
        m->cu->MemUnmap(p + (CUdeviceptr)(i * m->granule), m->granule);
}

/* Creates n granules of physical memory of `kind` and maps them at p (one
 * handle each, released once mapped), then grants the device access.  On
 * failure nothing stays mapped. */
static CUresult run_create(vmm_backend_t *m, CUdeviceptr p, size_t n, int kind)
{
    CUresult r = CUDA_SUCCESS;
    size_t done = 0;
    for (; done < n; done++) {
        CUmemGenericAllocationHandle h;
        r = m->cu->MemCreate(&h, m->granule, &m->prop[kind], 0);
        if (r != CUDA_SUCCESS)
            break;
        r = m->cu->MemMap(p + (CUdeviceptr)(done * m->granule), m->granule, 0, h, 0);
        m->cu->MemRelease(h);
        if (r != CUDA_SUCCESS)
            break;
    }
    if (r == CUDA_SUCCESS)
        r = m->cu->MemSetAccess(p, n * m->granule, &m->access, 1);
    if (r != CUDA_SUCCESS && done)
        run_unmap(m, p, done);
    return r;
}

/* A free run of n granules at the hint if it is free there, else the lowest
 * one; SIZE_MAX if none. */
static size_t run_find(const vmm_backend_t *m, size_t n, void *hint)
{
    CUdeviceptr h = (CUdeviceptr)(uintptr_t)hint;
    if (h >= m->va && h < m->va + m->va_size && (h - m->va) % m->granule == 0) {
        size_t first = granule_index(m, h), i = first;
        while (i < m->ngranules && i - first < n && m->state[i] == VMM_NONE)
            i++;
        if (i - first == n)
            return first;
    }
    for (size_t i = 0; i + n <= m->ngranules;) {
        size_t j = 0;
        while (j < n && m->state[i + j] == VMM_NONE)
            j++;
        if (j == n)
            return i;
        i += j + 1;
    }
    return SIZE_MAX;
}

static vmem_status_t region_alloc_kind(backend_t *b, size_t size, void *hint, void **base,
                                       int kind)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    size_t n = size / m->granule;
    size_t first = run_find(m, n, hint);
    if (first == SIZE_MAX)
        return VMEM_ERR_NOMEM;
    if (!ctx_enter(m))
        return VMEM_ERR_BACKEND;
    CUresult r = run_create(m, granule_addr(m, first), n, kind);
    ctx_leave(m);
    if (r != CUDA_SUCCESS)
        return status_of(r);
    memset(m->state + first, kind, n);
    if (kind == VMM_DEVICE)
        m->in_use += size;
    else
        m->host_in_use += size;
    *base = (void *)(uintptr_t)granule_addr(m, first);
    return VMEM_OK;
}

static vmem_status_t vmm_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    return region_alloc_kind(b, size, hint, base, VMM_DEVICE);
}

static vmem_status_t vmm_region_alloc_host(backend_t *b, size_t size, void *hint, void **base)
{
    return region_alloc_kind(b, size, hint, base, VMM_HOST);
}

static void vmm_region_free(backend_t *b, void *base, size_t size)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)base;
    size_t first = granule_index(m, p), n = size / m->granule;
    if (!ctx_enter(m))
        return;
    /* Unlike cudaFree, unmapping does not wait for the work that may still
     * use the memory (freed blocks may have kernels queued on them). */
    m->cu->CtxSynchronize();
    run_unmap(m, p, n);
    ctx_leave(m);
    for (size_t i = first; i < first + n; i++) {
        if (m->state[i] == VMM_DEVICE)
            m->in_use -= m->granule;
        else if (m->state[i] == VMM_HOST)
            m->host_in_use -= m->granule;
    }
    memset(m->state + first, VMM_NONE, n);
}

/* One step of a move: n granules at src, new memory mapped at the staging
 * half dst, its handles in h. */
typedef struct move_step {
    CUdeviceptr src, dst;
    size_t n;
    CUmemGenericAllocationHandle *h;
    CUevent done;
} move_step_t;

/* Creates the new memory of a step and maps it at the staging half. */
static CUresult step_prepare(vmm_backend_t *m, move_step_t *s, int kind)
{
    size_t k = 0;
    CUresult r = CUDA_SUCCESS;
    for (; k < s->n; k++) {
        r = m->cu->MemCreate(&s->h[k], m->granule, &m->prop[kind], 0);
        if (r != CUDA_SUCCESS)
            break;
        r = m->cu->MemMap(s->dst + (CUdeviceptr)(k * m->granule), m->granule, 0, s->h[k], 0);
        if (r != CUDA_SUCCESS) {
            m->cu->MemRelease(s->h[k]);
            break;
        }
    }
    if (r == CUDA_SUCCESS)
        r = m->cu->MemSetAccess(s->dst, s->n * m->granule, &m->access, 1);
    if (r != CUDA_SUCCESS) {
        run_unmap(m, s->dst, k);
        for (size_t i = 0; i < k; i++)
            m->cu->MemRelease(s->h[i]);
    }
    return r;
}

/* After the copy: the new memory replaces the old at src (the old memory is
 * freed by its unmap), the staging half is unmapped, the handles dropped.
 * A failure here leaves src unmapped: the caller reports it. */
static CUresult step_finish(vmm_backend_t *m, move_step_t *s)
{
    CUresult r = m->cu->EventSynchronize(s->done);
    if (r == CUDA_SUCCESS) {
        run_unmap(m, s->src, s->n);
        for (size_t k = 0; k < s->n && r == CUDA_SUCCESS; k++)
            r = m->cu->MemMap(s->src + (CUdeviceptr)(k * m->granule), m->granule, 0, s->h[k], 0);
        if (r == CUDA_SUCCESS)
            r = m->cu->MemSetAccess(s->src, s->n * m->granule, &m->access, 1);
    }
    run_unmap(m, s->dst, s->n);
    for (size_t k = 0; k < s->n; k++)
        m->cu->MemRelease(s->h[k]);
    return r;
}

static void step_abandon(vmm_backend_t *m, move_step_t *s)
{
    m->cu->EventSynchronize(s->done);
    run_unmap(m, s->dst, s->n);
    for (size_t k = 0; k < s->n; k++)
        m->cu->MemRelease(s->h[k]);
}

/*
 * Moves in steps of `batch` bytes, two in flight: while the copy of step k
 * runs on the backend's stream, the memory of step k + 1 is created and
 * mapped, then step k is remapped.  Old and new memory are both mapped
 * during a copy (the new at the staging range), so each copy is one
 * cuMemcpyAsync at full bus speed.  Steps finish in order, so what moved
 * is always a prefix.  If a remap fails after the old memory was unmapped
 * (the driver refusing to map a handle it just mapped elsewhere), those
 * granules are lost: the call fails and bfc_check sees the range unmapped.
 */
static vmem_status_t vmm_region_move(backend_t *b, void *base, size_t size, int to_host,
                                     size_t *moved)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)base;
    size_t first = granule_index(m, p), n = size / m->granule, per = m->batch / m->granule;
    int from = to_host ? VMM_DEVICE : VMM_HOST, kind = to_host ? VMM_HOST : VMM_DEVICE;
    *moved = 0;
    if (p < m->va || first + n > m->ngranules)
        return VMEM_ERR_INVALID;
    for (size_t i = first; i < first + n; i++)
        if (m->state[i] != from)
            return VMEM_ERR_INVALID;
    if (!ctx_enter(m))
        return VMEM_ERR_BACKEND;
    CUresult r = m->cu->CtxSynchronize(); /* the data must be at rest */
    move_step_t step[2];
    size_t started = 0, finished = 0, pos = 0; /* steps, steps, granules */
    while (finished < started || (r == CUDA_SUCCESS && pos < n)) {
        while (r == CUDA_SUCCESS && started - finished < 2 && pos < n) {
            move_step_t *s = &step[started % 2];
            s->src = p + (CUdeviceptr)(pos * m->granule);
            s->dst = m->stage + (CUdeviceptr)((started % 2) * m->batch);
            s->n = n - pos < per ? n - pos : per;
            s->h = m->handles + (started % 2) * per;
            s->done = m->done[started % 2];
            r = step_prepare(m, s, kind);
            if (r != CUDA_SUCCESS)
                break;
            r = m->cu->MemcpyAsync(s->dst, s->src, s->n * m->granule, m->stream);
            if (r == CUDA_SUCCESS)
                r = m->cu->EventRecord(s->done, m->stream);
            if (r != CUDA_SUCCESS) {
                step_abandon(m, s);
                break;
            }
            pos += s->n;
            started++;
        }
        if (finished == started)
            break;
        move_step_t *s = &step[finished % 2];
        CUresult f = step_finish(m, s);
        finished++;
        if (f != CUDA_SUCCESS) {
            if (r == CUDA_SUCCESS)
                r = f;
            break;
        }
        memset(m->state + granule_index(m, s->src), kind, s->n);
        *moved += s->n * m->granule;
    }
    for (; finished < started; finished++)
        step_abandon(m, &step[finished % 2]);
    ctx_leave(m);
    if (to_host) {
        m->in_use -= *moved;
        m->host_in_use += *moved;
    } else {
        m->in_use += *moved;
        m->host_in_use -= *moved;
    }
    return r == CUDA_SUCCESS ? VMEM_OK : status_of(r);
}

static backend_backing_t vmm_backing(const backend_t *b, const void *addr)
{
    const vmm_backend_t *m = (const vmm_backend_t *)b;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
    if (p < m->va || p >= m->va + m->va_size)
        return BACKEND_BACKING_NONE;
    switch (m->state[granule_index(m, p)]) {
    case VMM_DEVICE:
        return BACKEND_BACKING_DEVICE;
    case VMM_HOST:
        return BACKEND_BACKING_HOST;
    default:
        return BACKEND_BACKING_NONE;
    }
}

static vmem_status_t vmm_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    if (!ctx_enter(m))
        return VMEM_ERR_BACKEND;
    CUresult r = m->cu->MemGetInfo(free_bytes, total_bytes);
    ctx_leave(m);
    return status_of(r);
}

static void vmm_destroy(backend_t *b)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    if (m->va && ctx_enter(m)) {
        m->cu->CtxSynchronize();
        for (size_t i = 0; m->state && i < m->ngranules;) {
            if (m->state[i] == VMM_NONE) {
                i++;
                continue;
            }
            size_t j = i;
            while (j < m->ngranules && m->state[j] != VMM_NONE)
                j++;
            run_unmap(m, granule_addr(m, i), j - i);
            i = j;
        }
        m->cu->MemAddressFree(m->va, m->va_size);
        if (m->stage)
            m->cu->MemAddressFree(m->stage, 2 * m->batch);
        for (int i = 0; i < 2; i++)
            if (m->done[i])
                m->cu->EventDestroy(m->done[i]);
        if (m->stream)
            m->cu->StreamDestroy(m->stream);
        ctx_leave(m);
    }
    if (m->ctx)
        m->cu->DevicePrimaryCtxRelease(m->dev);
    free(m->state);
    free(m->handles);
    free(m);
}

static const backend_ops_t vmm_ops = {vmm_region_alloc, vmm_region_free, vmm_mem_info,
                                      vmm_destroy};
static const backend_host_ops_t vmm_host_ops = {vmm_region_alloc_host, vmm_region_move,
                                                vmm_backing};

/* Host physical memory for VMM: HOST where the device supports it, else
 * HOST_NUMA node 0.  0 if neither. */
static int host_prop_init(vmm_backend_t *m)
{
    int v = 0;
    CUmemAllocationProp *hp = &m->prop[VMM_HOST];
    memset(hp, 0, sizeof *hp);
    hp->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    if (m->cu->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                  m->dev) == CUDA_SUCCESS && v) {
        hp->location.type = CU_MEM_LOCATION_TYPE_HOST;
        return 1;
    }
    v = 0;
    if (m->cu->DeviceGetAttribute(&v,
                                  CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                  m->dev) == CUDA_SUCCESS && v) {
        hp->location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        hp->location.id = 0;
        return 1;
    }
    return 0;
}

/* Tries one granule of host memory mapped into the range and readable by
 * the device; 1 if that works. */
static int host_probe(vmm_backend_t *m)
{
    CUdeviceptr p = m->va;
    if (run_create(m, p, 1, VMM_HOST) != CUDA_SUCCESS)
        return 0;
    run_unmap(m, p, 1);
    return 1;
}

/* Whether one cuMemUnmap may cover two mappings. */
static void unmap_probe(vmm_backend_t *m)
{
    m->unmap_runs = 0;
    if (run_create(m, m->va, 2, VMM_DEVICE) != CUDA_SUCCESS)
        return;
    if (m->cu->MemUnmap(m->va, 2 * m->granule) == CUDA_SUCCESS) {
        m->unmap_runs = 1;
        return;
    }
    run_unmap(m, m->va, 2);
}

static vmem_status_t vmm_open(vmm_backend_t *m, int device)
{
    const cu_driver_t *cu = m->cu;
    int v = 0;
    if (cu->DeviceGet(&m->dev, device) != CUDA_SUCCESS ||
        cu->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               m->dev) != CUDA_SUCCESS || !v)
        return VMEM_ERR_UNAVAILABLE;
    if (cu->DevicePrimaryCtxRetain(&m->ctx, m->dev) != CUDA_SUCCESS)
        return VMEM_ERR_UNAVAILABLE;
    m->device = device;
    CUmemAllocationProp *dp = &m->prop[VMM_DEVICE];
    memset(dp, 0, sizeof *dp);
    dp->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    dp->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    dp->location.id = device;
    m->access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    m->access.location.id = device;
    m->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    int host = host_prop_init(m);
    size_t gd = 0, gh = 0, free_b = 0, total = 0;
    if (!ctx_enter(m))
        return VMEM_ERR_UNAVAILABLE; /* the caller releases the context */
    vmem_status_t st = VMEM_ERR_UNAVAILABLE;
    if (cu->MemGetAllocationGranularity(&gd, dp, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
        cu->MemGetInfo(&free_b, &total) != CUDA_SUCCESS || gd == 0)
        goto out;
    if (host && (cu->MemGetAllocationGranularity(&gh, &m->prop[VMM_HOST],
                                                 CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
                 gh == 0))
        host = 0;
    m->granule = gd > VMM_GRANULE_MIN ? gd : VMM_GRANULE_MIN;
    if (host && gh > m->granule)
        m->granule = gh;
    if (m->granule % gd || (host && m->granule % gh) || m->granule % VMM_GRANULE_MIN) {
        host = 0; /* granularities that do not nest: device memory only */
        m->granule = gd > VMM_GRANULE_MIN ? gd : VMM_GRANULE_MIN;
        if (m->granule % gd || m->granule % VMM_GRANULE_MIN)
            goto out;
    }
    m->va_size = (total * VMM_RANGE_FACTOR + VMM_RANGE_HOST) / m->granule * m->granule;
    m->ngranules = m->va_size / m->granule;
    m->state = calloc(m->ngranules, 1);
    m->batch = VMM_STAGE_BATCH / m->granule * m->granule;
    if (m->batch == 0)
        m->batch = m->granule;
    m->handles = calloc(2 * (m->batch / m->granule), sizeof *m->handles);
    if (!m->state || !m->handles) {
        st = VMEM_ERR_NOMEM;
        goto out;
    }
    if (cu->MemAddressReserve(&m->va, m->va_size, m->granule, 0, 0) != CUDA_SUCCESS)
        goto out;
    unmap_probe(m);
    if (host && (cu->MemAddressReserve(&m->stage, 2 * m->batch, m->granule, 0, 0) != CUDA_SUCCESS ||
                 cu->StreamCreate(&m->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
                 cu->EventCreate(&m->done[0], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
                 cu->EventCreate(&m->done[1], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
                 !host_probe(m)))
        host = 0; /* device memory only; the pinned host arena takes spills */
    st = VMEM_OK;
out:
    ctx_leave(m);
    m->base.flags = BACKEND_F_CONTIGUOUS | BACKEND_F_SPLITTABLE | (host ? BACKEND_F_HOST_BACKING : 0);
    return st;
}

vmem_status_t backend_vmm_create(int device, backend_t **out)
{
    const cu_driver_t *cu = cu_driver();
    if (!cu || !backend_cuda_present(device))
        return VMEM_ERR_UNAVAILABLE;
    /* The runtime creates the primary context; the driver calls use it. */
    int saved = -1;
    if (cudaGetDevice(&saved) != cudaSuccess)
        saved = -1;
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(NULL) != cudaSuccess) {
        cudaGetLastError();
        return VMEM_ERR_UNAVAILABLE;
    }
    if (saved >= 0 && saved != device)
        cudaSetDevice(saved);
    vmm_backend_t *m = calloc(1, sizeof *m);
    if (!m)
        return VMEM_ERR_NOMEM;
    m->cu = cu;
    vmem_status_t st = vmm_open(m, device);
    if (st != VMEM_OK) {
        if (m->va || m->stage || m->stream || m->ctx)
            vmm_destroy(&m->base);
        else {
            free(m->state);
            free(m->handles);
            free(m);
        }
        return st;
    }
    m->base.ops = &vmm_ops;
    m->base.host_ops = (m->base.flags & BACKEND_F_HOST_BACKING) ? &vmm_host_ops : NULL;
    m->base.name = "vmm";
    m->base.granule = m->granule;
    m->base.range_base = (uintptr_t)m->va;
    m->base.range_size = m->va_size;
    backend_set_faults(&m->base, 0, 0, 0);
    *out = &m->base;
    return VMEM_OK;
}

#else /* !VMEM_HAVE_CUDA */

vmem_status_t backend_vmm_create(int device, backend_t **out)
{
    (void)device;
    (void)out;
    return VMEM_ERR_UNAVAILABLE;
}

#endif
