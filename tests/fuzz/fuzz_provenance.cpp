// libFuzzer target: the provenance reader. Input starting with '{' is a provenance JSON object
// (io::parse_json_as + io::provenance_from_json); anything else is a block of CSV comment lines
// (io::provenance_from_csv_comments, which parses the "# provenance_json:" line). What it
// accepts must be valid and round-trip through both forms.
#include <kvphase/io/json.hpp>
#include <kvphase/io/provenance.hpp>

#include <string>
#include <vector>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  const std::string_view text = kvphase::fuzz::as_text(data, size);
  kvphase::fuzz::expect_result_or_error([&] {
    io::provenance p;
    if (!text.empty() && text.front() == '{') {
      p = io::provenance_from_json(io::parse_json_as<nlohmann::json>(text, "fuzz.json"), "fuzz.json");
    } else {
      std::vector<std::string> lines;
      for (std::size_t at = 0; at <= text.size();) {
        auto end = text.find('\n', at);
        if (end == std::string_view::npos) end = text.size();
        lines.emplace_back(text.substr(at, end - at));
        at = end + 1;
      }
      p = io::provenance_from_csv_comments(lines, "fuzz.csv");
    }
    p.validate();
    const auto j = io::to_json(p);
    kvphase::fuzz::check(io::to_json(io::provenance_from_json(j)) == j, "provenance JSON round trip");
    std::vector<std::string> lines;
    const std::string c = io::to_csv_comment(p);
    for (std::size_t at = 0; at < c.size();) {
      const auto end = c.find('\n', at);
      lines.push_back(c.substr(at, end - at));
      at = end + 1;
    }
    kvphase::fuzz::check(io::to_json(io::provenance_from_csv_comments(lines)) == j, "provenance CSV round trip");
  });
  return 0;
}
