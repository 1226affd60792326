// Compile-cost probe: what a research program pays to include the umbrella header and run one
// sweep. scripts/compile_cost.sh compiles it with the flags the kvphase::kvphase target gives a
// consumer and records CPU time and peak memory (docs/performance.md, "Compile cost").
// KVPHASE_CC_HEADER replaces the umbrella by another header that declares sim::run_sweep.
#ifndef KVPHASE_CC_HEADER
#include <kvphase/kvphase.hpp>
#else
#include KVPHASE_CC_HEADER
#endif

#include <cstdio>

int main() {
  using namespace kvphase;
  sim::sweep_config c;
  c.op = {.grid = {.window = 4, .stride = 4}, .pool = compress::pool_kind::mean};
  c.task = tasks::needle_config{.context = 256, .dim = 16};
  c.trials = 50;
  const auto r = sim::run_sweep(c);
  for (index_t g = 0; g < c.groups(); ++g)
    std::printf("phase %td: compressed %lld/%lld, full %lld/%lld\n", g,
                static_cast<long long>(r.compressed[static_cast<std::size_t>(g)].hits),
                static_cast<long long>(r.compressed[static_cast<std::size_t>(g)].trials),
                static_cast<long long>(r.full[static_cast<std::size_t>(g)].hits),
                static_cast<long long>(r.full[static_cast<std::size_t>(g)].trials));
}
