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
#include <fstream>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include <kvphase/io/provenance.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

int main(int argc, char** argv) {
  CLI::App app{"Merge the shard outputs of a sharded kvphase-sweep run (CSV or JSON) into one output.", "kvphase-merge"};
  std::vector<std::string> inputs;
  std::string out, format;
  bool allow_mixed = false;
  app.add_option("inputs", inputs, "shard outputs (kvphase-sweep --shard i/N), CSV or JSON")->required();
  app.add_option("--out,-o", out, "output file (default: standard output)");
  app.add_option("--format", format, "csv or json (default: from --out's extension, else the first input's)")
      ->check(CLI::IsMember({"csv", "json"}));
  app.add_flag("--allow-mixed-builds", allow_mixed, "accept shards built from different versions or git hashes");
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
    auto merged = kvphase::io::merge_shards(shards, inputs, {.allow_mixed_builds = allow_mixed});
    merged.prov.date = kvphase::io::utc_now_iso8601();
    if (format.empty()) {
      if (out.size() >= 5 && out.ends_with(".json")) format = "json";
      else if (out.size() >= 4 && out.ends_with(".csv")) format = "csv";
      else format = first_is_json ? "json" : "csv";
    }
    const std::string text =
        kvphase::io::sweep_text(merged, kvphase::stats::summarize(merged.models, merged.analysis), format);
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
