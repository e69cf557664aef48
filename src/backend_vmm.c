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
 * Handles: for device memory 512 MiB ones (huge, VMEM_VMM_HUGE_MIB)
 * wherever a run covers an aligned 512 MiB piece, then 64 MiB ones (big)
 * wherever it covers an aligned 64 MiB piece (device memory, and host
 * memory unless VMEM_VMM_HOST_BIG=0), one per granule elsewhere; each is
 * released as soon as it is mapped, so the mapping alone keeps the memory
 * alive and an unmap frees it.  cuMemUnmap cannot unmap part of a mapping,
 * so giving back part of a big mapping splits it (big_split: the live
 * granules move into granule handles at the same addresses), and part of a
 * huge one splits it into big ones first (huge_split).  The driver's costs are per mapping; they are further cut
 * by batching: one cuMemSetAccess per run, one cuMemUnmap per run where the
 * driver accepts a range spanning several mappings (probed at creation),
 * one device sync per release batch, and moves pipelined through a staging
 * range (below).
 *
 * The driver is reached through cuda_driver.c.  Backend calls are
 * serialised by the allocator's lock; the primary context of the device is
 * pushed around every call, so any thread may make them.
 */
#include "backend.h"

#ifdef VMEM_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_driver.h"

#define VMM_GRANULE_MIN ((size_t)2 << 20)
#define VMM_RANGE_FACTOR 4                 /* reserved range: 4x the device memory ... */
#define VMM_RANGE_HOST ((size_t)256 << 30) /* ... plus room for host memory in place */
#define VMM_BIG BACKEND_VMM_BIG_DEFAULT     /* a big handle (default; VMEM_VMM_BIG_MIB); also
                                              bytes per step of a move */
#define VMM_HUGE BACKEND_VMM_HUGE_DEFAULT  /* a huge handle (default; VMEM_VMM_HUGE_MIB):
                                              device memory only, where a run covers an
                                              aligned piece of this size */
#define VMM_HUGE_MAX BACKEND_VMM_HUGE_MAX  /* big handles per huge one, at most */
#define VMM_STAGES 4                       /* steps of a move in flight */
#define VMM_RING 16                        /* ... at most (a move of huge mappings to host:
                                              a huge mapping's pieces wait for its last, so
                                              the next one's copies run meanwhile) */
#define VMM_SPLIT_THREADS BACKEND_VMM_SPLIT_THREADS_MAX /* threads mapping a split's handles */
#define VMM_SPLIT_MIN 8                    /* kept granules below which a split maps alone */

/* VMM_ZOMBIE: given back to the engine but still mapped, because a big
 * mapping could not be split (no memory for the copy); freed with the rest
 * of its mapping. */
enum { VMM_NONE = 0, VMM_DEVICE = 1, VMM_HOST = 2, VMM_ZOMBIE = 3, VMM_FREEING = 4, VMM_PARKED = 5,
       VMM_ALIASED = 6 };
/* VMM_ALIASED: given back by a remap (vmm_region_remap) whose memory is
 * now mapped at another address too; still mapped here for the work queued
 * before the remap, unmapped after the next device synchronisation
 * (alias_flush).  Not counted in in_use (the other address counts it). */
/* VMM_PARKED: handed out but nothing mapped (a tag paused with discard,
 * region_park): the address stays reserved for it, an access faults. */
/* VMM_FREEING: given back during a release batch, unmapped at its end
 * (then every big mapping is split once, knowing all that goes). */

/* What big[i] says of the mapping granule i lies in. */
enum { MAP_GRANULE = 0, MAP_BIG = 1, MAP_HUGE = 2 };

/*
 * Invariants: state[i] says what backs granule i of [va, va + va_size)
 * (VMM_NONE: nothing mapped there); in_use == granule * count(VMM_DEVICE),
 * host_in_use == granule * count(VMM_HOST), zombie == granule *
 * count(VMM_ZOMBIE); big[i] is MAP_BIG iff granule i lies in a big mapping,
 * which then covers [i - i % bign, + bign) (device memory, or host memory
 * when host_big), MAP_HUGE iff it lies in a huge mapping, which then covers
 * [i - i % hugen, + hugen) (device memory only); one kind per mapping, its
 * given-back granules VMM_ZOMBIE or VMM_FREEING; no handle is held
 * by the backend outside a call (mappings keep the memory).  The staging
 * range and the scratch range are unmapped outside a call (the scratch
 * range: outside a release batch).
 */
/* Host memory kept for moves to host (one big handle): slot 0, the handle
 * h, held and mapped nowhere; else mapped at mirror slot `slot - 1`, which
 * owns it (h unused). */
typedef struct vmm_keep {
    CUmemGenericAllocationHandle h;
    uint32_t slot;
} vmm_keep_t;

typedef struct vmm_backend {
    backend_t base;
    const cu_driver_t *cu;
    int device;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr va;
    size_t va_size, ngranules, granule;
    uint8_t *state, *big;
    size_t bign;                  /* granules per big handle; 0: big handles off */
    size_t hugen;                 /* granules per huge handle (a multiple of bign); 0: off */
    int host_big;                 /* 1: host memory in big handles too (VMEM_VMM_HOST_BIG) */
    int dev_big;                  /* 1: device memory in big handles (VMEM_VMM_DEVICE_BIG) */
    int split_threads;            /* threads mapping a split's handles (VMEM_VMM_SPLIT_THREADS) */
    int grow_align;               /* regions end on big handles (VMEM_VMM_GROW_ALIGN) */
    size_t in_use, host_in_use, zombie;
    CUmemAllocationProp prop[3];  /* indexed by VMM_DEVICE, VMM_HOST */
    CUmemAccessDesc access;
    int unmap_runs;               /* 1: cuMemUnmap takes a run of several mappings */
    CUdeviceptr stage;            /* VMM_RING slots of slotn granules: new memory of moves */
    /* The mirror (VMEM_VMM_MOVE_MIRROR): a second range of nslots slots of
     * one big handle each, where host big handles stay mapped with access
     * granted across pauses, so a move to host copies straight from the
     * device memory at its address into a slot and never maps the old
     * device memory elsewhere.  slot_used[s]: 1 when slot s maps a handle
     * (its memory then lives until the slot is unmapped, whatever else maps
     * it); bslot[i / bign]: 1 + the slot whose handle is also mapped at the
     * big host mapping at granule i, 0 if none. */
    CUdeviceptr mirror;
    size_t nslots;
    uint8_t *slot_used;
    uint32_t *bslot;
    /* noacc[i / bign]: 1 when the big host mapping at granule i was mapped
     * at its address without access (base.move_guard: a guarded keep pause
     * through the mirror skips the host cuMemSetAccess there, so a kernel
     * touching it faults; the backend reads it through its slot, or sets
     * the access before a split reads it at its address). */
    uint8_t *noacc;
    CUdeviceptr scratch;          /* bign granules: live data of a split */
    int scratch_mapped;
    CUdeviceptr hscratch;         /* hugen granules: the data of a huge split */
    int hscratch_mapped;
    /* A move to host through the mirror of a huge mapping: its pieces (one
     * big handle each) are copied into slots one step at a time, and the
     * mapping is unmapped, and the slots' handles mapped in its place, only
     * once its last piece is copied.  hpend: the slots of the pieces copied
     * so far (hpend_n of them), piece k at hpend[k]. */
    uint32_t hpend[VMM_HUGE_MAX];
    size_t hpend_n;
    int batch_depth, batch_synced;
    size_t pend_lo, pend_hi;      /* granules holding VMM_FREEING lie in [pend_lo, pend_hi) */
    size_t alias_lo, alias_hi;    /* granules holding VMM_ALIASED lie in [alias_lo, alias_hi) */
    size_t aliased;               /* granules VMM_ALIASED */
    size_t batch;
    size_t slotn;                 /* granules per staging slot: batch's, or hugen */
    CUstream stream;
    CUevent done[VMM_RING];
    CUmemGenericAllocationHandle *handles; /* VMM_RING * slotn, scratch for moves */
    backend_vmm_counters_t n;
    unsigned long long threads_run; /* helper threads that mapped part of a split */
    /* Seconds spent, for vmm-bench (backend_vmm_variant): moves creating
     * new memory, waiting for copies, unmapping the old memory, mapping the
     * new, unmapping staging; splits copying, unmapping, mapping. */
    double t_prep, t_wait, t_unmap_old, t_map_new, t_unstage, t_scopy, t_sunmap, t_smap;
    double t_flush, t_sync; /* ends of release batches (all of it); device syncs */
    double t_remap;         /* remaps (vmm_region_remap) */
    double t_region_map;    /* vmm_region_alloc: finding, creating and mapping */
    double t_region_free;   /* vmm_region_free (the synchronisation before it included) */
    /* Moves to host by swap (swap_prepare): mapping the old device memory
     * at the staging slot, unmapping it at its address, mapping the host
     * memory there, queueing the copy; after it, unmapping staging and
     * freeing the old memory (late: after the last copy).  Parks: unmaps. */
    double t_sw_stage, t_sw_unmap, t_sw_host, t_enqueue, t_sw_free, t_free_late, t_park_unmap;
    /* Parts of t_sw_stage and t_sw_host: cuMemRetainAllocationHandle of the
     * old device memory, cuMemSetAccess at staging and at src (the rest is
     * cuMemMap), so the phases line says which driver call costs. */
    double t_sw_retain, t_sw_stage_access, t_sw_host_access;
    unsigned long long swap_steps, staged_steps, mirror_steps;
    /* Moves to host through the mirror (mirror_prepare / mirror_finish):
     * taking a slot (mapping a kept handle there, or creating one, with its
     * access: t_mi_adopt_access), unmapping the device memory at src,
     * mapping the slot's handle at src and its access there. */
    double t_mi_prep, t_mi_adopt_access, t_mi_unmap, t_mi_map, t_mi_access;
    /* Host memory kept for moves to host, one big handle each (bign
     * granules): from host_reserve, and the host memory of moves back to
     * the device (up to keep_max bytes, VMEM_VMM_HOST_KEEP).  A keep pause
     * maps these instead of creating (pinning) host memory. */
    vmm_keep_t *hkeep;
    size_t nkeep, keep_cap, keep_max;
    /* The same for granule handles (moves of ranges that are not whole big
     * mappings: placement's swap windows); keep_max covers both. */
    CUmemGenericAllocationHandle *hsmall;
    size_t nsmall, small_cap;
    int reserve_threads;          /* VMEM_VMM_RESERVE_THREADS */
    unsigned long long keep_hits; /* steps to host that mapped a kept handle */
} vmm_backend_t;

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

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

static size_t big_bytes(const vmm_backend_t *m) { return m->bign * m->granule; }

/* Granules of the mapping granule i lies in (i mapped), and its first. */
static size_t map_len(const vmm_backend_t *m, size_t i)
{
    return m->big[i] == MAP_HUGE ? m->hugen : m->big[i] == MAP_BIG ? m->bign : 1;
}

static size_t map_start(const vmm_backend_t *m, size_t i) { return i - i % map_len(m, i); }

/* ------------------------------------------------------------------------ */
/* The mirror and the kept host memory                                      */
/* ------------------------------------------------------------------------ */

static CUdeviceptr slot_addr(const vmm_backend_t *m, uint32_t s)
{
    return m->mirror + (CUdeviceptr)s * big_bytes(m);
}

/* Unmaps slot s: its memory goes unless something else still maps it. */
static void slot_put(vmm_backend_t *m, uint32_t s)
{
    m->cu->MemUnmap(slot_addr(m, s), big_bytes(m));
    m->slot_used[s] = 0;
}

/* Maps h (the caller keeps its reference) at a free slot with the device's
 * access; *slot gets 1 + the slot.  CUDA_ERROR_NOT_FOUND: no slot free. */
static CUresult slot_adopt(vmm_backend_t *m, CUmemGenericAllocationHandle h, uint32_t *slot)
{
    size_t s = 0;
    while (s < m->nslots && m->slot_used[s])
        s++;
    if (s == m->nslots)
        return CUDA_ERROR_NOT_FOUND;
    CUdeviceptr at = slot_addr(m, (uint32_t)s);
    CUresult r = m->cu->MemMap(at, big_bytes(m), 0, h, 0);
    if (r == CUDA_SUCCESS) {
        double t0 = seconds();
        r = m->cu->MemSetAccess(at, big_bytes(m), &m->access, 1);
        m->t_mi_adopt_access += seconds() - t0;
        if (r != CUDA_SUCCESS)
            m->cu->MemUnmap(at, big_bytes(m));
    }
    if (r == CUDA_SUCCESS) {
        m->slot_used[s] = 1;
        *slot = (uint32_t)s + 1;
    }
    return r;
}

/* The big host mapping at granule b (b % bign == 0) is gone from b: the
 * slot that also maps its handle goes too (else its memory would live on). */
static void block_unslot(vmm_backend_t *m, size_t b)
{
    if (!m->bslot || !m->bslot[b / m->bign])
        return;
    m->noacc[b / m->bign] = 0;
    slot_put(m, m->bslot[b / m->bign] - 1);
    m->bslot[b / m->bign] = 0;
}

/* block_unslot for every big mapping that starts in [first, first + n). */
static void run_unslot(vmm_backend_t *m, size_t first, size_t n)
{
    if (!m->bslot)
        return;
    for (size_t b = (first + m->bign - 1) / m->bign * m->bign; b < first + n; b += m->bign)
        block_unslot(m, b);
}

/* Room for one more element in an array of *cap (n used): doubled (first
 * when empty); the array (maybe moved), or NULL if there is no memory (the
 * old array stays). */
static void *room_for_one(void *a, size_t n, size_t *cap, size_t elem, size_t first)
{
    if (n < *cap)
        return a;
    size_t c = *cap ? 2 * *cap : first;
    void *q = realloc(a, c * elem);
    if (q)
        *cap = c;
    return q;
}

/* Bytes of host memory kept for moves to host (big and granule handles). */
static size_t kept_bytes(const vmm_backend_t *m)
{
    return (m->nkeep * m->bign + m->nsmall) * m->granule;
}

/* Keeps e for later moves to host, within keep_max; 0 if it did not fit
 * (the caller still owns it). */
static int keep_push(vmm_backend_t *m, vmm_keep_t e)
{
    if (kept_bytes(m) + big_bytes(m) > m->keep_max)
        return 0;
    vmm_keep_t *q = room_for_one(m->hkeep, m->nkeep, &m->keep_cap, sizeof *q, 64);
    if (!q)
        return 0;
    m->hkeep = q;
    m->hkeep[m->nkeep++] = e;
    return 1;
}

static void keep_free(vmm_backend_t *m, vmm_keep_t e)
{
    if (e.slot)
        slot_put(m, e.slot - 1);
    else
        m->cu->MemRelease(e.h);
}

/* A reference to e's handle for the caller to map and release (a mirrored
 * one is retained from its slot, which keeps mapping it). */
static CUresult keep_handle(vmm_backend_t *m, vmm_keep_t e, CUmemGenericAllocationHandle *h)
{
    if (!e.slot) {
        *h = e.h;
        return CUDA_SUCCESS;
    }
    return m->cu->MemRetainAllocationHandle(h, (void *)(uintptr_t)slot_addr(m, e.slot - 1));
}

/* Unmaps the mappings at p, n granules: each granule its own mapping, or
 * (big 1) one mapping of all n. */
static CUresult maps_unmap(vmm_backend_t *m, CUdeviceptr p, size_t n, int big)
{
    if (big)
        return m->cu->MemUnmap(p, n * m->granule);
    if (m->unmap_runs && n > 1 && m->cu->MemUnmap(p, n * m->granule) == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        CUresult e = m->cu->MemUnmap(p + (CUdeviceptr)(i * m->granule), m->granule);
        if (r == CUDA_SUCCESS)
            r = e;
    }
    return r;
}

/* Unmaps granules [first, first + n) of the range, which cover whole
 * mappings (small or big), and clears their big marks. */
static CUresult run_unmap(vmm_backend_t *m, size_t first, size_t n)
{
    CUresult r = CUDA_SUCCESS;
    run_unslot(m, first, n);
    if (m->unmap_runs && n > 1 && m->cu->MemUnmap(granule_addr(m, first), n * m->granule) ==
                                      CUDA_SUCCESS) {
        memset(m->big + first, 0, n);
        return r;
    }
    for (size_t i = first; i < first + n;) {
        size_t k = map_len(m, i);
        CUresult e = m->cu->MemUnmap(granule_addr(m, i), k * m->granule);
        if (r == CUDA_SUCCESS)
            r = e;
        memset(m->big + i, 0, k);
        i += k;
    }
    return r;
}

/* Creates one handle of n granules of `kind` and maps it at p; the handle
 * is released once mapped (the mapping keeps the memory). */
static CUresult map_new(vmm_backend_t *m, CUdeviceptr p, size_t n, int kind)
{
    CUmemGenericAllocationHandle h;
    CUresult r = m->cu->MemCreate(&h, n * m->granule, &m->prop[kind], 0);
    if (r != CUDA_SUCCESS)
        return r;
    r = m->cu->MemMap(p, n * m->granule, 0, h, 0);
    m->cu->MemRelease(h);
    return r;
}

/* New device memory for the n granules at `at` (unmapped: their old memory
 * is gone), with access, and their data copied back from src, waited for:
 * a failed split's or remap's undo.  Not CUDA_SUCCESS: the data is lost. */
static CUresult restore_from(vmm_backend_t *m, CUdeviceptr at, size_t n, CUdeviceptr src)
{
    size_t bytes = n * m->granule;
    CUresult r = map_new(m, at, n, VMM_DEVICE);
    if (r == CUDA_SUCCESS)
        r = m->cu->MemSetAccess(at, bytes, &m->access, 1);
    if (r == CUDA_SUCCESS)
        r = m->cu->MemcpyAsync(at, src, bytes, m->stream);
    if (r == CUDA_SUCCESS)
        r = m->cu->StreamSynchronize(m->stream);
    return r;
}

/* Whether granules [i, i + bign) may be one big handle of `kind`. */
static int big_fits(const vmm_backend_t *m, size_t i, size_t end, int kind)
{
    return ((kind == VMM_DEVICE && m->dev_big) || (kind == VMM_HOST && m->host_big)) && m->bign &&
           i % m->bign == 0 && i + m->bign <= end;
}

/* Whether granules [i, i + hugen) may be one huge handle of `kind`. */
static int huge_fits(const vmm_backend_t *m, size_t i, size_t end, int kind)
{
    return kind == VMM_DEVICE && m->hugen && i % m->hugen == 0 && i + m->hugen <= end;
}

/* Creates physical memory of `kind` for granules [first, first + n) and
 * maps it there: a big handle for every aligned bign granules inside (one
 * handle per granule where that fails, and elsewhere), then grants the
 * device access.  On failure nothing stays mapped. */
static CUresult run_create(vmm_backend_t *m, size_t first, size_t n, int kind)
{
    CUresult r = CUDA_SUCCESS;
    size_t i = first, end = first + n;
    while (i < end) {
        if (huge_fits(m, i, end, kind)) {
            if (map_new(m, granule_addr(m, i), m->hugen, kind) == CUDA_SUCCESS) {
                memset(m->big + i, MAP_HUGE, m->hugen);
                m->n.huge_maps++;
                i += m->hugen;
                continue;
            }
            m->n.big_fallbacks++;
        }
        if (big_fits(m, i, end, kind)) {
            if (map_new(m, granule_addr(m, i), m->bign, kind) == CUDA_SUCCESS) {
                memset(m->big + i, 1, m->bign);
                m->n.big_maps++;
                i += m->bign;
                continue;
            }
            m->n.big_fallbacks++;
        }
        r = map_new(m, granule_addr(m, i), 1, kind);
        if (r != CUDA_SUCCESS)
            break;
        i++;
    }
    if (r == CUDA_SUCCESS)
        r = m->cu->MemSetAccess(granule_addr(m, first), n * m->granule, &m->access, 1);
    if (r != CUDA_SUCCESS && i > first)
        run_unmap(m, first, i - first);
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
    /* A run long enough for a huge handle starts where one can (the
     * lowest such run), so that its device memory takes few mappings. */
    size_t align = m->hugen && n >= m->hugen ? m->hugen : 1;
    for (; align; align = align > 1 ? 1 : 0)
        for (size_t i = 0; i + n <= m->ngranules;) {
            size_t j = 0;
            while (j < n && m->state[i + j] == VMM_NONE)
                j++;
            if (j == n)
                return i;
            i = (i + j + 1 + align - 1) / align * align;
        }
    return SIZE_MAX;
}

/* Backs granules [first, first + n) with new memory of kind and counts it. */
static vmem_status_t run_back(vmm_backend_t *m, size_t first, size_t n, int kind)
{
    if (!ctx_enter(m))
        return VMEM_ERR_BACKEND;
    CUresult r = run_create(m, first, n, kind);
    ctx_leave(m);
    if (r != CUDA_SUCCESS)
        return status_of(r);
    memset(m->state + first, kind, n);
    if (kind == VMM_DEVICE)
        m->in_use += n * m->granule;
    else
        m->host_in_use += n * m->granule;
    return VMEM_OK;
}

static vmem_status_t region_alloc_kind(backend_t *b, size_t size, void *hint, void **base,
                                       int kind)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    size_t n = size / m->granule;
    size_t first = run_find(m, n, hint);
    if (first == SIZE_MAX)
        return VMEM_ERR_NOMEM;
    vmem_status_t st = run_back(m, first, n, kind);
    if (st == VMEM_OK)
        *base = (void *)(uintptr_t)granule_addr(m, first);
    return st;
}

static vmem_status_t vmm_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    double t0 = seconds();
    vmem_status_t st = region_alloc_kind(b, size, hint, base, VMM_DEVICE);
    ((vmm_backend_t *)b)->t_region_map += seconds() - t0;
    return st;
}

static vmem_status_t vmm_region_alloc_host(backend_t *b, size_t size, void *hint, void **base)
{
    return region_alloc_kind(b, size, hint, base, VMM_HOST);
}

static CUresult run_unmap(vmm_backend_t *m, size_t first, size_t n);

/* Unmaps every run of granules in [lo, hi) whose state is `state` (whole
 * mappings) and marks them VMM_NONE; returns how many granules. */
static size_t state_runs_unmap(vmm_backend_t *m, size_t lo, size_t hi, uint8_t state)
{
    size_t done = 0;
    for (size_t i = lo; i < hi;) {
        if (m->state[i] != state) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < hi && m->state[j] == state)
            j++;
        run_unmap(m, i, j - i);
        memset(m->state + i, VMM_NONE, j - i);
        done += j - i;
        i = j;
    }
    return done;
}

/* Unmaps the addresses remaps left mapped (VMM_ALIASED): called once the
 * device has been synchronised, so no work queued before those remaps is
 * left to use them. */
static void alias_flush(vmm_backend_t *m)
{
    m->aliased -= state_runs_unmap(m, m->alias_lo, m->alias_hi, VMM_ALIASED);
    m->alias_lo = SIZE_MAX;
    m->alias_hi = 0;
}

/* A device synchronisation, counted and timed (the CPU's wait); the
 * addresses remaps left mapped go after it. */
static CUresult ctx_sync(vmm_backend_t *m)
{
    double t0 = seconds();
    CUresult r = m->cu->CtxSynchronize();
    m->t_sync += seconds() - t0;
    m->n.syncs++;
    if (r == CUDA_SUCCESS && m->aliased)
        alias_flush(m);
    return r;
}

/* The device must be at rest before memory is unmapped or live data copied:
 * once per release batch, else every time. */
static CUresult device_quiet(vmm_backend_t *m)
{
    if (m->batch_depth && m->batch_synced)
        return CUDA_SUCCESS;
    CUresult r = ctx_sync(m);
    if (m->batch_depth && r == CUDA_SUCCESS)
        m->batch_synced = 1;
    return r;
}

/* The scratch ranges (big: bign granules for big_split; huge: hugen
 * granules for huge_split) are mapped on first use, one device handle
 * each, and unmapped by scratch_drop. */
static void scratch_drop(vmm_backend_t *m)
{
    if (m->scratch_mapped)
        m->cu->MemUnmap(m->scratch, m->bign * m->granule);
    m->scratch_mapped = 0;
    if (m->hscratch_mapped)
        m->cu->MemUnmap(m->hscratch, m->hugen * m->granule);
    m->hscratch_mapped = 0;
}

/* Maps n granules at the scratch range at (reserved; 0: none), unless
 * *mapped says it is: device memory, or where the device is full, host
 * memory (slower copies, but a split on a full device still gives memory
 * back instead of leaving zombies); 0 if there is memory for neither. */
static int scratch_map(vmm_backend_t *m, CUdeviceptr at, size_t n, int *mapped)
{
    if (*mapped)
        return 1;
    if (!at)
        return 0;
    if (map_new(m, at, n, VMM_DEVICE) != CUDA_SUCCESS) {
        if (!(m->base.flags & BACKEND_F_HOST_BACKING) ||
            map_new(m, at, n, VMM_HOST) != CUDA_SUCCESS)
            return 0;
        m->n.scratch_on_host++;
    }
    if (m->cu->MemSetAccess(at, n * m->granule, &m->access, 1) != CUDA_SUCCESS) {
        m->cu->MemUnmap(at, n * m->granule);
        return 0;
    }
    *mapped = 1;
    return 1;
}

static int scratch_get(vmm_backend_t *m)
{
    return scratch_map(m, m->scratch, m->bign, &m->scratch_mapped);
}

static int hscratch_get(vmm_backend_t *m)
{
    return scratch_map(m, m->hscratch, m->hugen, &m->hscratch_mapped);
}

/* Queues a copy of each run of kept granules (keep[k] 1, k < n) between
 * the mapping at `at` and the scratch range scr (to it when to_scratch). */
static CUresult runs_copy(vmm_backend_t *m, CUdeviceptr at, CUdeviceptr scr, const uint8_t *keep,
                          size_t n, int to_scratch)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t k = 0; k < n && r == CUDA_SUCCESS;) {
        if (!keep[k]) {
            k++;
            continue;
        }
        size_t j = k;
        while (j < n && keep[j])
            j++;
        CUdeviceptr a = at + (CUdeviceptr)(k * m->granule), s = scr + (CUdeviceptr)(k * m->granule);
        r = m->cu->MemcpyAsync(to_scratch ? s : a, to_scratch ? a : s, (j - k) * m->granule,
                               m->stream);
        k = j;
    }
    return r;
}

/* Copies the kept granules (keep[k] 1) of the big mapping at b to or from
 * the scratch range, in runs; waits for the copies.  To the scratch, while
 * the big mapping is still whole, many runs of device memory go as one
 * copy of the whole mapping instead (one 64 MiB device copy is cheaper than
 * a few launches: isolated live granules would cost one launch each). */
static CUresult scratch_copy(vmm_backend_t *m, size_t b, const uint8_t *keep, int to_scratch)
{
    CUresult r = CUDA_SUCCESS;
    size_t runs = 0;
    int host = 0; /* host memory: read over the bus, so only what stays */
    for (size_t k = 0; k < m->bign; k++) {
        runs += keep[k] && (k == 0 || !keep[k - 1]);
        host |= keep[k] && m->state[b + k] == VMM_HOST;
    }
    if (to_scratch && runs > 4 && !host) {
        r = m->cu->MemcpyAsync(m->scratch, granule_addr(m, b), m->bign * m->granule, m->stream);
        CUresult w = m->cu->StreamSynchronize(m->stream);
        return r != CUDA_SUCCESS ? r : w;
    }
    r = runs_copy(m, granule_addr(m, b), m->scratch, keep, m->bign, to_scratch);
    CUresult w = m->cu->StreamSynchronize(m->stream);
    return r != CUDA_SUCCESS ? r : w;
}

/* Part of a split's mapping work: granule handles of `kind` for the kept
 * granules in [lo, hi) of the mapping at `at`, made accessible per run;
 * mapped[k] set for each handle mapped.  Stops at the first failure. */
typedef struct keep_job {
    vmm_backend_t *m;
    CUdeviceptr at;
    const uint8_t *keep;
    uint8_t *mapped;
    size_t lo, hi;
    int kind, push; /* push: a thread of its own, which must make the context current */
    CUresult r;
} keep_job_t;

static void *keep_map_part(void *arg)
{
    keep_job_t *j = arg;
    vmm_backend_t *m = j->m;
    CUresult r = CUDA_SUCCESS;
    if (j->push && m->cu->CtxPushCurrent(m->ctx) != CUDA_SUCCESS) {
        j->r = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    for (size_t k = j->lo; k < j->hi && r == CUDA_SUCCESS; k++)
        if (j->keep[k]) {
            r = map_new(m, j->at + (CUdeviceptr)(k * m->granule), 1, j->kind);
            if (r == CUDA_SUCCESS)
                j->mapped[k] = 1;
        }
    for (size_t s = j->lo; s < j->hi && r == CUDA_SUCCESS;) {
        if (!j->keep[s]) {
            s++;
            continue;
        }
        size_t e = s;
        while (e < j->hi && j->keep[e])
            e++;
        r = m->cu->MemSetAccess(j->at + (CUdeviceptr)(s * m->granule), (e - s) * m->granule,
                                &m->access, 1);
        s = e;
    }
    if (j->push) {
        CUcontext c;
        m->cu->CtxPopCurrent(&c);
    }
    j->r = r;
    return NULL;
}

/* Creates and maps one handle of `kind` per kept granule of the (unmapped)
 * big mapping at `at`, with access: split_threads threads over contiguous
 * parts when there are at least VMM_SPLIT_MIN (a thread that cannot be
 * started leaves its part to the calling thread).  mapped[k] says which
 * handles are mapped, whatever the result. */
static CUresult keep_map(vmm_backend_t *m, CUdeviceptr at, const uint8_t *keep, size_t nkeep,
                         uint8_t *mapped, int kind)
{
    int t = nkeep >= VMM_SPLIT_MIN ? m->split_threads : 1;
    if (t < 1)
        t = 1;
    if (t > VMM_SPLIT_THREADS)
        t = VMM_SPLIT_THREADS;
    keep_job_t job[VMM_SPLIT_THREADS];
    pthread_t tid[VMM_SPLIT_THREADS];
    int started[VMM_SPLIT_THREADS] = {0};
    for (int i = 0; i < t; i++) {
        job[i] = (keep_job_t){m, at, keep, mapped, m->bign * (size_t)i / (size_t)t,
                              m->bign * (size_t)(i + 1) / (size_t)t, kind, i > 0, CUDA_SUCCESS};
        if (i > 0)
            started[i] = pthread_create(&tid[i], NULL, keep_map_part, &job[i]) == 0;
    }
    for (int i = 0; i < t; i++)
        if (!started[i]) {
            job[i].push = 0; /* the calling thread's context is current */
            keep_map_part(&job[i]);
        }
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < t; i++) {
        if (started[i]) {
            pthread_join(tid[i], NULL);
            m->threads_run++;
        }
        if (r == CUDA_SUCCESS)
            r = job[i].r;
    }
    return r;
}

/*
 * Splits the big mapping at granule b (b % bign == 0): the granules of it
 * in [lo, hi), and those already given back (VMM_ZOMBIE), are freed; the
 * others keep their data in new handles of one granule each, at the same
 * addresses.  The live data is copied to the scratch range, the big mapping
 * unmapped (which frees it), the small handles created and mapped in its
 * place, and the data copied back: device-to-device copies, one handle per
 * kept granule.  Returns 1 on success.  On failure (no memory for the
 * scratch or the small handles) the big mapping stays (or is recreated,
 * the data copied back) and [lo, hi) becomes VMM_ZOMBIE: freed with the rest
 * of the mapping later.  The device must be quiet.
 */
static int big_split(vmm_backend_t *m, size_t b, size_t lo, size_t hi)
{
    uint8_t keep[256], mapped[256] = {0}; /* bign <= 256 (checked at creation) */
    size_t nkeep = 0;
    int kind = VMM_DEVICE; /* that of the mapping: its kept granules say */
    for (size_t k = 0; k < m->bign; k++) {
        size_t i = b + k;
        keep[k] = !(i >= lo && i < hi) && m->state[i] != VMM_ZOMBIE && m->state[i] != VMM_FREEING;
        nkeep += keep[k];
        if (keep[k] && m->state[i] == VMM_HOST)
            kind = VMM_HOST;
    }
    CUdeviceptr at = granule_addr(m, b);
    size_t bytes = m->bign * m->granule;
    if (m->noacc && m->noacc[b / m->bign] && nkeep) {
        /* Its data is read at its address below: open it first. */
        if (m->cu->MemSetAccess(at, bytes, &m->access, 1) != CUDA_SUCCESS)
            goto zombie;
        m->noacc[b / m->bign] = 0;
    }
    if (nkeep == 0) { /* nothing left alive: the whole mapping goes */
        if (m->cu->MemUnmap(at, bytes) != CUDA_SUCCESS)
            goto zombie;
        block_unslot(m, b);
        for (size_t k = 0; k < m->bign; k++)
            if (m->state[b + k] == VMM_ZOMBIE)
                m->zombie -= m->granule;
        memset(m->state + b, VMM_NONE, m->bign);
        memset(m->big + b, 0, m->bign);
        return 1;
    }
    double t0 = seconds();
    if (!scratch_get(m) || scratch_copy(m, b, keep, 1) != CUDA_SUCCESS)
        goto zombie;
    double t1 = seconds();
    m->t_scopy += t1 - t0;
    if (m->cu->MemUnmap(at, bytes) != CUDA_SUCCESS)
        goto zombie;
    block_unslot(m, b); /* the data is in the scratch range */
    double t2 = seconds();
    m->t_sunmap += t2 - t1;
    /* From here the range [at, at + bytes) is unmapped; the data is in the
     * scratch range. */
    CUresult r = keep_map(m, at, keep, nkeep, mapped, kind);
    double t3 = seconds();
    m->t_smap += t3 - t2;
    if (r == CUDA_SUCCESS)
        r = scratch_copy(m, b, keep, 0);
    m->t_scopy += seconds() - t3;
    if (r == CUDA_SUCCESS) {
        for (size_t j = 0; j < m->bign; j++) {
            if (keep[j])
                continue;
            if (m->state[b + j] == VMM_ZOMBIE)
                m->zombie -= m->granule;
            m->state[b + j] = VMM_NONE;
        }
        memset(m->big + b, 0, m->bign);
        m->n.splits++;
        return 1;
    }
    /* Undo: the small handles go, one big handle comes back with the data. */
    m->n.split_failures++;
    for (size_t j = 0; j < m->bign; j++)
        if (mapped[j])
            m->cu->MemUnmap(at + (CUdeviceptr)(j * m->granule), m->granule);
    if (map_new(m, at, m->bign, kind) != CUDA_SUCCESS ||
        m->cu->MemSetAccess(at, bytes, &m->access, 1) != CUDA_SUCCESS ||
        scratch_copy(m, b, keep, 0) != CUDA_SUCCESS) {
        /* Lost: nothing is mapped there any more.  Never seen; reported. */
        fprintf(stderr, "libvmem: vmm: split of a 64 MiB mapping failed and could not be "
                        "undone: %zu granules at %#llx lost\n", nkeep, (unsigned long long)at);
        m->n.lost += nkeep;
        for (size_t j = 0; j < m->bign; j++) {
            if (m->state[b + j] == VMM_ZOMBIE)
                m->zombie -= m->granule;
            else if (keep[j] && m->state[b + j] == VMM_DEVICE)
                m->in_use -= m->granule;
            else if (keep[j] && m->state[b + j] == VMM_HOST)
                m->host_in_use -= m->granule;
            m->state[b + j] = VMM_NONE;
        }
        memset(m->big + b, 0, m->bign);
        return 0;
    }
zombie:
    m->n.split_failures++;
    for (size_t j = 0; j < m->bign; j++)
        if (!keep[j] && m->state[b + j] != VMM_ZOMBIE) {
            m->state[b + j] = VMM_ZOMBIE;
            m->zombie += m->granule;
        }
    return 0;
}

/*
 * Splits the huge mapping at granule h (h % hugen == 0): the granules in
 * [lo, hi), and those already given back (VMM_ZOMBIE, VMM_FREEING), are
 * freed; the others keep their data at the same addresses, in a big handle
 * for each big piece kept whole and in granule handles (as big_split makes
 * them) for a piece kept in part.  The whole mapping is copied to the huge
 * scratch range (one copy), unmapped (which frees it), the new handles
 * mapped, and what stays copied back.  Returns 1 on success.  On failure
 * (no memory for the scratch or the new handles) the huge mapping stays (or
 * is recreated, the data copied back) and [lo, hi) becomes VMM_ZOMBIE.  The
 * device must be quiet.
 */
static int huge_split(vmm_backend_t *m, size_t h, size_t lo, size_t hi)
{
    size_t pieces = m->hugen / m->bign, nkeep = 0, bb = big_bytes(m), g = m->granule;
    size_t pkeep[VMM_HUGE_MAX] = {0}; /* kept granules per piece */
    uint8_t *keep = calloc(2 * m->hugen, 1), *mapped = keep ? keep + m->hugen : NULL;
    if (!keep)
        goto zombie;
    for (size_t k = 0; k < m->hugen; k++) {
        size_t i = h + k;
        keep[k] = !(i >= lo && i < hi) && m->state[i] != VMM_ZOMBIE && m->state[i] != VMM_FREEING;
        nkeep += keep[k];
        pkeep[k / m->bign] += keep[k];
    }
    CUdeviceptr at = granule_addr(m, h);
    size_t bytes = m->hugen * g;
    if (nkeep == 0) { /* nothing left alive: the whole mapping goes */
        if (m->cu->MemUnmap(at, bytes) != CUDA_SUCCESS)
            goto zombie;
        for (size_t k = 0; k < m->hugen; k++)
            if (m->state[h + k] == VMM_ZOMBIE)
                m->zombie -= g;
        memset(m->state + h, VMM_NONE, m->hugen);
        memset(m->big + h, MAP_GRANULE, m->hugen);
        free(keep);
        return 1;
    }
    double t0 = seconds();
    if (!hscratch_get(m) || m->cu->MemcpyAsync(m->hscratch, at, bytes, m->stream) != CUDA_SUCCESS ||
        m->cu->StreamSynchronize(m->stream) != CUDA_SUCCESS)
        goto zombie;
    double t1 = seconds();
    m->t_scopy += t1 - t0;
    if (m->cu->MemUnmap(at, bytes) != CUDA_SUCCESS)
        goto zombie;
    double t2 = seconds();
    m->t_sunmap += t2 - t1;
    /* From here [at, at + bytes) is unmapped; the data is in the scratch.
     * mapped[k]: granule k mapped by a handle of its own, or (for a whole
     * piece) the piece's first granule mapped by a big handle. */
    CUresult r = CUDA_SUCCESS;
    for (size_t p = 0; p < pieces && r == CUDA_SUCCESS; p++) {
        CUdeviceptr pa = at + (CUdeviceptr)(p * bb);
        if (pkeep[p] == m->bign) {
            r = map_new(m, pa, m->bign, VMM_DEVICE);
            if (r == CUDA_SUCCESS) {
                mapped[p * m->bign] = 1;
                r = m->cu->MemSetAccess(pa, bb, &m->access, 1);
            }
        } else if (pkeep[p]) {
            r = keep_map(m, pa, keep + p * m->bign, pkeep[p], mapped + p * m->bign, VMM_DEVICE);
        }
    }
    double t3 = seconds();
    m->t_smap += t3 - t2;
    if (r == CUDA_SUCCESS) /* runs of kept granules back */
        r = runs_copy(m, at, m->hscratch, keep, m->hugen, 0);
    if (r == CUDA_SUCCESS)
        r = m->cu->StreamSynchronize(m->stream);
    m->t_scopy += seconds() - t3;
    if (r == CUDA_SUCCESS) {
        m->n.huge_splits++;
        for (size_t p = 0; p < pieces; p++) {
            size_t b = h + p * m->bign;
            memset(m->big + b, pkeep[p] == m->bign ? MAP_BIG : MAP_GRANULE, m->bign);
            if (pkeep[p] && pkeep[p] < m->bign)
                m->n.splits++;
        }
        for (size_t k = 0; k < m->hugen; k++) {
            if (keep[k])
                continue;
            if (m->state[h + k] == VMM_ZOMBIE)
                m->zombie -= g;
            m->state[h + k] = VMM_NONE;
        }
        free(keep);
        return 1;
    }
    /* Undo: the new handles go, one huge handle comes back with the data. */
    for (size_t p = 0; p < pieces; p++) {
        CUdeviceptr pa = at + (CUdeviceptr)(p * bb);
        if (pkeep[p] == m->bign) {
            if (mapped[p * m->bign])
                m->cu->MemUnmap(pa, bb);
            continue;
        }
        for (size_t k = 0; k < m->bign; k++)
            if (mapped[p * m->bign + k])
                m->cu->MemUnmap(pa + (CUdeviceptr)(k * g), g);
    }
    if (restore_from(m, at, m->hugen, m->hscratch) != CUDA_SUCCESS) {
        fprintf(stderr, "libvmem: vmm: split of a huge mapping failed and could not be undone: "
                        "%zu granules at %#llx lost\n", nkeep, (unsigned long long)at);
        m->n.lost += nkeep;
        for (size_t k = 0; k < m->hugen; k++) {
            size_t i = h + k;
            if (m->state[i] == VMM_ZOMBIE)
                m->zombie -= g;
            else if (keep[k] && m->state[i] == VMM_DEVICE)
                m->in_use -= g;
            m->state[i] = VMM_NONE;
        }
        memset(m->big + h, MAP_GRANULE, m->hugen);
        m->n.split_failures++;
        free(keep);
        return 0;
    }
zombie:
    free(keep);
    m->n.split_failures++;
    for (size_t i = h; i < h + m->hugen; i++)
        if (((i >= lo && i < hi) || m->state[i] == VMM_FREEING) && m->state[i] != VMM_ZOMBIE) {
            m->state[i] = VMM_ZOMBIE;
            m->zombie += m->granule;
        }
    return 0;
}

/* Splits the big and huge mappings that [first, end) cuts (those reaching
 * out of it), freeing their part inside when `free_inside`, else
 * converting them whole to small handles. */
static void edges_split(vmm_backend_t *m, size_t first, size_t end, int free_inside)
{
    if (!m->bign)
        return;
    size_t edge[2] = {first, end - 1};
    for (int e = 0; e < 2; e++) {
        size_t i = edge[e];
        /* A huge mapping splits into big ones and granule handles; a big
         * one that still reaches out (free_inside 0) is split in turn. */
        while (m->big[i] != MAP_GRANULE) {
            int kind = m->big[i];
            size_t n = map_len(m, i), b = i - i % n;
            if ((b >= first && b + n <= end) || (e == 1 && b <= first))
                break; /* wholly inside, or the mapping the first edge tried */
            size_t lo = free_inside ? (first > b ? first : b) : b;
            size_t hi = free_inside ? (end < b + n ? end : b + n) : b;
            if (!(kind == MAP_HUGE ? huge_split(m, b, lo, hi) : big_split(m, b, lo, hi)) ||
                m->big[i] == kind)
                break;
        }
    }
}

/* Splits the big and huge mappings cut by the run of n granules at first
 * (edges_split, nothing freed inside); CUDA_ERROR_OUT_OF_MEMORY if one is
 * still cut (no memory for the split): then the caller leaves the run. */
static CUresult edges_whole(vmm_backend_t *m, size_t first, size_t n)
{
    edges_split(m, first, first + n, 0);
    for (size_t e = 0; e < 2 && m->bign; e++) {
        size_t i = e ? first + n - 1 : first, b0 = map_start(m, i);
        if (m->big[i] && (b0 < first || b0 + map_len(m, i) > first + n))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* Splits once (or unmaps whole) every mapping of kind MAP_HUGE or MAP_BIG
 * starting in [lo - lo % its size, hi) that holds VMM_FREEING granules:
 * those (and zombie ones) are freed. */
static void freeing_split(vmm_backend_t *m, size_t lo, size_t hi, int kind)
{
    size_t n = kind == MAP_HUGE ? m->hugen : m->bign;
    for (size_t b = n ? lo - lo % n : hi; b < hi; b += n) {
        if (m->big[b] != kind)
            continue;
        size_t k = 0;
        while (k < n && m->state[b + k] != VMM_FREEING)
            k++;
        if (k < n && kind == MAP_HUGE)
            huge_split(m, b, b, b);
        else if (k < n)
            big_split(m, b, b, b);
    }
}

/* End of a release batch: every huge, then every big mapping holding
 * VMM_FREEING granules is split once (or unmapped whole), then the
 * remaining VMM_FREEING runs (whole mappings of one granule) are unmapped. */
static void pending_flush(vmm_backend_t *m)
{
    if (m->pend_lo >= m->pend_hi)
        return;
    size_t lo = m->pend_lo, hi = m->pend_hi;
    m->pend_lo = SIZE_MAX;
    m->pend_hi = 0;
    double t0 = seconds();
    if (!ctx_enter(m))
        return;
    device_quiet(m);
    freeing_split(m, lo, hi, MAP_HUGE);
    freeing_split(m, lo, hi, MAP_BIG);
    state_runs_unmap(m, lo, hi, VMM_FREEING);
    scratch_drop(m);
    ctx_leave(m);
    m->t_flush += seconds() - t0;
}

static void region_free(backend_t *b, void *base, size_t size)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)base;
    size_t first = granule_index(m, p), n = size / m->granule, end = first + n;
    size_t parked = 0;
    for (size_t i = first; i < end; i++) {
        if (m->state[i] == VMM_DEVICE)
            m->in_use -= m->granule;
        else if (m->state[i] == VMM_HOST)
            m->host_in_use -= m->granule;
        else if (m->state[i] == VMM_PARKED) {
            m->state[i] = VMM_NONE; /* nothing mapped: only the address goes */
            parked++;
        }
    }
    if (parked == n)
        return;
    if (m->batch_depth) { /* unmapped at the end of the batch */
        for (size_t i = first; i < end; i++)
            if (m->state[i] != VMM_NONE)
                m->state[i] = VMM_FREEING;
        if (first < m->pend_lo)
            m->pend_lo = first;
        if (end > m->pend_hi)
            m->pend_hi = end;
        return;
    }
    if (!ctx_enter(m))
        return;
    /* Unlike cudaFree, unmapping does not wait for the work that may still
     * use the memory (freed blocks may have kernels queued on them). */
    device_quiet(m);
    /* Big mappings reaching out of the range are split (their granules in
     * the range become VMM_NONE, or VMM_ZOMBIE); the rest is whole
     * mappings. */
    edges_split(m, first, end, 1);
    for (size_t i = first; i < end;) {
        if (m->state[i] == VMM_NONE || m->state[i] == VMM_ZOMBIE) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < end && m->state[j] != VMM_NONE && m->state[j] != VMM_ZOMBIE)
            j++;
        run_unmap(m, i, j - i);
        memset(m->state + i, VMM_NONE, j - i);
        i = j;
    }
    if (!m->batch_depth)
        scratch_drop(m);
    ctx_leave(m);
}

static void vmm_region_free(backend_t *b, void *base, size_t size)
{
    double t0 = seconds();
    region_free(b, base, size);
    ((vmm_backend_t *)b)->t_region_free += seconds() - t0;
}

/* ------------------------------------------------------------------------ */
/* Remaps: free device memory mapped at another address, no wait             */
/* ------------------------------------------------------------------------ */

static void vmm_remap_span(const backend_t *b, uintptr_t *lo, uintptr_t *hi)
{
    const vmm_backend_t *m = (const vmm_backend_t *)b;
    CUdeviceptr l = (CUdeviceptr)*lo, h = (CUdeviceptr)*hi;
    if (h <= l || l < m->va || h > m->va + m->va_size) {
        *hi = *lo;
        return;
    }
    size_t first = granule_index(m, l), end = granule_index(m, h);
    /* whole mappings only: a mapping cut by an edge stays */
    if (m->state[first] == VMM_DEVICE && map_start(m, first) != first)
        first = map_start(m, first) + map_len(m, first);
    if (end > first && m->state[end - 1] == VMM_DEVICE) {
        size_t b0 = map_start(m, end - 1);
        if (b0 + map_len(m, end - 1) != end)
            end = b0;
    }
    for (size_t i = first; i < end; i++)
        if (m->state[i] != VMM_DEVICE) {
            *hi = *lo;
            return;
        }
    if (end <= first) {
        *hi = *lo;
        return;
    }
    *lo = (uintptr_t)granule_addr(m, first);
    *hi = (uintptr_t)granule_addr(m, end);
}

/* The device memory of [src, src + size) (whole mappings of device memory)
 * is mapped again at a free run at hint, mapping by mapping (the handle
 * retained from its address), with one cuMemSetAccess; no device
 * synchronisation.  The old addresses stay mapped (VMM_ALIASED) until the
 * next one.  A big or huge mapping keeps its alignment: where the run at
 * hint does not give it, VMEM_ERR_UNSUPPORTED (the caller then gives the
 * memory back the usual way). */
static vmem_status_t vmm_region_remap(backend_t *b, void *src, size_t size, void *hint, void **dst)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    uintptr_t lo = (uintptr_t)src, hi = lo + size;
    vmm_remap_span(b, &lo, &hi);
    if (lo != (uintptr_t)src || hi != (uintptr_t)src + size)
        return VMEM_ERR_UNSUPPORTED;
    size_t first = granule_index(m, (CUdeviceptr)lo), n = size / m->granule;
    /* Addresses are plentiful (4x the device), but not endless: past the
     * device's size in aliases, wait for the device once and unmap them
     * (not while this thread captures a CUDA graph: no wait may happen then,
     * and the run below is looked for among the addresses left). */
    if (m->aliased * m->granule > m->va_size / VMM_RANGE_FACTOR && !backend_capturing() &&
        ctx_enter(m)) {
        ctx_sync(m);
        ctx_leave(m);
    }
    size_t to = run_find(m, n, hint);
    if (to == SIZE_MAX)
        return VMEM_ERR_NOMEM;
    for (size_t i = first; i < first + n; i += map_len(m, i))
        if ((to + (i - first)) % map_len(m, i) != 0)
            return VMEM_ERR_UNSUPPORTED;
    if (!ctx_enter(m))
        return VMEM_ERR_BACKEND;
    double t0 = seconds();
    CUresult r = CUDA_SUCCESS;
    size_t i = first;
    while (i < first + n) {
        size_t k = map_len(m, i);
        CUmemGenericAllocationHandle h;
        r = m->cu->MemRetainAllocationHandle(&h, (void *)(uintptr_t)granule_addr(m, i));
        if (r != CUDA_SUCCESS)
            break;
        r = m->cu->MemMap(granule_addr(m, to + (i - first)), k * m->granule, 0, h, 0);
        m->cu->MemRelease(h); /* the two mappings keep the memory */
        if (r != CUDA_SUCCESS)
            break;
        memset(m->big + to + (i - first), m->big[i], k);
        i += k;
    }
    if (r == CUDA_SUCCESS)
        r = m->cu->MemSetAccess(granule_addr(m, to), size, &m->access, 1);
    if (r != CUDA_SUCCESS) {
        if (i > first)
            run_unmap(m, to, i - first); /* the memory stays mapped at src */
        ctx_leave(m);
        return status_of(r);
    }
    ctx_leave(m);
    memset(m->state + to, VMM_DEVICE, n);
    memset(m->state + first, VMM_ALIASED, n);
    m->aliased += n;
    if (first < m->alias_lo)
        m->alias_lo = first;
    if (first + n > m->alias_hi)
        m->alias_hi = first + n;
    m->n.remaps++;
    m->n.remapped += size;
    m->t_remap += seconds() - t0;
    *dst = (void *)(uintptr_t)granule_addr(m, to);
    return VMEM_OK;
}

static void vmm_release_batch(backend_t *b, int begin)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    if (begin) {
        if (m->batch_depth++ == 0)
            m->batch_synced = 0;
        return;
    }
    if (m->batch_depth > 0 && --m->batch_depth == 0) {
        pending_flush(m);
        if (m->scratch_mapped && ctx_enter(m)) {
            scratch_drop(m);
            ctx_leave(m);
        }
    }
}

/* One step of a move: n granules at src, new memory mapped at the staging
 * slot dst (one big handle when big, else one per granule), its handles in
 * h (small only). */
typedef struct move_step {
    CUdeviceptr src, dst;
    size_t n;
    int big;
    CUmemGenericAllocationHandle *h;
    CUevent done;
    int swap; /* 1: a swap step (swap_prepare): old device memory at dst, host memory at src */
    int mirror; /* 1: a mirror step (mirror_prepare): dst is a mirror slot */
    CUmemGenericAllocationHandle old; /* swap: the old device memory, held */
    uint32_t slot; /* 1 + the mirror slot mapping the step's host memory; 0: none */
} move_step_t;

/* The piece of step s from its granule k on: a big mapping's worth, or
 * what is left of the step. */
static move_step_t step_piece(const vmm_backend_t *m, const move_step_t *s, size_t k)
{
    move_step_t piece = *s;
    piece.src = s->src + (CUdeviceptr)(k * m->granule);
    piece.n = s->n - k < m->bign ? s->n - k : m->bign;
    return piece;
}

/* A step's slot goes back to the kept memory (or is freed). */
static void step_slot_back(vmm_backend_t *m, move_step_t *s)
{
    if (s->slot && !keep_push(m, (vmm_keep_t){0, s->slot}))
        slot_put(m, s->slot - 1);
    s->slot = 0;
}

/* Creates the new memory of a step and maps it at the staging slot. */
static CUresult step_prepare(vmm_backend_t *m, move_step_t *s, int kind)
{
    double t0 = seconds();
    size_t k = 0;
    CUresult r = CUDA_SUCCESS;
    size_t i0 = granule_index(m, s->src);
    s->big = (s->n == m->bign && big_fits(m, i0, i0 + s->n, kind)) ||
             (s->n == m->hugen && huge_fits(m, i0, i0 + s->n, kind));
again:
    if (s->big) {
        /* Host memory kept from earlier moves (or reserved) first: mapped,
         * not created, so nothing is pinned here. */
        r = CUDA_ERROR_NOT_FOUND;
        while (kind == VMM_HOST && m->nkeep && r != CUDA_SUCCESS) {
            vmm_keep_t e = m->hkeep[--m->nkeep];
            if (keep_handle(m, e, &s->h[0]) != CUDA_SUCCESS) {
                keep_free(m, e);
                continue;
            }
            r = m->cu->MemMap(s->dst, s->n * m->granule, 0, s->h[0], 0);
            if (r != CUDA_SUCCESS) {
                m->cu->MemRelease(s->h[0]);
                if (e.slot)
                    slot_put(m, e.slot - 1);
            } else {
                m->keep_hits++;
                s->slot = e.slot;
            }
        }
        if (r != CUDA_SUCCESS) {
            r = m->cu->MemCreate(&s->h[0], s->n * m->granule, &m->prop[kind], 0);
            if (r == CUDA_SUCCESS) {
                r = m->cu->MemMap(s->dst, s->n * m->granule, 0, s->h[0], 0);
                if (r != CUDA_SUCCESS)
                    m->cu->MemRelease(s->h[0]);
            }
        }
        if (r == CUDA_SUCCESS) {
            k = 1;
            if (s->n == m->hugen)
                m->n.huge_maps++;
            else
                m->n.big_maps++;
        } else {
            m->n.big_fallbacks++;
            r = CUDA_SUCCESS;
            if (s->n == m->hugen) { /* a shorter step: one big handle */
                s->n = m->bign;
                s->big = big_fits(m, i0, i0 + s->n, kind);
                goto again;
            }
            s->big = 0;
        }
    }
    for (; !s->big && k < s->n; k++) {
        CUdeviceptr at = s->dst + (CUdeviceptr)(k * m->granule);
        r = CUDA_ERROR_NOT_FOUND;
        while (kind == VMM_HOST && m->nsmall && r != CUDA_SUCCESS) {
            s->h[k] = m->hsmall[--m->nsmall]; /* kept host memory: nothing pinned */
            r = m->cu->MemMap(at, m->granule, 0, s->h[k], 0);
            if (r != CUDA_SUCCESS)
                m->cu->MemRelease(s->h[k]);
            else
                m->keep_hits++;
        }
        if (r == CUDA_SUCCESS)
            continue;
        r = m->cu->MemCreate(&s->h[k], m->granule, &m->prop[kind], 0);
        if (r != CUDA_SUCCESS)
            break;
        r = m->cu->MemMap(at, m->granule, 0, s->h[k], 0);
        if (r != CUDA_SUCCESS) {
            m->cu->MemRelease(s->h[k]);
            break;
        }
    }
    if (r == CUDA_SUCCESS)
        r = m->cu->MemSetAccess(s->dst, s->n * m->granule, &m->access, 1);
    if (r != CUDA_SUCCESS) {
        maps_unmap(m, s->dst, s->big ? s->n : k, s->big);
        for (size_t i = 0; i < k; i++)
            m->cu->MemRelease(s->h[i]);
        step_slot_back(m, s);
    }
    m->t_prep += seconds() - t0;
    return r;
}

static size_t step_handles(const move_step_t *s) { return s->big ? 1 : s->n; }

/* After the copy: the new memory replaces the old at src (the old memory is
 * freed by its unmap), the staging slot is unmapped, the handles dropped.
 * A failure here leaves src unmapped: the caller reports it. */
static void keep_host(vmm_backend_t *m, CUdeviceptr at)
{
    size_t b = granule_index(m, at);
    vmm_keep_t e = {0, m->bslot ? m->bslot[b / m->bign] : 0};
    if (e.slot) { /* mirrored: the slot keeps it, mapped, its access set */
        if (keep_push(m, e)) {
            m->bslot[b / m->bign] = 0; /* the unmap that follows leaves the slot */
            m->noacc[b / m->bign] = 0;
        }
        return;
    }
    if (m->cu->MemRetainAllocationHandle(&e.h, (void *)(uintptr_t)at) == CUDA_SUCCESS &&
        !keep_push(m, e)) /* kept: the unmap that follows no longer frees it */
        m->cu->MemRelease(e.h);
}

/* Keeps the host granule handle mapped at `at` (one granule, not in a big
 * mapping) for a later move to host, within keep_max. */
static void keep_host_small(vmm_backend_t *m, CUdeviceptr at)
{
    if (kept_bytes(m) + m->granule > m->keep_max)
        return;
    CUmemGenericAllocationHandle *q =
        room_for_one(m->hsmall, m->nsmall, &m->small_cap, sizeof *q, 256);
    if (!q)
        return;
    m->hsmall = q;
    CUmemGenericAllocationHandle h;
    if (m->cu->MemRetainAllocationHandle(&h, (void *)(uintptr_t)at) == CUDA_SUCCESS)
        m->hsmall[m->nsmall++] = h;
}

/* 1 if step s covers exactly one whole big mapping, its granules in
 * `state` (VMM_DEVICE or VMM_HOST). */
static int step_big_mapping(const vmm_backend_t *m, const move_step_t *s, int state)
{
    size_t i0 = granule_index(m, s->src);
    return m->bign && s->n == m->bign && i0 % m->bign == 0 && m->big[i0] == MAP_BIG &&
           m->state[i0] == state;
}

/* 1 if step s is one big piece of a huge device mapping, to be moved to
 * host through the mirror. */
static int step_huge_piece(const vmm_backend_t *m, const move_step_t *s, int kind)
{
    size_t i0 = granule_index(m, s->src);
    return kind == VMM_HOST && m->host_big && m->hugen && s->n == m->bign && i0 % m->bign == 0 &&
           m->big[i0] == MAP_HUGE && m->state[i0] == VMM_DEVICE;
}

static CUresult step_finish(vmm_backend_t *m, move_step_t *s, int kind)
{
    double t0 = seconds();
    CUresult r = m->cu->EventSynchronize(s->done);
    size_t i0 = granule_index(m, s->src);
    double t1 = seconds(), t2 = t1;
    m->t_wait += t1 - t0;
    if (r == CUDA_SUCCESS) {
        /* Back to the device: a whole big host mapping is kept for the
         * next move to host (a second pause pins nothing). */
        for (size_t k = 0; kind == VMM_DEVICE && m->bign && k < s->n; k += m->bign) {
            move_step_t piece = step_piece(m, s, k); /* each whole big host mapping */
            if (step_big_mapping(m, &piece, VMM_HOST))
                keep_host(m, piece.src);
        }
        for (size_t k = 0; kind == VMM_DEVICE && k < s->n; k++)
            if (!m->big[i0 + k] && m->state[i0 + k] == VMM_HOST)
                keep_host_small(m, s->src + (CUdeviceptr)(k * m->granule));
        run_unmap(m, i0, s->n);
        t2 = seconds();
        m->t_unmap_old += t2 - t1;
        if (s->big)
            r = m->cu->MemMap(s->src, s->n * m->granule, 0, s->h[0], 0);
        for (size_t k = 0; !s->big && k < s->n && r == CUDA_SUCCESS; k++)
            r = m->cu->MemMap(s->src + (CUdeviceptr)(k * m->granule), m->granule, 0, s->h[k], 0);
        if (r == CUDA_SUCCESS)
            r = m->cu->MemSetAccess(s->src, s->n * m->granule, &m->access, 1);
        if (r == CUDA_SUCCESS && s->big)
            memset(m->big + i0, s->n == m->hugen ? MAP_HUGE : MAP_BIG, s->n);
    }
    double t3 = seconds();
    m->t_map_new += t3 - t2;
    maps_unmap(m, s->dst, s->n, s->big);
    for (size_t k = 0; k < step_handles(s); k++)
        m->cu->MemRelease(s->h[k]);
    if (s->slot && r == CUDA_SUCCESS) { /* a mirrored kept handle now at src */
        m->bslot[i0 / m->bign] = s->slot;
        s->slot = 0;
    }
    if (s->slot) { /* src lost its data: so does the slot */
        slot_put(m, s->slot - 1);
        s->slot = 0;
    }
    m->t_unstage += seconds() - t3;
    return r;
}

static void step_abandon(vmm_backend_t *m, move_step_t *s)
{
    m->cu->EventSynchronize(s->done);
    maps_unmap(m, s->dst, s->n, s->big);
    for (size_t k = 0; k < step_handles(s); k++)
        m->cu->MemRelease(s->h[k]);
    step_slot_back(m, s);
}

/*
 * A step of a move to host by swap, for a whole big device mapping: the
 * old device memory (its handle held) is mapped at the staging slot, its
 * mapping at src taken down, host memory (kept, else created) mapped at
 * src, and the copy runs staging -> src.  Host memory is mapped once per
 * step (the staged path maps it at staging, unmaps it and maps it again at
 * src: its page-table work twice), and the old device memory is freed by
 * the unmap of staging after the copy, or after the last copy (late).
 */
static int swap_fits(const vmm_backend_t *m, const move_step_t *s, int kind)
{
    return kind == VMM_HOST && m->host_big && step_big_mapping(m, s, VMM_DEVICE);
}

/* Maps the old device memory back at src (src unmapped), after a failed or
 * abandoned swap step; a failure loses the step's granules (counted). */
static CUresult swap_restore(vmm_backend_t *m, move_step_t *s)
{
    size_t bytes = s->n * m->granule;
    CUresult r = m->cu->MemMap(s->src, bytes, 0, s->old, 0);
    if (r == CUDA_SUCCESS)
        r = m->cu->MemSetAccess(s->src, bytes, &m->access, 1);
    if (r != CUDA_SUCCESS)
        m->n.lost += s->n;
    return r;
}

static CUresult swap_prepare(vmm_backend_t *m, move_step_t *s)
{
    size_t bytes = s->n * m->granule;
    double t0 = seconds();
    s->swap = 1;
    s->big = 1;
    CUresult r = m->cu->MemRetainAllocationHandle(&s->old, (void *)(uintptr_t)s->src);
    double tr = seconds();
    m->t_sw_retain += tr - t0;
    if (r != CUDA_SUCCESS) {
        m->t_sw_stage += tr - t0;
        return r;
    }
    r = m->cu->MemMap(s->dst, bytes, 0, s->old, 0);
    if (r == CUDA_SUCCESS) {
        double ta = seconds();
        r = m->cu->MemSetAccess(s->dst, bytes, &m->access, 1);
        m->t_sw_stage_access += seconds() - ta;
        if (r != CUDA_SUCCESS)
            m->cu->MemUnmap(s->dst, bytes);
    }
    double t1 = seconds();
    m->t_sw_stage += t1 - t0;
    if (r != CUDA_SUCCESS) {
        m->cu->MemRelease(s->old);
        return r;
    }
    /* The old memory stays alive: held, and mapped at staging. */
    r = m->cu->MemUnmap(s->src, bytes);
    double t2 = seconds();
    m->t_sw_unmap += t2 - t1;
    if (r == CUDA_SUCCESS) {
        CUmemGenericAllocationHandle h;
        r = CUDA_ERROR_NOT_FOUND;
        while (m->nkeep && r != CUDA_SUCCESS) {
            vmm_keep_t e = m->hkeep[--m->nkeep];
            if (keep_handle(m, e, &h) != CUDA_SUCCESS) {
                keep_free(m, e);
                continue;
            }
            r = m->cu->MemMap(s->src, bytes, 0, h, 0);
            m->cu->MemRelease(h); /* mapped: the mapping keeps it; else dropped */
            if (r == CUDA_SUCCESS) {
                m->keep_hits++;
                if (e.slot) /* the slot maps it too: it goes with this mapping */
                    m->bslot[granule_index(m, s->src) / m->bign] = e.slot;
            } else if (e.slot) {
                slot_put(m, e.slot - 1);
            }
        }
        if (r != CUDA_SUCCESS) {
            r = m->cu->MemCreate(&h, bytes, &m->prop[VMM_HOST], 0);
            if (r == CUDA_SUCCESS) {
                r = m->cu->MemMap(s->src, bytes, 0, h, 0);
                m->cu->MemRelease(h);
                if (r == CUDA_SUCCESS)
                    m->n.big_maps++;
            }
        }
        if (r == CUDA_SUCCESS) {
            double ta = seconds();
            r = m->cu->MemSetAccess(s->src, bytes, &m->access, 1);
            m->t_sw_host_access += seconds() - ta;
            if (r != CUDA_SUCCESS) {
                m->cu->MemUnmap(s->src, bytes); /* frees the host memory */
                block_unslot(m, granule_index(m, s->src));
            }
        }
        if (r != CUDA_SUCCESS)
            swap_restore(m, s);
    } /* else the unmap failed: src still maps the old memory */
    m->t_sw_host += seconds() - t2;
    if (r != CUDA_SUCCESS) {
        m->cu->MemUnmap(s->dst, bytes);
        m->cu->MemRelease(s->old);
    }
    return r;
}

/* After the copy of a swap step (ok: it completed): staging unmapped, the
 * old device memory freed (or its handle put in late[] when late).  Not
 * ok (the step is abandoned): the host memory at src goes, the old device
 * memory is mapped back there. */
static CUresult swap_finish(vmm_backend_t *m, move_step_t *s, int ok,
                            CUmemGenericAllocationHandle *late, size_t *nlate)
{
    size_t bytes = s->n * m->granule;
    CUresult r = CUDA_SUCCESS;
    if (!ok) {
        m->cu->MemUnmap(s->src, bytes);
        block_unslot(m, granule_index(m, s->src));
        r = swap_restore(m, s);
    }
    double t0 = seconds();
    m->cu->MemUnmap(s->dst, bytes);
    if (ok && late)
        late[(*nlate)++] = s->old;
    else
        m->cu->MemRelease(s->old);
    m->t_sw_free += seconds() - t0;
    return r;
}

/*
 * A step of a move to host through the mirror (VMEM_VMM_MOVE_MIRROR, the
 * default), for a whole big device mapping: the step's host memory is a
 * mirror slot (a kept handle already there, else one mapped there now, else
 * new host memory), and the copy runs from src, still mapped, into the slot.
 * Once it is done the device memory at src is unmapped (freed) and the
 * slot's handle mapped at src with access: one cuMemSetAccess per step, for
 * host memory, against two for a swap step (the old device memory at
 * staging, the host memory at src), and none at all for a kept slot before
 * the copy, so copies start at once.  The slot keeps mapping the handle
 * while it backs src, so when the data goes back to the device the slot
 * is kept (keep_host) with its access, ready for the next pause.
 * CUDA_ERROR_NOT_FOUND: no slot free (the caller takes another path).
 */
static CUresult mirror_prepare(vmm_backend_t *m, move_step_t *s)
{
    double t0 = seconds();
    CUresult r = CUDA_ERROR_NOT_FOUND;
    s->mirror = 1;
    s->big = 1;
    while (m->nkeep && r != CUDA_SUCCESS) {
        vmm_keep_t e = m->hkeep[--m->nkeep];
        if (e.slot) {
            s->slot = e.slot;
            r = CUDA_SUCCESS;
            m->keep_hits++;
            break;
        }
        r = slot_adopt(m, e.h, &s->slot);
        if (r == CUDA_ERROR_NOT_FOUND) {
            m->nkeep++; /* no slot free: it stays kept */
            break;
        }
        m->cu->MemRelease(e.h); /* mapped at the slot, which owns it; else dropped */
        if (r == CUDA_SUCCESS)
            m->keep_hits++;
    }
    if (r != CUDA_SUCCESS && (m->nkeep == 0 || r != CUDA_ERROR_NOT_FOUND)) {
        CUmemGenericAllocationHandle h;
        r = m->cu->MemCreate(&h, s->n * m->granule, &m->prop[VMM_HOST], 0);
        if (r == CUDA_SUCCESS) {
            r = slot_adopt(m, h, &s->slot);
            m->cu->MemRelease(h);
            if (r == CUDA_SUCCESS)
                m->n.big_maps++;
        }
    }
    if (r == CUDA_SUCCESS)
        s->dst = slot_addr(m, s->slot - 1);
    else
        s->mirror = 0;
    m->t_mi_prep += seconds() - t0;
    return r;
}

/* After the copy of a mirror step (ok: it completed): the device memory at
 * src unmapped (freed), the slot's handle mapped there.  Not ok: src is
 * untouched, the slot goes back to the kept memory.  If src cannot take
 * the host memory once its device memory is gone, new device memory is
 * mapped there and the data copied back from the slot (lost only if that
 * fails too). */
static CUresult huge_mirror_finish(vmm_backend_t *m, size_t h, size_t *moved);

/* Maps the host memory of the slot at slot (its handle, retained) at `at`
 * for bytes, with access unless noacc (a guarded move); on failure nothing
 * stays mapped at `at`. */
static CUresult slot_map_at(vmm_backend_t *m, CUdeviceptr at, CUdeviceptr slot, size_t bytes,
                            int noacc)
{
    double t0 = seconds();
    CUmemGenericAllocationHandle h;
    CUresult r = m->cu->MemRetainAllocationHandle(&h, (void *)(uintptr_t)slot);
    if (r == CUDA_SUCCESS) {
        r = m->cu->MemMap(at, bytes, 0, h, 0);
        m->cu->MemRelease(h);
    }
    double t1 = seconds();
    m->t_mi_map += t1 - t0;
    if (r == CUDA_SUCCESS && !noacc) {
        r = m->cu->MemSetAccess(at, bytes, &m->access, 1);
        if (r != CUDA_SUCCESS)
            m->cu->MemUnmap(at, bytes);
    }
    m->t_mi_access += seconds() - t1;
    return r;
}

static CUresult mirror_finish(vmm_backend_t *m, move_step_t *s, int ok, size_t *moved)
{
    size_t bytes = s->n * m->granule, b = granule_index(m, s->src);
    if (!ok) {
        step_slot_back(m, s);
        return CUDA_SUCCESS;
    }
    if (m->hugen && m->big[b] == MAP_HUGE) { /* a piece: the mapping goes with its last */
        size_t h = b - b % m->hugen, k = (b - h) / m->bign;
        m->hpend[k] = s->slot;
        m->hpend_n = k + 1;
        s->slot = 0;
        s->n = 0; /* the caller counts nothing: huge_mirror_finish does */
        return k + 1 < m->hugen / m->bign ? CUDA_SUCCESS : huge_mirror_finish(m, h, moved);
    }
    double t0 = seconds();
    CUresult r = m->cu->MemUnmap(s->src, bytes); /* frees the device memory */
    double t1 = seconds();
    m->t_mi_unmap += t1 - t0;
    if (r != CUDA_SUCCESS) { /* src still maps the device memory */
        step_slot_back(m, s);
        return r;
    }
    int noacc = m->base.move_guard != 0;
    r = slot_map_at(m, s->src, s->dst, bytes, noacc);
    if (r == CUDA_SUCCESS) {
        m->bslot[b / m->bign] = s->slot;
        m->noacc[b / m->bign] = (uint8_t)noacc;
        s->slot = 0;
        return CUDA_SUCCESS;
    }
    if (restore_from(m, s->src, s->n, s->dst) != CUDA_SUCCESS)
        m->n.lost += s->n;
    step_slot_back(m, s);
    return r;
}

/* The slots of the copied pieces of an unfinished huge move go back to
 * the kept memory (the huge mapping at its address is untouched). */
static void hpend_drop(vmm_backend_t *m)
{
    for (size_t k = 0; k < m->hpend_n; k++) {
        move_step_t s = {0};
        s.slot = m->hpend[k];
        step_slot_back(m, &s);
    }
    m->hpend_n = 0;
}

/*
 * The last piece of the huge device mapping at h is copied to its slot:
 * the mapping is unmapped (its device memory freed) and each piece's slot
 * handle mapped at the piece, as mirror_finish does for a big mapping; the
 * granules become VMM_HOST in big host mappings and count in *moved.  If
 * the unmap fails nothing has moved.  If a piece cannot take its host
 * memory, it and the pieces after it get new device memory with their
 * data copied back from the slots (lost only if that fails too).
 */
static CUresult huge_mirror_finish(vmm_backend_t *m, size_t h, size_t *moved)
{
    size_t pieces = m->hugen / m->bign, bb = big_bytes(m);
    CUdeviceptr at = granule_addr(m, h);
    double t0 = seconds();
    CUresult r = m->cu->MemUnmap(at, m->hugen * m->granule); /* frees the device memory */
    double t1 = seconds();
    m->t_mi_unmap += t1 - t0;
    if (r != CUDA_SUCCESS) {
        hpend_drop(m);
        return r;
    }
    int noacc = m->base.move_guard != 0;
    size_t p = 0;
    for (; p < pieces && r == CUDA_SUCCESS; p++) {
        CUdeviceptr src = at + (CUdeviceptr)(p * bb), slot = slot_addr(m, m->hpend[p] - 1);
        r = slot_map_at(m, src, slot, bb, noacc);
        if (r != CUDA_SUCCESS)
            break;
        size_t b = h + p * m->bign;
        m->bslot[b / m->bign] = m->hpend[p];
        m->noacc[b / m->bign] = (uint8_t)noacc;
        m->hpend[p] = 0;
        memset(m->big + b, MAP_BIG, m->bign);
        memset(m->state + b, VMM_HOST, m->bign);
        *moved += bb;
    }
    for (; p < pieces; p++) { /* back to the device, from the slots */
        CUdeviceptr src = at + (CUdeviceptr)(p * bb), slot = slot_addr(m, m->hpend[p] - 1);
        size_t b = h + p * m->bign;
        memset(m->big + b, MAP_GRANULE, m->bign);
        if (restore_from(m, src, m->bign, slot) != CUDA_SUCCESS) {
            m->n.lost += m->bign;
            m->in_use -= bb;
            memset(m->state + b, VMM_NONE, m->bign);
        } else {
            memset(m->big + b, MAP_BIG, m->bign);
        }
    }
    hpend_drop(m); /* the slots of the pieces not mapped (a mapped one's entry is 0) */
    return r;
}

/* Where a step's copy reads its data: at its address, or, for a whole big
 * host mapping mapped there without access (noacc), at the slot that maps
 * the same host memory with access. */
static CUdeviceptr copy_source(const vmm_backend_t *m, const move_step_t *s)
{
    if (!m->noacc || !step_big_mapping(m, s, VMM_HOST))
        return s->src;
    size_t b = granule_index(m, s->src) / m->bign;
    return m->noacc[b] && m->bslot[b] ? slot_addr(m, m->bslot[b] - 1) : s->src;
}

/* Queues the copy of a step (not a swap step) into its new memory: one
 * copy, or for a step longer than a big mapping (a huge one, back to the
 * device) one per big piece, each from where copy_source reads it. */
static CUresult step_copy(vmm_backend_t *m, move_step_t *s)
{
    if (s->n <= m->bign || !m->bign)
        return m->cu->MemcpyAsync(s->dst, copy_source(m, s), s->n * m->granule, m->stream);
    CUresult r = CUDA_SUCCESS;
    for (size_t k = 0; k < s->n && r == CUDA_SUCCESS; k += m->bign) {
        move_step_t piece = step_piece(m, s, k);
        r = m->cu->MemcpyAsync(s->dst + (CUdeviceptr)(k * m->granule), copy_source(m, &piece),
                               piece.n * m->granule, m->stream);
    }
    return r;
}

/*
 * Moves in steps of `batch` bytes aligned to big handles, VMM_STAGES in
 * flight: while the copies run on the backend's stream, the memory of later
 * steps is created and mapped, and finished steps remapped.  Old and new
 * memory are both mapped during a copy (the new at a staging slot), so each
 * copy is one cuMemcpyAsync at full bus speed; device memory comes as one
 * big handle per aligned step, or one huge handle per aligned huge step
 * (hugen granules, back to the device).  Steps finish in order, so what
 * moved is always a prefix (a huge mapping moved to host counts only once
 * its last piece is done: huge_mirror_finish).  Big and huge mappings cut
 * by the range are first converted to small handles (huge ones inside it
 * too, unless they go to host through the mirror).  If a remap fails after
 * the old memory was unmapped (the
 * driver refusing to map a handle it just mapped elsewhere), those granules
 * are lost: the call fails and bfc_check sees the range unmapped.
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
    /* The study switches, read at each move (so a benchmark may switch them
     * between pauses); backend_vmm_create refused malformed ones, and one
     * set malformed since gives its default (logged once). */
    int swap_on = backend_vmm_move_switch(BACKEND_VMM_MOVE_SWAP);
    int phases = backend_vmm_move_switch(BACKEND_VMM_PHASES);
    int mirror_on = m->mirror && backend_vmm_move_switch(BACKEND_VMM_MOVE_MIRROR);
    vmm_backend_t t0 = *m; /* the timers before, for the phases line */
    double w0 = seconds();
    /* Late: the old device memory of swap steps freed after the last copy. */
    CUmemGenericAllocationHandle *late = NULL;
    size_t nlate = 0;
    if (to_host && m->bign && backend_vmm_move_switch(BACKEND_VMM_FREE_LATE))
        late = malloc((n / m->bign + 1) * sizeof *late);
    if (!ctx_enter(m)) {
        free(late);
        return VMEM_ERR_BACKEND;
    }
    CUresult r = ctx_sync(m); /* the data must be at rest */
    int huge_in = 0; /* huge mappings inside the run, moved through the mirror */
    if (r == CUDA_SUCCESS) {
        r = edges_whole(m, first, n); /* could not split: nothing moves */
        /* Huge mappings inside the run: a move to host through the mirror
         * takes them piece by piece (mirror_finish); any other move needs
         * big mappings.  (From first, a mapping's start once the edges are
         * whole, the walk goes mapping by mapping.) */
        for (size_t h = first; r == CUDA_SUCCESS && m->hugen && h < first + n;
             h += map_len(m, h)) {
            if (m->big[h] != MAP_HUGE)
                continue;
            if (to_host && mirror_on)
                huge_in = 1;
            else if (!huge_split(m, h, h, h))
                r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (!m->batch_depth)
            scratch_drop(m);
    }
    double w1 = seconds();
    move_step_t step[VMM_RING];
    /* Steps in flight: VMM_STAGES, or with huge mappings to move to host
     * through the mirror, a huge mapping's pieces plus VMM_STAGES. */
    size_t depth = VMM_STAGES;
    if (huge_in) {
        depth = m->hugen / m->bign + VMM_STAGES;
        depth = depth < VMM_RING ? depth : VMM_RING;
    }
    size_t started = 0, finished = 0, pos = 0; /* steps, steps, granules */
    while (finished < started || (r == CUDA_SUCCESS && pos < n)) {
        while (r == CUDA_SUCCESS && started - finished < depth && pos < n) {
            move_step_t *s = &step[started % VMM_RING];
            size_t at = first + pos, len = per - at % per;
            if (huge_fits(m, at, first + n, kind) && m->dev_big)
                len = m->hugen; /* back to the device: one huge handle */
            s->src = p + (CUdeviceptr)(pos * m->granule);
            s->dst = m->stage + (CUdeviceptr)((started % VMM_RING) * m->slotn * m->granule);
            s->n = n - pos < len ? n - pos : len;
            s->h = m->handles + (started % VMM_RING) * m->slotn;
            s->done = m->done[started % VMM_RING];
            s->swap = 0;
            s->mirror = 0;
            s->slot = 0;
            r = CUDA_ERROR_NOT_FOUND;
            if (step_huge_piece(m, s, kind)) { /* the mirror or nothing (mirror_on here) */
                r = mirror_prepare(m, s);
                if (r != CUDA_SUCCESS) {
                    r = r == CUDA_ERROR_NOT_FOUND ? CUDA_ERROR_OUT_OF_MEMORY : r;
                    break;
                }
            } else if (mirror_on && swap_fits(m, s, kind)) {
                r = mirror_prepare(m, s);
            }
            if (!s->mirror && r == CUDA_ERROR_NOT_FOUND)
                r = swap_on && swap_fits(m, s, kind) ? swap_prepare(m, s)
                                                     : step_prepare(m, s, kind);
            if (r != CUDA_SUCCESS)
                break;
            double e0 = seconds();
            r = s->swap ? m->cu->MemcpyAsync(s->src, s->dst, s->n * m->granule, m->stream)
                        : step_copy(m, s);
            if (r == CUDA_SUCCESS)
                r = m->cu->EventRecord(s->done, m->stream);
            m->t_enqueue += seconds() - e0;
            if (r != CUDA_SUCCESS) {
                if (s->swap)
                    swap_finish(m, s, 0, NULL, NULL);
                else if (s->mirror)
                    mirror_finish(m, s, 0, NULL);
                else
                    step_abandon(m, s);
                break;
            }
            pos += s->n;
            started++;
            if (s->swap)
                m->swap_steps++;
            else if (s->mirror)
                m->mirror_steps++;
            else
                m->staged_steps++;
        }
        if (finished == started)
            break;
        move_step_t *s = &step[finished % VMM_RING];
        CUresult f;
        if (s->swap || s->mirror) {
            double e0 = seconds();
            f = m->cu->EventSynchronize(s->done);
            m->t_wait += seconds() - e0;
            CUresult g = s->swap ? swap_finish(m, s, f == CUDA_SUCCESS, late, &nlate)
                                 : mirror_finish(m, s, f == CUDA_SUCCESS, moved);
            if (f == CUDA_SUCCESS)
                f = g;
            else
                s->n = 0; /* restored (or untouched): nothing of it moved */
        } else {
            f = step_finish(m, s, kind);
        }
        finished++;
        if (f != CUDA_SUCCESS) {
            if (r == CUDA_SUCCESS)
                r = f;
            break;
        }
        memset(m->state + granule_index(m, s->src), kind, s->n);
        *moved += s->n * m->granule;
    }
    for (; finished < started; finished++) {
        move_step_t *s = &step[finished % VMM_RING];
        if (s->swap || s->mirror) {
            m->cu->EventSynchronize(s->done);
            if (s->swap)
                swap_finish(m, s, 0, NULL, NULL);
            else
                mirror_finish(m, s, 0, NULL);
        } else {
            step_abandon(m, s);
        }
    }
    hpend_drop(m); /* a huge mapping left half copied stays on the device */
    double l0 = seconds();
    while (nlate)
        m->cu->MemRelease(late[--nlate]);
    m->t_free_late += seconds() - l0;
    free(late);
    ctx_leave(m);
    if (to_host) {
        m->in_use -= *moved;
        m->host_in_use += *moved;
    } else {
        m->in_use += *moved;
        m->host_in_use -= *moved;
    }
    m->n.moved += *moved;
    if (phases)
        fprintf(stderr,
                "libvmem: vmm phases: move to %s %zu MiB: %.1f ms (sync+edges %.1f; steps: mirror "
                "%llu, swap %llu, staged %llu); mirror: slots %.1f (access %.1f) unmap-old %.1f "
                "map-host %.1f (access %.1f); swap: map-old-at-stage %.1f (retain %.1f access %.1f) "
                "unmap-old %.1f map-host %.1f (access %.1f) free-old %.1f free-late %.1f; staged: "
                "create+map %.1f unmap-old %.1f map-new %.1f unstage %.1f; enqueue %.1f; wait-copy "
                "%.1f\n",
                to_host ? "host" : "device", *moved >> 20, (seconds() - w0) * 1e3,
                (w1 - w0) * 1e3, m->mirror_steps - t0.mirror_steps,
                m->swap_steps - t0.swap_steps, m->staged_steps - t0.staged_steps,
                (m->t_mi_prep - t0.t_mi_prep) * 1e3,
                (m->t_mi_adopt_access - t0.t_mi_adopt_access) * 1e3,
                (m->t_mi_unmap - t0.t_mi_unmap) * 1e3, (m->t_mi_map - t0.t_mi_map) * 1e3,
                (m->t_mi_access - t0.t_mi_access) * 1e3,
                (m->t_sw_stage - t0.t_sw_stage) * 1e3, (m->t_sw_retain - t0.t_sw_retain) * 1e3,
                (m->t_sw_stage_access - t0.t_sw_stage_access) * 1e3,
                (m->t_sw_unmap - t0.t_sw_unmap) * 1e3, (m->t_sw_host - t0.t_sw_host) * 1e3,
                (m->t_sw_host_access - t0.t_sw_host_access) * 1e3,
                (m->t_sw_free - t0.t_sw_free) * 1e3,
                (m->t_free_late - t0.t_free_late) * 1e3, (m->t_prep - t0.t_prep) * 1e3,
                (m->t_unmap_old - t0.t_unmap_old) * 1e3, (m->t_map_new - t0.t_map_new) * 1e3,
                (m->t_unstage - t0.t_unstage) * 1e3, (m->t_enqueue - t0.t_enqueue) * 1e3,
                (m->t_wait - t0.t_wait) * 1e3);
    return r == CUDA_SUCCESS ? VMEM_OK : status_of(r);
}

/* Pause with discard: [base, base + size) unmapped (big mappings reaching
 * out of it are first converted to granule handles), kept reserved. */
static vmem_status_t vmm_region_park(backend_t *b, void *base, size_t size)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)base;
    size_t first = granule_index(m, p), n = size / m->granule;
    if (p < m->va || first + n > m->ngranules)
        return VMEM_ERR_INVALID;
    for (size_t i = first; i < first + n; i++)
        if (m->state[i] != VMM_DEVICE && m->state[i] != VMM_HOST)
            return VMEM_ERR_INVALID;
    if (!ctx_enter(m))
        return VMEM_ERR_BACKEND;
    double w0 = seconds(), w1 = w0, w2 = w0;
    size_t maps = 0;
    CUresult r = ctx_sync(m); /* queued work may still use it */
    if (r == CUDA_SUCCESS)
        r = edges_whole(m, first, n); /* could not split: nothing parks */
    if (r == CUDA_SUCCESS) {
        for (size_t i = first; i < first + n; i += map_len(m, i))
            maps++;
        w1 = seconds();
        run_unmap(m, first, n);
        w2 = seconds();
        m->t_park_unmap += w2 - w1;
        for (size_t i = first; i < first + n; i++) {
            if (m->state[i] == VMM_DEVICE)
                m->in_use -= m->granule;
            else
                m->host_in_use -= m->granule;
            m->state[i] = VMM_PARKED;
        }
    }
    if (!m->batch_depth)
        scratch_drop(m);
    ctx_leave(m);
    if (backend_vmm_move_switch(BACKEND_VMM_PHASES))
        fprintf(stderr,
                "libvmem: vmm phases: park %zu MiB: %.1f ms (sync+edges %.1f; unmap %.1f, %zu "
                "mappings in %s)\n",
                size >> 20, (seconds() - w0) * 1e3, (w1 - w0) * 1e3, (w2 - w1) * 1e3, maps,
                m->unmap_runs ? "one call" : "one call each");
    return r == CUDA_SUCCESS ? VMEM_OK : status_of(r);
}

/* Resume: new memory (big handles where aligned) mapped at parked granules. */
static vmem_status_t vmm_region_unpark(backend_t *b, void *base, size_t size, int to_host)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)base;
    size_t first = granule_index(m, p), n = size / m->granule;
    int kind = to_host ? VMM_HOST : VMM_DEVICE;
    if (p < m->va || first + n > m->ngranules)
        return VMEM_ERR_INVALID;
    for (size_t i = first; i < first + n; i++)
        if (m->state[i] != VMM_PARKED)
            return VMEM_ERR_INVALID;
    return run_back(m, first, n, kind);
}

typedef struct reserve_job {
    vmm_backend_t *m;
    CUmemGenericAllocationHandle *h;
    size_t n, made;
} reserve_job_t;

static void *reserve_part(void *arg)
{
    reserve_job_t *j = arg;
    vmm_backend_t *m = j->m;
    if (m->cu->CtxPushCurrent(m->ctx) != CUDA_SUCCESS)
        return NULL;
    for (; j->made < j->n; j->made++)
        if (m->cu->MemCreate(&j->h[j->made], m->bign * m->granule, &m->prop[VMM_HOST], 0) !=
            CUDA_SUCCESS)
            break;
    CUcontext c;
    m->cu->CtxPopCurrent(&c);
    return NULL;
}

/* Creates big host handles (reserve_threads threads, each its share) until
 * bytes are kept, or drops the surplus. */
static vmem_status_t vmm_host_reserve(backend_t *b, size_t bytes, size_t *kept)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    size_t big = m->bign * m->granule;
    if (!m->bign || !m->host_big || !m->prop[VMM_HOST].type) {
        *kept = 0;
        return VMEM_ERR_UNSUPPORTED;
    }
    size_t want = (bytes + big - 1) / big;
    while (m->nkeep > want)
        keep_free(m, m->hkeep[--m->nkeep]);
    vmem_status_t st = VMEM_OK;
    if (m->nkeep < want) {
        CUmemGenericAllocationHandle *hs = malloc((want - m->nkeep) * sizeof *hs);
        if (want > m->keep_cap) {
            void *q = realloc(m->hkeep, want * sizeof *m->hkeep);
            if (!q) {
                free(hs);
                *kept = m->nkeep * big;
                return VMEM_ERR_NOMEM;
            }
            m->hkeep = q;
            m->keep_cap = want;
        }
        if (!hs) {
            *kept = m->nkeep * big;
            return VMEM_ERR_NOMEM;
        }
        size_t need = want - m->nkeep;
        int t = m->reserve_threads;
        if ((size_t)t > need)
            t = (int)need;
        reserve_job_t job[16];
        pthread_t tid[16];
        int started[16] = {0};
        for (int i = 0; i < t; i++) {
            size_t lo = need * (size_t)i / (size_t)t, hi = need * (size_t)(i + 1) / (size_t)t;
            job[i] = (reserve_job_t){m, hs + lo, hi - lo, 0};
            started[i] = pthread_create(&tid[i], NULL, reserve_part, &job[i]) == 0;
            if (!started[i])
                reserve_part(&job[i]);
        }
        /* With the mirror on, each handle is mapped at a slot with its
         * access now, off the pause's critical path. */
        int mirror = m->mirror && backend_vmm_move_switch(BACKEND_VMM_MOVE_MIRROR);
        for (int i = 0; i < t; i++) {
            if (started[i])
                pthread_join(tid[i], NULL);
            for (size_t k = 0; k < job[i].made; k++) {
                vmm_keep_t e = {job[i].h[k], 0};
                if (mirror && slot_adopt(m, e.h, &e.slot) == CUDA_SUCCESS) {
                    m->cu->MemRelease(e.h); /* the slot owns it */
                    e.h = 0;
                }
                m->hkeep[m->nkeep++] = e; /* room: keep_cap >= want */
            }
            if (job[i].made < job[i].n)
                st = VMEM_ERR_NOMEM;
        }
        free(hs);
    }
    if (m->keep_max < m->nkeep * big)
        m->keep_max = m->nkeep * big; /* what the caller asked for stays kept */
    *kept = m->nkeep * big;
    return st;
}

/* The big host mappings of [base, base + size) left without access by a
 * guarded pause get their access back. */
static void vmm_region_unguard(backend_t *b, void *base, size_t size)
{
    vmm_backend_t *m = (vmm_backend_t *)b;
    if (!m->noacc || !m->bign)
        return;
    size_t first = granule_index(m, (CUdeviceptr)(uintptr_t)base), end = first + size / m->granule;
    if (!ctx_enter(m))
        return;
    for (size_t i = first - first % m->bign; i < end && i < m->ngranules; i += m->bign)
        if (m->noacc[i / m->bign] &&
            m->cu->MemSetAccess(granule_addr(m, i), big_bytes(m), &m->access, 1) == CUDA_SUCCESS)
            m->noacc[i / m->bign] = 0;
    ctx_leave(m);
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
    case VMM_PARKED:
        return BACKEND_BACKING_PARKED;
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
            if (m->state[i] == VMM_NONE || m->state[i] == VMM_PARKED) {
                i++;
                continue;
            }
            size_t j = i;
            while (j < m->ngranules && m->state[j] != VMM_NONE && m->state[j] != VMM_PARKED)
                j++;
            run_unmap(m, i, j - i);
            i = j;
        }
        scratch_drop(m);
        m->cu->MemAddressFree(m->va, m->va_size);
        if (m->stage)
            m->cu->MemAddressFree(m->stage, VMM_RING * m->slotn * m->granule);
        if (m->scratch)
            m->cu->MemAddressFree(m->scratch, m->bign * m->granule);
        if (m->hscratch)
            m->cu->MemAddressFree(m->hscratch, m->hugen * m->granule);
        while (m->nkeep)
            keep_free(m, m->hkeep[--m->nkeep]);
        while (m->nsmall)
            m->cu->MemRelease(m->hsmall[--m->nsmall]);
        for (size_t s = 0; m->slot_used && s < m->nslots; s++)
            if (m->slot_used[s]) /* none should be left: every mapping is gone */
                slot_put(m, (uint32_t)s);
        if (m->mirror)
            m->cu->MemAddressFree(m->mirror, m->nslots * big_bytes(m));
        for (int i = 0; i < VMM_RING; i++)
            if (m->done[i])
                m->cu->EventDestroy(m->done[i]);
        if (m->stream)
            m->cu->StreamDestroy(m->stream);
        ctx_leave(m);
    }
    if (m->ctx)
        m->cu->DevicePrimaryCtxRelease(m->dev);
    free(m->state);
    free(m->big);
    free(m->handles);
    free(m->hkeep);
    free(m->slot_used);
    free(m->bslot);
    free(m->noacc);
    free(m->hsmall);
    free(m);
}

static const backend_ops_t vmm_ops = {vmm_region_alloc, vmm_region_free, vmm_mem_info,
                                      vmm_destroy, vmm_region_remap, vmm_remap_span};
static const backend_host_ops_t vmm_host_ops = {vmm_region_alloc_host, vmm_region_move,
                                                vmm_backing, vmm_region_park,
                                                vmm_region_unpark, vmm_host_reserve,
                                                vmm_region_unguard};

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
    if (run_create(m, 0, 1, VMM_HOST) != CUDA_SUCCESS)
        return 0;
    run_unmap(m, 0, 1);
    return 1;
}

/* Whether one cuMemUnmap may cover two mappings. */
static void unmap_probe(vmm_backend_t *m)
{
    m->unmap_runs = 0;
    size_t bign = m->bign;
    m->bign = 0; /* two handles of one granule */
    CUresult r = run_create(m, 0, 2, VMM_DEVICE);
    m->bign = bign;
    if (r != CUDA_SUCCESS)
        return;
    if (m->cu->MemUnmap(m->va, 2 * m->granule) == CUDA_SUCCESS) {
        m->unmap_runs = 1;
        return;
    }
    run_unmap(m, 0, 2);
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
    /* The settings of docs/configuration.md ("Diagnostic switches of the
     * vmm backend"); a bad one fails the creation. */
    backend_vmm_env_t env;
    if (backend_vmm_env(m->granule, &env) != VMEM_OK) {
        st = VMEM_ERR_ENV;
        goto out;
    }
    m->va_size = (total * VMM_RANGE_FACTOR + VMM_RANGE_HOST) / m->granule * m->granule;
    m->ngranules = m->va_size / m->granule;
    m->state = calloc(m->ngranules, 1);
    m->big = calloc(m->ngranules, 1);
    /* Big handles (VMM_BIG, VMEM_VMM_BIG_MIB) where the granule divides
     * them; off with VMEM_VMM_BIG=0 (one handle per granule everywhere, as
     * before). */
    size_t bigsz = env.big_bytes;
    m->bign = bigsz % m->granule == 0 ? bigsz / m->granule : 0;
    if (m->bign < 2 || m->bign > BACKEND_VMM_BIG_MAX || !env.big)
        m->bign = 0;
    /* Host memory in big handles too (unmapped in 64 MiB pieces when it
     * moves back); VMEM_VMM_HOST_BIG=0: one handle per host granule. */
    /* Huge handles for device memory (VMM_HUGE; VMEM_VMM_HUGE_MIB, 0: off)
     * where a run covers an aligned piece of that size: fewer mappings to
     * create and to take down (a pause with discard unmaps each). */
    m->hugen = 0;
    size_t hugesz = env.huge_bytes;
    if (m->bign && hugesz % (m->bign * m->granule) == 0 && hugesz / (m->bign * m->granule) >= 2 &&
        hugesz / (m->bign * m->granule) <= VMM_HUGE_MAX)
        m->hugen = hugesz / m->granule;
    m->host_big = m->bign && env.host_big;
    /* Device memory in big handles; VMEM_VMM_DEVICE_BIG=0: one handle per
     * device granule (no splits of live device data on shrink) while host
     * memory keeps its big handles. */
    m->dev_big = m->bign && env.device_big;
    if (!m->dev_big)
        m->hugen = 0;
    m->grow_align = env.grow_align;
    /* Threads creating a split's granule handles (VMEM_VMM_SPLIT_THREADS, at
     * most VMM_SPLIT_THREADS).  Default 1: on an H200 (driver 580) four
     * threads took 209.7 ms against 213.2 ms for one on the 8 GiB scattered
     * shrink (docs/gpu-runs/2026-11-22/vmm-bench-3.log): the driver
     * serialises handle creation, so the threads buy nothing. */
    m->split_threads = env.split_threads;
    /* Host memory of moves back to the device kept for the next move to
     * host, up to VMEM_VMM_HOST_KEEP bytes (default: all of it; 0: none). */
    m->keep_max = env.host_keep;
    m->reserve_threads = env.reserve_threads; /* VMEM_VMM_RESERVE_THREADS */
    m->batch = m->bign ? m->bign * m->granule : VMM_BIG / m->granule * m->granule;
    if (m->batch == 0)
        m->batch = m->granule;
    m->slotn = m->batch / m->granule > m->hugen ? m->batch / m->granule : m->hugen;
    m->handles = calloc(VMM_RING * m->slotn, sizeof *m->handles);
    if (!m->state || !m->big || !m->handles) {
        st = VMEM_ERR_NOMEM;
        goto out;
    }
    /* Aligned to big handles, so that granule indices and addresses agree
     * on their boundaries (granule alignment if the driver refuses). */
    if ((!m->hugen ||
         cu->MemAddressReserve(&m->va, m->va_size, m->hugen * m->granule, 0, 0) != CUDA_SUCCESS) &&
        cu->MemAddressReserve(&m->va, m->va_size, m->bign ? m->bign * m->granule : m->granule, 0, 0) !=
            CUDA_SUCCESS &&
        cu->MemAddressReserve(&m->va, m->va_size, m->granule, 0, 0) != CUDA_SUCCESS)
        goto out;
    unmap_probe(m);
    /* The stream copies live data when a big mapping is split, and moves. */
    if (cu->StreamCreate(&m->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        m->stream = 0;
        m->bign = 0;
        host = 0;
    }
    if (m->bign &&
        cu->MemAddressReserve(&m->scratch, m->bign * m->granule, m->granule, 0, 0) != CUDA_SUCCESS) {
        m->scratch = 0;
        m->bign = 0; /* no room to split a big mapping: never make one */
    }
    if (!m->bign)
        m->hugen = 0;
    if (m->hugen &&
        cu->MemAddressReserve(&m->hscratch, m->hugen * m->granule, m->granule, 0, 0) != CUDA_SUCCESS) {
        m->hscratch = 0;
        m->hugen = 0; /* no room to split a huge mapping: never make one */
    }
    for (int i = 0; host && i < VMM_RING; i++)
        if (cu->EventCreate(&m->done[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
            host = 0;
    if (host && (cu->MemAddressReserve(&m->stage, VMM_RING * m->slotn * m->granule, m->granule, 0, 0) !=
                     CUDA_SUCCESS ||
                 !host_probe(m)))
        host = 0; /* device memory only; the pinned host arena takes spills */
    /* The mirror: room for VMM_RANGE_HOST of host big handles (without it,
     * or VMEM_VMM_MOVE_MIRROR=0, moves to host swap or stage). */
    if (host && m->bign && m->host_big) {
        m->nslots = VMM_RANGE_HOST / big_bytes(m);
        m->slot_used = calloc(m->nslots, 1);
        m->bslot = calloc(m->ngranules / m->bign + 1, sizeof *m->bslot);
        m->noacc = calloc(m->ngranules / m->bign + 1, 1);
        if (!m->slot_used || !m->bslot || !m->noacc ||
            cu->MemAddressReserve(&m->mirror, m->nslots * big_bytes(m), big_bytes(m), 0, 0) !=
                CUDA_SUCCESS) {
            free(m->slot_used);
            free(m->bslot);
            free(m->noacc);
            m->slot_used = NULL;
            m->bslot = NULL;
            m->noacc = NULL;
            m->mirror = 0;
            m->nslots = 0;
        }
    }
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
            free(m->big);
            free(m->handles);
            free(m);
        }
        return st;
    }
    m->base.ops = &vmm_ops;
    m->base.host_ops = (m->base.flags & BACKEND_F_HOST_BACKING) ? &vmm_host_ops : NULL;
    m->base.name = "vmm";
    m->base.release_batch = vmm_release_batch;
    m->pend_lo = SIZE_MAX;
    m->alias_lo = SIZE_MAX;
    m->base.granule = m->granule;
    m->base.range_base = (uintptr_t)m->va;
    m->base.range_size = m->va_size;
    /* Regions end on 64 MiB boundaries where the limit allows, so they are
     * made of whole big handles (not 2 MiB ones at their edges). */
    m->base.grow_align = m->dev_big && m->bign && m->grow_align ? m->bign * m->granule : 0;
    backend_set_faults(&m->base, 0, 0, 0);
    *out = &m->base;
    return VMEM_OK;
}

int backend_vmm_counters(const backend_t *b, backend_vmm_counters_t *out)
{
    if (!b || !b->name || strcmp(b->name, "vmm") != 0)
        return -1;
    const vmm_backend_t *m = (const vmm_backend_t *)b;
    *out = m->n;
    out->big_bytes = m->bign * m->granule;
    out->huge_bytes = m->hugen * m->granule;
    out->unmap_runs = m->unmap_runs;
    out->zombie_bytes = m->zombie;
    out->sync_seconds = m->t_sync;
    out->swap_steps = m->swap_steps;
    out->staged_steps = m->staged_steps;
    out->mirror_steps = m->mirror_steps;
    out->aliased_bytes = m->aliased * m->granule;
    out->remap_seconds = m->t_remap;
    out->map_seconds = m->t_region_map;
    out->unmap_seconds = m->t_region_free + m->t_flush;
    out->split_seconds = m->t_scopy + m->t_sunmap + m->t_smap;
    return 0;
}

/* A line naming the variant the vmm backend runs (host handle size, split
 * threads), for vmm-bench; -1 if b is not a vmm backend.  Declared where
 * used (cuda_driver.h is not this file's). */
int backend_vmm_variant(const backend_t *b, char *buf, size_t len);
int backend_vmm_variant(const backend_t *b, char *buf, size_t len)
{
    if (!b || !b->name || strcmp(b->name, "vmm") != 0)
        return -1;
    const vmm_backend_t *m = (const vmm_backend_t *)b;
    snprintf(buf, len,
             "host handles %s, split threads %d (helper threads run %llu); release-batch ends "
             "ms %.1f (syncs %.1f; splits: copy %.1f unmap %.1f map %.1f); move ms: create %.1f "
             "wait-copy %.1f unmap-old %.1f map-new %.1f unstage %.1f",
             m->host_big ? "64 MiB+2 MiB" : "2 MiB only", m->split_threads, m->threads_run,
             m->t_flush * 1e3, m->t_sync * 1e3, m->t_scopy * 1e3, m->t_sunmap * 1e3,
             m->t_smap * 1e3, m->t_prep * 1e3,
             m->t_wait * 1e3, m->t_unmap_old * 1e3, m->t_map_new * 1e3, m->t_unstage * 1e3);
    return 0;
}

#else /* !VMEM_HAVE_CUDA */

vmem_status_t backend_vmm_create(int device, backend_t **out)
{
    (void)device;
    (void)out;
    return VMEM_ERR_UNAVAILABLE;
}

#endif
