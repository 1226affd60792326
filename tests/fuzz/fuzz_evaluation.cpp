// libFuzzer target: the evaluation-results reader behind kvphase-analyze (io::parse_evaluation,
// CSV and JSON Lines). An input it accepts must give counts that account for every record and
// summaries that write (cheap analysis settings).
#include <kvphase/io/evaluation.hpp>
#include <kvphase/stats/summary.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  for (int variant = 0; variant < 2; ++variant) {
    kvphase::fuzz::expect_result_or_error([&] {
      io::evaluation_options o{.stride = 4, .modulus = variant ? 8 : 0};
      if (variant) o.by = {"model"};
      const auto d = io::parse_evaluation(kvphase::fuzz::as_text(data, size), "fuzz.csv", o);
      const auto r = io::evaluation_result(d, o, {.permutations = 19, .bootstrap_replicates = 19, .seed = 1},
                                           io::make_provenance(nlohmann::json::object(), 1, 1));
      std::int64_t n = 0;
      for (const auto& m : r.models)
        for (auto t : m.trials) n += t;
      kvphase::fuzz::check(n == static_cast<std::int64_t>(d.records.size()), "counts account for every record");
      const auto text = io::sweep_text(r, kvphase::stats::summarize(r.models, r.analysis), "json");
      kvphase::fuzz::check(!text.empty(), "the result writes");
    });
  }
  return 0;
}
