#pragma once
/// \file stats/bootstrap.hpp
/// Resampling building blocks shared by the bootstrap and permutation tests: exact binomial and
/// hypergeometric draws by inversion of ONE uniform each (so every draw is a pure function of a
/// counter-based stream position), percentiles, and the stream keying.
///
/// Inversion order: the support is visited from the mode outwards (mode, mode+1, mode−1,
/// mode+2, …), subtracting probabilities from u until it is exhausted. Any fixed visiting order
/// of the support gives an exact sampler; starting at the mode makes the cost O(standard
/// deviation) instead of O(n). If rounding leaves u > 0 after all non-negligible mass has been
/// visited (probability < 1e-15), the mode is returned.
///
/// Large binomial counts: inversion costs O(sd) per draw (a million steps at 10^12 trials).
/// binomial_draw switches, when the variance n·p·(1 − p) reaches binomial_rejection_variance
/// (10^4, sd 100), to Hörmann's BTRD transformed rejection ("The generation of binomial random
/// variates", J. Statist. Comput. Simul. 46, 1993): exact, O(1) expected uniforms (about 2.3
/// per draw at most, fewer as the variance grows), its final acceptance test evaluated in long
/// double with log1p so the log-pmf ratio stays accurate at 2^53 trials. Below the threshold it
/// is binomial_from_uniform of one uniform, so results there are unchanged.
///
/// Large hypergeometric counts (permutations): hypergeometric_draw keeps one uniform per draw
/// and, from variance hypergeometric_approximation_variance (10^6, sd 1000), maps it through
/// the Cornish–Fisher quantile μ + σ(z + γ(z² − 1)/6), z = Φ⁻¹(u), γ the skewness, rounded to
/// the nearest count: O(1). Its total-variation distance from the exact law is below 1e-7 per
/// draw at the threshold (measured over shapes from symmetric to the most skewed one at that
/// variance; the error of this two-term expansion falls as 1/variance), far below the Monte
/// Carlo error of any permutation p-value. Below the threshold it is exact inversion.
///
/// Bounds: a resampling procedure runs at most max_resamples (10^6) replicates or permutations
/// (options' validate() rejects more): with O(1) draws a million replicates of 8 groups take a
/// second, and the replicate vector stays at 8 MB.
///
/// Streams: replicate b of a resampling procedure identified by `tag` under `seed` reads
/// rng::philox_stream(seed, rng::combine(tag, b)), so replicates are independent of each other,
/// of thread count and of order.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <string_view>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/special.hpp"

namespace kvphase::stats {

namespace detail {
/// ln C(n, k) for 0 ≤ k ≤ n (thread-safe: Boost's lgamma, not the C library's).
inline double log_choose(double n, double k) noexcept {
  return special::lgamma(n + 1.0) - special::lgamma(k + 1.0) - special::lgamma(n - k + 1.0);
}

/// Inversion from the mode outwards. pmf_mode = P(X = mode); ratio_up(x) = P(x+1)/P(x);
/// ratio_down(x) = P(x−1)/P(x).
template <class Up, class Down>
std::int64_t invert_from_mode(double u, std::int64_t lo, std::int64_t hi, std::int64_t mode, double pmf_mode,
                              Up ratio_up, Down ratio_down) noexcept {
  u -= pmf_mode;
  if (u <= 0.0) return mode;
  std::int64_t up = mode, down = mode;
  double p_up = pmf_mode, p_down = pmf_mode;
  bool up_open = up < hi, down_open = down > lo;
  while (up_open || down_open) {
    if (up_open) {
      p_up *= ratio_up(up);
      ++up;
      u -= p_up;
      if (u <= 0.0) return up;
      up_open = up < hi && p_up > 0.0;
    }
    if (down_open) {
      p_down *= ratio_down(down);
      --down;
      u -= p_down;
      if (u <= 0.0) return down;
      down_open = down > lo && p_down > 0.0;
    }
  }
  return mode;
}
}  // namespace detail

/// ln k! for 0 ≤ k ≤ max_n from a table (each entry from Boost's lgamma, so no accumulated
/// rounding), falling back to lgamma above the table. Tables larger than 2²² entries are not
/// built (32 MiB); every value then comes from lgamma.
class log_factorials {
 public:
  explicit log_factorials(std::int64_t max_n = 0) {
    if (max_n >= 0 && max_n <= (std::int64_t{1} << 22)) {
      table_.resize(static_cast<std::size_t>(max_n) + 1);
      for (std::size_t k = 0; k < table_.size(); ++k) table_[k] = special::lgamma(static_cast<double>(k) + 1.0);
    }
  }
  [[nodiscard]] double operator()(std::int64_t k) const noexcept {
    if (k >= 0 && static_cast<std::size_t>(k) < table_.size()) return table_[static_cast<std::size_t>(k)];
    return special::lgamma(static_cast<double>(k) + 1.0);
  }

 private:
  std::vector<double> table_;
};

/// Exact Binomial(n, p) draw from one uniform u ∈ (0, 1). n ≥ 0, 0 ≤ p ≤ 1 (caller checks).
inline std::int64_t binomial_from_uniform(std::int64_t n, double p, double u) noexcept {
  if (n == 0 || p <= 0.0) return 0;
  if (p >= 1.0) return n;
  const double nd = static_cast<double>(n);
  std::int64_t mode = static_cast<std::int64_t>(std::floor((nd + 1.0) * p));
  mode = std::clamp<std::int64_t>(mode, 0, n);
  const double md = static_cast<double>(mode);
  const double log_pmf = detail::log_choose(nd, md) + md * std::log(p) + (nd - md) * std::log1p(-p);
  const double odds = p / (1.0 - p);
  return detail::invert_from_mode(
      u, 0, n, mode, std::exp(log_pmf),
      [&](std::int64_t x) { return (nd - static_cast<double>(x)) / (static_cast<double>(x) + 1.0) * odds; },
      [&](std::int64_t x) { return static_cast<double>(x) / (nd - static_cast<double>(x) + 1.0) / odds; });
}

/// Largest number of bootstrap replicates or permutations a stats option accepts.
inline constexpr std::int64_t max_resamples = 1'000'000;

/// Variance n·p·(1 − p) from which binomial_draw uses BTRD instead of inversion.
inline constexpr double binomial_rejection_variance = 1e4;

namespace detail {
/// fc(k) = ln k! − [(k + ½) ln(k + 1) − (k + 1) + ½ ln 2π], the Stirling remainder (exact
/// values for k ≤ 9, the series 1/12 − 1/360 x⁻² + 1/1260 x⁻⁴ over x = k + 1 above, error
/// below 4e-11 at k = 10 and falling as x⁻⁷).
inline long double stirling_tail(std::int64_t k) noexcept {
  static constexpr long double table[10] = {0.08106146679532726L, 0.04134069595540929L, 0.02767792568499834L,
                                            0.02079067210376509L, 0.01664469118982119L, 0.01387612882307075L,
                                            0.01189670994589177L, 0.01041126526197209L, 0.009255462182712733L,
                                            0.008330563433362871L};
  if (k <= 9) return table[k];
  const long double x = static_cast<long double>(k) + 1.0L, x2 = x * x;
  return (1.0L / 12.0L - (1.0L / 360.0L - 1.0L / 1260.0L / x2) / x2) / x;
}

/// BTRD for 0 < p ≤ 1/2 and n·p·(1 − p) ≥ 10 (so the hat is valid). Reads two uniforms per
/// round from s until acceptance.
inline std::int64_t binomial_btrd(std::int64_t n, double p, rng::philox_stream& s) noexcept {
  const double nd = static_cast<double>(n), q = 1.0 - p;
  const double npq = nd * p * q, spq = std::sqrt(npq);
  const double b = 1.15 + 2.53 * spq;
  const double a = -0.0873 + 0.0248 * b + 0.01 * p;
  const double c = nd * p + 0.5;
  const double alpha = (2.83 + 5.1 / b) * spq;
  const double vr = 0.92 - 4.2 / b;
  const double r = p / q, nr = (nd + 1.0) * r;
  const std::int64_t m = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor((nd + 1.0) * p)), 0, n);
  const long double pl = p, ql = 1.0L - pl, nl = static_cast<long double>(n), ml = static_cast<long double>(m);
  const long double nm = nl - ml + 1.0L;
  // h = (m + ½) ln((m + 1) q / (p (n − m + 1))) + fc(m) + fc(n − m); the ratio is 1 + d/(p·nm).
  const long double h = (ml + 0.5L) * std::log1p(((ml + 1.0L) - pl * (nl + 2.0L)) / (pl * nm)) + stirling_tail(m) +
                        stirling_tail(n - m);
  for (;;) {
    const double u = s.uniform() - 0.5;
    double v = s.uniform();
    const double us = 0.5 - std::abs(u);
    const double kd = std::floor((2.0 * a / us + b) * u + c);
    if (kd < 0.0 || kd > nd) continue;
    const std::int64_t k = static_cast<std::int64_t>(kd);
    if (us >= 0.07 && v <= vr) return k;  // inside the box below the pmf
    v *= alpha / (a / (us * us) + b);       // uniform under the hat, in units of pmf(m)
    const std::int64_t km = k > m ? k - m : m - k;
    if (km <= 15) {  // pmf(k)/pmf(m) by the recursion pmf(i)/pmf(i − 1) = (n + 1 − i)/i · r
      double f = 1.0;
      if (m < k) {
        for (std::int64_t i = m + 1; i <= k; ++i) f *= nr / static_cast<double>(i) - r;
      } else if (m > k) {
        for (std::int64_t i = k + 1; i <= m; ++i) v *= nr / static_cast<double>(i) - r;
      }
      if (v <= f) return k;
      continue;
    }
    // Squeeze with the normal-shaped bounds on ln(pmf(k)/pmf(m)).
    const double lv = std::log(v), kmd = static_cast<double>(km);
    const double rho = (kmd / npq) * (((kmd / 3.0 + 0.625) * kmd + 1.0 / 6.0) / npq + 0.5);
    const double t = -kmd * kmd / (2.0 * npq);
    if (lv < t - rho) return k;
    if (lv > t + rho) continue;
    // Exact: ln(pmf(k)/pmf(m)) by Stirling with remainders, ratios near 1 through log1p.
    const long double kl = static_cast<long double>(k), nk = nl - kl + 1.0L;
    const long double bound = h + (nl + 1.0L) * std::log1p((kl - ml) / nk) +
                              (kl + 0.5L) * std::log1p((pl * (nl + 2.0L) - (kl + 1.0L)) / ((kl + 1.0L) * ql)) -
                              stirling_tail(k) - stirling_tail(n - k);
    if (static_cast<long double>(lv) <= bound) return k;
  }
}
}  // namespace detail

/// Binomial(n, p) draw from stream s, exact: one uniform by inversion (binomial_from_uniform)
/// while n·p·(1 − p) < binomial_rejection_variance, BTRD (O(1) expected, a variable number of
/// uniforms) above. n ≥ 0, 0 ≤ p ≤ 1 (caller checks).
inline std::int64_t binomial_draw(std::int64_t n, double p, rng::philox_stream& s) noexcept {
  if (n == 0 || p <= 0.0) return 0;
  if (p >= 1.0) return n;
  const double nd = static_cast<double>(n);
  if (nd * p * (1.0 - p) < binomial_rejection_variance) return binomial_from_uniform(n, p, s.uniform());
  return p <= 0.5 ? detail::binomial_btrd(n, p, s) : n - detail::binomial_btrd(n, 1.0 - p, s);
}

/// Exact hypergeometric draw from one uniform u ∈ (0, 1): the number of successes among `draws`
/// items taken without replacement from `population` items of which `successes` are successes.
/// Requires 0 ≤ successes ≤ population, 0 ≤ draws ≤ population (caller checks).
inline std::int64_t hypergeometric_from_uniform(std::int64_t population, std::int64_t successes,
                                                std::int64_t draws, double u,
                                                const log_factorials& lf = log_factorials{}) noexcept {
  const std::int64_t lo = std::max<std::int64_t>(0, draws - (population - successes));
  const std::int64_t hi = std::min(draws, successes);
  if (lo >= hi) return lo;
  const double N = static_cast<double>(population), K = static_cast<double>(successes),
               n = static_cast<double>(draws);
  std::int64_t mode = static_cast<std::int64_t>(std::floor((n + 1.0) * (K + 1.0) / (N + 2.0)));
  mode = std::clamp(mode, lo, hi);
  const double log_pmf = lf(successes) - lf(mode) - lf(successes - mode) + lf(population - successes) -
                         lf(draws - mode) - lf(population - successes - draws + mode) - lf(population) + lf(draws) +
                         lf(population - draws);
  return detail::invert_from_mode(
      u, lo, hi, mode, std::exp(log_pmf),
      [&](std::int64_t xi) {
        const double x = static_cast<double>(xi);
        return (K - x) * (n - x) / ((x + 1.0) * (N - K - n + x + 1.0));
      },
      [&](std::int64_t xi) {
        const double x = static_cast<double>(xi);
        return x * (N - K - n + x) / ((K - x + 1.0) * (n - x + 1.0));
      });
}

/// Variance from which hypergeometric_draw uses the Cornish–Fisher approximation.
inline constexpr double hypergeometric_approximation_variance = 1e6;

/// Hypergeometric draw from one uniform u ∈ (0, 1), monotone in u: exact inversion
/// (hypergeometric_from_uniform) below hypergeometric_approximation_variance, the Cornish–Fisher
/// quantile above (see the file comment). Same arguments and preconditions.
inline std::int64_t hypergeometric_draw(std::int64_t population, std::int64_t successes, std::int64_t draws, double u,
                                        const log_factorials& lf = log_factorials{}) noexcept {
  const std::int64_t lo = std::max<std::int64_t>(0, draws - (population - successes));
  const std::int64_t hi = std::min(draws, successes);
  if (lo >= hi) return lo;
  const long double N = static_cast<long double>(population), K = static_cast<long double>(successes),
                    n = static_cast<long double>(draws);
  const long double f = K / N, var = n * f * (1.0L - f) * (N - n) / (N - 1.0L);
  if (var < hypergeometric_approximation_variance) return hypergeometric_from_uniform(population, successes, draws, u, lf);
  const long double mu = n * f, sd = std::sqrt(var);
  const long double skew =
      (N - 2.0L * K) * std::sqrt(N - 1.0L) * (N - 2.0L * n) / (std::sqrt(n * K * (N - K) * (N - n)) * (N - 2.0L));
  // u from a stream lies in [2^-54, 1 − 2^-54]; the clamp keeps any caller's u finite in z.
  const long double uc = std::clamp(static_cast<long double>(u), 0x1p-64L, 1.0L - 0x1p-64L);
  const long double z = -std::numbers::sqrt2_v<long double> * special::erfc_inv_no_throw(2.0L * uc);
  const long double x = std::round(mu + sd * (z + skew * (z * z - 1.0L) / 6.0L));
  return std::clamp(static_cast<std::int64_t>(std::clamp(x, static_cast<long double>(lo), static_cast<long double>(hi))),
                    lo, hi);
}

/// Stream of replicate `replicate` of the resampling procedure `tag` under `seed`.
inline rng::philox_stream replicate_stream(std::uint64_t seed, std::uint64_t tag, std::uint64_t replicate) noexcept {
  return rng::philox_stream(seed, rng::combine(tag, replicate));
}

/// Stream tags of the resampling procedures (FNV-1a of their names).
inline constexpr std::uint64_t gap_bootstrap_tag = rng::hash_text("kvphase.stats.gap_bootstrap");
inline constexpr std::uint64_t permutation_tag = rng::hash_text("kvphase.stats.permutation");
inline constexpr std::uint64_t gap_difference_tag = rng::hash_text("kvphase.stats.gap_difference");

/// One permutation of trials' group labels, as counts: given group sizes `trials` and the
/// pooled number of hits, draws how many hits land in each group (multivariate hypergeometric,
/// sequentially by group). Writes `out` (same length as trials).
/// `lf` should cover the total number of trials (log_factorials(Σ trials)) for speed.
/// Precondition: Σ trials ≤ max_total_trials (stats::require_group_counts checks it), so the
/// running sum cannot overflow.
inline void permute_hits(std::span<const std::int64_t> trials, std::int64_t total_hits, rng::philox_stream& s,
                         std::span<std::int64_t> out, const log_factorials& lf = log_factorials{}) noexcept {
  std::int64_t pop = 0;
  for (auto n : trials) pop += n;
  std::int64_t left = total_hits;
  for (std::size_t g = 0; g < trials.size(); ++g) {
    const std::int64_t x = hypergeometric_draw(pop, left, trials[g], s.uniform(), lf);
    out[g] = x;
    pop -= trials[g];
    left -= x;
  }
}

/// Percentile q ∈ [0, 1] of `values` by linear interpolation between order statistics
/// (Hyndman–Fan type 7, R's default). Sorts a copy. Throws on empty input or q outside [0, 1].
inline double percentile(std::vector<double> values, double q) {
  require(!values.empty(), "values.size()", values.size(), "must be >= 1");
  require(q >= 0.0 && q <= 1.0, "q", q, "must lie in [0, 1]");
  std::sort(values.begin(), values.end());
  const double h = q * static_cast<double>(values.size() - 1);
  const std::size_t i = static_cast<std::size_t>(std::floor(h));
  if (i + 1 >= values.size()) return values.back();
  return values[i] + (h - static_cast<double>(i)) * (values[i + 1] - values[i]);
}

}  // namespace kvphase::stats
