// Attention kernels (scores, softmax with sink, weighted sum, online softmax, batched dense
// attention) against a naive double-precision reference on every compiled SIMD path.
#include <catch2/catch.hpp>

#include <kvphase/attention/detail/flash_xsimd.hpp>
#include <kvphase/attention/full.hpp>
#include <kvphase/attention/kernels.hpp>
#include <kvphase/core/simd.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/tolerance.hpp"

using kvphase::index_t;
using kvphase::matrix_t;
namespace att = kvphase::attention;
namespace simd = kvphase::simd;
namespace kt = kvphase::test;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();

template <class Real>
double unit_roundoff() {
  return std::numeric_limits<Real>::epsilon() / 2.0;
}

/// Reference for query i of Q over key rows [0, n) of K/V.
template <class Real>
kt::ref_attention ref_query(const matrix_t<Real>& Q, index_t i, const matrix_t<Real>& K, const matrix_t<Real>& V,
                            index_t n, Real scale, double sink, double blocks) {
  static thread_local matrix_t<double> Kd, Vd;
  Kd = K.template cast<double>();
  Vd = V.template cast<double>();
  std::vector<double> q(static_cast<std::size_t>(Q.cols()));
  for (index_t c = 0; c < Q.cols(); ++c) q[static_cast<std::size_t>(c)] = Q(i, c);
  std::vector<const double*> ks, vs;
  for (index_t j = 0; j < n; ++j) {
    ks.push_back(Kd.data() + j * Kd.cols());
    vs.push_back(Vd.data() + j * Vd.cols());
  }
  return kt::reference_attend(q, ks, vs, V.cols(), static_cast<double>(scale), sink, unit_roundoff<Real>(), blocks);
}
}  // namespace

TEMPLATE_TEST_CASE("score_rows matches the double reference on every path", "[attention][kernels]", float, double) {
  using Real = TestType;
  for (index_t d : {1, 3, 16, 17, 33, 128}) {
    for (index_t n : {1, 5, 40}) {
      const auto K = kt::random_matrix<Real>(n, d, 11u + static_cast<unsigned>(d * 7 + n));
      const auto q = kt::random_matrix<Real>(1, d, 99u + static_cast<unsigned>(d));
      const Real scale = att::default_scale<Real>(d);
      simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        std::vector<Real> s(static_cast<std::size_t>(n));
        att::score_rows<Real, Arch>(q.data(), K.data(), d, n, d, scale, s.data());
        for (index_t j = 0; j < n; ++j) {
          double ref = 0, abs_sum = 0;
          for (index_t c = 0; c < d; ++c) {
            ref += double(q(0, c)) * double(K(j, c));
            abs_sum += std::fabs(double(q(0, c)) * double(K(j, c)));
          }
          ref *= double(scale);
          const double bound = kt::dot_error_bound<Real>(static_cast<std::size_t>(d), abs_sum * double(scale), 1);
          INFO("arch " << simd::arch_name<Arch>() << " d=" << d << " n=" << n << " j=" << j);
          CHECK(std::fabs(double(s[static_cast<std::size_t>(j)]) - ref) <= bound);
        }
      });
    }
  }
}

TEMPLATE_TEST_CASE("score_rows and score_indexed equal scale times simd::dot per row, bit for bit, on every path",
                   "[attention][kernels]", float, double) {
  // Widths of 1, 2, 4 and 8 batches are scored a block of rows at a time (the query held in
  // registers, the block's dot products reduced by hsum_rows); every score must still be
  // scale · simd::dot of its row, the form they replaced, for block-sized and ragged row counts,
  // strided and gathered rows, and the widths around the block widths. add_scored after
  // score_rows must be add_rows.
  using Real = TestType;
  for (index_t d : {1, 2, 4, 7, 8, 16, 24, 32, 64, 65, 128, 256}) {
    const index_t ld = d + 3, rows = 70;
    const auto K = kt::random_matrix<Real>(rows, ld, 501u + static_cast<unsigned>(d), 2.0);
    const auto V = kt::random_matrix<Real>(rows, 5, 502u + static_cast<unsigned>(d));
    const auto q = kt::random_matrix<Real>(1, d, 503u + static_cast<unsigned>(d), 2.0);
    const Real scale = att::default_scale<Real>(d);
    std::vector<index_t> idx;
    for (index_t j = 0; j < 50; ++j) idx.push_back((j * 37 + 11) % rows);
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      for (index_t n : {0, 1, 15, 16, 17, 33, 50}) {
        std::vector<Real> s(static_cast<std::size_t>(n) + 1, Real(-7)), si(static_cast<std::size_t>(n) + 1, Real(-7));
        att::score_rows<Real, Arch>(q.data(), K.data(), ld, n, d, scale, s.data());
        att::score_indexed<Real, Arch>(q.data(), K.data(), ld, idx.data(), n, d, scale, si.data());
        index_t differ = 0;
        for (index_t j = 0; j < n; ++j) {
          differ += s[static_cast<std::size_t>(j)] != scale * simd::dot<Real, Arch>(q.data(), K.data() + j * ld, d);
          differ += si[static_cast<std::size_t>(j)] !=
                    scale * simd::dot<Real, Arch>(q.data(), K.data() + idx[static_cast<std::size_t>(j)] * ld, d);
        }
        INFO("arch " << simd::arch_name<Arch>() << " d=" << d << " n=" << n);
        CHECK(differ == 0);
        CHECK(s[static_cast<std::size_t>(n)] == Real(-7));  // nothing written past n
        CHECK(si[static_cast<std::size_t>(n)] == Real(-7));
        // where multiply-adds are fused operations (elsewhere the compiler may contract them in
        // one loop and not in another, and callers keep add_rows)
        if (n == 0 || !simd::fused_fma<Arch>()) continue;
        att::online_softmax<Real, Arch> a(5, 64), b(5, 64);
        a.add_rows(q.data(), K.data(), ld, V.data(), 5, n, d, scale);
        b.add_scored(s.data(), V.data(), 5, n);
        CHECK(a.running_max() == b.running_max());
        CHECK(a.running_sum() == b.running_sum());
        for (index_t c = 0; c < 5; ++c) CHECK(a.accumulator()[c] == b.accumulator()[c]);
      }
    });
  }
}

TEMPLATE_TEST_CASE("softmax_with_sink matches the reference, a sink of -inf is no sink", "[attention][kernels]",
                   float, double) {
  using Real = TestType;
  const double u = unit_roundoff<Real>();
  for (index_t n : {1, 2, 7, 17, 33}) {
    for (double sink : {-inf, -3.0, 0.0, 2.5}) {
      const auto x0 = kt::random_matrix<Real>(1, n, 5u + static_cast<unsigned>(n), 2.0);
      simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        std::vector<Real> x(x0.data(), x0.data() + n);
        const Real lse = att::softmax_with_sink<Real, Arch>(x.data(), n, static_cast<Real>(sink));
        double m = sink;
        for (index_t j = 0; j < n; ++j) m = std::max(m, double(x0(0, j)));
        double l = std::isfinite(sink) ? std::exp(sink - m) : 0.0;
        for (index_t j = 0; j < n; ++j) l += std::exp(double(x0(0, j)) - m);
        INFO("arch " << simd::arch_name<Arch>() << " n=" << n << " sink=" << sink);
        const double tol = (2 * (n + 12) * u) / (1 - 2 * (n + 12) * u);
        for (index_t j = 0; j < n; ++j) {
          const double ref = std::exp(double(x0(0, j)) - m) / l;
          CHECK(std::fabs(double(x[static_cast<std::size_t>(j)]) - ref) <= tol * ref + 1e-300);
        }
        CHECK(std::fabs(double(lse) - (m + std::log(l))) <= tol * (std::fabs(m) + 1));
        if (!std::isfinite(sink)) {
          // −∞ sink = plain softmax: identical to the shim's softmax on the same path
          std::vector<Real> y(x0.data(), x0.data() + n);
          simd::softmax_inplace<Real, Arch>(y.data(), n);
          for (index_t j = 0; j < n; ++j)
            CHECK(std::fabs(double(y[static_cast<std::size_t>(j)]) - double(x[static_cast<std::size_t>(j)])) <=
                  tol * double(y[static_cast<std::size_t>(j)]));
        }
      });
    }
  }
  // empty input: nothing to attend
  std::vector<float> none;
  CHECK(att::softmax_with_sink<float>(none.data(), 0, -std::numeric_limits<float>::infinity()) ==
        -std::numeric_limits<float>::infinity());
}

TEMPLATE_TEST_CASE("weighted_sum and attend_materialised match the reference", "[attention][kernels]", float,
                   double) {
  using Real = TestType;
  for (index_t d : {1, 17, 64}) {
    for (index_t dv : {1, 3, 16, 19}) {
      for (index_t n : {1, 9, 70}) {
        const auto K = kt::random_matrix<Real>(n, d, 3u + static_cast<unsigned>(n + d));
        const auto V = kt::random_matrix<Real>(n, dv, 4u + static_cast<unsigned>(n + dv));
        const auto Q = kt::random_matrix<Real>(1, d, 8u + static_cast<unsigned>(d), 2.0);
        const Real scale = att::default_scale<Real>(d);
        for (double sink : {-inf, 0.5}) {
          const auto ref = ref_query<Real>(Q, 0, K, V, n, scale, sink, 1);
          simd::for_each_arch([&](auto arch) {
            using Arch = decltype(arch);
            std::vector<Real> scratch(static_cast<std::size_t>(n)), o(static_cast<std::size_t>(dv));
            att::attend_materialised<Real, Arch>(Q.data(), K.data(), d, V.data(), dv, n, d, dv, scale,
                                                 static_cast<Real>(sink), scratch.data(), o.data());
            INFO("arch " << simd::arch_name<Arch>() << " d=" << d << " dv=" << dv << " n=" << n << " sink=" << sink);
            for (index_t c = 0; c < dv; ++c)
              CHECK(std::fabs(double(o[static_cast<std::size_t>(c)]) - ref.o[static_cast<std::size_t>(c)]) <=
                    ref.bound[static_cast<std::size_t>(c)]);
            // weighted_sum alone with exact weights
            std::vector<Real> p(static_cast<std::size_t>(n), Real(1) / Real(n));
            att::weighted_sum<Real, Arch>(p.data(), V.data(), dv, n, dv, o.data());
            for (index_t c = 0; c < dv; ++c) {
              double r = 0, a = 0;
              for (index_t j = 0; j < n; ++j) {
                r += double(p[0]) * double(V(j, c));
                a += std::fabs(double(p[0]) * double(V(j, c)));
              }
              CHECK(std::fabs(double(o[static_cast<std::size_t>(c)]) - r) <=
                    kt::dot_error_bound<Real>(static_cast<std::size_t>(n), a));
            }
          });
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("online_softmax over blocks and segments matches the reference", "[attention][kernels]", float,
                   double) {
  using Real = TestType;
  for (index_t d : {1, 5, 16, 17, 64}) {
    for (index_t dv : {1, 3, 19, 131}) {
      for (index_t n : {1, 7, 300}) {
        for (index_t block : {1, 7, 256}) {
          if (block == 1 && n > 7) continue;
          const auto K = kt::random_matrix<Real>(n, d, 21u + static_cast<unsigned>(n * 3 + d));
          const auto V = kt::random_matrix<Real>(n, dv, 22u + static_cast<unsigned>(n + dv));
          // increasing query scale so the running max grows across blocks (rescale path)
          auto Q = kt::random_matrix<Real>(1, d, 23u + static_cast<unsigned>(d), 3.0);
          const Real scale = att::default_scale<Real>(d);
          const double blocks = std::ceil(double(n) / double(block)) + 1;
          for (double sink : {-inf, 1.0}) {
            const auto ref = ref_query<Real>(Q, 0, K, V, n, scale, sink, blocks);
            simd::for_each_arch([&](auto arch) {
              using Arch = decltype(arch);
              att::online_softmax<Real, Arch> st(dv, block);
              std::vector<Real> o(static_cast<std::size_t>(dv));
              // split into two segments to exercise multiple add calls
              const index_t h = n / 2;
              st.add_rows(Q.data(), K.data(), d, V.data(), dv, h, d, scale);
              std::vector<index_t> idx;
              for (index_t j = h; j < n; ++j) idx.push_back(j);
              st.add_indexed(Q.data(), K.data(), d, V.data(), dv, idx.data(), n - h, d, scale);
              CHECK(st.keys_seen() == n);
              st.finish(static_cast<Real>(sink), o.data());
              INFO("arch " << simd::arch_name<Arch>() << " d=" << d << " dv=" << dv << " n=" << n
                           << " block=" << block << " sink=" << sink);
              for (index_t c = 0; c < dv; ++c)
                CHECK(std::fabs(double(o[static_cast<std::size_t>(c)]) - ref.o[static_cast<std::size_t>(c)]) <=
                      ref.bound[static_cast<std::size_t>(c)]);
            });
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("online_softmax's accumulator equals one axpy per row, bit for bit, on every path",
                   "[attention][kernels]", float, double) {
  // The accumulator keeps up to 8 batches in registers across a block's rows; per channel it must
  // be the same fused multiply-add chain as simd::axpy row after row (the form it replaced),
  // including the rescale when the running max grows and the scalar channel tail.
  using Real = TestType;
  const index_t d = 24, n = 150, block = 64;
  for (index_t dv : {1, 16, 19, 128, 131, 300, 515}) {
    const auto K = kt::random_matrix<Real>(n, d, 31u + static_cast<unsigned>(dv));
    const auto V = kt::random_matrix<Real>(n, dv, 32u + static_cast<unsigned>(dv));
    const auto Q = kt::random_matrix<Real>(1, d, 33u, 3.0);
    const Real scale = att::default_scale<Real>(d);
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      att::online_softmax<Real, Arch> st(dv, block);
      st.add_rows(Q.data(), K.data(), d, V.data(), dv, n, d, scale);
      // the per-row form: absorb() with one axpy per row
      std::vector<Real> acc(static_cast<std::size_t>(dv), Real(0)), s(static_cast<std::size_t>(block));
      Real m = -std::numeric_limits<Real>::infinity(), l = 0;
      for (index_t j0 = 0; j0 < n; j0 += block) {
        const index_t b = std::min(block, n - j0);
        att::score_rows<Real, Arch>(Q.data(), K.data() + j0 * d, d, b, d, scale, s.data());
        const Real m_new = std::max(m, simd::max_value<Real, Arch>(s.data(), b));
        if (m_new > m) {
          const Real shift = m - m_new;
          const Real alpha = shift < simd::exp_flush_below<Real> ? Real(0) : std::exp(shift);
          l *= alpha;
          simd::scale<Real, Arch>(alpha, acc.data(), dv);
          m = m_new;
        }
        l += simd::exp_shift_sum<Real, Arch>(s.data(), m, b);
        for (index_t j = 0; j < b; ++j) simd::axpy<Real, Arch>(s[static_cast<std::size_t>(j)], V.data() + (j0 + j) * dv, acc.data(), dv);
      }
      INFO("arch " << simd::arch_name<Arch>() << " dv=" << dv);
      CHECK(st.running_max() == m);
      CHECK(st.running_sum() == l);
      index_t differ = 0;
      for (index_t c = 0; c < dv; ++c) differ += st.accumulator()[c] != acc[static_cast<std::size_t>(c)];
      CHECK(differ == 0);
    });
  }
}

TEST_CASE("online_softmax with no keys gives zero output", "[attention][kernels]") {
  att::online_softmax<double> st(3);
  std::vector<double> o(3, 7.0);
  CHECK(st.finish(-inf, o.data()) == -inf);
  CHECK(o == std::vector<double>{0.0, 0.0, 0.0});
  CHECK(st.finish(2.0, o.data()) == 2.0);
  CHECK_THROWS_AS(att::online_softmax<double>(-1), kvphase::error);
  CHECK_THROWS_WITH(att::online_softmax<double>(4, 0), Catch::Contains("block"));
}

TEMPLATE_TEST_CASE("batched dense attention (all keys or per-query prefixes) matches the reference",
                   "[attention][kernels]", float, double) {
  using Real = TestType;
  struct shape {
    index_t M, n, d, dv;
  };
  for (shape sh : {shape{1, 1, 1, 1}, shape{1, 300, 17, 5}, shape{5, 40, 16, 16}, shape{33, 130, 33, 19},
                   shape{70, 300, 128, 128}, shape{37, 257, 64, 48}}) {
    const auto Q = kt::random_matrix<Real>(sh.M, sh.d, 31u + static_cast<unsigned>(sh.M), 2.0);
    const auto K = kt::random_matrix<Real>(sh.n, sh.d, 32u + static_cast<unsigned>(sh.n));
    const auto V = kt::random_matrix<Real>(sh.n, sh.dv, 33u + static_cast<unsigned>(sh.dv));
    const Real scale = att::default_scale<Real>(sh.d);
    std::vector<index_t> ends(static_cast<std::size_t>(sh.M));
    for (index_t i = 0; i < sh.M; ++i) ends[static_cast<std::size_t>(i)] = 1 + (i * 7919) % sh.n;
    for (bool prefix : {false, true}) {
      for (double sink : {-inf, 0.25}) {
        simd::for_each_arch([&](auto arch) {
          using Arch = decltype(arch);
          matrix_t<Real> O(sh.M, sh.dv);
          att::attend_batch<Real, Arch>(Q.data(), sh.d, sh.M, K.data(), sh.d, V.data(), sh.dv, sh.n, sh.d, sh.dv,
                                        prefix ? ends.data() : nullptr, scale, static_cast<Real>(sink), O.data(),
                                        sh.dv, 256, 2);
          for (index_t i = 0; i < sh.M; ++i) {
            const index_t ni = prefix ? ends[static_cast<std::size_t>(i)] : sh.n;
            const auto ref = ref_query<Real>(Q, i, K, V, ni, scale, sink, std::ceil(double(ni) / 64.0) + 2);
            for (index_t c = 0; c < sh.dv; ++c) {
              INFO("arch " << simd::arch_name<Arch>() << " M=" << sh.M << " n=" << sh.n << " d=" << sh.d
                           << " dv=" << sh.dv << " prefix=" << prefix << " sink=" << sink << " i=" << i
                           << " c=" << c);
              CHECK(std::fabs(double(O(i, c)) - ref.o[static_cast<std::size_t>(c)]) <=
                    ref.bound[static_cast<std::size_t>(c)]);
            }
          }
        });
      }
    }
  }
}

TEST_CASE("batched attention is bitwise identical for 1 and 2 threads", "[attention][kernels]") {
  const index_t M = 70, n = 300, d = 128, dv = 128;
  const auto Q = kt::random_matrix<float>(M, d, 1);
  const auto K = kt::random_matrix<float>(n, d, 2);
  const auto V = kt::random_matrix<float>(n, dv, 3);
  matrix_t<float> O1(M, dv), O2(M, dv);
  att::attention_params p1{.threads = 1}, p2{.threads = 2};
  att::dense_attention<float>(Q, K, V, p1, O1);
  att::dense_attention<float>(Q, K, V, p2, O2);
  CHECK((O1.array() == O2.array()).all());
}

TEMPLATE_TEST_CASE("batched attention reads strided rows in place: padding columns are never read or written",
                   "[attention][kernels]", float, double) {
  using Real = TestType;
  const Real nan = std::numeric_limits<Real>::quiet_NaN();
  struct shape {
    index_t M, n, d, dv;
  };
  for (shape sh : {shape{40, 300, 33, 19}, shape{70, 260, 16, 16}, shape{9, 130, 128, 24}}) {
    const auto Q = kt::random_matrix<Real>(sh.M, sh.d, 41u, 2.0);
    const auto K = kt::random_matrix<Real>(sh.n, sh.d, 42u);
    const auto V = kt::random_matrix<Real>(sh.n, sh.dv, 43u);
    // the same matrices inside wider rows whose extra columns are NaN: any read of them would
    // turn an output into NaN, any write would replace a NaN in O's padding
    matrix_t<Real> Qw = matrix_t<Real>::Constant(sh.M, sh.d + 3, nan), Kw = matrix_t<Real>::Constant(sh.n, sh.d + 5, nan),
                   Vw = matrix_t<Real>::Constant(sh.n, sh.dv + 7, nan);
    Qw.leftCols(sh.d) = Q;
    Kw.leftCols(sh.d) = K;
    Vw.leftCols(sh.dv) = V;
    const Real scale = att::default_scale<Real>(sh.d);
    std::vector<index_t> ends(static_cast<std::size_t>(sh.M));
    for (index_t i = 0; i < sh.M; ++i) ends[static_cast<std::size_t>(i)] = 1 + (i * 613) % sh.n;
    for (bool prefix : {false, true}) {
      simd::for_each_arch([&](auto arch) {
        using Arch = decltype(arch);
        matrix_t<Real> O(sh.M, sh.dv), Ow = matrix_t<Real>::Constant(sh.M, sh.dv + 2, nan);
        att::attend_batch<Real, Arch>(Q.data(), sh.d, sh.M, K.data(), sh.d, V.data(), sh.dv, sh.n, sh.d, sh.dv,
                                      prefix ? ends.data() : nullptr, scale, Real(0.5), O.data(), sh.dv, 256, 2);
        att::attend_batch<Real, Arch>(Qw.data(), sh.d + 3, sh.M, Kw.data(), sh.d + 5, Vw.data(), sh.dv + 7, sh.n,
                                      sh.d, sh.dv, prefix ? ends.data() : nullptr, scale, Real(0.5), Ow.data(),
                                      sh.dv + 2, 256, 2);
        INFO("arch " << simd::arch_name<Arch>() << " M=" << sh.M << " n=" << sh.n << " d=" << sh.d << " dv=" << sh.dv
                     << " prefix=" << prefix);
        CHECK((Ow.leftCols(sh.dv).array() == O.array()).all());
        CHECK(Ow.rightCols(2).array().isNaN().all());
      });
    }
  }
}

TEST_CASE("attention_params validation names the parameter", "[attention][kernels]") {
  CHECK_THROWS_WITH((att::attention_params{.scale = -1}.validate()), Catch::Contains("scale"));
  CHECK_THROWS_WITH((att::attention_params{.sink = inf}.validate()), Catch::Contains("sink"));
  CHECK_THROWS_WITH((att::attention_params{.sink = std::nan("")}.validate()), Catch::Contains("sink"));
  CHECK_THROWS_WITH((att::attention_params{.block = 0}.validate()), Catch::Contains("block"));
  CHECK_THROWS_WITH((att::attention_params{.threads = -2}.validate()), Catch::Contains("threads"));
  const matrix_t<double> Q(4, 8), K(10, 8), V(10, 3), Kbad(10, 7), Vbad(9, 3);
  matrix_t<double> O(4, 3), Obad(4, 2);
  CHECK_THROWS_WITH(att::dense_attention<double>(Q, Kbad, V, {}, O), Catch::Contains("K.cols()"));
  CHECK_THROWS_WITH(att::dense_attention<double>(Q, K, Vbad, {}, O), Catch::Contains("V.rows()"));
  CHECK_THROWS_WITH(att::dense_attention<double>(Q, K, V, {}, Obad), Catch::Contains("O.cols()"));
}

TEMPLATE_TEST_CASE("few queries over many keys (segmented decode path) match the reference and do not depend "
                   "on the thread count", "[attention][kernels]", float, double) {
  using Real = TestType;
  const index_t n = 9000, d = 24, dv = 10;
  const auto K = kt::random_matrix<Real>(n, d, 101u);
  const auto V = kt::random_matrix<Real>(n, dv, 102u);
  for (index_t M : {1, 3}) {
    const auto Q = kt::random_matrix<Real>(M, d, 103u + static_cast<unsigned>(M), 2.0);
    const Real scale = att::default_scale<Real>(d);
    const std::vector<index_t> ends{n, 4096, 5000};
    for (bool prefix : {false, true}) {
      for (double sink : {-inf, 3.0}) {
        simd::for_each_arch([&](auto arch) {
          using Arch = decltype(arch);
          matrix_t<Real> O1(M, dv), O2(M, dv);
          for (int th : {1, 2}) {
            att::attend_batch<Real, Arch>(Q.data(), d, M, K.data(), d, V.data(), dv, n, d, dv,
                                          prefix ? ends.data() : nullptr, scale, static_cast<Real>(sink),
                                          (th == 1 ? O1 : O2).data(), dv, 256, th);
          }
          CHECK((O1.array() == O2.array()).all());
          for (index_t i = 0; i < M; ++i) {
            const index_t ni = prefix ? ends[static_cast<std::size_t>(i)] : n;
            const auto ref = ref_query<Real>(Q, i, K, V, ni, scale, sink, std::ceil(double(ni) / 256.0) + 4);
            for (index_t c = 0; c < dv; ++c) {
              INFO("arch " << simd::arch_name<Arch>() << " M=" << M << " prefix=" << prefix << " i=" << i);
              CHECK(std::fabs(double(O1(i, c)) - ref.o[static_cast<std::size_t>(c)]) <=
                    ref.bound[static_cast<std::size_t>(c)]);
            }
          }
        });
      }
    }
  }
}

TEST_CASE("full causal attention in float (fast path): later keys leave earlier outputs bitwise unchanged",
          "[attention][kernels]") {
  const index_t n = 150, d = 20, dv = 9;
  const auto Q = kt::random_matrix<float>(n, d, 111u);
  const auto K0 = kt::random_matrix<float>(n, d, 112u);
  const auto V0 = kt::random_matrix<float>(n, dv, 113u);
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    matrix_t<float> base(n, dv);
    att::full_attention<float, Arch>(Q, K0, V0, att::attention_params{}, base);
    for (index_t u : {0, 1, 31, 32, 77, 127, 128, 149}) {
      matrix_t<float> K = K0, V = V0, O(n, dv);
      K.row(u).array() += 2.0f;
      V.row(u).array() -= 4.0f;
      att::full_attention<float, Arch>(Q, K, V, att::attention_params{}, O);
      INFO("arch " << simd::arch_name<Arch>() << " u=" << u);
      for (index_t t = 0; t < n; ++t) {
        if (t < u) CHECK((O.row(t).array() == base.row(t).array()).all());
        else CHECK((O.row(t) - base.row(t)).cwiseAbs().maxCoeff() > 1e-6f);
      }
    }
  });
}

namespace {
/// Runs the portable blocked kernel on every compiled SIMD path (the scalar tag has no batches).
template <class F>
void for_each_simd_arch(F&& f) {
  simd::for_each_arch([&](auto arch) {
    if constexpr (!simd::is_scalar_v<decltype(arch)>) f(arch);
  });
}
}  // namespace

TEMPLATE_TEST_CASE("portable blocked kernel: per-query ranges over one or two segments match the reference on "
                   "every compiled SIMD path",
                   "[attention][kernels][portable]", float, double) {
  using Real = TestType;
  struct shape {
    index_t M, n1, n2, d, dv;
  };
  // partial query tiles (M not a multiple of 2 lanes), key blocks with tails (n not a multiple of
  // 96 or 128), dv not a multiple of the 6- or 8-channel P·V tile, d = 1
  for (shape sh : {shape{8, 1, 0, 1, 1}, shape{17, 97, 0, 7, 5}, shape{33, 300, 41, 16, 6}, shape{70, 260, 129, 33, 13},
                   shape{40, 130, 300, 64, 48}}) {
    const auto Q = kt::random_matrix<Real>(sh.M, sh.d, 51u + static_cast<unsigned>(sh.M), 2.0);
    const auto K1 = kt::random_matrix<Real>(sh.n1, sh.d, 52u + static_cast<unsigned>(sh.n1));
    const auto V1 = kt::random_matrix<Real>(sh.n1, sh.dv, 53u + static_cast<unsigned>(sh.dv));
    const auto K2 = kt::random_matrix<Real>(std::max<index_t>(sh.n2, 1), sh.d, 54u);
    const auto V2 = kt::random_matrix<Real>(std::max<index_t>(sh.n2, 1), sh.dv, 55u);
    const Real scale = att::default_scale<Real>(sh.d);
    // ranges: a prefix growing with i (some empty), and a window [hi − w, hi) in the second segment
    std::vector<index_t> lo1(static_cast<std::size_t>(sh.M), 0), hi1(static_cast<std::size_t>(sh.M)),
        lo2(static_cast<std::size_t>(sh.M)), hi2(static_cast<std::size_t>(sh.M));
    for (index_t i = 0; i < sh.M; ++i) {
      const auto u = static_cast<std::size_t>(i);
      hi1[u] = (i * 7919 + 3) % (sh.n1 + 1);  // 0 … n1
      hi2[u] = sh.n2 == 0 ? 0 : (i * 613 + 5) % (sh.n2 + 1);
      lo2[u] = std::max<index_t>(0, hi2[u] - (1 + (i * 37) % 50));
    }
    for (int nseg : {1, 2}) {
      if (nseg == 2 && sh.n2 == 0) continue;
      for (double sink : {-inf, 0.75}) {
        const att::detail::kv_segment<Real> segs[2] = {
            {.K = K1.data(), .ldk = sh.d, .V = V1.data(), .ldv = sh.dv, .n = sh.n1, .lo = lo1.data(), .hi = hi1.data()},
            {.K = K2.data(), .ldk = sh.d, .V = V2.data(), .ldv = sh.dv, .n = sh.n2, .lo = lo2.data(), .hi = hi2.data()}};
        const matrix_t<double> K1d = K1.template cast<double>(), V1d = V1.template cast<double>(),
                               K2d = K2.template cast<double>(), V2d = V2.template cast<double>();
        for_each_simd_arch([&](auto arch) {
          using Arch = decltype(arch);
          matrix_t<Real> O1 = matrix_t<Real>::Constant(sh.M, sh.dv, Real(7)), O2(sh.M, sh.dv);
          att::detail::flash_xsimd<Real, Arch>(Q.data(), sh.d, sh.M, segs, nseg, sh.d, sh.dv, scale,
                                               static_cast<Real>(sink), O1.data(), sh.dv, 1);
          att::detail::flash_xsimd<Real, Arch>(Q.data(), sh.d, sh.M, segs, nseg, sh.d, sh.dv, scale,
                                               static_cast<Real>(sink), O2.data(), sh.dv, 2);
          INFO("arch " << simd::arch_name<Arch>() << " M=" << sh.M << " n1=" << sh.n1 << " n2=" << sh.n2
                       << " d=" << sh.d << " dv=" << sh.dv << " segments=" << nseg << " sink=" << sink);
          // the tile grouping changes with the thread count; each query's arithmetic does not
          CHECK((O1.array() == O2.array()).all());
          for (index_t i = 0; i < sh.M; ++i) {
            const auto u = static_cast<std::size_t>(i);
            std::vector<double> q(static_cast<std::size_t>(sh.d));
            for (index_t c = 0; c < sh.d; ++c) q[static_cast<std::size_t>(c)] = double(Q(i, c));
            std::vector<const double*> ks, vs;
            for (index_t j = lo1[u]; j < hi1[u]; ++j) {
              ks.push_back(K1d.data() + j * sh.d);
              vs.push_back(V1d.data() + j * sh.dv);
            }
            if (nseg == 2)
              for (index_t j = lo2[u]; j < hi2[u]; ++j) {
                ks.push_back(K2d.data() + j * sh.d);
                vs.push_back(V2d.data() + j * sh.dv);
              }
            const double blocks = std::ceil(double(sh.n1) / 64.0) + std::ceil(double(sh.n2) / 64.0) + 3;
            const auto ref = kt::reference_attend(q, ks, vs, sh.dv, double(scale), sink, unit_roundoff<Real>(), blocks);
            for (index_t c = 0; c < sh.dv; ++c) {
              INFO("i=" << i << " c=" << c << " keys=" << ks.size());
              CHECK(std::fabs(double(O1(i, c)) - ref.o[static_cast<std::size_t>(c)]) <=
                    ref.bound[static_cast<std::size_t>(c)]);
            }
          }
        });
      }
    }
  }
}

TEMPLATE_TEST_CASE("portable blocked kernel: a masked key never changes another query's output, and huge or "
                   "-inf-producing scores stay finite", "[attention][kernels][portable]", float, double) {
  using Real = TestType;
  const index_t M = 24, n = 200, d = 8, dv = 7;
  auto Q = kt::random_matrix<Real>(M, d, 61u);
  const auto K0 = kt::random_matrix<Real>(n, d, 62u);
  const auto V0 = kt::random_matrix<Real>(n, dv, 63u);
  Q.row(3) *= Real(400);  // scores in the thousands: the running max grows by huge steps
  std::vector<index_t> hi(static_cast<std::size_t>(M));
  for (index_t i = 0; i < M; ++i) hi[static_cast<std::size_t>(i)] = 1 + (i * 17) % n;
  for_each_simd_arch([&](auto arch) {
    using Arch = decltype(arch);
    const Real scale = att::default_scale<Real>(d);
    matrix_t<Real> base(M, dv);
    const att::detail::kv_segment<Real> seg0{.K = K0.data(), .ldk = d, .V = V0.data(), .ldv = dv, .n = n, .hi = hi.data()};
    att::detail::flash_xsimd<Real, Arch>(Q.data(), d, M, &seg0, 1, d, dv, scale, att::no_sink<Real>, base.data(), dv, 1);
    CHECK(base.array().isFinite().all());
    for (index_t u : {0, 1, 95, 96, 127, 128, 199}) {
      matrix_t<Real> K = K0, V = V0, O(M, dv);
      K.row(u).array() += Real(50);
      V.row(u).array() = std::numeric_limits<Real>::max();
      const att::detail::kv_segment<Real> seg{.K = K.data(), .ldk = d, .V = V.data(), .ldv = dv, .n = n, .hi = hi.data()};
      att::detail::flash_xsimd<Real, Arch>(Q.data(), d, M, &seg, 1, d, dv, scale, att::no_sink<Real>, O.data(), dv, 1);
      INFO("arch " << simd::arch_name<Arch>() << " u=" << u);
      for (index_t i = 0; i < M; ++i)
        if (hi[static_cast<std::size_t>(i)] <= u) CHECK((O.row(i).array() == base.row(i).array()).all());
    }
  });
}

TEMPLATE_TEST_CASE("softmax weights whose exponential would be subnormal are exactly 0 on every path",
                   "[attention][kernels][subnormal]", float, double) {
  // exp(a) for a < simd::exp_flush_below (min_exponent · ln 2) is subnormal: such a weight is 0.
  // One key scores `gap` above the others and carries value 0; the others carry 1: the output is
  // exactly 0 when their weights are flushed, and a subnormal number when they are not.
  using Real = TestType;
  const Real lim = simd::exp_flush_below<Real>;
  {
    std::vector<Real> x{0, lim - 1, lim + 1, Real(-1), -std::numeric_limits<Real>::infinity(), lim - 5, 0, lim + 2, lim - 1};
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      for (std::size_t n : {std::size_t(1), std::size_t(5), x.size()}) {
        std::vector<Real> y(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
        simd::exp_shift_sum<Real, Arch>(y.data(), Real(0), static_cast<index_t>(n));
        INFO("arch " << simd::arch_name<Arch>() << " n " << n);
        for (std::size_t i = 0; i < n; ++i) {
          if (x[i] < lim) CHECK(y[i] == Real(0));
          else CHECK(y[i] >= std::numeric_limits<Real>::min());
        }
      }
    });
  }
  const Real gap = -lim * Real(1.05) + 5;  // logit of the best key minus the others'
  for (index_t M : {1, 7, 64}) {
    const index_t n = 64;
    matrix_t<Real> Q = matrix_t<Real>::Constant(M, 1, Real(1)), K = matrix_t<Real>::Zero(n, 1),
                   V = matrix_t<Real>::Ones(n, 2);
    K(0, 0) = gap;
    V(0, 0) = 0;
    V(0, 1) = 0;
    simd::for_each_arch([&](auto arch) {
      using Arch = decltype(arch);
      matrix_t<Real> O(M, 2);
      att::full_attention<Real, Arch>(Q, K, V, att::attention_params{.scale = 1.0}, O);  // causal: all see key 0
      INFO("arch " << simd::arch_name<Arch>() << " M " << M);
      CHECK((O.array() == Real(0)).all());
    });
  }
}
