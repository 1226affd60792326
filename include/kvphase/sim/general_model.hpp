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
///     of the entries: one index head whose keys are the compressed entries and whose query is the
///     query), nsa (attention::nsa_select picks raw blocks from the compressed branch's
///     probabilities; three softmaxes mixed by constant gates); a sink of logit 0 when
///     model.sink. The logit scale is the task's β. Several compression heads: one attention per
///     head, outputs averaged.
///  5. Full control: attention::full_attention over the same tokens (rotated when the spec has
///     RoPE), same query, scale and sink.
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
  bool full_scored = false;
  std::vector<float> full_score;  ///< lazily: the full control's token scores
};

class general_model {
 public:
  general_model() = default;
  /// The model of `op` (as given) for key width d, value width dv, raw window `window` and
  /// attention model `m`; parameters per m.params (seed params_seed for random ones).
  general_model(const compress::operator_spec& op, index_t d, index_t dv, index_t window, const model_config& m,
                std::uint64_t params_seed)
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
    rope_ = spec_.rope.anchor != compress::rope_anchor::none;
    if (rope_) freq_ = compress::rope_frequencies(spec_.rope, width_);
    geo_ = linear_model::full();
  }

  [[nodiscard]] const compress::operator_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] const model_config& model() const noexcept { return m_; }
  [[nodiscard]] const compress::pool_params<float>& params(index_t h = 0) const { return pk_.at(static_cast<std::size_t>(h)); }
  [[nodiscard]] index_t width() const noexcept { return width_; }
  [[nodiscard]] index_t value_dim() const noexcept { return dv_; }
  [[nodiscard]] bool shared_kv() const noexcept { return shared_; }
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
  void run(general_workspace& ws, index_t N, const float* q, double beta) const {
    const index_t H = spec_.heads;
    ws.full_scored = false;
    if (ws.q.rows() != 1 || ws.q.cols() != width_) ws.q.resize(1, width_);
    ws.q.setZero();
    std::copy(q, q + d_, ws.q.data() + (shared_ ? dvp_ : 0));
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
      attention::compressed_params cp{.window = window_, .compressed = true,
                                      .combine = m_.kind == model_kind::nsa ? attention::combine_mode::gated
                                                                            : attention::combine_mode::joint,
                                      .select_block = m_.select_block, .gate_cmp = m_.gate_cmp,
                                      .gate_slc = m_.gate_slc, .gate_win = m_.gate_win,
                                      .attn = {.scale = beta, .sink = sink, .threads = 1}};
      attention::index_lists lists;
      attention::compressed_selection<float> sel;
      const index_t nv = std::min(grid.num_visible(N - 1), E);
      it.entries.clear();
      it.raw.clear();
      if (m_.kind == model_kind::csa) {
        const matrix_t<float> w = matrix_t<float>::Ones(1, 1);
        lists = attention::csa_select<float>(ws.q, w, Kc, grid, pos,
                                             attention::indexer_params{.heads = 1, .top_k = m_.top_k});
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
        if (m_.gate_cmp == 0) it.entries.clear();
        if (m_.gate_slc == 0 || m_.gate_win == 0) {
          std::vector<index_t> keep;
          const auto nsel = it.raw.size();
          for (std::size_t i = 0; i < nsel; ++i) {
            const index_t t = it.raw[i];
            const bool in_win = t >= ws0;
            const bool in_sel = std::find(lists.indices.begin(), lists.indices.end(), t / m_.select_block) != lists.indices.end();
            if ((in_sel && m_.gate_slc > 0) || (in_win && m_.gate_win > 0)) keep.push_back(t);
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
    attention::full_attention<float>(ws.q, *raw, Vraw, std::span<const index_t>(pos, 1),
                                     attention::attention_params{.scale = beta, .sink = sink, .threads = 1}, ws.of);
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
    const matrix_t<float>& raw = ws.X;  // rotated in place by run() under RoPE
    const index_t N = ws.X.rows();
    if (!ws.full_scored) {
      ws.full_score.resize(static_cast<std::size_t>(N));
      attention::score_rows<float>(ws.q.data(), raw.data(), width_, N, width_, 1.0f, ws.full_score.data());
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
    for (index_t t = 0; t < N; ++t) {
      float* r = X + t * width_ + (width_ - freq_.rotated);
      const double* cs = tab.data() + 2 * t * P;
      for (index_t k = 0; k < P; ++k) {
        const double c = cs[2 * k], sn = cs[2 * k + 1];
        const double x0 = static_cast<double>(r[2 * k]), x1 = static_cast<double>(r[2 * k + 1]);
        r[2 * k] = static_cast<float>(x0 * c - x1 * sn);
        r[2 * k + 1] = static_cast<float>(x0 * sn + x1 * c);
      }
    }
  }

 private:
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
  linear_model geo_{};
  mutable std::vector<double> table_;  ///< RoPE cos/sin per (position, pair): one model per thread
};

}  // namespace kvphase::sim
