/* Helpers of the vmm suites: sizes, a generator, and byte patterns that a
 * test writes into blocks and checks after memory has moved. */
#ifndef VMEM_TEST_VMM_COMMON_H
#define VMEM_TEST_VMM_COMMON_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define GRANULE ((size_t)2 << 20)

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* The word a pattern puts at word index i of a block. */
static inline uint64_t pattern_word(uint64_t seed, size_t i)
{
    uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    return x * 0xBF58476D1CE4E5B9ull;
}

/* Writes the pattern into the first and last word of every 4 KiB of the
 * block (every page is touched, so a move that lost a page shows). */
static inline void pattern_fill(void *p, size_t size, uint64_t seed)
{
    uint64_t *w = p;
    size_t n = size / 8;
    for (size_t i = 0; i < n; i += 512) {
        w[i] = pattern_word(seed, i);
        size_t last = i + 511 < n ? i + 511 : n - 1;
        w[last] = pattern_word(seed, last);
    }
}

/* 1 if the pattern is intact. */
static inline int pattern_ok(const void *p, size_t size, uint64_t seed)
{
    const uint64_t *w = p;
    size_t n = size / 8;
    for (size_t i = 0; i < n; i += 512) {
        size_t last = i + 511 < n ? i + 511 : n - 1;
        if (w[i] != pattern_word(seed, i) || w[last] != pattern_word(seed, last))
            return 0;
    }
    return 1;
}

#endif
