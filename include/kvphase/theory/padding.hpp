#pragma once
/// \file theory/padding.hpp
/// Padding flip of a two-way choice, and the raw sliding window (derivations: theory/padding.md,
/// theory/window.md). padding_flip is a profile-only sketch; the sweep's own padding task is
/// predicted exactly by predict_padding (theory/padding_task.hpp).
///
/// Padding: the evidence for the correct answer sits at slot (offset_c + L) mod S of its chunk and
/// the evidence for the wrong answer at (offset_w + L) mod S, L the padding length. With retained
/// weight g(slot) (the gate profile) and strengths s_c, s_w, the correct answer wins when
/// s_c g(φ_c) − s_w g(φ_w) > 0 (noise σ: with probability Φ(margin/σ)). The outcome is periodic in
/// L with period S, and the fraction of lengths won is #{φ : s_c g(φ + Δ_c) > s_w g(φ + Δ_w)}/S over
/// whole periods.
///
/// Window: a raw window of n tokens ending at the query t shows every token p ≥ t − n + 1 at full
/// weight. A target whose first token is at distance δ = t − p ≤ n − 1 is wholly inside it at
/// every phase, so its raw score — and recall through the raw window — carries no phase; beyond
/// δ ≥ n + k − 1 no target token is raw and recall is that of the compressed entries.

#include <cmath>
#include <vector>

#include "kvphase/theory/gaussian.hpp"

namespace kvphase::theory {

struct padding_model {
  index_t stride = 4;
  std::vector<double> gate{0.1, 0.2, 0.3, 0.4};  ///< retained weight by slot, length S
  double strength_correct = 1.0;
  double strength_wrong = 1.2;
  index_t offset_correct = 0;   ///< slot of the correct evidence at L = 0
  index_t offset_wrong = 1;     ///< slot of the wrong evidence at L = 0
  double noise = 0.0;           ///< σ of the margin (0 = deterministic)
  index_t first_length = 24;
  index_t periods = 4;
  void validate() const {
    require(stride >= 1 && stride <= (index_t(1) << 20), "stride", stride, "must be in [1, 2^20]");
    require(static_cast<index_t>(gate.size()) == stride, "gate.size()", gate.size(), "must equal stride");
    require_finite(gate, "gate");
    require(std::isfinite(strength_correct) && std::isfinite(strength_wrong), "strength", strength_correct,
            "must be finite");
    require(noise >= 0 && std::isfinite(noise), "noise", noise, "must be finite and >= 0");
    require(first_length >= 0 && first_length <= (index_t(1) << 30), "first_length", first_length,
            "must be in [0, 2^30]");
    require(periods >= 1 && periods <= 4096, "periods", periods, "must be in [1, 4096]");
    require(offset_correct > -(index_t(1) << 40) && offset_correct < (index_t(1) << 40), "offset_correct",
            offset_correct, "must be within ±2^40");
    require(offset_wrong > -(index_t(1) << 40) && offset_wrong < (index_t(1) << 40), "offset_wrong", offset_wrong,
            "must be within ±2^40");
  }
  friend std::ostream& operator<<(std::ostream& os, const padding_model& p) {
    os << "padding_model{stride=" << p.stride << ", gate=[";
    for (std::size_t i = 0; i < p.gate.size(); ++i) os << (i ? "," : "") << p.gate[i];
    return os << "], strength_correct=" << p.strength_correct << ", strength_wrong=" << p.strength_wrong
              << ", offset_correct=" << p.offset_correct << ", offset_wrong=" << p.offset_wrong << ", noise=" << p.noise
              << ", first_length=" << p.first_length << ", periods=" << p.periods << "}";
  }
};

struct padding_result {
  std::vector<double> p_correct;   ///< per padding length first_length + i
  double fraction_correct = 0;     ///< mean of p_correct (whole periods)
};

inline padding_result padding_flip(const padding_model& pm) {
  pm.validate();
  padding_result out;
  const index_t S = pm.stride;
  for (index_t i = 0; i < pm.periods * S; ++i) {
    const index_t L = pm.first_length + i;
    const double gc = pm.gate[static_cast<std::size_t>(floor_mod(pm.offset_correct + L, S))];
    const double gw = pm.gate[static_cast<std::size_t>(floor_mod(pm.offset_wrong + L, S))];
    const double margin = pm.strength_correct * gc - pm.strength_wrong * gw;
    const double p = pm.noise > 0 ? norm_cdf(margin / pm.noise) : (margin > 0 ? 1.0 : (margin == 0 ? 0.5 : 0.0));
    out.p_correct.push_back(p);
    out.fraction_correct += p;
  }
  out.fraction_correct /= static_cast<double>(out.p_correct.size());
  return out;
}

/// Largest distance δ = t − p (query t, first target token p) at which a raw window of n tokens
/// holds the whole target at every phase: n − 1.
inline index_t window_invariant_distance(index_t raw_window, index_t key_span = 1) {
  require(raw_window >= 1 && raw_window <= (index_t(1) << 31), "raw_window", raw_window, "must be in [1, 2^31]");
  require(key_span >= 1 && key_span <= raw_window, "key_span", key_span, "must be in [1, raw_window]");
  return raw_window - 1;
}

/// Smallest distance δ at which no target token is in the raw window: n + k − 1.
inline index_t window_compressed_only_distance(index_t raw_window, index_t key_span = 1) {
  require(raw_window >= 1 && raw_window <= (index_t(1) << 31), "raw_window", raw_window, "must be in [1, 2^31]");
  require(key_span >= 1 && key_span <= (index_t(1) << 30), "key_span", key_span, "must be in [1, 2^30]");
  return raw_window + key_span - 1;
}

/// The sweep's convention (sim::sweep_config::window, `--raw-window n`): the query is token N and
/// the raw window holds the n context tokens N − n … N − 1 before it (the query itself is not a
/// context token). With δ = N − p the distance of the target's first token p from the query, the
/// whole span of k ≤ n tokens is raw iff δ ≤ n, i.e. window_invariant_distance(n + 1).
inline index_t sweep_window_invariant_distance(index_t raw_window, index_t key_span = 1) {
  require(raw_window >= 1 && raw_window <= (index_t(1) << 30), "raw_window", raw_window, "must be in [1, 2^30]");
  return window_invariant_distance(raw_window + 1, key_span);
}

/// Sweep convention: smallest δ = N − p at which no target token is raw, n + k.
inline index_t sweep_window_compressed_only_distance(index_t raw_window, index_t key_span = 1) {
  require(raw_window >= 1 && raw_window <= (index_t(1) << 30), "raw_window", raw_window, "must be in [1, 2^30]");
  return window_compressed_only_distance(raw_window + 1, key_span);
}

/// Whether a sweep placing the target at distances δ0 + φ, φ = 0 … S−1, is phase-invariant because
/// the raw window covers every phase's target (n ≥ S also guarantees every token is either raw
/// or inside a complete entry).
inline bool window_covers_all_phases(index_t raw_window, index_t stride, index_t base_distance, index_t key_span = 1) {
  require(stride >= 1 && stride <= (index_t(1) << 20), "stride", stride, "must be in [1, 2^20]");
  require(key_span >= 1 && key_span <= (index_t(1) << 30), "key_span", key_span, "must be in [1, 2^30]");
  require(base_distance <= (index_t(1) << 40), "base_distance", base_distance, "must be <= 2^40");
  require(base_distance >= key_span - 1, "base_distance", base_distance, "the target must precede the query");
  return base_distance + stride - 1 <= window_invariant_distance(raw_window, key_span);
}

}  // namespace kvphase::theory
