/* Backend wrappers (fault injection, contract checks) and the simulated
 * device and plain-host backends, which need no GPU. */
#include "backend.h"

#include <assert.h>
#include <stdio.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmem_internal.h"

#define SIM_GRANULE ((size_t)2 << 20)
#define SIM_MAX_CAPACITY VMEM_SIM_CAPACITY_MAX
#define SIM_HOST_RANGE ((size_t)64 << 30) /* sim-vmm: room in the range for host
                                             memory mapped in place (the default
                                             host limit) */

/* ------------------------------------------------------------------------ */
/* Wrappers                                                                 */
/* ------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static int faults_fire(backend_faults_t *f)
{
    if (f->countdown) {
        if (--f->countdown == 0)
            return 1;
    }
    if (f->rate > 0) {
        double u = (double)(rng_next(&f->rng) >> 11) / 9007199254740992.0;
        if (u < f->rate)
            return 1;
    }
    return 0;
}

void backend_set_faults(backend_t *b, uint64_t nth, double rate, uint64_t seed)
{
    b->faults.countdown = nth;
    b->faults.rate = rate < 0 ? 0 : rate;
    b->faults.rng = seed ? seed : 0x2545F4914F6CDD1Dull;
}

static _Thread_local int capturing;

int backend_capture_begin(int on)
{
    int prev = capturing;
    capturing = on;
    return prev;
}

int backend_capturing(void) { return capturing; }

size_t backend_flush_deferred(backend_t *b)
{
    if (capturing || !b->ndeferred)
        return 0;
    size_t bytes = 0, n = b->ndeferred;
    b->ndeferred = 0; /* region_free below must not see them again */
    backend_release_batch(b, 1);
    for (size_t i = 0; i < n; i++) {
        b->ops->region_free(b, b->deferred[i].base, b->deferred[i].size);
        bytes += b->deferred[i].size;
    }
    backend_release_batch(b, 0);
    return bytes;
}

/* Keeps a free made during a capture for later; 0 if it could not (no
 * memory for the list: the free then happens now). */
static int defer_free(backend_t *b, void *base, size_t size)
{
    if (b->ndeferred == b->deferred_cap) {
        size_t cap = b->deferred_cap ? 2 * b->deferred_cap : 16;
        void *q = realloc(b->deferred, cap * sizeof *b->deferred);
        if (!q)
            return 0;
        b->deferred = q;
        b->deferred_cap = cap;
    }
    b->deferred[b->ndeferred].base = base;
    b->deferred[b->ndeferred].size = size;
    b->ndeferred++;
    return 1;
}

vmem_status_t backend_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    assert(size > 0 && size % b->granule == 0);
    backend_flush_deferred(b);
    b->requests++;
    if (faults_fire(&b->faults)) {
        b->failures++;
        return VMEM_ERR_BACKEND;
    }
    void *p = NULL;
    vmem_status_t st = b->ops->region_alloc(b, size, hint, &p);
    if (st != VMEM_OK) {
        b->failures++;
        return st;
    }
    assert(p != NULL && (uintptr_t)p % 256 == 0);
    assert(!(b->flags & BACKEND_F_SPLITTABLE) || (uintptr_t)p % b->granule == 0);
    *base = p;
    return VMEM_OK;
}

void backend_region_free(backend_t *b, void *base, size_t size)
{
    assert(base && size % b->granule == 0 && (uintptr_t)base % 256 == 0);
    if (capturing && defer_free(b, base, size))
        return;
    backend_flush_deferred(b);
    b->ops->region_free(b, base, size);
}

vmem_status_t backend_region_remap(backend_t *b, void *src, size_t size, void *hint, void **dst)
{
    assert(src && size > 0 && size % b->granule == 0 && (uintptr_t)src % b->granule == 0);
    if (!b->ops->region_remap)
        return VMEM_ERR_UNSUPPORTED;
    b->requests++;
    if (faults_fire(&b->faults)) {
        b->failures++;
        return VMEM_ERR_BACKEND;
    }
    void *p = NULL;
    vmem_status_t st = b->ops->region_remap(b, src, size, hint, &p);
    if (st != VMEM_OK) {
        b->failures++;
        return st;
    }
    assert(p != NULL && (uintptr_t)p % b->granule == 0);
    *dst = p;
    return VMEM_OK;
}

void backend_remap_span(const backend_t *b, uintptr_t *lo, uintptr_t *hi)
{
    if (!b->ops->region_remap || !b->ops->remap_span) {
        *hi = *lo;
        return;
    }
    b->ops->remap_span(b, lo, hi);
}

vmem_status_t backend_region_alloc_host(backend_t *b, size_t size, void *hint, void **base)
{
    assert(size > 0 && size % b->granule == 0);
    if (!b->host_ops)
        return VMEM_ERR_UNSUPPORTED;
    backend_flush_deferred(b);
    backend_t *peer = b->host_peer ? b->host_peer : b;
    peer->requests++;
    if (faults_fire(&peer->faults)) {
        peer->failures++;
        return VMEM_ERR_BACKEND;
    }
    void *p = NULL;
    vmem_status_t st = b->host_ops->region_alloc_host(b, size, hint, &p);
    if (st != VMEM_OK) {
        peer->failures++;
        return st;
    }
    assert(p != NULL && (uintptr_t)p % b->granule == 0);
    *base = p;
    return VMEM_OK;
}

vmem_status_t backend_region_move(backend_t *b, void *base, size_t size, int to_host,
                                  size_t *moved)
{
    assert(base && size > 0 && size % b->granule == 0 && (uintptr_t)base % b->granule == 0);
    *moved = 0;
    if (!b->host_ops)
        return VMEM_ERR_UNSUPPORTED;
    if (capturing)
        return VMEM_ERR_BUSY; /* a move waits for the device */
    backend_flush_deferred(b);
    backend_t *side = to_host && b->host_peer ? b->host_peer : b;
    side->requests++;
    if (faults_fire(&side->faults)) {
        side->failures++;
        return VMEM_ERR_BACKEND;
    }
    vmem_status_t st = b->host_ops->region_move(b, base, size, to_host, moved);
    assert(*moved % b->granule == 0 && *moved <= size && (st != VMEM_OK || *moved == size));
    if (st != VMEM_OK)
        side->failures++;
    return st;
}

backend_backing_t backend_backing(const backend_t *b, const void *addr)
{
    return b->host_ops ? b->host_ops->backing(b, addr) : BACKEND_BACKING_NONE;
}

vmem_status_t backend_region_park(backend_t *b, void *base, size_t size)
{
    assert(base && size > 0 && size % b->granule == 0 && (uintptr_t)base % b->granule == 0);
    if (!b->host_ops || !b->host_ops->region_park)
        return VMEM_ERR_UNSUPPORTED;
    if (capturing)
        return VMEM_ERR_BUSY; /* a park waits for the device */
    backend_flush_deferred(b);
    return b->host_ops->region_park(b, base, size);
}

vmem_status_t backend_region_unpark(backend_t *b, void *base, size_t size, int to_host)
{
    assert(base && size > 0 && size % b->granule == 0 && (uintptr_t)base % b->granule == 0);
    if (!b->host_ops || !b->host_ops->region_unpark)
        return VMEM_ERR_UNSUPPORTED;
    backend_t *side = to_host && b->host_peer ? b->host_peer : b;
    side->requests++;
    if (faults_fire(&side->faults)) {
        side->failures++;
        return VMEM_ERR_BACKEND;
    }
    vmem_status_t st = b->host_ops->region_unpark(b, base, size, to_host);
    if (st != VMEM_OK)
        side->failures++;
    return st;
}

vmem_status_t backend_host_reserve(backend_t *b, size_t bytes, size_t *kept)
{
    *kept = 0;
    if (!b->host_ops || !b->host_ops->host_reserve)
        return VMEM_ERR_UNSUPPORTED;
    return b->host_ops->host_reserve(b, bytes, kept);
}

void backend_region_unguard(backend_t *b, void *base, size_t size)
{
    if (b->host_ops && b->host_ops->region_unguard)
        b->host_ops->region_unguard(b, base, size);
}

vmem_status_t backend_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    return b->ops->mem_info(b, free_bytes, total_bytes);
}

void backend_destroy(backend_t *b)
{
    if (!b)
        return;
    int was = backend_capture_begin(0);
    backend_flush_deferred(b);
    backend_capture_begin(was);
    free(b->deferred);
    b->deferred = NULL;
    b->ops->destroy(b);
}

/* ------------------------------------------------------------------------ */
/* Simulated device                                                         */
/* ------------------------------------------------------------------------ */

/*
 * A reserved, inaccessible virtual range (PROT_NONE, no memory behind it);
 * regions are granule runs made readable and writable on allocation and
 * made inaccessible again when given back, so untouched memory costs nothing
 * and a stray access to given-back memory faults.
 *
 * sim: granules are private anonymous pages (mprotect on and off); one
 * unused guard granule follows each region, as separate cudaMalloc blocks.
 *
 * sim-vmm: the "physical memory" is two memory files, one for the device and
 * one for the host; granule i of the range maps page range [i*G, (i+1)*G) of
 * the file that backs it (MAP_SHARED, same offset in both files).  Giving a
 * granule back punches a hole in its file, so its pages are freed; moving a
 * granule to the other side copies its pages into the other file and
 * replaces the mapping (mremap), so the address stays and the data moves
 * for real -- a move that forgot to copy would lose it.  Only pages that
 * hold data are copied (SEEK_DATA), so a simulated 80 GiB device costs what
 * was written.  Without memory files (memfd_create refused), sim-vmm falls
 * back to anonymous pages and has no host backing.
 *
 * A paused tag's granules may be parked (region_park): still handed out,
 * nothing mapped (the range is inaccessible there, so a stray access
 * faults), no pages in either file.
 *
 * Invariants: host and parked are disjoint subsets of used; in_use ==
 * popcount(used & ~host & ~parked) * granule <= capacity; host_in_use ==
 * popcount(host) * granule; a granule that is not used, or parked, has no
 * pages in either file.
 */
typedef struct sim_backend {
    backend_t base;
    char *va;
    size_t va_size;
    size_t ngranules;
    uint64_t *used;     /* granule handed out */
    uint64_t *host;     /* granule handed out and backed by host memory */
    uint64_t *parked;   /* granule handed out, nothing mapped (paused) */
    /* VMEM_SIM_BIG (sim-vmm, for studies of remaps): device memory mapped in
     * big handles of bign granules where a region covers a whole aligned
     * block, as vmm's 64 MiB handles: a remap moves a big handle whole and
     * only by a multiple of its size; giving back part of one splits it
     * (the rest becomes granules).  0: granules only. */
    uint64_t *big;      /* granule inside a big handle */
    size_t bign;
    size_t capacity;
    size_t in_use;      /* device-backed bytes handed out */
    size_t host_in_use; /* host-backed bytes handed out */
    int fd[2];          /* sim-vmm: device and host memory files; -1 if none */
    int vmm;
} sim_backend_t;

enum { SIM_DEV = 0, SIM_HOST = 1 };

static int bit_get(const uint64_t *m, size_t i) { return (int)((m[i >> 6] >> (i & 63)) & 1); }

static void bits_set(uint64_t *m, size_t first, size_t n, int on)
{
    for (size_t i = first; i < first + n; i++) {
        if (on)
            m[i >> 6] |= 1ull << (i & 63);
        else
            m[i >> 6] &= ~(1ull << (i & 63));
    }
}

static int sim_run_free(const sim_backend_t *s, size_t first, size_t n)
{
    if (first + n > s->ngranules)
        return 0;
    for (size_t i = first; i < first + n; i++)
        if (bit_get(s->used, i))
            return 0;
    return 1;
}

/* First granule of a free run of n (plus guard granules for sim) at the hint
 * if it is free there, else the lowest such run; SIZE_MAX if none. */
static size_t sim_find_run(const sim_backend_t *s, size_t n, void *hint)
{
    size_t guard = s->vmm ? 0 : 1;
    if (hint && (char *)hint >= s->va && (char *)hint < s->va + s->va_size) {
        size_t h = (size_t)((char *)hint - s->va) / SIM_GRANULE;
        if (sim_run_free(s, h, n))
            return h;
    }
    for (size_t i = 0; i + n + guard <= s->ngranules;) {
        size_t j = 0;
        while (j < n + guard && !bit_get(s->used, i + j))
            j++;
        if (j == n + guard)
            return i;
        i += j + 1;
    }
    return SIZE_MAX;
}

/* Maps [p, p + len) to the same offsets of memory file `side`. */
static int sim_map_file(sim_backend_t *s, char *p, size_t len, int side)
{
    void *m = mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->fd[side],
                   (off_t)(p - s->va));
    return m == MAP_FAILED ? -1 : 0;
}

/* Turns [p, p + len) back into inaccessible reservation. */
static void sim_unmap(sim_backend_t *s, char *p, size_t len)
{
    (void)s;
    void *m = mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    assert(m != MAP_FAILED);
    (void)m;
}

static void sim_punch(sim_backend_t *s, int side, size_t off, size_t len)
{
    int r = fallocate(s->fd[side], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
    assert(r == 0);
    (void)r;
}

static vmem_status_t sim_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    sim_backend_t *s = (sim_backend_t *)b;
    if (size > s->capacity - s->in_use)
        return VMEM_ERR_NOMEM;
    size_t n = size / SIM_GRANULE;
    size_t first = sim_find_run(s, n, hint);
    if (first == SIZE_MAX)
        return VMEM_ERR_NOMEM;
    char *p = s->va + first * SIM_GRANULE;
    int r = s->fd[SIM_DEV] >= 0 ? sim_map_file(s, p, size, SIM_DEV)
                                : mprotect(p, size, PROT_READ | PROT_WRITE);
    if (r != 0)
        return VMEM_ERR_BACKEND;
    bits_set(s->used, first, n, 1);
    if (s->bign)
        for (size_t i = (first + s->bign - 1) / s->bign * s->bign; i + s->bign <= first + n;
             i += s->bign)
            bits_set(s->big, i, s->bign, 1);
    s->in_use += size;
    *base = p;
    return VMEM_OK;
}

/* VMEM_SIM_BIG: the big handles [first, first + n) cuts lose what lies in it
 * and the rest becomes granules (a split, as vmm's partial release). */
static void sim_big_cut(sim_backend_t *s, size_t first, size_t n)
{
    if (!s->bign)
        return;
    for (size_t i = first - first % s->bign; i < first + n; i += s->bign)
        if (bit_get(s->big, i))
            bits_set(s->big, i, s->bign, 0);
}

static vmem_status_t sim_region_alloc_host(backend_t *b, size_t size, void *hint, void **base)
{
    sim_backend_t *s = (sim_backend_t *)b;
    size_t n = size / SIM_GRANULE;
    size_t first = sim_find_run(s, n, hint);
    if (first == SIZE_MAX)
        return VMEM_ERR_NOMEM;
    char *p = s->va + first * SIM_GRANULE;
    if (sim_map_file(s, p, size, SIM_HOST) != 0)
        return VMEM_ERR_BACKEND;
    bits_set(s->used, first, n, 1);
    bits_set(s->host, first, n, 1);
    s->host_in_use += size;
    *base = p;
    return VMEM_OK;
}

static void sim_region_free(backend_t *b, void *base, size_t size)
{
    sim_backend_t *s = (sim_backend_t *)b;
    size_t first = (size_t)((char *)base - s->va) / SIM_GRANULE, n = size / SIM_GRANULE;
    assert((char *)base >= s->va && first + n <= s->ngranules);
    sim_big_cut(s, first, n);
    if (s->fd[SIM_DEV] < 0) {
        for (size_t i = first; i < first + n; i++)
            assert(bit_get(s->used, i));
        madvise(base, size, MADV_DONTNEED);
        mprotect(base, size, PROT_NONE);
        bits_set(s->used, first, n, 0);
        s->in_use -= size;
        return;
    }
    /* Runs of one backing at a time. */
    for (size_t i = first; i < first + n;) {
        assert(bit_get(s->used, i));
        if (bit_get(s->parked, i)) { /* nothing mapped, nothing held */
            bits_set(s->parked, i, 1, 0);
            i++;
            continue;
        }
        int side = bit_get(s->host, i);
        size_t j = i + 1;
        while (j < first + n && bit_get(s->host, j) == side && !bit_get(s->parked, j))
            j++;
        size_t off = i * SIM_GRANULE, len = (j - i) * SIM_GRANULE;
        sim_unmap(s, s->va + off, len);
        sim_punch(s, side, off, len);
        if (side == SIM_HOST)
            s->host_in_use -= len;
        else
            s->in_use -= len;
        i = j;
    }
    bits_set(s->used, first, n, 0);
    bits_set(s->host, first, n, 0);
}

/* sim-vmm: [lo, hi) if every granule in it is handed out and device-backed
 * (nothing parked or on host), else nothing; mappings are granules here. */
static void sim_remap_span(const backend_t *b, uintptr_t *lo, uintptr_t *hi)
{
    const sim_backend_t *s = (const sim_backend_t *)b;
    if (*hi <= *lo || *lo < (uintptr_t)s->va || *hi > (uintptr_t)s->va + s->va_size) {
        *hi = *lo;
        return;
    }
    size_t first = (*lo - (uintptr_t)s->va) / SIM_GRANULE, end = (*hi - (uintptr_t)s->va) / SIM_GRANULE;
    if (s->bign) { /* whole big handles only: one cut by an edge stays */
        if (bit_get(s->big, first) && first % s->bign)
            first += s->bign - first % s->bign;
        if (end > first && bit_get(s->big, end - 1) && end % s->bign)
            end -= end % s->bign;
        if (end <= first) {
            *hi = *lo;
            return;
        }
        *lo = (uintptr_t)s->va + first * SIM_GRANULE;
        *hi = (uintptr_t)s->va + end * SIM_GRANULE;
    }
    for (size_t i = first; i < end; i++)
        if (!bit_get(s->used, i) || bit_get(s->host, i) || bit_get(s->parked, i)) {
            *hi = *lo;
            return;
        }
}

/* sim-vmm's remap: the simulated device has no queue to wait for, so the
 * free memory is given back and as much mapped at the new run (its pages,
 * file offsets of their addresses, start empty: contents undefined). */
static vmem_status_t sim_region_remap(backend_t *b, void *src, size_t size, void *hint, void **dst)
{
    sim_backend_t *s = (sim_backend_t *)b;
    uintptr_t lo = (uintptr_t)src, hi = lo + size;
    sim_remap_span(b, &lo, &hi);
    if (hi != (uintptr_t)src + size)
        return VMEM_ERR_UNSUPPORTED;
    /* VMEM_SIM_BIG: the big handles move whole, by a multiple of their size */
    size_t first = (size_t)((char *)src - s->va) / SIM_GRANULE, n = size / SIM_GRANULE;
    size_t nbig = 0, *bigs = NULL;
    if (s->bign) {
        for (size_t i = first; i < first + n; i++)
            nbig += bit_get(s->big, i) && i % s->bign == 0;
        if (nbig && !(bigs = malloc(nbig * sizeof *bigs)))
            return VMEM_ERR_NOMEM;
        nbig = 0;
        for (size_t i = first; i < first + n; i++)
            if (bit_get(s->big, i) && i % s->bign == 0)
                bigs[nbig++] = i - first;
    }
    sim_region_free(b, src, size);
    vmem_status_t st = sim_region_alloc(b, size, hint, dst);
    size_t to = first;
    if (st == VMEM_OK) {
        to = (size_t)((char *)*dst - s->va) / SIM_GRANULE;
        if (nbig && (to - first) % s->bign != 0) {
            sim_region_free(b, *dst, size);
            st = VMEM_ERR_UNSUPPORTED;
            to = first;
        }
    }
    if (st != VMEM_OK) { /* the range just freed is free: back where it was */
        void *back = NULL;
        vmem_status_t r = sim_region_alloc(b, size, src, &back);
        assert(r == VMEM_OK && back == src);
        (void)r;
    }
    if (s->bign) { /* the handles as they were, at their new (or old) place */
        bits_set(s->big, to, n, 0);
        for (size_t k = 0; k < nbig; k++)
            bits_set(s->big, to + bigs[k], s->bign, 1);
    }
    free(bigs);
    return st;
}

/* Copies the pages of [off, off + len) that hold data in file `from` (read
 * through the range) to dst. */
static void sim_copy_data(sim_backend_t *s, int from, size_t off, size_t len, char *dst)
{
    off_t pos = (off_t)off, end = (off_t)(off + len);
    while (pos < end) {
        off_t d = lseek(s->fd[from], pos, SEEK_DATA);
        if (d < 0 || d >= end)
            break;
        off_t h = lseek(s->fd[from], d, SEEK_HOLE);
        if (h < 0 || h > end)
            h = end;
        memcpy(dst + (d - (off_t)off), s->va + d, (size_t)(h - d));
        pos = h;
    }
}

static vmem_status_t sim_region_move(backend_t *b, void *base, size_t size, int to_host,
                                     size_t *moved)
{
    sim_backend_t *s = (sim_backend_t *)b;
    size_t off = (size_t)((char *)base - s->va), first = off / SIM_GRANULE, n = size / SIM_GRANULE;
    int from = to_host ? SIM_DEV : SIM_HOST, to = to_host ? SIM_HOST : SIM_DEV;
    if ((char *)base < s->va || first + n > s->ngranules)
        return VMEM_ERR_INVALID;
    for (size_t i = first; i < first + n; i++)
        if (!bit_get(s->used, i) || bit_get(s->parked, i) || bit_get(s->host, i) != from)
            return VMEM_ERR_INVALID;
    if (!to_host && size > s->capacity - s->in_use)
        return VMEM_ERR_NOMEM;
    if (!to_host && mprotect(base, size, PROT_READ | PROT_WRITE) != 0) /* a guarded pause's */
        return VMEM_ERR_BACKEND;
    /* The new backing, mapped elsewhere; copy; then it replaces the old. */
    char *stage = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd[to], (off_t)off);
    if (stage == MAP_FAILED)
        return VMEM_ERR_BACKEND;
    sim_copy_data(s, from, off, size, stage);
    if (mremap(stage, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, base) == MAP_FAILED) {
        munmap(stage, size);
        sim_punch(s, to, off, size);
        return VMEM_ERR_BACKEND;
    }
    sim_punch(s, from, off, size);
    if (to_host)
        sim_big_cut(s, first, n); /* big handles are device memory */
    if (to_host && b->move_guard)
        mprotect(base, size, PROT_NONE); /* a stray access to the paused block faults */
    bits_set(s->host, first, n, to_host);
    if (to_host) {
        s->in_use -= size;
        s->host_in_use += size;
    } else {
        s->in_use += size;
        s->host_in_use -= size;
    }
    *moved = size;
    return VMEM_OK;
}

/* Host granules of [base, base + size) readable and writable again. */
static void sim_region_unguard(backend_t *b, void *base, size_t size)
{
    sim_backend_t *s = (sim_backend_t *)b;
    size_t first = (size_t)((char *)base - s->va) / SIM_GRANULE, n = size / SIM_GRANULE;
    if ((char *)base < s->va || first + n > s->ngranules)
        return;
    for (size_t i = first; i < first + n; i++)
        if (bit_get(s->used, i) && bit_get(s->host, i) && !bit_get(s->parked, i))
            mprotect(s->va + i * SIM_GRANULE, SIM_GRANULE, PROT_READ | PROT_WRITE);
}

static backend_backing_t sim_backing(const backend_t *b, const void *addr)
{
    const sim_backend_t *s = (const sim_backend_t *)b;
    if ((const char *)addr < s->va || (const char *)addr >= s->va + s->va_size)
        return BACKEND_BACKING_NONE;
    size_t i = (size_t)((const char *)addr - s->va) / SIM_GRANULE;
    if (!bit_get(s->used, i))
        return BACKEND_BACKING_NONE;
    if (bit_get(s->parked, i))
        return BACKEND_BACKING_PARKED;
    return bit_get(s->host, i) ? BACKEND_BACKING_HOST : BACKEND_BACKING_DEVICE;
}

/* The checks of park and unpark: [base, base + size) lies in the range and
 * every granule of it is handed out and parked (want 1) or not (0). */
static int sim_run_is(const sim_backend_t *s, const void *base, size_t size, int want)
{
    size_t first = (size_t)((const char *)base - s->va) / SIM_GRANULE, n = size / SIM_GRANULE;
    if ((const char *)base < s->va || first + n > s->ngranules)
        return 0;
    for (size_t i = first; i < first + n; i++)
        if (!bit_get(s->used, i) || bit_get(s->parked, i) != want)
            return 0;
    return 1;
}

static vmem_status_t sim_region_park(backend_t *b, void *base, size_t size)
{
    sim_backend_t *s = (sim_backend_t *)b;
    if (!sim_run_is(s, base, size, 0))
        return VMEM_ERR_INVALID;
    size_t first = (size_t)((char *)base - s->va) / SIM_GRANULE, n = size / SIM_GRANULE;
    sim_big_cut(s, first, n);
    for (size_t i = first; i < first + n; i++) {
        size_t off = i * SIM_GRANULE;
        int side = bit_get(s->host, i);
        sim_unmap(s, s->va + off, SIM_GRANULE);
        sim_punch(s, side, off, SIM_GRANULE);
        if (side == SIM_HOST)
            s->host_in_use -= SIM_GRANULE;
        else
            s->in_use -= SIM_GRANULE;
    }
    bits_set(s->host, first, n, 0);
    bits_set(s->parked, first, n, 1);
    return VMEM_OK;
}

static vmem_status_t sim_region_unpark(backend_t *b, void *base, size_t size, int to_host)
{
    sim_backend_t *s = (sim_backend_t *)b;
    if (!sim_run_is(s, base, size, 1))
        return VMEM_ERR_INVALID;
    if (!to_host && size > s->capacity - s->in_use)
        return VMEM_ERR_NOMEM;
    if (sim_map_file(s, base, size, to_host ? SIM_HOST : SIM_DEV) != 0) {
        sim_unmap(s, base, size);
        return VMEM_ERR_BACKEND;
    }
    size_t first = (size_t)((char *)base - s->va) / SIM_GRANULE, n = size / SIM_GRANULE;
    bits_set(s->parked, first, n, 0);
    bits_set(s->host, first, n, to_host);
    if (to_host)
        s->host_in_use += size;
    else
        s->in_use += size;
    return VMEM_OK;
}

static vmem_status_t sim_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    sim_backend_t *s = (sim_backend_t *)b;
    *free_bytes = s->capacity - s->in_use;
    *total_bytes = s->capacity;
    return VMEM_OK;
}

static void sim_destroy(backend_t *b)
{
    sim_backend_t *s = (sim_backend_t *)b;
    munmap(s->va, s->va_size);
    for (int i = 0; i < 2; i++)
        if (s->fd[i] >= 0)
            close(s->fd[i]);
    free(s->used);
    free(s->host);
    free(s->parked);
    free(s->big);
    free(s);
}

static const backend_ops_t sim_ops = {sim_region_alloc, sim_region_free, sim_mem_info, sim_destroy,
                                      NULL, NULL};
static const backend_ops_t sim_vmm_ops = {sim_region_alloc, sim_region_free, sim_mem_info,
                                          sim_destroy, sim_region_remap, sim_remap_span};
static const backend_host_ops_t sim_host_ops = {sim_region_alloc_host, sim_region_move, sim_backing,
                                                sim_region_park, sim_region_unpark, NULL,
                                                sim_region_unguard};

/* Opens the two memory files of sim-vmm, each as large as the range (sparse:
 * they cost what is written).  Returns 0, or -1 with both left closed. */
static int sim_files_open(sim_backend_t *s)
{
    for (int i = 0; i < 2; i++) {
        s->fd[i] = memfd_create(i == SIM_DEV ? "vmem-sim-device" : "vmem-sim-host", MFD_CLOEXEC);
        if (s->fd[i] < 0 || ftruncate(s->fd[i], (off_t)s->va_size) != 0) {
            for (int j = 0; j <= i; j++) {
                if (s->fd[j] >= 0)
                    close(s->fd[j]);
                s->fd[j] = -1;
            }
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Settings of vmm and sim-vmm from the environment (backend.h)             */
/* ------------------------------------------------------------------------ */

/* Environment variable `name` as a boolean, dflt when unset. */
static vmem_status_t env_bool(const char *name, int dflt, int *out)
{
    const char *val = getenv(name);
    *out = dflt;
    if (val && options_parse_bool(val, out) != 0) {
        vmem_log(NULL, VMEM_LOG_ERROR, "invalid %s=\"%s\" (expected on or off)", name, val);
        return VMEM_ERR_ENV;
    }
    return VMEM_OK;
}

/* Environment variable `name` as a number of threads from 1 to max, dflt
 * when unset. */
static vmem_status_t env_threads(const char *name, int dflt, int max, int *out)
{
    const char *val = getenv(name);
    *out = dflt;
    if (!val)
        return VMEM_OK;
    uint64_t n = 0;
    if (options_parse_u64(val, &n) != 0 || n < 1 || n > (uint64_t)max) {
        vmem_log(NULL, VMEM_LOG_ERROR, "invalid %s=\"%s\" (expected a number of threads, 1 to %d)",
                 name, val, max);
        return VMEM_ERR_ENV;
    }
    *out = (int)n;
    return VMEM_OK;
}

/* s as a number of MiB, 0 or a power of two up to hi, in bytes. */
static int mib_parse(const char *s, uint64_t hi, size_t *bytes)
{
    uint64_t v = 0;
    if (options_parse_u64(s, &v) != 0 || v > hi || (v & (v - 1)) != 0)
        return -1;
    *bytes = (size_t)v << 20;
    return 0;
}

vmem_status_t backend_grow_align_from_env(int *on)
{
    return env_bool("VMEM_VMM_GROW_ALIGN", 1, on);
}

/* Variable `name` as the size of a handle made of `unit`-byte ones (NULL:
 * unset, dflt): MiB, a power of two up to cap_mib, at least `floor` bytes,
 * 2 to max_units whole units (`what`: their name in the error); with
 * zero_off, 0 (off) too. */
static vmem_status_t handle_mib_from_env(const char *name, size_t dflt, size_t unit,
                                         const char *what, int max_units, size_t floor,
                                         uint64_t cap_mib, int zero_off, size_t *bytes)
{
    *bytes = dflt;
    const char *e = getenv(name);
    if (!e)
        return VMEM_OK;
    size_t lo = 2 * unit > floor ? 2 * unit : floor, cap = (size_t)cap_mib << 20;
    size_t hi = (size_t)max_units * unit < cap ? (size_t)max_units * unit : cap;
    size_t v = 0;
    if (mib_parse(e, cap_mib, &v) != 0 ||
        ((v != 0 || !zero_off) && (v < lo || v > hi || v % unit != 0))) {
        vmem_log(NULL, VMEM_LOG_ERROR,
                 "invalid %s=\"%s\" (expected %sMiB, a power of two from %zu to %zu: 2 to %d %s "
                 "of %zu MiB)",
                 name, e, zero_off ? "0 (off), or " : "", lo >> 20, hi >> 20, max_units, what,
                 unit >> 20);
        return VMEM_ERR_ENV;
    }
    *bytes = v;
    return VMEM_OK;
}

/* VMEM_VMM_BIG_MIB: 4 to 1024 MiB, and 2 to BACKEND_VMM_BIG_MAX granules
 * (4 to 512 MiB with 2 MiB ones). */
vmem_status_t backend_big_from_env(size_t granule, size_t *bytes)
{
    return handle_mib_from_env("VMEM_VMM_BIG_MIB", BACKEND_VMM_BIG_DEFAULT, granule, "granules",
                               BACKEND_VMM_BIG_MAX, (size_t)4 << 20, 1024, 0, bytes);
}

/* VMEM_VMM_HUGE_MIB for big handles of `big` bytes: 0 (off), or MiB, a
 * power of two up to 4096 that is 2 to BACKEND_VMM_HUGE_MAX big handles. */
static vmem_status_t huge_from_env(size_t big, size_t *bytes)
{
    return handle_mib_from_env("VMEM_VMM_HUGE_MIB", BACKEND_VMM_HUGE_DEFAULT, big, "big handles",
                               BACKEND_VMM_HUGE_MAX, 0, 4096, 1, bytes);
}

/* VMEM_VMM_HOST_KEEP: a size, or all (SIZE_MAX, the default). */
static vmem_status_t host_keep_from_env(size_t *bytes)
{
    *bytes = SIZE_MAX;
    const char *e = getenv("VMEM_VMM_HOST_KEEP");
    if (!e || strcasecmp(e, "all") == 0)
        return VMEM_OK;
    if (vmem_parse_size(e, bytes) != VMEM_OK) {
        vmem_log(NULL, VMEM_LOG_ERROR,
                 "invalid VMEM_VMM_HOST_KEEP=\"%s\" (expected a size, e.g. 4G, or all)", e);
        return VMEM_ERR_ENV;
    }
    return VMEM_OK;
}

/* The study switches of the moves (backend_vmm_switch_t): name, default. */
static const struct {
    const char *name;
    int dflt;
} vmm_switches[BACKEND_VMM_SWITCHES] = {
    [BACKEND_VMM_MOVE_MIRROR] = {"VMEM_VMM_MOVE_MIRROR", 1},
    [BACKEND_VMM_MOVE_SWAP] = {"VMEM_VMM_MOVE_SWAP", 1},
    [BACKEND_VMM_FREE_LATE] = {"VMEM_VMM_FREE_LATE", 0},
    [BACKEND_VMM_PHASES] = {"VMEM_VMM_PHASES", 0},
};

static vmem_status_t vmm_switch_from_env(backend_vmm_switch_t which, int *out)
{
    return env_bool(vmm_switches[which].name, vmm_switches[which].dflt, out);
}

int backend_vmm_move_switch(backend_vmm_switch_t which)
{
    static atomic_int logged[BACKEND_VMM_SWITCHES]; /* once per variable */
    const char *name = vmm_switches[which].name;
    const char *val = getenv(name);
    int on = vmm_switches[which].dflt;
    if (val && options_parse_bool(val, &on) != 0) {
        on = vmm_switches[which].dflt;
        if (!atomic_exchange(&logged[which], 1))
            vmem_log(NULL, VMEM_LOG_ERROR,
                     "invalid %s=\"%s\" (expected on or off); moves use the default (%s)", name,
                     val, on ? "on" : "off");
    }
    return on;
}

vmem_status_t backend_vmm_env(size_t granule, backend_vmm_env_t *out)
{
    backend_vmm_env_t e;
    memset(&e, 0, sizeof e);
    if (env_bool("VMEM_VMM_BIG", 1, &e.big) != VMEM_OK ||
        env_bool("VMEM_VMM_HOST_BIG", 1, &e.host_big) != VMEM_OK ||
        env_bool("VMEM_VMM_DEVICE_BIG", 1, &e.device_big) != VMEM_OK ||
        backend_grow_align_from_env(&e.grow_align) != VMEM_OK ||
        backend_big_from_env(granule, &e.big_bytes) != VMEM_OK ||
        huge_from_env(e.big_bytes, &e.huge_bytes) != VMEM_OK ||
        env_threads("VMEM_VMM_SPLIT_THREADS", 1, BACKEND_VMM_SPLIT_THREADS_MAX,
                    &e.split_threads) != VMEM_OK ||
        env_threads("VMEM_VMM_RESERVE_THREADS", 4, BACKEND_VMM_RESERVE_THREADS_MAX,
                    &e.reserve_threads) != VMEM_OK ||
        host_keep_from_env(&e.host_keep) != VMEM_OK ||
        vmm_switch_from_env(BACKEND_VMM_MOVE_MIRROR, &e.move_mirror) != VMEM_OK ||
        vmm_switch_from_env(BACKEND_VMM_MOVE_SWAP, &e.move_swap) != VMEM_OK ||
        vmm_switch_from_env(BACKEND_VMM_FREE_LATE, &e.free_late) != VMEM_OK ||
        vmm_switch_from_env(BACKEND_VMM_PHASES, &e.phases) != VMEM_OK)
        return VMEM_ERR_ENV;
    *out = e;
    return VMEM_OK;
}

/* VMEM_SIM_BIG (sim-vmm): 0 (granules only, the default) or a size that is
 * a power of two above the granule. */
static vmem_status_t sim_big_from_env(size_t *bytes)
{
    *bytes = 0;
    const char *e = getenv("VMEM_SIM_BIG");
    if (!e)
        return VMEM_OK;
    size_t v = 0;
    if (vmem_parse_size(e, &v) != VMEM_OK ||
        (v != 0 && (v <= SIM_GRANULE || v % SIM_GRANULE != 0 || (v & (v - 1)) != 0))) {
        vmem_log(NULL, VMEM_LOG_ERROR,
                 "invalid VMEM_SIM_BIG=\"%s\" (expected 0, or a size that is a power of two above "
                 "2 MiB, e.g. 64M)",
                 e);
        return VMEM_ERR_ENV;
    }
    *bytes = v;
    return VMEM_OK;
}

vmem_status_t backend_sim_create(size_t capacity, int vmm_style, backend_t **out)
{
    if (capacity < SIM_GRANULE || capacity > SIM_MAX_CAPACITY)
        return VMEM_ERR_INVALID;
    /* sim-vmm: regions end on vmm's big handles (VMEM_VMM_GROW_ALIGN,
     * VMEM_VMM_BIG_MIB); VMEM_SIM_BIG models those handles. */
    int align_on = 0;
    size_t align = 0, big = 0;
    if (vmm_style && (backend_grow_align_from_env(&align_on) != VMEM_OK ||
                      backend_big_from_env(SIM_GRANULE, &align) != VMEM_OK ||
                      sim_big_from_env(&big) != VMEM_OK))
        return VMEM_ERR_ENV;
    capacity = capacity / SIM_GRANULE * SIM_GRANULE;
    sim_backend_t *s = calloc(1, sizeof *s);
    if (!s)
        return VMEM_ERR_NOMEM;
    s->fd[0] = s->fd[1] = -1;
    /* Room for guard granules (sim), or for holes in the range and host
     * memory mapped in place (sim-vmm). */
    s->va_size = vmm_style ? capacity * 4 + SIM_HOST_RANGE + SIM_GRANULE
                           : capacity * 2 + SIM_GRANULE;
    s->ngranules = s->va_size / SIM_GRANULE;
    s->used = calloc((s->ngranules + 63) / 64, sizeof *s->used);
    s->host = calloc((s->ngranules + 63) / 64, sizeof *s->host);
    s->parked = calloc((s->ngranules + 63) / 64, sizeof *s->parked);
    s->big = calloc((s->ngranules + 63) / 64, sizeof *s->big);
    void *va = mmap(NULL, s->va_size + SIM_GRANULE, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!s->used || !s->host || !s->parked || !s->big || va == MAP_FAILED) {
        if (va != MAP_FAILED)
            munmap(va, s->va_size + SIM_GRANULE);
        free(s->used);
        free(s->host);
        free(s->parked);
        free(s->big);
        free(s);
        return VMEM_ERR_NOMEM;
    }
    /* Align the range to the granule; give back the slack. */
    uintptr_t raw = (uintptr_t)va, aligned = (raw + SIM_GRANULE - 1) & ~(SIM_GRANULE - 1);
    if (aligned > raw)
        munmap(va, aligned - raw);
    size_t tail = (raw + s->va_size + SIM_GRANULE) - (aligned + s->va_size);
    if (tail)
        munmap((char *)(aligned + s->va_size), tail);
    s->va = (char *)aligned;
    s->capacity = capacity;
    s->vmm = vmm_style;
    int files = vmm_style && sim_files_open(s) == 0;
    s->base.ops = vmm_style ? &sim_vmm_ops : &sim_ops;
    s->base.host_ops = files ? &sim_host_ops : NULL;
    s->base.name = vmm_style ? "sim-vmm" : "sim";
    s->base.flags = BACKEND_F_SIMULATED |
                    (vmm_style ? (BACKEND_F_CONTIGUOUS | BACKEND_F_SPLITTABLE) : 0) |
                    (files ? BACKEND_F_HOST_BACKING : 0);
    s->base.granule = SIM_GRANULE;
    s->base.range_base = (uintptr_t)s->va;
    s->base.range_size = s->va_size;
    s->base.grow_align = align_on ? align : 0;
    s->bign = big / SIM_GRANULE; /* 0: granules only */
    backend_set_faults(&s->base, 0, 0, 0);
    *out = &s->base;
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* Plain host memory (the host fallback of the simulated device)            */
/* ------------------------------------------------------------------------ */

typedef struct host_backend {
    backend_t base;
    size_t capacity;
    size_t in_use;
} host_backend_t;

static vmem_status_t host_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    host_backend_t *h = (host_backend_t *)b;
    (void)hint;
    if (size > h->capacity - h->in_use)
        return VMEM_ERR_NOMEM;
    /* Over-map by one granule to align the base. */
    size_t g = b->granule;
    char *p = mmap(NULL, size + g, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return VMEM_ERR_NOMEM;
    uintptr_t aligned = ((uintptr_t)p + g - 1) & ~(uintptr_t)(g - 1);
    if (aligned > (uintptr_t)p)
        munmap(p, aligned - (uintptr_t)p);
    size_t tail = (uintptr_t)p + size + g - (aligned + size);
    if (tail)
        munmap((char *)(aligned + size), tail);
    h->in_use += size;
    *base = (void *)aligned;
    return VMEM_OK;
}

static void host_region_free(backend_t *b, void *base, size_t size)
{
    host_backend_t *h = (host_backend_t *)b;
    munmap(base, size);
    h->in_use -= size;
}

static vmem_status_t host_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    host_backend_t *h = (host_backend_t *)b;
    *free_bytes = h->capacity - h->in_use;
    *total_bytes = h->capacity;
    return VMEM_OK;
}

static void host_destroy(backend_t *b) { free(b); }

static const backend_ops_t host_ops = {host_region_alloc, host_region_free, host_mem_info,
                                       host_destroy, NULL, NULL};

vmem_status_t backend_host_create(size_t capacity, backend_t **out)
{
    host_backend_t *h = calloc(1, sizeof *h);
    if (!h)
        return VMEM_ERR_NOMEM;
    h->capacity = capacity;
    h->base.ops = &host_ops;
    h->base.name = "host";
    h->base.flags = BACKEND_F_HOST | BACKEND_F_SIMULATED;
    h->base.granule = SIM_GRANULE;
    backend_set_faults(&h->base, 0, 0, 0);
    *out = &h->base;
    return VMEM_OK;
}
