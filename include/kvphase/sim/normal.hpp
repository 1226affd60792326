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
///    u1 from word j and u2 from word 16 + j, each as (w >> 8 + 1/2)·2⁻²⁴ rounded to float
///    (exact below 1/2; the largest value rounds to 1, giving z = 0), so u ∈ (0, 1].
///  - Box–Muller: r = √(−2 ln u1), θ = 2π u2; the block's 32 normals are out[j] = r_j cos θ_j and
///    out[16 + j] = r_j sin θ_j.
///  - ln uses the range reduction u = m·2^e, m ∈ [√½, √2), and a degree-8 minimax polynomial for
///    ln(1 + f); sin/cos reduce θ to a quadrant n ∈ {0,…,4} and |θ − nπ/2| ≤ π/4 with the
///    classical single-precision minimax polynomials. Relative error of r and of the rotation is a
///    few float ulps (tests/test_sim_normal.cpp derives and checks the bound).
///  - Because u1 ≥ 2⁻²⁵, |z| ≤ √(50 ln 2) ≈ 5.89: the tail beyond that (probability 3.8·10⁻⁹) is
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

// ln(1 + f) − f + f²/2 = f³·P(f) on f ∈ [√½ − 1, √2 − 1] (single-precision minimax coefficients).
inline constexpr float log_p[9] = {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
                                   -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                                   2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f};
// sin x = x + x³·(s0 + x²(s1 + x² s2)),  cos x = 1 − x²/2 + x⁴(c0 + x²(c1 + x² c2)), |x| ≤ π/4.
inline constexpr float sin_c[3] = {-1.6666654611e-1f, 8.3321608736e-3f, -1.9515295891e-4f};
inline constexpr float cos_c[3] = {4.166664568298827e-2f, -1.388731625493765e-3f, 2.443315711809948e-5f};
inline constexpr float ln2f = 0.693147180559945309f;
inline constexpr float two_pi_f = 6.28318530717958648f;
inline constexpr float sqrt_half_f = 0.707106781186547524f;
inline constexpr float inv_2_24 = 0x1.0p-24f;
inline constexpr float half_2_24 = 0x1.0p-25f;

inline std::uint64_t rotl64(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

/// Whether simd::fma on Arch rounds once (see core/simd.hpp; the scalar reference calls std::fma
/// itself where the SIMD code fuses).
template <class Arch>
inline constexpr bool fused_fma_v = simd::fused_fma<Arch>();

/// Scalar reference of one Box–Muller pair from two 32-bit words (same operation order as SIMD).
inline void box_muller_scalar(std::uint32_t w1, std::uint32_t w2, float& zc, float& zs) noexcept {
  const float u1 = std::fma(static_cast<float>(static_cast<std::int32_t>(w1 >> 8)), inv_2_24, half_2_24);
  const float u2 = std::fma(static_cast<float>(static_cast<std::int32_t>(w2 >> 8)), inv_2_24, half_2_24);
  // ln u1
  std::int32_t ix;
  std::memcpy(&ix, &u1, 4);
  std::int32_t e = (ix >> 23) - 127;
  std::int32_t mbits = (ix & 0x007fffff) | 0x3f800000;
  float m;
  std::memcpy(&m, &mbits, 4);
  if (m > 2.0f * sqrt_half_f) {
    m = m * 0.5f;
    e += 1;
  }
  const float f = m - 1.0f;
  float p = log_p[0];
  for (int i = 1; i < 9; ++i) p = std::fma(p, f, log_p[i]);
  const float f2 = f * f;
  float lnm = std::fma(f2 * f, p, std::fma(-0.5f, f2, f));
  const float ln_u = std::fma(static_cast<float>(e), ln2f, lnm);
  const float r = std::sqrt(-2.0f * ln_u);
  // quadrant reduction of θ = 2π u2
  const std::int32_t n = static_cast<std::int32_t>(std::fma(u2, 4.0f, 0.5f));
  const float fr = std::fma(static_cast<float>(n), -0.25f, u2);
  const float x = fr * two_pi_f;
  const float x2 = x * x;
  const float sp = std::fma(std::fma(sin_c[2], x2, sin_c[1]), x2, sin_c[0]);
  const float sn = std::fma(x2 * x, sp, x);
  const float cp = std::fma(std::fma(cos_c[2], x2, cos_c[1]), x2, cos_c[0]);
  const float cs = std::fma(x2 * x2, cp, std::fma(-0.5f, x2, 1.0f));
  const bool odd = (n & 1) != 0;
  float c = odd ? sn : cs;
  float s = odd ? cs : sn;
  std::uint32_t cb, sb;
  std::memcpy(&cb, &c, 4);
  std::memcpy(&sb, &s, 4);
  cb ^= static_cast<std::uint32_t>((n + 1) & 2) << 30;
  sb ^= static_cast<std::uint32_t>(n & 2) << 30;
  std::memcpy(&c, &cb, 4);
  std::memcpy(&s, &sb, 4);
  zc = r * c;
  zs = r * s;
}

}  // namespace detail

/// Register-resident generator for one arch. Usage: construct from a state, call next() per
/// block (or next2() for two consecutive blocks computed interleaved), store() back if the stream
/// continues elsewhere.
///
/// On 512-bit batches with AVX-512F (and Native = true) the Box–Muller transform is written with
/// intrinsics: ln's range reduction by vgetexpps/vgetmantps (exactly the exponent and [1, 2)
/// mantissa the generic path extracts with integer operations, then the same √2 fold), the
/// quadrant swap by mask blends and the signs by vpternlogd. Every value it computes is the one the
/// generic path computes, so the stream is unchanged (bitwise). Native = false keeps the generic
/// xsimd path on every arch (tests and benchmarks compare the two).
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

 private:
  static constexpr bool native512 = Native && sizeof(batch_f) == 64;

  /// One xoshiro256++ step of all lanes; o receives the outputs.
  inline void step(std::array<batch_u, nb>& o) noexcept {
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
  /// Same operations and rounding as transform() (see there for the meaning of each step).
  template <int K>
  static inline void transform512(const __m512i (&w1)[K], const __m512i (&w2)[K], __m512 (&zc)[K],
                                  __m512 (&zs)[K]) noexcept {
    const __m512 inv = _mm512_set1_ps(detail::inv_2_24), half = _mm512_set1_ps(detail::half_2_24);
    __m512 u1[K], u2[K], m[K], e[K], p[K], r[K];
    for (int k = 0; k < K; ++k) {
      u1[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w1[k], 8)), inv, half);
      u2[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w2[k], 8)), inv, half);
    }
    // ln u1: u1 = m·2^e with m ∈ [1, 2) (u1 ≥ 2⁻²⁵ is normal), folded to [√½, √2)
    const __m512 fold = _mm512_set1_ps(2.0f * detail::sqrt_half_f);
    for (int k = 0; k < K; ++k) {
      m[k] = _mm512_getmant_ps(u1[k], _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
      e[k] = _mm512_getexp_ps(u1[k]);
      const __mmask16 big = _mm512_cmp_ps_mask(m[k], fold, _CMP_GT_OQ);
      m[k] = _mm512_mask_mul_ps(m[k], big, m[k], _mm512_set1_ps(0.5f));
      e[k] = _mm512_mask_add_ps(e[k], big, e[k], _mm512_set1_ps(1.0f));
      m[k] = _mm512_sub_ps(m[k], _mm512_set1_ps(1.0f));  // f
      p[k] = _mm512_set1_ps(detail::log_p[0]);
    }
    for (int i = 1; i < 9; ++i)
      for (int k = 0; k < K; ++k) p[k] = _mm512_fmadd_ps(p[k], m[k], _mm512_set1_ps(detail::log_p[i]));
    for (int k = 0; k < K; ++k) {
      const __m512 f = m[k];
      const __m512 f2 = _mm512_mul_ps(f, f);
      const __m512 lnm = _mm512_fmadd_ps(_mm512_mul_ps(f2, f), p[k], _mm512_fmadd_ps(_mm512_set1_ps(-0.5f), f2, f));
      const __m512 ln_u = _mm512_fmadd_ps(e[k], _mm512_set1_ps(detail::ln2f), lnm);
      r[k] = _mm512_sqrt_ps(_mm512_mul_ps(_mm512_set1_ps(-2.0f), ln_u));
    }
    // sincos of 2π u2
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    for (int k = 0; k < K; ++k) {
      const __m512i n = _mm512_cvttps_epi32(_mm512_fmadd_ps(u2[k], _mm512_set1_ps(4.0f), _mm512_set1_ps(0.5f)));
      const __m512 fr = _mm512_fmadd_ps(_mm512_cvtepi32_ps(n), _mm512_set1_ps(-0.25f), u2[k]);
      const __m512 x = _mm512_mul_ps(fr, _mm512_set1_ps(detail::two_pi_f));
      const __m512 x2 = _mm512_mul_ps(x, x);
      const __m512 sp = _mm512_fmadd_ps(
          _mm512_fmadd_ps(_mm512_set1_ps(detail::sin_c[2]), x2, _mm512_set1_ps(detail::sin_c[1])), x2,
          _mm512_set1_ps(detail::sin_c[0]));
      const __m512 sn = _mm512_fmadd_ps(_mm512_mul_ps(x2, x), sp, x);
      const __m512 cp = _mm512_fmadd_ps(
          _mm512_fmadd_ps(_mm512_set1_ps(detail::cos_c[2]), x2, _mm512_set1_ps(detail::cos_c[1])), x2,
          _mm512_set1_ps(detail::cos_c[0]));
      const __m512 cs =
          _mm512_fmadd_ps(_mm512_mul_ps(x2, x2), cp, _mm512_fmadd_ps(_mm512_set1_ps(-0.5f), x2, _mm512_set1_ps(1.0f)));
      // odd quadrants swap cos and sin; bit 1 of n (of n + 1) is the sign of sin (of cos):
      // n << 30 puts bit 1 of n in the sign position, and (n + 1) << 30 = (n << 30) + 2³⁰
      const __mmask16 odd = _mm512_test_epi32_mask(n, _mm512_set1_epi32(1));
      const __m512i c = _mm512_castps_si512(_mm512_mask_blend_ps(odd, cs, sn));
      const __m512i s = _mm512_castps_si512(_mm512_mask_blend_ps(odd, sn, cs));
      const __m512i n30 = _mm512_slli_epi32(n, 30);
      const __m512i c30 = _mm512_add_epi32(n30, _mm512_set1_epi32(1 << 30));
      // a ^ (b & sign): truth table 0xF0 ^ (0xCC & 0xAA) = 0x78
      zc[k] = _mm512_mul_ps(r[k], _mm512_castsi512_ps(_mm512_ternarylogic_epi32(c, c30, sign, 0x78)));
      zs[k] = _mm512_mul_ps(r[k], _mm512_castsi512_ps(_mm512_ternarylogic_epi32(s, n30, sign, 0x78)));
    }
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
    const batch_f inv(detail::inv_2_24), half(detail::half_2_24);
    // (w >> 8) as a logical shift: mask after the arithmetic shift
    const batch_i m24(0x00ffffff);
    const batch_f u1 = simd::fma(xsimd::to_float((w1 >> 8) & m24), inv, half);
    const batch_f u2 = simd::fma(xsimd::to_float((w2 >> 8) & m24), inv, half);
    // ln u1
    const batch_i ix = xsimd::bitwise_cast<batch_i>(u1);
    batch_f e = xsimd::to_float((ix >> 23) - batch_i(127));
    batch_f m = xsimd::bitwise_cast<batch_f>((ix & batch_i(0x007fffff)) | batch_i(0x3f800000));
    const auto big = m > batch_f(2.0f * detail::sqrt_half_f);
    m = xsimd::select(big, m * batch_f(0.5f), m);
    e = xsimd::select(big, e + batch_f(1.0f), e);
    const batch_f f = m - batch_f(1.0f);
    batch_f p(detail::log_p[0]);
    for (int i = 1; i < 9; ++i) p = simd::fma(p, f, batch_f(detail::log_p[i]));
    const batch_f f2 = f * f;
    const batch_f lnm = simd::fma(f2 * f, p, simd::fma(batch_f(-0.5f), f2, f));
    const batch_f ln_u = simd::fma(e, batch_f(detail::ln2f), lnm);
    const batch_f r = xsimd::sqrt(batch_f(-2.0f) * ln_u);
    // sincos of 2π u2
    const batch_i n = xsimd::to_int(simd::fma(u2, batch_f(4.0f), batch_f(0.5f)));
    const batch_f fr = simd::fma(xsimd::to_float(n), batch_f(-0.25f), u2);
    const batch_f x = fr * batch_f(detail::two_pi_f);
    const batch_f x2 = x * x;
    const batch_f sp = simd::fma(simd::fma(batch_f(detail::sin_c[2]), x2, batch_f(detail::sin_c[1])), x2,
                                  batch_f(detail::sin_c[0]));
    const batch_f sn = simd::fma(x2 * x, sp, x);
    const batch_f cp = simd::fma(simd::fma(batch_f(detail::cos_c[2]), x2, batch_f(detail::cos_c[1])), x2,
                                  batch_f(detail::cos_c[0]));
    const batch_f cs = simd::fma(x2 * x2, cp, simd::fma(batch_f(-0.5f), x2, batch_f(1.0f)));
    // quadrant swap and signs in integer lanes (no float compare of bit patterns, so the result
    // does not depend on denormals-are-zero modes)
    const batch_i odd = batch_i(0) - (n & batch_i(1));  // all ones in odd quadrants
    const batch_i sni = xsimd::bitwise_cast<batch_i>(sn), csi = xsimd::bitwise_cast<batch_i>(cs);
    const batch_i swap = (sni ^ csi) & odd;
    const batch_i csign = ((n + batch_i(1)) & batch_i(2)) << 30;
    const batch_i ssign = (n & batch_i(2)) << 30;
    const batch_f c = xsimd::bitwise_cast<batch_f>(csi ^ swap ^ csign);
    const batch_f s = xsimd::bitwise_cast<batch_f>(sni ^ swap ^ ssign);
    zc = r * c;
    zs = r * s;
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
    normal_engine<Arch> eng(st_);
    typename normal_engine<Arch>::block_type blk;
    typename normal_engine<Arch>::block_type blk2;
    index_t i = 0;
    for (; i + 2 * normal_block <= n; i += 2 * normal_block) {
      eng.next2(blk, blk2);
      write(blk, out + i, normal_block);
      write(blk2, out + i + normal_block, normal_block);
    }
    for (; i + normal_block <= n; i += normal_block) {
      eng.next(blk);
      write(blk, out + i, normal_block);
    }
    if (i < n) {
      eng.next(blk);
      write(blk, out + i, n - i);
    }
    eng.store(st_);
  }

 private:
  template <class Block>
  static void write(const Block& blk, float* out, index_t n) noexcept {
    if constexpr (std::is_same_v<Block, std::array<float, normal_block>>) {
      for (index_t j = 0; j < n; ++j) out[j] = blk[static_cast<std::size_t>(j)];
    } else {
      constexpr index_t L = static_cast<index_t>(Block::value_type::size);
      if (n == normal_block) {
        for (std::size_t k = 0; k < blk.size(); ++k) blk[k].store_unaligned(out + static_cast<index_t>(k) * L);
      } else {
        alignas(64) float tmp[normal_block];
        for (std::size_t k = 0; k < blk.size(); ++k) blk[k].store_aligned(tmp + static_cast<index_t>(k) * L);
        for (index_t j = 0; j < n; ++j) out[j] = tmp[j];
      }
    }
  }
  normal_state st_;
};

}  // namespace kvphase::sim
