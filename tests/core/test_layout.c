/*
 * The block layout planner (src/layout.h): the solver on small instances
 * and adversarial ones (every layout checked for overlaps in address and
 * time), bfc_alloc_at, and the planner inside an instance on sim-vmm:
 * the hole BERT's logits leave (docs/benchmarks.md, issue 14), steps that
 * differ, and a limit.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "bfc.h"
#include "common.h"
#include "layout.h"
#include "vmem_internal.h"

#define U ((uint64_t)1 << 20)
#define BASE ((uintptr_t)1 << 30)

/* Every pair of items live at once lies apart, no item is below base or on
 * an obstacle while it lives; returns the top. */
static uintptr_t check_layout(size_t n, const uint64_t *size, const uint64_t *at,
                              const uint64_t *end, const uintptr_t *addr,
                              const layout_obstacle_t *obst, size_t nobst)
{
    uintptr_t top = BASE;
    for (size_t i = 0; i < n; i++) {
        cr_assert_geq(addr[i], BASE, "item %zu below the base", i);
        if (addr[i] + size[i] > top)
            top = addr[i] + size[i];
        for (size_t j = i + 1; j < n; j++) {
            int time = at[i] < end[j] && at[j] < end[i];
            int space = addr[i] < addr[j] + size[j] && addr[j] < addr[i] + size[i];
            cr_assert(!(time && space), "items %zu and %zu overlap", i, j);
        }
        for (size_t o = 0; o < nobst; o++) {
            int time = at[i] < obst[o].end;
            int space = addr[i] < obst[o].addr + obst[o].size && obst[o].addr < addr[i] + size[i];
            cr_assert(!(time && space), "item %zu on obstacle %zu", i, o);
        }
    }
    return top;
}

/* The most bytes live at once (items and obstacles). */
static uint64_t live_peak(size_t n, const uint64_t *size, const uint64_t *at, const uint64_t *end,
                          const layout_obstacle_t *obst, size_t nobst)
{
    uint64_t best = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = 0;
        for (size_t j = 0; j < n; j++)
            if (at[j] <= at[i] && at[i] < end[j])
                s += size[j];
        for (size_t o = 0; o < nobst; o++)
            if (at[i] < obst[o].end)
                s += obst[o].size;
        if (s > best)
            best = s;
    }
    return best;
}

/* BERT's logits: A (1) B (1) C (2) allocated in that order, A freed, D (2)
 * while B and C live.  In allocation order the top is 6; planned, 5 (D
 * where A was). */
Test(layout, logits_hole_closed)
{
    uint64_t size[] = {954 * U, 954 * U, 1908 * U, 1908 * U};
    uint64_t at[] = {0, 1, 2, 4};
    uint64_t end[] = {3, 6, 7, 8};
    uintptr_t addr[4];
    uintptr_t top = layout_solve(4, size, at, end, U, NULL, 0, BASE, addr);
    cr_assert_eq(check_layout(4, size, at, end, addr, NULL, 0), top);
    cr_assert_eq(top - BASE, live_peak(4, size, at, end, NULL, 0));
    cr_assert_eq(top - BASE, (954 + 1908 + 1908) * U);
}

/* Blocks below min_size are left to best fit (address 0). */
Test(layout, small_blocks_left_out)
{
    uint64_t size[] = {U / 2, 4 * U, 0};
    uint64_t at[] = {0, 1, 2};
    uint64_t end[] = {5, 5, 5};
    uintptr_t addr[3] = {1, 1, 1};
    cr_assert_neq(layout_solve(3, size, at, end, U, NULL, 0, BASE, addr), 0);
    cr_assert_eq(addr[0], 0);
    cr_assert_eq(addr[1], BASE);
    cr_assert_eq(addr[2], 0);
}

/* Obstacles: a live block to the end is avoided; one freed at 3 leaves its
 * room to a block made after it. */
Test(layout, obstacles)
{
    layout_obstacle_t obst[] = {{BASE, 2 * U, LAYOUT_END}, {BASE + 2 * U, 4 * U, 3}};
    uint64_t size[] = {4 * U, 4 * U};
    uint64_t at[] = {0, 4};
    uint64_t end[] = {2, 6};
    uintptr_t addr[2];
    uintptr_t top = layout_solve(2, size, at, end, U, obst, 2, BASE, addr);
    check_layout(2, size, at, end, addr, obst, 2);
    cr_assert_eq(addr[0], BASE + 6 * U, "the first item lives while the obstacle does");
    cr_assert_eq(addr[1], BASE + 2 * U, "the second takes the freed obstacle's room");
    cr_assert_eq(top, BASE + 10 * U);
}

/* Random instances: every layout is valid and its top at least the live
 * peak; on instances without obstacles, never above the sum of sizes. */
Test(layout, adversarial_random)
{
    srand(14);
    for (int round = 0; round < 300; round++) {
        size_t n = 1 + (size_t)(rand() % 40);
        uint64_t size[40], at[40], end[40];
        uintptr_t addr[40];
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++) {
            /* sizes of a few classes, some equal, some tiny, lifetimes nested or crossing */
            static const uint64_t cls[] = {1, 2, 3, 7, 64, 65, 1000};
            size[i] = cls[rand() % 7] * U / (rand() % 4 == 0 ? 2 : 1);
            at[i] = (uint64_t)(rand() % 50);
            end[i] = rand() % 8 == 0 ? LAYOUT_END : at[i] + 1 + (uint64_t)(rand() % 30);
            sum += size[i] >= U ? size[i] : 0;
        }
        size_t nobst = (size_t)(rand() % 3);
        layout_obstacle_t obst[3];
        uintptr_t oa = BASE;
        for (size_t o = 0; o < nobst; o++) {
            oa += (uint64_t)(rand() % 5) * U;
            obst[o] = (layout_obstacle_t){oa, (uint64_t)(1 + rand() % 3) * U,
                                          rand() % 2 ? LAYOUT_END : (uint64_t)(rand() % 40)};
            oa += obst[o].size;
        }
        uintptr_t top = layout_solve(n, size, at, end, U, obst, nobst, BASE, addr);
        cr_assert_neq(top, 0);
        /* items below U were not planned: give them no room in the check */
        uint64_t sz[40];
        for (size_t i = 0; i < n; i++)
            sz[i] = size[i] >= U ? size[i] : 0;
        for (size_t i = 0; i < n; i++)
            if (!sz[i])
                addr[i] = BASE;
        cr_assert_leq(check_layout(n, sz, at, end, addr, obst, nobst), top);
        if (!nobst) {
            cr_assert_geq(top - BASE, live_peak(n, sz, at, end, NULL, 0));
            cr_assert_leq(top - BASE, sum);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* bfc_alloc_at                                                             */
/* ------------------------------------------------------------------------ */

#define CHECK(a)                                                                               \
    do {                                                                                       \
        char why_[256] = "";                                                                   \
        cr_assert_eq(bfc_check((a), why_, sizeof why_), VMEM_OK, "bfc_check: %s", why_);      \
    } while (0)

Test(layout, alloc_at_carves_and_refuses)
{
    backend_t *b;
    bfc_arena_t a;
    bfc_params_t p = {.min_region = 2 * U, .max_region = 64 * U, .split_min = 256};
    cr_assert_eq(backend_sim_create(4ull << 30, 1, &b), VMEM_OK);
    b->grow_align = 0;
    cr_assert_eq(bfc_init(&a, b, &p, SIZE_MAX), VMEM_OK);
    void *x = bfc_alloc(&a, 16 * U, 0);
    cr_assert_not_null(x);
    cr_assert_eq(bfc_free(&a, x, 0, NULL), VMEM_OK);
    uintptr_t base = (uintptr_t)x;
    /* in the middle of the free chunk: free parts below and above */
    void *y = bfc_alloc_at(&a, 4 * U, 0, base + 6 * U, 0);
    cr_assert_eq((uintptr_t)y, base + 6 * U);
    CHECK(&a);
    /* a range that is taken: refused, nothing changes */
    size_t in_use = a.in_use;
    cr_assert_null(bfc_alloc_at(&a, 4 * U, 0, base + 8 * U, 0));
    cr_assert_eq(a.in_use, in_use);
    CHECK(&a);
    /* next to a live block, found through the hint */
    void *z = bfc_alloc_at(&a, 2 * U, 0, base + 4 * U, base + 6 * U);
    cr_assert_eq((uintptr_t)z, base + 4 * U);
    CHECK(&a);
    /* a hint away from the range: walked from, past y, to the free chunk */
    void *f = bfc_alloc_at(&a, U, 0, base + 13 * U, base + 4 * U);
    cr_assert_eq((uintptr_t)f, base + 13 * U);
    CHECK(&a);
    /* walked from a hint into a live block: refused, nothing changes */
    in_use = a.in_use;
    cr_assert_null(bfc_alloc_at(&a, U, 0, base + 7 * U, base + 4 * U));
    cr_assert_null(bfc_alloc_at(&a, U, 0, base + 9 * U, base + 13 * U));
    cr_assert_eq(a.in_use, in_use);
    CHECK(&a);
    /* a hint that is no live block: found all the same */
    void *g = bfc_alloc_at(&a, U, 0, base + 11 * U, base + U);
    cr_assert_eq((uintptr_t)g, base + 11 * U);
    CHECK(&a);
    cr_assert_eq(bfc_free(&a, f, 0, NULL), VMEM_OK);
    cr_assert_eq(bfc_free(&a, g, 0, NULL), VMEM_OK);
    CHECK(&a);
    /* beyond the end: the region grows to reach it */
    size_t held = a.held;
    void *w = bfc_alloc_at(&a, 4 * U, 0, base + held + 2 * U, 0);
    cr_assert_eq((uintptr_t)w, base + held + 2 * U);
    cr_assert_geq(a.held, held + 6 * U);
    CHECK(&a);
    cr_assert_eq(bfc_free(&a, y, 0, NULL), VMEM_OK);
    cr_assert_eq(bfc_free(&a, z, 0, NULL), VMEM_OK);
    cr_assert_eq(bfc_free(&a, w, 0, NULL), VMEM_OK);
    CHECK(&a);
    bfc_fini(&a);
    backend_destroy(b);
}

/* ------------------------------------------------------------------------ */
/* Inside an instance (sim-vmm, no limit)                                   */
/* ------------------------------------------------------------------------ */

static vmem_t *open_simvmm(void)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM_VMM;
    cfg.sim_capacity = (size_t)16 << 30;
    cfg.log_level = VMEM_LOG_NONE;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    return v;
}

/* The logits blocks (sizes in units of 64 MiB, k = 4 unless said): A (k),
 * B (k), C (2k), A freed, then D (2k), which does not fit in A's hole.  blk
 * gets A (freed), B, C, D. */
static void logits_blocks_k(vmem_t *v, uint64_t unit, uint64_t k, char *blk[4])
{
    blk[0] = vmem_alloc(v, k * unit);
    blk[1] = vmem_alloc(v, k * unit);
    blk[2] = vmem_alloc(v, 2 * k * unit);
    cr_assert(blk[0] && blk[1] && blk[2]);
    vmem_free(v, blk[0]);
    blk[3] = vmem_alloc(v, 2 * k * unit);
    cr_assert_not_null(blk[3]);
}

static void logits_blocks(vmem_t *v, uint64_t unit, char *blk[4])
{
    logits_blocks_k(v, unit, 4, blk);
}

/* One step of the logits pattern: returns the span of the step's four
 * blocks' addresses (highest end - lowest start): 6k units by best fit, 5k
 * with D where A was. */
static uint64_t logits_step_k(vmem_t *v, uint64_t unit, uint64_t k)
{
    void *small[6];
    for (int i = 0; i < 3; i++)
        small[i] = vmem_alloc(v, 4096 + (size_t)i);
    char *blk[4];
    logits_blocks_k(v, unit, k, blk);
    char *A = blk[0], *B = blk[1], *C = blk[2], *D = blk[3];
    for (int i = 3; i < 6; i++)
        small[i] = vmem_alloc(v, 8192 + (size_t)i);
    char *lo = A, *hi = A + k * unit;
    char *p[] = {B, C, D};
    uint64_t s[] = {k * unit, 2 * k * unit, 2 * k * unit};
    for (int i = 0; i < 3; i++) {
        if (p[i] < lo)
            lo = p[i];
        if (p[i] + s[i] > hi)
            hi = p[i] + s[i];
    }
    vmem_free(v, B);
    vmem_free(v, C);
    vmem_free(v, D);
    for (int i = 0; i < 6; i++)
        vmem_free(v, small[i]);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_step_end(v);
    return (uint64_t)(hi - lo);
}

static uint64_t logits_step(vmem_t *v, uint64_t unit) { return logits_step_k(v, unit, 4); }

/* Best fit leaves A's hole below C and puts D above (a span of 24 units);
 * the plan puts D where A was (20 units, the live peak of the four). */
Test(layout, instance_closes_the_hole)
{
    const uint64_t unit = 64 * U;
    vmem_t *v = open_simvmm();
    void *w = vmem_alloc(v, 100 * U); /* weights: live throughout */
    uint64_t span = 0;
    for (int step = 0; step < 6; step++)
        span = logits_step(v, unit);
    cr_assert_eq(span, 20 * unit, "span %llu MiB, expected %llu",
                 (unsigned long long)(span / U), (unsigned long long)(20 * unit / U));
    cr_assert_geq(v->layout.stats.plans, 1);
    cr_assert_geq(v->layout.stats.reused_steps, 1, "the plan is kept and reused");
    cr_assert_leq(v->layout.stats.plans, 2, "planned once (per live set), not per step");
    vmem_free(v, w);
    vmem_destroy(v);
}

/* vmem_destroy reports, at INFO, what the layout did (layout_report). */
static void keep_layout_line(void *ctx, vmem_log_level_t level, const char *msg)
{
    if (level == VMEM_LOG_INFO && strncmp(msg, "layout: ", 8) == 0)
        snprintf(ctx, 256, "%s", msg);
}

Test(layout, reported_at_destroy)
{
    char line[256] = "";
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM_VMM;
    cfg.sim_capacity = (size_t)16 << 30;
    cfg.log_fn = keep_layout_line;
    cfg.log_ctx = line;
    cfg.log_level = VMEM_LOG_INFO;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    for (int step = 0; step < 4; step++)
        logits_step(v, 64 * U);
    uint64_t plans = v->layout.stats.plans;
    cr_assert_geq(plans, 1);
    vmem_destroy(v);
    char want[64];
    snprintf(want, sizeof want, "layout: %llu plans (", (unsigned long long)plans);
    cr_assert(strncmp(line, want, strlen(want)) == 0, "got \"%s\"", line);
}

/* Steps that differ from the plan: the plan is dropped where the step
 * leaves it, nothing breaks, and the new sequence is learned. */
Test(layout, steps_that_differ)
{
    const uint64_t unit = 64 * U;
    vmem_t *v = open_simvmm();
    for (int step = 0; step < 3; step++)
        logits_step(v, unit);
    /* a different step: other sizes, the same first allocations */
    for (int step = 0; step < 2; step++) {
        void *s0 = vmem_alloc(v, 4096), *s1 = vmem_alloc(v, 4097), *s2 = vmem_alloc(v, 4098);
        void *x = vmem_alloc(v, 3 * unit), *y = vmem_alloc(v, 5 * unit);
        cr_assert(s0 && s1 && s2 && x && y);
        vmem_free(v, x);
        void *z = vmem_alloc(v, 6 * unit);
        cr_assert_not_null(z);
        vmem_free(v, y);
        vmem_free(v, z);
        vmem_free(v, s0);
        vmem_free(v, s1);
        vmem_free(v, s2);
        cr_assert_eq(vmem_check(v), VMEM_OK);
        vmem_step_end(v);
    }
    cr_assert_geq(v->layout.stats.diverged_steps, 1, "the changed step left its plan");
    uint64_t span = 0;
    for (int step = 0; step < 4; step++)
        span = logits_step(v, unit);
    cr_assert_eq(span, 20 * unit, "the first sequence is learned again");
    vmem_destroy(v);
}

/* The placement planner leaves steps unrecorded once the layout follows a
 * kept plan (no limit; placement.h, place_t.idle).  A step that changes
 * while it idles is learned all the same: the layout matches at once
 * against the last step recorded, without the carried blocks' frees where
 * the planner's records are not complete (the planner records again for
 * it); a plan so made that the step leaves sets no wait, and the step just
 * recorded is matched next.  Waiting for two recorded steps instead learned
 * it in the fourth step, and cost BERT's replay a step without a plan (held
 * over live 1.088, not 1.021): the test fails with that wait. */
Test(layout, a_step_changed_while_the_planner_idles_is_learned)
{
    const uint64_t unit = 64 * U;
    vmem_t *v = open_simvmm();
    void *w = vmem_alloc(v, 100 * U);
    uint64_t span = 0;
    for (int step = 0; step < 6; step++)
        span = logits_step(v, unit);
    cr_assert_eq(span, 20 * unit);
    cr_assert(v->place.idle, "the planner idles while the layout follows its plan");
    cr_assert_gt(v->place.stats.idle_steps, 0);
    uint64_t plans = v->layout.stats.plans;
    /* Another step (k = 3: 18 units by best fit, 15 planned). */
    int learned = -1, incomplete = 0;
    for (int step = 0; step < 8 && learned < 0; step++) {
        if (logits_step_k(v, unit, 3) == 15 * unit)
            learned = step;
        if (v->layout.state == LAYOUT_MATCH && v->layout.want_records) {
            incomplete++;
            cr_assert_eq(v->layout.ncarry, 0, "step %d: carried frees from records that are "
                         "not complete", step);
        }
    }
    cr_assert_geq(incomplete, 1, "matched from the last step recorded");
    cr_assert_geq(learned, 0, "the changed step is learned");
    cr_assert_leq(learned, 2, "by the third step (%d)", learned);
    cr_assert_gt(v->layout.stats.plans, plans);
    for (int step = 0; step < 20; step++)
        cr_assert_eq(logits_step_k(v, unit, 3), 15 * unit, "and followed (step %d)", step);
    cr_assert(v->place.idle, "the planner idles again");
    vmem_free(v, w);
    vmem_destroy(v);
}

/* With a limit set, the layout stops: best fit only, no plans kept. */
Test(layout, off_under_a_limit)
{
    const uint64_t unit = 64 * U;
    vmem_t *v = open_simvmm();
    for (int step = 0; step < 3; step++)
        logits_step(v, unit);
    cr_assert_eq(vmem_set_limit(v, (size_t)8 << 30, NULL), VMEM_OK);
    uint64_t placed = v->layout.stats.placed, plans = v->layout.stats.plans;
    uint64_t span = 0;
    for (int step = 0; step < 3; step++)
        span = logits_step(v, unit);
    cr_assert_eq(v->layout.stats.placed, placed);
    cr_assert_eq(v->layout.stats.plans, plans);
    cr_assert_eq(span, 24 * unit, "best fit's layout");
    vmem_destroy(v);
}

/* The carried blocks' frees (layout.h, layout_t.carry), as layout_step_end
 * reads them from the placement planner: the last step's blocks live at its
 * end that this step freed. */
static size_t carry_expected(const vmem_t *v, layout_carry_t *out, size_t cap)
{
    const place_t *pl = &v->place;
    const place_record_t *prev = &pl->rec[!pl->cur];
    size_t nw = prev->n < pl->wrap_n ? prev->n : pl->wrap_n, k = 0;
    for (size_t i = 0; i < nw; i++) {
        const place_item_t *it = &prev->items[i];
        if (it->end == PLACE_OPEN && it->arena == 0 && !it->host && pl->wrap[i] != PLACE_OPEN) {
            if (k < cap)
                out[k] = (layout_carry_t){it->size, pl->wrap[i]};
            k++;
        }
    }
    return k;
}

/* The carried blocks' frees are read only by a plan being made: a step end
 * after which the next step matches learns them (the same as every step end
 * did before), one after which the next step starts on a kept plan or waits
 * skips the walk over the last step's record (docs/benchmarks.md, round 6).
 * Steps carry a block into the next (allocated at the end, freed after the
 * next step's first allocations), so there is something to learn. */
Test(layout, carry_learned_only_for_a_plan)
{
    const uint64_t unit = 64 * U;
    vmem_t *v = open_simvmm();
    void *carried = NULL;
    int matched = 0, skipped = 0;
    for (int step = 0; step < 10; step++) {
        void *small[3];
        for (int i = 0; i < 3; i++)
            small[i] = vmem_alloc(v, 4096 + (size_t)i);
        if (carried)
            vmem_free(v, carried);
        char *blk[4];
        logits_blocks(v, unit, blk);
        for (int i = 1; i < 4; i++)
            vmem_free(v, blk[i]);
        for (int i = 0; i < 3; i++)
            vmem_free(v, small[i]);
        /* step 3 (the planner still records) and step 7 (it idles): a new
         * live set each */
        carried = vmem_alloc(v, (size_t)(step < 2 ? 2 : step < 6 ? 3 : 4) * unit);
        cr_assert_not_null(carried);
        cr_assert_eq(vmem_check(v), VMEM_OK);
        layout_carry_t want[8];
        size_t n = carry_expected(v, want, 8);
        cr_assert_leq(n, 8);
        vmem_step_end(v);
        if (v->layout.state == LAYOUT_MATCH && v->layout.want_records) {
            /* matched from records that are not complete: nothing carried */
            cr_assert_eq(v->layout.ncarry, 0, "step %d: carried frees of an unrecorded step", step);
        } else if (v->layout.state == LAYOUT_MATCH) {
            cr_assert_eq(v->layout.ncarry, n, "step %d: %zu carried, %zu expected", step,
                         v->layout.ncarry, n);
            for (size_t i = 0; i < n; i++) {
                cr_assert_eq(v->layout.carry[i].size, want[i].size);
                cr_assert_eq(v->layout.carry[i].pos, want[i].pos);
            }
            matched += n > 0;
        } else {
            cr_assert_eq(v->layout.ncarry, 0, "step %d: learned with no plan to make", step);
            skipped += n > 0;
        }
    }
    cr_assert_geq(matched, 1, "a step matched with a carried block to learn");
    cr_assert_geq(skipped, 1, "a step started on a kept plan with a carried block");
    cr_assert_geq(v->layout.stats.reused_steps, 1);
    vmem_free(v, carried);
    vmem_destroy(v);
}
