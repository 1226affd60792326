#pragma once
/// \file io/json.hpp
/// JSON helpers over nlohmann::json: one stable text form for outputs and a checked reader.
///
/// Output form: 2-space indentation, keys in insertion order of kvphase's writers
/// (nlohmann::ordered_json), a trailing newline. nlohmann writes doubles as the shortest text
/// that reads back to the same double, independent of the locale, so identical values give
/// identical bytes.
///
/// Reading (parse_json): a leading UTF-8 byte order mark is skipped (the same rule as the CSV
/// reader); arrays and objects may nest at most max_json_depth levels (checked by a scan of the
/// text before parsing, so a hostile file cannot exhaust the stack of the parser, the
/// serializer or the comparison); a syntax error or invalid UTF-8 throws kvphase::error naming
/// the source, the byte offset, line and column. Error texts quote at most a short excerpt.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstddef>
#include <initializer_list>
#include <istream>
#include <iterator>
#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvphase/core/error.hpp"
#include "kvphase/io/text.hpp"

namespace kvphase::io {

/// JSON value whose objects keep insertion order (outputs list fields in a fixed, readable order).
using ordered_json = nlohmann::ordered_json;

/// Deepest nesting of arrays and objects parse_json accepts (kvphase's own files nest ≤ 5).
inline constexpr std::size_t max_json_depth = 64;

/// The output text of a JSON value: indent 2, trailing newline.
template <class Json>
std::string json_text(const Json& j) {
  return j.dump(2) + "\n";
}

namespace detail {
/// A short text of a JSON value for error messages (at most about max_excerpt bytes; values of
/// arrays and objects are not printed in full).
template <class Json>
std::string json_excerpt(const Json& j) {
  if (j.is_array()) return "(an array of " + std::to_string(j.size()) + ")";
  if (j.is_object()) return "(an object of " + std::to_string(j.size()) + " members)";
  if (j.is_string()) {
    const auto& s = j.template get_ref<const std::string&>();
    return "\"" + excerpt(s) + "\"";
  }
  return excerpt(j.dump());
}

/// Throws kvphase::error naming `source` unless arrays and objects in `text` nest at most
/// max_json_depth levels (brackets inside strings do not count).
inline void require_json_depth(std::string_view text, std::string_view source) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_json_depth)
        fail(std::string(source) + " nesting depth", "> " + std::to_string(max_json_depth) + " at byte " +
                                                          std::to_string(i) + " (" + line_column(text, i) + ")",
             "arrays and objects may nest at most " + std::to_string(max_json_depth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}
}  // namespace detail

/// Parses JSON text (see the file comment); throws kvphase::error naming `source`, the byte
/// offset, line and column on a syntax error or invalid UTF-8, and on nesting deeper than
/// max_json_depth. Members of the top-level object named in `skip` are checked for syntax but
/// not stored (a reader that needs a part of a large document builds only that part).
template <class Json = ordered_json>
Json parse_json_as(std::string_view text, std::string_view source = "json",
                   std::initializer_list<std::string_view> skip = {}) {
  text = detail::strip_bom(text);
  detail::require_json_depth(text, source);
  try {
    if (skip.size() == 0) return Json::parse(text.begin(), text.end());
    const auto keep = [&](int depth, typename Json::parse_event_t event, Json& parsed) {
      if (depth != 1 || event != Json::parse_event_t::key || !parsed.is_string()) return true;
      const auto& key = parsed.template get_ref<const std::string&>();
      for (const auto k : skip)
        if (key == k) return false;
      return true;
    };
    return Json::parse(text.begin(), text.end(), keep);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte after the last one read.
    const std::size_t at = e.byte > 0 ? static_cast<std::size_t>(e.byte) - 1 : 0;
    std::string what = e.what();
    const auto colon = what.find(": ");  // drop "[json.exception.parse_error.101] parse error at ...: "
    if (colon != std::string::npos) what.erase(0, colon + 2);
    fail(std::string(source), "byte " + std::to_string(at) + " (" + detail::line_column(text, at) + ")",
         "is not valid JSON: " + detail::excerpt(what, 160));
  } catch (const nlohmann::json::exception& e) {
    fail(std::string(source), "(JSON)", std::string("cannot be read: ") + detail::excerpt(e.what(), 160));
  }
}

/// parse_json_as<ordered_json>.
inline ordered_json parse_json(std::string_view text, std::string_view source = "json") {
  return parse_json_as<ordered_json>(text, source);
}

/// Reads a whole stream as JSON.
inline ordered_json read_json(std::istream& in, std::string_view source = "json") {
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_json(text, source);
}

/// Member `key` of object `j`, required; throws kvphase::error naming `where.key` if absent.
/// (The names are built only on failure: this is called for every value of a large file.)
template <class Json>
const Json& require_member(const Json& j, std::string_view key, std::string_view where) {
  if (!j.is_object()) fail(where, detail::json_excerpt(j), "must be a JSON object");
  const auto it = j.find(std::string(key));
  if (it == j.end()) fail(std::string(where) + "." + std::string(key), "(absent)", "is required");
  return *it;
}

/// `v` as an integer in [lo, hi]; throws kvphase::error naming `where`, an excerpt of the value
/// and the range otherwise (a fraction, a string or an out-of-range number never converts).
template <class Json>
std::int64_t json_integer(const Json& v, std::string_view where, std::int64_t lo, std::int64_t hi) {
  const std::string rule = "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!v.is_number_integer()) fail(where, detail::json_excerpt(v), rule);
  if (v.is_number_unsigned()) {
    const auto u = v.template get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi) || (lo > 0 && u < static_cast<std::uint64_t>(lo)))
      fail(where, detail::json_excerpt(v), rule);
    return static_cast<std::int64_t>(u);
  }
  const auto x = v.template get<std::int64_t>();
  if (x < lo || x > hi) fail(where, x, rule);
  return x;
}

/// `v` as an unsigned 64-bit integer (e.g. a seed); throws kvphase::error naming `where` otherwise.
template <class Json>
std::uint64_t json_unsigned(const Json& v, std::string_view where) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.template get<std::int64_t>() < 0))
    fail(where, detail::json_excerpt(v), "must be a non-negative integer below 2^64");
  return v.template get<std::uint64_t>();
}

/// `v` as a finite number in [lo, hi]; throws kvphase::error naming `where` otherwise.
template <class Json>
double json_number(const Json& v, std::string_view where, double lo, double hi) {
  if (!v.is_number()) fail(where, detail::json_excerpt(v), "must be a number");
  const double x = v.template get<double>();
  if (!(x >= lo && x <= hi)) {
    auto text = [](double d) {
      char buf[64];
      return std::string(buf, std::to_chars(buf, buf + sizeof buf, d).ptr);
    };
    fail(where, x, "must be in [" + text(lo) + ", " + text(hi) + "]");
  }
  return x;
}

/// `v` as a string; throws kvphase::error naming `where` otherwise.
template <class Json>
std::string json_string(const Json& v, std::string_view where) {
  if (!v.is_string()) fail(where, detail::json_excerpt(v), "must be a string");
  return v.template get<std::string>();
}

/// `v` as an array of at most `max_size` elements; throws kvphase::error naming `where` otherwise.
template <class Json>
const Json& json_array(const Json& v, std::string_view where, std::size_t max_size) {
  if (!v.is_array()) fail(where, detail::json_excerpt(v), "must be an array");
  if (v.size() > max_size) fail(where, v.size(), "must have at most " + std::to_string(max_size) + " elements");
  return v;
}

}  // namespace kvphase::io
