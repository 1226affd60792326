// Phase-sweep throughput, as fractions of the library's own Gaussian generator measured in the
// same process (reference/performance.md §1 job C):
//   BM_generator/threads:T        normals/s of sim::normal_generator (per core and total), the
//                                 in-process FMA peak around it, normals per FMA cycle and
//                                 target_frac = that / the target's 0.857 (see below);
//   BM_generator_variants         1 thread, raw engine loop: v0 = generic xsimd transform one block
//                                 at a time (the earlier generator), v1 = the library's engine;
//                                 their median ratio from alternating back-to-back runs;
//   BM_key_space/threads:T        needle trials/s at N = 8192, d = 64, W = S = 4 mean, compressed
//                                 and full models on the same keys; gen_frac = trials/s × normals
//                                 per trial / generator normals/s at the same thread count;
//   BM_score_space/threads:T      the same trials by the exact score-space engine (N normals);
//   BM_general_stages/N           the general (faithful) path's stages, one thread, d = 64, V4-CSA
//                                 (W = 8, S = 4, RoPE on 64 channels): FLOP per CPU-second of each
//                                 stage over the in-run FMA peak per CPU-second (<stage>_frac), and
//                                 the stage's time against its roofline bound (<stage>_roof):
//                                 max(FLOP / FMA peak, bytes / read bandwidth), bytes = the data
//                                 the stage must read and write once, the bandwidth read in-run over
//                                 a buffer of the stage's footprint (warm, as the stage runs):
//                                   projections  the compressor's token projections (detail::
//                                                project_rows into its workspace's buffers), random
//                                                V4 parameters (payload and gate maps, 64 × 128
//                                                each: 8·N·d·c FLOP)
//                                   pooling      compress::compress_into, planted parameters (no
//                                                maps; FLOP counted: the weighted sums, 2·E·2c·S;
//                                                the softmax's exponentials are not counted;
//                                                bytes: X in, entries out, and the workspace's
//                                                RoPE cache of (1 + rotated) doubles per entry
//                                                read, as the rope row counts its table)
//                                   pooling_rope8  the same with RoPE on the last 8 of the 64
//                                                channels: the paper-scale faithful run's
//                                                --rope-dim 8, V4's proportion (64 of 512)
//                                   rope         general_model::rotate_rows, N rows × 32 pairs
//                                                (6 FLOP per pair, double)
//                                   scoring      attention::score_rows, one query × N rows (2·N·d)
//                                   attention    attention::full_attention, one query, dv = 64
//                                                (2·N·(d + dv))
//                                   indexer_projection  V4's indexer (sim::model_config::indexer):
//                                                the token rows projected to dI = 128 channels
//                                                (project_rows, 2·N·d·dI)
//                                   indexer_scoring  attention::csa_select for one query, 64 index
//                                                heads of dI = 128 over the E index keys, top 512
//                                                (2·E·H·dI; the ReLUs, weights and top-k not
//                                                counted; bytes: the index keys)
//   *_smoke                       tiny versions for ctest.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <kvphase/attention/full.hpp>
#include <kvphase/attention/kernels.hpp>
#include <kvphase/attention/select.hpp>
#include <kvphase/compress/pool.hpp>
#include <kvphase/compress/presets.hpp>
#include <kvphase/sim/general_model.hpp>
#include <kvphase/sim/noise_scores.hpp>
#include <kvphase/sim/normal.hpp>
#include <kvphase/sim/sweep.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "roofline.hpp"

namespace {

using kvphase::index_t;
namespace sim = kvphase::sim;

/// Median over `repeats` of the generator's normals/s on `threads` threads (private 128 KiB
/// buffers, warm): the sum of every thread's own rate over its timed loop, so buffer set-up and
/// thread start-up are not counted against the generator.
double generator_rate(int threads, double seconds = 0.05, int repeats = 5) {
  const index_t n = 32768;
  std::vector<double> reps;
  for (int r = 0; r < repeats; ++r) {
    double rate = 0;
#pragma omp parallel num_threads(threads) reduction(+ : rate)
    {
      std::vector<float> buf(static_cast<std::size_t>(n));
      sim::normal_generator g(1, static_cast<std::uint64_t>(omp_get_thread_num()));
      g.fill(buf.data(), n);  // touch
      std::int64_t count = 0;
      const auto start = std::chrono::steady_clock::now();
      double el = 0;
      while ((el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) < seconds) {
        for (int k = 0; k < 16; ++k) g.fill(buf.data(), n);
        count += 16 * n;
      }
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      rate += static_cast<double>(count) / el;
      kvphase::bench::keep(buf[7]);
    }
    reps.push_back(rate);
  }
  return kvphase::bench::median(reps);
}

/// CPU time of the calling thread: rates per CPU-second stay meaningful on a shared, loaded machine.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Normals per CPU-second of the raw engine loop, 1 thread: variant 0 = generic xsimd transform one
/// block at a time (the previous generator), 1 = the library's engine (AVX-512 intrinsics, next2).
/// Same stream, so the two are directly comparable; run back to back, alternating, medians.
template <bool Native, bool Pairs>
double engine_rate(double seconds) {
  using E = sim::normal_engine<kvphase::simd::default_arch, Native>;
  constexpr index_t L = E::L;
  alignas(64) static float buf[32768];
  E e(sim::seed_normal_state(1, 0));
  typename E::block_type a, b;
  std::int64_t total = 0;
  const double start = thread_cpu_seconds();
  double el = 0;
  while ((el = thread_cpu_seconds() - start) < seconds) {
    for (int rep = 0; rep < 16; ++rep) {
      for (index_t i = 0; i < 32768; i += 64) {
        if constexpr (Pairs) {
          e.next2(a, b);
        } else {
          e.next(a);
          e.next(b);
        }
        for (std::size_t k = 0; k < a.size(); ++k) a[k].store_aligned(buf + i + static_cast<index_t>(k) * L);
        for (std::size_t k = 0; k < b.size(); ++k) b[k].store_aligned(buf + i + 32 + static_cast<index_t>(k) * L);
      }
      total += 32768;
    }
  }
  kvphase::bench::keep(buf[7]);
  return static_cast<double>(total) / el;
}

void BM_generator_variants(benchmark::State& state) {
  std::vector<double> v0, v1, ratio;
  for (auto _ : state) {
    for (int r = 0; r < 5; ++r) {
      const double a = engine_rate<false, false>(0.02);
      const double b = engine_rate<true, true>(0.02);
      v0.push_back(a);
      v1.push_back(b);
      ratio.push_back(b / a);
    }
  }
  state.counters["v0_generic_per_core"] = kvphase::bench::median(v0);
  state.counters["v1_native_per_core"] = kvphase::bench::median(v1);
  state.counters["v1_over_v0"] = kvphase::bench::median(ratio);
}

double cached_generator_rate(int threads) {
  static std::map<int, double> rates;
  auto it = rates.find(threads);
  if (it == rates.end()) it = rates.emplace(threads, generator_rate(threads)).first;
  return it->second;
}

/// The generator target (3·10⁹ normals/s per core) was set from reference measurements on an
/// AMD Zen 5 whose in-process FMA peak was 224 GFLOP/s per core: 64 FLOP per cycle of two 16-lane
/// FMAs, so 3.5·10⁹ such cycles/s and 0.857 normals per FMA cycle. The clock differs between
/// machines and moves by ±20 % on this shared VM, so the run also reports its own FMA peak and the
/// rate in normals per FMA cycle (across microarchitectures an indication, not an identity).
constexpr double generator_target_per_fma_cycle = 3e9 / (224e9 / 64.0);

void BM_generator(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double rate = 0, peak = 0;
  for (auto _ : state) {
    const double p0 = kvphase::bench::fma_peak_gflops(threads);
    rate = generator_rate(threads, 0.02);
    peak = 0.5 * (p0 + kvphase::bench::fma_peak_gflops(threads));
  }
  const double cycles_per_s = peak * 1e9 / threads / 64.0;  // FMA cycles per second per core
  state.counters["normals_per_s"] = rate;
  state.counters["normals_per_s_per_core"] = rate / threads;
  state.counters["fma_peak_gflops_per_core"] = peak / threads;
  state.counters["normals_per_fma_cycle"] = rate / threads / cycles_per_s;
  state.counters["target_frac"] = rate / threads / cycles_per_s / generator_target_per_fma_cycle;
}

sim::sweep_config needle_config(index_t N, sim::engine_kind e, int threads, index_t trials_per_group) {
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{};
  c.task = kvphase::tasks::needle_config{.context = N, .dim = 64};
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = kvphase::compress::pool_kind::mean};
  c.engine = e;
  c.threads = threads;
  c.trials = trials_per_group;
  c.compute_mass = false;  // as kvphase-sweep runs it: hits and margins
  return c;
}

/// fresh_rate: after every timed sweep, the generator runs on the same threads for ~1/4 of the
/// sweep's time, so the two rates are sampled alternately under the same clock and load (this VM's
/// clock moves by ±20 % within seconds); gen_frac is the ratio of the two aggregate rates.
/// Smoke runs use the cached rate.
void run_trials(benchmark::State& state, index_t N, sim::engine_kind e, index_t trials_per_group,
                bool fresh_rate = true) {
  const int threads = static_cast<int>(state.range(0));
  auto c = needle_config(N, e, threads, trials_per_group);
  std::int64_t trials = 0;
  std::uint64_t seed = 1;
  double secs = 0, gen_sum = 0, gen_secs = 0;
  for (auto _ : state) {
    c.seed = seed++;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = sim::run_sweep(c);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(dt);
    secs += dt;
    trials += r.total_trials();
    benchmark::DoNotOptimize(r.compressed.data());
    if (fresh_rate) {
      const double g = generator_rate(threads, dt / 4, 1);
      gen_sum += g * dt / 4;
      gen_secs += dt / 4;
    }
  }
  const double gen = fresh_rate ? gen_sum / gen_secs : cached_generator_rate(threads);
  // normals per trial: the query key (⌈d/32⌉ blocks) and the noise keys or scores
  const index_t d = c.task.get<kvphase::tasks::needle_config>().dim;
  const double normals = static_cast<double>(((d + 31) / 32) * 32) +
                         (e == sim::engine_kind::key ? static_cast<double>(sim::key_space_normals(N, d))
                                                     : static_cast<double>(((N + 31) / 32) * 32));
  state.counters["trials_per_s"] = static_cast<double>(trials) / secs;
  state.counters["normals_per_trial"] = normals;
  state.counters["gen_normals_per_s"] = gen;
  state.counters["gen_frac"] = static_cast<double>(trials) * normals / secs / gen;
  state.SetItemsProcessed(trials);
}


/// CPU seconds per call of f: calls repeated until `seconds` of CPU, median of `reps` such runs.
double stage_seconds(const std::function<void()>& f, double seconds, int reps = 5) {
  std::vector<double> per_call;
  f();  // warm (buffers, tables)
  for (int r = 0; r < reps; ++r) {
    std::int64_t calls = 0;
    const double c0 = thread_cpu_seconds();
    double el = 0;
    while ((el = thread_cpu_seconds() - c0) < seconds) {
      f();
      ++calls;
    }
    per_call.push_back(el / static_cast<double>(calls));
  }
  return kvphase::bench::median(per_call);
}

/// One stage: its FLOP and the bytes it must move per call, and its measured time per call.
struct stage_row {
  double flop = 0, bytes = 0, seconds = 0;
};

/// The general path's stages at N tokens, d = 64 (see the file comment): one thread.
void general_stages(benchmark::State& state, double seconds, int peak_reps) {
  namespace compress = kvphase::compress;
  namespace attention = kvphase::attention;
  using kvphase::matrix_t;
  const index_t N = state.range(0), d = 64;
  const compress::operator_spec op = compress::v4_csa();
  const index_t E = op.grid.num_entries(N), S = op.grid.stride;
  matrix_t<float> X(N, d);
  sim::normal_state st = sim::seed_normal_state(1, 0);
  std::vector<float> blocks;
  sim::key_space_keys(st, d, X.data(), N, blocks);
  const auto rnd = compress::make_preset_params<float>(op, d, 1);
  const auto planted = compress::planted_params<float>(op, d, compress::params_kind::planted_early);
  compress::operator_spec op8 = op;
  op8.rope.rope_dim = 8;
  const auto planted8 = compress::planted_params<float>(op8, d, compress::params_kind::planted_early);
  matrix_t<float> out(E, d);
  compress::compress_workspace<float> ws, ws8;
  const compress::compress_options one{.threads = 1};
  // the projection buffers, sized once (a sweep's workspace keeps them across calls)
  ws.pay.resize(static_cast<std::size_t>(N * rnd.w_c.cols()));
  ws.z.resize(static_cast<std::size_t>(N * rnd.w_z.cols()));
  // the model only for its RoPE table: value width 2 keeps its rows d + 2 wide
  sim::model_config mc;
  mc.params = compress::params_kind::planted_early;
  const sim::general_model gm(op, d, 2, 128, mc, 0);
  matrix_t<float> R(N, gm.width());
  R.setZero();
  matrix_t<float> q(1, d), o(1, d);
  for (index_t i = 0; i < d; ++i) q(0, i) = X(N / 2, i);
  std::vector<float> s(static_cast<std::size_t>(N));
  // V4's indexer: 64 heads of width 128, the index keys' projection and the index keys
  const index_t dI = 128, HI = 64;
  matrix_t<float> PK(d, dI), XI(N, dI), KI(E, dI), QI(1, HI * dI), WI(1, HI);
  kvphase::compress::detail::fill_normal<float>(PK, 1, "bench.indexer_key_projection", 0, 1.0 / std::sqrt(double(dI)));
  kvphase::compress::detail::fill_normal<float>(KI, 1, "bench.index_keys", 0, 1.0);
  kvphase::compress::detail::fill_normal<float>(QI, 1, "bench.index_queries", 0, 1.0);
  WI.setConstant(1.0f / static_cast<float>(HI));
  const index_t last[1] = {N - 1};
  const double dd = static_cast<double>(d), NN = static_cast<double>(N);
  const int pairs = static_cast<int>(op.rope.rope_dim / 2);
  std::map<std::string, stage_row> g;
  const double f4 = sizeof(float), xb = NN * dd * f4;  // bytes of the token rows
  double peak = 0, bw = 0;
  for (auto _ : state) {
    const double p0 = kvphase::bench::fma_peak_gflops_per_cpu_second<float>(1, peak_reps);
    // the read bound at the stages' footprint (the token rows, warm)
    const double bw0 = kvphase::bench::read_bandwidth_gbs(static_cast<std::size_t>(xb), 1);
    // projections: X in, payload and gate logits out (N × 2c each, c = d)
    // (the compressor's own calls into its workspace's buffers, as run_entries makes them)
    g["projections"] = {8.0 * NN * dd * dd, xb + 4.0 * xb, stage_seconds([&] {
      compress::detail::project_rows<float, kvphase::simd::default_arch>(X.data(), d, N, d, rnd.w_c, ws.pay.data(), 1,
                                                                         &rnd.w_z, ws.z.data());
      kvphase::bench::keep(ws.pay[0] + ws.z[0]);
    }, seconds)};
    // pooling: X in, E entries out, and the workspace's RoPE cache read (per entry its anchor
    // position and a cosine and a sine per rotated pair, doubles: compress_workspace::rope_cs), as
    // the rope row counts its table
    const double ee = static_cast<double>(E);
    auto rope_cache_bytes = [&](const compress::operator_spec& o) {
      if (o.rope.anchor == compress::rope_anchor::none) return 0.0;
      return ee * (1.0 + static_cast<double>(o.rope.rope_dim == 0 ? d : o.rope.rope_dim)) * 8.0;
    };
    g["pooling"] = {2.0 * ee * 2.0 * dd * static_cast<double>(S), xb + ee * dd * f4 + rope_cache_bytes(op),
                    stage_seconds([&] {
      compress::compress_into<float>(op, planted, kvphase::matrix_view<float>(X.data(), N, d), kvphase::matrix_mut_view<float>(out.data(), E, d), 0,
                                     one, &ws);
      kvphase::bench::keep(out(0, 0));
    }, seconds)};
    g["pooling_rope8"] = {g["pooling"].flop, xb + ee * dd * f4 + rope_cache_bytes(op8), stage_seconds([&] {
      compress::compress_into<float>(op8, planted8, kvphase::matrix_view<float>(X.data(), N, d),
                                     kvphase::matrix_mut_view<float>(out.data(), E, d), 0, one, &ws8);
      kvphase::bench::keep(out(0, 0));
    }, seconds)};
    // RoPE: the rotated channels read and written, the cos/sin table (two doubles per pair) read
    g["rope"] = {6.0 * NN * pairs, NN * pairs * (2.0 * 2.0 * f4 + 2.0 * 8.0), stage_seconds([&] {
      gm.rotate_rows(R.data(), N);
      kvphase::bench::keep(R(0, 0));
    }, seconds)};
    // scoring: the keys in, N scores out
    g["scoring"] = {2.0 * NN * dd, xb + NN * f4, stage_seconds([&] {
      attention::score_rows<float>(q.data(), X.data(), d, N, d, 0.125f, s.data());
      kvphase::bench::keep(s[7]);
    }, seconds)};
    // one-query attention: keys and values in (the same rows here, read as two operands)
    g["attention"] = {2.0 * NN * (dd + dd), 2.0 * xb, stage_seconds([&] {
      attention::full_attention<float>(q, X, X, attention::attention_params{.scale = 0.125, .threads = 1}, o);
      kvphase::bench::keep(o(0, 0));
    }, seconds)};
    // V4's indexer: the token rows in, the projected rows out; the index keys in, the list out
    const double ddI = static_cast<double>(dI);
    g["indexer_projection"] = {2.0 * NN * dd * ddI, xb + NN * ddI * f4, stage_seconds([&] {
      compress::detail::project_rows<float, kvphase::simd::default_arch>(X.data(), d, N, d, PK, XI.data(), 1);
      kvphase::bench::keep(XI(0, 0));
    }, seconds)};
    g["indexer_scoring"] = {2.0 * static_cast<double>(E) * static_cast<double>(HI) * ddI, static_cast<double>(E) * ddI * f4,
                            stage_seconds([&] {
      const auto l = attention::csa_select<float>(QI, WI, KI, op.grid, last, attention::indexer_params{.heads = HI, .top_k = 512});
      kvphase::bench::keep(static_cast<float>(l.indices[0]));
    }, seconds)};
    peak = 0.5 * (p0 + kvphase::bench::fma_peak_gflops_per_cpu_second<float>(1, peak_reps));
    bw = 0.5 * (bw0 + kvphase::bench::read_bandwidth_gbs(static_cast<std::size_t>(xb), 1));
  }
  state.counters["fma_peak_gflops"] = peak;
  state.counters["read_gbs"] = bw;
  for (const auto& [k, v] : g) {
    const double gf = v.flop / v.seconds * 1e-9;
    const double bound = std::max(v.flop / (peak * 1e9), v.bytes / (bw * 1e9));
    state.counters[k + "_gflops"] = gf;
    state.counters[k + "_frac"] = gf / peak;
    state.counters[k + "_gbs"] = v.bytes / v.seconds * 1e-9;
    state.counters[k + "_roof"] = bound / v.seconds;
  }
}
void BM_general_stages(benchmark::State& state) { general_stages(state, 0.05, 7); }
void BM_general_stages_smoke(benchmark::State& state) { general_stages(state, 0.001, 1); }

void BM_key_space(benchmark::State& state) { run_trials(state, 8192, sim::engine_kind::key, 64); }
void BM_score_space(benchmark::State& state) { run_trials(state, 8192, sim::engine_kind::score, 2048); }
void BM_key_space_smoke(benchmark::State& state) { run_trials(state, 1024, sim::engine_kind::key, 4, false); }
void BM_score_space_smoke(benchmark::State& state) { run_trials(state, 1024, sim::engine_kind::score, 16, false); }
void BM_generator_smoke(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<float> buf(4096);
    sim::normal_generator g(1, 2);
    g.fill(buf.data(), 4096);
    benchmark::DoNotOptimize(buf.data());
  }
}

}  // namespace

BENCHMARK(BM_generator)->ArgName("threads")->Arg(1)->Arg(2)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_generator_variants)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_key_space)->ArgName("threads")->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_score_space)->ArgName("threads")->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_key_space_smoke)->ArgName("threads")->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_score_space_smoke)->ArgName("threads")->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_generator_smoke)->UseRealTime();
BENCHMARK(BM_general_stages)->ArgName("N")->Arg(32768)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_general_stages_smoke)->ArgName("N")->Arg(1024)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
