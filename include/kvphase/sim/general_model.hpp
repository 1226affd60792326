#pragma once
/// \file sim/general_model.hpp
/// Key-space model for operators that are not linear in the keys (max pooling, channel gates,
/// the two-stream V4-CSA form, NSA's MLP, RMSNorm, per-slot logit maps): the trial's keys are
/// materialised (N × d, a reused buffer) and compressed with fixed random parameters drawn once
/// per configuration (compress::make_preset_params, seed = params_seed), then scored against the
/// query. Every task (needle, kv-pairs, padding) runs through it.
///
/// Keys: the noise keys are exactly the keys the linear key-space engine generates from the same
/// generator state (key_space_keys below reproduces the layout of sim/noise_scores.hpp: tokens
/// in groups of 16, block i of a group holding channels 2i and 2i + 1), so a trial draws the same
/// normals in the same order on both paths; only the planted rows (needle, pair keys, evidence)
/// are written over them.
///
/// Query of the compressed entries: q_c = q·W_C when the pool projects its payload (W_C = the
/// payload map; two-stream: its stream-b half), else q. An MLP compressor has no
/// linear payload map, so q is used as is (a random MLP does not preserve the query–key
/// alignment: recall then measures how much of it survives). RoPE is not modelled on this path:
/// an operator with a RoPE anchor is refused (kvphase::error naming op.rope.anchor), never
/// silently run without it.
///
/// Items are the complete entries plus the raw window (scored q·k). Values: the operator acts on
/// the keys; the values of an entry are pooled by the uniform mean over its unmasked source slots
/// (geometry(): a mean pool on the same grid), so the output weight of a token, the mass of a span
/// and the kv-pairs readout are those of geometry() given the entry scores. For an operator that
/// equals mean pooling (e.g. a channel gate without logits or payload map) every outcome is then
/// the linear mean model's.
///
/// Buffers: general_workspace holds every per-trial buffer (keys, projections, compressed
/// entries); sized on first use, reused afterwards. The compressor (compress::compress_into with
/// this workspace) runs single-threaded inside a trial (sweeps parallelise over trials); its
/// entries are bitwise those of compress::compress.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/linear_model.hpp"
#include "kvphase/sim/noise_scores.hpp"
#include "kvphase/sim/normal.hpp"

namespace kvphase::sim {

/// Writes the n noise keys that key_space_scores(st, q, d, ·, n) scores (row t = token t, d
/// floats, row-major into K) and advances `st` by the same number of blocks. `blocks` is a
/// reused buffer (⌈d/2⌉·32 floats).
inline void key_space_keys(normal_state& st, index_t d, float* K, index_t n, std::vector<float>& blocks) {
  const index_t per = (d + 1) / 2;
  blocks.resize(static_cast<std::size_t>(per * normal_block));
  normal_generator g(st);
  for (index_t t0 = 0; t0 < n; t0 += normal_lanes) {
    g.fill(blocks.data(), per * normal_block);
    const index_t m = std::min<index_t>(normal_lanes, n - t0);
    for (index_t j = 0; j < m; ++j) {
      float* row = K + (t0 + j) * d;
      for (index_t i = 0; i < per; ++i) {
        row[2 * i] = blocks[static_cast<std::size_t>(i * normal_block + j)];
        if (2 * i + 1 < d) row[2 * i + 1] = blocks[static_cast<std::size_t>(i * normal_block + normal_lanes + j)];
      }
    }
  }
  st = g.state();
}

/// Per-trial buffers of the general path (one per thread, reused across trials).
struct general_workspace {
  std::vector<float> keys;        ///< N × d materialised keys
  std::vector<float> aux_keys;    ///< task-specific key rows (kv-pairs: the P pair keys)
  std::vector<float> blocks;      ///< key_space_keys staging
  compress::compress_workspace<float> comp;  ///< the compressor's projections and scratch
  matrix_t<float> compressed;     ///< E × c entries
  std::vector<float> qc;          ///< query of the entries
};

class general_model {
 public:
  general_model() = default;
  general_model(const compress::operator_spec& op, index_t d, index_t window, std::uint64_t params_seed)
      : spec_(op), d_(d) {
    spec_.validate();
    require(spec_.heads == 1 && spec_.head_offsets.empty(), "op.heads", spec_.heads,
            "the general key-space path models one compression head on the spec's grid");
    require(spec_.rope.anchor == compress::rope_anchor::none, "op.rope.anchor", compress::to_string(spec_.rope.anchor),
            "the general key-space path applies no RoPE (its queries are built from key vectors and have no "
            "position): use an operator with rope anchor none");
    require(window >= 0, "window", window, "must be >= 0");
    params_ = compress::make_preset_params<float>(spec_, d, params_seed);
    c_ = params_.output_dim(spec_, d);
    params_.validate(spec_, d_);
    // geometry and value pooling: a mean pool on the same grid (entries_meeting, best_scores,
    // softmax, token and span masses)
    compress::operator_spec geo{.grid = spec_.grid, .pool = compress::pool_kind::mean};
    geo.grid.visibility = compress::visibility_policy::complete;
    geometry_ = linear_model(geo, window);
    window_ = window;
  }

  [[nodiscard]] const compress::operator_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] const compress::pool_params<float>& params() const noexcept { return params_; }
  [[nodiscard]] const linear_model& geometry() const noexcept { return geometry_; }
  [[nodiscard]] index_t output_dim() const noexcept { return c_; }

  /// Compresses K (N × d, row-major) into ws.compressed (num_entries(N) × output_dim()), bitwise
  /// as compress::compress(spec(), params(), K): compress_into on one thread (sweeps parallelise
  /// over trials) with ws's reused buffers, so no allocation once ws is sized.
  void compress_keys(const float* K, index_t N, general_workspace& ws) const {
    const index_t E = spec_.grid.num_entries(N);
    require(E >= 1, "context", N, "too few tokens for one complete entry of the operator");
    if (ws.compressed.rows() != E || ws.compressed.cols() != c_) ws.compressed.resize(E, c_);
    const compress::compress_options opt{.threads = 1, .stores = compress::store_mode::normal};
    compress::compress_into<float>(spec_, params_, matrix_view<float>(K, N, d_),
                                   matrix_mut_view<float>(ws.compressed.data(), E, c_), 0, opt, &ws.comp);
  }

  /// Compresses K (N × d, row-major) and fills b with the entry scores q_c·C_e and the window's
  /// raw scores s[N − window, N) (s: the token scores q·k_t).
  void score(const float* K, index_t N, const float* q, const float* s, linear_buffers& b,
             general_workspace& ws) const {
    compress_keys(K, N, ws);
    const index_t E = ws.compressed.rows();
    auto& qc = ws.qc;
    qc.assign(static_cast<std::size_t>(c_), 0.0f);
    const bool proj = params_.w_c.size() > 0 && spec_.pool != compress::pool_kind::mlp;
    if (proj) {
      const index_t off = spec_.pool == compress::pool_kind::two_stream ? c_ : 0;
      for (index_t j = 0; j < c_; ++j) {
        double v = 0;
        for (index_t i = 0; i < d_; ++i) v += static_cast<double>(q[i]) * params_.w_c(i, off + j);
        qc[static_cast<std::size_t>(j)] = static_cast<float>(v);
      }
    } else {
      for (index_t j = 0; j < std::min(c_, d_); ++j) qc[static_cast<std::size_t>(j)] = q[j];
    }
    const index_t nw = std::min(window_, N);
    b.n_entries = E;
    b.n_window = nw;
    b.n_tokens = N;
    if (static_cast<index_t>(b.entry.size()) < E + nw) b.entry.resize(static_cast<std::size_t>(E + nw));
    for (index_t e = 0; e < E; ++e) {
      const float* row = ws.compressed.data() + e * c_;
      double v = 0;
      for (index_t j = 0; j < c_; ++j) v += static_cast<double>(row[j]) * qc[static_cast<std::size_t>(j)];
      b.entry[static_cast<std::size_t>(e)] = static_cast<float>(v);
    }
    std::copy(s + N - nw, s + N, b.entry.begin() + E);
    b.items = b.entry.data();
  }

 private:
  compress::operator_spec spec_{};
  compress::pool_params<float> params_{};
  index_t d_ = 0, c_ = 0, window_ = 0;
  linear_model geometry_{};
};

}  // namespace kvphase::sim
