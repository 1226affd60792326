// Paired tests (stats/paired.hpp): Cochran's Q, McNemar, flip count and Friedman against
// hand-computed values and brute-force enumeration, exact merges, consistency checks, and the
// false-positive rate under the null (fixed seeds, z = 5 bounds).
#include <catch2/catch.hpp>

#include <kvphase/core/error.hpp>
#include <kvphase/core/rng.hpp>
#include <kvphase/stats/paired.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace stats = kvphase::stats;
using rows_t = std::vector<std::vector<int>>;

namespace {

stats::paired_counts counts_of(const rows_t& rows, std::int64_t k) {
  auto c = stats::paired_counts::zero(k);
  for (const auto& r : rows) {
    std::vector<std::uint8_t> o(r.begin(), r.end());
    c.add_item(std::span<const std::uint8_t>(o));
  }
  return c;
}

// Cochran's Q from its definition on the raw matrix: k(k−1) Σ_g (C_g − C̄)² / Σ_i R_i (k − R_i).
double naive_q(const rows_t& rows, int k) {
  std::vector<double> col(k, 0.0);
  double den = 0.0;
  for (const auto& r : rows) {
    double ri = 0;
    for (int g = 0; g < k; ++g) {
      col[g] += r[g];
      ri += r[g];
    }
    den += ri * (k - ri);
  }
  if (den == 0) return 0.0;
  const double mean = std::accumulate(col.begin(), col.end(), 0.0) / k;
  double num = 0;
  for (double c : col) num += (c - mean) * (c - mean);
  return k * (k - 1) * num / den;
}

// Exact permutation p by brute force: every one of the (k!)^n within-row permutations, equally
// likely under H0, statistic from the definition.
double brute_force_p(const rows_t& rows, int k) {
  const double q_obs = naive_q(rows, k);
  std::vector<std::vector<int>> perms;
  std::vector<int> p(k);
  std::iota(p.begin(), p.end(), 0);
  do perms.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  const std::size_t n = rows.size();
  std::vector<std::size_t> idx(n, 0);
  double total = 0, ge = 0;
  rows_t cur = rows;
  while (true) {
    for (std::size_t i = 0; i < n; ++i)
      for (int g = 0; g < k; ++g) cur[i][g] = rows[i][perms[idx[i]][g]];
    total += 1;
    ge += naive_q(cur, k) >= q_obs - 1e-9;
    std::size_t i = 0;
    while (i < n && ++idx[i] == perms.size()) idx[i++] = 0;
    if (i == n) break;
  }
  return ge / total;
}

rows_t random_rows(std::size_t n, int k, std::uint64_t seed, std::uint64_t stream, double lo = 0.1, double hi = 0.9,
                   std::vector<double> shift = {}) {
  kvphase::rng::philox_stream s(seed, stream);
  rows_t rows(n, std::vector<int>(k));
  for (auto& r : rows) {
    const double p = lo + (hi - lo) * s.uniform();
    for (int g = 0; g < k; ++g) r[g] = s.uniform() < std::clamp(p + (shift.empty() ? 0.0 : shift[g]), 0.0, 1.0);
  }
  return rows;
}

// z = 5 band of a rejection rate under the null: |rate − α| ≤ 5 sqrt(α(1 − α)/n).
double band(double alpha, double n) { return 5.0 * std::sqrt(alpha * (1 - alpha) / n); }

}  // namespace

TEST_CASE("paired: Cochran's Q on a hand-computed table", "[stats][paired]") {
  // Column totals 6, 4, 2; N = 12; Σ R² = 4+1+9+0+1+4+4+1 = 24:
  // Q = 2 (3·56 − 144) / (36 − 24) = 4; χ²(2) upper tail = e^−2.
  const rows_t rows{{1, 1, 0}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {1, 0, 1}, {0, 1, 0}};
  const auto c = counts_of(rows, 3);
  CHECK(c.items == 8);
  CHECK(c.hits == std::vector<std::int64_t>{6, 4, 2});
  CHECK(c.row_totals == std::vector<std::int64_t>{1, 3, 3, 1});
  CHECK(c.flips() == 6);
  const auto q = stats::cochran_q(c);
  CHECK(q.statistic == Approx(4.0).epsilon(1e-14));
  CHECK(q.dof == 2.0);
  CHECK(q.p_chi_square == Approx(std::exp(-2.0)).epsilon(1e-12));
  CHECK(q.reference == "exact");
  CHECK(q.p == Approx(brute_force_p(rows, 3)).epsilon(1e-12));
}

TEST_CASE("paired: exact Cochran p equals brute-force enumeration", "[stats][paired]") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const int k = seed % 2 ? 3 : 4;
    const std::size_t n = k == 3 ? 5 : 3;  // (3!)^5 = 7776, (4!)^3 = 13824 arrangements
    const auto rows = random_rows(n, k, seed, 7, 0.2, 0.8, std::vector<double>(k, 0.0));
    const auto q = stats::cochran_q(counts_of(rows, k));
    INFO("seed " << seed);
    CHECK(q.statistic == Approx(naive_q(rows, k)).margin(1e-12));
    CHECK(q.reference == "exact");
    CHECK(q.p == Approx(brute_force_p(rows, k)).margin(1e-12));
  }
}

TEST_CASE("paired: permutation p agrees with the exact p within its Monte Carlo error", "[stats][paired]") {
  const rows_t rows = random_rows(12, 3, 11, 3, 0.2, 0.8, {0.2, 0.0, -0.2});
  const auto c = counts_of(rows, 3);
  const auto exact = stats::cochran_q(c);
  REQUIRE(exact.reference == "exact");
  stats::paired_options o;
  o.exact_limit = 0;
  o.permutations = 20000;
  o.seed = 5;
  const auto perm = stats::cochran_q(c, o);
  REQUIRE(perm.reference == "permutation");
  const double se = std::sqrt(exact.p * (1 - exact.p) / o.permutations);
  CHECK(std::abs(perm.p - exact.p) <= 5 * se + 1.0 / o.permutations);
  // deterministic in the seed
  CHECK(stats::cochran_q(c, o).p == perm.p);
  o.permutations = 0;
  CHECK(stats::cochran_q(c, o).reference == "chi_square");
}

TEST_CASE("paired: McNemar by hand and Cochran's Q for two groups", "[stats][paired]") {
  // 10 items (1, 0), 2 items (0, 1), 5 items (1, 1), 3 items (0, 0).
  rows_t rows;
  for (int i = 0; i < 10; ++i) rows.push_back({1, 0});
  for (int i = 0; i < 2; ++i) rows.push_back({0, 1});
  for (int i = 0; i < 5; ++i) rows.push_back({1, 1});
  for (int i = 0; i < 3; ++i) rows.push_back({0, 0});
  const auto c = counts_of(rows, 2);
  const auto m = stats::mcnemar(c, 0, 1);
  CHECK(m.a_only == 10);
  CHECK(m.b_only == 2);
  // X ~ Bin(12, 1/2): P(X ≤ 2) = (1 + 12 + 66)/4096, P(X = 2) = 66/4096
  CHECK(m.p_exact == Approx(158.0 / 4096).epsilon(1e-12));
  CHECK(m.p_mid == Approx(92.0 / 4096).epsilon(1e-12));
  CHECK(m.statistic == Approx(64.0 / 12).epsilon(1e-14));
  const auto q = stats::cochran_q(c);
  CHECK(q.statistic == Approx(m.statistic).epsilon(1e-14));
  CHECK(q.p_chi_square == Approx(m.p_chi_square).epsilon(1e-12));
  CHECK(q.p == Approx(m.p_exact).epsilon(1e-12));
  // symmetric in the groups; balanced discordance and no discordance give p = 1
  CHECK(stats::mcnemar(c, 1, 0).p_exact == Approx(m.p_exact).epsilon(1e-14));
  const auto even = stats::mcnemar(counts_of({{1, 0}, {0, 1}, {1, 0}, {0, 1}}, 2), 0, 1);
  CHECK(even.p_exact == 1.0);
  CHECK(even.p_mid == Approx(1.0).epsilon(1e-12));
  const auto none = stats::mcnemar(counts_of({{1, 1}, {0, 0}}, 2), 0, 1);
  CHECK(none.p_exact == 1.0);
  CHECK(none.statistic == 0.0);
  CHECK_THROWS_AS(stats::mcnemar(c, 0, 0), kvphase::error);
  CHECK_THROWS_AS(stats::mcnemar(c, 0, 2), kvphase::error);
}

TEST_CASE("paired: constant rows, summary, flip interval", "[stats][paired]") {
  const auto c = counts_of({{1, 1, 1, 1}, {0, 0, 0, 0}, {1, 1, 1, 1}}, 4);
  const auto s = stats::summarize_paired(c);
  CHECK(s.cochran.statistic == 0.0);
  CHECK(s.cochran.p == 1.0);
  CHECK(s.flips == 0);
  CHECK(s.flip_ci.low == 0.0);
  CHECK(s.best_vs_worst.p_exact == 1.0);
  const auto t = stats::summarize_paired(counts_of({{1, 0, 0}, {1, 1, 0}, {1, 1, 1}, {1, 0, 0}}, 3));
  CHECK(t.best_vs_worst.group_a == 0);
  CHECK(t.best_vs_worst.group_b == 2);
  CHECK(t.flips == 3);
  CHECK(t.flip_fraction == 0.75);
  CHECK(t.flip_ci == stats::wilson_interval(3, 4, 0.95));
  CHECK(t.best_vs_worst_p_adjusted == std::min(1.0, 3 * t.best_vs_worst.p_exact));
}

TEST_CASE("paired: counts merge exactly and inconsistent counts are refused", "[stats][paired]") {
  const auto rows = random_rows(50, 5, 3, 1);
  const auto whole = counts_of(rows, 5);
  auto a = counts_of(rows_t(rows.begin(), rows.begin() + 17), 5);
  const auto b = counts_of(rows_t(rows.begin() + 17, rows.end()), 5);
  stats::paired_counts merged;
  merged += a;
  merged += b;
  CHECK(merged == whole);
  CHECK_NOTHROW(whole.validate());
  CHECK_THROWS_AS(a += stats::paired_counts::zero(4), kvphase::error);
  auto bad = whole;
  bad.items += 1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("paired.row_totals"));
  bad = whole;
  bad.hits[0] += 1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("paired.hits"));
  bad = whole;
  bad.discordant[1] += 1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("paired.discordant"));
  bad = whole;
  bad.discordant[0] = 1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("diagonal"));
  bad = whole;
  bad.discordant.pop_back();
  CHECK_THROWS_AS(bad.validate(), kvphase::error);
  CHECK_THROWS_AS(stats::paired_counts::zero(1), kvphase::error);
  CHECK_THROWS_AS(stats::paired_counts::zero(65), kvphase::error);
}

TEST_CASE("paired: false-positive rate under the null", "[stats][paired]") {
  // 2000 null datasets: 40 items × 4 groups, item difficulty p_i ~ U(0.1, 0.9), outcomes
  // independent across groups given p_i (exchangeable within an item).
  const int datasets = 2000, k = 4;
  const double alpha = 0.05;
  int rej_chi = 0, rej_perm = 0, rej_mc = 0, rej_mid = 0, rej_bw = 0;
  stats::paired_options o;
  o.permutations = 199;
  o.exact_limit = 0;
  for (int d = 0; d < datasets; ++d) {
    const auto c = counts_of(random_rows(40, k, 2026, static_cast<std::uint64_t>(d)), k);
    o.seed = static_cast<std::uint64_t>(d);
    const auto q = stats::cochran_q(c, o);
    rej_chi += q.p_chi_square <= alpha;
    rej_perm += q.p <= alpha;
    const auto m = stats::mcnemar(c, 0, 1);
    rej_mc += m.p_exact <= alpha;
    rej_mid += m.p_mid <= alpha;
    rej_bw += stats::summarize_paired(c, o).best_vs_worst_p_adjusted <= alpha;
  }
  const double n = datasets, b = band(alpha, n);
  INFO("chi " << rej_chi << " perm " << rej_perm << " mcnemar " << rej_mc << " mid " << rej_mid << " bw " << rej_bw);
  CHECK(std::abs(rej_chi / n - alpha) <= b);
  CHECK(std::abs(rej_perm / n - alpha) <= b);
  CHECK(rej_mc / n <= alpha + b);  // exact binomial: conservative
  CHECK(std::abs(rej_mid / n - alpha) <= b);
  CHECK(rej_bw / n <= alpha + b);  // Bonferroni over the pairs keeps the post-hoc choice's level
}

TEST_CASE("paired: Cochran's Q detects a planted group effect", "[stats][paired]") {
  const auto c = counts_of(random_rows(200, 4, 9, 9, 0.2, 0.8, {0.15, 0.0, 0.0, -0.15}), 4);
  const auto s = stats::summarize_paired(c);
  CHECK(s.cochran.p_chi_square < 1e-6);
  CHECK(s.cochran.p <= 1.0 / 10000);  // the permutation floor 1/(1 + B)
  CHECK(s.best_vs_worst.group_a == 0);
  CHECK(s.best_vs_worst.group_b == 3);
}

TEST_CASE("paired: Friedman against the closed form, ties, merge and null rate", "[stats][paired]") {
  // No ties: 3 items × 3 groups, ranks (1,2,3), (1,3,2), (1,2,3): R = (3, 7, 8),
  // X² = 12/(3·3·4) · (9 + 49 + 64) − 3·3·4 = 122/3 − 36 = 14/3.
  auto f = stats::friedman_counts::zero(3);
  for (auto r : std::vector<std::vector<double>>{{0.1, 0.5, 0.9}, {-1, 3, 2}, {5, 6, 7}}) f.add_item(r);
  auto t = stats::friedman_test(f);
  CHECK(t.statistic == Approx(14.0 / 3).epsilon(1e-13));
  CHECK(t.p == Approx(std::exp(-7.0 / 3)).epsilon(1e-12));
  // A tie (1, 1, 2) → mid-ranks (1.5, 1.5, 3), tie term 6: R = (4.5, 8.5, 11),
  // num = 12/(4·3·4) (20.25 + 72.25 + 121) − 48 = 5.375, den = 1 − 6/(4·3·8) = 0.9375.
  const std::vector<double> tie{1, 1, 2};
  f.add_item(tie);
  t = stats::friedman_test(f);
  CHECK(t.statistic == Approx(5.375 / 0.9375).epsilon(1e-13));
  // constant items: no evidence
  auto flat = stats::friedman_counts::zero(3);
  flat.add_item(std::vector<double>{2, 2, 2});
  CHECK(stats::friedman_test(flat).p == 1.0);
  // exact merge
  auto a = stats::friedman_counts::zero(3), b = stats::friedman_counts::zero(3);
  a.add_item(std::vector<double>{0.1, 0.5, 0.9});
  b.add_item(std::vector<double>{1, 1, 2});
  a += b;
  CHECK(a.rank_sum2 == std::vector<std::int64_t>{2 + 3, 4 + 3, 6 + 6});
  CHECK_THROWS_AS(a.add_item(std::vector<double>{1, NAN, 2}), kvphase::error);
  // null: item offsets plus iid noise, 30 items × 4 groups, 2000 datasets
  const double alpha = 0.05;
  int rej = 0;
  for (int d = 0; d < 2000; ++d) {
    kvphase::rng::philox_stream s(77, static_cast<std::uint64_t>(d));
    auto fc = stats::friedman_counts::zero(4);
    for (int i = 0; i < 30; ++i) {
      const double off = 10 * s.uniform();
      std::vector<double> x(4);
      for (auto& v : x) v = off + s.normal();
      fc.add_item(x);
    }
    rej += stats::friedman_test(fc).p <= alpha;
  }
  CHECK(std::abs(rej / 2000.0 - alpha) <= band(alpha, 2000));
}
