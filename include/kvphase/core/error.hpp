#pragma once
/// \file core/error.hpp
/// kvphase::error and the one helper that formats "parameter, value, rule".
///
/// Every invalid input at the API boundary throws kvphase::error with a message of the form
///   kvphase: <parameter> = <value>: <rule>
/// so a user (and the CLI, which prints it and exits 2) learns what was wrong and why.

#include <cmath>
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

/// Throws unless every element of `values` is finite; names the first bad index.
template <class Real>
void require_finite(std::span<const Real> values, std::string_view parameter) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      fail(std::string(parameter) + "[" + std::to_string(i) + "]", values[i],
           "must be finite (no NaN or infinity)");
    }
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
