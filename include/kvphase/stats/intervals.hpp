#pragma once
/// \file stats/intervals.hpp
/// Binomial confidence intervals for a recall estimate k/n: Wilson score (the default) and
/// Clopper–Pearson ("exact", conservative), plus the input checks every stats function shares.
///
/// Conventions (all functions here):
/// - hits k and trials n are 64-bit counts with 0 ≤ k ≤ n; anything else throws kvphase::error
///   naming the parameter.
/// - confidence is two-sided, strictly inside (0, 1) (e.g. 0.95).
/// - n = 0 is allowed and defined: recall 0 and the uninformative interval [0, 1].
/// - Per-group counts (require_group_counts, used by every stats function on groups): the total
///   Σ_g trials_g is summed with overflow checks and must not exceed max_total_trials = 2^53, so
///   every count and every sum of counts is exact in a double and no int64 sum overflows.
/// - Intervals are clamped to [0, 1]; k = 0 gives low = 0 exactly and k = n gives high = 1
///   exactly (both methods). Nothing returns NaN.
///
/// Wilson (1927): with z = Φ⁻¹(1 − α/2), p̂ = k/n,
///   centre = (p̂ + z²/(2n)) / (1 + z²/n),  half = z/(1 + z²/n) · sqrt(p̂(1 − p̂)/n + z²/(4n²)).
/// Clopper–Pearson (1934): low = B⁻¹(α/2; k, n − k + 1), high = B⁻¹(1 − α/2; k + 1, n − k), with
///   B⁻¹ the beta quantile (Boost.Math), low = 0 when k = 0 and high = 1 when k = n. Where
///   Boost cannot evaluate the quantile (huge, unequal shapes such as 1.5e11 of 1e12) the
///   Chernoff interval, with the same never-below-nominal guarantee and ~20% wider, is returned.
/// Simultaneous intervals (simultaneous_intervals): Clopper–Pearson for every group at the Šidák
///   per-group error 1 − confidence^(1/M'), jointly covering all M' non-empty groups' recalls
///   with probability ≥ confidence (the basis of the phase-gap interval, stats/gap.hpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iosfwd>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/special.hpp"

namespace kvphase::stats {

/// A two-sided interval [low, high] on a probability.
struct interval {
  double low = 0.0;
  double high = 1.0;
  friend bool operator==(const interval&, const interval&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const interval& ci) {
  return os << '[' << ci.low << ", " << ci.high << ']';
}

/// Which binomial interval to compute.
enum class interval_method { wilson, clopper_pearson };

inline const char* to_string(interval_method m) noexcept {
  return m == interval_method::wilson ? "wilson" : "clopper_pearson";
}
/// Parses "wilson" or "clopper_pearson" (also "clopper-pearson", "exact"); throws otherwise.
inline interval_method parse_interval_method(std::string_view s) {
  if (s == "wilson") return interval_method::wilson;
  if (s == "clopper_pearson" || s == "clopper-pearson" || s == "exact")
    return interval_method::clopper_pearson;
  fail("interval_method", std::string(s), "must be wilson or clopper_pearson");
}

/// Throws unless 0 < confidence < 1.
inline void require_confidence(double confidence, std::string_view parameter = "confidence") {
  require(std::isfinite(confidence) && confidence > 0.0 && confidence < 1.0, parameter, confidence,
          "must lie strictly between 0 and 1");
}

/// Throws unless 0 ≤ hits ≤ trials (names `hits_name` / `trials_name`).
inline void require_counts(std::int64_t hits, std::int64_t trials, std::string_view hits_name = "hits",
                           std::string_view trials_name = "trials") {
  require(trials >= 0, trials_name, trials, "must be >= 0");
  require(hits >= 0, hits_name, hits, "must be >= 0");
  if (hits > trials) {
    fail(hits_name, hits, "must be <= trials (" + std::string(trials_name) + " = " + std::to_string(trials) + ")");
  }
}

/// Largest total number of trials (summed over groups, and over seeds when pooling) any stats
/// function accepts: 2^53, the largest integer range a double holds exactly.
inline constexpr std::int64_t max_total_trials = std::int64_t{1} << 53;

/// Σ values with overflow checks; throws (naming `parameter`) when the sum exceeds
/// max_total_trials. Values are assumed ≥ 0 (checked by the callers).
inline std::int64_t checked_total(std::span<const std::int64_t> values, std::string_view parameter = "trials") {
  std::int64_t total = 0;
  for (std::size_t g = 0; g < values.size(); ++g) {
    std::int64_t next = 0;
    if (__builtin_add_overflow(total, values[g], &next) || next > max_total_trials) {
      fail("sum of " + std::string(parameter), next > max_total_trials ? next : values[g],
           "must be <= 2^53 = " + std::to_string(max_total_trials) + " (exceeded at " + std::string(parameter) + "[" +
               std::to_string(g) + "])");
    }
    total = next;
  }
  return total;
}

/// Throws unless hits and trials have the same, non-zero length, every pair is valid and the
/// total number of trials is at most max_total_trials. Names the offending element, e.g. "hits[3]".
inline void require_group_counts(std::span<const std::int64_t> hits, std::span<const std::int64_t> trials) {
  require(!trials.empty(), "trials.size()", trials.size(), "must be >= 1 (one entry per group)");
  require(hits.size() == trials.size(), "hits.size()", hits.size(),
          "must equal trials.size() = " + std::to_string(trials.size()));
  for (std::size_t g = 0; g < trials.size(); ++g) {
    if (hits[g] >= 0 && trials[g] >= 0 && hits[g] <= trials[g]) continue;
    std::string hn = "hits[", tn = "trials[";
    hn.append(std::to_string(g)).push_back(']');
    tn.append(std::to_string(g)).push_back(']');
    require_counts(hits[g], trials[g], hn, tn);
  }
  (void)checked_total(trials, "trials");
}

/// Point estimate k/n; 0 when n = 0 (defined, never NaN).
inline double recall(std::int64_t hits, std::int64_t trials) {
  require_counts(hits, trials);
  return trials == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(trials);
}

/// Two-sided standard normal quantile z = Φ⁻¹(1 − (1 − confidence)/2).
inline double two_sided_z(double confidence) {
  require_confidence(confidence);
  return special::normal_upper_quantile((1.0 - confidence) / 2.0);
}

/// Wilson score interval for hits/trials at the given two-sided confidence.
inline interval wilson_interval(std::int64_t hits, std::int64_t trials, double confidence = 0.95) {
  require_counts(hits, trials);
  require_confidence(confidence);
  if (trials == 0) return {0.0, 1.0};
  const double z = two_sided_z(confidence);
  const double n = static_cast<double>(trials);
  const double p = static_cast<double>(hits) / n;
  const double z2n = z * z / n;
  const double centre = (p + z2n / 2.0) / (1.0 + z2n);
  const double half = z / (1.0 + z2n) * std::sqrt(p * (1.0 - p) / n + z2n / (4.0 * n));
  interval ci{std::max(0.0, centre - half), std::min(1.0, centre + half)};
  if (hits == 0) ci.low = 0.0;
  if (hits == trials) ci.high = 1.0;
  return ci;
}

namespace detail {
/// Clopper–Pearson at two-sided error alpha (each tail alpha/2); counts already checked,
/// 0 < alpha < 1. Taking alpha rather than 1 − alpha keeps small per-group errors (Šidák
/// levels) exact.
/// evaluate_in_double: Boost's policy promote_double<false> instead of the default policy.
inline interval clopper_pearson_with(std::int64_t hits, std::int64_t trials, double alpha, bool evaluate_in_double) {
  const double k = static_cast<double>(hits);
  const double n = static_cast<double>(trials);
  interval ci{0.0, 1.0};
  if (hits > 0) ci.low = special::beta_quantile(k, n - k + 1.0, alpha / 2.0, false, evaluate_in_double);
  if (hits < trials) ci.high = special::beta_quantile(k + 1.0, n - k, alpha / 2.0, true, evaluate_in_double);
  return ci;
}
/// Chernoff interval {p : n·KL(p̂ ‖ p) ≤ ln(2/alpha)}: each tail P(X ≥ k | p) ≤ exp(−n·KL)
/// (Chernoff–Hoeffding), so it covers with probability ≥ 1 − alpha for every n, like
/// Clopper–Pearson, and is about sqrt(ln(2/α) / (z²/2)) times wider (1.25 at α = 0.0064). At
/// k = 0 its upper end 1 − (α/2)^(1/n) equals Clopper–Pearson's. Solved by bisection in
/// δ = p − p̂ with KL written through log1p (accurate when n·KL is O(1) at n = 2^53).
inline interval chernoff_alpha(std::int64_t hits, std::int64_t trials, double alpha) {
  const double n = static_cast<double>(trials), a = static_cast<double>(hits) / n;
  const double level = std::log(2.0 / alpha) / n;
  auto kl = [&](double p) {  // KL(a ‖ p), 0 < p < 1
    const double d = p - a;
    double v = 0.0;
    if (a > 0.0) v -= a * std::log1p(d / a);
    if (a < 1.0) v -= (1.0 - a) * std::log1p(-d / (1.0 - a));
    return v;
  };
  auto solve = [&](double inside, double outside) {  // kl(inside) ≤ level < kl(outside)
    for (int i = 0; i < 200 && inside != outside; ++i) {
      const double mid = 0.5 * (inside + outside);
      if (mid == inside || mid == outside) break;
      (kl(mid) <= level ? inside : outside) = mid;
    }
    return inside;
  };
  interval ci{0.0, 1.0};
  if (hits > 0) ci.low = solve(a, 0.0);
  if (hits < trials) ci.high = solve(a, 1.0);
  if (hits == 0) ci.high = -std::expm1(-level);
  if (hits == trials) ci.low = std::exp(-level);
  return ci;
}

/// Boost's default policy evaluates in long double, whose incomplete-gamma series gives up for
/// large unequal shape parameters (e.g. 1.5e11 hits of 1e12); evaluating in double succeeds for
/// some of those; where neither does, the Chernoff interval (same guarantee, a little wider)
/// is returned.
inline interval clopper_pearson_alpha(std::int64_t hits, std::int64_t trials, double alpha) {
  if (trials == 0) return {0.0, 1.0};
  try {
    return clopper_pearson_with(hits, trials, alpha, false);
  } catch (const std::exception&) {
  }
  try {
    return clopper_pearson_with(hits, trials, alpha, true);
  } catch (const std::exception&) {
  }
  return chernoff_alpha(hits, trials, alpha);
}
}  // namespace detail

/// Clopper–Pearson interval for hits/trials at the given two-sided confidence.
inline interval clopper_pearson_interval(std::int64_t hits, std::int64_t trials, double confidence = 0.95) {
  require_counts(hits, trials);
  require_confidence(confidence);
  return detail::clopper_pearson_alpha(hits, trials, 1.0 - confidence);
}

/// Per-interval two-sided error of m simultaneous intervals with joint confidence `confidence`
/// for independent estimates (Šidák): 1 − (confidence)^(1/m) = −expm1(log(confidence)/m).
/// m ≥ 1; with m = 1 it is 1 − confidence.
inline double sidak_alpha(double confidence, std::int64_t m) {
  require_confidence(confidence);
  require(m >= 1, "m", m, "must be >= 1 (number of simultaneous intervals)");
  return -std::expm1(std::log(confidence) / static_cast<double>(m));
}

/// Simultaneous Clopper–Pearson intervals for every group: each at two-sided error
/// sidak_alpha(confidence, M'), M' = number of groups with at least one trial (empty groups get
/// [0, 1] and do not count). For independent groups — trials of different groups are
/// independent draws — P(every p_g inside its interval) = Π_g P(p_g inside) ≥
/// (confidence^(1/M'))^M' = confidence, for every sample size: Clopper–Pearson never covers
/// below its level, so the guarantee is exact, not asymptotic.
inline std::vector<interval> simultaneous_intervals(std::span<const std::int64_t> hits,
                                                    std::span<const std::int64_t> trials, double confidence = 0.95) {
  require_group_counts(hits, trials);
  require_confidence(confidence);
  std::int64_t nonempty = 0;
  for (auto n : trials) nonempty += n > 0;
  std::vector<interval> out(trials.size(), interval{0.0, 1.0});
  if (nonempty == 0) return out;
  const double alpha = sidak_alpha(confidence, nonempty);
  for (std::size_t g = 0; g < trials.size(); ++g) out[g] = detail::clopper_pearson_alpha(hits[g], trials[g], alpha);
  return out;
}

/// The interval chosen by `method` (Wilson by default).
inline interval binomial_interval(std::int64_t hits, std::int64_t trials, double confidence = 0.95,
                                  interval_method method = interval_method::wilson) {
  return method == interval_method::wilson ? wilson_interval(hits, trials, confidence)
                                           : clopper_pearson_interval(hits, trials, confidence);
}

}  // namespace kvphase::stats
