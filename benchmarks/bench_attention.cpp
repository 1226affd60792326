// Attention benchmarks: M queries × n compressed keys, d = dv = 128, float; scores + softmax + P·V
// (4·M·n·d FLOP, attention/cost.hpp). Every row states its speed against a limit measured in the same process:
//   peak_frac = achieved FLOP/s / FMA peak of the same precision on the path the binary was
//               compiled for (roofline.hpp: AVX-512 with -march=native, AVX2 with -march=haswell;
//               the row's label names it), for the compute-bound batch;
//   cpu_peak_frac = the same ratio per CPU-second of the process (job FLOP / its CPU seconds over
//               the roofline's FLOP / its CPU seconds): the steadier figure on a loaded machine;
//   bw_frac   = K+V bytes/s / read bandwidth over a buffer of the same size, for decode (M = 1).
// Rows:
//   1 attention_flash       the library's dense path (AVX-512 float kernel where compiled, else
//                           the portable blocked kernel)
//   2 attention_portable    the portable blocked xsimd kernel (detail/flash_xsimd.hpp), forced
//   3 attention_portable_double   the same in double (against the double FMA peak)
//   4 attention_causal      the library's full causal attention, n = M = 8192 (4·d·Σ_i (i+1) FLOP)
//   5 attention_compressed  the library's compressed attention, joint softmax over the visible
//                           entries (W = S = 4 over N = 32768 tokens) and a 128-token window, for
//                           the last 256 positions (4·d·Σ_i (visible_i + window_i) FLOP)
//   6 attention_streaming   the one-query-at-a-time online-softmax loop (what every non-AVX-512
//                           or double call ran before the portable kernel), forced
//   7 attention_eigen       baseline: Eigen GEMM (S = Q·Kᵀ; S *= scale), row softmax, GEMM (O = S·V)
//   8 attention_decode      one query (segmented streaming path), bw_frac
//   9 attention_flash_avx2, attention_compressed_avx2 (AVX-512 builds only): rows 1 and 5 with
//                           their kernels instantiated for fma3<avx2>, against the AVX2 FMA peak
//                           measured in the same run (label fma3+avx2)
// "smoke" rows are tiny and run under ctest.
#include <benchmark/benchmark.h>

#include <kvphase/attention/compressed.hpp>
#include <kvphase/attention/cost.hpp>
#include <kvphase/attention/detail/flash_xsimd.hpp>
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

template <class Real>
struct problem_t {
  using matrix = kvphase::matrix_t<Real>;
  index_t M, n, d;
  matrix Q, K, V, O;
  problem_t(index_t M_, index_t n_, index_t d_) : M(M_), n(n_), d(d_), Q(M_, d_), K(n_, d_), V(n_, d_), O(M_, d_) {
    std::mt19937 g(42);
    std::normal_distribution<Real> nd(Real(0), Real(1));
    for (auto* m : {&Q, &K, &V})
      for (index_t i = 0; i < m->size(); ++i) m->data()[i] = nd(g);
    O.setZero();
  }
  [[nodiscard]] double flops() const { return kvphase::attention::dense_cost(M, n, d, d).flops; }
  [[nodiscard]] double kv_bytes() const { return 2.0 * double(n) * double(d) * sizeof(Real); }
};
using problem = problem_t<float>;

template <class Real = float>
problem_t<Real>& get(index_t M, index_t n, index_t d) {
  static std::map<std::tuple<index_t, index_t, index_t>, std::unique_ptr<problem_t<Real>>> cache;
  auto& p = cache[{M, n, d}];
  if (!p) p = std::make_unique<problem_t<Real>>(M, n, d);
  return *p;
}

double seconds_since(kb::clock_type::time_point t0) {
  return std::chrono::duration<double>(kb::clock_type::now() - t0).count();
}

// CPU seconds of the process spent inside the timed regions of the current row (summed by
// cpu_timer over the iterations, read and reset by report_flops).
double g_cpu_secs = 0, g_cpu_t0 = 0;
struct cpu_timer {
  cpu_timer() { g_cpu_t0 = kb::process_cpu_seconds(); }
  ~cpu_timer() { g_cpu_secs += kb::process_cpu_seconds() - g_cpu_t0; }
};

/// Wall seconds of `run` summed over the benchmark's iterations (its CPU seconds go to
/// g_cpu_secs for report_flops); `run` returns one output value, kept so the work stays.
template <class F>
double time_iterations(benchmark::State& state, F&& run) {
  double secs = 0;
  for (auto _ : state) {
    const cpu_timer ct;
    const auto t0 = kb::clock_type::now();
    const auto v = run();
    secs += seconds_since(t0);
    kb::keep(v);
  }
  return secs;
}

/// The row's fractions of the FMA peak of Real on the path Arch its kernel ran (the label names it).
template <class Real = float, class Arch = kvphase::simd::default_arch>
void report_flops(benchmark::State& state, double flops, double secs, int threads) {
  const double gflops = flops * double(state.iterations()) / secs * 1e-9;
  state.counters["GFLOPs"] = gflops;
  state.counters["peak_frac"] = gflops / kb::fma_peak_gflops<Real, Arch>(threads);
  if (g_cpu_secs > 0)
    state.counters["cpu_peak_frac"] = flops * double(state.iterations()) / g_cpu_secs * 1e-9 /
                                      kb::fma_peak_gflops_per_cpu_second<Real, Arch>(threads);
  g_cpu_secs = 0;
  state.counters["threads"] = threads;
  state.SetLabel(Arch::name());
}
template <class Real>
void report_flops(benchmark::State& state, const problem_t<Real>& p, double secs, int threads) {
  report_flops<Real>(state, p.flops(), secs, threads);
}

template <class Arch = kvphase::simd::default_arch>
void flash(benchmark::State& state, index_t M, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& p = get(M, n, d);
  const att::attention_params prm{.threads = threads};
  att::dense_attention<float, Arch>(p.Q, p.K, p.V, prm, p.O);  // warm-up (caches, thread pool)
  const double secs = time_iterations(state, [&] {
    att::dense_attention<float, Arch>(p.Q, p.K, p.V, prm, p.O);
    return p.O(0, 0);
  });
  report_flops<float, Arch>(state, p.flops(), secs, threads);
}

// The portable blocked kernel, forced (on an AVX-512 build the dense path takes the AVX-512
// float kernel instead; double always takes this one).
template <class Real>
void portable(benchmark::State& state, index_t M, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem_t<Real>& p = get<Real>(M, n, d);
  const Real scale = att::default_scale<Real>(d);
  const att::detail::kv_segment<Real> seg{.K = p.K.data(), .ldk = d, .V = p.V.data(), .ldv = d, .n = n};
  auto run = [&] {
    att::detail::flash_xsimd<Real, kvphase::simd::default_arch>(p.Q.data(), d, M, &seg, 1, d, d, scale,
                                                               att::no_sink<Real>, p.O.data(), d, threads);
  };
  run();
  const double secs = time_iterations(state, [&] {
    run();
    return p.O(0, 0);
  });
  report_flops<Real>(state, p, secs, threads);
}

// Full causal attention over n tokens (every token queries itself and its past).
void causal(benchmark::State& state, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& p = get(n, n, d);
  const att::attention_params prm{.threads = threads};
  att::full_attention<float>(p.Q, p.K, p.V, prm, p.O);
  const double secs = time_iterations(state, [&] {
    att::full_attention<float>(p.Q, p.K, p.V, prm, p.O);
    return p.O(0, 0);
  });
  report_flops(state, att::causal_cost(n, d, d).flops, secs, threads);
}

// Compressed attention (joint: visible entries + raw window) for the last M of N tokens.
template <class Arch = kvphase::simd::default_arch>
void compressed(benchmark::State& state, index_t M, index_t N, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& raw = get(M, N, d);  // Q [M × d], K, V [N × d]
  const kvphase::compress::chunk_grid grid{.window = 4, .stride = 4};
  problem& cmp = get(1, grid.num_visible(N - 1), d);  // Kc, Vc: the entries (random, like K, V)
  const att::compressed_params prm{.window = 128, .attn = {.threads = threads}};
  auto run = [&] {
    att::compressed_attention<float, Arch>(raw.Q, {}, cmp.K, cmp.V, grid, raw.K, raw.V, prm, raw.O);
  };
  const double flops =
      att::compressed_cost({.grid = grid, .tokens = N, .queries = M, .window = prm.window, .d = d, .dv = d}).flops;
  run();
  const double secs = time_iterations(state, [&] {
    run();
    return raw.O(0, 0);
  });
  report_flops<float, Arch>(state, flops, secs, threads);
}

// The one-query-at-a-time streaming loop (what every non-AVX-512 or double call ran before the
// portable kernel; still the path below 8 queries), forced here.
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
  const double secs = time_iterations(state, [&] {
    run();
    return p.O(0, 0);
  });
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
  const double secs = time_iterations(state, [&] {
    run();
    return p.O(0, 0);
  });
  Eigen::setNbThreads(0);
  report_flops(state, p, secs, threads);
}

void decode(benchmark::State& state, index_t n, index_t d) {
  const int threads = static_cast<int>(state.range(0));
  problem& p = get(1, n, d);
  const att::attention_params prm{.threads = threads};
  att::dense_attention<float>(p.Q, p.K, p.V, prm, p.O);
  const double secs = time_iterations(state, [&] {
    att::dense_attention<float>(p.Q, p.K, p.V, prm, p.O);
    return p.O(0, 0);
  });
  const double gbs = p.kv_bytes() * double(state.iterations()) / secs * 1e-9;
  g_cpu_secs = 0;
  state.counters["GBps"] = gbs;
  state.counters["bw_frac"] = gbs / kb::read_bandwidth_gbs(static_cast<std::size_t>(p.kv_bytes()), threads);
  state.counters["threads"] = threads;
}

constexpr index_t kM = 256, kN = 32768, kD = 128;

void attention_flash(benchmark::State& s) { flash(s, kM, kN, kD); }
void attention_portable(benchmark::State& s) { portable<float>(s, kM, kN, kD); }
void attention_portable_double(benchmark::State& s) { portable<double>(s, kM, kN, kD); }
void attention_causal(benchmark::State& s) { causal(s, 8192, kD); }
void attention_compressed(benchmark::State& s) { compressed(s, kM, kN, kD); }
void attention_streaming(benchmark::State& s) { streaming(s, kM, kN, kD); }
void attention_eigen(benchmark::State& s) { eigen_baseline(s, kM, kN, kD); }
void attention_decode(benchmark::State& s) { decode(s, kN, kD); }
void attention_flash_smoke(benchmark::State& s) { flash(s, 40, 600, 64); }
void attention_streaming_smoke(benchmark::State& s) { streaming(s, 9, 600, 64); }
void attention_portable_smoke(benchmark::State& s) { portable<double>(s, 40, 600, 64); }
void attention_eigen_smoke(benchmark::State& s) { eigen_baseline(s, 40, 600, 64); }
void attention_decode_smoke(benchmark::State& s) { decode(s, 9000, 64); }

// The AVX2 path of an AVX-512 build: the dense and compressed kernels instantiated for
// fma3<avx2> (what a -march=haswell build runs: the portable blocked kernel on 8-lane batches),
// each against the AVX2 FMA peak measured in the same run. Compiled with the build's AVX-512
// flags, so the compiler may give them 32 vector registers where a Haswell build has 16; a
// -march=haswell build (docs/performance.md) is the strict figure.
#if XSIMD_WITH_AVX512BW && XSIMD_WITH_FMA3_AVX2
#define KVPHASE_BENCH_AVX2_ROWS 1
using avx2_arch = xsimd::fma3<xsimd::avx2>;
void attention_flash_avx2(benchmark::State& s) { flash<avx2_arch>(s, kM, kN, kD); }
void attention_compressed_avx2(benchmark::State& s) { compressed<avx2_arch>(s, kM, kN, kD); }
void attention_flash_avx2_smoke(benchmark::State& s) { flash<avx2_arch>(s, 40, 600, 64); }
#endif

}  // namespace

BENCHMARK(attention_flash)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_portable)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_portable_double)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_causal)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_compressed)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_streaming)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_eigen)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_decode)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_flash_smoke)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_streaming_smoke)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_portable_smoke)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_eigen_smoke)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(attention_decode_smoke)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
#ifdef KVPHASE_BENCH_AVX2_ROWS
BENCHMARK(attention_flash_avx2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_compressed_avx2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(attention_flash_avx2_smoke)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
#endif

BENCHMARK_MAIN();
