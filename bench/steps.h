/*
 * Step boundaries of a trace (../shared/DESIGN.md: "A trace line `s <t_us>`
 * marks a step boundary; traces without it are still valid, and the tool
 * then finds the steps itself").
 *
 * Without 's' lines, a training job's steps are found as the repetition of
 * its allocation sequence: the trace ends with the last step, so the steps
 * are the longest run at the end of the trace in which the sequence of
 * allocations (size and stream) repeats with one period, found in linear
 * time from the Z-function of the reversed sequence.  The smallest period
 * that covers that run is the step.  Everything before the run (building
 * the model, first steps that differ) comes before the first boundary.
 * Traces that do not repeat (inference with varying shapes) have no
 * boundary found and are one step.
 */
#ifndef VMEM_BENCH_STEPS_H
#define VMEM_BENCH_STEPS_H

#include <stddef.h>

#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the boundaries were obtained. */
typedef enum steps_source { STEPS_NONE = 0, STEPS_MARKS, STEPS_FOUND } steps_source_t;

/* Boundaries of t: *starts (malloc'd, NULL when none) gets the index of the
 * first event of each step after the first, increasing, all in
 * (0, nevents).  Returns their count, or (size_t)-1 if out of memory. */
size_t trace_steps(const trace_t *t, size_t **starts, steps_source_t *source);

/* The period finder on its own (for the tests): for a sequence of n keys,
 * the smallest period p (2p <= run) of the longest repeating run at the end
 * of the sequence; *reps gets how many whole periods the run holds.
 * Returns 0 if no period repeats at least twice. */
size_t steps_period(const unsigned long long *key, size_t n, size_t *reps);

#ifdef __cplusplus
}
#endif

#endif
