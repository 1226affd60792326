#pragma once
/// \file sim/general_model.hpp
/// Key-space model for operators that are not linear in the keys (max pooling, channel gates,
/// the two-stream V4-CSA form, NSA's MLP, RMSNorm, per-slot logit maps): the trial's keys are
/// materialised (N × d, a reused buffer) and compressed by compress::compress_into with fixed
/// random parameters drawn once per configuration (compress::make_preset_params, seed =
/// params_seed), then scored against the query.
///
/// Query of the compressed entries: q_c = q·W_C when the pool projects its payload (W_C = the
/// payload map; two-stream: its stream-b half), else q. RoPE is not applied in sweeps (anchor
/// forced to none): a query built from a key vector has no position. An MLP compressor has no
/// linear payload map, so q is used as is (a random MLP does not preserve the query–key
/// alignment: recall then measures how much of it survives).
///
/// Items are the complete entries plus the raw window (scored q·k); hit, margin and mass are
/// defined as for linear models, with the mass of an entry counted whole when it meets the
/// needle (the pool has no per-token weight).

#include <cstdint>
#include <string>
#include <vector>

#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/linear_model.hpp"

namespace kvphase::sim {

class general_model {
 public:
  general_model() = default;
  general_model(const compress::operator_spec& op, index_t d, index_t window, std::uint64_t params_seed)
      : spec_(op), d_(d) {
    spec_.rope.anchor = compress::rope_anchor::none;
    spec_.validate();
    require(spec_.heads == 1, "heads", spec_.heads, "sweeps model one compression head");
    params_ = compress::make_preset_params<float>(spec_, d, params_seed);
    c_ = params_.output_dim(spec_, d);
    // geometry helper: a mean pool on the same grid (entries_meeting, best_scores, softmax)
    compress::operator_spec geo{.grid = spec_.grid, .pool = compress::pool_kind::mean};
    geo.grid.visibility = compress::visibility_policy::complete;
    geometry_ = linear_model(geo, window);
    window_ = window;
  }

  [[nodiscard]] const compress::operator_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] const linear_model& geometry() const noexcept { return geometry_; }

  /// Compresses K (N × d, row-major) and fills b with the entry scores q_c·C_e and the window's
  /// raw scores s[N − window, N).
  void score(const float* K, index_t N, const float* q, const float* s, linear_buffers& b,
             matrix_t<float>& compressed, std::vector<float>& qc) const {
    const index_t E = spec_.grid.num_entries(N);
    compressed.resize(E, c_);
    compress::compress_into<float>(spec_, params_, matrix_view<float>(K, N, d_),
                                   matrix_mut_view<float>(compressed.data(), E, c_));
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
      double v = 0;
      for (index_t j = 0; j < c_; ++j) v += static_cast<double>(compressed(e, j)) * qc[static_cast<std::size_t>(j)];
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
