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

#include <algorithm>
#include <cstring>
#include <vector>

#include <Eigen/Core>

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

}  // namespace kvphase::compress::detail
