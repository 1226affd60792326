// The theory's sweep prediction (theory/predict.hpp) against the sweep engine itself
// (sim::run_sweep, key-space engine): same operator_spec and tasks::needle_config objects.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kvphase/sim/sweep.hpp"
#include "kvphase/theory/predict.hpp"

using namespace kvphase;

namespace {

int compare(const sim::sweep_config& c, double bound, const std::string& label) {
  theory::gate_options go;
  go.gate_samples = 64;
  go.grid_points = 401;
  const auto pred = theory::predict_sweep_needle(c.op, c.task.get<kvphase::tasks::needle_config>(), c.window, c.modulus, {}, go);
  REQUIRE(pred.covered);
  const auto res = sim::run_sweep(c);
  int bad = 0;
  for (std::size_t g = 0; g < res.compressed.size(); ++g) {
    for (int model = 0; model < 2; ++model) {
      const auto& st = model == 0 ? res.compressed[g] : res.full[g];
      const double p = model == 0 ? pred.compressed[g] : pred.full[g];
      const double e = model == 0 ? pred.compressed_error[g] : pred.full_error[g];
      const double n = static_cast<double>(st.trials);
      const double sim = static_cast<double>(st.hits) / n;
      const double se = std::hypot(std::sqrt(std::max(p * (1 - p), 0.25 / n) / n), e);
      const bool ok = std::abs(sim - p) <= std::max(4 * se, 0.005) + bound;
      if (!ok) {
        ++bad;
        UNSCOPED_INFO(label << (model ? " full" : " compressed") << " group " << g << ": theory " << p << " sim " << sim
                            << " se " << se);
      }
    }
  }
  std::printf("%-44s groups %zu  theory gap %.4f\n", label.c_str(), res.compressed.size(), [&] {
    double lo = 2, hi = -1;
    for (double v : pred.compressed) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    return hi - lo;
  }());
  return bad;
}

}  // namespace

TEST_CASE("theory: predictions match the sweep engine on shared configurations", "[theory]") {
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{};
  c.engine = sim::engine_kind::key;
  c.trials = 1500;
  c.threads = 1;
  c.seed = 5;
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 32};

  // peaked fixed weights, W = S = 4 (exact)
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::weights, .slot_weights = {0.05, 1, 0.05, 0.05}};
  CHECK(compare(c, 0.0, "W=S=4 peaked d=32") == 0);

  // uniform mean, key span 2 + value span 1 (c = 1), modulus 8 (two periods), noisy query
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean};
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 12, .key_span = 2, .value_span = 1, .query_noise = 0.5};
  c.modulus = 8;
  CHECK(compare(c, 0.0, "W=S=4 mean k=2+1 snr=4 modulus 8") == 0);
  c.modulus = 0;

  // slot gate without content logits, value tokens with zero key (c = 0)
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate, .slot_bias = {2, 0, 0, 0}};
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 40, .key_span = 1, .value_span = 2, .value_key_weight = 0.0};
  CHECK(compare(c, 0.0, "gate b=(2,0,0,0) k=1+2 c=0") == 0);

  // overlapping windows W = 8, S = 4 (local exact + Markov far field)
  c.op = {.grid = {.window = 8, .stride = 4}, .pool = compress::pool_kind::mean};
  c.task = kvphase::tasks::needle_config{.context = 1024, .dim = 32};
  CHECK(compare(c, theory::overlap_approximation_bound(c.op), "W=8 S=4 mean") == 0);

  // a raw window of 64 tokens as extra independent items (approximation, see predict.hpp)
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::weights, .slot_weights = {0.05, 1, 0.05, 0.05}};
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 40};
  c.window = 64;
  CHECK(compare(c, 0.0, "W=S=4 peaked raw window 64") == 0);
}

TEST_CASE("theory: content-gated sweep prediction against the sweep engine", "[theory]") {
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{};
  c.engine = sim::engine_kind::key;
  c.trials = 1500;
  c.threads = 1;
  c.seed = 6;
  c.task = kvphase::tasks::needle_config{.context = 1024, .dim = 24};
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate, .slot_bias = {0, 2, 0, 0},
          .content_std = 1.0};
  CHECK(compare(c, 0.0, "gate b=(0,2,0,0) tau=1") == 0);
}

TEST_CASE("theory: sweep prediction reports configurations outside the theory", "[theory]") {
  {
    const compress::operator_spec mean{.grid = {.window = 4, .stride = 4}};
    const tasks::needle_config nc{.context = 1024, .dim = 16, .query_noise = 0.5};
    const auto by_phase = theory::predict_recall_by_phase(mean, nc);
    REQUIRE(by_phase.covered);
    const auto m = theory::to_needle_model(nc);
    CHECK(m.snr == Approx(4.0));
    CHECK(by_phase.phases.size() == 4);
    const auto direct = theory::predict_recall_by_phase(mean, m);
    CHECK(by_phase.phases[2].recall == direct.phases[2].recall);
  }
  compress::operator_spec op{.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::max};
  const auto p = theory::predict_sweep_needle(op, {.context = 1024, .dim = 16});
  CHECK_FALSE(p.covered);
  CHECK_THAT(p.reason, Catch::Contains("max"));
  op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate, .content_std = 1.0};
  CHECK_FALSE(theory::predict_sweep_needle(op, {.context = 1024, .dim = 16}, 16).covered);
  CHECK_THROWS_WITH(theory::predict_sweep_needle(op, {.context = 1024, .dim = 16}, -1), Catch::Contains("raw_window"));
}
