#pragma once
/// \file stats/aggregate.hpp
/// Aggregation over seeds (independent repetitions of a sweep).
///
/// Two views, both reported:
/// - pooled: counts summed over seeds per group. Trials of different seeds are independent
///   draws of the same experiment, so the pooled counts feed every other stats function
///   (intervals, gap, tests) exactly as one larger run would.
/// - spread: per group, the mean and sample standard deviation (n − 1) of the per-seed recall
///   over seeds with at least one trial in that group, and the standard error sd/√k; likewise
///   for the per-seed phase gap. With a single seed the spread is 0. This is the "between-seed
///   SD" that separates seed-to-seed variation (e.g. of a trained model) from binomial noise.
///
/// Bounds: the pooled total Σ_s Σ_g trials[s][g] must not exceed max_total_trials (2^53); it is
/// summed with overflow checks and a larger total throws kvphase::error naming the seed and
/// group where it was exceeded.
/// Degenerate input is defined: one seed gives spread 0; a group with no trials in any seed has
/// mean, sd and se 0; one group gives seed gaps 0.

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/stats/gap.hpp"
#include "kvphase/stats/intervals.hpp"

namespace kvphase::stats {

struct seed_aggregate {
  std::int64_t seeds = 0;
  std::vector<std::int64_t> trials;  ///< pooled per group
  std::vector<std::int64_t> hits;    ///< pooled per group
  std::vector<double> mean_recall;   ///< per group, over seeds with trials there
  std::vector<double> sd_recall;     ///< sample SD over those seeds (0 with fewer than two)
  std::vector<double> se_recall;     ///< sd_recall / √(seeds counted)
  std::vector<double> seed_gaps;     ///< phase gap of each seed
  double gap_mean = 0.0;
  double gap_sd = 0.0;
};

namespace detail {
inline void mean_sd(const std::vector<double>& x, double& mean, double& sd) {
  mean = 0.0;
  sd = 0.0;
  if (x.empty()) return;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  if (x.size() < 2) return;
  double ss = 0.0;
  for (double v : x) ss += (v - mean) * (v - mean);
  sd = std::sqrt(ss / static_cast<double>(x.size() - 1));
}
}  // namespace detail

/// Aggregates per-seed counts: hits[s][g], trials[s][g] for seed s and group g. Every seed
/// must have the same number of groups. Throws kvphase::error naming the offending seed/group.
inline seed_aggregate aggregate_seeds(const std::vector<std::vector<std::int64_t>>& hits,
                                      const std::vector<std::vector<std::int64_t>>& trials) {
  require(!trials.empty(), "trials.size()", trials.size(), "must be >= 1 (one entry per seed)");
  require(hits.size() == trials.size(), "hits.size()", hits.size(),
          "must equal trials.size() = " + std::to_string(trials.size()));
  const std::size_t G = trials.front().size();
  for (std::size_t s = 0; s < trials.size(); ++s) {
    require(trials[s].size() == G, "trials[" + std::to_string(s) + "].size()", trials[s].size(),
            "must equal trials[0].size() = " + std::to_string(G));
    try {
      require_group_counts(hits[s], trials[s]);
    } catch (const error& e) {
      throw error(std::string(e.what()) + " (seed " + std::to_string(s) + ")");
    }
  }
  seed_aggregate a;
  a.seeds = static_cast<std::int64_t>(trials.size());
  a.trials.assign(G, 0);
  a.hits.assign(G, 0);
  std::int64_t total = 0;
  for (std::size_t s = 0; s < trials.size(); ++s) {
    for (std::size_t g = 0; g < G; ++g) {
      if (__builtin_add_overflow(total, trials[s][g], &total) || total > max_total_trials) {
        fail("trials[" + std::to_string(s) + "][" + std::to_string(g) + "]", trials[s][g],
             "makes the pooled total exceed 2^53 = " + std::to_string(max_total_trials));
      }
      a.trials[g] += trials[s][g];  // ≤ total: cannot overflow
      a.hits[g] += hits[s][g];      // ≤ trials
    }
    a.seed_gaps.push_back(detail::gap_of(hits[s], trials[s]).gap);
  }
  a.mean_recall.resize(G);
  a.sd_recall.resize(G);
  a.se_recall.resize(G);
  for (std::size_t g = 0; g < G; ++g) {
    std::vector<double> r;
    for (std::size_t s = 0; s < trials.size(); ++s)
      if (trials[s][g] > 0) r.push_back(static_cast<double>(hits[s][g]) / static_cast<double>(trials[s][g]));
    detail::mean_sd(r, a.mean_recall[g], a.sd_recall[g]);
    a.se_recall[g] = r.size() > 1 ? a.sd_recall[g] / std::sqrt(static_cast<double>(r.size())) : 0.0;
  }
  detail::mean_sd(a.seed_gaps, a.gap_mean, a.gap_sd);
  return a;
}

}  // namespace kvphase::stats
