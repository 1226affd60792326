#pragma once
/// \file core/simd.hpp
/// The SIMD shim over xsimd 8.1. Every kernel is templated on an `Arch`: an xsimd architecture
/// tag (default: xsimd::default_arch, i.e. the best the compiler flags allow) or
/// kvphase::simd::scalar, which selects the plain-loop reference through the same call shape.
///
/// xsimd 8.1 differences are kept here and nowhere else: horizontal sum is xsimd::hadd (9.0
/// renamed it reduce_add); there is no reduce_max, so hmax stores and reduces in scalar code.
///
/// Kernels are noexcept and check nothing: callers validate shapes once per call.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kvphase/core/types.hpp"

#if defined(__SSE2__) || defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#define KVPHASE_HAVE_STREAM_STORES 1
#else
#define KVPHASE_HAVE_STREAM_STORES 0
#endif

namespace kvphase::simd {

/// Tag selecting the scalar reference path of every kernel.
struct scalar {
  static constexpr const char* name() noexcept { return "scalar"; }
  static constexpr std::size_t alignment() noexcept { return alignof(double); }
};

template <class Arch>
inline constexpr bool is_scalar_v = std::is_same_v<Arch, scalar>;

using default_arch = xsimd::default_arch;

/// Name of an arch tag ("scalar", "sse2", "fma3+avx2", "avx512bw", ...).
template <class Arch>
constexpr const char* arch_name() noexcept {
  return Arch::name();
}

/// Calls f(Arch{}) for the scalar reference and for every x86 path this translation unit was
/// compiled to support (sse2, fma3<avx2>, avx512bw where the flags allow). Tests use it to run
/// every kernel on every compiled path.
template <class F>
void for_each_arch(F&& f) {
  f(scalar{});
#if XSIMD_WITH_SSE2
  if constexpr (xsimd::sse2::supported()) f(xsimd::sse2{});
#endif
#if XSIMD_WITH_FMA3_AVX2
  if constexpr (xsimd::fma3<xsimd::avx2>::supported()) f(xsimd::fma3<xsimd::avx2>{});
#endif
#if XSIMD_WITH_AVX512BW
  if constexpr (xsimd::avx512bw::supported()) f(xsimd::avx512bw{});
#endif
}

/// Number of Real lanes of Arch (1 for scalar).
template <class Real, class Arch>
constexpr index_t lanes() noexcept {
  if constexpr (is_scalar_v<Arch>) {
    return 1;
  } else {
    return static_cast<index_t>(xsimd::batch<Real, Arch>::size);
  }
}

// ---- batch-level helpers -------------------------------------------------------------------------

/// Fused multiply-add a·b + c with one rounding on every hardware-FMA path. xsimd 8.1 has no
/// AVX-512 fma kernel (it falls back to a*b + c, fused only when the compiler contracts it, which
/// differs between optimisation levels), so 512-bit batches go to the intrinsic here.
template <class Real, class Arch>
inline xsimd::batch<Real, Arch> fma(const xsimd::batch<Real, Arch>& a, const xsimd::batch<Real, Arch>& b,
                                   const xsimd::batch<Real, Arch>& c) noexcept {
#if defined(__AVX512F__)
  if constexpr (sizeof(xsimd::batch<Real, Arch>) == 64) {
    if constexpr (std::is_same_v<Real, float>) {
      return xsimd::batch<Real, Arch>(_mm512_fmadd_ps(a, b, c));
    } else {
      return xsimd::batch<Real, Arch>(_mm512_fmadd_pd(a, b, c));
    }
  }
#endif
  return xsimd::fma(a, b, c);
}

/// Whether simd::fma<Real, Arch> rounds once (a hardware FMA on that path). The scalar
/// reference computes a*b + c as written (two roundings unless the compiler contracts).
template <class Arch>
constexpr bool fused_fma() noexcept {
  if constexpr (is_scalar_v<Arch>) {
    return false;
  } else {
#if defined(__AVX512F__)
    if constexpr (Arch::alignment() == 64) return true;
#endif
#if defined(__FMA__)
    if constexpr (Arch::alignment() == 32) return true;
#endif
    return false;
  }
}


/// Horizontal sum of a batch.
template <class Real, class Arch>
inline Real hsum(const xsimd::batch<Real, Arch>& b) noexcept {
  return xsimd::hadd(b);
}

/// Horizontal max of a batch (xsimd 8.1 has no reduce_max).
template <class Real, class Arch>
inline Real hmax(const xsimd::batch<Real, Arch>& b) noexcept {
  alignas(64) std::array<Real, xsimd::batch<Real, Arch>::size> tmp;
  b.store_aligned(tmp.data());
  Real m = tmp[0];
  for (std::size_t i = 1; i < tmp.size(); ++i) m = std::max(m, tmp[i]);
  return m;
}

/// Non-temporal store of one batch (dst aligned to the batch width).
template <class Real, class Arch>
inline void stream_store(Real* dst, const xsimd::batch<Real, Arch>& v) noexcept {
  using B = xsimd::batch<Real, Arch>;
#if KVPHASE_HAVE_STREAM_STORES
  if constexpr (sizeof(B) == 64) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<Real, float>) _mm512_stream_ps(dst, v);
    else _mm512_stream_pd(dst, v);
    return;
#endif
  } else if constexpr (sizeof(B) == 32) {
#if defined(__AVX__)
    if constexpr (std::is_same_v<Real, float>) _mm256_stream_ps(dst, v);
    else _mm256_stream_pd(dst, v);
    return;
#endif
  } else if constexpr (sizeof(B) == 16) {
    if constexpr (std::is_same_v<Real, float>) _mm_stream_ps(dst, v);
    else _mm_stream_pd(dst, v);
    return;
  }
#endif
  v.store_aligned(dst);
}

inline void store_fence() noexcept {
#if KVPHASE_HAVE_STREAM_STORES
  _mm_sfence();
#endif
}

// ---- vector kernels --------------------------------------------------------------------------------

/// dot's vector part on a SIMD path: four accumulators over the first ⌊n/4L⌋·4L elements, then
/// whole batches into the first, combined as (s0 + s1) + (s2 + s3). dot is hsum of it plus
/// dot_tail; callers that reduce several dot products at once (hsum_rows) get dot's bits.
template <class Real, class Arch>
inline xsimd::batch<Real, Arch> dot_body(const Real* a, const Real* b, index_t n) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size;
  B s0(Real(0)), s1(Real(0)), s2(Real(0)), s3(Real(0));
  index_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    s0 = simd::fma(B::load_unaligned(a + i), B::load_unaligned(b + i), s0);
    s1 = simd::fma(B::load_unaligned(a + i + L), B::load_unaligned(b + i + L), s1);
    s2 = simd::fma(B::load_unaligned(a + i + 2 * L), B::load_unaligned(b + i + 2 * L), s2);
    s3 = simd::fma(B::load_unaligned(a + i + 3 * L), B::load_unaligned(b + i + 3 * L), s3);
  }
  for (; i + L <= n; i += L) s0 = simd::fma(B::load_unaligned(a + i), B::load_unaligned(b + i), s0);
  return (s0 + s1) + (s2 + s3);
}

/// dot_body(q, key, NB·L) with q's NB batches already in registers (q[c] = batch c of the
/// query): the same operations in the same order (four accumulators over groups of four batches,
/// the rest into the first, combined as (s0 + s1) + (s2 + s3)), so hsum of it, or a lane of
/// hsum_rows, is dot's value at that width (which has no scalar tail). For one vector held
/// against many rows: the CSA indexer's keys, attention's scores.
template <class Real, class Arch, int NB>
inline xsimd::batch<Real, Arch> dot_body_held(const xsimd::batch<Real, Arch>* q, const Real* key) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = static_cast<index_t>(B::size);
  B s0(Real(0)), s1(Real(0)), s2(Real(0)), s3(Real(0));
  int c = 0;
  for (; c + 4 <= NB; c += 4) {
    s0 = simd::fma(q[c], B::load_unaligned(key + c * L), s0);
    s1 = simd::fma(q[c + 1], B::load_unaligned(key + (c + 1) * L), s1);
    s2 = simd::fma(q[c + 2], B::load_unaligned(key + (c + 2) * L), s2);
    s3 = simd::fma(q[c + 3], B::load_unaligned(key + (c + 3) * L), s3);
  }
  for (; c < NB; ++c) s0 = simd::fma(q[c], B::load_unaligned(key + c * L), s0);
  return (s0 + s1) + (s2 + s3);
}

/// dot's scalar tail on a SIMD path: s plus the products of the last n mod L elements, in order.
template <class Real, class Arch>
inline Real dot_tail(const Real* a, const Real* b, index_t n, Real s) noexcept {
  constexpr index_t L = xsimd::batch<Real, Arch>::size;
  index_t i = n / L * L;
  if constexpr (fused_fma<Arch>()) {
    // one rounding per step, written out: `s += a·b` is contracted or not depending on the
    // context the loop is inlined into, and one row's sum must not depend on its caller
    // (RMSNorm of a tile of entries against one entry: compress/position.hpp, rms_inverses)
    for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  } else {
    for (; i < n; ++i) s += a[i] * b[i];
  }
  return s;
}

/// Σ_i a[i]·b[i] over n elements. SIMD paths use four accumulators, then a scalar tail.
template <class Real, class Arch = default_arch>
inline Real dot(const Real* a, const Real* b, index_t n) noexcept {
  if constexpr (is_scalar_v<Arch>) {
    Real s = 0;
    for (index_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
  } else {
    return dot_tail<Real, Arch>(a, b, n, hsum(dot_body<Real, Arch>(a, b, n)));
  }
}

/// The batch whose lane k is hsum(rows[k]), for the L = batch size batches rows[0 … L), bit for
/// bit: the same additions as xsimd 8.1's hadd of each batch (AVX-512: lane i + lane i + 8, then
/// + 4, then adjacent pairs; AVX: + 4, then adjacent pairs), done for all L batches at once with
/// their lanes transposed (the operands of each addition are hadd's; IEEE addition commutes), so
/// L reductions cost about as much as two. Other (Real, Arch) pairs reduce batch by batch.
template <class Real, class Arch>
inline xsimd::batch<Real, Arch> hsum_rows(const xsimd::batch<Real, Arch>* rows) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr std::size_t L = B::size;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Real, float> && L == 16) {
    __m512 u[8], t[4], p[2];
    for (int k = 0; k < 8; ++k) {  // rows 2k, 2k + 1: [lanes i + lanes i + 8 of each]
      const __m512 a = rows[2 * k], b = rows[2 * k + 1];
      u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    for (int k = 0; k < 4; ++k)  // four rows a block: lane j + lane j + 4 of each
      t[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int k = 0; k < 2; ++k)  // adjacent pairs (hadd_ps)
      p[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
    // lane 4m + j of r is row m + 4j; row k is at lane 4·(k mod 4) + k / 4
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return B(_mm512_permutexvar_ps(order, r));
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_same_v<Real, float> && L == 8) {
    __m256 u[4];
    for (int k = 0; k < 4; ++k) {  // rows 2k, 2k + 1: [lanes i + lanes i + 4 of each]
      const __m256 a = rows[2 * k], b = rows[2 * k + 1];
      u[k] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    }
    const __m256 h0 = _mm256_hadd_ps(u[0], u[1]), h1 = _mm256_hadd_ps(u[2], u[3]);
    const __m256 r = _mm256_hadd_ps(h0, h1);  // lanes: rows 0, 2, 4, 6, 1, 3, 5, 7
    return B(_mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
#endif
  alignas(64) Real out[L];
  for (std::size_t k = 0; k < L; ++k) out[k] = hsum(rows[k]);
  return B::load_aligned(out);
}

/// The batch whose lane k is scale · dot(q, row_of(k), NB·L), k ∈ [0, L), bit for bit: q's NB
/// batches held in registers (dot_body_held) against a block of L rows, the L sums reduced at
/// once (hsum_rows) and scaled in a batch (that width has no scalar tail). The block of scores
/// and indexer terms (attention/kernels.hpp score_rows, attention/select.hpp the indexer).
template <class Real, class Arch, int NB, class RowOf>
inline xsimd::batch<Real, Arch> scaled_dots_held(const xsimd::batch<Real, Arch>* q, const RowOf& row_of,
                                                 const xsimd::batch<Real, Arch>& scale) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = static_cast<index_t>(B::size);
  B acc[L];
  for (index_t k = 0; k < L; ++k) acc[k] = dot_body_held<Real, Arch, NB>(q, row_of(k));
  return scale * hsum_rows<Real, Arch>(acc);
}

/// The widths a held vector serves: returns f(std::integral_constant<int, NB>{}) when n = NB·L
/// for NB of 1, 2, 4 or 8 on a fused-FMA SIMD path, else 0 (f not called). Fused paths only:
/// elsewhere simd::fma is a multiply and an add that the compiler may contract in one loop and
/// not in another, and a held dot product must have dot's bits whichever loop computed it.
template <class Real, class Arch, class F>
inline index_t with_held_width(index_t n, F&& f) {
  if constexpr (fused_fma<Arch>()) {
    constexpr index_t L = lanes<Real, Arch>();
    if (n == L) return f(std::integral_constant<int, 1>{});
    if (n == 2 * L) return f(std::integral_constant<int, 2>{});
    if (n == 4 * L) return f(std::integral_constant<int, 4>{});
    if (n == 8 * L) return f(std::integral_constant<int, 8>{});
  }
  return 0;
}

/// y[i] += alpha·x[i] over n elements.
template <class Real, class Arch = default_arch>
inline void axpy(Real alpha, const Real* x, Real* y, index_t n) noexcept {
  index_t i = 0;
  if constexpr (!is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    const B va(alpha);
    for (; i + L <= n; i += L) {
      simd::fma(va, B::load_unaligned(x + i), B::load_unaligned(y + i)).store_unaligned(y + i);
    }
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

/// y[i] *= alpha over n elements.
template <class Real, class Arch = default_arch>
inline void scale(Real alpha, Real* y, index_t n) noexcept {
  index_t i = 0;
  if constexpr (!is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    const B va(alpha);
    for (; i + L <= n; i += L) (va * B::load_unaligned(y + i)).store_unaligned(y + i);
  }
  for (; i < n; ++i) y[i] *= alpha;
}

/// y[i] = max(y[i], x[i]) over n elements.
template <class Real, class Arch = default_arch>
inline void max_inplace(const Real* x, Real* y, index_t n) noexcept {
  index_t i = 0;
  if constexpr (!is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    for (; i + L <= n; i += L) {
      xsimd::max(B::load_unaligned(x + i), B::load_unaligned(y + i)).store_unaligned(y + i);
    }
  }
  for (; i < n; ++i) y[i] = std::max(y[i], x[i]);
}

/// Σ_i x[i].
template <class Real, class Arch = default_arch>
inline Real sum(const Real* x, index_t n) noexcept {
  if constexpr (is_scalar_v<Arch>) {
    Real s = 0;
    for (index_t i = 0; i < n; ++i) s += x[i];
    return s;
  } else {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    B s0(Real(0)), s1(Real(0));
    index_t i = 0;
    for (; i + 2 * L <= n; i += 2 * L) {
      s0 += B::load_unaligned(x + i);
      s1 += B::load_unaligned(x + i + L);
    }
    for (; i + L <= n; i += L) s0 += B::load_unaligned(x + i);
    Real s = hsum(s0 + s1);
    for (; i < n; ++i) s += x[i];
    return s;
  }
}

/// max_i x[i]; returns -infinity for n = 0.
template <class Real, class Arch = default_arch>
inline Real max_value(const Real* x, index_t n) noexcept {
  Real m = -std::numeric_limits<Real>::infinity();
  index_t i = 0;
  if constexpr (!is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    if (n >= L) {
      // four independent chains (max is exact, so the result does not depend on the split)
      B v0 = B::load_unaligned(x), v1 = v0, v2 = v0, v3 = v0;
      for (i = L; i + 4 * L <= n; i += 4 * L) {
        v0 = xsimd::max(v0, B::load_unaligned(x + i));
        v1 = xsimd::max(v1, B::load_unaligned(x + i + L));
        v2 = xsimd::max(v2, B::load_unaligned(x + i + 2 * L));
        v3 = xsimd::max(v3, B::load_unaligned(x + i + 3 * L));
      }
      for (; i + L <= n; i += L) v0 = xsimd::max(v0, B::load_unaligned(x + i));
      m = hmax(xsimd::max(xsimd::max(v0, v1), xsimd::max(v2, v3)));
    }
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

/// Below this argument, softmax weights are flushed to exactly 0: exp(x) would be subnormal
/// (under 2^min_exponent, relative to the largest weight 1). Such a weight is far below the
/// rounding of any sum it enters, and subnormal operands make every later multiply-add take a
/// microcode assist on Intel cores (measured: a full-attention layer over 4096 tokens ran 9×
/// slower).
template <class Real>
inline constexpr Real exp_flush_below = static_cast<Real>(std::numeric_limits<Real>::min_exponent) * Real(0.6931471805599453);
/// The same threshold for exp2 (log2 units).
template <class Real>
inline constexpr Real exp2_flush_below = static_cast<Real>(std::numeric_limits<Real>::min_exponent);

/// x[i] = exp(x[i] − shift) in place; returns Σ_i of the new values. exp of −∞ is exactly 0, and
/// so is every value whose exp would be subnormal (exp_flush_below). This is the softmax inner
/// step: with shift = max_i x[i] no term overflows.
template <class Real, class Arch = default_arch>
inline Real exp_shift_sum(Real* x, Real shift, index_t n) noexcept {
  Real s = 0;
  index_t i = 0;
  if constexpr (!is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    const B vs(shift), lo(exp_flush_below<Real>), zero(Real(0));
    B acc(Real(0));
    for (; i + L <= n; i += L) {
      const B a = B::load_unaligned(x + i) - vs;
      B e = xsimd::select(a < lo, zero, xsimd::exp(a));
      e.store_unaligned(x + i);
      acc += e;
    }
    s = hsum(acc);
  }
  for (; i < n; ++i) {
    const Real a = x[i] - shift;
    x[i] = a < exp_flush_below<Real> ? Real(0) : std::exp(a);
    s += x[i];
  }
  return s;
}

/// Numerically stable softmax in place over n ≥ 1 elements (entries of −∞ get weight 0; at
/// least one must be finite). Returns log Σ exp(x) of the input.
template <class Real, class Arch = default_arch>
inline Real softmax_inplace(Real* x, index_t n) noexcept {
  const Real m = max_value<Real, Arch>(x, n);
  const Real s = exp_shift_sum<Real, Arch>(x, m, n);
  scale<Real, Arch>(Real(1) / s, x, n);
  return m + std::log(s);
}

}  // namespace kvphase::simd
