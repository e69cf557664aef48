/*
 * CUDA graph capture and the PyTorch adapter (src/capture.c).
 *
 * PyTorch's pluggable allocator hands every free straight to libvmem, also
 * the frees of a graph's temporaries during capture.  A graph replays into
 * those addresses later, so they must neither go to another allocation nor
 * be given back (a pause gives back free memory: the replay would fault).
 * The graph pool keeps them: a block allocated while its stream captures
 * belongs to that capture; freed, it stays allocated in libvmem and only
 * later allocations of the same capture (same tag) reuse it, as PyTorch's
 * own private graph pools do.  vmem_torch_graph_release() gives the freed
 * ones back once the graphs are destroyed.
 *
 * capture_enter/leave bracket an allocator call made on a capturing
 * stream: the thread's capture mode is relaxed (cudaMalloc and cuMemCreate
 * are forbidden in the default global mode) and the backends are told not
 * to wait for the device (backend_capture_begin).  Not installed.
 */
#ifndef VMEM_CAPTURE_H
#define VMEM_CAPTURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gpool_block {
    uintptr_t p;
    size_t size;   /* as allocated from libvmem */
    uint64_t id;   /* the capture that allocated it */
    unsigned tag;
    int live;      /* 1: handed to PyTorch, 0: freed, kept for its capture */
} gpool_block_t;

/* Invariants: b[0..n) sorted by p, distinct; freed_bytes is the sum of
 * size over the blocks with live 0; n_atomic mirrors n (read without the
 * lock by gpool_free's fast path). */
typedef struct gpool {
    pthread_mutex_t lock;
    gpool_block_t *b;
    size_t n, cap, freed_bytes;
    _Atomic size_t n_atomic;
} gpool_t;

void gpool_init(gpool_t *g);
void gpool_fini(gpool_t *g); /* forgets the blocks (does not free them) */
/* A freed block of capture id and tag with size >= size (the smallest),
 * now live again; NULL if none. */
void *gpool_take(gpool_t *g, uint64_t id, unsigned tag, size_t size);
/* Records a block allocated during capture id.  0, or -1 (no memory). */
int gpool_add(gpool_t *g, void *p, size_t size, uint64_t id, unsigned tag);
/* 1 if p is a live block of the pool (now kept as freed), -1 if it is a
 * freed one (a double free), 0 if it is not the pool's. */
int gpool_free(gpool_t *g, void *p);
/* Forgets every freed block, calling give(ctx, p) on each; returns their
 * bytes. */
size_t gpool_release(gpool_t *g, void (*give)(void *ctx, void *p), void *ctx);
/* Live and freed bytes held. */
void gpool_bytes(gpool_t *g, size_t *live, size_t *freed);

typedef struct capture_scope {
    int active;     /* 1: the stream was capturing */
    uint64_t id;    /* its capture's id */
    int prev_flag;  /* backend_capture_begin's previous mark */
    int mode;       /* the thread's previous capture mode */
} capture_scope_t;

/* If stream is capturing: relaxed capture mode, backends marked, s->active
 * 1 and s->id set; returns s->active.  NULL and the legacy streams are
 * never queried (querying them during a capture breaks it). */
int capture_enter(void *stream, capture_scope_t *s);
void capture_leave(capture_scope_t *s);

/* Tests: replaces the capture query (NULL: the driver's).  fn returns 1
 * and sets *id when stream captures. */
void capture_set_query(int (*fn)(void *stream, uint64_t *id));

#endif
