#pragma once
/// \file attention/detail/flash_avx512.hpp
/// Not API. AVX-512 flash-style fast path of attend_batch for float (reference/performance.md §5).
///
/// Per block of 32 queries:
///   Qt  [d × 32]    queries transposed, prescaled by scale·log2(e), so scores are in log2 units
///   S   [128 × 32]  scores of one key block, keys × queries ("Sᵀ"): the softmax max, exp2 and sum
///                   run vertically across the 32 queries of a row, two zmm per row
///   Ot  [dv8 × 32]  running output, transposed (dv rounded up to 8); m, l [32] running max, sum
/// Threads take groups of query blocks; for each key block of 128 keys, for each query block of
/// the group: S = K_blk · Qt (micro-kernel 8 keys × 32 queries, 16 zmm accumulators, each K
/// element broadcast straight from the row-major K, so K is never packed); keys at or beyond a
/// query's key_end get −∞; m_new = max(m, max S); alpha = exp2(m − m_new); l ← l·alpha;
/// S ← exp2(S − m_new), l += Σ S; Ot ← alpha·Ot + Vᵀ_blk · S (micro-kernel 8 value channels ×
/// 32 queries, each V element broadcast from the row-major V, so V is not packed either).
/// At the end O[q] = Ot[:, q] / (l + exp2(sink·log2(e) − m)).
/// While a key block is computed, the next one is prefetched into L2 a few cache lines before
/// each micro-kernel call (a burst of prefetches at once stalls; spread out, the reads of K and
/// V from memory overlap the arithmetic).
/// The micro-kernels are separate noinline functions: inlined, GCC spills the accumulators.
/// exp2 is round-to-nearest range reduction, a degree-6 minimax polynomial for 2^f on [−½, ½] and
/// vscalefps; masked keys (−∞) give exactly 0, so they contribute nothing, bitwise.
/// Each query's arithmetic is independent of the block split and thread count.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "kvphase/core/simd.hpp"
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

/// 2^x for 16 lanes, x ≤ 128: x = n + f with n = round(x), f ∈ [−½, ½] exact; 2^f by a degree-6
/// minimax polynomial (relative error 1.9e-9 in exact arithmetic; as evaluated in float at most
/// 1.34 u = 8.0e-8 for normal results, checked over every float f ∈ [−½, ½]); vscalefps multiplies
/// by 2^n. Arguments below −125 give exactly 0 (simd::exp2_flush_below: the result would be
/// subnormal, and subnormal weights make the P·V multiply-adds take microcode assists). Clamp =
/// true also accepts −∞ (and anything below −200); without it the argument must be finite.
template <bool Clamp>
inline __m512 exp2_ps(__m512 x) noexcept {
  if constexpr (Clamp) x = _mm512_max_ps(x, _mm512_set1_ps(-200.0f));
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(simd::exp2_flush_below<float>), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.534581243e-04f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339993090e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618489072e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550328642e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264625e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471825e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

/// S[r][0:32] = Σ_c rows[r][c] · Qt[c][0:32] for 8 key rows, read in place (row-major K):
///   every K element is broadcast once, so K needs no packing.
///   Qt: [d × 32], 64-byte aligned; rows: 8 row pointers; S: [8 × 32], aligned.
__attribute__((noinline)) inline void flash_qk_8x32(const float* Qt, const float* const* rows, index_t d,
                                                    float* S) noexcept {
  const float *k0 = rows[0], *k1 = rows[1], *k2 = rows[2], *k3 = rows[3], *k4 = rows[4], *k5 = rows[5],
              *k6 = rows[6], *k7 = rows[7];
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
         a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00, a60 = a00, a61 = a00, a70 = a00, a71 = a00;
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

/// Ot[r][0:32] ← alpha[0:32]·Ot[r][0:32] + Σ_{j<nb} V[j·ldv + r] · P[j][0:32] for 8 value channels
/// (j in order), V read in place: each of its elements is broadcast once, so V needs no packing.
///   P: [nb × 32], alpha: [32], Ot: [8 × 32], all 64-byte aligned; V: 8 channels of row 0.
__attribute__((noinline)) inline void flash_pv_8x32(const float* P, const float* V, index_t ldv, index_t nb,
                                                    const float* alpha, float* Ot) noexcept {
  __m512 a0[8], a1[8];
  {
    const __m512 al0 = _mm512_load_ps(alpha), al1 = _mm512_load_ps(alpha + 16);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      a0[r] = _mm512_mul_ps(_mm512_load_ps(Ot + r * 32), al0);
      a1[r] = _mm512_mul_ps(_mm512_load_ps(Ot + r * 32 + 16), al1);
    }
  }
  for (index_t j = 0; j < nb; ++j) {
    const __m512 p0 = _mm512_load_ps(P + j * 32), p1 = _mm512_load_ps(P + j * 32 + 16);
    const float* v = V + j * ldv;
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const __m512 b = _mm512_set1_ps(v[r]);
      a0[r] = _mm512_fmadd_ps(b, p0, a0[r]);
      a1[r] = _mm512_fmadd_ps(b, p1, a1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    _mm512_store_ps(Ot + r * 32, a0[r]);
    _mm512_store_ps(Ot + r * 32 + 16, a1[r]);
  }
}

/// Online-softmax step on one score block: m_new = max(m, max_j S[j]); alpha = exp2(m − m_new);
/// S[j] ← exp2(S[j] − m_new); l ← l·alpha + Σ_j S[j] (j in order); m ← m_new; writes alpha.
///   S: [nb × 32]; m, l, alpha: [32] (all aligned). Masked = false requires every S[j] finite.
template <bool Masked>
__attribute__((noinline)) void flash_softmax_block(float* S, index_t nb, float* m, float* l, float* alpha) noexcept {
  __m512 mx0 = _mm512_load_ps(m), mx1 = _mm512_load_ps(m + 16);
  const __m512 mo0 = mx0, mo1 = mx1;
  for (index_t j = 0; j < nb; ++j) {
    mx0 = _mm512_max_ps(mx0, _mm512_load_ps(S + j * 32));
    mx1 = _mm512_max_ps(mx1, _mm512_load_ps(S + j * 32 + 16));
  }
  const __m512 al0 = exp2_ps<true>(_mm512_sub_ps(mo0, mx0)), al1 = exp2_ps<true>(_mm512_sub_ps(mo1, mx1));
  __m512 s0 = _mm512_mul_ps(_mm512_load_ps(l), al0), s1 = _mm512_mul_ps(_mm512_load_ps(l + 16), al1);
  for (index_t j = 0; j < nb; ++j) {
    const __m512 e0 = exp2_ps<Masked>(_mm512_sub_ps(_mm512_load_ps(S + j * 32), mx0));
    const __m512 e1 = exp2_ps<Masked>(_mm512_sub_ps(_mm512_load_ps(S + j * 32 + 16), mx1));
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
  avec Qt, Ot;  // [d × 32], [dv8 × 32] (dv rounded up to a multiple of 8)
  alignas(64) float m[32];
  alignas(64) float l[32];
  alignas(64) float alpha[32];
  alignas(64) std::int32_t endv[32];
  index_t q0 = 0, nq = 0, lo_end = 0, hi_end = 0;
};

/// Buffers of one thread: query-block states, the score block and, when dv is not a multiple of
/// 8, the last value channels of one key block padded with zeros.
struct flash_workspace {
  std::vector<flash_qblock> qbs;
  flash_qblock::avec S, Vt;
  void reserve(index_t group, index_t d, index_t dv8) {
    if (static_cast<index_t>(qbs.size()) < group) qbs.resize(static_cast<std::size_t>(group));
    for (auto& b : qbs) {
      if (static_cast<index_t>(b.Qt.size()) < d * flash_qb) b.Qt.resize(static_cast<std::size_t>(d * flash_qb));
      if (static_cast<index_t>(b.Ot.size()) < dv8 * flash_qb) b.Ot.resize(static_cast<std::size_t>(dv8 * flash_qb));
    }
    if (static_cast<index_t>(S.size()) < flash_kb * flash_qb) S.resize(static_cast<std::size_t>(flash_kb * flash_qb));
    if (static_cast<index_t>(Vt.size()) < flash_kb * 8) Vt.resize(static_cast<std::size_t>(flash_kb * 8));
  }
};

/// Prefetches the K and V rows [r0, r1) into L2 a few cache lines at a time, spread over `calls`
/// calls of step(), so the next key block arrives while the current one is computed.
struct flash_prefetcher {
  const float *K, *V;
  index_t ldk, ldv, lk, lv, row, r1, line = 0, per_call;
  bool on_v = false;
  flash_prefetcher(const float* K_, index_t ldk_, index_t d, const float* V_, index_t ldv_, index_t dv, index_t r0,
                   index_t r1_, index_t calls) noexcept
      : K(K_), V(V_), ldk(ldk_), ldv(ldv_), lk((d + 15) / 16), lv((dv + 15) / 16), row(r0), r1(r1_) {
    const index_t total = r1 > r0 ? (r1 - r0) * (lk + lv) : 0;
    per_call = (total + calls - 1) / std::max<index_t>(calls, 1);
  }
  void step() noexcept {
    for (index_t i = 0; i < per_call && row < r1; ++i) {
      const float* p = on_v ? V + row * ldv + line * 16 : K + row * ldk + line * 16;
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
      if (++line == (on_v ? lv : lk)) {
        line = 0;
        if (on_v) ++row;
        on_v = !on_v;
      }
    }
  }
};

/// The batched kernel; see the file comment. Shapes as attend_batch (full.hpp).
/// Threads take groups of up to 8 query blocks (dealt so that the threads get equal work, also
/// for causal attention); within a group every key block (128 keys, 64 KiB of K and of V at d = 128) is read
/// from memory once and reused by the group's query blocks from L2. The grouping does not change
/// any query's arithmetic.
inline void flash_avx512(const float* Q, index_t ldq, index_t M, const float* K, index_t ldk, const float* V,
                         index_t ldv, index_t n, index_t d, index_t dv, const index_t* key_end, float scale,
                         float sink, float* O, index_t ldo, int threads) noexcept {
  constexpr float log2e = 1.44269504088896340736f;
  const index_t nqb = (M + flash_qb - 1) / flash_qb;
  const index_t group = std::max<index_t>(1, std::min<index_t>(8, (nqb + threads - 1) / std::max(threads, 1)));
  const index_t ngroups = (nqb + group - 1) / group;
  const float qscale = scale * log2e;
  const float sink2 = sink * log2e;  // −∞ stays −∞
  const index_t dv8 = (dv + 7) / 8 * 8;
#pragma omp parallel num_threads(threads) if (threads > 1 && ngroups > 1)
  {
    // per-thread workspace, kept between calls (no allocation or first touch in steady state)
    thread_local flash_workspace ws;
    ws.reserve(group, d, dv8);
    std::vector<flash_qblock>& qbs = ws.qbs;
    float* const S = ws.S.data();
    float* const Vt = ws.Vt.data();
#pragma omp for schedule(static)
    for (index_t gi = 0; gi < ngroups; ++gi) {
      // query blocks dealt to the groups back and forth (0 1 … g−1 g−1 … 1 0 0 1 …), so that with
      // per-query key ranges growing with the query index (causal attention) every group, and so
      // every thread, gets about the same work
      index_t nb_in = 0;
      index_t members[8];
      for (index_t r = 0; r * ngroups < nqb; ++r) {
        const index_t b = r * ngroups + (r % 2 == 0 ? gi : ngroups - 1 - gi);
        if (b < nqb) members[nb_in++] = b;
      }
      index_t group_end = 0;
      for (index_t bi = 0; bi < nb_in; ++bi) {
        flash_qblock& B = qbs[static_cast<std::size_t>(bi)];
        B.q0 = members[bi] * flash_qb;
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
        std::fill(B.Ot.begin(), B.Ot.begin() + dv8 * flash_qb, 0.0f);
      }
      const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (index_t kb = 0; kb < group_end; kb += flash_kb) {
        // the next key block, prefetched during this one's micro-kernel calls
        const index_t next = kb + flash_kb;
        flash_prefetcher pf(K, ldk, d, V, ldv, dv, next, std::min(group_end, next + flash_kb),
                            nb_in * (flash_kb / 8 + dv8 / 8));
        for (index_t bi = 0; bi < nb_in; ++bi) {
          flash_qblock& B = qbs[static_cast<std::size_t>(bi)];
          if (kb >= B.hi_end) continue;
          const index_t nb = std::min(flash_kb, B.hi_end - kb);  // rows kb … kb + nb − 1 exist (< n)
          const index_t nb8 = (nb + 7) / 8 * 8;
          for (index_t j = 0; j < nb8; j += 8) {
            // rows past nb repeat the last one; their scores are masked below
            const float* rows[8];
            for (index_t r = 0; r < 8; ++r) rows[r] = K + (kb + std::min(j + r, nb - 1)) * ldk;
            pf.step();
            flash_qk_8x32(B.Qt.data(), rows, d, S + j * flash_qb);
          }
          const bool masked = kb + nb8 > B.lo_end;
          if (masked) {  // mask keys at or beyond each query's end (and padding rows)
            const __m512i e0 = _mm512_load_si512(B.endv), e1 = _mm512_load_si512(B.endv + 16);
            for (index_t j = 0; j < nb8; ++j) {
              const __m512i key = _mm512_set1_epi32(static_cast<std::int32_t>(kb + j));
              float* srow = S + j * flash_qb;
              const __mmask16 k0 = _mm512_cmpge_epi32_mask(key, e0), k1 = _mm512_cmpge_epi32_mask(key, e1);
              _mm512_store_ps(srow, _mm512_mask_blend_ps(k0, _mm512_load_ps(srow), ninf));
              _mm512_store_ps(srow + 16, _mm512_mask_blend_ps(k1, _mm512_load_ps(srow + 16), ninf));
            }
          }
          // a block without masked keys has only finite scores: exp2 without the −∞ clamp
          if (masked) flash_softmax_block<true>(S, nb8, B.m, B.l, B.alpha);
          else flash_softmax_block<false>(S, nb8, B.m, B.l, B.alpha);
          // Ot ← alpha·Ot + Vᵀ·P over the nb existing rows (masked rows have weight exactly 0)
          const float* vb = V + kb * ldv;
          index_t c = 0;
          for (; c + 8 <= dv; c += 8) {
            pf.step();
            flash_pv_8x32(S, vb + c, ldv, nb, B.alpha, B.Ot.data() + c * flash_qb);
          }
          if (c < dv) {  // last dv mod 8 channels, padded with zeros
            for (index_t j = 0; j < nb; ++j)
              for (index_t r = 0; r < 8; ++r) Vt[j * 8 + r] = c + r < dv ? vb[j * ldv + c + r] : 0.0f;
            flash_pv_8x32(S, Vt, 8, nb, B.alpha, B.Ot.data() + c * flash_qb);
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
