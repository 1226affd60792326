// sim/normal.hpp: the fast Gaussian generator. Same stream on every compiled SIMD path,
// accuracy against a double-precision Box–Muller of the same uniforms (bound derived below),
// moments and tail probabilities at 5-sigma bounds, reproducibility by (seed, stream).
#include <catch2/catch.hpp>

#include <kvphase/core/simd.hpp>
#include <kvphase/sim/normal.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "support/tolerance.hpp"

using kvphase::index_t;
namespace sim = kvphase::sim;
namespace simd = kvphase::simd;

namespace {

// Independent reference: xoshiro256++ written from its definition, double-precision Box–Muller.
struct ref_lane {
  std::uint64_t s[4];
  std::uint64_t next() {
    auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
    const std::uint64_t r = rotl(s[0] + s[3], 23) + s[0];
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
};

struct ref_block {
  double z[32];
  double r[16];
};

ref_block reference_block(ref_lane (&lanes)[16]) {
  std::uint32_t w[32];
  for (int l = 0; l < 16; ++l) {
    const std::uint64_t x = lanes[l].next();
    w[2 * l] = static_cast<std::uint32_t>(x);
    w[2 * l + 1] = static_cast<std::uint32_t>(x >> 32);
  }
  ref_block b{};
  for (int j = 0; j < 16; ++j) {
    // u1 = (2k + 1)·2^-24 from the low 23 bits of w1; the angle: x = (m2 − 3/2)·π/2 with
    // m2 = 1 + (low 23 bits of w2)·2^-23, reflected to π/2 − x when bit 30 of w2 is set and
    // turned by π when bit 31 is set.
    const double u1 = (2.0 * static_cast<double>(w[j] & 0x7fffffu) + 1.0) / 16777216.0;
    const double m2 = 1.0 + static_cast<double>(w[16 + j] & 0x7fffffu) / 8388608.0;
    const double x = (m2 - 1.5) * std::numbers::pi / 2;
    const double phi = (w[16 + j] & 0x40000000u) ? std::numbers::pi / 2 - x : x;
    const double sign = (w[16 + j] & 0x80000000u) ? -1.0 : 1.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    b.r[j] = r;
    b.z[j] = sign * r * std::cos(phi);
    b.z[16 + j] = sign * r * std::sin(phi);
  }
  return b;
}

template <class Arch>
std::vector<float> blocks(const sim::normal_state& st, index_t nblocks) {
  sim::normal_engine<Arch> e(st);
  typename sim::normal_engine<Arch>::block_type blk;
  std::vector<float> out(static_cast<std::size_t>(nblocks * 32));
  for (index_t b = 0; b < nblocks; ++b) {
    e.next(blk);
    if constexpr (simd::is_scalar_v<Arch>) {
      for (int j = 0; j < 32; ++j) out[static_cast<std::size_t>(b * 32 + j)] = blk[static_cast<std::size_t>(j)];
    } else {
      constexpr index_t L = sim::normal_engine<Arch>::L;
      for (std::size_t k = 0; k < blk.size(); ++k)
        blk[k].store_unaligned(out.data() + b * 32 + static_cast<index_t>(k) * L);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("normal generator: every SIMD path gives the scalar reference stream", "[sim][normal]") {
  const auto st = sim::seed_normal_state(12345, 678);
  const index_t nb = 4096;
  const auto ref = blocks<simd::scalar>(st, nb);
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    const auto got = blocks<Arch>(st, nb);
    INFO("arch " << simd::arch_name<Arch>());
    // Same uniforms, same operation order: equal up to fused-vs-unfused multiply-adds, which the
    // accuracy bound of the next test covers; with hardware FMA on both sides they are bitwise equal.
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - ref[i]));
    // Both are within 15.3u·r of the exact value (next test), r ≤ 5.77.
    CHECK(worst <= 2 * kvphase::test::rel_bound<float>(15.3) * 5.77);
    if constexpr (simd::is_scalar_v<Arch> || sim::detail::fused_fma_v<Arch>) CHECK(got == ref);
  });
}

TEST_CASE("normal generator: accuracy against double Box-Muller of the same uniforms", "[sim][normal]") {
  // Error budget per output z = r·cos θ (u = 2^-24):
  //   −2 ln u1 = A + B with A = −2 ln m = f·Q(f) and B = −2e·ln 2 (f, m, e exact):
  //     A: Q's approximation error ≤ 3.5u relative, its Horner chain of fmas (|f| ≤ 1/2) ≤ 2u;
  //     B: rounded −2 ln 2 and the product ≤ 2u; the final fma ≤ u. A and B have opposite signs
  //     when e < 0 and m > 1; at worst (e = −1, m → 3/2) |A|/(A+B) = 1.41 and |B|/(A+B) = 2.41:
  //     r² ≤ 1.41·5.5u + 2.41·2u + u = 13.6u relative, so r ≤ 6.8u + u (sqrt) = 7.8u;
  //   x = m2·fl(π/2) + fl(−3π/4) rounded once: ≤ 2u + 2u + u/2 = 4.5u absolute, which moves
  //     cos and sin by at most as much; their polynomials ≤ 2u absolute; swap and sign exact;
  //   final product r·c: ≤ u.  Total |Δz| ≤ (7.8 + 4.5 + 2 + 1)u·r = 15.3u·r.
  const double bound_rel = kvphase::test::rel_bound<float>(15.3);  // rel_bound takes ops·u
  const auto st = sim::seed_normal_state(99, 1);
  ref_lane lanes[16];
  for (int l = 0; l < 16; ++l)
    for (int w = 0; w < 4; ++w) lanes[l].s[w] = st.s[w][l];
  const index_t nb = 1 << 14;
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    INFO("arch " << simd::arch_name<Arch>());
    ref_lane ls[16];
    for (int l = 0; l < 16; ++l) ls[l] = lanes[l];
    const auto got = blocks<Arch>(st, nb);
    double worst = 0;
    for (index_t b = 0; b < nb; ++b) {
      const auto rb = reference_block(ls);
      for (int j = 0; j < 32; ++j) {
        const double err = std::abs(double(got[static_cast<std::size_t>(b * 32 + j)]) - rb.z[j]);
        const double r = rb.r[j % 16];
        worst = std::max(worst, err / r);
        if (err > bound_rel * r) {
          FAIL_CHECK("block " << b << " lane " << j << " err " << err << " r " << r);
          return;
        }
      }
    }
    INFO("arch " << simd::arch_name<Arch>() << ": worst |dz|/r = " << worst / (0x1.0p-24) << "u (bound "
                 << bound_rel / 0x1.0p-24 << "u)");
    CHECK(worst <= bound_rel);
  });
}

TEST_CASE("normal generator: moments, tails and correlations at 5-sigma bounds", "[sim][normal]") {
  const index_t n = index_t(1) << 22;
  std::vector<float> z(static_cast<std::size_t>(n));
  sim::normal_generator g(2026, 7);
  g.fill(z.data(), n);
  double m1 = 0, m2 = 0, m4 = 0, cs = 0, lag = 0;
  for (index_t i = 0; i < n; ++i) {
    const double x = z[static_cast<std::size_t>(i)];
    m1 += x;
    m2 += x * x;
    m4 += x * x * x * x;
  }
  // cos/sin partners (same r) and neighbouring lanes must be uncorrelated.
  for (index_t b = 0; b < n / 32; ++b) {
    for (int j = 0; j < 16; ++j) {
      cs += double(z[static_cast<std::size_t>(b * 32 + j)]) * z[static_cast<std::size_t>(b * 32 + 16 + j)];
      if (j + 1 < 16) lag += double(z[static_cast<std::size_t>(b * 32 + j)]) * z[static_cast<std::size_t>(b * 32 + j + 1)];
    }
  }
  const double nd = static_cast<double>(n);
  m1 /= nd;
  m2 /= nd;
  m4 /= nd;
  const double npair = nd / 2, nlag = nd / 32 * 15;
  CHECK(std::abs(m1) <= 5 * std::sqrt(1 / nd));
  CHECK(std::abs(m2 - 1) <= 5 * std::sqrt(2 / nd));
  CHECK(std::abs(m4 - 3) <= 5 * std::sqrt(96 / nd));  // Var z⁴ = E z⁸ − 9 = 105 − 9
  CHECK(std::abs(cs / npair) <= 5 / std::sqrt(npair));
  CHECK(std::abs(lag / nlag) <= 5 / std::sqrt(nlag));
  for (double a : {1.0, 2.0, 3.0, 4.0, 4.5}) {
    index_t c = 0;
    for (float x : z) c += std::abs(x) > a;
    const double p = std::erfc(a / std::sqrt(2.0));
    INFO("a = " << a << " count " << c << " expected " << p * nd);
    CHECK(std::abs(c / nd - p) <= 5 * std::sqrt(p * (1 - p) / nd));
  }
  // Truncation: |z| never exceeds sqrt(-2 ln 2^-24).
  const double zmax = std::sqrt(-2.0 * std::log(0x1.0p-24));
  float zabs = 0;
  for (float x : z) zabs = std::max(zabs, std::abs(x));
  CHECK(zabs <= zmax * (1 + 1e-6));
}

TEST_CASE("normal generator: keyed by (seed, stream), reproducible, block-granular fill", "[sim][normal]") {
  std::vector<float> a(1000), b(1000), c(1000);
  sim::normal_generator(5, 9).fill(a.data(), 1000);
  sim::normal_generator(5, 9).fill(b.data(), 1000);
  sim::normal_generator(5, 10).fill(c.data(), 1000);
  CHECK(a == b);
  index_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  CHECK(same < 5);
  std::vector<float> d(1000);
  sim::normal_generator(6, 9).fill(d.data(), 1000);
  CHECK(d != a);
  // fill(64) then fill(64) continues the stream; a partial fill discards the rest of its block.
  sim::normal_generator g(5, 9);
  std::vector<float> e(128);
  g.fill(e.data(), 64);
  g.fill(e.data() + 64, 64);
  CHECK(std::equal(e.begin(), e.end(), a.begin()));
  sim::normal_generator h(5, 9);
  std::vector<float> f(64);
  h.fill(f.data(), 10);
  h.fill(f.data() + 10, 32);
  CHECK(std::equal(f.begin(), f.begin() + 10, a.begin()));
  CHECK(std::equal(f.begin() + 10, f.begin() + 42, a.begin() + 32));
}

TEST_CASE("normal generator: fill_scaled is fill then one multiply, on every SIMD path", "[sim][normal]") {
  const float scale = 2.7182817f;
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    INFO("arch " << simd::arch_name<Arch>());
    for (const index_t n : {index_t(0), index_t(5), index_t(32), index_t(77), index_t(1000)}) {
      INFO("n " << n);
      std::vector<float> plain(static_cast<std::size_t>(n)), scaled(static_cast<std::size_t>(n));
      sim::normal_generator g(8, 3), h(8, 3);
      g.fill<Arch>(plain.data(), n);
      h.fill_scaled<Arch>(scaled.data(), n, scale);
      for (auto& v : plain) v *= scale;
      CHECK(scaled == plain);
      CHECK(std::memcmp(&g.state(), &h.state(), sizeof(sim::normal_state)) == 0);
    }
  });
}

TEST_CASE("normal generator: native AVX-512 transform and next2 give the generic stream bitwise", "[sim][normal]") {
  // The intrinsics path (getexp/getmant reduction, mask blends, ternary-logic signs) computes the
  // same values as the generic xsimd path; next2 — returning two blocks or handing them to a
  // consumer — is next twice. All hold exactly on every arch.
  const auto st = sim::seed_normal_state(31, 4);
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    INFO("arch " << simd::arch_name<Arch>());
    const index_t nb = 6 * 683;
    const auto generic = [&] {
      sim::normal_engine<Arch, false> e(st);
      typename sim::normal_engine<Arch, false>::block_type blk;
      std::vector<float> out;
      for (index_t b = 0; b < nb; ++b) {
        e.next(blk);
        if constexpr (simd::is_scalar_v<Arch>) {
          out.insert(out.end(), blk.begin(), blk.end());
        } else {
          for (const auto& x : blk)
            for (std::size_t l = 0; l < x.size; ++l) out.push_back(x.get(l));
        }
      }
      return out;
    }();
    sim::normal_engine<Arch> e(st);
    typename sim::normal_engine<Arch>::block_type a, b;
    std::vector<float> got;
    auto append = [&](const auto& blk) {
      if constexpr (simd::is_scalar_v<Arch>) {
        got.insert(got.end(), blk.begin(), blk.end());
      } else {
        for (const auto& x : blk)
          for (std::size_t l = 0; l < x.size; ++l) got.push_back(x.get(l));
      }
    };
    for (index_t i = 0; i < nb; i += 6) {  // next2, next2(consume), next, next
      e.next2(a, b);
      append(a);
      append(b);
      int calls = 0;
      e.next2([&](const auto& blk) {
        append(blk);
        ++calls;
      });
      CHECK(calls == 2);
      e.next(a);
      append(a);
      e.next(b);
      append(b);
    }
    CHECK(got == generic);
  });
}

TEST_CASE("normal generator: every word maps to the same normals on every path (exhaustive)", "[sim][normal]") {
  // All 2^23 radius inputs (low 23 bits of w1) and all 2^23 angle inputs (low 23 bits of w2),
  // the quadrant bits 30, 31 of w2 cycling through all four across lanes: the native transform,
  // the generic xsimd transform and the scalar reference agree bitwise where the fma is fused
  // (so the native range reduction u1 = m·2^e equals the generic path's exact one).
  simd::for_each_arch([&](auto arch) {
    using Arch = decltype(arch);
    if constexpr (!simd::is_scalar_v<Arch>) {
      using E = sim::normal_engine<Arch>;
      using G = sim::normal_engine<Arch, false>;
      using bi = typename E::batch_i;
      using bf = typename E::batch_f;
      constexpr index_t L = E::L;
      INFO("arch " << simd::arch_name<Arch>());
      alignas(64) std::int32_t w1[L], w2[L];
      alignas(64) float nc[L], ns[L], gc[L], gs[L];
      index_t mismatches = 0, ref_mismatches = 0;
      for (std::uint32_t k = 0; k < (1u << 23); k += static_cast<std::uint32_t>(L)) {
        for (index_t l = 0; l < L; ++l) {
          const std::uint32_t kk = k + static_cast<std::uint32_t>(l);
          w1[l] = static_cast<std::int32_t>(kk | (kk << 23));  // radius input k, high bits varied
          w2[l] = static_cast<std::int32_t>(kk | (static_cast<std::uint32_t>(l & 3) << 30) | ((k >> 7) & 0x3f800000u));
        }
        bf c1, s1, c2, s2;
        E::box_muller(bi::load_aligned(w1), bi::load_aligned(w2), c1, s1);
        G::box_muller(bi::load_aligned(w1), bi::load_aligned(w2), c2, s2);
        c1.store_aligned(nc);
        s1.store_aligned(ns);
        c2.store_aligned(gc);
        s2.store_aligned(gs);
        for (index_t l = 0; l < L; ++l) {
          mismatches += nc[l] != gc[l] || ns[l] != gs[l];
          if constexpr (sim::detail::fused_fma_v<Arch>) {
            float rc, rs;
            sim::detail::box_muller_scalar(static_cast<std::uint32_t>(w1[l]), static_cast<std::uint32_t>(w2[l]), rc, rs);
            ref_mismatches += rc != nc[l] || rs != ns[l];
          }
        }
      }
      CHECK(mismatches == 0);
      CHECK(ref_mismatches == 0);
    }
  });
}
