#pragma once
/// \file bench/gbench.hpp
/// Compression benchmarks for your own Google Benchmark suite, with kvphase-bench's counters:
///
///     #include <kvphase/bench/gbench.hpp>
///     #include <kvphase/compress/presets.hpp>
///     namespace kb = kvphase::bench;
///     // V4-CSA at the real model's shape, 1 and 2 threads
///     static const bool registered = [] {
///       for (int t : {1, 2})
///         kb::register_compress("v4_csa/threads:" + std::to_string(t), kvphase::compress::v4_csa(),
///                               {.tokens = 16384, .dim = 4096, .head_dim = 512, .threads = t});
///       return true;
///     }();
///     BENCHMARK_MAIN();
///
/// Each benchmark times compress_into on float buffers of the shape (warm: the same buffers every
/// iteration; cold: caches evicted before every call, untimed) with manual time, and reports:
///   median_ms        median time of a call
///   GBps, GFLOPs     the pass's bytes and FLOPs (compress/cost.hpp) per median time
///   bytes, flops, intensity (FLOP per byte)
///   read_GBps        reading the input once, paired with every iteration in the same cache state
///   fma_peak_gflops  the float FMA peak at the thread count, measured after the iterations
///   bound_fma        1 when the FMA peak is the bound, 0 when the read bandwidth is
///   roofline_frac    bound time / median time
/// as kvphase-bench compress prints them. Not part of the umbrella header (it needs
/// <benchmark/benchmark.h> and links benchmark::benchmark).

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvphase/bench/roofline.hpp"
#include "kvphase/compress/cost.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"

namespace kvphase::bench {

/// Shape and run settings of a registered compression benchmark.
struct compress_shape {
  index_t tokens = 16384;   ///< N
  index_t dim = 512;        ///< d
  index_t head_dim = 0;     ///< c through a payload projection (0: the operator's own width)
  index_t mlp_hidden = 0;   ///< H of an MLP pool (0: 2c)
  int threads = 1;
  bool cold = false;        ///< evict caches before every call
  std::uint64_t seed = 1;   ///< parameters (the preset's recipe, compress::preset_init)
};

namespace detail {
/// The preset's parameter recipe with a payload projection to head_dim where asked for.
inline compress::pool_params<float> shape_params(const compress::operator_spec& s, const compress_shape& sh) {
  compress::param_init init = compress::preset_init(s, sh.seed);
  if (sh.head_dim > 0 && sh.head_dim != sh.dim) {
    init.project_payload = true;
    init.out_dim = sh.head_dim;
  } else if (s.pool == compress::pool_kind::mlp) {
    init.project_payload = false;
  }
  if (s.pool == compress::pool_kind::mlp) init.mlp_hidden = sh.mlp_hidden;
  return compress::make_params<float>(s, sh.dim, init);
}
}  // namespace detail

/// Registers benchmark `name` timing compress_into(spec, params, ...) at `shape`; returns it for
/// further settings (->Iterations(n), ->Unit(...)). Throws kvphase::error for an invalid spec,
/// parameters or shape.
inline benchmark::internal::Benchmark* register_compress(const std::string& name, const compress::operator_spec& spec,
                                                        compress::pool_params<float> params,
                                                        const compress_shape& shape) {
  require(shape.threads >= 1, "threads", shape.threads, "must be >= 1");
  const compress::pass_cost cost = compress::compress_cost<float>(spec, params, shape.dim, shape.tokens);
  require(cost.entries >= 1, "tokens", shape.tokens, "too few for one complete entry");
  auto p = std::make_shared<compress::pool_params<float>>(std::move(params));
  auto fn = [spec, p, shape, cost](benchmark::State& st) {
    const index_t N = shape.tokens, d = shape.dim;
    std::vector<float> x(static_cast<std::size_t>(N * d)), out(static_cast<std::size_t>(cost.entries * cost.out_dim));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    const matrix_view<float> xv(x.data(), N, d);
    matrix_mut_view<float> ov(out.data(), cost.entries, cost.out_dim);
    compress::compress_workspace<float> ws;
    const compress::compress_options opt{.threads = shape.threads};
    compress::compress_into<float>(spec, *p, xv, ov, 0, opt, &ws);  // warm-up
    std::vector<double> times, roofs, roofs_rw;
    for (auto _ : st) {
      if (shape.cold) evict_caches();
      roofs.push_back(read_seconds(x.data(), x.size(), shape.threads, 1));
      if (shape.cold) evict_caches();
      roofs_rw.push_back(read_write_seconds(x.data(), x.size(), out.data(), out.size(), shape.threads, 1));
      if (shape.cold) evict_caches();
      const auto t0 = clock_type::now();
      compress::compress_into<float>(spec, *p, xv, ov, 0, opt, &ws);
      const double sec = std::chrono::duration<double>(clock_type::now() - t0).count();
      times.push_back(sec);
      st.SetIterationTime(sec);
      benchmark::ClobberMemory();
    }
    if (times.empty()) return;
    const double med = median(times);
    const double read_gbs = static_cast<double>(x.size() * sizeof(float)) / median(roofs) * 1e-9;
    const double peak = fma_peak_gflops<float>(shape.threads, 3);
    compress::pass_bound b{};
    const double bound = compress::bound_seconds(cost, peak, read_gbs, &b);
    st.counters["median_ms"] = med * 1e3;
    st.counters["GBps"] = cost.bytes() / med * 1e-9;
    st.counters["GFLOPs"] = cost.flops() / med * 1e-9;
    st.counters["bytes"] = cost.bytes();
    st.counters["flops"] = cost.flops();
    st.counters["intensity"] = cost.intensity();
    st.counters["read_GBps"] = read_gbs;
    st.counters["fma_peak_gflops"] = peak;
    st.counters["bound_fma"] = b == compress::pass_bound::compute ? 1.0 : 0.0;
    st.counters["roofline_frac"] = bound / med;
    // the bound of every byte, read and written, at the rate of the read-and-write probe
    const double rw_gbs = (static_cast<double>(x.size() * sizeof(float)) + cost.output_bytes) / median(roofs_rw) * 1e-9;
    st.counters["rw_GBps"] = rw_gbs;
    st.counters["rw_frac"] = std::max(cost.bytes() / (rw_gbs * 1e9), cost.flops() / (peak * 1e9)) / med;
    st.SetBytesProcessed(static_cast<std::int64_t>(cost.bytes() * static_cast<double>(st.iterations())));
    st.SetLabel(isa_name());
  };
  return benchmark::RegisterBenchmark(name.c_str(), fn)->UseManualTime()->Unit(benchmark::kMillisecond);
}

/// Form with the parameters drawn for the shape: the preset's recipe (compress::preset_init),
/// projected to shape.head_dim when it differs from shape.dim.
inline benchmark::internal::Benchmark* register_compress(const std::string& name, const compress::operator_spec& spec,
                                                        const compress_shape& shape) {
  return register_compress(name, spec, detail::shape_params(spec, shape), shape);
}

}  // namespace kvphase::bench
