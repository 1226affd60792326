#pragma once
/// \file core/types.hpp
/// Index type and Eigen aliases. Token-major matrices are row-major: row t is token t's vector
/// (tokens × channels), so one token is one contiguous row.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

namespace kvphase {

using index_t = std::ptrdiff_t;

/// tokens × channels, row-major (row t is token t).
template <class Real>
using matrix_t = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Real>
using vector_t = Eigen::Matrix<Real, Eigen::Dynamic, 1>;
template <class Real>
using row_vector_t = Eigen::Matrix<Real, 1, Eigen::Dynamic>;

using matrixf = matrix_t<float>;
using matrixd = matrix_t<double>;
using vectorf = vector_t<float>;
using vectord = vector_t<double>;

/// Read-only / writable views of a token-major matrix stored elsewhere (row stride = cols).
template <class Real>
using matrix_view = Eigen::Map<const matrix_t<Real>>;
template <class Real>
using matrix_mut_view = Eigen::Map<matrix_t<Real>>;

template <class Real>
inline constexpr bool is_real_v = std::is_same_v<Real, float> || std::is_same_v<Real, double>;

/// Floor division and floor modulo for signed integers (positions may precede the origin).
constexpr index_t floor_div(index_t a, index_t b) noexcept {
  index_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
constexpr index_t floor_mod(index_t a, index_t b) noexcept { return a - floor_div(a, b) * b; }
constexpr index_t ceil_div(index_t a, index_t b) noexcept { return -floor_div(-a, b); }

}  // namespace kvphase
