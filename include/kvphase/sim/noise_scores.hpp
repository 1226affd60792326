#pragma once
/// \file sim/noise_scores.hpp
/// The per-token scores s_i = q·x_i of noise keys x_i ~ N(0, I_d), by the two engines.
///
///  - Key space (`key_space_scores`): the keys are generated and consumed without being stored.
///    Tokens are taken 16 at a time, one token per float lane of the generator: block i of the
///    stream gives channel 2i of the 16 tokens (its cos half) and channel 2i + 1 (its sin half),
///    so s = Σ_c q_c·x_c accumulates with one vertical FMA per channel and needs no horizontal
///    sum. A group of 16 tokens costs ⌈d/2⌉ blocks (16·d normals, rounded up to even d).
///  - Score space (`score_space_scores`): given q, the q·x_i are iid N(0, |q|²), so s_i = |q|·z_i
///    with one normal per token — exact in distribution for iid isotropic Gaussian keys, d times
///    cheaper (reference/performance.md §4).
/// Both continue the generator state they are given (`st` is advanced).

#include <array>
#include <cmath>
#include <cstddef>

#include <xsimd/xsimd.hpp>

#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/normal.hpp"

namespace kvphase::sim {

/// Normals consumed by key_space_scores for n tokens of d channels.
constexpr index_t key_space_normals(index_t n, index_t d) noexcept {
  return ((n + normal_lanes - 1) / normal_lanes) * ((d + 1) / 2) * normal_block;
}

namespace detail {
/// The SIMD key-space loop (see key_space_scores). Tail = whether d mod 4 ≠ 0, i.e. whether a
/// group ends with a lone pair of channels or a lone channel after its paired blocks: instantiated
/// without the tail code for d mod 4 = 0, the paired loop keeps the generator state and the
/// transform's constants in registers from one group to the next.
template <class Arch, bool Tail>
[[gnu::noinline]] void key_space_groups(normal_state& st, const float* q, index_t d, float* out, index_t n) noexcept {
  using B = xsimd::batch<float, Arch>;
  using E = normal_engine<Arch>;
  constexpr index_t L = E::L;
  constexpr index_t sub = E::sub;
  E eng(st);
  const index_t pairs = d / 2;
  for (index_t t0 = 0; t0 < n; t0 += normal_lanes) {
    std::array<B, sub> acc;
    for (auto& a : acc) a = B(0.0f);
    // channels 2i, 2i + 1 of block i, accumulated in channel order as the scalar path does
    auto accumulate = [&](const typename E::block_type& b, index_t i) {
      const B q0(q[2 * i]), q1(q[2 * i + 1]);
      for (index_t k = 0; k < sub; ++k) {
        acc[static_cast<std::size_t>(k)] = simd::fma(q0, b[static_cast<std::size_t>(k)], acc[static_cast<std::size_t>(k)]);
        acc[static_cast<std::size_t>(k)] = simd::fma(q1, b[static_cast<std::size_t>(sub + k)], acc[static_cast<std::size_t>(k)]);
      }
    };
    // blocks two at a time, each handed to the accumulators as soon as it is transformed
    index_t i = 0;
    for (; i + 2 <= pairs; i += 2) {
      index_t c = i;
      eng.next2([&](const typename E::block_type& b) { accumulate(b, c++); });
    }
    if constexpr (Tail) {
      typename E::block_type blk;
      if (i < pairs) {
        eng.next(blk);
        accumulate(blk, i);
      }
      if (d % 2 != 0) {
        eng.next(blk);
        const B q0(q[d - 1]);
        for (index_t k = 0; k < sub; ++k)
          acc[static_cast<std::size_t>(k)] = simd::fma(q0, blk[static_cast<std::size_t>(k)], acc[static_cast<std::size_t>(k)]);
      }
    }
    if (t0 + normal_lanes <= n) {
      for (index_t k = 0; k < sub; ++k) acc[static_cast<std::size_t>(k)].store_unaligned(out + t0 + k * L);
    } else {
      alignas(64) float tmp[normal_lanes];
      for (index_t k = 0; k < sub; ++k) acc[static_cast<std::size_t>(k)].store_aligned(tmp + k * L);
      for (index_t j = 0; j < n - t0; ++j) out[t0 + j] = tmp[j];
    }
  }
  eng.store(st);
}
}  // namespace detail

/// out[t] = q·x_t for n fresh noise keys x_t ~ N(0, I_d) (q: d floats). Scalar path = reference
/// with the same operation order (fma per channel, channels in order).
template <class Arch = simd::default_arch>
void key_space_scores(normal_state& st, const float* q, index_t d, float* out, index_t n) noexcept {
  if constexpr (!simd::is_scalar_v<Arch>) {
    if (d % 4 == 0)
      detail::key_space_groups<Arch, false>(st, q, d, out, n);
    else
      detail::key_space_groups<Arch, true>(st, q, d, out, n);
  } else {
    normal_engine<Arch> eng(st);
    typename normal_engine<Arch>::block_type blk;
    const index_t pairs = d / 2;
    for (index_t t0 = 0; t0 < n; t0 += normal_lanes) {
      float acc[normal_lanes] = {};
      for (index_t i = 0; i < pairs; ++i) {
        eng.next(blk);
        const float q0 = q[2 * i], q1 = q[2 * i + 1];
        for (index_t j = 0; j < normal_lanes; ++j) {
          acc[j] = std::fma(q0, blk[static_cast<std::size_t>(j)], acc[j]);
          acc[j] = std::fma(q1, blk[static_cast<std::size_t>(normal_lanes + j)], acc[j]);
        }
      }
      if (d % 2 != 0) {
        eng.next(blk);
        for (index_t j = 0; j < normal_lanes; ++j) acc[j] = std::fma(q[d - 1], blk[static_cast<std::size_t>(j)], acc[j]);
      }
      const index_t m = std::min<index_t>(normal_lanes, n - t0);
      for (index_t j = 0; j < m; ++j) out[t0 + j] = acc[j];
    }
    eng.store(st);
  }
}

/// out[t] = scale·z_t, z_t ~ N(0, 1): the score-space draw of n noise scores with scale = |q|.
template <class Arch = simd::default_arch>
void score_space_scores(normal_state& st, float scale, float* out, index_t n) noexcept {
  normal_generator g(st);
  g.fill_scaled<Arch>(out, n, scale);
  st = g.state();
}

}  // namespace kvphase::sim
