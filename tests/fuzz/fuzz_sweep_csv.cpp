// libFuzzer target: the sweep CSV reader (io::parse_sweep_csv, with io::parse_csv and the
// provenance comment line under it). A file it accepts must write back and read back to the
// same counts (when its analysis settings are cheap enough to recompute per input).
#include <kvphase/io/sweep_format.hpp>
#include <kvphase/stats/summary.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  kvphase::fuzz::expect_result_or_error([&] {
    const auto r = io::parse_sweep_csv(kvphase::fuzz::as_text(data, size), "fuzz.csv");
    if (r.analysis.permutations + r.analysis.bootstrap_replicates <= 200 && r.analysis.modulus <= 64) {
      const auto back = io::parse_sweep_csv(io::sweep_text(r, kvphase::stats::summarize(r.models, r.analysis), "csv"), "back.csv");
      kvphase::fuzz::check(back.models.size() == r.models.size(), "csv round trip keeps the models");
      for (std::size_t m = 0; m < r.models.size(); ++m)
        kvphase::fuzz::check(back.models[m].trials == r.models[m].trials && back.models[m].hits == r.models[m].hits,
                             "csv round trip keeps the counts");
    }
  });
  return 0;
}
