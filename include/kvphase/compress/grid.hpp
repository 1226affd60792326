#pragma once
/// \file compress/grid.hpp
/// Chunk geometry: which tokens feed which compressed entry, the phase of a position, and when
/// an entry becomes visible to a query.
///
/// Conventions (window W, stride S, 1 ≤ S ≤ W, origin φ0; positions are absolute, ≥ 0):
///  - V4 (default): the entry with grid index j pools [φ0 + jS − (W − S), φ0 + jS + S − 1]: the
///    stride block [φ0 + jS, φ0 + jS + S − 1] plus the W − S tokens before it (DeepSeek-V4 CSA:
///    W = 2S; HCA: W = S). Slots before position 0 are masked. Such an entry exists when its
///    last source token is ≥ 0.
///  - NSA: the entry with grid index j pools [φ0 + jS, φ0 + jS + W − 1]; it exists when its first
///    source token is ≥ 0 (NSA only forms blocks of real tokens).
///  - Entries are numbered e = 0, 1, … from the first existing grid index j0: e = j − j0.
///  - Phase of position p: (p − φ0) mod S, in [0, S).
///  - Slot of position p in entry e: p − first_source(e), in [0, W).
///  - Visibility to a query at t: `complete` (default, DeepSeek-V4 and NSA): last source ≤ t.
///    `running_partial`: also the entry whose sources have started (first unmasked source ≤ t),
///    as a running partial pool.

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::compress {

enum class grid_convention { v4, nsa };
enum class visibility_policy { complete, running_partial };

inline const char* to_string(grid_convention c) noexcept { return c == grid_convention::v4 ? "v4" : "nsa"; }
inline const char* to_string(visibility_policy v) noexcept {
  return v == visibility_policy::complete ? "complete" : "running_partial";
}
inline void parse(std::string_view s, grid_convention& out) {
  if (s == "v4") out = grid_convention::v4;
  else if (s == "nsa") out = grid_convention::nsa;
  else fail("grid.convention", std::string(s), "must be v4 or nsa");
}
inline void parse(std::string_view s, visibility_policy& out) {
  if (s == "complete") out = visibility_policy::complete;
  else if (s == "running_partial") out = visibility_policy::running_partial;
  else fail("grid.visibility", std::string(s), "must be complete or running_partial");
}

/// Inclusive range of absolute token positions [first, last].
struct token_range {
  index_t first = 0;
  index_t last = -1;
  [[nodiscard]] index_t size() const noexcept { return last >= first ? last - first + 1 : 0; }
  [[nodiscard]] bool contains(index_t p) const noexcept { return p >= first && p <= last; }
  friend bool operator==(const token_range&, const token_range&) = default;
};

/// One membership of a position: entry index and the slot (0 … W−1) it occupies there.
struct entry_slot {
  index_t entry = 0;
  index_t slot = 0;
  friend bool operator==(const entry_slot&, const entry_slot&) = default;
};

/// Chunk geometry. Aggregate with defaults: `chunk_grid{.window = 8, .stride = 4}`.
///
/// Preconditions of every member below validate() (asserted, not checked: they run per token):
/// the grid is valid (validate() passed: 1 ≤ S ≤ W ≤ 2^20, |φ0| < 2^40) and every position,
/// entry index or token count passed in has magnitude < max_extent = 2^40. Then j·S ≤ 2^60 and
/// every sum below fits index_t. Sizes from validated configs (contexts ≤ 2^30) always qualify.
struct chunk_grid {
  index_t window = 4;  ///< W: tokens pooled into one entry (≥ stride)
  index_t stride = 4;  ///< S: step between consecutive entries (≥ 1)
  index_t origin = 0;  ///< φ0: absolute position where stride block 0 starts
  grid_convention convention = grid_convention::v4;
  visibility_policy visibility = visibility_policy::complete;

  static constexpr index_t max_extent = index_t(1) << 40;

  /// Throws kvphase::error unless 1 ≤ S ≤ W ≤ 2^20 and |φ0| < 2^40.
  void validate() const {
    require(stride >= 1 && stride <= limits::max_chunk_window, "stride", stride, "must be in [1, 2^20]");
    require(window >= stride, "window", window,
            "must be >= stride (" + std::to_string(stride) + "): every token must be pooled");
    require(window <= limits::max_chunk_window, "window", window, "must be <= 2^20");
    require(origin > -max_extent && origin < max_extent, "origin", origin, "must be within ±2^40");
  }

  /// Tokens of one entry that precede its stride block: W − S.
  [[nodiscard]] index_t overlap() const noexcept { return window - stride; }

  /// (p − φ0) mod S, in [0, S).
  [[nodiscard]] index_t phase(index_t p) const noexcept {
    KVPHASE_ASSERT(in_extent(p) && stride >= 1);
    return floor_mod(p - origin, stride);
  }

  /// Grid index j of the first existing entry.
  [[nodiscard]] index_t first_grid_index() const noexcept {
    if (convention == grid_convention::v4) {
      // smallest j with φ0 + jS + S − 1 ≥ 0
      return ceil_div(1 - stride - origin, stride);
    }
    // smallest j with φ0 + jS ≥ 0
    return ceil_div(-origin, stride);
  }

  /// Unclipped source range of entry e (may start before position 0 under V4: masked slots).
  [[nodiscard]] token_range sources(index_t e) const noexcept {
    KVPHASE_ASSERT(in_extent(e) && stride >= 1 && window >= stride);
    const index_t j = e + first_grid_index();
    if (convention == grid_convention::v4) {
      const index_t last = origin + j * stride + stride - 1;
      return {last - window + 1, last};
    }
    const index_t first = origin + j * stride;
    return {first, first + window - 1};
  }

  /// Source range of entry e clipped to real tokens [0, n_tokens).
  [[nodiscard]] token_range sources_clipped(index_t e, index_t n_tokens) const noexcept {
    token_range r = sources(e);
    return {std::max<index_t>(r.first, 0), std::min<index_t>(r.last, n_tokens - 1)};
  }

  /// Number of slots of entry e that are masked because they precede position 0.
  [[nodiscard]] index_t masked_slots(index_t e) const noexcept {
    return std::max<index_t>(0, -sources(e).first);
  }

  /// Number of complete entries for a sequence of n_tokens tokens (last source ≤ n − 1).
  [[nodiscard]] index_t num_entries(index_t n_tokens) const noexcept {
    if (n_tokens <= 0) return 0;
    KVPHASE_ASSERT(in_extent(n_tokens) && stride >= 1 && window >= stride);
    const index_t j0 = first_grid_index();
    // last source of grid index j: L(j) = base + jS; count j ≥ j0 with L(j) ≤ n − 1.
    const index_t base = (convention == grid_convention::v4) ? origin + stride - 1 : origin + window - 1;
    const index_t jmax = floor_div(n_tokens - 1 - base, stride);
    return std::max<index_t>(0, jmax - j0 + 1);
  }

  /// Every (entry, slot) containing position p ≥ 0, in increasing entry order. Entries are not
  /// limited by a sequence length: entry e exists for all e ≥ 0.
  [[nodiscard]] std::vector<entry_slot> entries_containing(index_t p) const {
    std::vector<entry_slot> out;
    for_each_entry_containing(p, [&](index_t e, index_t slot) { out.push_back({e, slot}); });
    return out;
  }

  /// Calls f(entry, slot) for every entry containing position p, in increasing entry order.
  template <class F>
  void for_each_entry_containing(index_t p, F&& f) const {
    KVPHASE_ASSERT(in_extent(p) && stride >= 1 && window >= stride);
    const index_t j0 = first_grid_index();
    // first(j) = F0 + jS with F0 the first source of grid index 0; p ∈ [first(j), first(j)+W−1]
    const index_t f0 = (convention == grid_convention::v4) ? origin - overlap() : origin;
    const index_t jlo = std::max(j0, ceil_div(p - f0 - window + 1, stride));
    const index_t jhi = floor_div(p - f0, stride);
    for (index_t j = jlo; j <= jhi; ++j) f(j - j0, p - (f0 + j * stride));
  }

  /// Whether entry e is visible to a query at absolute position t.
  [[nodiscard]] bool visible(index_t e, index_t t) const noexcept {
    KVPHASE_ASSERT(in_extent(t));
    const token_range r = sources(e);
    if (visibility == visibility_policy::complete) return r.last <= t;
    return std::max<index_t>(r.first, 0) <= t;
  }

  /// Number of entries visible to a query at t (they are always a prefix 0 … k−1).
  [[nodiscard]] index_t num_visible(index_t t) const noexcept {
    if (t < 0) return 0;
    if (visibility == visibility_policy::complete) return num_entries(t + 1);
    index_t k = num_entries(t + 1);
    while (visible(k, t)) ++k;  // at most ⌈W/S⌉ running partial entries
    return k;
  }

  /// Whether |v| < max_extent (the precondition on positions, entries and counts above).
  [[nodiscard]] static constexpr bool in_extent(index_t v) noexcept { return v > -max_extent && v < max_extent; }

  /// The field list (core/fields.hpp): printing, JSON, equality and the stream key.
  template <class V>
  void visit_fields(V&& v) {
    v("window", window);
    v("stride", stride);
    v("origin", origin);
    v("convention", convention);
    v("visibility", visibility);
  }
  friend std::ostream& operator<<(std::ostream& os, const chunk_grid& g) { return fields::print(os, g, "chunk_grid"); }
  friend bool operator==(const chunk_grid&, const chunk_grid&) = default;
};

}  // namespace kvphase::compress
