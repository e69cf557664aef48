/*
 * Backend vtable: where an arena gets its regions from.
 *
 * A backend hands out regions (address ranges) and takes them back.  The
 * engine never touches the memory behind them.  Contract (checked by the
 * wrappers below in debug builds):
 *  - region_alloc returns a base aligned to 256 bytes (to `granule` for
 *    splittable backends), for a size that is a multiple of `granule`; on
 *    failure it returns a status and leaves *base untouched.
 *  - region_free receives exactly a range obtained from region_alloc, or, for
 *    BACKEND_F_SPLITTABLE backends, any granule-aligned sub-range of memory it
 *    handed out and has not taken back.
 *  - For BACKEND_F_CONTIGUOUS backends, two regions that touch may be treated
 *    as one range (the engine coalesces across them).
 */
#ifndef VMEM_BACKEND_H
#define VMEM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "vmem.h"

enum {
    BACKEND_F_CONTIGUOUS = 1u << 0, /* adjacent regions form one address range */
    BACKEND_F_SPLITTABLE = 1u << 1, /* any granule-aligned sub-range may be freed */
    BACKEND_F_HOST = 1u << 2,       /* memory lives on the host */
    BACKEND_F_SIMULATED = 1u << 3,  /* no real device behind it */
    BACKEND_F_HOST_BACKING = 1u << 4 /* granules may be backed by host memory
                                        in the same range (ops below) */
};

/* Physical backing of one granule, as a backend reports it. */
typedef enum backend_backing {
    BACKEND_BACKING_NONE = 0,   /* not handed out */
    BACKEND_BACKING_DEVICE = 1,
    BACKEND_BACKING_HOST = 2,
    BACKEND_BACKING_PARKED = 3  /* handed out, nothing mapped: the address is
                                   kept (a paused tag, see region_park) */
} backend_backing_t;

typedef struct backend backend_t;

typedef struct backend_ops {
    /* Obtains a region of `size` bytes.  `hint` (may be NULL) is the address
     * the engine would like (just past an existing region), honoured by
     * contiguous backends when that range is free. */
    vmem_status_t (*region_alloc)(backend_t *b, size_t size, void *hint, void **base);
    void (*region_free)(backend_t *b, void *base, size_t size);
    /* Free and total memory of the device (or host) behind the backend. */
    vmem_status_t (*mem_info)(backend_t *b, size_t *free_bytes, size_t *total_bytes);
    void (*destroy)(backend_t *b);
    /* Optional (NULL: VMEM_ERR_UNSUPPORTED; splittable, contiguous backends).
     * Moves the device memory behind [src, src + size) (granule-aligned,
     * handed out, free in the engine, every granule device-backed, whole
     * physical mappings: remap_span) to a free run of the range at hint
     * (else anywhere) without waiting for the device: [src, src + size) is
     * no longer handed out, [*dst, *dst + size) is, and the bytes held do not
     * change.  Contents undefined (free memory).  Work queued before the
     * call may still use the old addresses: the backend keeps them mapped
     * until its next wait for the device, and hands them out to no one
     * before that.  So it is as safe as handing the free memory out again
     * directly: the caller gives the memory to work on the stream that last
     * used it (src/bfc.c, bfc_remap).  On failure nothing changed. */
    vmem_status_t (*region_remap)(backend_t *b, void *src, size_t size, void *hint, void **dst);
    /* Optional, with region_remap: narrows [*lo, *hi) (granule-aligned) to
     * the part region_remap may take: whole physical mappings of device
     * memory (*hi <= *lo: none). */
    void (*remap_span)(const backend_t *b, uintptr_t *lo, uintptr_t *hi);
} backend_ops_t;

/* Host backing (backends flagged BACKEND_F_HOST_BACKING); region_free above
 * takes back granules of either backing. */
typedef struct backend_host_ops {
    /* As region_alloc, backed by host memory that the device reads and
     * writes at the same addresses. */
    vmem_status_t (*region_alloc_host)(backend_t *b, size_t size, void *hint, void **base);
    /* Re-backs [base, base + size) (granule-aligned, handed out, every
     * granule currently on the other side) by host memory (to_host 1) or
     * device memory (0), keeping its address and its contents.  Waits for
     * the device's queued work first.  *moved gets the bytes re-backed from
     * base on (all of them on success; on failure a prefix, a multiple of
     * the granule, possibly 0: the rest is unchanged). */
    vmem_status_t (*region_move)(backend_t *b, void *base, size_t size, int to_host,
                                 size_t *moved);
    /* What backs the granule at addr (for checks). */
    backend_backing_t (*backing)(const backend_t *b, const void *addr);
    /* Pause with discard (src/tags.c): unmaps whatever backs [base, base +
     * size) (granule-aligned, handed out, not parked), giving the memory
     * back, and keeps the addresses reserved (BACKEND_BACKING_PARKED): no
     * region_alloc takes them until region_free.  Waits for the device's
     * queued work first.  Contents are lost. */
    vmem_status_t (*region_park)(backend_t *b, void *base, size_t size);
    /* Maps new memory, device (to_host 0) or host (1), at the parked range
     * [base, base + size); contents undefined.  All or nothing: on failure
     * the range stays parked. */
    vmem_status_t (*region_unpark)(backend_t *b, void *base, size_t size, int to_host);
    /* Optional (NULL: VMEM_ERR_UNSUPPORTED).  Host memory kept ready for
     * moves to host (a keep pause, a spill): creates host backing until
     * `bytes` are kept (fewer: drops the surplus; 0: drops all), so that the
     * move maps it instead of creating (pinning) host memory on its
     * critical path.  *kept gets the bytes kept after the call. */
    vmem_status_t (*host_reserve)(backend_t *b, size_t bytes, size_t *kept);
    /* Optional (NULL: nothing is ever guarded).  Makes the host memory in
     * [base, base + size) that a guarded move left inaccessible (move_guard)
     * accessible again: a resume leaves on host what does not fit. */
    void (*region_unguard)(backend_t *b, void *base, size_t size);
} backend_host_ops_t;

/* Fault injection state, shared by every backend (used by sim in tests). */
typedef struct backend_faults {
    uint64_t countdown; /* fail when this reaches 1 on a request; 0: off */
    double rate;        /* probability of failure per request */
    uint64_t rng;       /* xorshift state */
} backend_faults_t;

struct backend {
    const backend_ops_t *ops;
    const char *name;    /* "sim", "sim-vmm", "host", "cuda", "pinned", "vmm" */
    unsigned flags;
    size_t granule;      /* region sizes are multiples of this */
    const backend_host_ops_t *host_ops; /* BACKEND_F_HOST_BACKING only, else NULL */
    /* Where requests for host memory (region_alloc_host, region_move to
     * host) are counted and draw their injected faults: the host arena's
     * backend when the allocator sets it, else this backend. */
    backend_t *host_peer;
    uintptr_t range_base; /* contiguous backends: the reserved range that */
    size_t range_size;    /* every region lies in (0: not known) */
    /* Contiguous backends: growth prefers regions that end at a multiple of
     * this (from range_base), so later regions start there (vmm: whole
     * 64 MiB handles instead of 2 MiB ones at region edges).  0: none. */
    size_t grow_align;
    backend_faults_t faults;
    uint64_t requests;   /* region_alloc calls */
    uint64_t failures;   /* region_alloc calls that failed (injected or real) */
    /* Optional (NULL unless the backend sets it): brackets a series of
     * region_free calls with no allocation in between (begin 1, end 0), so a
     * backend that waits for the device before freeing waits once. */
    void (*release_batch)(backend_t *b, int begin);
    /* Regions given back while the calling thread was capturing a CUDA
     * graph (backend_capture_begin): the backend still holds them; they go
     * back at the next call made outside a capture (backend.c). */
    struct { void *base; size_t size; } *deferred;
    size_t ndeferred, deferred_cap;
    /* Set by vmem_pause around a keep pause's moves when VMEM_PAUSE_GUARD
     * asks for it (src/tags.c): region_move to host leaves the host memory
     * at the moved addresses inaccessible (vmm, moves through the mirror:
     * no cuMemSetAccess there; sim-vmm: PROT_NONE), so a stray access to a
     * paused block faults instead of reading or writing it.  Backends read
     * such memory some other way when they move it back. */
    int move_guard;
};

/* Stream capture (a CUDA graph being recorded on the calling thread's
 * stream): no call may wait for the device then.  While the calling thread
 * is marked capturing, backend_region_free defers the free (kept by the
 * backend, given back at the next call outside a capture), region_move and
 * region_park return VMEM_ERR_BUSY (nothing moves), and the allocator does
 * not wait for stream fences.  Returns the previous mark (nest: restore it). */
int backend_capture_begin(int capturing);
int backend_capturing(void);
/* Gives back the deferred regions now (outside a capture; the vmm backend
 * waits for the device first, as for any free).  Returns the bytes. */
size_t backend_flush_deferred(backend_t *b);
vmem_status_t backend_host_reserve(backend_t *b, size_t bytes, size_t *kept);
void backend_region_unguard(backend_t *b, void *base, size_t size);

/* Requests a region, applying fault injection first. */
vmem_status_t backend_region_alloc(backend_t *b, size_t size, void *hint, void **base);
void backend_region_free(backend_t *b, void *base, size_t size);
/* region_remap and remap_span (see backend_ops_t); VMEM_ERR_UNSUPPORTED, or
 * an empty span, where the backend has none.  Fault injection applies to
 * region_remap (a request, as region_alloc). */
vmem_status_t backend_region_remap(backend_t *b, void *src, size_t size, void *hint, void **dst);
void backend_remap_span(const backend_t *b, uintptr_t *lo, uintptr_t *hi);
static inline void backend_release_batch(backend_t *b, int begin)
{
    if (b->release_batch)
        b->release_batch(b, begin);
}
/* BACKEND_F_HOST_BACKING backends (see backend_ops_t); fault injection
 * applies to region_alloc_host too. */
vmem_status_t backend_region_alloc_host(backend_t *b, size_t size, void *hint, void **base);
vmem_status_t backend_region_move(backend_t *b, void *base, size_t size, int to_host,
                                  size_t *moved);
backend_backing_t backend_backing(const backend_t *b, const void *addr);
/* Pause support (see backend_host_ops_t); VMEM_ERR_UNSUPPORTED without host
 * backing.  Fault injection applies to region_unpark (the host peer's
 * faults for host memory). */
vmem_status_t backend_region_park(backend_t *b, void *base, size_t size);
vmem_status_t backend_region_unpark(backend_t *b, void *base, size_t size, int to_host);
vmem_status_t backend_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes);
void backend_destroy(backend_t *b);
void backend_set_faults(backend_t *b, uint64_t nth, double rate, uint64_t seed);

/* Constructors.  Each returns VMEM_ERR_UNAVAILABLE when its device is not
 * present (or support was not built), leaving *out untouched. */
vmem_status_t backend_sim_create(size_t capacity, int vmm_style, backend_t **out);
vmem_status_t backend_host_create(size_t capacity, backend_t **out); /* plain host memory */
vmem_status_t backend_cuda_create(int device, backend_t **out);
vmem_status_t backend_pinned_create(int device, backend_t **out);
vmem_status_t backend_vmm_create(int device, backend_t **out);

/* Settings of the vmm backend from the environment (docs/configuration.md,
 * "Diagnostic switches of the vmm backend"), read when an instance opens.
 * Each reader below gives the default for an unset variable; a malformed
 * or out-of-range value (empty included) is logged as an error naming the
 * variable, its value and what is expected, and returns VMEM_ERR_ENV. */
#define BACKEND_VMM_BIG_DEFAULT ((size_t)64 << 20)   /* VMEM_VMM_BIG_MIB */
#define BACKEND_VMM_BIG_MAX 256                      /* granules per big handle */
#define BACKEND_VMM_HUGE_DEFAULT ((size_t)512 << 20) /* VMEM_VMM_HUGE_MIB */
#define BACKEND_VMM_HUGE_MAX 64                      /* big handles per huge one */
#define BACKEND_VMM_SPLIT_THREADS_MAX 4
#define BACKEND_VMM_RESERVE_THREADS_MAX 16

typedef struct backend_vmm_env {
    int big;             /* VMEM_VMM_BIG: big handles at all (default 1) */
    int host_big;        /* VMEM_VMM_HOST_BIG: host memory in big handles (1) */
    int device_big;      /* VMEM_VMM_DEVICE_BIG: device memory in big handles (1) */
    int grow_align;      /* VMEM_VMM_GROW_ALIGN: regions end on big handles (1) */
    size_t big_bytes;    /* VMEM_VMM_BIG_MIB in bytes (64 MiB) */
    size_t huge_bytes;   /* VMEM_VMM_HUGE_MIB in bytes, 0: off (512 MiB; where that is
                            not 2 to 64 big handles the backend makes none) */
    int split_threads;   /* VMEM_VMM_SPLIT_THREADS, 1 to 4 (1) */
    int reserve_threads; /* VMEM_VMM_RESERVE_THREADS, 1 to 16 (4) */
    size_t host_keep;    /* VMEM_VMM_HOST_KEEP in bytes, SIZE_MAX: all (all) */
    /* The study switches of the moves: validated here, but the backend
     * reads them again at each move (backend_vmm_move_switch). */
    int move_mirror;     /* VMEM_VMM_MOVE_MIRROR: moves to host through the mirror (1) */
    int move_swap;       /* VMEM_VMM_MOVE_SWAP: moves to host by swap (1) */
    int free_late;       /* VMEM_VMM_FREE_LATE: old device memory freed late (0) */
    int phases;          /* VMEM_VMM_PHASES: a phases line per move and park (0) */
} backend_vmm_env_t;

/* Every setting above, for a backend whose granule is `granule` bytes (a
 * power of two of at least 1 MiB).  *out is written only on VMEM_OK. */
vmem_status_t backend_vmm_env(size_t granule, backend_vmm_env_t *out);

/* The study switches of the vmm backend's moves, documented as read at each
 * move (a benchmark may switch them between pauses).  backend_vmm_env
 * refuses a malformed one when the instance opens; set later,
 * backend_vmm_move_switch gives the default for a value that is not a
 * boolean (empty included) and logs an error naming it, once per variable
 * for the life of the process.  Thread-safe. */
typedef enum backend_vmm_switch {
    BACKEND_VMM_MOVE_MIRROR, /* VMEM_VMM_MOVE_MIRROR, default 1 */
    BACKEND_VMM_MOVE_SWAP,   /* VMEM_VMM_MOVE_SWAP, default 1 */
    BACKEND_VMM_FREE_LATE,   /* VMEM_VMM_FREE_LATE, default 0 */
    BACKEND_VMM_PHASES,      /* VMEM_VMM_PHASES, default 0 */
    BACKEND_VMM_SWITCHES
} backend_vmm_switch_t;
int backend_vmm_move_switch(backend_vmm_switch_t which);

/* VMEM_VMM_GROW_ALIGN alone (vmm and sim-vmm): a boolean, default on. */
vmem_status_t backend_grow_align_from_env(int *on);

/* VMEM_VMM_BIG_MIB alone (vmm; sim-vmm aligns its growth to it): MiB, a
 * power of two from 4 to 1024 that is 2 to BACKEND_VMM_BIG_MAX granules;
 * default BACKEND_VMM_BIG_DEFAULT. */
vmem_status_t backend_big_from_env(size_t granule, size_t *bytes);

/* 1 if a CUDA device is usable (driver and device present), 0 otherwise. */
int backend_cuda_present(int device);

#endif
