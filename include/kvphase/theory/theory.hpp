#pragma once
/// \file theory/theory.hpp
/// All of kvphase::theory: Gaussian recall integrals, extreme-value closed forms, span
/// straddling and two-stream overlap, content-logit gates, several heads, padding flips and the
/// raw window. Derivations in theory/*.md.

#include "kvphase/theory/gates.hpp"
#include "kvphase/theory/gaussian.hpp"
#include "kvphase/theory/gumbel.hpp"
#include "kvphase/theory/heads.hpp"
#include "kvphase/theory/padding.hpp"
#include "kvphase/theory/padding_task.hpp"
#include "kvphase/theory/predict.hpp"
#include "kvphase/theory/straddle.hpp"
