#pragma once
/// \file sim/normal.hpp
/// Fast standard-normal generation for the sweep engines.
///
/// Definition (independent of the SIMD width, so every arch produces the same stream up to
/// the rounding of fused multiply-adds):
///  - State: 16 independent xoshiro256++ lanes (4 × 64-bit words each), seeded from one Philox
///    block keyed by (seed, stream) and expanded with the splitmix64 finaliser. A trial therefore
///    owns its generator: trial k is reproduced alone, on any thread or shard.
///  - One *block* = one xoshiro256++ step of all 16 lanes = 16 × 64 bits = 32 words of 32 bits
///    (word 2l is the low half of lane l, word 2l+1 its high half). Float lane j ∈ [0, 16) takes
///    w1 = word j and w2 = word 16 + j.
///  - Radius: u1 = (2k + 1)·2⁻²⁴ with k the low 23 bits of w1 (exact in float; u1 ∈ (0, 1), never
///    0 or 1), and r = √(−2 ln u1). ln uses the exact reduction u1 = m·2^e, m ∈ [3/4, 3/2), and
///    −2 ln m = f·Q(f), f = m − 1, with Q a degree-7 minimax polynomial (relative error 2.1·10⁻⁷).
///  - Angle: the low 23 bits of w2 give x = m₂·π/2 − 3π/4 ∈ [−π/4, π/4) with
///    m₂ = 1 + (w2 mod 2²³)·2⁻²³; bit 30 of w2 swaps (cos x, sin x) → (sin x, cos x), i.e. the
///    angle π/2 − x, and bit 31 negates both (the angle + π). The four quadrants tile the circle,
///    so θ is uniform and (cos θ, sin θ) is computed from polynomials on |x| ≤ π/4 only.
///  - The block's 32 normals are out[j] = r_j cos θ_j and out[16 + j] = r_j sin θ_j.
///  - Because u1 ≥ 2⁻²⁴, |z| ≤ √(48 ln 2) ≈ 5.77: the tail beyond that (probability 8·10⁻⁹) is
///    absent. Every event the sweeps measure is far inside it.
///
/// `normal_engine<Arch>` keeps the state in registers for fused loops (the key-space engine
/// generates keys and consumes them without storing them); `normal_generator` is the plain
/// buffer-filling interface. `simd::scalar` is the reference implementation of both.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kvphase/core/rng.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::sim {

/// Number of xoshiro256++ lanes, and normals per float lane of one block.
inline constexpr index_t normal_lanes = 16;
/// Normals produced by one block.
inline constexpr index_t normal_block = 32;

/// Generator state: word w of lane l is s[w][l].
struct normal_state {
  alignas(64) std::uint64_t s[4][normal_lanes];
};

/// State for (seed, stream): one Philox4x32-10 block keyed by (seed, stream) gives 128 key bits,
/// expanded to the 64 state words by the splitmix64 finaliser (a lane never starts all-zero).
inline normal_state seed_normal_state(std::uint64_t seed, std::uint64_t stream) noexcept {
  const auto b = rng::philox_stream(seed, stream).block(0);
  const std::uint64_t k0 = static_cast<std::uint64_t>(b[0]) | (static_cast<std::uint64_t>(b[1]) << 32);
  const std::uint64_t k1 = static_cast<std::uint64_t>(b[2]) | (static_cast<std::uint64_t>(b[3]) << 32);
  normal_state st{};
  for (int l = 0; l < normal_lanes; ++l) {
    for (int w = 0; w < 4; ++w) {
      const std::uint64_t i = static_cast<std::uint64_t>(l * 4 + w + 1);
      st.s[w][l] = rng::mix64(k0 + i * 0x9e3779b97f4a7c15ULL) ^ rng::mix64(k1 ^ (i * 0xd1b54a32d192ed03ULL));
    }
    if ((st.s[0][l] | st.s[1][l] | st.s[2][l] | st.s[3][l]) == 0) st.s[0][l] = 1;
  }
  return st;
}

namespace detail {

// −2 ln(1 + f) = f·Q(f) on f ∈ [−1/4, 1/2), Q of degree 7 (highest power first; minimax for the
// relative error, 2.1·10⁻⁷ before rounding).
inline constexpr float q_ln[8] = {1.329210401e-01f, -2.826371789e-01f, 3.474444449e-01f, -4.021606743e-01f,
                                  4.995358288e-01f, -6.665952802e-01f, 1.000004292e+00f, -2.000000238e+00f};
// sin x = x + x³·(s0 + x²(s1 + x² s2)),  cos x = 1 + x²(−1/2 + x²(c0 + x²(c1 + x² c2))), |x| ≤ π/4.
inline constexpr float sin_c[3] = {-1.6666654611e-1f, 8.3321608736e-3f, -1.9515295891e-4f};
inline constexpr float cos_c[3] = {4.166664568298827e-2f, -1.388731625493765e-3f, 2.443315711809948e-5f};
inline constexpr float minus_two_ln2_f = -1.38629436111989061f;
inline constexpr float half_pi_f = 1.57079632679489662f;
inline constexpr float minus_three_quarter_pi_f = -2.35619449019234492f;
inline constexpr float four_thirds_f = 4.0f / 3.0f;
inline constexpr float one_minus_half_ulp = 1.0f - 0x1.0p-24f;  // 1 − 2⁻²⁴ (exact)
inline constexpr std::uint32_t mant_mask = 0x007fffffu;
inline constexpr std::uint32_t one_bits = 0x3f800000u;

inline std::uint64_t rotl64(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

/// Whether simd::fma on Arch rounds once (see core/simd.hpp; the scalar reference calls std::fma
/// itself where the SIMD code fuses).
template <class Arch>
inline constexpr bool fused_fma_v = simd::fused_fma<Arch>();

/// Scalar reference of one Box–Muller pair from two 32-bit words (same operation order as SIMD).
inline void box_muller_scalar(std::uint32_t w1, std::uint32_t w2, float& zc, float& zs) noexcept {
  const auto as_float = [](std::uint32_t b) {
    float v;
    std::memcpy(&v, &b, 4);
    return v;
  };
  const auto as_bits = [](float v) {
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  };
  // u1 = (2k + 1)·2⁻²⁴ = (1 + k·2⁻²³) − (1 − 2⁻²⁴), exact
  const float u1 = as_float((w1 & mant_mask) | one_bits) - one_minus_half_ulp;
  // u1 = m·2^e with m ∈ [3/4, 3/2), exact
  const std::uint32_t ix = as_bits(u1);
  float e = static_cast<float>(static_cast<std::int32_t>(ix >> 23) - 127);
  float m = as_float((ix & mant_mask) | one_bits);
  if (m >= 1.5f) {
    m = m * 0.5f;
    e = e + 1.0f;
  }
  const float f = m - 1.0f;
  float q = q_ln[0];
  for (int i = 1; i < 8; ++i) q = std::fma(q, f, q_ln[i]);
  const float r = std::sqrt(std::fma(f, q, e * minus_two_ln2_f));
  // angle
  const float x = std::fma(as_float((w2 & mant_mask) | one_bits), half_pi_f, minus_three_quarter_pi_f);
  const float x2 = x * x;
  const float sp = std::fma(std::fma(sin_c[2], x2, sin_c[1]), x2, sin_c[0]);
  const float sn = std::fma(x2 * x, sp, x);
  const float cp = std::fma(std::fma(std::fma(cos_c[2], x2, cos_c[1]), x2, cos_c[0]), x2, -0.5f);
  const float cs = std::fma(cp, x2, 1.0f);
  const bool swap = (w2 & 0x40000000u) != 0;
  const float rs = as_float(as_bits(r) ^ (w2 & 0x80000000u));
  zc = rs * (swap ? sn : cs);
  zs = rs * (swap ? cs : sn);
}

}  // namespace detail

/// Register-resident generator for one arch. Usage: construct from a state, call next() per
/// block (or next2() for two consecutive blocks computed interleaved), store() back if the stream
/// continues elsewhere.
///
/// On 512-bit batches with AVX-512F (and Native = true) the Box–Muller transform is written with
/// intrinsics: the range reduction of ln by vgetmantps/vgetexpps, the quadrant swap by mask blends
/// and the sign by vpternlogd. Every value it computes is the one the generic path computes, so the
/// stream is the same (bitwise). Native = false keeps the generic xsimd path on every arch (tests
/// and benchmarks compare the two).
template <class Arch = simd::default_arch, bool Native = true>
class normal_engine {
 public:
  using batch_f = xsimd::batch<float, Arch>;
  using batch_u = xsimd::batch<std::uint64_t, Arch>;
  using batch_i = xsimd::batch<std::int32_t, Arch>;
  static constexpr index_t L = static_cast<index_t>(batch_f::size);  ///< float lanes
  static constexpr index_t sub = normal_lanes / L;                    ///< float batches per half block
  static constexpr index_t UL = static_cast<index_t>(batch_u::size);  ///< u64 lanes (= L/2)
  static constexpr index_t nb = normal_lanes / UL;                    ///< u64 batches per state word
  static_assert(UL * 2 == L, "float batch must hold two words per 64-bit lane");
  /// Normals of one block, as batches: [0, sub) are cos outputs of float lanes kL…kL+L−1,
  /// [sub, 2·sub) the matching sin outputs.
  using block_type = std::array<batch_f, 2 * sub>;

  explicit normal_engine(const normal_state& st) noexcept { load(st); }

  void load(const normal_state& st) noexcept {
    for (int w = 0; w < 4; ++w)
      for (index_t b = 0; b < nb; ++b) s_[w][b] = batch_u::load_aligned(&st.s[w][b * UL]);
  }
  void store(normal_state& st) const noexcept {
    for (int w = 0; w < 4; ++w)
      for (index_t b = 0; b < nb; ++b) s_[w][b].store_aligned(&st.s[w][b * UL]);
  }

  /// The Box–Muller transform of one float batch of words (w1, w2) → (r cos θ, r sin θ), as next()
  /// applies it: exposed so that tests can sweep every input word.
  static inline void box_muller(const batch_i& w1, const batch_i& w2, batch_f& zc, batch_f& zs) noexcept {
#if defined(__AVX512F__)
    if constexpr (native512) {
      __m512 c[1], s[1];
      const __m512i a[1] = {w1}, b[1] = {w2};
      transform512<1>(a, b, c, s);
      zc = c[0];
      zs = s[0];
      return;
    }
#endif
    transform(w1, w2, zc, zs);
  }

  /// Next block of 32 normals.
  inline void next(block_type& out) noexcept {
    std::array<batch_u, nb> o;
    step(o);
#if defined(__AVX512F__)
    if constexpr (native512) {
      // sub = 1: batch 0 holds the u1 words, batch 1 the u2 words
      __m512 zc[1], zs[1];
      const __m512i w1[1] = {o[0]}, w2[1] = {o[1]};
      transform512<1>(w1, w2, zc, zs);
      out[0] = zc[0];
      out[1] = zs[0];
      return;
    }
#endif
    // u64 batch b covers lanes [b·UL, b·UL + UL) = words [b·L, b·L + L): float batch b of u1
    // for b < sub, of u2 for b ≥ sub.
    for (index_t k = 0; k < sub; ++k) {
      transform(xsimd::bitwise_cast<batch_i>(o[k]), xsimd::bitwise_cast<batch_i>(o[sub + k]), out[k],
                out[sub + k]);
    }
  }

  /// Next two blocks (a, then b): the same values as next(a); next(b), with the two transforms
  /// interleaved so their long dependency chains (ln polynomial, sqrt) overlap.
  inline void next2(block_type& a, block_type& b) noexcept {
#if defined(__AVX512F__)
    if constexpr (native512) {
      std::array<batch_u, nb> oa, ob;
      step(oa);
      step(ob);
      __m512 zc[2], zs[2];
      const __m512i w1[2] = {oa[0], ob[0]}, w2[2] = {oa[1], ob[1]};
      transform512<2>(w1, w2, zc, zs);
      a[0] = zc[0];
      a[1] = zs[0];
      b[0] = zc[1];
      b[1] = zs[1];
      return;
    }
#endif
    next(a);
    next(b);
  }

  /// Next two blocks handed to consume(block) in stream order: the same calls as
  /// next(a); consume(a); next(b); consume(b). On the native AVX-512 path the order is
  /// step a, radius a, step b, radius b, then each block's angle stage followed by its consumer:
  /// a fused loop (generate → FMA into accumulators) then never holds two finished blocks, and
  /// the long radius chains start as early as their words exist. (In the key-space loop this
  /// order timed faster than next2(a, b) followed by two consumer calls; for plain buffer
  /// filling next2(a, b) timed as fast or faster, so fill() keeps it.)
  template <class Consume>
  inline void next2(Consume&& consume) noexcept {
#if defined(__AVX512F__)
    if constexpr (native512) {
      std::array<batch_u, nb> oa, ob;
      step(oa);
      const __m512 ra = radius512(oa[0]);
      step(ob);
      const __m512 rb = radius512(ob[0]);
      block_type blk;
      __m512 c, s;
      angle512(ra, oa[1], c, s);
      blk[0] = c;
      blk[1] = s;
      consume(static_cast<const block_type&>(blk));
      angle512(rb, ob[1], c, s);
      blk[0] = c;
      blk[1] = s;
      consume(static_cast<const block_type&>(blk));
      return;
    }
#endif
    block_type blk;
    next(blk);
    consume(static_cast<const block_type&>(blk));
    next(blk);
    consume(static_cast<const block_type&>(blk));
  }

 private:
  static constexpr bool native512 = Native && sizeof(batch_f) == 64;

  /// One xoshiro256++ step of all lanes; o receives the outputs.
  inline void step(std::array<batch_u, nb>& o) noexcept {
#if defined(__AVX512F__)
    if constexpr (native512) {
      // the same step with the xor pairs fused into vpternlogq (truth table 0x96 = a ^ b ^ c)
      for (index_t b = 0; b < nb; ++b) {
        const __m512i s0 = s_[0][b], s1 = s_[1][b], s2 = s_[2][b], s3 = s_[3][b];
        o[b] = _mm512_add_epi64(_mm512_rol_epi64(_mm512_add_epi64(s0, s3), 23), s0);
        const __m512i n3 = _mm512_xor_si512(s3, s1);
        s_[1][b] = _mm512_ternarylogic_epi64(s1, s2, s0, 0x96);
        s_[0][b] = _mm512_xor_si512(s0, n3);
        s_[2][b] = _mm512_ternarylogic_epi64(s2, s0, _mm512_slli_epi64(s1, 17), 0x96);
        s_[3][b] = _mm512_rol_epi64(n3, 45);
      }
      return;
    }
#endif
    for (index_t b = 0; b < nb; ++b) {
      const batch_u s0 = s_[0][b], s1 = s_[1][b], s2 = s_[2][b], s3 = s_[3][b];
      o[b] = rotl<23>(s0 + s3) + s0;
      const batch_u t = s1 << 17;
      const batch_u n2 = s2 ^ s0;
      const batch_u n3 = s3 ^ s1;
      s_[1][b] = s1 ^ n2;
      s_[0][b] = s0 ^ n3;
      s_[2][b] = n2 ^ t;
      s_[3][b] = rotl<45>(n3);
    }
  }

#if defined(__AVX512F__)
  /// K independent Box–Muller transforms of 16 lanes each, stage by stage so they interleave.
  /// Same values as transform(): the reduction u1 = m·2^e takes m from vgetmantps ([3/4, 3/2)
  /// normalisation) and e from vgetexpps(u1·fl(4/3)) — u1·fl(4/3) reaches 2^(e0+1) exactly when the
  /// [1, 2) mantissa of u1 is ≥ 3/2 (checked for all 2²³ inputs by the tests), so (m, e) is the
  /// generic path's exact pair; the quadrant swap is a mask blend, the sign one vpternlogd.
  template <int K>
  static inline void transform512(const __m512i (&w1)[K], const __m512i (&w2)[K], __m512 (&zc)[K],
                                  __m512 (&zs)[K]) noexcept {
    __m512 r[K];
    for (int k = 0; k < K; ++k) r[k] = radius512(w1[k]);
    for (int k = 0; k < K; ++k) angle512(r[k], w2[k], zc[k], zs[k]);
  }

  /// r = √(−2 ln u1) of the u1 words.
  static inline __m512 radius512(const __m512i w1) noexcept {
    const __m512i mant = _mm512_set1_epi32(static_cast<int>(detail::mant_mask));
    const __m512i one = _mm512_set1_epi32(static_cast<int>(detail::one_bits));
    // (w & mant) | one: truth table (0xF0 & 0xCC) | 0xAA = 0xEA
    const __m512 u1 = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_ternarylogic_epi32(w1, mant, one, 0xEA)),
                                    _mm512_set1_ps(detail::one_minus_half_ulp));
    const __m512 f = _mm512_sub_ps(_mm512_getmant_ps(u1, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_src), _mm512_set1_ps(1.0f));
    const __m512 e = _mm512_getexp_ps(_mm512_mul_ps(u1, _mm512_set1_ps(detail::four_thirds_f)));
    __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(detail::q_ln[0]), f, _mm512_set1_ps(detail::q_ln[1]));
    for (int i = 2; i < 8; ++i) q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(detail::q_ln[i]));
    return _mm512_sqrt_ps(_mm512_fmadd_ps(f, q, _mm512_mul_ps(e, _mm512_set1_ps(detail::minus_two_ln2_f))));
  }

  /// (r cos θ, r sin θ) with θ from the u2 words.
  static inline void angle512(const __m512 r, const __m512i w2, __m512& zc, __m512& zs) noexcept {
    const __m512i mant = _mm512_set1_epi32(static_cast<int>(detail::mant_mask));
    const __m512i one = _mm512_set1_epi32(static_cast<int>(detail::one_bits));
    const __m512 x = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_ternarylogic_epi32(w2, mant, one, 0xEA)),
                                     _mm512_set1_ps(detail::half_pi_f), _mm512_set1_ps(detail::minus_three_quarter_pi_f));
    const __m512 x2 = _mm512_mul_ps(x, x);
    const __m512 sp = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_set1_ps(detail::sin_c[2]), x2, _mm512_set1_ps(detail::sin_c[1])), x2,
        _mm512_set1_ps(detail::sin_c[0]));
    const __m512 sn = _mm512_fmadd_ps(_mm512_mul_ps(x2, x), sp, x);
    const __m512 cp = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(detail::cos_c[2]), x2, _mm512_set1_ps(detail::cos_c[1])), x2,
                        _mm512_set1_ps(detail::cos_c[0])),
        x2, _mm512_set1_ps(-0.5f));
    const __m512 cs = _mm512_fmadd_ps(cp, x2, _mm512_set1_ps(1.0f));
    const __mmask16 swap = _mm512_test_epi32_mask(w2, _mm512_set1_epi32(0x40000000));
    // r ^ (w2 & sign): truth table 0xF0 ^ (0xCC & 0xAA) = 0x78
    const __m512 rs = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(r), w2,
                                                                    _mm512_set1_epi32(static_cast<int>(0x80000000u)), 0x78));
    zc = _mm512_mul_ps(rs, _mm512_mask_blend_ps(swap, cs, sn));
    zs = _mm512_mul_ps(rs, _mm512_mask_blend_ps(swap, sn, cs));
  }
#endif

  template <int K>
  static inline batch_u rotl(const batch_u& x) noexcept {
#if defined(__AVX512F__)
    if constexpr (sizeof(batch_u) == 64) return batch_u(_mm512_rol_epi64(x, K));  // one vprolq
#endif
    return (x << K) | (x >> (64 - K));
  }

  static inline void transform(batch_i w1, batch_i w2, batch_f& zc, batch_f& zs) noexcept {
    const batch_i mant(static_cast<std::int32_t>(detail::mant_mask)), one(static_cast<std::int32_t>(detail::one_bits));
    // u1 = (2k + 1)·2⁻²⁴, exact; u1 = m·2^e with m ∈ [3/4, 3/2), exact
    const batch_f u1 = xsimd::bitwise_cast<batch_f>((w1 & mant) | one) - batch_f(detail::one_minus_half_ulp);
    const batch_i ix = xsimd::bitwise_cast<batch_i>(u1);
    batch_f e = xsimd::to_float((ix >> 23) - batch_i(127));  // u1 > 0: the shift sees no sign bit
    batch_f m = xsimd::bitwise_cast<batch_f>((ix & mant) | one);
    const auto big = m >= batch_f(1.5f);
    m = xsimd::select(big, m * batch_f(0.5f), m);
    e = xsimd::select(big, e + batch_f(1.0f), e);
    const batch_f f = m - batch_f(1.0f);
    batch_f q(detail::q_ln[0]);
    for (int i = 1; i < 8; ++i) q = simd::fma(q, f, batch_f(detail::q_ln[i]));
    const batch_f r = xsimd::sqrt(simd::fma(f, q, e * batch_f(detail::minus_two_ln2_f)));
    // angle x ∈ [−π/4, π/4) and its quadrant bits
    const batch_f x = simd::fma(xsimd::bitwise_cast<batch_f>((w2 & mant) | one), batch_f(detail::half_pi_f),
                                batch_f(detail::minus_three_quarter_pi_f));
    const batch_f x2 = x * x;
    const batch_f sp = simd::fma(simd::fma(batch_f(detail::sin_c[2]), x2, batch_f(detail::sin_c[1])), x2,
                                 batch_f(detail::sin_c[0]));
    const batch_f sn = simd::fma(x2 * x, sp, x);
    const batch_f cp = simd::fma(
        simd::fma(simd::fma(batch_f(detail::cos_c[2]), x2, batch_f(detail::cos_c[1])), x2, batch_f(detail::cos_c[0])),
        x2, batch_f(-0.5f));
    const batch_f cs = simd::fma(cp, x2, batch_f(1.0f));
    // swap and sign in integer lanes (no float compare of bit patterns, so the result does not
    // depend on denormals-are-zero modes): bit 30 → all ones by an arithmetic shift
    const batch_i swapm = (w2 << 1) >> 31;
    const batch_i sni = xsimd::bitwise_cast<batch_i>(sn), csi = xsimd::bitwise_cast<batch_i>(cs);
    const batch_i swap = (sni ^ csi) & swapm;
    const batch_f rs = xsimd::bitwise_cast<batch_f>(xsimd::bitwise_cast<batch_i>(r) ^
                                                    (w2 & batch_i(static_cast<std::int32_t>(0x80000000u))));
    zc = rs * xsimd::bitwise_cast<batch_f>(csi ^ swap);
    zs = rs * xsimd::bitwise_cast<batch_f>(sni ^ swap);
  }

  std::array<std::array<batch_u, nb>, 4> s_;
};

/// Scalar reference engine: same stream, same operation order, plain loops.
template <bool Native>
class normal_engine<simd::scalar, Native> {
 public:
  static constexpr index_t L = 1;
  using block_type = std::array<float, normal_block>;

  explicit normal_engine(const normal_state& st) noexcept : st_(st) {}
  void load(const normal_state& st) noexcept { st_ = st; }
  void store(normal_state& st) const noexcept { st = st_; }

  void next(block_type& out) noexcept {
    std::uint32_t words[2 * normal_lanes];
    for (int l = 0; l < normal_lanes; ++l) {
      std::uint64_t& s0 = st_.s[0][l];
      std::uint64_t& s1 = st_.s[1][l];
      std::uint64_t& s2 = st_.s[2][l];
      std::uint64_t& s3 = st_.s[3][l];
      const std::uint64_t res = detail::rotl64(s0 + s3, 23) + s0;
      const std::uint64_t t = s1 << 17;
      s2 ^= s0;
      s3 ^= s1;
      s1 ^= s2;
      s0 ^= s3;
      s2 ^= t;
      s3 = detail::rotl64(s3, 45);
      words[2 * l] = static_cast<std::uint32_t>(res);
      words[2 * l + 1] = static_cast<std::uint32_t>(res >> 32);
    }
    for (int j = 0; j < normal_lanes; ++j)
      detail::box_muller_scalar(words[j], words[normal_lanes + j], out[static_cast<std::size_t>(j)],
                                out[static_cast<std::size_t>(normal_lanes + j)]);
  }
  void next2(block_type& a, block_type& b) noexcept {
    next(a);
    next(b);
  }
  template <class Consume>
  void next2(Consume&& consume) noexcept {
    block_type blk;
    next(blk);
    consume(static_cast<const block_type&>(blk));
    next(blk);
    consume(static_cast<const block_type&>(blk));
  }

 private:
  normal_state st_;
};

/// Buffer-filling generator keyed by (seed, stream). Block-granular: fill(out, n) consumes
/// ⌈n/32⌉ blocks and discards the unused tail of the last one, so a call's output depends only
/// on the state at its start and on n.
class normal_generator {
 public:
  normal_generator(std::uint64_t seed, std::uint64_t stream) noexcept : st_(seed_normal_state(seed, stream)) {}
  explicit normal_generator(const normal_state& st) noexcept : st_(st) {}

  void reseed(std::uint64_t seed, std::uint64_t stream) noexcept { st_ = seed_normal_state(seed, stream); }
  [[nodiscard]] const normal_state& state() const noexcept { return st_; }

  /// Writes n standard normals to out (block order: 32 per block as documented above).
  template <class Arch = simd::default_arch>
  void fill(float* out, index_t n) noexcept {
    fill_impl<Arch, false>(out, n, 1.0f);
  }

  /// Writes scale·z for the n normals z that fill(out, n) writes: the same values as fill and
  /// then one float multiply per element, without the second pass over out.
  template <class Arch = simd::default_arch>
  void fill_scaled(float* out, index_t n, float scale) noexcept {
    fill_impl<Arch, true>(out, n, scale);
  }

 private:
  template <class Arch, bool Scaled>
  void fill_impl(float* out, index_t n, float scale) noexcept {
    normal_engine<Arch> eng(st_);
    typename normal_engine<Arch>::block_type blk;
    typename normal_engine<Arch>::block_type blk2;
    index_t i = 0;
    for (; i + 2 * normal_block <= n; i += 2 * normal_block) {
      eng.next2(blk, blk2);
      write<Scaled>(blk, out + i, normal_block, scale);
      write<Scaled>(blk2, out + i + normal_block, normal_block, scale);
    }
    for (; i + normal_block <= n; i += normal_block) {
      eng.next(blk);
      write<Scaled>(blk, out + i, normal_block, scale);
    }
    if (i < n) {
      eng.next(blk);
      write<Scaled>(blk, out + i, n - i, scale);
    }
    eng.store(st_);
  }

  template <bool Scaled, class Block>
  static void write(const Block& blk, float* out, index_t n, float scale) noexcept {
    if constexpr (std::is_same_v<Block, std::array<float, normal_block>>) {
      for (index_t j = 0; j < n; ++j) out[j] = Scaled ? blk[static_cast<std::size_t>(j)] * scale : blk[static_cast<std::size_t>(j)];
    } else {
      using B = typename Block::value_type;
      constexpr index_t L = static_cast<index_t>(B::size);
      const auto value = [&](std::size_t k) {
        if constexpr (Scaled) return blk[k] * B(scale);
        else return blk[k];
      };
      if (n == normal_block) {
        for (std::size_t k = 0; k < blk.size(); ++k) value(k).store_unaligned(out + static_cast<index_t>(k) * L);
      } else {
        alignas(64) float tmp[normal_block];
        for (std::size_t k = 0; k < blk.size(); ++k) value(k).store_aligned(tmp + static_cast<index_t>(k) * L);
        for (index_t j = 0; j < n; ++j) out[j] = tmp[j];
      }
    }
  }
  normal_state st_;
};

}  // namespace kvphase::sim
