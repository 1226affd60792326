#pragma once
/// \file theory/padding_task.hpp
/// Padding flip (result 7) for the sweep's two-way choice task, tasks::padding_config
/// (derivation: theory/padding.md, "The sweep's padding task").
///
/// Layout at padding length L: A's evidence at tokens [L + o_A, L + o_A + k_A) with score s_A,
/// B's at [L + o_B, L + o_B + k_B) with score s_B, every other token a noise score n_t ~ N(0, |q|²)
/// (iid given q). hit = mass_A > mass_B. For a linear pool without content logits, if each span
/// lies inside a single complete entry (e_A ≠ e_B) with pooled weight a = Σ_{r∈A} w_r (b for B):
///   mass_A > mass_B  ⇔  β(x_A − x_B) + ln(a/b) > 0,
/// x_A = a·s_A + Σ_{r∉A} w_r n_r (x_B alike): the softmax normaliser cancels, so distractor entries
/// and the raw window (which by the task's validation holds only noise tokens) do not matter.
/// Given q the difference is Gaussian with mean a s_A − b s_B and variance |q|²(V_A + V_B),
/// V_A = Σ_{r∉A} w_r² over A's entry. With σ = 0 (query q = κ_A + λκ_B, |κ| = √d) and u = the
/// cosine of κ_A and κ_B (density ∝ (1 − u²)^{(d−3)/2}):
///   s_A = d(1 + λu), s_B = d(u + λ), |q|² = d(1 + λ² + 2λu),
///   P(A preferred) = E_u Φ( (β d [a(1 + λu) − b(u + λ)] + ln(a/b)) / (β |q| √(V_A + V_B)) ),
/// a one-dimensional integral, evaluated by adaptive Gauss–Kronrod over the angle θ = arccos u.
/// Exact under these conditions (up to float rounding of the simulation). Not covered: query noise
/// σ > 0, content logits, non-linear pools, evidence meeting several entries (overlapping windows
/// W > S, or a span straddling a chunk boundary: the masses are then sums of log-normals).

#include <algorithm>
#include <cmath>
#include <numbers>
#include <ostream>
#include <string>
#include <vector>


#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/capabilities.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/special.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/tasks/padding.hpp"

namespace kvphase::theory {

/// Prediction for one padding length.
struct padding_length_prediction {
  index_t length = 0;      ///< L
  bool covered = false;
  std::string reason;      ///< why not covered (empty when covered)
  index_t entry_a = -1, entry_b = -1;  ///< entries holding the spans (−1: none)
  index_t slot_a = -1, slot_b = -1;    ///< first slot of each span in its entry
  double weight_a = 0, weight_b = 0;   ///< pooled weights a, b of the spans
  double p_a = 0;          ///< P(answer A preferred) (meaningful when covered)
  double error = 0;        ///< absolute quadrature error estimate of p_a
};

struct padding_prediction {
  bool covered = false;    ///< every length covered
  std::string reason;      ///< first reason a length (or the whole config) is not covered
  std::vector<padding_length_prediction> lengths;  ///< L = pad_min + g, g = 0 … lengths−1
  double fraction_expected = 0;  ///< mean of p_a over covered lengths (expected share of trials won)
  double fraction_majority = 0;  ///< share of covered lengths with p_a > 1/2 (A wins the majority)
  index_t covered_lengths = 0;
};

namespace detail {

/// E_u f(u) for u the cosine of two independent isotropic directions in R^d (d ≥ 2), by adaptive
/// Gauss–Kronrod over θ = arccos u with weight sin^{d−2}θ (normalised by the same quadrature).
template <class F>
double cosine_expectation(index_t d, F&& f, double& err) {
  const double k = static_cast<double>(d - 2);
  const double pi = std::numbers::pi;
  // sin^{d−2}(π/2 + x) = cos^{d−2}x ≤ exp(−(d−2)x²/2): beyond 12/√(d−2) the weight is < e^{−72}.
  const double h = d <= 2 ? pi / 2 : std::min(pi / 2, 12.0 / std::sqrt(k));
  auto wgt = [&](double th) { return k == 0 ? 1.0 : std::exp(k * std::log(std::max(std::sin(th), 1e-300))); };
  double e1 = 0, e0 = 0;
  const double num = special::gauss_kronrod(61, [&](double th) { return wgt(th) * f(std::cos(th)); }, pi / 2 - h,
                                          pi / 2 + h, 15, 1e-12, &e1);
  const double den = special::gauss_kronrod(61, wgt, pi / 2 - h, pi / 2 + h, 15, 1e-12, &e0);
  err = (std::abs(e1) + std::abs(num / den) * std::abs(e0)) / den + 1e-14;
  return num / den;
}

inline double phi(double x) noexcept { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

}  // namespace detail

/// Per-length prediction of the padding task's compressed-model hit rate (A preferred) for
/// operator `op` and raw window `raw_window` (see the file comment for the law and its scope).
inline padding_prediction predict_padding(const compress::operator_spec& op, const tasks::padding_config& t,
                                          index_t raw_window = 0) {
  op.validate();
  t.validate();
  require(raw_window >= 0, "raw_window", raw_window, "must be >= 0");
  padding_prediction out;
  auto not_covered = [&](std::string why) {
    out.covered = false;
    out.reason = std::move(why);
    return out;
  };
  const auto caps = compress::capabilities(op);
  if (!caps.score_exact) return not_covered(caps.score_reason);
  if (op.content_std > 0) return not_covered("content logits (content_std > 0): gate weights are random");
  if (t.query_noise > 0) return not_covered("query_noise > 0: the outer law is four-dimensional (not modelled)");
  if (t.code_length - std::max(t.offset_a + t.span_a, t.offset_b + t.span_b) < raw_window + op.grid.window)
    return not_covered("evidence not before the raw window and the last chunk (the sweep rejects this too)");

  const auto& g = op.grid;
  const double d = static_cast<double>(t.dim), lam = t.strength_b, beta = t.beta();
  out.covered = true;
  double sum_p = 0, maj = 0;
  for (index_t i = 0; i < t.lengths; ++i) {
    padding_length_prediction lp;
    lp.length = t.pad_min + i;
    const index_t N = t.context(i), E = g.num_entries(N);
    // Entries meeting a span; the span must lie wholly in a single complete entry (or in none).
    auto locate = [&](index_t p0, index_t k, index_t& entry, index_t& slot, double& w, double& v) -> std::string {
      std::vector<index_t> es;
      for (index_t p = p0; p < p0 + k; ++p)
        g.for_each_entry_containing(p, [&](index_t e, index_t) {
          if (std::find(es.begin(), es.end(), e) == es.end()) es.push_back(e);
        });
      if (es.empty()) return {};
      if (es.size() > 1) return "evidence meets several entries (sum of log-normal masses)";
      const index_t e = es.front();
      if (e >= E) return "evidence entry not complete";
      const auto src = g.sources(e);
      if (p0 < src.first || p0 + k - 1 > src.last) return "evidence span split by an entry boundary";
      const auto wt = op.linear_slot_weights(g.masked_slots(e));
      entry = e;
      slot = p0 - src.first;
      w = 0;
      v = 0;
      for (index_t r = 0; r < g.window; ++r) {
        const double x = wt[static_cast<std::size_t>(r)];
        if (r >= slot && r < slot + k) w += x; else v += x * x;
      }
      return {};
    };
    double va = 0, vb = 0;
    std::string why = locate(lp.length + t.offset_a, t.span_a, lp.entry_a, lp.slot_a, lp.weight_a, va);
    if (why.empty()) why = locate(lp.length + t.offset_b, t.span_b, lp.entry_b, lp.slot_b, lp.weight_b, vb);
    if (why.empty() && lp.entry_a >= 0 && lp.entry_a == lp.entry_b) why = "A and B share an entry";
    if (!why.empty()) {
      lp.reason = why;
      if (out.covered) {
        out.covered = false;
        out.reason = "L=" + std::to_string(lp.length) + ": " + why;
      }
      out.lengths.push_back(lp);
      continue;
    }
    lp.covered = true;
    const double a = lp.weight_a, b = lp.weight_b, V = va + vb;
    if (a <= 0) {
      lp.p_a = 0;  // mass_A = 0 cannot exceed mass_B ≥ 0
    } else if (b <= 0) {
      lp.p_a = 1;
    } else {
      const double lr = std::log(a / b);
      auto cond = [&](double u) {
        const double m = beta * d * (a * (1 + lam * u) - b * (u + lam)) + lr;
        const double q2 = d * std::max(0.0, 1 + lam * lam + 2 * lam * u);
        const double s = beta * std::sqrt(q2 * V);
        if (s <= 0) return m > 0 ? 1.0 : 0.0;
        return detail::phi(m / s);
      };
      if (t.dim == 1) {
        lp.p_a = 0.5 * (cond(1.0) + cond(-1.0));  // κ = ±1: u = ±1 with probability 1/2
      } else {
        lp.p_a = std::clamp(detail::cosine_expectation(t.dim, cond, lp.error), 0.0, 1.0);
      }
    }
    sum_p += lp.p_a;
    maj += lp.p_a > 0.5 ? 1 : 0;
    ++out.covered_lengths;
    out.lengths.push_back(lp);
  }
  if (out.covered_lengths > 0) {
    out.fraction_expected = sum_p / static_cast<double>(out.covered_lengths);
    out.fraction_majority = maj / static_cast<double>(out.covered_lengths);
  }
  return out;
}

inline std::ostream& operator<<(std::ostream& os, const padding_length_prediction& p) {
  os << "L=" << p.length;
  if (!p.covered) return os << " not covered: " << p.reason;
  return os << " slot_a=" << p.slot_a << " slot_b=" << p.slot_b << " a=" << p.weight_a << " b=" << p.weight_b
            << " p_a=" << p.p_a << " ±" << p.error;
}

}  // namespace kvphase::theory
