// Selection: lightning-indexer scores and top-k (CSA), NSA block importance and top-n blocks,
// against references written here; tie-breaking by lower index.
#include <catch2/catch.hpp>

#include <kvphase/attention/select.hpp>
#include <kvphase/compress/grid.hpp>
#include <kvphase/core/simd.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/tolerance.hpp"

using kvphase::index_t;
using kvphase::matrix_t;
namespace att = kvphase::attention;
namespace cmp = kvphase::compress;
namespace simd = kvphase::simd;
namespace kt = kvphase::test;

namespace {
/// Reference top-k: sort all indices by (score desc, index asc), keep k, return sorted by index.
std::vector<index_t> ref_top_k(const std::vector<double>& s, index_t k) {
  std::vector<index_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), index_t(0));
  std::stable_sort(idx.begin(), idx.end(), [&](index_t a, index_t b) { return s[a] > s[b]; });
  idx.resize(static_cast<std::size_t>(std::min<index_t>(k, static_cast<index_t>(s.size()))));
  std::sort(idx.begin(), idx.end());
  return idx;
}
}  // namespace

TEMPLATE_TEST_CASE("indexer scores match the reference on every path", "[attention][select]", float, double) {
  using Real = TestType;
  // H spans both forms on every path (packed from two batches of heads on fused-FMA paths, from
  // half a batch elsewhere: H = 40 and 70 are packed everywhere, on AVX-512 float three head
  // batches and a chunk of four plus one; below, chunks of two ending in one); n = 150 > 64 crosses
  // the packed kernel's key blocks, and its full key tiles end in single keys. The per-key form
  // must give its formula's bits: on fused-FMA paths from two heads keys in lanes, where n = 45,
  // 53 and 77 are whole tiles of 2 or 4 key blocks and shorter ones of 1-3, with a partial block,
  // and the H (query, head) pairs go 4 at a time with 1-3 left (each dot product the channels in order, one std::fma each
  // from zero); one head and other paths simd::dot (held against blocks of L keys for widths of
  // 1, 2, 4 and 8 batches); then scaled, ReLU, heads added in order (one fused step on FMA paths).
  for (index_t H : {1, 2, 3, 5, 8, 40, 70}) {
    for (index_t dI : {1, 7, 16, 32, 33, 64, 128}) {
      for (index_t n : H >= 40 ? std::vector<index_t>{150} : std::vector<index_t>{45, 53, 77}) {
        const auto q = kt::random_matrix<Real>(H, dI, 81u + static_cast<unsigned>(H * 100 + dI));
        const auto w = kt::random_matrix<Real>(1, H, 82u + static_cast<unsigned>(H));
        const auto KI = kt::random_matrix<Real>(n, dI, 83u + static_cast<unsigned>(dI));
        const Real scale = att::default_scale<Real>(dI);
        simd::for_each_arch([&](auto arch) {
          using Arch = decltype(arch);
          std::vector<Real> out(static_cast<std::size_t>(n));
          att::indexer_scores<Real, Arch>(q.data(), w.data(), H, KI.data(), dI, n, dI, scale, out.data());
          if (!att::detail::index_heads_packed<Real, Arch>(H)) {
            for (index_t i = 0; i < n; ++i) {
              Real s = 0;
              for (index_t h = 0; h < H; ++h) {
                if (simd::fused_fma<Arch>() && H >= 2) {
                  Real dot = 0;
                  for (index_t c = 0; c < dI; ++c) dot = std::fma(q(h, c), KI(i, c), dot);
                  s = std::fma(w(0, h), std::max(scale * dot, Real(0)), s);
                } else if constexpr (simd::fused_fma<Arch>()) {
                  const Real v = scale * simd::dot<Real, Arch>(q.data() + h * dI, KI.data() + i * dI, dI);
                  s = std::fma(w(0, h), std::max(v, Real(0)), s);
                } else {
                  const Real v = scale * simd::dot<Real, Arch>(q.data() + h * dI, KI.data() + i * dI, dI);
                  s += w(0, h) * std::max(v, Real(0));
                }
              }
              INFO("arch " << simd::arch_name<Arch>() << " H=" << H << " dI=" << dI << " key " << i);
              CHECK(out[static_cast<std::size_t>(i)] == s);
            }
          }
          for (index_t i = 0; i < n; ++i) {
            double ref = 0, bound = 0;
            for (index_t h = 0; h < H; ++h) {
              double dot = 0, a = 0;
              for (index_t c = 0; c < dI; ++c) {
                dot += double(q(h, c)) * double(KI(i, c));
                a += std::fabs(double(q(h, c)) * double(KI(i, c)));
              }
              dot *= double(scale);
              const double db = kt::dot_error_bound<Real>(static_cast<std::size_t>(dI), a * double(scale), 1);
              ref += double(w(0, h)) * std::max(dot, 0.0);
              // ReLU is 1-Lipschitz; the head sum adds H roundings
              bound += std::fabs(double(w(0, h))) * db +
                       kt::rel_bound<Real>(double(H + 1)) * std::fabs(double(w(0, h))) * std::fabs(dot);
            }
            INFO("arch " << simd::arch_name<Arch>() << " H=" << H << " dI=" << dI << " i=" << i);
            CHECK(std::fabs(double(out[static_cast<std::size_t>(i)]) - ref) <= bound + 1e-300);
          }
        });
      }
    }
  }
}

TEMPLATE_TEST_CASE("top-k's radix select equals the sorted reference on signs, zeros, infinities and ties",
                   "[attention][select]", float, double) {
  using Real = TestType;
  std::mt19937 g(11);
  const Real inf = std::numeric_limits<Real>::infinity();
  const Real tiny = std::numeric_limits<Real>::denorm_min(), big = std::numeric_limits<Real>::max();
  // 0: normal; 1: four values (ties at every threshold); 2: mixed magnitudes and specials;
  // 3: all equal; 4: values that differ only in the last bits (every radix digit matters);
  // 5: spikes at every 32nd index, where the floor's samples fall for n = 8192 (the floor is a
  // spike: too few reach it for k ≥ 257, so the select runs on all n; ties among the spikes for
  // smaller k); 6: eight levels (ties at the floor itself). From n = 2048 and k ≤ n/8 the select
  // runs on the scores at or above a sampled floor.
  for (index_t n : {1, 3, 17, 2048, 5001, 8192}) {
    for (int kind = 0; kind < 7; ++kind) {
      std::vector<Real> s(static_cast<std::size_t>(n));
      std::normal_distribution<double> nd;
      for (index_t i = 0; i < n; ++i) {
        const double z = nd(g);
        Real v = static_cast<Real>(z);
        if (kind == 1) v = static_cast<Real>(static_cast<int>(g() % 4) - 1);
        if (kind == 2) {
          const Real special[] = {Real(0), -Real(0), inf, -inf, tiny, -tiny, big, -big};
          v = g() % 3 == 0 ? special[g() % 8] : static_cast<Real>(z * std::pow(10.0, double(g() % 20) - 10.0));
        }
        if (kind == 3) v = Real(-0.5);
        if (kind == 4)
          v = std::nextafter(Real(1), Real(2)) + static_cast<Real>(g() % 64) * std::numeric_limits<Real>::epsilon();
        if (kind == 5 && i % 32 == 0) v = Real(100);
        if (kind == 6) v = static_cast<Real>(static_cast<int>(g() % 8));
        s[static_cast<std::size_t>(i)] = v;
      }
      std::vector<double> sd(s.begin(), s.end());
      for (index_t k : {index_t(1), index_t(2), n / 64, n / 16, n / 8, n / 8 + 1, n / 3 + 1, n / 2, n - 1, n, n + 5}) {
        if (k < 1) continue;
        const auto got = att::top_k<Real>(s, k);
        INFO("n=" << n << " kind=" << kind << " k=" << k);
        CHECK(got == ref_top_k(sd, k));
      }
    }
  }
}

TEST_CASE("top-k returns exactly the k largest scores, ties to the lower index", "[attention][select]") {
  std::mt19937 g(7);
  for (index_t n : {1, 2, 5, 64, 333}) {
    for (int ties : {0, 1}) {
      std::vector<double> s(static_cast<std::size_t>(n));
      for (auto& v : s) v = ties ? double(g() % 4) : std::normal_distribution<double>()(g);
      for (index_t k : {index_t(1), index_t(2), n / 2 + 1, n, n + 3}) {
        const auto got = att::top_k<double>(s, k);
        INFO("n=" << n << " ties=" << ties << " k=" << k);
        CHECK(got == ref_top_k(s, k));
        // defining property: every kept score ≥ every dropped score; equal ones kept by lower index
        std::vector<char> kept(s.size(), 0);
        for (index_t i : got) kept[static_cast<std::size_t>(i)] = 1;
        for (index_t a = 0; a < n; ++a)
          for (index_t b = 0; b < n; ++b)
            if (kept[static_cast<std::size_t>(a)] && !kept[static_cast<std::size_t>(b)]) {
              CHECK(s[static_cast<std::size_t>(a)] >= s[static_cast<std::size_t>(b)]);
              if (s[static_cast<std::size_t>(a)] == s[static_cast<std::size_t>(b)]) CHECK(a < b);
            }
      }
    }
  }
  const std::vector<float> f{1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  CHECK(att::top_k<float>(f, 2) == std::vector<index_t>{1, 2});
  CHECK(att::top_k<float>(f, 0).empty());
  CHECK_THROWS_WITH(att::top_k<float>(f, -1), Catch::Contains("k"));
  const std::vector<double> nan{1.0, std::nan("")};
  CHECK_THROWS_WITH(att::top_k<double>(nan, 1), Catch::Contains("scores[1]"));
}

// csa_select scores queries with few heads in groups of 8 (index_key_scores_group: key blocks
// shared by the group, each query up to its own visible count). Every list must be the one query
// alone gives (indexer_scores, then top_k_indices), on every path, for widths that take the key
// blocks (16, 64) and one that does not (24), queries whose visible counts differ within a group
// and a group count that leaves a partial group.
TEMPLATE_TEST_CASE("CSA selection in query groups equals one query at a time on every path", "[attention][select]",
                   float, double) {
  using Real = TestType;
  const cmp::chunk_grid g{.window = 8, .stride = 4};
  const index_t N = 700, M = 19, E = g.num_entries(N);
  std::vector<index_t> pos(static_cast<std::size_t>(M));
  for (index_t i = 0; i < M; ++i) pos[static_cast<std::size_t>(i)] = N - 1 - 13 * (M - 1 - i);
  for (index_t H : {1, 4}) {
    for (index_t dI : {16, 24, 64}) {
      const auto QI = kt::random_matrix<Real>(M, H * dI, 301u + static_cast<unsigned>(H + dI));
      const auto W = kt::random_matrix<Real>(M, H, 302u + static_cast<unsigned>(H));
      const auto KI = kt::random_matrix<Real>(E, dI, 303u + static_cast<unsigned>(dI));
      const att::indexer_params ip{.heads = H, .top_k = 11};
      const Real scale = att::default_scale<Real>(dI);
      kvphase::simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        INFO("arch " << kvphase::simd::arch_name<Arch>() << " H=" << H << " dI=" << dI);
        const auto sel = att::csa_select<Real, Arch>(QI, W, KI, g, pos, ip);
        REQUIRE(sel.size() == M);
        for (index_t i = 0; i < M; ++i) {
          const index_t nv = g.num_visible(pos[static_cast<std::size_t>(i)]);
          std::vector<Real> q(static_cast<std::size_t>(H * dI)), w(static_cast<std::size_t>(H)),
              s(static_cast<std::size_t>(nv));
          for (index_t c = 0; c < H * dI; ++c) q[static_cast<std::size_t>(c)] = QI(i, c);
          for (index_t h = 0; h < H; ++h) w[static_cast<std::size_t>(h)] = W(i, h);
          att::indexer_scores<Real, Arch>(q.data(), w.data(), H, KI.data(), dI, nv, dI, scale, s.data());
          std::vector<index_t> want(static_cast<std::size_t>(std::min(ip.top_k, nv))),
              work(static_cast<std::size_t>(nv));
          att::top_k_indices(s.data(), nv, ip.top_k, want.data(), work.data());
          const auto got = sel.of(i);
          CHECK(std::vector<index_t>(got.begin(), got.end()) == want);
        }
      });
    }
  }
}

TEMPLATE_TEST_CASE("CSA selection keeps the top-k visible entries by indexer score", "[attention][select]", float,
                   double) {
  using Real = TestType;
  const index_t N = 50, H = 3, dI = 9, M = N;
  const cmp::chunk_grid g{.window = 8, .stride = 4};
  const index_t E = g.num_entries(N);
  const auto QI = kt::random_matrix<Real>(M, H * dI, 91u);
  const auto W = kt::random_matrix<Real>(M, H, 92u);
  const auto KI = kt::random_matrix<Real>(E, dI, 93u);
  std::vector<index_t> pos(static_cast<std::size_t>(M));
  std::iota(pos.begin(), pos.end(), index_t(0));
  const att::indexer_params ip{.heads = H, .top_k = 3};
  const auto sel = att::csa_select<Real, kvphase::simd::scalar>(QI, W, KI, g, pos, ip);
  REQUIRE(sel.size() == M);
  for (index_t i = 0; i < M; ++i) {
    std::vector<double> s;
    for (index_t e = 0; e < E; ++e) {
      if (!g.visible(e, pos[static_cast<std::size_t>(i)])) continue;
      double v = 0;
      for (index_t h = 0; h < H; ++h) {
        Real dot = 0;
        for (index_t c = 0; c < dI; ++c) dot += QI(i, h * dI + c) * KI(e, c);
        v += double(W(i, h)) * std::max(double(dot * att::default_scale<Real>(dI)), 0.0);
      }
      s.push_back(v);
    }
    const auto got = sel.of(i);
    const auto want = ref_top_k(s, ip.top_k);
    // the scores of the chosen set must equal the k largest (robust to rounding-level ties)
    REQUIRE(got.size() == want.size());
    std::vector<double> gs, ws;
    for (index_t e : got) gs.push_back(s[static_cast<std::size_t>(e)]);
    for (index_t e : want) ws.push_back(s[static_cast<std::size_t>(e)]);
    std::sort(gs.begin(), gs.end());
    std::sort(ws.begin(), ws.end());
    for (std::size_t k = 0; k < gs.size(); ++k) CHECK(std::fabs(gs[k] - ws[k]) <= 1e-5 * (1 + std::fabs(ws[k])));
  }
  CHECK_THROWS_WITH(att::csa_select<Real>(QI, W, KI.topRows(2), g, pos, ip), Catch::Contains("KI.rows()"));
  CHECK_THROWS_WITH(att::csa_select<Real>(QI, W, KI, g, pos, att::indexer_params{.heads = 2}),
                    Catch::Contains("QI.cols()"));
  CHECK_THROWS_WITH(att::csa_select<Real>(QI, W.leftCols(2), KI, g, pos, ip), Catch::Contains("W.cols()"));
  CHECK_THROWS_WITH(att::csa_select<Real>(QI, W, KI, g, pos, att::indexer_params{.heads = H, .top_k = 0}),
                    Catch::Contains("indexer.top_k"));
}

TEMPLATE_TEST_CASE("NSA selection equals the per-query importance and top-n, bit for bit", "[attention][select]", float,
                   double) {
  // nsa_select builds the overlap geometry once per call; per query it must give exactly the
  // importances of the definition (same products, divisions and sums in the same order), so the
  // same blocks win as nsa_block_importance + nsa_select_blocks per query, ties included. Grids
  // with overlap, an origin, the NSA convention, entries that straddle selection blocks, strides of
  // a power of two and not; probabilities with ties, and subnormal ones (where a product with the
  // stride's reciprocal fused into the sum by an FMA would round differently from the division).
  using Real = TestType;
  const index_t N = 400, M = 23;
  for (cmp::chunk_grid g : {cmp::chunk_grid{.window = 4, .stride = 4}, cmp::chunk_grid{.window = 8, .stride = 4},
                            cmp::chunk_grid{.window = 5, .stride = 3, .origin = 2},
                            cmp::chunk_grid{.window = 32, .stride = 16, .convention = cmp::grid_convention::nsa},
                            cmp::chunk_grid{.window = 7, .stride = 6, .origin = -3}}) {
    const index_t E = g.num_entries(N);
    matrix_t<Real> P = kt::random_matrix<Real>(M, E, 301u).array().abs().matrix();
    for (index_t i = 0; i < M; i += 3)
      for (index_t e = 0; e < E; ++e) P(i, e) = static_cast<Real>(e % 3);  // ties
    for (index_t e = 0; e < E; ++e)  // subnormal and near-subnormal terms: the stride's division rounds them
      P(1, e) = std::numeric_limits<Real>::denorm_min() * static_cast<Real>(e % 7) +
                std::numeric_limits<Real>::min() * static_cast<Real>(e % 5) / Real(3);
    std::vector<index_t> pos(static_cast<std::size_t>(M));
    for (index_t i = 0; i < M; ++i) pos[static_cast<std::size_t>(i)] = (N - 1) * (i + 1) / M;
    for (auto mapping : {att::block_mapping::overlap, att::block_mapping::eq9}) {
      for (index_t block : {5, 16, 64}) {
        const att::block_select_params bp{.block = block, .top_n = 6, .initial = 1, .local = 2, .mapping = mapping};
        const auto got = att::nsa_select<Real>(P, g, pos, bp);
        REQUIRE(got.size() == M);
        for (index_t i = 0; i < M; ++i) {
          const index_t t = pos[static_cast<std::size_t>(i)];
          const index_t nb = t / block + 1, nv = std::min<index_t>(g.num_visible(t), E);
          std::vector<Real> prow(static_cast<std::size_t>(nv)), imp(static_cast<std::size_t>(nb));
          for (index_t e = 0; e < nv; ++e) prow[static_cast<std::size_t>(e)] = P(i, e);
          att::nsa_block_importance(prow.data(), nv, g, block, mapping, nb, imp.data());
          if (mapping == att::block_mapping::overlap) {
            // the definition, entry by entry (p·|sources ∩ block| / S, summed in entry order): the
            // tabulated importances equal it bit for bit, with a table built for one query or for all
            std::vector<Real> def(static_cast<std::size_t>(nb), Real(0)), all(static_cast<std::size_t>(nb));
            for (index_t e = 0; e < nv; ++e) {
              const cmp::token_range r = g.sources(e);
              for (index_t j = std::max<index_t>(0, kvphase::floor_div(r.first, block));
                   j <= std::min<index_t>(nb - 1, kvphase::floor_div(r.last, block)); ++j) {
                const index_t lo = std::max(r.first, j * block), hi = std::min(r.last, (j + 1) * block - 1);
                if (hi >= lo)
                  def[static_cast<std::size_t>(j)] +=
                      prow[static_cast<std::size_t>(e)] * static_cast<Real>(hi - lo + 1) / static_cast<Real>(g.stride);
              }
            }
            CHECK(imp == def);
            att::detail::block_overlaps(g, E, block).importance(prow.data(), nv, g.stride, nb, all.data());
            CHECK(all == def);
          }
          std::vector<index_t> out(static_cast<std::size_t>(nb)), work(static_cast<std::size_t>(nb));
          out.resize(static_cast<std::size_t>(att::nsa_select_blocks(imp.data(), nb, bp, out.data(), work.data())));
          const auto list = got.of(i);
          INFO(g << " mapping " << att::to_string(mapping) << " block " << block << " query " << i);
          CHECK(std::vector<index_t>(list.begin(), list.end()) == out);
        }
      }
    }
  }
}

TEST_CASE("CSA and NSA selections are the same lists for any thread count", "[attention][select]") {
  // queries are split into contiguous ranges, one per thread, and the lists concatenated in query
  // order; uneven splits (3 threads over 37 queries), more threads than queries, and a bad
  // position reported before any thread starts
  const index_t N = 300, H = 4, dI = 16, M = 37;
  const cmp::chunk_grid g{.window = 8, .stride = 4};
  const index_t E = g.num_entries(N);
  const auto QI = kt::random_matrix<float>(M, H * dI, 191u);
  const auto W = kt::random_matrix<float>(M, H, 192u);
  const auto KI = kt::random_matrix<float>(E, dI, 193u);
  matrix_t<float> P = kt::random_matrix<float>(M, E, 194u).array().abs().matrix();
  std::vector<index_t> pos(static_cast<std::size_t>(M));
  for (index_t i = 0; i < M; ++i) pos[static_cast<std::size_t>(i)] = N - 1 - 7 * (M - 1 - i);
  auto same = [](const att::index_lists& a, const att::index_lists& b) {
    return a.offsets == b.offsets && a.indices == b.indices;
  };
  const auto c1 = att::csa_select<float>(QI, W, KI, g, pos, att::indexer_params{.heads = H, .top_k = 9});
  const auto n1 = att::nsa_select<float>(P, g, pos, att::block_select_params{.block = 16, .top_n = 5});
  REQUIRE(c1.size() == M);
  REQUIRE(n1.size() == M);
  for (int t : {2, 3, 64, 0}) {
    INFO("threads " << t);
    CHECK(
        same(att::csa_select<float>(QI, W, KI, g, pos, att::indexer_params{.heads = H, .top_k = 9, .threads = t}), c1));
    CHECK(same(att::nsa_select<float>(P, g, pos, att::block_select_params{.block = 16, .top_n = 5, .threads = t}), n1));
  }
  auto bad = pos;
  bad[20] = -3;
  CHECK_THROWS_WITH(
      att::csa_select<float>(QI, W, KI, g, bad, att::indexer_params{.heads = H, .top_k = 9, .threads = 2}),
      Catch::Contains("pos[20]"));
  CHECK_THROWS_WITH(att::nsa_select<float>(P, g, bad, att::block_select_params{.block = 16, .top_n = 5, .threads = 2}),
                    Catch::Contains("pos[20]"));
  CHECK_THROWS_WITH((att::indexer_params{.threads = -1}.validate()), Catch::Contains("indexer.threads"));
  CHECK_THROWS_WITH((att::block_select_params{.threads = 2000}.validate()), Catch::Contains("select.threads"));
}

TEST_CASE("NSA block importance: overlap mapping and eq. 9 as printed", "[attention][select]") {
  // l = 32, d = 16 (NSA convention), l' = 64: geometric overlap weights 1,2,2,2,1 on 4j−1 … 4j+3
  const cmp::chunk_grid g{.window = 32, .stride = 16, .convention = cmp::grid_convention::nsa};
  const index_t n_cmp = 20, nb = 6;
  for (index_t probe = 0; probe < n_cmp; ++probe) {
    std::vector<double> p(static_cast<std::size_t>(n_cmp), 0.0), imp(static_cast<std::size_t>(nb));
    p[static_cast<std::size_t>(probe)] = 1.0;
    att::nsa_block_importance(p.data(), n_cmp, g, 64, att::block_mapping::overlap, nb, imp.data());
    for (index_t j = 0; j < nb; ++j) {
      // entry `probe` covers tokens [16·probe, 16·probe + 31]
      const index_t lo = std::max<index_t>(16 * probe, 64 * j), hi = std::min<index_t>(16 * probe + 31, 64 * j + 63);
      const double want = hi >= lo ? double(hi - lo + 1) / 16.0 : 0.0;
      CHECK(imp[static_cast<std::size_t>(j)] == want);
    }
    att::nsa_block_importance(p.data(), n_cmp, g, 64, att::block_mapping::eq9, nb, imp.data());
    for (index_t j = 0; j < nb; ++j) {
      const index_t off = 4 * j - probe;  // a + b with a ∈ [0,4), b ∈ [0,2)
      const double want = (off < 0 || off > 4) ? 0.0 : (off == 0 || off == 4 ? 1.0 : 2.0);
      CHECK(imp[static_cast<std::size_t>(j)] == want);
    }
  }
  // same blocking: the identity
  const cmp::chunk_grid g1{.window = 8, .stride = 8, .convention = cmp::grid_convention::nsa};
  std::vector<double> p{0.1, 0.4, 0.2, 0.3}, imp(4);
  for (auto m : {att::block_mapping::overlap, att::block_mapping::eq9}) {
    att::nsa_block_importance(p.data(), 4, g1, 8, m, 4, imp.data());
    CHECK(imp == p);
  }
}

TEST_CASE("NSA top-n blocks always include initial and local blocks, ties to the lower index", "[attention][select]") {
  const att::block_select_params bp{.block = 4, .top_n = 4, .initial = 1, .local = 2};
  std::vector<double> imp{0.0, 5.0, 1.0, 5.0, 9.0, 0.0, 0.0};
  std::vector<index_t> out(imp.size()), work(imp.size());
  const index_t k = att::nsa_select_blocks(imp.data(), 7, bp, out.data(), work.data());
  out.resize(static_cast<std::size_t>(k));
  CHECK(out == std::vector<index_t>{0, 4, 5, 6});  // forced 0, 5, 6; best free is 4
  const att::block_select_params bp2{.block = 4, .top_n = 5, .initial = 1, .local = 2};
  out.assign(imp.size(), 0);
  out.resize(static_cast<std::size_t>(att::nsa_select_blocks(imp.data(), 7, bp2, out.data(), work.data())));
  CHECK(out == std::vector<index_t>{0, 1, 4, 5, 6});  // tie 1 vs 3 at 5.0: lower index
  // fewer blocks than the budget: all of them
  out.assign(2, 0);
  CHECK(att::nsa_select_blocks(imp.data(), 2, bp, out.data(), work.data()) == 2);

  // nsa_select from probabilities: query at t sees blocks 0 … t/4
  const cmp::chunk_grid g{.window = 4, .stride = 4, .convention = cmp::grid_convention::nsa};
  matrix_t<double> P = matrix_t<double>::Zero(2, 8);
  P(0, 2) = 0.9;
  P(1, 1) = 0.5;
  P(1, 6) = 0.7;  // not visible to a query at t = 20 (entry 6 ends at 27)
  const std::vector<index_t> pos{13, 20};
  const auto sel =
      att::nsa_select<double>(P, g, pos, att::block_select_params{.block = 4, .top_n = 3, .initial = 1, .local = 1});
  CHECK(std::vector<index_t>(sel.of(0).begin(), sel.of(0).end()) == std::vector<index_t>{0, 2, 3});
  CHECK(std::vector<index_t>(sel.of(1).begin(), sel.of(1).end()) == std::vector<index_t>{0, 1, 5});
  CHECK_THROWS_WITH((att::block_select_params{.top_n = 2, .initial = 1, .local = 2}.validate()),
                    Catch::Contains("select.top_n"));
  CHECK_THROWS_WITH((att::block_select_params{.block = 0}.validate()), Catch::Contains("select.block"));
}
