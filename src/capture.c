/* CUDA graph capture and the PyTorch adapter: the graph pool and the
 * capture scope (see capture.h). */
#include "capture.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#ifdef VMEM_HAVE_CUDA
#include "cuda_driver.h"
#endif

void gpool_init(gpool_t *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->lock, NULL);
}

void gpool_fini(gpool_t *g)
{
    free(g->b);
    pthread_mutex_destroy(&g->lock);
    memset(g, 0, sizeof *g);
}

/* Index of the first block with p >= key. */
static size_t lower(const gpool_t *g, uintptr_t key)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->b[mid].p < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void *gpool_take(gpool_t *g, uint64_t id, unsigned tag, size_t size)
{
    if (!atomic_load(&g->n_atomic))
        return NULL;
    pthread_mutex_lock(&g->lock);
    gpool_block_t *best = NULL;
    for (size_t i = 0; i < g->n; i++) {
        gpool_block_t *b = &g->b[i];
        if (!b->live && b->id == id && b->tag == tag && b->size >= size &&
            (!best || b->size < best->size))
            best = b;
    }
    void *p = NULL;
    if (best) {
        best->live = 1;
        g->freed_bytes -= best->size;
        p = (void *)best->p;
    }
    pthread_mutex_unlock(&g->lock);
    return p;
}

int gpool_add(gpool_t *g, void *p, size_t size, uint64_t id, unsigned tag)
{
    pthread_mutex_lock(&g->lock);
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 64;
        gpool_block_t *q = realloc(g->b, cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&g->lock);
            return -1;
        }
        g->b = q;
        g->cap = cap;
    }
    size_t i = lower(g, (uintptr_t)p);
    memmove(g->b + i + 1, g->b + i, (g->n - i) * sizeof *g->b);
    g->b[i] = (gpool_block_t){(uintptr_t)p, size, id, tag, 1};
    g->n++;
    atomic_store(&g->n_atomic, g->n);
    pthread_mutex_unlock(&g->lock);
    return 0;
}

int gpool_free(gpool_t *g, void *p)
{
    if (!atomic_load(&g->n_atomic))
        return 0;
    pthread_mutex_lock(&g->lock);
    size_t i = lower(g, (uintptr_t)p);
    int r = 0;
    if (i < g->n && g->b[i].p == (uintptr_t)p) {
        if (g->b[i].live) {
            g->b[i].live = 0;
            g->freed_bytes += g->b[i].size;
            r = 1;
        } else {
            r = -1;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return r;
}

size_t gpool_release(gpool_t *g, void (*give)(void *ctx, void *p), void *ctx)
{
    pthread_mutex_lock(&g->lock);
    size_t bytes = 0, k = 0;
    void **out = NULL;
    size_t nout = 0;
    for (size_t i = 0; i < g->n; i++)
        nout += !g->b[i].live;
    if (nout)
        out = malloc(nout * sizeof *out);
    nout = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (g->b[i].live || !out) {
            g->b[k++] = g->b[i];
            continue;
        }
        bytes += g->b[i].size;
        out[nout++] = (void *)g->b[i].p;
    }
    g->n = k;
    g->freed_bytes -= bytes;
    atomic_store(&g->n_atomic, g->n);
    pthread_mutex_unlock(&g->lock);
    /* Given back outside the lock: give takes the instance's lock. */
    for (size_t i = 0; i < nout; i++)
        give(ctx, out[i]);
    free(out);
    return bytes;
}

void gpool_bytes(gpool_t *g, size_t *live, size_t *freed)
{
    pthread_mutex_lock(&g->lock);
    size_t all = 0;
    for (size_t i = 0; i < g->n; i++)
        all += g->b[i].size;
    *freed = g->freed_bytes;
    *live = all - g->freed_bytes;
    pthread_mutex_unlock(&g->lock);
}

static int (*query_override)(void *stream, uint64_t *id);

void capture_set_query(int (*fn)(void *stream, uint64_t *id)) { query_override = fn; }

static int stream_capturing(void *stream, uint64_t *id)
{
    if (query_override)
        return query_override(stream, id);
#ifdef VMEM_HAVE_CUDA
    /* CU_STREAM_LEGACY (1), CU_STREAM_PER_THREAD (2), NULL: never queried. */
    if ((uintptr_t)stream <= 2)
        return 0;
    const cu_driver_t *cu = cu_driver();
    if (!cu)
        return 0;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    if (cu->StreamGetCaptureInfo((CUstream)stream, &st, &cid, NULL, NULL, NULL) != CUDA_SUCCESS)
        return 0;
    *id = cid;
    return st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
#else
    (void)id;
    return 0;
#endif
}

int capture_enter(void *stream, capture_scope_t *s)
{
    memset(s, 0, sizeof *s);
    if (!stream_capturing(stream, &s->id))
        return 0;
    s->active = 1;
    s->prev_flag = backend_capture_begin(1);
#ifdef VMEM_HAVE_CUDA
    const cu_driver_t *cu = query_override ? NULL : cu_driver();
    if (cu) {
        CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
        if (cu->ThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS)
            s->mode = (int)m + 1; /* 0: nothing to restore */
    }
#endif
    return 1;
}

void capture_leave(capture_scope_t *s)
{
    if (!s->active)
        return;
#ifdef VMEM_HAVE_CUDA
    if (s->mode) {
        CUstreamCaptureMode m = (CUstreamCaptureMode)(s->mode - 1);
        cu_driver()->ThreadExchangeStreamCaptureMode(&m);
    }
#endif
    backend_capture_begin(s->prev_flag);
    s->active = 0;
}
