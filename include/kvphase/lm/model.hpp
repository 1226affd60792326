#pragma once
/// \file lm/model.hpp
/// A small decoder-only transformer language model in libtorch whose compressed attention layers
/// are the library's compressors (compress/pool.hpp) written as differentiable tensor code.
/// Optional component: only translation units that link libtorch (examples/train_lm.cpp,
/// tests/torch/) include this header; the rest of kvphase stays header-only and torch-free.
///
/// Model: token embedding → L × [x += attn(rmsnorm(x)); x += mlp(rmsnorm(x))] → rmsnorm → logits.
/// MLP: SiLU-gated (down(silu(gate(x)) ⊙ up(x))). Attention per layer from the schedule:
///  - full:     causal attention over every raw token.
///  - csa:      DeepSeek-V4 CSA compressor (pool two_stream, W = 2S): learned channel-wise gates
///              with a per-slot bias, RMSNorm with weight, RoPE at the entry's block start.
///  - gated:    channel-wise gated pool (pool channel_gate) on any V4 grid W ≥ S (W = S: HCA).
///  - uniform:  mean pooling of the projected tokens on the CSA grid (W = 2S), RMSNorm, RoPE.
/// A compressed layer's query at t sees the complete entries (last source ≤ t), the raw window
/// (the last raw_window tokens, t included) and, when `sink` is set, a learned per-head sink
/// logit with a zero value. One shared key/value row per position (keys are values, as in V4),
/// H query heads of width c. RoPE rotates adjacent pairs of the last rope_dim channels
/// (compress/position.hpp); queries at t, raw keys at their position, entries at their anchor;
/// the attention output is rotated back by −t. NoPE (rope = false): no rotation anywhere.
/// Lightning indexer (`top_k` > 0, any compressed layer; DeepSeek-V4 CSA, as attention::csa_select):
/// index scores I(t, e) = Σ_h w_h(t)·ReLU(⟨q_h(t), K_e⟩/√dI) over the entries visible at t, with
/// q = x·W_q (H_I heads of d_I), w = x·W_w/√H_I and index keys K from the layer's own compressor
/// kind on the same grid with d_I channels; the query sees its top_k entries (ties: the lower
/// entry) and the raw window. Selection has no gradient: the indexer is trained by
/// attention_impl::indexer_kl, the KL divergence from the layer's dense attention over the
/// visible entries (summed over heads, detached) to softmax(I), on the detached layer input.
///  - nsa:      NSA's three branches, each its own softmax (with the sink): the compressed entries
///              (channel-gated pool on the layer's grid, RMSNorm, RoPE), the raw tokens of the
///              selected blocks, and the raw window; mixed per head by sigmoid gates
///              o = g_cmp·o_cmp + g_slc·o_slc + g_win·o_win (attention::compressed_attention, gated
///              mode). Blocks of select_block tokens are ranked by the compressed branch's attention
///              probabilities (no sink, summed over heads) mapped by token overlap (attention::
///              nsa_block_importance); the first select_initial and the select_local most recent are
///              forced, the rest of select_top_n by importance (ties: lower block), as attention::
///              nsa_select. No gradient flows through the selection.
/// Mitigations at matched cache memory (one entry per S tokens and layer whatever the option):
/// grid origins (`origin`, per layer with `shift_layers`, per sequence through the forward's
/// `offsets`), per-head grids (`shift_heads`: query head h reads its own compressor on the grid
/// (H·W, H·S) at origin φ0 + h·S, T/(H·S) entries per head), a causal low-pass of the
/// compressor's input (`blur`, detail::causal_blur) and the gate entropy of the last forward
/// (compressor_impl::track_entropy) for a loss term.
///
/// Parameter names follow the Hugging Face deepseek_v4 layout read by compress/checkpoint.hpp
/// (model.layers.L.self_attn.compressor.{kv_proj.weight, gate_proj.weight, position_bias,
/// kv_norm.weight}), so a saved model is read like a real checkpoint (lm/checkpoint.hpp).

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::lm {

/// Attention kind of one layer.
enum class layer_kind { full, csa, gated, uniform, nsa };

inline const char* to_string(layer_kind k) noexcept {
  switch (k) {
    case layer_kind::full: return "full";
    case layer_kind::csa: return "csa";
    case layer_kind::gated: return "gated";
    case layer_kind::uniform: return "uniform";
    case layer_kind::nsa: return "nsa";
  }
  return "?";
}
inline void parse(std::string_view s, layer_kind& out) {
  for (layer_kind k : {layer_kind::full, layer_kind::csa, layer_kind::gated, layer_kind::uniform, layer_kind::nsa})
    if (s == to_string(k)) {
      out = k;
      return;
    }
  fail("layer", std::string(s), "must be full, csa, gated, uniform or nsa");
}

/// Architecture of the model (the field list keys outputs and checkpoints).
struct model_config {
  index_t vocab = 64;
  index_t d_model = 64;
  index_t heads = 2;          ///< query heads
  index_t head_dim = 32;      ///< c: width of a query head and of the shared key/value row
  index_t mlp_hidden = 128;
  std::string schedule = "csa,csa";  ///< one layer_kind per layer, comma-separated
  index_t window = 8;         ///< W of compressed layers (csa and uniform: 2S)
  index_t stride = 4;         ///< S
  index_t raw_window = 4;     ///< raw tokens a compressed layer's query sees (t included)
  bool sink = true;           ///< learned attention sink per head
  bool rope = true;           ///< false: NoPE
  index_t rope_dim = 16;      ///< rotated channels (the last rope_dim of a row)
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  index_t origin = 0;         ///< φ0 of the compressor grids, in [0, stride) (0: the V4 grid)
  bool shift_layers = false;  ///< layer l's grid origin is (origin + ⌊l·S / L⌋) mod S (shifted grids)
  bool blur = false;          ///< low-pass the compressor's input along tokens (detail::causal_blur)
  /// Per-head shifted grids at the same cache memory: query head h of a compressed layer reads
  /// its own compressor on the grid (H·W, H·S) at origin layer_origin(l) + h·S, so the heads'
  /// grids interleave and the layer still caches T/S entries (T/(H·S) per head).
  bool shift_heads = false;
  /// Lightning indexer of every compressed layer: 0 off; > 0 entries kept per query.
  index_t top_k = 0;
  index_t indexer_heads = 2;  ///< H_I
  index_t indexer_dim = 16;   ///< d_I (≥ rope_dim with RoPE: the index keys are rotated too)
  /// NSA layers: raw-token selection blocks of select_block tokens, select_top_n blocks per
  /// query of which the first select_initial and the select_local most recent are forced.
  index_t select_block = 8;
  index_t select_top_n = 4;
  index_t select_initial = 1;
  index_t select_local = 2;

  /// Grid origin of layer l's compressor, in [0, stride).
  [[nodiscard]] index_t layer_origin(index_t l) const {
    const index_t L = static_cast<index_t>(layers().size());
    return (origin + (shift_layers ? l * stride / L : 0)) % stride;
  }

  [[nodiscard]] std::vector<layer_kind> layers() const {
    std::vector<layer_kind> out;
    std::size_t a = 0;
    while (a <= schedule.size()) {
      const std::size_t b = std::min(schedule.find(',', a), schedule.size());
      layer_kind k{};
      parse(std::string_view(schedule).substr(a, b - a), k);
      out.push_back(k);
      a = b + 1;
    }
    return out;
  }
  /// The compress:: operator of a layer of kind k at depth `layer` (its grid origin); with
  /// shift_heads, of query head `head`'s compressor (grid (H·W, H·S), origin layer_origin + head·S).
  /// The blur is not part of it: compress:: pools the blurred rows (detail::causal_blur).
  [[nodiscard]] compress::operator_spec layer_spec(layer_kind k, index_t layer = 0, index_t head = 0) const {
    compress::operator_spec s;
    const index_t h = shift_heads ? heads : 1;
    s.grid = {.window = h * window, .stride = h * stride, .origin = layer_origin(layer) + (shift_heads ? head * stride : 0)};
    s.pool = k == layer_kind::csa ? compress::pool_kind::two_stream
             : k == layer_kind::gated || k == layer_kind::nsa ? compress::pool_kind::channel_gate
                                      : compress::pool_kind::mean;
    s.rmsnorm = true;
    s.rms_eps = rms_eps;
    if (rope) s.rope = {.anchor = compress::rope_anchor::start, .theta = rope_theta, .rope_dim = rope_dim};
    s.name = to_string(k);
    return s;
  }
  void validate() const {
    require(vocab >= 2 && vocab <= 1 << 20, "vocab", vocab, "must be in [2, 2^20]");
    require(d_model >= 1 && d_model <= 8192, "d_model", d_model, "must be in [1, 8192]");
    require(heads >= 1 && heads <= 256, "heads", heads, "must be in [1, 256]");
    require(head_dim >= 2 && head_dim <= 4096 && head_dim % 2 == 0, "head_dim", head_dim, "must be even, in [2, 4096]");
    require(mlp_hidden >= 1 && mlp_hidden <= 65536, "mlp_hidden", mlp_hidden, "must be in [1, 65536]");
    require(stride >= 1 && stride <= 4096, "stride", stride, "must be in [1, 4096]");
    require(window >= stride && window <= 4096, "window", window, "must be in [stride, 4096]");
    require(raw_window >= 1 && raw_window <= 1 << 20, "raw_window", raw_window, "must be in [1, 2^20]");
    require(!rope || (rope_dim >= 2 && rope_dim % 2 == 0 && rope_dim <= head_dim), "rope_dim", rope_dim,
            "must be even, in [2, head_dim] (rope on)");
    require(std::isfinite(rope_theta) && rope_theta > 1.0, "rope_theta", rope_theta, "must be finite and > 1");
    require(std::isfinite(rms_eps) && rms_eps > 0.0, "rms_eps", rms_eps, "must be finite and > 0");
    require(origin >= 0 && origin < stride, "origin", origin, "must be in [0, stride)");
    require(!shift_heads || heads >= 2, "shift_heads", shift_heads, "needs heads >= 2 (heads = " + std::to_string(heads) + ")");
    require(!shift_heads || heads * window <= 4096, "shift_heads", shift_heads,
            "needs heads * window <= 4096 (heads = " + std::to_string(heads) + ", window = " + std::to_string(window) + ")");
    require(top_k >= 0 && top_k <= 1 << 20, "top_k", top_k, "must be in [0, 2^20] (0: no indexer)");
    require(indexer_heads >= 1 && indexer_heads <= 256, "indexer_heads", indexer_heads, "must be in [1, 256]");
    require(indexer_dim >= 2 && indexer_dim <= 4096 && indexer_dim % 2 == 0, "indexer_dim", indexer_dim,
            "must be even, in [2, 4096]");
    require(top_k == 0 || !rope || rope_dim <= indexer_dim, "indexer_dim", indexer_dim,
            "must be >= rope_dim = " + std::to_string(rope_dim) + " (the index keys and queries are rotated)");
    require(top_k == 0 || !shift_heads, "top_k", top_k, "cannot be combined with shift_heads (one indexer per layer grid)");
    require(select_block >= 1 && select_block <= 1 << 20, "select_block", select_block, "must be in [1, 2^20]");
    require(select_initial >= 0 && select_local >= 0 && select_initial <= 1 << 20 && select_local <= 1 << 20,
            "select_local", select_local, "select_initial and select_local must be in [0, 2^20]");
    require(select_top_n >= 1 && select_top_n <= 1 << 20 && select_top_n >= select_initial + select_local, "select_top_n",
            select_top_n, "must be in [1, 2^20] and >= select_initial + select_local");
    const auto ls = layers();
    require(!ls.empty() && ls.size() <= 64, "schedule", schedule, "must name 1 to 64 layers");
    for (layer_kind k : ls)
      if (k == layer_kind::nsa) {
        require(top_k == 0, "top_k", top_k, "cannot be combined with nsa layers (they select raw blocks, not entries)");
        require(!shift_heads, "shift_heads", shift_heads, "cannot be combined with nsa layers");
      }
    for (layer_kind k : ls)
      if (k == layer_kind::csa || k == layer_kind::uniform)
        require(window == 2 * stride, "window", window,
                std::string(to_string(k)) + " layers need window = 2 * stride (use gated for another window)");
  }
  template <class V>
  void visit_fields(V&& v) {
    v("vocab", vocab);
    v("d_model", d_model);
    v("heads", heads);
    v("head_dim", head_dim);
    v("mlp_hidden", mlp_hidden);
    v("schedule", schedule);
    v("window", window);
    v("stride", stride);
    v("raw_window", raw_window);
    v("sink", sink);
    v("rope", rope);
    v("rope_dim", rope_dim);
    v("rope_theta", rope_theta);
    v("rms_eps", rms_eps);
    v("origin", origin);
    v("shift_layers", shift_layers);
    v("blur", blur);
    v("shift_heads", shift_heads);
    v("top_k", top_k);
    v("indexer_heads", indexer_heads);
    v("indexer_dim", indexer_dim);
    v("select_block", select_block);
    v("select_top_n", select_top_n);
    v("select_initial", select_initial);
    v("select_local", select_local);
  }
};

namespace detail {
/// RMSNorm over the last dimension with a weight.
inline torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

/// cos and sin tables [P, R/2] for positions `pos` (computed in double, rounded once to float,
/// as compress/position.hpp rounds a rotation once).
inline std::pair<torch::Tensor, torch::Tensor> rope_tables(const torch::Tensor& pos, index_t R, double theta) {
  auto k = torch::arange(R / 2, torch::kFloat64);
  auto inv = torch::pow(torch::full({}, theta, torch::kFloat64), -2.0 * k / static_cast<double>(R));
  auto ang = pos.to(torch::kFloat64).unsqueeze(-1) * inv;
  return {torch::cos(ang).to(torch::kFloat32), torch::sin(ang).to(torch::kFloat32)};
}

/// Rotates adjacent pairs of the last R channels of x [..., P, c] by the tables [P, R/2].
inline torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cs, const torch::Tensor& sn, index_t R) {
  const index_t c = x.size(-1);
  auto keep = x.narrow(-1, 0, c - R);
  auto rot = x.narrow(-1, c - R, R);
  auto shp = rot.sizes().vec();
  shp.back() = R / 2;
  shp.push_back(2);
  auto r = rot.reshape(shp);
  auto x0 = r.select(-1, 0), x1 = r.select(-1, 1);
  auto y = torch::stack({x0 * cs - x1 * sn, x0 * sn + x1 * cs}, -1).reshape(rot.sizes());
  return torch::cat({keep, y}, -1);
}

/// Causal low-pass [1, 2, 1]/4 along tokens (dimension 1) of x [B, T, D]:
/// y_t = (x_{t−2} + 2·x_{t−1} + x_t) / n_t with n_t the sum of the taps that exist (4; 3 at t = 1,
/// 1 at t = 0). y_t reads no token after t, so an entry complete at t stays causal; the filter's
/// centre is t − 1 (a delay of one token).
inline torch::Tensor causal_blur(const torch::Tensor& x) {
  const index_t B = x.size(0), T = x.size(1), D = x.size(2);
  auto xp = torch::cat({torch::zeros({B, 2, D}, x.options()), x}, 1);
  auto y = xp.narrow(1, 0, T) + 2.0 * xp.narrow(1, 1, T) + xp.narrow(1, 2, T);
  auto n = torch::full({T}, 4.0, x.options());
  n.index_put_({0}, 1.0);
  if (T > 1) n.index_put_({1}, 3.0);
  return y / n.reshape({1, T, 1});
}

inline torch::nn::Linear linear(index_t in, index_t out) {
  torch::nn::Linear l(torch::nn::LinearOptions(in, out).bias(false));
  torch::NoGradGuard g;
  l->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(in)));
  return l;
}

inline matrix_t<float> to_matrix(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat32).contiguous();
  matrix_t<float> m(c.size(0), c.size(1));
  std::memcpy(m.data(), c.data_ptr<float>(), sizeof(float) * static_cast<std::size_t>(m.size()));
  return m;
}
}  // namespace detail

/// RMSNorm with a weight ("weight").
struct rms_norm_impl : torch::nn::Module {
  torch::Tensor weight;
  double eps;
  rms_norm_impl(index_t n, double e) : eps(e) { weight = register_parameter("weight", torch::ones({n})); }
  torch::Tensor forward(const torch::Tensor& x) { return detail::rms_norm(x, weight, eps); }
};
TORCH_MODULE_IMPL(rms_norm, rms_norm_impl);

/// Where a compressor's entries come from: for R rows (R = 1: one grid for the whole batch; R = B:
/// one grid per sequence), E entries of W slots. src [R, E, W]: source position of each slot
/// (< 0: masked); valid [R, E, W]; anchor [R, E]: RoPE position (the entry's block start);
/// last [R, E]: the last source (the entry is visible to t ≥ last). Per-sequence grids may have
/// fewer entries than E: the missing ones read position 0 and are never visible.
struct entry_layout {
  torch::Tensor src, valid, anchor, last;
};

/// The compressor of one compressed layer: entries [B, E, c] from hidden rows [B, T, D].
/// Equal to compress::compress on params() with cfg.layer_spec(kind, layer) (tested in
/// tests/torch/), on the blurred rows when cfg.blur is set.
struct compressor_impl : torch::nn::Module {
  layer_kind kind = layer_kind::csa;
  model_config cfg;
  index_t window = 0, stride = 0;                          // this compressor's grid (cfg's, ×H with shift_heads)
  index_t origin = 0;                                      // φ0 of this compressor's grid
  index_t channels = 0;                                    // c of its entries (head_dim; indexer_dim for index keys)
  torch::nn::Linear kv_proj{nullptr}, gate_proj{nullptr};  // HF shapes [k·c, D]
  torch::Tensor position_bias;                             // [m, k·c]
  rms_norm kv_norm{nullptr};                               // [c]
  /// When set, forward() leaves in neg_entropy the mean over sequences, entries and channels of
  /// Σ_r a_r·log a_r of the gate softmax over the unmasked slots (the negative gate entropy).
  bool track_entropy = false;
  torch::Tensor neg_entropy;

  /// The compressor of layer `layer`'s kind k; with cfg.shift_heads, query head `head`'s.
  /// `out_channels` > 0: entries of that width (the indexer's keys), else head_dim.
  compressor_impl(const model_config& c, layer_kind k, index_t layer = 0, index_t head = 0, index_t out_channels = 0)
      : kind(k), cfg(c) {
    const auto g = c.layer_spec(k, layer, head).grid;
    window = g.window;
    stride = g.stride;
    origin = g.origin;
    channels = out_channels > 0 ? out_channels : c.head_dim;
    const index_t C = channels, D = c.d_model;
    const index_t streams = k == layer_kind::csa ? 2 : 1;
    kv_proj = register_module("kv_proj", detail::linear(D, streams * C));
    if (k != layer_kind::uniform) {
      gate_proj = register_module("gate_proj", detail::linear(D, streams * C));
      const index_t m = k == layer_kind::csa ? stride : window;
      position_bias = register_parameter("position_bias", torch::zeros({m, streams * C}));
    }
    kv_norm = register_module("kv_norm", rms_norm(C, c.rms_eps));
  }

  /// The compress:: grid of this compressor with its origin shifted by `shift`.
  [[nodiscard]] compress::chunk_grid grid(index_t shift = 0) const {
    return {.window = window, .stride = stride, .origin = (origin + shift) % stride};
  }

  /// Complete entries of a sequence of T tokens on this layer's grid.
  [[nodiscard]] index_t entries(index_t T) const noexcept { return grid().num_entries(T); }

  /// Entry layout for T tokens: this layer's grid (offsets undefined) or, per sequence b, the
  /// grid with origin shifted by offsets[b] ∈ [0, S) (int64 [B]).
  [[nodiscard]] entry_layout layout(index_t T, const torch::Tensor& offsets = {}) const {
    const index_t W = window, S = stride;
    std::vector<std::int64_t> off{0};
    if (offsets.defined()) {
      auto o = offsets.to(torch::kLong).contiguous();
      off.assign(o.data_ptr<std::int64_t>(), o.data_ptr<std::int64_t>() + o.numel());
      for (auto v : off) require(v >= 0 && v < S, "offsets", v, "must be in [0, stride)");
    }
    const index_t R = static_cast<index_t>(off.size());
    index_t E = 0;
    for (auto v : off) E = std::max(E, grid(v).num_entries(T));
    std::vector<std::int64_t> src(static_cast<std::size_t>(R * E * W), 0), anchor(static_cast<std::size_t>(R * E), 0),
        last(static_cast<std::size_t>(R * E), std::numeric_limits<std::int64_t>::max() / 2);
    for (index_t b = 0; b < R; ++b) {
      const auto g = grid(off[static_cast<std::size_t>(b)]);
      for (index_t e = 0; e < g.num_entries(T); ++e) {
        const auto r = g.sources(e);
        for (index_t s = 0; s < W; ++s) src[static_cast<std::size_t>((b * E + e) * W + s)] = r.first + s;
        anchor[static_cast<std::size_t>(b * E + e)] = r.last - S + 1;
        last[static_cast<std::size_t>(b * E + e)] = r.last;
      }
    }
    auto as = [](std::vector<std::int64_t>& v, std::vector<std::int64_t> shape) {
      return torch::from_blob(v.data(), shape, torch::kLong).clone();
    };
    entry_layout L;
    L.src = as(src, {R, E, W});
    L.valid = L.src.ge(0);
    L.anchor = as(anchor, {R, E});
    L.last = as(last, {R, E});
    return L;
  }

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& offsets = {}) {
    return pool(x, layout(x.size(1), offsets));
  }

  /// Entries [B, E, c] of x [B, T, D] on the layout L.
  torch::Tensor pool(const torch::Tensor& x_in, const entry_layout& L) {
    const auto x = cfg.blur ? detail::causal_blur(x_in) : x_in;
    const index_t B = x.size(0), C = channels, W = window, S = stride;
    const index_t R = L.src.size(0), E = L.src.size(1);
    auto r = torch::arange(W, torch::kLong).unsqueeze(0);
    auto valid = L.valid.reshape({R, E, W, 1});
    auto take = [&](const torch::Tensor& t) {  // [B, T, K] → [B, E, W, K]
      const index_t K = t.size(2);
      if (R == 1) return t.index_select(1, L.src.clamp_min(0).reshape({-1})).reshape({B, E, W, K});
      auto idx = L.src.clamp_min(0).reshape({R, E * W, 1}).expand({R, E * W, K});
      return t.gather(1, idx).reshape({B, E, W, K});
    };
    auto P = take(kv_proj->forward(x));  // [B, E, W, k·c]
    torch::Tensor out;
    if (kind == layer_kind::uniform) {
      auto m = valid.to(torch::kFloat32);  // [R, E, W, 1]
      out = (P * m).sum(2) / m.sum(2);
    } else {
      auto Z = take(gate_proj->forward(x));
      torch::Tensor bias;
      if (kind == layer_kind::csa) {
        // slots r < S: stream a (previous block), r ≥ S: stream b; bias row = r mod S
        auto first = r.lt(S).reshape({1, 1, W, 1});
        P = torch::where(first, P.narrow(3, 0, C), P.narrow(3, C, C));
        Z = torch::where(first, Z.narrow(3, 0, C), Z.narrow(3, C, C));
        auto pb = position_bias.index_select(0, torch::arange(W, torch::kLong).remainder(S));  // [W, 2c]
        bias = torch::where(r.lt(S).reshape({W, 1}), pb.narrow(1, 0, C), pb.narrow(1, C, C));
      } else {
        bias = position_bias;  // [W, c]
      }
      Z = (Z + bias).masked_fill(valid.logical_not(), -std::numeric_limits<float>::infinity());
      auto a = torch::softmax(Z, 2);
      if (track_entropy) {
        auto ala = torch::where(valid, a * torch::log_softmax(Z, 2), torch::zeros({}, a.options()));
        neg_entropy = ala.sum(2).mean();
      }
      out = (a * P).sum(2);
    }
    out = kv_norm->forward(out);
    if (cfg.rope) {
      auto [cs, sn] = detail::rope_tables(R == 1 ? L.anchor.reshape({-1}) : L.anchor, cfg.rope_dim, cfg.rope_theta);
      out = detail::apply_rope(out, cs, sn, cfg.rope_dim);
    }
    return out;
  }

  /// The same compressor as kvphase parameters (input width D) for cfg.layer_spec(kind).
  /// uniform: the mean pool has no parameters but the RMSNorm weight; its input is X·W_Cᵀ.
  [[nodiscard]] compress::pool_params<float> params() const {
    compress::pool_params<float> p;
    auto norm = kv_norm->weight.detach().contiguous();
    p.rms_weight = Eigen::Map<const vector_t<float>>(norm.data_ptr<float>(), norm.size(0));
    if (kind == layer_kind::uniform) return p;
    p.w_c = detail::to_matrix(kv_proj->weight).transpose();
    p.w_z = detail::to_matrix(gate_proj->weight).transpose();
    p.slot_bias_c = detail::to_matrix(position_bias);
    return p;
  }
};
TORCH_MODULE_IMPL(compressor, compressor_impl);

/// The lightning indexer of a compressed layer (model_config::top_k): index queries, head
/// weights and the index-key compressor (the layer's kind and grid, indexer_dim channels).
struct indexer_impl : torch::nn::Module {
  torch::nn::Linear q_proj{nullptr}, weights_proj{nullptr};  // [H_I·d_I, D], [H_I, D]
  compressor comp{nullptr};
  indexer_impl(const model_config& c, layer_kind k, index_t layer) {
    q_proj = register_module("q_proj", detail::linear(c.d_model, c.indexer_heads * c.indexer_dim));
    weights_proj = register_module("weights_proj", detail::linear(c.d_model, c.indexer_heads));
    comp = register_module("compressor", compressor(c, k, layer, 0, c.indexer_dim));
  }
};
TORCH_MODULE_IMPL(indexer, indexer_impl);

namespace detail {
/// Top-k selection mask of index scores I [B, T, E] among the visible entries vis [R, T, E]
/// (R = 1 or B): entry e is kept when fewer than k visible entries beat it, where e' beats e if
/// I[e'] > I[e], or I[e'] = I[e] and e' < e (attention::top_k_indices' rule: the lower index wins).
inline torch::Tensor top_k_mask(const torch::Tensor& I, const torch::Tensor& vis, index_t k) {
  const index_t E = I.size(2);
  auto Iv = I.masked_fill(vis.logical_not(), -std::numeric_limits<float>::infinity());
  auto a = Iv.unsqueeze(-1);  // [B, T, E, 1]: entry e
  auto b = Iv.unsqueeze(-2);  // [B, T, 1, E]: entry e'
  auto lower = torch::arange(E, torch::kLong).unsqueeze(0).lt(torch::arange(E, torch::kLong).unsqueeze(1));  // [e, e']: e' < e
  auto beats = b.gt(a).logical_or(b.eq(a).logical_and(lower)).logical_and(vis.unsqueeze(-2));
  return beats.sum(-1).lt(k).logical_and(vis);
}
}  // namespace detail

/// One attention layer (full or compressed).
struct attention_impl : torch::nn::Module {
  layer_kind kind;
  model_config cfg;
  torch::nn::Linear q_proj{nullptr}, kv_proj{nullptr}, o_proj{nullptr};
  rms_norm kv_norm{nullptr};
  torch::Tensor sink;
  compressor comp{nullptr};       ///< the layer's compressor (with shift_heads: head 0's)
  std::vector<compressor> comps;  ///< every compressor: {comp}, or one per query head with shift_heads
  indexer idx{nullptr};           ///< the lightning indexer (compressed layers with cfg.top_k > 0)
  torch::nn::Linear branch_gate{nullptr};  ///< nsa: gates [3H, D], per head (cmp, slc, win)
  /// After a forward with the indexer: KL(dense attention over the visible entries, summed over
  /// heads, detached ‖ softmax of the index scores), mean over the queries that see an entry
  /// (0 when none does). Its gradient reaches only the indexer.
  torch::Tensor indexer_kl;
  /// After a forward with the indexer: the selection mask [B, T, E] (entries each query attends).
  torch::Tensor selected;
  /// Readout (lm::attention_readout; not NSA layers): with `keep` set, forward() leaves the
  /// attention weights in kept_p [B, H, T, K] (detached; K = the rows a query can attend: the
  /// compressed entries, then the T raw tokens, or the T tokens of a full layer) and the tokens
  /// each row holds in kept_rows [R, 1 or H, K, W] (R = 1, or B with per-sequence grid offsets;
  /// an entry its source tokens, a raw row its own token; −1 pads).
  bool keep = false;
  torch::Tensor kept_p, kept_rows;

  attention_impl(const model_config& c, layer_kind k, index_t layer = 0) : kind(k), cfg(c) {
    const index_t C = c.head_dim, D = c.d_model, H = c.heads;
    q_proj = register_module("q_proj", detail::linear(D, H * C));
    kv_proj = register_module("kv_proj", detail::linear(D, C));
    kv_norm = register_module("kv_norm", rms_norm(C, c.rms_eps));
    o_proj = register_module("o_proj", detail::linear(H * C, D));
    if (c.sink) sink = register_parameter("attn_sink", torch::zeros({H}));
    if (k != layer_kind::full) {
      // head 0's compressor keeps the V4 name, so the checkpoint loader reads it as the layer's
      comp = register_module("compressor", compressor(c, k, layer, 0));
      comps.push_back(comp);
      for (index_t h = 1; c.shift_heads && h < H; ++h)
        comps.push_back(register_module("compressor_h" + std::to_string(h), compressor(c, k, layer, h)));
      if (c.top_k > 0) idx = register_module("indexer", indexer(c, k, layer));
      if (k == layer_kind::nsa) branch_gate = register_module("branch_gate", detail::linear(D, 3 * H));
    }
  }

  /// NSA: the selected blocks [B, T, NB] (NB = ⌈T / select_block⌉) of the last forward.
  torch::Tensor selected_blocks;

  /// Index scores I [B, T, E] of the rows x [B, T, D] over the index keys on layout L (RoPE tables
  /// cs, sn of positions 0 … T−1 when cfg.rope). The indexer reads x detached.
  torch::Tensor index_scores(const torch::Tensor& x, const entry_layout& L, const torch::Tensor& cs, const torch::Tensor& sn) {
    const index_t B = x.size(0), T = x.size(1), HI = cfg.indexer_heads, dI = cfg.indexer_dim;
    const auto xi = x.detach();
    auto qi = idx->q_proj->forward(xi).reshape({B, T, HI, dI}).permute({0, 2, 1, 3});  // [B, HI, T, dI]
    if (cfg.rope) qi = detail::apply_rope(qi, cs, sn, cfg.rope_dim);
    auto wi = idx->weights_proj->forward(xi) / std::sqrt(static_cast<double>(HI));  // [B, T, HI]
    auto ki = idx->comp->pool(xi, L);                                                 // [B, E, dI]
    auto dots = torch::relu(torch::matmul(qi, ki.unsqueeze(1).transpose(-1, -2)) / std::sqrt(static_cast<double>(dI)));
    return (dots * wi.permute({0, 2, 1}).unsqueeze(-1)).sum(1);  // [B, T, E]
  }

  /// x [B, T, D] → [B, T, D]. `knock` ≥ 0 zeroes that head's output (ablations). `offsets`
  /// (int64 [B], optional) shifts each sequence's compressor grid origin (compressor::layout).
  torch::Tensor forward(const torch::Tensor& x, index_t knock = -1, const torch::Tensor& offsets = {}) {
    const index_t B = x.size(0), T = x.size(1), C = cfg.head_dim, H = cfg.heads;
    selected = torch::Tensor();
    auto pos = torch::arange(T, torch::kLong);
    auto q = q_proj->forward(x).reshape({B, T, H, C}).permute({0, 2, 1, 3});  // [B, H, T, C]
    auto kv = kv_norm->forward(kv_proj->forward(x));                         // [B, T, C]
    torch::Tensor cs, sn;
    if (cfg.rope) {
      std::tie(cs, sn) = detail::rope_tables(pos, cfg.rope_dim, cfg.rope_theta);
      q = detail::apply_rope(q, cs, sn, cfg.rope_dim);
      kv = detail::apply_rope(kv, cs, sn, cfg.rope_dim);
    }
    auto t = pos.unsqueeze(1);
    auto j = pos.unsqueeze(0);
    if (kind == layer_kind::nsa) return nsa_forward(x, q, kv, cs, sn, knock, offsets);
    // kh [B, 1 or H, K, C]: the key/value rows (one set shared by the heads, or one per head
    // with shift_heads); allowed broadcasts against the scores [B, H, T, K]
    torch::Tensor kh = kv.unsqueeze(1), allowed;
    torch::Tensor held = keep ? pos.reshape({1, 1, T, 1}) : torch::Tensor();  // kept_rows
    if (kind == layer_kind::full) {
      allowed = j.le(t);
    } else {
      allowed = j.le(t).logical_and(j.gt(t - cfg.raw_window));
      std::vector<entry_layout> Ls;
      std::vector<torch::Tensor> ents;  // [B, E_h, C]
      index_t E = 0;
      for (auto& cp : comps) {
        Ls.push_back(cp->layout(T, offsets));
        ents.push_back(cp->pool(x, Ls.back()));
        E = std::max<index_t>(E, ents.back().size(1));
      }
      const index_t R = Ls[0].last.size(0);
      if (E > 0) {
        // per compressor [R, T, E + T]: entry e visible to t when its last source ≤ t, then the
        // raw window. A head whose grid has fewer entries gets never-visible zero rows. With the
        // indexer, [B, T, E + T]: only the selected entries.
        std::vector<torch::Tensor> vis, rows, helds;
        for (std::size_t h = 0; h < comps.size(); ++h) {
          auto last = Ls[h].last;
          auto ent = ents[h];
          const index_t pad = E - ent.size(1);
          if (pad > 0) {
            last = torch::cat({last, torch::full({R, pad}, std::numeric_limits<std::int64_t>::max() / 2, last.options())}, 1);
            ent = torch::cat({ent, torch::zeros({B, pad, C}, ent.options())}, 1);
          }
          if (keep) {  // [R, E + T, W]: entry sources (−1 where a slot is masked or the row pads), raw tokens
            const index_t W = Ls[h].src.size(2);
            auto src = Ls[h].src.masked_fill(Ls[h].valid.logical_not(), -1);
            if (pad > 0) src = torch::cat({src, torch::full({R, pad, W}, -1, src.options())}, 1);
            auto raw = torch::full({R, T, W}, -1, src.options());
            raw.select(2, 0).copy_(pos.unsqueeze(0).expand({R, T}));
            helds.push_back(torch::cat({src, raw}, 1));
          }
          auto ev = last.unsqueeze(1).le(t.unsqueeze(0));  // [R, T, E]
          if (idx) {
            dense_entries = ev;
            index_logits = index_scores(x, Ls[h], cs, sn);
            selected = detail::top_k_mask(index_logits, ev, cfg.top_k);
            ev = selected;
          }
          vis.push_back(torch::cat({ev, allowed.unsqueeze(0).expand({ev.size(0), T, T})}, 2));
          rows.push_back(torch::cat({ent, kv}, 1));
        }
        // [R, 1 or H, T, E + T] and [B, 1 or H, E + T, C]; one compressor: views, no copy
        allowed = vis.size() == 1 ? vis[0].unsqueeze(1) : torch::stack(vis, 1);
        kh = rows.size() == 1 ? rows[0].unsqueeze(1) : torch::stack(rows, 1);
        if (keep) held = torch::stack(helds, 1);
      }
    }
    auto scores = torch::matmul(q, kh.transpose(-1, -2)) / std::sqrt(static_cast<double>(C));
    if (idx && dense_entries.defined()) indexer_kl = indexer_loss(scores.detach(), allowed);
    else if (idx) indexer_kl = torch::zeros({}, x.options());
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
    torch::Tensor p;
    if (cfg.sink) {
      auto s = sink.reshape({1, H, 1, 1}).expand({B, H, T, 1});
      p = torch::softmax(torch::cat({scores, s}, -1), -1).narrow(-1, 0, scores.size(-1));
    } else {
      p = torch::softmax(scores, -1);
    }
    auto out = torch::matmul(p, kh);
    dense_entries = torch::Tensor();
    kept_p = keep ? p.detach() : torch::Tensor();
    kept_rows = held;
    return finish(out, cs, sn, knock);
  }

 private:
  /// The common tail: rotate back by −t, knock out a head, o_proj. out [B, H, T, C].
  torch::Tensor finish(torch::Tensor out, const torch::Tensor& cs, const torch::Tensor& sn, index_t knock) {
    const index_t B = out.size(0), H = out.size(1), T = out.size(2), C = out.size(3);
    if (cfg.rope) out = detail::apply_rope(out, cs, -sn, cfg.rope_dim);  // rotate back by −t
    if (knock >= 0) {
      auto m = torch::ones({1, H, 1, 1}, out.options());
      m.index_put_({0, knock}, 0.0);
      out = out * m;
    }
    return o_proj->forward(out.permute({0, 2, 1, 3}).reshape({B, T, H * C}));
  }

  /// softmax over the last dimension of the allowed scores plus the sink logit (a key with a zero
  /// value), the sink's share dropped: a row with nothing allowed gives zeros. Without a sink, a
  /// logit of −10^30 stands in (no share where anything is allowed; no NaN where nothing is).
  torch::Tensor branch_probs(const torch::Tensor& scores, const torch::Tensor& allowed) {
    const index_t B = scores.size(0), H = scores.size(1), T = scores.size(2), K = scores.size(3);
    auto sc = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
    auto s = cfg.sink ? sink.reshape({1, H, 1, 1}).expand({B, H, T, 1})
                      : torch::full({B, H, T, 1}, -1e30, scores.options());
    return torch::softmax(torch::cat({sc, s}, -1), -1).narrow(-1, 0, K);
  }

  /// The NSA layer (see the file comment): q [B, H, T, C] and kv [B, T, C] already rotated.
  torch::Tensor nsa_forward(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& cs,
                            const torch::Tensor& sn, index_t knock, const torch::Tensor& offsets) {
    require(!offsets.defined(), "offsets", "defined", "per-sequence grid offsets are not supported by nsa layers");
    const index_t B = x.size(0), T = x.size(1), C = cfg.head_dim, H = cfg.heads;
    const index_t lb = cfg.select_block, NB = (T + lb - 1) / lb;
    const double scale = 1.0 / std::sqrt(static_cast<double>(C));
    const auto L = comp->layout(T);
    auto ent = comp->pool(x, L);  // [B, E, C]
    const index_t E = ent.size(1);
    auto pos = torch::arange(T, torch::kLong);
    auto t = pos.unsqueeze(1), j = pos.unsqueeze(0);
    auto ev = L.last.reshape({1, 1, E}).le(t.unsqueeze(0));  // [1, T, E]
    auto s_raw = torch::matmul(q, kv.unsqueeze(1).transpose(-1, -2)) * scale;  // [B, H, T, T]
    auto win = j.le(t).logical_and(j.gt(t - cfg.raw_window)).reshape({1, 1, T, T});
    // block selection from the compressed branch's probabilities without the sink, over heads
    torch::Tensor sel;  // [B, T, NB]
    auto blk = torch::arange(NB, torch::kLong);
    auto avail = blk.unsqueeze(0).mul(lb).le(t);  // [T, NB]: block starts at or before t
    auto nb = t.div(lb, "floor") + 1;             // [T, 1]: blocks available to t
    auto forced = avail.logical_and(blk.unsqueeze(0).lt(cfg.select_initial).logical_or(blk.unsqueeze(0).ge(nb - cfg.select_local)));
    torch::Tensor o_cmp;
    if (E > 0) {
      auto s_e = torch::matmul(q, ent.unsqueeze(1).transpose(-1, -2)) * scale;  // [B, H, T, E]
      o_cmp = torch::matmul(branch_probs(s_e, ev.unsqueeze(1)), ent.unsqueeze(1));
      torch::Tensor P;
      {
        torch::NoGradGuard ng;
        auto ps = s_e.detach().masked_fill(ev.unsqueeze(1).logical_not(), -std::numeric_limits<float>::infinity());
        auto pr = torch::softmax(ps, -1);
        P = torch::where(ev.unsqueeze(1), pr, torch::zeros({}, pr.options())).sum(1);  // [B, T, E]; rows without entries: 0
      }
      // overlap weights [E, NB]: |sources(e) ∩ block j| / S, positions ≥ 0 (attention::nsa_block_importance)
      std::vector<double> ov(static_cast<std::size_t>(E * NB), 0.0);
      const auto g = comp->grid();
      for (index_t e = 0; e < E; ++e) {
        const auto r = g.sources(e);
        for (index_t b = 0; b < NB; ++b) {
          const index_t lo = std::max<index_t>(r.first, b * lb), hi = std::min<index_t>(r.last, (b + 1) * lb - 1);
          if (hi >= lo && hi >= 0) ov[static_cast<std::size_t>(e * NB + b)] = static_cast<double>(hi - std::max<index_t>(lo, 0) + 1) / static_cast<double>(g.stride);
        }
      }
      auto O = torch::from_blob(ov.data(), {E, NB}, torch::kFloat64).clone().to(P.dtype());
      auto imp = torch::matmul(P, O);  // [B, T, NB]
      auto free = avail.logical_and(forced.logical_not());                                     // [T, NB]
      const auto nf = forced.sum(-1, true), nfree = free.sum(-1, true);                        // [T, 1]
      auto budget = torch::minimum((cfg.select_top_n - nf).clamp_min(0), nfree);               // [T, 1]
      auto a = imp.unsqueeze(-1), b = imp.unsqueeze(-2);                                       // j, j'
      auto lower = blk.unsqueeze(0).lt(blk.unsqueeze(1));                                       // [j, j']: j' < j
      auto beats = b.gt(a).logical_or(b.eq(a).logical_and(lower)).logical_and(free.unsqueeze(-2));
      auto rank = beats.sum(-1);                                                                // [B, T, NB]
      sel = forced.unsqueeze(0).logical_or(free.unsqueeze(0).logical_and(rank.lt(budget.unsqueeze(0))));
    } else {
      o_cmp = torch::zeros({B, H, T, C}, q.options());
      // no entries: importance 0 everywhere; the forced blocks, then the lowest free blocks
      auto free = avail.logical_and(forced.logical_not());
      const auto nf = forced.sum(-1, true);
      auto rank = free.to(torch::kLong).cumsum(-1) - 1;
      sel = forced.logical_or(free.logical_and(rank.lt((cfg.select_top_n - nf).clamp_min(0)))).unsqueeze(0).expand({B, T, NB});
    }
    selected_blocks = sel;
    auto tok = sel.index_select(2, pos.div(lb, "floor")).logical_and(j.le(t).unsqueeze(0));  // [B, T, T]
    auto o_slc = torch::matmul(branch_probs(s_raw, tok.unsqueeze(1)), kv.unsqueeze(1));
    auto o_win = torch::matmul(branch_probs(s_raw, win), kv.unsqueeze(1));
    auto gt = torch::sigmoid(branch_gate->forward(x)).reshape({B, T, H, 3}).permute({0, 2, 1, 3});  // [B, H, T, 3]
    auto out = gt.narrow(-1, 0, 1) * o_cmp + gt.narrow(-1, 1, 1) * o_slc + gt.narrow(-1, 2, 1) * o_win;
    return finish(out, cs, sn, knock);
  }

  torch::Tensor dense_entries, index_logits;  // this forward's visible entries [R, T, E], index scores [B, T, E]

  /// KL(target ‖ softmax(I)) of this forward (see indexer_kl): `scores` [B, H, T, E + T] detached,
  /// `allowed` the sparse mask, whose raw-window part the dense mask keeps.
  torch::Tensor indexer_loss(const torch::Tensor& scores, const torch::Tensor& allowed) {
    const index_t B = scores.size(0), H = scores.size(1), T = scores.size(2), E = index_logits.size(2);
    const float ninf = -std::numeric_limits<float>::infinity();
    auto ev = dense_entries.expand({B, T, E});
    auto dense = torch::cat({ev, allowed.narrow(-1, E, T).squeeze(1).expand({B, T, T})}, 2).unsqueeze(1);  // [B, 1, T, E+T]
    auto sd = scores.masked_fill(dense.logical_not(), ninf);
    if (cfg.sink) sd = torch::cat({sd, sink.detach().reshape({1, H, 1, 1}).expand({B, H, T, 1})}, -1);
    auto p = torch::softmax(sd, -1).narrow(-1, 0, E).sum(1);  // [B, T, E]: attention mass on each entry, over heads
    auto mass = p.sum(-1, true);
    auto rows = ev.any(-1).logical_and(mass.squeeze(-1).gt(0));  // queries that see an entry
    auto target = torch::where(mass.gt(0), p / mass.clamp_min(1e-30), torch::zeros({}, p.options()));
    auto logq = torch::log_softmax(index_logits.masked_fill(ev.logical_not(), ninf), -1);
    auto term = torch::where(target.gt(0), target * (torch::log(target.clamp_min(1e-30)) - logq), torch::zeros({}, p.options()));
    auto per = term.sum(-1);  // [B, T]
    const auto n = rows.sum();
    return torch::where(n.gt(0), (per * rows).sum() / n.clamp_min(1), torch::zeros({}, p.options()));
  }
};
TORCH_MODULE_IMPL(attention, attention_impl);

struct mlp_impl : torch::nn::Module {
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  mlp_impl(index_t D, index_t F) {
    gate_proj = register_module("gate_proj", detail::linear(D, F));
    up_proj = register_module("up_proj", detail::linear(D, F));
    down_proj = register_module("down_proj", detail::linear(F, D));
  }
  torch::Tensor forward(const torch::Tensor& h) {
    return down_proj->forward(torch::silu(gate_proj->forward(h)) * up_proj->forward(h));
  }
};
TORCH_MODULE_IMPL(mlp, mlp_impl);

struct block_impl : torch::nn::Module {
  rms_norm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  attention self_attn{nullptr};
  mlp ffn{nullptr};
  block_impl(const model_config& c, layer_kind k, index_t layer = 0) {
    input_layernorm = register_module("input_layernorm", rms_norm(c.d_model, c.rms_eps));
    self_attn = register_module("self_attn", attention(c, k, layer));
    post_attention_layernorm = register_module("post_attention_layernorm", rms_norm(c.d_model, c.rms_eps));
    ffn = register_module("mlp", mlp(c.d_model, c.mlp_hidden));
  }
  /// knock: -1 none, ≥ 0 that head, -2 the whole attention output.
  torch::Tensor forward(torch::Tensor x, index_t knock = -1, const torch::Tensor& offsets = {}) {
    if (knock != -2) x = x + self_attn->forward(input_layernorm->forward(x), knock, offsets);
    return x + ffn->forward(post_attention_layernorm->forward(x));
  }
};
TORCH_MODULE_IMPL(block, block_impl);

struct backbone_impl : torch::nn::Module {
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  rms_norm norm{nullptr};
  std::vector<block> blocks;
  backbone_impl(const model_config& c, const std::vector<layer_kind>& kinds) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab, c.d_model));
    layers = register_module("layers", torch::nn::ModuleList());
    for (layer_kind k : kinds) {
      blocks.emplace_back(c, k, static_cast<index_t>(blocks.size()));
      layers->push_back(blocks.back());
    }
    norm = register_module("norm", rms_norm(c.d_model, c.rms_eps));
  }
};
TORCH_MODULE_IMPL(backbone, backbone_impl);

/// The language model. Parameter names (named_parameters()): "model.embed_tokens.weight",
/// "model.layers.L.…", "model.norm.weight", "lm_head.weight".
struct lm_impl : torch::nn::Module {
  model_config cfg;
  std::vector<layer_kind> kinds;
  backbone model{nullptr};
  torch::nn::Linear lm_head{nullptr};

  explicit lm_impl(const model_config& c) : cfg(c) {
    c.validate();
    kinds = c.layers();
    model = register_module("model", backbone(c, kinds));
    lm_head = register_module("lm_head", detail::linear(c.d_model, c.vocab));
  }
  /// tokens [B, T] (int64) → logits [B, T, vocab]. Ablation: knock_layer ≥ 0 with knock_head ≥ 0
  /// zeroes one head's output, with knock_head = -1 the layer's whole attention output.
  /// `offsets` (int64 [B], optional): per-sequence shift of every compressor's grid origin.
  torch::Tensor forward(const torch::Tensor& tokens, index_t knock_layer = -1, index_t knock_head = -1,
                        const torch::Tensor& offsets = {}) {
    auto x = model->embed_tokens->forward(tokens);
    for (std::size_t l = 0; l < model->blocks.size(); ++l) {
      const bool k = static_cast<index_t>(l) == knock_layer;
      x = model->blocks[l]->forward(x, k ? (knock_head < 0 ? -2 : knock_head) : -1, offsets);
    }
    return lm_head->forward(model->norm->forward(x));
  }
};
TORCH_MODULE_IMPL(lm, lm_impl);

/// Multiply-adds of one forward pass over B × T tokens (the matrix products and the attention
/// score and mix products; elementwise work not counted). Backward ≈ 2 × forward.
inline double forward_macs(const model_config& c, index_t B, index_t T) {
  const double D = static_cast<double>(c.d_model), C = static_cast<double>(c.head_dim), H = static_cast<double>(c.heads),
               F = static_cast<double>(c.mlp_hidden), V = static_cast<double>(c.vocab), n = static_cast<double>(B * T);
  double macs = n * V * D;  // lm head
  for (layer_kind k : c.layers()) {
    macs += n * (H * C * D + C * D + D * H * C + 3.0 * D * F);
    double keys;  // keys per query (the dense masked product computes all of them)
    if (k == layer_kind::full) {
      keys = static_cast<double>(T);
    } else {
      // with shift_heads: H compressors, each with T/(H·S) entries of H·W slots
      const index_t G = c.shift_heads ? c.heads : 1;
      const double E = static_cast<double>(T / (G * c.stride)), W = static_cast<double>(G * c.window);
      const double streams = k == layer_kind::csa ? 2.0 : 1.0;
      macs += G * n * streams * C * D * (k == layer_kind::uniform ? 1.0 : 2.0);  // compressor projections
      macs += G * static_cast<double>(B) * E * W * C * 2.0;                     // pooling
      if (c.top_k > 0) {  // the indexer: projections, its compressor, scores
        const double HI = static_cast<double>(c.indexer_heads), dI = static_cast<double>(c.indexer_dim);
        macs += n * (HI * dI * D + HI * D) + n * streams * dI * D * (k == layer_kind::uniform ? 1.0 : 2.0) +
                static_cast<double>(B) * E * W * dI * 2.0 + n * E * HI * dI;
      }
      // nsa: the raw scores once, two raw mixes (selected blocks, window), and the branch gates
      keys = k == layer_kind::nsa ? static_cast<double>(T) * 1.5 + E : static_cast<double>(T) + E;
      if (k == layer_kind::nsa) macs += n * D * 3.0 * H;
    }
    macs += n * H * keys * C * 2.0;  // scores and mix
  }
  return macs;
}

}  // namespace kvphase::lm
