// sim: fused key-space scores, the linear model against the compressor, the sweep engine's
// determinism (threads, shards), agreement of the key- and score-space engines, and the phase
// effects with known answers.
#include <catch2/catch.hpp>

#include <kvphase/compress/pool.hpp>
#include <kvphase/compress/presets.hpp>
#include <kvphase/core/simd.hpp>
#include <kvphase/sim/linear_model.hpp>
#include <kvphase/sim/noise_scores.hpp>
#include <kvphase/sim/shard.hpp>
#include <kvphase/sim/sweep.hpp>
#include <kvphase/tasks/kv_pairs.hpp>
#include <kvphase/tasks/needle.hpp>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/sweep_configs.hpp"
#include "support/tolerance.hpp"

using kvphase::index_t;
namespace sim = kvphase::sim;
namespace simd = kvphase::simd;
namespace tasks = kvphase::tasks;
namespace compress = kvphase::compress;

TEST_CASE("key-space scores: layout of the stream and every SIMD path", "[sim][kernel]") {
  for (index_t d : {1, 2, 7, 64, 65}) {
    for (index_t n : {1, 15, 16, 17, 100}) {
      std::vector<float> q(static_cast<std::size_t>(d));
      std::mt19937 rng(static_cast<unsigned>(d * 1000 + n));
      std::normal_distribution<float> nd;
      for (auto& v : q) v = nd(rng);
      const auto st0 = sim::seed_normal_state(7, static_cast<std::uint64_t>(d * 131 + n));
      // Reference: the documented layout, from the block stream, summed in double.
      std::vector<double> ref(static_cast<std::size_t>(n));
      std::vector<double> absum(static_cast<std::size_t>(n));
      {
        sim::normal_generator g(st0);
        const index_t per = (d + 1) / 2;
        std::vector<float> blk(32);
        for (index_t t0 = 0; t0 < n; t0 += 16) {
          for (index_t i = 0; i < per; ++i) {
            g.fill(blk.data(), 32);
            for (index_t j = 0; j < 16 && t0 + j < n; ++j) {
              const double x0 = blk[static_cast<std::size_t>(j)], x1 = blk[static_cast<std::size_t>(16 + j)];
              ref[static_cast<std::size_t>(t0 + j)] += q[static_cast<std::size_t>(2 * i)] * x0;
              absum[static_cast<std::size_t>(t0 + j)] += std::abs(q[static_cast<std::size_t>(2 * i)] * x0);
              if (2 * i + 1 < d) {
                ref[static_cast<std::size_t>(t0 + j)] += q[static_cast<std::size_t>(2 * i + 1)] * x1;
                absum[static_cast<std::size_t>(t0 + j)] += std::abs(q[static_cast<std::size_t>(2 * i + 1)] * x1);
              }
            }
          }
        }
      }
      std::vector<float> scalar_out(static_cast<std::size_t>(n));
      {
        auto st = st0;
        sim::key_space_scores<simd::scalar>(st, q.data(), d, scalar_out.data(), n);
        CHECK(std::memcmp(&st, &st0, sizeof st) != 0);
      }
      simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        INFO("arch " << simd::arch_name<Arch>() << " d " << d << " n " << n);
        auto st = st0;
        std::vector<float> out(static_cast<std::size_t>(n));
        sim::key_space_scores<Arch>(st, q.data(), d, out.data(), n);
        // Paths without single-rounding FMA (sse2) also round the generator differently: each
        // normal is within 11.1u·r ≤ 11.1u·5.9 of the exact value (test_sim_normal.cpp), twice
        // that between two paths, weighted by |q_c|.
        double qabs = 0;
        for (float v : q) qabs += std::abs(v);
        const double gen_err = (simd::is_scalar_v<Arch> || sim::detail::fused_fma_v<Arch>)
                                   ? 0.0
                                   : qabs * 2 * kvphase::test::rel_bound<float>(2 * 11.1) * 5.9;
        for (index_t t = 0; t < n; ++t) {
          const double bound =
              kvphase::test::dot_error_bound<float>(static_cast<std::size_t>(d), absum[static_cast<std::size_t>(t)]) + gen_err;
          CHECK(std::abs(out[static_cast<std::size_t>(t)] - ref[static_cast<std::size_t>(t)]) <= bound);
        }
        // same order, single-rounding FMA on both sides
        if constexpr (simd::is_scalar_v<Arch> || sim::detail::fused_fma_v<Arch>) CHECK(out == scalar_out);
        // the stream advanced by exactly key_space_normals / 32 blocks
        sim::normal_generator g(st0);
        std::vector<float> skip(static_cast<std::size_t>(sim::key_space_normals(n, d)));
        g.fill(skip.data(), static_cast<index_t>(skip.size()));
        CHECK(std::memcmp(&g.state(), &st, sizeof st) == 0);
      });
    }
  }
}

TEST_CASE("linear model: pooled scores equal q · compressed keys of the compressor", "[sim][linear]") {
  // N = 61: fewer entries than a batch (scalar tail only); N = 203: the vectorised entries too
  for (const index_t N : {index_t(61), index_t(203)}) {
  INFO("N = " << N);
  const index_t d = 8;
  std::mt19937 rng(3);
  std::normal_distribution<double> nd;
  kvphase::matrix_t<double> K(N, d);
  for (index_t i = 0; i < N; ++i)
    for (index_t c = 0; c < d; ++c) K(i, c) = nd(rng);
  std::vector<double> q(static_cast<std::size_t>(d));
  for (auto& v : q) v = nd(rng);
  std::vector<compress::operator_spec> specs{
      {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean},
      {.grid = {.window = 8, .stride = 4, .origin = 2}, .pool = compress::pool_kind::mean},
      {.grid = {.window = 6, .stride = 3, .origin = 1}, .pool = compress::pool_kind::weights,
       .slot_weights = {1, 2, 3, 0.5, 0.25, 4}},
      {.grid = {.window = 8, .stride = 4}, .pool = compress::pool_kind::slot_gate,
       .slot_bias = {0.5, -1, 2, 0, 1, 0.3, -0.2, 3}},
      {.grid = {.window = 5, .stride = 5, .origin = 3, .convention = compress::grid_convention::nsa},
       .pool = compress::pool_kind::slot_gate, .slot_bias = {3, 0, 0, 0, 0}},
  };
  for (const auto& spec : specs) {
    INFO(spec);
    const auto C = compress::compress<double>(spec, K);
    std::vector<float> s(static_cast<std::size_t>(N));
    for (index_t i = 0; i < N; ++i) {
      double v = 0;
      for (index_t c = 0; c < d; ++c) v += K(i, c) * q[static_cast<std::size_t>(c)];
      s[static_cast<std::size_t>(i)] = static_cast<float>(v);
    }
    sim::linear_model m(spec, 5);
    sim::linear_buffers b;
    m.pool(s.data(), nullptr, N, b);
    REQUIRE(b.n_entries == C.rows());
    REQUIRE(b.n_window == 5);
    for (index_t e = 0; e < C.rows(); ++e) {
      double ref = 0, mag = 0;
      for (index_t c = 0; c < d; ++c) ref += C(e, c) * q[static_cast<std::size_t>(c)];
      // float token scores (rounded once) pooled over ≤ W slots in float
      const auto r = spec.grid.sources(e);
      for (index_t t = std::max<index_t>(r.first, 0); t <= r.last; ++t) mag += std::abs(s[static_cast<std::size_t>(t)]);
      const double bound = kvphase::test::rel_bound<float>(2.0 * (spec.grid.window + 4)) * (mag + 1e-300) + 1e-12;
      CHECK(std::abs(b.entry[static_cast<std::size_t>(e)] - ref) <= bound);
    }
    for (index_t i = 0; i < 5; ++i) CHECK(b.entry[static_cast<std::size_t>(C.rows() + i)] == s[static_cast<std::size_t>(N - 5 + i)]);
  }
  }
  // unsupported operators are rejected by name
  compress::operator_spec mx{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::max};
  CHECK_THROWS_WITH(sim::linear_model(mx, 0), Catch::Contains("pool") && Catch::Contains("max"));
}

TEST_CASE("linear model: vectorised pooling equals fmas in slot order on every SIMD path", "[sim][linear][kernel]") {
  // Strides 1, 2, 4 take the permute path on 512-bit batches, 3, 5, 8 the gather; windows
  // W = S, S + 1, 2S; the token buffer holds exactly N floats and N runs over 16·S + 2
  // consecutive values, so the last permute batch ends on every offset from the buffer's end (the
  // sanitizer build checks that no path reads past it) and a scalar tail of every length occurs.
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (const index_t S : {1, 2, 3, 4, 5, 8}) {
    for (const index_t W : {S, S + 1, 2 * S}) {
      for (index_t extra = 0; extra < 16 * S + 2; ++extra)
      for (index_t origin = 0; origin < S; ++origin) {
        const index_t N = 16 * S * 4 + W + extra;
        compress::operator_spec spec{.grid = {.window = W, .stride = S, .origin = origin},
                                     .pool = compress::pool_kind::weights};
        spec.slot_weights.resize(static_cast<std::size_t>(W));
        for (auto& v : spec.slot_weights) v = std::abs(nd(rng)) + 0.1;
        const sim::linear_model m(spec, 0);
        const sim::linear_buffers unused;
        std::vector<float> s(static_cast<std::size_t>(N));
        for (auto& v : s) v = nd(rng);
        const index_t E = spec.grid.num_entries(N);
        index_t e0 = 0;
        while (e0 < E && spec.grid.sources(e0).first < 0) ++e0;
        REQUIRE(E - e0 >= 32);
        const index_t f0 = spec.grid.sources(e0).first - e0 * S;
        // reference: the documented order, fma per slot, in float
        std::vector<float> ref(static_cast<std::size_t>(E), 0.0f), absref(static_cast<std::size_t>(E), 0.0f);
        for (index_t e = e0; e < E; ++e) {
          float acc = 0, mag = 0;
          for (index_t r = 0; r < W; ++r) {
            const float wr = m.weight(unused, e, r);
            acc = std::fma(wr, s[static_cast<std::size_t>(f0 + e * S + r)], acc);
            mag += std::abs(wr * s[static_cast<std::size_t>(f0 + e * S + r)]);
          }
          ref[static_cast<std::size_t>(e)] = acc;
          absref[static_cast<std::size_t>(e)] = mag;
        }
        simd::for_each_arch([&](auto arch) {
          using Arch = decltype(arch);
          INFO("arch " << simd::arch_name<Arch>() << " S " << S << " W " << W << " N " << N << " origin " << origin);
          std::vector<float> es(static_cast<std::size_t>(E), -1.0f);
          m.pool_unmasked<Arch>(s.data(), N, es.data(), e0, E, f0);
          for (index_t e = e0; e < E; ++e) {
            if constexpr (simd::is_scalar_v<Arch> || sim::detail::fused_fma_v<Arch>) {
              CHECK(es[static_cast<std::size_t>(e)] == ref[static_cast<std::size_t>(e)]);
            } else {
              const double bound = kvphase::test::rel_bound<float>(2.0 * W + 2) * absref[static_cast<std::size_t>(e)];
              CHECK(std::abs(es[static_cast<std::size_t>(e)] - ref[static_cast<std::size_t>(e)]) <= bound);
            }
          }
          for (index_t e = 0; e < e0; ++e) CHECK(es[static_cast<std::size_t>(e)] == -1.0f);
        });
      }
    }
  }
}

TEST_CASE("needle placement: residue matched, absolute positions matched across groups", "[sim][tasks]") {
  tasks::needle_config c{.context = 4096, .dim = 8, .key_span = 2, .value_span = 1};
  const index_t M = 8, reserve = 20;
  std::vector<double> mean(M), sd(M);
  const int n = 20000;
  for (index_t g = 0; g < M; ++g) {
    kvphase::rng::philox_stream s(11, static_cast<std::uint64_t>(g));
    double m1 = 0, m2 = 0;
    for (int i = 0; i < n; ++i) {
      const index_t p = tasks::needle_position(c, M, g, 3, reserve, s);
      REQUIRE(kvphase::floor_mod(p - 3, M) == g);
      REQUIRE(p >= 0);
      REQUIRE(p + c.span() <= c.context - reserve);
      m1 += static_cast<double>(p);
      m2 += static_cast<double>(p) * static_cast<double>(p);
    }
    mean[static_cast<std::size_t>(g)] = m1 / n;
    sd[static_cast<std::size_t>(g)] = std::sqrt(m2 / n - (m1 / n) * (m1 / n));
  }
  for (index_t g = 1; g < M; ++g) {
    // two independent sample means: 5-sigma bound on their difference
    const double se = std::sqrt(2.0 / n) * sd[0];
    CHECK(std::abs(mean[static_cast<std::size_t>(g)] - mean[0]) <= 5 * se);
  }
}

TEST_CASE("kv_pairs layout: ordered, disjoint, inside the context, target at its residue", "[sim][tasks]") {
  tasks::kv_pairs_config c{.context = 20000, .dim = 8, .pairs = 2000, .key_span = 2, .value_span = 3};
  tasks::kv_layout L;
  for (index_t g = 0; g < 8; ++g) {
    for (int rep = 0; rep < 20; ++rep) {
      kvphase::rng::philox_stream s(5, static_cast<std::uint64_t>(g * 100 + rep));
      tasks::kv_pairs_layout(c, 8, g, 0, s, L);
      REQUIRE(static_cast<index_t>(L.start.size()) == c.pairs);
      REQUIRE(kvphase::floor_mod(L.start[static_cast<std::size_t>(L.target)], 8) == g);
      REQUIRE(L.start[0] >= 0);
      for (std::size_t j = 1; j < L.start.size(); ++j) REQUIRE(L.start[j] >= L.start[j - 1] + c.pair_span());
      REQUIRE(L.start.back() + c.pair_span() <= c.context);
    }
  }
  CHECK_THROWS_WITH((tasks::kv_pairs_config{.context = 1000, .pairs = 300}.validate(8)), Catch::Contains("context"));
  CHECK_THROWS_WITH((tasks::kv_pairs_config{.codes = 1}.validate(8)), Catch::Contains("codes"));
}


TEST_CASE("sweep: bitwise identical for 1 and 2 threads and any shard split", "[sim][determinism]") {
  for (auto t : {"needle", "kv-pairs", "padding"}) {
    for (auto e : {sim::engine_kind::key, sim::engine_kind::score}) {
      auto c = kvphase::test::small_sweep(t, e);
      INFO(c);
      const auto one = kvphase::test::check_threads_and_shards(c, {2, 3, 5});
      std::int64_t tot = 0;
      for (const auto& g : one.compressed) tot += g.trials;
      CHECK(tot == c.trials * c.groups());
    }
  }
}

TEST_CASE("sweep: progress.cancel stops the sweep, and never cancelling changes nothing", "[sim][progress]") {
  auto c = kvphase::test::small_sweep("needle", sim::engine_kind::score);
  for (int threads : {1, 2}) {
    c.threads = threads;
    const auto plain = sim::run_sweep(c);
    int polls = 0;
    sim::sweep_progress never{.report = {}, .interval = 0.0, .cancel = [&] { ++polls; return false; }};
    const auto same = sim::run_sweep(c, never);
    CHECK(same.compressed == plain.compressed);
    CHECK(same.full == plain.full);
    // polled by the calling thread after its own trials: with 2 threads it may (rarely) run none
    if (threads == 1) {
      CHECK(polls > 0);
      sim::sweep_progress stop{.report = {}, .interval = 0.0, .cancel = [] { return true; }};
      CHECK_THROWS_AS(sim::run_sweep(c, stop), sim::sweep_cancelled);
    }
  }
}

TEST_CASE("sweep: key-space and score-space engines agree per phase (5-sigma)", "[sim][engines]") {
  for (int variant = 0; variant < 2; ++variant) {
    sim::sweep_config c;
    c.task = kvphase::tasks::needle_config{.context = 1024, .dim = 32};
    c.trials = 1500;
    c.seed = 9;
    if (variant == 1) {
      c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate,
              .slot_bias = {1.5, 0, 0, 0.5}, .content_std = 0.7};
      c.window = 16;
    }
    c.engine = sim::engine_kind::key;
    const auto a = sim::run_sweep(c);
    c.engine = sim::engine_kind::score;
    const auto b = sim::run_sweep(c);
    for (std::size_t g = 0; g < a.compressed.size(); ++g) {
      for (int m = 0; m < 2; ++m) {
        const auto& x = m ? a.full[g] : a.compressed[g];
        const auto& y = m ? b.full[g] : b.compressed[g];
        const double p1 = double(x.hits) / x.trials, p2 = double(y.hits) / y.trials;
        const double p = double(x.hits + y.hits) / (x.trials + y.trials);
        const double se = std::sqrt(std::max(p * (1 - p), 1.0 / (x.trials + y.trials)) * (1.0 / x.trials + 1.0 / y.trials));
        INFO("variant " << variant << " group " << g << " model " << m << " " << p1 << " vs " << p2);
        CHECK(std::abs(p1 - p2) <= 5 * se);
      }
    }
  }
}

TEST_CASE("sweep: known answers (flat full control, gate bias makes one phase strong)", "[sim][phase]") {
  // Single-token needle, mean pooling W = S: recall is phase-invariant for both models.
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 32};
  c.trials = 400;
  c.engine = sim::engine_kind::score;
  auto r = sim::run_sweep(c);
  // d = 32, N = 2048: |κ|² ≈ 32 ± 8 against a noise maximum ≈ 3.5·√32 ≈ 20: full recall ≈ 0.99
  for (std::size_t g = 0; g < r.full.size(); ++g) CHECK(r.full[g].hits >= 0.97 * r.full[g].trials);
  // Strong slot-0 preference: phase 0 keeps the needle, others lose it.
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate, .slot_bias = {4, 0, 0, 0}};
  r = sim::run_sweep(c);
  CHECK(r.compressed[0].hits >= 0.95 * r.compressed[0].trials);
  for (std::size_t g = 1; g < 4; ++g) CHECK(r.compressed[g].hits <= 0.2 * r.compressed[g].trials);
  for (std::size_t g = 0; g < 4; ++g) CHECK(r.full[g].hits >= 0.97 * r.full[g].trials);
  // Padding: full attention prefers A (stronger match) at every length.
  sim::sweep_config p;
  p.task = kvphase::tasks::padding_config{};
  p.trials = 50;
  p.engine = sim::engine_kind::score;
  p.op = c.op;
  const auto rp = sim::run_sweep(p);
  REQUIRE(rp.labels.size() == 16);
  CHECK(rp.labels[0] == 24);
  for (std::size_t g = 0; g < 16; ++g) CHECK(rp.full[g].hits == rp.full[g].trials);
  // and the gated compressed model flips with the phase of the evidence (period 4): A's
  // evidence on the preferred slot (L ≡ 0 mod 4) → A; B's (L ≡ 2) → B.
  for (std::size_t g = 0; g < 16; g += 4) {
    CHECK(rp.compressed[g].hits == rp.compressed[g].trials);
    CHECK(rp.compressed[g + 2].hits == 0);
  }
}

TEST_CASE("sweep: invalid configurations throw naming the parameter", "[sim][errors]") {
  sim::sweep_config c;
  c.trials = 0;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("trials"));
  c = {};
  c.shard = {2, 2};
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("shard"));
  c = {};
  c.window = 100000;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("context"));
  c = {};
  c.op.pool = compress::pool_kind::channel_gate;
  c.engine = sim::engine_kind::score;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("engine"));
  c = {};
  c.task.get<kvphase::tasks::needle_config>().dim = 0;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("dim"));
  c = {};
  c.task.get<kvphase::tasks::needle_config>().query_noise = std::nan("");
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("query_noise"));
  CHECK_THROWS_WITH(sim::parse_engine("fast"), Catch::Contains("engine"));
  CHECK_THROWS_WITH(sim::make_task("haystack"), Catch::Contains("task"));
  CHECK_THROWS_WITH(sim::shard_spec::parse("3/2"), Catch::Contains("shard"));
  CHECK_THROWS_WITH(sim::shard_spec::parse("1-2"), Catch::Contains("shard"));
  CHECK_THROWS_WITH(sim::shard_spec::parse("/2"), Catch::Contains("shard"));
  CHECK(sim::shard_spec::parse("1/4") == sim::shard_spec{1, 4});
  // shard ranges partition the trials
  for (index_t n = 1; n <= 7; ++n) {
    index_t next = 0;
    for (index_t i = 0; i < n; ++i) {
      const auto r = sim::shard_spec{i, n}.range(100);
      CHECK(r.first == next);
      next = r.second;
    }
    CHECK(next == 100);
  }
}

TEST_CASE("sweep: general key-space path for operators that are not linear in the keys", "[sim][general]") {
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{.context = 512, .dim = 16, .key_span = 2};
  c.trials = 30;
  c.seed = 3;
  // max pooling over W = S = 1 is the identity: the compressed model is full attention
  c.op = {.grid = {.window = 1, .stride = 1}, .pool = compress::pool_kind::max};
  c.modulus = 4;
  REQUIRE(c.general());
  auto r = sim::run_sweep(c);
  for (std::size_t g = 0; g < r.full.size(); ++g) CHECK(r.compressed[g].hits == r.full[g].hits);
  // presets with learned projections run, deterministically for any thread count / shard split
  for (const char* name : {"v4_csa", "v41", "paper_ref"}) {
    c.op = compress::preset(name);
    // RoPE runs as the spec says; it must fit the keys' channels
    if (c.op.rope.rope_dim > 16) CHECK_THROWS_WITH(c.validate(), Catch::Contains("op.rope.rope_dim"));
    c.op.rope.rope_dim = 8;
    c.modulus = 8;
    INFO(name);
    (void)kvphase::test::check_threads_and_shards(c, {2});
  }
  c.engine = sim::engine_kind::score;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("engine"));
  c.engine = sim::engine_kind::key;
  c.op.heads = 2;  // several compression heads run on the general path
  c.op.head_offsets = {0, 2};
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("design shifted: one item per trial, paired counts exact across threads and shards", "[sim][design]") {
  for (auto t : {"needle", "kv-pairs"}) {
    for (auto e : {sim::engine_kind::key, sim::engine_kind::score}) {
      auto c = kvphase::test::small_sweep(t, e);
      c.design = sim::design_kind::shifted;
      INFO(c);
      c.threads = 1;
      const auto one = sim::run_sweep(c);
      REQUIRE(one.compressed_paired.has_value());
      REQUIRE(one.full_paired.has_value());
      const auto& pc = *one.compressed_paired;
      CHECK(pc.items == c.trials);
      CHECK_NOTHROW(pc.validate());
      for (std::size_t g = 0; g < one.compressed.size(); ++g) {
        CHECK(pc.hits[g] == one.compressed[g].hits);
        CHECK(one.full_paired->hits[g] == one.full[g].hits);
      }
      // full attention does not see the grid: the same item gives the same answer in every group
      CHECK(one.full_paired->flips() == 0);
      c.threads = 2;
      const auto two = sim::run_sweep(c);
      CHECK(two.compressed == one.compressed);
      CHECK(two.compressed_paired == one.compressed_paired);
      CHECK(two.full_paired == one.full_paired);
      for (index_t n : {2, 5}) {
        kvphase::stats::paired_counts comp, full;
        for (index_t i = 0; i < n; ++i) {
          c.shard = {i, n};
          const auto part = sim::run_sweep(c);
          comp += *part.compressed_paired;
          full += *part.full_paired;
        }
        CHECK(comp == *one.compressed_paired);
        CHECK(full == *one.full_paired);
      }
      // the independent design keeps no paired counts, and its draws are unchanged by the field
      c.shard = {};
      c.design = sim::design_kind::independent;
      CHECK_FALSE(sim::run_sweep(c).compressed_paired.has_value());
    }
  }
}

TEST_CASE("design shifted: per-phase recall equals the independent design's (5-sigma), items change answer with phase",
          "[sim][design]") {
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{.context = 1024, .dim = 32};
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate,
          .slot_bias = {0, 1, 2, 0}, .content_std = 0.3};
  c.trials = 1500;
  c.seed = 3;
  const auto ind = sim::run_sweep(c);
  c.design = sim::design_kind::shifted;
  const auto sh = sim::run_sweep(c);
  for (std::size_t g = 0; g < 4; ++g)
    for (int m = 0; m < 2; ++m) {
      const auto& x = m ? ind.full[g] : ind.compressed[g];
      const auto& y = m ? sh.full[g] : sh.compressed[g];
      const double p1 = double(x.hits) / x.trials, p2 = double(y.hits) / y.trials;
      const double p = double(x.hits + y.hits) / (x.trials + y.trials);
      const double se = std::sqrt(std::max(p * (1 - p), 1.0 / (x.trials + y.trials)) * (1.0 / x.trials + 1.0 / y.trials));
      INFO("group " << g << " model " << m << " independent " << p1 << " shifted " << p2);
      CHECK(std::abs(p1 - p2) <= 5 * se);
    }
  // phase 2 is the gate's preferred slot: most items are found there and lost elsewhere
  const auto& pc = *sh.compressed_paired;
  CHECK(pc.flips() > pc.items / 2);
  CHECK(pc.hits[2] > pc.hits[0]);
}

TEST_CASE("design shifted: general key-space path and refused configurations", "[sim][design][errors]") {
  auto c = kvphase::test::small_general_sweep("needle", compress::preset("v4_csa"));
  c.design = sim::design_kind::shifted;
  const auto one = sim::run_sweep(c);
  REQUIRE(one.compressed_paired.has_value());
  CHECK(one.compressed_paired->groups == 8);
  CHECK(one.full_paired->flips() == 0);
  c.threads = 1;
  CHECK(sim::run_sweep(c).compressed_paired == one.compressed_paired);
  auto p = kvphase::test::small_sweep("padding", sim::engine_kind::score);
  p.design = sim::design_kind::shifted;
  CHECK_THROWS_WITH(p.validate(), Catch::Contains("design") && Catch::Contains("phase task"));
  auto m = kvphase::test::small_sweep("needle", sim::engine_kind::score);
  m.design = sim::design_kind::shifted;
  m.modulus = 128;
  m.task = kvphase::tasks::needle_config{.context = 8192, .dim = 16};
  CHECK_THROWS_WITH(m.validate(), Catch::Contains("design") && Catch::Contains("64"));
  CHECK_THROWS_WITH(sim::parse_design("paired"), Catch::Contains("independent or shifted"));
}
