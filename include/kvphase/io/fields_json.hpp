#pragma once
/// \file io/fields_json.hpp
/// JSON in and out of any config struct with a field list (core/fields.hpp).
///
///  - fields_to_json(cfg): an object with every field (keyed or not) in list order; enums by
///    name, nested structs as objects, doubles in nlohmann's shortest round-trip form.
///  - fields_from_json(j, cfg, where): strict reader. Members absent from j keep cfg's value
///    (so a file names only what differs from the defaults); an unknown member, a value of the
///    wrong type, an integer out of the field's range, or an unknown enum name is a
///    kvphase::error naming `where.member`, the value and the rule.

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"

namespace kvphase::io {

namespace detail {

template <class T>
nlohmann::ordered_json field_json(const T& v) {
  if constexpr (fields::enum_field<T>) {
    return std::string(to_string(v));
  } else if constexpr (fields::visitable<T>) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    const_cast<T&>(v).visit_fields([&](const char* n, const auto& x, unsigned f = fields::none) {
      if (!((f & fields::omit_default) && fields::is_default(x))) j[n] = field_json(x);
    });
    return j;
  } else if constexpr (fields::is_vector<T>::value) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const auto& x : v) j.push_back(field_json(x));
    return j;
  } else {
    return v;
  }
}

inline std::string short_dump(const nlohmann::ordered_json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

template <class T>
void field_from_json(const nlohmann::ordered_json& j, T& out, const std::string& name);

template <class T>
void struct_from_json(const nlohmann::ordered_json& j, T& out, const std::string& where) {
  require(j.is_object(), where, short_dump(j), "must be a JSON object");
  std::set<std::string> known;
  out.visit_fields([&](const char* n, auto& x, unsigned = fields::none) {
    known.insert(n);
    const auto it = j.find(n);
    if (it != j.end()) field_from_json(*it, x, where.empty() ? std::string(n) : where + "." + n);
  });
  for (auto it = j.begin(); it != j.end(); ++it)
    require(known.contains(it.key()), where.empty() ? it.key() : where + "." + it.key(), short_dump(it.value()),
            "is not a field of this configuration");
}

template <class T>
void field_from_json(const nlohmann::ordered_json& j, T& out, const std::string& name) {
  if constexpr (std::is_same_v<T, bool>) {
    require(j.is_boolean(), name, short_dump(j), "must be true or false");
    out = j.get<bool>();
  } else if constexpr (fields::enum_field<T>) {
    require(j.is_string(), name, short_dump(j), "must be a string (an enumerator name)");
    parse(j.get<std::string>(), out);  // throws kvphase::error naming the accepted names
  } else if constexpr (std::is_integral_v<T>) {
    require(j.is_number_integer(), name, short_dump(j), "must be an integer");
    if (j.is_number_unsigned()) {
      const auto u = j.get<std::uint64_t>();
      require(u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max()), name, short_dump(j),
              "is out of range for this field");
      out = static_cast<T>(u);
    } else {
      const auto s = j.get<std::int64_t>();
      require(std::is_signed_v<T> && s >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                  (std::is_unsigned_v<T> || s <= static_cast<std::int64_t>(std::numeric_limits<T>::max())),
              name, short_dump(j), "is out of range for this field");
      out = static_cast<T>(s);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    require(j.is_number(), name, short_dump(j), "must be a number");
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    require(j.is_string(), name, short_dump(j), "must be a string");
    out = j.get<std::string>();
  } else if constexpr (fields::is_vector<T>::value) {
    require(j.is_array(), name, short_dump(j), "must be an array");
    T v;
    v.reserve(j.size());
    for (std::size_t i = 0; i < j.size(); ++i) {
      typename T::value_type x{};
      field_from_json(j[i], x, name + "[" + std::to_string(i) + "]");
      v.push_back(x);
    }
    out = std::move(v);
  } else {
    static_assert(fields::visitable<T>, "field type has no JSON form");
    struct_from_json(j, out, name);
  }
}

}  // namespace detail

/// Every field of cfg as a JSON object (list order).
template <fields::visitable T>
[[nodiscard]] nlohmann::ordered_json fields_to_json(const T& cfg) {
  return detail::field_json(cfg);
}

/// Sets the fields of cfg named in j (strict; see the file comment). `where` prefixes the
/// names in error messages (e.g. "config").
template <fields::visitable T>
void fields_from_json(const nlohmann::ordered_json& j, T& cfg, const std::string& where = {}) {
  detail::struct_from_json(j, cfg, where);
}

}  // namespace kvphase::io
