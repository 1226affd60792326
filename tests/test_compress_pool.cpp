// The compressor against a naive reference written independently here, on every compiled SIMD
// path, in float and double; hand-computed cases; bad inputs; determinism.
//
// The reference evaluates every pool in long double straight from the formulas (entries from the
// convention's source-range formula, not from chunk_grid) and carries, next to each value, a
// bound on the rounding error the Real implementation may commit. The bound is derived from the
// implementation's operation graph with the standard model fl(a ∘ b) = (a ∘ b)(1 + δ), |δ| ≤ u
// = eps/2: a sum or dot of n terms in any order (with or without FMA) errs by at most
// γ_n · Σ|terms|, γ_n = n·u/(1 − n·u) (Higham, Thm 3.1); exp on the SIMD paths is within 2 ulp
// (≤ 4u relative; xsimd 8.1 measured ≤ 1.52 ulp in float, ≤ 0.9 ulp in double; glibc < 1 ulp);
// values computed in double and rounded to Real add u_double terms explicitly.
// The comparison allows the bound plus the reference's own long-double error, which is the same
// model at u_ld = 2^-64, i.e. ≤ 2^-10 of the Real=double bound: tolerance = bound · (1 + 2^-10).
#include <catch2/catch.hpp>

#include <kvphase/compress/compress.hpp>
#include <kvphase/core/rng.hpp>
#include <kvphase/core/simd.hpp>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

using kvphase::index_t;
using kvphase::matrix_t;
using kvphase::vector_t;
using Catch::Matchers::Contains;
namespace kc = kvphase::compress;
namespace simd = kvphase::simd;

namespace {

using LD = long double;
constexpr double u_double = 0x1.0p-53;

// ---- value + error bound -------------------------------------------------------------------------
struct ev {
  LD v = 0;  // exact value (long double)
  LD e = 0;  // bound on |Real computation − v|
};

template <class Real>
struct model {
  static constexpr LD u = std::numeric_limits<Real>::epsilon() / 2;
  static LD gamma(LD n) { return n * u / (1 - n * u); }
  static ev input(LD v) { return {v, 0}; }
  // a double-precision value computed with `ops` double roundings, then rounded to Real
  static ev from_double(LD v, LD ops) {
    const LD a = std::fabs(v);
    return {v, a * (ops * LD(u_double)) + (sizeof(Real) == 4 ? u * a * (1 + ops * LD(u_double)) : 0)};
  }
  static ev add(ev a, ev b) {
    const LD v = a.v + b.v;
    return {v, a.e + b.e + u * (std::fabs(v) + a.e + b.e)};
  }
  static ev sub(ev a, ev b) { return add(a, {-b.v, b.e}); }
  static ev mul(ev a, ev b) {
    const LD v = a.v * b.v;
    const LD e = std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e;
    return {v, e + u * (std::fabs(v) + e)};
  }
  // Σ a_i b_i in any order, FMA or not
  static ev dot(const std::vector<ev>& a, const std::vector<ev>& b) {
    LD v = 0, e = 0, s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      v += a[i].v * b[i].v;
      e += std::fabs(a[i].v) * b[i].e + std::fabs(b[i].v) * a[i].e + a[i].e * b[i].e;
      s += (std::fabs(a[i].v) + a[i].e) * (std::fabs(b[i].v) + b[i].e);
    }
    return {v, e + gamma(static_cast<LD>(a.size())) * s};
  }
  static ev sum(const std::vector<ev>& a) {
    LD v = 0, e = 0, s = 0;
    for (auto& x : a) {
      v += x.v;
      e += x.e;
      s += std::fabs(x.v) + x.e;
    }
    return {v, e + gamma(static_cast<LD>(a.size())) * s};
  }
  static ev exp(ev a) {
    const LD v = std::exp(a.v);
    return {v, v * (std::exp(a.e) - 1) + 4 * u * v * std::exp(a.e)};
  }
  static ev div(ev a, ev b) {
    const LD v = a.v / b.v;
    const LD e = (a.e + std::fabs(v) * b.e) / (std::fabs(b.v) - b.e);
    return {v, e + u * (std::fabs(v) + e)};
  }
  static ev max(ev a, ev b) { return a.v >= b.v ? ev{a.v, std::max(a.e, b.e)} : ev{b.v, std::max(a.e, b.e)}; }
};

// ---- independent entry geometry --------------------------------------------------------------------
struct ref_entry {
  index_t first, last, block_start, block_end;
};
std::vector<ref_entry> ref_entries(const kc::operator_spec& s, index_t head, index_t n) {
  const index_t W = s.grid.window, S = s.grid.stride;
  const index_t org = s.grid.origin + (s.head_offsets.empty() ? 0 : s.head_offsets[static_cast<std::size_t>(head)]);
  std::vector<ref_entry> out;
  for (index_t j = -(n + W) / S - 8; j <= (n + W) / S + 8; ++j) {
    ref_entry r{};
    if (s.grid.convention == kc::grid_convention::v4) {
      r.last = org + j * S + S - 1;
      r.first = r.last - W + 1;
      r.block_start = org + j * S;
      r.block_end = r.last;
      if (r.last < 0) continue;
    } else {
      r.first = org + j * S;
      r.last = r.first + W - 1;
      r.block_start = r.first;
      r.block_end = r.last;
      if (r.first < 0) continue;
    }
    if (r.last > n - 1) break;
    out.push_back(r);
  }
  return out;
}

template <class Real>
LD at(const matrix_t<Real>& m, index_t r, index_t c) {
  return static_cast<LD>(m(r, c));
}

// Projection of token t: Σ_k x[t,k] M[k, col] (exact inputs)
template <class Real>
ev project(const matrix_t<Real>& x, index_t t, const matrix_t<Real>& M, index_t col) {
  std::vector<ev> a, b;
  for (index_t k = 0; k < x.cols(); ++k) {
    a.push_back({at(x, t, k), 0});
    b.push_back({at(M, k, col), 0});
  }
  return model<Real>::dot(a, b);
}

// Softmax-pooled value of one channel, in the implementation's operation order.
// channel form (channel_gate, two_stream): out = (Σ p_r C_r) / (Σ p_r), p_r = exp(e_r − m)
// scalar form (slot_gate): α_r = p_r · (1 / Σ p), out = Σ α_r C_r
template <class Real>
ev softmax_pool(const std::vector<ev>& logits, const std::vector<ev>& pay, bool scalar_form) {
  using M = model<Real>;
  LD m = -INFINITY;
  for (auto& l : logits) m = std::max(m, l.v);
  std::vector<ev> p;
  for (auto& l : logits) {
    // m is any common shift (it cancels exactly); only the rounding of l − m matters
    const LD q = l.v - m;
    p.push_back(M::exp({q, l.e + M::u * std::fabs(q)}));
  }
  const ev s = M::sum(p);
  if (scalar_form) {
    const ev inv = M::div({1, 0}, s);
    std::vector<ev> a;
    for (auto& x : p) a.push_back(M::mul(x, inv));
    return M::dot(a, pay);
  }
  return M::div(M::dot(p, pay), s);
}

LD gelu_ld(LD v) { return LD(0.5) * v * (1 + std::erf(v / std::sqrt(LD(2)))); }

// Reference compressor. Returns E × c values with bounds; `is_max` marks exact results.
template <class Real>
std::vector<std::vector<ev>> reference(const kc::operator_spec& s, const kc::pool_params<Real>& p,
                                       const matrix_t<Real>& x, index_t head) {
  using M = model<Real>;
  const index_t N = x.rows(), d = x.cols(), W = s.grid.window, S = s.grid.stride;
  const auto ents = ref_entries(s, head, N);
  std::vector<std::vector<ev>> out;
  index_t c = d;
  if ((s.pool == kc::pool_kind::slot_gate || s.pool == kc::pool_kind::channel_gate) && p.w_c.size()) c = p.w_c.cols();
  if (s.pool == kc::pool_kind::two_stream && p.w_c.size()) c = p.w_c.cols() / 2;
  if (s.pool == kc::pool_kind::mlp) c = p.mlp_w2.cols();
  for (const auto& en : ents) {
    std::vector<index_t> slot, tok;  // unmasked slots and their tokens
    for (index_t r = 0; r < W; ++r) {
      if (en.first + r >= 0) {
        slot.push_back(r);
        tok.push_back(en.first + r);
      }
    }
    const std::size_t n = slot.size();
    std::vector<ev> row(static_cast<std::size_t>(c));
    switch (s.pool) {
      case kc::pool_kind::identity:
        for (index_t k = 0; k < c; ++k) row[k] = {at(x, tok[0], k), 0};
        break;
      case kc::pool_kind::mean:
      case kc::pool_kind::weights:
      case kc::pool_kind::slot_gate: {
        const bool content = p.content_u.size() || p.slot_u.size();
        std::vector<ev> w;
        if (!content) {
          // weights computed in double from the spec (≤ W + 8 double roundings), rounded to Real
          std::vector<LD> raw;
          for (auto r : slot) {
            if (s.pool == kc::pool_kind::mean) raw.push_back(1);
            if (s.pool == kc::pool_kind::weights) raw.push_back(s.slot_weights[r]);
            if (s.pool == kc::pool_kind::slot_gate) raw.push_back(s.slot_bias.empty() ? 0 : s.slot_bias[r]);
          }
          if (s.pool == kc::pool_kind::slot_gate) {
            LD mx = -INFINITY;
            for (auto v : raw) mx = std::max(mx, v);
            for (auto& v : raw) v = std::exp(v - mx);
          }
          LD tot = 0;
          for (auto v : raw) tot += v;
          for (auto v : raw) w.push_back(M::from_double(v / tot, LD(W + 8)));
        } else {
          std::vector<ev> logits;
          for (std::size_t i = 0; i < n; ++i) {
            const LD b = s.slot_bias.empty() ? 0 : s.slot_bias[slot[i]];
            ev l = M::from_double(b, 0);
            std::vector<ev> xs;
            for (index_t k = 0; k < d; ++k) xs.push_back({at(x, tok[i], k), 0});
            if (p.content_u.size()) {
              std::vector<ev> us;
              for (index_t k = 0; k < d; ++k) us.push_back({static_cast<LD>(p.content_u[k]), 0});
              l = M::add(l, M::dot(us, xs));
            }
            if (p.slot_u.size()) {
              std::vector<ev> us;
              for (index_t k = 0; k < d; ++k) us.push_back({at(p.slot_u, slot[i], k), 0});
              l = M::add(l, M::dot(us, xs));
            }
            logits.push_back(l);
          }
          // softmax weights as the implementation forms them (α = p · (1/Σp))
          LD m = -INFINITY;
          for (auto& l : logits) m = std::max(m, l.v);
          std::vector<ev> pe;
          for (auto& l : logits) pe.push_back(M::exp({l.v - m, l.e + M::u * std::fabs(l.v - m)}));
          const ev inv = M::div({1, 0}, M::sum(pe));
          for (auto& q : pe) w.push_back(M::mul(q, inv));
        }
        for (index_t k = 0; k < c; ++k) {
          std::vector<ev> pay;
          for (std::size_t i = 0; i < n; ++i) {
            pay.push_back(p.w_c.size() ? project(x, tok[i], p.w_c, k) : ev{at(x, tok[i], k), 0});
          }
          row[k] = M::dot(w, pay);
        }
        break;
      }
      case kc::pool_kind::max:
        for (index_t k = 0; k < c; ++k) {
          LD m = -INFINITY;
          for (auto t : tok) m = std::max(m, at(x, t, k));
          row[k] = {m, 0};
        }
        break;
      case kc::pool_kind::channel_gate:
      case kc::pool_kind::two_stream: {
        const bool ts = s.pool == kc::pool_kind::two_stream;
        for (index_t k = 0; k < c; ++k) {
          std::vector<ev> logits, pay;
          for (std::size_t i = 0; i < n; ++i) {
            const index_t r = slot[i];
            const index_t col = (ts && r >= S) ? c + k : k;  // stream b in the second half
            const index_t brow = ts ? r % S : r;
            ev z{0, 0};
            if (p.w_z.size()) z = project(x, tok[i], p.w_z, col);
            if (p.slot_bias_c.size()) z = M::add(z, {at(p.slot_bias_c, brow, col), 0});
            logits.push_back(z);
            pay.push_back(p.w_c.size() ? project(x, tok[i], p.w_c, col) : ev{at(x, tok[i], k), 0});
          }
          row[k] = softmax_pool<Real>(logits, pay, false);
        }
        break;
      }
      case kc::pool_kind::mlp: {
        const index_t H = p.mlp_w1.cols();
        std::vector<ev> f;
        std::vector<index_t> frow;  // row of W1 for each flat element
        for (std::size_t i = 0; i < n; ++i) {
          for (index_t k = 0; k < d; ++k) {
            ev v{at(x, tok[i], k), 0};
            if (p.mlp_pos.size()) v = M::add(v, {at(p.mlp_pos, slot[i], k), 0});
            f.push_back(v);
            frow.push_back(slot[i] * d + k);
          }
        }
        // the in-place form (compress/pool.hpp mlp_entries: entries without masked slots on the
        // hardware-FMA paths) computes X·W1 + (P·W1 + b1) instead of (X + P)·W1 + b1: its terms,
        // for a bound that covers both forms
        std::vector<ev> fx, fp;
        for (std::size_t i = 0; i < n; ++i) {
          for (index_t k = 0; k < d; ++k) {
            fx.push_back({at(x, tok[i], k), 0});
            fp.push_back({p.mlp_pos.size() ? static_cast<LD>(at(p.mlp_pos, slot[i], k)) : LD(0), 0});
          }
        }
        std::vector<ev> h;
        const LD lip = p.activation == kc::mlp_activation::relu ? 1 : LD(1.1290);  // max |act'|
        for (index_t j = 0; j < H; ++j) {
          std::vector<ev> w1;
          for (auto r : frow) w1.push_back({at(p.mlp_w1, r, j), 0});
          ev pre = M::dot(f, w1);
          {
            const ev bj{p.mlp_b1.size() ? static_cast<LD>(p.mlp_b1[j]) : 0, 0};
            const ev copied = M::add(pre, bj);
            const ev in_place = M::add(M::dot(fx, w1), M::add(M::dot(fp, w1), bj));
            pre.e += std::max<LD>(0, in_place.e + std::fabs(in_place.v - copied.v) - copied.e);
          }
          // double (scalar path, double Real): bias added and activation evaluated in double, then
          // rounded to Real. float on SIMD paths (compress/pool.hpp mlp_activate): the bias add
          // rounds once (u·|a|, through |act'| ≤ lip); GELU 0.5·v·(1 + erf(t)), t = fl(v·fl(1/√2))
          // (2 roundings: |erf'| ≤ 2/√π times 2u|t|), erf within 3 ulp (≤ 6u·|erf|, checked over every
          // float), 1 + erf rounds (u·|1 + erf| ≤ 2u), the product rounds (u·|act|); each term of
          // the erf part scaled by |0.5·v|.
          const LD b = p.mlp_b1.size() ? static_cast<LD>(p.mlp_b1[j]) : 0;
          const LD a = pre.v + b;
          const LD act = p.activation == kc::mlp_activation::relu ? std::max<LD>(0, a) : gelu_ld(a);
          LD ea = lip * (pre.e + 2 * LD(u_double) * (std::fabs(pre.v) + std::fabs(b) + pre.e));
          ev hv = M::from_double(act, 8);
          if constexpr (sizeof(Real) == 4) {
            const LD aa = std::fabs(a) + pre.e, uu = M::u;
            ea += lip * uu * aa;
            if (p.activation == kc::mlp_activation::gelu) {
              const LD t = aa * LD(0.70710678118654752440);
              ea += LD(0.5) * aa * (LD(1.1283791670955126) * 2 * uu * t + 6 * uu + 2 * uu);
            }
            hv.e = std::max(hv.e, uu * (std::fabs(act) + ea));
          }
          hv.e += ea * (1 + M::u);
          h.push_back(hv);
        }
        for (index_t k = 0; k < c; ++k) {
          std::vector<ev> w2;
          for (index_t j = 0; j < H; ++j) w2.push_back({at(p.mlp_w2, j, k), 0});
          ev o = M::dot(h, w2);
          if (p.mlp_b2.size()) o = M::add(o, {static_cast<LD>(p.mlp_b2[k]), 0});
          row[k] = o;
        }
        break;
      }
    }
    if (s.rmsnorm) {
      // ss = Σ row² (any order), inv = 1/sqrt(ss/c + eps) in double, rounded to Real, y = row·inv·w
      const ev ss = M::dot(row, row);
      const LD eps = s.rms_eps;
      const LD inv = 1 / std::sqrt(ss.v / c + eps);
      const LD inv_lo = 1 / std::sqrt(std::max<LD>(0, ss.v + ss.e) / c + eps);
      const LD inv_hi = 1 / std::sqrt(std::max<LD>(0, ss.v - ss.e) / c + eps);
      ev iv = M::from_double(inv, 6);
      iv.e += std::max(inv_hi - inv, inv - inv_lo) * (1 + M::u);
      for (index_t k = 0; k < c; ++k) {
        row[k] = M::mul(row[k], iv);
        if (p.rms_weight.size()) row[k] = M::mul(row[k], {static_cast<LD>(p.rms_weight[k]), 0});
      }
    }
    if (s.rope.anchor != kc::rope_anchor::none) {
      LD pos = 0;
      switch (s.rope.anchor) {
        case kc::rope_anchor::start: pos = en.block_start; break;
        case kc::rope_anchor::end: pos = en.block_end; break;
        case kc::rope_anchor::centre: pos = (LD(en.block_start) + LD(en.block_end)) / 2; break;
        default: break;
      }
      const index_t R = s.rope.rope_dim == 0 ? c : s.rope.rope_dim;
      for (index_t k = 0; k < R / 2; ++k) {
        const LD a = pos * std::pow(LD(s.rope.theta), -LD(2 * k) / LD(R));
        const LD cs = std::cos(a), sn = std::sin(a);
        ev& x0 = row[static_cast<std::size_t>(c - R + 2 * k)];
        ev& x1 = row[static_cast<std::size_t>(c - R + 2 * k + 1)];
        const LD y0 = x0.v * cs - x1.v * sn, y1 = x0.v * sn + x1.v * cs;
        // angle in double: pow (≤ 1 ulp) and the product: |δa| ≤ 3·u_d·|a|; cos/sin ≤ 1 ulp,
        // two products and a sum in double, then one rounding to Real
        const LD mag = std::fabs(x0.v) + std::fabs(x1.v) + x0.e + x1.e;
        const LD ed = mag * (3 * LD(u_double) * std::fabs(a) + 6 * LD(u_double));
        const LD e0 = x0.e + x1.e + ed, e1 = e0;
        x0 = {y0, e0 + M::u * (std::fabs(y0) + e0)};
        x1 = {y1, e1 + M::u * (std::fabs(y1) + e1)};
        if (sizeof(Real) == 8) {  // rounding to double is the u above; nothing more
        }
      }
    }
    out.push_back(row);
  }
  return out;
}

template <class Real>
matrix_t<Real> random_x(index_t n, index_t d, std::uint64_t seed) {
  kvphase::rng::philox_stream s(seed, 99);
  matrix_t<Real> x(n, d);
  for (index_t i = 0; i < n; ++i)
    for (index_t k = 0; k < d; ++k) x(i, k) = static_cast<Real>(s.normal());
  return x;
}

template <class Real, class Arch>
void check_against_reference(const kc::operator_spec& s, const kc::pool_params<Real>& p, const matrix_t<Real>& x,
                             index_t head, const kc::compress_options& opt = {}) {
  const auto ref = reference<Real>(s, p, x, head);
  const matrix_t<Real> y = kc::compress<Real, Arch>(s, p, x, head, opt);
  REQUIRE(static_cast<std::size_t>(y.rows()) == ref.size());
  std::size_t bad = 0;
  double worst = 0;
  for (index_t e = 0; e < y.rows(); ++e) {
    REQUIRE(static_cast<std::size_t>(y.cols()) == ref[e].size());
    for (index_t k = 0; k < y.cols(); ++k) {
      const ev r = ref[static_cast<std::size_t>(e)][static_cast<std::size_t>(k)];
      const LD err = std::fabs(static_cast<LD>(y(e, k)) - r.v);
      const LD tol = r.e * (1 + LD(0x1.0p-10));
      if (tol > 0) worst = std::max(worst, static_cast<double>(err / tol));
      if (!(err <= tol)) {
        if (bad++ < 5) {
          UNSCOPED_INFO("entry " << e << " channel " << k << ": got " << y(e, k) << " want "
                                 << static_cast<double>(r.v) << " err " << static_cast<double>(err)
                                 << " bound " << static_cast<double>(tol));
        }
      }
    }
  }
  INFO("worst err/bound = " << worst);
  if (std::getenv("KVPHASE_SHOW_WORST")) std::printf("%s %s worst %.3g\n", Arch::name(), sizeof(Real) == 4 ? "f" : "d", worst);
  CHECK(bad == 0);
}

struct geometry {
  index_t W, S, origin;
  kc::grid_convention conv;
};

template <class Real>
kc::pool_params<Real> params_for(const kc::operator_spec& s, index_t d, index_t head, index_t out_dim, bool project,
                                 bool per_slot, bool rms_w, kc::mlp_activation act) {
  kc::param_init init{.seed = 17,
                      .project_payload = project,
                      .out_dim = project ? out_dim : 0,
                      .bias_std = 0.7,
                      .per_slot_logits = per_slot,
                      .mlp_hidden = 9,
                      .pos_std = 0.3,
                      .activation = act,
                      .rms_weight = rms_w};
  auto p = kc::make_params<Real>(s, d, init, head);
  if (s.pool == kc::pool_kind::mlp) {  // non-zero biases exercise the bias paths
    kvphase::rng::philox_stream r(5, 6);
    for (index_t j = 0; j < p.mlp_b1.size(); ++j) p.mlp_b1[j] = static_cast<Real>(0.2 * r.normal());
    for (index_t j = 0; j < p.mlp_b2.size(); ++j) p.mlp_b2[j] = static_cast<Real>(0.2 * r.normal());
  }
  return p;
}

template <class Real, class Arch>
void run_all_kinds() {
  const std::vector<geometry> geos{{1, 1, 0, kc::grid_convention::v4},  {4, 4, 0, kc::grid_convention::v4},
                                   {8, 4, 0, kc::grid_convention::v4},  {6, 2, 3, kc::grid_convention::v4},
                                   {5, 3, -2, kc::grid_convention::v4}, {7, 3, 2, kc::grid_convention::nsa},
                                   {4, 2, 0, kc::grid_convention::nsa}, {3, 3, 1, kc::grid_convention::v4}};
  const kc::pool_kind kinds[] = {kc::pool_kind::identity,     kc::pool_kind::mean,       kc::pool_kind::max,
                                 kc::pool_kind::weights,      kc::pool_kind::slot_gate,  kc::pool_kind::channel_gate,
                                 kc::pool_kind::two_stream,   kc::pool_kind::mlp};
  int variant = 0;
  for (auto kind : kinds) {
    for (const auto& g : geos) {
      if (kind == kc::pool_kind::identity && g.W != 1) continue;
      if (kind != kc::pool_kind::identity && g.W == 1) continue;
      if (kind == kc::pool_kind::two_stream && (g.W != 2 * g.S || g.conv != kc::grid_convention::v4)) continue;
      for (index_t d : {index_t(3), index_t(19), index_t(37)}) {
        ++variant;
        kc::operator_spec s{.grid = {.window = g.W, .stride = g.S, .origin = g.origin, .convention = g.conv},
                            .pool = kind};
        kvphase::rng::philox_stream r(123, static_cast<std::uint64_t>(variant));
        if (kind == kc::pool_kind::weights) {
          for (index_t i = 0; i < g.W; ++i) s.slot_weights.push_back(0.1 + r.uniform());
        }
        if (kind == kc::pool_kind::slot_gate) {
          for (index_t i = 0; i < g.W; ++i) s.slot_bias.push_back(2.0 * r.normal());
        }
        const bool gated = kind == kc::pool_kind::slot_gate || kind == kc::pool_kind::channel_gate ||
                           kind == kc::pool_kind::two_stream;
        // cycle through options with the variant number so every combination appears somewhere
        if (gated && variant % 3 != 0) s.content_std = 1.5;
        const bool project = gated && variant % 2 == 0;
        const bool per_slot = kind == kc::pool_kind::slot_gate && variant % 4 == 1;
        index_t out_dim = project ? (variant % 3 == 0 ? 8 : d) : 0;
        if (kind == kc::pool_kind::mlp) out_dim = 0;
        s.rmsnorm = variant % 3 == 1;
        const bool rms_w = s.rmsnorm && variant % 2 == 1;
        const kc::rope_anchor anchors[] = {kc::rope_anchor::none, kc::rope_anchor::start, kc::rope_anchor::end,
                                           kc::rope_anchor::centre};
        s.rope.anchor = anchors[variant % 4];
        s.rope.theta = variant % 2 ? 10000.0 : 160000.0;
        s.heads = 2;
        s.head_offsets = {0, index_t(variant % 3) + 1};
        const auto act = variant % 2 ? kc::mlp_activation::gelu : kc::mlp_activation::relu;
        for (index_t head = 0; head < 2; ++head) {
          auto p = params_for<Real>(s, d, head, out_dim, project, per_slot, rms_w, act);
          const index_t c = p.output_dim(s, d);
          s.rope.rope_dim = (c % 2 == 0 && variant % 2 == 0) ? c : ((c / 2) * 2 >= 2 ? 2 : 0);
          if (s.rope.anchor != kc::rope_anchor::none && s.rope.rope_dim == 0 && c % 2 == 1) s.rope.rope_dim = c - 1;
          const auto x = random_x<Real>(47 + variant % 5, d, static_cast<std::uint64_t>(variant));
          INFO("arch " << Arch::name() << " real " << (sizeof(Real) == 4 ? "float" : "double") << " " << s
                       << " head " << head << " " << p);
          check_against_reference<Real, Arch>(s, p, x, head);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("compress: every pool kind matches the reference on every SIMD path", "[compress][pool]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    run_all_kinds<float, Arch>();
    run_all_kinds<double, Arch>();
  });
}

TEST_CASE("compress: presets match the reference and have their documented geometry", "[compress][pool][presets]") {
  for (auto name : kc::preset_names) {
    const auto s = kc::preset(name);
    INFO(s);
    REQUIRE(s.name == name);
    REQUIRE_NOTHROW(s.validate());
    const index_t d = 64;
    const auto p = kc::make_preset_params<float>(s, d, 3);
    const auto x = random_x<float>(s.grid.window * 2 + 5, d, 11);
    simd::for_each_arch([&](auto arch) { check_against_reference<float, decltype(arch)>(s, p, x, 0); });
  }
  CHECK(kc::v4_csa().grid.window == 8);
  CHECK(kc::v4_csa().grid.stride == 4);
  CHECK(kc::v4_csa().pool == kc::pool_kind::two_stream);
  CHECK(kc::v4_hca().grid.window == 128);
  CHECK(kc::v4_hca().grid.stride == 128);
  CHECK(kc::v41().grid.window == 2);
  CHECK(kc::v41().pool == kc::pool_kind::channel_gate);
  CHECK(kc::nsa().grid.window == 32);
  CHECK(kc::nsa().grid.stride == 16);
  CHECK(kc::nsa().grid.convention == kc::grid_convention::nsa);
  CHECK(kc::paper_ref().grid.window == 8);
  CHECK(kc::paper_ref().grid.stride == 8);
  CHECK(kc::paper_ref().separate_kv);
  CHECK(kc::paper_ref().pool == kc::pool_kind::slot_gate);
  CHECK(kc::full().pool == kc::pool_kind::identity);
  CHECK(kc::v4_csa().rope.anchor == kc::rope_anchor::start);
  CHECK(kc::v4_csa().rope.rope_dim == 64);
  CHECK(kc::v4_csa().rope.theta == 160000.0);
  REQUIRE_THROWS_AS(kc::preset("v5"), kvphase::error);
  REQUIRE_THROWS_WITH(kc::preset("v5"), Contains("preset"));
}

// ---- hand-computed cases ---------------------------------------------------------------------------
// Tolerance for the hand cases: each output is a handful of roundings (two projections of length
// 2, two exps within 2 ulp, a sum, an FMA chain and a division): ≤ 16 u relative to the largest
// magnitude involved, which is ≤ 12 here: tol = 16 · u · 12.
template <class Real>
double hand_tol() {
  return 16.0 * std::numeric_limits<Real>::epsilon() / 2 * 12.0;
}

template <class Real, class Arch>
void hand_channel_gate() {
  // d = 2, W = S = 2, identity payload. Tokens x0=(1,2), x1=(3,4), x2=(5,6), x3=(7,8).
  // Logits Z = X·W_Z with W_Z = diag(ln 2, 0): z_t = (ln2·x_t[0], 0). Bias B (2 × 2) with
  // B[:,0] = (0, 0), B[:,1] = (ln 3, 0).
  // Entry 0 (tokens 0, 1):
  //   channel 0: logits ln2·1, ln2·3 → exp 2, 8 → α = 0.2, 0.8 → 0.2·1 + 0.8·3 = 2.6
  //   channel 1: logits ln3, 0 → exp 3, 1 → α = 0.75, 0.25 → 0.75·2 + 0.25·4 = 2.5
  // Entry 1 (tokens 2, 3):
  //   channel 0: ln2·5, ln2·7 → 32, 128 → α = 0.2, 0.8 → 0.2·5 + 0.8·7 = 6.6
  //   channel 1: ln3, 0 → α = 0.75, 0.25 → 0.75·6 + 0.25·8 = 6.5
  kc::operator_spec s{.grid = {.window = 2, .stride = 2}, .pool = kc::pool_kind::channel_gate};
  kc::pool_params<Real> p;
  p.w_z.setZero(2, 2);
  p.w_z(0, 0) = static_cast<Real>(std::log(2.0));
  p.slot_bias_c.setZero(2, 2);
  p.slot_bias_c(0, 1) = static_cast<Real>(std::log(3.0));
  matrix_t<Real> x(4, 2);
  x << 1, 2, 3, 4, 5, 6, 7, 8;
  const auto y = kc::compress<Real, Arch>(s, p, x);
  REQUIRE(y.rows() == 2);
  REQUIRE(y.cols() == 2);
  const double want[2][2] = {{2.6, 2.5}, {6.6, 6.5}};
  for (int e = 0; e < 2; ++e)
    for (int k = 0; k < 2; ++k) CHECK(std::fabs(double(y(e, k)) - want[e][k]) <= hand_tol<Real>());
}

template <class Real, class Arch>
void hand_two_stream() {
  // d = 2, S = 2, W = 4 (two streams). Tokens x0..x5 = (1,2), (3,4), (5,6), (7,8), (9,10), (11,12).
  // W_C = [I | 2I] (2 × 4): stream a payload = x, stream b payload = 2x. W_Z empty (zero logits).
  // Bias B (S × 2c = 2 × 4), columns [a0 a1 | b0 b1], row = the token's slot in its own block:
  //   B^a[:,0] = (0, 0)      → exp 1, 1        B^b[:,0] = (ln 2, ln 4) → exp 2, 4
  //   B^a[:,1] = (ln 3, 0)   → exp 3, 1        B^b[:,1] = (0, 0)       → exp 1, 1
  // Entry i pools tokens 2i−2, 2i−1 (stream a) and 2i, 2i+1 (stream b); N = 6 gives 3 entries.
  // Entry 0: a-half masked (positions −2, −1).
  //   ch0: b exps 2, 4 → α = 1/3, 2/3 over payloads 2·1, 2·3 → 2/3 + 4 = 14/3
  //   ch1: b exps 1, 1 → α = 1/2, 1/2 over payloads 2·2, 2·4 → 6
  // Entry 1: tokens 0, 1 (a), 2, 3 (b).
  //   ch0: exps 1, 1, 2, 4 (sum 8) over payloads 1, 3, 10, 14 → (1 + 3 + 20 + 56)/8 = 10
  //   ch1: exps 3, 1, 1, 1 (sum 6) over payloads 2, 4, 12, 16 → (6 + 4 + 12 + 16)/6 = 19/3
  // Entry 2: tokens 2, 3 (a), 4, 5 (b).
  //   ch0: exps 1, 1, 2, 4 over payloads 5, 7, 18, 22 → (5 + 7 + 36 + 88)/8 = 17
  //   ch1: exps 3, 1, 1, 1 over payloads 6, 8, 20, 24 → (18 + 8 + 20 + 24)/6 = 35/3
  kc::operator_spec s{.grid = {.window = 4, .stride = 2}, .pool = kc::pool_kind::two_stream};
  kc::pool_params<Real> p;
  p.w_c.setZero(2, 4);
  p.w_c(0, 0) = 1;
  p.w_c(1, 1) = 1;
  p.w_c(0, 2) = 2;
  p.w_c(1, 3) = 2;
  p.slot_bias_c.setZero(2, 4);
  p.slot_bias_c(0, 1) = static_cast<Real>(std::log(3.0));
  p.slot_bias_c(0, 2) = static_cast<Real>(std::log(2.0));
  p.slot_bias_c(1, 2) = static_cast<Real>(std::log(4.0));
  matrix_t<Real> x(6, 2);
  x << 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12;
  const auto y = kc::compress<Real, Arch>(s, p, x);
  REQUIRE(y.rows() == 3);
  REQUIRE(y.cols() == 2);
  const double want[3][2] = {{14.0 / 3, 6.0}, {10.0, 19.0 / 3}, {17.0, 35.0 / 3}};
  for (int e = 0; e < 3; ++e)
    for (int k = 0; k < 2; ++k) {
      INFO("entry " << e << " channel " << k << " got " << y(e, k));
      CHECK(std::fabs(double(y(e, k)) - want[e][k]) <= hand_tol<Real>() * 2);  // magnitudes ≤ 24 here
    }
}

TEST_CASE("compress: hand-computed channel gate and two-stream V4-CSA (d = 2, S = 2)", "[compress][pool]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    INFO(Arch::name());
    hand_channel_gate<float, Arch>();
    hand_channel_gate<double, Arch>();
    hand_two_stream<float, Arch>();
    hand_two_stream<double, Arch>();
  });
}

// A channel gate without content logits has the same weights in every complete entry, and the
// engine computes their exponentials once per call (compress/pool.hpp, channel_softmax_weights).
// The same parameters with an all-zero logit map take the per-entry path: the outputs must be
// bitwise equal, masked leading entries and the scalar channel tail (d = 37, 72) included. With
// post-processing, 203 tokens give several tiles of entries pooled in pairs
// (channel_weighted_entries) and an odd one; on the W = 8, S = 4 grid without projections
// (off = 0) the shared-row kernel (channel_weighted_entries_w8s4) takes the whole channel
// groups (d = 64: all of them; 37, 72: some, then the general kernel and the scalar tail).
template <class Real, class Arch>
void bias_only_gate_equals_per_entry_path() {
  const kc::operator_spec specs[] = {
      {.grid = {.window = 5, .stride = 3, .origin = 0}, .pool = kc::pool_kind::channel_gate},
      {.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::two_stream, .rmsnorm = true,
       .rope = {.anchor = kc::rope_anchor::start, .theta = 10000.0, .rope_dim = 8}},
      {.grid = {.window = 4, .stride = 4, .origin = 2}, .pool = kc::pool_kind::channel_gate}};
  for (const auto& s : specs) {
    for (const bool project : {false, true}) {
      for (const index_t d : {index_t(16), index_t(37), index_t(64), index_t(72)}) {
        kc::param_init init{.seed = 3, .project_payload = project, .out_dim = project ? d : 0, .bias_std = 1.3};
        const auto fast = kc::make_params<Real>(s, d, init, 0);
        REQUIRE(fast.w_z.size() == 0);
        REQUIRE(fast.slot_bias_c.size() > 0);
        auto slow = fast;
        const index_t f = s.pool == kc::pool_kind::two_stream ? 2 : 1;
        slow.w_z.setZero(d, f * fast.output_dim(s, d));
        const auto x = random_x<Real>(s.rmsnorm ? 203 : 61, d, 7);
        const auto a = kc::compress<Real, Arch>(s, fast, x);
        const auto b = kc::compress<Real, Arch>(s, slow, x);
        INFO(Arch::name() << " " << s << " project " << project << " d " << d);
        REQUIRE(a.rows() == b.rows());
        REQUIRE(a.rows() > 10);
        REQUIRE(std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(Real)) == 0);
      }
    }
  }
}

TEST_CASE("compress: a bias-only channel gate's once-per-call weights equal the per-entry softmax bit for bit",
          "[compress][pool]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    bias_only_gate_equals_per_entry_path<float, Arch>();
    bias_only_gate_equals_per_entry_path<double, Arch>();
  });
}

// A workspace keeps the entries' RoPE cosines and sines across calls (compress_workspace::
// rope_cs): reusing them, recomputing them for moved positions or other frequencies, and not
// keeping them (no workspace) must all give the same entries bit for bit.
template <class Real, class Arch>
void rope_cache_is_invisible() {
  kc::operator_spec a{.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::two_stream, .rmsnorm = true,
                      .rope = {.anchor = kc::rope_anchor::start, .theta = 10000.0, .rope_dim = 12}};
  kc::operator_spec b = a;  // moved grid: other anchor positions, the same frequencies
  b.grid.origin = 3;
  b.rope.anchor = kc::rope_anchor::centre;
  kc::operator_spec c = a;  // other frequencies
  c.rope.theta = 160000.0;
  kc::operator_spec m{.grid = {.window = 4, .stride = 2}, .pool = kc::pool_kind::mlp,
                      .rope = {.anchor = kc::rope_anchor::end, .theta = 10000.0, .rope_dim = 0}};
  const index_t d = 20;
  const auto x = random_x<Real>(97, d, 11);
  kc::compress_workspace<Real> ws;
  for (const auto* s : {&a, &a, &b, &a, &c, &m, &a, &m}) {
    kc::param_init init{.seed = 5, .bias_std = 0.8, .mlp_hidden = 7};
    const auto p = kc::make_params<Real>(*s, d, init, 0);
    const auto want = kc::compress<Real, Arch>(*s, p, x);  // no workspace: no cache
    matrix_t<Real> got(want.rows(), want.cols());
    kc::compress_into<Real, Arch>(*s, p, kvphase::matrix_view<Real>(x.data(), x.rows(), x.cols()),
                                  kvphase::matrix_mut_view<Real>(got.data(), got.rows(), got.cols()), 0, {}, &ws);
    INFO(Arch::name() << " " << *s);
    REQUIRE(!ws.rope_cs.empty());
    REQUIRE(std::memcmp(want.data(), got.data(), static_cast<std::size_t>(want.size()) * sizeof(Real)) == 0);
  }
}

TEST_CASE("compress: the workspace's RoPE cache gives the same entries bit for bit", "[compress][pool]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    rope_cache_is_invisible<float, Arch>();
    rope_cache_is_invisible<double, Arch>();
  });
}

// With RMSNorm or RoPE, entries are pooled in tiles and post-processed stage by stage across a
// tile's rows (engine::entries_tiled); the lockstep walk (interleave > 1) still runs entry() one
// at a time. Both must give every row the same bits: 203 tokens give entry counts that are not a
// multiple of the tile, the grids with origins give masked first entries, and RoPE runs at every
// anchor on both grid conventions.
template <class Real, class Arch>
void tiles_match_single_entries() {
  std::vector<kc::operator_spec> specs;
  for (auto name : kc::preset_names) {
    if (name != "nsa") specs.push_back(kc::preset(name));  // the MLP pool tiles on its own path
  }
  specs.push_back({.grid = {.window = 6, .stride = 2, .origin = 3}, .pool = kc::pool_kind::mean, .rmsnorm = true,
                   .rope = {.anchor = kc::rope_anchor::centre}});
  // RoPE alone (no RMSNorm) at every anchor, on both grid conventions
  for (auto a : {kc::rope_anchor::start, kc::rope_anchor::end, kc::rope_anchor::centre}) {
    specs.push_back({.grid = {.window = 5, .stride = 3, .origin = 2, .convention = kc::grid_convention::nsa},
                     .pool = kc::pool_kind::mean, .rope = {.anchor = a}});
    specs.push_back({.grid = {.window = 6, .stride = 3, .origin = 1}, .pool = kc::pool_kind::max, .rope = {.anchor = a}});
  }
  for (const auto& s : specs) {
    if (!s.rmsnorm && s.rope.anchor == kc::rope_anchor::none) continue;
    const index_t d = 72, N = s.grid.window > 64 ? 128 * 20 + 3 : 203;  // 72: a channel tail on every path
    const auto p = kc::make_preset_params<Real>(s, d, 13);
    const auto x = random_x<Real>(N, d, 17);
    const auto tiled = kc::compress<Real, Arch>(s, p, x, 0, {.threads = 1});
    const auto single = kc::compress<Real, Arch>(s, p, x, 0, {.threads = 1, .interleave = 4});
    const auto two = kc::compress<Real, Arch>(s, p, x, 0, {.threads = 2});
    INFO(s << " arch " << Arch::name() << " entries " << tiled.rows());
    REQUIRE(tiled.rows() >= 4 * 4);  // enough entries for the lockstep walk
    CHECK(tiled == single);
    CHECK(tiled == two);
  }
}

TEST_CASE("compress: post-processing in tiles of entries gives each row its one-entry bits", "[compress][pool]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    tiles_match_single_entries<float, Arch>();
    tiles_match_single_entries<double, Arch>();
  });
}

// A max pool with W = 2S reads each S-row block once (engine::block_entries,
// max_rows_second_block) instead of pooling every entry's 2S rows (max_rows). Both must give
// every entry the same bits, also where max is delicate: NaN (max_rows keeps a NaN only in an
// entry's first slot), signed zeros and ties (the first of equal values is kept), ±∞. Grids with
// origins give masked first entries; RMSNorm and RoPE the post-processing; d = 37 and 72 the
// scalar and one-batch channel tails; several thread counts restart the blocks at every thread's
// first entry. Linear pools on the same grid keep the per-entry kernel.
template <class Real, class Arch>
void max_blocks_match_per_entry_max() {
  const Real inf = std::numeric_limits<Real>::infinity(), nan = std::numeric_limits<Real>::quiet_NaN();
  const Real specials[] = {nan, Real(0), -Real(0), inf, -inf, Real(1), Real(1), -Real(1)};
  const kc::operator_spec specs[] = {
      {.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::max},
      {.grid = {.window = 2, .stride = 1, .origin = 1}, .pool = kc::pool_kind::max},
      {.grid = {.window = 6, .stride = 3, .origin = 2}, .pool = kc::pool_kind::max, .rmsnorm = true,
       .rope = {.anchor = kc::rope_anchor::centre, .theta = 10000.0, .rope_dim = 8}},
      {.grid = {.window = 32, .stride = 16, .origin = 5}, .pool = kc::pool_kind::max}};
  const kc::pool_params<Real> none;
  const kc::operator_spec mean{.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::mean};
  REQUIRE_FALSE((kvphase::compress::detail::engine<Real, Arch>(mean, none, 16, 0).pair_blocks));
  for (const auto& s : specs) {
    for (const index_t d : {index_t(16), index_t(37), index_t(72), index_t(256)}) {
      auto x = random_x<Real>(203, d, 13);
      // about one value in five special, at positions that reach every slot of every entry
      kvphase::rng::philox_stream pick(21, static_cast<std::uint64_t>(d));
      for (index_t i = 0; i < x.size(); ++i) {
        const double u = pick.uniform();
        if (u < 0.2) x.data()[i] = specials[static_cast<std::size_t>(u * 40) % 8];
      }
      if (s.rmsnorm) {  // NaN or ∞ would make whole rows NaN: keep zeros and ties only
        for (index_t i = 0; i < x.size(); ++i)
          if (!std::isfinite(x.data()[i])) x.data()[i] = -Real(0);
      }
      const kvphase::compress::detail::engine<Real, Arch> fast(s, none, d, 0);
      REQUIRE(fast.pair_blocks);
      auto slow = fast;
      slow.pair_blocks = false;
      const index_t E = s.grid.num_entries(x.rows());
      REQUIRE(E > 10);
      for (const int threads : {1, 2, 3}) {
        for (const auto stores : {kc::store_mode::normal, kc::store_mode::streaming}) {
          const kc::compress_options opt{.threads = threads, .stores = stores};
          matrix_t<Real> a(E, d), b(E, d);
          kvphase::compress::detail::run_entries<Real, Arch>(fast, x.data(), x.rows(), 0, 0, E, a.data(), opt);
          kvphase::compress::detail::run_entries<Real, Arch>(slow, x.data(), x.rows(), 0, 0, E, b.data(), opt);
          INFO(Arch::name() << " " << s << " d " << d << " threads " << threads);
          REQUIRE(std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(Real)) == 0);
          // and the public call takes the fast path
          const auto o = kc::compress<Real, Arch>(s, none, x, 0, opt);
          REQUIRE(std::memcmp(a.data(), o.data(), static_cast<std::size_t>(a.size()) * sizeof(Real)) == 0);
        }
      }
    }
  }
}

TEST_CASE("compress: max pools with W = 2S read each block once and keep the per-entry bits (NaN, ±0, ties, ±inf)",
          "[compress][pool]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    if constexpr (!simd::is_scalar_v<Arch>) {
      max_blocks_match_per_entry_max<float, Arch>();
      max_blocks_match_per_entry_max<double, Arch>();
    }
  });
}

// Narrow rows of a max or fixed-weight linear pool without overlap are pooled four entries at a
// time, from four sub-ranges, with their loads interleaved (engine::entries_lockstep,
// pool_rows_lockstep). Every entry must keep the per-entry kernel's bits: NaN, ±0 and ties for
// max; masked first entries (origins); d = 16, 37, 72 (scalar and batch tails), 2048 (the widest
// row that takes the path); splits that leave a remainder; 1–3 threads; normal and streaming
// stores; and the public call with the walk asked for, automatic and turned off. Where the path
// must not be taken (overlap, post-processing, W > 8, wider rows, linear pools where a*b + c may
// be contracted differently) the flag is off.
template <class Real, class Arch>
void lockstep_rows_match_per_entry() {
  using eng_t = kvphase::compress::detail::engine<Real, Arch>;
  const Real inf = std::numeric_limits<Real>::infinity(), nan = std::numeric_limits<Real>::quiet_NaN();
  const Real specials[] = {nan, Real(0), -Real(0), inf, -inf, Real(1), Real(1), -Real(1)};
  const bool fma_path = kvphase::simd::fused_fma<Arch>();
  const kc::operator_spec specs[] = {
      {.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mean},
      {.grid = {.window = 4, .stride = 4, .origin = 2}, .pool = kc::pool_kind::max},
      {.grid = {.window = 3, .stride = 3, .origin = 1}, .pool = kc::pool_kind::weights, .slot_weights = {0.2, 0.3, 0.5}},
      {.grid = {.window = 1, .stride = 1}, .pool = kc::pool_kind::identity},
      {.grid = {.window = 8, .stride = 8}, .pool = kc::pool_kind::slot_gate,
       .slot_bias = {0.1, -0.2, 0.3, 0.0, 0.5, -0.1, 0.2, 0.4}},
      {.grid = {.window = 6, .stride = 6, .origin = 3}, .pool = kc::pool_kind::max}};
  const kc::pool_params<Real> none;
  for (const auto& s : specs) {
    const bool is_max = s.pool == kc::pool_kind::max;
    for (const index_t d : {index_t(16), index_t(37), index_t(72), index_t(8192 / sizeof(Real))}) {
      auto x = random_x<Real>(61 * s.grid.stride + 5, d, 17);
      if (is_max) {
        kvphase::rng::philox_stream pick(23, static_cast<std::uint64_t>(d));
        for (index_t i = 0; i < x.size(); ++i) {
          const double u = pick.uniform();
          if (u < 0.2) x.data()[i] = specials[static_cast<std::size_t>(u * 40) % 8];
        }
      }
      const eng_t fast(s, none, d, 0);
      INFO(Arch::name() << " " << s << " d " << d);
      REQUIRE(fast.lockstep_rows == (is_max || fma_path));
      if (!fast.lockstep_rows) continue;
      auto slow = fast;
      slow.lockstep_rows = false;
      const index_t E = s.grid.num_entries(x.rows());
      REQUIRE(E >= 58);
      for (const int threads : {1, 2, 3}) {
        for (const auto stores : {kc::store_mode::normal, kc::store_mode::streaming}) {
          INFO("threads " << threads);
          const kc::compress_options on{.threads = threads, .stores = stores, .interleave = 4};
          matrix_t<Real> a(E, d), b(E, d);
          kvphase::compress::detail::run_entries<Real, Arch>(fast, x.data(), x.rows(), 0, 0, E, a.data(), on);
          kvphase::compress::detail::run_entries<Real, Arch>(slow, x.data(), x.rows(), 0, 0, E, b.data(), on);
          REQUIRE(std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(Real)) == 0);
          for (const int il : {0, 1, 4}) {
            const kc::compress_options opt{.threads = threads, .stores = stores, .interleave = il};
            const auto o = kc::compress<Real, Arch>(s, none, x, 0, opt);
            REQUIRE(std::memcmp(a.data(), o.data(), static_cast<std::size_t>(a.size()) * sizeof(Real)) == 0);
          }
        }
      }
    }
  }
  // where the walk is not taken
  const kc::operator_spec off[] = {
      {.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::mean},                  // overlap
      {.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mean, .rmsnorm = true},  // post-processing
      {.grid = {.window = 16, .stride = 16}, .pool = kc::pool_kind::max}};                 // W > 8
  for (const auto& s : off) REQUIRE_FALSE(eng_t(s, none, 64, 0).lockstep_rows);
  const kc::operator_spec mx{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::max};
  REQUIRE(eng_t(mx, none, 8192 / sizeof(Real), 0).lockstep_rows);
  REQUIRE_FALSE(eng_t(mx, none, 8192 / sizeof(Real) + 1, 0).lockstep_rows);  // wider rows
}

TEST_CASE("compress: narrow rows pooled four entries at a time keep the per-entry bits", "[compress][pool]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    if constexpr (!simd::is_scalar_v<Arch>) {
      lockstep_rows_match_per_entry<float, Arch>();
      lockstep_rows_match_per_entry<double, Arch>();
    }
  });
}

TEST_CASE("compress: simple pools by hand (mean, max, weights, masked first entry)", "[compress][pool]") {
  // W = 4, S = 2 (V4): entry 0 pools positions −2 … 1 (two masked slots), entry 1 pools 0 … 3.
  matrix_t<double> x(4, 1);
  x << 1, 2, 3, 10;
  kc::operator_spec s{.grid = {.window = 4, .stride = 2}, .pool = kc::pool_kind::mean};
  auto y = kc::compress(s, x);
  REQUIRE(y.rows() == 2);
  CHECK(y(0, 0) == Approx(1.5));  // (1 + 2)/2: masked slots get weight 0, the rest renormalised
  CHECK(y(1, 0) == Approx(4.0));  // (1 + 2 + 3 + 10)/4
  s.pool = kc::pool_kind::max;
  y = kc::compress(s, x);
  CHECK(y(0, 0) == 2.0);
  CHECK(y(1, 0) == 10.0);
  s.pool = kc::pool_kind::weights;
  s.slot_weights = {1, 1, 1, 2};  // entry 0: weights (1, 2)/3 on tokens 0, 1 → 5/3
  y = kc::compress(s, x);
  CHECK(y(0, 0) == Approx(5.0 / 3));
  CHECK(y(1, 0) == Approx((1 + 2 + 3 + 20) / 5.0));
}

// ---- post-processing ---------------------------------------------------------------------------------
TEST_CASE("position: RMSNorm and RoPE kernels", "[compress][position]") {
  // RMSNorm of (3, 4) with eps → 0: mean square 12.5 → (3, 4)/sqrt(12.5)
  std::vector<double> row{3, 4};
  kc::rms_norm<double>(row.data(), 2, 1e-300);
  CHECK(row[0] == Approx(3 / std::sqrt(12.5)));
  CHECK(row[1] == Approx(4 / std::sqrt(12.5)));
  // RoPE, rope_dim 2 on the last pair of (5, 1, 0): rotated by position·θ^0 = position
  std::vector<double> v{5, 1, 0};
  kc::rope_config cfg{.anchor = kc::rope_anchor::start, .theta = 10000, .rope_dim = 2};
  kc::apply_rope(v.data(), 3, std::acos(-1.0) / 2, cfg);  // quarter turn: (1, 0) → (0, 1)
  CHECK(v[0] == 5);
  CHECK(v[1] == Approx(0).margin(1e-15));
  CHECK(v[2] == Approx(1));
  // relative-position property: <rope(q, t), rope(k, s)> depends only on t − s
  kc::rope_config all{.anchor = kc::rope_anchor::start, .theta = 10000, .rope_dim = 0};
  const auto q0 = random_x<double>(1, 16, 1), k0 = random_x<double>(1, 16, 2);
  auto dot_at = [&](double t, double s) {
    matrix_t<double> q = q0, k = k0;
    kc::apply_rope(q.data(), 16, t, all);
    kc::apply_rope(k.data(), 16, s, all);
    return q.row(0).dot(k.row(0));
  };
  CHECK(dot_at(10, 3) == Approx(dot_at(107, 100)).epsilon(1e-12));
  // inverse rotation restores the row
  matrix_t<double> q = q0;
  kc::apply_rope(q.data(), 16, 1234.5, all);
  kc::apply_rope(q.data(), 16, -1234.5, all);
  CHECK((q - q0).cwiseAbs().maxCoeff() < 1e-12);
  REQUIRE_THROWS_WITH(kc::apply_rope(v.data(), 3, 1.0, kc::rope_config{.rope_dim = 0}), Contains("rope_dim"));
  REQUIRE_THROWS_WITH(kc::rms_norm<double>(row.data(), 2, 0.0), Contains("eps"));
  // anchors under both conventions
  kc::chunk_grid g{.window = 8, .stride = 4};
  CHECK(kc::anchor_position(g, 0, kc::rope_anchor::start) == 0);
  CHECK(kc::anchor_position(g, 2, kc::rope_anchor::start) == 8);
  CHECK(kc::anchor_position(g, 2, kc::rope_anchor::end) == 11);
  CHECK(kc::anchor_position(g, 2, kc::rope_anchor::centre) == 9.5);
  kc::chunk_grid n{.window = 32, .stride = 16, .convention = kc::grid_convention::nsa};
  CHECK(kc::anchor_position(n, 1, kc::rope_anchor::start) == 16);
  CHECK(kc::anchor_position(n, 1, kc::rope_anchor::end) == 47);
  CHECK(kc::anchor_position(n, 1, kc::rope_anchor::centre) == 31.5);
}

// The rotation kernels against one reference: rotate_pairs (double batches on the FMA paths)
// equals rotate_pair pair by pair bit for bit on every compiled path, apply_rope_cs with
// rope_cos_sin's table equals apply_rope, and both are within one rounding of the long-double
// rotation; rms_inverses equals rms_inverse row by row. Pair and row counts leave a tail on
// every path (batch widths 2, 4, 8 doubles).
template <class Real, class Arch>
void rotation_kernels_agree() {
  INFO("arch " << Arch::name() << (std::is_same_v<Real, float> ? " float" : " double"));
  for (index_t dim : {2, 6, 18, 64, 70}) {
    const kc::rope_frequencies f(kc::rope_config{.rope_dim = dim - (dim % 4 == 2 ? 0 : 2)}, dim);
    const auto x0 = random_x<Real>(1, dim, 31 + static_cast<std::uint64_t>(dim));
    std::vector<double> cs(static_cast<std::size_t>(f.rotated));
    for (double pos : {0.0, 1.0, 37.5, 4093.0, -811.0, 131071.0}) {
      kc::rope_cos_sin(pos, f, cs.data());
      std::vector<Real> a(x0.data(), x0.data() + dim), b = a, c = a;
      kc::apply_rope_cs<Real, Arch>(a.data(), cs.data(), f);
      for (index_t k = 0; k < f.rotated / 2; ++k)
        kc::rotate_pair(b.data() + (dim - f.rotated) + 2 * k, cs[2 * k], cs[2 * k + 1]);
      kc::apply_rope(c.data(), pos, f);
      CHECK(a == b);
      CHECK(a == c);
      // one rounding of the exact rotation (by the same double cosines and sines): |error| ≤
      // ulp(Real) of the result plus the double products' 2^-52 relative error
      for (index_t k = 0; k < f.rotated / 2; ++k) {
        const index_t j = dim - f.rotated + 2 * k;
        const long double u = x0(0, j), v = x0(0, j + 1), co = cs[2 * k], si = cs[2 * k + 1];
        const long double r0 = u * co - v * si, r1 = u * si + v * co;
        const long double tol0 = std::fabs(static_cast<double>(r0)) * std::numeric_limits<Real>::epsilon() +
                                 (std::fabs(static_cast<double>(u)) + std::fabs(static_cast<double>(v))) * 0x1p-51;
        const long double tol1 = std::fabs(static_cast<double>(r1)) * std::numeric_limits<Real>::epsilon() +
                                 (std::fabs(static_cast<double>(u)) + std::fabs(static_cast<double>(v))) * 0x1p-51;
        CHECK(std::fabs(static_cast<long double>(a[static_cast<std::size_t>(j)]) - r0) <= tol0);
        CHECK(std::fabs(static_cast<long double>(a[static_cast<std::size_t>(j + 1)]) - r1) <= tol1);
      }
      for (index_t j = 0; j < dim - f.rotated; ++j) CHECK(a[static_cast<std::size_t>(j)] == x0(0, j));
    }
  }
  for (index_t m : {1, 3, 8, 16, 19}) {
    const auto rows = random_x<Real>(m, 72, 77 + static_cast<std::uint64_t>(m));
    std::vector<Real> inv(static_cast<std::size_t>(m));
    kc::rms_inverses<Real, Arch>(rows.data(), 72, m, 72, 1e-6, inv.data());
    for (index_t i = 0; i < m; ++i) {
      const Real want = kc::rms_inverse<Real, Arch>(rows.data() + i * 72, 72, 1e-6);
      if constexpr (simd::is_scalar_v<Arch> || simd::fused_fma<Arch>()) {
        CHECK(inv[static_cast<std::size_t>(i)] == want);
      } else {
        // sse2: both are rms_inverse, but its dot's a·b + c may be contracted in one inlined
        // copy and not the other; each product's rounding moves Σ x² by at most u·Σ x², the
        // inverse square root by half that, plus one rounding each: 2 ulp
        CHECK(std::fabs(inv[static_cast<std::size_t>(i)] - want) <= 2 * std::numeric_limits<Real>::epsilon() * want);
      }
    }
  }
}

TEST_CASE("position: the SIMD rotation and RMS kernels give the scalar kernels' bits on every path",
          "[compress][position]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    rotation_kernels_agree<float, Arch>();
    rotation_kernels_agree<double, Arch>();
  });
}

// ---- determinism ------------------------------------------------------------------------------------
TEST_CASE("compress: bitwise identical for any thread count and store mode", "[compress][pool]") {
  for (auto name : {"v4_csa", "paper_ref", "nsa"}) {
    const auto s = kc::preset(name);
    const auto p = kc::make_preset_params<float>(s, 64, 9);
    const auto x = random_x<float>(200, 64, 4);
    const auto a = kc::compress(s, p, x, 0, {.threads = 1, .stores = kc::store_mode::normal});
    const auto b = kc::compress(s, p, x, 0, {.threads = 2, .stores = kc::store_mode::streaming});
    const auto c = kc::compress(s, p, x, 0, {.threads = 3, .stores = kc::store_mode::automatic});
    CHECK(a == b);
    CHECK(a == c);
  }
  kc::operator_spec s{.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::weights,
                      .slot_weights = {1, 2, 3, 4, 4, 3, 2, 1}};
  const auto x = random_x<float>(4096, 128, 8);
  const auto a = kc::compress(s, x, 0, {.threads = 1, .stores = kc::store_mode::normal});
  const auto b = kc::compress(s, x, 0, {.threads = 2, .stores = kc::store_mode::streaming});
  CHECK(a == b);
  const auto c = kc::compress(s, x, 0, {.threads = 1, .stores = kc::store_mode::streaming, .interleave = 4});
  const auto e = kc::compress(s, x, 0, {.threads = 2, .interleave = 3});
  CHECK(a == c);
  CHECK(a == e);
  // RMSNorm at a width with a scalar tail on every path: the thread split moves rows between the
  // tiles' batched inverses and the one-row ones (and interleave > 1 takes the one-entry path), so
  // a sum of squares must not depend on the code around it (simd::dot)
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    const kc::operator_spec r{.grid = {.window = 5, .stride = 3}, .pool = kc::pool_kind::mean, .rmsnorm = true};
    for (const index_t d : {index_t(37), index_t(21)}) {
      const auto x = random_x<float>(211, d, 5);
      const kc::pool_params<float> none;
      const auto one = kc::compress<float, Arch>(r, none, x, 0, {.threads = 1});
      INFO(Arch::name() << " d " << d);
      for (const int t : {2, 3}) CHECK(kc::compress<float, Arch>(r, none, x, 0, {.threads = t}) == one);
      CHECK(kc::compress<float, Arch>(r, none, x, 0, {.threads = 1, .interleave = 2}) == one);
    }
  });
}

// On hardware-FMA paths the projections and the MLP run on the library's packed kernel
// (detail::gemm_rows_fma), where every element of C is one FMA chain over the whole depth from
// zero: bitwise the scalar std::fma chain, whatever the row count (row groups of 6, then tail
// tiles of 3, 2 and 1 rows: m = 12 … 17), the depth blocks (k = 300: 256 + 44), partial
// panels (n = 70, 133) and a second block of columns (n = one packed block + 37, at m = 13).
template <class Real, class Arch>
void gemm_is_one_fma_chain_per_element() {
  if constexpr (simd::fused_fma<Arch>()) {
    const index_t wide = kc::detail::gemm_block_columns<Real, Arch>() + 37;
    for (const index_t n : {index_t(70), index_t(133), wide}) for (index_t m = 12; m <= 17; ++m) {
      if (n == wide && m != 13) continue;
      const index_t k = 300, lda = k + 3, ldb = n + 5, ldc = n + 2;
      const auto A = random_x<Real>(m, lda, 41);
      const auto B = random_x<Real>(k, ldb, 42);
      std::vector<Real> C(static_cast<std::size_t>(m * ldc), Real(-7)), scratch;
      kc::detail::gemm_rows_fma<Real, Arch>(A.data(), lda, B.data(), ldb, m, k, n, C.data(), ldc, scratch);
      index_t bad = 0;
      for (index_t i = 0; i < m; ++i) {
        for (index_t j = 0; j < ldc; ++j) {
          Real want = Real(-7);  // the padding columns are not written
          if (j < n) {
            want = 0;
            for (index_t p = 0; p < k; ++p) want = std::fma(A(i, p), B(p, j), want);
          }
          bad += std::memcmp(&want, &C[static_cast<std::size_t>(i * ldc + j)], sizeof(Real)) != 0;
        }
      }
      INFO(Arch::name() << " n " << n << " m " << m);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("compress: the FMA-path GEMM gives every element its scalar FMA chain bit for bit", "[compress][pool][gemm]") {
  simd::for_each_arch([](auto arch) {
    using Arch = decltype(arch);
    gemm_is_one_fma_chain_per_element<float, Arch>();
    gemm_is_one_fma_chain_per_element<double, Arch>();
  });
}

// The SIMD paths compute projections and the MLP with a blocked GEMM (detail/gemm.hpp: the
// packed FMA kernel, Eigen's on SSE2): depths above the kernel's depth block (d = 1300 > KC)
// and MLPs of more than one entry tile (1150 entries: tiles of 1024 in the in-place form on
// hardware-FMA paths, of 1024 in the copied form elsewhere) against the
// reference, and each row's bits independent of the rows computed with it (one row at a time,
// any thread count, pieces of a stream).
TEST_CASE("compress: GEMM path (several depth blocks, entry tiles) matches the reference, rows independent of the split",
          "[compress][pool][gemm]") {
  {
    const kc::operator_spec s{.grid = {.window = 2, .stride = 2}, .pool = kc::pool_kind::channel_gate,
                              .content_std = 1.0};
    const auto p = params_for<float>(s, 1300, 0, 100, true, false, false, kc::mlp_activation::gelu);
    const auto x = random_x<float>(21, 1300, 31);
    simd::for_each_arch([&](auto arch) { check_against_reference<float, decltype(arch)>(s, p, x, 0); });
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      const auto whole = kc::project_tokens<float, Arch>(s, p, x);
      for (index_t t = 0; t < x.rows(); ++t) {
        const matrix_t<float> row = x.middleRows(t, 1);
        const auto one = kc::project_tokens<float, Arch>(s, p, row);
        CHECK(one.payload.row(0) == whole.payload.row(t));
        CHECK(one.logits.row(0) == whole.logits.row(t));
      }
      const auto two = kc::project_tokens<float, Arch>(s, p, x, 0, {.threads = 2});
      CHECK(two.payload == whole.payload);
      CHECK(two.logits == whole.logits);
    });
  }
  {
    const kc::operator_spec s{.grid = {.window = 4, .stride = 2}, .pool = kc::pool_kind::mlp, .rmsnorm = true,
                              .rope = {.anchor = kc::rope_anchor::end, .rope_dim = 0}};
    // 1150 entries: the MLP's in-place form in two tiles of mlp_tile = 1024 at one thread (its
    // P·W1 row computed with the first), entry 0 (two masked slots) in the copied form
    const auto p = params_for<double>(s, 16, 0, 0, false, false, true, kc::mlp_activation::gelu);
    const auto x = random_x<double>(2300, 16, 32);
    simd::for_each_arch([&](auto arch) { check_against_reference<double, decltype(arch)>(s, p, x, 0); });
    {
      const auto pf = params_for<float>(s, 16, 0, 0, false, false, true, kc::mlp_activation::gelu);
      const auto xf = random_x<float>(2300, 16, 32);
      simd::for_each_arch([&](auto arch) { check_against_reference<float, decltype(arch)>(s, pf, xf, 0); });
    }
    const auto a = kc::compress(s, p, x, 0, {.threads = 1});
    REQUIRE(a.rows() == 1150);
    CHECK(a == kc::compress(s, p, x, 0, {.threads = 2, .stores = kc::store_mode::streaming}));
    CHECK(a == kc::compress(s, p, x, 0, {.threads = 3}));
    kc::compress_stream<double> st(s, p, 16);
    index_t pos = 0, got = 0;
    for (index_t k = 1; pos < x.rows(); k = k % 37 + 5) {
      const index_t take = std::min<index_t>(k, x.rows() - pos);
      const matrix_t<double> piece = x.middleRows(pos, take);
      const auto rows = st.append(piece);
      CHECK(rows == a.middleRows(got, rows.rows()));
      got += rows.rows();
      pos += take;
    }
    CHECK(got == a.rows());
  }
  {
    // NSA's grid (no masked slots) with 2 and 3 threads: the MLP's first layer split by columns
    // (mlp_entries_shared, E ≤ threads·mlp_tile) against the reference on every path, and bit
    // for bit the entry split's rows (1 thread; 2 threads on 3000 entries, > 2·mlp_tile)
    const kc::operator_spec s{.grid = {.window = 4, .stride = 2, .convention = kc::grid_convention::nsa},
                              .pool = kc::pool_kind::mlp};
    const auto p = params_for<float>(s, 16, 0, 0, false, false, false, kc::mlp_activation::relu);
    const auto x = random_x<float>(6002, 16, 33);
    const auto head = x.topRows(1100);
    for (const int th : {2, 3})
      simd::for_each_arch([&](auto arch) { check_against_reference<float, decltype(arch)>(s, p, head, 0, {.threads = th}); });
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      const auto one = kc::compress<float, Arch>(s, p, head, 0, {.threads = 1});
      INFO(Arch::name());
      CHECK(kc::compress<float, Arch>(s, p, head, 0, {.threads = 2}) == one);
      CHECK(kc::compress<float, Arch>(s, p, head, 0, {.threads = 3, .stores = kc::store_mode::streaming}) == one);
      const auto all = kc::compress<float, Arch>(s, p, x, 0, {.threads = 1});
      REQUIRE(all.rows() == 3000);
      CHECK(kc::compress<float, Arch>(s, p, x, 0, {.threads = 2}) == all);
      CHECK(all.topRows(one.rows()) == one);
    });
  }
}

TEMPLATE_TEST_CASE("compress: a non-finite W1 value of the MLP pool is named on every path and split",
                   "[compress][pool][errors]", float, double) {
  // On hardware-FMA paths W1's values are checked by the product that packs W1 (no pass of their
  // own; compress/detail/gemm.hpp), on the others by the validation: either way the call throws
  // naming the element. Grids: NSA's (every entry in place) and one whose first entries have
  // masked slots (the copied form); threads 1 to 3 (6002 rows, ≈ 3000 entries: more than 2 tiles
  // of 1024, so 2 threads split by entries; 1100 rows on NSA's grid: by columns of W1, the
  // mlp_entries_shared path); the first, a middle and the last
  // element; NaN and both infinities. Also a call with no complete entry, and compress_stream.
  using Real = TestType;
  const Real bad[] = {std::numeric_limits<Real>::quiet_NaN(), std::numeric_limits<Real>::infinity(),
                      -std::numeric_limits<Real>::infinity()};
  const auto x = random_x<Real>(6002, 16, 41);
  for (const auto conv : {kc::grid_convention::nsa, kc::grid_convention::v4}) {
    const kc::operator_spec s{.grid = {.window = 4, .stride = 2, .convention = conv}, .pool = kc::pool_kind::mlp};
    const auto good = params_for<Real>(s, 16, 0, 0, false, false, false, kc::mlp_activation::relu);
    const index_t n = good.mlp_w1.size();
    int v = 0;
    for (const index_t at : {index_t(0), n / 2 + 3, n - 1}) {
      auto p = good;
      p.mlp_w1.data()[at] = bad[v++ % 3];
      const std::string name = "params.mlp_w1[" + std::to_string(at) + "]";
      simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        for (const index_t rows : {index_t(1100), index_t(6002)})
          for (const int th : {1, 2, 3}) {
            INFO(Arch::name() << " " << kc::to_string(conv) << " rows " << rows << " threads " << th << " " << name);
            const auto xs = x.topRows(rows);
            CHECK_THROWS_WITH((kc::compress<Real, Arch>(s, p, xs, 0, {.threads = th})),
                              Contains(name) && Contains("must be finite"));
            kvphase::matrix_t<Real> out(s.head_grid(0).num_entries(rows), 16);
            CHECK_THROWS_WITH((kc::compress_into<Real, Arch>(s, p, kvphase::matrix_view<Real>(xs.data(), rows, 16),
                                                             kvphase::matrix_mut_view<Real>(out.data(), out.rows(), 16), 0,
                                                             {.threads = th})),
                              Contains(name));
          }
        // no complete entry: the validation itself names it
        REQUIRE(s.head_grid(0).num_entries(1) == 0);
        CHECK_THROWS_WITH((kc::compress<Real, Arch>(s, p, x.topRows(1), 0)), Contains(name));
        CHECK_THROWS_WITH((kc::compress_stream<Real, Arch>(s, p, 16)), Contains(name));
      });
    }
    // and it flags nothing in finite weights (the rows themselves are the GEMM tests' business)
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      CHECK_NOTHROW(kc::compress<Real, Arch>(s, good, x.topRows(1100), 0, {.threads = 2}));
    });
  }
}

TEST_CASE("compress: per-head parameters and grid offsets", "[compress][pool]") {
  auto s = kc::v41();
  s.heads = 3;
  s.head_offsets = {0, 1, 0};
  const auto ps = kc::make_head_params<double>(s, 64, kc::preset_init(s, 1));
  const auto x = random_x<double>(21, 64, 3);
  const auto ys = kc::compress_heads<double>(s, ps, x);
  REQUIRE(ys.size() == 3);
  CHECK(ys[0].rows() == 10);  // ⌊21/2⌋
  CHECK(ys[1].rows() == 11);  // origin 1: entry 0 pools (−1, 0), then … up to (19, 20)
  CHECK(ys[2].rows() == 10);
  CHECK(ys[0] != ys[2]);      // different parameters per head
  CHECK(ys[0] == kc::compress(s, ps[0], x, 0));
  REQUIRE_THROWS_WITH(kc::compress_heads<double>(s, std::span(ps.data(), 2), x), Contains("params.size()"));
}

// ---- bad input ----------------------------------------------------------------------------------------
TEST_CASE("compress: each bad input raises kvphase::error naming the parameter", "[compress][pool][errors]") {
  const auto x = random_x<float>(16, 4, 1);
  auto expect = [&](const kc::operator_spec& s, const kc::pool_params<float>& p, const std::string& name,
                    index_t head = 0) {
    INFO(s << " expecting " << name);
    REQUIRE_THROWS_AS(kc::compress(s, p, x, head), kvphase::error);
    REQUIRE_THROWS_WITH(kc::compress(s, p, x, head), Contains(name));
  };
  kc::pool_params<float> none;
  expect({.grid = {.window = 4, .stride = 0}}, none, "stride");
  expect({.grid = {.window = 2, .stride = 4}}, none, "window");
  expect({.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::weights, .slot_weights = {1, 1, 1}}, none,
         "slot_weights.size()");
  expect({.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::weights, .slot_weights = {1, NAN, 1, 1}}, none,
         "slot_weights");
  expect({.grid = {.window = 4, .stride = 2}, .pool = kc::pool_kind::weights, .slot_weights = {1, 1, 0, 0}}, none,
         "slot_weights");  // entry 0 keeps only the zero-weight slots 2, 3
  expect({.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::slot_gate, .slot_bias = {0, 1}}, none,
         "slot_bias.size()");
  expect({.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::slot_gate, .slot_bias = {0, 1, INFINITY, 0}},
         none, "slot_bias");
  expect({.grid = {.window = 6, .stride = 2}, .pool = kc::pool_kind::two_stream}, none, "window");
  // a sequence with no complete entry (the first ends at position 31 > 15) gives zero rows
  CHECK(kc::compress(kc::operator_spec{.grid = {.window = 32, .stride = 32}}, none, x).rows() == 0);
  expect({.grid = {.window = 4, .stride = 4}}, none, "head", 1);
  {
    kc::operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::slot_gate};
    kc::pool_params<float> p;
    p.content_u.setOnes(3);  // d = 4
    expect(s, p, "params.content_u.size()");
    p.content_u.setOnes(4);
    p.content_u[2] = NAN;
    expect(s, p, "params.content_u[2]");
    p.content_u.resize(0);
    p.slot_u.setOnes(3, 4);
    expect(s, p, "params.slot_u.rows()");
  }
  {
    kc::operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::channel_gate};
    kc::pool_params<float> p;
    p.w_c.setOnes(4, 6);
    p.w_z.setOnes(4, 5);
    expect(s, p, "params.w_z.cols()");
    p.w_z.setOnes(4, 6);
    p.slot_bias_c.setOnes(3, 6);
    expect(s, p, "params.slot_bias_c.rows()");
    p.slot_bias_c.setOnes(4, 6);
    p.w_c(1, 1) = INFINITY;
    expect(s, p, "params.w_c");
    p.w_c.setOnes(5, 6);
    expect(s, p, "params.w_c.rows()");
  }
  {
    kc::operator_spec s{.grid = {.window = 4, .stride = 2}, .pool = kc::pool_kind::two_stream};
    kc::pool_params<float> p;
    p.w_c.setOnes(4, 5);
    expect(s, p, "params.w_c.cols()");
    p.w_c.setOnes(4, 6);
    p.slot_bias_c.setOnes(4, 6);  // must be S × 2c = 2 × 6
    expect(s, p, "params.slot_bias_c.rows()");
  }
  {
    kc::operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mlp};
    expect(s, none, "params.mlp_w1");
    auto p = kc::make_params<float>(s, 4, {});
    p.mlp_w2.resize(3, 4);
    p.mlp_w2.setOnes();
    expect(s, p, "params.mlp_w2.rows()");
  }
  {
    kc::operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mean};
    kc::pool_params<float> p;
    p.w_z.setOnes(4, 4);
    expect(s, p, "params.w_z");  // not used by mean
    p.w_z.resize(0, 0);
    p.rms_weight.setOnes(4);
    expect(s, p, "params.rms_weight");  // needs spec.rmsnorm
    s.rmsnorm = true;
    p.rms_weight.setOnes(3);
    expect(s, p, "params.rms_weight.size()");
    s.rmsnorm = false;
    s.rope = {.anchor = kc::rope_anchor::start, .rope_dim = 6};
    expect(s, none, "rope.rope_dim");
    s.rope = {.anchor = kc::rope_anchor::start, .theta = NAN};
    expect(s, none, "rope.theta");
  }
  {
    kc::operator_spec s{.grid = {.window = 4, .stride = 4}};
    matrix_t<float> out(3, 4);
    REQUIRE_THROWS_WITH(kc::compress_into<float>(s, none, kvphase::matrix_view<float>(x.data(), 16, 4),
                                                 kvphase::matrix_mut_view<float>(out.data(), 3, 4)),
                        Contains("out.rows()"));
    matrix_t<float> out2(4, 3);
    REQUIRE_THROWS_WITH(kc::compress_into<float>(s, none, kvphase::matrix_view<float>(x.data(), 16, 4),
                                                 kvphase::matrix_mut_view<float>(out2.data(), 4, 3)),
                        Contains("out.cols()"));
    REQUIRE_THROWS_WITH(kc::compress(s, none, x, 0, {.threads = -1}), Contains("options.threads"));
    REQUIRE_THROWS_WITH(kc::compress(s, none, x, 0, {.interleave = -1}), Contains("options.interleave"));
    REQUIRE_THROWS_WITH(kc::make_params<float>(s, 4, {.out_dim = 3}), Contains("init.out_dim"));
  }
}

// ---- incremental form ---------------------------------------------------------------------------------
TEST_CASE("compress_stream: feeding the sequence in pieces reproduces the one-shot entries exactly",
          "[compress][pool][stream]") {
  std::vector<kc::operator_spec> specs;
  for (auto name : kc::preset_names) specs.push_back(kc::preset(name));
  specs.push_back({.grid = {.window = 6, .stride = 2, .origin = 3}, .pool = kc::pool_kind::max});
  specs.push_back({.grid = {.window = 5, .stride = 3, .origin = 4, .convention = kc::grid_convention::nsa},
                   .pool = kc::pool_kind::mean});
  specs.push_back({.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::slot_gate,
                   .slot_bias = {0.5, -1, 2, 0}, .content_std = 1.0});
  for (const auto& s0 : specs) {
    auto s = s0;
    s.heads = 2;
    s.head_offsets = {0, 3};
    if (s.grid.window > 64) s.grid = {.window = 16, .stride = 16};  // keep v4_hca-like small
    const index_t d = 64, N = 150;
    const auto x = random_x<float>(N, d, 21);
    for (index_t head = 0; head < 2; ++head) {
      auto init = kc::preset_init(s, 5);
      if (s.pool == kc::pool_kind::slot_gate && s.name.empty()) init.project_payload = false;
      const auto p = kc::make_params<float>(s, d, init, head);
      const auto whole = kc::compress(s, p, x, head);
      simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        const auto whole_arch = kc::compress<float, Arch>(s, p, x, head);
        kc::compress_stream<float, Arch> st(s, p, d, head);
        matrix_t<float> got(0, whole.cols());
        kvphase::rng::philox_stream r(77, static_cast<std::uint64_t>(head));
        index_t pos = 0;
        while (pos < N) {
          const index_t k = std::min<index_t>(N - pos, static_cast<index_t>(r.below(13)));  // 0 … 12 tokens
          const matrix_t<float> piece = x.middleRows(pos, k);
          const auto rows = st.append(piece);
          matrix_t<float> next(got.rows() + rows.rows(), got.cols());
          next << got, rows;
          got = next;
          pos += k;
          CHECK(st.buffered_tokens() <= s.grid.window + 12);
        }
        INFO(s << " head " << head << " arch " << Arch::name());
        CHECK(st.entries_emitted() == whole.rows());
        CHECK(got == whole_arch);
      });
    }
  }
}

TEST_CASE("make_params: counter-based, per head, right shapes", "[compress][pool][params]") {
  const auto s = kc::v4_csa();
  const auto init = kc::preset_init(s, 42);
  const auto a = kc::make_params<float>(s, 32, init, 0);
  const auto b = kc::make_params<float>(s, 32, init, 0);
  const auto h1 = kc::make_params<float>(s.heads == 1 ? [&] { auto t = s; t.heads = 2; return t; }() : s, 32, init, 1);
  CHECK(a.w_c == b.w_c);
  CHECK(a.w_z == b.w_z);
  CHECK(a.w_c != h1.w_c);
  CHECK(a.w_c.rows() == 32);
  CHECK(a.w_c.cols() == 64);        // [a | b], c = d = 32
  CHECK(a.slot_bias_c.rows() == 4);  // S × 2c
  CHECK(a.slot_bias_c.cols() == 64);
  CHECK(a.slot_bias_c.isZero());     // bias_std = 0: zero bias of the right shape
  CHECK(a.rms_weight.size() == 32);
  CHECK(kc::output_dim(s, a, 32) == 32);
  const auto p = kc::make_params<double>(kc::paper_ref(), 16, kc::preset_init(kc::paper_ref(), 1));
  CHECK(p.slot_u.rows() == 8);
  CHECK(p.slot_u.cols() == 16);
  CHECK(p.w_c.rows() == 16);
  const auto n = kc::make_params<double>(kc::nsa(), 8, {.mlp_hidden = 5});
  CHECK(n.mlp_w1.rows() == 32 * 8);
  CHECK(n.mlp_w1.cols() == 5);
  CHECK(n.mlp_w2.rows() == 5);
  CHECK(n.mlp_pos.rows() == 32);
  const auto m = kc::make_params<float>(kc::operator_spec{.pool = kc::pool_kind::mean}, 8);
  CHECK(m.output_dim(kc::operator_spec{.pool = kc::pool_kind::mean}, 8) == 8);
  REQUIRE_THROWS_WITH(kc::make_params<float>(kc::operator_spec{.pool = kc::pool_kind::mean}, 8, {.project_payload = true}),
                      Contains("init.project_payload"));
}

// The C++ results tests/python compares kvphase.compress with (same inputs, same bits): with
// KVPHASE_COMPRESS_REF_DIR set, one line per case in <dir>/cases.txt (name dtype N d params_seed
// E c) and the raw row-major input <name>.x and output <name>.out; without it (as under ctest)
// the cases only run and are checked for their shapes.
namespace {
template <class Real>
void write_reference_case(const char* dir, std::FILE* manifest, const char* name, const kc::operator_spec& spec,
                          index_t N, index_t d, long long params_seed) {
  matrix_t<Real> x(N, d);
  kvphase::rng::philox_stream s(7, kvphase::rng::hash_text(name));
  for (index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<Real>(s.normal());
  const auto p = params_seed >= 0 ? kc::make_preset_params<Real>(spec, d, static_cast<std::uint64_t>(params_seed))
                                  : kc::pool_params<Real>{};
  const matrix_t<Real> out = kc::compress<Real>(spec, p, x);
  CHECK(out.rows() == spec.grid.num_entries(N));
  if (!dir) return;
  auto dump = [&](const std::string& path, const matrix_t<Real>& m) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(m.data(), sizeof(Real), static_cast<std::size_t>(m.size()), f) == static_cast<std::size_t>(m.size()));
    std::fclose(f);
  };
  dump(std::string(dir) + "/" + name + ".x", x);
  dump(std::string(dir) + "/" + name + ".out", out);
  std::fprintf(manifest, "%s %s %td %td %lld %td %td\n", name, sizeof(Real) == 4 ? "float32" : "float64", N, d,
               params_seed, static_cast<index_t>(out.rows()), static_cast<index_t>(out.cols()));
}
}  // namespace

TEST_CASE("python reference: compress results for tests/python", "[compress][python_reference]") {
  const char* dir = std::getenv("KVPHASE_COMPRESS_REF_DIR");
  std::FILE* manifest = nullptr;
  if (dir) {
    manifest = std::fopen((std::string(dir) + "/cases.txt").c_str(), "w");
    REQUIRE(manifest != nullptr);
  }
  const kc::operator_spec mean84{.grid = {.window = 8, .stride = 4}, .pool = kc::pool_kind::mean, .name = "mean84"};
  write_reference_case<float>(dir, manifest, "mean84", mean84, 16, 8, -1);
  write_reference_case<double>(dir, manifest, "mean84_f64", mean84, 37, 5, -1);
  write_reference_case<float>(dir, manifest, "v4_csa", kc::v4_csa(), 67, 64, 3);
  write_reference_case<float>(dir, manifest, "v4_hca", kc::v4_hca(), 300, 64, 4);
  write_reference_case<double>(dir, manifest, "v41", kc::v41(), 33, 64, 5);
  write_reference_case<float>(dir, manifest, "nsa", kc::nsa(), 100, 16, 6);
  write_reference_case<double>(dir, manifest, "paper_ref", kc::paper_ref(), 64, 16, 7);
  write_reference_case<float>(dir, manifest, "full", kc::full(), 16, 8, -1);
  if (manifest) std::fclose(manifest);
}

// ---- cost model (compress/cost.hpp): hand counts ------------------------------------------------

TEST_CASE("compress_cost: mean W = S = 4 over 16 tokens of 8 channels, by hand", "[compress][cost]") {
  const kc::operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mean};
  const auto c = kc::compress_cost<float>(s, kc::pool_params<float>{}, 8, 16);
  CHECK(c.entries == 4);
  CHECK(c.tokens_read == 16);
  CHECK(c.slots == 16);
  CHECK(c.out_dim == 8);
  CHECK(c.input_bytes == 16 * 8 * 4);
  CHECK(c.weight_bytes == 0);
  CHECK(c.output_bytes == 4 * 8 * 4);
  CHECK(c.projection_flops == 0);
  CHECK(c.pool_flops == 2 * 16 * 8);  // one FMA per slot and channel
  CHECK(c.norm_flops == 0);
  CHECK(c.rope_flops == 0);
  CHECK(c.intensity() == Approx(256.0 / 640.0).epsilon(1e-15));
  // the tokens after the last complete entry are not read
  CHECK(kc::compress_cost<float>(s, kc::pool_params<float>{}, 8, 19).tokens_read == 16);
}

TEST_CASE("compress_cost: V4-CSA-shaped two-stream with projections, RMSNorm weight and RoPE, by hand",
          "[compress][cost]") {
  kc::operator_spec s = kc::v4_csa();  // W = 8, S = 4, v4 grid: entry 0 has 4 masked slots
  s.rope.rope_dim = 2;
  const auto p = kc::make_params<float>(s, 8, {.project_payload = true, .out_dim = 4, .rms_weight = true});
  const auto c = kc::compress_cost<float>(s, p, 8, 16);
  CHECK(c.entries == 4);
  CHECK(c.slots == 4 * 8 - 4);
  CHECK(c.tokens_read == 16);
  CHECK(c.out_dim == 4);
  CHECK(c.input_bytes == 16 * 8 * 4);
  // W_C 8 × 8, W_Z 8 × 8, slot bias 4 × 8, RMSNorm weight 4
  CHECK(c.weight_bytes == (64 + 64 + 32 + 4) * 4);
  CHECK(c.output_bytes == 4 * 4 * 4);
  CHECK(c.projection_flops == 2 * 16 * 8 * 8 * 2);   // two d × 2c projections of 16 tokens
  CHECK(c.pool_flops == 7 * 28 * 4 + 4 * 4);        // (softmax 4 + pool 2 + logit+bias 1) per slot·channel, 1 divide
  CHECK(c.norm_flops == 4 * (3 * 4 + 3 + 4));       // sum of squares 2c, 3 scalar, scale c, weight c
  CHECK(c.rope_flops == 4 * 9);                     // one rotated pair per entry
  CHECK(c.flops() == 4096 + 800 + 76 + 36);
  CHECK(c.bytes() == 512 + 656 + 64);
}

TEST_CASE("compress_cost: NSA-shaped MLP pool, by hand", "[compress][cost]") {
  const kc::operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mlp};
  const auto p = kc::make_params<float>(s, 2);  // c = d = 2, H = 2c = 4, position encoding, zero biases
  const auto c = kc::compress_cost<float>(s, p, 2, 12);
  CHECK(c.entries == 3);
  CHECK(c.slots == 12);
  // position encoding 4 × 2, W1 8 × 4, b1 4, W2 4 × 2, b2 2
  CHECK(c.weight_bytes == (8 + 32 + 4 + 8 + 2) * 4);
  CHECK(c.projection_flops == 0);
  CHECK(c.pool_flops == 24 + 192 + 12 + 12 + 48 + 6);
  const auto cd = kc::compress_cost<double>(s, kc::make_params<double>(s, 2), 2, 12);
  CHECK(cd.input_bytes == 12 * 2 * 8);
  CHECK(cd.flops() == c.flops());
}

TEST_CASE("compress_cost: bound from intensity and the machine's balance point, bad input names the parameter",
          "[compress][cost]") {
  const kc::operator_spec s{.grid = {.window = 4, .stride = 4}, .pool = kc::pool_kind::mean};
  const auto c = kc::compress_cost<float>(s, kc::pool_params<float>{}, 8, 16);  // 256 FLOP, 512 B read, 128 written
  kc::pass_bound b{};
  CHECK(c.read_bytes() == 512);
  CHECK(kc::bound_seconds(c, 1.0, 1.0, &b) == Approx(512e-9).epsilon(1e-12));
  CHECK(b == kc::pass_bound::memory);
  CHECK(kc::bound_seconds(c, 0.1, 1.0, &b) == Approx(2560e-9).epsilon(1e-12));
  CHECK(b == kc::pass_bound::compute);
  CHECK_THROWS_WITH(kc::bound_seconds(c, 0.0, 1.0), Catch::Contains("peak_gflops"));
  CHECK_THROWS_WITH(kc::compress_cost<float>(s, kc::pool_params<float>{}, 0, 16), Catch::Contains("x.cols()"));
}
