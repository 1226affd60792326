// Guide example (docs/theory.md): the theory's per-group prediction for the needle sweep of
// examples/guide_sim.cpp, beside the sweep's measurement, plus a span-straddling count.
#include <kvphase/kvphase.hpp>
#include <kvphase/theory.hpp>

#include <cstdio>

int main() {
  namespace cmp = kvphase::compress;
  namespace sim = kvphase::sim;
  sim::sweep_config c;  // the sweep of examples/guide_sim.cpp
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 32, .query_noise = 0.5};
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = cmp::pool_kind::slot_gate, .slot_bias = {3, 0, 0, 0},
          .name = "gated"};
  c.engine = sim::engine_kind::score;
  c.trials = 400;
  const sim::sweep_result r = sim::run_sweep(c);
  const kvphase::theory::sweep_prediction p = kvphase::theory::predict_sweep_needle(c.op, c.task.get<kvphase::tasks::needle_config>());
  std::printf("covered: %s\nphase  predicted  measured  | full: predicted  measured\n", p.covered ? "yes" : "no");
  for (std::size_t g = 0; g < r.labels.size(); ++g)
    std::printf("%5td  %9.4f  %8.4f  |       %9.4f  %8.4f\n", r.labels[g], p.compressed[g],
                static_cast<double>(r.compressed[g].hits) / 400.0, p.full[g],
                static_cast<double>(r.full[g].hits) / 400.0);

  // Span straddling: a 3-token span at stride 4 touches 2 chunks at phases 2 and 3.
  std::printf("chunks touched by a 3-token span at phases 0..3:");
  for (kvphase::index_t phi = 0; phi < 4; ++phi) std::printf(" %td", kvphase::theory::chunks_touched(phi, 3, 4));
  std::printf("\n");
}
