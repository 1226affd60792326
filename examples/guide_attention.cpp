// Guide example (docs/attention.md): full vs compressed attention, indexer top-k, a toy model.
#include <kvphase/kvphase.hpp>

#include <cstdio>

int main() {
  namespace att = kvphase::attention;
  namespace cmp = kvphase::compress;
  using kvphase::index_t, kvphase::matrixd;
  const index_t N = 64, d = 16;
  const matrixd Q = matrixd::Random(N, d), K = matrixd::Random(N, d), V = matrixd::Random(N, d);

  // Full causal attention (the control): every token attends itself and its past.
  matrixd O_full(N, d);
  att::full_attention<double>(Q, K, V, att::attention_params{}, O_full);

  // A raw window covering the whole sequence and no compressed branch is full attention again.
  const cmp::chunk_grid grid{.window = 4, .stride = 4};
  const cmp::operator_spec mean4{.grid = grid};  // mean pooling of 4-token chunks
  const matrixd Kc = cmp::compress(mean4, K), Vc = cmp::compress(mean4, V);
  matrixd O_win(N, d);
  att::compressed_attention<double>(Q, {}, Kc, Vc, grid, K, V, {.window = N, .compressed = false}, O_win);
  std::printf("window-only (window = N) matches full attention: %s\n",
              (O_win - O_full).cwiseAbs().maxCoeff() < 1e-12 ? "yes" : "no");

  // Compressed entries + an 8-token window + a sink logit of 0, in one joint softmax.
  matrixd O_cmp(N, d);
  att::compressed_attention<double>(Q, {}, Kc, Vc, grid, K, V, {.window = 8, .attn = {.sink = 0.0}}, O_cmp);
  std::printf("compressed entries: %td, visible to the last query: %td\n", Kc.rows(), grid.num_visible(N - 1));

  // CSA lightning indexer: 2 index heads, keep the top 3 visible entries per query.
  const matrixd QI = matrixd::Random(N, 2 * d), Wh = matrixd::Ones(N, 2);
  const std::vector<index_t> pos{7, 63};
  const att::index_lists sel = att::csa_select<double>(QI.topRows(2), Wh.topRows(2), Kc, grid, pos,
                                                       {.heads = 2, .top_k = 3});
  std::printf("top-3 of entries visible at t = 7 and t = 63: %zu and %zu selected\n", sel.of(0).size(),
              sel.of(1).size());

  // A toy model preset: DeepSeek-V4-Flash's layer schedule at toy width.
  const att::toy_model<float> model(att::toy_preset("v4_flash_toy", /*seed=*/1));
  const kvphase::matrixf H = model.forward(kvphase::matrixf::Random(256, model.config().d_model));
  std::printf("v4_flash_toy: %zu layers, hidden %td x %td\n", model.config().layers.size(), H.rows(), H.cols());
}
