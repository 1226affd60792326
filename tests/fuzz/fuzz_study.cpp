// libFuzzer target: the study-file reader behind kvphase-sweep --grid and kvphase-merge
// (io::parse_study). An input it accepts must give a bounded number of units, each with flags
// and a label, and the same content must give the same hash when read again.
#include <kvphase/io/study.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  kvphase::fuzz::expect_result_or_error([&] {
    const auto text = kvphase::fuzz::as_text(data, size);
    const io::study s = io::parse_study(text, "fuzz.json");
    kvphase::fuzz::check(s.units() >= 1 && s.shards >= 1, "at least one unit and one shard");
    const std::int64_t last = s.units() - 1;
    for (std::int64_t k : {std::int64_t{0}, last / 2, last}) {
      (void)s.unit_flags(k);
      kvphase::fuzz::check(!s.unit_label(k).empty(), "every unit has a label");
    }
    kvphase::fuzz::check(io::parse_study(text, "again.json").hash == s.hash, "the hash depends on the content only");
  });
  return 0;
}
