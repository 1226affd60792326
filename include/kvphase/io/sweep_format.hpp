#pragma once
/// \file io/sweep_format.hpp
/// The phase-sweep output format ("kvphase-sweep/1"): one mechanism writes sweep results (the
/// sweep CLI), reads them back and merges shards (kvphase-merge), so a merged run and a single
/// run are the same bytes apart from provenance.
///
/// What a sweep stores is COUNTS: for every model (e.g. "compressed", "full") and every phase
/// group g = 0..M−1 (target position mod the modulus M), trials[g] and hits[g]. Everything else
/// — recall, intervals, gap, uniformity and periodicity tests — is recomputed from the counts
/// by kvphase::stats with the settings in `analysis_options`, whose seed keys the permutation
/// and bootstrap streams (per model: rng::combine(seed, rng::hash_text(model))). Identical
/// counts and settings therefore give identical numbers, whichever process computed them.
///
/// CSV (write_sweep_csv):
///   # kvphase <version> git <hash>             ┐
///   # compiler: … / flags / build_type / isa    │ provenance (io/provenance.hpp), including
///   # seed: … / threads: … / shard: i/N / …     │ "# shard: i/N" and the run config
///   # config: {…} / provenance_json: {…}        ┘
///   # format: kvphase-sweep/1
///   # analysis: {"modulus":8,"period":4,…}
///   # summary <model>: gap … [lo, hi], uniformity_p …, period 4 p …   (human-readable)
///   model,phase,trials,hits,recall,ci_low,ci_high[,<extra columns>]
///   compressed,0,1000,873,0.8730000000,0.8507…,…
/// One row per (model, phase group), models in the order given, phases 0..M−1. recall and the
/// interval bounds are fixed-point with 10 decimals (std::to_chars). Extra columns (e.g. a
/// theory prediction per phase) are per-phase doubles written in shortest round-trip form.
///
/// JSON (write_sweep_json): an object with, in order,
///   "format": "kvphase-sweep/1", "provenance": {…}, "analysis": {…},
///   "models": [ { "model", "modulus", "trials", "hits", "recall",
///                 "phases": [ {"phase","trials","hits","recall","ci_low","ci_high", extras…} ],
///                 "gap" (raw max − min), "gap_ci_low", "gap_ci_high" (percentile bootstrap,
///                 comparison only), "gap_bias_corrected", "gap_simultaneous_low",
///                 "gap_simultaneous_high" (the headline: covers the gap with probability ≥
///                 confidence, stats/gap.hpp), "gap_group_alpha", "gap_argmax", "gap_argmin",
///                 "uniformity_p", "uniformity_statistic", "uniformity_dof", "uniformity_test",
///                 "period", "period_p", "period_p_chi_square", "period_p_mc_error",
///                 "period_statistic", "period_dof", "period_power", "period_amplitude",
///                 "period_peak_phase", "period_test",
///                 and for every model other than analysis.baseline (default "full") when the
///                 baseline is present: "baseline", "gap_minus_baseline",
///                 "gap_minus_baseline_ci_low", "gap_minus_baseline_ci_high",
///                 "gap_minus_baseline_bias_corrected", "gap_minus_baseline_simultaneous_low",
///                 "gap_minus_baseline_simultaneous_high" } ]
/// Both forms take the summaries as an argument (stats::summarize(r.models, r.analysis)); io
/// computes no statistic. Run columns (sweep_result::columns) follow the extra columns on every
/// CSV data row, named by a "# run_columns: [...]" comment; JSON holds them in "columns".
///
/// Shards: a sharded run writes one file per shard with provenance.shard_index / shard_count
/// ("shard": "i/N", 0-based, parse it with io::parse_shard) and the counts of the trials it
/// ran (groups it did not run have trials 0). merge_shards() requires every i in 0..N−1 exactly
/// once, the same version, git hash, seed, analysis settings, models, extra columns and config
/// (config keys "shard", "threads", "out", "format", "progress" are ignored: they may differ
/// between shards without changing results), sums the counts per (model, phase) and returns
/// an unsharded result (shard 0/1, merged_from = N) whose statistics are recomputed on write.

#include <algorithm>
#include <cstdint>
#include <istream>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/io/csv.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/provenance.hpp"
#include "kvphase/stats/summary.hpp"

namespace kvphase::io {

inline constexpr const char* sweep_format_name = "kvphase-sweep/1";

using stats::analysis_options;
using stats::extra_column;
using stats::model_summary;
using stats::phase_counts;

inline ordered_json to_json(const analysis_options& a) {
  ordered_json j;
  j["modulus"] = a.modulus;
  j["period"] = a.period;
  j["confidence"] = a.confidence;
  j["interval"] = stats::to_string(a.interval);
  j["uniformity"] = stats::to_string(a.uniformity);
  j["periodicity"] = stats::to_string(a.periodicity);
  j["permutations"] = a.permutations;
  j["bootstrap_replicates"] = a.bootstrap_replicates;
  j["seed"] = a.seed;
  j["baseline"] = a.baseline;
  return j;
}

inline std::ostream& operator<<(std::ostream& os, const analysis_options& a) { return os << to_json(a).dump(); }

template <class Json>
analysis_options analysis_from_json(const Json& j) {
  analysis_options a;
  auto get_int = [&](const char* key, std::int64_t& out) {
    const auto& v = require_member(j, key, "analysis");
    require(v.is_number_integer(), std::string("analysis.") + key, v.dump(), "must be an integer");
    out = v.template get<std::int64_t>();
  };
  get_int("modulus", a.modulus);
  get_int("period", a.period);
  get_int("permutations", a.permutations);
  get_int("bootstrap_replicates", a.bootstrap_replicates);
  const auto& c = require_member(j, "confidence", "analysis");
  require(c.is_number(), "analysis.confidence", c.dump(), "must be a number");
  a.confidence = c.template get<double>();
  const auto& s = require_member(j, "seed", "analysis");
  require(s.is_number_unsigned() || (s.is_number_integer() && s.template get<std::int64_t>() >= 0), "analysis.seed",
          s.dump(), "must be a non-negative integer");
  a.seed = s.template get<std::uint64_t>();
  auto get_str = [&](const char* key) {
    const auto& v = require_member(j, key, "analysis");
    require(v.is_string(), std::string("analysis.") + key, v.dump(), "must be a string");
    return v.template get<std::string>();
  };
  a.interval = stats::parse_interval_method(get_str("interval"));
  if (j.contains("baseline")) a.baseline = get_str("baseline");
  const auto u = get_str("uniformity");
  if (u == "pearson_chi_square") a.uniformity = stats::uniformity_method::pearson_chi_square;
  else if (u == "g_test") a.uniformity = stats::uniformity_method::g_test;
  else fail("analysis.uniformity", u, "must be pearson_chi_square or g_test");
  const auto p = get_str("periodicity");
  if (p == "harmonics") a.periodicity = stats::periodicity_statistic::harmonics;
  else if (p == "fundamental") a.periodicity = stats::periodicity_statistic::fundamental;
  else fail("analysis.periodicity", p, "must be harmonics or fundamental");
  a.validate();
  return a;
}

/// Everything a sweep output holds: provenance, analysis settings and the counts per model.
struct sweep_result {
  provenance prov;
  analysis_options analysis;
  std::vector<phase_counts> models;
  /// The run's configuration as (name, value) columns, the same on every data row (preset,
  /// window, stride, pool, task, context, dim, modulus, engine, seed, …), so that outputs of
  /// several runs concatenate into one tidy table. Names must differ from the standard and
  /// extra columns.
  std::vector<std::pair<std::string, std::string>> columns;

  /// Throws unless: analysis valid; ≥ 1 model; model names non-empty and distinct; each model
  /// has modulus trials/hits with 0 ≤ hits ≤ trials; extra columns have M values and the same
  /// names (in order) for every model.
  void validate() const {
    prov.validate();
    analysis.validate();
    require(!models.empty(), "models.size()", models.size(), "must be >= 1");
    std::set<std::string> names;
    for (const auto& m : models) {
      require(!m.model.empty(), "model", m.model, "name must be non-empty");
      require(names.insert(m.model).second, "model", m.model, "appears twice");
      require(static_cast<std::int64_t>(m.trials.size()) == analysis.modulus, "model " + m.model + " trials.size()",
              m.trials.size(), "must equal analysis.modulus = " + std::to_string(analysis.modulus));
      stats::require_group_counts(m.hits, m.trials);
      require(m.extra.size() == models.front().extra.size(), "model " + m.model + " extra columns", m.extra.size(),
              "must match the first model's " + std::to_string(models.front().extra.size()));
      for (std::size_t e = 0; e < m.extra.size(); ++e) {
        require(m.extra[e].name == models.front().extra[e].name, "model " + m.model + " extra column", m.extra[e].name,
                "must be named " + models.front().extra[e].name + " like the first model's");
        require(static_cast<std::int64_t>(m.extra[e].values.size()) == analysis.modulus,
                "extra column " + m.extra[e].name + " size", m.extra[e].values.size(),
                "must equal analysis.modulus = " + std::to_string(analysis.modulus));
        static const std::set<std::string> reserved{"model", "phase", "trials", "hits", "recall", "ci_low", "ci_high"};
        for (const auto& [cn, cv] : columns)
          require(cn != m.extra[e].name, "column", cn, "is both a run column and an extra column");
        require(!reserved.contains(m.extra[e].name) && !m.extra[e].name.empty(), "extra column",
                m.extra[e].name, "must be a non-empty name other than the standard columns");
      }
    }
    std::set<std::string> cnames;
    static const std::set<std::string> standard{"model", "phase", "trials", "hits", "recall", "ci_low", "ci_high"};
    for (const auto& [cn, cv] : columns) {
      require(!cn.empty() && !standard.contains(cn), "column", cn, "must be a non-empty name other than the standard columns");
      require(cnames.insert(cn).second, "column", cn, "appears twice");
    }
  }
};

namespace detail {
inline std::vector<std::string> sweep_csv_header(const sweep_result& r) {
  std::vector<std::string> h{"model", "phase", "trials", "hits", "recall", "ci_low", "ci_high"};
  for (const auto& e : r.models.front().extra) h.push_back(e.name);
  for (const auto& c : r.columns) h.push_back(c.first);
  return h;
}
inline void require_summaries(const sweep_result& r, const std::vector<model_summary>& s) {
  r.validate();
  require(s.size() == r.models.size(), "summaries.size()", s.size(),
          "must equal the number of models " + std::to_string(r.models.size()) + " (stats::summarize(r.models, r.analysis))");
  for (std::size_t m = 0; m < s.size(); ++m)
    require(s[m].model == r.models[m].model && s[m].recall.size() == r.models[m].trials.size(), "summaries[" + std::to_string(m) + "]",
            s[m].model, "must summarise model " + r.models[m].model + " (same order, same groups)");
}
inline std::string summary_line(const model_summary& s) {
  std::ostringstream os;
  os << "summary " << s.model << ": trials " << s.total_trials << ", hits " << s.total_hits << ", gap "
     << format_shortest(s.gap.bias_corrected) << " [" << format_shortest(s.gap.simultaneous.low) << ", "
     << format_shortest(s.gap.simultaneous.high) << "] (bias-corrected, simultaneous interval; raw max-min "
     << format_shortest(s.gap.gap) << ", percentile [" << format_shortest(s.gap.ci.low) << ", "
     << format_shortest(s.gap.ci.high) << "]), uniformity_p " << format_shortest(s.uniformity.p) << ", period "
     << s.periodicity.period << " p " << format_shortest(s.periodicity.p) << " (" << s.periodicity.test << ")";
  if (s.vs_baseline)
    os << ", gap minus baseline " << format_shortest(s.vs_baseline->bias_corrected) << " ["
       << format_shortest(s.vs_baseline->simultaneous.low) << ", " << format_shortest(s.vs_baseline->simultaneous.high)
       << "] (raw " << format_shortest(s.vs_baseline->difference) << ")";
  return os.str();
}
template <class Json>
Json reorder(const nlohmann::json& j) {
  return Json::parse(j.dump());
}
}  // namespace detail

/// Writes the CSV form (see the file comment) of r and its summaries
/// (stats::summarize(r.models, r.analysis)). Validates first.
inline void write_sweep_csv(std::ostream& os, const sweep_result& r, const std::vector<model_summary>& summaries) {
  detail::require_summaries(r, summaries);
  csv_writer w(os);
  w.comment(to_csv_comment(r.prov));
  w.comment(std::string("format: ") + sweep_format_name);
  w.comment("analysis: " + to_json(r.analysis).dump());
  if (!r.columns.empty()) {
    nlohmann::json names = nlohmann::json::array();
    for (const auto& c : r.columns) names.push_back(c.first);
    w.comment("run_columns: " + names.dump());
  }
  for (const auto& s : summaries) w.comment(detail::summary_line(s));
  w.row(detail::sweep_csv_header(r));
  for (std::size_t m = 0; m < r.models.size(); ++m) {
    const auto& c = r.models[m];
    const auto& s = summaries[m];
    for (std::size_t g = 0; g < c.trials.size(); ++g) {
      std::vector<std::string> f{c.model,
                                 std::to_string(g),
                                 std::to_string(c.trials[g]),
                                 std::to_string(c.hits[g]),
                                 format_fixed(s.recall[g], 10),
                                 format_fixed(s.ci[g].low, 10),
                                 format_fixed(s.ci[g].high, 10)};
      for (const auto& e : c.extra) f.push_back(format_shortest(e.values[g]));
      for (const auto& col : r.columns) f.push_back(col.second);
      w.row(f);
    }
  }
}

/// The JSON document of a sweep result and its summaries (see the file comment). Validates first.
inline ordered_json sweep_to_json(const sweep_result& r, const std::vector<model_summary>& summaries) {
  detail::require_summaries(r, summaries);
  ordered_json j;
  j["format"] = sweep_format_name;
  j["provenance"] = detail::reorder<ordered_json>(to_json(r.prov));
  j["analysis"] = to_json(r.analysis);
  if (!r.columns.empty()) {
    ordered_json cols = ordered_json::object();
    for (const auto& [k, v] : r.columns) cols[k] = v;
    j["columns"] = std::move(cols);
  }
  j["models"] = ordered_json::array();
  for (std::size_t m = 0; m < r.models.size(); ++m) {
    const auto& c = r.models[m];
    const auto& s = summaries[m];
    ordered_json o;
    o["model"] = c.model;
    o["modulus"] = r.analysis.modulus;
    o["trials"] = s.total_trials;
    o["hits"] = s.total_hits;
    o["recall"] = s.total_recall;
    o["phases"] = ordered_json::array();
    for (std::size_t g = 0; g < c.trials.size(); ++g) {
      ordered_json p;
      p["phase"] = g;
      p["trials"] = c.trials[g];
      p["hits"] = c.hits[g];
      p["recall"] = s.recall[g];
      p["ci_low"] = s.ci[g].low;
      p["ci_high"] = s.ci[g].high;
      for (const auto& e : c.extra) p[e.name] = e.values[g];
      o["phases"].push_back(std::move(p));
    }
    o["gap"] = s.gap.gap;
    o["gap_ci_low"] = s.gap.ci.low;
    o["gap_ci_high"] = s.gap.ci.high;
    o["gap_bias_corrected"] = s.gap.bias_corrected;
    o["gap_simultaneous_low"] = s.gap.simultaneous.low;
    o["gap_simultaneous_high"] = s.gap.simultaneous.high;
    o["gap_group_alpha"] = s.gap.group_alpha;
    o["gap_argmax"] = s.gap.argmax;
    o["gap_argmin"] = s.gap.argmin;
    o["uniformity_p"] = s.uniformity.p;
    o["uniformity_statistic"] = s.uniformity.statistic;
    o["uniformity_dof"] = s.uniformity.dof;
    o["uniformity_test"] = s.uniformity.test;
    o["period"] = s.periodicity.period;
    o["period_p"] = s.periodicity.p;
    o["period_p_chi_square"] = s.periodicity.p_chi_square;
    o["period_p_mc_error"] = s.periodicity.p_mc_error;
    o["period_statistic"] = s.periodicity.statistic;
    o["period_dof"] = s.periodicity.dof;
    o["period_power"] = s.periodicity.power;
    o["period_amplitude"] = s.periodicity.amplitude;
    o["period_peak_phase"] = s.periodicity.peak_phase;
    o["period_test"] = s.periodicity.test;
    if (s.vs_baseline) {
      o["baseline"] = r.analysis.baseline;
      o["gap_minus_baseline"] = s.vs_baseline->difference;
      o["gap_minus_baseline_ci_low"] = s.vs_baseline->ci.low;
      o["gap_minus_baseline_ci_high"] = s.vs_baseline->ci.high;
      o["gap_minus_baseline_bias_corrected"] = s.vs_baseline->bias_corrected;
      o["gap_minus_baseline_simultaneous_low"] = s.vs_baseline->simultaneous.low;
      o["gap_minus_baseline_simultaneous_high"] = s.vs_baseline->simultaneous.high;
    }
    j["models"].push_back(std::move(o));
  }
  return j;
}

/// Writes the JSON form (indent 2, trailing newline).
inline void write_sweep_json(std::ostream& os, const sweep_result& r, const std::vector<model_summary>& summaries) {
  os << json_text(sweep_to_json(r, summaries));
}

/// The whole output as a string, format "csv" or "json".
inline std::string sweep_text(const sweep_result& r, const std::vector<model_summary>& summaries,
                              std::string_view format) {
  std::ostringstream os;
  if (format == "csv") write_sweep_csv(os, r, summaries);
  else if (format == "json") write_sweep_json(os, r, summaries);
  else fail("format", std::string(format), "must be csv or json");
  return os.str();
}

/// Parses a CSV sweep output back into counts (statistics columns are ignored: they are
/// recomputed). `source` names the input in error messages.
inline sweep_result parse_sweep_csv(std::string_view text, std::string_view source = "csv") {
  const std::string src(source);
  const csv_table t = parse_csv(text, source);
  sweep_result r;
  r.prov = provenance_from_csv_comments(t.comments);
  bool have_format = false, have_analysis = false;
  for (const auto& c : t.comments) {
    std::string_view s = c;
    s.remove_prefix(s.starts_with("# ") ? 2 : 1);
    if (s.starts_with("format: ")) {
      s.remove_prefix(8);
      require(s == sweep_format_name, src + " format", std::string(s), std::string("must be ") + sweep_format_name);
      have_format = true;
    } else if (s.starts_with("analysis: ")) {
      s.remove_prefix(10);
      r.analysis = analysis_from_json(parse_json(s, src + " analysis"));
      have_analysis = true;
    } else if (s.starts_with("run_columns: ")) {
      s.remove_prefix(13);
      const auto names = parse_json(s, src + " run_columns");
      require(names.is_array(), src + " run_columns", std::string(s.substr(0, 60)), "must be a JSON array of names");
      for (const auto& n : names) {
        require(n.is_string(), src + " run_columns", n.dump(), "names must be strings");
        r.columns.emplace_back(n.get<std::string>(), std::string());
      }
    }
  }
  require(have_format, src, "(no '# format:' line)", std::string("is not a ") + sweep_format_name + " CSV");
  require(have_analysis, src, "(no '# analysis:' line)", "must record its analysis settings");
  const std::size_t cm = t.column("model"), cp = t.column("phase"), ct = t.column("trials"), ch = t.column("hits");
  static const std::set<std::string> standard{"model", "phase", "trials", "hits", "recall", "ci_low", "ci_high"};
  std::set<std::string> run_names;
  for (const auto& c : r.columns) run_names.insert(c.first);
  std::vector<std::size_t> extra_cols, run_cols;
  for (const auto& c : r.columns) run_cols.push_back(t.column(c.first));
  for (std::size_t i = 0; i < t.header.size(); ++i)
    if (!standard.contains(t.header[i]) && !run_names.contains(t.header[i])) extra_cols.push_back(i);
  const auto M = static_cast<std::size_t>(r.analysis.modulus);
  std::map<std::string, std::size_t> index;
  std::vector<std::vector<bool>> seen;
  for (std::size_t row = 0; row < t.rows.size(); ++row) {
    const auto& f = t.rows[row];
    const std::string where = src + " row " + std::to_string(row + 1);
    auto it = index.find(f[cm]);
    if (it == index.end()) {
      it = index.emplace(f[cm], r.models.size()).first;
      phase_counts pc;
      pc.model = f[cm];
      pc.trials.assign(M, 0);
      pc.hits.assign(M, 0);
      for (auto e : extra_cols) pc.extra.push_back({t.header[e], std::vector<double>(M, 0.0)});
      r.models.push_back(std::move(pc));
      seen.emplace_back(M, false);
    }
    auto& pc = r.models[it->second];
    const std::int64_t g = parse_int(f[cp], where + " phase");
    require(g >= 0 && g < r.analysis.modulus, where + " phase", g,
            "must lie in [0, analysis.modulus = " + std::to_string(r.analysis.modulus) + ")");
    require(!seen[it->second][static_cast<std::size_t>(g)], where + " phase", g,
            "appears twice for model " + pc.model);
    seen[it->second][static_cast<std::size_t>(g)] = true;
    pc.trials[static_cast<std::size_t>(g)] = parse_int(f[ct], where + " trials");
    pc.hits[static_cast<std::size_t>(g)] = parse_int(f[ch], where + " hits");
    for (std::size_t e = 0; e < extra_cols.size(); ++e)
      pc.extra[e].values[static_cast<std::size_t>(g)] = parse_double(f[extra_cols[e]], where + " " + t.header[extra_cols[e]]);
    for (std::size_t e = 0; e < run_cols.size(); ++e) {
      if (row == 0) r.columns[e].second = f[run_cols[e]];
      require(f[run_cols[e]] == r.columns[e].second, where + " " + r.columns[e].first, f[run_cols[e]],
              "run columns must be the same on every row (row 1: " + r.columns[e].second + ")");
    }
  }
  r.validate();
  return r;
}

/// Parses a JSON sweep output back into counts (statistics are ignored: they are recomputed).
inline sweep_result parse_sweep_json(std::string_view text, std::string_view source = "json") {
  const std::string src(source);
  const ordered_json j = parse_json(text, source);
  const auto& fmt = require_member(j, "format", src);
  require(fmt.is_string() && fmt.get<std::string>() == sweep_format_name, src + ".format", fmt.dump(),
          std::string("must be \"") + sweep_format_name + "\"");
  sweep_result r;
  r.prov = provenance_from_json(nlohmann::json::parse(require_member(j, "provenance", src).dump()));
  r.analysis = analysis_from_json(require_member(j, "analysis", src));
  if (j.contains("columns")) {
    const auto& cols = j["columns"];
    require(cols.is_object(), src + ".columns", cols.dump().substr(0, 60), "must be an object of strings");
    for (auto it = cols.begin(); it != cols.end(); ++it) {
      require(it.value().is_string(), src + ".columns." + it.key(), it.value().dump(), "must be a string");
      r.columns.emplace_back(it.key(), it.value().get<std::string>());
    }
  }
  const auto& models = require_member(j, "models", src);
  require(models.is_array(), src + ".models", models.dump().substr(0, 60), "must be an array");
  static const std::set<std::string> standard{"phase", "trials", "hits", "recall", "ci_low", "ci_high"};
  const auto M = static_cast<std::size_t>(r.analysis.modulus);
  for (const auto& mo : models) {
    phase_counts pc;
    const auto& name = require_member(mo, "model", src + ".models[]");
    require(name.is_string(), src + ".models[].model", name.dump(), "must be a string");
    pc.model = name.get<std::string>();
    const std::string where = src + " model " + pc.model;
    const auto& phases = require_member(mo, "phases", where);
    require(phases.is_array() && phases.size() == M, where + " phases.size()", phases.size(),
            "must equal analysis.modulus = " + std::to_string(M));
    pc.trials.assign(M, 0);
    pc.hits.assign(M, 0);
    for (std::size_t g = 0; g < M; ++g) {
      const auto& p = phases[g];
      const std::string pw = where + " phases[" + std::to_string(g) + "]";
      auto get_int = [&](const char* key) {
        const auto& v = require_member(p, key, pw);
        require(v.is_number_integer(), pw + "." + key, v.dump(), "must be an integer");
        return v.template get<std::int64_t>();
      };
      require(get_int("phase") == static_cast<std::int64_t>(g), pw + ".phase", get_int("phase"),
              "must equal its index " + std::to_string(g));
      pc.trials[g] = get_int("trials");
      pc.hits[g] = get_int("hits");
      std::size_t e = 0;
      for (auto it = p.begin(); it != p.end(); ++it) {
        if (standard.contains(it.key())) continue;
        require(it.value().is_number(), pw + "." + it.key(), it.value().dump(), "extra columns must be numbers");
        if (g == 0) pc.extra.push_back({it.key(), std::vector<double>(M, 0.0)});
        require(e < pc.extra.size() && pc.extra[e].name == it.key(), pw + "." + it.key(), it.value().dump(),
                "extra columns must be the same in every phase");
        pc.extra[e].values[g] = it.value().get<double>();
        ++e;
      }
      require(e == pc.extra.size(), pw + " extra columns", e,
              "must number " + std::to_string(pc.extra.size()) + " as in phase 0");
    }
    r.models.push_back(std::move(pc));
  }
  r.validate();
  return r;
}

/// Parses either form: JSON when the first non-space character is '{', CSV otherwise.
inline sweep_result parse_sweep(std::string_view text, std::string_view source = "input") {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') return parse_sweep_json(text, source);
  return parse_sweep_csv(text, source);
}

/// Reads a sweep output file (CSV or JSON).
inline sweep_result read_sweep_file(const std::string& path) { return parse_sweep(read_text_file(path), path); }

struct merge_options {
  bool allow_mixed_builds = false;  ///< accept shards from different git hashes / versions
};

/// Config keys that may differ between shards of one run (ignored when comparing configs).
inline nlohmann::json config_for_comparison(const nlohmann::json& config) {
  nlohmann::json c = config;
  if (c.is_object())
    for (const char* k : {"shard", "threads", "out", "format", "progress"}) c.erase(k);
  return c;
}

/// Joins the shards of one run (see the file comment). `sources` (optional, same length) names
/// the inputs in error messages. Throws kvphase::error on missing or duplicate shards and on
/// any mismatch.
inline sweep_result merge_shards(const std::vector<sweep_result>& shards, const std::vector<std::string>& sources = {},
                                 const merge_options& options = {}) {
  require(!shards.empty(), "shards", shards.size(), "must be at least one input");
  require(sources.empty() || sources.size() == shards.size(), "sources.size()", sources.size(),
          "must be 0 or the number of shards " + std::to_string(shards.size()));
  auto name = [&](std::size_t i) { return sources.empty() ? "input " + std::to_string(i + 1) : sources[i]; };
  for (std::size_t i = 0; i < shards.size(); ++i) shards[i].validate();
  const std::int64_t N = shards.front().prov.shard_count;
  std::vector<std::int64_t> owner(static_cast<std::size_t>(N), -1);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& p = shards[i].prov;
    if (p.shard_count != N)
      fail("shard count of " + name(i), p.shard_text(),
           "differs from " + name(0) + " (" + shards.front().prov.shard_text() + ")");
    auto& o = owner[static_cast<std::size_t>(p.shard_index)];
    if (o >= 0)
      fail("shard " + p.shard_text(), name(i), "is a duplicate: " + name(static_cast<std::size_t>(o)) + " is the same shard");
    o = static_cast<std::int64_t>(i);
  }
  std::string missing;
  for (std::int64_t s = 0; s < N; ++s)
    if (owner[static_cast<std::size_t>(s)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(s) + "/" + std::to_string(N);
  if (!missing.empty()) fail("shards", missing, "are missing (have " + std::to_string(shards.size()) + " of " + std::to_string(N) + ")");

  const auto& first = shards[static_cast<std::size_t>(owner[0])];
  const std::string first_name = name(static_cast<std::size_t>(owner[0]));
  const auto base_config = config_for_comparison(first.prov.config);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& s = shards[i];
    if (!options.allow_mixed_builds) {
      require(s.prov.version == first.prov.version, "version of " + name(i), s.prov.version,
              "differs from " + first_name + " (" + first.prov.version + ")");
      require(s.prov.git_hash == first.prov.git_hash, "git hash of " + name(i), s.prov.git_hash,
              "differs from " + first_name + " (" + first.prov.git_hash + ")");
    }
    require(s.prov.seed == first.prov.seed, "seed of " + name(i), s.prov.seed,
            "differs from " + first_name + " (" + std::to_string(first.prov.seed) + ")");
    const auto cfg = config_for_comparison(s.prov.config);
    if (cfg != base_config) {
      std::string diff;
      for (const auto& d : nlohmann::json::diff(base_config, cfg)) {
        if (!diff.empty()) diff += "; ";
        diff += d.value("op", "") + " " + d.value("path", "");
      }
      fail("config of " + name(i), diff, "differs from " + first_name + " (configs must match)");
    }
    require(s.columns == first.columns, "run columns of " + name(i), s.columns.size(),
            "differ from " + first_name + " (the run configuration must match)");
    require(s.analysis == first.analysis, "analysis of " + name(i), to_json(s.analysis).dump(),
            "differs from " + first_name + " (" + to_json(first.analysis).dump() + ")");
    std::vector<std::string> a, b;
    for (const auto& m : s.models) a.push_back(m.model);
    for (const auto& m : first.models) b.push_back(m.model);
    if (a != b) fail("models of " + name(i), s.models.size(), "differ from " + first_name + " (same models, same order)");
  }
  sweep_result out;
  out.prov = first.prov;
  out.prov.shard_index = 0;
  out.prov.shard_count = 1;
  out.prov.merged_from = N;
  out.analysis = first.analysis;
  out.columns = first.columns;
  out.models = first.models;
  for (auto& m : out.models) {
    std::fill(m.trials.begin(), m.trials.end(), 0);
    std::fill(m.hits.begin(), m.hits.end(), 0);
  }
  // Sum in shard-index order.
  for (std::int64_t s = 0; s < N; ++s) {
    const std::size_t i = static_cast<std::size_t>(owner[static_cast<std::size_t>(s)]);
    for (std::size_t m = 0; m < out.models.size(); ++m) {
      const auto& src = shards[i].models[m];
      auto& dst = out.models[m];
      if (src.extra != dst.extra)
        fail("extra columns of " + name(i) + " model " + src.model, src.extra.size(),
             "differ from " + first_name + " (per-phase extra values must be identical in every shard)");
      for (std::size_t g = 0; g < dst.trials.size(); ++g) {
        dst.trials[g] += src.trials[g];
        dst.hits[g] += src.hits[g];
      }
    }
  }
  out.validate();
  return out;
}

}  // namespace kvphase::io
