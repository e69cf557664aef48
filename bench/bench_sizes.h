/* Random sizes for the benchmarks: a xorshift generator and a table of sizes
 * drawn log-uniformly from [lo, hi], precomputed so that drawing costs
 * nothing in the timed loop. */
#ifndef VMEM_BENCH_SIZES_H
#define VMEM_BENCH_SIZES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#define SIZE_TABLE 65536u
static inline size_t *size_table(uint64_t seed, size_t lo, size_t hi)
{
    size_t *t = malloc(SIZE_TABLE * sizeof *t);
    if (!t)
        return NULL;
    double a = log((double)lo), b = log((double)hi);
    for (unsigned i = 0; i < SIZE_TABLE; i++) {
        double u = (double)(rng_next(&seed) >> 11) / 9007199254740992.0;
        t[i] = (size_t)exp(a + u * (b - a));
    }
    return t;
}

#endif
