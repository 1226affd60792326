#pragma once
/// \file attention/multihead.hpp
/// Multi-head attention over the compressed-attention core: H query heads over Hkv KV heads
/// (MQA: Hkv = 1; GQA: 1 < Hkv < H; MHA: Hkv = H). Query head h reads KV head h / (H / Hkv).
/// Per-head sink logits and per-head NSA branch gates; RoPE on queries and raw keys at their
/// positions (compress/position.hpp), or NoPE.
///
/// Shapes (columns grouped by head, head h = columns [h·dh, (h+1)·dh)):
///   Q  [M × H·dh]      queries at positions pos
///   K  [N × Hkv·dh]    raw keys (tokens 0 … N−1);    V  [N × Hkv·dv] raw values
///   Kc [E × Hkv·dh]    compressed keys of `grid`;    Vc [E × Hkv·dv] compressed values
///   O  [M × H·dv]      outputs
/// For K = V (DeepSeek-V4 MQA) pass the same matrix for K and V (and for Kc and Vc), dv = dh.

#include <cmath>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "kvphase/attention/compressed.hpp"
#include "kvphase/attention/full.hpp"
#include "kvphase/attention/select.hpp"
#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/position.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::attention {

/// Head layout, sinks, gates and position encoding of a multi-head attention.
struct multihead_config {
  index_t heads = 4;             ///< H query heads
  index_t kv_heads = 1;          ///< Hkv KV heads; H must be a multiple
  index_t head_dim = 16;         ///< dh: query/key channels per head
  index_t value_dim = 0;         ///< dv: value channels per head (0 = head_dim)
  compress::rope_config rope{};  ///< anchor none = NoPE; else queries and raw keys are rotated at their positions
  std::vector<double> sinks{};   ///< per-head sink logits (empty = no sink; −∞ allowed per head)
  std::vector<double> gates{};   ///< per-head constant NSA gates, [H × 3] (cmp, slc, win); empty = all 1

  [[nodiscard]] index_t dv() const noexcept { return value_dim > 0 ? value_dim : head_dim; }
  [[nodiscard]] index_t group() const noexcept { return heads / kv_heads; }
  [[nodiscard]] index_t kv_head_of(index_t h) const noexcept { return h / group(); }
  [[nodiscard]] bool uses_rope() const noexcept { return rope.anchor != compress::rope_anchor::none; }

  void validate() const {
    require(heads >= 1 && heads <= limits::max_heads, "heads", heads, "must be in [1, 4096]");
    require(kv_heads >= 1 && kv_heads <= heads && heads % kv_heads == 0, "kv_heads", kv_heads,
            "must divide heads (" + std::to_string(heads) + ")");
    require(head_dim >= 1 && head_dim <= limits::max_dim, "head_dim", head_dim, "must be in [1, 65536]");
    require(value_dim >= 0 && value_dim <= limits::max_dim, "value_dim", value_dim,
            "must be in [0, 65536] (0 = head_dim)");
    rope.validate(head_dim);
    require(sinks.empty() || static_cast<index_t>(sinks.size()) == heads, "sinks.size()", sinks.size(),
            "must be 0 or heads (" + std::to_string(heads) + ")");
    for (std::size_t h = 0; h < sinks.size(); ++h)
      require(!std::isnan(sinks[h]) && sinks[h] < std::numeric_limits<double>::infinity(),
              "sinks[" + std::to_string(h) + "]", sinks[h], "must be finite or -infinity");
    require(gates.empty() || static_cast<index_t>(gates.size()) == 3 * heads, "gates.size()", gates.size(),
            "must be 0 or 3 * heads (" + std::to_string(3 * heads) + ")");
    require_finite(gates, "gates");
  }
  friend std::ostream& operator<<(std::ostream& os, const multihead_config& c) {
    os << "multihead_config{heads=" << c.heads << ", kv_heads=" << c.kv_heads << ", head_dim=" << c.head_dim
       << ", value_dim=" << c.dv() << ", rope=" << compress::to_string(c.rope.anchor) << "/theta=" << c.rope.theta
       << "/dim=" << c.rope.rope_dim << ", sinks=" << c.sinks.size() << ", gates=" << c.gates.size() << "}";
    return os;
  }
};

/// Rotates every head slice of X ([rows × heads·head_dim]) in place: row i at position pos[i]
/// (pos empty: row i at position first + i). Uses the adjacent-pair RoPE of compress/position.hpp
/// on the last rope_dim channels of each head. No-op for anchor none (NoPE).
template <class Real>
void rope_heads(matrix_t<Real>& X, index_t heads, index_t head_dim, const compress::rope_config& rope,
                std::span<const index_t> pos = {}, index_t first = 0) {
  if (rope.anchor == compress::rope_anchor::none) return;
  require(heads >= 1 && X.cols() == heads * head_dim, "X.cols()", X.cols(),
          "must equal heads * head_dim (" + std::to_string(heads * head_dim) + ")");
  require(pos.empty() || static_cast<index_t>(pos.size()) == X.rows(), "pos.size()", pos.size(), "must equal X.rows()");
  const compress::rope_frequencies f(rope, head_dim);
  for (index_t i = 0; i < X.rows(); ++i) {
    const double p = pos.empty() ? static_cast<double>(first + i) : static_cast<double>(pos[static_cast<std::size_t>(i)]);
    for (index_t h = 0; h < heads; ++h) compress::apply_rope(X.row(i).data() + h * head_dim, p, f);
  }
}

/// Multi-head compressed attention: head h runs compressed_attention on its query slice with KV
/// head kv_head_of(h), the per-head sink (cfg.sinks) and gates (cfg.gates, or per-query gates
/// [M × 3H] in `gates` when given). `sel`: empty, one selection shared by all heads, or one per
/// KV head (the heads of a GQA group share what they attend, as in NSA). Inputs are used as given:
/// apply rope_heads to Q and K first when the model uses RoPE.
template <class Real, class Arch = simd::default_arch>
void multihead_attention(const cref<Real>& Q, std::span<const index_t> pos, const cref<Real>& Kc, const cref<Real>& Vc,
                         const compress::chunk_grid& grid, const cref<Real>& K, const cref<Real>& V,
                         const multihead_config& cfg, const compressed_params& p, mref<Real> O,
                         std::span<const compressed_selection<Real>> sel = {}, std::span<const Real> gates = {}) {
  cfg.validate();
  p.validate();
  const index_t H = cfg.heads, Hkv = cfg.kv_heads, dh = cfg.head_dim, dv = cfg.dv(), M = Q.rows();
  require(Q.cols() == H * dh, "Q.cols()", Q.cols(), "must equal heads * head_dim (" + std::to_string(H * dh) + ")");
  require(K.cols() == Hkv * dh, "K.cols()", K.cols(), "must equal kv_heads * head_dim (" + std::to_string(Hkv * dh) + ")");
  require(V.cols() == Hkv * dv, "V.cols()", V.cols(), "must equal kv_heads * value_dim (" + std::to_string(Hkv * dv) + ")");
  require(Kc.cols() == Hkv * dh, "Kc.cols()", Kc.cols(), "must equal kv_heads * head_dim (" + std::to_string(Hkv * dh) + ")");
  require(Vc.cols() == Hkv * dv, "Vc.cols()", Vc.cols(), "must equal kv_heads * value_dim (" + std::to_string(Hkv * dv) + ")");
  require(O.rows() == M && O.cols() == H * dv, "O.cols()", O.cols(),
          "O must be [Q.rows() × heads·value_dim] = [" + std::to_string(M) + " × " + std::to_string(H * dv) + "]");
  require(sel.empty() || static_cast<index_t>(sel.size()) == 1 || static_cast<index_t>(sel.size()) == Hkv,
          "selection.size()", sel.size(), "must be 0, 1 or kv_heads (" + std::to_string(Hkv) + ")");
  require(gates.empty() || static_cast<index_t>(gates.size()) == 3 * H * M, "gates.size()", gates.size(),
          "must be 0 or Q.rows() * 3 * heads");
  std::vector<Real> g;
  for (index_t h = 0; h < H; ++h) {
    const index_t kh = cfg.kv_head_of(h);
    compressed_params ph = p;
    if (!cfg.sinks.empty()) ph.attn.sink = cfg.sinks[static_cast<std::size_t>(h)];
    if (!cfg.gates.empty()) {
      ph.gate_cmp = cfg.gates[static_cast<std::size_t>(3 * h)];
      ph.gate_slc = cfg.gates[static_cast<std::size_t>(3 * h + 1)];
      ph.gate_win = cfg.gates[static_cast<std::size_t>(3 * h + 2)];
    }
    compressed_selection<Real> s;
    if (!sel.empty()) s = sel[sel.size() == 1 ? 0 : static_cast<std::size_t>(kh)];
    if (!gates.empty()) {
      g.resize(static_cast<std::size_t>(3 * M));
      for (index_t i = 0; i < M; ++i)
        for (index_t c = 0; c < 3; ++c)
          g[static_cast<std::size_t>(3 * i + c)] = gates[static_cast<std::size_t>(i * 3 * H + 3 * h + c)];
      s.gates = g;
    }
    compressed_attention<Real, Arch>(Q.middleCols(h * dh, dh), pos, Kc.middleCols(kh * dh, dh),
                                     Vc.middleCols(kh * dv, dv), grid, K.middleCols(kh * dh, dh),
                                     V.middleCols(kh * dv, dv), ph, O.middleCols(h * dv, dv), s);
  }
}

/// Multi-head full causal attention (the control): head h attends its KV head's keys 0 … pos[i].
template <class Real, class Arch = simd::default_arch>
void multihead_full_attention(const cref<Real>& Q, std::span<const index_t> pos, const cref<Real>& K,
                              const cref<Real>& V, const multihead_config& cfg, const attention_params& p,
                              mref<Real> O) {
  cfg.validate();
  p.validate();
  const index_t H = cfg.heads, Hkv = cfg.kv_heads, dh = cfg.head_dim, dv = cfg.dv();
  require(Q.cols() == H * dh, "Q.cols()", Q.cols(), "must equal heads * head_dim (" + std::to_string(H * dh) + ")");
  require(K.cols() == Hkv * dh, "K.cols()", K.cols(), "must equal kv_heads * head_dim (" + std::to_string(Hkv * dh) + ")");
  require(V.cols() == Hkv * dv, "V.cols()", V.cols(), "must equal kv_heads * value_dim (" + std::to_string(Hkv * dv) + ")");
  require(O.rows() == Q.rows() && O.cols() == H * dv, "O.cols()", O.cols(),
          "O must be [Q.rows() × heads·value_dim]");
  for (index_t h = 0; h < H; ++h) {
    const index_t kh = cfg.kv_head_of(h);
    attention_params ph = p;
    if (!cfg.sinks.empty()) ph.sink = cfg.sinks[static_cast<std::size_t>(h)];
    full_attention<Real, Arch>(Q.middleCols(h * dh, dh), K.middleCols(kh * dh, dh), V.middleCols(kh * dv, dv), pos,
                               ph, O.middleCols(h * dv, dv));
  }
}

}  // namespace kvphase::attention
