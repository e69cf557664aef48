/* Allocation tags, pause and resume (docs/tags.md).
 *
 * Each tag other than 0 has a device arena of its own over the instance's
 * device backend: its regions are granule-aligned ranges of the backend, so
 * a granule never holds blocks of two tags, and free chunks of one tag sit
 * in that tag's bins only.  Tag 0 is the instance's device arena (v->dev).
 * The device limit caps all of them together: every arena's others_held is
 * the device memory the other arenas hold, and growth keeps
 * held + others_held within the limit.  Pausing a tag is bfc_pause on its
 * arena; resuming, bfc_resume.
 *
 * All functions run under the instance's lock unless said otherwise.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmem_internal.h"

/* One tag's arena and counters.  Invariant: arena.limit == v->dev.limit
 * (set at creation and by tags_limit_changed). */
typedef struct tag_arena {
    unsigned tag;
    bfc_arena_t arena;
    uint64_t allocs, frees, pauses, resumes;
    uint64_t bytes_to_host, bytes_to_device;
    double last_pause_seconds, last_resume_seconds;
} tag_arena_t;

/* Invariant: t[0..n) are distinct tags other than 0, in creation order. */
struct tags {
    tag_arena_t *t[VMEM_MAX_TAGS];
    int n;
};

/* ------------------------------------------------------------------------ */
/* Lookup and limit sharing                                                 */
/* ------------------------------------------------------------------------ */

static tag_arena_t *tag_find(const vmem_t *v, unsigned tag)
{
    if (!v->tags)
        return NULL;
    for (int i = 0; i < v->tags->n; i++)
        if (v->tags->t[i]->tag == tag)
            return v->tags->t[i];
    return NULL;
}

/* The tag's arena, made on first use; NULL (*st set) if there is no room
 * for another tag or no memory. */
static tag_arena_t *tag_get(vmem_t *v, unsigned tag, vmem_status_t *st)
{
    tag_arena_t *t = tag_find(v, tag);
    if (t)
        return t;
    if (!v->tags && !(v->tags = calloc(1, sizeof *v->tags))) {
        *st = VMEM_ERR_NOMEM;
        return NULL;
    }
    if (v->tags->n == VMEM_MAX_TAGS) {
        *st = VMEM_ERR_INVALID;
        return NULL;
    }
    t = calloc(1, sizeof *t);
    if (!t || bfc_init(&t->arena, v->dev_backend, &v->dev.params, v->dev.limit) != VMEM_OK) {
        free(t);
        *st = VMEM_ERR_NOMEM;
        return NULL;
    }
    t->tag = tag;
    t->arena.host_limit = v->dev.host_limit;
    v->tags->t[v->tags->n++] = t;
    return t;
}

static size_t tags_held(const vmem_t *v)
{
    size_t n = 0;
    for (int i = 0; v->tags && i < v->tags->n; i++)
        n += v->tags->t[i]->arena.held;
    return n;
}

/* Brings every arena's others_held up to date.  v->dev's is kept current
 * by every change to a tag arena (tags_check verifies it); a tag arena's is
 * refreshed before each use, since tag 0's allocations change it. */
static void tags_sync(vmem_t *v)
{
    size_t all = v->dev.held + tags_held(v);
    v->dev.others_held = all - v->dev.held;
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        bfc_arena_t *a = &v->tags->t[i]->arena;
        a->others_held = all - a->held;
    }
}

/* ------------------------------------------------------------------------ */
/* The calling thread's tag                                                 */
/* ------------------------------------------------------------------------ */

unsigned tags_current(vmem_t *v)
{
    if (!atomic_load_explicit(&v->tag_key_made, memory_order_acquire))
        return 0;
    return (unsigned)(uintptr_t)pthread_getspecific(v->tag_key);
}

vmem_status_t vmem_set_tag(vmem_t *v, unsigned tag, unsigned *previous)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    if (!atomic_load(&v->tag_key_made)) {
        vmem_lock(&v->lock);
        int ok = atomic_load(&v->tag_key_made) || pthread_key_create(&v->tag_key, NULL) == 0;
        if (ok)
            atomic_store(&v->tag_key_made, 1);
        vmem_unlock(&v->lock);
        if (!ok) {
            vmem_log(v, VMEM_LOG_ERROR, "vmem_set_tag: no thread-local key left");
            return VMEM_ERR_NOMEM;
        }
    }
    unsigned old = tags_current(v);
    if (pthread_setspecific(v->tag_key, (void *)(uintptr_t)tag) != 0)
        return VMEM_ERR_NOMEM;
    if (previous)
        *previous = old;
    return VMEM_OK;
}

unsigned vmem_get_tag(vmem_t *v) { return v ? tags_current(v) : 0; }

/* ------------------------------------------------------------------------ */
/* Alloc / free                                                             */
/* ------------------------------------------------------------------------ */

/* Gives back free device memory of every arena that is not paused (the
 * failing allocation's own first); returns the bytes. */
static size_t tags_release_all(vmem_t *v, bfc_arena_t *own)
{
    size_t n = bfc_release(own, 0);
    if (!v->dev.pending)
        n += bfc_release(&v->dev, 0);
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        bfc_arena_t *a = &v->tags->t[i]->arena;
        if (a != own && !a->paused)
            n += bfc_release(a, 0);
    }
    tags_sync(v);
    return n;
}

/* The device room the arenas together leave under the shared limit, in
 * whole granules (what an arena can grow or map into; all arenas share the
 * backend's granule). */
static size_t tags_room(const vmem_t *v)
{
    size_t all = v->dev.held + tags_held(v), g = v->dev.granule;
    return v->dev.limit > all ? (v->dev.limit - all) / g * g : 0;
}

/* 1 while that room is less than `need` bytes. */
static int tags_short(const vmem_t *v, size_t need) { return tags_room(v) < need; }

/* The main arena's blocks that wait for other streams' work (deferred.h:
 * freed after vmem_record_stream) hold device memory under the shared limit
 * that no arena can use.  For a tag that needs `need` bytes of device room
 * under the limit and did not find them even after tags_release_all (an
 * allocation, a resume, a step end's move of host data back): they go back
 * to their arena, oldest first, the CPU waiting for their fences
 * (vmem_deferred_reclaim_cpu), as many as could cover what the limit lacks
 * for `need` (at least one); then the main arena gives its free memory back
 * to the backend and every arena's others_held is brought up to date, so the
 * tag can grow or map into that memory.  Nothing while a graph is captured
 * or while the main arena's shrink is pending (it gives nothing back then).
 * 1 if a block went back: the caller looks again and calls again while it
 * still lacks room (a block freed on a granule or region that still holds
 * live blocks gives nothing back); 0 once none can. */
static int tags_reclaim_deferred(vmem_t *v, size_t need)
{
    if (v->dev.pending || !deferred_waiting(&v->deferred) || backend_capturing())
        return 0;
    size_t want = tags_room(v), got = 0, dev;
    want = need > want ? need - want : 1;
    int any = 0;
    while (got < want && vmem_deferred_reclaim_cpu(v, &dev)) {
        got += dev;
        any = 1;
    }
    if (!any)
        return 0;
    bfc_release(&v->dev, 0);
    tags_sync(v);
    return 1;
}

/* tags_reclaim_deferred while the room under the shared limit is less than
 * `need` bytes and blocks still go back. */
static void tags_reclaim_for(vmem_t *v, size_t need)
{
    while (tags_short(v, need) && tags_reclaim_deferred(v, need))
        ;
}

/* Device bytes a tag's move of host data back (bfc_rebalance, and
 * bfc_resume after keep) needs: the host-backed granules its live blocks
 * touch, each once.  After a discard (bfc_resume maps the regions that
 * still hold live blocks): those regions' bytes. */
static size_t tag_host_need(const bfc_arena_t *a)
{
    size_t g = a->granule, n = 0;
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        if (a->paused == BFC_PAUSED_DISCARD) {
            n += r->live ? r->size : 0;
            continue;
        }
        uintptr_t done = r->base; /* granules below are counted */
        for (const bfc_chunk_t *c = r->first; c; c = c->next) {
            if (!c->in_use)
                continue;
            uintptr_t lo = c->addr / g * g, hi = (c->addr + c->size + g - 1) / g * g;
            lo = lo > done ? lo : done;
            if (hi > lo)
                n += bfc_host_bytes(a, (const void *)lo, hi - lo);
            done = hi > done ? hi : done;
        }
    }
    return n;
}

/* Allocates in t's arena; *spilled: 1 if host memory served it.  The
 * caller counts a failure. */
static void *tag_alloc_locked(vmem_t *v, tag_arena_t *t, size_t size, uintptr_t key,
                              vmem_status_t *st, int *spilled)
{
    bfc_arena_t *a = &t->arena;
    if (a->paused) {
        *st = VMEM_ERR_BUSY;
        return NULL;
    }
    tags_sync(v);
    void *p = bfc_alloc(a, size, key);
    /* Nothing is given back for a request larger than the shared limit
     * (device_alloc in vmem.c): it cannot fit. */
    if (!p && a->last_fail != BFC_FAIL_SIZE && bfc_within_limit(a, size)) {
        if (v->multi_stream && vmem_streams_settle(v))
            p = bfc_alloc(a, size, key);
        if (!p && tags_release_all(v, a) > 0)
            p = bfc_alloc(a, size, key);
        if (!p) { /* blocks waiting for other streams' work, until it fits */
            size_t g = a->granule, need = (bfc_round(size) + g - 1) / g * g;
            while (!p && a->last_fail != BFC_FAIL_SIZE && tags_reclaim_deferred(v, need))
                p = bfc_alloc(a, size, key);
        }
        if (!p && a->last_fail == BFC_FAIL_BACKEND && bfc_release_host(a) > 0)
            p = bfc_alloc(a, size, key);
    }
    if (!p && a->last_fail != BFC_FAIL_SIZE && v->host_fallback) {
        /* vmm, sim-vmm: host memory in the tag's own range; else the host arena. */
        p = a->hostmap ? bfc_alloc_spill(a, size, key, vmem_host_room(v))
                       : bfc_alloc(&v->host, size, key);
        *spilled = p != NULL;
    }
    tags_sync(v);
    if (!p) {
        *st = a->last_fail == BFC_FAIL_SIZE ? VMEM_ERR_SIZE : VMEM_ERR_NOMEM;
        return NULL;
    }
    v->allocs++;
    t->allocs++;
    if (*spilled) {
        v->spills++;
        v->spilled_bytes += size;
    }
    *st = VMEM_OK;
    return p;
}

void *tags_alloc(vmem_t *v, size_t size, void *stream, unsigned tag)
{
    vmem_status_t st = VMEM_ERR_SIZE;
    void *p = NULL;
    int spilled = 0;
    vmem_lock(&v->lock);
    if (bfc_round(size) != 0) {
        tag_arena_t *t = tag_get(v, tag, &st);
        if (t)
            p = tag_alloc_locked(v, t, size, vmem_stream_alloc_key(v, stream), &st, &spilled);
    }
    /* The events of vmem_alloc (vmem.h), fired outside the lock as there. */
    pending_event_t pe;
    pe.fn = NULL;
    if (!p) {
        v->failures++;
        vmem_event_prepare(v, &pe, VMEM_EVENT_ALLOC_FAILED);
        pe.ev.status = st;
    } else if (spilled) {
        vmem_event_prepare(v, &pe, VMEM_EVENT_SPILL);
    }
    pe.ev.size = size;
    vmem_unlock(&v->lock);
    vmem_set_last_status(st);
    if (!p)
        vmem_log(v, VMEM_LOG_WARN, "vmem_alloc(%zu) in tag %u: %s%s", size, tag,
                 vmem_strerror(st), st == VMEM_ERR_BUSY ? " (the tag is paused)" : "");
    vmem_event_fire(&pe);
    return p;
}

void *vmem_alloc_tagged(vmem_t *v, size_t size, unsigned tag)
{
    if (!v || tag != 0)
        return v ? tags_alloc(v, size, NULL, tag) : vmem_alloc(v, size);
    /* Tag 0 whatever the thread's tag. */
    unsigned cur = tags_current(v);
    if (cur)
        pthread_setspecific(v->tag_key, NULL);
    void *p = vmem_alloc(v, size);
    if (cur)
        pthread_setspecific(v->tag_key, (void *)(uintptr_t)cur);
    return p;
}

vmem_status_t tags_free(vmem_t *v, void *ptr, uintptr_t key)
{
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        tag_arena_t *t = v->tags->t[i];
        if (bfc_free(&t->arena, ptr, key, NULL) == VMEM_OK) {
            t->frees++;
            tags_sync(v);
            return VMEM_OK;
        }
    }
    return VMEM_ERR_FOREIGN_PTR;
}

vmem_status_t tags_classify(vmem_t *v, const void *ptr)
{
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        vmem_status_t st = bfc_classify(&v->tags->t[i]->arena, ptr);
        if (st != VMEM_ERR_FOREIGN_PTR)
            return st;
    }
    return VMEM_ERR_FOREIGN_PTR;
}

/* ------------------------------------------------------------------------ */
/* Pause / resume                                                           */
/* ------------------------------------------------------------------------ */

vmem_status_t vmem_host_reserve(vmem_t *v, size_t bytes, size_t *kept)
{
    size_t k = 0;
    if (!v)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    vmem_status_t st = backend_host_reserve(v->dev_backend, bytes, &k);
    vmem_unlock(&v->lock);
    if (kept)
        *kept = k;
    if (st == VMEM_ERR_UNSUPPORTED)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_host_reserve: not supported by the %s backend (vmm "
                 "with host memory in big handles only)", v->dev_backend->name);
    return st;
}

/* VMEM_PAUSE_GUARD, read at each pause: 1 if it turns the guard on.  A
 * value options_parse_bool refuses is logged and leaves the guard off. */
static int pause_guard(vmem_t *v)
{
    const char *g = getenv("VMEM_PAUSE_GUARD");
    int on = 0;
    if (g && *g && options_parse_bool(g, &on) != 0) {
        vmem_log(v, VMEM_LOG_ERROR,
                 "invalid VMEM_PAUSE_GUARD=\"%s\" (expected 0 or 1); the pause is not guarded", g);
        on = 0;
    }
    return on;
}

vmem_status_t vmem_pause(vmem_t *v, unsigned tag, unsigned flags)
{
    if (!v || tag == 0 || (flags != VMEM_PAUSE_KEEP && flags != VMEM_PAUSE_DISCARD)) {
        if (v && tag == 0)
            vmem_log(v, VMEM_LOG_ERROR, "vmem_pause: tag 0 (the default) cannot be paused");
        return VMEM_INVALID_ARG(v);
    }
    double t0 = vmem_now();
    int guard = pause_guard(v); /* read before the lock: it may log */
    vmem_lock(&v->lock);
    if (!(v->dev_backend->host_ops && v->dev_backend->host_ops->region_park && v->dev.hostmap)) {
        vmem_unlock(&v->lock);
        vmem_log(v, VMEM_LOG_ERROR, "vmem_pause: not supported by the %s backend (needs vmm with "
                 "host memory, or sim-vmm)", v->dev_backend->name);
        return VMEM_ERR_UNSUPPORTED;
    }
    vmem_status_t st = VMEM_OK;
    tag_arena_t *t = tag_get(v, tag, &st); /* a tag never used is paused too */
    bfc_moves_t m = {0};
    size_t kept = 0;
    if (t) {
        /* Free memory on streams is settled first, so all of it goes back. */
        if (v->multi_stream)
            vmem_streams_settle(v);
        /* The kept blocks fault on access until resumed. */
        t->arena.backend->move_guard = flags == VMEM_PAUSE_KEEP && guard;
        st = bfc_pause(&t->arena, flags == VMEM_PAUSE_KEEP, vmem_host_room(v), &m);
        t->arena.backend->move_guard = 0;
        tags_sync(v);
        if (st == VMEM_OK) {
            t->pauses++;
            t->bytes_to_host += m.to_host;
            t->last_pause_seconds = vmem_now() - t0;
        }
        kept = t->arena.held_host;
    }
    vmem_unlock(&v->lock);
    if (st != VMEM_OK)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_pause(tag %u, %s): %s", tag,
                 flags == VMEM_PAUSE_KEEP ? "keep" : "discard", vmem_strerror(st));
    else
        vmem_log(v, VMEM_LOG_INFO, "paused tag %u (%s): %zu bytes copied, %zu on host, %.1f ms",
                 tag, flags == VMEM_PAUSE_KEEP ? "keep" : "discard", m.to_host, kept,
                 (vmem_now() - t0) * 1e3);
    return st;
}

vmem_status_t vmem_resume_ex(vmem_t *v, unsigned tag, unsigned flags)
{
    if (!v || tag == 0 || (flags & ~VMEM_RESUME_SPILL))
        return VMEM_INVALID_ARG(v);
    double t0 = vmem_now();
    vmem_lock(&v->lock);
    tag_arena_t *t = tag_find(v, tag);
    vmem_status_t st = VMEM_OK;
    bfc_moves_t m = {0};
    if (t && t->arena.paused) {
        /* Free memory of the other tags (and tag 0) makes room first, then
         * tag 0's blocks waiting for other streams' work. */
        size_t need = t->arena.held_host + t->arena.parked;
        if (tags_short(v, need)) {
            tags_release_all(v, &t->arena);
            tags_reclaim_for(v, tag_host_need(&t->arena));
        }
        tags_sync(v);
        st = bfc_resume(&t->arena, (flags & VMEM_RESUME_SPILL) != 0, vmem_host_room(v), &m);
        tags_sync(v);
        if (!t->arena.paused) {
            t->resumes++;
            t->bytes_to_device += m.to_device;
            t->last_resume_seconds = vmem_now() - t0;
        }
    }
    size_t held = v->dev.held + tags_held(v), limit = v->dev.limit;
    vmem_unlock(&v->lock);
    if (st != VMEM_OK)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_resume(tag %u): %s (device holds %zu of limit %zu)", tag,
                 vmem_strerror(st), held, limit);
    return st;
}

vmem_status_t vmem_resume(vmem_t *v, unsigned tag) { return vmem_resume_ex(v, tag, 0); }

/* ------------------------------------------------------------------------ */
/* Hooks of the allocator                                                   */
/* ------------------------------------------------------------------------ */

size_t tags_held_host(const vmem_t *v)
{
    size_t n = 0;
    for (int i = 0; v->tags && i < v->tags->n; i++)
        n += v->tags->t[i]->arena.held_host;
    return n;
}

void tags_streams_cleared(vmem_t *v)
{
    for (int i = 0; v->tags && i < v->tags->n; i++)
        bfc_clear_streams(&v->tags->t[i]->arena);
    tags_sync(v);
}

void tags_step_end(vmem_t *v)
{
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        bfc_arena_t *a = &v->tags->t[i]->arena;
        if (a->paused || !a->host_in_use)
            continue;
        /* Live data on host: free memory elsewhere makes room for it, then
         * tag 0's blocks waiting for other streams' work.  The step end
         * still lets those wait when they lie on the device and no shrink
         * is pending (vmem.c, boundary_moves); here each goes back only
         * after the CPU waited for its work, so the main arena gives back
         * no memory another stream reads, and the move touches only the
         * tag's own blocks. */
        if (v->dev.held + tags_held(v) + a->held_host > a->limit) {
            tags_release_all(v, a);
            if (!a->pending && !a->hold_host)
                tags_reclaim_for(v, tag_host_need(a));
        }
        tags_sync(v);
        bfc_rebalance(a, v->host_fallback ? vmem_host_room(v) : 0, NULL);
    }
    tags_sync(v);
}

vmem_status_t tags_limit_changed(vmem_t *v, size_t limit)
{
    if (!v->tags)
        return VMEM_OK;
    for (int i = 0; i < v->tags->n; i++) /* each alone within the limit */
        bfc_set_limit(&v->tags->t[i]->arena, limit);
    tags_sync(v);
    size_t all = v->dev.held + tags_held(v);
    if (all > limit) {
        for (int i = 0; i < v->tags->n && all > limit; i++) {
            bfc_arena_t *a = &v->tags->t[i]->arena;
            if (!a->paused)
                bfc_release(a, a->held > all - limit ? a->held - (all - limit) : 0);
            tags_sync(v);
            all = v->dev.held + tags_held(v);
        }
        size_t tags = tags_held(v);
        if (all > limit && !v->dev.pending)
            bfc_release(&v->dev, limit > tags ? limit - tags : 0);
        tags_sync(v);
        all = v->dev.held + tags_held(v);
    }
    return all > limit ? VMEM_PENDING : VMEM_OK;
}

size_t tags_trim(vmem_t *v)
{
    size_t n = 0;
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        bfc_arena_t *a = &v->tags->t[i]->arena;
        if (!a->paused)
            n += bfc_release(a, 0) + bfc_release_host(a);
    }
    tags_sync(v);
    return n;
}

const bfc_chunk_t *tags_find_live(const vmem_t *v, const void *ptr)
{
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        const bfc_chunk_t *c = bfc_find_live(&v->tags->t[i]->arena, ptr);
        if (c)
            return c;
    }
    return NULL;
}

vmem_status_t tags_check(const vmem_t *v, char *why, size_t len)
{
    size_t all = v->dev.held + tags_held(v);
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        const tag_arena_t *t = v->tags->t[i];
        char inner[200];
        if (bfc_check(&t->arena, inner, sizeof inner) != VMEM_OK) {
            snprintf(why, len, "tag %u: %s", t->tag, inner);
            return VMEM_ERR_INVALID;
        }
        if (t->arena.limit != v->dev.limit) {
            snprintf(why, len, "tag %u: limit %zu, instance %zu", t->tag, t->arena.limit,
                     v->dev.limit);
            return VMEM_ERR_INVALID;
        }
        /* No granule of this tag in another tag's arena (or tag 0's). */
        for (const bfc_region_t *r = t->arena.regions; r; r = r->next) {
            const void *p = (const void *)r->base, *q = (const void *)(r->base + r->size - 1);
            int other = bfc_contains(&v->dev, p) || bfc_contains(&v->dev, q);
            for (int j = 0; j < v->tags->n && !other; j++)
                other = j != i && (bfc_contains(&v->tags->t[j]->arena, p) ||
                                   bfc_contains(&v->tags->t[j]->arena, q));
            if (other) {
                snprintf(why, len, "tag %u: region %#lx shared with another tag", t->tag,
                         (unsigned long)r->base);
                return VMEM_ERR_INVALID;
            }
        }
    }
    if (v->dev.others_held != all - v->dev.held) {
        snprintf(why, len, "tag 0: others hold %zu, arenas say %zu", v->dev.others_held,
                 all - v->dev.held);
        return VMEM_ERR_INVALID;
    }
    return VMEM_OK;
}

void tags_destroy(vmem_t *v)
{
    size_t live = 0;
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        live += bfc_fini(&v->tags->t[i]->arena);
        free(v->tags->t[i]);
    }
    free(v->tags);
    v->tags = NULL;
    if (live)
        vmem_log(v, VMEM_LOG_WARN, "destroyed with %zu live tagged blocks", live);
    if (atomic_load(&v->tag_key_made))
        pthread_key_delete(v->tag_key);
}

void tags_totals(const vmem_t *v, tags_totals_t *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        const bfc_arena_t *a = &v->tags->t[i]->arena;
        o->device_held += a->held;
        o->in_use += a->in_use;
        o->requested += a->requested;
        o->host_in_use += a->host_in_use;
        o->host_requested += a->host_requested;
        o->held_host += a->held_host;
        o->peak_held += a->peak_held;
        o->peak_in_use += a->peak_in_use;
        o->peak_held_host += a->peak_held_host;
        o->peak_host_in_use += a->peak_host_in_use;
        o->regions += a->nregions;
        if (a->paused == BFC_PAUSED_DISCARD) {
            o->parked_in_use += a->in_use - a->host_in_use;
            o->parked_requested += a->requested - a->host_requested;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */
/* ------------------------------------------------------------------------ */

static void arena_tag_stats(const bfc_arena_t *a, vmem_tag_stats_t *s)
{
    s->state = a->paused == BFC_PAUSED_KEEP      ? VMEM_TAG_PAUSED_KEEP
               : a->paused == BFC_PAUSED_DISCARD ? VMEM_TAG_PAUSED_DISCARD
                                                 : VMEM_TAG_ACTIVE;
    s->blocks = a->live.count;
    s->in_use = a->in_use;
    s->requested = a->requested;
    s->device_held = a->held;
    s->host_held = a->held_host;
    s->host_in_use = a->host_in_use;
    s->reserved = a->parked;
    s->peak_device_held = a->peak_held;
}

vmem_status_t vmem_get_tag_stats(vmem_t *v, unsigned tag, vmem_tag_stats_t *out)
{
    if (!v || !out || out->size < offsetof(vmem_tag_stats_t, tag))
        return VMEM_INVALID_ARG(v);
    vmem_tag_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = out->size < sizeof s ? out->size : (uint32_t)sizeof s;
    s.version = VMEM_TAG_STATS_VERSION;
    s.tag = tag;
    vmem_lock(&v->lock);
    if (tag == 0) {
        arena_tag_stats(&v->dev, &s);
        s.allocs = v->allocs; /* every allocation, tags included */
        s.frees = v->frees;
    } else {
        const tag_arena_t *t = tag_find(v, tag);
        if (t) {
            arena_tag_stats(&t->arena, &s);
            s.allocs = t->allocs;
            s.frees = t->frees;
            s.pauses = t->pauses;
            s.resumes = t->resumes;
            s.bytes_to_host = t->bytes_to_host;
            s.bytes_to_device = t->bytes_to_device;
            s.last_pause_seconds = t->last_pause_seconds;
            s.last_resume_seconds = t->last_resume_seconds;
        }
    }
    vmem_unlock(&v->lock);
    memcpy(out, &s, s.size);
    return VMEM_OK;
}

void tags_json(vmem_t *v, void (*fn)(void *ctx, const char *fmt, ...), void *ctx)
{
    static const char *const state[] = {"active", "paused-keep", "paused-discard"};
    vmem_lock(&v->lock);
    fn(ctx, ",\"tags\":[");
    for (int i = 0; v->tags && i < v->tags->n; i++) {
        const tag_arena_t *t = v->tags->t[i];
        vmem_tag_stats_t s;
        memset(&s, 0, sizeof s);
        arena_tag_stats(&t->arena, &s);
        fn(ctx, "%s{\"tag\":%u,\"state\":\"%s\",\"blocks\":%zu,\"inUse\":%zu,\"deviceHeld\":%zu,"
                "\"hostHeld\":%zu,\"hostInUse\":%zu,\"reserved\":%zu,\"pauses\":%llu,"
                "\"resumes\":%llu,\"lastPauseMs\":%.3f,\"lastResumeMs\":%.3f}",
           i ? "," : "", t->tag, state[s.state], s.blocks, s.in_use, s.device_held, s.host_held,
           s.host_in_use, s.reserved, (unsigned long long)t->pauses,
           (unsigned long long)t->resumes, t->last_pause_seconds * 1e3,
           t->last_resume_seconds * 1e3);
    }
    fn(ctx, "]");
    vmem_unlock(&v->lock);
}
