// The in-process roofline probes (bench/roofline.hpp): the read-and-write probe reads what the
// read probe reads and writes every output value once, whatever the sizes and alignment.
#include <catch2/catch.hpp>

#include <kvphase/bench/roofline.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace kb = kvphase::bench;

TEST_CASE("read-and-write probe writes every output value and reads every input value", "[core][roofline]") {
  // sizes around the probe's block (8 streams × 4 batches) and none; outputs shorter and longer
  // than the input, at every float offset from a 64-byte boundary; 1 and 2 threads
  for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(511), std::size_t(512), std::size_t(70001)}) {
    std::vector<float> x(n);
    double want = 0;
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 7);
      want += x[i];
    }
    for (std::size_t m : {std::size_t(0), std::size_t(1), std::size_t(17), n / 4, n + 100}) {
      for (std::size_t off = 0; off < 16; off += 5) {
        std::vector<float> ybuf(m + 32, std::numeric_limits<float>::quiet_NaN());
        float* y = ybuf.data() + off;
        const float s = kb::detail::read_write_once(x.data(), n, y, m);
        INFO("n=" << n << " m=" << m << " off=" << off);
        // small integers: the sum is exact in float whatever the order
        CHECK(double(s) == want);
        std::size_t unwritten = 0;
        for (std::size_t i = 0; i < m; ++i) unwritten += std::isnan(y[i]) ? 1 : 0;
        CHECK(unwritten == 0);
        for (std::size_t i = m; i < m + 32 - off; ++i) CHECK(std::isnan(y[i]));  // nothing past the end
        for (int threads : {1, 2}) CHECK(kb::read_write_seconds(x.data(), n, y, m, threads, 1) >= 0.0);
      }
    }
  }
}
