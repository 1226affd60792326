#pragma once
/// \file io/json.hpp
/// JSON helpers over nlohmann::json: one stable text form for outputs and a checked reader.
///
/// Output form: 2-space indentation, keys in insertion order of kvphase's writers
/// (nlohmann::ordered_json), a trailing newline. nlohmann writes doubles as the shortest text
/// that reads back to the same double, independent of the locale, so identical values give
/// identical bytes.

#include <istream>
#include <iterator>
#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvphase/core/error.hpp"

namespace kvphase::io {

/// JSON value whose objects keep insertion order (outputs list fields in a fixed, readable order).
using ordered_json = nlohmann::ordered_json;

/// The output text of a JSON value: indent 2, trailing newline.
template <class Json>
std::string json_text(const Json& j) {
  return j.dump(2) + "\n";
}

/// Parses JSON text; throws kvphase::error naming `source` on a syntax error.
inline ordered_json parse_json(std::string_view text, std::string_view source = "json") {
  ordered_json j = ordered_json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) fail(source, std::string(text.substr(0, 60)), "is not valid JSON");
  return j;
}

/// Reads a whole stream as JSON.
inline ordered_json read_json(std::istream& in, std::string_view source = "json") {
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_json(text, source);
}

/// Member `key` of object `j`, required; throws kvphase::error naming `where.key` if absent.
template <class Json>
const Json& require_member(const Json& j, std::string_view key, std::string_view where) {
  const std::string name = std::string(where) + "." + std::string(key);
  require(j.is_object(), std::string(where), j.dump().substr(0, 60), "must be a JSON object");
  const auto it = j.find(std::string(key));
  if (it == j.end()) fail(name, "(absent)", "is required");
  return *it;
}

}  // namespace kvphase::io
