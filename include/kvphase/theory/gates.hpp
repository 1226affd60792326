#pragma once
/// \file theory/gates.hpp
/// Learned slot gates with random content logits (derivation: theory/gates.md).
///
/// Slot softmax α_r = exp(b_r + z_r) / Σ_{r'} exp(b_{r'} + z_{r'}), z_r ~ N(0, τ²) iid per token and
/// independent of the keys. Non-overlapping windows (W = S). Given the gate vector of an entry its
/// score is Gaussian, so:
///  - a distractor's score has the scale-mixture CDF F_D(x) = E_α[Φ(x/‖α‖)];
///  - a target entry (target slots R) has P(s ≤ x | T) = E_α[Φ((x − A(α)T)/√v(α))], A = Σ_{r∈R} α_r,
///    v = Σ_{r∉R} α_r²; distinct entries draw independent gates, so these factor over entries;
///  - recall(φ) = E_T[1 − ∫ g_D(x) Π_j E_α[…] dx], g_D = d/dx F_D^{n_D}.
/// The expectations over α are numerical integrals over the gate-weight distribution, evaluated
/// with a fixed set of sampled gate vectors (counter-based, seeded); the error estimate is half the
/// difference between the two halves of that set plus the quadrature error.

#include <algorithm>
#include <cmath>
#include <vector>


#include "kvphase/compress/capabilities.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/special.hpp"
#include "kvphase/theory/gaussian.hpp"

namespace kvphase::theory {

/// Distribution of the gate weight of one slot.
struct gate_slot_stats {
  index_t slot = 0;
  double mean = 0, sd = 0, q05 = 0, q50 = 0, q95 = 0;
};

namespace detail {
inline std::vector<double> sample_gates(const compress::operator_spec& spec, index_t n, std::uint64_t seed) {
  const index_t W = spec.grid.window;
  std::vector<double> a(static_cast<std::size_t>(n * W));
  std::vector<double> b(static_cast<std::size_t>(W), 0.0);
  if (!spec.slot_bias.empty()) b = spec.slot_bias;
  const std::uint64_t cfg = rng::hash_text("gates") ^ static_cast<std::uint64_t>(W);
  for (index_t i = 0; i < n; ++i) {
    rng::philox_stream s(seed, rng::trial_stream(cfg, static_cast<std::uint64_t>(i)));
    double mx = -INFINITY;
    double* row = &a[static_cast<std::size_t>(i * W)];
    for (index_t r = 0; r < W; ++r) {
      row[r] = b[static_cast<std::size_t>(r)] + spec.content_std * s.normal();
      mx = std::max(mx, row[r]);
    }
    double z = 0;
    for (index_t r = 0; r < W; ++r) z += (row[r] = std::exp(row[r] - mx));
    for (index_t r = 0; r < W; ++r) row[r] /= z;
  }
  return a;
}
}  // namespace detail

/// Mean, sd and quantiles of each slot's gate weight, from `samples` gate vectors.
inline std::vector<gate_slot_stats> gate_weight_distribution(const compress::operator_spec& spec, index_t samples,
                                                             std::uint64_t seed = 1) {
  spec.validate();
  require(spec.pool == compress::pool_kind::slot_gate, "pool", compress::to_string(spec.pool), "must be slot_gate");
  require(samples >= 10 && samples <= (index_t(1) << 26), "samples", samples, "must be in [10, 2^26]");
  const index_t W = spec.grid.window;
  (void)checked_elements(samples, W, "samples * window");
  const auto a = detail::sample_gates(spec, samples, seed);
  std::vector<gate_slot_stats> out;
  std::vector<double> col(static_cast<std::size_t>(samples));
  for (index_t r = 0; r < W; ++r) {
    double s = 0, s2 = 0;
    const double n = static_cast<double>(samples);
    for (index_t i = 0; i < samples; ++i) {
      const double v = a[static_cast<std::size_t>(i * W + r)];
      col[static_cast<std::size_t>(i)] = v;
      s += v;
    }
    for (index_t i = 0; i < samples; ++i) s2 += (col[static_cast<std::size_t>(i)] - s / n) * (col[static_cast<std::size_t>(i)] - s / n);
    std::sort(col.begin(), col.end());
    auto q = [&](double p) { return col[static_cast<std::size_t>(std::min(n - 1, std::floor(p * (n - 1))))]; };
    out.push_back({r, s / n, std::sqrt(s2 / n), q(0.05), q(0.5), q(0.95)});
  }
  return out;
}

struct gate_options {
  index_t gate_samples = 256;   ///< gate vectors in the numerical integral over the gate law
  std::uint64_t seed = 0x9a7e;
  index_t grid_points = 801;    ///< Simpson nodes of the inner integral over x
  double tolerance = 1e-8;      ///< outer Gauss–Kronrod tolerance
  void validate() const {
    require(gate_samples >= 16 && gate_samples <= (index_t(1) << 24) && gate_samples % 2 == 0, "gate_samples",
            gate_samples, "must be even and in [16, 2^24]");
    require(grid_points >= 101 && grid_points <= (index_t(1) << 20) && grid_points % 2 == 1, "grid_points",
            grid_points, "must be odd and in [101, 2^20]");
  }
};

namespace detail {
// Recall at one phase from a given set of gate vectors [first, first + n).
inline double gated_recall(const compress::operator_spec& spec, const needle_model& m, const phase_geometry& geo,
                           const std::vector<double>& gates, index_t first, index_t n, const gate_options& go,
                           double* quad_err) {
  const index_t W = spec.grid.window;
  double n_d = 0;
  for (const auto& c : geo.distractors) n_d += c.count;
  // per gate vector: ‖α‖, and per target entry (A, v)
  std::vector<double> sig(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    double s = 0;
    for (index_t r = 0; r < W; ++r) s += gates[static_cast<std::size_t>((first + i) * W + r)] * gates[static_cast<std::size_t>((first + i) * W + r)];
    sig[static_cast<std::size_t>(i)] = std::sqrt(s);
  }
  struct av {
    std::vector<double> A, sd;
  };
  std::vector<av> tg;
  const auto& g = spec.grid;
  for (const auto& t : geo.targets) {
    av x;
    const auto src = g.sources(t.entry);
    for (index_t i = 0; i < n; ++i) {
      double A = 0, v = 0;
      for (index_t r = 0; r < W; ++r) {
        const double w = gates[static_cast<std::size_t>((first + i) * W + r)];
        const index_t p = src.first + r;
        if (p >= geo.target_position && p < geo.target_position + m.span()) A += m.token_multiplier(p - geo.target_position) * w;
        else v += w * w;
      }
      x.A.push_back(A);
      x.sd.push_back(std::sqrt(v));
    }
    tg.push_back(std::move(x));
  }
  // x grid for the distractor maximum
  const double smax = *std::max_element(sig.begin(), sig.end());
  auto logF = [&](double x) {
    double s = 0;
    for (double sg : sig) s += norm_cdf(x / sg);
    return std::log(s / static_cast<double>(n));
  };
  double lo = -40 * smax, hi = 40 * smax;
  {
    double a = lo, b = hi;
    for (int it = 0; it < 100; ++it) {
      const double mid = 0.5 * (a + b);
      (n_d * logF(mid) < std::log(1e-16) ? a : b) = mid;
    }
    lo = a;
    a = -40 * smax;
    b = 40 * smax;
    for (int it = 0; it < 100; ++it) {
      const double mid = 0.5 * (a + b);
      double tail = 0;
      for (double sg : sig) tail += norm_cdf(-mid / sg);
      (n_d * tail / static_cast<double>(n) > 1e-16 ? a : b) = mid;
    }
    hi = b;
  }
  const index_t K = go.grid_points;
  const double h = (hi - lo) / static_cast<double>(K - 1);
  std::vector<double> xs(static_cast<std::size_t>(K)), gd(static_cast<std::size_t>(K));
  for (index_t k = 0; k < K; ++k) {
    const double x = lo + h * static_cast<double>(k);
    xs[static_cast<std::size_t>(k)] = x;
    double f = 0;
    for (double sg : sig) f += norm_pdf(x / sg) / sg;
    f /= static_cast<double>(n);
    const double lf = logF(x);
    gd[static_cast<std::size_t>(k)] = n_d * std::exp((n_d - 1) * lf) * f;  // density of the max
  }
  double gmass = 0;
  for (index_t k = 0; k < K; ++k) gmass += gd[static_cast<std::size_t>(k)] * ((k == 0 || k == K - 1) ? 1.0 : (k % 2 ? 4.0 : 2.0));
  gmass *= h / 3.0;
  const target_score_law law(m.dim, m.snr, 1e-10);
  auto R = [&](double t) {
    double s = 0;
    for (index_t k = 0; k < K; ++k) {
      double f = 1;
      for (const auto& x : tg) {
        double e = 0;
        for (index_t i = 0; i < n; ++i) {
          const double sd = x.sd[static_cast<std::size_t>(i)];
          const double c = xs[static_cast<std::size_t>(k)] - x.A[static_cast<std::size_t>(i)] * t;
          e += sd > 0 ? norm_cdf(c / sd) : (c >= 0 ? 1.0 : 0.0);
        }
        f *= e / static_cast<double>(n);
      }
      s += gd[static_cast<std::size_t>(k)] * f * ((k == 0 || k == K - 1) ? 1.0 : (k % 2 ? 4.0 : 2.0));
    }
    return std::clamp(1.0 - s * h / 3.0 / gmass, 0.0, 1.0);
  };
  auto f = [&](double t) { return law.pdf(t) * (1.0 + R(t)); };
  double e = 0;
  const double total = special::gauss_kronrod(15, f, law.lo, law.hi, 6, go.tolerance, &e);
  if (quad_err) *quad_err = e;
  return std::clamp(total - 1.0, 0.0, 1.0);
}
}  // namespace detail

/// Per-phase recall for a slot gate with content logits (τ ≥ 0), W = S.
inline recall_prediction predict_recall_gated(const compress::operator_spec& spec, const needle_model& m,
                                              const gate_options& go = {}) {
  spec.validate();
  m.validate();
  go.validate();
  recall_prediction out;
  if (spec.pool != compress::pool_kind::slot_gate) {
    out.covered = false;
    out.reason = "predict_recall_gated needs pool slot_gate";
    return out;
  }
  if (spec.grid.window != spec.grid.stride) {
    out.covered = false;
    out.reason = "content-logit gates are modelled for non-overlapping windows (W = S) only";
    return out;
  }
  if (const auto caps = compress::capabilities(spec); !caps.plain) {
    out.covered = false;
    out.reason = caps.not_plain_reason;
    return out;
  }
  out.assumptions = "slot gate with content logits: numerical integral over sampled gate vectors (W = S)";
  const auto gates = detail::sample_gates(spec, go.gate_samples, go.seed);
  const index_t half = go.gate_samples / 2;
  for (index_t ph = 0; ph < spec.grid.stride; ++ph) {
    const auto geo = geometry_for_phase(spec, m, ph);
    phase_recall pr{ph, geo.target_position, 0.0, 0.0, recall_method::quadrature};
    if (geo.targets.empty()) {
      pr.method = recall_method::not_visible;
    } else if (geo.distractors.empty()) {
      pr.recall = 1.0;
      pr.method = recall_method::no_distractor;
    } else {
      double e = 0, e1 = 0, e2 = 0;
      pr.recall = detail::gated_recall(spec, m, geo, gates, 0, go.gate_samples, go, &e);
      const double r1 = detail::gated_recall(spec, m, geo, gates, 0, half, go, &e1);
      const double r2 = detail::gated_recall(spec, m, geo, gates, half, half, go, &e2);
      pr.error = 0.5 * std::abs(r1 - r2) + e;
    }
    out.phases.push_back(pr);
  }
  return out;
}

}  // namespace kvphase::theory
