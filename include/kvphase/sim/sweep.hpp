#pragma once
/// \file sim/sweep.hpp
/// Phase sweeps: every group × trials, for a compressed model and the full-attention control on
/// the same inputs (same keys, same query, same layout), with counter-based randomness so the
/// counts are bitwise identical for any thread count and any shard split. The config and result
/// types, and how streams are keyed, are in sim/sweep_config.hpp.
///
/// Trial k of group g: stream = rng::combine(config_id, rng::combine(g, k)) (design shifted:
/// rng::combine(config_id, rng::combine(shifted_stream_tag, k)), one item for every group, whose
/// grid is moved by g tokens of prefix padding: sim/design.hpp);
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
///  - key, general path (sweep_config::general(): an operator that is not score-exact, or a
///    model other than the default): the same normals are drawn in the same order, but the keys
///    and the task's values are materialised, compressed by the operator as given and attended
///    by the library's attention models (sim/general_model.hpp); the full control attends the
///    same tokens.

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
#include "kvphase/sim/design.hpp"
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
    if (!general_) comp_ = linear_model(c.op, c.window);
    if (c.design == design_kind::shifted)  // group g: the grid moved by g tokens of prefix padding
      for (index_t g = 0; g < c.groups(); ++g) {
        if (general_) shifted_general_.emplace_back();  // built on first use, as gmodel_
        else shifted_linear_.emplace_back(shifted_operator(c.op, g), c.window);
      }
  }
  trial_runner(const trial_runner&) = delete;
  trial_runner& operator=(const trial_runner&) = delete;
  trial_runner(trial_runner&&) = default;

  void run(index_t g, index_t k, tasks::trial_outcome& comp, tasks::trial_outcome& full) {
    const std::uint64_t stream = trial_stream(cid_, c_.design, g, k);
    const bool shifted = c_.design == design_kind::shifted;
    group_ = shifted ? 0 : g;  // shifted: the task lays out the item at phase 0, group g's grid moves
    active_general_ = shifted && general_ ? &shifted_general_[static_cast<std::size_t>(g)] : &gmodel_;
    active_linear_ = shifted && !general_ ? &shifted_linear_[static_cast<std::size_t>(g)] : &comp_;
    active_shift_ = shifted ? g : 0;
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
  void score(normal_state& st, index_t N, const float* q, double qn, std::span<const tasks::planted_span> spans,
             index_t value_dim = 1, double beta = 0.0) override {
    auto& w = ws_;
    const index_t d = d_;
    if (general_) {
      // the model is built for the task's value width on first use (parameters drawn once)
      auto& gm = *active_general_;
      if (!gm || gm->value_dim() != value_dim)
        gm.emplace(shifted_operator(c_.op, active_shift_), d, value_dim, c_.window, c_.model, c_.params_seed,
                   active_shift_);
      const general_model& g = *gm;
      g.begin(w.gen, st, N);
      for (const auto& r : spans)
        for (index_t i = 0; i < r.count; ++i) {
          float* row = g.key_row(w.gen, r.first + i);
          for (index_t j = 0; j < d; ++j) row[j] = r.coef * r.v[j];
          if (r.val) std::copy(r.val, r.val + value_dim, g.value_row(w.gen, r.first + i));
        }
      g.run(w.gen, N, q, beta > 0 ? beta : 1.0 / std::sqrt(static_cast<double>(d)));
      return;
    }
    w.s.resize(static_cast<std::size_t>(N));
    noise(st, q, qn, w.s.data(), N);
    const linear_model& comp = *active_linear_;
    if (comp.content_gated()) {
      normal_generator rest(st);
      w.z.resize(static_cast<std::size_t>(N));
      rest.fill_scaled(w.z.data(), N, comp.content_std());
    }
    for (const auto& r : spans)
      for (index_t i = 0; i < r.count; ++i) w.s[static_cast<std::size_t>(r.first + i)] = r.score;
    comp.pool(w.s.data(), w.z.data(), N, w.comp);
    full_.pool(w.s.data(), nullptr, N, w.full);
  }
  tasks::model_view compressed() override {
    comp_items_.r = this;  // set here: the runner may have been moved since construction
    if (general_) return {(*active_general_)->geometry(), ws_.comp, ws_.gen.o.data(), &comp_items_};
    return {*active_linear_, ws_.comp};
  }
  tasks::model_view full() override {
    full_items_.r = this;
    if (general_) return {full_, ws_.full, ws_.gen.of.data(), &full_items_};
    return {full_, ws_.full};
  }
  /// The general path's model of the current group (after its first trial), for tests and diagnostics.
  [[nodiscard]] const general_model* general() const noexcept {
    return *active_general_ ? &**active_general_ : nullptr;
  }

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
  std::optional<general_model> gmodel_;
  std::vector<std::optional<general_model>> shifted_general_;  ///< design shifted: per group
  std::vector<linear_model> shifted_linear_;
  std::optional<general_model>* active_general_ = &gmodel_;
  const linear_model* active_linear_ = &comp_;
  index_t active_shift_ = 0;  ///< design shifted: tokens of prefix padding of the current group
  struct comp_items final : tasks::item_scores {
    trial_runner* r = nullptr;
    void best(index_t a, index_t b, float& t, float& o) const override { (*r->active_general_)->best_compressed(r->ws_.gen, a, b, t, o); }
  };
  struct full_items final : tasks::item_scores {
    trial_runner* r = nullptr;
    void best(index_t a, index_t b, float& t, float& o) const override { (*r->active_general_)->best_full(r->ws_.gen, a, b, t, o); }
  };
  comp_items comp_items_;
  full_items full_items_;
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
  std::optional<paired_recorder> paired;
  if (c.design == design_kind::shifted) paired.emplace(M, range.first, per);
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
          if (paired) paired->record(g, k, oc.hit, of.hit);
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
  if (paired) {
    r.compressed_paired = paired->counts(paired->compressed);
    r.full_paired = paired->counts(paired->full);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kvphase::sim
