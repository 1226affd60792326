#pragma once
/// \file sim/linear_model.hpp
/// Attention of one query over a context whose keys enter only through their scores
/// s_t = q·k_t: exact for every pool that is linear in the keys (identity, mean, fixed slot
/// weights, slot-softmax gates with a bias and key-independent content logits), because
/// q·(Σ_r w_r k_r) = Σ_r w_r s_r. Full attention is the identity pool (W = S = 1).
///
/// Items a query at position N (after N context tokens) sees: the complete entries
/// e = 0 … E−1 (last source ≤ N − 1) and, for a compressed model, the last `window` raw tokens;
/// one joint softmax with logit β·score over all of them.
///
/// Per-token weight of an entry: w(e, r) for slot r of entry e: the spec's slot weights
/// renormalised over unmasked slots, or (slot gate with content logits) softmax_r(z_t + b_r)
/// over the unmasked slots, z_t the token's content logit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/capabilities.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::sim {

/// Per-trial buffers of one linear model (sized once, reused).
struct linear_buffers {
  std::vector<float> entry;   ///< entry scores then window scores (compressed models)
  const float* items = nullptr;  ///< the item scores: entry.data(), or the token scores (full)
  std::vector<float> prob;    ///< exp(β(x − max)) of every item after softmax(β, true)
  std::vector<float> weight;  ///< E × W per-entry slot weights (content-gated pools only)
  index_t n_entries = 0;
  index_t n_window = 0;
  index_t n_tokens = 0;
  float max_score = 0;
  float beta = 0;
  double z_sum = 0;
};

class linear_model {
 public:
  linear_model() = default;
  /// Compressed model from an operator spec, with `window` raw tokens in the joint softmax.
  linear_model(const compress::operator_spec& op, index_t window) : grid_(op.grid), window_(window) {
    op.validate();
    const auto caps = compress::capabilities(op);
    require(caps.score_exact, "op", op.name.empty() ? std::string(compress::to_string(op.pool)) : op.name,
            "the linear sweep engines are exact only for linear, plain operators: " + caps.score_reason);
    require(window >= 0, "window", window, "must be >= 0");
    W_ = grid_.window;
    content_ = caps.content_gated;
    tau_ = static_cast<float>(op.content_std);
    bias_.assign(static_cast<std::size_t>(W_), 0.0f);
    if (op.pool == compress::pool_kind::slot_gate && !op.slot_bias.empty())
      for (index_t r = 0; r < W_; ++r) bias_[static_cast<std::size_t>(r)] = static_cast<float>(op.slot_bias[static_cast<std::size_t>(r)]);
    fixed_.assign(static_cast<std::size_t>(W_ * W_), 0.0f);
    for (index_t m = 0; m < W_; ++m) {
      const auto w = op.linear_slot_weights(m);
      for (index_t r = 0; r < W_; ++r) fixed_[static_cast<std::size_t>(m * W_ + r)] = static_cast<float>(w[static_cast<std::size_t>(r)]);
    }
  }
  /// Full attention: every token its own entry.
  static linear_model full() {
    linear_model m;
    m.grid_ = compress::chunk_grid{.window = 1, .stride = 1};
    m.W_ = 1;
    m.fixed_.assign(1, 1.0f);
    m.bias_.assign(1, 0.0f);
    return m;
  }

  [[nodiscard]] const compress::chunk_grid& grid() const noexcept { return grid_; }
  [[nodiscard]] index_t window() const noexcept { return window_; }
  [[nodiscard]] bool content_gated() const noexcept { return content_; }
  [[nodiscard]] float content_std() const noexcept { return tau_; }

  /// Pools token scores s[0, N) (content logits z[0, N) when content-gated, else ignored) into
  /// b.entry[0, E) and appends the window tokens' scores.
  void pool(const float* s, const float* z, index_t N, linear_buffers& b) const {
    const index_t E = grid_.num_entries(N);
    const index_t nw = std::min(window_, N);
    b.n_entries = E;
    b.n_window = nw;
    b.n_tokens = N;
    if (W_ == 1 && grid_.stride == 1 && grid_.origin == 0 && nw == 0) {
      b.items = s;  // identity pooling: the items are the tokens
      return;
    }
    if (static_cast<index_t>(b.entry.size()) < E + nw) b.entry.resize(static_cast<std::size_t>(E + nw));
    float* es = b.entry.data();
    b.items = es;
    if (W_ == 1 && grid_.stride == 1) {
      std::copy(s + grid_.sources(0).first, s + grid_.sources(0).first + E, es);
    } else if (!content_) {
      // entries with masked slots (they lead), then the others, whose first source is f0 + e·S
      index_t e = 0;
      for (; e < E && grid_.sources(e).first < 0; ++e) {
        const index_t f = grid_.sources(e).first;
        const index_t m = -f;
        const float* w = fixed_.data() + m * W_;
        float acc = 0;
        for (index_t r = m; r < W_; ++r) acc = std::fma(w[r], s[f + r], acc);
        es[e] = acc;
      }
      if (e < E) pool_unmasked(s, N, es, e, E, grid_.sources(e).first - e * grid_.stride);
    } else {
      if (static_cast<index_t>(b.weight.size()) < E * W_) b.weight.resize(static_cast<std::size_t>(E * W_));
      for (index_t e = 0; e < E; ++e) {
        const index_t f = grid_.sources(e).first;
        const index_t m = std::max<index_t>(0, -f);
        float* w = b.weight.data() + e * W_;
        float mx = -std::numeric_limits<float>::infinity();
        for (index_t r = 0; r < m; ++r) w[r] = 0;
        for (index_t r = m; r < W_; ++r) {
          w[r] = z[f + r] + bias_[static_cast<std::size_t>(r)];
          mx = std::max(mx, w[r]);
        }
        float sum = 0;
        for (index_t r = m; r < W_; ++r) {
          w[r] = std::exp(w[r] - mx);
          sum += w[r];
        }
        // fmas in slot order, as the fixed-weight pools (written out: left as a·b + c, GCC fused
        // it at -O2 but not at -O3)
        float acc = 0;
        for (index_t r = m; r < W_; ++r) {
          w[r] /= sum;
          acc = std::fma(w[r], s[f + r], acc);
        }
        es[e] = acc;
      }
    }
    std::copy(s + N - nw, s + N, es + E);
  }

  /// es[e] = Σ_r w_r·s[f0 + e·S + r] for e ∈ [e0, E) (no masked slot; s holds n tokens): fmas in
  /// slot order, vectorised across entries. Slot r of 16 consecutive entries is a stride-S slice;
  /// on 512-bit batches with S ≤ 4 it is taken from contiguous loads by one or two two-table
  /// permutes (S = 4: lanes 0–7 and 8–15 from two pairs of vectors, joined by a blend), elsewhere by
  /// a gather. Only the data movement differs: every lane and the scalar tail round alike where
  /// the arch's fma is fused, and no path reads a token outside [0, n).
  template <class Arch = simd::default_arch>
  void pool_unmasked(const float* s, [[maybe_unused]] index_t n, float* es, index_t e0, index_t E, index_t f0) const noexcept {
    const index_t S = grid_.stride;
    const float* w = fixed_.data();
    index_t e = e0;
    if constexpr (!simd::is_scalar_v<Arch>) {
      using B = xsimd::batch<float, Arch>;
      using BI = xsimd::batch<std::int32_t, Arch>;
      constexpr index_t L = static_cast<index_t>(B::size);
#if defined(__AVX512F__)
      if constexpr (L == 16) {
        if (S <= 4 && S != 3) {
          // lane l of slot r is element l·S of the 16·S floats from base + r
          const __m512i idx = S == 2 ? _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
                                     : _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
          const auto slice = [&](const float* p) {
            if (S == 1) return _mm512_loadu_ps(p);
            if (S == 2) return _mm512_permutex2var_ps(_mm512_loadu_ps(p), idx, _mm512_loadu_ps(p + 16));
            const __m512 lo = _mm512_permutex2var_ps(_mm512_loadu_ps(p), idx, _mm512_loadu_ps(p + 16));
            const __m512 hi = _mm512_permutex2var_ps(_mm512_loadu_ps(p + 32), idx, _mm512_loadu_ps(p + 48));
            return _mm512_mask_blend_ps(0xFF00, lo, hi);
          };
          // G batches at a time (four, so that four fma chains are in flight; then single ones);
          // the loads of slot W − 1 of the last batch reach its base + W − 1 + 16·S − 1
          const auto batches = [&](auto group) {
            constexpr index_t G = decltype(group)::value;
            for (; e + G * L <= E && f0 + (e + (G - 1) * L) * S + W_ + 16 * S - 2 < n; e += G * L) {
              const float* base = s + f0 + e * S;
              __m512 acc[G];
              for (index_t g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
              for (index_t r = 0; r < W_; ++r) {
                const __m512 wr = _mm512_set1_ps(w[r]);
                for (index_t g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(wr, slice(base + g * L * S + r), acc[g]);
              }
              for (index_t g = 0; g < G; ++g) _mm512_storeu_ps(es + e + g * L, acc[g]);
            }
          };
          batches(std::integral_constant<index_t, 4>{});
          batches(std::integral_constant<index_t, 1>{});
        }
      }
#endif
      alignas(64) std::int32_t lane[L];
      for (index_t l = 0; l < L; ++l) lane[l] = static_cast<std::int32_t>(l * S);
      const BI idx = BI::load_aligned(lane);
      for (; e + L <= E; e += L) {
        const float* base = s + f0 + e * S;
        B acc(0.0f);
        for (index_t r = 0; r < W_; ++r) acc = simd::fma(B(w[r]), B::gather(base + r, idx), acc);
        acc.store_unaligned(es + e);
      }
    }
    for (; e < E; ++e) {
      const float* x = s + f0 + e * S;
      float acc = 0;
      for (index_t r = 0; r < W_; ++r) acc = std::fma(w[r], x[r], acc);
      es[e] = acc;
    }
  }

  /// Weight of slot r of entry e (after pool()).
  [[nodiscard]] float weight(const linear_buffers& b, index_t e, index_t r) const noexcept {
    if (content_) return b.weight[static_cast<std::size_t>(e * W_ + r)];
    const index_t m = std::max<index_t>(0, -grid_.sources(e).first);
    return fixed_[static_cast<std::size_t>(m * W_ + r)];
  }

  /// Range [lo, hi] of complete entries that contain a token of [a, b) (lo > hi if none).
  void entries_meeting(const linear_buffers& bf, index_t a, index_t b, index_t& lo, index_t& hi) const {
    lo = std::numeric_limits<index_t>::max();
    hi = -1;
    grid_.for_each_entry_containing(a, [&](index_t e, index_t) { lo = std::min(lo, e); });
    grid_.for_each_entry_containing(b - 1, [&](index_t e, index_t) { hi = std::max(hi, e); });
    hi = std::min(hi, bf.n_entries - 1);
  }

  /// Softmax normaliser Z = Σ_items exp(β(x − max)); with `store`, also keeps every item's
  /// exp(β(x − max)) in b.prob (needed by token_mass()). `max` is the largest item score if
  /// known (e.g. from best_scores()), else NaN.
  template <class Arch = simd::default_arch>
  void softmax(linear_buffers& b, float beta, bool store = false,
               float max = std::numeric_limits<float>::quiet_NaN()) const {
    const index_t n = b.n_entries + b.n_window;
    const float* x = b.items;
    b.max_score = std::isnan(max) ? simd::max_value<float, Arch>(x, n) : max;
    b.beta = beta;
    const float shift = beta * b.max_score;
    double z = 0;
    if (store && static_cast<index_t>(b.prob.size()) < n) b.prob.resize(static_cast<std::size_t>(n));
    float* out = store ? b.prob.data() : nullptr;
    index_t i = 0;
    if constexpr (!simd::is_scalar_v<Arch>) {
      using B = xsimd::batch<float, Arch>;
      constexpr index_t L = B::size;
      const B vb(beta), vs(shift);
      B acc0(0.0f), acc1(0.0f);
      for (; i + 2 * L <= n; i += 2 * L) {
        const B e0 = xsimd::exp(simd::fma(B::load_unaligned(x + i), vb, -vs));
        const B e1 = xsimd::exp(simd::fma(B::load_unaligned(x + i + L), vb, -vs));
        if (out) {
          e0.store_unaligned(out + i);
          e1.store_unaligned(out + i + L);
        }
        acc0 += e0;
        acc1 += e1;
      }
      z = static_cast<double>(simd::hsum(acc0 + acc1));
    }
    for (; i < n; ++i) {
      const float e = std::exp(std::fma(x[i], beta, -shift));
      if (out) out[i] = e;
      z += static_cast<double>(e);
    }
    b.z_sum = z;
  }

  /// exp(β(x_i − max)) of item i (after softmax()).
  [[nodiscard]] static double item_exp(const linear_buffers& b, index_t i) noexcept {
    return std::exp(static_cast<double>(b.beta) * (static_cast<double>(b.items[i]) - b.max_score));
  }

  /// Output weight of the tokens [a, b): Σ_items p_item · (pooled weight of [a, b) in the item).
  /// Call after softmax().
  [[nodiscard]] double span_mass(const linear_buffers& bf, index_t a, index_t b) const {
    index_t lo, hi;
    entries_meeting(bf, a, b, lo, hi);
    double m = 0;
    for (index_t e = lo; e <= hi; ++e) {
      const index_t f = grid_.sources(e).first;
      double w = 0;
      for (index_t t = std::max(a, f); t < std::min(b, f + W_); ++t) w += weight(bf, e, t - f);
      m += item_exp(bf, e) * w;
    }
    const index_t w0 = bf.n_tokens - bf.n_window;
    for (index_t t = std::max(a, w0); t < b; ++t) m += item_exp(bf, bf.n_entries + t - w0);
    return m / bf.z_sum;
  }

  /// Attention mass of the items that meet [a, b), each counted whole (after softmax()).
  [[nodiscard]] double items_mass(const linear_buffers& bf, index_t a, index_t b) const {
    index_t lo, hi;
    entries_meeting(bf, a, b, lo, hi);
    double m = 0;
    for (index_t e = lo; e <= hi; ++e) m += item_exp(bf, e);
    const index_t w0 = bf.n_tokens - bf.n_window;
    for (index_t t = std::max(a, w0); t < b; ++t) m += item_exp(bf, bf.n_entries + t - w0);
    return m / bf.z_sum;
  }

  /// Output weight of the single token t (after softmax(β, true)).
  [[nodiscard]] double token_mass(const linear_buffers& bf, index_t t) const {
    double m = 0;
    grid_.for_each_entry_containing(t, [&](index_t e, index_t r) {
      if (e < bf.n_entries) m += static_cast<double>(bf.prob[static_cast<std::size_t>(e)]) * weight(bf, e, r);
    });
    const index_t w0 = bf.n_tokens - bf.n_window;
    if (t >= w0) m += static_cast<double>(bf.prob[static_cast<std::size_t>(bf.n_entries + t - w0)]);
    return m / bf.z_sum;
  }

  /// Best item score among items meeting [a, b), and best among all others (before softmax()).
  void best_scores(const linear_buffers& bf, index_t a, index_t b, float& target, float& other) const {
    index_t lo, hi;
    entries_meeting(bf, a, b, lo, hi);
    const float* x = bf.items;
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    target = ninf;
    other = ninf;
    for (index_t e = lo; e <= hi; ++e) target = std::max(target, x[e]);
    other = std::max(simd::max_value<float>(x, std::max<index_t>(0, std::min(lo, bf.n_entries))),
                     hi + 1 < bf.n_entries ? simd::max_value<float>(x + hi + 1, bf.n_entries - hi - 1) : ninf);
    if (lo > hi) other = simd::max_value<float>(x, bf.n_entries);
    const index_t w0 = bf.n_tokens - bf.n_window;
    for (index_t i = 0; i < bf.n_window; ++i) {
      const index_t t = w0 + i;
      const float v = x[bf.n_entries + i];
      if (t >= a && t < b) target = std::max(target, v);
      else other = std::max(other, v);
    }
  }

 private:
  compress::chunk_grid grid_{};
  index_t W_ = 1;
  index_t window_ = 0;
  bool content_ = false;
  float tau_ = 0;
  std::vector<float> bias_;
  std::vector<float> fixed_;  // W × W: row m = slot weights with m leading slots masked
};

}  // namespace kvphase::sim
