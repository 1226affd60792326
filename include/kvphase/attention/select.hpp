#pragma once
/// \file attention/select.hpp
/// Selection of what a query attends, beyond "every visible entry" (HCA):
///  - CSA: the lightning-indexer score I_i = Σ_h w_h · ReLU(scale·⟨q_h, K_i⟩) over the visible
///    index keys, keep the top-k entries (DeepSeek-V4 §2.6 of reference/operators.md);
///  - NSA: block importance from the compression-branch probabilities, mapped to selection
///    blocks by token overlap (NSA eq. 9), top-n blocks with the initial and local blocks always
///    included (NSA §3.1).
///
/// Tie-breaking rule, everywhere: among equal scores the LOWER index wins. Results are returned
/// in increasing index order. This makes every selection a deterministic function of the scores.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvphase/attention/full.hpp"
#include "kvphase/attention/kernels.hpp"
#include "kvphase/compress/grid.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/parallel.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::attention {

/// Per-query lists of indices in compressed-row form: query i owns
/// indices[offsets[i] … offsets[i+1]).  offsets: [M + 1], offsets[0] = 0.
struct index_lists {
  std::vector<index_t> offsets{0};
  std::vector<index_t> indices;

  [[nodiscard]] index_t size() const noexcept { return static_cast<index_t>(offsets.size()) - 1; }
  [[nodiscard]] std::span<const index_t> of(index_t i) const noexcept {
    const auto b = static_cast<std::size_t>(offsets[static_cast<std::size_t>(i)]);
    const auto e = static_cast<std::size_t>(offsets[static_cast<std::size_t>(i) + 1]);
    return {indices.data() + b, e - b};
  }
  void push(std::span<const index_t> list) {
    indices.insert(indices.end(), list.begin(), list.end());
    offsets.push_back(static_cast<index_t>(indices.size()));
  }
};

namespace detail {
/// The lists of queries 0 … M − 1, where fill(a, b, out) appends those of queries a … b − 1 to
/// out in order: run over `threads` contiguous query ranges (0: the OpenMP default) by
/// parallel::for_each_index and concatenated in query order, so the result is the same for any
/// thread count. Inputs are validated before; an exception inside a range is rethrown.
template <class Fill>
index_lists lists_by_query(index_t M, int threads, Fill&& fill) {
  const int nt = static_cast<int>(std::min<index_t>(omp_threads(threads), std::max<index_t>(M, 1)));
  std::vector<index_lists> part(static_cast<std::size_t>(nt));
  parallel::for_each_index(
      nt, nt, [&](int&, std::int64_t t) { fill(M * t / nt, M * (t + 1) / nt, part[static_cast<std::size_t>(t)]); },
      [] { return 0; }, [](int&) {}, [] {});
  if (nt == 1) return std::move(part[0]);
  index_lists out;
  std::size_t n = 0;
  for (const auto& l : part) n += l.indices.size();
  out.indices.reserve(n);
  for (const auto& l : part)
    for (index_t i = 0; i < l.size(); ++i) out.push(l.of(i));
  return out;
}
}  // namespace detail

// ---- kernels -----------------------------------------------------------------------------------

namespace detail {
/// Whether indexer_scores vectorises over heads (the packed kernel below) rather than running the
/// per-key form. On fused-FMA paths the per-key form has the keys in lanes (no lane wasted at any
/// head count), and the packed kernel is faster only from two whole batches of heads, where its
/// tile holds several head batches against each broadcast key channel. kvphase-bench attention
/// --context 32768 --dim 128 --queries 256 (top-k row, 1 thread, Xeon with AVX-512, float),
/// packed against keys in lanes: AVX-512 16 heads 44.5 against 34.8 ms, 64 heads 99.6 against
/// 105.5; with --arch avx2 8 heads 37.5 against 35.6, 16 heads 55.2 against 61.9. Elsewhere the
/// per-key form is one dot product per key and head, and the packed kernel is used from half a
/// batch (Zen 5, float, 8192 keys: at 8 heads of 64 channels 2.2× the per-key one).
template <class Real, class Arch>
constexpr bool index_heads_packed(index_t H) noexcept {
  if constexpr (simd::is_scalar_v<Arch>) {
    return false;
  } else if constexpr (simd::fused_fma<Arch>()) {
    return H >= 2 * simd::lanes<Real, Arch>();
  } else {
    return 2 * H >= simd::lanes<Real, Arch>();
  }
}

/// Heads padded to whole batches: the row length of a packed query.
template <class Real, class Arch>
constexpr index_t index_heads_padded(index_t H) noexcept {
  constexpr index_t L = simd::lanes<Real, Arch>();
  return (H + L - 1) / L * L;
}

/// One query's index heads packed channel-major, qT[c·Hp + h] = qI[h·dI + c], and its head
/// weights wp[h] = w[h], both zero on the padded heads h ≥ H (a padded head adds w·ReLU(0) = 0).
///   qT: [dI × Hp], wp: [Hp], Hp = index_heads_padded(H); 64-byte aligned.
template <class Real, class Arch>
inline void pack_index_heads(const Real* qI, const Real* w, index_t H, index_t dI, Real* qT, Real* wp) noexcept {
  const index_t Hp = index_heads_padded<Real, Arch>(H);
  for (index_t c = 0; c < dI; ++c) {
    Real* row = qT + c * Hp;
    for (index_t h = 0; h < H; ++h) row[h] = qI[h * dI + c];
    std::fill(row + H, row + Hp, Real(0));
  }
  std::copy(w, w + H, wp);
  std::fill(wp + H, wp + Hp, Real(0));
}

/// Keys per tile of the packed kernel for J head batches: as many accumulators (R·J) as the
/// registers hold beside the J query batches and a broadcast key channel (32 registers on
/// AVX-512, 16 below), at least eight in flight to cover the FMA latency on two ports.
template <class Arch, int J>
constexpr int index_tile_keys() noexcept {
  if constexpr (Arch::alignment() == 64) {
    return J == 4 ? 6 : 8;
  } else {
    return J == 1 ? 8 : 5;
  }
}

/// R keys × J head batches of the packed kernel: dot products over the dI channels (channel c's
/// key value broadcast against the J batches of heads' channel c; channels summed in order, one
/// FMA each), then Σ over the J·L heads of wp[h]·max(scale·dot, 0) (the batches' products summed
/// by FMA in batch order, then one horizontal sum), stored to out[r] (first chunk) or added to it.
/// max(0, v) keeps a NaN v (the maximum's second operand is returned when either is NaN), as the
/// per-key form's std::max(v, 0) does.
template <class Real, class Arch, int J, int R>
inline void index_heads_tile(const Real* qT, index_t Hp, const Real* wp, const Real* K, index_t ldk, index_t dI,
                             Real scale, bool first, Real* out) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size;
  B acc[R][J];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) acc[r][j] = B(Real(0));
  const Real* q = qT;
  for (index_t c = 0; c < dI; ++c, q += Hp) {
    B qv[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) qv[j] = B::load_aligned(q + j * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const B k(K[r * ldk + c]);
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) acc[r][j] = simd::fma(k, qv[j], acc[r][j]);
    }
  }
  const B sc(scale), zero(Real(0));
  B wv[J];
#pragma GCC unroll 4
  for (int j = 0; j < J; ++j) wv[j] = B::load_aligned(wp + j * L);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    B t = wv[0] * xsimd::max(zero, sc * acc[r][0]);
#pragma GCC unroll 4
    for (int j = 1; j < J; ++j) t = simd::fma(wv[j], xsimd::max(zero, sc * acc[r][j]), t);
    const Real s = simd::hsum(t);
    out[r] = first ? s : out[r] + s;
  }
}

/// The packed kernel over n keys for head batches [h0, h0 + J·L): full tiles, then one key at a time.
template <class Real, class Arch, int J>
inline void index_heads_chunk(const Real* qT, index_t Hp, const Real* wp, const Real* KI, index_t ldk, index_t i0,
                              index_t i1, index_t dI, Real scale, bool first, Real* out) noexcept {
  constexpr int R = index_tile_keys<Arch, J>();
  index_t i = i0;
  for (; i + R <= i1; i += R) index_heads_tile<Real, Arch, J, R>(qT, Hp, wp, KI + i * ldk, ldk, dI, scale, first, out + i);
  for (; i < i1; ++i) index_heads_tile<Real, Arch, J, 1>(qT, Hp, wp, KI + i * ldk, ldk, dI, scale, first, out + i);
}

/// Head batches per chunk of the packed kernel (the J of its widest tile): four on AVX-512 (6 keys
/// × 4 batches = 24 accumulators of 32 registers); two below (5 × 2 = 10 of 16), which on AVX2
/// ran at 98–100 GFLOP/s against 93–95 with three or four batches (Zen 5, -march=haswell, 64 heads
/// of 128 channels over 8192 keys).
template <class Arch>
constexpr index_t index_chunk_batches() noexcept {
  return Arch::alignment() == 64 ? 4 : 2;
}

/// The packed kernel: keys in blocks of 64 (a block's rows stay in L1 while every chunk of head
/// batches passes over them), chunks in head order, each chunk's sum added to the key's.
template <class Real, class Arch>
inline void index_heads_scores(const Real* qT, const Real* wp, index_t H, const Real* KI, index_t ldk, index_t n,
                               index_t dI, Real scale, Real* out) noexcept {
  constexpr index_t L = simd::lanes<Real, Arch>(), Jmax = index_chunk_batches<Arch>();
  const index_t Hp = index_heads_padded<Real, Arch>(H), nb = Hp / L;
  for (index_t i0 = 0; i0 < n; i0 += 64) {
    const index_t i1 = std::min<index_t>(n, i0 + 64);
    for (index_t b = 0; b < nb; b += Jmax) {
      const Real* q = qT + b * L;
      const Real* w = wp + b * L;
      const bool first = b == 0;
      const index_t J = std::min<index_t>(Jmax, nb - b);
      if constexpr (Jmax == 4) {
        if (J == 4) {
          index_heads_chunk<Real, Arch, 4>(q, Hp, w, KI, ldk, i0, i1, dI, scale, first, out);
          continue;
        }
        if (J == 3) {
          index_heads_chunk<Real, Arch, 3>(q, Hp, w, KI, ldk, i0, i1, dI, scale, first, out);
          continue;
        }
      }
      if (J == 2) {
        index_heads_chunk<Real, Arch, 2>(q, Hp, w, KI, ldk, i0, i1, dI, scale, first, out);
      } else {
        index_heads_chunk<Real, Arch, 1>(q, Hp, w, KI, ldk, i0, i1, dI, scale, first, out);
      }
    }
  }
}

// ---- the per-key form: one dot product over the channels per key and head, heads summed in order

/// Whether the per-key form runs keys in lanes (index_lanes_scores): on fused-FMA SIMD paths,
/// where a lane's chain of FMAs has the scalar std::fma chain's bits, from two heads. Elsewhere
/// one simd::dot per key and head. One head stays on simd::dot because the transposition the lanes
/// need costs more than they save when a call has few (query, head) pairs, and one-head calls are
/// the sweeps' query-as-indexer, one query per call: with the lanes the paper-scale faithful sweep
/// of docs/sim.md took 25.0-25.6 s against 21.7-23.3 s (docs/performance.md).
template <class Real, class Arch>
constexpr bool index_keys_in_lanes(index_t H) noexcept {
  if constexpr (simd::is_scalar_v<Arch>) {
    return false;
  } else {
    return simd::fused_fma<Arch>() && H >= 2;
  }
}

/// Index keys transposed in blocks of L keys (L = the path's lanes), the per-key form's operand:
/// KT[(b·dI + c)·L + l] = KI[(b·L + l)·ldk + c] for keys b·L + l < n, zero for the block's rest.
///   KT: [ceil(n / L)·dI·L], aligned to the batch.
template <class Real, class Arch>
inline void transpose_index_keys(const Real* KI, index_t ldk, index_t n, index_t dI, Real* KT) noexcept {
  constexpr index_t L = simd::lanes<Real, Arch>();
  for (index_t b = 0; b * L < n; ++b) {
    Real* blk = KT + b * dI * L;
    const index_t l1 = std::min<index_t>(L, n - b * L);
    for (index_t l = 0; l < l1; ++l) {
      const Real* k = KI + (b * L + l) * ldk;
      for (index_t c = 0; c < dI; ++c) blk[c * L + l] = k[c];
    }
    for (index_t l = l1; l < L; ++l)
      for (index_t c = 0; c < dI; ++c) blk[c * L + l] = Real(0);
  }
}

/// Key blocks per tile of the keys-in-lanes kernel: RB blocks × 4 (query, head) pairs of
/// accumulators, 16 of 32 registers on AVX-512, 8 of 16 below (two FMA ports × four cycles of
/// latency want eight chains in flight), with RB key batches and a broadcast beside them. (On
/// AVX-512 four blocks scored 256 queries × 4 heads × 8192 keys of 64 channels in 6.44–6.48 ms
/// against 6.62–6.68 with three, alternating builds of a throwaway harness.)
template <class Arch>
constexpr int index_lanes_blocks() noexcept {
  return Arch::alignment() == 64 ? 4 : 2;
}

/// RB key blocks × RP (query, head) pairs: acc[b][p] = Σ_c q[p][c]·KT_b[c] over the dI channels
/// in order, one FMA each from zero (each lane is std::fma's chain over the channels).
template <class Real, class Arch, int RB, int RP>
inline void index_lanes_dots(const Real* KT, index_t dI, const Real* const* q,
                             xsimd::batch<Real, Arch> (&acc)[RB][RP]) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size;
#pragma GCC unroll 4
  for (int b = 0; b < RB; ++b)
#pragma GCC unroll 4
    for (int p = 0; p < RP; ++p) acc[b][p] = B(Real(0));
  for (index_t c = 0; c < dI; ++c) {
    B k[RB];
#pragma GCC unroll 4
    for (int b = 0; b < RB; ++b) k[b] = B::load_aligned(KT + (b * dI + c) * L);
#pragma GCC unroll 4
    for (int p = 0; p < RP; ++p) {
      const B qc(q[p][c]);
#pragma GCC unroll 4
      for (int b = 0; b < RB; ++b) acc[b][p] = simd::fma(qc, k[b], acc[b][p]);
    }
  }
}

/// The keys-in-lanes form of index_key_scores_group (fused-FMA paths): the keys, transposed in
/// blocks of L (transpose_index_keys), go RB blocks at a time to the group's (query, head) pairs,
/// four pairs at a time in (query, head) order; each pair's dot products are scaled, passed
/// through max(·, 0) and added by one FMA to its query's sums, kept for the tile in `sums`
/// (G·RB·L, aligned), heads in order, then copied out up to the group's largest key count.
template <class Real, class Arch>
inline void index_lanes_scores(const Real* const* qI, const Real* const* w, index_t G, index_t H, const Real* KT,
                               index_t nmax, index_t dI, Real scale, Real* const* out, Real* sums) noexcept {
  using B = xsimd::batch<Real, Arch>;
  constexpr index_t L = B::size, RBmax = index_lanes_blocks<Arch>(), RPmax = 4;
  const index_t P = G * H, nblocks = (nmax + L - 1) / L;
  const B zero(Real(0)), sc(scale);
  for (index_t b0 = 0; b0 < nblocks; b0 += RBmax) {
    const index_t nb = std::min<index_t>(RBmax, nblocks - b0);
    const Real* kt = KT + b0 * dI * L;
    index_t gn = 0, hn = 0;  // the next pair's query and head
    for (index_t p0 = 0; p0 < P; p0 += RPmax) {
      const index_t np = std::min<index_t>(RPmax, P - p0);
      const Real* q[RPmax];
      index_t pg[RPmax], ph[RPmax];
      for (index_t p = 0; p < np; ++p) {
        pg[p] = gn;
        ph[p] = hn;
        q[p] = qI[gn] + hn * dI;
        if (++hn == H) {
          hn = 0;
          ++gn;
        }
      }
      auto fold = [&](auto rb, auto rp) {
        constexpr int RB = decltype(rb)::value, RP = decltype(rp)::value;
        B acc[RB][RP];
        index_lanes_dots<Real, Arch, RB, RP>(kt, dI, q, acc);
        for (int p = 0; p < RP; ++p) {  // pairs in (query, head) order: each query's heads in order
          const index_t g = pg[p], h = ph[p];
          const B wv(w[g][h]);
          for (int b = 0; b < RB; ++b) {
            Real* s = sums + (g * RBmax + b) * L;
            const B v = sc * acc[b][p];
            const B t = simd::fma(wv, xsimd::select(v < zero, zero, v), h == 0 ? zero : B::load_aligned(s));
            t.store_aligned(s);
          }
        }
      };
      auto by_pairs = [&](auto rb) {
        switch (np) {
          case 4: fold(rb, std::integral_constant<int, 4>{}); break;
          case 3: fold(rb, std::integral_constant<int, 3>{}); break;
          case 2: fold(rb, std::integral_constant<int, 2>{}); break;
          default: fold(rb, std::integral_constant<int, 1>{}); break;
        }
      };
      static_assert(RBmax >= 2 && RBmax <= 4, "tiles of 1-4 key blocks");
      if (nb == RBmax) {
        by_pairs(std::integral_constant<int, RBmax>{});
      } else if (nb == 3) {
        by_pairs(std::integral_constant<int, 3>{});
      } else if (nb == 2) {
        by_pairs(std::integral_constant<int, 2>{});
      } else {
        by_pairs(std::integral_constant<int, 1>{});
      }
    }
    const index_t i0 = b0 * L, m = std::min<index_t>(nb * L, nmax - i0);
    for (index_t g = 0; g < G; ++g) std::copy(sums + g * RBmax * L, sums + g * RBmax * L + m, out[g] + i0);
  }
}

/// Per-thread scratch of indexer_scores and csa_select: a packed query and its head weights (the
/// packed form), the transposed keys and the tile's sums (the per-key form in lanes).
template <class Real>
struct index_query_scratch {
  std::vector<Real, xsimd::aligned_allocator<Real, 64>> qT, wp, KT, sums;
};

/// index_key_scores of G queries over their own key counts n[g] (query g: qI[g], w[g], out[g],
/// room for max n), per key and query
///   out[g][i] = Σ_{h<H} w[g][h] · max(scale · ⟨qI[g][h], KI[i]⟩, 0), heads added in order,
/// and on fused-FMA paths from two heads (index_keys_in_lanes) each dot product is the channels
/// in order, one std::fma each from zero, and each head added by one fused step: keys in lanes,
/// every query of the group against each transposed key block while it is in L1
/// (index_lanes_scores). KT: the
/// keys already transposed (transpose_index_keys, at least max n keys) or null (transposed here
/// into scratch). Elsewhere one simd::dot per key and head (held against blocks of keys where it
/// can be). A score depends on (Arch, H, dI) and its inputs only: not on G, on which queries
/// share a call, or on the thread.
template <class Real, class Arch>
inline void index_key_scores_group(const Real* const* qI, const Real* const* w, index_t G, index_t H, const Real* KI,
                                   index_t ldk, const index_t* n, index_t dI, Real scale, Real* const* out,
                                   index_query_scratch<Real>& scratch, const Real* KT = nullptr) {
  const index_t nmax = G > 0 ? *std::max_element(n, n + G) : 0;
  index_t done = 0;
  if constexpr (!simd::is_scalar_v<Arch>) {  // (the scalar path has no batch type)
    if (index_keys_in_lanes<Real, Arch>(H)) {
      constexpr index_t L = simd::lanes<Real, Arch>(), RB = index_lanes_blocks<Arch>();
      if (!KT) {
        scratch.KT.resize(static_cast<std::size_t>((nmax + L - 1) / L * L * dI));
        transpose_index_keys<Real, Arch>(KI, ldk, nmax, dI, scratch.KT.data());
        KT = scratch.KT.data();
      }
      constexpr index_t Gt = 8;  // queries per pass (the tile's sums: Gt·RB·L)
      scratch.sums.resize(static_cast<std::size_t>(Gt * RB * L));
      for (index_t g0 = 0; g0 < G; g0 += Gt) {
        const index_t m = std::min(Gt, G - g0);
        const index_t nm = *std::max_element(n + g0, n + g0 + m);
        index_lanes_scores<Real, Arch>(qI + g0, w + g0, m, H, KT, nm, dI, scale, out + g0, scratch.sums.data());
      }
      return;
    }
    // simd::dot's bits: where simd::with_held_width allows (fused-FMA paths, dI of 1, 2, 4 or 8
    // batches), whole blocks of L keys up to the largest n go to the G queries together: per
    // block, query and head, the head's query held in registers against the block's keys
    // (simd::scaled_dots_held), then the head's term added to the L keys' sums in a batch; the
    // keys after the blocks, and other widths, query by query below, by the same operations
    done = simd::with_held_width<Real, Arch>(dI, [&](auto nb) {
      constexpr int NB = decltype(nb)::value;
      using B = xsimd::batch<Real, Arch>;
      constexpr index_t L = static_cast<index_t>(B::size);
      const B zero(Real(0)), sc(scale);
      index_t i = 0;
      for (; i + L <= nmax; i += L) {
        const Real* keys = KI + i * ldk;
        for (index_t g = 0; g < G; ++g) {
          B s = zero;
          for (index_t h = 0; h < H; ++h) {
            B q[NB];
            for (int c = 0; c < NB; ++c) q[c] = B::load_unaligned(qI[g] + h * dI + c * L);
            const B v = simd::scaled_dots_held<Real, Arch, NB>(q, [&](index_t k) { return keys + k * ldk; }, sc);
            s = simd::fma(B(w[g][h]), xsimd::select(v < zero, zero, v), s);
          }
          s.store_unaligned(out[g] + i);
        }
      }
      return i;
    });
  }
  for (index_t g = 0; g < G; ++g) {
    for (index_t i = done; i < n[g]; ++i) {
      Real s = 0;
      for (index_t h = 0; h < H; ++h) {
        const Real v = scale * simd::dot<Real, Arch>(qI[g] + h * dI, KI + i * ldk, dI);
        if constexpr (simd::fused_fma<Arch>()) {
          s = std::fma(w[g][h], std::max(v, Real(0)), s);  // one rounding, as the blocks' simd::fma
        } else {
          s += w[g][h] * std::max(v, Real(0));
        }
      }
      out[g][i] = s;
    }
  }
}

/// One query's per-key scores (index_key_scores_group with G = 1).
template <class Real, class Arch>
inline void index_key_scores(const Real* qI, const Real* w, index_t H, const Real* KI, index_t ldk, index_t n,
                             index_t dI, Real scale, Real* out, index_query_scratch<Real>& scratch) {
  index_key_scores_group<Real, Arch>(&qI, &w, 1, H, KI, ldk, &n, dI, scale, &out, scratch);
}
}  // namespace detail

/// Lightning-indexer scores of one query over n index keys:
///   out[i] = Σ_{h<H} w[h] · max(0, scale · ⟨qI[h], KI[i]⟩).
///   qI: [H × dI] row-major (row h = index head h); w: [H] head weights; KI: [n × ldk] (first dI
///   channels); out: [n].
/// Two summation orders, each fixed by (Arch, H) alone, so a score never depends on the thread
/// count or the caller: with many heads (detail::index_heads_packed: from two batches of heads on
/// fused-FMA paths, from half a batch elsewhere; e.g. V4's 64 heads) the query is packed
/// channel-major and each key's channel is broadcast against batches of heads (channels summed
/// in order per head, a GEMM-like kernel with no horizontal sum per head, heads summed across
/// the batch); with few heads the per-key form, heads summed in order: on fused-FMA paths from
/// two heads keys in lanes (channels in order per head, as in the packed form, against the keys
/// transposed in blocks of a batch; one query's call transposes its n keys, so many queries over
/// the same keys are cheaper through csa_select, which transposes them once), elsewhere one SIMD
/// dot product per key and head. `scratch` holds the packed query or the transposed keys between
/// calls (one per thread).
template <class Real, class Arch = simd::default_arch>
inline void indexer_scores(const Real* qI, const Real* w, index_t H, const Real* KI, index_t ldk, index_t n,
                           index_t dI, Real scale, Real* out, detail::index_query_scratch<Real>& scratch) {
  if constexpr (!simd::is_scalar_v<Arch>) {
    if (detail::index_heads_packed<Real, Arch>(H)) {
      const index_t Hp = detail::index_heads_padded<Real, Arch>(H);
      scratch.qT.resize(static_cast<std::size_t>(dI * Hp));
      scratch.wp.resize(static_cast<std::size_t>(Hp));
      detail::pack_index_heads<Real, Arch>(qI, w, H, dI, scratch.qT.data(), scratch.wp.data());
      detail::index_heads_scores<Real, Arch>(scratch.qT.data(), scratch.wp.data(), H, KI, ldk, n, dI, scale, out);
      return;
    }
  }
  detail::index_key_scores<Real, Arch>(qI, w, H, KI, ldk, n, dI, scale, out, scratch);
}

/// indexer_scores with its own scratch (one allocation per call).
template <class Real, class Arch = simd::default_arch>
inline void indexer_scores(const Real* qI, const Real* w, index_t H, const Real* KI, index_t ldk, index_t n,
                           index_t dI, Real scale, Real* out) {
  detail::index_query_scratch<Real> scratch;
  indexer_scores<Real, Arch>(qI, w, H, KI, ldk, n, dI, scale, out, scratch);
}

namespace detail {
/// Writes the indices i < n with scores[i] >= floor to out in increasing order; returns their
/// count. Branch-free (which scores pass is data); on AVX-512 sixteen floats a step, their
/// passing indices compress-stored (the scalar loop's store and count chain took about a third
/// of top_k_indices at top-512 of 8192). NaN passes nowhere.  out: [n].
template <class Real>
inline index_t indices_at_least(const Real* scores, index_t n, Real floor, index_t* out) noexcept {
  index_t c = 0, i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Real, float> && sizeof(index_t) == 8) {
    const __m512 f = _mm512_set1_ps(floor);
    __m512i lo = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i eight = _mm512_set1_epi64(8), sixteen = _mm512_set1_epi64(16);
    for (; i + 16 <= n; i += 16) {
      const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(scores + i), f, _CMP_GE_OQ);
      const auto m0 = static_cast<__mmask8>(m), m1 = static_cast<__mmask8>(m >> 8);
      _mm512_mask_compressstoreu_epi64(out + c, m0, lo);
      c += __builtin_popcount(m0);
      _mm512_mask_compressstoreu_epi64(out + c, m1, _mm512_add_epi64(lo, eight));
      c += __builtin_popcount(m1);
      lo = _mm512_add_epi64(lo, sixteen);
    }
  }
#endif
  for (; i < n; ++i) {
    out[c] = i;
    c += static_cast<index_t>(scores[i] >= floor);
  }
  return c;
}

/// An unsigned key of a float or double that orders as the values do: a < b ⇔ key(a) < key(b),
/// and a == b ⇔ key(a) == key(b) (−0 and +0 share +0's key). Not for NaN.
template <class Real>
inline auto order_key(Real x) noexcept {
  using U = std::conditional_t<sizeof(Real) == 4, std::uint32_t, std::uint64_t>;
  static_assert(sizeof(Real) == sizeof(U), "float or double");
  U u;
  std::memcpy(&u, &x, sizeof u);
  u &= U(0) - static_cast<U>(x != Real(0));  // −0 → +0
  // negative: all bits flipped; otherwise the sign bit set. Branch-free: the signs of scores
  // are data, and a branch on them mispredicts half the time.
  constexpr int top = 8 * sizeof(U) - 1;
  constexpr U sign = U(1) << top;
  return u ^ ((U(0) - (u >> top)) | sign);
}
}  // namespace detail

/// Indices of the k largest of scores[0..n) (k clipped to n), ties broken by LOWER index,
/// returned in increasing index order. scores must not contain NaN.  Returns the count.
///   scores: [n]; out: [min(k, n)]; work: [n] scratch.
/// A radix select on order_key, 11 bits a pass from the top: each pass counts the candidates'
/// digits, keeps the bin that holds the k-th largest and narrows the candidates to it, until the
/// bin's candidates are exactly the ones still needed or every digit is fixed. One scan in index
/// order then keeps the keys above the threshold and, of the keys equal to it, the lowest
/// indices: the rule above, in increasing index order, without sorting.
/// The candidates are all n, or, when k is a small share of a long list (k ≤ n/8, n ≥ 2048),
/// the scores at or above a floor: the score of rank ≈ 1.5·k/n·256 + 8 among 256 evenly spaced
/// samples. If at least k and at most n/2 scores reach it (almost always), the k largest are
/// among them, and the select and the final scan run on these (listed in index order by one
/// branch-free pass) instead of on all n; otherwise on all n. The floor only narrows where the
/// k-th largest is looked for, so the result is the same either way.
template <class Real>
inline index_t top_k_indices(const Real* scores, index_t n, index_t k, index_t* out, index_t* work) noexcept {
  k = std::min(k, n);
  if (k <= 0) return 0;
  if (k == n) {
    std::iota(out, out + n, index_t(0));
    return n;
  }
  using U = decltype(detail::order_key(Real(0)));
  constexpr int bits = 8 * sizeof(U), radix = 11;
  constexpr std::size_t nb = std::size_t(1) << radix;
  // the candidate list: cand[0 … nc) in index order (nc < 0: all n); the select narrows its own
  // copy in sel[0 … m) (m < 0 before the first pass: the candidates themselves)
  const index_t* cand = nullptr;
  index_t nc = -1;
  index_t* sel = work;
  if (constexpr index_t samples = 256; n >= 2048 && k <= n / 8) {
    std::array<Real, samples> smp;
    for (index_t j = 0; j < samples; ++j) smp[static_cast<std::size_t>(j)] = scores[j * n / samples];
    const index_t r = std::min<index_t>(samples - 1, (3 * k * samples) / (2 * n) + 8);  // rank from the top
    std::nth_element(smp.begin(), smp.begin() + r, smp.end(), std::greater<Real>());
    const Real floor = smp[static_cast<std::size_t>(r)];
    index_t c = detail::indices_at_least(scores, n, floor, work);
    if (c >= k && 2 * c <= n) {  // the k largest all reach the floor: select among these c
      cand = work;
      nc = c;
      sel = work + c;
    }
  }
  std::array<std::uint32_t, nb> hist;
  U prefix = 0, fixed = 0;  // the threshold's digits found so far, and the mask of their bits
  index_t need = k;         // keys still to take among those whose fixed bits equal prefix
  index_t m = -1;           // sel[0 … m) once narrowed
  for (int hi = bits; hi > 0 && (m < 0 ? nc : m) != need;) {
    const int w = std::min(radix, hi), lo = hi - w;
    const U dmask = (U(1) << w) - 1;
    std::fill(hist.begin(), hist.begin() + (std::ptrdiff_t(1) << w), std::uint32_t(0));
    auto digit = [&](index_t i) { return static_cast<std::size_t>((detail::order_key(scores[i]) >> lo) & dmask); };
    // the candidates of this pass: all n, the floor's list, or the list narrowed so far
    const index_t* from = m >= 0 ? sel : cand;
    const index_t count = m >= 0 ? m : nc;
    if (!from) {
      for (index_t i = 0; i < n; ++i) ++hist[digit(i)];
    } else {
      for (index_t j = 0; j < count; ++j) ++hist[digit(from[j])];
    }
    std::size_t b = std::size_t(dmask);
    index_t above = 0;
    for (; above + index_t(hist[b]) < need; --b) above += hist[b];  // the bins above b hold fewer than need
    need -= above;
    prefix |= U(b) << lo;
    fixed |= dmask << lo;
    index_t m2 = 0;
    if (!from) {  // branch-free: which scores share the bin is data, not a pattern
      for (index_t i = 0; i < n; ++i) {
        sel[m2] = i;
        m2 += static_cast<index_t>(digit(i) == b);
      }
    } else {
      for (index_t j = 0; j < count; ++j) {
        const index_t i = from[j];
        sel[m2] = i;
        m2 += static_cast<index_t>(digit(i) == b);
      }
    }
    m = m2;
    hi = lo;
  }
  // of the candidates, in index order: the keys above the threshold, and the first `need` equal
  // to it on the fixed bits; written to sel (k + 1 slots suffice: the store before the count
  // test never passes index k; without a floor sel is work, n > k slots; with one, n − nc ≥ n/2
  // ≥ 4k slots, as k ≤ n/8). When the candidates left are exactly the ones needed (no tie cut
  // at the threshold, the usual case), that is every candidate ≥ the threshold.
  const index_t total = cand ? nc : n;
  auto at = [&](index_t j) { return cand ? cand[j] : j; };
  index_t cnt = 0;
  if ((m < 0 ? nc : m) == need) {
    for (index_t j = 0; j < total; ++j) {
      const index_t i = at(j);
      sel[cnt] = i;
      cnt += static_cast<index_t>((detail::order_key(scores[i]) & fixed) >= prefix);
    }
  } else {
    index_t eq = 0;
    for (index_t j = 0; j < total; ++j) {
      const index_t i = at(j);
      const U key = detail::order_key(scores[i]) & fixed;
      const bool take_eq = key == prefix && eq < need;
      sel[cnt] = i;
      cnt += static_cast<index_t>(key > prefix || take_eq);
      eq += static_cast<index_t>(take_eq);
    }
  }
  std::copy(sel, sel + k, out);
  return k;
}

/// Checked wrapper: the top-k indices of `scores` (no NaN allowed), increasing index order.
template <class Real>
std::vector<index_t> top_k(std::span<const Real> scores, index_t k) {
  require(k >= 0, "k", k, "must be >= 0");
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) fail("scores[" + std::to_string(i) + "]", scores[i], "must not be NaN");
  }
  const auto n = static_cast<index_t>(scores.size());
  std::vector<index_t> work(scores.size()), out(static_cast<std::size_t>(std::min(k, n)));
  top_k_indices(scores.data(), n, k, out.data(), work.data());
  return out;
}

// ---- CSA: indexer top-k --------------------------------------------------------------------------

/// Settings of the lightning indexer.
struct indexer_params {
  index_t heads = 4;    ///< H index heads
  index_t top_k = 16;   ///< entries kept per query (clipped to the visible count)
  double scale = 0.0;   ///< score scale; 0 = 1/√dI
  int threads = 1;      ///< OpenMP threads over queries (0: the OpenMP default); results do not depend on it
  void validate() const {
    require(heads >= 1 && heads <= limits::max_heads, "indexer.heads", heads, "must be in [1, 4096]");
    require(top_k >= 1 && top_k <= limits::max_tokens, "indexer.top_k", top_k, "must be in [1, 2^30]");
    require(std::isfinite(scale) && scale >= 0.0, "indexer.scale", scale, "must be finite and >= 0");
    require(threads >= 0 && threads <= 1024, "indexer.threads", threads, "must be in [0, 1024] (0 = OpenMP default)");
  }
  friend std::ostream& operator<<(std::ostream& os, const indexer_params& p) {
    return os << "indexer_params{heads=" << p.heads << ", top_k=" << p.top_k << ", scale=" << p.scale
              << ", threads=" << p.threads << "}";
  }
};

/// CSA selection for M queries: query i at position pos[i] scores the entries visible to it
/// (0 … grid.num_visible(pos[i]) − 1) with the indexer and keeps the top-k.
///   QI [M × H·dI] index queries (head h = columns h·dI …); W [M × H] head weights;
///   KI [E × dI] compressed index keys (E ≥ entries visible to the last query); pos [M].
template <class Real, class Arch = simd::default_arch>
index_lists csa_select(const cref<Real>& QI, const cref<Real>& W, const cref<Real>& KI,
                       const compress::chunk_grid& grid, std::span<const index_t> pos,
                       const indexer_params& ip) {
  ip.validate();
  grid.validate();
  const index_t M = QI.rows(), H = ip.heads, dI = KI.cols();
  require(dI >= 1, "KI.cols()", dI, "must be >= 1");
  require(QI.cols() == H * dI, "QI.cols()", QI.cols(),
          "must equal indexer.heads * KI.cols() (" + std::to_string(H * dI) + ")");
  require(W.rows() == M && W.cols() == H, "W.cols()", W.cols(),
          "head weights must be [Q rows × indexer.heads] (" + std::to_string(M) + " × " + std::to_string(H) + ")");
  require(static_cast<index_t>(pos.size()) == M, "pos.size()", pos.size(), "must equal QI.rows()");
  const Real scale = ip.scale > 0 ? static_cast<Real>(ip.scale) : default_scale<Real>(dI);
  for (index_t i = 0; i < M; ++i) {
    const index_t t = pos[static_cast<std::size_t>(i)];
    if (t < 0) fail("pos[" + std::to_string(i) + "]", t, "must be >= 0");
    const index_t nv = grid.num_visible(t);
    if (nv > KI.rows())
      fail("KI.rows()", KI.rows(), "must cover the " + std::to_string(nv) + " entries visible at position " + std::to_string(t));
  }
  // few heads: groups of up to 8 consecutive queries scored together (index_key_scores_group:
  // each key block read from memory once per group; scores independent of the grouping, so of
  // the threads)
  constexpr index_t group = 8;
  const bool grouped = !detail::index_heads_packed<Real, Arch>(H);
  // keys in lanes: the keys every query may see, transposed once for all threads (into memory
  // left uninitialised: the transposition writes every element, and zeroing it first cost as
  // much as the transposition in a sweep's one-query calls)
  std::unique_ptr<Real[]> kt_mem;
  const Real* KT = nullptr;
  if constexpr (!simd::is_scalar_v<Arch>) {
    if (grouped && detail::index_keys_in_lanes<Real, Arch>(H)) {
      constexpr index_t L = simd::lanes<Real, Arch>();
      index_t nall = 0;
      for (index_t i = 0; i < M; ++i) nall = std::max(nall, grid.num_visible(pos[static_cast<std::size_t>(i)]));
      kt_mem = std::make_unique_for_overwrite<Real[]>(static_cast<std::size_t>((nall + L - 1) / L * L * dI + L));
      Real* kt = kt_mem.get();
      kt += (L - reinterpret_cast<std::uintptr_t>(kt) / sizeof(Real) % L) % L;  // aligned to the batch
      detail::transpose_index_keys<Real, Arch>(KI.data(), KI.outerStride(), nall, dI, kt);
      KT = kt;
    }
  }
  return detail::lists_by_query(M, ip.threads, [&](index_t a, index_t b, index_lists& out) {
    out.offsets.reserve(static_cast<std::size_t>(b - a) + 1);
    std::vector<Real> s;
    std::vector<index_t> work, pick;
    detail::index_query_scratch<Real> scratch;
    const index_t G = grouped ? group : 1;
    matrix_t<Real> qrow(G * H, dI);
    matrix_t<Real> wrow(G, H);
    const Real* qp[group];
    const Real* wp[group];
    Real* sp[group];
    index_t nv[group];
    for (index_t g0 = a; g0 < b; g0 += G) {
      const index_t m = std::min(G, b - g0);
      index_t nmax = 0;
      for (index_t g = 0; g < m; ++g) {
        const index_t i = g0 + g;
        nv[g] = grid.num_visible(pos[static_cast<std::size_t>(i)]);
        nmax = std::max(nmax, nv[g]);
        for (index_t h = 0; h < H; ++h) {
          for (index_t c = 0; c < dI; ++c) qrow(g * H + h, c) = QI(i, h * dI + c);
          wrow(g, h) = W(i, h);
        }
      }
      s.resize(static_cast<std::size_t>(m * nmax));
      for (index_t g = 0; g < m; ++g) {
        qp[g] = qrow.data() + g * H * dI;
        wp[g] = wrow.data() + g * H;
        sp[g] = s.data() + g * nmax;
      }
      if (grouped) {
        detail::index_key_scores_group<Real, Arch>(qp, wp, m, H, KI.data(), KI.outerStride(), nv, dI, scale, sp,
                                                   scratch, KT);
      } else {
        indexer_scores<Real, Arch>(qp[0], wp[0], H, KI.data(), KI.outerStride(), nv[0], dI, scale, sp[0], scratch);
      }
      work.resize(static_cast<std::size_t>(nmax));
      for (index_t g = 0; g < m; ++g) {
        pick.resize(static_cast<std::size_t>(std::min(ip.top_k, nv[g])));
        const index_t k = top_k_indices(sp[g], nv[g], ip.top_k, pick.data(), work.data());
        out.push({pick.data(), static_cast<std::size_t>(k)});
      }
    }
  });
}

// ---- NSA: block importance and top-n blocks ---------------------------------------------------------

/// How compression-branch probabilities become selection-block importances.
enum class block_mapping {
  overlap,  ///< weight of entry e for block j = |sources(e) ∩ block j| / stride: the geometric
            ///< reading of NSA eq. 9 (l = 32, d = 16, l' = 64: entries 4j−1 … 4j+3 weigh 1,2,2,2,1)
  eq9       ///< NSA eq. 9 as printed: p_slc[j] = Σ_{a<l'/d} Σ_{b<l/d} p_cmp[(l'/d)·j − a − b]
};
inline const char* to_string(block_mapping m) noexcept { return m == block_mapping::overlap ? "overlap" : "eq9"; }

namespace detail {
/// The overlap mapping's geometry, which does not depend on the query: entry e covers tokens
/// r = grid.sources(e) and adds p_cmp[e]·|r ∩ block j| / stride to block j for the (at most a
/// few) blocks j it overlaps. Kept per block: block j's (entry, overlap count) pairs in entry
/// order. One table serves every query of a call (nsa_select); nsa_block_importance builds one
/// for its query.
struct block_overlaps {
  std::vector<index_t> first;                      ///< block j's pairs: [first[j], first[j + 1])
  std::vector<std::pair<index_t, index_t>> pairs;  ///< (entry e, tokens of e in block j), e increasing
  block_overlaps(const compress::chunk_grid& grid, index_t n_entries, index_t sel_block) {
    std::vector<std::array<index_t, 3>> by_entry;  // (block, entry, count) in entry order
    by_entry.reserve(static_cast<std::size_t>(n_entries) * 2);
    index_t n_blocks = 0;
    for (index_t e = 0; e < n_entries; ++e) {
      const compress::token_range r = grid.sources(e);
      const index_t jlo = std::max<index_t>(0, floor_div(r.first, sel_block)), jhi = floor_div(r.last, sel_block);
      for (index_t j = jlo; j <= jhi; ++j) {
        const index_t lo = std::max(r.first, j * sel_block), hi = std::min(r.last, (j + 1) * sel_block - 1);
        if (hi >= lo) {
          by_entry.push_back({j, e, hi - lo + 1});
          n_blocks = std::max(n_blocks, j + 1);
        }
      }
    }
    // counting sort by block, stable: each block's pairs stay in entry order
    first.assign(static_cast<std::size_t>(n_blocks) + 1, 0);
    for (const auto& x : by_entry) ++first[static_cast<std::size_t>(x[0]) + 1];
    for (std::size_t j = 0; j < static_cast<std::size_t>(n_blocks); ++j) first[j + 1] += first[j];
    std::vector<index_t> fill(first.begin(), first.end() - 1);
    pairs.resize(by_entry.size());
    for (const auto& x : by_entry) pairs[static_cast<std::size_t>(fill[static_cast<std::size_t>(x[0])]++)] = {x[1], x[2]};
  }
  /// The overlap importances of blocks 0 … n_blocks − 1 (out) from entries 0 … n_cmp − 1 (n_cmp ≤
  /// the entries the table was built for): out[j] = 0 + Σ_e p_cmp[e]·count / stride, summed in
  /// entry order (the bits of adding each entry's terms to its blocks, entry by entry). Block by
  /// block, each sum in a register: the entry-by-entry form chained every term of a block through
  /// a store and a reload (most of nsa_select's time).
  template <class Real>
  void importance(const Real* p_cmp, index_t n_cmp, index_t stride, index_t n_blocks, Real* out) const noexcept {
    const index_t nb = std::min<index_t>(n_blocks, static_cast<index_t>(first.size()) - 1);
    const Real st = static_cast<Real>(stride);
    for (index_t j = 0; j < nb; ++j) {
      Real s = 0;
      for (index_t k = first[static_cast<std::size_t>(j)]; k < first[static_cast<std::size_t>(j) + 1]; ++k) {
        const auto [e, cnt] = pairs[static_cast<std::size_t>(k)];
        if (e < n_cmp) s += p_cmp[e] * static_cast<Real>(cnt) / st;
      }
      out[j] = s;
    }
    std::fill(out + std::max<index_t>(nb, 0), out + n_blocks, Real(0));
  }
};
}  // namespace detail

/// Block importance of one query: out[j] = Σ_e weight(e, j) · p_cmp[e] for selection blocks
/// j ∈ [0, n_blocks) of size sel_block (block j = tokens [j·sel_block, (j+1)·sel_block − 1]).
///   p_cmp: [n_cmp] compression probabilities (entries 0 … n_cmp−1 of `grid`); out: [n_blocks].
/// With sel_block = window = stride the mapping is the identity.
template <class Real>
inline void nsa_block_importance(const Real* p_cmp, index_t n_cmp, const compress::chunk_grid& grid,
                                 index_t sel_block, block_mapping mapping, index_t n_blocks, Real* out) {
  if (mapping == block_mapping::overlap) {
    detail::block_overlaps(grid, n_cmp, sel_block).importance(p_cmp, n_cmp, grid.stride, n_blocks, out);
    return;
  }
  std::fill(out, out + n_blocks, Real(0));
  const index_t A = std::max<index_t>(1, sel_block / grid.stride);
  const index_t B = std::max<index_t>(1, grid.window / grid.stride);
  for (index_t j = 0; j < n_blocks; ++j) {
    Real s = 0;
    for (index_t a = 0; a < A; ++a)
      for (index_t b = 0; b < B; ++b) {
        const index_t e = A * j - a - b;
        if (e >= 0 && e < n_cmp) s += p_cmp[e];
      }
    out[j] = s;
  }
}

/// Settings of NSA block selection.
struct block_select_params {
  index_t block = 64;       ///< selection block size l'
  index_t top_n = 16;       ///< blocks kept per query, forced ones included
  index_t initial = 1;      ///< always-included leading blocks
  index_t local = 2;        ///< always-included most recent blocks (the query's block and before)
  block_mapping mapping = block_mapping::overlap;
  int threads = 1;          ///< OpenMP threads over queries (0: the OpenMP default); results do not depend on it
  void validate() const {
    require(threads >= 0 && threads <= 1024, "select.threads", threads, "must be in [0, 1024] (0 = OpenMP default)");
    require(block >= 1 && block <= limits::max_tokens, "select.block", block, "must be in [1, 2^30]");
    require(top_n >= 1 && top_n <= limits::max_tokens, "select.top_n", top_n, "must be in [1, 2^30]");
    require(initial >= 0 && initial <= limits::max_tokens, "select.initial", initial, "must be in [0, 2^30]");
    require(local >= 0 && local <= limits::max_tokens, "select.local", local, "must be in [0, 2^30]");
    require(initial + local <= top_n, "select.top_n", top_n, "must be >= initial + local");
  }
  friend std::ostream& operator<<(std::ostream& os, const block_select_params& p) {
    return os << "block_select_params{block=" << p.block << ", top_n=" << p.top_n << ", initial=" << p.initial
              << ", local=" << p.local << ", mapping=" << to_string(p.mapping) << ", threads=" << p.threads << "}";
  }
};

/// Blocks selected for a query at position t with importances imp[0 … n_blocks) (n_blocks =
/// t / block + 1, the last one possibly partial): blocks 0 … initial−1 and the `local` blocks
/// ending at t's block are forced; the rest of the top_n budget goes to the largest importances
/// (ties: lower block index). Increasing block order.  imp: [n_blocks]; work: [n_blocks].
template <class Real>
inline index_t nsa_select_blocks(const Real* imp, index_t n_blocks, const block_select_params& p,
                                 index_t* out, index_t* work) {
  index_t cnt = 0;
  std::vector<char> forced(static_cast<std::size_t>(n_blocks), 0);
  for (index_t j = 0; j < std::min(p.initial, n_blocks); ++j) forced[static_cast<std::size_t>(j)] = 1;
  for (index_t j = std::max<index_t>(0, n_blocks - p.local); j < n_blocks; ++j) forced[static_cast<std::size_t>(j)] = 1;
  index_t nf = 0;
  for (char f : forced) nf += f;
  // rank the free blocks: (importance desc, index asc)
  index_t nfree = 0;
  for (index_t j = 0; j < n_blocks; ++j)
    if (!forced[static_cast<std::size_t>(j)]) work[nfree++] = j;
  const index_t budget = std::min(std::max<index_t>(0, p.top_n - nf), nfree);
  auto better = [imp](index_t a, index_t b) { return imp[a] > imp[b] || (imp[a] == imp[b] && a < b); };
  if (budget > 0 && budget < nfree) std::nth_element(work, work + (budget - 1), work + nfree, better);
  for (index_t k = 0; k < budget; ++k) forced[static_cast<std::size_t>(work[k])] = 1;
  for (index_t j = 0; j < n_blocks; ++j)
    if (forced[static_cast<std::size_t>(j)]) out[cnt++] = j;
  return cnt;
}

/// NSA selection for M queries from compression-branch probabilities:
///   P [M × E] row i = p_cmp of query i over entries 0 … E−1 (zero beyond the visible ones,
///   summed over the heads of a group by the caller); pos [M].  Returns selected blocks.
template <class Real>
index_lists nsa_select(const cref<Real>& P, const compress::chunk_grid& grid, std::span<const index_t> pos,
                       const block_select_params& p) {
  p.validate();
  grid.validate();
  const index_t M = P.rows();
  require(static_cast<index_t>(pos.size()) == M, "pos.size()", pos.size(), "must equal P.rows()");
  for (index_t i = 0; i < M; ++i) {
    const index_t t = pos[static_cast<std::size_t>(i)];
    if (t < 0) fail("pos[" + std::to_string(i) + "]", t, "must be >= 0");
  }
  // the overlap mapping's geometry, once for every query (computing it per query and entry was
  // most of the selection's time)
  index_t nv_max = 0;
  for (index_t i = 0; i < M; ++i)
    nv_max = std::max(nv_max, std::min<index_t>(grid.num_visible(pos[static_cast<std::size_t>(i)]), P.cols()));
  std::optional<detail::block_overlaps> overlaps;
  if (p.mapping == block_mapping::overlap) overlaps.emplace(grid, nv_max, p.block);
  return detail::lists_by_query(M, p.threads, [&](index_t a, index_t b, index_lists& out) {
    std::vector<Real> imp, prow;
    std::vector<index_t> work, pick;
    for (index_t i = a; i < b; ++i) {
      const index_t t = pos[static_cast<std::size_t>(i)];
      const index_t nb = t / p.block + 1;
      const index_t nv = std::min<index_t>(grid.num_visible(t), P.cols());
      prow.assign(static_cast<std::size_t>(nv), Real(0));
      for (index_t e = 0; e < nv; ++e) prow[static_cast<std::size_t>(e)] = P(i, e);
      imp.resize(static_cast<std::size_t>(nb));
      work.resize(static_cast<std::size_t>(nb));
      pick.resize(static_cast<std::size_t>(nb));
      if (overlaps) overlaps->importance(prow.data(), nv, grid.stride, nb, imp.data());
      else nsa_block_importance(prow.data(), nv, grid, p.block, p.mapping, nb, imp.data());
      const index_t k = nsa_select_blocks(imp.data(), nb, p, pick.data(), work.data());
      out.push({pick.data(), static_cast<std::size_t>(k)});
    }
  });
}

}  // namespace kvphase::attention
