// Core: error messages, the SIMD shim on every compiled path, and the counter-based RNG.
#include <catch2/catch.hpp>

#include <kvphase/core/error.hpp>
#include <kvphase/core/parallel.hpp>
#include <kvphase/core/rng.hpp>
#include <kvphase/core/simd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/tolerance.hpp"

using kvphase::index_t;
namespace simd = kvphase::simd;

TEST_CASE("error names parameter, value and rule", "[core]") {
  try {
    kvphase::require(false, "stride", 0, "must be >= 1");
    FAIL("no throw");
  } catch (const kvphase::error& e) {
    const std::string m = e.what();
    CHECK(m.find("stride") != std::string::npos);
    CHECK(m.find("= 0") != std::string::npos);
    CHECK(m.find("must be >= 1") != std::string::npos);
  }
  std::vector<double> v{1.0, std::nan(""), 2.0};
  CHECK_THROWS_WITH(kvphase::require_finite(v, "gate"), Catch::Contains("gate[1]") && Catch::Contains("finite"));
  CHECK_THROWS_AS(kvphase::require_finite(v, "gate"), std::invalid_argument);
}

TEMPLATE_TEST_CASE("require_finite names the first non-finite value in any block", "[core]", float, double) {
  // the fast path scans blocks of 4096; a value on either side of a block edge, in the last
  // partial block, and every kind of non-finite value must still be found and named
  const TestType bad[] = {std::numeric_limits<TestType>::quiet_NaN(), std::numeric_limits<TestType>::infinity(),
                          -std::numeric_limits<TestType>::infinity(), std::numeric_limits<TestType>::signaling_NaN()};
  for (std::size_t n : {std::size_t(1), std::size_t(4095), std::size_t(4096), std::size_t(4097), std::size_t(10000)}) {
    std::vector<TestType> v(n, TestType(1));
    v[n / 2] = std::numeric_limits<TestType>::max();  // finite extremes pass
    v[0] = -std::numeric_limits<TestType>::max();
    if (n > 2) v[1] = std::numeric_limits<TestType>::denorm_min();
    CHECK_NOTHROW(kvphase::require_finite(v, "w"));
    for (std::size_t i : {std::size_t(0), n / 2, std::size_t(4095), std::size_t(4096), n - 1}) {
      if (i >= n) continue;
      for (TestType b : bad) {
        std::vector<TestType> u = v;
        u[i] = b;
        if (i + 1 < n) u[n - 1] = b;  // a later bad value: the first is named
        CHECK_THROWS_WITH(kvphase::require_finite(u, "w"), Catch::Contains("w[" + std::to_string(i) + "]"));
      }
    }
  }
}

namespace {
// hsum_rows reduces L batches at once with hsum's additions: lane k equals hsum(rows[k]) bit for
// bit on every path, for values spread over 40 binades (so the order of the additions shows),
// signed zeros and infinities. Changing one addition's operands fails it.
template <class Real>
void hsum_rows_is_hsum() {
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    if constexpr (!simd::is_scalar_v<Arch>) {
      using B = xsimd::batch<Real, Arch>;
      constexpr std::size_t L = B::size;
      INFO("arch " << simd::arch_name<Arch>() << ", " << (sizeof(Real) == 4 ? "float" : "double"));
      std::mt19937 g(29);
      std::uniform_real_distribution<double> u(-1, 1);
      std::uniform_int_distribution<int> e(-20, 20), special(0, 40);
      for (int trial = 0; trial < 2000; ++trial) {
        alignas(64) Real buf[L * L];
        for (auto& x : buf) {
          const int sp = special(g);
          x = sp == 0 ? Real(-0.0) : sp == 1 ? Real(0) : static_cast<Real>(std::ldexp(u(g), e(g)));
        }
        if (trial % 100 == 7) buf[3] = std::numeric_limits<Real>::infinity();
        B rows[L];
        for (std::size_t k = 0; k < L; ++k) rows[k] = B::load_aligned(buf + k * L);
        alignas(64) Real got[L];
        simd::hsum_rows<Real, Arch>(rows).store_aligned(got);
        for (std::size_t k = 0; k < L; ++k) {
          const Real want = simd::hsum(rows[k]);
          INFO("trial " << trial << " row " << k);
          CHECK(std::memcmp(&got[k], &want, sizeof(Real)) == 0);
        }
      }
    }
  });
}
}  // namespace

TEST_CASE("hsum_rows equals hsum of each batch bit for bit on every path", "[simd]") {
  hsum_rows_is_hsum<float>();
  hsum_rows_is_hsum<double>();
}

namespace {
template <class Real>
std::vector<Real> random_vector(index_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d;
  std::vector<Real> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<Real>(d(g));
  return v;
}

template <class Real>
void check_kernels_all_paths() {
  const std::vector<index_t> sizes{0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 65, 127, 1000};
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    INFO("arch " << simd::arch_name<Arch>() << ", " << (sizeof(Real) == 4 ? "float" : "double"));
    for (index_t n : sizes) {
      INFO("n = " << n);
      auto a = random_vector<Real>(n, 1 + static_cast<unsigned>(n));
      auto b = random_vector<Real>(n, 1000 + static_cast<unsigned>(n));
      // dot against a double reference
      double ref = 0, sabs = 0;
      for (index_t i = 0; i < n; ++i) {
        ref += double(a[i]) * double(b[i]);
        sabs += std::abs(double(a[i]) * double(b[i]));
      }
      const double got = simd::dot<Real, Arch>(a.data(), b.data(), n);
      CHECK(std::abs(got - ref) <= kvphase::test::dot_error_bound<Real>(static_cast<std::size_t>(n), sabs) + 1e-300);
      // sum
      double sref = 0, sa = 0;
      for (index_t i = 0; i < n; ++i) {
        sref += a[i];
        sa += std::abs(double(a[i]));
      }
      CHECK(std::abs(simd::sum<Real, Arch>(a.data(), n) - sref) <=
            kvphase::test::dot_error_bound<Real>(static_cast<std::size_t>(n), sa) + 1e-300);
      // max (exact)
      if (n > 0) {
        CHECK(simd::max_value<Real, Arch>(a.data(), n) == *std::max_element(a.begin(), a.end()));
      } else {
        CHECK(simd::max_value<Real, Arch>(a.data(), n) == -std::numeric_limits<Real>::infinity());
      }
      // axpy: one fma (or mul+add) per element
      auto y = b;
      const Real alpha = Real(0.37);
      simd::axpy<Real, Arch>(alpha, a.data(), y.data(), n);
      for (index_t i = 0; i < n; ++i) {
        const double r = double(alpha) * double(a[i]) + double(b[i]);
        CHECK(std::abs(y[i] - r) <= kvphase::test::rel_bound<Real>(2) * (std::abs(double(alpha) * a[i]) + std::abs(double(b[i]))));
      }
      // max_inplace: exact
      auto z = b;
      simd::max_inplace<Real, Arch>(a.data(), z.data(), n);
      for (index_t i = 0; i < n; ++i) CHECK(z[i] == std::max(a[i], b[i]));
      // softmax: relative error per weight bounded by exp's accuracy plus n summation steps
      if (n > 0) {
        auto s = a;
        for (auto& x : s) x *= Real(3);
        const Real lse = simd::softmax_inplace<Real, Arch>(s.data(), n);
        double m = -INFINITY;
        for (index_t i = 0; i < n; ++i) m = std::max(m, 3.0 * double(a[i]));
        double den = 0;
        for (index_t i = 0; i < n; ++i) den += std::exp(3.0 * double(a[i]) - m);
        // exp in float/double is accurate to a few ulp (xsimd and libm); the argument x − m is
        // rounded once (relative error of exp(x) grows by |x|·u) and the sum adds n roundings.
        for (index_t i = 0; i < n; ++i) {
          const double arg = std::abs(3.0 * double(a[i]) - m);
          const double r = std::exp(3.0 * double(a[i]) - m) / den;
          const double tol = kvphase::test::rel_bound<Real>(8.0 + 2.0 * double(n) + arg);
          CHECK(std::abs(s[i] - r) <= tol * r + std::numeric_limits<Real>::denorm_min());
        }
        CHECK(std::abs(lse - (m + std::log(den))) <= kvphase::test::rel_bound<Real>(8.0 + 2.0 * double(n)) * (std::abs(m) + 1.0));
      }
    }
  });
}
}  // namespace

TEST_CASE("simd kernels match double references on every compiled path", "[core][simd]") {
  check_kernels_all_paths<float>();
  check_kernels_all_paths<double>();
}

TEST_CASE("simd paths compiled include the native one", "[core][simd]") {
  std::set<std::string> names;
  simd::for_each_arch([&](auto arch) { names.insert(simd::arch_name<decltype(arch)>()); });
  CHECK(names.count("scalar") == 1);
  CHECK(names.count(simd::default_arch::name()) == 1);
}

TEST_CASE("exp_shift_sum maps -inf to exactly zero", "[core][simd]") {
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    std::vector<float> x(37, -std::numeric_limits<float>::infinity());
    x[5] = 1.0f;
    x[36] = 1.0f;
    const float s = simd::exp_shift_sum<float, Arch>(x.data(), 1.0f, 37);
    CHECK(s == 2.0f);
    for (int i = 0; i < 37; ++i) CHECK(x[i] == ((i == 5 || i == 36) ? 1.0f : 0.0f));
  });
}

TEST_CASE("philox: known-answer vectors of Random123", "[core][rng]") {
  // Philox4x32-10 known answers (Random123 kat_vectors): counter = key = 0 and all-ones.
  kvphase::rng::philox_stream zero(0, 0);
  auto b = zero.block(0);
  CHECK(b[0] == 0x6627e8d5u);
  CHECK(b[1] == 0xe169c58du);
  CHECK(b[2] == 0xbc57ac4cu);
  CHECK(b[3] == 0x9b00dbd8u);
  kvphase::rng::philox_stream ones(0xffffffffffffffffULL, 0xffffffffffffffffULL);
  auto c = ones.block(0xffffffffffffffffULL);
  CHECK(c[0] == 0x408f276du);
  CHECK(c[1] == 0x41c83b0eu);
  CHECK(c[2] == 0xa20bc7c6u);
  CHECK(c[3] == 0x6d5451fdu);
}

TEST_CASE("philox: streams are addressable and independent of read order", "[core][rng]") {
  kvphase::rng::philox_stream a(42, 7);
  std::vector<std::uint32_t> seq;
  for (int i = 0; i < 40; ++i) seq.push_back(a.next_u32());
  // block 3 read alone equals words 12..15 of the sequence
  kvphase::rng::philox_stream b(42, 7);
  auto blk = b.block(3);
  for (int i = 0; i < 4; ++i) CHECK(blk[i] == seq[12 + i]);
  b.seek(3);
  for (int i = 0; i < 4; ++i) CHECK(b.next_u32() == seq[12 + i]);
  // a different stream differs
  kvphase::rng::philox_stream c(42, 8);
  CHECK(c.next_u32() != seq[0]);
}

TEST_CASE("philox: normal and uniform moments within z = 5", "[core][rng]") {
  kvphase::rng::philox_stream s(2026, 1);
  const int n = 400000;
  double m1 = 0, m2 = 0, m4 = 0, u1 = 0;
  std::uint64_t below_hits = 0;
  for (int i = 0; i < n; ++i) {
    const double z = s.normal();
    m1 += z;
    m2 += z * z;
    m4 += z * z * z * z;
    u1 += s.uniform();
    below_hits += (s.below(10) == 3);
  }
  m1 /= n;
  m2 /= n;
  m4 /= n;
  u1 /= n;
  CHECK(std::abs(m1) <= 5.0 * std::sqrt(1.0 / n));
  CHECK(std::abs(m2 - 1.0) <= 5.0 * std::sqrt(2.0 / n));
  CHECK(std::abs(m4 - 3.0) <= 5.0 * std::sqrt(96.0 / n));  // Var(z^4) = 105 − 9 = 96
  CHECK(std::abs(u1 - 0.5) <= 5.0 * std::sqrt(1.0 / 12.0 / n));
  const double p = double(below_hits) / n;
  CHECK(std::abs(p - 0.1) <= 5.0 * std::sqrt(0.09 / n));
}

TEST_CASE("parallel::for_each_index: every index once, merged, one thread runs nested code on one thread", "[core][parallel]") {
  for (const int threads : {1, 2}) {
    INFO("threads " << threads);
    std::vector<int> seen(1000, 0);
    std::int64_t merged = 0;
    int nested_max = 0;
    kvphase::parallel::for_each_index(
        1000, threads,
        [&](std::int64_t& local, std::int64_t i) {
          ++seen[static_cast<std::size_t>(i)];
          ++local;
#ifdef _OPENMP
          if (threads == 1) nested_max = std::max(nested_max, omp_get_max_threads());
#endif
        },
        [] { return std::int64_t{0}; }, [&](std::int64_t& local) { merged += local; }, [] {});
    CHECK(merged == 1000);
    CHECK(std::count(seen.begin(), seen.end(), 1) == 1000);
#ifdef _OPENMP
    // the serial path leaves no room for nested teams (Eigen's GEMM sizes its own by
    // omp_get_max_threads()), and gives the caller's setting back
    if (threads == 1) CHECK(nested_max == 1);
#endif
  }
#ifdef _OPENMP
  const int before = omp_get_max_threads();
  kvphase::parallel::for_each_index(
      3, 1, [](int&, std::int64_t) {}, [] { return 0; }, [](int&) {}, [] {});
  CHECK(omp_get_max_threads() == before);
#endif
}
