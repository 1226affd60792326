// Multi-head attention and the toy model against naive double-precision references written here
// (RoPE, indexer top-k, NSA block selection, joint/gated softmax, sinks, K = V with the output
// rotated back); determinism, causality of the whole model, bad configurations.
#include <catch2/catch.hpp>

#include <kvphase/attention/model.hpp>
#include <kvphase/attention/multihead.hpp>
#include <kvphase/compress/pool.hpp>
#include <kvphase/core/simd.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "support/attention_reference.hpp"

using kvphase::index_t;
using kvphase::matrix_t;
using kvphase::matrixd;
namespace att = kvphase::attention;
namespace cmp = kvphase::compress;
namespace simd = kvphase::simd;
namespace kt = kvphase::test;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();

/// Naive RoPE: the last R channels (R = rope_dim or all) rotate in adjacent pairs by
/// pos·θ^(−2k/R).
void naive_rope(double* x, index_t dim, double pos, const cmp::rope_config& r) {
  if (r.anchor == cmp::rope_anchor::none) return;
  const index_t R = r.rope_dim > 0 ? r.rope_dim : dim;
  const index_t off = dim - R;
  for (index_t k = 0; k < R / 2; ++k) {
    const double a = pos * std::pow(r.theta, -2.0 * double(k) / double(R));
    const double x0 = x[off + 2 * k], x1 = x[off + 2 * k + 1];
    x[off + 2 * k] = x0 * std::cos(a) - x1 * std::sin(a);
    x[off + 2 * k + 1] = x0 * std::sin(a) + x1 * std::cos(a);
  }
}

/// Softmax attention over explicit key/value rows with a sink (−∞ = none); empty → 0.
std::vector<double> naive_attend(const double* q, index_t d, const std::vector<const double*>& ks,
                                 const std::vector<const double*>& vs, index_t dv, double sink) {
  std::vector<double> o(static_cast<std::size_t>(dv), 0.0);
  if (ks.empty()) return o;
  std::vector<double> s(ks.size());
  double m = sink;
  for (std::size_t j = 0; j < ks.size(); ++j) {
    double a = 0;
    for (index_t c = 0; c < d; ++c) a += q[c] * ks[j][c];
    s[j] = a / std::sqrt(double(d));
    m = std::max(m, s[j]);
  }
  double l = std::isfinite(sink) ? std::exp(sink - m) : 0.0;
  for (auto& v : s) {
    v = std::exp(v - m);
    l += v;
  }
  for (std::size_t j = 0; j < ks.size(); ++j)
    for (index_t c = 0; c < dv; ++c) o[static_cast<std::size_t>(c)] += s[j] / l * vs[j][c];
  return o;
}

std::vector<index_t> naive_top(const std::vector<double>& s, const std::vector<index_t>& ids, index_t k) {
  std::vector<std::size_t> ord(s.size());
  std::iota(ord.begin(), ord.end(), std::size_t(0));
  std::stable_sort(ord.begin(), ord.end(), [&](std::size_t a, std::size_t b) { return s[a] > s[b]; });
  std::vector<index_t> out;
  for (std::size_t i = 0; i < ord.size() && static_cast<index_t>(out.size()) < k; ++i) out.push_back(ids[ord[i]]);
  std::sort(out.begin(), out.end());
  return out;
}

/// Independent reference of toy_model<double>::forward using the model's weights.
matrixd reference_forward(const att::toy_model<double>& model, const matrixd& X) {
  const auto& cfg = model.config();
  const index_t N = X.rows(), H = cfg.heads, Hkv = cfg.kv_heads, dh = cfg.head_dim, grp = H / Hkv;
  matrixd Hs = X;
  for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
    const auto& L = cfg.layers[l];
    const auto& w = model.weights()[l];
    matrixd Xn = Hs;
    for (index_t t = 0; t < N; ++t) {
      double ss = 0;
      for (index_t c = 0; c < Xn.cols(); ++c) ss += Xn(t, c) * Xn(t, c);
      Xn.row(t) /= std::sqrt(ss / double(Xn.cols()) + 1e-6);
    }
    matrixd Q = Xn * w.wq, K = Xn * w.wk, V = cfg.shared_kv ? matrixd() : matrixd(Xn * w.wv);
    const cmp::chunk_grid g = L.op.grid;
    const index_t E = L.ratio >= 2 ? g.num_entries(N) : 0;
    matrixd Kc(E, Hkv * dh), Vc(E, Hkv * dh);
    for (index_t kh = 0; kh < Hkv && E > 0; ++kh) {
      const matrixd kp = K.middleCols(kh * dh, dh);
      Kc.middleCols(kh * dh, dh) = cmp::compress<double, simd::scalar>(L.op, w.pool_k[static_cast<std::size_t>(kh)], kp);
      if (cfg.shared_kv) continue;
      const matrixd vp = V.middleCols(kh * dh, dh);
      Vc.middleCols(kh * dh, dh) = cmp::compress<double, simd::scalar>(L.op, w.pool_v[static_cast<std::size_t>(kh)], vp);
    }
    if (cfg.shared_kv) Vc = Kc;
    for (index_t t = 0; t < N; ++t) {
      for (index_t h = 0; h < H; ++h) naive_rope(Q.row(t).data() + h * dh, dh, double(t), cfg.rope);
      for (index_t h = 0; h < Hkv; ++h) naive_rope(K.row(t).data() + h * dh, dh, double(t), cfg.rope);
    }
    if (cfg.shared_kv) V = K;
    // CSA indexer
    std::vector<std::vector<index_t>> csa(static_cast<std::size_t>(N));
    if (L.ratio >= 2 && L.top_k > 0 && E > 0) {
      const index_t HI = cfg.indexer_heads, dI = cfg.indexer_dim;
      const matrixd QI = Xn * w.wqi, WI = Xn * w.wwi / std::sqrt(double(HI));
      const matrixd XI = Xn * w.wki;
      const matrixd KI = cmp::compress<double, simd::scalar>(L.op, w.pool_i, XI);
      for (index_t t = 0; t < N; ++t) {
        std::vector<double> s;
        std::vector<index_t> ids;
        for (index_t e = 0; e < E; ++e) {
          if (!g.visible(e, t)) continue;
          double v = 0;
          for (index_t hi = 0; hi < HI; ++hi) {
            double dot = 0;
            for (index_t c = 0; c < dI; ++c) dot += QI(t, hi * dI + c) * KI(e, c);
            v += WI(t, hi) * std::max(dot / std::sqrt(double(dI)), 0.0);
          }
          s.push_back(v);
          ids.push_back(e);
        }
        csa[static_cast<std::size_t>(t)] = naive_top(s, ids, L.top_k);
      }
    }
    matrixd O = matrixd::Zero(N, H * dh);
    for (index_t t = 0; t < N; ++t) {
      for (index_t h = 0; h < H; ++h) {
        const index_t kh = h / grp;
        const double* q = Q.row(t).data() + h * dh;
        auto krow = [&](const matrixd& M, index_t r) { return M.row(r).data() + kh * dh; };
        std::vector<const double*> kc, vc, ks, vs, kw, vw;
        const index_t ws = std::max<index_t>(0, t - cfg.window + 1);
        if (L.ratio == 1) {
          for (index_t u = 0; u <= t; ++u) kw.push_back(krow(K, u)), vw.push_back(krow(V, u));
        } else {
          for (index_t u = ws; u <= t; ++u) kw.push_back(krow(K, u)), vw.push_back(krow(V, u));
        }
        if (L.ratio >= 2) {
          if (L.top_k > 0) {
            for (index_t e : csa[static_cast<std::size_t>(t)]) kc.push_back(krow(Kc, e)), vc.push_back(krow(Vc, e));
          } else {
            for (index_t e = 0; e < E; ++e)
              if (g.visible(e, t)) kc.push_back(krow(Kc, e)), vc.push_back(krow(Vc, e));
          }
          if (L.select_top_n > 0) {
            // NSA: probabilities summed over the group, importance by token overlap, top-n blocks
            const index_t B = L.select_block, nb = t / B + 1;
            std::vector<double> imp(static_cast<std::size_t>(nb), 0.0);
            for (index_t hh = kh * grp; hh < (kh + 1) * grp; ++hh) {
              std::vector<const double*> kv;
              std::vector<index_t> ids;
              for (index_t e = 0; e < E; ++e)
                if (g.visible(e, t)) kv.push_back(krow(Kc, e)), ids.push_back(e);
              if (kv.empty()) continue;
              std::vector<double> s(kv.size());
              double m = -inf, z = 0;
              for (std::size_t j = 0; j < kv.size(); ++j) {
                double a = 0;
                for (index_t c = 0; c < dh; ++c) a += Q(t, hh * dh + c) * kv[j][c];
                s[j] = a / std::sqrt(double(dh));
                m = std::max(m, s[j]);
              }
              for (auto& v : s) z += (v = std::exp(v - m));
              for (std::size_t j = 0; j < kv.size(); ++j) {
                const auto r = g.sources(ids[j]);
                for (index_t b = 0; b < nb; ++b) {
                  const index_t lo = std::max(r.first, b * B), hi = std::min(r.last, b * B + B - 1);
                  if (hi >= lo) imp[static_cast<std::size_t>(b)] += s[j] / z * double(hi - lo + 1) / double(g.stride);
                }
              }
            }
            std::set<index_t> chosen{0};
            for (index_t b = std::max<index_t>(0, nb - 2); b < nb; ++b) chosen.insert(b);
            std::vector<double> fs;
            std::vector<index_t> fid;
            for (index_t b = 0; b < nb; ++b)
              if (!chosen.count(b)) fs.push_back(imp[static_cast<std::size_t>(b)]), fid.push_back(b);
            for (index_t b : naive_top(fs, fid, L.select_top_n - static_cast<index_t>(chosen.size()))) chosen.insert(b);
            for (index_t b : chosen)
              for (index_t u = b * B; u < b * B + B && u <= t; ++u) {
                if (L.combine == att::combine_mode::joint && u >= ws) continue;
                ks.push_back(krow(K, u)), vs.push_back(krow(V, u));
              }
          }
        }
        std::vector<double> o;
        if (L.combine == att::combine_mode::joint || L.ratio < 2) {
          std::vector<const double*> ka = kc, va = vc;
          ka.insert(ka.end(), ks.begin(), ks.end());
          va.insert(va.end(), vs.begin(), vs.end());
          ka.insert(ka.end(), kw.begin(), kw.end());
          va.insert(va.end(), vw.begin(), vw.end());
          o = naive_attend(q, dh, ka, va, dh, cfg.sink);
        } else {
          double gate[3];
          for (int c = 0; c < 3; ++c) {
            double z = 0;
            for (index_t i = 0; i < Xn.cols(); ++i) z += Xn(t, i) * w.wg(i, 3 * h + c);
            gate[c] = 1.0 / (1.0 + std::exp(-z));
          }
          const auto oc = naive_attend(q, dh, kc, vc, dh, cfg.sink);
          const auto os = naive_attend(q, dh, ks, vs, dh, cfg.sink);
          const auto ow = naive_attend(q, dh, kw, vw, dh, cfg.sink);
          o.assign(static_cast<std::size_t>(dh), 0.0);
          for (index_t c = 0; c < dh; ++c) {
            const auto cc = static_cast<std::size_t>(c);
            o[cc] = gate[0] * oc[cc] + (L.select_top_n > 0 ? gate[1] * os[cc] : 0.0) + gate[2] * ow[cc];
          }
        }
        if (cfg.shared_kv) naive_rope(o.data(), dh, -double(t), cfg.rope);
        for (index_t c = 0; c < dh; ++c) O(t, h * dh + c) = o[static_cast<std::size_t>(c)];
      }
    }
    Hs += O * w.wo;
  }
  return Hs;
}
}  // namespace

TEST_CASE("toy model presets match the naive double reference", "[attention][model]") {
  for (auto name : att::toy_preset_names) {
    auto cfg = att::toy_preset(name, 5);
    const index_t N = name == "v4_flash_toy" ? 300 : 150;
    if (name == "v4_flash_toy") cfg.layers.resize(4);  // 0, 0, CSA, HCA: every layer kind once
    const att::toy_model<double> model(cfg);
    const matrixd X = kt::random_matrix<double>(N, cfg.d_model, 7u);
    const matrixd got = model.forward(X);
    const matrixd ref = reference_forward(model, X);
    // double throughout: differences are rounding only; scale by the hidden-state magnitude and
    // the work per output (N keys of dh products per layer)
    const double u = std::numeric_limits<double>::epsilon() / 2;
    const double tol = double(cfg.layers.size()) * double(N + cfg.d_model + 64) * 64 * u * ref.cwiseAbs().maxCoeff();
    INFO(cfg << " max diff " << (got - ref).cwiseAbs().maxCoeff() << " tol " << tol);
    CHECK((got - ref).cwiseAbs().maxCoeff() <= tol);
    // the layers do something: the output moved away from the input
    CHECK((got - X).cwiseAbs().maxCoeff() > 1e-3);
  }
}

TEST_CASE("toy model is causal, deterministic across threads, float and double", "[attention][model]") {
  for (auto name : att::toy_preset_names) {
    auto cfg = att::toy_preset(name, 9);
    const index_t N = 140;
    if (name == "v4_flash_toy") cfg.layers.resize(4);
    cfg.threads = 1;
    const att::toy_model<float> m1(cfg);
    cfg.threads = 2;
    const att::toy_model<float> m2(cfg);
    const matrix_t<float> X = kt::random_matrix<float>(N, cfg.d_model, 3u);
    const matrix_t<float> H1 = m1.forward(X), H2 = m2.forward(X);
    INFO(cfg.name);
    CHECK((H1.array() == H2.array()).all());
    CHECK(H1.allFinite());
    for (index_t u : {17, 64, 100, 139}) {
      matrix_t<float> Xp = X;
      Xp.row(u).array() += 1.5f;
      const matrix_t<float> Hp = m1.forward(Xp);
      for (index_t t = 0; t < N; ++t) {
        if (t < u) {
          INFO("perturbed u=" << u << " t=" << t);
          CHECK((Hp.row(t).array() == H1.row(t).array()).all());
        }
      }
      CHECK((Hp.row(u) - H1.row(u)).cwiseAbs().maxCoeff() > 0.0f);
    }
    const att::toy_model<double> md(cfg);
    const matrixd Hd = md.forward(X.cast<double>());
    CHECK(Hd.allFinite());
  }
  auto cfg = att::paper_ref_toy();
  cfg.readout_dim = 10;
  const att::toy_model<double> m(cfg);
  const matrixd X = kt::random_matrix<double>(20, 64, 1u);
  const matrixd Y = m.readout(m.forward(X));
  CHECK(Y.rows() == 20);
  CHECK(Y.cols() == 10);
  const matrixd Z = m.forward(X) * m.readout_weights();
  CHECK((Z.array() == Y.array()).all());
}

TEST_CASE("toy model configurations are validated", "[attention][model]") {
  auto bad = [](auto mutate, const char* what) {
    auto cfg = att::paper_ref_toy();
    mutate(cfg);
    CHECK_THROWS_WITH(att::toy_model<double>(cfg), Catch::Contains(what));
  };
  bad([](auto& c) { c.d_model = 0; }, "d_model");
  bad([](auto& c) { c.kv_heads = 3; }, "kv_heads");
  bad([](auto& c) { c.layers.clear(); }, "layers.size()");
  bad([](auto& c) { c.layers[0].ratio = 4; }, "layers[0].op.grid.stride");
  bad([](auto& c) { c.layers[1].ratio = -1; }, "layers[1].ratio");
  bad([](auto& c) { c.sink = inf; }, "sink");
  bad([](auto& c) { c.window = 0, c.layers[0].ratio = 0; }, "layers[0].ratio");
  bad([](auto& c) { c.layers[0].select_top_n = 2; }, "layers[0].select_top_n");
  bad([](auto& c) { c.rope.rope_dim = 3; }, "rope.rope_dim");
  CHECK_THROWS_WITH(att::toy_preset("nope"), Catch::Contains("preset"));
  const att::toy_model<double> m(att::paper_ref_toy());
  CHECK_THROWS_WITH(m.forward(matrixd::Zero(4, 3)), Catch::Contains("X.cols()"));
  matrixd Xn = matrixd::Zero(4, 64);
  Xn(2, 5) = std::nan("");
  CHECK_THROWS_WITH(m.forward(Xn), Catch::Contains("X["));
}

TEMPLATE_TEST_CASE("multi-head attention (GQA, per-head sinks and gates) matches per-head references",
                   "[attention][multihead]", float, double) {
  using Real = TestType;
  const index_t N = 40, H = 4, Hkv = 2, dh = 7, dv = 5;
  const auto Q = kt::random_matrix<Real>(N, H * dh, 201u, 2.0);
  const auto K = kt::random_matrix<Real>(N, Hkv * dh, 202u);
  const auto V = kt::random_matrix<Real>(N, Hkv * dv, 203u);
  const cmp::chunk_grid g{.window = 4, .stride = 4};
  const index_t E = g.num_entries(N);
  const auto Kc = kt::random_matrix<Real>(E, Hkv * dh, 204u);
  const auto Vc = kt::random_matrix<Real>(E, Hkv * dv, 205u);
  const att::multihead_config mh{.heads = H, .kv_heads = Hkv, .head_dim = dh, .value_dim = dv,
                                 .sinks = {-inf, 0.0, 1.0, -2.0},
                                 .gates = {1, 0.5, 0.2, 0.3, 1, 1, 0.9, 0.1, 0.4, 0.0, 1, 2}};
  for (auto mode : {att::combine_mode::joint, att::combine_mode::gated}) {
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      matrix_t<Real> O(N, H * dv);
      att::multihead_attention<Real, Arch>(Q, {}, Kc, Vc, g, K, V, mh, att::compressed_params{.window = 6, .combine = mode}, O);
      for (index_t h = 0; h < H; ++h) {
        const index_t kh = h / 2;
        matrix_t<Real> Oh(N, dv);
        const matrix_t<Real> Qh = Q.middleCols(h * dh, dh), Kh = K.middleCols(kh * dh, dh),
                             Vh = V.middleCols(kh * dv, dv), Kch = Kc.middleCols(kh * dh, dh),
                             Vch = Vc.middleCols(kh * dv, dv);
        att::compressed_params p{.window = 6, .combine = mode, .gate_cmp = mh.gates[3 * h],
                                 .gate_slc = mh.gates[3 * h + 1], .gate_win = mh.gates[3 * h + 2],
                                 .attn = {.sink = mh.sinks[static_cast<std::size_t>(h)]}};
        att::compressed_attention<Real, Arch>(Qh, {}, Kch, Vch, g, Kh, Vh, p, Oh);
        INFO("arch " << simd::arch_name<Arch>() << " head " << h << " mode " << att::to_string(mode));
        // same call on contiguous copies: bitwise equal
        CHECK((O.middleCols(h * dv, dv).array() == Oh.array()).all());
        // and the joint case against the double reference
        if (mode == att::combine_mode::joint) {
          const matrixd Kd = Kh.template cast<double>(), Vd = Vh.template cast<double>();
          const matrixd Kcd = Kch.template cast<double>(), Vcd = Vch.template cast<double>();
          for (index_t t = 0; t < N; ++t) {
            std::vector<double> q(static_cast<std::size_t>(dh));
            for (index_t c = 0; c < dh; ++c) q[static_cast<std::size_t>(c)] = Qh(t, c);
            std::vector<const double*> ks, vs;
            for (index_t e = 0; e < E; ++e)
              if (g.visible(e, t)) ks.push_back(Kcd.row(e).data()), vs.push_back(Vcd.row(e).data());
            for (index_t u = std::max<index_t>(0, t - 5); u <= t; ++u) ks.push_back(Kd.row(u).data()), vs.push_back(Vd.row(u).data());
            const auto r = kt::reference_attend(q, ks, vs, dv, double(att::default_scale<Real>(dh)),
                                                mh.sinks[static_cast<std::size_t>(h)],
                                                std::numeric_limits<Real>::epsilon() / 2, 4);
            for (index_t c = 0; c < dv; ++c)
              CHECK(std::fabs(double(O(t, h * dv + c)) - r.o[static_cast<std::size_t>(c)]) <= r.bound[static_cast<std::size_t>(c)]);
          }
        }
      }
      // full multi-head attention = per-head full attention
      matrix_t<Real> F(N, H * dv);
      att::multihead_full_attention<Real, Arch>(Q, {}, K, V, mh, att::attention_params{}, F);
      for (index_t h = 0; h < H; ++h) {
        matrix_t<Real> Fh(N, dv);
        const matrix_t<Real> Qh = Q.middleCols(h * dh, dh), Kh = K.middleCols(h / 2 * dh, dh), Vh = V.middleCols(h / 2 * dv, dv);
        att::full_attention<Real, Arch>(Qh, Kh, Vh, att::attention_params{.sink = mh.sinks[static_cast<std::size_t>(h)]}, Fh);
        CHECK((F.middleCols(h * dv, dv).array() == Fh.array()).all());
      }
    });
  }
  matrix_t<Real> O(N, H * dv);
  CHECK_THROWS_WITH(att::multihead_attention<Real>(Q, {}, Kc, Vc, g, K, V, att::multihead_config{.heads = 4, .kv_heads = 2, .head_dim = 6, .value_dim = dv},
                                                   att::compressed_params{}, O),
                    Catch::Contains("Q.cols()"));
  CHECK_THROWS_WITH((att::multihead_config{.heads = 4, .sinks = {1.0}}.validate()), Catch::Contains("sinks.size()"));
  CHECK_THROWS_WITH((att::multihead_config{.heads = 2, .gates = {1, 1, 1, 1, 1, std::nan("")}}.validate()),
                    Catch::Contains("gates[5]"));
}

TEST_CASE("RoPE on queries and keys makes scores depend on relative position only, NoPE is a no-op",
          "[attention][multihead]") {
  const index_t dh = 8;
  const cmp::rope_config r{.anchor = cmp::rope_anchor::start, .theta = 10000.0, .rope_dim = 6};
  const matrixd q0 = kt::random_matrix<double>(1, dh, 1u), k0 = kt::random_matrix<double>(1, dh, 2u);
  auto score = [&](index_t tq, index_t tk) {
    matrixd q = q0, k = k0;
    att::rope_heads(q, 1, dh, r, std::vector<index_t>{tq});
    att::rope_heads(k, 1, dh, r, std::vector<index_t>{tk});
    // matches the naive rotation
    matrixd qn = q0;
    naive_rope(qn.data(), dh, double(tq), r);
    CHECK((q - qn).cwiseAbs().maxCoeff() <= 1e-12);
    return q.row(0).dot(k.row(0));
  };
  for (index_t delta : {0, 1, 5, 40})
    for (index_t base : {0, 3, 100, 1000}) CHECK(std::fabs(score(base + delta, base) - score(delta, 0)) <= 1e-9);
  matrixd x = q0;
  att::rope_heads(x, 1, dh, cmp::rope_config{}, std::vector<index_t>{7});
  CHECK((x.array() == q0.array()).all());
  CHECK_THROWS_WITH(att::rope_heads(x, 2, dh, r), Catch::Contains("X.cols()"));
}
