// Guide example (docs/stats.md): intervals, uniformity, periodicity and the phase gap on the
// counts of two seeds of the guide_sim sweep, pooled with aggregate_seeds.
#include <kvphase/kvphase.hpp>
#include <kvphase/stats.hpp>

#include <cstdio>

int main() {
  namespace st = kvphase::stats;
  namespace sim = kvphase::sim;
  sim::sweep_config c;  // the sweep of examples/guide_sim.cpp
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 32, .query_noise = 0.5};
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = kvphase::compress::pool_kind::slot_gate,
          .slot_bias = {3, 0, 0, 0}, .name = "gated"};
  c.engine = sim::engine_kind::score;
  c.trials = 400;
  std::vector<std::vector<std::int64_t>> hits[2], trials[2];  // [model][seed][group]
  for (std::uint64_t seed : {1, 2}) {
    c.seed = seed;
    const sim::sweep_result r = sim::run_sweep(c);
    for (int m = 0; m < 2; ++m) {
      auto& cells = m == 0 ? r.compressed : r.full;
      hits[m].emplace_back();
      trials[m].emplace_back();
      for (const auto& g : cells) hits[m].back().push_back(g.hits), trials[m].back().push_back(g.trials);
    }
  }
  for (int m = 0; m < 2; ++m) {
    const st::seed_aggregate a = st::aggregate_seeds(hits[m], trials[m]);  // pooled over 2 seeds
    const st::interval ci = st::wilson_interval(a.hits[0], a.trials[0]);
    const st::test_result u = st::uniformity_test(a.hits, a.trials);
    const st::periodicity_result per = st::periodicity_test(a.hits, a.trials, 4, 4, {.seed = 1});
    const st::gap_result gap = st::phase_gap_bootstrap(a.hits, a.trials, {.seed = 1});
    std::printf("%s: phase 0 %lld/%lld [%.3f, %.3f]; uniformity p %.3g; period 4 p %.4f; "
                "gap %.4f [%.4f, %.4f] (raw %.4f, percentile [%.4f, %.4f]); seed gaps %.4f, %.4f\n",
                m == 0 ? "compressed" : "full", static_cast<long long>(a.hits[0]),
                static_cast<long long>(a.trials[0]), ci.low, ci.high, u.p, per.p, gap.bias_corrected,
                gap.simultaneous.low, gap.simultaneous.high, gap.gap, gap.ci.low, gap.ci.high, a.seed_gaps[0],
                a.seed_gaps[1]);
  }
}
