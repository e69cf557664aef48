/*
 * Deferred frees (deferred.h): fences recorded for live blocks, and freed
 * blocks waiting for them.
 */
#include "deferred.h"

#include <stdlib.h>
#include <string.h>

#include "vmem_internal.h"

#define POOL_MAX 1024 /* spare fences kept; more are destroyed */

static char sim_fence; /* every simulated fence: done only once waited for */

/* -- fences ----------------------------------------------------------------- */

static void fence_put(deferred_t *d, void *f);

/* Records fence (NULL: a spare one, or a new one) on stream.  The fence,
 * or NULL if it could not be recorded (a fence passed in then keeps its
 * earlier record and stays the caller's). */
static void *fence_record(deferred_t *d, void *fence, void *stream)
{
    if (!d->real)
        return &sim_fence;
    int spare = 0;
    if (!fence && d->npool) {
        fence = d->pool[--d->npool];
        spare = 1;
    }
    void *f = fence;
    if (backend_fence_record(&f, stream, d->device) != 0) {
        if (f && f != fence)
            backend_fence_destroy(f); /* created here, then refused the record */
        else if (spare)
            fence_put(d, f);
        return NULL;
    }
    return f;
}

static int fence_done(const deferred_t *d, void *f)
{
    return d->real ? backend_fence_done(f) : 0;
}

static void fence_put(deferred_t *d, void *f)
{
    if (!d->real || !f)
        return;
    if (d->npool == d->pool_cap && d->pool_cap < POOL_MAX) {
        size_t cap = d->pool_cap ? d->pool_cap * 2 : 16;
        void **p = realloc(d->pool, cap * sizeof *p);
        if (p) {
            d->pool = p;
            d->pool_cap = cap;
        }
    }
    if (d->npool < d->pool_cap)
        d->pool[d->npool++] = f;
    else
        backend_fence_destroy(f);
}

/* -- the map ---------------------------------------------------------------- */

static size_t slot_of(const deferred_t *d, uintptr_t ptr)
{
    uint64_t h = (uint64_t)(ptr >> 8) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (d->cap - 1);
}

static defer_entry_t *find(const deferred_t *d, uintptr_t ptr)
{
    if (!d->cap)
        return NULL;
    for (size_t i = slot_of(d, ptr);; i = (i + 1) & (d->cap - 1)) {
        if (d->map[i].ptr == ptr)
            return &d->map[i];
        if (d->map[i].ptr == 0)
            return NULL;
    }
}

const defer_entry_t *deferred_find(const deferred_t *d, uintptr_t ptr) { return find(d, ptr); }

static int map_grow(deferred_t *d)
{
    size_t cap = d->cap ? d->cap * 2 : 64;
    defer_entry_t *m = calloc(cap, sizeof *m);
    if (!m)
        return -1;
    defer_entry_t *old = d->map;
    size_t ocap = d->cap;
    d->map = m;
    d->cap = cap;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].ptr)
            continue;
        size_t j = slot_of(d, old[i].ptr);
        while (m[j].ptr)
            j = (j + 1) & (cap - 1);
        m[j] = old[i];
    }
    free(old);
    return 0;
}

/* A new entry for ptr (not in the map), or NULL without memory. */
static defer_entry_t *map_add(deferred_t *d, uintptr_t ptr)
{
    if ((d->count + 1) * 2 > d->cap && map_grow(d) != 0)
        return NULL;
    size_t i = slot_of(d, ptr);
    while (d->map[i].ptr)
        i = (i + 1) & (d->cap - 1);
    memset(&d->map[i], 0, sizeof d->map[i]);
    d->map[i].ptr = ptr;
    d->count++;
    return &d->map[i];
}

/* Removes e (in the map) by shifting back the entries of its probe run. */
static void map_del(deferred_t *d, const defer_entry_t *e)
{
    size_t i = (size_t)(e - d->map), mask = d->cap - 1;
    for (size_t j = (i + 1) & mask; d->map[j].ptr; j = (j + 1) & mask) {
        size_t home = slot_of(d, d->map[j].ptr);
        /* j's entry may move to i if its home is not in (i, j] (cyclically) */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            d->map[i] = d->map[j];
            i = j;
        }
    }
    d->map[i].ptr = 0;
    d->count--;
}

/* -- the queue -------------------------------------------------------------- */

static int queue_push(deferred_t *d, uintptr_t ptr)
{
    if (d->qlen == d->qcap) {
        size_t cap = d->qcap ? d->qcap * 2 : 64;
        uintptr_t *q = malloc(cap * sizeof *q);
        if (!q)
            return -1;
        for (size_t i = 0; i < d->qlen; i++)
            q[i] = d->queue[(d->qhead + i) % d->qcap];
        free(d->queue);
        d->queue = q;
        d->qcap = cap;
        d->qhead = 0;
    }
    d->queue[(d->qhead + d->qlen) % d->qcap] = ptr;
    d->qlen++;
    return 0;
}

/* -- entry points ------------------------------------------------------------ */

void deferred_init(deferred_t *d, int real, int device)
{
    memset(d, 0, sizeof *d);
    d->real = real;
    d->device = device;
}

void deferred_fini(deferred_t *d)
{
    for (size_t i = 0; i < d->cap; i++)
        for (int k = 0; d->map[i].ptr && k < d->map[i].nfence; k++)
            if (d->real)
                backend_fence_destroy(d->map[i].fence[k]);
    for (size_t i = 0; i < d->npool; i++)
        backend_fence_destroy(d->pool[i]);
    free(d->map);
    free(d->queue);
    free(d->pool);
    memset(d, 0, sizeof *d);
}

/* Drops e's fences that are done (kept in order). */
static void drop_done(deferred_t *d, defer_entry_t *e)
{
    int n = 0;
    for (int k = 0; k < e->nfence; k++) {
        if (fence_done(d, e->fence[k])) {
            fence_put(d, e->fence[k]);
        } else {
            e->stream[n] = e->stream[k];
            e->fence[n++] = e->fence[k];
        }
    }
    e->nfence = n;
}

/* The CPU waits for e's fences (a recorded, not freed entry), and e goes. */
static void wait_drop(deferred_t *d, defer_entry_t *e)
{
    for (int k = 0; k < e->nfence; k++) {
        if (d->real)
            backend_fence_wait(e->fence[k]);
        fence_put(d, e->fence[k]);
    }
    if (e->nfence)
        d->cpu_waits++;
    map_del(d, e);
}

int deferred_record(deferred_t *d, uintptr_t ptr, void *stream)
{
    defer_entry_t *e = find(d, ptr);
    if (e) {
        /* The same stream again: its fence moves to the later point. */
        for (int k = 0; k < e->nfence; k++) {
            if (e->stream[k] != stream)
                continue;
            return fence_record(d, e->fence[k], stream) ? 0 : -1;
        }
        drop_done(d, e);
        if (e->nfence == DEFER_FENCES) { /* full: the oldest is waited for */
            if (d->real)
                backend_fence_wait(e->fence[0]);
            fence_put(d, e->fence[0]);
            memmove(&e->fence[0], &e->fence[1], (DEFER_FENCES - 1) * sizeof e->fence[0]);
            memmove(&e->stream[0], &e->stream[1], (DEFER_FENCES - 1) * sizeof e->stream[0]);
            e->nfence--;
            d->cpu_waits++;
        }
    }
    void *f = fence_record(d, NULL, stream);
    if (!f)
        return -1;
    if (!e && !(e = map_add(d, ptr))) {
        fence_put(d, f);
        return -1;
    }
    e->stream[e->nfence] = stream;
    e->fence[e->nfence++] = f;
    return 0;
}

int deferred_free(deferred_t *d, uintptr_t ptr, int arena, uintptr_t key,
                  const defer_entry_t *sizes)
{
    defer_entry_t *e = find(d, ptr);
    if (!e)
        return 0;
    drop_done(d, e);
    if (e->nfence == 0 || queue_push(d, ptr) != 0) {
        wait_drop(d, e); /* done, or no memory to queue it: the CPU waits now */
        return 0;
    }
    e->freed = 1;
    e->arena = arena;
    e->key = key;
    e->dev = sizes->dev;
    e->host = sizes->host;
    e->req_dev = sizes->req_dev;
    e->req_host = sizes->req_host;
    d->dev_bytes += e->dev;
    d->host_bytes += e->host;
    d->dev_requested += e->req_dev;
    d->host_requested += e->req_host;
    d->deferred++;
    d->deferred_bytes += e->dev + e->host;
    return 1;
}

void deferred_wait_drop(deferred_t *d, uintptr_t ptr)
{
    defer_entry_t *e = find(d, ptr);
    if (!e || e->freed)
        return;
    drop_done(d, e);
    wait_drop(d, e);
}

int deferred_pop(deferred_t *d, defer_how_t how, void *stream, defer_entry_t *out)
{
    if (!d->qlen)
        return 0;
    defer_entry_t *e = find(d, d->queue[d->qhead]);
    drop_done(d, e);
    if (e->nfence && how == DEFER_DONE)
        return 0;
    if (e->nfence) {
        int queued = how == DEFER_STREAM;
        for (int k = 0; k < e->nfence && d->real; k++)
            if (!queued || backend_fence_stream_wait(e->fence[k], stream) != 0) {
                queued = 0;
                backend_fence_wait(e->fence[k]);
            }
        /* fences are reused only after the waits: a wait queued on a stream
         * takes the fence's state when it is queued */
        for (int k = 0; k < e->nfence; k++)
            fence_put(d, e->fence[k]);
        if (queued)
            d->stream_waits++;
        else
            d->cpu_waits++;
    } else {
        d->done++;
    }
    *out = *e;
    out->nfence = 0;
    d->dev_bytes -= e->dev;
    d->host_bytes -= e->host;
    d->dev_requested -= e->req_dev;
    d->host_requested -= e->req_host;
    map_del(d, e);
    d->qhead = (d->qhead + 1) % d->qcap;
    d->qlen--;
    return 1;
}
