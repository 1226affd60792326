#pragma once
/// \file core/special.hpp  The Boost.Math special functions, distributions and quadrature that
/// stats/ and theory/ use, behind plain declarations, so that their headers include no Boost.Math.
///
/// Boost.Math costs a translation unit about 1.5 s and 200 MB at -O2 to parse, and its
/// initializer objects make GCC generate the code of every special function a header names, called
/// or not (docs/performance.md, "Compile cost"). Two ways to build:
/// - header-only (the default): this header includes core/detail/special_impl.hpp, and every
///   function below is an inline function defined there, on Boost.Math;
/// - KVPHASE_SEPARATE_COMPILATION defined for the whole program: the definitions are left out, and
///   exactly one translation unit of the program includes <kvphase/src.hpp>, which defines them.
///   Every other TU then parses no Boost.Math. Mixing the two modes in one program breaks the
///   one-definition rule.
/// Both modes run the same code, so results are the same bit for bit.
#include <type_traits>
#include <utility>

#ifdef KVPHASE_SEPARATE_COMPILATION
#define KVPHASE_SPECIAL_DECL
#else
#define KVPHASE_SPECIAL_DECL inline
#endif

namespace kvphase::special {

/// Non-owning reference to a callable double(double) (the integrand of `gauss_kronrod`): one
/// object pointer and one function pointer, so the quadrature is compiled once, not per lambda.
class function_ref {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<double, F&, double>)
  function_ref(F&& f) noexcept  // NOLINT(google-explicit-constructor): binds lambdas at the call
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, double x) -> double { return (*static_cast<std::remove_reference_t<F>*>(o))(x); }) {}
  double operator()(double x) const { return call_(object_, x); }

 private:
  void* object_;
  double (*call_)(void*, double);
};

/// Φ⁻¹(1 − p) of the standard normal (Boost `quantile(complement(normal, p))`).
KVPHASE_SPECIAL_DECL double normal_upper_quantile(double p);

/// Quantile of Beta(a, b): at lower-tail probability p, or (upper) at upper-tail probability p.
/// evaluate_in_double: Boost policy promote_double<false> (evaluate in double rather than long
/// double). Throws what Boost throws (std::domain_error, evaluation_error, ...).
KVPHASE_SPECIAL_DECL double beta_quantile(double a, double b, double p, bool upper, bool evaluate_in_double);

/// P(χ²(dof) > x) (Boost `cdf(complement(chi_squared(dof), x))`); dof > 0, x ≥ 0.
KVPHASE_SPECIAL_DECL double chi_squared_upper_tail(double x, double dof);

/// Quantile of χ²(dof) at lower-tail probability p, or (upper) at upper-tail probability p.
KVPHASE_SPECIAL_DECL double chi_squared_quantile(double dof, double p, bool upper);

/// P(F(d1, d2) > x) (Boost `cdf(complement(fisher_f(d1, d2), x))`); d1, d2 > 0, x ≥ 0.
KVPHASE_SPECIAL_DECL double fisher_f_upper_tail(double x, double d1, double d2);

/// The t quantile at upper-tail probability p with dof degrees of freedom (Boost
/// `quantile(complement(students_t(dof), p))`).
KVPHASE_SPECIAL_DECL double students_t_upper_quantile(double dof, double p);

/// P(X ≤ k) and P(X = k) of X ~ Binomial(n, 1/2) (Boost `cdf` / `pdf` of binomial(n, 0.5)).
KVPHASE_SPECIAL_DECL double binomial_half_cdf(double n, double k);
KVPHASE_SPECIAL_DECL double binomial_half_pdf(double n, double k);

/// ln Γ(x), thread-safe (Boost's lgamma, not the C library's, which writes `signgam`).
KVPHASE_SPECIAL_DECL double lgamma(double x);

/// erfc⁻¹(x) in long double, overflow reported as ±infinity instead of an exception.
KVPHASE_SPECIAL_DECL long double erfc_inv_no_throw(long double x);

/// Owen's T function T(h, a).
KVPHASE_SPECIAL_DECL double owens_t(double h, double a);

/// Boost's adaptive Gauss–Kronrod quadrature of f over [a, b] with `points` ∈ {15, 31, 61}
/// nodes, at most max_depth bisections, relative tolerance tol; *error (if not null) receives
/// the error estimate. Throws std::invalid_argument for another `points`.
KVPHASE_SPECIAL_DECL double gauss_kronrod(int points, function_ref f, double a, double b, unsigned max_depth, double tol,
                                          double* error = nullptr);

}  // namespace kvphase::special

#ifndef KVPHASE_SEPARATE_COMPILATION
#include "kvphase/core/detail/special_impl.hpp"
#endif
