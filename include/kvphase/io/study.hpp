#pragma once
/// \file io/study.hpp
/// A study file: a grid of sweep configurations (presets × strides × contexts × tasks …) as JSON,
/// run unit by unit (`kvphase-sweep --grid study.json --unit K`) or all at once by one job array
/// (`--shard auto`: array task t runs unit ⌊t/N⌋, shard t mod N of N), and merged into one tidy
/// table per study (`kvphase-merge --study study.json`).
///
///     {
///       "study": "stride-context",                 // name: 1-64 of [A-Za-z0-9._-]
///       "shards": 2,                               // shards per unit, optional (default 1)
///       "fixed": {"task": "needle", "trials": 400},  // flags every unit gets, optional
///       "axes": {"preset": ["mean", "gated"],      // the grid: first axis varies slowest
///                "stride": [2, 4, 8], "context": [1024, 2048]}
///     }
///
/// Keys of "fixed" and "axes" are kvphase-sweep flag names without "--" (the program checks
/// that each is one of its flags). A value is a string, an integer, a finite number, an array of
/// numbers (written comma-separated, e.g. --gate-bias 3,0,0,0) or a boolean (true: the flag is
/// given, false: it is not). Run-time flags (shard, unit, out, out-dir, format, grid, list,
/// quiet, threads) are not study keys. Everything else is refused with kvphase::error naming the file,
/// the key and the value: an unknown top-level key, a duplicate key, an empty axis, a repeated
/// value in an axis, a key both fixed and an axis, more than 2^20 units or array tasks.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvphase/core/error.hpp"
#include "kvphase/io/csv.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/text.hpp"

namespace kvphase::io {

namespace detail {
/// Internal value of a flag set to false in a study file (left out of the unit's flags).
inline const std::string study_false = std::string(1, '\x01') + "false";
}  // namespace detail

/// One flag of a unit: its name (no "--") and its value (nullopt: a flag without value).
struct study_flag {
  std::string key;
  std::optional<std::string> value;
  friend bool operator==(const study_flag&, const study_flag&) = default;
};

struct study_axis {
  std::string key;
  std::vector<std::optional<std::string>> values;
};

struct study {
  std::string name;
  std::int64_t shards = 1;
  std::vector<study_flag> fixed;
  std::vector<study_axis> axes;
  std::string hash;  ///< 16 hex digits of FNV-1a over the canonical JSON of the file's content

  /// Number of units (configurations): the product of the axis sizes (1 without axes).
  [[nodiscard]] std::int64_t units() const {
    std::int64_t n = 1;
    for (const auto& a : axes) n *= static_cast<std::int64_t>(a.values.size());
    return n;
  }
  /// Array tasks for the whole study: units() × shards.
  [[nodiscard]] std::int64_t tasks() const { return units() * shards; }

  /// The flags of unit k (fixed first, then one per axis, in file order); throws unless
  /// 0 <= k < units(). Flags whose boolean value is false are left out.
  [[nodiscard]] std::vector<study_flag> unit_flags(std::int64_t k) const {
    std::vector<study_flag> out = fixed;
    for (auto& f : axis_flags(k)) out.push_back(std::move(f));
    std::erase_if(out, [](const study_flag& f) { return f.value && *f.value == detail::study_false; });
    return out;
  }
  /// "preset=mean stride=4" (the axis values of unit k; "all" without axes).
  [[nodiscard]] std::string unit_label(std::int64_t k) const {
    std::string s;
    for (const auto& f : axis_flags(k)) {
      if (!s.empty()) s += ' ';
      s += f.key + "=" + (!f.value ? std::string("true") : *f.value == detail::study_false ? std::string("false") : *f.value);
    }
    return s.empty() ? "all" : s;
  }

 private:
  /// One flag per axis for unit k: mixed-radix digits of k, the first axis the most significant.
  [[nodiscard]] std::vector<study_flag> axis_flags(std::int64_t k) const {
    require(k >= 0 && k < units(), "unit", k, "must be in [0, " + std::to_string(units()) + ") (units of study " + name + ")");
    std::vector<study_flag> out;
    std::int64_t rest = k, radix = units();
    for (const auto& a : axes) {
      radix /= static_cast<std::int64_t>(a.values.size());
      out.push_back({a.key, a.values[static_cast<std::size_t>(rest / radix)]});
      rest %= radix;
    }
    return out;
  }
};

namespace detail {
inline bool study_key_ok(std::string_view k) {
  if (k.empty() || k.size() > 32 || k.front() < 'a' || k.front() > 'z') return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}
/// Text of one study value (see the file comment); study_false marks a false boolean.
inline std::optional<std::string> study_value(const ordered_json& v, const std::string& where) {
  if (v.is_boolean()) return v.get<bool>() ? std::nullopt : std::optional<std::string>(study_false);
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 256 || invalid_utf8_at(s) != std::string::npos || s.front() == '-')
      fail(where, json_excerpt(v), "must be a non-empty string of at most 256 UTF-8 bytes, not starting with '-'");
    for (char c : s)
      if (static_cast<unsigned char>(c) < 0x20) fail(where, json_excerpt(v), "must not contain control characters");
    return s;
  }
  if (v.is_number_integer()) return v.dump();
  if (v.is_number_float()) {
    if (!std::isfinite(v.get<double>())) fail(where, json_excerpt(v), "must be finite");
    return v.dump();
  }
  if (v.is_array()) {
    if (v.empty() || v.size() > 4096) fail(where, json_excerpt(v), "must hold 1 to 4096 numbers");
    std::string s;
    for (const auto& e : v) {
      if (!e.is_number()) fail(where, json_excerpt(v), "must be an array of numbers only");
      if (!s.empty()) s += ',';
      s += e.dump();
    }
    return s;
  }
  fail(where, json_excerpt(v), "must be a string, a number, an array of numbers or a boolean");
}
inline bool study_reserved(std::string_view k) {
  for (const auto r : {"shard", "unit", "out", "out-dir", "format", "grid", "list", "quiet", "help", "threads"})
    if (k == r) return true;
  return false;
}
}  // namespace detail

/// Parses a study file's text (see the file comment); `source` (the file name) starts every
/// error message.
inline study parse_study(std::string_view text, std::string_view source = "study") {
  const std::string src(source);
  require(text.size() <= (std::size_t(1) << 20), src, std::to_string(text.size()) + " bytes", "must be at most 1 MiB");
  const ordered_json j = parse_json_as<ordered_json>(text, src);
  // nlohmann keeps the last of two equal keys: find duplicates in a second, callback pass
  {
    std::vector<std::vector<std::string>> keys;
    std::string path;
    const auto cb = [&](int, ordered_json::parse_event_t e, ordered_json& parsed) {
      if (e == ordered_json::parse_event_t::object_start) keys.emplace_back();
      else if (e == ordered_json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      else if (e == ordered_json::parse_event_t::key && !keys.empty()) {
        const auto k = parsed.get<std::string>();
        for (const auto& seen : keys.back())
          if (seen == k) fail(src + " key " + detail::excerpt(k), "(twice)", "must appear once in its object");
        keys.back().push_back(k);
      }
      return true;
    };
    const auto body = detail::strip_bom(text);
    [[maybe_unused]] const auto again = ordered_json::parse(body.begin(), body.end(), cb);
  }
  if (!j.is_object()) fail(src, detail::json_excerpt(j), "must be a JSON object with \"study\" and \"axes\"");
  study s;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "study" && it.key() != "shards" && it.key() != "fixed" && it.key() != "axes")
      fail(src + " key " + detail::excerpt(it.key()), "(unknown)", "must be one of study, shards, fixed, axes");
  const auto& name = require_member(j, "study", src);
  {
    const bool ok = name.is_string() && !name.get_ref<const std::string&>().empty() &&
                    name.get_ref<const std::string&>().size() <= 64 && [&] {
                      for (char c : name.get_ref<const std::string&>())
                        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                              c == '_' || c == '-'))
                          return false;
                      return true;
                    }();
    if (!ok) fail(src + ".study", detail::json_excerpt(name), "must be a name of 1 to 64 characters [A-Za-z0-9._-]");
    s.name = name.get<std::string>();
  }
  if (const auto it = j.find("shards"); it != j.end()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > (std::int64_t(1) << 20))
      fail(src + ".shards", detail::json_excerpt(*it), "must be an integer in [1, 2^20]");
    s.shards = it->get<std::int64_t>();
  }
  auto check_key = [&](const std::string& where, const std::string& k) {
    if (!detail::study_key_ok(k))
      fail(where, detail::excerpt(k), "must be a flag name without '--': [a-z][a-z0-9-]*, at most 32 characters");
    if (detail::study_reserved(k))
      fail(where, k, "is a run-time flag, not part of a study (shard, unit, out, out-dir, format, grid, list, quiet, threads)");
  };
  if (const auto it = j.find("fixed"); it != j.end()) {
    if (!it->is_object()) fail(src + ".fixed", detail::json_excerpt(*it), "must be an object of flag: value");
    for (auto f = it->begin(); f != it->end(); ++f) {
      const std::string where = src + ".fixed." + detail::excerpt(f.key());
      check_key(src + ".fixed key", f.key());
      s.fixed.push_back({f.key(), detail::study_value(*f, where)});
    }
  }
  const auto& axes = require_member(j, "axes", src);
  if (!axes.is_object()) fail(src + ".axes", detail::json_excerpt(axes), "must be an object of flag: [values]");
  std::int64_t units = 1;
  for (auto a = axes.begin(); a != axes.end(); ++a) {
    const std::string where = src + ".axes." + detail::excerpt(a.key());
    check_key(src + ".axes key", a.key());
    for (const auto& f : s.fixed)
      if (f.key == a.key()) fail(where, "(also in fixed)", "must be either fixed or an axis, not both");
    if (!a->is_array() || a->empty()) fail(where, detail::json_excerpt(*a), "must be a non-empty array of values");
    study_axis ax{a.key(), {}};
    for (std::size_t i = 0; i < a->size(); ++i) {
      auto v = detail::study_value((*a)[i], where + "[" + std::to_string(i) + "]");
      for (const auto& seen : ax.values)
        if (seen == v) fail(where + "[" + std::to_string(i) + "]", detail::json_excerpt((*a)[i]), "repeats an earlier value of the axis");
      ax.values.push_back(std::move(v));
    }
    units *= static_cast<std::int64_t>(ax.values.size());
    if (units > (std::int64_t(1) << 20)) fail(where, a->size(), "makes more than 2^20 units");
    s.axes.push_back(std::move(ax));
  }
  if (units * s.shards > (std::int64_t(1) << 20))
    fail(src + ".shards", s.shards, std::to_string(units) + " units x shards must be at most 2^20 array tasks");
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : j.dump()) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  s.hash = buf;
  return s;
}

/// Unit and shard of array task t of a study: unit ⌊t/N⌋, shard t mod N of N (N = shards).
/// `count` is the number of array tasks the launcher started; it must be s.tasks().
inline std::pair<std::int64_t, std::int64_t> study_task(const study& s, std::int64_t t, std::int64_t count,
                                                        std::string_view parameter = "shard") {
  require(count == s.tasks(), parameter, std::to_string(t) + "/" + std::to_string(count),
          "must count the study's " + std::to_string(s.units()) + " units x " + std::to_string(s.shards) +
              " shards = " + std::to_string(s.tasks()) + " tasks (sbatch --array=0-" + std::to_string(s.tasks() - 1) +
              ", or give --unit K)");
  require(t >= 0 && t < count, parameter, t, "must be in [0, " + std::to_string(count) + ")");
  return {t / s.shards, t % s.shards};
}

/// One tidy CSV (no comment lines) of the CSV outputs of several units: the union of their
/// columns in order of first appearance (a column a unit lacks, e.g. a field of another task, is
/// empty in its rows), then a "unit" column.
inline std::string join_study_tables(const std::vector<std::pair<std::int64_t, std::string>>& tables) {
  std::vector<csv_table> parsed;
  std::vector<std::string> header;
  for (const auto& [unit, text] : tables) {
    parsed.push_back(parse_csv(text, "unit " + std::to_string(unit)));
    for (const auto& h : parsed.back().header)
      if (h != "unit" && std::find(header.begin(), header.end(), h) == header.end()) header.push_back(h);
  }
  std::string out;
  for (const auto& h : header) out += csv_escape(h) + ",";
  out += "unit\n";
  for (std::size_t t = 0; t < parsed.size(); ++t) {
    const auto& tab = parsed[t];
    std::vector<std::size_t> at;  // column of tab for each header column (npos: absent)
    for (const auto& h : header) {
      const auto it = std::find(tab.header.begin(), tab.header.end(), h);
      at.push_back(it == tab.header.end() ? std::string::npos : static_cast<std::size_t>(it - tab.header.begin()));
    }
    for (const auto& row : tab.rows) {
      for (std::size_t c = 0; c < header.size(); ++c)
        out += (at[c] != std::string::npos && at[c] < row.size() ? csv_escape(row[at[c]]) : std::string()) + ",";
      out += std::to_string(tables[t].first) + "\n";
    }
  }
  return out;
}

}  // namespace kvphase::io
