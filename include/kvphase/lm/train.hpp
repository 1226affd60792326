#pragma once
/// \file lm/train.hpp
/// Training and per-phase evaluation of lm/model.hpp on lm/data.hpp sequences: AdamW on the
/// next-token cross-entropy at the query positions (the only predictable tokens), evaluation on
/// a separate split, gate slot profiles of every compressed layer at each evaluation.

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/lm/data.hpp"
#include "kvphase/lm/model.hpp"

namespace kvphase::lm {

struct train_config {
  index_t steps = 2000;
  index_t batch = 32;
  double lr = 3e-3;
  double weight_decay = 0.01;
  index_t warmup = 100;          ///< linear warmup steps, then cosine decay to lr / 10
  double grad_clip = 1.0;
  index_t eval_every = 250;      ///< steps between history snapshots (0: only at the end)
  index_t eval_sequences = 1024; ///< evaluation sequences (split 1)
  int threads = 1;               ///< torch intra-op threads
  /// Random grid offset: every training sequence's compressor grids are shifted by an offset
  /// drawn uniformly from [0, S) (origin_offsets); evaluation keeps the model's own origins.
  bool random_origin = false;
  /// λ of the gate-entropy term: loss = cross-entropy + λ · mean over gated compressed layers of
  /// the mean Σ_r a_r·log a_r of their gate softmax (compressor_impl::neg_entropy). 0: off.
  double gate_entropy = 0.0;
  /// Early stop at a matched accuracy: training ends after the first snapshot (every
  /// eval_every steps) whose eval recall is ≥ stop_recall; the learning-rate schedule is still
  /// the one of `steps`, so a run that stops is the `steps`-step run cut short. 0: off.
  double stop_recall = 0.0;
  /// Weight of the indexers' KL term (attention_impl::indexer_kl, mean over the layers with an
  /// indexer) in the loss; it trains only the indexers. Used when the model has model_config::top_k > 0.
  double indexer_weight = 1.0;
  /// Seed of the data — the training batches, the random grid offsets and the evaluation
  /// sequences — apart from the model's initialisation; -1: the run's seed for both (the
  /// default). Crossing the two separates what a seed changes: the start or the data order.
  std::int64_t data_seed = -1;
  void validate() const {
    require(steps >= 1 && steps <= 10000000, "steps", steps, "must be in [1, 10^7]");
    require(batch >= 1 && batch <= 65536, "batch", batch, "must be in [1, 65536]");
    require(std::isfinite(lr) && lr > 0.0 && lr < 1.0, "lr", lr, "must be in (0, 1)");
    require(std::isfinite(weight_decay) && weight_decay >= 0.0, "weight_decay", weight_decay, "must be >= 0");
    require(warmup >= 0, "warmup", warmup, "must be >= 0");
    require(std::isfinite(grad_clip) && grad_clip > 0.0, "grad_clip", grad_clip, "must be > 0");
    require(eval_every >= 0, "eval_every", eval_every, "must be >= 0");
    require(eval_sequences >= 1 && eval_sequences <= 1 << 24, "eval_sequences", eval_sequences, "must be in [1, 2^24]");
    require(threads >= 1 && threads <= 1024, "threads", threads, "must be in [1, 1024]");
    require(std::isfinite(gate_entropy) && gate_entropy >= 0.0 && gate_entropy <= 100.0, "gate_entropy", gate_entropy,
            "must be in [0, 100]");
    require(std::isfinite(stop_recall) && stop_recall >= 0.0 && stop_recall <= 1.0, "stop_recall", stop_recall,
            "must be in [0, 1] (0: off)");
    require(std::isfinite(indexer_weight) && indexer_weight >= 0.0 && indexer_weight <= 100.0, "indexer_weight",
            indexer_weight, "must be in [0, 100]");
    require(data_seed >= -1, "data_seed", data_seed, "must be >= 0, or -1 for the run's seed");
    require(stop_recall == 0.0 || eval_every > 0, "stop_recall", stop_recall,
            "needs snapshots to test it at (eval_every > 0)");
  }
  template <class V>
  void visit_fields(V&& v) {
    v("steps", steps);
    v("batch", batch);
    v("lr", lr);
    v("weight_decay", weight_decay);
    v("warmup", warmup);
    v("grad_clip", grad_clip);
    v("eval_every", eval_every);
    v("eval_sequences", eval_sequences);
    v("threads", threads, fields::not_keyed);
    v("random_origin", random_origin);
    v("gate_entropy", gate_entropy);
    v("stop_recall", stop_recall);
    v("indexer_weight", indexer_weight);
    v("data_seed", data_seed);
  }
  /// The seed the data of a run with seed `seed` comes from.
  [[nodiscard]] std::uint64_t data_seed_for(std::uint64_t seed) const noexcept {
    return data_seed >= 0 ? static_cast<std::uint64_t>(data_seed) : seed;
  }
};

/// The content-free slot preference of one gated compressor: per slot, the mean over channels
/// of the softmax over slots of its position bias.
struct gate_profile {
  index_t layer = 0;
  index_t head = -1;  ///< -1: the layer's compressor; h ≥ 0: query head h's (model_config::shift_heads)
  std::vector<double> weight;  ///< W values (the compressor's window)
};

/// One snapshot of training.
struct snapshot {
  index_t step = 0;
  double train_loss = 0.0;  ///< mean over the steps since the previous snapshot
  double eval_loss = 0.0;
  double eval_recall = 0.0;
  double indexer_kl = 0.0;  ///< mean indexer KL term over the steps since the previous snapshot (0: no indexer)
  /// one per gated compressor (layers in order, then heads); none for full / uniform layers
  std::vector<gate_profile> slot_profile;
};

struct train_result {
  std::vector<snapshot> history;
  phase_counts eval;      ///< final evaluation
  double seconds = 0.0;   ///< training wall time (evaluations excluded)
  double cpu_seconds = 0.0;  ///< CPU time of this process during the training steps
  double tokens = 0.0;    ///< training tokens processed
  double macs = 0.0;      ///< forward multiply-adds of the training steps (lm::forward_macs)
  index_t steps_done = 0; ///< steps trained: train_config::steps, or fewer after a stop_recall stop
};

/// Counter-based stream id of the grid offsets (distinct from the data splits 0 and 1).
inline constexpr std::uint64_t origin_split = 0x6f726967696eULL;

/// Grid offsets of training sequences first … first + B − 1, uniform on [0, stride): sequence i's
/// offset is the first draw of philox_stream(seed, combine(origin_split, i)), so it does not
/// depend on the batch it is in, and the data streams are untouched.
inline torch::Tensor origin_offsets(std::uint64_t seed, std::uint64_t first, index_t B, index_t stride) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(B));
  for (index_t b = 0; b < B; ++b) {
    rng::philox_stream s(seed, rng::combine(origin_split, first + static_cast<std::uint64_t>(b)));
    v[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(s.below(static_cast<std::uint64_t>(stride)));
  }
  return torch::from_blob(v.data(), {B}, torch::kLong).clone();
}

/// CPU seconds used so far by this process (all threads).
inline double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Per-phase evaluation on split 1 (optionally with one head or layer knocked out).
inline phase_counts evaluate(lm& model, const data_config& d, std::uint64_t seed, index_t sequences,
                             index_t knock_layer = -1, index_t knock_head = -1) {
  torch::NoGradGuard ng;
  model->eval();
  phase_counts pc;
  pc.resize(d.modulus);
  const index_t B = 64;
  for (index_t s = 0; s < sequences; s += B) {
    const index_t n = std::min(B, sequences - s);
    const auto b = make_batch(d, seed, 1, static_cast<std::uint64_t>(s), n);
    count(pc, d, query_logits(model->forward(b.tokens, knock_layer, knock_head), b), b);
  }
  model->train();
  return pc;
}

/// Where the queries' attention goes (attention_readout), summed over the queries of one
/// (layer, head, phase group, outcome) cell. A row is what a query attends: a compressed entry or
/// a raw token (every row of a full layer is a token). For a query whose pair has its key at
/// position k and its value at k + 1, a row "holds the key" when k is among its tokens (an
/// entry's unmasked source tokens), "holds the value" likewise, and "holds the pair" when both.
struct readout_cell {
  std::int64_t queries = 0;
  double key = 0.0, value = 0.0, pair = 0.0;  ///< Σ over queries of the attention mass on such rows
  /// the query's largest-weight row holds: both tokens, the key only, the value only, neither
  std::int64_t top_pair = 0, top_key = 0, top_value = 0, top_neither = 0;
};

/// Readout cells of every layer and head: cell(l, h, g, hit) (hit: the query was answered right).
struct attention_readout_result {
  index_t layers = 0, heads = 0, modulus = 0;
  std::vector<layer_kind> kinds;
  std::vector<readout_cell> cells;  ///< [layer][head][group][miss, hit]
  [[nodiscard]] readout_cell& cell(index_t l, index_t h, index_t g, bool hit) {
    return cells[static_cast<std::size_t>(((l * heads + h) * modulus + g) * 2 + (hit ? 1 : 0))];
  }
  [[nodiscard]] const readout_cell& cell(index_t l, index_t h, index_t g, bool hit) const {
    return cells[static_cast<std::size_t>(((l * heads + h) * modulus + g) * 2 + (hit ? 1 : 0))];
  }
};

/// The attention of each query (the position whose logits predict the value) in every layer
/// and head of the evaluation split (the sequences of evaluate()), by the rows that hold its
/// pair's key and value tokens: the question of which compressed entry, if any, a query reads
/// its answer from. NSA layers are refused (their three branches have no single weight per row).
inline attention_readout_result attention_readout(lm& model, const data_config& d, std::uint64_t seed,
                                                  index_t sequences) {
  d.validate();
  require(sequences >= 1, "sequences", sequences, "must be >= 1");
  attention_readout_result r;
  r.kinds = model->kinds;
  for (std::size_t l = 0; l < r.kinds.size(); ++l)
    require(r.kinds[l] != layer_kind::nsa, "layer " + std::to_string(l), to_string(r.kinds[l]),
            "attention readout needs one weight per attended row; an NSA layer has three branches");
  r.layers = static_cast<index_t>(r.kinds.size());
  r.heads = model->cfg.heads;
  r.modulus = d.modulus;
  r.cells.assign(static_cast<std::size_t>(r.layers * r.heads * r.modulus * 2), readout_cell{});
  torch::NoGradGuard ng;
  model->eval();
  for (auto& b : model->model->blocks) b->self_attn->keep = true;
  const index_t B = 64;
  for (index_t s = 0; s < sequences; s += B) {
    const index_t n = std::min(B, sequences - s);
    const auto b = make_batch(d, seed, 1, static_cast<std::uint64_t>(s), n);
    const auto hit = query_logits(model->forward(b.tokens), b).argmax(-1).eq(b.target).contiguous();
    const index_t BQ = static_cast<index_t>(b.key_position.size());
    std::vector<std::int64_t> kpos(b.key_position.begin(), b.key_position.end());
    const auto kp = torch::from_blob(kpos.data(), {BQ, 1, 1, 1}, torch::kLong).clone();
    for (index_t l = 0; l < r.layers; ++l) {
      const auto& a = model->model->blocks[static_cast<std::size_t>(l)]->self_attn;
      const auto P = a->kept_p.permute({0, 2, 1, 3}).index({b.rows, b.at});  // [BQ, H, K]
      const auto& rows = a->kept_rows;                                          // [R, 1 or H, K, W]
      const auto rq = rows.size(0) == 1 ? rows.expand({BQ, rows.size(1), rows.size(2), rows.size(3)})
                                        : rows.index({b.rows});
      const auto hk = rq.eq(kp).any(-1).expand({BQ, r.heads, P.size(2)});      // [BQ, H, K]
      const auto hv = rq.eq(kp + 1).any(-1).expand({BQ, r.heads, P.size(2)});
      const auto hp = hk.logical_and(hv);
      const auto mk = (P * hk).sum(-1).to(torch::kFloat64).contiguous();      // [BQ, H]
      const auto mv = (P * hv).sum(-1).to(torch::kFloat64).contiguous();
      const auto mp = (P * hp).sum(-1).to(torch::kFloat64).contiguous();
      const auto top = P.argmax(-1, true);
      const auto tk = hk.gather(-1, top).squeeze(-1).contiguous(), tv = hv.gather(-1, top).squeeze(-1).contiguous();
      const auto* hk_ = tk.data_ptr<bool>();
      const auto* hv_ = tv.data_ptr<bool>();
      const auto* ok = hit.data_ptr<bool>();
      for (index_t q = 0; q < BQ; ++q) {
        const index_t g = b.key_position[static_cast<std::size_t>(q)] % d.modulus;
        for (index_t h = 0; h < r.heads; ++h) {
          readout_cell& c = r.cell(l, h, g, ok[q]);
          const index_t i = q * r.heads + h;
          ++c.queries;
          c.key += mk.data_ptr<double>()[i];
          c.value += mv.data_ptr<double>()[i];
          c.pair += mp.data_ptr<double>()[i];
          const bool k = hk_[i], v = hv_[i];
          (k && v ? c.top_pair : k ? c.top_key : v ? c.top_value : c.top_neither) += 1;
        }
      }
    }
  }
  for (auto& b : model->model->blocks) {
    b->self_attn->keep = false;
    b->self_attn->kept_p = torch::Tensor();
    b->self_attn->kept_rows = torch::Tensor();
  }
  model->train();
  return r;
}

/// Slot preference of each gated compressor (see gate_profile).
inline std::vector<gate_profile> slot_profiles(lm& model) {
  torch::NoGradGuard ng;
  std::vector<gate_profile> out;
  for (std::size_t l = 0; l < model->model->blocks.size(); ++l) {
    const auto& a = model->model->blocks[l]->self_attn;
    for (std::size_t h = 0; h < a->comps.size(); ++h) {
      const auto& cp = a->comps[h];
      if (!cp->position_bias.defined()) continue;
      const index_t W = cp->window, C = model->cfg.head_dim;
      auto pb = cp->position_bias.detach();
      torch::Tensor slots;  // [W, c]
      if (cp->kind == layer_kind::csa)
        slots = torch::cat({pb.narrow(1, 0, C), pb.narrow(1, C, C)}, 0);  // rows 0..S-1 stream a, S..2S-1 stream b
      else
        slots = pb;
      auto p = torch::softmax(slots, 0).mean(1).to(torch::kFloat64).contiguous();
      gate_profile g;
      g.layer = static_cast<index_t>(l);
      g.head = model->cfg.shift_heads ? static_cast<index_t>(h) : -1;
      for (index_t r = 0; r < W; ++r) g.weight.push_back(p[r].item<double>());
      out.push_back(std::move(g));
    }
  }
  return out;
}

/// Trains a fresh model of `mc` with torch seed `seed`; data from the same seed, or from
/// tc.data_seed when it is set (train_config::data_seed_for). `progress`
/// (optional) is called after every step with (step, steps, running loss).
inline train_result train(const model_config& mc, const data_config& d, const train_config& tc, std::uint64_t seed,
                          const std::function<void(index_t, index_t, double)>& progress = {},
                          lm* trained = nullptr) {
  mc.validate();
  d.validate();
  tc.validate();
  require(mc.vocab == d.vocab(), "vocab", mc.vocab, "must equal the data's vocabulary " + std::to_string(d.vocab()));
  {
    bool compressed = false, gated = false;
    for (layer_kind k : mc.layers()) {
      compressed = compressed || k != layer_kind::full;
      gated = gated || k == layer_kind::csa || k == layer_kind::gated || k == layer_kind::nsa;
    }
    require(!tc.random_origin || compressed, "random_origin", tc.random_origin,
            "needs a compressed layer in the schedule " + mc.schedule);
    require(tc.gate_entropy == 0.0 || gated, "gate_entropy", tc.gate_entropy,
            "needs a gated layer (csa or gated) in the schedule " + mc.schedule);
  }
  torch::set_num_threads(tc.threads);
  torch::manual_seed(seed);
  const std::uint64_t dseed = tc.data_seed_for(seed);
  lm model(mc);
  std::vector<compressor> tracked;  // gated compressors whose gate entropy enters the loss
  if (tc.gate_entropy > 0.0)
    for (auto& b : model->model->blocks)
      for (auto& cp : b->self_attn->comps)
        if (cp->gate_proj) {
          cp->track_entropy = true;
          tracked.push_back(cp);
        }
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(tc.lr).weight_decay(tc.weight_decay));
  train_result r;
  const double step_macs = forward_macs(mc, tc.batch, d.length());
  double run = 0.0, run_kl = 0.0;
  index_t since = 0;
  std::vector<attention> indexed;  // layers with an indexer
  for (auto& b : model->model->blocks)
    if (b->self_attn->idx) indexed.push_back(b->self_attn);
  auto snap = [&](index_t step) {
    snapshot s;
    s.step = step;
    s.train_loss = since ? run / static_cast<double>(since) : 0.0;
    s.indexer_kl = since ? run_kl / static_cast<double>(since) : 0.0;
    const auto pc = evaluate(model, d, dseed, std::min<index_t>(tc.eval_sequences, 256));
    s.eval_loss = pc.mean_loss();
    s.eval_recall = pc.mean_recall();
    s.slot_profile = slot_profiles(model);
    r.history.push_back(std::move(s));
    run = 0.0;
    run_kl = 0.0;
    since = 0;
  };
  const double pi = 3.14159265358979323846;
  for (index_t step = 0; step < tc.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    double lr = tc.lr;
    if (step < tc.warmup) lr = tc.lr * static_cast<double>(step + 1) / static_cast<double>(tc.warmup);
    else {
      const double f = static_cast<double>(step - tc.warmup) / static_cast<double>(std::max<index_t>(1, tc.steps - tc.warmup));
      lr = tc.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(pi * f)));
    }
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    const auto b = make_batch(d, dseed, 0, static_cast<std::uint64_t>(step * tc.batch), tc.batch);
    const auto first = static_cast<std::uint64_t>(step * tc.batch);
    torch::Tensor offsets;
    if (tc.random_origin) offsets = origin_offsets(dseed, first, tc.batch, mc.stride);
    auto ce =
        torch::nn::functional::cross_entropy(query_logits(model->forward(b.tokens, -1, -1, offsets), b), b.target);
    auto loss = ce;
    if (!tracked.empty()) {
      auto ne = tracked.front()->neg_entropy;
      for (std::size_t i = 1; i < tracked.size(); ++i) ne = ne + tracked[i]->neg_entropy;
      loss = loss + tc.gate_entropy * ne / static_cast<double>(tracked.size());
    }
    double kl = 0.0;
    if (!indexed.empty()) {
      auto t = indexed.front()->indexer_kl;
      for (std::size_t i = 1; i < indexed.size(); ++i) t = t + indexed[i]->indexer_kl;
      t = t / static_cast<double>(indexed.size());
      kl = t.item<double>();
      if (tc.indexer_weight > 0.0) loss = loss + tc.indexer_weight * t;
    }
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), tc.grad_clip);
    opt.step();
    const double l = ce.item<double>();  // the query cross-entropy (without the entropy term)
    r.cpu_seconds += cpu_now() - c0;
    r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokens += static_cast<double>(tc.batch * d.length());
    r.macs += step_macs;
    run += l;
    run_kl += kl;
    ++since;
    if (progress) progress(step + 1, tc.steps, l);
    r.steps_done = step + 1;
    if (step == 0 || (tc.eval_every > 0 && (step + 1) % tc.eval_every == 0)) {
      snap(step + 1);
      if (tc.stop_recall > 0.0 && r.history.back().eval_recall >= tc.stop_recall) break;
    }
  }
  if (r.history.empty() || r.history.back().step != r.steps_done) snap(r.steps_done);
  r.eval = evaluate(model, d, dseed, tc.eval_sequences);
  if (trained) *trained = model;
  return r;
}

}  // namespace kvphase::lm
