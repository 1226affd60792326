#pragma once
/// \file theory/predict.hpp
/// The theory column of a needle sweep: per phase group, the predicted recall of the compressed
/// model and of the full-attention control, for the sweep's own task and operator objects.
///
/// Mapping from tasks::needle_config (tasks/needle.hpp) to the theory's needle_model:
/// context, dim, key_span, value_span, value_key_weight carry over; snr = 1/query_noise²
/// (query_noise = 0 → ∞). The sweep draws the needle start uniformly over a wide depth range and
/// places it in residue group g of the modulus G (relative to the grid origin); for interior
/// positions recall depends on the position only through its phase, so group g's prediction is the
/// mean of recall(φ) over the phases φ ≡ g (mod gcd(G, S)) (equally likely).
///
/// Items: the complete entries of the N context tokens plus, for the compressed model, the last
/// `raw_window` raw tokens (σ = 1 each). The needle is kept out of the raw window by the sweep;
/// the raw tokens also feed the last entries, a correlation this treats as absent (approximation,
/// negligible when raw_window ≪ N/S). Full attention is the identity pool over the N tokens (exact).

#include <numeric>
#include <string>
#include <vector>

#include "kvphase/compress/capabilities.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/tasks/needle.hpp"
#include "kvphase/theory/gates.hpp"
#include "kvphase/theory/gaussian.hpp"

namespace kvphase::theory {

/// needle_model of a sweep's needle task (target in the middle; see file comment).
inline needle_model to_needle_model(const tasks::needle_config& c) {
  c.validate();
  needle_model m;
  m.context = c.context;
  m.dim = c.dim;
  m.key_span = c.key_span;
  m.value_span = c.value_span;
  m.value_key_weight = c.value_key_weight;
  m.snr = c.query_noise > 0 ? 1.0 / (c.query_noise * c.query_noise) : std::numeric_limits<double>::infinity();
  m.target_position = c.context / 2;
  return m;
}

/// Per-phase (φ = 0 … S−1) recall of the compressed model for a sweep's needle task (no raw
/// window), or covered = false with the reason.
inline recall_prediction predict_recall_by_phase(const compress::operator_spec& op, const tasks::needle_config& needle,
                                                 const recall_options& options = {}) {
  const needle_model m = to_needle_model(needle);
  if (compress::capabilities(op).content_gated) return predict_recall_gated(op, m);
  return predict_recall_by_phase(op, m, options);
}

/// Predictions for a needle sweep, one value per phase group.
struct sweep_prediction {
  bool covered = true;
  std::string reason;                      ///< why not covered
  std::string assumptions;
  std::vector<double> compressed, compressed_error;  ///< per group
  std::vector<double> full, full_error;              ///< per group (phase-free)
};

/// Per-group predicted recall for a needle sweep with operator `op`, `raw_window` raw tokens in
/// the compressed model and `groups` phase groups (0 = the stride); `gates` controls the numerical
/// integral for slot gates with content logits. Never throws for
/// configurations outside the theory: returns covered = false with the reason.
inline sweep_prediction predict_sweep_needle(const compress::operator_spec& op, const tasks::needle_config& needle,
                                             index_t raw_window = 0, index_t groups = 0,
                                             const recall_options& options = {}, const gate_options& gates = {}) {
  op.validate();
  require(raw_window >= 0, "raw_window", raw_window, "must be >= 0");
  require(groups >= 0, "groups", groups, "must be >= 0 (0: the stride)");
  const needle_model m = to_needle_model(needle);
  sweep_prediction out;
  const index_t S = op.grid.stride;
  const index_t G = groups > 0 ? groups : S;
  recall_prediction per_phase;
  recall_options opt = options;
  if (raw_window > 0) opt.extra_distractors.push_back({1.0, static_cast<double>(raw_window)});
  const bool gated = op.pool == compress::pool_kind::slot_gate && op.content_std > 0;
  if (gated) {
    if (raw_window > 0) {
      out.covered = false;
      out.reason = "content-logit gates with a raw window are not modelled";
      return out;
    }
    per_phase = predict_recall_gated(op, m, gates);
  } else {
    per_phase = predict_recall_by_phase(op, m, opt);
  }
  if (!per_phase.covered) {
    out.covered = false;
    out.reason = per_phase.reason;
    return out;
  }
  out.assumptions = per_phase.assumptions;
  const index_t gcd = std::gcd(G, S);
  for (index_t g = 0; g < G; ++g) {
    double r = 0, e = 0, n = 0;
    for (index_t ph = floor_mod(g, gcd); ph < S; ph += gcd) {
      r += per_phase.phases[static_cast<std::size_t>(ph)].recall;
      e += per_phase.phases[static_cast<std::size_t>(ph)].error;
      n += 1;
    }
    out.compressed.push_back(r / n);
    out.compressed_error.push_back(e / n);
  }
  const auto f = predict_recall_by_phase(compress::full(), m);
  out.full.assign(static_cast<std::size_t>(G), f.phases[0].recall);
  out.full_error.assign(static_cast<std::size_t>(G), f.phases[0].error);
  return out;
}

}  // namespace kvphase::theory
