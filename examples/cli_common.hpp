#pragma once
// Command-line parsing shared by kvphase's programs (kvphase-sweep, kvphase-merge, demo,
// paper_findings, train_phase, kvphase-theory): one rule for what a bad command line does.
//
// Every program:
//  - declares numeric flags through add_int / add_u64 / add_real / add_reals (or attaches
//    integer() / real() to an add_option): a value is accepted only when all of it is a decimal
//    number in the flag's range — "1x", "0x10", " 5", "-1" for an unsigned flag, an integer
//    beyond 64 bits, NaN or infinity for a real flag (unless allowed) exit 2 naming the flag,
//    the value and the rule (CLI11 2.1's own conversion accepts hex, octal, wraps "-1" to
//    2^64 − 1 for unsigned options and saturates out-of-range integers);
//  - parses through parse() (exit 0 after --help, 2 on any bad flag or value);
//  - checks its output path before the run (check_writable_file / check_writable_dir), so a
//    bad --out fails in a second, not after the whole run;
//  - runs its body through run(), one catch (const std::exception&) → message + exit 2.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include <kvphase/core/error.hpp>
#include <kvphase/sim/shard.hpp>

namespace kvphase::cli {

/// Parses argv into app. Returns the status to exit with — 0 after --help, 2 for an unknown flag
/// or a value that does not convert or validate (the message names it) — or nullopt to go on.
/// (CLI11's own exit codes for parse errors are 100 and up; every kvphase program exits 2.)
inline std::optional<int> parse(CLI::App& app, int argc, char** argv, std::string_view prog) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << prog << ": " << e.what() << "\n(run " << prog << " --help for usage)\n";
    return 2;
  } catch (const std::exception& e) {  // a flag callback that threw (e.g. kvphase::error)
    std::cerr << prog << ": " << e.what() << "\n(run " << prog << " --help for usage)\n";
    return 2;
  }
  return std::nullopt;
}

/// Runs a program's body: its return value is the exit status; any exception (kvphase::error,
/// a filesystem error, bad_alloc, ...) prints "<prog>: <what>" and exits 2.
template <class F>
int run(std::string_view prog, F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    std::cerr << prog << ": " << e.what() << "\n";
  } catch (...) {
    std::cerr << prog << ": unknown error\n";
  }
  return 2;
}

// ---- strict number parsing -------------------------------------------------------------------

/// The integer `text` spells, or nullopt: decimal digits with an optional leading '-' (signed
/// types only), nothing else — no sign '+', blanks, hex, exponent or trailing characters — and
/// within T's range.
template <class T>
[[nodiscard]] std::optional<T> strict_integer(std::string_view text) noexcept {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "strict_integer takes integer types");
  if (text.empty()) return std::nullopt;
  if constexpr (std::is_unsigned_v<T>) {
    if (text.front() == '-') return std::nullopt;
  }
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, 10);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

/// The real `text` spells, or nullopt: a decimal or scientific number (or nan/inf, which the
/// caller must reject unless it allows them) using all of `text`; out-of-range values (1e999)
/// are rejected rather than saturated.
[[nodiscard]] inline std::optional<double> strict_real(std::string_view text) noexcept {
  if (text.empty()) return std::nullopt;
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

namespace detail {
template <class T>
std::string integer_rule(T lo, T hi) {
  return "must be a decimal integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}
inline std::string real_text(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}
inline std::string real_rule(double lo, double hi, bool allow_nonfinite) {
  std::string r = "must be a ";
  r += allow_nonfinite ? "number" : "finite number";
  if (std::isfinite(lo) && std::isfinite(hi)) r += " in [" + real_text(lo) + ", " + real_text(hi) + "]";
  else if (std::isfinite(lo)) r += " >= " + real_text(lo);
  else if (std::isfinite(hi)) r += " <= " + real_text(hi);
  if (allow_nonfinite) r += " (inf allowed)";
  return r;
}
/// Canonical text of a real that CLI11's strtold reads back to the same double.
inline std::string canonical_real(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : real_text(v);
}
}  // namespace detail

/// Checked integer in [lo, hi] from `text`; throws kvphase::error naming `parameter`.
template <class T>
[[nodiscard]] T parse_integer(std::string_view text, std::string_view parameter, T lo = std::numeric_limits<T>::min(),
                              T hi = std::numeric_limits<T>::max()) {
  const auto v = strict_integer<T>(text);
  if (!v || *v < lo || *v > hi) fail(parameter, std::string(text), detail::integer_rule(lo, hi));
  return *v;
}

/// Checked real in [lo, hi] from `text` (NaN never; ±inf only when allow_nonfinite); throws
/// kvphase::error naming `parameter`.
[[nodiscard]] inline double parse_real(std::string_view text, std::string_view parameter,
                                       double lo = -std::numeric_limits<double>::infinity(),
                                       double hi = std::numeric_limits<double>::infinity(),
                                       bool allow_nonfinite = false) {
  const auto v = strict_real(text);
  const bool ok = v && !std::isnan(*v) && (allow_nonfinite || std::isfinite(*v)) && *v >= lo && *v <= hi;
  if (!ok) fail(parameter, std::string(text), detail::real_rule(lo, hi, allow_nonfinite));
  return *v;
}

/// Comma-separated reals, each checked as parse_real does (element i named parameter[i]). An
/// empty list, or an empty element ("1,,2", "1,"), is an error.
[[nodiscard]] inline std::vector<double> parse_real_list(std::string_view text, std::string_view parameter,
                                                         double lo = -std::numeric_limits<double>::infinity(),
                                                         double hi = std::numeric_limits<double>::infinity()) {
  require(!text.empty(), parameter, std::string(text), "must be a comma-separated list of numbers, not empty");
  std::vector<double> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    out.push_back(parse_real(item, std::string(parameter) + "[" + std::to_string(out.size()) + "]", lo, hi));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

/// Exactly one of `allowed`, or kvphase::error naming `parameter` and the choices.
inline std::string parse_choice(const std::string& text, std::string_view parameter,
                                       const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (text == a) return a;
  std::string rule = "must be one of";
  for (std::size_t i = 0; i < allowed.size(); ++i) rule += (i ? ", " : " ") + allowed[i];
  fail(parameter, text, rule);
}

// ---- CLI11 validators and option helpers ------------------------------------------------------

/// Validator of a decimal integer in [lo, hi]; rewrites the accepted text canonically, so CLI11's
/// own conversion (strtoll, base 0) reads the same number ("010" is 10, never octal 8).
template <class T>
CLI::Validator integer(T lo, T hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const auto v = strict_integer<T>(s);
        if (!v || *v < lo || *v > hi) return "value " + s + " " + detail::integer_rule(lo, hi);
        s = std::to_string(*v);
        return {};
      },
      "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", "kvphase integer");
}

/// Validator of a real in [lo, hi]: never NaN; ±inf only when allow_nonfinite.
inline CLI::Validator real(double lo, double hi, bool allow_nonfinite = false) {
  return CLI::Validator(
      [lo, hi, allow_nonfinite](std::string& s) -> std::string {
        const auto v = strict_real(s);
        const bool ok = v && !std::isnan(*v) && (allow_nonfinite || std::isfinite(*v)) && *v >= lo && *v <= hi;
        if (!ok) return "value " + s + " " + detail::real_rule(lo, hi, allow_nonfinite);
        s = detail::canonical_real(*v);
        return {};
      },
      detail::real_rule(lo, hi, allow_nonfinite).substr(10), "kvphase real");  // drop "must be a "
}

/// An integer flag whose values must lie in [lo, hi]. The variable's initial value is the
/// default (shown in --help) and may lie outside the range as a sentinel ("-1: the preset's").
/// lo and hi take T from `var` (add_int(app, "--context", o.context, 0, 1 << 30, ...) compiles for
/// any integer type of o.context).
template <class T>
CLI::Option* add_int(CLI::App& app, const std::string& name, T& var, std::type_identity_t<T> lo,
                     std::type_identity_t<T> hi, const std::string& help) {
  return app.add_option(name, var, help)->transform(integer<T>(lo, hi))->capture_default_str();
}

/// An unsigned 64-bit flag (seeds): decimal, no sign, < 2^64.
inline CLI::Option* add_u64(CLI::App& app, const std::string& name, std::uint64_t& var, const std::string& help) {
  return add_int<std::uint64_t>(app, name, var, 0, std::numeric_limits<std::uint64_t>::max(), help);
}

/// A real flag whose values must lie in [lo, hi] and be finite (NaN never accepted; ±inf only
/// when allow_nonfinite).
inline CLI::Option* add_real(CLI::App& app, const std::string& name, double& var, double lo, double hi,
                             const std::string& help, bool allow_nonfinite = false) {
  return app.add_option(name, var, help)->transform(real(lo, hi, allow_nonfinite))->capture_default_str();
}

/// A comma-separated list of finite reals, each in [lo, hi].
inline CLI::Option* add_reals(CLI::App& app, const std::string& name, std::vector<double>& var, double lo, double hi,
                              const std::string& help) {
  return app.add_option(name, var, help)->delimiter(',')->transform(real(lo, hi));
}

// ---- shards -----------------------------------------------------------------------------------

/// The shard a --shard value names: "i/N", or "auto" for the launcher's environment (Slurm job
/// array, srun step, mpirun: sim::shard_from_environment, which names what it found in
/// launcher and job, both empty for "i/N"). Throws kvphase::error naming `parameter`.
inline sim::launched_shard resolve_shard(const std::string& text, std::string_view parameter = "shard") {
  if (text == "auto") return sim::shard_from_environment([](const char* name) { return std::getenv(name); }, parameter);
  return {sim::shard_spec::parse(text, parameter), "", ""};
}

/// The output path of shard s: "{index}" and "{count}" in `pattern` replaced by the shard's
/// index and count. A launcher that starts several processes (--shard auto with N > 1) needs
/// "{index}" in a non-empty pattern, or every process would write the same file.
inline std::string shard_path(const std::string& pattern, const sim::launched_shard& s, std::string_view parameter = "out") {
  std::string out = pattern;
  const bool has_index = out.find("{index}") != std::string::npos;
  if (!s.launcher.empty() && s.shard.count > 1 && !out.empty())
    require(has_index, parameter, pattern,
            "must contain {index} when --shard auto runs " + std::to_string(s.shard.count) + " processes (" + s.launcher +
                "), e.g. run.{index}-of-{count}.csv");
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"{index}", std::to_string(s.shard.index)},
                                   {"{count}", std::to_string(s.shard.count)}})
    for (auto at = out.find(key); at != std::string::npos; at = out.find(key, at + value.size()))
      out.replace(at, key.size(), value);
  return out;
}

// ---- output paths -----------------------------------------------------------------------------

/// Checks, before a run, that the file `path` can be written: its directory exists and the file
/// can be opened for writing (an existing file is opened for appending, so nothing is lost; a
/// new one is created and removed again). Throws kvphase::error naming `parameter`.
inline void check_writable_file(const std::string& path, std::string_view parameter = "out") {
  namespace fs = std::filesystem;
  require(!path.empty(), parameter, path, "must name a file");
  std::error_code ec;
  const fs::path p(path);
  require(!fs::is_directory(p, ec), parameter, path, "is a directory, not a file");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  require(fs::is_directory(dir, ec), parameter, path, "its directory " + dir.string() + " does not exist");
  const bool existed = fs::exists(p, ec);
  {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    require(static_cast<bool>(f), parameter, path, "cannot be opened for writing");
  }
  if (!existed) fs::remove(p, ec);
}

/// Checks, before a run, that files can be written into the directory `dir`: creates it (and its
/// parents) if needed, then creates and removes a probe file in it. Throws kvphase::error naming
/// `parameter`.
inline void check_writable_dir(const std::string& dir, std::string_view parameter = "out") {
  namespace fs = std::filesystem;
  require(!dir.empty(), parameter, dir, "must name a directory");
  std::error_code ec;
  fs::create_directories(dir, ec);
  require(!ec, parameter, dir, "cannot be created as a directory: " + ec.message());
  require(fs::is_directory(dir, ec), parameter, dir, "is not a directory");
  const fs::path probe = fs::path(dir) / ".kvphase-write-check";
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    require(static_cast<bool>(f), parameter, dir, "is not writable (cannot create a file in it)");
  }
  fs::remove(probe, ec);
}

}  // namespace kvphase::cli
