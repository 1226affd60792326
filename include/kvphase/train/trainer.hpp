#pragma once
/// \file train/trainer.hpp
/// Training loop (Adam, mini-batches), per-position / per-phase evaluation and the ablation
/// matrix for the toy retrieval model.
///
/// Determinism: training example i of step k is drawn from the Philox stream keyed by
/// (data_seed, trial_stream(hash("kvphase.train.batch"), k·batch + i)); evaluation trial j at target
/// position p from (seed, trial_stream(hash("kvphase.train.eval"), p·trials + j)). Gradients are
/// summed in example order. The same seeds give bitwise identical parameters and counts; every
/// model and every ablation is evaluated on the same contexts (paired comparisons).

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <ostream>
#include <string>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/train/adam.hpp"
#include "kvphase/train/model.hpp"
#include "kvphase/train/task.hpp"

namespace kvphase::train {

/// Training schedule. Aggregate with defaults.
struct train_config {
  index_t steps = 1500;
  index_t batch = 32;
  adam_config adam{};
  double entropy_reg = 0.0;     ///< λ of gate_entropy_penalty (≥ 0)
  bool random_origin = false;   ///< draw the grid origin shift uniformly in [0, S) per example
  std::uint64_t data_seed = 7;
  index_t profile_every = 50;   ///< record the gate profile every this many steps (0 = never)
  index_t log_every = 250;      ///< progress line every this many steps (0 = never)

  void validate() const {
    require(steps >= 0 && steps <= 10'000'000, "steps", steps, "must be in [0, 1e7]");
    require(batch >= 1 && batch <= 65536, "batch", batch, "must be in [1, 65536]");
    adam.validate();
    require(std::isfinite(entropy_reg) && entropy_reg >= 0.0, "entropy_reg", entropy_reg,
            "must be finite and >= 0");
    require(profile_every >= 0, "profile_every", profile_every, "must be >= 0");
    require(log_every >= 0, "log_every", log_every, "must be >= 0");
  }
  friend std::ostream& operator<<(std::ostream& os, const train_config& t) {
    return os << "train_config{steps=" << t.steps << ", batch=" << t.batch << ", " << t.adam
              << ", entropy_reg=" << t.entropy_reg << ", random_origin=" << (t.random_origin ? "true" : "false")
              << ", data_seed=" << t.data_seed << "}";
  }
};

/// Gate profile and training metrics at one step.
struct gate_snapshot {
  index_t step = 0;
  double loss = 0.0;      ///< mean loss over the steps since the previous snapshot
  double accuracy = 0.0;  ///< mean training accuracy over the same steps
  std::vector<std::vector<double>> profile;  ///< slot_gate_profile at this step
};

struct train_result {
  model_params params;
  std::vector<gate_snapshot> history;  ///< includes step 0 and the final step
  double final_loss = 0.0;             ///< mean loss over the last min(100, steps) steps
  double final_accuracy = 0.0;
  double seconds = 0.0;
};

/// Trains a freshly initialised model. Progress lines go to `progress` (nullptr = silent).
inline train_result train_model(const retrieval_data& data, const model_config& cfg, const train_config& tc,
                          std::ostream* progress = nullptr, const std::string& label = "") {
  const retrieval_task& task = data.task();
  cfg.validate(task);
  tc.validate();
  const auto t0 = std::chrono::steady_clock::now();
  train_result res;
  res.params = init_params(task, cfg);
  model_params grad = res.params.zeros_like();
  adam opt(res.params, cfg.heads(), tc.adam);
  model_workspace ws;
  matrixd x;
  vectord xq;
  const std::uint64_t batch_id = rng::hash_text("kvphase.train.batch");
  const index_t S = cfg.spec.grid.stride;
  double win_loss = 0.0, win_acc = 0.0;
  index_t win_n = 0;
  double tail_loss = 0.0, tail_acc = 0.0;
  index_t tail_n = 0;
  const index_t tail_from = tc.steps - std::min<index_t>(100, tc.steps);
  auto snapshot = [&](index_t step) {
    gate_snapshot g;
    g.step = step;
    g.loss = win_n ? win_loss / static_cast<double>(win_n) : 0.0;
    g.accuracy = win_n ? win_acc / static_cast<double>(win_n) : 0.0;
    g.profile = slot_gate_profile(cfg, res.params);
    res.history.push_back(std::move(g));
  };
  if (tc.profile_every > 0) snapshot(0);
  double log_loss = 0.0, log_acc = 0.0;
  index_t log_n = 0;
  for (index_t step = 0; step < tc.steps; ++step) {
    grad = res.params.zeros_like();
    double batch_loss = 0.0, batch_acc = 0.0;
    for (index_t i = 0; i < tc.batch; ++i) {
      rng::philox_stream s(tc.data_seed, rng::trial_stream(batch_id, static_cast<std::uint64_t>(step * tc.batch + i)));
      const retrieval_example ex = data.sample(s);
      forward_options fo;
      if (tc.random_origin && cfg.compressed()) fo.origin_shift = static_cast<index_t>(s.below(static_cast<std::uint64_t>(S)));
      data.embed(ex, x, xq);
      const forward_result fr = forward_backward(task, cfg, res.params, x, xq, ex.answer(), fo, &grad, ws);
      batch_loss += fr.loss;
      batch_acc += fr.hit(ex.answer()) ? 1.0 : 0.0;
    }
    const double inv_b = 1.0 / static_cast<double>(tc.batch);
    grad.for_each_tensor(cfg.heads(), [&](const std::string&, double* p, index_t n) {
      for (index_t i = 0; i < n; ++i) p[i] *= inv_b;
    });
    gate_entropy_penalty(cfg, res.params, tc.entropy_reg, &grad);
    opt.step(res.params, grad);
    batch_loss *= inv_b;
    batch_acc *= inv_b;
    win_loss += batch_loss;
    win_acc += batch_acc;
    ++win_n;
    log_loss += batch_loss;
    log_acc += batch_acc;
    ++log_n;
    if (step >= tail_from) {
      tail_loss += batch_loss;
      tail_acc += batch_acc;
      ++tail_n;
    }
    if (tc.profile_every > 0 && ((step + 1) % tc.profile_every == 0 || step + 1 == tc.steps)) {
      snapshot(step + 1);
      win_loss = win_acc = 0.0;
      win_n = 0;
    }
    if (progress && tc.log_every > 0 && ((step + 1) % tc.log_every == 0 || step + 1 == tc.steps)) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *progress << "[train" << (label.empty() ? "" : " " + label) << "] step " << (step + 1) << "/" << tc.steps
                << "  loss " << std::fixed << std::setprecision(4) << log_loss / static_cast<double>(log_n)
                << "  acc " << std::setprecision(3) << log_acc / static_cast<double>(log_n) << "  "
                << std::setprecision(1) << secs << " s" << std::defaultfloat << std::endl;
      log_loss = log_acc = 0.0;
      log_n = 0;
    }
  }
  res.final_loss = tail_n ? tail_loss / static_cast<double>(tail_n) : 0.0;
  res.final_accuracy = tail_n ? tail_acc / static_cast<double>(tail_n) : 0.0;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

/// Evaluation settings.
struct eval_config {
  index_t trials_per_position = 64;
  std::uint64_t seed = 99;
  void validate() const {
    require(trials_per_position >= 1 && trials_per_position <= 10'000'000, "trials_per_position",
            trials_per_position, "must be in [1, 1e7]");
  }
};

/// Hits and trials per target position p ∈ [0, target_end()).
struct position_counts {
  std::vector<std::int64_t> hits;
  std::vector<std::int64_t> trials;
  std::vector<double> mean_margin;  ///< mean logit margin of the answer per position
};

/// Hits and trials per phase (p − origin) mod period.
struct phase_counts {
  index_t period = 1;
  std::vector<std::int64_t> hits;
  std::vector<std::int64_t> trials;
  [[nodiscard]] double recall(index_t phase) const {
    const auto i = static_cast<std::size_t>(phase);
    return trials[i] ? static_cast<double>(hits[i]) / static_cast<double>(trials[i]) : 0.0;
  }
  [[nodiscard]] std::int64_t total_hits() const {
    std::int64_t s = 0;
    for (auto h : hits) s += h;
    return s;
  }
  [[nodiscard]] std::int64_t total_trials() const {
    std::int64_t s = 0;
    for (auto t : trials) s += t;
    return s;
  }
};

/// Recall of a trained model at every target position (same contexts for every model).
/// `head_scale` (size L·H, or nullptr) knocks heads out.
inline position_counts evaluate(const retrieval_data& data, const model_config& cfg, const model_params& params,
                                const eval_config& ec, const std::vector<double>* head_scale = nullptr) {
  const retrieval_task& task = data.task();
  cfg.validate(task);
  ec.validate();
  if (head_scale)
    require(static_cast<index_t>(head_scale->size()) == cfg.layers * cfg.heads(), "head_scale.size()",
            head_scale->size(), "must equal layers * heads");
  const index_t P = task.target_end();
  position_counts out;
  out.hits.assign(static_cast<std::size_t>(P), 0);
  out.trials.assign(static_cast<std::size_t>(P), 0);
  out.mean_margin.assign(static_cast<std::size_t>(P), 0.0);
  const std::uint64_t eval_id = rng::hash_text("kvphase.train.eval");
  model_workspace ws;
  matrixd x;
  vectord xq;
  forward_options fo;
  fo.head_scale = head_scale;
  for (index_t p = 0; p < P; ++p) {
    double msum = 0.0;
    for (index_t j = 0; j < ec.trials_per_position; ++j) {
      rng::philox_stream s(ec.seed, rng::trial_stream(eval_id, static_cast<std::uint64_t>(p * ec.trials_per_position + j)));
      const retrieval_example ex = data.sample(s, p);
      data.embed(ex, x, xq);
      const forward_result fr = forward_backward(task, cfg, params, x, xq, ex.answer(), fo, nullptr, ws);
      out.hits[static_cast<std::size_t>(p)] += fr.hit(ex.answer()) ? 1 : 0;
      msum += fr.margin;
    }
    out.trials[static_cast<std::size_t>(p)] = ec.trials_per_position;
    out.mean_margin[static_cast<std::size_t>(p)] = msum / static_cast<double>(ec.trials_per_position);
  }
  return out;
}

/// Groups position counts by phase (p − origin) mod period.
inline phase_counts by_phase(const position_counts& pc, index_t period, index_t origin = 0) {
  require(period >= 1 && period <= (index_t(1) << 30), "period", period, "must be in [1, 2^30]");
  require(origin > -(index_t(1) << 40) && origin < (index_t(1) << 40), "origin", origin, "must be within ±2^40");
  require(pc.trials.size() == pc.hits.size(), "position_counts.trials.size()", pc.trials.size(),
          "must equal hits.size() (" + std::to_string(pc.hits.size()) + ")");
  phase_counts out;
  out.period = period;
  out.hits.assign(static_cast<std::size_t>(period), 0);
  out.trials.assign(static_cast<std::size_t>(period), 0);
  for (std::size_t p = 0; p < pc.hits.size(); ++p) {
    const auto ph = static_cast<std::size_t>(floor_mod(static_cast<index_t>(p) - origin, period));
    out.hits[ph] += pc.hits[p];
    out.trials[ph] += pc.trials[p];
  }
  return out;
}

/// One row of the ablation matrix: a knocked-out component and the recall that remains.
struct ablation_row {
  std::string component;  ///< "none", "l0.h1", "l1" (whole layer)
  index_t layer = -1;
  index_t head = -1;      ///< −1 for a whole layer
  position_counts counts;
};

/// The rows of the ablation matrix, in order: the baseline ("none", layer −1, head −1), then for
/// every layer l each head ("l<l>.h<h>") and, when the model has more than one head in all, the
/// whole layer ("l<l>", head −1).
inline std::vector<ablation_row> ablation_components(const model_config& cfg) {
  const index_t L = cfg.layers, H = cfg.heads();
  std::vector<ablation_row> rows;
  rows.push_back({"none", -1, -1, {}});
  for (index_t l = 0; l < L; ++l) {
    for (index_t h = 0; h < H; ++h) rows.push_back({"l" + std::to_string(l) + ".h" + std::to_string(h), l, h, {}});
    if (H > 1 || L > 1) rows.push_back({"l" + std::to_string(l), l, -1, {}});
  }
  return rows;
}

/// Baseline plus every single head and every whole layer knocked out (c = 0), each evaluated on
/// the same contexts (rows as ablation_components). Per-phase drops = baseline recall − row recall.
inline std::vector<ablation_row> ablation_matrix(const retrieval_data& data, const model_config& cfg,
                                                 const model_params& params, const eval_config& ec) {
  const index_t H = cfg.heads();
  auto rows = ablation_components(cfg);
  std::vector<double> scale(static_cast<std::size_t>(cfg.layers * H), 1.0);
  for (auto& row : rows) {
    if (row.layer < 0) {
      row.counts = evaluate(data, cfg, params, ec);
      continue;
    }
    scale.assign(scale.size(), 1.0);
    for (index_t h = 0; h < H; ++h)
      if (row.head < 0 || row.head == h) scale[static_cast<std::size_t>(row.layer * H + h)] = 0.0;
    row.counts = evaluate(data, cfg, params, ec, &scale);
  }
  return rows;
}

}  // namespace kvphase::train
