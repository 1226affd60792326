#pragma once
/// \file attention/detail/flash_avx512.hpp
/// Not API. AVX-512 flash-style fast path of attend_batch for float (reference/performance.md §5).
///
/// Per block of 32 queries (one thread owns a block; blocks are split statically):
///   Qt  [d × 32]   queries transposed, prescaled by scale·log2(e), so scores are in log2 units
///   S   [128 × 32] scores of one key block, keys × queries ("Sᵀ"): the softmax max, exp2 and sum
///                  run vertically across the 32 queries of a row, two zmm per row
///   Ot  [dv × 32]  running output, transposed; m, l [32] running max and sum
/// For each key block of 128 keys: S = K_blk · Qt (micro-kernel 8 keys × 32 queries, 16 zmm
/// accumulators, K broadcast); keys at or beyond a query's key_end get −∞; m_new = max(m, max S);
/// Ot, l *= exp2(m − m_new); S ← exp2(S − m_new), l += Σ S; Ot += Vᵀ_blk · S (micro-kernel 8
/// value channels × 32 queries, V broadcast, so V needs no packing). At the end
/// O[q] = Ot[:, q] / (l + exp2(sink·log2(e) − m)).
/// The micro-kernels are separate noinline functions: inlined, GCC spills the accumulators.
/// exp2 is round-to-nearest range reduction, a degree-7 polynomial on [−½, ½] and vscalefps;
/// arguments below −200 give exactly 0 (masked keys contribute nothing, bitwise).
/// Each query's arithmetic is independent of the block split and thread count.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "kvphase/core/types.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#if defined(_OPENMP)
#include <omp.h>
#endif
#endif

namespace kvphase::attention::detail {

#if defined(__AVX512F__) && XSIMD_WITH_AVX512F

template <class Real, class Arch>
inline constexpr bool flash_avx512_enabled =
    std::is_same_v<Real, float> && std::is_base_of_v<xsimd::avx512f, Arch>;

/// The fast path pays off from about 8 queries on (below, the job is memory bound and the
/// per-query streaming path is used); every query must attend at least one key.
inline bool flash_avx512_applicable(index_t M, index_t n, index_t d, index_t dv, const index_t* key_end) noexcept {
  if (M < 8 || d < 1 || dv < 1 || n < 1 || n >= (index_t(1) << 30)) return false;
  if (key_end)
    for (index_t i = 0; i < M; ++i)
      if (key_end[i] < 1) return false;
  return true;
}

inline constexpr index_t flash_qb = 32;   // queries per block
inline constexpr index_t flash_kb = 128;  // keys per block

/// 2^x for 16 lanes; x ≤ 128. Lanes below −200 (including −∞) give exactly 0.
inline __m512 exp2_ps(__m512 x) noexcept {
  x = _mm512_max_ps(x, _mm512_set1_ps(-200.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(x, n), _mm512_set1_ps(0.693147180559945309f));  // f·ln2 ∈ [−.35, .35]
  // e^y, y = f·ln 2, Taylor to degree 7 (truncation < 3e-10 relative)
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/// S[r][0:32] = Σ_c k_r[c] · Qt[c][0:32] for the 8 key rows k_0 … k_7.
///   Qt: [d × 32] (64-byte aligned); k: 8 row pointers; S: [8 × 32] (aligned).
__attribute__((noinline)) inline void flash_qk_8x32(const float* Qt, const float* const* k, index_t d,
                                                    float* S) noexcept {
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
         a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00, a60 = a00, a61 = a00, a70 = a00, a71 = a00;
  const float *k0 = k[0], *k1 = k[1], *k2 = k[2], *k3 = k[3], *k4 = k[4], *k5 = k[5], *k6 = k[6], *k7 = k[7];
  for (index_t c = 0; c < d; ++c) {
    const __m512 q0 = _mm512_load_ps(Qt + c * 32), q1 = _mm512_load_ps(Qt + c * 32 + 16);
    __m512 b;
    b = _mm512_set1_ps(k0[c]); a00 = _mm512_fmadd_ps(b, q0, a00); a01 = _mm512_fmadd_ps(b, q1, a01);
    b = _mm512_set1_ps(k1[c]); a10 = _mm512_fmadd_ps(b, q0, a10); a11 = _mm512_fmadd_ps(b, q1, a11);
    b = _mm512_set1_ps(k2[c]); a20 = _mm512_fmadd_ps(b, q0, a20); a21 = _mm512_fmadd_ps(b, q1, a21);
    b = _mm512_set1_ps(k3[c]); a30 = _mm512_fmadd_ps(b, q0, a30); a31 = _mm512_fmadd_ps(b, q1, a31);
    b = _mm512_set1_ps(k4[c]); a40 = _mm512_fmadd_ps(b, q0, a40); a41 = _mm512_fmadd_ps(b, q1, a41);
    b = _mm512_set1_ps(k5[c]); a50 = _mm512_fmadd_ps(b, q0, a50); a51 = _mm512_fmadd_ps(b, q1, a51);
    b = _mm512_set1_ps(k6[c]); a60 = _mm512_fmadd_ps(b, q0, a60); a61 = _mm512_fmadd_ps(b, q1, a61);
    b = _mm512_set1_ps(k7[c]); a70 = _mm512_fmadd_ps(b, q0, a70); a71 = _mm512_fmadd_ps(b, q1, a71);
  }
  _mm512_store_ps(S + 0 * 32, a00); _mm512_store_ps(S + 0 * 32 + 16, a01);
  _mm512_store_ps(S + 1 * 32, a10); _mm512_store_ps(S + 1 * 32 + 16, a11);
  _mm512_store_ps(S + 2 * 32, a20); _mm512_store_ps(S + 2 * 32 + 16, a21);
  _mm512_store_ps(S + 3 * 32, a30); _mm512_store_ps(S + 3 * 32 + 16, a31);
  _mm512_store_ps(S + 4 * 32, a40); _mm512_store_ps(S + 4 * 32 + 16, a41);
  _mm512_store_ps(S + 5 * 32, a50); _mm512_store_ps(S + 5 * 32 + 16, a51);
  _mm512_store_ps(S + 6 * 32, a60); _mm512_store_ps(S + 6 * 32 + 16, a61);
  _mm512_store_ps(S + 7 * 32, a70); _mm512_store_ps(S + 7 * 32 + 16, a71);
}

/// Ot[r][0:32] += Σ_{j<nb} V[j][c0 + r] · P[j][0:32] for r < NC (NC ≤ 8 value channels).
///   P: [nb × 32] (aligned); V: points at V[0][c0], row stride ldv; Ot: [NC × 32] (aligned).
template <int NC>
__attribute__((noinline)) void flash_pv_32(const float* P, const float* V, index_t ldv, index_t nb,
                                           float* Ot) noexcept {
  __m512 a0[NC], a1[NC];
  for (int r = 0; r < NC; ++r) {
    a0[r] = _mm512_load_ps(Ot + r * 32);
    a1[r] = _mm512_load_ps(Ot + r * 32 + 16);
  }
  for (index_t j = 0; j < nb; ++j) {
    const __m512 p0 = _mm512_load_ps(P + j * 32), p1 = _mm512_load_ps(P + j * 32 + 16);
    const float* v = V + j * ldv;
#pragma GCC unroll 8
    for (int r = 0; r < NC; ++r) {
      const __m512 b = _mm512_set1_ps(v[r]);
      a0[r] = _mm512_fmadd_ps(b, p0, a0[r]);
      a1[r] = _mm512_fmadd_ps(b, p1, a1[r]);
    }
  }
  for (int r = 0; r < NC; ++r) {
    _mm512_store_ps(Ot + r * 32, a0[r]);
    _mm512_store_ps(Ot + r * 32 + 16, a1[r]);
  }
}

/// Online-softmax step on one score block: m_new = max(m, max_j S[j]); alpha = exp2(m − m_new);
/// S[j] ← exp2(S[j] − m_new); l ← l·alpha + Σ_j S[j] (j in order); m ← m_new; writes alpha.
///   S: [nb × 32]; m, l, alpha: [32] (all aligned).
__attribute__((noinline)) inline void flash_softmax_block(float* S, index_t nb, float* m, float* l,
                                                          float* alpha) noexcept {
  __m512 mx0 = _mm512_load_ps(m), mx1 = _mm512_load_ps(m + 16);
  const __m512 mo0 = mx0, mo1 = mx1;
  for (index_t j = 0; j < nb; ++j) {
    mx0 = _mm512_max_ps(mx0, _mm512_load_ps(S + j * 32));
    mx1 = _mm512_max_ps(mx1, _mm512_load_ps(S + j * 32 + 16));
  }
  const __m512 al0 = exp2_ps(_mm512_sub_ps(mo0, mx0)), al1 = exp2_ps(_mm512_sub_ps(mo1, mx1));
  __m512 s0 = _mm512_mul_ps(_mm512_load_ps(l), al0), s1 = _mm512_mul_ps(_mm512_load_ps(l + 16), al1);
  for (index_t j = 0; j < nb; ++j) {
    const __m512 e0 = exp2_ps(_mm512_sub_ps(_mm512_load_ps(S + j * 32), mx0));
    const __m512 e1 = exp2_ps(_mm512_sub_ps(_mm512_load_ps(S + j * 32 + 16), mx1));
    _mm512_store_ps(S + j * 32, e0);
    _mm512_store_ps(S + j * 32 + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  _mm512_store_ps(m, mx0);
  _mm512_store_ps(m + 16, mx1);
  _mm512_store_ps(l, s0);
  _mm512_store_ps(l + 16, s1);
  _mm512_store_ps(alpha, al0);
  _mm512_store_ps(alpha + 16, al1);
}

/// State of one block of 32 queries.
struct flash_qblock {
  using avec = std::vector<float, xsimd::aligned_allocator<float, 64>>;
  avec Qt, Ot;  // [d × 32], [dv × 32]
  alignas(64) float m[32];
  alignas(64) float l[32];
  alignas(64) float alpha[32];
  alignas(64) std::int32_t endv[32];
  index_t q0 = 0, nq = 0, lo_end = 0, hi_end = 0;
};

/// The batched kernel; see the file comment. Shapes as attend_batch (full.hpp).
/// Threads take groups of up to 4 query blocks; within a group every key block (128 keys, 64 KiB
/// of K and of V at d = 128) is read from memory once and reused by the group's query blocks from
/// L2. The grouping does not change any query's arithmetic.
inline void flash_avx512(const float* Q, index_t ldq, index_t M, const float* K, index_t ldk, const float* V,
                         index_t ldv, index_t n, index_t d, index_t dv, const index_t* key_end, float scale,
                         float sink, float* O, index_t ldo, int threads) noexcept {
  constexpr float log2e = 1.44269504088896340736f;
  const index_t nqb = (M + flash_qb - 1) / flash_qb;
  const index_t group = std::max<index_t>(1, std::min<index_t>(4, (nqb + threads - 1) / std::max(threads, 1)));
  const index_t ngroups = (nqb + group - 1) / group;
  const float qscale = scale * log2e;
  const float sink2 = sink * log2e;  // −∞ stays −∞
#pragma omp parallel num_threads(threads) if (threads > 1 && ngroups > 1)
  {
    std::vector<flash_qblock> qbs(static_cast<std::size_t>(group));
    for (auto& b : qbs) {
      b.Qt.resize(static_cast<std::size_t>(d * flash_qb));
      b.Ot.resize(static_cast<std::size_t>(dv * flash_qb));
    }
    flash_qblock::avec S(static_cast<std::size_t>(flash_kb * flash_qb));
#pragma omp for schedule(static)
    for (index_t gi = 0; gi < ngroups; ++gi) {
      const index_t b0 = gi * group, nb_in = std::min(group, nqb - b0);
      index_t group_end = 0;
      for (index_t bi = 0; bi < nb_in; ++bi) {
        flash_qblock& B = qbs[static_cast<std::size_t>(bi)];
        B.q0 = (b0 + bi) * flash_qb;
        B.nq = std::min(flash_qb, M - B.q0);
        // pack Qᵀ, prescaled; pad missing queries with zeros (their outputs are not written)
        for (index_t c = 0; c < d; ++c)
          for (index_t i = 0; i < flash_qb; ++i)
            B.Qt[static_cast<std::size_t>(c * flash_qb + i)] = i < B.nq ? Q[(B.q0 + i) * ldq + c] * qscale : 0.0f;
        B.lo_end = n;
        B.hi_end = 0;
        for (index_t i = 0; i < flash_qb; ++i) {
          const index_t e = i < B.nq ? (key_end ? key_end[B.q0 + i] : n) : 1;
          B.endv[i] = static_cast<std::int32_t>(e);
          B.lo_end = std::min(B.lo_end, e);
          B.hi_end = std::max(B.hi_end, e);
          B.m[i] = -std::numeric_limits<float>::infinity();
          B.l[i] = 0.0f;
        }
        group_end = std::max(group_end, B.hi_end);
        std::fill(B.Ot.begin(), B.Ot.end(), 0.0f);
      }
      const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (index_t kb = 0; kb < group_end; kb += flash_kb) {
        for (index_t bi = 0; bi < nb_in; ++bi) {
          flash_qblock& B = qbs[static_cast<std::size_t>(bi)];
          if (kb >= B.hi_end) continue;
          const index_t nb = std::min(flash_kb, B.hi_end - kb);
          const index_t nb8 = (nb + 7) / 8 * 8;
          for (index_t j = 0; j < nb8; j += 8) {
            const float* rows[8];
            for (int r = 0; r < 8; ++r) rows[r] = K + std::min(kb + j + r, n - 1) * ldk;
            flash_qk_8x32(B.Qt.data(), rows, d, S.data() + j * flash_qb);
          }
          if (kb + nb8 > B.lo_end) {  // mask keys at or beyond each query's end (and padding rows)
            const __m512i e0 = _mm512_load_si512(B.endv), e1 = _mm512_load_si512(B.endv + 16);
            for (index_t j = 0; j < nb8; ++j) {
              const __m512i key = _mm512_set1_epi32(static_cast<std::int32_t>(kb + j));
              float* srow = S.data() + j * flash_qb;
              const __mmask16 k0 = _mm512_cmpge_epi32_mask(key, e0), k1 = _mm512_cmpge_epi32_mask(key, e1);
              _mm512_store_ps(srow, _mm512_mask_blend_ps(k0, _mm512_load_ps(srow), ninf));
              _mm512_store_ps(srow + 16, _mm512_mask_blend_ps(k1, _mm512_load_ps(srow + 16), ninf));
            }
          }
          flash_softmax_block(S.data(), nb8, B.m, B.l, B.alpha);
          const __m512 al0 = _mm512_load_ps(B.alpha), al1 = _mm512_load_ps(B.alpha + 16);
          for (index_t c = 0; c < dv; ++c) {
            float* o = B.Ot.data() + c * flash_qb;
            _mm512_store_ps(o, _mm512_mul_ps(_mm512_load_ps(o), al0));
            _mm512_store_ps(o + 16, _mm512_mul_ps(_mm512_load_ps(o + 16), al1));
          }
          // P·V over the real rows only (padding rows have weight 0 but may alias row n−1)
          const float* Vb = V + kb * ldv;
          float* Ot = B.Ot.data();
          index_t c = 0;
          for (; c + 8 <= dv; c += 8) flash_pv_32<8>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb);
          switch (dv - c) {
            case 1: flash_pv_32<1>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb); break;
            case 2: flash_pv_32<2>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb); break;
            case 3: flash_pv_32<3>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb); break;
            case 4: flash_pv_32<4>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb); break;
            case 5: flash_pv_32<5>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb); break;
            case 6: flash_pv_32<6>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb); break;
            case 7: flash_pv_32<7>(S.data(), Vb + c, ldv, nb, Ot + c * flash_qb); break;
            default: break;
          }
        }
      }
      for (index_t bi = 0; bi < nb_in; ++bi) {
        const flash_qblock& B = qbs[static_cast<std::size_t>(bi)];
        for (index_t i = 0; i < B.nq; ++i) {
          const float mi = std::max(B.m[i], sink2);
          float den = B.l[i] * std::exp2(B.m[i] - mi);
          if (sink2 > -std::numeric_limits<float>::infinity()) den += std::exp2(sink2 - mi);
          const float inv = std::exp2(B.m[i] - mi) / den;
          for (index_t c = 0; c < dv; ++c)
            O[(B.q0 + i) * ldo + c] = B.Ot[static_cast<std::size_t>(c * flash_qb + i)] * inv;
        }
      }
    }
  }
}

#else

template <class Real, class Arch>
inline constexpr bool flash_avx512_enabled = false;
inline bool flash_avx512_applicable(index_t, index_t, index_t, index_t, const index_t*) noexcept { return false; }
template <class Real>
void flash_avx512(const Real*, index_t, index_t, const Real*, index_t, const Real*, index_t, index_t, index_t,
                  index_t, const index_t*, Real, Real, Real*, index_t, int) noexcept {}

#endif

}  // namespace kvphase::attention::detail
