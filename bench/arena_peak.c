/*
 * vmem-arena-peak: the device arena at the moment it reaches its peak held
 * (docs/benchmarks.md, "Held over live").
 *
 * Replays a trace (no limit, the default growth policy and the VMEM_GROWTH /
 * VMEM_TRIM* / VMEM_LAYOUT* environment, with vmem_step_end at the step
 * boundaries vmem-replay uses), --passes times on one instance (default 2:
 * vmem-replay --repeat 1's warm-up and timed pass, so that both tools find
 * the same peak; a job whose requests vary can reach it in a later pass),
 * and finds the event after which the device arena first held its largest
 * amount; then replays it again on a
 * fresh instance (the sim backends are deterministic) and, after that event,
 * prints the arena: held, live (in use), the request that grew it, every
 * region (offset from the range's base, size, live blocks), every free chunk
 * and live block of at least --min-chunk bytes (default 2 MiB) with its age
 * in allocations (smaller live blocks summed per run),
 * and the free bytes that lie in whole free granules.  --at EVENT dumps
 * after that event (0-based, 's' lines not counted, counting on through
 * the passes: pass 1's first event is the trace's event count) instead;
 * --limit BYTES
 * replays under that limit and dumps before the first allocation that
 * spills (why min_limit is where it is).  Plain text, for
 * people; nothing parses it.
 *
 * Usage: vmem-arena-peak [--backend sim|sim-vmm|cuda|vmm] [--min-chunk BYTES] [--at EVENT] [--limit BYTES]
 *                        [--passes N] TRACE.txt.gz
 * Exit 0, 1 when the replays disagree (a backend that is not deterministic),
 * 2 on bad usage or an unreadable trace, 77 when the backend is unavailable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "steps.h"
#include "trace.h"
#include "vmem_internal.h"

#define MiB ((double)(1 << 20))

typedef struct peak {
    vmem_t *v;
    const trace_t *t;
    size_t held, at;   /* first pass: the largest held, first event reaching it
                          (with a limit: the first event that spilled) */
    size_t limit;      /* 0: none */
    size_t dump_at;    /* second pass: the event to dump after (SIZE_MAX: none) */
    size_t min_chunk;
    size_t dumped_held;
    size_t passes;     /* passes per replay (>= 1) */
    size_t base;       /* the current pass's first event, counted through the passes */
} peak_t;

static void *op_alloc(void *ctx, size_t size) { return vmem_alloc(ctx, size); }
static void op_free(void *ctx, void *ptr) { vmem_free(ctx, ptr); }
static void op_step(void *ctx) { vmem_step_end(ctx); }

static void find_peak(void *octx, size_t i)
{
    peak_t *p = octx;
    i += p->base;
    if (p->limit) {
        if (p->v->spills && p->at == SIZE_MAX)
            p->at = i;
        return;
    }
    if (p->v->dev.held > p->held) {
        p->held = p->v->dev.held;
        p->at = i;
    }
}

static void dump(const peak_t *p, size_t i)
{
    const bfc_arena_t *a = &p->v->dev;
    size_t n = p->t->nevents;
    const trace_event_t *e = &p->t->events[i % n];
    size_t g = a->granule, whole = 0, free_bytes = 0, nfree = 0;
    uintptr_t base = a->backend->range_base;
    if (p->limit && i % n + 1 < n)
        printf("next event %zu: %s of %.1f MiB\n", i + 1,
               p->t->events[i % n + 1].is_free ? "free" : "alloc",
               (double)p->t->events[i % n + 1].size / MiB);
    printf("event %zu (pass %zu; %s of %.1f MiB): held %.1f MiB, in use %.1f MiB (held/in use %.4f), "
           "regions %zu, granule %.0f MiB\n",
           i, i / n, e->is_free ? "free" : "alloc", e->is_free ? 0.0 : (double)e->size / MiB,
           (double)a->held / MiB, (double)a->in_use / MiB,
           a->in_use ? (double)a->held / (double)a->in_use : 0.0, a->nregions, (double)g / MiB);
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        printf("region +%.1f MiB size %.1f MiB live blocks %zu%s\n",
               (double)(r->base - base) / MiB, (double)r->size / MiB, r->live,
               r->dedicated ? " dedicated" : "");
        size_t run_live = 0, run_n = 0;
        for (const bfc_chunk_t *c = r->first; c; c = c->next) {
            if (c->in_use && c->size >= p->min_chunk) {
                if (run_n)
                    printf("  live  %8zu blocks %10.1f MiB\n", run_n, (double)run_live / MiB);
                run_live = run_n = 0;
                printf("  LIVE  +%.1f MiB %10.1f MiB, allocated %llu allocations ago\n",
                       (double)(c->addr - base) / MiB, (double)c->size / MiB,
                       (unsigned long long)(a->seq - c->seq));
                continue;
            }
            if (c->in_use) {
                run_live += c->size;
                run_n++;
                continue;
            }
            uintptr_t lo = (c->addr + g - 1) / g * g, hi = (c->addr + c->size) / g * g;
            whole += hi > lo ? hi - lo : 0;
            free_bytes += c->size;
            nfree++;
            if (c->size < p->min_chunk)
                continue;
            if (run_n)
                printf("  live  %8zu blocks %10.1f MiB\n", run_n, (double)run_live / MiB);
            run_live = run_n = 0;
            printf("  FREE  +%.1f MiB %10.1f MiB, unused for %llu allocations%s\n",
                   (double)(c->addr - base) / MiB, (double)c->size / MiB,
                   (unsigned long long)(a->seq - c->seq),
                   c->stream == BFC_STREAM_HOST ? " (host)" : "");
        }
        if (run_n)
            printf("  live  %8zu blocks %10.1f MiB\n", run_n, (double)run_live / MiB);
    }
    printf("free chunks %zu: %.1f MiB, of which in whole granules %.1f MiB; host held %.1f MiB\n",
           nfree, (double)free_bytes / MiB, (double)whole / MiB, (double)a->held_host / MiB);
}

static void at_event(void *octx, size_t i)
{
    peak_t *p = octx;
    i += p->base;
    if (i == p->dump_at) {
        p->dumped_held = p->v->dev.held;
        dump(p, i);
    }
}

static int replay_once(const trace_t *t, peak_t *p, replay_observe_fn fn, vmem_backend_kind_t k)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = k;
    cfg.limit = p->limit;
    cfg.sim_capacity = (size_t)80 << 30; /* as vmem-replay's default */
    vmem_status_t st = vmem_create(&cfg, &p->v);
    if (st != VMEM_OK) {
        fprintf(stderr, "vmem-arena-peak: vmem_create: %s\n", vmem_strerror(st));
        return st == VMEM_ERR_UNAVAILABLE ? 77 : 1;
    }
    void **ptrs = calloc(t->nslots ? t->nslots : 1, sizeof *ptrs);
    if (!ptrs) {
        vmem_destroy(p->v);
        return 1;
    }
    /* The step boundaries vmem-replay uses (steps.h): the planners learn from them. */
    size_t *steps = NULL;
    steps_source_t src;
    size_t nsteps = trace_steps(t, &steps, &src);
    if (nsteps == (size_t)-1)
        nsteps = 0;
    replay_ops_t ops = {.ctx = p->v, .alloc = op_alloc, .free = op_free, .step = op_step,
                        .steps = steps, .nsteps = nsteps};
    uint64_t failed = 0;
    for (size_t k = 0; k < p->passes; k++) { /* each pass frees what it left live */
        p->base = k * t->nevents;
        replay_pass(t, &ops, ptrs, &failed, fn, p);
    }
    free(ptrs);
    free(steps);
    vmem_destroy(p->v);
    p->v = NULL;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: vmem-arena-peak [--backend sim|sim-vmm|cuda|vmm] [--min-chunk BYTES] "
                    "[--at EVENT] [--limit BYTES] [--passes N] TRACE.txt.gz\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *backend = "sim-vmm", *path = NULL;
    size_t min_chunk = (size_t)2 << 20, at = SIZE_MAX, limit = 0, passes = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: vmem-arena-peak [--backend sim|sim-vmm|cuda|vmm] [--min-chunk BYTES] "
                   "[--at EVENT] [--limit BYTES] [--passes N] TRACE.txt.gz\n"
                   "Prints the device arena (regions, free and live chunks of at least BYTES, default\n"
                   "2 MiB) after the event at which an uncapped replay of N passes (default 2, as\n"
                   "vmem-replay --repeat 1) first holds its peak (--at: after that event instead,\n"
                   "counted on through the passes; --limit: with that limit, before the first\n"
                   "allocation that spills).\n");
            return 0;
        }
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--at") && i + 1 < argc) {
            char *end;
            at = strtoull(argv[++i], &end, 10);
            if (*end || argv[i][0] < '0' || argv[i][0] > '9')
                return usage();
        } else if (!strcmp(argv[i], "--limit") && i + 1 < argc) {
            if (vmem_parse_size(argv[++i], &limit) != VMEM_OK || limit == 0)
                return usage();
        } else if (!strcmp(argv[i], "--passes") && i + 1 < argc) {
            char *end;
            passes = strtoull(argv[++i], &end, 10);
            if (*end || argv[i][0] < '1' || argv[i][0] > '9' || passes > 1000)
                return usage();
        } else if (!strcmp(argv[i], "--min-chunk") && i + 1 < argc) {
            if (vmem_parse_size(argv[++i], &min_chunk) != VMEM_OK)
                return usage();
        } else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            return usage();
    }
    vmem_backend_kind_t kind = VMEM_BACKEND_AUTO;
    for (int k = VMEM_BACKEND_SIM; k <= VMEM_BACKEND_VMM; k++)
        if (!strcmp(backend, vmem_backend_name((vmem_backend_kind_t)k)))
            kind = (vmem_backend_kind_t)k;
    if (!path || kind == VMEM_BACKEND_AUTO)
        return usage();
    trace_t t;
    char err[512];
    if (trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "vmem-arena-peak: %s\n", err);
        return 2;
    }
    if (t.nevents == 0) {
        fprintf(stderr, "vmem-arena-peak: %s: no events\n", t.name);
        trace_free(&t);
        return 2;
    }
    peak_t p = {.t = &t, .dump_at = SIZE_MAX, .min_chunk = min_chunk, .limit = limit,
                .at = limit ? SIZE_MAX : 0, .passes = passes};
    int rc = replay_once(&t, &p, find_peak, kind);
    if (rc == 0 && limit) {
        if (p.at == SIZE_MAX) {
            printf("%s on %s: no spill under the limit %zu\n", t.name, backend, limit);
            trace_free(&t);
            return 0;
        }
        printf("%s on %s: first spill at event %zu under the limit %.1f MiB; the arena before it:\n",
               t.name, backend, p.at, (double)limit / MiB);
        p.dump_at = at != SIZE_MAX ? at : p.at ? p.at - 1 : 0;
        rc = replay_once(&t, &p, at_event, kind);
    } else if (rc == 0) {
        printf("%s on %s: peak held %.1f MiB first after event %zu of %zu (pass %zu of %zu); peak "
               "live (trace) %.1f MiB; held/live %.4f\n",
               t.name, backend, (double)p.held / MiB, p.at, t.nevents * passes,
               p.at / t.nevents, passes, (double)t.peak_live / MiB,
               (double)p.held / (double)t.peak_live);
        p.dump_at = at != SIZE_MAX ? at : p.at;
        rc = replay_once(&t, &p, at_event, kind);
    }
    if (rc == 0 && !limit && at == SIZE_MAX && p.dumped_held != p.held) {
        fprintf(stderr, "vmem-arena-peak: the second replay held %zu at event %zu, not %zu\n",
                p.dumped_held, p.at, p.held);
        rc = 1;
    }
    trace_free(&t);
    return rc;
}
