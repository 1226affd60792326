#pragma once
/// \file attention/full.hpp
/// Dense attention over a key prefix, batched over queries: the full causal attention control,
/// and the "every query sees the first n keys" form used for compressed keys that are all
/// visible. From 8 queries on, float on AVX-512 takes a flash-style fast path
/// (detail/flash_avx512.hpp) and every other SIMD (Real, Arch) pair the portable blocked kernel
/// (detail/flash_xsimd.hpp); fewer queries, and the scalar reference tag, run the streaming online
/// softmax of kernels.hpp. All are tested against a double-precision reference.
///
/// Shapes: Q [M × d] queries; K [n × d] keys; V [n × dv] values; O [M × dv] outputs.
/// Query i attends keys [0, key_end[i]) (causal: key_end[i] = pos[i] + 1).

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

#include <Eigen/Core>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "kvphase/attention/detail/flash_avx512.hpp"
#include "kvphase/attention/detail/flash_xsimd.hpp"
#include "kvphase/attention/kernels.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::attention {

/// Read-only / writable references to row-major blocks (any outer stride, unit inner stride):
/// accepts matrix_t, Maps, and column blocks such as one head's slice Q.middleCols(h·dh, dh).
template <class Real>
using cref = Eigen::Ref<const matrix_t<Real>, 0, Eigen::OuterStride<>>;
template <class Real>
using mref = Eigen::Ref<matrix_t<Real>, 0, Eigen::OuterStride<>>;

/// Settings shared by every attention call.
struct attention_params {
  double scale = 0.0;                                     ///< score scale; 0 = 1/√d
  double sink = -std::numeric_limits<double>::infinity(); ///< sink logit; −∞ = none
  index_t block = 256;                                    ///< keys per streaming block
  int threads = 0;                                        ///< OpenMP threads over queries; 0 = default

  void validate() const {
    require(std::isfinite(scale) && scale >= 0.0, "scale", scale, "must be finite and >= 0 (0 = 1/sqrt(d))");
    require(!std::isnan(sink) && sink < std::numeric_limits<double>::infinity(), "sink", sink,
            "must be a finite logit or -infinity (no sink)");
    require(block >= 1 && block <= limits::max_tokens, "block", block, "must be in [1, 2^30]");
    require(threads >= 0 && threads <= 1024, "threads", threads, "must be in [0, 1024] (0 = OpenMP default)");
  }
  template <class Real>
  [[nodiscard]] Real scale_for(index_t d) const noexcept {
    return scale > 0.0 ? static_cast<Real>(scale) : default_scale<Real>(d);
  }
  friend std::ostream& operator<<(std::ostream& os, const attention_params& p) {
    return os << "attention_params{scale=" << p.scale << ", sink=" << p.sink << ", block=" << p.block
              << ", threads=" << p.threads << "}";
  }
};

namespace detail {
inline int omp_threads(int requested) noexcept {
#if defined(_OPENMP)
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}
/// Threads worth starting for `work` multiply-adds: small calls run on one thread (a parallel
/// region costs microseconds, and far more on a loaded machine). Results never depend on it.
inline int threads_for(int requested, double work) noexcept {
  return work < 262144.0 ? 1 : omp_threads(requested);
}
}  // namespace detail

namespace detail {
inline constexpr index_t split_min_queries = 8;  // below this many queries, split the keys
inline constexpr index_t split_segment = 4096;   // keys per segment (fixed: results do not depend on threads)

/// Few queries over many keys (decode): keys are cut into fixed segments of split_segment; each
/// (query, segment) pair runs its own online softmax (in parallel), then the segment states of a
/// query are merged in segment order: m = max_s m_s, l = Σ_s l_s·e^{m_s − m},
/// acc = Σ_s acc_s·e^{m_s − m}, o = acc / (l + e^{sink − m}). Shapes as attend_batch.
template <class Real, class Arch>
void attend_split(const Real* Q, index_t ldq, index_t M, const Real* K, index_t ldk, const Real* V, index_t ldv,
                  index_t n, index_t d, index_t dv, const index_t* key_end, Real scale, Real sink, Real* O,
                  index_t ldo, index_t block, int nt) noexcept {
  const index_t nseg = (n + split_segment - 1) / split_segment;
  const index_t stride = dv + 3;  // acc[dv], m, l, count
  std::vector<Real> st_all(static_cast<std::size_t>(M * nseg * stride));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    online_softmax<Real, Arch> st(dv, block);
#pragma omp for schedule(static)
    for (index_t w = 0; w < M * nseg; ++w) {
      const index_t i = w / nseg, sg = w % nseg;
      const index_t ni = key_end ? key_end[i] : n;
      const index_t lo = sg * split_segment, hi = std::min(ni, lo + split_segment);
      st.reset();
      if (hi > lo) st.add_rows(Q + i * ldq, K + lo * ldk, ldk, V + lo * ldv, ldv, hi - lo, d, scale);
      Real* dst = st_all.data() + w * stride;
      std::copy(st.accumulator(), st.accumulator() + dv, dst);
      dst[dv] = st.running_max();
      dst[dv + 1] = st.running_sum();
      dst[dv + 2] = static_cast<Real>(st.keys_seen() > 0);
    }
  }
  for (index_t i = 0; i < M; ++i) {
    Real m = -std::numeric_limits<Real>::infinity();
    bool any = false;
    for (index_t sg = 0; sg < nseg; ++sg) {
      const Real* src = st_all.data() + (i * nseg + sg) * stride;
      if (src[dv + 2] > 0) {
        m = std::max(m, src[dv]);
        any = true;
      }
    }
    Real* o = O + i * ldo;
    std::fill(o, o + dv, Real(0));
    if (!any) continue;
    Real l = 0;
    for (index_t sg = 0; sg < nseg; ++sg) {
      const Real* src = st_all.data() + (i * nseg + sg) * stride;
      if (src[dv + 2] == 0) continue;
      const Real f = std::exp(src[dv] - m);
      l += src[dv + 1] * f;
      simd::axpy<Real, Arch>(f, src, o, dv);
    }
    const Real mm = std::max(m, sink);
    Real den = l * std::exp(m - mm);
    if (sink > -std::numeric_limits<Real>::infinity()) den += std::exp(sink - mm);
    simd::scale<Real, Arch>(std::exp(m - mm) / den, o, dv);
  }
}
}  // namespace detail

/// Batched dense attention kernel (no validation): for i ∈ [0, M),
///   O[i] = Σ_{j < key_end[i]} p_ij V[j],  p_i = softmax_with_sink(scale·K[0:key_end[i]] Q[i]).
///   Q: [M × ldq] (first d used); K: [n × ldk]; V: [n × ldv] (first dv used); key_end: [M], each
///   in [0, n], or nullptr = n for every query; O: [M × ldo] (first dv written).
/// Queries are independent, so the OpenMP split over queries is deterministic.
template <class Real, class Arch = simd::default_arch>
void attend_batch(const Real* Q, index_t ldq, index_t M, const Real* K, index_t ldk, const Real* V,
                  index_t ldv, index_t n, index_t d, index_t dv, const index_t* key_end, Real scale,
                  Real sink, Real* O, index_t ldo, index_t block, int threads) noexcept {
  if constexpr (detail::flash_avx512_enabled<Real, Arch>) {
    if (detail::flash_avx512_applicable(M, n, d, dv, key_end)) {
      detail::flash_avx512(Q, ldq, M, K, ldk, V, ldv, n, d, dv, key_end, scale, sink, O, ldo,
                           detail::threads_for(threads, double(M) * double(n) * double(d + dv)));
      return;
    }
  }
  const int nt = detail::threads_for(threads, double(M) * double(n) * double(d + dv));
  if constexpr (detail::flash_xsimd_enabled<Real, Arch>) {
    if (detail::flash_xsimd_applicable(M, d, dv) && n >= 1) {
      const detail::kv_segment<Real> seg{.K = K, .ldk = ldk, .V = V, .ldv = ldv, .n = n, .lo = nullptr, .hi = key_end};
      detail::flash_xsimd<Real, Arch>(Q, ldq, M, &seg, 1, d, dv, scale, sink, O, ldo, nt);
      return;
    }
  }
  if (M < detail::split_min_queries && n > detail::split_segment) {
    detail::attend_split<Real, Arch>(Q, ldq, M, K, ldk, V, ldv, n, d, dv, key_end, scale, sink, O, ldo, block, nt);
    return;
  }
#pragma omp parallel num_threads(nt) if (nt > 1 && M > 1)
  {
    online_softmax<Real, Arch> st(dv, block);
#pragma omp for schedule(static)
    for (index_t i = 0; i < M; ++i) {
      st.reset();
      const index_t ni = key_end ? key_end[i] : n;
      st.add_rows(Q + i * ldq, K, ldk, V, ldv, ni, d, scale);
      st.finish(sink, O + i * ldo);
    }
  }
}

namespace detail {
template <class Real>
void check_qkv(const cref<Real>& Q, const cref<Real>& K, const cref<Real>& V, const mref<Real>& O) {
  require(Q.cols() >= 1, "Q.cols()", Q.cols(), "query dimension d must be >= 1");
  require(K.cols() == Q.cols(), "K.cols()", K.cols(), "must equal Q.cols() (" + std::to_string(Q.cols()) + ")");
  require(V.rows() == K.rows(), "V.rows()", V.rows(), "must equal K.rows() (" + std::to_string(K.rows()) + ")");
  require(V.cols() >= 1, "V.cols()", V.cols(), "value dimension dv must be >= 1");
  require(O.rows() == Q.rows(), "O.rows()", O.rows(), "must equal Q.rows() (" + std::to_string(Q.rows()) + ")");
  require(O.cols() == V.cols(), "O.cols()", O.cols(), "must equal V.cols() (" + std::to_string(V.cols()) + ")");
}
}  // namespace detail

/// Dense attention: every query attends all n = K.rows() keys (e.g. compressed entries that are
/// all visible).  Q [M × d]; K [n × d]; V [n × dv]; O [M × dv] (written).
template <class Real, class Arch = simd::default_arch>
void dense_attention(const cref<Real>& Q, const cref<Real>& K, const cref<Real>& V,
                     const attention_params& p, mref<Real> O) {
  p.validate();
  detail::check_qkv<Real>(Q, K, V, O);
  attend_batch<Real, Arch>(Q.data(), Q.outerStride(), Q.rows(), K.data(), K.outerStride(), V.data(),
                           V.outerStride(), K.rows(), Q.cols(), V.cols(), nullptr, p.scale_for<Real>(Q.cols()),
                           static_cast<Real>(p.sink), O.data(), O.outerStride(), p.block, p.threads);
}

/// Full causal attention (the control). Query i sits at absolute position pos[i] and attends
/// keys 0 … pos[i]. pos empty: the queries are the last M tokens, pos[i] = n − M + i (M = n:
/// every token queries itself and its past).
///   Q [M × d]; K [n × d]; V [n × dv] rows = tokens 0 … n−1; pos [M] or empty; O [M × dv].
template <class Real, class Arch = simd::default_arch>
void full_attention(const cref<Real>& Q, const cref<Real>& K, const cref<Real>& V,
                    std::span<const index_t> pos, const attention_params& p, mref<Real> O) {
  p.validate();
  detail::check_qkv<Real>(Q, K, V, O);
  const index_t M = Q.rows(), n = K.rows();
  std::vector<index_t> end(static_cast<std::size_t>(M));
  if (pos.empty()) {
    require(M <= n, "Q.rows()", M, "without positions, must be <= K.rows() (" + std::to_string(n) + ")");
    for (index_t i = 0; i < M; ++i) end[static_cast<std::size_t>(i)] = n - M + i + 1;
  } else {
    require(static_cast<index_t>(pos.size()) == M, "pos.size()", pos.size(),
            "must equal Q.rows() (" + std::to_string(M) + ") or be 0");
    for (index_t i = 0; i < M; ++i) {
      const index_t t = pos[static_cast<std::size_t>(i)];
      if (t < 0 || t >= n) fail("pos[" + std::to_string(i) + "]", t, "must be in [0, K.rows() = " + std::to_string(n) + ")");
      end[static_cast<std::size_t>(i)] = t + 1;
    }
  }
  attend_batch<Real, Arch>(Q.data(), Q.outerStride(), M, K.data(), K.outerStride(), V.data(),
                           V.outerStride(), n, Q.cols(), V.cols(), end.data(), p.scale_for<Real>(Q.cols()),
                           static_cast<Real>(p.sink), O.data(), O.outerStride(), p.block, p.threads);
}

/// Convenience: full causal self-attention over n tokens, O [n × dv].
template <class Real, class Arch = simd::default_arch>
void full_attention(const cref<Real>& Q, const cref<Real>& K, const cref<Real>& V,
                    const attention_params& p, mref<Real> O) {
  full_attention<Real, Arch>(Q, K, V, std::span<const index_t>{}, p, O);
}

}  // namespace kvphase::attention
