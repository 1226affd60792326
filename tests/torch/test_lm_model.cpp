// The libtorch LM (lm/model.hpp): its compressed layers equal kvphase::compress:: on the same
// weights, and a tiny model learns key–value recall (quick run, < 60 s).
// REQUIRE only: libtorch pulls in glog, whose CHECK macro replaces Catch's.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>

#include <unistd.h>

#include "kvphase/compress/checkpoint.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/lm/checkpoint.hpp"
#include "kvphase/lm/data.hpp"
#include "kvphase/lm/model.hpp"
#include "kvphase/lm/train.hpp"

using namespace kvphase;

namespace {
matrix_t<float> rows_of(const torch::Tensor& t) {  // [1, N, c] → N × c
  return lm::detail::to_matrix(t.squeeze(0));
}
}  // namespace

TEST_CASE("lm compressor equals compress:: on the same weights", "[lm]") {
  torch::manual_seed(7);
  torch::NoGradGuard ng;
  struct setting {
    lm::layer_kind kind;
    index_t W, S;
    bool rope;
  };
  for (const setting st : {setting{lm::layer_kind::csa, 8, 4, true}, setting{lm::layer_kind::csa, 4, 2, false},
                           setting{lm::layer_kind::gated, 8, 2, true}, setting{lm::layer_kind::gated, 4, 4, true},
                           setting{lm::layer_kind::uniform, 8, 4, true}}) {
    lm::model_config cfg;
    cfg.d_model = 48;
    cfg.head_dim = 16;
    cfg.rope_dim = 8;
    cfg.window = st.W;
    cfg.stride = st.S;
    cfg.rope = st.rope;
    cfg.schedule = lm::to_string(st.kind);
    lm::compressor comp(cfg, st.kind);
    // non-trivial gates, slot bias and norm weight
    if (comp->position_bias.defined()) comp->position_bias.normal_(0.0, 1.0);
    if (comp->gate_proj) comp->gate_proj->weight.mul_(3.0);
    comp->kv_norm->weight.normal_(1.0, 0.3);
    const index_t N = 37;  // not a multiple of S: the last partial block has no entry
    auto x = torch::randn({1, N, cfg.d_model});
    auto got = rows_of(comp->forward(x));
    const auto spec = cfg.layer_spec(st.kind);
    const auto p = comp->params();
    matrix_t<float> xin = st.kind == lm::layer_kind::uniform ? rows_of(comp->kv_proj->forward(x)) : rows_of(x);
    const auto want = compress::compress<float>(spec, p, xin);
    INFO(lm::to_string(st.kind) << " W=" << st.W << " S=" << st.S << " rope=" << st.rope);
    REQUIRE(got.rows() == want.rows());
    REQUIRE(got.cols() == want.cols());
    REQUIRE(got.rows() == N / st.S);
    // Tolerance: each output value is reached through one projection of length D, a softmax
    // and a pool over W slots, an RMSNorm over c channels and a rotation (4 roundings); each
    // implementation's error is within γ_n = n·u/(1 − n·u) of the magnitudes involved (Higham,
    // Accuracy and Stability, §3.1), u = 2^-24, n = D + 2W + c + 4. A logit error δ moves a
    // softmax weight by at most |δ| relative, so the pooled value's error gains a factor
    // (1 + max|logit|); the RMSNorm scales by 1/rms and the weight, bounded by max|out|.
    const double u = std::ldexp(1.0, -24);
    const double n = static_cast<double>(cfg.d_model + 2 * st.W + cfg.head_dim + 4);
    const double gamma = n * u / (1.0 - n * u);
    double zmax = 0.0;
    if (comp->gate_proj) zmax = comp->gate_proj->forward(x).abs().max().item<double>() +
                                comp->position_bias.abs().max().item<double>();
    const double omax = std::max<double>(want.cwiseAbs().maxCoeff(), 1.0);
    const double tol = 2.0 * gamma * (1.0 + zmax) * omax * std::sqrt(static_cast<double>(cfg.head_dim));
    const double err = (got - want).cwiseAbs().maxCoeff();
    INFO("max |torch - compress::| = " << err << ", tolerance " << tol);
    std::cout << lm::to_string(st.kind) << " W=" << st.W << " S=" << st.S << " err " << err << " tol " << tol << "\n";
    REQUIRE(err <= tol);
  }
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

TEST_CASE("lm model is causal through entries, raw window and MLPs", "[lm]") {
  // A change at a token must not move the outputs of earlier positions (causality through
  // the compressed entries, the raw window and the MLPs).
  torch::manual_seed(3);
  torch::NoGradGuard ng;
  for (const char* sched : {"full,full", "csa,csa", "gated,uniform"}) {
    lm::model_config cfg;
    cfg.schedule = sched;
    lm::lm m(cfg);
    auto tok = torch::randint(cfg.vocab, {1, 40}, torch::kLong);
    auto a = m->forward(tok);
    auto tok2 = tok.clone();
    tok2.index_put_({0, 25}, (tok[0][25].item<std::int64_t>() + 1) % cfg.vocab);
    auto b = m->forward(tok2);
    INFO(sched);
    REQUIRE(torch::equal(a.narrow(1, 0, 25), b.narrow(1, 0, 25)));
    REQUIRE(!torch::equal(a.narrow(1, 25, 1), b.narrow(1, 25, 1)));
  }
}

TEST_CASE("lm quick run: a tiny compressed model learns recall beyond the value marginal", "[lm]") {
  lm::data_config d;
  d.context = 32;
  d.pairs = 4;
  d.queries = 4;
  d.keys = 8;
  d.values = 8;
  d.filler = 4;
  lm::model_config m;
  m.vocab = d.vocab();
  m.d_model = 32;
  m.heads = 2;
  m.head_dim = 16;
  m.mlp_hidden = 64;
  m.rope_dim = 8;
  m.schedule = "csa,csa";
  lm::train_config t;
  t.steps = 300;
  t.batch = 32;
  t.lr = 3e-3;
  t.eval_sequences = 512;
  t.threads = 1;
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
