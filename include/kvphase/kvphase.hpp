#pragma once
/// \file kvphase.hpp  Umbrella header: everything public in kvphase except stats/, theory/, io/ and train/.
///
///   core/      errors, size limits and checked arithmetic, Eigen aliases, SIMD shim, counter-based RNG, deterministic parallel loops
///   compress/  chunk grid, operator spec, pooling, RMSNorm/RoPE, presets, cost of a pass (bytes, FLOPs)
///   attention/ kernels, full / compressed / selected attention, multi-head, toy models, cost of a call
///   tasks/     needle, key-value pairs, padding flip
///   sim/       Gaussian generator, key-space and score-space sweep engines, shards
///
/// Four areas have umbrellas of their own, because every translation unit that includes them
/// pays for them at -O2 whether it calls them or not (docs/performance.md, "Compile cost"):
///   <kvphase/stats.hpp>  binomial intervals, uniformity and periodicity tests, phase gap, seeds,
///                        the per-model summary (Boost.Math)
///   <kvphase/theory.hpp> analytic per-phase recall (Gaussian, Gumbel, straddling, gates, heads,
///                        ...) and the theory column of a sweep (Boost.Math)
///   <kvphase/io.hpp>     CSV / JSON with provenance, the sweep output format, shard merging,
///                        config JSON, and sim/report.hpp (sweep result → output)
///                        (nlohmann::json and the formatting code; includes stats and theory)
///   <kvphase/train.hpp>  trainable toy retrieval models, mitigations (Eigen products in double)
/// Include them in the files that compute statistics or predictions, write or read outputs, or
/// train. <kvphase/kvphase.hpp> includes no Boost.Math and no nlohmann::json.
#include "kvphase/version.hpp"

#include "kvphase/core/checked.hpp"
#include "kvphase/core/error.hpp"
#include "kvphase/core/fields.hpp"
#include "kvphase/core/parallel.hpp"
#include "kvphase/core/rng.hpp"
#include "kvphase/core/simd.hpp"
#include "kvphase/core/types.hpp"

#include "kvphase/compress/capabilities.hpp"
#include "kvphase/compress/compress.hpp"
#include "kvphase/compress/cost.hpp"
#include "kvphase/compress/grid.hpp"
#include "kvphase/compress/pool.hpp"
#include "kvphase/compress/position.hpp"
#include "kvphase/compress/presets.hpp"
#include "kvphase/compress/spec.hpp"

#include "kvphase/attention/compressed.hpp"
#include "kvphase/attention/cost.hpp"
#include "kvphase/attention/full.hpp"
#include "kvphase/attention/kernels.hpp"
#include "kvphase/attention/model.hpp"
#include "kvphase/attention/multihead.hpp"
#include "kvphase/attention/select.hpp"

#include "kvphase/tasks/kv_pairs.hpp"
#include "kvphase/tasks/needle.hpp"
#include "kvphase/tasks/padding.hpp"
#include "kvphase/tasks/task.hpp"

#include "kvphase/sim/general_model.hpp"
#include "kvphase/sim/linear_model.hpp"
#include "kvphase/sim/noise_scores.hpp"
#include "kvphase/sim/normal.hpp"
#include "kvphase/sim/shard.hpp"
#include "kvphase/sim/sweep.hpp"
#include "kvphase/sim/sweep_config.hpp"

