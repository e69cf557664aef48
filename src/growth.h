/*
 * Growth and trim policy of the device arena (docs/design.md, "Growth and
 * trim"): how large a new region is, and how much free memory is given back
 * before the arena grows, so that what the arena holds tracks what is live.
 *
 * Pure functions of their arguments (no arena, no backend): bfc.c's
 * arena_grow asks them and carries out the answer.  Thread-safe.
 */
#ifndef VMEM_GROWTH_H
#define VMEM_GROWTH_H

#include <stddef.h>
#include <stdint.h>

#include "vmem.h"

/*
 * The policy.  All zero is the policy before issue 14 (what the engine's own
 * tests and tools get unless they ask); vmem_create asks
 * growth_policy_from_env.  Invariant: trim_slack in [0, 10].
 *  - tight 1 (VMEM_GROWTH=tight, the default): on contiguous backends (vmm, sim-vmm)
 *    a region is exactly what the request lacks, ending on the backend's
 *    grow_align only where that lack is at least grow_align (large requests
 *    get whole big handles; small ones do not pay 64 MiB for 2).
 *    Separate-region backends keep doubling (many small cudaMalloc regions
 *    fragment worse, docs/benchmarks.md).
 *  - tight 0: doubling region sizes and grow_align everywhere (the policy
 *    before issue 14; VMEM_GROWTH=legacy, for before/after comparisons).
 *  - share 1 (tight, the default; 0 with legacy): see the field.
 *  - trim 1: before growing, the arena gives back free memory (empty
 *    regions, largest first; on splittable backends also whole free granules,
 *    largest holes first, never the free tail the growth extends) until what
 *    it holds after the growth is at most (1 + trim_slack) times its
 *    high-water mark of bytes in use.  trim 0: never (VMEM_TRIM=off).
 *  - at_peak 0 (VMEM_TRIM_RULE=floor, the default): a growth that takes
 *    held back to where a trim started raises a floor that later trims keep
 *    (bfc_arena_t.trim_floor): a repeating workload stops trimming.
 *  - at_peak 1 (VMEM_TRIM_RULE=peak, opt-in): trims only before a growth
 *    that would take held above its peak so far, and then down to the
 *    larger of that peak and the allowance; no floor.  Held stays near
 *    (1 + trim_slack) times the bytes in use on workloads that fragment,
 *    at the price of unmapping and mapping again at those growths, also
 *    in a steady state (docs/benchmarks.md, "Trimming at the peak").
 */
typedef struct growth_policy {
    int tight;
    int trim;
    double trim_slack;
    uint64_t trim_age;  /* only free memory unused for this many allocations goes */
    int at_peak;        /* 1: trim only at a new peak of held, no floor (above) */
    int share;          /* 1: uncapped, a free chunk of a dedicated region serves
                           smaller requests no other free chunk fits (bfc.h,
                           bfc_arena_t.share_dedicated); 0 (legacy): never */
} growth_policy_t;

#define GROWTH_TRIM_DEFAULT 0.02 /* VMEM_TRIM default: 2 % over the high-water mark */
#define GROWTH_TRIM_AGE_DEFAULT 0 /* VMEM_TRIM_AGE default, in allocations */
#define GROWTH_TRIM_PEAK_DEFAULT 0.03 /* VMEM_TRIM default under VMEM_TRIM_RULE=peak */

/* The policy in force by default, then VMEM_GROWTH (tight|legacy),
 * VMEM_TRIM (a percentage, e.g. "2" or "0.5", or off; default: 2 on
 * separate-region backends, off on contiguous ones, where trimming was
 * measured to hold more, docs/benchmarks.md), VMEM_TRIM_AGE (allocations)
 * and VMEM_TRIM_RULE (floor|peak; peak turns trimming on, with a slack of
 * 3 unless VMEM_TRIM says otherwise) from the environment.  VMEM_ERR_ENV
 * (p unchanged) for a bad value. */
vmem_status_t growth_policy_from_env(growth_policy_t *p, int contiguous);

/*
 * The size of the next region.
 *   minimum      what the request lacks, rounded to the granule (> 0)
 *   next_region  the doubling size (bfc_arena_t.next_region)
 *   dedicated    1 if the request gets a region of its own
 *   contiguous   1 for backends whose regions merge (vmm, sim-vmm)
 *   align        the backend's grow_align (0: none)
 *   offset       where the region would start, from the range's base
 *   room         what the limit leaves (>= minimum)
 * Returns a size in [minimum, room], a multiple of the granule whenever
 * minimum, next_region, align and room are.
 */
size_t growth_size(const growth_policy_t *p, size_t minimum, size_t next_region, int dedicated,
                   int contiguous, size_t align, size_t offset, size_t room);

/*
 * How much the arena should hold before a growth of `grow` bytes: SIZE_MAX
 * for "give nothing back" (trim off, or held + grow within the allowance),
 * else the target for bfc's release (the allowance less grow, or 0).
 *   held   bytes held now;  hwm  the high-water mark of bytes in use,
 *   counting the request that is growing the arena;  peak  the most held
 *   so far (read by the at_peak rule only).
 */
size_t growth_trim_target(const growth_policy_t *p, size_t held, size_t grow, size_t hwm,
                          size_t peak);

#endif
