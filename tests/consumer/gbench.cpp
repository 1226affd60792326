// The Google Benchmark entry point (kvphase/bench/gbench.hpp) as docs/performance.md shows it.
#include <kvphase/bench/gbench.hpp>
#include <kvphase/compress/presets.hpp>
namespace kb = kvphase::bench;
// V4-CSA at the real model's shape, 1 and 2 threads
[[maybe_unused]] static const bool registered = [] {
  for (int t : {1, 2})
    kb::register_compress("v4_csa/threads:" + std::to_string(t), kvphase::compress::v4_csa(),
                          {.tokens = 16384, .dim = 4096, .head_dim = 512, .threads = t});
  return true;
}();
BENCHMARK_MAIN();
