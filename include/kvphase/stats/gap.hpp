#pragma once
/// \file stats/gap.hpp
/// The phase gap Δ = max_g p_g − min_g p_g over phase groups: a point estimate, a bias-corrected
/// estimate and an interval with guaranteed coverage (the headline), plus the old percentile
/// bootstrap interval kept for comparison.
///
/// Estimand: the population gap over the groups with at least one trial (the groups measured);
/// with fewer than two such groups it is 0 by definition and every output is 0 / [0, 0].
///
/// Raw estimate (`gap`): max_g p̂_g − min_g p̂_g. argmax/argmin report the groups (lowest index
/// on ties; −1 if none). It is biased upwards by noise (E[max] > max E), most visibly when
/// the true gap is near 0: a flat model gets a positive raw gap.
///
/// Headline interval (`simultaneous`): simultaneous Clopper–Pearson intervals [L_g, U_g], each at
/// two-sided error 1 − confidence^(1/M') (Šidák; M' non-empty groups, stats::simultaneous_intervals),
///   [max(0, max_g L_g − min_h U_h), max_g U_g − min_h L_g]  (clamped to [0, 1]).
/// Coverage guarantee: groups are independent and Clopper–Pearson never covers below its level,
/// so with probability ≥ confidence every p_g lies in [L_g, U_g]; then max p ∈ [max L, max U]
/// and min p ∈ [min L, min U], so Δ lies in the interval. This holds for every sample size and
/// every configuration (conservative: the actual coverage is above the nominal level). It
/// always contains the raw gap (L_g ≤ p̂_g ≤ U_g) and, for flat data, 0 unless some groups'
/// intervals are disjoint. Degenerate data are defined: all hits (or none) in every group gives
/// gap 0 and [0, max_g U_g − min_h L_g] (small n cannot rule out a gap); one trial per group
/// gives [0, 1] when hits and misses both occur.
///
/// Bias-corrected estimate (`bias_corrected`): the bootstrap bias correction
/// 2·gap − mean_b(gap*_b) (Efron & Tibshirani 1993, §10.3), clamped into `simultaneous` (so it is
/// ≥ 0 and never outside the headline interval). Equal to `gap` when replicates = 0.
///
/// Percentile interval (`ci`, kept for comparison only): parametric bootstrap of the counts.
/// Replicate b draws hits*_g ~ Binomial(n_g, p̂_g) independently per group (stats::binomial_draw)
/// and records the raw gap of the replicate. For binary outcomes this is also exactly the
/// nonparametric bootstrap (resampling a group's n_g trials with replacement gives a
/// Binomial(n_g, p̂_g) number of hits). The interval is the (α/2, 1 − α/2) percentile of the
/// replicate gaps (type-7 interpolation), widened if needed to contain `gap`. It inherits the
/// upward bias and has NO coverage guarantee: for flat data it usually excludes 0.
/// Randomness: replicate b reads stream (seed, combine(gap_bootstrap_tag, b)), groups in order:
/// results are a pure function of (counts, options). Every group at 0 or 1: every replicate
/// equals the data, so ci = [gap, gap] and bias_corrected = gap.
///
/// Difference of two models' gaps (gap_difference_bootstrap): Δ_a − Δ_b. Headline interval:
/// each model's simultaneous gap interval at confidence 1 − α/2, combined as
/// [low_a − high_b, high_a − low_b]; by Bonferroni both hold together with probability ≥ 1 − α
/// whatever the dependence between the two models (they often share inputs), so the interval
/// covers Δ_a − Δ_b with probability ≥ confidence. Bias-corrected difference and percentile
/// interval as above, from a joint bootstrap of both models.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/stats/bootstrap.hpp"
#include "kvphase/stats/intervals.hpp"

namespace kvphase::stats {

struct gap_options {
  std::int64_t replicates = 2000;  ///< bootstrap replicates, 0 ≤ replicates ≤ max_resamples (10^6);
                                   ///< 0 skips the bootstrap (ci = [gap, gap], bias_corrected = gap)
  double confidence = 0.95;        ///< two-sided, of every interval
  std::uint64_t seed = 0;          ///< stream seed

  void validate() const {
    require(replicates >= 0, "gap_options.replicates", replicates, "must be >= 0");
    require(replicates <= max_resamples, "gap_options.replicates", replicates,
            "must be <= " + std::to_string(max_resamples));
    require_confidence(confidence, "gap_options.confidence");
  }
};

inline std::ostream& operator<<(std::ostream& os, const gap_options& o) {
  return os << "gap_options{replicates=" << o.replicates << ", confidence=" << o.confidence << ", seed=" << o.seed
            << '}';
}

/// The headline figures are `bias_corrected` with `simultaneous`; `gap` is the raw estimate and
/// `ci` its percentile bootstrap interval (no coverage guarantee, see the file comment).
struct gap_result {
  double gap = 0.0;        ///< raw max − min of the observed recalls (biased upwards)
  interval ci{0.0, 0.0};   ///< percentile bootstrap interval of the raw gap, for comparison only
                           ///< (contains gap; [gap, gap] when replicates = 0)
  std::int64_t argmax = -1;
  std::int64_t argmin = -1;
  std::int64_t replicates = 0;
  double bias_corrected = 0.0;        ///< 2·gap − mean bootstrap gap, clamped into `simultaneous`
  interval simultaneous{0.0, 0.0};    ///< covers the population gap with probability ≥ confidence
  double group_alpha = 0.0;           ///< two-sided error of each group's Clopper–Pearson interval
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

/// The headline gap interval from simultaneous Clopper–Pearson group intervals (see the file
/// comment): covers max_g p_g − min_g p_g over non-empty groups with probability ≥ confidence.
/// [0, 0] with fewer than two non-empty groups.
inline interval gap_simultaneous_interval(std::span<const std::int64_t> hits, std::span<const std::int64_t> trials,
                                          double confidence = 0.95) {
  const auto ci = simultaneous_intervals(hits, trials, confidence);
  double max_low = 0.0, max_high = 0.0, min_low = 1.0, min_high = 1.0;
  std::int64_t nonempty = 0;
  for (std::size_t g = 0; g < trials.size(); ++g) {
    if (trials[g] == 0) continue;
    ++nonempty;
    max_low = std::max(max_low, ci[g].low);
    max_high = std::max(max_high, ci[g].high);
    min_low = std::min(min_low, ci[g].low);
    min_high = std::min(min_high, ci[g].high);
  }
  if (nonempty < 2) return {0.0, 0.0};
  return {std::clamp(max_low - min_high, 0.0, 1.0), std::clamp(max_high - min_low, 0.0, 1.0)};
}

namespace detail {
/// Percentile interval of `values` at `confidence`, widened to contain `estimate`.
inline interval percentile_interval(const std::vector<double>& values, double confidence, double estimate) {
  const double a = (1.0 - confidence) / 2.0;
  return {std::min(percentile(values, a), estimate), std::max(percentile(values, 1.0 - a), estimate)};
}
inline double mean_of(const std::vector<double>& values) noexcept {
  long double s = 0.0L;
  for (double v : values) s += v;
  return values.empty() ? 0.0 : static_cast<double>(s / static_cast<long double>(values.size()));
}
inline std::vector<double> rates_of(std::span<const std::int64_t> h, std::span<const std::int64_t> t) {
  std::vector<double> p(t.size(), 0.0);
  for (std::size_t g = 0; g < t.size(); ++g)
    if (t[g] > 0) p[g] = static_cast<double>(h[g]) / static_cast<double>(t[g]);
  return p;
}
inline bool all_degenerate(std::span<const std::int64_t> h, std::span<const std::int64_t> t) noexcept {
  for (std::size_t g = 0; g < t.size(); ++g)
    if (t[g] > 0 && h[g] != 0 && h[g] != t[g]) return false;
  return true;
}
}  // namespace detail

/// The gap, its bias-corrected estimate, the simultaneous (headline) interval and the
/// percentile bootstrap interval (see the file comment).
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
  r.bias_corrected = r.gap;
  r.simultaneous = gap_simultaneous_interval(hits, trials, options.confidence);
  std::int64_t nonempty = 0;
  for (auto n : trials) nonempty += n > 0;
  r.group_alpha = nonempty > 0 ? sidak_alpha(options.confidence, nonempty) : 0.0;
  // Every group at 0 or 1: every replicate equals the data.
  if (options.replicates == 0 || detail::all_degenerate(hits, trials)) return r;
  const auto p = detail::rates_of(hits, trials);
  std::vector<double> gaps(static_cast<std::size_t>(options.replicates));
  std::vector<std::int64_t> h(trials.size());
  for (std::int64_t b = 0; b < options.replicates; ++b) {
    auto s = replicate_stream(options.seed, gap_bootstrap_tag, static_cast<std::uint64_t>(b));
    for (std::size_t g = 0; g < trials.size(); ++g) h[g] = binomial_draw(trials[g], p[g], s);
    gaps[static_cast<std::size_t>(b)] = detail::gap_of(h, trials).gap;
  }
  r.ci = detail::percentile_interval(gaps, options.confidence, r.gap);
  r.bias_corrected = std::clamp(2.0 * r.gap - detail::mean_of(gaps), r.simultaneous.low, r.simultaneous.high);
  return r;
}

/// Difference of phase gaps between two models (gap_a − gap_b, e.g. compressed − full). The
/// headline is `bias_corrected` with `simultaneous` (Bonferroni over the two models' Šidák gap
/// intervals, valid whatever their dependence; see the file comment). `difference` is the raw
/// difference and `ci` its percentile bootstrap interval (comparison only): replicate b redraws
/// both models' counts as in phase_gap_bootstrap (model a's groups first, then model b's, from
/// one stream) and records the difference; the models are resampled independently.
struct gap_difference_result {
  double difference = 0.0;           ///< raw gap_a − gap_b
  interval ci{0.0, 0.0};             ///< percentile bootstrap, comparison only (contains difference)
  std::int64_t replicates = 0;
  double bias_corrected = 0.0;       ///< 2·difference − mean bootstrap difference, clamped into simultaneous
  interval simultaneous{0.0, 0.0};   ///< covers Δ_a − Δ_b with probability ≥ confidence
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
  r.bias_corrected = r.difference;
  // Bonferroni over the two models: each gap interval at error α/2.
  const double half_confidence = 1.0 - (1.0 - options.confidence) / 2.0;
  const interval ia = gap_simultaneous_interval(hits_a, trials_a, half_confidence);
  const interval ib = gap_simultaneous_interval(hits_b, trials_b, half_confidence);
  r.simultaneous = {ia.low - ib.high, ia.high - ib.low};
  if (options.replicates == 0 || (detail::all_degenerate(hits_a, trials_a) && detail::all_degenerate(hits_b, trials_b)))
    return r;
  const auto pa = detail::rates_of(hits_a, trials_a), pb = detail::rates_of(hits_b, trials_b);
  std::vector<double> diffs(static_cast<std::size_t>(options.replicates));
  std::vector<std::int64_t> ha(trials_a.size()), hb(trials_b.size());
  for (std::int64_t b = 0; b < options.replicates; ++b) {
    auto s = replicate_stream(options.seed, gap_difference_tag, static_cast<std::uint64_t>(b));
    for (std::size_t g = 0; g < trials_a.size(); ++g) ha[g] = binomial_draw(trials_a[g], pa[g], s);
    for (std::size_t g = 0; g < trials_b.size(); ++g) hb[g] = binomial_draw(trials_b[g], pb[g], s);
    diffs[static_cast<std::size_t>(b)] = detail::gap_of(ha, trials_a).gap - detail::gap_of(hb, trials_b).gap;
  }
  r.ci = detail::percentile_interval(diffs, options.confidence, r.difference);
  r.bias_corrected =
      std::clamp(2.0 * r.difference - detail::mean_of(diffs), r.simultaneous.low, r.simultaneous.high);
  return r;
}

}  // namespace kvphase::stats
