/*
 * The placement planner: which allocations of a training step live in host
 * memory from the moment they are allocated (docs/placement.md).
 *
 * A training step repeats the allocation sequence of the step before it.
 * The planner records every step (size, stream, event position, when each
 * block was freed), and when the next step starts repeating the recorded
 * one it plans that step as a cycle: it picks the blocks that relieve the
 * most device memory per byte placed on host (those whose free lies
 * farthest ahead when the device would overflow: saved activations,
 * buffers that live across the step boundary) so that the device bytes in
 * use stay under the limit at every event of the step, and keeps
 * short-lived temporaries on the device.  Where the step stops repeating
 * the record (first steps, data-dependent shapes, varying batches) it falls
 * back to naive placement (device first, host when the device is full) for
 * the rest of the step, and learns the new sequence at the step's end.
 *
 * The planner knows nothing of arenas or backends: vmem.c tells it what was
 * allocated and freed (identified by arena and allocation sequence number,
 * bfc_chunk_t.seq) and asks it where the next allocation goes.  Not
 * thread-safe: the caller holds the instance's lock.
 */
#ifndef VMEM_PLACEMENT_H
#define VMEM_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#define PLACE_NONE 0u       /* no plan: naive placement (device first) */
#define PLACE_DEVICE 1u     /* planned on the device */
#define PLACE_HOST 2u       /* planned on host memory */

#define PLACE_OPEN UINT32_MAX /* an item's free not seen (yet) */
#define PLACE_MAX_ITEMS ((size_t)1 << 18) /* longest step recorded (allocations) */

/* The solver's rules (place_t.rule, place_problem_t.rule). */
#define PLACE_RULE_FARTHEST 0 /* the live block freed farthest ahead goes to host first */
#define PLACE_RULE_LARGEST 1  /* the largest live block first (ties: farthest) */
#define PLACE_RULE_SWAP 2     /* farthest first, large blocks swapped: on the device
                                 around their allocation and their free, on host
                                 in between (moved at synchronised points) */
#define PLACE_NRULES 3
#define PLACE_TRIAL_STEPS 3 /* steps each rule runs in the trials; the first does not count */

/* One allocation of a recorded step.
 * Invariants: at < end (when end != PLACE_OPEN), both < the record's
 * nevents once the step is closed; wrap is PLACE_OPEN unless end is. */
typedef struct place_item {
    uint64_t req;        /* bytes requested: with stream, what must repeat */
    uint64_t size;       /* bytes reserved (rounded) */
    uintptr_t stream;
    uintptr_t addr;      /* the block (to ask where it lies at the step end) */
    uint64_t dev_end;    /* live at the step end: its bytes on device memory then */
    uint32_t at;         /* event position of the allocation in its step */
    uint32_t end;        /* event position of its free, PLACE_OPEN if live at the step end */
    uint32_t wrap;       /* live at the step end: position, in the following
                            step, where the same allocation of the step
                            before was freed (learned), else PLACE_OPEN */
    double t_alloc;      /* placed on host: when (monotonic seconds) */
    uint8_t arena;       /* 0 device arena, 1 host arena */
    uint8_t host;        /* placed on host memory (planned or fallback) */
    uint8_t extra;       /* allocated on the device while the step had left
                            its plan (no plan item): in the plan's curve
                            until freed */
} place_item_t;

/* Where allocation sequence numbers of one arena map to items of a record:
 * map[seq - seq0] is an item index or PLACE_OPEN. */
typedef struct place_seqmap {
    uint64_t seq0;
    uint32_t *map;
    size_t n, cap;
} place_seqmap_t;

/* A recorded step.  Invariant: items are in allocation order, their `at`
 * strictly increasing and below nevents. */
typedef struct place_record {
    place_item_t *items;
    size_t n, cap;
    uint32_t nevents;        /* allocations and frees seen in the step */
    int overflow;            /* too long to record: not usable as a plan */
    int limit_changed;       /* recorded (wholly or in part) under another limit
                                than the one in force: not kept as a variant */
    place_seqmap_t seqs[2];  /* per arena */
    uint64_t dev_start;      /* device bytes in use when the step started */
    uint64_t peak_total;     /* most bytes live (device + host) in the step */
} place_record_t;

/* Variants: earlier steps whose sequence differed from the step after them
 * (varying shapes: buckets of sequence lengths, a few image sizes), kept so
 * that a later step repeating one of them is planned from it rather than
 * left naive (docs/placement.md, "Steps that repeat an earlier
 * shape").  Only records of at most PLACE_VARIANT_ITEMS items are kept. */
#define PLACE_VARIANTS 4
#define PLACE_VARIANT_ITEMS ((size_t)1 << 16)

/* Where the allocation being matched may lie in a recorded step: the
 * offsets of the items that the step's allocations so far repeated (also
 * used by the block layout, layout.c). */
typedef struct place_cands {
    size_t *v;
    size_t n, cap;
} place_cands_t;

/* Narrows c for the k-th allocation (req, stream) matched against `last`:
 * k == 0 starts it (every item from `from` on that matches; fewer if out of
 * memory), k > 0 keeps the offsets whose item offset + k matches as well. */
void place_cands_filter(place_cands_t *c, const place_record_t *last, size_t from, size_t k,
                        uint64_t req, uintptr_t stream);

/* One planning problem over a cycle of `len` event positions (exposed for
 * the tests).  Item i occupies [at[i], end[i]) where at[i] < len and
 * at[i] < end[i]; an end beyond len wraps into the next cycle (the same
 * allocation of the previous step is still live at the cycle's start);
 * end[i] - at[i] >= len means live at every position.  base is the device
 * bytes of blocks outside the cycle (weights, optimizer state), cap the
 * device bytes allowed. */
typedef struct place_problem {
    size_t n;
    const uint64_t *size;
    const uint32_t *at;
    const uint64_t *end;
    uint32_t len;
    uint64_t base, cap;
    int rule;            /* PLACE_RULE_* */
    /* PLACE_RULE_SWAP: an item freed in the same step, not crossing the
     * cycle's cut, with swap_unit(size) > 0 and a life longer than
     * head + tail may be *swapped* (host[i] == 2): on the device from its
     * allocation until out_at[i] (at least head positions after it), on
     * host until in_at[i] (tail positions before its end, or its end), on
     * the device again until its end.  Only whole units of `unit` bytes
     * move (the rest of the block stays on the device): swap relieves
     * swap_relief(size) bytes. */
    uint64_t unit;
    uint32_t head, tail;
    uint32_t *out_at, *in_at; /* out: step positions of the moves (host[i] == 2) */
} place_problem_t;

/* Bytes a swapped block of `size` takes off the device: its whole units
 * inside it (one less than fit, the block may start anywhere in one);
 * blocks of fewer than PLACE_SWAP_MIN_UNITS units are not swapped. */
#define PLACE_SWAP_MIN_UNITS 2
static inline uint64_t place_swap_relief(uint64_t size, uint64_t unit)
{
    return unit && size >= PLACE_SWAP_MIN_UNITS * unit ? (size / unit - 1) * unit : 0;
}

/* Chooses host[i] (1: on host, 2: swapped, see rule) so that at every
 * position the device bytes (base plus the sizes of items live there with
 * host[i] == 0, and of swapped items outside their host window, less what
 * stays of them) are at most cap where the items can make it so: when a
 * position overflows, the live device items whose free (swap: bring-back)
 * lies farthest ahead go to host first (they relieve the most later
 * positions too), or with PLACE_RULE_LARGEST the largest ones (fewest
 * blocks; ties: farthest free).  Returns the bytes placed on host (whole or
 * swapped), or UINT64_MAX if out of memory (host untouched). */
uint64_t place_solve(const place_problem_t *p, uint8_t *host);

/* Bytes that naive placement (device first, host for an allocation that
 * does not fit under cap when it comes) puts on host in one repetition of
 * the cycle from position 0, in the steady state (the copies that wrap in
 * from the step before lie where this step puts them); items must be in
 * allocation order (at increasing).  UINT64_MAX if out of memory. */
uint64_t place_naive(const place_problem_t *p, uint64_t cap);

/* Device bytes at the worst position for a given choice (for the tests;
 * swapped items as described above, with p->out_at and p->in_at). */
uint64_t place_peak(const place_problem_t *p, const uint8_t *host);

/* Statistics of the planner (cumulative). */
typedef struct place_stats {
    uint64_t planned_steps;      /* steps that ran on a plan to their end */
    uint64_t diverged_steps;     /* steps that left their plan (naive from there) */
    uint64_t naive_chosen;       /* steps left naive: it would put no more on host
                                    (vmem_stats_t.naive_chosen_steps) */
    uint64_t trials_unlike;      /* rule trials ended by a step planned from a
                                    kept variant (place_set_auto) */
    uint64_t plans;              /* plans computed */
    uint64_t planned_host_allocs, planned_host_bytes; /* placed on host by a plan */
    uint64_t fallback_allocs, fallback_bytes;         /* planned device, spilled anyway */
    uint64_t lighter_allocs, lighter_bytes; /* planned host, kept on the device: the
                                               step skipped blocks of its plan */
    uint64_t heavier_allocs, heavier_bytes; /* planned device, placed on host: blocks
                                               the plan did not know left no room */
    uint64_t last_plan_host_bytes; /* bytes the last plan puts on host per step */
    uint64_t idle_steps;         /* steps not recorded (place_t.idle) */
    uint64_t last_plan_swap_bytes; /* of which swapped (moved out and back) */
    uint64_t swap_out_bytes, swap_in_bytes; /* moved by swap windows */
    uint64_t swap_points;        /* allocations before which swaps ran */
    uint64_t swap_skipped;       /* moves not done (capture, no room, block gone) */
    /* Lifetimes of the blocks placed on host memory (planned or not), over
     * those freed so far: sums weighted by their bytes. */
    uint64_t host_freed_bytes;
    double host_life_events;     /* sum of bytes x events between alloc and free */
    double host_life_seconds;    /* sum of bytes x seconds between alloc and free */
} place_stats_t;

/* The planner's state in the step being recorded: learning only (the last
 * step fitted, nothing to plan from, or naive placement would put no more on
 * host than the plan), matching the last step's start,
 * following its plan, looking for the sequence again after a difference,
 * or given up until the step ends. */
enum { PLACE_ST_LEARN = 0, PLACE_ST_MATCH, PLACE_ST_PLAN, PLACE_ST_RESYNC, PLACE_ST_DIVERGED };

typedef struct place place_t;
struct place_curve;
struct place {
    int plans;                /* 0: naive placement (records, for the statistics) */
    int rule;                 /* the solver's rule, PLACE_RULE_* */
    /* Choosing the rule by measured step time (place_set_auto): after a
     * limit change, the first planned step that puts bytes on host is a
     * transition, then each rule of auto_rules runs PLACE_TRIAL_STEPS (3)
     * steps (farthest, largest, swap), and the fastest rule stays, judged
     * by the mean of its steps but the first (whose time holds the previous
     * rule's queued GPU work); a rule whose first counted step is far
     * slower than a rule timed before it is not timed further, and swap
     * is not timed where its first plan swaps no block (it is then a
     * whole-block rule like the two timed before it).  A planned step
     * past the transition planned from a kept variant (not from the step
     * before it) ends the trials on the first rule: steps of different
     * work do not compare rules. */
    int auto_rule;
    unsigned auto_rules;      /* bit r: rule r takes part in the trials */
    unsigned trial_step;
    uint64_t trial_limit;
    double trial_mean[PLACE_NRULES]; /* mean seconds of each rule's counted steps (0: none) */
    unsigned trial_n[PLACE_NRULES];  /* its counted steps */
    unsigned trial_skipped;   /* bit r: rule r left out of these trials (swap
                                 whose first plan swaps nothing) */
    int trial_fresh;          /* the rule in force has made no plan in the trials yet */
    /* Swap windows (PLACE_RULE_SWAP): the plan's moves, by trigger. */
    uint64_t swap_unit;       /* bytes moved as one (0: no swaps) */
    uint32_t swap_head, swap_tail; /* events after the allocation / before the free */
    struct place_move *moves; /* sorted by trigger */
    size_t nmoves, moves_cap;
    size_t due_lo, due_hi;    /* moves due before the allocation being placed */
    uint32_t *cur_of;         /* cur_of[k]: this step's record index of plan item k */
    size_t cur_of_cap;
    int decided;              /* the trials are over */
    place_record_t rec[2];    /* rec[cur] is being recorded, rec[!cur] the last step */
    int cur;
    /* Kept variants (above): var[i] valid while var_used[i] != 0 (the
     * step count when last kept or planned from, for least recently used
     * replacement).  src: where this step's plan comes from, -1 the last
     * step (rec[!cur]), else var[src]; frees of the last step's blocks are
     * learned (wrap) from rec[!cur] whatever src is. */
    place_record_t var[PLACE_VARIANTS];
    uint64_t var_used[PLACE_VARIANTS];
    uint64_t var_clock;
    int src;
    uint64_t live_total;      /* bytes live in both arenas, as seen here */

    /* The plan for the step being recorded. */
    int state;                /* PLACE_ST_*, above */
    size_t offset;            /* the plan covers the last step's items from offset */
    size_t pos;               /* the last step's item the next allocation should repeat */
    size_t mk;                /* allocations matched while candidates are narrowed */
    unsigned resyncs, restarts; /* times the step left the sequence; failed re-matches */
    place_cands_t cand;       /* offsets still possible while matching starts */
    uint8_t *plan;            /* plan[k]: the last step's item offset + k goes to host */
    size_t plan_n, plan_cap;
    /* The plan's device load over the step's positions (its own choices,
     * the base included), kept up to date with what the step does
     * differently: blocks of the plan the step skipped leave it, blocks
     * planned for host that it then keeps on the device enter it, blocks
     * the plan does not know enter it until freed.  A block planned for
     * host stays on the device where the load over its lifetime leaves
     * room for it, and one planned for the device goes to host where the
     * load over its lifetime passes the plan's cap (plan_at). */
    struct place_curve *curve;
    size_t div_pos;           /* the last step's item expected when the step left it */
    uint32_t *wrap;           /* wrap[k]: where this step freed a block of
                                 item offset + k of the last step */
    size_t wrap_n, wrap_cap;
    uint64_t margin;          /* bytes kept free under the limit (fragmentation): 1/64
                                 of the limit where last used (margin_of) */
    uint64_t extra;           /* learned extra margin (fallbacks of planned steps) */
    uint64_t step_fallback;   /* this step: planned device, spilled anyway */
    uint64_t step_short;      /* this step: device bytes those fallbacks lacked
                                 (place_note_short); what `extra` learns */
    uint64_t step_placed;     /* this step: placed on host by the plan */
    uint64_t step_lighter;    /* this step: planned host, kept on the device (curve) */
    uint64_t step_heavier;    /* this step: planned device, placed on host (curve) */
    uint64_t step_naive;      /* this step: spilled without a plan */
    uint64_t step_swapped;    /* this step: moved to host by swap windows */
    int naive_chosen;         /* this step was left naive (plan_make's guard) */
    /* Recording while nothing needs every step (place_env_t.may_idle):
     * after PLACE_QUIET_STEPS recorded steps in a row that fitted under
     * the limit, the next PLACE_IDLE_STEPS steps are not recorded (idle:
     * the inline notes keep only the live total and the step's peak), then
     * recording resumes; rec[!cur], the last step recorded, stays the
     * plan's source meanwhile (docs/placement.md, "An uncapped job records
     * two steps in sixteen"). */
    unsigned idle;            /* idle steps left, the one in progress included
                                 (0: the step in progress is recorded) */
    unsigned quiet;           /* recorded steps in a row that fitted */
    int recorded_before;      /* the step before the one in progress was
                                 recorded (1 at the start) */
    /* Called at each step end before the record closes (diagnostics). */
    void (*debug)(void *ctx, const struct place *pl);
    void *debug_ctx;
    place_stats_t stats;
};

/* What place_step_end needs to know about the instance. */
typedef struct place_env {
    uint64_t limit;           /* device limit in force */
    uint64_t dev_in_use;      /* device bytes in live blocks now */
    double step_seconds;      /* duration of the step that ends (place_step_end) */
    int may_idle;             /* place_step_end: the next steps need not all be
                                 recorded (no limit below the device's, and the
                                 block layout is not learning a step) */
    /* Bytes of a live block that lie on device memory. */
    uint64_t (*device_bytes)(void *ctx, int arena, uintptr_t addr, uint64_t size);
    void *ctx;
} place_env_t;

/* A move of a swap plan: before the allocation of plan item `trigger`,
 * plan item `item`'s block goes to host (to_host) or back. */
typedef struct place_move {
    uint32_t trigger, item;
    uint8_t to_host;
} place_move_t;

/* Recorded steps in a row before an uncapped job's planner idles, and the
 * steps it then leaves unrecorded: it records 2 steps in 16 (the record
 * costs about 85 instructions of the hot path's 500 per operation). */
#define PLACE_QUIET_STEPS 2u
#define PLACE_IDLE_STEPS 14u

void place_init(place_t *pl, int plans, int rule);

/* Lets measured step times choose the solver's rule among `rules` (bit r:
 * PLACE_RULE r; real devices: the cost of a byte on host depends on how
 * kernels read it, which the allocator cannot see; fewest bytes is the rule
 * on simulated ones).  rules 0: off. */
void place_set_auto(place_t *pl, unsigned rules);

/* Turns swap windows on (unit > 0: the bytes moved as one, the backend's
 * big mapping) with their head and tail in events. */
void place_set_swap(place_t *pl, uint64_t unit, uint32_t head, uint32_t tail);

/* 1 when a move of the swap windows is due before the allocation just
 * decided (then place_next_move gives them). */
static inline int place_moves_due(const place_t *pl) { return pl->due_lo < pl->due_hi; }

/* The next move due before the allocation just decided (place_decide_step),
 * for a block of this step still live: 1 with *addr, *size and *to_host
 * set, 0 when none is left. */
int place_next_move(place_t *pl, uintptr_t *addr, uint64_t *size, int *to_host);

/* A move place_next_move gave was done (bytes moved) or not (0: skipped). */
void place_move_done(place_t *pl, int to_host, uint64_t bytes);
void place_fini(place_t *pl);

/* Whether the step in progress decides where allocations go: 0 for the
 * steps with nothing to decide (learning, or left the sequence: most steps
 * of an uncapped job), whose allocations are PLACE_NONE without a call (nor
 * an environment built for one). */
static inline int place_deciding(const place_t *pl)
{
    return pl->plans && pl->state != PLACE_ST_LEARN && pl->state != PLACE_ST_DIVERGED;
}

/* The rest of the step in progress goes by naive placement (no plan: device
 * first), as when the step leaves the recorded sequence; the step is still
 * recorded, and counts as diverged.  Returns 1 if the step was deciding
 * (vmem_step_naive). */
int place_leave_step(place_t *pl);

/* In a step that decides (place_deciding): where the next allocation
 * (requested bytes, stream key) should go: PLACE_NONE (no plan: device
 * first), PLACE_DEVICE or PLACE_HOST.  env is consulted when a plan is made
 * (once per step). */
unsigned place_decide_step(place_t *pl, uint64_t req, uintptr_t stream, const place_env_t *env);

/* An allocation planned on the device (PLACE_DEVICE) of `size` bytes found
 * no room and goes to host: `dev_in_use` bytes were on the device under
 * `limit`.  The plan lacked what the block needed beyond the limit, or, if
 * the room was there but not in one piece, the margin (at most the block):
 * the learned margin grows by that, not by the block's size. */
void place_note_short(place_t *pl, uint64_t size, uint64_t dev_in_use, uint64_t limit);

/* An allocation succeeded: arena (0 device, 1 host), its sequence number in
 * that arena, the block, where it lies (on_host), and what had been decided
 * for it (place_decide_step's answer, else PLACE_NONE).  Inline for the common case (on device,
 * nothing decided, room in the record, the arena's next sequence number);
 * the rest in place_note_alloc_slow, which does the same from scratch. */
void place_note_alloc_slow(place_t *pl, uint64_t req, uint64_t size, uintptr_t stream, int arena,
                           uint64_t seq, uintptr_t addr, int on_host, unsigned decided);
static inline void place_note_alloc(place_t *pl, uint64_t req, uint64_t size, uintptr_t stream,
                                    int arena, uint64_t seq, uintptr_t addr, int on_host,
                                    unsigned decided)
{
    place_record_t *r = &pl->rec[pl->cur];
    if (pl->idle) { /* not recorded: what fits() and the step end read */
        r->nevents++;
        pl->live_total += size;
        if (pl->live_total > r->peak_total)
            r->peak_total = pl->live_total;
        if (on_host)
            pl->step_naive += size;
        return;
    }
    place_seqmap_t *m = &r->seqs[arena & 1];
    if (on_host || decided != PLACE_NONE || pl->state == PLACE_ST_RESYNC || r->overflow ||
        r->n >= r->cap ||
        r->n >= PLACE_MAX_ITEMS || m->n == 0 || m->n >= m->cap || m->n >= PLACE_MAX_ITEMS * 4 ||
        seq != m->seq0 + m->n) {
        place_note_alloc_slow(pl, req, size, stream, arena, seq, addr, on_host, decided);
        return;
    }
    pl->live_total += size;
    if (pl->live_total > r->peak_total)
        r->peak_total = pl->live_total;
    r->items[r->n] = (place_item_t){.req = req, .size = size, .stream = stream, .addr = addr,
                                    .at = r->nevents++, .end = PLACE_OPEN, .wrap = PLACE_OPEN,
                                    .arena = (uint8_t)arena};
    m->map[m->n++] = (uint32_t)r->n;
    r->n++;
}

/* A block was freed: arena, its allocation sequence number, its size.
 * Inline for a block of this step's record that lay on device memory. */
void place_note_free_slow(place_t *pl, int arena, uint64_t seq, uint64_t size);
static inline void place_note_free(place_t *pl, int arena, uint64_t seq, uint64_t size)
{
    place_record_t *r = &pl->rec[pl->cur];
    if (pl->idle) {
        r->nevents++;
        pl->live_total = pl->live_total > size ? pl->live_total - size : 0;
        return;
    }
    const place_seqmap_t *m = &r->seqs[arena & 1];
    if (m->n && seq >= m->seq0 && seq - m->seq0 < m->n) {
        uint32_t i = m->map[seq - m->seq0];
        if (i != PLACE_OPEN && i < r->n && !r->items[i].host && !r->items[i].extra) {
            pl->live_total = pl->live_total > size ? pl->live_total - size : 0;
            r->items[i].end = r->nevents++;
            return;
        }
    }
    place_note_free_slow(pl, arena, seq, size);
}

/* The step ended: closes the record, which becomes the plan's source (an
 * idle step's end only counts it, and may resume recording). */
void place_step_end(place_t *pl, const place_env_t *env);

/* The limit was set (vmem_set_limit, the control file): an idle planner
 * records again from the step's start if the step has not started yet (no
 * allocation or free since the last step end), so that the step is planned
 * from the last step recorded; otherwise from the next step.  changed: the
 * limit differs from the one before; then the kept variants are dropped and
 * the records made across the change are not kept as variants. */
void place_limit_changed(place_t *pl, const place_env_t *env, int changed);

/* Whether the step now ending and the one before it were recorded (read
 * before place_step_end): the block layout learns a step from both
 * (layout.c).  True from the first step until the planner first idles. */
static inline int place_records_complete(const place_t *pl)
{
    return !pl->idle && pl->recorded_before;
}

/* 1 if the device should keep host-placed blocks on host at this step end
 * (the last step did not fit under the limit with its margin): moving them
 * back would only make the next step spill them again. */
int place_hold_host(const place_t *pl, uint64_t limit);

#endif
