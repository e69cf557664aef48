/*
 * BFC arena engine: best fit over segregated size bins with bitmaps,
 * immediate coalescing, regions from a backend.  See bfc.h for invariants.
 */
#include "bfc.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The helpers of bfc_alloc and bfc_free (best fit, split, the bins, the live
 * map, coalescing) are inlined into them whatever the compiler's size
 * heuristics say, and their rare parts (a bin's treap built, a slab of chunk
 * structs allocated, the map grown) stay out of line: 12% fewer instructions
 * per replayed operation (docs/benchmarks.md, "Speed"). */
#define HOT_INLINE inline __attribute__((always_inline))

#define SLAB_CHUNKS 512u
#define MAP_MIN_CAP 1024u

/* ------------------------------------------------------------------------ */
/* Sizes and bins                                                           */
/* ------------------------------------------------------------------------ */

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
static size_t align_down(size_t v, size_t a) { return v / a * a; }

unsigned bfc_bin_index(size_t size)
{
    size_t u = size >> 8; /* 256-byte units, >= 1 */
    if (u < BFC_SUB)
        return (unsigned)u;
    unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)u);
    unsigned sl = (unsigned)(u >> (fl - BFC_SUB_BITS)) & (BFC_SUB - 1);
    return (fl - BFC_SUB_BITS + 1) * BFC_SUB + sl;
}

/* A bin's list is kept in (size, address) order, so the first chunk that
 * fits is the best fit with the lowest address (address-ordered best fit:
 * blocks pack towards the bottom of a range and the free space above them
 * stays whole, which on the new jobs' traces held less, docs/benchmarks.md
 * round 7). */
static int chunk_before(const bfc_chunk_t *x, const bfc_chunk_t *y)
{
    return x->size < y->size || (x->size == y->size && x->addr < y->addr);
}

/* A long bin also keeps its chunks in a treap of the same order (bfc.h), so
 * that a free finds its place in O(log n) expected: with the list alone, a
 * free walked the bin (17 us a free with 10 000 fenced 512-byte holes freed
 * in random order).  Priorities are a hash of the address. */
static uint32_t chunk_prio(uintptr_t addr)
{
    uint64_t x = (uint64_t)(addr >> 8) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x >> 32);
}

static bfc_chunk_t *treap_insert(bfc_chunk_t *t, bfc_chunk_t *c)
{
    if (!t)
        return c;
    if (chunk_before(c, t)) {
        t->tl = treap_insert(t->tl, c);
        if (t->tl->prio < t->prio) { /* rotate right */
            bfc_chunk_t *l = t->tl;
            t->tl = l->tr;
            l->tr = t;
            return l;
        }
    } else {
        t->tr = treap_insert(t->tr, c);
        if (t->tr->prio < t->prio) { /* rotate left */
            bfc_chunk_t *r = t->tr;
            t->tr = r->tl;
            r->tl = t;
            return r;
        }
    }
    return t;
}

/* Adds c (not in a treap) to treap t; returns the new root. */
static bfc_chunk_t *treap_add(bfc_chunk_t *t, bfc_chunk_t *c)
{
    c->tl = c->tr = NULL;
    c->prio = chunk_prio(c->addr);
    return treap_insert(t, c);
}

/* Joins two treaps, every chunk of x before every chunk of y. */
static bfc_chunk_t *treap_join(bfc_chunk_t *x, bfc_chunk_t *y)
{
    if (!x)
        return y;
    if (!y)
        return x;
    if (x->prio <= y->prio) {
        x->tr = treap_join(x->tr, y);
        return x;
    }
    y->tl = treap_join(x, y->tl);
    return y;
}

static bfc_chunk_t *treap_remove(bfc_chunk_t *t, bfc_chunk_t *c)
{
    if (t == c)
        return treap_join(c->tl, c->tr);
    assert(t);
    if (chunk_before(c, t))
        t->tl = treap_remove(t->tl, c);
    else
        t->tr = treap_remove(t->tr, c);
    return t;
}

/* The last chunk of treap t before c, NULL if none. */
static bfc_chunk_t *treap_before(bfc_chunk_t *t, const bfc_chunk_t *c)
{
    bfc_chunk_t *best = NULL;
    while (t) {
        if (chunk_before(t, c)) {
            best = t;
            t = t->tr;
        } else {
            t = t->tl;
        }
    }
    return best;
}

/* The first chunk of treap t of at least size bytes, NULL if none. */
static bfc_chunk_t *treap_first_fit(bfc_chunk_t *t, size_t size)
{
    bfc_chunk_t *best = NULL;
    while (t) {
        if (t->size >= size) {
            best = t;
            t = t->tl;
        } else {
            t = t->tr;
        }
    }
    return best;
}

/* Builds bin b's treap from its list (an insert walked past BFC_TREAP_WALK
 * chunks of it). */
static __attribute__((noinline, cold)) void treap_build(bfc_arena_t *a, unsigned b)
{
    bfc_chunk_t *root = NULL;
    for (bfc_chunk_t *c = a->bins[b]; c; c = c->fnext)
        root = treap_add(root, c);
    a->bin_roots[b] = root;
}

/* Links c into bin b's list between prev and next, and counts it. */
static inline void bin_link(bfc_arena_t *a, unsigned b, bfc_chunk_t *c, bfc_chunk_t *prev,
                            bfc_chunk_t *next)
{
    c->fprev = prev;
    c->fnext = next;
    if (next)
        next->fprev = c;
    else
        a->bin_tails[b] = c;
    if (prev)
        prev->fnext = c;
    else
        a->bins[b] = c;
    if (!prev && !next) { /* the bin was empty: its bits were clear */
        a->bitmap[b >> 6] |= 1ull << (b & 63);
        a->top |= 1ull << (b >> 6);
    }
    a->nchunks_free++;
}

/* bin_insert into a bin with a treap (out of line, and reached by tail
 * calls: the common case, a short bin, stays a leaf function). */
static __attribute__((noinline)) void bin_insert_treap(bfc_arena_t *a, unsigned b, bfc_chunk_t *c)
{
    bfc_chunk_t *prev = chunk_before(a->bin_tails[b], c) ? a->bin_tails[b]
                                                        : treap_before(a->bin_roots[b], c);
    bin_link(a, b, c, prev, prev ? prev->fnext : a->bins[b]);
    a->bin_roots[b] = treap_add(a->bin_roots[b], c);
}

static __attribute__((noinline)) void treap_leave(bfc_arena_t *a, unsigned b, bfc_chunk_t *c)
{
    a->bin_roots[b] = a->bins[b] ? treap_remove(a->bin_roots[b], c) : NULL;
}

/* Short bins are walked (from the tail when c goes last, so chunks freed in
 * rising address order are appended in O(1)); long ones ask their treap. */
static HOT_INLINE void bin_insert(bfc_arena_t *a, bfc_chunk_t *c)
{
    unsigned b = bfc_bin_index(c->size);
    c->bin = b;
    if (a->bin_roots[b]) {
        bin_insert_treap(a, b, c);
        return;
    }
    bfc_chunk_t *prev = NULL, *next = a->bins[b];
    if (a->bin_tails[b] && chunk_before(a->bin_tails[b], c)) {
        prev = a->bin_tails[b];
        next = NULL;
    }
    unsigned walked = 0;
    while (next && chunk_before(next, c)) {
        prev = next;
        next = next->fnext;
        walked++;
    }
    bin_link(a, b, c, prev, next);
    if (walked > BFC_TREAP_WALK)
        treap_build(a, b); /* a tail call */
}

static HOT_INLINE void bin_remove(bfc_arena_t *a, bfc_chunk_t *c)
{
    unsigned b = c->bin;
    if (c->fprev)
        c->fprev->fnext = c->fnext;
    else
        a->bins[b] = c->fnext;
    if (c->fnext)
        c->fnext->fprev = c->fprev;
    else
        a->bin_tails[b] = c->fprev;
    c->fprev = c->fnext = NULL;
    if (!a->bins[b]) {
        a->bitmap[b >> 6] &= ~(1ull << (b & 63));
        if (!a->bitmap[b >> 6])
            a->top &= ~(1ull << (b >> 6));
    }
    a->nchunks_free--;
    if (a->bin_roots[b])
        treap_leave(a, b, c); /* a tail call */
}

/* First non-empty bin with index >= b, or BFC_NBINS. */
static unsigned bin_next(const bfc_arena_t *a, unsigned b)
{
    if (b >= BFC_NBINS)
        return BFC_NBINS;
    unsigned w = b >> 6;
    uint64_t bits = a->bitmap[w] & (~0ull << (b & 63));
    if (bits)
        return (w << 6) + (unsigned)__builtin_ctzll(bits);
    uint64_t tw = (w + 1 < 64) ? (a->top & (~0ull << (w + 1))) : 0;
    if (!tw)
        return BFC_NBINS;
    w = (unsigned)__builtin_ctzll(tw);
    return (w << 6) + (unsigned)__builtin_ctzll(a->bitmap[w]);
}

/* A request keyed BFC_STREAM_HOST (a spill) takes host memory only; others
 * take chunks of no stream and their own stream's. */
static int stream_ok(uintptr_t chunk_stream, uintptr_t stream)
{
    return chunk_stream == stream || (chunk_stream == 0 && stream != BFC_STREAM_HOST);
}

/* A free chunk of a dedicated region serves a request only if the request
 * fills all but 1/DEDICATED_SLACK of it. */
#define DEDICATED_SLACK 4u

/* Best fit: the smallest free chunk >= size usable on stream (ties: the lowest address),
 * skipping chunks of dedicated regions that size would leave mostly empty,
 * unless `share` and the room under the limit could grow such a chunk again. */
static HOT_INLINE bfc_chunk_t *bin_find(const bfc_arena_t *a, size_t size, uintptr_t stream,
                                        int share)
{
    size_t held = a->held + a->others_held, room = a->limit > held ? a->limit - held : 0;
    unsigned b = bin_next(a, bfc_bin_index(size));
    if (b >= BFC_NBINS)
        return NULL;
    /* (size, address) order; in a long bin from the first chunk large
     * enough (its treap finds it) */
    bfc_chunk_t *c = a->bin_roots[b] ? treap_first_fit(a->bin_roots[b], size) : a->bins[b];
    for (;;) {
        for (; c; c = c->fnext) {
            if (c->size < size || !stream_ok(c->stream, stream))
                continue;
            if (c->region->dedicated && size < c->size - c->size / DEDICATED_SLACK &&
                (!share || c->size > room))
                continue;
            return c;
        }
        if ((b = bin_next(a, b + 1)) >= BFC_NBINS)
            return NULL;
        c = a->bins[b];
    }
}

/* ------------------------------------------------------------------------ */
/* Chunk structs                                                            */
/* ------------------------------------------------------------------------ */

/* Refills the chunk-struct pool with a slab (out of line: rare). */
static __attribute__((noinline, cold)) int chunk_pool_refill(bfc_arena_t *a)
{
    if (a->nslabs == a->slabs_cap) {
        size_t cap = a->slabs_cap ? a->slabs_cap * 2 : 16;
        void **s = realloc(a->slabs, cap * sizeof *s);
        if (!s)
            return -1;
        a->slabs = s;
        a->slabs_cap = cap;
    }
    bfc_chunk_t *slab = calloc(SLAB_CHUNKS, sizeof *slab);
    if (!slab)
        return -1;
    a->slabs[a->nslabs++] = slab;
    for (unsigned i = 0; i < SLAB_CHUNKS; i++) {
        slab[i].fnext = a->pool;
        a->pool = &slab[i];
    }
    return 0;
}

static inline bfc_chunk_t *chunk_new(bfc_arena_t *a)
{
    if (!a->pool && chunk_pool_refill(a) != 0)
        return NULL;
    bfc_chunk_t *c = a->pool;
    a->pool = c->fnext;
    memset(c, 0, sizeof *c);
    return c;
}

static void chunk_delete(bfc_arena_t *a, bfc_chunk_t *c)
{
    c->fnext = a->pool;
    c->region = NULL;
    a->pool = c;
}

/* Splits free chunk c (out of the bins) at `at` (c->addr < at < its end):
 * c keeps [c->addr, at), r (from chunk_new), linked next after it, gets the
 * rest with c's stream key and seq. */
static void chunk_split(bfc_chunk_t *c, bfc_chunk_t *r, uintptr_t at)
{
    r->addr = at;
    r->size = c->addr + c->size - at;
    r->region = c->region;
    r->stream = c->stream;
    r->seq = c->seq;
    r->prev = c;
    r->next = c->next;
    if (c->next)
        c->next->prev = r;
    c->next = r;
    c->size = at - c->addr;
}

/* ------------------------------------------------------------------------ */
/* Live map                                                                 */
/* ------------------------------------------------------------------------ */

static size_t map_slot(const bfc_map_t *m, uintptr_t key)
{
    return (size_t)(((uint64_t)(key >> 8) * 0x9E3779B97F4A7C15ull) >> m->shift);
}

static int map_init(bfc_map_t *m, size_t cap)
{
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return -1;
    m->cap = cap;
    m->count = 0;
    m->shift = 64u - (unsigned)__builtin_ctzll(cap);
    return 0;
}

static bfc_chunk_t *map_get(const bfc_map_t *m, uintptr_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = map_slot(m, key);; i = (i + 1) & mask) {
        if (m->slots[i].key == key)
            return m->slots[i].val;
        if (m->slots[i].key == 0)
            return NULL;
    }
}

static void map_put_nogrow(bfc_map_t *m, uintptr_t key, bfc_chunk_t *val)
{
    size_t mask = m->cap - 1;
    size_t i = map_slot(m, key);
    while (m->slots[i].key != 0)
        i = (i + 1) & mask;
    m->slots[i].key = key;
    m->slots[i].val = val;
    m->count++;
}

/* Doubles the map (out of line: the common insert stays a leaf). */
static __attribute__((noinline, cold)) int map_grow(bfc_map_t *m)
{
    bfc_map_t n;
    if (map_init(&n, m->cap * 2) != 0)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
            map_put_nogrow(&n, m->slots[i].key, m->slots[i].val);
    free(m->slots);
    *m = n;
    return 0;
}

static HOT_INLINE int map_put(bfc_map_t *m, uintptr_t key, bfc_chunk_t *val)
{
    if ((m->count + 1) * 2 > m->cap && map_grow(m) != 0)
        return -1;
    map_put_nogrow(m, key, val);
    return 0;
}

/* Removes key (backward-shift deletion, no tombstones).  Returns its value. */
static HOT_INLINE bfc_chunk_t *map_del(bfc_map_t *m, uintptr_t key)
{
    size_t mask = m->cap - 1;
    size_t i = map_slot(m, key);
    while (m->slots[i].key != key) {
        if (m->slots[i].key == 0)
            return NULL;
        i = (i + 1) & mask;
    }
    bfc_chunk_t *val = m->slots[i].val;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->slots[j].key == 0)
            break;
        size_t home = map_slot(m, m->slots[j].key);
        /* Move j back to i if its home is not in (i, j]. */
        int in_between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_between) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = 0;
    m->slots[i].val = NULL;
    m->count--;
    return val;
}

/* ------------------------------------------------------------------------ */
/* Regions                                                                  */
/* ------------------------------------------------------------------------ */

static void region_link(bfc_arena_t *a, bfc_region_t *r)
{
    bfc_region_t *prev = NULL, *cur = a->regions;
    while (cur && cur->base < r->base) {
        prev = cur;
        cur = cur->next;
    }
    r->prev = prev;
    r->next = cur;
    if (prev)
        prev->next = r;
    else
        a->regions = r;
    if (cur)
        cur->prev = r;
    a->nregions++;
}

static void region_unlink(bfc_arena_t *a, bfc_region_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        a->regions = r->next;
    if (r->next)
        r->next->prev = r->prev;
    a->nregions--;
}

static bfc_region_t *region_find(const bfc_arena_t *a, uintptr_t p)
{
    for (bfc_region_t *r = a->regions; r && r->base <= p; r = r->next)
        if (p < r->base + r->size)
            return r;
    return NULL;
}

static bfc_chunk_t *region_last(bfc_region_t *r)
{
    bfc_chunk_t *c = r->first;
    while (c->next)
        c = c->next;
    return c;
}

static void held_add(bfc_arena_t *a, size_t n)
{
    a->held += n;
    if (a->held > a->peak_held)
        a->peak_held = a->held;
}

/* Host backing: hostmap[i] is 1 iff granule i of the backend's range is in
 * a region and backed by host memory. */
static size_t hostmap_index(const bfc_arena_t *a, uintptr_t p)
{
    return (size_t)(p - a->backend->range_base) / a->granule;
}

static int granule_on_host(const bfc_arena_t *a, uintptr_t p)
{
    return a->held_host && a->hostmap[hostmap_index(a, p)];
}

static void hostmap_mark(bfc_arena_t *a, uintptr_t lo, uintptr_t hi, int on)
{
    memset(a->hostmap + hostmap_index(a, lo), on, (hi - lo) / a->granule);
}

/* Bytes of [p, p + size) on host-backed granules, and (in *device, if not
 * NULL) whether any of it is on device memory. */
static size_t span_host_bytes(const bfc_arena_t *a, uintptr_t p, size_t size, int *device)
{
    size_t g = a->granule, n = 0;
    int dev = 0;
    for (uintptr_t q = align_down(p, g); q < p + size; q += g) {
        uintptr_t s = q > p ? q : p, e = q + g < p + size ? q + g : p + size;
        if (granule_on_host(a, q))
            n += e - s;
        else
            dev = 1;
    }
    if (device)
        *device = dev;
    return n;
}

/* Brings the in-use chunk c's host_bytes and the arena's sums up to date. */
static void chunk_note_host(bfc_arena_t *a, bfc_chunk_t *c)
{
    size_t n = a->held_host ? span_host_bytes(a, c->addr, c->size, NULL) : 0;
    if (n == c->host_bytes)
        return;
    if (c->host_bytes)
        a->host_requested -= c->requested;
    if (n)
        a->host_requested += c->requested;
    a->host_in_use = a->host_in_use - c->host_bytes + n;
    if (a->host_in_use > a->peak_host_in_use)
        a->peak_host_in_use = a->host_in_use;
    c->host_bytes = n;
}

/* Takes [lo, hi) (granule-aligned, in a region, about to be given back) out
 * of the totals: host-backed granules from held_host, the rest from held. */
static void held_sub(bfc_arena_t *a, uintptr_t lo, uintptr_t hi)
{
    size_t host = 0;
    if (a->parked) { /* paused with discard: every granule is parked */
        a->parked -= hi - lo;
        return;
    }
    if (a->held_host) {
        for (uintptr_t p = lo; p < hi; p += a->granule) {
            uint8_t *m = &a->hostmap[hostmap_index(a, p)];
            host += *m;
            *m = 0;
        }
        host *= a->granule;
    }
    a->held_host -= host;
    a->held -= (hi - lo) - host;
}

/* Merges the chunks of right into left (they touch: left ends at right's
 * base), coalescing the two boundary chunks if both are free with one stream key. */
static void region_merge(bfc_arena_t *a, bfc_region_t *left, bfc_region_t *right)
{
    bfc_chunk_t *tail = region_last(left);
    bfc_chunk_t *head = right->first;
    for (bfc_chunk_t *c = head; c; c = c->next)
        c->region = left;
    tail->next = head;
    head->prev = tail;
    left->size += right->size;
    left->live += right->live;
    region_unlink(a, right);
    free(right);
    if (!tail->in_use && !head->in_use && tail->stream == head->stream) {
        bin_remove(a, tail);
        bin_remove(a, head);
        tail->size += head->size;
        if (head->seq > tail->seq)
            tail->seq = head->seq;
        tail->next = head->next;
        if (head->next)
            head->next->prev = tail;
        chunk_delete(a, head);
        bin_insert(a, tail);
    }
}

/* Adds a fresh region [base, base+size) as one free chunk, backed by host
 * memory if host (host-backing backends only). */
static int region_add_backed(bfc_arena_t *a, uintptr_t base, size_t size, int host)
{
    bfc_region_t *r = calloc(1, sizeof *r);
    bfc_chunk_t *c = r ? chunk_new(a) : NULL;
    if (!c) {
        free(r);
        return -1;
    }
    r->base = base;
    r->size = size;
    r->first = c;
    c->addr = base;
    c->size = size;
    c->region = r;
    c->seq = a->seq;
    c->stream = host ? BFC_STREAM_HOST : 0;
    region_link(a, r);
    bin_insert(a, c);
    if (host) {
        hostmap_mark(a, base, base + size, 1);
        a->held_host += size;
        if (a->held_host > a->peak_held_host)
            a->peak_held_host = a->held_host;
    } else {
        held_add(a, size);
    }
    a->region_allocs++;
    if (a->backend->flags & BACKEND_F_CONTIGUOUS) {
        if (r->next && r->base + r->size == r->next->base)
            region_merge(a, r, r->next);
        if (r->prev && r->prev->base + r->prev->size == r->base)
            region_merge(a, r->prev, r);
    }
    return 0;
}

static int region_add(bfc_arena_t *a, uintptr_t base, size_t size)
{
    return region_add_backed(a, base, size, 0);
}

/* Gives an entirely free region back to the backend. */
static void region_release(bfc_arena_t *a, bfc_region_t *r)
{
    /* Empty, but possibly still cut into free chunks of different stream
     * keys (they do not coalesce): all of them go back together. */
    assert(r->live == 0);
    for (bfc_chunk_t *c = r->first, *n; c; c = n) {
        n = c->next;
        assert(!c->in_use);
        bin_remove(a, c);
        chunk_delete(a, c);
    }
    region_unlink(a, r);
    backend_region_free(a->backend, (void *)r->base, r->size);
    held_sub(a, r->base, r->base + r->size);
    a->region_frees++;
    free(r);
}

/* Splittable backends: gives back [lo, hi) (granule-aligned, inside the free
 * chunk c), splitting c and its region around the hole; with give_back 0 the
 * range only leaves the arena (bfc_remap hands it to the backend's remap).
 * Returns 0 on success, -1 if metadata could not be allocated (nothing
 * changed). */
static int region_punch(bfc_arena_t *a, bfc_chunk_t *c, uintptr_t lo, uintptr_t hi, int give_back)
{
    bfc_region_t *r = c->region;
    uintptr_t cend = c->addr + c->size;
    bfc_chunk_t *right_chunk = NULL;
    bfc_region_t *right_region = NULL;
    if (hi < r->base + r->size) {
        right_region = calloc(1, sizeof *right_region);
        if (!right_region)
            return -1;
        if (hi < cend) {
            right_chunk = chunk_new(a);
            if (!right_chunk) {
                free(right_region);
                return -1;
            }
        }
    }
    bin_remove(a, c);
    bfc_chunk_t *after = c->next;
    /* Right side: [hi, region end) becomes its own region. */
    if (right_region) {
        right_region->base = hi;
        right_region->size = r->base + r->size - hi;
        if (right_chunk) {
            right_chunk->addr = hi;
            right_chunk->size = cend - hi;
            right_chunk->stream = c->stream;
            right_chunk->seq = c->seq;
            right_chunk->next = after;
            if (after)
                after->prev = right_chunk;
            right_region->first = right_chunk;
            bin_insert(a, right_chunk);
        } else {
            right_region->first = after;
            after->prev = NULL;
        }
        size_t live = 0;
        for (bfc_chunk_t *x = right_region->first; x; x = x->next) {
            x->region = right_region;
            live += x->in_use;
        }
        right_region->live = live;
        r->live -= live;
    }
    /* Left side: [r->base, lo) stays in r. */
    if (lo > c->addr) {
        c->size = lo - c->addr;
        c->next = NULL;
        bin_insert(a, c);
    } else if (c->prev) {
        c->prev->next = NULL;
        chunk_delete(a, c);
    } else {
        /* The hole starts at the region's base: r disappears. */
        chunk_delete(a, c);
        r->first = NULL;
    }
    r->size = lo - r->base;
    if (right_region)
        region_link(a, right_region);
    if (r->size == 0) {
        region_unlink(a, r);
        free(r);
    }
    held_sub(a, lo, hi);
    if (give_back) {
        backend_region_free(a->backend, (void *)lo, hi - lo);
        a->region_frees++;
    }
    return 0;
}

/* Gives back the host-backed granules lying wholly inside the free chunk c
 * (right to left, so c keeps its start while anything is left of it).
 * Returns c, or NULL if c itself was given back. */
static bfc_chunk_t *chunk_release_host(bfc_arena_t *a, bfc_chunk_t *c)
{
    size_t g = a->granule;
    uintptr_t lo = align_up(c->addr, g), at = align_down(c->addr + c->size, g);
    while (at > lo) {
        uintptr_t hi = at;
        while (hi > lo && !granule_on_host(a, hi - g))
            hi -= g;
        if (hi == lo)
            break;
        uintptr_t from = hi;
        while (from > lo && granule_on_host(a, from - g))
            from -= g;
        int whole = from == c->addr;
        if (region_punch(a, c, from, hi, 1) != 0)
            break;
        if (whole)
            return NULL;
        at = from;
    }
    return c;
}

static HOT_INLINE bfc_chunk_t *chunk_coalesce(bfc_arena_t *a, bfc_chunk_t *c);

/* End of the run of granules backed like the one holding p, capped at end. */
static uintptr_t backing_run_end(const bfc_arena_t *a, uintptr_t p, uintptr_t end)
{
    size_t g = a->granule;
    uintptr_t q = align_down(p, g);
    int host = granule_on_host(a, q);
    for (q += g; q < end && granule_on_host(a, q) == host; q += g)
        ;
    return q < end ? q : end;
}

/* Settles the free chunk c (in its bin) after frees or moves: it is cut
 * where the backing changes, pieces on host get BFC_STREAM_HOST and pieces on
 * the device stream key 0 (or keep their stream), and each merges with free
 * neighbours of its key.  Free host memory stays mapped for later spills
 * (pinning host memory is slow) until bfc_release_host or the step
 * boundary gives it back.  A stream key may be dropped on host memory:
 * only spills take it, and they come after the caller waited for every
 * stream (bfc_alloc_spill).  Returns the chunk now holding c's start. */
static bfc_chunk_t *chunk_settle_host(bfc_arena_t *a, bfc_chunk_t *c)
{
    uintptr_t stream = c->stream == BFC_STREAM_HOST ? 0 : c->stream;
    bin_remove(a, c);
    /* Cut first (pieces stay out of the bins), key, then merge: neighbouring
     * pieces lie on different backings, so carry different keys. */
    bfc_chunk_t *last = c;
    for (;;) {
        uintptr_t end = last->addr + last->size;
        uintptr_t cut = backing_run_end(a, last->addr, end);
        bfc_chunk_t *rest = cut < end ? chunk_new(a) : NULL;
        int host = granule_on_host(a, align_down(last->addr, a->granule));
        /* A piece that could not be cut off keeps everything it spans off
         * ordinary allocations. */
        last->stream = host || (cut < end && !rest) ? BFC_STREAM_HOST : stream;
        if (!rest) {
            if (last != c && last->prev->stream == last->stream) {
                bfc_chunk_t *p = last->prev;
                p->size += last->size;
                p->next = last->next;
                if (last->next)
                    last->next->prev = p;
                chunk_delete(a, last);
                last = p;
            }
            break;
        }
        chunk_split(last, rest, cut); /* the piece keeps the chunk's free age (seq) */
        last = rest;
    }
    bfc_chunk_t *first = NULL;
    for (bfc_chunk_t *x = c, *next; ; x = next) {
        int is_last = x == last;
        next = x->next;
        x = chunk_coalesce(a, x);
        bin_insert(a, x);
        if (!first)
            first = x;
        if (is_last)
            return first;
    }
}

/* Settles every free chunk that touches host memory or carries
 * BFC_STREAM_HOST (after stream keys were cleared or granules moved). */
static void arena_settle_host(bfc_arena_t *a)
{
    uintptr_t resume = 0; /* everything below is settled */
    for (;;) {
        bfc_chunk_t *found = NULL;
        for (bfc_region_t *r = a->regions; r && !found; r = r->next) {
            if (r->base + r->size <= resume)
                continue;
            for (bfc_chunk_t *c = r->first; c; c = c->next) {
                if (c->in_use || c->addr + c->size <= resume)
                    continue;
                int device;
                size_t host = span_host_bytes(a, c->addr, c->size, &device);
                if ((c->stream != BFC_STREAM_HOST && host) || (c->stream == BFC_STREAM_HOST && device)) {
                    found = c;
                    break;
                }
            }
        }
        if (!found)
            return;
        resume = found->addr + found->size;
        chunk_settle_host(a, found);
    }
}

/* Gives back every free host-backed granule of the arena. */
static void arena_release_host(bfc_arena_t *a)
{
    if (!a->held_host)
        return;
    uintptr_t resume = 0; /* everything below has been looked at */
    for (;;) {
        bfc_chunk_t *found = NULL;
        for (bfc_region_t *r = a->regions; r && !found; r = r->next) {
            if (r->base + r->size <= resume)
                continue;
            for (bfc_chunk_t *c = r->first; c; c = c->next) {
                if (c->in_use || c->addr + c->size <= resume)
                    continue;
                uintptr_t lo = align_up(c->addr, a->granule);
                uintptr_t hi = align_down(c->addr + c->size, a->granule);
                for (uintptr_t p = lo; p < hi && !found; p += a->granule)
                    if (granule_on_host(a, p))
                        found = c;
                if (found)
                    break;
            }
        }
        if (!found)
            break;
        resume = found->addr + found->size;
        chunk_release_host(a, found);
    }
    /* Empty regions cut into free chunks of different stream keys: the granules
     * no chunk covers whole go back with the region. */
    for (bfc_region_t *r = a->regions, *n; r && a->held_host; r = n) {
        n = r->next;
        if (r->live == 0 && span_host_bytes(a, r->base, r->size, NULL))
            region_release(a, r);
    }
}

/* Takes the free chunk c (in its bin) out of the bins from at on: the part
 * below at, if any, is cut off and stays free in its bin.  Returns the chunk
 * starting at at, out of the bins, or NULL (c unchanged, still in its bin)
 * if no chunk record could be allocated. */
static bfc_chunk_t *chunk_unbin_from(bfc_arena_t *a, bfc_chunk_t *c, uintptr_t at)
{
    if (c->addr < at) {
        bfc_chunk_t *r = chunk_new(a);
        if (!r)
            return NULL;
        bin_remove(a, c);
        chunk_split(c, r, at);
        bin_insert(a, c);
        return r;
    }
    bin_remove(a, c);
    return c;
}

/* Gives back [lo, hi) (granule-aligned; give_back as region_punch), covered
 * by consecutive free chunks of which c holds lo: cuts them at lo and hi,
 * joins what lies between into one chunk and punches it.  Returns 0, or -1
 * if metadata could not be allocated (the chunks are then merged but
 * otherwise unchanged). */
static int span_punch(bfc_arena_t *a, bfc_chunk_t *c, uintptr_t lo, uintptr_t hi, int give_back)
{
    c = chunk_unbin_from(a, c, lo);
    if (!c)
        return -1;
    while (c->addr + c->size < hi) {
        bfc_chunk_t *n = c->next;
        assert(n && !n->in_use);
        bin_remove(a, n);
        if (n->addr + n->size > hi) {
            size_t take = hi - n->addr;
            c->size += take;
            n->addr = hi;
            n->size -= take;
            bin_insert(a, n);
        } else {
            c->size += n->size;
            c->next = n->next;
            if (n->next)
                n->next->prev = c;
            chunk_delete(a, n);
        }
    }
    bin_insert(a, c);
    if (region_punch(a, c, lo, hi, give_back) == 0)
        return 0;
    bin_remove(a, c);
    bin_insert(a, chunk_coalesce(a, c));
    return -1;
}

/* A run of whole free granules of device memory: [lo, hi) lies inside
 * consecutive free chunks starting with run (one stream key, or several: stream
 * keys may cut a free granule, and giving memory back waits for the
 * device anyway). */
typedef struct hole {
    bfc_chunk_t *run;
    uintptr_t lo, hi;
} hole_t;

static int hole_larger(const void *x, const void *y)
{
    const hole_t *h = x, *k = y;
    size_t sh = h->hi - h->lo, sk = k->hi - k->lo;
    if (sh != sk)
        return sh > sk ? -1 : 1;
    /* Ties from the top: a punch walks the chunks right of its hole up to
     * the region's end, which an earlier punch further right has cut. */
    return h->lo > k->lo ? -1 : h->lo < k->lo;
}

/* Whether free chunk c may lie in a hole: device memory, unused for
 * min_age allocations, and with no stream key when key0 (bfc_remap). */
static int hole_chunk(const bfc_arena_t *a, const bfc_chunk_t *c, uint64_t min_age, int key0)
{
    return !c->in_use && c->stream != BFC_STREAM_HOST && a->seq - c->seq >= min_age &&
           (!key0 || c->stream == 0);
}

/* Every hole of the arena below keep_from, largest first; NULL (*n 0) if
 * none or no memory. */
static hole_t *holes_find(const bfc_arena_t *a, uintptr_t keep_from, uint64_t min_age, int key0,
                          size_t *n)
{
    size_t g = a->granule, k = 0, cap = 0;
    hole_t *h = NULL;
    *n = 0;
    for (bfc_region_t *r = a->regions; r; r = r->next) {
        for (bfc_chunk_t *c = r->first; c;) {
            if (!hole_chunk(a, c, min_age, key0)) {
                c = c->next;
                continue;
            }
            bfc_chunk_t *run = c;
            uintptr_t end = c->addr;
            for (; c && hole_chunk(a, c, min_age, key0); c = c->next)
                end = c->addr + c->size;
            uintptr_t lo = align_up(run->addr, g), hi = align_down(end, g);
            if (hi > keep_from)
                hi = keep_from > lo ? align_down(keep_from, g) : lo;
            if (hi <= lo)
                continue;
            if (k == cap) {
                hole_t *m = realloc(h, (cap = cap ? cap * 2 : 64) * sizeof *h);
                if (!m) {
                    free(h);
                    return NULL;
                }
                h = m;
            }
            h[k++] = (hole_t){run, lo, hi};
        }
    }
    if (h)
        qsort(h, k, sizeof *h, hole_larger);
    *n = k;
    return h;
}

/* bfc_release, keeping what lies at or above keep_from (the free tail a
 * growth is about to extend). */
static int region_idle(const bfc_arena_t *a, const bfc_region_t *r, uint64_t min_age)
{
    for (const bfc_chunk_t *c = r->first; c && min_age; c = c->next)
        if (a->seq - c->seq < min_age)
            return 0;
    return 1;
}

static size_t arena_release(bfc_arena_t *a, size_t target, uintptr_t keep_from, uint64_t min_age)
{
    size_t before = a->held;
    /* Device memory only: free host memory (BFC_STREAM_HOST) is kept for
     * spills, see bfc_release_host.  Whole empty regions first, largest
     * first.  One batch: the backend waits for the device once. */
    backend_release_batch(a->backend, 1);
again:
    while (a->held > target) {
        bfc_region_t *best = NULL;
        for (bfc_region_t *r = a->regions; r; r = r->next)
            if (r->live == 0 && (!best || r->size > best->size) && r->base + r->size <= keep_from &&
                region_idle(a, r, min_age) &&
                !(a->held_host && span_host_bytes(a, r->base, r->size, NULL)))
                best = r;
        if (!best)
            break;
        region_release(a, best);
    }
    if (a->held > target && (a->backend->flags & BACKEND_F_SPLITTABLE)) {
        /* Holes of whole free granules, largest first, in one pass (a
         * punch changes no other hole). */
        size_t n = 0, g = a->granule;
        int punched = 0;
        hole_t *h = holes_find(a, keep_from, min_age, 0, &n);
        for (size_t i = 0; h && i < n && a->held > target; i++) {
            /* Give back no more than needed, from the top of the hole. */
            uintptr_t lo = h[i].lo, hi = h[i].hi;
            size_t excess = align_up(a->held - target, g);
            if (hi - lo > excess)
                lo = hi - excess;
            bfc_chunk_t *c = h[i].run;
            while (c->addr + c->size <= lo)
                c = c->next;
            if ((hi <= c->addr + c->size ? region_punch(a, c, lo, hi, 1)
                                         : span_punch(a, c, lo, hi, 1)) != 0)
                break;
            punched = 1;
        }
        free(h);
        /* A punch may have left an empty region behind (free chunks of
         * different stream keys, none holding a whole granule). */
        if (punched && a->held > target)
            goto again;
    }
    backend_release_batch(a->backend, 0);
    if (a->pending && a->held <= a->limit)
        a->pending = 0;
    return before - a->held;
}

size_t bfc_release(bfc_arena_t *a, size_t target) { return arena_release(a, target, UINTPTR_MAX, 0); }

/* ------------------------------------------------------------------------ */
/* Init / fini                                                              */
/* ------------------------------------------------------------------------ */

vmem_status_t bfc_init(bfc_arena_t *a, backend_t *b, const bfc_params_t *p, size_t limit)
{
    memset(a, 0, sizeof *a);
    a->backend = b;
    a->params = *p;
    a->granule = b->granule ? b->granule : BFC_ALIGN;
    if (a->params.split_min < BFC_ALIGN)
        a->params.split_min = BFC_ALIGN;
    a->params.min_region = align_up(a->params.min_region ? a->params.min_region : a->granule,
                                    a->granule);
    if (a->params.max_region < a->params.min_region)
        a->params.max_region = a->params.min_region;
    a->next_region = a->params.min_region;
    a->limit = limit;
    if (map_init(&a->live, MAP_MIN_CAP) != 0)
        return VMEM_ERR_NOMEM;
    a->host_limit = SIZE_MAX;
    /* Host backing needs the per-granule map; without it (no memory) the
     * arena simply works without host backing. */
    if ((b->flags & BACKEND_F_HOST_BACKING) && b->range_size >= a->granule &&
        b->range_base % a->granule == 0) {
        a->hostmap_len = b->range_size / a->granule;
        a->hostmap = calloc(a->hostmap_len, 1);
        if (!a->hostmap)
            a->hostmap_len = 0;
    }
    return VMEM_OK;
}

size_t bfc_fini(bfc_arena_t *a)
{
    size_t live = a->live.count;
    bfc_region_t *r = a->regions;
    while (r) {
        bfc_region_t *n = r->next;
        backend_region_free(a->backend, (void *)r->base, r->size);
        free(r);
        r = n;
    }
    for (size_t i = 0; i < a->nslabs; i++)
        free(a->slabs[i]);
    free(a->slabs);
    free(a->live.slots);
    free(a->hostmap);
    memset(a, 0, sizeof *a);
    return live;
}

/* ------------------------------------------------------------------------ */
/* Alloc / free                                                             */
/* ------------------------------------------------------------------------ */

/* Before a growth of `grow` bytes for a request of `need`: gives back free
 * memory below keep_from as the growth policy asks (growth.h).  A growth
 * that takes held back to where a trim started shows that trim was churn
 * (the memory was needed again): trim_floor then keeps later trims above
 * that level, so a workload that repeats itself stops trimming (no backend
 * calls in its steady state).  Under the at_peak rule (growth.h) there is no
 * floor: growth_trim_target keeps held at its peak so far instead. */
static void arena_trim(bfc_arena_t *a, size_t need, size_t grow, uintptr_t keep_from)
{
    size_t hwm = a->in_use + need > a->peak_in_use ? a->in_use + need : a->peak_in_use;
    size_t target = growth_trim_target(&a->params.growth, a->held, grow, hwm, a->peak_held);
    if (!a->params.growth.at_peak && a->trim_from && a->held + grow >= a->trim_from) {
        /* held is back where a trim started: that trim was churn */
        if (a->held + grow > a->trim_floor)
            a->trim_floor = a->held + grow;
        a->trim_from = 0;
    }
    if (target != SIZE_MAX && a->trim_floor > grow && target < a->trim_floor - grow)
        target = a->trim_floor - grow;
    if (target >= a->held)
        return;
    size_t before = a->held;
    size_t n = arena_release(a, target, keep_from, a->params.growth.trim_age);
    if (n) {
        a->trims++;
        a->trimmed += n;
        a->trim_from = before;
    }
}

/* The bytes the limit leaves to map, in whole granules (tags share the limit). */
static size_t grow_room(const bfc_arena_t *a)
{
    size_t held = a->held + a->others_held;
    return held < a->limit ? align_down(a->limit - held, a->granule) : 0;
}

/* Contiguous backends: the end of the arena's last region (*end), the bytes
 * of its free tail chunk a growth there extends (*credit: 0 unless the tail
 * is free with no stream key), and where a trim must stop so as to keep
 * that tail (*keep: the free tail's start, else *end).  Needs a region. */
static void arena_tail(const bfc_arena_t *a, uintptr_t *end, size_t *credit, uintptr_t *keep)
{
    bfc_region_t *last = a->regions;
    while (last->next)
        last = last->next;
    *end = last->base + last->size;
    const bfc_chunk_t *tail = region_last(last);
    *credit = !tail->in_use && tail->stream == 0 ? tail->size : 0;
    *keep = tail->in_use ? *end : tail->addr;
}

/* Obtains a region able to hold `need` bytes (after merging with a free tail
 * for contiguous backends).  Region sizes double from min_region up to
 * max_region; a request of dedicated_min or more gets a dedicated region of
 * its own size instead.  Returns 0 on success. */
static int arena_grow(bfc_arena_t *a, size_t need)
{
    size_t g = a->granule;
    int dedicated = a->params.dedicated_min && need >= a->params.dedicated_min &&
                    !(a->backend->flags & BACKEND_F_CONTIGUOUS);
    if (a->pending || a->held + a->others_held >= a->limit) { /* tags share the limit */
        a->last_fail = BFC_FAIL_LIMIT;
        return -1;
    }
    size_t room = grow_room(a);
    void *hint = NULL;
    size_t credit = 0;
    uintptr_t keep = UINTPTR_MAX; /* a trim keeps the tail the growth extends */
    if ((a->backend->flags & BACKEND_F_CONTIGUOUS) && a->regions) {
        uintptr_t end;
        arena_tail(a, &end, &credit, &keep);
        hint = (void *)end;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t want = need > credit ? need - credit : 0;
        size_t minimum = align_up(want ? want : 1, g);
        if (minimum < want || minimum > room) {
            if (attempt == 0 && credit) {
                credit = 0;
                continue;
            }
            a->last_fail = BFC_FAIL_LIMIT;
            return -1;
        }
        size_t align = a->backend->grow_align;
        int contiguous = (a->backend->flags & BACKEND_F_CONTIGUOUS) != 0;
        /* A region starts at the hint, or the first at the range's base. */
        uintptr_t start = hint ? (uintptr_t)hint : a->backend->range_base;
        size_t size = growth_size(&a->params.growth, minimum, a->next_region, dedicated, contiguous,
                                  align && align % g == 0 ? align : 0,
                                  (size_t)(start - a->backend->range_base), room);
        arena_trim(a, need, size, keep);
        void *base = NULL;
        vmem_status_t st = backend_region_alloc(a->backend, size, hint, &base);
        if (st != VMEM_OK && size > minimum) {
            size = minimum;
            st = backend_region_alloc(a->backend, size, hint, &base);
        }
        if (st != VMEM_OK) {
            a->last_fail = BFC_FAIL_BACKEND;
            return -1;
        }
        if (region_add(a, (uintptr_t)base, size) != 0) {
            backend_region_free(a->backend, base, size);
            a->last_fail = BFC_FAIL_BACKEND;
            return -1;
        }
        if (dedicated) {
            region_find(a, (uintptr_t)base)->dedicated = 1;
            return 0;
        }
        if (size >= a->next_region && a->next_region < a->params.max_region) {
            a->next_region *= 2;
            if (a->next_region > a->params.max_region)
                a->next_region = a->params.max_region;
        }
        if (!credit || base == hint)
            return 0;
        /* Not placed after the tail: the credit did not apply; try once more
         * for the full size (the region just added stays for later use). */
        room = grow_room(a);
        credit = 0;
        hint = NULL;
        if (need <= size)
            return 0;
    }
    return 0;
}

/* Hands out free chunk c (in its bin, >= rs bytes) for a request of size
 * (rs rounded), splitting off the rest.  Returns 0 (c unchanged,
 * last_fail set) if the live map cannot grow. */
static HOT_INLINE int chunk_take_from(bfc_arena_t *a, bfc_chunk_t *c, size_t rs, size_t size,
                                      int binned)
{
    if (map_put(&a->live, c->addr, c) != 0) {
        a->last_fail = BFC_FAIL_BACKEND;
        return 0;
    }
    if (binned)
        bin_remove(a, c);
    if (c->size - rs >= a->params.split_min) {
        bfc_chunk_t *rest = chunk_new(a);
        if (rest) {
            chunk_split(c, rest, c->addr + rs);
            bin_insert(a, rest);
        }
    }
    c->in_use = 1;
    c->requested = size;
    c->seq = ++a->seq;
    c->stream = 0;
    c->region->live++;
    a->in_use += c->size;
    a->requested += size;
    if (a->held_host)
        chunk_note_host(a, c);
    if (a->in_use > a->peak_in_use)
        a->peak_in_use = a->in_use;
    a->last_fail = BFC_FAIL_NONE;
    return 1;
}

/* Takes rs bytes at the start of free chunk c (in its bin), splitting off
 * the rest; 0 (c unchanged) if the live map cannot grow. */
static int chunk_take(bfc_arena_t *a, bfc_chunk_t *c, size_t rs, size_t size)
{
    return chunk_take_from(a, c, rs, size, 1);
}

/* The free chunk bfc_alloc takes for rs bytes on stream, or NULL. */
static HOT_INLINE bfc_chunk_t *free_fit(const bfc_arena_t *a, size_t rs, uintptr_t stream)
{
    bfc_chunk_t *c = bin_find(a, rs, stream, 0);
    /* Uncapped, splitting a free dedicated chunk holds less than growing
     * (docs/benchmarks.md, "Held over live"); under a limit dedicated regions
     * stay whole, to be given back to the large requests they were made for. */
    if (!c && a->share_dedicated && a->params.growth.share)
        c = bin_find(a, rs, stream, 1);
    return c;
}

void *bfc_alloc(bfc_arena_t *a, size_t size, uintptr_t stream)
{
    size_t rs = bfc_round(size);
    if (rs == 0) {
        a->last_fail = BFC_FAIL_SIZE;
        return NULL;
    }
    bfc_chunk_t *c = free_fit(a, rs, stream);
    if (!c) {
        /* A grow that failed may still have added a region (placed away
         * from the tail it was to extend) that serves the request. */
        int grew = arena_grow(a, rs) == 0;
        c = bin_find(a, rs, stream, 0);
        if (!c) {
            if (grew)
                a->last_fail = BFC_FAIL_LIMIT;
            return NULL;
        }
    }
    return chunk_take(a, c, rs, size) ? (void *)c->addr : NULL;
}

int bfc_fits(const bfc_arena_t *a, size_t size, uintptr_t stream)
{
    size_t rs = bfc_round(size);
    if (rs == 0)
        return 0;
    if (free_fit(a, rs, stream))
        return 1;
    size_t need = align_up(rs, a->granule);
    return !a->pending && need >= rs && need <= grow_room(a);
}

int bfc_remap(bfc_arena_t *a, size_t size, uintptr_t stream)
{
    size_t rs = bfc_round(size), g = a->granule;
    if (rs == 0 || stream != 0 || a->pending || !a->regions ||
        (a->backend->flags & (BACKEND_F_CONTIGUOUS | BACKEND_F_SPLITTABLE)) !=
            (BACKEND_F_CONTIGUOUS | BACKEND_F_SPLITTABLE) ||
        !a->backend->ops->region_remap)
        return 0;
    /* One run per round, holes found afresh each time (a region added may
     * merge with a neighbour and delete a chunk an old hole list points at).
     * A run the backend refuses (a big handle that would lose its
     * alignment) is skipped in the rounds after. */
    enum { ROUNDS = 64 };
    uintptr_t skip[ROUNDS];
    int nskip = 0, moved = 0;
    for (int round = 0; round < ROUNDS && !free_fit(a, rs, stream); round++) {
        uintptr_t end, keep;
        size_t credit;
        arena_tail(a, &end, &credit, &keep);
        size_t want = align_up(rs > credit ? rs - credit : g, g);
        size_t n = 0;
        hole_t *h = holes_find(a, keep, 0, 1, &n);
        uintptr_t lo = 0, hi = 0;
        bfc_chunk_t *c = NULL;
        for (size_t i = 0; h && i < n && hi <= lo; i++) {
            int skipped = 0;
            for (int k = 0; k < nskip; k++)
                skipped |= skip[k] >= h[i].lo && skip[k] < h[i].hi;
            if (skipped)
                continue;
            lo = h[i].lo;
            hi = h[i].hi;
            if (hi - lo > want)
                lo = hi - want; /* from the top of the hole: no more than wanted */
            backend_remap_span(a->backend, &lo, &hi);
            c = h[i].run;
        }
        free(h);
        if (hi <= lo)
            break; /* nothing (more) movable */
        while (c->addr + c->size <= lo)
            c = c->next;
        if ((hi <= c->addr + c->size ? region_punch(a, c, lo, hi, 0)
                                     : span_punch(a, c, lo, hi, 0)) != 0)
            break;
        void *dst = NULL;
        vmem_status_t st = backend_region_remap(a->backend, (void *)lo, hi - lo, (void *)end, &dst);
        if (st != VMEM_OK) {
            /* still mapped where it was: the arena takes it back */
            if (region_add(a, lo, hi - lo) != 0) {
                backend_region_free(a->backend, (void *)lo, hi - lo);
                break;
            }
            if (st != VMEM_ERR_UNSUPPORTED)
                break;
            a->remap_refused++;
            skip[nskip++] = lo;
            continue;
        }
        if (region_add(a, (uintptr_t)dst, hi - lo) != 0) {
            backend_region_free(a->backend, dst, hi - lo);
            break;
        }
        a->remaps++;
        a->remapped += hi - lo;
        moved = 1;
        if ((uintptr_t)dst != end)
            break; /* not next to the tail: no more rounds towards it */
    }
    int fits = free_fit(a, rs, stream) != NULL;
    if (!fits && !moved)
        a->remap_misses++;
    return fits;
}

/* Merges free chunk c with its free neighbours of the same stream key. */
static HOT_INLINE bfc_chunk_t *chunk_coalesce(bfc_arena_t *a, bfc_chunk_t *c)
{
    bfc_chunk_t *n = c->next;
    if (n && !n->in_use && n->stream == c->stream) {
        bin_remove(a, n);
        c->size += n->size;
        if (n->seq > c->seq)
            c->seq = n->seq;
        c->next = n->next;
        if (n->next)
            n->next->prev = c;
        chunk_delete(a, n);
    }
    bfc_chunk_t *p = c->prev;
    if (p && !p->in_use && p->stream == c->stream) {
        bin_remove(a, p);
        p->size += c->size;
        if (c->seq > p->seq)
            p->seq = c->seq;
        p->next = c->next;
        if (c->next)
            c->next->prev = p;
        chunk_delete(a, c);
        c = p;
    }
    return c;
}

#define BFC_HINT_WALK 16u /* chunks walked from bfc_alloc_at's hint before scanning */

/* c, if it is a free chunk usable on stream that holds [addr, addr + rs)
 * (inline: on the path of every planned block, bfc_alloc_at). */
static inline bfc_chunk_t *chunk_holds(bfc_chunk_t *c, uintptr_t addr, size_t rs,
                                       uintptr_t stream)
{
    return c && !c->in_use && c->addr <= addr && addr + rs <= c->addr + c->size &&
                   stream_ok(c->stream, stream) && !c->region->dedicated
               ? c
               : NULL;
}

/* The free chunk usable on stream that holds [addr, addr + rs), or NULL.
 * Chunks are disjoint, so at most one free chunk holds the range: the live
 * map answers the common cases in O(1) (a block live at addr: none holds
 * it; a block live at addr + rs: the chunk before it, if any does); the
 * bins are scanned only when neither probe decides. */
static bfc_chunk_t *free_chunk_holding(const bfc_arena_t *a, uintptr_t addr, size_t rs,
                                       uintptr_t stream)
{
    if (map_get(&a->live, addr))
        return NULL;
    bfc_chunk_t *n = map_get(&a->live, addr + rs);
    if (n && n->prev && n->prev->addr + n->prev->size == n->addr)
        return chunk_holds(n->prev, addr, rs, stream);
    for (unsigned b = bin_next(a, bfc_bin_index(rs)); b < BFC_NBINS; b = bin_next(a, b + 1))
        for (bfc_chunk_t *c = a->bins[b]; c; c = c->fnext)
            if (chunk_holds(c, addr, rs, stream))
                return c;
    return NULL;
}

void *bfc_alloc_at(bfc_arena_t *a, size_t size, uintptr_t stream, uintptr_t addr, uintptr_t hint)
{
    size_t rs = bfc_round(size);
    if (rs == 0 || addr % BFC_ALIGN) {
        a->last_fail = BFC_FAIL_SIZE;
        return NULL;
    }
    bfc_chunk_t *c = NULL, *h = hint ? map_get(&a->live, hint) : NULL;
    int found = 0;
    if (h) { /* a live block near the range: walk its region's chunks to the one
                holding addr (the only one that can hold the range) */
        c = h;
        for (unsigned k = 0; c && k < BFC_HINT_WALK; k++) {
            if (c->addr + c->size <= addr)
                c = c->next;
            else if (c->addr > addr)
                c = c->prev;
            else {
                found = 1; /* c holds addr */
                break;
            }
        }
        c = found ? chunk_holds(c, addr, rs, stream) : NULL;
    }
    if (!found)
        c = free_chunk_holding(a, addr, rs, stream);
    if (!c && (a->backend->flags & BACKEND_F_CONTIGUOUS) && a->regions) {
        /* Beyond the end: grow the last region up to addr + rs, if nothing
         * lives between its end and addr. */
        bfc_region_t *last = a->regions;
        while (last->next)
            last = last->next;
        uintptr_t end = last->base + last->size;
        bfc_chunk_t *tail = addr + rs > end ? region_last(last) : NULL;
        uintptr_t from = tail && !tail->in_use && tail->stream == 0 ? tail->addr : end;
        if (tail && addr >= from && arena_grow(a, addr + rs - from) == 0)
            c = free_chunk_holding(a, addr, rs, stream);
    }
    if (!c) {
        a->last_fail = BFC_FAIL_LIMIT;
        return NULL;
    }
    c = chunk_unbin_from(a, c, addr); /* the part below addr stays free */
    if (!c) {
        a->last_fail = BFC_FAIL_BACKEND;
        return NULL;
    }
    /* c is out of the bins (chunk_take would put it in and take it out) */
    if (!chunk_take_from(a, c, rs, size, 0)) {
        bin_insert(a, chunk_coalesce(a, c)); /* undo the split */
        return NULL;
    }
    return (void *)c->addr;
}

/* What a free does beyond returning the chunk while the arena holds host
 * memory or a shrink is pending (out of line: bfc_free's common path stays
 * short). */
static __attribute__((noinline)) void free_settle(bfc_arena_t *a, bfc_chunk_t *c)
{
    if (a->held_host) {
        c = chunk_settle_host(a, c);
        if (a->held_host > a->host_limit) {
            arena_release_host(a);
            c = NULL;
        }
    }
    if (a->pending) {
        if (c && c->region->live == 0)
            region_release(a, c->region);
        if (a->held > a->limit)
            bfc_release(a, a->limit);
        if (a->held <= a->limit)
            a->pending = 0;
    }
}

vmem_status_t bfc_free(bfc_arena_t *a, void *p, uintptr_t stream, size_t *size)
{
    bfc_chunk_t *c = map_del(&a->live, (uintptr_t)p);
    if (!c)
        return VMEM_ERR_FOREIGN_PTR;
    if (size)
        *size = c->size;
    a->freed_seq = c->seq;
    a->in_use -= c->size;
    a->requested -= c->requested;
    if (c->host_bytes) {
        a->host_in_use -= c->host_bytes;
        a->host_requested -= c->requested;
        c->host_bytes = 0;
    }
    c->in_use = 0;
    c->requested = 0;
    c->seq = a->seq; /* free: last used when this many allocations were made */
    c->stream = stream;
    c->region->live--;
    c = chunk_coalesce(a, c);
    bin_insert(a, c);
    if (a->held_host || a->pending)
        free_settle(a, c);
    return VMEM_OK;
}

void bfc_clear_streams(bfc_arena_t *a)
{
    for (bfc_region_t *r = a->regions; r; r = r->next) {
        for (bfc_chunk_t *c = r->first; c; c = c->next) {
            if (c->in_use || c->stream == 0)
                continue;
            bin_remove(a, c);
            c->stream = 0;
            c = chunk_coalesce(a, c);
            bin_insert(a, c);
        }
    }
    /* Free memory on host-backed granules goes back to the spills. */
    if (a->held_host)
        arena_settle_host(a);
    /* Merging may have freed whole regions or granules a pending shrink
     * is waiting for. */
    if (a->pending)
        bfc_release(a, a->limit);
}

vmem_status_t bfc_set_limit(bfc_arena_t *a, size_t limit)
{
    a->limit = limit;
    a->pending = 0;
    if (a->held > limit) {
        bfc_release(a, limit);
        if (a->held > limit) {
            a->pending = 1;
            return VMEM_PENDING;
        }
    }
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* Host backing: spill in place, evict, bring back                          */
/* ------------------------------------------------------------------------ */

/* Size of the free host tail of the arena's last region (0 if none). */
static size_t region_last_free_host(const bfc_arena_t *a)
{
    const bfc_region_t *last = a->regions;
    while (last->next)
        last = last->next;
    const bfc_chunk_t *tail = region_last((bfc_region_t *)last);
    return !tail->in_use && tail->stream == BFC_STREAM_HOST ? tail->size : 0;
}

void *bfc_alloc_spill(bfc_arena_t *a, size_t size, uintptr_t stream, size_t host_room)
{
    size_t rs = bfc_round(size), g = a->granule;
    (void)stream; /* memory kept for spills belongs to no stream */
    if (rs == 0) {
        a->last_fail = BFC_FAIL_SIZE;
        return NULL;
    }
    if (!a->hostmap) {
        a->last_fail = BFC_FAIL_BACKEND;
        return NULL;
    }
    /* Free host memory kept from earlier spills first, else new granules
     * at the end of the arena, joined to its free host tail if it has one. */
    if (!bin_find(a, rs, BFC_STREAM_HOST, 0)) {
        void *hint = NULL;
        size_t credit = 0;
        if (a->regions) {
            bfc_region_t *last = a->regions;
            while (last->next)
                last = last->next;
            hint = (void *)(last->base + last->size);
            bfc_chunk_t *tail = region_last(last);
            if (!tail->in_use && tail->stream == BFC_STREAM_HOST)
                credit = tail->size;
        }
        for (;;) {
            size_t n = align_up(rs - credit, g);
            if (n >= rs - credit && n > host_room && a->held_host) {
                /* Kept free host memory that does not fit makes room. */
                size_t kept = a->held_host;
                arena_release_host(a);
                host_room += kept - a->held_host;
                if (credit && !(a->regions && region_last_free_host(a) == credit))
                    credit = 0;
            }
            if (n < rs - credit || n > host_room) {
                a->last_fail = BFC_FAIL_LIMIT;
                return NULL;
            }
            void *base = NULL;
            if (backend_region_alloc_host(a->backend, n, hint, &base) != VMEM_OK) {
                a->last_fail = BFC_FAIL_BACKEND;
                return NULL;
            }
            if (credit && base != hint) {
                /* Not joined to the tail: the whole block must fit. */
                backend_region_free(a->backend, base, n);
                credit = 0;
                hint = NULL;
                continue;
            }
            if (region_add_backed(a, (uintptr_t)base, n, 1) != 0) {
                backend_region_free(a->backend, base, n);
                a->last_fail = BFC_FAIL_BACKEND;
                return NULL;
            }
            break;
        }
    }
    void *p = bfc_alloc(a, size, BFC_STREAM_HOST);
    if (!p) {
        arena_release_host(a);
        return NULL;
    }
    return p;
}

size_t bfc_release_host(bfc_arena_t *a)
{
    size_t kept = a->held_host;
    arena_release_host(a);
    return kept - a->held_host;
}

size_t bfc_host_bytes(const bfc_arena_t *a, const void *p, size_t size)
{
    if (!a->held_host || size == 0)
        return 0;
    size_t g = a->granule, n = 0;
    uintptr_t lo = (uintptr_t)p, hi = lo + size;
    if (lo < a->backend->range_base || hi > a->backend->range_base + a->hostmap_len * g)
        return 0;
    for (uintptr_t q = align_down(lo, g); q < hi; q += g) {
        if (!granule_on_host(a, q))
            continue;
        uintptr_t s = q > lo ? q : lo, e = q + g < hi ? q + g : hi;
        n += e - s;
    }
    return n;
}

/* Moves the granule run [lo, hi) (one backing, all on the other side) to
 * host (to_host) or to the device, updating the map and the totals (for
 * what moved, if the backend failed part way). */
static vmem_status_t run_move(bfc_arena_t *a, uintptr_t lo, uintptr_t hi, int to_host,
                              bfc_moves_t *m)
{
    size_t n = 0;
    vmem_status_t st = backend_region_move(a->backend, (void *)lo, hi - lo, to_host, &n);
    if (n == 0)
        return st;
    hostmap_mark(a, lo, lo + n, to_host);
    if (to_host) {
        a->held -= n;
        a->held_host += n;
        if (a->held_host > a->peak_held_host)
            a->peak_held_host = a->held_host;
        a->moved_to_host += n;
        m->to_host += n;
    } else {
        a->held_host -= n;
        held_add(a, n);
        a->moved_to_device += n;
        m->to_device += n;
    }
    return st;
}

/* Moves granules of [lo, hi) that are on the other side to host (to_host)
 * or to the device, in maximal runs, at most budget bytes (a multiple of
 * the granule), lowest addresses first.  *budget is reduced by what moved. */
static vmem_status_t span_move(bfc_arena_t *a, uintptr_t lo, uintptr_t hi, int to_host,
                               size_t *budget, bfc_moves_t *m)
{
    size_t g = a->granule;
    for (uintptr_t p = lo; p < hi && *budget >= g;) {
        if ((a->hostmap[hostmap_index(a, p)] != 0) == to_host) {
            p += g;
            continue;
        }
        uintptr_t e = p + g;
        while (e < hi && e - p < *budget && (a->hostmap[hostmap_index(a, e)] != 0) != to_host)
            e += g;
        vmem_status_t st = run_move(a, p, e, to_host, m);
        if (st != VMEM_OK)
            return st;
        *budget -= e - p;
        p = e;
    }
    return VMEM_OK;
}

static int chunk_older(const void *x, const void *y)
{
    const bfc_chunk_t *c = *(const bfc_chunk_t *const *)x, *d = *(const bfc_chunk_t *const *)y;
    return c->seq < d->seq ? -1 : c->seq > d->seq;
}

/* The live chunks touching a granule on the side `on_host` (1: host-backed,
 * 0: device-backed), oldest allocation first.  *n gets their count; NULL
 * with *n 0 if there are none or no memory for the list. */
static bfc_chunk_t **live_by_age(const bfc_arena_t *a, int on_host, size_t *n)
{
    size_t g = a->granule, cap = a->live.count, k = 0;
    *n = 0;
    bfc_chunk_t **v = cap ? malloc(cap * sizeof *v) : NULL;
    if (!v)
        return NULL;
    for (bfc_region_t *r = a->regions; r; r = r->next) {
        for (bfc_chunk_t *c = r->first; c; c = c->next) {
            if (!c->in_use)
                continue;
            uintptr_t hi = align_up(c->addr + c->size, g);
            for (uintptr_t p = align_down(c->addr, g); p < hi; p += g) {
                if ((a->hostmap[hostmap_index(a, p)] != 0) == on_host) {
                    v[k++] = c;
                    break;
                }
            }
        }
    }
    qsort(v, k, sizeof *v, chunk_older);
    *n = k;
    return v;
}

/* A shrink below the live bytes: live granules go to host memory, those of
 * the oldest allocations first, until held <= limit or host_room is used. */
static vmem_status_t arena_evict(bfc_arena_t *a, size_t host_room, bfc_moves_t *m)
{
    size_t g = a->granule, k = 0;
    bfc_chunk_t **v = live_by_age(a, 0, &k);
    vmem_status_t st = VMEM_OK;
    host_room = align_down(host_room, g);
    for (size_t i = 0; i < k && st == VMEM_OK && a->held > a->limit && host_room; i++) {
        size_t need = align_up(a->held - a->limit, g);
        size_t budget = need < host_room ? need : host_room, before = budget;
        st = span_move(a, align_down(v[i]->addr, g), align_up(v[i]->addr + v[i]->size, g), 1,
                       &budget, m);
        host_room -= before - budget;
    }
    free(v);
    return st;
}

/* Host-backed granules back to device memory as far as the limit allows. */
/* Bytes of the host-backed granules that live chunks touch. */
static size_t host_live_bytes(const bfc_arena_t *a)
{
    size_t g = a->granule, n = 0;
    for (bfc_region_t *r = a->regions; r; r = r->next) {
        uintptr_t done = r->base; /* granules below are counted */
        for (bfc_chunk_t *c = r->first; c; c = c->next) {
            if (!c->in_use)
                continue;
            uintptr_t q = align_down(c->addr, g), hi = align_up(c->addr + c->size, g);
            for (q = q > done ? q : done; q < hi; q += g)
                n += granule_on_host(a, q) ? g : 0;
            done = hi > done ? hi : done;
        }
    }
    return n;
}

/* Moves back every host-backed granule a live chunk touches, in address
 * order and the longest runs. */
static vmem_status_t arena_bring_back_all(bfc_arena_t *a, bfc_moves_t *m)
{
    size_t g = a->granule;
    for (bfc_region_t *r = a->regions; r; r = r->next) {
        uintptr_t lo = 0, hi = 0; /* the run being built */
        for (bfc_chunk_t *c = r->first; c; c = c->next) {
            if (!c->in_use)
                continue;
            uintptr_t q = align_down(c->addr, g), end = align_up(c->addr + c->size, g);
            for (; q < end; q += g) {
                if (q < hi || !granule_on_host(a, q))
                    continue;
                if (q != hi && hi > lo) {
                    vmem_status_t st = run_move(a, lo, hi, 0, m);
                    if (st != VMEM_OK)
                        return st;
                    lo = q;
                } else if (hi == lo) {
                    lo = q;
                }
                hi = q + g;
            }
        }
        if (hi > lo) {
            vmem_status_t st = run_move(a, lo, hi, 0, m);
            if (st != VMEM_OK)
                return st;
        }
    }
    return VMEM_OK;
}

/* Live data on host memory (need bytes of granules) back to device memory
 * as far as the limit allows, giving back free device granules for room. */
static vmem_status_t arena_bring_back(bfc_arena_t *a, size_t need, bfc_moves_t *m)
{
    size_t g = a->granule, limit = a->limit > a->others_held ? a->limit - a->others_held : 0;
    if (a->held + need > limit)
        bfc_release(a, limit > need ? limit - need : 0);
    size_t room = a->held < limit ? align_down(limit - a->held, g) : 0;
    if (room == 0)
        return VMEM_OK;
    if (room >= need)
        return arena_bring_back_all(a, m);
    size_t k = 0;
    bfc_chunk_t **v = live_by_age(a, 1, &k);
    vmem_status_t st = VMEM_OK;
    for (size_t i = 0; i < k && st == VMEM_OK && room; i++)
        st = span_move(a, align_down(v[i]->addr, g), align_up(v[i]->addr + v[i]->size, g), 0,
                       &room, m);
    free(v);
    return st;
}

vmem_status_t bfc_rebalance(bfc_arena_t *a, size_t host_room, bfc_moves_t *moves)
{
    bfc_moves_t m = {0};
    vmem_status_t st = VMEM_OK;
    if (!a->hostmap) {
        if (moves)
            *moves = m;
        return VMEM_OK;
    }
    if (a->held > a->limit) {
        bfc_release(a, a->limit);
        if (a->held > a->limit && host_room >= a->granule)
            st = arena_evict(a, host_room, &m);
        if (a->held <= a->limit)
            a->pending = 0;
        else if (st == VMEM_OK)
            st = VMEM_PENDING; /* no host room left: the shrink waits for frees */
    } else if (a->held_host && !a->hold_host) {
        size_t need = host_live_bytes(a);
        if (need)
            st = arena_bring_back(a, need, &m);
    }
    /* Free host memory is kept while the device is short of room (the next
     * step would spill again), given back once everything fits. */
    if (a->held_host && !a->pending && a->held + a->held_host <= a->limit) {
        size_t kept = a->held_host;
        arena_release_host(a);
        m.host_released = kept - a->held_host;
    }
    if (m.to_host || m.to_device) {
        arena_settle_host(a);
        for (bfc_region_t *r = a->regions; r; r = r->next)
            for (bfc_chunk_t *c = r->first; c; c = c->next)
                if (c->in_use)
                    chunk_note_host(a, c);
    }
    if (moves)
        *moves = m;
    return st;
}

size_t bfc_move_unit(const bfc_arena_t *a)
{
    if (!a->hostmap)
        return 0;
    size_t u = a->backend->grow_align;
    return u && u % a->granule == 0 ? u : a->granule;
}

vmem_status_t bfc_move_live(bfc_arena_t *a, const void *p, int to_host, size_t host_room,
                            bfc_moves_t *moves)
{
    bfc_moves_t m = {0};
    size_t u = bfc_move_unit(a);
    bfc_chunk_t *c = u ? map_get(&a->live, (uintptr_t)p) : NULL;
    if (moves)
        *moves = m;
    if (!c)
        return VMEM_ERR_INVALID;
    uintptr_t lo = align_up(c->addr, u), hi = align_down(c->addr + c->size, u);
    if (lo >= hi)
        return VMEM_OK;
    size_t budget;
    if (to_host) {
        budget = align_down(host_room, u);
    } else {
        size_t need = span_host_bytes(a, lo, hi - lo, NULL);
        size_t limit = a->limit > a->others_held ? a->limit - a->others_held : 0;
        if (need == 0 || a->pending)
            return VMEM_OK;
        if (a->held + need > limit)
            bfc_release(a, limit > need ? limit - need : 0);
        budget = a->held < limit ? align_down(limit - a->held, u) : 0;
    }
    vmem_status_t st = span_move(a, lo, hi, to_host, &budget, &m);
    chunk_note_host(a, c);
    if (moves)
        *moves = m;
    return st;
}

/* ------------------------------------------------------------------------ */
/* Pause and resume (allocation tags, src/tags.c)                           */
/* ------------------------------------------------------------------------ */

static int arena_can_pause(const bfc_arena_t *a)
{
    const backend_host_ops_t *h = a->backend->host_ops;
    return a->hostmap && h && h->region_park && h->region_unpark;
}

/* After granules changed backing: free chunks settled, live chunks' host
 * bytes brought up to date. */
static void arena_note_all(bfc_arena_t *a)
{
    arena_settle_host(a);
    for (bfc_region_t *r = a->regions; r; r = r->next)
        for (bfc_chunk_t *c = r->first; c; c = c->next)
            if (c->in_use)
                chunk_note_host(a, c);
}

/* Moves back to the device every granule that snap (a copy of the host map)
 * says was there and that is on host now. */
static void arena_restore(bfc_arena_t *a, const uint8_t *snap, bfc_moves_t *m)
{
    size_t g = a->granule;
    for (bfc_region_t *r = a->regions; r; r = r->next) {
        uintptr_t end = r->base + r->size;
        for (uintptr_t p = r->base; p < end;) {
            size_t i = hostmap_index(a, p);
            if (snap[i] || !a->hostmap[i]) {
                p += g;
                continue;
            }
            uintptr_t e = p + g;
            while (e < end && !snap[hostmap_index(a, e)] && a->hostmap[hostmap_index(a, e)])
                e += g;
            run_move(a, p, e, 0, m); /* what fails stays on host, still valid */
            p = e;
        }
    }
}

/* Pause with keep: every device granule of the arena to host memory. */
static vmem_status_t arena_pause_keep(bfc_arena_t *a, size_t host_room, bfc_moves_t *m)
{
    size_t g = a->granule;
    if (a->held > align_down(host_room, g))
        return VMEM_ERR_NOMEM;
    uint8_t *snap = malloc(a->hostmap_len);
    if (!snap)
        return VMEM_ERR_NOMEM;
    memcpy(snap, a->hostmap, a->hostmap_len);
    vmem_status_t st = VMEM_OK;
    for (bfc_region_t *r = a->regions; r && st == VMEM_OK; r = r->next) {
        uintptr_t end = r->base + r->size;
        for (uintptr_t p = r->base; p < end && st == VMEM_OK;) {
            if (granule_on_host(a, p)) {
                p += g;
                continue;
            }
            uintptr_t e = p + g;
            while (e < end && !granule_on_host(a, e))
                e += g;
            st = run_move(a, p, e, 1, m);
            p = e;
        }
    }
    if (st != VMEM_OK)
        arena_restore(a, snap, m);
    else
        a->paused = BFC_PAUSED_KEEP;
    free(snap);
    arena_note_all(a);
    return st;
}

/* Maps memory again at the parked regions [first, stop) as the host map
 * says (used to undo a failed park or unpark; contents are lost anyway). */
static void regions_unpark_as_mapped(bfc_arena_t *a, bfc_region_t *first, bfc_region_t *stop)
{
    size_t g = a->granule;
    for (bfc_region_t *r = first; r != stop; r = r->next) {
        uintptr_t end = r->base + r->size;
        for (uintptr_t p = r->base; p < end;) {
            int host = a->hostmap[hostmap_index(a, p)] != 0;
            uintptr_t e = p + g;
            while (e < end && (a->hostmap[hostmap_index(a, e)] != 0) == host)
                e += g;
            vmem_status_t st = backend_region_unpark(a->backend, (void *)p, e - p, host);
            assert(st == VMEM_OK && "memory just given back could not be mapped again");
            (void)st;
            p = e;
        }
    }
}

/* Pause with discard: every granule of every region parked. */
static vmem_status_t arena_pause_discard(bfc_arena_t *a)
{
    vmem_status_t st = VMEM_OK;
    bfc_region_t *r = a->regions;
    backend_release_batch(a->backend, 1);
    for (; r && st == VMEM_OK; r = st == VMEM_OK ? r->next : r)
        st = backend_region_park(a->backend, (void *)r->base, r->size);
    backend_release_batch(a->backend, 0);
    if (st != VMEM_OK) {
        regions_unpark_as_mapped(a, a->regions, r);
        return st;
    }
    for (r = a->regions; r; r = r->next)
        hostmap_mark(a, r->base, r->base + r->size, 0);
    a->parked = a->held + a->held_host;
    a->held = a->held_host = 0;
    a->paused = BFC_PAUSED_DISCARD;
    arena_note_all(a);
    return VMEM_OK;
}

vmem_status_t bfc_pause(bfc_arena_t *a, int keep, size_t host_room, bfc_moves_t *moves)
{
    bfc_moves_t m = {0};
    vmem_status_t st = VMEM_OK;
    if (!arena_can_pause(a))
        return VMEM_ERR_UNSUPPORTED;
    if (a->paused == BFC_PAUSED_DISCARD || (a->paused == BFC_PAUSED_KEEP && keep))
        goto out;
    if (!a->paused) {
        /* Free memory goes back first: only live data is kept or parked. */
        bfc_release(a, 0);
        arena_release_host(a);
    }
    st = keep ? arena_pause_keep(a, host_room, &m) : arena_pause_discard(a);
out:
    if (moves)
        *moves = m;
    return st;
}

/* Resume after discard: regions with nothing live go back whole (only
 * their addresses were held); the others get device memory from their
 * lowest address on while room lasts, host memory for the rest. */
static vmem_status_t arena_resume_discard(bfc_arena_t *a, size_t room, int spill,
                                          size_t host_room)
{
    size_t g = a->granule;
    for (bfc_region_t *r = a->regions, *n; r; r = n) {
        n = r->next;
        if (r->live == 0)
            region_release(a, r);
    }
    size_t need = a->parked;
    if (need > room && (!spill || need - room > align_down(host_room, g)))
        return VMEM_ERR_NOMEM;
    size_t left = room;
    vmem_status_t st = VMEM_OK;
    bfc_region_t *r = a->regions;
    for (; r; r = r->next) {
        size_t dev = r->size < left ? r->size : left;
        if (dev) {
            st = backend_region_unpark(a->backend, (void *)r->base, dev, 0);
            if (st != VMEM_OK)
                break;
        }
        if (dev < r->size) {
            st = backend_region_unpark(a->backend, (void *)(r->base + dev), r->size - dev, 1);
            if (st != VMEM_OK) {
                if (dev)
                    backend_region_park(a->backend, (void *)r->base, dev);
                break;
            }
        }
        left -= dev;
    }
    if (st != VMEM_OK) { /* park again what was mapped: still paused */
        for (bfc_region_t *q = a->regions; q != r; q = q->next)
            backend_region_park(a->backend, (void *)q->base, q->size);
        return st;
    }
    a->parked = 0;
    a->paused = 0;
    left = room;
    for (r = a->regions; r; r = r->next) {
        size_t dev = r->size < left ? r->size : left;
        left -= dev;
        held_add(a, dev);
        if (dev < r->size) {
            hostmap_mark(a, r->base + dev, r->base + r->size, 1);
            a->held_host += r->size - dev;
            if (a->held_host > a->peak_held_host)
                a->peak_held_host = a->held_host;
        }
    }
    arena_note_all(a);
    return VMEM_OK;
}

vmem_status_t bfc_resume(bfc_arena_t *a, int spill, size_t host_room, bfc_moves_t *moves)
{
    bfc_moves_t m = {0};
    vmem_status_t st = VMEM_OK;
    size_t limit = a->limit > a->others_held ? a->limit - a->others_held : 0;
    size_t room = a->held < limit ? align_down(limit - a->held, a->granule) : 0;
    if (a->paused == BFC_PAUSED_KEEP) {
        arena_release_host(a); /* free host memory: nothing to bring back */
        size_t need = host_live_bytes(a);
        if (need > room && !spill) {
            st = VMEM_ERR_NOMEM;
        } else {
            a->paused = 0;
            if (need)
                st = arena_bring_back(a, need, &m);
            arena_note_all(a);
        }
    } else if (a->paused == BFC_PAUSED_DISCARD) {
        st = arena_resume_discard(a, room, spill, host_room);
    }
    /* What stays on host (spill, or a failed move) must be usable again
     * after a guarded pause. */
    for (bfc_region_t *r = a->regions; r && !a->paused; r = r->next)
        backend_region_unguard(a->backend, (void *)r->base, r->size);
    if (moves)
        *moves = m;
    return st;
}

/* ------------------------------------------------------------------------ */
/* Lookup                                                                   */
/* ------------------------------------------------------------------------ */

int bfc_contains(const bfc_arena_t *a, const void *p)
{
    return region_find(a, (uintptr_t)p) != NULL;
}

static const bfc_chunk_t *chunk_at(const bfc_arena_t *a, uintptr_t p)
{
    const bfc_region_t *r = region_find(a, p);
    if (!r)
        return NULL;
    for (const bfc_chunk_t *c = r->first; c; c = c->next)
        if (p >= c->addr && p < c->addr + c->size)
            return c;
    return NULL;
}

vmem_status_t bfc_classify(const bfc_arena_t *a, const void *p)
{
    const bfc_chunk_t *c = chunk_at(a, (uintptr_t)p);
    if (c && !c->in_use && ((uintptr_t)p & (BFC_ALIGN - 1)) == 0)
        return VMEM_ERR_DOUBLE_FREE;
    return VMEM_ERR_FOREIGN_PTR;
}

const bfc_chunk_t *bfc_find_live(const bfc_arena_t *a, const void *p)
{
    const bfc_chunk_t *c = map_get(&a->live, (uintptr_t)p);
    if (c)
        return c;
    c = chunk_at(a, (uintptr_t)p);
    return (c && c->in_use) ? c : NULL;
}

/* ------------------------------------------------------------------------ */
/* Checker                                                                  */
/* ------------------------------------------------------------------------ */

static vmem_status_t fail(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return VMEM_ERR_INVALID;
}

/* Host backing: the map marks exactly held_host bytes, all inside regions,
 * and agrees with the backend's own record granule by granule. */
static vmem_status_t hostmap_check(const bfc_arena_t *a, char *why, size_t len)
{
    if (!a->hostmap)
        return a->held_host ? fail(why, len, "host-backed %zu with no host backing", a->held_host)
                            : VMEM_OK;
    size_t g = a->granule, marked = 0, in_regions = 0;
    for (size_t i = 0; i < a->hostmap_len; i++) {
        if (a->hostmap[i] > 1)
            return fail(why, len, "host map entry %zu is %u", i, a->hostmap[i]);
        marked += a->hostmap[i];
    }
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        if (r->base < a->backend->range_base ||
            r->base + r->size > a->backend->range_base + a->hostmap_len * g)
            return fail(why, len, "region %#lx outside the backend's range", (unsigned long)r->base);
        for (uintptr_t p = r->base; p < r->base + r->size; p += g) {
            int host = a->hostmap[(p - a->backend->range_base) / g];
            in_regions += (size_t)host;
            backend_backing_t bk = backend_backing(a->backend, (const void *)p);
            backend_backing_t want = a->paused == BFC_PAUSED_DISCARD ? BACKEND_BACKING_PARKED
                                     : host                          ? BACKEND_BACKING_HOST
                                                                     : BACKEND_BACKING_DEVICE;
            static const char *const names[] = {"none", "device", "host", "parked"};
            if (bk != BACKEND_BACKING_NONE && bk != want)
                return fail(why, len, "granule %#lx: engine says %s, backend says %s",
                            (unsigned long)p, names[want], names[bk]);
            if (a->paused == BFC_PAUSED_KEEP && !host)
                return fail(why, len, "granule %#lx of an arena paused with keep is not on host",
                            (unsigned long)p);
        }
    }
    if (marked != in_regions)
        return fail(why, len, "host map marks %zu granules, %zu of them in regions", marked,
                    in_regions);
    if (marked * g != a->held_host)
        return fail(why, len, "host-backed %zu, host map marks %zu granules", a->held_host, marked);
    if (a->peak_held_host < a->held_host)
        return fail(why, len, "host-backed peak below current value");
    return VMEM_OK;
}

/* Walks treap t in order against the bin's list from *cur (advanced past
 * every chunk visited), checking the heap order of the priorities: 0 if
 * they agree. */
static int treap_walk(const bfc_chunk_t *t, const bfc_chunk_t **cur, unsigned depth)
{
    if (!t)
        return 0;
    if (depth > 4096 || t->prio != chunk_prio(t->addr) || (t->tl && t->tl->prio < t->prio) ||
        (t->tr && t->tr->prio < t->prio))
        return -1;
    if (treap_walk(t->tl, cur, depth + 1) != 0 || *cur != t)
        return -1;
    *cur = t->fnext;
    return treap_walk(t->tr, cur, depth + 1);
}

vmem_status_t bfc_check(const bfc_arena_t *a, char *why, size_t len)
{
    size_t held = 0, in_use = 0, requested = 0, nlive = 0, nfree = 0, nreg = 0;
    size_t host_in_use = 0, host_requested = 0;
    const bfc_region_t *prev_r = NULL;
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        nreg++;
        if (r->prev != prev_r)
            return fail(why, len, "region %#lx: broken prev link", (unsigned long)r->base);
        if (r->base % BFC_ALIGN || r->size % a->granule || r->size == 0 ||
            ((a->backend->flags & BACKEND_F_SPLITTABLE) && r->base % a->granule))
            return fail(why, len, "region %#lx: size %zu not granule-aligned", (unsigned long)r->base,
                        r->size);
        if (prev_r && prev_r->base + prev_r->size > r->base)
            return fail(why, len, "regions %#lx and %#lx overlap or are unsorted",
                        (unsigned long)prev_r->base, (unsigned long)r->base);
        if ((a->backend->flags & BACKEND_F_CONTIGUOUS) && prev_r &&
            prev_r->base + prev_r->size == r->base)
            return fail(why, len, "touching regions %#lx not merged", (unsigned long)r->base);
        held += r->size;
        uintptr_t at = r->base;
        const bfc_chunk_t *pc = NULL;
        size_t live = 0;
        if (!r->first)
            return fail(why, len, "region %#lx has no chunk", (unsigned long)r->base);
        for (const bfc_chunk_t *c = r->first; c; c = c->next) {
            if (c->region != r)
                return fail(why, len, "chunk %#lx: wrong region", (unsigned long)c->addr);
            if (c->prev != pc)
                return fail(why, len, "chunk %#lx: broken prev link", (unsigned long)c->addr);
            if (c->addr != at)
                return fail(why, len, "chunk %#lx: gap or overlap (expected %#lx)",
                            (unsigned long)c->addr, (unsigned long)at);
            if (c->size == 0 || c->size % BFC_ALIGN)
                return fail(why, len, "chunk %#lx: bad size %zu", (unsigned long)c->addr, c->size);
            int device = 1;
            size_t hb = a->hostmap ? span_host_bytes(a, c->addr, c->size, &device) : 0;
            if (c->host_bytes != (c->in_use ? hb : 0))
                return fail(why, len, "chunk %#lx: host bytes %zu, granules say %zu",
                            (unsigned long)c->addr, c->host_bytes, c->in_use ? hb : 0);
            if (!c->in_use && ((c->stream != BFC_STREAM_HOST && hb) || (c->stream == BFC_STREAM_HOST && !hb)))
                return fail(why, len, "free chunk %#lx: stream %#lx with %zu bytes on host",
                            (unsigned long)c->addr, (unsigned long)c->stream, hb);
            if (c->host_bytes) {
                host_in_use += c->host_bytes;
                host_requested += c->requested;
            }
            if (c->in_use) {
                live++;
                in_use += c->size;
                requested += c->requested;
                if (c->requested == 0 || c->requested > c->size)
                    return fail(why, len, "chunk %#lx: requested %zu of %zu", (unsigned long)c->addr,
                                c->requested, c->size);
                if (map_get(&a->live, c->addr) != c)
                    return fail(why, len, "live chunk %#lx missing from map", (unsigned long)c->addr);
            } else {
                nfree++;
                if (c->requested)
                    return fail(why, len, "free chunk %#lx has requested bytes", (unsigned long)c->addr);
                if (c->bin != bfc_bin_index(c->size))
                    return fail(why, len, "free chunk %#lx in wrong bin", (unsigned long)c->addr);
                const bfc_chunk_t *x = a->bins[c->bin];
                while (x && x != c)
                    x = x->fnext;
                if (!x)
                    return fail(why, len, "free chunk %#lx not in its bin", (unsigned long)c->addr);
                if (pc && !pc->in_use && pc->stream == c->stream)
                    return fail(why, len, "free chunks %#lx and %#lx not coalesced",
                                (unsigned long)pc->addr, (unsigned long)c->addr);
            }
            at += c->size;
            pc = c;
        }
        if (at != r->base + r->size)
            return fail(why, len, "region %#lx: chunks end at %#lx, region at %#lx",
                        (unsigned long)r->base, (unsigned long)at, (unsigned long)(r->base + r->size));
        if (live != r->live)
            return fail(why, len, "region %#lx: live count %zu, counted %zu", (unsigned long)r->base,
                        r->live, live);
        nlive += live;
        prev_r = r;
    }
    if (nreg != a->nregions)
        return fail(why, len, "region count %zu, counted %zu", a->nregions, nreg);
    if (held != a->held + a->held_host + a->parked)
        return fail(why, len, "held %zu + host-backed %zu + parked %zu, regions sum to %zu",
                    a->held, a->held_host, a->parked, held);
    if (a->paused != 0 && a->paused != BFC_PAUSED_KEEP && a->paused != BFC_PAUSED_DISCARD)
        return fail(why, len, "paused is %d", a->paused);
    if (a->paused ? a->held != 0 : a->parked != 0)
        return fail(why, len, "paused %d with %zu held, %zu parked", a->paused, a->held, a->parked);
    if (a->paused == BFC_PAUSED_DISCARD && a->held_host)
        return fail(why, len, "paused with discard, %zu bytes on host", a->held_host);
    vmem_status_t hst = hostmap_check(a, why, len);
    if (hst != VMEM_OK)
        return hst;
    if (in_use != a->in_use)
        return fail(why, len, "in_use %zu, chunks sum to %zu", a->in_use, in_use);
    if (requested != a->requested)
        return fail(why, len, "requested %zu, chunks sum to %zu", a->requested, requested);
    if (host_in_use != a->host_in_use || host_requested != a->host_requested)
        return fail(why, len, "on-host in use %zu requested %zu, chunks sum to %zu/%zu",
                    a->host_in_use, a->host_requested, host_in_use, host_requested);
    if (nlive != a->live.count)
        return fail(why, len, "live map holds %zu, chunks in use %zu", a->live.count, nlive);
    if (nfree != a->nchunks_free)
        return fail(why, len, "bins hold %zu chunks, regions %zu free", a->nchunks_free, nfree);
    size_t binned = 0;
    for (unsigned b = 0; b < BFC_NBINS; b++) {
        int bit = (a->bitmap[b >> 6] >> (b & 63)) & 1;
        if (bit != (a->bins[b] != NULL))
            return fail(why, len, "bin %u bitmap bit %d disagrees", b, bit);
        for (const bfc_chunk_t *c = a->bins[b]; c; c = c->fnext) {
            binned++;
            if (c->in_use || c->bin != b || !c->region)
                return fail(why, len, "bin %u holds a bad chunk %#lx", b, (unsigned long)c->addr);
            if (c->fnext && c->fnext->fprev != c)
                return fail(why, len, "bin %u: broken list", b);
            if (c->fnext && !chunk_before(c, c->fnext))
                return fail(why, len, "bin %u: %#lx before %#lx, out of (size, address) order", b,
                            (unsigned long)c->addr, (unsigned long)c->fnext->addr);
            if (!c->fnext && a->bin_tails[b] != c)
                return fail(why, len, "bin %u: its tail is not its last chunk %#lx", b,
                            (unsigned long)c->addr);
        }
        if (!a->bins[b] && a->bin_tails[b])
            return fail(why, len, "bin %u: empty with a tail", b);
        if (!a->bins[b] && a->bin_roots[b])
            return fail(why, len, "bin %u: empty with a treap", b);
        const bfc_chunk_t *cur = a->bins[b];
        if (a->bin_roots[b] && (treap_walk(a->bin_roots[b], &cur, 0) != 0 || cur))
            return fail(why, len, "bin %u: its treap disagrees with its list", b);
    }
    for (unsigned w = 0; w < BFC_NWORDS; w++)
        if (((a->top >> w) & 1) != (a->bitmap[w] != 0))
            return fail(why, len, "top bitmap word %u disagrees", w);
    if (binned != nfree)
        return fail(why, len, "bins hold %zu chunks, regions %zu free", binned, nfree);
    if (a->held > a->limit && !a->pending)
        return fail(why, len, "held %zu over limit %zu with no shrink pending", a->held, a->limit);
    if (a->peak_held < a->held || a->peak_in_use < a->in_use)
        return fail(why, len, "peaks below current values");
    return VMEM_OK;
}
