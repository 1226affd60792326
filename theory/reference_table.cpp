// kvphase-theory-reference: high-precision reference values of the exact recall integral
// (Boost.Multiprecision cpp_bin_float_50 with adaptive Gauss–Kronrod), written to
// tests/data/theory_recall_reference.csv. Independent of include/kvphase/theory: it integrates
// the density of the target entries' maximum against the distractors' CDF,
//   recall = E_T[ P(max_D ≤ c)·P(Y ≤ c) + ∫_{c}^{∞} f_Y(x) G(x) dx ],
// c = the largest noise-free target score (atom), Y = max of the noisy target entries,
// whereas the library integrates 1 − ∫ g_D(x) F_T(x) dx in double precision.
//
// Usage: kvphase-theory-reference [output.csv [part parts]]  (parts split the cases across processes)

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/math/constants/constants.hpp>
#include <boost/math/quadrature/gauss_kronrod.hpp>
#include <boost/math/special_functions/erf.hpp>
#include <boost/math/special_functions/gamma.hpp>
#include <boost/multiprecision/cpp_bin_float.hpp>

using real = boost::multiprecision::cpp_bin_float_50;
using boost::math::quadrature::gauss_kronrod;

struct tgt {
  double A, v;
};
struct dst {
  double sigma, count;
};
struct ref_case {
  std::string name;
  int dim;
  double snr;  // 0 = infinite
  std::vector<tgt> targets;
  std::vector<dst> distractors;
};

static real Phi(const real& x) { return boost::math::erfc(-x / boost::math::constants::root_two<real>()) / 2; }
static real phi(const real& x) { return exp(-x * x / 2) / boost::math::constants::root_two_pi<real>(); }

static real G(const ref_case& c, const real& x) {
  real s = 0;
  for (const auto& d : c.distractors) s += real(d.count) * log(Phi(x / real(d.sigma)));
  return exp(s);
}

// P(max target > max distractor | T = t)
static real recall_given_t(const ref_case& c, const real& t, real& err) {
  real atom = -1e30;
  bool has_atom = false;
  std::vector<tgt> noisy;
  for (const auto& j : c.targets) {
    if (j.v == 0) {
      has_atom = true;
      atom = std::max(atom, real(j.A) * t);
    } else {
      noisy.push_back(j);
    }
  }
  real smax = 0;
  for (const auto& d : c.distractors) smax = std::max(smax, real(d.sigma));
  real hi = 14 * smax;
  for (const auto& j : noisy) hi = std::max(hi, real(j.A) * t + 14 * sqrt(real(j.v)));
  real lo = -12 * smax;
  {  // lower end of the distractor maximum's support: log G(x) = −100 (bisection in double)
    double a = -12 * static_cast<double>(smax), b = 14 * static_cast<double>(smax);
    for (int it = 0; it < 80; ++it) {
      const double mid = 0.5 * (a + b);
      double lg = 0;
      for (const auto& d : c.distractors) lg += d.count * std::log(0.5 * std::erfc(-mid / d.sigma / std::sqrt(2.0)));
      (lg < -100 ? a : b) = mid;
    }
    lo = a;
  }
  if (has_atom) lo = std::max(lo, atom);
  // f_Y(x) = Σ_j φ_j(x)/√v_j Π_{j'≠j} Φ_j'(x)
  auto f = [&](const real& x) {
    real s = 0;
    for (std::size_t j = 0; j < noisy.size(); ++j) {
      const real sd = sqrt(real(noisy[j].v));
      real p = phi((x - real(noisy[j].A) * t) / sd) / sd;
      for (std::size_t k = 0; k < noisy.size(); ++k)
        if (k != j) p *= Phi((x - real(noisy[k].A) * t) / sqrt(real(noisy[k].v)));
      s += p;
    }
    return s * G(c, x);
  };
  real r = 0;
  err = 0;
  if (!noisy.empty() && hi > lo) r = gauss_kronrod<real, 61>::integrate(f, lo, hi, 12, real(1e-19), &err);
  if (has_atom) {
    real py = 1;
    for (const auto& j : noisy) py *= Phi((atom - real(j.A) * t) / sqrt(real(j.v)));
    r += G(c, atom) * py;
  }
  return r;
}

static real chi_pdf(int d, const real& r) {
  const real k = d;
  return exp((k - 1) * log(r) - r * r / 2 - (k / 2 - 1) * log(real(2)) - boost::math::lgamma(k / 2));
}

static void evaluate(const ref_case& c, real& value, real& error) {
  const real rlo = std::max(real(1e-6), sqrt(real(c.dim)) - 9), rhi = sqrt(real(c.dim)) + 9;
  real inner_max = 0;
  if (c.snr == 0) {
    auto f = [&](const real& r) {
      real e;
      const real v = chi_pdf(c.dim, r) * recall_given_t(c, r, e);
      inner_max = std::max(inner_max, e);
      return v;
    };
    real e;
    value = gauss_kronrod<real, 61>::integrate(f, rlo, rhi, 10, real(1e-18), &e);
    error = e + inner_max;
    return;
  }
  const real a = sqrt(real(c.snr) / (1 + real(c.snr))), b = 1 / sqrt(1 + real(c.snr));
  // density of T = aρ + bZ by a convolution integral, then one outer integral over T
  auto fT = [&](const real& t) {
    auto g = [&](const real& r) { return chi_pdf(c.dim, r) * phi((t - a * r) / b) / b; };
    const real r0 = std::max(rlo, (t - 11 * b) / a), r1 = std::min(rhi, (t + 11 * b) / a);
    if (r1 <= r0) return real(0);
    real e;
    return gauss_kronrod<real, 61>::integrate(g, r0, r1, 8, real(1e-20), &e);
  };
  auto f = [&](const real& t) {
    real e;
    const real v = fT(t) * recall_given_t(c, t, e);
    inner_max = std::max(inner_max, e);
    return v;
  };
  real e;
  value = gauss_kronrod<real, 61>::integrate(f, a * rlo - 11 * b, a * rhi + 11 * b, 10, real(1e-18), &e);
  error = e + inner_max;
}

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "theory_recall_reference.csv";
  // hand-derived geometries (weights w normalised to sum 1; A = target weight, v = Σ other w²)
  const double p = 1.0 / 1.15;  // peaked (0.05, 1, 0.05, 0.05)/1.15: slot-1 weight
  const double q = 0.05 / 1.15;
  const std::vector<ref_case> cases = {
      {"full_attention_N256_d8", 8, 0, {{1.0, 0.0}}, {{1.0, 255}}},
      {"mean_W4_N1024_d32", 32, 0, {{0.25, 3.0 / 16}}, {{0.5, 255}}},
      {"peaked_W4_slot1_N2048_d64", 64, 0, {{p, 3 * q * q}}, {{std::sqrt(p * p + 3 * q * q), 511}}},
      {"peaked_W4_slot0_N2048_d64", 64, 0, {{q, p * p + 2 * q * q}}, {{std::sqrt(p * p + 3 * q * q), 511}}},
      {"mean_W4_span3_phase2_N4096_d48", 48, 0, {{0.5, 2.0 / 16}, {0.25, 3.0 / 16}}, {{0.5, 1022}}},
      {"two_classes_d40", 40, 0, {{0.3, 0.2}}, {{0.5, 1000}, {0.7, 3}}},
      {"peaked_W2_snr4_N1024_d16", 16, 4.0, {{0.8, 0.04}}, {{std::sqrt(0.68), 511}}},
      {"mean_W16_N131072_d128", 128, 0, {{1.0 / 16, 15.0 / 256}}, {{0.25, 8191}}},
      {"mean_W4_span4_whole_chunk_d16", 16, 0, {{1.0, 0.0}}, {{0.5, 1023}}},
  };
  const int part = argc > 3 ? std::stoi(argv[2]) : 0, parts = argc > 3 ? std::stoi(argv[3]) : 1;
  std::ofstream out(path);
  if (part == 0) out << "# recall integral reference (cpp_bin_float_50, adaptive Gauss-Kronrod 61); generated by kvphase-theory-reference\n";
  if (part == 0) out << "case,dim,snr,targets,distractors,recall,reference_error\n";
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    if (static_cast<int>(ci % static_cast<std::size_t>(parts)) != part) continue;
    const auto& c = cases[ci];
    real v, e;
    evaluate(c, v, e);
    std::ostringstream t, d;
    for (std::size_t i = 0; i < c.targets.size(); ++i)
      t << (i ? ";" : "") << std::setprecision(17) << c.targets[i].A << ":" << c.targets[i].v;
    for (std::size_t i = 0; i < c.distractors.size(); ++i)
      d << (i ? ";" : "") << std::setprecision(17) << c.distractors[i].sigma << ":" << c.distractors[i].count;
    out << c.name << "," << c.dim << "," << c.snr << "," << t.str() << "," << d.str() << ","
        << std::setprecision(25) << v << "," << std::setprecision(3) << e << "\n";
    std::cout << c.name << " " << std::setprecision(20) << v << " (err " << std::setprecision(3) << e << ")" << std::endl;
  }
  return 0;
}
