/* The block layout planner (layout.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layout.h"
#include "vmem_internal.h"

#define LAYOUT_MAX_ITEMS ((size_t)1 << 14) /* most blocks planned in one step */
#define LAYOUT_BACKOFF_MAX 64u             /* most steps waited after a plan was left */
#define LAYOUT_GAIN_DIV 128u               /* a plan must hold 1/128 less than the arena */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

vmem_status_t layout_from_env(int *enabled, uint64_t *min_size)
{
    *enabled = 1;
    *min_size = LAYOUT_MIN_DEFAULT;
    const char *e = getenv("VMEM_LAYOUT");
    if (e && options_parse_bool(e, enabled) != 0) {
        vmem_log(NULL, VMEM_LOG_ERROR, "invalid VMEM_LAYOUT=\"%s\" (expected on or off)", e);
        return VMEM_ERR_ENV;
    }
    const char *m = getenv("VMEM_LAYOUT_MIN");
    if (m) {
        size_t v = 0;
        if (vmem_parse_size(m, &v) != VMEM_OK || v == 0) {
            vmem_log(NULL, VMEM_LOG_ERROR,
                     "invalid VMEM_LAYOUT_MIN=\"%s\" (expected a size above 0, e.g. 1M)", m);
            return VMEM_ERR_ENV;
        }
        *min_size = v;
    }
    return VMEM_OK;
}

void layout_init(layout_t *lo, int enabled, uint64_t min_size)
{
    memset(lo, 0, sizeof *lo);
    lo->enabled = enabled;
    lo->min_size = min_size ? min_size : LAYOUT_MIN_DEFAULT;
    lo->state = LAYOUT_OFF;
}

void layout_report(const layout_t *lo, struct vmem *v)
{
    if (!lo->stats.plans)
        return;
    vmem_log(v, VMEM_LOG_INFO,
             "layout: %llu plans (%.3f s), %llu steps reused a plan, %llu followed one to its "
             "end, %llu left one; %llu blocks at their planned address, %llu elsewhere",
             (unsigned long long)lo->stats.plans, lo->stats.plan_seconds,
             (unsigned long long)lo->stats.reused_steps,
             (unsigned long long)lo->stats.followed_steps,
             (unsigned long long)lo->stats.diverged_steps, (unsigned long long)lo->stats.placed,
             (unsigned long long)lo->stats.fallbacks);
}

void layout_fini(layout_t *lo)
{
    for (int i = 0; i < LAYOUT_PLANS; i++)
        free(lo->plans[i].v);
    free(lo->cand.v);
    free(lo->carry);
    memset(lo, 0, sizeof *lo);
}

/* ------------------------------------------------------------------------ */
/* The solver                                                               */
/* ------------------------------------------------------------------------ */

/* The blocks in the way of a layout, sorted by address (obstacles, live
 * over [0, end), and the items placed so far), as arrays: the gap search
 * reads every entry and skips most (those not live with the item). */
typedef struct placed {
    uintptr_t *lo, *hi;  /* [lo, hi) */
    uint64_t *at, *end;  /* live over [at, end) */
    size_t n;
} placed_t;

static const uint64_t *sort_size, *sort_at, *sort_end;
static int sort_rule;

/* Orders of the items (layout_solve tries each): largest first; longest
 * lived first; largest size x lifetime first (ties: larger, then earlier). */
#define ORDERS 3
static int by_order(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    if (sort_rule > 0) {
        uint64_t la = sort_end[a] - sort_at[a], lb = sort_end[b] - sort_at[b];
        double ka = sort_rule == 1 ? (double)la : (double)la * (double)sort_size[a];
        double kb = sort_rule == 1 ? (double)lb : (double)lb * (double)sort_size[b];
        if (ka != kb)
            return ka > kb ? -1 : 1;
    }
    if (sort_size[a] != sort_size[b])
        return sort_size[a] > sort_size[b] ? -1 : 1;
    if (sort_at[a] != sort_at[b])
        return sort_at[a] < sort_at[b] ? -1 : 1;
    return a < b ? -1 : (a > b);
}

/* One layout: items in `order`, each in the lowest gap (best == 0) or the
 * smallest gap (best == 1) that holds it over its lifetime.  Returns the
 * top, 0 if out of memory.  The top only grows as items are placed: once
 * it reaches bound (the best top of the layouts tried before, 0: none),
 * this layout cannot win and is abandoned (returns that top).  pl: room
 * for nobst + m entries. */
static uintptr_t solve_one(const size_t *order, size_t m, const uint64_t *size, const uint64_t *at,
                           const uint64_t *end, const layout_obstacle_t *obst, size_t nobst,
                           uintptr_t base, int best, uintptr_t bound, uintptr_t *addr, placed_t *pl)
{
    uintptr_t top = base;
    /* Obstacles first, as entries live from 0; an obstacle and an item at
     * the same address may come in either order (the search's outcome does
     * not depend on the order of entries starting at one address). */
    for (size_t o = 0; o < nobst; o++) {
        pl->lo[o] = obst[o].addr;
        pl->hi[o] = obst[o].addr + obst[o].size;
        pl->at[o] = 0;
        pl->end[o] = obst[o].end;
        if (pl->hi[o] > top)
            top = pl->hi[o];
    }
    size_t np = nobst;
    uintptr_t *plo = pl->lo, *phi = pl->hi;
    uint64_t *pat = pl->at, *pend = pl->end;
    for (size_t k = 0; k < m; k++) {
        size_t i = order[k];
        uint64_t s = size[i], a0 = at[i], e0 = end[i];
        uintptr_t pos = base, found = 0;
        uint64_t found_gap = UINT64_MAX;
        int have = 0;
        /* The entries live during [a0, e0) (obstacles: a0 < end; e0 > a0
         * >= 0 = their at), in address order: the gaps between them that
         * hold s. */
        int done = 0;
        for (size_t b = 0; b < np && !done; b += 64) {
            /* which of the next 64 entries are live then (no branch each) */
            size_t nb = np - b < 64 ? np - b : 64;
            uint64_t live = 0;
            for (size_t j = 0; j < nb; j++)
                live |= (uint64_t)((a0 < pend[b + j]) & (pat[b + j] < e0)) << j;
            while (live) {
                size_t ip = b + (size_t)__builtin_ctzll(live);
                live &= live - 1;
                uintptr_t lo = plo[ip];
                if (lo >= pos + s) {
                    if (!best) {
                        found = pos;
                        have = 1;
                        done = 1;
                        break;
                    }
                    if (lo - pos < found_gap) {
                        found_gap = lo - pos;
                        found = pos;
                        have = 1;
                        if (found_gap == s) {
                            done = 1;
                            break;
                        }
                    }
                }
                if (phi[ip] > pos)
                    pos = phi[ip];
            }
        }
        if (!have)
            found = pos; /* above everything live then */
        addr[i] = found;
        if (found + s > top)
            top = found + s;
        if (bound && top >= bound)
            return top;
        size_t lo = 0, hi = np;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (plo[mid] < found)
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t mv = (np - lo) * sizeof *plo;
        memmove(&plo[lo + 1], &plo[lo], mv);
        memmove(&phi[lo + 1], &phi[lo], mv);
        memmove(&pat[lo + 1], &pat[lo], mv);
        memmove(&pend[lo + 1], &pend[lo], mv);
        plo[lo] = found;
        phi[lo] = found + s;
        pat[lo] = a0;
        pend[lo] = e0;
        np++;
    }
    return top;
}

uintptr_t layout_solve(size_t n, const uint64_t *size, const uint64_t *at, const uint64_t *end,
                       uint64_t min_size, const layout_obstacle_t *obst, size_t nobst,
                       uintptr_t base, uintptr_t *addr)
{
    size_t m = 0;
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    size_t cap = n + nobst + 1;
    placed_t pl = {malloc(cap * sizeof *pl.lo), malloc(cap * sizeof *pl.hi),
                   malloc(cap * sizeof *pl.at), malloc(cap * sizeof *pl.end), 0};
    uintptr_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    uintptr_t top = 0;
    if (!order || !pl.lo || !pl.hi || !pl.at || !pl.end || !tmp)
        goto out;
    for (size_t i = 0; i < n; i++) {
        addr[i] = 0;
        tmp[i] = 0;
        if (size[i] && size[i] >= min_size)
            order[m++] = i;
    }
    sort_size = size;
    sort_at = at;
    sort_end = end;
    /* Every order with first and best fit: the lowest top wins (ties: the
     * first tried). */
    for (int r = 0; r < ORDERS; r++) {
        sort_rule = r;
        qsort(order, m, sizeof *order, by_order);
        for (int best = 0; best < 2; best++) {
            uintptr_t t = solve_one(order, m, size, at, end, obst, nobst, base, best, top, tmp, &pl);
            if (!top || t < top) {
                top = t;
                for (size_t k = 0; k < m; k++)
                    addr[order[k]] = tmp[order[k]];
            }
        }
    }
out:
    free(order);
    free(pl.lo);
    free(pl.hi);
    free(pl.at);
    free(pl.end);
    free(tmp);
    return top;
}

/* ------------------------------------------------------------------------ */
/* Making a plan                                                            */
/* ------------------------------------------------------------------------ */

typedef struct life {
    uintptr_t addr;
    uint64_t end;
    int prio; /* this step's own blocks over the last step's */
} life_t;

static int life_cmp(const void *x, const void *y)
{
    const life_t *a = x, *b = y;
    if (a->addr != b->addr)
        return a->addr < b->addr ? -1 : 1;
    return b->prio - a->prio; /* higher priority first */
}

static uint64_t life_find(const life_t *v, size_t n, uintptr_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].addr == addr ? v[lo].end : LAYOUT_END;
}

/* The kept plan to overwrite: an invalid one, else the least recently used. */
static layout_plan_t *plan_slot(layout_t *lo)
{
    layout_plan_t *best = &lo->plans[0];
    for (int i = 0; i < LAYOUT_PLANS; i++) {
        layout_plan_t *p = &lo->plans[i];
        if (!p->valid)
            return p;
        if (p->stamp < best->stamp)
            best = p;
    }
    return best;
}

/* Appends obstacle x to *o (k entries, *cap room), doubling it when full.
 * 0 if out of memory (*o is then freed and NULL). */
static int obstacle_push(layout_obstacle_t **o, size_t *cap, size_t *k, layout_obstacle_t x)
{
    if (*k == *cap) {
        layout_obstacle_t *no = realloc(*o, 2 * *cap * sizeof *no);
        if (!no) {
            free(*o);
            *o = NULL;
            return 0;
        }
        *o = no;
        *cap *= 2;
    }
    (*o)[(*k)++] = x;
    return 1;
}

/* Obstacles: every live block of the arena, and free chunks too small to
 * hold a planned block, merged where they touch and live to the end;
 * blocks with a known (or guessed) free live until it.  NULL if out of
 * memory. */
static layout_obstacle_t *obstacles(const layout_t *lo, const bfc_arena_t *a, const life_t *lives,
                                    size_t nlives, size_t *n)
{
    size_t cap = 64, k = 0;
    layout_obstacle_t *o = malloc(cap * sizeof *o);
    if (!o)
        return NULL;
    for (const bfc_region_t *r = a->regions; r; r = r->next) {
        for (const bfc_chunk_t *c = r->first; c; c = c->next) {
            if (!c->in_use && c->size >= lo->min_size && c->stream != BFC_STREAM_HOST)
                continue; /* room for the plan */
            uint64_t end = c->in_use ? life_find(lives, nlives, c->addr) : LAYOUT_END;
            if (k && end == LAYOUT_END && o[k - 1].end == LAYOUT_END &&
                o[k - 1].addr + o[k - 1].size == c->addr) {
                o[k - 1].size += c->size;
                continue;
            }
            if (!obstacle_push(&o, &cap, &k, (layout_obstacle_t){c->addr, c->size, end}))
                return NULL;
        }
        /* a gap between regions is no room for the plan */
        if (r->next && r->next->base > r->base + r->size &&
            !obstacle_push(&o, &cap, &k,
                           (layout_obstacle_t){r->base + r->size,
                                               r->next->base - (r->base + r->size), LAYOUT_END}))
            return NULL;
    }
    *n = k;
    return o;
}

typedef struct hkey {
    uint64_t key;
    size_t idx;
} hkey_t;

static int hkey_cmp(const void *x, const void *y)
{
    const hkey_t *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->idx < b->idx ? -1 : (a->idx > b->idx);
}

/* Sets the hint of plan p's slots mk .. n - 1 (layout_slot_t.hint); slots
 * below mk were made already (their sizes are C's).  Leaves the hints 0 if
 * out of memory. */
static void hint_sweep(layout_plan_t *p, size_t mk, size_t n, const uint64_t *size,
                       const uint64_t *at, const uint64_t *end, const place_record_t *C)
{
    hkey_t *starts = malloc((n ? n : 1) * sizeof *starts), *ends = malloc((n ? n : 1) * sizeof *ends);
    size_t *live = malloc((n ? n : 1) * sizeof *live); /* by address */
    uint64_t *sz = malloc((n ? n : 1) * sizeof *sz);
    size_t np = 0, nl = 0, e = 0;
    if (!starts || !ends || !live || !sz)
        goto out;
    for (size_t k = 0; k < n; k++) {
        sz[k] = k < mk ? C->items[k].size : size[k];
        if (!p->v[k].addr)
            continue;
        starts[np] = (hkey_t){at[k], k};
        ends[np++] = (hkey_t){end[k], k};
    }
    qsort(starts, np, sizeof *starts, hkey_cmp);
    qsort(ends, np, sizeof *ends, hkey_cmp);
    for (size_t q = 0; q < np; q++) {
        size_t j = starts[q].idx;
        for (; e < np && ends[e].key <= at[j]; e++) { /* freed by now */
            size_t k = ends[e].idx;
            for (size_t x = 0; x < nl; x++) {
                if (live[x] == k) {
                    memmove(&live[x], &live[x + 1], (nl - x - 1) * sizeof *live);
                    nl--;
                    break;
                }
            }
        }
        uintptr_t lo_a = p->v[j].addr, hi_a = lo_a + sz[j];
        size_t l = 0, h = nl;
        while (l < h) {
            size_t mid = (l + h) / 2;
            if (p->v[live[mid]].addr < lo_a)
                l = mid + 1;
            else
                h = mid;
        }
        if (j >= mk && nl) {
            uint64_t gb = UINT64_MAX, ga = UINT64_MAX;
            size_t kb = l ? live[l - 1] : 0, ka = l < nl ? live[l] : 0;
            if (l && p->v[kb].addr + sz[kb] <= lo_a)
                gb = lo_a - (p->v[kb].addr + sz[kb]);
            if (l < nl && p->v[ka].addr >= hi_a)
                ga = p->v[ka].addr - hi_a;
            if (gb != UINT64_MAX || ga != UINT64_MAX)
                p->v[j].hint = gb <= ga ? p->v[kb].addr : p->v[ka].addr;
            else
                p->v[j].hint = p->v[l ? kb : ka].addr; /* in the way: the walk refuses */
        }
        if (end[j] > at[j]) {
            memmove(&live[l + 1], &live[l], (nl - l) * sizeof *live);
            live[l] = j;
            nl++;
        }
    }
out:
    free(starts);
    free(ends);
    free(live);
    free(sz);
}

/* Plans this step as a repetition of the last one (R) from item off; the
 * step's first mk allocations, made already, repeated R's items off ..
 * off + mk - 1.  Returns the plan, or NULL (no plan this step). */
static layout_plan_t *plan_make(layout_t *lo, const place_t *pl, const bfc_arena_t *a, size_t off,
                                size_t mk)
{
    const place_record_t *R = &pl->rec[!pl->cur], *C = &pl->rec[pl->cur];
    if (!a->regions || C->n != mk || off + mk > R->n)
        return NULL;
    double t0 = now_s();
    size_t n = R->n - off;
    uint64_t at0 = R->items[off].at;
    uint64_t *size = malloc(n * sizeof *size), *at = malloc(n * sizeof *at),
             *end = malloc(n * sizeof *end);
    uintptr_t *addr = malloc(n * sizeof *addr);
    size_t nl = 0, big = 0;
    life_t *lives = malloc((R->n + mk + 1) * sizeof *lives);
    layout_plan_t *p = NULL;
    layout_obstacle_t *obst = NULL;
    size_t nobst = 0;
    if (!size || !at || !end || !addr || !lives)
        goto out;
    for (size_t j = 0; j < n; j++) {
        const place_item_t *it = &R->items[off + j];
        at[j] = it->at - at0;
        end[j] = it->end == PLACE_OPEN ? LAYOUT_END : (uint64_t)(it->end - at0);
        /* Blocks live past the step's end are left to best fit: the plan
         * cannot know where the next step will be (and the first step's
         * record holds blocks made once, e.g. the optimizer's state, that
         * later steps do not make again). */
        size[j] = j >= mk && it->arena == 0 && !it->host && it->end != PLACE_OPEN ? it->size : 0;
        big += size[j] >= lo->min_size;
    }
    if (big > LAYOUT_MAX_ITEMS)
        goto out;
    /* When the blocks live now are freed: the last step's blocks carried
     * into this one, as the blocks carried into the last step were (by
     * size, in order); this step's first mk, as in the last step. */
    size_t used = 0;
    for (size_t i = 0; i < R->n; i++) {
        const place_item_t *it = &R->items[i];
        if (it->end != PLACE_OPEN || it->arena != 0 || it->host)
            continue;
        uint64_t e = LAYOUT_END;
        for (size_t c = used; c < lo->ncarry; c++) {
            if (lo->carry[c].size == it->size) {
                e = lo->carry[c].pos;
                used = c + 1;
                break;
            }
        }
        lives[nl++] = (life_t){it->addr, e, 0};
    }
    for (size_t j = 0; j < mk; j++) {
        const place_item_t *it = &C->items[j];
        if (it->end != PLACE_OPEN || it->arena != 0)
            continue;
        lives[nl++] = (life_t){it->addr, end[j], 1};
    }
    qsort(lives, nl, sizeof *lives, life_cmp);
    size_t w = 0; /* one entry per address, the step's own first */
    for (size_t i = 0; i < nl; i++)
        if (!w || lives[w - 1].addr != lives[i].addr)
            lives[w++] = lives[i];
    nl = w;
    obst = obstacles(lo, a, lives, nl, &nobst);
    if (!obst)
        goto out;
    uintptr_t top = layout_solve(n, size, at, end, lo->min_size, obst, nobst, a->regions->base, addr);
    if (!top)
        goto out;
    /* Used only if it holds clearly less than the arena does now (and so
     * never grows it): otherwise best fit does as well. */
    uintptr_t rend = a->regions->base;
    for (const bfc_region_t *r = a->regions; r; r = r->next)
        rend = r->base + r->size;
    int worth = top + (rend - a->regions->base) / LAYOUT_GAIN_DIV <= rend;
    lo->stats.plans++;
    lo->unreused++;
    if (!worth) { /* remembered, so that this live set is not planned again */
        layout_plan_t *q = plan_slot(lo);
        q->n = 0;
        q->sig = lo->step_sig;
        q->stamp = lo->clock;
        q->valid = 1;
        goto out;
    }
    p = plan_slot(lo);
    if (p->cap < n) {
        layout_slot_t *nv = realloc(p->v, n * sizeof *nv);
        if (!nv) {
            p = NULL;
            goto out;
        }
        p->v = nv;
        p->cap = n;
    }
    for (size_t j = 0; j < n; j++) {
        const place_item_t *it = &R->items[off + j];
        uintptr_t ad = addr[j];
        if (j < mk) /* made already: where it went, if it is planned-size */
            ad = C->items[j].arena == 0 && !C->items[j].host && C->items[j].size >= lo->min_size
                     ? C->items[j].addr
                     : 0;
        p->v[j] = (layout_slot_t){it->req, it->stream, ad, 0};
    }
    /* Hints: a planned block live when j is made, next to j's range by
     * address (the nearest below or above; best: ending at its address or
     * starting at its end): the arena walks from it to the free chunk that
     * holds the range.  A sweep over the step with the live planned blocks
     * sorted by address; a hint only saves the arena a search. */
    hint_sweep(p, mk, n, size, at, end, C);
    p->n = n;
    p->sig = lo->step_sig;
    p->stamp = lo->clock;
    p->valid = 1;
out:
    lo->stats.plan_seconds += now_s() - t0;
    free(size);
    free(at);
    free(end);
    free(addr);
    free(lives);
    free(obst);
    return p;
}

/* ------------------------------------------------------------------------ */
/* Following                                                                */
/* ------------------------------------------------------------------------ */

uintptr_t layout_match(layout_t *lo, uint64_t req, uintptr_t stream, const place_t *pl,
                       const bfc_arena_t *a)
{
    const place_record_t *R = &pl->rec[!pl->cur];
    size_t k = lo->mk;
    if (R->overflow || R->n == 0) {
        lo->state = LAYOUT_OFF;
        return 0;
    }
    place_cands_filter(&lo->cand, R, 0, k, req, stream);
    size_t keep = lo->cand.n;
    if (!keep) {
        lo->state = LAYOUT_OFF; /* the step does not repeat the last one: no plan */
        return 0;
    }
    if (keep > 1 && k + 1 < LAYOUT_MATCH_MAX) {
        lo->mk++;
        return 0;
    }
    /* The earliest candidate: the whole last step, or its first repetition. */
    layout_plan_t *p = plan_make(lo, pl, a, lo->cand.v[0], k);
    if (!p) {
        lo->state = LAYOUT_OFF;
        return 0;
    }
    lo->plan = p;
    lo->cursor = k;
    lo->state = LAYOUT_FOLLOW;
    return layout_next(lo, req, stream, pl, a);
}

void layout_stop(layout_t *lo)
{
    lo->state = LAYOUT_OFF;
    lo->plan = NULL;
    lo->diverged = 0;
    for (int i = 0; i < LAYOUT_PLANS; i++)
        lo->plans[i].valid = 0;
}

/* The blocks the last step carried into this one, and where this step freed
 * them: the guess for the blocks this step carries into the next.  Read by
 * plan_make only, so learned only at the end of a step after which the
 * layout matches (LAYOUT_MATCH); a step that starts on a kept plan, or
 * waits, skips this walk over the last step's record (layout_step_end is
 * called before place_step_end, so the record and pl->wrap are the ones
 * the next step's plan_make would have seen read here). */
static void carry_learn(layout_t *lo, const place_t *pl)
{
    const place_record_t *prev = &pl->rec[!pl->cur];
    lo->ncarry = 0;
    size_t nw = prev->n < pl->wrap_n ? prev->n : pl->wrap_n;
    if (nw > lo->carry_cap) {
        layout_carry_t *nc = realloc(lo->carry, nw * sizeof *nc);
        if (nc) {
            lo->carry = nc;
            lo->carry_cap = nw;
        }
    }
    for (size_t i = 0; i < nw && lo->ncarry < lo->carry_cap; i++) {
        const place_item_t *it = &prev->items[i];
        if (it->end == PLACE_OPEN && it->arena == 0 && !it->host && pl->wrap[i] != PLACE_OPEN)
            lo->carry[lo->ncarry++] = (layout_carry_t){it->size, pl->wrap[i]};
    }
}

void layout_step_end(layout_t *lo, const place_t *pl, int active)
{
    lo->clock++;
    if (!lo->enabled)
        return;
    /* What became of the plan this step followed. */
    if (lo->plan) {
        if (lo->diverged || lo->cursor < lo->plan->n) {
            lo->plan->valid = 0; /* left (or cut short): learn the step again */
            lo->stats.diverged_steps++;
            /* A plan made from a step recorded before the planner idled
             * (matched while want_records, which the last step end set and
             * this one has not cleared yet) is a guess: where it fails, the
             * step just recorded is matched next, without waiting.  A
             * reused plan is never one: want_records is 0 then. */
            if (!lo->want_records) {
                lo->wait = lo->backoff;
                lo->backoff = lo->backoff ? 2 * lo->backoff : 1;
                if (lo->backoff > LAYOUT_BACKOFF_MAX)
                    lo->backoff = LAYOUT_BACKOFF_MAX;
            }
        } else {
            lo->stats.followed_steps++;
            lo->backoff = 0;
        }
    }
    lo->plan = NULL;
    lo->diverged = 0;
    lo->mk = 0;
    lo->cand.n = 0;
    lo->ncarry = 0; /* learned below only if the next step may make a plan */
    lo->want_records = 0;
    if (!active) {
        layout_stop(lo);
        return;
    }
    lo->step_sig = lo->sig;
    for (int i = 0; i < LAYOUT_PLANS; i++) {
        layout_plan_t *p = &lo->plans[i];
        if (p->valid && p->sig == lo->sig) {
            p->stamp = lo->clock;
            lo->unreused = 0;
            if (!p->n) { /* not worth a plan */
                lo->state = LAYOUT_OFF;
                return;
            }
            lo->plan = p;
            lo->cursor = 0;
            lo->state = LAYOUT_FOLLOW;
            lo->stats.reused_steps++;
            lo->unreused = 0;
            return;
        }
    }
    if (lo->wait) {
        lo->wait--;
        lo->state = LAYOUT_OFF;
        return;
    }
    /* Plans made and never started on again (every step starts with other
     * live blocks, or plans are not worth it).  Meant as "plan less and
     * less often", this stops planning for good once there were three: the
     * wait set here is set again each time it runs out, so the state never
     * reaches LAYOUT_MATCH again.  Kept as it is: a retry after the
     * doubling wait cost gpt2accum's replay 7-9x its ns/op (a plan costs
     * about two passes there) and changed no held figure
     * (docs/placement.md, twentieth session). */
    if (lo->unreused > 2) {
        unsigned sh = lo->unreused - 2 < 6 ? lo->unreused - 2 : 6;
        lo->wait = (1u << sh) - 1;
        if (lo->wait) {
            lo->wait--;
            lo->state = LAYOUT_OFF;
            return;
        }
    }
    /* Matching reads the last recorded step's record (the blocks live at
     * its end, their addresses) and, for the blocks carried into the next
     * step, that step's frees of the blocks of the step before it.  If the
     * planner left this step or the one before unrecorded (idle, no
     * limit), the next step matches all the same, against the last step
     * recorded and without the carried blocks' frees (those blocks count
     * as live to the step's end, as blocks of unknown free do), and the
     * planner records again (want_records).  Waiting instead for two
     * recorded steps left BERT's replay one step without a plan after
     * each change of sequence, and that step grew its arena: held over
     * live 1.088 instead of 1.021 on sim-vmm (docs/benchmarks.md, "The
     * layout's wait for complete records"). */
    if (place_records_complete(pl))
        carry_learn(lo, pl);
    else
        lo->want_records = 1;
    lo->state = LAYOUT_MATCH;
}
