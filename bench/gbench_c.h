/*
 * A thin C interface to Google Benchmark (gbench_c.cc), so that the
 * benchmarks themselves (bench_vmem.c) are plain C.
 *
 * A benchmark is a function run once per repetition and thread:
 *
 *     static void bm(gb_state_t *st, void *arg)
 *     {
 *         setup ...                      // not timed
 *         while (gb_keep_running(st))    // one timed iteration per call
 *             work ...
 *         teardown ...                   // not timed
 *     }
 *
 * With several threads, every thread runs the function; the first call of
 * gb_keep_running is a barrier for all of them, and so is the call that
 * returns 0, so thread 0 may set up shared state before its loop.
 */
#ifndef VMEM_BENCH_GBENCH_C_H
#define VMEM_BENCH_GBENCH_C_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gb_state gb_state_t;   /* a benchmark::State */
typedef struct gb_bench gb_bench_t;   /* a benchmark::internal::Benchmark */
typedef void (*gb_fn)(gb_state_t *st, void *arg);

/* Registration (before gb_main).  The name is copied. */
gb_bench_t *gb_register(const char *name, gb_fn fn, void *arg);
gb_bench_t *gb_arg(gb_bench_t *b, int64_t x);          /* adds one run with range(0) = x */
gb_bench_t *gb_threads(gb_bench_t *b, int n);          /* adds one run with n threads */
gb_bench_t *gb_real_time(gb_bench_t *b);               /* wall time, not CPU time */
gb_bench_t *gb_unit_ns(gb_bench_t *b);
gb_bench_t *gb_unit_us(gb_bench_t *b);
gb_bench_t *gb_iterations(gb_bench_t *b, int64_t n);   /* fixed iteration count */

/* Inside a benchmark. */
int gb_keep_running(gb_state_t *st);
int64_t gb_range(gb_state_t *st, int i);
int gb_thread_index(gb_state_t *st);
int gb_thread_count(gb_state_t *st);
void gb_pause(gb_state_t *st);
void gb_resume(gb_state_t *st);
void gb_items(gb_state_t *st, int64_t n);              /* SetItemsProcessed */
void gb_bytes(gb_state_t *st, int64_t n);              /* SetBytesProcessed */
void gb_counter(gb_state_t *st, const char *name, double v);         /* plain value */
void gb_counter_rate(gb_state_t *st, const char *name, double v);    /* per second */
void gb_label(gb_state_t *st, const char *label);
void gb_error(gb_state_t *st, const char *msg);        /* SkipWithError */

/* Runs the benchmarks selected on the command line (Google Benchmark's own
 * flags: --benchmark_filter, --benchmark_out=FILE, --benchmark_out_format=
 * json, ...).  Returns the exit status. */
int gb_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
