// Guide example (docs/io.md): sweep counts written as kvphase-sweep/1 CSV with provenance, read
// back, summarised, and two shards merged into the whole run.
#include <kvphase/io.hpp>
#include <kvphase/kvphase.hpp>

#include <cstdio>
#include <sstream>

namespace io = kvphase::io;
using counts = std::vector<std::int64_t>;

// A sweep output of two models over 4 phase groups, shard i of n.
io::sweep_result make(std::int64_t i, std::int64_t n, counts trials, counts cmp, counts full) {
  io::sweep_result r;
  r.prov = io::make_provenance({{"task", "needle"}}, /*seed=*/1, /*threads=*/1);
  r.prov.shard_index = i;
  r.prov.shard_count = n;
  r.analysis.seed = 1;  // modulus 4, period 4, Wilson intervals, 9999 permutations (defaults)
  r.models = {{"compressed", trials, std::move(cmp)}, {"full", trials, std::move(full)}};
  return r;
}

int main() {
  const io::sweep_result whole = make(0, 1, {400, 400, 400, 400}, {396, 0, 0, 4}, {389, 391, 394, 388});
  std::ostringstream csv;
  // statistics come from kvphase::stats; io writes them (provenance comments, analysis,
  // summaries, one row per phase)
  const auto summaries = kvphase::stats::summarize(whole.models, whole.analysis);
  io::write_sweep_csv(csv, whole, summaries);
  const io::sweep_result back = io::parse_sweep(csv.str());
  std::printf("csv round trip keeps the counts: %s\n", back.models == whole.models ? "yes" : "no");
  for (const kvphase::stats::model_summary& s : summaries)
    std::printf("%s: gap %.4f [%.4f, %.4f], uniformity p %.3g, period 4 p %.4f\n", s.model.c_str(), s.gap.gap,
                s.gap.ci.low, s.gap.ci.high, s.uniformity.p, s.periodicity.p);

  // Each shard holds the counts of its trials; merge_shards checks and sums them (any order).
  const io::sweep_result s0 = make(0, 2, {200, 200, 200, 200}, {199, 0, 0, 1}, {194, 196, 195, 194});
  const io::sweep_result s1 = make(1, 2, {200, 200, 200, 200}, {197, 0, 0, 3}, {195, 195, 199, 194});
  const io::sweep_result merged = io::merge_shards({s1, s0});
  std::printf("merged_from %lld, counts equal the whole run: %s\n",
              static_cast<long long>(merged.prov.merged_from), merged.models == whole.models ? "yes" : "no");
  try {
    (void)io::merge_shards({s0, s0});
  } catch (const kvphase::error& e) {
    std::printf("error: %s\n", e.what());
  }
}
