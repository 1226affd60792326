// Uses the umbrella header and checks one result, so that linking and running prove the
// package is usable, not just found.
#include <kvphase/kvphase.hpp>

#include <cstdio>

int main() {
  kvphase::compress::chunk_grid g{.window = 8, .stride = 4};
  g.validate();
  const auto n = g.num_entries(128);
  std::printf("kvphase %s: %td entries for 128 tokens (W=8, S=4)\n", KVPHASE_VERSION_STRING, n);
  return n == 32 ? 0 : 1;
}
