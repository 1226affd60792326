#pragma once
/// \file sim/shard.hpp
/// A shard i of n of a sweep: trials [⌊i·T/n⌋, ⌊(i+1)·T/n⌋) of every group, so the n shards
/// partition the trials exactly and their merged counts equal one unsharded run.

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::sim {

struct shard_spec {
  index_t index = 0;  ///< i ∈ [0, count)
  index_t count = 1;  ///< n ≥ 1

  void validate() const {
    require(count >= 1 && count <= (index_t(1) << 20), "shard", std::to_string(index) + "/" + std::to_string(count),
            "count must be in [1, 2^20]");
    require(index >= 0 && index < count, "shard", std::to_string(index) + "/" + std::to_string(count),
            "index must be in [0, count)");
  }
  /// Trial range [first, last) of this shard for T trials per group.
  /// Throws kvphase::error unless the shard is valid (validate()) and trials >= 0.
  [[nodiscard]] std::pair<index_t, index_t> range(index_t trials) const {
    validate();
    require(trials >= 0, "trials", trials, "must be >= 0");
    const auto at = [&](index_t i) {
      return static_cast<index_t>((static_cast<__int128_t>(i) * trials) / count);
    };
    return {at(index), at(index + 1)};
  }
  /// Parses "i/n" (throws kvphase::error naming `shard`).
  static shard_spec parse(std::string_view text) {
    const auto slash = text.find('/');
    auto bad = [&] { fail("shard", std::string(text), "must be i/n with integers 0 <= i < n"); };
    if (slash == std::string_view::npos || slash == 0 || slash + 1 >= text.size()) bad();
    auto num = [&](std::string_view s) {
      index_t v = 0;
      for (char ch : s) {
        if (ch < '0' || ch > '9' || v > (index_t(1) << 40)) bad();
        v = v * 10 + (ch - '0');
      }
      return v;
    };
    shard_spec s{num(text.substr(0, slash)), num(text.substr(slash + 1))};
    s.validate();
    return s;
  }
  template <class V>
  void visit_fields(V&& v) {
    v("index", index);
    v("count", count);
  }
  friend std::ostream& operator<<(std::ostream& os, const shard_spec& s) { return os << s.index << "/" << s.count; }
  friend bool operator==(const shard_spec&, const shard_spec&) = default;
};

}  // namespace kvphase::sim
