#pragma once
/// \file stats/paired_counts.hpp
/// The sufficient statistics of a paired 0/1 design (k groups × n items, the same item in every
/// group), which add exactly across shards: per-group hits, the histogram of per-item row totals
/// and the k × k discordance table. The tests that use them are in stats/paired.hpp; this header
/// has no heavy dependency, so the sweep's types can hold the counts.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvphase/core/error.hpp"

namespace kvphase::stats {

/// Largest count any paired field takes (2^53: every sum exact in a double).
inline constexpr std::int64_t max_paired_count = std::int64_t{1} << 53;

/// Most groups a paired analysis takes (the k × k discordance table stays small).
inline constexpr std::int64_t max_paired_groups = 64;
/// Most permutations of the permutation p-value.
inline constexpr std::int64_t max_paired_permutations = 1'000'000;

/// Sufficient statistics of k groups × n items of 0/1 outcomes (see the file comment).
struct paired_counts {
  std::int64_t groups = 0;
  std::int64_t items = 0;
  std::vector<std::int64_t> hits;        ///< k
  std::vector<std::int64_t> row_totals;  ///< k + 1
  std::vector<std::int64_t> discordant;  ///< k × k, row-major, zero diagonal

  /// Empty counts for k groups (2 ≤ k ≤ max_paired_groups).
  static paired_counts zero(std::int64_t k) {
    require(k >= 2 && k <= max_paired_groups, "paired.groups", k,
            "must be in [2, " + std::to_string(max_paired_groups) + "]");
    paired_counts c;
    c.groups = k;
    c.hits.assign(static_cast<std::size_t>(k), 0);
    c.row_totals.assign(static_cast<std::size_t>(k + 1), 0);
    c.discordant.assign(static_cast<std::size_t>(k * k), 0);
    return c;
  }
  /// Adds one item: outcome[g] (0/1) for every group.
  template <class T>
  void add_item(std::span<const T> outcome) {
    require(static_cast<std::int64_t>(outcome.size()) == groups, "outcome.size()", outcome.size(),
            "must equal paired.groups = " + std::to_string(groups));
    std::int64_t r = 0;
    const auto k = static_cast<std::size_t>(groups);
    for (std::size_t g = 0; g < k; ++g) {
      const bool a = static_cast<bool>(outcome[g]);
      r += a;
      hits[g] += a;
      if (!a) continue;
      for (std::size_t h = 0; h < k; ++h)
        if (!static_cast<bool>(outcome[h])) ++discordant[g * k + h];
    }
    ++row_totals[static_cast<std::size_t>(r)];
    ++items;
  }
  void add_item(const std::vector<bool>& outcome) {
    std::vector<std::uint8_t> o(outcome.begin(), outcome.end());
    add_item(std::span<const std::uint8_t>(o));
  }
  /// Exact merge (same k; an empty default-constructed side takes the other's k).
  paired_counts& operator+=(const paired_counts& o) {
    if (o.groups == 0) return *this;
    if (groups == 0) return *this = o;
    require(o.groups == groups, "paired.groups", o.groups,
            "must match the counts merged into (" + std::to_string(groups) + ")");
    auto add = [](std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b, const char* name) {
      require(a.size() == b.size(), name, b.size(), "size must match the counts merged into");
      for (std::size_t i = 0; i < a.size(); ++i) {
        require(!__builtin_add_overflow(a[i], b[i], &a[i]) && a[i] <= max_paired_count, name, b[i],
                "sum must be <= 2^53");
      }
    };
    add(hits, o.hits, "paired.hits");
    add(row_totals, o.row_totals, "paired.row_totals");
    add(discordant, o.discordant, "paired.discordant");
    items += o.items;
    require(items <= max_paired_count, "paired.items", items, "must be <= 2^53");
    return *this;
  }
  /// Throws unless the counts are those of some set of items: sizes, ranges, Σ row_totals =
  /// items, Σ r·row_totals[r] = Σ hits, zero diagonal, discordant[g,h] − discordant[h,g] =
  /// hits[g] − hits[h], and discordant[g,h] ≤ min(hits[g], items − hits[h]).
  void validate() const {
    require(groups >= 2 && groups <= max_paired_groups, "paired.groups", groups,
            "must be in [2, " + std::to_string(max_paired_groups) + "]");
    require(items >= 0 && items <= max_paired_count, "paired.items", items, "must be in [0, 2^53]");
    const auto k = static_cast<std::size_t>(groups);
    require(hits.size() == k, "paired.hits.size()", hits.size(), "must equal paired.groups");
    require(row_totals.size() == k + 1, "paired.row_totals.size()", row_totals.size(), "must equal paired.groups + 1");
    require(discordant.size() == k * k, "paired.discordant.size()", discordant.size(), "must equal paired.groups^2");
    std::int64_t n = 0, ones = 0, col = 0;
    for (std::size_t r = 0; r <= k; ++r) {
      const auto v = row_totals[r];
      require(v >= 0 && v <= items, "paired.row_totals[" + std::to_string(r) + "]", v, "must be in [0, items]");
      n += v;
      ones += static_cast<std::int64_t>(r) * v;  // ≤ 64 · 2^53: no overflow
    }
    require(n == items, "paired.row_totals", n, "must sum to paired.items = " + std::to_string(items));
    for (std::size_t g = 0; g < k; ++g) {
      require(hits[g] >= 0 && hits[g] <= items, "paired.hits[" + std::to_string(g) + "]", hits[g],
              "must be in [0, items]");
      col += hits[g];
    }
    require(col == ones, "paired.hits", col, "must sum to Σ r·row_totals[r] = " + std::to_string(ones));
    for (std::size_t g = 0; g < k; ++g)
      for (std::size_t h = 0; h < k; ++h) {
        const auto v = discordant[g * k + h];
        const std::string name = "paired.discordant[" + std::to_string(g) + "," + std::to_string(h) + "]";
        if (g == h) {
          require(v == 0, name, v, "must be 0 (diagonal)");
          continue;
        }
        require(v >= 0 && v <= std::min(hits[g], items - hits[h]), name, v,
                "must be in [0, min(hits[g], items - hits[h])]");
        require(v - discordant[h * k + g] == hits[g] - hits[h], name, v,
                "minus discordant[h,g] must equal hits[g] - hits[h]");
      }
  }
  /// Items whose outcome differs between groups.
  [[nodiscard]] std::int64_t flips() const { return groups == 0 ? 0 : items - row_totals.front() - row_totals.back(); }
  friend bool operator==(const paired_counts&, const paired_counts&) = default;
};

}  // namespace kvphase::stats
