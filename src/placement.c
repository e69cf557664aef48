/* The placement planner (placement.h, docs/placement.md). */
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "placement.h"

static void curve_drop(place_t *pl);

#define PLACE_MATCH_MAX 16u               /* allocations to tell candidate offsets apart */
#define PLACE_PAIR_WINDOW 32u             /* how far ahead pair_open looks for a block's pair */
#define PLACE_RESYNC_MAX 64u              /* failed re-matches before a step is given up */
/* Times a step may leave its plan and find its sequence again: one that left
 * it more often does not repeat its source, and the rest of it is naive.  The
 * recorded traces re-match at most 16 times a step (ResNet-50's), GPT-2's
 * repeating cut steps 11; a 768-token step of GPT-2 with varying lengths
 * matched to another length's record re-matched 44 times and put 7.3 GB on
 * host where naive put none (docs/placement.md, "Rule trials on steps that
 * differ"). */
#define PLACE_REMATCH_MAX 32u
#define MiB ((uint64_t)1 << 20)

/* ------------------------------------------------------------------------ */
/* Heaps of piece indices (binary, keyed by piece end)                      */
/* ------------------------------------------------------------------------ */

typedef struct piece {
    uint64_t start, end; /* linear positions in the cycle cut at its emptiest point */
    uint64_t key;        /* farthest rule: where its relief ends (end, or a swap's bring-back) */
    uint32_t item;
} piece_t;

typedef struct heap {
    uint32_t *v;
    size_t n;
    const piece_t *pc;
    int max;             /* 1: largest key on top */
    const uint64_t *size; /* non-NULL: key is the item's size, then the end */
    int bykey;           /* 1: piece.key instead of piece.end */
} heap_t;

static int heap_above(const heap_t *h, uint32_t x, uint32_t y)
{
    if (h->size) {
        uint64_t sa = h->size[h->pc[x].item], sb = h->size[h->pc[y].item];
        if (sa != sb)
            return sa > sb;
    }
    uint64_t a = h->bykey ? h->pc[x].key : h->pc[x].end;
    uint64_t b = h->bykey ? h->pc[y].key : h->pc[y].end;
    return h->max ? a > b : a < b;
}

static void heap_push(heap_t *h, uint32_t x)
{
    size_t i = h->n++;
    while (i && heap_above(h, x, h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
}

static uint32_t heap_pop(heap_t *h)
{
    uint32_t top = h->v[0], x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && heap_above(h, h->v[c + 1], h->v[c]))
            c++;
        if (!heap_above(h, h->v[c], x))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = x;
    return top;
}

/* ------------------------------------------------------------------------ */
/* A segment tree: range add, range max (for putting items back)            */
/* ------------------------------------------------------------------------ */

typedef struct segtree {
    int64_t *mx, *add;
    size_t n;
} segtree_t;

static int seg_init(segtree_t *t, size_t n, const int64_t *load)
{
    size_t sz = 1;
    while (sz < n)
        sz <<= 1;
    t->n = sz;
    t->mx = calloc(2 * sz, sizeof *t->mx);
    t->add = calloc(2 * sz, sizeof *t->add);
    if (!t->mx || !t->add)
        return -1;
    for (size_t i = 0; i < sz; i++)
        t->mx[sz + i] = i < n ? load[i] : INT64_MIN / 2;
    for (size_t i = sz - 1; i >= 1; i--)
        t->mx[i] = t->mx[2 * i] > t->mx[2 * i + 1] ? t->mx[2 * i] : t->mx[2 * i + 1];
    return 0;
}

static void seg_fini(segtree_t *t)
{
    free(t->mx);
    free(t->add);
}

/* Adds d over [lo, hi) (node covers [nl, nr)). */
static void seg_add(segtree_t *t, size_t node, size_t nl, size_t nr, size_t lo, size_t hi,
                    int64_t d)
{
    if (hi <= nl || nr <= lo)
        return;
    if (lo <= nl && nr <= hi) {
        t->mx[node] += d;
        t->add[node] += d;
        return;
    }
    size_t mid = (nl + nr) / 2;
    seg_add(t, 2 * node, nl, mid, lo, hi, d);
    seg_add(t, 2 * node + 1, mid, nr, lo, hi, d);
    int64_t a = t->mx[2 * node], b = t->mx[2 * node + 1];
    t->mx[node] = (a > b ? a : b) + t->add[node];
}

static int64_t seg_max(const segtree_t *t, size_t node, size_t nl, size_t nr, size_t lo,
                       size_t hi)
{
    if (hi <= nl || nr <= lo)
        return INT64_MIN / 2;
    if (lo <= nl && nr <= hi)
        return t->mx[node];
    size_t mid = (nl + nr) / 2;
    int64_t a = seg_max(t, 2 * node, nl, mid, lo, hi), b = seg_max(t, 2 * node + 1, mid, nr, lo, hi);
    return (a > b ? a : b) + t->add[node];
}

/* Over the cyclic span [a, e) of len positions (e > a; past len: the part
 * that wraps to position 0; a span of len or more: all of them): adds d if
 * d != 0, else returns the maximum there. */
static int64_t seg_span(segtree_t *t, uint64_t len, uint64_t a, uint64_t e, int64_t d)
{
    if (e - a >= len) {
        a = 0;
        e = len;
    }
    int64_t m = INT64_MIN / 2;
    for (int piece = 0; piece < 2; piece++) {
        uint64_t lo = piece ? 0 : a, hi = piece ? (e > len ? e - len : 0) : (e < len ? e : len);
        if (hi <= lo)
            continue;
        if (d) {
            seg_add(t, 1, 0, t->n, lo, hi, d);
        } else {
            int64_t x = seg_max(t, 1, 0, t->n, lo, hi);
            m = x > m ? x : m;
        }
    }
    return m;
}

/* ------------------------------------------------------------------------ */
/* The solver                                                               */
/* ------------------------------------------------------------------------ */

/* The item's lifetime clamped to one cycle. */
static uint64_t item_life(const place_problem_t *p, size_t i)
{
    uint64_t life = p->end[i] > p->at[i] ? p->end[i] - p->at[i] : 1;
    return life < p->len ? life : p->len;
}

/* Adds the item's cyclic interval to a difference array of len + 1. */
static void diff_item(int64_t *d, const place_problem_t *p, size_t i, int64_t s, uint32_t t0)
{
    uint64_t len = p->len, life = item_life(p, i);
    uint64_t sa = ((uint64_t)p->at[i] + len - t0) % len, ea = sa + life;
    if (life >= len) {
        d[0] += s;
        d[len] -= s;
    } else if (ea <= len) {
        d[sa] += s;
        d[ea] -= s;
    } else {
        d[sa] += s;
        d[len] -= s;
        d[0] += s;
        d[ea - len] -= s;
    }
}

/* Adds [a, e) (step positions, a < e <= len, not crossing t0) to d. */
static void diff_range(int64_t *d, const place_problem_t *p, uint64_t a, uint64_t e, int64_t s,
                       uint32_t t0)
{
    uint64_t len = p->len, sa = (a + len - t0) % len;
    if (e <= a)
        return;
    d[sa] += s;
    d[sa + (e - a)] -= s;
}

/* Load curve at each position (cut at t0), host items left out, swapped
 * items on the device outside their host window. */
static int64_t *load_curve(const place_problem_t *p, const uint8_t *host, uint32_t t0)
{
    int64_t *d = calloc((size_t)p->len + 1, sizeof *d);
    if (!d)
        return NULL;
    for (size_t i = 0; i < p->n; i++) {
        if (!host || !host[i]) {
            diff_item(d, p, i, (int64_t)p->size[i], t0);
        } else if (host[i] == 2) {
            uint64_t r = place_swap_relief(p->size[i], p->unit);
            diff_item(d, p, i, (int64_t)(p->size[i] - r), t0);
            diff_range(d, p, p->at[i], p->out_at[i], (int64_t)r, t0);
            diff_range(d, p, p->in_at[i], p->end[i], (int64_t)r, t0);
        }
    }
    int64_t run = (int64_t)p->base;
    for (uint32_t x = 0; x < p->len; x++) {
        run += d[x];
        d[x] = run;
    }
    return d;
}

uint64_t place_peak(const place_problem_t *p, const uint8_t *host)
{
    if (p->len == 0)
        return p->base;
    int64_t *load = load_curve(p, host, 0);
    if (!load)
        return UINT64_MAX;
    int64_t mx = 0;
    for (uint32_t x = 0; x < p->len; x++)
        mx = load[x] > mx ? load[x] : mx;
    free(load);
    return (uint64_t)mx;
}

/* Puts host items back on the device where they fit at every position they
 * occupy, largest first (the sweep may have moved an item whose room a later
 * move made anyway). */
static void solve_put_back(const place_problem_t *p, uint8_t *host, uint32_t t0)
{
    int64_t *load = load_curve(p, host, t0);
    size_t nh = 0;
    uint32_t *idx = malloc(p->n * sizeof *idx);
    segtree_t t = {0};
    if (!load || !idx || seg_init(&t, p->len, load) != 0)
        goto out;
    for (size_t i = 0; i < p->n; i++)
        if (host[i] == 1)
            idx[nh++] = (uint32_t)i;
    /* Largest first: insertion sort is enough for the few host items of a
     * plan; use qsort semantics by hand to stay allocation-free. */
    for (size_t a = 1; a < nh; a++) {
        uint32_t x = idx[a];
        size_t b = a;
        while (b && p->size[idx[b - 1]] < p->size[x]) {
            idx[b] = idx[b - 1];
            b--;
        }
        idx[b] = x;
    }
    int64_t cap = (int64_t)p->cap;
    uint64_t len = p->len;
    for (size_t k = 0; k < nh; k++) {
        size_t i = idx[k];
        int64_t s = (int64_t)p->size[i];
        uint64_t sa = ((uint64_t)p->at[i] + len - t0) % len, ea = sa + item_life(p, i);
        if (seg_span(&t, len, sa, ea, 0) + s > cap)
            continue;
        host[i] = 0;
        seg_span(&t, len, sa, ea, s);
    }
out:
    seg_fini(&t);
    free(load);
    free(idx);
}

static int piece_by_start(const void *x, const void *y)
{
    const piece_t *a = x, *b = y;
    return a->start < b->start ? -1 : a->start > b->start;
}

uint64_t place_solve(const place_problem_t *p, uint8_t *host)
{
    size_t n = p->n;
    if (n == 0 || p->len == 0) {
        if (n)
            memset(host, 0, n);
        return 0;
    }
    uint64_t len = p->len;
    /* Cut the cycle where the load (everything on the device) is lowest:
     * fewest items cross the cut. */
    int64_t *load = load_curve(p, NULL, 0);
    piece_t *pc = malloc(2 * n * sizeof *pc);
    uint32_t *hv = malloc(4 * n * sizeof *hv);
    uint8_t *h = calloc(n, 1);
    if (!load || !pc || !hv || !h) {
        free(load);
        free(pc);
        free(hv);
        free(h);
        return UINT64_MAX;
    }
    uint32_t t0 = 0;
    for (uint32_t x = 1; x < len; x++)
        if (load[x] < load[t0])
            t0 = x;
    free(load);

    /* Pieces in linear positions from t0; an item crossing the cut has two
     * (the previous step's copy at the start, its own at the end), which
     * share one decision.  Items live all the time end past everything.
     * A swappable item (PLACE_RULE_SWAP, one piece) is keyed by where its
     * bring-back starts. */
    int swap = p->rule == PLACE_RULE_SWAP && p->unit && p->out_at && p->in_at;
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t life = item_life(p, i), sa = ((uint64_t)p->at[i] + len - t0) % len;
        uint64_t ea = sa + life;
        if (life >= len) {
            pc[np++] = (piece_t){0, 2 * len + 1, 2 * len + 1, (uint32_t)i};
        } else if (ea <= len) {
            uint64_t key = ea;
            if (swap && p->end[i] < len && place_swap_relief(p->size[i], p->unit) &&
                life > (uint64_t)p->head + p->tail + 1)
                key = ea - p->tail;
            pc[np++] = (piece_t){sa, ea, key, (uint32_t)i};
        } else {
            pc[np++] = (piece_t){0, ea - len, ea - len, (uint32_t)i};
            pc[np++] = (piece_t){sa, 2 * len, 2 * len, (uint32_t)i};
        }
    }
    qsort(pc, np, sizeof *pc, piece_by_start);

    /* live: device pieces by end (retired there); far: candidates by the
     * rule; back: swapped pieces by bring-back; wait: swappable candidates
     * still in their head, set aside for this position. */
    uint32_t *wait = malloc(n * sizeof *wait), *back_v = malloc(2 * n * sizeof *back_v);
    uint8_t *back = calloc(n, 1);
    if (!wait || !back_v || !back) {
        free(wait);
        free(back_v);
        free(back);
        free(pc);
        free(hv);
        free(h);
        return UINT64_MAX;
    }
    heap_t live = {hv, 0, pc, 0, NULL, 0},
           far = {hv + 2 * n, 0, pc, 1, p->rule == PLACE_RULE_LARGEST ? p->size : NULL, 1},
           ret = {back_v, 0, pc, 0, NULL, 1};
    int64_t dev = (int64_t)p->base, cap = (int64_t)p->cap;
    for (size_t k = 0; k < np; k++) {
        uint64_t x = pc[k].start;
        /* Swapped items come back (before retiring: an item back and freed
         * at the same position leaves nothing). */
        while (ret.n && pc[ret.v[0]].key <= x) {
            uint32_t q = heap_pop(&ret);
            back[pc[q].item] = 1;
            dev += (int64_t)place_swap_relief(p->size[pc[q].item], p->unit);
        }
        while (live.n && pc[live.v[0]].end <= x) {
            uint32_t q = heap_pop(&live);
            uint32_t it = pc[q].item;
            if (!h[it])
                dev -= (int64_t)p->size[it];
            else if (h[it] == 2)
                dev -= (int64_t)(p->size[it] - (back[it] ? 0 : place_swap_relief(p->size[it], p->unit)));
        }
        if (!h[pc[k].item]) {
            dev += (int64_t)p->size[pc[k].item];
            heap_push(&live, (uint32_t)k);
            heap_push(&far, (uint32_t)k);
        }
        size_t nwait = 0;
        while (dev > cap && far.n) {
            uint32_t q = heap_pop(&far);
            uint32_t it = pc[q].item;
            if (pc[q].end <= x || h[it])
                continue; /* retired, or its item already went */
            if (pc[q].key < pc[q].end) { /* swappable */
                if (pc[q].key <= x)
                    continue; /* in its tail: nothing left to relieve */
                if (x < pc[q].start + p->head) {
                    wait[nwait++] = q; /* its producer may still run */
                    continue;
                }
                h[it] = 2;
                p->out_at[it] = (uint32_t)((x + t0) % len);
                p->in_at[it] = (uint32_t)((pc[q].key + t0) % len);
                dev -= (int64_t)place_swap_relief(p->size[it], p->unit);
                heap_push(&ret, q);
                continue;
            }
            h[it] = 1;
            dev -= (int64_t)p->size[it];
        }
        while (nwait)
            heap_push(&far, wait[--nwait]);
    }
    free(wait);
    free(back_v);
    free(back);
    free(pc);
    free(hv);
    solve_put_back(p, h, t0);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += h[i] == 1 ? p->size[i] : h[i] == 2 ? place_swap_relief(p->size[i], p->unit) : 0;
    memcpy(host, h, n);
    free(h);
    return bytes;
}

/* One sweep of naive placement over the cycle from position 0: an item goes
 * to host when it arrives and does not fit under cap; prev[i] says where the
 * copy of the step before (live at the cycle's start when end[i] > len) lay.
 * Returns the bytes put on host, h[i] the choices. */
static uint64_t naive_sweep(const place_problem_t *p, uint64_t cap, const uint8_t *prev,
                            uint8_t *h, int64_t *rel)
{
    uint64_t len = p->len, bytes = 0;
    int64_t dev = (int64_t)p->base;
    memset(rel, 0, (size_t)(len + 1) * sizeof *rel);
    for (size_t i = 0; i < p->n; i++) {
        uint64_t e = p->at[i] + item_life(p, i); /* as load_curve: one copy at a time */
        if (e <= len || prev[i])
            continue;
        dev += (int64_t)p->size[i]; /* the previous step's copy, freed at e - len */
        rel[e - len] += (int64_t)p->size[i];
    }
    size_t k = 0;
    for (uint64_t x = 0; x < len; x++) {
        dev -= rel[x];
        for (; k < p->n && p->at[k] == x; k++) {
            if (dev + (int64_t)p->size[k] > (int64_t)cap) {
                h[k] = 1;
                bytes += p->size[k];
                continue;
            }
            h[k] = 0;
            dev += (int64_t)p->size[k];
            if (p->end[k] < len)
                rel[p->end[k]] += (int64_t)p->size[k];
        }
    }
    return bytes;
}

uint64_t place_naive(const place_problem_t *p, uint64_t cap)
{
    if (p->n == 0 || p->len == 0)
        return 0;
    uint8_t *prev = calloc(p->n, 1), *h = calloc(p->n, 1);
    int64_t *rel = malloc(((size_t)p->len + 1) * sizeof *rel);
    uint64_t bytes = UINT64_MAX;
    if (prev && h && rel) {
        /* The first sweep assumes the previous step's copies on the device;
         * the second takes them where the first put this step's. */
        naive_sweep(p, cap, prev, h, rel);
        memcpy(prev, h, p->n);
        bytes = naive_sweep(p, cap, prev, h, rel);
    }
    free(prev);
    free(h);
    free(rel);
    return bytes;
}

/* ------------------------------------------------------------------------ */
/* Records                                                                  */
/* ------------------------------------------------------------------------ */

static void seqmap_reset(place_seqmap_t *m)
{
    m->n = 0;
    m->seq0 = 0;
}

static void seqmap_set(place_seqmap_t *m, uint64_t seq, uint32_t idx)
{
    if (m->n == 0)
        m->seq0 = seq;
    if (seq < m->seq0 || seq - m->seq0 >= PLACE_MAX_ITEMS * 4)
        return;
    size_t at = (size_t)(seq - m->seq0);
    if (at >= m->cap) {
        size_t cap = m->cap ? m->cap : 1024;
        while (cap <= at)
            cap *= 2;
        uint32_t *nm = realloc(m->map, cap * sizeof *nm);
        if (!nm)
            return;
        m->map = nm;
        m->cap = cap;
    }
    while (m->n < at)
        m->map[m->n++] = PLACE_OPEN;
    m->map[at] = idx;
    if (m->n == at)
        m->n++;
}

static uint32_t seqmap_get(const place_seqmap_t *m, uint64_t seq)
{
    if (m->n == 0 || seq < m->seq0 || seq - m->seq0 >= m->n)
        return PLACE_OPEN;
    return m->map[seq - m->seq0];
}

static void record_reset(place_record_t *r)
{
    r->n = 0;
    r->nevents = 0;
    r->overflow = 0;
    r->limit_changed = 0;
    r->peak_total = 0;
    r->dev_start = 0;
    seqmap_reset(&r->seqs[0]);
    seqmap_reset(&r->seqs[1]);
}

/* A record too long to plan from keeps no items (a process that never
 * ends a step holds at most one step's worth of metadata, transiently). */
static void record_drop(place_record_t *r)
{
    free(r->items);
    r->items = NULL;
    r->n = r->cap = 0;
    for (int a = 0; a < 2; a++) {
        free(r->seqs[a].map);
        r->seqs[a].map = NULL;
        r->seqs[a].n = r->seqs[a].cap = 0;
    }
}

static void record_free(place_record_t *r)
{
    free(r->items);
    free(r->seqs[0].map);
    free(r->seqs[1].map);
    memset(r, 0, sizeof *r);
}

static double clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes a plan keeps free under `limit` for fragmentation: 1/64 of the
 * limit in force when it is used (a limit changed between two steps, as
 * a cut usually is, does not plan the first step under it with the old
 * limit's margin), at least 4 MiB. */
static uint64_t margin_of(uint64_t limit)
{
    uint64_t m = limit / 64;
    return m > 4 * MiB ? m : 4 * MiB;
}

void place_init(place_t *pl, int plans, int rule)
{
    memset(pl, 0, sizeof *pl);
    pl->plans = plans;
    pl->rule = rule >= 0 && rule < PLACE_NRULES ? rule : PLACE_RULE_FARTHEST;
    pl->margin = 4 * MiB;
    pl->src = -1;
    pl->recorded_before = 1; /* the first step's end sees complete records */
}

void place_set_auto(place_t *pl, unsigned rules)
{
    rules &= (1u << PLACE_NRULES) - 1;
    if (!pl->swap_unit)
        rules &= ~(1u << PLACE_RULE_SWAP);
    pl->auto_rule = rules != 0;
    pl->auto_rules = rules;
    pl->trial_step = 0;
    pl->trial_limit = 0;
    pl->trial_skipped = 0;
    pl->trial_fresh = 0;
    pl->decided = 0;
}

void place_set_swap(place_t *pl, uint64_t unit, uint32_t head, uint32_t tail)
{
    pl->swap_unit = unit;
    pl->swap_head = head ? head : 1;
    pl->swap_tail = tail;
}

/* The first rule of the trials at or after r, PLACE_NRULES if none. */
static int trial_rule(const place_t *pl, int r)
{
    while (r < PLACE_NRULES && !(pl->auto_rules & (1u << r)))
        r++;
    return r;
}

/* A rule whose first counted step took this many times the mean of a
 * rule already timed is not timed further.  It is above the step-to-step
 * spread of one rule's settled steps on the H100s here (GPT-2 at 50%:
 * 338-409 ms, 1.2x), and a trial step of a losing rule costs what it
 * loses: GPT-2's swap trial at 50%, 469-501 ms against largest's 338-342,
 * then 739-1069 ms in its last step (docs/placement.md, "The trials"). */
#define PLACE_TRIAL_ABANDON 1.3

/* The rule of the lowest mean among those with counted steps but `except`
 * (-1: none excepted), -1 if none.  A rule left out of the trials
 * (trial_skipped) or outside auto_rules has no counted step. */
static int trial_lowest(const place_t *pl, int except)
{
    int best = -1;
    for (int r = 0; r < PLACE_NRULES; r++)
        if (r != except && pl->trial_n[r] && (best < 0 || pl->trial_mean[r] < pl->trial_mean[best]))
            best = r;
    return best;
}

/* The end of the trials: the rule of the lowest mean stays. */
static void auto_choose(place_t *pl)
{
    int best = trial_lowest(pl, -1);
    pl->rule = best >= 0 ? best : trial_rule(pl, 0);
    pl->decided = 1;
    pl->trial_fresh = 0;
}

/* The rule after the one in force in the trials, or the choice. */
static void auto_next(place_t *pl)
{
    int next = trial_rule(pl, pl->rule + 1);
    if (next < PLACE_NRULES) {
        pl->rule = next;
        pl->trial_fresh = 1;
    } else {
        auto_choose(pl);
    }
}

/* One planned step's time under the rule in force; moves through the
 * trials (see place_t): PLACE_TRIAL_STEPS steps per rule.  `alike`: the
 * step was planned from the step before it, not from a kept variant (a
 * few re-matches allowed: the recorded traces of jobs whose steps repeat
 * have steps that leave and re-find their plan 2-16 times). */
static void auto_note_step(place_t *pl, const place_env_t *env, int alike)
{
    if (env->limit != pl->trial_limit) {
        pl->trial_limit = env->limit;
        pl->trial_step = 0;
        pl->decided = 0;
        pl->rule = trial_rule(pl, 0);
        pl->trial_skipped = 0;
        pl->trial_fresh = 1;
        for (int r = 0; r < PLACE_NRULES; r++) {
            pl->trial_mean[r] = 0;
            pl->trial_n[r] = 0;
        }
    }
    if (pl->decided || pl->state != PLACE_ST_PLAN || !(pl->step_placed || pl->step_swapped))
        return;
    /* Steps that differ (shapes that vary from step to step: a plan from a
     * kept variant) take the time of their own work,
     * not of the rule in force: the trials end on the first rule, as if
     * they had not run.  GPT-2 with sequence lengths drawn per step from
     * three buckets, 50% cut on an H100: its trial steps compared the
     * rules on different lengths, and a swap trial step put 7.0 GB on host
     * where naive put none, 510 ms against 166 (docs/placement.md, "Rule
     * trials on steps that differ"). */
    if (!alike && pl->trial_step > 0) {
        pl->rule = trial_rule(pl, 0);
        pl->decided = 1;
        pl->trial_fresh = 0;
        pl->stats.trials_unlike++;
        return;
    }
    unsigned t = pl->trial_step++;
    /* Step 0 is the step the cut arrived in (or the first plan).  Of each
     * rule's steps the first does not count: a step's time, measured
     * between step ends on the CPU, also holds the GPU work of the step
     * before it still queued at its start (the CPU runs ahead), which for a
     * rule's first step is the previous rule's.  The mean of the others
     * counts: a rule's cost is the time of the steps it would run.  Its
     * fastest step was the measure until a rule whose plans alternated
     * (GPT-2 at 50% on an H100, farthest first: 1.65 GB on host, 339 ms,
     * and 0.61 GB, 455-512 ms, by the step's variant) won by its fast
     * step over one that ran 337-348 ms every step (docs/placement.md,
     * "The trials").  One step alone was misjudged before (ResNet-50's
     * swap, 215 ms in its second step and 180-190 ms after, lost to
     * farthest's 200 ms): that is why two steps count. */
    if (t == 0)
        return;
    unsigned k = (t - 1) % PLACE_TRIAL_STEPS;
    if (k == 0)
        return;
    unsigned n = ++pl->trial_n[pl->rule];
    pl->trial_mean[pl->rule] += (env->step_seconds - pl->trial_mean[pl->rule]) / n;
    int other = trial_lowest(pl, pl->rule);
    if (k == 1 && other >= 0 && env->step_seconds > PLACE_TRIAL_ABANDON * pl->trial_mean[other])
        pl->trial_step += PLACE_TRIAL_STEPS - 2; /* the next rule's first step next */
    else if (k != PLACE_TRIAL_STEPS - 1)
        return;
    auto_next(pl);
}

void place_fini(place_t *pl)
{
    record_free(&pl->rec[0]);
    record_free(&pl->rec[1]);
    for (int v = 0; v < PLACE_VARIANTS; v++)
        record_free(&pl->var[v]);
    free(pl->plan);
    curve_drop(pl);
    free(pl->wrap);
    free(pl->cand.v);
    free(pl->moves);
    free(pl->cur_of);
    memset(pl, 0, sizeof *pl);
}

static int item_matches(const place_item_t *it, uint64_t req, uintptr_t stream)
{
    return it->req == req && it->stream == stream;
}

/* The record this step's plan comes from: the last step, or a kept variant. */
static const place_record_t *src_of(const place_t *pl)
{
    return pl->src >= 0 ? &pl->var[pl->src] : &pl->rec[!pl->cur];
}

/* Whether a step repeating r needs no plan: its peak fits under `limit`
 * with the margin. */
static int fits(const place_t *pl, const place_record_t *r, uint64_t limit)
{
    return r->peak_total + margin_of(limit) + pl->extra <= limit;
}

/* ------------------------------------------------------------------------ */
/* Planning a step                                                          */
/* ------------------------------------------------------------------------ */

static int plan_moves(place_t *pl, const place_problem_t *p, const uint8_t *host);

/* a (of *cap elements of elem bytes) made to hold at least n: a itself if
 * it does, else the array reallocated (*cap = n), or NULL if there is no
 * memory (a and *cap unchanged; a NULL a with n 0 also comes back NULL). */
static void *grow_to(void *a, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap)
        return a;
    void *q = realloc(a, n * elem);
    if (q)
        *cap = n;
    return q;
}

/* The plan's load curve (place_t.curve). */
struct place_curve {
    segtree_t t;              /* built at the step's first skip or extra
                                 block (curve_tree; until then the curve is
                                 the plan's: no decision changes) */
    int64_t *load;            /* the plan's curve, until t is built */
    int64_t cap;              /* the plan's cap: the limit less the margins */
    int64_t extra;            /* bytes of blocks the plan does not know in it
                                 (without them it stays under cap: the plan's
                                 curve, less skips, plus keeps that fit) */
    uint32_t len;             /* positions of the cycle */
    uint32_t *at;             /* at[k], end[k]: plan item k's positions */
    uint64_t *end;
    uint32_t *gone;           /* gone[k]: skipped, out of the curve from there
                                 (CURVE_IN: in the curve as planned) */
};
#define CURVE_IN UINT32_MAX

static void curve_drop(place_t *pl)
{
    struct place_curve *c = pl->curve;
    if (!c)
        return;
    seg_fini(&c->t);
    free(c->load);
    free(c->at);
    free(c->end);
    free(c->gone);
    free(c);
    pl->curve = NULL;
}

static int curve_make(place_t *pl, const place_problem_t *p, const uint8_t *host)
{
    curve_drop(pl);
    struct place_curve *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    pl->curve = c;
    c->load = load_curve(p, host, 0);
    c->at = malloc(p->n * sizeof *c->at);
    c->end = malloc(p->n * sizeof *c->end);
    c->gone = malloc(p->n * sizeof *c->gone);
    if (!c->load || !c->at || !c->end || !c->gone) {
        curve_drop(pl);
        return -1;
    }
    c->cap = (int64_t)p->cap;
    c->len = p->len;
    for (size_t k = 0; k < p->n; k++) {
        c->at[k] = p->at[k];
        c->end[k] = p->at[k] + item_life(p, k);
        c->gone[k] = CURVE_IN;
    }
    return 0;
}

/* The curve's tree, built at the step's first difference from its plan;
 * NULL without a curve (or memory: the curve is then dropped). */
static struct place_curve *curve_tree(place_t *pl)
{
    struct place_curve *c = pl->curve;
    if (c && c->load) {
        if (seg_init(&c->t, c->len, c->load) != 0) {
            curve_drop(pl);
            return NULL;
        }
        free(c->load);
        c->load = NULL;
    }
    return pl->curve;
}

/* The curve's position of the allocation the step is at (the plan item it
 * should repeat next), c->len past the plan's end. */
static uint32_t curve_now(const place_t *pl, const struct place_curve *c)
{
    size_t k = pl->pos > pl->offset ? pl->pos - pl->offset : 0;
    return k < pl->plan_n ? c->at[k] : c->len;
}

/* A block the plan does not know (the step left the sequence) was
 * allocated on the device (size > 0) or freed (size < 0): it weighs on the
 * curve from now to the cycle's end, as the plan cannot say when it goes,
 * and its free takes it out from there. */
static void curve_extra(place_t *pl, int64_t size)
{
    struct place_curve *c = curve_tree(pl);
    if (!c)
        return;
    uint32_t now = curve_now(pl, c);
    if (now < c->len)
        seg_span(&c->t, c->len, now, c->len, size);
    c->extra += size;
}

/* The step re-matched its plan at plan item `to`, skipping the items from
 * `from`: those planned on the device, not allocated (earlier, out of
 * order) and live from here on in the plan leave the curve; one allocated
 * after all comes back into it (plan_at). */
static void curve_skip(place_t *pl, size_t from, size_t to)
{
    if (to >= pl->plan_n)
        return;
    struct place_curve *c = curve_tree(pl);
    if (!c)
        return;
    uint64_t now = c->at[to];
    const place_item_t *items = src_of(pl)->items + pl->offset;
    for (size_t k = from; k < to; k++) {
        if (pl->plan[k] == 0 && c->gone[k] == CURVE_IN && c->end[k] > now &&
            pl->cur_of[k] == PLACE_OPEN) { /* not allocated earlier, out of order */
            seg_span(&c->t, c->len, now, c->end[k], -(int64_t)items[k].size);
            c->gone[k] = (uint32_t)now;
        }
    }
}

/* Plans the current step as a repetition of the last one from item `off`. */
static int plan_make(place_t *pl, size_t off, const place_env_t *env)
{
    const place_record_t *last = src_of(pl);
    size_t n = last->n - off;
    uint32_t at0 = last->items[off].at;
    uint32_t len = last->nevents - at0;
    uint64_t *size = malloc(n * sizeof *size), *end = malloc(n * sizeof *end);
    uint32_t *at = malloc(n * sizeof *at);
    uint8_t *np = grow_to(pl->plan, &pl->plan_cap, n, 1);
    if (np)
        pl->plan = np;
    if (!size || !end || !at || n > pl->plan_cap) {
        free(size);
        free(end);
        free(at);
        return -1;
    }
    /* Blocks of the last step live at its end are part of the cycle (their
     * copies wrap into this step); everything else on the device is the
     * base. */
    uint64_t carried = 0;
    for (size_t k = 0; k < n; k++) {
        const place_item_t *it = &last->items[off + k];
        size[k] = it->size;
        at[k] = it->at - at0;
        /* Where the next step frees it: learned from the step after its
         * last copy's, else seen already in this step (its copy of the last
         * step freed before the plan: gradients let go at the top of the
         * loop). */
        uint32_t wrap = it->wrap;
        if (wrap == PLACE_OPEN && pl->src < 0 && off + k < pl->wrap_n)
            wrap = pl->wrap[off + k];
        if (it->end != PLACE_OPEN) {
            end[k] = it->end - at0;
        } else if (wrap != PLACE_OPEN) {
            /* Freed in the next step where its last copy was: the copy
             * live now is this item's, wrapping into the cycle. */
            end[k] = (uint64_t)len + wrap;
            carried += it->dev_end;
        } else {
            /* Not known to be freed (optimizer state, or not learned yet):
             * the block live now stays where it is, in the base, and a new
             * copy, if the step makes one, lives to the cycle's end. */
            end[k] = len;
        }
    }
    uint64_t dev_start = pl->rec[pl->cur].dev_start;
    pl->margin = margin_of(env->limit);
    uint64_t margin = pl->margin + pl->extra;
    int swap = pl->rule == PLACE_RULE_SWAP && pl->swap_unit;
    uint32_t *out_at = swap ? malloc(n * sizeof *out_at) : NULL;
    uint32_t *in_at = swap ? malloc(n * sizeof *in_at) : NULL;
    place_problem_t p = {.n = n, .size = size, .at = at, .end = end, .len = len,
                         .base = dev_start > carried ? dev_start - carried : 0,
                         .cap = env->limit > margin ? env->limit - margin : 0,
                         .rule = pl->rule, .unit = pl->swap_unit, .head = pl->swap_head,
                         .tail = pl->swap_tail, .out_at = out_at, .in_at = in_at};
    if (swap && (!out_at || !in_at))
        p.rule = PLACE_RULE_FARTHEST; /* no memory for swaps: whole blocks */
    uint64_t bytes = place_solve(&p, pl->plan);
    if (pl->auto_rule && !pl->decided && pl->trial_fresh) {
        pl->trial_fresh = 0;
        /* Swap's first plan in the trials swaps no block: it is a
         * whole-block plan by another heuristic, not what swap is timed
         * for, and on the H100 its trial steps were GPT-2's slowest at 50%
         * (0.61 GB on host where largest put 1.65: 469-490 ms, then a
         * fallback of the logits, 732-1005 ms, against 335-358; no swap in
         * any step; docs/placement.md, "The trials").  The next rule, or the
         * choice, takes this step. */
        if (pl->rule == PLACE_RULE_SWAP && bytes != UINT64_MAX &&
            !memchr(pl->plan, 2, n)) { /* host[i] == 2: swapped */
            pl->trial_skipped |= 1u << PLACE_RULE_SWAP;
            auto_next(pl);
            pl->trial_fresh = 0;
            p.rule = pl->rule;
            bytes = place_solve(&p, pl->plan);
        }
    }
    /* Farthest first is the rule of fewest bytes: where naive placement
     * would put no more on host than the plan (blocks whose sizes the plan
     * cannot match to the excess, or a margin raised by fallbacks), the
     * step is left to naive placement, which also follows what the step
     * really does.  Not while the rules are timed (place_set_auto): there
     * the measured step time chooses, and naive is not among the rules. */
    int naive_wins = 0;
    if (bytes != UINT64_MAX && p.rule == PLACE_RULE_FARTHEST && !pl->auto_rule && bytes > 0) {
        uint64_t naive = place_naive(&p, env->limit);
        naive_wins = naive != UINT64_MAX && naive <= bytes;
    }
    int ok = !naive_wins && bytes != UINT64_MAX && plan_moves(pl, &p, pl->plan) == 0 &&
             curve_make(pl, &p, pl->plan) == 0;
    free(size);
    free(end);
    free(at);
    free(out_at);
    free(in_at);
    if (naive_wins) {
        pl->stats.naive_chosen++;
        pl->naive_chosen = 1;
        return 1;
    }
    uint32_t *nc = ok ? grow_to(pl->cur_of, &pl->cur_of_cap, n, sizeof *nc) : NULL;
    ok = nc != NULL;
    if (nc)
        pl->cur_of = nc;
    if (!ok)
        return -1;
    for (size_t k = 0; k < n; k++)
        pl->cur_of[k] = PLACE_OPEN;
    pl->plan_n = n;
    pl->stats.plans++;
    pl->stats.last_plan_host_bytes = bytes;
    return 0;
}

static int move_by_trigger(const void *x, const void *y)
{
    const place_move_t *a = x, *b = y;
    if (a->trigger != b->trigger)
        return a->trigger < b->trigger ? -1 : 1;
    return (int)b->to_host - (int)a->to_host; /* out first: room for what comes back */
}

/* The first item at or after step position pos (p->at increasing), n if none. */
static uint32_t item_at_or_after(const place_problem_t *p, uint32_t pos)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->at[mid] < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

/* The moves of the swapped items (host[i] == 2), by trigger: out before
 * the allocation at out_at, back before the first allocation at or after
 * in_at (none: the block stays on host until freed). */
static int plan_moves(place_t *pl, const place_problem_t *p, const uint8_t *host)
{
    pl->nmoves = 0;
    pl->due_lo = pl->due_hi = 0;
    pl->stats.last_plan_swap_bytes = 0;
    if (p->rule != PLACE_RULE_SWAP)
        return 0;
    size_t want = 0;
    for (size_t i = 0; i < p->n; i++)
        want += host[i] == 2 ? 2 : 0;
    place_move_t *nm = want ? grow_to(pl->moves, &pl->moves_cap, want, sizeof *nm) : pl->moves;
    if (want && !nm)
        return -1;
    pl->moves = nm;
    for (size_t i = 0; i < p->n; i++) {
        if (host[i] != 2)
            continue;
        pl->stats.last_plan_swap_bytes += place_swap_relief(p->size[i], p->unit);
        uint32_t t = item_at_or_after(p, p->out_at[i]);
        if (t < p->n)
            pl->moves[pl->nmoves++] = (place_move_t){t, (uint32_t)i, 1};
        t = item_at_or_after(p, p->in_at[i]);
        if (t < p->n && p->at[t] < p->end[i])
            pl->moves[pl->nmoves++] = (place_move_t){t, (uint32_t)i, 0};
    }
    qsort(pl->moves, pl->nmoves, sizeof *pl->moves, move_by_trigger);
    return 0;
}

void place_cands_filter(place_cands_t *c, const place_record_t *last, size_t from, size_t k,
                        uint64_t req, uintptr_t stream)
{
    size_t keep = 0;
    if (k == 0) {
        for (size_t i = from; i < last->n; i++) {
            if (!item_matches(&last->items[i], req, stream))
                continue;
            if (keep == c->cap) {
                size_t cap = c->cap ? 2 * c->cap : 64;
                size_t *nv = realloc(c->v, cap * sizeof *nv);
                if (!nv)
                    break;
                c->v = nv;
                c->cap = cap;
            }
            c->v[keep++] = i;
        }
    } else {
        for (size_t j = 0; j < c->n; j++) {
            size_t i = c->v[j] + k;
            if (i < last->n && item_matches(&last->items[i], req, stream))
                c->v[keep++] = c->v[j];
        }
    }
    c->n = keep;
}

/* Matching (at the step's start, or again after the step left the last
 * one's sequence).  While several candidates are left the earliest is
 * taken: the step repeats the whole last step (the steady state), or the
 * first of several repetitions in it (micro-batches), or its first layer
 * where layers repeat; a first step's record that also holds building the
 * model rarely has the step's own first allocations in that part.  *at
 * gets that candidate's item for the current allocation.  Returns 1 once
 * one candidate is left or PLACE_MATCH_MAX allocations have matched, 0
 * while several are left, -1 when none is. */
static int match_step(place_t *pl, size_t from, uint64_t req, uintptr_t stream, size_t *at)
{
    place_cands_filter(&pl->cand, src_of(pl), from, pl->mk, req, stream);
    if (pl->cand.n == 0)
        return -1;
    *at = pl->cand.v[0] + pl->mk;
    if (pl->cand.n > 1 && pl->mk + 1 < PLACE_MATCH_MAX) {
        pl->mk++;
        return 0;
    }
    return 1;
}

static unsigned plan_at(place_t *pl, size_t i)
{
    pl->pos = i + 1;
    pl->due_lo = pl->due_hi = 0;
    if (i < pl->offset || i - pl->offset >= pl->plan_n)
        return PLACE_DEVICE;
    uint32_t k = (uint32_t)(i - pl->offset);
    if (pl->nmoves) { /* the moves triggered by item k */
        size_t lo = 0, hi = pl->nmoves;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (pl->moves[mid].trigger < k)
                lo = mid + 1;
            else
                hi = mid;
        }
        pl->due_lo = pl->due_hi = lo;
        while (pl->due_hi < pl->nmoves && pl->moves[pl->due_hi].trigger == k)
            pl->due_hi++;
    }
    /* The tree exists once the step skipped or added blocks (curve_tree). */
    struct place_curve *c = pl->curve && !pl->curve->load ? pl->curve : NULL;
    int64_t s = (int64_t)src_of(pl)->items[i].size;
    if (c && c->gone[k] != CURVE_IN) { /* skipped, then allocated after all */
        seg_span(&c->t, c->len, c->gone[k], c->end[k], s);
        c->gone[k] = CURVE_IN;
    }
    if (pl->plan[k] == 0) {
        /* Planned for the device: to host where the curve, with the blocks
         * of the step the plan does not know, passes the cap somewhere in
         * its lifetime (extra layers, a variant's added part): then the
         * step's later blocks, not this one, would fall back, with no
         * choice of which. */
        if (c && c->extra > 0 && seg_span(&c->t, c->len, c->at[k], c->end[k], 0) > c->cap) {
            seg_span(&c->t, c->len, c->at[k], c->end[k], -s);
            pl->stats.heavier_allocs++;
            pl->stats.heavier_bytes += (uint64_t)s;
            pl->step_heavier += (uint64_t)s;
            return PLACE_HOST;
        }
        return PLACE_DEVICE;
    }
    if (pl->plan[k] != 1)
        return PLACE_DEVICE;
    /* Planned for host: kept on the device where the curve leaves room for
     * it over its whole lifetime (the step skipped blocks of the plan:
     * dropped layers, a variant's missing part). */
    if (c && seg_span(&c->t, c->len, c->at[k], c->end[k], 0) + s <= c->cap) {
        seg_span(&c->t, c->len, c->at[k], c->end[k], s);
        pl->stats.lighter_allocs++;
        pl->stats.lighter_bytes += (uint64_t)s;
        pl->step_lighter += (uint64_t)s;
        return PLACE_DEVICE;
    }
    return PLACE_HOST;
}

int place_next_move(place_t *pl, uintptr_t *addr, uint64_t *size, int *to_host)
{
    const place_record_t *r = &pl->rec[pl->cur];
    while (pl->due_lo < pl->due_hi) {
        const place_move_t *mv = &pl->moves[pl->due_lo++];
        uint32_t c = mv->item < pl->plan_n ? pl->cur_of[mv->item] : PLACE_OPEN;
        if (c == PLACE_OPEN || c >= r->n || r->items[c].end != PLACE_OPEN ||
            r->items[c].arena != 0) {
            pl->stats.swap_skipped++; /* not allocated by the plan, or freed already */
            continue;
        }
        *addr = r->items[c].addr;
        *size = r->items[c].size;
        *to_host = mv->to_host;
        return 1;
    }
    return 0;
}

void place_move_done(place_t *pl, int to_host, uint64_t bytes)
{
    if (!bytes) {
        pl->stats.swap_skipped++;
        return;
    }
    if (to_host) {
        pl->stats.swap_out_bytes += bytes;
        pl->step_swapped += bytes;
    } else {
        pl->stats.swap_in_bytes += bytes;
    }
}

int place_leave_step(place_t *pl)
{
    if (!place_deciding(pl))
        return 0;
    pl->state = PLACE_ST_DIVERGED;
    return 1;
}

/* Pairs the blocks live at the ends of two steps whose sequences differ
 * (gradients, optimizer state: the same whatever the shapes), in order, by
 * size and stream: to(r's item, from's item) for each pair; a block with no
 * match among the next PLACE_PAIR_WINDOW of from's (among its first from_n
 * items) is left unpaired (a step's record may also hold building the
 * model). */
static void pair_open(place_record_t *r, const place_record_t *from, size_t from_n,
                      void (*to)(place_item_t *, size_t, const void *), const void *ctx)
{
    size_t nopen = 0;
    for (size_t i = 0; i < from_n; i++)
        nopen += from->items[i].end == PLACE_OPEN;
    uint32_t *open = nopen ? malloc(nopen * sizeof *open) : NULL;
    if (!open)
        return;
    nopen = 0;
    for (size_t i = 0; i < from_n; i++)
        if (from->items[i].end == PLACE_OPEN)
            open[nopen++] = (uint32_t)i;
    size_t j = 0;
    for (size_t k = 0; k < r->n && j < nopen; k++) {
        place_item_t *it = &r->items[k];
        if (it->end != PLACE_OPEN)
            continue;
        size_t i = j;
        while (i < nopen && i - j < PLACE_PAIR_WINDOW &&
               !item_matches(&from->items[open[i]], it->req, it->stream))
            i++;
        if (i < nopen && i - j < PLACE_PAIR_WINDOW) {
            to(it, open[i], ctx);
            j = i + 1;
        }
    }
    free(open);
}

static void wrap_learned(place_item_t *it, size_t j, const void *ctx)
{
    it->wrap = ((const uint32_t *)ctx)[j];
}

static void wrap_of_last(place_item_t *it, size_t j, const void *ctx)
{
    if (it->wrap == PLACE_OPEN)
        it->wrap = ((const place_record_t *)ctx)->items[j].wrap;
}

/* Whether a kept variant would not fit under the limit (a step repeating it
 * needs a plan). */
static int variant_unfit(const place_t *pl, const place_env_t *env)
{
    for (int v = 0; v < PLACE_VARIANTS; v++)
        if (pl->var_used[v] && !fits(pl, &pl->var[v], env->limit))
            return 1;
    return 0;
}

/* The step's allocations so far (the last pl->mk of its record) and the
 * one being placed repeat none of the last step's: the most recently used
 * kept variant they repeat becomes the plan's source (pl->src, with the
 * candidates narrowed over it as far as pl->mk).  Returns 1 if one does. */
static int variant_switch(place_t *pl, uint64_t req, uintptr_t stream)
{
    const place_record_t *r = &pl->rec[pl->cur];
    if (r->n < pl->mk)
        return 0;
    size_t k0 = r->n - pl->mk;
    unsigned tried = 0;
    for (;;) {
        int v = -1;
        for (int i = 0; i < PLACE_VARIANTS; i++)
            if (pl->var_used[i] && i != pl->src && !(tried & 1u << i) &&
                (v < 0 || pl->var_used[i] > pl->var_used[v]))
                v = i;
        if (v < 0)
            return 0;
        tried |= 1u << v;
        const place_record_t *V = &pl->var[v];
        pl->cand.n = 0;
        for (size_t j = 0; j <= pl->mk; j++) {
            const place_item_t *it = j < pl->mk ? &r->items[k0 + j] : NULL;
            place_cands_filter(&pl->cand, V, 0, j, it ? it->req : req, it ? it->stream : stream);
            if (pl->cand.n == 0)
                break;
        }
        if (pl->cand.n) {
            pl->src = v;
            pl->var_used[v] = ++pl->var_clock;
            /* Where this step frees the blocks the last step left live:
             * the variant's own guess, else the last step's (paired). */
            const place_record_t *last = &pl->rec[!pl->cur];
            pair_open(&pl->var[v], last, last->n, wrap_of_last, last);
            return 1;
        }
    }
}

unsigned place_decide_step(place_t *pl, uint64_t req, uintptr_t stream, const place_env_t *env)
{
    const place_record_t *last = src_of(pl);
    size_t at;
    int m;
    int fit;
    switch (pl->state) {
    case PLACE_ST_MATCH:
        fit = fits(pl, last, env->limit);
        if (fit && (pl->src >= 0 || !variant_unfit(pl, env))) {
            pl->state = PLACE_ST_LEARN; /* the last step fitted: no plan needed */
            return PLACE_NONE;
        }
        m = match_step(pl, 0, req, stream, &at);
        if (m < 0 && variant_switch(pl, req, stream)) {
            /* An earlier variant of the step (varying shapes) */
            last = src_of(pl);
            fit = fits(pl, last, env->limit);
            pl->plan_n = 0;
            if (fit) {
                pl->state = PLACE_ST_LEARN;
                return PLACE_NONE;
            }
            m = match_step(pl, 0, req, stream, &at);
        }
        if (m < 0) {
            pl->state = PLACE_ST_DIVERGED;
            return PLACE_NONE;
        }
        if (fit) { /* the last step fitted; matched while a variant might come */
            if (m)
                pl->state = PLACE_ST_LEARN;
            return PLACE_NONE;
        }
        /* Planned from the latest candidate, again if it changes. */
        if (!pl->plan_n || at - (m ? pl->mk : pl->mk - 1) != pl->offset) {
            pl->offset = at - (m ? pl->mk : pl->mk - 1);
            int made = plan_make(pl, pl->offset, env);
            if (made != 0) {
                /* 1: naive is no worse for this step; it only records. */
                pl->state = made > 0 ? PLACE_ST_LEARN : PLACE_ST_DIVERGED;
                return PLACE_NONE;
            }
        }
        if (m)
            pl->state = PLACE_ST_PLAN;
        return plan_at(pl, at);
    case PLACE_ST_PLAN:
        if (pl->pos < last->n && item_matches(&last->items[pl->pos], req, stream))
            return plan_at(pl, pl->pos);
        /* The step left the sequence (an extra or missing allocation):
         * naive until it is found again further on. */
        pl->state = PLACE_ST_RESYNC;
        pl->div_pos = pl->pos;
        pl->mk = 0;
        if (++pl->resyncs > PLACE_REMATCH_MAX) {
            pl->state = PLACE_ST_DIVERGED;
            return PLACE_NONE;
        }
        /* fall through */
    case PLACE_ST_RESYNC:
        m = match_step(pl, pl->offset, req, stream, &at);
        if (m < 0 && pl->mk) {
            pl->mk = 0; /* this allocation may start a match of its own */
            m = match_step(pl, pl->offset, req, stream, &at);
        }
        if (m < 0 && ++pl->restarts > PLACE_RESYNC_MAX)
            pl->state = PLACE_ST_DIVERGED; /* bounded work per step */
        if (m <= 0)
            return PLACE_NONE;
        pl->state = PLACE_ST_PLAN;
        if (at - pl->mk > pl->div_pos && pl->div_pos >= pl->offset)
            curve_skip(pl, pl->div_pos - pl->offset, at - pl->mk - pl->offset);
        return plan_at(pl, at);
    default:
        return PLACE_NONE;
    }
}

/* ------------------------------------------------------------------------ */
/* Recording                                                                */
/* ------------------------------------------------------------------------ */

void place_note_short(place_t *pl, uint64_t size, uint64_t dev_in_use, uint64_t limit)
{
    uint64_t lack = dev_in_use + size > limit ? dev_in_use + size - limit : margin_of(limit);
    pl->step_short += lack < size ? lack : size;
}

/* The step is too long to record (PLACE_MAX_ITEMS allocations, or no
 * memory for more): what it recorded goes now (unusable as a plan), and the
 * rest of the step is idle (naive, nothing recorded: the inline notes keep
 * the totals only), so a job that never ends a step pays the record's cost
 * for its first PLACE_MAX_ITEMS allocations only.  The last step recorded
 * stays the source; the next step is recorded. */
static void record_overflow(place_t *pl, place_record_t *r)
{
    record_drop(r);
    r->overflow = 1;
    r->nevents++;
    pl->idle = 1; /* the rest of this step; the next is recorded */
    pl->state = PLACE_ST_LEARN;
    pl->nmoves = 0;
    pl->due_lo = pl->due_hi = 0;
}

void place_note_alloc_slow(place_t *pl, uint64_t req, uint64_t size, uintptr_t stream, int arena,
                           uint64_t seq, uintptr_t addr, int on_host, unsigned decided)
{
    place_record_t *r = &pl->rec[pl->cur];
    pl->live_total += size;
    if (pl->live_total > r->peak_total)
        r->peak_total = pl->live_total;
    if (decided == PLACE_HOST && on_host) {
        pl->stats.planned_host_allocs++;
        pl->stats.planned_host_bytes += size;
        pl->step_placed += size;
    } else if (decided == PLACE_DEVICE && on_host) {
        pl->stats.fallback_allocs++;
        pl->stats.fallback_bytes += size;
        pl->step_fallback += size;
    } else if (on_host) {
        pl->step_naive += size;
    }
    if (r->overflow || r->n == PLACE_MAX_ITEMS) {
        record_overflow(pl, r);
        return;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        place_item_t *ni = realloc(r->items, cap * sizeof *ni);
        if (!ni) {
            record_overflow(pl, r);
            return;
        }
        r->items = ni;
        r->cap = cap;
    }
    if (decided != PLACE_NONE && pl->pos > pl->offset && pl->pos - 1 - pl->offset < pl->plan_n)
        pl->cur_of[pl->pos - 1 - pl->offset] = (uint32_t)r->n;
    /* No plan item (the step left the sequence, none re-matched yet): an
     * extra block on the device weighs on the curve. */
    int extra = pl->state == PLACE_ST_RESYNC && decided == PLACE_NONE && pl->mk == 0 &&
                !on_host && pl->curve;
    if (extra)
        curve_extra(pl, (int64_t)size);
    place_item_t *it = &r->items[r->n];
    *it = (place_item_t){.req = req, .size = size, .stream = stream, .addr = addr,
                         .at = r->nevents++, .end = PLACE_OPEN, .wrap = PLACE_OPEN,
                         .t_alloc = on_host ? clock_now() : 0,
                         .arena = (uint8_t)arena, .host = (uint8_t)(on_host != 0),
                         .extra = (uint8_t)(extra && pl->curve)};
    seqmap_set(&r->seqs[arena & 1], seq, (uint32_t)r->n);
    r->n++;
}

/* A block that lay on host memory was freed `events` events after its
 * allocation. */
static void host_life_note(place_t *pl, const place_item_t *it, uint64_t events)
{
    pl->stats.host_freed_bytes += it->size;
    pl->stats.host_life_events += (double)it->size * (double)events;
    pl->stats.host_life_seconds += (double)it->size * (clock_now() - it->t_alloc);
}

void place_note_free_slow(place_t *pl, int arena, uint64_t seq, uint64_t size)
{
    place_record_t *r = &pl->rec[pl->cur];
    pl->live_total = pl->live_total > size ? pl->live_total - size : 0;
    uint32_t pos = r->nevents++;
    uint32_t i = seqmap_get(&r->seqs[arena & 1], seq);
    if (i != PLACE_OPEN && i < r->n) {
        r->items[i].end = pos;
        if (r->items[i].host)
            host_life_note(pl, &r->items[i], pos - r->items[i].at);
        if (r->items[i].extra) {
            r->items[i].extra = 0;
            curve_extra(pl, -(int64_t)r->items[i].size);
        }
        return;
    }
    /* A block of the last step: where its copies are freed in the step
     * after theirs is what the next plan assumes for this step's copies. */
    const place_record_t *last = &pl->rec[!pl->cur];
    i = seqmap_get(&last->seqs[arena & 1], seq);
    if (i != PLACE_OPEN && i < last->n) {
        if (i < pl->wrap_n)
            pl->wrap[i] = pos;
        if (last->items[i].host)
            host_life_note(pl, &last->items[i], (uint64_t)(last->nevents - last->items[i].at) + pos);
    }
}

/* Whether two records hold the same sequence (size and stream of each item). */
static int seq_equal(const place_record_t *a, const place_record_t *b)
{
    if (a->n != b->n || a->overflow || b->overflow)
        return 0;
    for (size_t k = 0; k < a->n; k++)
        if (!item_matches(&b->items[k], a->items[k].req, a->items[k].stream))
            return 0;
    return 1;
}

/* Where the next step frees the blocks this step leaves live (`wrap`): where
 * this step freed the last step's copies of them, carried to the items of
 * this step that repeat one of the last step's.  Which ones: item k is the
 * last step's item offset + k where this step repeated the last item by
 * item from the plan's offset (full); else all items where the two steps'
 * sequences are the same (a step left to naive placement, or one that
 * fitted; same, from seq_equal), else those the plan matched (cur_of; an
 * extra or missing allocation re-matched further on), else, for a plan
 * from a kept variant or a step that followed no plan, the blocks live at
 * the two steps' ends paired (pair_open) when tight: the step did not fit
 * under the limit or was planned from a variant (it costs a pass over both
 * records).
 * Without it the next plan counts such a block twice (the copy live at the
 * step start in the base, and the new copy to the cycle's end) and solves
 * a peak higher than the step's: GPT-2 at 50% on an H100, whose steps
 * alternate between two sequences six allocations apart (the offload's copy
 * back of tensors it had let go), planned 2.26 GB on host after each change
 * where 0.61 fitted (docs/placement.md, "Plans that changed with the step's
 * variant"). */
static void wrap_carry(place_t *pl, place_record_t *r, const place_record_t *last, int full,
                       int same, int tight)
{
    if (pl->src < 0 && (full || same)) { /* item k repeats the last step's item off + k */
        size_t off = full ? pl->offset : 0;
        for (size_t k = 0; k < r->n && off + k < pl->wrap_n; k++)
            if (r->items[k].end == PLACE_OPEN)
                r->items[k].wrap = pl->wrap[off + k];
        return;
    }
    if (pl->src < 0 && pl->plan_n) {
        for (size_t k = 0; k < pl->plan_n && pl->offset + k < pl->wrap_n; k++) {
            uint32_t j = pl->cur_of[k];
            if (j != PLACE_OPEN && j < r->n && r->items[j].end == PLACE_OPEN)
                r->items[j].wrap = pl->wrap[pl->offset + k];
        }
        return;
    }
    /* Planned from a kept variant (the plan's matches are the variant's
     * items, wrap is the last step's), or no plan followed and the two
     * sequences differ: the blocks live at the two steps' ends are paired
     * (pair_open). */
    if (tight)
        pair_open(r, last, last->n < pl->wrap_n ? last->n : pl->wrap_n, wrap_learned, pl->wrap);
}

/* At a step end: `newest` just closed, `old` (the step before it) is about
 * to be reset; same: their sequences are equal.  A kept variant with
 * newest's sequence is dropped (newest is fresher); old is kept as a
 * variant if its sequence differs from newest's, in a free slot or the
 * least recently used one (whose record comes back in old's place, to be
 * reset and reused). */
static void variant_keep(place_t *pl, place_record_t *old, const place_record_t *newest, int same)
{
    int slot = -1;
    for (int v = 0; v < PLACE_VARIANTS; v++) {
        if (pl->var_used[v] && seq_equal(&pl->var[v], newest))
            pl->var_used[v] = 0;
        if (slot < 0 || pl->var_used[v] < pl->var_used[slot])
            slot = v;
    }
    if (same || !old->n || old->overflow || old->n > PLACE_VARIANT_ITEMS || old->limit_changed)
        return;
    place_record_t t = pl->var[slot];
    pl->var[slot] = *old;
    *old = t;
    seqmap_reset(&pl->var[slot].seqs[0]); /* no block of it is freed any more */
    seqmap_reset(&pl->var[slot].seqs[1]);
    pl->var_used[slot] = ++pl->var_clock;
}

/* The next step's record and plan state: an empty record in rec[cur]
 * (rec[!cur], the last step recorded, is the source), wraps to learn for
 * its items, matching from the start. */
static void step_begin(place_t *pl, const place_env_t *env)
{
    place_record_t *r = &pl->rec[pl->cur];
    const place_record_t *last = &pl->rec[!pl->cur];
    pl->src = -1;
    record_reset(r);
    r->dev_start = env->dev_in_use;
    r->peak_total = pl->live_total;
    uint32_t *nw = grow_to(pl->wrap, &pl->wrap_cap, last->n, sizeof *nw);
    if (nw)
        pl->wrap = nw;
    pl->wrap_n = last->n <= pl->wrap_cap ? last->n : 0;
    for (size_t k = 0; k < pl->wrap_n; k++)
        pl->wrap[k] = PLACE_OPEN;
    pl->margin = margin_of(env->limit);
    pl->cand.n = 0;
    pl->mk = 0;
    pl->pos = 0;
    pl->resyncs = 0;
    pl->restarts = 0;
    pl->plan_n = 0;
    pl->nmoves = 0;
    pl->due_lo = pl->due_hi = 0;
    pl->state = last->n && !last->overflow ? PLACE_ST_MATCH : PLACE_ST_LEARN;
}

/* Recording resumes with the step that starts now. */
static void recording_resume(place_t *pl, const place_env_t *env)
{
    pl->idle = 0;
    step_begin(pl, env);
}

/* The end of a step that was not recorded: the next is idle too while
 * nothing needs it recorded, the count lasts and the step fitted (its peak
 * under the limit, nothing spilled); else recording resumes.  The record
 * of the last step recorded stays the source: a training step repeats, so
 * a cut plans from it at once.  Its blocks' frees in the step after it are
 * learned only when two steps in a row are recorded again. */
static void idle_step_end(place_t *pl, const place_env_t *env)
{
    place_record_t *r = &pl->rec[pl->cur];
    pl->stats.idle_steps++;
    pl->recorded_before = 0;
    int again = env->may_idle && pl->idle > 1 && !pl->step_naive && fits(pl, r, env->limit);
    if (pl->debug)
        pl->debug(pl->debug_ctx, pl);
    pl->step_naive = 0;
    if (again) {
        pl->idle--;
        r->nevents = 0;
        r->peak_total = pl->live_total;
        return;
    }
    recording_resume(pl, env);
}

void place_limit_changed(place_t *pl, const place_env_t *env, int changed)
{
    /* Idle at a step's start: recording resumes (else recording, or the
     * rest of the step stays unrecorded: naive). */
    if (pl->idle && !pl->rec[pl->cur].nevents)
        recording_resume(pl, env);
    if (!changed)
        return; /* the same limit set again: what was learned under it stands */
    /* The kept variants were recorded under the old limit, with the
     * runtime's answer to it (blocks recomputed, tensors offloaded): in
     * GPT-2 with varying lengths cut to 50% after a 75% cut, the first step
     * after the cut step was planned from a 75% step's record, re-matched
     * it 43 times and placed 6.7 GB on host (docs/placement.md, "Rule
     * trials on steps that differ").  They are learned again under the new
     * one.  (The data of a variant the step in progress plans from stays
     * until the step ends.)  Nor do the two records the next step ends
     * would keep become variants: the last step's, recorded under the old
     * limit, and the one in progress, which saw the change (the runtime's
     * answer to a cut starts after it).  Kept, either was planned from by a
     * later step of its shape: the GPT-2 job above re-matched the record
     * of the last uncapped step before the cut 44 times and placed 7.3 GB
     * on host, or the cut step's record 33 times and 0.9 GB, where naive
     * placement put none ("Variants recorded across a limit change"). */
    for (int k = 0; k < PLACE_VARIANTS; k++)
        pl->var_used[k] = 0;
    pl->rec[0].limit_changed = pl->rec[1].limit_changed = 1;
}

void place_step_end(place_t *pl, const place_env_t *env)
{
    if (pl->idle) {
        idle_step_end(pl, env);
        return;
    }
    place_record_t *r = &pl->rec[pl->cur];
    const place_record_t *last = &pl->rec[!pl->cur], *src = src_of(pl);
    /* Repeated item by item from `offset` to the end. */
    int full = pl->state == PLACE_ST_PLAN && !pl->resyncs && pl->offset + r->n == src->n &&
               pl->pos == src->n;
    for (size_t k = 0; k < r->n; k++) {
        place_item_t *it = &r->items[k];
        if (it->end != PLACE_OPEN)
            continue;
        it->dev_end = env->device_bytes(env->ctx, it->arena, it->addr, it->size);
    }
    /* Variants and pairing only under a limit the step did not fit (or
     * planned from a variant): an uncapped job pays nothing for them. */
    int tight = pl->plans && (pl->src >= 0 || !fits(pl, r, env->limit));
    int same = !full || tight ? seq_equal(r, last) : 0;
    wrap_carry(pl, r, last, full, same, tight);
    if (pl->state == PLACE_ST_PLAN)
        pl->stats.planned_steps++;
    else if (pl->state == PLACE_ST_RESYNC || pl->state == PLACE_ST_DIVERGED)
        pl->stats.diverged_steps++;
    if (full || pl->naive_chosen) {
        if (pl->step_fallback) {
            uint64_t most = env->limit / 4;
            pl->extra = pl->extra + pl->step_short < most ? pl->extra + pl->step_short : most;
        } else {
            pl->extra -= pl->extra / 4;
        }
    }
    /* Quiet: nothing to plan (no plan followed, nothing spilled), and the
     * step fitted under the limit where nothing needs every step recorded. */
    int quiet = env->may_idle && pl->state != PLACE_ST_PLAN && pl->state != PLACE_ST_RESYNC &&
                !pl->step_naive && !pl->step_fallback && fits(pl, r, env->limit);
    int rule_before = pl->rule;
    if (pl->auto_rule)
        auto_note_step(pl, env, pl->src < 0);
    /* The margin answers the fallbacks of the rule in force; the next rule
     * (a trial's next, or the one chosen) learns its own: a swap trial's
     * fallbacks kept BERT's chosen rule placing 1-2 GB more on host for
     * the several steps the margin takes to decay (H100, 50% cut). */
    if (pl->rule != rule_before)
        pl->extra = 0;
    if (pl->debug)
        pl->debug(pl->debug_ctx, pl);
    pl->step_fallback = 0;
    pl->step_short = 0;
    pl->step_placed = 0;
    pl->step_lighter = 0;
    pl->step_heavier = 0;
    pl->step_naive = 0;
    pl->step_swapped = 0;
    pl->naive_chosen = 0;

    /* The step just closed is the next plan's source. */
    pl->cur = !pl->cur;
    r = &pl->rec[pl->cur];
    last = &pl->rec[!pl->cur];
    if (tight)
        variant_keep(pl, r, last, same);
    step_begin(pl, env);
    pl->recorded_before = 1;
    pl->quiet = quiet ? pl->quiet + 1 : 0;
    if (pl->quiet >= PLACE_QUIET_STEPS) { /* the next steps go unrecorded */
        pl->quiet = 0;
        pl->idle = PLACE_IDLE_STEPS;
        pl->state = PLACE_ST_LEARN;
    }
}

int place_hold_host(const place_t *pl, uint64_t limit)
{
    if (!pl->plans)
        return 0; /* naive: the behaviour before the planner */
    return !fits(pl, &pl->rec[pl->cur], limit);
}
