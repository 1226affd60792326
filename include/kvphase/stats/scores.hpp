#pragma once
/// \file stats/scores.hpp
/// Continuous per-item scores by phase (e.g. a real model's log-probability margin): per-phase
/// mean with its Student-t interval, a one-way ANOVA F test of equal means across the phases
/// (uniformity) and across the residues mod the period (periodicity: with the M phases folded
/// onto phase mod S, the F test of the S folded means — the score analogue of the harmonic test
/// of stats/periodicity.hpp, whose harmonics of period S span exactly the functions of phase mod
/// S), and, when every item is seen at every phase, Friedman's rank test (stats/paired.hpp).
///
///   F = [Σ_j n_j (x̄_j − x̄)² / (k − 1)] / [Σ_j Σ_i (x_ij − x̄_j)² / (N − k)]  on F(k − 1, N − k).
/// Defined behaviour, never NaN: fewer than two non-empty groups, N ≤ k, or no within-group
/// variation → statistic 0, p = 1 (with no within-group variation but different means the test
/// cannot be formed either: p = 1, and the means say it). A phase with n < 2 has the
/// degenerate interval [mean, mean].

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>


#include "kvphase/core/error.hpp"
#include "kvphase/core/special.hpp"
#include "kvphase/stats/intervals.hpp"
#include "kvphase/stats/paired.hpp"
#include "kvphase/stats/uniformity.hpp"

namespace kvphase::stats {

/// Per-phase score moments: n, mean and the sum of squared deviations m2 (Welford).
struct score_moments {
  std::vector<std::int64_t> n;
  std::vector<double> mean, m2;
  std::optional<friedman_counts> friedman;  ///< items seen at every phase

  static score_moments zero(std::int64_t groups) {
    require(groups >= 1 && groups <= 4096, "scores.groups", groups, "must be in [1, 4096]");
    score_moments s;
    s.n.assign(static_cast<std::size_t>(groups), 0);
    s.mean.assign(static_cast<std::size_t>(groups), 0.0);
    s.m2.assign(static_cast<std::size_t>(groups), 0.0);
    return s;
  }
  void add(std::int64_t phase, double x) {
    require(phase >= 0 && phase < static_cast<std::int64_t>(n.size()), "phase", phase, "must be in [0, groups)");
    require(std::isfinite(x), "score", x, "must be finite");
    const auto g = static_cast<std::size_t>(phase);
    ++n[g];
    const double d = x - mean[g];
    mean[g] += d / static_cast<double>(n[g]);
    m2[g] += d * (x - mean[g]);
  }
  friend bool operator==(const score_moments&, const score_moments&) = default;
};

/// F test of equal means across groups given their moments.
inline test_result anova_f_test(std::span<const std::int64_t> n, std::span<const double> mean,
                                std::span<const double> m2) {
  test_result r;
  r.test = "anova_f";
  double N = 0, sum = 0, within = 0;
  int k = 0;
  for (std::size_t g = 0; g < n.size(); ++g) {
    if (n[g] == 0) continue;
    ++k;
    N += static_cast<double>(n[g]);
    sum += static_cast<double>(n[g]) * mean[g];
    within += m2[g];
  }
  r.dof = std::max(k - 1, 0);
  if (k < 2 || N <= k || !(within > 0)) return r;
  const double grand = sum / N;
  double between = 0;
  for (std::size_t g = 0; g < n.size(); ++g)
    if (n[g]) between += static_cast<double>(n[g]) * (mean[g] - grand) * (mean[g] - grand);
  const double d1 = k - 1.0, d2 = N - k;
  r.statistic = std::max(0.0, (between / d1) / (within / d2));
  r.p = r.statistic > 0 ? std::clamp(special::fisher_f_upper_tail(r.statistic, d1, d2), 0.0, 1.0) : 1.0;
  return r;
}

/// Summary of the scores of one model.
struct score_summary {
  std::vector<std::int64_t> n;
  std::vector<double> mean, sd;
  std::vector<interval> ci;  ///< Student t at the confidence (not clamped to [0, 1])
  test_result uniformity;    ///< F across the M phases
  std::int64_t period = 0;
  test_result periodicity;  ///< F across the S residues mod the period
  std::optional<test_result> friedman;
};

inline score_summary summarize_scores(const score_moments& s, std::int64_t period, double confidence = 0.95) {
  require_confidence(confidence, "scores.confidence");
  const std::size_t M = s.n.size();
  require(M >= 1 && s.mean.size() == M && s.m2.size() == M, "scores", M,
          "n, mean and m2 must have one entry per phase");
  require(period >= 1 && static_cast<std::size_t>(period) <= M && M % static_cast<std::size_t>(period) == 0,
          "scores.period", period, "must divide the number of phases " + std::to_string(M));
  score_summary r;
  r.n = s.n;
  r.mean = s.mean;
  r.period = period;
  for (std::size_t g = 0; g < M; ++g) {
    const double n = static_cast<double>(s.n[g]);
    const double sd = s.n[g] >= 2 ? std::sqrt(std::max(s.m2[g], 0.0) / (n - 1)) : 0.0;
    r.sd.push_back(sd);
    if (s.n[g] < 2) {
      r.ci.push_back({s.mean[g], s.mean[g]});
      continue;
    }
    const double h = special::students_t_upper_quantile(n - 1, (1 - confidence) / 2) * sd / std::sqrt(n);
    r.ci.push_back({s.mean[g] - h, s.mean[g] + h});
  }
  r.uniformity = anova_f_test(s.n, s.mean, s.m2);
  // fold onto phase mod period (Chan et al. pairwise combination of the moments)
  const auto S = static_cast<std::size_t>(period);
  std::vector<std::int64_t> fn(S, 0);
  std::vector<double> fm(S, 0.0), f2(S, 0.0);
  for (std::size_t g = 0; g < M; ++g) {
    const std::size_t j = g % S;
    if (s.n[g] == 0) continue;
    const double na = static_cast<double>(fn[j]), nb = static_cast<double>(s.n[g]);
    const double d = s.mean[g] - fm[j];
    fm[j] += d * nb / (na + nb);
    f2[j] += s.m2[g] + d * d * na * nb / (na + nb);
    fn[j] += s.n[g];
  }
  r.periodicity = anova_f_test(fn, fm, f2);
  if (s.friedman) r.friedman = friedman_test(*s.friedman);
  return r;
}

}  // namespace kvphase::stats
