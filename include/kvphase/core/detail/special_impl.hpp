#pragma once
/// \file core/detail/special_impl.hpp  Definitions of core/special.hpp on Boost.Math. Included by
/// core/special.hpp (header-only mode, inline) or by <kvphase/src.hpp> in one translation unit
/// (KVPHASE_SEPARATE_COMPILATION). Never include it directly.
#include <stdexcept>
#include <string>

#include <boost/math/distributions/beta.hpp>
#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/fisher_f.hpp>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <boost/math/quadrature/gauss_kronrod.hpp>
#include <boost/math/special_functions/erf.hpp>
#include <boost/math/special_functions/gamma.hpp>
#include <boost/math/special_functions/owens_t.hpp>

#include "kvphase/core/special.hpp"

namespace kvphase::special {

KVPHASE_SPECIAL_DECL double normal_upper_quantile(double p) {
  const boost::math::normal_distribution<double> nd;
  return boost::math::quantile(boost::math::complement(nd, p));
}

namespace detail {
template <class Policy>
double beta_quantile_with(double a, double b, double p, bool upper) {
  const boost::math::beta_distribution<double, Policy> d(a, b);
  return upper ? boost::math::quantile(boost::math::complement(d, p)) : boost::math::quantile(d, p);
}
}  // namespace detail

KVPHASE_SPECIAL_DECL double beta_quantile(double a, double b, double p, bool upper, bool evaluate_in_double) {
  using in_double = boost::math::policies::policy<boost::math::policies::promote_double<false>>;
  return evaluate_in_double ? detail::beta_quantile_with<in_double>(a, b, p, upper)
                            : detail::beta_quantile_with<boost::math::policies::policy<>>(a, b, p, upper);
}

KVPHASE_SPECIAL_DECL double chi_squared_upper_tail(double x, double dof) {
  const boost::math::chi_squared_distribution<double> d(dof);
  return boost::math::cdf(boost::math::complement(d, x));
}

KVPHASE_SPECIAL_DECL double chi_squared_quantile(double dof, double p, bool upper) {
  const boost::math::chi_squared_distribution<double> d(dof);
  return upper ? boost::math::quantile(boost::math::complement(d, p)) : boost::math::quantile(d, p);
}

KVPHASE_SPECIAL_DECL double fisher_f_upper_tail(double x, double d1, double d2) {
  const boost::math::fisher_f_distribution<double> f(d1, d2);
  return boost::math::cdf(boost::math::complement(f, x));
}

KVPHASE_SPECIAL_DECL double students_t_upper_quantile(double dof, double p) {
  const boost::math::students_t_distribution<double> t(dof);
  return boost::math::quantile(boost::math::complement(t, p));
}

KVPHASE_SPECIAL_DECL double binomial_half_cdf(double n, double k) {
  return boost::math::cdf(boost::math::binomial_distribution<double>(n, 0.5), k);
}

KVPHASE_SPECIAL_DECL double binomial_half_pdf(double n, double k) {
  return boost::math::pdf(boost::math::binomial_distribution<double>(n, 0.5), k);
}

KVPHASE_SPECIAL_DECL double lgamma(double x) { return boost::math::lgamma(x); }

KVPHASE_SPECIAL_DECL long double erfc_inv_no_throw(long double x) {
  using no_throw = boost::math::policies::policy<boost::math::policies::overflow_error<boost::math::policies::ignore_error>>;
  return boost::math::erfc_inv(x, no_throw{});
}

KVPHASE_SPECIAL_DECL double owens_t(double h, double a) { return boost::math::owens_t(h, a); }

KVPHASE_SPECIAL_DECL double gauss_kronrod(int points, function_ref f, double a, double b, unsigned max_depth, double tol,
                                          double* error) {
  using boost::math::quadrature::gauss_kronrod;
  switch (points) {
    case 15: return gauss_kronrod<double, 15>::integrate(f, a, b, max_depth, tol, error);
    case 31: return gauss_kronrod<double, 31>::integrate(f, a, b, max_depth, tol, error);
    case 61: return gauss_kronrod<double, 61>::integrate(f, a, b, max_depth, tol, error);
    default: throw std::invalid_argument("special::gauss_kronrod: points = " + std::to_string(points) + " (must be 15, 31 or 61)");
  }
}

}  // namespace kvphase::special
