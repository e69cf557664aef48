/* The shared replay method; see replay.h. */
#include "replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One event through the allocator; returns 1 for an allocation that failed. */
static inline int event_apply(const trace_event_t *e, void **ptrs, void *ctx,
                              void *(*alloc)(void *, size_t), void (*release)(void *, void *))
{
    uint32_t s = e->slot;
    if (!e->is_free) {
        void *p = alloc(ctx, (size_t)e->size);
        ptrs[s] = p;
        return p == NULL;
    }
    void *p = ptrs[s];
    ptrs[s] = NULL;
    if (p)
        release(ctx, p);
    return 0;
}

double replay_pass(const trace_t *t, const replay_ops_t *ops, void **ptrs, uint64_t *failed,
                   replay_observe_fn observe, void *octx)
{
    const trace_event_t *ev = t->events;
    size_t n = t->nevents;
    void *ctx = ops->ctx;
    void *(*alloc)(void *, size_t) = ops->alloc;
    void (*release)(void *, void *) = ops->free;
    uint64_t nfail = 0;
    double t0 = now_ns();
    size_t next = 0; /* the next step boundary */
    for (size_t lo = 0; lo < n;) {
        size_t hi = n;
        if (ops->step && next < ops->nsteps) {
            if (ops->steps[next] <= lo) {
                ops->step(ctx);
                next++;
                continue;
            }
            hi = ops->steps[next] < n ? ops->steps[next] : n;
        }
        /* Two loops, so that the timed one has no observe test per event. */
        if (!observe) {
            for (size_t i = lo; i < hi; i++)
                nfail += event_apply(&ev[i], ptrs, ctx, alloc, release);
        } else {
            for (size_t i = lo; i < hi; i++) {
                nfail += event_apply(&ev[i], ptrs, ctx, alloc, release);
                observe(octx, i);
            }
        }
        lo = hi;
    }
    double elapsed = now_ns() - t0;
    for (size_t s = 0; s < t->nslots; s++) {
        if (ptrs[s]) {
            release(ctx, ptrs[s]);
            ptrs[s] = NULL;
        }
    }
    if (failed)
        *failed = nfail;
    return elapsed;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double replay_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void replay_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void replay_json_number(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

/* ------------------------------------------------------------------------ */

static int usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--repeat N] TRACE.txt.gz ...\n", prog);
    return 2;
}

/* One trace's JSON line; ns sorted (replay_median). */
static void print_line(const trace_t *t, const replay_target_t *target, const double *ns,
                       int repeat, double med, uint64_t failed, uint64_t peak,
                       const replay_target_t *other, double ratio)
{
    printf("{\"trace\": ");
    replay_json_string(stdout, t->name);
    printf(", \"allocator\": ");
    replay_json_string(stdout, target->allocator);
    printf(", \"ops\": %zu, \"ns_per_op\": ", t->nevents);
    replay_json_number(stdout, med);
    printf(", \"ns_per_op_min\": ");
    replay_json_number(stdout, ns[0]);
    printf(", \"ns_per_op_max\": ");
    replay_json_number(stdout, ns[repeat - 1]);
    printf(", \"repeat\": %d, \"peak_live\": %llu, \"peak_reserved\": %llu, \"frag\": ", repeat,
           (unsigned long long)t->peak_live, (unsigned long long)peak);
    replay_json_number(stdout, peak ? (double)peak / (double)t->peak_live : NAN);
    printf(", \"failed_allocs\": %llu, \"peak_source\": ", (unsigned long long)failed);
    replay_json_string(stdout, target->peak_source);
    if (other) {
        printf(", \"paired_with\": ");
        replay_json_string(stdout, other->allocator);
        printf(", \"paired_ratio\": ");
        replay_json_number(stdout, ratio);
    }
    printf("}\n");
    fflush(stdout);
}

int replay_cli(int argc, char **argv, replay_target_t *target)
{
    return replay_cli_paired(argc, argv, target, NULL);
}

int replay_cli_paired(int argc, char **argv, replay_target_t *target, replay_target_t *paired)
{
    int repeat = 5, first = 1;
    for (; first < argc && argv[first][0] == '-' && argv[first][1]; first++) {
        if (strcmp(argv[first], "--repeat") == 0 && first + 1 < argc) {
            char *end;
            long r = strtol(argv[++first], &end, 10);
            if (*end || r < 1 || r > 100000)
                return usage(argv[0]);
            repeat = (int)r;
        } else if (strcmp(argv[first], "--") == 0) {
            first++;
            break;
        } else {
            return usage(argv[0]);
        }
    }
    if (first >= argc)
        return usage(argv[0]);
    replay_target_t *tg[2] = {target, paired};
    int n = paired ? 2 : 1;
    int status = 0;
    for (int a = first; a < argc; a++) {
        trace_t t;
        char err[512];
        if (trace_load(argv[a], &t, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err);
            status = 1;
            continue;
        }
        int opened = 0;
        for (; opened < n; opened++) {
            replay_target_t *g = tg[opened];
            if (g->open(g->ops.ctx, err, sizeof err) != 0) {
                fprintf(stderr, "%s: %s: %s\n", argv[0], g->allocator, err);
                break;
            }
            if (g->trace_begin && g->trace_begin(g->ops.ctx, &t, &g->ops, err, sizeof err) != 0) {
                fprintf(stderr, "%s: %s: %s\n", argv[0], g->allocator, err);
                g->close(g->ops.ctx);
                break;
            }
        }
        void **ptrs = calloc(t.nslots ? t.nslots : 1, sizeof *ptrs);
        double *ns[2] = {calloc((size_t)repeat, sizeof(double)),
                         calloc((size_t)repeat, sizeof(double))};
        if (opened < n || !ptrs || !ns[0] || !ns[1]) {
            if (opened == n)
                fprintf(stderr, "%s: out of memory\n", argv[0]);
            while (opened > 0) {
                opened--;
                tg[opened]->close(tg[opened]->ops.ctx);
            }
            free(ptrs);
            free(ns[0]);
            free(ns[1]);
            trace_free(&t);
            status = 1;
            continue;
        }
        uint64_t failed[2] = {0, 0}, f;
        for (int k = 0; k < n; k++)
            replay_pass(&t, &tg[k]->ops, ptrs, &failed[k], tg[k]->observe, tg[k]->ops.ctx);
        for (int r = 0; r < repeat; r++) {
            for (int j = 0; j < n; j++) {
                int k = (r % 2) ? n - 1 - j : j; /* A B, B A, ... */
                ns[k][r] = replay_pass(&t, &tg[k]->ops, ptrs, &f, NULL, NULL) / (double)t.nevents;
                if (f > failed[k])
                    failed[k] = f;
            }
        }
        uint64_t peak[2] = {0, 0};
        double med[2] = {0, 0};
        for (int k = 0; k < n; k++) {
            peak[k] = tg[k]->peak_reserved(tg[k]->ops.ctx);
            tg[k]->close(tg[k]->ops.ctx);
            med[k] = replay_median(ns[k], (size_t)repeat);
        }
        for (int k = 0; k < n; k++)
            print_line(&t, tg[k], ns[k], repeat, med[k], failed[k], peak[k],
                       n == 2 ? tg[1 - k] : NULL, n == 2 ? med[k] / med[1 - k] : NAN);
        free(ns[0]);
        free(ns[1]);
        free(ptrs);
        trace_free(&t);
    }
    return status;
}
