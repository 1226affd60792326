#pragma once
/// \file theory/straddle.hpp
/// Span straddling and the V4-CSA two-stream overlap (derivations: theory/straddle.md,
/// theory/overlap.md).
///
/// A target spanning k tokens whose first token has phase φ touches ⌈(φ + k)/S⌉ stride blocks;
/// under W = S each block is one entry, and the share of the span's pooled weight that lands in
/// one entry depends on φ with period S even for a uniform mean (the largest share is
/// max(min(k, S − φ), k − min(k, S − φ))/S for k ≤ S). A single token (k = 1) has share 1/S at
/// every phase: uniform pooling is then phase-invariant. Under the V4 convention with W = 2S
/// (two streams), entry j pools [(j−1)S, jS + S − 1], so a span starting at phase φ is wholly
/// inside one entry iff φ + k ≤ 2S: spans with k ≤ S + 1 are never split.

#include <algorithm>
#include <vector>

#include "kvphase/compress/capabilities.hpp"
#include "kvphase/theory/gaussian.hpp"

namespace kvphase::theory {

/// ⌈(φ + k)/S⌉: stride blocks touched by a k-token span starting at phase φ.
inline index_t chunks_touched(index_t phase, index_t span, index_t stride) {
  require(stride >= 1, "stride", stride, "must be >= 1");
  require(phase >= 0 && phase < stride, "phase", phase, "must be in [0, stride)");
  require(span >= 1, "span", span, "must be >= 1");
  return ceil_div(phase + span, stride);
}

/// Pooled weight of a span in each entry touched, at one phase (interior position).
struct span_share {
  index_t phase = 0;
  index_t entries_touched = 0;
  double max_share = 0;          ///< largest total weight of span tokens inside one entry
  std::vector<double> shares;    ///< per touched entry, in entry order
};

/// Shares by phase for the spec's linear weights, the span placed far from the sequence start.
inline std::vector<span_share> span_shares_by_phase(const compress::operator_spec& spec, index_t span) {
  spec.validate();
  require(compress::capabilities(spec).fixed_weights, "pool", compress::to_string(spec.pool), "needs a fixed linear pool");
  require(span >= 1 && span <= (index_t(1) << 20), "span", span, "must be in [1, 2^20]");
  const auto& g = spec.grid;
  std::vector<span_share> out;
  const index_t base = g.origin + (4 + ceil_div(g.window + std::abs(g.origin), g.stride)) * g.stride;
  for (index_t ph = 0; ph < g.stride; ++ph) {
    needle_model m{.context = base + 8 * g.window + span + 8 * g.stride, .dim = 1, .key_span = span, .target_position = base};
    const auto geo = geometry_at(spec, m, ph, base + ph);
    span_share s;
    s.phase = ph;
    s.entries_touched = static_cast<index_t>(geo.targets.size());
    for (const auto& t : geo.targets) {
      s.shares.push_back(t.target_weight);
      s.max_share = std::max(s.max_share, t.target_weight);
    }
    out.push_back(s);
  }
  return out;
}

/// Largest span never split by the V4 two-stream overlap W = 2S: S + 1.
inline index_t max_never_split_span(index_t stride) {
  require(stride >= 1, "stride", stride, "must be >= 1");
  return stride + 1;
}

/// Whether no single entry (V4 convention, window W, stride S) holds the whole span [φ, φ+k−1].
inline bool span_is_split(index_t window, index_t stride, index_t phase, index_t span) {
  compress::chunk_grid g{.window = window, .stride = stride};
  g.validate();
  require(phase >= 0 && phase < stride, "phase", phase, "must be in [0, stride)");
  require(span >= 1, "span", span, "must be >= 1");
  // entry j (V4, origin 0) holds [jS − (W − S), jS + S − 1]
  const index_t jlo = ceil_div(phase + span - stride, stride);
  const index_t jhi = floor_div(phase + window - stride, stride);
  return jlo > jhi;
}

/// Predicted recall for uniform mean pooling with W = S and with the two-stream overlap W = 2S.
struct two_stream_result {
  recall_prediction non_overlapping;  ///< W = S
  recall_prediction overlapping;      ///< W = 2S
  /// gap(W = 2S) / gap(W = S) (1 when both gaps are 0).
  [[nodiscard]] double gap_ratio() const {
    const double a = non_overlapping.gap(), b = overlapping.gap();
    return a > 0 ? b / a : (b > 0 ? INFINITY : 1.0);
  }
};

inline two_stream_result two_stream_gap(index_t stride, const needle_model& m, const recall_options& opt = {},
                                        const std::vector<double>& weights_2s = {}) {
  compress::operator_spec a, b;
  a.grid = {.window = stride, .stride = stride};
  b.grid = {.window = 2 * stride, .stride = stride};
  if (!weights_2s.empty()) {
    b.pool = compress::pool_kind::weights;
    b.slot_weights = weights_2s;
  }
  return {predict_recall_by_phase(a, m, opt), predict_recall_by_phase(b, m, opt)};
}

}  // namespace kvphase::theory
