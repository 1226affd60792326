#pragma once
/// \file theory/gaussian.hpp
/// Gaussian score model of needle retrieval through a chunked, linearly pooled key cache
/// (derivation: theory/gaussian.md).
///
/// Model (needle_model): N context tokens at positions 0 … N−1 with iid keys k_p ~ N(0, I_d); a
/// target key x* ~ N(0, I_d) occupies the k consecutive tokens p … p+k−1 (each holds x*); the
/// query is q = x* + ε, ε ~ N(0, I_d / snr) (snr = ∞: q = x*). Entry e of the operator pools its
/// sources with the spec's content-independent linear weights w_e (masked slots renormalised);
/// the entries visible to the query are the complete entries of the N context tokens. A trial is
/// a hit when the entry with the largest score q·pooled_key_e holds a target token (its source
/// range contains one, whatever its weight).
///
/// Given q, every normalised token score u_p = q·k_p/|q| is iid N(0, 1) and the target's score
/// is T = q·x*/|q| = √(snr/(1+snr))·ρ + Z/√(1+snr), ρ ~ χ_d, Z ~ N(0, 1). Entry e scores
/// s_e = A_e·T + Σ_{non-target slots} w_{e,r} u, a Gaussian given T.
///
///  - W = S (non-overlapping): distinct entries share no token, so given T all entries are
///    independent; recall(φ) = E_T[ 1 − ∫ g_D(x) Π_{j∈target} Φ((x − A_j T)/√v_j) dx ] with g_D
///    the density of the distractors' maximum. Exact; evaluated by nested adaptive Gauss–Kronrod
///    quadrature with an error estimate.
///  - W > S (overlapping): the target entries and the distractors that share tokens with them are
///    treated jointly and exactly by a conditional Monte Carlo over their tokens (the far
///    distractors are integrated analytically). Approximated: the far distractors' mutual
///    correlation (they are a moving average), modelled as independent or as a first-order
///    Markov chain (far_model). The error estimate is the Monte Carlo standard error; the
///    approximation error is measured in tests/test_theory_recall.cpp and theory/gaussian.md.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kvphase/compress/capabilities.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/special.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::theory {

// ---- normal helpers ----------------------------------------------------------------------------

/// Φ(x).
inline double norm_cdf(double x) noexcept { return 0.5 * std::erfc(-x * std::numbers::sqrt2 / 2.0); }
/// φ(x).
inline double norm_pdf(double x) noexcept {
  return std::exp(-0.5 * x * x) * (std::numbers::inv_sqrtpi / std::numbers::sqrt2);
}
/// log Φ(x), accurate in both tails.
inline double log_norm_cdf(double x) noexcept {
  if (x > -5.0) return std::log1p(-0.5 * std::erfc(x * std::numbers::sqrt2 / 2.0));
  if (x > -35.0) return std::log(0.5 * std::erfc(-x * std::numbers::sqrt2 / 2.0));
  // asymptotic series: Φ(x) ≈ φ(x)/(−x) · (1 − 1/x² + 3/x⁴)
  const double x2 = x * x;
  return -0.5 * x2 - std::log(-x) - 0.5 * std::log(2.0 * std::numbers::pi) + std::log1p(-1.0 / x2 + 3.0 / (x2 * x2));
}
/// φ(x)/Φ(x) (inverse Mills ratio of the lower tail), finite for every x.
inline double norm_hazard_lower(double x) noexcept {
  return std::exp(-0.5 * x * x - 0.5 * std::log(2.0 * std::numbers::pi) - log_norm_cdf(x));
}
/// P(X ≤ h, Y ≤ h) for a standard bivariate normal with correlation ρ ∈ (−1, 1), in log form.
inline double log_bvn_diag(double h, double rho) {
  const double a = std::sqrt((1.0 - rho) / (1.0 + rho));
  const double t = special::owens_t(h, a);
  if (h > 0.0) return std::log1p(-(0.5 * std::erfc(h * std::numbers::sqrt2 / 2.0) + 2.0 * t));
  const double p = norm_cdf(h) - 2.0 * t;
  return p > 0.0 ? std::log(p) : -std::numeric_limits<double>::infinity();
}

// ---- model --------------------------------------------------------------------------------------

/// The needle task as the theory sees it.
struct needle_model {
  index_t context = 4096;           ///< N: context tokens (positions 0 … N−1)
  index_t dim = 64;                 ///< d: key dimension
  index_t key_span = 1;             ///< k: consecutive tokens holding the target key
  double snr = std::numeric_limits<double>::infinity();  ///< query = x* + N(0, I/snr); ∞ = exact
  index_t target_position = -1;     ///< anchor of the target (−1 = N/2); phase φ puts the first
                                    ///< target token at the stride-aligned anchor + φ
  index_t value_span = 0;           ///< tokens after the key span that carry c·x* (tasks::needle_config)
  double value_key_weight = 1.0;    ///< c
  /// Tokens of the needle (key and value span); any of them in the winning entry is a hit.
  [[nodiscard]] index_t span() const noexcept { return key_span + value_span; }
  /// Multiple of x* held by needle token t ∈ [0, span()).
  [[nodiscard]] double token_multiplier(index_t t) const noexcept { return t < key_span ? 1.0 : value_key_weight; }

  void validate() const {
    require(context >= 1 && context <= (index_t(1) << 32), "context", context, "must be in [1, 2^32]");
    require(dim >= 1 && dim <= 65536, "dim", dim, "must be in [1, 65536]");
    require(key_span >= 1 && key_span <= context, "key_span", key_span, "must be in [1, context]");
    require(snr > 0.0 && !std::isnan(snr), "snr", snr, "must be > 0 (infinity = noiseless query)");
    require(target_position >= -1 && target_position < context, "target_position", target_position,
            "must be -1 (middle) or a position in [0, context)");
    require(value_span >= 0 && value_span <= context - key_span, "value_span", value_span,
            "must be >= 0 with key_span + value_span <= context");
    require(std::isfinite(value_key_weight), "value_key_weight", value_key_weight, "must be finite");
  }
  friend std::ostream& operator<<(std::ostream& os, const needle_model& m) {
    return os << "needle_model{context=" << m.context << ", dim=" << m.dim << ", key_span=" << m.key_span
              << ", snr=" << m.snr << ", target_position=" << m.target_position << ", value_span=" << m.value_span
              << ", value_key_weight=" << m.value_key_weight << "}";
  }
};

/// A group of distractor entries with the same score standard deviation (given |q| = 1).
struct distractor_class {
  double sigma = 1.0;
  double count = 0.0;
};

/// How the far distractors (those sharing no token with a target entry) are treated when windows
/// overlap (W > S). For W = S they are exactly independent and this is ignored.
enum class far_model {
  independent,  ///< product of marginal CDFs
  markov        ///< first-order chain: P(max ≤ x) ≈ p₁·(p₂/p₁)^(L−1) over each run of L entries
};
inline const char* to_string(far_model f) noexcept { return f == far_model::independent ? "independent" : "markov"; }

/// Numerical controls.
struct recall_options {
  double tolerance = 1e-10;        ///< relative tolerance of each adaptive Gauss–Kronrod integral
  index_t samples = 40000;         ///< conditional Monte Carlo samples (overlapping windows)
  std::uint64_t seed = 0x7e0f1u;   ///< seed of the conditional Monte Carlo
  far_model far = far_model::markov;
  /// Further competing items scored N(0, σ²) independently of the entries (e.g. the raw window's
  /// tokens, σ = 1): an approximation when they also feed entries (see predict.hpp).
  std::vector<distractor_class> extra_distractors;
  void validate() const {
    require(tolerance > 0.0 && tolerance < 1e-2, "tolerance", tolerance, "must be in (0, 1e-2)");
    require(samples >= 100 && samples <= (index_t(1) << 32), "samples", samples, "must be in [100, 2^32]");
    for (const auto& c : extra_distractors) {
      require(c.sigma > 0 && std::isfinite(c.sigma), "extra_distractors.sigma", c.sigma, "must be finite and > 0");
      require(c.count >= 0 && std::isfinite(c.count), "extra_distractors.count", c.count, "must be finite and >= 0");
    }
  }
};

/// How a per-phase value was obtained.
enum class recall_method { quadrature, local_monte_carlo, not_visible, no_distractor };
inline const char* to_string(recall_method m) noexcept {
  switch (m) {
    case recall_method::quadrature: return "quadrature";
    case recall_method::local_monte_carlo: return "local_monte_carlo";
    case recall_method::not_visible: return "not_visible";
    case recall_method::no_distractor: return "no_distractor";
  }
  return "?";
}

/// Predicted recall at one phase.
struct phase_recall {
  index_t phase = 0;
  index_t target_position = 0;  ///< first target token
  double recall = 0.0;
  double error = 0.0;           ///< absolute error estimate (quadrature) or standard error (Monte Carlo)
  recall_method method = recall_method::quadrature;
};

/// Per-phase predictions, or the reason a configuration lies outside the theory.
struct recall_prediction {
  bool covered = true;
  std::string reason;            ///< why not covered (empty when covered)
  std::string assumptions;       ///< what is exact and what is approximated, for logs and CSV
  std::vector<phase_recall> phases;

  [[nodiscard]] double max_recall() const {
    double m = -1;
    for (const auto& p : phases) m = std::max(m, p.recall);
    return m;
  }
  [[nodiscard]] double min_recall() const {
    double m = 2;
    for (const auto& p : phases) m = std::min(m, p.recall);
    return m;
  }
  /// max − min over phases.
  [[nodiscard]] double gap() const { return phases.empty() ? 0.0 : max_recall() - min_recall(); }
  [[nodiscard]] double mean_recall() const {
    double s = 0;
    for (const auto& p : phases) s += p.recall;
    return phases.empty() ? 0.0 : s / static_cast<double>(phases.size());
  }
};

// ---- geometry of one phase ----------------------------------------------------------------------

/// One entry holding target tokens: s = A·T + √v·n, n ~ N(0, 1).
struct target_entry {
  index_t entry = 0;
  double target_weight = 0.0;  ///< A: total pooled weight of the target's tokens
  double noise_var = 0.0;      ///< v: Σ of squared weights of the entry's other (unmasked) tokens
};

/// Everything the integrals need about one phase.
struct phase_geometry {
  index_t phase = 0;
  index_t target_position = 0;
  index_t visible_entries = 0;           ///< M
  std::vector<target_entry> targets;     ///< sorted by entry
  std::vector<distractor_class> distractors;  ///< all non-target visible entries, by σ
};

namespace detail {
inline double sum_sq(const std::vector<double>& w) {
  double s = 0;
  for (double v : w) s += v * v;
  return s;
}
}  // namespace detail

/// First target position for phase φ: the stride-aligned anchor plus φ.
inline index_t target_position_for_phase(const compress::chunk_grid& g, const needle_model& m, index_t phase) {
  const index_t anchor = m.target_position >= 0 ? m.target_position : m.context / 2;
  const index_t base = g.origin + floor_div(anchor - g.origin, g.stride) * g.stride;
  index_t p = base + phase;
  if (p + m.span() - 1 >= m.context) p -= g.stride * ceil_div(p + m.span() - m.context, g.stride);
  if (p < 0) p += g.stride * ceil_div(-p, g.stride);
  return p;
}

/// Target entries and distractor classes with the target's first token at `position`, labelled
/// `phase` (validates nothing; see predict_recall_by_phase).
inline phase_geometry geometry_at(const compress::operator_spec& spec, const needle_model& m, index_t phase,
                                  index_t position) {
  const auto& g = spec.grid;
  phase_geometry out;
  out.phase = phase;
  out.target_position = position;
  const index_t M = g.num_entries(m.context);
  out.visible_entries = M;
  std::map<index_t, std::vector<std::pair<index_t, double>>> slots;  // entry -> (target slot, multiplier)
  for (index_t t = 0; t < m.span(); ++t) {
    g.for_each_entry_containing(out.target_position + t, [&](index_t e, index_t slot) {
      if (e < M) slots[e].push_back({slot, m.token_multiplier(t)});
    });
  }
  for (const auto& [e, sl] : slots) {
    const auto w = spec.linear_slot_weights(g.masked_slots(e));
    double a = 0, v = detail::sum_sq(w);
    for (const auto& [s, c] : sl) {
      a += c * w[static_cast<std::size_t>(s)];
      v -= w[static_cast<std::size_t>(s)] * w[static_cast<std::size_t>(s)];
    }
    out.targets.push_back({e, a, std::max(0.0, v)});
  }
  // distractors: entries with masked slots (a few at the start) and interior ones.
  std::map<index_t, double> by_masked;
  index_t e = 0;
  for (; e < M; ++e) {
    const index_t mk = g.masked_slots(e);
    if (mk == 0) break;
    if (!slots.count(e)) by_masked[mk] += 1.0;
  }
  index_t interior_targets = 0;
  for (const auto& [te, sl] : slots)
    if (te >= e) ++interior_targets;
  by_masked[0] += static_cast<double>(M - e - interior_targets);
  for (const auto& [mk, c] : by_masked) {
    if (c <= 0) continue;
    out.distractors.push_back({std::sqrt(detail::sum_sq(spec.linear_slot_weights(mk))), c});
  }
  return out;
}

/// geometry_at for phase φ of the spec's own grid.
inline phase_geometry geometry_for_phase(const compress::operator_spec& spec, const needle_model& m, index_t phase) {
  return geometry_at(spec, m, phase, target_position_for_phase(spec.grid, m, phase));
}

// ---- the distractors' maximum -------------------------------------------------------------------

/// CDF G(x) = Π_c Φ(x/σ_c)^{n_c} and density of the maximum of independent distractors.
struct distractor_max {
  std::vector<distractor_class> classes;
  double lo = 0, hi = 0;  ///< support to 1e-18 mass in each tail

  explicit distractor_max(std::vector<distractor_class> c) : classes(std::move(c)) {
    double smax = 0;
    for (const auto& k : classes) smax = std::max(smax, k.sigma);
    // bracket then bisect: log G(lo) = log 1e-18, 1 − G(hi) = 1e-18
    const double log_target = std::log(1e-18);
    double a = -40.0 * smax, b = 40.0 * smax;
    for (int i = 0; i < 200; ++i) {
      const double mid = 0.5 * (a + b);
      (log_cdf(mid) < log_target ? a : b) = mid;
    }
    lo = a;
    a = -40.0 * smax;
    b = 40.0 * smax;
    for (int i = 0; i < 200; ++i) {
      const double mid = 0.5 * (a + b);
      (upper_tail(mid) > 1e-18 ? a : b) = mid;
    }
    hi = b;
  }
  [[nodiscard]] double log_cdf(double x) const noexcept {
    double s = 0;
    for (const auto& k : classes) s += k.count * log_norm_cdf(x / k.sigma);
    return s;
  }
  /// Upper bound of 1 − G(x) (union bound; exact to first order in the tail).
  [[nodiscard]] double upper_tail(double x) const noexcept {
    double s = 0;
    for (const auto& k : classes) s += k.count * norm_cdf(-x / k.sigma);
    return s;
  }
  [[nodiscard]] double pdf(double x) const noexcept {
    const double lg = log_cdf(x);
    if (lg < -745.0) return 0.0;
    double h = 0;
    for (const auto& k : classes) h += k.count * norm_hazard_lower(x / k.sigma) / k.sigma;
    return std::exp(lg) * h;
  }
};

// ---- distribution of the target score T ----------------------------------------------------------

/// T = a·ρ + b·Z with ρ ~ χ_d, Z ~ N(0, 1), a = √(snr/(1+snr)), b = 1/√(1+snr).
struct target_score_law {
  index_t dim = 64;
  double a = 1, b = 0;
  double rho_lo = 0, rho_hi = 0, lo = 0, hi = 0;
  double tolerance = 1e-10;

  target_score_law(index_t d, double snr, double tol) : dim(d), tolerance(tol) {
    if (std::isinf(snr)) {
      a = 1;
      b = 0;
    } else {
      a = std::sqrt(snr / (1 + snr));
      b = 1.0 / std::sqrt(1 + snr);
    }
    rho_lo = std::sqrt(special::chi_squared_quantile(static_cast<double>(d), 1e-15, false));
    rho_hi = std::sqrt(special::chi_squared_quantile(static_cast<double>(d), 1e-15, true));
    lo = a * rho_lo - 8.5 * b;
    hi = a * rho_hi + 8.5 * b;
  }
  /// Density of ρ ~ χ_d.
  [[nodiscard]] double rho_pdf(double r) const {
    if (r <= 0) return 0.0;
    const double k = static_cast<double>(dim);
    return std::exp((k - 1) * std::log(r) - 0.5 * r * r - (0.5 * k - 1) * std::log(2.0) - std::lgamma(0.5 * k));
  }
  /// Density of T.
  [[nodiscard]] double pdf(double t) const {
    if (b == 0) return rho_pdf(t);
    auto f = [&](double r) { return rho_pdf(r) * norm_pdf((t - a * r) / b) / b; };
    const double c = t / a;  // integrate where the Gaussian factor is non-negligible
    const double r0 = std::max(rho_lo, c - 9.0 * b / a), r1 = std::min(rho_hi, c + 9.0 * b / a);
    if (r1 <= r0) return 0.0;
    return special::gauss_kronrod(31, f, r0, r1, 8, 1e-12);
  }
};

// ---- exact recall for non-overlapping target entries --------------------------------------------

/// P(max target entry > max distractor | T = t) for target entries independent given T.
inline double recall_given_target_score(double t, const std::vector<target_entry>& targets, const distractor_max& dmax,
                                        double tol, double* err = nullptr) {
  double x0 = -std::numeric_limits<double>::infinity();
  for (const auto& j : targets)
    if (j.noise_var <= 0) x0 = std::max(x0, j.target_weight * t);
  const double a = std::max(dmax.lo, x0), b = dmax.hi;
  if (err) *err = 0;
  if (a >= b) return x0 >= b ? 1.0 : 0.0;
  // ∫ g(x)(1 + F(x)) dx − ∫ g: the integrand is O(1), so the relative tolerance acts absolutely.
  auto h = [&](double x) {
    double f = 1;
    for (const auto& j : targets)
      if (j.noise_var > 0) f *= norm_cdf((x - j.target_weight * t) / std::sqrt(j.noise_var));
    return dmax.pdf(x) * (1.0 + f);
  };
  std::vector<double> cuts{a};
  for (const auto& j : targets) {
    const double c = j.target_weight * t;
    if (j.noise_var > 0 && c > a && c < b) cuts.push_back(c);
  }
  cuts.push_back(b);
  std::sort(cuts.begin(), cuts.end());
  double total = 0, e_total = 0;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i + 1] <= cuts[i]) continue;
    double e = 0;
    total += special::gauss_kronrod(31, h, cuts[i], cuts[i + 1], 12, tol, &e);
    e_total += e;
  }
  const double mass = std::exp(dmax.log_cdf(b)) - std::exp(dmax.log_cdf(a));
  if (err) *err = e_total + 2e-18;
  return std::clamp(1.0 - (total - mass), 0.0, 1.0);
}

/// Exact recall for one phase whose target entries share no non-target token (W = S).
inline phase_recall recall_exact_disjoint(const phase_geometry& geo, const needle_model& m, double tol) {
  phase_recall out{geo.phase, geo.target_position, 0.0, 0.0, recall_method::quadrature};
  if (geo.targets.empty()) {
    out.method = recall_method::not_visible;
    return out;
  }
  if (geo.distractors.empty()) {
    out.recall = 1.0;
    out.method = recall_method::no_distractor;
    return out;
  }
  const distractor_max dmax(geo.distractors);
  const target_score_law law(m.dim, m.snr, tol);
  double inner_err = 0;
  auto f = [&](double t) {
    double e = 0;
    const double r = recall_given_target_score(t, geo.targets, dmax, tol, &e);
    const double p = law.pdf(t);
    inner_err = std::max(inner_err, e);
    return p * (1.0 + r);
  };
  double outer_err = 0;
  const double total =
      special::gauss_kronrod(31, f, law.lo, law.hi, 10, tol, &outer_err);
  // ∫ f_T over [lo, hi] = 1 up to 2e-15 tail mass (and the density's own quadrature error)
  out.recall = std::clamp(total - 1.0, 0.0, 1.0);
  out.error = outer_err + inner_err + 1e-12;
  return out;
}

// ---- overlapping windows: local conditional Monte Carlo -----------------------------------------

namespace detail {

/// log P(max of the far distractors ≤ x) under the chosen far model.
struct far_distractors {
  std::vector<distractor_class> independent;  // masked start entries (always independent)
  double sigma = 1.0;                         // interior σ
  std::vector<double> runs;                   // lengths of runs of consecutive interior entries
  double rho1 = 0.0;                          // lag-1 correlation of interior entries
  far_model model = far_model::markov;

  [[nodiscard]] double log_cdf(double x) const {
    double s = 0;
    for (const auto& k : independent) s += k.count * log_norm_cdf(x / k.sigma);
    const double h = x / sigma;
    const double l1 = log_norm_cdf(h);
    if (model == far_model::independent || rho1 <= 0.0 || rho1 >= 1.0) {
      for (double L : runs) s += L * l1;
      return s;
    }
    const double l2 = log_bvn_diag(h, rho1);
    for (double L : runs)
      if (L > 0) s += l1 + (L - 1) * (l2 - l1);
    return s;
  }
};

}  // namespace detail

/// Recall for one phase when windows overlap: the target entries and the distractors sharing a
/// token with them are sampled jointly (token scores), the far distractors integrated analytically.
inline phase_recall recall_local_monte_carlo(const compress::operator_spec& spec, const needle_model& m,
                                             const phase_geometry& geo, const recall_options& opt) {
  phase_recall out{geo.phase, geo.target_position, 0.0, 0.0, recall_method::local_monte_carlo};
  if (geo.targets.empty()) {
    out.method = recall_method::not_visible;
    return out;
  }
  const auto& g = spec.grid;
  const index_t M = geo.visible_entries;
  // token range touched by target entries
  index_t tok_lo = std::numeric_limits<index_t>::max(), tok_hi = -1;
  for (const auto& t : geo.targets) {
    const auto r = g.sources_clipped(t.entry, m.context);
    tok_lo = std::min(tok_lo, r.first);
    tok_hi = std::max(tok_hi, r.last);
  }
  // neighbour entries: non-target entries sharing a token with [tok_lo, tok_hi]
  std::vector<index_t> local;  // target entries first, then neighbours
  for (const auto& t : geo.targets) local.push_back(t.entry);
  const std::size_t n_target = local.size();
  index_t e_lo = geo.targets.front().entry, e_hi = geo.targets.back().entry;
  for (index_t e = std::max<index_t>(0, e_lo - g.window / g.stride - 2); e < M && e <= e_hi + g.window / g.stride + 2; ++e) {
    const auto r = g.sources_clipped(e, m.context);
    const bool target = std::any_of(geo.targets.begin(), geo.targets.end(), [&](const target_entry& t) { return t.entry == e; });
    if (!target && r.last >= tok_lo && r.first <= tok_hi) {
      local.push_back(e);
      e_lo = std::min(e_lo, e);
      e_hi = std::max(e_hi, e);
    }
  }
  for (std::size_t i = 0; i < local.size(); ++i) {
    const auto r = g.sources_clipped(local[i], m.context);
    tok_lo = std::min(tok_lo, r.first);
    tok_hi = std::max(tok_hi, r.last);
  }
  // far distractors
  detail::far_distractors far;
  far.model = opt.far;
  const auto w0 = spec.linear_slot_weights(0);
  far.sigma = std::sqrt(detail::sum_sq(w0));
  {
    double c = 0;
    for (index_t r = 0; r + g.stride < g.window; ++r) c += w0[static_cast<std::size_t>(r)] * w0[static_cast<std::size_t>(r + g.stride)];
    far.rho1 = c / detail::sum_sq(w0);
  }
  std::map<index_t, double> masked;
  index_t first_interior = 0;
  for (; first_interior < M && g.masked_slots(first_interior) > 0; ++first_interior) {
    if (first_interior < e_lo) masked[g.masked_slots(first_interior)] += 1.0;
  }
  for (const auto& [mk, c] : masked) far.independent.push_back({std::sqrt(detail::sum_sq(spec.linear_slot_weights(mk))), c});
  for (const auto& c : opt.extra_distractors)
    if (c.count > 0) far.independent.push_back(c);
  far.runs.push_back(static_cast<double>(std::max<index_t>(0, e_lo - first_interior)));
  far.runs.push_back(static_cast<double>(std::max<index_t>(0, M - 1 - e_hi)));

  // per-entry weights over the local token range
  const index_t n_tok = tok_hi - tok_lo + 1;
  std::vector<std::vector<std::pair<index_t, double>>> taps(local.size());
  for (std::size_t i = 0; i < local.size(); ++i) {
    const index_t e = local[i];
    const auto w = spec.linear_slot_weights(g.masked_slots(e));
    const auto src = g.sources(e);
    for (index_t r = 0; r < g.window; ++r) {
      const index_t p = src.first + r;
      if (p < 0 || w[static_cast<std::size_t>(r)] == 0.0) continue;
      taps[i].push_back({p - tok_lo, w[static_cast<std::size_t>(r)]});
    }
  }
  std::vector<char> is_target(static_cast<std::size_t>(n_tok), 0);
  std::vector<double> mult(static_cast<std::size_t>(n_tok), 0.0);
  for (index_t t = 0; t < m.span(); ++t) {
    const index_t p = geo.target_position + t - tok_lo;
    if (p >= 0 && p < n_tok) {
      is_target[static_cast<std::size_t>(p)] = 1;
      mult[static_cast<std::size_t>(p)] = m.token_multiplier(t);
    }
  }
  const double a = std::isinf(m.snr) ? 1.0 : std::sqrt(m.snr / (1 + m.snr));
  const double b = std::isinf(m.snr) ? 0.0 : 1.0 / std::sqrt(1 + m.snr);

  std::ostringstream key;
  key << spec << m << geo.phase;
  const std::uint64_t cfg = rng::hash_text(key.str());
  std::vector<double> u(static_cast<std::size_t>(n_tok));
  double sum = 0, sum2 = 0;
  for (index_t i = 0; i < opt.samples; ++i) {
    rng::philox_stream s(opt.seed, rng::trial_stream(cfg, static_cast<std::uint64_t>(i)));
    double rho2 = 0;
    for (index_t c = 0; c < m.dim; ++c) {
      const double z = s.normal();
      rho2 += z * z;
    }
    const double T = a * std::sqrt(rho2) + (b > 0 ? b * s.normal() : 0.0);
    for (index_t p = 0; p < n_tok; ++p) u[static_cast<std::size_t>(p)] = is_target[static_cast<std::size_t>(p)] ? mult[static_cast<std::size_t>(p)] * T : s.normal();
    double xt = -std::numeric_limits<double>::infinity(), xn = xt;
    for (std::size_t k = 0; k < local.size(); ++k) {
      double sc = 0;
      for (const auto& [p, w] : taps[k]) sc += w * u[static_cast<std::size_t>(p)];
      if (k < n_target) xt = std::max(xt, sc);
      else xn = std::max(xn, sc);
    }
    const double v = xt > xn ? std::exp(far.log_cdf(xt)) : 0.0;
    sum += v;
    sum2 += v * v;
  }
  const double n = static_cast<double>(opt.samples);
  out.recall = sum / n;
  out.error = std::sqrt(std::max(0.0, sum2 / n - out.recall * out.recall) / (n - 1));
  return out;
}

// ---- entry point --------------------------------------------------------------------------------

/// Why (spec, model) is outside the Gaussian theory, or "" when it is covered.
inline std::string outside_theory_reason(const compress::operator_spec& spec, const needle_model& m) {
  const auto caps = compress::capabilities(spec);
  if (!caps.theory_covered) return caps.theory_reason;
  if (spec.grid.num_entries(m.context) < 1) return "no complete entry in the context";
  return "";
}

/// Predicted recall with the target's first token at `position` (label `phase`), for a spec the
/// theory covers (check outside_theory_reason first).
inline phase_recall predict_recall_at(const compress::operator_spec& spec, const needle_model& m, index_t phase,
                                      index_t position, const recall_options& opt = {}) {
  require(position >= 0 && position + m.span() <= m.context, "position", position,
          "the target span must lie inside the context");
  auto geo = geometry_at(spec, m, phase, position);
  if (spec.grid.window != spec.grid.stride) return recall_local_monte_carlo(spec, m, geo, opt);
  for (const auto& c : opt.extra_distractors)
    if (c.count > 0) geo.distractors.push_back(c);
  return recall_exact_disjoint(geo, m, opt.tolerance);
}

/// Documented bound on the error of the overlapping-window approximation (far distractors
/// treated as a first-order chain), measured against simulation over the grid in
/// tests/test_theory_recall.cpp (see theory/gaussian.md); 0 for W = S (exact).
inline double overlap_approximation_bound(const compress::operator_spec& spec) {
  const index_t ratio = ceil_div(spec.grid.window, spec.grid.stride);
  if (ratio <= 1) return 0.0;
  if (ratio <= 2) return 0.01;
  return ratio <= 8 ? 0.03 : 0.05;
}

/// Per-phase predicted recall of the needle task for a content-independent linear operator.
/// One value per phase φ = 0 … S−1 (target's first token at the aligned anchor + φ).
inline recall_prediction predict_recall_by_phase(const compress::operator_spec& spec, const needle_model& m,
                                                 const recall_options& opt = {}) {
  spec.validate();
  m.validate();
  opt.validate();
  recall_prediction out;
  out.reason = outside_theory_reason(spec, m);
  if (!out.reason.empty()) {
    out.covered = false;
    return out;
  }
  const bool disjoint = spec.grid.window == spec.grid.stride;
  out.assumptions = disjoint ? "exact Gaussian model, non-overlapping windows (nested Gauss-Kronrod)"
                             : std::string("overlapping windows: target neighbourhood exact (conditional Monte Carlo), "
                                           "far distractors ") + to_string(opt.far);
  if (!opt.extra_distractors.empty()) out.assumptions += "; extra items (raw window) independent of the entries";
  for (index_t ph = 0; ph < spec.grid.stride; ++ph)
    out.phases.push_back(predict_recall_at(spec, m, ph, target_position_for_phase(spec.grid, m, ph), opt));
  return out;
}

}  // namespace kvphase::theory
