/*
 * Deferred frees: blocks whose memory other streams' work still reads when the
 * program frees them (vmem_record_stream; docs/design.md, "Deferred frees").
 *
 * vmem_record_stream records a fence (a CUDA event) on a stream for a live
 * block.  When the block is freed while a fence of it is not done, it is not
 * given to the arena: it waits here, in free order, counted out of the bytes
 * in use but still held.  vmem.c gives it back to the arena when its fences
 * are done (a query, at allocations), or, when an allocation needs the
 * memory, after making the allocating stream wait for them (no CPU wait) or,
 * where that cannot be done, after waiting on the CPU.
 *
 * On simulated devices nothing runs asynchronously, but fences are still
 * kept so that the order is observable: a simulated fence is done only once
 * something waited for it.
 *
 * Invariants: every entry in the map is a live block of the device (arena 0)
 * or host (arena 1) arena, recorded (freed 0) or waiting (freed 1); the
 * queue holds the waiting ones' addresses in free order, each once;
 * dev_bytes, host_bytes, dev_requested and host_requested are the sums of
 * the waiting entries' dev, host, req_dev and req_host.
 */
#ifndef VMEM_DEFERRED_H
#define VMEM_DEFERRED_H

#include <stddef.h>
#include <stdint.h>

#define DEFER_FENCES 4 /* streams recorded per block; a fifth waits for the oldest */

typedef struct defer_entry {
    uintptr_t ptr;              /* 0: an empty map slot */
    void *fence[DEFER_FENCES];
    void *stream[DEFER_FENCES]; /* the stream each fence was recorded on */
    int nfence;
    int freed;                  /* 1: the program freed it; waiting in the queue */
    int arena;                  /* 0 device arena, 1 host arena */
    uintptr_t key;              /* the free's stream key */
    size_t dev, host;           /* its bytes on device and host memory */
    size_t req_dev, req_host;   /* the bytes asked for it, on device or on host */
} defer_entry_t;

typedef struct deferred {
    int real;                   /* fences are CUDA events; else simulated */
    int device;
    defer_entry_t *map;         /* open addressing by ptr, linear probing */
    size_t cap, count;          /* cap a power of two (or 0); count <= cap / 2 */
    uintptr_t *queue;           /* waiting blocks, oldest at head */
    size_t qcap, qhead, qlen;   /* a ring */
    void **pool;                /* spare fences (real ones: CUDA events) */
    size_t npool, pool_cap;
    size_t dev_bytes, host_bytes;
    size_t dev_requested, host_requested;
    /* statistics */
    uint64_t deferred;          /* frees that had to wait */
    uint64_t deferred_bytes;    /* their bytes */
    uint64_t done;              /* given back because their fences were done */
    uint64_t stream_waits;      /* given back after a wait queued on a stream */
    uint64_t cpu_waits;         /* given back after the CPU waited */
} deferred_t;

/* How deferred_pop may give back the oldest waiting block. */
typedef enum defer_how {
    DEFER_DONE,     /* only if its fences are done */
    DEFER_STREAM,   /* its fences waited for by stream (the CPU waits if that fails) */
    DEFER_CPU,      /* the CPU waits for its fences */
} defer_how_t;

void deferred_init(deferred_t *d, int real, int device);
/* Destroys every fence; the entries must have been popped (deferred_pop) or
 * are forgotten. */
void deferred_fini(deferred_t *d);

/* Records a fence on stream for the live block at ptr.  0, or -1 when no
 * fence could be recorded (nothing changed: the caller must not rely on a
 * deferral, and returns an error). */
int deferred_record(deferred_t *d, uintptr_t ptr, void *stream);

/* The entry of ptr, or NULL. */
const defer_entry_t *deferred_find(const deferred_t *d, uintptr_t ptr);

/* At the free of the live block at ptr: 1 if it must wait (its entry is now
 * freed, with arena, key and the sizes of *sizes, and queued), 0 if it had
 * no entry or all its fences were done (the entry is dropped: free it now).
 * sizes: an entry with dev, host, req_dev and req_host set. */
int deferred_free(deferred_t *d, uintptr_t ptr, int arena, uintptr_t key,
                  const defer_entry_t *sizes);

/* At the free of the recorded live block at ptr that must not wait (a
 * shrink is pending): the CPU waits for its fences and the record goes. */
void deferred_wait_drop(deferred_t *d, uintptr_t ptr);

/* Removes the oldest waiting block if `how` allows, copying its entry to
 * *out.  1 if one was removed (the caller gives it to its arena), else 0. */
int deferred_pop(deferred_t *d, defer_how_t how, void *stream, defer_entry_t *out);

/* Waiting blocks (deferred_pop would find one). */
static inline size_t deferred_waiting(const deferred_t *d) { return d->qlen; }

#endif
