// kvphase-analyze: the phase analysis of an external evaluation (a real model's answers).
//
//   kvphase-analyze results.jsonl --stride 4 --format json --out r.json
//   kvphase-analyze results.csv --stride 4 --modulus 8 --by model,depth --out r.csv
//
// Reads one record per item placement (CSV with a header, or JSON Lines): `position` (the
// target's token index) or `phase`, `correct` (0/1) and/or `score`, optional `item` (the same
// item at every phase: paired analysis) and the --by condition columns (io/evaluation.hpp). It
// writes the output of kvphase-sweep — per-phase table with intervals, gap, uniformity and
// periodicity tests, and with items Cochran's Q, McNemar best vs worst phase and the flip count;
// with scores the per-phase mean with its interval, F tests and Friedman — as CSV or JSON with
// provenance (scripts/plot.py draws it). Errors name the file, line, column and rule; exit 2.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include <kvphase/io/csv.hpp>
#include <kvphase/io/evaluation.hpp>
#include <kvphase/io/provenance.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

namespace cl = kvphase::cli;
namespace io = kvphase::io;

int main(int argc, char** argv) {
  CLI::App app{"Per-phase analysis of an external evaluation's per-item results (CSV or JSON Lines).",
               "kvphase-analyze"};
  std::string input, out, format, by, baseline = "full";
  io::evaluation_options o;
  std::int64_t permutations = 9999, bootstrap = 2000;
  std::uint64_t seed = 1;
  double confidence = 0.95;
  app.add_option("input", input, "per-item results: CSV with a header row, or JSON Lines")->required();
  cl::add_int(app, "--stride", o.stride, 2, 4096, "S: the compression stride (the period tested)");
  cl::add_int(app, "--modulus", o.modulus, 0, 4096, "M phase groups: (position - origin) mod M (0: the stride)");
  cl::add_int(app, "--origin", o.origin, -(std::int64_t(1) << 40) + 1, (std::int64_t(1) << 40) - 1,
              "position of phase 0 (the grid origin)");
  app.add_option("--by", by, "condition columns, comma-separated (one output model per combination)");
  app.add_option("--position-column", o.columns.position, "name of the position column")->capture_default_str();
  app.add_option("--phase-column", o.columns.phase, "name of the phase column")->capture_default_str();
  app.add_option("--correct-column", o.columns.correct, "name of the 0/1 outcome column")->capture_default_str();
  app.add_option("--score-column", o.columns.score, "name of the continuous score column")->capture_default_str();
  app.add_option("--item-column", o.columns.item, "name of the item id column")->capture_default_str();
  cl::add_int(app, "--permutations", permutations, 0, 1000000, "permutations of the periodicity and paired tests");
  cl::add_int(app, "--bootstrap", bootstrap, 0, 1000000, "bootstrap replicates of the gap interval");
  cl::add_u64(app, "--seed", seed, "seed of the permutation and bootstrap streams");
  cl::add_real(app, "--confidence", confidence, 1e-6, 1 - 1e-6, "confidence of the intervals");
  app.add_option("--baseline", baseline, "condition the others' gaps are contrasted with (when present)")
      ->capture_default_str();
  app.add_option("--format", format, "csv or json (default: from --out's extension, else csv)")
      ->check(CLI::IsMember({"csv", "json"}));
  app.add_option("--out,-o", out, "output file (default: standard output)");
  if (const auto status = cl::parse(app, argc, argv, "kvphase-analyze")) return *status;
  return cl::run("kvphase-analyze", [&] {
    if (format.empty()) format = (out.size() >= 5 && out.ends_with(".json")) ? "json" : "csv";
    std::stringstream ss(by);
    for (std::string col; std::getline(ss, col, ',');) o.by.push_back(col);
    o.validate();
    if (!out.empty()) cl::check_writable_file(out, "out");
    const io::evaluation_data d = io::parse_evaluation(io::read_text_file(input), input, o);
    nlohmann::json config{{"program", "kvphase-analyze"},
                          {"input", input},
                          {"stride", o.stride},
                          {"modulus", o.groups()},
                          {"origin", o.origin},
                          {"by", o.by},
                          {"columns",
                           {{"position", o.columns.position},
                            {"phase", o.columns.phase},
                            {"correct", o.columns.correct},
                            {"score", o.columns.score},
                            {"item", o.columns.item}}},
                          {"records", d.records.size()},
                          {"items", d.items.size()},
                          {"format", format},
                          {"out", out}};
    config = nlohmann::json::parse(config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    auto prov = io::make_provenance(std::move(config), seed, 1, argc, argv);
    const io::sweep_result r = io::evaluation_result(d, o,
                                                     {.confidence = confidence,
                                                      .permutations = permutations,
                                                      .bootstrap_replicates = bootstrap,
                                                      .seed = seed,
                                                      .baseline = baseline},
                                                     std::move(prov));
    const std::string text = io::sweep_text(r, kvphase::stats::summarize(r.models, r.analysis), format);
    if (out.empty()) std::cout << text << std::flush;
    else {
      std::ofstream f(out, std::ios::binary);
      kvphase::require(static_cast<bool>(f), "out", out, "cannot be opened for writing");
      f << text;
      f.close();
      kvphase::require(static_cast<bool>(f), "out", out, "could not be written");
    }
    if (!d.has_correct)
      std::cerr << "kvphase-analyze: no " << o.columns.correct
                << " column: the per-phase table counts records (hits 0); read the score statistics\n";
    return 0;
  });
}
