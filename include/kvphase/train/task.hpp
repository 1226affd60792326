#pragma once
/// \file train/task.hpp
/// Synthetic key–value retrieval task for the trainable toy models.
///
/// A context holds n_context tokens; token t carries a key k_t (one of n_keys) and a value v_t (one
/// of n_values), embedded as x_t = [e_key(k_t); e_val(v_t)] ∈ R^{key_dim + n_values}. The key
/// embeddings are random unit vectors in R^key_dim (fixed by embed_seed); the value embeddings are
/// the standard basis of R^{n_values}. The query is the target token's key alone, x_q = [e_key; 0],
/// and the answer is the target token's value. The target position is drawn uniformly from
/// [0, n_context − raw_window): always outside the raw window, so a compressed model must retrieve
/// it through the compressed entries. No other context token carries the target's key.
///
/// Because every context token is a key–value pair, a pooled entry superposes the pairs of its
/// slots and loses which value belongs to which key: a query-agnostic pool can keep one pair per
/// entry and head sharply (the pair at the slot its gate prefers), so which pairs survive depends
/// on the target's slot, i.e. on its phase.

#include <cmath>
#include <cstdint>
#include <ostream>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::train {

/// Task geometry and vocabulary. Aggregate with defaults.
struct retrieval_task {
  index_t n_context = 64;       ///< context tokens (positions 0 … n_context − 1)
  index_t raw_window = 8;       ///< recent tokens the model sees raw; targets lie before them
  index_t n_keys = 256;         ///< key vocabulary
  index_t key_dim = 32;         ///< key embedding dimension
  index_t n_values = 16;        ///< value vocabulary = value embedding dimension (one-hot)
  std::uint64_t embed_seed = 1; ///< seed of the key embedding table

  void validate() const {
    require(n_context >= 2 && n_context <= 65536, "n_context", n_context, "must be in [2, 65536]");
    require(raw_window >= 0 && raw_window < n_context, "raw_window", raw_window,
            "must be in [0, n_context)");
    require(n_keys >= 2 && n_keys <= (index_t(1) << 20), "n_keys", n_keys, "must be in [2, 2^20]");
    require(key_dim >= 1 && key_dim <= 4096, "key_dim", key_dim, "must be in [1, 4096]");
    require(n_values >= 2 && n_values <= 4096, "n_values", n_values, "must be in [2, 4096]");
  }
  /// Model (embedding) dimension: key_dim + n_values.
  [[nodiscard]] index_t model_dim() const noexcept { return key_dim + n_values; }
  /// Targets are drawn from [0, target_end()).
  [[nodiscard]] index_t target_end() const noexcept { return n_context - raw_window; }

  friend std::ostream& operator<<(std::ostream& os, const retrieval_task& t) {
    return os << "retrieval_task{n_context=" << t.n_context << ", raw_window=" << t.raw_window
              << ", n_keys=" << t.n_keys << ", key_dim=" << t.key_dim << ", n_values=" << t.n_values
              << ", embed_seed=" << t.embed_seed << "}";
  }
};

/// One drawn context: key and value ids per position, and the target position.
struct retrieval_example {
  std::vector<index_t> keys;
  std::vector<index_t> values;
  index_t target = 0;
  [[nodiscard]] index_t answer() const { return values[static_cast<std::size_t>(target)]; }
};

/// Embedding tables of a task and the sampler. Immutable after construction; thread-safe to read.
class retrieval_data {
 public:
  explicit retrieval_data(const retrieval_task& task) : task_(task) {
    task_.validate();
    key_embed_.resize(task_.n_keys, task_.key_dim);
    rng::philox_stream s(task_.embed_seed, rng::hash_text("kvphase.train.key_embedding"));
    for (index_t k = 0; k < task_.n_keys; ++k) {
      double norm2 = 0.0;
      for (index_t c = 0; c < task_.key_dim; ++c) {
        key_embed_(k, c) = s.normal();
        norm2 += key_embed_(k, c) * key_embed_(k, c);
      }
      key_embed_.row(k) /= std::sqrt(norm2);
    }
  }

  [[nodiscard]] const retrieval_task& task() const noexcept { return task_; }
  [[nodiscard]] const matrixd& key_embedding() const noexcept { return key_embed_; }

  /// Draws a context from `stream`. `target` < 0 draws the target uniformly from
  /// [0, target_end()); otherwise it must lie in that range.
  [[nodiscard]] retrieval_example sample(rng::philox_stream& stream, index_t target = -1) const {
    const index_t n = task_.n_context;
    retrieval_example ex;
    if (target < 0) {
      ex.target = static_cast<index_t>(stream.below(static_cast<std::uint64_t>(task_.target_end())));
    } else {
      require(target < task_.target_end(), "target", target,
              "must be < n_context - raw_window (" + std::to_string(task_.target_end()) + ")");
      ex.target = target;
    }
    ex.keys.resize(static_cast<std::size_t>(n));
    ex.values.resize(static_cast<std::size_t>(n));
    const auto nk = static_cast<std::uint64_t>(task_.n_keys);
    const index_t target_key = static_cast<index_t>(stream.below(nk));
    for (index_t t = 0; t < n; ++t) {
      index_t k = target_key;
      if (t != ex.target) {
        // any key but the target's: draw from the n_keys − 1 others
        k = static_cast<index_t>(stream.below(nk - 1));
        if (k >= target_key) ++k;
      }
      ex.keys[static_cast<std::size_t>(t)] = k;
      ex.values[static_cast<std::size_t>(t)] =
          static_cast<index_t>(stream.below(static_cast<std::uint64_t>(task_.n_values)));
    }
    return ex;
  }

  /// Context embeddings X (n_context × model_dim, row t = x_t) and the query x_q.
  void embed(const retrieval_example& ex, matrixd& x, vectord& query) const {
    const index_t n = task_.n_context, dk = task_.key_dim;
    x.setZero(n, task_.model_dim());
    for (index_t t = 0; t < n; ++t) {
      x.row(t).head(dk) = key_embed_.row(ex.keys[static_cast<std::size_t>(t)]);
      x(t, dk + ex.values[static_cast<std::size_t>(t)]) = 1.0;
    }
    query.setZero(task_.model_dim());
    query.head(dk) = key_embed_.row(ex.keys[static_cast<std::size_t>(ex.target)]).transpose();
  }

 private:
  retrieval_task task_;
  matrixd key_embed_;
};

}  // namespace kvphase::train
