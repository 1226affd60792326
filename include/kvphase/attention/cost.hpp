#pragma once
/// \file attention/cost.hpp
/// The work of attention calls as exact formulas of the call's shape: FLOPs of the scores and
/// of P·V, and the bytes of every row the call may read plus its outputs, once. Benchmarks divide
/// them by a measured time and compare the arithmetic intensity with a machine's balance point.
///
/// FLOPs: per (query, attended key) 2·d for the score ⟨q, k⟩ and 2·dv for the weighted sum of
/// the value (one FMA per channel); the softmax's max, exp and sum are not counted (they are not
/// FMA work, and this is the convention of the FMA-bound rows of benchmarks/bench_attention.cpp:
/// 4·M·n·d for M queries over n keys with dv = d). A query at position t attends:
///   - the compressed entries visible to it, grid.num_visible(t) (top-k: min(k, visible));
///   - the raw window min(window, t + 1);
///   - NSA's selected blocks (gated mode): with B = block, nb = t / B + 1 blocks and
///     s = min(top_n, nb) selected (the query's own, partial block among them),
///     (s − 1)·B + (t mod B) + 1 tokens.
/// The CSA indexer adds, per query and visible entry, H·(2·dI + 4) (the dot product of each
/// index head, scale, ReLU and the head weight's FMA).
///
/// Bytes (sizeof(Real) each value): Q and O once; the compressed keys and values visible to the
/// last query once (a top-k call may read any of them); the raw rows the windows cover, once
/// (the union over the queries), or all N raw rows when blocks are selected (any block may be);
/// the indexer's queries, head weights and index keys once.

#include <algorithm>

#include "kvphase/compress/grid.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::attention {

/// FLOPs and bytes of one attention call.
struct call_cost {
  double attended = 0;  ///< Σ over queries of the keys attended (compressed + window + blocks)
  double flops = 0;
  double bytes = 0;
  [[nodiscard]] double intensity() const noexcept { return bytes > 0 ? flops / bytes : 0.0; }
};

/// Dense attention: M queries over the same n keys (widths d and dv).
inline call_cost dense_cost(index_t M, index_t n, index_t d, index_t dv, index_t value_bytes = 4) {
  require(M >= 0 && n >= 0 && d >= 1 && dv >= 1 && value_bytes >= 1, "shape", M, "needs M, n >= 0 and d, dv >= 1");
  const double a = static_cast<double>(M) * static_cast<double>(n);
  return {.attended = a,
          .flops = a * 2.0 * static_cast<double>(d + dv),
          .bytes = static_cast<double>(value_bytes) * (static_cast<double>(M) * static_cast<double>(d + dv) +
                                                      static_cast<double>(n) * static_cast<double>(d + dv))};
}

/// Full causal attention over n tokens (token i attends 0 … i).
inline call_cost causal_cost(index_t n, index_t d, index_t dv, index_t value_bytes = 4) {
  call_cost c = dense_cost(n, n, d, dv, value_bytes);
  c.attended = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
  c.flops = c.attended * 2.0 * static_cast<double>(d + dv);
  return c;
}

/// Shape of a compressed-attention call (attention/compressed.hpp) for the last `queries` of
/// `tokens` positions, optionally with CSA top-k selection or NSA block selection.
struct compressed_call {
  compress::chunk_grid grid{};
  index_t tokens = 0;          ///< N raw tokens
  index_t queries = 1;         ///< M: queries at N − M … N − 1
  index_t window = 128;        ///< raw window (0: none)
  index_t d = 128, dv = 128;   ///< key and value widths
  bool compressed = true;      ///< attend the compressed entries
  index_t top_k = 0;           ///< CSA: entries kept per query (0: every visible one)
  index_t indexer_heads = 0;   ///< CSA indexer heads H (0: no indexer cost counted)
  index_t indexer_dim = 0;     ///< CSA indexer width dI
  index_t select_top_n = 0;    ///< NSA: blocks selected per query (0: none)
  index_t select_block = 64;   ///< NSA selection block size
  index_t value_bytes = 4;     ///< sizeof(Real)

  void validate() const {
    grid.validate();
    require(tokens >= 1 && tokens <= limits::max_tokens, "tokens", tokens, "must be in [1, 2^30]");
    require(queries >= 1 && queries <= tokens, "queries", queries, "must be in [1, tokens]");
    require(window >= 0, "window", window, "must be >= 0");
    require(d >= 1 && dv >= 1, "d", d, "key and value widths must be >= 1");
    require(top_k >= 0 && indexer_heads >= 0 && indexer_dim >= 0, "top_k", top_k, "must be >= 0");
    require(select_top_n >= 0 && select_block >= 1, "select_block", select_block, "must be >= 1");
    require(value_bytes >= 1, "value_bytes", value_bytes, "must be >= 1");
  }
};

/// Cost of a compressed-attention call (see the file comment). Throws kvphase::error for an
/// invalid shape.
inline call_cost compressed_cost(const compressed_call& s) {
  s.validate();
  const index_t N = s.tokens, t0 = N - s.queries;
  double attended = 0, indexer = 0;
  for (index_t t = t0; t < N; ++t) {
    const index_t vis = s.grid.num_visible(t);
    if (s.compressed) attended += static_cast<double>(s.top_k > 0 ? std::min(s.top_k, vis) : vis);
    attended += static_cast<double>(std::min<index_t>(s.window, t + 1));
    if (s.select_top_n > 0) {
      const index_t B = s.select_block, nb = t / B + 1, sel = std::min(s.select_top_n, nb);
      attended += static_cast<double>((sel - 1) * B + t % B + 1);
    }
    if (s.top_k > 0 && s.indexer_heads > 0)
      indexer += static_cast<double>(vis) * static_cast<double>(s.indexer_heads) *
                 (2.0 * static_cast<double>(s.indexer_dim) + 4.0);
  }
  const double M = static_cast<double>(s.queries), d = static_cast<double>(s.d), dv = static_cast<double>(s.dv);
  const double E = s.compressed ? static_cast<double>(s.grid.num_visible(N - 1)) : 0.0;
  const double raw = s.select_top_n > 0 ? static_cast<double>(N)
                     : s.window > 0     ? static_cast<double>(std::min<index_t>(N, s.queries - 1 + s.window))
                                        : 0.0;
  double values = M * (d + dv) + E * (d + dv) + raw * (d + dv);
  if (s.top_k > 0 && s.indexer_heads > 0) {
    const double H = static_cast<double>(s.indexer_heads), dI = static_cast<double>(s.indexer_dim);
    values += M * H * dI + M * H + E * dI;
  }
  return {.attended = attended,
          .flops = attended * 2.0 * (d + dv) + indexer,
          .bytes = values * static_cast<double>(s.value_bytes)};
}

}  // namespace kvphase::attention
