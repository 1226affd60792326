#pragma once
/// \file stats/gap.hpp
/// The phase gap: max − min recall over phase groups, with a percentile bootstrap interval.
///
/// Point estimate: over groups with at least one trial, max_g p̂_g − min_g p̂_g (0 with fewer than
/// two non-empty groups). argmax/argmin report the groups (lowest index on ties; −1 if none).
///
/// Interval: parametric bootstrap of the counts. Replicate b draws hits*_g ~ Binomial(n_g, p̂_g)
/// independently per group and records the gap of the replicate. For binary outcomes this is
/// also exactly the nonparametric bootstrap (resampling a group's n_g trials with replacement
/// gives a Binomial(n_g, p̂_g) number of hits), so one procedure serves both readings. The
/// interval is the (α/2, 1 − α/2) percentile of the replicate gaps (type-7 interpolation).
/// Randomness: replicate b reads stream (seed, combine(gap_bootstrap_tag, b)), group g its g-th
/// uniform: the interval is a pure function of (counts, options).
///
/// Caveat (document in outputs): max − min is biased upwards by noise (E[max] > max E), most
/// visibly when the true gap is near 0; the percentile interval inherits that bias, so a flat
/// model has a positive gap estimate and an interval that excludes 0. Use uniformity_p /
/// period_p to decide whether there is a phase effect, and the gap to say how large it is.
/// Degenerate data (every trial a hit, or none): gap 0 and interval [0, 0].

#include <algorithm>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/stats/bootstrap.hpp"
#include "kvphase/stats/intervals.hpp"

namespace kvphase::stats {

struct gap_options {
  std::int64_t replicates = 2000;  ///< bootstrap replicates (≥ 1; 0 skips the interval)
  double confidence = 0.95;        ///< two-sided
  std::uint64_t seed = 0;          ///< stream seed

  void validate() const {
    require(replicates >= 0, "gap_options.replicates", replicates, "must be >= 0");
    require_confidence(confidence, "gap_options.confidence");
  }
};

inline std::ostream& operator<<(std::ostream& os, const gap_options& o) {
  return os << "gap_options{replicates=" << o.replicates << ", confidence=" << o.confidence << ", seed=" << o.seed
            << '}';
}

struct gap_result {
  double gap = 0.0;
  interval ci{0.0, 0.0};  ///< percentile bootstrap interval ([gap, gap] when replicates = 0)
  std::int64_t argmax = -1;
  std::int64_t argmin = -1;
  std::int64_t replicates = 0;
};

namespace detail {
struct gap_point {
  double gap = 0.0;
  std::int64_t argmax = -1, argmin = -1;
};
inline gap_point gap_of(std::span<const std::int64_t> hits, std::span<const std::int64_t> trials) noexcept {
  gap_point r;
  double hi = -1.0, lo = 2.0;
  for (std::size_t g = 0; g < trials.size(); ++g) {
    if (trials[g] == 0) continue;
    const double p = static_cast<double>(hits[g]) / static_cast<double>(trials[g]);
    if (p > hi) {
      hi = p;
      r.argmax = static_cast<std::int64_t>(g);
    }
    if (p < lo) {
      lo = p;
      r.argmin = static_cast<std::int64_t>(g);
    }
  }
  r.gap = (r.argmax >= 0 && hi > lo) ? hi - lo : 0.0;
  return r;
}
}  // namespace detail

/// max − min recall over non-empty groups (0 with fewer than two). Throws on invalid counts.
inline double phase_gap(std::span<const std::int64_t> hits, std::span<const std::int64_t> trials) {
  require_group_counts(hits, trials);
  return detail::gap_of(hits, trials).gap;
}

/// The gap with its percentile bootstrap interval (see the file comment).
inline gap_result phase_gap_bootstrap(std::span<const std::int64_t> hits, std::span<const std::int64_t> trials,
                                      const gap_options& options = {}) {
  require_group_counts(hits, trials);
  options.validate();
  const auto point = detail::gap_of(hits, trials);
  gap_result r;
  r.gap = point.gap;
  r.argmax = point.argmax;
  r.argmin = point.argmin;
  r.replicates = options.replicates;
  r.ci = {r.gap, r.gap};
  if (options.replicates == 0) return r;
  std::vector<double> p(trials.size());
  bool degenerate = true;
  for (std::size_t g = 0; g < trials.size(); ++g) {
    if (trials[g] == 0) continue;
    p[g] = static_cast<double>(hits[g]) / static_cast<double>(trials[g]);
    if (hits[g] != 0 && hits[g] != trials[g]) degenerate = false;
  }
  // Every group at 0 or 1: every replicate equals the data.
  if (degenerate) return r;
  std::vector<double> gaps(static_cast<std::size_t>(options.replicates));
  std::vector<std::int64_t> h(trials.size());
  for (std::int64_t b = 0; b < options.replicates; ++b) {
    auto s = replicate_stream(options.seed, gap_bootstrap_tag, static_cast<std::uint64_t>(b));
    for (std::size_t g = 0; g < trials.size(); ++g) h[g] = binomial_from_uniform(trials[g], p[g], s.uniform());
    gaps[static_cast<std::size_t>(b)] = detail::gap_of(h, trials).gap;
  }
  const double a = (1.0 - options.confidence) / 2.0;
  r.ci = {percentile(gaps, a), percentile(gaps, 1.0 - a)};
  return r;
}

/// Difference of phase gaps between two models (gap_a − gap_b, e.g. compressed − full) with a
/// percentile bootstrap interval: replicate b redraws both models' counts as in
/// phase_gap_bootstrap (model a's groups first, then model b's, from one stream) and records
/// the difference. The two models are resampled independently; when they ran on the same
/// inputs their outcomes are positively correlated and the interval is conservative (wider
/// than a paired bootstrap of per-trial outcomes would give).
struct gap_difference_result {
  double difference = 0.0;
  interval ci{0.0, 0.0};
  std::int64_t replicates = 0;
};

inline gap_difference_result gap_difference_bootstrap(std::span<const std::int64_t> hits_a,
                                                      std::span<const std::int64_t> trials_a,
                                                      std::span<const std::int64_t> hits_b,
                                                      std::span<const std::int64_t> trials_b,
                                                      const gap_options& options = {}) {
  require_group_counts(hits_a, trials_a);
  require_group_counts(hits_b, trials_b);
  options.validate();
  gap_difference_result r;
  r.difference = detail::gap_of(hits_a, trials_a).gap - detail::gap_of(hits_b, trials_b).gap;
  r.replicates = options.replicates;
  r.ci = {r.difference, r.difference};
  if (options.replicates == 0) return r;
  auto rates = [](std::span<const std::int64_t> h, std::span<const std::int64_t> t) {
    std::vector<double> p(t.size(), 0.0);
    for (std::size_t g = 0; g < t.size(); ++g)
      if (t[g] > 0) p[g] = static_cast<double>(h[g]) / static_cast<double>(t[g]);
    return p;
  };
  const auto pa = rates(hits_a, trials_a), pb = rates(hits_b, trials_b);
  std::vector<double> diffs(static_cast<std::size_t>(options.replicates));
  std::vector<std::int64_t> ha(trials_a.size()), hb(trials_b.size());
  for (std::int64_t b = 0; b < options.replicates; ++b) {
    auto s = replicate_stream(options.seed, gap_difference_tag, static_cast<std::uint64_t>(b));
    for (std::size_t g = 0; g < trials_a.size(); ++g) ha[g] = binomial_from_uniform(trials_a[g], pa[g], s.uniform());
    for (std::size_t g = 0; g < trials_b.size(); ++g) hb[g] = binomial_from_uniform(trials_b[g], pb[g], s.uniform());
    diffs[static_cast<std::size_t>(b)] = detail::gap_of(ha, trials_a).gap - detail::gap_of(hb, trials_b).gap;
  }
  const double a = (1.0 - options.confidence) / 2.0;
  r.ci = {percentile(diffs, a), percentile(diffs, 1.0 - a)};
  return r;
}

}  // namespace kvphase::stats
