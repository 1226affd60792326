#pragma once
/// \file stats.hpp  Umbrella header of kvphase::stats: binomial intervals, uniformity and
/// periodicity tests, the phase gap, seed aggregation, bootstrap tables and the per-model summary.
/// Not part of <kvphase/kvphase.hpp>: it is built on Boost.Math, whose headers alone cost every
/// translation unit that includes them about 1.5 s and 200 MB at -O2, called or not
/// (docs/performance.md, "Compile cost"). Include it where statistics are computed.
#include "kvphase/stats/aggregate.hpp"
#include "kvphase/stats/bootstrap.hpp"
#include "kvphase/stats/gap.hpp"
#include "kvphase/stats/intervals.hpp"
#include "kvphase/stats/periodicity.hpp"
#include "kvphase/stats/summary.hpp"
#include "kvphase/stats/uniformity.hpp"
