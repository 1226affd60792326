// Attention benchmarks: M queries × n compressed keys, d = dv = 128, float; scores + softmax + P·V
// (4·M·n·d FLOP). Every row states its speed against a limit measured in the same process:
//   peak_frac = achieved FLOP/s / AVX-512 FMA peak (roofline.hpp), for the compute-bound batch;
//   bw_frac   = K+V bytes/s / read bandwidth over a buffer of the same size, for decode (M = 1).
// Rows:
//   1 attention_flash       the library's dense path (AVX-512 flash kernel on this machine)
//   2 attention_streaming   the generic xsimd online-softmax path, one query at a time
//   3 attention_eigen       baseline: Eigen GEMM (S = Q·Kᵀ; S *= scale), row softmax, GEMM (O = S·V)
//   4 attention_decode      one query (segmented streaming path), bw_frac
// "smoke" rows are tiny and run under ctest.
#include <benchmark/benchmark.h>

#include <kvphase/attention/full.hpp>
#include <kvphase/attention/kernels.hpp>

#include <Eigen/Core>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <tuple>

#include "roofline.hpp"

namespace {

using kvphase::index_t;
using kvphase::matrixf;
namespace att = kvphase::attention;
namespace kb = kvphase::bench;

struct problem {
  index_t M, n, d;
  matrixf Q, K, V, O;
  problem(index_t M_, index_t n_, index_t d_) : M(M_), n(n_), d(d_), Q(M_, d_), K(n_, d_), V(n_, d_), O(M_, d_) {
    std::mt19937 g(42);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto* m : {&Q, &K, &V})
      for (index_t i = 0; i < m->size(); ++i) m->data()[i] = nd(g);
    O.setZero();
  }
  [[nodiscard]] double flops() const { return 4.0 * double(M) * double(n) * double(d); }
  [[nodiscard]] double kv_bytes() const { return 2.0 * double(n) * double(d) * sizeof(float); }
};

problem& get(index_t M, index_t n, index_t d) {
  static std::map<std::tuple<index_t, index_t, index_t>, std::unique_ptr<problem>> cache;
  auto& p = cache[{M, n, d}];
  if (!p) p = std::make_unique<problem>(M, n, d);
  return *p;
}

double seconds_since(kb::clock_type::time_point t0) {
  return std::chrono::duration<double>(kb::clock_type::now() - t0).count();
}

void report_flops(benchmark::State& state, const problem& p, double secs, int threads) {
  const double gflops = p.flops() * double(state.iterations()) / secs * 1e-9;
  state.counters["GFLOPs"] = gflops;
  state.counters["peak_frac"] = gflops / kb::fma_peak_gflops(threads);
  state.counters["threads"] = threads;
}

void flash(benchmark::State& state, index_t M, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& p = get(M, n, d);
  const att::attention_params prm{.threads = threads};
  att::dense_attention<float>(p.Q, p.K, p.V, prm, p.O);  // warm-up (caches, thread pool)
  double secs = 0;
  for (auto _ : state) {
    const auto t0 = kb::clock_type::now();
    att::dense_attention<float>(p.Q, p.K, p.V, prm, p.O);
    secs += seconds_since(t0);
    kb::keep(p.O(0, 0));
  }
  report_flops(state, p, secs, threads);
}

// Generic xsimd streaming path (what every non-AVX-512 or double call runs), forced here.
void streaming(benchmark::State& state, index_t M, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& p = get(M, n, d);
  const float scale = att::default_scale<float>(d);
  auto run = [&] {
#pragma omp parallel num_threads(threads)
    {
      att::online_softmax<float> st(d, 256);
#pragma omp for schedule(static)
      for (index_t i = 0; i < M; ++i) {
        st.reset();
        st.add_rows(p.Q.data() + i * d, p.K.data(), d, p.V.data(), d, n, d, scale);
        st.finish(att::no_sink<float>, p.O.data() + i * d);
      }
    }
  };
  run();
  double secs = 0;
  for (auto _ : state) {
    const auto t0 = kb::clock_type::now();
    run();
    secs += seconds_since(t0);
    kb::keep(p.O(0, 0));
  }
  report_flops(state, p, secs, threads);
}

// Baseline: Eigen GEMM + softmax + GEMM with preallocated buffers (the fast Eigen form:
// S.noalias() = Q·Kᵀ then S *= scale; see reference/performance.md §3).
void eigen_baseline(benchmark::State& state, index_t M, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& p = get(M, n, d);
  matrixf S(M, n);
  const float scale = att::default_scale<float>(d);
  Eigen::setNbThreads(threads);
  auto run = [&] {
    S.noalias() = p.Q * p.K.transpose();
    S *= scale;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (index_t i = 0; i < M; ++i) {
      auto row = S.row(i);
      const float m = row.maxCoeff();
      row = (row.array() - m).exp();
      row /= row.sum();
    }
    p.O.noalias() = S * p.V;
  };
  run();
  double secs = 0;
  for (auto _ : state) {
    const auto t0 = kb::clock_type::now();
    run();
    secs += seconds_since(t0);
    kb::keep(p.O(0, 0));
  }
  Eigen::setNbThreads(0);
  report_flops(state, p, secs, threads);
}

void decode(benchmark::State& state, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& p = get(1, n, d);
  const att::attention_params prm{.threads = threads};
  att::dense_attention<float>(p.Q, p.K, p.V, prm, p.O);
  double secs = 0;
  for (auto _ : state) {
    const auto t0 = kb::clock_type::now();
    att::dense_attention<float>(p.Q, p.K, p.V, prm, p.O);
    secs += seconds_since(t0);
    kb::keep(p.O(0, 0));
  }
  const double gbs = p.kv_bytes() * double(state.iterations()) / secs * 1e-9;
  state.counters["GBps"] = gbs;
  state.counters["bw_frac"] = gbs / kb::read_bandwidth_gbs(static_cast<std::size_t>(p.kv_bytes()), threads);
  state.counters["threads"] = threads;
}

constexpr index_t kM = 256, kN = 32768, kD = 128;

void attention_flash(benchmark::State& s) { flash(s, kM, kN, kD); }
void attention_streaming(benchmark::State& s) { streaming(s, kM, kN, kD); }
void attention_eigen(benchmark::State& s) { eigen_baseline(s, kM, kN, kD); }
void attention_decode(benchmark::State& s) { decode(s, kN, kD); }
void attention_flash_smoke(benchmark::State& s) { flash(s, 40, 600, 64); }
void attention_streaming_smoke(benchmark::State& s) { streaming(s, 9, 600, 64); }
void attention_eigen_smoke(benchmark::State& s) { eigen_baseline(s, 40, 600, 64); }
void attention_decode_smoke(benchmark::State& s) { decode(s, 9000, 64); }

}  // namespace

BENCHMARK(attention_flash)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_streaming)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_eigen)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_decode)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_flash_smoke)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_streaming_smoke)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_eigen_smoke)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_decode_smoke)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
