// The C interface to Google Benchmark declared in gbench_c.h.
#include "gbench_c.h"

#include <benchmark/benchmark.h>

#include <string>

namespace {

benchmark::State *S(gb_state_t *st) { return reinterpret_cast<benchmark::State *>(st); }
benchmark::internal::Benchmark *B(gb_bench_t *b)
{
    return reinterpret_cast<benchmark::internal::Benchmark *>(b);
}
gb_bench_t *C(benchmark::internal::Benchmark *b) { return reinterpret_cast<gb_bench_t *>(b); }

} // namespace

extern "C" {

gb_bench_t *gb_register(const char *name, gb_fn fn, void *arg)
{
    return C(benchmark::RegisterBenchmark(std::string(name).c_str(), [fn, arg](benchmark::State &st) {
        fn(reinterpret_cast<gb_state_t *>(&st), arg);
    }));
}

gb_bench_t *gb_arg(gb_bench_t *b, int64_t x) { return C(B(b)->Arg(x)); }
gb_bench_t *gb_threads(gb_bench_t *b, int n) { return C(B(b)->Threads(n)); }
gb_bench_t *gb_real_time(gb_bench_t *b) { return C(B(b)->UseRealTime()); }
gb_bench_t *gb_unit_ns(gb_bench_t *b) { return C(B(b)->Unit(benchmark::kNanosecond)); }
gb_bench_t *gb_unit_us(gb_bench_t *b) { return C(B(b)->Unit(benchmark::kMicrosecond)); }
gb_bench_t *gb_iterations(gb_bench_t *b, int64_t n)
{
    return C(B(b)->Iterations(static_cast<benchmark::IterationCount>(n)));
}

int gb_keep_running(gb_state_t *st) { return S(st)->KeepRunning() ? 1 : 0; }
int64_t gb_range(gb_state_t *st, int i) { return S(st)->range(static_cast<std::size_t>(i)); }
int gb_thread_index(gb_state_t *st) { return S(st)->thread_index(); }
int gb_thread_count(gb_state_t *st) { return S(st)->threads(); }
void gb_pause(gb_state_t *st) { S(st)->PauseTiming(); }
void gb_resume(gb_state_t *st) { S(st)->ResumeTiming(); }
void gb_items(gb_state_t *st, int64_t n) { S(st)->SetItemsProcessed(n); }
void gb_bytes(gb_state_t *st, int64_t n) { S(st)->SetBytesProcessed(n); }
void gb_counter(gb_state_t *st, const char *name, double v)
{
    S(st)->counters[name] = benchmark::Counter(v);
}
void gb_counter_rate(gb_state_t *st, const char *name, double v)
{
    S(st)->counters[name] = benchmark::Counter(v, benchmark::Counter::kIsRate);
}
void gb_label(gb_state_t *st, const char *label) { S(st)->SetLabel(label); }
void gb_error(gb_state_t *st, const char *msg) { S(st)->SkipWithError(msg); }

int gb_main(int argc, char **argv)
{
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

} // extern "C"
