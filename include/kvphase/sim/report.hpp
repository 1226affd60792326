#pragma once
/// \file sim/report.hpp
/// The experiment floor's last arrows, as library calls every program makes:
///
///   sim::run_sweep(config) ──► sim::sweep_result ──► to_output(result, options) ──► io::sweep_result
///        (counts)                                     (provenance, analysis, models, run columns,
///                                                      the task's label column, the theory column)
///   io::sweep_result ──► stats::summarize ──► io::sweep_text / write_output (CSV or JSON)
///
/// to_output records the configuration twice: as provenance.config (every field of the
/// sweep_config by its field list, plus the program's own extras and the engine actually used)
/// and as run columns on every CSV data row (run_columns()), so outputs concatenate into one
/// tidy table. The theory column is theory::predict_sweep_column's.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvphase/core/error.hpp"
#include "kvphase/core/parallel.hpp"
#include "kvphase/io/csv.hpp"
#include "kvphase/io/fields_json.hpp"
#include "kvphase/io/provenance.hpp"
#include "kvphase/io/sweep_format.hpp"
#include "kvphase/sim/sweep_config.hpp"
#include "kvphase/stats/summary.hpp"
#include "kvphase/theory/sweep_column.hpp"

namespace kvphase::sim {

/// How a sweep result becomes an output.
struct output_options {
  nlohmann::json extra_config = nlohmann::json::object();  ///< program fields added to provenance.config
  int argc = 0;                                            ///< command line for the provenance
  const char* const* argv = nullptr;
  bool theory = false;            ///< add the theory column (throws when not covered: see theory_or_throw)
  index_t period = 0;             ///< period tested (0: the stride, or the groups when S = 1)
};

/// The run columns of a config: preset, chunk_window, stride, origin, pool, raw_window, task,
/// the task's fields (context, dim, …), modulus (the groups), engine (the one used), seed,
/// params_seed, and design when it is not independent.
[[nodiscard]] inline std::vector<std::pair<std::string, std::string>> run_columns(const sweep_config& c) {
  std::vector<std::pair<std::string, std::string>> cols;
  auto num = [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) return io::format_shortest(v);
    else return std::to_string(v);
  };
  cols.emplace_back("preset", c.op.name.empty() ? std::string(compress::to_string(c.op.pool)) : c.op.name);
  cols.emplace_back("chunk_window", num(c.op.grid.window));
  cols.emplace_back("stride", num(c.op.grid.stride));
  cols.emplace_back("origin", num(c.op.grid.origin));
  cols.emplace_back("pool", compress::to_string(c.op.pool));
  cols.emplace_back("raw_window", num(c.window));
  cols.emplace_back("task", std::string(c.task.name()));
  tasks::any_task t = c.task;
  t.visit_fields([&](const char* n, auto& v, unsigned = fields::none) {
    using T = std::remove_cvref_t<decltype(v)>;
    if (std::string_view(n) == "kind") return;
    if constexpr (std::is_same_v<T, bool>) cols.emplace_back(n, v ? "true" : "false");
    else if constexpr (std::is_arithmetic_v<T>) cols.emplace_back(n, num(v));
    else if constexpr (std::is_same_v<T, std::string>) cols.emplace_back(n, v);
    else {
      std::string s;
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + num(v[i]);
      cols.emplace_back(n, s);
    }
  });
  cols.emplace_back("modulus", num(c.groups()));
  cols.emplace_back("engine", to_string(c.resolved_engine()));
  cols.emplace_back("seed", num(c.seed));
  cols.emplace_back("params_seed", num(c.params_seed));
  if (c.design != design_kind::independent) cols.emplace_back("design", to_string(c.design));
  if (c.general()) {  // the general path's model (the exact engines run the default one)
    cols.emplace_back("attention", to_string(c.model.kind));
    cols.emplace_back("rope", compress::to_string(c.op.rope.anchor));
    cols.emplace_back("heads", num(c.op.heads));
    cols.emplace_back("params", compress::to_string(c.model.params));
    if (c.model.kind == model_kind::csa) cols.emplace_back("top_k", num(c.model.top_k));
    if (c.model.indexer.dim > 0) {  // V4's indexer: width, heads and alignment
      cols.emplace_back("indexer_dim", num(c.model.indexer.dim));
      cols.emplace_back("indexer_heads", num(c.model.indexer.heads));
      cols.emplace_back("indexer_align", num(c.model.indexer.align));
    }
    if (c.model.kind == model_kind::nsa) {
      cols.emplace_back("select_blocks", num(c.model.select_blocks));
      // the branch gates (cmp slc win), per head when head_gates are given (head after head)
      std::string g;
      const std::vector<double> shared{c.model.gate_cmp, c.model.gate_slc, c.model.gate_win};
      const auto& v = c.model.head_gates.empty() ? shared : c.model.head_gates;
      for (std::size_t i = 0; i < v.size(); ++i) g += (i ? " " : "") + num(v[i]);
      cols.emplace_back("gates", g);
      if (c.model.gate_std > 0) cols.emplace_back("gate_std", num(c.model.gate_std));
    }
    if (!c.model.layers.empty()) {  // a layer schedule: the layers and the layer read
      cols.emplace_back("layers", c.model.layers);
      cols.emplace_back("read_layer", num(static_cast<index_t>(c.model.read_index() + 1)));
    }
  }
  return cols;
}

/// A warning when the compressed model's recall is near chance at every phase while full
/// attention on the same inputs retrieves (empty otherwise), naming the likely cause. "Near
/// chance": every phase at most max(2·chance, 0.05), and for a csa model whose top_k keeps under a
/// quarter of the entries, also at most twice the share top_k / entries that a random pick of the
/// entries would keep (the level of an indexer whose scores carry no information).
[[nodiscard]] inline std::string recall_warning(const sweep_result& r) {
  const sweep_config& c = r.config;
  if (r.compressed.empty()) return {};
  double best = 0, fh = 0, fn = 0;
  for (std::size_t g = 0; g < r.compressed.size(); ++g) {
    const auto& m = r.compressed[g];
    if (m.trials > 0) best = std::max(best, static_cast<double>(m.hits) / static_cast<double>(m.trials));
    fh += static_cast<double>(r.full[g].hits);
    fn += static_cast<double>(r.full[g].trials);
  }
  double chance = 0.02;
  if (const auto* kv = c.task.get_if<tasks::kv_pairs_config>()) chance = 1.0 / static_cast<double>(kv->codes);
  const double full = fn > 0 ? fh / fn : 0.0;
  double level = std::max(2 * chance, 0.05);
  if (c.model.kind == model_kind::csa) {
    const double pick = static_cast<double>(c.model.top_k) /
                        static_cast<double>(std::max<index_t>(1, c.op.grid.num_entries(c.min_context_tokens())));
    if (pick < 0.25) level = std::max(level, 2 * pick);
  }
  if (best > level || full < 0.5) return {};
  std::string why;
  const bool learned = !c.capabilities().linear || c.op.separate_kv;
  if (c.general() && c.model.params == compress::params_kind::random && learned)
    why = "the compressor's parameters are random (params random): a random payload map, gate or MLP does not "
          "keep the query-key alignment; measure with params identity or planted-early|middle|late";
  else if (c.model.kind == model_kind::csa && c.model.indexer.dim > 0 && c.model.indexer.align < 0.5) {
    char a[32];
    std::snprintf(a, sizeof a, "%g", c.model.indexer.align);
    why = std::string("the indexer's query projections barely agree with its key projection (indexer align ") + a +
          "): its top_k (" + std::to_string(c.model.top_k) + ") is close to a random pick of the entries";
  }
  else if (c.model.kind == model_kind::csa)
    why = "the indexer's top_k (" + std::to_string(c.model.top_k) + ") may drop the target's entries";
  else
    why = "the compressed entries lose the query-key alignment (check the operator, rope and the raw window)";
  char buf[160];
  std::snprintf(buf, sizeof buf, "compressed recall is near chance at every phase (best %.3f, full attention %.3f): ",
                best, full);
  return buf + why;
}

/// The theory column of c, or a kvphase::error naming `theory` and the reason it is not covered.
[[nodiscard]] inline theory::sweep_column theory_or_throw(const sweep_config& c) {
  auto t = theory::predict_sweep_column(c);
  require(t.covered, "theory", "on", "no prediction for this configuration: " + t.reason);
  return t;
}

/// The output of one sweep (see the file comment): provenance (config, seed, threads, shard,
/// command line), analysis settings (modulus = groups, period = the stride, or the groups when
/// S = 1, unless options.period), the models "compressed" and "full" with the task's label column
/// (e.g. padding_length) and, with options.theory, the theory column.
[[nodiscard]] inline io::sweep_result to_output(const sweep_result& r, const output_options& options = {}) {
  const sweep_config& c = r.config;
  // (strings that are not UTF-8, e.g. a name set through the API, become U+FFFD: valid JSON)
  nlohmann::json config =
      nlohmann::json::parse(io::fields_to_json(c).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  config["engine_used"] = to_string(c.resolved_engine());
  if (options.extra_config.is_object()) {
    const auto extra = nlohmann::json::parse(options.extra_config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    for (auto it = extra.begin(); it != extra.end(); ++it) config[it.key()] = it.value();
  }
  io::sweep_result out;
  out.prov = io::make_provenance(std::move(config), c.seed, parallel::thread_count(c.threads), options.argc, options.argv);
  out.prov.shard_index = c.shard.index;
  out.prov.shard_count = c.shard.count;
  out.analysis.modulus = c.groups();
  out.analysis.period = options.period > 0 ? options.period : c.op.grid.stride >= 2 ? c.op.grid.stride : c.groups();
  out.analysis.seed = c.seed;
  out.columns = run_columns(c);
  std::optional<theory::sweep_column> th;
  if (options.theory) th = theory_or_throw(c);
  const std::string_view label_col = c.task.label_column();
  for (int m = 0; m < 2; ++m) {
    io::phase_counts pc;
    pc.model = m == 0 ? "compressed" : "full";
    const auto& g = m == 0 ? r.compressed : r.full;
    for (const auto& s : g) {
      pc.trials.push_back(s.trials);
      pc.hits.push_back(s.hits);
    }
    if (!label_col.empty()) {
      std::vector<double> L;
      for (auto l : r.labels) L.push_back(static_cast<double>(l));
      pc.extra.push_back({std::string(label_col), L});
    }
    if (th) pc.extra.push_back({"theory", m == 0 ? th->compressed : th->full});
    pc.paired = m == 0 ? r.compressed_paired : r.full_paired;
    out.models.push_back(std::move(pc));
  }
  return out;
}

/// The whole output text ("csv" or "json"): summaries computed, then serialised.
[[nodiscard]] inline std::string output_text(const io::sweep_result& out, std::string_view format) {
  return io::sweep_text(out, stats::summarize(out.models, out.analysis), format);
}

/// Writes `text` to `path` (throws kvphase::error naming the path on failure).
inline void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  require(static_cast<bool>(f), "out", path, "cannot be opened for writing");
  f << text;
  f.close();
  require(static_cast<bool>(f), "out", path, "could not be written");
}

}  // namespace kvphase::sim
