#pragma once
/// \file io/text.hpp
/// Small text helpers shared by the CSV and JSON readers: the byte order mark rule, UTF-8
/// validity, line/column of a byte offset and short excerpts for error messages.
///
/// Rule for a UTF-8 byte order mark (EF BB BF): at the very start of a CSV or JSON input it is
/// skipped; anywhere else it is ordinary text.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace kvphase::io {

/// Longest excerpt of an input quoted in an error message (bytes).
inline constexpr std::size_t max_excerpt = 60;

namespace detail {

/// `text` without a leading UTF-8 byte order mark.
inline std::string_view strip_bom(std::string_view text) noexcept {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  return text;
}

/// Length of the well-formed UTF-8 sequence starting at s[i] (1–4), or 0 if it is not one
/// (overlong forms, surrogates and code points above U+10FFFF are not well formed).
inline std::size_t utf8_sequence(std::string_view s, std::size_t i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  std::size_t len = 0;
  unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) len = 3;
  else if (c == 0xED) len = 3, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else if (c == 0xF4) len = 4, hi = 0x8F;
  else return 0;
  if (i + len > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return len;
}

/// Byte offset of the first byte that is not well-formed UTF-8, or npos.
inline std::size_t invalid_utf8_at(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

/// At most `limit` bytes of `s` followed by "..." when cut; never cuts inside a UTF-8 sequence,
/// writes invalid bytes as '?' and control characters as ' ' (the message stays one valid line).
inline std::string excerpt(std::string_view s, std::size_t limit = max_excerpt) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size() && out.size() < limit) {
    const std::size_t n = utf8_sequence(s, i);
    const auto c = static_cast<unsigned char>(s[i]);
    if (n == 0) {
      out += '?';
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      out += ' ';
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

/// "line L, column C" (1-based) of byte offset `pos` in `text`.
inline std::string line_column(std::string_view text, std::size_t pos) {
  pos = std::min(pos, text.size());
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

}  // namespace detail
}  // namespace kvphase::io
