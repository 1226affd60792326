#pragma once
/// \file attention/detail/flash_avx512.hpp
/// Not API. AVX-512 flash-style fast path of attend_batch for float (reference/performance.md §5).
///
/// Per block of 32 queries:
///   Qt  [d × 32]    queries transposed, prescaled by scale·log2(e), so scores are in log2 units
///   S   [128 × 32]  scores of one key block, keys × queries ("Sᵀ"): the softmax max, exp2 and sum
///                   run vertically across the 32 queries of a row, two zmm per row
///   Ot  [dv8 × 32]  running output, transposed (dv rounded up to 8); m, l [32] running max, sum
/// Threads take groups of query blocks. For each key block of 128 keys the group packs the block
/// once (Kp [16][d][8]: 8 keys interleaved by channel; Vp [dv8/8][128][8]: 8 value channels of
/// each key), so every micro-kernel reads one sequential stream, then for each query block:
/// S = K_blk · Qt (micro-kernel 8 keys × 32 queries, 16 zmm accumulators, K broadcast); keys at
/// or beyond a query's key_end get −∞; m_new = max(m, max S); Ot, l *= exp2(m − m_new);
/// S ← exp2(S − m_new), l += Σ S; Ot += Vᵀ_blk · S (micro-kernel 8 value channels × 32 queries,
/// V broadcast). At the end O[q] = Ot[:, q] / (l + exp2(sink·log2(e) − m)).
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

/// S[r][0:32] = Σ_c Kp[c][r] · Qt[c][0:32] for the 8 keys of one packed group.
///   Qt: [d × 32]; Kp: [d × 8] (the 8 keys interleaved by channel, so the broadcasts read one
///   sequential stream); S: [8 × 32]. All 64-byte aligned.
__attribute__((noinline)) inline void flash_qk_8x32(const float* Qt, const float* Kp, index_t d, float* S) noexcept {
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
         a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00, a60 = a00, a61 = a00, a70 = a00, a71 = a00;
  for (index_t c = 0; c < d; ++c) {
    const __m512 q0 = _mm512_load_ps(Qt + c * 32), q1 = _mm512_load_ps(Qt + c * 32 + 16);
    const float* k = Kp + c * 8;
    __m512 b;
    b = _mm512_set1_ps(k[0]); a00 = _mm512_fmadd_ps(b, q0, a00); a01 = _mm512_fmadd_ps(b, q1, a01);
    b = _mm512_set1_ps(k[1]); a10 = _mm512_fmadd_ps(b, q0, a10); a11 = _mm512_fmadd_ps(b, q1, a11);
    b = _mm512_set1_ps(k[2]); a20 = _mm512_fmadd_ps(b, q0, a20); a21 = _mm512_fmadd_ps(b, q1, a21);
    b = _mm512_set1_ps(k[3]); a30 = _mm512_fmadd_ps(b, q0, a30); a31 = _mm512_fmadd_ps(b, q1, a31);
    b = _mm512_set1_ps(k[4]); a40 = _mm512_fmadd_ps(b, q0, a40); a41 = _mm512_fmadd_ps(b, q1, a41);
    b = _mm512_set1_ps(k[5]); a50 = _mm512_fmadd_ps(b, q0, a50); a51 = _mm512_fmadd_ps(b, q1, a51);
    b = _mm512_set1_ps(k[6]); a60 = _mm512_fmadd_ps(b, q0, a60); a61 = _mm512_fmadd_ps(b, q1, a61);
    b = _mm512_set1_ps(k[7]); a70 = _mm512_fmadd_ps(b, q0, a70); a71 = _mm512_fmadd_ps(b, q1, a71);
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

/// Ot[r][0:32] += Σ_{j<nb} Vp[j][r] · P[j][0:32] for the 8 value channels of one packed chunk.
///   P: [nb × 32]; Vp: [nb × 8] (8 channels of each key, contiguous); Ot: [8 × 32]. Aligned.
__attribute__((noinline)) inline void flash_pv_8x32(const float* P, const float* Vp, index_t nb, float* Ot) noexcept {
  __m512 a0[8], a1[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    a0[r] = _mm512_load_ps(Ot + r * 32);
    a1[r] = _mm512_load_ps(Ot + r * 32 + 16);
  }
  for (index_t j = 0; j < nb; ++j) {
    const __m512 p0 = _mm512_load_ps(P + j * 32), p1 = _mm512_load_ps(P + j * 32 + 16);
    const float* v = Vp + j * 8;
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

/// Kp[c][r] = rows[r][c] for c < d, r < 8: 8 key rows interleaved by channel (8×8 transposes).
inline void flash_pack_keys8(const float* const* rows, index_t d, float* Kp) noexcept {
  index_t c = 0;
  for (; c + 8 <= d; c += 8) {
    const __m256 r0 = _mm256_loadu_ps(rows[0] + c), r1 = _mm256_loadu_ps(rows[1] + c),
                 r2 = _mm256_loadu_ps(rows[2] + c), r3 = _mm256_loadu_ps(rows[3] + c),
                 r4 = _mm256_loadu_ps(rows[4] + c), r5 = _mm256_loadu_ps(rows[5] + c),
                 r6 = _mm256_loadu_ps(rows[6] + c), r7 = _mm256_loadu_ps(rows[7] + c);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
                 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
                 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    float* o = Kp + c * 8;
    _mm256_store_ps(o + 0, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_store_ps(o + 8, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_store_ps(o + 16, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_store_ps(o + 24, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_store_ps(o + 32, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_store_ps(o + 40, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_store_ps(o + 48, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_store_ps(o + 56, _mm256_permute2f128_ps(u3, u7, 0x31));
  }
  for (; c < d; ++c)
    for (int r = 0; r < 8; ++r) Kp[c * 8 + r] = rows[r][c];
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
  avec Qt, Ot;  // [d × 32], [dv8 × 32] (dv rounded up to a multiple of 8)
  alignas(64) float m[32];
  alignas(64) float l[32];
  alignas(64) float alpha[32];
  alignas(64) std::int32_t endv[32];
  index_t q0 = 0, nq = 0, lo_end = 0, hi_end = 0;
};

/// Buffers of one thread: query-block states, the score block and the packed key block.
struct flash_workspace {
  std::vector<flash_qblock> qbs;
  flash_qblock::avec S, Kp, Vp;
  std::vector<float> zero;
  void reserve(index_t group, index_t d, index_t dv8) {
    if (static_cast<index_t>(qbs.size()) < group) qbs.resize(static_cast<std::size_t>(group));
    for (auto& b : qbs) {
      if (static_cast<index_t>(b.Qt.size()) < d * flash_qb) b.Qt.resize(static_cast<std::size_t>(d * flash_qb));
      if (static_cast<index_t>(b.Ot.size()) < dv8 * flash_qb) b.Ot.resize(static_cast<std::size_t>(dv8 * flash_qb));
    }
    if (static_cast<index_t>(S.size()) < flash_kb * flash_qb) S.resize(static_cast<std::size_t>(flash_kb * flash_qb));
    if (static_cast<index_t>(Kp.size()) < flash_kb * d) Kp.resize(static_cast<std::size_t>(flash_kb * d));
    if (static_cast<index_t>(Vp.size()) < flash_kb * dv8) Vp.resize(static_cast<std::size_t>(flash_kb * dv8));
    if (static_cast<index_t>(zero.size()) < std::max(d, dv8)) zero.assign(static_cast<std::size_t>(std::max(d, dv8)), 0.0f);
  }
};

/// The batched kernel; see the file comment. Shapes as attend_batch (full.hpp).
/// Threads take groups of up to 8 query blocks; within a group every key block (128 keys, 64 KiB
/// of K and of V at d = 128) is read from memory once and reused by the group's query blocks from
/// L2. The grouping does not change any query's arithmetic.
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
    flash_qblock::avec& S = ws.S;
    flash_qblock::avec& Kp = ws.Kp;
    flash_qblock::avec& Vp = ws.Vp;
    const std::vector<float>& zero = ws.zero;  // rows past n
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
        std::fill(B.Ot.begin(), B.Ot.begin() + dv8 * flash_qb, 0.0f);
      }
      const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (index_t kb = 0; kb < group_end; kb += flash_kb) {
        // pack keys kb … kb + nbg − 1 (rows past n are zero; they are masked)
        const index_t nbg = std::min(flash_kb, group_end - kb), nbg8 = (nbg + 7) / 8 * 8;
        for (index_t j = 0; j < nbg8; j += 8) {
          const float* rows[8];
          for (int r = 0; r < 8; ++r) rows[r] = kb + j + r < n ? K + (kb + j + r) * ldk : zero.data();
          flash_pack_keys8(rows, d, Kp.data() + (j / 8) * d * 8);
        }
        // values chunk by chunk, so the stores run sequentially (a row-major walk would write
        // 4-KiB-strided addresses that all fall into one L1 set)
        for (index_t c = 0; c < dv8; c += 8) {
          float* vp = Vp.data() + (c / 8) * flash_kb * 8;
          if (c + 8 <= dv) {
            for (index_t j = 0; j < nbg8; ++j) {
              const float* vr = kb + j < n ? V + (kb + j) * ldv : zero.data();
              _mm256_store_ps(vp + j * 8, _mm256_loadu_ps(vr + c));
            }
          } else {
            for (index_t j = 0; j < nbg8; ++j) {
              const float* vr = kb + j < n ? V + (kb + j) * ldv : zero.data();
              for (index_t r = 0; r < 8; ++r) vp[j * 8 + r] = c + r < dv ? vr[c + r] : 0.0f;
            }
          }
        }
        const index_t next = kb + flash_kb, pf_rows = (flash_kb + nb_in - 1) / nb_in;
        for (index_t bi = 0; bi < nb_in; ++bi) {
          // prefetch a share of the next key block into L2 while this one is computed
          for (index_t r = next + bi * pf_rows; r < std::min({next + (bi + 1) * pf_rows, group_end, n}); ++r) {
            for (index_t c = 0; c < d; c += 16) _mm_prefetch(reinterpret_cast<const char*>(K + r * ldk + c), _MM_HINT_T1);
            for (index_t c = 0; c < dv; c += 16) _mm_prefetch(reinterpret_cast<const char*>(V + r * ldv + c), _MM_HINT_T1);
          }
          flash_qblock& B = qbs[static_cast<std::size_t>(bi)];
          if (kb >= B.hi_end) continue;
          const index_t nb = std::min(flash_kb, B.hi_end - kb);
          const index_t nb8 = (nb + 7) / 8 * 8;
          for (index_t j = 0; j < nb8; j += 8)
            flash_qk_8x32(B.Qt.data(), Kp.data() + (j / 8) * d * 8, d, S.data() + j * flash_qb);
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
          for (index_t c = 0; c < dv8; ++c) {
            float* o = B.Ot.data() + c * flash_qb;
            _mm512_store_ps(o, _mm512_mul_ps(_mm512_load_ps(o), al0));
            _mm512_store_ps(o + 16, _mm512_mul_ps(_mm512_load_ps(o + 16), al1));
          }
          // P·V: masked and padding rows have weight exactly 0 (and padding values are 0)
          for (index_t c = 0; c < dv8; c += 8)
            flash_pv_8x32(S.data(), Vp.data() + (c / 8) * flash_kb * 8, nb8, B.Ot.data() + c * flash_qb);
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
