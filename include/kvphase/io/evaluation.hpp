#pragma once
/// \file io/evaluation.hpp
/// Per-item results of an external evaluation (a real model's answers), read from CSV or JSON
/// Lines, turned into the counts of a phase sweep (io::sweep_result) so that the same
/// statistics and the same writers serve them (kvphase-analyze).
///
/// Input: one record per (item, target placement). Columns (names remappable,
/// evaluation_columns):
///   position  the target's token index (phase = (position − origin) mod M), or
///   phase     the phase directly, an integer in [0, M) (give one of the two);
///   correct   0/1 (also true/false), and/or
///   score     a finite number (e.g. a log-probability margin);
///   item      optional: the same item at several phases → paired analysis (every item must then
///             appear exactly once at every phase 0 … M−1 of its condition);
///   the --by columns: conditions (e.g. model, depth): one output model per combination of
///             their values, named by the values joined with '|' in --by order ("all" without
///             --by), in order of first appearance; other columns are ignored.
/// CSV: a header row, '#' comment lines allowed (io/csv.hpp). JSON Lines: one JSON object per
/// non-blank line; values may be numbers, strings (conditions, item) or booleans (correct). A
/// column is in use when it is in the CSV header or in the first JSON record; every record then
/// has it. Every error names the source, the line, the column and the rule (kvphase::error);
/// nothing is allocated beyond a small multiple of the input's size, and read_limits bound the
/// conditions (1024) and the groups (4096; 64 with items).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvphase/core/error.hpp"
#include "kvphase/io/csv.hpp"
#include "kvphase/io/json.hpp"
#include "kvphase/io/sweep_format.hpp"
#include "kvphase/stats/paired_counts.hpp"

namespace kvphase::io {

/// Names of the input columns.
struct evaluation_columns {
  std::string position = "position";
  std::string phase = "phase";
  std::string correct = "correct";
  std::string score = "score";
  std::string item = "item";
};

/// How records become phase groups.
struct evaluation_options {
  evaluation_columns columns;
  std::vector<std::string> by;  ///< condition columns
  std::int64_t stride = 4;      ///< S: the period tested (≥ 2)
  std::int64_t modulus = 0;     ///< M phase groups (0: S); a multiple of S
  std::int64_t origin = 0;      ///< φ0: position of phase 0
  [[nodiscard]] std::int64_t groups() const noexcept { return modulus > 0 ? modulus : stride; }
  void validate() const {
    require(stride >= 2 && stride <= read_limits::modulus, "stride", stride, "must be in [2, 4096]");
    require(modulus >= 0 && modulus <= read_limits::modulus, "modulus", modulus,
            "must be in [0, 4096] (0: the stride)");
    require(groups() % stride == 0, "modulus", groups(), "must be a multiple of the stride " + std::to_string(stride));
    require(origin > -(std::int64_t(1) << 40) && origin < (std::int64_t(1) << 40), "origin", origin,
            "must be within ±2^40");
    require(static_cast<std::int64_t>(by.size()) <= read_limits::extra_columns, "by", by.size(),
            "must name at most 64 columns");
    for (const auto& b : by) require(!b.empty(), "by", "\"\"", "column names must be non-empty");
  }
};

/// One record, as read.
struct evaluation_record {
  std::int64_t phase = 0;
  int correct = -1;  ///< −1 when the column is not in use
  double score = 0.0;
  std::size_t condition = 0;  ///< index into evaluation_data::conditions
  std::size_t item = 0;       ///< index into evaluation_data::items (when has_item)
  std::size_t line = 0;
};

/// Records of one input, with what they hold.
struct evaluation_data {
  std::string source;
  bool has_correct = false, has_score = false, has_item = false;
  std::int64_t groups = 0;
  std::vector<std::string> conditions;  ///< in order of first appearance
  std::vector<std::string> items;       ///< distinct item ids, in order of first appearance
  std::vector<evaluation_record> records;
};

namespace detail {

/// A field's value, whichever form it came in.
struct eval_value {
  const std::string* text = nullptr;  ///< CSV
  const nlohmann::json* json = nullptr;
};

/// Reads the records of either form through `field(row, column)`.
class evaluation_builder {
 public:
  evaluation_builder(const evaluation_options& o, std::string src) : o_(o) {
    o_.validate();
    d_.source = std::move(src);
    d_.groups = o_.groups();
  }
  /// Which columns are in use, from the CSV header or the first JSON record.
  void set_columns(const std::vector<std::string>& present) {
    auto has = [&](const std::string& n) { return std::find(present.begin(), present.end(), n) != present.end(); };
    const auto& c = o_.columns;
    use_position_ = has(c.position);
    use_phase_ = has(c.phase);
    d_.has_correct = has(c.correct);
    d_.has_score = has(c.score);
    d_.has_item = has(c.item);
    if (use_position_ && use_phase_)
      fail(d_.source + " columns", c.position + " and " + c.phase, "give the target's position or its phase, not both");
    if (!use_position_ && !use_phase_)
      fail(d_.source + " columns", "(neither " + c.position + " nor " + c.phase + ")",
           "must include the target's position or its phase (rename with --position-column / --phase-column)");
    if (!d_.has_correct && !d_.has_score)
      fail(d_.source + " columns", "(neither " + c.correct + " nor " + c.score + ")",
           "must include correct (0/1) and/or score (rename with --correct-column / --score-column)");
    for (const auto& b : o_.by)
      if (!has(b)) fail(d_.source + " --by column", excerpt(b), "is not a column of the input");
    if (d_.has_item)
      require(d_.groups <= stats::max_paired_groups, d_.source + " modulus", d_.groups,
              "must be <= 64 for the paired analysis of items (drop the item column for an unpaired one)");
  }
  /// Adds one record; `get(name)` returns the field or nullopt when the record lacks it.
  template <class Get>
  void add(std::size_t line, Get&& get) {
    const auto& c = o_.columns;
    auto where = [&](const std::string& col) {
      return d_.source + " line " + std::to_string(line) + " column " + excerpt(col);
    };
    auto need = [&](const std::string& col) {
      auto v = get(col);
      if (!v) fail(where(col), "(absent)", "is required in every record (it is in use)");
      return *v;
    };
    evaluation_record r;
    r.line = line;
    if (use_position_) {
      const std::int64_t p = as_int(need(c.position), where(c.position));
      require(p > -(std::int64_t(1) << 40) && p < (std::int64_t(1) << 40), where(c.position), p,
              "must be within ±2^40");
      r.phase = ((p - o_.origin) % d_.groups + d_.groups) % d_.groups;
    } else {
      r.phase = as_int(need(c.phase), where(c.phase));
      if (r.phase < 0 || r.phase >= d_.groups)
        fail(where(c.phase), r.phase, "must be in [0, modulus = " + std::to_string(d_.groups) + ")");
    }
    if (d_.has_correct) r.correct = as_correct(need(c.correct), where(c.correct));
    if (d_.has_score) {
      r.score = as_double(need(c.score), where(c.score));
      if (!std::isfinite(r.score)) fail(where(c.score), nonfinite_text(r.score), "must be finite");
    }
    std::string cond;
    for (const auto& b : o_.by) {
      const std::string v = as_text(need(b), where(b));
      cond += (cond.empty() ? "" : "|") + v;
    }
    if (o_.by.empty()) cond = "all";
    auto it = cond_index_.find(cond);
    if (it == cond_index_.end()) {
      const std::string by_col = o_.by.empty() ? std::string("by") : o_.by.front();
      require(static_cast<std::int64_t>(d_.conditions.size()) < read_limits::models, where(by_col), excerpt(cond),
              "makes more than 1024 conditions (read limit)");
      require_name(cond, where(by_col));
      it = cond_index_.emplace(cond, d_.conditions.size()).first;
      d_.conditions.push_back(cond);
    }
    r.condition = it->second;
    if (d_.has_item) {
      const std::string id = as_text(need(c.item), where(c.item));
      if (id.empty()) fail(where(c.item), "\"\"", "must be non-empty");
      auto jt = item_index_.find(id);
      if (jt == item_index_.end()) {
        jt = item_index_.emplace(id, d_.items.size()).first;
        d_.items.push_back(id);
      }
      r.item = jt->second;
    }
    d_.records.push_back(r);
  }
  evaluation_data take() {
    if (d_.records.empty()) fail(d_.source, "(no records)", "must hold at least one record");
    return std::move(d_);
  }

 private:
  static std::int64_t as_int(const eval_value& v, const std::string& where) {
    if (v.text) return naming_place([&] { return where; }, [&] { return parse_int(*v.text, "value"); });
    if (!v.json->is_number_integer() || (v.json->is_number_unsigned() && v.json->get<std::uint64_t>() > (1ULL << 62)))
      fail(where, json_excerpt(*v.json), "must be an integer");
    return v.json->get<std::int64_t>();
  }
  static double as_double(const eval_value& v, const std::string& where) {
    if (v.text) return naming_place([&] { return where; }, [&] { return parse_double(*v.text, "value"); });
    if (!v.json->is_number()) fail(where, json_excerpt(*v.json), "must be a number");
    return v.json->get<double>();
  }
  static int as_correct(const eval_value& v, const std::string& where) {
    if (v.text) {
      const std::string& s = *v.text;
      if (s == "1" || s == "true" || s == "True" || s == "TRUE") return 1;
      if (s == "0" || s == "false" || s == "False" || s == "FALSE") return 0;
      fail(where, excerpt(s), "must be 0 or 1 (or true / false)");
    }
    if (v.json->is_boolean()) return v.json->get<bool>() ? 1 : 0;
    if (v.json->is_number_integer() && (v.json->get<std::int64_t>() == 0 || v.json->get<std::int64_t>() == 1))
      return static_cast<int>(v.json->get<std::int64_t>());
    fail(where, json_excerpt(*v.json), "must be 0 or 1 (or true / false)");
  }
  static std::string as_text(const eval_value& v, const std::string& where) {
    if (v.text) return *v.text;
    if (v.json->is_string()) {
      const auto& s = v.json->get_ref<const std::string&>();
      require_name(s.empty() ? std::string_view("?") : std::string_view(s), where);
      return s;
    }
    if (v.json->is_number_integer() || v.json->is_boolean()) return v.json->dump();
    if (v.json->is_number()) return format_shortest(v.json->get<double>());
    fail(where, json_excerpt(*v.json), "must be a string, a number or a boolean");
  }

  evaluation_options o_;
  evaluation_data d_;
  bool use_position_ = false, use_phase_ = false;
  std::map<std::string, std::size_t> cond_index_, item_index_;
};

}  // namespace detail

/// Parses CSV evaluation results (see the file comment).
inline evaluation_data parse_evaluation_csv(std::string_view text, std::string_view source,
                                            const evaluation_options& o) {
  const std::string src(source);
  return detail::naming_source(src, [&] {
    const csv_table t = parse_csv(text, source);
    detail::evaluation_builder b(o, src);
    b.set_columns(t.header);
    std::map<std::string, std::size_t> col;
    for (std::size_t i = 0; i < t.header.size(); ++i) col.emplace(t.header[i], i);
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      const auto& row = t.rows[r];
      b.add(t.row_lines[r], [&](const std::string& name) -> std::optional<detail::eval_value> {
        const auto it = col.find(name);
        if (it == col.end()) return std::nullopt;
        return detail::eval_value{&row[it->second], nullptr};
      });
    }
    return b.take();
  });
}

/// Parses JSON Lines evaluation results (see the file comment).
inline evaluation_data parse_evaluation_jsonl(std::string_view text, std::string_view source,
                                              const evaluation_options& o) {
  const std::string src(source);
  return detail::naming_source(src, [&] {
    text = detail::strip_bom(text);
    detail::evaluation_builder b(o, src);
    bool first = true;
    std::size_t line = 0, pos = 0;
    while (pos < text.size()) {
      ++line;
      std::size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view l = text.substr(pos, end - pos);
      pos = end + 1;
      if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      const std::string at = src + " line " + std::to_string(line);
      const nlohmann::json j = parse_json(l, at);
      if (!j.is_object()) fail(at, detail::json_excerpt(j), "must be a JSON object (one record per line)");
      if (first) {
        std::vector<std::string> keys;
        for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
        b.set_columns(keys);
        first = false;
      }
      b.add(line, [&](const std::string& name) -> std::optional<detail::eval_value> {
        const auto it = j.find(name);
        if (it == j.end() || it->is_null()) return std::nullopt;
        return detail::eval_value{nullptr, &*it};
      });
    }
    if (first) fail(src, "(no records)", "must hold at least one record");
    return b.take();
  });
}

/// Either form: JSON Lines when the first non-space character is '{', CSV otherwise.
inline evaluation_data parse_evaluation(std::string_view text, std::string_view source, const evaluation_options& o) {
  const std::string_view body = detail::strip_bom(text);
  const auto first = body.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && body[first] == '{') return parse_evaluation_jsonl(text, source, o);
  return parse_evaluation_csv(text, source, o);
}

/// Per-condition counts: trials[g] = records at phase g, hits[g] = correct ones (0 without a
/// correct column); with scores, their per-phase moments; with items, the paired counts and the
/// Friedman ranks (every item exactly once at every phase of its condition, else a
/// kvphase::error naming the item, the phase and the lines). Models are the conditions, in order.
inline std::vector<stats::phase_counts> evaluation_counts(const evaluation_data& d) {
  const auto M = static_cast<std::size_t>(d.groups);
  std::vector<stats::phase_counts> out(d.conditions.size());
  for (std::size_t c = 0; c < out.size(); ++c) {
    out[c].model = d.conditions[c];
    out[c].trials.assign(M, 0);
    out[c].hits.assign(M, 0);
  }
  for (const auto& r : d.records) {
    auto& m = out[r.condition];
    ++m.trials[static_cast<std::size_t>(r.phase)];
    if (d.has_correct) m.hits[static_cast<std::size_t>(r.phase)] += r.correct;
    if (d.has_score) {
      if (!m.scores) m.scores = stats::score_moments::zero(d.groups);
      m.scores->add(r.phase, r.score);
    }
  }
  if (!d.has_item) return out;
  // (condition, item) → 1 + the index of its record at each phase (0 = none)
  std::map<std::pair<std::size_t, std::size_t>, std::vector<std::size_t>> seen;
  for (std::size_t i = 0; i < d.records.size(); ++i) {
    const auto& r = d.records[i];
    auto& v = seen[{r.condition, r.item}];
    if (v.empty()) v.assign(M, 0);
    auto& slot = v[static_cast<std::size_t>(r.phase)];
    if (slot)
      fail(d.source + " line " + std::to_string(r.line) + " item " + detail::excerpt(d.items[r.item]), r.phase,
           "is at this phase twice in condition " + detail::excerpt(d.conditions[r.condition]) + " (lines " +
               std::to_string(d.records[slot - 1].line) + " and " + std::to_string(r.line) + ")");
    slot = i + 1;
  }
  for (auto& m : out) {
    if (d.has_correct) m.paired = stats::paired_counts::zero(d.groups);
    if (d.has_score) m.scores->friedman = stats::friedman_counts::zero(d.groups);
  }
  std::vector<std::uint8_t> outcome(M);
  std::vector<double> score(M);
  for (const auto& [key, lines] : seen) {
    for (std::size_t g = 0; g < M; ++g) {
      if (!lines[g])
        fail(d.source + " item " + detail::excerpt(d.items[key.second]) + " phase " + std::to_string(g), "(no record)",
             "is missing in condition " + detail::excerpt(d.conditions[key.first]) +
                 ": the paired analysis needs every item at every phase (drop the item column for an unpaired one)");
      outcome[g] = static_cast<std::uint8_t>(std::max(d.records[lines[g] - 1].correct, 0));
      score[g] = d.records[lines[g] - 1].score;
    }
    auto& m = out[key.first];
    if (m.paired) m.paired->add_item(std::span<const std::uint8_t>(outcome));
    if (m.scores) m.scores->friedman->add_item(std::span<const double>(score));
  }
  return out;
}

/// The sweep-format result of an evaluation: the counts of evaluation_counts under `analysis`
/// (its modulus and period set from the options), with provenance `prov` and no run columns.
inline sweep_result evaluation_result(const evaluation_data& d, const evaluation_options& o, analysis_options analysis,
                                      provenance prov) {
  o.validate();
  analysis.modulus = o.groups();
  analysis.period = o.stride;
  sweep_result r;
  r.prov = std::move(prov);
  r.analysis = analysis;
  r.models = evaluation_counts(d);
  r.validate();
  return r;
}

}  // namespace kvphase::io
