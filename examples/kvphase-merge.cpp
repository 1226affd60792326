// kvphase-merge: joins the shard outputs of a sharded kvphase-sweep run into one output.
//
//   kvphase-merge shard0.csv shard1.csv shard2.json --out merged.csv
//
// Every input is a kvphase-sweep/1 file (CSV or JSON, detected from the content) carrying
// "shard i/N" in its provenance and the per-(model, phase) counts of the trials it ran. The
// merge sums the counts and recomputes recall, intervals, gap and tests with the same code the
// sweep uses, so the result is byte-identical (provenance aside) to the unsharded run.
// It fails with exit status 2 and a message naming the file (and, for counts, the model and
// phase) when a shard is missing or duplicated, when runs differ (config, seed, analysis
// settings, models, build), when a file lacks a (model, phase) row or holds other trials than
// its shard of the config's trials, or when an input cannot be read (docs/reliability.md).
//
//   kvphase-merge --study study.json out/unit-*.csv --out study.csv
//
// With --study, the inputs are the shard files of every unit of a study (kvphase-sweep --grid):
// they are grouped by unit, each unit is merged as above, and the result is one tidy table (CSV:
// each unit's rows with its configuration columns and a last column "unit"; JSON: one merged
// output per unit). An input of another study (name or hash), without a unit, or of a unit the study
// does not have, and a unit without inputs are named and refused (docs/scale-out.md).
#include <fstream>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include <kvphase/io/provenance.hpp>
#include <kvphase/io/study.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

namespace {

namespace io = kvphase::io;

/// Groups the inputs by study unit, merges each unit and joins them (see the file comment).
std::string merge_study(const io::study& st, const std::vector<io::sweep_result>& shards,
                        const std::vector<std::string>& inputs, const io::merge_options& mo, const std::string& format,
                        int argc, char** argv) {
  const std::int64_t units = st.units();
  std::vector<std::vector<std::size_t>> of_unit(static_cast<std::size_t>(units));
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& cfg = shards[i].prov.config;
    auto member = [&](const char* key) -> const nlohmann::json& {
      const auto it = cfg.find(key);
      if (it == cfg.end())
        kvphase::fail(inputs[i] + " config." + key, "(absent)",
                      "is required: the file is not a unit of a study (kvphase-sweep --grid)");
      return *it;
    };
    const auto& name = member("study");
    const auto& hash = member("study_hash");
    const auto& unit = member("unit");
    if (name != st.name)
      kvphase::fail(inputs[i] + " config.study", io::detail::json_excerpt(name), "differs from the study " + st.name);
    if (hash != st.hash)
      kvphase::fail(inputs[i] + " config.study_hash", io::detail::json_excerpt(hash),
                    "differs from " + st.hash + " (the study file changed since the run: rerun or use its version)");
    if (!unit.is_number_integer() || unit.get<std::int64_t>() < 0 || unit.get<std::int64_t>() >= units)
      kvphase::fail(inputs[i] + " config.unit", io::detail::json_excerpt(unit),
                    "must be an integer in [0, " + std::to_string(units) + ")");
    of_unit[static_cast<std::size_t>(unit.get<std::int64_t>())].push_back(i);
  }
  std::vector<std::string> missing;
  for (std::int64_t k = 0; k < units; ++k)
    if (of_unit[static_cast<std::size_t>(k)].empty()) missing.push_back(std::to_string(k) + " (" + st.unit_label(k) + ")");
  if (!missing.empty())
    kvphase::fail("units of study " + st.name, io::detail::short_list(missing, 6),
                  "have no input (" + std::to_string(missing.size()) + " of " + std::to_string(units) + " missing)");
  std::vector<std::pair<std::int64_t, std::string>> tables;
  nlohmann::ordered_json units_json = nlohmann::ordered_json::array();
  for (std::int64_t k = 0; k < units; ++k) {
    std::vector<io::sweep_result> part;
    std::vector<std::string> names;
    for (const auto i : of_unit[static_cast<std::size_t>(k)]) {
      part.push_back(shards[i]);
      names.push_back(inputs[i]);
    }
    auto merged = io::detail::naming_source("unit " + std::to_string(k) + " (" + st.unit_label(k) + ")",
                                            [&] { return io::merge_shards(part, names, mo); });
    merged.prov.launcher.clear();
    merged.prov.job.clear();
    const auto summary = kvphase::stats::summarize(merged.models, merged.analysis);
    if (format == "csv") {
      tables.emplace_back(k, io::sweep_text(merged, summary, "csv"));
    } else {
      units_json.push_back({{"unit", k},
                            {"configuration", st.unit_label(k)},
                            {"result", io::parse_json(io::sweep_text(merged, summary, "json"), "unit " + std::to_string(k))}});
    }
  }
  nlohmann::json config = {{"program", "kvphase-merge"}, {"study", st.name}, {"study_hash", st.hash},
                           {"units", units},         {"shards", st.shards},  {"inputs", inputs.size()}};
  auto prov = io::make_provenance(std::move(config), 0, 1, argc, argv);
  prov.merged_from = static_cast<std::int64_t>(std::min<std::size_t>(inputs.size(), io::max_shard_count));
  if (format == "csv") return io::to_csv_comment(prov) + io::join_study_tables(tables);
  nlohmann::ordered_json j = {{"format", "kvphase-study/1"}, {"provenance", io::to_json(prov)}, {"units", units_json}};
  return j.dump(2) + "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Merge the shard outputs of a sharded kvphase-sweep run (CSV or JSON) into one output.", "kvphase-merge"};
  std::vector<std::string> inputs;
  std::string out, format;
  bool allow_mixed = false;
  std::string study_file;
  app.add_option("inputs", inputs, "shard outputs (kvphase-sweep --shard i/N), CSV or JSON")->required();
  app.add_option("--out,-o", out, "output file (default: standard output)");
  app.add_option("--format", format, "csv or json (default: from --out's extension, else the first input's)")
      ->check(CLI::IsMember({"csv", "json"}));
  app.add_flag("--allow-mixed-builds", allow_mixed, "accept shards built from different versions or git hashes");
  app.add_option("--study", study_file, "study file (kvphase-sweep --grid): merge every unit into one tidy table");
  if (const auto status = kvphase::cli::parse(app, argc, argv, "kvphase-merge")) return *status;
  try {
    std::vector<kvphase::io::sweep_result> shards;
    bool first_is_json = false;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const std::string text = kvphase::io::read_text_file(inputs[i]);
      if (i == 0) {
        const std::size_t bom = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
        const auto p = text.find_first_not_of(" \t\r\n", bom);
        first_is_json = p != std::string::npos && text[p] == '{';
      }
      shards.push_back(kvphase::io::parse_sweep(text, inputs[i]));
    }
    if (format.empty()) {
      if (out.size() >= 5 && out.ends_with(".json")) format = "json";
      else if (out.size() >= 4 && out.ends_with(".csv")) format = "csv";
      else format = first_is_json ? "json" : "csv";
    }
    const kvphase::io::merge_options mo{.allow_mixed_builds = allow_mixed};
    std::string text;
    if (!study_file.empty()) {
      text = merge_study(kvphase::io::parse_study(kvphase::io::read_text_file(study_file), study_file), shards, inputs, mo,
                         format, argc, argv);
    } else {
      auto merged = kvphase::io::merge_shards(shards, inputs, mo);
      merged.prov.date = kvphase::io::utc_now_iso8601();
      merged.prov.launcher.clear();  // the merge is not run by the shards' launcher
      merged.prov.job.clear();
      text = kvphase::io::sweep_text(merged, kvphase::stats::summarize(merged.models, merged.analysis), format);
    }
    if (out.empty()) {
      std::cout << text << std::flush;
    } else {
      std::ofstream f(out, std::ios::binary);
      if (!f) {
        std::cerr << "kvphase-merge: --out = " << out << ": cannot be opened for writing\n";
        return 2;
      }
      f << text;
      f.close();
      if (!f) {
        std::cerr << "kvphase-merge: --out = " << out << ": write failed\n";
        return 2;
      }
      std::cerr << "kvphase-merge: merged " << inputs.size() << " shard(s) into " << out << "\n";
    }
  } catch (const kvphase::error& e) {
    std::cerr << "kvphase-merge: " << e.what() << '\n';
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "kvphase-merge: out of memory while reading or merging the inputs\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kvphase-merge: " << e.what() << '\n';
    return 2;
  }
  return 0;
}
