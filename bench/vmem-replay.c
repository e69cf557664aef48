/*
 * vmem-replay: replays allocation traces through libvmem and reports speed
 * and memory (../shared/DESIGN.md, "Trace format and the replay tool").
 *
 *   vmem-replay [--backend sim|sim-vmm|cuda|vmm] [--limit BYTES]
 *               [--host-limit BYTES] [--find-min-limit] [--repeat N]
 *               [--timeline FILE] [--no-host-fallback] [--sim-capacity BYTES]
 *               [--placement naive|planned|farthest|largest] [--check] [--summary] [--verbose]
 *               [--max-events N] TRACE.txt.gz ...
 *
 * Step boundaries come from the trace's 's' lines, else from the repetition
 * of its allocation sequence (steps.h); vmem_step_end is called at each.
 * One JSON object per trace on stdout, one line each.  Errors (a malformed
 * trace names its line) go to stderr; the exit status is 0 when every trace
 * replayed, 1 when one could not be, 2 for a bad command line.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vmem.h>

#include "replay.h"
#include "steps.h"
#include "trace.h"

#define MiB ((size_t)1 << 20)
#define LIMIT_STEP (2 * MiB)
#define SIM_DEFAULT_CAPACITY ((size_t)80 << 30)
#define TIMELINE_WINDOWS 15000u /* at most 3 rows per window */

typedef struct options {
    vmem_backend_kind_t backend;
    size_t limit, host_limit, sim_capacity;
    int find_min_limit;
    int repeat;
    int host_fallback;
    int check;
    int summary;
    vmem_log_level_t log_level;
    vmem_placement_t placement;
    const char *timeline;
} options_t;

/* What one trace's replay produced. */
typedef struct result {
    double ns_per_op, ns_min, ns_max;
    size_t peak_reserved, peak_host, regions;
    uint64_t warm_region_allocs;  /* backend region requests during the timed passes */
    uint64_t spilled, failed;
    size_t unused_end;       /* device memory held with no block live, at the end */
    uint64_t trims, trimmed; /* growths that gave free memory back first, bytes */
    uint64_t remaps, remapped; /* free runs mapped again at the arena's end, bytes:
                                  over the timed passes */
    size_t min_limit;        /* 0: not searched */
    int min_limit_exact;     /* 0: the search hit its upper bound */
    size_t nsteps;           /* step boundaries */
    steps_source_t steps_source;
    uint64_t spilled_bytes;  /* first pass: placed on host + moved there */
    uint64_t *spilled_steps; /* the same per step (nsteps + 1 entries) */
    uint64_t placed_bytes, moved_bytes, fallback_bytes;
    uint64_t planned_steps, diverged_steps, naive_chosen_steps;
} result_t;

static const char *prog = "vmem-replay";

/* ------------------------------------------------------------------------ */
/* Allocator glue                                                           */
/* ------------------------------------------------------------------------ */

static void *op_alloc(void *ctx, size_t size) { return vmem_alloc((vmem_t *)ctx, size); }
static void op_free(void *ctx, void *ptr) { vmem_free((vmem_t *)ctx, ptr); }
static void op_step(void *ctx) { vmem_step_end((vmem_t *)ctx); }

/* The first pass also counts the bytes put on host memory in each step. */
typedef struct step_count {
    uint64_t *per;   /* per step */
    size_t n;        /* steps closed so far */
    uint64_t last;   /* the cumulative count at the last boundary */
} step_count_t;
static step_count_t *counting;

static void stats_read(vmem_t *v, vmem_stats_t *s)
{
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    vmem_get_stats(v, s);
}

/* Bytes put on host memory so far: allocations placed there and data moved. */
static uint64_t host_bytes(const vmem_stats_t *s) { return s->spilled_bytes + s->moved_to_host_bytes; }

static void op_step_counted(void *ctx)
{
    vmem_step_end((vmem_t *)ctx);
    vmem_stats_t s;
    stats_read(ctx, &s);
    uint64_t now = host_bytes(&s);
    counting->per[counting->n++] = now - counting->last;
    counting->last = now;
}

static vmem_status_t instance_open(const options_t *o, size_t limit, vmem_t **out)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = o->backend;
    cfg.limit = limit;
    cfg.host_limit = o->host_limit;
    cfg.host_fallback = o->host_fallback;
    cfg.log_level = o->log_level;
    cfg.placement = o->placement;
    if (o->backend == VMEM_BACKEND_SIM || o->backend == VMEM_BACKEND_SIM_VMM) {
        size_t cap = o->sim_capacity ? o->sim_capacity : SIM_DEFAULT_CAPACITY;
        if (limit > cap)
            cap = (limit + LIMIT_STEP - 1) / LIMIT_STEP * LIMIT_STEP;
        cfg.sim_capacity = cap;
    }
    return vmem_create(&cfg, out);
}

/* ------------------------------------------------------------------------ */
/* Timeline                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct tl_row {
    size_t i;
    uint64_t live;
    size_t held, limit, host;
} tl_row_t;

/* Samples the memory over one pass: per window of events, the rows with the
 * most and the least live bytes and the most device memory held, so that
 * peaks survive the sampling. */
typedef struct timeline {
    FILE *f;
    const trace_t *t;
    vmem_t *v;
    uint64_t *slot_size;
    uint64_t live;
    size_t window;
    tl_row_t hi, lo, held;
    int have;
    int check_failed;
    int check;
} timeline_t;

static void tl_emit_window(timeline_t *tl)
{
    if (!tl->have)
        return;
    tl_row_t rows[3] = {tl->hi, tl->lo, tl->held};
    /* Sort the three by event index and drop duplicates. */
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (rows[b].i < rows[a].i) {
                tl_row_t x = rows[a];
                rows[a] = rows[b];
                rows[b] = x;
            }
    uint64_t t0 = tl->t->t_us[0];
    for (int k = 0; k < 3; k++) {
        if (k && rows[k].i == rows[k - 1].i)
            continue;
        const tl_row_t *r = &rows[k];
        fprintf(tl->f, "%zu,%llu,%llu,%zu,%zu,%zu\n", r->i,
                (unsigned long long)(tl->t->t_us[r->i] >= t0 ? tl->t->t_us[r->i] - t0 : 0),
                (unsigned long long)r->live, r->held, r->limit, r->host);
    }
    tl->have = 0;
}

static void tl_observe(void *octx, size_t i)
{
    timeline_t *tl = octx;
    const trace_event_t *e = &tl->t->events[i];
    if (e->is_free)
        tl->live -= tl->slot_size[e->slot];
    else
        tl->live += tl->slot_size[e->slot] = e->size;
    if (tl->check && !tl->check_failed && vmem_check(tl->v) != VMEM_OK) {
        fprintf(stderr, "%s: %s: vmem_check failed after event %zu\n", prog, tl->t->name, i);
        tl->check_failed = 1;
    }
    if (!tl->f)
        return;
    vmem_stats_t s;
    stats_read(tl->v, &s);
    tl_row_t r = {i, tl->live, s.device_held, s.limit, s.host_held};
    if (!tl->have) {
        tl->hi = tl->lo = tl->held = r;
        tl->have = 1;
    } else {
        if (r.live > tl->hi.live)
            tl->hi = r;
        if (r.live < tl->lo.live)
            tl->lo = r;
        if (r.held > tl->held.held)
            tl->held = r;
    }
    if ((i + 1) % tl->window == 0 || i + 1 == tl->t->nevents)
        tl_emit_window(tl);
}

/* The timeline file for one trace: FILE itself when one trace is replayed,
 * else FILE with "-<trace stem>" inserted before its extension. */
static char *timeline_path(const char *file, const trace_t *t, int ntraces)
{
    if (ntraces <= 1)
        return strdup(file);
    size_t stem = strcspn(t->name, ".");
    const char *slash = strrchr(file, '/');
    const char *dot = strrchr(slash ? slash : file, '.');
    size_t head = dot ? (size_t)(dot - file) : strlen(file);
    size_t n = strlen(file) + stem + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%.*s-%.*s%s", (int)head, file, (int)stem, t->name, dot ? dot : "");
    return p;
}

/* ------------------------------------------------------------------------ */
/* Replay                                                                   */
/* ------------------------------------------------------------------------ */

/* One cold pass on a fresh instance at `limit`: 1 if it needed no spill and
 * no failure, 0 if it did, -1 if the instance could not be created. */
static int probe_limit(const options_t *o, const trace_t *t, void **ptrs, size_t limit)
{
    vmem_t *v;
    options_t po = *o;
    po.host_fallback = 1;
    if (instance_open(&po, limit, &v) != VMEM_OK)
        return -1;
    replay_ops_t ops = {.ctx = v, .alloc = op_alloc, .free = op_free};
    uint64_t failed = 0;
    replay_pass(t, &ops, ptrs, &failed, NULL, NULL);
    vmem_stats_t s;
    stats_read(v, &s);
    vmem_destroy(v);
    return s.spills == 0 && s.failures == 0 && failed == 0;
}

/* Binary search, in LIMIT_STEP steps, for the smallest limit at which the
 * trace replays with no spill and no failure.  Below peak_live it cannot;
 * at what an unlimited replay held it must. */
static int find_min_limit(const options_t *o, const trace_t *t, void **ptrs, size_t unlimited_peak,
                          result_t *r)
{
    size_t lo = (size_t)t->peak_live / LIMIT_STEP; /* in steps; fails (held >= live) */
    size_t hi = (unlimited_peak + LIMIT_STEP - 1) / LIMIT_STEP;
    if (hi <= lo)
        hi = lo + 1;
    int ok = probe_limit(o, t, ptrs, hi * LIMIT_STEP);
    if (ok < 0)
        return -1;
    r->min_limit_exact = 1;
    while (!ok) { /* not monotone after all: widen upwards */
        size_t step = hi - lo;
        lo = hi;
        hi += step;
        ok = probe_limit(o, t, ptrs, hi * LIMIT_STEP);
        if (ok < 0)
            return -1;
        if (hi * LIMIT_STEP > ((size_t)1 << 40)) {
            r->min_limit_exact = 0;
            break;
        }
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        int m = probe_limit(o, t, ptrs, mid * LIMIT_STEP);
        if (m < 0)
            return -1;
        if (m)
            hi = mid;
        else
            lo = mid;
    }
    r->min_limit = hi * LIMIT_STEP;
    return 0;
}

static int replay_trace(const options_t *o, const trace_t *t, const char *timeline_file,
                        result_t *r)
{
    memset(r, 0, sizeof *r);
    vmem_t *v;
    vmem_status_t st = instance_open(o, o->limit, &v);
    if (st != VMEM_OK) {
        fprintf(stderr, "%s: %s: backend %s: vmem_create: %s\n", prog, t->name,
                vmem_backend_name(o->backend), vmem_strerror(st));
        return -1;
    }
    void **ptrs = calloc(t->nslots ? t->nslots : 1, sizeof *ptrs);
    double *ns = calloc((size_t)o->repeat, sizeof *ns);
    uint64_t *slot_size = calloc(t->nslots ? t->nslots : 1, sizeof *slot_size);
    if (!ptrs || !ns || !slot_size) {
        fprintf(stderr, "%s: out of memory\n", prog);
        vmem_destroy(v);
        free(ptrs);
        free(ns);
        free(slot_size);
        return -1;
    }
    replay_ops_t ops = {.ctx = v, .alloc = op_alloc, .free = op_free};
    int rc = 0;
    size_t *steps = NULL;
    size_t nsteps = trace_steps(t, &steps, &r->steps_source);
    if (nsteps == (size_t)-1) {
        fprintf(stderr, "%s: out of memory\n", prog);
        nsteps = 0;
        rc = -1;
        goto out;
    }
    r->nsteps = nsteps;
    r->spilled_steps = calloc(nsteps + 1, sizeof *r->spilled_steps);
    if (!r->spilled_steps) {
        fprintf(stderr, "%s: out of memory\n", prog);
        rc = -1;
        goto out;
    }
    step_count_t count = {r->spilled_steps, 0, 0};
    ops.step = op_step_counted;
    ops.steps = steps;
    ops.nsteps = nsteps;
    counting = &count;

    /* Warm-up pass: also the observed one (timeline, --check). */
    timeline_t tl = {0};
    tl.t = t;
    tl.v = v;
    tl.slot_size = slot_size;
    tl.check = o->check;
    tl.window = t->nevents / TIMELINE_WINDOWS + 1;
    if (timeline_file) {
        tl.f = fopen(timeline_file, "w");
        if (!tl.f) {
            fprintf(stderr, "%s: %s: cannot write timeline: ", prog, timeline_file);
            perror(NULL);
            rc = -1;
            goto out;
        }
        fprintf(tl.f, "event,time_us,live_bytes,device_held,limit,host_held\n");
    }
    vmem_stats_t s0, s1;
    stats_read(v, &s0);
    uint64_t failed = 0;
    int observed = tl.f || tl.check;
    replay_pass(t, &ops, ptrs, &failed, observed ? tl_observe : NULL, &tl);
    stats_read(v, &s1);
    uint64_t now = host_bytes(&s1);
    r->spilled_steps[count.n] = now - count.last;
    r->spilled_bytes = now;
    r->placed_bytes = s1.placed_host_bytes;
    r->moved_bytes = s1.moved_to_host_bytes;
    r->fallback_bytes = s1.fallback_bytes;
    r->planned_steps = s1.planned_steps;
    r->diverged_steps = s1.diverged_steps;
    r->naive_chosen_steps = s1.naive_chosen_steps;
    ops.step = op_step;
    counting = NULL;
    if (tl.f && fclose(tl.f) != 0) {
        fprintf(stderr, "%s: %s: write error\n", prog, timeline_file);
        rc = -1;
    }
    if (tl.check_failed)
        rc = -1;
    r->spilled = s1.spills - s0.spills;
    r->failed = failed;

    vmem_stats_t w0;
    stats_read(v, &w0);
    for (int k = 0; k < o->repeat; k++) {
        stats_read(v, &s0);
        ns[k] = replay_pass(t, &ops, ptrs, &failed, NULL, NULL) / (double)t->nevents;
        stats_read(v, &s1);
        if (s1.spills - s0.spills > r->spilled)
            r->spilled = s1.spills - s0.spills;
        if (failed > r->failed)
            r->failed = failed;
    }
    r->warm_region_allocs = s1.device_region_allocs - w0.device_region_allocs;
    r->remaps = s1.device_remaps - w0.device_remaps;
    r->remapped = s1.device_remapped - w0.device_remapped;
    r->ns_per_op = replay_median(ns, (size_t)o->repeat);
    r->ns_min = ns[0];
    r->ns_max = ns[o->repeat - 1];
    r->peak_reserved = s1.device_peak_held;
    r->peak_host = s1.host_peak_held;
    r->regions = s1.device_regions;
    r->unused_end = s1.device_unused;
    r->trims = s1.device_trims;
    r->trimmed = s1.device_trimmed;
    if (vmem_check(v) != VMEM_OK)
        rc = -1;
    vmem_destroy(v);
    v = NULL;

    if (o->find_min_limit && rc == 0) {
        /* The upper bound: what a replay with no limit at all holds. */
        size_t bound = r->peak_reserved;
        if (o->limit) {
            vmem_t *u;
            options_t uo = *o;
            if (instance_open(&uo, 0, &u) == VMEM_OK) {
                ops.ctx = u;
                replay_pass(t, &ops, ptrs, NULL, NULL, NULL);
                stats_read(u, &s1);
                bound = s1.device_peak_held;
                vmem_destroy(u);
            }
        }
        if (find_min_limit(o, t, ptrs, bound, r) != 0) {
            fprintf(stderr, "%s: %s: --find-min-limit: vmem_create failed\n", prog, t->name);
            rc = -1;
        }
    }
out:
    if (v)
        vmem_destroy(v);
    free(steps);
    free(ptrs);
    free(ns);
    free(slot_size);
    return rc;
}

static void print_json(const options_t *o, const trace_t *t, const result_t *r)
{
    FILE *f = stdout;
    double live = (double)t->peak_live;
    fprintf(f, "{\"trace\": ");
    replay_json_string(f, t->name);
    fprintf(f, ", \"backend\": \"%s\", \"ops\": %zu, \"repeat\": %d, \"ns_per_op\": ",
            vmem_backend_name(o->backend), t->nevents, o->repeat);
    replay_json_number(f, r->ns_per_op);
    fprintf(f, ", \"ns_per_op_min\": ");
    replay_json_number(f, r->ns_min);
    fprintf(f, ", \"ns_per_op_max\": ");
    replay_json_number(f, r->ns_max);
    fprintf(f, ", \"peak_live\": %llu, \"peak_reserved\": %zu, \"frag\": ",
            (unsigned long long)t->peak_live, r->peak_reserved);
    replay_json_number(f, (double)r->peak_reserved / live);
    fprintf(f, ", \"spilled_allocs\": %llu, \"peak_host\": %zu, \"failed_allocs\": %llu",
            (unsigned long long)r->spilled, r->peak_host, (unsigned long long)r->failed);
    if (o->find_min_limit) {
        fprintf(f, ", \"min_limit\": %zu, \"min_limit_ratio\": ", r->min_limit);
        replay_json_number(f, (double)r->min_limit / live);
        if (!r->min_limit_exact)
            fprintf(f, ", \"min_limit_note\": \"search stopped at 1 TiB\"");
    } else {
        fprintf(f, ", \"min_limit\": null, \"min_limit_ratio\": null");
    }
    fprintf(f, ", \"placement\": \"%s\", \"steps\": %zu, \"steps_source\": \"%s\"",
            o->placement == VMEM_PLACEMENT_NAIVE      ? "naive"
            : o->placement == VMEM_PLACEMENT_FARTHEST ? "farthest"
            : o->placement == VMEM_PLACEMENT_LARGEST  ? "largest"
                                                      : "planned",
            r->nsteps,
            r->steps_source == STEPS_MARKS   ? "marks"
            : r->steps_source == STEPS_FOUND ? "found"
                                             : "none");
    fprintf(f, ", \"spilled_bytes\": %llu, \"spilled_bytes_steps\": [",
            (unsigned long long)r->spilled_bytes);
    for (size_t k = 0; k <= r->nsteps; k++)
        fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)r->spilled_steps[k]);
    fprintf(f, "], \"placed_host_bytes\": %llu, \"moved_to_host_bytes\": %llu, "
               "\"fallback_bytes\": %llu, \"planned_steps\": %llu, \"diverged_steps\": %llu, "
               "\"naive_chosen_steps\": %llu",
            (unsigned long long)r->placed_bytes, (unsigned long long)r->moved_bytes,
            (unsigned long long)r->fallback_bytes, (unsigned long long)r->planned_steps,
            (unsigned long long)r->diverged_steps, (unsigned long long)r->naive_chosen_steps);
    fprintf(f, ", \"limit\": %zu, \"allocs\": %zu, \"frees\": %zu, \"never_freed\": %zu, "
               "\"device_regions\": %zu, \"warm_region_allocs\": %llu",
            o->limit, t->nallocs, t->nfrees, t->live_at_end, r->regions,
            (unsigned long long)r->warm_region_allocs);
    fprintf(f, ", \"unused_end\": %zu, \"trims\": %llu, \"trimmed_bytes\": %llu, \"warm_remaps\": %llu, "
               "\"warm_remapped_bytes\": %llu}\n",
            r->unused_end, (unsigned long long)r->trims, (unsigned long long)r->trimmed,
            (unsigned long long)r->remaps, (unsigned long long)r->remapped);
    fflush(f);
}

static void print_summary_row(const trace_t *t, const result_t *r, int find)
{
    fprintf(stderr, "%-26s %9zu %9.1f %10.1f %10.1f %7.3f %8llu %8llu", t->name, t->nevents,
            r->ns_per_op, (double)t->peak_live / MiB, (double)r->peak_reserved / MiB,
            (double)r->peak_reserved / (double)t->peak_live, (unsigned long long)r->spilled,
            (unsigned long long)r->failed);
    if (find)
        fprintf(stderr, " %10.1f %7.3f", (double)r->min_limit / MiB,
                (double)r->min_limit / (double)t->peak_live);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

static int usage(void)
{
    fprintf(stderr,
            "usage: %s [--backend sim|sim-vmm|cuda|vmm] [--limit BYTES] [--host-limit BYTES]\n"
            "          [--find-min-limit] [--repeat N] [--timeline FILE] [--no-host-fallback]\n"
            "          [--sim-capacity BYTES] [--placement naive|planned|farthest|largest] [--check] [--summary]\n"
            "          [--verbose] [--max-events N] TRACE.txt.gz ...\n"
            "BYTES: an integer with an optional K, M, G or T suffix (powers of 1024).\n"
            "--repeat N: timed passes after one warm-up pass (default 11).\n"
            "--timeline FILE: CSV of the warm-up pass (event,time_us,live_bytes,device_held,\n"
            "  limit,host_held); with several traces, FILE-<trace>.csv per trace.\n"
            "--check: vmem_check after every event of the warm-up pass (slow).\n"
            "--summary: a human-readable table on stderr after the JSON lines.\n"
            "--placement: 'planned' (default) learns each step's allocations and places\n"
            "  long-lived blocks on host from their allocation; 'naive' puts whatever is\n"
            "  allocated once the device is full on host.  spilled_bytes and\n"
            "  spilled_bytes_steps count, over the first pass and per step, the bytes of\n"
            "  allocations placed on host plus the bytes moved there at step ends.\n"
            "--max-events N: refuse traces of more than N events (default %zu, about\n"
            "  28 bytes of memory each; 0: no bound).\n"
            "Traces: docs/benchmarks.md; record your own with vmem-snapshot2trace.\n"
            "exit status: 0 every trace replayed, 1 one could not be, 2 bad command line\n",
            prog, (size_t)TRACE_DEFAULT_MAX_EVENTS);
    return 2;
}

static int parse_bytes(const char *opt, const char *text, size_t *out)
{
    if (vmem_parse_size(text, out) != VMEM_OK) {
        fprintf(stderr, "%s: %s: invalid size '%s'\n", prog, opt, text);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options_t o = {.backend = VMEM_BACKEND_SIM, .repeat = 11, .host_fallback = 1,
                   .log_level = VMEM_LOG_ERROR};
    size_t max_events = TRACE_DEFAULT_MAX_EVENTS;
    int first = 1;
    for (; first < argc; first++) {
        const char *a = argv[first];
        const char *val = first + 1 < argc ? argv[first + 1] : NULL;
        if (a[0] != '-' || !a[1])
            break;
        if (strcmp(a, "--") == 0) {
            first++;
            break;
        }
        if (strcmp(a, "--find-min-limit") == 0) {
            o.find_min_limit = 1;
        } else if (strcmp(a, "--no-host-fallback") == 0) {
            o.host_fallback = 0;
        } else if (strcmp(a, "--check") == 0) {
            o.check = 1;
        } else if (strcmp(a, "--summary") == 0) {
            o.summary = 1;
        } else if (strcmp(a, "--verbose") == 0) {
            o.log_level = VMEM_LOG_DEBUG;
            vmem_set_log(NULL, NULL, VMEM_LOG_DEBUG);
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 0;
        } else if (!val) {
            fprintf(stderr, "%s: %s needs a value\n", prog, a);
            return usage();
        } else if (strcmp(a, "--backend") == 0) {
            if (strcmp(val, "sim") == 0)
                o.backend = VMEM_BACKEND_SIM;
            else if (strcmp(val, "sim-vmm") == 0)
                o.backend = VMEM_BACKEND_SIM_VMM;
            else if (strcmp(val, "cuda") == 0)
                o.backend = VMEM_BACKEND_CUDA;
            else if (strcmp(val, "vmm") == 0)
                o.backend = VMEM_BACKEND_VMM;
            else {
                fprintf(stderr, "%s: unknown backend '%s'\n", prog, val);
                return usage();
            }
            first++;
        } else if (strcmp(a, "--limit") == 0) {
            if (parse_bytes(a, val, &o.limit))
                return 2;
            first++;
        } else if (strcmp(a, "--host-limit") == 0) {
            if (parse_bytes(a, val, &o.host_limit))
                return 2;
            first++;
        } else if (strcmp(a, "--sim-capacity") == 0) {
            if (parse_bytes(a, val, &o.sim_capacity))
                return 2;
            if (o.sim_capacity < VMEM_SIM_CAPACITY_MIN || o.sim_capacity > VMEM_SIM_CAPACITY_MAX) {
                fprintf(stderr, "%s: --sim-capacity %s: outside the simulated device's range (2 MiB "
                                "to 16 TiB)\n", prog, val);
                return 2;
            }
            first++;
        } else if (strcmp(a, "--repeat") == 0) {
            char *end;
            long n = strtol(val, &end, 10);
            if (*end || end == val || n < 1 || n > 1000000) {
                fprintf(stderr, "%s: --repeat: expected a positive integer, got '%s'\n", prog, val);
                return 2;
            }
            o.repeat = (int)n;
            first++;
        } else if (strcmp(a, "--max-events") == 0) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(val, &end, 10);
            if (*end || end == val || val[0] < '0' || val[0] > '9' || errno) {
                fprintf(stderr, "%s: --max-events: expected a count (0: no bound), got '%s'\n",
                        prog, val);
                return 2;
            }
            max_events = (size_t)n;
            first++;
        } else if (strcmp(a, "--placement") == 0) {
            if (strcmp(val, "naive") == 0)
                o.placement = VMEM_PLACEMENT_NAIVE;
            else if (strcmp(val, "planned") == 0)
                o.placement = VMEM_PLACEMENT_PLANNED;
            else if (strcmp(val, "farthest") == 0)
                o.placement = VMEM_PLACEMENT_FARTHEST;
            else if (strcmp(val, "largest") == 0)
                o.placement = VMEM_PLACEMENT_LARGEST;
            else {
                fprintf(stderr, "%s: --placement: expected naive, planned, farthest or largest, got '%s'\n",
                        prog, val);
                return 2;
            }
            first++;
        } else if (strcmp(a, "--timeline") == 0) {
            o.timeline = val;
            first++;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n", prog, a);
            return usage();
        }
    }
    if (first >= argc) {
        fprintf(stderr, "%s: no trace given\n", prog);
        return usage();
    }
    /* The simulated device is sized to cover the limit: both must lie in
     * its range (say so here rather than "invalid argument" later). */
    if ((o.backend == VMEM_BACKEND_SIM || o.backend == VMEM_BACKEND_SIM_VMM) &&
        o.limit > VMEM_SIM_CAPACITY_MAX) {
        fprintf(stderr, "%s: --limit %zu: above the largest simulated device (16 TiB)\n", prog,
                o.limit);
        return 2;
    }
    int ntraces = argc - first, status = 0;
    trace_t *traces = calloc((size_t)ntraces, sizeof *traces);
    result_t *results = calloc((size_t)ntraces, sizeof *results);
    int *ok = calloc((size_t)ntraces, sizeof *ok);
    if (!traces || !results || !ok) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    for (int k = 0; k < ntraces; k++) {
        char err[512];
        trace_t *t = &traces[k];
        int lrc = trace_load_max(argv[first + k], max_events, t, err, sizeof err);
        if (lrc != 0) {
            fprintf(stderr, "%s: %s%s\n", prog, err,
                    lrc == -2 ? "; raise it with --max-events N (0: no bound)" : "");
            status = 1;
            continue;
        }
        char *tl = o.timeline ? timeline_path(o.timeline, t, ntraces) : NULL;
        if (replay_trace(&o, t, tl, &results[k]) == 0) {
            print_json(&o, t, &results[k]);
            ok[k] = 1;
        } else {
            status = 1;
        }
        free(results[k].spilled_steps);
        results[k].spilled_steps = NULL;
        free(tl);
    }
    if (o.summary) {
        fprintf(stderr, "\nbackend %s, limit %s, %d timed passes after one warm-up\n",
                vmem_backend_name(o.backend), o.limit ? "set" : "none", o.repeat);
        fprintf(stderr, "%-26s %9s %9s %10s %10s %7s %8s %8s%s\n", "trace", "ops", "ns/op",
                "live MiB", "held MiB", "frag", "spilled", "failed",
                o.find_min_limit ? "  min MiB   ratio" : "");
        for (int k = 0; k < ntraces; k++)
            if (ok[k])
                print_summary_row(&traces[k], &results[k], o.find_min_limit);
    }
    for (int k = 0; k < ntraces; k++)
        trace_free(&traces[k]);
    free(traces);
    free(results);
    free(ok);
    return status;
}
