/*
 * vmm-driver-probe: what each CUDA VMM driver call costs on this machine,
 * one phase at a time, so the vmm backend's per-handle work can be priced
 * (docs/vmm.md, "Where the scattered shrink's time goes").
 *
 * Every phase runs the same call N times (default 2048, the number of
 * isolated live granules in vmm-bench's scattered 8 GiB shrink) and prints
 * microseconds per call.  Phases:
 *
 *   isolated   2 MiB handles at every third granule (as the live granules of
 *              a split): cuMemCreate, cuMemMap, cuMemSetAccess (one per
 *              mapping: they are isolated), cuMemRelease while mapped,
 *              cuMemUnmap (which then frees the memory)
 *   retained   2 MiB handles side by side: create + map, one set-access,
 *              then cuMemUnmap with the handle still held, then cuMemRelease
 *              (which frees the memory): which of the two pays for the free
 *   one-call   as retained, but one cuMemUnmap over the whole run of mappings
 *   threads    cuMemCreate and cuMemRelease (after the unmaps) spread over
 *              T threads (default 4), each with the context current
 *   big        64 MiB handles: create + map, one set-access; unmap (freed)
 *   copies     cuMemcpyAsync device-to-device: N launches of 2 MiB (one
 *              sync), and one 64 MiB copy
 *   swap       64 MiB handles: the calls of a move to host by swap
 *              (retain, second mapping, access; host memory mapped again)
 *   sizes      one handle per block, blocks of 2 to 512 MiB (device, then
 *              host memory): cuMemCreate, cuMemMap, cuMemSetAccess per
 *              mapping, cuMemUnmap (frees); per call and per MiB: what
 *              moving a whole block costs when each block is one mapping
 *   discard    20 GiB of device memory in handles of 64 MiB, 512 MiB and
 *              one 20 GiB handle (released once mapped), then freed by
 *              cuMemUnmap: one call over the run, one call per mapping, and
 *              per mapping spread over 2, 4 and 8 threads: what a pause with
 *              discard pays per handle, and whether threads share it
 *
 * Usage: vmm-driver-probe [N] [T].  JSON lines on stdout.  Exit 77 without a
 * GPU, 1 when a driver call fails.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "vmem_internal.h" /* vmem_now */

#define MiB ((size_t)1 << 20)

static const cu_driver_t *cu;
static CUcontext ctx;
static CUmemAllocationProp prop;
static CUmemAccessDesc acc;
static size_t g; /* granule */

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "vmm-driver-probe: %s: %s\n", what, cu_error_string(r));
        exit(1);
    }
}

static void report(const char *phase, const char *call, size_t n, double s)
{
    printf("{\"phase\": \"%s\", \"call\": \"%s\", \"n\": %zu, \"ms\": %.2f, \"us_per_call\": %.2f}\n",
           phase, call, n, s * 1e3, s * 1e6 / (double)n);
    fflush(stdout);
}

enum { JOB_CREATE, JOB_RELEASE, JOB_UNMAP };

/* One thread's share [lo, hi) of n calls of one kind. */
typedef struct job {
    int op;                         /* JOB_*: */
    CUmemGenericAllocationHandle *h; /* create h[i] (2 MiB), or release it */
    CUdeviceptr va;                 /* unmap [va + i * sz, + sz) (which frees it) */
    size_t sz, lo, hi;
} job_t;

static void *worker(void *arg)
{
    job_t *j = arg;
    check(cu->CtxPushCurrent(ctx), "push");
    for (size_t i = j->lo; i < j->hi; i++) {
        if (j->op == JOB_CREATE)
            check(cu->MemCreate(&j->h[i], g, &prop, 0), "create (thread)");
        else if (j->op == JOB_RELEASE)
            check(cu->MemRelease(j->h[i]), "release (thread)");
        else
            check(cu->MemUnmap(j->va + i * j->sz, j->sz), "unmap (thread)");
    }
    CUcontext c;
    cu->CtxPopCurrent(&c);
    return NULL;
}

/* Runs the n calls of `kind` (lo and hi are set here) spread over t
 * threads; returns the seconds taken. */
static double threaded(job_t kind, size_t n, int t)
{
    pthread_t tid[64];
    job_t job[64];
    double t0 = vmem_now();
    for (int i = 0; i < t; i++) {
        job[i] = kind;
        job[i].lo = n * (size_t)i / (size_t)t;
        job[i].hi = n * (size_t)(i + 1) / (size_t)t;
        if (pthread_create(&tid[i], NULL, worker, &job[i]) != 0)
            worker(&job[i]), tid[i] = 0;
    }
    for (int i = 0; i < t; i++)
        if (tid[i])
            pthread_join(tid[i], NULL);
    return vmem_now() - t0;
}

/*
 * swap: the driver calls of a move to host by swap (src/backend_vmm.c,
 * swap_prepare), per 64 MiB handle, nb of them, in three 64 MiB-aligned
 * areas of va: device memory mapped at A; cuMemRetainAllocationHandle of
 * it from its address; cuMemMap of the retained handle at B (a second
 * mapping) and cuMemSetAccess there; the same for a handle held since its
 * creation (no retain); host memory (when the device maps it) created at
 * C, unmapped with the handle held, mapped again (a kept handle) with
 * cuMemSetAccess per mapping, then again with one cuMemSetAccess over all.
 */
static void swap_calls(CUdeviceptr va, size_t nb)
{
    size_t big = 64 * MiB;
    if (nb < 2)
        return;
    CUdeviceptr A = va, B = va + nb * big, C = va + 2 * nb * big;
    CUmemGenericAllocationHandle *hd = calloc(nb, sizeof *hd), *hr = calloc(nb, sizeof *hr),
                                 *hh = calloc(nb, sizeof *hh);
    for (size_t i = 0; i < nb; i++) {
        check(cu->MemCreate(&hd[i], big, &prop, 0), "swap: create device");
        check(cu->MemMap(A + i * big, big, 0, hd[i], 0), "swap: map device");
    }
    check(cu->MemSetAccess(A, nb * big, &acc, 1), "swap: access device");
    double t0 = vmem_now();
    for (size_t i = 0; i < nb; i++)
        check(cu->MemRetainAllocationHandle(&hr[i], (void *)(uintptr_t)(A + i * big)), "retain");
    double t1 = vmem_now();
    report("swap", "64 MiB device cuMemRetainAllocationHandle", nb, t1 - t0);
    for (size_t i = 0; i < nb; i++)
        check(cu->MemMap(B + i * big, big, 0, hr[i], 0), "swap: map retained");
    double t2 = vmem_now();
    report("swap", "64 MiB device cuMemMap of the retained handle (second mapping)", nb, t2 - t1);
    for (size_t i = 0; i < nb; i++)
        check(cu->MemSetAccess(B + i * big, big, &acc, 1), "swap: access retained");
    double t3 = vmem_now();
    report("swap", "64 MiB device cuMemSetAccess of the second mapping", nb, t3 - t2);
    check(cu->MemUnmap(B, nb * big), "swap: unmap B");
    for (size_t i = 0; i < nb; i++)
        check(cu->MemRelease(hr[i]), "swap: release retained");
    t0 = vmem_now();
    for (size_t i = 0; i < nb; i++) {
        check(cu->MemMap(B + i * big, big, 0, hd[i], 0), "swap: map held");
        check(cu->MemSetAccess(B + i * big, big, &acc, 1), "swap: access held");
    }
    report("swap", "64 MiB device cuMemMap + cuMemSetAccess, handle held (no retain)", nb,
           vmem_now() - t0);
    check(cu->MemUnmap(B, nb * big), "swap: unmap B");
    check(cu->MemUnmap(A, nb * big), "swap: unmap A");
    for (size_t i = 0; i < nb; i++)
        check(cu->MemRelease(hd[i]), "swap: release device");
    CUmemAllocationProp hp = prop;
    int v = 0;
    hp.location.type = CU_MEM_LOCATION_TYPE_HOST;
    hp.location.id = 0;
    if (cu->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) !=
            CUDA_SUCCESS || !v) {
        printf("{\"phase\": \"swap\", \"host\": \"not supported\"}\n");
        goto out;
    }
    t0 = vmem_now();
    for (size_t i = 0; i < nb; i++) {
        check(cu->MemCreate(&hh[i], big, &hp, 0), "swap: create host");
        check(cu->MemMap(C + i * big, big, 0, hh[i], 0), "swap: map host");
    }
    check(cu->MemSetAccess(C, nb * big, &acc, 1), "swap: access host");
    report("swap", "64 MiB host create (pins) + map, one access", nb, vmem_now() - t0);
    t0 = vmem_now();
    for (size_t i = 0; i < nb; i++)
        check(cu->MemUnmap(C + i * big, big), "swap: unmap host");
    report("swap", "64 MiB host cuMemUnmap (handle held)", nb, vmem_now() - t0);
    t0 = vmem_now();
    for (size_t i = 0; i < nb; i++)
        check(cu->MemMap(C + i * big, big, 0, hh[i], 0), "swap: map kept host");
    t1 = vmem_now();
    report("swap", "64 MiB host cuMemMap of a kept handle", nb, t1 - t0);
    for (size_t i = 0; i < nb; i++)
        check(cu->MemSetAccess(C + i * big, big, &acc, 1), "swap: access kept host");
    report("swap", "64 MiB host cuMemSetAccess per mapping", nb, vmem_now() - t1);
    check(cu->MemUnmap(C, nb * big), "swap: unmap host run");
    t0 = vmem_now();
    for (size_t i = 0; i < nb; i++)
        check(cu->MemMap(C + i * big, big, 0, hh[i], 0), "swap: map kept host");
    t1 = vmem_now();
    check(cu->MemSetAccess(C, nb * big, &acc, 1), "swap: access host run");
    report("swap", "64 MiB host cuMemSetAccess, one call over all (per mapping)", nb,
           vmem_now() - t1);
    t0 = vmem_now();
    check(cu->MemUnmap(C, nb * big), "swap: unmap host run");
    for (size_t i = 0; i < nb; i++)
        check(cu->MemRelease(hh[i]), "swap: release host");
    report("swap", "64 MiB host unmap + release (frees)", nb, vmem_now() - t0);
out:
    free(hd);
    free(hr);
    free(hh);
}

/* sizes: for each block size, k blocks of one handle each (k * size <= 2
 * GiB, k <= 64) at va: the calls that make, map, open and free them, for
 * device memory and (where supported) host memory. */
static void block_sizes(void)
{
    static const size_t mib[] = {2, 8, 32, 128, 512};
    size_t room = 2048 * MiB;
    CUdeviceptr va;
    check(cu->MemAddressReserve(&va, room, 512 * MiB, 0, 0), "sizes: reserve");
    CUmemGenericAllocationHandle h[64];
    CUmemAllocationProp hp = prop;
    hp.location.type = CU_MEM_LOCATION_TYPE_HOST;
    hp.location.id = 0;
    int host = 0;
    if (cu->DeviceGetAttribute(&host, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               0) != CUDA_SUCCESS)
        host = 0;
    for (int side = 0; side < 1 + (host != 0); side++) {
        const CUmemAllocationProp *pp = side ? &hp : &prop;
        for (size_t j = 0; j < sizeof mib / sizeof *mib; j++) {
            size_t sz = mib[j] * MiB, k = room / sz < 64 ? room / sz : 64;
            double t0 = vmem_now();
            for (size_t i = 0; i < k; i++)
                check(cu->MemCreate(&h[i], sz, pp, 0), "sizes: create");
            double t1 = vmem_now();
            for (size_t i = 0; i < k; i++) {
                check(cu->MemMap(va + i * sz, sz, 0, h[i], 0), "sizes: map");
                check(cu->MemRelease(h[i]), "sizes: release");
            }
            double t2 = vmem_now();
            for (size_t i = 0; i < k; i++)
                check(cu->MemSetAccess(va + i * sz, sz, &acc, 1), "sizes: access");
            double t3 = vmem_now();
            for (size_t i = 0; i < k; i++)
                check(cu->MemUnmap(va + i * sz, sz), "sizes: unmap");
            double t4 = vmem_now();
            printf("{\"phase\": \"sizes\", \"memory\": \"%s\", \"block_mib\": %zu, \"n\": %zu, "
                   "\"us_per_block\": {\"create\": %.1f, \"map\": %.1f, \"access\": %.1f, "
                   "\"unmap_frees\": %.1f}, \"us_per_mib\": {\"create\": %.2f, \"map\": %.2f, "
                   "\"access\": %.2f, \"unmap_frees\": %.2f}}\n",
                   side ? "host" : "device", mib[j], k, (t1 - t0) * 1e6 / k, (t2 - t1) * 1e6 / k,
                   (t3 - t2) * 1e6 / k, (t4 - t3) * 1e6 / k, (t1 - t0) * 1e6 / (k * mib[j]),
                   (t2 - t1) * 1e6 / (k * mib[j]), (t3 - t2) * 1e6 / (k * mib[j]),
                   (t4 - t3) * 1e6 / (k * mib[j]));
            fflush(stdout);
        }
    }
    cu->MemAddressFree(va, room);
}

/* discard: k handles of sz bytes mapped at va (released: an unmap frees). */
static void discard_map(CUdeviceptr va, size_t sz, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        CUmemGenericAllocationHandle h;
        check(cu->MemCreate(&h, sz, &prop, 0), "discard: create");
        check(cu->MemMap(va + i * sz, sz, 0, h, 0), "discard: map");
        check(cu->MemRelease(h), "discard: release");
    }
    check(cu->MemSetAccess(va, k * sz, &acc, 1), "discard: access");
    check(cu->CtxSynchronize(), "discard: sync");
}

static void discard_calls(void)
{
    size_t total = (size_t)20 << 30;
    size_t free_b = 0, tot_b = 0;
    if (cudaMemGetInfo(&free_b, &tot_b) != cudaSuccess || free_b < total + ((size_t)2 << 30)) {
        printf("{\"phase\": \"discard\", \"skipped\": \"less than 22 GiB free\"}\n");
        return;
    }
    CUdeviceptr va;
    check(cu->MemAddressReserve(&va, total, 512 * MiB, 0, 0), "discard: reserve");
    static const size_t mib[] = {64, 512, 20480};
    for (size_t j = 0; j < sizeof mib / sizeof *mib; j++) {
        size_t sz = mib[j] * MiB, k = total / sz;
        /* One call over the run (refused by drivers that want one per mapping). */
        discard_map(va, sz, k);
        double t0 = vmem_now();
        CUresult r = cu->MemUnmap(va, total);
        double one = vmem_now() - t0;
        if (r != CUDA_SUCCESS) {
            for (size_t i = 0; i < k; i++)
                check(cu->MemUnmap(va + i * sz, sz), "discard: unmap");
            one = -1;
        }
        discard_map(va, sz, k);
        t0 = vmem_now();
        for (size_t i = 0; i < k; i++)
            check(cu->MemUnmap(va + i * sz, sz), "discard: unmap");
        double each = vmem_now() - t0;
        printf("{\"phase\": \"discard\", \"handle_mib\": %zu, \"handles\": %zu, "
               "\"ms_one_call\": %.2f, \"ms_per_mapping\": %.2f", mib[j], k, one * 1e3, each * 1e3);
        static const int nt[] = {2, 4, 8};
        for (size_t q = 0; q < sizeof nt / sizeof *nt && k >= (size_t)nt[q]; q++) {
            discard_map(va, sz, k);
            double s = threaded((job_t){.op = JOB_UNMAP, .va = va, .sz = sz}, k, nt[q]);
            printf(", \"ms_%d_threads\": %.2f", nt[q], s * 1e3);
        }
        printf("}\n");
        fflush(stdout);
    }
    cu->MemAddressFree(va, total);
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 2048;
    int t = argc > 2 ? atoi(argv[2]) : 4;
    if (t < 1 || t > 64 || n < 64) {
        fprintf(stderr, "usage: vmm-driver-probe [N >= 64] [threads 1..64]\n");
        return 2;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || !(cu = cu_driver())) {
        fprintf(stderr, "vmm-driver-probe: no CUDA device or driver\n");
        return 77;
    }
    cudaFree(NULL);
    CUdevice dev;
    check(cu->DeviceGet(&dev, 0), "device");
    check(cu->DevicePrimaryCtxRetain(&ctx, dev), "context");
    check(cu->CtxPushCurrent(ctx), "push");
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    acc = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    check(cu->MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "gran");
    if (g < 2 * MiB)
        g = 2 * MiB;
    size_t span = 3 * n * g;
    CUdeviceptr va;
    check(cu->MemAddressReserve(&va, span, 64 * MiB, 0, 0), "reserve");
    CUmemGenericAllocationHandle *h = calloc(n, sizeof *h);
    printf("{\"granule\": %zu, \"n\": %zu, \"threads\": %d}\n", g, n, t);

    /* isolated */
    double t0 = vmem_now();
    for (size_t i = 0; i < n; i++)
        check(cu->MemCreate(&h[i], g, &prop, 0), "create");
    double t1 = vmem_now();
    report("isolated", "cuMemCreate 2 MiB", n, t1 - t0);
    for (size_t i = 0; i < n; i++)
        check(cu->MemMap(va + 3 * i * g, g, 0, h[i], 0), "map");
    double t2 = vmem_now();
    report("isolated", "cuMemMap", n, t2 - t1);
    for (size_t i = 0; i < n; i++)
        check(cu->MemSetAccess(va + 3 * i * g, g, &acc, 1), "access");
    double t3 = vmem_now();
    report("isolated", "cuMemSetAccess per mapping", n, t3 - t2);
    for (size_t i = 0; i < n; i++)
        check(cu->MemRelease(h[i]), "release");
    double t4 = vmem_now();
    report("isolated", "cuMemRelease (still mapped)", n, t4 - t3);
    for (size_t i = 0; i < n; i++)
        check(cu->MemUnmap(va + 3 * i * g, g), "unmap");
    double t5 = vmem_now();
    report("isolated", "cuMemUnmap (frees)", n, t5 - t4);
    report("isolated", "all five", n, t5 - t0);

    /* retained */
    t0 = vmem_now();
    for (size_t i = 0; i < n; i++) {
        check(cu->MemCreate(&h[i], g, &prop, 0), "create");
        check(cu->MemMap(va + i * g, g, 0, h[i], 0), "map");
    }
    t1 = vmem_now();
    check(cu->MemSetAccess(va, n * g, &acc, 1), "access");
    t2 = vmem_now();
    report("retained", "create + map", n, t1 - t0);
    report("retained", "one cuMemSetAccess over the run", 1, t2 - t1);
    for (size_t i = 0; i < n; i++)
        check(cu->MemUnmap(va + i * g, g), "unmap");
    t3 = vmem_now();
    report("retained", "cuMemUnmap (handle held)", n, t3 - t2);
    for (size_t i = 0; i < n; i++)
        check(cu->MemRelease(h[i]), "release");
    t4 = vmem_now();
    report("retained", "cuMemRelease (frees)", n, t4 - t3);

    /* one-call */
    for (size_t i = 0; i < n; i++) {
        check(cu->MemCreate(&h[i], g, &prop, 0), "create");
        check(cu->MemMap(va + i * g, g, 0, h[i], 0), "map");
    }
    check(cu->MemSetAccess(va, n * g, &acc, 1), "access");
    t0 = vmem_now();
    CUresult r = cu->MemUnmap(va, n * g);
    t1 = vmem_now();
    if (r == CUDA_SUCCESS) {
        report("one-call", "one cuMemUnmap over the run (handles held)", n, t1 - t0);
    } else {
        printf("{\"phase\": \"one-call\", \"refused\": \"%s\"}\n", cu_error_string(r));
        for (size_t i = 0; i < n; i++)
            check(cu->MemUnmap(va + i * g, g), "unmap");
    }
    t1 = vmem_now();
    for (size_t i = 0; i < n; i++)
        check(cu->MemRelease(h[i]), "release");
    report("one-call", "cuMemRelease (frees)", n, vmem_now() - t1);

    /* threads */
    double s = threaded((job_t){.op = JOB_CREATE, .h = h}, n, t);
    char call[64];
    snprintf(call, sizeof call, "cuMemCreate in %d threads", t);
    report("threads", call, n, s);
    for (size_t i = 0; i < n; i++)
        check(cu->MemMap(va + i * g, g, 0, h[i], 0), "map");
    check(cu->MemSetAccess(va, n * g, &acc, 1), "access");
    for (size_t i = 0; i < n; i++)
        check(cu->MemUnmap(va + i * g, g), "unmap");
    s = threaded((job_t){.op = JOB_RELEASE, .h = h}, n, t);
    snprintf(call, sizeof call, "cuMemRelease (frees) in %d threads", t);
    report("threads", call, n, s);

    /* big */
    size_t bn = n * g / (64 * MiB);
    t0 = vmem_now();
    for (size_t i = 0; i < bn; i++) {
        check(cu->MemCreate(&h[i], 64 * MiB, &prop, 0), "create big");
        check(cu->MemMap(va + i * 64 * MiB, 64 * MiB, 0, h[i], 0), "map big");
        check(cu->MemRelease(h[i]), "release big");
    }
    check(cu->MemSetAccess(va, bn * 64 * MiB, &acc, 1), "access big");
    t1 = vmem_now();
    report("big", "64 MiB create + map + release, one access", bn, t1 - t0);
    /* copies, while the big mappings are there */
    CUstream st;
    check(cu->StreamCreate(&st, CU_STREAM_NON_BLOCKING), "stream");
    size_t half = bn / 2 * 64 * MiB, m = half / g;
    check(cu->MemcpyAsync(va + half, va, 64 * MiB, st), "warm copy");
    check(cu->StreamSynchronize(st), "sync");
    t0 = vmem_now();
    for (size_t i = 0; i < m; i++)
        check(cu->MemcpyAsync(va + half + i * g, va + i * g, g, st), "copy 2 MiB");
    t1 = vmem_now();
    check(cu->StreamSynchronize(st), "sync");
    t2 = vmem_now();
    report("copies", "cuMemcpyAsync 2 MiB d2d (launch)", m, t1 - t0);
    report("copies", "cuMemcpyAsync 2 MiB d2d (launch + wait)", m, t2 - t0);
    t0 = vmem_now();
    check(cu->MemcpyAsync(va + half, va, 64 * MiB, st), "copy 64 MiB");
    check(cu->StreamSynchronize(st), "sync");
    report("copies", "one 64 MiB d2d copy + wait", 1, vmem_now() - t0);
    t0 = vmem_now();
    for (size_t i = 0; i < bn; i++)
        check(cu->MemUnmap(va + i * 64 * MiB, 64 * MiB), "unmap big");
    report("big", "64 MiB cuMemUnmap (frees)", bn, vmem_now() - t0);
    cu->StreamDestroy(st);
    swap_calls(va, span / (3 * 64 * MiB) < 32 ? span / (3 * 64 * MiB) : 32);
    cu->MemAddressFree(va, span);
    block_sizes();
    discard_calls();
    free(h);
    return 0;
}
