// chunk_grid against a brute-force definition written independently here: for every W, S with
// 1 ≤ S ≤ W ≤ 9, several origins, both conventions and N ≤ 64.
#include <catch2/catch.hpp>

#include <kvphase/compress/grid.hpp>
#include <kvphase/compress/spec.hpp>

#include <map>
#include <vector>

using kvphase::index_t;
using namespace kvphase::compress;

namespace {
// Brute force: enumerate grid indices j over a wide range, build each entry's source list
// directly from the convention's formula, keep the entries that exist, number them in order.
struct brute_entry {
  index_t first, last;
};
std::vector<brute_entry> brute_entries(index_t W, index_t S, index_t origin, grid_convention c, index_t count) {
  std::vector<brute_entry> out;
  for (index_t j = -50; j < 200 && static_cast<index_t>(out.size()) < count; ++j) {
    index_t first, last;
    if (c == grid_convention::v4) {
      first = origin + j * S - (W - S);
      last = origin + j * S + S - 1;
    } else {
      first = origin + j * S;
      last = first + W - 1;
    }
    const bool exists = (c == grid_convention::v4) ? last >= 0 : first >= 0;
    if (exists) out.push_back({first, last});
  }
  return out;
}
}  // namespace

TEST_CASE("grid: membership, slots, phase, counts and visibility equal brute force", "[compress][grid]") {
  for (auto conv : {grid_convention::v4, grid_convention::nsa}) {
    for (index_t W = 1; W <= 9; ++W) {
      for (index_t S = 1; S <= W; ++S) {
        for (index_t origin : {index_t(0), index_t(1), S - 1, S, index_t(3), index_t(-2)}) {
          chunk_grid g{.window = W, .stride = S, .origin = origin, .convention = conv};
          INFO(g);
          REQUIRE_NOTHROW(g.validate());
          const auto entries = brute_entries(W, S, origin, conv, 120);
          for (index_t e = 0; e < 40; ++e) {
            CHECK(g.sources(e).first == entries[e].first);
            CHECK(g.sources(e).last == entries[e].last);
            CHECK(g.masked_slots(e) == std::max<index_t>(0, -entries[e].first));
          }
          for (index_t p = 0; p < 64; ++p) {
            // phase: the brute definition walks from origin in steps of S
            index_t ph = p - origin;
            while (ph < 0) ph += S;
            while (ph >= S) ph -= S;
            CHECK(g.phase(p) == ph);
            std::vector<entry_slot> expect;
            for (index_t e = 0; e < static_cast<index_t>(entries.size()); ++e) {
              if (p >= entries[e].first && p <= entries[e].last) expect.push_back({e, p - entries[e].first});
            }
            CHECK(g.entries_containing(p) == expect);
            if (conv == grid_convention::v4 || p >= origin) {
              // under V4 every position is pooled W/S times once far from the start when S | W
              if (W % S == 0 && p >= W) CHECK(static_cast<index_t>(expect.size()) == W / S);
            }
          }
          for (index_t N = 0; N <= 64; ++N) {
            index_t count = 0;
            for (const auto& en : entries) count += (en.last <= N - 1) ? 1 : 0;
            CHECK(g.num_entries(N) == count);
          }
          for (auto vis : {visibility_policy::complete, visibility_policy::running_partial}) {
            chunk_grid gv = g;
            gv.visibility = vis;
            for (index_t t = 0; t < 64; ++t) {
              index_t nvis = 0;
              for (index_t e = 0; e < static_cast<index_t>(entries.size()); ++e) {
                const bool v = (vis == visibility_policy::complete) ? entries[e].last <= t
                                                                    : std::max<index_t>(entries[e].first, 0) <= t;
                CHECK(gv.visible(e, t) == v);
                nvis += v;
              }
              CHECK(gv.num_visible(t) == nvis);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("grid: DeepSeek-V4 visibility rule (i+1)m <= t+1", "[compress][grid]") {
  for (index_t m : {4, 128}) {
    chunk_grid g{.window = m, .stride = m};
    for (index_t t = 0; t < 600; t += 7) {
      CHECK(g.num_visible(t) == (t + 1) / m);
    }
  }
  chunk_grid csa{.window = 8, .stride = 4};
  for (index_t t = 0; t < 100; ++t) CHECK(csa.num_visible(t) == (t + 1) / 4);
  CHECK(csa.masked_slots(0) == 4);  // entry 0's stream-a half precedes position 0
  CHECK(csa.masked_slots(1) == 0);
}

TEST_CASE("grid: NSA blocks of 32 at stride 16", "[compress][grid]") {
  chunk_grid g{.window = 32, .stride = 16, .convention = grid_convention::nsa};
  CHECK(g.sources(0) == token_range{0, 31});
  CHECK(g.sources(1) == token_range{16, 47});
  // NSA: entries i = 0 … ⌊(t − l)/d⌋ (1-based positions) ⇔ floor((t+1−32)/16)+1 for 0-based t
  for (index_t t = 31; t < 300; ++t) CHECK(g.num_visible(t) == (t + 1 - 32) / 16 + 1);
  CHECK(g.num_visible(30) == 0);
}

TEST_CASE("grid and spec: bad input names the parameter", "[compress][grid][errors]") {
  CHECK_THROWS_WITH((chunk_grid{.window = 4, .stride = 0}.validate()), Catch::Contains("stride = 0"));
  CHECK_THROWS_WITH((chunk_grid{.window = 3, .stride = 4}.validate()), Catch::Contains("window = 3"));
  CHECK_THROWS_AS((chunk_grid{.window = 3, .stride = 4}.validate()), kvphase::error);
  operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = pool_kind::weights, .slot_weights = {1, 2, 3}};
  CHECK_THROWS_WITH(s.validate(), Catch::Contains("slot_weights.size()"));
  s.slot_weights = {1, 2, std::numeric_limits<double>::infinity(), 1};
  CHECK_THROWS_WITH(s.validate(), Catch::Contains("slot_weights[2]"));
  operator_spec g{.grid = {.window = 4, .stride = 4}, .pool = pool_kind::slot_gate, .slot_bias = {0, 1}};
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("slot_bias.size()"));
  g.slot_bias = {0, std::nan(""), 0, 0};
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("slot_bias[1]"));
  operator_spec t{.grid = {.window = 8, .stride = 3}, .pool = pool_kind::two_stream};
  CHECK_THROWS_WITH(t.validate(), Catch::Contains("window = 8"));
}

TEST_CASE("spec: linear slot weights renormalise over unmasked slots", "[compress][spec]") {
  operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = pool_kind::slot_gate, .slot_bias = {0, 0, std::log(2.0), 0}};
  auto w = s.linear_slot_weights();
  CHECK(w[2] == Approx(0.4).epsilon(1e-15));
  CHECK(w[0] == Approx(0.2).epsilon(1e-15));
  auto wm = s.linear_slot_weights(2);
  CHECK(wm[0] == 0.0);
  CHECK(wm[2] == Approx(2.0 / 3.0).epsilon(1e-15));
}
