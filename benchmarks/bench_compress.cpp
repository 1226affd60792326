// Compression throughput against the in-process read roofline (benchmarks/roofline.hpp).
//
// Jobs (float, d = 128, N = 131072 tokens = 64 MiB in, 16 MiB out):
//   gated_w8s4: V4 grid W = 8, S = 4 with fixed slot weights (linear gated pooling; entry 0's
//               first four slots masked), pool_kind::weights;
//   mean_w4s4:  W = S = 4 mean.
// Rows: the library (kvphase::compress::compress_into), and a plain C++ loop as a baseline, at 1
// and 2 threads, warm (repeated calls on the same buffers) and cold (caches evicted before each
// call, untimed). Counters:
//   bytes_per_second  input + output bytes per second,
//   roofline_frac     median time to read the input once (roofline.hpp, same process, same
//                     thread count, same warm/cold state, timed right before each call of the
//                     job) / median time of the job.
// Variants whose name contains "smoke" use N = 4096 and are run by ctest.
//
// One row per operator kind (BM_kind_<kind>_<shape>, Args: threads): identity, mean, max,
// weights, content-free slot gate (memory-bound), paper_ref
// (slot gate with per-slot logits and a payload map), v41 / v4_hca (channel gate), v4_csa (two
// streams), nsa (MLP) at a small shape (N = 4096, d = 128) and a real-model shape (N = 16384,
// d = 4096, head dim c = 512; nsa: d = 512). Their bytes (input + output + parameters) and FLOPs
// are compress::compress_cost's (compress/cost.hpp: the same formulas as kvphase-bench); the bound is the larger of the time to read the input and parameters once (at the
// paired input-read rate; output stores not counted) and FLOPs / FMA peak (roofline.hpp, both
// timed before every call; medians); roofline_frac = bound / median time, fma_bound = 1 when the
// FMA peak is the bound, peak_frac_cpu = GFLOP per CPU-second of the job / the FMA peak per
// CPU-second (the steadier figure on a loaded machine: time the process was not running does not
// count; spinning OpenMP threads do, so it errs low). KVPHASE_BENCH_TOKENS=N overrides N of the
// real-model rows (the slow paths of older builds need a shorter context to finish).
//
//   build/<dir>/benchmarks/bench_compress --benchmark_filter=-smoke
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <memory>
#include <vector>

#include <kvphase/compress/compress.hpp>
#include <kvphase/io/safetensors.hpp>

#include "roofline.hpp"

namespace kc = kvphase::compress;
using kvphase::index_t;

namespace {

constexpr index_t d = 128;

/// Times one call of job as the iteration's manual time, appends it to `times` and returns it.
template <class Job>
double time_iteration(benchmark::State& st, Job& job, std::vector<double>& times) {
  const auto t0 = kvphase::bench::clock_type::now();
  job();
  const double sec = std::chrono::duration<double>(kvphase::bench::clock_type::now() - t0).count();
  times.push_back(sec);
  st.SetIterationTime(sec);
  benchmark::ClobberMemory();
  return sec;
}

/// 2 MiB-aligned buffer on the pages `pages` asks for ("system": no request, the pages a malloc'd
/// matrix and the compressor's workspace get; "huge": 2 MiB transparent huge pages requested;
/// "small": refused; see kvphase-bench --pages), first-touched by `threads`
/// threads in a static split (no page faults inside a timed loop).
struct buffer {
  float* p = nullptr;
  std::size_t n = 0;
  explicit buffer(std::size_t count, int threads, const std::string& pages = "system") : n(count) {
    const std::size_t align = std::size_t(2) << 20;
    const std::size_t bytes = ((count * sizeof(float) + align - 1) / align) * align;
    p = static_cast<float*>(std::aligned_alloc(align, bytes));
    if (pages == "huge") madvise(p, bytes, MADV_HUGEPAGE);
    else if (pages == "small") madvise(p, bytes, MADV_NOHUGEPAGE);
#pragma omp parallel num_threads(threads)
    {
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t lo = count * t / nt, hi = count * (t + 1) / nt;
      for (std::size_t i = lo; i < hi; ++i) p[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    }
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { std::free(p); }
};

kc::operator_spec gated_spec() {
  return kc::operator_spec{.grid = {.window = 8, .stride = 4},
                           .pool = kc::pool_kind::weights,
                           .slot_weights = {0.05, 0.1, 0.15, 0.2, 0.2, 0.15, 0.1, 0.05}};
}
kc::operator_spec mean_spec() { return kc::operator_spec{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mean}; }

/// Baseline: the loop a researcher writes (-O3 -march=native, no intrinsics), rows split
/// statically over threads.
void plain_loop(const kc::operator_spec& s, const float* x, index_t n, float* out, int threads) {
  const index_t W = s.grid.window, S = s.grid.stride, E = s.grid.num_entries(n);
  std::vector<float> w(static_cast<std::size_t>(W));
  for (index_t r = 0; r < W; ++r) w[r] = s.pool == kc::pool_kind::mean ? 1.0f / W : static_cast<float>(s.slot_weights[r]);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (index_t e = 0; e < E; ++e) {
    const index_t first = e * S - (W - S);
    const index_t r0 = first < 0 ? -first : 0;  // masked leading slots: renormalise over the rest
    float tot = 0;
    for (index_t r = r0; r < W; ++r) tot += w[r];
    float* o = out + e * d;
    for (index_t k = 0; k < d; ++k) o[k] = 0;
    for (index_t r = r0; r < W; ++r) {
      const float wr = w[r] / tot;
      const float* xr = x + (first + r) * d;
      for (index_t k = 0; k < d; ++k) o[k] += wr * xr[k];
    }
  }
}

enum class impl { library, plain };

void run(benchmark::State& st, const kc::operator_spec& s, impl which, index_t n_tokens, bool cold, int interleave = 0) {
  const int threads = static_cast<int>(st.range(0));
  const index_t E = s.grid.num_entries(n_tokens);
  buffer x(static_cast<std::size_t>(n_tokens * d), threads);
  buffer out(static_cast<std::size_t>(E * d), threads);
  const kvphase::matrix_view<float> xv(x.p, n_tokens, d);
  kvphase::matrix_mut_view<float> ov(out.p, E, d);
  const kc::pool_params<float> none;
  const kc::compress_options opt{.threads = threads, .interleave = interleave};
  auto job = [&] {
    if (which == impl::library) kc::compress_into<float>(s, none, xv, ov, 0, opt);
    else plain_loop(s, x.p, n_tokens, out.p, threads);
  };
  job();  // warm-up (and first touch of any internal state)
  // Paired measurement: every iteration times one roofline read and one job back to back, in the
  // same warm/cold state, so both see the same machine load; the ratio of their medians is
  // reported.
  std::vector<double> times, roofs;
  for (auto _ : st) {
    if (cold) kvphase::bench::evict_caches();
    roofs.push_back(kvphase::bench::read_seconds(x.p, x.n, threads, 1));
    if (cold) kvphase::bench::evict_caches();
    time_iteration(st, job, times);
  }
  const double roof = kvphase::bench::median(roofs);
  const double med = kvphase::bench::median(times);
  const double bytes = static_cast<double>((n_tokens + E) * d) * sizeof(float);
  st.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(st.iterations())));
  st.counters["roofline_frac"] = roof / med;
  st.counters["median_ms"] = med * 1e3;
  st.counters["roofline_ms"] = roof * 1e3;
  st.counters["GBps_median"] = bytes / med * 1e-9;
  st.SetLabel(kvphase::bench::isa_name());
}

// One small allocating call, as kvphase.compress makes it from Python (16 tokens x 8 channels,
// W = 8, S = 4 mean): examples/python/bench_overhead.py times the Python call beside this row.
// roofline_frac as above (reading 512 bytes once: latency, not bandwidth, bound).
void BM_compress_call_16x8(benchmark::State& st) {
  const kc::operator_spec s{.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::mean};
  kvphase::matrix_t<float> x(16, 8);
  for (index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(i % 7) - 3.0f;
  const kvphase::matrix_view<float> xv(x.data(), 16, 8);
  const kc::pool_params<float> none;
  std::vector<double> times;
  for (auto _ : st) {
    const auto t0 = kvphase::bench::clock_type::now();
    auto out = kc::compress<float>(s, none, xv);
    benchmark::DoNotOptimize(out.data());
    times.push_back(std::chrono::duration<double>(kvphase::bench::clock_type::now() - t0).count());
  }
  const double med = kvphase::bench::median(times);
  st.counters["median_us"] = med * 1e6;
  st.counters["roofline_frac"] = kvphase::bench::read_seconds(x.data(), 128, 1) / med;
  st.SetLabel(kvphase::bench::isa_name());
}

constexpr index_t n_full = 131072;
constexpr index_t n_smoke = 4096;

void BM_compress_gated_w8s4(benchmark::State& st) { run(st, gated_spec(), impl::library, n_full, false); }
void BM_compress_mean_w4s4(benchmark::State& st) { run(st, mean_spec(), impl::library, n_full, false); }
void BM_plain_loop_gated_w8s4(benchmark::State& st) { run(st, gated_spec(), impl::plain, n_full, false); }
void BM_plain_loop_mean_w4s4(benchmark::State& st) { run(st, mean_spec(), impl::plain, n_full, false); }
void BM_compress_gated_w8s4_cold(benchmark::State& st) { run(st, gated_spec(), impl::library, n_full, true); }
void BM_compress_mean_w4s4_cold(benchmark::State& st) { run(st, mean_spec(), impl::library, n_full, true); }
void BM_compress_gated_w8s4_cold_interleave4(benchmark::State& st) {
  run(st, gated_spec(), impl::library, n_full, true, 4);
}
void BM_compress_mean_w4s4_cold_interleave4(benchmark::State& st) { run(st, mean_spec(), impl::library, n_full, true, 4); }
void BM_plain_loop_gated_w8s4_cold(benchmark::State& st) { run(st, gated_spec(), impl::plain, n_full, true); }
void BM_smoke_compress_gated(benchmark::State& st) { run(st, gated_spec(), impl::library, n_smoke, false); }
void BM_smoke_compress_mean(benchmark::State& st) { run(st, mean_spec(), impl::library, n_smoke, false); }
void BM_smoke_plain_loop(benchmark::State& st) { run(st, gated_spec(), impl::plain, n_smoke, false); }

// ---- one row per operator kind -------------------------------------------------------------------

struct op_case {
  kc::operator_spec spec;
  kc::pool_params<float> p;
  index_t n = 0, d = 0;
};

op_case make_case(const std::string& kind, bool real) {
  op_case o;
  o.d = real ? 4096 : 128;
  o.n = real ? 16384 : 4096;
  if (real) {
    if (const char* env = std::getenv("KVPHASE_BENCH_TOKENS")) o.n = std::atoll(env);
  }
  const index_t c = real ? 512 : 128;
  kc::param_init init{.seed = 1};
  if (kind == "identity") o.spec = kc::full();
  else if (kind == "mean") o.spec = mean_spec();
  else if (kind == "max") o.spec = {.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::max};
  else if (kind == "weights") o.spec = gated_spec();
  else if (kind == "slot_gate") {
    o.spec = {.grid = {.window = 8, .stride = 8}, .pool = kc::pool_kind::slot_gate,
              .slot_bias = {0.1, -0.2, 0.3, 0.0, 0.5, -0.1, 0.2, 0.4}};
  } else {
    o.spec = kc::preset(kind);
    init = kc::preset_init(o.spec, 1);
    init.project_payload = true;
    init.out_dim = c;
    if (kind == "nsa") o.d = real ? 512 : 128;
    if (kind == "paper_ref") o.spec.separate_kv = false;
  }
  o.p = kc::make_params<float>(o.spec, o.d, init);
  return o;
}

void run_kind(benchmark::State& st, const std::string& kind, bool real) {
  const int threads = static_cast<int>(st.range(0));
  const op_case o = make_case(kind, real);
  const index_t n = o.n, dd = o.d;
  const index_t E = o.spec.grid.num_entries(n), c = o.p.output_dim(o.spec, dd);
  buffer x(static_cast<std::size_t>(n * dd), threads);
  buffer out(static_cast<std::size_t>(E * c), threads);
  const kvphase::matrix_view<float> xv(x.p, n, dd);
  kvphase::matrix_mut_view<float> ov(out.p, E, c);
  const kc::compress_options opt{.threads = threads};
  kc::compress_workspace<float> ws;
  auto job = [&] { kc::compress_into<float>(o.spec, o.p, xv, ov, 0, opt, &ws); };
  // bytes and FLOPs of the pass: compress/cost.hpp (the formulas kvphase-bench uses)
  const kc::pass_cost cost = kc::compress_cost(o.spec, o.p, dd, n);
  const double flops = cost.flops();
  job();
  // Paired: each iteration times the input read, the FMA peak (wall clock and per CPU-second)
  // and the job (wall clock and CPU seconds of the process) back to back.
  std::vector<double> times, cpus, roofs, peaks, peaks_cpu;
  for (auto _ : st) {
    roofs.push_back(kvphase::bench::read_seconds(x.p, x.n, threads, 1));
    peaks.push_back(kvphase::bench::fma_peak_gflops<float>(threads, 1));
    peaks_cpu.push_back(kvphase::bench::fma_peak_gflops_per_cpu_second<float>(threads, 1));
    const double c0 = kvphase::bench::process_cpu_seconds();
    time_iteration(st, job, times);
    cpus.push_back(kvphase::bench::process_cpu_seconds() - c0);
  }
  const double bytes = cost.bytes();
  // memory bound: reading the input and the parameters once at the paired input-read rate (the
  // output's stores are not counted: the bound errs high, as the project's other read rooflines)
  const double med = kvphase::bench::median(times), cpu = kvphase::bench::median(cpus);
  const double mem_sec = kvphase::bench::median(roofs) * cost.read_bytes() / (static_cast<double>(n * dd) * sizeof(float));
  const double peak = kvphase::bench::median(peaks), peak_cpu = kvphase::bench::median(peaks_cpu);
  const double fma_sec = flops / (peak * 1e9);
  st.counters["roofline_frac"] = std::max(mem_sec, fma_sec) / med;
  st.counters["fma_bound"] = fma_sec > mem_sec ? 1 : 0;
  st.counters["peak_frac_cpu"] = flops / cpu * 1e-9 / peak_cpu;
  st.counters["median_ms"] = med * 1e3;
  st.counters["GBps"] = bytes / med * 1e-9;
  st.counters["GFLOPps"] = flops / med * 1e-9;
  st.counters["GFLOP"] = flops * 1e-9;
  st.counters["MB"] = bytes * 1e-6;
  st.counters["peak_GFLOPps"] = peak;
  st.SetLabel(kvphase::bench::isa_name());
}

#define KV_KIND(kind)                                                                                         \
  void BM_kind_##kind##_small(benchmark::State& st) { run_kind(st, #kind, false); }                          \
  void BM_kind_##kind##_real(benchmark::State& st) { run_kind(st, #kind, true); }                            \
  BENCHMARK(BM_kind_##kind##_small)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(11); \
  BENCHMARK(BM_kind_##kind##_real)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5)
KV_KIND(identity);
KV_KIND(mean);
KV_KIND(max);
KV_KIND(weights);
KV_KIND(slot_gate);
KV_KIND(paper_ref);
KV_KIND(v41);
KV_KIND(v4_hca);
KV_KIND(v4_csa);
KV_KIND(nsa);
void BM_smoke_kind_v4_csa(benchmark::State& st) { run_kind(st, "v4_csa", false); }
BENCHMARK(BM_smoke_kind_v4_csa)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(2);

// ---- the pooling kernels' alternative walks against the per-entry kernel --------------------------
// Two engine paths that give every entry the per-entry kernel's bits and read the rows in
// another order (compress/pool.hpp): `pair_blocks`, a max pool on the V4-CSA grid (W = 8 = 2S)
// reading each 4-row block once and keeping its maxima for the next entry; `lockstep_rows`,
// narrow rows of a pool without overlap (W = S = 4 mean and max) pooled four entries at a time
// from four sub-ranges. Each row times the engine with the path on and the same engine with it
// off on the same buffers, alternating within every iteration after a paired input read, so
// both see the same machine load; outputs are compared bit for bit first. Args: threads, d, N
// (N·d = 2^26: 256 MiB in). Counters: path_ms / per_entry_ms (medians), speedup = per_entry /
// path, path_frac / per_entry_frac = fractions of the read bound (input once at the paired
// rate). Google Benchmark's Time column is the sum of both.
//   build/<dir>/benchmarks/bench_compress --benchmark_filter='_vs_entry' --benchmark_counters_tabular=true
using engine_t = kc::detail::engine<float, kvphase::simd::default_arch>;
void run_path_pair(benchmark::State& st, const kc::operator_spec& s, bool engine_t::*path) {
  using Arch = kvphase::simd::default_arch;
  const int threads = static_cast<int>(st.range(0));
  const index_t dd = st.range(1), n = st.range(2);
  const kc::pool_params<float> none;
  const index_t E = s.grid.num_entries(n);
  buffer x(static_cast<std::size_t>(n * dd), threads);
  buffer out_a(static_cast<std::size_t>(E * dd), threads), out_b(static_cast<std::size_t>(E * dd), threads);
  const engine_t with(s, none, dd, 0);
  engine_t without = with;
  without.*path = false;
  if (!(with.*path)) {
    st.SkipWithError("the path is not taken on this ISA or shape");
    return;
  }
  const kc::compress_options opt{.threads = threads};
  auto run_a = [&] { kc::detail::run_entries<float, Arch>(with, x.p, n, 0, 0, E, out_a.p, opt); };
  auto run_b = [&] { kc::detail::run_entries<float, Arch>(without, x.p, n, 0, 0, E, out_b.p, opt); };
  run_a();
  run_b();
  if (std::memcmp(out_a.p, out_b.p, static_cast<std::size_t>(E * dd) * sizeof(float)) != 0) {
    st.SkipWithError("the path and the per-entry kernel differ");
    return;
  }
  std::vector<double> ta, tb, roofs;
  bool a_first = true;
  for (auto _ : st) {
    roofs.push_back(kvphase::bench::read_seconds(x.p, x.n, threads, 1));
    if (a_first) {
      time_iteration(st, run_a, ta);
      time_iteration(st, run_b, tb);
    } else {
      time_iteration(st, run_b, tb);
      time_iteration(st, run_a, ta);
    }
    a_first = !a_first;
  }
  const double roof = kvphase::bench::median(roofs), a = kvphase::bench::median(ta), b = kvphase::bench::median(tb);
  st.counters["path_ms"] = a * 1e3;
  st.counters["per_entry_ms"] = b * 1e3;
  st.counters["speedup"] = b / a;
  st.counters["path_frac"] = roof / a;
  st.counters["per_entry_frac"] = roof / b;
  st.counters["roofline_ms"] = roof * 1e3;
  st.SetLabel(kvphase::bench::isa_name());
}
const kc::operator_spec max_w8s4{.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::max};
const kc::operator_spec max_w4s4{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::max};
void BM_max_w8s4_blocks_vs_entry(benchmark::State& st) { run_path_pair(st, max_w8s4, &engine_t::pair_blocks); }
void BM_mean_w4s4_lockstep_vs_entry(benchmark::State& st) { run_path_pair(st, mean_spec(), &engine_t::lockstep_rows); }
void BM_max_w4s4_lockstep_vs_entry(benchmark::State& st) { run_path_pair(st, max_w4s4, &engine_t::lockstep_rows); }
BENCHMARK(BM_max_w8s4_blocks_vs_entry)
    ->Args({1, 512, 131072})
    ->Args({1, 4096, 16384})
    ->Args({2, 512, 131072})
    ->Args({2, 4096, 16384})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(21);
#define KV_LOCKSTEP(fn)            \
  BENCHMARK(fn)                    \
      ->Args({1, 128, 524288})     \
      ->Args({1, 512, 131072})     \
      ->Args({1, 2048, 32768})     \
      ->Args({2, 128, 524288})     \
      ->Args({2, 512, 131072})     \
      ->UseManualTime()            \
      ->Unit(benchmark::kMillisecond) \
      ->Iterations(21)
KV_LOCKSTEP(BM_mean_w4s4_lockstep_vs_entry);
KV_LOCKSTEP(BM_max_w4s4_lockstep_vs_entry);
void BM_smoke_max_w8s4_blocks_vs_entry(benchmark::State& st) { BM_max_w8s4_blocks_vs_entry(st); }
void BM_smoke_mean_w4s4_lockstep_vs_entry(benchmark::State& st) { BM_mean_w4s4_lockstep_vs_entry(st); }
BENCHMARK(BM_smoke_max_w8s4_blocks_vs_entry)->Args({2, 72, 1024})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_smoke_mean_w4s4_lockstep_vs_entry)->Args({2, 72, 1024})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

// ---- the projection product alone ----------------------------------------------------------------
// V4-CSA's payload map at the real shape, X (16384 × 4096) · W_C (4096 × 1024), through
// detail::project_rows (the call the compressor makes, GEMM kernel of compress/detail/gemm.hpp),
// against the FMA peak measured beside each iteration. Args: threads, and the input's pages (0:
// 2 MiB huge pages requested, 1: 4 KiB pages; docs/performance.md compares the two).
void BM_gemm_v4_csa_projection(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  const bool huge = st.range(1) == 0;
  const index_t n = 16384, d = 4096, cols = 1024;
  buffer x(static_cast<std::size_t>(n * d), threads, huge ? "huge" : "small");
  buffer out(static_cast<std::size_t>(n * cols), threads, huge ? "huge" : "small");
  kvphase::matrix_t<float> w(d, cols);
  for (index_t i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>((i * 40503u) % 997) * 1e-4f - 0.05f;
  auto job = [&] { kc::detail::project_rows<float, kvphase::simd::default_arch>(x.p, d, n, d, w, out.p, threads); };
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(d) * static_cast<double>(cols);
  job();
  std::vector<double> times, peaks;
  for (auto _ : st) {
    peaks.push_back(kvphase::bench::fma_peak_gflops<float>(threads, 1));
    time_iteration(st, job, times);
  }
  const double med = kvphase::bench::median(times), peak = kvphase::bench::median(peaks);
  st.counters["peak_frac"] = flops / med * 1e-9 / peak;
  st.counters["median_ms"] = med * 1e3;
  st.counters["GFLOPps"] = flops / med * 1e-9;
  st.counters["peak_GFLOPps"] = peak;
  st.SetLabel(std::string(kvphase::bench::isa_name()) + (huge ? " huge pages" : " 4 KiB pages"));
}
BENCHMARK(BM_gemm_v4_csa_projection)
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({2, 0})
    ->Args({2, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

// ---- reading + dequantising a safetensors file -------------------------------------------------
// One tensor of `bytes` bytes (F32 or BF16) in a file under the temp directory, memory-mapped
// (warm: in the page cache and mapped after the first pass) and converted to float in pieces of
// 64 Ki elements that stay in cache. Roofline: reading the same number of bytes once from a
// private buffer (read_seconds), paired per iteration as for the compressor.
std::string tensor_file(kvphase::io::tensor_dtype dt, std::size_t bytes) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         ("kvphase_bench_" + std::string(kvphase::io::to_string(dt)) + "_" + std::to_string(bytes) +
                          ".safetensors"))
                            .string();
  const std::size_t n = bytes / kvphase::io::dtype_size(dt);
  std::string h = std::string(R"({"t":{"dtype":")") + kvphase::io::to_string(dt) + R"(","shape":[)" + std::to_string(n) +
                  R"(],"data_offsets":[0,)" + std::to_string(bytes) + "]}}";
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  const std::uint64_t hl = h.size();
  f.write(reinterpret_cast<const char*>(&hl), 8);
  f << h;
  std::vector<char> piece(std::size_t(1) << 20, 1);
  for (std::size_t w = 0; w < bytes; w += piece.size()) f.write(piece.data(), static_cast<std::streamsize>(std::min(piece.size(), bytes - w)));
  return p;
}

void run_read(benchmark::State& st, kvphase::io::tensor_dtype dt, std::size_t bytes) {
  const std::string path = tensor_file(dt, bytes);
  const kvphase::io::safetensors_file file(path);
  std::filesystem::remove(path);  // the mapping stays valid; no file is left behind
  const buffer x(bytes / sizeof(float), 1);
  float acc = 0;
  auto job = [&] {
    file.for_each_chunk<float>("t", std::size_t(1) << 16, [&](std::span<const float> piece, std::uint64_t) { acc += piece[0]; });
  };
  job();  // first touch: page cache and mapping
  std::vector<double> times, roofs;
  for (auto _ : st) {
    roofs.push_back(kvphase::bench::read_seconds(x.p, x.n, 1, 1));
    time_iteration(st, job, times);
  }
  benchmark::DoNotOptimize(acc);
  const double roof = kvphase::bench::median(roofs), med = kvphase::bench::median(times);
  st.SetBytesProcessed(static_cast<std::int64_t>(static_cast<double>(bytes) * static_cast<double>(st.iterations())));
  st.counters["roofline_frac"] = roof / med;
  st.counters["median_ms"] = med * 1e3;
  st.counters["roofline_ms"] = roof * 1e3;
  st.counters["GBps_median"] = static_cast<double>(bytes) / med * 1e-9;
  st.SetLabel(kvphase::bench::isa_name());
}

void BM_read_safetensors_f32(benchmark::State& st) { run_read(st, kvphase::io::tensor_dtype::f32, std::size_t(256) << 20); }
void BM_read_safetensors_bf16(benchmark::State& st) { run_read(st, kvphase::io::tensor_dtype::bf16, std::size_t(256) << 20); }
void BM_smoke_read_safetensors_bf16(benchmark::State& st) {
  run_read(st, kvphase::io::tensor_dtype::bf16, std::size_t(1) << 20);
}

}  // namespace

#define KV_FULL(fn) BENCHMARK(fn)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(41)
#define KV_COLD(fn) BENCHMARK(fn)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(15)
#define KV_SMOKE(fn) BENCHMARK(fn)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(3)

KV_FULL(BM_compress_gated_w8s4);
KV_FULL(BM_compress_mean_w4s4);
KV_FULL(BM_plain_loop_gated_w8s4);
KV_FULL(BM_plain_loop_mean_w4s4);
KV_COLD(BM_compress_gated_w8s4_cold);
KV_COLD(BM_compress_mean_w4s4_cold);
KV_COLD(BM_compress_gated_w8s4_cold_interleave4);
KV_COLD(BM_compress_mean_w4s4_cold_interleave4);
KV_COLD(BM_plain_loop_gated_w8s4_cold);
BENCHMARK(BM_compress_call_16x8)->Unit(benchmark::kMicrosecond);
KV_SMOKE(BM_smoke_compress_gated);
KV_SMOKE(BM_smoke_compress_mean);
KV_SMOKE(BM_smoke_plain_loop);

BENCHMARK(BM_read_safetensors_f32)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(11);
BENCHMARK(BM_read_safetensors_bf16)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(11);
BENCHMARK(BM_smoke_read_safetensors_bf16)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(3);

BENCHMARK_MAIN();
