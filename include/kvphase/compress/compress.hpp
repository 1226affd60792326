#pragma once
/// \file compress/compress.hpp
/// Everything of the compression area: chunk grid, operator spec, pooling, post-processing,
/// presets and the cost model of a pass (bytes and FLOPs).

#include "kvphase/compress/cost.hpp"
#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/position.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"
