/*
 * The BFC (best-fit with coalescing) arena engine.
 *
 * One engine, instantiated per arena (device, host).  It obtains regions
 * from a backend (backend.h) and carves them into chunks.  All metadata lives
 * in host memory; the engine never reads or writes the managed memory.
 *
 * Not thread-safe: the caller (vmem.c) serialises access with its lock.
 */
#ifndef VMEM_BFC_H
#define VMEM_BFC_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "growth.h"
#include "vmem.h"

#define BFC_ALIGN ((size_t)256)       /* every chunk size and address is a multiple */
#define BFC_SUB_BITS 4
#define BFC_SUB (1u << BFC_SUB_BITS)  /* sub-bins per power of two */
#define BFC_NBINS 832u                /* covers sizes up to 2^63 */
#define BFC_NWORDS ((BFC_NBINS + 63u) / 64u)
#define BFC_TREAP_WALK 64u /* an insert that walks further gives its bin a treap (bfc_arena_t) */
#define BFC_STREAM_HOST (~(uintptr_t)0)  /* free memory on host-backed granules, kept for spills */

struct bfc_region;

/*
 * A chunk: a contiguous piece of one region, either in use (handed out) or
 * free.
 * Invariants:
 *  - addr and size are multiples of BFC_ALIGN; size > 0.
 *  - Within a region, chunks tile [region->base, region->base + region->size)
 *    exactly, linked in address order by prev/next (NULL at the region ends).
 *  - A free chunk is in exactly one bin, bin_index(size), linked by
 *    fprev/fnext in (size, address) order, and also in that bin's treap if
 *    it has one (tl/tr, same order; prio a min-heap; see bfc_arena_t); an
 *    in-use chunk is in the live map, keyed by addr.  A binned chunk's size
 *    and addr do not change.
 *  - No two neighbours are both free with the same stream key (immediate coalescing).
 *  - requested > 0 iff in use.
 *  - host_bytes is 0 for a free chunk, and for an in-use one the bytes of
 *    it that lie on host-backed granules (see bfc_arena_t).
 *  - A free chunk touches a host-backed granule iff it is tagged
 *    BFC_STREAM_HOST.  (Free memory on host-backed granules is kept for
 *    spills: ordinary allocations never land there.)
 */
typedef struct bfc_chunk {
    uintptr_t addr;
    size_t size;
    size_t requested;
    struct bfc_chunk *prev, *next;   /* address order within the region */
    struct bfc_chunk *fprev, *fnext; /* bin list (free) / pool list (unused) */
    struct bfc_chunk *tl, *tr;       /* free: children in its bin's treap */
    uint32_t prio;                   /* free: treap priority (a hash of addr) */
    struct bfc_region *region;
    uintptr_t stream;                /* free: stream that may reuse it at once (0: any) */
    uint64_t seq;                    /* in use: allocation order (1 = oldest) */
    uint32_t bin;
    uint8_t in_use;
    size_t host_bytes;               /* in use: bytes lying on host-backed granules */
} bfc_chunk_t;

/*
 * A region: one range obtained from the backend (for contiguous backends, a
 * maximal run of touching ranges, merged).
 * Invariants: base and size are multiples of the backend granule; regions do
 * not overlap; the list is sorted by base; first is the chunk at base.
 */
typedef struct bfc_region {
    uintptr_t base;
    size_t size;
    bfc_chunk_t *first;
    struct bfc_region *prev, *next;
    size_t live;                     /* in-use chunks in this region */
    int dedicated;                   /* made for one large request (see
                                        bfc_params.dedicated_min): its free
                                        chunks serve only requests filling at
                                        least 3/4 of them (but see
                                        bfc_arena_t.share_dedicated) */
} bfc_region_t;

/* One slot of the live map: a key and its value side by side, so that a
 * lookup reads one cache line rather than one in each of two arrays. */
typedef struct bfc_slot {
    uintptr_t key;
    bfc_chunk_t *val;
} bfc_slot_t;

/* Open-addressing map from a live chunk's address to the chunk.
 * Invariant: count <= cap / 2; empty slots have key 0. */
typedef struct bfc_map {
    bfc_slot_t *slots;
    size_t cap;   /* power of two */
    size_t count;
    unsigned shift;
} bfc_map_t;

typedef struct bfc_params {
    size_t min_region;  /* first region's size (rounded to the granule) */
    size_t max_region;  /* growth doubles region sizes up to this */
    size_t split_min;   /* smallest remainder worth splitting off (>= 256) */
    int keep_regions;   /* 1: never give empty regions back on a failed grow */
    size_t dedicated_min; /* requests this large get a region of their own, of
                             their size; 0: never.  Non-contiguous backends
                             only.  Keeps big regions from being pinned by
                             small blocks, so an empty one can go back when
                             the limit is reached. */
    growth_policy_t growth; /* region sizes and trim before growth (growth.h);
                               all zero: doubling, no trim */
} bfc_params_t;

typedef enum bfc_fail_reason {
    BFC_FAIL_NONE = 0,
    BFC_FAIL_LIMIT = 1,   /* growing would exceed the limit */
    BFC_FAIL_BACKEND = 2, /* the backend refused (device full, fault) */
    BFC_FAIL_SIZE = 3     /* size 0 or too large */
} bfc_fail_reason_t;

/*
 * The arena.
 *
 * Host backing (backends flagged BACKEND_F_HOST_BACKING: sim-vmm, vmm): a
 * granule of a region is backed either by device memory or by host memory
 * mapped at the same address ("spilled in place").  Host-backed granules
 * count in held_host, not in held, so the limit caps device memory only;
 * they are taken only by bfc_alloc_spill, kept while free for later spills
 * (pinning is slow) until bfc_release_host or a step boundary with room on
 * the device gives them back, and moved back to the device (or live
 * granules moved out to host, for a shrink below the live bytes) by
 * bfc_rebalance.
 *
 * Invariants:
 *  - held + held_host + parked == sum of region sizes; in_use == sum of in-use chunk sizes;
 *    requested == sum of their requested sizes; live.count == in-use chunks.
 *  - held <= limit, unless pending (a shrink is waiting for frees or for
 *    the next bfc_rebalance).
 *  - hostmap (NULL without host backing) has one byte per granule of the
 *    backend's range, 1 iff that granule lies in a region and is backed by
 *    host memory; held_host == granule * (bytes set); where the backend
 *    reports backing, it agrees for every granule of every region.
 *  - host_in_use == sum of host_bytes; host_requested == sum of requested
 *    over the in-use chunks with host_bytes > 0.
 *  - bit b of bitmap is set iff bins[b] is non-empty; bit w of top is set
 *    iff bitmap[w] != 0.  Each bin's list is in (size, address) order and
 *    bin_tails[b] is its last chunk (NULL iff the bin is empty).  A bin in
 *    which an insert walked more than BFC_TREAP_WALK chunks gets a treap of
 *    the same chunks in bin_roots[b] (in-order: the list; each chunk's prio
 *    at most its children's), which then finds a chunk's place in O(log n);
 *    it is dropped when the bin empties (bin_roots[b] is NULL if bins[b] is).
 *  - Pause (bfc_pause): paused is 0, BFC_PAUSED_KEEP (every granule of
 *    every region host-backed) or BFC_PAUSED_DISCARD (every granule parked:
 *    held == held_host == 0, parked == sum of region sizes).  parked is 0
 *    unless paused is BFC_PAUSED_DISCARD.  A paused arena takes no
 *    allocation (the caller's duty); frees are fine.
 *  - others_held is set by the caller: device bytes held by other arenas
 *    that share this arena's limit (allocation tags, src/tags.c); growth and
 *    moves back to the device keep held + others_held <= limit.
 */
typedef struct bfc_arena {
    backend_t *backend;
    bfc_params_t params;
    size_t granule;
    size_t limit;
    int pending;
    size_t held, in_use, requested;
    size_t peak_held, peak_in_use;
    size_t held_host, peak_held_host;  /* host-backed granules in regions */
    size_t host_in_use, host_requested; /* live bytes on host; requested of blocks touching it */
    size_t peak_host_in_use;
    size_t host_limit;                 /* frees give free host memory back
                                          while held_host is above this */
    int hold_host;                     /* bfc_rebalance moves nothing back to the
                                          device (the placement planner keeps
                                          those blocks on host) */
    uint8_t *hostmap;
    size_t hostmap_len;
    uint64_t seq;                      /* allocations so far */
    uint64_t freed_seq;                /* seq of the block bfc_free freed last */
    uint64_t moved_to_host, moved_to_device; /* bytes moved by bfc_rebalance */
    size_t next_region;
    bfc_region_t *regions;      /* sorted by base */
    size_t nregions;
    bfc_chunk_t *bins[BFC_NBINS];
    bfc_chunk_t *bin_tails[BFC_NBINS]; /* each bin's last chunk (NULL: empty) */
    bfc_chunk_t *bin_roots[BFC_NBINS]; /* each long bin's treap (NULL: none) */
    uint64_t bitmap[BFC_NWORDS];
    uint64_t top;
    bfc_map_t live;
    bfc_chunk_t *pool;          /* unused chunk structs */
    void **slabs;               /* chunk slabs, for fini */
    size_t nslabs, slabs_cap;
    size_t nchunks_free;        /* free chunks in bins */
    uint64_t region_allocs, region_frees;
    uint64_t remaps;            /* free runs mapped again at the arena's end (bfc_remap) */
    size_t remapped;            /* bytes of those runs */
    uint64_t remap_misses;      /* bfc_remap calls that moved nothing (no whole free
                                   mapping below the tail, or the rest failed) */
    uint64_t remap_refused;     /* runs the backend refused (a big handle's alignment) */
    uint64_t trims;             /* growths that gave free memory back first */
    size_t trimmed;             /* bytes they gave back */
    size_t trim_from;           /* held before the last trim (0: none since) */
    size_t trim_floor;          /* trims keep held + growth at least this */
    int share_dedicated;        /* 1 while no limit was set (vmem.c): before
                                   growing, a request that no other free chunk
                                   fits may split a free chunk of a dedicated
                                   region, if the room under the limit could
                                   grow that chunk again (and params.growth.share) */
    bfc_fail_reason_t last_fail;
    size_t others_held;          /* device bytes of arenas sharing the limit */
    size_t parked;               /* bytes of parked granules (paused, discard) */
    int paused;                  /* 0, BFC_PAUSED_KEEP, BFC_PAUSED_DISCARD */
} bfc_arena_t;

#define BFC_PAUSED_KEEP 1
#define BFC_PAUSED_DISCARD 2

/* Rounds size up to BFC_ALIGN; returns 0 if size is 0 or rounding overflows. */
static inline size_t bfc_round(size_t size)
{
    if (size == 0 || size > SIZE_MAX - (BFC_ALIGN - 1))
        return 0;
    return (size + BFC_ALIGN - 1) & ~(size_t)(BFC_ALIGN - 1);
}

/* 1 if a request of size bytes could lie in arena a under its limit at all:
 * regions hold whole granules, so no chunk is larger than the limit rounded
 * down to them (with a limit that is no multiple of the granule, a request
 * within the limit can still be above that).  Neither a give-back nor a
 * remap can then make room: callers skip them. */
static inline int bfc_within_limit(const bfc_arena_t *a, size_t size)
{
    size_t rs = bfc_round(size), g = a->granule ? a->granule : 1;
    return rs != 0 && rs <= a->limit / g * g;
}

vmem_status_t bfc_init(bfc_arena_t *a, backend_t *b, const bfc_params_t *p, size_t limit);
/* Gives every region back and frees all metadata.  Returns the number of
 * blocks that were still live. */
size_t bfc_fini(bfc_arena_t *a);

/* Allocates; NULL on failure with a->last_fail set. */
void *bfc_alloc(bfc_arena_t *a, size_t size, uintptr_t stream);

/* Allocates exactly at addr (a multiple of BFC_ALIGN), splitting the free
 * chunk that holds [addr, addr + rounded size); on contiguous backends a
 * range beyond the arena's end, with only free memory between the end's
 * last live block and addr, is reached by growing.  NULL (a->last_fail set,
 * the arena unchanged but for such a growth) if the range is not free: the
 * caller then allocates as usual (the block layout planner, layout.h).
 * hint (0: none): the address of a live block near the range (best: one
 * ending at addr or starting at its end): the arena walks from it to the
 * chunk holding addr (a few chunks at most) before it scans its free bins;
 * the result does not depend on it. */
void *bfc_alloc_at(bfc_arena_t *a, size_t size, uintptr_t stream, uintptr_t addr, uintptr_t hint);

/* Frees the live block starting at p.  VMEM_ERR_FOREIGN_PTR if p is not the
 * start of a live block of this arena (the arena is unchanged).  *size gets
 * the block's rounded size. */
vmem_status_t bfc_free(bfc_arena_t *a, void *p, uintptr_t stream, size_t *size);

/* For a pointer that bfc_free rejected: VMEM_ERR_DOUBLE_FREE if it is a
 * 256-byte-aligned address inside a free chunk of this arena (a freed block
 * merges with its free neighbours, so its start may now lie inside a larger
 * free chunk), VMEM_ERR_FOREIGN_PTR otherwise (outside every region, or
 * inside a live block). */
vmem_status_t bfc_classify(const bfc_arena_t *a, const void *p);

/* 1 if p lies inside one of the arena's regions. */
int bfc_contains(const bfc_arena_t *a, const void *p);

/* Finds the live chunk containing p (NULL if none). */
const bfc_chunk_t *bfc_find_live(const bfc_arena_t *a, const void *p);

/* 1 if bfc_alloc(a, size, stream) would be served now without giving
 * memory back: a free chunk fits it, or the limit leaves room for a region
 * of its size.  0 otherwise (then bfc_alloc fails, and the caller's way out
 * is bfc_remap where it applies, else releasing free memory to map it again,
 * which waits for the device).  Changes nothing. */
int bfc_fits(const bfc_arena_t *a, size_t size, uintptr_t stream);

/* After bfc_alloc(a, size, 0) failed for the limit (BFC_FAIL_LIMIT) while
 * free memory lies in pieces: on backends with region_remap (vmm, sim-vmm),
 * moves whole free granules of the arena (largest holes first, from their
 * top, whole physical mappings, chunks without a stream key) to the end of
 * the arena, next to its free tail, until a free chunk fits the request.
 * Held bytes do not change and nothing waits for the device: the backend
 * keeps the old addresses mapped for the work queued before, as safe as
 * handing the free memory out directly to the one stream that used it, so
 * the caller (vmem.c) calls this only while a single stream allocates.
 * Returns 1 if a free chunk now fits the request, else 0 (what was moved
 * stays moved; the caller gives memory back the usual way). */
int bfc_remap(bfc_arena_t *a, size_t size, uintptr_t stream);

/* Sets the limit.  If held exceeds it, gives back empty regions (and, for
 * splittable backends, free granules) until held <= limit; if that is not
 * enough, the arena is left pending.  Returns VMEM_OK or VMEM_PENDING. */
vmem_status_t bfc_set_limit(bfc_arena_t *a, size_t limit);

/* Gives back empty regions (and free granules for splittable backends)
 * while held > target.  Returns the bytes given back. */
size_t bfc_release(bfc_arena_t *a, size_t target);

/* Host backing (a->hostmap != NULL).  Allocates in free host memory kept
 * from earlier spills, or else in new granules backed by host memory at
 * the end of the arena's range (at most host_room bytes of them), so the
 * block lies wholly on host memory.  Called when bfc_alloc failed,
 * after the caller waited for the work of every stream that freed memory
 * (free memory on host granules belongs to no stream).  NULL on failure
 * (a->last_fail set; BFC_FAIL_BACKEND without host backing). */
void *bfc_alloc_spill(bfc_arena_t *a, size_t size, uintptr_t stream, size_t host_room);

typedef struct bfc_moves {
    size_t to_host;       /* live granules evicted to host memory */
    size_t to_device;     /* host-backed granules moved back to the device */
    size_t host_released; /* free host memory given back */
} bfc_moves_t;

/* The step-boundary move (host backing only; VMEM_OK and nothing done
 * otherwise).  If the arena holds more device memory than the limit (a
 * pending shrink), it gives back free device granules and evicts live
 * granules to host memory (oldest allocations first, at most host_room
 * bytes; none if host_room is under a granule: the shrink then waits for
 * frees) until held <= limit, which clears pending; otherwise it moves the
 * host-backed granules that live blocks touch back to device memory as far
 * as the limit allows (giving back free device granules to make room;
 * everything at once in address order when it all fits, else oldest
 * allocations first; nothing while hold_host is set).  Free host memory is given back once all of the
 * arena's host memory would fit under the limit, and kept for the next
 * step's spills otherwise.  Addresses and contents never change.  Returns
 * the first backend failure (what was moved before it stays moved), else
 * VMEM_PENDING if the arena still holds more than the limit (no host room),
 * else VMEM_OK.  *moves (if not NULL) gets what was done. */
vmem_status_t bfc_rebalance(bfc_arena_t *a, size_t host_room, bfc_moves_t *moves);

/* Gives back every free host-backed granule (host backing only); returns
 * the bytes given back.  bfc_release gives back device memory only. */
size_t bfc_release_host(bfc_arena_t *a);

/* Bytes of [p, p + size) that lie on host-backed granules (0 without). */
size_t bfc_host_bytes(const bfc_arena_t *a, const void *p, size_t size);

/* The bytes bfc_move_live moves as one: the backend's growth alignment
 * (vmm: a big mapping, VMEM_VMM_BIG_MIB; moves of whole big mappings cost
 * one driver call per mapping instead of one per granule), else the
 * granule; 0 where nothing can move (no host backing in place). */
size_t bfc_move_unit(const bfc_arena_t *a);

/* Moves the whole move units inside the live block p to host memory
 * (to_host, at most host_room bytes) or back to the device (as far as the
 * limit allows, free device memory given back first for room), keeping
 * its address; the rest of the block stays where it is.  The backend
 * synchronises the device first: the caller must be at a point where no
 * graph capture runs.  *moves gets what moved.  VMEM_ERR_INVALID if p is
 * not a live block of the arena. */
vmem_status_t bfc_move_live(bfc_arena_t *a, const void *p, int to_host, size_t host_room,
                            bfc_moves_t *moves);

/* Sets every free chunk's stream key to 0 (any stream) and coalesces what
 * that allows. */
void bfc_clear_streams(bfc_arena_t *a);

/* Pauses the arena (host backing with park support only, else
 * VMEM_ERR_UNSUPPORTED): gives back every free granule, then moves every
 * remaining granule to host memory at the same address (keep: contents
 * kept; at most host_room bytes, else VMEM_ERR_NOMEM with nothing moved) or
 * parks it (discard: device and host memory given back, addresses kept).
 * Afterwards held == 0.  On a backend failure the granules moved so far are
 * moved back (keep) or unparked to the device (discard) and the arena is as
 * before, less its free memory.  Pausing a paused arena: discard over keep
 * drops the host copy; otherwise VMEM_OK and nothing done.  The device must
 * not be using the arena's memory.  *moves (if not NULL) gets the bytes. */
vmem_status_t bfc_pause(bfc_arena_t *a, int keep, size_t host_room, bfc_moves_t *moves);

/* Resumes a paused arena: maps device memory back at its addresses, as far
 * as held + others_held stays within the limit, restoring the contents
 * (keep) or leaving them undefined (discard).  If everything does not fit:
 * VMEM_ERR_NOMEM and nothing done, unless spill: then what does not fit
 * stays on (keep) or is mapped on (discard) host memory at the same
 * addresses, at most host_room bytes more (else VMEM_ERR_NOMEM, nothing
 * done).  A backend failure: discard: VMEM_ERR_BACKEND and still paused;
 * keep: the arena is resumed with what did not move left on host memory
 * (contents intact), and the failure is returned.  VMEM_OK and nothing done
 * if the arena is not paused. */
vmem_status_t bfc_resume(bfc_arena_t *a, int spill, size_t host_room, bfc_moves_t *moves);

/* Verifies every invariant; on failure writes the first broken one into
 * why (if not NULL) and returns VMEM_ERR_INVALID. */
vmem_status_t bfc_check(const bfc_arena_t *a, char *why, size_t len);

/* Bin index of a size (exposed for tests). */
unsigned bfc_bin_index(size_t size);

#endif
