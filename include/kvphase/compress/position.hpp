#pragma once
/// \file compress/position.hpp
/// Post-processing of pooled entries, shared with the attention models for queries and keys:
///  - RMSNorm: y = x / sqrt(mean(x²) + eps) ⊙ w (w optional: all ones when absent).
///  - RoPE on the last rope_dim channels (rope_dim = 0: all), rotating ADJACENT pairs
///    (channels 2k, 2k+1 of the rotated part) by angle position · θ^(−2k/rope_dim), as the
///    DeepSeek-V4 reference does; channels before the rotated part are untouched.
///  - anchor_position: the position a compressed entry is rotated at (start of its stride
///    block as in DeepSeek-V4, end, centre).
///
/// Angles and the rotation are computed in double and rounded once to Real, so a rotation adds
/// at most about one rounding per channel whatever the position.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <vector>

#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::compress {

/// The two steps of rms_norm_inplace, for callers that normalise several rows stage by stage (the
/// compressor's tiles): rms_inverse gives 1 / sqrt(Σ row² / dim + eps) rounded to Real, and
/// rms_scale multiplies the row by it (and the weight); together, rms_norm_inplace bit for bit.
template <class Real, class Arch = simd::default_arch>
inline Real rms_inverse(const Real* row, index_t dim, double eps) noexcept {
  const double ss = static_cast<double>(simd::dot<Real, Arch>(row, row, dim));
  return static_cast<Real>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
}

/// rms_inverse of m rows (row i at rows + i·ld) into inv[0 … m), each bit for bit
/// rms_inverse's: on the hardware-FMA paths the rows' divisions and square roots go through
/// double batches (correctly rounded operations, so the same bits), one batch for L rows instead
/// of L latency chains of a scalar square root and two divisions. Other paths call rms_inverse
/// row by row: sse2's simd::fma is a·b + c, which GCC contracts or not depending on the code
/// around the inlined dot, so only the same call shape gives the same sums there.
template <class Real, class Arch = simd::default_arch>
inline void rms_inverses(const Real* rows, index_t ld, index_t m, index_t dim, double eps, Real* inv) noexcept {
  index_t i = 0;
  if constexpr (simd::fused_fma<Arch>()) {
    using D = xsimd::batch<double, Arch>;
    constexpr index_t L = static_cast<index_t>(D::size);
    alignas(64) double v[L];
    const D n(static_cast<double>(dim)), e(eps), one(1.0);
    for (; i + L <= m; i += L) {
      for (index_t j = 0; j < L; ++j) {
        const Real* row = rows + (i + j) * ld;
        v[j] = static_cast<double>(simd::dot<Real, Arch>(row, row, dim));
      }
      (one / xsimd::sqrt(D::load_aligned(v) / n + e)).store_aligned(v);
      for (index_t j = 0; j < L; ++j) inv[i + j] = static_cast<Real>(v[j]);
    }
  }
  for (; i < m; ++i) inv[i] = rms_inverse<Real, Arch>(rows + i * ld, dim, eps);
}

/// dst[i] = row[i] · inv (· weight[i]): rms_scale into another row (dst may be row), the same
/// operations in the same order, so the same bits.
template <class Real, class Arch = simd::default_arch>
inline void rms_scale_to(const Real* row, Real* dst, index_t dim, Real inv, const Real* weight = nullptr) noexcept {
  index_t i = 0;
  if constexpr (!simd::is_scalar_v<Arch>) {
    using B = xsimd::batch<Real, Arch>;
    constexpr index_t L = B::size;
    const B vi(inv);
    if (weight == nullptr) {
      for (; i + L <= dim; i += L) (vi * B::load_unaligned(row + i)).store_unaligned(dst + i);
    } else {
      for (; i + L <= dim; i += L) {
        (B::load_unaligned(row + i) * vi * B::load_unaligned(weight + i)).store_unaligned(dst + i);
      }
    }
  }
  if (weight == nullptr) {
    for (; i < dim; ++i) dst[i] = row[i] * inv;
  } else {
    for (; i < dim; ++i) dst[i] = row[i] * inv * weight[i];
  }
}

template <class Real, class Arch = simd::default_arch>
inline void rms_scale(Real* row, index_t dim, Real inv, const Real* weight = nullptr) noexcept {
  rms_scale_to<Real, Arch>(row, row, dim, inv, weight);
}

/// RMSNorm of one row in place: row[i] ← row[i] / sqrt(Σ row² / dim + eps) · weight[i].
/// `weight` may be null (no weight). dim ≥ 1, eps > 0 (not checked: kernel).
template <class Real, class Arch = simd::default_arch>
inline void rms_norm_inplace(Real* row, index_t dim, double eps, const Real* weight = nullptr) noexcept {
  rms_scale<Real, Arch>(row, dim, rms_inverse<Real, Arch>(row, dim, eps), weight);
}

/// Checked form: throws kvphase::error for dim < 1 or eps ≤ 0 / non-finite.
template <class Real, class Arch = simd::default_arch>
inline void rms_norm(Real* row, index_t dim, double eps, const Real* weight = nullptr) {
  require(dim >= 1, "dim", dim, "must be >= 1");
  require(eps > 0.0 && std::isfinite(eps), "eps", eps, "must be finite and > 0");
  rms_norm_inplace<Real, Arch>(row, dim, eps, weight);
}

/// Inverse frequencies θ^(−2k/R), k < R/2, YaRN-scaled when y is on (spec.hpp, yarn_config).
/// Throws kvphase::error for an invalid θ, R (odd or < 2) or YaRN configuration.
inline std::vector<double> rope_inverse_frequencies(double theta, index_t R, const yarn_config& y = {}) {
  require(std::isfinite(theta) && theta > 1.0, "rope.theta", theta, "must be finite and > 1");
  require(R >= 2 && R % 2 == 0, "rotated channels", R, "must be even and >= 2");
  y.validate();
  std::vector<double> f(static_cast<std::size_t>(R / 2));
  for (index_t k = 0; k < R / 2; ++k)
    f[static_cast<std::size_t>(k)] = std::pow(theta, -2.0 * static_cast<double>(k) / static_cast<double>(R));
  if (!y.enabled()) return f;
  const double two_pi = 6.283185307179586476925286766559;
  auto pair_of = [&](double rotations) {
    return static_cast<double>(R) * std::log(y.original_max_position / (rotations * two_pi)) / (2.0 * std::log(theta));
  };
  const double low = std::max(std::floor(pair_of(y.beta_fast)), 0.0);
  double high = std::min(std::ceil(pair_of(y.beta_slow)), static_cast<double>(R - 1));
  if (high == low) high += 0.001;
  for (index_t k = 0; k < R / 2; ++k) {
    const double ramp = std::clamp((static_cast<double>(k) - low) / (high - low), 0.0, 1.0);
    double& v = f[static_cast<std::size_t>(k)];
    v = v * (1.0 - ramp) + (v / y.factor) * ramp;
  }
  return f;
}

/// Inverse frequencies of a RoPE configuration for rows of `dim` channels: pair k of the
/// rotated part (channels dim − R + 2k, dim − R + 2k + 1, R = rope_dim or dim when 0) turns by
/// position · inv_freq[k]: cfg.inv_freq when given, else rope_inverse_frequencies(θ, R, yarn).
struct rope_frequencies {
  index_t dim = 0;         ///< channels of a row
  index_t rotated = 0;     ///< R: rotated channels (the last R)
  std::vector<double> inv_freq;

  rope_frequencies() = default;
  /// Throws kvphase::error for an invalid config, when R > dim or R is odd, or when explicit
  /// frequencies do not number R/2.
  rope_frequencies(const rope_config& cfg, index_t dim_) : dim(dim_) {
    require(dim_ >= 1, "dim", dim_, "must be >= 1");
    cfg.validate(dim_);
    rotated = cfg.rope_dim == 0 ? dim_ : cfg.rope_dim;
    require(rotated % 2 == 0, "rope.rope_dim", rotated,
            "rotated channel count must be even (rope_dim = 0 rotates all channels: dim must be even)");
    if (!cfg.inv_freq.empty()) {
      require(static_cast<index_t>(cfg.inv_freq.size()) * 2 == rotated, "rope.inv_freq.size()", cfg.inv_freq.size(),
              "must be half the rotated channels (" + std::to_string(rotated / 2) + ")");
      inv_freq = cfg.inv_freq;
    } else if (rotated > 0) {
      inv_freq = rope_inverse_frequencies(cfg.theta, rotated, cfg.yarn);
    }
  }
};

/// The cosines and sines RoPE rotates by at `position`: cs[2k] = cos(position·inv_freq_k),
/// cs[2k + 1] = sin(…), for the f.rotated / 2 pairs (double, as apply_rope computes them).
inline void rope_cos_sin(double position, const rope_frequencies& f, double* cs) noexcept {
  const index_t pairs = f.rotated / 2;
  for (index_t k = 0; k < pairs; ++k) {
    const double a = position * f.inv_freq[static_cast<std::size_t>(k)];
    cs[2 * k] = std::cos(a);
    cs[2 * k + 1] = std::sin(a);
  }
}

/// One adjacent pair (r[0], r[1]) rotated by the angle whose cosine and sine are c and s, in
/// double, rounded once to Real: x0·c − x1·s and x0·s + x1·c, the x1 products rounded and the x0
/// products fused where the build has FMA — the form GCC's contraction gives the two written
/// expressions, made explicit so that every RoPE of the library (apply_rope, apply_rope_cs,
/// rotate_pairs on any SIMD path, the sweep's key table) rounds alike, bit for bit.
template <class Real>
inline void rotate_pair(Real* r, double c, double s) noexcept {
  const double x0 = static_cast<double>(r[0]), x1 = static_cast<double>(r[1]);
#if defined(__FMA__)
  r[0] = static_cast<Real>(std::fma(x0, c, -(x1 * s)));
  r[1] = static_cast<Real>(std::fma(x0, s, x1 * c));
#else
  r[0] = static_cast<Real>(x0 * c - x1 * s);
  r[1] = static_cast<Real>(x0 * s + x1 * c);
#endif
}

namespace detail {
// Pairs in double batches, interleaved as rotate_pair reads them (lane 2k = x0 or c, lane
// 2k + 1 = x1 or s): y = fmaddsub(dup_even(X), C, dup_odd(X) · swap(C)), whose even lane is
// x0·c − x1·s with x1·s rounded and the rest fused, and whose odd lane is x0·s + x1·c with x1·c
// rounded — rotate_pair's two expressions with its roundings, so the same bits. Three in-lane
// shuffles, one product and one fused op per L/2 pairs.
#if defined(__AVX512F__)
inline __m512d rope_rotate(__m512d X, __m512d C) noexcept {
  const __m512d t = _mm512_mul_pd(_mm512_permute_pd(X, 0xFF), _mm512_permute_pd(C, 0x55));
  return _mm512_fmaddsub_pd(_mm512_movedup_pd(X), C, t);
}
#endif
#if defined(__AVX__) && defined(__FMA__)
inline __m256d rope_rotate(__m256d X, __m256d C) noexcept {
  const __m256d t = _mm256_mul_pd(_mm256_permute_pd(X, 0xF), _mm256_permute_pd(C, 0x5));
  return _mm256_fmaddsub_pd(_mm256_movedup_pd(X), C, t);
}
#endif
}  // namespace detail

/// `pairs` adjacent pairs at r rotated by cs (cosine and sine interleaved, as rope_cos_sin
/// writes them): rotate_pair on each, bit for bit. On a path with a hardware FMA (simd::
/// fused_fma: AVX-512, FMA3 + AVX2) the pairs go through double batches (detail::rope_rotate);
/// float rows are widened a whole float batch at a time (8 pairs on AVX-512, 4 on AVX2), then
/// half a batch, then pair by pair. Other paths (the scalar reference, sse2) run rotate_pair.
template <class Real, class Arch = simd::default_arch>
inline void rotate_pairs(Real* r, const double* cs, index_t pairs) noexcept {
  index_t k = 0;
  if constexpr (simd::fused_fma<Arch>()) {  // false for the scalar tag
#if defined(__AVX512F__)
    if constexpr (Arch::alignment() == 64) {
      if constexpr (std::is_same_v<Real, float>) {
        for (; k + 8 <= pairs; k += 8) {
          float* p = r + 2 * k;
          const __m512d f = _mm512_castps_pd(_mm512_loadu_ps(p));
          const __m512d y0 = detail::rope_rotate(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_castpd512_pd256(f))),
                                                 _mm512_loadu_pd(cs + 2 * k));
          const __m512d y1 = detail::rope_rotate(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(f, 1))),
                                                 _mm512_loadu_pd(cs + 2 * k + 8));
          const __m512d lo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(y0)));
          _mm512_storeu_ps(p, _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm512_cvtpd_ps(y1)), 1)));
        }
        if (k + 4 <= pairs) {
          float* p = r + 2 * k;
          const __m512d y = detail::rope_rotate(_mm512_cvtps_pd(_mm256_loadu_ps(p)), _mm512_loadu_pd(cs + 2 * k));
          _mm256_storeu_ps(p, _mm512_cvtpd_ps(y));
          k += 4;
        }
      } else {
        for (; k + 4 <= pairs; k += 4) {
          _mm512_storeu_pd(r + 2 * k, detail::rope_rotate(_mm512_loadu_pd(r + 2 * k), _mm512_loadu_pd(cs + 2 * k)));
        }
      }
    }
#endif
#if defined(__AVX__) && defined(__FMA__)
    if constexpr (Arch::alignment() == 32) {
      if constexpr (std::is_same_v<Real, float>) {
        for (; k + 4 <= pairs; k += 4) {
          float* p = r + 2 * k;
          const __m256 f = _mm256_loadu_ps(p);
          const __m256d y0 = detail::rope_rotate(_mm256_cvtps_pd(_mm256_castps256_ps128(f)), _mm256_loadu_pd(cs + 2 * k));
          const __m256d y1 = detail::rope_rotate(_mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)), _mm256_loadu_pd(cs + 2 * k + 4));
          _mm256_storeu_ps(p, _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(y0)), _mm256_cvtpd_ps(y1), 1));
        }
        if (k + 2 <= pairs) {
          float* p = r + 2 * k;
          const __m256d y = detail::rope_rotate(_mm256_cvtps_pd(_mm_loadu_ps(p)), _mm256_loadu_pd(cs + 2 * k));
          _mm_storeu_ps(p, _mm256_cvtpd_ps(y));
          k += 2;
        }
      } else {
        for (; k + 2 <= pairs; k += 2) {
          _mm256_storeu_pd(r + 2 * k, detail::rope_rotate(_mm256_loadu_pd(r + 2 * k), _mm256_loadu_pd(cs + 2 * k)));
        }
      }
    }
#endif
  }
  for (; k < pairs; ++k) rotate_pair(r + 2 * k, cs[2 * k], cs[2 * k + 1]);
}

/// Rotates one row in place by the cosines and sines cs of rope_cos_sin: with the cs of a
/// position, the row apply_rope gives at that position, bit for bit (rotate_pairs on Arch).
template <class Real, class Arch = simd::default_arch>
inline void apply_rope_cs(Real* row, const double* cs, const rope_frequencies& f) noexcept {
  rotate_pairs<Real, Arch>(row + (f.dim - f.rotated), cs, f.rotated / 2);
}

/// Rotates one row in place by RoPE at `position` (any real; negative = inverse rotation).
template <class Real>
inline void apply_rope(Real* row, double position, const rope_frequencies& f) noexcept {
  Real* r = row + (f.dim - f.rotated);
  const index_t pairs = f.rotated / 2;
  for (index_t k = 0; k < pairs; ++k) {
    const double a = position * f.inv_freq[static_cast<std::size_t>(k)];
    rotate_pair(r + 2 * k, std::cos(a), std::sin(a));
  }
}

/// Convenience form: builds the frequencies (throws kvphase::error on a bad config). The
/// anchor field of cfg is ignored here: the caller decides whether RoPE applies.
template <class Real>
inline void apply_rope(Real* row, index_t dim, double position, const rope_config& cfg) {
  apply_rope(row, position, rope_frequencies(cfg, dim));
}

/// Rotates every row t of a token-major matrix at position first_position + t.
template <class Real>
inline void apply_rope_rows(matrix_t<Real>& m, double first_position, const rope_config& cfg) {
  const rope_frequencies f(cfg, m.cols());
  for (index_t t = 0; t < m.rows(); ++t) apply_rope(m.row(t).data(), first_position + static_cast<double>(t), f);
}

/// Position at which compressed entry e of grid g is rotated:
///  - V4 convention: the entry's stride block is [b, b + S − 1] with b = last source − S + 1
///    (DeepSeek-V4 and the paper reference rotate at b = i·S); start = b, end = b + S − 1,
///    centre = b + (S − 1)/2.
///  - NSA convention: the block is the whole source range [f, f + W − 1]: start = f,
///    end = f + W − 1, centre = f + (W − 1)/2.
///  - none: 0 (no rotation is applied for anchor none).
inline double anchor_position(const chunk_grid& g, index_t e, rope_anchor a) noexcept {
  const token_range r = g.sources(e);
  const index_t first = g.convention == grid_convention::v4 ? r.last - g.stride + 1 : r.first;
  const index_t last = r.last;
  switch (a) {
    case rope_anchor::none: return 0.0;
    case rope_anchor::start: return static_cast<double>(first);
    case rope_anchor::end: return static_cast<double>(last);
    case rope_anchor::centre: return 0.5 * static_cast<double>(first + last);
  }
  return 0.0;
}

}  // namespace kvphase::compress
