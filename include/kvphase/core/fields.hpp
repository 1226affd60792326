#pragma once
/// \file core/fields.hpp
/// One field list per config struct. A config struct lists its fields once,
///
///   template <class V> void visit_fields(V&& v) {        // and a const overload (or one
///     v("context", context);                             //  `template <class Self, class V>
///     v("dim", dim);                                     //  static void fields(Self&, V&&)`)
///     v("trials", trials, fields::not_keyed);            // does not define the draws
///   }
///
/// and that list drives everything that walks a config:
///  - print(os, cfg, "name"):   `name{context=8192, dim=64, ...}` (operator<<; for people: its
///    number format follows the stream, so it may change freely);
///  - canonical(cfg):           the stream key's text: every keyed field as `name=value;`, doubles
///    as exact hexadecimal (std::to_chars hex), enums by name, nested structs as `name.{...}`; it
///    never goes through a stream, so no printed format can change a random stream;
///  - equal(a, b):              field-by-field equality;
///  - io/fields_json.hpp:       JSON in (strict: unknown or mistyped keys are errors) and out.
/// Field types: bool, integers, double, std::string, enums with an ADL `to_string(E)` and
/// `parse(std::string_view, E&)`, std::vector of integers or doubles, and nested structs that
/// have their own visit_fields. A field flagged `not_keyed` is printed and serialised but left
/// out of canonical(): trials, threads, shard — what extends or partitions a sample. A field
/// flagged `omit_default` is left out of canonical(), equal() texts and JSON output while it holds
/// its default value (T{}): an optional field added later leaves every existing stream key and
/// output unchanged until it is used.

#include <charconv>
#include <concepts>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kvphase::fields {

/// Flags of a field.
enum flags : unsigned { none = 0, not_keyed = 1u, omit_default = 2u };

template <class T>
concept visitable = requires(T& t) { t.visit_fields([](const char*, auto&, unsigned = 0) {}); };

template <class T>
concept enum_field = std::is_enum_v<T> && requires(T e) {
  { to_string(e) } -> std::convertible_to<std::string_view>;
};

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};

template <class T>
[[nodiscard]] bool equal(const T& a, const T& b);

/// Whether v equals a default-constructed T (for fields flagged omit_default). A type without a
/// default (e.g. tasks::any_task) never counts as default, so such a field is always written.
template <class T>
[[nodiscard]] bool is_default(const T& v) {
  if constexpr (!std::is_default_constructible_v<T>) return false;
  else if constexpr (visitable<T>) return equal(v, T{});
  else return v == T{};
}

namespace detail {

/// Exact text of a double: hexadecimal (round-trips; no locale, no stream state).
inline void append_exact(std::string& out, double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::hex);
  out.append(buf, r.ptr);
}
template <class I>
void append_integer(std::string& out, I v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

template <class T>
void append_value(std::string& out, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (enum_field<T>) {
    out += to_string(v);
  } else if constexpr (std::is_integral_v<T>) {
    append_integer(out, v);
  } else if constexpr (std::is_floating_point_v<T>) {
    append_exact(out, static_cast<double>(v));
  } else if constexpr (std::is_same_v<T, std::string>) {
    append_integer(out, v.size());  // length-prefixed: any byte may appear in a name
    out += ':';
    out += v;
  } else if constexpr (is_vector<T>::value) {
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) out += ',';
      append_value(out, v[i]);
    }
    out += ']';
  } else {
    static_assert(visitable<T>, "field type has no canonical form");
  }
}

/// Fields as `name=value;` text (nested structs as `name.{...}`): the keyed ones (keyed_only, the
/// stream key) or all of them (what equal() compares).
struct text_visitor {
  std::string& out;
  bool keyed_only = true;
  template <class T>
  void operator()(const char* name, const T& v, unsigned f = none) const {
    if (keyed_only && (f & not_keyed)) return;
    if ((f & omit_default) && is_default(v)) return;
    out += name;
    if constexpr (visitable<T>) {
      out += ".{";
      const_cast<T&>(v).visit_fields(text_visitor{out, keyed_only});
      out += '}';
    } else {
      out += '=';
      append_value(out, v);
    }
    out += ';';
  }
};

template <class T>
void print_value(std::ostream& os, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (enum_field<T>) {
    os << to_string(v);
  } else if constexpr (is_vector<T>::value) {
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) os << ',';
      print_value(os, v[i]);
    }
    os << ']';
  } else if constexpr (visitable<T>) {
    os << '{';
    bool first = true;
    const_cast<T&>(v).visit_fields([&](const char* n, const auto& x, unsigned = none) {
      os << (first ? "" : ", ") << n << '=';
      first = false;
      print_value(os, x);
    });
    os << '}';
  } else {
    os << v;
  }
}

}  // namespace detail

/// Canonical, versioned text of the keyed fields of `cfg` (see the file comment), prefixed by
/// `schema` (e.g. "kvphase.sweep_config/2"): a change of schema is a deliberate change of stream.
template <visitable T>
[[nodiscard]] std::string canonical(const T& cfg, std::string_view schema = {}) {
  std::string out(schema);
  if (!out.empty()) out += '|';
  const_cast<T&>(cfg).visit_fields(detail::text_visitor{out, true});
  return out;
}

/// `name{field=value, ...}` for logs (follows the stream's number format).
template <visitable T>
std::ostream& print(std::ostream& os, const T& cfg, std::string_view name) {
  os << name;
  detail::print_value(os, cfg);
  return os;
}

/// Field-by-field equality.
template <class T>
[[nodiscard]] bool equal(const T& a, const T& b) {
  std::string sa, sb;
  const_cast<T&>(a).visit_fields(detail::text_visitor{sa, false});
  const_cast<T&>(b).visit_fields(detail::text_visitor{sb, false});
  return sa == sb;
}

}  // namespace kvphase::fields
