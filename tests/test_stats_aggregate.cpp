// Aggregation over seeds: pooled counts, per-group mean/SD of recall, per-seed gap spread.
#include <catch2/catch.hpp>

#include <kvphase/stats/aggregate.hpp>

#include <cmath>
#include <vector>

namespace stats = kvphase::stats;
using counts = std::vector<std::int64_t>;

TEST_CASE("aggregate: pooled counts and between-seed spread", "[stats][aggregate]") {
  const std::vector<counts> hits{{8, 5}, {6, 5}, {7, 0}}, trials{{10, 10}, {10, 10}, {10, 0}};
  const auto a = stats::aggregate_seeds(hits, trials);
  CHECK(a.seeds == 3);
  CHECK(a.trials == counts{30, 20});
  CHECK(a.hits == counts{21, 10});
  // Group 0: recalls .8, .6, .7 → mean .7, sd .1. Group 1: seed 2 has no trials → .5, .5.
  CHECK(a.mean_recall[0] == Approx(0.7));
  CHECK(a.sd_recall[0] == Approx(0.1));
  CHECK(a.se_recall[0] == Approx(0.1 / std::sqrt(3.0)));
  CHECK(a.mean_recall[1] == Approx(0.5));
  CHECK(a.sd_recall[1] == 0.0);
  // Gaps .3, .1, 0 (one non-empty group) → mean 4/30, sd from the closed form.
  CHECK(a.seed_gaps[0] == Approx(0.3));
  CHECK(a.seed_gaps[1] == Approx(0.1));
  CHECK(a.seed_gaps[2] == 0.0);
  const double m = 0.4 / 3;
  CHECK(a.gap_mean == Approx(m));
  CHECK(a.gap_sd == Approx(std::sqrt(((0.3 - m) * (0.3 - m) + (0.1 - m) * (0.1 - m) + m * m) / 2)));
  const auto one = stats::aggregate_seeds({{3, 4}}, {{5, 5}});
  CHECK(one.sd_recall == std::vector<double>{0.0, 0.0});
  CHECK(one.gap_sd == 0.0);
}

TEST_CASE("aggregate: bad input names seed and group", "[stats][aggregate]") {
  CHECK_THROWS_WITH(stats::aggregate_seeds({}, {}), Catch::Contains("trials.size()"));
  CHECK_THROWS_WITH(stats::aggregate_seeds({{1}}, {{1}, {1}}), Catch::Contains("hits.size()"));
  CHECK_THROWS_WITH(stats::aggregate_seeds({{1, 1}, {1}}, {{2, 2}, {2}}), Catch::Contains("trials[1].size()"));
  CHECK_THROWS_WITH(stats::aggregate_seeds({{1, 1}, {1, 3}}, {{2, 2}, {2, 2}}),
                    Catch::Contains("hits[1]") && Catch::Contains("seed 1"));
}
