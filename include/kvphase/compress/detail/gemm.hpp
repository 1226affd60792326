#pragma once
/// \file compress/detail/gemm.hpp
/// Row-major matrix products C = A·B of the compressor's projections (token rows × d times
/// d × c) and MLP layers, on Eigen 3.4's blocked GEMM kernel (general_matrix_matrix_product,
/// compiled for the build's target: AVX-512 with -march=native, AVX2 + FMA with -march=haswell).
///
/// Why the kernel is called directly rather than through `C.noalias() = A * B`: the expression
/// picks a GEMV for one-row products, a coefficient loop for tiny ones, and Eigen's own OpenMP
/// split when called outside a parallel region; each of those sums a row's dot products in
/// another order, so a row's bits would depend on how many rows came with it (the thread count,
/// the pieces fed to compress_stream). Called directly with a single-threaded blocking, a row of
/// C is a function of its row of A alone, provided it lies in a full register panel of the
/// kernel: the depth blocking kc depends only on the depth and the L1 size, each output
/// element is accumulated over kc-blocks in depth order, and within a full panel every element
/// is one FMA chain. gemm_rows therefore feeds rows in groups of `row_group` (a multiple of
/// every nr Eigen uses) and pads the last partial group with zero rows in scratch.
/// tests/test_compress_pool.cpp checks that invariance (threads, streams, single rows).
///
/// On the hardware-FMA paths (AVX2 + FMA, AVX-512) the products run on the library's own packed
/// kernel instead (gemm_rows_fma): every element of C is ONE fused multiply-add chain over the
/// whole depth, k = 0, 1, … in order from zero, so a row's bits depend on nothing but its row of
/// A and B, whatever the blocking, the row grouping or the thread split. It exists because
/// Eigen's kernel, as GCC 12 compiles it, reloads each packed A vector from memory for every
/// one of its four B columns (12 loads per 12 FMAs in its 48 × 4 tile), which held V4-CSA's
/// projections at 0.53 of the FMA peak on an AMD Zen 5 core (docs/performance.md). The SSE2
/// path keeps Eigen: its multiply-adds are not fused, so a kernel of its own would round
/// differently with the loop shape the compiler sees.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <unistd.h>

#include <Eigen/Core>

#include "kvphase/core/error.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::compress::detail {

/// Rows per register-panel group (a multiple of Eigen's nr for float and double on x86/ARM).
inline constexpr index_t row_group = 8;

/// C (m × n, ldc) = A (m × k, lda) · B (k × n, ldb), all row-major; single-threaded. `pad`
/// is resized as needed (scratch for the last partial row group). Rows of C are bitwise
/// independent of m and of which other rows are passed (see the file comment).
template <class Real>
void gemm_rows(const Real* A, index_t lda, const Real* B, index_t ldb, index_t m, index_t k, index_t n, Real* C,
               index_t ldc, std::vector<Real>& pad) {
  if (m <= 0 || n <= 0) return;
  using Eigen::Dynamic;
  using Eigen::RowMajor;
  using gemm = Eigen::internal::general_matrix_matrix_product<Eigen::Index, Real, RowMajor, false, Real, RowMajor,
                                                              false, RowMajor, 1>;
  using blocking_t = Eigen::internal::gemm_blocking_space<RowMajor, Real, Real, Dynamic, Dynamic, Dynamic, 1, false>;
  auto product = [&](const Real* a, index_t la, index_t rows, Real* c, index_t lc) {
    for (index_t i = 0; i < rows; ++i) std::fill(c + i * lc, c + i * lc + n, Real(0));
    if (k <= 0) return;
    blocking_t blocking(rows, n, k, 1, true);
    gemm::run(rows, n, k, a, la, B, ldb, c, 1, lc, Real(1), blocking, nullptr);
  };
  const index_t full = m - m % row_group;
  if (full > 0) product(A, lda, full, C, ldc);
  const index_t rest = m - full;
  if (rest > 0) {
    const std::size_t need = static_cast<std::size_t>(row_group * (k + n));
    if (pad.size() < need) pad.resize(need);
    Real* pa = pad.data();
    Real* pc = pad.data() + row_group * k;
    for (index_t i = 0; i < row_group; ++i) {
      if (i < rest) std::memcpy(pa + i * k, A + (full + i) * lda, static_cast<std::size_t>(k) * sizeof(Real));
      else std::fill(pa + i * k, pa + (i + 1) * k, Real(0));
    }
    product(pa, k, row_group, pc, n);
    for (index_t i = 0; i < rest; ++i)
      std::memcpy(C + (full + i) * ldc, pc + i * n, static_cast<std::size_t>(n) * sizeof(Real));
  }
}

/// Register tile of gemm_rows_fma on Arch: MR rows of A times NR batches of columns of B, with
/// MR·NR accumulators (24 of the 32 AVX-512 registers; 12 of the 16 AVX2 ones).
template <class Real, class Arch>
struct gemm_tile {
  static constexpr index_t L = simd::lanes<Real, Arch>();
  static constexpr bool wide = L * static_cast<index_t>(sizeof(Real)) >= 64;
  static constexpr index_t MR = 6;
  static constexpr index_t NR = wide ? 4 : 2;
  static constexpr index_t NC = NR * L;  ///< columns of a packed panel
  static constexpr index_t KC = 256;     ///< depth of a packed block (a panel: KC·NC values, 64 KiB in float on AVX-512)
};

/// Bytes of B in one packed block of gemm_rows_fma: half the core's L2 (at least 256 KiB), so the
/// block stays L2-resident while every row group passes over it. A is read from memory once per
/// block of columns, so the block is as wide as the L2 allows: at 256 KiB (256 columns at KC =
/// 256) the projections of V4's real shape (A = 16384 × 4096 floats, n = 512–1024 columns) read
/// A two to four times, and the kernel alone ran at 0.72–0.75 of the FMA peak on a Xeon with
/// AVX-512 and 2 MiB of L2; at 1 MiB, 0.785–0.81 (1.5 MiB: 0.70 at n = 2048, the block no longer
/// fits beside A's slices; docs/performance.md). Read once per process from the C library
/// (sysconf; 256 KiB where it does not say, at most 4 MiB whatever it says: the pack buffer is
/// one block per thread). Results do not depend on it: every element of C is one FMA chain over
/// the whole depth whatever the blocking.
inline std::size_t gemm_block_bytes() noexcept {
  static const std::size_t bytes = [] {
    std::size_t b = std::size_t(256) << 10;
#if defined(_SC_LEVEL2_CACHE_SIZE)
    const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0) b = std::clamp(static_cast<std::size_t>(l2) / 2, b, std::size_t(4) << 20);
#endif
    return b;
  }();
  return bytes;
}

/// Columns of B in one packed block of gemm_rows_fma on Arch (whole panels, gemm_block_bytes).
template <class Real, class Arch>
index_t gemm_block_columns() noexcept {
  using T = gemm_tile<Real, Arch>;
  return std::max<index_t>(1, static_cast<index_t>(gemm_block_bytes() / (T::KC * T::NC * sizeof(Real)))) * T::NC;
}

/// C[0 … MRt) × [0 … ncols) (ldc) of one panel: acc = (first ? 0 : C); acc = fma(A[i][p], Bp[p], acc)
/// for p = 0 … kc − 1 in order (A row i at A + i·lda, the panel Bp packed kc × NC); C = acc.
/// Partial panels (ncols < NC; Bp zero-padded) go through a buffer of NC columns per row.
/// Never inlined: inlined into a caller's larger body, GCC 12 did not keep the MRt·NR
/// accumulators in registers (0.34 of the FMA peak against 0.8 for the same product).
template <index_t MRt, class Real, class Arch>
[[gnu::noinline]] inline void gemm_micro(const Real* A, index_t lda, const Real* Bp, index_t kc, Real* C, index_t ldc, index_t ncols,
                       bool first) noexcept {
  using T = gemm_tile<Real, Arch>;
  using Bt = xsimd::batch<Real, Arch>;
  constexpr index_t L = T::L, NR = T::NR, NC = T::NC;
  Bt acc[MRt][NR];
  Real buf[MRt * NC];
  const bool full = ncols == NC;
  Real* c = full ? C : buf;
  const index_t lc = full ? ldc : NC;
  if (!full && !first) {
    for (index_t i = 0; i < MRt; ++i) {
      std::copy(C + i * ldc, C + i * ldc + ncols, buf + i * NC);
      std::fill(buf + i * NC + ncols, buf + (i + 1) * NC, Real(0));
    }
  }
  for (index_t i = 0; i < MRt; ++i)
    for (index_t j = 0; j < NR; ++j) acc[i][j] = first ? Bt(Real(0)) : Bt::load_unaligned(c + i * lc + j * L);
  for (index_t p = 0; p < kc; ++p) {
    const Real* b = Bp + p * NC;
    Bt bv[NR];
    for (index_t j = 0; j < NR; ++j) bv[j] = Bt::load_unaligned(b + j * L);
    for (index_t i = 0; i < MRt; ++i) {
      const Bt a(A[i * lda + p]);
      for (index_t j = 0; j < NR; ++j) acc[i][j] = simd::fma(a, bv[j], acc[i][j]);
    }
  }
  for (index_t i = 0; i < MRt; ++i)
    for (index_t j = 0; j < NR; ++j) acc[i][j].store_unaligned(c + i * lc + j * L);
  if (!full) {
    for (index_t i = 0; i < MRt; ++i) std::copy(buf + i * NC, buf + i * NC + ncols, C + i * ldc);
  }
}

/// Whether gemm_rows_fma requests the next row group's slice of A (and its part of C) ahead of
/// time. It pays where the hardware prefetchers do not follow rows a whole row apart (AMD Zen 5:
/// V4-CSA's projections 0.63 → 0.69–0.71 of the FMA peak) and costs on Intel cores, whose L2
/// streamer follows each row's contiguous slice itself and where the burst of requests held up
/// the kernel (a Xeon with AVX-512, `kvphase-bench compress --preset v4-csa --context 16384 --dim
/// 4096 --head-dim 512`, three alternating rounds at 1 thread: 0.625–0.638 with it, 0.640–0.672
/// requesting A only, 0.681–0.701 without; docs/performance.md). Read once per process. Results
/// do not depend on it.
inline bool gemm_prefetch_rows() noexcept {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  static const bool on = !__builtin_cpu_is("intel");
  return on;
#else
  return true;
#endif
}

/// gemm_rows on a hardware-FMA path (see the file comment): B is packed per block of KC depth ×
/// `panels` panels into `pack`, and every row group of MR rows (the rest in tiles of ≤ 3 rows)
/// passes over the block's panels while its KC-slice of A stays in L1.
/// `a_extra` (k values; null: none): one more row of A, kept apart from the others, whose row
/// of C goes to `c_extra` (n values) — a product that shares B, computed from B's packed blocks
/// (one more one-row tile per block) instead of reading B again.
/// `b_nonfinite` (null: no check): set to true when a value of B (k × n) is infinite or NaN,
/// checked while B is packed, so a caller that needs B finite gets the check without a pass of
/// its own over B (NSA's W1 is 64 MiB at d = 512; the pass cost a fifth of the operator at 2048
/// tokens). Left unchanged otherwise; B is checked whole whenever m > 0 or a_extra is given.
template <class Real, class Arch>
void gemm_rows_fma(const Real* A, index_t lda, const Real* B, index_t ldb, index_t m, index_t k, index_t n, Real* C,
                   index_t ldc, std::vector<Real>& pack, const Real* a_extra = nullptr, Real* c_extra = nullptr,
                   bool* b_nonfinite = nullptr) {
  using T = gemm_tile<Real, Arch>;
  constexpr index_t MR = T::MR, NC = T::NC, KC = T::KC;
  const index_t NB = gemm_block_columns<Real, Arch>();
  if (n <= 0 || (m <= 0 && !a_extra)) return;
  if (k <= 0) {
    for (index_t i = 0; i < m; ++i) std::fill(C + i * ldc, C + i * ldc + n, Real(0));
    if (a_extra) std::fill(c_extra, c_extra + n, Real(0));
    return;
  }
  // The panels start on a cache-line boundary. A vector row of a panel (NC·sizeof(Real) bytes, a
  // multiple of 64 on AVX-512) that straddles two lines is two loads: std::vector's storage of
  // this size comes from glibc's mmap, 16 bytes past a page, so every B load of the micro-kernel
  // was split (a Xeon with AVX-512: 0.64 of the FMA peak at every shape, 0.75 aligned;
  // docs/performance.md). Results do not depend on it.
  constexpr std::size_t line = 64 / sizeof(Real);
  if (pack.size() < static_cast<std::size_t>(KC * NB) + line) pack.resize(static_cast<std::size_t>(KC * NB) + line);
  Real* const packed = pack.data() + (line - reinterpret_cast<std::uintptr_t>(pack.data()) / sizeof(Real) % line) % line;
  for (index_t jc = 0; jc < n; jc += NB) {
    const index_t nb = std::min(NB, n - jc);
    const index_t np = (nb + NC - 1) / NC;
    for (index_t pc = 0; pc < k; pc += KC) {
      const index_t kc = std::min(KC, k - pc);
      // panel q holds B[pc … pc + kc) × [jc + q·NC, +NC), row-major, zero past column n
      bool bad = false;
      for (index_t q = 0; q < np; ++q) {
        const index_t j0 = jc + q * NC, w = std::min(NC, n - j0);
        Real* dst = packed + q * KC * NC;
        for (index_t p = 0; p < kc; ++p) {
          const Real* src = B + (pc + p) * ldb + j0;
          std::copy(src, src + w, dst + p * NC);
          std::fill(dst + p * NC + w, dst + (p + 1) * NC, Real(0));
          if (b_nonfinite) bad |= kvphase::detail::any_nonfinite(dst + p * NC, static_cast<std::size_t>(w));
        }
      }
      if (bad) *b_nonfinite = true;
      const bool first = pc == 0;
      if (a_extra) {
        for (index_t q = 0; q < np; ++q) {
          const index_t j0 = jc + q * NC;
          gemm_micro<1, Real, Arch>(a_extra + pc, 0, packed + q * KC * NC, kc, c_extra + j0, 0, std::min(NC, n - j0), first);
        }
      }
      constexpr index_t per_line = 64 / static_cast<index_t>(sizeof(Real));
      const bool ahead = gemm_prefetch_rows();
      index_t i = 0;
      for (; i + MR <= m; i += MR) {
        // the next row group's KC-slice of A and its part of C, requested now (gemm_prefetch_rows):
        // their rows lie lda and ldc apart (a slice of a 4096-wide row is a few cache lines), which
        // not every core's prefetchers follow, and C is re-read from memory once per depth block
        for (index_t r = i + MR; ahead && r < std::min(m, i + 2 * MR); ++r) {
          for (index_t p = 0; p < kc; p += per_line) __builtin_prefetch(A + r * lda + pc + p);
          if (!first)
            for (index_t j = 0; j < nb; j += per_line) __builtin_prefetch(C + r * ldc + jc + j, 1);
        }
        for (index_t q = 0; q < np; ++q) {
          const index_t j0 = jc + q * NC;
          gemm_micro<MR, Real, Arch>(A + i * lda + pc, lda, packed + q * KC * NC, kc, C + i * ldc + j0, ldc,
                                     std::min(NC, n - j0), first);
        }
      }
      // the last m mod MR rows in tiles of 3, 2 or 1 rows (a one-row tile is load-bound: NR FMAs
      // per NR + 1 loads); every element is the same one FMA chain whichever tile computes it
      while (i < m) {
        const index_t rows = std::min<index_t>(3, m - i);
        for (index_t q = 0; q < np; ++q) {
          const index_t j0 = jc + q * NC, w = std::min(NC, n - j0);
          const Real* a = A + i * lda + pc;
          const Real* bp = packed + q * KC * NC;
          Real* c = C + i * ldc + j0;
          if (rows == 3) gemm_micro<3, Real, Arch>(a, lda, bp, kc, c, ldc, w, first);
          else if (rows == 2) gemm_micro<2, Real, Arch>(a, lda, bp, kc, c, ldc, w, first);
          else gemm_micro<1, Real, Arch>(a, lda, bp, kc, c, ldc, w, first);
        }
        i += rows;
      }
    }
  }
}

/// The product of the compressor's projections and MLP on path Arch: gemm_rows_fma where the
/// path has a hardware FMA, Eigen's kernel (gemm_rows) elsewhere. `b_nonfinite` as in
/// gemm_rows_fma, on the paths where gemm_checks_b<Arch>() (elsewhere it is left unchanged).
template <class Real, class Arch>
void gemm_rows_on(const Real* A, index_t lda, const Real* B, index_t ldb, index_t m, index_t k, index_t n, Real* C,
                  index_t ldc, std::vector<Real>& scratch, bool* b_nonfinite = nullptr) {
  if constexpr (simd::fused_fma<Arch>()) {
    gemm_rows_fma<Real, Arch>(A, lda, B, ldb, m, k, n, C, ldc, scratch, nullptr, nullptr, b_nonfinite);
  } else {
    (void)b_nonfinite;
    gemm_rows<Real>(A, lda, B, ldb, m, k, n, C, ldc, scratch);
  }
}

/// Whether gemm_rows_on checks B's values on path Arch (b_nonfinite).
template <class Arch>
constexpr bool gemm_checks_b() noexcept {
  return simd::fused_fma<Arch>();
}

}  // namespace kvphase::compress::detail
