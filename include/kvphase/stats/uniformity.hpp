#pragma once
/// \file stats/uniformity.hpp
/// Test of equal recall across phase groups on the k × 2 contingency table (group × hit/miss):
/// Pearson's chi-square (default) or the likelihood-ratio G test, both referred to χ²(k' − 1),
/// where k' is the number of groups with at least one trial.
///
///   p̂ = Σ hits / Σ trials,  E_hit,g = n_g p̂,  E_miss,g = n_g (1 − p̂)
///   X² = Σ_g Σ_cell (O − E)² / E = Σ_g n_g (p̂_g − p̂)² / (p̂ (1 − p̂))
///   G  = 2 Σ_g Σ_cell O ln(O / E)   (0 ln 0 = 0)
///
/// Defined behaviour, never NaN: groups with zero trials are left out; with fewer than two
/// non-empty groups, or when every trial is a hit or none is (p̂ ∈ {0, 1}), there is no evidence
/// against equality: statistic 0, p = 1. Σ trials ≤ max_total_trials (2^53, checked) keeps every
/// sum exact in double.
/// The χ² reference is asymptotic; with expected cell counts below ~5 prefer the permutation
/// p-value of periodicity_test (which, at period = modulus, tests exactly this hypothesis).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "kvphase/core/error.hpp"
#include "kvphase/core/special.hpp"
#include "kvphase/stats/intervals.hpp"

namespace kvphase::stats {

enum class uniformity_method { pearson_chi_square, g_test };

inline const char* to_string(uniformity_method m) noexcept {
  return m == uniformity_method::pearson_chi_square ? "pearson_chi_square" : "g_test";
}

/// Result of a hypothesis test with a chi-square (or permutation) reference.
struct test_result {
  double statistic = 0.0;
  double dof = 0.0;
  double p = 1.0;
  std::string test;  ///< which test produced p, e.g. "pearson_chi_square"
};

inline std::ostream& operator<<(std::ostream& os, const test_result& r) {
  return os << r.test << ": statistic " << r.statistic << ", dof " << r.dof << ", p " << r.p;
}

/// Upper-tail probability of χ²(dof) at x; 1 for x ≤ 0 or dof ≤ 0.
inline double chi_square_upper_tail(double x, double dof) {
  if (!(x > 0.0) || !(dof > 0.0)) return 1.0;
  return std::clamp(special::chi_squared_upper_tail(x, dof), 0.0, 1.0);
}

/// Test of equal recall across groups. hits[g] ≤ trials[g], same length ≥ 1 (throws otherwise).
inline test_result uniformity_test(std::span<const std::int64_t> hits, std::span<const std::int64_t> trials,
                                   uniformity_method method = uniformity_method::pearson_chi_square) {
  require_group_counts(hits, trials);
  test_result r;
  r.test = to_string(method);
  double n_total = 0.0, h_total = 0.0;
  int groups = 0;
  for (std::size_t g = 0; g < trials.size(); ++g) {
    if (trials[g] == 0) continue;
    ++groups;
    n_total += static_cast<double>(trials[g]);
    h_total += static_cast<double>(hits[g]);
  }
  r.dof = std::max(groups - 1, 0);
  if (groups < 2 || h_total == 0.0 || h_total == n_total) return r;  // statistic 0, p 1
  const double p = h_total / n_total;
  double stat = 0.0;
  for (std::size_t g = 0; g < trials.size(); ++g) {
    if (trials[g] == 0) continue;
    const double n = static_cast<double>(trials[g]);
    const double o1 = static_cast<double>(hits[g]), o0 = n - o1;
    const double e1 = n * p, e0 = n * (1.0 - p);
    if (method == uniformity_method::pearson_chi_square) {
      stat += (o1 - e1) * (o1 - e1) / e1 + (o0 - e0) * (o0 - e0) / e0;
    } else {
      if (o1 > 0) stat += 2.0 * o1 * std::log(o1 / e1);
      if (o0 > 0) stat += 2.0 * o0 * std::log(o0 / e0);
    }
  }
  r.statistic = std::max(stat, 0.0);
  r.p = chi_square_upper_tail(r.statistic, r.dof);
  return r;
}

}  // namespace kvphase::stats
