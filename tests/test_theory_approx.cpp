// Closed forms and the other results of kvphase::theory: extreme-value approximation (measured
// error), span straddling, two-stream overlap, content-logit gates, several heads, padding flips
// and the raw window.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#include "../theory/needle_mc.hpp"
#include "kvphase/theory/theory.hpp"

using namespace kvphase;

namespace {
compress::operator_spec mean_spec(index_t W, index_t S) {
  compress::operator_spec s;
  s.grid = {.window = W, .stride = S};
  return s;
}
compress::operator_spec gate_spec(index_t W, std::vector<double> b, double tau = 0) {
  compress::operator_spec s;
  s.grid = {.window = W, .stride = W};
  s.pool = compress::pool_kind::slot_gate;
  s.slot_bias = std::move(b);
  s.content_std = tau;
  s.validate();
  return s;
}
bool agree(double sim, double pred, double pred_err, index_t trials, double bound = 0) {
  const double se = std::hypot(std::sqrt(std::max(pred * (1 - pred), 0.25 / trials) / trials), pred_err);
  return std::abs(sim - pred) <= std::max(4 * se, 0.005) + bound;
}
}  // namespace

TEST_CASE("theory: Gumbel closed forms track the exact integral with a measured error", "[theory]") {
  // Measured on this set (W = S, single token, N 1K…128K, d 16…128) and documented in
  // theory/gumbel.md: |normal form − exact| ≤ 0.022, |sharp form − exact| ≤ 0.30.
  double worst_normal = 0, worst_sharp = 0;
  for (index_t S : {1, 4, 16}) {
    for (index_t N : {1024, 16384, 131072}) {
      for (index_t d : {16, 32, 64, 128}) {
        const auto spec = mean_spec(S, S);
        const theory::needle_model m{.context = N, .dim = d};
        const auto ex = theory::predict_recall_by_phase(spec, m);
        const auto g = theory::gumbel_recall_by_phase(spec, m);
        for (std::size_t i = 0; i < g.size(); ++i) {
          worst_normal = std::max(worst_normal, std::abs(g[i].recall_normal - ex.phases[i].recall));
          worst_sharp = std::max(worst_sharp, std::abs(g[i].recall_sharp - ex.phases[i].recall));
        }
      }
    }
  }
  std::printf("Gumbel: max |normal - exact| %.4f, max |sharp - exact| %.4f\n", worst_normal, worst_sharp);
  CHECK(worst_normal <= 0.025);
  CHECK(worst_sharp <= 0.30);
  // critical dimension grows like 2 S ln(N/S) for uniform pooling
  const auto a = theory::gumbel_recall_by_phase(mean_spec(4, 4), {.context = 4096, .dim = 64});
  const auto b = theory::gumbel_recall_by_phase(mean_spec(4, 4), {.context = 65536, .dim = 64});
  CHECK(b[0].critical_dim > a[0].critical_dim);
  CHECK(b[0].critical_dim / a[0].critical_dim == Approx(std::log(65536 / 4.0) / std::log(4096 / 4.0)).epsilon(0.25));
}

TEST_CASE("theory: span straddling is periodic under uniform pooling, a single token is not", "[theory]") {
  const auto spec = mean_spec(4, 4);
  const auto one = theory::span_shares_by_phase(spec, 1);
  for (const auto& s : one) {
    CHECK(s.entries_touched == 1);
    CHECK(s.max_share == Approx(0.25));
  }
  const auto three = theory::span_shares_by_phase(spec, 3);
  const double expect_max[4] = {0.75, 0.75, 0.5, 0.5};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(three[i].entries_touched == theory::chunks_touched(static_cast<index_t>(i), 3, 4));
    CHECK(three[i].max_share == Approx(expect_max[i]));
  }
  // recall follows the share: phases 0, 1 beat phases 2, 3, and simulation agrees
  const theory::needle_model m{.context = 2048, .dim = 8, .key_span = 3};
  const auto pred = theory::predict_recall_by_phase(spec, m);
  CHECK(pred.phases[0].recall > pred.phases[2].recall + 0.1);
  CHECK(pred.phases[0].recall == Approx(pred.phases[1].recall).margin(1e-9));
  const auto mc = theory_check::simulate(spec, m, 3000, 21);
  for (std::size_t i = 0; i < 4; ++i) CHECK(agree(mc[i].recall(), pred.phases[i].recall, pred.phases[i].error, 3000));
  // periodic in the phase: shifting the anchor by one stride changes nothing
  theory::needle_model m2 = m;
  m2.target_position = 1024 + 4 * 7;
  const auto pred2 = theory::predict_recall_by_phase(spec, m2);
  for (std::size_t i = 0; i < 4; ++i) CHECK(pred2.phases[i].recall == Approx(pred.phases[i].recall).margin(1e-9));
  CHECK_THROWS_WITH(theory::chunks_touched(4, 1, 4), Catch::Contains("phase"));
  CHECK_THROWS_WITH(theory::span_shares_by_phase(spec, 0), Catch::Contains("span"));
}

TEST_CASE("theory: V4 two-stream overlap never splits spans up to S + 1 and shrinks the gap", "[theory]") {
  for (index_t S : {2, 4, 8}) {
    CHECK(theory::max_never_split_span(S) == S + 1);
    for (index_t k = 1; k <= S + 1; ++k)
      for (index_t ph = 0; ph < S; ++ph) CHECK_FALSE(theory::span_is_split(2 * S, S, ph, k));
    CHECK(theory::span_is_split(2 * S, S, S - 1, S + 2));
    for (index_t ph = 0; ph < S; ++ph) CHECK(theory::span_is_split(S, S, ph, 2) == (ph + 2 > S));
  }
  theory::recall_options opt;
  opt.samples = 20000;
  const theory::needle_model m{.context = 2048, .dim = 8, .key_span = 3};
  const auto r = theory::two_stream_gap(4, m, opt);
  std::printf("two-stream: gap W=S %.4f, W=2S %.4f, ratio %.3f\n", r.non_overlapping.gap(), r.overlapping.gap(), r.gap_ratio());
  CHECK(r.overlapping.gap() < r.non_overlapping.gap());
  const auto mc = theory_check::simulate(mean_spec(8, 4), m, 3000, 22);
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(agree(mc[i].recall(), r.overlapping.phases[i].recall, r.overlapping.phases[i].error, 3000,
                theory::overlap_approximation_bound(mean_spec(8, 4))));
}

TEST_CASE("theory: content-logit gates: gate-weight law and recall against simulation", "[theory]") {
  // τ = 0: the gate is the fixed softmax of the bias
  const auto g0 = gate_spec(4, {0, 2, 0, 0});
  const auto d0 = theory::gate_weight_distribution(g0, 100);
  const double z = 3 + std::exp(2.0);
  CHECK(d0[1].mean == Approx(std::exp(2.0) / z));
  CHECK(d0[1].sd == Approx(0).margin(1e-12));
  // τ = 0 gated recall equals the exact linear-pool result
  const theory::needle_model m{.context = 1024, .dim = 24};
  theory::gate_options go;
  go.gate_samples = 32;
  const auto pg = theory::predict_recall_gated(g0, m, go);
  const auto pe = theory::predict_recall_by_phase(g0, m);
  for (std::size_t i = 0; i < 4; ++i) CHECK(pg.phases[i].recall == Approx(pe.phases[i].recall).margin(2e-3));
  // τ = 1: the slot preference blurs; prediction against the gated simulation
  const auto g1 = gate_spec(4, {0, 2, 0, 0}, 1.0);
  const auto d1 = theory::gate_weight_distribution(g1, 20000);
  CHECK(d1[1].sd > 0.05);
  CHECK(d1[1].mean < d0[1].mean);  // noise spreads the mass away from the preferred slot
  go.gate_samples = 128;
  go.grid_points = 401;
  const auto p1 = theory::predict_recall_gated(g1, m, go);
  const auto mc = theory_check::simulate_gated(g1, m, 3000, 23);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("phase " << i << " theory " << p1.phases[i].recall << " +- " << p1.phases[i].error << " sim " << mc[i].recall());
    CHECK(agree(mc[i].recall(), p1.phases[i].recall, p1.phases[i].error, 3000));
  }
  CHECK(p1.gap() > 0.1);
  auto bad = g1;
  bad.grid = {.window = 8, .stride = 4};
  bad.slot_bias = {0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_FALSE(theory::predict_recall_gated(bad, m, go).covered);
  go.gate_samples = 7;
  CHECK_THROWS_WITH(theory::predict_recall_gated(g1, m, go), Catch::Contains("gate_samples"));
}

TEST_CASE("theory: several heads: any-head recall and phase-specialised ablation drops", "[theory]") {
  // head 0 prefers slot 0, head 1 prefers slot 2
  const std::vector<compress::operator_spec> heads = {gate_spec(4, {3, 0, 0, 0}), gate_spec(4, {0, 0, 3, 0})};
  const theory::needle_model m{.context = 2048, .dim = 40};
  const auto hp = theory::predict_heads(heads, m);
  const auto mc = theory_check::simulate(heads, m, 3000, 24);
  double worst = 0;
  for (std::size_t i = 0; i < 4; ++i) worst = std::max(worst, std::abs(mc[i].recall() - hp.any[i]));
  std::printf("heads: max |any-head independence approx - sim| %.4f\n", worst);
  CHECK(worst <= 0.03);  // documented bound of the independence approximation (theory/heads.md)
  // ablating head 0 hurts phase 0 (its slot), not phase 2
  CHECK(hp.ablation_drop[0][0] > 0.3);
  CHECK(hp.ablation_drop[0][2] < 0.05);
  CHECK(hp.ablation_drop[1][2] > 0.3);
  CHECK(hp.ablation_drop[1][0] < 0.05);
  auto other = heads[1];
  other.grid = {.window = 2, .stride = 2};
  other.slot_bias = {0, 0};
  CHECK_THROWS_WITH(theory::predict_heads({heads[0], other}, m), Catch::Contains("stride"));
}

TEST_CASE("theory: padding flip is periodic in the padding length", "[theory]") {
  theory::padding_model pm;  // gate 0.1..0.4, strengths 1 vs 1.2, offsets 0 and 1
  const auto r = theory::padding_flip(pm);
  REQUIRE(r.p_correct.size() == 16);
  for (std::size_t i = 0; i + 4 < r.p_correct.size(); ++i) CHECK(r.p_correct[i] == r.p_correct[i + 4]);
  // correct wins iff 1·g(φ) > 1.2·g(φ+1): only φ = 3 (0.4 > 0.12)
  CHECK(r.fraction_correct == Approx(0.25));
  pm.gate = {0.4, 0.4, 0.1, 0.1};
  pm.strength_wrong = 1.0;
  pm.offset_wrong = 2;
  CHECK(theory::padding_flip(pm).fraction_correct == Approx(0.5));
  pm.noise = 0.1;
  const auto rn = theory::padding_flip(pm);
  CHECK(rn.p_correct[0] > 0.5);
  pm.gate = {1, 2};
  CHECK_THROWS_WITH(theory::padding_flip(pm), Catch::Contains("gate.size()"));
}

TEST_CASE("theory: raw window distances", "[theory]") {
  CHECK(theory::window_invariant_distance(128) == 127);
  CHECK(theory::window_compressed_only_distance(128, 3) == 130);
  CHECK(theory::window_covers_all_phases(16, 4, 12));
  CHECK_FALSE(theory::window_covers_all_phases(16, 4, 13));
  CHECK_THROWS_WITH(theory::window_invariant_distance(0), Catch::Contains("raw_window"));
}
