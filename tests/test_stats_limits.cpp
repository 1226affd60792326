// Large counts and hostile sizes: the O(1) binomial sampler (BTRD) against the exact binomial
// (chi-square and moments, fixed seeds, z >= 5 bounds) and its speed at 10^12 trials; bounds on
// replicates, permutations and total counts; degenerate data for every public stats function.
#include <catch2/catch.hpp>

#include <kvphase/core/rng.hpp>
#include <kvphase/stats/aggregate.hpp>
#include <kvphase/stats/bootstrap.hpp>
#include <kvphase/stats/gap.hpp>
#include <kvphase/stats/intervals.hpp>
#include <kvphase/stats/periodicity.hpp>
#include <kvphase/stats/uniformity.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace stats = kvphase::stats;
using counts = std::vector<std::int64_t>;

namespace {
long double binomial_pmf(std::int64_t n, double p, std::int64_t x) {
  const long double nl = n, xl = x;
  return std::exp(std::lgamma(nl + 1) - std::lgamma(xl + 1) - std::lgamma(nl - xl + 1) + xl * std::log((long double)p) +
                  (nl - xl) * std::log1p(-(long double)p));
}
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

TEST_CASE("binomial_draw: BTRD matches the exact binomial (chi-square)", "[stats][bootstrap]") {
  // Each case has n·p·(1 − p) ≥ binomial_rejection_variance, so the rejection path runs. Draws
  // are binned so every bin expects ≥ 50; X² must stay below dof + 5·sqrt(2·dof) (a z = 5 bound
  // on the χ²(dof) statistic, whose sd is sqrt(2·dof)) and above dof − 5·sqrt(2·dof).
  struct bin_case {
    std::int64_t n;
    double p;
  };
  const int draws = 200000;
  for (auto c : {bin_case{40000, 0.5}, bin_case{100000, 0.3}, bin_case{100000, 0.7}, bin_case{5'000'000, 0.0021},
                 bin_case{1'000'000'000, 2e-5}, bin_case{20'000'000, 0.999}}) {
    const double mean = c.n * c.p, sd = std::sqrt(c.n * c.p * (1 - c.p));
    REQUIRE(sd * sd >= stats::binomial_rejection_variance);
    const std::int64_t lo = static_cast<std::int64_t>(std::floor(mean - 7 * sd)),
                       hi = static_cast<std::int64_t>(std::ceil(mean + 7 * sd));
    // Bin edges: consecutive values merged until each bin expects ≥ 50 (tails into the ends).
    std::vector<std::int64_t> edge{lo};
    std::vector<double> expect;
    long double acc = 0;
    for (std::int64_t x = lo; x <= hi; ++x) {
      acc += binomial_pmf(c.n, c.p, x);
      if (acc * draws >= 50 && hi - x > 10 * sd / 7) {
        expect.push_back(static_cast<double>(acc) * draws);
        edge.push_back(x + 1);
        acc = 0;
      }
    }
    expect.push_back(static_cast<double>(acc) * draws);  // last bin up to hi
    std::vector<double> observed(expect.size(), 0.0);
    kvphase::rng::philox_stream s(2026, static_cast<std::uint64_t>(c.n) ^ static_cast<std::uint64_t>(c.p * 1e6));
    int outside = 0;
    for (int i = 0; i < draws; ++i) {
      const std::int64_t x = stats::binomial_draw(c.n, c.p, s);
      REQUIRE(x >= 0);
      REQUIRE(x <= c.n);
      if (x < lo || x > hi) {
        ++outside;  // probability < 1e-11 per draw
        continue;
      }
      const auto it = std::upper_bound(edge.begin(), edge.end(), x);
      observed[static_cast<std::size_t>(it - edge.begin() - 1)] += 1;
    }
    double x2 = 0;
    for (std::size_t b = 0; b < expect.size(); ++b) x2 += (observed[b] - expect[b]) * (observed[b] - expect[b]) / expect[b];
    const double dof = static_cast<double>(expect.size() - 1);
    INFO("n=" << c.n << " p=" << c.p << ": X2 " << x2 << " on " << dof << " dof");
    CHECK(outside == 0);
    CHECK(x2 <= dof + 5 * std::sqrt(2 * dof));
    CHECK(x2 >= dof - 5 * std::sqrt(2 * dof));
  }
}

TEST_CASE("binomial_draw: moments at 10^12 trials, and speed", "[stats][bootstrap]") {
  // Sample mean within 5 standard errors of n·p; sample variance within 5 standard errors
  // (sd of s²/σ² is sqrt(2/(N − 1)) for a near-normal law; the excess kurtosis (1 − 6pq)/(npq)
  // is below 1e-5 here).
  const std::int64_t n = 1'000'000'000'000;
  const int N = 50000;
  for (double p : {0.5, 0.3, 0.8, 1e-6}) {
    kvphase::rng::philox_stream s(7, static_cast<std::uint64_t>(p * 1e6));
    long double sum = 0, sum2 = 0;
    const long double mu = n * (long double)p, var = mu * (1 - (long double)p);
    for (int i = 0; i < N; ++i) {
      const long double d = stats::binomial_draw(n, p, s) - mu;
      sum += d;
      sum2 += d * d;
    }
    const double zmean = static_cast<double>(sum / N / std::sqrt(var / N));
    const double vratio = static_cast<double>((sum2 - sum * sum / N) / (N - 1) / var);
    INFO("p=" << p << ": mean z " << zmean << ", variance ratio " << vratio);
    CHECK(std::abs(zmean) <= 5);
    CHECK(std::abs(vratio - 1) <= 5 * std::sqrt(2.0 / (N - 1)));
  }
  // Speed: inversion needed ~10^6 steps a draw here (minutes for a bootstrap); BTRD is O(1).
  // 10^6 draws take well under a second on one core; the bound leaves room for a loaded machine.
  kvphase::rng::philox_stream s(8, 0);
  auto t0 = std::chrono::steady_clock::now();
  std::int64_t acc = 0;
  for (int i = 0; i < 1'000'000; ++i) acc += stats::binomial_draw(n, 0.37, s) & 1;
  const double draw_seconds = seconds_since(t0);
  CHECK(acc > 0);
  // A full bootstrap of 8 groups of 10^12 trials with the default 2000 replicates.
  const counts t(8, n), h{n / 2, n / 3, n / 4, n / 5, n / 6, n / 7, n / 8, n / 9};
  t0 = std::chrono::steady_clock::now();
  const auto r = stats::phase_gap_bootstrap(h, t, {.seed = 1});
  const double bootstrap_seconds = seconds_since(t0);
  INFO("10^6 draws: " << draw_seconds << " s; bootstrap: " << bootstrap_seconds << " s");
  CHECK(draw_seconds < 5.0);
  CHECK(bootstrap_seconds < 5.0);
  CHECK(r.ci.low <= r.gap);
  CHECK(r.ci.high >= r.gap);
}

TEST_CASE("binomial_draw: below the threshold it is inversion of one uniform, deterministic", "[stats][bootstrap]") {
  kvphase::rng::philox_stream a(3, 4), b(3, 4);
  for (int i = 0; i < 1000; ++i) CHECK(stats::binomial_draw(1000, 0.3, a) == stats::binomial_from_uniform(1000, 0.3, b.uniform()));
  kvphase::rng::philox_stream c(5, 6), d(5, 6);
  for (int i = 0; i < 1000; ++i) CHECK(stats::binomial_draw(1'000'000'000, 0.4, c) == stats::binomial_draw(1'000'000'000, 0.4, d));
  CHECK(stats::binomial_draw(0, 0.5, c) == 0);
  CHECK(stats::binomial_draw(1'000'000'000'000, 0.0, c) == 0);
  CHECK(stats::binomial_draw(1'000'000'000'000, 1.0, c) == 1'000'000'000'000);
  // Near-certain outcomes at huge n: variance below the threshold, inversion from the mode.
  const std::int64_t x = stats::binomial_draw(1'000'000'000'000, 1 - 1e-12, c);
  CHECK(x >= 1'000'000'000'000 - 20);
}

TEST_CASE("limits: counts, totals, replicates and permutations are bounded", "[stats][limits]") {
  const std::int64_t big = std::int64_t{1} << 62;
  CHECK_THROWS_WITH(stats::require_group_counts(counts{0, 0}, counts{big, big}),
                    Catch::Contains("sum of trials") && Catch::Contains("2^53"));
  CHECK_THROWS_WITH(stats::uniformity_test(counts{1, 1}, counts{big, big}), Catch::Contains("sum of trials"));
  CHECK_THROWS_WITH(stats::phase_gap(counts{1, 1}, counts{big, big}), Catch::Contains("sum of trials"));
  CHECK_THROWS_WITH(stats::periodicity_test(counts{1, 1}, counts{big, big}, 2, 2), Catch::Contains("sum of trials"));
  const std::int64_t half = stats::max_total_trials / 2;
  CHECK_NOTHROW(stats::require_group_counts(counts{0, 0}, counts{half, half}));
  CHECK_THROWS(stats::require_group_counts(counts{0, 0}, counts{half, half + 1}));
  // Pooling seeds: the pooled total is bounded too, with the seed and group named.
  CHECK_THROWS_WITH(stats::aggregate_seeds({{0}, {0}}, {{half + 1}, {half}}),
                    Catch::Contains("trials[1][0]") && Catch::Contains("pooled total"));
  CHECK_THROWS_WITH(stats::aggregate_seeds({{0, 0}, {0, 0}}, {{big, 1}, {big, 1}}), Catch::Contains("sum of trials"));
  // Replicates and permutations: at most 10^6; 10^13 is rejected at once, not run.
  const counts h{30, 41, 35, 33}, t{60, 60, 60, 60};
  CHECK_THROWS_WITH(stats::periodicity_test(h, t, 4, 4, {.permutations = 10'000'000'000'000}),
                    Catch::Contains("periodicity_options.permutations") && Catch::Contains("<= 1000000"));
  CHECK_NOTHROW(stats::periodicity_options{.permutations = stats::max_resamples}.validate());
  CHECK_THROWS_WITH(stats::phase_gap_bootstrap(h, t, {.replicates = 10'000'000'000'000}),
                    Catch::Contains("gap_options.replicates"));
  CHECK_THROWS_WITH(stats::sidak_alpha(0.95, 0), Catch::Contains("m = 0"));
}

TEST_CASE("limits: Clopper-Pearson bounds at 10^12 and 2^52 trials", "[stats][limits]") {
  // Boost's long-double evaluation gives up for large unequal shapes; the fallbacks (double
  // evaluation, else the Chernoff interval) must give bounds no narrower than Wilson's (which
  // at such n agrees with Clopper–Pearson to O(1/n)) and at most 1.3 times as wide
  // (Chernoff / normal width ratio sqrt(ln(2/α) / (z²/2)) = 1.17 at α = 0.01).
  for (std::int64_t n : {std::int64_t{1'000'000'000'000}, std::int64_t{1} << 52}) {
    for (int d = 2; d <= 9; ++d) {
      const std::int64_t k = n / d;
      const auto cp = stats::clopper_pearson_interval(k, n, 0.99);
      const auto w = stats::wilson_interval(k, n, 0.99);
      INFO("n=" << n << " k=" << k);
      const double width = w.high - w.low;
      CHECK(cp.low <= w.low + 1e-3 * width);
      CHECK(cp.high >= w.high - 1e-3 * width);
      CHECK(cp.high - cp.low <= 1.3 * width);
      const auto sim = stats::simultaneous_intervals(counts{k, k / 2}, counts{n / 2, n / 2});
      CHECK(sim[0].low < sim[0].high);
    }
  }
}

TEST_CASE("degenerate data: defined outputs from every stats function", "[stats][degenerate]") {
  // Cases: every trial a hit, none, one trial per group, a single group, zero-trial groups.
  struct data_case {
    const char* name;
    counts h, t;
  };
  const std::vector<data_case> cases{
      {"all hits", {20, 20, 20, 20}, {20, 20, 20, 20}},
      {"no hits", {0, 0, 0, 0}, {20, 20, 20, 20}},
      {"one trial per group", {1, 0, 1, 1}, {1, 1, 1, 1}},
      {"one trial per group, all hits", {1, 1, 1, 1}, {1, 1, 1, 1}},
      {"zero-trial groups", {0, 7, 0, 3}, {0, 10, 0, 10}},
      {"every group empty", {0, 0, 0, 0}, {0, 0, 0, 0}},
      {"a single non-empty group", {0, 0, 5, 0}, {0, 0, 10, 0}},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    // Intervals: every group's interval contains its estimate, lies in [0, 1], is finite.
    for (auto m : {stats::interval_method::wilson, stats::interval_method::clopper_pearson}) {
      for (std::size_t g = 0; g < c.t.size(); ++g) {
        const auto ci = stats::binomial_interval(c.h[g], c.t[g], 0.95, m);
        const double r = stats::recall(c.h[g], c.t[g]);
        CHECK(ci.low <= r);
        CHECK(ci.high >= r);
        CHECK(ci.low >= 0.0);
        CHECK(ci.high <= 1.0);
      }
    }
    const auto sim = stats::simultaneous_intervals(c.h, c.t);
    for (std::size_t g = 0; g < c.t.size(); ++g) {
      CHECK(sim[g].low <= stats::recall(c.h[g], c.t[g]));
      CHECK(sim[g].high >= stats::recall(c.h[g], c.t[g]));
      if (c.t[g] == 0) CHECK(sim[g] == stats::interval{0.0, 1.0});
    }
    // Uniformity: finite statistic, p in [0, 1]; no evidence when all hits / none / < 2 groups.
    for (auto m : {stats::uniformity_method::pearson_chi_square, stats::uniformity_method::g_test}) {
      const auto u = stats::uniformity_test(c.h, c.t, m);
      CHECK(std::isfinite(u.statistic));
      CHECK(u.p >= 0.0);
      CHECK(u.p <= 1.0);
    }
    // Periodicity (both statistics, both references).
    for (auto st : {stats::periodicity_statistic::harmonics, stats::periodicity_statistic::fundamental}) {
      for (auto ref : {stats::periodicity_reference::permutation, stats::periodicity_reference::chi_square}) {
        const auto p = stats::periodicity_test(c.h, c.t, 4, 2, {.statistic = st, .reference = ref, .permutations = 99});
        CHECK(std::isfinite(p.statistic));
        CHECK(std::isfinite(p.amplitude));
        CHECK(std::isfinite(p.peak_phase));
        CHECK(p.p > 0.0);
        CHECK(p.p <= 1.0);
      }
    }
    // Gap: every interval contains its estimate.
    const auto gp = stats::phase_gap_bootstrap(c.h, c.t, {.replicates = 200, .seed = 1});
    CHECK(gp.ci.low <= gp.gap);
    CHECK(gp.ci.high >= gp.gap);
    CHECK(gp.simultaneous.low <= gp.gap);
    CHECK(gp.simultaneous.high >= gp.gap);
    CHECK(gp.bias_corrected >= gp.simultaneous.low);
    CHECK(gp.bias_corrected <= gp.simultaneous.high);
    const auto gd = stats::gap_difference_bootstrap(c.h, c.t, c.h, c.t, {.replicates = 200, .seed = 1});
    CHECK(gd.difference == 0.0);
    CHECK(gd.ci.low <= 0.0);
    CHECK(gd.ci.high >= 0.0);
    CHECK(gd.simultaneous.low <= 0.0);
    CHECK(gd.simultaneous.high >= 0.0);
    // Aggregation: one seed has spread 0; two identical seeds too.
    const auto a = stats::aggregate_seeds({c.h, c.h}, {c.t, c.t});
    for (std::size_t g = 0; g < c.t.size(); ++g) {
      CHECK(a.sd_recall[g] == 0.0);
      CHECK(a.se_recall[g] == 0.0);
      CHECK(a.trials[g] == 2 * c.t[g]);
    }
    CHECK(a.gap_sd == 0.0);
  }
  // Specific values: all hits or none → uniformity and periodicity give p = 1.
  for (std::size_t i : {0u, 1u, 3u, 5u, 6u}) {
    INFO(cases[i].name);
    CHECK(stats::uniformity_test(cases[i].h, cases[i].t).p == 1.0);
    CHECK(stats::periodicity_test(cases[i].h, cases[i].t, 4, 2).p == 1.0);
    CHECK(stats::phase_gap_bootstrap(cases[i].h, cases[i].t).gap == 0.0);
  }
  // A single group (modulus 1 is not a periodicity question; the rest is defined).
  CHECK(stats::uniformity_test(counts{3}, counts{10}).p == 1.0);
  CHECK(stats::phase_gap_bootstrap(counts{3}, counts{10}).simultaneous == stats::interval{0.0, 0.0});
  CHECK(stats::simultaneous_intervals(counts{3}, counts{10})[0] == stats::clopper_pearson_interval(3, 10));
  CHECK_THROWS_WITH(stats::periodicity_test(counts{3}, counts{10}, 1, 1), Catch::Contains("modulus"));
  // One trial: the intervals of 0/1 and 1/1.
  CHECK(stats::clopper_pearson_interval(0, 1) == stats::interval{0.0, 0.975});
  CHECK(stats::clopper_pearson_interval(1, 1).low == Approx(0.025).epsilon(1e-12));
  CHECK(stats::wilson_interval(1, 1).high == 1.0);
}

TEST_CASE("intervals: the Chernoff fallback covers and matches Clopper-Pearson at k = 0", "[stats][intervals]") {
  // Exact coverage by summation at n = 40 over a grid of p: never below nominal.
  const std::int64_t n = 40;
  const double alpha = 0.05;
  std::vector<stats::interval> ch;
  for (std::int64_t k = 0; k <= n; ++k) ch.push_back(stats::detail::chernoff_alpha(k, n, alpha));
  double worst = 1;
  for (int i = 1; i < 1000; ++i) {
    const double p = i / 1000.0;
    long double cov = 0;
    for (std::int64_t k = 0; k <= n; ++k)
      if (ch[k].low <= p && p <= ch[k].high) cov += binomial_pmf(n, p, k);
    worst = std::min(worst, (double)cov);
  }
  CHECK(worst >= 1 - alpha);
  for (std::int64_t k = 0; k <= n; ++k) {
    const auto cp = stats::clopper_pearson_interval(k, n, 1 - alpha);
    CHECK(ch[k].low <= cp.low + 1e-12);  // wider than Clopper–Pearson on both sides
    CHECK(ch[k].high >= cp.high - 1e-12);
  }
  CHECK(ch[0].high == Approx(stats::clopper_pearson_interval(0, n, 1 - alpha).high).epsilon(1e-12));
  CHECK(ch[n].low == Approx(stats::clopper_pearson_interval(n, n, 1 - alpha).low).epsilon(1e-12));
}

TEST_CASE("hypergeometric_draw: Cornish-Fisher above the threshold is within 1e-7 in total variation", "[stats][bootstrap]") {
  // The draw is monotone in u, so its CDF at k is the largest u with draw(u) ≤ k, found by
  // bisection to double resolution; the total-variation distance to the exact law (pmf by the
  // ratio recursion from the mode in long double, normalised over ±14 sd) must stay below the
  // documented 1e-7. Shapes at the threshold variance: symmetric, skewed (Poisson-like, the
  // largest skewness at that variance), and draws of most of the population.
  struct hyp_case {
    double N, K, n;
  };
  for (auto c : {hyp_case{1.7e7, 8.5e6, 8.5e6}, hyp_case{1e12, 1.002e9, 1.002e9}, hyp_case{1e8, 5e6, 3.1e7},
                 hyp_case{1e10, 1e8, 9.8e9}}) {
    const std::int64_t N = static_cast<std::int64_t>(c.N), K = static_cast<std::int64_t>(c.K),
                       n = static_cast<std::int64_t>(c.n);
    const long double Nl = N, Kl = K, nl = n;
    const long double var = nl * (Kl / Nl) * (1 - Kl / Nl) * (Nl - nl) / (Nl - 1), sd = std::sqrt(var);
    REQUIRE(var >= stats::hypergeometric_approximation_variance);
    const long double mu = nl * Kl / Nl;
    const std::int64_t lo = static_cast<std::int64_t>(mu - 14 * sd), hi = static_cast<std::int64_t>(mu + 14 * sd);
    const std::int64_t m = static_cast<std::int64_t>(std::floor((nl + 1) * (Kl + 1) / (Nl + 2)));
    std::vector<long double> pmf(static_cast<std::size_t>(hi - lo + 1));
    pmf[m - lo] = 1;
    for (std::int64_t x = m; x < hi; ++x)
      pmf[x + 1 - lo] = pmf[x - lo] * (Kl - x) * (nl - x) / ((x + 1.0L) * (Nl - Kl - nl + x + 1));
    for (std::int64_t x = m; x > lo; --x)
      pmf[x - 1 - lo] = pmf[x - lo] * x * (Nl - Kl - nl + x) / ((Kl - x + 1) * (nl - x + 1));
    long double total = 0;
    for (auto v : pmf) total += v;
    auto cdf = [&](std::int64_t k) {  // P(draw ≤ k) = sup{u : draw(u) ≤ k}
      double a = 0, b = 1;
      for (int i = 0; i < 64; ++i) {
        const double mid = 0.5 * (a + b);
        (stats::hypergeometric_draw(N, K, n, mid) <= k ? a : b) = mid;
      }
      return a;
    };
    long double tv = 0, prev = cdf(lo - 1);
    for (std::int64_t k = lo; k <= hi; ++k) {
      const long double now = cdf(k);
      tv += std::abs((now - prev) - pmf[k - lo] / total);
      prev = now;
    }
    tv /= 2;  // the exact mass outside ±14 sd is below 1e-40
    INFO("N=" << N << " K=" << K << " n=" << n << ": total variation " << (double)tv);
    CHECK(tv < 1e-7);
  }
}

TEST_CASE("periodicity: permutations at 10^12 trials per group are fast", "[stats][periodicity]") {
  // Inversion walked ~10^5 steps a draw here (minutes for 9999 permutations).
  const std::int64_t n = 1'000'000'000'000;
  counts t(8, n), h(8);
  for (int g = 0; g < 8; ++g) h[g] = n / 2 + (g % 4 == 1 ? 10'000'000 : 0);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = stats::periodicity_test(h, t, 8, 4, {.permutations = 9999, .seed = 1});
  const double seconds = seconds_since(t0);
  INFO(seconds << " s");
  CHECK(seconds < 5.0);
  // Effect 1e-5 in two groups, each with sd 5e-7: about 28 sd in the folded class.
  CHECK(r.p == Approx(1.0 / 10000));
  // Flat at the same size: the permutation p-value is not small.
  const counts hf(8, n / 2);
  CHECK(stats::periodicity_test(hf, t, 8, 4, {.permutations = 999, .seed = 2}).p == 1.0);
}
