// libFuzzer target: the sweep JSON reader (io::parse_sweep_json: depth limit, two-pass parse,
// provenance and analysis objects, per-phase objects). A file it accepts must write back and
// read back to the same counts (when its analysis settings are cheap enough per input), and
// merging it alone, as shard 0/1, must give its counts.
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  kvphase::fuzz::expect_result_or_error([&] {
    const auto r = io::parse_sweep_json(kvphase::fuzz::as_text(data, size), "fuzz.json");
    if (r.analysis.permutations + r.analysis.bootstrap_replicates <= 200 && r.analysis.modulus <= 64) {
      const auto back = io::parse_sweep_json(io::sweep_text(r, kvphase::stats::summarize(r.models, r.analysis), "json"), "back.json");
      kvphase::fuzz::check(back.models == r.models, "json round trip keeps the models");
    }
    if (r.prov.shard_count == 1) {
      const auto merged = io::merge_shards({r}, {"fuzz.json"});
      kvphase::fuzz::check(merged.models == r.models, "a single whole run merges to itself");
    }
  });
  return 0;
}
