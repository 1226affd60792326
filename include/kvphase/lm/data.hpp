#pragma once
/// \file lm/data.hpp
/// Synthetic pretraining data for lm/model.hpp: key–value recall sequences (the token form of
/// the kv-pairs task, tasks/kv_pairs.hpp) with counter-based seeding, and per-phase evaluation
/// counts for the library's statistics (stats/periodicity.hpp, stats/uniformity.hpp).
///
/// A sequence has `context` tokens, then `gap` filler tokens, then 2·queries query tokens. The
/// gap keeps the queries out of the compressed entries that hold the last context tokens (with
/// gap ≥ W − S no entry mixes context and query tokens). The context holds `pairs`
/// (key, value) bigrams at random non-overlapping positions (every layout equally likely) between
/// filler tokens; each query repeats one pair's key and then its value. The loss and the recall
/// are read at each query key: the next token must be the pair's value. The phase of a query is
/// the context position of its pair's key modulo `modulus`.
///
/// Token ids: keys [0, keys), values [keys, keys + values), filler [keys + values, vocab()).
/// Sequence i of split s is drawn from philox_stream(seed, combine(s, i)) alone: the same batch
/// on any thread, in any order.

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::lm {

struct data_config {
  index_t context = 96;  ///< tokens before the queries
  index_t pairs = 12;    ///< key–value bigrams in the context
  index_t queries = 8;   ///< queries after the context (distinct pairs), ≤ pairs
  index_t gap = 0;       ///< filler tokens between the context and the queries
  index_t keys = 24;     ///< key vocabulary (≥ pairs: keys in one sequence are distinct)
  index_t values = 24;   ///< value vocabulary
  index_t filler = 8;    ///< filler vocabulary
  index_t modulus = 8;   ///< phase groups of the evaluation

  [[nodiscard]] index_t vocab() const noexcept { return keys + values + filler; }
  [[nodiscard]] index_t length() const noexcept { return context + gap + 2 * queries; }
  void validate() const {
    require(pairs >= 1 && pairs <= keys, "pairs", pairs, "must be in [1, keys] (keys in a sequence are distinct)");
    require(2 * pairs <= context && context <= 1 << 20, "context", context, "must be in [2 * pairs, 2^20]");
    require(queries >= 1 && queries <= pairs, "queries", queries, "must be in [1, pairs]");
    require(gap >= 0 && gap <= 1 << 20, "gap", gap, "must be in [0, 2^20]");
    require(values >= 2 && values <= 1 << 16, "values", values, "must be in [2, 65536]");
    require(keys >= 1 && keys <= 1 << 16, "keys", keys, "must be in [1, 65536]");
    require(filler >= 1 && filler <= 1 << 16, "filler", filler, "must be in [1, 65536]");
    require(modulus >= 2 && modulus <= 4096, "modulus", modulus, "must be in [2, 4096]");
  }
  template <class V>
  void visit_fields(V&& v) {
    v("context", context);
    v("pairs", pairs);
    v("queries", queries);
    v("gap", gap);
    v("keys", keys);
    v("values", values);
    v("filler", filler);
    v("modulus", modulus);
  }
};

/// One batch: tokens [B, T]; for every query (B × queries): its row, the position whose logits
/// predict the value, the value, and the context position of its key.
struct batch {
  torch::Tensor tokens;       ///< [B, T] int64
  torch::Tensor rows, at;     ///< [B·Q] int64: sequence and position of each query key
  torch::Tensor target;       ///< [B·Q] int64: the value token
  std::vector<index_t> key_position;  ///< [B·Q]
};

/// Sequences first … first + B − 1 of split `split` (0 = training, 1 = evaluation, …).
inline batch make_batch(const data_config& c, std::uint64_t seed, std::uint64_t split, std::uint64_t first, index_t B) {
  c.validate();
  const index_t T = c.length(), Q = c.queries, P = c.pairs;
  std::vector<std::int64_t> tok(static_cast<std::size_t>(B * T)), rows, at, target;
  batch out;
  std::vector<index_t> slots, keys(static_cast<std::size_t>(c.keys)), pos(static_cast<std::size_t>(P)),
      order(static_cast<std::size_t>(P));
  std::vector<std::int64_t> val(static_cast<std::size_t>(P));
  for (index_t b = 0; b < B; ++b) {
    rng::philox_stream s(seed, rng::combine(split, first + static_cast<std::uint64_t>(b)));
    std::int64_t* row = tok.data() + b * T;
    for (index_t t = 0; t < c.context; ++t)
      row[t] = c.keys + c.values + static_cast<std::int64_t>(s.below(static_cast<std::uint64_t>(c.filler)));
    // layout: P distinct values of [0, free + P) in increasing order, the i-th at value + i
    const index_t free = c.context - 2 * P, n = free + P;
    slots.resize(static_cast<std::size_t>(n));
    std::iota(slots.begin(), slots.end(), index_t{0});
    for (index_t i = 0; i < P; ++i)
      std::swap(slots[static_cast<std::size_t>(i)],
                slots[static_cast<std::size_t>(i + static_cast<index_t>(s.below(static_cast<std::uint64_t>(n - i))))]);
    std::sort(slots.begin(), slots.begin() + P);
    std::iota(keys.begin(), keys.end(), index_t{0});
    for (index_t i = 0; i < P; ++i) {
      std::swap(keys[static_cast<std::size_t>(i)],
                keys[static_cast<std::size_t>(i + static_cast<index_t>(s.below(static_cast<std::uint64_t>(c.keys - i))))]);
      pos[static_cast<std::size_t>(i)] = slots[static_cast<std::size_t>(i)] + i;
      val[static_cast<std::size_t>(i)] = c.keys + static_cast<std::int64_t>(s.below(static_cast<std::uint64_t>(c.values)));
      row[pos[static_cast<std::size_t>(i)]] = keys[static_cast<std::size_t>(i)];
      row[pos[static_cast<std::size_t>(i)] + 1] = val[static_cast<std::size_t>(i)];
    }
    std::iota(order.begin(), order.end(), index_t{0});
    for (index_t q = 0; q < Q; ++q) {
      std::swap(order[static_cast<std::size_t>(q)],
                order[static_cast<std::size_t>(q + static_cast<index_t>(s.below(static_cast<std::uint64_t>(P - q))))]);
      const auto i = static_cast<std::size_t>(order[static_cast<std::size_t>(q)]);
      const index_t t = c.context + c.gap + 2 * q;
      row[t] = keys[i];
      row[t + 1] = val[i];
      rows.push_back(b);
      at.push_back(t);
      target.push_back(val[i]);
      out.key_position.push_back(pos[i]);
    }
    // drawn last, so that gap = 0 draws exactly the sequences of earlier versions
    for (index_t t = c.context; t < c.context + c.gap; ++t)
      row[t] = c.keys + c.values + static_cast<std::int64_t>(s.below(static_cast<std::uint64_t>(c.filler)));
  }
  auto as_tensor = [](std::vector<std::int64_t>& v) { return torch::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, torch::kLong).clone(); };
  out.tokens = as_tensor(tok).reshape({B, T});
  out.rows = as_tensor(rows);
  out.at = as_tensor(at);
  out.target = as_tensor(target);
  return out;
}

/// Logits at the query positions [B·Q, vocab] of a forward pass's logits [B, T, vocab].
inline torch::Tensor query_logits(const torch::Tensor& logits, const batch& b) {
  return logits.index({b.rows, b.at});
}

/// Per-phase counts of one evaluation: trials and hits per group (key position mod modulus).
struct phase_counts {
  std::vector<std::int64_t> trials, hits;
  double loss_sum = 0.0, loss_sq = 0.0;  ///< Σ and Σ² of the per-query cross-entropy
  std::int64_t n = 0;
  void resize(index_t m) {
    trials.assign(static_cast<std::size_t>(m), 0);
    hits.assign(static_cast<std::size_t>(m), 0);
  }
  /// Hits / trials of group g; NaN for a group no query fell in (e.g. the last context position
  /// with modulus = context): no data is not a recall of 0.
  [[nodiscard]] double recall(index_t g) const {
    const auto t = trials[static_cast<std::size_t>(g)];
    return t ? static_cast<double>(hits[static_cast<std::size_t>(g)]) / static_cast<double>(t)
             : std::numeric_limits<double>::quiet_NaN();
  }
  /// All groups pooled; NaN without any query.
  [[nodiscard]] double mean_recall() const {
    std::int64_t h = 0, t = 0;
    for (std::size_t g = 0; g < trials.size(); ++g) h += hits[g], t += trials[g];
    return t ? static_cast<double>(h) / static_cast<double>(t) : std::numeric_limits<double>::quiet_NaN();
  }
  [[nodiscard]] double mean_loss() const { return n ? loss_sum / static_cast<double>(n) : 0.0; }
  /// Standard error of mean_loss().
  [[nodiscard]] double loss_se() const {
    if (n < 2) return 0.0;
    const double m = mean_loss(), var = (loss_sq - static_cast<double>(n) * m * m) / static_cast<double>(n - 1);
    return std::sqrt(std::max(var, 0.0) / static_cast<double>(n));
  }
};

/// Adds one evaluated batch: argmax hit and cross-entropy per query.
inline void count(phase_counts& pc, const data_config& c, const torch::Tensor& qlogits, const batch& b) {
  auto pred = qlogits.argmax(-1).contiguous();
  auto ce = torch::nn::functional::cross_entropy(
                qlogits, b.target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                .to(torch::kFloat64)
                .contiguous();
  auto tg = b.target.contiguous();
  const auto* p = pred.data_ptr<std::int64_t>();
  const auto* t = tg.data_ptr<std::int64_t>();
  const auto* l = ce.data_ptr<double>();
  for (std::size_t i = 0; i < b.key_position.size(); ++i) {
    const auto g = static_cast<std::size_t>(b.key_position[i] % c.modulus);
    ++pc.trials[g];
    pc.hits[g] += p[i] == t[i] ? 1 : 0;
    pc.loss_sum += l[i];
    pc.loss_sq += l[i] * l[i];
    ++pc.n;
  }
}

}  // namespace kvphase::lm
