/*
 * The block layout planner: where in the device arena the large blocks of a
 * repeating training step go (docs/benchmarks.md, "A planned block layout,
 * learned from the step").
 *
 * Best fit places each block knowing nothing of when it will be freed, so a
 * step can leave a hole that a later, larger block of the same step does
 * not fit (BERT's logits: A, B, C allocated bottom up, A freed, D larger
 * than A arrives while B and C live and extends the arena).  The step
 * repeats, and the placement planner (placement.h) already records it: the
 * size, order and lifetime of every allocation of the last step.  From that
 * record this module computes, once, an address for each large block of the
 * step (the offline dynamic-storage-allocation heuristic: each block at the
 * lowest, or the smallest, gap free over its whole lifetime, around the
 * blocks live when the step starts, in three orders, the lowest layout
 * kept), and the arena carves each such block at its
 * planned address when that range is free (bfc_alloc_at), by best fit
 * otherwise.
 *
 * A plan is followed with a cursor: the step's allocations must repeat the
 * plan's (requested bytes and stream) in order; the first that does not
 * ends the plan for the step (best fit from there) and drops the plan.  A
 * plan is kept, keyed by a signature of the blocks live when its step
 * started (their addresses), and reused at every later step that starts
 * with the same live blocks: computing one costs about a replay pass of
 * BERT, so it is made when a step starts differently from every kept plan,
 * after its first allocations matched a stretch of the last step's record
 * (as the placement planner matches), and then reused.  Two plans can
 * alternate (a buffer allocated before the last step's copy is freed lives
 * at two addresses, one per step parity); up to LAYOUT_PLANS are kept.
 *
 * Only while no limit is set (under a limit, where the device overflows,
 * best fit and placement decide as before) and only on contiguous backends
 * (vmm, sim-vmm: the arena is one range whose end is what it holds).  Not
 * thread-safe: the caller holds the instance's lock.
 */
#ifndef VMEM_LAYOUT_H
#define VMEM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "bfc.h"
#include "placement.h"

#define LAYOUT_PLANS 4               /* plans kept (by the live set at their step's start) */
#define LAYOUT_MATCH_MAX 16u         /* allocations to tell candidate offsets apart */
#define LAYOUT_MIN_DEFAULT ((uint64_t)1 << 20) /* smallest block planned */
#define LAYOUT_END UINT64_MAX        /* lives past the plan's end */

/* One allocation of a plan: what must repeat, and where it goes (0: best fit). */
typedef struct layout_slot {
    uint64_t req;
    uintptr_t stream;
    uintptr_t addr;
    uintptr_t hint;      /* the block of the plan live then nearest to addr:
                            where the arena walks from to the free chunk (0: none) */
} layout_slot_t;

typedef struct layout_plan {
    layout_slot_t *v;
    size_t n, cap;
    uint64_t sig;        /* live-set signature when its step started */
    uint64_t stamp;      /* last use (least recently used goes first) */
    int valid;           /* n == 0: no plan worth following for this live set */
} layout_plan_t;

/* Blocks carried into a step from the step before, freed in it: the guess
 * for the blocks the next step starts with (by size, in order). */
typedef struct layout_carry {
    uint64_t size;
    uint32_t pos;        /* event position of the free in its step */
} layout_carry_t;

typedef struct layout_stats {
    uint64_t plans;          /* plans computed */
    uint64_t reused_steps;   /* steps that started on a kept plan */
    uint64_t followed_steps; /* steps that repeated their plan to its end */
    uint64_t diverged_steps; /* steps that left their plan (plan dropped) */
    uint64_t placed;         /* blocks carved at their planned address */
    uint64_t fallbacks;      /* planned blocks whose range was taken: best fit */
    double plan_seconds;     /* time spent computing plans */
} layout_stats_t;

enum { LAYOUT_OFF = 0, LAYOUT_MATCH, LAYOUT_FOLLOW };

typedef struct layout {
    int enabled;             /* VMEM_LAYOUT */
    uint64_t min_size;       /* VMEM_LAYOUT_MIN: blocks this large are planned */
    int state;               /* LAYOUT_OFF, _MATCH (no plan yet), _FOLLOW */
    layout_plan_t plans[LAYOUT_PLANS];
    layout_plan_t *plan;     /* followed (FOLLOW) */
    size_t cursor;           /* the plan slot the next allocation should repeat */
    uintptr_t hint;          /* layout_next's answer's slot hint */
    int diverged;            /* this step left its plan */
    uint64_t sig;            /* live-set signature (device arena), kept current */
    uint64_t step_sig;       /* at the current step's start */
    uint64_t clock;          /* steps seen */
    unsigned wait, backoff;  /* steps left before matching again; its next value */
    unsigned unreused;       /* plans made since a step last started on a kept one */
    int want_records;        /* the next step matches, but the planner left the
                                last steps unrecorded (place_t.idle): against
                                the last step recorded, without the carried
                                blocks' frees; a plan so made that the step
                                leaves sets no wait (set at a step end, read
                                and cleared at the next) */
    /* matching */
    place_cands_t cand;
    size_t mk;
    /* carried blocks' frees, learned at the last step end if the step
     * matches (read by the plan it makes only); empty otherwise */
    layout_carry_t *carry;
    size_t ncarry, carry_cap;
    layout_stats_t stats;
} layout_t;

/* Reads VMEM_LAYOUT (on|off, default on) and VMEM_LAYOUT_MIN (bytes, default
 * 1 MiB); VMEM_ERR_ENV (logged) on a bad value. */
vmem_status_t layout_from_env(int *enabled, uint64_t *min_size);

void layout_init(layout_t *lo, int enabled, uint64_t min_size);
void layout_fini(layout_t *lo);

/* Logs, through the instance's log (INFO), what the layout did over its
 * life, if it made any plan: called by vmem_destroy. */
struct vmem;
void layout_report(const layout_t *lo, struct vmem *v);

/* Called while matching (not on the hot path): see layout_next. */
uintptr_t layout_match(layout_t *lo, uint64_t req, uintptr_t stream, const place_t *pl,
                       const bfc_arena_t *a);

/* The address the next allocation (requested bytes, stream key) should get
 * in arena a, or 0: best fit.  Called for every allocation of the instance,
 * in order.  pl: the placement planner, whose record of the last step a
 * plan is made from (when a step does not start on a kept plan). */
static inline uintptr_t layout_next(layout_t *lo, uint64_t req, uintptr_t stream,
                                    const place_t *pl, const bfc_arena_t *a)
{
    if (lo->state == LAYOUT_FOLLOW) {
        layout_plan_t *p = lo->plan;
        if (lo->cursor < p->n && p->v[lo->cursor].req == req && p->v[lo->cursor].stream == stream) {
            lo->hint = p->v[lo->cursor].hint;
            return p->v[lo->cursor++].addr;
        }
        if (lo->cursor < p->n)
            lo->diverged = 1; /* left the plan: dropped at the step end */
        lo->state = LAYOUT_OFF;
        return 0;
    }
    if (lo->state == LAYOUT_MATCH)
        return layout_match(lo, req, stream, pl, a);
    return 0;
}

/* The outcome of a planned allocation: carved at its address or not. */
static inline void layout_placed(layout_t *lo, int ok)
{
    if (ok)
        lo->stats.placed++;
    else
        lo->stats.fallbacks++;
}

/* The live-set signature: every block allocated or freed in the device arena. */
static inline uint64_t layout_mix(uintptr_t addr)
{
    uint64_t x = (uint64_t)addr * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}
static inline void layout_note_alloc(layout_t *lo, uintptr_t addr) { lo->sig += layout_mix(addr); }
static inline void layout_note_free(layout_t *lo, uintptr_t addr) { lo->sig -= layout_mix(addr); }

/* A limit was set (or the layout must stop): best fit from now on. */
void layout_stop(layout_t *lo);

/* The step ends; call before place_step_end (it reads what the placement
 * planner learned of this step).  active: plan the next step (no limit set,
 * contiguous backend). */
void layout_step_end(layout_t *lo, const place_t *pl, int active);

/* After layout_step_end: the next step needs the planner's record (it
 * matches the last step's; want_records is set only with LAYOUT_MATCH). */
static inline int layout_wants_records(const layout_t *lo)
{
    return lo->state == LAYOUT_MATCH;
}

/* The plan computation on its own (exposed for the tests).  Places the
 * items whose size is at least min_size, each at an address >= base where
 * it overlaps, over its lifetime [at, end), no obstacle and no item placed
 * before it: in three orders (largest first; longest lived first; largest
 * size x lifetime first), each with first fit (the lowest such address) and
 * best fit (the smallest gap), the layout with the lowest top kept (ties:
 * the first tried); addr[i] gets the address (0 for items left to best
 * fit).  Obstacles [oaddr, oaddr + osize) are live
 * over [0, oend), sorted by address, disjoint.  Returns the top (highest
 * end address) of the layout, 0 if out of memory. */
typedef struct layout_obstacle {
    uintptr_t addr;
    uint64_t size;
    uint64_t end;
} layout_obstacle_t;

uintptr_t layout_solve(size_t n, const uint64_t *size, const uint64_t *at, const uint64_t *end,
                       uint64_t min_size, const layout_obstacle_t *obst, size_t nobst,
                       uintptr_t base, uintptr_t *addr);

#endif
