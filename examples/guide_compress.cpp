// Guide example (docs/compress.md): grid geometry, a preset compressor, the incremental form and
// an error message.
#include <kvphase/kvphase.hpp>

#include <cstdio>

int main() {
  using namespace kvphase::compress;
  using kvphase::index_t, kvphase::matrixf;
  // Geometry: DeepSeek-V4 CSA grid (W = 8, S = 4). Position 9 has phase 1 and feeds two entries.
  const chunk_grid g{.window = 8, .stride = 4};
  std::printf("phase(9) = %td, entries of 9:", g.phase(9));
  for (auto es : g.entries_containing(9)) std::printf(" e%td/slot%td", es.entry, es.slot);
  std::printf("\ncomplete entries for 100 tokens: %td\n", g.num_entries(100));

  // A preset operator with random parameters of the right shapes, on 100 tokens of width 64.
  const operator_spec spec = preset("v4_csa");
  const auto params = make_preset_params<float>(spec, 64, /*seed=*/1);
  matrixf x = matrixf::Random(100, 64);
  const matrixf kc = compress(spec, params, x);
  std::printf("v4_csa: %td x %td -> %td x %td\n", x.rows(), x.cols(), kc.rows(), kc.cols());

  // Incremental form: feed 7 tokens at a time; the rows equal the one-shot result bit for bit.
  compress_stream<float> stream(spec, params, 64);
  matrixf streamed(0, kc.cols());
  for (index_t t = 0; t < x.rows(); t += 7) {
    const matrixf piece = x.middleRows(t, std::min<index_t>(7, x.rows() - t));
    const matrixf rows = stream.append(piece);
    streamed.conservativeResize(streamed.rows() + rows.rows(), Eigen::NoChange);
    streamed.bottomRows(rows.rows()) = rows;
  }
  std::printf("stream: %td entries, identical to one-shot: %s\n", stream.entries_emitted(),
              streamed == kc ? "yes" : "no");

  // Bad input throws kvphase::error naming the parameter, its value and the rule.
  try {
    (void)compress(operator_spec{.grid = {.window = 2, .stride = 4}}, x);
  } catch (const kvphase::error& e) {
    std::printf("error: %s\n", e.what());
  }
}
