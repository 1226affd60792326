#pragma once
/// \file kvphase.hpp  Umbrella header: everything public in kvphase.
#include "kvphase/version.hpp"

#include "kvphase/core/error.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/spec.hpp"
