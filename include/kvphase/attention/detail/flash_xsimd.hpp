#pragma once
/// \file attention/detail/flash_xsimd.hpp
/// Not API. Portable blocked fast path of the batched attention, written once over xsimd batch
/// types, so the same code compiles for every SIMD path (AVX-512, AVX2, SSE2, NEON widths) and for
/// float and double. float on AVX-512 keeps its hand-tuned kernel (flash_avx512.hpp); every other
/// SIMD (Real, Arch) pair runs this one. The scalar tag keeps the one-query streaming loop (the
/// reference shape).
///
/// Notation (B = xsimd::batch<Real, Arch>, L = its lanes):
///   QB = 2L   queries per tile (two vectors across queries)
///   RK        key rows per score micro-kernel call, RV value channels per P·V call:
///             8 with 32 vector registers (512-bit batches), 6 with 16 (2·R accumulators, two
///             query vectors and one broadcast fit in the register file without spills)
///   KB = 16·RK keys per block (128 or 96)
///   Qt [d × QB]   the tile's queries transposed, prescaled by scale·log2(e): scores in log2 units
///   S  [KB × QB]  one block's scores, keys × queries: max, exp2 and sum run across the queries
///   Ot [dvR × QB] running output transposed (dv rounded up to RV); m, l [QB] running max and sum
/// A query attends, in order, one or more key segments (for example compressed entries, then a
/// raw window): segment s gives query i the rows [lo_i, hi_i) of its own K/V, all in one online
/// softmax. Per block of keys and per tile: S = K_blk·Qt (each K element broadcast from the
/// row-major K, so K is never packed), keys outside a query's range get −∞, m_new = max(m, max S),
/// alpha = exp2(m − m_new), S ← exp2(S − m_new), l ← l·alpha + Σ S, Ot ← alpha·Ot + Vᵀ_blk·S (each V
/// element broadcast from the row-major V). At the end o_i = Ot[:, i] / (l_i + exp2(sink·log2 e − m_i)).
/// Threads take groups of up to 8 tiles; a key block is read once from memory for the group and
/// reused from L2 by its tiles. Key blocks start at multiples of KB (clipped to the tile's range),
/// and tiles are fixed runs of QB consecutive queries, so each query's arithmetic depends neither
/// on the thread count nor on the grouping: results are bitwise reproducible for a given Arch.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kvphase::attention::detail {

/// One key segment of the blocked kernel: rows [lo[i], hi[i]) of K/V for query i
/// (lo = nullptr: 0; hi = nullptr: n). K [n × ldk] (first d used), V [n × ldv] (first dv used).
template <class Real>
struct kv_segment {
  const Real* K = nullptr;
  index_t ldk = 0;
  const Real* V = nullptr;
  index_t ldv = 0;
  index_t n = 0;
  const index_t* lo = nullptr;
  const index_t* hi = nullptr;
};

/// Tile geometry of the blocked kernel for (Real, Arch).
template <class Real, class Arch>
struct xflash_geom {
  using B = xsimd::batch<Real, Arch>;
  static constexpr index_t L = static_cast<index_t>(B::size);
  static constexpr index_t QB = 2 * L;
  static constexpr bool many_regs = sizeof(B) == 64;  // AVX-512: 32 vector registers
  static constexpr int RK = many_regs ? 8 : 6;
  static constexpr int RV = many_regs ? 8 : 6;
  static constexpr index_t KB = 16 * RK;
};

/// Whether the blocked kernel serves (Real, Arch): every SIMD path except float on AVX-512
/// (flash_avx512.hpp); the scalar reference tag never.
template <class Real, class Arch>
inline constexpr bool flash_xsimd_enabled = !simd::is_scalar_v<Arch>;

/// The blocked kernel pays off from about 8 queries on (below, the job is memory bound).
inline bool flash_xsimd_applicable(index_t M, index_t d, index_t dv) noexcept { return M >= 8 && d >= 1 && dv >= 1; }

/// S[r][0:QB] = Σ_c rows[r][c]·Qt[c][0:QB] for R key rows read in place.
///   Qt: [d × QB] aligned; rows: R row pointers; S: [R × QB] aligned.
/// noinline: inlined into the block loop, GCC spills the accumulators.
template <class Real, class Arch, int R>
[[gnu::noinline]] void xflash_qk(const Real* Qt, const Real* const* rows, index_t d, Real* S) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size, QB = 2 * L;
  const Real* k[R];
  B a0[R], a1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    k[r] = rows[r];
    a0[r] = B(Real(0));
    a1[r] = B(Real(0));
  }
  for (index_t c = 0; c < d; ++c) {
    const B q0 = B::load_aligned(Qt + c * QB), q1 = B::load_aligned(Qt + c * QB + L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const B b(k[r][c]);
      a0[r] = simd::fma(b, q0, a0[r]);
      a1[r] = simd::fma(b, q1, a1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    a0[r].store_aligned(S + r * QB);
    a1[r].store_aligned(S + r * QB + L);
  }
}

/// Ot[r][0:QB] ← alpha·Ot[r][0:QB] + Σ_{j<nb} V[j·ldv + r]·P[j][0:QB] for R value channels
/// (j in order), V read in place.  P: [nb × QB], alpha: [QB], Ot: [R × QB], all aligned.
template <class Real, class Arch, int R>
[[gnu::noinline]] void xflash_pv(const Real* P, const Real* V, index_t ldv, index_t nb, const Real* alpha,
                                 Real* Ot) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size, QB = 2 * L;
  B a0[R], a1[R];
  {
    const B al0 = B::load_aligned(alpha), al1 = B::load_aligned(alpha + L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      a0[r] = B::load_aligned(Ot + r * QB) * al0;
      a1[r] = B::load_aligned(Ot + r * QB + L) * al1;
    }
  }
  for (index_t j = 0; j < nb; ++j) {
    const B p0 = B::load_aligned(P + j * QB), p1 = B::load_aligned(P + j * QB + L);
    const Real* v = V + j * ldv;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const B b(v[r]);
      a0[r] = simd::fma(b, p0, a0[r]);
      a1[r] = simd::fma(b, p1, a1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    a0[r].store_aligned(Ot + r * QB);
    a1[r].store_aligned(Ot + r * QB + L);
  }
}

/// Online-softmax step on one score block (log2 units): m_new = max(m, max_j S[j]);
/// alpha = exp2(m − m_new); S[j] ← exp2(S[j] − m_new); l ← l·alpha + Σ_j S[j] (j in order);
/// m ← m_new; writes alpha. Entries of −∞ give exactly 0. A query whose scores so far are all
/// −∞ keeps m = −∞, l = 0 (the shift used is then 0, so nothing becomes NaN).
///   S: [nb × QB]; m, l, alpha: [QB] (all aligned).
template <class Real, class Arch>
[[gnu::noinline]] void xflash_softmax(Real* S, index_t nb, Real* m, Real* l, Real* alpha) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size, QB = 2 * L;
  const B ninf(-std::numeric_limits<Real>::infinity()), zero(Real(0));
  B mx0 = B::load_aligned(m), mx1 = B::load_aligned(m + L);
  const B mo0 = mx0, mo1 = mx1;
  for (index_t j = 0; j < nb; ++j) {
    mx0 = xsimd::max(mx0, B::load_aligned(S + j * QB));
    mx1 = xsimd::max(mx1, B::load_aligned(S + j * QB + L));
  }
  const B mu0 = xsimd::select(mx0 == ninf, zero, mx0), mu1 = xsimd::select(mx1 == ninf, zero, mx1);
  // weights whose exp2 would be subnormal are exactly 0 (simd::exp2_flush_below)
  const B lo(simd::exp2_flush_below<Real>);
  auto ex2 = [&](B a) { return xsimd::select(a < lo, zero, xsimd::exp2(a)); };
  const B al0 = ex2(mo0 - mu0), al1 = ex2(mo1 - mu1);
  B s0 = B::load_aligned(l) * al0, s1 = B::load_aligned(l + L) * al1;
  for (index_t j = 0; j < nb; ++j) {
    const B e0 = ex2(B::load_aligned(S + j * QB) - mu0);
    const B e1 = ex2(B::load_aligned(S + j * QB + L) - mu1);
    e0.store_aligned(S + j * QB);
    e1.store_aligned(S + j * QB + L);
    s0 += e0;
    s1 += e1;
  }
  mx0.store_aligned(m);
  mx1.store_aligned(m + L);
  s0.store_aligned(l);
  s1.store_aligned(l + L);
  al0.store_aligned(alpha);
  al1.store_aligned(alpha + L);
}

/// State of one tile of QB consecutive queries.
template <class Real>
struct xflash_tile {
  using avec = std::vector<Real, xsimd::aligned_allocator<Real, 64>>;
  avec Qt, Ot, m, l, alpha;     // [d × QB], [dvR × QB], [QB] × 3
  std::vector<index_t> lo, hi;  // [QB] the current segment's range of each query
  index_t q0 = 0, nq = 0, lo_min = 0, lo_max = 0, hi_min = 0, hi_max = 0;
};

/// Buffers of one thread, kept between calls (no allocation in steady state).
template <class Real, class Arch>
struct xflash_workspace {
  using G = xflash_geom<Real, Arch>;
  using avec = typename xflash_tile<Real>::avec;
  std::vector<xflash_tile<Real>> tiles;
  avec S, Vt;
  void reserve(index_t group, index_t d, index_t dvR) {
    if (static_cast<index_t>(tiles.size()) < group) tiles.resize(static_cast<std::size_t>(group));
    for (auto& t : tiles) {
      if (static_cast<index_t>(t.Qt.size()) < d * G::QB) t.Qt.resize(static_cast<std::size_t>(d * G::QB));
      if (static_cast<index_t>(t.Ot.size()) < dvR * G::QB) t.Ot.resize(static_cast<std::size_t>(dvR * G::QB));
      t.m.resize(static_cast<std::size_t>(G::QB));
      t.l.resize(static_cast<std::size_t>(G::QB));
      t.alpha.resize(static_cast<std::size_t>(G::QB));
      t.lo.resize(static_cast<std::size_t>(G::QB));
      t.hi.resize(static_cast<std::size_t>(G::QB));
    }
    if (static_cast<index_t>(S.size()) < G::KB * G::QB) S.resize(static_cast<std::size_t>(G::KB * G::QB));
    if (static_cast<index_t>(Vt.size()) < G::KB * G::RV) Vt.resize(static_cast<std::size_t>(G::KB * G::RV));
  }
};

/// One tile attends the rows [j0, j1) of a segment (every row exists): scores, mask, softmax
/// step, P·V. The tile's lo/hi hold each query's range in this segment.
template <class Real, class Arch>
void xflash_block(xflash_tile<Real>& T, const kv_segment<Real>& sg, index_t j0, index_t j1, index_t d, index_t dv,
                  Real* S, Real* Vt) noexcept {
  using G = xflash_geom<Real, Arch>;
  constexpr index_t QB = G::QB;
  constexpr int RK = G::RK, RV = G::RV;
  const index_t nb = j1 - j0;
  const index_t nbR = (nb + RK - 1) / RK * RK;
  for (index_t j = 0; j < nbR; j += RK) {
    // rows past j1 repeat the last one; their scores are masked below
    const Real* rows[RK];
    for (int r = 0; r < RK; ++r) rows[r] = sg.K + std::min(j0 + j + r, j1 - 1) * sg.ldk;
    xflash_qk<Real, Arch, RK>(T.Qt.data(), rows, d, S + j * QB);
  }
  if (j0 < T.lo_max || j0 + nbR > T.hi_min || nbR > nb) {  // keys outside a query's range: −∞
    constexpr Real ninf = -std::numeric_limits<Real>::infinity();
    for (index_t i = 0; i < QB; ++i) {
      const index_t a = std::clamp(T.lo[static_cast<std::size_t>(i)] - j0, index_t(0), nbR);
      const index_t b = std::clamp(std::min(T.hi[static_cast<std::size_t>(i)], j1) - j0, a, nbR);
      for (index_t j = 0; j < a; ++j) S[j * QB + i] = ninf;
      for (index_t j = b; j < nbR; ++j) S[j * QB + i] = ninf;
    }
  }
  xflash_softmax<Real, Arch>(S, nbR, T.m.data(), T.l.data(), T.alpha.data());
  // Ot ← alpha·Ot + Vᵀ·P over the nb existing rows (masked rows have weight exactly 0)
  const Real* vb = sg.V + j0 * sg.ldv;
  index_t c = 0;
  for (; c + RV <= dv; c += RV) xflash_pv<Real, Arch, RV>(S, vb + c, sg.ldv, nb, T.alpha.data(), T.Ot.data() + c * QB);
  if (c < dv) {  // last dv mod RV channels, padded with zeros
    for (index_t j = 0; j < nb; ++j)
      for (index_t r = 0; r < RV; ++r) Vt[j * RV + r] = c + r < dv ? vb[j * sg.ldv + c + r] : Real(0);
    xflash_pv<Real, Arch, RV>(S, Vt, RV, nb, T.alpha.data(), T.Ot.data() + c * QB);
  }
}

/// The blocked kernel (see the file comment): for i ∈ [0, M), o_i = attention of Q[i] over the
/// segments' ranges, in segment order, in one softmax with the sink; O[i] = 0 when no key is
/// attended. Q: [M × ldq] (first d used); O: [M × ldo] (first dv written).
template <class Real, class Arch>
void flash_xsimd(const Real* Q, index_t ldq, index_t M, const kv_segment<Real>* segs, int nseg, index_t d, index_t dv,
                 Real scale, Real sink, Real* O, index_t ldo, int threads) noexcept {
  using G = xflash_geom<Real, Arch>;
  constexpr index_t QB = G::QB, KB = G::KB;
  constexpr Real ninf = -std::numeric_limits<Real>::infinity();
  const Real log2e = static_cast<Real>(1.44269504088896340736);
  const index_t nqb = (M + QB - 1) / QB;
  const index_t group = std::max<index_t>(1, std::min<index_t>(8, (nqb + threads - 1) / std::max(threads, 1)));
  const index_t ngroups = (nqb + group - 1) / group;
  const Real qscale = scale * log2e;
  const Real sink2 = sink * log2e;  // −∞ stays −∞
  const index_t dvR = (dv + G::RV - 1) / G::RV * G::RV;
#pragma omp parallel num_threads(threads) if (threads > 1 && ngroups > 1)
  {
    thread_local xflash_workspace<Real, Arch> ws;
    ws.reserve(group, d, dvR);
    Real* const S = ws.S.data();
    Real* const Vt = ws.Vt.data();
#pragma omp for schedule(static)
    for (index_t gi = 0; gi < ngroups; ++gi) {
      // tiles dealt to the groups back and forth (0 1 … g−1 g−1 … 1 0 0 1 …), so that with
      // ranges growing with the query index (causal attention) every group gets about the same work
      index_t nt = 0;
      index_t members[8];
      for (index_t r = 0; r * ngroups < nqb; ++r) {
        const index_t b = r * ngroups + (r % 2 == 0 ? gi : ngroups - 1 - gi);
        if (b < nqb) members[nt++] = b;
      }
      for (index_t ti = 0; ti < nt; ++ti) {
        xflash_tile<Real>& T = ws.tiles[static_cast<std::size_t>(ti)];
        T.q0 = members[ti] * QB;
        T.nq = std::min(QB, M - T.q0);
        // Qᵀ prescaled; missing queries are zeros (their outputs are not written)
        for (index_t c = 0; c < d; ++c)
          for (index_t i = 0; i < QB; ++i)
            T.Qt[static_cast<std::size_t>(c * QB + i)] = i < T.nq ? Q[(T.q0 + i) * ldq + c] * qscale : Real(0);
        std::fill(T.m.begin(), T.m.end(), ninf);
        std::fill(T.l.begin(), T.l.end(), Real(0));
        std::fill(T.Ot.begin(), T.Ot.begin() + dvR * QB, Real(0));
      }
      for (int s = 0; s < nseg; ++s) {
        const kv_segment<Real>& sg = segs[s];
        index_t glo = sg.n, ghi = 0;
        for (index_t ti = 0; ti < nt; ++ti) {
          xflash_tile<Real>& T = ws.tiles[static_cast<std::size_t>(ti)];
          T.lo_min = sg.n;
          T.lo_max = 0;
          T.hi_min = sg.n;
          T.hi_max = 0;
          for (index_t i = 0; i < T.nq; ++i) {
            const index_t a = sg.lo ? sg.lo[T.q0 + i] : 0, b = sg.hi ? sg.hi[T.q0 + i] : sg.n;
            T.lo[static_cast<std::size_t>(i)] = a;
            T.hi[static_cast<std::size_t>(i)] = b;
            if (b <= a) continue;  // attends nothing here: outside every block, so always masked
            T.lo_min = std::min(T.lo_min, a);
            T.lo_max = std::max(T.lo_max, a);
            T.hi_min = std::min(T.hi_min, b);
            T.hi_max = std::max(T.hi_max, b);
          }
          // missing queries and queries with an empty range take the whole range masked
          for (index_t i = 0; i < QB; ++i) {
            if (i < T.nq && T.hi[static_cast<std::size_t>(i)] > T.lo[static_cast<std::size_t>(i)]) continue;
            T.lo[static_cast<std::size_t>(i)] = sg.n;
            T.hi[static_cast<std::size_t>(i)] = 0;
            T.lo_max = sg.n;
            T.hi_min = 0;
          }
          if (T.hi_max > T.lo_min) {
            glo = std::min(glo, T.lo_min);
            ghi = std::max(ghi, T.hi_max);
          }
        }
        for (index_t kb = glo / KB * KB; kb < ghi; kb += KB) {
          for (index_t ti = 0; ti < nt; ++ti) {
            xflash_tile<Real>& T = ws.tiles[static_cast<std::size_t>(ti)];
            const index_t j0 = std::max(kb, T.lo_min), j1 = std::min(kb + KB, T.hi_max);
            if (j1 <= j0) continue;
            // a block outside every query's range (between the raw windows of queries far
            // apart) is skipped: for finite values it would leave m, l and Ot bitwise unchanged
            bool any = false;
            for (index_t i = 0; i < QB && !any; ++i)
              any = T.lo[static_cast<std::size_t>(i)] < j1 && T.hi[static_cast<std::size_t>(i)] > j0;
            if (any) xflash_block<Real, Arch>(T, sg, j0, j1, d, dv, S, Vt);
          }
        }
      }
      for (index_t ti = 0; ti < nt; ++ti) {
        const xflash_tile<Real>& T = ws.tiles[static_cast<std::size_t>(ti)];
        for (index_t i = 0; i < T.nq; ++i) {
          Real* o = O + (T.q0 + i) * ldo;
          const Real mi = T.m[static_cast<std::size_t>(i)];
          if (mi == ninf) {  // nothing attended
            std::fill(o, o + dv, Real(0));
            continue;
          }
          const Real mm = std::max(mi, sink2);
          Real den = T.l[static_cast<std::size_t>(i)] * std::exp2(mi - mm);
          if (sink2 > ninf) den += std::exp2(sink2 - mm);
          const Real inv = std::exp2(mi - mm) / den;
          for (index_t c = 0; c < dv; ++c) o[c] = T.Ot[static_cast<std::size_t>(c * QB + i)] * inv;
        }
      }
    }
  }
}

}  // namespace kvphase::attention::detail
