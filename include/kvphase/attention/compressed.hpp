#pragma once
/// \file attention/compressed.hpp
/// Compressed attention: a query at position t attends
///   - the compressed entries visible to it (grid.visible(e, t), i.e. e < grid.num_visible(t)),
///     all of them (HCA) or a per-query selected subset (CSA indexer top-k);
///   - optionally the raw tokens of per-query selected blocks (NSA selection branch);
///   - a raw sliding window of the last n_win tokens, max(0, t − n_win + 1) … t;
/// combined in ONE joint softmax (DeepSeek-V4, the paper reference) or as separate branch
/// attentions mixed by gates, o = g_cmp·o_cmp + g_slc·o_slc + g_win·o_win (NSA).
///
/// The compressed K/V are inputs (already pooled, normalised and rotated by compress/), so this
/// header does not depend on the pooling code. For K = V (DeepSeek-V4 MQA) pass the same matrix
/// as Kc and Vc (and as K and V).
///
/// Shapes:
///   Q  [M × d]   queries, query i at absolute position pos[i]
///   Kc [E × d]   compressed keys, row e = entry e of `grid`;  Vc [E × dv] compressed values
///   K  [N × d]   raw keys of tokens 0 … N−1;                  V  [N × dv] raw values
///   O  [M × dv]  outputs
/// In joint mode a raw token reached both through a selected block and the window is attended
/// once (the window wins). An empty attended set gives o = 0.
/// Joint mode without per-query selections runs, from 8 queries on and on every SIMD path, the
/// blocked multi-query kernel (detail/flash_xsimd.hpp: visible entries and window as two key
/// segments of one softmax); gated mode runs its compressed (all visible entries) and window
/// branches on the same kernel, one segment each, and its selected branch block by block (each
/// selected block read once per chunk of queries); the other forms run the one-query streaming
/// softmax.

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "kvphase/attention/detail/flash_xsimd.hpp"
#include "kvphase/attention/full.hpp"
#include "kvphase/attention/kernels.hpp"
#include "kvphase/attention/select.hpp"
#include "kvphase/compress/grid.hpp"
#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

namespace kvphase::attention {

/// How the branches are combined.
enum class combine_mode {
  joint,  ///< one softmax over compressed ∪ selected ∪ window (DeepSeek-V4, paper reference)
  gated   ///< one softmax per branch, outputs mixed by gates (NSA)
};
inline const char* to_string(combine_mode c) noexcept { return c == combine_mode::joint ? "joint" : "gated"; }

/// Settings of one compressed-attention call.
struct compressed_params {
  index_t window = 128;       ///< n_win raw tokens ending at the query (0 = no window)
  bool compressed = true;     ///< attend compressed entries (false: window-only layer)
  combine_mode combine = combine_mode::joint;
  index_t select_block = 64;  ///< token block size of NSA raw-block selection lists
  double gate_cmp = 1.0;      ///< gated mode: constant gates used when no per-query gates are given
  double gate_slc = 1.0;
  double gate_win = 1.0;
  attention_params attn{};    ///< scale, sink (applied in every softmax), block, threads

  void validate() const {
    attn.validate();
    require(window >= 0 && window <= limits::max_tokens, "window", window,
            "must be in [0, 2^30] (0 = no raw window)");
    require(select_block >= 1 && select_block <= limits::max_tokens, "select_block", select_block,
            "must be in [1, 2^30]");
    for (auto [name, g] : {std::pair{"gate_cmp", gate_cmp}, std::pair{"gate_slc", gate_slc},
                           std::pair{"gate_win", gate_win}}) {
      require(std::isfinite(g), name, g, "must be finite");
    }
  }
  friend std::ostream& operator<<(std::ostream& os, const compressed_params& p) {
    return os << "compressed_params{window=" << p.window << ", compressed=" << (p.compressed ? "true" : "false")
              << ", combine=" << to_string(p.combine) << ", select_block=" << p.select_block
              << ", gates=(" << p.gate_cmp << "," << p.gate_slc << "," << p.gate_win << "), " << p.attn << "}";
  }
};

/// Optional per-query selections and gates.
template <class Real>
struct compressed_selection {
  const index_lists* entries = nullptr;  ///< CSA: entries attended by query i (each visible); null = all visible
  const index_lists* blocks = nullptr;   ///< NSA: raw token blocks of size select_block; null = none
  std::span<const Real> gates{};         ///< gated mode: [M × 3] row-major (cmp, slc, win); empty = constants
};

namespace detail {
/// NSA's selected branch in gated mode, block by block: out[i] = the softmax (with the sink) of
/// query i over the raw tokens of its selected blocks up to its position, for M queries. Queries
/// are taken in chunks of 128; a chunk's (block, query) pairs are sorted by block, and every
/// query keeps its own online softmax. A block is read for all the queries of the chunk that
/// selected it, in steps of at most `key_block` rows: first every query's scores against the
/// step's keys (the keys stay in L1 across the queries), then every query's absorb of the step's
/// values (the same for the values); on paths without fused multiply-adds, one query at a time
/// with add_rows. Each query still attends its blocks in increasing block order and each block
/// in add_rows' steps, so for lists in that order (nsa_select's) the same operations in the same
/// order as one query at a time with add_rows: the same bits; for any list, the result does not
/// depend on its order. Chunks are split statically over `threads`: a query's output does not
/// depend on the thread count.
template <class Real, class Arch>
void selected_blocks_by_block(const cref<Real>& Q, const std::vector<index_t>& tpos, const cref<Real>& K,
                              const cref<Real>& V, const index_lists& blocks, index_t select_block, index_t dv,
                              Real scale, Real sink, index_t key_block, int threads, matrix_t<Real>& out) {
  const index_t M = Q.rows(), d = Q.cols();
  constexpr index_t chunk = 128;
  const index_t nchunks = (M + chunk - 1) / chunk;
  const index_t step = std::min(key_block, select_block);  // rows scored and absorbed at once
  out.resize(M, dv);
  std::vector<online_softmax<Real, Arch>> proto(static_cast<std::size_t>(std::min(M, chunk)),
                                                online_softmax<Real, Arch>(dv, key_block));
#pragma omp parallel num_threads(threads) if (threads > 1 && nchunks > 1)
  {
    std::vector<online_softmax<Real, Arch>> st = proto;  // each thread's states (allocated here, outside the loop)
    std::vector<std::pair<index_t, index_t>> pairs;      // (block, query)
    pairs.reserve(blocks.indices.size() / static_cast<std::size_t>(std::max<index_t>(nchunks, 1)) + 16);
    std::vector<Real> sc;  // a step's scores, per (block, query) pair
#pragma omp for schedule(static)
    for (index_t c = 0; c < nchunks; ++c) {
      const index_t a = c * chunk, b = std::min(M, a + chunk);
      pairs.clear();
      for (index_t i = a; i < b; ++i) {
        st[static_cast<std::size_t>(i - a)].reset();
        for (index_t j : blocks.of(i)) pairs.emplace_back(j, i);
      }
      std::sort(pairs.begin(), pairs.end());
      if constexpr (!simd::fused_fma<Arch>()) {
        // one query at a time per block (add_rows): where the multiply-adds are not fused
        // operations the compiler may contract them in one loop and not in another, so the
        // scores and their absorb stay in the loop they have in a one-query call
        for (const auto& [j, i] : pairs) {
          const index_t t = tpos[static_cast<std::size_t>(i)];
          const index_t lo = j * select_block, hi = std::min(t, (j + 1) * select_block - 1);
          if (hi >= lo)
            st[static_cast<std::size_t>(i - a)].add_rows(
                Q.data() + i * Q.outerStride(), K.data() + lo * K.outerStride(), K.outerStride(),
                V.data() + lo * V.outerStride(), V.outerStride(), hi - lo + 1, d, scale);
        }
      } else {
        // the queries of one block: pairs [g0, g1). A block a query lists twice is attended twice,
        // whole block after whole block: its second pair (adjacent after the sort) starts the next run
        for (std::size_t g0 = 0; g0 < pairs.size();) {
          const index_t j = pairs[g0].first;
          std::size_t g1 = g0 + 1;
          while (g1 < pairs.size() && pairs[g1].first == j && pairs[g1] != pairs[g1 - 1]) ++g1;
          if (sc.size() < (g1 - g0) * static_cast<std::size_t>(step))
            sc.resize((g1 - g0) * static_cast<std::size_t>(step));
          const index_t lo = j * select_block, end = (j + 1) * select_block;  // the block's rows [lo, end)
          for (index_t r0 = lo; r0 < end; r0 += step) {
            const index_t r1 = std::min(end, r0 + step);
            auto rows = [&](std::size_t g) {  // the step's rows the pair's query attends (up to its position)
              return std::max<index_t>(0, std::min(r1, tpos[static_cast<std::size_t>(pairs[g].second)] + 1) - r0);
            };
            for (std::size_t g = g0; g < g1; ++g) {
              const index_t n = rows(g), i = pairs[g].second;
              if (n > 0)
                score_rows<Real, Arch>(Q.data() + i * Q.outerStride(), K.data() + r0 * K.outerStride(),
                                       K.outerStride(), n, d, scale,
                                       sc.data() + (g - g0) * static_cast<std::size_t>(step));
            }
            for (std::size_t g = g0; g < g1; ++g) {
              const index_t n = rows(g), i = pairs[g].second;
              if (n > 0)
                st[static_cast<std::size_t>(i - a)].add_scored(sc.data() + (g - g0) * static_cast<std::size_t>(step),
                                                               V.data() + r0 * V.outerStride(), V.outerStride(), n);
            }
          }
          g0 = g1;
        }
      }
      for (index_t i = a; i < b; ++i) st[static_cast<std::size_t>(i - a)].finish(sink, out.data() + i * dv);
    }
  }
}
}  // namespace detail

/// Compressed attention (see the file comment). pos empty: query i at position N − M + i.
template <class Real, class Arch = simd::default_arch>
void compressed_attention(const cref<Real>& Q, std::span<const index_t> pos, const cref<Real>& Kc, const cref<Real>& Vc,
                          const compress::chunk_grid& grid, const cref<Real>& K, const cref<Real>& V,
                          const compressed_params& p, mref<Real> O, const compressed_selection<Real>& sel = {}) {
  p.validate();
  grid.validate();
  const index_t M = Q.rows(), d = Q.cols(), N = K.rows(), E = Kc.rows(), dv = V.cols();
  require(d >= 1, "Q.cols()", d, "must be >= 1");
  require(K.cols() == d, "K.cols()", K.cols(), "must equal Q.cols() (" + std::to_string(d) + ")");
  require(Kc.cols() == d, "Kc.cols()", Kc.cols(), "must equal Q.cols() (" + std::to_string(d) + ")");
  require(V.rows() == N, "V.rows()", V.rows(), "must equal K.rows() (" + std::to_string(N) + ")");
  require(Vc.rows() == E, "Vc.rows()", Vc.rows(), "must equal Kc.rows() (" + std::to_string(E) + ")");
  require(dv >= 1, "V.cols()", dv, "must be >= 1");
  require(Vc.cols() == dv, "Vc.cols()", Vc.cols(), "must equal V.cols() (" + std::to_string(dv) + ")");
  require(O.rows() == M && O.cols() == dv, "O.rows()", O.rows(),
          "O must be [Q.rows() × V.cols()] = [" + std::to_string(M) + " × " + std::to_string(dv) + "]");
  std::vector<index_t> tpos(static_cast<std::size_t>(M));
  if (pos.empty()) {
    require(M <= N, "Q.rows()", M, "without positions, must be <= K.rows() (" + std::to_string(N) + ")");
    for (index_t i = 0; i < M; ++i) tpos[static_cast<std::size_t>(i)] = N - M + i;
  } else {
    require(static_cast<index_t>(pos.size()) == M, "pos.size()", pos.size(), "must equal Q.rows() or be 0");
    std::copy(pos.begin(), pos.end(), tpos.begin());
  }
  for (index_t i = 0; i < M; ++i) {
    const index_t t = tpos[static_cast<std::size_t>(i)];
    if (t < 0 || t >= N) fail("pos[" + std::to_string(i) + "]", t, "must be in [0, K.rows() = " + std::to_string(N) + ")");
    if (p.compressed && !sel.entries) {
      if (grid.num_visible(t) > E)
        fail("Kc.rows()", E,
             "must cover the " + std::to_string(grid.num_visible(t)) + " entries visible at position " + std::to_string(t));
    }
  }
  if (sel.entries) {
    require(sel.entries->size() == M, "selection.entries.size()", sel.entries->size(), "must equal Q.rows()");
    for (index_t i = 0; i < M; ++i) {
      const index_t nv = std::min(grid.num_visible(tpos[static_cast<std::size_t>(i)]), E);
      for (index_t e : sel.entries->of(i)) {
        if (e < 0 || e >= nv)
          fail("selection.entries[" + std::to_string(i) + "]", e,
               "must name an entry visible to the query (< " + std::to_string(nv) + ")");
      }
    }
  }
  if (sel.blocks) {
    require(sel.blocks->size() == M, "selection.blocks.size()", sel.blocks->size(), "must equal Q.rows()");
    for (index_t i = 0; i < M; ++i) {
      const index_t t = tpos[static_cast<std::size_t>(i)];
      for (index_t b : sel.blocks->of(i)) {
        if (b < 0 || b > t / p.select_block)
          fail("selection.blocks[" + std::to_string(i) + "]", b,
               "must be a block that starts at or before the query position " + std::to_string(t));
      }
    }
  }
  if (!sel.gates.empty()) {
    require(static_cast<index_t>(sel.gates.size()) == 3 * M, "selection.gates.size()", sel.gates.size(),
            "must be 3 * Q.rows() (cmp, slc, win per query)");
    require_finite(sel.gates, "selection.gates");
  }

  const Real scale = p.attn.scale_for<Real>(d);
  const Real sink = static_cast<Real>(p.attn.sink);
  // work estimate: every query attends at most its visible entries + window + selected tokens
  double work = 0;
  for (index_t i = 0; i < M; ++i) {
    const index_t t = tpos[static_cast<std::size_t>(i)];
    work += double(std::min(grid.num_visible(t), E) + std::min(p.window, t + 1)) +
            (sel.blocks ? double(sel.blocks->of(i).size() * static_cast<std::size_t>(p.select_block)) : 0.0);
  }
  const int nt = detail::threads_for(p.attn.threads, work * double(d + dv));
  const bool joint = p.combine == combine_mode::joint;

  if constexpr (detail::flash_xsimd_enabled<Real, Arch>) {
    // joint softmax over all visible entries and the window (no per-query selection): two key
    // segments per query, run by the blocked multi-query kernel
    if (joint && !sel.entries && !sel.blocks && detail::flash_xsimd_applicable(M, d, dv)) {
      std::vector<index_t> ranges(static_cast<std::size_t>(3 * M));
      index_t* const nvis = ranges.data();
      index_t* const wlo = nvis + M;
      index_t* const whi = wlo + M;
      for (index_t i = 0; i < M; ++i) {
        const index_t t = tpos[static_cast<std::size_t>(i)];
        nvis[i] = p.compressed ? grid.num_visible(t) : 0;
        wlo[i] = p.window > 0 ? std::max<index_t>(0, t - p.window + 1) : t + 1;
        whi[i] = t + 1;
      }
      const detail::kv_segment<Real> segs[2] = {
          {.K = Kc.data(), .ldk = Kc.outerStride(), .V = Vc.data(), .ldv = Vc.outerStride(), .n = E, .lo = nullptr, .hi = nvis},
          {.K = K.data(), .ldk = K.outerStride(), .V = V.data(), .ldv = V.outerStride(), .n = N, .lo = wlo, .hi = whi}};
      detail::flash_xsimd<Real, Arch>(Q.data(), Q.outerStride(), M, segs, 2, d, dv, scale, sink, O.data(),
                                      O.outerStride(), nt);
      return;
    }
  }

  // gated: the compressed branch over all visible entries (no per-query entry list) and the
  // window branch (each query's last `window` raw tokens) are softmaxes of their own, each a
  // one-segment job for the blocked multi-query kernel; the selected branch is walked block by
  // block (detail::selected_blocks_by_block); the per-query loop below mixes the three
  matrix_t<Real> o_cmp, o_win, o_slc;
  if (!joint && sel.blocks)
    detail::selected_blocks_by_block<Real, Arch>(Q, tpos, K, V, *sel.blocks, p.select_block, dv, scale, sink,
                                                 p.attn.block, nt, o_slc);
  if constexpr (detail::flash_xsimd_enabled<Real, Arch>) {
    if (!joint && detail::flash_xsimd_applicable(M, d, dv)) {
      if (p.compressed && !sel.entries) {
        std::vector<index_t> nvis(static_cast<std::size_t>(M));
        for (index_t i = 0; i < M; ++i) nvis[static_cast<std::size_t>(i)] = grid.num_visible(tpos[static_cast<std::size_t>(i)]);
        const detail::kv_segment<Real> seg{
            .K = Kc.data(), .ldk = Kc.outerStride(), .V = Vc.data(), .ldv = Vc.outerStride(), .n = E, .lo = nullptr, .hi = nvis.data()};
        o_cmp.resize(M, dv);
        detail::flash_xsimd<Real, Arch>(Q.data(), Q.outerStride(), M, &seg, 1, d, dv, scale, sink, o_cmp.data(), dv, nt);
      }
      std::vector<index_t> wr(static_cast<std::size_t>(2 * M));
      index_t* const wlo = wr.data();
      index_t* const whi = wlo + M;
      for (index_t i = 0; i < M; ++i) {
        const index_t t = tpos[static_cast<std::size_t>(i)];
        wlo[i] = p.window > 0 ? std::max<index_t>(0, t - p.window + 1) : t + 1;
        whi[i] = t + 1;
      }
      const detail::kv_segment<Real> seg{
          .K = K.data(), .ldk = K.outerStride(), .V = V.data(), .ldv = V.outerStride(), .n = N, .lo = wlo, .hi = whi};
      o_win.resize(M, dv);
      detail::flash_xsimd<Real, Arch>(Q.data(), Q.outerStride(), M, &seg, 1, d, dv, scale, sink, o_win.data(), dv, nt);
    }
  }

#pragma omp parallel num_threads(nt) if (nt > 1 && M > 1)
  {
    online_softmax<Real, Arch> st(dv, p.attn.block);
    std::vector<Real> tmp(static_cast<std::size_t>(dv));
#pragma omp for schedule(static)
    for (index_t i = 0; i < M; ++i) {
      const index_t t = tpos[static_cast<std::size_t>(i)];
      const Real* q = Q.data() + i * Q.outerStride();
      Real* o = O.data() + i * O.outerStride();
      const index_t ws = p.window > 0 ? std::max<index_t>(0, t - p.window + 1) : t + 1;
      Real g[3] = {static_cast<Real>(p.gate_cmp), static_cast<Real>(p.gate_slc), static_cast<Real>(p.gate_win)};
      if (!sel.gates.empty())
        for (int c = 0; c < 3; ++c) g[c] = sel.gates[static_cast<std::size_t>(3 * i + c)];

      auto branch_cmp = [&] {
        if (!p.compressed) return;
        if (sel.entries) {
          const auto list = sel.entries->of(i);
          st.add_indexed(q, Kc.data(), Kc.outerStride(), Vc.data(), Vc.outerStride(), list.data(),
                         static_cast<index_t>(list.size()), d, scale);
        } else {
          st.add_rows(q, Kc.data(), Kc.outerStride(), Vc.data(), Vc.outerStride(), grid.num_visible(t), d, scale);
        }
      };
      auto branch_slc = [&](index_t upper) {  // raw tokens of selected blocks, ≤ upper
        if (!sel.blocks) return;
        for (index_t b : sel.blocks->of(i)) {
          const index_t lo = b * p.select_block, hi = std::min(upper, (b + 1) * p.select_block - 1);
          if (hi >= lo)
            st.add_rows(q, K.data() + lo * K.outerStride(), K.outerStride(), V.data() + lo * V.outerStride(),
                        V.outerStride(), hi - lo + 1, d, scale);
        }
      };
      auto branch_win = [&] {
        if (ws <= t)
          st.add_rows(q, K.data() + ws * K.outerStride(), K.outerStride(), V.data() + ws * V.outerStride(),
                      V.outerStride(), t - ws + 1, d, scale);
      };

      if (joint) {
        st.reset();
        branch_cmp();
        branch_slc(ws - 1);
        branch_win();
        st.finish(sink, o);
      } else {
        std::fill(o, o + dv, Real(0));
        if (o_cmp.size()) {
          simd::axpy<Real, Arch>(g[0], o_cmp.data() + i * dv, o, dv);
        } else {
          st.reset();
          branch_cmp();
          st.finish(sink, tmp.data());
          simd::axpy<Real, Arch>(g[0], tmp.data(), o, dv);
        }
        if (sel.blocks) simd::axpy<Real, Arch>(g[1], o_slc.data() + i * dv, o, dv);
        if (o_win.size()) {
          simd::axpy<Real, Arch>(g[2], o_win.data() + i * dv, o, dv);
        } else {
          st.reset();
          branch_win();
          st.finish(sink, tmp.data());
          simd::axpy<Real, Arch>(g[2], tmp.data(), o, dv);
        }
      }
    }
  }
}

}  // namespace kvphase::attention
