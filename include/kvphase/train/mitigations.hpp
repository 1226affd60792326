#pragma once
/// \file train/mitigations.hpp
/// Design changes measured per phase at matched cache size. Each variant is the base model with
/// one change, trained and evaluated exactly like the base (same data seed, steps, contexts):
///
///  - plain:          the base operator (W = S, learned slot gates)
///  - overlap:        W = 2S at the same stride (same number of entries per head)
///  - shifted_heads:  head h's grid origin offset by ⌊h·S/H⌋
///  - random_offset:  the grid origin is drawn uniformly in [0, S) per training example
///                    (evaluated at origin 0)
///  - blur:           a fixed low-pass kernel [1/4, 1/2, 1/4] on the pooled stream before pooling
///  - gate_entropy:   the penalty λ Σ (log W − H(softmax b)) added to the loss
///  - content_gate:   a learned content gate u·x_t added to the slot bias
///  - full_attention: the control, every token raw (cache n instead of n/S + w entries)
///
/// The cache of every compressed variant holds ⌊(n − S + 1 − φ0)/S⌋-ish complete entries per
/// head and layer plus the raw window, identical across variants up to the one entry a shifted
/// origin can add or remove at the sequence start.

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/train/model.hpp"
#include "kvphase/train/trainer.hpp"

namespace kvphase::train {

enum class mitigation { plain, overlap, shifted_heads, random_offset, blur, gate_entropy, content_gate, full_attention };

inline const char* to_string(mitigation m) noexcept {
  switch (m) {
    case mitigation::plain: return "plain";
    case mitigation::overlap: return "overlap";
    case mitigation::shifted_heads: return "shifted_heads";
    case mitigation::random_offset: return "random_offset";
    case mitigation::blur: return "blur";
    case mitigation::gate_entropy: return "gate_entropy";
    case mitigation::content_gate: return "content_gate";
    case mitigation::full_attention: return "full_attention";
  }
  return "?";
}

inline constexpr mitigation all_mitigations[] = {mitigation::plain,        mitigation::overlap,
                                                 mitigation::shifted_heads, mitigation::random_offset,
                                                 mitigation::blur,         mitigation::gate_entropy,
                                                 mitigation::content_gate, mitigation::full_attention};

/// Parses a name printed by to_string(mitigation); throws kvphase::error otherwise.
inline mitigation parse_mitigation(std::string_view s) {
  for (mitigation m : all_mitigations)
    if (s == to_string(m)) return m;
  fail("mitigation", std::string(s),
       "must be one of plain, overlap, shifted_heads, random_offset, blur, gate_entropy, content_gate, "
       "full_attention");
}

/// Strength settings of the mitigations.
struct mitigation_settings {
  double entropy_reg = 0.02;                        ///< λ of gate_entropy
  std::vector<double> blur_kernel = {0.25, 0.5, 0.25};
  void validate() const {
    require(std::isfinite(entropy_reg) && entropy_reg >= 0.0, "entropy_reg", entropy_reg, "must be finite and >= 0");
    require(!blur_kernel.empty() && blur_kernel.size() % 2 == 1, "blur_kernel.size()", blur_kernel.size(),
            "must be odd");
  }
};

/// A model and schedule ready to train.
struct variant {
  mitigation kind = mitigation::plain;
  model_config model;
  train_config train;
  [[nodiscard]] std::string name() const { return to_string(kind); }
};

/// The base with mitigation `m` applied. The base must be a compressed model with W = S and no
/// per-head offsets (each mitigation then changes exactly one thing).
inline variant make_variant(mitigation m, const model_config& base, const train_config& base_train,
                            const mitigation_settings& ms = {}) {
  require(base.compressed(), "base.cache", to_string(base.cache), "the base of the mitigations must be compressed");
  require(base.spec.grid.window == base.spec.grid.stride, "base.spec.grid.window", base.spec.grid.window,
          "the base of the mitigations must have window = stride");
  require(base.spec.head_offsets.empty(), "base.spec.head_offsets.size()", base.spec.head_offsets.size(),
          "the base of the mitigations must have no head offsets");
  ms.validate();
  variant v{m, base, base_train};
  const index_t S = base.spec.grid.stride, H = base.heads();
  switch (m) {
    case mitigation::plain: break;
    case mitigation::overlap: v.model.spec.grid.window = 2 * S; break;
    case mitigation::shifted_heads:
      v.model.spec.head_offsets.resize(static_cast<std::size_t>(H));
      for (index_t h = 0; h < H; ++h) v.model.spec.head_offsets[static_cast<std::size_t>(h)] = (h * S) / H;
      break;
    case mitigation::random_offset: v.train.random_origin = true; break;
    case mitigation::blur: v.model.blur = ms.blur_kernel; break;
    case mitigation::gate_entropy: v.train.entropy_reg = ms.entropy_reg; break;
    case mitigation::content_gate: v.model.content_gate = true; break;
    case mitigation::full_attention: v.model.cache = cache_kind::full; break;
  }
  return v;
}

}  // namespace kvphase::train
