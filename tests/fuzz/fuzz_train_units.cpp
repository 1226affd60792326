// libFuzzer target: the unit-file reader behind train_phase --merge (io::parse_train_units). An
// input it accepts must give units whose counts are in range and that write back to JSON which
// reads back to the same units.
#include <kvphase/io/train_units.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  kvphase::fuzz::expect_result_or_error([&] {
    constexpr kvphase::index_t positions = 4;
    const auto file = io::parse_train_units(kvphase::fuzz::as_text(data, size), "fuzz.json", positions);
    io::ordered_json again = {{"config", file.config}, {"shard", file.shard}, {"units", io::ordered_json::array()}};
    for (const auto& u : file.units) {
      kvphase::fuzz::check(!u.ablation.empty() && u.ablation[0].component == "none", "a baseline row first");
      for (const auto& r : u.ablation)
        for (std::size_t p = 0; p < r.counts.hits.size(); ++p)
          kvphase::fuzz::check(r.counts.trials[p] >= 1 && r.counts.hits[p] >= 0 && r.counts.hits[p] <= r.counts.trials[p],
                               "0 <= hits <= trials, trials >= 1");
      again["units"].push_back(io::to_json(u));
    }
    const auto back = io::parse_train_units(io::json_text(again), "again.json", positions);
    kvphase::fuzz::check(back.units.size() == file.units.size(), "the units write and read back");
    for (std::size_t i = 0; i < back.units.size(); ++i)
      kvphase::fuzz::check(io::to_json(back.units[i]) == io::to_json(file.units[i]), "a unit reads back unchanged");
  });
  return 0;
}
