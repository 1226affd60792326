#pragma once
/// \file core/error.hpp
/// kvphase::error and the one helper that formats "parameter, value, rule".
///
/// Every invalid input at the API boundary throws kvphase::error with a message of the form
///   kvphase: <parameter> = <value>: <rule>
/// so a user (and the CLI, which prints it and exits 2) learns what was wrong and why.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstddef>
#include <sstream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kvphase {

/// Invalid input at the API boundary. Derived from std::invalid_argument.
class error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
template <class T>
std::string value_text(const T& value) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, bool>) {
    os << (value ? "true" : "false");
  } else if constexpr (std::is_floating_point_v<T>) {
    os.precision(17);
    os << value;
  } else {
    os << value;
  }
  return os.str();
}
}  // namespace detail

/// Throws kvphase::error naming the parameter, its value and the rule it broke.
template <class T>
[[noreturn]] void fail(std::string_view parameter, const T& value, std::string_view rule) {
  std::string msg = "kvphase: ";
  msg += parameter;
  msg += " = ";
  msg += detail::value_text(value);
  msg += ": ";
  msg += rule;
  throw error(msg);
}

/// Checks a condition at the API boundary; on failure throws through fail().
template <class T>
void require(bool ok, std::string_view parameter, const T& value, std::string_view rule) {
  if (!ok) fail(parameter, value, rule);
}

namespace detail {
/// Whether any of v[0 … n) is infinite or NaN (its exponent bits all set): a branch-free OR
/// the compiler vectorises, at memory speed. Also used by kernels that check values while they
/// read them anyway (compress/detail/gemm.hpp), instead of a pass of their own.
template <class Real>
[[nodiscard]] bool any_nonfinite(const Real* v, std::size_t n) noexcept {
  static_assert(std::is_same_v<Real, float> || std::is_same_v<Real, double>);
  using bits_t = std::conditional_t<sizeof(Real) == 4, std::uint32_t, std::uint64_t>;
  constexpr bits_t exponent = sizeof(Real) == 4 ? bits_t(0x7f800000u) : bits_t(0x7ff0000000000000ull);
  bits_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bits_t u;
    std::memcpy(&u, v + i, sizeof u);
    bad |= static_cast<bits_t>((u & exponent) == exponent);
  }
  return bad != 0;
}
}  // namespace detail

/// Throws unless every element of `values` is finite; names the first bad index.
template <class Real>
void require_finite(std::span<const Real> values, std::string_view parameter) {
  auto check = [&](std::size_t a, std::size_t b) {
    for (std::size_t i = a; i < b; ++i) {
      if (!std::isfinite(values[i])) {
        fail(std::string(parameter) + "[" + std::to_string(i) + "]", values[i],
             "must be finite (no NaN or infinity)");
      }
    }
  };
  if constexpr (std::is_same_v<Real, float> || std::is_same_v<Real, double>) {
    // Blocks of 4096 scanned branch-free (detail::any_nonfinite); only a flagged block is walked
    // to name the index.
    const std::size_t n = values.size();
    for (std::size_t a = 0; a < n; a += 4096) {
      const std::size_t b = std::min(n, a + 4096);
      if (detail::any_nonfinite(values.data() + a, b - a)) check(a, b);
    }
  } else {
    check(0, values.size());
  }
}
template <class Real>
void require_finite(const std::vector<Real>& values, std::string_view parameter) {
  require_finite(std::span<const Real>(values.data(), values.size()), parameter);
}

}  // namespace kvphase

/// Internal invariant (not input validation): active unless NDEBUG.
#include <cassert>
#define KVPHASE_ASSERT(cond) assert(cond)
