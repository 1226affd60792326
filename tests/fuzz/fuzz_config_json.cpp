// libFuzzer target: the config JSON reader (io::parse_json + io::fields_from_json into a
// sim::sweep_config: nested operator spec, chunk grid, RoPE, shard and the task, whose members
// depend on its "kind"). A config it accepts must write back (fields_to_json) and read back into
// a default config to an equal config (fields::equal) with the same stream key.
#include <kvphase/core/fields.hpp>
#include <kvphase/io/fields_json.hpp>
#include <kvphase/io/json.hpp>
#include <kvphase/sim/sweep_config.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  kvphase::fuzz::expect_result_or_error([&] {
    const auto j = io::parse_json(kvphase::fuzz::as_text(data, size), "fuzz.json");
    kvphase::sim::sweep_config c;
    io::fields_from_json(j, c, "config");
    kvphase::sim::sweep_config back;
    io::fields_from_json(io::fields_to_json(c), back, "back");
    kvphase::fuzz::check(kvphase::fields::equal(back, c), "config JSON round trip keeps every field");
    kvphase::fuzz::check(back.stream_key() == c.stream_key(), "config JSON round trip keeps the stream key");
  });
  return 0;
}
