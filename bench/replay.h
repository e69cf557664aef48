/*
 * The replay method shared by vmem-replay and the GPU comparison replayers,
 * so that every allocator is measured the same way:
 *
 *  - the trace is parsed into arrays first (trace.h);
 *  - one warm-up pass, then `repeat` timed passes; each pass replays every
 *    event through the allocator's alloc/free (one indirect call each) and
 *    is timed as a whole with CLOCK_MONOTONIC (host-side wall time);
 *  - blocks the trace never frees are freed after each pass, outside the
 *    timed part, so every pass starts from the same live set (none);
 *  - ns_per_op is the median over the timed passes of (pass time / events).
 */
#ifndef VMEM_BENCH_REPLAY_H
#define VMEM_BENCH_REPLAY_H

#include <stdint.h>
#include <stdio.h>

#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct replay_ops {
    void *ctx;
    void *(*alloc)(void *ctx, size_t size);   /* NULL on failure */
    void (*free)(void *ctx, void *ptr);
    /* Optional: called (and timed) before event steps[j] of each pass, the
     * step boundaries (increasing event indices). */
    void (*step)(void *ctx);
    const size_t *steps;
    size_t nsteps;
} replay_ops_t;

/* Called after every event of an observed pass (i: event index). */
typedef void (*replay_observe_fn)(void *octx, size_t i);

/* Replays every event of t once.  ptrs must have t->nslots entries, all
 * NULL (they are NULL again on return).  Returns the wall time of the event
 * loop in ns; *failed gets the allocations that returned NULL (their frees
 * are skipped).  With observe non-NULL it is called after each event and
 * the time returned includes it. */
double replay_pass(const trace_t *t, const replay_ops_t *ops, void **ptrs, uint64_t *failed,
                   replay_observe_fn observe, void *octx);

/* Median of n values (n > 0); v is reordered. */
double replay_median(double *v, size_t n);

/* Writes s as a JSON string literal (quotes included). */
void replay_json_string(FILE *f, const char *s);

/* Writes a number, or null when v is not finite. */
void replay_json_number(FILE *f, double v);

/*
 * A ready-made command line for replayers of allocators other than
 * libvmem (the GPU comparison):
 *
 *     NAME [--repeat N] TRACE.txt.gz ...
 *
 * For each trace: target->open, warm-up pass (observed through
 * target->observe when set), timed passes, target->peak_reserved,
 * target->close; prints one JSON line with the keys trace, allocator, ops,
 * ns_per_op, ns_per_op_min, ns_per_op_max, repeat, peak_live,
 * peak_reserved, frag, failed_allocs, peak_source.
 * Returns the process exit status (0: every trace replayed).
 */
typedef struct replay_target {
    const char *allocator;     /* name printed in the JSON */
    const char *peak_source;   /* how peak_reserved is measured */
    int (*open)(void *self, char *err, size_t len);     /* 0 on success */
    void (*close)(void *self);
    uint64_t (*peak_reserved)(void *self);              /* after the passes */
    replay_observe_fn observe; /* optional: warm-up pass only */
    /* Optional: called after open with each trace, may set ops->step,
     * ops->steps and ops->nsteps (libvmem's step ends); 0 on success. */
    int (*trace_begin)(void *self, const trace_t *t, replay_ops_t *ops, char *err, size_t len);
    replay_ops_t ops;          /* ops.ctx is passed as self to the hooks */
} replay_target_t;

int replay_cli(int argc, char **argv, replay_target_t *target);

/*
 * The same with a second allocator in the same process (paired NULL: as
 * replay_cli).  For each trace both are opened and warmed up, then their
 * timed passes alternate (A B, then B A, ...), so that both are read under
 * the same process's conditions: on the lent GPU machines a replay process
 * runs in one of two speed modes, 1.6-1.9x apart, for every allocator
 * (docs/benchmarks.md, "Speed"), so a ratio of two processes mixes modes.
 * Prints target's JSON line, then paired's, each with "paired_with" (the
 * other's name) and "paired_ratio" (its median ns/op over the other's).
 */
int replay_cli_paired(int argc, char **argv, replay_target_t *target, replay_target_t *paired);

#ifdef __cplusplus
}
#endif

#endif
