#pragma once
// Shared by the sweep programs (kvphase-sweep, paper_findings): turns a sim::sweep_result into
// the kvphase-sweep/1 output (io::sweep_result) with provenance, and writes it to a file.

#include <kvphase/core/error.hpp>
#include <kvphase/core/parallel.hpp>
#include <kvphase/io/provenance.hpp>
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/sim/sweep.hpp>

#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvphase::examples {

/// Per-group theory predictions of the compressed and full models (an extra "theory" column).
using theory_columns = std::pair<std::vector<double>, std::vector<double>>;

/// The output of one sweep: provenance (config, seed, threads, shard, command line), analysis
/// settings (modulus = groups, period = the stride, or the groups when S = 1) and the counts of
/// the models "compressed" and "full"; padding sweeps carry a padding_length column.
inline io::sweep_result to_sweep_output(const sim::sweep_result& r, nlohmann::json config, int argc = 0,
                                        const char* const* argv = nullptr,
                                        const std::optional<theory_columns>& theory = std::nullopt) {
  const sim::sweep_config& c = r.config;
  io::sweep_result out;
  out.prov = io::make_provenance(std::move(config), c.seed, parallel::thread_count(c.threads), argc, argv);
  out.prov.shard_index = c.shard.index;
  out.prov.shard_count = c.shard.count;
  out.analysis.modulus = c.groups();
  out.analysis.period = c.op.grid.stride >= 2 ? c.op.grid.stride : c.groups();
  out.analysis.seed = c.seed;
  for (int m = 0; m < 2; ++m) {
    io::phase_counts pc;
    pc.model = m == 0 ? "compressed" : "full";
    const auto& g = m == 0 ? r.compressed : r.full;
    for (const auto& s : g) {
      pc.trials.push_back(s.trials);
      pc.hits.push_back(s.hits);
    }
    if (c.task == sim::task_kind::padding) {
      std::vector<double> L;
      for (auto l : r.labels) L.push_back(static_cast<double>(l));
      pc.extra.push_back({"padding_length", L});
    }
    if (theory) pc.extra.push_back({"theory", m == 0 ? theory->first : theory->second});
    out.models.push_back(std::move(pc));
  }
  return out;
}

/// Writes `text` to `path` (throws kvphase::error naming the path on failure).
inline void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  require(static_cast<bool>(f), "out", path, "cannot be opened for writing");
  f << text;
  f.close();
  require(static_cast<bool>(f), "out", path, "could not be written");
}

}  // namespace kvphase::examples
