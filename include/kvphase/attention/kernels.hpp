#pragma once
/// \file attention/kernels.hpp
/// Attention kernels: scaled scores, softmax with an optional sink logit, weighted sum of values,
/// and the streaming (online-softmax, flash-style) form that never materialises the scores of a
/// long key sequence.
///
/// Notation used in every comment below:
///   d   key/query channels          dv  value channels
///   n   keys attended by one query  M   queries in a batch
///   K   keys,   [n × ldk] row-major, the first d channels of a row are the key (ldk ≥ d)
///   V   values, [n × ldv] row-major, the first dv channels of a row are the value (ldv ≥ dv)
///   q   one query, [d];  Q  queries [M × d]
///   s   scores ℓ_j = scale·⟨q, k_j⟩, scale = 1/√d by default
///   sink: a logit that enters only the softmax denominator (DeepSeek-V4):
///         p_j = exp(ℓ_j) / (exp(sink) + Σ_k exp(ℓ_k));  sink = −∞ means no sink.
///   o   output, [dv]:  o = Σ_j p_j v_j.
/// With no keys at all the output is 0 (every unit of mass on the sink, or nothing to attend).
///
/// Kernels are noexcept and check nothing; the model functions validate once per call.
/// Every kernel is templated on Real (float or double) and on Arch (an xsimd arch tag, or
/// kvphase::simd::scalar for the plain-loop reference through the same call shape). Sums run in
/// index order, so results are bitwise reproducible for a given Arch.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::attention {

/// "No sink": a logit of −∞.
template <class Real>
inline constexpr Real no_sink = -std::numeric_limits<Real>::infinity();

/// Default score scale 1/√d.
template <class Real>
inline Real default_scale(index_t d) noexcept {
  return Real(1) / std::sqrt(static_cast<Real>(d));
}

// ---- scores ------------------------------------------------------------------------------------

namespace detail {
/// s[j] = scale · simd::dot(q, row_of(j), d) for j ∈ [0, n): where simd::with_held_width allows
/// (fused-FMA paths, d of 1, 2, 4 or 8 batches), whole blocks of L rows with q held in registers
/// (simd::scaled_dots_held, the same bits), the rest row by row.
template <class Real, class Arch, class RowOf>
inline void score_any(const Real* q, const RowOf& row_of, index_t n, index_t d, Real scale, Real* s) noexcept {
  index_t done = 0;
  if constexpr (!simd::is_scalar_v<Arch>)  // (the scalar path has no batch type)
    done = simd::with_held_width<Real, Arch>(d, [&](auto nb) {
      constexpr int NB = decltype(nb)::value;
      using B = xsimd::batch<Real, Arch>;
      constexpr index_t L = static_cast<index_t>(B::size);
      B qh[NB];
      for (int c = 0; c < NB; ++c) qh[c] = B::load_unaligned(q + c * L);
      const B sc(scale);
      index_t j = 0;
      for (; j + L <= n; j += L)
        simd::scaled_dots_held<Real, Arch, NB>(qh, [&](index_t k) { return row_of(j + k); }, sc)
            .store_unaligned(s + j);
      return j;
    });
  for (index_t j = done; j < n; ++j) s[j] = scale * simd::dot<Real, Arch>(q, row_of(j), d);
}
}  // namespace detail

/// s[j] = scale · ⟨q, K[j, 0:d]⟩ for j ∈ [0, n): per score scale · simd::dot (computed a block
/// of rows at a time where the width allows, the same bits).
///   q: [d]; K: [n × ldk]; s: [n] (written).
template <class Real, class Arch = simd::default_arch>
inline void score_rows(const Real* q, const Real* K, index_t ldk, index_t n, index_t d, Real scale, Real* s) noexcept {
  detail::score_any<Real, Arch>(
      q, [&](index_t j) { return K + j * ldk; }, n, d, scale, s);
}

/// s[j] = scale · ⟨q, K[idx[j], 0:d]⟩ for j ∈ [0, n): scores of selected rows (as score_rows).
///   q: [d]; K: [rows × ldk]; idx: [n] row indices; s: [n] (written).
template <class Real, class Arch = simd::default_arch>
inline void score_indexed(const Real* q, const Real* K, index_t ldk, const index_t* idx, index_t n, index_t d,
                          Real scale, Real* s) noexcept {
  detail::score_any<Real, Arch>(
      q, [&](index_t j) { return K + idx[j] * ldk; }, n, d, scale, s);
}

// ---- softmax with sink ---------------------------------------------------------------------------

/// In place: x[j] ← exp(x[j]) / (exp(sink) + Σ_k exp(x[k])), j ∈ [0, n), computed with the max
/// shift m = max(sink, max_j x[j]) so no term overflows. sink = −∞: ordinary softmax.
/// Returns log of the denominator (the log-sum-exp including the sink); −∞ when n = 0 and there
/// is no sink (x untouched). Entries of −∞ get weight exactly 0. x: [n].
template <class Real, class Arch = simd::default_arch>
inline Real softmax_with_sink(Real* x, index_t n, Real sink) noexcept {
  const Real mx = simd::max_value<Real, Arch>(x, n);
  const Real m = std::max(mx, sink);
  if (m == -std::numeric_limits<Real>::infinity()) return m;  // nothing at all
  Real l = simd::exp_shift_sum<Real, Arch>(x, m, n);
  if (sink > -std::numeric_limits<Real>::infinity()) l += std::exp(sink - m);
  simd::scale<Real, Arch>(Real(1) / l, x, n);
  return m + std::log(l);
}

// ---- weighted sum ---------------------------------------------------------------------------------

/// out[c] = Σ_j p[j] · V[j, c], c ∈ [0, dv), j summed in index order.
///   p: [n] weights; V: [n × ldv]; out: [dv] (overwritten).
template <class Real, class Arch = simd::default_arch>
inline void weighted_sum(const Real* p, const Real* V, index_t ldv, index_t n, index_t dv,
                         Real* out) noexcept {
  std::fill(out, out + dv, Real(0));
  for (index_t j = 0; j < n; ++j) simd::axpy<Real, Arch>(p[j], V + j * ldv, out, dv);
}

// ---- streaming (online) softmax ----------------------------------------------------------------------

/// Flash-style accumulator for ONE query over any number of key segments: keys are scored in
/// blocks of at most `block` keys; a running max m, running sum l = Σ exp(ℓ_j − m) and running
/// output acc = Σ exp(ℓ_j − m)·v_j are rescaled when m grows. Scores of a long sequence are never
/// stored: memory is O(block + dv). Segments may come from different K/V matrices (compressed
/// entries and a raw window in one joint softmax). finish() divides by l + exp(sink − m).
///
/// Construct once (allocates), reuse across queries with reset(); the add/finish calls are
/// noexcept and allocate nothing.
template <class Real, class Arch = simd::default_arch>
class online_softmax {
 public:
  explicit online_softmax(index_t dv = 0, index_t block = 256)
      : dv_(dv), block_(block), acc_(static_cast<std::size_t>(std::max<index_t>(dv, 1))),
        s_(static_cast<std::size_t>(std::max<index_t>(block, 1))) {
    require(dv >= 0, "dv", dv, "must be >= 0");
    require(block >= 1, "block", block, "must be >= 1");
    reset();
  }

  /// Starts a new query: m = −∞, l = 0, acc = 0.
  void reset() noexcept {
    m_ = -std::numeric_limits<Real>::infinity();
    l_ = 0;
    count_ = 0;
    std::fill(acc_.begin(), acc_.end(), Real(0));
  }

  [[nodiscard]] index_t dv() const noexcept { return dv_; }
  [[nodiscard]] index_t keys_seen() const noexcept { return count_; }
  [[nodiscard]] Real running_max() const noexcept { return m_; }
  [[nodiscard]] Real running_sum() const noexcept { return l_; }
  /// acc[c] = Σ_j exp(ℓ_j − m)·v_j[c], c ∈ [0, dv): the unnormalised running output.
  [[nodiscard]] const Real* accumulator() const noexcept { return acc_.data(); }

  /// Attends rows [0, n) of K/V.  q: [d]; K: [n × ldk]; V: [n × ldv] (first dv_ channels).
  void add_rows(const Real* q, const Real* K, index_t ldk, const Real* V, index_t ldv, index_t n,
                index_t d, Real scale) noexcept {
    for (index_t j0 = 0; j0 < n; j0 += block_) {
      const index_t b = std::min(block_, n - j0);
      score_rows<Real, Arch>(q, K + j0 * ldk, ldk, b, d, scale, s_.data());
      absorb(s_.data(), b, [&](index_t j) { return V + (j0 + j) * ldv; });
    }
  }

  /// Attends rows idx[0..n) of K/V (selected entries), in the given order.
  void add_indexed(const Real* q, const Real* K, index_t ldk, const Real* V, index_t ldv,
                   const index_t* idx, index_t n, index_t d, Real scale) noexcept {
    for (index_t j0 = 0; j0 < n; j0 += block_) {
      const index_t b = std::min(block_, n - j0);
      score_indexed<Real, Arch>(q, K, ldk, idx + j0, b, d, scale, s_.data());
      absorb(s_.data(), b, [&](index_t j) { return V + idx[j0 + j] * ldv; });
    }
  }

  /// Attends rows [0, n) of V whose scores s[j] = scale·⟨q, k_j⟩ are already computed (by
  /// score_rows or score_indexed), n ≤ block: add_rows' step after its scores, so score_rows
  /// then add_scored is add_rows on n ≤ block rows, bit for bit. For callers that score several
  /// queries against one block of keys before reading its values. s: [n], overwritten.
  void add_scored(Real* s, const Real* V, index_t ldv, index_t n) noexcept {
    absorb(s, n, [&](index_t j) { return V + j * ldv; });
  }

  /// Writes out[c] = acc[c] / (l + exp(sink − m)), c ∈ [0, dv); returns the log-denominator
  /// (log-sum-exp of the attended logits and the sink). With no keys, out = 0 and the return
  /// value is the sink.  out: [dv].
  Real finish(Real sink, Real* out) const noexcept {
    if (count_ == 0) {
      std::fill(out, out + dv_, Real(0));
      return sink;
    }
    const Real m = std::max(m_, sink);
    Real l = l_ * std::exp(m_ - m);
    if (sink > -std::numeric_limits<Real>::infinity()) l += std::exp(sink - m);
    const Real inv = std::exp(m_ - m) / l;
    for (index_t c = 0; c < dv_; ++c) out[c] = acc_[static_cast<std::size_t>(c)] * inv;
    return m + std::log(l);
  }

 private:
  template <class RowOf>
  void absorb(Real* s, index_t b, RowOf&& row_of) noexcept {
    const Real bm = simd::max_value<Real, Arch>(s, b);
    const Real m_new = std::max(m_, bm);
    if (m_new > m_) {
      const Real shift = m_ - m_new;  // −∞ when m_ = −∞: alpha 0; subnormal alphas are 0 too
      const Real alpha = shift < simd::exp_flush_below<Real> ? Real(0) : std::exp(shift);
      l_ *= alpha;
      simd::scale<Real, Arch>(alpha, acc_.data(), dv_);
      m_ = m_new;
    }
    l_ += simd::exp_shift_sum<Real, Arch>(s, m_, b);
    accumulate(s, b, row_of);
    count_ += b;
  }

  /// acc[c] += s[j]·row_of(j)[c] for j = 0 … b − 1 in order: per channel the same fused
  /// multiply-add chain as one simd::axpy per row, bit for bit, but with the accumulators of up
  /// to 8 batches held in registers across the block's rows. Loaded and stored once per row
  /// instead, they chained every row's multiply-add through a store and a reload (the one-query
  /// paths spent most of their time there). Only where the multiply-add is one fused operation:
  /// on SSE2 it is a multiply and an add, which GCC contracts into an FMA in one loop and not in
  /// another under -march=native, so there the per-row axpy stays.
  template <class RowOf>
  void accumulate(const Real* s, index_t b, RowOf& row_of) noexcept {
    Real* acc = acc_.data();
    index_t c = 0;
    if constexpr (!simd::is_scalar_v<Arch> && simd::fused_fma<Arch>()) {
      using B = xsimd::batch<Real, Arch>;
      constexpr index_t L = B::size, U = 8;
      for (; c + U * L <= dv_; c += U * L) {
        B a[U];
        for (index_t u = 0; u < U; ++u) a[u] = B::load_unaligned(acc + c + u * L);
        for (index_t j = 0; j < b; ++j) {
          const B w(s[j]);
          const Real* v = row_of(j) + c;
          for (index_t u = 0; u < U; ++u) a[u] = simd::fma(w, B::load_unaligned(v + u * L), a[u]);
        }
        for (index_t u = 0; u < U; ++u) a[u].store_unaligned(acc + c + u * L);
      }
      for (; c + L <= dv_; c += L) {
        B a = B::load_unaligned(acc + c);
        for (index_t j = 0; j < b; ++j) a = simd::fma(B(s[j]), B::load_unaligned(row_of(j) + c), a);
        a.store_unaligned(acc + c);
      }
    }
    // the channels past the last full batch: axpy's scalar tail, as before
    if (c < dv_)
      for (index_t j = 0; j < b; ++j) simd::axpy<Real, Arch>(s[j], row_of(j) + c, acc + c, dv_ - c);
  }

  index_t dv_;
  index_t block_;
  std::vector<Real> acc_;
  std::vector<Real> s_;
  Real m_ = 0;
  Real l_ = 0;
  index_t count_ = 0;
};

// ---- one query, materialised (the plain three-step form) ------------------------------------------

/// o = softmax_with_sink(scale·K q) · V for one query over n keys, materialising the n scores in
/// `scratch` ([n]).  q: [d]; K: [n × ldk]; V: [n × ldv]; o: [dv]. Returns the log-denominator.
template <class Real, class Arch = simd::default_arch>
inline Real attend_materialised(const Real* q, const Real* K, index_t ldk, const Real* V, index_t ldv,
                                index_t n, index_t d, index_t dv, Real scale, Real sink, Real* scratch,
                                Real* o) noexcept {
  score_rows<Real, Arch>(q, K, ldk, n, d, scale, scratch);
  const Real lse = softmax_with_sink<Real, Arch>(scratch, n, sink);
  if (n == 0) {
    std::fill(o, o + dv, Real(0));
    return lse;
  }
  weighted_sum<Real, Arch>(scratch, V, ldv, n, dv, o);
  return lse;
}

}  // namespace kvphase::attention
