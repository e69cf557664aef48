/*
 * vmem-bench-jemalloc: is jemalloc a better host (pinned fallback) arena
 * than libvmem's BFC?  Built only with -Djemalloc=enabled; libvmem itself
 * never links jemalloc (docs/benchmarks.md, "jemalloc as the host arena?").
 *
 * Three allocators, each over the same kind of memory:
 *
 *   bfc       libvmem's BFC engine with the host arena's parameters
 *             (vmem.c: first region 64 MiB, doubling to 1 GiB, regions
 *             kept), its regions taken from the counted region source
 *             below.  The engine alone, no lock, no device attempt.
 *   vmem      the whole spill path: vmem_alloc / vmem_free on a sim
 *             instance whose device limit (256 B) admits nothing, so every
 *             block lands in the host arena (lock, failed device attempt,
 *             statistics included).  Its regions come from libvmem's own
 *             host backend (mmap), counted by the arena.
 *   jemalloc  a jemalloc arena made by mallctl("arenas.create") with
 *             extent hooks whose alloc hook takes memory from the counted
 *             region source; used through mallocx(size, MALLOCX_ARENA(a) |
 *             MALLOCX_TCACHE_NONE) / dallocx.
 *
 * The region source stands in for cudaHostAlloc: 2 MiB-aligned anonymous
 * mappings (never touched), each counted, because on a GPU machine every
 * such call pins memory at about 0.5 s per GiB.  Pinned memory cannot be
 * purged or handed back piecemeal, so the hooks keep everything until the
 * arena is destroyed (dalloc, decommit: opt out; purge: none; split: yes;
 * merge: only within one source region, as two pinned allocations are two
 * objects for CUDA), and decay is off (dirty/muzzy_decay_ms -1).
 *
 *   pair/<alloc>/<size>   alloc + free of one size, warm
 *   mix/<alloc>/<live>    random replacement, sizes log-uniform 256 B -
 *                         64 MiB, <live> blocks live; a fixed number of
 *                         replacements (MIX_ITERATIONS), so every allocator
 *                         sees the same sequence and the same peak live
 *
 * Counters: src_calls and src_MiB (region source calls and bytes over the
 * benchmark, warm-up included; pin_s = src_MiB / 1024 * 0.5, the pinning
 * time they would cost on a GPU); held_over_live = peak bytes obtained from
 * the source / peak bytes requested and live.  ns per call is 1e9 /
 * items_per_second (items count alloc and free calls).
 *
 * Note: Debian's libjemalloc exports an unprefixed malloc, so in this
 * executable jemalloc is also the process malloc (libvmem's metadata
 * included) for all three rows.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

#include <jemalloc/jemalloc.h>

#include <vmem.h>

#include "backend.h"
#include "bfc.h"
#include "gbench_c.h"
#include "vmem_internal.h"

#include "bench_sizes.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define SRC_ALIGN (2 * MiB)
#define PIN_S_PER_GIB 0.5
#define MIX_ITERATIONS 300000

enum { A_BFC, A_VMEM, A_JEMALLOC };
static const char *const alloc_names[] = {"bfc", "vmem", "jemalloc"};

/* ------------------------------------------------------------------------ */
/* The region source (cudaHostAlloc stand-in)                               */
/* ------------------------------------------------------------------------ */

typedef struct src_region {
    uintptr_t base;
    size_t size;
} src_region_t;

typedef struct source {
    uint64_t calls;      /* regions obtained */
    size_t bytes;        /* bytes obtained, in all */
    size_t held, peak_held;
    src_region_t *regions; /* sorted by base */
    size_t nregions, cap;
} source_t;

/* One region of size bytes (rounded up to 2 MiB), aligned to align (at least
 * 2 MiB).  NULL on failure. */
static void *source_map(source_t *s, size_t size, size_t align)
{
    if (align < SRC_ALIGN)
        align = SRC_ALIGN;
    size = (size + SRC_ALIGN - 1) & ~(SRC_ALIGN - 1);
    if (s->nregions == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        src_region_t *r = realloc(s->regions, cap * sizeof *r);
        if (!r)
            return NULL;
        s->regions = r;
        s->cap = cap;
    }
    char *p = mmap(NULL, size + align, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    if (a > (uintptr_t)p)
        munmap(p, a - (uintptr_t)p);
    size_t tail = (uintptr_t)p + size + align - (a + size);
    if (tail)
        munmap((char *)(a + size), tail);
    size_t i = s->nregions;
    while (i > 0 && s->regions[i - 1].base > a) {
        s->regions[i] = s->regions[i - 1];
        i--;
    }
    s->regions[i] = (src_region_t){a, size};
    s->nregions++;
    s->calls++;
    s->bytes += size;
    s->held += size;
    if (s->held > s->peak_held)
        s->peak_held = s->held;
    return (void *)a;
}

/* Index of the region containing addr, or -1. */
static ptrdiff_t source_find(const source_t *s, uintptr_t addr)
{
    size_t lo = 0, hi = s->nregions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->regions[mid].base + s->regions[mid].size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->nregions && s->regions[lo].base <= addr)
        return (ptrdiff_t)lo;
    return -1;
}

static void source_unmap(source_t *s, void *base)
{
    ptrdiff_t i = source_find(s, (uintptr_t)base);
    if (i < 0 || s->regions[i].base != (uintptr_t)base)
        return;
    munmap(base, s->regions[i].size);
    s->held -= s->regions[i].size;
    memmove(&s->regions[i], &s->regions[i + 1],
            (s->nregions - (size_t)i - 1) * sizeof *s->regions);
    s->nregions--;
}

static void source_fini(source_t *s)
{
    for (size_t i = 0; i < s->nregions; i++)
        munmap((void *)s->regions[i].base, s->regions[i].size);
    free(s->regions);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------------ */
/* The three allocators behind one interface                                */
/* ------------------------------------------------------------------------ */

/* A backend for the BFC engine over the region source. */
typedef struct src_backend {
    backend_t base;
    source_t *src;
} src_backend_t;

static vmem_status_t srcb_alloc(backend_t *b, size_t size, void *hint, void **base)
{
    (void)hint;
    void *p = source_map(((src_backend_t *)b)->src, size, SRC_ALIGN);
    if (!p)
        return VMEM_ERR_NOMEM;
    *base = p;
    return VMEM_OK;
}

static void srcb_free(backend_t *b, void *base, size_t size)
{
    (void)size;
    source_unmap(((src_backend_t *)b)->src, base);
}

static vmem_status_t srcb_info(backend_t *b, size_t *free_bytes, size_t *total_bytes)
{
    (void)b;
    *free_bytes = *total_bytes = 64 * GiB;
    return VMEM_OK;
}

static void srcb_destroy(backend_t *b) { (void)b; }

static const backend_ops_t srcb_ops = {srcb_alloc, srcb_free, srcb_info, srcb_destroy,
                                       NULL, NULL};

/* jemalloc extent hooks over the region source.  One arena at a time. */
static source_t *je_src;
static uint64_t je_merges_refused;

static void *je_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t alignment,
                      bool *zero, bool *commit, unsigned arena_ind)
{
    (void)h;
    (void)arena_ind;
    if (new_addr) /* growing in place: a new pinned region cannot be placed there */
        return NULL;
    void *p = source_map(je_src, size, alignment);
    if (!p)
        return NULL;
    *zero = true;   /* fresh anonymous pages (cudaHostAlloc'd memory is not
                       zeroed, but nothing here reads it) */
    *commit = true; /* pinned memory is committed */
    return p;
}

/* Opt out: pinned memory goes back only when the arena is destroyed. */
static bool je_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed,
                      unsigned arena_ind)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)arena_ind;
    return true;
}

/* Called for each extent at arena.<i>.destroy; the regions themselves are
 * unmapped afterwards (source_fini), since extents may be pieces of them. */
static void je_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed,
                       unsigned arena_ind)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)arena_ind;
}

static bool je_commit(extent_hooks_t *h, void *addr, size_t size, size_t offset, size_t length,
                      unsigned arena_ind)
{
    (void)h, (void)addr, (void)size, (void)offset, (void)length, (void)arena_ind;
    return false; /* always committed */
}

static bool je_decommit(extent_hooks_t *h, void *addr, size_t size, size_t offset,
                        size_t length, unsigned arena_ind)
{
    (void)h, (void)addr, (void)size, (void)offset, (void)length, (void)arena_ind;
    return true; /* opt out */
}

static bool je_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a, size_t size_b,
                     bool committed, unsigned arena_ind)
{
    (void)h, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed,
        (void)arena_ind;
    return false; /* bookkeeping only */
}

static bool je_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
                     bool committed, unsigned arena_ind)
{
    (void)h, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
    if (source_find(je_src, (uintptr_t)addr_a) == source_find(je_src, (uintptr_t)addr_b))
        return false;
    je_merges_refused++;
    return true;
}

static extent_hooks_t je_hooks = {
    .alloc = je_alloc,
    .dalloc = je_dalloc,
    .destroy = je_destroy,
    .commit = je_commit,
    .decommit = je_decommit,
    .purge_lazy = NULL, /* pinned memory cannot be purged */
    .purge_forced = NULL,
    .split = je_split,
    .merge = je_merge,
};

typedef struct harness {
    int kind;
    source_t src;
    src_backend_t sb;
    bfc_arena_t arena;
    vmem_t *v;
    unsigned je_arena;
    int je_flags;
} harness_t;

static int arena_set_ssize(unsigned ind, const char *what, ssize_t val)
{
    char name[64];
    snprintf(name, sizeof name, "arena.%u.%s", ind, what);
    return mallctl(name, NULL, NULL, &val, sizeof val);
}

static int h_open(harness_t *h, int kind, gb_state_t *st)
{
    memset(h, 0, sizeof *h);
    h->kind = kind;
    if (kind == A_BFC) {
        h->sb.base.ops = &srcb_ops;
        h->sb.base.name = "src";
        h->sb.base.flags = BACKEND_F_HOST | BACKEND_F_SIMULATED;
        h->sb.base.granule = SRC_ALIGN;
        h->sb.src = &h->src;
        backend_set_faults(&h->sb.base, 0, 0, 0);
        /* vmem.c's host arena parameters. */
        bfc_params_t hp = {.min_region = 64 * MiB, .max_region = GiB, .split_min = BFC_ALIGN,
                           .keep_regions = 1};
        if (bfc_init(&h->arena, &h->sb.base, &hp, 64 * GiB) != VMEM_OK) {
            gb_error(st, "bfc_init failed");
            return -1;
        }
    } else if (kind == A_VMEM) {
        vmem_config_t cfg;
        vmem_config_init(&cfg);
        cfg.backend = VMEM_BACKEND_SIM;
        cfg.sim_capacity = 256 * GiB;
        cfg.limit = 256; /* admits no device region: every block spills */
        cfg.host_limit = 64 * GiB;
        cfg.host_fallback = 1;
        cfg.log_level = VMEM_LOG_NONE;
        vmem_status_t s = vmem_create(&cfg, &h->v);
        if (s != VMEM_OK) {
            gb_error(st, vmem_strerror(s));
            return -1;
        }
    } else {
        je_src = &h->src;
        je_merges_refused = 0;
        extent_hooks_t *hp = &je_hooks;
        size_t sz = sizeof h->je_arena;
        if (mallctl("arenas.create", &h->je_arena, &sz, &hp, sizeof hp) != 0 ||
            arena_set_ssize(h->je_arena, "dirty_decay_ms", -1) != 0 ||
            arena_set_ssize(h->je_arena, "muzzy_decay_ms", -1) != 0) {
            gb_error(st, "mallctl arenas.create / decay failed");
            source_fini(&h->src);
            return -1;
        }
        h->je_flags = MALLOCX_ARENA(h->je_arena) | MALLOCX_TCACHE_NONE;
    }
    return 0;
}

static inline void *h_alloc(harness_t *h, size_t size)
{
    switch (h->kind) {
    case A_BFC:
        return bfc_alloc(&h->arena, size, 0);
    case A_VMEM:
        return vmem_alloc(h->v, size);
    default:
        return mallocx(size, h->je_flags);
    }
}

static inline void h_free(harness_t *h, void *p)
{
    if (!p)
        return;
    size_t sz;
    switch (h->kind) {
    case A_BFC:
        bfc_free(&h->arena, p, 0, &sz);
        break;
    case A_VMEM:
        vmem_free(h->v, p);
        break;
    default:
        dallocx(p, h->je_flags);
    }
}

/* Counters and teardown.  peak_live: peak bytes requested and live. */
static void h_close(harness_t *h, gb_state_t *st, size_t peak_live)
{
    uint64_t calls;
    size_t bytes, peak_held;
    if (h->kind == A_VMEM) {
        vmem_stats_t s = {.size = sizeof s};
        vmem_get_stats(h->v, &s);
        calls = h->v->host.region_allocs;
        peak_held = s.host_peak_held;
        bytes = peak_held; /* host regions are kept (keep_regions) */
        if (s.spills != s.allocs)
            gb_error(st, "not every allocation spilled");
        vmem_destroy(h->v);
    } else {
        calls = h->src.calls;
        bytes = h->src.bytes;
        peak_held = h->src.peak_held;
        if (h->kind == A_BFC) {
            bfc_fini(&h->arena);
        } else {
            char name[64];
            snprintf(name, sizeof name, "arena.%u.destroy", h->je_arena);
            if (mallctl(name, NULL, NULL, NULL, 0) != 0)
                gb_error(st, "arena destroy failed");
            gb_counter(st, "merges_refused", (double)je_merges_refused);
        }
        source_fini(&h->src);
    }
    gb_counter(st, "src_calls", (double)calls);
    gb_counter(st, "src_MiB", (double)bytes / (double)MiB);
    gb_counter(st, "pin_s", (double)bytes / (double)GiB * PIN_S_PER_GIB);
    gb_counter(st, "peak_held_MiB", (double)peak_held / (double)MiB);
    gb_counter(st, "peak_live_MiB", (double)peak_live / (double)MiB);
    gb_counter(st, "held_over_live", peak_live ? (double)peak_held / (double)peak_live : 0);
}

/* ------------------------------------------------------------------------ */


static void bm_pair(gb_state_t *st, void *arg)
{
    size_t size = (size_t)gb_range(st, 0);
    harness_t h;
    if (h_open(&h, (int)(intptr_t)arg, st) != 0)
        return;
    h_free(&h, h_alloc(&h, size)); /* warm */
    int64_t n = 0;
    while (gb_keep_running(st)) {
        void *p = h_alloc(&h, size);
        if (!p) {
            gb_error(st, "allocation failed");
            break;
        }
        h_free(&h, p);
        n++;
    }
    gb_items(st, 2 * n);
    h_close(&h, st, size);
}

static void bm_mix(gb_state_t *st, void *arg)
{
    size_t live = (size_t)gb_range(st, 0);
    harness_t h;
    size_t *sizes = size_table(42, 256, 64 * MiB);
    void **slot = calloc(live, sizeof *slot);
    size_t *slot_size = calloc(live, sizeof *slot_size);
    if (!sizes || !slot || !slot_size) {
        gb_error(st, "out of memory");
        goto out;
    }
    if (h_open(&h, (int)(intptr_t)arg, st) != 0)
        goto out;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    unsigned k = 0;
    size_t cur = 0, peak = 0;
    for (size_t i = 0; i < live; i++) {
        slot_size[i] = sizes[k++ % SIZE_TABLE];
        slot[i] = h_alloc(&h, slot_size[i]);
        cur += slot_size[i];
    }
    peak = cur;
    int64_t n = 0;
    while (gb_keep_running(st)) {
        size_t i = (size_t)(rng_next(&rng) % live);
        h_free(&h, slot[i]);
        cur -= slot_size[i];
        slot_size[i] = sizes[k++ % SIZE_TABLE];
        slot[i] = h_alloc(&h, slot_size[i]);
        if (!slot[i]) {
            gb_error(st, "allocation failed");
            break;
        }
        cur += slot_size[i];
        if (cur > peak)
            peak = cur;
        n++;
    }
    gb_items(st, 2 * n);
    for (size_t i = 0; i < live; i++)
        h_free(&h, slot[i]);
    h_close(&h, st, peak);
out:
    free(slot);
    free(slot_size);
    free(sizes);
}

int main(int argc, char **argv)
{
    static const int64_t pair_sizes[] = {256, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
    char name[64];
    for (int a = A_BFC; a <= A_JEMALLOC; a++) {
        snprintf(name, sizeof name, "pair/%s", alloc_names[a]);
        gb_bench_t *bm = gb_unit_ns(gb_register(name, bm_pair, (void *)(intptr_t)a));
        for (unsigned i = 0; i < sizeof pair_sizes / sizeof pair_sizes[0]; i++)
            gb_arg(bm, pair_sizes[i]);
    }
    for (int a = A_BFC; a <= A_JEMALLOC; a++) {
        snprintf(name, sizeof name, "mix/%s", alloc_names[a]);
        gb_bench_t *bm = gb_unit_ns(gb_register(name, bm_mix, (void *)(intptr_t)a));
        gb_iterations(gb_arg(gb_arg(bm, 1024), 4096), MIX_ITERATIONS);
    }
    return gb_main(argc, argv);
}
