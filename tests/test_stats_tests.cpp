// Uniformity (chi-square / G), periodicity (harmonic score test, permutation), resampling
// draws, and the phase gap with its bootstrap interval: known answers, calibration on flat
// data, power on periodic data, degenerate cases, determinism, bad input.
#include <catch2/catch.hpp>

#include <kvphase/core/rng.hpp>
#include <kvphase/stats/bootstrap.hpp>
#include <kvphase/stats/gap.hpp>
#include <kvphase/stats/periodicity.hpp>
#include <kvphase/stats/uniformity.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace stats = kvphase::stats;
using counts = std::vector<std::int64_t>;

namespace {
long double log_choose_ld(long double n, long double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}
// Bernoulli hits by direct comparison of uniforms (independent of the library's samplers).
counts simulate(const std::vector<double>& p, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  kvphase::rng::philox_stream s(seed, stream);
  counts h(p.size(), 0);
  for (std::size_t g = 0; g < p.size(); ++g)
    for (std::int64_t i = 0; i < n; ++i) h[g] += s.uniform() < p[g];
  return h;
}
}  // namespace

TEST_CASE("uniformity: Pearson and G against closed forms", "[stats][uniformity]") {
  // 3 groups → χ²(2): upper tail exp(−x/2).
  const counts h{10, 15, 30}, t{20, 20, 40};
  const double pbar = 55.0 / 80.0, v = pbar * (1 - pbar);
  double x2 = 0, g2 = 0;
  for (int g = 0; g < 3; ++g) {
    const double pg = double(h[g]) / t[g];
    x2 += t[g] * (pg - pbar) * (pg - pbar) / v;
    const double e1 = t[g] * pbar, e0 = t[g] * (1 - pbar);
    g2 += 2 * (h[g] * std::log(h[g] / e1) + (t[g] - h[g]) * std::log((t[g] - h[g]) / e0));
  }
  const auto r = stats::uniformity_test(h, t);
  CHECK(r.dof == 2);
  CHECK(r.statistic == Approx(x2).epsilon(1e-12));
  CHECK(r.p == Approx(std::exp(-x2 / 2)).epsilon(1e-12));
  CHECK(r.test == "pearson_chi_square");
  const auto g = stats::uniformity_test(h, t, stats::uniformity_method::g_test);
  CHECK(g.statistic == Approx(g2).epsilon(1e-12));
  CHECK(g.p == Approx(std::exp(-g2 / 2)).epsilon(1e-12));
  // 5 groups → χ²(4): exp(−x/2)(1 + x/2). Hand value: X² = 8/3 for 10/20 vs 15/20 (2 groups,
  // χ²(1): p = erfc(sqrt(x/2))).
  const counts h2{10, 15}, t2{20, 20};
  const auto r2 = stats::uniformity_test(h2, t2);
  CHECK(r2.statistic == Approx(8.0 / 3.0).epsilon(1e-14));
  CHECK(r2.p == Approx(std::erfc(std::sqrt(4.0 / 3.0))).epsilon(1e-12));
  const counts h5{5, 9, 12, 7, 14}, t5{20, 20, 20, 20, 20};
  const auto r5 = stats::uniformity_test(h5, t5);
  CHECK(r5.dof == 4);
  CHECK(r5.p == Approx(std::exp(-r5.statistic / 2) * (1 + r5.statistic / 2)).epsilon(1e-12));
}

TEST_CASE("uniformity: degenerate data give p = 1, empty groups are left out", "[stats][uniformity]") {
  for (auto m : {stats::uniformity_method::pearson_chi_square, stats::uniformity_method::g_test}) {
    CHECK(stats::uniformity_test(counts{10, 10, 10}, counts{10, 10, 10}, m).p == 1.0);
    CHECK(stats::uniformity_test(counts{0, 0, 0}, counts{10, 10, 10}, m).p == 1.0);
    CHECK(stats::uniformity_test(counts{3}, counts{10}, m).p == 1.0);
    CHECK(stats::uniformity_test(counts{0, 0}, counts{0, 0}, m).p == 1.0);
    const auto a = stats::uniformity_test(counts{10, 0, 15}, counts{20, 0, 20}, m);
    const auto b = stats::uniformity_test(counts{10, 15}, counts{20, 20}, m);
    CHECK(a.statistic == b.statistic);
    CHECK(a.dof == 1);
    CHECK(std::isfinite(stats::uniformity_test(counts{0, 20}, counts{20, 20}, m).p));
  }
  CHECK_THROWS_WITH(stats::uniformity_test(counts{1, 30}, counts{20, 20}), Catch::Contains("hits[1]"));
  CHECK_THROWS_WITH(stats::uniformity_test(counts{1}, counts{20, 20}), Catch::Contains("hits.size()"));
  CHECK_THROWS_WITH(stats::uniformity_test(counts{}, counts{}), Catch::Contains("trials.size()"));
}

TEST_CASE("samplers: inversion over a uniform grid reproduces the pmf", "[stats][bootstrap]") {
  // Inversion maps u to x monotonically within the visiting order, so a grid of K uniforms
  // hits x a number of times within 1 of K·pmf(x) (plus rounding).
  const int K = 100000;
  struct bin_case { std::int64_t n; double p; };
  for (auto c : {bin_case{20, 0.3}, bin_case{1000, 0.01}, bin_case{5000, 0.5}, bin_case{7, 0.999}}) {
    std::map<std::int64_t, int> hist;
    for (int i = 0; i < K; ++i) ++hist[stats::binomial_from_uniform(c.n, c.p, (i + 0.5) / K)];
    double mass = 0;
    for (auto [x, cnt] : hist) {
      REQUIRE(x >= 0);
      REQUIRE(x <= c.n);
      const long double pmf = std::exp(log_choose_ld(c.n, x) + x * std::log((long double)c.p) +
                                       (c.n - x) * std::log1p(-(long double)c.p));
      INFO("binomial n=" << c.n << " p=" << c.p << " x=" << x);
      CHECK(std::abs(cnt - K * (double)pmf) <= 2.0);
      mass += (double)pmf;
    }
    CHECK(mass > 1 - 1e-3);
  }
  struct hyp_case { std::int64_t N, S, n; };
  for (auto c : {hyp_case{50, 20, 10}, hyp_case{10000, 3000, 2000}, hyp_case{30, 29, 5}, hyp_case{12, 5, 9}}) {
    std::map<std::int64_t, int> hist;
    const stats::log_factorials lf(c.N / 2);  // half from the table, half from lgamma
    for (int i = 0; i < K; ++i) ++hist[stats::hypergeometric_from_uniform(c.N, c.S, c.n, (i + 0.5) / K, lf)];
    for (auto [x, cnt] : hist) {
      REQUIRE(x >= std::max<std::int64_t>(0, c.n - (c.N - c.S)));
      REQUIRE(x <= std::min(c.n, c.S));
      const long double pmf =
          std::exp(log_choose_ld(c.S, x) + log_choose_ld(c.N - c.S, c.n - x) - log_choose_ld(c.N, c.n));
      INFO("hypergeometric N=" << c.N << " K=" << c.S << " n=" << c.n << " x=" << x);
      CHECK(std::abs(cnt - K * (double)pmf) <= 2.0);
    }
  }
  CHECK(stats::binomial_from_uniform(0, 0.5, 0.3) == 0);
  CHECK(stats::binomial_from_uniform(9, 0.0, 0.3) == 0);
  CHECK(stats::binomial_from_uniform(9, 1.0, 0.3) == 9);
  // A permutation keeps group sizes and the total.
  kvphase::rng::philox_stream s(3, 4);
  const counts t{5, 0, 17, 9};
  counts out(4);
  stats::permute_hits(t, 12, s, out);
  std::int64_t tot = 0;
  for (std::size_t g = 0; g < t.size(); ++g) {
    CHECK(out[g] <= t[g]);
    tot += out[g];
  }
  CHECK(tot == 12);
  CHECK(stats::percentile({3.0, 1.0, 2.0, 4.0}, 0.5) == 2.5);
  CHECK(stats::percentile({3.0}, 0.9) == 3.0);
  CHECK_THROWS_WITH(stats::percentile({}, 0.5), Catch::Contains("values.size()"));
  CHECK_THROWS_WITH(stats::percentile({1.0}, 1.5), Catch::Contains("q = 1.5"));
}

TEST_CASE("periodicity: at modulus = period the harmonic score test is Pearson's X²", "[stats][periodicity]") {
  const counts h{40, 55, 47, 61, 38, 50}, t{100, 110, 90, 120, 100, 100};
  const auto u = stats::uniformity_test(h, t);
  stats::periodicity_options o{.reference = stats::periodicity_reference::chi_square};
  const auto r = stats::periodicity_test(h, t, 6, 6, o);
  CHECK(r.dof == 5);
  CHECK(r.statistic == Approx(u.statistic).epsilon(1e-10));
  CHECK(r.p == Approx(u.p).epsilon(1e-8));
  CHECK(r.cycles == 1.0);
}

TEST_CASE("periodicity: folded and harmonic-regression forms agree", "[stats][periodicity]") {
  // For S = 2 and S = 3 the harmonics set is the fundamental alone, so the folded Pearson form
  // (harmonics) and the eigen-decomposed score test (fundamental) must give the same T.
  stats::periodicity_options h{.statistic = stats::periodicity_statistic::harmonics,
                               .reference = stats::periodicity_reference::chi_square};
  stats::periodicity_options f{.statistic = stats::periodicity_statistic::fundamental,
                               .reference = stats::periodicity_reference::chi_square};
  const counts hits{40, 55, 47, 61, 38, 50, 44, 52, 39, 60, 41, 58}, trials{100, 110, 90, 120, 100, 100,
                                                                           95, 105, 100, 99, 101, 97};
  for (std::int64_t S : {2, 3}) {
    const auto a = stats::periodicity_test(hits, trials, 12, S, h);
    const auto b = stats::periodicity_test(hits, trials, 12, S, f);
    INFO("S = " << S);
    CHECK(a.dof == S - 1);
    CHECK(b.dof == S - 1);
    CHECK(a.statistic == Approx(b.statistic).epsilon(1e-10));
  }
  // Fundamental at S = 4 with equal groups: T = |U|² / (v · N/2 · …) by hand — the cosine and
  // sine columns are orthogonal with Σ n x² = n·M/2 each, so T = (U_c² + U_s²) / (v n M / 2).
  const counts t8(8, 50), h8{30, 20, 25, 26, 33, 18, 24, 27};
  double Y = 0, uc = 0, us = 0;
  for (int g = 0; g < 8; ++g) Y += h8[g];
  const double pb = Y / 400, v = pb * (1 - pb);
  for (int g = 0; g < 8; ++g) {
    uc += (h8[g] - 50 * pb) * std::cos(2 * std::numbers::pi * g / 4);
    us += (h8[g] - 50 * pb) * std::sin(2 * std::numbers::pi * g / 4);
  }
  const auto r = stats::periodicity_test(h8, t8, 8, 4, f);
  CHECK(r.dof == 2);
  CHECK(r.statistic == Approx((uc * uc + us * us) / (v * 50 * 8 / 2.0)).epsilon(1e-10));
  CHECK(r.p == Approx(std::exp(-r.statistic / 2)).epsilon(1e-10));
  // Harmonics at S = 4 over 8 groups = Pearson on the table folded mod 4.
  const counts hf{h8[0] + h8[4], h8[1] + h8[5], h8[2] + h8[6], h8[3] + h8[7]}, tf(4, 100);
  CHECK(stats::periodicity_test(h8, t8, 8, 4, h).statistic ==
        Approx(stats::uniformity_test(hf, tf).statistic).epsilon(1e-12));
}

TEST_CASE("periodicity: effect size of a pure cosine", "[stats][periodicity]") {
  // recall_g = 0.5 + 0.2 cos(2π(g − 1)/4), equal groups: amplitude 0.2, peak at phase 1.
  const std::int64_t n = 1000000;
  counts t(8, n), h(8);
  for (int g = 0; g < 8; ++g) h[g] = std::llround(n * (0.5 + 0.2 * std::cos(2 * std::numbers::pi * (g - 1) / 4.0)));
  stats::periodicity_options o{.reference = stats::periodicity_reference::chi_square};
  const auto r = stats::periodicity_test(h, t, 8, 4, o);
  CHECK(r.amplitude == Approx(0.2).margin(2e-6));
  CHECK(r.power == Approx(0.01).margin(2e-6));
  CHECK(r.peak_phase == Approx(1.0).margin(1e-4));
  CHECK(r.cycles == 2.0);
  CHECK(r.p < 1e-12);
}

TEST_CASE("periodicity: structure at other frequencies is not period S", "[stats][periodicity]") {
  // recall = 0.5 + 0.2 cos(2π g / 8): period 8. Folded mod 4 every class averages 0.5 exactly.
  const std::int64_t n = 1000;
  counts t(8, n), h{700, 641, 500, 359, 300, 359, 500, 641};
  stats::periodicity_options o{.permutations = 999, .seed = 1};
  const auto r4 = stats::periodicity_test(h, t, 8, 4, o);
  CHECK(r4.statistic == Approx(0.0).margin(1e-9));
  CHECK(r4.p > 0.9);
  const auto r8 = stats::periodicity_test(h, t, 8, 8, o);
  CHECK(r8.p == Approx(1.0 / 1000));
  CHECK(r8.p_chi_square < 1e-30);
  CHECK(stats::uniformity_test(h, t).p < 1e-30);
}

TEST_CASE("periodicity: false-positive rate on flat data is at the nominal level", "[stats][periodicity]") {
  // 2000 flat datasets (8 groups × 60 trials, recall 0.6). Rejection at α = 0.05 must lie in
  // 0.05 ± 5 sd of a binomial proportion over 2000 datasets (sd = 0.00487). The permutation
  // p-value with B = 199 rejects with probability ≤ 10/200 = 0.05 (ties make it conservative).
  const int datasets = 2000;
  const double alpha = 0.05, band = 5 * std::sqrt(alpha * (1 - alpha) / datasets);
  int rej_perm = 0, rej_chi = 0, rej_fund = 0, rej_s2 = 0;
  for (int d = 0; d < datasets; ++d) {
    const counts h = simulate(std::vector<double>(8, 0.6), 60, 2024, d);
    const counts t(8, 60);
    stats::periodicity_options o{.permutations = 199, .seed = static_cast<std::uint64_t>(d)};
    const auto r = stats::periodicity_test(h, t, 8, 4, o);
    rej_perm += r.p <= alpha;
    rej_chi += r.p_chi_square <= alpha;
    stats::periodicity_options f{.statistic = stats::periodicity_statistic::fundamental,
                                 .reference = stats::periodicity_reference::chi_square};
    rej_fund += stats::periodicity_test(h, t, 8, 4, f).p <= alpha;
    rej_s2 += stats::periodicity_test(h, t, 8, 2, f).p <= alpha;
  }
  INFO("permutation " << rej_perm << ", chi-square " << rej_chi << ", fundamental " << rej_fund << ", S=2 " << rej_s2);
  for (int rej : {rej_perm, rej_chi, rej_fund, rej_s2}) {
    CHECK(double(rej) / datasets >= alpha - band);
    CHECK(double(rej) / datasets <= alpha + band);
  }
}

TEST_CASE("periodicity: power on a clearly periodic case", "[stats][periodicity]") {
  // S = 4, 8 groups, recall 0.5 except phase 1 (groups 1 and 5) at 0.7; 200 trials a group.
  // Expected X² noncentrality ≈ 2·200·(0.2²·3/4)/0.25·… ≈ 40 on 3 dof: essentially always rejected.
  int rejected = 0;
  for (int d = 0; d < 50; ++d) {
    const counts h = simulate({0.5, 0.7, 0.5, 0.5, 0.5, 0.7, 0.5, 0.5}, 200, 99, d);
    const counts t(8, 200);
    const auto r = stats::periodicity_test(h, t, 8, 4, {.permutations = 999, .seed = 5});
    rejected += r.p <= 0.01;
    if (d == 0) {
      CHECK(r.peak_phase == Approx(1.0).margin(0.5));
      CHECK(r.test.find("permutation") != std::string::npos);
    }
  }
  CHECK(rejected >= 48);
}

TEST_CASE("periodicity: deterministic for a seed, degenerate and bad input", "[stats][periodicity]") {
  const counts h{30, 41, 35, 33}, t{60, 60, 60, 60};
  const auto a = stats::periodicity_test(h, t, 4, 4, {.permutations = 500, .seed = 11});
  const auto b = stats::periodicity_test(h, t, 4, 4, {.permutations = 500, .seed = 11});
  CHECK(a.p == b.p);
  CHECK(a.statistic == b.statistic);
  CHECK(a.permutations == 500);
  CHECK(a.p_mc_error == Approx(std::sqrt(a.p * (1 - a.p) / 500)));
  for (const auto& hh : {counts{60, 60, 60, 60}, counts{0, 0, 0, 0}}) {
    const auto r = stats::periodicity_test(hh, t, 4, 2);
    CHECK(r.p == 1.0);
    CHECK(r.statistic == 0.0);
    CHECK(r.power == 0.0);
  }
  // Only groups at one phase mod 2 have trials: nothing to compare.
  const auto one = stats::periodicity_test(counts{3, 0, 7, 0}, counts{10, 0, 10, 0}, 4, 2);
  CHECK(one.p == 1.0);
  CHECK(one.dof == 0);
  CHECK(std::isfinite(one.amplitude));
  CHECK_THROWS_WITH(stats::periodicity_test(h, t, 4, 3), Catch::Contains("period = 3") && Catch::Contains("divide"));
  CHECK_THROWS_WITH(stats::periodicity_test(h, t, 8, 4), Catch::Contains("trials.size()"));
  CHECK_THROWS_WITH(stats::periodicity_test(h, t, 4, 1), Catch::Contains("period"));
  CHECK_THROWS_WITH(stats::periodicity_test(h, t, 4, 4, {.permutations = 0}), Catch::Contains("permutations"));
  CHECK_THROWS_WITH(stats::periodicity_test(counts{1, 2, 3, 99}, t, 4, 4), Catch::Contains("hits[3]"));
}

TEST_CASE("gap: point value, bootstrap interval, degenerate data, determinism", "[stats][gap]") {
  CHECK(stats::phase_gap(counts{9, 5, 0}, counts{10, 10, 0}) == Approx(0.4));
  CHECK(stats::phase_gap(counts{9}, counts{10}) == 0.0);
  const std::int64_t n = 1000;
  const counts h{900, 500}, t{n, n};
  const auto r = stats::phase_gap_bootstrap(h, t, {.replicates = 2000, .seed = 3});
  CHECK(r.gap == Approx(0.4));
  CHECK(r.argmax == 0);
  CHECK(r.argmin == 1);
  // Two groups: the gap is a difference of proportions, sd = sqrt(.09/n + .25/n).
  const double sd = std::sqrt(0.09 / n + 0.25 / n), width = 2 * 1.959964 * sd;
  CHECK(r.ci.low < 0.4);
  CHECK(r.ci.high > 0.4);
  CHECK(r.ci.high - r.ci.low == Approx(width).epsilon(0.12));
  const auto r2 = stats::phase_gap_bootstrap(h, t, {.replicates = 2000, .seed = 3});
  CHECK(r2.ci == r.ci);
  const auto r3 = stats::phase_gap_bootstrap(h, t, {.replicates = 2000, .seed = 4});
  CHECK(r3.ci != r.ci);
  for (const auto& hh : {counts{n, n}, counts{0, 0}}) {
    const auto d = stats::phase_gap_bootstrap(hh, t);
    CHECK(d.gap == 0.0);
    CHECK(d.ci == stats::interval{0.0, 0.0});
  }
  const auto z = stats::phase_gap_bootstrap(counts{5, 5}, counts{10, 10}, {.replicates = 0});
  CHECK(z.ci == stats::interval{0.0, 0.0});
  CHECK_THROWS_WITH(stats::phase_gap_bootstrap(h, t, {.replicates = -1}), Catch::Contains("replicates"));
  CHECK_THROWS_WITH(stats::phase_gap_bootstrap(h, t, {.confidence = 2}), Catch::Contains("confidence"));
  CHECK_THROWS_WITH(stats::phase_gap(counts{11}, counts{10}), Catch::Contains("hits[0]"));
}

TEST_CASE("gap difference: contrast of two models with a bootstrap interval", "[stats][gap]") {
  const counts ta{1000, 1000}, ha{900, 500}, tb{1000, 1000}, hb{950, 940};
  const auto d = stats::gap_difference_bootstrap(ha, ta, hb, tb, {.replicates = 2000, .seed = 9});
  CHECK(d.difference == Approx(0.39));
  CHECK(d.ci.low < 0.39);
  CHECK(d.ci.high > 0.39);
  CHECK(d.ci.low > 0.3);
  const auto e = stats::gap_difference_bootstrap(ha, ta, hb, tb, {.replicates = 2000, .seed = 9});
  CHECK(e.ci == d.ci);
  const auto same = stats::gap_difference_bootstrap(counts{10, 10}, counts{10, 10}, counts{0, 0}, counts{10, 10});
  CHECK(same.difference == 0.0);
  CHECK(same.ci == stats::interval{0.0, 0.0});
  CHECK_THROWS_WITH(stats::gap_difference_bootstrap(ha, ta, counts{1}, counts{0}), Catch::Contains("hits[0]"));
}
