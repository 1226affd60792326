// Binomial intervals: Wilson and Clopper–Pearson against a published table, against their
// defining equations computed independently here, coverage, and bad input.
#include <catch2/catch.hpp>

#include <kvphase/stats/intervals.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace stats = kvphase::stats;

namespace {
// Binomial tail sums by direct summation in long double (independent of Boost).
long double binom_cdf(std::int64_t k, std::int64_t n, long double p) {
  long double s = 0;
  for (std::int64_t i = 0; i <= k; ++i) {
    const long double lc = std::lgamma((long double)n + 1) - std::lgamma((long double)i + 1) -
                           std::lgamma((long double)(n - i) + 1);
    s += std::exp(lc + i * std::log(p) + (n - i) * std::log1p(-p));
  }
  return s;
}
}  // namespace

TEST_CASE("Wilson and Clopper-Pearson match Newcombe (1998) Table II", "[stats][intervals]") {
  std::ifstream in(KVPHASE_TEST_DATA_DIR "/binomial_intervals_newcombe1998.csv");
  REQUIRE(in.good());
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream ss(line);
    std::string k, n, method, lo, hi;
    std::getline(ss, k, ',');
    std::getline(ss, n, ',');
    std::getline(ss, method, ',');
    std::getline(ss, lo, ',');
    std::getline(ss, hi, ',');
    const auto ci = stats::binomial_interval(std::stoll(k), std::stoll(n), 0.95, stats::parse_interval_method(method));
    INFO(line);
    // The table is rounded to 4 decimals: half a unit in the last place.
    CHECK(std::abs(ci.low - std::stod(lo)) <= 0.5e-4 + 1e-12);
    CHECK(std::abs(ci.high - std::stod(hi)) <= 0.5e-4 + 1e-12);
    ++rows;
  }
  CHECK(rows == 8);
}

TEST_CASE("Wilson interval equals its closed form", "[stats][intervals]") {
  // Independent closed form: the roots of (p̂ − p)² = z² p (1 − p) / n.
  for (double conf : {0.8, 0.95, 0.99}) {
    const long double z = stats::two_sided_z(conf);
    for (std::int64_t n : {1, 2, 7, 50, 1000, 123457}) {
      for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, n / 3, n / 2, n - 1, n}) {
        if (k < 0 || k > n) continue;
        const long double ph = (long double)k / n, z2 = z * z;
        const long double a = 1 + z2 / n, b = -(2 * ph + z2 / n), c = ph * ph;
        const long double disc = std::sqrt(std::max<long double>(0, b * b - 4 * a * c));
        const long double lo = (-b - disc) / (2 * a), hi = (-b + disc) / (2 * a);
        const auto ci = stats::wilson_interval(k, n, conf);
        INFO("k=" << k << " n=" << n << " conf=" << conf);
        // A few tens of roundings in double on values ≤ 1.
        CHECK(std::abs(ci.low - (double)lo) <= 64 * 1e-16 + 1e-15 * (double)(n > 1000));
        CHECK(std::abs(ci.high - (double)hi) <= 64 * 1e-16 + 1e-15 * (double)(n > 1000));
      }
    }
  }
  CHECK(stats::two_sided_z(0.95) == Approx(1.959963984540054).epsilon(1e-14));
}

TEST_CASE("Clopper-Pearson bounds solve the binomial tail equations", "[stats][intervals]") {
  for (double conf : {0.9, 0.95, 0.99}) {
    const double a2 = (1 - conf) / 2;
    for (std::int64_t n : {1, 5, 20, 263, 2000}) {
      for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, n / 4, n / 2, n - 1, n}) {
        if (k < 0 || k > n) continue;
        const auto ci = stats::clopper_pearson_interval(k, n, conf);
        INFO("k=" << k << " n=" << n << " conf=" << conf);
        if (k == 0) {
          CHECK(ci.low == 0.0);
          CHECK(ci.high == Approx(1 - std::pow(a2, 1.0 / n)).epsilon(1e-11));  // closed form
        } else {
          CHECK((double)(1 - binom_cdf(k - 1, n, ci.low)) == Approx(a2).epsilon(1e-8));
        }
        if (k == n) {
          CHECK(ci.high == 1.0);
          CHECK(ci.low == Approx(std::pow(a2, 1.0 / n)).epsilon(1e-11));
        } else {
          CHECK((double)binom_cdf(k, n, ci.high) == Approx(a2).epsilon(1e-8));
        }
        // Clopper–Pearson contains Wilson's point estimate and is no narrower at the ends.
        CHECK(ci.low <= (double)k / n);
        CHECK(ci.high >= (double)k / n);
      }
    }
  }
}

TEST_CASE("intervals: degenerate and empty groups are defined", "[stats][intervals]") {
  for (auto m : {stats::interval_method::wilson, stats::interval_method::clopper_pearson}) {
    CHECK(stats::binomial_interval(0, 0, 0.95, m) == stats::interval{0.0, 1.0});
    const auto all = stats::binomial_interval(40, 40, 0.95, m);
    CHECK(all.high == 1.0);
    CHECK(all.low > 0.9);
    const auto none = stats::binomial_interval(0, 40, 0.95, m);
    CHECK(none.low == 0.0);
    CHECK(none.high < 0.1);
    CHECK(std::isfinite(all.low));
  }
  CHECK(stats::recall(0, 0) == 0.0);
  CHECK(stats::recall(3, 4) == 0.75);
}

TEST_CASE("intervals: bad input names the parameter", "[stats][intervals]") {
  CHECK_THROWS_WITH(stats::wilson_interval(5, 4), Catch::Contains("hits") && Catch::Contains("trials"));
  CHECK_THROWS_WITH(stats::wilson_interval(-1, 4), Catch::Contains("hits = -1"));
  CHECK_THROWS_WITH(stats::clopper_pearson_interval(0, -4), Catch::Contains("trials = -4"));
  CHECK_THROWS_WITH(stats::wilson_interval(1, 4, 1.0), Catch::Contains("confidence"));
  CHECK_THROWS_WITH(stats::wilson_interval(1, 4, 0.0), Catch::Contains("confidence"));
  CHECK_THROWS_WITH(stats::clopper_pearson_interval(1, 4, std::nan("")), Catch::Contains("confidence"));
  CHECK_THROWS_WITH(stats::parse_interval_method("wald"), Catch::Contains("interval_method"));
  CHECK_THROWS_AS(stats::recall(2, 1), kvphase::error);
  std::vector<std::int64_t> h{1, 2}, t{2, 1};
  CHECK_THROWS_WITH(stats::require_group_counts(h, t), Catch::Contains("hits[1]"));
  std::vector<std::int64_t> t3{2, 2, 2};
  CHECK_THROWS_WITH(stats::require_group_counts(h, t3), Catch::Contains("hits.size()"));
}

TEST_CASE("intervals: exact coverage (Clopper-Pearson never below nominal, Wilson near it)", "[stats][intervals]") {
  // Coverage at p is Σ_k P(K = k | n, p) · 1[p ∈ CI(k)], computed exactly by summation.
  const std::int64_t n = 50;
  std::vector<stats::interval> cp, wi;
  for (std::int64_t k = 0; k <= n; ++k) {
    cp.push_back(stats::clopper_pearson_interval(k, n));
    wi.push_back(stats::wilson_interval(k, n));
  }
  double wilson_mean = 0, cp_min = 1;
  const int grid = 999;
  for (int i = 1; i <= grid; ++i) {
    const double p = double(i) / (grid + 1);
    long double c_cp = 0, c_w = 0;
    for (std::int64_t k = 0; k <= n; ++k) {
      const long double pk = std::exp(std::lgamma((long double)n + 1) - std::lgamma((long double)k + 1) -
                                      std::lgamma((long double)(n - k) + 1) + k * std::log((long double)p) +
                                      (n - k) * std::log1p(-(long double)p));
      if (cp[k].low <= p && p <= cp[k].high) c_cp += pk;
      if (wi[k].low <= p && p <= wi[k].high) c_w += pk;
    }
    cp_min = std::min(cp_min, (double)c_cp);
    wilson_mean += (double)c_w / grid;
  }
  CHECK(cp_min >= 0.95 - 1e-9);
  // Wilson's coverage averaged over p is close to nominal (Brown, Cai & DasGupta 2001, Fig. 5).
  CHECK(wilson_mean == Approx(0.95).margin(0.01));
}
