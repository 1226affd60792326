#pragma once
/// \file stats/paired.hpp
/// Paired (within-item) tests for k groups × n items: the same item observed in every group
/// (e.g. one context and target shifted by prefix padding to every phase). Answers "does the
/// same item change its answer with its group?", which the independent-design tests of
/// stats/uniformity.hpp and stats/periodicity.hpp cannot separate from item-to-item variation.
///
/// 0/1 outcomes. Everything here is computed from paired_counts, sufficient statistics that
/// add exactly across shards (integers only):
///   hits[g]         C_g: items with outcome 1 in group g (column totals);
///   row_totals[r]   items whose outcome is 1 in exactly r of the k groups (r = 0 … k);
///   discordant[g·k+h] items with outcome 1 in group g and 0 in group h.
/// - Cochran's Q (1950): with N = Σ_g C_g, Σ R² = Σ_r r² row_totals[r],
///     Q = (k − 1) (k Σ_g C_g² − N²) / (k N − Σ R²),
///   referred to χ²(k − 1). Under H0 (within each item the k outcomes are exchangeable) the
///   conditional distribution given the row totals is that of each item with total r placing its
///   r ones on a uniformly random r-subset of the groups; it depends only on row_totals. The exact
///   p-value enumerates it when the number of arrangements Π C(k, r_i) is at most
///   paired_options::exact_limit; otherwise a permutation p-value (1 + #{Q* ≥ Q}) / (1 + B) is
///   drawn from it when items × B ≤ paired_options::permutation_budget; otherwise only χ².
///   Q is compared through the integer Σ_g C_g² (Q is increasing in it given the row totals), so
///   ties are exact. No informative item (every row constant): Q = 0, p = 1.
/// - McNemar (1947) for groups a, b: discordant pairs n10 = discordant[a·k+b], n01 =
///   discordant[b·k+a], n = n10 + n01; under H0 n10 ~ Bin(n, 1/2):
///     exact two-sided p = min(1, 2 P(X ≤ min(n10, n01))), mid-p = exact − P(X = min(n10, n01)),
///     χ² = (n10 − n01)² / n on 1 dof (no continuity correction). n = 0: statistic 0, p = 1.
///   For k = 2 Cochran's Q equals this χ² and its exact p equals the exact McNemar p.
/// - Flip count: items whose outcome is not constant across groups (n − row_totals[0] −
///   row_totals[k]), with its binomial interval as a fraction of the items.
///
/// Continuous scores. friedman_counts holds, per group, the sum of the within-item ranks (mid-
/// ranks for ties, stored doubled so they stay integers) and the tie term Σ_items Σ_ties (t³ − t);
/// both add across shards. Friedman (1937):
///   X² = [12 / (n k (k + 1)) Σ_g R_g² − 3 n (k + 1)] / [1 − Σ(t³ − t) / (n k (k² − 1))],
/// referred to χ²(k − 1); no variation within any item → X² = 0, p = 1.
///
/// Counts are limited to 2^53 (stats/intervals.hpp, max_total_trials) so every sum is exact in a
/// double; inconsistent counts throw kvphase::error naming the field and the rule.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>


#include "kvphase/core/error.hpp"
#include "kvphase/core/special.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/stats/intervals.hpp"
#include "kvphase/stats/paired_counts.hpp"
#include "kvphase/stats/uniformity.hpp"

namespace kvphase::stats {

/// How the paired p-values are computed.
struct paired_options {
  double confidence = 0.95;  ///< for the flip interval
  interval_method interval = interval_method::wilson;
  std::int64_t permutations = 9999;  ///< B of the permutation p (0: χ² only beyond exact)
  std::uint64_t seed = 0;            ///< permutation stream
  double exact_limit = 1e5;          ///< most arrangements Π C(k, r_i) enumerated exactly
  double permutation_budget = 2e8;   ///< most informative items × B drawn
  void validate() const {
    require_confidence(confidence, "paired.confidence");
    require(permutations >= 0 && permutations <= max_paired_permutations, "paired.permutations", permutations,
            "must be in [0, " + std::to_string(max_paired_permutations) + "]");
    require(std::isfinite(exact_limit) && exact_limit >= 0, "paired.exact_limit", exact_limit,
            "must be finite and >= 0");
    require(std::isfinite(permutation_budget) && permutation_budget >= 0, "paired.permutation_budget",
            permutation_budget, "must be finite and >= 0");
  }
};

/// Cochran's Q with its χ² p and, where computed, the exact or permutation p.
struct cochran_result {
  double statistic = 0.0;
  double dof = 0.0;
  double p = 1.0;                        ///< p of `reference`
  double p_chi_square = 1.0;             ///< asymptotic χ²(k − 1)
  std::string reference = "chi_square";  ///< "exact", "permutation" or "chi_square"
};

/// McNemar's test for groups a, b.
struct mcnemar_result {
  std::int64_t group_a = 0, group_b = 0;
  std::int64_t a_only = 0;  ///< items with 1 in a and 0 in b
  std::int64_t b_only = 0;  ///< items with 0 in a and 1 in b
  double p_exact = 1.0;     ///< exact two-sided binomial
  double p_mid = 1.0;       ///< mid-p
  double statistic = 0.0;   ///< χ², no continuity correction
  double p_chi_square = 1.0;
};

namespace detail {

/// log C(n, r) for small n.
inline double log_choose(std::int64_t n, std::int64_t r) {
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(r) + 1) -
         std::lgamma(static_cast<double>(n - r) + 1);
}

/// Exact null distribution of S2 = Σ_g C_g² given the row totals: P(S2 ≥ s2_obs). Dynamic
/// programming over items on the column-total vector; exact in the arrangement
/// count (probabilities are products of 1 / C(k, r)).
inline double cochran_exact_upper(const paired_counts& c, std::int64_t s2_obs) {
  const auto k = static_cast<std::size_t>(c.groups);
  // fully concordant items (r = k) add the same count to every column
  std::map<std::vector<std::int64_t>, double> dist{{std::vector<std::int64_t>(k, c.row_totals[k]), 1.0}};
  // every r-subset of k groups, once
  for (std::size_t r = 1; r < k; ++r) {
    const std::int64_t count = c.row_totals[r];
    if (count == 0) continue;
    std::vector<std::vector<std::size_t>> subsets;
    std::vector<std::size_t> idx(r);
    for (std::size_t i = 0; i < r; ++i) idx[i] = i;
    while (true) {
      subsets.push_back(idx);
      std::size_t i = r;
      while (i > 0 && idx[i - 1] == k - r + i - 1) --i;
      if (i == 0) break;
      ++idx[i - 1];
      for (std::size_t j = i; j < r; ++j) idx[j] = idx[j - 1] + 1;
    }
    const double w = 1.0 / static_cast<double>(subsets.size());
    for (std::int64_t it = 0; it < count; ++it) {
      std::map<std::vector<std::int64_t>, double> next;
      for (const auto& [v, pr] : dist)
        for (const auto& s : subsets) {
          auto u = v;
          for (auto g : s) ++u[g];
          next[u] += pr * w;
        }
      dist.swap(next);
    }
  }
  double upper = 0.0;
  for (const auto& [v, pr] : dist) {
    std::int64_t s2 = 0;
    for (auto x : v) s2 += x * x;
    if (s2 >= s2_obs) upper += pr;
  }
  return std::clamp(upper, 0.0, 1.0);
}

}  // namespace detail

/// Cochran's Q of the counts (see the file comment for the reference distribution used).
inline cochran_result cochran_q(const paired_counts& c, const paired_options& o = {}) {
  c.validate();
  o.validate();
  const std::int64_t k = c.groups;
  cochran_result r;
  r.dof = static_cast<double>(k - 1);
  const double kd = static_cast<double>(k);
  double n_ones = 0, sum_r2 = 0, sum_c2 = 0;
  std::int64_t s2 = 0;
  for (std::int64_t rr = 0; rr <= k; ++rr) {
    const double v = static_cast<double>(c.row_totals[static_cast<std::size_t>(rr)]);
    n_ones += static_cast<double>(rr) * v;
    sum_r2 += static_cast<double>(rr * rr) * v;
  }
  bool s2_exact = true;
  for (auto h : c.hits) {
    sum_c2 += static_cast<double>(h) * static_cast<double>(h);
    std::int64_t sq = 0;
    if (__builtin_mul_overflow(h, h, &sq) || __builtin_add_overflow(s2, sq, &s2)) s2_exact = false;
  }
  const double den = kd * n_ones - sum_r2;  // Σ_i R_i (k − R_i) ≥ 0, 0 iff no informative item
  if (!(den > 0.0)) {
    r.reference = "exact";
    return r;  // statistic 0, p 1
  }
  r.statistic = std::max(0.0, (kd - 1.0) * (kd * sum_c2 - n_ones * n_ones) / den);
  r.p_chi_square = chi_square_upper_tail(r.statistic, r.dof);
  r.p = r.p_chi_square;
  // arrangements of the informative items
  double log_arr = 0.0, informative = 0.0;
  for (std::int64_t rr = 1; rr < k; ++rr) {
    const double v = static_cast<double>(c.row_totals[static_cast<std::size_t>(rr)]);
    log_arr += v * detail::log_choose(k, rr);
    informative += v;
  }
  if (s2_exact && log_arr <= std::log(std::max(o.exact_limit, 1.0)) + 1e-9) {
    r.p = detail::cochran_exact_upper(c, s2);
    r.reference = "exact";
  } else if (s2_exact && o.permutations > 0 &&
             informative * static_cast<double>(o.permutations) <= o.permutation_budget) {
    rng::philox_stream s(o.seed, rng::hash_text("kvphase.stats.cochran_q"));
    const auto ku = static_cast<std::size_t>(k);
    std::vector<std::int64_t> col(ku);
    std::vector<std::size_t> perm(ku);
    std::int64_t ge = 0;
    for (std::int64_t b = 0; b < o.permutations; ++b) {
      std::fill(col.begin(), col.end(), 0);
      for (std::int64_t rr = 1; rr < k; ++rr) {
        const std::int64_t count = c.row_totals[static_cast<std::size_t>(rr)];
        for (std::int64_t it = 0; it < count; ++it) {
          for (std::size_t i = 0; i < ku; ++i) perm[i] = i;
          // partial Fisher–Yates: the first rr entries are a uniform rr-subset
          for (std::size_t i = 0; i < static_cast<std::size_t>(rr); ++i) {
            const std::size_t j = i + static_cast<std::size_t>(s.below(ku - i));
            std::swap(perm[i], perm[j]);
            ++col[perm[i]];
          }
        }
      }
      // fully concordant items add the same to every permuted column
      std::int64_t s2b = 0;
      for (std::size_t g = 0; g < ku; ++g) {
        const std::int64_t x = col[g] + c.row_totals[ku];
        s2b += x * x;
      }
      ge += s2b >= s2;
    }
    r.p = static_cast<double>(1 + ge) / static_cast<double>(1 + o.permutations);
    r.reference = "permutation";
  }
  return r;
}

/// McNemar's test for groups a and b (a ≠ b, both in [0, k)).
inline mcnemar_result mcnemar(const paired_counts& c, std::int64_t a, std::int64_t b) {
  c.validate();
  require(a >= 0 && a < c.groups, "mcnemar.group_a", a, "must be in [0, groups)");
  require(b >= 0 && b < c.groups && b != a, "mcnemar.group_b", b, "must be in [0, groups) and differ from group_a");
  mcnemar_result m;
  m.group_a = a;
  m.group_b = b;
  const auto k = static_cast<std::size_t>(c.groups);
  m.a_only = c.discordant[static_cast<std::size_t>(a) * k + static_cast<std::size_t>(b)];
  m.b_only = c.discordant[static_cast<std::size_t>(b) * k + static_cast<std::size_t>(a)];
  const std::int64_t n = m.a_only + m.b_only;
  if (n == 0) return m;
  const double diff = static_cast<double>(m.a_only - m.b_only);
  m.statistic = diff * diff / static_cast<double>(n);
  m.p_chi_square = chi_square_upper_tail(m.statistic, 1.0);
  const double lo = static_cast<double>(std::min(m.a_only, m.b_only));
  const double tail = special::binomial_half_cdf(static_cast<double>(n), lo);
  const double point = special::binomial_half_pdf(static_cast<double>(n), lo);
  m.p_exact = std::clamp(2.0 * tail, 0.0, 1.0);
  m.p_mid = std::clamp(2.0 * tail - point, 0.0, 1.0);
  return m;
}

/// Groups with the most and the fewest hits (first such group on ties).
inline std::pair<std::int64_t, std::int64_t> best_worst_groups(const paired_counts& c) {
  c.validate();
  const auto best = std::max_element(c.hits.begin(), c.hits.end()) - c.hits.begin();
  const auto worst = std::min_element(c.hits.begin(), c.hits.end()) - c.hits.begin();
  return {best, worst == best ? (best == 0 ? 1 : 0) : worst};
}

/// Paired analysis of one model: Cochran's Q across groups, McNemar best vs worst group, and the
/// per-item flip count with its interval.
struct paired_summary {
  std::int64_t groups = 0, items = 0;
  cochran_result cochran;
  mcnemar_result best_vs_worst;
  /// best_vs_worst.p_exact × k(k − 1)/2 (Bonferroni over every pair, capped at 1): the two groups
  /// are chosen after looking at the data, so only this adjusted p keeps its level.
  double best_vs_worst_p_adjusted = 1.0;
  std::int64_t flips = 0;
  double flip_fraction = 0.0;
  interval flip_ci;
};

inline paired_summary summarize_paired(const paired_counts& c, const paired_options& o = {}) {
  c.validate();
  o.validate();
  paired_summary s;
  s.groups = c.groups;
  s.items = c.items;
  s.cochran = cochran_q(c, o);
  const auto [best, worst] = best_worst_groups(c);
  s.best_vs_worst = mcnemar(c, best, worst);
  const double pairs = static_cast<double>(c.groups * (c.groups - 1) / 2);
  s.best_vs_worst_p_adjusted = std::min(1.0, s.best_vs_worst.p_exact * pairs);
  s.flips = c.flips();
  s.flip_fraction = recall(s.flips, c.items);
  s.flip_ci = binomial_interval(s.flips, c.items, o.confidence, o.interval);
  return s;
}

// ---- continuous scores: Friedman ------------------------------------------------------------------

/// Sufficient statistics of the Friedman test (see the file comment); adds across shards.
struct friedman_counts {
  std::int64_t groups = 0;
  std::int64_t items = 0;
  std::vector<std::int64_t> rank_sum2;  ///< per group: Σ_items 2 × (mid-)rank, ranks 1 … k
  std::int64_t tie_term = 0;            ///< Σ_items Σ_ties (t³ − t)

  static friedman_counts zero(std::int64_t k) {
    require(k >= 2 && k <= max_paired_groups, "friedman.groups", k,
            "must be in [2, " + std::to_string(max_paired_groups) + "]");
    friedman_counts f;
    f.groups = k;
    f.rank_sum2.assign(static_cast<std::size_t>(k), 0);
    return f;
  }
  /// Adds one item's scores (finite) for every group.
  void add_item(std::span<const double> score) {
    require(static_cast<std::int64_t>(score.size()) == groups, "score.size()", score.size(),
            "must equal friedman.groups = " + std::to_string(groups));
    const std::size_t k = score.size();
    for (std::size_t g = 0; g < k; ++g)
      require(std::isfinite(score[g]), "score[" + std::to_string(g) + "]", score[g], "must be finite");
    std::vector<std::size_t> order(k);
    for (std::size_t i = 0; i < k; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return score[x] < score[y]; });
    for (std::size_t i = 0; i < k;) {
      std::size_t j = i;
      while (j + 1 < k && score[order[j + 1]] == score[order[i]]) ++j;
      const auto t = static_cast<std::int64_t>(j - i + 1);
      const auto r2 = static_cast<std::int64_t>(i + 1 + j + 1);  // 2 × mid-rank
      for (std::size_t m = i; m <= j; ++m) rank_sum2[order[m]] += r2;
      tie_term += t * t * t - t;
      i = j + 1;
    }
    ++items;
  }
  friedman_counts& operator+=(const friedman_counts& o) {
    if (o.groups == 0) return *this;
    if (groups == 0) return *this = o;
    require(o.groups == groups, "friedman.groups", o.groups, "must match the counts merged into");
    for (std::size_t g = 0; g < rank_sum2.size(); ++g) rank_sum2[g] += o.rank_sum2[g];
    items += o.items;
    tie_term += o.tie_term;
    return *this;
  }
  friend bool operator==(const friedman_counts&, const friedman_counts&) = default;
};

/// Friedman's rank test of equal scores across groups (χ²(k − 1) reference).
inline test_result friedman_test(const friedman_counts& f) {
  require(f.groups >= 2 && static_cast<std::int64_t>(f.rank_sum2.size()) == f.groups, "friedman.groups", f.groups,
          "must be >= 2 and match rank_sum2.size()");
  require(f.items >= 0 && f.items <= max_total_trials, "friedman.items", f.items, "must be in [0, 2^53]");
  test_result r;
  r.test = "friedman";
  r.dof = static_cast<double>(f.groups - 1);
  if (f.items == 0) return r;
  const double n = static_cast<double>(f.items), k = static_cast<double>(f.groups);
  double sum_r2 = 0.0;
  for (auto v : f.rank_sum2) {
    const double rs = static_cast<double>(v) / 2.0;
    sum_r2 += rs * rs;
  }
  const double num = 12.0 / (n * k * (k + 1.0)) * sum_r2 - 3.0 * n * (k + 1.0);
  const double den = 1.0 - static_cast<double>(f.tie_term) / (n * k * (k * k - 1.0));
  if (!(den > 1e-12)) return r;  // every item constant across groups
  r.statistic = std::max(0.0, num / den);
  r.p = chi_square_upper_tail(r.statistic, r.dof);
  return r;
}

}  // namespace kvphase::stats
