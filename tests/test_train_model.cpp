// Toy trainable model: hand-written gradients against central differences, the forward pass
// against an independent naive reference, Adam, the entropy penalty and input validation.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kvphase/train/adam.hpp"
#include "kvphase/train/model.hpp"
#include "kvphase/train/task.hpp"

using namespace kvphase;
using namespace kvphase::train;

namespace {

retrieval_task small_task() {
  return retrieval_task{.n_context = 14, .raw_window = 3, .n_keys = 12, .key_dim = 5, .n_values = 3,
                        .embed_seed = 3};
}

// Perturbs every parameter so gates are not at their (symmetric) initial values.
void jitter(model_params& p, index_t H, std::uint64_t seed) {
  rng::philox_stream s(seed, 17);
  p.for_each_tensor(H, [&](const std::string&, double* d, index_t n) {
    for (index_t i = 0; i < n; ++i) d[i] += 0.3 * s.normal();
  });
}

// Number of multiply-adds of one forward pass (for the rounding bound of the loss).
double forward_ops(const retrieval_task& t, const model_config& c) {
  const double d = double(t.model_dim()), n = double(t.n_context), dh = double(c.head_dim);
  const double per_head = n * d * (c.compressed() ? double(c.spec.grid.window) : 1.0) * 2.0 +
                          (n + double(t.raw_window)) * d * 2.0 + 4.0 * d * dh + 4.0 * n;
  return double(c.layers * c.heads()) * per_head + double(t.n_values) * d * 3.0 + double(c.blur.size()) * n * d;
}

struct fd_report {
  index_t checked = 0;
  double worst_ratio = 0.0;  // max |analytic − fd| / tolerance
  std::string worst_name;
};

// Central differences in double. For each coordinate θ_i: D(h) = (f(θ+h) − f(θ−h)) / 2h.
// Truncation error of D(h/2) ≈ |D(h) − D(h/2)| / 3 (Richardson, error ∝ h²); we allow the full
// |D(h) − D(h/2)|. Rounding: each loss evaluation has absolute error ≤ δ = N·u·F (N multiply-adds,
// u = eps/2, F the scale of the intermediate values), so D(h/2) has rounding error ≤ 2δ/h.
fd_report check_gradient(const retrieval_task& task, const model_config& cfg, model_params params,
                         const matrixd& x, const vectord& xq, index_t answer, const forward_options& fo,
                         double entropy_lambda = 0.0) {
  auto loss = [&](const model_params& p) {
    return forward_backward(task, cfg, p, x, xq, answer, fo).loss +
           gate_entropy_penalty(cfg, p, entropy_lambda, nullptr);
  };
  model_params g = params.zeros_like();
  const double f0 = forward_backward(task, cfg, params, x, xq, answer, fo, &g).loss +
                    gate_entropy_penalty(cfg, params, entropy_lambda, &g);
  std::vector<double*> gp;
  g.for_each_tensor(cfg.heads(), [&](const std::string&, double* d, index_t) { gp.push_back(d); });
  const double u = std::numeric_limits<double>::epsilon() / 2.0;
  const double scale = std::abs(f0) + 10.0;
  const double delta = forward_ops(task, cfg) * u * scale;
  const double h = 1e-4;
  fd_report rep;
  std::size_t k = 0;
  model_params work = params;
  std::vector<double*> wp;
  work.for_each_tensor(cfg.heads(), [&](const std::string&, double* d, index_t) { wp.push_back(d); });
  params.for_each_tensor(cfg.heads(), [&](const std::string& name, double* d, index_t n) {
    for (index_t i = 0; i < n; ++i) {
      auto central = [&](double step) {
        wp[k][i] = d[i] + step;
        const double fp = loss(work);
        wp[k][i] = d[i] - step;
        const double fm = loss(work);
        wp[k][i] = d[i];
        return (fp - fm) / (2.0 * step);
      };
      const double d1 = central(h);
      const double d2 = central(h / 2.0);
      const double tol = std::abs(d1 - d2) + 2.0 * delta / h;
      const double err = std::abs(gp[k][i] - d2);
      const double ratio = err / tol;
      if (ratio > rep.worst_ratio) {
        rep.worst_ratio = ratio;
        rep.worst_name = name + "[" + std::to_string(i) + "] analytic " + std::to_string(gp[k][i]) + " fd " +
                         std::to_string(d2) + " tol " + std::to_string(tol);
      }
      ++rep.checked;
    }
    ++k;
  });
  return rep;
}

// ---- independent naive reference of the forward loss (V4 grid convention written out) ----
double naive_loss(const retrieval_task& t, const model_config& c, const model_params& p, const matrixd& x,
                  const vectord& xq, index_t answer, index_t shift) {
  const index_t n = t.n_context, d = t.model_dim(), dh = c.head_dim, w = t.raw_window;
  const index_t W = c.spec.grid.window, S = c.spec.grid.stride;
  // blurred stream
  std::vector<std::vector<double>> xb(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(d), 0.0));
  const index_t a = static_cast<index_t>(c.blur.size()) / 2;
  for (index_t tt = 0; tt < n; ++tt)
    for (index_t ch = 0; ch < d; ++ch) {
      if (c.blur.empty()) {
        xb[tt][ch] = x(tt, ch);
        continue;
      }
      double s = 0;
      for (index_t i = 0; i < static_cast<index_t>(c.blur.size()); ++i) {
        const index_t src = tt + i - a;
        if (src >= 0 && src < n) s += c.blur[i] * x(src, ch);
      }
      xb[tt][ch] = s;
    }
  std::vector<double> r(xq.data(), xq.data() + d);
  for (index_t l = 0; l < c.layers; ++l) {
    std::vector<double> next = r;
    for (index_t h = 0; h < c.heads(); ++h) {
      const head_params& hp = p.heads[l * c.heads() + h];
      std::vector<std::vector<double>> mem;
      if (c.compressed()) {
        const index_t origin = c.spec.grid.origin + (c.spec.head_offsets.empty() ? 0 : c.spec.head_offsets[h]) + shift;
        // grid indices j from very negative to positive; entry pools [origin + jS − (W−S), origin + jS + S − 1]
        for (index_t j = -100; j < 100; ++j) {
          const index_t last = origin + j * S + S - 1, first = last - W + 1;
          if (last < 0 || last > n - 1) continue;
          std::vector<double> z, e(static_cast<std::size_t>(d), 0.0);
          std::vector<index_t> src;
          for (index_t q = std::max<index_t>(first, 0); q <= last; ++q) {
            double zz = 0;
            if (hp.slot_bias.size()) zz += hp.slot_bias[q - first];
            for (index_t ch = 0; ch < static_cast<index_t>(hp.content_gate.size()); ++ch) zz += hp.content_gate[ch] * xb[q][ch];
            z.push_back(zz);
            src.push_back(q);
          }
          double den = 0;
          for (double v : z) den += std::exp(v);
          for (std::size_t i = 0; i < z.size(); ++i)
            for (index_t ch = 0; ch < d; ++ch) e[ch] += std::exp(z[i]) / den * xb[src[i]][ch];
          mem.push_back(e);
        }
        for (index_t q = n - w; q < n; ++q) mem.emplace_back(x.row(q).data(), x.row(q).data() + d);
      } else {
        for (index_t q = 0; q < n; ++q) mem.emplace_back(x.row(q).data(), x.row(q).data() + d);
      }
      std::vector<double> q(static_cast<std::size_t>(dh), 0.0);
      for (index_t i = 0; i < dh; ++i)
        for (index_t ch = 0; ch < d; ++ch) q[i] += hp.wq(i, ch) * r[ch];
      std::vector<double> s;
      for (const auto& m : mem) {
        double v = 0;
        for (index_t i = 0; i < dh; ++i) {
          double k = 0;
          for (index_t ch = 0; ch < d; ++ch) k += hp.wk(i, ch) * m[ch];
          v += q[i] * k;
        }
        s.push_back(v / std::sqrt(double(dh)));
      }
      double den = 0;
      for (double v : s) den += std::exp(v);
      std::vector<double> o(static_cast<std::size_t>(dh), 0.0);
      for (std::size_t j = 0; j < mem.size(); ++j)
        for (index_t i = 0; i < dh; ++i) {
          double vv = 0;
          for (index_t ch = 0; ch < d; ++ch) vv += hp.wv(i, ch) * mem[j][ch];
          o[i] += std::exp(s[j]) / den * vv;
        }
      for (index_t ch = 0; ch < d; ++ch)
        for (index_t i = 0; i < dh; ++i) next[ch] += hp.wo(ch, i) * o[i];
    }
    r = next;
  }
  std::vector<double> z(static_cast<std::size_t>(t.n_values), 0.0);
  double den = 0;
  for (index_t v = 0; v < t.n_values; ++v) {
    for (index_t ch = 0; ch < d; ++ch) z[v] += p.unembed(v, ch) * r[ch];
    den += std::exp(z[v]);
  }
  return std::log(den) - z[answer];
}

struct model_case {
  std::string name;
  model_config cfg;
  index_t shift = 0;
};

std::vector<model_case> model_cases() {
  std::vector<model_case> cs;
  model_config base;
  base.spec.grid = {.window = 3, .stride = 3};
  base.spec.heads = 2;
  base.head_dim = 4;
  cs.push_back({"slot gate", base});
  model_config c = base;
  c.content_gate = true;
  c.layers = 2;
  cs.push_back({"content gate, 2 layers", c});
  c = base;
  c.spec.grid = {.window = 6, .stride = 3};
  c.spec.head_offsets = {0, 1};
  c.content_gate = true;
  cs.push_back({"overlap W=2S, shifted heads", c});
  c = base;
  c.blur = {0.25, 0.5, 0.25};
  c.content_gate = true;
  cs.push_back({"blur", c, 2});
  c = base;
  c.spec.pool = compress::pool_kind::mean;
  cs.push_back({"mean pool", c});
  c = base;
  c.cache = cache_kind::full;
  c.layers = 2;
  cs.push_back({"full attention", c});
  return cs;
}

}  // namespace

TEST_CASE("train: hand-written gradients match central differences", "[train]") {
  const retrieval_task task = small_task();
  const retrieval_data data(task);
  for (const auto& mc : model_cases()) {
    SECTION(mc.name) {
      model_params p = init_params(task, mc.cfg);
      jitter(p, mc.cfg.heads(), 5);
      rng::philox_stream s(11, 1);
      for (int rep = 0; rep < 2; ++rep) {
        const retrieval_example ex = data.sample(s);
        matrixd x;
        vectord xq;
        data.embed(ex, x, xq);
        forward_options fo;
        fo.origin_shift = mc.shift;
        const fd_report r = check_gradient(task, mc.cfg, p, x, xq, ex.answer(), fo);
        INFO(mc.name << ": worst " << r.worst_name);
        CHECK(r.checked == p.size());
        CHECK(r.worst_ratio <= 1.0);
      }
    }
  }
}

TEST_CASE("train: gradients with a knocked-out head and the entropy penalty", "[train]") {
  const retrieval_task task = small_task();
  const retrieval_data data(task);
  model_config cfg;
  cfg.spec.grid = {.window = 3, .stride = 3};
  cfg.layers = 2;
  cfg.head_dim = 3;
  model_params p = init_params(task, cfg);
  jitter(p, cfg.heads(), 9);
  rng::philox_stream s(12, 1);
  const retrieval_example ex = data.sample(s);
  matrixd x;
  vectord xq;
  data.embed(ex, x, xq);
  std::vector<double> scale = {1.0, 0.0, 0.5, 1.0};
  forward_options fo;
  fo.head_scale = &scale;
  const fd_report r = check_gradient(task, cfg, p, x, xq, ex.answer(), fo, 0.7);
  INFO("worst " << r.worst_name);
  CHECK(r.worst_ratio <= 1.0);
  // the knocked-out head receives no gradient through its output
  model_params g = p.zeros_like();
  forward_backward(task, cfg, p, x, xq, ex.answer(), fo, &g);
  CHECK(g.heads[1].wo.norm() == 0.0);
  CHECK(g.heads[1].slot_bias.norm() == 0.0);
}

TEST_CASE("train: forward loss equals an independent naive reference", "[train]") {
  const retrieval_task task = small_task();
  const retrieval_data data(task);
  for (const auto& mc : model_cases()) {
    SECTION(mc.name) {
      model_params p = init_params(task, mc.cfg);
      jitter(p, mc.cfg.heads(), 21);
      rng::philox_stream s(13, 2);
      for (int rep = 0; rep < 3; ++rep) {
        const retrieval_example ex = data.sample(s);
        matrixd x;
        vectord xq;
        data.embed(ex, x, xq);
        forward_options fo;
        fo.origin_shift = mc.shift;
        const double a = forward_backward(task, mc.cfg, p, x, xq, ex.answer(), fo).loss;
        const double b = naive_loss(task, mc.cfg, p, x, xq, ex.answer(), mc.shift);
        // both are sums of O(N) rounded terms of magnitude ≤ F: |a − b| ≤ 2 N u F
        const double bound = 2.0 * forward_ops(task, mc.cfg) * (std::numeric_limits<double>::epsilon() / 2.0) *
                              (std::abs(b) + 10.0);
        CHECK(std::abs(a - b) <= bound);
      }
    }
  }
}

TEST_CASE("train: slot gate profile and entropy penalty values", "[train]") {
  const retrieval_task task = small_task();
  model_config cfg;
  cfg.spec.grid = {.window = 4, .stride = 4};
  cfg.init_slot_bias_std = 0.0;
  model_params p = init_params(task, cfg);
  for (const auto& row : slot_gate_profile(cfg, p))
    for (double v : row) CHECK(v == Approx(0.25).epsilon(1e-15));
  CHECK(gate_entropy_penalty(cfg, p, 1.0, nullptr) == Approx(0.0).margin(1e-15));
  p.heads[0].slot_bias << 50.0, 0.0, 0.0, 0.0;  // one-hot gate: entropy ≈ 0, penalty ≈ log 4
  CHECK(gate_entropy_penalty(cfg, p, 2.0, nullptr) == Approx(2.0 * std::log(4.0)).epsilon(1e-12));
  cfg.cache = cache_kind::full;
  p = init_params(task, cfg);
  CHECK(gate_entropy_penalty(cfg, p, 1.0, nullptr) == 0.0);
  CHECK(slot_gate_profile(cfg, p)[0].empty());
}

TEST_CASE("train: Adam update follows the bias-corrected formula", "[train]") {
  const retrieval_task task = small_task();
  model_config cfg;
  cfg.spec.grid = {.window = 2, .stride = 2};
  model_params p = init_params(task, cfg);
  const model_params p0 = p;
  model_params g = p.zeros_like();
  rng::philox_stream s(4, 4);
  g.for_each_tensor(cfg.heads(), [&](const std::string&, double* d, index_t n) {
    for (index_t i = 0; i < n; ++i) d[i] = s.normal();
  });
  const adam_config ac{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  adam opt(p, cfg.heads(), ac);
  opt.step(p, g);
  // step 1: m̂ = g, v̂ = g², update = lr g / (|g| + eps)
  CHECK(p.unembed(0, 0) == Approx(p0.unembed(0, 0) - ac.lr * g.unembed(0, 0) / (std::abs(g.unembed(0, 0)) + ac.eps)).epsilon(1e-14));
  const double g1 = g.heads[1].slot_bias[1];
  CHECK(p.heads[1].slot_bias[1] == Approx(p0.heads[1].slot_bias[1] - ac.lr * g1 / (std::abs(g1) + ac.eps)).epsilon(1e-14));
  // step 2 with the same gradient: m = (1 − β1²)·g after correction = g, v̂ = g²: same move again
  const double before = p.heads[0].wq(0, 0), gq = g.heads[0].wq(0, 0);
  opt.step(p, g);
  CHECK(p.heads[0].wq(0, 0) == Approx(before - ac.lr * gq / (std::abs(gq) + ac.eps)).epsilon(1e-12));
  CHECK(opt.steps() == 2);
}

TEST_CASE("train: task sampler places one target key outside the raw window", "[train]") {
  const retrieval_task task{};
  const retrieval_data data(task);
  rng::philox_stream s(1, 2);
  std::vector<int> seen(static_cast<std::size_t>(task.target_end()), 0);
  for (int i = 0; i < 2000; ++i) {
    const retrieval_example ex = data.sample(s);
    REQUIRE(ex.target >= 0);
    REQUIRE(ex.target < task.n_context - task.raw_window);
    ++seen[static_cast<std::size_t>(ex.target)];
    int same = 0;
    for (index_t k : ex.keys) same += k == ex.keys[ex.target];
    REQUIRE(same == 1);
    for (index_t v : ex.values) REQUIRE((v >= 0 && v < task.n_values));
  }
  for (int c : seen) CHECK(c > 0);  // 2000 draws over 56 positions: P(some empty) < 56·e^−36
  matrixd x;
  vectord xq;
  rng::philox_stream s2(1, 3);
  const retrieval_example ex = data.sample(s2, 5);
  CHECK(ex.target == 5);
  data.embed(ex, x, xq);
  CHECK(x.rows() == task.n_context);
  CHECK(x.cols() == task.model_dim());
  CHECK(xq.head(task.key_dim).norm() == Approx(1.0).epsilon(1e-14));
  CHECK(xq.head(task.key_dim).isApprox(x.row(5).head(task.key_dim).transpose()));
  CHECK(x(5, task.key_dim + ex.answer()) == 1.0);
  // the same seed gives the same embedding table
  CHECK(retrieval_data(task).key_embedding() == data.key_embedding());
}

TEST_CASE("train: invalid configurations throw naming the parameter", "[train]") {
  const retrieval_task task = small_task();
  auto throws_with = [&](model_config c, const std::string& what) {
    try {
      c.validate(task);
      FAIL("no throw for " << what);
    } catch (const kvphase::error& e) {
      CHECK_THAT(e.what(), Catch::Contains(what));
    }
  };
  model_config c;
  c.layers = 0;
  throws_with(c, "layers");
  c = {};
  c.head_dim = 0;
  throws_with(c, "head_dim");
  c = {};
  c.spec.pool = compress::pool_kind::max;
  throws_with(c, "spec.pool");
  c = {};
  c.blur = {0.5, 0.5};
  throws_with(c, "blur.size()");
  c = {};
  c.blur = {0.5, std::nan(""), 0.5};
  throws_with(c, "blur[1]");
  c = {};
  c.spec.rmsnorm = true;
  throws_with(c, "spec.rmsnorm");
  c = {};
  c.spec.pool = compress::pool_kind::mean;
  c.content_gate = true;
  throws_with(c, "content_gate");
  c = {};
  c.spec.grid = {.window = 16, .stride = 16};  // n = 14: no complete entry
  throws_with(c, "spec.grid");
  c = {};
  c.spec.grid = {.window = 2, .stride = 4};
  throws_with(c, "window");
  c = {};
  c.init_slot_bias_std = -1;
  throws_with(c, "init_slot_bias_std");

  auto task_throws = [](retrieval_task t, const std::string& what) {
    try {
      t.validate();
      FAIL("no throw for " << what);
    } catch (const kvphase::error& e) {
      CHECK_THAT(e.what(), Catch::Contains(what));
    }
  };
  task_throws({.n_context = 1}, "n_context");
  task_throws({.n_context = 8, .raw_window = 8}, "raw_window");
  task_throws({.n_keys = 1}, "n_keys");
  task_throws({.key_dim = 0}, "key_dim");
  task_throws({.n_values = 1}, "n_values");
  const retrieval_data data(task);
  rng::philox_stream s(1, 1);
  CHECK_THROWS_AS(data.sample(s, task.target_end()), kvphase::error);
  CHECK_THROWS_AS(adam_config{.lr = -1}.validate(), kvphase::error);
  CHECK_THROWS_AS(adam_config{.beta1 = 1.0}.validate(), kvphase::error);
  CHECK_THROWS_AS(adam_config{.eps = 0}.validate(), kvphase::error);
}
