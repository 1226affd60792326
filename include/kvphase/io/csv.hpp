#pragma once
/// \file io/csv.hpp
/// A small CSV writer and reader (RFC 4180 quoting) with '#' comment lines for provenance.
///
/// Writing: fields are quoted when they contain a comma, quote, CR or LF, start with '#' or
/// with/after whitespace; quotes are doubled. Lines end with "\n". Numbers are formatted with
/// std::to_chars (locale independent, exact: the same double always gives the same bytes):
/// format_fixed(x, digits) for fixed-point, format_shortest(x) for the shortest text that reads
/// back as x. −0 is written as 0; NaN and ±∞ as nan, inf, -inf.
///
/// Reading: a leading UTF-8 byte order mark is skipped (the same rule as the JSON reader, see
/// io/text.hpp); lines starting with '#' (outside quoted fields) are comments and are returned
/// in order; blank lines are skipped; the first other record is the header, whose names must
/// be distinct; every row must have as many fields as the header (kvphase::error naming the
/// line otherwise). CRLF is accepted. Error messages quote at most a short excerpt of a field.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <istream>
#include <iterator>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/io/text.hpp"

namespace kvphase::io {

namespace detail {
inline std::string nonfinite_text(double v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}
}  // namespace detail

/// Fixed-point text with `digits` digits after the point (0 ≤ digits ≤ 30), via std::to_chars.
inline std::string format_fixed(double v, int digits = 10) {
  require(digits >= 0 && digits <= 30, "digits", digits, "must lie in [0, 30]");
  if (!std::isfinite(v)) return detail::nonfinite_text(v);
  if (v == 0.0) v = 0.0;  // −0 → 0
  char buf[400];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, digits);
  std::string s(buf, r.ptr);
  // A tiny negative value rounds to "-0.000…": write it without the sign.
  if (!s.empty() && s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

/// Shortest text that parses back to exactly v (std::to_chars without precision).
inline std::string format_shortest(double v) {
  if (!std::isfinite(v)) return detail::nonfinite_text(v);
  if (v == 0.0) v = 0.0;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// Parses a whole field as a double (std::from_chars; also nan, inf, -inf). Throws naming `what`.
inline double parse_double(std::string_view s, std::string_view what = "field") {
  if (s == "nan") return std::nan("");
  if (s == "inf") return HUGE_VAL;
  if (s == "-inf") return -HUGE_VAL;
  double v = 0.0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc{} || r.ptr != s.data() + s.size()) fail(what, detail::excerpt(s), "must be a number");
  return v;
}

/// Parses a whole field as a signed 64-bit integer. Throws naming `what`.
inline std::int64_t parse_int(std::string_view s, std::string_view what = "field") {
  std::int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc{} || r.ptr != s.data() + s.size() || s.empty())
    fail(what, detail::excerpt(s), "must be an integer in [-2^63, 2^63)");
  return v;
}

/// The field as written to CSV (quoted when needed).
inline std::string csv_escape(std::string_view field) {
  const bool quote = field.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!field.empty() && (field.front() == '#' || field.front() == ' ' || field.front() == '\t' ||
                                         field.back() == ' ' || field.back() == '\t'));
  if (!quote) return std::string(field);
  std::string s = "\"";
  for (char c : field) {
    if (c == '"') s += '"';
    s += c;
  }
  s += '"';
  return s;
}

/// Writes comment lines and rows to a stream.
class csv_writer {
 public:
  explicit csv_writer(std::ostream& os) : os_(&os) {}

  /// Writes `text` as comment lines: each line of it prefixed with "# " (a text that already
  /// starts every line with "#" is written as is).
  void comment(std::string_view text) {
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view line = text.substr(start, end - start);
      if (!(end == text.size() && line.empty() && start > 0)) {
        if (line.starts_with("#")) *os_ << line << '\n';
        else *os_ << "# " << line << '\n';
      }
      start = end + 1;
    }
  }

  /// Writes one record.
  void row(const std::vector<std::string>& fields) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i) *os_ << ',';
      *os_ << csv_escape(fields[i]);
    }
    *os_ << '\n';
  }

 private:
  std::ostream* os_;
};

/// A parsed CSV: comments (full lines, including the '#'), header and rows.
struct csv_table {
  std::vector<std::string> comments;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> row_lines;  ///< 1-based line where each row starts

  /// Index of the header column `name`; throws kvphase::error if absent.
  [[nodiscard]] std::size_t column(std::string_view name) const {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    fail("csv column", detail::excerpt(name), "is missing from the header");
  }
  [[nodiscard]] bool has_column(std::string_view name) const {
    for (const auto& h : header)
      if (h == name) return true;
    return false;
  }
};

/// Parses CSV text (see the file comment). `source` names the input in error messages.
inline csv_table parse_csv(std::string_view text, std::string_view source = "csv") {
  csv_table t;
  text = detail::strip_bom(text);
  std::size_t i = 0, line = 1;
  bool have_header = false;
  const std::string src(source);
  while (i < text.size()) {
    // Comment or blank line at the start of a record.
    if (text[i] == '#') {
      std::size_t end = text.find('\n', i);
      if (end == std::string_view::npos) end = text.size();
      std::string c(text.substr(i, end - i));
      if (!c.empty() && c.back() == '\r') c.pop_back();
      t.comments.push_back(std::move(c));
      i = end + 1;
      ++line;
      continue;
    }
    if (text[i] == '\n' || (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      i += text[i] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    const std::size_t record_line = line;
    std::vector<std::string> fields;
    std::string field;
    bool in_quotes = false, was_quoted = false, done = false;
    while (!done) {
      if (i >= text.size()) {
        if (in_quotes) fail(src + " line", record_line, "has an unterminated quoted field");
        fields.push_back(std::move(field));
        break;
      }
      const char c = text[i];
      if (in_quotes) {
        if (c == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            field += '"';
            i += 2;
          } else {
            in_quotes = false;
            ++i;
          }
        } else {
          if (c == '\n') ++line;
          field += c;
          ++i;
        }
        continue;
      }
      if (c == '"' && field.empty() && !was_quoted) {
        in_quotes = was_quoted = true;
        ++i;
      } else if (c == ',') {
        fields.push_back(std::move(field));
        field.clear();
        was_quoted = false;
        ++i;
      } else if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
        fields.push_back(std::move(field));
        i += c == '\r' ? 2 : 1;
        ++line;
        done = true;
      } else if (was_quoted) {
        fail(src + " line", record_line, "has text after a closing quote");
      } else {
        field += c;
        ++i;
      }
    }
    if (!have_header) {
      std::map<std::string_view, std::size_t> names;
      for (std::size_t a = 0; a < fields.size(); ++a) {
        const auto [it, fresh] = names.emplace(fields[a], a);
        if (!fresh)
          fail(src + " header column " + std::to_string(a + 1), detail::excerpt(fields[a]),
               "repeats column " + std::to_string(it->second + 1) + " (header names must be distinct)");
      }
      t.header = std::move(fields);
      have_header = true;
    } else {
      if (fields.size() != t.header.size())
        fail(src + " line", record_line,
             "has " + std::to_string(fields.size()) + " fields, the header has " + std::to_string(t.header.size()));
      t.rows.push_back(std::move(fields));
      t.row_lines.push_back(record_line);
    }
  }
  return t;
}

/// Reads a whole stream and parses it.
inline csv_table read_csv(std::istream& in, std::string_view source = "csv") {
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_csv(text, source);
}

/// Reads a whole file as text; throws kvphase::error naming the path if it cannot be read.
inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(in.good(), "file", path, "cannot be opened for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kvphase::io
