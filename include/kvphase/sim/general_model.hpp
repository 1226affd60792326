#pragma once
/// \file sim/general_model.hpp
/// The general key-space path: a trial's tokens go through the library's compressor and
/// attention models, exactly as the operator spec says, and the task reads the attention output.
///
///  1. Tokens. The N context tokens get keys k_t (d channels: the noise keys below, the task's
///     planted rows written over them) and values v_t (the task's payload rows, dv channels, 0
///     elsewhere); the query is token N with query vector q.
///  2. Compression (compress::compress_into, the spec as given, per compression head h on its
///     grid op.head_grid(h)):
///     - keys and values share one compressor (every preset but separate_kv ones; DeepSeek-V4):
///       the token row is x_t = [v_t | k_t] (dv + d channels, dv padded so the width is even) and
///       the compressed entry is both key and value, as in the model; the query is [0 | q];
///     - separate_kv: K and V are compressed by two compressors (the value one with its own
///       parameters and without RoPE: values carry no position), the query is q.
///     RMSNorm and RoPE at the entry's anchor are the compressor's (spec.rmsnorm, spec.rope).
///  3. RoPE (spec.rope.anchor ≠ none): the query is rotated at position N and the raw keys at
///     their positions (in place, after the compression; a general_model belongs to one thread) (the same frequencies, on the same last rope_dim channels); with one
///     shared compressor the output is rotated back by −N (DeepSeek-V4).
///  4. Attention (attention::compressed_attention, one query at position N − 1's visibility:
///     every complete entry, the last `window` raw tokens): the model_config kind — compressed
///     (joint softmax over entries + window), csa (attention::csa_select keeps the indexer top-k
///     of the entries: by default one index head whose keys are the compressed entries and whose
///     query is the query; with model.indexer.dim > 0 V4's indexer, its own compressor over
///     projected rows and projected index queries: index_keys, csa_lists, model_config.hpp), nsa
///     (attention::nsa_select picks raw blocks from the compressed branch's probabilities; three
///     softmaxes mixed by the heads' gates, per query with model.gate_std: query_gates); a sink
///     of logit 0 when model.sink. The logit scale is the task's β. Several compression heads:
///     one attention per head, outputs averaged.
///  5. Full control: attention::full_attention over the same tokens (rotated when the spec has
///     RoPE), same query, scale and sink.
/// Layer schedule (model_config::layers, e.g. "window,window,op,v4_hca,op"): the layers before
/// the read layer (model_config::read_index) run on the residual stream of all N context rows
/// and the query row (row N, [0 | q] as above) with identity projections: layer l maps
///     x_i ← x_i + o_i(x),   i = 1 … N (row 0 has nothing before it),
/// where o_i is the layer's attention output for row i as a query at position i (rotated at i,
/// output rotated back by −i under RoPE with a shared compressor) over the rows before it
/// (visibility of position i − 1: a row never attends to itself, whose score q·q would win
/// with identity projections): `window` the last `window` rows, `full` every earlier row,
/// `op` the sweep's operator attended by the model's kind (csa top-k, nsa selection and gates,
/// or joint), a preset its own compressor in a joint softmax with the window. With separate_kv
/// the layers write into the value rows only (keys stay the task's). The read layer then runs
/// steps 2–4 on the resulting rows with the query row as the query. The full control runs the
/// same stack with every layer full attention (its twin), then step 5 on its rows. The cost of a
/// stacked trial grows as layers × N × (visible items): meant for contexts of a few thousand.
/// Readout (tasks/*.hpp): the output vector (dv channels: e.g. the needle's indicator channel is
/// its mass, kv-pairs decodes the codebook from it) and, for hit-by-argmax tasks, the best
/// attended item (best_scores: entries, selected raw tokens and window tokens of the branches whose
/// gate is not 0; with several heads, a hit when any head's best item holds the target).
///
/// Keys: the noise keys are exactly the keys the linear key-space engine generates from the same
/// generator state (key_space_keys reproduces the layout of sim/noise_scores.hpp: tokens in groups
/// of 16, block i of a group holding channels 2i and 2i + 1), so a trial draws the same normals in
/// the same order on every path.
///
/// Parameters: model.params (compress/presets.hpp): random (params_seed), identity, planted
/// profiles, or a file through compress::load_params_file; drawn once per model for the token
/// width. Buffers: general_workspace (one per thread) holds every per-trial buffer, sized on
/// first use. Every call runs single-threaded inside a trial (sweeps parallelise over trials), so
/// results are bitwise identical for any thread count and shard split.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvphase/attention/compressed.hpp"
#include "kvphase/attention/full.hpp"
#include "kvphase/attention/kernels.hpp"
#include "kvphase/attention/select.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/position.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/sim/linear_model.hpp"
#include "kvphase/sim/model_config.hpp"
#include "kvphase/sim/noise_scores.hpp"
#include "kvphase/sim/normal.hpp"
#include "kvphase/tasks/task.hpp"

namespace kvphase::sim {

/// Writes the n noise keys that key_space_scores(st, q, d, ·, n) scores (row t = token t, d
/// floats at K + t·ld) and advances `st` by the same number of blocks. `blocks` is a reused
/// buffer (⌈d/2⌉·32 floats).
inline void key_space_keys(normal_state& st, index_t d, float* K, index_t n, std::vector<float>& blocks,
                           index_t ld = 0) {
  if (ld == 0) ld = d;
  const index_t per = (d + 1) / 2;
  blocks.resize(static_cast<std::size_t>(per * normal_block));
  normal_generator g(st);
  for (index_t t0 = 0; t0 < n; t0 += normal_lanes) {
    g.fill(blocks.data(), per * normal_block);
    const index_t m = std::min<index_t>(normal_lanes, n - t0);
    for (index_t j = 0; j < m; ++j) {
      float* row = K + (t0 + j) * ld;
      for (index_t i = 0; i < per; ++i) {
        row[2 * i] = blocks[static_cast<std::size_t>(i * normal_block + j)];
        if (2 * i + 1 < d) row[2 * i + 1] = blocks[static_cast<std::size_t>(i * normal_block + normal_lanes + j)];
      }
    }
  }
  st = g.state();
}

/// Attended items of one head of a trial (what best_scores looks at).
struct head_items {
  compress::chunk_grid grid{};
  std::vector<index_t> entries;      ///< attended entries (all visible, or the indexer's list)
  std::vector<index_t> raw;          ///< attended raw tokens (selected blocks, then the window)
  std::vector<float> entry_score, raw_score;
};

/// Per-trial buffers of the general path (one per thread, reused across trials).
struct general_workspace {
  matrix_t<float> X;              ///< N × width token rows ([v | k], or k when separate_kv)
  matrix_t<float> V;              ///< N × dv values (separate_kv only)
  std::vector<float> aux_keys;    ///< task-specific key rows (kv-pairs: the P pair keys)
  std::vector<float> blocks;      ///< key_space_keys staging
  compress::compress_workspace<float> comp;
  std::vector<matrix_t<float>> kc, vc;  ///< per head: compressed keys (and values, separate_kv)
  matrix_t<float> q;              ///< 1 × width query (rotated at N when RoPE)
  matrix_t<float> o, oh;          ///< 1 × dv outputs: compressed model (head mean), one head
  matrix_t<float> of;             ///< 1 × dv output of the full control
  std::vector<head_items> items;  ///< per head
  std::vector<float> probs;       ///< nsa: compressed-branch probabilities
  std::vector<matrix_t<float>> ki;  ///< csa with V4's indexer: per head, the compressed index keys
  matrix_t<float> xi, qi, wi;     ///< its projected token rows, index queries and head weights
  bool full_scored = false;
  std::vector<float> full_score;  ///< lazily: the full control's token scores
  // layer schedule (stacked models only)
  bool stacked = false;           ///< this trial ran a stack: the full control reads fx / fq / fv
  matrix_t<float> S, F;           ///< (N + 1) × width residual rows: the model's and the full twin's
  matrix_t<float> SV, FV;         ///< N × dv value rows (separate_kv)
  matrix_t<float> fx, fv, fq;     ///< the full twin's context, values and query at the read layer
  matrix_t<float> R, lo, lh, lkc, lvc;  ///< one layer: rotated rows, output, head output, entries
};

class general_model {
 public:
  general_model() = default;
  /// The model of `op` (as given) for key width d, value width dv, raw window `window` and
  /// attention model `m`; parameters per m.params (seed params_seed for random ones).
  /// `origin_shift` moves the grids of preset layers as op's grid was moved (the shifted design's
  /// prefix padding, sim/design.hpp shifted_operator).
  general_model(const compress::operator_spec& op, index_t d, index_t dv, index_t window, const model_config& m,
                std::uint64_t params_seed, index_t origin_shift = 0)
      : spec_(op), m_(m), d_(d), window_(window) {
    spec_.validate();
    m_.validate();
    require(d >= 1 && d <= limits::max_dim, "dim", d, "must be in [1, 65536]");
    require(dv >= 1 && dv <= limits::max_dim, "value_dim", dv, "must be in [1, 65536]");
    require(window >= 0, "window", window, "must be >= 0");
    shared_ = !spec_.separate_kv;
    vspec_ = spec_;
    vspec_.rope.anchor = compress::rope_anchor::none;  // values carry no position
    dv_ = dv;
    dvp_ = shared_ ? dv + (dv + d) % 2 : dv;
    width_ = shared_ ? dvp_ + d : d;
    for (index_t h = 0; h < spec_.heads; ++h) {
      pk_.push_back(make(width_, h, params_seed));
      require(pk_.back().output_dim(spec_, width_) == width_, "op", spec_.name.empty() ? "op" : spec_.name,
              "the general path needs a compressor that keeps the token width (" + std::to_string(width_) + ")");
      if (!shared_) pv_.push_back(make_for(vspec_, dvp_, h, rng::combine(params_seed, 1)));
    }
    require(m_.head_gates.empty() || static_cast<index_t>(m_.head_gates.size()) == 3 * spec_.heads, "model.head_gates",
            m_.head_gates.size(), "values must be 3 per compression head (" + std::to_string(3 * spec_.heads) + " for " +
            std::to_string(spec_.heads) + " heads)");
    rope_ = spec_.rope.anchor != compress::rope_anchor::none;
    if (rope_) freq_ = compress::rope_frequencies(spec_.rope, width_);
    if (m_.indexer.dim > 0) plan_indexer(params_seed);
    if (m_.gate_std > 0) {  // NSA's per-query gates: w_{h,b} ~ N(0, τ²/d)
      gate_w_.resize(3 * spec_.heads, width_);
      compress::detail::fill_normal<float>(gate_w_, rng::combine(params_seed, 0x6A7E0000ULL), "nsa.gates", 0,
                                           m_.gate_std / std::sqrt(static_cast<double>(d_)));
    }
    geo_ = linear_model::full();
    plan_layers(params_seed, origin_shift);
  }

  [[nodiscard]] const compress::operator_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] const model_config& model() const noexcept { return m_; }
  [[nodiscard]] const compress::pool_params<float>& params(index_t h = 0) const { return pk_.at(static_cast<std::size_t>(h)); }
  /// The value compressor's parameters of head h (separate_kv only).
  [[nodiscard]] const compress::pool_params<float>& value_params(index_t h = 0) const { return pv_.at(static_cast<std::size_t>(h)); }
  /// V4's indexer (model.indexer.dim > 0): the index compressor's parameters of head h, the key
  /// projection (width() × dI, P_Kᵀ) and the query projections (width() × H·dI, head h's P_hᵀ in
  /// columns h·dI …).
  [[nodiscard]] const compress::pool_params<float>& indexer_params(index_t h = 0) const { return pi_.at(static_cast<std::size_t>(h)); }
  [[nodiscard]] const matrix_t<float>& indexer_key_projection() const noexcept { return ipk_; }
  [[nodiscard]] const matrix_t<float>& indexer_query_projection() const noexcept { return ipq_; }
  /// The index compressor's spec: the operator's, run at width dI.
  [[nodiscard]] const compress::operator_spec& indexer_spec() const noexcept { return spec_; }
  [[nodiscard]] index_t width() const noexcept { return width_; }
  [[nodiscard]] index_t value_dim() const noexcept { return dv_; }
  [[nodiscard]] bool shared_kv() const noexcept { return shared_; }
  /// Layers run before the read layer (0: the single-layer model).
  [[nodiscard]] index_t layers_before_read() const noexcept { return static_cast<index_t>(plan_.size()) - 1; }
  /// NSA branch gates of one compression head.
  struct branch_gates {
    double cmp, slc, win;
  };
  /// Head h's gates: model.head_gates when given, else the shared gate_cmp, gate_slc, gate_win.
  [[nodiscard]] branch_gates gates(index_t h) const noexcept {
    if (m_.head_gates.empty()) return {m_.gate_cmp, m_.gate_slc, m_.gate_win};
    const auto* g = m_.head_gates.data() + 3 * h;
    return {g[0], g[1], g[2]};
  }
  /// NSA's per-query gates of head h (model.gate_std > 0, model_config.hpp) for the unrotated
  /// query rows Q (width() floats each): [rows × 3] (cmp, slc, win) per row, each
  /// σ(logit(g_b) + w_{h,b}·q) computed in double from head h's gates g (a gate of 0 or 1 stays).
  [[nodiscard]] std::vector<float> query_gates(index_t h, const attention::cref<float>& Q) const {
    const branch_gates g = gates(h);
    const double gb[3] = {g.cmp, g.slc, g.win};
    std::vector<float> out(static_cast<std::size_t>(3 * Q.rows()));
    for (index_t i = 0; i < Q.rows(); ++i)
      for (index_t b = 0; b < 3; ++b) {
        double v = gb[b];
        if (v > 0 && v < 1) {
          double z = std::log(v / (1 - v));
          for (index_t j = 0; j < width_; ++j) z += static_cast<double>(gate_w_(3 * h + b, j)) * static_cast<double>(Q(i, j));
          v = 1.0 / (1.0 + std::exp(-z));
        }
        out[static_cast<std::size_t>(3 * i + b)] = static_cast<float>(v);
      }
    return out;
  }
  /// The per-query gates' weights: row 3h + b is w_{h,b} (width() floats; empty when gate_std = 0).
  [[nodiscard]] const matrix_t<float>& gate_weights() const noexcept { return gate_w_; }
  /// A geometry for the readout interface (unused by general-path readouts).
  [[nodiscard]] const linear_model& geometry() const noexcept { return geo_; }

  /// Key row t (d channels) and value row t (dv channels) of the trial being built.
  [[nodiscard]] float* key_row(general_workspace& ws, index_t t) const noexcept {
    return ws.X.data() + t * width_ + (shared_ ? dvp_ : 0);
  }
  [[nodiscard]] float* value_row(general_workspace& ws, index_t t) const noexcept {
    return shared_ ? ws.X.data() + t * width_ : ws.V.data() + t * dvp_;
  }

  /// Sizes the token rows for N tokens, zeroes the values and draws the noise keys from st.
  void begin(general_workspace& ws, normal_state& st, index_t N) const {
    if (ws.X.rows() != N || ws.X.cols() != width_) ws.X.resize(N, width_);
    if (!shared_ && (ws.V.rows() != N || ws.V.cols() != dvp_)) ws.V.resize(N, dvp_);
    if (shared_) {
      for (index_t t = 0; t < N; ++t) std::fill_n(ws.X.data() + t * width_, dvp_, 0.0f);
    } else {
      ws.V.setZero();
    }
    key_space_keys(st, d_, key_row(ws, 0), N, ws.blocks, width_);
  }

  /// Runs both models for the query q (d channels) at position N with logit scale beta: the
  /// compressed model's output in ws.o, the full control's in ws.of, the items in ws.items.
  /// With a layer schedule, the layers before the read layer run first (file comment).
  void run(general_workspace& ws, index_t N, const float* q, double beta) const {
    if (ws.q.rows() != 1 || ws.q.cols() != width_) ws.q.resize(1, width_);
    ws.q.setZero();
    std::copy(q, q + d_, ws.q.data() + (shared_ ? dvp_ : 0));
    ws.stacked = plan_.size() > 1;
    if (ws.stacked) {
      ws.S.resize(N + 1, width_);
      ws.S.topRows(N) = ws.X;
      ws.S.row(N) = ws.q.row(0);
      ws.F = ws.S;
      if (!shared_) {
        ws.SV = ws.V;
        ws.FV = ws.V;
      }
      for (std::size_t l = 0; l + 1 < plan_.size(); ++l) {
        apply_layer(plan_[l].type, plan_[l], ws.S, ws.SV, N, beta, ws);
        apply_layer(layer_type::full, plan_[l], ws.F, ws.FV, N, beta, ws);
      }
      ws.X = ws.S.topRows(N);
      ws.q = ws.S.row(N);
      if (!shared_) ws.V = ws.SV;
      ws.fx = ws.F.topRows(N);
      ws.fq = ws.F.row(N);
      if (!shared_) ws.fv = ws.FV;
    }
    read(ws, N, beta);
  }

  /// The read layer (steps 2–5 of the file comment) on the context rows ws.X (ws.V) and the
  /// unrotated query row ws.q (width() floats); the full control on ws.fx / ws.fq / ws.fv when
  /// ws.stacked, else on the same rows. Public for the layer tests.
  void read(general_workspace& ws, index_t N, double beta) const {
    const index_t H = spec_.heads;
    ws.full_scored = false;
    require(ws.q.rows() == 1 && ws.q.cols() == width_, "q.cols()", ws.q.cols(), "must equal the token width");
    // the indexer and the per-query gates read the query unrotated
    const matrix_t<float> q0 = m_.indexer.dim > 0 || m_.gate_std > 0 ? ws.q : matrix_t<float>();
    if (rope_) compress::apply_rope(ws.q.data(), static_cast<double>(N), freq_);
    const index_t vw = shared_ ? width_ : dvp_;  // value width of the attention calls
    ws.kc.resize(static_cast<std::size_t>(H));
    ws.vc.resize(static_cast<std::size_t>(H));
    ws.items.resize(static_cast<std::size_t>(H));
    if (ws.o.rows() != 1 || ws.o.cols() != vw) ws.o.resize(1, vw);
    if (ws.oh.rows() != 1 || ws.oh.cols() != vw) ws.oh.resize(1, vw);
    if (ws.of.rows() != 1 || ws.of.cols() != vw) ws.of.resize(1, vw);
    ws.o.setZero();
    const float scale = static_cast<float>(beta);
    const double sink = m_.sink ? 0.0 : -std::numeric_limits<double>::infinity();
    const index_t pos[1] = {N - 1};
    const compress::compress_options copt{.threads = 1, .stores = compress::store_mode::normal};
    // every head's entries from the unrotated tokens, then the raw rows rotated in place
    for (index_t h = 0; h < H; ++h) {
      const auto hs = static_cast<std::size_t>(h);
      const index_t E = spec_.head_grid(h).num_entries(N);
      require(E >= 1, "context", N, "too few tokens for one complete entry of the operator");
      auto& Kc = ws.kc[hs];
      if (Kc.rows() != E || Kc.cols() != width_) Kc.resize(E, width_);
      compress::compress_into<float>(spec_, pk_[hs], matrix_view<float>(ws.X.data(), N, width_),
                                     matrix_mut_view<float>(Kc.data(), E, width_), h, copt, &ws.comp);
      if (m_.kind == model_kind::csa) index_keys(ws, ws.X.data(), N, h);
      if (!shared_) {
        auto& vc = ws.vc[hs];
        if (vc.rows() != E || vc.cols() != dvp_) vc.resize(E, dvp_);
        compress::compress_into<float>(vspec_, pv_[hs], matrix_view<float>(ws.V.data(), N, dvp_),
                                       matrix_mut_view<float>(vc.data(), E, dvp_), h, copt, &ws.comp);
      }
    }
    if (rope_) rotate_rows(ws.X.data(), N);
    const matrix_t<float>* raw = &ws.X;
    const matrix_t<float>& Vraw = shared_ ? *raw : ws.V;
    for (index_t h = 0; h < H; ++h) {
      const auto hs = static_cast<std::size_t>(h);
      const compress::chunk_grid grid = spec_.head_grid(h);
      const index_t E = ws.kc[hs].rows();
      const auto& Kc = ws.kc[hs];
      const matrix_t<float>* Vc = shared_ ? &Kc : &ws.vc[hs];
      head_items& it = ws.items[hs];
      it.grid = grid;
      const branch_gates gt = gates(h);
      attention::compressed_params cp{.window = window_, .compressed = true,
                                      .combine = m_.kind == model_kind::nsa ? attention::combine_mode::gated
                                                                            : attention::combine_mode::joint,
                                      .select_block = m_.select_block, .gate_cmp = gt.cmp,
                                      .gate_slc = gt.slc, .gate_win = gt.win,
                                      .attn = {.scale = beta, .sink = sink, .threads = 1}};
      attention::index_lists lists;
      attention::compressed_selection<float> sel;
      std::vector<float> qg;
      if (m_.kind == model_kind::nsa && m_.gate_std > 0) {
        qg = query_gates(h, q0);
        sel.gates = qg;
      }
      const index_t nv = std::min(grid.num_visible(N - 1), E);
      it.entries.clear();
      it.raw.clear();
      if (m_.kind == model_kind::csa) {
        lists = csa_lists(ws, ws.q, q0, pos, grid, Kc, h);
        sel.entries = &lists;
        for (index_t e : lists.of(0)) it.entries.push_back(e);
      } else {
        for (index_t e = 0; e < nv; ++e) it.entries.push_back(e);
      }
      const index_t ws0 = window_ > 0 ? std::max<index_t>(0, N - window_) : N;
      if (m_.kind == model_kind::nsa) {
        ws.probs.resize(static_cast<std::size_t>(std::max<index_t>(nv, 1)));
        attention::score_rows<float>(ws.q.data(), Kc.data(), width_, nv, width_, scale, ws.probs.data());
        attention::softmax_with_sink<float>(ws.probs.data(), nv, static_cast<float>(sink));
        const Eigen::Map<const matrix_t<float>> P(ws.probs.data(), 1, std::max<index_t>(nv, 1));
        lists = attention::nsa_select<float>(P, grid, pos,
                                             attention::block_select_params{.block = m_.select_block,
                                                                            .top_n = m_.select_blocks});
        sel.blocks = &lists;
        for (index_t b : lists.of(0))
          for (index_t t = b * m_.select_block; t < std::min(N, (b + 1) * m_.select_block); ++t) it.raw.push_back(t);
      }
      for (index_t t = ws0; t < N; ++t)
        if (m_.kind != model_kind::nsa || std::find(it.raw.begin(), it.raw.end(), t) == it.raw.end()) it.raw.push_back(t);
      attention::compressed_attention<float>(ws.q, pos, Kc, *Vc, grid, *raw, Vraw, cp, ws.oh, sel);
      if (m_.kind == model_kind::nsa) {  // a branch gated to 0 contributes no item to the argmax readout
        if (gt.cmp == 0) it.entries.clear();
        if (gt.slc == 0 || gt.win == 0) {
          std::vector<index_t> keep;
          const auto nsel = it.raw.size();
          for (std::size_t i = 0; i < nsel; ++i) {
            const index_t t = it.raw[i];
            const bool in_win = t >= ws0;
            const bool in_sel = std::find(lists.indices.begin(), lists.indices.end(), t / m_.select_block) != lists.indices.end();
            if ((in_sel && gt.slc > 0) || (in_win && gt.win > 0)) keep.push_back(t);
          }
          it.raw = std::move(keep);
        }
      }
      ws.o += ws.oh;
      // item scores (what the attention scored), for best_scores
      it.entry_score.resize(it.entries.size());
      attention::score_indexed<float>(ws.q.data(), Kc.data(), width_, it.entries.data(),
                                      static_cast<index_t>(it.entries.size()), width_, 1.0f, it.entry_score.data());
      it.raw_score.resize(it.raw.size());
      attention::score_indexed<float>(ws.q.data(), raw->data(), width_, it.raw.data(), static_cast<index_t>(it.raw.size()),
                                      width_, 1.0f, it.raw_score.data());
    }
    if (H > 1) ws.o *= 1.0f / static_cast<float>(H);
    if (ws.stacked) {  // the full twin's rows
      if (rope_) {
        rotate_rows(ws.fx.data(), N);
        compress::apply_rope(ws.fq.data(), static_cast<double>(N), freq_);
      }
      attention::full_attention<float>(ws.fq, ws.fx, shared_ ? ws.fx : ws.fv, std::span<const index_t>(pos, 1),
                                       attention::attention_params{.scale = beta, .sink = sink, .threads = 1}, ws.of);
    } else {
      attention::full_attention<float>(ws.q, *raw, Vraw, std::span<const index_t>(pos, 1),
                                       attention::attention_params{.scale = beta, .sink = sink, .threads = 1}, ws.of);
    }
    if (rope_ && shared_) {  // the shared entry is the value: rotate the outputs back by −N
      compress::apply_rope(ws.o.data(), -static_cast<double>(N), freq_);
      compress::apply_rope(ws.of.data(), -static_cast<double>(N), freq_);
    }
  }

  /// Best attended item meeting tokens [a, b) and best other one (see the file comment): with
  /// several heads, `target` − `other` is the largest per-head margin.
  void best_compressed(const general_workspace& ws, index_t a, index_t b, float& target, float& other) const {
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    float best_margin = ninf, bt = ninf, bo = ninf;
    for (const head_items& it : ws.items) {
      float t = ninf, o = ninf;
      for (std::size_t i = 0; i < it.entries.size(); ++i) {
        const auto r = it.grid.sources(it.entries[i]);
        const bool in = r.first < b && r.last >= a;
        (in ? t : o) = std::max(in ? t : o, it.entry_score[i]);
      }
      for (std::size_t i = 0; i < it.raw.size(); ++i) {
        const bool in = it.raw[i] >= a && it.raw[i] < b;
        (in ? t : o) = std::max(in ? t : o, it.raw_score[i]);
      }
      if (ws.items.size() == 1 || t - o > best_margin) {
        best_margin = t - o;
        bt = t;
        bo = o;
      }
    }
    target = bt;
    other = bo;
  }
  /// The same for the full control (token scores computed on first use in a trial).
  void best_full(general_workspace& ws, index_t a, index_t b, float& target, float& other) const {
    const matrix_t<float>& raw = ws.stacked ? ws.fx : ws.X;  // rotated in place by read() under RoPE
    const matrix_t<float>& qv = ws.stacked ? ws.fq : ws.q;
    const index_t N = raw.rows();
    if (!ws.full_scored) {
      ws.full_score.resize(static_cast<std::size_t>(N));
      attention::score_rows<float>(qv.data(), raw.data(), width_, N, width_, 1.0f, ws.full_score.data());
      ws.full_scored = true;
    }
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    const float* s = ws.full_score.data();
    target = ninf;
    for (index_t t = std::max<index_t>(a, 0); t < std::min(b, N); ++t) target = std::max(target, s[t]);
    other = std::max(a > 0 ? simd::max_value<float>(s, std::min(a, N)) : ninf,
                     b < N ? simd::max_value<float>(s + b, N - b) : ninf);
  }

  /// Rotates rows 0 … N−1 (width_ floats each) in place at their positions: exactly
  /// compress::apply_rope (the same double angles, cosines and sines, rounded once), from a table
  /// of cos/sin per (position, pair) built once per model and extended as N grows. Public for the
  /// stage benchmark (benchmarks/bench_sweep.cpp); run() calls it on the trial's rows.
  void rotate_rows(float* X, index_t N) const {
    if (!rope_) return;
    const index_t P = freq_.rotated / 2;
    auto& tab = table_;
    const index_t have = static_cast<index_t>(tab.size()) / (2 * std::max<index_t>(P, 1));
    if (have < N) {
      tab.resize(static_cast<std::size_t>(2 * P * N));
      for (index_t t = have; t < N; ++t)
        for (index_t k = 0; k < P; ++k) {
          const double a = static_cast<double>(t) * freq_.inv_freq[static_cast<std::size_t>(k)];
          tab[static_cast<std::size_t>(2 * (t * P + k))] = std::cos(a);
          tab[static_cast<std::size_t>(2 * (t * P + k) + 1)] = std::sin(a);
        }
    }
    for (index_t t = 0; t < N; ++t)
      compress::rotate_pairs<float>(X + t * width_ + (width_ - freq_.rotated), tab.data() + 2 * t * P, P);
  }

  /// Kind of one layer of the schedule.
  enum class layer_type { op, window, full, preset };
  /// One layer of the schedule: op layers use spec() and params(); a preset layer its own.
  struct layer_plan {
    layer_type type = layer_type::op;
    compress::operator_spec spec{}, vspec{};
    std::vector<compress::pool_params<float>> pk, pv;
  };
  [[nodiscard]] const std::vector<layer_plan>& plan() const noexcept { return plan_; }

  /// One layer of the stack as `type` (the plan's, or full for the twin) on the residual rows S
  /// ((N + 1) × width(): the context and the query row) and, with separate_kv, the value rows SV
  /// (N × value width): row i = 1 … N gets the layer's output as a query at position i over the
  /// rows before it (file comment). Public for the layer tests.
  void apply_layer(layer_type type, const layer_plan& L, matrix_t<float>& S, matrix_t<float>& SV, index_t N, double beta,
                   general_workspace& ws) const {
    require(S.rows() == N + 1 && S.cols() == width_, "S.rows()", S.rows(), "must be N + 1 rows of the token width");
    const index_t vw = shared_ ? width_ : dvp_;
    const double sink = m_.sink ? 0.0 : -std::numeric_limits<double>::infinity();
    const attention::attention_params ap{.scale = beta, .sink = sink, .threads = 1};
    ws.R = S;
    if (rope_) rotate_rows(ws.R.data(), N + 1);
    std::vector<index_t> pos(static_cast<std::size_t>(N));
    for (index_t i = 0; i < N; ++i) pos[static_cast<std::size_t>(i)] = i;
    const auto Q = ws.R.middleRows(1, N);
    const auto K = ws.R.topRows(N);
    const matrix_t<float>& Vsrc = shared_ ? ws.R : SV;
    const auto V = Vsrc.topRows(N);
    if (ws.lo.rows() != N || ws.lo.cols() != vw) ws.lo.resize(N, vw);
    if (type == layer_type::full) {
      attention::full_attention<float>(Q, K, V, pos, ap, ws.lo);
    } else if (type == layer_type::window) {
      const matrix_t<float> none_k(0, width_), none_v(0, vw);
      attention::compressed_attention<float>(Q, pos, none_k, none_v, compress::chunk_grid{.window = 1, .stride = 1}, K,
                                             V, attention::compressed_params{.window = window_, .compressed = false,
                                                                             .attn = ap},
                                             ws.lo);
    } else {
      const bool op = type == layer_type::op;
      const compress::operator_spec& sp = op ? spec_ : L.spec;
      const compress::operator_spec& vsp = op ? vspec_ : L.vspec;
      const auto& pk = op ? pk_ : L.pk;
      const auto& pv = op ? pv_ : L.pv;
      const model_kind kind = op ? m_.kind : model_kind::compressed;
      const compress::compress_options copt{.threads = 1, .stores = compress::store_mode::normal};
      ws.lo.setZero();
      if (ws.lh.rows() != N || ws.lh.cols() != vw) ws.lh.resize(N, vw);
      for (index_t h = 0; h < sp.heads; ++h) {
        const auto hs = static_cast<std::size_t>(h);
        const compress::chunk_grid grid = sp.head_grid(h);
        const index_t E = grid.num_entries(N);
        ws.lkc.resize(std::max<index_t>(E, 0), width_);
        if (E > 0)
          compress::compress_into<float>(sp, pk[hs], matrix_view<float>(S.data(), N, width_),
                                         matrix_mut_view<float>(ws.lkc.data(), E, width_), h, copt, &ws.comp);
        if (!shared_) {
          ws.lvc.resize(std::max<index_t>(E, 0), dvp_);
          if (E > 0)
            compress::compress_into<float>(vsp, pv[hs], matrix_view<float>(SV.data(), N, dvp_),
                                           matrix_mut_view<float>(ws.lvc.data(), E, dvp_), h, copt, &ws.comp);
        }
        const matrix_t<float>& Vc = shared_ ? ws.lkc : ws.lvc;
        attention::compressed_params cp{.window = window_, .compressed = E > 0,
                                        .combine = kind == model_kind::nsa ? attention::combine_mode::gated
                                                                           : attention::combine_mode::joint,
                                        .select_block = m_.select_block, .gate_cmp = gates(h).cmp,
                                        .gate_slc = gates(h).slc, .gate_win = gates(h).win, .attn = ap};
        attention::index_lists lists;
        attention::compressed_selection<float> sel;
        std::vector<float> qg;
        if (kind == model_kind::nsa && m_.gate_std > 0) {
          qg = query_gates(h, S.middleRows(1, N));
          sel.gates = qg;
        }
        if (kind == model_kind::csa && E > 0) {
          index_keys(ws, S.data(), N, h);
          lists = csa_lists(ws, Q, S.middleRows(1, N), pos, grid, ws.lkc, h);
          sel.entries = &lists;
        } else if (kind == model_kind::nsa) {  // blocks per query from its compressed-branch probabilities
          const attention::block_select_params bp{.block = m_.select_block, .top_n = m_.select_blocks};
          for (index_t i = 0; i < N; ++i) {
            const index_t nv = E > 0 ? std::min(grid.num_visible(i), E) : 0;
            ws.probs.assign(static_cast<std::size_t>(std::max<index_t>(nv, 1)), 0.0f);
            if (nv > 0) {
              attention::score_rows<float>(Q.row(i).data(), ws.lkc.data(), width_, nv, width_, static_cast<float>(beta),
                                           ws.probs.data());
              attention::softmax_with_sink<float>(ws.probs.data(), nv, static_cast<float>(sink));
            }
            const Eigen::Map<const matrix_t<float>> P(ws.probs.data(), 1, std::max<index_t>(nv, 1));
            const index_t pi[1] = {i};
            const attention::index_lists one = attention::nsa_select<float>(P, grid, pi, bp);
            for (index_t b : one.of(0)) lists.indices.push_back(b);
            lists.offsets.push_back(static_cast<index_t>(lists.indices.size()));
          }
          sel.blocks = &lists;
        }
        attention::compressed_attention<float>(Q, pos, ws.lkc, Vc, grid, K, V, cp, ws.lh, sel);
        ws.lo += ws.lh;
      }
      if (sp.heads > 1) ws.lo *= 1.0f / static_cast<float>(sp.heads);
    }
    if (rope_ && shared_)  // the shared entry is the value: row i's output rotated back by −i
      for (index_t i = 0; i < N; ++i) compress::apply_rope(ws.lo.row(i).data(), -static_cast<double>(i + 1), freq_);
    if (shared_) {
      S.middleRows(1, N) += ws.lo;
    } else if (N > 1) {  // the values of rows 1 … N − 1 (the query row's value is never attended)
      SV.middleRows(1, N - 1) += ws.lo.topRows(N - 1);
    }
  }

 private:
  /// Builds plan_ from m_.layers up to the read layer (validated by model_config::validate).
  void plan_layers(std::uint64_t params_seed, index_t origin_shift) {
    const auto names = m_.layer_names();
    const std::size_t r = m_.read_index();
    for (std::size_t l = 0; l <= r; ++l) {
      const std::string& n = names[l];
      layer_plan L;
      const std::string at = "model.layers[" + std::to_string(l) + "]";
      if (n == "op") {
        L.type = layer_type::op;
      } else if (n == "window") {
        L.type = layer_type::window;
        require(window_ >= 1, "window", window_, "a window layer in model.layers needs a raw window >= 1");
      } else if (n == "full") {
        L.type = layer_type::full;
      } else {
        L.type = layer_type::preset;
        L.spec = compress::preset(n);
        L.spec.rope = spec_.rope;  // one RoPE setting for the whole stack (the ablation switch)
        L.spec.grid.origin -= origin_shift;
        L.spec.validate();
        require(L.spec.separate_kv == spec_.separate_kv, at, n,
                std::string("must ") + (spec_.separate_kv ? "" : "not ") +
                    "compress keys and values separately, as the sweep's operator does");
        L.vspec = L.spec;
        L.vspec.rope.anchor = compress::rope_anchor::none;
        const std::uint64_t ls = rng::combine(params_seed, 0x1A7E0000ULL + l);
        for (index_t h = 0; h < L.spec.heads; ++h) {
          L.pk.push_back(make_for(L.spec, width_, h, ls));
          require(L.pk.back().output_dim(L.spec, width_) == width_, at, n,
                  "the general path needs a compressor that keeps the token width (" + std::to_string(width_) + ")");
          if (!shared_) L.pv.push_back(make_for(L.vspec, dvp_, h, rng::combine(ls, 1)));
        }
      }
      plan_.push_back(std::move(L));
    }
  }

  /// csa with V4's indexer: the compressed index keys of head h (ws.ki[h]) from the N unrotated
  /// token rows X (width() floats each): X·P_Kᵀ through the index compressor. Nothing without it.
  void index_keys(general_workspace& ws, const float* X, index_t N, index_t h) const {
    if (m_.indexer.dim == 0) return;
    const index_t dI = m_.indexer.dim, E = spec_.head_grid(h).num_entries(N);
    ws.ki.resize(static_cast<std::size_t>(spec_.heads));
    auto& KI = ws.ki[static_cast<std::size_t>(h)];
    KI.resize(std::max<index_t>(E, 0), dI);
    if (E <= 0) return;
    ws.xi.resize(N, dI);
    compress::detail::project_rows<float, simd::default_arch>(X, width_, N, width_, ipk_, ws.xi.data(), 1);
    compress::compress_into<float>(spec_, pi_[static_cast<std::size_t>(h)], matrix_view<float>(ws.xi.data(), N, dI),
                                   matrix_mut_view<float>(KI.data(), E, dI), h,
                                   compress::compress_options{.threads = 1, .stores = compress::store_mode::normal}, &ws.comp);
  }
  /// The csa selection of head h (grid) for the queries Q (rotated at their positions, pos + 1)
  /// with visibility pos: without V4's indexer the query scores the compressed entries Kc (one
  /// index head); with it, the index queries of the unrotated query rows Qu score the index keys
  /// ws.ki[h] (index_keys first): model_config.hpp.
  [[nodiscard]] attention::index_lists csa_lists(general_workspace& ws, const attention::cref<float>& Q,
                                                 const attention::cref<float>& Qu, std::span<const index_t> pos,
                                                 const compress::chunk_grid& grid, const matrix_t<float>& Kc,
                                                 index_t h) const {
    const index_t M = Q.rows();
    if (m_.indexer.dim == 0) {
      const matrix_t<float> w = matrix_t<float>::Ones(M, 1);
      return attention::csa_select<float>(Q, w, Kc, grid, pos, attention::indexer_params{.heads = 1, .top_k = m_.top_k});
    }
    const index_t dI = m_.indexer.dim, H = m_.indexer.heads;
    ws.qi.resize(M, H * dI);
    compress::detail::project_rows<float, simd::default_arch>(Qu.data(), Qu.outerStride(), M, width_, ipq_, ws.qi.data(), 1);
    if (rope_)
      for (index_t i = 0; i < M; ++i)
        for (index_t a = 0; a < H; ++a)
          compress::apply_rope(ws.qi.row(i).data() + a * dI, static_cast<double>(pos[static_cast<std::size_t>(i)] + 1), ifreq_);
    ws.wi.setConstant(M, H, 1.0f / static_cast<float>(H));
    return attention::csa_select<float>(ws.qi, ws.wi, ws.ki[static_cast<std::size_t>(h)], grid, pos,
                                        attention::indexer_params{.heads = H, .top_k = m_.top_k});
  }

 private:
  /// V4's indexer (model.indexer.dim > 0; model_config.hpp): the index compressor's parameters
  /// (the operator's spec at width dI), the key projection and the heads' query projections,
  /// drawn once from params_seed.
  void plan_indexer(std::uint64_t params_seed) {
    const index_t dI = m_.indexer.dim, H = m_.indexer.heads;
    if (rope_) {
      const index_t R = spec_.rope.rope_dim == 0 ? dI : spec_.rope.rope_dim;
      require(dI % 2 == 0 && R <= dI, "model.indexer.dim", dI,
              "must be even and at least the operator's rotated channels (rope_dim " + std::to_string(R) + ")");
      ifreq_ = compress::rope_frequencies(spec_.rope, dI);
    }
    const std::uint64_t seed = rng::combine(params_seed, 0x1D3E0000ULL);
    for (index_t h = 0; h < spec_.heads; ++h) {
      pi_.push_back(make_for(spec_, dI, h, seed));
      require(pi_.back().output_dim(spec_, dI) == dI, "model.indexer.dim", dI,
              "the index compressor must keep the index width dI");
    }
    const double sd = 1.0 / std::sqrt(static_cast<double>(dI));
    ipk_.resize(width_, dI);
    compress::detail::fill_normal<float>(ipk_, seed, "indexer.key_projection", 0, sd);
    matrix_t<float> own(width_, H * dI);  // the heads' independent parts R_h
    compress::detail::fill_normal<float>(own, seed, "indexer.query_projection", 0, sd);
    const double rho = m_.indexer.align, rest = std::sqrt(std::max(0.0, 1.0 - rho * rho));
    ipq_.resize(width_, H * dI);
    for (index_t r = 0; r < width_; ++r)
      for (index_t a = 0; a < H; ++a)
        for (index_t c = 0; c < dI; ++c)
          ipq_(r, a * dI + c) = static_cast<float>(rho * static_cast<double>(ipk_(r, c)) +
                                                   rest * static_cast<double>(own(r, a * dI + c)));
  }

  compress::pool_params<float> make(index_t width, index_t head, std::uint64_t seed) const {
    return make_for(spec_, width, head, seed);
  }
  compress::pool_params<float> make_for(const compress::operator_spec& sp, index_t width, index_t head,
                                        std::uint64_t seed) const {
    using compress::params_kind;
    switch (m_.params) {
      case params_kind::random: return compress::make_preset_params<float>(sp, width, seed, head);
      case params_kind::file: return compress::load_params_file<float>(m_.params_file, sp, width, head);
      default: return compress::planted_params<float>(sp, width, m_.params, m_.params_strength, seed, head);
    }
  }

  compress::operator_spec spec_{}, vspec_{};
  model_config m_{};
  index_t d_ = 0, dv_ = 0, dvp_ = 0, width_ = 0, window_ = 0;
  bool shared_ = true, rope_ = false;
  compress::rope_frequencies freq_{};
  std::vector<compress::pool_params<float>> pk_, pv_;
  std::vector<compress::pool_params<float>> pi_;  ///< V4's indexer: the index compressor's parameters per head
  matrix_t<float> ipk_, ipq_;                   ///< P_Kᵀ (width × dI), the heads' P_hᵀ (width × H·dI)
  compress::rope_frequencies ifreq_{};          ///< RoPE of the index width
  matrix_t<float> gate_w_;                      ///< NSA's per-query gates: row 3h + b is w_{h,b}
  std::vector<layer_plan> plan_;  ///< layers up to the read layer (the last one is op)
  linear_model geo_{};
  mutable std::vector<double> table_;  ///< RoPE cos/sin per (position, pair): one model per thread
};

}  // namespace kvphase::sim
