#pragma once
/// \file theory.hpp  Umbrella header of kvphase::theory: analytic per-phase recall (Gaussian,
/// Gumbel, straddling, gates, heads, padding, ...) and the theory column of a sweep
/// (`theory::predict_sweep_column`). Not part of <kvphase/kvphase.hpp>: it is built on Boost.Math
/// (quadrature, Owen's T, χ²), see <kvphase/stats.hpp> for the cost. Include it where
/// predictions are computed.
#include "kvphase/theory/sweep_column.hpp"
#include "kvphase/theory/theory.hpp"
