#pragma once
/// \file attention/model.hpp
/// toy_model: a stack of attention layers with a per-layer compression-ratio schedule, residual
/// connections and a linear readout, enough for synthetic retrieval tasks.
///
/// Layer l, on hidden states X [N × D] (token t at position t):
///   Xn = RMSNorm(X) (no weight, eps 1e-6)
///   Q = Xn·Wq [N × H·dh];  K = Xn·Wk [N × Hkv·dh];  V = Xn·Wv [N × Hkv·dh] (V = K when shared_kv)
///   ratio 0   window only: each query attends its last `window` raw tokens
///   ratio 1   full causal attention
///   ratio ≥ 2 compressed: per KV head, Kc = compress(op, K_head) and Vc = compress(op, V_head)
///             (Vc = Kc when shared_kv) from the UNROTATED projections (the operator applies its
///             own RMSNorm and RoPE at the entry anchor); then compressed attention with the raw
///             window, joint or gated. top_k > 0: CSA lightning indexer over index keys
///             KI = compress(op, Xn·Wki), queries Xn·Wqi (H_I heads of d_I), weights
///             Xn·Ww / √H_I, shared by all heads. select_top_n > 0: NSA blocks chosen per KV
///             head from the compression-branch probabilities summed over the group's heads;
///             gates sigmoid(Xn·Wg) per head and branch.
///   RoPE (config.rope, anchor ≠ none) rotates Q and the raw K at their positions after the
///   compression; with shared_kv the output of each head is rotated back by −t (DeepSeek-V4).
///   X ← X + O·Wo.
/// readout(X) = X·Wr [N × readout_dim] (readout_dim 0: X itself).
///
/// Weights are drawn from counter-based streams keyed by (seed, layer, tensor name), so a model
/// is a pure function of its config; forward is deterministic for any thread count.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/attention/compressed.hpp"
#include "kvphase/attention/full.hpp"
#include "kvphase/attention/kernels.hpp"
#include "kvphase/attention/multihead.hpp"
#include "kvphase/attention/select.hpp"
#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/position.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::attention {

/// One layer of the schedule.
struct layer_spec {
  index_t ratio = 0;              ///< 0 window only, 1 full attention, ≥ 2 compressed with `op`
  compress::operator_spec op{};   ///< compressor of a compressed layer (op.grid.stride must equal ratio)
  combine_mode combine = combine_mode::joint;
  index_t top_k = 0;              ///< > 0: CSA indexer keeps the top_k visible entries
  index_t select_top_n = 0;       ///< > 0: NSA raw-block selection of select_top_n blocks
  index_t select_block = 64;      ///< NSA selection block size l'

  friend std::ostream& operator<<(std::ostream& os, const layer_spec& l) {
    os << "layer{ratio=" << l.ratio;
    if (l.ratio >= 2)
      os << ", op=" << (l.op.name.empty() ? "-" : l.op.name) << ", combine=" << to_string(l.combine)
         << ", top_k=" << l.top_k << ", select_top_n=" << l.select_top_n << "/" << l.select_block;
    return os << "}";
  }
};

/// Configuration of a toy_model. Aggregate with defaults; see the presets below.
struct toy_model_config {
  std::string name = "custom";
  index_t d_model = 64;            ///< D
  index_t heads = 4;               ///< H
  index_t kv_heads = 1;            ///< Hkv
  index_t head_dim = 16;           ///< dh (values have dh channels too)
  index_t window = 16;             ///< raw window n_win of every layer
  bool shared_kv = false;          ///< K = V (DeepSeek-V4 MQA)
  compress::rope_config rope{};    ///< RoPE of queries and raw keys (anchor none = NoPE)
  double sink = -std::numeric_limits<double>::infinity();  ///< sink logit of every head (−∞ = none)
  index_t indexer_heads = 2;       ///< H_I
  index_t indexer_dim = 16;        ///< d_I
  index_t readout_dim = 0;         ///< columns of the readout (0 = identity readout)
  std::vector<layer_spec> layers;
  std::uint64_t seed = 0;
  int threads = 0;                 ///< OpenMP threads of the attention calls (0 = default)

  void validate() const {
    require(d_model >= 1 && d_model <= limits::max_dim, "d_model", d_model, "must be in [1, 65536]");
    require(window >= 0 && window <= limits::max_tokens, "window", window, "must be in [0, 2^30]");
    require(indexer_heads >= 1 && indexer_heads <= limits::max_heads, "indexer_heads", indexer_heads,
            "must be in [1, 4096]");
    require(indexer_dim >= 1 && indexer_dim <= limits::max_dim, "indexer_dim", indexer_dim, "must be in [1, 65536]");
    require(readout_dim >= 0 && readout_dim <= limits::max_dim, "readout_dim", readout_dim, "must be in [0, 65536]");
    require(threads >= 0 && threads <= 1024, "threads", threads, "must be in [0, 1024]");
    require(!std::isnan(sink) && sink < std::numeric_limits<double>::infinity(), "sink", sink,
            "must be finite or -infinity");
    require(!layers.empty(), "layers.size()", layers.size(), "must be >= 1");
    head_config().validate();
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const layer_spec& L = layers[l];
      const std::string at = "layers[" + std::to_string(l) + "]";
      require(L.ratio >= 0, at + ".ratio", L.ratio, "must be >= 0 (0 window, 1 full, >= 2 compressed)");
      require(L.ratio != 0 || window >= 1, at + ".ratio", L.ratio, "a window-only layer needs window >= 1");
      if (L.ratio >= 2) {
        L.op.validate();
        require(L.op.grid.stride == L.ratio, at + ".op.grid.stride", L.op.grid.stride,
                "must equal the layer's ratio " + std::to_string(L.ratio));
        require(L.op.heads == 1, at + ".op.heads", L.op.heads, "the model compresses each KV head with heads = 1");
        require(L.op.rope.anchor == compress::rope_anchor::none || L.op.rope.rope_dim <= head_dim,
                at + ".op.rope.rope_dim", L.op.rope.rope_dim, "must be <= head_dim");
        require(L.top_k >= 0, at + ".top_k", L.top_k, "must be >= 0");
        require(L.select_top_n >= 0, at + ".select_top_n", L.select_top_n, "must be >= 0");
        require(L.select_top_n == 0 || L.select_top_n >= 3, at + ".select_top_n", L.select_top_n,
                "must be 0 or >= 3 (1 initial + 2 local blocks are always kept)");
        require(L.select_block >= 1, at + ".select_block", L.select_block, "must be >= 1");
      }
    }
  }

  /// The multi-head layout shared by every layer.
  [[nodiscard]] multihead_config head_config() const {
    multihead_config c{.heads = heads, .kv_heads = kv_heads, .head_dim = head_dim, .rope = rope};
    if (sink > -std::numeric_limits<double>::infinity()) c.sinks.assign(static_cast<std::size_t>(heads), sink);
    return c;
  }

  friend std::ostream& operator<<(std::ostream& os, const toy_model_config& c) {
    os << "toy_model_config{name=" << c.name << ", d_model=" << c.d_model << ", heads=" << c.heads
       << ", kv_heads=" << c.kv_heads << ", head_dim=" << c.head_dim << ", window=" << c.window
       << ", shared_kv=" << (c.shared_kv ? "true" : "false") << ", rope=" << compress::to_string(c.rope.anchor)
       << ", sink=" << c.sink << ", indexer=" << c.indexer_heads << "x" << c.indexer_dim
       << ", readout_dim=" << c.readout_dim << ", seed=" << c.seed << ", layers=[";
    for (std::size_t l = 0; l < c.layers.size(); ++l) os << (l ? ", " : "") << c.layers[l];
    return os << "]}";
  }
};

/// Weights of one layer (row-major, out = in · W).
template <class Real>
struct layer_weights {
  matrix_t<Real> wq, wk, wv, wo;           ///< D × H·dh, D × Hkv·dh, D × Hkv·dh (empty if shared_kv), H·dh × D
  std::vector<compress::pool_params<Real>> pool_k, pool_v;  ///< per KV head (pool_v empty if shared_kv)
  matrix_t<Real> wqi, wwi, wki;            ///< indexer: D × H_I·d_I, D × H_I, D × d_I
  compress::pool_params<Real> pool_i;      ///< indexer-key compressor
  matrix_t<Real> wg;                       ///< NSA gates D × 3H
};

namespace detail {
template <class Real>
matrix_t<Real> random_weights(index_t rows, index_t cols, std::uint64_t seed, index_t layer, const char* name,
                              double std) {
  rng::philox_stream s(seed, rng::combine(rng::hash_text(name), static_cast<std::uint64_t>(layer)));
  matrix_t<Real> m(rows, cols);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = static_cast<Real>(std * s.normal());
  return m;
}
template <class Real>
void rms_rows(matrix_t<Real>& X) {
  for (index_t i = 0; i < X.rows(); ++i) compress::rms_norm_inplace<Real>(X.row(i).data(), X.cols(), 1e-6);
}
}  // namespace detail

/// The toy model. Construct from a config (validated; weights drawn from the seed), then
/// forward() token matrices.
template <class Real, class Arch = simd::default_arch>
class toy_model {
 public:
  explicit toy_model(toy_model_config cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    const index_t D = cfg_.d_model, H = cfg_.heads, Hkv = cfg_.kv_heads, dh = cfg_.head_dim;
    const double sd = 1.0 / std::sqrt(static_cast<double>(D));
    const std::uint64_t s = cfg_.seed;
    for (std::size_t l = 0; l < cfg_.layers.size(); ++l) {
      const layer_spec& L = cfg_.layers[l];
      const auto li = static_cast<index_t>(l);
      layer_weights<Real> w;
      w.wq = detail::random_weights<Real>(D, H * dh, s, li, "wq", sd);
      w.wk = detail::random_weights<Real>(D, Hkv * dh, s, li, "wk", sd);
      if (!cfg_.shared_kv) w.wv = detail::random_weights<Real>(D, Hkv * dh, s, li, "wv", sd);
      w.wo = detail::random_weights<Real>(H * dh, D, s, li, "wo", 1.0 / std::sqrt(static_cast<double>(H * dh)));
      if (L.ratio >= 2) {
        const std::uint64_t ls = rng::combine(s, static_cast<std::uint64_t>(l));
        for (index_t kh = 0; kh < Hkv; ++kh) {
          w.pool_k.push_back(compress::make_preset_params<Real>(L.op, dh, rng::combine(ls, 2 * static_cast<std::uint64_t>(kh))));
          if (!cfg_.shared_kv)
            w.pool_v.push_back(
                compress::make_preset_params<Real>(L.op, dh, rng::combine(ls, 2 * static_cast<std::uint64_t>(kh) + 1)));
          require(w.pool_k.back().output_dim(L.op, dh) == dh, "layers[" + std::to_string(l) + "].op", L.op.name,
                  "the compressor must keep head_dim channels");
        }
        if (L.top_k > 0) {
          const index_t HI = cfg_.indexer_heads, dI = cfg_.indexer_dim;
          w.wqi = detail::random_weights<Real>(D, HI * dI, s, li, "wqi", sd);
          w.wwi = detail::random_weights<Real>(D, HI, s, li, "wwi", sd);
          w.wki = detail::random_weights<Real>(D, dI, s, li, "wki", sd);
          w.pool_i = compress::make_preset_params<Real>(L.op, dI, rng::combine(ls, 0xA11CEULL));
        }
        if (L.combine == combine_mode::gated) w.wg = detail::random_weights<Real>(D, 3 * H, s, li, "wg", sd);
      }
      layers_.push_back(std::move(w));
    }
    if (cfg_.readout_dim > 0)
      readout_ = detail::random_weights<Real>(D, cfg_.readout_dim, s, -1, "readout", sd);
  }

  [[nodiscard]] const toy_model_config& config() const noexcept { return cfg_; }
  [[nodiscard]] const std::vector<layer_weights<Real>>& weights() const noexcept { return layers_; }
  [[nodiscard]] std::vector<layer_weights<Real>>& weights() noexcept { return layers_; }
  [[nodiscard]] const matrix_t<Real>& readout_weights() const noexcept { return readout_; }

  /// Hidden states after every layer: X [N × D] in, [N × D] out (token t at position t).
  [[nodiscard]] matrix_t<Real> forward(const matrix_t<Real>& X) const {
    require(X.cols() == cfg_.d_model, "X.cols()", X.cols(), "must equal d_model (" + std::to_string(cfg_.d_model) + ")");
    require(X.rows() >= 1, "X.rows()", X.rows(), "must be >= 1");
    require_finite(std::span<const Real>(X.data(), static_cast<std::size_t>(X.size())), "X");
    matrix_t<Real> H = X;
    for (std::size_t l = 0; l < layers_.size(); ++l) H += layer_output(l, H);
    return H;
  }

  /// The attention branch of layer l (before the residual add): O·Wo [N × D].
  [[nodiscard]] matrix_t<Real> layer_output(std::size_t l, const matrix_t<Real>& X) const {
    require(l < layers_.size(), "layer", l, "must be < the number of layers");
    const layer_spec& L = cfg_.layers[l];
    const layer_weights<Real>& w = layers_[l];
    const index_t N = X.rows(), H = cfg_.heads, Hkv = cfg_.kv_heads, dh = cfg_.head_dim;
    const multihead_config hc = cfg_.head_config();
    matrix_t<Real> Xn = X;
    detail::rms_rows(Xn);
    matrix_t<Real> Q = Xn * w.wq;
    matrix_t<Real> K = Xn * w.wk;
    matrix_t<Real> V;
    if (!cfg_.shared_kv) V = Xn * w.wv;
    std::vector<index_t> pos(static_cast<std::size_t>(N));
    for (index_t t = 0; t < N; ++t) pos[static_cast<std::size_t>(t)] = t;

    // compressed entries from the unrotated projections
    compress::chunk_grid grid = L.ratio >= 2 ? L.op.grid : compress::chunk_grid{.window = 1, .stride = 1};
    const index_t E = L.ratio >= 2 ? grid.num_entries(N) : 0;
    matrix_t<Real> Kc(E, Hkv * dh), Vc;
    if (!cfg_.shared_kv) Vc.resize(E, Hkv * dh);
    if (E > 0) {
      matrix_t<Real> part(N, dh);
      for (index_t kh = 0; kh < Hkv; ++kh) {
        part = K.middleCols(kh * dh, dh);
        Kc.middleCols(kh * dh, dh) = compress::compress<Real, Arch>(L.op, w.pool_k[static_cast<std::size_t>(kh)], part);
        if (!cfg_.shared_kv) {
          part = V.middleCols(kh * dh, dh);
          Vc.middleCols(kh * dh, dh) = compress::compress<Real, Arch>(L.op, w.pool_v[static_cast<std::size_t>(kh)], part);
        }
      }
    }
    rope_heads(Q, H, dh, cfg_.rope);
    rope_heads(K, Hkv, dh, cfg_.rope);
    const matrix_t<Real>& Vr = cfg_.shared_kv ? K : V;
    const matrix_t<Real>& Vcr = cfg_.shared_kv ? Kc : Vc;

    matrix_t<Real> O(N, H * dh);
    const attention_params ap{.threads = cfg_.threads};
    if (L.ratio == 1) {
      multihead_full_attention<Real, Arch>(Q, pos, K, Vr, hc, ap, O);
    } else {
      compressed_params cp{.window = cfg_.window, .compressed = L.ratio >= 2, .combine = L.combine,
                           .select_block = L.select_block, .attn = ap};
      std::deque<index_lists> lists;  // stable addresses for the selections
      std::vector<compressed_selection<Real>> sel;
      std::vector<Real> gates;
      if (L.ratio >= 2 && L.top_k > 0 && E > 0) {
        const index_t HI = cfg_.indexer_heads;
        const matrix_t<Real> QI = Xn * w.wqi;
        const matrix_t<Real> WI = (Xn * w.wwi) * static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HI)));
        const matrix_t<Real> XI = Xn * w.wki;
        const matrix_t<Real> KI = compress::compress<Real, Arch>(L.op, w.pool_i, XI);
        lists.push_back(csa_select<Real, Arch>(QI, WI, KI, grid, pos, indexer_params{.heads = HI, .top_k = L.top_k, .threads = cfg_.threads}));
        sel.push_back(compressed_selection<Real>{.entries = &lists.back()});
      } else if (L.ratio >= 2 && L.top_k > 0) {
        cp.compressed = false;  // no entries yet: nothing to select
      }
      if (L.ratio >= 2 && L.select_top_n > 0) {
        sel.clear();
        const block_select_params bp{.block = L.select_block, .top_n = L.select_top_n, .initial = 1, .local = 2,
                                     .threads = cfg_.threads};
        for (index_t kh = 0; kh < Hkv; ++kh) {
          matrix_t<Real> P = matrix_t<Real>::Zero(N, std::max<index_t>(E, 1));
          if (E > 0) group_probabilities(Q, Kc, grid, hc, kh, P);
          lists.push_back(nsa_select<Real>(P, grid, pos, bp));
          sel.push_back(compressed_selection<Real>{.blocks = &lists.back()});
        }
      }
      if (L.combine == combine_mode::gated) {
        const matrix_t<Real> G = (Xn * w.wg).unaryExpr([](Real v) { return Real(1) / (Real(1) + std::exp(-v)); });
        gates.assign(G.data(), G.data() + G.size());
      }
      multihead_attention<Real, Arch>(Q, pos, Kc, Vcr, grid, K, Vr, hc, cp, O, sel, gates);
    }
    if (cfg_.shared_kv) {  // rotate each head's output back by its query position
      std::vector<index_t> neg(pos.size());
      for (std::size_t i = 0; i < pos.size(); ++i) neg[i] = -pos[i];
      rope_heads(O, H, dh, cfg_.rope, neg);
    }
    return O * w.wo;
  }

  /// logits = X·Wr [N × readout_dim], or X when readout_dim = 0.
  [[nodiscard]] matrix_t<Real> readout(const matrix_t<Real>& X) const {
    require(X.cols() == cfg_.d_model, "X.cols()", X.cols(), "must equal d_model");
    if (cfg_.readout_dim == 0) return X;
    return X * readout_;
  }

 private:
  /// P[t, e] = Σ_{h in KV group kh} softmax_e(q_h(t)·Kc_kh[e] / √dh) over the entries visible at t.
  void group_probabilities(const matrix_t<Real>& Q, const matrix_t<Real>& Kc, const compress::chunk_grid& grid,
                           const multihead_config& hc, index_t kh, matrix_t<Real>& P) const {
    const index_t dh = hc.head_dim, N = Q.rows();
    const Real scale = default_scale<Real>(dh);
    std::vector<Real> s(static_cast<std::size_t>(Kc.rows()));
    for (index_t t = 0; t < N; ++t) {
      const index_t nv = std::min(grid.num_visible(t), Kc.rows());
      if (nv == 0) continue;
      for (index_t h = kh * hc.group(); h < (kh + 1) * hc.group(); ++h) {
        score_rows<Real, Arch>(Q.row(t).data() + h * dh, Kc.data() + kh * dh, Kc.cols(), nv, dh, scale, s.data());
        softmax_with_sink<Real, Arch>(s.data(), nv, no_sink<Real>);
        for (index_t e = 0; e < nv; ++e) P(t, e) += s[static_cast<std::size_t>(e)];
      }
    }
  }

  toy_model_config cfg_;
  std::vector<layer_weights<Real>> layers_;
  matrix_t<Real> readout_;
};

// ---- presets -------------------------------------------------------------------------------------

namespace detail {
inline compress::operator_spec toy_op(compress::operator_spec op, index_t rope_dim) {
  if (op.rope.anchor != compress::rope_anchor::none) op.rope.rope_dim = rope_dim;
  return op;
}
}  // namespace detail

/// DeepSeek-V4-Flash's schedule at toy width: ratios 0, 0, then 4, 128 alternating, last 4
/// (7 layers); one shared K = V head, 128-token window, CSA indexer top-16, sink 0, RoPE on the
/// last 8 of 16 channels (θ = 160000).
inline toy_model_config v4_flash_toy(std::uint64_t seed = 0) {
  const compress::rope_config rope{.anchor = compress::rope_anchor::start, .theta = 160000.0, .rope_dim = 8};
  const layer_spec csa{.ratio = 4, .op = detail::toy_op(compress::v4_csa(), 8), .top_k = 16};
  const layer_spec hca{.ratio = 128, .op = detail::toy_op(compress::v4_hca(), 8)};
  return toy_model_config{.name = "v4_flash_toy", .d_model = 64, .heads = 4, .kv_heads = 1, .head_dim = 16,
                          .window = 128, .shared_kv = true, .rope = rope, .sink = 0.0,
                          .layers = {layer_spec{.ratio = 0}, layer_spec{.ratio = 0}, csa, hca, csa, hca, csa},
                          .seed = seed};
}

/// DeepSeek-V4.1 at toy width: ratio-2 channel-gate compression (stride 2) with an indexer
/// top-32, a full-attention layer and a window-only layer: ratios 0, 2, 1, 2.
inline toy_model_config v41_toy(std::uint64_t seed = 0) {
  const compress::rope_config rope{.anchor = compress::rope_anchor::start, .theta = 160000.0, .rope_dim = 8};
  const layer_spec r2{.ratio = 2, .op = detail::toy_op(compress::v41(), 8), .top_k = 32};
  return toy_model_config{.name = "v41_toy", .d_model = 64, .heads = 4, .kv_heads = 1, .head_dim = 16,
                          .window = 128, .shared_kv = true, .rope = rope, .sink = 0.0,
                          .layers = {layer_spec{.ratio = 0}, r2, layer_spec{.ratio = 1}, r2}, .seed = seed};
}

/// NSA at toy width: compression l = 32, d = 16 (MLP), block selection l' = 32, top-4 blocks
/// (1 initial + 2 local always), window 64, sigmoid-gated branches, GQA 4 heads over 2 KV heads.
inline toy_model_config nsa_toy(std::uint64_t seed = 0) {
  const layer_spec l{.ratio = 16, .op = compress::nsa(), .combine = combine_mode::gated, .select_top_n = 4,
                     .select_block = 32};
  return toy_model_config{.name = "nsa_toy", .d_model = 64, .heads = 4, .kv_heads = 2, .head_dim = 16,
                          .window = 64, .rope = {.anchor = compress::rope_anchor::start, .theta = 10000.0},
                          .layers = {l, l}, .seed = seed};
}

/// The paper reference: W = S = 8 slot-gated compression with separate K and V, one KV head, a
/// 16-token raw window, one joint softmax, RoPE θ = 10000 (2 layers).
inline toy_model_config paper_ref_toy(std::uint64_t seed = 0) {
  const layer_spec l{.ratio = 8, .op = compress::paper_ref()};
  return toy_model_config{.name = "paper_ref_toy", .d_model = 64, .heads = 4, .kv_heads = 1, .head_dim = 16,
                          .window = 16, .rope = {.anchor = compress::rope_anchor::start, .theta = 10000.0},
                          .layers = {l, l}, .seed = seed};
}

/// The full-attention control at the same width (2 layers).
inline toy_model_config full_toy(std::uint64_t seed = 0) {
  return toy_model_config{.name = "full_toy", .d_model = 64, .heads = 4, .kv_heads = 1, .head_dim = 16,
                          .rope = {.anchor = compress::rope_anchor::start, .theta = 10000.0},
                          .layers = {layer_spec{.ratio = 1}, layer_spec{.ratio = 1}}, .seed = seed};
}

/// Names accepted by toy_preset().
inline constexpr std::array<std::string_view, 5> toy_preset_names{"v4_flash_toy", "v41_toy", "nsa_toy",
                                                                   "paper_ref_toy", "full_toy"};

/// Preset by name; throws kvphase::error for an unknown name.
inline toy_model_config toy_preset(std::string_view name, std::uint64_t seed = 0) {
  if (name == "v4_flash_toy") return v4_flash_toy(seed);
  if (name == "v41_toy") return v41_toy(seed);
  if (name == "nsa_toy") return nsa_toy(seed);
  if (name == "paper_ref_toy") return paper_ref_toy(seed);
  if (name == "full_toy") return full_toy(seed);
  fail("preset", std::string(name),
       "unknown toy model preset (known: v4_flash_toy, v41_toy, nsa_toy, paper_ref_toy, full_toy)");
}

}  // namespace kvphase::attention
