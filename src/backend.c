/* Backend wrappers (fault injection, contract checks) and the simulated
 * device and plain-host backends, which need no GPU. */
#include "backend.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIM_GRANULE ((size_t)2 << 20)
#define SIM_MAX_CAPACITY ((size_t)16 << 40)

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

vmem_status_t backend_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    assert(size > 0 && size % b->granule == 0);
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
    b->ops->region_free(b, base, size);
}

vmem_status_t backend_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    return b->ops->mem_info(b, free_bytes, total_bytes);
}

void backend_destroy(backend_t *b)
{
    if (b)
        b->ops->destroy(b);
}

/* ------------------------------------------------------------------------ */
/* Simulated device                                                         */
/* ------------------------------------------------------------------------ */

/*
 * A reserved, inaccessible virtual range; regions are granule runs made
 * readable and writable on allocation and dropped (MADV_DONTNEED, then
 * PROT_NONE) when given back, so untouched memory costs nothing and a stray
 * access to given-back memory faults.
 * Invariants: bit i of used is set iff granule i is handed out; in_use ==
 * popcount(used) * granule <= capacity.  The cudaMalloc-like flavour leaves
 * one unused guard granule after each region.
 */
typedef struct sim_backend {
    backend_t base;
    char *va;
    size_t va_size;
    size_t ngranules;
    uint64_t *used;
    size_t capacity;
    size_t in_use;
    int vmm;
} sim_backend_t;

static int sim_bit(const sim_backend_t *s, size_t i)
{
    return (int)((s->used[i >> 6] >> (i & 63)) & 1);
}

static void sim_mark(sim_backend_t *s, size_t first, size_t n, int on)
{
    for (size_t i = first; i < first + n; i++) {
        if (on)
            s->used[i >> 6] |= 1ull << (i & 63);
        else
            s->used[i >> 6] &= ~(1ull << (i & 63));
    }
}

static int sim_run_free(const sim_backend_t *s, size_t first, size_t n)
{
    if (first + n > s->ngranules)
        return 0;
    for (size_t i = first; i < first + n; i++)
        if (sim_bit(s, i))
            return 0;
    return 1;
}

static vmem_status_t sim_region_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    sim_backend_t *s = (sim_backend_t *)b;
    if (size > s->capacity - s->in_use)
        return VMEM_ERR_NOMEM;
    size_t n = size / SIM_GRANULE;
    size_t guard = s->vmm ? 0 : 1;
    size_t first = SIZE_MAX;
    if (hint && (char *)hint >= s->va && (char *)hint < s->va + s->va_size) {
        size_t h = (size_t)((char *)hint - s->va) / SIM_GRANULE;
        if (sim_run_free(s, h, n))
            first = h;
    }
    for (size_t i = 0; first == SIZE_MAX && i + n + guard <= s->ngranules;) {
        size_t j = 0;
        while (j < n + guard && !sim_bit(s, i + j))
            j++;
        if (j == n + guard)
            first = i;
        else
            i += j + 1;
    }
    if (first == SIZE_MAX)
        return VMEM_ERR_NOMEM;
    char *p = s->va + first * SIM_GRANULE;
    if (mprotect(p, size, PROT_READ | PROT_WRITE) != 0)
        return VMEM_ERR_BACKEND;
    sim_mark(s, first, n, 1);
    s->in_use += size;
    *base = p;
    return VMEM_OK;
}

static void sim_region_free(backend_t *b, void *base, size_t size)
{
    sim_backend_t *s = (sim_backend_t *)b;
    size_t first = (size_t)((char *)base - s->va) / SIM_GRANULE, n = size / SIM_GRANULE;
    assert((char *)base >= s->va && first + n <= s->ngranules);
    for (size_t i = first; i < first + n; i++)
        assert(sim_bit(s, i));
    madvise(base, size, MADV_DONTNEED);
    mprotect(base, size, PROT_NONE);
    sim_mark(s, first, n, 0);
    s->in_use -= size;
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
    free(s->used);
    free(s);
}

static const backend_ops_t sim_ops = {sim_region_alloc, sim_region_free, sim_mem_info, sim_destroy};

vmem_status_t backend_sim_create(size_t capacity, int vmm_style, backend_t **out)
{
    if (capacity < SIM_GRANULE || capacity > SIM_MAX_CAPACITY)
        return VMEM_ERR_INVALID;
    capacity = capacity / SIM_GRANULE * SIM_GRANULE;
    sim_backend_t *s = calloc(1, sizeof *s);
    if (!s)
        return VMEM_ERR_NOMEM;
    /* Room for guard granules (sim) or for holes in the range (sim-vmm). */
    s->va_size = capacity * (vmm_style ? 4 : 2) + SIM_GRANULE;
    s->ngranules = s->va_size / SIM_GRANULE;
    s->used = calloc((s->ngranules + 63) / 64, sizeof *s->used);
    void *va = mmap(NULL, s->va_size + SIM_GRANULE, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!s->used || va == MAP_FAILED) {
        if (va != MAP_FAILED)
            munmap(va, s->va_size + SIM_GRANULE);
        free(s->used);
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
    s->base.ops = &sim_ops;
    s->base.name = vmm_style ? "sim-vmm" : "sim";
    s->base.flags = BACKEND_F_SIMULATED |
                    (vmm_style ? (BACKEND_F_CONTIGUOUS | BACKEND_F_SPLITTABLE) : 0);
    s->base.granule = SIM_GRANULE;
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
                                       host_destroy};

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
