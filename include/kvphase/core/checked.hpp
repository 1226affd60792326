#pragma once
/// \file core/checked.hpp
/// Documented size limits and overflow-checked integer arithmetic for sizes and counts.
///
/// Every validate() bounds the sizes it accepts by the limits below, so that each product used
/// to size a buffer (tokens × channels, pairs × span, entries × channels, ...) provably fits in
/// index_t (2^30 · 2^16 = 2^46 < 2^63). Where a value is combined with another before it can
/// be bounded (for example a span added to an offset), checked_add / checked_mul compute the
/// result or throw kvphase::error naming the parameter; they never wrap.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase {

/// Upper bounds of the sizes kvphase accepts at its API boundary.
namespace limits {
/// Tokens of a context, and any token count inside one: spans, offsets, raw windows, padding.
inline constexpr index_t max_tokens = index_t(1) << 30;
/// Channels of a key or value vector (d).
inline constexpr index_t max_dim = 65536;
/// Tokens pooled into one compressed entry (W); the stride S ≤ W.
inline constexpr index_t max_chunk_window = index_t(1) << 20;
/// Compression heads of one operator.
inline constexpr index_t max_heads = 4096;
/// Elements of one buffer sized from validated values (tokens × channels ≤ 2^30 · 2^16).
inline constexpr index_t max_elements = max_tokens * max_dim;
}  // namespace limits

namespace detail {
template <class T>
std::string checked_text(T a, char op, T b) {
  return std::to_string(a) + " " + op + " " + std::to_string(b);
}
}  // namespace detail

/// a + b, or kvphase::error "<parameter> = a + b: overflows <bits>-bit integers".
template <class T>
[[nodiscard]] T checked_add(T a, T b, std::string_view parameter) {
  static_assert(std::is_integral_v<T>, "checked_add takes integers");
  T r{};
  if (__builtin_add_overflow(a, b, &r))
    fail(parameter, detail::checked_text(a, '+', b),
         "overflows " + std::to_string(std::numeric_limits<T>::digits) + "-bit integers");
  return r;
}

/// a − b, or kvphase::error naming the parameter.
template <class T>
[[nodiscard]] T checked_sub(T a, T b, std::string_view parameter) {
  static_assert(std::is_integral_v<T>, "checked_sub takes integers");
  T r{};
  if (__builtin_sub_overflow(a, b, &r))
    fail(parameter, detail::checked_text(a, '-', b),
         "overflows " + std::to_string(std::numeric_limits<T>::digits) + "-bit integers");
  return r;
}

/// a · b, or kvphase::error naming the parameter.
template <class T>
[[nodiscard]] T checked_mul(T a, T b, std::string_view parameter) {
  static_assert(std::is_integral_v<T>, "checked_mul takes integers");
  T r{};
  if (__builtin_mul_overflow(a, b, &r))
    fail(parameter, detail::checked_text(a, '*', b),
         "overflows " + std::to_string(std::numeric_limits<T>::digits) + "-bit integers");
  return r;
}

/// Element count rows · cols of a buffer, checked: both ≥ 0 and the product ≤ max_elements.
[[nodiscard]] inline index_t checked_elements(index_t rows, index_t cols, std::string_view parameter) {
  // the message text is built only on failure (this runs on success paths)
  if (rows < 0 || cols < 0) fail(parameter, detail::checked_text(rows, '*', cols), "sizes must be >= 0");
  const index_t n = checked_mul(rows, cols, parameter);
  if (n > limits::max_elements) fail(parameter, detail::checked_text(rows, '*', cols), "must be <= 2^46 elements");
  return n;
}

}  // namespace kvphase
