#pragma once
/// \file sim/sweep.hpp
/// Phase sweeps: every group × trials, for a compressed model and the full-attention control on
/// the same inputs (same keys, same query, same layout), with counter-based randomness so the
/// counts are bitwise identical for any thread count and any shard split. The config and result
/// types, and how streams are keyed, are in sim/sweep_config.hpp.
///
/// Trial k of group g: stream = rng::combine(config_id, rng::combine(g, k));
///   layout / placement: rng::philox_stream(seed, stream);
///   vectors and noise:  normal generator seeded by (seed, rng::combine(stream, normal_tag)).
/// Shard i of n runs trials [⌊i·T/n⌋, ⌊(i+1)·T/n⌋) of every group. Counts are integers and
/// mass/margin sums are fixed-point integers, so merging is exact and order-free.
///
/// The loop only dispatches: the task (tasks/*.hpp, through tasks::any_task) lays out the trial
/// and reads the outcome; trial_runner is its environment (tasks::trial_env): it owns the
/// streams and the two models, draws the context noise and scores the items.
/// Engines (resolved_engine()):
///  - score: token scores sampled directly, one normal per token;
///  - key, linear operator: keys generated and scored in one fused pass (sim/noise_scores.hpp),
///    d normals per token; both exact for iid Gaussian keys and linear pools
///    (sim/linear_model.hpp);
///  - key, operator not linear in the keys (capabilities(op).score_exact false): the general
///    key-space path. The same normals are drawn in the same order, but the keys are
///    materialised, the planted rows written over them and the keys compressed by the operator
///    (sim/general_model.hpp; values pooled by the uniform mean over an entry's slots). The full
///    control is scored from the same materialised keys.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/parallel.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/general_model.hpp"
#include "kvphase/sim/linear_model.hpp"
#include "kvphase/sim/noise_scores.hpp"
#include "kvphase/sim/normal.hpp"
#include "kvphase/sim/shard.hpp"
#include "kvphase/sim/sweep_config.hpp"
#include "kvphase/tasks/task.hpp"

namespace kvphase::sim {

/// Stream tag of the normal generator inside a trial.
inline constexpr std::uint64_t normal_tag = rng::hash_text("kvphase.sim.normals");

/// Runs one trial (group g, trial k) and returns the outcomes of the compressed and full models.
/// Exposed for tests; run_sweep calls it for every (g, k) of its shard. It is the task's
/// environment (tasks::trial_env).
class trial_runner final : public tasks::trial_env {
 public:
  explicit trial_runner(const sweep_config& c)
      : c_(c), cid_(c.config_id()), geo_(c.geometry()), engine_(c.resolved_engine()), general_(c.general()),
        d_(c.dim()), full_(linear_model::full()), state_(c.task.make_state()) {
    if (general_) gmodel_ = general_model(c.op, d_, c.window, c.params_seed);
    else comp_ = linear_model(c.op, c.window);
  }
  trial_runner(const trial_runner&) = delete;
  trial_runner& operator=(const trial_runner&) = delete;
  trial_runner(trial_runner&&) = default;

  void run(index_t g, index_t k, tasks::trial_outcome& comp, tasks::trial_outcome& full) {
    const std::uint64_t stream = rng::combine(cid_, rng::combine(static_cast<std::uint64_t>(g), static_cast<std::uint64_t>(k)));
    group_ = g;
    ps_.emplace(c_.seed, stream);
    gen_.emplace(c_.seed, rng::combine(stream, normal_tag));
    c_.task.run(*this, *state_, comp, full);
  }

  // ---- tasks::trial_env ----------------------------------------------------------------------
  [[nodiscard]] index_t group() const override { return group_; }
  [[nodiscard]] const tasks::sweep_geometry& geometry() const override { return geo_; }
  [[nodiscard]] bool want_mass() const override { return c_.compute_mass; }
  rng::philox_stream& layout() override { return *ps_; }
  normal_generator& normals() override { return *gen_; }
  [[nodiscard]] bool key_rows() const override { return general_; }

  float* identities(normal_state& st, const float* q, double qn, index_t n) override {
    if (general_) {
      auto& keys = ws_.gen.aux_keys;
      keys.resize(static_cast<std::size_t>(n * d_));
      key_space_keys(st, d_, keys.data(), n, ws_.gen.blocks);
      return keys.data();
    }
    ws_.aux.resize(static_cast<std::size_t>(n));
    noise(st, q, qn, ws_.aux.data(), n);
    return ws_.aux.data();
  }

  /// The items of both models from the trial's noise and the planted spans: general path —
  /// materialised keys, spans written as rows, compressed by the operator; linear engines —
  /// token scores, spans written as scores, pooled. Fills the compressed buffers and the full
  /// model's (the token scores).
  void score(normal_state& st, index_t N, const float* q, double qn, std::span<const tasks::planted_span> spans) override {
    auto& w = ws_;
    const index_t d = d_;
    w.s.resize(static_cast<std::size_t>(N));
    if (general_) {
      auto& K = w.gen.keys;
      K.resize(static_cast<std::size_t>(N * d));
      key_space_keys(st, d, K.data(), N, w.gen.blocks);
      for (const auto& r : spans)
        for (index_t i = 0; i < r.count; ++i) {
          float* row = K.data() + (r.first + i) * d;
          for (index_t j = 0; j < d; ++j) row[j] = r.coef * r.v[j];
        }
      for (index_t i = 0; i < N; ++i) w.s[static_cast<std::size_t>(i)] = simd::dot<float>(K.data() + i * d, q, d);
      gmodel_.score(K.data(), N, q, w.s.data(), w.comp, w.gen);
    } else {
      noise(st, q, qn, w.s.data(), N);
      if (comp_.content_gated()) {
        normal_generator rest(st);
        w.z.resize(static_cast<std::size_t>(N));
        rest.fill_scaled(w.z.data(), N, comp_.content_std());
      }
      for (const auto& r : spans)
        for (index_t i = 0; i < r.count; ++i) w.s[static_cast<std::size_t>(r.first + i)] = r.score;
      comp_.pool(w.s.data(), w.z.data(), N, w.comp);
    }
    full_.pool(w.s.data(), nullptr, N, w.full);
  }
  tasks::model_view compressed() override { return {general_ ? gmodel_.geometry() : comp_, ws_.comp}; }
  tasks::model_view full() override { return {full_, ws_.full}; }

 private:
  /// Noise scores of n tokens for query q (|q| = qn) with the resolved linear engine.
  void noise(normal_state& st, const float* q, double qn, float* out, index_t n) {
    if (engine_ == engine_kind::key) key_space_scores(st, q, d_, out, n);
    else score_space_scores(st, static_cast<float>(qn), out, n);
  }

  struct workspace {
    std::vector<float> s, z, aux;
    general_workspace gen;  ///< general path: keys, projections, entries
    linear_buffers comp, full;
  };

  const sweep_config& c_;
  std::uint64_t cid_;
  tasks::sweep_geometry geo_;
  engine_kind engine_;
  bool general_;
  index_t d_;
  linear_model comp_, full_;
  general_model gmodel_;
  std::unique_ptr<tasks::detail::task_state_base> state_;
  workspace ws_;
  index_t group_ = 0;
  std::optional<rng::philox_stream> ps_;
  std::optional<normal_generator> gen_;
};

/// Runs the sweep of `c` (its shard only). Throws kvphase::error on an invalid config, and
/// sweep_cancelled when progress.cancel returned true.
inline sweep_result run_sweep(const sweep_config& c, const sweep_progress& progress = {}) {
  c.validate();
  const auto t0 = std::chrono::steady_clock::now();
  const index_t M = c.groups();
  const auto range = c.shard.range(c.trials);
  const index_t per = range.second - range.first;
  const std::int64_t total = static_cast<std::int64_t>(per) * M;
  sweep_result r;
  r.config = c;
  r.labels.resize(static_cast<std::size_t>(M));
  for (index_t g = 0; g < M; ++g) r.labels[static_cast<std::size_t>(g)] = c.label(g);
  r.compressed.assign(static_cast<std::size_t>(M), {});
  r.full.assign(static_cast<std::size_t>(M), {});
  std::atomic<std::int64_t> done{0};
  std::atomic<bool> stop{false};
  const int nthreads = parallel::thread_count(c.threads);
  // Work items of `chunk` consecutive trials (1 unless the sweep has more than 2^22 trials), so a
  // cancelled sweep skips at most 2^22 items. The counts are order-free sums: any chunk gives the
  // same bits.
  const std::int64_t chunk = std::max<std::int64_t>(1, (total + (std::int64_t(1) << 22) - 1) >> 22);
  const std::int64_t items = (total + chunk - 1) / chunk;
  parallel::for_each_index(
      items, nthreads,
      [&](auto& local, std::int64_t item) {
        const std::int64_t end = std::min(total, (item + 1) * chunk);
        for (std::int64_t idx = item * chunk; idx < end; ++idx) {
          if (stop.load(std::memory_order_relaxed)) return;  // cancelled: skip the rest
          const index_t g = static_cast<index_t>(idx / std::max<index_t>(per, 1));
          const index_t k = range.first + static_cast<index_t>(idx % std::max<index_t>(per, 1));
          tasks::trial_outcome oc, of;
          local.runner.run(g, k, oc, of);
          local.comp[static_cast<std::size_t>(g)].add(oc);
          local.full[static_cast<std::size_t>(g)].add(of);
          done.fetch_add(1, std::memory_order_relaxed);
        }
      },
      [&] {
        struct local_state {
          trial_runner runner;
          std::vector<group_stats> comp, full;
        };
        return local_state{trial_runner(c), std::vector<group_stats>(static_cast<std::size_t>(M)),
                           std::vector<group_stats>(static_cast<std::size_t>(M))};
      },
      [&](auto& local) {
        for (index_t g = 0; g < M; ++g) {
          r.compressed[static_cast<std::size_t>(g)] += local.comp[static_cast<std::size_t>(g)];
          r.full[static_cast<std::size_t>(g)] += local.full[static_cast<std::size_t>(g)];
        }
      },
      [&] {
        if (progress.report) progress.report(done.load(std::memory_order_relaxed), total);
        if (progress.cancel && progress.cancel()) stop.store(true, std::memory_order_relaxed);
      },
      progress.interval);
  if (stop.load()) throw sweep_cancelled();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kvphase::sim
