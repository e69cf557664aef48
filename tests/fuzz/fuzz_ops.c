/*
 * Operation fuzzer for libvmem over the sim and sim-vmm backends.
 *
 * The input is a configuration byte followed by a stream of operations
 * (an opcode byte, then its argument bytes; a missing byte reads as 0):
 * allocations of any size (0 .. SIZE_MAX), frees of live, already freed and
 * foreign pointers, limit changes up and down (with and without
 * VMEM_LIMIT_FORCE), step ends, trims, host-limit changes, host fallback on
 * and off, injected backend failures, allocations and frees on several
 * (fake) streams, pointer lookups, the statistics JSON and size parsing.
 *
 * After EVERY operation the harness runs vmem_check and compares the
 * library with a shadow model it keeps itself:
 *  - counters: allocations, frees, failures, bad frees, spills, spilled bytes;
 *  - live requested/reserved bytes per location (device, host);
 *  - where each block is (vmem_ptr_info), and that live blocks never overlap
 *    (a sorted array of intervals [p, p + round(size)));
 *  - device held <= limit unless a shrink is pending, no new device memory
 *    while one is pending, no pending shrink without live device blocks, and
 *    while pending (or right after a trim) no empty region / free granule left
 *    (semantics 2 and 5 of the design);
 *  - the backends' own accounting equals what the arenas say they hold;
 *  - statuses: exactly what the API documents for each case, one error log
 *    line for each rejected free and none for calls that succeed;
 *  - an allocation that fits an empty, fault-free arena never fails.
 * Each live block carries a pattern in its first and last 64 bytes, checked
 * when it is freed and after operations that release memory.  At the end all
 * blocks are freed, a trim must leave nothing held by either backend, and a
 * fresh allocation must succeed on the device.  Any violation aborts().
 *
 * FUZZ_TRACE=1 in the environment prints every operation (for reproducing),
 * FUZZ_TRACE=2 also both arenas after each one.  FUZZ_BACKEND=sim|sim-vmm
 * pins the backend that the first byte would choose.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"
#include "vmem.h"
#include "vmem_internal.h" /* arena internals for the region checks */

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define GRANULE (2 * MiB)   /* sim and host backend granule */
#define MAX_OPS 8192        /* per input */
#define MAX_LIVE 2048
#define FREED_RING 64
#define NSTREAMS 4
#define PATTERN_SPAN 64

fuzz_totals_t fuzz_totals;

/* ------------------------------------------------------------------------ */
/* Input reader                                                             */
/* ------------------------------------------------------------------------ */

typedef struct reader {
    const uint8_t *data;
    size_t len, pos;
} reader_t;

static int reader_more(const reader_t *r) { return r->pos < r->len; }

static uint8_t reader_u8(reader_t *r) { return r->pos < r->len ? r->data[r->pos++] : 0; }

static uint64_t reader_bytes(reader_t *r, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)reader_u8(r) << (8 * i);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Shadow model                                                             */
/* ------------------------------------------------------------------------ */

/* A live block as the harness saw it handed out.  size is the library's
 * reserved size (vmem_ptr_info), span the interval used for the overlap
 * check: [base, base + round(req)). */
typedef struct block {
    uintptr_t base;
    size_t req, size, span;
    vmem_location_t loc;
    uint64_t id;
} block_t;

/* The shadow.  Invariants: live[0..nlive) are the blocks the library must
 * consider live; lo/hi[0..nlive) hold the same blocks' spans sorted by lo
 * and pairwise disjoint; the per-location sums equal the sums over live[]. */
typedef struct shadow {
    vmem_t *v;
    vmem_t *other;                  /* a second instance, for foreign pointers */
    void *other_block;
    int vmm;
    size_t capacity, host_capacity;
    block_t live[MAX_LIVE];
    size_t nlive;
    uintptr_t lo[MAX_LIVE], hi[MAX_LIVE];
    uintptr_t freed[FREED_RING];
    unsigned nfreed;
    uint64_t next_id;
    size_t dev_req, dev_size, host_req, host_size;
    size_t dev_count, host_count;
    uint64_t allocs, frees, failures, bad_frees, spills, spilled_bytes;
    int host_fallback;
    int dev_faults, host_faults;    /* fault injection armed */
    int streams_ok;                 /* fake stream handles are safe (no CUDA device) */
    unsigned errors_logged;         /* ERROR lines seen by the log sink */
    unsigned op_index;
    const char *op_name;
    char probe[64];                 /* memory the library never handed out */
} shadow_t;

static int trace_ops = -1;

static void fuzz_fail(const shadow_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Prints an arena's regions and chunks (with FUZZ_TRACE, on a violation). */
static void arena_dump(const char *name, const bfc_arena_t *a)
{
    fprintf(stderr, "%s arena: limit %zu held %zu in_use %zu pending %d regions %zu\n", name,
            a->limit, a->held, a->in_use, a->pending, a->nregions);
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        fprintf(stderr, "  region %#lx size %zu live %zu:", (unsigned long)r->base, r->size, r->live);
        for (const bfc_chunk_t *c = r->first; c; c = c->next)
            fprintf(stderr, " [%#lx+%zu %s stream %lu]", (unsigned long)(c->addr - r->base), c->size,
                    c->in_use ? "used" : "free", (unsigned long)c->stream);
        fputc('\n', stderr);
    }
}

static void fuzz_fail(const shadow_t *s, const char *fmt, ...)
{
    va_list ap;
    if (trace_ops > 0 && s->v) {
        arena_dump("device", &s->v->dev);
        arena_dump("host", &s->v->host);
    }
    fprintf(stderr, "fuzz_ops: VIOLATION at op %u (%s): ", s->op_index,
            s->op_name ? s->op_name : "-");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

#define REQUIRE(s, cond, ...)            \
    do {                                 \
        if (!(cond))                     \
            fuzz_fail((s), __VA_ARGS__); \
    } while (0)

static void log_sink(void *ctx, vmem_log_level_t level, const char *msg)
{
    shadow_t *s = ctx;
    if (level >= VMEM_LOG_ERROR)
        s->errors_logged++;
    if (trace_ops > 0)
        fprintf(stderr, "    log[%d]: %s\n", (int)level, msg);
}

static void silent_sink(void *ctx, vmem_log_level_t level, const char *msg)
{
    (void)ctx;
    (void)level;
    (void)msg;
}

static size_t round256(size_t n)
{
    return (n == 0 || n > SIZE_MAX - 255) ? 0 : (n + 255) & ~(size_t)255;
}

static size_t granule_up(size_t n)
{
    return n > SIZE_MAX - (GRANULE - 1) ? 0 : (n + GRANULE - 1) / GRANULE * GRANULE;
}

static uint8_t pattern_byte(uint64_t id, size_t off)
{
    uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull + off * 0xBF58476D1CE4E5B9ull;
    return (uint8_t)(x >> 56);
}

/* Calls fn(block, offset) for each patterned byte: the first and last
 * PATTERN_SPAN bytes of the requested size. */
static void pattern_write(const block_t *b)
{
    unsigned char *p = (unsigned char *)b->base;
    size_t head = b->req < PATTERN_SPAN ? b->req : PATTERN_SPAN;
    for (size_t i = 0; i < head; i++)
        p[i] = pattern_byte(b->id, i);
    size_t tail = b->req > 2 * PATTERN_SPAN ? b->req - PATTERN_SPAN : head;
    for (size_t i = tail; i < b->req; i++)
        p[i] = pattern_byte(b->id, i);
}

static void pattern_verify(const shadow_t *s, const block_t *b)
{
    const unsigned char *p = (const unsigned char *)b->base;
    size_t head = b->req < PATTERN_SPAN ? b->req : PATTERN_SPAN;
    size_t tail = b->req > 2 * PATTERN_SPAN ? b->req - PATTERN_SPAN : head;
    for (size_t i = 0; i < head; i++)
        REQUIRE(s, p[i] == pattern_byte(b->id, i), "block %p (id %llu): byte %zu overwritten",
                (void *)b->base, (unsigned long long)b->id, i);
    for (size_t i = tail; i < b->req; i++)
        REQUIRE(s, p[i] == pattern_byte(b->id, i), "block %p (id %llu): byte %zu overwritten",
                (void *)b->base, (unsigned long long)b->id, i);
}

/* Index of the first span with lo > addr. */
static size_t spans_upper(const shadow_t *s, uintptr_t addr)
{
    size_t a = 0, b = s->nlive;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (s->lo[m] <= addr)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* 1 if addr lies inside a live block's span; *start set if it is its start. */
static int spans_contain(const shadow_t *s, uintptr_t addr, int *start)
{
    size_t i = spans_upper(s, addr);
    if (i == 0 || addr >= s->hi[i - 1]) {
        *start = 0;
        return 0;
    }
    *start = s->lo[i - 1] == addr;
    return 1;
}

static void spans_insert(shadow_t *s, uintptr_t lo, uintptr_t hi)
{
    size_t n = s->nlive; /* spans currently stored (the new block is not yet counted) */
    size_t a = 0, b = n;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (s->lo[m] <= lo)
            a = m + 1;
        else
            b = m;
    }
    REQUIRE(s, a == 0 || s->hi[a - 1] <= lo, "new block [%#lx, %#lx) overlaps live [%#lx, %#lx)",
            (unsigned long)lo, (unsigned long)hi, (unsigned long)s->lo[a - 1],
            (unsigned long)s->hi[a - 1]);
    REQUIRE(s, a == n || hi <= s->lo[a], "new block [%#lx, %#lx) overlaps live [%#lx, %#lx)",
            (unsigned long)lo, (unsigned long)hi, (unsigned long)s->lo[a], (unsigned long)s->hi[a]);
    memmove(&s->lo[a + 1], &s->lo[a], (n - a) * sizeof s->lo[0]);
    memmove(&s->hi[a + 1], &s->hi[a], (n - a) * sizeof s->hi[0]);
    s->lo[a] = lo;
    s->hi[a] = hi;
}

static void spans_remove(shadow_t *s, uintptr_t lo)
{
    size_t n = s->nlive; /* still counts the block being removed */
    size_t i = spans_upper(s, lo);
    REQUIRE(s, i > 0 && s->lo[i - 1] == lo, "shadow lost span %#lx", (unsigned long)lo);
    i--;
    memmove(&s->lo[i], &s->lo[i + 1], (n - i - 1) * sizeof s->lo[0]);
    memmove(&s->hi[i], &s->hi[i + 1], (n - i - 1) * sizeof s->hi[0]);
}

static void shadow_account(shadow_t *s, const block_t *b, int sign)
{
    if (b->loc == VMEM_LOC_DEVICE) {
        s->dev_req += sign * b->req;
        s->dev_size += sign * b->size;
        s->dev_count += sign;
    } else {
        s->host_req += sign * b->req;
        s->host_size += sign * b->size;
        s->host_count += sign;
    }
}

static void freed_remember(shadow_t *s, uintptr_t p)
{
    s->freed[s->nfreed++ % FREED_RING] = p;
}

/* ------------------------------------------------------------------------ */
/* Checks                                                                   */
/* ------------------------------------------------------------------------ */

static vmem_stats_t stats_get(const shadow_t *s)
{
    vmem_stats_t st = {.size = sizeof st};
    REQUIRE(s, vmem_get_stats(s->v, &st) == VMEM_OK, "vmem_get_stats failed");
    return st;
}

/* A shrink is pending (pending_limit alone cannot say so for a target of 0). */
static int stats_pending(const vmem_stats_t *st)
{
    return st->shrink_pending != 0;
}

/* No empty region (and, for splittable backends, no free whole granule) is
 * left in arena a: what a completed release must achieve. */
static void arena_check_released(const shadow_t *s, const bfc_arena_t *a, const char *what)
{
    int splittable = (a->backend->flags & BACKEND_F_SPLITTABLE) != 0;
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        /* Free host memory mapped in place (sim-vmm, BFC_STREAM_HOST) is not
         * device memory: it is kept for spills. */
        int host = a->held_host && bfc_host_bytes(a, (void *)r->base, r->size);
        REQUIRE(s, r->live > 0 || host, "%s: empty region %#lx (%zu bytes) kept", what,
                (unsigned long)r->base, r->size);
        if (!splittable)
            continue;
        for (const bfc_chunk_t *c = r->first; c; c = c->next) {
            if (c->stream == BFC_STREAM_HOST)
                continue;
            uintptr_t lo = (c->addr + a->granule - 1) / a->granule * a->granule;
            uintptr_t hi = (c->addr + c->size) / a->granule * a->granule;
            REQUIRE(s, c->in_use || hi <= lo, "%s: free granule %#lx kept in chunk %#lx", what,
                    (unsigned long)lo, (unsigned long)c->addr);
        }
    }
}

/* Compares a block with what vmem_ptr_info says; updates a moved block. */
static void block_check_info(shadow_t *s, block_t *b, int may_move)
{
    vmem_ptr_info_t info;
    vmem_status_t st = vmem_ptr_info(s->v, (void *)b->base, &info);
    REQUIRE(s, st == VMEM_OK, "live block %p unknown to vmem_ptr_info (%s)", (void *)b->base,
            vmem_strerror(st));
    REQUIRE(s, info.base == (void *)b->base && info.requested == b->req && info.size == b->size,
            "ptr_info(%p): base %p requested %zu size %zu, expected %zu/%zu", (void *)b->base,
            info.base, info.requested, info.size, b->req, b->size);
    if (info.location != b->loc) {
        REQUIRE(s, may_move, "block %p moved from %d to %d", (void *)b->base, (int)b->loc,
                (int)info.location);
        shadow_account(s, b, -1);
        b->loc = info.location;
        shadow_account(s, b, +1);
    }
}

/* Everything after every operation. */
static void shadow_verify(shadow_t *s, const vmem_stats_t *before)
{
    vmem_t *v = s->v;
    REQUIRE(s, vmem_check(v) == VMEM_OK, "vmem_check failed");
    vmem_stats_t st = stats_get(s);
    REQUIRE(s, st.allocs == s->allocs && st.frees == s->frees && st.failures == s->failures &&
                   st.bad_frees == s->bad_frees,
            "counters: allocs %llu/%llu frees %llu/%llu failures %llu/%llu bad_frees %llu/%llu",
            (unsigned long long)st.allocs, (unsigned long long)s->allocs,
            (unsigned long long)st.frees, (unsigned long long)s->frees,
            (unsigned long long)st.failures, (unsigned long long)s->failures,
            (unsigned long long)st.bad_frees, (unsigned long long)s->bad_frees);
    REQUIRE(s, st.spills == s->spills && st.spilled_bytes == s->spilled_bytes,
            "spills %llu (%llu bytes), shadow %llu (%llu bytes)", (unsigned long long)st.spills,
            (unsigned long long)st.spilled_bytes, (unsigned long long)s->spills,
            (unsigned long long)s->spilled_bytes);
    REQUIRE(s, st.allocs - st.frees == s->nlive, "live blocks %llu, shadow %zu",
            (unsigned long long)(st.allocs - st.frees), s->nlive);
    /* Requested bytes follow each block's location; in-use bytes are split
     * by where they lie (vmm, sim-vmm: a block may straddle host-backed
     * granules after an eviction), so only their total is per block. */
    REQUIRE(s, st.device_requested == s->dev_req &&
                   st.device_in_use + st.host_in_use == s->dev_size + s->host_size,
            "device requested %zu in use %zu (+ host %zu), shadow %zu/%zu (+ %zu)",
            st.device_requested, st.device_in_use, st.host_in_use, s->dev_req, s->dev_size,
            s->host_size);
    /* (blocks whose free waits for a recorded stream are not requested) */
    size_t host_req = v->host.requested + v->dev.host_requested - v->deferred.host_requested;
    REQUIRE(s, host_req == s->host_req, "host requested %zu, shadow %zu", host_req, s->host_req);
    REQUIRE(s, st.host_fallback == s->host_fallback, "host fallback %d, shadow %d",
            st.host_fallback, s->host_fallback);
    /* The limit (semantics 2 and 5). */
    size_t lim = 0;
    REQUIRE(s, vmem_get_limit(v, &lim) == VMEM_OK && lim == st.limit, "vmem_get_limit %zu, stats %zu",
            lim, st.limit);
    REQUIRE(s, st.limit <= st.start_cap, "limit %zu above start cap %zu", st.limit, st.start_cap);
    int pending = stats_pending(&st);
    REQUIRE(s, pending == (v->dev.pending != 0), "stats say pending %d, arena %d", pending,
            v->dev.pending);
    if (pending) {
        REQUIRE(s, st.pending_limit == st.limit && st.device_held > st.limit,
                "pending %zu with limit %zu, held %zu", st.pending_limit, st.limit, st.device_held);
        arena_check_released(s, &v->dev, "shrink pending");
    } else {
        REQUIRE(s, st.device_held <= st.limit, "device holds %zu over limit %zu, nothing pending",
                st.device_held, st.limit);
    }
    /* (A block located on host may still hold device granules: sim-vmm,
     * after an eviction stopped by a fault or the host limit.) */
    REQUIRE(s, s->dev_count > 0 || !pending || st.device_in_use > 0,
            "shrink pending with no live device block");
    if (before && stats_pending(before))
        REQUIRE(s, st.device_held <= before->device_held,
                "device memory grew from %zu to %zu while a shrink was pending", before->device_held,
                st.device_held);
    REQUIRE(s, st.host_held <= st.host_limit || s->host_count > 0,
            "host holds %zu over limit %zu with nothing live", st.host_held, st.host_limit);
    REQUIRE(s, st.device_in_use <= st.device_held && st.host_in_use <= st.host_held,
            "in use above held");
    REQUIRE(s, st.device_peak_held >= st.device_held && st.device_peak_in_use >= st.device_in_use &&
                   st.host_peak_held >= st.host_held && st.host_peak_in_use >= st.host_in_use,
            "peaks below current values");
    /* The backends hand out exactly what the arenas say they hold. */
    size_t fr = 0, tot = 0;
    backend_mem_info(v->dev_backend, &fr, &tot);
    REQUIRE(s, tot - fr == st.device_held, "device backend has %zu out, arena holds %zu", tot - fr,
            st.device_held);
    backend_mem_info(v->host_backend, &fr, &tot);
    REQUIRE(s, tot - fr == v->host.held, "host backend has %zu out, arena holds %zu", tot - fr,
            v->host.held);
}

/* ------------------------------------------------------------------------ */
/* Operations                                                               */
/* ------------------------------------------------------------------------ */

static void *stream_handle(unsigned k)
{
    return k == 0 ? NULL : (void *)(uintptr_t)(0x7000 + 0x100 * k);
}

/* A size from a class byte and 4 more bytes: tiny to absurd. */
static size_t size_draw(const shadow_t *s, reader_t *r)
{
    uint8_t k = reader_u8(r);
    uint64_t x = reader_bytes(r, 4);
    switch (k >> 5) {
    case 0: return 1 + x % 256;
    case 1: return 1 + x % (64 * KiB);
    case 2: return 1 + x % (2 * MiB);
    case 3: return 1 + x % (64 * MiB);
    case 4: return 1 + (x << 8) % (4 * GiB);
    case 5: {
        size_t n = 1 + (x & 31);
        int d = (int)((x >> 5) % 5) - 2;
        return n * GRANULE + (size_t)(ptrdiff_t)d;
    }
    case 6: {
        const size_t absurd[] = {0,
                                 1,
                                 SIZE_MAX,
                                 SIZE_MAX - 255,
                                 SIZE_MAX - 254,
                                 SIZE_MAX / 2,
                                 (size_t)1 << 63,
                                 ((size_t)1 << 40) + (size_t)(x >> 4),
                                 s->capacity,
                                 s->capacity + 1,
                                 s->host_capacity,
                                 s->host_capacity + 1,
                                 GRANULE - 1,
                                 GRANULE + 1,
                                 64 * MiB,
                                 256};
        return absurd[x % (sizeof absurd / sizeof absurd[0])];
    }
    default:
        return (size_t)x; /* exact, as written by the corpus converter */
    }
}

static void op_alloc_size(shadow_t *s, size_t size, void *stream)
{
    vmem_stats_t before = stats_get(s);
    unsigned errors = s->errors_logged;
    void *p = stream ? vmem_alloc_stream(s->v, size, stream) : vmem_alloc(s->v, size);
    vmem_status_t st = vmem_last_status();
    size_t rs = round256(size);
    if (!p) {
        REQUIRE(s, st == (rs == 0 ? VMEM_ERR_SIZE : VMEM_ERR_NOMEM),
                "alloc(%zu) returned NULL with status %s", size, vmem_strerror(st));
        s->failures++;
        fuzz_totals.allocs_null++;
        /* An empty, fault-free arena with room for the request must serve it. */
        size_t g = granule_up(rs);
        REQUIRE(s, rs == 0 || s->dev_count > 0 || before.device_in_use > 0 || s->dev_faults || g == 0 ||
                       g > before.limit / GRANULE * GRANULE || g > s->capacity,
                "alloc(%zu) failed although the device arena was empty and it fits limit %zu",
                size, before.limit);
        size_t host_room = before.host_limit > before.host_held
                               ? (before.host_limit - before.host_held) / GRANULE * GRANULE
                               : 0;
        REQUIRE(s, rs == 0 || !s->host_fallback || s->host_count > 0 || s->host_faults || g == 0 ||
                       g > host_room || g > s->host_capacity - before.host_held || g > GiB,
                "alloc(%zu) failed although the host arena was empty and it fits host limit %zu",
                size, before.host_limit);
        return;
    }
    REQUIRE(s, st == VMEM_OK, "alloc(%zu) succeeded with status %s", size, vmem_strerror(st));
    REQUIRE(s, rs != 0 && ((uintptr_t)p & 255) == 0, "alloc(%zu) returned %p", size, p);
    REQUIRE(s, s->errors_logged == errors, "successful alloc logged an error");
    REQUIRE(s, s->nlive < MAX_LIVE, "shadow full");
    block_t *b = &s->live[s->nlive];
    b->base = (uintptr_t)p;
    b->req = size;
    b->span = rs;
    b->id = s->next_id++;
    vmem_ptr_info_t info;
    REQUIRE(s, vmem_ptr_info(s->v, p, &info) == VMEM_OK, "new block %p unknown to ptr_info", p);
    REQUIRE(s, info.base == p && info.requested == size && info.size >= rs && info.size % 256 == 0,
            "new block %p: info base %p requested %zu size %zu", p, info.base, info.requested,
            info.size);
    b->size = info.size;
    b->loc = info.location;
    REQUIRE(s, b->loc == VMEM_LOC_DEVICE || b->loc == VMEM_LOC_HOST, "bad location %d", (int)b->loc);
    if (b->loc == VMEM_LOC_HOST) {
        REQUIRE(s, s->host_fallback, "alloc(%zu) landed on the host with the fallback off", size);
        s->spills++;
        s->spilled_bytes += size;
        fuzz_totals.spills++;
    }
    spans_insert(s, b->base, b->base + rs);
    s->nlive++;
    shadow_account(s, b, +1);
    s->allocs++;
    fuzz_totals.allocs_ok++;
    pattern_write(b);
}

static void op_alloc(shadow_t *s, reader_t *r)
{
    op_alloc_size(s, size_draw(s, r), NULL);
}

/* Frees live block i (checking its pattern) and removes it from the shadow. */
static void block_free(shadow_t *s, size_t i, void *stream)
{
    block_t b = s->live[i];
    pattern_verify(s, &b);
    unsigned errors = s->errors_logged;
    vmem_status_t st = stream ? vmem_free_stream(s->v, (void *)b.base, stream)
                              : vmem_free(s->v, (void *)b.base);
    REQUIRE(s, st == VMEM_OK, "free of live block %p: %s", (void *)b.base, vmem_strerror(st));
    REQUIRE(s, s->errors_logged == errors, "successful free logged an error");
    spans_remove(s, b.base);
    s->live[i] = s->live[--s->nlive];
    shadow_account(s, &b, -1);
    s->frees++;
    freed_remember(s, b.base);
    vmem_ptr_info_t info;
    REQUIRE(s, vmem_ptr_info(s->v, (void *)b.base, &info) == VMEM_ERR_FOREIGN_PTR,
            "freed block %p still known to ptr_info", (void *)b.base);
}

static void op_free(shadow_t *s, reader_t *r)
{
    uint16_t k = (uint16_t)reader_bytes(r, 2);
    if (s->nlive)
        block_free(s, k % s->nlive, NULL);
}

/* Frees p, which is not a live block's start: expects one of the statuses
 * allowed (bit per status: 1 FOREIGN, 2 DOUBLE_FREE), an error log line,
 * and no change at all. */
static void free_bad(shadow_t *s, void *p, unsigned allowed)
{
    vmem_stats_t before = stats_get(s);
    unsigned errors = s->errors_logged;
    vmem_status_t st = vmem_free(s->v, p);
    REQUIRE(s, ((allowed & 1) && st == VMEM_ERR_FOREIGN_PTR) ||
                   ((allowed & 2) && st == VMEM_ERR_DOUBLE_FREE),
            "bad free of %p returned %s (allowed mask %u)", p, vmem_strerror(st), allowed);
    REQUIRE(s, s->errors_logged > errors, "bad free of %p logged no error", p);
    s->bad_frees++;
    fuzz_totals.bad_frees++;
    vmem_stats_t after = stats_get(s);
    REQUIRE(s, after.device_held == before.device_held && after.host_held == before.host_held &&
                   after.device_in_use == before.device_in_use &&
                   after.host_in_use == before.host_in_use && after.frees == before.frees &&
                   after.limit == before.limit && after.pending_limit == before.pending_limit,
            "bad free of %p changed the allocator", p);
}

/* Frees p, any address: classifies it against the shadow first. */
static void free_any(shadow_t *s, uintptr_t p)
{
    int start;
    if (p == 0) {
        vmem_stats_t before = stats_get(s);
        REQUIRE(s, vmem_free(s->v, NULL) == VMEM_OK, "free(NULL) failed");
        vmem_stats_t after = stats_get(s);
        REQUIRE(s, after.frees == before.frees && after.bad_frees == before.bad_frees,
                "free(NULL) counted");
        return;
    }
    if (spans_contain(s, p, &start)) {
        if (start)
            return; /* a live block: freeing it is not a bad free */
        free_bad(s, (void *)p, 1); /* inside a live block */
        return;
    }
    free_bad(s, (void *)p, 3);
}

static void op_free_twice(shadow_t *s, reader_t *r)
{
    uint16_t k = (uint16_t)reader_bytes(r, 2);
    if (!s->nlive)
        return;
    size_t i = k % s->nlive;
    uintptr_t p = s->live[i].base;
    vmem_location_t loc = s->live[i].loc;
    vmem_stats_t st = stats_get(s);
    /* With no shrink pending in its arena the freed chunk stays in a region,
     * so the second free must be recognised as a double free. */
    int pending = loc == VMEM_LOC_DEVICE ? stats_pending(&st) : st.host_held > st.host_limit;
    /* Host memory mapped in place (sim-vmm) is given back at the free. */
    if (loc == VMEM_LOC_HOST && s->v->dev.hostmap)
        pending = 1;
    block_free(s, i, NULL);
    free_bad(s, (void *)p, pending ? 3 : 2);
}

static void op_free_stale(shadow_t *s, reader_t *r)
{
    uint8_t k = reader_u8(r);
    if (!s->nfreed)
        return;
    unsigned n = s->nfreed < FREED_RING ? s->nfreed : FREED_RING;
    free_any(s, s->freed[k % n]);
}

static void op_free_foreign(shadow_t *s, reader_t *r)
{
    uint8_t kind = reader_u8(r);
    uint64_t x = reader_bytes(r, 8);
    int local;
    switch (kind % 8) {
    case 0: /* inside a live block */
        if (s->nlive) {
            const block_t *b = &s->live[x % s->nlive];
            if (b->span > 1)
                free_bad(s, (void *)(b->base + 1 + (x >> 16) % (b->span - 1)), 1);
        }
        break;
    case 1: free_bad(s, s->probe + (x % 32), 1); break;
    case 2: free_bad(s, &local, 1); break;
    case 3: free_any(s, 0); break;
    case 4: free_any(s, (uintptr_t)x); break;
    case 5: /* just past a live block */
        if (s->nlive) {
            const block_t *b = &s->live[x % s->nlive];
            free_any(s, b->base + b->span);
        }
        break;
    case 6: /* a misaligned freed address */
        if (s->nfreed)
            free_any(s, s->freed[x % (s->nfreed < FREED_RING ? s->nfreed : FREED_RING)] + 1 + x % 255);
        break;
    default: /* a block of another instance */
        if (!s->other) {
            vmem_config_t cfg;
            vmem_config_init(&cfg);
            cfg.backend = s->vmm ? VMEM_BACKEND_SIM_VMM : VMEM_BACKEND_SIM;
            cfg.sim_capacity = 64 * MiB;
            cfg.log_fn = silent_sink;
            REQUIRE(s, vmem_create(&cfg, &s->other) == VMEM_OK, "second instance");
            s->other_block = vmem_alloc(s->other, 1 + x % (4 * MiB));
            REQUIRE(s, s->other_block, "second instance alloc");
        }
        free_bad(s, s->other_block, 1);
        break;
    }
}

static void op_set_limit(shadow_t *s, reader_t *r)
{
    uint8_t kind = reader_u8(r);
    uint16_t x = (uint16_t)reader_bytes(r, 2);
    uint8_t flags = reader_u8(r);
    vmem_stats_t before = stats_get(s);
    size_t bytes;
    switch (kind % 10) {
    case 0: bytes = before.device_held > (x % 4) * GRANULE ? before.device_held - (x % 4) * GRANULE : 0; break;
    case 1: bytes = before.device_held + (x % 8) * GRANULE; break;
    case 2: bytes = 0; break;
    case 3: bytes = (size_t)x * 64 * KiB + (x & 255); break;
    case 4: bytes = before.start_cap; break;
    case 5: bytes = before.start_cap + 1 + x; break;
    case 6: bytes = SIZE_MAX; break;
    case 7: bytes = before.device_in_use; break;
    case 8: bytes = before.limit / 2; break;
    default: bytes = (size_t)(x % 512) * GRANULE; break;
    }
    unsigned errors = s->errors_logged;
    size_t applied = 12345;
    vmem_status_t st;
    if (flags & 2) {
        st = vmem_set_limit_ex(s->v, bytes, 0x80u | (flags & 1), &applied);
        REQUIRE(s, st == VMEM_ERR_INVALID && applied == 12345, "set_limit_ex with bad flags: %s",
                vmem_strerror(st));
        return;
    }
    st = (flags & 1) ? vmem_set_limit_ex(s->v, bytes, VMEM_LIMIT_FORCE, &applied)
                     : vmem_set_limit(s->v, bytes, &applied);
    vmem_stats_t after = stats_get(s);
    if (bytes > before.start_cap && !(flags & 1)) {
        REQUIRE(s, st == VMEM_ERR_ABOVE_CAP && applied == 12345 && after.limit == before.limit &&
                       after.start_cap == before.start_cap && after.pending_limit == before.pending_limit,
                "set_limit(%zu) above cap %zu: %s", bytes, before.start_cap, vmem_strerror(st));
        REQUIRE(s, s->errors_logged > errors, "limit above the cap logged no error");
        return;
    }
    REQUIRE(s, st == (after.device_held > bytes ? VMEM_PENDING : VMEM_OK),
            "set_limit(%zu): %s with %zu held", bytes, vmem_strerror(st), after.device_held);
    REQUIRE(s, s->errors_logged == errors, "set_limit logged an error");
    REQUIRE(s, applied == after.device_held, "applied %zu, held %zu", applied, after.device_held);
    REQUIRE(s, after.limit == bytes, "limit %zu after set_limit(%zu)", after.limit, bytes);
    REQUIRE(s, after.start_cap == (bytes > before.start_cap ? bytes : before.start_cap),
            "start cap %zu after set_limit(%zu) from %zu", after.start_cap, bytes, before.start_cap);
    REQUIRE(s, after.device_held <= before.device_held, "set_limit took device memory");
    REQUIRE(s, after.device_in_use == before.device_in_use, "set_limit changed live data");
    if (st == VMEM_PENDING)
        fuzz_totals.pending++;
}

static void op_set_host_limit(shadow_t *s, reader_t *r)
{
    uint8_t kind = reader_u8(r);
    uint16_t x = (uint16_t)reader_bytes(r, 2);
    vmem_stats_t before = stats_get(s);
    size_t bytes;
    switch (kind % 6) {
    case 0: bytes = 0; break;
    case 1: bytes = (size_t)x * MiB; break;
    case 2: bytes = before.host_held > (x % 4) * 64 * MiB ? before.host_held - (x % 4) * 64 * MiB : 0; break;
    case 3: bytes = before.host_in_use; break;
    case 4: bytes = SIZE_MAX; break;
    default: bytes = s->host_capacity; break;
    }
    vmem_status_t st = vmem_set_host_limit(s->v, bytes);
    vmem_stats_t after = stats_get(s);
    REQUIRE(s, st == (after.host_held > bytes ? VMEM_PENDING : VMEM_OK),
            "set_host_limit(%zu): %s with %zu held", bytes, vmem_strerror(st), after.host_held);
    REQUIRE(s, after.host_limit == bytes && after.host_held <= before.host_held &&
                   after.host_in_use == before.host_in_use,
            "set_host_limit(%zu): limit %zu held %zu -> %zu", bytes, after.host_limit,
            before.host_held, after.host_held);
    if (st == VMEM_PENDING)
        arena_check_released(s, &s->v->host, "host shrink pending");
}

static void live_sweep(shadow_t *s, int may_move)
{
    for (size_t i = 0; i < s->nlive; i++) {
        block_check_info(s, &s->live[i], may_move);
        pattern_verify(s, &s->live[i]);
    }
}

static void op_step_end(shadow_t *s)
{
    vmem_stats_t before = stats_get(s);
    REQUIRE(s, vmem_step_end(s->v) == VMEM_OK, "step_end failed");
    vmem_stats_t after = stats_get(s);
    REQUIRE(s, after.steps == before.steps + 1, "steps %llu -> %llu",
            (unsigned long long)before.steps, (unsigned long long)after.steps);
    live_sweep(s, 1); /* the step end is where data may move (vmm) */
}

static void op_trim(shadow_t *s)
{
    vmem_stats_t before = stats_get(s);
    size_t released = 0;
    REQUIRE(s, vmem_trim(s->v, &released) == VMEM_OK, "trim failed");
    vmem_stats_t after = stats_get(s);
    REQUIRE(s, released == (before.device_held - after.device_held) + (before.host_held - after.host_held),
            "trim released %zu, held went %zu+%zu -> %zu+%zu", released, before.device_held,
            before.host_held, after.device_held, after.host_held);
    arena_check_released(s, &s->v->dev, "after trim (device)");
    arena_check_released(s, &s->v->host, "after trim (host)");
    live_sweep(s, 0);
}

static void op_host_fallback(shadow_t *s, reader_t *r)
{
    int on = reader_u8(r) & 1;
    REQUIRE(s, vmem_set_host_fallback(s->v, on) == VMEM_OK, "set_host_fallback failed");
    s->host_fallback = on;
}

static void op_inject(shadow_t *s, reader_t *r)
{
    uint8_t a = reader_u8(r);
    uint8_t n = reader_u8(r);
    uint8_t q = reader_u8(r);
    uint64_t seed = reader_bytes(r, 4);
    vmem_arena_kind_t arena = (a & 1) ? VMEM_ARENA_HOST : VMEM_ARENA_DEVICE;
    fuzz_totals.faults++;
    if (a & 2) { /* invalid arguments change nothing */
        const double bad[] = {-0.5, 1.5, NAN, INFINITY};
        REQUIRE(s, vmem_inject_faults(s->v, arena, 1, bad[q % 4], seed) == VMEM_ERR_INVALID,
                "inject_faults accepted rate %g", bad[q % 4]);
        REQUIRE(s, vmem_inject_faults(s->v, (vmem_arena_kind_t)(2 + q), 1, 0, seed) == VMEM_ERR_INVALID,
                "inject_faults accepted arena %d", 2 + q);
        return;
    }
    uint64_t nth = n % 8;
    double rate = (double)(q % 9) / 16.0;
    REQUIRE(s, vmem_inject_faults(s->v, arena, nth, rate, seed) == VMEM_OK, "inject_faults failed");
    int armed = nth != 0 || rate > 0;
    if (arena == VMEM_ARENA_HOST)
        s->host_faults = armed;
    else
        s->dev_faults = armed;
}

static void op_alloc_stream(shadow_t *s, reader_t *r)
{
    unsigned k = reader_u8(r) % NSTREAMS;
    size_t size = size_draw(s, r);
    if (s->nlive >= MAX_LIVE)
        return;
    op_alloc_size(s, size, s->streams_ok ? stream_handle(k) : NULL);
}

/* Frees a live block on a stream; when the byte's top bit is set, first
 * records a copy stream's use of it (vmem_record_stream): the free is then
 * deferred (held, not in use) until an allocation needs the memory, a limit
 * change, a trim or the teardown gives it back. */
static void op_free_stream(shadow_t *s, reader_t *r)
{
    uint8_t kb = reader_u8(r);
    unsigned k = kb % NSTREAMS;
    uint16_t i = (uint16_t)reader_bytes(r, 2);
    if (!s->nlive)
        return;
    size_t j = i % s->nlive;
    if (kb & 0x80) {
        vmem_status_t st = vmem_record_stream(s->v, (void *)s->live[j].base, (void *)0xC0B1);
        REQUIRE(s, st == VMEM_OK, "record_stream of live block %p: %s",
                (void *)s->live[j].base, vmem_strerror(st));
        fuzz_totals.deferred++;
    }
    block_free(s, j, s->streams_ok ? stream_handle(k) : NULL);
}

static void op_ptr_info(shadow_t *s, reader_t *r)
{
    uint8_t kind = reader_u8(r);
    uint64_t x = reader_bytes(r, 4);
    vmem_ptr_info_t info;
    if (kind & 1) {
        if (!s->nlive)
            return;
        block_t *b = &s->live[x % s->nlive];
        uintptr_t p = b->base + (x >> 8) % b->size;
        REQUIRE(s, vmem_ptr_info(s->v, (void *)p, &info) == VMEM_OK && info.base == (void *)b->base,
                "interior pointer %#lx of block %p not resolved", (unsigned long)p, (void *)b->base);
        block_check_info(s, b, 0);
        return;
    }
    uintptr_t p = s->nfreed ? s->freed[x % (s->nfreed < FREED_RING ? s->nfreed : FREED_RING)] : 0;
    if (kind & 2)
        p = (uintptr_t)s->probe;
    int start;
    if (spans_contain(s, p, &start))
        return;
    REQUIRE(s, vmem_ptr_info(s->v, (void *)p, &info) == VMEM_ERR_FOREIGN_PTR,
            "ptr_info(%#lx) of a dead address succeeded", (unsigned long)p);
    REQUIRE(s, vmem_ptr_info(s->v, (void *)p, NULL) == VMEM_ERR_INVALID, "ptr_info(NULL info)");
}

static void op_stats_json(shadow_t *s, reader_t *r)
{
    char buf[512];
    size_t len = reader_u8(r) * 2u;
    size_t needed = 0;
    memset(buf, 'x', sizeof buf);
    vmem_status_t st = vmem_stats_json(s->v, len ? buf : NULL, len, &needed);
    if (len > needed) {
        REQUIRE(s, st == VMEM_OK && strlen(buf) == needed, "stats_json(%zu): %s, needed %zu", len,
                vmem_strerror(st), needed);
        REQUIRE(s, strstr(buf, "\"deviceMemPoolSize\"") != NULL, "stats_json lacks deviceMemPoolSize");
    } else {
        REQUIRE(s, st == VMEM_ERR_SIZE, "stats_json(%zu) with needed %zu: %s", len, needed,
                vmem_strerror(st));
        if (len)
            REQUIRE(s, strlen(buf) == len - 1, "truncated stats_json not terminated");
    }
    REQUIRE(s, buf[len] == 'x', "stats_json wrote past its buffer of %zu bytes", len);
}

/* Size strings: never crashes, and plain / suffixed numbers parse exactly. */
static void op_parse_size(shadow_t *s, reader_t *r)
{
    char text[32];
    unsigned n = reader_u8(r) % 24;
    for (unsigned i = 0; i < n; i++) {
        uint8_t c = reader_u8(r);
        const char alphabet[] = "0123456789KMGTkmgtiB -+x.\t";
        text[i] = (c & 0x80) ? (char)(c & 0x7f) : alphabet[c % (sizeof alphabet - 1)];
        if (!text[i])
            text[i] = '0';
    }
    text[n] = 0;
    size_t out = 777;
    vmem_status_t st = vmem_parse_size(text, &out);
    REQUIRE(s, st == VMEM_OK || st == VMEM_ERR_PARSE, "parse_size(\"%s\"): %s", text,
            vmem_strerror(st));
    if (st != VMEM_OK)
        REQUIRE(s, out == 777, "parse_size(\"%s\") failed but wrote its result", text);
    /* Reference for digits followed by at most one of K, M, G, T. */
    size_t i = 0;
    unsigned long long ref = 0;
    int overflow = 0;
    while (text[i] >= '0' && text[i] <= '9') {
        if (ref > (ULLONG_MAX - 9) / 10)
            overflow = 1;
        ref = ref * 10 + (unsigned)(text[i] - '0');
        i++;
    }
    if (i == 0 || i > 18 || overflow)
        return;
    unsigned shift = 0;
    switch (text[i]) {
    case 'K': case 'k': shift = 10; i++; break;
    case 'M': case 'm': shift = 20; i++; break;
    case 'G': case 'g': shift = 30; i++; break;
    case 'T': case 't': shift = 40; i++; break;
    default: break;
    }
    if (text[i] != 0)
        return;
    if (ref > (SIZE_MAX >> shift))
        REQUIRE(s, st == VMEM_ERR_PARSE, "parse_size(\"%s\") accepted an overflow", text);
    else
        REQUIRE(s, st == VMEM_OK && out == (size_t)(ref << shift), "parse_size(\"%s\"): %s, %zu",
                text, vmem_strerror(st), out);
}

static void op_burst_alloc(shadow_t *s, reader_t *r)
{
    unsigned n = 1 + reader_u8(r) % 16;
    size_t size = size_draw(s, r);
    for (unsigned i = 0; i < n && s->nlive < MAX_LIVE; i++) {
        op_alloc_size(s, size, NULL);
        shadow_verify(s, NULL);
    }
}

static void op_burst_free(shadow_t *s, reader_t *r)
{
    unsigned n = 1 + reader_u8(r) % 16;
    uint16_t k = (uint16_t)reader_bytes(r, 2);
    for (unsigned i = 0; i < n && s->nlive; i++) {
        block_free(s, (k + i * 7u) % s->nlive, NULL);
        shadow_verify(s, NULL);
    }
}

/* Opcode byte ranges (out of 256). */
enum {
    OPS_ALLOC = 100,       /* [0, 100) */
    OPS_FREE = 170,        /* [100, 170) */
    OPS_FREE_TWICE = 178,
    OPS_FREE_STALE = 186,
    OPS_FREE_FOREIGN = 196,
    OPS_SET_LIMIT = 206,
    OPS_STEP_END = 212,
    OPS_TRIM = 217,
    OPS_HOST_LIMIT = 222,
    OPS_FALLBACK = 226,
    OPS_INJECT = 232,
    OPS_CLEAR_FAULTS = 236,
    OPS_ALLOC_STREAM = 242,
    OPS_FREE_STREAM = 246,
    OPS_PTR_INFO = 250,
    OPS_STATS_JSON = 252,
    OPS_PARSE = 254,
    OPS_BURST_ALLOC = 255,
    OPS_BURST_FREE = 256
};

static void op_run(shadow_t *s, reader_t *r)
{
    unsigned op = reader_u8(r);
    vmem_stats_t before = stats_get(s);
    if (op < OPS_ALLOC && s->nlive >= MAX_LIVE)
        op = OPS_ALLOC; /* full: free instead */
#define OP(name) (s->op_name = (name), trace_ops > 0 ? (void)fprintf(stderr, "op %u: %s\n", s->op_index, name) : (void)0)
    if (op < OPS_ALLOC) {
        OP("alloc");
        op_alloc(s, r);
    } else if (op < OPS_FREE) {
        OP("free");
        op_free(s, r);
    } else if (op < OPS_FREE_TWICE) {
        OP("free twice");
        op_free_twice(s, r);
    } else if (op < OPS_FREE_STALE) {
        OP("free stale");
        op_free_stale(s, r);
    } else if (op < OPS_FREE_FOREIGN) {
        OP("free foreign");
        op_free_foreign(s, r);
    } else if (op < OPS_SET_LIMIT) {
        OP("set limit");
        op_set_limit(s, r);
    } else if (op < OPS_STEP_END) {
        OP("step end");
        op_step_end(s);
    } else if (op < OPS_TRIM) {
        OP("trim");
        op_trim(s);
    } else if (op < OPS_HOST_LIMIT) {
        OP("host limit");
        op_set_host_limit(s, r);
    } else if (op < OPS_FALLBACK) {
        OP("host fallback");
        op_host_fallback(s, r);
    } else if (op < OPS_INJECT) {
        OP("inject faults");
        op_inject(s, r);
    } else if (op < OPS_CLEAR_FAULTS) {
        OP("clear faults");
        uint8_t a = reader_u8(r);
        vmem_arena_kind_t arena = (a & 1) ? VMEM_ARENA_HOST : VMEM_ARENA_DEVICE;
        REQUIRE(s, vmem_inject_faults(s->v, arena, 0, 0, 0) == VMEM_OK, "clear faults failed");
        if (arena == VMEM_ARENA_HOST)
            s->host_faults = 0;
        else
            s->dev_faults = 0;
    } else if (op < OPS_ALLOC_STREAM) {
        OP("alloc stream");
        op_alloc_stream(s, r);
    } else if (op < OPS_FREE_STREAM) {
        OP("free stream");
        op_free_stream(s, r);
    } else if (op < OPS_PTR_INFO) {
        OP("ptr info");
        op_ptr_info(s, r);
    } else if (op < OPS_STATS_JSON) {
        OP("stats json");
        op_stats_json(s, r);
    } else if (op < OPS_PARSE) {
        OP("parse size");
        op_parse_size(s, r);
    } else if (op < OPS_BURST_ALLOC) {
        OP("burst alloc");
        op_burst_alloc(s, r);
    } else {
        OP("burst free");
        op_burst_free(s, r);
    }
#undef OP
    if (trace_ops > 1) {
        arena_dump("device", &s->v->dev);
        arena_dump("host", &s->v->host);
    }
    shadow_verify(s, &before);
    /* A rotating spot check of where blocks are. */
    if (s->nlive) {
        block_t *b = &s->live[s->op_index % s->nlive];
        block_check_info(s, b, 0);
    }
}

/* ------------------------------------------------------------------------ */
/* One input                                                                */
/* ------------------------------------------------------------------------ */

static void shadow_open(shadow_t *s, uint8_t c)
{
    static const size_t caps[] = {64 * MiB, 256 * MiB, GiB, 8 * GiB};
    static const size_t host_caps[] = {0, 32 * MiB, 256 * MiB, 2 * GiB};
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    s->vmm = c & 1;
    /* FUZZ_BACKEND=sim or sim-vmm pins the backend (valgrind cannot reserve
     * sim-vmm's range: scripts/sanitize.sh valgrind uses sim). */
    const char *pin = getenv("FUZZ_BACKEND");
    if (pin && !strcmp(pin, "sim"))
        s->vmm = 0;
    else if (pin && !strcmp(pin, "sim-vmm"))
        s->vmm = 1;
    cfg.backend = s->vmm ? VMEM_BACKEND_SIM_VMM : VMEM_BACKEND_SIM;
    cfg.sim_capacity = caps[(c >> 1) & 3];
    /* FUZZ_PLACEMENT=naive|farthest|largest|swap pins the placement (swap
     * windows move live blocks before allocations; with VMEM_VMM_BIG_MIB=4
     * the fuzzer's blocks hold whole move units). */
    const char *pl = getenv("FUZZ_PLACEMENT");
    if (pl && *pl)
        placement_parse(pl, &cfg.placement);
    switch ((c >> 3) & 3) {
    case 0: cfg.limit = 0; break;                            /* the device's free memory */
    case 1: cfg.limit = 16 * MiB; break;
    case 2: cfg.limit = 100 * MiB + 3; break;                /* not granule-aligned */
    default: cfg.limit = cfg.sim_capacity / 2; break;
    }
    cfg.host_fallback = !((c >> 5) & 1);
    cfg.host_limit = host_caps[(c >> 6) & 3];
    cfg.log_fn = log_sink;
    cfg.log_ctx = s;
    cfg.log_level = VMEM_LOG_WARN;
    vmem_status_t st = vmem_create(&cfg, &s->v);
    REQUIRE(s, st == VMEM_OK, "vmem_create: %s", vmem_strerror(st));
    s->capacity = cfg.sim_capacity;
    s->host_capacity = cfg.host_limit ? cfg.host_limit : VMEM_DEFAULT_HOST_LIMIT;
    s->host_fallback = cfg.host_fallback;
    vmem_stats_t st0 = stats_get(s);
    REQUIRE(s, st0.limit == (cfg.limit ? cfg.limit : cfg.sim_capacity) && st0.start_cap == st0.limit,
            "created with limit %zu cap %zu", st0.limit, st0.start_cap);
}

/* Frees everything, then checks nothing is held and the allocator works. */
static void shadow_close(shadow_t *s)
{
    s->op_name = "teardown";
    live_sweep(s, 0);
    while (s->nlive) {
        block_free(s, s->nlive - 1, NULL);
        shadow_verify(s, NULL);
    }
    REQUIRE(s, vmem_inject_faults(s->v, VMEM_ARENA_DEVICE, 0, 0, 0) == VMEM_OK &&
                   vmem_inject_faults(s->v, VMEM_ARENA_HOST, 0, 0, 0) == VMEM_OK,
            "clear faults");
    s->dev_faults = s->host_faults = 0;
    size_t released = 0;
    REQUIRE(s, vmem_trim(s->v, &released) == VMEM_OK, "final trim");
    vmem_stats_t st = stats_get(s);
    REQUIRE(s, st.device_held == 0 && st.host_held == 0 && st.device_in_use == 0 &&
                   st.host_in_use == 0 && !stats_pending(&st),
            "after freeing everything and a trim: device held %zu, host held %zu", st.device_held,
            st.host_held);
    shadow_verify(s, NULL);
    /* Still works: a small block fits any state reachable from here. */
    s->op_name = "keeps working";
    size_t applied;
    vmem_status_t lst = vmem_set_limit_ex(s->v, 64 * MiB, VMEM_LIMIT_FORCE, &applied);
    REQUIRE(s, lst == VMEM_OK, "set_limit(64 MiB) on an empty allocator: %s", vmem_strerror(lst));
    op_alloc_size(s, MiB, NULL);
    REQUIRE(s, s->nlive == 1 && s->live[0].loc == VMEM_LOC_DEVICE,
            "1 MiB did not land on the device of an empty allocator");
    shadow_verify(s, NULL);
    block_free(s, 0, NULL);
    shadow_verify(s, NULL);
    vmem_stats_t fin;
    memset(&fin, 0, sizeof fin);
    fin.size = sizeof fin;
    if (vmem_get_stats(s->v, &fin) == VMEM_OK)
        fuzz_totals.remaps += fin.device_remaps;
    vmem_destroy(s->v);
    if (s->other) {
        REQUIRE(s, vmem_free(s->other, s->other_block) == VMEM_OK, "second instance free");
        vmem_destroy(s->other);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static shadow_t s; /* large: kept out of the stack */
    if (trace_ops < 0) {
        const char *t = getenv("FUZZ_TRACE");
        trace_ops = t ? atoi(t) : 0;
        vmem_set_log(silent_sink, NULL, VMEM_LOG_NONE);
    }
    if (size < 1)
        return 0;
    reader_t r = {data, size, 0};
    memset(&s, 0, sizeof s);
    uint8_t c = reader_u8(&r);
    shadow_open(&s, c);
    static int cuda_device = -1;
    if (cuda_device < 0)
        cuda_device = backend_cuda_present(0);
    s.streams_ok = !cuda_device;
    shadow_verify(&s, NULL);
    while (reader_more(&r) && s.op_index < MAX_OPS) {
        op_run(&s, &r);
        s.op_index++;
    }
    shadow_close(&s);
    fuzz_totals.inputs++;
    fuzz_totals.ops += s.op_index;
    return 0;
}

void fuzz_totals_print(FILE *out)
{
    fprintf(out,
            "fuzz_ops: %llu inputs, %llu operations (%llu allocations, %llu spilled, %llu NULL, "
            "%llu bad frees rejected, %llu pending shrinks, %llu fault injections, %llu remaps, "
            "%llu deferred frees), 0 violations\n",
            (unsigned long long)fuzz_totals.inputs, (unsigned long long)fuzz_totals.ops,
            (unsigned long long)fuzz_totals.allocs_ok, (unsigned long long)fuzz_totals.spills,
            (unsigned long long)fuzz_totals.allocs_null, (unsigned long long)fuzz_totals.bad_frees,
            (unsigned long long)fuzz_totals.pending, (unsigned long long)fuzz_totals.faults,
            (unsigned long long)fuzz_totals.remaps, (unsigned long long)fuzz_totals.deferred);
}

#ifdef FUZZ_LIBFUZZER
static void totals_at_exit(void) { fuzz_totals_print(stderr); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    atexit(totals_at_exit);
    return 0;
}
#endif
