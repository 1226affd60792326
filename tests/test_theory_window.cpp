// Result 8 (raw sliding window) against the sweep's attention engine (sim::linear_model, the
// model run_sweep uses, with its raw window in the joint softmax). The sweep's needle task keeps
// the needle out of the raw window (tasks::needle_position reserves window + W tokens), so this
// test places the needle itself at controlled distances δ = N − p from the query (token N) and
// scores it exactly as the sweep does (score-space engine: noise scores N(0, |q|²) given q).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <boost/math/distributions/chi_squared.hpp>

#include "kvphase/core/rng.hpp"
#include "kvphase/sim/linear_model.hpp"
#include "kvphase/sim/normal.hpp"
#include "kvphase/theory/padding.hpp"
#include "kvphase/theory/predict.hpp"

using namespace kvphase;

namespace {

constexpr index_t N = 1024, d = 64, n_raw = 32, S = 4;
constexpr double sigma = 2.0;  // query noise: recall through the raw window is well below 1
constexpr std::uint64_t seed = 23;

compress::operator_spec peaked() {
  return {.grid = {.window = S, .stride = S}, .pool = compress::pool_kind::weights, .slot_weights = {0.05, 0.1, 0.25, 0.6}};
}

struct cell {
  index_t distance = 0;
  index_t phase = 0;        ///< (N − δ) mod S: slot of the needle in its chunk
  double trials = 0, hits = 0;
  double raw_hits = 0;      ///< trials where the raw needle token beats every non-needle item
  double entry_route = 0;   ///< hits only through the needle's entry (raw token alone would lose)
  [[nodiscard]] double recall() const { return hits / trials; }
};

// One needle trial per (δ, k): q = κ + σε, needle score q·κ, N noise scores, pooled like the sweep.
cell run_distance(index_t delta, index_t trials) {
  const auto op = peaked();
  const sim::linear_model m(op, n_raw);
  sim::linear_buffers buf;
  std::vector<float> s(static_cast<std::size_t>(N)), kappa(static_cast<std::size_t>(d)), eps(kappa.size());
  cell c;
  c.distance = delta;
  const index_t p = N - delta;
  c.phase = floor_mod(p, S);
  for (index_t k = 0; k < trials; ++k) {
    sim::normal_generator gen(seed, rng::combine(static_cast<std::uint64_t>(delta), static_cast<std::uint64_t>(k)));
    gen.fill(kappa.data(), d);
    gen.fill(eps.data(), d);
    double qq = 0, qk = 0;
    for (index_t i = 0; i < d; ++i) {
      const double q = kappa[static_cast<std::size_t>(i)] + sigma * eps[static_cast<std::size_t>(i)];
      qq += q * q;
      qk += q * kappa[static_cast<std::size_t>(i)];
    }
    gen.fill(s.data(), N);
    const float qn = static_cast<float>(std::sqrt(qq));
    for (auto& v : s) v *= qn;
    s[static_cast<std::size_t>(p)] = static_cast<float>(qk);
    m.pool(s.data(), nullptr, N, buf);
    float bt, bo;
    m.best_scores(buf, p, p + 1, bt, bo);
    c.trials += 1;
    c.hits += bt > bo ? 1 : 0;
    if (p >= N - n_raw) {
      const bool raw = s[static_cast<std::size_t>(p)] > bo;
      c.raw_hits += raw ? 1 : 0;
      c.entry_route += (bt > bo && !raw) ? 1 : 0;
    }
  }
  return c;
}

double se(double p, double n) { return std::sqrt(std::max(p * (1 - p), 0.25 / n) / n); }

}  // namespace

TEST_CASE("theory: inside the raw-window bound recall is phase-invariant, beyond it the phase pattern returns",
          "[theory]") {
  const index_t inv = theory::sweep_window_invariant_distance(n_raw);  // n: the needle at N − n is still raw
  REQUIRE(inv == n_raw);
  REQUIRE(theory::sweep_window_compressed_only_distance(n_raw) == n_raw + 1);
  constexpr index_t T = 2000;
  std::vector<cell> inside, outside;
  for (index_t j = 0; j < 2 * S; ++j) inside.push_back(run_distance(inv - j, T));          // δ = n … n − 7
  for (index_t j = 0; j < 2 * S; ++j) outside.push_back(run_distance(inv + 1 + j, T));     // δ = n + 1 … n + 8

  // Inside: homogeneity of the 8 recall rates (χ², 7 degrees of freedom).
  double hits = 0, tot = 0;
  for (const auto& c : inside) {
    hits += c.hits;
    tot += c.trials;
  }
  const double pbar = hits / tot;
  double chi2 = 0, route = 0, raw_hits = 0;
  for (const auto& c : inside) {
    chi2 += (c.hits - c.trials * pbar) * (c.hits - c.trials * pbar) / (c.trials * pbar * (1 - pbar));
    route += c.entry_route;
    raw_hits += c.raw_hits;
  }
  const double p_uniform = boost::math::cdf(boost::math::complement(boost::math::chi_squared(2.0 * S - 1), chi2));
  // The only route for a phase effect inside: a hit through the needle's entry where its raw
  // token alone would lose. It bounds the phase dependence of the recall inside the window.
  CHECK(route / tot < 0.005);
  CHECK(p_uniform > 1e-4);
  CHECK(pbar > 0.5);
  CHECK(pbar < 0.99);

  // Theory inside: P(raw needle > every other item), compared with the raw-route hits = the identity model over the n raw tokens with
  // the N/S − 1 other entries as extra items of σ = √Σw² (|q| = 1 units). Exact but for the
  // raw/entry correlation of the last n/S entries (predict.hpp) and the entry route (count above).
  theory::needle_model raw_model;
  raw_model.context = n_raw;
  raw_model.dim = d;
  raw_model.snr = 1.0 / (sigma * sigma);
  theory::recall_options ro;
  double sw = 0;
  for (double w : peaked().linear_slot_weights()) sw += w * w;
  ro.extra_distractors.push_back({std::sqrt(sw), static_cast<double>(N / S - 1)});
  const auto pin = theory::predict_recall_by_phase(
      compress::operator_spec{.grid = {.window = 1, .stride = 1}, .pool = compress::pool_kind::identity}, raw_model, ro);
  REQUIRE(pin.covered);
  const double pred_in = pin.phases[0].recall;
  const double raw_rate = raw_hits / tot;
  CHECK(std::abs(raw_rate - pred_in) <= std::max(5 * se(pred_in, tot), 0.005) + pin.phases[0].error);
  CHECK(std::abs(pbar - pred_in) <= std::max(5 * se(pred_in, tot), 0.005) + pin.phases[0].error + route / tot);

  // Outside: the sweep's own prediction (raw window as extra items), per phase of the needle.
  tasks::needle_config nc;
  nc.context = N;
  nc.dim = d;
  nc.query_noise = sigma;
  const auto pout = theory::predict_sweep_needle(peaked(), nc, n_raw, S);
  REQUIRE(pout.covered);
  double lo = 2, hi = -1, lo_n = 1, hi_n = 1;
  int bad = 0;
  for (const auto& c : outside) {
    const double pr = pout.compressed[static_cast<std::size_t>(c.phase)];
    const double e = pout.compressed_error[static_cast<std::size_t>(c.phase)];
    if (std::abs(c.recall() - pr) > std::max(5 * se(pr, c.trials), 0.005) + e) {
      ++bad;
      UNSCOPED_INFO("outside δ=" << c.distance << " phase " << c.phase << ": theory " << pr << " sim " << c.recall());
    }
    if (c.recall() < lo) {
      lo = c.recall();
      lo_n = c.trials;
    }
    if (c.recall() > hi) {
      hi = c.recall();
      hi_n = c.trials;
    }
  }
  CHECK(bad == 0);
  // Periodic with period S: δ and δ + S agree within 5 SE; the phase gap is ≥ 5 SE.
  for (index_t j = 0; j < S; ++j) {
    const auto& a = outside[static_cast<std::size_t>(j)];
    const auto& b = outside[static_cast<std::size_t>(j + S)];
    CHECK(std::abs(a.recall() - b.recall()) <= 5 * std::hypot(se(a.recall(), a.trials), se(b.recall(), b.trials)));
  }
  const double z_gap = (hi - lo) / std::hypot(se(hi, hi_n), se(lo, lo_n));
  CHECK(z_gap >= 5);

  std::printf("window n=%lld: inside (delta %lld..%lld) recall %.4f raw-route %.4f theory %.4f chi2 p=%.3f "
              "entry-route %.4f; ",
              static_cast<long long>(n_raw), static_cast<long long>(inv - 2 * S + 1), static_cast<long long>(inv), pbar,
              raw_rate, pred_in, p_uniform, route / tot);
  std::printf("outside (delta %lld..%lld) recall by delta:", static_cast<long long>(inv + 1),
              static_cast<long long>(inv + 2 * S));
  for (const auto& c : outside) std::printf(" %.3f", c.recall());
  std::printf(" theory by phase:");
  for (double v : pout.compressed) std::printf(" %.3f", v);
  std::printf(" gap z=%.1f\n", z_gap);
}

TEST_CASE("theory: raw-window distances in the sweep's convention", "[theory]") {
  CHECK(theory::sweep_window_invariant_distance(128) == 128);
  CHECK(theory::sweep_window_compressed_only_distance(128, 3) == 131);
  CHECK(theory::sweep_window_invariant_distance(16, 4) == theory::window_invariant_distance(17, 4));
  CHECK_THROWS_WITH(theory::sweep_window_invariant_distance(0), Catch::Contains("raw_window"));
  CHECK_THROWS_WITH(theory::sweep_window_compressed_only_distance(0), Catch::Contains("raw_window"));
  CHECK_THROWS_WITH(theory::sweep_window_invariant_distance(4, 6), Catch::Contains("key_span"));
}
