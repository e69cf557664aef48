/* Step boundaries of a trace (steps.h). */
#include <stdint.h>
#include <stdlib.h>

#include "steps.h"

/* Fewest allocations a found step must have: shorter periods at the end of
 * a trace are runs of equal requests, not steps. */
#define STEP_MIN_ALLOCS 8

/* 1 if the last p keys are all the same: a run of equal requests, not a
 * step. */
static int period_uniform(const unsigned long long *key, size_t n, size_t p)
{
    for (size_t i = n - p + 1; i < n; i++)
        if (key[i] != key[n - p])
            return 0;
    return 1;
}

size_t steps_period(const unsigned long long *key, size_t n, size_t *reps)
{
    *reps = 0;
    if (n < 2 * STEP_MIN_ALLOCS)
        return 0;
    /* z[p]: longest common prefix of the reversed sequence and its suffix
     * from p, i.e. the longest common suffix of key[0..n) and key[0..n-p). */
    size_t *z = calloc(n, sizeof *z);
    if (!z)
        return 0;
#define R(i) key[n - 1 - (i)]
    size_t l = 0, r = 0;
    for (size_t i = 1; i < n; i++) {
        size_t k = 0;
        if (i < r)
            k = z[i - l] < r - i ? z[i - l] : r - i;
        while (i + k < n && R(k) == R(i + k))
            k++;
        z[i] = k;
        if (i + k > r) {
            l = i;
            r = i + k;
        }
    }
#undef R
    /* A period p repeats over the last z[p] + p keys; the best is the one
     * covering most, the smallest among equals (multiples cover the same). */
    size_t best = 0, cover = 0;
    for (size_t p = STEP_MIN_ALLOCS; 2 * p <= n; p++) {
        if (z[p] < p)
            continue; /* not two whole periods */
        size_t c = (z[p] + p) / p * p;
        if (c > cover && !period_uniform(key, n, p)) {
            cover = c;
            best = p;
        }
    }
    free(z);
    if (best)
        *reps = cover / best;
    return best;
}

size_t trace_steps(const trace_t *t, size_t **starts, steps_source_t *source)
{
    *starts = NULL;
    *source = STEPS_NONE;
    if (t->nmarks) {
        size_t *s = malloc(t->nmarks * sizeof *s);
        if (!s)
            return (size_t)-1;
        for (size_t i = 0; i < t->nmarks; i++)
            s[i] = t->marks[i];
        *starts = s;
        *source = STEPS_MARKS;
        return t->nmarks;
    }
    size_t m = t->nallocs;
    unsigned long long *key = malloc((m ? m : 1) * sizeof *key);
    size_t *at = malloc((m ? m : 1) * sizeof *at); /* event index of each allocation */
    if (!key || !at) {
        free(key);
        free(at);
        return (size_t)-1;
    }
    size_t k = 0;
    for (size_t i = 0; i < t->nevents && k < m; i++) {
        if (t->events[i].is_free)
            continue;
        key[k] = (unsigned long long)t->events[i].size * 2654435761ull ^
                 ((unsigned long long)t->stream[i] << 48);
        at[k++] = i;
    }
    size_t reps = 0, p = steps_period(key, k, &reps);
    size_t n = 0;
    if (p) {
        /* Boundaries before the first allocation of each period of the run
         * (the first one ends what came before the run, if anything). */
        size_t first = k - reps * p;
        size_t *s = malloc(reps * sizeof *s);
        if (!s) {
            free(key);
            free(at);
            return (size_t)-1;
        }
        for (size_t j = 0; j < reps; j++) {
            size_t ai = first + j * p;
            if (at[ai] > 0)
                s[n++] = at[ai];
        }
        *starts = s;
        *source = STEPS_FOUND;
    }
    free(key);
    free(at);
    return n;
}
