// Full causal and compressed attention against a naive double reference; the identities
// (W = S = 1 identity pooling = full; a window covering everything = full; −∞ sink = no sink);
// exhaustive causality on small sizes; bad inputs.
#include <catch2/catch.hpp>

#include <kvphase/attention/compressed.hpp>
#include <kvphase/attention/cost.hpp>
#include <kvphase/attention/full.hpp>
#include <kvphase/compress/grid.hpp>
#include <kvphase/core/simd.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "support/attention_reference.hpp"

using kvphase::index_t;
using kvphase::matrix_t;
namespace att = kvphase::attention;
namespace cmp = kvphase::compress;
namespace simd = kvphase::simd;
namespace kt = kvphase::test;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();

/// Mean pooling written here from the grid's definition (sources, masked slots before 0).
template <class Real>
matrix_t<Real> mean_pool(const matrix_t<Real>& X, const cmp::chunk_grid& g) {
  const index_t N = X.rows(), E = g.num_entries(N);
  matrix_t<Real> C = matrix_t<Real>::Zero(E, X.cols());
  for (index_t e = 0; e < E; ++e) {
    const auto r = g.sources(e);
    index_t cnt = 0;
    for (index_t p = std::max<index_t>(0, r.first); p <= r.last; ++p, ++cnt) C.row(e) += X.row(p);
    C.row(e) /= static_cast<Real>(cnt);
  }
  return C;
}

struct row_set {
  std::vector<index_t> entries;  // compressed rows
  std::vector<index_t> tokens;   // raw rows
};

/// Reference of one query over a set of compressed and raw rows (one joint softmax).
template <class Real>
kt::ref_attention ref_rows(const matrix_t<Real>& Q, index_t i, const matrix_t<double>& Kc, const matrix_t<double>& Vc,
                           const matrix_t<double>& K, const matrix_t<double>& V, const row_set& rs, double scale,
                           double sink, double blocks) {
  std::vector<double> q(static_cast<std::size_t>(Q.cols()));
  for (index_t c = 0; c < Q.cols(); ++c) q[static_cast<std::size_t>(c)] = Q(i, c);
  std::vector<const double*> ks, vs;
  for (index_t e : rs.entries) {
    ks.push_back(Kc.data() + e * Kc.cols());
    vs.push_back(Vc.data() + e * Vc.cols());
  }
  for (index_t p : rs.tokens) {
    ks.push_back(K.data() + p * K.cols());
    vs.push_back(V.data() + p * V.cols());
  }
  return kt::reference_attend(q, ks, vs, V.cols(), scale, sink, std::numeric_limits<Real>::epsilon() / 2, blocks);
}

template <class Real>
void check_close(const matrix_t<Real>& O, index_t i, const kt::ref_attention& ref, const std::string& what) {
  for (index_t c = 0; c < O.cols(); ++c) {
    INFO(what << " i=" << i << " c=" << c << " got " << O(i, c) << " ref " << ref.o[static_cast<std::size_t>(c)]
              << " bound " << ref.bound[static_cast<std::size_t>(c)]);
    CHECK(std::fabs(double(O(i, c)) - ref.o[static_cast<std::size_t>(c)]) <= ref.bound[static_cast<std::size_t>(c)]);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("full causal attention matches the reference", "[attention][full]", float, double) {
  using Real = TestType;
  for (index_t n : {1, 2, 37, 150}) {
    for (index_t d : {1, 16, 33}) {
      const index_t dv = d == 1 ? 1 : 7;
      const auto Q = kt::random_matrix<Real>(n, d, 41u + static_cast<unsigned>(n), 2.0);
      const auto K = kt::random_matrix<Real>(n, d, 42u + static_cast<unsigned>(d));
      const auto V = kt::random_matrix<Real>(n, dv, 43u);
      const matrix_t<double> Kd = K.template cast<double>(), Vd = V.template cast<double>();
      const double scale = double(att::default_scale<Real>(d));
      for (double sink : {-inf, 0.0}) {
        simd::for_each_arch([&](auto arch) {
          using Arch = decltype(arch);
          matrix_t<Real> O(n, dv);
          att::full_attention<Real, Arch>(Q, K, V, att::attention_params{.sink = sink, .block = 16}, O);
          for (index_t t = 0; t < n; ++t) {
            row_set rs;
            for (index_t p = 0; p <= t; ++p) rs.tokens.push_back(p);
            check_close(O, t, ref_rows(Q, t, Kd, Vd, Kd, Vd, rs, scale, sink, double(t / 16 + 3)),
                        std::string("full ") + simd::arch_name<Arch>());
          }
          // explicit positions: the last query only
          matrix_t<Real> O1(1, dv);
          const std::vector<index_t> pos{n - 1};
          att::full_attention<Real, Arch>(Q.bottomRows(1), K, V, pos, att::attention_params{.sink = sink}, O1);
          row_set rs;
          for (index_t p = 0; p < n; ++p) rs.tokens.push_back(p);
          const matrix_t<Real> Qlast = Q.bottomRows(1);
          check_close(O1, 0, ref_rows(Qlast, 0, Kd, Vd, Kd, Vd, rs, scale, sink, double(n / 256 + 3)), "full pos");
        });
      }
    }
  }
}

TEMPLATE_TEST_CASE("compressed attention (joint and gated, selections) matches the reference",
                   "[attention][compressed]", float, double) {
  using Real = TestType;
  const index_t N = 61, d = 17, dv = 6;
  const auto Q = kt::random_matrix<Real>(N, d, 51u, 2.0);
  const auto K = kt::random_matrix<Real>(N, d, 52u);
  const auto V = kt::random_matrix<Real>(N, dv, 53u);
  const double scale = double(att::default_scale<Real>(d));
  for (cmp::chunk_grid g : {cmp::chunk_grid{.window = 4, .stride = 4}, cmp::chunk_grid{.window = 8, .stride = 4},
                            cmp::chunk_grid{.window = 3, .stride = 2, .origin = 1},
                            cmp::chunk_grid{.window = 8, .stride = 4, .convention = cmp::grid_convention::nsa}}) {
    const matrix_t<Real> Kc = mean_pool(K, g), Vc = mean_pool(V, g);
    const matrix_t<double> Kcd = Kc.template cast<double>(), Vcd = Vc.template cast<double>();
    const matrix_t<double> Kd = K.template cast<double>(), Vd = V.template cast<double>();
    // selections: every other visible entry (CSA-like) and blocks {0, last} of size 8 (NSA-like)
    att::index_lists entries, blocks;
    for (index_t t = 0; t < N; ++t) {
      std::vector<index_t> es, bs;
      for (index_t e = 0; e < g.num_visible(t); e += 2) es.push_back(e);
      bs.push_back(0);
      if (t / 8 > 0) bs.push_back(t / 8);
      entries.push(es);
      blocks.push(bs);
    }
    std::vector<Real> gates(static_cast<std::size_t>(3 * N));
    for (std::size_t k = 0; k < gates.size(); ++k) gates[k] = static_cast<Real>(0.1 + 0.3 * double(k % 5));
    for (index_t win : {0, 1, 5, 16}) {
      for (auto mode : {att::combine_mode::joint, att::combine_mode::gated}) {
        for (int variant = 0; variant < 3; ++variant) {  // 0 all visible, 1 entry selection, 2 + blocks
          for (double sink : {-inf, 0.5}) {
            att::compressed_params p{.window = win, .combine = mode, .select_block = 8,
                                     .attn = {.sink = sink, .block = 8}};
            att::compressed_selection<Real> sel;
            if (variant >= 1) sel.entries = &entries;
            if (variant >= 2) sel.blocks = &blocks;
            if (mode == att::combine_mode::gated && variant == 2) sel.gates = gates;
            std::vector<std::pair<std::string, matrix_t<Real>>> outs;
            simd::for_each_arch([&](auto arch) {
              using Arch = decltype(arch);
              matrix_t<Real> O(N, dv);
              att::compressed_attention<Real, Arch>(Q, {}, Kc, Vc, g, K, V, p, O, sel);
              outs.emplace_back(simd::arch_name<Arch>(), O);
            });
            {
              for (index_t t = 0; t < N; ++t) {
                row_set cmp_set, slc_set, win_set;
                for (index_t e = 0; e < Kc.rows(); ++e) {
                  if (!g.visible(e, t)) continue;
                  if (variant >= 1 && e % 2 != 0) continue;
                  cmp_set.entries.push_back(e);
                }
                const index_t ws = win > 0 ? std::max<index_t>(0, t - win + 1) : t + 1;
                for (index_t u = ws; u <= t; ++u) win_set.tokens.push_back(u);
                if (variant >= 2) {
                  std::set<index_t> toks;
                  for (index_t b : blocks.of(t))
                    for (index_t u = b * 8; u < b * 8 + 8 && u <= t; ++u) toks.insert(u);
                  for (index_t u : toks)
                    if (mode == att::combine_mode::gated || u < ws) slc_set.tokens.push_back(u);
                }
                const std::string what = std::string(" win=") + std::to_string(win) +
                                         " mode=" + att::to_string(mode) + " variant=" + std::to_string(variant);
                const double blocks_n = 20;
                if (mode == att::combine_mode::joint) {
                  row_set all = cmp_set;
                  all.tokens = slc_set.tokens;
                  all.tokens.insert(all.tokens.end(), win_set.tokens.begin(), win_set.tokens.end());
                  const auto r = ref_rows(Q, t, Kcd, Vcd, Kd, Vd, all, scale, sink, blocks_n);
                  for (const auto& [name, O] : outs) check_close(O, t, r, name + what);
                } else {
                  const auto rc = ref_rows(Q, t, Kcd, Vcd, Kd, Vd, cmp_set, scale, sink, blocks_n);
                  const auto rs = ref_rows(Q, t, Kcd, Vcd, Kd, Vd, slc_set, scale, sink, blocks_n);
                  const auto rw = ref_rows(Q, t, Kcd, Vcd, Kd, Vd, win_set, scale, sink, blocks_n);
                  double g3[3] = {1, 1, 1};
                  if (!sel.gates.empty())
                    for (int c = 0; c < 3; ++c) g3[c] = double(gates[static_cast<std::size_t>(3 * t + c)]);
                  kt::ref_attention r;
                  const double u = std::numeric_limits<Real>::epsilon() / 2;
                  for (index_t c = 0; c < dv; ++c) {
                    const auto cc = static_cast<std::size_t>(c);
                    const double slc = variant >= 2 ? rs.o[cc] : 0.0;
                    const double slcb = variant >= 2 ? rs.bound[cc] : 0.0;
                    r.o.push_back(g3[0] * rc.o[cc] + g3[1] * slc + g3[2] * rw.o[cc]);
                    r.bound.push_back(g3[0] * rc.bound[cc] + g3[1] * slcb + g3[2] * rw.bound[cc] +
                                      4 * u * (g3[0] * std::fabs(rc.o[cc]) + g3[1] * std::fabs(slc) +
                                               g3[2] * std::fabs(rw.o[cc])) + 1e-300);
                  }
                  for (const auto& [name, O] : outs) check_close(O, t, r, name + what);
                }
              }
            }
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("identities: W = S = 1 identity pooling without window, and a covering window, equal full "
                   "attention", "[attention][compressed]", float, double) {
  using Real = TestType;
  const index_t N = 45, d = 19, dv = 5;
  const auto Q = kt::random_matrix<Real>(N, d, 61u, 2.0);
  const auto K = kt::random_matrix<Real>(N, d, 62u);
  const auto V = kt::random_matrix<Real>(N, dv, 63u);
  const double u = std::numeric_limits<Real>::epsilon() / 2;
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    for (double sink : {-inf, -1.0}) {
      matrix_t<Real> Ofull(N, dv), Oid(N, dv), Owin(N, dv);
      att::full_attention<Real, Arch>(Q, K, V, att::attention_params{.sink = sink}, Ofull);
      const cmp::chunk_grid g1{.window = 1, .stride = 1};
      // identity pooling: entry e is token e
      att::compressed_attention<Real, Arch>(Q, {}, K, V, g1, K, V,
                                            att::compressed_params{.window = 0, .attn = {.sink = sink}}, Oid);
      att::compressed_attention<Real, Arch>(
          Q, {}, K.topRows(0), V.topRows(0), g1, K, V,
          att::compressed_params{.window = N, .compressed = false, .attn = {.sink = sink}}, Owin);
      // same attended set, same online-softmax path: differences only from the order of blocks;
      // bound: 2(n + 10)u relative to Σ p|v| ≤ max|v|
      const double vmax = V.cwiseAbs().maxCoeff();
      for (index_t t = 0; t < N; ++t)
        for (index_t c = 0; c < dv; ++c) {
          const double tol = 4 * double(t + 16) * u * double(vmax);
          CHECK(std::fabs(double(Oid(t, c) - Ofull(t, c))) <= tol);
          CHECK(std::fabs(double(Owin(t, c) - Ofull(t, c))) <= tol);
        }
      // window-only with the window covering everything is bitwise the identity path
      CHECK((Owin.array() == Oid.array()).all());
    }
    // a sink of −∞ is no sink: default params give the same bits
    matrix_t<Real> A(N, dv), B(N, dv);
    att::full_attention<Real, Arch>(Q, K, V, att::attention_params{}, A);
    att::full_attention<Real, Arch>(Q, K, V, att::attention_params{.sink = -inf}, B);
    CHECK((A.array() == B.array()).all());
  });
}

TEST_CASE("causality: tokens after t, and tokens of incomplete chunks outside the window, do not affect t "
          "(exhaustive, small sizes)", "[attention][compressed]") {
  using Real = double;
  const index_t N = 22, d = 5, dv = 3;
  const auto Q = kt::random_matrix<Real>(N, d, 71u);
  const auto K0 = kt::random_matrix<Real>(N, d, 72u);
  const auto V0 = kt::random_matrix<Real>(N, dv, 73u);
  for (cmp::chunk_grid g : {cmp::chunk_grid{.window = 1, .stride = 1}, cmp::chunk_grid{.window = 2, .stride = 2},
                            cmp::chunk_grid{.window = 4, .stride = 4}, cmp::chunk_grid{.window = 8, .stride = 4},
                            cmp::chunk_grid{.window = 5, .stride = 3, .origin = 2},
                            cmp::chunk_grid{.window = 6, .stride = 2, .convention = cmp::grid_convention::nsa}}) {
    for (index_t win : {0, 2, 5}) {
      for (auto mode : {att::combine_mode::joint, att::combine_mode::gated}) {
        const att::compressed_params p{.window = win, .combine = mode};
        auto run = [&](const matrix_t<Real>& K, const matrix_t<Real>& V) {
          const matrix_t<Real> Kc = mean_pool(K, g), Vc = mean_pool(V, g);
          matrix_t<Real> O(N, dv);
          att::compressed_attention<Real>(Q, {}, Kc, Vc, g, K, V, p, O);
          return O;
        };
        const matrix_t<Real> base = run(K0, V0);
        for (index_t u = 0; u < N; ++u) {
          matrix_t<Real> K = K0, V = V0;
          K.row(u).array() += 3.0;
          V.row(u).array() -= 5.0;
          const matrix_t<Real> O = run(K, V);
          for (index_t t = 0; t < N; ++t) {
            const index_t ws = win > 0 ? std::max<index_t>(0, t - win + 1) : t + 1;
            bool reaches = (u <= t && u >= ws);  // raw window
            for (const auto& es : g.entries_containing(u))
              if (u <= t && g.visible(es.entry, t)) reaches = true;  // a complete visible entry holds u
            INFO(g << " win=" << win << " mode=" << att::to_string(mode) << " perturbed u=" << u << " t=" << t);
            if (!reaches) {
              CHECK((O.row(t).array() == base.row(t).array()).all());
            } else {
              CHECK((O.row(t) - base.row(t)).cwiseAbs().maxCoeff() > 1e-9);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("compressed attention rejects bad shapes and parameters, naming them", "[attention][compressed]") {
  const index_t N = 12;
  const matrix_t<double> Q(N, 4), K(N, 4), V(N, 3), Kc(3, 4), Vc(3, 3);
  matrix_t<double> O(N, 3);
  const cmp::chunk_grid g{.window = 4, .stride = 4};
  const att::compressed_params p{.window = 4};
  auto run = [&](auto&&... a) { att::compressed_attention<double>(a...); };
  CHECK_NOTHROW(run(Q, std::span<const index_t>{}, Kc, Vc, g, K, V, p, O));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc.topRows(2), Vc.topRows(2), g, K, V, p, O),
                    Catch::Contains("Kc.rows()"));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc.topRows(2), g, K, V, p, O), Catch::Contains("Vc.rows()"));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc.leftCols(2), g, K, V, p, O), Catch::Contains("Vc.cols()"));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc.leftCols(3), Vc, g, K, V, p, O), Catch::Contains("Kc.cols()"));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, g, K.leftCols(3), V, p, O), Catch::Contains("K.cols()"));
  matrix_t<double> Obad(N, 2);
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, g, K, V, p, Obad), Catch::Contains("O.rows()"));
  const std::vector<index_t> bad_pos(N, N);
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>(bad_pos), Kc, Vc, g, K, V, p, O), Catch::Contains("pos[0]"));
  const std::vector<index_t> short_pos(3, 0);
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>(short_pos), Kc, Vc, g, K, V, p, O), Catch::Contains("pos.size()"));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, g, K, V, att::compressed_params{.window = -1}, O),
                    Catch::Contains("window"));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, g, K, V, att::compressed_params{.gate_win = inf}, O),
                    Catch::Contains("gate_win"));
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, cmp::chunk_grid{.window = 2, .stride = 4}, K, V, p, O),
                    Catch::Contains("window"));
  att::index_lists bad_entries;
  for (index_t t = 0; t < N; ++t) bad_entries.push(std::vector<index_t>{t == 3 ? 0 : index_t(-1)});
  att::compressed_selection<double> sel{.entries = &bad_entries};
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, g, K, V, p, O, sel),
                    Catch::Contains("selection.entries[0]"));
  att::index_lists bad_blocks;
  for (index_t t = 0; t < N; ++t) bad_blocks.push(std::vector<index_t>{t + 1});
  att::compressed_selection<double> sel2{.blocks = &bad_blocks};
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, g, K, V, att::compressed_params{.select_block = 1}, O,
                        sel2),
                    Catch::Contains("selection.blocks[0]"));
  const std::vector<double> gates(5, 1.0);
  att::compressed_selection<double> sel3{.gates = gates};
  CHECK_THROWS_WITH(run(Q, std::span<const index_t>{}, Kc, Vc, g, K, V, p, O, sel3),
                    Catch::Contains("selection.gates.size()"));
  CHECK_THROWS_WITH(att::full_attention<double>(Q.topRows(3), K, V, std::vector<index_t>{0, 1}, {}, O.topRows(3)),
                    Catch::Contains("pos.size()"));
}

// ---- cost model (attention/cost.hpp): hand counts ----------------------------------------------

TEST_CASE("attention cost: compressed + window, top-k and NSA blocks, by hand", "[attention][cost]") {
  namespace att = kvphase::attention;
  // W = S = 4 over 16 tokens, the last 2 queries (t = 14: 3 visible entries, t = 15: 4), window 4
  att::compressed_call s{.grid = {.window = 4, .stride = 4}, .tokens = 16, .queries = 2, .window = 4, .d = 2, .dv = 2};
  auto c = att::compressed_cost(s);
  CHECK(c.attended == 3 + 4 + 4 + 4);
  CHECK(c.flops == 15 * 2 * (2 + 2));
  // Q and O 2 rows, 4 entries, raw rows 11 … 15 (the union of both windows), 4 channels each
  CHECK(c.bytes == (2 * 2 + 2 * 2 + 4 * 4 + 5 * 4) * 4);
  // top-2 of the visible entries, indexer of H = 1, dI = 2 over 3 + 4 visible entries
  s.top_k = 2;
  s.indexer_heads = 1;
  s.indexer_dim = 2;
  c = att::compressed_cost(s);
  CHECK(c.attended == 2 + 4 + 2 + 4);
  CHECK(c.flops == 12 * 8 + (3 + 4) * 1 * (2 * 2 + 4));
  CHECK(c.bytes == (8 + 16 + 20 + 2 * 2 + 2 + 4 * 2) * 4);
  // NSA: blocks of 4, 2 selected: t = 14 reads a full block and 3 tokens of its own, t = 15 two full blocks
  s.top_k = 0;
  s.indexer_heads = 0;
  s.select_top_n = 2;
  s.select_block = 4;
  c = att::compressed_cost(s);
  CHECK(c.attended == 15 + 7 + 8);
  CHECK(c.bytes == (8 + 16 + 16 * 4) * 4);  // every raw row may be selected
  // decode, no window: one query over its 4 visible entries
  const auto dc = att::compressed_cost({.grid = {.window = 4, .stride = 4}, .tokens = 16, .window = 0, .d = 2, .dv = 2});
  CHECK(dc.flops == 4 * 8);
  CHECK(dc.bytes == (4 + 16) * 4);
  CHECK(att::causal_cost(3, 2, 2).flops == 6 * 8);
  CHECK(att::dense_cost(2, 3, 2, 2).flops == 4.0 * 2 * 3 * 2);  // bench_attention's 4·M·n·d at dv = d
  CHECK_THROWS_WITH(att::compressed_cost({.tokens = 4, .queries = 5}), Catch::Contains("queries"));
}

TEMPLATE_TEST_CASE("gated mode's selected branch, walked block by block, equals one query at a time bit for bit",
                   "[attention][compressed]", float, double) {
  // NSA's selected branch runs block by block over chunks of 128 queries (each selected block
  // read once per chunk); every query still attends its blocks in increasing order through its
  // own online softmax. With gates (0, 1, 0) the output is that branch alone: it must equal the
  // per-query streaming softmax over the sorted blocks bit for bit, for 300 queries (three
  // chunks), lists given in decreasing order, a repeated block, 1–3 threads, sinks, every path;
  // key widths scored row by row (17) and a block of rows at a time (16, 32). A block is scored
  // for all the queries that selected it before its values are read, in steps of the key block.
  using Real = TestType;
  // (key width, selection block, key block): row by row, and whole blocks of rows in one and in
  // several steps per selected block
  for (const auto& [d, blk, kb] : {std::array<index_t, 3>{17, 16, 8}, {16, 48, 64}, {32, 48, 16}}) {
    const index_t N = 400, dv = 6, M = 300;
    const auto Q = kt::random_matrix<Real>(M, d, 61u, 2.0);
    const auto K = kt::random_matrix<Real>(N, d, 62u);
    const auto V = kt::random_matrix<Real>(N, dv, 63u);
    const cmp::chunk_grid g{.window = 8, .stride = 4};
    const matrix_t<Real> Kc = mean_pool(K, g), Vc = mean_pool(V, g);
    std::vector<index_t> pos(static_cast<std::size_t>(M));
    att::index_lists up, down;
    for (index_t i = 0; i < M; ++i) {
      const index_t t = N - M + i;
      pos[static_cast<std::size_t>(i)] = t;
      std::vector<index_t> bs;
      for (index_t b = 0; b <= t / blk; ++b)
        if ((b * 7 + i * 3) % 5 < 2 || b == t / blk) bs.push_back(b);
      if (i % 11 == 0) bs.push_back(bs.back());  // a block listed twice is attended twice
      up.push(bs);
      std::reverse(bs.begin(), bs.end());
      down.push(bs);
    }
    std::vector<Real> gates(static_cast<std::size_t>(3 * M));
    for (index_t i = 0; i < M; ++i) gates[static_cast<std::size_t>(3 * i + 1)] = Real(1);
    for (double sink : {-std::numeric_limits<double>::infinity(), 0.5}) {
      simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        const Real scale = att::default_scale<Real>(d);
        matrix_t<Real> want(M, dv);
        att::online_softmax<Real, Arch> st(dv, kb);
        for (index_t i = 0; i < M; ++i) {
          const index_t t = pos[static_cast<std::size_t>(i)];
          st.reset();
          for (index_t b : up.of(i)) {
            const index_t lo = b * blk, hi = std::min(t, (b + 1) * blk - 1);
            st.add_rows(Q.data() + i * d, K.data() + lo * d, d, V.data() + lo * dv, dv, hi - lo + 1, d, scale);
          }
          st.finish(static_cast<Real>(sink), want.data() + i * dv);
        }
        for (const att::index_lists* lists : {&up, &down}) {
          for (int threads : {1, 2, 3}) {
            att::compressed_params p{.window = 5,
                                     .combine = att::combine_mode::gated,
                                     .select_block = blk,
                                     .attn = {.sink = sink, .block = kb, .threads = threads}};
            matrix_t<Real> O(M, dv);
            att::compressed_attention<Real, Arch>(Q, pos, Kc, Vc, g, K, V, p, O,
                                                  att::compressed_selection<Real>{.blocks = lists, .gates = gates});
            INFO("arch " << simd::arch_name<Arch>() << " d " << d << " block " << blk << " key block " << kb << " sink " << sink << " threads " << threads
                         << (lists == &up ? " increasing" : " decreasing"));
            CHECK(O == want);
          }
        }
      });
    }
  }
}
