// Flagship demo (temporary operator demo until the phase sweep lands): prints, for a few
// operators, which entries each token of the first 24 positions feeds and with which slot.
#include <kvphase/kvphase.hpp>

#include <cstdio>

int main() {
  using namespace kvphase::compress;
  for (auto [name, g] : {std::pair{"V4-CSA (W=8, S=4)", chunk_grid{.window = 8, .stride = 4}},
                         std::pair{"V4-HCA-like (W=S=4)", chunk_grid{.window = 4, .stride = 4}},
                         std::pair{"NSA (W=32, S=16)", chunk_grid{.window = 32, .stride = 16,
                                                                  .convention = grid_convention::nsa}}}) {
    std::printf("%s\n  pos phase  entries(slot)\n", name);
    for (kvphase::index_t p = 0; p < 24; ++p) {
      std::printf("  %3td %5td  ", p, g.phase(p));
      for (auto es : g.entries_containing(p)) std::printf("e%td(s%td) ", es.entry, es.slot);
      std::printf("\n");
    }
  }
  return 0;
}
