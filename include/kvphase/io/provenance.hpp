#pragma once
/// \file io/provenance.hpp
/// What produced an output file: library version, git hash, compiler, flags, build type, SIMD
/// ISA (compiled default and best available at run time), seed, thread count, shard, UTC date,
/// command line and the full run configuration as a JSON object.
///
/// Every CSV and JSON output of kvphase carries one: JSON as the "provenance" object (to_json),
/// CSV as leading comment lines starting with "# " (to_csv_comment), which read_csv() returns
/// and provenance_from_csv_comments() parses back.
///
/// Build-time values come from the generated header kvphase_build_info.hpp when
/// KVPHASE_HAVE_BUILD_INFO is defined (kvphase's own programs; see cmake/kvphase_provenance.cmake).
/// A library user without it gets git hash / flags / build type "unknown" and the compiler
/// from __VERSION__.

#include <array>
#include <cstdint>
#include <ctime>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <xsimd/xsimd.hpp>

#include "kvphase/core/error.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/text.hpp"
#include "kvphase/sim/shard.hpp"
#include "kvphase/version.hpp"

#if defined(KVPHASE_HAVE_BUILD_INFO) && __has_include(<kvphase_build_info.hpp>)
#include <kvphase_build_info.hpp>
#endif

namespace kvphase::io {

namespace detail {
#if defined(KVPHASE_BUILD_GIT_HASH)
inline constexpr const char* build_git_hash = KVPHASE_BUILD_GIT_HASH;
inline constexpr const char* build_compiler = KVPHASE_BUILD_COMPILER;
inline constexpr const char* build_flags = KVPHASE_BUILD_FLAGS;
inline constexpr const char* build_type = KVPHASE_BUILD_TYPE;
#else
inline constexpr const char* build_git_hash = "unknown";
#if defined(__VERSION__)
#if defined(__clang__)
inline constexpr const char* build_compiler = "clang " __VERSION__;
#elif defined(__GNUC__)
inline constexpr const char* build_compiler = "GNU " __VERSION__;
#else
inline constexpr const char* build_compiler = __VERSION__;
#endif
#else
inline constexpr const char* build_compiler = "unknown";
#endif
inline constexpr const char* build_flags = "unknown";
inline constexpr const char* build_type = "unknown";
#endif

template <class... Archs>
std::string arch_name_of_version(unsigned version, xsimd::arch_list<Archs...>) {
  std::string name = "none";
  bool found = false;
  // First match in list order (the list is ordered best first).
  ((!found && Archs::version() == version ? (name = Archs::name(), found = true) : false), ...);
  return name;
}
}  // namespace detail

/// Name of the SIMD architecture kvphase kernels compile to by default (xsimd::default_arch).
inline std::string compiled_isa() { return xsimd::default_arch::name(); }

/// Name of the best SIMD architecture the running CPU supports (xsimd runtime detection).
inline std::string runtime_isa() {
  return detail::arch_name_of_version(xsimd::available_architectures().best, xsimd::all_architectures{});
}

/// Current UTC time as ISO 8601, e.g. "2026-11-29T21:04:05Z".
inline std::string utc_now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> buf{};
  const std::size_t n = std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf.data(), n);
}

/// Joins argv into one line, quoting arguments that contain spaces or quotes.
inline std::string join_command_line(int argc, const char* const* argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    if (i) out += ' ';
    std::string arg(argv[i] ? argv[i] : "");
    // bytes that are not UTF-8 (a path may hold any) are recorded as '?': outputs stay valid JSON
    for (std::size_t k = detail::invalid_utf8_at(arg); k != std::string::npos; k = detail::invalid_utf8_at(arg)) arg[k] = '?';
    const std::string_view a = arg;
    if (a.empty() || a.find_first_of(" \t\"'") != std::string_view::npos) {
      out += '\'';
      for (char c : a) {
        if (c == '\'') out += "'\\''";
        else out += c;
      }
      out += '\'';
    } else {
      out += a;
    }
  }
  return out;
}

/// Largest shard count a provenance may carry (the sweep's own limit, sim::shard_spec).
inline constexpr std::int64_t max_shard_count = sim::max_shard_count;
/// Largest thread count a provenance may carry.
inline constexpr std::int64_t max_threads = 65536;

/// Provenance of one output. Fields without a value read "unknown" (strings) or 0.
struct provenance {
  std::string version = KVPHASE_VERSION_STRING;
  std::string git_hash = detail::build_git_hash;
  std::string compiler = detail::build_compiler;
  std::string flags = detail::build_flags;
  std::string build_type = detail::build_type;
  std::string isa_compiled = compiled_isa();   ///< xsimd::default_arch::name()
  std::string isa_runtime = runtime_isa();     ///< best arch of this CPU
  std::uint64_t seed = 0;
  int threads = 1;
  std::int64_t shard_index = 0;  ///< 0-based shard i of shard_count (i/N); 0/1 = whole run
  std::int64_t shard_count = 1;
  std::int64_t merged_from = 0;  ///< number of shards merged into this output (0 = not merged)
  std::string launcher;  ///< what set the shard: "" (the command line), "slurm-array", "openmpi", ...
  std::string job;       ///< the launcher's job ids ("SLURM_ARRAY_JOB_ID=41 SLURM_ARRAY_TASK_ID=3")
  std::string date = utc_now_iso8601();
  std::string command_line;
  nlohmann::json config = nlohmann::json::object();  ///< full run configuration

  /// Throws kvphase::error unless 1 ≤ shard_count ≤ max_shard_count, 0 ≤ shard_index <
  /// shard_count, 0 ≤ merged_from ≤ max_shard_count, 1 ≤ threads ≤ max_threads and config is a
  /// JSON object.
  void validate() const {
    require(shard_count >= 1 && shard_count <= max_shard_count, "provenance.shard_count", shard_count,
            "must be in [1, 2^20]");
    if (shard_index < 0 || shard_index >= shard_count)
      fail("provenance.shard_index", shard_index,
           "must satisfy 0 <= shard_index < shard_count = " + std::to_string(shard_count));
    require(merged_from >= 0 && merged_from <= max_shard_count, "provenance.merged_from", merged_from,
            "must be in [0, 2^20]");
    require(threads >= 1 && threads <= max_threads, "provenance.threads", threads, "must be in [1, 65536]");
    if (!config.is_object()) fail("provenance.config", detail::json_excerpt(config), "must be a JSON object");
  }

  /// "i/N".
  [[nodiscard]] std::string shard_text() const {
    return std::to_string(shard_index) + "/" + std::to_string(shard_count);
  }
};

/// Provenance for a run of a program: build values filled in, date = now, command line from
/// argv (pass argc = 0 for none), the given seed, threads and configuration.
inline provenance make_provenance(nlohmann::json config, std::uint64_t seed, int threads, int argc = 0,
                                  const char* const* argv = nullptr) {
  provenance p;
  p.config = std::move(config);
  if (p.config.is_null()) p.config = nlohmann::json::object();
  p.seed = seed;
  p.threads = threads;
  if (argc > 0 && argv) p.command_line = join_command_line(argc, argv);
  p.validate();
  return p;
}

/// Parses "i/N" (0-based i, 0 ≤ i < N, 1 ≤ N ≤ max_shard_count) into {i, N}; throws
/// kvphase::error naming `parameter` otherwise. (The one shard parser: sim::shard_spec::parse.)
inline std::pair<std::int64_t, std::int64_t> parse_shard(std::string_view text,
                                                         std::string_view parameter = "shard") {
  const auto s = sim::shard_spec::parse(text, parameter);
  return {s.index, s.count};
}

/// JSON object with every field (keys: version, git_hash, compiler, flags, build_type,
/// isa_compiled, isa_runtime, seed, threads, shard ("i/N"), merged_from, date, command_line, config;
/// launcher and job only when a launcher set the shard, i.e. launcher is not empty).
inline nlohmann::json to_json(const provenance& p) {
  nlohmann::json j = nlohmann::json::object();
  j["version"] = p.version;
  j["git_hash"] = p.git_hash;
  j["compiler"] = p.compiler;
  j["flags"] = p.flags;
  j["build_type"] = p.build_type;
  j["isa_compiled"] = p.isa_compiled;
  j["isa_runtime"] = p.isa_runtime;
  j["seed"] = p.seed;
  j["threads"] = p.threads;
  j["shard"] = p.shard_text();
  j["merged_from"] = p.merged_from;
  if (!p.launcher.empty()) {
    j["launcher"] = p.launcher;
    j["job"] = p.job;
  }
  j["date"] = p.date;
  j["command_line"] = p.command_line;
  j["config"] = p.config;
  return j;
}

/// Inverse of to_json. Missing string fields read "unknown"; a malformed object throws
/// kvphase::error naming the field (and `source`, the input, when given). Counts are checked
/// against their ranges before use: threads in [1, 65536], merged_from in [0, 2^20], seed in
/// [0, 2^64), shard i/N with N <= 2^20. (Taken by value: pass an rvalue to move a large config.)
inline provenance provenance_from_json(nlohmann::json j, std::string_view source = {}) {
  const std::string where = source.empty() ? std::string("provenance") : std::string(source) + " provenance";
  if (!j.is_object()) fail(where, detail::json_excerpt(j), "must be a JSON object");
  provenance p;
  auto str = [&](const char* key, std::string& out) {
    const auto it = j.find(key);
    if (it == j.end()) {
      out = "unknown";
      return;
    }
    if (!it->is_string()) fail(where + "." + key, detail::json_excerpt(*it), "must be a string");
    out = it->get<std::string>();
  };
  // An integer member in [lo, hi]; absent: `out` unchanged.
  auto count = [&](const char* key, std::int64_t lo, std::int64_t hi, const char* rule, auto& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    const bool ok = (it->is_number_unsigned() && it->template get<std::uint64_t>() >= static_cast<std::uint64_t>(lo) &&
                     it->template get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)) ||
                    (it->is_number_integer() && !it->is_number_unsigned() && it->template get<std::int64_t>() >= lo &&
                     it->template get<std::int64_t>() <= hi);
    if (!ok) fail(where + "." + key, detail::json_excerpt(*it), rule);
    out = static_cast<std::remove_reference_t<decltype(out)>>(it->template get<std::int64_t>());
  };
  str("version", p.version);
  str("git_hash", p.git_hash);
  str("compiler", p.compiler);
  str("flags", p.flags);
  str("build_type", p.build_type);
  str("isa_compiled", p.isa_compiled);
  str("isa_runtime", p.isa_runtime);
  str("date", p.date);
  str("command_line", p.command_line);
  if (j.contains("launcher")) {
    str("launcher", p.launcher);
    str("job", p.job);
  }
  if (const auto it = j.find("seed"); it != j.end()) {
    if (!(it->is_number_unsigned() || (it->is_number_integer() && it->get<std::int64_t>() >= 0)))
      fail(where + ".seed", detail::json_excerpt(*it), "must be an integer in [0, 2^64)");
    p.seed = it->get<std::uint64_t>();
  }
  count("threads", 1, max_threads, "must be an integer in [1, 65536]", p.threads);
  count("merged_from", 0, max_shard_count, "must be an integer in [0, 2^20]", p.merged_from);
  if (const auto it = j.find("shard"); it != j.end()) {
    if (!it->is_string()) fail(where + ".shard", detail::json_excerpt(*it), "must be a string i/N");
    std::tie(p.shard_index, p.shard_count) = parse_shard(it->get<std::string>(), where + ".shard");
  }
  if (const auto it = j.find("config"); it != j.end()) p.config = std::move(*it);
  p.validate();
  return p;
}

/// The CSV comment-header form: one line per field, each "# <key>: <value>\n", with the config
/// as one line of compact JSON ("# config: {...}"). Values never contain a newline (newlines in
/// strings are written as "\n" escapes by the JSON encoding of the whole provenance on the last
/// line, "# provenance_json: {...}", which is what provenance_from_csv_comments() reads).
inline std::string to_csv_comment(const provenance& p) {
  auto one_line = [](std::string s) {
    for (char& c : s)
      if (c == '\n' || c == '\r') c = ' ';
    return s;
  };
  std::ostringstream os;
  os << "# kvphase " << one_line(p.version) << " git " << one_line(p.git_hash) << '\n';
  os << "# compiler: " << one_line(p.compiler) << '\n';
  os << "# flags: " << one_line(p.flags) << '\n';
  os << "# build_type: " << one_line(p.build_type) << '\n';
  os << "# isa: compiled " << one_line(p.isa_compiled) << ", runtime " << one_line(p.isa_runtime) << '\n';
  os << "# seed: " << p.seed << '\n';
  os << "# threads: " << p.threads << '\n';
  os << "# shard: " << p.shard_text() << '\n';
  if (p.merged_from > 0) os << "# merged_from: " << p.merged_from << '\n';
  if (!p.launcher.empty()) os << "# launcher: " << one_line(p.launcher) << " " << one_line(p.job) << '\n';
  os << "# date: " << one_line(p.date) << '\n';
  os << "# command_line: " << one_line(p.command_line) << '\n';
  os << "# config: " << p.config.dump() << '\n';
  os << "# provenance_json: " << to_json(p).dump() << '\n';
  return os.str();
}

/// Parses the provenance back from CSV comment lines (with or without the leading "# "):
/// reads the "provenance_json:" line (parsed by parse_json_as: depth limit, position of a
/// syntax error). Throws kvphase::error naming `source` if it is absent or malformed.
inline provenance provenance_from_csv_comments(const std::vector<std::string>& comments,
                                               std::string_view source = "csv comments") {
  constexpr std::string_view key = "provenance_json: ";
  for (const auto& line : comments) {
    std::string_view s = line;
    if (s.starts_with("# ")) s.remove_prefix(2);
    else if (s.starts_with("#")) s.remove_prefix(1);
    if (s.starts_with(key)) {
      s.remove_prefix(key.size());
      const std::string src(source);
      return provenance_from_json(parse_json_as<nlohmann::json>(s, src + " provenance_json"), src);
    }
  }
  fail(std::string(source), std::to_string(comments.size()) + " comment lines",
       "contain no '# provenance_json: {...}' line");
}

inline std::ostream& operator<<(std::ostream& os, const provenance& p) { return os << to_json(p).dump(); }

}  // namespace kvphase::io
