#pragma once
/// \file compress/inspect.hpp
/// The phase profile of a real compressor (kvphase-inspect).
///
/// From weights alone (gate_slot_profile): for every output channel k the gate's slot
/// preference with content logits set aside, profile_k[r] = softmax_r(B_{r,k}) over the W slots
/// of an entry (two_stream: slots r < S read stream a's bias row r, slots r ≥ S stream b's row
/// r − S, as the compressor does), its preferred slot argmax_r, and the histogram of preferred
/// slots over channels.
///
/// From captured activations (token_readout): x (N × d) is compressed exactly (position-free:
/// the spec's RoPE is removed so that the readout reflects the gate alone); the token shares
/// share(j, e) = mean_k α_{j,e,k} (the channel-averaged gate weight of token j in entry e) come
/// from the public projections. Token j's key is k_j = RMSNorm_w(payload_j) (stream b for
/// two_stream). For each target t with query q_t (given, c wide, or k_t itself — a query that
/// looks for exactly that token):
///  - full attention: p(j) = softmax_j(q_t·k_j / √c) over all N tokens; mass_full = p(t);
///    hit_full = (argmax_j p(j) = t);
///  - compressed: π(e) = softmax_e(q_t·E_e / √c) over the complete entries,
///    m(j) = Σ_e π(e) share(j, e); mass_compressed = m(t); hit = (argmax_j m(j) = t);
///  - retention(t) = max_e share(t, e) (1 for full attention).
/// Only tokens inside complete entries are targets (t < entries · S). Computed in double.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::compress {

/// Slot preference of a channel-wise gate from its bias alone.
struct slot_profile {
  index_t window = 0, stride = 0, channels = 0;
  std::vector<std::vector<double>> profile;  ///< [channel][slot]: softmax of the bias over the window
  std::vector<index_t> preferred;            ///< [channel]: argmax slot (0 … W−1)
  std::vector<std::int64_t> histogram;       ///< [slot]: channels preferring it
};

/// Throws kvphase::error unless the pool is channel_gate or two_stream with a slot bias.
template <class Real>
slot_profile gate_slot_profile(const operator_spec& spec, const pool_params<Real>& p) {
  require(spec.pool == pool_kind::channel_gate || spec.pool == pool_kind::two_stream, "pool", to_string(spec.pool),
          "slot profiles need a channel-wise gate (channel_gate or two_stream)");
  require(p.slot_bias_c.size() != 0, "params.slot_bias_c", "(empty)", "slot profiles need a slot bias");
  const bool ts = spec.pool == pool_kind::two_stream;
  slot_profile out;
  out.window = spec.grid.window;
  out.stride = spec.grid.stride;
  out.channels = ts ? p.slot_bias_c.cols() / 2 : p.slot_bias_c.cols();
  out.histogram.assign(static_cast<std::size_t>(out.window), 0);
  for (index_t k = 0; k < out.channels; ++k) {
    std::vector<double> v(static_cast<std::size_t>(out.window));
    for (index_t r = 0; r < out.window; ++r) {
      const index_t row = ts ? r % out.stride : r, col = (ts && r >= out.stride) ? out.channels + k : k;
      v[static_cast<std::size_t>(r)] = static_cast<double>(p.slot_bias_c(row, col));
    }
    const double mx = *std::max_element(v.begin(), v.end());
    double s = 0;
    for (auto& e : v) s += (e = std::exp(e - mx));
    for (auto& e : v) e /= s;
    const auto best = static_cast<index_t>(std::max_element(v.begin(), v.end()) - v.begin());
    out.preferred.push_back(best);
    ++out.histogram[static_cast<std::size_t>(best)];
    out.profile.push_back(std::move(v));
  }
  return out;
}

/// Per-target readout of a compressor on captured activations (see the file comment).
struct token_readout {
  index_t targets = 0;  ///< tokens 0 … targets − 1 were read out
  std::vector<double> mass_compressed, mass_full, retention;
  std::vector<std::uint8_t> hit_compressed, hit_full;
};

/// x: N × d hidden states; queries: empty or N × c (query t looks for token t). Throws
/// kvphase::error for invalid shapes or a pool without projections.
template <class Real>
token_readout read_tokens(const operator_spec& spec_in, const pool_params<Real>& p, const matrix_t<Real>& x,
                          const matrix_t<Real>& queries = {}) {
  require(spec_in.pool == pool_kind::channel_gate || spec_in.pool == pool_kind::two_stream, "pool",
          to_string(spec_in.pool), "the readout needs a channel-wise gate (channel_gate or two_stream)");
  operator_spec spec = spec_in;
  spec.rope.anchor = rope_anchor::none;
  const index_t N = x.rows(), d = x.cols();
  const matrix_t<Real> E = compress<Real>(spec, p, x);
  const index_t c = p.output_dim(spec, d), nE = E.rows();
  const bool ts = spec.pool == pool_kind::two_stream;
  require(queries.size() == 0 || (queries.rows() == N && queries.cols() == c), "queries shape",
          std::to_string(queries.rows()) + "x" + std::to_string(queries.cols()),
          "must be tokens x c = " + std::to_string(N) + "x" + std::to_string(c));
  const auto pr = project_tokens<Real>(spec, p, x);
  const chunk_grid g = spec.head_grid(0);
  const index_t W = spec.grid.window, S = spec.grid.stride;
  // shares: for entry e, slot r (token first + r), channel-averaged gate weight
  std::vector<double> share(static_cast<std::size_t>(nE * W), 0.0);
  std::vector<double> logit(static_cast<std::size_t>(W));
  for (index_t e = 0; e < nE; ++e) {
    const token_range src = g.sources(e);
    for (index_t k = 0; k < c; ++k) {
      double mx = -INFINITY;
      for (index_t r = 0; r < W; ++r) {
        const index_t t = src.first + r;
        if (t < 0) continue;
        const index_t half = (ts && r >= S) ? c : 0;
        const index_t brow = ts ? r % S : r;
        double l = static_cast<double>(pr.logits(t, half + k));
        if (p.slot_bias_c.size()) l += static_cast<double>(p.slot_bias_c(brow, half + k));
        logit[static_cast<std::size_t>(r)] = l;
        mx = std::max(mx, l);
      }
      double s = 0;
      for (index_t r = 0; r < W; ++r)
        if (src.first + r >= 0) s += std::exp(logit[static_cast<std::size_t>(r)] - mx);
      for (index_t r = 0; r < W; ++r)
        if (src.first + r >= 0)
          share[static_cast<std::size_t>(e * W + r)] +=
              std::exp(logit[static_cast<std::size_t>(r)] - mx) / s / static_cast<double>(c);
    }
  }
  // keys: RMSNorm_w of the token's own-block payload
  matrix_t<double> K(N, c);
  for (index_t t = 0; t < N; ++t) {
    double ss = 0;
    for (index_t k = 0; k < c; ++k) ss += std::pow(static_cast<double>(pr.payload(t, (ts ? c : 0) + k)), 2);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c) + spec.rms_eps);
    for (index_t k = 0; k < c; ++k)
      K(t, k) = static_cast<double>(pr.payload(t, (ts ? c : 0) + k)) * inv *
                (p.rms_weight.size() ? static_cast<double>(p.rms_weight[k]) : 1.0);
  }
  const matrix_t<double> Ed = E.template cast<double>();
  token_readout out;
  out.targets = std::min(N, nE * S);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c));
  std::vector<double> m(static_cast<std::size_t>(N)), pe(static_cast<std::size_t>(nE));
  for (index_t t = 0; t < out.targets; ++t) {
    const vector_t<double> q = queries.size() ? vector_t<double>(queries.row(t).transpose().template cast<double>())
                                              : vector_t<double>(K.row(t).transpose());
    // full attention
    const vector_t<double> sf = (K * q) * scale;
    const double mf = sf.maxCoeff();
    const double zf = (sf.array() - mf).exp().sum();
    index_t best_f = 0;
    sf.maxCoeff(&best_f);
    out.mass_full.push_back(std::exp(sf[t] - mf) / zf);
    out.hit_full.push_back(best_f == t ? 1 : 0);
    // compressed attention, spread back onto tokens by their shares
    const vector_t<double> se = (Ed * q) * scale;
    const double me = se.maxCoeff();
    double ze = 0;
    for (index_t e = 0; e < nE; ++e) ze += (pe[static_cast<std::size_t>(e)] = std::exp(se[e] - me));
    std::fill(m.begin(), m.end(), 0.0);
    double ret = 0;
    for (index_t e = 0; e < nE; ++e) {
      const index_t first = g.sources(e).first;
      for (index_t r = 0; r < W; ++r) {
        const index_t j = first + r;
        if (j < 0 || j >= N) continue;
        const double sh = share[static_cast<std::size_t>(e * W + r)];
        m[static_cast<std::size_t>(j)] += pe[static_cast<std::size_t>(e)] / ze * sh;
        if (j == t) ret = std::max(ret, sh);
      }
    }
    const auto best_c = static_cast<index_t>(std::max_element(m.begin(), m.end()) - m.begin());
    out.mass_compressed.push_back(m[static_cast<std::size_t>(t)]);
    out.hit_compressed.push_back(best_c == t ? 1 : 0);
    out.retention.push_back(ret);
  }
  return out;
}

}  // namespace kvphase::compress
