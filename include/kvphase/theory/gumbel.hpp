#pragma once
/// \file theory/gumbel.hpp
/// Extreme-value (Gumbel) closed forms for needle recall (derivation: theory/gumbel.md).
///
/// The n distractors' maximum of iid N(0, σ²) is close to Gumbel(a_n, b_n) with
///   a_n = σ(√(2 ln n) − (ln ln n + ln 4π)/(2√(2 ln n))),  b_n = σ/√(2 ln n).
/// The dominant target entry scores X ~ N(μ, s²), μ = A·E[T], s² = v + A²·Var T. Two closed forms:
///   sharp:  recall ≈ exp(−exp(−(μ − a_n)/b_n))                     (target spread ignored)
///   normal: recall ≈ Φ((μ − a_n − γ b_n) / √(s² + π² b_n²/6))      (X − max as a Gaussian)
/// and the critical dimension d* = (a_n/A)² where the sharp form crosses 1/e: recall rises
/// from ≈ 0 to ≈ 1 as d passes d*, which grows like 2σ² ln(N/S)/A². Their error against the exact
/// integral is measured in tests/test_theory_approx.cpp.

#include <cmath>
#include <numbers>
#include <vector>

#include "kvphase/compress/capabilities.hpp"
#include "kvphase/theory/gaussian.hpp"

namespace kvphase::theory {

/// Gumbel location and scale of the maximum of n iid N(0, σ²) (n ≥ 2).
struct gumbel_params {
  double location = 0, scale = 1;
};
inline gumbel_params gumbel_for_max(double n, double sigma) {
  require(n >= 2, "n", n, "needs at least 2 variables");
  const double l = std::sqrt(2.0 * std::log(n));
  return {sigma * (l - (std::log(std::log(n)) + std::log(4.0 * std::numbers::pi)) / (2.0 * l)), sigma / l};
}

/// E[χ_d] and Var[χ_d].
inline double chi_mean(index_t d) {
  const double k = static_cast<double>(d);
  return std::sqrt(2.0) * std::exp(std::lgamma(0.5 * (k + 1)) - std::lgamma(0.5 * k));
}

struct gumbel_phase {
  index_t phase = 0;
  double recall_sharp = 0, recall_normal = 0;
  double critical_dim = 0;  ///< d* = (a_n/A)²
  double target_weight = 0; ///< A of the dominant target entry
};

/// Closed-form per-phase recall (W = S or W > S: only the dominant target entry is used).
inline std::vector<gumbel_phase> gumbel_recall_by_phase(const compress::operator_spec& spec, const needle_model& m) {
  spec.validate();
  m.validate();
  require(compress::capabilities(spec).fixed_weights, "pool", compress::to_string(spec.pool), "needs a fixed linear pool");
  std::vector<gumbel_phase> out;
  const double rm = chi_mean(m.dim), rv = static_cast<double>(m.dim) - rm * rm;
  const double a = std::isinf(m.snr) ? 1.0 : std::sqrt(m.snr / (1 + m.snr));
  const double b2 = std::isinf(m.snr) ? 0.0 : 1.0 / (1 + m.snr);
  for (index_t ph = 0; ph < spec.grid.stride; ++ph) {
    const auto geo = geometry_for_phase(spec, m, ph);
    gumbel_phase g;
    g.phase = ph;
    if (geo.targets.empty() || geo.distractors.empty()) {
      g.recall_sharp = g.recall_normal = geo.targets.empty() ? 0.0 : 1.0;
      out.push_back(g);
      continue;
    }
    target_entry best = geo.targets.front();
    for (const auto& t : geo.targets)
      if (t.target_weight > best.target_weight) best = t;
    double n = 0, sigma = 0, cmax = -1;
    for (const auto& c : geo.distractors) {
      n += c.count;
      if (c.count > cmax) {
        cmax = c.count;
        sigma = c.sigma;
      }
    }
    n = std::max(n, 2.0);
    const auto gp = gumbel_for_max(n, sigma);
    const double mu = best.target_weight * a * rm;
    const double s2 = best.noise_var + best.target_weight * best.target_weight * (a * a * rv + b2);
    g.target_weight = best.target_weight;
    g.recall_sharp = std::exp(-std::exp(-(mu - gp.location) / gp.scale));
    const double gamma = 0.5772156649015329;
    g.recall_normal = norm_cdf((mu - gp.location - gamma * gp.scale) /
                               std::sqrt(s2 + std::numbers::pi * std::numbers::pi * gp.scale * gp.scale / 6.0));
    g.critical_dim = best.target_weight > 0 ? std::pow(gp.location / (best.target_weight * a), 2) : INFINITY;
    out.push_back(g);
  }
  return out;
}

}  // namespace kvphase::theory
