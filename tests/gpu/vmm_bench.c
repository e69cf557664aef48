/*
 * vmm-bench: what the vmm backend costs on a real GPU (issue 7's targets).
 *
 *   shrink    vmem_set_limit giving back 8 GiB of free granules: scattered
 *             (2-granule holes between live blocks) and in one run
 *   grow      allocating the same 8 GiB (cuMemCreate + map + access)
 *   spill     a block past the limit backed by host memory in place
 *   back      vmem_step_end moving it host -> device after a raise (GB/s)
 *   evict     vmem_step_end moving live data device -> host for a shrink
 *             below the live bytes (GB/s)
 *   copy      cudaMemcpy pinned host -> device, the bus for reference
 *   handles   the driver alone: 1 GiB created+mapped+made accessible and
 *             unmapped+released as 2 MiB, 64 MiB or 1 GiB handles (is a
 *             bigger handle worth its loss of page-granular release?)
 *
 * Variants: the shrinks run with device memory in 64 MiB and in 2 MiB handles
 * (VMEM_VMM_DEVICE_BIG), the moves with 64 MiB device and 2 MiB host
 * handles, 64 MiB on both sides, and 2 MiB device with 64 MiB host handles
 * (VMEM_VMM_HOST_BIG); each line of the table names its
 * variant, and the "path" lines what the backend did and where its time
 * went, so one run shows before and after.
 *
 * Every moved byte is checked afterwards (a pattern written with
 * cudaMemset, read back in samples).  One JSON object per measurement on
 * stdout, a summary table last.  Usage: vmm-bench [GiB to shrink, default 8]
 * [GiB to move, default 4; 0 skips the moves].  Exit 77 without a GPU, 1 on a wrong result.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "vmem_internal.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static int failures;

static void fail(const char *what)
{
    fprintf(stderr, "vmm-bench: %s\n", what);
    failures++;
}

static vmem_t *open_vmm(size_t limit, size_t host_limit)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_VMM;
    cfg.limit = limit;
    cfg.start_cap = limit > 64 * GiB ? limit : 64 * GiB;
    cfg.host_limit = host_limit;
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    if (st != VMEM_OK) {
        fprintf(stderr, "vmm-bench: vmem_create(vmm): %s\n", vmem_strerror(st));
        exit(1);
    }
    return v;
}

/* Writes byte `seed` over the block. */
static void fill(void *p, size_t bytes, int seed)
{
    if (cudaMemset(p, seed & 0xff, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        fail("cudaMemset failed");
}

/* Reads 1 MiB samples every 256 MiB (and the last one) and checks them. */
static void verify(const void *p, size_t bytes, int seed, const char *what)
{
    static unsigned char buf[1 << 20];
    for (size_t off = 0;; off += 256 * MiB) {
        if (off >= bytes)
            off = bytes > sizeof buf ? bytes - sizeof buf : 0;
        size_t n = bytes - off < sizeof buf ? bytes - off : sizeof buf;
        if (cudaMemcpy(buf, (const char *)p + off, n, cudaMemcpyDefault) != cudaSuccess) {
            fail("cudaMemcpy failed");
            return;
        }
        for (size_t i = 0; i < n; i++)
            if (buf[i] != (unsigned char)(seed & 0xff)) {
                fprintf(stderr, "vmm-bench: %s: byte %zu is %u, want %u\n", what, off + i, buf[i],
                        (unsigned)(seed & 0xff));
                failures++;
                return;
            }
        if (off + n >= bytes)
            return;
    }
}

/* In src/backend_vmm.c: a line naming the backend's variant (host handle
 * size, split threads) and where its time went. */
int backend_vmm_variant(const backend_t *b, char *buf, size_t len);

/* The variant of the measurements being taken: a table column. */
static const char *variant = "";

/* Sets an environment variable read by the vmm backend at creation. */
static void set_variant(const char *var, const char *value, const char *label)
{
    setenv(var, value, 1);
    variant = label;
}

/* Which path the backend took (big handles or one per granule, splits,
 * fallbacks, the variant and its times): one JSON line, and kept for the
 * summary. */
static char paths[12][720];
static int npaths;

static void path(const char *when, vmem_t *v)
{
    backend_vmm_counters_t c;
    if (backend_vmm_counters(v->dev_backend, &c) != 0)
        return;
    char line[720], var[400] = "";
    backend_vmm_variant(v->dev_backend, var, sizeof var);
    snprintf(line, sizeof line,
             "%s [%s]: handles %s, unmap per run %s, big maps %llu, big fallbacks %llu, "
             "splits %llu, split failures %llu, zombie %zu MiB, device syncs %llu; %s",
             when, variant,
             c.big_bytes ? (c.big_bytes == 64 * MiB ? "64 MiB+2 MiB" : "big+granule")
                         : "2 MiB only",
             c.unmap_runs ? "yes" : "no", c.big_maps, c.big_fallbacks, c.splits, c.split_failures,
             c.zombie_bytes / MiB, c.syncs, var);
    printf("{\"path\": \"%s\"}\n", line);
    if (npaths < 12)
        memcpy(paths[npaths++], line, sizeof line);
    if (c.lost)
        fail("the backend lost granules in a failed split");
}

typedef struct row {
    const char *name, *variant;
    double bytes, seconds;
    const char *target;
} row_t;

static row_t rows[32];
static int nrows;

static void report(const char *name, double bytes, double seconds, const char *target)
{
    if (nrows < (int)(sizeof rows / sizeof rows[0]))
        rows[nrows++] = (row_t){name, variant, bytes, seconds, target};
    printf("{\"bench\": \"%s\", \"variant\": \"%s\", \"bytes\": %.0f, \"ms\": %.3f, "
           "\"gb_per_s\": %.2f}\n",
           name, variant, bytes, seconds * 1e3, bytes / seconds / 1e9);
    fflush(stdout);
}

/* Shrink: `gib` GiB of free granules given back, scattered, and (one_run)
 * in one run. */
static void bench_shrink(size_t gib, int one_run)
{
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    size_t want = gib * GiB * 3 / 2; /* free 2 of every 3 granules */
    if (want + 2 * GiB > free_b) {
        gib = (free_b - 2 * GiB) * 2 / 3 / GiB;
        want = gib * GiB * 3 / 2;
        fprintf(stderr, "vmm-bench: only %zu GiB free on the device: shrinking %zu GiB\n",
                free_b / GiB, gib);
    }
    vmem_t *v = open_vmm(want, GiB);
    size_t g = v->dev_backend->granule, n = want / g;
    void **p = calloc(n, sizeof *p);
    double t0 = vmem_now();
    for (size_t i = 0; i < n; i++)
        if (!(p[i] = vmem_alloc(v, g)))
            fail("grow: allocation failed");
    double t1 = vmem_now();
    report("grow", (double)want, t1 - t0, "");
    for (size_t i = 0; i < n; i++)
        if (i % 3 != 0)
            vmem_free(v, p[i]);
    for (size_t i = 0; i < n; i += 3) /* the live granules keep their bytes */
        fill(p[i], g, (int)(i / 3 % 251) + 1);
    size_t live = (n + 2) / 3 * g, applied = 0;
    t0 = vmem_now();
    vmem_status_t st = vmem_set_limit(v, live, &applied);
    t1 = vmem_now();
    if (st != VMEM_OK || applied > live)
        fail("scattered shrink did not apply at once");
    report("shrink scattered", (double)(want - applied), t1 - t0, "< 100 ms for 8 GiB");
    for (size_t i = 0; i < n; i += 3)
        verify(p[i], g, (int)(i / 3 % 251) + 1, "live granule after the scattered shrink");
    for (size_t i = 0; i < n; i += 3)
        vmem_free(v, p[i]);
    free(p);
    path("after the scattered shrink", v);
    if (vmem_check(v) != VMEM_OK)
        fail("vmem_check after the scattered shrink");
    vmem_destroy(v);
    if (!one_run)
        return;
    /* One run: a single big block freed, then the shrink -- in a fresh
     * instance (the scattered phase leaves 2048 separate 2 MiB regions
     * behind, which the shrink would give back too). */
    v = open_vmm(want, GiB);
    void *big = vmem_alloc(v, gib * GiB);
    void *small = vmem_alloc(v, g);
    if (!big || !small)
        fail("one-run setup failed");
    vmem_free(v, big);
    size_t held = v->dev.held;
    t0 = vmem_now();
    st = vmem_set_limit(v, g, &applied);
    t1 = vmem_now();
    if (st != VMEM_OK)
        fail("one-run shrink did not apply at once");
    report("shrink one run", (double)(held - applied), t1 - t0, "< 100 ms for 8 GiB");
    path("after the one-run shrink", v);
    vmem_free(v, small);
    if (vmem_check(v) != VMEM_OK)
        fail("vmem_check after the shrinks");
    vmem_destroy(v);
}

/* Spill in place, bring back, evict: `gib` GiB moved each way. */
static void bench_moves(size_t gib)
{
    size_t bytes = gib * GiB, base = GiB;
    vmem_t *v = open_vmm(base, 2 * bytes + GiB);
    if (!(v->dev_backend->flags & BACKEND_F_HOST_BACKING)) {
        printf("{\"bench\": \"moves\", \"skipped\": \"no host backing in this driver\"}\n");
        vmem_destroy(v);
        return;
    }
    void *d = vmem_alloc(v, base);
    if (!d) {
        fail("device block");
        vmem_destroy(v);
        return;
    }
    fill(d, base, 0x11);
    double t0 = vmem_now();
    void *s = vmem_alloc(v, bytes); /* past the limit: host memory in place */
    double t1 = vmem_now();
    if (!s || v->dev.host_in_use < bytes) {
        fail("spill in place");
        vmem_destroy(v);
        return;
    }
    report("spill (host granules)", (double)bytes, t1 - t0, "");
    fill(s, bytes, 0x5a);
    vmem_set_limit(v, base + bytes + GiB, NULL);
    t0 = vmem_now();
    vmem_step_end(v);
    t1 = vmem_now();
    if (v->dev.held_host != 0)
        fail("bring back left host memory");
    report("back host->device", (double)bytes, t1 - t0, ">= 25 GB/s");
    verify(s, bytes, 0x5a, "after bring back");
    verify(d, base, 0x11, "device block after bring back");
    /* Shrink below the live bytes: the oldest block (d) and part of s go. */
    vmem_set_limit(v, base, NULL);
    t0 = vmem_now();
    vmem_step_end(v);
    t1 = vmem_now();
    size_t evicted = v->dev.held_host;
    report("evict device->host", (double)evicted, t1 - t0, "");
    verify(s, bytes, 0x5a, "after eviction");
    verify(d, base, 0x11, "device block after eviction");
    vmem_set_limit(v, base + bytes + GiB, NULL);
    t0 = vmem_now();
    vmem_step_end(v);
    t1 = vmem_now();
    report("back again host->device", (double)evicted, t1 - t0, ">= 25 GB/s");
    verify(s, bytes, 0x5a, "after the second bring back");
    verify(d, base, 0x11, "device block at the end");
    path("after the moves", v);
    if (vmem_check(v) != VMEM_OK)
        fail("vmem_check after the moves");
    vmem_free(v, s);
    vmem_free(v, d);
    vmem_destroy(v);
}

static void bench_copy(size_t gib)
{
    size_t bytes = gib * GiB;
    void *h = NULL, *d = NULL;
    if (cudaHostAlloc(&h, bytes, cudaHostAllocDefault) != cudaSuccess ||
        cudaMalloc(&d, bytes) != cudaSuccess) {
        fail("copy reference: allocation");
        return;
    }
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice); /* warm */
    double t0 = vmem_now();
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    double t1 = vmem_now();
    report("cudaMemcpy pinned->device", (double)bytes, t1 - t0, "(reference)");
    cudaFree(d);
    cudaFreeHost(h);
}

/* 1 GiB of device memory through the driver in handles of `handle` bytes:
 * create + map + one set-access, then unmap (one call per handle) +
 * release.  Reports both halves. */
static void bench_handles(size_t handle)
{
    const cu_driver_t *cu = cu_driver();
    if (!cu)
        return;
    size_t total = GiB, n = total / handle;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUdeviceptr va = 0;
    cudaFree(NULL);
    if (cu->MemAddressReserve(&va, total, handle, 0, 0) != CUDA_SUCCESS) {
        fail("handles: reserve");
        return;
    }
    CUmemGenericAllocationHandle *h = calloc(n, sizeof *h);
    double t0 = vmem_now();
    for (size_t i = 0; i < n; i++) {
        if (cu->MemCreate(&h[i], handle, &prop, 0) != CUDA_SUCCESS ||
            cu->MemMap(va + i * handle, handle, 0, h[i], 0) != CUDA_SUCCESS) {
            fail("handles: create/map");
            n = i;
            break;
        }
    }
    cu->MemSetAccess(va, n * handle, &acc, 1);
    double t1 = vmem_now();
    for (size_t i = 0; i < n; i++) {
        cu->MemUnmap(va + i * handle, handle);
        cu->MemRelease(h[i]);
    }
    double t2 = vmem_now();
    cu->MemAddressFree(va, total);
    free(h);
    char name[48];
    snprintf(name, sizeof name, "driver map %zu MiB handles", handle / MiB);
    report(strdup(name), (double)total, t1 - t0, "");
    snprintf(name, sizeof name, "driver unmap %zu MiB handles", handle / MiB);
    report(strdup(name), (double)total, t2 - t1, "");
}

int main(int argc, char **argv)
{
    size_t shrink_gib = argc > 1 ? strtoul(argv[1], NULL, 10) : 8;
    size_t move_gib = argc > 2 ? strtoul(argv[2], NULL, 10) : 4;
    if (!backend_cuda_present(0)) {
        fprintf(stderr, "vmm-bench: no CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("{\"device\": \"%s\", \"memory_gib\": %.1f}\n", prop.name,
           (double)prop.totalGlobalMem / (double)GiB);
    /* Shrinks with device memory in 64 MiB handles (live data in a cut
     * handle is re-backed) and in 2 MiB handles (nothing to re-back). */
    set_variant("VMEM_VMM_DEVICE_BIG", "1", "device handles 64 MiB");
    bench_shrink(shrink_gib, 1);
    set_variant("VMEM_VMM_DEVICE_BIG", "0", "device handles 2 MiB");
    bench_shrink(shrink_gib, 1);
    /* Moves: host granules in 2 MiB and in 64 MiB handles, device memory in
     * 64 MiB handles; then host 64 MiB with device 2 MiB handles. */
    if (move_gib > 0) { /* 0: the shrinks and the driver alone only */
        set_variant("VMEM_VMM_DEVICE_BIG", "1", "dev 64 host 2 MiB");
        setenv("VMEM_VMM_HOST_BIG", "0", 1);
        bench_moves(move_gib);
        set_variant("VMEM_VMM_HOST_BIG", "1", "dev 64 host 64 MiB");
        bench_moves(move_gib);
        set_variant("VMEM_VMM_DEVICE_BIG", "0", "dev 2 host 64 MiB");
        bench_moves(move_gib);
    }
    unsetenv("VMEM_VMM_HOST_BIG");
    unsetenv("VMEM_VMM_DEVICE_BIG");
    variant = "driver alone";
    if (move_gib > 0)
        bench_copy(move_gib);
    bench_handles(2 * MiB);
    bench_handles(64 * MiB);
    bench_handles(GiB);
    printf("\n%-28s %-20s %8s %9s %9s  %s\n", "vmm-bench", "variant", "MiB", "ms", "GB/s",
           "target");
    for (int i = 0; i < nrows; i++)
        printf("%-28s %-20s %8.0f %9.2f %9.2f  %s\n", rows[i].name, rows[i].variant,
               rows[i].bytes / (double)MiB, rows[i].seconds * 1e3,
               rows[i].bytes / rows[i].seconds / 1e9, rows[i].target);
    for (int i = 0; i < npaths; i++)
        printf("path %s\n", paths[i]);
    printf("%s\n", failures ? "RESULT: FAILED (see stderr)" : "RESULT: all data checks passed");
    return failures ? 1 : 0;
}
