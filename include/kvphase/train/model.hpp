#pragma once
/// \file train/model.hpp
/// A small trainable retrieval model over a chunked-compressed cache, with hand-written gradients.
///
/// Shapes (d = model_dim of the task, dh = head_dim, H heads per layer, L layers, n context
/// tokens, w raw window, V = n_values):
///  - Context X (n × d, fixed embeddings; never updated by the model). An optional fixed low-pass
///    kernel κ (odd length 2a+1) gives X̃_t = Σ_i κ_i X_{t+i−a} (zero outside [0, n)); pooling reads
///    X̃, the raw window reads X.
///  - Compressed cache of head h (grid = spec.head_grid(h), origin shifted by an optional training
///    offset): entry e pools its unmasked sources p with gate weights
///        α_{e,p} = softmax_p( b_{slot(p)} + u·X̃_p ),   P_e = Σ_p α_{e,p} X̃_p   (d),
///    b ∈ R^W the learned slot bias of the head, u ∈ R^d the optional learned content gate. Only
///    complete entries (last source ≤ n − 1) exist. The head's memory is M = [P_0 … P_{E−1};
///    X_{n−w} … X_{n−1}] (m × d): one joint softmax over compressed entries and the raw window.
///  - Full-attention control: M = X (every token raw), no gates; everything else identical.
///  - Layer l reads the residual r_l (d), r_0 = x_q (the query embedding). Head h:
///        q = W_q r_l (dh),  s = M W_kᵀ q / √dh (m),  π = softmax(s),  o = W_v Mᵀ π (dh),
///        y = W_o o (d);      r_{l+1} = r_l + Σ_h c_{l,h} y_{l,h}
///    with c_{l,h} = 1 (0 knocks the head out in ablations). Keys and values are projections of
///    the pooled inputs (pooling commutes with the linear projections).
///  - Logits z = U r_L (V), loss = −log softmax(z)_answer.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/spec.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/types.hpp"
#include "kvphase/train/task.hpp"

namespace kvphase::train {

enum class cache_kind { compressed, full };

inline const char* to_string(cache_kind c) noexcept { return c == cache_kind::compressed ? "compressed" : "full"; }

/// Architecture of the toy model. Aggregate with defaults.
struct model_config {
  /// The default operator: W = S = 4, learned slot gates, 2 heads.
  static compress::operator_spec default_spec() {
    compress::operator_spec s;
    s.grid.window = 4;
    s.grid.stride = 4;
    s.pool = compress::pool_kind::slot_gate;
    s.heads = 2;
    return s;
  }

  cache_kind cache = cache_kind::compressed;
  /// Compression operator (grid, per-head offsets, heads). pool must be slot_gate (learned slot
  /// bias, initialised from spec.slot_bias when given) or mean (fixed uniform gate). heads is used
  /// by the full-attention control too.
  compress::operator_spec spec = default_spec();
  index_t layers = 1;
  index_t head_dim = 16;
  bool content_gate = false;         ///< learned content gate u per head (slot_gate only)
  std::vector<double> blur;          ///< low-pass kernel applied before pooling (odd length; empty = none)
  double init_slot_bias_std = 0.1;   ///< std of the random slot-bias initialisation (symmetry breaking)
  std::uint64_t init_seed = 1;

  [[nodiscard]] index_t heads() const noexcept { return spec.heads; }
  [[nodiscard]] bool compressed() const noexcept { return cache == cache_kind::compressed; }
  [[nodiscard]] bool learned_gate() const noexcept {
    return compressed() && spec.pool == compress::pool_kind::slot_gate;
  }

  void validate(const retrieval_task& task) const {
    task.validate();
    require(layers >= 1 && layers <= 8, "layers", layers, "must be in [1, 8]");
    require(head_dim >= 1 && head_dim <= 1024, "head_dim", head_dim, "must be in [1, 1024]");
    require(spec.heads >= 1 && spec.heads <= 64, "spec.heads", spec.heads, "must be in [1, 64]");
    require(std::isfinite(init_slot_bias_std) && init_slot_bias_std >= 0.0, "init_slot_bias_std",
            init_slot_bias_std, "must be finite and >= 0");
    if (!compressed()) return;
    spec.validate();
    require(spec.pool == compress::pool_kind::slot_gate || spec.pool == compress::pool_kind::mean,
            "spec.pool", compress::to_string(spec.pool), "the trainable model supports slot_gate and mean");
    require(!spec.rmsnorm, "spec.rmsnorm", spec.rmsnorm, "not supported by the trainable model");
    require(spec.rope.anchor == compress::rope_anchor::none, "spec.rope.anchor",
            compress::to_string(spec.rope.anchor), "the trainable model is NoPE");
    require(spec.content_std == 0.0, "spec.content_std", spec.content_std,
            "random content logits are not used; set content_gate for a learned one");
    require(!content_gate || spec.pool == compress::pool_kind::slot_gate, "content_gate", content_gate,
            "needs spec.pool = slot_gate");
    require(blur.empty() || blur.size() % 2 == 1, "blur.size()", blur.size(), "must be odd (centred kernel)");
    require(blur.size() <= 63, "blur.size()", blur.size(), "must be <= 63");
    require_finite(blur, "blur");
    for (index_t h = 0; h < spec.heads; ++h) {
      const compress::chunk_grid g = spec.head_grid(h);
      require(g.num_entries(task.n_context) >= 1, "spec.grid", g.window,
              "every head needs at least one complete entry in the context");
    }
  }

  friend std::ostream& operator<<(std::ostream& os, const model_config& c) {
    os << "model_config{cache=" << to_string(c.cache) << ", layers=" << c.layers << ", heads=" << c.heads()
       << ", head_dim=" << c.head_dim;
    if (c.compressed()) {
      os << ", " << c.spec << ", content_gate=" << (c.content_gate ? "true" : "false") << ", blur=[";
      for (std::size_t i = 0; i < c.blur.size(); ++i) os << (i ? "," : "") << c.blur[i];
      os << "]";
    }
    return os << ", init_slot_bias_std=" << c.init_slot_bias_std << ", init_seed=" << c.init_seed << "}";
  }
};

/// Parameters of one head of one layer.
struct head_params {
  matrixd wq;            ///< dh × d
  matrixd wk;            ///< dh × d
  matrixd wv;            ///< dh × d
  matrixd wo;            ///< d × dh
  vectord slot_bias;     ///< W (empty unless the gate is learned)
  vectord content_gate;  ///< d (empty unless content_gate)
};

/// All parameters. heads[l * H + h] is head h of layer l.
struct model_params {
  std::vector<head_params> heads;
  matrixd unembed;  ///< V × d

  /// Calls f(name, data, size) for every tensor in a fixed order (names like "l0.h1.wq").
  template <class F>
  void for_each_tensor(index_t heads_per_layer, F&& f) {
    for (std::size_t i = 0; i < heads.size(); ++i) {
      const std::string p = "l" + std::to_string(static_cast<index_t>(i) / heads_per_layer) + ".h" +
                            std::to_string(static_cast<index_t>(i) % heads_per_layer) + ".";
      head_params& hp = heads[i];
      f(p + "wq", hp.wq.data(), static_cast<index_t>(hp.wq.size()));
      f(p + "wk", hp.wk.data(), static_cast<index_t>(hp.wk.size()));
      f(p + "wv", hp.wv.data(), static_cast<index_t>(hp.wv.size()));
      f(p + "wo", hp.wo.data(), static_cast<index_t>(hp.wo.size()));
      if (hp.slot_bias.size()) f(p + "slot_bias", hp.slot_bias.data(), static_cast<index_t>(hp.slot_bias.size()));
      if (hp.content_gate.size())
        f(p + "content_gate", hp.content_gate.data(), static_cast<index_t>(hp.content_gate.size()));
    }
    f(std::string("unembed"), unembed.data(), static_cast<index_t>(unembed.size()));
  }

  /// Total number of scalar parameters.
  [[nodiscard]] index_t size() const {
    index_t s = unembed.size();
    for (const auto& hp : heads)
      s += hp.wq.size() + hp.wk.size() + hp.wv.size() + hp.wo.size() + hp.slot_bias.size() + hp.content_gate.size();
    return s;
  }

  /// Same shapes, all zero.
  [[nodiscard]] model_params zeros_like() const {
    model_params z;
    z.heads.reserve(heads.size());
    for (const auto& hp : heads) {
      head_params q;
      q.wq.setZero(hp.wq.rows(), hp.wq.cols());
      q.wk.setZero(hp.wk.rows(), hp.wk.cols());
      q.wv.setZero(hp.wv.rows(), hp.wv.cols());
      q.wo.setZero(hp.wo.rows(), hp.wo.cols());
      q.slot_bias.setZero(hp.slot_bias.size());
      q.content_gate.setZero(hp.content_gate.size());
      z.heads.push_back(std::move(q));
    }
    z.unembed.setZero(unembed.rows(), unembed.cols());
    return z;
  }
};

/// Seeded initialisation: projections N(0, 1/fan_in), slot bias = spec.slot_bias (or 0) plus
/// N(0, init_slot_bias_std²), content gate 0.
inline model_params init_params(const retrieval_task& task, const model_config& cfg) {
  cfg.validate(task);
  const index_t d = task.model_dim(), dh = cfg.head_dim, H = cfg.heads(), W = cfg.spec.grid.window;
  rng::philox_stream s(cfg.init_seed, rng::hash_text("kvphase.train.init"));
  auto fill = [&](matrixd& m, index_t rows, index_t cols, double sd) {
    m.resize(rows, cols);
    for (index_t i = 0; i < m.size(); ++i) m.data()[i] = sd * s.normal();
  };
  model_params p;
  for (index_t l = 0; l < cfg.layers; ++l) {
    for (index_t h = 0; h < H; ++h) {
      head_params hp;
      fill(hp.wq, dh, d, 1.0 / std::sqrt(double(d)));
      fill(hp.wk, dh, d, 1.0 / std::sqrt(double(d)));
      fill(hp.wv, dh, d, 1.0 / std::sqrt(double(d)));
      fill(hp.wo, d, dh, 1.0 / std::sqrt(double(dh)));
      if (cfg.learned_gate()) {
        hp.slot_bias.resize(W);
        for (index_t r = 0; r < W; ++r) {
          const double b0 = cfg.spec.slot_bias.empty() ? 0.0 : cfg.spec.slot_bias[static_cast<std::size_t>(r)];
          hp.slot_bias[r] = b0 + cfg.init_slot_bias_std * s.normal();
        }
        if (cfg.content_gate) hp.content_gate.setZero(d);
      }
      p.heads.push_back(std::move(hp));
    }
  }
  fill(p.unembed, task.n_values, d, 1.0 / std::sqrt(double(d)));
  return p;
}

/// Options of one forward pass.
struct forward_options {
  index_t origin_shift = 0;                    ///< added to every head's grid origin (training offset)
  const std::vector<double>* head_scale = nullptr;  ///< c_{l,h} (size L·H); nullptr = all 1
};

/// Outcome of one forward pass.
struct forward_result {
  double loss = 0.0;       ///< −log p(answer)
  index_t predicted = -1;  ///< argmax of the logits (lowest index on ties)
  double margin = 0.0;     ///< logit(answer) − max other logit
  [[nodiscard]] bool hit(index_t answer) const noexcept { return predicted == answer; }
};

/// Reusable per-thread buffers of forward_backward (avoid re-allocation across examples).
struct model_workspace {
  struct head_state {
    matrixd mem;                        // m × d
    index_t n_pooled = 0;               // first n_pooled rows of mem are pooled entries
    std::vector<index_t> src_first;     // per pooled entry: first unmasked source
    std::vector<index_t> src_slot0;     // per pooled entry: slot of that source
    std::vector<index_t> src_count;     // per pooled entry: number of unmasked sources
    std::vector<double> alpha;          // concatenated gate weights of all entries
    std::vector<index_t> alpha_offset;  // per pooled entry: offset into alpha
    vectord q, kq, prob, mp, o;
  };
  std::vector<head_state> heads;
  std::vector<vectord> residual;  // r_0 … r_L
  matrixd x_blur;
  vectord logits, dlogits, dr, dr_next, dmp, dkq, dq, ds, dprob, dmem_row;
};

namespace detail {

/// Applies the low-pass kernel along tokens: X̃_t = Σ_i κ_i X_{t+i−a}, zero outside [0, n).
inline void apply_blur(const std::vector<double>& kernel, const matrixd& x, matrixd& out) {
  const index_t n = x.rows(), a = static_cast<index_t>(kernel.size()) / 2;
  out.setZero(x.rows(), x.cols());
  for (index_t t = 0; t < n; ++t)
    for (index_t i = 0; i < static_cast<index_t>(kernel.size()); ++i) {
      const index_t src = t + i - a;
      if (src >= 0 && src < n) out.row(t) += kernel[static_cast<std::size_t>(i)] * x.row(src);
    }
}

}  // namespace detail

/// One forward pass on context X (n × d) and query x_q; when `grad` is non-null, adds the
/// gradient of the loss with respect to every parameter to *grad (which must have the shapes of
/// `params`). Parameters and inputs are not validated here (train/evaluate validate once).
inline forward_result forward_backward(const retrieval_task& task, const model_config& cfg,
                                       const model_params& params, const matrixd& x, const vectord& xq,
                                       index_t answer, const forward_options& opt, model_params* grad,
                                       model_workspace& ws) {
  const index_t n = task.n_context, d = task.model_dim(), H = cfg.heads(), L = cfg.layers;
  const index_t w = task.raw_window;
  // shapes and the answer index, once per call (the loops below index with them unchecked)
  // (messages built only on failure: this runs once per training example)
  if (x.rows() != n || x.cols() != d)
    fail("x.rows()", x.rows(), "x must be n_context × model_dim = " + std::to_string(n) + " × " + std::to_string(d));
  if (xq.size() != d) fail("xq.size()", xq.size(), "must be model_dim = " + std::to_string(d));
  if (answer < 0 || answer >= task.n_values)
    fail("answer", answer, "must be in [0, n_values = " + std::to_string(task.n_values) + ")");
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
  const bool comp = cfg.compressed();
  const bool gate = cfg.learned_gate();
  const matrixd* xp = &x;
  if (comp && !cfg.blur.empty()) {
    detail::apply_blur(cfg.blur, x, ws.x_blur);
    xp = &ws.x_blur;
  }
  const matrixd& xt = *xp;  // stream entering the pool

  // ---- memories (depend on gate parameters only, one per layer and head) ----
  ws.heads.resize(static_cast<std::size_t>(L * H));
  for (index_t l = 0; l < L; ++l) {
    for (index_t h = 0; h < H; ++h) {
      auto& st = ws.heads[static_cast<std::size_t>(l * H + h)];
      const head_params& hp = params.heads[static_cast<std::size_t>(l * H + h)];
      if (!comp) {
        st.mem = x;
        st.n_pooled = 0;
        continue;
      }
      compress::chunk_grid g = cfg.spec.head_grid(h);
      g.origin += opt.origin_shift;
      const index_t E = g.num_entries(n);
      st.n_pooled = E;
      st.mem.resize(E + w, d);
      st.src_first.resize(static_cast<std::size_t>(E));
      st.src_slot0.resize(static_cast<std::size_t>(E));
      st.src_count.resize(static_cast<std::size_t>(E));
      st.alpha_offset.resize(static_cast<std::size_t>(E));
      st.alpha.clear();
      for (index_t e = 0; e < E; ++e) {
        const compress::token_range r = g.sources(e);
        const index_t first = std::max<index_t>(r.first, 0);
        const index_t cnt = r.last - first + 1;
        st.src_first[static_cast<std::size_t>(e)] = first;
        st.src_slot0[static_cast<std::size_t>(e)] = first - r.first;
        st.src_count[static_cast<std::size_t>(e)] = cnt;
        st.alpha_offset[static_cast<std::size_t>(e)] = static_cast<index_t>(st.alpha.size());
        // gate logits → softmax over the unmasked sources
        double mx = -std::numeric_limits<double>::infinity();
        for (index_t i = 0; i < cnt; ++i) {
          double z = 0.0;
          if (gate) {
            z = hp.slot_bias[first - r.first + i];
            if (hp.content_gate.size()) z += xt.row(first + i).dot(hp.content_gate.transpose());
          }
          st.alpha.push_back(z);
          mx = std::max(mx, z);
        }
        double sum = 0.0;
        const index_t off = st.alpha_offset[static_cast<std::size_t>(e)];
        for (index_t i = 0; i < cnt; ++i) {
          double& a = st.alpha[static_cast<std::size_t>(off + i)];
          a = std::exp(a - mx);
          sum += a;
        }
        st.mem.row(e).setZero();
        for (index_t i = 0; i < cnt; ++i) {
          double& a = st.alpha[static_cast<std::size_t>(off + i)];
          a /= sum;
          st.mem.row(e) += a * xt.row(first + i);
        }
      }
      if (w > 0) st.mem.bottomRows(w) = x.bottomRows(w);
    }
  }

  // ---- query stream ----
  ws.residual.resize(static_cast<std::size_t>(L + 1));
  ws.residual[0] = xq;
  for (index_t l = 0; l < L; ++l) {
    const vectord& r = ws.residual[static_cast<std::size_t>(l)];
    vectord next = r;
    for (index_t h = 0; h < H; ++h) {
      auto& st = ws.heads[static_cast<std::size_t>(l * H + h)];
      const head_params& hp = params.heads[static_cast<std::size_t>(l * H + h)];
      st.q.noalias() = hp.wq * r;
      st.kq.noalias() = hp.wk.transpose() * st.q;
      st.prob.noalias() = st.mem * st.kq;
      st.prob *= inv_sqrt;
      const double mx = st.prob.maxCoeff();
      st.prob = (st.prob.array() - mx).exp();
      st.prob /= st.prob.sum();
      st.mp.noalias() = st.mem.transpose() * st.prob;
      st.o.noalias() = hp.wv * st.mp;
      const double c = opt.head_scale ? (*opt.head_scale)[static_cast<std::size_t>(l * H + h)] : 1.0;
      if (c != 0.0) next.noalias() += c * (hp.wo * st.o);
    }
    ws.residual[static_cast<std::size_t>(l + 1)] = std::move(next);
  }
  ws.logits.noalias() = params.unembed * ws.residual[static_cast<std::size_t>(L)];
  forward_result res;
  {
    const double mx = ws.logits.maxCoeff();
    const double lse = mx + std::log((ws.logits.array() - mx).exp().sum());
    res.loss = lse - ws.logits[answer];
    index_t best = 0;
    for (index_t v = 1; v < ws.logits.size(); ++v)
      if (ws.logits[v] > ws.logits[best]) best = v;
    res.predicted = best;
    double other = -std::numeric_limits<double>::infinity();
    for (index_t v = 0; v < ws.logits.size(); ++v)
      if (v != answer) other = std::max(other, ws.logits[v]);
    res.margin = ws.logits[answer] - other;
    if (!grad) return res;
    ws.dlogits = (ws.logits.array() - lse).exp();
    ws.dlogits[answer] -= 1.0;
  }

  // ---- backward ----
  grad->unembed.noalias() += ws.dlogits * ws.residual[static_cast<std::size_t>(L)].transpose();
  ws.dr.noalias() = params.unembed.transpose() * ws.dlogits;  // dL/dr_L
  for (index_t l = L - 1; l >= 0; --l) {
    const vectord& r = ws.residual[static_cast<std::size_t>(l)];
    ws.dr_next = ws.dr;  // residual path: dL/dr_l starts with dL/dr_{l+1}
    for (index_t h = 0; h < H; ++h) {
      auto& st = ws.heads[static_cast<std::size_t>(l * H + h)];
      const head_params& hp = params.heads[static_cast<std::size_t>(l * H + h)];
      head_params& gp = grad->heads[static_cast<std::size_t>(l * H + h)];
      const double c = opt.head_scale ? (*opt.head_scale)[static_cast<std::size_t>(l * H + h)] : 1.0;
      if (c == 0.0) continue;
      // y = W_o o, contribution c·y
      const vectord dy = c * ws.dr;
      gp.wo.noalias() += dy * st.o.transpose();
      const vectord dout = hp.wo.transpose() * dy;
      // o = W_v mp
      gp.wv.noalias() += dout * st.mp.transpose();
      ws.dmp.noalias() = hp.wv.transpose() * dout;
      // mp = Mᵀ π  →  dπ = M dmp ; s → π softmax
      ws.dprob.noalias() = st.mem * ws.dmp;
      const double pd = st.prob.dot(ws.dprob);
      ws.ds = st.prob.array() * (ws.dprob.array() - pd);
      // s = M kq / √dh
      ws.dkq.noalias() = st.mem.transpose() * ws.ds;
      ws.dkq *= inv_sqrt;
      // kq = W_kᵀ q
      gp.wk.noalias() += st.q * ws.dkq.transpose();
      ws.dq.noalias() = hp.wk * ws.dkq;
      // q = W_q r
      gp.wq.noalias() += ws.dq * r.transpose();
      ws.dr_next.noalias() += hp.wq.transpose() * ws.dq;
      // gates: dM_e = π_e dmp + ds_e kq / √dh for pooled rows
      if (gate) {
        for (index_t e = 0; e < st.n_pooled; ++e) {
          ws.dmem_row = st.prob[e] * ws.dmp + (ws.ds[e] * inv_sqrt) * st.kq;
          const index_t first = st.src_first[static_cast<std::size_t>(e)];
          const index_t slot0 = st.src_slot0[static_cast<std::size_t>(e)];
          const index_t cnt = st.src_count[static_cast<std::size_t>(e)];
          const index_t off = st.alpha_offset[static_cast<std::size_t>(e)];
          double mean_da = 0.0;
          for (index_t i = 0; i < cnt; ++i)
            mean_da += st.alpha[static_cast<std::size_t>(off + i)] * xt.row(first + i).dot(ws.dmem_row.transpose());
          for (index_t i = 0; i < cnt; ++i) {
            const double a = st.alpha[static_cast<std::size_t>(off + i)];
            const double dz = a * (xt.row(first + i).dot(ws.dmem_row.transpose()) - mean_da);
            gp.slot_bias[slot0 + i] += dz;
            if (gp.content_gate.size()) gp.content_gate.noalias() += dz * xt.row(first + i).transpose();
          }
        }
      }
    }
    ws.dr = ws.dr_next;
  }
  return res;
}

/// Convenience overload with its own workspace.
inline forward_result forward_backward(const retrieval_task& task, const model_config& cfg,
                                       const model_params& params, const matrixd& x, const vectord& xq,
                                       index_t answer, const forward_options& opt = {},
                                       model_params* grad = nullptr) {
  model_workspace ws;
  return forward_backward(task, cfg, params, x, xq, answer, opt, grad, ws);
}

/// Content-independent gate profile of every head: softmax(b) over the W slots
/// (result[l·H + h][slot]). Uniform 1/W for the mean pool; empty rows for the full control.
inline std::vector<std::vector<double>> slot_gate_profile(const model_config& cfg, const model_params& p) {
  std::vector<std::vector<double>> out;
  for (const auto& hp : p.heads) {
    std::vector<double> row;
    if (cfg.compressed()) {
      const index_t W = cfg.spec.grid.window;
      row.assign(static_cast<std::size_t>(W), 1.0 / static_cast<double>(W));
      if (hp.slot_bias.size()) {
        const double mx = hp.slot_bias.maxCoeff();
        double s = 0.0;
        for (index_t r = 0; r < W; ++r) s += (row[static_cast<std::size_t>(r)] = std::exp(hp.slot_bias[r] - mx));
        for (auto& v : row) v /= s;
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

/// Gate-entropy penalty λ Σ_{l,h} (log W − H(softmax(b_{l,h}))) ≥ 0 (pushes every head's slot gate
/// toward uniform); adds its gradient to *grad when non-null. 0 for models without learned gates.
inline double gate_entropy_penalty(const model_config& cfg, const model_params& p, double lambda,
                                   model_params* grad) {
  if (!cfg.learned_gate() || lambda == 0.0) return 0.0;
  const index_t W = cfg.spec.grid.window;
  double total = 0.0;
  const auto prof = slot_gate_profile(cfg, p);
  for (std::size_t i = 0; i < prof.size(); ++i) {
    double ent = 0.0;
    for (double a : prof[i]) ent -= a > 0.0 ? a * std::log(a) : 0.0;
    total += lambda * (std::log(static_cast<double>(W)) - ent);
    if (grad) {
      // d(−H)/db_r = α_r (log α_r + H)
      for (index_t r = 0; r < W; ++r) {
        const double a = prof[i][static_cast<std::size_t>(r)];
        grad->heads[i].slot_bias[r] += lambda * (a > 0.0 ? a * (std::log(a) + ent) : 0.0);
      }
    }
  }
  return total;
}

}  // namespace kvphase::train
