/*
 * Allocation traces (../shared/traces/README.md): loading and validation.
 *
 * A trace is gzip (or plain) text.  Lines starting with '#' are comments
 * (line 1 carries the run's JSON description); every other line is
 *
 *     a <id> <size> <stream> <t_us>    allocation of block <id>
 *     f <id> <t_us>                    free of block <id>
 *     s <t_us>                         a step boundary (optional)
 *
 * trace_load parses the whole file into arrays first, so that a replay
 * touches nothing but the allocator and one small pointer table: ids are
 * mapped to dense slots that are reused once freed, so the table has one
 * entry per block live at the same time, not one per allocation.
 *
 * Shared by vmem-replay and the GPU comparison replayers (C, C++ and CUDA).
 */
#ifndef VMEM_BENCH_TRACE_H
#define VMEM_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One event.  Invariant: an alloc's slot is not live before it, a free's
 * slot is live (allocated and not yet freed) before it. */
typedef struct trace_event {
    uint64_t size;      /* alloc: bytes requested (> 0); free: 0 */
    uint32_t slot;      /* dense slot, < trace.nslots */
    uint32_t is_free;   /* 0: alloc, 1: free */
} trace_event_t;

typedef struct trace {
    char *path;               /* as given */
    const char *name;         /* the file's name (points into path) */
    trace_event_t *events;
    uint64_t *t_us;           /* per event: time stamp from the trace */
    uint32_t *stream;         /* per event: stream id (0 for frees) */
    size_t nevents, nallocs, nfrees;
    size_t nslots;            /* most blocks live at once */
    size_t live_at_end;       /* blocks never freed */
    uint64_t peak_live;       /* largest sum of live requested bytes */
    uint64_t max_size;        /* largest single request */
    size_t *marks;            /* step boundaries from 's' lines: the index of
                                 the first event after each, increasing */
    size_t nmarks;
    long iters;               /* the header's "iters" (training steps), -1 if none */
} trace_t;

/* Loads and validates path.  On failure returns -1 and writes a message
 * naming the file and line ("trace.txt.gz:17: ...") into err; t is then
 * left empty (safe to pass to trace_free).  Returns 0 on success. */
int trace_load(const char *path, trace_t *t, char *err, size_t errlen);

void trace_free(trace_t *t);

#ifdef __cplusplus
}
#endif

#endif
