// The libtorch LM (lm/model.hpp): its compressed layers equal kvphase::compress:: on the same
// weights, and a tiny model learns key–value recall (quick run, < 60 s).
// REQUIRE only: libtorch pulls in glog, whose CHECK macro replaces Catch's.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include <unistd.h>

#include "kvphase/attention/compressed.hpp"
#include "kvphase/attention/select.hpp"
#include "kvphase/compress/checkpoint.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/lm/blas.hpp"
#include "kvphase/lm/checkpoint.hpp"
#include "kvphase/lm/data.hpp"
#include "kvphase/lm/model.hpp"
#include "kvphase/lm/train.hpp"

using namespace kvphase;

namespace {
matrix_t<float> rows_of(const torch::Tensor& t) {  // [1, N, c] → N × c
  return lm::detail::to_matrix(t.squeeze(0));
}

// The causal [1, 2, 1]/4 low-pass of lm::detail::causal_blur in double: y_t = (x_{t−2} +
// 2·x_{t−1} + x_t) / (sum of the taps that exist).
torch::Tensor blur_reference(const torch::Tensor& x) {
  auto xd = x.to(torch::kFloat64).contiguous();
  auto y = torch::zeros_like(xd);
  const index_t B = xd.size(0), T = xd.size(1), D = xd.size(2);
  auto a = xd.accessor<double, 3>();
  auto o = y.accessor<double, 3>();
  const double w[3] = {1.0, 2.0, 1.0};  // taps at t − 2, t − 1, t
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t) {
      double n = 0.0;
      for (index_t k = 0; k < 3; ++k)
        if (t - 2 + k >= 0) n += w[k];
      for (index_t d = 0; d < D; ++d) {
        double v = 0.0;
        for (index_t k = 0; k < 3; ++k)
          if (t - 2 + k >= 0) v += w[k] * a[b][t - 2 + k][d];
        o[b][t][d] = v / n;
      }
    }
  return y;
}

// A one-layer config of kind k on the stride-4 grid (W = 8 for csa, 4 for gated: HCA) with
// rows of d_model channels, heads of width c and rope_dim rotated channels.
lm::model_config small_config(lm::layer_kind k, index_t d_model, index_t c, index_t rope_dim) {
  lm::model_config cfg;
  cfg.d_model = d_model;
  cfg.head_dim = c;
  cfg.rope_dim = rope_dim;
  cfg.stride = 4;
  cfg.window = k == lm::layer_kind::csa ? 8 : 4;
  cfg.schedule = lm::to_string(k);
  return cfg;
}

// The quick runs' data (32 context tokens, 4 pairs of 8 keys and 8 values, 4 filler tokens)
// and model (d = 32, 2 heads of 16, 8 rotated channels); each test sets its schedule.
lm::data_config tiny_data() {
  lm::data_config d;
  d.context = 32;
  d.pairs = 4;
  d.queries = 4;
  d.keys = 8;
  d.values = 8;
  d.filler = 4;
  return d;
}
lm::model_config tiny_model(const lm::data_config& d) {
  lm::model_config m;
  m.vocab = d.vocab();
  m.d_model = 32;
  m.heads = 2;
  m.head_dim = 16;
  m.mlp_hidden = 64;
  m.rope_dim = 8;
  return m;
}

// A [n, m] double tensor as an Eigen matrix (row-major, as torch's contiguous layout).
matrix_t<double> dmat(const torch::Tensor& t) {
  auto c = t.contiguous();
  matrix_t<double> m(c.size(0), c.size(1));
  std::memcpy(m.data(), c.data_ptr<double>(), sizeof(double) * static_cast<std::size_t>(m.size()));
  return m;
}

// Largest |torch − compress::| allowed for one compressor's entries (see the first test case):
// 2·γ_n·(1 + max|logit|)·max|out|·√c, with n = D + 2W + c + 4 (+ 3 for the blur's two adds
// and one division before the projection).
double compressor_tolerance(lm::compressor& comp, const torch::Tensor& x, const matrix_t<float>& want) {
  const auto& cfg = comp->cfg;
  const double u = std::ldexp(1.0, -24);
  const double n = static_cast<double>(cfg.d_model + 2 * comp->window + cfg.head_dim + 4 + (cfg.blur ? 3 : 0));
  const double gamma = n * u / (1.0 - n * u);
  double zmax = 0.0;
  if (comp->gate_proj) {
    const auto xb = cfg.blur ? lm::detail::causal_blur(x) : x;
    zmax = comp->gate_proj->forward(xb).abs().max().item<double>() + comp->position_bias.abs().max().item<double>();
  }
  const double omax = std::max<double>(want.size() ? want.cwiseAbs().maxCoeff() : 0.0, 1.0);
  return 2.0 * gamma * (1.0 + zmax) * omax * std::sqrt(static_cast<double>(cfg.head_dim));
}
}  // namespace

// The BLAS named in train_lm's provenance is the library whose sgemm_ libtorch's products call:
// it is loaded (libtorch needs it), and a product through torch runs on it.
TEST_CASE("lm blas_backend names the library that provides sgemm_", "[lm]") {
  const torch::Tensor a = torch::ones({32, 32});
  REQUIRE(a.mm(a)[0][0].item<float>() == 32.0f);
  const auto b = kvphase::lm::blas_backend();
  INFO(b.name << " | " << b.library << " | " << b.config);
  REQUIRE(!b.library.empty());
  REQUIRE(std::filesystem::exists(b.library));
  // the name follows the library that provides sgemm_ (Debian's layout: …/openblas-*/libblas.so.3,
  // …/blas/libblas.so.3 for the reference one), not whichever BLAS-like library is loaded
  if (b.library.find("/openblas") != std::string::npos) REQUIRE(b.name == "openblas");
  if (b.library.find("/blas/libblas.so") != std::string::npos) REQUIRE(b.name == "reference");
  REQUIRE((b.name == "openblas") == (b.config.rfind("OpenBLAS", 0) == 0));
}

TEST_CASE("lm compressor equals compress:: on the same weights", "[lm]") {
  torch::manual_seed(7);
  torch::NoGradGuard ng;
  struct setting {
    lm::layer_kind kind;
    index_t W, S;
    bool rope;
    index_t origin = 0;  // grid origin φ0 (shifted grids)
    bool blur = false;   // compress:: pools the blurred rows (double reference)
    index_t head = -1;   // ≥ 0: shift_heads with 2 heads, that head's compressor
  };
  for (const setting st :
       {setting{lm::layer_kind::csa, 8, 4, true}, setting{lm::layer_kind::csa, 4, 2, false},
        setting{lm::layer_kind::gated, 8, 2, true}, setting{lm::layer_kind::gated, 4, 4, true},
        setting{lm::layer_kind::uniform, 8, 4, true}, setting{lm::layer_kind::gated, 4, 4, true, 1},
        setting{lm::layer_kind::gated, 4, 4, true, 3}, setting{lm::layer_kind::csa, 8, 4, true, 2},
        setting{lm::layer_kind::uniform, 8, 4, true, 2}, setting{lm::layer_kind::gated, 4, 4, true, 0, true},
        setting{lm::layer_kind::csa, 8, 4, true, 1, true}, setting{lm::layer_kind::gated, 4, 4, true, 0, false, 1},
        setting{lm::layer_kind::csa, 8, 4, true, 1, false, 1}, setting{lm::layer_kind::uniform, 8, 4, true, 0, false, 0}}) {
    lm::model_config cfg;
    cfg.d_model = 48;
    cfg.head_dim = 16;
    cfg.rope_dim = 8;
    cfg.window = st.W;
    cfg.stride = st.S;
    cfg.rope = st.rope;
    cfg.origin = st.origin;
    cfg.blur = st.blur;
    cfg.schedule = lm::to_string(st.kind);
    cfg.shift_heads = st.head >= 0;
    const index_t head = std::max<index_t>(st.head, 0);
    lm::compressor comp(cfg, st.kind, 0, head);
    // non-trivial gates, slot bias and norm weight
    if (comp->position_bias.defined()) comp->position_bias.normal_(0.0, 1.0);
    if (comp->gate_proj) comp->gate_proj->weight.mul_(3.0);
    comp->kv_norm->weight.normal_(1.0, 0.3);
    const index_t N = 37;  // not a multiple of S: the last partial block has no entry
    auto x = torch::randn({1, N, cfg.d_model});
    auto got = rows_of(comp->forward(x));
    const auto spec = cfg.layer_spec(st.kind, 0, head);
    // shift_heads (2 heads): head h's grid is (2W, 2S) at origin φ0 + h·S
    const index_t G = cfg.shift_heads ? 2 : 1;
    REQUIRE(spec.grid.origin == st.origin + head * st.S);
    REQUIRE(spec.grid.window == G * st.W);
    REQUIRE(spec.grid.stride == G * st.S);
    const auto p = comp->params();
    // blur: compress:: pools the rows low-passed in double (rounded once to float)
    const auto xs = st.blur ? blur_reference(x).to(torch::kFloat32) : x;
    matrix_t<float> xin = st.kind == lm::layer_kind::uniform ? rows_of(comp->kv_proj->forward(xs)) : rows_of(xs);
    const auto want = compress::compress<float>(spec, p, xin);
    INFO(lm::to_string(st.kind) << " W=" << st.W << " S=" << st.S << " rope=" << st.rope << " origin=" << st.origin
                                << " blur=" << st.blur << " head=" << st.head);
    REQUIRE(got.rows() == want.rows());
    REQUIRE(got.cols() == want.cols());
    REQUIRE(got.rows() == spec.grid.num_entries(N));
    if (spec.grid.origin == 0) REQUIRE(got.rows() == N / spec.grid.stride);
    // Tolerance: each output value is reached through one projection of length D, a softmax
    // and a pool over W slots, an RMSNorm over c channels and a rotation (4 roundings); each
    // implementation's error is within γ_n = n·u/(1 − n·u) of the magnitudes involved (Higham,
    // Accuracy and Stability, §3.1), u = 2^-24, n = D + 2W + c + 4. A logit error δ moves a
    // softmax weight by at most |δ| relative, so the pooled value's error gains a factor
    // (1 + max|logit|); the RMSNorm scales by 1/rms and the weight, bounded by max|out|.
    // With the blur the reference rows differ from torch's float blur by the blur's own
    // roundings (two adds and a division, ≤ 3u relative): 3 more in n (compressor_tolerance).
    const double tol = compressor_tolerance(comp, x, want);
    const double err = (got - want).cwiseAbs().maxCoeff();
    INFO("max |torch - compress::| = " << err << ", tolerance " << tol);
    std::cout << lm::to_string(st.kind) << " W=" << st.W << " S=" << st.S << " origin=" << st.origin
              << " blur=" << st.blur << " head=" << st.head << " err " << err << " tol " << tol << "\n";
    REQUIRE(err <= tol);
  }
}

TEST_CASE("lm per-sequence grid offsets equal compress:: at each sequence's origin", "[lm]") {
  // random-offset training: sequence b's grid origin is (origin + offsets[b]) mod S. Each row's
  // existing entries must equal compress:: at that origin; the padding entries of rows with
  // fewer entries are never visible (last source beyond every query).
  torch::manual_seed(5);
  torch::NoGradGuard ng;
  for (const auto kind : {lm::layer_kind::gated, lm::layer_kind::csa}) {
    lm::model_config cfg = small_config(kind, 24, 8, 4);
    cfg.origin = 1;
    lm::compressor comp(cfg, kind);
    comp->position_bias.normal_(0.0, 1.0);
    comp->gate_proj->weight.mul_(3.0);
    const index_t N = 30, B = 4;
    auto x = torch::randn({B, N, cfg.d_model});
    auto off = torch::tensor(std::vector<std::int64_t>{0, 1, 2, 3}, torch::kLong);
    const auto L = comp->layout(N, off);
    auto got = comp->pool(x, L);
    for (index_t b = 0; b < B; ++b) {
      auto spec = cfg.layer_spec(kind);
      spec.grid.origin = (cfg.origin + b) % cfg.stride;
      const index_t E = spec.grid.num_entries(N);
      const auto want = compress::compress<float>(spec, comp->params(), rows_of(x.narrow(0, b, 1)));
      REQUIRE(want.rows() == E);
      const auto g = rows_of(got.narrow(0, b, 1).narrow(1, 0, E));
      const double tol = compressor_tolerance(comp, x.narrow(0, b, 1), want);
      const double err = (g - want).cwiseAbs().maxCoeff();
      INFO(lm::to_string(kind) << " row " << b << " origin " << spec.grid.origin << ": err " << err << ", tol " << tol);
      REQUIRE(err <= tol);
      for (index_t e = E; e < got.size(1); ++e) REQUIRE(L.last[b][e].item<std::int64_t>() >= N);
    }
  }
}

TEST_CASE("lm per-head grids: head h attends to its own compressor as a one-head layer on that grid would", "[lm]") {
  // shift_heads: the layer's output for head h must equal a one-head layer whose grid is head
  // h's, (H·W, H·S) at origin h·S, with head h's weights. In double, with o_proj the identity
  // (products by 1 and sums with 0 are exact), so the two differ only by the rounding order of
  // the same sums; a wrong grid, mask or padding entry moves outputs by O(1).
  torch::manual_seed(11);
  torch::NoGradGuard ng;
  for (const auto kind : {lm::layer_kind::gated, lm::layer_kind::csa}) {
    lm::model_config cfg = small_config(kind, 32, 16, 8);  // d_model = H·c: o_proj can be the identity
    cfg.heads = 2;
    cfg.shift_heads = true;
    cfg.validate();
    const index_t H = cfg.heads, C = cfg.head_dim, T = 37, B = 2;
    lm::attention att(cfg, kind, 0);
    att->to(torch::kFloat64);
    REQUIRE(att->comps.size() == static_cast<std::size_t>(H));
    for (auto& cp : att->comps) {
      cp->position_bias.normal_(0.0, 1.0);
      cp->gate_proj->weight.mul_(3.0);
      cp->kv_norm->weight.normal_(1.0, 0.3);
    }
    att->sink.normal_(0.0, 1.0);
    att->o_proj->weight.copy_(torch::eye(H * C, torch::kFloat64));
    auto x = torch::randn({B, T, cfg.d_model}, torch::kFloat64);
    auto got = att->forward(x);
    // the number of entries differs between the heads' grids (origins 0 and 4 on stride 8), so
    // head 1 is padded with never-visible rows
    REQUIRE(att->comps[0]->entries(T) != att->comps[1]->entries(T));
    for (index_t h = 0; h < H; ++h) {
      lm::model_config one = cfg;
      one.heads = 1;
      one.shift_heads = false;
      one.window = H * cfg.window;
      one.stride = H * cfg.stride;
      one.origin = h * cfg.stride;
      one.validate();
      lm::attention ref(one, kind, 0);
      ref->to(torch::kFloat64);
      ref->q_proj->weight.copy_(att->q_proj->weight.narrow(0, h * C, C));
      ref->kv_proj->weight.copy_(att->kv_proj->weight);
      ref->kv_norm->weight.copy_(att->kv_norm->weight);
      ref->sink.copy_(att->sink.narrow(0, h, 1));
      ref->o_proj->weight.copy_(torch::eye(H * C, C, torch::kFloat64));
      auto& src = att->comps[static_cast<std::size_t>(h)];
      REQUIRE(ref->comp->grid().origin == src->grid().origin);
      REQUIRE(ref->comp->grid().stride == src->grid().stride);
      ref->comp->kv_proj->weight.copy_(src->kv_proj->weight);
      ref->comp->gate_proj->weight.copy_(src->gate_proj->weight);
      ref->comp->position_bias.copy_(src->position_bias);
      ref->comp->kv_norm->weight.copy_(src->kv_norm->weight);
      auto want = ref->forward(x).narrow(2, 0, C);
      auto g = got.narrow(2, h * C, C);
      // Bound: the chain is the compressor's (n = D + 2W + c + 4), a score of length c, a
      // softmax and a mix over K = E + T rows, a rotation: n = D + 2·(H·W) + 2c + 2K + 8 roundings
      // of u = 2^-53, amplified by (1 + max|gate logit| + max|score|) through the softmaxes,
      // and scaled by the largest value magnitude and √c, as in compressor_tolerance.
      const double u = std::ldexp(1.0, -53);
      const double K = static_cast<double>(src->entries(T) + T);
      const double n = static_cast<double>(cfg.d_model + 2 * src->window + 2 * C + 8) + 2.0 * K;
      const double gamma = n * u / (1.0 - n * u);
      const double zmax =
          src->gate_proj->forward(x).abs().max().item<double>() + src->position_bias.abs().max().item<double>();
      // |score| ≤ max‖q‖·max‖k‖/√c (Cauchy–Schwarz; RoPE keeps norms); values are the key rows
      auto q = att->q_proj->forward(x).narrow(2, h * C, C);
      auto keys = torch::cat({src->forward(x), att->kv_norm->forward(att->kv_proj->forward(x))}, 1);
      const double smax = q.norm(2, -1).max().item<double>() * keys.norm(2, -1).max().item<double>() /
                          std::sqrt(static_cast<double>(C));
      const double vmax = std::max(1.0, keys.abs().max().item<double>());
      const double tol = 2.0 * gamma * (1.0 + zmax + smax) * vmax * std::sqrt(static_cast<double>(C));
      const double err = (g - want).abs().max().item<double>();
      INFO(lm::to_string(kind) << " head " << h << ": err " << err << ", tol " << tol);
      std::cout << "shift_heads " << lm::to_string(kind) << " head " << h << " err " << err << " tol " << tol << "\n";
      REQUIRE(err <= tol);
      // and the heads differ: head h's entries are not head 1 − h's
      REQUIRE((got.narrow(2, h * C, C) - got.narrow(2, (1 - h) * C, C)).abs().max().item<double>() > 1e-3);
    }
  }
  // one gate slot profile per head's compressor, over its H·W slots
  lm::model_config cfg;
  cfg.schedule = "gated,full,gated";
  cfg.window = 4;
  cfg.shift_heads = true;
  lm::lm m(cfg);
  const auto prof = lm::slot_profiles(m);
  REQUIRE(prof.size() == 4);
  for (std::size_t i = 0; i < prof.size(); ++i) {
    REQUIRE(prof[i].layer == (i < 2 ? 0 : 2));
    REQUIRE(prof[i].head == static_cast<index_t>(i % 2));
    REQUIRE(prof[i].weight.size() == 8);
    double tot = 0.0;
    for (double w : prof[i].weight) tot += w;
    // float softmax over 8 slots (its weights sum to 1 within 8u), then a float mean over c
    // channels (c more roundings): within (8 + c + 2)·u of 1
    REQUIRE(std::abs(tot - 1.0) <= static_cast<double>(8 + cfg.head_dim + 2) * std::ldexp(1.0, -24));
  }
}

TEST_CASE("lm indexer: top-k selection equals attention::csa_select, the KL trains only the indexer", "[lm]") {
  torch::manual_seed(17);
  for (const auto kind : {lm::layer_kind::csa, lm::layer_kind::gated}) {
    lm::model_config cfg = small_config(kind, 32, 16, 8);
    cfg.heads = 2;
    cfg.top_k = 2;
    cfg.indexer_heads = 3;
    cfg.indexer_dim = 8;
    cfg.validate();
    const index_t B = 2, T = 37, HI = cfg.indexer_heads, dI = cfg.indexer_dim;
    lm::attention att(cfg, kind, 0);
    att->to(torch::kFloat64);
    {
      torch::NoGradGuard ng;
      for (auto& cp : {att->comp, att->idx->comp}) {
        cp->position_bias.normal_(0.0, 1.0);
        cp->kv_norm->weight.normal_(1.0, 0.3);
      }
    }
    auto x = torch::randn({B, T, cfg.d_model}, torch::kFloat64);
    torch::Tensor got, sel;
    {
      torch::NoGradGuard ng;
      got = att->forward(x);
      sel = att->selected;
    }
    const index_t E = att->comp->entries(T);
    REQUIRE(sel.sizes() == torch::IntArrayRef({B, T, E}));
    // the reference selection: attention::csa_select on the same index queries (rotated at t,
    // as the layer rotates them), head weights and index keys, per sequence
    torch::NoGradGuard ng;
    auto pos = torch::arange(T, torch::kLong);
    auto [cs, sn] = lm::detail::rope_tables(pos, cfg.rope_dim, cfg.rope_theta);
    auto qi = att->idx->q_proj->forward(x).reshape({B, T, HI, dI});
    qi = lm::detail::apply_rope(qi.permute({0, 2, 1, 3}), cs.to(torch::kFloat64), sn.to(torch::kFloat64), cfg.rope_dim)
             .permute({0, 2, 1, 3})
             .reshape({B, T, HI * dI});
    auto wi = att->idx->weights_proj->forward(x) / std::sqrt(static_cast<double>(HI));
    auto ki = att->idx->comp->forward(x);
    std::vector<index_t> positions(static_cast<std::size_t>(T));
    std::iota(positions.begin(), positions.end(), index_t(0));
    index_t partial = 0;  // queries that see more than top_k entries
    for (index_t b = 0; b < B; ++b) {
      const auto lists = attention::csa_select<double>(dmat(qi[b]), dmat(wi[b]), dmat(ki[b]), att->comp->grid(), positions,
                                                       attention::indexer_params{.heads = HI, .top_k = cfg.top_k});
      for (index_t t = 0; t < T; ++t) {
        std::vector<bool> want(static_cast<std::size_t>(E), false);
        for (index_t e : lists.of(t)) want[static_cast<std::size_t>(e)] = true;
        partial += att->comp->grid().num_visible(t) > cfg.top_k;
        for (index_t e = 0; e < E; ++e) {
          INFO(lm::to_string(kind) << " b " << b << " t " << t << " e " << e);
          REQUIRE(sel[b][t][e].item<bool>() == want[static_cast<std::size_t>(e)]);
        }
      }
    }
    REQUIRE(partial > 0);
    // every visible entry kept (top_k ≥ E): bit for bit the layer without an indexer
    lm::model_config all = cfg;
    all.top_k = E;
    lm::attention wide(all, kind, 0);
    lm::model_config off = cfg;
    off.top_k = 0;
    lm::attention plain(off, kind, 0);
    wide->to(torch::kFloat64);
    plain->to(torch::kFloat64);
    {
      auto src = att->named_parameters();
      for (auto& kv : wide->named_parameters()) kv.value().copy_(src[kv.key()]);
      for (auto& kv : plain->named_parameters()) kv.value().copy_(src[kv.key()]);
    }
    const auto y_all = wide->forward(x), y_plain = plain->forward(x);
    REQUIRE(torch::equal(y_all, y_plain));
    // with top_k = 2, a query that sees at most 2 entries gets the plain output; the others differ
    index_t same = 0, differ = 0;
    for (index_t t = 0; t < T; ++t) {
      const bool eq = torch::equal(got.narrow(1, t, 1), y_plain.narrow(1, t, 1));
      if (att->comp->grid().num_visible(t) <= cfg.top_k) {
        INFO("t " << t);
        REQUIRE(eq);
        ++same;
      } else {
        differ += !eq;
      }
    }
    INFO(same << " queries with <= top_k entries, " << differ << " of " << T - same << " others differ");
    REQUIRE(differ == T - same);
  }
  // the KL term: finite, >= 0, its gradient reaches the indexer and nothing else
  lm::model_config cfg = small_config(lm::layer_kind::csa, 32, 16, 8);
  cfg.top_k = 2;
  cfg.indexer_dim = 8;
  lm::attention att(cfg, lm::layer_kind::csa, 0);
  auto x = torch::randn({2, 37, cfg.d_model}, torch::requires_grad());
  att->forward(x);
  const double kl = att->indexer_kl.item<double>();
  INFO("indexer KL " << kl);
  REQUIRE(std::isfinite(kl));
  REQUIRE(kl > 0.0);
  att->indexer_kl.backward();
  index_t reached = 0;
  for (const auto& kv : att->named_parameters()) {
    const bool in_indexer = kv.key().rfind("indexer.", 0) == 0;
    const auto& g = kv.value().grad();
    const bool nonzero = g.defined() && g.abs().sum().item<double>() > 0.0;
    INFO(kv.key());
    if (in_indexer) reached += nonzero;
    else REQUIRE(!nonzero);
  }
  REQUIRE(reached >= 3);  // q_proj, weights_proj and the index-key compressor's projection
  REQUIRE((!x.grad().defined() || x.grad().abs().sum().item<double>() == 0.0));
  // rules
  lm::model_config bad = cfg;
  bad.indexer_dim = 4;  // < rope_dim 8
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("indexer_dim"));
  bad = cfg;
  bad.heads = 2;
  bad.shift_heads = true;
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("shift_heads"));
}

TEST_CASE("lm nsa layer: blocks equal attention::nsa_select, each head equals attention::compressed_attention (gated)", "[lm]") {
  // The layer in double with o_proj the identity (d_model = H·c): head h's output, rotated back,
  // must equal compressed_attention in gated mode on the layer's own rotated queries, entries and
  // raw rows, with the layer's blocks and gates; the blocks must equal nsa_select on the
  // compressed branch's probabilities (no sink, summed over heads).
  torch::manual_seed(19);
  torch::NoGradGuard ng;
  lm::model_config cfg = small_config(lm::layer_kind::gated, 32, 16, 8);
  cfg.schedule = "nsa";
  cfg.window = 8;  // W = 2S: overlapping entries, so the overlap mapping spreads an entry over two blocks
  cfg.heads = 2;
  cfg.select_block = 8;
  cfg.select_top_n = 3;
  cfg.select_initial = 1;
  cfg.select_local = 1;
  cfg.validate();
  const index_t B = 2, T = 37, H = cfg.heads, C = cfg.head_dim;
  lm::attention att(cfg, lm::layer_kind::nsa, 0);
  att->to(torch::kFloat64);
  att->comp->position_bias.normal_(0.0, 1.0);
  att->comp->kv_norm->weight.normal_(1.0, 0.3);
  att->sink.normal_(0.0, 1.0);
  att->branch_gate->weight.mul_(3.0);
  att->o_proj->weight.copy_(torch::eye(H * C, torch::kFloat64));
  auto x = torch::randn({B, T, cfg.d_model}, torch::kFloat64);
  const auto got = att->forward(x);
  const auto blocks = att->selected_blocks;
  const index_t NB = (T + cfg.select_block - 1) / cfg.select_block;
  REQUIRE(blocks.sizes() == torch::IntArrayRef({B, T, NB}));

  auto pos = torch::arange(T, torch::kLong);
  auto [cs32, sn32] = lm::detail::rope_tables(pos, cfg.rope_dim, cfg.rope_theta);
  const auto cs = cs32.to(torch::kFloat64), sn = sn32.to(torch::kFloat64);
  auto q = lm::detail::apply_rope(att->q_proj->forward(x).reshape({B, T, H, C}).permute({0, 2, 1, 3}), cs, sn, cfg.rope_dim);
  auto kv = lm::detail::apply_rope(att->kv_norm->forward(att->kv_proj->forward(x)), cs, sn, cfg.rope_dim);
  auto ent = att->comp->forward(x);  // [B, E, C], rotated at the anchors
  auto gates = torch::sigmoid(att->branch_gate->forward(x)).reshape({B, T, H, 3});
  const auto grid = att->comp->grid();
  const index_t E = ent.size(1);
  std::vector<index_t> positions(static_cast<std::size_t>(T));
  std::iota(positions.begin(), positions.end(), index_t(0));
  const attention::block_select_params bp{.block = cfg.select_block, .top_n = cfg.select_top_n,
                                          .initial = cfg.select_initial, .local = cfg.select_local};
  double worst = 0.0, tol_min = 1e300;
  index_t chosen = 0;  // queries whose free block was chosen by importance
  for (index_t b = 0; b < B; ++b) {
    // P[t, e] = Σ_h softmax over the visible entries (no sink)
    matrix_t<double> P = matrix_t<double>::Zero(T, E);
    for (index_t t = 0; t < T; ++t) {
      const index_t nv = grid.num_visible(t);
      if (nv == 0) continue;
      for (index_t h = 0; h < H; ++h) {
        auto sc = torch::matmul(ent[b].narrow(0, 0, nv), q[b][h][t]) / std::sqrt(static_cast<double>(C));
        auto pr = torch::softmax(sc, 0);
        for (index_t e = 0; e < nv; ++e) P(t, e) += pr[e].item<double>();
      }
    }
    const auto lists = attention::nsa_select<double>(P, grid, positions, bp);
    for (index_t t = 0; t < T; ++t) {
      std::vector<bool> want(static_cast<std::size_t>(NB), false);
      for (index_t j : lists.of(t)) want[static_cast<std::size_t>(j)] = true;
      chosen += t / cfg.select_block + 1 > cfg.select_initial + cfg.select_local;
      for (index_t j = 0; j < NB; ++j) {
        INFO("b " << b << " t " << t << " block " << j);
        REQUIRE(blocks[b][t][j].item<bool>() == want[static_cast<std::size_t>(j)]);
      }
    }
    for (index_t h = 0; h < H; ++h) {
      const auto Q = dmat(q[b][h]);
      const auto Kc = dmat(ent[b]);
      const auto K = dmat(kv[b]);
      const auto G = dmat(gates[b].select(1, h));  // [T × 3] row-major: (cmp, slc, win)
      std::vector<double> g(G.data(), G.data() + G.size());
      attention::compressed_params cp{.window = cfg.raw_window, .compressed = true,
                                      .combine = attention::combine_mode::gated, .select_block = cfg.select_block};
      cp.attn.sink = att->sink[h].item<double>();
      matrix_t<double> O(T, C);
      attention::compressed_attention<double>(Q, positions, Kc, Kc, grid, K, K, cp, O,
                                              attention::compressed_selection<double>{.blocks = &lists, .gates = g});
      auto Ot = torch::from_blob(O.data(), {T, C}, torch::kFloat64).clone();
      auto want = lm::detail::apply_rope(Ot, cs, -sn, cfg.rope_dim);  // rotated back by −t, as the layer does
      auto have = got[b].narrow(1, h * C, C);
      // double rounding of the same sums in another order: 2·γ_n·(1 + max|logit|)·max|out|·√c,
      // n = c + T + E + 8 (a dot product, a softmax over ≤ T + E + 1 logits, three gated branches, a rotation)
      const double u = std::ldexp(1.0, -53), n = static_cast<double>(C + T + E + 8);
      const double lmax = std::max(torch::matmul(q[b][h], kv[b].transpose(0, 1)).abs().max().item<double>(),
                                   torch::matmul(q[b][h], ent[b].transpose(0, 1)).abs().max().item<double>()) /
                              std::sqrt(static_cast<double>(C)) +
                          std::abs(cp.attn.sink);
      const double tol = 2.0 * n * u / (1.0 - n * u) * (1.0 + lmax) * std::max(1.0, want.abs().max().item<double>()) *
                         std::sqrt(static_cast<double>(C));
      const double err = (have - want).abs().max().item<double>();
      worst = std::max(worst, err);
      tol_min = std::min(tol_min, tol);
      INFO("b " << b << " head " << h << ": max |layer - compressed_attention| = " << err << ", tolerance " << tol);
      REQUIRE(err <= tol);
    }
  }
  std::cout << "nsa layer vs compressed_attention: max err " << worst << ", smallest tolerance " << tol_min << "\n";
  REQUIRE(chosen > 0);
  lm::model_config bad = cfg;
  bad.select_top_n = 1;  // < initial + local
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("select_top_n"));
  bad = cfg;
  bad.top_k = 2;
  bad.indexer_dim = 8;
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("nsa"));
}

TEST_CASE("lm causal blur equals a double reference, gate entropy of equal logits is -ln W", "[lm]") {
  torch::manual_seed(9);
  torch::NoGradGuard ng;
  auto x = torch::randn({2, 11, 5});
  const auto y = lm::detail::causal_blur(x).to(torch::kFloat64);
  const auto ref = blur_reference(x);
  // float: two adds, one scaling by 2 (exact) and one division per value: γ_3 of Σ w|x| / n
  const double u = std::ldexp(1.0, -24), g3 = 3.0 * u / (1.0 - 3.0 * u);
  const auto bound = g3 * blur_reference(x.abs()) + 1e-300;
  REQUIRE(((y - ref).abs() <= bound).all().item<bool>());
  REQUIRE(torch::equal(y.narrow(1, 0, 1), x.narrow(1, 0, 1).to(torch::kFloat64)));  // y_0 = x_0

  // zero gate weights and slot bias: a = 1/n over the n unmasked slots, Σ a·log a = −ln n.
  // gated W = S = 4 at origin 0 has no masked slot: −ln 4 (float softmax and log: a few u).
  lm::model_config cfg;
  cfg.schedule = "gated";
  cfg.window = 4;
  cfg.stride = 4;
  lm::compressor comp(cfg, lm::layer_kind::gated);
  comp->gate_proj->weight.zero_();
  comp->track_entropy = true;
  comp->forward(torch::randn({2, 16, cfg.d_model}));
  const double ne = comp->neg_entropy.item<double>();
  INFO("neg entropy " << ne);
  REQUIRE(std::abs(ne + std::log(4.0)) <= 16.0 * u * std::log(4.0));
}

TEST_CASE("lm checkpoint is read by the V4 loader like a real model", "[lm]") {
  torch::manual_seed(11);
  torch::NoGradGuard ng;
  lm::model_config cfg;
  cfg.schedule = "csa,uniform,full";
  lm::lm m(cfg);
  m->model->blocks[0]->self_attn->comp->position_bias.normal_(0.0, 1.0);
  const auto dir = std::filesystem::temp_directory_path() / ("kvphase_lm_ckpt_" + std::to_string(::getpid()));
  lm::save_checkpoint(m, dir.string());
  const io::safetensors_checkpoint ck((dir / "model.safetensors").string());
  const auto opt = compress::v4_options_for((dir / "model.safetensors").string());
  REQUIRE(!compress::has_v4_compressor(ck, 2, opt));  // the full layer has none
  auto x = torch::randn({1, 29, cfg.d_model});
  for (index_t l : {0, 1}) {
    const auto L = compress::load_v4_layer<float>(ck, l, opt);
    REQUIRE(L.csa);
    REQUIRE(L.compressor.spec.grid.window == cfg.window);
    REQUIRE(L.compressor.spec.grid.stride == cfg.stride);
    const auto got = rows_of(m->model->blocks[static_cast<std::size_t>(l)]->self_attn->comp->forward(x));
    const auto want = compress::compress<float>(L.compressor.spec, L.compressor.params, rows_of(x));
    REQUIRE(want.rows() == got.rows());
    // the bound of the equality test above (n = D + 2W + c + 4, logit gain 1 + max|logit|)
    const auto& P = L.compressor.params;
    const double zmax = (rows_of(x) * P.w_z).cwiseAbs().maxCoeff() + P.slot_bias_c.cwiseAbs().maxCoeff();
    const double u = std::ldexp(1.0, -24), n = static_cast<double>(cfg.d_model + 2 * cfg.window + cfg.head_dim + 4);
    const double tol = 2.0 * n * u / (1.0 - n * u) * (1.0 + zmax) * std::max<double>(want.cwiseAbs().maxCoeff(), 1.0) *
                       std::sqrt(static_cast<double>(cfg.head_dim));
    INFO("layer " << l << ": max |torch - loaded| = " << (got - want).cwiseAbs().maxCoeff() << ", tolerance " << tol);
    REQUIRE((got - want).cwiseAbs().maxCoeff() <= tol);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("lm checkpoint of per-head grids: every head's compressor stored, head 0's loaded on its grid", "[lm]") {
  torch::manual_seed(13);
  torch::NoGradGuard ng;
  lm::model_config cfg = small_config(lm::layer_kind::gated, 32, 16, 8);  // W = S = 4
  cfg.schedule = "gated,full";
  cfg.heads = 2;
  cfg.shift_heads = true;
  cfg.validate();
  lm::lm m(cfg);
  auto& comps = m->model->blocks[0]->self_attn->comps;
  REQUIRE(comps.size() == 2);
  for (auto& cp : comps) cp->position_bias.normal_(0.0, 1.0);
  const auto dir = std::filesystem::temp_directory_path() / ("kvphase_lm_heads_ckpt_" + std::to_string(::getpid()));
  lm::save_checkpoint(m, dir.string());
  const io::safetensors_checkpoint ck((dir / "model.safetensors").string());
  // every head's compressor tensors, bit for bit (F32 of an F32 model)
  for (std::size_t h = 0; h < comps.size(); ++h) {
    const std::string P = "model.layers.0.self_attn.compressor" + (h ? "_h" + std::to_string(h) : std::string());
    for (const auto& [name, t] : std::vector<std::pair<std::string, torch::Tensor>>{
             {P + ".kv_proj.weight", comps[h]->kv_proj->weight},
             {P + ".gate_proj.weight", comps[h]->gate_proj->weight},
             {P + ".position_bias", comps[h]->position_bias},
             {P + ".kv_norm.weight", comps[h]->kv_norm->weight}}) {
      INFO(name);
      REQUIRE(ck.contains(name));
      const auto v = ck.values<float>(name);
      const auto c = t.contiguous();
      REQUIRE(v.size() == static_cast<std::size_t>(c.numel()));
      REQUIRE(std::equal(v.begin(), v.end(), c.data_ptr<float>()));
    }
  }
  REQUIRE(!ck.contains("model.layers.0.self_attn.compressor_h2.position_bias"));
  // the loader reads head 0's compressor on head 0's grid (H·W, H·S) = (8, 8) at origin 0
  const auto opt = compress::v4_options_for((dir / "model.safetensors").string());
  const auto L = compress::load_v4_layer<float>(ck, 0, opt);
  REQUIRE(L.compressor.spec.grid.window == cfg.heads * cfg.window);
  REQUIRE(L.compressor.spec.grid.stride == cfg.heads * cfg.stride);
  auto x = torch::randn({1, 41, cfg.d_model});
  const auto got = rows_of(comps[0]->forward(x));
  const auto want = compress::compress<float>(L.compressor.spec, L.compressor.params, rows_of(x));
  REQUIRE(want.rows() == got.rows());
  const double tol = compressor_tolerance(comps[0], x, want);
  INFO("max |torch - loaded| = " << (got - want).cwiseAbs().maxCoeff() << ", tolerance " << tol);
  REQUIRE((got - want).cwiseAbs().maxCoeff() <= tol);
  std::ifstream cj(dir / "config.json");
  const auto js = nlohmann::json::parse(cj);
  REQUIRE(js.at("kvphase").at("shift_heads").get<bool>());
  std::filesystem::remove_all(dir);
}

TEST_CASE("lm checkpoint loads back bit for bit for every layer kind and refuses a damaged one naming the file",
          "[lm]") {
  torch::manual_seed(17);
  torch::NoGradGuard ng;
  const auto base = std::filesystem::temp_directory_path() / ("kvphase_lm_load_" + std::to_string(::getpid()));
  struct variant {
    std::string schedule;
    bool shift_heads;
    index_t top_k;
  };
  const auto tokens = torch::randint(0, 64, {2, 37}, torch::kLong);
  for (const variant& v : {variant{"csa,uniform,full", false, 0}, variant{"gated,nsa", false, 0},
                           variant{"csa,csa", false, 3}, variant{"uniform,csa", true, 0}}) {
    lm::model_config cfg = small_config(lm::layer_kind::csa, 32, 16, 8);
    cfg.schedule = v.schedule;
    cfg.shift_heads = v.shift_heads;
    cfg.top_k = v.top_k;
    cfg.validate();
    lm::lm m(cfg);
    for (auto& p : m->parameters()) p.normal_(0.0, 0.5);  // nothing left at its initial value
    const auto dir = (base / v.schedule).string();
    lm::save_checkpoint(m, dir);
    lm::lm r = lm::load_checkpoint(dir);
    INFO("schedule " << v.schedule << (v.shift_heads ? " shift_heads" : "") << " top_k " << v.top_k);
    REQUIRE(io::fields_to_json(r->cfg) == io::fields_to_json(cfg));
    const auto a = m->named_parameters(), b = r->named_parameters();
    REQUIRE(a.size() == b.size());
    for (const auto& kv : a) {
      INFO(kv.key());
      REQUIRE(b.contains(kv.key()));
      REQUIRE(torch::equal(kv.value(), b[kv.key()]));
    }
    m->eval();
    r->eval();
    REQUIRE(torch::equal(m->forward(tokens), r->forward(tokens)));
  }
  // damage one checkpoint at a time: config.json, the format, a tensor's shape, a missing, an
  // extra or a non-finite tensor, a uniform layer's streams and gates
  const std::string good = (base / "csa,uniform,full").string();
  const io::safetensors_file f(good + "/model.safetensors");
  auto expect = [&](const std::string& dir, const std::string& what) {
    INFO(dir);
    REQUIRE_THROWS_WITH(lm::load_checkpoint(dir), Catch::Contains(what));
  };
  const std::string P = "model.layers.1.self_attn.compressor";
  using shape_t = std::vector<std::int64_t>;
  auto copy_with = [&](const std::string& name, auto&& edit, const std::string& format = "kvphase.lm/1",
                       const std::vector<std::pair<std::string, float>>& extra = {}) {
    const std::string dir = (base / name).string();
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(good + "/config.json", dir + "/config.json",
                               std::filesystem::copy_options::overwrite_existing);
    io::safetensors_writer w;
    for (const auto& t : f.tensors()) {
      auto vals = f.values<float>(t.name);
      shape_t shape = t.shape;
      if (edit(t.name, shape, vals)) w.add<float>(t.name, shape, std::span<const float>(vals), io::tensor_dtype::f32);
    }
    for (const auto& [n, x] : extra) {
      const shape_t one{1};
      const std::vector<float> v{x};
      w.add<float>(n, one, std::span<const float>(v), io::tensor_dtype::f32);
    }
    w.metadata("format", format);
    w.write(dir + "/model.safetensors");
    return dir;
  };
  auto keep = [](const std::string&, shape_t&, std::vector<float>&) { return true; };
  REQUIRE_NOTHROW(lm::load_checkpoint(copy_with("same", keep)));  // the copy itself loads
  expect(copy_with("format", keep, "other/1"), "metadata format = other/1: must be kvphase.lm/1");
  expect(copy_with("missing", [](const std::string& n, shape_t&, std::vector<float>&) { return n != "lm_head.weight"; }),
         "tensor = lm_head.weight: is not in the file");
  expect(copy_with("extra", keep, "kvphase.lm/1", {{"model.layers.9.x", 1.0f}}),
         "tensor = model.layers.9.x: has no place in the model");
  expect(copy_with("nan",
                   [](const std::string& n, shape_t&, std::vector<float>& v) {
                     if (n == "model.norm.weight") v[3] = std::numeric_limits<float>::quiet_NaN();
                     return true;
                   }),
         "tensor 'model.norm.weight'[3]");
  expect(copy_with("shape",
                   [](const std::string& n, shape_t& s, std::vector<float>& v) {
                     if (n == "model.norm.weight") {
                       s[0] -= 1;
                       v.pop_back();
                     }
                     return true;
                   }),
         "tensor 'model.norm.weight' shape");
  expect(copy_with("streams",
                   [&](const std::string& n, shape_t&, std::vector<float>& v) {
                     if (n == P + ".kv_proj.weight") v.back() += 1.0f;
                     return true;
                   }),
         "must hold one stream twice");
  expect(copy_with("gates",
                   [&](const std::string& n, shape_t&, std::vector<float>& v) {
                     if (n == P + ".position_bias") v[0] = 0.5f;
                     return true;
                   }),
         "position_bias' = non-zero: must be zero");
  {  // a config.json describing another model: the shapes no longer match
    const std::string dir = copy_with("config", keep);
    std::ifstream in(dir + "/config.json");
    auto j = nlohmann::ordered_json::parse(in);
    in.close();
    j["kvphase"]["mlp_hidden"] = 96;
    std::ofstream(dir + "/config.json") << j.dump(2);
    expect(dir, "shape = [");
    j["kvphase"]["mlp_hidden"] = 65536;  // a model far larger than the file: refused before allocating it
    j["kvphase"]["d_model"] = 8192;
    std::ofstream(dir + "/config.json") << j.dump(2);
    expect(dir, "must hold the model");
    j["kvphase"]["no_such_field"] = 1;
    std::ofstream(dir + "/config.json") << j.dump(2);
    expect(dir, "no_such_field");
    std::ofstream(dir + "/config.json") << "{ not json";
    expect(dir, "is not valid JSON");
    std::filesystem::remove(dir + "/config.json");
    expect(dir, "must be a readable file");
  }
  std::filesystem::remove_all(base);
}

TEST_CASE("lm model is causal through entries, raw window and MLPs", "[lm]") {
  // A change at a token must not move the outputs of earlier positions (causality through
  // the compressed entries, the raw window and the MLPs).
  torch::manual_seed(3);
  torch::NoGradGuard ng;
  struct setting {
    const char* sched;
    bool shift = false, blur = false, offsets = false, heads = false;
    index_t topk = 0;
  };
  for (const setting st :
       {setting{"full,full"}, setting{"csa,csa"}, setting{"gated,uniform"}, setting{"gated,gated", true},
        setting{"gated,csa", false, true}, setting{"gated,gated", false, false, true},
        setting{"gated,csa", false, false, true, true}, setting{"csa,gated", false, false, true, false, 2},
        setting{"nsa,csa"}}) {
    lm::model_config cfg;
    cfg.schedule = st.sched;
    cfg.shift_layers = st.shift;
    cfg.blur = st.blur;
    cfg.shift_heads = st.heads;
    cfg.top_k = st.topk;
    if (st.topk) cfg.indexer_dim = cfg.rope_dim;
    if (std::string(st.sched) == "gated,gated") cfg.window = 4;
    lm::lm m(cfg);
    if (st.shift) REQUIRE(m->model->blocks[1]->self_attn->comp->origin == cfg.stride / 2);  // ⌊1·S/2⌋
    torch::Tensor off;
    if (st.offsets) off = torch::tensor(std::vector<std::int64_t>{3}, torch::kLong);
    auto tok = torch::randint(cfg.vocab, {1, 40}, torch::kLong);
    auto a = m->forward(tok, -1, -1, off);
    auto tok2 = tok.clone();
    tok2.index_put_({0, 25}, (tok[0][25].item<std::int64_t>() + 1) % cfg.vocab);
    auto b = m->forward(tok2, -1, -1, off);
    INFO(st.sched << " shift " << st.shift << " blur " << st.blur << " offsets " << st.offsets << " heads " << st.heads
                  << " top_k " << st.topk);
    REQUIRE(torch::equal(a.narrow(1, 0, 25), b.narrow(1, 0, 25)));
    REQUIRE(!torch::equal(a.narrow(1, 25, 1), b.narrow(1, 25, 1)));
  }
}

TEST_CASE("lm attention readout: mass on the rows holding the key and value, by the grid's geometry", "[lm]") {
  // Untrained models (the readout is geometry plus the attention weights). Queries sit 8 filler
  // tokens after the context and the raw window is 4, so only entries hold context tokens in a
  // compressed layer. W = S = 4: a key at phase 0-2 shares its block with its value (every row
  // holding one holds both), a key at phase 3 never does. W = 8, S = 4: some entry holds both at
  // every phase. A full layer's rows are single tokens: never both.
  lm::data_config d = tiny_data();
  d.gap = 8;
  d.modulus = 4;
  const index_t seqs = 16, Q = seqs * d.queries;
  torch::manual_seed(7);
  lm::model_config a = tiny_model(d);
  a.schedule = "gated,full";
  a.window = 4;
  lm::lm ma(a);
  const auto ra = lm::attention_readout(ma, d, 5, seqs);
  REQUIRE(ra.layers == 2);
  REQUIRE(ra.heads == a.heads);
  for (index_t l = 0; l < 2; ++l)
    for (index_t h = 0; h < ra.heads; ++h) {
      std::int64_t n = 0;
      for (index_t g = 0; g < d.modulus; ++g)
        for (const bool hit : {true, false}) {
          const auto& c = ra.cell(l, h, g, hit);
          INFO("layer " << l << " head " << h << " group " << g << " hit " << hit);
          n += c.queries;
          REQUIRE(c.top_pair + c.top_key + c.top_value + c.top_neither == c.queries);
          REQUIRE(c.key >= 0.0);
          REQUIRE(c.key <= static_cast<double>(c.queries) * (1.0 + 1e-6));
          REQUIRE(c.value <= static_cast<double>(c.queries) * (1.0 + 1e-6));
          if (l == 1 || g == 3) {  // full layer, or a pair split by a block boundary
            REQUIRE(c.pair == 0.0);
            REQUIRE(c.top_pair == 0);
          } else {  // the same rows hold the key and the value
            REQUIRE(c.pair == c.key);
            REQUIRE(c.pair == c.value);
            REQUIRE(c.top_key + c.top_value == 0);
          }
        }
      REQUIRE(n == Q);
    }
  // layer 0's key mass recomputed from the weights and the grid, query by query
  {
    torch::NoGradGuard ng;
    ma->eval();
    auto& att = ma->model->blocks[0]->self_attn;
    att->keep = true;
    const auto b = lm::make_batch(d, 5, 1, 0, seqs);
    ma->forward(b.tokens);
    const auto P = att->kept_p.contiguous();  // [B, H, T, K]
    att->keep = false;
    const auto grid = att->comp->grid();
    const index_t T = d.length(), E = grid.num_entries(T), K = P.size(3);
    REQUIRE(K == E + T);
    const auto acc = P.accessor<float, 4>();
    double want = 0.0, got = 0.0;
    for (index_t q = 0; q < Q; ++q) {
      const index_t bi = b.rows[q].item<std::int64_t>(), t = b.at[q].item<std::int64_t>();
      const index_t kp = b.key_position[static_cast<std::size_t>(q)];
      for (index_t h = 0; h < a.heads; ++h) {
        for (index_t e = 0; e < E; ++e) {
          const auto r = grid.sources(e);
          if (r.first <= kp && kp <= r.last) want += acc[bi][h][t][e];
        }
        want += acc[bi][h][t][E + kp];  // the raw row of the key token (outside the window: 0)
      }
    }
    for (index_t h = 0; h < a.heads; ++h)
      for (index_t g = 0; g < d.modulus; ++g)
        for (const bool hit : {true, false}) got += ra.cell(0, h, g, hit).key;
    INFO("recomputed " << want << ", readout " << got);
    REQUIRE(std::fabs(want - got) <= 1e-9 * static_cast<double>(Q * a.heads));
  }
  lm::model_config c8 = tiny_model(d);
  c8.schedule = "csa";
  lm::lm mb(c8);
  const auto rb = lm::attention_readout(mb, d, 5, seqs);
  for (index_t h = 0; h < rb.heads; ++h)
    for (index_t g = 0; g < d.modulus; ++g)
      for (const bool hit : {true, false}) {
        const auto& c = rb.cell(0, h, g, hit);
        INFO("W = 8: head " << h << " group " << g << " hit " << hit);
        REQUIRE(c.pair <= c.key);
        REQUIRE(c.pair <= c.value);
        if (c.queries > 0) REQUIRE(c.pair > 0.0);  // the entry of the pair's block holds both
        if (g != 3) REQUIRE(c.pair == c.key);
      }
  // an NSA layer has no single weight per row
  lm::model_config cn = tiny_model(d);
  cn.schedule = "nsa";
  lm::lm mn(cn);
  REQUIRE_THROWS_AS(lm::attention_readout(mn, d, 5, 4), kvphase::error);
}

TEST_CASE("lm quick run: a tiny compressed model learns recall beyond the value marginal", "[lm]") {
  const lm::data_config d = tiny_data();
  lm::model_config m = tiny_model(d);
  m.schedule = "csa,csa";
  const lm::train_config t{.steps = 300, .batch = 32, .lr = 3e-3, .eval_sequences = 512, .threads = 1};
  const auto r = lm::train(m, d, t, 1);
  // A model that ignores the context predicts at best the value marginal: cross-entropy
  // ln(values) at every query. Learning recall must bring the evaluated mean loss below it by
  // more than 5 standard errors of that mean.
  const double bound = std::log(static_cast<double>(d.values));
  INFO("eval loss " << r.eval.mean_loss() << " ± " << r.eval.loss_se() << ", bound " << bound << ", recall "
                    << r.eval.mean_recall());
  std::cout << "quick run: eval loss " << r.eval.mean_loss() << " ± " << r.eval.loss_se() << " (bound " << bound
            << "), recall " << r.eval.mean_recall() << ", " << r.cpu_seconds << " CPU s\n";
  REQUIRE(r.eval.mean_loss() + 5.0 * r.eval.loss_se() < bound);
  REQUIRE(r.history.front().train_loss > r.history.back().train_loss);
}

TEST_CASE("lm early stop at a recall: the stopped run is the full run's prefix, on the full run's schedule", "[lm]") {
  const lm::data_config d = tiny_data();
  lm::model_config m = tiny_model(d);
  m.schedule = "csa,full";
  const lm::train_config t{.steps = 60, .batch = 16, .eval_every = 10, .eval_sequences = 64, .threads = 1};
  const auto full = lm::train(m, d, t, 5);
  REQUIRE(full.steps_done == 60);
  REQUIRE(full.history.size() == 7);  // steps 1, 10, …, 60
  // a target first reached at a middle snapshot: the best recall of snapshots 1..3, stopping at
  // the first snapshot that reaches it
  double target = 0.0;
  for (std::size_t i = 1; i <= 3; ++i) target = std::max(target, full.history[i].eval_recall);
  std::size_t first = 0;
  while (full.history[first].eval_recall < target) ++first;
  INFO("target " << target << ", first reached at step " << full.history[first].step);
  lm::train_config ts = t;
  ts.stop_recall = target;
  const auto cut = lm::train(m, d, ts, 5);
  REQUIRE(cut.steps_done == full.history[first].step);
  REQUIRE(cut.history.size() == first + 1);
  // the same steps, losses and recalls as the full run up to the stop: the learning rate
  // followed the 60-step schedule, not one of steps_done
  for (std::size_t i = 0; i <= first; ++i) {
    REQUIRE(cut.history[i].step == full.history[i].step);
    REQUIRE(cut.history[i].train_loss == full.history[i].train_loss);
    REQUIRE(cut.history[i].eval_loss == full.history[i].eval_loss);
  }
  REQUIRE(cut.tokens == static_cast<double>(cut.steps_done * t.batch * d.length()));
  lm::train_config bad = t;
  bad.stop_recall = 1.5;
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("stop_recall"));
  bad.stop_recall = 0.5;
  bad.eval_every = 0;
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("eval_every > 0"));
}

TEST_CASE("lm data seed: apart from the initialisation, the default is the run's seed", "[lm]") {
  const lm::data_config d = tiny_data();
  lm::model_config m = tiny_model(d);
  m.schedule = "csa,full";
  const lm::train_config t{.steps = 6, .batch = 8, .eval_every = 3, .eval_sequences = 32, .threads = 1};
  auto losses = [](const lm::train_result& r) {
    std::vector<double> v;
    for (const auto& s : r.history) {
      v.push_back(s.train_loss);
      v.push_back(s.eval_loss);
    }
    return v;
  };
  const auto a = lm::train(m, d, t, 5);  // init 5, data 5
  lm::train_config t5 = t;
  t5.data_seed = 5;
  const auto b = lm::train(m, d, t5, 5);  // the same run, the data seed named
  lm::train_config t6 = t;
  t6.data_seed = 6;
  const auto c = lm::train(m, d, t6, 5);  // init 5, data 6
  const auto e = lm::train(m, d, t, 6);   // init 6, data 6
  REQUIRE(losses(a) == losses(b));
  REQUIRE(a.eval.hits == b.eval.hits);
  // the data seed changes the data (c is not a), and only the data (c is not e, whose data it
  // shares): every snapshot's losses differ
  const auto la = losses(a), lc = losses(c), le = losses(e);
  for (std::size_t i = 0; i < la.size(); ++i) {
    REQUIRE(lc[i] != la[i]);
    REQUIRE(lc[i] != le[i]);
  }
  REQUIRE(t6.data_seed_for(5) == 6);
  REQUIRE(t.data_seed_for(5) == 5);
  lm::train_config bad = t;
  bad.data_seed = -2;
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("data_seed") && Catch::Contains("-2"));
}

TEST_CASE("lm quick run with an indexer: the indexer's KL to the dense attention falls", "[lm]") {
  const lm::data_config d = tiny_data();
  lm::model_config m = tiny_model(d);
  m.schedule = "csa,csa";
  m.top_k = 2;
  m.indexer_dim = 8;
  const lm::train_config t{.steps = 150, .batch = 16, .eval_every = 50, .eval_sequences = 64, .threads = 1};
  const auto r = lm::train(m, d, t, 3);
  std::ostringstream curve;
  for (const auto& s : r.history) curve << s.step << ":" << s.indexer_kl << " ";
  INFO("indexer KL by snapshot " << curve.str());
  REQUIRE(r.history.size() == 4);  // steps 1, 50, 100, 150
  for (const auto& s : r.history) REQUIRE((std::isfinite(s.indexer_kl) && s.indexer_kl >= 0.0));
  // the mean over steps 101–150 against step 1's: the indexer learns the attention it selects for
  REQUIRE(r.history.back().indexer_kl < 0.5 * r.history.front().indexer_kl);
}

TEST_CASE("lm data: pairs, queries and the filler gap, the same draws for any gap and batch split", "[lm]") {
  lm::data_config d;
  d.context = 24;
  d.pairs = 5;
  d.queries = 3;
  d.keys = 6;
  d.values = 7;
  d.filler = 3;
  lm::data_config g = d;
  g.gap = 5;
  REQUIRE(g.length() == d.length() + 5);
  const index_t B = 6;
  const auto a = lm::make_batch(d, 7, 1, 0, B);
  const auto b = lm::make_batch(g, 7, 1, 0, B);
  const auto ta = a.tokens.accessor<std::int64_t, 2>();
  const auto tb = b.tokens.accessor<std::int64_t, 2>();
  const auto at = b.at.accessor<std::int64_t, 1>();
  const auto tg = b.target.accessor<std::int64_t, 1>();
  REQUIRE(a.key_position == b.key_position);
  for (index_t s = 0; s < B; ++s) {
    // the context and the queries are the gap-0 sequence's; the gap is filler
    for (index_t t = 0; t < d.context; ++t) REQUIRE(ta[s][t] == tb[s][t]);
    for (index_t t = 0; t < 2 * d.queries; ++t) REQUIRE(ta[s][d.context + t] == tb[s][g.context + g.gap + t]);
    for (index_t t = g.context; t < g.context + g.gap; ++t) REQUIRE(tb[s][t] >= g.keys + g.values);
    for (index_t t = g.context; t < g.context + g.gap; ++t) REQUIRE(tb[s][t] < g.vocab());
  }
  for (std::size_t q = 0; q < b.key_position.size(); ++q) {
    const auto s = static_cast<index_t>(q) / d.queries;
    const index_t kp = b.key_position[q];
    REQUIRE(at[static_cast<std::int64_t>(q)] == g.context + g.gap + 2 * (static_cast<index_t>(q) % d.queries));
    REQUIRE(kp + 1 < g.context);
    REQUIRE(tb[s][at[static_cast<std::int64_t>(q)]] == tb[s][kp]);  // the query repeats the key
    REQUIRE(tb[s][kp] < g.keys);
    REQUIRE(tg[static_cast<std::int64_t>(q)] == tb[s][kp + 1]);  // and its target is the pair's value
  }
  // sequences 2 … 4 drawn alone equal rows 2 … 4 of the batch
  const auto c = lm::make_batch(g, 7, 1, 2, 3);
  REQUIRE(torch::equal(c.tokens, b.tokens.narrow(0, 2, 3)));
  g.gap = -1;
  REQUIRE_THROWS_AS(g.validate(), kvphase::error);
}
