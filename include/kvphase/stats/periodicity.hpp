#pragma once
/// \file stats/periodicity.hpp
/// Is recall periodic in the target position with period S?
///
/// Data: M phase groups (group g = target position mod M), hits y_g out of n_g trials. S must
/// divide M: then the group of a position determines its phase mod S, and "periodic with
/// period S" means recall(g) = recall(g + S) for all groups, i.e. the per-group recall series
/// (length M) has Fourier content only at frequencies that are multiples of 1/S cycles per
/// group (M/S, 2M/S, … cycles over the M groups). When M = S every pattern over the S groups is
/// S-periodic, and the test is exactly the test of unequal recall (Pearson χ² on the S × 2
/// table); when M is a multiple of S (say 8 groups, S = 4), structure at other frequencies (a
/// pattern with period 8, or 8/3) does not count as evidence of period S.
///
/// Model and statistic: harmonic logistic regression
///   logit P(hit | g) = a + Σ_{h=1..H} [ b_h cos(2π h g / S) + c_h sin(2π h g / S) ]
/// tested against the flat model (all b, c = 0) with the SCORE test at the pooled recall p̂:
///   U = Xᵀ (y − n p̂),   I = p̂ (1 − p̂) [ Xᵀ diag(n) X − (Xᵀ n)(nᵀ X) / N ],   T = Uᵀ I⁺ U,
/// with dof = rank(I) (sine columns vanish at h = S/2). Two choices of H:
/// - harmonics (default): H = ⌊S/2⌋, every S-periodic pattern, dof ≤ S − 1. These columns span
///   exactly the functions of the phase class g mod S, so T equals Pearson's X² on the table
///   folded mod S (classes c = g mod S, counts summed over the M/S groups of a class); it is
///   computed that way, O(M) per permutation. For M = S it is the test of unequal recall.
///   Good against any shape (a single weak phase, a step, …).
/// - fundamental: H = 1, the DFT bin at 1/S only (2 dof, 1 at S = 2). More powerful when the
///   pattern is close to a sinusoid, blind to patterns with no fundamental component.
/// The score test needs no iterative fit, weights groups by their trial counts, and stays
/// defined when a group is all hits or all misses (the likelihood-ratio fit would diverge).
///
/// Reference distributions:
/// - permutation (default): the null hypothesis "phase does not matter" makes trials
///   exchangeable across groups, so the trials' phase labels are permuted: with group sizes
///   and total hits fixed, a permutation's per-group hit counts are multivariate
///   hypergeometric, drawn sequentially (stats/bootstrap.hpp). p = (1 + #{T* ≥ T}) / (B + 1),
///   exact in level for any sample size; Monte Carlo standard error sqrt(p(1 − p)/B) reported.
///   Permutation b reads stream (seed, combine(permutation_tag, b)): deterministic for a seed.
///   At most max_resamples (10^6) permutations (validate() rejects more). Each hypergeometric
///   draw costs O(1) at any size: exact inversion below variance 10^6, the Cornish–Fisher
///   quantile above (total variation < 1e-7 per draw, so the permutation law of T moves by
///   less than M·1e-7 and the p-value by less than that — far below its Monte Carlo error).
/// - chi_square: T ~ χ²(dof) asymptotically (fast; fine when every n_g p̂ (1 − p̂) ≳ 5).
/// Both p-values are always returned (p is the chosen one).
///
/// Effect size: the DFT of the per-group recall deviations at the fundamental,
///   c = (1/M') Σ_{g: n_g > 0} (y_g/n_g − p̂) e^{−2πi g/S}   (M' = non-empty groups),
/// power = |c|², amplitude = 2|c| (|c| at S = 2) = the amplitude A of the best-fitting
/// r̄ + A cos(2π g/S − φ) for equal group sizes, peak_phase = φ S / (2π) ∈ [0, S): the phase of
/// highest fitted recall.
///
/// Not modelled: smooth trends over absolute position (lost-in-the-middle). Groups defined as
/// position mod M with matched absolute-position statistics (as the sweep does) keep such
/// trends out of the group means; otherwise a trend leaks into every frequency.
///
/// Degenerate data (every trial a hit, or none; fewer than two non-empty groups; non-empty
/// groups all at one phase mod S): T = 0, p = 1, power 0. Never NaN. One trial per group and
/// zero-trial groups are defined too (empty groups are left out of every sum).
/// Counts: Σ trials ≤ max_total_trials (2^53, checked), so no int64 sum overflows.

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <functional>
#include <cstdint>
#include <numbers>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/stats/bootstrap.hpp"
#include "kvphase/stats/intervals.hpp"
#include "kvphase/stats/uniformity.hpp"

namespace kvphase::stats {

enum class periodicity_statistic { harmonics, fundamental };
enum class periodicity_reference { permutation, chi_square };

inline const char* to_string(periodicity_statistic s) noexcept {
  return s == periodicity_statistic::harmonics ? "harmonics" : "fundamental";
}
inline const char* to_string(periodicity_reference r) noexcept {
  return r == periodicity_reference::permutation ? "permutation" : "chi_square";
}

struct periodicity_options {
  periodicity_statistic statistic = periodicity_statistic::harmonics;
  periodicity_reference reference = periodicity_reference::permutation;
  std::int64_t permutations = 9999;  ///< B for the permutation reference, 1 ≤ B ≤ max_resamples (10^6)
  std::uint64_t seed = 0;            ///< stream seed of the permutations

  void validate() const {
    require(permutations >= 1, "periodicity_options.permutations", permutations, "must be >= 1");
    require(permutations <= max_resamples, "periodicity_options.permutations", permutations,
            "must be <= " + std::to_string(max_resamples));
  }
};

inline std::ostream& operator<<(std::ostream& os, const periodicity_options& o) {
  return os << "periodicity_options{statistic=" << to_string(o.statistic) << ", reference="
            << to_string(o.reference) << ", permutations=" << o.permutations << ", seed=" << o.seed << '}';
}

struct periodicity_result {
  std::int64_t modulus = 0;   ///< M, number of groups
  std::int64_t period = 0;    ///< S
  double cycles = 0.0;        ///< M / S: cycles of the fundamental over the M groups
  double power = 0.0;         ///< |c|², DFT power of per-group recall at 1/S cycles per group
  double amplitude = 0.0;     ///< fitted cosine amplitude (recall units)
  double peak_phase = 0.0;    ///< phase of highest fitted recall, in [0, S)
  double statistic = 0.0;     ///< score statistic T
  double dof = 0.0;           ///< rank of the information matrix
  double p = 1.0;             ///< p-value of the chosen reference
  double p_chi_square = 1.0;  ///< asymptotic χ²(dof) p-value (always computed)
  double p_permutation = 1.0; ///< permutation p-value (1 when not run)
  double p_mc_error = 0.0;    ///< Monte Carlo standard error of p_permutation
  std::int64_t permutations = 0;
  std::string test;           ///< e.g. "harmonic score test, period 4, 3 dof, permutation (9999)"
};

inline std::ostream& operator<<(std::ostream& os, const periodicity_result& r) {
  return os << r.test << ": T " << r.statistic << ", p " << r.p << ", power " << r.power << ", amplitude "
            << r.amplitude << ", peak phase " << r.peak_phase;
}

namespace detail {
/// Eigen-decomposition of a symmetric J × J matrix, J ∈ {1, 2} (row-major, stride 2): values
/// ascending, vectors[2 * j + i] = component j of the unit eigenvector of values[i]. Closed form
/// (one Jacobi rotation diagonalises a 2 × 2 matrix exactly), so the fundamental statistic needs
/// no general eigensolver; a header with <Eigen/Dense> and SelfAdjointEigenSolver cost every
/// translation unit ~4 s of compile time.
struct eigen_2x2 {
  std::array<double, 2> values{};
  std::array<double, 4> vectors{};
};
inline eigen_2x2 symmetric_eigen_2x2(const std::array<double, 4>& c, std::size_t J) noexcept {
  eigen_2x2 e;
  if (J == 1) {
    e.values = {c[0], 0.0};
    e.vectors = {1.0, 0.0, 0.0, 0.0};
    return e;
  }
  const double a = c[0], b = c[1], d = c[3];
  const double mid = 0.5 * (a + d), rad = std::hypot(0.5 * (a - d), b);
  // The larger eigenvalue's vector is at angle θ with tan 2θ = 2b / (a − d).
  const double theta = 0.5 * std::atan2(2.0 * b, a - d);
  const double cs = std::cos(theta), sn = std::sin(theta);
  e.values = {mid - rad, mid + rad};
  e.vectors = {-sn, cs, cs, sn};  // column 0: (−sin θ, cos θ), column 1: (cos θ, sin θ)
  return e;
}
}  // namespace detail

/// Tests whether recall over `modulus` groups is periodic with period `period` (see file
/// comment). hits/trials: one entry per group, size == modulus. Throws kvphase::error on
/// invalid counts, modulus < 2, period < 2 or period not dividing modulus.
inline periodicity_result periodicity_test(std::span<const std::int64_t> hits, std::span<const std::int64_t> trials,
                                           std::int64_t modulus, std::int64_t period,
                                           const periodicity_options& options = {}) {
  require(modulus >= 2, "modulus", modulus, "must be >= 2");
  require(period >= 2, "period", period, "must be >= 2");
  require(modulus % period == 0, "period", period,
          "must divide modulus = " + std::to_string(modulus) + " (the group must determine the phase mod period)");
  require(static_cast<std::int64_t>(trials.size()) == modulus, "trials.size()", trials.size(),
          "must equal modulus = " + std::to_string(modulus));
  require_group_counts(hits, trials);
  options.validate();

  periodicity_result r;
  r.modulus = modulus;
  r.period = period;
  r.cycles = static_cast<double>(modulus) / static_cast<double>(period);
  const std::size_t M = trials.size();
  const double S = static_cast<double>(period);
  const bool permute = options.reference == periodicity_reference::permutation;
  auto describe = [&] {
    std::string t = options.statistic == periodicity_statistic::harmonics ? "harmonic" : "fundamental";
    t += " score test, period " + std::to_string(period) + ", " + std::to_string(static_cast<long long>(r.dof)) +
         " dof, ";
    t += permute ? "permutation (" + std::to_string(options.permutations) + ")" : std::string("chi-square");
    return t;
  };

  // Σ trials ≤ max_total_trials (checked by require_group_counts), so these sums cannot overflow.
  std::int64_t N = 0, Y = 0, nonempty = 0;
  for (std::size_t g = 0; g < M; ++g) {
    N += trials[g];
    Y += hits[g];
    nonempty += trials[g] > 0;
  }
  if (nonempty < 2 || Y == 0 || Y == N) {
    r.test = describe();
    return r;
  }
  const double pbar = static_cast<double>(Y) / static_cast<double>(N);
  const double v = pbar * (1.0 - pbar);

  // Effect size at the fundamental.
  {
    std::complex<double> c{0.0, 0.0};
    for (std::size_t g = 0; g < M; ++g) {
      if (trials[g] == 0) continue;
      const double dev = static_cast<double>(hits[g]) / static_cast<double>(trials[g]) - pbar;
      const double a = 2.0 * std::numbers::pi * static_cast<double>(g % static_cast<std::size_t>(period)) / S;
      c += dev * std::complex<double>(std::cos(a), -std::sin(a));
    }
    c /= static_cast<double>(nonempty);
    r.power = std::norm(c);
    r.amplitude = (period == 2 ? 1.0 : 2.0) * std::abs(c);
    if (r.amplitude > 0.0) {
      double ph = -std::arg(c) * S / (2.0 * std::numbers::pi);
      ph = std::fmod(ph, S);
      if (ph < 0.0) ph += S;
      if (ph >= S) ph = 0.0;
      r.peak_phase = ph;
    }
  }

  // The statistic T(y) as a function of the per-group hits (totals fixed).
  std::function<double(std::span<const std::int64_t>)> statistic_of;
  std::vector<double> class_trials;
  std::vector<double> Q;  // fundamental: rows × M, row-major
  if (options.statistic == periodicity_statistic::harmonics) {
    // All harmonics of 1/S span exactly the functions of (g mod S), so the score test equals
    // the score test of a phase-class factor: Pearson's X² on the table folded mod S.
    class_trials.assign(static_cast<std::size_t>(period), 0.0);
    for (std::size_t g = 0; g < M; ++g) class_trials[g % static_cast<std::size_t>(period)] += static_cast<double>(trials[g]);
    int classes = 0;
    for (double n : class_trials) classes += n > 0.0;
    r.dof = std::max(classes - 1, 0);
    statistic_of = [&](std::span<const std::int64_t> y) {
      double t = 0.0;
      const std::size_t P = static_cast<std::size_t>(period);
      for (std::size_t c = 0; c < P; ++c) {
        if (class_trials[c] == 0.0) continue;
        double yc = 0.0;
        for (std::size_t g = c; g < M; g += P) yc += static_cast<double>(y[g]);
        const double d = yc - class_trials[c] * pbar;
        t += d * d / class_trials[c];
      }
      return std::max(t / v, 0.0);
    };
  } else {
    // Fundamental only: cos and sin of 2π g / S (sin vanishes at S = 2), centred with trial
    // weights, Xc_j(g) = x_j(g) − Σ n x_j / N; C = Xcᵀ diag(n) Xc = I / v.
    std::vector<std::vector<double>> cols;
    for (int kind = 0; kind < (period == 2 ? 1 : 2); ++kind) {
      std::vector<double> x(M);
      for (std::size_t g = 0; g < M; ++g) {
        const double a = 2.0 * std::numbers::pi * static_cast<double>(static_cast<std::int64_t>(g) % period) / S;
        x[g] = kind == 0 ? std::cos(a) : std::sin(a);
      }
      double mean = 0.0;
      for (std::size_t g = 0; g < M; ++g) mean += static_cast<double>(trials[g]) * x[g];
      mean /= static_cast<double>(N);
      for (auto& e : x) e -= mean;
      cols.push_back(std::move(x));
    }
    const std::size_t J = cols.size();
    std::array<double, 4> C{};  // J × J, row-major with stride 2
    for (std::size_t j = 0; j < J; ++j)
      for (std::size_t k = 0; k <= j; ++k) {
        double s = 0.0;
        for (std::size_t g = 0; g < M; ++g) s += static_cast<double>(trials[g]) * cols[j][g] * cols[k][g];
        C[2 * j + k] = C[2 * k + j] = s;
      }
    const auto es = detail::symmetric_eigen_2x2(C, J);
    const double lam_max = std::max(es.values[0], es.values[1]);
    // Q = Λ_r^{-1/2} V_rᵀ Xcᵀ (rank-r part, a pseudo-inverse): T(y) = |Q (y − n p̂)|² / v.
    std::vector<std::size_t> keep;
    for (std::size_t i = 0; i < J; ++i)
      if (es.values[i] > 1e-10 * lam_max && es.values[i] > 0.0) keep.push_back(i);
    r.dof = static_cast<double>(keep.size());
    Q.assign(keep.size() * M, 0.0);
    for (std::size_t q = 0; q < keep.size(); ++q) {
      const double s = 1.0 / std::sqrt(es.values[keep[q]]);
      for (std::size_t g = 0; g < M; ++g) {
        double e = 0.0;
        for (std::size_t j = 0; j < J; ++j) e += es.vectors[2 * j + keep[q]] * cols[j][g];
        Q[q * M + g] = s * e;
      }
    }
    const std::size_t rows = keep.size();
    statistic_of = [&, rows](std::span<const std::int64_t> y) {
      double t = 0.0;
      for (std::size_t q = 0; q < rows; ++q) {
        double u = 0.0;
        for (std::size_t g = 0; g < M; ++g)
          u += Q[q * M + g] * (static_cast<double>(y[g]) - static_cast<double>(trials[g]) * pbar);
        t += u * u;
      }
      return std::max(t / v, 0.0);
    };
  }
  if (r.dof == 0) {
    r.test = describe();
    return r;
  }
  r.statistic = statistic_of(hits);
  r.p_chi_square = chi_square_upper_tail(r.statistic, r.dof);
  if (permute) {
    const double threshold = r.statistic - 1e-9 * std::max(1.0, r.statistic);  // ties count as ≥
    std::vector<std::int64_t> y(M);
    const log_factorials lf(N);
    std::int64_t ge = 0;
    for (std::int64_t b = 0; b < options.permutations; ++b) {
      auto s = replicate_stream(options.seed, permutation_tag, static_cast<std::uint64_t>(b));
      permute_hits(trials, Y, s, y, lf);
      ge += statistic_of(y) >= threshold;
    }
    const double B = static_cast<double>(options.permutations);
    r.permutations = options.permutations;
    r.p_permutation = (1.0 + static_cast<double>(ge)) / (B + 1.0);
    r.p_mc_error = std::sqrt(r.p_permutation * (1.0 - r.p_permutation) / B);
    r.p = r.p_permutation;
  } else {
    r.p = r.p_chi_square;
  }
  r.test = describe();
  return r;
}

}  // namespace kvphase::stats
