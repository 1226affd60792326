#pragma once
// Naive double-precision attention reference and its derived error bound, for the attention
// tests. Written from the formulas only: p_j = exp(l_j) / (exp(sink) + Σ exp(l_k)), o = Σ p_j v_j.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include <kvphase/core/types.hpp>

namespace kvphase::test {

template <class Real>
matrix_t<Real> random_matrix(index_t rows, index_t cols, unsigned seed, double sd = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> nd(0.0, sd);
  matrix_t<Real> m(rows, cols);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) m(i, j) = static_cast<Real>(nd(g));
  return m;
}

/// One query's reference result with the bound on each output channel.
struct ref_attention {
  std::vector<double> o;      // [dv]
  std::vector<double> bound;  // [dv] bound on |computed − o| for the Real the inputs came from
};

/// Reference attention of query q (d values) over rows (pointers to key rows and value rows).
/// `u` is the unit roundoff of the computing type; `blocks` the number of streaming blocks (each
/// may rescale once); `exp_ulps` the error of the exp used, in units of u.
inline ref_attention reference_attend(const std::vector<double>& q, const std::vector<const double*>& keys,
                                      const std::vector<const double*>& vals, index_t dv, double scale,
                                      double sink, double u, double blocks = 1.0, double exp_ulps = 4.0) {
  const index_t d = static_cast<index_t>(q.size());
  const std::size_t n = keys.size();
  ref_attention r;
  r.o.assign(static_cast<std::size_t>(dv), 0.0);
  r.bound.assign(static_cast<std::size_t>(dv), 0.0);
  if (n == 0) return r;
  std::vector<double> s(n), ds(n);
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < n; ++j) {
    double acc = 0, absacc = 0;
    for (index_t c = 0; c < d; ++c) {
      acc += q[static_cast<std::size_t>(c)] * keys[j][c];
      absacc += std::fabs(q[static_cast<std::size_t>(c)] * keys[j][c]);
    }
    s[j] = scale * acc;
    const double k = static_cast<double>(d + 2);
    ds[j] = scale * (k * u / (1 - k * u)) * absacc + u * std::fabs(s[j]);
    m = std::max(m, s[j]);
  }
  const double mm = std::max(m, sink);
  double l = 0, maxds = 0, spread = 0;
  std::vector<double> e(n);
  for (std::size_t j = 0; j < n; ++j) {
    e[j] = std::exp(s[j] - mm);
    l += e[j];
    maxds = std::max(maxds, ds[j]);
    spread = std::max(spread, std::fabs(s[j] - mm));
  }
  if (sink > -std::numeric_limits<double>::infinity()) l += std::exp(sink - mm);
  const double nn = static_cast<double>(n);
  // relative error of one unnormalised weight exp(ŝ_j − m̂): score error (twice: ŝ_j and the
  // shift), rounding of the subtraction, exp itself, and one rescale per block.
  const double eps_w = 2 * maxds + (blocks + 2) * u * (spread + std::fabs(sink > -1e300 ? sink - mm : 0.0)) +
                       (blocks + 2) * (exp_ulps + 2) * u;
  const double gam = (nn + blocks + 8) * u / (1 - (nn + blocks + 8) * u);
  for (index_t c = 0; c < dv; ++c) {
    double o = 0, a = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const double p = e[j] / l;
      o += p * vals[j][c];
      a += p * std::fabs(vals[j][c]);
    }
    r.o[static_cast<std::size_t>(c)] = o;
    // numerator and denominator each carry eps_w + gam; the final scaling adds a few u.
    r.bound[static_cast<std::size_t>(c)] = a * (2 * (eps_w + gam) + 4 * u) + 1e-300;
  }
  return r;
}

}  // namespace kvphase::test
