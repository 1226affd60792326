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
/// ran: trials [⌊i·T/N⌋, ⌊(i+1)·T/N⌋) of every group for config "trials" = T (sim/shard.hpp),
/// which merge_shards() checks when the config records T. merge_shards() requires every i in 0..N−1 exactly
/// once, the same version, git hash, seed, analysis settings, models, extra columns and config
/// (config keys "shard", "threads", "out", "format", "progress" are ignored: they may differ
/// between shards without changing results), sums the counts per (model, phase) and returns
/// an unsharded result (shard 0/1, merged_from = N) whose statistics are recomputed on write.
/// The readers bound what a file may declare (read_limits) and name the file in every error;
/// docs/reliability.md lists each check.

#include <algorithm>
#include <cstdint>
#include <istream>
#include <map>
#include <new>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
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

/// The paired counts of a model (stats/paired_counts.hpp) as stored: groups, items, hits,
/// row_totals and the k × k discordance table flattened row-major.
inline ordered_json to_json(const stats::paired_counts& c) {
  ordered_json j;
  j["groups"] = c.groups;
  j["items"] = c.items;
  j["hits"] = c.hits;
  j["row_totals"] = c.row_totals;
  j["discordant"] = c.discordant;
  return j;
}

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
      if (m.paired) {
        m.paired->validate();
        require(m.paired->groups == analysis.modulus, "model " + m.model + " paired.groups", m.paired->groups,
                "must equal analysis.modulus = " + std::to_string(analysis.modulus));
        require(m.paired->hits == m.hits, "model " + m.model + " paired.hits", m.paired->hits.size(),
                "must equal the model's per-phase hits");
        for (std::size_t g = 0; g < m.trials.size(); ++g)
          require(m.trials[g] == m.paired->items, "model " + m.model + " phase " + std::to_string(g) + " trials",
                  m.trials[g], "must equal paired.items = " + std::to_string(m.paired->items) + " (the same items in every phase)");
      }
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
  for (std::size_t m = 0; m < s.size(); ++m)
    require(s[m].paired.has_value() == r.models[m].paired.has_value(), "summaries[" + std::to_string(m) + "].paired",
            s[m].paired.has_value(), "must be present exactly when the model has paired counts");
  for (std::size_t m = 0; m < s.size(); ++m)
    require(s[m].scores.has_value() == r.models[m].scores.has_value(), "summaries[" + std::to_string(m) + "].scores",
            s[m].scores.has_value(), "must be present exactly when the model has scores");
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
inline std::string paired_line(const model_summary& s) {
  const auto& p = *s.paired;
  std::ostringstream os;
  os << "paired " << s.model << ": items " << p.items << ", cochran_q " << format_shortest(p.cochran.statistic)
     << " dof " << format_shortest(p.cochran.dof) << " p " << format_shortest(p.cochran.p) << " (" << p.cochran.reference
     << "; chi-square p " << format_shortest(p.cochran.p_chi_square) << "), mcnemar phase " << p.best_vs_worst.group_a
     << " vs " << p.best_vs_worst.group_b << ": " << p.best_vs_worst.a_only << " vs " << p.best_vs_worst.b_only
     << " discordant, p_exact " << format_shortest(p.best_vs_worst.p_exact) << " (adjusted "
     << format_shortest(p.best_vs_worst_p_adjusted) << "), flips " << p.flips << " (" << format_shortest(p.flip_fraction)
     << " [" << format_shortest(p.flip_ci.low) << ", " << format_shortest(p.flip_ci.high) << "])";
  return os.str();
}
inline std::string scores_line(const model_summary& s) {
  const auto& c = *s.scores;
  std::ostringstream os;
  os << "scores " << s.model << ": mean by phase [";
  for (std::size_t g = 0; g < c.mean.size(); ++g) os << (g ? ", " : "") << format_shortest(c.mean[g]);
  os << "], uniformity F " << format_shortest(c.uniformity.statistic) << " p " << format_shortest(c.uniformity.p)
     << ", period " << c.period << " F " << format_shortest(c.periodicity.statistic) << " p "
     << format_shortest(c.periodicity.p);
  if (c.friedman) os << ", friedman " << format_shortest(c.friedman->statistic) << " p " << format_shortest(c.friedman->p);
  return os.str();
}
inline ordered_json scores_json(const stats::score_summary& c) {
  ordered_json o;
  o["n"] = c.n;
  o["mean"] = c.mean;
  o["sd"] = c.sd;
  std::vector<double> lo, hi;
  for (const auto& i : c.ci) {
    lo.push_back(i.low);
    hi.push_back(i.high);
  }
  o["ci_low"] = lo;
  o["ci_high"] = hi;
  o["uniformity_f"] = c.uniformity.statistic;
  o["uniformity_dof"] = c.uniformity.dof;
  o["uniformity_p"] = c.uniformity.p;
  o["period"] = c.period;
  o["period_f"] = c.periodicity.statistic;
  o["period_dof"] = c.periodicity.dof;
  o["period_p"] = c.periodicity.p;
  if (c.friedman) {
    o["friedman_statistic"] = c.friedman->statistic;
    o["friedman_dof"] = c.friedman->dof;
    o["friedman_p"] = c.friedman->p;
  }
  return o;
}
inline ordered_json paired_json(const stats::paired_counts& c, const stats::paired_summary& p) {
  ordered_json o = to_json(c);
  o["cochran_q"] = p.cochran.statistic;
  o["cochran_dof"] = p.cochran.dof;
  o["cochran_p"] = p.cochran.p;
  o["cochran_p_chi_square"] = p.cochran.p_chi_square;
  o["cochran_reference"] = p.cochran.reference;
  o["mcnemar_best_phase"] = p.best_vs_worst.group_a;
  o["mcnemar_worst_phase"] = p.best_vs_worst.group_b;
  o["mcnemar_best_only"] = p.best_vs_worst.a_only;
  o["mcnemar_worst_only"] = p.best_vs_worst.b_only;
  o["mcnemar_p_exact"] = p.best_vs_worst.p_exact;
  o["mcnemar_p_mid"] = p.best_vs_worst.p_mid;
  o["mcnemar_p_adjusted"] = p.best_vs_worst_p_adjusted;
  o["mcnemar_statistic"] = p.best_vs_worst.statistic;
  o["mcnemar_p_chi_square"] = p.best_vs_worst.p_chi_square;
  o["flips"] = p.flips;
  o["flip_fraction"] = p.flip_fraction;
  o["flip_ci_low"] = p.flip_ci.low;
  o["flip_ci_high"] = p.flip_ci.high;
  return o;
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
  for (const auto& s : summaries)
    if (s.scores) w.comment(detail::scores_line(s));
  for (std::size_t m = 0; m < r.models.size(); ++m)
    if (r.models[m].paired) {
      w.comment(detail::paired_line(summaries[m]));
      ordered_json pc;
      pc["model"] = r.models[m].model;
      const ordered_json counts = to_json(*r.models[m].paired);
      for (auto it = counts.begin(); it != counts.end(); ++it) pc[it.key()] = it.value();
      w.comment("paired_counts: " + pc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
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
    if (c.paired) o["paired"] = detail::paired_json(*c.paired, *s.paired);
    if (s.scores) o["scores"] = detail::scores_json(*s.scores);
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

/// Limits on what a sweep file may declare, checked before anything is allocated or computed
/// from it (a file under 1 MB cannot make the reader allocate more than a small multiple of its
/// size, nor make the statistics run for hours). They are the sweep's own limits where it has
/// one (groups ≤ 4096, trials per group ≤ 2^40, shards ≤ 2^20: sim/sweep.hpp, sim/shard.hpp).
struct read_limits {
  static constexpr std::int64_t modulus = 4096;                     ///< analysis.modulus
  static constexpr std::int64_t models = 1024;                      ///< models per file
  static constexpr std::int64_t extra_columns = 64;                 ///< extra per-phase columns
  static constexpr std::int64_t trials = std::int64_t{1} << 40;     ///< trials of one (model, phase)
  static constexpr std::int64_t permutations = 1'000'000;           ///< analysis.permutations
  static constexpr std::int64_t bootstrap_replicates = 1'000'000;   ///< analysis.bootstrap_replicates
  /// models × modulus × (permutations + 2 × bootstrap_replicates): the random draws the
  /// statistics of one file take (the gap and its baseline contrast each draw per replicate).
  static constexpr std::int64_t draws = std::int64_t{1} << 30;
};

namespace detail {
/// Throws kvphase::error naming `src` unless the analysis settings are within read_limits.
inline void require_read_limits(const analysis_options& a, const std::string& src) {
  require(a.modulus <= read_limits::modulus, src + " analysis.modulus", a.modulus, "must be <= 4096 (read limit)");
  require(a.permutations <= read_limits::permutations, src + " analysis.permutations", a.permutations,
          "must be <= 10^6 (read limit)");
  require(a.bootstrap_replicates <= read_limits::bootstrap_replicates, src + " analysis.bootstrap_replicates",
          a.bootstrap_replicates, "must be <= 10^6 (read limit)");
}
/// Throws unless `models` models keep the statistics' draws within read_limits::draws.
inline void require_read_work(const analysis_options& a, std::size_t models, const std::string& src) {
  require(static_cast<std::int64_t>(models) <= read_limits::models, src + " models", models,
          "must number at most 1024 (read limit)");
  const auto draws = static_cast<__int128_t>(models) * a.modulus * (a.permutations + 2 * a.bootstrap_replicates);
  if (draws > read_limits::draws)
    fail(src + " models x modulus x (permutations + 2 x bootstrap_replicates)",
         std::to_string(models) + " x " + std::to_string(a.modulus) + " x (" + std::to_string(a.permutations) +
             " + 2 x " + std::to_string(a.bootstrap_replicates) + ")",
         "must be <= 2^30 (read limit on the statistics' random draws)");
}
/// Throws naming the (model, phase) unless 0 ≤ trials ≤ read_limits::trials and 0 ≤ hits ≤ trials.
inline void require_read_counts(std::int64_t trials, std::int64_t hits, const std::string& where) {
  if (trials < 0 || trials > read_limits::trials) fail(where + " trials", trials, "must be in [0, 2^40]");
  if (hits < 0 || hits > trials) fail(where + " hits", hits, "must be in [0, trials = " + std::to_string(trials) + "]");
}
/// Throws naming `what` unless `name` is non-empty, well-formed UTF-8 text.
inline void require_name(std::string_view name, const std::string& what) {
  if (name.empty()) fail(what, "\"\"", "must be non-empty");
  if (const auto at = invalid_utf8_at(name); at != std::string_view::npos)
    fail(what, "\"" + excerpt(name) + "\"", "is not valid UTF-8 (byte " + std::to_string(at) + ")");
}
/// Runs `body`; a kvphase::error it throws ("kvphase: <what>") is rethrown as
/// "kvphase: <where()> <what>", so the name of the place is built only on failure.
template <class F, class W>
auto naming_place(W&& where, F&& body) {
  try {
    return body();
  } catch (const kvphase::error& e) {
    const std::string_view m = e.what();
    throw kvphase::error("kvphase: " + where() + " " + std::string(m.starts_with("kvphase: ") ? m.substr(9) : m));
  }
}
/// Runs `body`; rethrows what it throws as kvphase::error naming `src` (nlohmann exceptions,
/// allocation failures, and kvphase errors whose message does not name `src` yet).
template <class F>
auto naming_source(const std::string& src, F&& body) {
  try {
    return body();
  } catch (const kvphase::error& e) {
    const std::string_view m = e.what();
    if (m.starts_with("kvphase: " + src)) throw;
    throw kvphase::error("kvphase: " + src + ": " + std::string(m.starts_with("kvphase: ") ? m.substr(9) : m));
  } catch (const nlohmann::json::exception& e) {
    fail(src, "(content)", "cannot be read: " + excerpt(e.what(), 160));
  } catch (const std::bad_alloc&) {
    fail(src, "(content)", "cannot be read: out of memory");
  } catch (const std::length_error&) {
    fail(src, "(content)", "cannot be read: a size exceeds what can be allocated");
  }
}
}  // namespace detail

namespace detail {
/// Paired counts from their stored form (to_json(paired_counts)), checked before allocating:
/// groups in [2, 64], arrays of the sizes groups implies, integers in [0, 2^53], then
/// consistent (paired_counts::validate). Errors name `where`.
template <class Json>
stats::paired_counts paired_counts_from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) fail(where, json_excerpt(j), "must be a JSON object");
  auto get_int = [&](const Json& v, const std::string& name) -> std::int64_t {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.template get<std::uint64_t>() > (1ULL << 53)))
      fail(where + " " + name, json_excerpt(v), "must be an integer in [0, 2^53]");
    const auto x = v.template get<std::int64_t>();
    if (x < 0 || x > stats::max_paired_count) fail(where + " " + name, x, "must be an integer in [0, 2^53]");
    return x;
  };
  const std::int64_t k = get_int(require_member(j, "groups", where), "groups");
  require(k >= 2 && k <= stats::max_paired_groups, where + " groups", k, "must be in [2, 64]");
  auto c = stats::paired_counts::zero(k);
  c.items = get_int(require_member(j, "items", where), "items");
  auto get_array = [&](const char* key, std::vector<std::int64_t>& out) {
    const auto& a = require_member(j, key, where);
    if (!a.is_array() || a.size() != out.size())
      fail(where + " " + key, json_excerpt(a), "must be an array of " + std::to_string(out.size()) + " integers");
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = get_int(a[i], std::string(key) + "[" + std::to_string(i) + "]");
  };
  get_array("hits", c.hits);
  get_array("row_totals", c.row_totals);
  get_array("discordant", c.discordant);
  naming_place([&] { return where; }, [&] { c.validate(); return 0; });
  return c;
}
}  // namespace detail

/// Parses a CSV sweep output back into counts (statistics columns are ignored: they are
/// recomputed). `source` names the input in error messages. Every model needs exactly one row
/// per phase 0..M−1 (a missing or repeated (model, phase) row throws naming both); counts and
/// settings are checked against read_limits before any per-phase storage is allocated.
inline sweep_result parse_sweep_csv(std::string_view text, std::string_view source = "csv") {
  const std::string src(source);
  return detail::naming_source(src, [&] {
    const csv_table t = parse_csv(text, source);
    sweep_result r;
    r.prov = provenance_from_csv_comments(t.comments, src);
    bool have_format = false, have_analysis = false;
    std::vector<std::pair<std::string, stats::paired_counts>> paired;
    for (const auto& c : t.comments) {
      std::string_view s = c;
      s.remove_prefix(s.starts_with("# ") ? 2 : 1);
      if (s.starts_with("format: ")) {
        s.remove_prefix(8);
        if (s != sweep_format_name)
          fail(src + " format", detail::excerpt(s), std::string("must be ") + sweep_format_name);
        have_format = true;
      } else if (s.starts_with("analysis: ")) {
        s.remove_prefix(10);
        require(!have_analysis, src + " '# analysis:' line", "2", "must appear once");
        r.analysis = analysis_from_json(parse_json(s, src + " analysis"));
        have_analysis = true;
      } else if (s.starts_with("paired_counts: ")) {
        s.remove_prefix(15);
        const auto j = parse_json(s, src + " paired_counts");
        const auto& mn = require_member(j, "model", src + " paired_counts");
        if (!mn.is_string()) fail(src + " paired_counts model", detail::json_excerpt(mn), "must be a string");
        const std::string model = mn.get<std::string>();
        detail::require_name(model, src + " paired_counts model");
        for (const auto& [pm, pcnt] : paired)
          if (pm == model) fail(src + " paired_counts model", detail::excerpt(model), "appears twice");
        require(static_cast<std::int64_t>(paired.size()) < read_limits::models, src + " paired_counts lines",
                paired.size() + 1, "must number at most 1024 (read limit)");
        paired.emplace_back(model, detail::paired_counts_from_json(j, src + " paired_counts of model " + detail::excerpt(model)));
      } else if (s.starts_with("run_columns: ")) {
        s.remove_prefix(13);
        require(r.columns.empty(), src + " '# run_columns:' line", "2", "must appear once");
        const auto names = parse_json(s, src + " run_columns");
        if (!names.is_array()) fail(src + " run_columns", detail::excerpt(s), "must be a JSON array of names");
        require(static_cast<std::int64_t>(names.size()) <= read_limits::extra_columns, src + " run_columns",
                names.size(), "must number at most 64 (read limit)");
        for (const auto& n : names) {
          if (!n.is_string()) fail(src + " run_columns", detail::json_excerpt(n), "names must be strings");
          detail::require_name(n.get<std::string>(), src + " run column");
          r.columns.emplace_back(n.get<std::string>(), std::string());
        }
      }
    }
    if (!have_format) fail(src, "(no '# format:' line)", std::string("is not a ") + sweep_format_name + " CSV");
    if (!have_analysis) fail(src, "(no '# analysis:' line)", "must record its analysis settings");
    detail::require_read_limits(r.analysis, src);
    const std::size_t cm = t.column("model"), cp = t.column("phase"), ct = t.column("trials"), ch = t.column("hits");
    static const std::set<std::string> standard{"model", "phase", "trials", "hits", "recall", "ci_low", "ci_high"};
    std::set<std::string> run_names;
    std::vector<std::size_t> extra_cols, run_cols;
    for (const auto& c : r.columns) {
      run_names.insert(c.first);
      run_cols.push_back(t.column(c.first));
    }
    for (std::size_t i = 0; i < t.header.size(); ++i)
      if (!standard.contains(t.header[i]) && !run_names.contains(t.header[i])) {
        detail::require_name(t.header[i], src + " header column " + std::to_string(i + 1));
        extra_cols.push_back(i);
      }
    require(static_cast<std::int64_t>(extra_cols.size()) <= read_limits::extra_columns, src + " extra columns",
            extra_cols.size(), "must number at most 64 (read limit)");
    const auto M = static_cast<std::size_t>(r.analysis.modulus);
    // Pass 1: the models (in order of first appearance) and which (model, phase) rows exist,
    // before any per-phase storage: the file must hold models × M rows, each once.
    std::map<std::string_view, std::size_t> index;
    std::vector<std::string_view> names;
    std::vector<std::size_t> model_of(t.rows.size()), phase_of(t.rows.size());
    for (std::size_t row = 0; row < t.rows.size(); ++row) {
      const auto& f = t.rows[row];
      auto it = index.find(f[cm]);
      if (it == index.end()) {
        detail::require_name(f[cm], src + " row " + std::to_string(row + 1) + " model");
        it = index.emplace(f[cm], names.size()).first;
        names.push_back(f[cm]);
        detail::require_read_work(r.analysis, names.size(), src);
      }
      const std::int64_t g =
          detail::naming_place([&] { return src + " row " + std::to_string(row + 1); }, [&] { return parse_int(f[cp], "phase"); });
      if (g < 0 || g >= r.analysis.modulus)
        fail(src + " row " + std::to_string(row + 1) + " phase", g,
             "must lie in [0, analysis.modulus = " + std::to_string(r.analysis.modulus) + ")");
      model_of[row] = it->second;
      phase_of[row] = static_cast<std::size_t>(g);
    }
    std::vector<std::size_t> row_of(names.size() * M, 0);  // 1-based row of each (model, phase); 0 = none
    for (std::size_t row = 0; row < t.rows.size(); ++row) {
      auto& slot = row_of[model_of[row] * M + phase_of[row]];
      if (slot)
        fail(src + " row " + std::to_string(row + 1) + " phase", phase_of[row],
             "appears twice for model " + detail::excerpt(names[model_of[row]]) + " (rows " + std::to_string(slot) +
                 " and " + std::to_string(row + 1) + ")");
      slot = row + 1;
    }
    for (std::size_t m = 0; m < names.size(); ++m)
      for (std::size_t g = 0; g < M; ++g)
        if (!row_of[m * M + g])
          fail(src + " model " + detail::excerpt(names[m]) + " phase " + std::to_string(g), "(no row)",
               "is missing: every model needs one row for each phase 0.." + std::to_string(M - 1) +
                   " (analysis.modulus = " + std::to_string(M) + ")");
    // Pass 2: the counts (rows == models × M now, so the storage is proportional to the file).
    std::vector<std::string> extra_names;
    for (auto e : extra_cols) extra_names.push_back(detail::excerpt(t.header[e]));
    for (const auto& n : names) {
      phase_counts pc;
      pc.model = std::string(n);
      pc.trials.assign(M, 0);
      pc.hits.assign(M, 0);
      for (auto e : extra_cols) pc.extra.push_back({t.header[e], std::vector<double>(M, 0.0)});
      r.models.push_back(std::move(pc));
    }
    for (std::size_t row = 0; row < t.rows.size(); ++row) {
      const auto& f = t.rows[row];
      auto& pc = r.models[model_of[row]];
      const std::size_t g = phase_of[row];
      auto where = [&] { return src + " row " + std::to_string(row + 1) + " (model " + detail::excerpt(pc.model) +
                                " phase " + std::to_string(g) + ")"; };
      detail::naming_place(where, [&] {
        pc.trials[g] = parse_int(f[ct], "trials");
        pc.hits[g] = parse_int(f[ch], "hits");
        for (std::size_t e = 0; e < extra_cols.size(); ++e)
          pc.extra[e].values[g] = parse_double(f[extra_cols[e]], extra_names[e]);
        return 0;
      });
      if (pc.trials[g] < 0 || pc.trials[g] > read_limits::trials || pc.hits[g] < 0 || pc.hits[g] > pc.trials[g])
        detail::require_read_counts(pc.trials[g], pc.hits[g], where());
      for (std::size_t e = 0; e < run_cols.size(); ++e) {
        const std::string& v = f[run_cols[e]];
        if (row == 0) r.columns[e].second = v;
        else if (v != r.columns[e].second)
          fail(where() + " " + detail::excerpt(r.columns[e].first), detail::excerpt(v),
               "run columns must be the same on every row (row 1: " + detail::excerpt(r.columns[e].second) + ")");
      }
    }
    for (auto& entry : paired) {
      const std::string& model = entry.first;  // (no structured binding: clang 14 cannot capture one)
      auto it = std::find_if(r.models.begin(), r.models.end(), [&](const phase_counts& m) { return m.model == model; });
      if (it == r.models.end()) fail(src + " paired_counts model", detail::excerpt(model), "has no rows");
      it->paired = std::move(entry.second);
    }
    r.validate();
    return r;
  });
}

/// Parses a JSON sweep output back into counts (statistics are ignored: they are recomputed).
/// Checks as parse_sweep_csv (read_limits before allocating, every phase of every model once).
inline sweep_result parse_sweep_json(std::string_view text, std::string_view source = "json") {
  const std::string src(source);
  return detail::naming_source(src, [&] {
    // Two passes over the text, each building only what it needs: the settings as a plain
    // object, the models with their keys in file order (the order of the extra columns).
    // (One ordered document would copy a large provenance each time its object grows.)
    auto head = parse_json_as<nlohmann::json>(text, source, {"models"});
    const auto& fmt = require_member(head, "format", src);
    if (!(fmt.is_string() && fmt.get_ref<const std::string&>() == sweep_format_name))
      fail(src + ".format", detail::json_excerpt(fmt), std::string("must be \"") + sweep_format_name + "\"");
    sweep_result r;
    r.analysis = analysis_from_json(require_member(head, "analysis", src));
    const auto prov = head.find("provenance");
    if (prov == head.end()) fail(src + ".provenance", "(absent)", "is required");
    r.prov = provenance_from_json(std::move(*prov), src);  // moves a large config instead of copying it
    detail::require_read_limits(r.analysis, src);
    if (const auto cols = head.find("columns"); cols != head.end()) {
      if (!cols->is_object()) fail(src + ".columns", detail::json_excerpt(*cols), "must be an object of strings");
      require(static_cast<std::int64_t>(cols->size()) <= read_limits::extra_columns, src + ".columns", cols->size(),
              "must number at most 64 (read limit)");
    }
    const auto body = parse_json_as<ordered_json>(text, source, {"format", "provenance", "analysis"});
    if (const auto cols = body.find("columns"); cols != body.end())  // in file order
      for (auto it = cols->begin(); it != cols->end(); ++it) {
        if (!it.value().is_string())
          fail(src + ".columns." + detail::excerpt(it.key()), detail::json_excerpt(it.value()), "must be a string");
        detail::require_name(it.key(), src + ".columns");
        r.columns.emplace_back(it.key(), it.value().get<std::string>());
      }
    const auto& models = require_member(body, "models", src);
    if (!models.is_array()) fail(src + ".models", detail::json_excerpt(models), "must be an array");
    detail::require_read_work(r.analysis, models.size(), src);
    static const std::set<std::string> standard{"phase", "trials", "hits", "recall", "ci_low", "ci_high"};
    const auto M = static_cast<std::size_t>(r.analysis.modulus);
    std::set<std::string> seen;
    for (std::size_t mi = 0; mi < models.size(); ++mi) {
      const auto& mo = models[mi];
      const std::string at = src + ".models[" + std::to_string(mi) + "]";
      phase_counts pc;
      const auto& name = require_member(mo, "model", at);
      if (!name.is_string()) fail(at + ".model", detail::json_excerpt(name), "must be a string");
      pc.model = name.get<std::string>();
      detail::require_name(pc.model, at + ".model");
      const std::string where = src + " model " + detail::excerpt(pc.model);
      if (!seen.insert(pc.model).second) fail(where, "(twice)", "each model may appear once");
      const auto& phases = require_member(mo, "phases", where);
      if (!phases.is_array() || phases.size() != M)
        fail(where + " phases", detail::json_excerpt(phases),
             "must be an array of analysis.modulus = " + std::to_string(M) + " phases");
      pc.trials.assign(M, 0);
      pc.hits.assign(M, 0);
      for (std::size_t g = 0; g < M; ++g) {
        const auto& p = phases[g];
        auto pw = [&] { return where + " phase " + std::to_string(g); };
        if (!p.is_object()) fail(pw(), detail::json_excerpt(p), "must be a JSON object");
        auto get_int = [&](const char* key) {
          const auto it = p.find(key);
          if (it == p.end()) fail(pw() + " " + key, "(absent)", "is required");
          if (!it->is_number_integer() || (it->is_number_unsigned() && it->template get<std::uint64_t>() > (1ULL << 62)))
            fail(pw() + " " + key, detail::json_excerpt(*it), "must be an integer");
          return it->template get<std::int64_t>();
        };
        if (const auto ph = get_int("phase"); ph != static_cast<std::int64_t>(g))
          fail(pw() + " phase", ph, "must equal its index " + std::to_string(g) + " in phases");
        pc.trials[g] = get_int("trials");
        pc.hits[g] = get_int("hits");
        if (pc.trials[g] < 0 || pc.trials[g] > read_limits::trials || pc.hits[g] < 0 || pc.hits[g] > pc.trials[g])
          detail::require_read_counts(pc.trials[g], pc.hits[g], pw());
        std::size_t e = 0;
        for (auto it = p.begin(); it != p.end(); ++it) {
          if (standard.contains(it.key())) continue;
          if (!it.value().is_number())
            fail(pw() + " " + detail::excerpt(it.key()), detail::json_excerpt(it.value()),
                 "extra columns must be numbers");
          if (g == 0) {
            require(static_cast<std::int64_t>(pc.extra.size()) < read_limits::extra_columns, where + " extra columns",
                    pc.extra.size() + 1, "must number at most 64 (read limit)");
            pc.extra.push_back({it.key(), std::vector<double>(M, 0.0)});
          }
          if (!(e < pc.extra.size() && pc.extra[e].name == it.key()))
            fail(pw() + " " + detail::excerpt(it.key()), detail::json_excerpt(it.value()),
                 "extra columns must be the same, in the same order, in every phase");
          pc.extra[e].values[g] = it.value().template get<double>();
          ++e;
        }
        if (e != pc.extra.size())
          fail(pw() + " extra columns", e, "must number " + std::to_string(pc.extra.size()) + " as in phase 0");
      }
      if (const auto pj = mo.find("paired"); pj != mo.end()) pc.paired = detail::paired_counts_from_json(*pj, where + " paired");
      r.models.push_back(std::move(pc));
    }
    r.validate();
    return r;
  });
}

/// Parses either form: JSON when the first non-space character (after a UTF-8 byte order
/// mark, if any) is '{', CSV otherwise.
inline sweep_result parse_sweep(std::string_view text, std::string_view source = "input") {
  const std::string_view body = detail::strip_bom(text);
  const auto first = body.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && body[first] == '{') return parse_sweep_json(text, source);
  return parse_sweep_csv(text, source);
}

/// Reads a sweep output file (CSV or JSON).
inline sweep_result read_sweep_file(const std::string& path) { return parse_sweep(read_text_file(path), path); }

struct merge_options {
  bool allow_mixed_builds = false;  ///< accept shards from different git hashes / versions
};

/// Config keys that may differ between shards of one run (ignored when comparing configs).
inline constexpr std::string_view config_ignored_keys[] = {"shard", "threads", "out", "format", "progress"};

/// The config without config_ignored_keys.
inline nlohmann::json config_for_comparison(const nlohmann::json& config) {
  nlohmann::json c = config;
  if (c.is_object())
    for (const auto k : config_ignored_keys) c.erase(std::string(k));
  return c;
}

/// config_for_comparison(a) == config_for_comparison(b), without copying either.
inline bool configs_match(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_object() || !b.is_object()) return a == b;
  const auto ignored = [](const std::string& k) {
    for (const auto i : config_ignored_keys)
      if (k == i) return true;
    return false;
  };
  auto ia = a.begin(), ib = b.begin();  // both in key order (std::map)
  while (true) {
    while (ia != a.end() && ignored(ia.key())) ++ia;
    while (ib != b.end() && ignored(ib.key())) ++ib;
    if (ia == a.end() || ib == b.end()) return ia == a.end() && ib == b.end();
    if (ia.key() != ib.key() || *ia != *ib) return false;
    ++ia;
    ++ib;
  }
}

namespace detail {
/// Up to `limit` items of `items` joined by ", ", with "... (n in all)" when there are more.
inline std::string short_list(const std::vector<std::string>& items, std::size_t limit = 8) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < limit; ++i) s += (i ? ", " : "") + excerpt(items[i]);
  if (items.size() > limit) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}
}  // namespace detail

/// Joins the shards of one run (see the file comment). `sources` (optional, same length) names
/// the inputs in error messages. Throws kvphase::error on missing or duplicate shards, on any
/// mismatch and, when the config records "trials" (T per group, as kvphase-sweep writes it),
/// unless shard i of N holds exactly ⌊(i+1)·T/N⌋ − ⌊i·T/N⌋ trials in every (model, phase)
/// (sim/shard.hpp), so the merged run has T trials in every (model, phase): nothing lost,
/// nothing counted twice. Every error names the input and, for counts, the model and phase.
inline sweep_result merge_shards(const std::vector<sweep_result>& shards, const std::vector<std::string>& sources = {},
                                 const merge_options& options = {}) {
  require(!shards.empty(), "shards", shards.size(), "must be at least one input");
  if (!sources.empty() && sources.size() != shards.size())
    fail("sources.size()", sources.size(), "must be 0 or the number of shards " + std::to_string(shards.size()));
  auto name = [&](std::size_t i) { return sources.empty() ? "input " + std::to_string(i + 1) : sources[i]; };
  for (std::size_t i = 0; i < shards.size(); ++i) detail::naming_source(name(i), [&] { shards[i].validate(); return 0; });
  const std::int64_t N = shards.front().prov.shard_count;  // ≤ max_shard_count (validated)
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
  std::vector<std::string> missing;
  for (std::int64_t s = 0; s < N && missing.size() <= 8; ++s)
    if (owner[static_cast<std::size_t>(s)] < 0) missing.push_back(std::to_string(s) + "/" + std::to_string(N));
  if (!missing.empty())
    fail("shards", detail::short_list(missing),
         "are missing (have " + std::to_string(shards.size()) + " of " + std::to_string(N) + ")");

  const auto& first = shards[static_cast<std::size_t>(owner[0])];
  const std::string first_name = name(static_cast<std::size_t>(owner[0]));
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& s = shards[i];
    if (!options.allow_mixed_builds) {
      if (s.prov.version != first.prov.version)
        fail("version of " + name(i), detail::excerpt(s.prov.version),
             "differs from " + first_name + " (" + detail::excerpt(first.prov.version) + ")");
      if (s.prov.git_hash != first.prov.git_hash)
        fail("git hash of " + name(i), detail::excerpt(s.prov.git_hash),
             "differs from " + first_name + " (" + detail::excerpt(first.prov.git_hash) + ")");
    }
    if (s.prov.seed != first.prov.seed)
      fail("seed of " + name(i), s.prov.seed, "differs from " + first_name + " (" + std::to_string(first.prov.seed) + ")");
    if (!configs_match(s.prov.config, first.prov.config)) {
      std::vector<std::string> diff;
      for (const auto& d : nlohmann::json::diff(config_for_comparison(first.prov.config), config_for_comparison(s.prov.config)))
        diff.push_back(d.value("op", "") + " " + d.value("path", ""));
      fail("config of " + name(i), detail::short_list(diff, 4), "differs from " + first_name + " (configs must match)");
    }
    if (s.columns != first.columns)
      fail("run columns of " + name(i), s.columns.size(), "differ from " + first_name + " (the run configuration must match)");
    if (!(s.analysis == first.analysis))
      fail("analysis of " + name(i), detail::excerpt(to_json(s.analysis).dump(), 400),
           "differs from " + first_name + " (" + detail::excerpt(to_json(first.analysis).dump(), 400) + ")");
    std::vector<std::string> a, b;
    for (const auto& m : s.models) a.push_back(m.model);
    for (const auto& m : first.models) b.push_back(m.model);
    if (a != b)
      fail("models of " + name(i), detail::short_list(a),
           "differ from " + first_name + " (" + detail::short_list(b) + "; same models, same order)");
  }
  // Trials per (model, phase) against the configuration and each shard's range.
  if (const auto& cfg = first.prov.config; cfg.is_object() && cfg.contains("trials")) {
    const auto it = cfg.find("trials");
    if (!it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > read_limits::trials)
      fail("config.trials of " + first_name, detail::json_excerpt(*it), "must be an integer in [1, 2^40]");
    const std::int64_t T = it->get<std::int64_t>();
    const auto at = [&](std::int64_t i) { return static_cast<std::int64_t>(static_cast<__int128_t>(i) * T / N); };
    for (std::int64_t s = 0; s < N; ++s) {
      const std::size_t i = static_cast<std::size_t>(owner[static_cast<std::size_t>(s)]);
      const std::int64_t lo = at(s), hi = at(s + 1);
      for (const auto& m : shards[i].models)
        for (std::size_t g = 0; g < m.trials.size(); ++g)
          if (m.trials[g] != hi - lo)
            fail(name(i) + " model " + detail::excerpt(m.model) + " phase " + std::to_string(g) + " trials", m.trials[g],
                 "must be " + std::to_string(hi - lo) + ": shard " + shards[i].prov.shard_text() + " runs trials [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + ") of config trials = " + std::to_string(T) +
                     " per phase");
    }
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
    if (m.paired) m.paired = stats::paired_counts::zero(m.paired->groups);
  }
  // Sum in shard-index order.
  for (std::int64_t s = 0; s < N; ++s) {
    const std::size_t i = static_cast<std::size_t>(owner[static_cast<std::size_t>(s)]);
    for (std::size_t m = 0; m < out.models.size(); ++m) {
      const auto& src = shards[i].models[m];
      auto& dst = out.models[m];
      if (src.extra != dst.extra) {
        std::string what = "extra columns of " + name(i) + " model " + detail::excerpt(src.model);
        if (src.extra.size() == dst.extra.size())
          for (std::size_t e = 0, found = 0; e < src.extra.size() && !found; ++e)
            for (std::size_t g = 0; g < src.extra[e].values.size() && !found; ++g)
              if (!(src.extra[e].values[g] == dst.extra[e].values[g])) {
                what += " (" + detail::excerpt(src.extra[e].name) + " phase " + std::to_string(g) + ")";
                found = 1;
              }
        fail(what, src.extra.size(),
             "differ from " + first_name + " (per-phase extra values must be identical in every shard)");
      }
      for (std::size_t g = 0; g < dst.trials.size(); ++g) {
        dst.trials[g] += src.trials[g];
        dst.hits[g] += src.hits[g];
      }
      if (src.paired.has_value() != dst.paired.has_value())
        fail("paired counts of " + name(i) + " model " + detail::excerpt(src.model), src.paired.has_value() ? "present" : "absent",
             "must be present in every shard or in none (as in " + first_name + ")");
      if (src.paired) *dst.paired += *src.paired;
    }
  }
  out.validate();
  return out;
}

}  // namespace kvphase::io
