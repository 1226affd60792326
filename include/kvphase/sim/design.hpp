#pragma once
/// \file sim/design.hpp
/// How the groups of a phase sweep relate to each other (sweep_config::design).
///
/// - independent (the default): trial k of group g has its own context and target, drawn from
///   streams keyed by (g, k). Group g's recall is the recall a target at phase g gets in a
///   random context; groups are independent samples (stats/uniformity.hpp, periodicity.hpp).
/// - shifted (the paper's protocol): trial k is ONE item — context, target, query — drawn from
///   streams keyed by k alone, and every group sees that same item shifted by prefix padding
///   so that its target lands at phase g: the task lays the item out at phase 0 (it is told
///   group 0), and group g's compressed model is the operator with its grid origin moved back by
///   g tokens, which is what g padding tokens prepended to the context do to the item's tokens
///   relative to the chunk grid (every distance between the item's tokens and the query is
///   unchanged). The one difference from literal padding tokens is at the context's start: the
///   entry that would hold padding and the item's first tokens is not formed (the targets stay
///   inside the task's depth range, away from it). Full attention does not see the grid, so the
///   full control is the same in every group (its paired flip count is 0).
///   The groups are then paired: per trial, the k outcomes of one item. The sweep keeps per trial
///   the outcome of every group (paired_recorder) and reduces them to stats::paired_counts,
///   which add exactly across threads and shards; stats/paired.hpp tests them (Cochran's Q
///   across groups, McNemar best vs worst group, the per-item flip count).
/// The shifted design's streams use their own tag (shifted_stream_tag), so they never coincide
/// with an independent sweep's; `design` is therefore not part of the stream key, and an
/// independent sweep's draws are those of earlier versions.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/stats/paired_counts.hpp"

namespace kvphase::sim {

enum class design_kind { independent, shifted };

inline const char* to_string(design_kind d) noexcept { return d == design_kind::shifted ? "shifted" : "independent"; }
inline void parse(std::string_view s, design_kind& out) {
  if (s == "independent") out = design_kind::independent;
  else if (s == "shifted") out = design_kind::shifted;
  else fail("design", std::string(s), "must be independent or shifted");
}
inline design_kind parse_design(std::string_view s) {
  design_kind d{};
  parse(s, d);
  return d;
}

/// Stream tag of the shifted design's trials.
inline constexpr std::uint64_t shifted_stream_tag = rng::hash_text("kvphase.sim.design.shifted");

/// Stream of trial k of group g under design d (config id cid): independent —
/// combine(cid, combine(g, k)), as before designs existed; shifted — combine(cid,
/// combine(shifted_stream_tag, k)), the same for every group.
inline std::uint64_t trial_stream(std::uint64_t cid, design_kind d, index_t g, index_t k) noexcept {
  const auto kk = static_cast<std::uint64_t>(k);
  if (d == design_kind::shifted) return rng::combine(cid, rng::combine(shifted_stream_tag, kk));
  return rng::combine(cid, rng::combine(static_cast<std::uint64_t>(g), kk));
}

/// The operator group g of a shifted sweep compresses with: `op` with its grid origin moved
/// back by g tokens (g tokens of prefix padding).
inline compress::operator_spec shifted_operator(compress::operator_spec op, index_t g) {
  op.grid.origin -= g;
  return op;
}

/// Most groups of a shifted sweep (the paired counts' k × k table).
inline constexpr index_t max_shifted_groups = stats::max_paired_groups;

/// Throws unless a sweep with `groups` groups whose task labels groups by `label_column` ("" =
/// the phase) can use design d.
inline void validate_design(design_kind d, index_t groups, std::string_view label_column) {
  if (d != design_kind::shifted) return;
  require(label_column.empty(), "design", "shifted",
          "needs a phase task (this task's groups are " + std::string(label_column) + ", not phases)");
  require(groups >= 2 && groups <= max_shifted_groups, "design", "shifted",
          "needs 2 to " + std::to_string(max_shifted_groups) + " phase groups (have " + std::to_string(groups) + ")");
}

/// Per-trial outcomes of every group of a shard (row-major by group: g · trials + k − first),
/// written once per (g, k) by whichever thread runs it, then reduced in trial order: the result
/// does not depend on the thread count, and shards add.
struct paired_recorder {
  index_t groups = 0, first = 0, trials = 0;
  std::vector<std::uint8_t> compressed, full;

  paired_recorder() = default;
  paired_recorder(index_t g, index_t first_trial, index_t n)
      : groups(g), first(first_trial), trials(n), compressed(static_cast<std::size_t>(g * n), 0),
        full(static_cast<std::size_t>(g * n), 0) {}
  void record(index_t g, index_t k, bool comp_hit, bool full_hit) noexcept {
    const auto i = static_cast<std::size_t>(g * trials + (k - first));
    compressed[i] = comp_hit;
    full[i] = full_hit;
  }
  /// The paired counts of one model's outcomes (`bits` = compressed or full).
  [[nodiscard]] stats::paired_counts counts(const std::vector<std::uint8_t>& bits) const {
    auto c = stats::paired_counts::zero(groups);
    std::vector<std::uint8_t> row(static_cast<std::size_t>(groups));
    for (index_t k = 0; k < trials; ++k) {
      for (index_t g = 0; g < groups; ++g)
        row[static_cast<std::size_t>(g)] = bits[static_cast<std::size_t>(g * trials + k)];
      c.add_item(std::span<const std::uint8_t>(row));
    }
    return c;
  }
};

}  // namespace kvphase::sim
