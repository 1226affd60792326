// Guide example (docs/sim.md): a needle phase sweep of a gated operator against full attention,
// run whole and as two shards whose merged counts equal the whole run.
#include <kvphase/kvphase.hpp>

#include <cstdio>

int main() {
  namespace sim = kvphase::sim;
  namespace cmp = kvphase::compress;
  sim::sweep_config c;
  c.task = kvphase::tasks::needle_config{};
  c.task = kvphase::tasks::needle_config{.context = 2048, .dim = 32, .query_noise = 0.5};
  // W = S = 4 slot gate whose bias prefers slot 0: content-independent, so the score engine is exact.
  c.op = cmp::operator_spec{.grid = {.window = 4, .stride = 4}, .pool = cmp::pool_kind::slot_gate,
                            .slot_bias = {3, 0, 0, 0}, .name = "gated"};
  c.engine = sim::engine_kind::score;
  c.trials = 400;
  c.seed = 1;
  const sim::sweep_result whole = sim::run_sweep(c);
  std::printf("phase  compressed hits  full hits  (of %td)\n", c.trials);
  for (std::size_t g = 0; g < whole.labels.size(); ++g)
    std::printf("%5td  %15lld  %9lld\n", whole.labels[g], static_cast<long long>(whole.compressed[g].hits),
                static_cast<long long>(whole.full[g].hits));

  // Shards partition the trials; counts merge exactly, for any thread count.
  std::vector<sim::group_stats> merged(whole.compressed.size());
  for (kvphase::index_t i = 0; i < 2; ++i) {
    sim::sweep_config part = c;
    part.shard = {.index = i, .count = 2};
    part.threads = 1;
    const sim::sweep_result r = sim::run_sweep(part);
    for (std::size_t g = 0; g < merged.size(); ++g) merged[g] += r.compressed[g];
  }
  const bool same = merged == whole.compressed;
  std::printf("shards 0/2 + 1/2 (1 thread) equal the whole run: %s\n", same ? "yes" : "no");
}
