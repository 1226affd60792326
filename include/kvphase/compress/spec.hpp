#pragma once
/// \file compress/spec.hpp
/// operator_spec: the one description of a chunked compression operator. The same spec feeds
/// the compressor, the attention models, the sweep engine and the theory, so a prediction and a
/// measurement can never disagree about what was modelled.
///
/// The spec holds the geometry, the pool kind and the *slot-level* gate profile (fixed slot
/// weights, or slot bias b and the scale τ of random content logits). Learned projections
/// (content-gate vector u, channel-gate matrices, two-stream projections, MLP weights) are model
/// parameters and live in compress/pool.hpp's parameter structs.

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/compress/grid.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::compress {

/// How the W slots of an entry are combined.
enum class pool_kind {
  identity,      ///< W = S = 1: the token itself (full attention as a degenerate grid)
  mean,          ///< uniform average over unmasked slots
  max,           ///< per-channel maximum over unmasked slots
  weights,       ///< fixed slot weights w ∈ R^W (renormalised over unmasked slots)
  slot_gate,     ///< scalar gate α_r = softmax_r(z_t + b_r), z_t = u·x_t optional, b ∈ R^W
  channel_gate,  ///< DeepSeek-V4 HCA: per-channel softmax over slots of X·W_Z + B, payload X·W_C
  two_stream,    ///< DeepSeek-V4 CSA: W = 2S from streams a (previous block) and b (current)
  mlp            ///< NSA: MLP over the flattened block with intra-block position encoding
};

inline const char* to_string(pool_kind k) noexcept {
  switch (k) {
    case pool_kind::identity: return "identity";
    case pool_kind::mean: return "mean";
    case pool_kind::max: return "max";
    case pool_kind::weights: return "weights";
    case pool_kind::slot_gate: return "slot_gate";
    case pool_kind::channel_gate: return "channel_gate";
    case pool_kind::two_stream: return "two_stream";
    case pool_kind::mlp: return "mlp";
  }
  return "?";
}
inline void parse(std::string_view s, pool_kind& out) {
  for (pool_kind k : {pool_kind::identity, pool_kind::mean, pool_kind::max, pool_kind::weights, pool_kind::slot_gate,
                      pool_kind::channel_gate, pool_kind::two_stream, pool_kind::mlp})
    if (s == to_string(k)) {
      out = k;
      return;
    }
  fail("pool", std::string(s), "must be identity, mean, max, weights, slot_gate, channel_gate, two_stream or mlp");
}

/// Position given to a compressed entry for RoPE.
enum class rope_anchor { none, start, end, centre };

inline const char* to_string(rope_anchor a) noexcept {
  switch (a) {
    case rope_anchor::none: return "none";
    case rope_anchor::start: return "start";
    case rope_anchor::end: return "end";
    case rope_anchor::centre: return "centre";
  }
  return "?";
}
inline void parse(std::string_view s, rope_anchor& out) {
  if (s == "none") out = rope_anchor::none;
  else if (s == "start") out = rope_anchor::start;
  else if (s == "end") out = rope_anchor::end;
  else if (s == "centre" || s == "center") out = rope_anchor::centre;
  else fail("rope.anchor", std::string(s), "must be none, start, end or centre");
}

/// YaRN scaling of RoPE frequencies (Peng et al. 2023, "YaRN: Efficient Context Window
/// Extension of Large Language Models", the NTK-by-parts interpolation as published and as the
/// Hugging Face rope utilities compute it). With R rotated channels, base frequencies
/// f_k = θ^(−2k/R) and d(r) = R · ln(L / (2π r)) / (2 ln θ) (the pair index that turns r times
/// over the original length L): low = max(⌊d(β_fast)⌋, 0), high = min(⌈d(β_slow)⌉, R − 1),
/// ramp_k = clamp((k − low) / (high − low), 0, 1) (high − low = 0 counts as 0.001), and
/// f'_k = f_k · (1 − ramp_k) + (f_k / factor) · ramp_k: fast pairs keep their frequency, slow
/// pairs are interpolated by the factor. The attention factor (0.1 ln factor + 1) is not applied:
/// DeepSeek-V4 fixes it at 1. factor = 1 means no scaling.
struct yarn_config {
  double factor = 1.0;                 ///< s ≥ 1 (1 = off)
  double original_max_position = 0.0;  ///< L: the pre-extension context (V4: 65536)
  double beta_fast = 32.0;             ///< β_fast
  double beta_slow = 1.0;              ///< β_slow
  [[nodiscard]] bool enabled() const noexcept { return factor != 1.0; }
  void validate() const {
    require(std::isfinite(factor) && factor >= 1.0, "rope.yarn.factor", factor, "must be finite and >= 1 (1 = off)");
    if (!enabled()) return;
    require(std::isfinite(original_max_position) && original_max_position >= 1.0, "rope.yarn.original_max_position",
            original_max_position, "must be finite and >= 1 when YaRN is on");
    require(std::isfinite(beta_slow) && beta_slow > 0.0, "rope.yarn.beta_slow", beta_slow, "must be finite and > 0");
    require(std::isfinite(beta_fast) && beta_fast > beta_slow, "rope.yarn.beta_fast", beta_fast,
            "must be finite and > beta_slow");
  }
  template <class V>
  void visit_fields(V&& v) {
    v("factor", factor);
    v("original_max_position", original_max_position);
    v("beta_fast", beta_fast);
    v("beta_slow", beta_slow);
  }
  friend bool operator==(const yarn_config& a, const yarn_config& b) { return fields::equal(a, b); }
};

/// RoPE applied to compressed entries (and, in attention models, to raw keys and queries).
/// Inverse frequencies: `inv_freq` when given (R/2 values, as a checkpoint or config states
/// them), else θ^(−2k/R), YaRN-scaled when `yarn` is on (compress/position.hpp computes them).
struct rope_config {
  rope_anchor anchor = rope_anchor::none;  ///< none = NoPE
  double theta = 10000.0;                  ///< base θ
  index_t rope_dim = 0;                    ///< rotated channels (the last rope_dim); 0 = all
  std::vector<double> inv_freq{};          ///< explicit inverse frequencies (empty: from θ and yarn)
  yarn_config yarn{};                      ///< YaRN scaling of the θ frequencies (factor 1: none)
  void validate(index_t dim = -1) const {
    require(std::isfinite(theta) && theta > 1.0, "rope.theta", theta, "must be finite and > 1");
    require(rope_dim >= 0 && rope_dim % 2 == 0, "rope.rope_dim", rope_dim, "must be even and >= 0");
    if (dim >= 0) require(rope_dim <= dim, "rope.rope_dim", rope_dim, "must be <= the channel count");
    yarn.validate();
    require(inv_freq.empty() || !yarn.enabled(), "rope.inv_freq", "(given)",
            "explicit inverse frequencies exclude YaRN scaling (give one or the other)");
    for (std::size_t k = 0; k < inv_freq.size(); ++k)
      if (!(std::isfinite(inv_freq[k]) && inv_freq[k] >= 0.0))
        fail("rope.inv_freq[" + std::to_string(k) + "]", inv_freq[k], "must be finite and >= 0");
    if (!inv_freq.empty() && rope_dim > 0)
      require(static_cast<index_t>(inv_freq.size()) * 2 == rope_dim, "rope.inv_freq.size()", inv_freq.size(),
              "must be rope_dim / 2 = " + std::to_string(rope_dim / 2));
  }
  template <class V>
  void visit_fields(V&& v) {
    v("anchor", anchor);
    v("theta", theta);
    v("rope_dim", rope_dim);
    v("inv_freq", inv_freq, fields::omit_default);
    v("yarn", yarn, fields::omit_default);
  }
  friend std::ostream& operator<<(std::ostream& os, const rope_config& r) { return fields::print(os, r, "rope_config"); }
};

/// One chunked compression operator.
struct operator_spec {
  chunk_grid grid{};
  pool_kind pool = pool_kind::mean;
  std::vector<double> slot_weights{}; ///< pool_kind::weights: length W, finite, ≥ 0, not all 0
  std::vector<double> slot_bias{};   ///< slot_gate: b ∈ R^W (empty = all zero)
  double content_std = 0.0;          ///< τ ≥ 0: std of random content logits z_t (0 = none)
  bool rmsnorm = false;              ///< RMSNorm the pooled entry (no weight at spec level)
  double rms_eps = 1e-6;
  rope_config rope{};
  index_t heads = 1;                 ///< compression heads (each may shift its grid)
  std::vector<index_t> head_offsets{}; ///< per-head origin offset added to grid.origin (empty = 0)
  std::string name{};                ///< preset name, for logs
  bool separate_kv = false;          ///< keys and values pooled by separate compressors (own parameters)

  void validate() const {
    grid.validate();
    const index_t W = grid.window;
    require(heads >= 1 && heads <= limits::max_heads, "heads", heads, "must be in [1, 4096]");
    require(head_offsets.empty() || static_cast<index_t>(head_offsets.size()) == heads,
            "head_offsets.size()", head_offsets.size(), "must be 0 or equal to heads");
    for (std::size_t h = 0; h < head_offsets.size(); ++h) {
      // each head's grid must itself be valid: |origin + offset| < 2^40
      const index_t o = head_offsets[h];
      if (!(o > -chunk_grid::max_extent && o < chunk_grid::max_extent && chunk_grid::in_extent(grid.origin + o)))
        fail("head_offsets[" + std::to_string(h) + "]", o, "grid.origin + offset must be within ±2^40");
    }
    require(content_std >= 0.0 && std::isfinite(content_std), "content_std", content_std,
            "must be finite and >= 0");
    require(rms_eps > 0.0 && std::isfinite(rms_eps), "rms_eps", rms_eps, "must be finite and > 0");
    rope.validate();
    switch (pool) {
      case pool_kind::identity:
        require(W == 1 && grid.stride == 1, "window", W, "identity pooling needs window = stride = 1");
        break;
      case pool_kind::weights: {
        require(static_cast<index_t>(slot_weights.size()) == W, "slot_weights.size()",
                slot_weights.size(), "must equal window (" + std::to_string(W) + ")");
        require_finite(slot_weights, "slot_weights");
        double s = 0;
        for (double w : slot_weights) {
          require(w >= 0.0, "slot_weights", w, "weights must be >= 0");
          s += w;
        }
        require(s > 0.0, "slot_weights", s, "must not all be zero");
        // a sum that overflows to infinity would renormalise every weight to 0 (an all-zero pool)
        require(std::isfinite(s), "sum(slot_weights)", s, "must be finite (the weights are renormalised by it)");
        break;
      }
      case pool_kind::slot_gate:
        require(slot_bias.empty() || static_cast<index_t>(slot_bias.size()) == W, "slot_bias.size()",
                slot_bias.size(), "must be 0 or equal window (" + std::to_string(W) + ")");
        require_finite(slot_bias, "slot_bias");
        break;
      case pool_kind::two_stream:
        require(W == 2 * grid.stride, "window", W, "two_stream pooling needs window = 2 * stride");
        require(grid.convention == grid_convention::v4, "grid.convention", to_string(grid.convention),
                "two_stream pooling needs the v4 convention");
        break;
      default:
        break;
    }
    if (pool != pool_kind::slot_gate) {
      require(content_std == 0.0 || pool == pool_kind::channel_gate || pool == pool_kind::two_stream,
              "content_std", content_std, "content logits apply only to gated pools");
    }
  }

  /// Grid of compression head h (origin shifted by head_offsets[h]).
  /// Throws kvphase::error unless 0 <= h < heads (and, with offsets, h < head_offsets.size()).
  [[nodiscard]] chunk_grid head_grid(index_t h) const {
    // messages are built only on failure: head_grid runs on every compress call
    if (h < 0 || h >= heads) fail("head", h, "must be in [0, heads = " + std::to_string(heads) + ")");
    if (!head_offsets.empty() && h >= static_cast<index_t>(head_offsets.size()))
      fail("head", h, "must be < head_offsets.size() = " + std::to_string(head_offsets.size()));
    chunk_grid g = grid;
    if (!head_offsets.empty()) g.origin += head_offsets[static_cast<std::size_t>(h)];
    return g;
  }

  /// Slot weights of a content-independent linear pool for an entry with `masked` leading slots
  /// masked (renormalised over the unmasked ones). Length W; masked slots get 0.
  /// Throws kvphase::error unless the pool is identity, mean, weights or slot_gate (the slot
  /// gate's content logits, if any, are not part of these weights), the weight or bias vector
  /// has W entries, and 0 <= masked < W (at least one slot must remain).
  [[nodiscard]] std::vector<double> linear_slot_weights(index_t masked = 0) const {
    const index_t W = grid.window;
    require(pool == pool_kind::identity || pool == pool_kind::mean || pool == pool_kind::weights ||
                pool == pool_kind::slot_gate,
            "pool", to_string(pool), "has no fixed slot weights (identity, mean, weights or slot_gate only)");
    require(W >= 1 && W <= limits::max_chunk_window, "window", W, "must be in [1, 2^20]");
    // messages are built only on failure: this runs once per entry in the theory
    if (masked < 0 || masked >= W)
      fail("masked", masked, "must be in [0, window = " + std::to_string(W) + "): at least one slot must be unmasked");
    if (pool == pool_kind::weights && static_cast<index_t>(slot_weights.size()) != W)
      fail("slot_weights.size()", slot_weights.size(), "must equal window (" + std::to_string(W) + ")");
    if (pool == pool_kind::slot_gate && !slot_bias.empty() && static_cast<index_t>(slot_bias.size()) != W)
      fail("slot_bias.size()", slot_bias.size(), "must be 0 or equal window (" + std::to_string(W) + ")");
    std::vector<double> w(static_cast<std::size_t>(W), 0.0);
    double s = 0.0;
    for (index_t r = masked; r < W; ++r) {
      double v = 1.0;
      if (pool == pool_kind::weights) v = slot_weights[static_cast<std::size_t>(r)];
      if (pool == pool_kind::slot_gate && !slot_bias.empty()) v = std::exp(slot_bias[static_cast<std::size_t>(r)]);
      w[static_cast<std::size_t>(r)] = v;
      s += v;
    }
    if (pool == pool_kind::slot_gate && !slot_bias.empty()) {
      // softmax with max-shift for range safety
      double m = -INFINITY;
      for (index_t r = masked; r < W; ++r) m = std::max(m, slot_bias[static_cast<std::size_t>(r)]);
      s = 0.0;
      for (index_t r = masked; r < W; ++r) {
        w[static_cast<std::size_t>(r)] = std::exp(slot_bias[static_cast<std::size_t>(r)] - m);
        s += w[static_cast<std::size_t>(r)];
      }
    }
    for (auto& v : w) v /= s;
    return w;
  }

  /// The field list (core/fields.hpp): printing, JSON, equality and the stream key.
  template <class V>
  void visit_fields(V&& v) {
    v("name", name);
    v("grid", grid);
    v("pool", pool);
    v("slot_weights", slot_weights);
    v("slot_bias", slot_bias);
    v("content_std", content_std);
    v("rmsnorm", rmsnorm);
    v("rms_eps", rms_eps);
    v("rope", rope);
    v("heads", heads);
    v("head_offsets", head_offsets);
    v("separate_kv", separate_kv);
  }
  friend std::ostream& operator<<(std::ostream& os, const operator_spec& s) {
    return fields::print(os, s, "operator_spec");
  }
  friend bool operator==(const operator_spec& a, const operator_spec& b) { return fields::equal(a, b); }
};

/// Full attention as a degenerate grid: every token is its own entry. The one full-attention
/// spec: sweeps, theory and programs use it for the control.
inline operator_spec full() {
  return operator_spec{.grid = {.window = 1, .stride = 1}, .pool = pool_kind::identity, .name = "full"};
}

}  // namespace kvphase::compress
