/*
 * vmem-shrink-trace: page-granular shrinks on the fragmentation of real jobs.
 *
 * vmm-bench measures the two extremes of "give back 8 GiB of free granules":
 * all in one run, and scattered (one live granule in every three).  This tool
 * measures what a scheduler meets in practice: it replays a recorded trace
 * (../shared/traces) through libvmem and, at N points, cuts the limit to the
 * device memory the live blocks need (every granule a live block touches:
 * the lowest limit that applies at once, with no data moved), times
 * vmem_set_limit, checks that it applied at once, and raises the limit again
 * (the replay goes on and the arena grows back).  The points: the trace is cut
 * into N equal parts by event index and in each the event with the least
 * live memory is taken (where the most is free: the largest shrinks).
 *
 * Per point it prints one JSON line: bytes given back, milliseconds, and the
 * shape of what was given back, measured on the engine before the cut:
 * holes (runs of free granules), the 64 MiB-aligned pieces of the range that
 * hold both free and live granules ("cut": a vmm backend with 64 MiB handles
 * must re-back their live granules), and the live granules and live runs
 * inside them.  With --backend vmm it adds the backend's own counters
 * (splits).  A last line sums it up, with the milliseconds per GiB given back.
 *
 * Usage: vmem-shrink-trace [--backend sim-vmm|vmm] [--points N] TRACE.txt.gz
 * Exit 0, 1 on a shrink that did not apply at once or an engine check
 * failure, 2 on bad usage or an unreadable trace.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "trace.h"
#include "vmem_internal.h"
#ifdef VMEM_HAVE_CUDA
#include "cuda_driver.h"
#endif

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define BIG_GRANULES 32 /* granules per 64 MiB handle at a 2 MiB granule */

typedef struct shape {
    size_t footprint;       /* bytes of granules touched by live blocks */
    size_t free_granules, holes, cut, cut_live, cut_live_runs;
} shape_t;

typedef struct probe {
    vmem_t *v;
    size_t *points;
    size_t npoints, next;
    int failures;
    size_t total_released;
    double total_s, max_s;
    size_t max_released;
} probe_t;

/* The engine's regions granule by granule: 1 where a live chunk touches. */
static shape_t shape_of(const bfc_arena_t *a)
{
    shape_t s = {0};
    size_t g = a->granule;
    uintptr_t base = a->backend->range_base;
    size_t big = BIG_GRANULES * (2 * MiB) / g;
    if (big < 1)
        big = 1;
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        size_t n = r->size / g;
        unsigned char *live = calloc(n, 1);
        if (!live)
            abort();
        for (const bfc_chunk_t *c = r->first; c && c->region == r; c = c->next)
            if (c->in_use)
                memset(live + (c->addr - r->base) / g, 1,
                       (c->addr + c->size - 1 - r->base) / g - (c->addr - r->base) / g + 1);
        for (size_t i = 0; i < n; i++) {
            s.footprint += live[i] ? g : 0;
            if (!live[i]) {
                s.free_granules++;
                s.holes += i == 0 || live[i - 1];
            }
        }
        /* 64 MiB-aligned pieces (relative to the backend's range) wholly
         * inside the region, holding free and live granules. */
        size_t first = (r->base - base) / g;
        for (size_t i = 0; i < n;) {
            size_t gi = first + i;
            if (gi % big != 0 || i + big > n) {
                i++;
                continue;
            }
            size_t nl = 0, runs = 0;
            for (size_t k = i; k < i + big; k++) {
                nl += live[k];
                runs += live[k] && (k == i || !live[k - 1]);
            }
            if (nl > 0 && nl < big) {
                s.cut++;
                s.cut_live += nl;
                s.cut_live_runs += runs;
            }
            i += big;
        }
        free(live);
    }
    return s;
}

static void at_point(probe_t *p, size_t i)
{
    vmem_t *v = p->v;
    shape_t s = shape_of(&v->dev);
    size_t held = v->dev.held, old = v->dev.limit, applied = 0;
#ifdef VMEM_HAVE_CUDA
    backend_vmm_counters_t c0 = {0}, c1 = {0};
    int vmm = backend_vmm_counters(v->dev_backend, &c0) == 0;
#endif
    double t0 = vmem_now();
    vmem_status_t st = vmem_set_limit(v, s.footprint, &applied);
    double t1 = vmem_now();
    if (st != VMEM_OK || applied > s.footprint) {
        fprintf(stderr, "vmem-shrink-trace: event %zu: the cut to %zu did not apply at once "
                        "(%s, held %zu)\n", i, s.footprint, vmem_strerror(st), applied);
        p->failures++;
    }
    size_t released = held > applied ? held - applied : 0;
    printf("{\"point\": %zu, \"event\": %zu, \"held\": %zu, \"live_footprint\": %zu, "
           "\"released\": %zu, \"ms\": %.3f, \"holes\": %zu, \"free_granules\": %zu, "
           "\"cut_64mib\": %zu, \"cut_live_granules\": %zu, \"cut_live_runs\": %zu",
           p->next, i, held, s.footprint, released, (t1 - t0) * 1e3, s.holes, s.free_granules,
           s.cut, s.cut_live, s.cut_live_runs);
#ifdef VMEM_HAVE_CUDA
    if (vmm && backend_vmm_counters(v->dev_backend, &c1) == 0)
        printf(", \"vmm_splits\": %llu, \"vmm_split_failures\": %llu, \"vmm_zombie\": %zu",
               c1.splits - c0.splits, c1.split_failures - c0.split_failures, c1.zombie_bytes);
#endif
    printf("}\n");
    fflush(stdout);
    p->total_released += released;
    p->total_s += t1 - t0;
    if (t1 - t0 > p->max_s) {
        p->max_s = t1 - t0;
        p->max_released = released;
    }
    if (vmem_check(v) != VMEM_OK) {
        fprintf(stderr, "vmem-shrink-trace: vmem_check failed after the cut at event %zu\n", i);
        p->failures++;
    }
    vmem_set_limit(v, old, NULL);
}

static void observe(void *octx, size_t i)
{
    probe_t *p = octx;
    if (p->next < p->npoints && p->points[p->next] == i) {
        at_point(p, i);
        p->next++;
    }
}

static void *op_alloc(void *ctx, size_t size) { return vmem_alloc(ctx, size); }
static void op_free(void *ctx, void *ptr) { vmem_free(ctx, ptr); }

/* In each of n equal parts of the trace, the event after which the least
 * is live (requested bytes); the first tenth (model set-up) is skipped. */
static size_t pick_points(const trace_t *t, size_t n, size_t *out)
{
    uint64_t *size = calloc(t->nslots ? t->nslots : 1, sizeof *size);
    uint64_t live = 0;
    size_t start = t->nevents / 10, k = 0;
    size_t len = (t->nevents - start) / n;
    if (!size || len == 0) {
        free(size);
        return 0;
    }
    size_t best = 0;
    uint64_t best_live = UINT64_MAX;
    for (size_t i = 0; i < t->nevents; i++) {
        const trace_event_t *e = &t->events[i];
        if (e->is_free)
            live -= size[e->slot];
        else
            live += size[e->slot] = e->size;
        if (i < start)
            continue;
        if (live < best_live) {
            best_live = live;
            best = i;
        }
        if ((i - start + 1) % len == 0 && k < n) {
            out[k++] = best;
            best_live = UINT64_MAX;
        }
    }
    free(size);
    return k;
}

int main(int argc, char **argv)
{
    const char *backend = "sim-vmm", *path = NULL;
    size_t npoints = 16;
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: vmem-shrink-trace [--backend sim-vmm|vmm] [--points N (1..1000)] "
               "TRACE.txt.gz\n"
               "Replays the trace and at N points cuts the limit to the live bytes, then raises\n"
               "it again; one JSON line per cut (docs/vmm.md).\n"
               "exit status: 0 done, 1 a shrink did not apply at once or a check failed, 2 bad\n"
               "usage or an unreadable trace\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--points") && i + 1 < argc) {
            char *end;
            npoints = strtoul(argv[++i], &end, 10);
            if (*end || argv[i][0] < '0' || argv[i][0] > '9')
                npoints = 0; /* "5x", "-1": usage */
        }
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            path = NULL;
            break;
        }
    }
    vmem_backend_kind_t kind = !strcmp(backend, "vmm")       ? VMEM_BACKEND_VMM
                               : !strcmp(backend, "sim-vmm") ? VMEM_BACKEND_SIM_VMM
                                                             : (vmem_backend_kind_t)-1;
    if (!path || npoints == 0 || npoints > 1000 || kind == (vmem_backend_kind_t)-1) {
        fprintf(stderr, "usage: vmem-shrink-trace [--backend sim-vmm|vmm] [--points N (1..1000)] "
                        "TRACE.txt.gz\n");
        return 2;
    }
    trace_t t;
    char err[512];
    if (trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "vmem-shrink-trace: %s\n", err);
        return 2;
    }
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = kind;
    cfg.limit = 0; /* the start cap */
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    if (st != VMEM_OK) {
        fprintf(stderr, "vmem-shrink-trace: vmem_create(%s): %s\n", backend, vmem_strerror(st));
        trace_free(&t);
        return st == VMEM_ERR_UNAVAILABLE ? 77 : 1;
    }
    probe_t p = {.v = v};
    p.points = calloc(npoints, sizeof *p.points);
    p.npoints = p.points ? pick_points(&t, npoints, p.points) : 0;
    void **ptrs = calloc(t.nslots ? t.nslots : 1, sizeof *ptrs);
    if (!ptrs || p.npoints == 0) {
        fprintf(stderr, "vmem-shrink-trace: %s: too short for %zu points\n", t.name, npoints);
        free(ptrs);
        free(p.points);
        vmem_destroy(v);
        trace_free(&t);
        return 2;
    }
    replay_ops_t ops = {.ctx = v, .alloc = op_alloc, .free = op_free};
    uint64_t failed = 0;
    replay_pass(&t, &ops, ptrs, &failed, observe, &p);
    for (size_t i = 0; i < t.nslots; i++)
        if (ptrs[i])
            vmem_free(v, ptrs[i]);
    printf("{\"trace\": ");
    replay_json_string(stdout, t.name);
    printf(", \"backend\": \"%s\", \"points\": %zu, \"released\": %zu, \"ms\": %.3f, "
           "\"ms_per_gib\": %.3f, \"max_ms\": %.3f, \"max_ms_released\": %zu, "
           "\"failed_allocs\": %llu, \"failures\": %d}\n",
           backend, p.npoints, p.total_released, p.total_s * 1e3,
           p.total_released ? p.total_s * 1e3 / ((double)p.total_released / (double)GiB) : 0.0,
           p.max_s * 1e3, p.max_released, (unsigned long long)failed, p.failures);
    free(ptrs);
    free(p.points);
    vmem_destroy(v);
    trace_free(&t);
    return p.failures ? 1 : 0;
}
