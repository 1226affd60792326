// Result 7 (padding flip) for the sweep's padding task: theory::predict_padding against
// sim::run_sweep on the same operator_spec and tasks::padding_config objects.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "kvphase/core/error.hpp"
#include "kvphase/sim/sweep.hpp"
#include "kvphase/theory/padding_task.hpp"

using namespace kvphase;

namespace {

sim::sweep_config padding_sweep(const compress::operator_spec& op, index_t window) {
  sim::sweep_config c;
  c.task = kvphase::tasks::padding_config{};
  c.engine = sim::engine_kind::score;  // exact for iid Gaussian keys and linear pools (sim/linear_model.hpp)
  c.task.get<kvphase::tasks::padding_config>().code_length = 320;
  c.task.get<kvphase::tasks::padding_config>().offset_a = 64;
  c.task.get<kvphase::tasks::padding_config>().offset_b = 194;  // ≡ offset_a + 2 (mod 4 and mod 8)
  c.task.get<kvphase::tasks::padding_config>().pad_min = 24;
  c.task.get<kvphase::tasks::padding_config>().lengths = 8;     // two periods of S = 4
  c.op = op;
  c.window = window;
  c.trials = 1500;
  c.threads = 1;
  c.seed = 11;
  return c;
}

struct comparison {
  int bad = 0;
  double lo = 2, hi = -1;  // range of the simulated hit rate over lengths
  theory::padding_prediction pred;
};

// |sim − p| ≤ max(5·SE, 0.005) + quadrature error: the prediction is exact for these configurations
// (σ = 0, one entry per span), so the only differences are sampling error and float rounding.
comparison compare(const sim::sweep_config& c, const std::string& label) {
  comparison out;
  out.pred = theory::predict_padding(c.op, c.task.get<kvphase::tasks::padding_config>(), c.window);
  REQUIRE(out.pred.covered);
  const auto res = sim::run_sweep(c);
  REQUIRE(res.compressed.size() == out.pred.lengths.size());
  for (std::size_t g = 0; g < res.compressed.size(); ++g) {
    const auto& st = res.compressed[g];
    const auto& lp = out.pred.lengths[g];
    REQUIRE(lp.length == res.labels[g]);
    const double n = static_cast<double>(st.trials);
    const double sim_p = static_cast<double>(st.hits) / n;
    const double se = std::sqrt(std::max(lp.p_a * (1 - lp.p_a), 0.25 / n) / n);
    out.lo = std::min(out.lo, sim_p);
    out.hi = std::max(out.hi, sim_p);
    if (std::abs(sim_p - lp.p_a) > std::max(5 * se, 0.005) + lp.error) {
      ++out.bad;
      UNSCOPED_INFO(label << " L=" << lp.length << ": theory " << lp.p_a << " sim " << sim_p << " se " << se);
    }
  }
  std::printf("%-34s theory fraction %.4f (majority %.3f), sim range [%.4f, %.4f]\n", label.c_str(),
              out.pred.fraction_expected, out.pred.fraction_majority, out.lo, out.hi);
  return out;
}

}  // namespace

TEST_CASE("theory: padding flip prediction matches the sweep's padding task", "[theory]") {
  using compress::pool_kind;
  SECTION("peaked fixed weights flip with period S") {
    const auto c = padding_sweep({.grid = {.window = 4, .stride = 4}, .pool = pool_kind::weights,
                                  .slot_weights = {0.1, 0.2, 0.3, 0.4}},
                                 0);
    const auto r = compare(c, "weights [.1 .2 .3 .4]");
    CHECK(r.bad == 0);
    // Period S: the prediction repeats after 4 lengths, and the flip is real (A loses at some L).
    for (std::size_t i = 0; i + 4 < r.pred.lengths.size(); ++i)
      CHECK(r.pred.lengths[i].p_a == Approx(r.pred.lengths[i + 4].p_a).margin(1e-12));
    CHECK(r.hi - r.lo > 0.5);
    CHECK(r.pred.fraction_majority > 0.0);
    CHECK(r.pred.fraction_majority < 1.0);
  }
  SECTION("slot gate (bias only) with a raw window flips; the window does not change the law") {
    const auto c = padding_sweep({.grid = {.window = 4, .stride = 4}, .pool = pool_kind::slot_gate,
                                  .slot_bias = {0, 0, 0, 2}},
                                 32);
    const auto r = compare(c, "slot_gate b=[0 0 0 2], window 32");
    CHECK(r.bad == 0);
    CHECK(r.hi - r.lo > 0.3);
  }
  SECTION("uniform mean pooling does not flip") {
    const auto c = padding_sweep({.grid = {.window = 4, .stride = 4}, .pool = pool_kind::mean}, 0);
    const auto r = compare(c, "mean W=S=4");
    CHECK(r.bad == 0);
    for (const auto& lp : r.pred.lengths) CHECK(lp.p_a == Approx(r.pred.lengths[0].p_a).margin(1e-12));
    // sampling spread only: 8 lengths × 1500 trials, range within 2·5·SE of a proportion ≈ 0.6
    CHECK(r.hi - r.lo < 10 * std::sqrt(0.25 / 1500.0));
  }
  SECTION("key-space engine, W = S = 8, peaked weights") {
    auto c = padding_sweep({.grid = {.window = 8, .stride = 8}, .pool = pool_kind::weights,
                            .slot_weights = {0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.3}},
                           0);
    c.engine = sim::engine_kind::key;
    c.task.get<kvphase::tasks::padding_config>().dim = 32;
    c.trials = 800;
    const auto r = compare(c, "key engine W=S=8 weights");
    CHECK(r.bad == 0);
  }
}

TEST_CASE("theory: padding prediction states what it does not cover", "[theory]") {
  using compress::pool_kind;
  tasks::padding_config t;
  SECTION("overlapping windows: evidence in two entries") {
    const auto p = theory::predict_padding({.grid = {.window = 8, .stride = 4}, .pool = pool_kind::mean}, t);
    CHECK_FALSE(p.covered);
    CHECK(p.reason.find("several entries") != std::string::npos);
    CHECK(p.covered_lengths == 0);
  }
  SECTION("query noise") {
    t.query_noise = 0.5;
    const auto p = theory::predict_padding({.grid = {.window = 4, .stride = 4}, .pool = pool_kind::mean}, t);
    CHECK_FALSE(p.covered);
    CHECK(p.reason.find("query_noise") != std::string::npos);
  }
  SECTION("content logits") {
    const auto p = theory::predict_padding(
        {.grid = {.window = 4, .stride = 4}, .pool = pool_kind::slot_gate, .content_std = 1.0}, t);
    CHECK_FALSE(p.covered);
  }
  SECTION("a span straddling a boundary at some lengths only") {
    t.span_a = 2;
    const auto p = theory::predict_padding({.grid = {.window = 4, .stride = 4}, .pool = pool_kind::mean}, t);
    CHECK_FALSE(p.covered);
    CHECK(p.covered_lengths == t.lengths * 3 / 4);  // one phase in four splits a 2-token span
  }
  SECTION("bad input throws") {
    CHECK_THROWS_AS(theory::predict_padding({.grid = {.window = 4, .stride = 4}, .pool = pool_kind::mean}, t, -1),
                    kvphase::error);
    t.lengths = 0;
    CHECK_THROWS_AS(theory::predict_padding({.grid = {.window = 4, .stride = 4}, .pool = pool_kind::mean}, t),
                    kvphase::error);
  }
}
