#pragma once
/// \file stats/summary.hpp
/// The per-model summary of a phase sweep: from the counts of every model (trials[g], hits[g]
/// per group) and the analysis settings, every statistic a sweep reports — per-phase recall and
/// intervals, the gap and its interval, the uniformity and periodicity tests, and the gap minus
/// the baseline model's. Identical counts and settings give identical numbers, whichever process
/// computes them: permutation and bootstrap streams are keyed per model by
/// rng::combine(seed, rng::hash_text(model)). io/ writes these summaries; it computes none.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/stats/bootstrap.hpp"
#include "kvphase/stats/gap.hpp"
#include "kvphase/stats/intervals.hpp"
#include "kvphase/stats/paired.hpp"
#include "kvphase/stats/periodicity.hpp"
#include "kvphase/stats/scores.hpp"
#include "kvphase/stats/uniformity.hpp"

namespace kvphase::stats {

/// A named per-phase column carried alongside the counts (e.g. "theory"): values[g] per group.
struct extra_column {
  std::string name;
  std::vector<double> values;
  friend bool operator==(const extra_column&, const extra_column&) = default;
};

/// Per-phase counts of one model: trials[g], hits[g] for g = 0..M−1.
struct phase_counts {
  std::string model;
  std::vector<std::int64_t> trials;
  std::vector<std::int64_t> hits;
  std::vector<extra_column> extra;  ///< optional; same names for every model of a result
  /// Paired design (the same item in every group): the per-item outcome counts; then
  /// trials[g] = paired->items and hits[g] = paired->hits[g] for every g.
  std::optional<paired_counts> paired;
  /// Continuous per-item scores by phase (external evaluations): summarised, written, not read back.
  std::optional<score_moments> scores;
  friend bool operator==(const phase_counts&, const phase_counts&) = default;
};

/// How the statistics are computed from the counts (stored in every output).
struct analysis_options {
  std::int64_t modulus = 4;     ///< M: phase groups per model
  std::int64_t period = 4;      ///< S: the period tested (must divide M)
  double confidence = 0.95;     ///< for per-phase intervals and the gap interval
  interval_method interval = interval_method::wilson;
  uniformity_method uniformity = uniformity_method::pearson_chi_square;
  periodicity_statistic periodicity = periodicity_statistic::harmonics;
  std::int64_t permutations = 9999;          ///< 0 = asymptotic chi-square p-value only
  std::int64_t bootstrap_replicates = 2000;  ///< 0 = no percentile interval and no bias correction (the simultaneous interval is always computed)
  std::uint64_t seed = 0;                    ///< stream seed (set it to the run seed)
  std::string baseline = "full";             ///< model the others' gaps are contrasted with

  void validate() const {
    require(modulus >= 2, "analysis.modulus", modulus, "must be >= 2");
    require(period >= 2, "analysis.period", period, "must be >= 2");
    require(modulus % period == 0, "analysis.period", period,
            "must divide analysis.modulus = " + std::to_string(modulus));
    require_confidence(confidence, "analysis.confidence");
    require(permutations >= 0 && permutations <= max_resamples, "analysis.permutations", permutations,
            "must be in [0, " + std::to_string(max_resamples) + "]");
    require(bootstrap_replicates >= 0 && bootstrap_replicates <= max_resamples, "analysis.bootstrap_replicates",
            bootstrap_replicates, "must be in [0, " + std::to_string(max_resamples) + "]");
  }
  friend bool operator==(const analysis_options&, const analysis_options&) = default;
};

/// Statistics of one model, all computed from its counts.
struct model_summary {
  std::string model;
  std::int64_t total_trials = 0, total_hits = 0;
  double total_recall = 0.0;
  std::vector<double> recall;           ///< per phase
  std::vector<interval> ci;      ///< per phase
  gap_result gap;
  test_result uniformity;
  periodicity_result periodicity;
  /// gap − baseline's gap with its bootstrap interval (gap_difference_bootstrap), for
  /// every model other than analysis.baseline when that model is present.
  std::optional<gap_difference_result> vs_baseline;
  /// With paired counts: Cochran's Q, McNemar best vs worst group, the flip count
  /// (stats/paired.hpp; permutations and seed from the analysis, stream model + "|paired").
  std::optional<paired_summary> paired;
  /// With scores: per-phase means and intervals, F tests, Friedman (stats/scores.hpp).
  std::optional<score_summary> scores;
};

/// Stream seed of model `model`'s permutations and bootstrap.
inline std::uint64_t model_stream_seed(std::uint64_t seed, std::string_view model) noexcept {
  return rng::combine(seed, rng::hash_text(model));
}

/// Computes every statistic of one model from its counts.
inline model_summary summarize(const phase_counts& m, const analysis_options& a) {
  a.validate();
  require(static_cast<std::int64_t>(m.trials.size()) == a.modulus, "model " + m.model + " trials.size()",
          m.trials.size(), "must equal analysis.modulus = " + std::to_string(a.modulus));
  require_group_counts(m.hits, m.trials);
  model_summary s;
  s.model = m.model;
  for (std::size_t g = 0; g < m.trials.size(); ++g) {
    s.total_trials += m.trials[g];
    s.total_hits += m.hits[g];
    s.recall.push_back(recall(m.hits[g], m.trials[g]));
    s.ci.push_back(binomial_interval(m.hits[g], m.trials[g], a.confidence, a.interval));
  }
  s.total_recall = recall(s.total_hits, s.total_trials);
  const std::uint64_t seed = model_stream_seed(a.seed, m.model);
  s.gap = phase_gap_bootstrap(m.hits, m.trials,
                                     {.replicates = a.bootstrap_replicates, .confidence = a.confidence, .seed = seed});
  s.uniformity = uniformity_test(m.hits, m.trials, a.uniformity);
  periodicity_options po{.statistic = a.periodicity,
                                .reference = a.permutations > 0 ? periodicity_reference::permutation
                                                                : periodicity_reference::chi_square,
                                .permutations = std::max<std::int64_t>(a.permutations, 1),
                                .seed = seed};
  s.periodicity = periodicity_test(m.hits, m.trials, a.modulus, a.period, po);
  if (m.paired) {
    require(m.paired->groups == a.modulus, "model " + m.model + " paired.groups", m.paired->groups,
            "must equal analysis.modulus = " + std::to_string(a.modulus));
    require(m.paired->hits == m.hits, "model " + m.model + " paired.hits", m.paired->hits.size(),
            "must equal the model's per-phase hits");
    for (auto t : m.trials)
      require(t == m.paired->items, "model " + m.model + " trials", t,
              "must equal paired.items = " + std::to_string(m.paired->items) + " in every phase");
    s.paired = summarize_paired(*m.paired, {.confidence = a.confidence,
                                            .interval = a.interval,
                                            .permutations = a.permutations,
                                            .seed = model_stream_seed(a.seed, m.model + "|paired")});
  }
  if (m.scores) {
    require(static_cast<std::int64_t>(m.scores->n.size()) == a.modulus, "model " + m.model + " scores.n.size()",
            m.scores->n.size(), "must equal analysis.modulus = " + std::to_string(a.modulus));
    s.scores = summarize_scores(*m.scores, a.period, a.confidence);
  }
  return s;
}

/// Summaries of every model, in order.
inline std::vector<model_summary> summarize(const std::vector<phase_counts>& models, const analysis_options& analysis) {
  analysis.validate();
  std::vector<model_summary> out;
  for (const auto& m : models) out.push_back(summarize(m, analysis));
  const phase_counts* base = nullptr;
  for (const auto& m : models)
    if (m.model == analysis.baseline) base = &m;
  if (base) {
    for (std::size_t i = 0; i < models.size(); ++i) {
      const auto& m = models[i];
      if (&m == base) continue;
      out[i].vs_baseline = gap_difference_bootstrap(
          m.hits, m.trials, base->hits, base->trials,
          {.replicates = analysis.bootstrap_replicates,
           .confidence = analysis.confidence,
           .seed = model_stream_seed(analysis.seed, m.model + "|" + base->model)});
    }
  }
  return out;
}


}  // namespace kvphase::stats
