// The README's code example (kept identical to it; built and run by ctest).
#include <kvphase/kvphase.hpp>
#include <kvphase/theory.hpp>  // theory:: (Boost.Math, kept out of the umbrella)
#include <cstdio>

int main() {
  using namespace kvphase;
  sim::sweep_config c;                                   // needle task, engine auto
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::slot_gate,
          .slot_bias = {2.0, 0.0, 0.0, 0.0}};             // the gate prefers slot 0
  c.task = tasks::needle_config{.context = 4096, .dim = 32};
  c.trials = 400;
  const auto r = sim::run_sweep(c);                      // compressed and full, same inputs
  const auto t = theory::predict_sweep_column(c);        // the theory column (covered here)
  for (index_t phase = 0; phase < c.groups(); ++phase)
    std::printf("phase %td: compressed %.3f (theory %.3f), full %.3f\n", phase,
                double(r.compressed[phase].hits) / r.compressed[phase].trials, t.compressed[phase],
                double(r.full[phase].hits) / r.full[phase].trials);
}
