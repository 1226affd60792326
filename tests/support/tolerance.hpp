#pragma once
// Tolerances derived from n and epsilon (never tuned to pass).
#include <cmath>
#include <cstddef>
#include <limits>

namespace kvphase::test {

/// Bound on |fl(Σ a_i b_i) − Σ a_i b_i| for a float dot product of length n accumulated in any
/// order (with FMA or not): γ_n · Σ|a_i b_i|, γ_n = n·u/(1 − n·u), u = eps/2 (Higham 3.1).
/// `extra` adds further rounding steps (e.g. a final scaling).
template <class Real>
double dot_error_bound(std::size_t n, double sum_abs, std::size_t extra = 0) {
  const double u = std::numeric_limits<Real>::epsilon() / 2.0;
  const double k = static_cast<double>(n + extra);
  return (k * u / (1.0 - k * u)) * sum_abs;
}

/// Relative error budget of `ops` correctly rounded operations in Real.
template <class Real>
double rel_bound(double ops) {
  const double u = std::numeric_limits<Real>::epsilon() / 2.0;
  return ops * u / (1.0 - ops * u);
}

}  // namespace kvphase::test
