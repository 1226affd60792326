// The machine limits every other benchmark compares against, printed on their own:
//   build/release/benchmarks/bench_roofline
#include <benchmark/benchmark.h>

#include <cstdio>

#include "roofline.hpp"

static void BM_fma_peak(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  double g = 0;
  for (auto _ : st) g = kvphase::bench::fma_peak_gflops(threads, 3);
  st.counters["GFLOPs"] = g;
}
BENCHMARK(BM_fma_peak)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(1);

static void BM_read_bandwidth(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(1));
  const std::size_t bytes = std::size_t(st.range(0)) << 20;
  double g = 0;
  for (auto _ : st) g = kvphase::bench::read_bandwidth_gbs(bytes, threads, 5);
  st.counters["GBps"] = g;
}
BENCHMARK(BM_read_bandwidth)->Args({1, 1})->Args({64, 1})->Args({64, 2})->Args({1024, 1})->Args({1024, 2})
    ->Unit(benchmark::kMillisecond)->Iterations(1);

static void BM_smoke_roofline(benchmark::State& st) {
  double g = 0;
  for (auto _ : st) g = kvphase::bench::read_bandwidth_gbs(std::size_t(1) << 20, 1, 1);
  st.counters["GBps"] = g;
}
BENCHMARK(BM_smoke_roofline)->Iterations(1);

BENCHMARK_MAIN();
