#pragma once
/// \file io/train_units.hpp
/// The unit file of a sharded training run (train_phase --shard i/N writes train_units.json;
/// train_phase --merge joins them): one trained (variant, seed) unit's results, exactly (JSON
/// numbers round-trip doubles).
///
/// File form: {"provenance": {...}, "config": {...}, "shard": "i/N", "units": [unit, ...]} with
///   unit = {"variant", "seed", "final_loss", "final_accuracy", "seconds",
///           "history": [{"step", "loss", "accuracy", "profile": [[w, ...], ...]}, ...],
///           "final_gates": [[w, ...], ...],
///           "ablation": [{"component", "layer", "head", "hits": [...], "trials": [...],
///                         "mean_margin": [...]}, ...]}.
///
/// A unit file is untrusted input (it comes back from a cluster's scratch space): the reader
/// checks every member's type and range before it is used — counts one per target position with
/// trials ≥ 1 and 0 ≤ hits ≤ trials, gate weights and accuracies in [0, 1], losses and margins
/// finite, steps and times non-negative, the first ablation row the baseline ("none"), sizes
/// bounded — and throws kvphase::error naming the file, the unit and the member otherwise.
/// Whether the file's configuration matches the run that merges it is the caller's check.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/train/trainer.hpp"

namespace kvphase::io {

/// One trained unit's results, as a shard writes them (the trained parameters are not stored).
struct train_unit {
  std::string variant;
  std::uint64_t seed = 0;
  train::train_result trained;                   ///< params left empty
  std::vector<train::ablation_row> ablation;     ///< row 0 = no knockout ("none")
  std::vector<std::vector<double>> final_gates;  ///< slot_gate_profile of the trained parameters
};

/// Largest sizes a unit file may declare (far above what train_phase writes; they bound what a
/// hostile file can make the reader allocate).
inline constexpr std::size_t max_train_units = 100'000;
inline constexpr std::size_t max_train_history = 100'000;
inline constexpr std::size_t max_train_ablation = 4096;
inline constexpr std::size_t max_train_gate_rows = 4096;
inline constexpr std::size_t max_train_gate_slots = 4096;

inline ordered_json to_json(const train_unit& j) {
  ordered_json u;
  u["variant"] = j.variant;
  u["seed"] = j.seed;
  u["final_loss"] = j.trained.final_loss;
  u["final_accuracy"] = j.trained.final_accuracy;
  u["seconds"] = j.trained.seconds;
  ordered_json hist = ordered_json::array();
  for (const auto& g : j.trained.history)
    hist.push_back({{"step", g.step}, {"loss", g.loss}, {"accuracy", g.accuracy}, {"profile", g.profile}});
  u["history"] = hist;
  u["final_gates"] = j.final_gates;
  ordered_json abl = ordered_json::array();
  for (const auto& r : j.ablation)
    abl.push_back({{"component", r.component}, {"layer", r.layer}, {"head", r.head}, {"hits", r.counts.hits},
                   {"trials", r.counts.trials}, {"mean_margin", r.counts.mean_margin}});
  u["ablation"] = abl;
  return u;
}

namespace detail {

/// A gate profile: rows of weights in [0, 1].
template <class Json>
std::vector<std::vector<double>> gate_profile_from_json(const Json& j, const std::string& where) {
  std::vector<std::vector<double>> rows;
  const auto& a = json_array(j, where, max_train_gate_rows);
  rows.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const auto& r = json_array(a[i], w, max_train_gate_slots);
    std::vector<double> row(r.size());
    for (std::size_t k = 0; k < r.size(); ++k) row[k] = json_number(r[k], w + "[" + std::to_string(k) + "]", 0.0, 1.0);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace detail

/// Reads one unit; `positions` is the task's target_end() (the length every count vector must
/// have), `where` names the unit's place (e.g. "train_units.json units[3]") in errors.
template <class Json>
train_unit train_unit_from_json(const Json& u, index_t positions, const std::string& where) {
  require(positions >= 1, "positions", positions, "must be >= 1");
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr std::int64_t max_count = std::int64_t{1} << 53;
  train_unit j;
  j.variant = json_string(require_member(u, "variant", where), where + ".variant");
  j.seed = json_unsigned(require_member(u, "seed", where), where + ".seed");
  const std::string unit = where + " (" + j.variant + " seed " + std::to_string(j.seed) + ")";
  auto number = [&](const Json& obj, const char* key, const std::string& w, double lo, double hi) {
    return json_number(require_member(obj, key, w), w + "." + key, lo, hi);
  };
  j.trained.final_loss = number(u, "final_loss", unit, -inf, inf);
  j.trained.final_accuracy = number(u, "final_accuracy", unit, 0.0, 1.0);
  j.trained.seconds = number(u, "seconds", unit, 0.0, inf);
  const auto& hist = json_array(require_member(u, "history", unit), unit + ".history", max_train_history);
  for (std::size_t i = 0; i < hist.size(); ++i) {
    const std::string w = unit + ".history[" + std::to_string(i) + "]";
    train::gate_snapshot g;
    g.step = json_integer(require_member(hist[i], "step", w), w + ".step", 0, std::numeric_limits<index_t>::max());
    g.loss = number(hist[i], "loss", w, -inf, inf);
    g.accuracy = number(hist[i], "accuracy", w, 0.0, 1.0);
    g.profile = detail::gate_profile_from_json(require_member(hist[i], "profile", w), w + ".profile");
    j.trained.history.push_back(std::move(g));
  }
  j.final_gates = detail::gate_profile_from_json(require_member(u, "final_gates", unit), unit + ".final_gates");
  const auto& abl = json_array(require_member(u, "ablation", unit), unit + ".ablation", max_train_ablation);
  const auto P = static_cast<std::size_t>(positions);
  for (std::size_t i = 0; i < abl.size(); ++i) {
    const std::string w = unit + ".ablation[" + std::to_string(i) + "]";
    train::ablation_row row;
    row.component = json_string(require_member(abl[i], "component", w), w + ".component");
    row.layer = json_integer(require_member(abl[i], "layer", w), w + ".layer", -1, 1 << 20);
    row.head = json_integer(require_member(abl[i], "head", w), w + ".head", -1, 1 << 20);
    auto counts = [&](const char* key) {
      const auto& a = require_member(abl[i], key, w);
      if (!a.is_array() || a.size() != P)
        fail(w + "." + key, ::kvphase::io::detail::json_excerpt(a),
             "must be an array of " + std::to_string(P) + " entries (one per target position)");
      return &a;
    };
    const auto& hits = *counts("hits");
    const auto& trials = *counts("trials");
    const auto& margin = *counts("mean_margin");
    row.counts.hits.resize(P);
    row.counts.trials.resize(P);
    row.counts.mean_margin.resize(P);
    for (std::size_t p = 0; p < P; ++p) {
      const std::string at = "[" + std::to_string(p) + "]";
      row.counts.trials[p] = json_integer(trials[p], w + ".trials" + at, 1, max_count);
      row.counts.hits[p] = json_integer(hits[p], w + ".hits" + at, 0, row.counts.trials[p]);
      row.counts.mean_margin[p] = json_number(margin[p], w + ".mean_margin" + at, -inf, inf);
    }
    j.ablation.push_back(std::move(row));
  }
  require(!j.ablation.empty() && j.ablation[0].component == "none", unit + ".ablation",
          j.ablation.empty() ? std::string("(empty)") : j.ablation[0].component,
          "must start with the baseline row (component none)");
  return j;
}

/// A whole unit file: its configuration (compared by the caller with the merging run's), its
/// shard text and its units, every unit checked by train_unit_from_json. `source` names the file.
struct train_units_file {
  ordered_json config;
  std::string shard;
  std::vector<train_unit> units;
};

inline train_units_file parse_train_units(std::string_view text, std::string_view source, index_t positions) {
  const std::string src(source);
  const ordered_json file = parse_json(text, source);
  if (!file.is_object()) fail(src, detail::json_excerpt(file), "must be a train_units.json written by train_phase --shard");
  train_units_file out;
  out.config = require_member(file, "config", src);
  if (!out.config.is_object()) fail(src + ".config", detail::json_excerpt(out.config), "must be a JSON object");
  out.shard = json_string(require_member(file, "shard", src), src + ".shard");
  const auto& units = json_array(require_member(file, "units", src), src + ".units", max_train_units);
  out.units.reserve(units.size());
  for (std::size_t i = 0; i < units.size(); ++i)
    out.units.push_back(train_unit_from_json(units[i], positions, src + " units[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace kvphase::io
